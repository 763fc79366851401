//! The preprocessing the page uses (`Model::classify_rgba`: on the WGSL executor
//! `preprocess.wgsl` or the CPU's resampling, `gpu::Resample`; the CPU's on the CPU executor)
//! against the native CLI transform (`preprocess::transform`): the same model input from the
//! same pixels, and therefore the same classification; and all of them against timm's own transform (tests/fixtures/preprocess.json, written by
//! tools/make_preprocess_goldens.py): the resize and crop of 87 cases exactly, the model input
//! of eleven byte for byte (PIL's resampling, done as PIL does it).

mod common;

use common::{fixtures, gpu, max_abs_diff};
use tokenmix::gpu::Resample;
use tokenmix::{preprocess, Device, Model};

/// A way the page classifies an image: an executor and, on the GPU, where it resamples.
type PagePath = (Device, Option<Resample>);

/// The page's three paths: the WGSL executor resampling with `preprocess.wgsl` and on the
/// CPU (both forced, whichever the test adapter's default is), and the CPU executor.
fn page_paths() -> [PagePath; 3] {
    [(gpu().into(), Some(Resample::Gpu)), (gpu().into(), Some(Resample::Cpu)), (common::cpu(), None)]
}

/// `bytes` loaded on `path`'s executor, resampling where it says.
fn load_on(path: &PagePath, bytes: &[u8], img_size: Option<[usize; 2]>) -> Model {
    let mut model = Model::load(path.0.clone(), bytes, img_size).unwrap();
    if let Some(r) = path.1 {
        model.set_resample(r);
    }
    assert_eq!(model.resample(), path.1);
    model
}

fn path_name(model: &Model) -> String {
    match model.resample() {
        Some(r) => format!("gpu, resampled on the {}", r.name()),
        None => model.backend().to_string(),
    }
}

fn now() -> f64 {
    0.0
}

fn rgba_of(img: &image::RgbImage) -> Vec<u8> {
    img.pixels().flat_map(|p| [p.0[0], p.0[1], p.0[2], 255]).collect()
}

/// A smooth-ish colour image with some edges, deterministic.
fn synthetic(w: u32, h: u32) -> image::RgbImage {
    image::RgbImage::from_fn(w, h, |x, y| {
        let v = |a: u32, b: u32| ((a * 37 + b * 11 + (a * b) % 53) % 256) as u8;
        image::Rgb([v(x, y), v(y + 7, x), if (x / 5 + y / 3) % 2 == 0 { 30 } else { 220 }])
    })
}

#[test]
fn gpu_preprocessing_matches_the_cpu_transform() {
    // (fixture, image size): no resize (28x28 grey model on its own samples), upscaling,
    // downscaling by 2.6x, by 8x and by 43x (PIL's filter 4 x 43 taps wide), non-square both
    // ways. Byte for byte on both executors, whatever the scale.
    let default = tokenmix::DEFAULT_MODEL.to_vec();
    let rgb = std::fs::read(fixtures().join("mixer_p4_rgb.safetensors")).unwrap();
    let sample = image::open(concat!(env!("CARGO_MANIFEST_DIR"), "/www/samples/fmnist-0000-boot.png")).unwrap().to_rgb8();
    let cases: Vec<(&[u8], image::RgbImage)> =
        vec![(&default, sample), (&rgb, synthetic(11, 9)), (&rgb, synthetic(47, 61)), (&rgb, synthetic(150, 90)), (&rgb, synthetic(1100, 780))];
    for ((i, (bytes, img)), path) in cases.into_iter().enumerate().flat_map(|c| page_paths().map(move |p| (c.clone(), p))) {
        let model = load_on(&path, bytes, None);
        let want = preprocess::transform(&img, &model.info.preprocess).unwrap();
        let run = pollster::block_on(model.classify_rgba(&rgba_of(&img), img.width() as usize, img.height() as usize, now)).unwrap();
        let diff = max_abs_diff(&run.input, &want);
        eprintln!("case {i} ({}x{}) on {}: max |Δinput| = {diff:.2e}", img.width(), img.height(), path_name(&model));
        assert!(common::within(diff, 1e-6), "case {i} on {}: the page's preprocessing and the CPU transform differ by {diff}", path_name(&model));
        // The model input is what the forward pass saw.
        let direct = model.forward_blocking(&run.input).unwrap();
        assert!(max_abs_diff(&direct.logits, &run.output.logits) < 1e-5);
        // A decoded file's RGB, classified as it is (the page's Blobs, the desktop app): the
        // same input and answer as its RGBA.
        let rgb = pollster::block_on(model.classify_pixels_cancellable(preprocess::Pixels::rgb(&img), now, &tokenmix::Cancel::new())).unwrap();
        assert!(rgb.input == run.input && rgb.output.logits == run.output.logits, "case {i} on {}: RGB and RGBA differ", path_name(&model));
    }
}

/// `preprocess.wgsl` binds an image too large for one binding (over 128 MiB on a WebGPU
/// default) in bands of rows, one horizontal dispatch each: every banding of a window, down to
/// a row per band and bands that do not divide it, gives the CPU's input byte for byte.
#[test]
fn an_image_bound_in_bands_is_resampled_as_a_whole() {
    let gpu = gpu();
    for (channels, (w, h)) in [(3, (301, 233)), (1, (90, 170))] {
        let pp = preprocess::Preprocess::half_normalised(channels, [16, 16]);
        let img = synthetic(w, h);
        let rgba = rgba_of(&img);
        let want = preprocess::transform(&img, &pp).unwrap();
        let out = gpu.storage("input", want.len()).unwrap();
        // As uploaded: RGBA (an ImageData), and packed RGB (a decoded file), whose rows of
        // 3w bytes start mid-word (w odd, and w = 90: 270 bytes) and whose bands do too.
        for window in [pp.prepare_rgba(&rgba, w as usize, h as usize).unwrap(), pp.prepare(preprocess::Pixels::rgb(&img)).unwrap()] {
            assert!(window.height > 16, "a window of {} rows is no test of banding", window.height);
            let bpp = window.bpp;
            for band_rows in [1, 7, window.height - 1, window.height, 10 * window.height] {
                let op = tokenmix::ops::preprocess::window_to_input_in_bands(&gpu, &pp, &window, &out, band_rows).unwrap();
                gpu.run_ops(&[op]).unwrap();
                let got = pollster::block_on(gpu.read_buffer(&out, want.len())).unwrap();
                let diff = max_abs_diff(&got, &want);
                eprintln!(
                    "{w}x{h}, {channels} channel(s), {bpp} bytes a pixel, window {}x{}, bands of {band_rows} rows: max |Δ| {diff:.2e}",
                    window.width, window.height
                );
                assert!(common::within(diff, 1e-6), "{bpp} bytes a pixel, bands of {band_rows} rows: max |Δ| {diff}");
            }
            assert!(tokenmix::ops::preprocess::window_to_input_in_bands(&gpu, &pp, &window, &out, 0).is_err(), "bands of no rows");
        }
    }
}

#[test]
fn bad_images_are_errors_and_the_model_keeps_working() {
    for path in page_paths() {
        bad_images_on(&path);
    }
}

/// A PNG's signature and header chunk, then an empty data chunk (the decoder reads up to it)
/// and its end: the size is all it says, no pixels.
fn png_header_only(w: u32, h: u32) -> Vec<u8> {
    let chunk = |kind: &[u8], data: &[u8]| {
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(data);
        [&(data.len() as u32).to_be_bytes()[..], kind, data, &crc.sum().to_be_bytes()].concat()
    };
    let ihdr = [&w.to_be_bytes()[..], &h.to_be_bytes(), &[8, 2, 0, 0, 0]].concat();
    let empty_zlib = [0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01];
    [&b"\x89PNG\r\n\x1a\n"[..], &chunk(b"IHDR", &ihdr), &chunk(b"IDAT", &empty_zlib), &chunk(b"IEND", &[])].concat()
}

/// Image files take the limits that pixels given to `classify_rgba` take (`check_image_size`),
/// checked from the file's header before a pixel is decoded, in those words: the CLI used to
/// refuse a side over 16384 (a 30000x1 strip, which the page takes) and said only "Image size
/// exceeds limit", for that and for a decompression bomb alike.
#[test]
fn image_files_take_the_size_limits_of_pixels() {
    let dir = common::scratch("preprocess");
    for (w, h) in [(30000, 30000), (100_000, 1), (1, 40000)] {
        let p = dir.path().join(format!("{w}x{h}.png"));
        std::fs::write(&p, png_header_only(w, h)).unwrap();
        let err = preprocess::load_image(&p).expect_err("over the limits").to_string();
        assert!(err.contains(&format!("image is {w}x{h}; tokenmix takes at most")), "{w}x{h}: {err}");
        assert!(preprocess::check_image_size(w as usize, h as usize).is_err());
    }
    // A strip within the limits decodes, as the same pixels do through classify_rgba.
    let strip = dir.path().join("strip.png");
    image::RgbImage::from_fn(30000, 1, |x, _| image::Rgb([(x % 256) as u8, 7, 9])).save(&strip).unwrap();
    assert_eq!(preprocess::load_image(&strip).expect("a 30000x1 strip").dimensions(), (30000, 1));
    assert!(preprocess::check_image_size(30000, 1).is_ok());
}

/// Every format `load_image` reads gives back the pixels it was given (each saved losslessly:
/// WebP's lossless mode, a GIF of fewer than 256 colours, TIFF), whatever the file's name says, as
/// the page does for what the browser decodes; and a format it does not read is said in
/// tokenmix's words (it used to be "The image format Tiff is not supported", or "The file
/// extension `."txt"` was not recognized as an image format").
#[test]
fn every_image_format_read_gives_its_pixels() {
    use image::ImageFormat;
    let dir = common::scratch("preprocess");
    // 12 colours in a 37x23 pattern: few enough for a GIF's palette.
    let img =
        image::RgbImage::from_fn(37, 23, |x, y| image::Rgb([((x / 10) * 60) as u8, ((y / 8) * 100) as u8, if (x + y) % 2 == 0 { 30 } else { 220 }]));
    let formats = [ImageFormat::Png, ImageFormat::WebP, ImageFormat::Gif, ImageFormat::Bmp, ImageFormat::Tiff];
    for format in formats {
        let ext = format.extensions_str()[0];
        assert!(preprocess::IMAGE_EXTENSIONS.contains(&ext), "{ext} is listed for folders");
        for name in [format!("pattern.{ext}"), format!("misnamed-{ext}.png"), format!("noname-{ext}")] {
            let p = dir.path().join(&name);
            img.save_with_format(&p, format).unwrap();
            let got = preprocess::load_image(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(got == img, "{name}: other pixels than were saved");
        }
    }
    // JPEG is lossy: the same size, near the same pixels.
    let p = dir.path().join("pattern.jpg");
    img.save_with_format(&p, ImageFormat::Jpeg).unwrap();
    let got = preprocess::load_image(&p).expect("a JPEG");
    assert_eq!(got.dimensions(), img.dimensions());
    let far = got.as_raw().iter().zip(img.as_raw()).filter(|(a, b)| a.abs_diff(**b) > 64).count();
    assert!(far < got.as_raw().len() / 20, "JPEG: {far} channel values far off");
    // Formats it does not read: an AVIF (its signature, told by content), and a text file.
    let avif = dir.path().join("photo.avif");
    std::fs::write(&avif, b"\0\0\0\x1cftypavif\0\0\0\0mif1").unwrap();
    let err = preprocess::load_image(&avif).expect_err("AVIF is not read").to_string();
    assert!(err.contains("photo.avif: an AVIF image; tokenmix reads PNG, JPEG, WebP, GIF, BMP or TIFF"), "{err}");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"hello").unwrap();
    let err = preprocess::load_image(&text).expect_err("text is not an image").to_string();
    assert!(err.contains("notes.txt: not an image tokenmix reads (PNG, JPEG, WebP, GIF, BMP or TIFF)"), "{err}");
}

/// A reader that takes 40 ms a file and counts the most files read at once.
#[derive(Default)]
struct SlowReads {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl SlowReads {
    fn read(&self, path: &std::path::Path) -> tokenmix::Result<image::RgbImage> {
        use std::sync::atomic::Ordering::SeqCst;
        self.most.fetch_max(self.now.fetch_add(1, SeqCst) + 1, SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(40));
        self.now.fetch_sub(1, SeqCst);
        preprocess::load_image(path)
    }

    fn most(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// `preprocess::Batches`, the reader `classify`, `explain`, `eval` and the desktop app's
/// "Classify all" share: files in batches of the size asked (and at most the model's largest),
/// each read file's input in its place as `transform(load_image)` gives it, an unreadable one
/// as its error in its place with the others read on, and a cancel ending it before the next
/// file is read.
#[test]
fn image_files_are_read_in_batches_each_in_its_place() {
    let dir = common::scratch("batches");
    let model = Model::load(common::cpu(), tokenmix::DEFAULT_MODEL, None).unwrap();
    let mut paths = Vec::new();
    for k in 0..5u32 {
        let p = dir.path().join(format!("{k}.png"));
        if k == 2 {
            std::fs::write(&p, b"not a picture").unwrap();
        } else {
            synthetic(40 + 7 * k, 31 + 3 * k).save(&p).unwrap();
        }
        paths.push(p);
    }
    let want = |p: &std::path::Path| preprocess::transform(&preprocess::load_image(p).unwrap(), &model.info.preprocess).unwrap();
    let n = model.input_len();
    let batches: Vec<_> = preprocess::Batches::new(&model, &paths, 2).collect();
    assert_eq!(batches.iter().map(|b| b.paths.len()).collect::<Vec<_>>(), [2, 2, 1], "batches of 2");
    let mut seen = 0;
    for batch in &batches {
        let read = batch.places.iter().filter(|p| p.is_ok()).count();
        assert_eq!(batch.input.len(), read * n, "one input per image read");
        for (path, place) in batch.paths.iter().zip(&batch.places) {
            assert_eq!(path, &paths[seen], "the files in order");
            seen += 1;
            match place {
                Ok(i) => assert!(batch.input[i * n..(i + 1) * n] == want(path)[..], "{}: another input than its own", path.display()),
                Err(e) => {
                    assert!(path.ends_with("2.png"), "{}: {e}", path.display());
                    assert!(e.to_string().contains("2.png: Format error decoding Png"), "{e}");
                }
            }
        }
    }
    assert_eq!(seen, paths.len());
    assert!(matches!(batches[1].places[..], [Err(_), Ok(0)]), "the image after an unreadable one takes the first place");
    // A size of 0 is 1; one over the model's largest batch is that batch.
    assert_eq!(preprocess::Batches::new(&model, &paths, 0).count(), 5);
    let big = preprocess::Batches::new(&model, &paths, usize::MAX).map(|b| b.paths.len()).max();
    assert_eq!(big, Some(5.min(model.max_batch())));
    // Read with another reader (the CLI's, which reads `-` from standard input).
    let grey = preprocess::Batches::new(&model, &paths[..1], 4)
        .read_with(|_| Ok(image::RgbImage::from_pixel(28, 28, image::Rgb([9, 9, 9]))))
        .next()
        .unwrap();
    assert_eq!(grey.input, preprocess::transform(&image::RgbImage::from_pixel(28, 28, image::Rgb([9, 9, 9])), &model.info.preprocess).unwrap());
    // A batch's files are read at once on rayon's threads (where the pool has several), and
    // still answered in their order.
    let slow_reads = SlowReads::default();
    let slow = preprocess::Batches::new(&model, &paths, 5).read_with(|p| slow_reads.read(p)).next().unwrap();
    assert!(matches!(slow.places[..], [Ok(0), Ok(1), Err(_), Ok(2), Ok(3)]), "in order: {:?}", slow.places);
    let threads = rayon::current_num_threads();
    let most = slow_reads.most();
    assert!(threads < 2 || most >= 2, "{most} file(s) read at a time on a pool of {threads} threads");
    eprintln!("{most} files read at a time on a pool of {threads} threads");
    // On a pool of 12 threads, at most 8 files at a time (each holds its decoded image).
    let many: Vec<_> = paths.iter().cycle().take(20).cloned().collect();
    let slow_reads = SlowReads::default();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(12).build().unwrap();
    let read = pool.install(|| preprocess::Batches::new(&model, &many, 20).read_with(|p| slow_reads.read(p)).map(|b| b.places.len()).sum::<usize>());
    assert_eq!(read, 20);
    let most = slow_reads.most();
    assert!((2..=8).contains(&most), "{most} files read at a time on a pool of 12 threads");
    // Cancelled after the first batch: it ends there; the reads are counted.
    let cancel = tokenmix::Cancel::new();
    let reads = std::sync::atomic::AtomicUsize::new(0);
    let mut it = preprocess::Batches::new(&model, &paths, 2)
        .read_with(|p| {
            reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            preprocess::load_image(p)
        })
        .until(&cancel);
    assert_eq!(it.next().map(|b| b.paths.len()), Some(2));
    cancel.cancel();
    assert!(it.next().is_none(), "cancelled: no more batches");
    assert!(it.next().is_none());
    assert_eq!(reads.load(std::sync::atomic::Ordering::Relaxed), 2, "no file read once cancelled");
}

fn bad_images_on(path: &PagePath) {
    let model = load_on(path, tokenmix::DEFAULT_MODEL, None);
    let run = |rgba: &[u8], w: usize, h: usize| pollster::block_on(model.classify_rgba(rgba, w, h, now));
    assert!(run(&[], 0, 0).is_err(), "zero size");
    assert!(run(&[0; 12], 2, 2).is_err(), "wrong byte count");
    assert!(run(&[], 30000, 30000).is_err(), "30000x30000 is over the pixel limit");
    // 1x1 is a bounded, correct result: PIL upsamples it to a uniform 28x28 too.
    let one = run(&[200, 200, 200, 255], 1, 1).expect("1x1 is upsampled");
    let l = (200.0 / 255.0 - model.info.preprocess.mean[0]) / model.info.preprocess.std[0];
    assert!(one.input.iter().all(|v| (v - l).abs() < 1e-6));
    let ok = run(&[128; 28 * 28 * 4], 28, 28).expect("a good image still classifies");
    assert_eq!(ok.output.classes, 10);
}

#[test]
fn poolformer_reports_each_stage_energy() {
    for path in page_paths() {
        stage_energy_on(&path);
    }
}

fn stage_energy_on(path: &PagePath) {
    // A 4-stage PoolFormer on 64x64: the stage grids are 16, 8, 4 and 2 tokens a side; each
    // token's energy is the L2 norm of its channels, so non-negative and not all zero.
    let bytes = std::fs::read(fixtures().join("poolformer_rgb.safetensors")).unwrap();
    let model = load_on(path, &bytes, Some([64, 64]));
    let img = synthetic(80, 64);
    let run = pollster::block_on(model.classify_rgba(&rgba_of(&img), 80, 64, now)).unwrap();
    let grids: Vec<(usize, usize)> = run.stage_energy.iter().map(|(g, _)| *g).collect();
    assert_eq!(grids, vec![(16, 16), (8, 8), (4, 4), (2, 2)]);
    for ((h, w), e) in &run.stage_energy {
        assert_eq!(e.len(), h * w);
        assert!(e.iter().all(|v| v.is_finite() && *v >= 0.0) && e.iter().any(|v| *v > 0.0));
    }
    // The isotropic models have no stages to report.
    let mixer = load_on(path, tokenmix::DEFAULT_MODEL, None);
    let run = pollster::block_on(mixer.classify_rgba(&[90; 28 * 28 * 4], 28, 28, now)).unwrap();
    assert!(run.stage_energy.is_empty());
}

/// tests/fixtures/preprocess.json: timm's own eval transform (tools/make_preprocess_goldens.py).
fn timm_reference() -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("preprocess.json")).expect("tests/fixtures/preprocess.json");
    serde_json::from_str(&text).expect("the reference parses")
}

fn usizes(v: &serde_json::Value) -> Vec<usize> {
    v.as_array().expect("an array").iter().map(|x| x.as_u64().expect("a whole number") as usize).collect()
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().expect("an array").iter().map(|x| x.as_f64().expect("a number") as f32).collect()
}

/// The resize and centre crop of every case timm's transform was asked about: photos' aspect
/// ratios (640x480 at 224 / 0.875 crops at 58, Python's round half to even), crop_pct whose f32
/// is off (224 / 0.8 is 280), non-square inputs (timm keeps the aspect ratio).
#[test]
fn the_resize_and_crop_are_timms() {
    let reference = timm_reference();
    let cases = reference["geometry"].as_array().expect("geometry cases");
    assert!(cases.len() >= 50, "only {} geometry cases", cases.len());
    let mut wrong = Vec::new();
    for c in cases {
        let (size, image) = (usizes(&c["size"]), usizes(&c["image"]));
        let mut pp = preprocess::Preprocess::half_normalised(3, [size[0], size[1]]);
        pp.crop_pct = c["crop_pct"].as_f64().expect("crop_pct");
        let g = pp.geometry(image[0], image[1]).expect("a geometry");
        let want = (usizes(&c["resized"]), c["left"].as_u64().unwrap() as usize, c["top"].as_u64().unwrap() as usize);
        if (vec![g.resized.0, g.resized.1], g.left, g.top) != want {
            wrong.push(format!("{size:?} / {} on {image:?}: resized {:?} at ({}, {}), timm {want:?}", pp.crop_pct, g.resized, g.left, g.top));
        }
    }
    assert!(wrong.is_empty(), "{} of {} differ from timm:\n{}", wrong.len(), cases.len(), wrong.join("\n"));
}

/// The model input itself, from the same pixels, on all four paths (the CLI's transform, the
/// page's through the CPU executor, and through the WGSL executor resampling on the CPU and
/// with `preprocess.wgsl`) against timm's: the same
/// bytes (PIL's fixed-point resampling, rounded and clipped between its two passes; the
/// reference keeps 7 decimals), where a crop one pixel off is tens of grey levels off here.
/// Downscaling, upscaling, strips, one and three channels; one-channel cases check PIL's "L"
/// conversion, which timm applies before the resize. Among them, images downscaled more than
/// 4x (PIL's filter then spans more than 16 source pixels each way).
#[test]
fn the_model_input_is_timms_on_every_path() {
    let reference = timm_reference();
    let cases = reference["inputs"].as_array().expect("input cases");
    assert!(cases.len() >= 11, "only {} input cases", cases.len());
    let mut failures = Vec::new();
    let (mut checked, mut wide) = (0, 0);
    for (i, c) in cases.iter().enumerate() {
        let (size, image) = (usizes(&c["size"]), usizes(&c["image"]));
        let channels = c["channels"].as_u64().unwrap() as usize;
        let pp = preprocess::Preprocess {
            size: [size[0], size[1]],
            crop_pct: c["crop_pct"].as_f64().unwrap(),
            mean: floats(&c["mean"]),
            std: floats(&c["std"]),
            channels,
        };
        let want = floats(&c["input"]);
        let level = 1.0 / 255.0 / pp.std.iter().fold(f32::INFINITY, |m, &s| m.min(s));
        let img = synthetic(image[0] as u32, image[1] as u32);
        let g = pp.geometry(image[0], image[1]).expect("a usable image");
        wide += (image[0] as f64 / g.resized.0 as f64 > 4.0) as usize;
        let cli = preprocess::transform(&img, &pp).expect("the CLI's transform");
        // A golden fixture of this input shape carries the preprocessing under test.
        let fixture = match (channels, size[0], size[1]) {
            (3, 16, 16) => "mixer_p4_rgb",
            (1, 24, 40) => "mixer_p8_grey_nonsquare",
            (1, 36, 52) => "poolformer_grey_nonsquare_f16",
            (1, 12, 20) => "resmlp_grey_nonsquare",
            other => panic!("no fixture takes a {other:?} input"),
        };
        let bytes = std::fs::read(fixtures().join(format!("{fixture}.safetensors"))).unwrap();
        let mut paths = vec![("cli".to_string(), cli)];
        for path in page_paths() {
            let mut model = load_on(&path, &bytes, None);
            model.info.preprocess = pp.clone();
            let run = pollster::block_on(model.classify_rgba(&rgba_of(&img), image[0], image[1], now)).unwrap();
            paths.push((format!("page, {}", path_name(&model)), run.input));
        }
        for (path, got) in paths {
            let diff = max_abs_diff(&got, &want);
            // Byte for byte: under a millionth (a grey level is 1 / 255 / std).
            eprintln!("case {i} ({channels}x{size:?} / {} from {image:?}) {path}: max|Δ| {diff:.2e} (a grey level {level:.2e})", pp.crop_pct);
            if !common::within(diff, 1e-6) {
                failures.push(format!("case {i} {path}: max |Δ| {diff} > 1e-6"));
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 4 * cases.len());
    assert!(wide > 0, "no case downscales more than 4x");
    assert!(failures.is_empty(), "{}", failures.join("; "));
}
