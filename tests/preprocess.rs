//! The preprocessing the page uses (`Model::classify_rgba`: `preprocess.wgsl` on the GPU, the
//! same footprint as two 1-D passes on the CPU executor) against the native CPU transform (`preprocess::transform`, the `image` crate's antialiased Catmull-Rom,
//! checked against timm's PIL pipeline by the CLI tests): the same model input from the same
//! pixels, and therefore the same classification.

mod common;

use common::{fixtures, gpu, max_abs_diff};
use tokenmix::{preprocess, Device, Model};

/// Both executors: the WGSL path on the test adapter, and the CPU.
fn executors() -> [Device; 2] {
    [gpu().into(), common::cpu()]
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
    // downscaling by 2.6x and by > 4x (the CPU box pre-shrink path), non-square both ways.
    let default = tokenmix::DEFAULT_MODEL.to_vec();
    let rgb = std::fs::read(fixtures().join("mixer_p4_rgb.safetensors")).unwrap();
    let sample = image::open(concat!(env!("CARGO_MANIFEST_DIR"), "/www/samples/fmnist-0000-boot.png")).unwrap().to_rgb8();
    let cases: Vec<(&[u8], image::RgbImage, f32)> = vec![
        (&default, sample, 1e-6),
        (&rgb, synthetic(11, 9), 2.5 / 255.0 / 0.5),
        (&rgb, synthetic(47, 61), 2.5 / 255.0 / 0.5),
        (&rgb, synthetic(150, 90), 0.0),
    ];
    for ((i, (bytes, img, tol)), dev) in cases.into_iter().enumerate().flat_map(|c| executors().map(move |d| (c.clone(), d))) {
        let model = Model::load(dev, bytes, None).unwrap();
        let want = preprocess::transform(&img, &model.info.preprocess).unwrap();
        let run = pollster::block_on(model.classify_rgba(&rgba_of(&img), img.width() as usize, img.height() as usize, now)).unwrap();
        let diff = max_abs_diff(&run.input, &want);
        eprintln!("case {i} ({}x{}) on {}: max |Δinput| = {diff:.2e}", img.width(), img.height(), model.backend());
        if tol > 0.0 {
            assert!(diff <= tol, "case {i} on {}: the page's preprocessing and the CPU transform differ by {diff}", model.backend());
        } else {
            // The box pre-shrink is a different (coarser) antialiasing than PIL's wide bicubic:
            // close on average, not per pixel.
            let mean = run.input.iter().zip(&want).map(|(a, b)| (a - b).abs()).sum::<f32>() / want.len() as f32;
            assert!(mean < 0.1, "case {i}: mean |Δinput| {mean}");
        }
        // The model input is what the forward pass saw.
        let direct = model.forward_blocking(&run.input).unwrap();
        assert!(max_abs_diff(&direct.logits, &run.output.logits) < 1e-5);
    }
}

#[test]
fn bad_images_are_errors_and_the_model_keeps_working() {
    for dev in executors() {
        bad_images_on(dev);
    }
}

fn bad_images_on(dev: Device) {
    let model = Model::load(dev, tokenmix::DEFAULT_MODEL, None).unwrap();
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
    for dev in executors() {
        stage_energy_on(dev);
    }
}

fn stage_energy_on(dev: Device) {
    // A 4-stage PoolFormer on 64x64: the stage grids are 16, 8, 4 and 2 tokens a side; each
    // token's energy is the L2 norm of its channels, so non-negative and not all zero.
    let bytes = std::fs::read(fixtures().join("poolformer_rgb.safetensors")).unwrap();
    let model = Model::load(dev.clone(), &bytes, Some([64, 64])).unwrap();
    let img = synthetic(80, 64);
    let run = pollster::block_on(model.classify_rgba(&rgba_of(&img), 80, 64, now)).unwrap();
    let grids: Vec<(usize, usize)> = run.stage_energy.iter().map(|(g, _)| *g).collect();
    assert_eq!(grids, vec![(16, 16), (8, 8), (4, 4), (2, 2)]);
    for ((h, w), e) in &run.stage_energy {
        assert_eq!(e.len(), h * w);
        assert!(e.iter().all(|v| v.is_finite() && *v >= 0.0) && e.iter().any(|v| *v > 0.0));
    }
    // The isotropic models have no stages to report.
    let mixer = Model::load(dev, tokenmix::DEFAULT_MODEL, None).unwrap();
    let run = pollster::block_on(mixer.classify_rgba(&[90; 28 * 28 * 4], 28, 28, now)).unwrap();
    assert!(run.stage_energy.is_empty());
}
