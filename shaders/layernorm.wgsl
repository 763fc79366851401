// LayerNorm over the last dimension: y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * gamma + beta,
// with the biased variance, as torch. Two passes over the row (mean, then centred variance)
// rather than E[x^2] - E[x]^2, which cancels badly in fp32.
// x rows may be strided views (x_off + r * x_ld): gMLP normalises the second half of each
// hidden row in place of a split. y is dense [rows, d].
// Two ways to cover the rows (`RowKernel`), each with its own grid, folded into two dimensions
// past the per-dimension limit:
// - ROW_WORKGROUP (real GPUs): one workgroup per row, its 64 invocations striding the row
//   together, so neighbouring invocations read neighbouring elements and batch 1's 196 rows fill
//   196 workgroups; the sums are reduced through workgroup memory.
// - otherwise (CPU rasterisers, where barriers are dear): one invocation per row, no barriers.
// LANES, row_index, row_sum: row_common.wgsl.

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
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    ids: RowLanes,
) {
    let row = row_index(wid, nwg, ids.lid);
    let lane = row_lane(ids);
    if (row >= p.rows) {
        return;
    }
    let base = p.x_off + row * p.x_ld;
    var sum = 0.0;
    for (var i = lane; i < p.d; i += LANES) {
        sum += f32(x[base + i]);
    }
    let mean = row_sum(lane, sum) / f32(p.d);
    var sq = 0.0;
    for (var i = lane; i < p.d; i += LANES) {
        let t = f32(x[base + i]) - mean;
        sq += t * t;
    }
    let rstd = inverseSqrt(row_sum(lane, sq) / f32(p.d) + p.eps);
    let out = row * p.d;
    for (var i = lane; i < p.d; i += LANES) {
        y[out + i] = (f32(x[base + i]) - mean) * rstd * gamma[i] + beta[i];
    }
}
