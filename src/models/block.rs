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
//! The layer scale and the residual add are fused into the last step of each branch (a GEMM
//! epilogue or the pooling step), so a branch is: norm, mixer steps. Nothing here knows which
//! executor runs the steps.

use crate::error::Result;
use crate::net::{Builder, Gemm, GemmKind, Slot, View, W};

use super::linear_tokens::LinearTokens;
use super::norm::Norm;
use super::pooling::Pooling;
use super::spatial_gating::GatedMlp;
use super::token_mlp::TokenMlp;

/// The activations a block works on: `x` is the residual stream [tokens, dim] per image, `xn`
/// holds a normalised copy (and gMLP's gated hidden); `hidden` and `aux` are scratch.
#[derive(Clone, Copy)]
pub struct Stream {
    /// Token grid (height, width) of the patch embedding or stage.
    pub grid: (usize, usize),
    pub dim: usize,
    pub x: Slot,
    pub xn: Slot,
}

impl Stream {
    pub fn tokens(&self) -> usize {
        self.grid.0 * self.grid.1
    }
}

/// A Linear layer's weight `[out, in]` and bias `[out]`. `conv1x1` reads PoolFormer's 1x1
/// convolutions, whose weights are `[out, in, 1, 1]` — on channels-last tokens the same GEMM.
#[derive(Clone, Copy)]
pub struct Linear {
    pub w: W,
    pub b: W,
    pub out: usize,
    pub inp: usize,
}

impl Linear {
    pub fn load(n: &mut Builder, prefix: &str, out: usize, inp: usize, conv1x1: bool) -> Result<Self> {
        let shape: &[usize] = if conv1x1 { &[out, inp, 1, 1] } else { &[out, inp] };
        Ok(Linear { w: n.take(&format!("{prefix}.weight"), shape)?, b: n.take(&format!("{prefix}.bias"), &[out])?, out, inp })
    }

    /// `hidden = gelu(xn · Wᵀ + b)` over every token: a channel MLP's first layer.
    pub fn fc1_gelu(&self, n: &mut Builder, s: &Stream) {
        let t = s.tokens();
        let a = View::dense(s.xn, t, self.inp);
        n.gemm(Gemm::new(GemmKind::Linear { rows: t, a }, self.w, View::dense(Slot::Hidden, t, self.out)).bias(self.b).gelu());
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
    pub fn load(n: &mut Builder, prefix: &str, features: usize, hidden: usize, conv1x1: bool) -> Result<Self> {
        Ok(Mlp {
            fc1: Linear::load(n, &format!("{prefix}.fc1"), hidden, features, conv1x1)?,
            fc2: Linear::load(n, &format!("{prefix}.fc2"), features, hidden, conv1x1)?,
            features,
            hidden,
        })
    }

    /// The channel MLP: `x += ls * fc2(gelu(fc1(xn)))` over every token's channels.
    pub fn describe(&self, n: &mut Builder, s: &Stream, ls: Option<W>) {
        let t = s.tokens();
        self.fc1.fc1_gelu(n, s);
        let a = View::dense(Slot::Hidden, t, self.hidden);
        n.gemm(Gemm::new(GemmKind::Linear { rows: t, a }, self.fc2.w, View::dense(s.x, t, self.features)).bias(self.fc2.b).scale(ls).residual());
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
    fn describe(&self, n: &mut Builder, s: &Stream, ls: Option<W>) -> Result<()> {
        match self {
            TokenMixer::Mlp(m) => m.describe(n, s, ls),
            TokenMixer::Linear(m) => m.describe(n, s, ls),
            TokenMixer::Pool(m) => m.describe(n, s, ls)?,
        }
        Ok(())
    }
}

/// What mixes information across channels: timm's `Mlp`, or gMLP's `GatedMlp`.
pub enum ChannelMixer {
    Mlp(Mlp),
    Gated(GatedMlp),
}

impl ChannelMixer {
    fn describe(&self, n: &mut Builder, s: &Stream, ls: Option<W>) {
        match self {
            ChannelMixer::Mlp(m) => m.describe(n, s, ls),
            ChannelMixer::Gated(m) => m.describe(n, s, ls),
        }
    }
}

/// One residual branch: `x = x + layer_scale * mixer(norm(x))`.
pub struct Branch<M> {
    pub norm: Norm,
    pub mixer: M,
    /// Per-channel layer scale `[dim]` (ResMLP's ls1/ls2, PoolFormer's layer_scale1/2).
    pub layer_scale: Option<W>,
}

pub struct Block {
    /// Token mixing; None for gMLP, whose spatial gating lives inside the channel MLP.
    pub token: Option<Branch<TokenMixer>>,
    pub channel: Branch<ChannelMixer>,
}

impl Block {
    /// Appends the block's steps.
    pub fn describe(&self, n: &mut Builder, s: &Stream) -> Result<()> {
        if let Some(t) = &self.token {
            n.push(t.norm.step(s.tokens(), s.x, s.xn));
            t.mixer.describe(n, s, t.layer_scale)?;
        }
        let c = &self.channel;
        n.push(c.norm.step(s.tokens(), s.x, s.xn));
        c.mixer.describe(n, s, c.layer_scale);
        Ok(())
    }
}
