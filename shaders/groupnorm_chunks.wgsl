// GroupNorm with one group (PoolFormer's norm) on real GPUs, for images larger than one chunk
// (`ops::norm::group_norm`; smaller ones, and every image on a CPU rasteriser, go to
// groupnorm.wgsl's one workgroup per image):
//   y[b, t, c] = (x[b, t, c] - mean_b) / sqrt(var_b + eps) * gamma[c] + beta[c]
// Each image is cut into `parts` chunks of `chunk` elements (the last one shorter), so that a
// batch-1 image fills the GPU rather than one workgroup (PoolFormer-S12's first stage: 98
// workgroups, not 1). Each chunk has a workgroup whose 64 invocations stride it together
// (neighbouring invocations, neighbouring elements; LANES, row_index, row_sum: row_common.wgsl, compiled
// with ROW_WORKGROUP). Two dispatches:
// - STATS: per chunk, its mean and centred sum of squares M2 (two passes over the chunk, as in
//   layernorm.wgsl), into `partial` [batch, parts, 2];
// - otherwise: per chunk, the image's mean and M2 combined from every chunk's (Chan et al.:
//   M2 = sum M2_c + n_c (mean_c - mean)^2, no cancellation), then the normalising pass over
//   the chunk.

struct Params {
    batch: u32,
    tokens: u32,
    d: u32,
    eps: f32,
    parts: u32,
    chunk: u32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
#if STATS
@group(0) @binding(2) var<storage, read_write> partial: array<f32>;
#else
@group(0) @binding(2) var<storage, read> gamma: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read> partial: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;
#endif

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    ids: RowLanes,
) {
    let g = row_index(wid, nwg, ids.lid);
    let lane = row_lane(ids);
    if (g >= p.batch * p.parts) {
        return;
    }
    let b = g / p.parts;
    let part = g % p.parts;
    let n = p.tokens * p.d;
    let image = b * n;
    let start = part * p.chunk;
    let end = min(start + p.chunk, n);
#if STATS
    var sum = 0.0;
    for (var i = start + lane; i < end; i += LANES) {
        sum += x[image + i];
    }
    let count = f32(end - start);
    let mean = row_sum(lane, sum) / count;
    var sq = 0.0;
    for (var i = start + lane; i < end; i += LANES) {
        let t = x[image + i] - mean;
        sq += t * t;
    }
    let m2 = row_sum(lane, sq);
    if (lane == 0u) {
        partial[2u * g] = mean;
        partial[2u * g + 1u] = m2;
    }
#else
    // Every invocation combines the image's chunks itself (the same reads, the same order):
    // no barrier, and `parts` is a few dozen.
    let first = b * p.parts;
    var total = 0.0;
    for (var c = 0u; c < p.parts; c++) {
        total += f32(min(p.chunk, n - c * p.chunk)) * partial[2u * (first + c)];
    }
    let mean = total / f32(n);
    var m2 = 0.0;
    for (var c = 0u; c < p.parts; c++) {
        let dm = partial[2u * (first + c)] - mean;
        m2 += partial[2u * (first + c) + 1u] + f32(min(p.chunk, n - c * p.chunk)) * dm * dm;
    }
    let rstd = inverseSqrt(m2 / f32(n) + p.eps);
    for (var i = start + lane; i < end; i += LANES) {
        let c = i % p.d;
        y[image + i] = (x[image + i] - mean) * rstd * gamma[c] + beta[c];
    }
#endif
}
