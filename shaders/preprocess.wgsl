// timm's eval transform on the GPU, for RGBA pixels (a browser ImageData): bicubic resize of
// the shorter side to size / crop_pct, centre crop, [0, 1] scaling, per-channel normalisation,
// written as the model's CHW input.
//
// The resize is PIL's (and the `image` crate's) bicubic: Catmull-Rom (a = -0.5) with the
// filter support widened by the scale factor when downscaling, so it antialiases; each output
// pixel is one 2-D weighted sum over its source footprint (PIL does two 1-D passes and rounds
// between them: results differ by at most a grey level). Resampled values are rounded to
// 8 bits as PIL's are. One channel: PIL's "L" conversion of each source pixel before the
// resize, as timm's pipeline converts first: (19595 R + 38470 G + 7471 B + 0x8000) >> 16.
// The crop offsets and resized size come from the CPU (`Preprocess::geometry`), which also
// pre-shrinks very large images so the footprint stays within a few hundred taps.

struct Params {
    src_w: u32, src_h: u32, rw: u32, rh: u32,
    left: u32, top: u32, out_w: u32, out_h: u32,
    channels: u32, _p0: u32, _p1: u32, _p2: u32,
    mean: vec4<f32>,
    stdev: vec4<f32>,
}

@group(0) @binding(0) var<uniform> p: Params;
// RGBA8, one pixel per u32 (R in the low byte), row-major.
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

fn cubic(x: f32) -> f32 {
    let a = -0.5;
    let t = abs(x);
    if (t < 1.0) {
        return ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0;
    }
    if (t < 2.0) {
        return (((t - 5.0) * t + 8.0) * t - 4.0) * a;
    }
    return 0.0;
}

// PIL's footprint of output coordinate `o` along an axis: [lo, hi), centre and inverse support scale.
struct Span { lo: i32, hi: i32, centre: f32, inv: f32 }

fn span(o: u32, src: u32, dst: u32) -> Span {
    let scale = f32(src) / f32(dst);
    let filter_scale = max(scale, 1.0);
    let support = 2.0 * filter_scale;
    let centre = (f32(o) + 0.5) * scale;
    let lo = max(i32(floor(centre - support + 0.5)), 0);
    let hi = min(i32(floor(centre + support + 0.5)), i32(src));
    return Span(lo, hi, centre, 1.0 / filter_scale);
}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let ox = gid.x;
    let oy = gid.y;
    if (ox >= p.out_w || oy >= p.out_h) {
        return;
    }
    let sx = span(ox + p.left, p.src_w, p.rw);
    let sy = span(oy + p.top, p.src_h, p.rh);
    var acc = vec3<f32>(0.0);
    var wsum = 0.0;
    for (var y = sy.lo; y < sy.hi; y++) {
        let wy = cubic((f32(y) - sy.centre + 0.5) * sy.inv);
        for (var x = sx.lo; x < sx.hi; x++) {
            let w = wy * cubic((f32(x) - sx.centre + 0.5) * sx.inv);
            let texel = src[u32(y) * p.src_w + u32(x)];
            var px = round(unpack4x8unorm(texel) * 255.0).rgb;
            if (p.channels == 1u) {
                let b = (vec3<u32>(texel) >> vec3<u32>(0u, 8u, 16u)) & vec3<u32>(255u);
                px = vec3<f32>(f32((19595u * b.x + 38470u * b.y + 7471u * b.z + 32768u) >> 16u));
            }
            acc += w * px;
            wsum += w;
        }
    }
    let rgb = clamp(round(acc / wsum), vec3<f32>(0.0), vec3<f32>(255.0));
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
