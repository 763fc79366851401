//! Executors: what runs a [`crate::net::Net`]. The wgpu executor (`gpu.rs`) records WGSL
//! dispatches; the CPU executor (`cpu.rs`) runs SIMD kernels (a GEMM crate plus plain loops the
//! compiler vectorises), multi-threaded natively. A [`Device`] says which one a model gets, and
//! [`select`] picks it: `auto` takes the CPU where there is no GPU adapter or the adapter is a
//! software rasteriser (lavapipe/llvmpipe, SwiftShader, WebGPU's fallback adapter), else the GPU.

pub mod cpu;
#[cfg(any(test, target_arch = "wasm32"))]
mod gemm128;
pub mod gpu;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::gpu::Gpu;

pub use cpu::Cpu;

/// Asks a running pass to stop, from any thread: a pass given this token (the `*_cancellable`
/// methods of [`crate::Model`]) checks it where it can stop cleanly and then returns
/// [`Error::Cancelled`]. The CPU executor checks before every step of the network (a step is
/// one GEMM, one norm: milliseconds), the GPU executor before every submission (a submitted
/// pass runs to its end: on a real GPU milliseconds) and the GEMM autotuner before each
/// kernel it builds and each timed run. Clones share the flag, and
/// [`Self::checks_passed`] says how far a stopped pass got.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<Flag>);

#[derive(Debug, Default)]
struct Flag {
    set: AtomicBool,
    /// The checks that found the token not cancelled.
    passed: AtomicUsize,
    /// Cancelled also once this word holds this value: a cell of the browser build's cancel
    /// table (`web.rs`), which the page's thread writes in the worker's shared memory while
    /// the worker's own thread is busy with the pass.
    watch: Option<(&'static AtomicU32, u32)>,
    /// Cancelled also at the check after this many passed ([`Cancel::after_checks`]).
    after: Option<usize>,
}

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// A token that is cancelled once `word` holds `value` (or [`Self::cancel`] is called).
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    pub(crate) fn watching(word: &'static AtomicU32, value: u32) -> Cancel {
        Cancel(Arc::new(Flag { watch: Some((word, value)), ..Flag::default() }))
    }

    /// A token that cancels itself at its check after `n` passed ones: for tests that stop a
    /// call at each point where it checks, deterministically (a flag set from another thread
    /// lands wherever that thread happens to be).
    pub fn after_checks(n: usize) -> Cancel {
        Cancel(Arc::new(Flag { after: Some(n), ..Flag::default() }))
    }

    /// Stops every pass given this token (or a clone) at its next check.
    pub fn cancel(&self) {
        self.0.set.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.set.load(Ordering::Relaxed) || self.0.watch.is_some_and(|(word, value)| word.load(Ordering::Relaxed) == value)
    }

    /// `Err(Error::Cancelled)` once cancelled.
    pub fn check(&self) -> Result<()> {
        if self.0.after.is_some_and(|n| self.0.passed.load(Ordering::Relaxed) >= n) {
            self.cancel();
        }
        if self.is_cancelled() {
            Err(Error::Cancelled)
        } else {
            self.0.passed.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    /// How many checks found the token not cancelled, over every pass given it: for a pass
    /// that stopped, the steps the CPU executor began, or the chunks the GPU executor
    /// submitted (0: it stopped before its first).
    pub fn checks_passed(&self) -> usize {
        self.0.passed.load(Ordering::Relaxed)
    }
}

/// The largest batch one plan is built for; longer inputs run in chunks.
pub const MAX_BATCH: usize = 64;

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

/// Wall-clock milliseconds of one image's run: preprocessing (CPU work and upload), the
/// forward pass (until the results are there), the read-back copy.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct RunTimes {
    pub preprocess_ms: f64,
    pub forward_ms: f64,
    pub readback_ms: f64,
}

/// Where one forward pass spent its time, added up by kind of step ([`crate::net::Net::step_kind`],
/// the same names on both executors): `bench --profile`, `TOKENMIX_CPU_PROFILE=1`. The CPU
/// executor times each step with the wall clock; the GPU executor with GPU timestamps at the
/// start and end of each step's work (one compute pass per step while profiling).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Profile {
    pub batch: usize,
    /// How the steps were timed.
    pub clock: &'static str,
    /// One row per kind of step and kernel, in the order of first appearance.
    pub rows: Vec<ProfileRow>,
    /// From the first timed step's start to the last one's end. On a GPU, what this exceeds
    /// the rows' sum by is time between steps (barriers, launches) when no two steps overlap.
    pub span_ms: f64,
    /// Steps that could not be timed (on a GPU without timestamps outside passes, the copies).
    pub untimed: usize,
}

/// One kind of step in a [`Profile`]: its total time over `steps` steps.
#[derive(Clone, Debug, Serialize)]
pub struct ProfileRow {
    pub kind: String,
    /// What ran it on the GPU (the WGSL kernels, e.g. "gemm_tiled+gemm_splitk"); empty on the CPU.
    pub kernel: String,
    pub ms: f64,
    pub steps: usize,
}

impl Profile {
    pub fn new(batch: usize, clock: &'static str) -> Profile {
        Profile { batch, clock, ..Default::default() }
    }

    /// Adds one step's time to its row.
    pub fn add(&mut self, kind: &str, kernel: &str, ms: f64) {
        match self.rows.iter_mut().find(|r| r.kind == kind && r.kernel == kernel) {
            Some(r) => {
                r.ms += ms;
                r.steps += 1;
            }
            None => self.rows.push(ProfileRow { kind: kind.into(), kernel: kernel.into(), ms, steps: 1 }),
        }
    }

    /// The time of all timed steps.
    pub fn total_ms(&self) -> f64 {
        self.rows.iter().map(|r| r.ms).sum()
    }

    /// A heading line, then one line per row, most time first.
    pub fn lines(&self) -> Vec<String> {
        let total = self.total_ms();
        let steps: usize = self.rows.iter().map(|r| r.steps).sum();
        let untimed = if self.untimed > 0 { format!(" ({} untimed)", self.untimed) } else { String::new() };
        let mut out = vec![format!(
            "profile, batch {} ({}): {total:.3} ms in {steps} steps{untimed}, {:.3} ms from the first start to the last end",
            self.batch, self.clock, self.span_ms
        )];
        let mut rows: Vec<&ProfileRow> = self.rows.iter().collect();
        rows.sort_by(|a, b| b.ms.total_cmp(&a.ms));
        for r in rows {
            let kernel = if r.kernel.is_empty() { String::new() } else { format!("  [{}]", r.kernel) };
            out.push(format!("  {:>9.3} ms {:>5.1} % {:>4}x  {}{kernel}", r.ms, 100.0 * r.ms / total.max(1e-12), r.steps, r.kind));
        }
        out
    }
}

/// Which executor to use, as a user asks for it (`--backend`, `TOKENMIX_BACKEND`, the JS
/// option `backend`, the page's `?backend=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    #[default]
    Auto,
    Gpu,
    Cpu,
}

impl BackendChoice {
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(BackendChoice::Auto),
            "gpu" => Ok(BackendChoice::Gpu),
            "cpu" => Ok(BackendChoice::Cpu),
            other => Err(Error::Input(format!("backend `{other}`: expected auto, gpu or cpu"))),
        }
    }

    /// `TOKENMIX_BACKEND`, when set (a bad value is an error, not a silent default).
    pub fn from_env() -> Result<Option<Self>> {
        crate::env::env().backend.as_deref().map(|v| Self::parse(v).map_err(|e| Error::Input(format!("TOKENMIX_BACKEND: {e}")))).transpose()
    }

    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Gpu => "gpu",
            BackendChoice::Cpu => "cpu",
        }
    }
}

/// Where a model runs.
#[derive(Clone)]
pub enum Device {
    Gpu(Arc<Gpu>),
    Cpu(Arc<Cpu>),
}

impl From<Arc<Gpu>> for Device {
    fn from(g: Arc<Gpu>) -> Self {
        Device::Gpu(g)
    }
}

impl From<Arc<Cpu>> for Device {
    fn from(c: Arc<Cpu>) -> Self {
        Device::Cpu(c)
    }
}

impl Device {
    /// The CPU executor with the machine's threads.
    pub fn cpu() -> Device {
        Device::Cpu(Arc::new(Cpu::new()))
    }

    /// `"gpu"` or `"cpu"`.
    pub fn backend(&self) -> &'static str {
        match self {
            Device::Gpu(_) => "gpu",
            Device::Cpu(_) => "cpu",
        }
    }

    /// How GEMM weights and hidden activations are stored ("f32"/"f16"), and why that is not what was asked for,
    /// when it is not (f16 without shader-f16; the CPU executor, which computes in f32).
    pub fn precision(&self) -> (&'static str, Option<String>) {
        match self {
            Device::Gpu(g) => (g.precision.name(), g.precision_note.clone()),
            Device::Cpu(_) => {
                let asked = crate::gpu::requested_precision().unwrap_or_default();
                ("f32", (asked != crate::gpu::Precision::F32).then(|| format!("{} was asked for; the CPU executor computes in f32", asked.name())))
            }
        }
    }

    /// What runs the kernels: "llvmpipe (…) [Vulkan, Cpu]" or "CPU: 2 threads, avx2+fma".
    pub fn describe(&self) -> String {
        match self {
            Device::Gpu(g) => g.describe(),
            Device::Cpu(c) => c.describe(),
        }
    }

    /// The kernel family: the GPU's GEMM variant (with its autotuned choices per shape class,
    /// see [`Gpu::gemm_summary`]), or the CPU's GEMM.
    pub fn kernels(&self) -> String {
        match self {
            Device::Gpu(g) => g.gemm_summary(),
            Device::Cpu(_) => cpu::GEMM_NAME.to_string(),
        }
    }

    /// How the norms and softmax spread over the GPU (`gpu::RowKernel`: "subgroup",
    /// "workgroup" or "invocation"); None on the CPU executor.
    pub fn rows(&self) -> Option<&'static str> {
        match self {
            Device::Gpu(g) => Some(g.rows.name()),
            Device::Cpu(_) => None,
        }
    }

    /// Where the GPU executor resamples an image it classifies by default (`gpu::Resample`):
    /// "gpu" or "cpu"; None on the CPU executor.
    pub fn resample(&self) -> Option<&'static str> {
        match self {
            Device::Gpu(g) => Some(g.resample.name()),
            Device::Cpu(_) => None,
        }
    }

    /// The GEMM autotuner's choices (shape class → kernel) and whether it is on; empty and
    /// false on the CPU executor and wherever the kernel is fixed.
    pub fn gemm_tuning(&self) -> (bool, std::collections::BTreeMap<String, String>) {
        match self {
            Device::Gpu(g) => (g.tuning.enabled(), g.tuning.choices()),
            Device::Cpu(_) => (false, Default::default()),
        }
    }

    /// A short label for test logs: "gpu/texture", "cpu".
    pub fn label(&self) -> String {
        match self {
            Device::Gpu(g) => format!("gpu/{}", g.gemm.name()),
            Device::Cpu(_) => "cpu".into(),
        }
    }

    pub fn gpu(&self) -> Option<&Arc<Gpu>> {
        match self {
            Device::Gpu(g) => Some(g),
            Device::Cpu(_) => None,
        }
    }
}

/// A [`Device`] and why it was chosen (shown by `info`, `bench --json`, `adapterInfo()`).
#[derive(Clone)]
pub struct Selected {
    pub device: Device,
    pub choice: BackendChoice,
    /// One line a page or `info` can show.
    pub reason: String,
    /// What the adapter request said, when auto fell back for want of one.
    pub detail: Option<String>,
}

/// Adapter names of software rasterisers, lower-case.
const SOFTWARE: &[&str] = &["llvmpipe", "lavapipe", "swiftshader", "softpipe", "microsoft basic render", "warp"];

/// Is this adapter a CPU pretending to be a GPU? (wgpu's `DeviceType::Cpu`, WebGPU's fallback
/// adapter — which wgpu maps to `Cpu` — or a known software rasteriser by name.)
pub fn is_software(info: &wgpu::AdapterInfo) -> bool {
    let name = info.name.to_lowercase();
    info.device_type == wgpu::DeviceType::Cpu || SOFTWARE.iter().any(|s| name.contains(s))
}

/// Picks the executor for `choice` (see the module docs). `gpu` fails where there is no
/// adapter; `auto` never fails for want of one.
pub async fn select(choice: BackendChoice) -> Result<Selected> {
    let cpu = |reason: String, detail: Option<String>| Selected { device: Device::cpu(), choice, reason, detail };
    match choice {
        BackendChoice::Cpu => Ok(cpu("the CPU backend was asked for".into(), None)),
        BackendChoice::Gpu => {
            let gpu = Gpu::new().await?;
            let reason = format!("the GPU backend was asked for ({})", gpu.describe());
            Ok(Selected { device: Device::Gpu(Arc::new(gpu)), choice, reason, detail: None })
        }
        BackendChoice::Auto => match Gpu::adapter().await {
            Err(e) => Ok(cpu("no GPU adapter was found".into(), Some(e.to_string()))),
            Ok((instance, adapter)) => {
                let info = adapter.get_info();
                if is_software(&info) {
                    let name = if info.name.is_empty() { "WebGPU's fallback adapter".to_string() } else { info.name.clone() };
                    Ok(cpu(format!("the GPU adapter, {name}, is a software rasteriser, where the CPU backend is faster"), None))
                } else {
                    let gpu = Gpu::from_adapter(instance, adapter).await?;
                    let reason = format!("{} is a hardware GPU", gpu.describe());
                    Ok(Selected { device: Device::Gpu(Arc::new(gpu)), choice, reason, detail: None })
                }
            }
        },
    }
}

/// Runs a hand-made [`crate::net::Net`] once on `device` for `batch` images, with the given
/// slot contents, and returns every slot afterwards (in [`crate::net::Slot::ALL`] order): how
/// the kernel tests run each step on both executors.
#[cfg(not(target_arch = "wasm32"))]
pub fn run_slots(device: &Device, net: crate::net::Net, batch: usize, inputs: &[(crate::net::Slot, Vec<f32>)]) -> Result<Vec<Vec<f32>>> {
    match device {
        Device::Gpu(g) => gpu::GpuExec::new(g.clone(), net, &Cancel::new())?.run_slots(batch, inputs),
        Device::Cpu(_) => cpu::CpuExec::new(net)?.run_slots(batch, inputs),
    }
}

/// Per-token L2 norms of each stage's output (PoolFormer's per-stage energy) from the stage
/// snapshots of one image, laid one after the other.
pub fn stage_energy(stages: &[((usize, usize), usize)], data: &[f32]) -> Vec<((usize, usize), Vec<f32>)> {
    let mut at = 0;
    let mut out = Vec::new();
    for &((h, w), d) in stages {
        let Some(stage) = data.get(at..at + h * w * d) else {
            break;
        };
        out.push(((h, w), stage.chunks(d.max(1)).map(|t| t.iter().map(|v| v * v).sum::<f32>().sqrt()).collect()));
        at += h * w * d;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watching token is cancelled once its word holds its value, and only then: a stale
    /// value of an earlier call in the same cell does not cancel it.
    #[test]
    fn a_watching_token_is_cancelled_by_its_value_only() {
        static WORD: AtomicU32 = AtomicU32::new(0);
        let t = Cancel::watching(&WORD, 7);
        assert!(t.check().is_ok());
        WORD.store(6, Ordering::Relaxed);
        assert!(!t.is_cancelled(), "another call's value");
        WORD.store(7, Ordering::Relaxed);
        assert!(matches!(t.check(), Err(Error::Cancelled)));
        assert_eq!(t.checks_passed(), 1, "one check passed before the cancel");
        let plain = Cancel::new();
        assert!(!plain.is_cancelled(), "a plain token watches nothing");
        plain.clone().cancel();
        assert!(plain.is_cancelled());
    }
}
