//! tokenmix: MLP-Mixer (and friends) with every layer a WGSL compute shader, scheduled on
//! wgpu — or, where the GPU is software or missing, SIMD CPU kernels running the same network
//! description. See ARCHITECTURE.md for the module map.
//!
//! Where to start: [`exec::select`] picks the executor (a hardware GPU, else the CPU),
//! [`Model::load`] loads timm's `model.safetensors` as it is (or [`DEFAULT_MODEL`]),
//! [`preprocess::Batches`] reads image files a batch at a time with timm's eval transform, and
//! [`Model::forward_blocking`] answers a batch ([`Output::top_k`], [`labels::label`]).
//! `examples/classify.rs` is a whole folder classifier made of these. Beyond classifying:
//! [`Model::classify_rgba`] (an RGBA image of any size, resized on the executor),
//! [`Model::explain`] (each logit split per token), [`Model::insight`] (what a layer's token
//! mixing learned), [`Cancel`] (stops a pass at its next step), [`inspect()`] (a file checked
//! without running it).

// wgpu's web types are neither Send nor Sync (wasm is single-threaded); natively the same Arcs
// cross threads, so they stay Arcs on both.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

#[cfg(not(target_arch = "wasm32"))]
pub mod dataset;
#[cfg(all(feature = "desktop", not(target_arch = "wasm32")))]
pub mod desktop;
pub mod env;
pub mod error;
pub mod exec;
#[cfg(not(target_arch = "wasm32"))]
pub mod file;
#[doc(hidden)]
pub mod fuzz;
pub mod gpu;
#[cfg(all(feature = "hub", not(target_arch = "wasm32")))]
pub mod hub;
pub mod hubname;
pub mod insight;
pub mod labels;
pub mod models;
pub mod net;
pub mod ops;
pub mod preprocess;
#[cfg(target_arch = "wasm32")]
pub mod web;
pub mod weights;

pub use error::{Error, Result};
pub use exec::{BackendChoice, Cancel, Cpu, Device};
pub use gpu::Gpu;
pub use models::{inspect, Explained, Inspected, Model, ModelInfo, Output};

/// The default model, embedded so everything works offline: an MLP-Mixer trained on
/// Fashion-MNIST by `tools/train.py` (timm names, F16, metadata with preprocessing and labels).
/// The bytes are a `static` item of their own: a `const`'s data, or data a static only points
/// to, is copied into each codegen unit that refers to it (the wasm build carried the 2.3 MB
/// model twice, the desktop binary too).
pub static DEFAULT_MODEL: &[u8] = &DEFAULT_MODEL_FILE;
static DEFAULT_MODEL_FILE: [u8; include_bytes!("../weights/mixer_fmnist.safetensors").len()] = *include_bytes!("../weights/mixer_fmnist.safetensors");
pub const DEFAULT_MODEL_NAME: &str = "mixer_fmnist (embedded)";
