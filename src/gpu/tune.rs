//! Per-adapter GEMM autotuning, in the manner of Burn/CubeCL and ggml's WebGPU backend: at the
//! first GEMM of a shape class, time every kernel the adapter can run on that GEMM's real
//! operands and keep the fastest; cache the winners per adapter in a file, so that later runs
//! (and other models with the same shapes) time nothing.
//!
//! A shape class is the operand layout (linear, token mixing, transposed, convolution) and M
//! (times the batch), N and K each rounded up to a power of two. The cache file is
//! `gemm-tuning.json` in `TOKENMIX_CACHE_DIR` (else `crate::env::cache_home`:
//! `$XDG_CACHE_HOME/tokenmix`, else `~/.cache/tokenmix`): `{ adapter key: { class: kernel } }`, the key naming the adapter, its
//! driver, the precision and a hash of the GEMM kernels' sources (a changed kernel invalidates
//! the entry). In the browser the same JSON lives in the Cache API (`web.rs`), and the timing
//! waits for the GPU after the plan is built (`Tuning::times_at_build`, `GpuExec::autotune`).
//!
//! On by default on real GPUs. Off on CPU rasterisers (lavapipe, SwiftShader: their kernels
//! were chosen by measurement, see `ops::gemm`, and timing the barrier-bound tiled kernels
//! there would cost seconds) and when `TOKENMIX_GEMM` fixes the kernel. `TOKENMIX_AUTOTUNE=0|1`
//! (the page: the `autotune` option, [`request_autotune`]) turns it off or on whatever the
//! adapter.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The choices of one device, and where they persist.
#[derive(Debug, Default)]
pub struct Tuning {
    enabled: AtomicBool,
    /// Adapter + driver + precision + kernel-source hash: the cache's key for this device.
    key: String,
    file: Option<PathBuf>,
    choices: Mutex<BTreeMap<String, String>>,
    /// Shape classes timed by this process (a cached class is not timed again).
    timed: AtomicUsize,
    /// Kernels left out of a class because their results were wrong on this device: "coop on
    /// linear m256 n512 k512: differs from the tiled kernel by …".
    rejected: Mutex<Vec<String>>,
    /// Shape classes whose f16 kernel (coop) this process checked against the tiled kernel.
    checked: Mutex<std::collections::BTreeSet<String>>,
    /// Natively too, no timing at plan build: [`Tuning::defer_to_autotune`].
    deferred: AtomicBool,
}

/// The sources whose change invalidates cached choices.
const KERNELS: [&str; 8] = [
    include_str!("../../shaders/gemm_splitk.wgsl"),
    include_str!("../../shaders/gemm_coop.wgsl"),
    include_str!("../../shaders/gemm_tile_slots.wgsl"),
    include_str!("../../shaders/gemm_common.wgsl"),
    include_str!("../../shaders/gemm_tiled.wgsl"),
    include_str!("../../shaders/gemm_subgroup.wgsl"),
    include_str!("../../shaders/gemm_texture.wgsl"),
    include_str!("../../shaders/gemm_register.wgsl"),
];

static REQUESTED: Mutex<Option<bool>> = Mutex::new(None);

/// What [`request_autotune`] set last (the browser puts it back after a failed load).
pub fn autotune_override() -> Option<bool> {
    REQUESTED.lock().ok().and_then(|r| *r)
}

/// Whether devices made from now on autotune (the page's `autotune` option): wins over
/// `TOKENMIX_AUTOTUNE`; None goes back to the default (hardware GPUs only).
pub fn request_autotune(on: Option<bool>) {
    if let Ok(mut r) = REQUESTED.lock() {
        *r = on;
    }
}

impl Tuning {
    /// No autotuning: every GEMM uses the device's default kernel.
    pub fn off() -> Self {
        Tuning::default()
    }

    /// The tuning state of a new device: enabled as the module documentation says (`auto` is
    /// false when `TOKENMIX_GEMM` fixed the kernel), with the cached choices for this adapter.
    pub fn new(info: &wgpu::AdapterInfo, precision: super::Precision, auto: bool) -> Self {
        let requested = REQUESTED.lock().ok().and_then(|r| *r);
        let enabled = match (requested, crate::env::env().autotune.as_deref()) {
            (Some(on), _) => on && auto,
            (None, Some("0") | Some("false") | Some("off")) => false,
            (None, Some(_)) => auto,
            (None, None) => auto && !crate::exec::is_software(info),
        };
        match (auto, enabled) {
            (false, _) => Self::off(),
            (true, true) => Self::forced(info, precision, cache_file()),
            // Off for now, with no choices (so none are reported), but able to be turned on
            // (the page's `autotune` option), when the browser imports the stored ones.
            (true, false) => Tuning { key: adapter_key(info, precision), file: cache_file(), ..Tuning::default() },
        }
    }

    /// Tuning on, whatever the adapter, with choices persisted in `file` (read now when it
    /// holds this adapter's entry): for tests and tools.
    pub fn forced(info: &wgpu::AdapterInfo, precision: super::Precision, file: Option<PathBuf>) -> Self {
        let key = adapter_key(info, precision);
        let choices = file.as_ref().and_then(|f| std::fs::read_to_string(f).ok()).map(|t| entry(&t, &key)).unwrap_or_default();
        Tuning { enabled: AtomicBool::new(true), key, file, choices: Mutex::new(choices), ..Tuning::default() }
    }

    /// The same tuning (on or off, same cache file) for the device at another precision.
    pub(crate) fn at_precision(&self, info: &wgpu::AdapterInfo, precision: super::Precision) -> Self {
        match (self.key.is_empty(), self.enabled()) {
            (true, _) => Self::off(),
            (false, true) => Self::forced(info, precision, self.file.clone()),
            (false, false) => Tuning { key: adapter_key(info, precision), file: self.file.clone(), ..Tuning::default() },
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    /// Turns tuning on or off for GEMMs built from now on (the page's `autotune` option on a
    /// loaded device); never on for a device whose kernel is fixed (`TOKENMIX_GEMM`, tests).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on && !self.key.is_empty(), Ordering::SeqCst);
    }

    /// Whether a GEMM's first build times the kernels on the spot (natively), or leaves its
    /// class to [`crate::exec::gpu::GpuExec::autotune`], which can wait for the GPU (the browser,
    /// where a plan is built synchronously).
    pub fn times_at_build(&self) -> bool {
        cfg!(not(target_arch = "wasm32")) && !self.deferred.load(Ordering::SeqCst)
    }

    /// Leaves the timing to [`crate::exec::gpu::GpuExec::autotune`] natively too, as the
    /// browser does: for tests of that path on a native adapter.
    pub fn defer_to_autotune(&self) {
        self.deferred.store(true, Ordering::SeqCst);
    }

    /// Adds this device's entry of a cache text (the browser's Cache API copy of the file).
    pub fn import(&self, text: &str) {
        if let Ok(mut c) = self.choices.lock() {
            for (class, v) in entry(text, &self.key) {
                c.entry(class).or_insert(v);
            }
        }
    }

    /// `text` (a cache, possibly empty or malformed) with this device's entry replaced by its
    /// choices: what the browser writes back.
    pub fn export(&self, text: &str) -> String {
        let mut all = serde_json::from_str::<serde_json::Value>(text).ok().filter(|v| v.is_object()).unwrap_or_else(|| serde_json::json!({}));
        all[&self.key] = serde_json::json!(self.choices());
        all.to_string()
    }

    /// Shape class → kernel name, as chosen (or read from the cache) so far.
    pub fn choices(&self) -> BTreeMap<String, String> {
        self.choices.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Shape classes this process timed (cached ones are not).
    pub fn timed(&self) -> usize {
        self.timed.load(Ordering::SeqCst)
    }

    /// The kernels left out because their results were wrong on this device, and why.
    pub fn rejected(&self) -> Vec<String> {
        self.rejected.lock().map(|r| r.clone()).unwrap_or_default()
    }

    pub(crate) fn reject(&self, class: &str, v: super::GemmVariant, why: &str) {
        if let Ok(mut r) = self.rejected.lock() {
            r.push(format!("{} on {class}: {why}", v.name()));
        }
    }

    /// Shape classes whose kernel that computes in f16 this process checked against the tiled
    /// kernel's results: when it timed it, and when the cache named it (a file is only a file).
    pub fn checked(&self) -> Vec<String> {
        self.checked.lock().map(|c| c.iter().cloned().collect()).unwrap_or_default()
    }

    pub(crate) fn is_checked(&self, class: &str) -> bool {
        self.checked.lock().is_ok_and(|c| c.contains(class))
    }

    /// Drops the choice for `class` (one that failed its check), in memory; the cache file is
    /// rewritten when the class is timed again.
    pub(crate) fn forget(&self, class: &str) {
        if let Ok(mut c) = self.choices.lock() {
            c.remove(class);
        }
    }

    pub(crate) fn mark_checked(&self, class: &str) {
        if let Ok(mut c) = self.checked.lock() {
            c.insert(class.to_string());
        }
    }

    pub(crate) fn get(&self, class: &str) -> Option<super::GemmVariant> {
        self.choices.lock().ok()?.get(class).and_then(|v| super::GemmVariant::parse(v))
    }

    /// Records a measured choice and rewrites this adapter's entry in the cache file (best
    /// effort: an unwritable cache only costs a new tuning next time).
    pub(crate) fn record(&self, class: &str, v: super::GemmVariant) {
        self.timed.fetch_add(1, Ordering::SeqCst);
        let Ok(mut c) = self.choices.lock() else { return };
        c.insert(class.to_string(), v.name().to_string());
        if let Some(file) = &self.file {
            write_cache(file, &self.key, &c);
        }
    }
}

/// The cache file's key for an adapter: its name, backend, driver, the precision (f16 has
/// kernels of its own) and a hash of the kernels.
fn adapter_key(info: &wgpu::AdapterInfo, precision: super::Precision) -> String {
    let mut hash: u64 = 0xcbf29ce484222325; // FNV-1a over the kernel sources
    for b in KERNELS.iter().flat_map(|s| s.bytes()) {
        hash = (hash ^ b as u64).wrapping_mul(0x100000001b3);
    }
    format!("{} [{:?}] {} {} / {} / kernels {hash:016x}", info.name, info.backend, info.driver, info.driver_info, precision.name())
}

/// A GEMM's shape class: layout and power-of-two-rounded M (with the batch), N, K.
pub fn class(layout: &str, m: usize, n: usize, k: usize) -> String {
    let r = |v: usize| v.max(1).next_power_of_two();
    format!("{layout} m{} n{} k{}", r(m), r(n), r(k))
}

#[cfg(not(target_arch = "wasm32"))]
fn cache_file() -> Option<PathBuf> {
    Some(crate::env::cache_dir_override().unwrap_or_else(crate::env::cache_home).join("gemm-tuning.json"))
}

#[cfg(target_arch = "wasm32")]
fn cache_file() -> Option<PathBuf> {
    None
}

/// This adapter's entry of a cache text; a malformed text (or an entry naming unknown kernels)
/// is no cache, never an error.
fn entry(text: &str, key: &str) -> BTreeMap<String, String> {
    let Ok(serde_json::Value::Object(all)) = serde_json::from_str::<serde_json::Value>(text) else { return BTreeMap::new() };
    let Some(serde_json::Value::Object(entry)) = all.get(key) else { return BTreeMap::new() };
    entry
        .iter()
        .filter_map(|(class, v)| {
            let name = v.as_str()?;
            super::GemmVariant::parse(name).map(|_| (class.clone(), name.to_string()))
        })
        .collect()
}

fn write_cache(file: &std::path::Path, key: &str, choices: &BTreeMap<String, String>) {
    let mut all = std::fs::read_to_string(file)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .filter(|v| v.is_object())
        .unwrap_or_else(|| serde_json::json!({}));
    all[key] = serde_json::json!(choices);
    if let Some(dir) = file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // Write then rename, so a concurrent reader never sees half a file.
    let tmp = file.with_extension(format!("json.{}", std::process::id()));
    if std::fs::write(&tmp, all.to_string()).is_ok() {
        let _ = std::fs::rename(&tmp, file);
    }
}
