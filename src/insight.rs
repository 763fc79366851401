//! What the token mixers learned, as plain data: every view the page draws (and the CLI's
//! `insight` prints or renders, and a desktop app will draw) is computed here, once, from the
//! weights. Nothing here draws.
//!
//! Per token-mixing layer ([`LayerInsight`]):
//! - the weights as the view shows them ([`crate::models::TokenMixing`]): Mixer token-MLP fc1
//!   units, gMLP/ResMLP tokens x tokens matrices, PoolFormer's fixed 3x3 kernel;
//! - Mixer: each unit's dominant spatial frequency on the token grid and its most
//!   anti-correlated partner, and the display order ([`LayerInsight::groups`]): units sorted by
//!   frequency, opposite-sign pairs (correlation below -0.5) side by side;
//! - the mean weight by relative offset `pos(s) - pos(t)` of the layer's token map
//!   ([`LayerInsight::offset_kernel`]), the least-squares shift-invariant kernel;
//! - three numbers ([`Figures`]) on the layer's token map M (T x T: row t is how output token
//!   t mixes from every token s). gMLP: the spatial gating projection; ResMLP: linear_tokens;
//!   Mixer: the token MLP's linearisation at zero input, `fc2 · diag(GELU'(b1)) · fc1`:
//!   - `locality`: the |M|-weighted mean distance, in patches, between t and s;
//!   - `shift_invariance`: the share of ‖M‖² the best relative-offset kernel explains
//!     (‖P(M)‖² / ‖M‖², P = averaging along each offset);
//!   - `low_frequency`: the share of the rows' spectral energy (2D DFT over the source grid)
//!     at spatial frequencies of at most [`LOW_FREQUENCY`] cycles per patch.
//!
//! Each figure comes beside the same figure for timm's initialisation of that architecture
//! ([`init_figures`]: timm's distributions, mean of [`INIT_DRAWS`] seeded draws), so a user can
//! tell learned structure from initialisation.

use serde::Serialize;

use crate::models::TokenMixing;

/// Spatial frequencies at or below this radius (cycles per patch) count as low.
pub const LOW_FREQUENCY: f64 = 0.25;
/// Seeded draws of timm's initialisation averaged for [`init_figures`].
pub const INIT_DRAWS: u64 = 8;
/// Units whose correlation is below this are paired as opposite-sign twins.
pub const PAIR_CORRELATION: f64 = -0.5;

/// The three structure figures of one token map (see the module docs).
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    pub locality: f64,
    pub shift_invariance: f64,
    pub low_frequency: f64,
}

/// One Mixer token-MLP unit (a row of fc1 over the token grid).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unit {
    pub unit: usize,
    /// The largest term of the unit's 2D DFT: ky in 0..gh, kx in 0..=gw/2 (real input).
    pub ky: usize,
    pub kx: usize,
    /// Its frequency in cycles per patch, and direction.
    pub radial: f64,
    pub angle: f64,
    /// Share of the unit's spectral energy in its mean.
    pub dc_share: f64,
    pub abs_max: f32,
    /// The most negatively correlated other unit (-1: none below zero), and the correlation.
    pub partner: i64,
    pub partner_corr: f64,
    /// The unit it sits beside as an opposite-sign pair (-1: none).
    pub paired_with: i64,
}

/// A small dense map, row-major.
#[derive(Clone, Debug, Serialize)]
pub struct Kernel {
    pub h: usize,
    pub w: usize,
    pub values: Vec<f32>,
}

/// Everything the views show of one token-mixing layer.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LayerInsight {
    pub kind: &'static str,
    pub layer: usize,
    pub layers: usize,
    pub rows: usize,
    pub cols: usize,
    pub grid: (usize, usize),
    pub note: &'static str,
    /// The weights as drawn, rows x cols row-major.
    pub data: Vec<f32>,
    /// Mixer: per unit (empty for the others).
    pub units: Vec<Unit>,
    /// Display order: groups of one unit or an opposite-sign pair (Mixer; empty otherwise).
    pub groups: Vec<Vec<usize>>,
    pub pairs: usize,
    /// Mean of M by offset, (2 gh - 1) x (2 gw - 1), centre = the token itself (not PoolFormer).
    pub offset_kernel: Option<Kernel>,
    /// What the figures are measured on.
    pub figures_on: &'static str,
    /// The learned map's figures, and the same for timm's initialisation (not PoolFormer,
    /// which learns no token mixing).
    pub figures: Option<Figures>,
    pub init: Option<Figures>,
}

/// Computes a layer's insight from its weights (`layers`: how many the model has; `init`: the
/// initialisation's figures for this shape, when the caller has them cached — every layer of a
/// model has the same shape).
pub fn layer(t: &TokenMixing, layer: usize, layers: usize, init: Option<Figures>) -> LayerInsight {
    let (gh, gw) = t.grid;
    let (units, groups) = if t.kind == "mixer" { analyse_units(&t.data, t.rows, t.cols, gh, gw) } else { (Vec::new(), Vec::new()) };
    let map = t.token_map();
    let figures_on = match t.kind {
        "mixer" => "the token MLP linearised at zero input, fc2 · diag(GELU'(b1)) · fc1 (tokens x tokens)",
        "gmlp" => "the spatial gating projection (tokens x tokens)",
        "resmlp" => "linear_tokens (tokens x tokens)",
        _ => "nothing: the pooling mixer is fixed",
    };
    LayerInsight {
        kind: t.kind,
        layer,
        layers,
        rows: t.rows,
        cols: t.cols,
        grid: t.grid,
        note: t.note,
        data: t.data.clone(),
        pairs: groups.iter().filter(|g| g.len() == 2).count(),
        units,
        groups,
        offset_kernel: map.map(|m| offset_kernel(m, gh, gw)),
        figures_on,
        figures: map.map(|m| figures(m, gh, gw)),
        init: map.map(|_| init.unwrap_or_else(|| init_figures(t.kind, t.grid, t.rows))),
    }
}

fn dist(t: usize, s: usize, gw: usize) -> f64 {
    let (dy, dx) = ((t / gw) as f64 - (s / gw) as f64, (t % gw) as f64 - (s % gw) as f64);
    (dy * dy + dx * dx).sqrt()
}

/// Sums and counts of `m[t, s]` by offset `pos(s) - pos(t)`, (2 gh - 1) x (2 gw - 1).
fn offset_sums(m: &[f32], gh: usize, gw: usize) -> (Vec<f64>, Vec<f64>) {
    let (h, w, s) = (2 * gh - 1, 2 * gw - 1, gh * gw);
    let mut sum = vec![0f64; h * w];
    let mut count = vec![0f64; h * w];
    for t in 0..s {
        for u in 0..s {
            let i = (u / gw + gh - 1 - t / gw) * w + (u % gw + gw - 1 - t % gw);
            sum[i] += m[t * s + u] as f64;
            count[i] += 1.0;
        }
    }
    (sum, count)
}

/// Mean of `m[t, s]` over all pairs with the same offset `pos(s) - pos(t)`.
pub fn offset_kernel(m: &[f32], gh: usize, gw: usize) -> Kernel {
    let (sum, count) = offset_sums(m, gh, gw);
    let values = sum.iter().zip(&count).map(|(&v, &c)| if c > 0.0 { (v / c) as f32 } else { 0.0 }).collect();
    Kernel { h: 2 * gh - 1, w: 2 * gw - 1, values }
}

/// `(cos, sin)` of `TAU i / n` for i in 0..n: the DFT's twiddle factors on `n` points.
fn twiddles(n: usize) -> Vec<(f64, f64)> {
    use std::f64::consts::TAU;
    (0..n).map(|i| TAU * i as f64 / n as f64).map(|a| (a.cos(), a.sin())).collect()
}

/// In place, the DFT of the `n` complex values `at, at + stride, …` of (re, im), with `tw` =
/// [`twiddles`]`(n)`. Each product takes its factor from the table at `(k j) mod n`: the same
/// value the angle's own cos and sin give, without two calls per product.
fn dft(re: &mut [f64], im: &mut [f64], at: usize, stride: usize, n: usize, tw: &[(f64, f64)]) {
    let (xr, xi): (Vec<f64>, Vec<f64>) = (0..n).map(|j| (re[at + j * stride], im[at + j * stride])).unzip();
    for k in 0..n {
        let (mut sr, mut si) = (0.0, 0.0);
        for j in 0..n {
            let (c, s) = tw[(k * j) % n];
            sr += xr[j] * c + xi[j] * s;
            si += xi[j] * c - xr[j] * s;
        }
        re[at + k * stride] = sr;
        im[at + k * stride] = si;
    }
}

/// Power of the full 2D DFT of one grid (gh x gw, row-major), [ky * gw + kx], with each axis's
/// [`twiddles`] (computed once for the many grids of a map or a layer).
fn power(x: &[f32], gh: usize, gw: usize, tw_h: &[(f64, f64)], tw_w: &[(f64, f64)]) -> Vec<f64> {
    let mut re: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let mut im = vec![0f64; gh * gw];
    for y in 0..gh {
        dft(&mut re, &mut im, y * gw, 1, gw, tw_w);
    }
    for kx in 0..gw {
        dft(&mut re, &mut im, kx, gw, gh, tw_h);
    }
    re.iter().zip(&im).map(|(a, b)| a * a + b * b).collect()
}

/// Signed frequency of DFT index k on n points, in cycles per patch.
fn freq(k: usize, n: usize) -> f64 {
    (if 2 * k <= n { k as f64 } else { k as f64 - n as f64 }) / n as f64
}

/// The structure figures of a tokens x tokens map on a gh x gw grid (see the module docs).
pub fn figures(m: &[f32], gh: usize, gw: usize) -> Figures {
    let s = gh * gw;
    let (mut wsum, mut wdist) = (0f64, 0f64);
    for t in 0..s {
        for u in 0..s {
            let a = (m[t * s + u] as f64).abs();
            wsum += a;
            wdist += a * dist(t, u, gw);
        }
    }
    // ‖P(M)‖² = Σ_offsets count · mean², with the means of `offset_kernel` in f64.
    let (sum, count) = offset_sums(m, gh, gw);
    let total: f64 = m.iter().map(|&v| (v as f64) * (v as f64)).sum();
    let projected: f64 = sum.iter().zip(&count).filter(|(_, &c)| c > 0.0).map(|(v, c)| v * v / c).sum();
    let (mut low, mut all) = (0f64, 0f64);
    let (tw_h, tw_w) = (twiddles(gh), twiddles(gw));
    for row in m.chunks(s) {
        let p = power(row, gh, gw, &tw_h, &tw_w);
        for ky in 0..gh {
            for kx in 0..gw {
                let v = p[ky * gw + kx];
                all += v;
                if freq(ky, gh).hypot(freq(kx, gw)) <= LOW_FREQUENCY + 1e-12 {
                    low += v;
                }
            }
        }
    }
    let share = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    Figures { locality: share(wdist, wsum), shift_invariance: share(projected, total), low_frequency: share(low, all) }
}

/// A small deterministic generator (SplitMix64) for the initialisation draws.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [-a, a): xavier_uniform with a = sqrt(6 / (fan_in + fan_out)).
    fn uniform(&mut self, a: f64) -> f32 {
        ((2.0 * self.unit() - 1.0) * a) as f32
    }
    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f32 {
        let u = self.unit().max(1e-300);
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()) as f32
    }
}

/// The figures of timm's initialisation of a layer of this kind, shape and grid: the mean over
/// [`INIT_DRAWS`] seeded draws from timm's distributions — Mixer: fc1, fc2 xavier_uniform,
/// biases ~N(0, 1e-6) (so GELU'(b1) = 1/2); gMLP: the SGU projection ~N(0, 1e-6); ResMLP:
/// linear_tokens xavier_uniform. The figures do not depend on the scale, so only the shape of
/// each distribution matters.
pub fn init_figures(kind: &str, grid: (usize, usize), rows: usize) -> Figures {
    let (gh, gw) = grid;
    let s = gh * gw;
    let mut acc = Figures { locality: 0.0, shift_invariance: 0.0, low_frequency: 0.0 };
    for draw in 0..INIT_DRAWS {
        let mut rng = SplitMix(0x746f_6b65_6e6d_6978 ^ draw.wrapping_mul(0x2545_F491_4F6C_DD1D));
        let m: Vec<f32> = match kind {
            "mixer" => {
                let hidden = rows.max(1);
                let a = (6.0 / (s + hidden) as f64).sqrt();
                let fc1: Vec<f32> = (0..hidden * s).map(|_| rng.uniform(a)).collect();
                let fc2: Vec<f32> = (0..s * hidden).map(|_| rng.uniform(a)).collect();
                linearised(&fc1, None, &fc2, s, hidden)
            }
            "gmlp" => (0..s * s).map(|_| rng.normal()).collect(),
            _ => {
                let a = (6.0 / (2 * s) as f64).sqrt();
                (0..s * s).map(|_| rng.uniform(a)).collect()
            }
        };
        let f = figures(&m, gh, gw);
        acc.locality += f.locality;
        acc.shift_invariance += f.shift_invariance;
        acc.low_frequency += f.low_frequency;
    }
    let n = INIT_DRAWS as f64;
    Figures { locality: acc.locality / n, shift_invariance: acc.shift_invariance / n, low_frequency: acc.low_frequency / n }
}

/// The token MLP `fc2 · GELU(fc1 · x + b1)` linearised at x = 0: `fc2 · diag(GELU'(b1)) · fc1`
/// ([tokens, tokens]; fc1 [hidden, tokens], fc2 [tokens, hidden]; no b1 = zeros).
pub fn linearised(fc1: &[f32], b1: Option<&[f32]>, fc2: &[f32], tokens: usize, hidden: usize) -> Vec<f32> {
    let slope: Vec<f64> = (0..hidden).map(|j| gelu_slope(b1.map_or(0.0, |b| b[j] as f64))).collect();
    let mut m = vec![0f32; tokens * tokens];
    // Row t of the map: Σ_j (fc2[t, j] GELU'(b1[j])) fc1[j, ·], with j ascending for every
    // entry (each sum as the plain triple loop adds it), fc1 read along its rows.
    let mut acc = vec![0f64; tokens];
    for (t, row) in m.chunks_exact_mut(tokens).enumerate() {
        acc.fill(0.0);
        for j in 0..hidden {
            let a = fc2[t * hidden + j] as f64 * slope[j];
            for (s, &f) in acc.iter_mut().zip(&fc1[j * tokens..(j + 1) * tokens]) {
                *s += a * f as f64;
            }
        }
        for (o, s) in row.iter_mut().zip(&acc) {
            *o = *s as f32;
        }
    }
    m
}

/// d/dx of the exact GELU, x Φ(x): Φ(x) + x φ(x).
fn gelu_slope(x: f64) -> f64 {
    let phi = (-0.5 * x * x).exp() / (std::f64::consts::TAU).sqrt();
    0.5 * (1.0 + erf(x / std::f64::consts::SQRT_2)) + x * phi
}

/// erf in f64: its Taylor series below 2.5, the continued fraction of erfc beyond.
fn erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 2.5 {
        // Σ (-1)^n x^(2n+1) / (n! (2n+1)), converges fast for |x| < 2.5.
        let (mut term, mut sum, x2) = (a, a, a * a);
        for n in 1..60 {
            term *= -x2 / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc(a) = exp(-a²)/√π · 1/(a + 1/2/(a + 1/(a + 3/2/(a + ...)))).
        let mut f = a;
        for k in (1..40).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * f)
    };
    r.copysign(x)
}

/// Mixer units: dominant frequency, partners, and the display order (see [`LayerInsight`]).
pub fn analyse_units(data: &[f32], rows: usize, cols: usize, gh: usize, gw: usize) -> (Vec<Unit>, Vec<Vec<usize>>) {
    let kx_n = gw / 2 + 1;
    let mut units = Vec::with_capacity(rows);
    let mut z = vec![0f64; rows * cols];
    let (tw_h, tw_w) = (twiddles(gh), twiddles(gw));
    for u in 0..rows {
        let row = &data[u * cols..(u + 1) * cols];
        let p = power(row, gh, gw, &tw_h, &tw_w);
        let (mut best, mut bky, mut bkx) = (-1f64, 0, 0);
        let total: f64 = p.iter().sum();
        for ky in 0..gh {
            for kx in 0..kx_n {
                let v = p[ky * gw + kx];
                if v > best + 1e-12 * best.max(1.0) {
                    (best, bky, bkx) = (v, ky, kx);
                }
            }
        }
        let (fy, fx) = (freq(bky, gh), bkx as f64 / gw as f64);
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / cols as f64;
        let norm = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>().sqrt();
        for (i, &v) in row.iter().enumerate() {
            z[u * cols + i] = if norm > 0.0 { (v as f64 - mean) / norm } else { 0.0 };
        }
        units.push(Unit {
            unit: u,
            ky: bky,
            kx: bkx,
            radial: fy.hypot(fx),
            angle: fy.atan2(fx),
            dc_share: if total > 0.0 { p[0] / total } else { 0.0 },
            abs_max: row.iter().fold(0f32, |m, v| m.max(v.abs())),
            partner: -1,
            partner_corr: 0.0,
            paired_with: -1,
        });
    }
    let mut candidates = Vec::new();
    for a in 0..rows {
        for b in a + 1..rows {
            let r: f64 = z[a * cols..(a + 1) * cols].iter().zip(&z[b * cols..(b + 1) * cols]).map(|(x, y)| x * y).sum();
            if r < units[a].partner_corr {
                (units[a].partner_corr, units[a].partner) = (r, b as i64);
            }
            if r < units[b].partner_corr {
                (units[b].partner_corr, units[b].partner) = (r, a as i64);
            }
            if r < PAIR_CORRELATION {
                candidates.push((r, a, b));
            }
        }
    }
    candidates.sort_by(|p, q| p.0.total_cmp(&q.0));
    for (_, a, b) in candidates {
        if units[a].paired_with < 0 && units[b].paired_with < 0 {
            units[a].paired_with = b as i64;
            units[b].paired_with = a as i64;
        }
    }
    let key = |u: usize| ((units[u].radial * 1e6).round() as i64, (units[u].angle * 1e6).round() as i64, -units[u].dc_share);
    let cmp = |p: usize, q: usize| {
        let (a, b) = (key(p), key(q));
        a.0.cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.total_cmp(&b.2)).then(p.cmp(&q))
    };
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for u in &units {
        match u.paired_with {
            p if p < 0 => groups.push(vec![u.unit]),
            p if (u.unit as i64) < p => {
                let p = p as usize;
                groups.push(if cmp(u.unit, p).is_le() { vec![u.unit, p] } else { vec![p, u.unit] });
            }
            _ => {}
        }
    }
    groups.sort_by(|a, b| cmp(a[0], b[0]));
    (units, groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_is_accurate() {
        // Reference values of erf (Abramowitz & Stegun, table 7.1).
        for (x, want) in [(0.1, 0.112462916), (0.5, 0.520499878), (1.0, 0.842700793), (2.0, 0.995322265), (3.0, 0.999977910)] {
            assert!((erf(x) - want).abs() < 1e-8, "erf({x}) = {}", erf(x));
            assert!((erf(-x) + want).abs() < 1e-8);
        }
    }

    #[test]
    fn a_shift_invariant_local_map_scores_as_one() {
        // M[t, s] = k(pos(s) - pos(t)) with k non-zero only at offsets within one patch:
        // shift invariance 1, locality at most 1.
        let (gh, gw) = (5, 6);
        let s = gh * gw;
        let mut m = vec![0f32; s * s];
        for t in 0..s {
            for u in 0..s {
                let (dy, dx) = ((u / gw) as i64 - (t / gw) as i64, (u % gw) as i64 - (t % gw) as i64);
                if dy.abs() + dx.abs() <= 1 {
                    m[t * s + u] = if dy == 0 && dx == 0 { 2.0 } else { -0.5 };
                }
            }
        }
        let f = figures(&m, gh, gw);
        assert!((f.shift_invariance - 1.0).abs() < 1e-9, "{f:?}");
        assert!(f.locality <= 1.0 && f.locality > 0.3, "{f:?}");
        // A constant map is pure DC: all low frequency.
        let c = figures(&vec![1.0; s * s], gh, gw);
        assert!((c.low_frequency - 1.0).abs() < 1e-9, "{c:?}");
    }
}

/// The views' colour maps, the same stops the page uses (`www/visualise.js`): ColorBrewer RdBu
/// (blue negative, near-white zero, red positive) and viridis, interpolated into 256 steps.
pub mod colour {
    const RDBU: [u32; 9] = [0x2166ac, 0x4393c3, 0x92c5de, 0xd1e5f0, 0xf7f7f7, 0xfddbc7, 0xf4a582, 0xd6604d, 0xb2182b];
    const VIRIDIS: [u32; 9] = [0x440154, 0x472d7b, 0x3b528b, 0x2c728e, 0x21918c, 0x28ae80, 0x5ec962, 0xaddc30, 0xfde725];

    fn lookup(stops: &[u32; 9], t: f64) -> [u8; 3] {
        // The page's 256-entry table: entry i interpolates at x = i / 255 * 8.
        let i = (t.clamp(0.0, 1.0) * 255.0).round();
        let x = i / 255.0 * 8.0;
        let j = (x.floor() as usize).min(7);
        let f = x - j as f64;
        let ch = |c: u32, k: u32| ((c >> (16 - 8 * k)) & 0xff) as f64;
        let mut out = [0u8; 3];
        for (k, o) in out.iter_mut().enumerate() {
            *o = (ch(stops[j], k as u32) * (1.0 - f) + ch(stops[j + 1], k as u32) * f).round() as u8;
        }
        out
    }

    /// The largest finite |v|: where a map drawn on its own scale saturates.
    pub fn scale(values: &[f32]) -> f32 {
        values.iter().fold(0f32, |m, v| if v.is_finite() { m.max(v.abs()) } else { m })
    }

    /// The 99th percentile of |v| (finite values; index floor(0.99 (n - 1)) of the sorted
    /// magnitudes, as the page's `percentileAbs`), else [`scale`] when that is 0: where the
    /// token-by-token matrices saturate on every path (CLI, page, desktop), so that one strong
    /// diagonal does not wash out the rest.
    pub fn clip99(values: &[f32]) -> f32 {
        let mut a: Vec<f32> = values.iter().filter(|v| v.is_finite()).map(|v| v.abs()).collect();
        a.sort_by(f32::total_cmp);
        let p = a.get((0.99 * (a.len().max(1) - 1) as f64) as usize).copied().unwrap_or(0.0);
        if p > 0.0 {
            p
        } else {
            scale(values)
        }
    }

    /// Diverging: v in [-scale, scale] (non-finite values grey).
    pub fn diverging(v: f32, scale: f32) -> [u8; 3] {
        if !v.is_finite() {
            return [128; 3];
        }
        let s = if scale > 0.0 { scale } else { 1.0 };
        lookup(&RDBU, ((v / s).clamp(-1.0, 1.0) as f64 + 1.0) / 2.0)
    }

    /// Sequential: v in [0, scale].
    pub fn sequential(v: f32, scale: f32) -> [u8; 3] {
        if !v.is_finite() {
            return [128; 3];
        }
        let s = if scale > 0.0 { scale } else { 1.0 };
        lookup(&VIRIDIS, (v / s).clamp(0.0, 1.0) as f64)
    }
}
