//! Every step of the network description, alone, on every executor — the WGSL path with each
//! GEMM variant the adapter has (lavapipe in CI) and the CPU executor — against plain f64 CPU
//! references on seeded random data: GEMM kinds (Linear, token mixing, convolution NCHW/NHWC)
//! with every epilogue, LayerNorm on a strided view, Affine, GroupNorm, pooling at every
//! border, mean over tokens. Tolerances are the named ones of the WGSL kernel tests.

mod common;

use common::{
    all_devices, conv_reference, gelu, group_norm_reference, layer_norm_reference, max_abs, max_abs_diff, mean_tokens_reference, pool_reference,
    random, tol,
};
use tokenmix::exec::run_slots;
use tokenmix::net::{self, ConvGeometry, Gemm, GemmKind, Slot, Step, Tensor, View, W};

fn tensor(name: &str, shape: &[usize], data: Vec<f32>) -> Tensor {
    Tensor { name: name.into(), shape: shape.to_vec(), data }
}

/// Runs one step with these weights and slot contents on every executor; `check` compares the
/// slots afterwards with the reference. Fails loudly when no executor ran.
fn on_every_executor(weights: impl Fn() -> Vec<Tensor>, step: Step, batch: usize, inputs: &[(Slot, Vec<f32>)], check: impl Fn(&str, &[Vec<f32>])) {
    let devices = all_devices();
    let mut ran = 0;
    for dev in &devices {
        let net = net::from_parts(weights(), vec![step.clone()], 1, 1).expect("a valid single-step net");
        let slots = run_slots(dev, net, batch, inputs).unwrap_or_else(|e| panic!("{}: {e}", dev.label()));
        check(&dev.label(), &slots);
        ran += 1;
    }
    assert!(ran > 0 && ran == devices.len(), "every executor ran");
}

#[derive(Clone, Copy, Debug)]
struct Epilogue {
    bias: bool,
    scale: bool,
    gelu: bool,
    gate: bool,
    residual: bool,
}

const EPILOGUES: &[Epilogue] = &[
    Epilogue { bias: false, scale: false, gelu: false, gate: false, residual: false },
    Epilogue { bias: true, scale: false, gelu: true, gate: false, residual: false },
    Epilogue { bias: true, scale: true, gelu: false, gate: false, residual: true },
    Epilogue { bias: false, scale: true, gelu: true, gate: false, residual: true },
    Epilogue { bias: true, scale: false, gelu: false, gate: true, residual: false },
    Epilogue { bias: false, scale: false, gelu: false, gate: false, residual: true },
];

/// `c (+)= gate * (act(acc + bias) * scale)` in f64.
fn epilogue(e: Epilogue, acc: f64, bias: f64, scale: f64, gate: f64, c0: f64) -> f32 {
    let mut v = acc + if e.bias { bias } else { 0.0 };
    if e.gelu {
        v = gelu(v);
    }
    if e.scale {
        v *= scale;
    }
    if e.gate {
        v *= gate;
    }
    (if e.residual { c0 + v } else { v }) as f32
}

fn with_epilogue(mut g: Gemm, e: Epilogue, gate: View) -> Gemm {
    if e.bias {
        g = g.bias(W(1));
    }
    if e.scale {
        g = g.scale(Some(W(2)));
    }
    if e.gelu {
        g = g.gelu();
    }
    if e.gate {
        g = g.gate(gate);
    }
    if e.residual {
        g = g.residual();
    }
    g
}

#[test]
fn linear_gemm_matches_reference() {
    // (batch, rows per image, k, n), not multiples of any tile; a strided, offset A view.
    for (case, &(batch, rows, k, n)) in [(1, 1, 1, 1), (2, 7, 13, 5), (2, 33, 64, 65), (3, 9, 196, 8), (1, 70, 3, 129)].iter().enumerate() {
        for (ei, &e) in EPILOGUES.iter().enumerate() {
            let seed = 1000 + 100 * case as u64 + ei as u64 * 7;
            let (lda, off) = (k + 3, 2);
            // Row r of A at off + r * lda: the last row ends inside batch * rows * lda floats.
            let a = random(batch * rows * lda, seed);
            let (w, bias, scale) = (random(n * k, seed + 1), random(n, seed + 2), random(n, seed + 3));
            let (c0, gate) = (random(batch * rows * n, seed + 4), random(batch * rows * n, seed + 5));
            let step = Step::Gemm(with_epilogue(
                Gemm::new(GemmKind::Linear { rows, a: View { slot: Slot::Xn, off, ld: lda, bs: rows * lda } }, W(0), View::dense(Slot::X, rows, n)),
                e,
                View::dense(Slot::Hidden, rows, n),
            ));
            let weights = || vec![tensor("w", &[n, k], w.clone()), tensor("bias", &[n], bias.clone()), tensor("scale", &[n], scale.clone())];
            let mut want = vec![0f32; batch * rows * n];
            for r in 0..batch * rows {
                for j in 0..n {
                    let acc: f64 = (0..k).map(|kk| a[off + r * lda + kk] as f64 * w[j * k + kk] as f64).sum();
                    let at = r * n + j;
                    want[at] = epilogue(e, acc, bias[j] as f64, scale[j] as f64, gate[at] as f64, c0[at] as f64);
                }
            }
            let mut inputs = vec![(Slot::Xn, a.clone()), (Slot::X, c0.clone())];
            if e.gate {
                inputs.push((Slot::Hidden, gate.clone()));
            }
            on_every_executor(weights, step, batch, &inputs, |dev, slots| {
                let got = &slots[Slot::X.index()][..want.len()];
                let diff = max_abs_diff(got, &want);
                let bound = tol::GEMM * (k as f32).sqrt().max(1.0) * max_abs(&want).max(1.0);
                assert!(diff <= bound, "{dev} linear {batch}x{rows}x{k}x{n} {e:?}: diff {diff} > {bound}");
            });
        }
    }
}

#[test]
fn token_mixing_gemm_matches_reference() {
    // C[b] (+)= gate ⊙ (act(W · X[b] + bias per token) * scale per channel), X [tin, d].
    for (case, &(batch, tout, tin, d)) in [(2, 13, 49, 20), (3, 40, 16, 64), (2, 7, 9, 128), (1, 1, 1, 1)].iter().enumerate() {
        for (ei, &e) in EPILOGUES.iter().enumerate() {
            let seed = 2000 + 100 * case as u64 + ei as u64 * 7;
            let (w, x) = (random(tout * tin, seed), random(batch * tin * d, seed + 1));
            let (bias, scale) = (random(tout, seed + 2), random(d, seed + 3));
            let (c0, gate) = (random(batch * tout * d, seed + 4), random(batch * tout * d, seed + 5));
            let step = Step::Gemm(with_epilogue(
                Gemm::new(GemmKind::Tokens { x: View::dense(Slot::Xn, tin, d), channels: d }, W(0), View::dense(Slot::X, tout, d)),
                e,
                View::dense(Slot::Hidden, tout, d),
            ));
            let weights = || vec![tensor("w", &[tout, tin], w.clone()), tensor("bias", &[tout], bias.clone()), tensor("scale", &[d], scale.clone())];
            let mut want = vec![0f32; batch * tout * d];
            for b in 0..batch {
                for t in 0..tout {
                    for c in 0..d {
                        let acc: f64 = (0..tin).map(|s| w[t * tin + s] as f64 * x[(b * tin + s) * d + c] as f64).sum();
                        let at = (b * tout + t) * d + c;
                        want[at] = epilogue(e, acc, bias[t] as f64, scale[c] as f64, gate[at] as f64, c0[at] as f64);
                    }
                }
            }
            let mut inputs = vec![(Slot::Xn, x.clone()), (Slot::X, c0.clone())];
            if e.gate {
                inputs.push((Slot::Hidden, gate.clone()));
            }
            on_every_executor(weights, step, batch, &inputs, |dev, slots| {
                let got = &slots[Slot::X.index()][..want.len()];
                let diff = max_abs_diff(got, &want);
                let bound = tol::GEMM * 10.0 * max_abs(&want).max(1.0);
                assert!(diff <= bound, "{dev} token mixing {batch}x{tout}x{tin}x{d} {e:?}: diff {diff} > {bound}");
            });
        }
    }
}

/// An infinite activation gives IEEE's infinities (inf · ±w = ±inf, plus finite terms), not
/// NaN, on every executor, in both GEMM layouts, with K not a multiple of 4 (where kernels
/// that read k four at a time run past the end of A) and the rest of the output unharmed.
#[test]
fn an_infinite_activation_gives_infinities_on_every_executor() {
    let (rows, k, n) = (6, 7, 9);
    let (w, x) = (random(n * k, 71), random(rows * k, 72));
    let mut a = x.clone();
    a[2 * k + k - 1] = f32::INFINITY; // row 2, the last k
    let linear = Step::Gemm(Gemm::new(GemmKind::Linear { rows, a: View::dense(Slot::Xn, rows, k) }, W(0), View::dense(Slot::X, rows, n)));
    // Token mixing: W [n, k] · X [k, d], with X[k - 1, 2] infinite (column 2 of C).
    let d = 5;
    let mut xt = random(k * d, 73);
    xt[(k - 1) * d + 2] = f32::NEG_INFINITY;
    let tokens = Step::Gemm(Gemm::new(GemmKind::Tokens { x: View::dense(Slot::Xn, k, d), channels: d }, W(0), View::dense(Slot::X, n, d)));
    let linear_want: Vec<f32> =
        (0..rows * n).map(|at| (0..k).map(|kk| a[at / n * k + kk] as f64 * w[at % n * k + kk] as f64).sum::<f64>() as f32).collect();
    let tokens_want: Vec<f32> =
        (0..n * d).map(|at| (0..k).map(|kk| w[at / d * k + kk] as f64 * xt[kk * d + at % d] as f64).sum::<f64>() as f32).collect();
    for (what, step, input, want) in [("linear", linear, a.clone(), linear_want), ("token mixing", tokens, xt.clone(), tokens_want)] {
        // Row 2 of the linear output, column 2 of the token-mixing one: n values either way.
        assert_eq!(want.iter().filter(|v| v.is_infinite()).count(), n, "{what}: the reference has one infinite row or column");
        let weights = || vec![tensor("w", &[n, k], w.clone())];
        on_every_executor(weights, step, 1, &[(Slot::Xn, input.clone()), (Slot::X, vec![0.0; want.len()])], |dev, slots| {
            let got = &slots[Slot::X.index()][..want.len()];
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                if w.is_finite() {
                    assert!((g - w).abs() <= tol::GEMM * 10.0 * w.abs().max(1.0), "{dev} {what}: output {i} is {g}, want {w}");
                } else {
                    assert_eq!(g, w, "{dev} {what}: output {i} is {g}, IEEE gives {w}");
                }
            }
        });
    }
}

#[test]
fn convolution_matches_reference() {
    // (images, cin, ih, iw, k, stride, pad, cout): patch embedding, PoolFormer stem, downsampling.
    let cases =
        [(2, 3, 16, 16, 4, 4, 0, 8), (2, 1, 24, 40, 8, 8, 0, 5), (2, 3, 19, 23, 7, 4, 2, 6), (1, 4, 9, 10, 3, 2, 1, 7), (3, 2, 5, 5, 1, 1, 0, 3)];
    for (i, &(images, cin, ih, iw, k, stride, pad, cout)) in cases.iter().enumerate() {
        for nhwc in [false, true] {
            let g = ConvGeometry { cin, ih, iw, kh: k, kw: k, stride, pad };
            let (oh, ow) = g.out_hw().unwrap();
            let (x, w, bias) =
                (random(images * cin * ih * iw, 100 + i as u64), random(cout * cin * k * k, 200 + i as u64), random(cout, 300 + i as u64));
            // The input slot of a single-step net is sized by its `input` floats; NHWC reads X.
            let input = if nhwc { Slot::X } else { Slot::Input };
            let step = Step::Gemm(Gemm::new(GemmKind::Conv { input, geometry: g, nhwc }, W(0), View::dense(Slot::Xn, oh * ow, cout)).bias(W(1)));
            let weights = || vec![tensor("w", &[cout, cin, k, k], w.clone()), tensor("b", &[cout], bias.clone())];
            let want = conv_reference(&x, &w, &bias, images, &g, cout, nhwc);
            let devices = all_devices();
            let mut ran = 0;
            for dev in &devices {
                // The NHWC input lives in X, which the convolution itself sizes.
                let net = net::from_parts(weights(), vec![step.clone()], if nhwc { 1 } else { cin * ih * iw }, 1).expect("valid");
                let slots = run_slots(dev, net, images, &[(input, x.clone())]).unwrap_or_else(|e| panic!("{}: {e}", dev.label()));
                let diff = max_abs_diff(&slots[Slot::Xn.index()][..want.len()], &want);
                assert!(diff <= tol::GEMM * 10.0 * max_abs(&want).max(1.0), "{} conv case {i} (nhwc {nhwc}): diff {diff}", dev.label());
                ran += 1;
            }
            assert!(ran > 0 && ran == devices.len(), "every executor ran");
        }
    }
}

#[test]
fn layer_norm_on_a_strided_view_matches_reference() {
    // gMLP reads the second half of each hidden row in place: off = half, ld = 2 * half.
    for (i, &(batch, rows, d, offset)) in [(1, 1, 1, 0.0f32), (2, 7, 33, 3.0), (2, 50, 512, -2.0), (3, 3, 5, 1000.0)].iter().enumerate() {
        let ld = 2 * d;
        let z: Vec<f32> = random(batch * rows * ld, 40 + i as u64).iter().map(|v| v * 0.01 + offset).collect();
        let (gamma, beta) = (random(d, 7), random(d, 8));
        let eps = 1e-5f32;
        let step = Step::LayerNorm { rows, d, eps, x: View { slot: Slot::Hidden, off: d, ld, bs: rows * ld }, gamma: W(0), beta: W(1), y: Slot::Aux };
        let weights = || vec![tensor("g", &[d], gamma.clone()), tensor("b", &[d], beta.clone())];
        let want = layer_norm_reference(&z, batch * rows, d, (d, ld), &gamma, &beta, eps);
        on_every_executor(weights, step, batch, &[(Slot::Hidden, z.clone())], |dev, slots| {
            let diff = max_abs_diff(&slots[Slot::Aux.index()][..want.len()], &want);
            // fp32 rounding of values near `offset`, as in the WGSL kernel test.
            let bound = tol::NORM * max_abs(&want).max(1.0) + 4.0 * f32::EPSILON * offset.abs() / (0.01 / 3f32.sqrt()) * (d as f32).sqrt();
            assert!(diff <= bound, "{dev} layer norm case {i}: diff {diff} > {bound}");
        });
    }
}

#[test]
fn group_norm_affine_pooling_and_mean_match_reference() {
    // The last: 23,517 values per image, more than the CPU executor sums on one thread and
    // neither a multiple of its 16 lanes nor of its 8,192-value pieces; GroupNorm in chunks on
    // the GPU.
    for (i, &(batch, h, w, d)) in [(2, 1, 1, 3), (1, 1, 5, 2), (2, 5, 7, 3), (1, 4, 4, 64), (2, 13, 27, 67)].iter().enumerate() {
        let (tokens, n) = (h * w, batch * h * w * d);
        let seed = 60 + 10 * i as u64;
        let x: Vec<f32> = random(n, seed).iter().map(|v| v * 0.1 + 2.0).collect();
        let (gamma, beta, ls) = (random(d, seed + 1), random(d, seed + 2), random(d, seed + 3));
        let weights = || vec![tensor("g", &[d], gamma.clone()), tensor("b", &[d], beta.clone()), tensor("ls", &[d], ls.clone())];
        let eps = 1e-5f32;

        // GroupNorm(1 group) over each image's [tokens, d].
        let want = group_norm_reference(&x, tokens * d, d, &gamma, &beta, eps);
        let step = Step::GroupNorm { tokens, d, eps, x: Slot::X, gamma: W(0), beta: W(1), y: Slot::Xn };
        on_every_executor(weights, step, batch, &[(Slot::X, x.clone())], |dev, slots| {
            let diff = max_abs_diff(&slots[Slot::Xn.index()][..n], &want);
            let bound = tol::NORM * max_abs(&want).max(1.0) + 4.0 * f32::EPSILON * 2.0 / 0.058 * ((tokens * d) as f32).sqrt();
            assert!(diff <= bound, "{dev} group norm case {i}: diff {diff} > {bound}");
        });

        // Affine: alpha * x + beta per channel.
        let want: Vec<f32> = x.iter().enumerate().map(|(j, &v)| (gamma[j % d] as f64 * v as f64 + beta[j % d] as f64) as f32).collect();
        let step = Step::Affine { rows: tokens, d, x: Slot::X, alpha: W(0), beta: W(1), y: Slot::Xn };
        on_every_executor(weights, step, batch, &[(Slot::X, x.clone())], |dev, slots| {
            assert!(max_abs_diff(&slots[Slot::Xn.index()][..n], &want) <= tol::NORM * max_abs(&want).max(1.0), "{dev} affine case {i}");
        });

        // Pooling: x += ls * (avgpool3x3(xn) - xn), count_include_pad = False.
        let (xn, x0) = (random(n, seed + 4), random(n, seed + 5));
        let want = pool_reference(&xn, &x0, &ls, (batch, h, w, d));
        let step = Step::PoolMix { h, w, d, xn: Slot::Xn, scale: W(2), x: Slot::X };
        on_every_executor(weights, step, batch, &[(Slot::Xn, xn.clone()), (Slot::X, x0.clone())], |dev, slots| {
            let diff = max_abs_diff(&slots[Slot::X.index()][..n], &want);
            assert!(diff <= tol::NORM, "{dev} pool case {i}: diff {diff}");
        });

        // Mean over tokens.
        let want = mean_tokens_reference(&x, batch, tokens, d);
        let step = Step::MeanTokens { tokens, d, x: Slot::X, y: Slot::Pooled };
        on_every_executor(weights, step, batch, &[(Slot::X, x.clone())], |dev, slots| {
            assert!(max_abs_diff(&slots[Slot::Pooled.index()][..batch * d], &want) <= tol::NORM * max_abs(&want).max(1.0), "{dev} mean case {i}");
        });
    }
}

#[test]
fn nets_with_bad_shapes_are_refused_before_running() {
    // A bias shorter than the GEMM's output, and a GEMM that reads the slot it writes.
    let step = Step::Gemm(Gemm::new(GemmKind::Linear { rows: 2, a: View::dense(Slot::Xn, 2, 4) }, W(0), View::dense(Slot::X, 2, 3)).bias(W(1)));
    let err =
        net::from_parts(vec![tensor("w", &[3, 4], vec![0.5; 12]), tensor("short", &[2], vec![0.0; 2])], vec![step], 1, 1).err().expect("refused");
    assert!(err.to_string().contains("short"), "{err}");
    let alias = Step::Gemm(Gemm::new(GemmKind::Linear { rows: 2, a: View::dense(Slot::X, 2, 4) }, W(0), View::dense(Slot::X, 2, 3)));
    let net = net::from_parts(vec![tensor("w", &[3, 4], vec![0.5; 12])], vec![alias], 1, 1).expect("shapes are fine");
    let err = run_slots(&common::cpu(), net, 1, &[]).expect_err("the CPU executor refuses an aliasing GEMM");
    assert!(err.to_string().contains("reads the slot it writes"), "{err}");
}

#[test]
fn every_upload_encodes_values_as_ieee_little_endian_bits() {
    use tokenmix::gpu::Precision;
    // binary16 / binary32 bit patterns as IEEE 754 defines them: 1, -2, the largest half, and 1/3
    // rounded to nearest (0x3555 = 0.33325).
    let v = [1.0f32, -2.0, 65504.0, 1.0 / 3.0];
    assert_eq!(&*Precision::F16.encode(&v), &[0x00, 0x3C, 0x00, 0xC0, 0xFF, 0x7B, 0x55, 0x35]);
    assert_eq!(&*Precision::F32.encode(&v[..2]), &[0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0]);
    // storage_f16 pads to whole 4-byte words (an odd count and the empty slice alike).
    let gpu = pollster::block_on(tokenmix::gpu::Gpu::new_at(Precision::F16)).expect("a wgpu adapter (lavapipe on CI)");
    assert_eq!(gpu.precision, Precision::F16, "the test adapter has shader-f16");
    for (data, want) in [(&[1.0f32, -2.0, 0.5][..], &[1.0f32, -2.0, 0.5, 0.0][..]), (&[][..], &[0.0, 0.0][..])] {
        let buffer = gpu.storage_f16("odd", data).expect("small buffer");
        assert_eq!(buffer.size() % 4, 0, "{} values: {} bytes", data.len(), buffer.size());
        assert_eq!(pollster::block_on(gpu.read_all(&buffer, Precision::F16)).expect("readback"), want);
    }
}

/// On a `--precision f16` device the hidden slot is stored in f16: `run_slots` rounds what it is
/// given to f16 on the way in and widens it on the way out, and a step reading that slot (gMLP's
/// gate LayerNorm on its strided half) sees the rounded values. Writing f32 bits into the f16
/// buffer, or reading it back as f32, fails both checks. More values than a slot holds are an
/// error on every executor, not a silent truncation.
#[test]
fn an_f16_device_stores_the_hidden_slot_in_f16() {
    let gpu =
        std::sync::Arc::new(pollster::block_on(tokenmix::gpu::Gpu::new_at(tokenmix::gpu::Precision::F16)).expect("a wgpu adapter (lavapipe on CI)"));
    assert_eq!(gpu.precision, tokenmix::gpu::Precision::F16, "the test adapter has shader-f16");
    let dev = tokenmix::exec::Device::from(gpu);
    let (batch, rows, d) = (2, 7, 33);
    let ld = 2 * d;
    let z: Vec<f32> = random(batch * rows * ld, 41).iter().map(|v| v * 3.0 + 0.5).collect();
    let rounded: Vec<f32> = z.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect();
    assert!(max_abs_diff(&rounded, &z) > 1e-4, "the data is not already f16-exact");
    let (gamma, beta) = (random(d, 7), random(d, 8));
    let eps = 1e-5f32;
    let step = Step::LayerNorm { rows, d, eps, x: View { slot: Slot::Hidden, off: d, ld, bs: rows * ld }, gamma: W(0), beta: W(1), y: Slot::Aux };
    let weights = || vec![tensor("g", &[d], gamma.clone()), tensor("b", &[d], beta.clone())];
    let want = layer_norm_reference(&rounded, batch * rows, d, (d, ld), &gamma, &beta, eps);
    let net = net::from_parts(weights(), vec![step.clone()], 1, 1).expect("valid");
    let slots = run_slots(&dev, net, batch, &[(Slot::Hidden, z.clone())]).unwrap_or_else(|e| panic!("{}: {e}", dev.label()));
    assert_eq!(&slots[Slot::Hidden.index()][..z.len()], &rounded[..], "the hidden slot reads back as the f16-rounded input");
    let diff = max_abs_diff(&slots[Slot::Aux.index()][..want.len()], &want);
    assert!(diff <= tol::NORM * max_abs(&want).max(1.0), "{}: layer norm of the f16 hidden slot: diff {diff}", dev.label());

    for dev in [dev, common::cpu()] {
        let net = net::from_parts(weights(), vec![step.clone()], 1, 1).expect("valid");
        let too_long = vec![0.5f32; batch * rows * ld * 64];
        let err = run_slots(&dev, net, batch, &[(Slot::Hidden, too_long)]).expect_err("more values than the slot holds");
        eprintln!("{}: {err}", dev.label());
    }
}

/// A pass given a cancelled [`tokenmix::Cancel`] stops with `Error::Cancelled` on every
/// executor, before anything is submitted or stepped, for each of the three cancellable calls;
/// the model is unharmed (the next pass gives the plain call's logits, bit for bit). A pass
/// cancelled while it runs is the desktop test's (`the_window_keeps_drawing_while_the_model_works`).
#[test]
fn a_cancelled_pass_stops_on_every_executor() {
    use tokenmix::{Cancel, Error, Model};
    let devices = all_devices();
    let mut ran = 0;
    for dev in &devices {
        let model = Model::load(dev.clone(), tokenmix::DEFAULT_MODEL, None).unwrap_or_else(|e| panic!("{}: {e}", dev.label()));
        let input = random(2 * model.input_len(), 5);
        let want = pollster::block_on(model.forward(&input)).expect("a plain pass");
        let stop = Cancel::new();
        let clone = stop.clone();
        clone.cancel();
        assert!(stop.is_cancelled(), "clones share the flag");
        let forward = pollster::block_on(model.forward_cancellable(&input, &stop)).map(|_| ());
        let explain = pollster::block_on(model.explain_cancellable(&input[..model.input_len()], &stop)).map(|_| ());
        let classify = pollster::block_on(model.classify_rgba_cancellable(&[120; 28 * 28 * 4], 28, 28, || 0.0, &stop)).map(|_| ());
        for (call, got) in [("forward", forward), ("explain", explain), ("classify_rgba", classify)] {
            assert!(matches!(got, Err(Error::Cancelled)), "{}: {call} with a cancelled token gave {got:?}", dev.label());
        }
        assert_eq!(stop.checks_passed(), 0, "{}: the cancelled calls stopped before their first step or submission", dev.label());
        let fresh = Cancel::new();
        let again = pollster::block_on(model.forward_cancellable(&input, &fresh)).expect("a pass after the cancelled ones");
        assert_eq!(again.logits, want.logits, "{}: the model runs as before", dev.label());
        // The CPU executor checks before each step, the GPU executor before its submission.
        let least = if dev.backend() == "cpu" { 10 } else { 1 };
        assert!(fresh.checks_passed() >= least, "{}: a whole pass passed {} checks", dev.label(), fresh.checks_passed());
        // A load: stopped before its first tensor, or run with a check before each.
        let load = Model::load_cancellable(dev.clone(), tokenmix::DEFAULT_MODEL, None, &stop).map(|_| ());
        assert!(matches!(load, Err(Error::Cancelled)), "{}: a load with a cancelled token gave {load:?}", dev.label());
        let loaded = Cancel::new();
        let again = Model::load_cancellable(dev.clone(), tokenmix::DEFAULT_MODEL, None, &loaded).expect("a load with a live token");
        assert_eq!(pollster::block_on(again.forward(&input)).expect("a pass").logits, want.logits, "{}: the same model", dev.label());
        assert!(loaded.checks_passed() >= 20, "{}: the load checked before each tensor: {} checks", dev.label(), loaded.checks_passed());
        eprintln!("{}: cancelled before it ran, then ran as before", dev.label());
        ran += 1;
    }
    assert!(ran > 0 && ran == devices.len(), "every executor ran");
}
