// LayerNorm over the last dimension: y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * gamma + beta,
// with the biased variance, as torch. Two passes over the row (mean, then centred variance)
// rather than E[x^2] - E[x]^2, which cancels badly in fp32.
// x rows may be strided views (x_off + r * x_ld): gMLP normalises the second half of each
// hidden row in place of a split. y is dense [rows, d].
// One invocation per row: rows are many (batch x tokens) and d is at most a few thousand.

struct Params {
    rows: u32,
    d: u32,
    eps: f32,
    x_ld: u32,
    x_off: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// X_F16: x is an activation slot the executor keeps in f16 (`--precision f16`: gMLP's hidden).
#if X_F16
enable f16;
@group(0) @binding(1) var<storage, read> x: array<f16>;
#else
@group(0) @binding(1) var<storage, read> x: array<f32>;
#endif
@group(0) @binding(2) var<storage, read> gamma: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = gid.x + gid.y * nwg.x * 64u;
    if (row >= p.rows) {
        return;
    }
    let base = p.x_off + row * p.x_ld;
    var sum = 0.0;
    for (var i = 0u; i < p.d; i++) {
        sum += f32(x[base + i]);
    }
    let mean = sum / f32(p.d);
    var sq = 0.0;
    for (var i = 0u; i < p.d; i++) {
        let t = f32(x[base + i]) - mean;
        sq += t * t;
    }
    let rstd = inverseSqrt(sq / f32(p.d) + p.eps);
    let out = row * p.d;
    for (var i = 0u; i < p.d; i++) {
        y[out + i] = (f32(x[base + i]) - mean) * rstd * gamma[i] + beta[i];
    }
}
