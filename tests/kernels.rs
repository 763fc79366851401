//! The WGSL kernels' own generality against plain-Rust f64 CPU references on seeded random
//! data, for every GEMM variant the adapter has (the steps the models use run on both
//! executors in tests/executors.rs): shapes that are not multiples of any tile, K = 1, batches, both
//! operand layouts, every epilogue, and convolutions with stride and padding.

mod common;

use std::sync::Arc;

use common::{
    all_variants, all_variants_f16, conv_reference as cpu_conv, gelu, gpu, group_norm_reference, layer_norm_reference, limited, max_abs,
    max_abs_diff, mean_tokens_reference, random, tol, wanted,
};
use tokenmix::gpu::{GemmVariant, Precision, RowKernel};
use tokenmix::ops::{self, ActTexture, Axis, ConvGeometry, Gemm, Matrix, Op, Operand};
use tokenmix::Gpu;

#[derive(Clone, Copy, Debug)]
struct Case {
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    b_trans: bool,
    bias: Option<Axis>,
    scale: Option<Axis>,
    gelu: bool,
    residual: bool,
    /// B shared by the batch (a weight): the texture kernel then reads it from a texture.
    shared_b: bool,
    /// A stored [K, M] (read transposed in place).
    a_trans: bool,
}

impl Case {
    /// A Linear layer (`A · W^T`, W shared) with every epilogue: bias, GELU, scale, residual.
    fn linear(m: usize, n: usize, k: usize) -> Case {
        Case {
            batch: 1,
            m,
            n,
            k,
            b_trans: true,
            bias: Some(Axis::N),
            scale: Some(Axis::N),
            gelu: true,
            residual: true,
            shared_b: true,
            a_trans: false,
        }
    }
}

fn cpu_gemm(c: &Case, a: &[f32], b: &[f32], bias: &[f32], scale: &[f32], c0: &[f32]) -> Vec<f32> {
    let mut out = c0.to_vec();
    for bt in 0..c.batch {
        for i in 0..c.m {
            for j in 0..c.n {
                let mut acc = 0f64;
                for kk in 0..c.k {
                    let av = if c.a_trans { a[bt * c.m * c.k + kk * c.m + i] } else { a[bt * c.m * c.k + i * c.k + kk] } as f64;
                    let bb = if c.shared_b { 0 } else { bt * c.n * c.k };
                    let bv = if c.b_trans { b[bb + j * c.k + kk] } else { b[bb + kk * c.n + j] } as f64;
                    acc += av * bv;
                }
                match c.bias {
                    Some(Axis::N) => acc += bias[j] as f64,
                    Some(Axis::M) => acc += bias[i] as f64,
                    None => {}
                }
                if c.gelu {
                    acc = gelu(acc);
                }
                match c.scale {
                    Some(Axis::N) => acc *= scale[j] as f64,
                    Some(Axis::M) => acc *= scale[i] as f64,
                    None => {}
                }
                let idx = bt * c.m * c.n + i * c.n + j;
                out[idx] = if c.residual { (out[idx] as f64 + acc) as f32 } else { acc as f32 };
            }
        }
    }
    out
}

fn run_case(gpu: &Gpu, c: Case, seed: u64) {
    let (got, want) = compute_case(gpu, c, random(c.batch * c.m * c.k, seed), seed);
    let diff = max_abs_diff(&got, &want);
    let bound = tol::GEMM * (c.k as f32).sqrt().max(1.0) * max_abs(&want).max(1.0);
    assert!(diff <= bound, "{} {c:?}: max diff {diff} > {bound}", gpu.gemm.name());
}

/// Case `c` with A = `a` on the device's GEMM, and the f64 reference: (got, want).
fn compute_case(gpu: &Gpu, c: Case, a: Vec<f32>, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let b = random(c.batch * c.k * c.n, seed + 1);
    let bias = random(c.m.max(c.n), seed + 2);
    let scale = random(c.m.max(c.n), seed + 3);
    let c0 = random(c.batch * c.m * c.n, seed + 4);
    let abuf = gpu.storage_init("a", &a).unwrap();
    let bbuf = gpu.storage_init("b", &b).unwrap();
    let biasbuf = gpu.storage_init("bias", &bias).unwrap();
    let scalebuf = gpu.storage_init("scale", &scale).unwrap();
    // C starts as c0, so RESIDUAL adds to known values.
    let cout = gpu.storage_init("c", &c0).unwrap();
    let bs = if c.shared_b { 0 } else { c.k * c.n };
    let b_op = if c.b_trans { Operand::new(&bbuf, c.k, bs) } else { Operand::new(&bbuf, c.n, bs) };
    let a_ld = if c.a_trans { c.m } else { c.k };
    let mut g = Gemm::new(c.batch, c.m, c.n, c.k, Operand::new(&abuf, a_ld, c.m * c.k), b_op, Operand::new(&cout, c.n, c.m * c.n));
    g.b_trans = c.b_trans;
    g.a_trans = c.a_trans;
    g.gelu = c.gelu;
    g.residual = c.residual;
    // A weight texture (and an activation mirror when the row length allows) for the texture kernel.
    let b_tex = if c.b_trans && c.shared_b { gpu.matrix_texture("b", &b[..c.n * c.k], c.n, c.k) } else { None };
    g.b_tex = b_tex.as_ref();
    let a_tex = if c.a_trans { ActTexture::new(gpu, "a", c.batch * c.k, c.m) } else { ActTexture::new(gpu, "a", c.batch * c.m, c.k) };
    let mut oplist = Vec::new();
    if let (GemmVariant::Texture, Some(t)) = (gpu.gemm, &a_tex) {
        oplist.push(Op::copy_to_texture(&abuf, t).unwrap());
        g = g.a_texture(Some(t));
    }
    if let Some(axis) = c.bias {
        g = g.bias(&biasbuf, axis);
    }
    if let Some(axis) = c.scale {
        g = g.scale(&scalebuf, axis);
    }
    oplist.push(g.build(gpu).unwrap());
    gpu.run_ops(&oplist).unwrap();
    let got = pollster::block_on(gpu.read_buffer(&cout, c.batch * c.m * c.n)).unwrap();
    // The kernels that compute in f16 round both operands (products of f16 values are exact
    // in f32, so the f32 bound still holds against the rounded operands).
    let want = cpu_gemm(&c, &as_computed(gpu, &a), &as_computed(gpu, &b), &bias, &scale, &c0);
    (got, want)
}

/// An infinite activation gives the infinities IEEE arithmetic gives (x · ±w = ±inf, plus
/// finite terms), not NaN, on every kernel; above all where K is not a multiple of 4, so the
/// kernels that read 4 values of k at once clamp past the end of A (and must not multiply the
/// clamped inf by the zero padding), and on the token-mixing layout whose mirror texture holds
/// A transposed (m = 64, so the texture kernel gets its A mirror). The other outputs stay
/// within the usual bound.
#[test]
fn an_infinite_activation_gives_infinities_not_nan() {
    let variants = all_variants();
    for gpu in &variants {
        for (m, n, k, a_trans) in [(5, 6, 7, false), (64, 6, 7, true), (3, 4, 5, false), (64, 8, 9, true)] {
            let c = Case { bias: None, scale: None, gelu: false, residual: false, a_trans, ..Case::linear(m, n, k) };
            let mut a = random(m * k, 40 + k as u64);
            // A[2, k - 1]: the last k, the one the clamped reads repeat.
            a[if a_trans { (k - 1) * m + 2 } else { 2 * k + k - 1 }] = f32::INFINITY;
            let (got, want) = compute_case(gpu, c, a, 40 + k as u64);
            let finite: Vec<(f32, f32)> = got.iter().zip(&want).filter(|(_, w)| w.is_finite()).map(|(&g, &w)| (g, w)).collect();
            let infinite: Vec<(f32, f32)> = got.iter().zip(&want).filter(|(_, w)| !w.is_finite()).map(|(&g, &w)| (g, w)).collect();
            assert_eq!(infinite.len(), n, "{} {c:?}: row 2 of the reference is infinite", gpu.gemm.name());
            assert!(
                infinite.iter().all(|(g, w)| g == w),
                "{} {c:?}: row 2 is {:?}, IEEE gives {:?}",
                gpu.gemm.name(),
                infinite.iter().map(|p| p.0).collect::<Vec<_>>(),
                infinite.iter().map(|p| p.1).collect::<Vec<_>>()
            );
            let (g, w): (Vec<f32>, Vec<f32>) = finite.into_iter().unzip();
            let bound = tol::GEMM * (k as f32).sqrt() * max_abs(&w).max(1.0);
            assert!(max_abs_diff(&g, &w) <= bound, "{} {c:?}: the finite outputs are off by {}", gpu.gemm.name(), max_abs_diff(&g, &w));
        }
    }
    assert!(!variants.is_empty() || common::wanted("cpu"), "no GEMM variant ran");
}

/// Shapes of one and many tiles, ragged edges and long k, with every epilogue and operand
/// layout.
const GEMM_SHAPES: [(usize, usize, usize, usize); 13] = [
    (1, 1, 1, 1),
    (1, 7, 13, 1),
    (2, 33, 65, 17),
    (1, 64, 64, 64),
    (2, 100, 37, 49),
    (1, 5, 300, 8),
    (3, 9, 8, 196),
    (1, 70, 129, 3),
    (2, 45, 70, 128),
    // Several 128x128 tiles with ragged edges, K not a multiple of any k step.
    (1, 257, 131, 35),
    (2, 130, 260, 9),
    // M, N and K multiples of 4 (the tiled and coop kernels stage runs of 4: A_VEC, B_VEC), ragged
    // against every tile and k step.
    (2, 132, 68, 36),
    // Few output tiles, long k: split-K cuts k into 6 parts of 48 (the last one empty).
    (1, 33, 65, 200),
];

#[test]
fn gemm_matches_cpu_reference() {
    for gpu in all_variants() {
        gemm_shapes(&gpu);
    }
}

/// The same cases on the kernels that compute in f16 (coop at 64x64 and 128x128 tiles, and the
/// emulated double), against the reference on f16-rounded operands: the other kernels run the
/// same code at f16 as at f32 for f32 operands, which the test above covers.
#[test]
fn f16_gemm_matches_cpu_reference() {
    let coop: Vec<_> = all_variants_f16().into_iter().filter(|g| g.gemm.computes_in_f16()).collect();
    // Every lavapipe runs at least coop-emulated; only a TOKENMIX_TEST_GEMM naming none of
    // them may leave this empty, and then it says so.
    let named = GemmVariant::ALL.into_iter().filter(|v| v.computes_in_f16() && wanted(v.name())).count();
    assert!(!coop.is_empty() || named == 0, "no GEMM kernel that computes in f16 ran");
    if coop.is_empty() {
        eprintln!("f16_gemm_matches_cpu_reference: TOKENMIX_TEST_GEMM names no coop kernel; nothing run");
    }
    for gpu in coop {
        gemm_shapes(&gpu);
    }
}

/// Operands that are views into larger buffers, with the runs of 4 the tiled and coop kernels
/// fetch either aligned vec4s of the binding (offsets, leading dimensions and batch strides
/// multiples of 4: A_VEC4 / B_VEC4, one vector load per run) or not (odd offsets: A_VEC /
/// B_VEC alone, four scalar loads), on every kernel, at f32 and on the kernels that compute in
/// f16 with A stored as f16 too. What lies between the views' rows is NaN, so a read outside
/// them fails the comparison. The f16 kernels run twice: as the adapter is, where their
/// epilogue writes a whole fragment row per round, and on a device that says it has 3 KiB of
/// workgroup memory, where it writes one fragment per round.
#[test]
fn gemm_views_are_read_in_runs_of_4_aligned_or_not() {
    let (batch, m, n, k) = (2, 36, 68, 40);
    // Per operand: (offset, padding per row), elements.
    let layouts = [((4, 4), (8, 4)), ((2, 2), (1, 6)), ((0, 0), (3, 1))];
    let f16: Vec<_> = all_variants_f16().into_iter().filter(|g| g.gemm.computes_in_f16()).collect();
    let small: Vec<_> = f16
        .iter()
        .map(|g| {
            let mut small = pollster::block_on(Gpu::new_at(Precision::F16)).unwrap();
            small.fix_gemm(g.gemm);
            small.limits.max_compute_workgroup_storage_size = 3 << 10;
            Arc::new(small)
        })
        .collect();
    let devices: Vec<(Arc<Gpu>, bool)> =
        all_variants().into_iter().map(|g| (g, false)).chain(f16.into_iter().chain(small).map(|g| (g, true))).collect();
    let mut seed = 3000;
    for (gpu, a_half) in &devices {
        for ((a_off, a_pad), (b_off, b_pad)) in layouts {
            for (a_trans, b_trans) in [(false, true), (true, false), (false, false)] {
                seed += 10;
                let c = Case { batch, m, n, k, b_trans, bias: Some(Axis::N), scale: None, gelu: false, residual: true, shared_b: false, a_trans };
                let (a, b, bias, c0) =
                    (random(batch * m * k, seed), random(batch * k * n, seed + 1), random(n, seed + 2), random(batch * m * n, seed + 3));
                // Dense [batch][rows][cols] into rows of `cols + pad` from `off`, NaN around.
                let view = |dense: &[f32], rows: usize, cols: usize, off: usize, pad: usize| {
                    let ld = cols + pad;
                    let mut v = vec![f32::NAN; off + batch * rows * ld + pad];
                    for r in 0..batch * rows {
                        v[off + r * ld..off + r * ld + cols].copy_from_slice(&dense[r * cols..(r + 1) * cols]);
                    }
                    (v, ld)
                };
                let (a_rows, a_cols) = if a_trans { (k, m) } else { (m, k) };
                let (b_rows, b_cols) = if b_trans { (n, k) } else { (k, n) };
                let (av, a_ld) = view(&a, a_rows, a_cols, a_off, a_pad);
                let (bv, b_ld) = view(&b, b_rows, b_cols, b_off, b_pad);
                let abuf = if *a_half { gpu.storage_f16("a", &av).unwrap() } else { upload(gpu, &av) };
                let (bbuf, biasbuf, cbuf) = (upload(gpu, &bv), upload(gpu, &bias), upload(gpu, &c0));
                let mut a_op = Operand { off: a_off as u32, ..Operand::new(&abuf, a_ld, a_rows * a_ld) };
                if *a_half {
                    a_op = a_op.f16();
                }
                let b_op = Operand { off: b_off as u32, ..Operand::new(&bbuf, b_ld, b_rows * b_ld) };
                let mut g = Gemm::new(batch, m, n, k, a_op, b_op, Operand::new(&cbuf, n, m * n)).bias(&biasbuf, Axis::N).residual();
                (g.a_trans, g.b_trans) = (a_trans, b_trans);
                gpu.run_ops(&[g.build(gpu).unwrap()]).unwrap();
                let a_used = if *a_half { rounded(&a) } else { as_computed(gpu, &a) };
                let want = cpu_gemm(&c, &a_used, &as_computed(gpu, &b), &bias, &[], &c0);
                let got = read(gpu, &cbuf, batch * m * n);
                let diff = max_abs_diff(&got, &want);
                let bound = tol::GEMM * (k as f32).sqrt() * max_abs(&want).max(1.0);
                let what = format!(
                    "{} (A {}, {} bytes of workgroup memory), A at {a_off} ld {a_ld}, B at {b_off} ld {b_ld}, {c:?}",
                    gpu.gemm.name(),
                    if *a_half { "f16" } else { "f32" },
                    gpu.limits.max_compute_workgroup_storage_size
                );
                assert!(got.iter().all(|v| v.is_finite()), "{what}: a NaN from outside the views");
                assert!(diff <= bound, "{what}: max diff {diff} > {bound}");
            }
        }
    }
    assert!(!devices.is_empty(), "no GEMM kernel ran");
}

fn gemm_shapes(gpu: &Gpu) {
    let mut seed = 1;
    for &(batch, m, n, k) in &GEMM_SHAPES {
        for b_trans in [true, false] {
            let epilogues = [
                (None, None, false, false),
                (Some(Axis::N), None, true, false),
                (Some(Axis::M), None, true, true),
                (Some(Axis::N), Some(Axis::N), false, true),
                (None, Some(Axis::M), true, false),
            ];
            for (bias, scale, gelu, residual) in epilogues {
                for (shared_b, a_trans) in [(false, false), (true, false), (true, true)] {
                    seed += 10;
                    run_case(gpu, Case { batch, m, n, k, b_trans, bias, scale, gelu, residual, shared_b, a_trans }, seed);
                }
            }
        }
    }
}

/// Values as an f16 activation slot holds them.
fn rounded(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
}

/// The weights as the device stores them (rounded to f16 under `Precision::F16`): the f64
/// reference of an f16-weight GEMM, which must then agree to f32 rounding like any other.
fn as_stored(gpu: &Gpu, w: &[f32]) -> Vec<f32> {
    match gpu.precision {
        Precision::F32 => w.to_vec(),
        Precision::F16 => rounded(w),
    }
}

/// Activations as the kernel computes with them: rounded to f16 by the kernels that compute in
/// f16 (coop), as they are.
fn as_computed(gpu: &Gpu, x: &[f32]) -> Vec<f32> {
    if gpu.gemm.computes_in_f16() {
        rounded(x)
    } else {
        x.to_vec()
    }
}

/// f16 weights in a linear layer with every epilogue, whole and split into row blocks under a
/// 2 KiB binding limit (blocks of 20 whole rows of 50 values, 2 bytes each), on every kernel.
#[test]
fn f16_linear_weights_match_cpu_reference() {
    for gpu in all_variants_f16() {
        let (m, k, n) = (4, 50, 70);
        let (a, w, bias, scale, c0) = (random(m * k, 950), random(n * k, 951), random(n, 952), random(n, 953), random(m * n, 954));
        let case = Case::linear(m, n, k);
        let want = cpu_gemm(&case, &as_computed(&gpu, &a), &as_stored(&gpu, &w), &bias, &scale, &c0);
        let mut split = pollster::block_on(Gpu::new_at(Precision::F16)).unwrap();
        split.fix_gemm(gpu.gemm);
        split.limits.max_storage_buffer_binding_size = 2048;
        for (dev, blocks) in [(&*gpu, 1), (&split, 4)] {
            let wm = Matrix::upload(dev, "w", &w, n, k).unwrap();
            assert_eq!((wm.blocks().len(), wm.precision), (blocks, Precision::F16));
            let up = |v: &[f32]| dev.storage_init("v", v).unwrap();
            let (ab, bb, sb, cb) = (up(&a), up(&bias), up(&scale), up(&c0));
            let op = Gemm::linear(m, Operand::new(&ab, k, 0), &wm, Operand::new(&cb, n, 0)).bias(&bb, Axis::N).gelu().scale(&sb, Axis::N).residual();
            dev.run_ops(&[op.build(dev).unwrap()]).unwrap();
            let got = pollster::block_on(dev.read_buffer(&cb, m * n)).unwrap();
            let diff = max_abs_diff(&got, &want);
            assert!(diff <= tol::GEMM * 10.0 * max_abs(&want).max(1.0), "{} f16 linear in {blocks} block(s): diff {diff}", gpu.gemm.name());
        }
    }
}

/// An output stored as f16 is the f32 result rounded once: within 2^-11 of each value, so
/// 1e-3 of the output scale (f32 outputs keep the f32 bound).
const F16_STORED: f32 = 1e-3;

/// f16 activation slots (`--precision f16` keeps MLP hidden activations in f16) as every GEMM
/// operand the models give them, on every kernel, against f64 references on the values as
/// stored: a linear layer writing f16 (fc1), reading f16 (fc2, with scale and residual) and
/// adding to an f16 output; token mixing writing f16 and reading f16; gMLP's gate read from
/// f16 rows twice as long as C's. K = 96 so that split-K splits.
#[test]
fn f16_activations_match_cpu_reference() {
    let mut ran = 0;
    for gpu in all_variants_f16() {
        let name = gpu.gemm.name();
        let (m, k, n) = (37, 96, 70);
        let (a, w, bias, scale, c0) = (random(m * k, 960), random(n * k, 961), random(n, 962), random(n, 963), random(m * n, 964));
        let wm = Matrix::upload(&gpu, "w", &w, n, k).unwrap();
        let (bb, sb) = (upload(&gpu, &bias), upload(&gpu, &scale));
        let plain = Case { scale: None, residual: false, ..Case::linear(m, n, k) };
        let half = |v: &[f32]| gpu.storage_f16("h", v).unwrap();
        let run = |op: Gemm| gpu.run_ops(&[op.build(&gpu).unwrap()]).unwrap();
        let check = |what: &str, got: &[f32], want: &[f32], bound: f32| {
            let diff = max_abs_diff(got, want);
            assert!(diff <= bound * max_abs(want).max(1.0), "{name} f16 activations, {what}: diff {diff}");
        };
        // fc1: f32 in, gelu(A · Wᵀ + b) out in f16.
        let (ab, cb) = (upload(&gpu, &a), half(&vec![0.0; m * n]));
        run(Gemm::linear(m, Operand::new(&ab, k, 0), &wm, Operand::new(&cb, n, 0).f16()).bias(&bb, Axis::N).gelu());
        let got = pollster::block_on(gpu.read_buffer_f16(&cb, m * n)).unwrap();
        let want = cpu_gemm(&plain, &as_computed(&gpu, &a), &as_stored(&gpu, &w), &bias, &scale, &vec![0.0; m * n]);
        check("linear into f16", &got, &want, F16_STORED);
        // fc2: f16 in, C (f32) += scale * (A · Wᵀ + b).
        let fc2 = Case { gelu: false, ..Case::linear(m, n, k) };
        let (ab, cb) = (half(&a), upload(&gpu, &c0));
        run(Gemm::linear(m, Operand::new(&ab, k, 0).f16(), &wm, Operand::new(&cb, n, 0)).bias(&bb, Axis::N).scale(&sb, Axis::N).residual());
        let want = cpu_gemm(&fc2, &rounded(&a), &as_stored(&gpu, &w), &bias, &scale, &c0);
        check("linear from f16", &read(&gpu, &cb, m * n), &want, tol::GEMM * 10.0);
        // A residual into an f16 output: the f16 value is read, added to, rounded again.
        let (ab, cb) = (upload(&gpu, &a), half(&c0));
        run(Gemm::linear(m, Operand::new(&ab, k, 0), &wm, Operand::new(&cb, n, 0).f16()).bias(&bb, Axis::N).gelu().residual());
        let got = pollster::block_on(gpu.read_buffer_f16(&cb, m * n)).unwrap();
        let want = cpu_gemm(&Case { residual: true, ..plain }, &as_computed(&gpu, &a), &as_stored(&gpu, &w), &bias, &scale, &rounded(&c0));
        check("residual into f16", &got, &want, F16_STORED);

        // Token mixing: C[b][t, d] = W[t, s] · X[b][s, d], the weight texture's transposed form
        // on the texture kernel.
        let (batch, tout, tin, d) = (2, 13, 96, 20);
        let (tw, x, tb, cs, t0) =
            (random(tout * tin, 970), random(batch * tin * d, 971), random(tout, 972), random(d, 973), random(batch * tout * d, 974));
        let twm = Matrix::upload(&gpu, "tw", &tw, tout, tin).unwrap();
        let (tbb, csb) = (upload(&gpu, &tb), upload(&gpu, &cs));
        let zeros = vec![0.0; batch * tout * d];
        // Token fc1: f32 in, f16 out.
        let (xb, cb) = (upload(&gpu, &x), half(&zeros));
        let g = Gemm::across_tokens(batch, &twm, Operand::new(&xb, d, tin * d), d, Operand::new(&cb, d, tout * d).f16());
        let axis = g.token_axis();
        run(g.bias(&tbb, axis).gelu());
        let got = pollster::block_on(gpu.read_buffer_f16(&cb, batch * tout * d)).unwrap();
        let want = cpu_across_tokens(&as_stored(&gpu, &tw), &as_computed(&gpu, &x), &tb, None, &zeros, (batch, tout, tin, d));
        check("tokens into f16", &got, &want, F16_STORED);
        // Token fc2: f16 in, C (f32) += gelu(W · X + b) * channel scale.
        let (xb, cb) = (half(&x), upload(&gpu, &t0));
        let g = Gemm::across_tokens(batch, &twm, Operand::new(&xb, d, tin * d).f16(), d, Operand::new(&cb, d, tout * d));
        let axis = g.token_axis();
        run(g.bias(&tbb, axis).gelu().channel_scale(Some(&csb)).residual());
        let want = cpu_across_tokens(&as_stored(&gpu, &tw), &rounded(&x), &tb, Some(&cs), &t0, (batch, tout, tin, d));
        check("tokens from f16", &read(&gpu, &cb, batch * tout * d), &want, tol::GEMM * 10.0);
        // gMLP's gate: C = u ⊙ (W · X + b), u the first d columns of f16 rows of 2d values.
        let (sq, gate) = (random(tout * tout, 980), random(batch * tout * 2 * d, 981));
        let sqm = Matrix::upload(&gpu, "sq", &sq, tout, tout).unwrap();
        let xs = random(batch * tout * d, 982);
        let (xb, gb, cb) = (upload(&gpu, &xs), half(&gate), upload(&gpu, &zeros));
        let g = Gemm::across_tokens(batch, &sqm, Operand::new(&xb, d, tout * d), d, Operand::new(&cb, d, tout * d));
        run(g.token_bias(&tbb).gate(Operand::new(&gb, 2 * d, tout * 2 * d).f16()));
        let (sq, xs, gate) = (as_stored(&gpu, &sq), as_computed(&gpu, &xs), rounded(&gate));
        let mut want = vec![0f32; batch * tout * d];
        for b in 0..batch {
            for t in 0..tout {
                for c in 0..d {
                    let acc: f64 = (0..tout).map(|s| sq[t * tout + s] as f64 * xs[(b * tout + s) * d + c] as f64).sum::<f64>() + tb[t] as f64;
                    want[(b * tout + t) * d + c] = (acc * gate[(b * tout + t) * 2 * d + c] as f64) as f32;
                }
            }
        }
        check("gate from f16", &read(&gpu, &cb, batch * tout * d), &want, tol::GEMM * 10.0);
        ran += 1;
    }
    assert!(ran > 0, "no f16 device ran");
}

/// A device at `precision` running each way of covering rows (one invocation, one workgroup,
/// one workgroup reducing by subgroups first), so that lavapipe tests every form directly.
fn row_kernel_devices(precision: Precision) -> Vec<Gpu> {
    // Every lavapipe has subgroups (8 lanes, 4 in `make test`'s second kernel run).
    assert!(gpu().subgroup_lanes().is_some(), "the test adapter has subgroups, for the subgroup row form");
    [RowKernel::Invocation, RowKernel::Workgroup, RowKernel::Subgroup]
        .into_iter()
        .map(|rows| {
            let mut gpu = pollster::block_on(Gpu::new_at(precision)).expect("a wgpu adapter (lavapipe on CI)");
            gpu.rows = rows;
            gpu
        })
        .collect()
}

/// Both LayerNorm kernels on rows narrower than, as wide as, one past and many times a
/// workgroup of 64, strided views at odd offsets, and more rows than one grid dimension holds
/// (65,535 on every adapter wgpu knows), so the fold into a second dimension runs (rows of 8:
/// with 2, two near-equal values leave eps to set the scale and fp32 rounding the error):
/// against the f64 reference.
#[test]
fn layer_norm_matches_cpu_reference_on_every_row_width() {
    for gpu in row_kernel_devices(Precision::F32) {
        let fold = gpu.limits.max_compute_workgroups_per_dimension as usize + 3;
        // (rows, d, off, ld)
        let cases = [(5, 1, 0, 1), (7, 63, 0, 63), (3, 64, 0, 64), (9, 65, 5, 80), (4, 1000, 0, 1000), (2, 3072, 100, 3200), (fold, 8, 1, 9)];
        for (i, &(rows, d, off, ld)) in cases.iter().enumerate() {
            let x: Vec<f32> = random(off + rows * ld, 1000 + i as u64).iter().map(|v| v * 3.0 + 1.0).collect();
            let (gamma, beta) = (random(d, 1100 + i as u64), random(d, 1200 + i as u64));
            let (xb, gb, bb, y) = (upload(&gpu, &x), upload(&gpu, &gamma), upload(&gpu, &beta), gpu.storage("y", rows * d).unwrap());
            let view = ops::norm::Rows { buf: &xb, off, ld, half: false };
            gpu.run_ops(&[ops::norm::layer_norm_rows(&gpu, rows, d, 1e-5, view, &gb, &bb, &y).unwrap()]).unwrap();
            let want = layer_norm_reference(&x, rows, d, (off, ld), &gamma, &beta, 1e-5);
            let diff = max_abs_diff(&read(&gpu, &y, rows * d), &want);
            assert!(
                diff <= tol::NORM * max_abs(&want).max(1.0),
                "{:?}: layer norm of {rows} rows of {d} (offset {off}, stride {ld}): diff {diff}",
                gpu.rows
            );
        }
    }
}

/// gMLP's gate LayerNorm reads the second half of f16 hidden rows (both kernels): against the
/// f64 reference on the values as stored.
#[test]
fn layer_norm_reads_f16_rows() {
    for gpu in row_kernel_devices(Precision::F16) {
        assert_eq!(gpu.precision, Precision::F16, "the test adapter has shader-f16");
        let (rows, d) = (29, 40);
        let z = rounded(&random(rows * 2 * d, 990).iter().map(|v| v * 3.0 + 1.0).collect::<Vec<_>>());
        let (gamma, beta) = (random(d, 991), random(d, 992));
        let (zb, gb, bb, y) = (gpu.storage_f16("z", &z).unwrap(), upload(&gpu, &gamma), upload(&gpu, &beta), gpu.storage("y", rows * d).unwrap());
        let x = ops::norm::Rows { buf: &zb, off: d, ld: 2 * d, half: true };
        gpu.run_ops(&[ops::norm::layer_norm_rows(&gpu, rows, d, 1e-5, x, &gb, &bb, &y).unwrap()]).unwrap();
        let want = layer_norm_reference(&z, rows, d, (d, 2 * d), &gamma, &beta, 1e-5);
        let diff = max_abs_diff(&read(&gpu, &y, rows * d), &want);
        assert!(diff <= tol::NORM * max_abs(&want).max(1.0), "{:?}: layer norm of f16 rows: diff {diff}", gpu.rows);
    }
}

/// Reference token mixing: `C[b][t, d] = C0 + gelu(W[t, s] · X[b][s, d] + bias[t]) * scale[d]`.
fn cpu_across_tokens(
    w: &[f32],
    x: &[f32],
    bias: &[f32],
    scale: Option<&[f32]>,
    c0: &[f32],
    (batch, tout, tin, d): (usize, usize, usize, usize),
) -> Vec<f32> {
    let mut want = c0.to_vec();
    for b in 0..batch {
        for t in 0..tout {
            for ch in 0..d {
                let acc: f64 = (0..tin).map(|s| w[t * tin + s] as f64 * x[(b * tin + s) * d + ch] as f64).sum::<f64>() + bias[t] as f64;
                want[(b * tout + t) * d + ch] += (gelu(acc) * scale.map_or(1.0, |s| s[ch] as f64)) as f32;
            }
        }
    }
    want
}

/// Token mixing as the models record it: `C[b][t, d] (+)= gelu(W[t, s] · X[b][s, d] + bias[t])`,
/// which the texture kernel computes transposed (and with X mirrored in a texture when
/// channels % 64 == 0).
#[test]
fn across_tokens_matches_cpu_reference() {
    for gpu in all_variants().into_iter().chain(all_variants_f16()) {
        for (i, &(batch, tout, tin, d)) in [(2, 13, 49, 20), (3, 40, 16, 64), (2, 7, 9, 128)].iter().enumerate() {
            let seed = 500 + 10 * i as u64;
            let w = random(tout * tin, seed);
            let x = random(batch * tin * d, seed + 1);
            let bias = random(tout, seed + 2);
            let c0 = random(batch * tout * d, seed + 3);
            let wm = Matrix::upload(&gpu, "w", &w, tout, tin).unwrap();
            let xb = gpu.storage_init("x", &x).unwrap();
            let bb = gpu.storage_init("bias", &bias).unwrap();
            let cb = gpu.storage_init("c", &c0).unwrap();
            let xt = ActTexture::new(&gpu, "x", batch * tin, d);
            let mut oplist = Vec::new();
            if let Some(t) = &xt {
                oplist.push(Op::copy_to_texture(&xb, t).unwrap());
            }
            let g = Gemm::across_tokens(batch, &wm, Operand::new(&xb, d, tin * d), d, Operand::new(&cb, d, tout * d)).a_texture(xt.as_ref());
            let axis = g.token_axis();
            oplist.push(g.bias(&bb, axis).gelu().residual().build(&gpu).unwrap());
            gpu.run_ops(&oplist).unwrap();
            let got = pollster::block_on(gpu.read_buffer(&cb, batch * tout * d)).unwrap();
            let want = cpu_across_tokens(&as_stored(&gpu, &w), &as_computed(&gpu, &x), &bias, None, &c0, (batch, tout, tin, d));
            let diff = max_abs_diff(&got, &want);
            assert!(
                diff <= tol::GEMM * 10.0 * max_abs(&want).max(1.0),
                "{} {:?} across_tokens case {i}: diff {diff}",
                gpu.gemm.name(),
                gpu.precision
            );
        }
    }
}

#[test]
fn convolution_matches_cpu_reference() {
    let cases = [
        // (images, cin, ih, iw, k, stride, pad, cout): patch embedding, PoolFormer stem, downsampling
        (2, 3, 16, 16, 4, 4, 0, 8),
        (2, 1, 24, 40, 8, 8, 0, 5),
        (2, 3, 19, 23, 7, 4, 2, 6),
        (1, 4, 9, 10, 3, 2, 1, 7),
        (3, 2, 5, 5, 1, 1, 0, 3),
    ];
    for gpu in all_variants().into_iter().chain(all_variants_f16()) {
        for (i, &(images, cin, ih, iw, k, stride, pad, cout)) in cases.iter().enumerate() {
            // NCHW (stems) and channels-last NHWC (PoolFormer's downsampling reads its tokens).
            for nhwc in [false, true] {
                let g = ConvGeometry { cin, ih, iw, kh: k, kw: k, stride, pad };
                let (oh, ow) = g.out_hw().unwrap();
                let x = random(images * cin * ih * iw, 100 + i as u64);
                let w = random(cout * cin * k * k, 200 + i as u64);
                let bias = random(cout, 300 + i as u64);
                let wm = Matrix::upload(&gpu, "w", &w, cout, cin * k * k).unwrap();
                let (xb, bb) = (gpu.storage_init("x", &x).unwrap(), gpu.storage_init("b", &bias).unwrap());
                let out = gpu.storage("out", images * oh * ow * cout).unwrap();
                let conv = if nhwc { Gemm::conv_nhwc(images, g, &xb, &wm, &out) } else { Gemm::conv(images, g, &xb, &wm, &out) };
                gpu.run_ops(&[conv.unwrap().bias(&bb, Axis::N).build(&gpu).unwrap()]).unwrap();
                let got = pollster::block_on(gpu.read_buffer(&out, images * oh * ow * cout)).unwrap();
                let want = cpu_conv(&as_computed(&gpu, &x), &as_stored(&gpu, &w), &bias, images, &g, cout, nhwc);
                let diff = max_abs_diff(&got, &want);
                assert!(
                    diff <= tol::GEMM * 10.0 * max_abs(&want).max(1.0),
                    "{} {:?} conv case {i} (nhwc {nhwc}): diff {diff}",
                    gpu.gemm.name(),
                    gpu.precision
                );
            }
        }
    }
}

/// GroupNorm (one group) on both row kernels — by whole images on CPU rasterisers' and on
/// images of one chunk, in chunks on real GPUs' otherwise: images of one element, of one chunk,
/// of one element past a chunk, and PoolFormer-S12's first stage (56x56 tokens x 64 channels,
/// ~100 chunks), several to a batch, values far from zero (the combined variance must not
/// cancel): against the f64 reference.
#[test]
fn group_norm_matches_cpu_reference_whole_and_in_chunks() {
    for gpu in row_kernel_devices(Precision::F32) {
        let mut most = 0;
        for (i, &(batch, tokens, d)) in [(2, 1, 1), (1, 32, 64), (3, 2049, 1), (2, 7, 65), (2, 3136, 64)].iter().enumerate() {
            let n = tokens * d;
            most = most.max(ops::norm::group_norm_chunks(gpu.rows, n));
            let x: Vec<f32> = random(batch * n, 1300 + i as u64).iter().map(|v| v * 2.0 + 5.0).collect();
            let (gamma, beta) = (random(d, 1400 + i as u64), random(d, 1500 + i as u64));
            let (xb, gb, bb, y) = (upload(&gpu, &x), upload(&gpu, &gamma), upload(&gpu, &beta), gpu.storage("y", batch * n).unwrap());
            gpu.run_ops(&[ops::norm::group_norm(&gpu, batch, tokens, d, 1e-5, &xb, &gb, &bb, &y).unwrap()]).unwrap();
            let want = group_norm_reference(&x, n, d, &gamma, &beta, 1e-5);
            let diff = max_abs_diff(&read(&gpu, &y, batch * n), &want);
            assert!(diff <= tol::NORM * max_abs(&want).max(1.0), "{:?}: group norm of {batch}x{tokens}x{d}: diff {diff}", gpu.rows);
        }
        match gpu.rows {
            RowKernel::Invocation => assert_eq!(most, 1, "whole images on a CPU rasteriser"),
            RowKernel::Workgroup | RowKernel::Subgroup => assert!(most > 50, "a case in many chunks"),
        }
    }
}

/// Mean over tokens, then softmax over the classes (both row kernels; fewer classes than a
/// workgroup's lanes, one past them, ImageNet's 1,000): against the f64 reference.
#[test]
fn mean_and_softmax_match_cpu_reference() {
    for gpu in row_kernel_devices(Precision::F32) {
        for (batch, tokens, d) in [(3, 49, 10), (2, 5, 65), (2, 7, 1000)] {
            let x: Vec<f32> = random(batch * tokens * d, 5 + d as u64).iter().map(|v| v * 30.0).collect();
            let xb = gpu.storage_init("x", &x).unwrap();
            let pooled = gpu.storage("pooled", batch * d).unwrap();
            let probs = gpu.storage("probs", batch * d).unwrap();
            gpu.run_ops(&[
                ops::reduce::mean_tokens(&gpu, batch, tokens, d, &xb, &pooled).unwrap(),
                ops::reduce::softmax(&gpu, batch, d, &pooled, &probs).unwrap(),
            ])
            .unwrap();
            let got_mean = read(&gpu, &pooled, batch * d);
            let got_probs = read(&gpu, &probs, batch * d);
            let want_mean = mean_tokens_reference(&x, batch, tokens, d);
            let diff = max_abs_diff(&got_mean, &want_mean);
            assert!(diff <= tol::NORM * max_abs(&want_mean).max(1.0), "{:?}: mean of {batch}x{tokens}x{d}: diff {diff}", gpu.rows);
            let mut want_probs = vec![0f32; batch * d];
            for b in 0..batch {
                let row = &want_mean[b * d..(b + 1) * d];
                let mx = row.iter().fold(f32::MIN, |m, &v| m.max(v)) as f64;
                let sum: f64 = row.iter().map(|&v| (v as f64 - mx).exp()).sum();
                for c in 0..d {
                    want_probs[b * d + c] = ((row[c] as f64 - mx).exp() / sum) as f32;
                }
            }
            let diff = max_abs_diff(&got_probs, &want_probs);
            assert!(diff <= tol::NORM, "{:?}: softmax of {batch}x{d}: diff {diff}", gpu.rows);
        }
    }
}

#[test]
fn gemm_rejects_out_of_range_operands() {
    let gpu = gpu();
    let small = gpu.storage("small", 10).unwrap();
    let w = Matrix::upload(&gpu, "w", &[0.5; 100], 10, 10).unwrap();
    let out = gpu.storage("out", 100).unwrap();
    let err = Gemm::linear(4, Operand::new(&small, 10, 0), &w, Operand::new(&out, 10, 0)).build(&gpu);
    assert!(err.is_err(), "A has 10 floats, the GEMM needs 40");
    let err = Gemm::linear(0, Operand::new(&small, 10, 0), &w, Operand::new(&out, 10, 0)).build(&gpu);
    assert!(err.is_err(), "an empty dimension is an error");
}

fn upload(gpu: &Gpu, v: &[f32]) -> wgpu::Buffer {
    gpu.storage_init("t", v).unwrap()
}

fn read(gpu: &Gpu, b: &wgpu::Buffer, n: usize) -> Vec<f32> {
    pollster::block_on(gpu.read_buffer(b, n)).unwrap()
}

#[test]
fn spatial_gating_matches_cpu_reference() {
    let (batch, tokens, half) = (2, 35, 24);
    let h = 2 * half;
    let z = random(batch * tokens * h, 11);
    let (gamma, beta) = (random(half, 12), random(half, 13));
    let (wp, bp) = (random(tokens * tokens, 14), random(tokens, 15));
    // CPU: s[b, t, c] = u[b, t, c] * (sum_s W[t, s] * LN(v)[b, s, c] + bias[t])
    let mut vn = vec![0f64; batch * tokens * half];
    for r in 0..batch * tokens {
        let v: Vec<f64> = z[r * h + half..(r + 1) * h].iter().map(|&x| x as f64).collect();
        let mean = v.iter().sum::<f64>() / half as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / half as f64;
        for c in 0..half {
            vn[r * half + c] = (v[c] - mean) / (var + 1e-5).sqrt() * gamma[c] as f64 + beta[c] as f64;
        }
    }
    let mut want = vec![0f32; batch * tokens * half];
    for b in 0..batch {
        for t in 0..tokens {
            for c in 0..half {
                let mut acc = bp[t] as f64;
                for s in 0..tokens {
                    acc += wp[t * tokens + s] as f64 * vn[(b * tokens + s) * half + c];
                }
                want[(b * tokens + t) * half + c] = (z[(b * tokens + t) * h + c] as f64 * acc) as f32;
            }
        }
    }
    for gpu in all_variants() {
        let (zb, gb, bb, pb) = (upload(&gpu, &z), upload(&gpu, &gamma), upload(&gpu, &beta), upload(&gpu, &bp));
        let w = Matrix::upload(&gpu, "proj", &wp, tokens, tokens).unwrap();
        let (aux, out) = (gpu.storage("aux", batch * tokens * half).unwrap(), gpu.storage("out", batch * tokens * half).unwrap());
        let norm =
            ops::norm::layer_norm_rows(&gpu, batch * tokens, half, 1e-5, ops::norm::Rows { buf: &zb, off: half, ld: h, half: false }, &gb, &bb, &aux)
                .unwrap();
        let proj = Gemm::across_tokens(batch, &w, Operand::new(&aux, half, tokens * half), half, Operand::new(&out, half, tokens * half))
            .token_bias(&pb)
            .gate(Operand::new(&zb, h, tokens * h))
            .build(&gpu)
            .unwrap();
        gpu.run_ops(&[norm, proj]).unwrap();
        let got = read(&gpu, &out, batch * tokens * half);
        let diff = max_abs_diff(&got, &want);
        assert!(diff <= tol::GEMM * 10.0 * max_abs(&want).max(1.0), "{} SGU: diff {diff}", gpu.gemm.name());
    }
}

/// Weights larger than the storage-binding limit are uploaded in row blocks and their GEMMs run
/// one dispatch per block: a Linear layer with every epilogue (and with a gate), a convolution
/// and token mixing, on a device whose bindings hold 2-3 KiB, against the CPU reference.
#[test]
fn split_weights_match_cpu_reference() {
    for variant in all_variants().iter().map(|g| g.gemm) {
        // Linear: W [50, 64] = 12.8 KB in blocks of 8 rows under a 2 KiB limit.
        let gpu = limited(variant, 2048);
        let (m, k, n) = (4, 64, 50);
        let (a, w, bias, scale, c0, gate) =
            (random(m * k, 900), random(n * k, 901), random(n, 902), random(n, 903), random(m * n, 904), random(m * n, 905));
        let wm = Matrix::upload(&gpu, "w", &w, n, k).unwrap();
        assert_eq!(wm.blocks().len(), 7, "{}", variant.name());
        // A single row over the limit cannot be split: refused with the weight's name and bound.
        let err = Matrix::upload(&gpu, "wide", &vec![0.5; 2 * 600], 2, 600).err().expect("a 2400-byte row").to_string();
        assert!(err.contains("weight `wide`") && err.contains("one row") && err.contains("2048"), "{err}");
        let up = |v: &[f32]| gpu.storage_init("v", v).unwrap();
        let (ab, bb, sb, gb) = (up(&a), up(&bias), up(&scale), up(&gate));
        let case = Case::linear(m, n, k);
        let want = cpu_gemm(&case, &a, &w, &bias, &scale, &c0);
        let cb = up(&c0);
        let op = Gemm::linear(m, Operand::new(&ab, k, 0), &wm, Operand::new(&cb, n, 0)).bias(&bb, Axis::N).gelu().scale(&sb, Axis::N).residual();
        gpu.run_ops(&[op.build(&gpu).unwrap()]).unwrap();
        let got = pollster::block_on(gpu.read_buffer(&cb, m * n)).unwrap();
        let diff = max_abs_diff(&got, &want);
        assert!(diff <= tol::GEMM * 10.0 * max_abs(&want).max(1.0), "{} split linear: diff {diff}", variant.name());
        // The same with a gate (gMLP's u ⊙ v) instead of the scale.
        let plain = Case { scale: None, gelu: false, residual: false, ..case };
        let want: Vec<f32> = cpu_gemm(&plain, &a, &w, &bias, &scale, &c0).iter().zip(&gate).zip(&c0).map(|((v, g), c)| v * g + c).collect();
        let cb = up(&c0);
        let op = Gemm::linear(m, Operand::new(&ab, k, 0), &wm, Operand::new(&cb, n, 0)).bias(&bb, Axis::N).gate(Operand::new(&gb, n, 0)).residual();
        gpu.run_ops(&[op.build(&gpu).unwrap()]).unwrap();
        let got = pollster::block_on(gpu.read_buffer(&cb, m * n)).unwrap();
        let diff = max_abs_diff(&got, &want);
        assert!(diff <= tol::GEMM * 10.0 * max_abs(&want).max(1.0), "{} split gated linear: diff {diff}", variant.name());

        // Convolution 3x3/2/1, W [24, 144] = 13.8 KB in blocks of 3 rows.
        let g = ConvGeometry { cin: 16, ih: 5, iw: 5, kh: 3, kw: 3, stride: 2, pad: 1 };
        let (oh, ow) = g.out_hw().unwrap();
        let cout = 24;
        let (x, w, bias) = (random(16 * 25, 910), random(cout * 144, 911), random(cout, 912));
        let wm = Matrix::upload(&gpu, "conv", &w, cout, 144).unwrap();
        assert_eq!(wm.blocks().len(), 8);
        let (xb, bb) = (up(&x), up(&bias));
        let out = gpu.storage("out", oh * ow * cout).unwrap();
        for nhwc in [false, true] {
            let conv = if nhwc { Gemm::conv_nhwc(1, g, &xb, &wm, &out) } else { Gemm::conv(1, g, &xb, &wm, &out) };
            gpu.run_ops(&[conv.unwrap().bias(&bb, Axis::N).build(&gpu).unwrap()]).unwrap();
            let got = pollster::block_on(gpu.read_buffer(&out, oh * ow * cout)).unwrap();
            let want = cpu_conv(&x, &w, &bias, 1, &g, cout, nhwc);
            let diff = max_abs_diff(&got, &want);
            assert!(diff <= tol::GEMM * 10.0 * max_abs(&want).max(1.0), "{} split conv (nhwc {nhwc}): diff {diff}", variant.name());
        }

        // Token mixing W [40, 48] = 7.7 KB in blocks of 16 rows under a 3200-byte limit, with a
        // per-token bias, GELU, a per-channel layer scale and the residual.
        let gpu = limited(variant, 3200);
        let (batch, tout, tin, d) = (2, 40, 48, 8);
        let (w, x, bias, scale, c0) =
            (random(tout * tin, 920), random(batch * tin * d, 921), random(tout, 922), random(d, 923), random(batch * tout * d, 924));
        let wm = Matrix::upload(&gpu, "tokens", &w, tout, tin).unwrap();
        assert_eq!(wm.blocks().len(), 3);
        let up = |v: &[f32]| gpu.storage_init("v", v).unwrap();
        let (xb, bb, sb, cb) = (up(&x), up(&bias), up(&scale), up(&c0));
        let op = Gemm::across_tokens(batch, &wm, Operand::new(&xb, d, tin * d), d, Operand::new(&cb, d, tout * d))
            .token_bias(&bb)
            .gelu()
            .channel_scale(Some(&sb))
            .residual();
        gpu.run_ops(&[op.build(&gpu).unwrap()]).unwrap();
        let got = pollster::block_on(gpu.read_buffer(&cb, batch * tout * d)).unwrap();
        let want = cpu_across_tokens(&w, &x, &bias, Some(&scale), &c0, (batch, tout, tin, d));
        let diff = max_abs_diff(&got, &want);
        assert!(diff <= tol::GEMM * 10.0 * max_abs(&want).max(1.0), "{} split token mixing: diff {diff}", variant.name());
    }
}

/// The autotuner times every kernel the device can run once per shape class, keeps the
/// fastest, persists it under this adapter's key in its cache file, and a second device reads
/// the file instead of timing again. A tuned GEMM is still exact; a malformed cache file is no
/// cache, not an error.
#[test]
fn autotuner_times_once_per_class_and_caches_per_adapter() {
    let scratch = common::scratch("tune");
    let dir = scratch.path().join("cache");
    let file = dir.join("gemm-tuning.json");
    let tuned = |file: &std::path::Path| {
        let mut gpu = pollster::block_on(Gpu::new()).expect("a wgpu adapter");
        gpu.force_autotune(Some(file.to_path_buf()));
        gpu
    };
    let linear = |gpu: &Gpu, m: usize, seed: u64| {
        let (k, n) = (40, 48);
        let case = Case { scale: None, residual: false, ..Case::linear(m, n, k) };
        let (a, w, bias) = (random(m * k, seed), random(n * k, seed + 1), random(n, seed + 2));
        let wm = Matrix::upload(gpu, "w", &w, n, k).unwrap();
        let (ab, bb, cb) = (gpu.storage_init("a", &a).unwrap(), gpu.storage_init("bias", &bias).unwrap(), gpu.storage("c", m * n).unwrap());
        let g = Gemm::linear(m, Operand::new(&ab, k, 0), &wm, Operand::new(&cb, n, 0)).bias(&bb, Axis::N).gelu();
        let class = g.shape_class();
        gpu.run_ops(&[g.build(gpu).unwrap()]).unwrap();
        let got = pollster::block_on(gpu.read_buffer(&cb, m * n)).unwrap();
        let want = cpu_gemm(&case, &a, &w, &bias, &[], &vec![0.0; m * n]);
        let diff = max_abs_diff(&got, &want);
        assert!(diff <= tol::GEMM * 10.0 * max_abs(&want).max(1.0), "tuned linear ({}): diff {diff}", gpu.gemm_summary());
        class
    };

    let gpu = tuned(&file);
    assert!(gpu.tuning.enabled() && gpu.tuning.choices().is_empty());
    let class = linear(&gpu, 100, 1);
    assert_eq!(gpu.tuning.timed(), 1, "the first GEMM of a class is timed");
    let choice = gpu.tuning.choices().get(&class).cloned().expect("the class has a choice");
    assert!(gpu.gemm_variants().iter().any(|v| v.name() == choice), "{choice} is one of the device's kernels");
    // Same class (M 100 and 120 both round to 128): no second timing.
    assert_eq!(linear(&gpu, 120, 5), class);
    assert_eq!(gpu.tuning.timed(), 1);
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("the cache file was written")).unwrap();
    let entry = saved.as_object().and_then(|o| o.iter().find(|(k, _)| k.contains(&gpu.info.name))).expect("an entry keyed by the adapter");
    assert_eq!(entry.1[&class], serde_json::json!(choice), "{saved}");
    eprintln!("autotuned {class} → {choice} on {}", gpu.describe());

    // A new device on the same adapter reads the choice and times nothing.
    let again = tuned(&file);
    assert_eq!(again.tuning.choices().get(&class), Some(&choice));
    linear(&again, 90, 9);
    assert_eq!(again.tuning.timed(), 0, "a cached class is not timed again");

    // A malformed cache is ignored: tuning starts afresh and rewrites the file.
    std::fs::write(&file, "{ not json").unwrap();
    let fresh = tuned(&file);
    assert!(fresh.tuning.choices().is_empty());
    linear(&fresh, 100, 13);
    assert_eq!(fresh.tuning.timed(), 1);
    assert!(std::fs::read_to_string(&file).unwrap().contains(&class));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The browser's autotuning (`Model::autotune`, run after a load) stops at its next check
/// once its token is cancelled: stopped at checks along the way, it returns
/// `Error::Cancelled`, keeps the choices of the classes timed by then (more the later it
/// stops) and times nothing after; the next call times only the rest, and the tuned model
/// gives the untuned one's logits. Natively, where a load's plan build tunes, the load's
/// token stops it the same way.
#[test]
fn autotuning_stops_at_its_next_check_and_keeps_what_it_timed() {
    use tokenmix::{Cancel, Device, Error, Model};
    let tuning = |deferred: bool| {
        let mut gpu = pollster::block_on(Gpu::new()).expect("a wgpu adapter");
        gpu.force_autotune(None);
        if deferred {
            // As in the browser: a plan is built with the default kernel, `autotune` times later.
            gpu.tuning.defer_to_autotune();
        }
        Arc::new(gpu)
    };
    let device = || tuning(true);
    let untuned = Cancel::new();
    let plain = Model::load_cancellable(
        Device::Gpu(Arc::new(pollster::block_on(Gpu::new()).expect("a wgpu adapter"))),
        tokenmix::DEFAULT_MODEL,
        None,
        &untuned,
    )
    .expect("the default model");
    let input = random(plain.input_len(), 17);
    let want = pollster::block_on(plain.forward(&input)).expect("an untuned pass").logits;

    // Run to its end: every class of a batch-1 pass timed, with a check before each timing.
    let gpu = device();
    let model = Model::load(Device::Gpu(gpu.clone()), tokenmix::DEFAULT_MODEL, None).expect("the default model");
    let whole = Cancel::new();
    let classes = pollster::block_on(model.autotune(1, &whole)).expect("autotuning");
    let checks = whole.checks_passed();
    eprintln!("autotuned {classes} classes with {checks} checks on {}: {:?}", gpu.describe(), gpu.tuning.choices());
    assert!(classes >= 2 && gpu.tuning.timed() == classes, "the default model has several shape classes: {classes}");
    assert!(checks > 2 * classes, "a check before each kernel's runs: {checks} for {classes} classes");
    let got = pollster::block_on(model.forward(&input)).expect("a tuned pass").logits;
    let diff = max_abs_diff(&got, &want);
    assert!(diff <= tol::GOLDEN * max_abs(&want).max(1.0), "tuned vs untuned logits: diff {diff}");

    let mut timed_before = 0;
    for n in [0, checks / 2, checks - 1] {
        let gpu = device();
        let model = Model::load(Device::Gpu(gpu.clone()), tokenmix::DEFAULT_MODEL, None).expect("the default model");
        let stop = Cancel::after_checks(n);
        let got = pollster::block_on(model.autotune(1, &stop));
        assert!(matches!(got, Err(Error::Cancelled)), "stopped at check {n}: {got:?}");
        assert_eq!(stop.checks_passed(), n, "stopped at check {n}");
        let timed = gpu.tuning.timed();
        assert!(
            timed < classes && timed >= timed_before,
            "stopped at check {n}: {timed} of {classes} classes timed ({timed_before} at the previous stop)"
        );
        assert_eq!(gpu.tuning.choices().len(), timed, "stopped at check {n}: a choice per timed class, none for the class in progress");
        timed_before = timed;
        let rest = pollster::block_on(model.autotune(1, &Cancel::new())).expect("autotuning the rest");
        assert_eq!((rest, gpu.tuning.timed()), (classes - timed, classes), "stopped at check {n}: the next call times the rest");
        let got = pollster::block_on(model.forward(&input)).expect("a tuned pass").logits;
        let diff = max_abs_diff(&got, &want);
        assert!(diff <= tol::GOLDEN * max_abs(&want).max(1.0), "stopped at check {n}, then tuned: diff {diff}");
    }
    assert!(timed_before > 0, "a late stop kept the classes timed before it");

    // Natively: the load's plan build tunes, after the load's own checks (one per tensor).
    let gpu = tuning(false);
    let stop = Cancel::after_checks(untuned.checks_passed() + checks / 2);
    let got = Model::load_cancellable(Device::Gpu(gpu.clone()), tokenmix::DEFAULT_MODEL, None, &stop).map(|_| ());
    let timed = gpu.tuning.timed();
    assert!(matches!(got, Err(Error::Cancelled)), "a load stopped in its tuning: {got:?}");
    assert!(timed > 0 && timed < classes, "a load stopped in its tuning timed {timed} of {classes} classes");
    assert_eq!(gpu.tuning.choices().len(), timed, "a choice per timed class");
    let model = Model::load(Device::Gpu(gpu.clone()), tokenmix::DEFAULT_MODEL, None).expect("a load after the stopped one");
    assert_eq!(gpu.tuning.timed(), classes, "the next load timed the rest");
    let got = pollster::block_on(model.forward(&input)).expect("a tuned pass").logits;
    let diff = max_abs_diff(&got, &want);
    assert!(diff <= tol::GOLDEN * max_abs(&want).max(1.0), "a load stopped in its tuning, then loaded: diff {diff}");
}

/// A cached choice of a kernel that computes in f16 (the tensor-core coop kernels, here their
/// lane-by-lane double, which every lavapipe runs) is checked against the tiled kernel again
/// in the process that reads it, once per class, as when it was timed: the cache is a file
/// anyone can edit. The choice is kept when it agrees, and nothing is timed.
#[test]
fn a_cached_f16_kernel_is_checked_again_before_it_is_used() {
    let scratch = common::scratch("tune-f16");
    let file = scratch.path().join("gemm-tuning.json");
    let device = || {
        let mut gpu = pollster::block_on(Gpu::new_at(Precision::F16)).expect("a wgpu adapter");
        assert_eq!(gpu.precision, Precision::F16, "the test adapter has shader-f16");
        gpu.force_autotune(Some(file.clone()));
        gpu
    };
    let (m, n, k) = (100, 48, 40);
    let (a, w) = (random(m * k, 3), random(n * k, 4));
    let linear = |gpu: &Gpu| {
        let wm = Matrix::upload(gpu, "w", &w, n, k).unwrap();
        let (ab, cb) = (gpu.storage_init("a", &a).unwrap(), gpu.storage("c", m * n).unwrap());
        let g = Gemm::linear(m, Operand::new(&ab, k, 0), &wm, Operand::new(&cb, n, 0));
        let class = g.shape_class();
        gpu.run_ops(&[g.build(gpu).unwrap()]).unwrap();
        let got = pollster::block_on(gpu.read_buffer(&cb, m * n)).unwrap();
        let case = Case { bias: None, scale: None, gelu: false, residual: false, ..Case::linear(m, n, k) };
        let want = cpu_gemm(&case, &a, &w, &[], &[], &vec![0.0; m * n]);
        let diff = max_abs_diff(&got, &want);
        assert!(diff <= tol::F16 * max_abs(&want).max(1.0), "{}: diff {diff}", gpu.gemm_summary());
        class
    };
    let first = device();
    let f16_kernel = [GemmVariant::CoopEmulated, GemmVariant::Coop]
        .into_iter()
        .find(|&v| first.supports(v).is_ok())
        .expect("the test adapter runs a kernel that computes in f16");
    let class = linear(&first);
    assert_eq!(first.tuning.timed(), 1);
    // Edit the cache as a person (or another program) could: this class → the f16 kernel.
    let text = std::fs::read_to_string(&file).expect("the cache file was written");
    let mut cache: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (_, entry) in cache.as_object_mut().expect("an object").iter_mut() {
        entry[&class] = serde_json::json!(f16_kernel.name());
    }
    std::fs::write(&file, cache.to_string()).unwrap();

    let again = device();
    assert_eq!(again.tuning.choices().get(&class).map(String::as_str), Some(f16_kernel.name()));
    assert!(again.tuning.checked().is_empty());
    linear(&again);
    assert_eq!(again.tuning.checked(), vec![class.clone()], "the cached {} was checked against tiled", f16_kernel.name());
    assert_eq!(again.tuning.timed(), 0, "it agreed, so nothing was timed");
    assert!(again.tuning.rejected().is_empty(), "{:?}", again.tuning.rejected());
    assert_eq!(again.tuning.choices().get(&class).map(String::as_str), Some(f16_kernel.name()));
}

/// The subgroup kernels are compiled for the adapter's own subgroup size. lavapipe has 8
/// lanes at its default 256-bit vectors and 4 with `LP_NATIVE_VECTOR_WIDTH=128`; `make test`
/// runs this suite both ways, and `TOKENMIX_TEST_SUBGROUP_LANES` makes sure the second run
/// really got the narrower subgroups (and so really tested another width).
#[test]
fn subgroup_kernels_use_the_adapters_lanes() {
    let gpu = gpu();
    let lanes = gpu.subgroup_lanes();
    eprintln!("{}: subgroup lanes {lanes:?} (min {}, max {})", gpu.describe(), gpu.info.subgroup_min_size, gpu.info.subgroup_max_size);
    if let Ok(want) = std::env::var("TOKENMIX_TEST_SUBGROUP_LANES") {
        assert_eq!(lanes, Some(want.parse::<u32>().expect("a number")), "TOKENMIX_TEST_SUBGROUP_LANES={want}");
    }
    let has = |v: GemmVariant| gpu.gemm_variants().contains(&v);
    assert_eq!(has(GemmVariant::Subgroup), lanes.is_some());
    assert_eq!(has(GemmVariant::Texture), lanes.is_some());
    assert!(has(GemmVariant::Tiled) && has(GemmVariant::Tiled128) && has(GemmVariant::Tiled32) && has(GemmVariant::Register));
}

/// Each tiled kernel runs where its two stages of tiles fit the adapter's workgroup memory:
/// `tiled128k16`'s 32 KiB on the test adapter (lavapipe has 32 KiB, so the kernel suites run
/// it), not on a device that, like WebGPU's default, says it has 16 KiB, which refuses it by
/// name (it would fail pipeline creation) and leaves it out of the autotuner's candidates,
/// while still running the kernels that fit.
#[test]
fn tiled_kernels_run_only_where_their_tiles_fit() {
    let gpu = gpu();
    let tiled = [GemmVariant::Tiled, GemmVariant::Tiled128, GemmVariant::Tiled128K16, GemmVariant::Tiled32, GemmVariant::SplitK];
    assert_eq!(GemmVariant::Tiled128K16.tile_bytes(), Some(32 << 10));
    assert!(gpu.limits.max_compute_workgroup_storage_size >= 32 << 10, "the test adapter has 32 KiB of workgroup memory");
    for v in tiled {
        assert_eq!(gpu.supports(v), Ok(()), "{}", v.name());
    }
    let mut small = pollster::block_on(Gpu::new()).expect("a wgpu adapter (lavapipe on CI)");
    small.limits.max_compute_workgroup_storage_size = 16 << 10;
    let err = small.supports(GemmVariant::Tiled128K16).expect_err("32 KiB of tiles in 16 KiB");
    assert!(err.contains("tiled128k16 GEMM needs 32768 bytes of workgroup memory") && err.contains("16384"), "{err}");
    assert!(!small.gemm_variants().contains(&GemmVariant::Tiled128K16), "{:?}", small.gemm_variants());
    for v in tiled.into_iter().filter(|&v| v != GemmVariant::Tiled128K16) {
        assert_eq!(small.supports(v), Ok(()), "{} fits 16 KiB", v.name());
        assert!(small.gemm_variants().contains(&v), "{}", v.name());
    }
}

/// The GEMM kernels run without naga's bounds checks, trusting `Gemm`'s own checks of every
/// extent: a convolution whose geometry is empty (the kernel would clamp to ih-1 = -1), whose
/// m is not whole images, whose k is not cin*kh*kw, or whose input offset runs past its buffer
/// is refused at build, before anything runs. Its fields are public, so each is set by hand.
#[test]
fn a_convolution_the_trusted_kernels_cannot_read_safely_is_refused() {
    let gpu = gpu();
    let g = ConvGeometry { cin: 1, ih: 4, iw: 4, kh: 1, kw: 1, stride: 1, pad: 0 };
    let x = gpu.storage_init("x", &[0.5; 16]).unwrap();
    let w = Matrix::upload(&gpu, "w", &[1.0, 2.0], 2, 1).unwrap();
    let out = gpu.storage("out", 64).unwrap();
    assert!(Gemm::conv(1, g, &x, &w, &out).unwrap().build(&gpu).is_ok(), "the sane convolution builds");
    type Edit = fn(&mut Gemm);
    let cases: [(&str, Edit); 4] = [
        ("an empty image", |c| c.conv = c.conv.map(|g| ConvGeometry { ih: 0, pad: 1, ..g })),
        ("m of 17 rows (not whole 4x4 images)", |c| c.m = 17),
        ("k of 2 (not cin*kh*kw = 1)", |c| c.k = 2),
        ("an input offset past the buffer", |c| c.a.off = 1 << 20),
    ];
    for (what, edit) in cases {
        let mut conv = Gemm::conv(1, g, &x, &w, &out).unwrap();
        edit(&mut conv);
        let err = conv.build(&gpu).err().unwrap_or_else(|| panic!("{what}: built"));
        eprintln!("{what}: {err}");
    }
}

/// The texture kernel reads its weight texture unchecked too: a texture smaller than the
/// weight (fewer rows than N, fewer texels than ceil(K / 4)) is refused at build, whichever
/// kernel the adapter would pick. `b_tex` is a public field, so it is set by hand.
#[test]
fn a_weight_texture_smaller_than_its_weight_is_refused() {
    let gpu = gpu();
    let (m, n, k) = (4, 8, 12);
    let x = gpu.storage_init("x", &vec![0.5; m * k]).unwrap();
    let w = Matrix::upload_with(&gpu, "w", &vec![0.25; n * k], n, k, true).unwrap();
    let out = gpu.storage("out", m * n).unwrap();
    let fits = gpu.matrix_texture("fits", &vec![0.25; n * k], n, k).expect("an 8x3-texel texture");
    let short = gpu.matrix_texture("short", &vec![0.25; (n - 1) * k], n - 1, k).unwrap();
    let narrow = gpu.matrix_texture("narrow", &vec![0.25; n * (k - 4)], n, k - 4).unwrap();
    let linear = |tex| {
        let mut g = Gemm::linear(m, Operand::new(&x, k, 0), &w, Operand::new(&out, n, 0));
        g.b_tex = Some(tex);
        g.build(&gpu)
    };
    assert!(linear(&fits).is_ok(), "a texture of the weight's size builds");
    for (what, tex) in [("7 rows for n = 8", &short), ("2 texels for k = 12", &narrow)] {
        let err = linear(tex).err().unwrap_or_else(|| panic!("{what}: built"));
        eprintln!("{what}: {err}");
        assert!(err.to_string().contains("texture"), "{what}: {err}");
    }
}
