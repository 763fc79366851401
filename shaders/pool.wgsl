// PoolFormer's token mixer with its residual branch fused:
//   x[b, i, j, c] += layer_scale[c] * (avg_3x3(xn)[b, i, j, c] - xn[b, i, j, c])
// avg_3x3 is nn.AvgPool2d(3, stride 1, padding 1, count_include_pad=False): the mean over the
// in-image neighbours only, so a corner averages 4 values and an edge 6. Channels-last:
// neighbouring invocations read neighbouring channels of the same pixels.

struct Params {
    batch: u32,
    h: u32,
    w: u32,
    d: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> xn: array<f32>;
@group(0) @binding(2) var<storage, read> layer_scale: array<f32>;
@group(0) @binding(3) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * 64u;
    if (idx >= p.batch * p.h * p.w * p.d) {
        return;
    }
    let c = idx % p.d;
    let pix = idx / p.d;
    let j = pix % p.w;
    let i = (pix / p.w) % p.h;
    let img = pix / (p.w * p.h);
    let i0 = max(i, 1u) - 1u;
    let i1 = min(i + 1u, p.h - 1u);
    let j0 = max(j, 1u) - 1u;
    let j1 = min(j + 1u, p.w - 1u);
    var sum = 0.0;
    for (var y = i0; y <= i1; y++) {
        for (var xx = j0; xx <= j1; xx++) {
            sum += xn[((img * p.h + y) * p.w + xx) * p.d + c];
        }
    }
    let count = f32((i1 - i0 + 1u) * (j1 - j0 + 1u));
    x[idx] += layer_scale[c] * (sum / count - xn[idx]);
}
