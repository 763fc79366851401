//! The MetaFormer block, the one shape every model here shares (Yu et al. 2022):
//!
//! ```text
//! x = x + LayerScale1 * TokenMixer(Norm1(x))
//! x = x + LayerScale2 * ChannelMlp(Norm2(x))
//! ```
//!
//! Families differ in the norm (LayerNorm, Affine, GroupNorm), whether there is a layer scale
//! (ResMLP, PoolFormer), and the token mixer, one small file each: `token_mlp.rs` (MLP-Mixer),
//! `linear_tokens.rs` (ResMLP), `pooling.rs` (PoolFormer). gMLP is the one exception, and
//! timm models it faithfully: its block has no separate token-mixing branch — the spatial
//! gating unit sits *inside* the channel MLP (`spatial_gating.rs`), between fc1 and fc2.
//!
//! The layer scale and the residual add are fused into the last op of each branch (a GEMM
//! epilogue or the pooling kernel), so a branch is: norm, mixer ops.

use crate::error::Result;
use crate::gpu::Gpu;
use crate::ops::{ActTexture, Axis, Gemm, Matrix, Op, Operand};
use crate::weights::Weights;

use super::linear_tokens::LinearTokens;
use super::norm::Norm;
use super::pooling::Pooling;
use super::spatial_gating::GatedMlp;
use super::token_mlp::TokenMlp;

/// The activations a block works on, for a batch of `batch` images on a `grid` of tokens.
/// `x` is the residual stream [batch * tokens, dim]; `xn` holds a normalised copy (and gMLP's
/// gated hidden); `hidden` and `aux` are scratch for the widest intermediates of any branch.
pub struct Stream<'a> {
    pub batch: usize,
    /// Token grid (height, width) of the patch embedding or stage.
    pub grid: (usize, usize),
    pub dim: usize,
    pub x: &'a wgpu::Buffer,
    pub xn: &'a wgpu::Buffer,
    pub hidden: &'a wgpu::Buffer,
    pub aux: &'a wgpu::Buffer,
    /// Texture mirrors for the texture GEMM (see [`ActTexture`]); empty where unused.
    pub tex: &'a Mirrors,
}

impl Stream<'_> {
    pub fn tokens(&self) -> usize {
        self.grid.0 * self.grid.1
    }
    pub fn rows(&self) -> usize {
        self.batch * self.tokens()
    }
}

/// Floats of scratch one image needs in each activation buffer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scratch {
    pub xn: usize,
    pub hidden: usize,
    pub aux: usize,
}

impl Scratch {
    pub fn max(self, o: Scratch) -> Scratch {
        Scratch { xn: self.xn.max(o.xn), hidden: self.hidden.max(o.hidden), aux: self.aux.max(o.aux) }
    }
}

/// Texture mirrors of the GEMM inputs: `xn` [rows, dim], the token-MLP hidden
/// [batch * tokens_hidden, dim] and the channel-MLP hidden [rows, channels_hidden].
#[derive(Default)]
pub struct Mirrors {
    pub xn: Option<ActTexture>,
    pub tokens_hidden: Option<ActTexture>,
    pub channels_hidden: Option<ActTexture>,
}

impl Mirrors {
    /// Mirrors for a stream of `rows` rows of width `dim` whose channel MLP is `hidden` wide,
    /// when the adapter's GEMM gathers from textures.
    pub fn new(gpu: &Gpu, rows: usize, dim: usize, hidden: Option<usize>, tokens_hidden_rows: Option<usize>) -> Mirrors {
        if gpu.gemm != crate::gpu::GemmVariant::Texture {
            return Mirrors::default();
        }
        Mirrors {
            xn: ActTexture::new(gpu, "xn", rows, dim),
            tokens_hidden: tokens_hidden_rows.and_then(|r| ActTexture::new(gpu, "tokens_hidden", r, dim)),
            channels_hidden: hidden.and_then(|h| ActTexture::new(gpu, "channels_hidden", rows, h)),
        }
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

/// A Linear layer's weight [out, in] and bias [out]. `conv1x1` reads PoolFormer's 1x1
/// convolutions, whose weights are [out, in, 1, 1] — on channels-last tokens the same GEMM.
pub struct Linear {
    pub w: Matrix,
    pub b: wgpu::Buffer,
}

impl Linear {
    pub fn load(gpu: &Gpu, w: &mut Weights, prefix: &str, out: usize, inp: usize, conv1x1: bool) -> Result<Self> {
        let shape: &[usize] = if conv1x1 { &[out, inp, 1, 1] } else { &[out, inp] };
        Ok(Linear { w: upload_matrix(gpu, w, &format!("{prefix}.weight"), shape)?, b: upload(gpu, w, &format!("{prefix}.bias"), &[out])? })
    }

    /// `hidden = gelu(xn · Wᵀ + b)` over every token: a channel MLP's first layer.
    pub fn record_fc1_gelu(&self, gpu: &Gpu, s: &Stream, ops: &mut Vec<Op>) -> Result<()> {
        let (d, h) = (self.w.cols, self.w.rows);
        let xn_tex = mirror(s.xn, &s.tex.xn, ops)?;
        ops.push(Gemm::linear(s.rows(), Operand::new(s.xn, d, 0), &self.w, Operand::new(s.hidden, h, 0))
            .a_texture(xn_tex)
            .bias(&self.b, Axis::N)
            .gelu()
            .build(gpu)?);
        Ok(())
    }
}

/// timm `Mlp` weights: fc1 [hidden, features] → GELU → fc2 [features, hidden]. The channel MLP
/// applies it to each token's channels; MLP-Mixer's token mixer applies the same layer across
/// tokens (`token_mlp.rs`).
pub struct Mlp {
    pub fc1: Linear,
    pub fc2: Linear,
    pub features: usize,
    pub hidden: usize,
}

impl Mlp {
    pub fn load(gpu: &Gpu, w: &mut Weights, prefix: &str, features: usize, hidden: usize, conv1x1: bool) -> Result<Self> {
        Ok(Mlp {
            fc1: Linear::load(gpu, w, &format!("{prefix}.fc1"), hidden, features, conv1x1)?,
            fc2: Linear::load(gpu, w, &format!("{prefix}.fc2"), features, hidden, conv1x1)?,
            features,
            hidden,
        })
    }

    /// The channel MLP: `x += ls * fc2(gelu(fc1(xn)))` over every token's channels.
    pub fn record(&self, gpu: &Gpu, s: &Stream, ls: Option<&wgpu::Buffer>, ops: &mut Vec<Op>) -> Result<()> {
        let (rows, d, h) = (s.rows(), self.features, self.hidden);
        self.fc1.record_fc1_gelu(gpu, s, ops)?;
        let hidden_tex = mirror(s.hidden, &s.tex.channels_hidden, ops)?;
        let mut fc2 = Gemm::linear(rows, Operand::new(s.hidden, h, 0), &self.fc2.w, Operand::new(s.x, d, 0))
            .a_texture(hidden_tex)
            .bias(&self.fc2.b, Axis::N);
        if let Some(ls) = ls {
            fc2 = fc2.scale(ls, Axis::N);
        }
        ops.push(fc2.residual().build(gpu)?);
        Ok(())
    }

    pub fn scratch(&self, tokens: usize) -> Scratch {
        Scratch { xn: tokens * self.features, hidden: tokens * self.hidden, aux: 0 }
    }
}

/// What mixes information across tokens. One small file per family.
pub enum TokenMixer {
    /// MLP-Mixer: an MLP across the token axis, shared by all channels.
    Mlp(TokenMlp),
    /// ResMLP: one linear map across the token axis.
    Linear(LinearTokens),
    /// PoolFormer: 3x3 average pooling minus identity; no weights.
    Pool(Pooling),
}

impl TokenMixer {
    /// `x += ls * mix(xn)`
    fn record(&self, gpu: &Gpu, s: &Stream, ls: Option<&wgpu::Buffer>, ops: &mut Vec<Op>) -> Result<()> {
        match self {
            TokenMixer::Mlp(m) => m.record(gpu, s, ls, ops),
            TokenMixer::Linear(m) => m.record(gpu, s, ls, ops),
            TokenMixer::Pool(m) => m.record(gpu, s, ls, ops),
        }
    }
    fn scratch(&self, tokens: usize, dim: usize) -> Scratch {
        let xn = Scratch { xn: tokens * dim, ..Default::default() };
        match self {
            TokenMixer::Mlp(m) => xn.max(Scratch { hidden: m.0.hidden * dim, ..Default::default() }),
            TokenMixer::Linear(_) | TokenMixer::Pool(_) => xn,
        }
    }
}

/// What mixes information across channels: timm's `Mlp`, or gMLP's `GatedMlp`.
pub enum ChannelMixer {
    Mlp(Mlp),
    Gated(GatedMlp),
}

impl ChannelMixer {
    fn record(&self, gpu: &Gpu, s: &Stream, ls: Option<&wgpu::Buffer>, ops: &mut Vec<Op>) -> Result<()> {
        match self {
            ChannelMixer::Mlp(m) => m.record(gpu, s, ls, ops),
            ChannelMixer::Gated(m) => m.record(gpu, s, ls, ops),
        }
    }
    fn scratch(&self, tokens: usize) -> Scratch {
        match self {
            ChannelMixer::Mlp(m) => m.scratch(tokens),
            ChannelMixer::Gated(m) => m.scratch(tokens),
        }
    }
    pub fn hidden(&self) -> usize {
        match self {
            ChannelMixer::Mlp(m) => m.hidden,
            ChannelMixer::Gated(m) => m.fc1.w.rows,
        }
    }
}

/// One residual branch: `x = x + layer_scale * mixer(norm(x))`.
pub struct Branch<M> {
    pub norm: Norm,
    pub mixer: M,
    /// Per-channel layer scale [dim] (ResMLP's ls1/ls2, PoolFormer's layer_scale1/2).
    pub layer_scale: Option<wgpu::Buffer>,
}

pub struct Block {
    /// Token mixing; None for gMLP, whose spatial gating lives inside the channel MLP.
    pub token: Option<Branch<TokenMixer>>,
    pub channel: Branch<ChannelMixer>,
}

impl Block {
    pub fn record(&self, gpu: &Gpu, s: &Stream, ops: &mut Vec<Op>) -> Result<()> {
        let (batch, tokens) = (s.batch, s.tokens());
        if let Some(t) = &self.token {
            ops.push(t.norm.record(gpu, batch, tokens, s.x, s.xn)?);
            t.mixer.record(gpu, s, t.layer_scale.as_ref(), ops)?;
        }
        let c = &self.channel;
        ops.push(c.norm.record(gpu, batch, tokens, s.x, s.xn)?);
        c.mixer.record(gpu, s, c.layer_scale.as_ref(), ops)
    }

    pub fn scratch(&self, tokens: usize, dim: usize) -> Scratch {
        let token = self.token.as_ref().map_or(Scratch::default(), |t| t.mixer.scratch(tokens, dim));
        token.max(self.channel.mixer.scratch(tokens))
    }
}
