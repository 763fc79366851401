//! Family dispatch: the architectures tokenmix runs, with what every caller asks of them
//! (name, preset, size, input, the network description).

use serde::Serialize;

use crate::error::Result;
use crate::net::Net;
use crate::preprocess::Preprocess;
use crate::weights::Weights;

use super::metaformer::{self, MetaFormerConfig};
use super::mlp_mixer::{self, MlpMixerConfig};

/// One of the supported architectures, with its inferred configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "class", rename_all = "snake_case")]
pub enum Arch {
    /// timm `MlpMixer`: MLP-Mixer, gMLP or ResMLP, by block kind.
    MlpMixer(MlpMixerConfig),
    /// timm `MetaFormer` with the pooling mixer: PoolFormer.
    MetaFormer(MetaFormerConfig),
}

impl Arch {
    pub fn family(&self) -> &'static str {
        match self {
            Arch::MlpMixer(c) => c.block.family(),
            Arch::MetaFormer(_) => "PoolFormer",
        }
    }
    pub fn preset(&self) -> Option<&'static str> {
        match self {
            Arch::MlpMixer(c) => c.preset(),
            Arch::MetaFormer(c) => c.preset(),
        }
    }
    pub fn macs(&self) -> u64 {
        match self {
            Arch::MlpMixer(c) => c.macs(),
            Arch::MetaFormer(c) => c.macs(),
        }
    }
    pub fn input_shape(&self) -> [usize; 3] {
        let (c, [h, w]) = match self {
            Arch::MlpMixer(c) => (c.in_chans, c.img_size),
            Arch::MetaFormer(c) => (c.in_chans, c.img_size),
        };
        [c, h, w]
    }
    pub fn num_classes(&self) -> usize {
        match self {
            Arch::MlpMixer(c) => c.num_classes,
            Arch::MetaFormer(c) => c.num_classes,
        }
    }
    /// Floats of one image's widest activation (an upper bound of what a plan allocates per
    /// image for one buffer), in u64 so a hostile config cannot overflow it on wasm32.
    pub fn widest_activation(&self) -> u64 {
        let [c, h, w] = self.input_shape();
        let input = (c * h * w) as u64;
        match self {
            Arch::MlpMixer(m) => {
                let (t, d) = (m.tokens() as u64, m.dim as u64);
                let rows = [d, m.channels_hidden as u64].into_iter().max().unwrap_or(1) * t;
                rows.max(m.tokens_hidden.unwrap_or(0) as u64 * d).max(input)
            }
            Arch::MetaFormer(m) => {
                let grids = m.grids().unwrap_or_default();
                grids
                    .iter()
                    .zip(m.dims.iter().zip(&m.mlp_hidden))
                    .map(|(&(gh, gw), (&d, &hid))| (gh * gw) as u64 * d.max(hid) as u64)
                    .max()
                    .unwrap_or(0)
                    .max(input)
            }
        }
    }
    /// The network description, taking its tensors from `w`.
    pub fn build(&self, w: &mut Weights) -> Result<Net> {
        match self {
            Arch::MlpMixer(c) => mlp_mixer::build(w, c),
            Arch::MetaFormer(c) => metaformer::build(w, c),
        }
    }
    /// timm's pretrained-config preprocessing for the family.
    pub(crate) fn default_preprocess(&self) -> Preprocess {
        match self {
            Arch::MlpMixer(c) => c.default_preprocess(),
            Arch::MetaFormer(c) => c.default_preprocess(),
        }
    }
}
