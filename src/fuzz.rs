//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the test that replays the inputs
//! they found (`tests/fuzz_regressions.rs`), so both run exactly the same code. Each takes
//! arbitrary bytes; any input must return — no panic, no unbounded allocation, no hang.

use crate::preprocess::Preprocess;

/// The model-file loader up to the GPU: safetensors header and tensor table, duplicate keys,
/// dtypes, metadata JSON, config inference and bounds ([`crate::inspect()`]), then every tensor
/// converted to f32 as an upload would.
pub fn load_weights(data: &[u8]) {
    if let Ok(model) = crate::inspect(data, None) {
        let names: Vec<String> = model.weights.names().map(str::to_string).collect();
        for name in names {
            let _ = model.weights.read(&name);
        }
        let _ = model.arch.widest_activation();
        let _ = model.arch.macs();
        let _ = model.preprocess.geometry(1, 1);
    }
}

/// The CPU half of classifying an image ([`Preprocess::prepare_rgba`]: size and length checks,
/// resize/crop geometry, the taps and the window they read) with fuzzed image sizes, pixel buffers and
/// preprocessing settings (validated first, as a model file's are). Bytes 0-9 choose the
/// sizes and settings, the rest are the pixels.
pub fn preprocess_image(data: &[u8]) {
    if data.len() < 12 {
        return;
    }
    let u16_at = |i: usize| u16::from_le_bytes([data[i], data[i + 1]]) as usize;
    // Sides up to 65535 (past the 32768 limit), so the size checks are exercised too.
    let (width, height) = (u16_at(0), u16_at(2));
    let size = [u16_at(4) % 1024, u16_at(6) % 1024];
    let crop_pct = f64::from(data[8]) / 128.0;
    let channels = if data[9].is_multiple_of(2) { 1 } else { 3 };
    let pp = Preprocess { size, crop_pct, mean: vec![0.5; channels], std: vec![0.25; channels], channels };
    if pp.validate().is_err() {
        return;
    }
    let pixels = &data[10..];
    // The fuzzed bytes as the pixels (usually the wrong length) ...
    let _ = pp.prepare_rgba(pixels, width, height);
    // ... and, when small enough to allocate, a buffer of the right length made from them.
    if data[10].is_multiple_of(2) && width * height <= 1 << 20 {
        let img: Vec<u8> = pixels.iter().copied().cycle().take(width * height * 4).collect();
        if let Ok(win) = pp.prepare_rgba(&img, width, height) {
            assert!(win.width == width && win.height <= height, "a window larger than its image");
            assert!(win.taps_inside(), "taps read outside the window");
            assert_eq!((win.taps.cols.len(), win.taps.rows.len()), (size[1], size[0]), "one tap per output column and row");
        }
    }
}
