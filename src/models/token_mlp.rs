//! MLP-Mixer's token mixer: the same two-layer MLP applied across the token axis of every
//! channel, `Y^T = W2 · GELU(W1 · X_n + b1) + b2` with X_n the normalised [tokens, channels]
//! matrix. Written as weight · activations, the GEMMs read X in its own layout: no transpose.

use crate::error::Result;
use crate::gpu::Gpu;
use crate::ops::{Gemm, Op, Operand};
use crate::weights::Weights;

use super::block::{mirror, Mlp, Stream};

/// An [`Mlp`] whose features are the tokens: fc1 [hidden, tokens], fc2 [tokens, hidden].
pub struct TokenMlp(pub Mlp);

impl TokenMlp {
    pub fn load(gpu: &Gpu, w: &mut Weights, prefix: &str, tokens: usize, hidden: usize) -> Result<Self> {
        Ok(TokenMlp(Mlp::load(gpu, w, prefix, tokens, hidden, false)?))
    }

    /// `x += ls * (W2 · gelu(W1 · xn + b1) + b2)` per image, biases along the token axis.
    pub fn record(&self, gpu: &Gpu, s: &Stream, ls: Option<&wgpu::Buffer>, ops: &mut Vec<Op>) -> Result<()> {
        let (m, d) = (&self.0, s.dim);
        let (t, h) = (m.features, m.hidden);
        let xn_tex = mirror(s.xn, &s.tex.xn, ops)?;
        let fc1 = Gemm::across_tokens(s.batch, &m.fc1.w, Operand::new(s.xn, d, t * d), d, Operand::new(s.hidden, d, h * d)).a_texture(xn_tex);
        ops.push(fc1.token_bias(&m.fc1.b).gelu().build(gpu)?);
        let hidden_tex = mirror(s.hidden, &s.tex.tokens_hidden, ops)?;
        let fc2 = Gemm::across_tokens(s.batch, &m.fc2.w, Operand::new(s.hidden, d, h * d), d, Operand::new(s.x, d, t * d)).a_texture(hidden_tex);
        ops.push(fc2.token_bias(&m.fc2.b).channel_scale(ls).residual().build(gpu)?);
        Ok(())
    }
}
