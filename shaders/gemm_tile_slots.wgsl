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

// Where a run of 4 values starts (A_VEC, B_VEC): row `row` and column `col` of an operand of
// `rows` x `cols` (the columns its contiguous dimension, a multiple of 4) with offset `off`,
// batch stride `bs` and leading dimension `ld`, clamped into the operand, as the
// value-by-value loads are, so that a run outside it reads its last run in place.
fn run_at(off: u32, bs: u32, ld: u32, bt: u32, row: u32, col: u32, rows: u32, cols: u32) -> u32 {
    return off + bt * bs + min(row, rows - 1u) * ld + min(col, cols - 4u);
}
