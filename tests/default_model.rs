//! The embedded default model predicts what PyTorch predicted for the same weights
//! (`tools/train.py` saved PyTorch's predictions for the first 256 Fashion-MNIST test images),
//! and the bundled sample PNGs, classified through the CLI's image path, agree with them too.

mod common;

use std::process::Command;

use common::{fixtures, gpu};
use tokenmix::Model;

/// The trained models shipped in weights/ (tools/train.py), each with its PyTorch slice.
const SHIPPED: &[&str] = &["mixer_fmnist", "gmlp_fmnist", "poolformer_fmnist"];

fn slice() -> (Vec<f32>, Vec<i32>, Vec<i32>) {
    slice_of("mixer_fmnist")
}

fn slice_of(name: &str) -> (Vec<f32>, Vec<i32>, Vec<i32>) {
    let bytes = std::fs::read(fixtures().join(format!("{name}.preds.safetensors"))).expect("fixture");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parses");
    let f32s = |n: &str| st.tensor(n).unwrap().data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect::<Vec<f32>>();
    let i32s = |n: &str| st.tensor(n).unwrap().data().chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect::<Vec<i32>>();
    (f32s("input"), i32s("preds"), i32s("labels"))
}

fn argmax(row: &[f32]) -> i32 {
    row.iter().enumerate().fold((0, f32::MIN), |(bi, bv), (i, &v)| if v > bv { (i, v) } else { (bi, bv) }).0 as i32
}

#[test]
fn default_model_agrees_with_pytorch() {
    let model = Model::load(gpu(), tokenmix::DEFAULT_MODEL, None).expect("embedded model loads");
    assert_eq!(model.info.labels.len(), 10);
    let (input, torch_preds, labels) = slice();
    let out = model.forward_blocking(&input).expect("forward");
    let ours: Vec<i32> = out.logits.chunks(out.classes).map(argmax).collect();
    assert_eq!(ours.len(), torch_preds.len(), "one prediction per image of the slice");
    let disagree = ours.iter().zip(&torch_preds).filter(|(a, b)| a != b).count();
    let correct = ours.iter().zip(&labels).filter(|(a, b)| a == b).count();
    eprintln!("default model on {} test images: {disagree} disagreements with PyTorch, {correct} correct", ours.len());
    assert_eq!(disagree, 0, "tokenmix and PyTorch predict differently on {disagree} images");
}

#[test]
fn every_shipped_model_agrees_with_pytorch() {
    let weights = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("weights");
    for name in SHIPPED {
        let bytes = std::fs::read(weights.join(format!("{name}.safetensors"))).expect("shipped model");
        let model = Model::load(gpu(), &bytes, None).expect("shipped model loads");
        let (input, torch_preds, labels) = slice_of(name);
        let out = model.forward_blocking(&input).expect("forward");
        let ours: Vec<i32> = out.logits.chunks(out.classes).map(argmax).collect();
        assert_eq!(ours.len(), torch_preds.len(), "{name}: one prediction per image of the slice");
        let disagree = ours.iter().zip(&torch_preds).filter(|(a, b)| a != b).count();
        let correct = ours.iter().zip(&labels).filter(|(a, b)| a == b).count();
        eprintln!("{name} ({}) on {} test images: {disagree} disagreements with PyTorch, {correct} correct", model.info.family, ours.len());
        assert_eq!(disagree, 0, "{name}: tokenmix and PyTorch predict differently on {disagree} images");
    }
}

#[test]
fn sample_pngs_classify_as_pytorch_predicted() {
    let (_, torch_preds, _) = slice();
    let samples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("www").join("samples");
    let mut paths: Vec<_> =
        std::fs::read_dir(&samples).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "png")).collect();
    paths.sort();
    assert!(paths.len() >= 5);
    let mut args = vec!["classify".to_string(), "--json".into(), "--top-k".into(), "1".into()];
    args.extend(paths.iter().map(|p| p.display().to_string()));
    let out = Command::new(env!("CARGO_BIN_EXE_tokenmix")).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = v.as_array().unwrap();
    assert_eq!(entries.len(), paths.len(), "one result per sample");
    for (entry, path) in entries.iter().zip(&paths) {
        // fmnist-IIII-name.png is test image IIII, saved losslessly from the IDX file.
        let name = path.file_name().unwrap().to_str().unwrap();
        let index: usize = name[7..11].parse().unwrap();
        let predicted = entry["predictions"][0]["index"].as_i64().unwrap() as i32;
        assert_eq!(predicted, torch_preds[index], "{name}");
    }
}

/// `tokenmix eval` on IDX files made from the fixture slice (images gzipped, labels raw, as
/// both occur): its correct count must be PyTorch's on the same images and weights.
#[test]
fn eval_command_counts_what_pytorch_counts() {
    use std::io::Write;
    let (input, torch_preds, labels) = slice();
    let model = Model::load(gpu(), tokenmix::DEFAULT_MODEL, None).expect("embedded model loads");
    let (mean, std) = (model.info.preprocess.mean[0] as f64, model.info.preprocess.std[0] as f64);
    let n = labels.len();
    let mut images = vec![0, 0, 8, 3];
    for d in [n as u32, 28, 28] {
        images.extend(d.to_be_bytes());
    }
    images.extend(input.iter().map(|&x| ((x as f64 * std + mean) * 255.0).round() as u8));
    let mut label_file = vec![0, 0, 8, 1];
    label_file.extend((n as u32).to_be_bytes());
    label_file.extend(labels.iter().map(|&l| l as u8));
    let scratch = common::scratch("eval");
    let dir = scratch.path();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&images).unwrap();
    std::fs::write(dir.join("t10k-images-idx3-ubyte.gz"), gz.finish().unwrap()).unwrap();
    std::fs::write(dir.join("t10k-labels-idx1-ubyte"), &label_file).unwrap();

    let out =
        Command::new(env!("CARGO_BIN_EXE_tokenmix")).args(["eval", "--data", dir.to_str().unwrap(), "--batch", "50", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    let torch_correct = torch_preds.iter().zip(&labels).filter(|(p, l)| p == l).count();
    assert_eq!(v["total"], n);
    assert_eq!(v["correct"], torch_correct, "PyTorch got {torch_correct}/{n}");
    assert!((v["top1"].as_f64().unwrap() - torch_correct as f64 / n as f64).abs() < 1e-12);
    assert!(v["images_per_s"].as_f64().unwrap() > 0.0);

    // A truncated image file is one clear error.
    std::fs::write(dir.join("t10k-images-idx3-ubyte.gz"), &images[..100]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tokenmix")).args(["eval", "--data", dir.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.starts_with("error: ") && err.contains("t10k-images"), "{err}");

    // So are a label outside the ten classes (it was counted as a wrong answer), and a header
    // whose image count would need more bytes than a usize holds (it was reported as `Some(…)`).
    let eval_error = || {
        let out = Command::new(env!("CARGO_BIN_EXE_tokenmix")).args(["eval", "--data", dir.to_str().unwrap()]).output().unwrap();
        assert!(!out.status.success(), "eval should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    std::fs::remove_file(dir.join("t10k-images-idx3-ubyte.gz")).unwrap();
    std::fs::write(dir.join("t10k-images-idx3-ubyte"), &images).unwrap();
    let mut bad_label = label_file.clone();
    bad_label[8 + n / 2] = 10;
    std::fs::write(dir.join("t10k-labels-idx1-ubyte"), &bad_label).unwrap();
    let err = eval_error();
    assert!(err.contains(&format!("label 10 of image {} is not one of Fashion-MNIST's 10 classes", n / 2)), "{err}");
    let mut huge = images.clone();
    huge[4..16].copy_from_slice(&[u32::MAX.to_be_bytes(); 3].concat());
    std::fs::write(dir.join("t10k-images-idx3-ubyte"), &huge).unwrap();
    let err = eval_error();
    assert!(err.contains("need more than a usize of bytes") && !err.contains("Some("), "{err}");
}

/// `tokenmix eval` on class folders (torchvision's ImageFolder layout) holding the fixture
/// slice as greyscale PNGs: its count is PyTorch's, over all and per class, whatever spelling
/// names each folder (a label as the model has it, in other case and punctuation, or the class
/// index); other files are left out with a note, and a folder that names no class is an error.
#[test]
fn eval_on_class_folders_counts_what_pytorch_counts() {
    let (input, torch_preds, labels) = slice();
    let model = Model::load(gpu(), tokenmix::DEFAULT_MODEL, None).expect("embedded model loads");
    let (mean, std) = (model.info.preprocess.mean[0] as f64, model.info.preprocess.std[0] as f64);
    // The ten classes' folders, spelled as a user may: "T-shirt/top" cannot be a folder name.
    let folders = ["T-shirt", "trouser", "Pullover", "DRESS", "4", "sandal", "Shirt", "sneaker", "bag", "ankle_boot"];
    assert_eq!(model.info.labels.len(), folders.len());
    let scratch = common::scratch("eval-folders");
    let dir = scratch.path();
    for (i, (pixels, &label)) in input.chunks(28 * 28).zip(&labels).enumerate() {
        let class = dir.join(folders[label as usize]);
        // Half of each class one level down, as a dataset split in parts may be.
        let sub = if i % 2 == 0 { class.clone() } else { class.join("part2") };
        std::fs::create_dir_all(&sub).unwrap();
        let bytes: Vec<u8> = pixels.iter().map(|&x| ((x as f64 * std + mean) * 255.0).round() as u8).collect();
        image::GrayImage::from_raw(28, 28, bytes).unwrap().save(sub.join(format!("{i:04}.png"))).unwrap();
    }
    std::fs::write(dir.join("README.txt"), b"Fashion-MNIST slice").unwrap();
    let eval =
        |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_tokenmix")).args(["eval", "--data", dir.to_str().unwrap()]).args(args).output().unwrap();
    let out = eval(&["--batch", "50", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    let n = labels.len();
    let torch_correct = torch_preds.iter().zip(&labels).filter(|(p, l)| p == l).count();
    assert_eq!(v["total"], n);
    assert_eq!(v["correct"], torch_correct, "PyTorch got {torch_correct}/{n}");
    let per_class = v["classes"].as_array().expect("per class");
    assert_eq!(per_class.len(), 10, "every class has images in the slice");
    for (c, entry) in per_class.iter().enumerate() {
        let total = labels.iter().filter(|&&l| l as usize == c).count();
        let right = torch_preds.iter().zip(&labels).filter(|&(&p, &l)| l as usize == c && p == l).count();
        assert_eq!(
            (entry["index"].as_u64(), entry["total"].as_u64(), entry["correct"].as_u64()),
            (Some(c as u64), Some(total as u64), Some(right as u64)),
            "{entry}"
        );
        assert_eq!(entry["label"], model.info.labels[c]);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("note: ") && err.contains("README.txt") && err.trim_end().lines().count() == 1, "{err}");
    // A folder that names no class.
    std::fs::create_dir(dir.join("socks")).unwrap();
    let out = eval(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("socks: a class folder named as none of") && err.contains("Ankle boot"), "{err}");
}

/// How often a 256-byte piece from the middle of `model` occurs in `binary`.
fn copies(binary: &[u8], model: &[u8]) -> usize {
    let piece = &model[model.len() / 2..][..256];
    binary.windows(piece.len()).filter(|w| *w == piece).count()
}

/// The default model is in the binary exactly once: `tokenmix::DEFAULT_MODEL` as a `const`
/// (or a static that only points at its bytes) put a copy in every codegen unit that used it.
/// The wasm package is checked the same way by the browser tests (e2e.mjs, m).
#[test]
fn the_binary_embeds_the_default_model_once() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let model = std::fs::read(root.join("weights/mixer_fmnist.safetensors")).expect("weights/mixer_fmnist.safetensors");
    assert_eq!(tokenmix::DEFAULT_MODEL, &model[..], "the embedded model is weights/mixer_fmnist.safetensors");
    let binary = std::fs::read(env!("CARGO_BIN_EXE_tokenmix")).expect("the tokenmix binary");
    assert_eq!(copies(&binary, &model), 1, "copies of the default model in {}", env!("CARGO_BIN_EXE_tokenmix"));
}
