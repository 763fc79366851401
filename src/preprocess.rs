//! timm's eval transform (`timm.data.transforms_factory`, eval branch): resize the shorter
//! side to floor(size / crop_pct) with bicubic filtering (a non-square input: both sides by the
//! ratio that brings the image to cover floor(h / crop_pct) x floor(w / crop_pct)), centre-crop
//! `size` (offsets rounded half to even, as Python rounds), scale to [0, 1], normalise with the
//! model's mean/std; a one-channel model gets PIL's "L" conversion first. The settings travel
//! in a model file's metadata; when absent, each family's timm pretrained default is used.
//! tests/preprocess.rs checks all of it against timm's transform itself
//! (tests/fixtures/preprocess.json, from tools/make_preprocess_goldens.py).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Preprocess {
    /// Model input (crop) size, [height, width].
    pub size: [usize; 2],
    /// A double, as timm's float: floor(size / crop_pct) differs in f32 (224 / 0.8f32 = 279.99…).
    pub crop_pct: f64,
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    /// 1 (greyscale, PIL's "L" conversion) or 3 (RGB).
    pub channels: usize,
}

impl Preprocess {
    /// A model input (`[c, h, w]`, CHW, normalised) back as 8-bit RGB pixels, row-major; a
    /// grey input repeats its channel. What the views draw as the model's-eye view.
    pub fn denormalise_rgb(&self, input: &[f32], [c, h, w]: [usize; 3]) -> Vec<u8> {
        let px = |i: usize, k: usize| {
            let v = input[k * h * w + i] * self.std.get(k).copied().unwrap_or(1.0) + self.mean.get(k).copied().unwrap_or(0.0);
            (v.clamp(0.0, 1.0) * 255.0).round() as u8
        };
        (0..h * w).flat_map(|i| if c >= 3 { [px(i, 0), px(i, 1), px(i, 2)] } else { [px(i, 0); 3] }).collect()
    }

    /// Mixer/gMLP defaults in timm: mean = std = 0.5, crop_pct 0.875.
    pub fn half_normalised(channels: usize, size: [usize; 2]) -> Self {
        Preprocess { size, crop_pct: 0.875, mean: vec![0.5; channels], std: vec![0.5; channels], channels }
    }

    /// ResMLP/PoolFormer defaults in timm: ImageNet mean/std (their average for one channel).
    pub fn imagenet(channels: usize, size: [usize; 2], crop_pct: f64) -> Self {
        let (mean, std) = if channels == 3 {
            (IMAGENET_MEAN.to_vec(), IMAGENET_STD.to_vec())
        } else {
            (vec![IMAGENET_MEAN.iter().sum::<f32>() / 3.0; channels], vec![IMAGENET_STD.iter().sum::<f32>() / 3.0; channels])
        };
        Preprocess { size, crop_pct, mean, std, channels }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(format!("preprocess: {m}")));
        if self.channels != 1 && self.channels != 3 {
            return bad(format!("channels must be 1 or 3, not {}", self.channels));
        }
        if self.mean.len() != self.channels || self.std.len() != self.channels {
            return bad(format!("mean/std need {} values", self.channels));
        }
        if self.std.iter().any(|s| !s.is_finite() || *s == 0.0) || self.mean.iter().any(|m| !m.is_finite()) {
            return bad("mean/std must be finite and std non-zero".into());
        }
        if !(self.crop_pct > 0.05 && self.crop_pct <= 1.0) {
            return bad(format!("crop_pct {} is outside (0.05, 1]", self.crop_pct));
        }
        if self.size[0] == 0 || self.size[1] == 0 || self.size[0] > 4096 || self.size[1] > 4096 {
            return bad(format!("size {:?} is outside 1..=4096", self.size));
        }
        Ok(())
    }

    /// Size after the resize step, before the centre crop, as timm's eval transform makes it:
    /// for a square input torchvision's Resize(floor(size / crop_pct)) (the shorter side
    /// becomes that, the longer keeps the aspect ratio, truncated); for a non-square one timm's
    /// ResizeKeepRatio to (floor(h / crop_pct), floor(w / crop_pct)): both sides scaled by the
    /// smaller of the two ratios, rounded (half to even, as Python's round).
    pub fn resize_to(&self, width: usize, height: usize) -> (usize, usize) {
        let [h, w] = self.size;
        let scaled = |s: usize| (s as f64 / self.crop_pct).floor();
        if h == w {
            let short = scaled(h) as usize;
            if width <= height {
                (short, (short as f64 * height as f64 / width as f64) as usize)
            } else {
                ((short as f64 * width as f64 / height as f64) as usize, short)
            }
        } else {
            let ratio = (height as f64 / scaled(h)).min(width as f64 / scaled(w));
            ((width as f64 / ratio).round_ties_even() as usize, (height as f64 / ratio).round_ties_even() as usize)
        }
    }
}

/// PIL's "L" of an RGBA8 pixel (R in the low byte): (19595 R + 38470 G + 7471 B + 0x8000) >> 16,
/// i.e. 0.299 R + 0.587 G + 0.114 B rounded.
pub fn pil_l(rgba: u32) -> u8 {
    let [r, g, b, _] = rgba.to_le_bytes();
    ((19595 * r as u32 + 38470 * g as u32 + 7471 * b as u32 + 0x8000) >> 16) as u8
}

/// Where the model's input comes from in a source image: the resized size and the crop's
/// top-left corner in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub resized: (usize, usize),
    pub left: usize,
    pub top: usize,
}

/// The largest image [`Preprocess::prepare_rgba`] (and so `Model::classify_rgba`) takes, in
/// pixels and per side.
pub const MAX_IMAGE_PIXELS: usize = 1 << 26;
pub const MAX_IMAGE_SIDE: usize = 1 << 15;

/// Whether tokenmix takes an image of `width` x `height` (not empty, within the limits above).
pub fn check_image_size(width: usize, height: usize) -> Result<()> {
    if width == 0 || height == 0 {
        return Err(Error::Input(format!("image is {width}x{height}: it has no pixels")));
    }
    if width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE || width.saturating_mul(height) > MAX_IMAGE_PIXELS {
        return Err(Error::Input(format!(
            "image is {width}x{height}; tokenmix takes at most {MAX_IMAGE_SIDE} px a side and {MAX_IMAGE_PIXELS} pixels"
        )));
    }
    Ok(())
}

impl Preprocess {
    /// The CPU half of classifying an RGBA8 image (a browser ImageData) of any size: checks
    /// the size and the pixel count, computes the resize and crop, and — for images more than
    /// 4x larger than the resize target — box-shrinks by an integer factor, which keeps the GPU
    /// filter's footprint (and its run time) bounded. Returns the pixels as one u32 per RGBA
    /// texel, their width and height, and the geometry for `preprocess.wgsl`.
    pub fn prepare_rgba(&self, rgba: &[u8], width: usize, height: usize) -> Result<(Vec<u32>, usize, usize, Geometry)> {
        check_image_size(width, height)?;
        if rgba.len() != width * height * 4 {
            return Err(Error::Input(format!("{} bytes of pixels for a {width}x{height} RGBA image (needs {})", rgba.len(), width * height * 4)));
        }
        let g = self.geometry(width, height)?;
        let scale = (width as f64 / g.resized.0 as f64).min(height as f64 / g.resized.1 as f64);
        let k = if scale > 4.0 { (scale / 2.0).floor() as usize } else { 1 };
        let (pixels, sw, sh) = shrink_rgba(rgba, width, height, k);
        Ok((pixels, sw, sh, g))
    }

    /// The resize and centre crop (torchvision's CenterCrop: offsets rounded half to even, as
    /// Python's round: 640x480 at 224 / 0.875 resizes to 341x256 and crops at 58, not 59) for a
    /// `width` x `height` image; an error when the resized image is smaller than the crop.
    pub fn geometry(&self, width: usize, height: usize) -> Result<Geometry> {
        if width == 0 || height == 0 {
            return Err(Error::Input("image has zero size".into()));
        }
        let (rw, rh) = self.resize_to(width, height);
        let [ch, cw] = self.size;
        if rw < cw || rh < ch {
            return Err(Error::Input(format!("{width}x{height} image: resized to {rw}x{rh}, smaller than the {cw}x{ch} crop")));
        }
        let top = ((rh - ch) as f64 / 2.0).round_ties_even() as usize;
        let left = ((rw - cw) as f64 / 2.0).round_ties_even() as usize;
        Ok(Geometry { resized: (rw, rh), left, top })
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub use native::*;

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use super::*;
    use image::imageops::{self, FilterType};

    /// Largest image side tokenmix will decode; bigger files are refused before allocation.
    pub const MAX_SIDE: u32 = 16384;

    pub fn load_image(path: &std::path::Path) -> Result<image::RgbImage> {
        let reader = image::ImageReader::open(path).map_err(|e| Error::io(path, e))?.with_guessed_format().map_err(|e| Error::io(path, e))?;
        let mut limits = image::Limits::default();
        limits.max_image_width = Some(MAX_SIDE);
        limits.max_image_height = Some(MAX_SIDE);
        let mut reader = reader;
        reader.limits(limits);
        let img = reader.decode().map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
        if img.width() == 0 || img.height() == 0 {
            return Err(Error::Input(format!("{}: image has zero size", path.display())));
        }
        Ok(img.to_rgb8())
    }

    /// timm eval transform of an RGB image to a CHW float tensor of the model's input size.
    pub fn transform(img: &image::RgbImage, pp: &Preprocess) -> Result<Vec<f32>> {
        pp.validate()?;
        let g = pp.geometry(img.width() as usize, img.height() as usize)?;
        let ((rw, rh), [ch, cw]) = (g.resized, pp.size);
        // PIL's bicubic is Catmull-Rom (a = -0.5) with the support widened when downscaling,
        // which is what `image`'s CatmullRom filter does. One channel: PIL's "L" conversion
        // first, then the resize, as timm's pipeline does it.
        let (top, left) = (g.top, g.left);
        let mut out = vec![0f32; pp.channels * ch * cw];
        if pp.channels == 1 {
            let l = image::GrayImage::from_fn(img.width(), img.height(), |x, y| {
                let [r, g, b] = img.get_pixel(x, y).0;
                image::Luma([pil_l(u32::from_le_bytes([r, g, b, 255]))])
            });
            let resized = imageops::resize(&l, rw as u32, rh as u32, FilterType::CatmullRom);
            for y in 0..ch {
                for x in 0..cw {
                    let v = resized.get_pixel((left + x) as u32, (top + y) as u32).0[0];
                    out[y * cw + x] = (v as f32 / 255.0 - pp.mean[0]) / pp.std[0];
                }
            }
            return Ok(out);
        }
        let resized = imageops::resize(img, rw as u32, rh as u32, FilterType::CatmullRom);
        for y in 0..ch {
            for x in 0..cw {
                let px = resized.get_pixel((left + x) as u32, (top + y) as u32).0;
                {
                    for c in 0..3 {
                        out[(c * ch + y) * cw + x] = (px[c] as f32 / 255.0 - pp.mean[c]) / pp.std[c];
                    }
                }
            }
        }
        Ok(out)
    }
}

/// RGBA8 bytes as one u32 per pixel, box-averaged over k x k blocks first when k > 1
/// (a partial block at the right or bottom edge is dropped).
fn shrink_rgba(rgba: &[u8], width: usize, height: usize, k: usize) -> (Vec<u32>, usize, usize) {
    let word = |p: [u8; 4]| u32::from_le_bytes(p);
    if k <= 1 {
        return (rgba.chunks_exact(4).map(|p| word([p[0], p[1], p[2], p[3]])).collect(), width, height);
    }
    let (sw, sh) = (width / k, height / k);
    let mut out = Vec::with_capacity(sw * sh);
    for y in 0..sh {
        for x in 0..sw {
            let mut acc = [0u32; 4];
            for dy in 0..k {
                let row = ((y * k + dy) * width + x * k) * 4;
                for px in rgba[row..row + 4 * k].chunks_exact(4) {
                    for c in 0..4 {
                        acc[c] += px[c] as u32;
                    }
                }
            }
            let n = (k * k) as u32;
            out.push(word(acc.map(|v| ((v + n / 2) / n) as u8)));
        }
    }
    (out, sw, sh)
}
