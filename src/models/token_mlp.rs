//! MLP-Mixer's token mixer: the same two-layer MLP applied across the token axis of every
//! channel, `Y^T = W2 · GELU(W1 · X_n + b1) + b2` with X_n the normalised [tokens, channels]
//! matrix. Written as weight · activations, the GEMMs read X in its own layout: no transpose.

use crate::error::Result;
use crate::gpu::Gpu;
use crate::ops::{Gemm, Matrix, Op, Operand};
use crate::weights::Weights;

use super::block::{mirror, upload, upload_matrix, Stream};

pub struct TokenMlp {
    pub fc1_w: Matrix, // [hidden, tokens]
    pub fc1_b: wgpu::Buffer, // [hidden]
    pub fc2_w: Matrix, // [tokens, hidden]
    pub fc2_b: wgpu::Buffer, // [tokens]
    pub tokens: usize,
    pub hidden: usize,
}

impl TokenMlp {
    pub fn load(gpu: &Gpu, w: &mut Weights, prefix: &str, tokens: usize, hidden: usize) -> Result<Self> {
        Ok(TokenMlp {
            fc1_w: upload_matrix(gpu, w, &format!("{prefix}.fc1.weight"), &[hidden, tokens])?,
            fc1_b: upload(gpu, w, &format!("{prefix}.fc1.bias"), &[hidden])?,
            fc2_w: upload_matrix(gpu, w, &format!("{prefix}.fc2.weight"), &[tokens, hidden])?,
            fc2_b: upload(gpu, w, &format!("{prefix}.fc2.bias"), &[tokens])?,
            tokens,
            hidden,
        })
    }

    /// `x += (W2 · gelu(W1 · xn + b1) + b2)` per image, biases along the token axis.
    pub fn record(&self, gpu: &Gpu, s: &Stream, ops: &mut Vec<Op>) -> Result<()> {
        let (t, h, d) = (self.tokens, self.hidden, s.dim);
        let xn_tex = mirror(s.xn, &s.tex.xn, ops)?;
        let fc1 = Gemm::across_tokens(s.batch, &self.fc1_w, Operand::new(s.xn, d, t * d), d, Operand::new(s.hidden, d, h * d)).a_texture(xn_tex);
        let axis = fc1.token_axis();
        ops.push(fc1.bias(&self.fc1_b, axis).gelu().build(gpu)?);
        let hidden_tex = mirror(s.hidden, &s.tex.tokens_hidden, ops)?;
        let fc2 = Gemm::across_tokens(s.batch, &self.fc2_w, Operand::new(s.hidden, d, h * d), d, Operand::new(s.x, d, t * d)).a_texture(hidden_tex);
        let axis = fc2.token_axis();
        ops.push(fc2.bias(&self.fc2_b, axis).residual().build(gpu)?);
        Ok(())
    }
}
