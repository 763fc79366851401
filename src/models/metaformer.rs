//! timm's `MetaFormer` class with the pooling token mixer: PoolFormer (Yu et al. 2022). The
//! same block as the isotropic models (block.rs), in a four-stage pyramid:
//!
//! ```text
//! x = stem(image)                        # conv 7x7 stride 4 pad 2 → H/4 x W/4 x dims[0]
//! for i, stage in stages:
//!     if i > 0: x = downsample(x)        # conv 3x3 stride 2 pad 1 → dims[i]
//!     for block in stage:                # GroupNorm(1 group), pooling, layer scales
//!         x = x + ls1 * (AvgPool3x3(GN1(x)) - GN1(x))
//!         x = x + ls2 * Mlp(GN2(x))      # 1x1 convolutions = Linear layers
//! logits = fc(LayerNorm(mean_tokens(x)))
//! ```
//!
//! Activation layout: **channels-last** tokens [batch, h * w, dim], the isotropic models'
//! layout. Then the 1x1 convolutions are the channel MLP's row-major GEMMs unchanged, the
//! blocks are the shared `Block`, GroupNorm's statistics do not care about the order, the
//! pooling kernel reads neighbouring channels with neighbouring invocations, and only the
//! two kinds of strided convolution need an image view: the stem reads the NCHW input, the
//! downsampling convolutions read the previous stage's tokens in place as NHWC (`A_NHWC`).
//! No layout conversion pass anywhere.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::ops::{self, Axis, ConvGeometry, Gemm, Matrix, Op, Operand};
use crate::preprocess::Preprocess;
use crate::weights::Weights;

use super::block::{upload, upload_matrix, Block, Branch, ChannelMixer, Mirrors, Mlp, Scratch, Stream, TokenMixer};
use super::norm::Norm;
use super::pooling::Pooling;
use super::Buffers;

/// nn.GroupNorm's default eps, which timm's `GroupNorm1` keeps.
const GN_EPS: f32 = 1e-5;
/// The head's `LayerNorm2d` eps.
const HEAD_LN_EPS: f32 = 1e-6;
const STEM: (usize, usize, usize) = (7, 4, 2);
const DOWNSAMPLE: (usize, usize, usize) = (3, 2, 1);

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetaFormerConfig {
    pub img_size: [usize; 2],
    pub in_chans: usize,
    pub depths: Vec<usize>,
    pub dims: Vec<usize>,
    /// Channel-MLP width per stage (4 x dim in every timm preset).
    pub mlp_hidden: Vec<usize>,
    pub num_classes: usize,
}

/// timm's PoolFormer presets at 224²: (name, depths, dims, crop_pct of the pretrained config).
const PRESETS: &[(&str, [usize; 4], [usize; 4], f32)] = &[
    ("poolformer_s12", [2, 2, 6, 2], [64, 128, 320, 512], 0.9),
    ("poolformer_s24", [4, 4, 12, 4], [64, 128, 320, 512], 0.9),
    ("poolformer_s36", [6, 6, 18, 6], [64, 128, 320, 512], 0.9),
    ("poolformer_m36", [6, 6, 18, 6], [96, 192, 384, 768], 0.95),
    ("poolformer_m48", [8, 8, 24, 8], [96, 192, 384, 768], 0.95),
];

fn conv_out(n: usize, (k, s, p): (usize, usize, usize)) -> Option<usize> {
    (n + 2 * p).checked_sub(k).map(|v| v / s + 1)
}

impl MetaFormerConfig {
    pub fn detect(w: &Weights) -> bool {
        w.contains("stem.conv.weight") && w.contains("stages.0.blocks.0.norm1.weight")
    }

    pub fn infer(w: &Weights, img_size: Option<[usize; 2]>) -> Result<Self> {
        let stem = w.require_shape("stem.conv.weight")?;
        let &[d0, in_chans, 7, 7] = stem else {
            return Err(Error::tensor("stem.conv.weight", format!("has shape {stem:?}, expected [dim, in_chans, 7, 7]")));
        };
        let stages = super::count_indexed(w, "stages.", ".blocks.0.norm1.weight");
        let (mut depths, mut dims, mut mlp_hidden) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..stages {
            let p = format!("stages.{i}.blocks.");
            depths.push(super::count_indexed(w, &p, ".norm1.weight"));
            let norm = format!("{p}0.norm1.weight");
            let &[d] = w.require_shape(&norm)? else {
                return Err(Error::tensor(&norm, "expected a vector"));
            };
            dims.push(d);
            let fc1 = format!("{p}0.mlp.fc1.weight");
            let &[h, _, 1, 1] = w.require_shape(&fc1)? else {
                return Err(Error::tensor(&fc1, "expected a 1x1 convolution [hidden, dim, 1, 1]"));
            };
            mlp_hidden.push(h);
            let mixer = format!("{p}0.token_mixer");
            if let Some(name) = w.names().find(|n| n.starts_with(&mixer)) {
                return Err(Error::tensor(name, "this MetaFormer's token mixer has weights; tokenmix runs the pooling mixer (PoolFormer) only"));
            }
        }
        if stages == 0 || dims[0] != d0 {
            return Err(Error::tensor("stages.0.blocks.0.norm1.weight", "missing, or its width differs from the stem's"));
        }
        if w.contains("head.fc.fc1.weight") {
            return Err(Error::tensor("head.fc.fc1.weight", "an MLP head (as in ConvFormer/CAFormer) is not supported; PoolFormer's head is one Linear"));
        }
        let head = w.require_shape("head.fc.weight")?;
        let &[num_classes, _] = head else {
            return Err(Error::tensor("head.fc.weight", format!("has shape {head:?}, expected [classes, dim]")));
        };
        let cfg = MetaFormerConfig { img_size: img_size.unwrap_or([224, 224]), in_chans, depths, dims, mlp_hidden, num_classes };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<()> {
        super::check_bounds(&[("stages", self.dims.len(), 8), ("in_chans", self.in_chans, 64), ("num_classes", self.num_classes, 1 << 16)])?;
        for i in 0..self.dims.len() {
            super::check_bounds(&[("depth", self.depths[i], 256), ("dim", self.dims[i], 1 << 14), ("mlp hidden", self.mlp_hidden[i], 1 << 16)])?;
        }
        let grids = self.grids()?;
        let tokens = grids[0].0 * grids[0].1;
        super::check_bounds(&[("stem tokens", tokens, 1 << 16)])
    }

    /// Token grid (h, w) of each stage.
    pub fn grids(&self) -> Result<Vec<(usize, usize)>> {
        let [h, w] = self.img_size;
        let too_small = || Error::Input(format!("image {h}x{w} is too small for PoolFormer's stem and {} stages", self.dims.len()));
        let mut g = (conv_out(h, STEM).ok_or_else(too_small)?, conv_out(w, STEM).ok_or_else(too_small)?);
        let mut grids = Vec::new();
        for i in 0..self.dims.len() {
            if i > 0 && self.dims[i] != self.dims[i - 1] {
                g = (conv_out(g.0, DOWNSAMPLE).ok_or_else(too_small)?, conv_out(g.1, DOWNSAMPLE).ok_or_else(too_small)?);
            }
            grids.push(g);
        }
        Ok(grids)
    }

    fn preset_entry(&self) -> Option<&'static (&'static str, [usize; 4], [usize; 4], f32)> {
        PRESETS.iter().find(|(_, depths, dims, _)| {
            self.depths == depths && self.dims == dims && self.mlp_hidden.iter().zip(dims).all(|(h, d)| *h == 4 * d)
        })
    }

    pub fn preset(&self) -> Option<&'static str> {
        self.preset_entry().filter(|_| self.img_size == [224, 224]).map(|p| p.0)
    }

    pub fn macs(&self) -> u64 {
        let grids = self.grids().unwrap_or_default();
        let mut macs = 0u64;
        let mut prev = self.in_chans;
        for (i, &(h, w)) in grids.iter().enumerate() {
            let (t, d) = ((h * w) as u64, self.dims[i] as u64);
            let k = if i == 0 { STEM.0 } else { DOWNSAMPLE.0 };
            if i == 0 || self.dims[i] != prev {
                macs += t * d * (prev * k * k) as u64;
            }
            macs += self.depths[i] as u64 * 2 * t * d * self.mlp_hidden[i] as u64;
            prev = self.dims[i];
        }
        macs + (prev * self.num_classes) as u64
    }

    /// timm's pretrained config: ImageNet mean/std, crop 0.9 (0.95 for the m-models).
    pub fn default_preprocess(&self) -> Preprocess {
        Preprocess::imagenet(self.in_chans, self.img_size, self.preset_entry().map_or(0.9, |p| p.3))
    }
}

struct Stage {
    /// The strided convolution into this stage's width (absent when the width is unchanged).
    downsample: Option<(Matrix, wgpu::Buffer)>,
    blocks: Vec<Block>,
}

pub struct MetaFormer {
    pub cfg: MetaFormerConfig,
    grids: Vec<(usize, usize)>,
    stem_w: Matrix,
    stem_b: wgpu::Buffer,
    stages: Vec<Stage>,
    head_norm: Norm,
    head_w: Matrix,
    head_b: wgpu::Buffer,
}

impl MetaFormer {
    pub fn load(gpu: &Gpu, w: &mut Weights, cfg: MetaFormerConfig) -> Result<Self> {
        let grids = cfg.grids()?;
        let (cin, d0, last) = (cfg.in_chans, cfg.dims[0], cfg.dims[cfg.dims.len() - 1]);
        let stem_w = upload_matrix(gpu, w, "stem.conv.weight", &[d0, cin, STEM.0, STEM.0])?;
        let stem_b = upload(gpu, w, "stem.conv.bias", &[d0])?;
        let mut stages = Vec::new();
        for (i, (&d, &h)) in cfg.dims.iter().zip(&cfg.mlp_hidden).enumerate() {
            let p = format!("stages.{i}");
            let downsample = match i {
                0 => None,
                _ if cfg.dims[i - 1] == d => None,
                _ => {
                    let k = DOWNSAMPLE.0;
                    let cw = upload_matrix(gpu, w, &format!("{p}.downsample.conv.weight"), &[d, cfg.dims[i - 1], k, k])?;
                    Some((cw, upload(gpu, w, &format!("{p}.downsample.conv.bias"), &[d])?))
                }
            };
            let mut blocks = Vec::new();
            for j in 0..cfg.depths[i] {
                let b = format!("{p}.blocks.{j}");
                blocks.push(Block {
                    token: Some(Branch {
                        norm: Norm::group(gpu, w, &format!("{b}.norm1"), d, GN_EPS)?,
                        mixer: TokenMixer::Pool(Pooling),
                        layer_scale: Some(layer_scale(gpu, w, &format!("{b}.layer_scale1.scale"), d)?),
                    }),
                    channel: Branch {
                        norm: Norm::group(gpu, w, &format!("{b}.norm2"), d, GN_EPS)?,
                        mixer: ChannelMixer::Mlp(Mlp::load(gpu, w, &format!("{b}.mlp"), d, h, true)?),
                        layer_scale: Some(layer_scale(gpu, w, &format!("{b}.layer_scale2.scale"), d)?),
                    },
                });
            }
            stages.push(Stage { downsample, blocks });
        }
        let head_norm = Norm::layer(gpu, w, "head.norm", last, HEAD_LN_EPS)?;
        let head_w = upload_matrix(gpu, w, "head.fc.weight", &[cfg.num_classes, last])?;
        let head_b = upload(gpu, w, "head.fc.bias", &[cfg.num_classes])?;
        Ok(MetaFormer { cfg, grids, stem_w, stem_b, stages, head_norm, head_w, head_b })
    }

    /// Floats each activation buffer needs per image: (x, scratch, pooled). The residual
    /// stream alternates between `x` and `xn` at each downsampling, so both hold any stage.
    pub fn per_image(&self) -> (usize, Scratch, usize) {
        let mut scratch = Scratch::default();
        for (i, stage) in self.stages.iter().enumerate() {
            let ((h, w), d) = (self.grids[i], self.cfg.dims[i]);
            scratch = stage.blocks.iter().fold(scratch.max(Scratch { xn: h * w * d, ..Default::default() }), |s, b| s.max(b.scratch(h * w, d)));
        }
        let last = self.cfg.dims[self.cfg.dims.len() - 1];
        scratch.aux = scratch.aux.max(last);
        (scratch.xn, scratch, last)
    }

    /// (token grid, width) of each stage's output.
    pub fn stage_shapes(&self) -> Vec<((usize, usize), usize)> {
        self.grids.iter().copied().zip(self.cfg.dims.iter().copied()).collect()
    }

    pub fn mirrors(&self, gpu: &Gpu, batch: usize) -> Vec<Mirrors> {
        (0..self.stages.len())
            .map(|i| {
                let (h, w) = self.grids[i];
                Mirrors::new(gpu, batch * h * w, self.cfg.dims[i], Some(self.cfg.mlp_hidden[i]), None)
            })
            .collect()
    }

    pub fn record(&self, gpu: &Gpu, batch: usize, buf: &Buffers, ops: &mut Vec<Op>) -> Result<()> {
        let c = &self.cfg;
        let (k, s, p) = STEM;
        let g = ConvGeometry { cin: c.in_chans, ih: c.img_size[0], iw: c.img_size[1], kh: k, kw: k, stride: s, pad: p };
        ops.push(Gemm::conv(batch, g, &buf.input, &self.stem_w, &buf.x)?.bias(&self.stem_b, Axis::N).build(gpu)?);
        let (mut x, mut xn) = (&buf.x, &buf.xn);
        let mut stage_offset = 0;
        for (i, stage) in self.stages.iter().enumerate() {
            let ((h, w), d) = (self.grids[i], c.dims[i]);
            if let Some((cw, cb)) = &stage.downsample {
                let (ph, pw) = self.grids[i - 1];
                let (k, s, p) = DOWNSAMPLE;
                let g = ConvGeometry { cin: c.dims[i - 1], ih: ph, iw: pw, kh: k, kw: k, stride: s, pad: p };
                ops.push(Gemm::conv_nhwc(batch, g, x, cw, xn)?.bias(cb, Axis::N).build(gpu)?);
                (x, xn) = (xn, x);
            }
            let stream = Stream { batch, grid: (h, w), dim: d, x, xn, hidden: &buf.hidden, aux: &buf.aux, tex: &buf.mirrors[i] };
            for block in &stage.blocks {
                block.record(gpu, &stream, ops)?;
            }
            if let Some(snapshot) = &buf.stages {
                ops.push(Op::copy_buffer(x, snapshot, stage_offset, batch * h * w * d)?);
                stage_offset += batch * h * w * d;
            }
        }
        let ((h, w), d) = (self.grids[self.grids.len() - 1], c.dims[c.dims.len() - 1]);
        ops.push(ops::reduce::mean_tokens(gpu, batch, h * w, d, x, &buf.pooled)?);
        ops.push(self.head_norm.record(gpu, batch, 1, &buf.pooled, &buf.aux)?);
        ops.push(Gemm::linear(batch, Operand::new(&buf.aux, d, 0), &self.head_w, Operand::new(&buf.logits, c.num_classes, 0))
            .bias(&self.head_b, Axis::N)
            .build(gpu)?);
        Ok(())
    }
}

/// A `Scale` module's vector; a MetaFormer built without layer scale (timm's
/// `layer_scale_init_values=None`) has none, which is a scale of one.
fn layer_scale(gpu: &Gpu, w: &mut Weights, name: &str, dim: usize) -> Result<wgpu::Buffer> {
    if w.contains(name) {
        upload(gpu, w, name, &[dim])
    } else {
        gpu.storage_init(name, &vec![1.0; dim])
    }
}
