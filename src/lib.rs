//! tokenmix: MLP-Mixer (and friends) with every layer a WGSL compute shader, scheduled on
//! wgpu. See ARCHITECTURE.md for the module map.

pub mod error;
pub mod gpu;
pub mod labels;
pub mod models;
pub mod ops;
pub mod preprocess;
pub mod weights;

pub use error::{Error, Result};
pub use gpu::Gpu;
pub use models::{Model, ModelInfo, Output};
