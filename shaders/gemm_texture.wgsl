// GEMM for CPU rasterisers, weight operand from a texture. As gemm_subgroup.wgsl (one
// subgroup per workgroup, each lane loads a different row of A, rows shared by
// subgroupShuffle), but B — always a weight [N, K], read transposed — comes from an rgba32float
// texture of N rows and ceil(K/4) texels, zero-padded. llvmpipe fetches a texel for all lanes
// with vector gathers, 4 k values at once, while a storage-buffer load is a scalar loop over
// lanes. Token mixing is computed transposed (A_TRANS, C_TRANS) so that the weight is B here too.
// With A_TEX the activations are gathered from a texture as well (measured 11-30 GFLOP/s on
// lavapipe at 1568x512x2048 depending on the VM's load; `tokenmix bench --gemm`).

@group(0) @binding(6) var wtex: texture_2d<f32>;
#if A_TEX
// A mirrored as rgba32float: texel (k/4, row) holds A[row, k..k+4]; with A_TRANS (A stored
// [K, M]) texel (m/4, k) holds A[m..m+4, k]. Rows of successive images are stacked.
@group(0) @binding(7) var atex: texture_2d<f32>;
#endif

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

    var rows: array<u32, GROUPS>;
    for (var g = 0u; g < GROUPS; g++) {
        rows[g] = min(m0 + g * LANES + lane, p.m - 1u);
    }
    var cols: array<u32, COLS>;
    for (var j = 0u; j < COLS; j++) {
        cols[j] = min(n0 + j * LANES, p.n - 1u);
    }

    var acc: array<array<f32, COLS>, ROWS>;
    let last = p.k - 1u;
    for (var k = 0u; k < p.k; k += 4u) {
        var bv: array<vec4<f32>, COLS>;
        for (var j = 0u; j < COLS; j++) {
            bv[j] = textureLoad(wtex, vec2<u32>(k / 4u, cols[j]), 0);
        }
        for (var g = 0u; g < GROUPS; g++) {
#if A_TEX
#if A_TRANS
            // Lanes 0-3 fetch rows +0..3 at k+0..3, lanes 4-7 rows +4..7: one texel each.
            let tx = min((m0 + g * LANES) / 4u + lane / 4u, (p.m - 1u) / 4u);
            // Past K: zeros (the clamped row's values times the weights' zero padding would
            // be NaN for an infinite activation).
            let t = select(vec4<f32>(0.0), textureLoad(atex, vec2<u32>(tx, bt * p.k + min(k + lane % 4u, last)), 0), k + lane % 4u <= last);
#else
            let mine = textureLoad(atex, vec2<u32>(k / 4u, bt * p.m + rows[g]), 0);
#endif
#else
            // Past K: zeros, not the clamped last value (the weight texture's zero padding
            // times an infinite activation would be NaN).
            let mine = vec4<f32>(
                load_a(bt, rows[g], k),
                select(0.0, load_a(bt, rows[g], min(k + 1u, last)), k + 1u <= last),
                select(0.0, load_a(bt, rows[g], min(k + 2u, last)), k + 2u <= last),
                select(0.0, load_a(bt, rows[g], min(k + 3u, last)), k + 3u <= last));
#endif
            // (Measured on lavapipe: eight literal-lane subgroupBroadcasts are no faster than
            // subgroupShuffle here, so the shorter form stays.)
            for (var l = 0u; l < LANES; l++) {
#if A_TRANS_TEX
                // Row l of the group is component l % 4 of the texels of lanes (l / 4) * 4 + i.
                let base = (l / 4u) * 4u;
                let c = l % 4u;
                let av = vec4<f32>(subgroupShuffle(t[c], base), subgroupShuffle(t[c], base + 1u),
                                   subgroupShuffle(t[c], base + 2u), subgroupShuffle(t[c], base + 3u));
#else
                let av = subgroupShuffle(mine, l);
#endif
                for (var j = 0u; j < COLS; j++) {
                    acc[g * LANES + l][j] += dot(av, bv[j]);
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
