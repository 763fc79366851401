//! The normalisations a block can start with. Each family picks one, as timm does:
//! LayerNorm (MLP-Mixer, gMLP; eps 1e-6), Affine (ResMLP: a per-channel `alpha * x + beta`,
//! no statistics) and GroupNorm with one group (PoolFormer: statistics over the whole image).

use crate::error::Result;
use crate::gpu::Gpu;
use crate::ops::{self, Op};
use crate::weights::Weights;

use super::block::upload;

pub enum Norm {
    Layer { gamma: wgpu::Buffer, beta: wgpu::Buffer, dim: usize, eps: f32 },
    Affine { alpha: wgpu::Buffer, beta: wgpu::Buffer, dim: usize },
    Group { gamma: wgpu::Buffer, beta: wgpu::Buffer, dim: usize, eps: f32 },
}

impl Norm {
    /// `{prefix}.weight`, `{prefix}.bias` of an `nn.LayerNorm(dim, eps)`.
    pub fn layer(gpu: &Gpu, w: &mut Weights, prefix: &str, dim: usize, eps: f32) -> Result<Self> {
        let (gamma, beta) = weight_bias(gpu, w, prefix, dim)?;
        Ok(Norm::Layer { gamma, beta, dim, eps })
    }

    /// `{prefix}.alpha`, `{prefix}.beta` of timm's `Affine`, stored as [1, 1, dim].
    pub fn affine(gpu: &Gpu, w: &mut Weights, prefix: &str, dim: usize) -> Result<Self> {
        Ok(Norm::Affine {
            alpha: upload(gpu, w, &format!("{prefix}.alpha"), &[1, 1, dim])?,
            beta: upload(gpu, w, &format!("{prefix}.beta"), &[1, 1, dim])?,
            dim,
        })
    }

    /// `{prefix}.weight`, `{prefix}.bias` of timm's `GroupNorm1` (nn.GroupNorm(1, dim, eps)).
    pub fn group(gpu: &Gpu, w: &mut Weights, prefix: &str, dim: usize, eps: f32) -> Result<Self> {
        let (gamma, beta) = weight_bias(gpu, w, prefix, dim)?;
        Ok(Norm::Group { gamma, beta, dim, eps })
    }

    /// `y = norm(x)` for `batch` images of `tokens` tokens, both [batch * tokens, dim].
    pub fn record(&self, gpu: &Gpu, batch: usize, tokens: usize, x: &wgpu::Buffer, y: &wgpu::Buffer) -> Result<Op> {
        match self {
            Norm::Layer { gamma, beta, dim, eps } => ops::norm::layer_norm(gpu, batch * tokens, *dim, *eps, x, gamma, beta, y),
            Norm::Affine { alpha, beta, dim } => ops::norm::affine(gpu, batch * tokens, *dim, x, alpha, beta, y),
            Norm::Group { gamma, beta, dim, eps } => ops::norm::group_norm(gpu, batch, tokens, *dim, *eps, x, gamma, beta, y),
        }
    }
}

fn weight_bias(gpu: &Gpu, w: &mut Weights, prefix: &str, dim: usize) -> Result<(wgpu::Buffer, wgpu::Buffer)> {
    Ok((upload(gpu, w, &format!("{prefix}.weight"), &[dim])?, upload(gpu, w, &format!("{prefix}.bias"), &[dim])?))
}
