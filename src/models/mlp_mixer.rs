//! timm's `MlpMixer` class, which builds three families from one isotropic skeleton:
//!
//! ```text
//! x = stem(image)                   # conv k = s = patch → [tokens, dim]
//! for block in blocks:              # MetaFormer blocks, see block.rs
//!     x = block(x)
//! logits = head(mean_tokens(norm(x)))
//! ```
//!
//! The block decides the family (timm's `block_layer`):
//! - MLP-Mixer (`MixerBlock`): LayerNorm, token MLP, LayerNorm, channel MLP.
//! - gMLP (`SpatialGatingBlock`): LayerNorm, gated channel MLP with the spatial gating unit.
//! - ResMLP (`ResBlock`): Affine, linear token map, Affine, channel MLP, layer scales.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::net::{Builder, ConvGeometry, Explain, Gemm, GemmKind, Net, Slot, Step, View};
use crate::preprocess::Preprocess;
use crate::weights::Weights;

use super::block::{Block, Branch, ChannelMixer, Mlp, Stream, TokenMixer};
use super::linear_tokens::LinearTokens;
use super::norm::Norm;
use super::spatial_gating::GatedMlp;
use super::token_mlp::TokenMlp;

/// timm's `partial(nn.LayerNorm, eps=1e-6)`, the Mixer and gMLP norm.
const LN_EPS: f32 = 1e-6;

/// Which of timm's `block_layer`s the checkpoint was made with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockKind {
    Mixer,
    Gmlp,
    Resmlp,
}

impl BlockKind {
    pub fn family(self) -> &'static str {
        match self {
            BlockKind::Mixer => "MLP-Mixer",
            BlockKind::Gmlp => "gMLP",
            BlockKind::Resmlp => "ResMLP",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MlpMixerConfig {
    pub block: BlockKind,
    /// [height, width] of the input image.
    pub img_size: [usize; 2],
    pub patch: usize,
    pub in_chans: usize,
    pub dim: usize,
    pub depth: usize,
    /// MLP-Mixer's token-MLP width; the other families mix tokens with [tokens, tokens] maps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_hidden: Option<usize>,
    /// Channel-MLP width (gMLP: fc1's width, both halves of the gate).
    pub channels_hidden: usize,
    pub num_classes: usize,
}

/// (name, block, patch, dim, depth, tokens_hidden, channels_hidden)
type Preset = (&'static str, BlockKind, usize, usize, usize, Option<usize>, usize);

/// timm's named presets at 224².
const PRESETS: &[Preset] = &[
    ("mixer_s32_224", BlockKind::Mixer, 32, 512, 8, Some(256), 2048),
    ("mixer_s16_224", BlockKind::Mixer, 16, 512, 8, Some(256), 2048),
    ("mixer_b32_224", BlockKind::Mixer, 32, 768, 12, Some(384), 3072),
    ("mixer_b16_224", BlockKind::Mixer, 16, 768, 12, Some(384), 3072),
    ("mixer_l32_224", BlockKind::Mixer, 32, 1024, 24, Some(512), 4096),
    ("mixer_l16_224", BlockKind::Mixer, 16, 1024, 24, Some(512), 4096),
    ("gmlp_ti16_224", BlockKind::Gmlp, 16, 128, 30, None, 768),
    ("gmlp_s16_224", BlockKind::Gmlp, 16, 256, 30, None, 1536),
    ("gmlp_b16_224", BlockKind::Gmlp, 16, 512, 30, None, 3072),
    ("resmlp_12_224", BlockKind::Resmlp, 16, 384, 12, None, 1536),
    ("resmlp_24_224", BlockKind::Resmlp, 16, 384, 24, None, 1536),
    ("resmlp_36_224", BlockKind::Resmlp, 16, 384, 36, None, 1536),
];

/// The tensor whose presence names the block kind.
const MARKERS: &[(BlockKind, &str)] = &[
    (BlockKind::Mixer, "blocks.0.mlp_tokens.fc1.weight"),
    (BlockKind::Gmlp, "blocks.0.mlp_channels.gate.proj.weight"),
    (BlockKind::Resmlp, "blocks.0.linear_tokens.weight"),
];

impl MlpMixerConfig {
    /// The block kind of a checkpoint made by timm's `MlpMixer`, if it is one.
    pub fn detect(w: &Weights) -> Option<BlockKind> {
        if !w.contains("stem.proj.weight") {
            return None;
        }
        MARKERS.iter().find(|(_, name)| w.contains(name)).map(|&(k, _)| k)
    }

    /// Infers the architecture from timm parameter names and shapes. The token count fixes
    /// the grid; the image size comes from `img_size` when given (metadata or the input), else
    /// a square grid is assumed.
    pub fn infer(w: &Weights, block: BlockKind, img_size: Option<[usize; 2]>) -> Result<Self> {
        let stem = w.require_shape("stem.proj.weight")?;
        let [dim, in_chans, ph, pw] = *stem else {
            return Err(Error::tensor("stem.proj.weight", format!("has shape {stem:?}, expected [dim, in_chans, patch, patch]")));
        };
        if ph != pw || ph == 0 {
            return Err(Error::tensor("stem.proj.weight", format!("non-square patch {ph}x{pw}")));
        }
        let depth = super::count_indexed(w, "blocks.", ".mlp_channels.fc1.weight");
        if depth == 0 {
            return Err(Error::tensor("blocks.0.mlp_channels.fc1.weight", "missing: the model needs at least one block"));
        }
        let matrix = |name: &str| -> Result<[usize; 2]> {
            match *w.require_shape(name)? {
                [r, c] => Ok([r, c]),
                ref s => Err(Error::tensor(name, format!("has shape {s:?}, expected a matrix"))),
            }
        };
        let marker = MARKERS.iter().find(|(k, _)| *k == block).map_or("", |m| m.1);
        let [rows, tokens] = matrix(marker)?;
        let tokens_hidden = (block == BlockKind::Mixer).then_some(rows);
        let [channels_hidden, _] = matrix("blocks.0.mlp_channels.fc1.weight")?;
        let [num_classes, _] = matrix("head.weight")?;
        let img_size = match img_size {
            Some(s) => s,
            None => {
                let side = (tokens as f64).sqrt().round() as usize;
                if side.checked_mul(side) != Some(tokens) {
                    return Err(Error::Config(format!("{tokens} tokens is not a square grid; give the image size (metadata `config.img_size`)")));
                }
                let px = side.checked_mul(ph).ok_or_else(|| Error::Config(format!("{tokens} tokens of patch {ph} is no image size")))?;
                [px, px]
            }
        };
        let cfg = MlpMixerConfig { block, img_size, patch: ph, in_chans, dim, depth, tokens_hidden, channels_hidden, num_classes };
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
                self.img_size[0],
                self.img_size[1],
                self.patch,
                self.tokens()
            )));
        }
        if self.block == BlockKind::Gmlp && !self.channels_hidden.is_multiple_of(2) {
            return Err(Error::tensor("blocks.0.mlp_channels.fc1.weight", format!("gMLP needs an even hidden width, not {}", self.channels_hidden)));
        }
        super::check_bounds(&[
            ("dim", self.dim, 1 << 14),
            ("depth", self.depth, 256),
            ("tokens_hidden", self.tokens_hidden.unwrap_or(1), 1 << 15),
            ("channels_hidden", self.channels_hidden, 1 << 16),
            ("num_classes", self.num_classes, 1 << 16),
            ("in_chans", self.in_chans, 64),
            ("tokens", tokens, 1 << 14),
        ])
    }

    pub fn preset(&self) -> Option<&'static str> {
        let key = (self.block, self.patch, self.dim, self.depth, self.tokens_hidden, self.channels_hidden);
        PRESETS.iter().find(|&&(_, b, p, d, depth, t, c)| (b, p, d, depth, t, c) == key && self.img_size == [224, 224]).map(|p| p.0)
    }

    /// Multiply-accumulates for one image (what timm/fvcore count as MACs).
    pub fn macs(&self) -> u64 {
        let (s, d, h) = (self.tokens() as u64, self.dim as u64, self.channels_hidden as u64);
        let stem = s * d * (self.in_chans * self.patch * self.patch) as u64;
        let block = match self.block {
            BlockKind::Mixer => 2 * d * s * self.tokens_hidden.unwrap_or(0) as u64 + 2 * s * d * h,
            BlockKind::Gmlp => s * d * h + s * s * h / 2 + s * h / 2 * d,
            BlockKind::Resmlp => s * s * d + 2 * s * d * h,
        };
        stem + self.depth as u64 * block + d * self.num_classes as u64
    }

    /// timm's pretrained-config preprocessing: Mixer and gMLP mean = std = 0.5, ResMLP the
    /// ImageNet statistics; all crop 0.875.
    pub fn default_preprocess(&self) -> Preprocess {
        match self.block {
            BlockKind::Mixer | BlockKind::Gmlp => Preprocess::half_normalised(self.in_chans, self.img_size),
            BlockKind::Resmlp => Preprocess::imagenet(self.in_chans, self.img_size, 0.875),
        }
    }
}

/// timm `MlpMixer` as a [`Net`]: stem, blocks, final norm, mean over tokens, head.
pub fn build(w: &mut Weights, cfg: &MlpMixerConfig) -> Result<Net> {
    let MlpMixerConfig { patch, in_chans, dim, num_classes, channels_hidden, .. } = *cfg;
    let tokens = cfg.tokens();
    let mut builder = Builder::new(w);
    let n = &mut builder;
    let stem_w = n.take("stem.proj.weight", &[dim, in_chans, patch, patch])?;
    let stem_b = n.take("stem.proj.bias", &[dim])?;
    let mut blocks = Vec::with_capacity(cfg.depth);
    for i in 0..cfg.depth {
        let p = format!("blocks.{i}");
        let channels = format!("{p}.mlp_channels");
        blocks.push(match cfg.block {
            BlockKind::Mixer => Block {
                token: Some(Branch {
                    norm: Norm::layer(n, &format!("{p}.norm1"), dim, LN_EPS)?,
                    mixer: TokenMixer::Mlp(TokenMlp::load(n, &format!("{p}.mlp_tokens"), tokens, cfg.tokens_hidden.unwrap_or(0))?),
                    layer_scale: None,
                }),
                channel: Branch {
                    norm: Norm::layer(n, &format!("{p}.norm2"), dim, LN_EPS)?,
                    mixer: ChannelMixer::Mlp(Mlp::load(n, &channels, dim, channels_hidden, false)?),
                    layer_scale: None,
                },
            },
            BlockKind::Gmlp => Block {
                token: None,
                channel: Branch {
                    norm: Norm::layer(n, &format!("{p}.norm"), dim, LN_EPS)?,
                    mixer: ChannelMixer::Gated(GatedMlp::load(n, &channels, dim, channels_hidden, tokens)?),
                    layer_scale: None,
                },
            },
            BlockKind::Resmlp => Block {
                token: Some(Branch {
                    norm: Norm::affine(n, &format!("{p}.norm1"), dim)?,
                    mixer: TokenMixer::Linear(LinearTokens::load(n, &format!("{p}.linear_tokens"), tokens)?),
                    layer_scale: Some(n.take(&format!("{p}.ls1"), &[dim])?),
                }),
                channel: Branch {
                    norm: Norm::affine(n, &format!("{p}.norm2"), dim)?,
                    mixer: ChannelMixer::Mlp(Mlp::load(n, &channels, dim, channels_hidden, false)?),
                    layer_scale: Some(n.take(&format!("{p}.ls2"), &[dim])?),
                },
            },
        });
    }
    let norm = match cfg.block {
        BlockKind::Resmlp => Norm::affine(n, "norm", dim)?,
        _ => Norm::layer(n, "norm", dim, LN_EPS)?,
    };
    let head_w = n.take("head.weight", &[num_classes, dim])?;
    let head_b = n.take("head.bias", &[num_classes])?;

    // Patch embedding: a stride-`patch` convolution as an implicit-im2col GEMM, written
    // straight into token-major [tokens, dim] order.
    let geometry = ConvGeometry { cin: in_chans, ih: cfg.img_size[0], iw: cfg.img_size[1], kh: patch, kw: patch, stride: patch, pad: 0 };
    n.gemm(Gemm::new(GemmKind::Conv { input: Slot::Input, geometry, nhwc: false }, stem_w, View::dense(Slot::X, tokens, dim)).bias(stem_b));
    let stream = Stream { grid: cfg.grid(), dim, x: Slot::X, xn: Slot::Xn };
    for block in &blocks {
        block.describe(n, &stream)?;
    }
    n.push(norm.step(tokens, Slot::X, Slot::Xn));
    n.push(Step::MeanTokens { tokens, d: dim, x: Slot::Xn, y: Slot::Pooled });
    n.gemm(
        Gemm::new(GemmKind::Linear { rows: 1, a: View::dense(Slot::Pooled, 1, dim) }, head_w, View::dense(Slot::Logits, 1, num_classes)).bias(head_b),
    );
    // Class evidence per token: the head applied to each normalised token, over T (the
    // pooling is a mean, so these sum to the logits less the bias).
    let inv_tokens = builder.add("explain.inv_tokens", vec![num_classes], vec![1.0 / tokens as f32; num_classes]);
    let explain = Explain {
        steps: vec![Step::Gemm(
            Gemm::new(
                GemmKind::Linear { rows: tokens, a: View::dense(Slot::Xn, tokens, dim) },
                head_w,
                View::dense(Slot::Evidence, tokens, num_classes),
            )
            .scale(Some(inv_tokens)),
        )],
        grid: cfg.grid(),
        bias: builder.data(head_b).to_vec(),
        frozen_norm: None,
    };
    let input = in_chans * cfg.img_size[0] * cfg.img_size[1];
    builder.finish(input, num_classes, Some(explain))
}
