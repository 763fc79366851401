//! gMLP's spatial gating unit (Liu et al. 2021, "Pay Attention to MLPs"). In timm the block
//! is `x = x + GatedMlp(LayerNorm(x))` and the token mixing lives inside the channel MLP:
//!
//! ```text
//! z    = GELU(fc1(x_n))                 # [tokens, hidden]
//! u, v = z[:, :hidden/2], z[:, hidden/2:]
//! s    = u ⊙ (W · LayerNorm(v) + b)     # SGU: W [tokens, tokens], LayerNorm eps 1e-5
//! x    = x + fc2(s)
//! ```
//!
//! Four ops: fc1 (+bias, GELU) → LayerNorm of the second half of each row, read in place →
//! the token projection W · v_n with bias and the gate u ⊙ fused in its epilogue → fc2
//! (+bias, residual). The MetaFormer resemblance: it is a channel MLP whose hidden layer
//! mixes tokens, where Mixer and ResMLP put that mixing in a branch of its own.

use crate::error::Result;
use crate::gpu::Gpu;
use crate::ops::{self, norm::Rows, Axis, Gemm, Op, Operand};
use crate::weights::Weights;

use super::block::{upload, Linear, Scratch, Stream};

/// torch's default LayerNorm eps, which timm's `SpatialGatingUnit` keeps.
const SGU_LN_EPS: f32 = 1e-5;

/// timm `SpatialGatingUnit`: `gate.norm` over hidden/2 channels, `gate.proj` [tokens, tokens].
pub struct SpatialGatingUnit {
    pub norm_weight: wgpu::Buffer,
    pub norm_bias: wgpu::Buffer,
    pub proj: Linear,
}

/// timm `GatedMlp` with the SGU as its gate: fc1 [hidden, dim], fc2 [dim, hidden/2].
pub struct GatedMlp {
    pub fc1: Linear,
    pub gate: SpatialGatingUnit,
    pub fc2: Linear,
    pub dim: usize,
}

impl GatedMlp {
    pub fn load(gpu: &Gpu, w: &mut Weights, prefix: &str, dim: usize, hidden: usize, tokens: usize) -> Result<Self> {
        let half = hidden / 2;
        Ok(GatedMlp {
            fc1: Linear::load(gpu, w, &format!("{prefix}.fc1"), hidden, dim, false)?,
            gate: SpatialGatingUnit {
                norm_weight: upload(gpu, w, &format!("{prefix}.gate.norm.weight"), &[half])?,
                norm_bias: upload(gpu, w, &format!("{prefix}.gate.norm.bias"), &[half])?,
                proj: Linear::load(gpu, w, &format!("{prefix}.gate.proj"), tokens, tokens, false)?,
            },
            fc2: Linear::load(gpu, w, &format!("{prefix}.fc2"), dim, half, false)?,
            dim,
        })
    }

    fn half(&self) -> usize {
        self.fc1.w.rows / 2
    }

    /// `x += fc2(u ⊙ (W · LN(v) + b))` with `[u, v] = gelu(fc1(xn))`.
    pub fn record(&self, gpu: &Gpu, s: &Stream, ls: Option<&wgpu::Buffer>, ops: &mut Vec<Op>) -> Result<()> {
        let (rows, t, d) = (s.rows(), s.tokens(), self.dim);
        let (h, half) = (self.fc1.w.rows, self.half());
        self.fc1.record_fc1_gelu(gpu, s, ops)?;
        // v_n = LayerNorm(v), v being columns [half, h) of each hidden row; written dense to aux.
        let v = Rows { buf: s.hidden, off: half, ld: h };
        ops.push(ops::norm::layer_norm_rows(gpu, rows, half, SGU_LN_EPS, v, &self.gate.norm_weight, &self.gate.norm_bias, s.aux)?);
        // s = u ⊙ (W · v_n + b) per image, into xn (free again after fc1).
        let proj = Gemm::across_tokens(s.batch, &self.gate.proj.w, Operand::new(s.aux, half, t * half), half, Operand::new(s.xn, half, t * half));
        ops.push(proj.token_bias(&self.gate.proj.b).gate(Operand::new(s.hidden, h, t * h)).build(gpu)?);
        let mut fc2 = Gemm::linear(rows, Operand::new(s.xn, half, 0), &self.fc2.w, Operand::new(s.x, d, 0)).bias(&self.fc2.b, Axis::N);
        if let Some(ls) = ls {
            fc2 = fc2.scale(ls, Axis::N);
        }
        ops.push(fc2.residual().build(gpu)?);
        Ok(())
    }

    pub fn scratch(&self, tokens: usize) -> Scratch {
        Scratch { xn: tokens * self.dim.max(self.half()), hidden: tokens * self.fc1.w.rows, aux: tokens * self.half() }
    }
}
