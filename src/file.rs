//! Reading a file the user named, bounded: a model, an input batch or a dataset file is read
//! whole, so a path that is not such a file (a device such as `/dev/zero`, a pipe that never
//! ends, a file far larger than its kind can be) must be an error, not a read until memory runs
//! out and the kernel kills the process.

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// The largest model file tokenmix reads or downloads: several times the largest checkpoint of
/// these families (timm's mixer_l16_224 is 0.9 GB in F32).
pub const MAX_MODEL_BYTES: u64 = 4 << 30;

/// `path`'s bytes, at most `max` of them; `what` names the kind of file in the errors ("a model
/// file"). A regular file larger than `max` is refused before a byte is read, a device
/// (`/dev/zero`, a disk) at once, and a pipe once it goes past `max`.
pub fn read_bounded(path: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    let (file, meta) = open(path)?;
    read_opened(file, &meta, path, max, what)
}

/// `path` opened to read, and its metadata.
fn open(path: &Path) -> Result<(std::fs::File, std::fs::Metadata)> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    Ok((file, meta))
}

fn too_big(path: &Path, max: u64, what: &str) -> Error {
    Error::Input(format!("{}: more than the {max} bytes {what} may have", path.display()))
}

/// [`read_bounded`] of `path` opened as `file`, whose metadata is `meta`.
fn read_opened(file: std::fs::File, meta: &std::fs::Metadata, path: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    if meta.is_file() && meta.len() > max {
        return Err(too_big(path, max, what));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let kind = meta.file_type();
        if kind.is_char_device() || kind.is_block_device() {
            return Err(Error::Input(format!("{}: a device, not {what}", path.display())));
        }
    }
    read_at_most(file, max, if meta.is_file() { meta.len() as usize } else { 0 }, path)?.ok_or_else(|| too_big(path, max, what))
}

/// A model file's bytes (safetensors), at most [`MAX_MODEL_BYTES`]: a regular file or a device
/// as [`read_bounded`] takes them; a stream (a pipe, a FIFO, `<(curl …)`) as far as its header
/// says the file goes ([`read_safetensors_stream`]), where it used to be read up to the bound.
pub fn read_model(path: &Path) -> Result<Vec<u8>> {
    let what = "a model file";
    let (file, meta) = open(path)?;
    #[cfg(unix)]
    let stream = {
        use std::os::unix::fs::FileTypeExt;
        meta.file_type().is_fifo() || meta.file_type().is_socket()
    };
    #[cfg(not(unix))]
    let stream = !meta.is_file();
    if !stream {
        return read_opened(file, &meta, path, MAX_MODEL_BYTES, what);
    }
    read_safetensors_stream(file, MAX_MODEL_BYTES, path)?.ok_or_else(|| too_big(path, MAX_MODEL_BYTES, what))
}

/// The largest header safetensors reads (its own bound).
const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// A safetensors file from a stream that may never end: its 8-byte header length, its header,
/// then as many bytes as the header's tensors reach and one more (to tell a stream that goes
/// on: the parser then refuses the file as it refuses a regular file with bytes past its
/// tensors), or None if that is more than `max`. What is not a safetensors header (no JSON,
/// over safetensors' 100 MB bound, tensors without `data_offsets`) stops the reading there:
/// the bytes read so far are returned for the parser to name what they are. `path` names the
/// source in an I/O error.
pub fn read_safetensors_stream(mut reader: impl Read, max: u64, path: &Path) -> Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    let mut more = |bytes: &mut Vec<u8>, n: u64| (&mut reader).take(n).read_to_end(bytes).map_err(|e| Error::io(path, e));
    more(&mut bytes, 8)?;
    let Some(n) = crate::weights::header_len(&bytes).filter(|&n| n <= MAX_SAFETENSORS_HEADER) else {
        return Ok(Some(bytes));
    };
    more(&mut bytes, n)?;
    let Some(size) = crate::weights::file_size(&bytes) else {
        return Ok(Some(bytes));
    };
    if size > max {
        return Ok(None);
    }
    let rest = size + 1 - bytes.len() as u64;
    more(&mut bytes, rest)?;
    Ok(Some(bytes))
}

/// `reader`'s bytes to its end, or None once there are more than `max` (one past it is read to
/// tell); `capacity` is the size expected, `path` names the source in an I/O error. The bound of
/// [`read_bounded`], for a stream too (standard input, `classify -`).
pub fn read_at_most(reader: impl Read, max: u64, capacity: usize, path: &Path) -> Result<Option<Vec<u8>>> {
    let mut bytes = Vec::with_capacity(capacity);
    reader.take(max + 1).read_to_end(&mut bytes).map_err(|e| Error::io(path, e))?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_up_to_its_bound_and_refuses_past_it() {
        let dir = tempfile::Builder::new().prefix("tokenmix-file-").tempdir().expect("a scratch folder");
        let path = dir.path().join("ten.bin");
        std::fs::write(&path, [7u8; 10]).expect("a scratch file");
        assert_eq!(read_bounded(&path, 10, "a test file").expect("10 bytes fit 10"), [7u8; 10]);
        let err = read_bounded(&path, 9, "a test file").expect_err("10 bytes do not fit 9").to_string();
        assert!(err.contains("more than the 9 bytes a test file may have"), "{err}");
        assert!(read_bounded(&dir.path().join("missing.bin"), 10, "a test file").is_err());
    }

    /// A safetensors file of two tensors, 24 bytes of data.
    fn small_safetensors() -> Vec<u8> {
        let header = br#"{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}"#;
        [&(header.len() as u64).to_le_bytes()[..], header, &[1u8; 24]].concat()
    }

    /// A stream is read as far as its header says, and one byte more: a file followed by a
    /// stream that never ends (`repeat`) is not read past that, nor is one that is no
    /// safetensors file past its first 8 bytes, where the old reading went on to the bound.
    #[test]
    fn a_stream_is_read_as_far_as_its_header_says() {
        let file = small_safetensors();
        let path = Path::new("stream");
        let read = |r: &mut dyn Read, max| read_safetensors_stream(r, max, path).expect("no I/O error");
        assert_eq!(read(&mut &file[..], MAX_MODEL_BYTES), Some(file.clone()), "the whole file, and no more there is");
        let endless = || std::io::Cursor::new(file.clone()).chain(std::io::repeat(7));
        let got = read(&mut endless(), MAX_MODEL_BYTES).expect("within the bound");
        assert_eq!(got.len(), file.len() + 1, "one byte past the tensors");
        assert_eq!(got[..file.len()], file[..]);
        assert_eq!(read(&mut endless(), file.len() as u64 - 1), None, "over the bound: refused from the header");
        assert_eq!(read(&mut endless(), file.len() as u64).map(|b| b.len()), Some(file.len() + 1));
        // Not a safetensors header: 8 bytes (a length over safetensors' bound), or the length
        // and the header it gives (not JSON, or tensors without offsets).
        assert_eq!(read(&mut std::io::repeat(0xff), MAX_MODEL_BYTES).map(|b| b.len()), Some(8));
        assert_eq!(
            read(&mut [&5u64.to_le_bytes()[..], b"hello"].concat().as_slice().chain(std::io::repeat(0)), MAX_MODEL_BYTES).map(|b| b.len()),
            Some(13)
        );
        let no_offsets = br#"{"a":{"dtype":"F32","shape":[2]}}"#;
        let stream = [&(no_offsets.len() as u64).to_le_bytes()[..], no_offsets].concat();
        assert_eq!(read(&mut stream.as_slice().chain(std::io::repeat(0)), MAX_MODEL_BYTES).map(|b| b.len()), Some(stream.len()));
        assert_eq!(read(&mut &b"abc"[..], MAX_MODEL_BYTES), Some(b"abc".to_vec()), "shorter than a length");
    }

    /// `/dev/zero` never ends: it is refused at once, not read up to the bound (the old
    /// `std::fs::read` read it until the process was killed).
    #[cfg(unix)]
    #[test]
    fn a_device_is_refused_before_it_is_read() {
        let err = read_bounded(Path::new("/dev/zero"), MAX_MODEL_BYTES, "a model file").expect_err("a device").to_string();
        assert!(err.contains("/dev/zero: a device, not a model file"), "{err}");
    }
}
