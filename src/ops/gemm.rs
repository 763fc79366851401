//! GEMM with fused epilogue: `C[b] (+)= act(A[b] · B[b] + bias) * scale`. Linear layers,
//! token mixing (weight · activations, no transpose pass) and convolutions (implicit im2col of
//! an NCHW image) are all this one op. Five kernels, chosen per adapter and (on real GPUs)
//! autotuned per shape class (see [`GemmVariant`], `gpu::tune`): `gemm_tiled.wgsl`
//! (double-buffered shared-memory tiles in three sizes, and split-K with `gemm_splitk.wgsl`)
//! on GPUs, and under f16 on adapters with
//! cooperative matrices `gemm_coop.wgsl` (tensor cores; both stage tiles in the order of
//! `gemm_tile_slots.wgsl`); on CPU rasterisers `gemm_texture.wgsl` (weights, and activations
//! where mirrored, from textures, subgroups: lavapipe), `gemm_subgroup.wgsl` (the same from
//! buffers) and `gemm_register.wgsl` (no subgroups: SwiftShader). The subgroup kernels work at
//! any subgroup size from 4 to 64 lanes. All share `gemm_common.wgsl`.

use crate::error::{Error, Result};
use crate::gpu::{Binding, GemmVariant, Gpu, Kernel, Resource};

use super::{check_extent, check_extent_of, groups, ActTexture, Op};
use crate::gpu::Precision;

const REGISTER: &str = concat!(include_str!("../../shaders/gemm_common.wgsl"), include_str!("../../shaders/gemm_register.wgsl"));
const SUBGROUP: &str = concat!(include_str!("../../shaders/gemm_common.wgsl"), include_str!("../../shaders/gemm_subgroup.wgsl"));
const TEXTURE: &str = concat!(include_str!("../../shaders/gemm_common.wgsl"), include_str!("../../shaders/gemm_texture.wgsl"));
const TEXTURE_BINDINGS: &[Binding] =
    &[Binding::Uniform, Binding::Read, Binding::Read, Binding::Read, Binding::Read, Binding::ReadWrite, Binding::Texture];
const TEXTURE_A_BINDINGS: &[Binding] =
    &[Binding::Uniform, Binding::Read, Binding::Read, Binding::Read, Binding::Read, Binding::ReadWrite, Binding::Texture, Binding::Texture];
const TILED: &str = concat!(
    include_str!("../../shaders/gemm_common.wgsl"),
    include_str!("../../shaders/gemm_tile_slots.wgsl"),
    include_str!("../../shaders/gemm_tiled.wgsl")
);
const SPLITK: &str = concat!(include_str!("../../shaders/gemm_common.wgsl"), include_str!("../../shaders/gemm_splitk.wgsl"));
const SPLITK_BINDINGS: &[Binding] =
    &[Binding::Uniform, Binding::Read, Binding::Read, Binding::Read, Binding::Read, Binding::ReadWrite, Binding::Read];
const COOP: &str = concat!(
    include_str!("../../shaders/gemm_common.wgsl"),
    include_str!("../../shaders/gemm_tile_slots.wgsl"),
    include_str!("../../shaders/gemm_coop.wgsl")
);
const BINDINGS: &[Binding] = &[Binding::Uniform, Binding::Read, Binding::Read, Binding::Read, Binding::Read, Binding::ReadWrite];

/// Which axis of C a per-channel vector (bias, layer scale) runs along.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// One value per column n (a Linear layer's bias over output features).
    N,
    /// One value per row m (token-mixing bias, which is per output token).
    M,
}

/// A strided matrix inside a buffer: element (i, j) of batch b is at `off + b*bs + i*ld + j`
/// (in elements: f32, or f16 when `half`).
#[derive(Clone, Copy)]
pub struct Operand<'a> {
    pub buf: &'a wgpu::Buffer,
    pub off: u32,
    pub ld: u32,
    pub bs: u32,
    /// Stored as f16 (`array<f16>`): an activation slot kept in f16 under `--precision f16`.
    pub half: bool,
}

impl<'a> Operand<'a> {
    /// A dense row-major f32 matrix with `ld` columns, batch stride `bs` (0 = shared weights).
    pub fn new(buf: &'a wgpu::Buffer, ld: usize, bs: usize) -> Self {
        Operand { buf, off: 0, ld: ld as u32, bs: bs as u32, half: false }
    }

    /// The same matrix stored as f16 (`buf` holds 2-byte values, see [`Gpu::storage_f16`]).
    pub fn f16(self) -> Self {
        Operand { half: true, ..self }
    }

    fn precision(&self) -> Precision {
        if self.half {
            Precision::F16
        } else {
            Precision::F32
        }
    }
}

/// A weight matrix [rows, cols] (PyTorch's [out, in]) on the GPU: storage buffers, and also
/// rgba32float textures when the adapter's GEMM variant reads weights from textures.
///
/// A matrix larger than the adapter's storage-binding limit is uploaded in blocks of whole
/// rows, each within the limit; a GEMM with such a weight records one dispatch per block, each
/// writing its slice of C's columns (or rows) — so no weight is ever too large to bind as long
/// as one row fits.
pub struct Matrix {
    blocks: Vec<MatrixBlock>,
    pub rows: usize,
    pub cols: usize,
    /// How the values are stored (buffers `array<f16>` and rgba16float textures for f16).
    pub precision: Precision,
}

/// Rows `row0 .. row0 + rows` of a [`Matrix`], in their own buffer (and texture).
pub struct MatrixBlock {
    pub buf: wgpu::Buffer,
    pub tex: Option<wgpu::TextureView>,
    pub row0: usize,
    pub rows: usize,
}

impl Matrix {
    /// Uploads `data` (row-major [rows, cols]) in the device's precision, with textures when
    /// the adapter's GEMM reads them.
    pub fn upload(gpu: &Gpu, label: &str, data: &[f32], rows: usize, cols: usize) -> Result<Matrix> {
        Self::upload_as(gpu, label, data, rows, cols, gpu.gemm == GemmVariant::Texture, gpu.precision)
    }

    /// [`Self::upload`] with textures made (when the adapter's limits allow) or not, whatever
    /// the adapter's default variant — for benchmarks and tests that run every variant.
    pub fn upload_with(gpu: &Gpu, label: &str, data: &[f32], rows: usize, cols: usize, textures: bool) -> Result<Matrix> {
        Self::upload_as(gpu, label, data, rows, cols, textures, gpu.precision)
    }

    /// [`Self::upload_with`] in a given precision (f16 needs the device's `SHADER_F16`).
    pub fn upload_as(gpu: &Gpu, label: &str, data: &[f32], rows: usize, cols: usize, textures: bool, precision: Precision) -> Result<Matrix> {
        if precision == Precision::F16 && !gpu.has_f16() {
            return Err(Error::Gpu(format!("weight `{label}`: f16 storage needs shader-f16, which {} lacks", gpu.describe())));
        }
        let elem = precision.bytes();
        if rows == 0 || cols == 0 || data.len() != rows * cols {
            return Err(Error::Input(format!("weight `{label}`: {} values do not make a {rows}x{cols} matrix", data.len())));
        }
        let limit = gpu.binding_limit();
        // (An f16 block is padded to whole words: keep one value's room for that.)
        let room = if precision == Precision::F16 { limit.saturating_sub(2) } else { limit };
        let per_block = (room / (cols as u64 * elem)).min(rows as u64) as usize;
        if per_block == 0 {
            return Err(Error::Gpu(format!(
                "weight `{label}`: one row of {cols} values needs {} bytes, over the adapter's binding limit of {limit} bytes",
                cols as u64 * elem
            )));
        }
        let mut blocks = Vec::with_capacity(rows.div_ceil(per_block));
        for row0 in (0..rows).step_by(per_block) {
            let n = per_block.min(rows - row0);
            let part = &data[row0 * cols..(row0 + n) * cols];
            let name = if n == rows { label.to_string() } else { format!("{label}[{row0}..{}]", row0 + n) };
            let tex = if textures { gpu.matrix_texture_as(&name, part, n, cols, precision) } else { None };
            let buf = match precision {
                Precision::F32 => gpu.storage_init(&name, part)?,
                Precision::F16 => gpu.storage_f16(&name, part)?,
            };
            blocks.push(MatrixBlock { buf, tex, row0, rows: n });
        }
        // The texture kernel needs every block as a texture; otherwise all read buffers.
        if blocks.iter().any(|b| b.tex.is_none()) {
            blocks.iter_mut().for_each(|b| b.tex = None);
        }
        Ok(Matrix { blocks, rows, cols, precision })
    }

    /// The row blocks (one unless the matrix passes the binding limit); never empty.
    pub fn blocks(&self) -> &[MatrixBlock] {
        &self.blocks
    }

    fn first(&self) -> &MatrixBlock {
        &self.blocks[0]
    }
}

/// Which operand of a GEMM is a [`Matrix`] (whose row blocks then split the GEMM): B along N
/// (a Linear layer, a convolution, transposed token mixing) or A along M (token mixing).
#[derive(Clone, Copy)]
enum Weight<'a> {
    None,
    B(&'a Matrix),
    A(&'a Matrix),
}

pub use crate::net::ConvGeometry;

#[derive(Clone, Copy)]
pub struct Gemm<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    pub a: Operand<'a>,
    pub b: Operand<'a>,
    pub b_trans: bool,
    /// The weight B as a texture (only with `b_trans`); used by the texture kernel.
    pub b_tex: Option<&'a wgpu::TextureView>,
    /// A stored as [K, M] (token mixing computed transposed).
    pub a_trans: bool,
    /// A mirrored in a texture (texture kernel only): rows stacked over the batch.
    pub a_tex: Option<&'a ActTexture>,
    pub c: Operand<'a>,
    /// C stored as [N, M].
    pub c_trans: bool,
    pub bias: Option<(&'a wgpu::Buffer, Axis)>,
    pub scale: Option<(&'a wgpu::Buffer, Axis)>,
    pub gelu: bool,
    pub residual: bool,
    /// Multiplies the result by a matrix laid out like C (gMLP's spatial gate u ⊙ v).
    pub gate: Option<Operand<'a>>,
    pub conv: Option<ConvGeometry>,
    /// The convolution input is channels-last [images, ih, iw, cin] rather than NCHW.
    pub conv_nhwc: bool,
    weight: Weight<'a>,
    /// First global row / column of this part of a split GEMM (indexes bias and scale vectors).
    m0: usize,
    n0: usize,
}

impl<'a> Gemm<'a> {
    /// The plain form: `C[b][m, n] = A[b][m, k] · B[b][k, n]`, B row-major [K, N].
    pub fn new(batch: usize, m: usize, n: usize, k: usize, a: Operand<'a>, b: Operand<'a>, c: Operand<'a>) -> Self {
        Gemm {
            m,
            n,
            k,
            batch,
            a,
            b,
            b_trans: false,
            b_tex: None,
            a_trans: false,
            a_tex: None,
            c,
            c_trans: false,
            bias: None,
            scale: None,
            gelu: false,
            residual: false,
            gate: None,
            conv: None,
            conv_nhwc: false,
            weight: Weight::None,
            m0: 0,
            n0: 0,
        }
    }

    /// `C[m, n] = A[m, k] · W[n, k]^T`: a Linear layer on row-major activations.
    pub fn linear(m: usize, a: Operand<'a>, w: &'a Matrix, c: Operand<'a>) -> Self {
        let mut g = Gemm::new(1, m, w.rows, w.cols, a, Operand::new(&w.first().buf, w.cols, 0), c);
        g.b_trans = true;
        g.b_tex = w.first().tex.as_ref();
        g.weight = Weight::B(w);
        g
    }

    /// `C[b][t, d] = W[t, s] · X[b][s, d]`: a Linear layer applied across the rows (tokens) of
    /// each image's [tokens, channels] matrix X, reading X in its own layout. With a weight
    /// texture it is computed as `C^T = X^T · W^T`, so the weight is the texture operand.
    /// Per-output-token vectors (bias, scale) then run along N instead of M: use [`Self::token_axis`].
    pub fn across_tokens(batch: usize, w: &'a Matrix, x: Operand<'a>, channels: usize, c: Operand<'a>) -> Self {
        let first = w.first();
        match &first.tex {
            Some(tex) => {
                let mut g = Gemm::new(batch, channels, w.rows, w.cols, x, Operand::new(&first.buf, w.cols, 0), c);
                g.a_trans = true;
                g.c_trans = true;
                g.b_trans = true;
                g.b_tex = Some(tex);
                g.weight = Weight::B(w);
                g
            }
            None => {
                let mut g = Gemm::new(batch, w.rows, channels, w.cols, Operand::new(&first.buf, w.cols, 0), x, c);
                g.weight = Weight::A(w);
                g
            }
        }
    }

    /// The axis that indexes output tokens in an [`Self::across_tokens`] GEMM.
    pub fn token_axis(&self) -> Axis {
        if self.c_trans {
            Axis::N
        } else {
            Axis::M
        }
    }
    /// The axis that indexes channels in an [`Self::across_tokens`] GEMM (for a layer scale).
    pub fn channel_axis(&self) -> Axis {
        if self.c_trans {
            Axis::M
        } else {
            Axis::N
        }
    }
    /// A bias per output token of an [`Self::across_tokens`] GEMM.
    pub fn token_bias(self, buf: &'a wgpu::Buffer) -> Self {
        let axis = self.token_axis();
        self.bias(buf, axis)
    }
    /// A layer scale per channel of an [`Self::across_tokens`] GEMM, when there is one.
    pub fn channel_scale(self, buf: Option<&'a wgpu::Buffer>) -> Self {
        match buf {
            Some(b) => {
                let axis = self.channel_axis();
                self.scale(b, axis)
            }
            None => self,
        }
    }
    /// A convolution over `images` NCHW images as an implicit-im2col GEMM: C[(img, oy, ox), co]
    /// = sum over (ci, ky, kx) of input · W[co, ci, ky, kx]. Output is channels-last.
    /// The weight is [cout, cin * kh * kw], PyTorch's conv weight flattened.
    pub fn conv(images: usize, g: ConvGeometry, input: &'a wgpu::Buffer, w: &'a Matrix, c: &'a wgpu::Buffer) -> Result<Self> {
        let (oh, ow) = g.out_hw()?;
        if w.cols != g.cin * g.kh * g.kw {
            return Err(Error::Input(format!("conv weight has {} columns, the geometry needs {}", w.cols, g.cin * g.kh * g.kw)));
        }
        let mut gemm = Gemm::linear(images * oh * ow, Operand::new(input, w.cols, 0), w, Operand::new(c, w.rows, 0));
        gemm.conv = Some(g);
        Ok(gemm)
    }

    /// [`Self::conv`] over a channels-last input [images, ih, iw, cin] — the token layout of a
    /// hierarchical model's stage, so a downsampling convolution reads the tokens in place.
    pub fn conv_nhwc(images: usize, g: ConvGeometry, input: &'a wgpu::Buffer, w: &'a Matrix, c: &'a wgpu::Buffer) -> Result<Self> {
        let mut gemm = Self::conv(images, g, input, w, c)?;
        gemm.conv_nhwc = true;
        Ok(gemm)
    }
    /// Lets the texture kernel gather A from `t`, which must mirror A's buffer (copied there
    /// by [`Op::copy_to_texture`] earlier in the same forward pass).
    pub fn a_texture(mut self, t: Option<&'a ActTexture>) -> Self {
        self.a_tex = t;
        self
    }
    pub fn bias(mut self, buf: &'a wgpu::Buffer, axis: Axis) -> Self {
        self.bias = Some((buf, axis));
        self
    }
    pub fn scale(mut self, buf: &'a wgpu::Buffer, axis: Axis) -> Self {
        self.scale = Some((buf, axis));
        self
    }
    pub fn gelu(mut self) -> Self {
        self.gelu = true;
        self
    }
    /// Multiplies each result element by the element at the same (m, n) of `g` (same
    /// transposition as C). Excludes [`Self::scale`], whose binding it uses.
    pub fn gate(mut self, g: Operand<'a>) -> Self {
        self.gate = Some(g);
        self
    }
    /// Adds to what C holds (a residual connection) instead of overwriting it.
    pub fn residual(mut self) -> Self {
        self.residual = true;
        self
    }

    /// The kernel for this GEMM: `lanes` is the subgroup width the variant works at (the
    /// adapter's smallest for the subgroup kernels, its largest for coop), `min_lanes` the
    /// adapter's smallest, `frag` the coop kernels' fragment size (16 or 8), `wg_bytes` the
    /// adapter's workgroup memory.
    fn kernel(&self, variant: GemmVariant, lanes: u32, min_lanes: u32, frag: u32, wg_bytes: u32) -> Kernel {
        let (name, source) = match variant {
            GemmVariant::Register => ("gemm_register", REGISTER),
            GemmVariant::Subgroup => ("gemm_subgroup", SUBGROUP),
            GemmVariant::Texture => ("gemm_texture", TEXTURE),
            GemmVariant::Tiled | GemmVariant::Tiled128 | GemmVariant::Tiled128K16 | GemmVariant::Tiled32 | GemmVariant::SplitK => {
                ("gemm_tiled", TILED)
            }
            GemmVariant::Coop | GemmVariant::Coop128 | GemmVariant::CoopEmulated => ("gemm_coop", COOP),
        };
        // Split-K's first pass writes raw partial sums: no epilogue (the second pass has it).
        let epilogue = variant != GemmVariant::SplitK;
        // Trusted: `check` validates every extent, and the kernels clamp or guard all indices.
        let a_tex = variant == GemmVariant::Texture && self.a_tex_usable();
        let bindings = match (variant, a_tex) {
            (GemmVariant::Texture, true) => TEXTURE_A_BINDINGS,
            (GemmVariant::Texture, false) => TEXTURE_BINDINGS,
            _ => BINDINGS,
        };
        let mut kernel = Kernel::new(name, source, bindings)
            .trusted()
            .flag("B_TRANS", self.b_trans)
            .flag("A_TRANS", self.a_trans)
            .flag("A_TEX", a_tex)
            .flag("A_TRANS_TEX", a_tex && self.a_trans)
            .flag("A_CONV", self.conv.is_some())
            .flag("A_NHWC", self.conv_nhwc)
            .flag("A_F16", self.a_precision() == Precision::F16)
            .flag("B_F16", self.b_precision() == Precision::F16)
            .flag("SPLIT_K", variant == GemmVariant::SplitK);
        if epilogue {
            kernel = self.epilogue_flags(kernel);
        }
        if variant == GemmVariant::Register {
            let (rows, cols) = register_tile(self.conv.is_some());
            kernel = kernel.define("ROWS", rows).define("COLS", cols).define("LANES", REGISTER_LANES);
        }
        if let Some(fr) = variant.coop_fragments() {
            kernel = self.run_flags(kernel).flag("EMULATE", variant == GemmVariant::CoopEmulated);
            for (key, v) in coop_sizes(lanes, min_lanes, frag, fr, wg_bytes) {
                kernel = kernel.define(key, v);
            }
        } else if variant.uses_subgroups() {
            let (rows, cols) = subgroup_tile(variant, self.a_trans, lanes);
            kernel = kernel.define("ROWS", rows).define("COLS", cols).define("LANES", lanes);
        }
        if let Some([tm, tn, rm, rn, bk]) = variant.tile() {
            kernel = self
                .run_flags(kernel)
                .define("TM", tm)
                .define("TN", tn)
                .define("RM", rm)
                .define("RN", rn)
                .define("BK", bk)
                .define("WX", tn / rn)
                .define("WY", tm / rm)
                .define("TA_VEC4", 2 * bk * tm / 4)
                .define("TB_VEC4", 2 * bk * tn / 4)
                .define("ACC_VEC4", rm * rn / 4);
        }
        kernel
    }

    /// Whether A and B can be staged in runs of 4 along their contiguous dimension (the tiled
    /// and coop kernels' A_VEC and B_VEC): where that dimension is a multiple of 4, so that no
    /// run straddles the operand's edge. Not the implicit im2col view.
    fn runs_of_4(&self) -> (bool, bool) {
        let a = self.conv.is_none() && (if self.a_trans { self.m } else { self.k }) % 4 == 0;
        let b = (if self.b_trans { self.k } else { self.n }) % 4 == 0;
        (a, b)
    }

    /// Whether those runs are also aligned vec4s of A's and B's bindings (A_VEC4, B_VEC4: the
    /// operand is bound as an array of vec4, one 16-byte load per run, 8 at f16): offset,
    /// leading dimension and batch stride multiples of 4 as well. Every run then starts at a
    /// multiple of 4, and `check` has put the operand's last (aligned) vec4 inside the buffer.
    fn vec4_runs(&self) -> (bool, bool) {
        let (a, b) = self.runs_of_4();
        let aligned = |o: &Operand| o.off.is_multiple_of(4) && o.ld.is_multiple_of(4) && o.bs.is_multiple_of(4);
        (a && aligned(&self.a), b && aligned(&self.b))
    }

    /// The runs-of-4 flags of the tiled and coop kernels.
    fn run_flags(&self, kernel: Kernel) -> Kernel {
        let (a_vec, b_vec) = self.runs_of_4();
        let (a_vec4, b_vec4) = self.vec4_runs();
        kernel.flag("A_VEC", a_vec).flag("B_VEC", b_vec).flag("A_VEC4", a_vec4).flag("B_VEC4", b_vec4)
    }

    /// The flags of the epilogue and of C's layout.
    fn epilogue_flags(&self, kernel: Kernel) -> Kernel {
        kernel
            .flag("C_TRANS", self.c_trans)
            .flag("GATE", self.gate.is_some())
            .flag("BIAS_N", matches!(self.bias, Some((_, Axis::N))))
            .flag("BIAS_M", matches!(self.bias, Some((_, Axis::M))))
            .flag("SCALE_N", matches!(self.scale, Some((_, Axis::N))))
            .flag("SCALE_M", matches!(self.scale, Some((_, Axis::M))))
            .flag("GELU", self.gelu)
            .flag("RESIDUAL", self.residual)
            .flag("C_F16", self.c.half)
            .flag("G_F16", self.gate.is_some_and(|g| g.half))
    }

    /// How many parts split-K cuts this GEMM's k range into: enough workgroups for a large GPU
    /// (~256, from the 64x64 output tiles over the batch), each part at least two k steps of
    /// 16, at most 16 parts, the scratch of partial sums within one binding, and one row of
    /// the reduction's grid per row of C. 1: not worth splitting (plain `tiled`).
    fn split_count(&self, gpu: &Gpu) -> u32 {
        let (m, n, k, batch) = (self.m as u64, self.n as u64, self.k as u64, self.batch as u64);
        let tiles = m.div_ceil(64) * n.div_ceil(64) * batch;
        let mut parts = (256 / tiles.max(1)).min(k / 32).clamp(1, 16);
        while parts > 1 && parts * batch * m * n * 4 > gpu.binding_limit() {
            parts -= 1;
        }
        if m > gpu.limits.max_compute_workgroups_per_dimension as u64 {
            parts = 1;
        }
        parts as u32
    }

    /// How A is stored: a weight's precision when A is the weight (token mixing), else the
    /// activation operand's.
    fn a_precision(&self) -> Precision {
        match self.weight {
            Weight::A(w) => w.precision,
            _ => self.a.precision(),
        }
    }
    /// How B is stored: a weight's precision when B is the weight (a linear layer, a
    /// convolution, transposed token mixing), else the activation operand's.
    fn b_precision(&self) -> Precision {
        match self.weight {
            Weight::B(w) => w.precision,
            _ => self.b.precision(),
        }
    }

    /// The A texture covers exactly A: dense, unit-offset rows stacked over the batch.
    fn a_tex_usable(&self) -> bool {
        let Some(t) = self.a_tex else { return false };
        // The kernel reads the texture unchecked: its real size must be what it says.
        if t.texture.width() as usize * 4 != t.cols || (t.texture.height() as usize) < t.rows {
            return false;
        }
        // A mirror is an rgba32float copy of an f32 buffer.
        if self.a.half {
            return false;
        }
        let (rows, cols) = if self.a_trans { (self.k, self.m) } else { (self.m, self.k) };
        self.conv.is_none()
            && self.a.off == 0
            && self.a.ld as usize == cols
            && t.cols == cols
            && (self.batch == 1 || self.a.bs as usize == rows * cols)
            && t.rows >= rows * self.batch
    }

    fn check(&self) -> Result<()> {
        let (m, n, k, batch) = (self.m as u64, self.n as u64, self.k as u64, self.batch as u64);
        if m == 0 || n == 0 || k == 0 || batch == 0 {
            return Err(Error::Input(format!("GEMM with an empty dimension: m={m} n={n} k={k} batch={batch}")));
        }
        let last = |o: &Operand, rows: u64, cols: u64| o.off as u64 + (batch - 1) * o.bs as u64 + (rows - 1) * o.ld as u64 + cols;
        let (a_rows, a_cols) = if self.a_trans { (k, m) } else { (m, k) };
        let (c_rows, c_cols) = if self.c_trans { (n, m) } else { (m, n) };
        match &self.conv {
            Some(g) => {
                // The kernel reads the image through this geometry (clamping to ih-1, iw-1, and
                // dividing by kh*kw), so it must be whole, and m and k must be what it makes.
                if [g.cin, g.ih, g.iw, g.kh, g.kw, g.stride].contains(&0) {
                    return Err(Error::Input(format!("convolution with an empty dimension: {g:?}")));
                }
                let (oh, ow) = g.out_hw()?;
                let per = (oh * ow) as u64;
                if m % per != 0 || k != (g.cin * g.kh * g.kw) as u64 {
                    return Err(Error::Input(format!("convolution GEMM m={m} k={k} does not fit {g:?} ({oh}x{ow} outputs an image)")));
                }
                let images = m / per;
                let end = self.a.off as u64 + images * (g.cin * g.ih * g.iw) as u64;
                check_extent_of("gemm A (conv input)", self.a.buf, end, self.a_precision().bytes())?
            }
            None => check_extent_of("gemm A", self.a.buf, last(&self.a, a_rows, a_cols), self.a_precision().bytes())?,
        }
        let b_end = if self.b_trans { last(&self.b, n, k) } else { last(&self.b, k, n) };
        check_extent_of("gemm B", self.b.buf, b_end, self.b_precision().bytes())?;
        if let (Some(view), true) = (self.b_tex, self.b_trans && self.b.bs == 0) {
            // The texture kernel (which takes it only for a shared, transposed weight, as
            // `build_with` decides) reads texel (k / 4, n) of it unchecked: [N, ceil(K / 4)] at least.
            let t = view.texture();
            if (t.width() as u64) < k.div_ceil(4) || (t.height() as u64) < n {
                return Err(Error::Input(format!(
                    "gemm B texture is {} texels by {} rows; a {n}x{k} weight needs {} by {n}",
                    t.width(),
                    t.height(),
                    k.div_ceil(4)
                )));
            }
        }
        check_extent_of("gemm C", self.c.buf, last(&self.c, c_rows, c_cols), self.c.precision().bytes())?;
        if let Some(g) = &self.gate {
            if self.scale.is_some() {
                return Err(Error::Input("GEMM with both a gate and a layer scale".into()));
            }
            check_extent_of("gemm gate", g.buf, last(g, c_rows, c_cols), g.precision().bytes())?;
        }
        for (what, v) in [("bias", self.bias), ("scale", self.scale)] {
            if let Some((buf, axis)) = v {
                check_extent(what, buf, 0, if axis == Axis::N { self.n0 as u64 + n } else { self.m0 as u64 + m })?;
            }
        }
        if [m, n, k, batch].iter().any(|&d| d > u32::MAX as u64 / 4) {
            return Err(Error::Input(format!("GEMM too large for 32-bit indexing: m={m} n={n} k={k}")));
        }
        Ok(())
    }

    /// The GEMM with the device's kernel for it: the autotuned choice for its shape class where
    /// the device tunes (real GPUs; see `gpu::tune`), else the adapter's default.
    pub fn build(self, gpu: &Gpu) -> Result<Op> {
        self.build_cancellable(gpu, &crate::exec::Cancel::new())
    }

    /// [`Self::build`] whose autotuning (natively, the first build of a shape class times the
    /// kernels) stops with [`Error::Cancelled`] at its next check once `cancel` is set, the
    /// class left without a choice: what a forward pass's plan build uses.
    pub fn build_cancellable(self, gpu: &Gpu, cancel: &crate::exec::Cancel) -> Result<Op> {
        let variant = if gpu.tuning.enabled() { self.tuned(gpu, cancel)? } else { gpu.gemm };
        self.build_with(gpu, variant)
    }

    pub fn build_with(self, gpu: &Gpu, variant: GemmVariant) -> Result<Op> {
        // The texture kernel needs the weight as a texture; any other operand pair falls back
        // to the buffer-only kernel of the same family.
        let variant = match (variant, self.b_tex) {
            (GemmVariant::Texture, Some(_)) if self.b_trans && self.b.bs == 0 => GemmVariant::Texture,
            (GemmVariant::Texture, _) => GemmVariant::Subgroup,
            (v, _) => v,
        };
        gpu.supports(variant).map_err(|why| Error::Gpu(format!("the {} GEMM: {why}", variant.name())))?;
        let min_lanes = gpu.subgroup_lanes().unwrap_or(0);
        // The coop kernel works at the device's fragment size; its emulated double at 16, as
        // on NVIDIA and AMD.
        let (lanes, frag) = match variant {
            GemmVariant::Coop | GemmVariant::Coop128 => gpu.coop_shape().unwrap_or((0, 16)),
            _ => (min_lanes, 16),
        };
        let parts = self.parts()?;
        for part in &parts {
            part.check()?;
        }
        let wg_bytes = gpu.limits.max_compute_workgroup_storage_size;
        let pipeline = gpu.pipeline(&self.kernel(variant, lanes, min_lanes, frag, wg_bytes))?;
        if variant == GemmVariant::SplitK {
            return self.build_split_k(gpu, &parts, pipeline);
        }
        let runs: Vec<_> = parts.iter().map(|part| part.dispatch(variant, lanes, frag, 1)).collect::<Result<_>>()?;
        Op::dispatches(gpu, pipeline, &runs)
    }

    /// Split-K: per part of the GEMM, the tiled kernel's partial sums into a scratch buffer,
    /// then the reduction into C with the epilogue (one part: the plain tiled kernel).
    fn build_split_k(&self, gpu: &Gpu, parts: &[Gemm<'a>], partial: std::sync::Arc<crate::gpu::Pipeline>) -> Result<Op> {
        let reduce = gpu.pipeline(&self.epilogue_flags(Kernel::new("gemm_splitk", SPLITK, SPLITK_BINDINGS).trusted()))?;
        let mut op: Option<Op> = None;
        for part in parts {
            let splits = part.split_count(gpu);
            let next = if splits <= 1 {
                let whole = gpu.pipeline(&part.kernel(GemmVariant::Tiled, 0, 0, 0, 0))?;
                Op::dispatches(gpu, whole, &[part.dispatch(GemmVariant::Tiled, 0, 0, 1)?])?
            } else {
                let scratch = gpu.storage("split-K partial sums", splits as usize * part.batch * part.m * part.n)?;
                let (params, mut resources, mut workgroups) = part.dispatch(GemmVariant::SplitK, 0, 0, splits)?;
                workgroups[2] *= splits;
                let mut first = resources.clone();
                first[4] = Resource::Buffer(&scratch);
                let sums = Op::dispatches(gpu, partial.clone(), &[(params.clone(), first, workgroups)])?;
                resources.push(Resource::Buffer(&scratch));
                let rows = [groups(part.n as u32, 64), part.m as u32, part.batch as u32];
                sums.then(Op::dispatches(gpu, reduce.clone(), &[(params, resources, rows)])?)?
            };
            op = Some(match op {
                Some(o) => o.then(next)?,
                None => next,
            });
        }
        op.ok_or_else(|| Error::Gpu("internal: a GEMM with no parts".into()))
    }

    /// This GEMM's shape class for the autotuner: operand layout and sizes (see `gpu::tune`).
    pub fn shape_class(&self) -> String {
        let layout = match (self.conv.is_some(), self.b_trans, self.a_trans || self.c_trans) {
            (true, _, _) => "conv",
            (false, true, false) => "linear",
            (false, true, true) => "tokens-t",
            (false, false, _) => "tokens",
        };
        crate::gpu::tune::class(layout, self.m * self.batch, self.n, self.k)
    }

    /// The device's cached choice for this GEMM's shape class, or (the first time) the
    /// fastest of the kernels the device can run, timed on this GEMM's own operands. Safe at
    /// plan-building time: the GEMM writes only its output, which the forward pass overwrites.
    fn tuned(&self, gpu: &Gpu, cancel: &crate::exec::Cancel) -> Result<GemmVariant> {
        let class = self.shape_class();
        let mut failed = None;
        if let Some(v) = gpu.tuning.get(&class).filter(|&v| gpu.supports(v).is_ok()) {
            // A cached kernel that computes in f16 was checked against the tiled kernel by the
            // process that chose it, but the cache is only a file: check it again, once per
            // class and process, before trusting it; if it fails, time the class afresh.
            if !v.computes_in_f16() || gpu.tuning.is_checked(&class) {
                return Ok(v);
            }
            match self.agrees_with_tiled(gpu, |g| g.build_with(gpu, v)) {
                Ok(()) => {
                    gpu.tuning.mark_checked(&class);
                    return Ok(v);
                }
                Err(why) => {
                    gpu.tuning.reject(&class, v, &format!("cached, {why}"));
                    // Forgotten, so the class is timed again (here, or by the browser's
                    // `tune_async`) without that kernel, and not checked again on each build.
                    gpu.tuning.forget(&class);
                    failed = Some(v);
                }
            }
        }
        if !gpu.tuning.times_at_build() {
            // The browser: `GpuExec::autotune` times this class later, when it can wait.
            return Ok(gpu.gemm);
        }
        let variants = self.candidate_variants(gpu, failed);
        let v = time_ops_blocking(gpu, &class, &variants, |v| self.candidate(gpu, &class, v), cancel)?.unwrap_or(gpu.gemm);
        gpu.tuning.record(&class, v);
        Ok(v)
    }

    /// The kernels the autotuner times for this GEMM: every one the device can run (without a
    /// weight texture the texture kernel is the subgroup one, so it is left out), less `failed`
    /// (a cached choice that just failed its check is not checked twice).
    fn candidate_variants(&self, gpu: &Gpu, failed: Option<GemmVariant>) -> Vec<GemmVariant> {
        gpu.gemm_variants().into_iter().filter(|&v| !(v == GemmVariant::Texture && self.b_tex.is_none()) && Some(v) != failed).collect()
    }

    /// This GEMM by kernel `v`, built for the autotuner: None where the driver cannot compile
    /// or run it (simply not a candidate), and for a tensor-core kernel until its results
    /// matched the tiled kernel's (CI tests them on one driver's cooperative matrices,
    /// lavapipe's; each device proves it here, and again in each later process that reads the
    /// choice from the cache: [`Self::tuned`]).
    fn candidate(&self, gpu: &Gpu, class: &str, v: GemmVariant) -> Option<Op> {
        let op = self.build_with(gpu, v).ok()?;
        if v.computes_in_f16() {
            if let Err(why) = self.agrees_with_tiled(gpu, |g| g.build_with(gpu, v)) {
                gpu.tuning.reject(class, v, &why);
                return None;
            }
            gpu.tuning.mark_checked(class);
        }
        Some(op)
    }

    /// Times the kernels for this GEMM's shape class unless the device already has a choice
    /// for it, waiting for the GPU without blocking (the browser's autotuning, after a plan was
    /// built with the default kernel); true when it timed. Safe as [`Self::build`]'s timing is:
    /// the GEMM writes only its output, which a forward pass overwrites. Stops with
    /// [`Error::Cancelled`] once `cancel` is set, at its next check (before each kernel is
    /// built and each timed submission), the class left without a choice.
    pub async fn tune_async(&self, gpu: &Gpu, cancel: &crate::exec::Cancel) -> Result<bool> {
        let class = self.shape_class();
        if !gpu.tuning.enabled() || gpu.tuning.get(&class).is_some_and(|v| gpu.supports(v).is_ok()) {
            return Ok(false);
        }
        let variants = self.candidate_variants(gpu, None);
        let fastest = time_ops(gpu, &class, &variants, |v| self.candidate(gpu, &class, v), cancel).await?;
        gpu.tuning.record(&class, fastest.unwrap_or(gpu.gemm));
        Ok(true)
    }

    /// Whether `build` (this GEMM by a kernel that computes in f16) gives the tiled kernel's
    /// results, within f16's rounding, on this GEMM's weights, shapes and layout but made-up
    /// activations: at plan-building time the real activation buffers hold zeros, on which any
    /// two kernels agree. The activations, the gate and C (which a residual GEMM adds to) are
    /// fresh buffers of the same sizes, filled with values in [-1, 1), so nothing of the
    /// model's is read or written; C is compared whole.
    #[cfg(not(target_arch = "wasm32"))]
    fn agrees_with_tiled(&self, gpu: &Gpu, build: impl Fn(&Gemm) -> Result<Op>) -> std::result::Result<(), String> {
        // A buffer the size of `like`, of values in [-1, 1) stored as f32 or (`half`) f16.
        let made_up = |like: &wgpu::Buffer, seed: u32, half: bool| -> std::result::Result<wgpu::Buffer, String> {
            if like.size() > 256 << 20 {
                return Err(format!("a {}-byte operand is too large to check", like.size()));
            }
            let n = like.size() as u32 / if half { 2 } else { 4 };
            let v: Vec<f32> = (0..n).map(|i| ((i ^ seed).wrapping_mul(2_654_435_761) >> 8) as f32 / (1u32 << 23) as f32 - 1.0).collect();
            let made = if half { gpu.storage_f16("autotune check", &v) } else { gpu.storage_init("autotune check", &v) };
            made.map_err(|e| e.to_string())
        };
        let (new_a, new_b) = match self.weight {
            Weight::B(_) => (true, false),
            Weight::A(_) => (false, true),
            Weight::None => (true, true),
        };
        let a = if new_a { Some(made_up(self.a.buf, 1, self.a.half)?) } else { None };
        let b = if new_b { Some(made_up(self.b.buf, 2, self.b.half)?) } else { None };
        let gate = self.gate.map(|g| made_up(g.buf, 3, g.half)).transpose()?;
        let (c1, c2) = (made_up(self.c.buf, 4, self.c.half)?, made_up(self.c.buf, 4, self.c.half)?);
        // This GEMM on the made-up operands and output `c`, by the tiled kernel or by `build`.
        let run = |c: &wgpu::Buffer, tiled: bool| -> std::result::Result<Vec<f32>, String> {
            let mut g: Gemm = *self;
            g.a_tex = None;
            if let Some(a) = &a {
                g.a.buf = a;
            }
            if let Some(b) = &b {
                g.b.buf = b;
            }
            if let (Some(gb), Some(op)) = (&gate, &mut g.gate) {
                op.buf = gb;
            }
            g.c.buf = c;
            let op = if tiled { g.build_with(gpu, GemmVariant::Tiled) } else { build(&g) };
            gpu.run_ops(&[op.map_err(|e| e.to_string())?]).map_err(|e| e.to_string())?;
            pollster::block_on(gpu.read_all(c, self.c.precision())).map_err(|e| e.to_string())
        };
        let (want, got) = (run(&c1, true)?, run(&c2, false)?);
        // f16 keeps 11 significant bits: ~5e-4 relative per operand, which the sums average.
        let err = super::rel_diff(&want, &got);
        if err.is_nan() || err > 1e-2 {
            return Err(format!("differs from the tiled kernel by {err:.3e} of the output scale (bound 1e-2)"));
        }
        Ok(())
    }

    #[cfg(target_arch = "wasm32")]
    fn agrees_with_tiled(&self, _gpu: &Gpu, _build: impl Fn(&Gemm) -> Result<Op>) -> std::result::Result<(), String> {
        Err("not checked in the browser".into())
    }

    /// This GEMM as one GEMM per row block of its weight (itself when the weight is one block):
    /// each part reads its block, covers the matching N (or M) range of C and of the gate, and
    /// indexes bias and scale from the block's first row.
    fn parts(&self) -> Result<Vec<Gemm<'a>>> {
        let (w, along_n) = match self.weight {
            Weight::None => return Ok(vec![*self]),
            Weight::B(w) => (w, true),
            Weight::A(w) => (w, false),
        };
        if w.blocks.len() == 1 {
            return Ok(vec![*self]);
        }
        // Where element (row0, 0) of the block's range lies in a matrix laid out like C.
        let shift = |o: Operand<'a>, row0: usize| -> Result<Operand<'a>> {
            let step = if along_n != self.c_trans { 1 } else { o.ld as u64 };
            let off = u32::try_from(o.off as u64 + row0 as u64 * step)
                .map_err(|_| Error::Input(format!("GEMM too large for 32-bit indexing: offset of row {row0}")))?;
            Ok(Operand { off, ..o })
        };
        w.blocks
            .iter()
            .map(|blk| {
                let mut g = *self;
                let operand = Operand::new(&blk.buf, w.cols, 0);
                if along_n {
                    (g.b, g.b_tex, g.n, g.n0) = (operand, blk.tex.as_ref(), blk.rows, blk.row0);
                } else {
                    (g.a, g.m, g.m0) = (operand, blk.rows, blk.row0);
                }
                g.c = shift(self.c, blk.row0)?;
                g.gate = self.gate.map(|o| shift(o, blk.row0)).transpose()?;
                Ok(g)
            })
            .collect()
    }

    /// Parameters, bindings and workgroup counts of one (part of a) GEMM.
    fn dispatch(&self, variant: GemmVariant, lanes: u32, frag: u32, splits: u32) -> Result<(Vec<u32>, Vec<Resource<'a>>, [u32; 3])> {
        // For a convolution the images are folded into M (the output is [images * oh * ow, cout]).
        let mut conv_words = [0u32; 12];
        if let Some(g) = self.conv {
            let (oh, ow) = g.out_hw()?;
            conv_words = [g.cin, g.ih, g.iw, g.kh, g.kw, g.stride, g.pad, ow, oh, 0, 0, 0].map(|v| v as u32);
        }
        if let Some(g) = &self.gate {
            conv_words[9..].copy_from_slice(&[g.off, g.ld, g.bs]);
        }
        let mut params = vec![
            self.m as u32,
            self.n as u32,
            self.k as u32,
            self.batch as u32,
            self.a.off,
            self.a.ld,
            self.a.bs,
            self.m0 as u32,
            self.b.off,
            self.b.ld,
            self.b.bs,
            self.n0 as u32,
            self.c.off,
            self.c.ld,
            self.c.bs,
            splits,
        ];
        params.extend_from_slice(&conv_words);
        // Unused bias/scale slots are bound to A (also read-only); that variant never reads them.
        let bias = self.bias.map_or(self.a.buf, |(b, _)| b);
        let scale = self.gate.map(|g| g.buf).or(self.scale.map(|(s, _)| s)).unwrap_or(self.a.buf);
        let workgroups = match variant {
            GemmVariant::Register => {
                let (rows, cols) = register_tile(self.conv.is_some());
                [groups(self.n as u32, REGISTER_LANES * cols), groups(self.m as u32, rows), self.batch as u32]
            }
            GemmVariant::Subgroup | GemmVariant::Texture => {
                let (rows, cols) = subgroup_tile(variant, self.a_trans, lanes);
                [groups(self.n as u32, lanes * cols), groups(self.m as u32, rows), self.batch as u32]
            }
            GemmVariant::Tiled | GemmVariant::Tiled128 | GemmVariant::Tiled128K16 | GemmVariant::Tiled32 | GemmVariant::SplitK => {
                let [tm, tn, ..] = variant.tile().unwrap_or([64, 64, 4, 4, 16]);
                [groups(self.n as u32, tn), groups(self.m as u32, tm), self.batch as u32]
            }
            GemmVariant::Coop | GemmVariant::Coop128 | GemmVariant::CoopEmulated => {
                let tile = 2 * variant.coop_fragments().unwrap_or(2) * frag;
                [groups(self.n as u32, tile), groups(self.m as u32, tile), self.batch as u32]
            }
        };
        let mut resources = vec![self.a.buf, self.b.buf, bias, scale, self.c.buf].into_iter().map(Resource::Buffer).collect::<Vec<_>>();
        if let (GemmVariant::Texture, Some(tex)) = (variant, self.b_tex) {
            resources.push(Resource::Texture(tex));
            if let (true, Some(at)) = (self.a_tex_usable(), self.a_tex) {
                resources.push(Resource::Texture(&at.view));
            }
        }
        Ok((params, resources, workgroups))
    }
}

/// Lanes (invocations) per workgroup of the register kernel.
const REGISTER_LANES: u32 = 8;

/// The fastest of `variants` for one GEMM, timed on its real operands (None when none ran):
/// each built by `build` (None: not a candidate), a warm-up run (the pipeline's first use) and
/// one timed run, then three rounds that each time every candidate in turn, by a batch of
/// enough back-to-back runs (one submission) to take ~10 ms where one run is short, so that
/// submission overhead does not decide between kernels on small GEMMs; each keeps its best.
/// Wall-clock seconds per run; a candidate whose run fails is left out.
///
/// Round by round rather than one candidate after the other, so that whatever changes while
/// a class is tuned (a GPU that idles at a low clock, as the H200 at 345 MHz, speeding up) does
/// not favour a candidate for its place in the order. Timed one after the other, on the H200
/// (2026-12-04) the last candidate at f32, `splitk` (the 64x64 kernel there), won 39 of 60
/// classes, among them 12544x512x2048 (mixer_s16's fc1 at batch 64), where `bench --gemm` gave
/// `tiled128` 1.66x its speed. `Gpu::idle` waits without blocking in the browser
/// (`tune_async`) and polls natively.
///
/// Stops with [`Error::Cancelled`] once `cancel` is set, read before each build, before each
/// warm-up's timed run and before each candidate's turn in each round, whether or not it runs
/// (so the number of checks a class passes is fixed by its candidates, not by their times). Each candidate is built (its pipeline created) just before its warm-up run,
/// which waits for its compile: built all at once, a class's first run waited for every
/// compile of the class, and an abort with it (SwiftShader: 11.1 s).
async fn time_ops(
    gpu: &Gpu,
    class: &str,
    variants: &[GemmVariant],
    build: impl Fn(GemmVariant) -> Option<Op>,
    cancel: &crate::exec::Cancel,
) -> Result<Option<GemmVariant>> {
    let mut built = Vec::with_capacity(variants.len());
    for &v in variants {
        cancel.check()?;
        let Some(op) = build(v) else { continue };
        let warm = time_runs(gpu, &op, 1).await;
        cancel.check()?;
        let once = match warm {
            Some(_) => time_runs(gpu, &op, 1).await,
            None => None,
        };
        built.push((v, op, once));
    }
    let mut best: Vec<Option<f64>> = built.iter().map(|&(_, _, once)| once).collect();
    for _ in 0..3 {
        for ((_, op, first), b) in built.iter().zip(best.iter_mut()) {
            // Checked before anything timed decides whether this candidate runs again, so
            // that where a stop lands depends on the candidates alone, never on the clock (a
            // slow first run on a busy machine skipped the check too, and a stop meant for the
            // last check found the tuning already done).
            cancel.check()?;
            let (Some(first), Some(so_far)) = (*first, *b) else { continue };
            if first > 0.05 {
                continue;
            }
            let reps = ((0.01 / first.max(1e-6)) as usize).clamp(1, 64);
            *b = time_runs(gpu, op, reps).await.map(|t| t.min(so_far));
        }
    }
    if crate::env::env().tune_log {
        let times: Vec<String> = built
            .iter()
            .zip(&best)
            .map(|((v, ..), t)| format!("{} {}", v.name(), t.map_or("failed".into(), |t| format!("{:.3} ms", t * 1e3))))
            .collect();
        eprintln!("tune: {class}: {}", times.join(", "));
    }
    Ok(built.iter().zip(&best).filter_map(|((v, ..), t)| t.map(|t| (t, *v))).min_by(|a, b| a.0.total_cmp(&b.0)).map(|(_, v)| v))
}

/// `reps` back-to-back runs of `op` in one submission, in seconds per run; None if one fails.
async fn time_runs(gpu: &Gpu, op: &Op, reps: usize) -> Option<f64> {
    let t = crate::gpu::clock_ms();
    let mut encoder = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("autotune") });
    for _ in 0..reps {
        super::encode_all(&mut encoder, std::slice::from_ref(op));
    }
    gpu.queue.submit([encoder.finish()]);
    gpu.idle().await.ok()?;
    Some((crate::gpu::clock_ms() - t) / 1e3 / reps as f64)
}

/// [`time_ops`] inside a synchronous plan build (native: `Gpu::idle` is a blocking poll). The
/// browser cannot wait for the GPU there: no timing (`Tuning::times_at_build` is false, so
/// this is not reached; `tune_async` times later).
fn time_ops_blocking(
    gpu: &Gpu,
    class: &str,
    variants: &[GemmVariant],
    build: impl Fn(GemmVariant) -> Option<Op>,
    cancel: &crate::exec::Cancel,
) -> Result<Option<GemmVariant>> {
    #[cfg(not(target_arch = "wasm32"))]
    return pollster::block_on(time_ops(gpu, class, variants, build, cancel));
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (gpu, class, variants, build, cancel);
        Ok(None)
    }
}

/// Rows x columns-per-lane of the register kernel: 8 x 8 (measured on SwiftShader, where this
/// kernel is what the browser gets: 196x512x2048 ran at 0.9 GFLOP/s with 8x8, 0.55 with 8x4,
/// 0.09 with the looped 8x4 kernel; tools/swiftshader_gemm_lab). `TOKENMIX_GEMM_TILE=RxC`
/// overrides it natively for tuning. Convolutions (implicit im2col) get 4 x 4: with 8 rows
/// SwiftShader took 15-16 s to compile each of them (4 rows: 0.4 s; measured by creating the
/// pipelines of poolformer_fmnist in Chromium), and they are a small share of the work.
fn register_tile(conv: bool) -> (u32, u32) {
    tile_override(crate::env::env().gemm_tile.as_deref())
        .filter(|&(r, c): &(u32, u32)| (1..=32).contains(&r) && (1..=16).contains(&c))
        .unwrap_or(if conv { (4, 4) } else { (8, 8) })
}

/// Rows x columns-per-lane of the subgroup kernels, whose workgroup is one subgroup of `lanes`
/// lanes. Measured on lavapipe's 8 lanes (`tokenmix bench --gemm 1568x512x2048`, 2 cores):
/// the texture kernel peaks at 24x8 for linear layers (18-21 GFLOP/s; 16x8 16, 32x4 14, 64x4
/// 7) and at 16x4 for transposed token mixing (10 GFLOP/s; 64x4 8, 24x8 7). LLVM's register
/// allocation makes this bumpy, hence measured values rather than a formula. Other widths keep
/// about 24 rows (a whole number of subgroups) and ~192 accumulators per lane.
/// `TOKENMIX_SUBGROUP_TILE=RxC` overrides (R a multiple of the lanes, at most 8 subgroups).
fn subgroup_tile(variant: GemmVariant, a_trans: bool, lanes: u32) -> (u32, u32) {
    let lanes = lanes.max(1);
    tile_override(crate::env::env().subgroup_tile.as_deref())
        .filter(|&(r, c): &(u32, u32)| r % lanes == 0 && (1..=8).contains(&(r / lanes)) && (1..=16).contains(&c))
        .unwrap_or(match (variant, a_trans, lanes) {
            (GemmVariant::Texture, false, 8) => (24, 8),
            (GemmVariant::Texture, true, 8) => (16, 4),
            (_, _, 8) => (32, 4),
            _ => {
                let rows = lanes * (24 / lanes).max(1);
                (rows, (192 / rows).clamp(2, 8))
            }
        })
}

/// A tile `RxC` from an override (`TOKENMIX_GEMM_TILE`, `TOKENMIX_SUBGROUP_TILE`); each
/// caller checks the range.
fn tile_override(value: Option<&str>) -> Option<(u32, u32)> {
    let (r, c) = value?.split_once('x')?;
    Some((r.parse().ok()?, c.parse().ok()?))
}

/// f16 values after each row of the coop kernel's staged tiles, where they fit: 16 bytes, so
/// that a fragment load's rows fall in different banks (gemm_coop.wgsl).
const COOP_PAD: u32 = 8;

/// Registers per lane the coop kernel may spend on its accumulators and on the next step's
/// tiles held across the multiply (PREFETCH): half of the 255 a lane can have, leaving the
/// rest to the fragments, addresses and the driver.
const COOP_PREFETCH_REGS: u32 = 128;

/// The coop kernel's sizes (gemm_coop.wgsl) at subgroups of `min_lanes` to `lanes`, fragments
/// of `frag` and `fr` x `fr` of them per subgroup, with `wg_bytes` of workgroup memory. Three
/// choices trade workgroup memory, in this order of preference (each is paid per k step but
/// the last, paid once per tile): staged rows padded by [`COOP_PAD`] (PAD), two stages of tiles
/// (DOUBLE: one barrier per k step), and the widest epilogue round that fits beside them (ROW
/// = FR, FR / 2, … fragments per round). Where nothing fits: unpadded, one stage, one fragment
/// per round, the kernel's own minimum, which `supports` leaves to the adapter. At 16x16
/// fragments and 32 lanes, coop128 takes 20 KiB per padded stage in the widest layout and 8 KiB
/// of slots at ROW = 2: all 48 KiB of an H200's.
/// With two stages, the next step's tiles are fetched into registers before the multiply
/// (PREFETCH) where a lane's accumulators and its share of the tiles fit
/// [`COOP_PREFETCH_REGS`]: at 16x16 and 32 lanes, coop's 32 + 16, not coop128's 128 + 32.
fn coop_sizes(lanes: u32, min_lanes: u32, frag: u32, fr: u32, wg_bytes: u32) -> [(&'static str, u32); 10] {
    let (min, max) = (min_lanes.clamp(1, lanes), lanes);
    let slots = 4 * max / min;
    let rows = || std::iter::successors(Some(fr), |&r| (r > 1).then_some(r / 2));
    let (pad, stages, row) = [(COOP_PAD, 2), (COOP_PAD, 1), (0, 2), (0, 1)]
        .into_iter()
        .find_map(|(pad, stages)| rows().find(|&row| coop_bytes(slots, frag, fr, pad, stages, row) <= wg_bytes).map(|row| (pad, stages, row)))
        .unwrap_or((0, 1, 1));
    // Per lane of the smallest subgroups: fr x fr f32 fragments; two tiles of 2 fr frag x 2 frag
    // over 4 x `lanes` invocations (f16, counted as whole registers).
    let (acc, staged) = (fr * fr * frag * frag / min, 2 * fr * frag * frag / max);
    let prefetch = stages == 2 && acc + staged <= COOP_PREFETCH_REGS;
    [
        ("F", frag),
        ("FR", fr),
        ("LANES", max),
        ("NT", 4 * max),
        ("SLOTS", slots),
        ("ROW", row),
        ("STAGES", stages),
        ("DOUBLE", stages - 1),
        ("PAD", pad),
        ("PREFETCH", prefetch as u32),
    ]
}

/// The workgroup memory the coop kernel declares with `slots` epilogue slots, fragments of
/// `frag`, `fr` x `fr` of them per subgroup, rows padded by `pad`, `stages` stages and `row`
/// fragments per epilogue round, in its largest operand layout: two stages of f16 tiles, A
/// (tile x bk) and B (bk x tile), each with rows along k (`tile` rows of `bk + pad`; the other
/// way, `bk` rows of `tile + pad`, is smaller), and the f32 slots.
fn coop_bytes(slots: u32, frag: u32, fr: u32, pad: u32, stages: u32, row: u32) -> u32 {
    let (tile, bk) = (2 * fr * frag, 2 * frag);
    stages * 2 * tile * (bk + pad) * 2 + slots * row * frag * frag * 4
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use wgpu::naga;

    use crate::gpu::shader::{preprocess, Defines};

    /// The coop kernel as a model's GEMMs specialise it (the epilogues and operand views of
    /// linear layers, token mixing, convolutions, gMLP's gate) at every subgroup width, for
    /// tensor cores or emulated, with fragments of `frag`: naga's SPIR-V, validated with just
    /// the capabilities a coop device grants.
    /// Also says how many bytes of workgroup memory the module declares.
    fn coop_spirv(flags: &[&str], lanes: u32, min_lanes: u32, frag: u32, fr: u32, wg_bytes: u32, emulate: bool) -> (Vec<u32>, u32) {
        let mut defines: Defines = flags.iter().map(|f| (f.to_string(), "1".to_string())).collect();
        defines.insert("EMULATE".into(), if emulate { "1" } else { "0" }.into());
        defines.extend(super::coop_sizes(lanes, min_lanes, frag, fr, wg_bytes).map(|(key, v)| (key.to_string(), v.to_string())));
        let what = format!("{flags:?} at {lanes} lanes, {fr}x{fr} fragments of {frag}x{frag} (emulated: {emulate})");
        let source = preprocess("gemm_coop", super::COOP, &defines).unwrap_or_else(|e| panic!("{what}: {e}"));
        let module = naga::front::wgsl::parse_str(&source).unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(&source)));
        use naga::valid::{Capabilities, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator};
        let caps = Capabilities::SUBGROUP | Capabilities::SHADER_FLOAT16 | Capabilities::COOPERATIVE_MATRIX;
        let info = Validator::new(ValidationFlags::all(), caps)
            .subgroup_stages(ShaderStages::COMPUTE)
            .subgroup_operations(SubgroupOperationSet::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(&source)));
        let options = naga::back::spv::Options { lang_version: (1, 6), ..Default::default() };
        let words = naga::back::spv::write_vec(&module, &info, &options, None).unwrap_or_else(|e| panic!("{what}: SPIR-V: {e}"));
        // The workgroup memory it declares, as naga lays it out.
        let mut layouter = naga::proc::Layouter::default();
        layouter.update(module.to_ctx()).unwrap_or_else(|e| panic!("{what}: layout: {e}"));
        let shared = module.global_variables.iter().filter(|(_, g)| g.space == naga::AddressSpace::WorkGroup).map(|(_, g)| layouter[g.ty].size).sum();
        (words, shared)
    }

    /// How many instructions of each opcode a SPIR-V module holds (after its 5-word header).
    fn opcodes(words: &[u32]) -> std::collections::HashMap<u32, usize> {
        let mut count = std::collections::HashMap::new();
        let mut i = 5;
        while i < words.len() {
            let (len, op) = ((words[i] >> 16) as usize, words[i] & 0xffff);
            *count.entry(op).or_insert(0) += 1;
            assert!(len > 0, "a zero-length instruction at word {i}");
            i += len;
        }
        count
    }

    /// The autotuner's check of the coop kernel, on its lane-by-lane double (lavapipe), as at
    /// plan-building time: A (the activations) all zeros. It passes the correct kernel, fails
    /// one that reads B transposed (which zeros in A would hide: the check makes up its own
    /// activations) and one with a stray GELU, and touches none of the GEMM's buffers; and
    /// again with f16 activations in and out.
    #[test]
    fn autotune_check_passes_the_coop_kernel_and_catches_wrong_ones() {
        use super::{Axis, Gemm, GemmVariant, Operand};
        use crate::gpu::{Gpu, Precision};
        let gpu = pollster::block_on(Gpu::new_at(Precision::F16)).expect("a wgpu adapter (lavapipe on CI)");
        assert!(
            gpu.supports(GemmVariant::CoopEmulated).is_ok(),
            "the test adapter runs coop-emulated: {:?}",
            gpu.supports(GemmVariant::CoopEmulated)
        );
        let (m, n, k) = (70, 48, 48);
        let vals =
            |len: usize, seed: usize| -> Vec<f32> { (0..len).map(|i| (((i * 7919 + seed * 104729) % 2001) as f32 - 1000.0) / 1000.0).collect() };
        let (a, b, bias, c0) = (vec![0f32; m * k], vals(k * n, 2), vals(n, 3), vals(m * n, 4));
        let up = |v: &[f32]| gpu.storage_init("v", v).unwrap();
        let (ab, bb, biasb, cb) = (up(&a), up(&b), up(&bias), up(&c0));
        let gemm = Gemm::new(1, m, n, k, Operand::new(&ab, k, 0), Operand::new(&bb, n, 0), Operand::new(&cb, n, 0)).bias(&biasb, Axis::N).residual();
        let coop = |g: &Gemm| g.build_with(&gpu, GemmVariant::CoopEmulated);
        assert_eq!(gemm.agrees_with_tiled(&gpu, coop), Ok(()));
        let transposed = |g: &Gemm| Gemm { b_trans: !g.b_trans, ..*g }.build_with(&gpu, GemmVariant::CoopEmulated);
        let err = gemm.agrees_with_tiled(&gpu, transposed).expect_err("B read transposed differs");
        assert!(err.starts_with("differs from the tiled kernel by"), "{err}");
        assert!(gemm.agrees_with_tiled(&gpu, |g| g.gelu().build_with(&gpu, GemmVariant::CoopEmulated)).is_err(), "a stray GELU differs");
        let read = |buf: &wgpu::Buffer, len: usize| pollster::block_on(gpu.read_buffer(buf, len)).unwrap();
        assert_eq!((read(&ab, m * k), read(&cb, m * n)), (a.clone(), c0.clone()), "the check leaves the GEMM's buffers alone");
        // The same with f16 activations in and out (an f16 device's hidden slot): the made-up
        // operands are f16 too, so a correct kernel passes and a wrong one still fails.
        let (ah, ch) = (gpu.storage_f16("a", &a).unwrap(), gpu.storage_f16("c", &c0).unwrap());
        let gemm = Gemm::new(1, m, n, k, Operand::new(&ah, k, 0).f16(), Operand::new(&bb, n, 0), Operand::new(&ch, n, 0).f16()).bias(&biasb, Axis::N);
        assert_eq!(gemm.agrees_with_tiled(&gpu, coop), Ok(()));
        assert!(gemm.agrees_with_tiled(&gpu, transposed).is_err(), "B read transposed differs, with f16 activations");
    }

    /// CI runs the tensor-core kernels on real cooperative matrices only at 8x8x8 (Mesa 26's
    /// lavapipe, `make test-coop`; Mesa 22's has none): this compiles each of their
    /// specialisations, at both fragment sizes and both tile sizes, to SPIR-V as wgpu would,
    /// and checks that the instructions are there (the multiply-adds per k step, their loads
    /// and the fragment stores) and that the emulated variant has none of them.
    #[test]
    fn coop_kernel_compiles_to_cooperative_matrix_spirv() {
        // Opcodes of SPV_KHR_cooperative_matrix (SPIR-V spec, unified 1.6).
        const LOAD: u32 = 4457;
        const STORE: u32 = 4458;
        const MUL_ADD: u32 = 4459;
        let cases: &[&[&str]] = &[
            &["B_TRANS", "BIAS_N", "GELU"],
            &["B_TRANS", "B_F16", "BIAS_N", "SCALE_N", "RESIDUAL"],
            &["A_F16", "BIAS_M", "GELU"],
            &["A_F16", "BIAS_M", "SCALE_N", "RESIDUAL"],
            &["A_F16", "BIAS_M", "GATE"],
            &["A_TRANS", "B_TRANS", "B_F16", "C_TRANS", "BIAS_N", "GELU", "RESIDUAL"],
            &["A_CONV", "B_TRANS", "BIAS_N"],
            &["A_CONV", "A_NHWC", "B_TRANS", "B_F16", "BIAS_N"],
            // Staging in runs of 4, in each operand layout, read as vec4s (f32 and f16) or not.
            &["A_VEC", "B_VEC", "A_VEC4", "B_VEC4", "B_TRANS", "B_F16", "BIAS_N", "GELU"],
            &["A_VEC", "B_VEC", "A_TRANS", "C_TRANS", "BIAS_N", "RESIDUAL"],
            &["A_F16", "A_VEC", "B_VEC", "A_VEC4", "B_VEC4", "BIAS_M", "GATE"],
            &["A_VEC", "B_VEC", "A_VEC4", "A_TRANS", "B_TRANS", "B_F16", "BIAS_N"],
        ];
        let (mut compiled, mut rows_of, mut stages_of, mut pads_of, mut prefetches_of) = (0, [0; 3], [0; 2], [0; 2], [0; 2]);
        for flags in cases {
            for (lanes, min, frag) in [(32, 32, 16), (64, 32, 16), (16, 8, 16), (8, 8, 16), (32, 32, 8), (64, 32, 8), (8, 8, 8)] {
                // coop (2x2 fragments per subgroup) and coop128 (4x4): per k step, a load per
                // fragment row of A and column of B, a multiply-add per fragment of C; a store
                // per fragment of C at the end.
                // With the H200's 48 KiB of workgroup memory and WebGPU's default 16 KiB, the
                // padding, stages and epilogue width that fit.
                for (fr, wg_bytes) in [2, 4].into_iter().flat_map(|fr| [(fr, 48 << 10), (fr, 16 << 10)]) {
                    let (words, shared) = coop_spirv(flags, lanes, min, frag, fr, wg_bytes, false);
                    let ops = opcodes(&words);
                    let n = |op| ops.get(&op).copied().unwrap_or(0);
                    let what = format!("{flags:?} at {lanes} lanes, {fr}x{fr} fragments of {frag}x{frag}, {wg_bytes} bytes");
                    assert_eq!((n(LOAD), n(MUL_ADD), n(STORE)), (2 * fr as usize, (fr * fr) as usize, (fr * fr) as usize), "{what}");
                    // A fragment row per round only where it fits (one fragment per round keeps
                    // the kernel's own minimum, which `supports` leaves to the adapter).
                    // Double-buffered only where that fits too.
                    let sizes = super::coop_sizes(lanes, min, frag, fr, wg_bytes);
                    let size = |key| sizes.iter().find(|(k, _)| *k == key).map(|(_, v)| *v).unwrap();
                    let (row, stages, pad) = (size("ROW"), size("STAGES"), size("PAD"));
                    let chosen = format!("{what}: PAD {pad}, {stages} stages, ROW {row}, {shared} bytes of workgroup memory");
                    assert!((pad, stages, row) == (0, 1, 1) || shared <= wg_bytes, "{chosen}");
                    assert!(fr % row == 0 && [0, super::COOP_PAD].contains(&pad) && (1..=2).contains(&stages), "{chosen}");
                    // coop_sizes' budget is what the module declares in its largest layout
                    // (A row-major, B_TRANS: the linear layers') and bounds it in the others.
                    let budget = super::coop_bytes(size("SLOTS"), frag, fr, pad, stages, row);
                    let largest = flags.contains(&"B_TRANS") && !flags.contains(&"A_TRANS");
                    assert!(if largest { shared == budget } else { shared <= budget }, "{chosen}; budgeted {budget}");
                    rows_of[[1, 2, 4].iter().position(|&r| r == row).unwrap()] += 1;
                    stages_of[stages as usize - 1] += 1;
                    pads_of[(pad > 0) as usize] += 1;
                    let prefetch = size("PREFETCH");
                    assert!(prefetch == 0 || stages == 2, "{chosen}: PREFETCH {prefetch} needs two stages");
                    prefetches_of[prefetch as usize] += 1;
                    let (emulated, _) = coop_spirv(flags, lanes, min, frag, fr, wg_bytes, true);
                    let emulated = opcodes(&emulated);
                    assert!([LOAD, MUL_ADD, STORE].iter().all(|op| !emulated.contains_key(op)), "{what} emulated");
                    compiled += 2;
                }
            }
        }
        assert_eq!(compiled, cases.len() * 56);
        assert!(
            rows_of.iter().chain(&stages_of).chain(&pads_of).chain(&prefetches_of).all(|&n| n > 0),
            "epilogue rounds of 1, 2 and 4 fragments, single and double stages, padded and not, prefetched and not: {rows_of:?}, {stages_of:?}, {pads_of:?}, {prefetches_of:?}"
        );
    }
}
