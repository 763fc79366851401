//! The insight module (`tokenmix::insight`, `Model::insight`) against an independent f64
//! reference (`tools/make_insight_goldens.py`: numpy FFTs, PyTorch autograd for GELU', timm's
//! own initialisation): structure figures, offset kernels, Mixer unit frequencies, pairs and
//! display order, and the initialisation figures, on golden fixtures and the shipped models;
//! a Mixer's linearised maps computed lazily.

mod common;

use common::{fixtures, read_tensors};
use serde_json::Value;
use tokenmix::{Device, Model};

fn reference() -> Value {
    let text = std::fs::read_to_string(fixtures().join("insight.json")).expect("tests/fixtures/insight.json");
    serde_json::from_str(&text).expect("insight.json parses")
}

fn load(name: &str, file: &str) -> Model {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(root.join(file)).expect("model file");
    // Golden fixtures take their image size from the inputs timm ran.
    let io = fixtures().join(format!("{name}.io.safetensors"));
    let size = io.exists().then(|| {
        let t = read_tensors(&io, &["input"]);
        [t[0].0[2], t[0].0[3]]
    });
    Model::load(Device::cpu(), &bytes, size).expect("model loads")
}

fn f(v: &Value) -> f64 {
    v.as_f64().expect("a number")
}

#[test]
fn figures_kernels_and_units_match_the_reference() {
    let r = reference();
    let models = r["models"].as_object().expect("models");
    let kinds: std::collections::BTreeSet<&str> = models.values().filter_map(|m| m["kind"].as_str()).collect();
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), ["gmlp", "mixer", "resmlp"], "every learned mixer kind is covered");
    let mut checked_layers = 0;
    let mut checked_units = 0;
    for (name, m) in models {
        let model = load(name, m["file"].as_str().expect("file"));
        let layers = m["layers"].as_array().expect("layers");
        assert_eq!(model.mixing_layers(), layers.len(), "{name}: layer count");
        for (l, want) in layers.iter().enumerate() {
            let got = model.insight(l).expect("insight");
            assert_eq!(got.kind, m["kind"].as_str().unwrap_or(""), "{name}");
            let figs = got.figures.expect("figures");
            for (key, value) in [("locality", figs.locality), ("shiftInvariance", figs.shift_invariance), ("lowFrequency", figs.low_frequency)] {
                let w = f(&want["figures"][key]);
                assert!((value - w).abs() <= 1e-5 * w.abs().max(1.0), "{name} layer {l} {key}: {value} vs {w}");
            }
            let k = got.offset_kernel.expect("offset kernel");
            let wk = want["offsetKernel"].as_array().expect("kernel");
            assert_eq!(k.values.len(), wk.len(), "{name} layer {l}: kernel size");
            let scale = wk.iter().map(|v| f(v).abs()).fold(0.0, f64::max).max(1e-30);
            for (a, b) in k.values.iter().zip(wk) {
                assert!((*a as f64 - f(b)).abs() <= 1e-5 * scale, "{name} layer {l}: offset kernel {a} vs {b}");
            }
            if got.kind == "mixer" {
                let wu = want["units"].as_array().expect("units");
                assert_eq!(got.units.len(), wu.len());
                for (u, w) in got.units.iter().zip(wu) {
                    let want = (w["ky"].as_u64(), w["kx"].as_u64(), w["pairedWith"].as_i64());
                    assert_eq!((Some(u.ky as u64), Some(u.kx as u64), Some(u.paired_with)), want, "{name} layer {l} unit {}", u.unit);
                    checked_units += 1;
                }
                let groups: Vec<Vec<usize>> = serde_json::from_value(want["groups"].clone()).expect("groups");
                let show = |g: &[Vec<usize>]| g.iter().map(|g| format!("{g:?}")).collect::<Vec<_>>().join(" ");
                assert_eq!(
                    got.groups,
                    groups,
                    "{name} layer {l}: display order\n got {}\nwant {}\n{:?}",
                    show(&got.groups),
                    show(&groups),
                    got.units
                );
                assert_eq!(got.pairs, groups.iter().filter(|g| g.len() == 2).count());
            }
            checked_layers += 1;
        }
    }
    assert!(checked_layers >= 20 && checked_units >= 100, "{checked_layers} layers, {checked_units} units");
}

#[test]
fn initialisation_figures_match_timms_init() {
    // tokenmix draws timm's distributions itself (8 seeds); the reference averaged 16 fresh
    // timm models. Their means agree within 5 standard errors of the difference.
    let r = reference();
    let inits = r["init"].as_object().expect("init");
    assert!(inits.len() >= 3, "init references for every learned mixer kind");
    for (name, want) in inits {
        let grid = want["grid"].as_array().expect("grid");
        let grid = (grid[0].as_u64().unwrap_or(0) as usize, grid[1].as_u64().unwrap_or(0) as usize);
        let kind = want["kind"].as_str().expect("kind");
        // fc1's rows: the Mixer's token-MLP width, else the token count.
        let rows = want["rows"].as_u64().expect("rows") as usize;
        let got = tokenmix::insight::init_figures(kind, grid, rows);
        let seeds = want["seeds"].as_f64().unwrap_or(1.0);
        for (key, value) in [("locality", got.locality), ("shiftInvariance", got.shift_invariance), ("lowFrequency", got.low_frequency)] {
            let (mean, std) = (f(&want["mean"][key]), f(&want["std"][key]));
            let bound = 5.0 * std * (1.0 / tokenmix::insight::INIT_DRAWS as f64 + 1.0 / seeds).sqrt() + 1e-6;
            eprintln!("{name} init {key}: tokenmix {value:.4}, timm {mean:.4} ± {std:.4} (bound {bound:.4})");
            assert!((value - mean).abs() <= bound, "{name} init {key}: {value} vs timm {mean} ± {std}");
        }
    }
}

#[test]
fn a_layer_past_the_end_is_an_error() {
    let model = Model::load(Device::cpu(), tokenmix::DEFAULT_MODEL, None).expect("default model");
    let err = model.insight(model.mixing_layers()).expect_err("an error").to_string();
    assert!(err.contains("token-mixing layers"), "{err}");
}

/// A Mixer's linearised token maps are computed when a layer's insight is first asked for, not
/// at load (24 layers of 196 x 196 x 512 multiply-adds for a mixer_l16: seconds in a browser),
/// and then agree with `fc2 · diag(GELU'(b1)) · fc1` computed here in f64 (GELU' from Φ by
/// Simpson's rule, apart from insight.rs's erf series).
#[test]
fn a_mixers_token_maps_are_computed_when_first_asked_for() {
    use tokenmix::models::TokenMap;
    let model = Model::load(Device::cpu(), tokenmix::DEFAULT_MODEL, None).expect("the embedded Mixer loads");
    let layers = model.mixing_layers();
    assert!(layers > 1, "a model with several layers ({layers})");
    let computed = |l: usize| match &model.token_mixing(l).expect("a layer").map {
        TokenMap::Linearised { map, .. } => map.get().is_some(),
        other => panic!("layer {l}: a Mixer's map is linearised, not {other:?}"),
    };
    assert_eq!((0..layers).filter(|&l| computed(l)).count(), 0, "no map computed at load");
    model.insight(1).expect("layer 1's insight");
    assert_eq!((0..layers).map(computed).collect::<Vec<_>>(), (0..layers).map(|l| l == 1).collect::<Vec<_>>(), "layer 1's map only");
    // Against the plain loop, from the layer's own weights.
    let t = model.token_mixing(1).expect("layer 1");
    let TokenMap::Linearised { b1, fc2, .. } = &t.map else { unreachable!() };
    let (tokens, hidden) = (t.cols, t.rows);
    let gelu_slope = |x: f64| {
        // d/dx x Φ(x), Φ from the erf integral by Simpson's rule (independent of insight.rs's series).
        let n = 2000;
        let h = x / n as f64;
        let g = |s: f64| (-s * s / 2.0).exp();
        let integral = if x == 0.0 {
            0.0
        } else {
            h / 3.0
                * (0..=n)
                    .map(|i| {
                        g(i as f64 * h)
                            * if i == 0 || i == n {
                                1.0
                            } else if i % 2 == 1 {
                                4.0
                            } else {
                                2.0
                            }
                    })
                    .sum::<f64>()
        };
        let phi_cdf = 0.5 + integral / std::f64::consts::TAU.sqrt();
        phi_cdf + x * g(x) / std::f64::consts::TAU.sqrt()
    };
    let map = t.token_map().expect("a map");
    let mut worst = 0f64;
    for a in 0..tokens {
        for b in 0..tokens {
            let want: f64 = (0..hidden).map(|j| fc2[a * hidden + j] as f64 * gelu_slope(b1[j] as f64) * t.data[j * tokens + b] as f64).sum();
            worst = worst.max((map[a * tokens + b] as f64 - want).abs() / (1e-3 + want.abs()));
        }
    }
    assert!(worst < 1e-5, "the linearised map against the plain loop: relative error {worst}");
}
