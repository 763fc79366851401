//! safetensors → validated f32 tensors. timm checkpoints load as they are: names are timm's,
//! Linear weights are [out, in], dtypes F32, F16 or BF16. Every problem is an error that names
//! the tensor; nothing here panics on file data.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use safetensors::{Dtype, SafeTensors};

use crate::error::{Error, Result};
use crate::exec::cpu::Slices;
use crate::exec::Cancel;

/// What a file that is not safetensors is, where its first bytes say so: the files a user
/// most often gives in place of a model. Their first eight bytes, read as a safetensors header
/// length, used to give only "header too large". A safetensors file whose header did not read
/// (its ninth byte is the header's `{`) is never named as something else.
fn other_format(bytes: &[u8]) -> Option<String> {
    const TORCH: &str = "take the model.safetensors that timm publishes beside it, or save the state dict with safetensors.torch.save_file";
    const MAGIC: [(&[u8], &str); 7] = [
        (b"\x89PNG\r\n\x1a\n", "a PNG image"),
        (b"\xff\xd8\xff", "a JPEG image"),
        (b"GIF8", "a GIF image"),
        (b"\x93NUMPY", "a NumPy .npy array"),
        (b"GGUF", "a GGUF file (llama.cpp's format)"),
        (b"\x89HDF\r\n\x1a\n", "an HDF5 file (Keras .h5)"),
        (b"\x1f\x8b", "gzip-compressed data; decompress it first"),
    ];
    if bytes.get(8) == Some(&b'{') {
        return None;
    }
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(1024)]).to_ascii_lowercase();
    if bytes.starts_with(b"PK\x03\x04") {
        Some(format!("a zip archive, PyTorch's torch.save format (pytorch_model.bin, .pth, .pt); {TORCH}"))
    } else if bytes.len() > 2 && bytes[0] == 0x80 && (2..=5).contains(&bytes[1]) {
        Some(format!("a Python pickle, PyTorch's older torch.save format; {TORCH}"))
    } else if head.trim_start().starts_with('<') && head.contains("html") {
        Some("a web page (HTML); a Hugging Face link with /blob/ in it gives the file's page, /resolve/ the file itself".into())
    } else {
        MAGIC.iter().find(|(magic, _)| bytes.starts_with(magic)).map(|(_, kind)| kind.to_string())
    }
}

/// Where a safetensors header's tensors end in the data after it: the largest end of their
/// `data_offsets`, or None if `header` (the JSON) is no such header.
pub fn tensors_end(header: &[u8]) -> Option<u64> {
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header).ok()?;
    header
        .iter()
        .filter(|(name, _)| *name != "__metadata__")
        .try_fold(0u64, |end, (_, tensor)| Some(end.max(tensor.get("data_offsets")?.get(1)?.as_u64()?)))
}

/// The size a safetensors file's header gives it (its length field, header and tensors' data),
/// from its first bytes.
pub fn file_size(bytes: &[u8]) -> Option<u64> {
    let n = header_len(bytes)?;
    let header = bytes.get(8..8usize.checked_add(usize::try_from(n).ok()?)?)?;
    Some((8 + n).saturating_add(tensors_end(header)?))
}

/// A safetensors file's header length: its first 8 bytes, little-endian.
pub fn header_len(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?))
}

/// A parsed safetensors file. Tensors are converted to f32 when taken, so a model file is
/// never held twice in memory as f32 (or all at once ahead of the build, in slices:
/// [`Self::convert_in_slices`]).
pub struct Weights<'a> {
    file: SafeTensors<'a>,
    shapes: BTreeMap<String, Vec<usize>>,
    taken: BTreeSet<String>,
    pub metadata: HashMap<String, String>,
    /// Checked before each tensor is taken (converted): a load stops there once cancelled.
    cancel: Option<Cancel>,
    /// Tensors converted ahead of [`Self::take`], which moves them out.
    converted: HashMap<String, Converted>,
}

/// A tensor converted to f32 ahead of its [`Weights::take`], with the index of its first
/// non-finite value (which `take` reports, so that errors come in the same order either way).
struct Converted {
    data: Vec<f32>,
    non_finite: Option<usize>,
}

/// Values converted between two looks at the clock in [`Weights::convert_in_slices`]: 64 Ki
/// (256 KB of f32, well under a millisecond), so a slice overruns its time by that at most.
const CONVERT_CHUNK: usize = 1 << 16;

impl<'a> Weights<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let (header_len, meta) = SafeTensors::read_metadata(bytes).map_err(|e| match (other_format(bytes), e) {
            (Some(kind), _) => Error::Format(format!("not a safetensors file: it is {kind}")),
            (None, safetensors::SafeTensorError::MetadataIncompleteBuffer) => Error::Format(match file_size(bytes) {
                Some(size) if (bytes.len() as u64) < size => format!("cut short: {} bytes, where its header's tensors end at {size}", bytes.len()),
                Some(size) => format!("more bytes than its header's tensors take: they end at {size}"),
                None => "its header's tensors do not cover its data".to_string(),
            }),
            (None, e) => Error::Format(e.to_string()),
        })?;
        // serde keeps the last of two equal keys: a header naming a tensor twice is refused
        // here rather than silently resolved.
        if let Some(header) = bytes.get(8..8 + header_len) {
            if let Some(name) = duplicate_key(header) {
                return Err(Error::Format(format!("the header lists `{name}` more than once")));
            }
        }
        let metadata = meta.metadata().clone().unwrap_or_default();
        let file = SafeTensors::deserialize(bytes).map_err(|e| Error::Format(e.to_string()))?;
        for (name, view) in file.iter() {
            if !matches!(view.dtype(), Dtype::F32 | Dtype::F16 | Dtype::BF16) {
                return Err(Error::tensor(name, format!("has dtype {:?}; tokenmix reads F32, F16 and BF16", view.dtype())));
            }
        }
        let shapes = file.iter().map(|(name, view)| (name.to_string(), view.shape().to_vec())).collect();
        Ok(Weights { file, shapes, taken: BTreeSet::new(), metadata, cancel: None, converted: HashMap::new() })
    }

    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.shapes.get(name).map(Vec::as_slice)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.shapes.keys().map(String::as_str)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.shapes.contains_key(name)
    }

    /// The shape of a tensor that must exist (for config inference).
    pub fn require_shape(&self, name: &str) -> Result<&[usize]> {
        self.shape(name).ok_or_else(|| Error::tensor(name, "missing"))
    }

    /// From now on [`Self::take`] returns [`Error::Cancelled`] once `cancel` is cancelled.
    pub fn set_cancel(&mut self, cancel: &Cancel) {
        self.cancel = Some(cancel.clone());
    }

    /// Converts every tensor of the file to f32 now, giving the thread back between chunks
    /// once a slice has run `slices.every_ms` (see [`Slices`]), and checking `cancel` before
    /// each chunk. [`Self::take`] then moves the converted values out, with the same checks
    /// and errors, in the same order, as when it converts them itself. For a thread that
    /// must not be held for a whole load: the conversion is most of a load's time on the CPU
    /// (the browser's one-thread build: 0.3 s for a 74 MB `mixer_s16_224`). Memory is as
    /// before: every tensor a model uses ends up converted anyway.
    pub async fn convert_in_slices(&mut self, slices: &Slices, cancel: &Cancel) -> Result<()> {
        let mut began = (slices.clock)();
        let names: Vec<String> = self.shapes.keys().filter(|n| !self.converted.contains_key(*n)).cloned().collect();
        for name in names {
            // A tensor that cannot be read is left to `take`, which reports it in its turn.
            let Ok(view) = self.file.tensor(&name) else { continue };
            let (dtype, bytes) = (view.dtype(), view.data());
            let width = (dtype.bitsize() / 8).max(1);
            let mut data = Vec::with_capacity(bytes.len() / width);
            let mut non_finite = None;
            for chunk in bytes.chunks(CONVERT_CHUNK * width) {
                cancel.check()?;
                let start = data.len();
                push_f32(&mut data, &name, dtype, chunk)?;
                if non_finite.is_none() {
                    non_finite = data[start..].iter().position(|v| !v.is_finite()).map(|i| start + i);
                }
                slices.pause_if_due(&mut began).await;
            }
            self.converted.insert(name, Converted { data, non_finite });
        }
        cancel.check()
    }

    /// Converts the named tensor to f32 after checking its shape (or moves it out, converted
    /// by [`Self::convert_in_slices`]); marks it as used.
    pub fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        if let Some(c) = &self.cancel {
            c.check()?;
        }
        let view = self.file.tensor(name).map_err(|_| Error::tensor(name, format!("missing (expected shape {shape:?})")))?;
        if view.shape() != shape {
            return Err(Error::tensor(name, format!("has shape {:?}, expected {shape:?}", view.shape())));
        }
        let (data, non_finite) = match self.converted.remove(name) {
            Some(c) => (c.data, c.non_finite),
            None => {
                let data = to_f32(name, view.dtype(), view.data())?;
                let non_finite = data.iter().position(|v| !v.is_finite());
                (data, non_finite)
            }
        };
        if data.len() != shape.iter().product::<usize>() {
            return Err(Error::tensor(name, "data length does not match its shape"));
        }
        if let Some(i) = non_finite {
            return Err(Error::tensor(name, format!("holds a non-finite value ({}) at index {i}", data[i])));
        }
        self.taken.insert(name.to_string());
        Ok(data)
    }

    /// The named tensor as f32, without marking it used (for CPU copies, e.g. the visualiser).
    pub fn read(&self, name: &str) -> Result<Vec<f32>> {
        let view = self.file.tensor(name).map_err(|_| Error::tensor(name, "missing"))?;
        to_f32(name, view.dtype(), view.data())
    }

    /// Errors if the file holds tensors no layer used: a checkpoint of another
    /// architecture, or a config inferred wrongly, must not load silently.
    pub fn finish(&self) -> Result<()> {
        let unused: Vec<&str> = self.names().filter(|n| !self.taken.contains(*n)).collect();
        match unused.as_slice() {
            [] => Ok(()),
            [one] => Err(Error::tensor(*one, "unexpected (not used by the inferred architecture)")),
            many => Err(Error::Tensor {
                name: many[0].to_string(),
                msg: format!("unexpected, with {} other unused tensors: {}", many.len() - 1, many[1..many.len().min(6)].join(", ")),
            }),
        }
    }

    /// Number of scalar parameters in the file.
    pub fn parameter_count(&self) -> usize {
        self.shapes.values().map(|s| s.iter().product::<usize>()).sum()
    }
}

fn to_f32(name: &str, dtype: Dtype, bytes: &[u8]) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    push_f32(&mut out, name, dtype, bytes)?;
    Ok(out)
}

/// Appends `bytes` (of `dtype`) to `out` as f32.
fn push_f32(out: &mut Vec<f32>, name: &str, dtype: Dtype, bytes: &[u8]) -> Result<()> {
    match dtype {
        Dtype::F32 => out.extend(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        Dtype::F16 => out.extend(bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())),
        Dtype::BF16 => out.extend(bytes.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())),
        other => return Err(Error::tensor(name, format!("has dtype {other:?}; tokenmix reads F32, F16 and BF16"))),
    }
    Ok(())
}

/// The first key that appears twice at the top level of a JSON object, if any.
fn duplicate_key(json: &[u8]) -> Option<String> {
    struct Keys(Option<String>);
    impl<'de> serde::de::Visitor<'de> for Keys {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(mut self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
            let mut seen = BTreeSet::new();
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<serde::de::IgnoredAny>()?;
                if self.0.is_none() && !seen.insert(key.clone()) {
                    self.0 = Some(key);
                }
            }
            Ok(self.0)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(json);
    serde::Deserializer::deserialize_map(&mut de, Keys(None)).ok().flatten()
}
