//! The normalisations a block can start with. Each family picks one, as timm does:
//! LayerNorm (MLP-Mixer, gMLP; eps 1e-6), Affine (ResMLP: a per-channel `alpha * x + beta`,
//! no statistics) and GroupNorm with one group (PoolFormer: statistics over the whole image).

use crate::error::Result;
use crate::net::{Builder, Slot, Step, View, W};

pub enum Norm {
    Layer { gamma: W, beta: W, dim: usize, eps: f32 },
    Affine { alpha: W, beta: W, dim: usize },
    Group { gamma: W, beta: W, dim: usize, eps: f32 },
}

impl Norm {
    /// `{prefix}.weight`, `{prefix}.bias` of an `nn.LayerNorm(dim, eps)`.
    pub fn layer(n: &mut Builder, prefix: &str, dim: usize, eps: f32) -> Result<Self> {
        let (gamma, beta) = weight_bias(n, prefix, dim)?;
        Ok(Norm::Layer { gamma, beta, dim, eps })
    }

    /// `{prefix}.alpha`, `{prefix}.beta` of timm's `Affine`, stored as [1, 1, dim].
    pub fn affine(n: &mut Builder, prefix: &str, dim: usize) -> Result<Self> {
        Ok(Norm::Affine { alpha: n.take(&format!("{prefix}.alpha"), &[1, 1, dim])?, beta: n.take(&format!("{prefix}.beta"), &[1, 1, dim])?, dim })
    }

    /// `{prefix}.weight`, `{prefix}.bias` of timm's `GroupNorm1` (nn.GroupNorm(1, dim, eps)).
    pub fn group(n: &mut Builder, prefix: &str, dim: usize, eps: f32) -> Result<Self> {
        let (gamma, beta) = weight_bias(n, prefix, dim)?;
        Ok(Norm::Group { gamma, beta, dim, eps })
    }

    /// `y = norm(x)` for one image of `tokens` tokens, both [tokens, dim].
    pub fn step(&self, tokens: usize, x: Slot, y: Slot) -> Step {
        match *self {
            Norm::Layer { gamma, beta, dim, eps } => Step::LayerNorm { rows: tokens, d: dim, eps, x: View::dense(x, tokens, dim), gamma, beta, y },
            Norm::Affine { alpha, beta, dim } => Step::Affine { rows: tokens, d: dim, x, alpha, beta, y },
            Norm::Group { gamma, beta, dim, eps } => Step::GroupNorm { tokens, d: dim, eps, x, gamma, beta, y },
        }
    }
}

fn weight_bias(n: &mut Builder, prefix: &str, dim: usize) -> Result<(W, W)> {
    Ok((n.take(&format!("{prefix}.weight"), &[dim])?, n.take(&format!("{prefix}.bias"), &[dim])?))
}
