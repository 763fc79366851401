//! MLP-Mixer's token mixer: the same two-layer MLP applied across the token axis of every
//! channel, `Y^T = W2 · GELU(W1 · X_n + b1) + b2` with X_n the normalised [tokens, channels]
//! matrix. Written as weight · activations, the GEMMs read X in its own layout: no transpose.

use crate::error::Result;
use crate::gpu::Gpu;
use crate::ops::{Axis, Gemm, Op, Operand};
use crate::weights::Weights;

use super::block::{upload, Stream};

pub struct TokenMlp {
    pub fc1_w: wgpu::Buffer, // [hidden, tokens]
    pub fc1_b: wgpu::Buffer, // [hidden]
    pub fc2_w: wgpu::Buffer, // [tokens, hidden]
    pub fc2_b: wgpu::Buffer, // [tokens]
    pub tokens: usize,
    pub hidden: usize,
}

impl TokenMlp {
    pub fn load(gpu: &Gpu, w: &mut Weights, prefix: &str, tokens: usize, hidden: usize) -> Result<Self> {
        Ok(TokenMlp {
            fc1_w: upload(gpu, w, &format!("{prefix}.fc1.weight"), &[hidden, tokens])?,
            fc1_b: upload(gpu, w, &format!("{prefix}.fc1.bias"), &[hidden])?,
            fc2_w: upload(gpu, w, &format!("{prefix}.fc2.weight"), &[tokens, hidden])?,
            fc2_b: upload(gpu, w, &format!("{prefix}.fc2.bias"), &[tokens])?,
            tokens,
            hidden,
        })
    }

    /// `x += (W2 · gelu(W1 · xn + b1) + b2)` per image, biases along the token axis.
    pub fn record(&self, gpu: &Gpu, s: &Stream, ops: &mut Vec<Op>) -> Result<()> {
        let (t, h, d) = (self.tokens, self.hidden, s.dim);
        ops.push(Gemm::across_rows(s.batch, h, d, t, &self.fc1_w, Operand::new(s.xn, d, t * d), Operand::new(s.hidden, d, h * d))
            .bias(&self.fc1_b, Axis::M)
            .gelu()
            .build(gpu)?);
        ops.push(Gemm::across_rows(s.batch, t, d, h, &self.fc2_w, Operand::new(s.hidden, d, h * d), Operand::new(s.x, d, t * d))
            .bias(&self.fc2_b, Axis::M)
            .residual()
            .build(gpu)?);
        Ok(())
    }
}
