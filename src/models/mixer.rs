//! MLP-Mixer (Tolstikhin et al. 2021), as timm's `mlp_mixer.py`:
//!
//! ```text
//! x = stem(image)                       # conv k = s = patch → [tokens, dim]
//! for block in blocks:                  # the MetaFormer block, token mixer = token MLP
//!     x = x + mlp_tokens(norm1(x)^T)^T
//!     x = x + mlp_channels(norm2(x))
//! logits = head(mean_tokens(norm(x)))
//! ```

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::ops::{self, ActTexture, Axis, ConvGeometry, Gemm, Matrix, Op, Operand};
use crate::weights::Weights;

use super::block::{upload, upload_matrix, Block, ChannelMlp, LayerNorm, Mirrors, Mlp, Stream, TokenMixer};
use super::token_mlp::TokenMlp;
use super::Buffers;

const LN_EPS: f32 = 1e-6;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MixerConfig {
    /// [height, width] of the input image.
    pub img_size: [usize; 2],
    pub patch: usize,
    pub in_chans: usize,
    pub dim: usize,
    pub depth: usize,
    pub tokens_hidden: usize,
    pub channels_hidden: usize,
    pub num_classes: usize,
}

/// timm's named Mixer presets: (name, patch, dim, depth, tokens_hidden, channels_hidden), 224².
const PRESETS: &[(&str, usize, usize, usize, usize, usize)] = &[
    ("mixer_s32_224", 32, 512, 8, 256, 2048),
    ("mixer_s16_224", 16, 512, 8, 256, 2048),
    ("mixer_b32_224", 32, 768, 12, 384, 3072),
    ("mixer_b16_224", 16, 768, 12, 384, 3072),
    ("mixer_l32_224", 32, 1024, 24, 512, 4096),
    ("mixer_l16_224", 16, 1024, 24, 512, 4096),
];

impl MixerConfig {
    /// Infers the architecture from timm parameter names and shapes. The token count fixes
    /// the grid; the image size comes from `img_size` when given (metadata or the input), else
    /// a square grid is assumed.
    pub fn infer(w: &Weights, img_size: Option<[usize; 2]>) -> Result<Self> {
        let stem = w.require_shape("stem.proj.weight")?;
        let [dim, in_chans, ph, pw] = *stem else {
            return Err(Error::tensor("stem.proj.weight", format!("has shape {stem:?}, expected [dim, in_chans, patch, patch]")));
        };
        if ph != pw || ph == 0 {
            return Err(Error::tensor("stem.proj.weight", format!("non-square patch {ph}x{pw}")));
        }
        let depth = super::count_indexed(w, "blocks.", ".norm1.weight");
        if depth == 0 {
            return Err(Error::tensor("blocks.0.norm1.weight", "missing: a Mixer needs at least one block"));
        }
        let tok = w.require_shape("blocks.0.mlp_tokens.fc1.weight")?;
        let [tokens_hidden, tokens] = *tok else {
            return Err(Error::tensor("blocks.0.mlp_tokens.fc1.weight", format!("has shape {tok:?}, expected [hidden, tokens]")));
        };
        let ch = w.require_shape("blocks.0.mlp_channels.fc1.weight")?;
        let [channels_hidden, _] = *ch else {
            return Err(Error::tensor("blocks.0.mlp_channels.fc1.weight", format!("has shape {ch:?}, expected [hidden, dim]")));
        };
        let head = w.require_shape("head.weight")?;
        let [num_classes, _] = *head else {
            return Err(Error::tensor("head.weight", format!("has shape {head:?}, expected [classes, dim]")));
        };
        let img_size = match img_size {
            Some(s) => s,
            None => {
                let side = (tokens as f64).sqrt().round() as usize;
                if side * side != tokens {
                    return Err(Error::Config(format!(
                        "{tokens} tokens is not a square grid; give the image size (metadata `config.img_size`)"
                    )));
                }
                [side * ph, side * ph]
            }
        };
        let cfg = MixerConfig { img_size, patch: ph, in_chans, dim, depth, tokens_hidden, channels_hidden, num_classes };
        cfg.validate(tokens)?;
        Ok(cfg)
    }

    pub fn grid(&self) -> (usize, usize) {
        (self.img_size[0] / self.patch, self.img_size[1] / self.patch)
    }

    pub fn tokens(&self) -> usize {
        let (h, w) = self.grid();
        h * w
    }

    fn validate(&self, tokens: usize) -> Result<()> {
        if self.tokens() != tokens {
            return Err(Error::Config(format!(
                "image {}x{} with patch {} gives {} tokens, the weights expect {tokens}",
                self.img_size[0], self.img_size[1], self.patch, self.tokens()
            )));
        }
        super::check_bounds(&[
            ("dim", self.dim, 1 << 14),
            ("depth", self.depth, 256),
            ("tokens_hidden", self.tokens_hidden, 1 << 15),
            ("channels_hidden", self.channels_hidden, 1 << 16),
            ("num_classes", self.num_classes, 1 << 16),
            ("in_chans", self.in_chans, 64),
            ("tokens", tokens, 1 << 14),
        ])
    }

    pub fn preset(&self) -> Option<&'static str> {
        PRESETS
            .iter()
            .find(|&&(_, p, d, depth, t, c)| {
                (p, d, depth, t, c) == (self.patch, self.dim, self.depth, self.tokens_hidden, self.channels_hidden)
                    && self.img_size == [224, 224]
            })
            .map(|p| p.0)
    }

    /// Multiply-accumulates for one image (what timm/fvcore count as MACs).
    pub fn macs(&self) -> u64 {
        let (s, d) = (self.tokens() as u64, self.dim as u64);
        let stem = s * d * (self.in_chans * self.patch * self.patch) as u64;
        let block = 2 * d * s * self.tokens_hidden as u64 + 2 * s * d * self.channels_hidden as u64;
        stem + self.depth as u64 * block + d * self.num_classes as u64
    }
}

pub struct Mixer {
    pub cfg: MixerConfig,
    stem_w: Matrix,
    stem_b: wgpu::Buffer,
    pub blocks: Vec<Block>,
    norm: LayerNorm,
    head_w: Matrix,
    head_b: wgpu::Buffer,
}

impl Mixer {
    pub fn load(gpu: &Gpu, w: &mut Weights, cfg: MixerConfig) -> Result<Self> {
        let MixerConfig { patch, in_chans, dim, num_classes, .. } = cfg;
        let tokens = cfg.tokens();
        let stem_w = upload_matrix(gpu, w, "stem.proj.weight", &[dim, in_chans, patch, patch])?;
        let stem_b = upload(gpu, w, "stem.proj.bias", &[dim])?;
        let blocks = (0..cfg.depth)
            .map(|i| {
                let p = format!("blocks.{i}");
                Ok(Block {
                    norm1: LayerNorm::load(gpu, w, &format!("{p}.norm1"), dim, LN_EPS)?,
                    mixer: TokenMixer::Mlp(TokenMlp::load(gpu, w, &format!("{p}.mlp_tokens"), tokens, cfg.tokens_hidden)?),
                    norm2: LayerNorm::load(gpu, w, &format!("{p}.norm2"), dim, LN_EPS)?,
                    mlp: ChannelMlp(Mlp::load(gpu, w, &format!("{p}.mlp_channels"), dim, cfg.channels_hidden)?),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let norm = LayerNorm::load(gpu, w, "norm", dim, LN_EPS)?;
        let head_w = upload_matrix(gpu, w, "head.weight", &[num_classes, dim])?;
        let head_b = upload(gpu, w, "head.bias", &[num_classes])?;
        Ok(Mixer { cfg, stem_w, stem_b, blocks, norm, head_w, head_b })
    }

    /// Floats of each activation buffer for `batch` images: (stream, hidden, pooled).
    pub fn buffer_sizes(&self, batch: usize) -> (usize, usize, usize) {
        let (t, d) = (self.cfg.tokens(), self.cfg.dim);
        let hidden = self.blocks.iter().map(|b| b.hidden_per_image(t, d)).max().unwrap_or(1);
        (batch * t * d, batch * hidden, batch * d)
    }

    /// Texture mirrors of the GEMM inputs, for adapters whose GEMM gathers from textures.
    pub fn mirrors(&self, gpu: &Gpu, batch: usize) -> Mirrors {
        if gpu.gemm != crate::gpu::GemmVariant::Texture {
            return Mirrors::default();
        }
        let (t, d) = (self.cfg.tokens(), self.cfg.dim);
        Mirrors {
            xn: ActTexture::new(gpu, "xn", batch * t, d),
            tokens_hidden: ActTexture::new(gpu, "tokens_hidden", batch * self.cfg.tokens_hidden, d),
            channels_hidden: ActTexture::new(gpu, "channels_hidden", batch * t, self.cfg.channels_hidden),
        }
    }

    pub fn record(&self, gpu: &Gpu, batch: usize, buf: &Buffers, ops: &mut Vec<Op>) -> Result<()> {
        let c = &self.cfg;
        let (t, d) = (c.tokens(), c.dim);
        // Patch embedding: a stride-`patch` convolution as an implicit-im2col GEMM, written
        // straight into token-major [batch * tokens, dim] order.
        let g = ConvGeometry { cin: c.in_chans, ih: c.img_size[0], iw: c.img_size[1], kh: c.patch, kw: c.patch, stride: c.patch, pad: 0 };
        ops.push(Gemm::conv(batch, g, &buf.input, &self.stem_w, &buf.x)?.bias(&self.stem_b, Axis::N).build(gpu)?);

        let stream = Stream { batch, tokens: t, dim: d, x: &buf.x, xn: &buf.xn, hidden: &buf.hidden, tex: &buf.mirrors };
        for block in &self.blocks {
            block.record(gpu, &stream, ops)?;
        }
        ops.push(self.norm.record(gpu, batch * t, &buf.x, &buf.xn)?);
        ops.push(ops::reduce::mean_tokens(gpu, batch, t, d, &buf.xn, &buf.pooled)?);
        ops.push(Gemm::linear(batch, Operand::new(&buf.pooled, d, 0), &self.head_w, Operand::new(&buf.logits, c.num_classes, 0))
            .bias(&self.head_b, Axis::N)
            .build(gpu)?);
        Ok(())
    }
}
