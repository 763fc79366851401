//! The wasm build in a real browser: golden logits of every family through the WebAssembly
//! core, on the browser's WebGPU adapter (headless Chromium, SwiftShader) and on the
//! WebAssembly SIMD CPU executor, agree with timm within the golden tolerance — and so do the
//! per-token class evidence maps (`Model::explain`). Run by
//! `make test-wasm` (wasm-bindgen-test-runner + chromedriver).
#![cfg(target_arch = "wasm32")]

use std::sync::Arc;

use tokenmix::{Device, Gpu, Model};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

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
        let diff = out.logits.iter().zip(&expected).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        let bound = 1e-4 * expected.iter().fold(1f32, |m, v| m.max(v.abs()));
        web_sys::console::log_1(&format!("{name} [wasm, {}]: max|Δlogit| = {diff:.2e} (bound {bound:.1e})", device.label()).into());
        if !(diff <= bound) {
            failures.push(format!("{name}: {diff} > {bound}"));
        }
        // The per-token class evidence against timm's (tools/make_goldens.py --explain).
        let (_, evidence) = tensor(explain, "evidence");
        let ex = model.explain(&input).await.expect("explain");
        let map_diff = ex.maps.iter().zip(&evidence).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
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
    let gpu = Arc::new(Gpu::new().await.expect("a WebGPU adapter"));
    goldens_on(Device::Gpu(gpu)).await;
}

/// The CPU executor compiled to WebAssembly (simd128).
#[wasm_bindgen_test]
async fn golden_logits_match_timm_on_the_wasm_cpu_backend() {
    goldens_on(Device::cpu()).await;
}
