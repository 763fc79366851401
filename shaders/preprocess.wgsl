// timm's eval transform on the GPU, for RGBA pixels (a browser ImageData) or packed RGB ones (a
// decoded file, RGB defined): bicubic resize of
// the shorter side to size / crop_pct, centre crop, [0, 1] scaling, per-channel normalisation,
// written as the model's CHW input.
//
// The resize is PIL's, byte for byte: its bicubic (a = -0.5, the support widened by the scale
// when downscaling, so it antialiases) as two 1-D passes in PIL's fixed point, each rounded and
// clipped to 8 bits. The taps (first source sample, count and 22-bit weights of each output
// column and row) come from the CPU (`WindowTaps`, in f64 as PIL computes them), for the crop
// window only, and so does the part of the image they read (`Preprocess::prepare`), uploaded
// as it is in memory: no widening of RGB to RGBA on the CPU.
// Two dispatches, as PIL runs them:
// - the horizontal pass (this file without VERTICAL): every source row of the window, each
//   output column, into `mid` (one u32 per pixel, RGB in its low bytes). A source too large for one
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
// A band of the window's pixels, row-major, R first: RGBA8, one per u32 (R in the low byte), or
// with RGB packed RGB8, pixel i's bytes at 3i..3i+3, the buffer padded by two words past them.
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
#if RGB
// The four bytes from byte 8s / 8 of words (a, b) on: a funnel shift.
fn funnel(a: u32, b: u32, s: u32) -> u32 {
    return select((a >> s) | (b << (32u - s)), a, s == 0u);
}

// Pixel i of the band, R in the low byte (the high byte is the next pixel's: `unpack` drops it).
fn pixel(i: u32) -> u32 {
    let at = 3u * i;
    let w = at >> 2u;
    return funnel(src[w], src[w + 1u], (at & 3u) * 8u);
}

// Pixels i..i+4: their 12 bytes lie in the 4 words from byte 3i's, read once each.
fn quad(i: u32) -> vec4<u32> {
    let at = 3u * i;
    let w = at >> 2u;
    let s = (at & 3u) * 8u;
    let w1 = src[w + 1u];
    let w2 = src[w + 2u];
    let a = funnel(src[w], w1, s);
    let b = funnel(w1, w2, s);
    let c = funnel(w2, src[w + 3u], s);
    return vec4<u32>(a, (a >> 24u) | (b << 8u), (b >> 16u) | (c << 16u), c >> 8u);
}
#else
fn pixel(i: u32) -> u32 {
    return src[i];
}

fn quad(i: u32) -> vec4<u32> {
    return vec4<u32>(src[i], src[i + 1u], src[i + 2u], src[i + 3u]);
}
#endif

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
        let q = quad(at + u32(i));
        row += texel(q.x) * w.x + texel(q.y) * w.y + texel(q.z) * w.z + texel(q.w) * w.w;
    }
    for (; i < xn; i++) {
        row += texel(pixel(at + u32(i))) * taps[xw + i];
    }
    let v = clip8(row);
    mid[(p.row0 + y) * p.out_w + ox] = u32(v.x) | (u32(v.y) << 8u) | (u32(v.z) << 16u);
}
#endif
