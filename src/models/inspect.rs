//! Everything checkable without running anything: the safetensors header and tensor table,
//! metadata, the architecture inferred from names and shapes within sane bounds, the
//! activation bound, preprocessing and labels.

use crate::error::{Error, Result};
use crate::preprocess::{Preprocess, MAX_INPUT_SIDE};
use crate::weights::Weights;

use super::arch::Arch;
use super::metaformer::MetaFormerConfig;
use super::mlp_mixer::MlpMixerConfig;

/// Limits on `__metadata__` entries, so a hostile file cannot make us parse megabytes of JSON.
const MAX_METADATA_BYTES: usize = 1 << 20;
/// Bound on one image's widest activation (1 GiB): a config implied by shapes that would need
/// more is refused before anything is allocated, whatever the executor.
pub(crate) const MAX_ACTIVATION_BYTES: u64 = 1 << 30;

/// tokenmix's own `__metadata__` entries (all optional): `config` (JSON, may give `img_size`),
/// `preprocess` (JSON, [`Preprocess`]), `labels` (JSON array of strings).
struct Metadata {
    img_size: Option<[usize; 2]>,
    preprocess: Option<Preprocess>,
    labels: Vec<String>,
}

impl Metadata {
    fn parse(w: &Weights) -> Result<Self> {
        let get = |key: &str| -> Result<Option<&String>> {
            match w.metadata.get(key) {
                Some(v) if v.len() > MAX_METADATA_BYTES => {
                    Err(Error::Config(format!("metadata `{key}` is {} bytes, over the {MAX_METADATA_BYTES}-byte limit", v.len())))
                }
                v => Ok(v),
            }
        };
        let img_size = match get("config")? {
            Some(s) => {
                let v: serde_json::Value = serde_json::from_str(s).map_err(|e| Error::Config(format!("metadata `config` is not JSON: {e}")))?;
                match v.get("img_size") {
                    None => None,
                    Some(s) => {
                        Some(serde_json::from_value::<[usize; 2]>(s.clone()).map_err(|e| Error::Config(format!("metadata `config.img_size`: {e}")))?)
                    }
                }
            }
            None => None,
        };
        let preprocess = get("preprocess")?
            .map(|s| serde_json::from_str::<Preprocess>(s).map_err(|e| Error::Config(format!("metadata `preprocess`: {e}"))))
            .transpose()?;
        let labels = get("labels")?
            .map(|s| serde_json::from_str::<Vec<String>>(s).map_err(|e| Error::Config(format!("metadata `labels`: {e}"))))
            .transpose()?
            .unwrap_or_default();
        Ok(Metadata { img_size, preprocess, labels })
    }
}

/// A model file checked before anything runs: header and tensor table
/// (safetensors validates offsets, sizes and dtypes against the file length), metadata (size-
/// limited JSON), the architecture inferred from names and shapes within sane bounds, the
/// preprocessing, and labels matching the classes. [`super::Model::load`] builds the network from what this returns;
/// the fuzz target and `tokenmix info`-style checks can stop here.
pub struct Inspected<'a> {
    pub weights: Weights<'a>,
    pub arch: Arch,
    pub preprocess: Preprocess,
    pub labels: Vec<String>,
}

/// Parses and checks a model file without a GPU (see [`Inspected`]).
pub fn inspect(bytes: &[u8], img_size: Option<[usize; 2]>) -> Result<Inspected<'_>> {
    let w = Weights::parse(bytes)?;
    let meta = Metadata::parse(&w)?;
    let img_size = img_size.or(meta.img_size).or(meta.preprocess.as_ref().map(|p| p.size));
    // Bounded before any arithmetic on it (the input sizes Preprocess takes).
    if let Some([h, w]) = img_size {
        if h == 0 || w == 0 || h > MAX_INPUT_SIDE || w > MAX_INPUT_SIDE {
            return Err(Error::Config(format!("image size {h}x{w} is outside 1..={MAX_INPUT_SIDE} a side")));
        }
    }
    let arch = if let Some(kind) = MlpMixerConfig::detect(&w) {
        Arch::MlpMixer(MlpMixerConfig::infer(&w, kind, img_size)?)
    } else if MetaFormerConfig::detect(&w) {
        Arch::MetaFormer(MetaFormerConfig::infer(&w, img_size)?)
    } else {
        let some: Vec<&str> = w.names().take(4).collect();
        return Err(Error::Config(format!(
            "not a recognised timm checkpoint (MLP-Mixer, gMLP, ResMLP: stem.proj.weight and blocks.N.*; \
             PoolFormer: stem.conv.weight and stages.N.*); first tensors: [{}]",
            some.join(", ")
        )));
    };
    let widest = arch.widest_activation() as u64 * 4;
    if widest > MAX_ACTIVATION_BYTES {
        return Err(Error::Config(format!(
            "this {} would need {widest} bytes for one image's widest activation, over tokenmix's {MAX_ACTIVATION_BYTES}-byte bound",
            arch.family()
        )));
    }
    // The visualiser's maps of an MLP-Mixer's token MLPs (tokens x tokens a layer, made at
    // load) are not in the file: a small file with many tokens would need gigabytes.
    if let Arch::MlpMixer(c) = &arch {
        let maps = (c.tokens() as u64).pow(2) * c.depth as u64 * 4;
        if c.block == super::mlp_mixer::BlockKind::Mixer && maps > MAX_ACTIVATION_BYTES {
            return Err(Error::Config(format!(
                "this MLP-Mixer's {} token-mixing maps of {} tokens would need {maps} bytes, over tokenmix's {MAX_ACTIVATION_BYTES}-byte bound",
                c.depth,
                c.tokens()
            )));
        }
    }
    let preprocess = match meta.preprocess {
        Some(p) => {
            p.validate()?;
            let [c, h, wd] = arch.input_shape();
            if p.channels != c || p.size != [h, wd] {
                return Err(Error::Config(format!(
                    "metadata preprocess gives {}x{}x{}, the model takes {c}x{h}x{wd}",
                    p.channels, p.size[0], p.size[1]
                )));
            }
            p
        }
        None => arch.default_preprocess(),
    };
    if !meta.labels.is_empty() && meta.labels.len() != arch.num_classes() {
        return Err(Error::Config(format!("metadata has {} labels for {} classes", meta.labels.len(), arch.num_classes())));
    }
    Ok(Inspected { weights: w, arch, preprocess, labels: meta.labels })
}

/// Number of consecutive indices i = 0, 1, … for which `{prefix}{i}{suffix}` exists.
pub(crate) fn count_indexed(w: &Weights, prefix: &str, suffix: &str) -> usize {
    (0..).take_while(|i| w.contains(&format!("{prefix}{i}{suffix}"))).count()
}

/// Rejects configs outside sane bounds before anything is allocated.
pub(crate) fn check_bounds(items: &[(&str, usize, usize)]) -> Result<()> {
    for &(name, value, max) in items {
        if value == 0 || value > max {
            return Err(Error::Config(format!("{name} = {value} is outside 1..={max}")));
        }
    }
    Ok(())
}
