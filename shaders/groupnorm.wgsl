// GroupNorm with one group (PoolFormer's norm): each image's whole [tokens, channels] tensor
// is normalised by its own mean and (biased) variance, then scaled and shifted per channel:
//   y[b, t, c] = (x[b, t, c] - mean_b) / sqrt(var_b + eps) * gamma[c] + beta[c]
// The layout is channels-last, which does not matter for the statistics. One workgroup per
// image: a strided pass for the mean, a second for the centred variance (two-pass, as in
// layernorm.wgsl), each reduced through workgroup memory, then the normalising pass.

struct Params {
    batch: u32,
    tokens: u32,
    d: u32,
    eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gamma: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
var<workgroup> partial: array<f32, WG>;

// Sum of `v` over the workgroup; every invocation gets the result.
fn workgroup_sum(lid: u32, v: f32) -> f32 {
    partial[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = p.tokens * p.d;
    let base = wid.x * n;
    var sum = 0.0;
    for (var i = lid; i < n; i += WG) {
        sum += x[base + i];
    }
    let mean = workgroup_sum(lid, sum) / f32(n);
    var sq = 0.0;
    for (var i = lid; i < n; i += WG) {
        let t = x[base + i] - mean;
        sq += t * t;
    }
    let rstd = inverseSqrt(workgroup_sum(lid, sq) / f32(n) + p.eps);
    for (var i = lid; i < n; i += WG) {
        let c = i % p.d;
        y[base + i] = (x[base + i] - mean) * rstd * gamma[c] + beta[c];
    }
}
