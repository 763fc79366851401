// GEMM on tensor cores: f16 x f16 -> f32 cooperative matrices (wgpu's
// `wgpu_cooperative_matrix`, Vulkan's VK_KHR_cooperative_matrix), square fragments of
// F = 16 (NVIDIA, AMD) or F = 8 where the adapter offers only 8x8x8 (Mesa 26's lavapipe, on
// which this kernel is tested with real cooperative matrices). Below, sizes are for F = 16
// and FR = 2 (`coop`); `coop128` has FR = 4.
//
// A workgroup computes a 2QS x 2QS tile of C (QS = FR x F: 64x64 for `coop`, 128x128 for
// `coop128`) with four subgroups, one per QS x QS quarter, each holding FR x FR fragments of C
// in f32 (at FR = 4 and F = 16, CUTLASS's usual 128x128 tile of four 64x64 warp tiles). Per
// step of BK = 2F values of k, all invocations stage the 2QS x BK tile of A and the BK x 2QS
// tile of B into workgroup memory, rounded to f16, each laid out as its operand is in memory
// (A row-major, or column-major under A_TRANS; B row-major, or column-major under B_TRANS, the
// `linear` layout's weights), so that the invocations, which fetch consecutive addresses of
// the operand, also store to consecutive addresses of workgroup memory: the other way round,
// the k-contiguous weights of `linear` went to addresses a whole tile row apart, all in one
// bank. The fragment loads say which layout they read (coopLoadT row-major, coopLoad
// column-major). (The operand views of gemm_common.wgsl, so
// token mixing, implicit im2col and f16 weights all work); each subgroup then loads its
// fragments from there and multiplies. The epilogue goes through workgroup memory: each
// subgroup stores ROW fragments of a fragment row at a time to its own slot, side by side (a
// ROW x F wide strip, so that the invocations reading it, and the C rows they write, are
// contiguous), and every invocation applies store_c (bias, GELU, scale, gate, residual) to a
// share of the four quarters' strips, ROW = FR, FR / 2, … or 1 fragments per round (two
// barriers each), as many as fit the adapter's workgroup memory.
// Each staged row is padded by PAD f16 values (16 bytes) where that fits: a fragment load reads
// F rows of the tile, 16 bytes of each per phase, and unpadded rows are 64 to 512 bytes apart,
// a multiple of the 128 bytes of NVIDIA's 32 banks, so that 4 to 8 of them fall in the same
// banks; 16 bytes more per row put 8 consecutive rows in 8 different groups of 4 banks. (The
// fragment loads take a stride, so padding, not a swizzle as the tiled kernels use.) Rust's
// coop_sizes prefers, within the budget, padding, then two stages, then the widest epilogue.
// The fragments are named variables spelled out with `#unroll` (c00, c01, …), not an array.
//
// Rounding A (activations) to f16 is what `--precision f16` allows; accumulation stays f32.
// Values beyond f16's range (65504) become infinite, as they would in any f16 GEMM.
//
// The workgroup is 4 x the adapter's largest subgroup size (LANES). Where the driver runs it
// as smaller subgroups (it may choose any size from the adapter's minimum to its maximum),
// subgroup s computes quarter s % 4, those past the first four redundantly and into slots of
// their own (SLOTS = 4 x largest / smallest), which nobody reads: correct at any size.
//
// EMULATE replaces the five matrix operations by the same arithmetic done lane by lane on the
// same staged tiles (each lane owning elements lane, lane + LANES, … of each fragment), for
// adapters without cooperative matrices whose subgroups have one fixed size: CI's lavapipe runs
// this kernel's staging, fragment addressing, slots and epilogue that way.

#if EMULATE
#else
enable wgpu_cooperative_matrix;
#endif
enable f16;

const F: u32 = {{F}}u;              // fragment size: F x F x F
const FF: u32 = F * F;              // elements of a fragment
const FR: u32 = {{FR}}u;            // fragments per subgroup along m, and along n
const QS: u32 = FR * F;             // a subgroup's quarter of the tile: QS x QS
const TM: u32 = 2u * QS;
const TN: u32 = 2u * QS;
const BK: u32 = 2u * F;
const NT: u32 = {{NT}}u;            // invocations: 4 x LANES
const SLOTS: u32 = {{SLOTS}}u;      // subgroups at the smallest size: 4 x largest / smallest
const ROW: u32 = {{ROW}}u;          // fragments per epilogue round: a divisor of FR
const STAGES: u32 = {{STAGES}}u;    // staged tiles: 2 (DOUBLE, perhaps PREFETCH) or 1
const PAD: u32 = {{PAD}}u;          // f16 values after each staged row: 8 (16 bytes) or 0
const SW: u32 = ROW * F;            // width of a slot's strip
const LA: u32 = TM * BK / NT;       // A values each invocation stages per k step
const LB: u32 = TN * BK / NT;
// The staged tiles' row strides (padded) and one stage's size.
#if A_TRANS
const A_LD: u32 = TM + PAD;         // [STAGES][BK][TM + PAD]
const A_STAGE: u32 = BK * A_LD;
#else
const A_LD: u32 = BK + PAD;         // [STAGES][TM][BK + PAD]
const A_STAGE: u32 = TM * A_LD;
#endif
#if B_TRANS
const B_LD: u32 = BK + PAD;         // [STAGES][TN][BK + PAD]
const B_STAGE: u32 = TN * B_LD;
#else
const B_LD: u32 = TN + PAD;         // [STAGES][BK][TN + PAD]
const B_STAGE: u32 = BK * B_LD;
#endif

var<workgroup> ta: array<f16, STAGES * A_STAGE>;
var<workgroup> tb: array<f16, STAGES * B_STAGE>;
var<workgroup> tc: array<f32, SLOTS * ROW * FF>; // [SLOTS][F][ROW x F]

// (a_slot, b_slot: gemm_tile_slots.wgsl.)

// Where the A tile's element (row mm, kk) and the B tile's (kk, column nn) are staged in
// stage st.
fn ta_at(st: u32, mm: u32, kk: u32) -> u32 {
#if A_TRANS
    return st * A_STAGE + kk * A_LD + mm;
#else
    return st * A_STAGE + mm * A_LD + kk;
#endif
}

fn tb_at(st: u32, kk: u32, nn: u32) -> u32 {
#if B_TRANS
    return st * B_STAGE + nn * B_LD + kk;
#else
    return st * B_STAGE + kk * B_LD + nn;
#endif
}

// The tiles at k0, zero outside A and B, rounded to f16. Each invocation's share of the A tile
// is NA pieces: `a_fetch` reads piece i from global memory, `a_put` stores it into a stage of
// workgroup memory (B's likewise). Under A_VEC (B_VEC) the operand's contiguous dimension (k
// for row-major A and B_TRANS, m for A_TRANS, n for row-major B) is a multiple of 4, so its
// runs of 4 along that dimension, which tile edges never split (TM, TN and BK are multiples of
// 4), are wholly inside or wholly outside the operand: a piece is a whole run, one address and
// one bounds check for four values (`a_run`, `a_run_load`, `A_STEP` and B's:
// gemm_tile_slots.wgsl; consecutive invocations take consecutive runs, so the reads stay
// coalesced and the stores contiguous; an invocation's last run may be idle), and under A_VEC4
// (B_VEC4) one vector load. Otherwise a piece is one value, through the operand views of
// gemm_common.wgsl (implicit im2col too). (A's and B's functions are written out twice: a WGSL
// function cannot take a storage or workgroup array.)
const RUNS_A: u32 = TM * BK / 4u;               // runs of 4 in a tile
const RUNS_B: u32 = TN * BK / 4u;
#if A_VEC
const NA: u32 = (RUNS_A + NT - 1u) / NT;
alias APiece = vec4<f16>;

fn a_fetch(bt: u32, m0: u32, k0: u32, tid: u32, i: u32) -> vec4<f16> {
    return vec4<f16>(a_run_load(bt, m0, k0, p.k, a_run(min(tid + i * NT, RUNS_A - 1u))));
}

fn a_put(st: u32, tid: u32, i: u32, v: vec4<f16>) {
    let r = tid + i * NT;
    if (r < RUNS_A) {
        let s = a_run(r);
        for (var j = 0u; j < 4u; j++) {
            let e = s + j * A_STEP;
            ta[ta_at(st, e.y, e.x)] = v[j];
        }
    }
}
#else
const NA: u32 = LA;
alias APiece = f16;

fn a_fetch(bt: u32, m0: u32, k0: u32, tid: u32, i: u32) -> f16 {
    let s = a_slot(tid + i * NT);
    let m = m0 + s.y;
    let k = k0 + s.x;
    return f16(select(0.0, load_a(bt, min(m, p.m - 1u), min(k, p.k - 1u)), m < p.m && k < p.k));
}

fn a_put(st: u32, tid: u32, i: u32, v: f16) {
    let s = a_slot(tid + i * NT);
    ta[ta_at(st, s.y, s.x)] = v;
}
#endif
#if B_VEC
const NB: u32 = (RUNS_B + NT - 1u) / NT;
alias BPiece = vec4<f16>;

fn b_fetch(bt: u32, n0: u32, k0: u32, tid: u32, i: u32) -> vec4<f16> {
    return vec4<f16>(b_run_load(bt, k0, n0, p.k, b_run(min(tid + i * NT, RUNS_B - 1u))));
}

fn b_put(st: u32, tid: u32, i: u32, v: vec4<f16>) {
    let r = tid + i * NT;
    if (r < RUNS_B) {
        let s = b_run(r);
        for (var j = 0u; j < 4u; j++) {
            let e = s + j * B_STEP;
            tb[tb_at(st, e.x, e.y)] = v[j];
        }
    }
}
#else
const NB: u32 = LB;
alias BPiece = f16;

fn b_fetch(bt: u32, n0: u32, k0: u32, tid: u32, i: u32) -> f16 {
    let s = b_slot(tid + i * NT);
    let n = n0 + s.y;
    let k = k0 + s.x;
    return f16(select(0.0, load_b(bt, min(k, p.k - 1u), min(n, p.n - 1u)), n < p.n && k < p.k));
}

fn b_put(st: u32, tid: u32, i: u32, v: f16) {
    let s = b_slot(tid + i * NT);
    tb[tb_at(st, s.x, s.y)] = v;
}
#endif

// The tiles at k0 straight into stage st.
fn stage_tiles(st: u32, bt: u32, m0: u32, n0: u32, k0: u32, tid: u32) {
    for (var i = 0u; i < NA; i++) {
        a_put(st, tid, i, a_fetch(bt, m0, k0, tid, i));
    }
    for (var i = 0u; i < NB; i++) {
        b_put(st, tid, i, b_fetch(bt, n0, k0, tid, i));
    }
}

#if PREFETCH
// The tiles at k0 held in registers across a multiply (fetch_tiles), then stored (put_tiles).
var<private> ra: array<APiece, NA>;
var<private> rb: array<BPiece, NB>;

fn fetch_tiles(bt: u32, m0: u32, n0: u32, k0: u32, tid: u32) {
    for (var i = 0u; i < NA; i++) {
        ra[i] = a_fetch(bt, m0, k0, tid, i);
    }
    for (var i = 0u; i < NB; i++) {
        rb[i] = b_fetch(bt, n0, k0, tid, i);
    }
}

fn put_tiles(st: u32, tid: u32) {
    for (var i = 0u; i < NA; i++) {
        a_put(st, tid, i, ra[i]);
    }
    for (var i = 0u; i < NB; i++) {
        b_put(st, tid, i, rb[i]);
    }
}
#endif

// Fragments (fi, fj0) to (fi, fj0 + ROW - 1) of every quarter, as stored side by side in slots
// 0-3, through the epilogue into C.
fn write_fragments(bt: u32, m0: u32, n0: u32, fi: u32, fj0: u32, tid: u32) {
    for (var e = tid; e < 4u * ROW * FF; e += NT) {
        let q = e / (ROW * FF);
        let r = (e / SW) % F;
        let col = e % SW;
        let m = m0 + (q / 2u) * QS + fi * F + r;
        let n = n0 + (q % 2u) * QS + fj0 * F + col;
        if (m < p.m && n < p.n) {
            store_c(bt, m, n, tc[e]);
        }
    }
}

#if EMULATE
const EPL: u32 = FF / {{LANES}}u;   // elements of a fragment each lane owns

// acc[f * EPL + i] += row (arow + r) of the A tile . column (bcol + c) of the B tile over F
// values of k from kk, for the elements (r, c) this lane owns of fragment f.
fn mma_emulated(acc: ptr<function, array<f32, FR * FR * EPL>>, st: u32, f: u32, arow: u32, bcol: u32, kk: u32, lane: u32) {
    for (var i = 0u; i < EPL; i++) {
        let e = lane + i * {{LANES}}u;
        let r = e / F;
        let col = e % F;
        var s = 0.0;
        for (var j = 0u; j < F; j++) {
            s = fma(f32(ta[ta_at(st, arow + r, kk + j)]), f32(tb[tb_at(st, kk + j, bcol + col)]), s);
        }
        (*acc)[f * EPL + i] += s;
    }
}
#endif

@compute @workgroup_size({{NT}})
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let bt = wg.z;
    let m0 = wg.y * TM;
    let n0 = wg.x * TN;
    let quarter = sg % 4u;
    let qm = (quarter / 2u) * QS;  // the quarter's first row and column in the tile
    let qn = (quarter % 2u) * QS;
    let slot = sg * ROW * FF;
#if EMULATE
    var acc: array<f32, FR * FR * EPL>;
#else
#unroll i FR
#unroll j FR
    var c{i}{j} = coop_mat{{F}}x{{F}}<f32, C>();
#end
#end
    let a_ld = A_LD;
    let b_ld = B_LD;
#endif

    // Under DOUBLE, step k0 multiplies the tiles of stage st while the next step's go to the
    // other stage, with one barrier per step: the barrier that ends a step is passed only once
    // every subgroup has read stage st and written the other. Under PREFETCH too, the next
    // step's tiles are fetched into registers before the multiply and stored after it, so that
    // their global latency overlaps the matrix multiply-adds (as in the tiled kernels), where
    // the registers allow. Else fetch, store, barrier, multiply, barrier.
    var st = 0u;
#if DOUBLE
    stage_tiles(0u, bt, m0, n0, 0u, tid);
    workgroupBarrier();
#endif
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
#if DOUBLE
        let more = k0 + BK < p.k;
#if PREFETCH
        if (more) {
            fetch_tiles(bt, m0, n0, k0 + BK, tid);
        }
#endif
#else
        stage_tiles(0u, bt, m0, n0, k0, tid);
        workgroupBarrier();
#endif
        for (var kk = 0u; kk < BK; kk += F) {
#if EMULATE
#unroll i FR
#unroll j FR
            mma_emulated(&acc, st, {i}u * FR + {j}u, qm + {i}u * F, qn + {j}u * F, kk, lane);
#end
#end
#else
            // (Every address a `let` of its own: the SPIR-V the matrix operations need.)
#unroll i FR
            let ia{i} = ta_at(st, qm + {i}u * F, kk);
#if A_TRANS
            let a{i} = coopLoad<coop_mat{{F}}x{{F}}<f16, A>>(&ta[ia{i}], a_ld);
#else
            let a{i} = coopLoadT<coop_mat{{F}}x{{F}}<f16, A>>(&ta[ia{i}], a_ld);
#endif
#end
#unroll j FR
            let ib{j} = tb_at(st, kk, qn + {j}u * F);
#if B_TRANS
            let b{j} = coopLoad<coop_mat{{F}}x{{F}}<f16, B>>(&tb[ib{j}], b_ld);
#else
            let b{j} = coopLoadT<coop_mat{{F}}x{{F}}<f16, B>>(&tb[ib{j}], b_ld);
#endif
#end
#unroll i FR
#unroll j FR
            c{i}{j} = coopMultiplyAdd(a{i}, b{j}, c{i}{j});
#end
#end
#endif
        }
#if DOUBLE
        if (more) {
#if PREFETCH
            put_tiles(1u - st, tid);
#else
            stage_tiles(1u - st, bt, m0, n0, k0 + BK, tid);
#endif
        }
        st = 1u - st;
#endif
        workgroupBarrier();
    }

    // ROW fragments at a time: each subgroup stores them side by side in its slot, then all
    // invocations write the four quarters' strips out.
#if EMULATE
    for (var f = 0u; f < FR * FR; f++) {
        let fj = f % FR;
        for (var i = 0u; i < EPL; i++) {
            let e = lane + i * {{LANES}}u;
            tc[slot + (e / F) * SW + (fj % ROW) * F + e % F] = acc[f * EPL + i];
        }
        if ((fj + 1u) % ROW == 0u) {
            workgroupBarrier();
            write_fragments(bt, m0, n0, f / FR, fj + 1u - ROW, tid);
            workgroupBarrier();
        }
    }
#else
    let c_ld = SW;
#unroll i FR
#unroll j FR
    let ic{i}{j} = slot + ({j}u % ROW) * F;
    coopStoreT(c{i}{j}, &tc[ic{i}{j}], c_ld);
    if (({j}u + 1u) % ROW == 0u) {
        workgroupBarrier();
        write_fragments(bt, m0, n0, {i}u, {j}u + 1u - ROW, tid);
        workgroupBarrier();
    }
#end
#end
#endif
}
