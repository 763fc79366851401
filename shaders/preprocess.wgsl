// timm's eval transform on the GPU, for RGBA pixels (a browser ImageData): bicubic resize of
// the shorter side to size / crop_pct, centre crop, [0, 1] scaling, per-channel normalisation,
// written as the model's CHW input.
//
// The resize is PIL's, byte for byte: its bicubic (a = -0.5, the support widened by the scale
// when downscaling, so it antialiases) as two 1-D passes in PIL's fixed point, each rounded and
// clipped to 8 bits. The taps (first source sample, count and 22-bit weights of each output
// column and row) come from the CPU (`WindowTaps`, in f64 as PIL computes them), for the crop
// window only; each invocation runs the horizontal pass over the source rows its vertical taps
// read, then the vertical pass. One channel: PIL's "L" conversion of each source pixel before
// the resize, as timm's pipeline converts first: (19595 R + 38470 G + 7471 B + 0x8000) >> 16.
// The CPU also pre-shrinks very large images, so the taps stay within a few hundred.

struct Params {
    src_w: u32, src_h: u32, out_w: u32, out_h: u32,
    channels: u32, _p0: u32, _p1: u32, _p2: u32,
    mean: vec4<f32>,
    stdev: vec4<f32>,
}

@group(0) @binding(0) var<uniform> p: Params;
// RGBA8, one pixel per u32 (R in the low byte), row-major.
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
// (first, count, weights' offset) per output column, then per output row; then the weights.
@group(0) @binding(3) var<storage, read> taps: array<i32>;

const BITS: u32 = 22u;

// PIL's clip8: a fixed-point sum (started at half a unit) back to 0..=255.
fn clip8(v: vec3<i32>) -> vec3<i32> {
    return clamp(v >> vec3<u32>(BITS), vec3<i32>(0), vec3<i32>(255));
}

fn pixel(x: i32, y: i32) -> vec3<i32> {
    let texel = src[u32(y) * p.src_w + u32(x)];
    let b = vec3<i32>((vec3<u32>(texel) >> vec3<u32>(0u, 8u, 16u)) & vec3<u32>(255u));
    if (p.channels == 1u) {
        return vec3<i32>((19595 * b.x + 38470 * b.y + 7471 * b.z + 32768) >> 16u);
    }
    return b;
}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let ox = gid.x;
    let oy = gid.y;
    if (ox >= p.out_w || oy >= p.out_h) {
        return;
    }
    let cx = 3u * ox;
    let cy = 3u * (p.out_w + oy);
    let x0 = taps[cx];
    let xn = taps[cx + 1u];
    let xw = taps[cx + 2u];
    let y0 = taps[cy];
    let yn = taps[cy + 1u];
    let yw = taps[cy + 2u];
    let half = vec3<i32>(1 << (BITS - 1u));
    var acc = half;
    for (var j = 0; j < yn; j++) {
        var row = half;
        for (var i = 0; i < xn; i++) {
            row += pixel(x0 + i, y0 + j) * taps[xw + i];
        }
        acc += clip8(row) * taps[yw + j];
    }
    let rgb = vec3<f32>(clip8(acc));
    let plane = p.out_w * p.out_h;
    let at = oy * p.out_w + ox;
    if (p.channels == 1u) {
        dst[at] = (rgb.r / 255.0 - p.mean.x) / p.stdev.x;
    } else {
        for (var c = 0u; c < 3u; c++) {
            dst[c * plane + at] = (rgb[c] / 255.0 - p.mean[c]) / p.stdev[c];
        }
    }
}
