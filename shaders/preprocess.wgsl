// timm's eval transform on the GPU, for RGBA pixels (a browser ImageData): bicubic resize of
// the shorter side to size / crop_pct, centre crop, [0, 1] scaling, per-channel normalisation,
// written as the model's CHW input.
//
// The resize is PIL's, byte for byte: its bicubic (a = -0.5, the support widened by the scale
// when downscaling, so it antialiases) as two 1-D passes in PIL's fixed point, each rounded and
// clipped to 8 bits. The taps (first source sample, count and 22-bit weights of each output
// column and row) come from the CPU (`WindowTaps`, in f64 as PIL computes them), for the crop
// window only, and so does the part of the image they read (`Preprocess::prepare_rgba`).
// Two dispatches, as PIL runs them:
// - the horizontal pass (this file without VERTICAL): every source row of the window, each
//   output column, into `mid` (one u32 per pixel, as the source). A source too large for one
//   binding is bound in bands of rows, one dispatch each, `row0` saying where a band starts;
// - the vertical pass (VERTICAL): each output pixel from the `mid` rows its taps read,
//   normalised and written as the model input.
// The work is (window rows x output columns x horizontal taps) + (output pixels x vertical
// taps): linear in the scale, where one pass over the 2-D footprint would be quadratic.
// One channel: PIL's "L" conversion of each source pixel before the resize, as timm's pipeline
// converts first: (19595 R + 38470 G + 7471 B + 0x8000) >> 16.

struct Params {
    // Horizontal: the window's width, the band's rows, where the band starts in the window.
    // Vertical: src_w and rows unused.
    src_w: u32, rows: u32, row0: u32, channels: u32,
    out_w: u32, out_h: u32, _p0: u32, _p1: u32,
    mean: vec4<f32>,
    stdev: vec4<f32>,
}

@group(0) @binding(0) var<uniform> p: Params;
#if VERTICAL
// The horizontal pass's output: out_w u32 per window row.
@group(0) @binding(1) var<storage, read> mid: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
#else
// A band of the window's RGBA8 pixels, one per u32 (R in the low byte), row-major.
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> mid: array<u32>;
#endif
// (first, count, weights' offset) per output column, then per output row; then the weights.
@group(0) @binding(3) var<storage, read> taps: array<i32>;

const BITS: u32 = 22u;

// PIL's clip8: a fixed-point sum (started at half a unit) back to 0..=255.
fn clip8(v: vec3<i32>) -> vec3<i32> {
    return clamp(v >> vec3<u32>(BITS), vec3<i32>(0), vec3<i32>(255));
}

fn unpack(texel: u32) -> vec3<i32> {
    return vec3<i32>((vec3<u32>(texel) >> vec3<u32>(0u, 8u, 16u)) & vec3<u32>(255u));
}

#if VERTICAL
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let ox = gid.x;
    let oy = gid.y;
    if (ox >= p.out_w || oy >= p.out_h) {
        return;
    }
    let cy = 3u * (p.out_w + oy);
    let y0 = u32(taps[cy]);
    let yn = taps[cy + 1u];
    let yw = taps[cy + 2u];
    var acc = vec3<i32>(1 << (BITS - 1u));
    for (var j = 0; j < yn; j++) {
        acc += unpack(mid[(y0 + u32(j)) * p.out_w + ox]) * taps[yw + j];
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
#else
// A source pixel as the resize reads it: its RGB, or PIL's "L" of it in all three.
fn texel(t: u32) -> vec3<i32> {
    let b = unpack(t);
#if GREY
    return vec3<i32>((19595 * b.x + 38470 * b.y + 7471 * b.z + 32768) >> 16u);
#else
    return b;
#endif
}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let ox = gid.x;
    let y = gid.y;
    if (ox >= p.out_w || y >= p.rows) {
        return;
    }
    let x0 = u32(taps[3u * ox]);
    let xn = taps[3u * ox + 1u];
    let xw = taps[3u * ox + 2u];
    var row = vec3<i32>(1 << (BITS - 1u));
    // Four taps a step: a CPU rasteriser (SwiftShader, lavapipe) neither unrolls the loop nor
    // hoists its per-iteration lane-mask bookkeeping.
    let at = y * p.src_w + x0;
    let quads = xn & ~3;
    var i = 0;
    for (; i < quads; i += 4) {
        let w = vec4<i32>(taps[xw + i], taps[xw + i + 1], taps[xw + i + 2], taps[xw + i + 3]);
        let a = at + u32(i);
        row += texel(src[a]) * w.x + texel(src[a + 1u]) * w.y + texel(src[a + 2u]) * w.z + texel(src[a + 3u]) * w.w;
    }
    for (; i < xn; i++) {
        row += texel(src[at + u32(i)]) * taps[xw + i];
    }
    let v = clip8(row);
    mid[(p.row0 + y) * p.out_w + ox] = u32(v.x) | (u32(v.y) << 8u) | (u32(v.z) << 16u);
}
#endif
