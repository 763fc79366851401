// Shared by the two workgroup-tiled GEMMs (gemm_tiled.wgsl, gemm_coop.wgsl), which define the
// tile TM x TN and its k step BK: the order in which a workgroup's invocations fetch the A and
// B tiles from global memory, so that consecutive invocations read consecutive addresses
// whatever the operand's layout.

// Where fetch e of this invocation lands in the A tile: (kk, mm). Consecutive invocations take
// consecutive addresses: along k for row-major A, along m for A_TRANS ([K, M]).
fn a_slot(e: u32) -> vec2<u32> {
#if A_TRANS
    return vec2<u32>(e / TM, e % TM);
#else
    return vec2<u32>(e % BK, e / BK);
#endif
}

// Fetch e of the B tile: (kk, nn); along k for B_TRANS ([N, K]), along n otherwise.
fn b_slot(e: u32) -> vec2<u32> {
#if B_TRANS
    return vec2<u32>(e % BK, e / BK);
#else
    return vec2<u32>(e / TN, e % TN);
#endif
}

// Runs of 4 (A_VEC, B_VEC: the operand's contiguous dimension is a multiple of 4, so a run is
// wholly inside or wholly outside it). Run r of the A tile starts at (kk, mm) and its values
// follow one another by A_STEP: along m under A_TRANS, along k otherwise; consecutive runs are
// consecutive in memory, as consecutive fetches are for a_slot.
#if A_TRANS
const A_STEP = vec2<u32>(0u, 1u);
#else
const A_STEP = vec2<u32>(1u, 0u);
#endif

fn a_run(r: u32) -> vec2<u32> {
#if A_TRANS
    return vec2<u32>(r / (TM / 4u), (r % (TM / 4u)) * 4u);
#else
    return vec2<u32>((r % (BK / 4u)) * 4u, r / (BK / 4u));
#endif
}

// Run r of the B tile: (kk, nn), by B_STEP: along k under B_TRANS, along n otherwise.
#if B_TRANS
const B_STEP = vec2<u32>(1u, 0u);
#else
const B_STEP = vec2<u32>(0u, 1u);
#endif

fn b_run(r: u32) -> vec2<u32> {
#if B_TRANS
    return vec2<u32>((r % (BK / 4u)) * 4u, r / (BK / 4u));
#else
    return vec2<u32>(r / (TN / 4u), (r % (TN / 4u)) * 4u);
#endif
}

// The run of A that starts at s = (kk, mm) of the tile at (m0, k0) (of B: s = (kk, nn) of the
// tile at (k0, n0)), zero where it lies outside the operand or at k_end and past; read from an
// address clamped into the operand as the value-by-value loads are, so that a run outside it
// reads its last run in place (one vector load under A_VEC4 / B_VEC4: a_run4, b_run4).
fn a_run_load(bt: u32, m0: u32, k0: u32, k_end: u32, s: vec2<u32>) -> vec4<f32> {
    let m = m0 + s.y;
    let k = k0 + s.x;
#if A_TRANS
    let at = run_at(p.a_off, p.a_bs, p.a_ld, bt, k, m, p.k, p.m);
#else
    let at = run_at(p.a_off, p.a_bs, p.a_ld, bt, m, k, p.m, p.k);
#endif
    return select(vec4<f32>(0.0), a_run4(at), m < p.m && k < k_end);
}

fn b_run_load(bt: u32, k0: u32, n0: u32, k_end: u32, s: vec2<u32>) -> vec4<f32> {
    let n = n0 + s.y;
    let k = k0 + s.x;
#if B_TRANS
    let at = run_at(p.b_off, p.b_bs, p.b_ld, bt, n, k, p.n, p.k);
#else
    let at = run_at(p.b_off, p.b_bs, p.b_ld, bt, k, n, p.k, p.n);
#endif
    return select(vec4<f32>(0.0), b_run4(at), n < p.n && k < k_end);
}

// Row `row`, column `col` of an operand of `rows` x `cols`, its columns the contiguous
// dimension, with offset `off`, batch stride `bs` and leading dimension `ld`, clamped.
fn run_at(off: u32, bs: u32, ld: u32, bt: u32, row: u32, col: u32, rows: u32, cols: u32) -> u32 {
    return off + bt * bs + min(row, rows - 1u) * ld + min(col, cols - 4u);
}
