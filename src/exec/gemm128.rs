//! The CPU executor's GEMM in WebAssembly: 128-bit SIMD (simd128), written for
//! the code V8 makes of it.
//!
//! V8 compiles wasm SIMD to SSE/AVX on x86-64 with 16 xmm registers, one of them its scratch,
//! and allocates them in about the order LLVM emits the instructions, which loads every operand
//! of a loop step first. matrixmultiply's simd128 kernel keeps an 8×8 tile in 16 accumulators
//! and broadcasts A's values with shuffles, so V8's code moves values to and from the stack 18
//! times on every step of k (see `node --print-wasm-code`); with a 6×8 tile, 10 times. Here
//! the register tile is [`MR`]×[`NR`] = 4×8: 8 accumulators, B's two vectors and A's four
//! values, each broadcast from memory (`v128.load32_splat`, a `vbroadcastss`): 14 registers,
//! no stack traffic and no shuffles, 6 loads and 16 arithmetic operations for 32 multiply-adds.
//! (Unrolling k by two brings the stack back: 17 moves per two steps. A 3×12 tile also stays in
//! registers but was slower in 8 of 9 alternating browser-bench pairs, by up to 1.3×.)
//!
//! The rest is the usual blocking (Goto and van de Geijn; BLIS's loop order): B in [`KC`]×[`NC`]
//! blocks packed into panels of [`NR`] columns, A in [`MC`]×[`KC`] blocks packed into panels of
//! [`MR`] rows, both padded with zeros so every tile is whole, and the valid part of each tile
//! written or added to C. Any row and column stride, as `matrixmultiply`.
//!
//! Natively this module is compiled for its tests only, with a 4-lane array standing in for
//! `v128`, so that the blocking, packing and edges are tested on every platform; the wasm
//! tests (`tests/wasm.rs`) run the real thing.

use std::cell::RefCell;

/// Rows of A (and of C) per register tile. (`cpu::GEMM_NAME` names the tile for reports.)
pub const MR: usize = 4;
/// Columns of B (and of C) per register tile: two vectors.
pub const NR: usize = 8;
/// Depth of a packed block: an A panel (4 KB) and a B panel (8 KB) fit L1 together.
pub const KC: usize = 256;
/// Rows of A per packed block (64 KB at [`KC`]), reused from L2 across a B block.
pub const MC: usize = 16 * MR;
/// Columns of B per packed block (512 KB at [`KC`]).
pub const NC: usize = 64 * NR;

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod lanes {
    use core::arch::wasm32::*;
    pub type V = v128;

    #[inline(always)]
    pub fn zero() -> V {
        f32x4_splat(0.0)
    }

    #[inline(always)]
    pub fn load(x: &[f32; 4]) -> V {
        // SAFETY: reads the 16 bytes of `x`; wasm loads need no alignment.
        unsafe { v128_load(x.as_ptr().cast()) }
    }

    #[inline(always)]
    pub fn broadcast(x: &f32) -> V {
        // SAFETY: reads the 4 bytes of `x`.
        unsafe { v128_load32_splat((x as *const f32).cast()) }
    }

    /// `acc + a * b`, rounded twice (as the multiply and add of any f32 code).
    #[inline(always)]
    pub fn mul_add(acc: V, a: V, b: V) -> V {
        f32x4_add(acc, f32x4_mul(a, b))
    }

    #[inline(always)]
    pub fn store(v: V, out: &mut [f32; 4]) {
        // SAFETY: writes the 16 bytes of `out`.
        unsafe { v128_store(out.as_mut_ptr().cast(), v) }
    }
}

/// Plain arrays: natively for the tests, and in a wasm build without simd128 (the project's
/// `.cargo/config.toml` turns it on; a crate that builds tokenmix may not).
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
mod lanes {
    pub type V = [f32; 4];

    pub fn zero() -> V {
        [0.0; 4]
    }

    pub fn load(x: &[f32; 4]) -> V {
        *x
    }

    pub fn broadcast(x: &f32) -> V {
        [*x; 4]
    }

    pub fn mul_add(acc: V, a: V, b: V) -> V {
        std::array::from_fn(|i| acc[i] + a[i] * b[i])
    }

    pub fn store(v: V, out: &mut [f32; 4]) {
        *out = v;
    }
}

use lanes::V;

/// One vector's worth of values.
type Quad = [f32; 4];
/// One step of k of a packed B panel, or one row of a tile: NR values as vectors.
type Row = [Quad; NR / 4];

thread_local! {
    /// The packed A and B blocks, kept between calls so a forward pass does not allocate them.
    static PACKED: RefCell<(Vec<[f32; MR]>, Vec<Row>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// `C = A · B`, or `C += A · B` with `accumulate`: A [m, k] and B [k, n] with (row, column)
/// strides, C [m, n] with row stride `ldc`. Panics if an operand is shorter than its extents
/// say (the CPU executor checks them first). In the threaded build (`threads`), a GEMM of at
/// least `cpu::split::macs()` multiply-adds is split by columns over rayon's pool (see
/// [`sgemm_parts`]).
#[allow(clippy::too_many_arguments)]
#[cfg_attr(test, allow(dead_code))] // natively only the tests compile this module (through `sgemm_parts`)
pub fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    sa: (usize, usize),
    b: &[f32],
    sb: (usize, usize),
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    sgemm_parts(parts(m * k * n), m, k, n, A::Raw(a, sa), b, sb, c, ldc, accumulate);
}

/// [`sgemm`] with A packed beforehand ([`PackedA::pack`]): for the calls of one GEMM that share
/// A (the CPU executor's blocks of C's columns, token mixing's images), which would otherwise
/// each pack all of it again. The same products in the same order, so the same bits.
#[cfg_attr(test, allow(dead_code))]
pub fn sgemm_packed(a: &PackedA, n: usize, b: &[f32], sb: (usize, usize), c: &mut [f32], ldc: usize, accumulate: bool) {
    let (m, k) = (a.m, a.k);
    sgemm_parts(parts(m * k * n), m, k, n, A::Packed(a), b, sb, c, ldc, accumulate);
}

/// How many column ranges [`sgemm`] and [`sgemm_packed`] cut a GEMM of `macs` multiply-adds
/// into: in the threaded build the pool's threads from `cpu::split::macs()` on, else one.
#[cfg_attr(test, allow(dead_code))]
fn parts(macs: usize) -> usize {
    #[cfg(feature = "threads")]
    return if macs >= super::cpu::split::macs() { rayon::current_num_threads() } else { 1 };
    #[cfg(not(feature = "threads"))]
    {
        let _ = macs;
        1
    }
}

/// A GEMM's A operand: as it lies in memory (with its row and column strides), or packed.
#[derive(Clone, Copy)]
enum A<'a> {
    Raw(&'a [f32], (usize, usize)),
    Packed(&'a PackedA),
}

/// All of an A operand [m, k] in the panels [`blocked`] reads, packed once: block by block of
/// [`KC`] steps of k, and within one by [`MC`] rows, each as `pack_a` gives it. As large as A
/// itself (its rows rounded up to [`MR`]); kept by the caller between calls.
#[derive(Default)]
pub struct PackedA {
    m: usize,
    k: usize,
    panels: Vec<[f32; MR]>,
}

impl PackedA {
    /// Packs `a` [m, k] with (row, column) strides `sa`, replacing what this held.
    pub fn pack(&mut self, m: usize, k: usize, a: &[f32], sa: (usize, usize)) {
        (self.m, self.k) = (m, k);
        self.panels.clear();
        for pc in (0..k).step_by(KC) {
            for ic in (0..m).step_by(MC) {
                pack_a(&mut self.panels, a, sa, ic, MC.min(m - ic), pc, KC.min(k - pc));
            }
        }
    }

    /// The rows and depth this holds.
    pub fn dims(&self) -> (usize, usize) {
        (self.m, self.k)
    }

    /// The panels of rows `ic..` (a multiple of [`MC`]) over k from `pc` (a multiple of
    /// [`KC`]): what `pack_a` gives for that block.
    fn block(&self, pc: usize, ic: usize) -> &[[f32; MR]] {
        let kc = KC.min(self.k - pc);
        // Every block of k before holds KC steps of all of A's panels; within this one, the
        // row blocks before hold ic / MR panels of kc steps.
        let at = pc * self.m.div_ceil(MR) + ic / MR * kc;
        &self.panels[at..at + MC.min(self.m - ic).div_ceil(MR) * kc]
    }
}

/// [`sgemm`] with C's columns cut into at most `parts` ranges of whole NR-column panels, run in
/// parallel where rayon is (natively, for the tests, and in the threaded wasm build). Each
/// range packs its own B panels (a batch-1 Linear layer's weights are still read from memory
/// once, whatever the thread count) and, given A as it lies, all of A (packed again by each
/// range: for the Linear layers A is the activations, at batch 1 less than half the weights'
/// size); given a [`PackedA`], the ranges read that one. Each element of C is the same sum in the
/// same order as on one thread, so the results do not depend on `parts`.
#[allow(clippy::too_many_arguments)]
fn sgemm_parts(parts: usize, m: usize, k: usize, n: usize, a: A, b: &[f32], sb: (usize, usize), c: &mut [f32], ldc: usize, accumulate: bool) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                c[i * ldc..][..n].fill(0.0);
            }
        }
        return;
    }
    let panels = n.div_ceil(NR);
    #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
    if parts.min(panels) > 1 {
        use rayon::prelude::*;
        let width = panels.div_ceil(parts) * NR;
        assert!(c.len() >= (m - 1) * ldc + n, "C is shorter than its extents");
        let c = Out { ptr: c.as_mut_ptr(), len: c.len() };
        (0..n.div_ceil(width)).into_par_iter().for_each(|part| {
            let j0 = part * width;
            // Each range's C starts at its first column: writes never reach another range's
            // columns (`blocked` writes columns 0..width of its C only).
            let c = c.at_column(j0);
            blocked(m, k, width.min(n - j0), a, &b[j0 * sb.1..], sb, c, ldc, accumulate);
        });
        return;
    }
    #[cfg(not(any(not(target_arch = "wasm32"), feature = "threads")))]
    let _ = (parts, panels); // no pool in this build: one thread
    let c = Out { ptr: c.as_mut_ptr(), len: c.len() };
    blocked(m, k, n, a, b, sb, c, ldc, accumulate);
}

/// C as [`blocked`] writes it: a pointer and the length it may reach, so that threads can each
/// write their own columns of the same rows (no two `&mut` slices of C overlap at any time).
#[derive(Clone, Copy)]
struct Out {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: an `Out` is only handed to threads that write disjoint columns of C (`sgemm_parts`),
// while the `&mut` it came from is borrowed for the whole parallel section.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    /// The same C from column `j0` (< its row length) on.
    #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
    fn at_column(self, j0: usize) -> Out {
        Out { ptr: self.ptr.wrapping_add(j0), len: self.len - j0 }
    }

    /// The `len` values from `at`, checked against C's length.
    #[inline(always)]
    fn slice(&mut self, at: usize, len: usize) -> &mut [f32] {
        assert!(at + len <= self.len, "C is shorter than its extents");
        // SAFETY: in bounds (just checked) of the slice `ptr` came from, whose `&mut` borrow
        // outlives this call; no other live slice covers these values (see `Out`).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), len) }
    }
}

/// One range of C's columns on the calling thread: the packed-panel loops around [`kernel`].
#[allow(clippy::too_many_arguments)]
fn blocked(m: usize, k: usize, n: usize, a: A, b: &[f32], (rsb, csb): (usize, usize), mut c: Out, ldc: usize, accumulate: bool) {
    PACKED.with_borrow_mut(|(ap, bp)| {
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                // The first block of k writes C unless the caller accumulates; the others add.
                let add = accumulate || pc > 0;
                pack_b(bp, b, (rsb, csb), pc, kc, jc, nc);
                for ic in (0..m).step_by(MC) {
                    let mc = MC.min(m - ic);
                    let a_block = match a {
                        A::Raw(a, sa) => {
                            ap.clear();
                            pack_a(ap, a, sa, ic, mc, pc, kc);
                            &ap[..]
                        }
                        A::Packed(packed) => packed.block(pc, ic),
                    };
                    for (jr, b_panel) in bp.chunks_exact(kc).enumerate() {
                        let j0 = jc + jr * NR;
                        let nr = NR.min(n - j0);
                        for (ir, a_panel) in a_block.chunks_exact(kc).enumerate() {
                            let i0 = ic + ir * MR;
                            let tile = kernel(a_panel, b_panel);
                            for (i, row) in tile.iter().enumerate().take(MR.min(m - i0)) {
                                let row = row.as_flattened();
                                let out = c.slice((i0 + i) * ldc + j0, nr);
                                if add {
                                    out.iter_mut().zip(row).for_each(|(o, t)| *o += t);
                                } else {
                                    out.copy_from_slice(&row[..nr]);
                                }
                            }
                        }
                    }
                }
            }
        }
    });
}

/// The MR×NR tile of one A panel times one B panel, summed over their common depth.
#[inline(never)]
fn kernel(a: &[[f32; MR]], b: &[Row]) -> [Row; MR] {
    let mut acc: [[V; NR / 4]; MR] = [[lanes::zero(); NR / 4]; MR];
    for (a, b) in a.iter().zip(b) {
        let b: [V; NR / 4] = std::array::from_fn(|j| lanes::load(&b[j]));
        for (acc, a) in acc.iter_mut().zip(a) {
            let a = lanes::broadcast(a);
            for (acc, b) in acc.iter_mut().zip(b) {
                *acc = lanes::mul_add(*acc, a, b);
            }
        }
    }
    let mut tile = [[[0f32; 4]; NR / 4]; MR];
    for (row, acc) in tile.iter_mut().zip(&acc) {
        for (q, acc) in row.iter_mut().zip(acc) {
            lanes::store(*acc, q);
        }
    }
    tile
}

/// Appends A's rows `i0..i0 + mc`, columns `p0..p0 + kc` as panels of MR rows, each `kc` steps
/// of MR values, zero past row `mc`. Reads along whichever of A's dimensions is contiguous.
#[inline(never)]
fn pack_a(out: &mut Vec<[f32; MR]>, a: &[f32], (rs, cs): (usize, usize), i0: usize, mc: usize, p0: usize, kc: usize) {
    for ir in (0..mc).step_by(MR) {
        let rows = MR.min(mc - ir);
        let at = out.len();
        out.resize(at + kc, [0.0; MR]);
        let panel = &mut out[at..];
        if cs == 1 {
            // Rows contiguous (activations): one row of the panel at a time.
            for i in 0..rows {
                let row = &a[(i0 + ir + i) * rs + p0..][..kc];
                panel.iter_mut().zip(row).for_each(|(step, &v)| step[i] = v);
            }
        } else {
            for (p, step) in panel.iter_mut().enumerate() {
                let base = (i0 + ir) * rs + (p0 + p) * cs;
                step[..rows].iter_mut().enumerate().for_each(|(i, v)| *v = a[base + i * rs]);
            }
        }
    }
}

/// The padding columns of a B panel that is cut at `n`.
static ZEROS: [f32; KC] = [0.0; KC];

/// B's rows `p0..p0 + kc`, columns `j0..j0 + nc` as panels of NR columns, each `kc` steps of
/// NR values, zero past column `nc`. Reads along whichever of B's dimensions is contiguous.
#[inline(never)]
fn pack_b(out: &mut Vec<Row>, b: &[f32], (rs, cs): (usize, usize), p0: usize, kc: usize, j0: usize, nc: usize) {
    out.clear();
    for jr in (0..nc).step_by(NR) {
        let cols = NR.min(nc - jr);
        let at = out.len();
        out.resize(at + kc, [[0.0; 4]; NR / 4]);
        let panel = &mut out[at..];
        if rs == 1 && cs != 1 {
            // Columns contiguous (a Linear layer's [out, in] weight read as its transpose): the
            // panel's NR columns read side by side, zeros past column `nc`, each step written whole.
            let col: [&[f32]; NR] = std::array::from_fn(|j| if j < cols { &b[(j0 + jr + j) * cs + p0..][..kc] } else { &ZEROS[..kc] });
            for (p, step) in panel.iter_mut().enumerate() {
                *step = std::array::from_fn(|q| std::array::from_fn(|l| col[4 * q + l][p]));
            }
        } else if cs == 1 {
            // Rows contiguous (token mixing's activations).
            for (p, step) in panel.iter_mut().enumerate() {
                let row = &b[(p0 + p) * rs + j0 + jr..][..cols];
                step.as_flattened_mut()[..cols].copy_from_slice(row);
            }
        } else {
            for (p, step) in panel.iter_mut().enumerate() {
                let base = (p0 + p) * rs + (j0 + jr) * cs;
                step.as_flattened_mut()[..cols].iter_mut().enumerate().for_each(|(j, v)| *v = b[base + j * cs]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random value in [-1, 1).
    fn value(seed: usize) -> f32 {
        let x = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
        (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Every shape class the blocking has (tiles cut at MR and NR, blocks at MC, KC and NC,
    /// k = 0 and 1), each layout the executor uses (row-major A, transposed B as a Linear
    /// layer's weight, token mixing's W · X) and every packing path (a transposed A, strides
    /// on both dimensions), a padded C, against an f64 reference, with and without accumulating,
    /// on one thread and with C's columns split in two or three ranges (rayon's pool).
    #[test]
    fn matches_an_f64_reference_at_every_edge() {
        let dims = |full: usize| [1, 5, full - 1, full, full + 1, 2 * full + 3];
        let mut cases = 0;
        for m in dims(MR).into_iter().chain([MC - 1, MC + MR + 1]) {
            for k in [0, 1, 7, KC, KC + 3] {
                for n in dims(NR).into_iter().chain([NC + NR + 3]) {
                    // (A strides, B strides): activations · weightᵀ, W · X, a transposed A, and
                    // neither operand contiguous.
                    for (sa, sb) in [((k, 1), (1, k)), ((k, 1), (n, 1)), ((1, m), (1, k)), ((2 * k, 2), (2 * n, 2))] {
                        let a: Vec<f32> = (0..2 * m * k).map(|i| value(i + 1)).collect();
                        let b: Vec<f32> = (0..2 * k * n).map(|i| value(i + 7919)).collect();
                        let ldc = n + 3;
                        let mut packed = PackedA::default();
                        packed.pack(m, k, &a, sa);
                        for (parts, accumulate, pre) in
                            [(1, false, false), (1, true, false), (3, false, false), (2, true, false), (1, false, true), (2, true, true)]
                        {
                            let mut c: Vec<f32> = (0..m * ldc).map(|i| value(i + 104_729)).collect();
                            let before = c.clone();
                            let operand = if pre { A::Packed(&packed) } else { A::Raw(&a, sa) };
                            sgemm_parts(parts, m, k, n, operand, &b, sb, &mut c, ldc, accumulate);
                            for i in 0..m {
                                for j in 0..ldc {
                                    let got = c[i * ldc + j];
                                    if j >= n {
                                        assert_eq!(got, before[i * ldc + j], "wrote past column {n}");
                                        continue;
                                    }
                                    let dot: f64 = (0..k).map(|p| a[i * sa.0 + p * sa.1] as f64 * b[p * sb.0 + j * sb.1] as f64).sum();
                                    let want = dot + if accumulate { before[i * ldc + j] as f64 } else { 0.0 };
                                    let tol = 1e-6 * (k as f64 + 1.0);
                                    assert!(
                                        (got as f64 - want).abs() <= tol,
                                        "m {m} k {k} n {n} strides {sa:?} {sb:?} parts {parts} accumulate {accumulate} packed before {pre}: C[{i},{j}] {got} vs {want}"
                                    );
                                }
                            }
                            cases += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 8 * 5 * 7 * 4 * 6);
    }

    /// Splitting C's columns over threads changes no bit of the result: each element is the
    /// same sum in the same order (the threaded browser build gives the one-thread answers).
    #[test]
    fn column_split_is_bit_identical_to_one_thread() {
        let (m, k, n) = (37, KC + 5, 3 * NR + 5);
        let a: Vec<f32> = (0..m * k).map(|i| value(i + 3)).collect();
        let b: Vec<f32> = (0..k * n).map(|i| value(i + 31)).collect();
        let run = |parts| {
            let mut c = vec![0f32; m * n];
            sgemm_parts(parts, m, k, n, A::Raw(&a, (k, 1)), &b, (1, k), &mut c, n, false);
            c
        };
        let one = run(1);
        assert!(one.iter().any(|&v| v != 0.0), "the GEMM computed nothing");
        for parts in [2, 3, 4, 100] {
            assert!(run(parts).iter().zip(&one).all(|(x, y)| x.to_bits() == y.to_bits()), "{parts} parts differ from one");
        }
    }

    /// A packed once and read by calls on blocks of C's columns (the CPU executor's GEMM in
    /// blocks, token mixing's images) gives the bits of one call on A as it lies, whatever the
    /// blocks' widths, and packing again replaces what was packed.
    #[test]
    fn a_packed_once_for_blocks_of_columns_gives_the_bits_of_one_call() {
        let mut packed = PackedA::default();
        let mut checked = 0;
        for (m, k, n) in [(37, 2 * KC + 5, NC + 3 * NR + 5), (MC + 3, KC + 9, 2 * NR + 1), (5, 7, NR + 3)] {
            for (seed, sa, sb) in [(1, (k, 1), (1, k)), (2, (k, 1), (n, 1)), (3, (1, m), (1, k))] {
                let a: Vec<f32> = (0..m * k).map(|i| value(i + 17 * seed)).collect();
                let b: Vec<f32> = (0..k * n).map(|i| value(i + 7919 * seed)).collect();
                packed.pack(m, k, &a, sa);
                assert_eq!(packed.dims(), (m, k));
                for accumulate in [false, true] {
                    let start: Vec<f32> = (0..m * n).map(|i| value(i + 31)).collect();
                    let mut one = start.clone();
                    sgemm_parts(1, m, k, n, A::Raw(&a, sa), &b, sb, &mut one, n, accumulate);
                    for width in [NR, 3 * NR, 5, n] {
                        for parts in [1, 2] {
                            let mut c = start.clone();
                            for j0 in (0..n).step_by(width) {
                                let nb = width.min(n - j0);
                                sgemm_parts(parts, m, k, nb, A::Packed(&packed), &b[j0 * sb.1..], sb, &mut c[j0..], n, accumulate);
                            }
                            let same = c.iter().zip(&one).all(|(x, y)| x.to_bits() == y.to_bits());
                            assert!(same, "m {m} k {k} n {n} strides {sa:?} {sb:?} blocks of {width}, {parts} parts, accumulate {accumulate}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 3 * 3 * 2 * 4 * 2);
    }
}
