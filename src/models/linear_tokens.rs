//! ResMLP's token mixer (Touvron et al. 2021): one linear layer across the token axis,
//! `Y^T = W · X_n + b` with W [tokens, tokens], then the per-channel layer scale:
//!
//! ```text
//! x = x + ls1 * (W · Aff1(x) + b)
//! ```
//!
//! One GEMM, weight · activations in place, with bias, layer scale and residual fused.

use crate::error::Result;
use crate::gpu::Gpu;
use crate::ops::{Gemm, Op, Operand};
use crate::weights::Weights;

use super::block::{mirror, Linear, Stream};

/// timm `ResBlock.linear_tokens`: weight [tokens, tokens], bias [tokens].
pub struct LinearTokens(pub Linear);

impl LinearTokens {
    pub fn load(gpu: &Gpu, w: &mut Weights, prefix: &str, tokens: usize) -> Result<Self> {
        Ok(LinearTokens(Linear::load(gpu, w, prefix, tokens, tokens, false)?))
    }

    /// `x += ls * (W · xn + b)` per image, the bias along the token axis.
    pub fn record(&self, gpu: &Gpu, s: &Stream, ls: Option<&wgpu::Buffer>, ops: &mut Vec<Op>) -> Result<()> {
        let (t, d) = (s.tokens(), s.dim);
        let xn_tex = mirror(s.xn, &s.tex.xn, ops)?;
        let g = Gemm::across_tokens(s.batch, &self.0.w, Operand::new(s.xn, d, t * d), d, Operand::new(s.x, d, t * d)).a_texture(xn_tex);
        ops.push(g.token_bias(&self.0.b).channel_scale(ls).residual().build(gpu)?);
        Ok(())
    }
}
