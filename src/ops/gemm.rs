//! GEMM with fused epilogue: `C[b] (+)= act(A[b] · B[b] + bias) * scale`. Linear layers,
//! token mixing (weight · activations, no transpose pass) and convolutions (implicit im2col of
//! an NCHW image) are all this one op. Two kernel families, chosen per adapter (see
//! [`GemmVariant`]): `gemm_register.wgsl` for CPU rasterisers, `gemm_tiled.wgsl` for GPUs.

use crate::error::{Error, Result};
use crate::gpu::{Binding, Gpu, GemmVariant, Kernel};

use super::{check_extent, groups, Op};

const REGISTER: &str = concat!(include_str!("../../shaders/gemm_common.wgsl"), include_str!("../../shaders/gemm_register.wgsl"));
const SUBGROUP: &str = concat!(include_str!("../../shaders/gemm_common.wgsl"), include_str!("../../shaders/gemm_subgroup.wgsl"));
const TILED: &str = concat!(include_str!("../../shaders/gemm_common.wgsl"), include_str!("../../shaders/gemm_tiled.wgsl"));
const BINDINGS: &[Binding] = &[Binding::Uniform, Binding::Read, Binding::Read, Binding::Read, Binding::Read, Binding::ReadWrite];

/// Which axis of C a per-channel vector (bias, layer scale) runs along.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// One value per column n (a Linear layer's bias over output features).
    N,
    /// One value per row m (token-mixing bias, which is per output token).
    M,
}

/// A strided matrix inside a buffer: element (i, j) of batch b is at `off + b*bs + i*ld + j`.
#[derive(Clone, Copy)]
pub struct Operand<'a> {
    pub buf: &'a wgpu::Buffer,
    pub off: u32,
    pub ld: u32,
    pub bs: u32,
}

impl<'a> Operand<'a> {
    /// A dense row-major matrix with `ld` columns, batch stride `bs` (0 = shared weights).
    pub fn new(buf: &'a wgpu::Buffer, ld: usize, bs: usize) -> Self {
        Operand { buf, off: 0, ld: ld as u32, bs: bs as u32 }
    }
}

/// Geometry of a convolution run as a GEMM over an NCHW input image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeometry {
    pub cin: usize,
    pub ih: usize,
    pub iw: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: usize,
    pub pad: usize,
}

impl ConvGeometry {
    pub fn out_hw(&self) -> Result<(usize, usize)> {
        let span = |i: usize, k: usize| (i + 2 * self.pad).checked_sub(k).map(|v| v / self.stride + 1);
        match (span(self.ih, self.kh), span(self.iw, self.kw)) {
            (Some(h), Some(w)) if self.stride > 0 => Ok((h, w)),
            _ => Err(Error::Input(format!(
                "image {}x{} is smaller than the {}x{} kernel (padding {})",
                self.ih, self.iw, self.kh, self.kw, self.pad
            ))),
        }
    }
}

pub struct Gemm<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    pub a: Operand<'a>,
    pub b: Operand<'a>,
    pub b_trans: bool,
    pub c: Operand<'a>,
    pub bias: Option<(&'a wgpu::Buffer, Axis)>,
    pub scale: Option<(&'a wgpu::Buffer, Axis)>,
    pub gelu: bool,
    pub residual: bool,
    pub conv: Option<ConvGeometry>,
}

impl<'a> Gemm<'a> {
    /// `C[m, n] = A[m, k] · W[n, k]^T`: a Linear layer on row-major activations.
    pub fn linear(m: usize, n: usize, k: usize, a: Operand<'a>, w: &'a wgpu::Buffer, c: Operand<'a>) -> Self {
        Gemm { m, n, k, batch: 1, a, b: Operand::new(w, k, 0), b_trans: true, c, bias: None, scale: None, gelu: false, residual: false, conv: None }
    }
    /// `C[b][m, n] = W[m, k] · X[b][k, n]`: a Linear layer applied across the rows of X
    /// (tokens), reading X in its natural [tokens, channels] layout.
    pub fn across_rows(batch: usize, m: usize, n: usize, k: usize, w: &'a wgpu::Buffer, x: Operand<'a>, c: Operand<'a>) -> Self {
        Gemm { m, n, k, batch, a: Operand::new(w, k, 0), b: x, b_trans: false, c, bias: None, scale: None, gelu: false, residual: false, conv: None }
    }
    /// A convolution over `images` NCHW images as an implicit-im2col GEMM: C[(img, oy, ox), co]
    /// = sum over (ci, ky, kx) of input · W[co, ci, ky, kx]. Output is channels-last.
    pub fn conv(images: usize, g: ConvGeometry, cout: usize, input: &'a wgpu::Buffer, w: &'a wgpu::Buffer, c: &'a wgpu::Buffer) -> Result<Self> {
        let (oh, ow) = g.out_hw()?;
        let k = g.cin * g.kh * g.kw;
        Ok(Gemm {
            m: images * oh * ow, n: cout, k, batch: 1,
            a: Operand::new(input, k, 0), b: Operand::new(w, k, 0), b_trans: true, c: Operand::new(c, cout, 0),
            bias: None, scale: None, gelu: false, residual: false, conv: Some(g),
        })
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
    /// Adds to what C holds (a residual connection) instead of overwriting it.
    pub fn residual(mut self) -> Self {
        self.residual = true;
        self
    }

    fn kernel(&self, variant: GemmVariant) -> Kernel {
        let (name, source) = match variant {
            GemmVariant::Register => ("gemm_register", REGISTER),
            GemmVariant::Subgroup => ("gemm_subgroup", SUBGROUP),
            GemmVariant::Tiled => ("gemm_tiled", TILED),
        };
        // Trusted: `check` validates every extent, and the kernels clamp or guard all indices.
        let mut kernel = Kernel::new(name, source, BINDINGS)
            .trusted()
            .flag("B_TRANS", self.b_trans)
            .flag("A_CONV", self.conv.is_some())
            .flag("BIAS_N", matches!(self.bias, Some((_, Axis::N))))
            .flag("BIAS_M", matches!(self.bias, Some((_, Axis::M))))
            .flag("SCALE_N", matches!(self.scale, Some((_, Axis::N))))
            .flag("SCALE_M", matches!(self.scale, Some((_, Axis::M))))
            .flag("GELU", self.gelu)
            .flag("RESIDUAL", self.residual);
        if variant == GemmVariant::Register {
            let (rows, cols) = register_tile();
            kernel = kernel.define("ROWS", rows).define("COLS", cols);
        }
        if variant == GemmVariant::Subgroup {
            let (rows, cols) = subgroup_tile();
            kernel = kernel.define("ROWS", rows).define("COLS", cols).define("LANES", SUBGROUP_LANES);
        }
        kernel
    }

    fn check(&self) -> Result<()> {
        let (m, n, k, batch) = (self.m as u64, self.n as u64, self.k as u64, self.batch as u64);
        if m == 0 || n == 0 || k == 0 || batch == 0 {
            return Err(Error::Input(format!("GEMM with an empty dimension: m={m} n={n} k={k} batch={batch}")));
        }
        let last = |o: &Operand, rows: u64, cols: u64| o.off as u64 + (batch - 1) * o.bs as u64 + (rows - 1) * o.ld as u64 + cols;
        match &self.conv {
            Some(g) => {
                let (oh, ow) = g.out_hw()?;
                let images = m / (oh * ow) as u64;
                check_extent("gemm A (conv input)", self.a.buf, 0, images * (g.cin * g.ih * g.iw) as u64)?
            }
            None => check_extent("gemm A", self.a.buf, 0, last(&self.a, m, k))?,
        }
        let b_end = if self.b_trans { last(&self.b, n, k) } else { last(&self.b, k, n) };
        check_extent("gemm B", self.b.buf, 0, b_end)?;
        check_extent("gemm C", self.c.buf, 0, last(&self.c, m, n))?;
        for (what, v) in [("bias", self.bias), ("scale", self.scale)] {
            if let Some((buf, axis)) = v {
                check_extent(what, buf, 0, if axis == Axis::N { n } else { m })?;
            }
        }
        if [m, n, k, batch].iter().any(|&d| d > u32::MAX as u64 / 4) {
            return Err(Error::Input(format!("GEMM too large for 32-bit indexing: m={m} n={n} k={k}")));
        }
        Ok(())
    }

    pub fn build(self, gpu: &Gpu) -> Result<Op> {
        self.build_with(gpu, gpu.gemm)
    }

    pub fn build_with(self, gpu: &Gpu, variant: GemmVariant) -> Result<Op> {
        // For a convolution the images are folded into M (the output is [images * oh * ow, cout]).
        let mut conv_words = [0u32; 12];
        if let Some(g) = self.conv {
            let (oh, ow) = g.out_hw()?;
            conv_words = [g.cin, g.ih, g.iw, g.kh, g.kw, g.stride, g.pad, ow, oh, 0, 0, 0].map(|v| v as u32);
        }
        self.check()?;
        let pipeline = gpu.pipeline(&self.kernel(variant))?;
        let mut params = vec![
            self.m as u32, self.n as u32, self.k as u32, self.batch as u32,
            self.a.off, self.a.ld, self.a.bs, 0,
            self.b.off, self.b.ld, self.b.bs, 0,
            self.c.off, self.c.ld, self.c.bs, 0,
        ];
        params.extend_from_slice(&conv_words);
        // Unused bias/scale slots are bound to A (also read-only); that variant never reads them.
        let bias = self.bias.map_or(self.a.buf, |(b, _)| b);
        let scale = self.scale.map_or(self.a.buf, |(s, _)| s);
        let workgroups = match variant {
            GemmVariant::Register => {
                let (rows, cols) = register_tile();
                [groups(self.n as u32, 8 * cols), groups(self.m as u32, rows), self.batch as u32]
            }
            GemmVariant::Subgroup => {
                let (rows, cols) = subgroup_tile();
                [groups(self.n as u32, SUBGROUP_LANES * cols), groups(self.m as u32, rows), self.batch as u32]
            }
            GemmVariant::Tiled => [groups(self.n as u32, 64), groups(self.m as u32, 64), self.batch as u32],
        };
        Op::new(gpu, pipeline, &params, &[self.a.buf, self.b.buf, bias, scale, self.c.buf], workgroups)
    }
}

/// Rows x columns-per-lane of the register kernel. 8 x 4 keeps 32 accumulators in vector
/// registers; `TOKENMIX_GEMM_TILE=RxC` overrides it for tuning.
fn register_tile() -> (u32, u32) {
    std::env::var("TOKENMIX_GEMM_TILE")
        .ok()
        .and_then(|s| {
            let (r, c) = s.split_once('x')?;
            Some((r.parse().ok()?, c.parse().ok()?))
        })
        .filter(|&(r, c): &(u32, u32)| (1..=32).contains(&r) && (1..=16).contains(&c))
        .unwrap_or((8, 4))
}

/// The subgroup kernel is compiled for exactly this many lanes (lavapipe's subgroup size).
pub const SUBGROUP_LANES: u32 = 8;

fn subgroup_tile() -> (u32, u32) {
    std::env::var("TOKENMIX_SUBGROUP_TILE")
        .ok()
        .and_then(|s| {
            let (r, c) = s.split_once('x')?;
            Some((r.parse().ok()?, c.parse().ok()?))
        })
        .filter(|&(r, c): &(u32, u32)| (1..=8).contains(&(r / SUBGROUP_LANES)) && r % SUBGROUP_LANES == 0 && (1..=16).contains(&c))
        .unwrap_or((32, 4))
}
