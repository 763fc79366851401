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
/// Bound on one image's widest activation (1 GiB): a config implied by shapes that would need
/// more is refused before anything is allocated, whatever the adapter.
const MAX_ACTIVATION_BYTES: u64 = 1 << 30;

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
                grids.iter().zip(m.dims.iter().zip(&m.mlp_hidden)).map(|(&(gh, gw), (&d, &hid))| (gh * gw) as u64 * d.max(hid) as u64).max().unwrap_or(0).max(input)
            }
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
    /// Batch-1 plans of PoolFormer: each stage's output, one after the other (for the page's
    /// per-stage activation energy).
    pub stages: Option<wgpu::Buffer>,
}

struct Plan {
    batch: usize,
    buffers: Buffers,
    ops: Vec<Op>,
}

pub use crate::preprocess::{MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE};

/// One image through [`Model::classify_rgba`]: the output, the model input the GPU made from
/// the pixels (CHW, normalised), and wall-clock milliseconds for preprocessing (CPU work and
/// upload), the forward pass (submit until the results are mapped: the GPU's preprocessing
/// and forward) and the read-back copy.
pub struct ImageRun {
    pub output: Output,
    pub input: Vec<f32>,
    /// PoolFormer: per stage, the token grid and each token's activation energy (L2 norm over
    /// channels) of this image. Empty for the isotropic models.
    pub stage_energy: Vec<((usize, usize), Vec<f32>)>,
    pub preprocess_ms: f64,
    pub forward_ms: f64,
    pub readback_ms: f64,
}

/// The result of a forward pass, both [batch, classes] row-major.
#[derive(Clone, Debug)]
pub struct Output {
    pub classes: usize,
    pub logits: Vec<f32>,
    pub probs: Vec<f32>,
}

impl Output {
    /// Class indices of image `i`, most probable first, at most `k` (at least one). Ties keep
    /// the lower index first (a stable sort), as torch's argmax/topk do.
    pub fn top_k(&self, i: usize, k: usize) -> Vec<usize> {
        let probs = &self.probs[i * self.classes..(i + 1) * self.classes];
        let mut order: Vec<usize> = (0..self.classes).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
        order.truncate(k.max(1));
        order
    }
}

/// One layer's learned token mixing, for the visualiser: a row-major `rows` x `cols` matrix
/// whose columns are the tokens of a `grid` (Mixer: token-MLP fc1, one row per hidden unit;
/// gMLP: the SGU projection; ResMLP: linear_tokens — both tokens x tokens). PoolFormer learns
/// no token mixing: its entry is the fixed 3x3 pooling-minus-identity kernel (grid 3x3).
#[derive(Clone, Debug, Serialize)]
pub struct TokenMixing {
    pub kind: &'static str,
    pub rows: usize,
    pub cols: usize,
    pub grid: (usize, usize),
    pub data: Vec<f32>,
    pub note: &'static str,
}

pub struct Model {
    pub gpu: Arc<Gpu>,
    pub info: ModelInfo,
    /// Token-mixing weights per layer (CPU copies, read at load).
    mixing: Vec<TokenMixing>,
    net: Net,
    plans: Mutex<HashMap<usize, Arc<Plan>>>,
}

impl Model {
    /// Loads a timm-named safetensors file. `img_size` overrides the input size (it must give
    /// the token count the weights were made for). Pipelines and the batch-1 plan are created
    /// here, so the first forward pass compiles nothing.
    pub fn load(gpu: Arc<Gpu>, bytes: &[u8], img_size: Option<[usize; 2]>) -> Result<Model> {
        let Inspected { mut weights, arch, preprocess, labels } = inspect(bytes, img_size)?;
        // What the adapter must hold, checked before any upload: one image's widest activation
        // in one binding (weights are split into row blocks, activations are not), and the
        // model's weights and batch-1 activations within the adapter's largest buffer budget.
        let limit = gpu.binding_limit();
        let widest = arch.widest_activation().saturating_mul(4);
        if widest > limit {
            return Err(Error::Config(format!(
                "{} needs {widest} bytes for one image's widest activation, over the adapter's binding limit of {limit} bytes",
                arch.family()
            )));
        }
        let w = &mut weights;
        let net = match &arch {
            Arch::MlpMixer(cfg) => Net::MlpMixer(MlpMixer::load(&gpu, w, cfg.clone())?),
            Arch::MetaFormer(cfg) => Net::MetaFormer(MetaFormer::load(&gpu, w, cfg.clone())?),
        };
        weights.finish()?;
        let mixing = token_mixing(&weights, &arch)?;
        let info = ModelInfo {
            family: arch.family(),
            preset: arch.preset(),
            params: weights.parameter_count(),
            macs: arch.macs(),
            labels,
            preprocess,
            arch,
        };
        let model = Model { gpu, info, mixing, net, plans: Mutex::default() };
        model.plan(1)?;
        Ok(model)
    }

    /// [`Self::load`] inside out-of-memory and validation error scopes (see [`Gpu::scoped`]):
    /// what the browser uses, where an allocation can fail asynchronously.
    pub async fn load_scoped(gpu: Arc<Gpu>, bytes: &[u8], img_size: Option<[usize; 2]>) -> Result<Model> {
        let g = gpu.clone();
        g.scoped("loading the model", move || Model::load(gpu, bytes, img_size)).await
    }

    /// Number of layers [`Self::token_mixing`] can show.
    pub fn mixing_layers(&self) -> usize {
        self.mixing.len()
    }

    pub fn token_mixing(&self, layer: usize) -> Option<&TokenMixing> {
        self.mixing.get(layer)
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
        let limit = self.gpu.binding_limit();
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
            stages: match &self.net {
                Net::MetaFormer(m) if batch == 1 => Some(gpu.storage("stages", m.stage_shapes().iter().map(|((h, w), d)| h * w * d).sum())?),
                _ => None,
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
        let staging = self.submit(plan, Some(input), None)?;
        let mut data = self.gpu.read_back(&staging).await?;
        let probs = data.split_off(data.len() / 2);
        Ok((data, probs))
    }

    /// Records `prologue` (ops that write the plan's input) or uploads `input`, then the
    /// forward pass, and copies logits, probabilities and — with a prologue — the input into a
    /// fresh staging buffer, returned for mapping. A fresh staging buffer per call keeps
    /// concurrent calls (the web's async classify) independent: queue writes and submissions
    /// are ordered, mappings are not shared.
    fn submit(&self, plan: &Plan, input: Option<&[f32]>, prologue: Option<&Op>) -> Result<wgpu::Buffer> {
        let gpu = &self.gpu;
        gpu.check()?;
        let n = (plan.batch * self.info.arch.num_classes()) as u64 * 4;
        let input_bytes = if prologue.is_some() { (plan.batch * self.input_len()) as u64 * 4 } else { 0 };
        // With a prologue (an image run) the stage snapshots are read back too, if the plan has them.
        let snapshot = prologue.and(plan.buffers.stages.as_ref());
        let stage_bytes = snapshot.map_or(0, |st| st.size());
        let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("staging"),
            size: 2 * n + input_bytes + stage_bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let b = &plan.buffers;
        if let Some(input) = input {
            gpu.queue.write_buffer(&b.input, 0, bytemuck::cast_slice(input));
        }
        let mut encoder = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") });
        if let Some(op) = prologue {
            ops::encode_all(&mut encoder, std::slice::from_ref(op));
        }
        ops::encode_all(&mut encoder, &plan.ops);
        encoder.copy_buffer_to_buffer(&b.logits, 0, &staging, 0, n);
        encoder.copy_buffer_to_buffer(&b.probs, 0, &staging, n, n);
        if input_bytes > 0 {
            encoder.copy_buffer_to_buffer(&b.input, 0, &staging, 2 * n, input_bytes);
        }
        if let Some(st) = snapshot {
            encoder.copy_buffer_to_buffer(st, 0, &staging, 2 * n + input_bytes, stage_bytes);
        }
        gpu.queue.submit([encoder.finish()]);
        Ok(staging)
    }

    /// Classifies one RGBA8 image (a browser ImageData) of any size: the model's preprocessing
    /// (`preprocess.wgsl`) runs on the GPU in the same submission as the forward pass. Images
    /// more than 4x larger than the resize target are first box-shrunk on the CPU by an integer
    /// factor, which keeps the GPU filter's footprint (and its run time) bounded. `now` is a
    /// millisecond clock (performance.now on the web).
    pub async fn classify_rgba(&self, rgba: &[u8], width: usize, height: usize, now: fn() -> f64) -> Result<ImageRun> {
        let t0 = now();
        let pp = &self.info.preprocess;
        let (pixels, sw, sh, g) = pp.prepare_rgba(rgba, width, height)?;
        let buf = self.gpu.storage_words("image", &pixels)?;
        let plan = self.plan(1)?;
        let op = ops::preprocess::rgba_to_input(&self.gpu, pp, &g, &buf, sw, sh, &plan.buffers.input)?;
        let staging = self.submit(&plan, None, Some(&op))?;
        let t1 = now();
        self.gpu.map_read(&staging).await?;
        let t2 = now();
        let mut data = self.gpu.copy_mapped(&staging)?;
        let classes = self.info.arch.num_classes();
        let mut input = data.split_off(2 * classes);
        let stages = input.split_off(self.input_len());
        let probs = data.split_off(classes);
        let stage_energy = self.stage_energy(&stages);
        let t3 = now();
        Ok(ImageRun {
            output: Output { classes, logits: data, probs },
            input,
            stage_energy,
            preprocess_ms: t1 - t0,
            forward_ms: t2 - t1,
            readback_ms: t3 - t2,
        })
    }

    /// Per-token L2 norms of each stage's output, from the stage snapshot of a batch-1 plan.
    fn stage_energy(&self, stages: &[f32]) -> Vec<((usize, usize), Vec<f32>)> {
        let Net::MetaFormer(m) = &self.net else { return Vec::new() };
        let mut at = 0;
        let mut out = Vec::new();
        for ((h, w), d) in m.stage_shapes() {
            let Some(stage) = stages.get(at..at + h * w * d) else { break };
            out.push(((h, w), stage.chunks(d).map(|t| t.iter().map(|v| v * v).sum::<f32>().sqrt()).collect()));
            at += h * w * d;
        }
        out
    }

    /// Synchronous forward for native callers.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn forward_blocking(&self, input: &[f32]) -> Result<Output> {
        pollster::block_on(self.forward(input))
    }
}

/// CPU copies of each layer's token-mixing weights (see [`TokenMixing`]), read after the
/// network loaded, so shapes are already checked and the grid is the inferred config's.
fn token_mixing(w: &Weights, arch: &Arch) -> Result<Vec<TokenMixing>> {
    let cfg = match arch {
        Arch::MlpMixer(cfg) => cfg,
        Arch::MetaFormer(_) => {
            let mut data = vec![1.0 / 9.0; 9];
            data[4] -= 1.0;
            return Ok(vec![TokenMixing {
                kind: "poolformer",
                rows: 3,
                cols: 3,
                grid: (3, 3),
                data,
                note: "PoolFormer learns no token mixing: every block averages each token's 3x3 neighbourhood and subtracts the token (interior weights shown; at borders only in-image neighbours count)",
            }]);
        }
    };
    let tokens = cfg.tokens();
    let (name, kind, rows, note) = match cfg.block {
        BlockKind::Mixer => ("mlp_tokens.fc1.weight", "mixer", cfg.tokens_hidden.unwrap_or(0), "token-MLP fc1: one row per hidden unit, its weights over the token grid"),
        BlockKind::Gmlp => ("mlp_channels.gate.proj.weight", "gmlp", tokens, "spatial gating projection: row t mixes output token t from every token"),
        BlockKind::Resmlp => ("linear_tokens.weight", "resmlp", tokens, "linear token map: row t mixes output token t from every token"),
    };
    (0..cfg.depth)
        .map(|i| Ok(TokenMixing { kind, rows, cols: tokens, grid: cfg.grid(), data: w.read(&format!("blocks.{i}.{name}"))?, note }))
        .collect()
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

/// A model file checked on the CPU, before anything touches the GPU: header and tensor table
/// (safetensors validates offsets, sizes and dtypes against the file length), metadata (size-
/// limited JSON), the architecture inferred from names and shapes within sane bounds, the
/// preprocessing, and labels matching the classes. [`Model::load`] uploads what this returns;
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
