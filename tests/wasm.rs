//! The wasm build in a real browser: golden logits of every family through the WebAssembly
//! core, on the browser's WebGPU adapter (headless Chromium, SwiftShader) and on the
//! WebAssembly SIMD CPU executor, agree with timm within the golden tolerance — and so do the
//! per-token class evidence maps (`Model::explain`). Run by
//! `make test-wasm` (wasm-bindgen-test-runner + chromedriver) twice: the one-thread build on
//! the page, and the threaded build (`threads`: the CPU executor on rayon's pool of Web
//! Workers) in a dedicated worker.
#![cfg(target_arch = "wasm32")]

use std::sync::Arc;

use tokenmix::gpu::{GemmVariant, RowKernel};
use tokenmix::{Device, Gpu, Model};
use wasm_bindgen_test::*;

// The threaded build (`make test-wasm`'s second run, feature `threads`) runs in a dedicated
// worker: rayon's work is waited for with Atomics.wait, which a page's own thread may not call.
#[cfg(not(feature = "threads"))]
wasm_bindgen_test_configure!(run_in_browser);
#[cfg(feature = "threads")]
wasm_bindgen_test_configure!(run_in_dedicated_worker);

/// How many threads the CPU executor gets in the threaded build.
#[cfg(feature = "threads")]
const THREADS: usize = 2;

/// In the threaded build, starts rayon's pool on [`THREADS`] Web Workers (once: later calls
/// find it running), makes the executor split all it can over it, and checks that it sees the
/// pool; in the other build, checks that it runs on one thread. Each test calls it first:
/// anything that asks rayon for its pool before (`Cpu::new`, a parallel loop) makes the
/// calling thread the whole pool for good.
async fn pool() {
    #[cfg(feature = "threads")]
    {
        thread_local!(static STARTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
        if !STARTED.replace(true) {
            wasm_bindgen_futures::JsFuture::from(tokenmix::web::init_thread_pool(THREADS)).await.expect("rayon's pool starts");
            // The golden models are small: without this most of their loops and GEMMs would
            // stay on one thread (e2e `n` runs a full-size Mixer at the shipped thresholds).
            tokenmix::exec::cpu::split_everything();
        }
        assert_eq!(tokenmix::Cpu::new().threads, THREADS, "the threaded build runs on its pool");
    }
    #[cfg(not(feature = "threads"))]
    assert_eq!(tokenmix::Cpu::new().threads, 1);
}

macro_rules! fixture {
    ($name:literal) => {
        (
            $name,
            &include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/", $name, ".safetensors"))[..],
            &include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/", $name, ".io.safetensors"))[..],
            &include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/", $name, ".explain.safetensors"))[..],
        )
    };
}

fn tensor(bytes: &[u8], name: &str) -> (Vec<usize>, Vec<f32>) {
    let st = safetensors::SafeTensors::deserialize(bytes).expect("fixture parses");
    let t = st.tensor(name).expect("fixture tensor");
    (t.shape().to_vec(), t.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

/// max|a - b| as tests/common's `max_abs_diff` computes it (NaN if any difference is NaN:
/// `f32::max` would skip it), or infinity when the lengths differ (a zip alone would let a
/// short output pass); that module is native-only.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter().zip(b).fold(0f32, |m, (x, y)| {
        let d = (x - y).abs();
        if d > m || d.is_nan() {
            d
        } else {
            m
        }
    })
}

/// The golden fixtures the wasm tests run: (name, weights, timm's input and logits, timm's
/// per-token evidence).
fn goldens() -> [(&'static str, &'static [u8], &'static [u8], &'static [u8]); 6] {
    [
        fixture!("mixer_p8_grey_nonsquare"),
        fixture!("mixer_p4_d64"),
        fixture!("gmlp_grey_nonsquare_f16"),
        fixture!("gmlp_d64_small_gate"),
        fixture!("resmlp_p4_bf16"),
        fixture!("poolformer_grey_nonsquare_f16"),
    ]
}

/// The golden fixtures through one executor, each against timm's logits.
async fn goldens_on(device: Device) {
    web_sys::console::log_1(&format!("executor: {} ({})", device.describe(), device.kernels()).into());
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, weights, io, explain) in goldens() {
        let (shape, input) = tensor(io, "input");
        let (_, expected) = tensor(io, "logits");
        let model = Model::load(device.clone(), weights, Some([shape[2], shape[3]])).expect("fixture loads");
        let out = model.forward(&input).await.expect("forward");
        let diff = max_diff(&out.logits, &expected);
        let bound = 1e-4 * expected.iter().fold(1f32, |m, v| m.max(v.abs()));
        web_sys::console::log_1(&format!("{name} [wasm, {}]: max|Δlogit| = {diff:.2e} (bound {bound:.1e})", device.label()).into());
        if !(diff <= bound) {
            failures.push(format!("{name}: {diff} > {bound}"));
        }
        // The per-token class evidence against timm's (tools/make_goldens.py --explain).
        let (_, evidence) = tensor(explain, "evidence");
        let ex = model.explain(&input).await.expect("explain");
        let map_diff = max_diff(&ex.maps, &evidence);
        let map_bound = 1e-4 * evidence.iter().fold(1f32, |m, v| m.max(v.abs()));
        web_sys::console::log_1(&format!("{name} [wasm, {}]: max|Δevidence| = {map_diff:.2e} (bound {map_bound:.1e})", device.label()).into());
        if ex.maps.len() != evidence.len() || !(map_diff <= map_bound) {
            failures.push(format!("{name} evidence: {map_diff} > {map_bound}"));
        }
        checked += 1;
    }
    assert_eq!(checked, 6);
    assert!(failures.is_empty(), "{}", failures.join("; "));
}

/// The WGSL path on the browser's WebGPU adapter (SwiftShader in CI), forced.
#[wasm_bindgen_test]
async fn golden_logits_match_timm_in_the_browser() {
    pool().await;
    let gpu = Arc::new(Gpu::new().await.expect("a WebGPU adapter"));
    goldens_on(Device::Gpu(gpu)).await;
}

/// The same with one workgroup per row (`RowKernel::Workgroup`, the browser's default on
/// hardware GPUs; SwiftShader's own is one invocation per row): the row kernels' barriers and
/// reductions through the browser's WGSL compiler and its uniformity analysis.
#[wasm_bindgen_test]
async fn golden_logits_match_timm_in_the_browser_with_a_workgroup_per_row() {
    pool().await;
    let mut gpu = Gpu::new().await.expect("a WebGPU adapter");
    assert_ne!(gpu.rows, RowKernel::Workgroup, "SwiftShader's default already; this test would repeat the one above");
    gpu.rows = RowKernel::Workgroup;
    goldens_on(Device::Gpu(Arc::new(gpu))).await;
}

/// The tiled GEMM kernels, which a browser on a hardware GPU runs (its default, and the
/// autotuner's candidates there), through the browser's WGSL compiler: SwiftShader's own
/// default is `register`, so without this none of them would reach it. Every one the adapter
/// supports (`tiled128k16` needs 32 KiB of workgroup memory; the others must run), each with a
/// workgroup per row, as on a hardware GPU. In the one-thread build only: the threaded build's
/// WGSL is the same, and each kernel takes SwiftShader about 30 s.
#[cfg(not(feature = "threads"))]
#[wasm_bindgen_test]
async fn golden_logits_match_timm_in_the_browser_on_every_tiled_kernel() {
    pool().await;
    let mut ran = Vec::new();
    for v in [GemmVariant::Tiled, GemmVariant::Tiled128, GemmVariant::Tiled128K16, GemmVariant::Tiled32, GemmVariant::SplitK] {
        let mut gpu = Gpu::new().await.expect("a WebGPU adapter");
        if let Err(why) = gpu.supports(v) {
            web_sys::console::log_1(&format!("{}: not on this adapter: {why}", v.name()).into());
            assert_eq!(v, GemmVariant::Tiled128K16, "{why}");
            continue;
        }
        gpu.fix_gemm(v);
        gpu.rows = RowKernel::Workgroup;
        goldens_on(Device::Gpu(Arc::new(gpu))).await;
        ran.push(v.name());
    }
    assert!(ran.len() >= 4, "ran {ran:?}");
}

/// A device lost under a model (`device.destroy()`, as a driver reset or a removed GPU would)
/// fails the next forward pass with the "GPU device lost" message that makes the page offer a
/// reload, even when the pass's read-back fails before the browser has run the device's lost
/// callback (it comes on a later task); the model's CPU twin on the same weights is unaffected.
#[wasm_bindgen_test]
async fn a_lost_device_is_reported_as_lost() {
    pool().await;
    let gpu = Arc::new(Gpu::new().await.expect("a WebGPU adapter"));
    let (_, weights, io, _) = fixture!("mixer_p4_d64");
    let (shape, input) = tensor(io, "input");
    let model = Model::load(Device::Gpu(gpu.clone()), weights, Some([shape[2], shape[3]])).expect("fixture loads");
    let before = model.forward(&input).await.expect("forward before the loss");
    gpu.device.destroy();
    // No waiting here: the forward pass is queued at once, before the lost callback can run.
    let err = model.forward(&input).await.err().expect("a forward pass on a destroyed device fails").to_string();
    web_sys::console::log_1(&format!("forward after destroy(): {err}").into());
    assert!(err.contains(tokenmix::gpu::DEVICE_LOST), "the error says the device is lost: {err}");
    let again = model.forward(&input).await.err().expect("and so does every later one").to_string();
    assert!(again.contains(tokenmix::gpu::DEVICE_LOST), "{again}");
    let cpu = Model::load(Device::cpu(), weights, Some([shape[2], shape[3]])).expect("fixture loads");
    let twin = cpu.forward(&input).await.expect("the CPU executor still runs");
    let diff = max_diff(&before.logits, &twin.logits);
    assert!(diff <= 1e-4, "the GPU's answer before the loss was right: {diff}");
}

/// The CPU executor compiled to WebAssembly (simd128).
#[wasm_bindgen_test]
async fn golden_logits_match_timm_on_the_wasm_cpu_backend() {
    pool().await;
    goldens_on(Device::cpu()).await;
}

/// A CPU pass in slices as the one-thread build runs it, here with a pause after every step and
/// every 8-column block of every GEMM (`Slices::gemm_macs` 1): the same bits as one run, logits
/// and per-token split, on every golden fixture. (Natively the `gemm` crate's blocking depends
/// on a product's size, so tests/golden.rs can check it only within the golden tolerance.)
#[cfg(not(feature = "threads"))]
#[wasm_bindgen_test]
async fn a_cpu_pass_in_slices_of_gemm_blocks_gives_the_same_bits_in_wasm() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    pool().await;
    static PAUSES: AtomicUsize = AtomicUsize::new(0);
    let every_block = tokenmix::exec::cpu::Slices {
        every_ms: 0.0,
        clock: || 0.0,
        pause: || {
            PAUSES.fetch_add(1, Ordering::SeqCst);
            Box::pin(std::future::ready(()))
        },
        gemm_macs: 1,
    };
    let mut checked = 0;
    for (name, weights, io, _) in goldens() {
        let (shape, input) = tensor(io, "input");
        let size = Some([shape[2], shape[3]]);
        let plain = Model::load(Device::cpu(), weights, size).expect("fixture loads");
        let mut sliced = Model::load(Device::cpu(), weights, size).expect("fixture loads");
        sliced.run_in_slices(Some(every_block));
        let before = PAUSES.load(Ordering::SeqCst);
        let (a, b) = (plain.forward(&input).await.expect("forward"), sliced.forward(&input).await.expect("forward in slices"));
        let pauses = PAUSES.load(Ordering::SeqCst) - before;
        assert_eq!(a.logits, b.logits, "{name}: the logits in slices of GEMM blocks");
        let one = &input[..plain.input_len()];
        let (a, b) = (plain.explain(one).await.expect("explain"), sliced.explain(one).await.expect("explain in slices"));
        assert_eq!((a.maps, a.bias), (b.maps, b.bias), "{name}: the per-token split in slices of GEMM blocks");
        web_sys::console::log_1(&format!("{name} [wasm, cpu]: the same bits in slices of GEMM blocks ({pauses} pauses a pass)").into());
        assert!(pauses > 20, "{name}: {pauses} pauses");
        checked += 1;
    }
    assert_eq!(checked, 6);
}

/// The wasm CPU executor's GEMM (`exec/gemm128.rs`, simd128 intrinsics) against an f64
/// reference, in both layouts the executor uses, at shapes that cut its 4×8 register tiles and
/// its 64-row, 256-deep and 512-column blocks (the goldens' small models reach few of them).
/// In the threaded build every shape wider than one 8-column panel is split by columns.
#[wasm_bindgen_test]
async fn cpu_gemm_matches_an_f64_reference_in_wasm() {
    pool().await;
    use tokenmix::exec::cpu::{linear, weight_times};
    let value = |i: usize| ((i * 7919 + 13) % 2003) as f32 / 1001.5 - 1.0;
    let mut checked = 0;
    for (m, k, n) in [(1, 1, 1), (3, 5, 7), (4, 256, 8), (5, 257, 9), (65, 300, 513), (196, 64, 33), (7, 513, 1030)] {
        let a: Vec<f32> = (0..m * k).map(value).collect();
        let b: Vec<f32> = (0..k * n).map(|i| value(i + 101)).collect();
        // C = A · Bᵀ with B as [n, k] (a Linear layer's weight), then C = A · B with B as [k, n]
        // (token mixing: the weight times the activations); B's (row, column) strides as read.
        type Gemm = fn(usize, usize, usize, &[f32], &[f32], &mut [f32]) -> tokenmix::Result<()>;
        for (name, gemm, (rs, cs)) in [("linear", linear as Gemm, (1, k)), ("weight_times", weight_times as Gemm, (n, 1))] {
            let mut c = vec![f32::NAN; m * n];
            gemm(m, k, n, &a, &b, &mut c).expect("extents fit");
            let tol = 1e-6 * (k as f64 + 1.0);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k).map(|p| a[i * k + p] as f64 * b[p * rs + j * cs] as f64).sum();
                    assert!((c[i * n + j] as f64 - want).abs() <= tol, "{name} {m}x{k}x{n}: C[{i},{j}] {} vs {want}", c[i * n + j]);
                }
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 7);
    web_sys::console::log_1(
        &format!(
            "wasm CPU GEMM ({}, {} threads): {checked} shapes in 2 layouts within 1e-6·(k+1) of f64",
            tokenmix::exec::cpu::GEMM_NAME,
            tokenmix::Cpu::new().threads
        )
        .into(),
    );
}

/// An options object for the browser API's `loadModel`.
fn options(pairs: &[(&str, wasm_bindgen::JsValue)]) -> wasm_bindgen::JsValue {
    let o = js_sys::Object::new();
    for (k, v) in pairs {
        js_sys::Reflect::set(&o, &(*k).into(), v).expect("a plain object takes a property");
    }
    o.into()
}

/// The message of a rejected export (a `JsError` is a JavaScript `Error`).
fn message(e: wasm_bindgen::JsError) -> String {
    use wasm_bindgen::JsCast;
    let v: wasm_bindgen::JsValue = e.into();
    v.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message())).unwrap_or_else(|| format!("{v:?}"))
}

fn sample_image() -> web_sys::ImageData {
    pattern_image(7)
}

/// A 40×30 ImageData of a pattern set by `seed`.
fn pattern_image(seed: usize) -> web_sys::ImageData {
    let mut px = vec![0u8; 40 * 30 * 4];
    for (i, p) in px.chunks_exact_mut(4).enumerate() {
        p.copy_from_slice(&[(i * seed) as u8, (i * 13) as u8, (i * 3) as u8, 255]);
    }
    // Through a JS array: the threaded build's memory is shared, which ImageData refuses.
    let data = js_sys::Uint8ClampedArray::new_with_length(px.len() as u32);
    data.copy_from(&px);
    web_sys::ImageData::new_with_js_u8_clamped_array_and_sh(&data, 40, 30).expect("an ImageData")
}

/// `decodeImage`, through which the package decodes a Blob: an image file's pixels as the CLI
/// decodes them (`preprocess::decode_image`), alpha 255 and a transparent pixel's colour kept,
/// in an ImageData of its own (still right after more decodes and allocations: one first made
/// on a view of wasm memory read it after it was freed); null for a format tokenmix does not
/// read, so the browser may try; an error naming the file for a cut one.
#[wasm_bindgen_test]
async fn decode_image_gives_the_clis_pixels() {
    use tokenmix::web;
    pool().await;
    let img = image::RgbaImage::from_fn(37, 23, |x, y| image::Rgba([(x * 7) as u8, (y * 11) as u8, 200, if x < 10 { 0 } else { 255 }]));
    let mut png = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).expect("a PNG");
    let want: Vec<u8> = tokenmix::preprocess::decode_image(&png, std::path::Path::new("a.png"))
        .expect("the CLI's decode")
        .pixels()
        .flat_map(|p| [p[0], p[1], p[2], 255])
        .collect();
    let first = web::decode_image(&png, Some("a.png".into())).map_err(message).expect("decodes").expect("a PNG is read");
    for _ in 0..4 {
        let again = web::decode_image(&png, None).map_err(message).expect("decodes again");
        let junk = vec![0xABu8; 1 << 20];
        assert!(again.is_some() && junk.len() == 1 << 20);
    }
    assert_eq!((first.width(), first.height()), (37, 23));
    let got = first.data().0;
    assert!(got == want, "the CLI's pixels");
    assert_eq!(&got[..4], &[0, 0, 200, 255], "a transparent pixel keeps its colour");
    assert!(web::decode_image(b"just some text", None).map_err(message).expect("no error").is_none(), "text: for the browser to try");
    let err = message(web::decode_image(&png[..100], Some("cut.png".into())).expect_err("a cut PNG"));
    assert!(err.starts_with("input: cut.png: "), "{err}");
}

/// `classifyFileDetailed` (how the package classifies a Blob: decoded and classified in one
/// call, the decoded RGB resampled as it is) answers as `classifyDetailed` answers
/// `decodeImage`'s ImageData of the same file, to the bit, and its model input is the CLI's
/// (`preprocess::transform` of the CLI's decode); null for a format tokenmix does not read; an
/// error naming the file for a cut one; and the module classifies after each.
#[wasm_bindgen_test]
async fn a_file_is_classified_in_the_module_as_its_decoded_pixels() {
    use tokenmix::web;
    pool().await;
    let get = |v: &wasm_bindgen::JsValue, k: &str| js_sys::Reflect::get(v, &k.into()).expect(k);
    let answers = |out: &wasm_bindgen::JsValue| -> Vec<(f64, f64)> {
        js_sys::Array::from(&get(out, "predictions"))
            .iter()
            .map(|p| (get(&p, "index").as_f64().expect("index"), get(&p, "probability").as_f64().expect("probability")))
            .collect()
    };
    let input = |out: &wasm_bindgen::JsValue| js_sys::Float32Array::from(get(&get(out, "input"), "data")).to_vec();
    let img = image::RgbImage::from_fn(300, 200, |x, y| image::Rgb([(x * 7 + y) as u8, (y * 3 + x / 16) as u8, ((x ^ y) >> 3) as u8]));
    let mut png = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).expect("a PNG");
    let file = web::classify_file_detailed(png.clone(), Some("a.png".into()), Some(10.0), None, None).await.map_err(message).expect("classifies");
    let decoded = web::decode_image(&png, None).map_err(message).expect("decodes").expect("a PNG is read");
    let via_image_data = web::classify_detailed(decoded, Some(10.0), None, None).await.map_err(message).expect("classifies");
    assert_eq!(answers(&file).len(), 10);
    assert_eq!(answers(&file), answers(&via_image_data), "the same answer as through an ImageData");
    assert_eq!(input(&file), input(&via_image_data));
    let info = web::model_info().await.map_err(message).expect("model info");
    let pp = String::from(js_sys::JSON::stringify(&get(&info, "preprocess")).expect("JSON"));
    let pp: tokenmix::preprocess::Preprocess = serde_json::from_str(&pp).expect("the model's preprocessing");
    let cli = tokenmix::preprocess::transform(&img, &pp).expect("the CLI's transform");
    let worst = input(&file).iter().zip(&cli).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(input(&file).len() == cli.len() && worst <= 1e-6, "the CLI's model input: max |Δ| {worst}");
    let text = web::classify_file_detailed(b"just some text".to_vec(), None, None, None, None).await.map_err(message).expect("no error");
    assert!(text.is_null(), "text: for the browser to try");
    let err = message(web::classify_file_detailed(png[..100].to_vec(), Some("cut.png".into()), None, None, None).await.expect_err("a cut PNG"));
    assert!(err.starts_with("input: cut.png: "), "{err}");
    let again = web::classify_file_detailed(png, None, Some(10.0), None, None).await.map_err(message).expect("classifies after an error");
    assert_eq!(answers(&again), answers(&file));
}

/// `remember` false (how the page classifies a folder into a table beside the image shown): the
/// image is answered, but `explain` goes on explaining the latest image classified without it,
/// through an ImageData and through a file's bytes; classified with it, the image is the one
/// explained.
#[wasm_bindgen_test]
async fn an_image_classified_without_remember_leaves_the_explained_one() {
    use tokenmix::web;
    pool().await;
    let get = |v: &wasm_bindgen::JsValue, k: &str| js_sys::Reflect::get(v, &k.into()).expect(k);
    let pairs = |list: wasm_bindgen::JsValue| -> Vec<(f64, f64)> {
        js_sys::Array::from(&list)
            .iter()
            .map(|p| (get(&p, "index").as_f64().expect("index"), get(&p, "probability").as_f64().expect("probability")))
            .collect()
    };
    // The same classes, in order, with the same probabilities (explain runs a pass of its own).
    let same = |a: &[(f64, f64)], b: &[(f64, f64)]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.0 == y.0 && (x.1 - y.1).abs() <= 1e-5);
    let explained = || async { pairs(get(&web::explain(Some(5.0), None).await.map_err(message).expect("explains"), "classes")) };
    let shown =
        pairs(get(&web::classify_detailed(pattern_image(7), Some(5.0), None, None).await.map_err(message).expect("classifies"), "predictions"));
    assert!(same(&explained().await, &shown), "the image classified is the one explained");
    let other = pairs(get(
        &web::classify_detailed(pattern_image(29), Some(5.0), None, Some(false)).await.map_err(message).expect("classifies"),
        "predictions",
    ));
    assert!(!same(&other, &shown), "another image, another answer: {other:?}");
    assert!(same(&explained().await, &shown), "an image classified with remember false is not the one explained");
    let img = image::RgbImage::from_fn(50, 40, |x, y| image::Rgb([(x * 5) as u8, (y * 9) as u8, ((x + y) * 3) as u8]));
    let mut png = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).expect("a PNG");
    let file = web::classify_file_detailed(png, Some("b.png".into()), Some(5.0), None, Some(false)).await.map_err(message).expect("classifies");
    assert!(!same(&pairs(get(&file, "predictions")), &shown), "the file, another answer");
    assert!(same(&explained().await, &shown), "nor a file's classified with remember false");
    let again = pairs(get(
        &web::classify_detailed(pattern_image(29), Some(5.0), None, Some(true)).await.map_err(message).expect("classifies"),
        "predictions",
    ));
    assert_eq!(again, other);
    assert!(same(&explained().await, &other), "with remember true it is");
}

/// The page's API (`tokenmix::web`, what `js/pkg` exports) on what JavaScript callers hand it:
/// a URL the Cache API rejects, bad whole numbers, an image too large, a load that fails with
/// new settings, two loads at once. Each is a clear error or answer, and the module stays
/// usable: the next call still classifies.
#[wasm_bindgen_test]
async fn the_browser_api_rejects_bad_calls_and_stays_usable() {
    use tokenmix::web;
    use wasm_bindgen::{JsCast, JsValue};
    pool().await;
    let info = web::model_info().await.map_err(message).expect("the embedded default model loads");
    let default_name = js_sys::Reflect::get(&info, &"name".into()).expect("name").as_string().expect("a name");
    let classifies = || async {
        let top = web::classify(sample_image(), Some(3.0), None, None).await.map_err(message).expect("classify still works");
        assert_eq!(js_sys::Array::from(&top).length(), 3);
    };

    // Cache.match/delete reject on a URL with credentials (no Request can be made of it).
    // Without `catch` on those imports wasm-bindgen's glue unwraps the rejection: a panic.
    let credentials = "https://user:secret@example.invalid/model.safetensors";
    assert!(!web::is_cached(credentials.into()).await, "such a URL is in no cache");
    let err = message(web::clear_cache(credentials.into()).await.expect_err("clearCache rejects"));
    assert!(err.starts_with("clearCache: "), "{err}");
    let err = message(web::load_model(credentials.into(), options(&[("cache", JsValue::TRUE)])).await.expect_err("no download"));
    assert!(err.starts_with("download failed: "), "{err}");
    classifies().await;

    // Whole numbers: wasm-bindgen would wrap -1 to 4294967295 for a usize.
    for (what, call) in [
        ("cropGeometry: width", web::crop_geometry(-1.0, 100.0).await.map(drop)),
        ("cropGeometry: height", web::crop_geometry(100.0, f64::NAN).await.map(drop)),
        ("topK", web::classify(sample_image(), Some(-1.0), None, None).await.map(drop)),
        ("topK", web::classify(sample_image(), Some(2.5), None, None).await.map(drop)),
        ("cancelId", web::classify(sample_image(), None, Some(-1.0), None).await.map(drop)),
        ("insight: layer", web::insight(1.5).await.map(drop)),
        ("tokenMixing: layer", web::token_mixing(-3.0).await.map(drop)),
    ] {
        let err = message(call.expect_err(what));
        assert!(err.contains(what) && err.contains("expected a whole number"), "{what}: {err}");
    }

    // A call whose cancel id was cancelled stops before its first step, and is counted; the
    // next id is not cancelled by it. In the threaded build the cancel table is in the shared
    // memory, where a store as the page's thread makes it (Atomics.store of id + 1 at
    // id % slots) cancels the call too; the one-thread build has no table.
    let stopped = || async {
        let info = web::adapter_info().await.map_err(message).expect("adapterInfo");
        let c = js_sys::Reflect::get(&info, &"cancelled".into()).expect("cancelled");
        js_sys::Reflect::get(&c, &"beforeStart".into()).expect("beforeStart").as_f64().expect("a count")
    };
    let before = stopped().await;
    web::cancel_call(7.0).map_err(message).expect("cancelCall");
    let err = message(web::classify(sample_image(), None, Some(7.0), None).await.expect_err("a cancelled call"));
    assert!(err.starts_with("cancelled"), "{err}");
    let err = message(web::explain(None, Some(7.0)).await.expect_err("a cancelled explanation"));
    assert!(err.starts_with("cancelled"), "{err}");
    assert_eq!(stopped().await, before + 2.0, "both stopped before their first step");
    web::classify(sample_image(), None, Some(7.0 + 256.0), None).await.map_err(message).expect("another id in the same cell runs");
    let table = web::cancel_table();
    if cfg!(feature = "threads") {
        let offset = js_sys::Reflect::get(&table, &"offset".into()).expect("offset").as_f64().expect("a number") as u32;
        let memory = js_sys::Reflect::get(&table, &"memory".into()).expect("memory").unchecked_into::<js_sys::WebAssembly::Memory>();
        let cells = js_sys::Uint32Array::new_with_byte_offset_and_length(&memory.buffer(), offset, 256);
        js_sys::Atomics::store(&cells, 9, 10).expect("Atomics.store on the shared memory");
        let err = message(web::classify(sample_image(), None, Some(9.0), None).await.expect_err("cancelled through the table"));
        assert!(err.starts_with("cancelled"), "{err}");
    } else {
        assert!(table.is_null(), "the one-thread build has no cancel table");
    }
    classifies().await;

    // Too large: refused before its pixels are copied into wasm memory (which never shrinks).
    let memory =
        || wasm_bindgen::memory().unchecked_into::<js_sys::WebAssembly::Memory>().buffer().unchecked_into::<js_sys::ArrayBuffer>().byte_length();
    let before = memory();
    let huge = web_sys::ImageData::new_with_sw(8193, 8193).expect("an 8193x8193 ImageData");
    let err = message(web::classify(huge, None, None, None).await.expect_err("too large"));
    assert!(err.contains("8193x8193"), "{err}");
    let grew = memory().saturating_sub(before);
    assert!(grew < 16 << 20, "an image refused for its size grew wasm memory by {grew} bytes");
    classifies().await;

    // A load that fails leaves the precision and autotune settings as they were.
    let (precision, autotune) = (tokenmix::gpu::precision_override(), tokenmix::gpu::tune::autotune_override());
    let wanted = if precision == Some(tokenmix::gpu::Precision::F16) { "f32" } else { "f16" };
    let bad = js_sys::Uint8Array::from(&[1u8, 2, 3][..]);
    let opts = options(&[("precision", wanted.into()), ("autotune", JsValue::from_bool(autotune != Some(true)))]);
    web::load_model(bad.into(), opts).await.map(drop).expect_err("three bytes are no model");
    assert_eq!(tokenmix::gpu::precision_override(), precision, "a failed load changed the precision");
    assert_eq!(tokenmix::gpu::tune::autotune_override(), autotune, "a failed load changed autotune");
    classifies().await;

    // Two loads at once: the first (a URL) is called first and finishes after the second (the
    // embedded model). The last called wins, not the last done. The first is polled once (it
    // takes its turn and starts its download), then only once the second has loaded: the
    // order is the test's, not a race between a download and a conversion in slices.
    let (_, weights, _, _) = fixture!("mixer_p4_d64");
    let parts = js_sys::Array::of1(&js_sys::Uint8Array::from(weights));
    let url = web_sys::Url::create_object_url_with_blob(&web_sys::Blob::new_with_u8_array_sequence(&parts).expect("a Blob")).expect("a blob URL");
    let mut first = Box::pin(web::load_model(url.clone().into(), JsValue::UNDEFINED));
    std::future::poll_fn(|cx| {
        assert!(std::future::Future::poll(first.as_mut(), cx).is_pending(), "the URL's load waits for its download");
        std::task::Poll::Ready(())
    })
    .await;
    let b = web::load_model(JsValue::NULL, JsValue::UNDEFINED).await;
    let a = first.await;
    let _ = web_sys::Url::revoke_object_url(&url);
    b.map_err(message).expect("the embedded model loads");
    let err = message(a.map(drop).expect_err("the older load is superseded"));
    assert!(err.contains("superseded"), "{err}");
    let now = web::model_info().await.map_err(message).expect("modelInfo");
    let name = js_sys::Reflect::get(&now, &"name".into()).expect("name").as_string();
    assert_eq!(name.as_deref(), Some(default_name.as_str()), "the model of the load called last is in use");
    classifies().await;
}
