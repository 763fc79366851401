//! Every environment override tokenmix reads, in one place, read once (the first time one is
//! needed). wgpu reads its own too: `WGPU_BACKEND` and `WGPU_POWER_PREF` (through
//! `InstanceDescriptor::from_env` and `PowerPreference::from_env`). README lists them all.
//! In the browser there is no environment: every field is unset. Two more are read where they
//! are used, at that moment: `TOKENMIX_CACHE_DIR` (the hub downloads' `hub::cache_dir`
//! and the GEMM autotuner's cache file, `gpu::tune`) and `TOKENMIX_CAMERA`
//! (`desktop::camera::Ffmpeg`).

use std::sync::OnceLock;

#[derive(Debug, Default)]
pub struct Env {
    /// `TOKENMIX_BACKEND`: auto, gpu or cpu (checked by `BackendChoice::from_env`).
    pub backend: Option<String>,
    /// `TOKENMIX_GEMM`: the WGSL GEMM kernel instead of the adapter's default (texture,
    /// subgroup, register, tiled, tiled128, tiled128k16, tiled32, splitk, coop, coop128, coop-emulated; checked when the device is made). Also
    /// turns the autotuner off.
    pub gemm: Option<String>,
    /// `TOKENMIX_ROWS`: how the norms and softmax spread over the GPU (`gpu::RowKernel`),
    /// `invocation` or `workgroup`, instead of the adapter's default (checked when the device is made).
    pub rows: Option<String>,
    /// `TOKENMIX_RESAMPLE`: where a GPU executor resamples an image it classifies
    /// (`gpu::Resample`), `gpu` or `cpu`, instead of the adapter's default (checked when the
    /// device is made).
    pub resample: Option<String>,
    /// `TOKENMIX_PRECISION`: f32 (default) or f16 GEMM weights and hidden activations on the
    /// GPU (`--precision` wins).
    pub precision: Option<String>,
    /// `TOKENMIX_AUTOTUNE`: 0 turns GEMM autotuning off, 1 on even on a CPU rasteriser
    /// (default: on for real GPUs natively; see `gpu::tune`).
    pub autotune: Option<String>,
    /// `TOKENMIX_GEMM_TILE=RxC`: the register kernel's tile, for tuning.
    pub gemm_tile: Option<String>,
    /// `TOKENMIX_SUBGROUP_TILE=RxC`: the subgroup/texture kernels' tile, for tuning.
    pub subgroup_tile: Option<String>,
    /// `TOKENMIX_DUMP_SHADERS=DIR`: write every specialised kernel there.
    pub dump_shaders: Option<std::path::PathBuf>,
    /// `TOKENMIX_CPU_PROFILE=1`: time per kind of step on the CPU executor.
    pub cpu_profile: bool,
    /// `TOKENMIX_TUNE_LOG=1`: the GEMM autotuner prints each candidate's time per shape class
    /// to stderr (`tune: …`), for reading its choices on a real GPU.
    pub tune_log: bool,
    /// `WGPU_ADAPTER_NAME`: a substring of the adapter to use.
    pub adapter_name: Option<String>,
    /// `TOKENMIX_HUB`: the Hugging Face hub's base URL for the desktop app and the CLI's
    /// `hf-hub:` models (tests serve a local folder); `view --hub` wins over it.
    pub hub: Option<String>,
}

/// tokenmix's cache folder when `TOKENMIX_CACHE_DIR` does not name one:
/// `$XDG_CACHE_HOME/tokenmix`, else `~/.cache/tokenmix`, else the temp dir's `tokenmix`. The
/// desktop app keeps downloads in its `hub/`, the GEMM autotuner its `gemm-tuning.json`.
#[cfg(not(target_arch = "wasm32"))]
pub fn cache_home() -> std::path::PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|h| h.join(".cache"))).unwrap_or_else(std::env::temp_dir).join("tokenmix")
}

/// `TOKENMIX_CACHE_DIR`, read where it is used (see the module documentation).
#[cfg(not(target_arch = "wasm32"))]
pub fn cache_dir_override() -> Option<std::path::PathBuf> {
    std::env::var_os("TOKENMIX_CACHE_DIR").filter(|v| !v.is_empty()).map(Into::into)
}

/// The overrides, read on first use.
pub fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(read)
}

#[cfg(not(target_arch = "wasm32"))]
fn read() -> Env {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    Env {
        backend: var("TOKENMIX_BACKEND"),
        gemm: var("TOKENMIX_GEMM"),
        rows: var("TOKENMIX_ROWS"),
        resample: var("TOKENMIX_RESAMPLE"),
        autotune: var("TOKENMIX_AUTOTUNE"),
        precision: var("TOKENMIX_PRECISION"),
        gemm_tile: var("TOKENMIX_GEMM_TILE"),
        subgroup_tile: var("TOKENMIX_SUBGROUP_TILE"),
        dump_shaders: std::env::var_os("TOKENMIX_DUMP_SHADERS").map(Into::into),
        cpu_profile: var("TOKENMIX_CPU_PROFILE").is_some_and(|v| v != "0"),
        tune_log: var("TOKENMIX_TUNE_LOG").is_some_and(|v| v != "0"),
        adapter_name: var("WGPU_ADAPTER_NAME"),
        hub: var("TOKENMIX_HUB"),
    }
}

#[cfg(target_arch = "wasm32")]
fn read() -> Env {
    Env::default()
}
