//! Fashion-MNIST in its IDX files (gzip or raw), for `tokenmix eval`. Native only.
//!
//! IDX: magic `00 00 08 ndim` (unsigned bytes), ndim big-endian u32 dimensions, then the data.
//! Sizes are checked against the file before anything is allocated from them.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The largest decompressed IDX file accepted (Fashion-MNIST's training images are 47 MB).
const MAX_IDX_BYTES: u64 = 256 << 20;

/// An IDX array of unsigned bytes.
pub struct Idx {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

fn bad(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Input(format!("{}: {msg}", path.display()))
}

pub fn read_idx(path: &Path) -> Result<Idx> {
    let raw = crate::file::read_bounded(path, MAX_IDX_BYTES, "an IDX file")?;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .take(MAX_IDX_BYTES + 1)
            .read_to_end(&mut out)
            .map_err(|e| bad(path, format!("not a valid gzip file: {e}")))?;
        if out.len() as u64 > MAX_IDX_BYTES {
            return Err(bad(path, format!("decompresses to over {MAX_IDX_BYTES} bytes")));
        }
        out
    } else {
        raw
    };
    if bytes.len() < 4 || bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08 {
        return Err(bad(path, "not an IDX file of unsigned bytes (magic 00 00 08 ndim)"));
    }
    let ndim = bytes[3] as usize;
    let header = 4 + 4 * ndim;
    if ndim == 0 || bytes.len() < header {
        return Err(bad(path, format!("IDX header for {ndim} dimensions is truncated")));
    }
    let dims: Vec<usize> = bytes[4..header].chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize).collect();
    let count = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    if count != Some(bytes.len() - header) {
        let need = count.map_or("more than a usize of".to_string(), |c| c.to_string());
        return Err(bad(path, format!("dimensions {dims:?} need {need} bytes of data, the file has {}", bytes.len() - header)));
    }
    Ok(Idx { dims, data: bytes[header..].to_vec() })
}

/// `DIR/{name}` or `DIR/{name}.gz`, whichever exists.
fn find(dir: &Path, name: &str) -> Result<PathBuf> {
    [dir.join(name), dir.join(format!("{name}.gz"))]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| Error::Input(format!("{}: no {name} or {name}.gz (the Fashion-MNIST IDX files)", dir.display())))
}

/// The Fashion-MNIST test split's files, without `.gz` ([`find`] tries both).
const TEST_IMAGES: &str = "t10k-images-idx3-ubyte";
const TEST_LABELS: &str = "t10k-labels-idx1-ubyte";

/// Whether `dir` holds the Fashion-MNIST test images ([`fashion_mnist_test`] reads them); `eval`
/// takes another folder as class folders of images.
pub fn holds_fashion_mnist(dir: &Path) -> bool {
    find(dir, TEST_IMAGES).is_ok()
}

/// A labelled set of greyscale images.
pub struct Images {
    pub count: usize,
    pub height: usize,
    pub width: usize,
    pub pixels: Vec<u8>,
    pub labels: Vec<u8>,
}

/// The Fashion-MNIST test split (`t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`) in `dir`.
pub fn fashion_mnist_test(dir: &Path) -> Result<Images> {
    let images_path = find(dir, TEST_IMAGES)?;
    let labels_path = find(dir, TEST_LABELS)?;
    let images = read_idx(&images_path)?;
    let labels = read_idx(&labels_path)?;
    let [count, height, width] = images.dims[..] else {
        return Err(bad(&images_path, format!("dimensions {:?}, expected [count, height, width]", images.dims)));
    };
    if labels.dims != [count] {
        return Err(bad(&labels_path, format!("dimensions {:?}, expected [{count}] to match the images", labels.dims)));
    }
    if count == 0 {
        return Err(bad(&images_path, "holds no images"));
    }
    // A label outside the ten classes is a damaged file, not a wrong prediction to count.
    if let Some((i, l)) = labels.data.iter().enumerate().find(|&(_, &l)| l >= 10) {
        return Err(bad(&labels_path, format!("label {l} of image {i} is not one of Fashion-MNIST's 10 classes (0 to 9)")));
    }
    Ok(Images { count, height, width, pixels: images.data, labels: labels.data })
}

/// ImageNet-1k's synsets, one a line in class-index order: timm's
/// `timm/data/_info/imagenet_synsets.txt` (timm 1.0.31, Apache-2.0), the order
/// `www/imagenet_labels.json` follows.
const IMAGENET_SYNSETS: &str = include_str!("imagenet_synsets.txt");

/// A class folder's name as a class of the model: a label as the model names it (any case, and
/// with any punctuation, spaces or underscores: `ankle_boot`, `Ankle boot` and `ankle-boot` are
/// all "Ankle boot"; `tshirt_top` is "T-shirt/top", whose slash no folder name can hold, and so
/// is `tshirt`, one of the names the slash parts), or the class index in decimal (`0`, `9`);
/// and for a 1000-class model, an ImageNet-1k synset (`n01440764`: ImageNet's own `val/` and
/// `train/` folders). `None` where it is none of these.
pub fn class_of_folder(name: &str, labels: &[String], classes: usize) -> Option<usize> {
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) {
        return name.parse::<usize>().ok().filter(|&i| i < classes);
    }
    if classes == IMAGENET_SYNSETS.lines().count() {
        if let Some(i) = IMAGENET_SYNSETS.lines().position(|s| s == name) {
            return Some(i);
        }
    }
    let key = |s: &str| s.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect::<String>();
    let want = key(name);
    if want.is_empty() {
        return None;
    }
    let labels = &labels[..classes.min(labels.len())];
    // The whole label, else one of the alternatives a slash parts ("T-shirt/top": `tshirt`).
    labels.iter().position(|l| key(l) == want).or_else(|| labels.iter().position(|l| l.split('/').any(|part| key(part) == want)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_folders_are_matched_by_label_or_index() {
        let labels: Vec<String> = ["T-shirt/top", "Trouser", "Ankle boot", "Écharpe"].map(String::from).to_vec();
        for (name, want) in [
            ("Trouser", Some(1)),
            ("trouser", Some(1)),
            ("ankle_boot", Some(2)),
            ("Ankle Boot", Some(2)),
            ("tshirt_top", Some(0)),
            ("T-shirt top", Some(0)),
            ("tshirt", Some(0)),
            ("top", Some(0)),
            ("écharpe", Some(3)),
            ("0", Some(0)),
            ("03", Some(3)),
            ("4", None),
            ("99999999999999999999999", None),
            ("boot", None),
            ("", None),
            ("__", None),
        ] {
            assert_eq!(class_of_folder(name, &labels, 4), want, "{name:?}");
        }
        // Only the model's classes count: a label past them is not one.
        assert_eq!(class_of_folder("Ankle boot", &labels, 2), None);
        // ImageNet's synset folders, for a 1000-class model only: tench (0), tabby (281) and
        // toilet tissue (999) in every ImageNet-1k class order (torchvision's and timm's).
        for (synset, class) in [("n01440764", 0), ("n02123045", 281), ("n15075141", 999)] {
            assert_eq!(class_of_folder(synset, &[], 1000), Some(class), "{synset}");
            assert_eq!(class_of_folder(synset, &labels, 4), None, "{synset} for a 4-class model");
        }
    }
}
