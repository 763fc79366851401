//! Token-level class evidence (`Model::explain`) against timm's own tensors: for every golden
//! fixture with an `.explain.safetensors` (written by `tools/make_goldens.py` from timm's
//! `forward_features` and head), on every executor, the maps match timm's at the golden bound
//! and `Σ_t map[c, t] + bias[c]` gives the logits (timm's, and tokenmix's own).

mod common;

use common::{all_devices, fixtures, max_abs, max_abs_diff, max_or_nan, read_tensors, tol, within};
use tokenmix::Model;

#[test]
fn evidence_matches_timm_and_sums_to_the_logits() {
    let dir = fixtures();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".explain.safetensors").map(str::to_string))
        .collect();
    names.sort();
    // Every family has fixtures; an empty or partial folder must not pass.
    for family in ["mixer_", "gmlp_", "resmlp_", "poolformer_"] {
        assert!(names.iter().filter(|n| n.starts_with(family)).count() >= 2, "explain fixtures for {family}: {names:?}");
    }
    let mut failures = Vec::new();
    let mut checked = 0;
    for dev in all_devices() {
        for name in &names {
            let io = read_tensors(&dir.join(format!("{name}.io.safetensors")), &["input", "logits"]);
            let ex = read_tensors(&dir.join(format!("{name}.explain.safetensors")), &["evidence", "bias"]);
            let ((ishape, input), (_, logits)) = (&io[0], &io[1]);
            let ((eshape, evidence), (_, bias)) = (&ex[0], &ex[1]);
            let bytes = std::fs::read(dir.join(format!("{name}.safetensors"))).expect("fixture");
            let model = Model::load(dev.clone(), &bytes, Some([ishape[2], ishape[3]])).expect("fixture loads");
            let got = model.explain_blocking(input).expect("explain");
            assert_eq!([got.grid.0, got.grid.1], [eshape[2], eshape[3]], "{name}: grid");
            assert_eq!(got.approximate, name.starts_with("poolformer"), "{name}: only PoolFormer's split is approximate");
            let map_diff = max_abs_diff(&got.maps, evidence);
            let map_bound = tol::GOLDEN * max_abs(evidence).max(1.0);
            let bias_diff = max_abs_diff(&got.bias, bias);
            let logit_bound = tol::GOLDEN * max_abs(logits).max(1.0);
            // The identity, on tokenmix's own numbers and against timm's logits.
            let classes = got.output.classes;
            let mut own = 0f32;
            let mut timm = 0f32;
            for i in 0..ishape[0] {
                for c in 0..classes {
                    let sum: f32 = got.map(i, c).iter().sum::<f32>() + got.bias[c];
                    own = max_or_nan(own, (sum - got.output.logits[i * classes + c]).abs());
                    timm = max_or_nan(timm, (sum - logits[i * classes + c]).abs());
                }
            }
            eprintln!(
                "{name} [{}]: max|Δmap| {map_diff:.2e} (bound {map_bound:.1e}), |Δbias| {bias_diff:.1e}, |Σmap+bias−logit| own {own:.1e} timm {timm:.1e}",
                dev.label()
            );
            if !(within(map_diff, map_bound) && within(bias_diff, logit_bound) && within(own, logit_bound) && within(timm, logit_bound)) {
                failures.push(format!("{name} on {}: map {map_diff} bias {bias_diff} identity {own}/{timm}", dev.label()));
            }
            checked += 1;
        }
    }
    assert!(checked >= 8, "checked {checked}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn explain_of_a_batch_equals_explain_of_each_image() {
    let dir = fixtures();
    let io = read_tensors(&dir.join("poolformer_d64.io.safetensors"), &["input"]);
    let (ishape, input) = &io[0];
    let bytes = std::fs::read(dir.join("poolformer_d64.safetensors")).expect("fixture");
    for dev in all_devices() {
        let model = Model::load(dev.clone(), &bytes, Some([ishape[2], ishape[3]])).expect("loads");
        let all = model.explain_blocking(input).expect("batch");
        let per = model.input_len();
        for i in 0..ishape[0] {
            let one = model.explain_blocking(&input[i * per..(i + 1) * per]).expect("one");
            for c in 0..one.output.classes {
                assert!(max_abs_diff(one.map(0, c), all.map(i, c)) < 1e-5, "{} image {i} class {c}", dev.label());
            }
        }
        // The plain forward pass is unchanged by the explain plans beside it.
        let plain = model.forward_blocking(input).expect("forward");
        assert!(max_abs_diff(&plain.logits, &all.output.logits) < 1e-5);
    }
}
