//! Models: configuration inferred from a timm checkpoint, weights uploaded once, and per-batch
//! plans (activation buffers + the recorded list of ops) built once and reused.
//!
//! Layout: `block.rs` is the shared MetaFormer block and `norm.rs` its norms; each token mixer
//! has its own small file (`token_mlp.rs` MLP-Mixer, `spatial_gating.rs` gMLP,
//! `linear_tokens.rs` ResMLP, `pooling.rs` PoolFormer); each timm model class is one file
//! (`mlp_mixer.rs`: Mixer, gMLP, ResMLP; `metaformer.rs`: PoolFormer), with its presets.

pub mod block;
pub mod linear_tokens;
pub mod metaformer;
pub mod mlp_mixer;
pub mod norm;
pub mod pooling;
pub mod spatial_gating;
pub mod token_mlp;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::ops::{self, Op};
use crate::preprocess::Preprocess;
use crate::weights::Weights;

pub use metaformer::{MetaFormer, MetaFormerConfig};
pub use mlp_mixer::{BlockKind, MlpMixer, MlpMixerConfig};

/// The largest batch one plan is built for; longer inputs run in chunks.
pub const MAX_BATCH: usize = 64;
/// Limits on `__metadata__` entries, so a hostile file cannot make us parse megabytes of JSON.
const MAX_METADATA_BYTES: usize = 1 << 20;

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
    /// timm's pretrained-config preprocessing for the family.
    fn default_preprocess(&self) -> Preprocess {
        match self {
            Arch::MlpMixer(c) => c.default_preprocess(),
            Arch::MetaFormer(c) => c.default_preprocess(),
        }
    }
}

/// What `tokenmix info` and the page show about a loaded model.
#[derive(Clone, Debug, Serialize)]
pub struct ModelInfo {
    pub arch: Arch,
    pub family: &'static str,
    pub preset: Option<&'static str>,
    pub params: usize,
    pub macs: u64,
    pub labels: Vec<String>,
    pub preprocess: Preprocess,
}

enum Net {
    MlpMixer(MlpMixer),
    MetaFormer(MetaFormer),
}

/// Activation buffers for one batch size.
pub struct Buffers {
    pub input: wgpu::Buffer,
    pub x: wgpu::Buffer,
    pub xn: wgpu::Buffer,
    pub hidden: wgpu::Buffer,
    pub aux: wgpu::Buffer,
    pub pooled: wgpu::Buffer,
    pub logits: wgpu::Buffer,
    pub probs: wgpu::Buffer,
    /// Texture mirrors per stage (one for the isotropic models).
    pub mirrors: Vec<block::Mirrors>,
}

struct Plan {
    batch: usize,
    buffers: Buffers,
    ops: Vec<Op>,
}

/// The result of a forward pass, both [batch, classes] row-major.
#[derive(Clone, Debug)]
pub struct Output {
    pub classes: usize,
    pub logits: Vec<f32>,
    pub probs: Vec<f32>,
}

pub struct Model {
    pub gpu: Arc<Gpu>,
    pub info: ModelInfo,
    net: Net,
    plans: Mutex<HashMap<usize, Arc<Plan>>>,
}

impl Model {
    /// Loads a timm-named safetensors file. `img_size` overrides the input size (it must give
    /// the token count the weights were made for). Pipelines and the batch-1 plan are created
    /// here, so the first forward pass compiles nothing.
    pub fn load(gpu: Arc<Gpu>, bytes: &[u8], img_size: Option<[usize; 2]>) -> Result<Model> {
        let mut w = Weights::parse(bytes)?;
        let meta = Metadata::parse(&w)?;
        let img_size = img_size.or(meta.img_size).or(meta.preprocess.as_ref().map(|p| p.size));
        let (arch, net) = if let Some(kind) = MlpMixerConfig::detect(&w) {
            let cfg = MlpMixerConfig::infer(&w, kind, img_size)?;
            let net = MlpMixer::load(&gpu, &mut w, cfg.clone())?;
            (Arch::MlpMixer(cfg), Net::MlpMixer(net))
        } else if MetaFormerConfig::detect(&w) {
            let cfg = MetaFormerConfig::infer(&w, img_size)?;
            let net = MetaFormer::load(&gpu, &mut w, cfg.clone())?;
            (Arch::MetaFormer(cfg), Net::MetaFormer(net))
        } else {
            let some: Vec<&str> = w.names().take(4).collect();
            return Err(Error::Config(format!(
                "not a recognised timm checkpoint (MLP-Mixer, gMLP, ResMLP: stem.proj.weight and blocks.N.*; \
                 PoolFormer: stem.conv.weight and stages.N.*); first tensors: [{}]",
                some.join(", ")
            )));
        };
        w.finish()?;
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
            return Err(Error::Config(format!(
                "metadata has {} labels for {} classes",
                meta.labels.len(),
                arch.num_classes()
            )));
        }
        let info = ModelInfo {
            family: arch.family(),
            preset: arch.preset(),
            params: w.parameter_count(),
            macs: arch.macs(),
            labels: meta.labels,
            preprocess,
            arch,
        };
        let model = Model { gpu, info, net, plans: Mutex::default() };
        model.plan(1)?;
        Ok(model)
    }

    pub fn input_len(&self) -> usize {
        self.info.arch.input_shape().iter().product()
    }

    /// Floats per image of the activation buffers: (x, scratch, pooled).
    fn per_image(&self) -> (usize, block::Scratch, usize) {
        match &self.net {
            Net::MlpMixer(m) => m.per_image(),
            Net::MetaFormer(m) => m.per_image(),
        }
    }

    /// The largest batch one plan runs: [`MAX_BATCH`], or fewer when a batch's activations
    /// would pass the adapter's storage-binding limit. Longer inputs are split into chunks of
    /// this size, each bound and dispatched on its own, so a large batch on a small adapter
    /// runs rather than fails.
    pub fn max_batch(&self) -> usize {
        let limit = self.gpu.limits.max_storage_buffer_binding_size as u64;
        ((limit / self.widest_activation_bytes()) as usize).clamp(1, MAX_BATCH)
    }

    /// Bytes of the widest activation buffer for one image.
    pub fn widest_activation_bytes(&self) -> u64 {
        let (x, s, _) = self.per_image();
        [x, s.xn, s.hidden, s.aux, self.input_len()].into_iter().max().unwrap_or(1).max(1) as u64 * 4
    }

    fn plan(&self, batch: usize) -> Result<Arc<Plan>> {
        let mut plans = self.plans.lock().map_err(|_| Error::Gpu("plan cache poisoned".into()))?;
        if let Some(p) = plans.get(&batch) {
            return Ok(p.clone());
        }
        let gpu = &self.gpu;
        let classes = self.info.arch.num_classes();
        let (x, scratch, pooled) = self.per_image();
        let buffers = Buffers {
            input: gpu.storage("input", batch * self.input_len())?,
            x: gpu.storage("x", batch * x)?,
            xn: gpu.storage("xn", batch * scratch.xn)?,
            hidden: gpu.storage("hidden", batch * scratch.hidden.max(1))?,
            aux: gpu.storage("aux", batch * scratch.aux.max(1))?,
            pooled: gpu.storage("pooled", batch * pooled)?,
            logits: gpu.storage("logits", batch * classes)?,
            probs: gpu.storage("probs", batch * classes)?,
            mirrors: match &self.net {
                Net::MlpMixer(m) => m.mirrors(gpu, batch),
                Net::MetaFormer(m) => m.mirrors(gpu, batch),
            },
        };
        let mut ops = Vec::new();
        match &self.net {
            Net::MlpMixer(m) => m.record(gpu, batch, &buffers, &mut ops)?,
            Net::MetaFormer(m) => m.record(gpu, batch, &buffers, &mut ops)?,
        }
        ops.push(ops::reduce::softmax(gpu, batch, classes, &buffers.logits, &buffers.probs)?);
        gpu.check()?;
        let plan = Arc::new(Plan { batch, buffers, ops });
        plans.insert(batch, plan.clone());
        Ok(plan)
    }

    /// Runs `input` ([batch, C, H, W], preprocessed) through the model. One command encoder,
    /// weights and activations stay on the GPU, only logits and probabilities come back.
    pub async fn forward(&self, input: &[f32]) -> Result<Output> {
        let per = self.input_len();
        if input.is_empty() || input.len() % per != 0 {
            let [c, h, w] = self.info.arch.input_shape();
            return Err(Error::Input(format!("input has {} floats, expected a multiple of {c}x{h}x{w} = {per}", input.len())));
        }
        let classes = self.info.arch.num_classes();
        let total = input.len() / per;
        let mut out = Output { classes, logits: Vec::with_capacity(total * classes), probs: Vec::with_capacity(total * classes) };
        for chunk in input.chunks(self.max_batch() * per) {
            let plan = self.plan(chunk.len() / per)?;
            let (logits, probs) = self.run(&plan, chunk).await?;
            out.logits.extend(logits);
            out.probs.extend(probs);
        }
        Ok(out)
    }

    async fn run(&self, plan: &Plan, input: &[f32]) -> Result<(Vec<f32>, Vec<f32>)> {
        let gpu = &self.gpu;
        let n = (plan.batch * self.info.arch.num_classes()) as u64 * 4;
        // A fresh staging buffer per call keeps concurrent calls (the web's async classify)
        // independent: queue writes and submissions are ordered, mappings are not shared.
        let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("staging"),
            size: 2 * n,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let b = &plan.buffers;
        gpu.queue.write_buffer(&b.input, 0, bytemuck::cast_slice(input));
        let mut encoder = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") });
        ops::encode_all(&mut encoder, &plan.ops);
        encoder.copy_buffer_to_buffer(&b.logits, 0, &staging, 0, n);
        encoder.copy_buffer_to_buffer(&b.probs, 0, &staging, n, n);
        gpu.queue.submit([encoder.finish()]);
        let mut data = gpu.read_back(&staging).await?;
        let probs = data.split_off(data.len() / 2);
        Ok((data, probs))
    }

    /// Synchronous forward for native callers.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn forward_blocking(&self, input: &[f32]) -> Result<Output> {
        pollster::block_on(self.forward(input))
    }
}

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
                    Some(s) => Some(serde_json::from_value::<[usize; 2]>(s.clone()).map_err(|e| Error::Config(format!("metadata `config.img_size`: {e}")))?),
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
