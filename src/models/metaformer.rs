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
use crate::net::{Builder, ConvGeometry, Explain, FrozenNorm, Gemm, GemmKind, Net, Slot, Step, View};
use crate::preprocess::Preprocess;
use crate::weights::Weights;

use super::block::{Block, Branch, ChannelMixer, Mlp, Stream, TokenMixer};
use super::norm::Norm;
use super::pooling::Pooling;

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
const PRESETS: &[(&str, [usize; 4], [usize; 4], f64)] = &[
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
            return Err(Error::tensor(
                "head.fc.fc1.weight",
                "an MLP head (as in ConvFormer/CAFormer) is not supported; PoolFormer's head is one Linear",
            ));
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

    fn preset_entry(&self) -> Option<&'static (&'static str, [usize; 4], [usize; 4], f64)> {
        PRESETS
            .iter()
            .find(|(_, depths, dims, _)| self.depths == depths && self.dims == dims && self.mlp_hidden.iter().zip(dims).all(|(h, d)| *h == 4 * d))
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

/// timm `MetaFormer` (pooling mixer) as a [`Net`]. The residual stream alternates between
/// slots `X` and `Xn` at each downsampling (the convolution reads one and writes the other).
/// Each stage ends with a [`Step::Snapshot`] of its output (the page's per-stage energy).
pub fn build(w: &mut Weights, cfg: &MetaFormerConfig) -> Result<Net> {
    let grids = cfg.grids()?;
    let (cin, d0, last) = (cfg.in_chans, cfg.dims[0], cfg.dims[cfg.dims.len() - 1]);
    let mut builder = Builder::new(w);
    let n = &mut builder;
    let stem_w = n.take("stem.conv.weight", &[d0, cin, STEM.0, STEM.0])?;
    let stem_b = n.take("stem.conv.bias", &[d0])?;
    let (k, s, p) = STEM;
    let geometry = ConvGeometry { cin, ih: cfg.img_size[0], iw: cfg.img_size[1], kh: k, kw: k, stride: s, pad: p };
    let (h0, w0) = grids[0];
    n.gemm(Gemm::new(GemmKind::Conv { input: Slot::Input, geometry, nhwc: false }, stem_w, View::dense(Slot::X, h0 * w0, d0)).bias(stem_b));
    let (mut x, mut xn) = (Slot::X, Slot::Xn);
    for (i, (&d, &hid)) in cfg.dims.iter().zip(&cfg.mlp_hidden).enumerate() {
        let pre = format!("stages.{i}");
        let (h, wd) = grids[i];
        if i > 0 && cfg.dims[i - 1] != d {
            let (k, s, p) = DOWNSAMPLE;
            let cw = n.take(&format!("{pre}.downsample.conv.weight"), &[d, cfg.dims[i - 1], k, k])?;
            let cb = n.take(&format!("{pre}.downsample.conv.bias"), &[d])?;
            let (ph, pw) = grids[i - 1];
            let geometry = ConvGeometry { cin: cfg.dims[i - 1], ih: ph, iw: pw, kh: k, kw: k, stride: s, pad: p };
            // Reads the previous stage's channels-last tokens in place.
            n.gemm(Gemm::new(GemmKind::Conv { input: x, geometry, nhwc: true }, cw, View::dense(xn, h * wd, d)).bias(cb));
            (x, xn) = (xn, x);
        }
        let stream = Stream { grid: (h, wd), dim: d, x, xn };
        for j in 0..cfg.depths[i] {
            let b = format!("{pre}.blocks.{j}");
            let block = Block {
                token: Some(Branch {
                    norm: Norm::group(n, &format!("{b}.norm1"), d, GN_EPS)?,
                    mixer: TokenMixer::Pool(Pooling),
                    layer_scale: Some(n.take_or(&format!("{b}.layer_scale1.scale"), d, 1.0)?),
                }),
                channel: Branch {
                    norm: Norm::group(n, &format!("{b}.norm2"), d, GN_EPS)?,
                    mixer: ChannelMixer::Mlp(Mlp::load(n, &format!("{b}.mlp"), d, hid, true)?),
                    layer_scale: Some(n.take_or(&format!("{b}.layer_scale2.scale"), d, 1.0)?),
                },
            };
            block.describe(n, &stream)?;
        }
        n.push(Step::Snapshot { x, floats: h * wd * d });
        n.stages.push(((h, wd), d));
    }
    let head_norm = Norm::layer(n, "head.norm", last, HEAD_LN_EPS)?;
    let head_w = n.take("head.fc.weight", &[cfg.num_classes, last])?;
    let head_b = n.take("head.fc.bias", &[cfg.num_classes])?;
    let (h, wd) = grids[grids.len() - 1];
    n.push(Step::MeanTokens { tokens: h * wd, d: last, x, y: Slot::Pooled });
    n.push(head_norm.step(1, Slot::Pooled, Slot::Aux));
    n.gemm(
        Gemm::new(GemmKind::Linear { rows: 1, a: View::dense(Slot::Aux, 1, last) }, head_w, View::dense(Slot::Logits, 1, cfg.num_classes))
            .bias(head_b),
    );
    // Class evidence per token of the last stage, with the head norm's statistics frozen at
    // this image's (see `net::FrozenNorm`): the GEMM runs with W ⊙ γ folded, the host
    // subtracts μ and divides by σ.
    let Norm::Layer { gamma, beta, eps, .. } = head_norm else {
        return Err(Error::Config("PoolFormer's head norm is a LayerNorm".into()));
    };
    let classes = cfg.num_classes;
    let (wdata, g, b, hb) = (builder.data(head_w), builder.data(gamma), builder.data(beta), builder.data(head_b));
    let folded: Vec<f32> = wdata.chunks(last).flat_map(|row| row.iter().zip(g).map(|(w, g)| w * g)).collect();
    let row_sums = folded.chunks(last).map(|r| r.iter().map(|&v| v as f64).sum::<f64>() as f32).collect();
    let bias = wdata.chunks(last).zip(hb).map(|(row, hb)| row.iter().zip(b).map(|(w, b)| (w * b) as f64).sum::<f64>() as f32 + hb).collect();
    let tokens = h * wd;
    let folded = builder.add("head.fc.weight*head.norm.weight", vec![classes, last], folded);
    let inv_tokens = builder.add("explain.inv_tokens", vec![classes], vec![1.0 / tokens as f32; classes]);
    let explain = Explain {
        steps: vec![Step::Gemm(
            Gemm::new(GemmKind::Linear { rows: tokens, a: View::dense(x, tokens, last) }, folded, View::dense(Slot::Evidence, tokens, classes))
                .scale(Some(inv_tokens)),
        )],
        grid: (h, wd),
        bias,
        frozen_norm: Some(FrozenNorm { d: last, eps, row_sums }),
    };
    let input = cin * cfg.img_size[0] * cfg.img_size[1];
    builder.finish(input, cfg.num_classes, Some(explain))
}
