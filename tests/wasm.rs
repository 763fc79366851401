//! The wasm build in a real browser: golden logits of every family through the WebAssembly
//! core, on the browser's WebGPU adapter (headless Chromium, SwiftShader) and on the
//! WebAssembly SIMD CPU executor, agree with timm within the golden tolerance — and so do the
//! per-token class evidence maps (`Model::explain`). Run by
//! `make test-wasm` (wasm-bindgen-test-runner + chromedriver) twice: the one-thread build on
//! the page, and the threaded build (`threads`: the CPU executor on rayon's pool of Web
//! Workers) in a dedicated worker.
#![cfg(target_arch = "wasm32")]

use std::sync::Arc;

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

/// The golden fixtures through one executor, each against timm's logits.
async fn goldens_on(device: Device) {
    web_sys::console::log_1(&format!("executor: {} ({})", device.describe(), device.kernels()).into());
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, weights, io, explain) in [
        fixture!("mixer_p8_grey_nonsquare"),
        fixture!("mixer_p4_d64"),
        fixture!("gmlp_grey_nonsquare_f16"),
        fixture!("gmlp_d64_small_gate"),
        fixture!("resmlp_p4_bf16"),
        fixture!("poolformer_grey_nonsquare_f16"),
    ] {
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
