// GEMM for CPU rasterisers with subgroups (lavapipe/llvmpipe), at any subgroup size. There a
// workgroup runs as SIMD lanes on one thread, barriers are expensive, and every storage-buffer
// load costs a scalar loop over the lanes — whatever its address. So the kernel is built to
// need few loads per FMA: each lane loads a *different* row of A (every lane of that load is
// useful) and the rows are then shared across lanes with subgroupShuffle. A workgroup is
// exactly one subgroup of LANES lanes: no shared memory, no barriers. On a GPU (32 or 64
// lanes) that is one warp/wavefront per workgroup; the autotuner decides whether it pays.
// Each lane owns COLS columns of C (lane, lane + LANES, ...) for ROWS rows.

// (naga takes subgroup builtins without `enable subgroups;` when the device has Features::SUBGROUP.)

// One workgroup is one subgroup: LANES is the adapter's (smallest) subgroup size, 4 to 64.
const LANES: u32 = {{LANES}}u;
const ROWS: u32 = {{ROWS}}u;        // a multiple of LANES
const GROUPS: u32 = {{ROWS}}u / {{LANES}}u;
const COLS: u32 = {{COLS}}u;

@compute @workgroup_size({{LANES}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32) {
    let bt = wg.z;
    let m0 = wg.y * ROWS;
    let n0 = wg.x * (LANES * COLS) + lane;

    // Clamped indices keep every load in range; out-of-range results are never stored.
    var rows: array<u32, GROUPS>;
    for (var g = 0u; g < GROUPS; g++) {
        rows[g] = min(m0 + g * LANES + lane, p.m - 1u);
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
        for (var g = 0u; g < GROUPS; g++) {
            let mine = load_a(bt, rows[g], k);
            for (var l = 0u; l < LANES; l++) {
                let av = subgroupShuffle(mine, l);
                for (var j = 0u; j < COLS; j++) {
                    acc[g * LANES + l][j] = fma(av, bv[j], acc[g * LANES + l][j]);
                }
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
