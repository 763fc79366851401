//! Normalisations: LayerNorm over channels (`layernorm.wgsl`), ResMLP's Affine
//! (`affine.wgsl`) and GroupNorm with one group (`groupnorm.wgsl`).

use crate::error::Result;
use crate::gpu::{Binding, Gpu, Kernel, RowKernel};

use super::{check_extent, check_extent_of, grid, row_kernel, workgroup_grid, workgroup_row_kernel, Op};

const LAYERNORM: &str = concat!(include_str!("../../shaders/row_common.wgsl"), include_str!("../../shaders/layernorm.wgsl"));
const AFFINE: &str = include_str!("../../shaders/affine.wgsl");
const GROUPNORM: &str = include_str!("../../shaders/groupnorm.wgsl");
const GROUPNORM_CHUNKS: &str = concat!(include_str!("../../shaders/row_common.wgsl"), include_str!("../../shaders/groupnorm_chunks.wgsl"));
/// params, x, weight, bias, y — LayerNorm's, Affine's and GroupNorm's by whole images.
const BINDINGS: &[Binding] = &[Binding::Uniform, Binding::Read, Binding::Read, Binding::Read, Binding::ReadWrite];
/// Chunked GroupNorm's statistics pass: params, x, partial sums.
const GROUPNORM_STATS: &[Binding] = &[Binding::Uniform, Binding::Read, Binding::ReadWrite];
/// Chunked GroupNorm's normalising pass: params, x, weight, bias, partial sums, y.
const GROUPNORM_APPLY: &[Binding] = &[Binding::Uniform, Binding::Read, Binding::Read, Binding::Read, Binding::Read, Binding::ReadWrite];

/// A strided view of rows: row r starts at element `off + r * ld` (f32, or f16 when `half`).
#[derive(Clone, Copy)]
pub struct Rows<'a> {
    pub buf: &'a wgpu::Buffer,
    pub off: usize,
    pub ld: usize,
    /// Stored as f16: an activation slot kept in f16 under `--precision f16` (gMLP's hidden).
    pub half: bool,
}

fn check_params(what: &str, d: usize, gamma: &wgpu::Buffer, beta: &wgpu::Buffer) -> Result<()> {
    check_extent(&format!("{what} weight"), gamma, 0, d as u64)?;
    check_extent(&format!("{what} bias"), beta, 0, d as u64)
}

/// `y[r, :] = LayerNorm(x[r, :]) * gamma + beta` for `rows` dense rows of width `d`.
pub fn layer_norm(
    gpu: &Gpu,
    rows: usize,
    d: usize,
    eps: f32,
    x: &wgpu::Buffer,
    gamma: &wgpu::Buffer,
    beta: &wgpu::Buffer,
    y: &wgpu::Buffer,
) -> Result<Op> {
    layer_norm_rows(gpu, rows, d, eps, Rows { buf: x, off: 0, ld: d, half: false }, gamma, beta, y)
}

/// [`layer_norm`] of a strided view of x (gMLP: the second half of each hidden row); y dense.
pub fn layer_norm_rows(
    gpu: &Gpu,
    rows: usize,
    d: usize,
    eps: f32,
    x: Rows,
    gamma: &wgpu::Buffer,
    beta: &wgpu::Buffer,
    y: &wgpu::Buffer,
) -> Result<Op> {
    check_extent_of("layer_norm x", x.buf, (x.off + (rows.max(1) - 1) * x.ld + d) as u64, if x.half { 2 } else { 4 })?;
    check_extent("layer_norm y", y, 0, (rows * d) as u64)?;
    check_params("layer_norm", d, gamma, beta)?;
    let (kernel, groups) = row_kernel(gpu, ["layernorm", "layernorm_wg", "layernorm_sg"], LAYERNORM, BINDINGS, rows)?;
    let kernel = kernel.flag("X_F16", x.half);
    let params = [rows as u32, d as u32, eps.to_bits(), x.ld as u32, x.off as u32, 0, 0, 0];
    Op::new(gpu, gpu.pipeline(&kernel)?, &params, &[x.buf, gamma, beta, y], groups)
}

/// `y[r, c] = alpha[c] * x[r, c] + beta[c]` (ResMLP's Affine).
pub fn affine(gpu: &Gpu, rows: usize, d: usize, x: &wgpu::Buffer, alpha: &wgpu::Buffer, beta: &wgpu::Buffer, y: &wgpu::Buffer) -> Result<Op> {
    check_extent("affine x", x, 0, (rows * d) as u64)?;
    check_extent("affine y", y, 0, (rows * d) as u64)?;
    check_params("affine", d, alpha, beta)?;
    let pipeline = gpu.pipeline(&Kernel::new("affine", AFFINE, BINDINGS))?;
    Op::new(gpu, pipeline, &[rows as u32, d as u32, 0, 0], &[x, alpha, beta, y], grid(gpu, rows * d)?)
}

/// GroupNorm with one group over each of `batch` images of [tokens, d] (channels-last). On a
/// real GPU an image of more than one chunk is normalised in chunks, so that batch 1 spreads
/// over the GPU: per chunk its mean and centred sum of squares into a scratch buffer, then per
/// chunk the image's statistics combined from all chunks and the normalising pass (two
/// dispatches of one `Op`, `groupnorm_chunks.wgsl`). Otherwise one workgroup per image
/// (`groupnorm.wgsl`): on CPU rasterisers the chunked form's extra dispatch cost more than it
/// spread (measured: the Fashion-MNIST PoolFormer's 20 GroupNorms on lavapipe).
pub fn group_norm(
    gpu: &Gpu,
    batch: usize,
    tokens: usize,
    d: usize,
    eps: f32,
    x: &wgpu::Buffer,
    gamma: &wgpu::Buffer,
    beta: &wgpu::Buffer,
    y: &wgpu::Buffer,
) -> Result<Op> {
    let n = (batch * tokens * d) as u64;
    check_extent("group_norm x", x, 0, n)?;
    check_extent("group_norm y", y, 0, n)?;
    check_params("group_norm", d, gamma, beta)?;
    let parts = group_norm_chunks(gpu.rows, tokens * d);
    if parts == 1 {
        let pipeline = gpu.pipeline(&Kernel::new("groupnorm", GROUPNORM, BINDINGS))?;
        let params = [batch as u32, tokens as u32, d as u32, eps.to_bits()];
        return Op::new(gpu, pipeline, &params, &[x, gamma, beta, y], [batch as u32, 1, 1]);
    }
    let partial = gpu.storage("group norm partial sums", 2 * batch * parts)?;
    let groups = workgroup_grid(gpu, batch * parts)?;
    let params = [batch as u32, tokens as u32, d as u32, eps.to_bits(), parts as u32, GROUPNORM_CHUNK as u32, 0, 0];
    let stats = workgroup_row_kernel(gpu, ["groupnorm_stats", "groupnorm_stats_sg"], GROUPNORM_CHUNKS, GROUPNORM_STATS).flag("STATS", true);
    let stats = gpu.pipeline(&stats)?;
    let apply = gpu.pipeline(&workgroup_row_kernel(gpu, ["groupnorm_chunks", "groupnorm_chunks_sg"], GROUPNORM_CHUNKS, GROUPNORM_APPLY))?;
    let sums = Op::new(gpu, stats, &params, &[x, &partial], groups)?;
    sums.then(Op::new(gpu, apply, &params, &[x, gamma, beta, &partial, y], groups)?)
}

/// Elements of one chunk of a chunked GroupNorm: 32 for each of a workgroup's 64 invocations.
pub const GROUPNORM_CHUNK: usize = 64 * 32;

/// How many chunks GroupNorm cuts an image of `n` elements into on a device whose row kernel is
/// `rows`: one (a workgroup per image) on CPU rasterisers, else one per [`GROUPNORM_CHUNK`].
pub fn group_norm_chunks(rows: RowKernel, n: usize) -> usize {
    match rows {
        RowKernel::Invocation => 1,
        RowKernel::Workgroup | RowKernel::Subgroup => n.div_ceil(GROUPNORM_CHUNK).max(1),
    }
}
