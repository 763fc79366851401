// GEMM for real GPUs: classic shared-memory tiling. A 16x16 workgroup computes a 64x64 tile
// of C; each invocation keeps a 4x4 block in registers. Tiles of A (64 x 16) and B (16 x 64)
// are staged in workgroup memory so every global value is read once per workgroup. Rows and
// columns are interleaved (ty + 16 i, tx + 16 j) so neighbouring invocations touch
// neighbouring addresses, in global and in shared memory alike.

const TILE: u32 = 64u;
const BK: u32 = 16u;

var<workgroup> ta: array<f32, 1024>; // [BK][TILE]: ta[kk * TILE + mm]
var<workgroup> tb: array<f32, 1024>; // [BK][TILE]: tb[kk * TILE + nn]

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let bt = wg.z;
    let m0 = wg.y * TILE;
    let n0 = wg.x * TILE;
    let tid = lid.y * 16u + lid.x;

    var acc: array<array<f32, 4>, 4>;
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        // 1024 values of each tile, 4 per invocation.
        for (var i = 0u; i < 4u; i++) {
            let e = tid + i * 256u;
#if B_TRANS
            // Tile element (kk, nn) read with kk fastest: consecutive k of one weight row.
            let kk = e % BK;
            let nn = e / BK;
#else
            let nn = e % TILE;
            let kk = e / TILE;
#endif
            let k = k0 + kk;
            let n = n0 + nn;
            var bvalue = 0.0;
            if (k < p.k && n < p.n) {
                bvalue = load_b(bt, k, n);
            }
            tb[kk * TILE + nn] = bvalue;

            let ka = e % BK;
            let ma = e / BK;
            var avalue = 0.0;
            if (k0 + ka < p.k && m0 + ma < p.m) {
                avalue = load_a(bt, m0 + ma, k0 + ka);
            }
            ta[ka * TILE + ma] = avalue;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {
                av[i] = ta[kk * TILE + lid.y + 16u * i];
                bv[i] = tb[kk * TILE + lid.x + 16u * i];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i][j] = fma(av[i], bv[j], acc[i][j]);
                }
            }
        }
        workgroupBarrier();
    }

    for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
            let m = m0 + lid.y + 16u * i;
            let n = n0 + lid.x + 16u * j;
            if (m < p.m && n < p.n) {
                store_c(bt, m, n, acc[i][j]);
            }
        }
    }
}
