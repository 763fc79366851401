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

/// The largest model input side (a model file's `img_size`, a preprocessing `size`).
pub const MAX_INPUT_SIDE: usize = 4096;

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
        if self.size[0] == 0 || self.size[1] == 0 || self.size[0] > MAX_INPUT_SIDE || self.size[1] > MAX_INPUT_SIDE {
            return bad(format!("size {:?} is outside 1..={MAX_INPUT_SIDE}", self.size));
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

/// An image's pixels as they are in memory: `height` rows of `width` pixels, `bpp` bytes each
/// (3: RGB, as a file decodes; 4: RGBA, a browser's ImageData), R first, row-major.
#[derive(Clone, Copy, Debug)]
pub struct Pixels<'a> {
    pub bytes: &'a [u8],
    pub width: usize,
    pub height: usize,
    pub bpp: usize,
}

impl<'a> Pixels<'a> {
    pub fn rgba(bytes: &'a [u8], width: usize, height: usize) -> Self {
        Pixels { bytes, width, height, bpp: 4 }
    }

    pub fn rgb(image: &'a image::RgbImage) -> Self {
        Pixels { bytes: image.as_raw(), width: image.width() as usize, height: image.height() as usize, bpp: 3 }
    }
}

/// The rows of an image a resize's crop window reads ([`Preprocess::prepare`]), borrowed, not
/// copied: `pixels` holds `height` whole rows of `width` pixels, `bpp` bytes each (3: RGB, as
/// decoded from a file; 4: RGBA, a browser's ImageData), R first; `taps` resample them, their
/// columns the image's, their rows counted from the window's first.
pub struct Window<'a> {
    pub pixels: &'a [u8],
    pub width: usize,
    pub height: usize,
    pub bpp: usize,
    pub taps: WindowTaps,
}

impl Window<'_> {
    /// Whether the taps read only pixels of the window (they do, made by `prepare`).
    pub fn taps_inside(&self) -> bool {
        let inside = |t: &[Tap], size: usize| t.iter().all(|(start, w)| start + w.len() <= size);
        matches!(self.bpp, 3 | 4)
            && self.pixels.len() == self.width * self.height * self.bpp
            && inside(&self.taps.cols, self.width)
            && inside(&self.taps.rows, self.height)
    }
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
    /// [`Self::prepare`] for an RGBA8 image (a browser ImageData).
    pub fn prepare_rgba<'a>(&self, rgba: &'a [u8], width: usize, height: usize) -> Result<Window<'a>> {
        self.prepare(Pixels::rgba(rgba, width, height))
    }

    /// The CPU half of classifying an image of any size, RGB or RGBA: checks the size and the
    /// byte count, computes the resize and crop and PIL's taps
    /// for the crop window ([`WindowTaps`]), and finds the rows of the image those taps read (a
    /// centre crop reads about crop / resized of them). Both executors resample that [`Window`]
    /// exactly as the CLI does: the CPU with [`Preprocess::window_input`], the GPU with
    /// `preprocess.wgsl`'s two passes, which gets those rows uploaded as they are (RGBA, or
    /// packed RGB).
    pub fn prepare<'a>(&self, image: Pixels<'a>) -> Result<Window<'a>> {
        let Pixels { bytes: pixels, width, height, bpp } = image;
        check_image_size(width, height)?;
        if !matches!(bpp, 3 | 4) {
            return Err(Error::Input(format!("{bpp} bytes a pixel: tokenmix takes RGB (3) or RGBA (4)")));
        }
        if pixels.len() != width * height * bpp {
            let kind = if bpp == 4 { "RGBA" } else { "RGB" };
            return Err(Error::Input(format!(
                "{} bytes of pixels for a {width}x{height} {kind} image (needs {})",
                pixels.len(),
                width * height * bpp
            )));
        }
        let g = self.geometry(width, height)?;
        let mut taps = WindowTaps::new(width, height, &g, self.size)?;
        // At least one row (the taps end within the image: `WindowTaps::new` clamps them).
        let (y0, y1) = tap_span(&taps.rows);
        let y1 = y1.max(y0 + 1);
        for t in &mut taps.rows {
            t.0 -= y0;
        }
        Ok(Window { pixels: &pixels[y0 * width * bpp..y1 * width * bpp], width, height: y1 - y0, bpp, taps })
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

/// The image formats [`load_image`] decodes, in words, and their files' extensions (what a
/// folder given to `classify` contributes). A GIF gives its first frame; alpha is dropped,
/// as PIL's `convert("RGB")` drops it.
pub const IMAGE_FORMATS: &str = "PNG, JPEG, WebP, GIF, BMP or TIFF";
pub const IMAGE_EXTENSIONS: [&str; 8] = ["png", "jpg", "jpeg", "webp", "gif", "bmp", "tif", "tiff"];

/// `path` could not be decoded: said in tokenmix's words where the format is the fault (an
/// AVIF, a text file) rather than the image crate's ("The file extension `."txt"` was not
/// recognized as an image format"); any other decoding error as the crate says it.
fn decode_error(path: &std::path::Path, named: bool, e: image::ImageError) -> Error {
    use image::error::{ImageFormatHint, UnsupportedErrorKind};
    let why = match &e {
        image::ImageError::Unsupported(u) => match u.kind() {
            UnsupportedErrorKind::Format(ImageFormatHint::Exact(format)) => {
                let name = format.extensions_str().first().map_or_else(|| format!("{format:?}"), |x| x.to_uppercase());
                let article = if name.starts_with(['A', 'E', 'I', 'O', 'U']) { "an" } else { "a" };
                format!("{article} {name} image; tokenmix reads {IMAGE_FORMATS}")
            }
            UnsupportedErrorKind::Format(_) if named => {
                format!("not an image tokenmix reads ({IMAGE_FORMATS}): neither its first bytes nor its name say which")
            }
            UnsupportedErrorKind::Format(_) => format!("not an image tokenmix reads ({IMAGE_FORMATS}): its first bytes are none of theirs"),
            _ => e.to_string(),
        },
        _ => e.to_string(),
    };
    Error::Input(format!("{}: {why}", path.display()))
}

/// [`load_image`] for an image already in memory (read from a pipe: `classify -`), told by
/// its content alone; `name` is what its errors call it.
pub fn decode_image(bytes: &[u8], name: &std::path::Path) -> Result<image::RgbImage> {
    decode(image::ImageReader::new(std::io::Cursor::new(bytes)), name, false)
}

/// `named`: whether the image has a file name whose extension may say its format.
fn decode<R: std::io::BufRead + std::io::Seek>(reader: image::ImageReader<R>, path: &std::path::Path, named: bool) -> Result<image::RgbImage> {
    use image::ImageDecoder;
    let mut reader = reader.with_guessed_format().map_err(|e| Error::io(path, e))?;
    // The sides are checked below, with tokenmix's own words; the allocation bound holds the
    // largest image taken, decoded at 16 bits a channel with alpha, and its RGB copy.
    let mut limits = image::Limits::no_limits();
    limits.max_alloc = Some(MAX_IMAGE_PIXELS as u64 * 11);
    reader.limits(limits);
    let bad = |e| decode_error(path, named, e);
    let mut decoder = reader.into_decoder().map_err(bad)?;
    let (w, h) = decoder.dimensions();
    check_image_size(w as usize, h as usize).map_err(|e| match e {
        Error::Input(why) => Error::Input(format!("{}: {why}", path.display())),
        e => e,
    })?;
    // The image as it is shown: a phone's portrait photo is stored sideways with an EXIF
    // orientation (JPEG, also WebP's, PNG's and TIFF's) that every viewer applies, browsers too
    // (`createImageBitmap`'s default, with which the page shows it). Bad or missing EXIF: as
    // stored, as browsers take it.
    let orientation = decoder.orientation().unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut rgb = image::DynamicImage::ImageRgb8(image::DynamicImage::from_decoder(decoder).map_err(bad)?.to_rgb8());
    rgb.apply_orientation(orientation);
    Ok(rgb.into_rgb8())
}

/// timm eval transform of an RGB image to a CHW float tensor of the model's input size:
/// PIL's own resampling ([`WindowTaps`]), computed for the crop window only, so a
/// 1x16384 strip costs what its crop costs, not the 256x4194304 image timm would resize it to.
pub fn transform(img: &image::RgbImage, pp: &Preprocess) -> Result<Vec<f32>> {
    pp.validate()?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    let taps = WindowTaps::new(w, h, &pp.geometry(w, h)?, pp.size)?;
    Ok(pp.window_input(&taps, img.as_raw(), w, 3))
}

#[cfg(not(target_arch = "wasm32"))]
pub use native::*;

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use super::*;

    /// The image files in `dir` and its subfolders (by extension, [`IMAGE_EXTENSIONS`]) into
    /// `found`, the other files into `skipped`, depth first in name order. Hidden entries are
    /// left out, and so are links to folders, so a link back up cannot loop. What a folder
    /// given to `classify`, `eval` or the desktop app stands for.
    pub fn find_images(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>, skipped: &mut Vec<std::path::PathBuf>) -> Result<()> {
        let mut entries = std::fs::read_dir(dir).and_then(|d| d.collect::<std::io::Result<Vec<_>>>()).map_err(|e| Error::io(dir, e))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
            if kind.is_dir() {
                find_images(&path, found, skipped)?;
            } else if kind.is_symlink() && path.is_dir() {
                // A link to a folder is not followed (it may lead back up).
            } else if is_image_name(&path) {
                found.push(path);
            } else {
                skipped.push(path);
            }
        }
        Ok(())
    }

    /// The error for a folder given as images that holds none ([`find_images`] found nothing).
    pub fn no_images_in(dir: &std::path::Path) -> Error {
        Error::Input(format!("{}: a folder with no image in it ({IMAGE_FORMATS}, by extension)", dir.display()))
    }

    /// Whether `path`'s extension is an image format's ([`IMAGE_EXTENSIONS`], any case).
    pub fn is_image_name(path: &std::path::Path) -> bool {
        path.extension().and_then(|x| x.to_str()).is_some_and(|x| IMAGE_EXTENSIONS.iter().any(|i| x.eq_ignore_ascii_case(i)))
    }

    /// Decodes an image file (`IMAGE_FORMATS`, told by content, else by extension) to RGB,
    /// turned upright as its EXIF orientation says. An image larger than classification takes ([`check_image_size`]: the limits the page, the
    /// desktop app and `Model::classify_rgba` apply) is refused from its header, before a pixel
    /// is decoded.
    ///
    /// A file that is no regular file (a pipe or FIFO: `tokenmix classify <(curl …)`, a
    /// device) cannot seek back to be read twice: it is read first, up to
    /// [`MAX_IMAGE_FILE_BYTES`], then decoded from memory. It was "Illegal seek".
    pub fn load_image(path: &std::path::Path) -> Result<image::RgbImage> {
        /// `path`'s image read from `inner`, its format told by its name where its first bytes
        /// do not tell (as `ImageReader::open` does).
        fn named<R: std::io::BufRead + std::io::Seek>(inner: R, path: &std::path::Path) -> Result<image::RgbImage> {
            let mut reader = image::ImageReader::new(inner);
            if let Ok(f) = image::ImageFormat::from_path(path) {
                reader.set_format(f);
            }
            decode(reader, path, true)
        }
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        if file.metadata().map_err(|e| Error::io(path, e))?.is_file() {
            return named(std::io::BufReader::new(file), path);
        }
        let Some(bytes) = crate::file::read_at_most(file, MAX_IMAGE_FILE_BYTES, 0, path)? else {
            return Err(Error::Input(format!("{}: more than {} MiB came; no image taken is that large", path.display(), MAX_IMAGE_FILE_BYTES >> 20)));
        };
        named(std::io::Cursor::new(bytes), path)
    }

    /// The most bytes of an image read whole before it is decoded (from a pipe, a FIFO,
    /// standard input): more than any image taken needs (a [`MAX_IMAGE_PIXELS`] BMP with alpha
    /// is 256 MiB), and a stream that never ends is not read to the end of memory.
    pub const MAX_IMAGE_FILE_BYTES: u64 = 512 << 20;

    /// Image files read and transformed for a model a batch at a time, as `tokenmix classify`,
    /// `explain` and `eval` and the desktop app's "Classify all" read a folder: at most `size`
    /// images (and the model's largest batch) in memory at once, so a folder of thousands is
    /// never all read. An image that does not read is its batch's error in its place; the
    /// others are read on. A batch's files are read and transformed in parallel, up to 8 at a
    /// time, on rayon's pool (the CPU executor's, idle between forward passes): decoding a
    /// folder of photos takes most of its time.
    ///
    /// Each [`Batch`] holds its files, their model input one image after another, and per
    /// file its image's place in that input or its error: run the model on the input (where an
    /// image read), then answer each file from its place.
    pub struct Batches<'a> {
        pp: &'a Preprocess,
        input_len: usize,
        paths: &'a [std::path::PathBuf],
        size: usize,
        cancel: Option<&'a crate::Cancel>,
        read: Box<Reader<'a>>,
    }

    /// The most files [`Batches`] reads at once: each holds its decoded image (up to
    /// [`MAX_IMAGE_PIXELS`]) until it is transformed.
    const READ_AT_ONCE: usize = 8;

    /// How [`Batches`] reads a file (on any of rayon's threads).
    type Reader<'a> = dyn Fn(&std::path::Path) -> Result<image::RgbImage> + Sync + 'a;

    /// One batch of [`Batches`].
    pub struct Batch<'a> {
        /// The batch's files, in order.
        pub paths: &'a [std::path::PathBuf],
        /// The model input of the files that read, one image after another.
        pub input: Vec<f32>,
        /// Per file: its image's place in `input` (in images), or why it did not read.
        pub places: Vec<Result<usize>>,
    }

    impl<'a> Batches<'a> {
        /// `paths` read with [`load_image`] and transformed by `model`'s preprocessing, `size`
        /// (at least 1, at most [`crate::Model::max_batch`]) at a time.
        pub fn new(model: &'a crate::Model, paths: &'a [std::path::PathBuf], size: usize) -> Batches<'a> {
            Batches {
                pp: &model.info.preprocess,
                input_len: model.input_len(),
                paths,
                size: size.min(model.max_batch()).max(1),
                cancel: None,
                read: Box::new(load_image),
            }
        }

        /// Reads each file with `read` instead of [`load_image`] (the CLI: `-` is standard
        /// input).
        pub fn read_with(self, read: impl Fn(&std::path::Path) -> Result<image::RgbImage> + Sync + 'a) -> Batches<'a> {
            Batches { read: Box::new(read), ..self }
        }

        /// Ends once `cancel` is set, checked before each file is read: the batch under way is
        /// let go, its files not yet read left unread.
        pub fn until(self, cancel: &'a crate::Cancel) -> Batches<'a> {
            Batches { cancel: Some(cancel), ..self }
        }
    }

    impl<'a> Iterator for Batches<'a> {
        type Item = Batch<'a>;

        fn next(&mut self) -> Option<Batch<'a>> {
            if self.paths.is_empty() {
                return None;
            }
            let (paths, rest) = self.paths.split_at(self.size.min(self.paths.len()));
            self.paths = rest;
            use rayon::prelude::*;
            let cancelled = || self.cancel.is_some_and(|c| c.is_cancelled());
            // Each file's input, in order; None once cancelled. At most READ_AT_ONCE files (and
            // the pool's threads) at a time: each holds its decoded image until transformed.
            let mut read: Vec<Option<Result<Vec<f32>>>> = Vec::with_capacity(paths.len());
            for wave in paths.chunks(rayon::current_num_threads().clamp(1, READ_AT_ONCE)) {
                read.par_extend(wave.par_iter().map(|path| match cancelled() {
                    true => None,
                    false => Some((self.read)(path).and_then(|img| transform(&img, self.pp))),
                }));
            }
            if cancelled() {
                self.paths = &[];
                return None;
            }
            let mut input = Vec::with_capacity(paths.len() * self.input_len);
            let mut places = Vec::with_capacity(paths.len());
            for x in read.into_iter().flatten() {
                match x {
                    Ok(x) => {
                        places.push(Ok(input.len() / self.input_len.max(1)));
                        input.extend(x);
                    }
                    Err(e) => places.push(Err(e)),
                }
            }
            Some(Batch { paths, input, places })
        }
    }
}

/// Fixed-point bits of PIL's 8-bit resampling weights (`Resample.c`: 32 - 8 - 2).
pub const PIL_PRECISION_BITS: u32 = 22;

/// PIL's bicubic filter (Keys, a = -0.5), support 2.
fn pil_bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// One output sample of a 1-D resampling pass: the first input sample it reads and the
/// fixed-point weights of it and the ones after it.
pub type Tap = (usize, Vec<i32>);

/// PIL's `precompute_coeffs` + `normalize_coeffs_8bpc` for the outputs `range` of a resize of
/// `in_size` samples to `out_size`: the filter widened by the scale when downscaling (so it
/// antialiases), the weights normalised to sum to 1 and rounded half away from zero to
/// [`PIL_PRECISION_BITS`]. A pass that keeps the size has the weights (1) exactly, so doing it
/// is the same as PIL's skipping it.
fn pil_taps(in_size: usize, out_size: usize, range: std::ops::Range<usize>) -> Vec<Tap> {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = 2.0 * filterscale;
    // Multiplied by its inverse, as PIL does (dividing can differ in the last bit).
    let ss = 1.0 / filterscale;
    range
        .map(|xx| {
            let center = (xx as f64 + 0.5) * scale;
            // C's (int) truncates toward zero; a negative start is clamped to 0 either way.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).clamp(xmin as i64, in_size as i64) as usize;
            let w: Vec<f64> = (xmin..xmax).map(|x| pil_bicubic((x as f64 - center + 0.5) * ss)).collect();
            let sum: f64 = w.iter().sum();
            let one = (1u32 << PIL_PRECISION_BITS) as f64;
            let fixed = w
                .iter()
                .map(|&k| {
                    let k = if sum != 0.0 { k / sum } else { k } * one;
                    (if k < 0.0 { k - 0.5 } else { k + 0.5 }) as i32
                })
                .collect();
            (xmin, fixed)
        })
        .collect()
}

/// PIL's resampling of the window of a resize that a centre crop keeps: per output column and
/// per output row, the [`Tap`] of the horizontal and of the vertical pass.
pub struct WindowTaps {
    pub cols: Vec<Tap>,
    pub rows: Vec<Tap>,
}

impl WindowTaps {
    /// The taps that make the `[height, width]` = `crop` window at (`g.left`, `g.top`) of the
    /// resize of a `src_w` x `src_h` image to `g.resized`; an error when the window is empty or
    /// not inside the resized image (a [`Geometry`] made by hand).
    pub fn new(src_w: usize, src_h: usize, g: &Geometry, crop: [usize; 2]) -> Result<WindowTaps> {
        let (rw, rh) = g.resized;
        let inside = |start: usize, len: usize, size: usize| start.checked_add(len).is_some_and(|end| end <= size);
        if src_w == 0 || src_h == 0 || crop.contains(&0) || !inside(g.left, crop[1], rw) || !inside(g.top, crop[0], rh) {
            return Err(Error::Input(format!(
                "a {}x{} crop at ({}, {}) of a {src_w}x{src_h} image resized to {rw}x{rh} is not inside it",
                crop[1], crop[0], g.left, g.top
            )));
        }
        Ok(WindowTaps { cols: pil_taps(src_w, rw, g.left..g.left + crop[1]), rows: pil_taps(src_h, rh, g.top..g.top + crop[0]) })
    }

    /// The taps as one table for `preprocess.wgsl`: (first sample, count, offset of the
    /// weights in this table) for each column, then for each row, then the weights.
    pub fn table(&self) -> Vec<i32> {
        let taps = || self.cols.iter().chain(&self.rows);
        let mut offset = 3 * (self.cols.len() + self.rows.len());
        let mut table = Vec::with_capacity(offset + taps().map(|t| t.1.len()).sum::<usize>());
        for (start, w) in taps() {
            table.extend([*start as i32, w.len() as i32, offset as i32]);
            offset += w.len();
        }
        taps().for_each(|t| table.extend(&t.1));
        table
    }

    /// The window, byte for byte what PIL's `Image.resize(resized, BICUBIC)` makes there:
    /// its horizontal pass, rounded and clipped to 8 bits, over the source rows the vertical
    /// pass reads, then the vertical pass, rounded and clipped again. The source's pixel
    /// (x, y) is the `bpp` bytes at `(y * width + x) * bpp` of `bytes`, R, G and B first;
    /// `grey`: PIL's "L" of each pixel is resampled (as timm converts before the resize), else
    /// its RGB. Row-major, 1 or 3 bytes per pixel.
    ///
    /// As PIL computes it, in 32-bit sums (|sum| stays under 2^31: 255 times the weights'
    /// absolute sum, which is under 1.2 × 2^22 for the bicubic), each pass a run of dot
    /// products over contiguous bytes: a source row is unpacked once into a plane per channel.
    pub fn resample(&self, grey: bool, bytes: &[u8], width: usize, bpp: usize) -> Vec<u8> {
        let ch = if grey { 1 } else { 3 };
        let (ow, oh) = (self.cols.len(), self.rows.len());
        let ((x0, x1), (y0, y1)) = (tap_span(&self.cols), tap_span(&self.rows));
        let n = x1 - x0;
        let mut line = vec![0u8; n * ch];
        // The horizontal pass's rows, a plane per channel in each: mid[row][c][ox].
        let mut mid = vec![0u8; (y1 - y0) * ow * ch];
        for (y, m) in (y0..y1).zip(mid.chunks_exact_mut(ow * ch)) {
            let row = &bytes[(y * width + x0) * bpp..(y * width + x1) * bpp];
            if grey {
                for (l, p) in line.iter_mut().zip(row.chunks_exact(bpp)) {
                    *l = pil_l(u32::from_le_bytes([p[0], p[1], p[2], 0]));
                }
            } else {
                let (r, gb) = line.split_at_mut(n);
                let (g, b) = gb.split_at_mut(n);
                for (x, p) in row.chunks_exact(bpp).enumerate() {
                    (r[x], g[x], b[x]) = (p[0], p[1], p[2]);
                }
            }
            for (plane, m) in line.chunks_exact(n.max(1)).zip(m.chunks_exact_mut(ow)) {
                for ((start, w), out) in self.cols.iter().zip(m.iter_mut()) {
                    *out = clip8(dot(&plane[start - x0..][..w.len()], w));
                }
            }
        }
        let mut out = vec![0u8; ow * oh * ch];
        let mut acc = vec![0i32; ow * ch];
        for ((start, w), o) in self.rows.iter().zip(out.chunks_exact_mut(ow * ch)) {
            acc.fill(1 << (PIL_PRECISION_BITS - 1));
            for (j, &k) in w.iter().enumerate() {
                let r = &mid[(start + j - y0) * ow * ch..][..ow * ch];
                acc.iter_mut().zip(r).for_each(|(a, &v)| *a += v as i32 * k);
            }
            for (i, px) in o.chunks_exact_mut(ch).enumerate() {
                for (c, v) in px.iter_mut().enumerate() {
                    *v = clip8(acc[c * ow + i]);
                }
            }
        }
        out
    }
}

/// The source samples `taps` read, as (first, end); end ≥ first.
fn tap_span(taps: &[Tap]) -> (usize, usize) {
    let first = taps.iter().map(|t| t.0).min().unwrap_or(0);
    (first, taps.iter().map(|t| t.0 + t.1.len()).max().unwrap_or(first).max(first))
}

/// RGB8 bytes as RGBA8, alpha 255.
pub fn rgba_from_rgb(rgb: &[u8]) -> Vec<u8> {
    rgb.chunks_exact(3).flat_map(|p| [p[0], p[1], p[2], 255]).collect()
}

/// A PIL pass's sum for one output: half a unit plus the weighted samples.
fn dot(samples: &[u8], weights: &[i32]) -> i32 {
    samples.iter().zip(weights).fold(1 << (PIL_PRECISION_BITS - 1), |acc, (&v, &w)| acc + v as i32 * w)
}

/// PIL's `clip8`: a fixed-point sum back to a byte.
fn clip8(sum: i32) -> u8 {
    (sum >> PIL_PRECISION_BITS).clamp(0, 255) as u8
}

impl Preprocess {
    /// The model input (CHW, normalised) of the crop window `taps` resamples from an image
    /// whose pixel (x, y) is the `bpp` bytes at `(y * width + x) * bpp` of `pixels`, R, G and B
    /// first ([`WindowTaps::resample`]): the resize of the CLI (RGB) and of the CPU executor's
    /// page path (RGBA). One channel: PIL's "L" of each source
    /// pixel, before the resize, as timm's pipeline converts first.
    pub fn window_input(&self, taps: &WindowTaps, pixels: &[u8], width: usize, bpp: usize) -> Vec<f32> {
        let bytes = taps.resample(self.channels == 1, pixels, width, bpp);
        let plane = bytes.len() / self.channels;
        let mut out = vec![0f32; bytes.len()];
        for (i, px) in bytes.chunks_exact(self.channels).enumerate() {
            for (c, &v) in px.iter().enumerate() {
                out[c * plane + i] = (v as f32 / 255.0 - self.mean[c]) / self.std[c];
            }
        }
        out
    }
}
