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
    let too_big = || Error::Input(format!("{}: more than the {max} bytes {what} may have", path.display()));
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if meta.is_file() && meta.len() > max {
        return Err(too_big());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let kind = meta.file_type();
        if kind.is_char_device() || kind.is_block_device() {
            return Err(Error::Input(format!("{}: a device, not {what}", path.display())));
        }
    }
    read_at_most(file, max, if meta.is_file() { meta.len() as usize } else { 0 }, path)?.ok_or_else(too_big)
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

    /// `/dev/zero` never ends: it is refused at once, not read up to the bound (the old
    /// `std::fs::read` read it until the process was killed).
    #[cfg(unix)]
    #[test]
    fn a_device_is_refused_before_it_is_read() {
        let err = read_bounded(Path::new("/dev/zero"), MAX_MODEL_BYTES, "a model file").expect_err("a device").to_string();
        assert!(err.contains("/dev/zero: a device, not a model file"), "{err}");
    }
}
