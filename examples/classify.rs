//! tokenmix as a Rust library: classify image files, or the images in folders, with a timm
//! checkpoint (`model.safetensors`, timm's names) or the embedded default model, on the GPU or
//! the CPU executor as `auto` picks (`TOKENMIX_BACKEND` overrides it).
//!
//! ```sh
//! cargo run --release --example classify -- [--weights model.safetensors] IMAGE_OR_FOLDER...
//! ```
//!
//! Prints one line per image: its path, the top class and its probability; an image that does
//! not read is a line saying why, and the others are classified.

use std::path::PathBuf;
use std::process::ExitCode;

use tokenmix::{exec, labels, preprocess, BackendChoice, Model};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let mut weights = None;
    let mut inputs = Vec::new();
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--weights") => weights = args.next().map(PathBuf::from),
            _ => inputs.push(PathBuf::from(a)),
        }
    }
    if inputs.is_empty() {
        eprintln!("usage: classify [--weights model.safetensors] IMAGE_OR_FOLDER...");
        return ExitCode::FAILURE;
    }
    match run(weights, inputs) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(2), // some images did not read
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Classifies the images `inputs` stands for with the model file `weights`, else the embedded
/// default; how many did not read.
fn run(weights: Option<PathBuf>, inputs: Vec<PathBuf>) -> tokenmix::Result<usize> {
    // The executor: a hardware GPU's WGSL kernels, else the SIMD CPU executor.
    let choice = BackendChoice::from_env()?.unwrap_or_default();
    let selected = pollster::block_on(exec::select(choice))?;
    eprintln!("{}: {}", selected.device.backend(), selected.reason);

    // A timm checkpoint as it is, or the embedded Fashion-MNIST Mixer.
    let bytes = match &weights {
        Some(path) => tokenmix::file::read_model(path)?,
        None => tokenmix::DEFAULT_MODEL.to_vec(),
    };
    let model = Model::load(selected.device, &bytes, None)?;

    // A folder stands for the images in it and its subfolders, in name order.
    let mut paths = Vec::new();
    for input in inputs {
        if input.is_dir() {
            preprocess::find_images(&input, &mut paths, &mut Vec::new())?;
        } else {
            paths.push(input);
        }
    }

    // Read, resized and normalised as timm's eval transform does (in parallel), a batch at a
    // time; each batch one forward pass.
    let mut unread = 0;
    for batch in preprocess::Batches::new(&model, &paths, model.max_batch()) {
        let out = if batch.input.is_empty() { None } else { Some(model.forward_blocking(&batch.input)?) };
        for (path, place) in batch.paths.iter().zip(&batch.places) {
            match (place, &out) {
                (Ok(i), Some(out)) => {
                    let top = out.top_k(*i, 1)[0];
                    let p = out.probs[i * out.classes + top];
                    println!("{}\t{}\t{:.4}", path.display(), labels::label(&model.info, top), p);
                }
                (Err(e), _) => {
                    println!("{}\terror: {e}", path.display());
                    unread += 1;
                }
                (Ok(_), None) => {}
            }
        }
    }
    Ok(unread)
}
