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

/// An MLP-Mixer file with these shapes (timm's names; small random values), and metadata.
fn mixer_file(patch: usize, tokens: usize, depth: usize, metadata: Option<HashMap<String, String>>) -> Vec<u8> {
    let (dim, hidden, chans, classes) = (2, 1, 1, 3);
    let mut shapes: Vec<(String, Vec<usize>)> =
        vec![("stem.proj.weight".into(), vec![dim, chans, patch, patch]), ("stem.proj.bias".into(), vec![dim])];
    for i in 0..depth {
        let b = |n: &str| format!("blocks.{i}.{n}");
        shapes.extend([
            (b("norm1.weight"), vec![dim]),
            (b("norm1.bias"), vec![dim]),
            (b("mlp_tokens.fc1.weight"), vec![hidden, tokens]),
            (b("mlp_tokens.fc1.bias"), vec![hidden]),
            (b("mlp_tokens.fc2.weight"), vec![tokens, hidden]),
            (b("mlp_tokens.fc2.bias"), vec![tokens]),
            (b("norm2.weight"), vec![dim]),
            (b("norm2.bias"), vec![dim]),
            (b("mlp_channels.fc1.weight"), vec![hidden, dim]),
            (b("mlp_channels.fc1.bias"), vec![hidden]),
            (b("mlp_channels.fc2.weight"), vec![dim, hidden]),
            (b("mlp_channels.fc2.bias"), vec![dim]),
        ]);
    }
    shapes.extend([
        ("norm.weight".into(), vec![dim]),
        ("norm.bias".into(), vec![dim]),
        ("head.weight".into(), vec![classes, dim]),
        ("head.bias".into(), vec![classes]),
    ]);
    let data: Vec<Vec<u8>> =
        shapes.iter().map(|(_, s)| (0..s.iter().product::<usize>()).flat_map(|i| (0.01 * (i % 7) as f32).to_le_bytes()).collect()).collect();
    let views: Vec<(String, TensorView)> =
        shapes.iter().zip(&data).map(|((n, s), d)| (n.clone(), TensorView::new(Dtype::F32, s.clone(), d).unwrap())).collect();
    safetensors::serialize(views, metadata).unwrap()
}

/// Sizes that small files can ask for: an image size the arithmetic would overflow on (a
/// release build wrapped it and loaded a 1-token model "of" 18446744073709551615² pixels), and
/// an MLP-Mixer whose visualiser maps (tokens² a layer, made at load, not in the file) would
/// need gigabytes from a file of 2 MB. Each is a clear error; a sane one of the same kind loads.
#[test]
fn sizes_a_small_file_cannot_ask_for() {
    let config = |img: &str| Some(HashMap::from([("config".to_string(), format!("{{\"img_size\": {img}}}"))]));
    let huge = u64::MAX;
    for (what, img) in [("overflowing", format!("[{huge}, {huge}]")), ("zero", "[0, 4]".to_string()), ("too large", "[8192, 8192]".to_string())] {
        let err =
            Model::load(common::cpu(), &mixer_file(1, 1, 1, config(&img)), None).err().unwrap_or_else(|| panic!("{what} img_size {img} loaded"));
        assert!(err.to_string().contains("image size"), "{what}: {err}");
    }
    assert!(Model::load(common::cpu(), &mixer_file(1, 4, 1, config("[2, 2]")), None).is_ok(), "a 2x2 image of 1-pixel patches loads");
    // 128x128 tokens, 2 layers: 2 GiB of maps from a 0.4 MB file.
    let many = mixer_file(1, 128 * 128, 2, None);
    assert!(many.len() < 1 << 20, "{} bytes", many.len());
    let err = Model::load(common::cpu(), &many, None).err().expect("2 GiB of token maps are refused");
    assert!(err.to_string().contains("token-mixing maps"), "{err}");
    assert!(Model::load(common::cpu(), &mixer_file(1, 64 * 64, 2, None), None).is_ok(), "64x64 tokens (128 MiB of maps) load");
}

/// `Weights::convert_in_slices` converts ahead of `take` (the browser's one-thread build): each
/// tensor then takes to the same bits, and fails with the same error, as one `take` converts
/// itself; a large tensor is converted in more than one slice; the clock decides the pauses;
/// cancelled in a pause, the conversion stops at its next chunk.
#[test]
fn a_conversion_in_slices_takes_the_same_tensors_and_errors() {
    use common::pauses::{self, pause};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokenmix::exec::cpu::Slices;
    use tokenmix::weights::Weights;
    use tokenmix::Cancel;

    // Values every f16 and bf16 holds exactly as its own bits, with a NaN in `nan` far into it.
    let big: Vec<u8> = (0..300_000u32).flat_map(|i| half::f16::from_f32(((i % 977) as f32 - 488.0) / 64.0).to_le_bytes()).collect();
    let nan: Vec<u8> = (0..150_000u32).flat_map(|i| if i == 123_456 { f32::NAN } else { i as f32 * 0.5 }.to_le_bytes()).collect();
    let bf: Vec<u8> = (0..10u32).flat_map(|i| half::bf16::from_f32(i as f32 - 3.0).to_le_bytes()).collect();
    let small: Vec<u8> = [1.5f32, -2.0, 3.25].iter().flat_map(|v| v.to_le_bytes()).collect();
    let views = vec![
        ("big", TensorView::new(Dtype::F16, vec![600, 500], &big).expect("view")),
        ("nan", TensorView::new(Dtype::F32, vec![150_000], &nan).expect("view")),
        ("bf", TensorView::new(Dtype::BF16, vec![2, 5], &bf).expect("view")),
        ("small", TensorView::new(Dtype::F32, vec![3], &small).expect("view")),
    ];
    let file = safetensors::serialize(views, None).expect("serialize");
    // (name, the shape asked for): right, wrong, and a tensor with a NaN.
    let asks: [(&str, &[usize]); 6] =
        [("big", &[600, 500]), ("big", &[500, 600]), ("nan", &[150_000]), ("bf", &[2, 5]), ("small", &[3]), ("small", &[4])];
    let takes = |w: &mut Weights| asks.iter().map(|(n, s)| w.take(n, s).map_err(|e| e.to_string())).collect::<Vec<_>>();
    let want = takes(&mut Weights::parse(&file).expect("parses"));
    assert!(want.iter().filter(|r| r.is_err()).count() == 3 && want.iter().filter(|r| r.is_ok()).count() == 3, "{want:?}");
    assert!(want[2].as_ref().is_err_and(|e| e.contains("non-finite value (NaN) at index 123456")), "{:?}", want[2]);

    let before = pauses::count();
    let mut sliced = Weights::parse(&file).expect("parses");
    pollster::block_on(sliced.convert_in_slices(&Slices { every_ms: 0.0, clock: || 0.0, pause, gemm_macs: usize::MAX }, &Cancel::new()))
        .expect("converts");
    let paused = pauses::count() - before;
    let got = takes(&mut sliced);
    // Compared as bits: f32's NaN is not equal to itself.
    let bits = |r: &[Result<Vec<f32>, String>]| {
        r.iter().map(|r| r.as_ref().map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()).map_err(String::clone)).collect::<Vec<_>>()
    };
    let show = |r: &Result<Vec<u32>, String>| match r {
        Ok(v) => format!("{} values", v.len()),
        Err(e) => e.clone(),
    };
    let same = |got: &[Result<Vec<f32>, String>]| {
        for ((ask, g), w) in asks.iter().zip(bits(got)).zip(bits(&want)) {
            assert!(g == w, "{ask:?} after a conversion in slices: {} where a take gave {}", show(&g), show(&w));
        }
    };
    same(&got);
    // A pause after every chunk: more than one a tensor, as `big` (300 000 values) has several.
    assert!(paused > 4, "{paused} pauses for 4 tensors");

    // The clock decides: a slice that never runs its time never pauses.
    fn ticking() -> f64 {
        static T: AtomicUsize = AtomicUsize::new(0);
        T.fetch_add(1, Ordering::SeqCst) as f64
    }
    let before = pauses::count();
    let mut long = Weights::parse(&file).expect("parses");
    pollster::block_on(long.convert_in_slices(&Slices { every_ms: 1e9, clock: ticking, pause, gemm_macs: usize::MAX }, &Cancel::new()))
        .expect("converts");
    assert_eq!(pauses::count() - before, 0, "no pause within a slice's time");
    same(&takes(&mut long));

    // Cancelled in its second pause: no chunk after it is converted.
    let stop = Cancel::new();
    pauses::cancel_in(2, &stop);
    let mut stopped = Weights::parse(&file).expect("parses");
    let r = pollster::block_on(stopped.convert_in_slices(&Slices { every_ms: 0.0, clock: || 0.0, pause, gemm_macs: usize::MAX }, &stop));
    assert!(matches!(r, Err(Error::Cancelled)), "{r:?}");
    assert_eq!(stop.checks_passed(), 2, "two chunks converted, the third's check stopped it");
    eprintln!("a conversion in slices: {paused} pauses for 4 tensors, the same tensors and errors, stopped in a pause");
}
