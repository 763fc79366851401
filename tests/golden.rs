//! Golden parity with timm: logits of timm's own MlpMixer (MLP-Mixer, gMLP, ResMLP blocks) and
//! MetaFormer (PoolFormer), every parameter re-randomised (see tools/make_goldens.py), against
//! tokenmix on every executor: the WGSL path on the real adapter with every GEMM variant, and
//! the CPU executor.

mod common;

use common::{all_devices, all_variants, all_variants_f16, fixtures, limited, max_abs, max_abs_diff, read_tensors, tol, within};
use tokenmix::{Device, Model, Output};

const FIXTURES: &[&str] = &[
    "mixer_p4_rgb",
    "mixer_p8_grey_nonsquare",
    "mixer_p2_small_stem_f16",
    "mixer_p5_bf16",
    "mixer_p4_d64",
    "mixer_p4_gelu_range",
    "gmlp_p4_rgb",
    "gmlp_grey_nonsquare_f16",
    "gmlp_d64_small_gate",
    "resmlp_p4_bf16",
    "resmlp_grey_nonsquare",
    "poolformer_rgb",
    "poolformer_grey_nonsquare_f16",
    "poolformer_d64",
    "mixer_many_tokens",
    "gmlp_many_tokens",
    "resmlp_many_tokens",
];

/// A tensor's shape and data.
type Tensor = (Vec<usize>, Vec<f32>);

/// A fixture's timm input and logits and its safetensors bytes.
fn fixture(name: &str) -> (Vec<Tensor>, Vec<u8>) {
    let dir = fixtures();
    let io = read_tensors(&dir.join(format!("{name}.io.safetensors")), &["input", "logits"]);
    let bytes = std::fs::read(dir.join(format!("{name}.safetensors"))).expect("fixture");
    (io, bytes)
}

/// Runs every fixture on `dev` and hands each result to `check`: (fixture, model, input shape,
/// timm's logits, tokenmix's output).
fn each_fixture(dev: &Device, mut check: impl FnMut(&str, &Model, &[usize], &[f32], &Output)) {
    for name in FIXTURES {
        let (io, bytes) = fixture(name);
        let (ishape, input) = &io[0];
        let model = Model::load(dev.clone(), &bytes, Some([ishape[2], ishape[3]])).expect("fixture loads");
        let out = model.forward_blocking(input).expect("forward");
        check(name, &model, ishape, &io[1].1, &out);
    }
}

#[test]
fn logits_match_timm() {
    // Every fixture and variant is checked and reported before the test fails.
    let mut failures = Vec::new();
    let mut checked = 0;
    let devices = all_devices();
    for dev in &devices {
        each_fixture(dev, |name, model, _, expected, out| {
            let diff = max_abs_diff(&out.logits, expected);
            let bound = tol::GOLDEN * max_abs(expected).max(1.0);
            eprintln!("{name} [{}]: max|Δlogit| = {diff:.2e} (bound {bound:.1e})", dev.label());
            if !within(diff, bound) {
                failures.push(format!("{name} on {}: max|Δlogit| {diff} > {bound}", dev.label()));
            }
            checked += 1;
            // The pre-upload check (`Arch::widest_activation`, from the config alone) must bound
            // what the loaded layers really allocate per image, or it would let through a model
            // that then fails to bind.
            let (bound_bytes, real_bytes) = (model.info.arch.widest_activation() * 4, model.widest_activation_bytes());
            assert!(bound_bytes >= real_bytes, "{name}: config bound {bound_bytes} B < allocated {real_bytes} B per image");
            // Probabilities are a softmax of those logits.
            let row = &out.probs[..out.classes];
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        });
    }
    assert_eq!(checked, devices.len() * FIXTURES.len(), "every executor ran every fixture");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--precision f16` (f16 GEMM weights and MLP hidden activations), on every GEMM kernel of
/// the adapter: every fixture within a relative logit error of 1e-2 of timm's f32 logits,
/// with timm's top-1 for each image. (f16 keeps 11 significant bits: ~5e-4 relative per value,
/// which the sums average.)
#[test]
fn f16_weights_match_timm_within_their_bound() {
    let mut failures = Vec::new();
    let mut checked = 0;
    let gpus = common::all_variants_f16();
    let argmax = |v: &[f32]| v.iter().enumerate().fold(0, |b, (i, x)| if *x > v[b] { i } else { b });
    for gpu in &gpus {
        each_fixture(&Device::from(gpu.clone()), |name, model, ishape, expected, out| {
            assert_eq!(model.f16_activations(), ["hidden"], "{name}: the MLP hidden activations are stored in f16");
            let diff = max_abs_diff(&out.logits, expected);
            let bound = tol::F16 * max_abs(expected).max(1.0);
            let row = |v: &[f32], i: usize| argmax(&v[i * out.classes..(i + 1) * out.classes]);
            let flips = (0..ishape[0]).filter(|&i| row(&out.logits, i) != row(expected, i)).count();
            eprintln!(
                "{name} [{} f16]: max|Δlogit| = {diff:.2e} (bound {bound:.1e}), top-1 changed for {flips} of {} images",
                gpu.gemm.name(),
                ishape[0]
            );
            if !within(diff, bound) || flips > 0 {
                failures.push(format!("{name} on {} f16: max|Δlogit| {diff} (bound {bound}), {flips} top-1 changes", gpu.gemm.name()));
            }
            checked += 1;
        });
    }
    assert_eq!(checked, gpus.len() * FIXTURES.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Under `--precision f16` the GPU executor stores the MLP hidden activations in f16 (so the
/// f16 golden test above runs every fixture with them), and nothing else; f32 devices and the
/// CPU executor store none.
#[test]
fn f16_devices_store_the_hidden_activations_in_f16() {
    let bytes = std::fs::read(fixtures().join("gmlp_p4_rgb.safetensors")).expect("fixture");
    let f16 = Model::load(Device::from(common::all_variants_f16().remove(0)), &bytes, None).expect("loads");
    assert_eq!(f16.f16_activations(), ["hidden"]);
    for dev in [common::gpu().into(), common::cpu()] {
        let model = Model::load(dev, &bytes, None).expect("loads");
        assert!(model.f16_activations().is_empty(), "{}", model.backend());
    }
}

#[test]
fn metadata_image_size_is_used() {
    // The non-square fixture carries config.img_size in its metadata: no hint needed.
    let bytes = std::fs::read(fixtures().join("mixer_p8_grey_nonsquare.safetensors")).expect("fixture");
    let model = Model::load(common::gpu(), &bytes, None).expect("loads");
    assert_eq!(model.info.arch.input_shape(), [1, 24, 40]);
}

#[test]
fn batch_rows_are_independent() {
    // The same image at every position of a batch of 5 gives the same logits as alone.
    let dir = fixtures();
    let io = read_tensors(&dir.join("mixer_p4_rgb.io.safetensors"), &["input", "logits"]);
    let (_, input) = &io[0];
    let bytes = std::fs::read(dir.join("mixer_p4_rgb.safetensors")).expect("fixture");
    for dev in [common::gpu().into(), common::cpu()] {
        let model = Model::load(dev, &bytes, None).expect("loads");
        let per = model.input_len();
        let one = model.forward_blocking(&input[..per]).expect("forward");
        let five: Vec<f32> = input[..per].iter().cycle().take(5 * per).copied().collect();
        let out = model.forward_blocking(&five).expect("forward");
        for i in 0..5 {
            let row = &out.logits[i * out.classes..(i + 1) * out.classes];
            assert!(max_abs_diff(row, &one.logits) < 1e-6, "{}", model.backend());
        }
    }
}

/// `bench --profile`: a profiled forward pass (one compute pass per step with GPU timestamps,
/// or the CPU clock per step) returns exactly the logits of a plain one, and times the same
/// steps on every executor: per kind of step ([`tokenmix::net::Net::step_kind`]), as many
/// dispatches on each GPU kernel as the CPU executor runs steps. Bad input is refused and
/// leaves the model usable. Every GEMM kernel at f32 and at f16 (coop where there are
/// cooperative matrices), and the CPU executor.
#[test]
fn a_profile_times_every_step_and_changes_no_result() {
    use std::collections::BTreeMap;
    let mut devices = all_devices();
    devices.extend(all_variants_f16().into_iter().map(Device::from));
    let mut checked = 0;
    for name in ["mixer_p4_rgb", "gmlp_p4_rgb", "resmlp_p4_bf16", "poolformer_rgb"] {
        let (io, bytes) = fixture(name);
        let (ishape, input) = &io[0];
        let mut counts: Vec<(String, BTreeMap<String, usize>)> = Vec::new();
        for dev in &devices {
            let label = format!("{name} [{} {}]", dev.label(), dev.precision().0);
            let model = Model::load(dev.clone(), &bytes, Some([ishape[2], ishape[3]])).expect("fixture loads");
            let plain = model.forward_blocking(input).expect("forward");
            assert!(model.profile(&[]).is_err() && model.profile(&input[1..]).is_err(), "{label}: bad input refused");
            let too_many: Vec<f32> = input.iter().cycle().take(65 * model.input_len()).copied().collect();
            assert!(model.profile(&too_many).is_err(), "{label}: more than one plan's batch refused");
            let (out, p) = model.profile(input).unwrap_or_else(|e| panic!("{label}: {e}"));
            eprintln!("{label}:\n{}", p.lines().join("\n"));
            assert_eq!(out.logits, plain.logits, "{label}: profiling changed the logits");
            assert_eq!(out.probs, plain.probs, "{label}: profiling changed the probabilities");
            assert_eq!(p.batch, ishape[0], "{label}");
            assert!(p.rows.iter().all(|r| r.ms.is_finite() && r.ms >= 0.0 && r.steps > 0), "{label}: {:?}", p.rows);
            assert!(p.total_ms() > 0.0 && p.span_ms > 0.0, "{label}: nothing was timed");
            if let Some(gpu) = dev.gpu() {
                // A software rasteriser runs one pass after the other: the steps fit in the span.
                if tokenmix::exec::is_software(&gpu.info) {
                    assert!(p.total_ms() <= p.span_ms * 1.01 + 1e-3, "{label}: {} ms of steps in a {} ms span", p.total_ms(), p.span_ms);
                }
            }
            let mut per_kind = BTreeMap::new();
            // What only one executor has: the GPU's copies and softmax, the CPU's stage snapshots.
            for r in p.rows.iter().filter(|r| !r.kernel.starts_with("copy") && r.kind != "softmax" && r.kind != "snapshot") {
                *per_kind.entry(r.kind.clone()).or_default() += r.steps;
            }
            assert!(per_kind.keys().any(|k| k.starts_with("linear")), "{label}: no GEMM timed: {per_kind:?}");
            let gemm = |k: &String| ["linear", "tokens", "conv"].iter().any(|g| k.starts_with(g));
            assert!(per_kind.keys().any(|k| !gemm(k)), "{label}: only GEMMs timed: {per_kind:?}");
            counts.push((label, per_kind));
            checked += 1;
        }
        let (first, want) = &counts[0];
        for (label, got) in &counts[1..] {
            assert_eq!(got, want, "{label} timed other steps than {first}");
        }
    }
    assert_eq!(checked, 4 * devices.len(), "every executor profiled every family");
}

/// Bytes of the largest tensor in a safetensors file (as f32, the way tokenmix uploads it).
fn largest_weight_bytes(bytes: &[u8]) -> (String, u64) {
    let st = safetensors::SafeTensors::deserialize(bytes).expect("fixture parses");
    st.tensors()
        .into_iter()
        .map(|(n, t)| (n, t.shape().iter().product::<usize>() as u64 * 4))
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .expect("tensors")
}

#[test]
fn binding_limit_splits_batches_and_weights_instead_of_failing() {
    // An adapter whose storage bindings hold one image's widest activation and a half: a batch
    // of 2 cannot be bound at once, so the model runs it in chunks of 1. On the `many_tokens`
    // fixtures the token-mixing weights (Mixer fc1/fc2, gMLP's SGU proj, ResMLP's
    // linear_tokens) and the 1000-class head are larger than that limit, so they are uploaded
    // in row blocks and each of their GEMMs runs as one dispatch per block — on every GEMM
    // variant (the texture kernel splits token mixing along N, the others along M). The logits
    // must still match timm's.
    let mut split = 0;
    for gpu in all_variants() {
        for name in
            ["mixer_p2_small_stem_f16", "gmlp_grey_nonsquare_f16", "poolformer_rgb", "mixer_many_tokens", "gmlp_many_tokens", "resmlp_many_tokens"]
        {
            let dir = fixtures();
            let io = read_tensors(&dir.join(format!("{name}.io.safetensors")), &["input", "logits"]);
            let (ishape, input) = &io[0];
            let bytes = std::fs::read(dir.join(format!("{name}.safetensors"))).expect("fixture");
            let img = Some([ishape[2], ishape[3]]);
            let widest = Model::load(gpu.clone(), &bytes, img).expect("loads").widest_activation_bytes();
            let limit = widest * 3 / 2;
            let (big, big_bytes) = largest_weight_bytes(&bytes);
            let model = Model::load(limited(gpu.gemm, limit), &bytes, img).expect("loads under the lowered limit");
            assert_eq!(model.max_batch(), 1, "{name}");
            assert!(ishape[0] >= 2, "{name}: the fixture has a batch");
            let out = model.forward_blocking(input).expect("a batch of 2 runs in chunks");
            let diff = max_abs_diff(&out.logits, &io[1].1);
            let blocks = big_bytes.div_ceil(limit);
            eprintln!(
                "{name} [{}] under a {limit}-byte binding limit (largest weight `{big}` {big_bytes} bytes: {blocks} block(s)): max|Δlogit| = {diff:.2e}",
                gpu.gemm.name()
            );
            assert!(diff <= tol::GOLDEN * max_abs(&io[1].1).max(1.0), "{name} [{}]: {diff}", gpu.gemm.name());
            if name.ends_with("many_tokens") {
                assert!(big_bytes > limit, "{name}: the largest weight must pass the lowered limit to test splitting");
                split += 1;
            }
        }
    }
    assert!(split >= 3, "the weight-splitting fixtures ran");
    // Below one image's activations nothing can run: refused before any upload, naming what
    // needs the room and the bound. (A weight row is never wider than the widest activation,
    // so the one-row refusal is tested on `Matrix` itself in tests/kernels.rs.)
    let bytes = std::fs::read(fixtures().join("mixer_p2_small_stem_f16.safetensors")).expect("fixture");
    let err = Model::load(limited(common::gpu().gemm, 1024), &bytes, Some([14, 14])).err().expect("refused").to_string();
    assert!(err.contains("binding limit of 1024 bytes") && err.contains("activation"), "{err}");
}

/// The CPU executor's answers do not depend on how its work is spread over threads: every
/// fixture gives the same bits with the shipped thresholds (these small nets run on the
/// calling thread, their loops in order) and with every loop and GEMM split over rayon's pool
/// and the forward pass handed to the pool as a whole (`split_everything`, which the threaded
/// wasm suite uses too). This binary's other tests may run split from then on: the same bits.
#[test]
fn cpu_results_do_not_depend_on_the_split_over_threads() {
    let cpu = common::cpu();
    let mut first = Vec::new();
    each_fixture(&cpu, |name, _, _, _, out| first.push((name.to_string(), out.logits.clone())));
    tokenmix::exec::cpu::split_everything();
    let mut checked = 0;
    each_fixture(&cpu, |name, _, _, _, out| {
        let (before, logits) = &first[checked];
        assert_eq!(before, name);
        assert!(
            logits.iter().zip(&out.logits).all(|(a, b)| a.to_bits() == b.to_bits()) && logits.len() == out.logits.len(),
            "{name}: split over the pool, max|Δ| {:.2e}",
            max_abs_diff(logits, &out.logits)
        );
        checked += 1;
    });
    assert_eq!(checked, FIXTURES.len(), "every fixture ran twice");
}

/// The comparisons every golden and kernel test makes fail on a NaN output: `f32::max` returns
/// the other argument for a NaN, so a maximum folded with it scored an all-NaN output 0.
#[test]
fn a_nan_output_never_matches() {
    let want = [1.0f32, -2.0, 0.5];
    for got in [[f32::NAN; 3], [1.0, f32::NAN, 0.5], [f32::NAN, -2.0, 0.5], [1.0, -2.0, f32::NAN]] {
        let diff = max_abs_diff(&got, &want);
        assert!(!within(diff, tol::GOLDEN * max_abs(&want).max(1.0)), "{got:?}: max|Δ| {diff} passes");
        assert!(max_abs(&got).is_nan(), "{got:?}");
    }
    assert_eq!(max_abs_diff(&[1.0, -2.5, 0.5], &want), 0.5, "and finite outputs still compare");
}

/// A CPU pass in slices (`Model::run_in_slices`, the browser's one-thread build) is the same
/// pass: on every family, pausing after every step, and then also after every 8-column block
/// of every GEMM, gives the same bits as one run (logits, the per-token split, classify's
/// input and stage energy), each pause lets other work run, a token cancelled during a pause
/// stops the pass where it paused, and two passes that interleave at their pauses (each in a
/// workspace of its own) each give their own result.
#[test]
fn a_cpu_pass_in_slices_gives_the_same_results_and_stops_where_it_paused() {
    use common::pauses::{self, pause};
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use tokenmix::exec::cpu::Slices;
    use tokenmix::{Cancel, Error};
    // Every step its own slice; then every block of a GEMM's columns too (the least a block
    // holds is one tile, 8 columns).
    let by_step = Slices { every_ms: 0.0, clock: || 0.0, pause, gemm_macs: usize::MAX };
    let by_block = Slices { gemm_macs: 1, ..by_step };
    let mut checked = 0;
    for name in ["mixer_p4_rgb", "gmlp_p4_rgb", "resmlp_p4_bf16", "poolformer_rgb"] {
        let mut per_pass = Vec::new();
        for (how, slices) in [("steps", by_step), ("GEMM blocks", by_block)] {
            let (io, bytes) = fixture(name);
            let (ishape, input) = &io[0];
            let size = Some([ishape[2], ishape[3]]);
            let plain = Model::load(common::cpu(), &bytes, size).expect("fixture loads");
            let mut sliced = Model::load(common::cpu(), &bytes, size).expect("fixture loads");
            sliced.run_in_slices(Some(slices));
            let one = &input[..plain.input_len()];
            // Natively the `gemm` crate chooses its blocking by a product's size, so a GEMM run in
            // blocks of columns may sum in another order: the same within the golden tolerance
            // there. The wasm kernel's blocking does not depend on the size: bit for bit in the
            // browser (tests/wasm.rs), where passes run in slices.
            let exact = how == "steps";
            let same = |a: &[f32], b: &[f32], what: &str| {
                if exact {
                    assert_eq!(a, b, "{name}: {what} in slices of {how}");
                } else {
                    let d = max_abs_diff(a, b);
                    assert!(within(d, tol::GOLDEN * max_abs(a).max(1.0)), "{name}: {what} in slices of {how}: max|Δ| {d}");
                }
            };

            let want = plain.forward_blocking(input).expect("forward");
            let before = pauses::count();
            let fresh = Cancel::new();
            let got = pollster::block_on(sliced.forward_cancellable(input, &fresh)).expect("a pass in slices");
            let pauses = pauses::count() - before;
            same(&want.logits, &got.logits, "the logits");
            same(&want.probs, &got.probs, "the probabilities");
            // A pause between every two slices (steps, or GEMM blocks), each followed by a check.
            assert!(pauses >= 10, "{name}: {pauses} pauses");
            assert_eq!(fresh.checks_passed(), pauses + 1, "{name}: a check before every slice");
            per_pass.push(pauses);
            let diff = max_abs_diff(&got.logits, &io[1].1);
            assert!(within(diff, tol::GOLDEN * max_abs(&io[1].1).max(1.0)), "{name}: {diff} from timm");

            let (a, b) = (plain.explain_blocking(one).expect("explain"), pollster::block_on(sliced.explain(one)).expect("explain in slices"));
            same(&a.maps, &b.maps, "the per-token split");
            same(&a.bias, &b.bias, "the split's bias");
            same(&a.output.logits, &b.output.logits, "the explained logits");

            let (w, h) = (37, 23);
            let rgba: Vec<u8> = (0..w * h * 4).map(|i| (i * 7 % 251) as u8).collect();
            let (a, b) = (
                pollster::block_on(plain.classify_rgba(&rgba, w, h, || 0.0)).expect("classify"),
                pollster::block_on(sliced.classify_rgba(&rgba, w, h, || 0.0)).expect("classify in slices"),
            );
            assert_eq!(a.input, b.input, "{name}: classify's input in slices");
            same(&a.output.logits, &b.output.logits, "classify's logits");
            assert_eq!(a.stage_energy.len(), b.stage_energy.len(), "{name}: the stages in slices");
            for ((sa, ea), (sb, eb)) in a.stage_energy.iter().zip(&b.stage_energy) {
                assert_eq!(sa, sb, "{name}: a stage's grid in slices");
                same(ea, eb, "a stage's energy");
            }
            if name.starts_with("poolformer") {
                assert!(!b.stage_energy.is_empty(), "{name}: PoolFormer has stages");
            }

            // Cancelled during its third pause: the pass stops before its fourth slice.
            let stop = Cancel::new();
            pauses::cancel_in(3, &stop);
            let got = pollster::block_on(sliced.forward_cancellable(input, &stop));
            pauses::clear();
            assert!(matches!(got, Err(Error::Cancelled)), "{name}: cancelled in a pause gave {:?}", got.map(|_| ()));
            assert_eq!(stop.checks_passed(), 3, "{name}: three slices ran, the fourth's check stopped it");
            let again = pollster::block_on(sliced.forward(input)).expect("a pass after the stopped one");
            same(&want.logits, &again.logits, "the model after a stopped pass");

            // Two passes interleaved at their pauses, on other inputs: each its own result.
            let other: Vec<f32> = input.iter().map(|v| -0.5 * v + 0.25).collect();
            let want_other = plain.forward_blocking(&other).expect("forward");
            let mut first = std::pin::pin!(sliced.forward(input));
            let mut second = std::pin::pin!(sliced.forward(&other));
            let mut cx = Context::from_waker(Waker::noop());
            let (mut r1, mut r2, mut polls) = (None, None, 0);
            while r1.is_none() || r2.is_none() {
                if r1.is_none() {
                    if let Poll::Ready(r) = first.as_mut().poll(&mut cx) {
                        r1 = Some(r);
                    }
                }
                if r2.is_none() {
                    if let Poll::Ready(r) = second.as_mut().poll(&mut cx) {
                        r2 = Some(r);
                    }
                }
                polls += 1;
            }
            assert!(polls > 10, "{name}: the passes interleaved ({polls} rounds)");
            same(&want.logits, &r1.and_then(|r| r.ok()).expect("the first of two interleaved passes").logits, "the first of two interleaved passes");
            same(&want_other.logits, &r2.and_then(|r| r.ok()).expect("the second").logits, "the second of two interleaved passes");
            eprintln!(
                "{name}: the same {} in slices of {how} ({pauses} pauses a pass), stopped in a pause, interleaved",
                if exact { "bits" } else { "logits" }
            );
            checked += 1;
        }
        // Blocks of GEMMs' columns paused within steps: more pauses than by steps alone.
        assert!(per_pass[1] > per_pass[0], "{name}: {per_pass:?} pauses by steps and by GEMM blocks");
    }
    assert_eq!(checked, 8, "every family ran in slices of steps and of GEMM blocks");
}

/// A load whose conversion runs in slices (the browser's one-thread build): on both executors,
/// the same model, bit for bit, with a pause after every chunk of every tensor; cancelled in a
/// pause, it stops there, in its conversion, and a load after it is as before.
#[test]
fn a_load_in_slices_gives_the_same_model_and_stops_in_its_conversion() {
    use common::pauses::{self, pause};
    use tokenmix::exec::cpu::Slices;
    use tokenmix::{Cancel, Error};

    let every_chunk = Slices { every_ms: 0.0, clock: || 0.0, pause, gemm_macs: usize::MAX };
    let load = |dev: &Device, bytes: &[u8], size, cancel: &Cancel| {
        pollster::block_on(Model::load_scoped_in_slices(dev.clone(), bytes, size, cancel, Some(&every_chunk)))
    };
    let mut checked = 0;
    for dev in [Device::from(common::gpu()), common::cpu()] {
        for name in ["mixer_p4_rgb", "gmlp_p4_rgb", "resmlp_p4_bf16", "poolformer_rgb"] {
            let (io, bytes) = fixture(name);
            let (ishape, input) = &io[0];
            let size = Some([ishape[2], ishape[3]]);
            let tensors = tokenmix::inspect(&bytes, size).expect("fixture inspects").weights.names().count();
            let plain = Model::load(dev.clone(), &bytes, size).expect("fixture loads");
            let before = pauses::count();
            let fresh = Cancel::new();
            let sliced = load(&dev, &bytes, size, &fresh).expect("a load in slices");
            let pauses = pauses::count() - before;
            // At least one pause a tensor: the conversion gave the thread back all along.
            assert!(pauses >= tensors, "{name} on {}: {pauses} pauses for {tensors} tensors", dev.label());
            let (a, b) = (plain.forward_blocking(input).expect("forward"), sliced.forward_blocking(input).expect("forward"));
            assert_eq!(a.logits, b.logits, "{name} on {}: the model loaded in slices", dev.label());
            assert_eq!(plain.info.params, sliced.info.params);
            let diff = max_abs_diff(&b.logits, &io[1].1);
            assert!(within(diff, tol::GOLDEN * max_abs(&io[1].1).max(1.0)), "{name} on {}: {diff} from timm", dev.label());

            // Cancelled in its third pause: the load stops before its fourth chunk, still in
            // the conversion (which has more than three), and says so.
            let stop = Cancel::new();
            pauses::cancel_in(3, &stop);
            let got = load(&dev, &bytes, size, &stop);
            pauses::clear();
            assert!(matches!(got, Err(Error::Cancelled)), "{name}: cancelled in a pause gave {:?}", got.map(|_| ()));
            // The load's first check, then one before each of the three chunks that ran.
            assert_eq!(stop.checks_passed(), 4, "{name}: three chunks converted, the fourth's check stopped it");
            let again = load(&dev, &bytes, size, &Cancel::new()).expect("a load after the stopped one");
            assert_eq!(again.forward_blocking(input).expect("forward").logits, a.logits, "{name}: loads as before");
            eprintln!("{name} on {}: the same bits loaded in slices ({pauses} pauses for {tensors} tensors), stopped in its conversion", dev.label());
            checked += 1;
        }
    }
    assert_eq!(checked, 8, "every family loaded in slices on both executors");
}
