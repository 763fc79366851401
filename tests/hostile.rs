//! The malformed-file corpus (`tests/hostile/`, written by `tools/make_hostile.py`): every file
//! is refused with an error naming what is wrong — never a panic — by the CPU-only check
//! (`tokenmix::inspect`) and by `Model::load` on both executors, and a model loaded before still
//! classifies bit-for-bit the same after each rejection. A load that converts in slices first
//! (`Model::load_scoped_in_slices`, the browser's one-thread build) gives the same errors. The
//! browser runs the same corpus through the page's `loadModel` (tests/browser/e2e.mjs).

mod common;

use std::path::PathBuf;

use common::gpu;
use tokenmix::Model;

/// (file, why, expected error fragment, stage: "inspect" or "load").
fn corpus() -> (PathBuf, Vec<(String, String, String, String)>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("hostile");
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest")).expect("manifest JSON");
    let cases = manifest["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let field = |k: &str| c[k].as_str().unwrap_or_else(|| panic!("manifest entry without `{k}`")).to_string();
            (field("file"), field("why"), field("expect"), field("stage"))
        })
        .collect();
    (dir, cases)
}

/// A pause after every chunk of a conversion in slices, which returns at once.
const EVERY_CHUNK: tokenmix::exec::cpu::Slices =
    tokenmix::exec::cpu::Slices { every_ms: 0.0, clock: || 0.0, pause: || Box::pin(std::future::ready(())), gemm_macs: usize::MAX };

#[test]
fn every_hostile_file_is_refused_and_the_loaded_model_keeps_working() {
    // On the WGSL path and on the CPU executor alike.
    for dev in [tokenmix::Device::from(gpu()), common::cpu()] {
        hostile_files_on(dev);
    }
}

fn hostile_files_on(dev: tokenmix::Device) {
    let (dir, cases) = corpus();
    assert!(cases.len() >= 30, "the corpus has {} files", cases.len());
    // The corpus is mutations of a file that does load.
    let base = std::fs::read(dir.join("base.safetensors")).expect("base");
    Model::load(dev.clone(), &base, None).expect("the unmutated base model loads");

    let model = Model::load(dev.clone(), tokenmix::DEFAULT_MODEL, None).expect("default model");
    let input: Vec<f32> = (0..model.input_len()).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
    let before = model.forward_blocking(&input).expect("classifies").logits;
    let mut failures = Vec::new();
    for (file, why, expect, stage) in &cases {
        let bytes = std::fs::read(dir.join(file)).expect("corpus file");
        let cpu = tokenmix::inspect(&bytes, None).err().map(|e| e.to_string());
        let load_err = Model::load(dev.clone(), &bytes, None).err().map(|e| e.to_string());
        // The browser's one-thread build converts in slices first: the same error. Exactly the
        // same where the error comes after the file is inspected (the order of the tensors'
        // checks); an inspect error may name either of two tensors (safetensors checks the
        // offsets in a hash map's order), so there the expected fragment is what must match.
        let sliced = pollster::block_on(Model::load_scoped_in_slices(dev.clone(), &bytes, None, &tokenmix::Cancel::new(), Some(&EVERY_CHUNK)));
        let sliced = sliced.err().map(|e| e.to_string());
        let same =
            if stage == "load" { sliced == load_err } else { sliced.as_ref().is_some_and(|e| e.to_lowercase().contains(&expect.to_lowercase())) };
        if !same {
            failures.push(format!("{file}: loaded in slices, {sliced:?}, where a load said {load_err:?}"));
        }
        let after = model.forward_blocking(&input).expect("the loaded model still classifies").logits;
        eprintln!("{file} ({why}) on {}: {}", dev.label(), load_err.as_deref().unwrap_or("LOADED"));
        match (&cpu, &load_err) {
            (_, None) => failures.push(format!("{file}: loaded, expected an error containing `{expect}`")),
            (_, Some(e)) if !e.to_lowercase().contains(&expect.to_lowercase()) => failures.push(format!("{file}: `{e}` lacks `{expect}`")),
            // Header, metadata and config problems are caught by the CPU-only check, before
            // anything is uploaded; tensor names, shapes and values need the architecture's list.
            (None, Some(e)) if stage == "inspect" => failures.push(format!("{file}: inspect accepted what load refused: {e}")),
            _ => {}
        }
        if after != before {
            failures.push(format!("{file}: the loaded model's logits changed after the rejection"));
        }
    }
    assert!(failures.is_empty(), "{} of {} hostile files on {}:\n{}", failures.len(), cases.len(), dev.label(), failures.join("\n"));
}

#[test]
fn gpu_faults_are_errors_and_a_new_device_recovers() {
    let gpu = std::sync::Arc::new(pollster::block_on(tokenmix::Gpu::new()).expect("adapter"));
    // An allocation the adapter refuses, inside the scopes Model::load_scoped uses.
    let too_big = gpu.limits.max_buffer_size.saturating_add(4);
    let r = pollster::block_on(gpu.scoped("making a buffer", || {
        let _ = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("too big"),
            size: too_big,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        Ok(())
    }));
    let msg = r.expect_err("a buffer over max_buffer_size is an error").to_string();
    eprintln!("scoped allocation: {msg}");
    assert!(msg.contains("while making a buffer"), "{msg}");

    // Device loss: every later call is an error that says to reload; nothing panics or hangs.
    let model = pollster::block_on(Model::load_scoped(gpu.clone(), tokenmix::DEFAULT_MODEL, None)).expect("loads");
    let input = vec![0.25f32; model.input_len()];
    let want = model.forward_blocking(&input).expect("classifies").logits;
    gpu.device.destroy();
    let _ = gpu.device.poll(wgpu::PollType::Poll);
    let lost = model.forward_blocking(&input).expect_err("a destroyed device cannot run").to_string();
    eprintln!("after device.destroy(): {lost}");
    assert!(lost.contains(tokenmix::gpu::DEVICE_LOST), "{lost}");
    let again =
        pollster::block_on(Model::load_scoped(gpu.clone(), tokenmix::DEFAULT_MODEL, None)).err().expect("no loading on a lost device").to_string();
    assert!(again.contains(tokenmix::gpu::DEVICE_LOST), "{again}");

    // Reloading on a new device gives the same logits.
    let fresh = std::sync::Arc::new(pollster::block_on(tokenmix::Gpu::new()).expect("adapter"));
    let model = Model::load(fresh, tokenmix::DEFAULT_MODEL, None).expect("reloads");
    assert_eq!(model.forward_blocking(&input).expect("classifies").logits, want);
}
