//! One error type for the whole crate. Every message names the thing that was wrong
//! (the tensor, the shape, the limit) so that a user can act on it without a backtrace.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No adapter could be created; the message lists what was tried.
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    #[error("GPU device request failed: {0}")]
    Device(String),
    /// A validation or out-of-memory error reported by wgpu, or a lost device.
    #[error("GPU error: {0}")]
    Gpu(String),
    /// The file is not a valid safetensors file (truncated, bad header, bad offsets).
    #[error("malformed weights file: {0}")]
    Format(String),
    /// A named tensor is missing, unexpected, or has the wrong shape or dtype.
    #[error("tensor `{name}`: {msg}")]
    Tensor { name: String, msg: String },
    /// The architecture could not be inferred, or is out of the supported range.
    #[error("model config: {0}")]
    Config(String),
    /// Bad user input: image, array, argument.
    #[error("input: {0}")]
    Input(String),
    /// The caller asked the run to stop ([`crate::exec::Cancel`]) before it ended.
    #[error("cancelled: a newer request replaced this one")]
    Cancelled,
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub fn tensor(name: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Tensor { name: name.into(), msg: msg.into() }
    }
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        Error::Io { path: path.as_ref().display().to_string(), source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
