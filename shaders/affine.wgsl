// ResMLP's Affine "norm": y[r, c] = alpha[c] * x[r, c] + beta[c] (torch.addcmul(beta, alpha, x)).
// No statistics: ResMLP trains without normalisation, the affine map only rescales channels.

struct Params {
    rows: u32,
    d: u32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> alpha: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= p.rows * p.d) {
        return;
    }
    let c = i % p.d;
    y[i] = fma(alpha[c], x[i], beta[c]);
}
