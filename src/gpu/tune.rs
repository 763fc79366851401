//! Per-adapter GEMM autotuning, in the manner of Burn/CubeCL and ggml's WebGPU backend: at the
//! first GEMM of a shape class, time every kernel the adapter can run on that GEMM's real
//! operands and keep the fastest; cache the winners per adapter in a file, so that later runs
//! (and other models with the same shapes) time nothing.
//!
//! A shape class is the operand layout (linear, token mixing, transposed, convolution) and M
//! (times the batch), N and K each rounded up to a power of two. The cache file is
//! `gemm-tuning.json` in `TOKENMIX_CACHE_DIR` (else `crate::env::cache_home`:
//! `$XDG_CACHE_HOME/tokenmix`, else `~/.cache/tokenmix`): `{ adapter key: { class: kernel } }`, the key naming the adapter, its
//! driver and a hash of the GEMM kernels' sources (a changed kernel invalidates the entry).
//!
//! On by default on real GPUs natively. Off on CPU rasterisers (lavapipe, SwiftShader: their
//! kernels were chosen by measurement, see `ops::gemm`, and timing the barrier-bound tiled
//! kernels there would cost seconds), in the browser (a plan is built synchronously there,
//! and timing needs to wait for the GPU) and when `TOKENMIX_GEMM` fixes the kernel.
//! `TOKENMIX_AUTOTUNE=0|1` turns it off or on whatever the adapter.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The choices of one device, and where they persist.
#[derive(Debug, Default)]
pub struct Tuning {
    enabled: bool,
    /// Adapter + driver + kernel-source hash: the cache file's key for this device.
    key: String,
    file: Option<PathBuf>,
    choices: Mutex<BTreeMap<String, String>>,
    /// Shape classes timed by this process (a cached class is not timed again).
    timed: AtomicUsize,
    /// Kernels left out of a class because their results were wrong on this device: "coop on
    /// linear m256 n512 k512: differs from the tiled kernel by …".
    rejected: Mutex<Vec<String>>,
}

/// The sources whose change invalidates cached choices.
const KERNELS: [&str; 7] = [
    include_str!("../../shaders/gemm_coop.wgsl"),
    include_str!("../../shaders/gemm_tile_slots.wgsl"),
    include_str!("../../shaders/gemm_common.wgsl"),
    include_str!("../../shaders/gemm_tiled.wgsl"),
    include_str!("../../shaders/gemm_subgroup.wgsl"),
    include_str!("../../shaders/gemm_texture.wgsl"),
    include_str!("../../shaders/gemm_register.wgsl"),
];

impl Tuning {
    /// No autotuning: every GEMM uses the device's default kernel.
    pub fn off() -> Self {
        Tuning::default()
    }

    /// The tuning state of a new device: enabled as the module documentation says (`auto` is
    /// false when `TOKENMIX_GEMM` fixed the kernel), with the cached choices for this adapter.
    pub fn new(info: &wgpu::AdapterInfo, precision: super::Precision, auto: bool) -> Self {
        let enabled = match crate::env::env().autotune.as_deref() {
            Some("0") | Some("false") | Some("off") => false,
            Some(_) => auto,
            None => auto && !crate::exec::is_software(info) && cfg!(not(target_arch = "wasm32")),
        };
        if !enabled {
            return Self::off();
        }
        Self::forced(info, precision, cache_file())
    }

    /// Tuning on, whatever the adapter, with choices persisted in `file` (read now when it
    /// holds this adapter's entry): for tests and tools.
    pub fn forced(info: &wgpu::AdapterInfo, precision: super::Precision, file: Option<PathBuf>) -> Self {
        let key = adapter_key(info, precision);
        let choices = file.as_ref().map(|f| read_cache(f, &key)).unwrap_or_default();
        Tuning { enabled: true, key, file, choices: Mutex::new(choices), ..Tuning::default() }
    }

    /// The same tuning (on or off, same cache file) for the device at another precision.
    pub(crate) fn at_precision(&self, info: &wgpu::AdapterInfo, precision: super::Precision) -> Self {
        if self.enabled {
            Self::forced(info, precision, self.file.clone())
        } else {
            Self::off()
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
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

/// This adapter's entry of the cache file; a missing, unreadable or malformed file (or an entry
/// naming unknown kernels) is no cache, never an error.
fn read_cache(file: &std::path::Path, key: &str) -> BTreeMap<String, String> {
    let Ok(text) = std::fs::read_to_string(file) else { return BTreeMap::new() };
    let Ok(serde_json::Value::Object(all)) = serde_json::from_str::<serde_json::Value>(&text) else { return BTreeMap::new() };
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
