// GEMM for CPU rasterisers (lavapipe/llvmpipe, SwiftShader). There a workgroup runs on one
// thread as SIMD lanes, barriers are expensive, and a load whose address is the same for every
// lane is one scalar load plus a broadcast, while a per-lane address costs one load per lane.
// So: one 8-lane workgroup, no shared memory, no barriers. The ROWS rows of A a workgroup
// needs are read at uniform addresses (they depend only on workgroup_id); each lane owns COLS
// columns of B (lane, lane + 8, ...) and keeps a ROWS x COLS accumulator block in registers.

const ROWS: u32 = {{ROWS}}u;
const COLS: u32 = {{COLS}}u;
const LANES: u32 = 8u;

@compute @workgroup_size(8)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let bt = wg.z;
    let m0 = wg.y * ROWS;
    let n0 = wg.x * (LANES * COLS) + lane;

    // Clamp instead of branching inside the k loop; out-of-range results are not stored.
    var rows: array<u32, ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        rows[r] = min(m0 + r, p.m - 1u);
    }
    var cols: array<u32, COLS>;
    for (var j = 0u; j < COLS; j++) {
        cols[j] = min(n0 + j * LANES, p.n - 1u);
    }

    var acc: array<array<f32, COLS>, ROWS>;
    for (var k = 0u; k < p.k; k++) {
        var bv: array<f32, COLS>;
        for (var j = 0u; j < COLS; j++) {
            bv[j] = load_b(bt, k, cols[j]);
        }
        for (var r = 0u; r < ROWS; r++) {
            let av = load_a(bt, rows[r], k);
            for (var j = 0u; j < COLS; j++) {
                acc[r][j] = fma(av, bv[j], acc[r][j]);
            }
        }
    }

    for (var r = 0u; r < ROWS; r++) {
        for (var j = 0u; j < COLS; j++) {
            let m = m0 + r;
            let n = n0 + j * LANES;
            if (m < p.m && n < p.n) {
                store_c(bt, m, n, acc[r][j]);
            }
        }
    }
}
