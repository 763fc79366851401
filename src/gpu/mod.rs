//! The GPU context: adapter and device selection, the pipeline cache, buffer helpers and
//! read-back. Kernels know nothing about models; this module knows nothing about kernels'
//! meaning, only how to compile, bind and dispatch them.

pub mod shader;
pub mod tune;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use wgpu::util::DeviceExt;

use crate::error::{Error, Result};
pub use shader::Defines;

/// How a kernel sees one binding. Layouts are built from these lists, so a kernel's bindings
/// are declared once, next to the kernel, and the pipeline layout is explicit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Binding {
    Uniform,
    Read,
    ReadWrite,
    /// A `texture_2d<f32>` read with textureLoad (unfilterable, e.g. rgba32float).
    Texture,
}

/// One bound resource, in binding order.
#[derive(Clone, Copy)]
pub enum Resource<'a> {
    Buffer(&'a wgpu::Buffer),
    Texture(&'a wgpu::TextureView),
}

/// A WGSL source specialised by defines, plus the bindings its entry point uses.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub name: &'static str,
    pub source: &'static str,
    pub defines: Defines,
    pub bindings: &'static [Binding],
    /// Compiled without naga's runtime bounds checks: only for kernels whose wrapper validates
    /// all extents on the CPU and which clamp or guard every index themselves. Crate-private:
    /// that promise is the GEMM wrapper's (`ops::gemm`), not something a caller can make.
    pub(crate) trusted: bool,
}

impl Kernel {
    pub fn new(name: &'static str, source: &'static str, bindings: &'static [Binding]) -> Self {
        Kernel { name, source, defines: Defines::new(), bindings, trusted: false }
    }
    pub(crate) fn trusted(mut self) -> Self {
        self.trusted = true;
        self
    }
    pub fn define(mut self, key: &str, value: impl ToString) -> Self {
        self.defines.insert(key.to_string(), value.to_string());
        self
    }
    pub fn flag(self, key: &str, on: bool) -> Self {
        if on {
            self.define(key, 1)
        } else {
            self
        }
    }
    fn key(&self) -> String {
        let defs: Vec<String> = self.defines.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}[{}]{}", self.name, defs.join(","), if self.trusted { "!" } else { "" })
    }
}

/// A compiled kernel: pipeline plus the layout its bind groups must follow.
pub struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    pub name: String,
}

/// How the row-wise kernels (LayerNorm, softmax) cover a row, and whether GroupNorm cuts large
/// images into chunks (with `Workgroup`; see `ops::norm::group_norm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKernel {
    /// One invocation per row, looping over it: no barriers, which CPU rasterisers (lavapipe,
    /// SwiftShader) charge dearly for. Their default.
    Invocation,
    /// One workgroup of 64 per row, striding it together and reducing through workgroup memory:
    /// neighbouring invocations read neighbouring elements, and batch 1's 196 rows run as 196
    /// workgroups rather than 4 invocations' serial loops. The default on real GPUs without
    /// subgroups (and in the browser).
    Workgroup,
    /// As `Workgroup`, but each reduction combines a subgroup's lanes with subgroup operations
    /// first, so only the subgroups' results go through workgroup memory (2 values on NVIDIA
    /// rather than 64). The default on native real GPUs with subgroups.
    Subgroup,
}

impl RowKernel {
    pub fn name(self) -> &'static str {
        match self {
            RowKernel::Invocation => "invocation",
            RowKernel::Workgroup => "workgroup",
            RowKernel::Subgroup => "subgroup",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [RowKernel::Invocation, RowKernel::Workgroup, RowKernel::Subgroup].into_iter().find(|r| r.name() == s)
    }
}

/// Where a GPU executor resamples an image it classifies (`Model::classify_rgba`, the page's
/// and the desktop app's path). Both give PIL's bytes, the CLI's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resample {
    /// `preprocess.wgsl`, recorded in the forward pass's submission; the image's rows are
    /// uploaded as they are. The default on real GPUs, where it costs the upload.
    Gpu,
    /// On the CPU, as the CPU executor does (`WindowTaps::resample`); the model input is
    /// uploaded. The default on CPU rasterisers (SwiftShader, lavapipe), which run the shader's
    /// taps loop ten times slower than the CPU code runs it (README, "Performance").
    Cpu,
}

impl Resample {
    pub fn name(self) -> &'static str {
        match self {
            Resample::Gpu => "gpu",
            Resample::Cpu => "cpu",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Resample::Gpu, Resample::Cpu].into_iter().find(|r| r.name() == s)
    }
}

/// Which GEMM kernel runs (see `ops::gemm`). The adapter has a default ([`Gpu::gemm`]); on
/// real GPUs the autotuner ([`tune`]) picks one per shape class among [`Gpu::gemm_variants`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GemmVariant {
    /// Workgroup = 8 lanes, no barriers, rows of A read at uniform addresses and kept in
    /// registers. Fast on CPU rasterisers (lavapipe, SwiftShader), where barriers are costly.
    Register,
    /// As `Register`, but rows of A are loaded one per lane and shared with subgroupShuffle,
    /// so each (costly) load on a CPU rasteriser feeds every lane. One workgroup is one
    /// subgroup of the adapter's (smallest) subgroup size: 4, 8, 16, 32 or 64 lanes.
    Subgroup,
    /// As `Subgroup`, with the weight operand read from an rgba32float texture: llvmpipe
    /// fetches texels with vector gathers, four k values at a time, far cheaper than its
    /// per-lane storage loads. Token mixing is computed transposed so the weight is always B.
    Texture,
    /// Shared-memory tiling, double-buffered, vec4 register blocks: 64x64 tiles, 4x4 per
    /// invocation. The default on real GPUs.
    Tiled,
    /// The same kernel with 128x128 tiles and 8x8 per invocation: large GEMMs.
    Tiled128,
    /// `Tiled128` staging 16 values of k per step rather than 8: half the barriers and loop
    /// overhead per multiply-add and twice the loads in flight, for 32 KiB of workgroup memory
    /// (beyond WebGPU's default 16 KiB: only where the adapter has it).
    Tiled128K16,
    /// The same kernel with 32x32 tiles and 4x4 per invocation (64 invocations): small GEMMs
    /// (batch 1's 196 tokens) that must still spread over many compute units.
    Tiled32,
    /// `Tiled` with the k range split among several workgroups per output tile, whose partial
    /// sums a second pass adds up (and applies the epilogue to): GEMMs with few output tiles,
    /// such as batch 1's, still fill a large GPU. The number of parts follows the shape (see
    /// `ops::gemm`); with one part it is `Tiled`.
    SplitK,
    /// Tensor cores: f16 x f16 -> f32 cooperative matrices, tiles of four subgroups
    /// (`gemm_coop.wgsl`) each holding 2x2 fragments: 64x64 of 16x16x16 fragments, or 32x32
    /// of 8x8x8 ones where the adapter offers only those (Mesa 26's lavapipe). Native Vulkan
    /// with `EXPERIMENTAL_COOPERATIVE_MATRIX`, under `--precision f16` only (it rounds
    /// activations to f16 too).
    Coop,
    /// The same kernel with 4x4 fragments per subgroup: 128x128 tiles of 16x16x16 fragments
    /// (64x64 of 8x8x8), half the operand traffic per multiply-add of `coop` for large GEMMs.
    Coop128,
    /// `Coop`'s kernel (16x16x16 fragments, as on NVIDIA and AMD) with the matrix operations
    /// done lane by lane: the test double that lets a lavapipe without cooperative matrices run
    /// everything else of it. Never chosen by the autotuner; `TOKENMIX_GEMM=coop-emulated` or
    /// tests only.
    CoopEmulated,
}

impl GemmVariant {
    pub const ALL: [GemmVariant; 11] = [
        GemmVariant::Texture,
        GemmVariant::Subgroup,
        GemmVariant::Register,
        GemmVariant::Tiled,
        GemmVariant::Tiled128,
        GemmVariant::Tiled128K16,
        GemmVariant::Tiled32,
        GemmVariant::SplitK,
        GemmVariant::Coop,
        GemmVariant::Coop128,
        GemmVariant::CoopEmulated,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == s)
    }
    pub fn name(self) -> &'static str {
        match self {
            GemmVariant::Register => "register",
            GemmVariant::Tiled => "tiled",
            GemmVariant::Tiled128 => "tiled128",
            GemmVariant::Tiled128K16 => "tiled128k16",
            GemmVariant::Tiled32 => "tiled32",
            GemmVariant::SplitK => "splitk",
            GemmVariant::Subgroup => "subgroup",
            GemmVariant::Texture => "texture",
            GemmVariant::Coop => "coop",
            GemmVariant::Coop128 => "coop128",
            GemmVariant::CoopEmulated => "coop-emulated",
        }
    }
    /// "texture, subgroup, register, tiled, …, coop or coop-emulated", for messages.
    pub fn names() -> String {
        let n: Vec<&str> = Self::ALL.iter().map(|v| v.name()).collect();
        format!("{} or {}", n[..n.len() - 1].join(", "), n[n.len() - 1])
    }
    /// The shared-memory tile (TM, TN, RM, RN, BK) of the tiled kernels.
    pub fn tile(self) -> Option<[u32; 5]> {
        match self {
            GemmVariant::Tiled | GemmVariant::SplitK => Some([64, 64, 4, 4, 16]),
            GemmVariant::Tiled128 => Some([128, 128, 8, 8, 8]),
            GemmVariant::Tiled128K16 => Some([128, 128, 8, 8, 16]),
            GemmVariant::Tiled32 => Some([32, 32, 4, 4, 16]),
            _ => None,
        }
    }
    /// Bytes of workgroup memory the tiled kernels' two stages of tiles take.
    pub fn tile_bytes(self) -> Option<u32> {
        self.tile().map(|[tm, tn, _, _, bk]| 2 * (tm + tn) * bk * 4)
    }
    /// Needs `Features::SUBGROUP`.
    pub fn uses_subgroups(self) -> bool {
        matches!(self, GemmVariant::Subgroup | GemmVariant::Texture) || self.computes_in_f16()
    }
    /// Rounds both operands to f16 (so runs only under `--precision f16`): the kernels of
    /// `gemm_coop.wgsl`.
    pub fn computes_in_f16(self) -> bool {
        self.coop_fragments().is_some()
    }
    /// Fragments per subgroup along each side of the coop kernels' tile (`FR`).
    pub fn coop_fragments(self) -> Option<u32> {
        match self {
            GemmVariant::Coop | GemmVariant::CoopEmulated => Some(2),
            GemmVariant::Coop128 => Some(4),
            _ => None,
        }
    }
}

/// How GEMM weights (and, in `exec::gpu`, the MLP hidden activations) are stored on the GPU.
/// Accumulation is always f32, and so are the residual stream, norms and biases; `F16` halves
/// the weights' memory and bandwidth (what bounds small batches on a GPU) and the hidden
/// activations' (large batches) where the adapter has `SHADER_F16`, at a cost in accuracy the
/// goldens bound (relative logit error ≤ 1e-2, same top-1; see tests/golden.rs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    #[default]
    F32,
    F16,
}

impl Precision {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Precision::F32),
            "f16" => Ok(Precision::F16),
            _ => Err(Error::Input(format!("precision `{s}`: expected f32 or f16"))),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        }
    }
    /// Bytes of one stored value.
    pub fn bytes(self) -> u64 {
        match self {
            Precision::F32 => 4,
            Precision::F16 => 2,
        }
    }
    /// `values` as the little-endian bytes a buffer or texture stores in this precision: f32
    /// as they are (borrowed), f16 rounded to nearest. The one encoder of every upload.
    pub fn encode(self, values: &[f32]) -> Cow<'_, [u8]> {
        match self {
            Precision::F32 => Cow::Borrowed(bytemuck::cast_slice(values)),
            Precision::F16 => Cow::Owned(values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect()),
        }
    }
}

static PRECISION: Mutex<Option<Precision>> = Mutex::new(None);

/// The precision new devices are asked for (the CLI's `--precision`, the page's `precision`
/// option): it wins over `TOKENMIX_PRECISION`; devices made before keep theirs.
pub fn request_precision(p: Precision) {
    if let Ok(mut v) = PRECISION.lock() {
        *v = Some(p);
    }
}

/// What [`request_precision`] set, if anything (the browser puts it back after a failed load).
pub fn precision_override() -> Option<Precision> {
    PRECISION.lock().ok().and_then(|v| *v)
}

/// Sets or clears (`None`: `TOKENMIX_PRECISION`, else f32) what [`request_precision`] sets.
pub fn set_precision_override(p: Option<Precision>) {
    if let Ok(mut v) = PRECISION.lock() {
        *v = p;
    }
}

/// The precision asked for: [`request_precision`], else `TOKENMIX_PRECISION`, else f32.
pub fn requested_precision() -> Result<Precision> {
    match (PRECISION.lock().ok().and_then(|v| *v), crate::env::env().precision.as_deref()) {
        (Some(p), _) => Ok(p),
        (None, Some(s)) => Precision::parse(s).map_err(|e| Error::Input(format!("TOKENMIX_PRECISION: {e}"))),
        (None, None) => Ok(Precision::F32),
    }
}

/// The start of every error about a lost device; the page keys its "reload" offer on it.
pub const DEVICE_LOST: &str = "GPU device lost; reload the model to continue";

pub struct Gpu {
    /// The instance and adapter the device came from (a window sharing the device, e.g. the
    /// desktop app's egui renderer, needs them).
    pub instance: wgpu::Instance,
    pub adapter: wgpu::Adapter,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub gemm: GemmVariant,
    /// How LayerNorm and softmax cover their rows (and GroupNorm its images): by workgroup on
    /// real GPUs, by invocation on CPU rasterisers.
    pub rows: RowKernel,
    /// Where an image is resampled for classifying ([`Resample`]): `TOKENMIX_RESAMPLE`, else
    /// on the CPU for a CPU rasteriser, else here.
    pub resample: Resample,
    /// How GEMM weights and hidden activations are stored (f16 only where the device has
    /// `SHADER_F16`).
    pub precision: Precision,
    /// Why the precision differs from the one asked for, when it does.
    pub precision_note: Option<String>,
    /// Per-shape-class GEMM choices (autotuned on real GPUs; see [`tune`]).
    pub tuning: tune::Tuning,
    pipelines: Mutex<HashMap<String, Arc<Pipeline>>>,
    errors: Arc<Mutex<Vec<String>>>,
    /// Set by the device-lost callback: every later call fails fast with a message that says
    /// to reload (which makes a new device).
    lost: Arc<std::sync::atomic::AtomicBool>,
}

impl Gpu {
    /// Chooses an adapter from the environment: `WGPU_BACKEND` (vulkan, metal, dx12, gl,
    /// webgpu), `WGPU_ADAPTER_NAME` (a substring of the adapter name), `WGPU_POWER_PREF`
    /// (low/high), and `TOKENMIX_GEMM` (a [`GemmVariant`] name; see `crate::env`) to fix the GEMM
    /// kernel instead of the adapter's default and the autotuner.
    pub async fn new() -> Result<Self> {
        let (instance, adapter) = Self::adapter().await?;
        Self::from_adapter(instance, adapter).await
    }

    /// The adapter [`Self::new`] would use, without a device yet (the backend choice looks at
    /// it first).
    pub async fn adapter() -> Result<(wgpu::Instance, wgpu::Adapter)> {
        let desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        let backends = desc.backends;
        let instance = wgpu::Instance::new(desc);
        let adapter = select_adapter(&instance, backends).await?;
        Ok((instance, adapter))
    }

    /// A device of the environment's adapter (as [`Self::new`]) for GEMM weights in `precision`
    /// rather than the requested one (tests and tools that compare precisions).
    pub async fn new_at(precision: Precision) -> Result<Self> {
        let (instance, adapter) = Self::adapter().await?;
        Self::from_adapter_at(instance, adapter, precision).await
    }

    pub async fn from_adapter(instance: wgpu::Instance, adapter: wgpu::Adapter) -> Result<Self> {
        Self::from_adapter_at(instance, adapter, requested_precision()?).await
    }

    /// A device on `adapter` for `asked` precision: f16 where the adapter has `SHADER_F16`
    /// (else f32, with a note saying why), and then also its cooperative matrices, if any.
    pub async fn from_adapter_at(instance: wgpu::Instance, adapter: wgpu::Adapter, asked: Precision) -> Result<Self> {
        let info = adapter.get_info();
        let limits = adapter.limits();
        let mut required_features = adapter.features() & (wgpu::Features::SUBGROUP | wgpu::Features::SHADER_F16);
        // Natively, GPU timestamps wherever the adapter has them, for `bench --profile`
        // (`GpuExec::profile`); nothing is timed unless a profile is asked for.
        #[cfg(not(target_arch = "wasm32"))]
        {
            required_features |= adapter.features() & (wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
        }
        // Tensor cores only for f16 (the only precision the coop kernel computes in), so that an
        // f32 device never turns on an experimental feature.
        let coop = asked == Precision::F16 && coop_shape(&info, adapter.features(), &adapter.cooperative_matrix_properties()).is_some();
        if coop {
            required_features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        }
        let device_desc = wgpu::DeviceDescriptor {
            label: Some("tokenmix"),
            required_features,
            required_limits: limits.clone(),
            memory_hints: wgpu::MemoryHints::Performance,
            // SAFETY: the one experimental feature ever requested is cooperative matrices, used
            // by gemm_coop.wgsl alone, whose results the autotuner checks against the tiled
            // kernel's in each process before it uses it, whether it timed it or read it from
            // the cache (`ops::gemm`); only `TOKENMIX_GEMM=coop` (a person's explicit choice,
            // and the tests') runs it unchecked. Its reads are bounded by `Gemm::check`.
            experimental_features: if coop { unsafe { wgpu::ExperimentalFeatures::enabled() } } else { wgpu::ExperimentalFeatures::disabled() },
            ..Default::default()
        };
        let (device, queue) =
            adapter.request_device(&device_desc).await.map_err(|e| Error::Device(format!("{} ({:?}): {e}", info.name, info.backend)))?;

        // wgpu panics on uncaptured errors by default; collect them instead so that a bad
        // dispatch becomes an Error returned by the call that caused it.
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        let sink = errors.clone();
        let lost: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            if let Ok(mut v) = sink.lock() {
                v.push(format!("{DEVICE_LOST} ({reason:?}: {msg})"));
            }
        });

        let fixed = match crate::env::env().gemm.as_deref() {
            Some(s) => Some(GemmVariant::parse(s).ok_or_else(|| Error::Input(format!("TOKENMIX_GEMM={s}: expected {}", GemmVariant::names())))?),
            None => None,
        };
        let features = device.features();
        let lanes = subgroup_lanes(&info, features);
        let gemm = fixed.unwrap_or_else(|| default_gemm(&info, lanes));
        let (precision, precision_note) = match asked {
            Precision::F16 if !features.contains(wgpu::Features::SHADER_F16) => {
                let name = if info.name.is_empty() { "this adapter" } else { info.name.as_str() };
                (Precision::F32, Some(format!("f16 was asked for, but {name} has no shader-f16: f32")))
            }
            p => (p, None),
        };
        let tuning = tune::Tuning::new(&info, precision, fixed.is_none());
        let rows = match crate::env::env().rows.as_deref() {
            Some(s) => {
                let rows =
                    RowKernel::parse(s).ok_or_else(|| Error::Input(format!("TOKENMIX_ROWS={s}: expected invocation, workgroup or subgroup")))?;
                if rows == RowKernel::Subgroup && lanes.is_none() {
                    return Err(Error::Input(format!("TOKENMIX_ROWS=subgroup: {} has no subgroups of 4 to 64 lanes", info.name)));
                }
                rows
            }
            None if crate::exec::is_software(&info) => RowKernel::Invocation,
            // (Not in the browser, whose subgroups are unproven here.)
            None if lanes.is_some() && !cfg!(target_arch = "wasm32") => RowKernel::Subgroup,
            None => RowKernel::Workgroup,
        };
        let resample = match crate::env::env().resample.as_deref() {
            Some(s) => Resample::parse(s).ok_or_else(|| Error::Input(format!("TOKENMIX_RESAMPLE={s}: expected gpu or cpu")))?,
            None if crate::exec::is_software(&info) => Resample::Cpu,
            None => Resample::Gpu,
        };
        let gpu = Gpu {
            instance,
            adapter,
            device,
            queue,
            info,
            limits,
            gemm,
            rows,
            resample,
            precision,
            precision_note,
            tuning,
            pipelines: Mutex::default(),
            errors,
            lost,
        };
        if let Some(v) = fixed {
            gpu.supports(v).map_err(|why| Error::Input(format!("TOKENMIX_GEMM={}: {why}", v.name())))?;
        }
        Ok(gpu)
    }

    /// Whether this device, at its precision, can run GEMM kernel `v`; if not, why.
    pub fn supports(&self, v: GemmVariant) -> std::result::Result<(), String> {
        let (min, max) = (self.info.subgroup_min_size, self.info.subgroup_max_size);
        if v.uses_subgroups() && self.subgroup_lanes().is_none() {
            return Err(format!("{} has no subgroups of 4 to 64 lanes (min {min}, max {max})", self.describe()));
        }
        if v.computes_in_f16() && self.precision != Precision::F16 {
            return Err(format!("the {} GEMM computes in f16: it runs under --precision f16 only", v.name()));
        }
        let wg_bytes = self.limits.max_compute_workgroup_storage_size;
        if let Some(bytes) = v.tile_bytes().filter(|&b| b > wg_bytes) {
            return Err(format!("the {} GEMM needs {bytes} bytes of workgroup memory; {} has {wg_bytes}", v.name(), self.describe()));
        }
        match v {
            GemmVariant::Coop | GemmVariant::Coop128 if self.coop_shape().is_none() => Err(format!(
                "{} has no cooperative matrices of 16x16x16 or 8x8x8 f16 -> f32 (native Vulkan with wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX, subgroups of at most 64 lanes)",
                self.describe()
            )),
            GemmVariant::CoopEmulated if min != max || max > 64 => {
                Err(format!("the coop-emulated GEMM needs one fixed subgroup size of at most 64 lanes; {} has {min} to {max}", self.describe()))
            }
            _ => Ok(()),
        }
    }

    /// The coop kernel's subgroup width on this device (its largest subgroup size) and fragment
    /// size (16, else 8), when the device has the cooperative matrices it needs.
    pub fn coop_shape(&self) -> Option<(u32, u32)> {
        coop_shape(&self.info, self.device.features(), &self.adapter.cooperative_matrix_properties())
    }

    /// Stores GEMM weights uploaded from now on in `p`; an error where the device cannot (f16
    /// without `SHADER_F16`). For tests and tools; models take the precision of their device.
    pub fn set_precision(&mut self, p: Precision) -> Result<()> {
        if p == Precision::F16 && !self.has_f16() {
            return Err(Error::Input(format!("f16 weights need shader-f16, which {} lacks", self.info.name)));
        }
        self.precision = p;
        self.precision_note = None;
        self.tuning = self.tuning.at_precision(&self.info, p);
        Ok(())
    }

    /// Whether the device can store and read f16 (`SHADER_F16`).
    pub fn has_f16(&self) -> bool {
        self.device.features().contains(wgpu::Features::SHADER_F16)
    }

    /// Fixes the GEMM kernel to `v` for every shape (no autotuning): tests and benchmarks that
    /// run each kernel in turn.
    pub fn fix_gemm(&mut self, v: GemmVariant) {
        self.gemm = v;
        self.tuning = tune::Tuning::off();
    }

    /// Turns GEMM autotuning on (whatever the adapter), persisting choices in `file`.
    pub fn force_autotune(&mut self, file: Option<std::path::PathBuf>) {
        self.tuning = tune::Tuning::forced(&self.info, self.precision, file);
    }

    /// Lanes of the subgroup kernels on this device: its smallest subgroup size, when it has
    /// `SUBGROUP` and that size is a power of two from 4 to 64 (so one workgroup of that many
    /// invocations is one subgroup); None otherwise.
    pub fn subgroup_lanes(&self) -> Option<u32> {
        subgroup_lanes(&self.info, self.device.features())
    }

    /// The GEMM kernels this device can run at its precision, which the autotuner chooses
    /// among (all but the coop test double).
    pub fn gemm_variants(&self) -> Vec<GemmVariant> {
        GemmVariant::ALL.into_iter().filter(|&v| v != GemmVariant::CoopEmulated && self.supports(v).is_ok()).collect()
    }

    /// The GEMM kernel choice in words: "tiled" when fixed, or the default and what the
    /// autotuner chose per shape class ("tiled; tuned: linear m2048 n512 k512 → tiled128, …").
    pub fn gemm_summary(&self) -> String {
        let choices = self.tuning.choices();
        let mut out = self.gemm.name().to_string();
        if !choices.is_empty() {
            let list: Vec<String> = choices.iter().map(|(k, v)| format!("{k} → {v}")).collect();
            out += &format!("; tuned: {}", list.join(", "));
        }
        let rejected = self.tuning.rejected();
        if !rejected.is_empty() {
            out += &format!("; rejected: {}", rejected.join(", "));
        }
        out
    }

    /// "llvmpipe (LLVM 15.0.6, 256 bits) [Vulkan, Cpu]"
    pub fn describe(&self) -> String {
        format!("{} [{:?}, {:?}]", self.info.name, self.info.backend, self.info.device_type)
    }

    /// True once the device is lost (driver reset, GPU removed, `device.destroy()`): nothing
    /// more runs on it; load the model again to get a new device.
    pub fn is_lost(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Runs `f` (which creates GPU resources) inside out-of-memory and validation error
    /// scopes, so an allocation the adapter cannot satisfy comes back as an [`Error::Gpu`]
    /// saying so, rather than as a later, unrelated failure. Also fails fast on a lost device.
    pub async fn scoped<T>(&self, what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.is_lost() {
            return Err(Error::Gpu(format!("{DEVICE_LOST}: {what} needs a new device")));
        }
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let invalid = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let result = f();
        // Scopes pop innermost first; the futures may be awaited afterwards.
        let (invalid, oom) = (invalid.pop(), oom.pop());
        let (invalid, oom) = (invalid.await, oom.await);
        if let Some(e) = oom {
            return Err(Error::Gpu(format!("out of memory while {what}: {e}")));
        }
        if let Some(e) = invalid {
            return Err(Error::Gpu(format!("validation failed while {what}: {e}")));
        }
        if self.is_lost() {
            return Err(Error::Gpu(format!("{DEVICE_LOST} while {what}")));
        }
        result
    }

    /// Errors wgpu reported since the last call (validation, out of memory, device lost).
    pub fn check(&self) -> Result<()> {
        if self.is_lost() {
            let detail = self.errors.lock().map(|mut e| std::mem::take(&mut *e).join("; ")).unwrap_or_default();
            return Err(Error::Gpu(if detail.is_empty() { DEVICE_LOST.to_string() } else { detail }));
        }
        let mut errs = self.errors.lock().map_err(|_| Error::Gpu("error sink poisoned".into()))?;
        if errs.is_empty() {
            Ok(())
        } else {
            let msg = errs.join("; ");
            errs.clear();
            Err(Error::Gpu(msg))
        }
    }

    /// Compiles (once) and returns the pipeline for a kernel variant.
    pub fn pipeline(&self, kernel: &Kernel) -> Result<Arc<Pipeline>> {
        let key = kernel.key();
        if let Some(p) = self.pipelines.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(p);
        }
        let source = shader::preprocess(kernel.name, kernel.source, &kernel.defines)?;
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(dir) = &crate::env::env().dump_shaders {
            // Debugging aid: the specialised WGSL of every pipeline, named by its cache key.
            let file: String = key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect();
            let _ = std::fs::write(std::path::Path::new(&dir).join(format!("{file}.wgsl")), &source);
        }
        let desc = wgpu::ShaderModuleDescriptor { label: Some(kernel.name), source: wgpu::ShaderSource::Wgsl(source.into()) };
        let module = if kernel.trusted {
            // SAFETY: a trusted kernel's Rust wrapper checks every buffer extent against the
            // dispatch parameters before it is recorded, and the kernel clamps or guards every
            // index it forms. naga's per-access bounds checks cost 3.5x on lavapipe's GEMM.
            unsafe { self.device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
        } else {
            self.device.create_shader_module(desc)
        };
        let entries: Vec<wgpu::BindGroupLayoutEntry> = kernel
            .bindings
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupLayoutEntry {
                binding: i as u32,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: match b {
                    Binding::Uniform => {
                        wgpu::BindingType::Buffer { ty: wgpu::BufferBindingType::Uniform, has_dynamic_offset: false, min_binding_size: None }
                    }
                    Binding::Read | Binding::ReadWrite => wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage { read_only: *b == Binding::Read },
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    Binding::Texture => wgpu::BindingType::Texture {
                        sample_type: wgpu::TextureSampleType::Float { filterable: false },
                        view_dimension: wgpu::TextureViewDimension::D2,
                        multisampled: false,
                    },
                },
                count: None,
            })
            .collect();
        let layout = self.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(kernel.name), entries: &entries });
        let pipeline_layout = self.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(kernel.name),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.name),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        self.check().map_err(|e| Error::Gpu(format!("compiling {key}: {e}")))?;
        let p = Arc::new(Pipeline { pipeline, layout, name: key.clone() });
        if let Ok(mut m) = self.pipelines.lock() {
            m.insert(key, p.clone());
        }
        Ok(p)
    }

    pub fn storage(&self, label: &str, floats: usize) -> Result<wgpu::Buffer> {
        let size = self.checked_size(label, floats)?;
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }))
    }

    pub fn storage_init(&self, label: &str, data: &[f32]) -> Result<wgpu::Buffer> {
        self.storage_from(label, data, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC)
    }

    /// A read-only storage buffer holding `bytes` (pixels, read as u32 words), then zeros: to
    /// whole 4-byte words and `pad_words` more (a shader reading packed RGB reads past the last
    /// pixel's word). The bytes are written into the mapped buffer as they are, not copied first.
    pub fn storage_bytes(&self, label: &str, bytes: &[u8], pad_words: usize) -> Result<wgpu::Buffer> {
        if bytes.is_empty() {
            return Err(Error::Gpu(format!("{label}: no bytes")));
        }
        let size = self.checked_size(label, bytes.len().div_ceil(4).saturating_add(pad_words))?;
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: true,
        });
        {
            let mut view = buffer.slice(..).get_mapped_range_mut().map_err(|e| Error::Gpu(format!("{label}: {e}")))?;
            view.slice(..bytes.len()).copy_from_slice(bytes);
        }
        buffer.unmap();
        Ok(buffer)
    }

    /// A read-only storage buffer holding `words` (e.g. RGBA8 pixels, one per u32).
    pub fn storage_words(&self, label: &str, words: &[u32]) -> Result<wgpu::Buffer> {
        self.storage_from(label, words, wgpu::BufferUsages::STORAGE)
    }

    /// A buffer initialised with 4-byte elements, checked against the binding limit. A
    /// zero-sized binding is invalid, so empty data is padded to one zero element.
    fn storage_from<T: bytemuck::Pod>(&self, label: &str, data: &[T], usage: wgpu::BufferUsages) -> Result<wgpu::Buffer> {
        self.checked_size(label, data.len())?;
        let padded = [T::zeroed()];
        let data = if data.is_empty() { &padded[..] } else { data };
        Ok(self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(label), contents: bytemuck::cast_slice(data), usage }))
    }

    /// An rgba32float texture of `rows` rows of `texels` texels (4 matrix columns per texel),
    /// sampled with textureLoad and filled by copies. None when it exceeds the adapter's limits:
    /// callers then read the matrix from its buffer instead.
    pub fn rgba32f_texture(&self, label: &str, rows: usize, texels: usize) -> Option<wgpu::Texture> {
        self.rgba_texture(label, rows, texels, wgpu::TextureFormat::Rgba32Float)
    }

    fn rgba_texture(&self, label: &str, rows: usize, texels: usize, format: wgpu::TextureFormat) -> Option<wgpu::Texture> {
        let max = self.limits.max_texture_dimension_2d as usize;
        if rows == 0 || texels == 0 || rows > max || texels > max {
            return None;
        }
        Some(self.device.create_texture(&wgpu::TextureDescriptor {
            label: Some(label),
            size: wgpu::Extent3d { width: texels as u32, height: rows as u32, depth_or_array_layers: 1 },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
            usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
            view_formats: &[],
        }))
    }

    /// Uploads a [rows, cols] f32 matrix as an rgba32float texture, the last texel of each row
    /// zero-padded (see [`Self::rgba32f_texture`]).
    pub fn matrix_texture(&self, label: &str, data: &[f32], rows: usize, cols: usize) -> Option<wgpu::TextureView> {
        self.matrix_texture_as(label, data, rows, cols, Precision::F32)
    }

    /// [`Self::matrix_texture`] stored as rgba16float when `precision` is f16 (textureLoad
    /// still returns f32 values).
    pub fn matrix_texture_as(&self, label: &str, data: &[f32], rows: usize, cols: usize, precision: Precision) -> Option<wgpu::TextureView> {
        let texels = cols.div_ceil(4);
        if data.len() != rows * cols {
            return None;
        }
        let format = match precision {
            Precision::F32 => wgpu::TextureFormat::Rgba32Float,
            Precision::F16 => wgpu::TextureFormat::Rgba16Float,
        };
        let texture = self.rgba_texture(label, rows, texels, format)?;
        let mut padded = vec![0f32; rows * texels * 4];
        for r in 0..rows {
            padded[r * texels * 4..r * texels * 4 + cols].copy_from_slice(&data[r * cols..(r + 1) * cols]);
        }
        let texel_bytes = 4 * precision.bytes() as u32;
        self.queue.write_texture(
            texture.as_image_copy(),
            &precision.encode(&padded),
            wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(texels as u32 * texel_bytes), rows_per_image: Some(rows as u32) },
            texture.size(),
        );
        Some(texture.create_view(&Default::default()))
    }

    /// A zeroed storage buffer of `n` values in `precision`: f16 values two to a 4-byte word.
    pub fn storage_of(&self, label: &str, n: usize, precision: Precision) -> Result<wgpu::Buffer> {
        match precision {
            Precision::F32 => self.storage(label, n),
            Precision::F16 => self.storage(label, n.div_ceil(2).max(1)),
        }
    }

    /// `data` as f16 in a storage buffer (`array<f16>` in WGSL), padded to whole 4-byte words,
    /// checked against the binding limit.
    pub fn storage_f16(&self, label: &str, data: &[f32]) -> Result<wgpu::Buffer> {
        let mut h = Precision::F16.encode(data).into_owned();
        h.resize(h.len().div_ceil(4).max(1) * 4, 0);
        let bytes = h.len() as u64;
        let limit = self.binding_limit();
        if bytes > limit {
            return Err(Error::Gpu(format!("buffer `{label}` needs {bytes} bytes, over the adapter's binding limit of {limit} bytes")));
        }
        Ok(self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: &h,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
        }))
    }

    pub fn uniform_init(&self, label: &str, words: &[u32]) -> wgpu::Buffer {
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: bytemuck::cast_slice(words),
            usage: wgpu::BufferUsages::UNIFORM,
        })
    }

    /// The most bytes one storage buffer (and so one binding) may hold on this adapter.
    pub fn binding_limit(&self) -> u64 {
        self.limits.max_storage_buffer_binding_size.min(self.limits.max_buffer_size)
    }

    /// Size in bytes of `floats` f32 values, checked against the binding limit.
    fn checked_size(&self, label: &str, floats: usize) -> Result<u64> {
        let bytes = (floats.max(1) as u64).saturating_mul(4);
        let limit = self.binding_limit();
        if bytes > limit {
            return Err(Error::Gpu(format!("buffer `{label}` needs {bytes} bytes, over the adapter's binding limit of {limit} bytes")));
        }
        Ok(bytes)
    }

    pub fn bind_group(&self, pipeline: &Pipeline, resources: &[Resource]) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry> = resources
            .iter()
            .enumerate()
            .map(|(i, r)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: match r {
                    Resource::Buffer(b) => b.as_entire_binding(),
                    Resource::Texture(t) => wgpu::BindingResource::TextureView(t),
                },
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor { label: Some(&pipeline.name), layout: &pipeline.layout, entries: &entries })
    }

    /// Maps a MAP_READ buffer and copies out its f32 contents. On native we poll the device
    /// until the map completes; on the web the browser drives the callback and we just await.
    pub async fn read_back(&self, staging: &wgpu::Buffer) -> Result<Vec<f32>> {
        self.map_read(staging).await?;
        self.copy_mapped(staging)
    }

    /// Waits until the GPU has finished the work that writes `staging` and it is mapped.
    pub async fn map_read(&self, staging: &wgpu::Buffer) -> Result<()> {
        let slice = staging.slice(..);
        let (tx, rx) = futures_channel::oneshot::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        #[cfg(not(target_arch = "wasm32"))]
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::Gpu(format!("waiting for the GPU: {e}")))?;
        let mapped = rx.await.map_err(|_| Error::Gpu("read-back cancelled".into()))?;
        if let Err(e) = mapped {
            // A lost device fails the map before its lost callback has run (the browser
            // resolves `device.lost` on a later task), so wait a little for the callback: the
            // error then says the device is gone and that reloading helps, not only that a
            // map failed.
            self.settle_lost().await;
            if self.is_lost() {
                return Err(Error::Gpu(format!("{DEVICE_LOST} while reading the result back")));
            }
            return Err(Error::Gpu(format!("mapping the result buffer: {e}")));
        }
        Ok(())
    }

    /// Gives a pending device-lost callback up to a second to run. Natively wgpu runs it
    /// within `poll`, so this only waits in the browser, where it comes on a later task.
    pub async fn settle_lost(&self) {
        #[cfg(target_arch = "wasm32")]
        for _ in 0..50 {
            if self.is_lost() {
                return;
            }
            pause_ms(20).await;
        }
    }

    /// Copies the f32 contents out of a buffer mapped by [`Self::map_read`] and unmaps it.
    pub fn copy_mapped(&self, staging: &wgpu::Buffer) -> Result<Vec<f32>> {
        // Byte-wise: the mapped range carries no f32 alignment guarantee.
        Ok(self.copy_mapped_bytes(staging)?.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }

    /// The bytes of a buffer mapped by [`Self::map_read`]; unmaps it.
    pub fn copy_mapped_bytes(&self, staging: &wgpu::Buffer) -> Result<Vec<u8>> {
        let slice = staging.slice(..);
        let out = slice.get_mapped_range().map_err(|e| Error::Gpu(format!("reading the result buffer: {e}")))?.to_vec();
        staging.unmap();
        self.check()?;
        Ok(out)
    }

    /// Waits for `staging` (MAP_READ) and returns its bytes (e.g. a rendered frame).
    pub async fn read_back_bytes(&self, staging: &wgpu::Buffer) -> Result<Vec<u8>> {
        self.map_read(staging).await?;
        self.copy_mapped_bytes(staging)
    }

    /// [`Self::read_buffer`] of a buffer holding `n` f16 values ([`Self::storage_f16`]),
    /// widened to f32.
    pub async fn read_buffer_f16(&self, buffer: &wgpu::Buffer, n: usize) -> Result<Vec<f32>> {
        let words = self.read_buffer(buffer, n.div_ceil(2)).await?;
        let halves = words.iter().flat_map(|w| {
            let bits = w.to_bits();
            [half::f16::from_bits(bits as u16).to_f32(), half::f16::from_bits((bits >> 16) as u16).to_f32()]
        });
        Ok(halves.take(n).collect())
    }

    /// Every value of a storage buffer that stores them in `precision`, widened to f32 (tests,
    /// the autotuner's check).
    pub async fn read_all(&self, buffer: &wgpu::Buffer, precision: Precision) -> Result<Vec<f32>> {
        let values = (buffer.size() / precision.bytes()) as usize;
        match precision {
            Precision::F32 => self.read_buffer(buffer, values).await,
            Precision::F16 => self.read_buffer_f16(buffer, values).await,
        }
    }

    /// Fills a storage buffer that stores its values in `precision` with `values` (rounded to
    /// f16 there), zero after them; the mirror of [`Gpu::read_all`] (tests, tools). More values
    /// than the buffer holds are an error.
    pub fn write_all(&self, buffer: &wgpu::Buffer, values: &[f32], precision: Precision) -> Result<()> {
        let capacity = (buffer.size() / precision.bytes()) as usize;
        if values.len() > capacity {
            return Err(Error::Input(format!("{} values for a buffer of {capacity}", values.len())));
        }
        let mut data = values.to_vec();
        data.resize(capacity, 0.0);
        self.queue.write_buffer(buffer, 0, &precision.encode(&data));
        Ok(())
    }

    /// Copies `floats` values from the start of a storage buffer back to the CPU (tests, tools).
    pub async fn read_buffer(&self, buffer: &wgpu::Buffer, floats: usize) -> Result<Vec<f32>> {
        let size = floats as u64 * 4;
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read_buffer"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("read_buffer") });
        encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, size);
        self.queue.submit([encoder.finish()]);
        self.read_back(&staging).await
    }

    /// Runs ops in one submission and waits (tests, benchmarks).
    pub fn run_ops(&self, ops: &[crate::ops::Op]) -> Result<()> {
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("run_ops") });
        crate::ops::encode_all(&mut encoder, ops);
        self.queue.submit([encoder.finish()]);
        self.wait()
    }

    /// Waits, without blocking, until the work submitted so far is done (the browser's queue
    /// callback; natively a blocking poll): for timing in the browser.
    pub async fn idle(&self) -> Result<()> {
        #[cfg(target_arch = "wasm32")]
        {
            let (tx, rx) = futures_channel::oneshot::channel();
            self.queue.on_submitted_work_done(move || {
                let _ = tx.send(());
            });
            rx.await.map_err(|_| Error::Gpu("waiting for the GPU: cancelled".into()))?;
            self.check()
        }
        #[cfg(not(target_arch = "wasm32"))]
        self.wait()
    }

    /// Whether this device can time GPU work (`TIMESTAMP_QUERY`), and whether copies too
    /// (`TIMESTAMP_QUERY_INSIDE_ENCODERS`): `(passes, copies)`.
    pub fn timestamps(&self) -> (bool, bool) {
        let f = self.device.features();
        let passes = f.contains(wgpu::Features::TIMESTAMP_QUERY);
        (passes, passes && f.contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS))
    }

    /// Waits until the queue is idle (native); used by benchmarks.
    pub fn wait(&self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::Gpu(format!("waiting for the GPU: {e}")))?;
        self.check()
    }
}

/// Milliseconds on a monotonic clock: `performance.now()` in the browser (window or worker).
pub fn clock_ms() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        use wasm_bindgen::JsCast;
        let perf = js_sys::Reflect::get(&js_sys::global(), &"performance".into()).ok();
        let now = perf.as_ref().and_then(|p| js_sys::Reflect::get(p, &"now".into()).ok()).and_then(|f| f.dyn_into::<js_sys::Function>().ok());
        match (perf, now) {
            (Some(p), Some(f)) => f.call0(&p).ok().and_then(|v| v.as_f64()).unwrap_or_else(js_sys::Date::now),
            _ => js_sys::Date::now(),
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64() * 1e3
    }
}

/// CPU rasterisers want the barrier-free kernels (the subgroup/texture ones when there are
/// subgroups); real GPUs want shared-memory tiling (and the autotuner refines that per shape).
fn default_gemm(info: &wgpu::AdapterInfo, lanes: Option<u32>) -> GemmVariant {
    if info.device_type != wgpu::DeviceType::Cpu {
        GemmVariant::Tiled
    } else if lanes.is_some() {
        GemmVariant::Texture
    } else {
        GemmVariant::Register
    }
}

/// The subgroup width and fragment size of the coop kernel: the adapter's largest subgroup
/// size, and 16 where it has subgroup-scoped 16x16x16 f16 x f16 -> f32 cooperative matrices,
/// else 8 where it has 8x8x8 ones; with shader-f16 and subgroups of 4 to 64 lanes whose sizes
/// vary at most twofold (which bounds the kernel's spare slots).
fn coop_shape(info: &wgpu::AdapterInfo, features: wgpu::Features, configs: &[wgpu::CooperativeMatrixProperties]) -> Option<(u32, u32)> {
    let needs = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SUBGROUP | wgpu::Features::SHADER_F16;
    let offers = |f: u32| {
        configs.iter().any(|c| {
            (c.m_size, c.n_size, c.k_size) == (f, f, f)
                && c.ab_type == wgpu::CooperativeScalarType::F16
                && c.cr_type == wgpu::CooperativeScalarType::F32
        })
    };
    let frag = [16, 8].into_iter().find(|&f| offers(f))?;
    let (min, max) = (info.subgroup_min_size, info.subgroup_max_size);
    let sizes = min.is_power_of_two() && max.is_power_of_two() && min >= 4 && max <= 64 && max <= 2 * min;
    (features.contains(needs) && sizes).then_some((max, frag))
}

fn subgroup_lanes(info: &wgpu::AdapterInfo, features: wgpu::Features) -> Option<u32> {
    let n = info.subgroup_min_size;
    (features.contains(wgpu::Features::SUBGROUP) && n.is_power_of_two() && (4..=64).contains(&n) && info.subgroup_max_size >= n).then_some(n)
}

async fn select_adapter(instance: &wgpu::Instance, backends: wgpu::Backends) -> Result<wgpu::Adapter> {
    let wanted_name = crate::env::env().adapter_name.as_ref().map(|s| s.to_lowercase());
    #[cfg(not(target_arch = "wasm32"))]
    {
        let adapters = instance.enumerate_adapters(backends).await;
        let seen: Vec<String> = adapters
            .iter()
            .map(|a| {
                let i = a.get_info();
                format!("{} [{:?}]", i.name, i.backend)
            })
            .collect();
        if let Some(name) = &wanted_name {
            return adapters.into_iter().find(|a| a.get_info().name.to_lowercase().contains(name.as_str())).ok_or_else(|| {
                Error::NoAdapter(format!(
                    "WGPU_ADAPTER_NAME={name} matches none of the adapters found on backends {backends:?}: [{}]",
                    seen.join(", ")
                ))
            });
        }
        let power_preference = wgpu::PowerPreference::from_env().unwrap_or(wgpu::PowerPreference::HighPerformance);
        instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference,
                force_fallback_adapter: false,
                compatible_surface: None,
                apply_limit_buckets: false,
            })
            .await
            .map_err(|e| {
                Error::NoAdapter(format!(
                    "tried backends {backends:?} (set WGPU_BACKEND to choose), found [{}]: {e}. \
                     On Linux without a GPU, install Mesa's lavapipe (Debian: mesa-vulkan-drivers).",
                    seen.join(", ")
                ))
            })
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = wanted_name;
        instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                force_fallback_adapter: false,
                compatible_surface: None,
                apply_limit_buckets: false,
            })
            .await
            .map_err(|e| Error::NoAdapter(format!("navigator.gpu gave no adapter ({backends:?}): {e}")))
    }
}

/// Resolves after `ms` milliseconds on the page's or worker's event loop (`setTimeout` of the
/// global scope, whichever it is); at once if the scope has none.
#[cfg(target_arch = "wasm32")]
async fn pause_ms(ms: i32) {
    use wasm_bindgen::JsCast;
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        let global = js_sys::global();
        let timer = js_sys::Reflect::get(&global, &"setTimeout".into()).ok().and_then(|f| f.dyn_into::<js_sys::Function>().ok());
        match timer {
            Some(set) => {
                if set.call2(&global, &resolve, &ms.into()).is_err() {
                    let _ = resolve.call0(&wasm_bindgen::JsValue::UNDEFINED);
                }
            }
            None => {
                let _ = resolve.call0(&wasm_bindgen::JsValue::UNDEFINED);
            }
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

#[cfg(test)]
mod tests {
    use super::coop_shape;
    use wgpu::{CooperativeMatrixProperties as Props, CooperativeScalarType as T, Features};

    fn info(min: u32, max: u32) -> wgpu::AdapterInfo {
        wgpu::AdapterInfo {
            subgroup_min_size: min,
            subgroup_max_size: max,
            ..wgpu::AdapterInfo::new(wgpu::DeviceType::DiscreteGpu, wgpu::Backend::Vulkan)
        }
    }

    fn props(list: &[(u32, u32, u32, T, T)]) -> Vec<Props> {
        list.iter()
            .map(|&(m_size, n_size, k_size, ab_type, cr_type)| Props { m_size, n_size, k_size, ab_type, cr_type, saturating_accumulation: false })
            .collect()
    }

    /// The coop kernel's subgroup width and fragment size from what adapters report: 16x16x16
    /// where offered (the H200's list), else 8x8x8 (Mesa 26's lavapipe); f16 accumulators,
    /// other shapes, a missing feature or subgroup sizes varying more than twofold: none.
    #[test]
    fn coop_shape_follows_the_adapters_matrices() {
        let all = Features::EXPERIMENTAL_COOPERATIVE_MATRIX | Features::SUBGROUP | Features::SHADER_F16;
        let h200 = props(&[(16, 16, 16, T::F16, T::F32), (16, 8, 16, T::F16, T::F32), (16, 8, 8, T::F16, T::F32)]);
        let lavapipe = props(&[(8, 8, 8, T::F16, T::F16), (8, 8, 8, T::F16, T::F32)]);
        let both = props(&[(8, 8, 8, T::F16, T::F32), (16, 16, 16, T::F16, T::F32)]);
        assert_eq!(coop_shape(&info(32, 32), all, &h200), Some((32, 16)));
        assert_eq!(coop_shape(&info(8, 8), all, &lavapipe), Some((8, 8)));
        assert_eq!(coop_shape(&info(32, 64), all, &both), Some((64, 16)), "16 preferred; the largest subgroup");
        assert_eq!(coop_shape(&info(8, 8), all, &props(&[(8, 8, 8, T::F16, T::F16)])), None, "f16 sums only");
        assert_eq!(coop_shape(&info(32, 32), all, &props(&[(16, 8, 16, T::F16, T::F32)])), None, "no square shape");
        assert_eq!(coop_shape(&info(32, 32), all - Features::SHADER_F16, &h200), None, "no shader-f16");
        assert_eq!(coop_shape(&info(32, 32), all - Features::EXPERIMENTAL_COOPERATIVE_MATRIX, &h200), None, "feature off");
        assert_eq!(coop_shape(&info(4, 64), all, &h200), None, "sizes vary sixteenfold");
        assert_eq!(coop_shape(&info(32, 128), all, &h200), None, "128-lane subgroups");
    }
}
