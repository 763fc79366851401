// The second pass of a split-K GEMM (after gemm_tiled.wgsl with SPLIT_K): C[b][m, n] (+)=
// epilogue(sum over the parts of partial[part][b][m][n]). One invocation per element of C,
// consecutive invocations along n.

@group(0) @binding(6) var<storage, read> partial: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let n = wg.x * 64u + lid.x;
    let m = wg.y;
    let bt = wg.z;
    if (n >= p.n) {
        return;
    }
    var acc = 0.0;
    for (var part = 0u; part < p.splits; part++) {
        acc += partial[((part * p.batch + bt) * p.m + m) * p.n + n];
    }
    store_c(bt, m, n, acc);
}
