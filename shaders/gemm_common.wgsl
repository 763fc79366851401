// Shared part of the GEMM kernels (prepended to each of gemm_tiled.wgsl, gemm_texture.wgsl,
// gemm_subgroup.wgsl and gemm_register.wgsl).
//
//   C[b][m, n] (+)= epilogue( sum_k A[b][m, k] * B[b][k, n] )
//
// A is row-major [M, K] (A_TRANS: stored [K, M]; or, with A_CONV, an implicit im2col view of an NCHW image, so a
// convolution is a GEMM with no im2col pass). B is either row-major [K, N] or, with B_TRANS,
// a PyTorch Linear weight [N, K] read transposed in place. Token mixing uses A = weight and
// B = activations [tokens, channels], so no transpose pass is ever needed.
// A_CONV with A_NHWC reads a channels-last image [batch, ih, iw, cin] instead (PoolFormer's
// downsampling convolutions read the previous stage's tokens in place).
// Epilogue, in order: + bias (per n with BIAS_N, per m with BIAS_M), GELU (exact erf),
// * layer scale (SCALE_N / SCALE_M), or * a gate matrix laid out like C (GATE: gMLP's
// u ⊙ v, the gate read from `scale` at g_off/g_ld/g_bs), + the previous C (RESIDUAL).
// C_TRANS stores C as [N, M].
// Split-K (the tiled kernel's SPLIT_K, then gemm_splitk.wgsl): `splits` parts of the k range
// each write raw sums to a scratch [splits][batch][M][N]; the reduction adds them up and applies
// the epilogue, so a GEMM with few output tiles still fills a large GPU.
// A weight larger than one storage binding is uploaded in row blocks, one GEMM per block: m0/n0
// are the block's first global row/column, so per-m / per-n vectors are indexed globally.

struct Params {
    m: u32, n: u32, k: u32, batch: u32,
    a_off: u32, a_ld: u32, a_bs: u32, m0: u32,
    b_off: u32, b_ld: u32, b_bs: u32, n0: u32,
    c_off: u32, c_ld: u32, c_bs: u32, splits: u32,
    // A_CONV: input image [batch, cin, ih, iw], kernel kh x kw, output grid oh x ow.
    cin: u32, ih: u32, iw: u32, kh: u32,
    kw: u32, stride: u32, pad: u32, ow: u32,
    oh: u32, g_off: u32, g_ld: u32, g_bs: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// A_F16 / B_F16 / C_F16 / G_F16 (`--precision f16`): that operand (a weight, or an activation
// slot the executor keeps in f16) is stored as f16. Reads widen to f32; accumulation and the
// epilogue stay f32, and C_F16 rounds the final value once, as it is stored. G_F16 types the
// `scale` binding as f16 for a gate (which excludes a layer scale).
// A_VEC4 / B_VEC4 (the tiled and coop kernels, beside A_VEC / B_VEC): the operand's offset,
// leading dimension and batch stride are multiples of 4 too, so each run of 4 they fetch is one
// aligned vec4 of the binding, read with one 16-byte load (8 at f16) instead of four scalar
// ones; a_at / b_at read single values of it (a[i / 4][i % 4]), a_run4 / b_run4 whole runs.
#if A_F16
enable f16;
#if A_VEC4
@group(0) @binding(1) var<storage, read> a: array<vec4<f16>>;
#else
@group(0) @binding(1) var<storage, read> a: array<f16>;
#endif
#else
#if A_VEC4
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;
#else
@group(0) @binding(1) var<storage, read> a: array<f32>;
#endif
#endif
#if B_F16
enable f16;
#if B_VEC4
@group(0) @binding(2) var<storage, read> b: array<vec4<f16>>;
#else
@group(0) @binding(2) var<storage, read> b: array<f16>;
#endif
#else
#if B_VEC4
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;
#else
@group(0) @binding(2) var<storage, read> b: array<f32>;
#endif
#endif
@group(0) @binding(3) var<storage, read> bias: array<f32>;
#if G_F16
enable f16;
@group(0) @binding(4) var<storage, read> scale: array<f16>;
#else
@group(0) @binding(4) var<storage, read> scale: array<f32>;
#endif
#if C_F16
enable f16;
@group(0) @binding(5) var<storage, read_write> c: array<f16>;
#else
@group(0) @binding(5) var<storage, read_write> c: array<f32>;
#endif

#if A_CONV
// The output pixel GEMM row m stands for: (image, top input row, left input column) before the
// kernel offset. Split from the k-dependent part so that the register kernel computes it once
// per row, outside its k loop.
fn conv_row(m: u32) -> vec3<i32> {
    let ox = m % p.ow;
    let oy = (m / p.ow) % p.oh;
    let img = m / (p.ow * p.oh);
    return vec3<i32>(i32(img), i32(oy * p.stride) - i32(p.pad), i32(ox * p.stride) - i32(p.pad));
}

// k = (ci * kh + ky) * kw + kx, as (ci, ky, kx).
fn conv_k(k: u32) -> vec3<u32> {
    return vec3<u32>(k / (p.kw * p.kh), (k / p.kw) % p.kh, k % p.kw);
}

// One im2col element; padding (coordinates outside the image) reads as zero. The address is
// clamped and the value selected, so there is no branch per element.
fn load_conv(row: vec3<i32>, kc: vec3<u32>) -> f32 {
    let iy = row.y + i32(kc.y);
    let ix = row.z + i32(kc.z);
    let inside = iy >= 0 && ix >= 0 && iy < i32(p.ih) && ix < i32(p.iw);
    let y = u32(clamp(iy, 0, i32(p.ih) - 1));
    let x = u32(clamp(ix, 0, i32(p.iw) - 1));
    let img = u32(row.x);
#if A_NHWC
    let v = a_at(p.a_off + ((img * p.ih + y) * p.iw + x) * p.cin + kc.x);
#else
    let v = a_at(p.a_off + ((img * p.cin + kc.x) * p.ih + y) * p.iw + x);
#endif
    return select(0.0, v, inside);
}
#endif

// Element i of A (of B), widened to f32; the run of 4 from element i (a multiple of 4 under
// A_VEC4 / B_VEC4).
fn a_at(i: u32) -> f32 {
#if A_VEC4
    return f32(a[i / 4u][i % 4u]);
#else
    return f32(a[i]);
#endif
}

fn a_run4(i: u32) -> vec4<f32> {
#if A_VEC4
    return vec4<f32>(a[i / 4u]);
#else
    return vec4<f32>(f32(a[i]), f32(a[i + 1u]), f32(a[i + 2u]), f32(a[i + 3u]));
#endif
}

fn b_at(i: u32) -> f32 {
#if B_VEC4
    return f32(b[i / 4u][i % 4u]);
#else
    return f32(b[i]);
#endif
}

fn b_run4(i: u32) -> vec4<f32> {
#if B_VEC4
    return vec4<f32>(b[i / 4u]);
#else
    return vec4<f32>(f32(b[i]), f32(b[i + 1u]), f32(b[i + 2u]), f32(b[i + 3u]));
#endif
}

fn load_a(bt: u32, m: u32, k: u32) -> f32 {
#if A_CONV
    return load_conv(conv_row(m), conv_k(k));
#else
#if A_TRANS
    return a_at(p.a_off + bt * p.a_bs + k * p.a_ld + m);
#else
    return a_at(p.a_off + bt * p.a_bs + m * p.a_ld + k);
#endif
#endif
}

fn load_b(bt: u32, k: u32, n: u32) -> f32 {
#if B_TRANS
    return b_at(p.b_off + bt * p.b_bs + n * p.b_ld + k);
#else
    return b_at(p.b_off + bt * p.b_bs + k * p.b_ld + n);
#endif
}

// GELU with the exact erf, as torch.nn.GELU() (not the tanh approximation). WGSL has no erf:
// Abramowitz & Stegun 7.1.26, |error| < 1.5e-7, far inside fp32 GEMM rounding.
fn erf_approx(x: f32) -> f32 {
    let z = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * z);
    let poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t;
    return sign(x) * (1.0 - poly * exp(-z * z));
}

fn gelu(x: f32) -> f32 {
    return 0.5 * x * (1.0 + erf_approx(x * 0.7071067811865476));
}

fn store_c(bt: u32, m: u32, n: u32, acc: f32) {
    var v = acc;
#if BIAS_N
    v += bias[p.n0 + n];
#endif
#if BIAS_M
    v += bias[p.m0 + m];
#endif
#if GELU
    v = gelu(v);
#endif
#if SCALE_N
    v *= f32(scale[p.n0 + n]);
#endif
#if SCALE_M
    v *= f32(scale[p.m0 + m]);
#endif
#if C_TRANS
    let idx = p.c_off + bt * p.c_bs + n * p.c_ld + m;
#if GATE
    v *= f32(scale[p.g_off + bt * p.g_bs + n * p.g_ld + m]);
#endif
#else
    let idx = p.c_off + bt * p.c_bs + m * p.c_ld + n;
#if GATE
    v *= f32(scale[p.g_off + bt * p.g_bs + m * p.g_ld + n]);
#endif
#endif
#if RESIDUAL
    v += f32(c[idx]);
#endif
#if C_F16
    // Saturated to f16's finite range: f32 values beyond it have no defined f16 conversion.
    c[idx] = f16(clamp(v, -65504.0, 65504.0));
#else
    c[idx] = v;
#endif
}
