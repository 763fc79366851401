//! Loading errors: a broken or foreign file is an error that names the problem, never a panic,
//! and the same GPU keeps working afterwards.

mod common;

use std::collections::HashMap;

use common::{fixtures, gpu};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use tokenmix::{Error, Model};

fn fixture_named(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(format!("{name}.safetensors"))).expect("fixture")
}

fn fixture() -> Vec<u8> {
    fixture_named("mixer_p4_rgb")
}

type Tensors = Vec<(String, Dtype, Vec<usize>, Vec<u8>)>;

/// Rewrites the Mixer fixture through `edit`, which gets (name, dtype, shape, bytes) per tensor.
fn rewrite(edit: impl Fn(&mut Tensors), metadata: Option<HashMap<String, String>>) -> Vec<u8> {
    rewrite_named("mixer_p4_rgb", edit, metadata)
}

fn rewrite_named(name: &str, edit: impl Fn(&mut Tensors), metadata: Option<HashMap<String, String>>) -> Vec<u8> {
    let bytes = fixture_named(name);
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> =
        st.iter().map(|(n, v)| (n.to_string(), v.dtype(), v.shape().to_vec(), v.data().to_vec())).collect();
    edit(&mut tensors);
    let views: Vec<(String, TensorView)> = tensors.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize(views, metadata).unwrap()
}

fn load(bytes: &[u8]) -> Result<Model, Error> {
    Model::load(gpu(), bytes, None)
}

fn expect_err(bytes: &[u8], needle: &str) {
    match load(bytes) {
        Ok(_) => panic!("expected an error mentioning `{needle}`"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(needle), "error `{msg}` should mention `{needle}`");
        }
    }
}

#[test]
fn truncated_files_are_errors() {
    let bytes = fixture();
    for cut in [0, 1, 7, 8, 9, 100, bytes.len() / 2, bytes.len() - 1] {
        assert!(load(&bytes[..cut]).is_err(), "truncated at {cut} should fail");
    }
}

#[test]
fn absurd_header_length_is_an_error() {
    let mut bytes = fixture();
    bytes[..8].copy_from_slice(&(1u64 << 63).to_le_bytes());
    assert!(matches!(load(&bytes), Err(Error::Format(_))));
}

#[test]
fn wrong_shape_names_the_tensor() {
    let bytes = rewrite(
        |t| {
            let e = t.iter_mut().find(|e| e.0 == "blocks.1.mlp_channels.fc2.bias").unwrap();
            e.2 = vec![e.2[0] / 2];
            e.3.truncate(e.3.len() / 2);
        },
        None,
    );
    expect_err(&bytes, "blocks.1.mlp_channels.fc2.bias");
}

#[test]
fn missing_tensor_names_it() {
    let bytes = rewrite(|t| t.retain(|e| e.0 != "blocks.0.norm2.weight"), None);
    expect_err(&bytes, "blocks.0.norm2.weight");
}

#[test]
fn unexpected_tensor_names_it() {
    let bytes = rewrite(|t| t.push(("blocks.0.extra".into(), Dtype::F32, vec![2], vec![0; 8])), None);
    expect_err(&bytes, "blocks.0.extra");
}

#[test]
fn unsupported_dtype_names_it() {
    let bytes = rewrite(
        |t| {
            let e = t.iter_mut().find(|e| e.0 == "head.bias").unwrap();
            e.1 = Dtype::I32;
        },
        None,
    );
    expect_err(&bytes, "head.bias");
}

#[test]
fn not_a_mixer_is_an_error() {
    let bytes = rewrite(|t| t.retain(|e| !e.0.starts_with("stem.")), None);
    expect_err(&bytes, "not a recognised timm checkpoint");
}

#[test]
fn labels_must_match_classes() {
    let meta = HashMap::from([("labels".to_string(), serde_json::to_string(&["a", "b"]).unwrap())]);
    let bytes = rewrite(|_| {}, Some(meta));
    expect_err(&bytes, "2 labels for 10 classes");
}

#[test]
fn bad_metadata_json_is_an_error() {
    let meta = HashMap::from([("preprocess".to_string(), "{not json".to_string())]);
    expect_err(&rewrite(|_| {}, Some(meta)), "preprocess");
}

#[test]
fn image_size_must_match_token_count() {
    assert!(Model::load(gpu(), &fixture(), Some([20, 16])).is_err(), "5x4 grid is 20 tokens, weights have 16");
}

#[test]
fn gpu_still_works_after_errors() {
    let bytes = fixture();
    let _ = load(&bytes[..bytes.len() / 2]);
    let _ = load(&rewrite(|t| t.retain(|e| e.0 != "norm.bias"), None));
    let model = load(&bytes).expect("the intact file still loads");
    assert!(model.forward_blocking(&vec![0.1; model.input_len()]).is_ok());
}

#[test]
fn metadata_labels_and_preprocess_are_used() {
    let labels: Vec<String> = (0..10).map(|i| format!("label{i}")).collect();
    let pp = serde_json::json!({"size": [16, 16], "crop_pct": 0.9, "mean": [0.1, 0.2, 0.3], "std": [0.3, 0.2, 0.1], "channels": 3});
    let meta = HashMap::from([("labels".to_string(), serde_json::to_string(&labels).unwrap()), ("preprocess".to_string(), pp.to_string())]);
    let model = load(&rewrite(|_| {}, Some(meta))).expect("loads");
    assert_eq!(model.info.labels, labels);
    assert_eq!(model.info.preprocess.crop_pct, 0.9);
    assert_eq!(model.info.preprocess.mean, vec![0.1, 0.2, 0.3]);
}

#[test]
fn other_families_name_what_is_wrong() {
    // gMLP without its gate's LayerNorm bias.
    let bytes = rewrite_named("gmlp_p4_rgb", |t| t.retain(|e| e.0 != "blocks.1.mlp_channels.gate.norm.bias"), None);
    expect_err(&bytes, "blocks.1.mlp_channels.gate.norm.bias");
    // ResMLP with a layer scale of the wrong width.
    let bytes = rewrite_named(
        "resmlp_p4_bf16",
        |t| {
            let e = t.iter_mut().find(|e| e.0 == "blocks.0.ls1").unwrap();
            e.2 = vec![e.2[0] - 1];
            e.3.truncate(e.3.len() - 2);
        },
        None,
    );
    expect_err(&bytes, "blocks.0.ls1");
    // A MetaFormer whose token mixer has weights (ConvFormer-like) is not PoolFormer.
    let bytes =
        rewrite_named("poolformer_rgb", |t| t.push(("stages.0.blocks.0.token_mixer.pwconv1.weight".into(), Dtype::F32, vec![2], vec![0; 8])), None);
    expect_err(&bytes, "token mixer has weights");
    // An image smaller than the 7x7 stem (with its padding) is an input error, not a panic.
    assert!(Model::load(gpu(), &fixture_named("poolformer_rgb"), Some([2, 2])).is_err());
    // And the GPU still runs a good model afterwards.
    let model = Model::load(gpu(), &fixture_named("poolformer_rgb"), Some([64, 64])).expect("loads");
    assert!(model.forward_blocking(&vec![0.1; model.input_len()]).is_ok());
}
