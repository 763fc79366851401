//! The MetaFormer block, the one shape every model here shares:
//!
//! ```text
//! x = x + TokenMixer(Norm1(x))
//! x = x + ChannelMlp(Norm2(x))
//! ```
//!
//! Only the token mixer differs between families. The residual adds are fused into the last
//! GEMM of each branch, so a block is: norm, mixer GEMMs, norm, two channel GEMMs.

use crate::error::Result;
use crate::gpu::Gpu;
use crate::ops::{self, ActTexture, Axis, Gemm, Matrix, Op, Operand};
use crate::weights::Weights;

use super::token_mlp::TokenMlp;

/// The activations a block works on, for a batch of `batch` images of `tokens` tokens.
/// `x` is the residual stream [batch * tokens, dim]; `xn` holds a normalised copy; `hidden` is
/// scratch for the widest intermediate of any branch.
pub struct Stream<'a> {
    pub batch: usize,
    pub tokens: usize,
    pub dim: usize,
    pub x: &'a wgpu::Buffer,
    pub xn: &'a wgpu::Buffer,
    pub hidden: &'a wgpu::Buffer,
    /// Texture mirrors for the texture GEMM (see [`ActTexture`]); None where unused.
    pub tex: &'a Mirrors,
}

/// Texture mirrors of the GEMM inputs: `xn` [rows, dim], the token-MLP hidden
/// [batch * tokens_hidden, dim] and the channel-MLP hidden [rows, channels_hidden].
#[derive(Default)]
pub struct Mirrors {
    pub xn: Option<ActTexture>,
    pub tokens_hidden: Option<ActTexture>,
    pub channels_hidden: Option<ActTexture>,
}

impl Stream<'_> {
    pub fn rows(&self) -> usize {
        self.batch * self.tokens
    }
}

/// Copies `buf` into its texture mirror, when there is one, so the next GEMM can gather it.
pub fn mirror<'t>(buf: &wgpu::Buffer, tex: &'t Option<ActTexture>, ops: &mut Vec<Op>) -> Result<Option<&'t ActTexture>> {
    if let Some(t) = tex {
        ops.push(Op::copy_to_texture(buf, t)?);
    }
    Ok(tex.as_ref())
}

/// Uploads a named tensor after checking its shape.
pub fn upload(gpu: &Gpu, w: &mut Weights, name: &str, shape: &[usize]) -> Result<wgpu::Buffer> {
    let data = w.take(name, shape)?;
    gpu.storage_init(name, &data)
}

/// Uploads a weight tensor as a matrix [shape[0], product of the rest] (a conv weight
/// flattens to [out, in * kh * kw]) after checking its shape.
pub fn upload_matrix(gpu: &Gpu, w: &mut Weights, name: &str, shape: &[usize]) -> Result<Matrix> {
    let data = w.take(name, shape)?;
    let rows = shape[0];
    Matrix::upload(gpu, name, &data, rows, data.len() / rows.max(1))
}

pub struct LayerNorm {
    pub gamma: wgpu::Buffer,
    pub beta: wgpu::Buffer,
    pub dim: usize,
    pub eps: f32,
}

impl LayerNorm {
    pub fn load(gpu: &Gpu, w: &mut Weights, prefix: &str, dim: usize, eps: f32) -> Result<Self> {
        Ok(LayerNorm {
            gamma: upload(gpu, w, &format!("{prefix}.weight"), &[dim])?,
            beta: upload(gpu, w, &format!("{prefix}.bias"), &[dim])?,
            dim,
            eps,
        })
    }
    pub fn record(&self, gpu: &Gpu, rows: usize, x: &wgpu::Buffer, y: &wgpu::Buffer) -> Result<Op> {
        ops::norm::layer_norm(gpu, rows, self.dim, self.eps, x, &self.gamma, &self.beta, y)
    }
}

/// timm `Mlp` weights: fc1 [hidden, features] → GELU → fc2 [features, hidden]. The channel MLP
/// applies it to each token's channels; MLP-Mixer's token mixer applies the same layer across
/// tokens (`token_mlp.rs`).
pub struct Mlp {
    pub fc1_w: Matrix,
    pub fc1_b: wgpu::Buffer,
    pub fc2_w: Matrix,
    pub fc2_b: wgpu::Buffer,
    pub features: usize,
    pub hidden: usize,
}

impl Mlp {
    pub fn load(gpu: &Gpu, w: &mut Weights, prefix: &str, features: usize, hidden: usize) -> Result<Self> {
        Ok(Mlp {
            fc1_w: upload_matrix(gpu, w, &format!("{prefix}.fc1.weight"), &[hidden, features])?,
            fc1_b: upload(gpu, w, &format!("{prefix}.fc1.bias"), &[hidden])?,
            fc2_w: upload_matrix(gpu, w, &format!("{prefix}.fc2.weight"), &[features, hidden])?,
            fc2_b: upload(gpu, w, &format!("{prefix}.fc2.bias"), &[features])?,
            features,
            hidden,
        })
    }
}

/// The channel MLP: an [`Mlp`] over every token's channels.
pub struct ChannelMlp(pub Mlp);

impl ChannelMlp {
    /// `x += fc2(gelu(fc1(xn)))`
    pub fn record(&self, gpu: &Gpu, s: &Stream, ops: &mut Vec<Op>) -> Result<()> {
        let (rows, m) = (s.rows(), &self.0);
        let (d, h) = (m.features, m.hidden);
        let xn_tex = mirror(s.xn, &s.tex.xn, ops)?;
        ops.push(Gemm::linear(rows, Operand::new(s.xn, d, 0), &m.fc1_w, Operand::new(s.hidden, h, 0))
            .a_texture(xn_tex)
            .bias(&m.fc1_b, Axis::N)
            .gelu()
            .build(gpu)?);
        let hidden_tex = mirror(s.hidden, &s.tex.channels_hidden, ops)?;
        ops.push(Gemm::linear(rows, Operand::new(s.hidden, h, 0), &m.fc2_w, Operand::new(s.x, d, 0))
            .a_texture(hidden_tex)
            .bias(&m.fc2_b, Axis::N)
            .residual()
            .build(gpu)?);
        Ok(())
    }
}

/// What mixes information across tokens. One small file per family.
pub enum TokenMixer {
    /// MLP-Mixer: an MLP across the token axis, shared by all channels.
    Mlp(TokenMlp),
}

impl TokenMixer {
    /// Floats of scratch the mixer needs per image.
    pub fn hidden_per_image(&self, dim: usize) -> usize {
        match self {
            TokenMixer::Mlp(m) => m.0.hidden * dim,
        }
    }
    /// `x += mix(xn)`
    fn record(&self, gpu: &Gpu, s: &Stream, ops: &mut Vec<Op>) -> Result<()> {
        match self {
            TokenMixer::Mlp(m) => m.record(gpu, s, ops),
        }
    }
}

pub struct Block {
    pub norm1: LayerNorm,
    pub mixer: TokenMixer,
    pub norm2: LayerNorm,
    pub mlp: ChannelMlp,
}

impl Block {
    pub fn record(&self, gpu: &Gpu, s: &Stream, ops: &mut Vec<Op>) -> Result<()> {
        ops.push(self.norm1.record(gpu, s.rows(), s.x, s.xn)?);
        self.mixer.record(gpu, s, ops)?;
        ops.push(self.norm2.record(gpu, s.rows(), s.x, s.xn)?);
        self.mlp.record(gpu, s, ops)
    }

    pub fn hidden_per_image(&self, tokens: usize, dim: usize) -> usize {
        self.mixer.hidden_per_image(dim).max(tokens * self.mlp.0.hidden)
    }
}
