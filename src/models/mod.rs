//! Models: the architecture inferred from a timm checkpoint (`inspect.rs`, `arch.rs`), the
//! network described once as steps on activation slots (`mlp_mixer.rs`, `metaformer.rs` and
//! the block files), the visualiser's data (`mixing.rs`), and [`Model`], which hands the
//! description to an executor (`crate::exec`): the GPU's or the CPU's. No file here knows
//! which one runs it.
//!
//! Layout: `block.rs` is the shared MetaFormer block and `norm.rs` its norms; each token mixer
//! has its own small file (`token_mlp.rs` MLP-Mixer, `spatial_gating.rs` gMLP,
//! `linear_tokens.rs` ResMLP, `pooling.rs` PoolFormer); each timm model class is one file
//! (`mlp_mixer.rs`: Mixer, gMLP, ResMLP; `metaformer.rs`: PoolFormer), with its presets.

pub mod arch;
pub mod block;
pub mod inspect;
pub mod linear_tokens;
pub mod metaformer;
pub mod mixing;
pub mod mlp_mixer;
pub mod norm;
pub mod pooling;
pub mod spatial_gating;
pub mod token_mlp;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::exec::cpu::CpuExec;
use crate::exec::gpu::GpuExec;
use crate::exec::{Cancel, Device, RunTimes};
use crate::preprocess::Preprocess;

pub use crate::exec::{Output, MAX_BATCH};
pub use crate::preprocess::{MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE};
pub use arch::Arch;
pub use inspect::{inspect, Inspected};
pub use metaformer::MetaFormerConfig;
pub use mixing::{TokenMap, TokenMixing};
pub use mlp_mixer::{BlockKind, MlpMixerConfig};

pub(crate) use inspect::{check_bounds, count_indexed};

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

/// One image through [`Model::classify_rgba`]: the output, the model input made from the
/// pixels (CHW, normalised), PoolFormer's per-stage token energy, and the timings.
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

/// Per-token class evidence for a batch of images (`tokenmix explain`, the page's evidence
/// overlay): `logits[i, c] = Σ_t maps[i, c, t] + bias[c]` (see [`crate::net::Explain`]).
#[derive(Clone, Debug)]
pub struct Explained {
    pub output: Output,
    /// The token grid each map covers, row-major.
    pub grid: (usize, usize),
    /// Per class, the part of the logit no token carries.
    pub bias: Vec<f32>,
    /// [images, classes, gh * gw].
    pub maps: Vec<f32>,
    /// PoolFormer: each token's share is taken with the head norm's statistics held at the
    /// image's values (the sum is still exact). False where the split is exact per token.
    pub approximate: bool,
}

impl Explained {
    /// Image `i`'s map for class `c`, [gh * gw].
    pub fn map(&self, i: usize, c: usize) -> &[f32] {
        let t = self.grid.0 * self.grid.1;
        let at = (i * self.output.classes + c) * t;
        &self.maps[at..at + t]
    }
}

enum Executor {
    Gpu(GpuExec),
    Cpu(CpuExec),
}

pub struct Model {
    pub device: Device,
    pub info: ModelInfo,
    /// Token-mixing weights per layer (CPU copies, read at load).
    mixing: Vec<TokenMixing>,
    stages: Vec<((usize, usize), usize)>,
    explain: Option<crate::net::Explain>,
    /// timm-initialisation figures for this model's token maps (computed at first use).
    init_figures: std::sync::OnceLock<crate::insight::Figures>,
    exec: Executor,
    /// Where CPU passes give their thread back (see [`Model::run_in_slices`]).
    slices: Option<crate::exec::cpu::Slices>,
    /// Where the GPU executor resamples an image ([`Model::set_resample`]); the adapter's
    /// default ([`crate::Gpu::resample`]) when unset.
    resample: Option<crate::gpu::Resample>,
}

/// What the adapter must hold, checked before any conversion or upload: one image's widest
/// activation in one binding (weights are split into row blocks, activations are not).
fn fits(device: &Device, arch: &Arch) -> Result<()> {
    if let Device::Gpu(gpu) = device {
        let limit = gpu.binding_limit();
        let widest = arch.widest_activation().saturating_mul(4);
        if widest > limit {
            return Err(Error::Config(format!(
                "{} needs {widest} bytes for one image's widest activation, over the adapter's binding limit of {limit} bytes",
                arch.family()
            )));
        }
    }
    Ok(())
}

impl Model {
    /// Loads a timm-named safetensors file onto `device` (an `Arc<Gpu>` or a [`Device`]).
    /// `img_size` overrides the input size (it must give the token count the weights were
    /// made for). On the GPU, pipelines and the batch-1 plan are made here, so the first
    /// forward pass compiles nothing.
    pub fn load(device: impl Into<Device>, bytes: &[u8], img_size: Option<[usize; 2]>) -> Result<Model> {
        Model::load_cancellable(device, bytes, img_size, &Cancel::new())
    }

    /// [`Self::load`] that stops early with [`Error::Cancelled`] once `cancel` is set: it is
    /// checked before each tensor is converted, before each weight is uploaded (GPU) and before
    /// the executor is made.
    pub fn load_cancellable(device: impl Into<Device>, bytes: &[u8], img_size: Option<[usize; 2]>, cancel: &Cancel) -> Result<Model> {
        let device = device.into();
        let inspected = Model::inspect_for(&device, bytes, img_size, cancel)?;
        Model::build(device, inspected, cancel)
    }

    /// The start of a load: the file inspected, and checked to fit `device`.
    fn inspect_for<'a>(device: &Device, bytes: &'a [u8], img_size: Option<[usize; 2]>, cancel: &Cancel) -> Result<Inspected<'a>> {
        cancel.check()?;
        let inspected = inspect(bytes, img_size)?;
        fits(device, &inspected.arch)?;
        Ok(inspected)
    }

    /// The rest of a load once the file is inspected (its tensors converted when taken, or
    /// ahead of it by [`crate::weights::Weights::convert_in_slices`]).
    fn build(device: Device, inspected: Inspected<'_>, cancel: &Cancel) -> Result<Model> {
        let Inspected { mut weights, arch, preprocess, labels } = inspected;
        weights.set_cancel(cancel);
        let net = arch.build(&mut weights)?;
        weights.finish()?;
        cancel.check()?;
        let mixing = mixing::token_mixing(&weights, &arch)?;
        let stages = net.stages.clone();
        let explain = net.explain.clone();
        let info = ModelInfo {
            family: arch.family(),
            preset: arch.preset(),
            params: weights.parameter_count(),
            macs: arch.macs(),
            labels,
            preprocess,
            arch,
        };
        let exec = match &device {
            Device::Gpu(gpu) => Executor::Gpu(GpuExec::new(gpu.clone(), net, cancel)?),
            Device::Cpu(_) => {
                cancel.check()?;
                Executor::Cpu(CpuExec::new(net)?)
            }
        };
        Ok(Model { device, info, mixing, stages, explain, init_figures: Default::default(), exec, slices: None, resample: None })
    }

    /// [`Self::load`] inside out-of-memory and validation error scopes on the GPU (see
    /// [`crate::Gpu::scoped`]): what the browser uses, where an allocation can fail
    /// asynchronously.
    pub async fn load_scoped(device: impl Into<Device>, bytes: &[u8], img_size: Option<[usize; 2]>) -> Result<Model> {
        Model::load_scoped_cancellable(device, bytes, img_size, &Cancel::new()).await
    }

    /// [`Self::load_scoped`] that stops early once `cancel` is set (see [`Self::load_cancellable`]).
    pub async fn load_scoped_cancellable(device: impl Into<Device>, bytes: &[u8], img_size: Option<[usize; 2]>, cancel: &Cancel) -> Result<Model> {
        Model::load_scoped_in_slices(device, bytes, img_size, cancel, None).await
    }

    /// [`Self::load_scoped_cancellable`] that, with `slices`, converts the file's tensors to
    /// f32 in slices before the build (see [`crate::weights::Weights::convert_in_slices`]): the thread is given
    /// back between chunks, and `cancel` is read there. For a thread that must not be held for
    /// a whole load (the browser's one-thread build); the model is the same, bit for bit.
    pub async fn load_scoped_in_slices(
        device: impl Into<Device>,
        bytes: &[u8],
        img_size: Option<[usize; 2]>,
        cancel: &Cancel,
        slices: Option<&crate::exec::cpu::Slices>,
    ) -> Result<Model> {
        let device = device.into();
        let mut inspected = Model::inspect_for(&device, bytes, img_size, cancel)?;
        if let Some(slices) = slices {
            inspected.weights.convert_in_slices(slices, cancel).await?;
        }
        match device {
            Device::Gpu(gpu) => {
                let g = gpu.clone();
                g.scoped("loading the model", move || Model::build(Device::Gpu(gpu), inspected, cancel)).await
            }
            cpu => Model::build(cpu, inspected, cancel),
        }
    }

    /// Runs this model's CPU passes in slices, giving the thread back between steps once a
    /// slice has run its time (see [`crate::exec::cpu::Slices`]): for a thread that must not
    /// be held for a whole pass. The browser's one-thread build sets it, so that an abort is
    /// read mid-pass and a page's own thread stays responsive. Results are the same bits;
    /// the GPU executor, whose passes already await their submissions, ignores it.
    pub fn run_in_slices(&mut self, slices: Option<crate::exec::cpu::Slices>) {
        self.slices = slices;
    }

    /// Whether this model's passes run in slices (set, and on the CPU executor).
    pub fn runs_in_slices(&self) -> bool {
        self.slices.is_some() && matches!(self.exec, Executor::Cpu(_))
    }

    /// `"gpu"` or `"cpu"`: which executor runs this model.
    pub fn backend(&self) -> &'static str {
        self.device.backend()
    }

    /// Number of layers [`Self::token_mixing`] can show.
    pub fn mixing_layers(&self) -> usize {
        self.mixing.len()
    }

    pub fn token_mixing(&self, layer: usize) -> Option<&TokenMixing> {
        self.mixing.get(layer)
    }

    /// Everything the views show of one token-mixing layer (see [`crate::insight`]).
    pub fn insight(&self, layer: usize) -> Result<crate::insight::LayerInsight> {
        let t =
            self.mixing.get(layer).ok_or_else(|| Error::Input(format!("layer {layer}: the model has {} token-mixing layers", self.mixing.len())))?;
        let init = t.token_map().map(|_| *self.init_figures.get_or_init(|| crate::insight::init_figures(t.kind, t.grid, t.rows)));
        Ok(crate::insight::layer(t, layer, self.mixing.len(), init))
    }

    pub fn input_len(&self) -> usize {
        self.info.arch.input_shape().iter().product()
    }

    /// The largest batch one pass runs; longer inputs run in chunks (on the GPU, fewer than
    /// [`MAX_BATCH`] when a batch's activations would pass the adapter's binding limit).
    pub fn max_batch(&self) -> usize {
        match &self.exec {
            Executor::Gpu(g) => g.max_batch(),
            Executor::Cpu(c) => c.max_batch(),
        }
    }

    /// The activation slots stored as f16 (`--precision f16` on a GPU: the MLP hidden
    /// activations); empty at f32 and on the CPU.
    pub fn f16_activations(&self) -> Vec<&'static str> {
        match &self.exec {
            Executor::Gpu(g) => g.half_slots(),
            Executor::Cpu(_) => Vec::new(),
        }
    }

    /// Bytes of the widest activation buffer for one image.
    pub fn widest_activation_bytes(&self) -> u64 {
        match &self.exec {
            Executor::Gpu(g) => g.widest_activation_bytes(),
            Executor::Cpu(c) => c.widest_activation_bytes(),
        }
    }

    fn check_input(&self, input: &[f32]) -> Result<()> {
        let per = self.input_len();
        if input.is_empty() || !input.len().is_multiple_of(per) {
            let [c, h, w] = self.info.arch.input_shape();
            return Err(Error::Input(format!("input has {} floats, expected a multiple of {c}x{h}x{w} = {per}", input.len())));
        }
        Ok(())
    }

    /// Times the GPU's GEMM kernels for the shape classes of a `batch`-image forward pass that
    /// its device has not tuned yet (see [`GpuExec::autotune`]); 0 on the CPU executor, on a
    /// device that does not tune, or natively, where building the plan tuned already. Stops
    /// with [`Error::Cancelled`] before its next timing once `cancel` is set; the classes
    /// timed by then keep their choices.
    pub async fn autotune(&self, batch: usize, cancel: &Cancel) -> Result<usize> {
        match &self.exec {
            Executor::Gpu(g) => g.autotune(batch, cancel).await,
            Executor::Cpu(_) => Ok(0),
        }
    }

    /// Runs `input` ([batch, C, H, W], preprocessed) through the model; only logits and
    /// probabilities come back.
    pub async fn forward(&self, input: &[f32]) -> Result<Output> {
        self.forward_cancellable(input, &Cancel::new()).await
    }

    /// [`Self::forward`] that stops early with [`Error::Cancelled`] once `cancel` is set (see
    /// [`Cancel`] for where each executor checks it).
    pub async fn forward_cancellable(&self, input: &[f32], cancel: &Cancel) -> Result<Output> {
        self.check_input(input)?;
        match &self.exec {
            Executor::Gpu(g) => g.forward(input, cancel).await,
            Executor::Cpu(c) => c.forward(input, cancel, self.slices.as_ref()).await,
        }
    }

    /// Where this model's GPU executor resamples an image it classifies; None on the CPU
    /// executor, which resamples on the CPU.
    pub fn resample(&self) -> Option<crate::gpu::Resample> {
        match &self.exec {
            Executor::Gpu(g) => Some(self.resample.unwrap_or(g.gpu.resample)),
            Executor::Cpu(_) => None,
        }
    }

    /// Makes the GPU executor resample images where `r` says rather than where its adapter's
    /// default does (no effect on the CPU executor). Both give the same bytes.
    pub fn set_resample(&mut self, r: crate::gpu::Resample) {
        self.resample = Some(r);
    }

    /// Classifies one RGBA8 image (a browser ImageData) of any size with the model's
    /// preprocessing — on the GPU in the same submission as the forward pass, on the CPU with
    /// the same resampling, which is the CLI's byte for byte (PIL's). `now` is a millisecond
    /// clock (performance.now on the web).
    pub async fn classify_rgba(&self, rgba: &[u8], width: usize, height: usize, now: fn() -> f64) -> Result<ImageRun> {
        self.classify_rgba_cancellable(rgba, width, height, now, &Cancel::new()).await
    }

    /// [`Self::classify_rgba`] that stops early with [`Error::Cancelled`] once `cancel` is set.
    pub async fn classify_rgba_cancellable(&self, rgba: &[u8], width: usize, height: usize, now: fn() -> f64, cancel: &Cancel) -> Result<ImageRun> {
        self.classify_pixels_cancellable(crate::preprocess::Pixels::rgba(rgba, width, height), now, cancel).await
    }

    /// [`Self::classify_rgba_cancellable`] for an RGB or RGBA image ([`crate::preprocess::Pixels`]):
    /// a decoded file (`Pixels::rgb`) is classified as it is, without an RGBA copy.
    pub async fn classify_pixels_cancellable(&self, image: crate::preprocess::Pixels<'_>, now: fn() -> f64, cancel: &Cancel) -> Result<ImageRun> {
        let pp = &self.info.preprocess;
        let (output, input, stages, t): (Output, Vec<f32>, Vec<f32>, RunTimes) = match &self.exec {
            Executor::Gpu(g) => g.classify_image(pp, image, self.resample.unwrap_or(g.gpu.resample), now, cancel).await?,
            Executor::Cpu(c) => c.classify_image(pp, image, now, cancel, self.slices.as_ref()).await?,
        };
        Ok(ImageRun {
            output,
            input,
            stage_energy: crate::exec::stage_energy(&self.stages, &stages),
            preprocess_ms: t.preprocess_ms,
            forward_ms: t.forward_ms,
            readback_ms: t.readback_ms,
        })
    }

    /// Runs `input` like [`Self::forward`] and splits every logit into one contribution per
    /// token of the last token grid (see [`Explained`]).
    pub async fn explain(&self, input: &[f32]) -> Result<Explained> {
        self.explain_cancellable(input, &Cancel::new()).await
    }

    /// [`Self::explain`] that stops early with [`Error::Cancelled`] once `cancel` is set.
    pub async fn explain_cancellable(&self, input: &[f32], cancel: &Cancel) -> Result<Explained> {
        self.check_input(input)?;
        let meta = self.explain.as_ref().ok_or_else(|| Error::Config("this model has no per-token split of its logits".into()))?;
        let (output, evidence, pooled) = match &self.exec {
            Executor::Gpu(g) => g.explain(input, cancel).await?,
            Executor::Cpu(c) => c.explain(input, cancel, self.slices.as_ref()).await?,
        };
        let (classes, tokens) = (output.classes, meta.tokens());
        let images = output.logits.len() / classes.max(1);
        if evidence.len() != images * tokens * classes || pooled.len() % images.max(1) != 0 {
            return Err(Error::Config("the evidence read back does not match the model".into()));
        }
        let pooled_per = pooled.len() / images.max(1);
        let mut maps = vec![0f32; images * classes * tokens];
        for i in 0..images {
            let e = &evidence[i * tokens * classes..][..tokens * classes];
            // PoolFormer: (E' - μ s_c / T) / σ with the pooled vector's statistics.
            let (mu, inv_sigma) = match &meta.frozen_norm {
                Some(f) => {
                    let p = pooled.get(i * pooled_per..i * pooled_per + f.d).ok_or_else(|| Error::Config("pooled vector too short".into()))?;
                    let mu = p.iter().map(|&v| v as f64).sum::<f64>() / f.d as f64;
                    let var = p.iter().map(|&v| (v as f64 - mu).powi(2)).sum::<f64>() / f.d as f64;
                    (mu, 1.0 / (var + f.eps as f64).sqrt())
                }
                None => (0.0, 1.0),
            };
            for c in 0..classes {
                let shift = meta.frozen_norm.as_ref().map_or(0.0, |f| mu * f.row_sums[c] as f64 / tokens as f64);
                let out = &mut maps[(i * classes + c) * tokens..][..tokens];
                for (t, o) in out.iter_mut().enumerate() {
                    *o = ((e[t * classes + c] as f64 - shift) * inv_sigma) as f32;
                }
            }
        }
        Ok(Explained { output, grid: meta.grid, bias: meta.bias.clone(), maps, approximate: meta.frozen_norm.is_some() })
    }

    /// One forward pass of `input` (at most one plan's batch: 64 images, fewer where a GPU
    /// binding holds less) with each step timed: where the time goes (`bench --profile`).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn profile(&self, input: &[f32]) -> Result<(Output, crate::exec::Profile)> {
        self.check_input(input)?;
        let (images, most) = (input.len() / self.input_len(), self.max_batch());
        if images > most {
            return Err(Error::Input(format!("a profile runs one plan's batch, at most {most} images here, not {images}")));
        }
        match &self.exec {
            Executor::Gpu(g) => g.profile(input),
            Executor::Cpu(c) => c.profile(input),
        }
    }

    /// GPU only: [`GpuExec::rerun_resident`], the last forward pass of `batch`
    /// images again with its input already on the device; `Ok(false)` on the CPU executor, whose
    /// input never leaves the host.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn rerun_resident(&self, batch: usize) -> Result<bool> {
        match &self.exec {
            Executor::Gpu(g) => g.rerun_resident(batch).map(|()| true),
            Executor::Cpu(_) => Ok(false),
        }
    }

    /// Synchronous forward for native callers.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn forward_blocking(&self, input: &[f32]) -> Result<Output> {
        pollster::block_on(self.forward(input))
    }

    /// Synchronous [`Self::explain`] for native callers.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn explain_blocking(&self, input: &[f32]) -> Result<Explained> {
        pollster::block_on(self.explain(input))
    }
}
