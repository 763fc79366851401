//! gMLP's spatial gating unit (Liu et al. 2021, "Pay Attention to MLPs"). In timm the block
//! is `x = x + GatedMlp(LayerNorm(x))` and the token mixing lives inside the channel MLP:
//!
//! ```text
//! z    = GELU(fc1(x_n))                 # [tokens, hidden]
//! u, v = z[:, :hidden/2], z[:, hidden/2:]
//! s    = u ⊙ (W · LayerNorm(v) + b)     # SGU: W [tokens, tokens], LayerNorm eps 1e-5
//! x    = x + fc2(s)
//! ```
//!
//! Four steps: fc1 (+bias, GELU) → LayerNorm of the second half of each row, read in place →
//! the token projection W · v_n with bias and the gate u ⊙ fused in its epilogue → fc2
//! (+bias, residual). The MetaFormer resemblance: it is a channel MLP whose hidden layer
//! mixes tokens, where Mixer and ResMLP put that mixing in a branch of its own.

use crate::error::Result;
use crate::net::{Builder, Gemm, GemmKind, Slot, Step, View, W};

use super::block::{Linear, Stream};

/// torch's default LayerNorm eps, which timm's `SpatialGatingUnit` keeps.
const SGU_LN_EPS: f32 = 1e-5;

/// timm `SpatialGatingUnit`: `gate.norm` over hidden/2 channels, `gate.proj` [tokens, tokens].
pub struct SpatialGatingUnit {
    pub norm_weight: W,
    pub norm_bias: W,
    pub proj: Linear,
}

/// timm `GatedMlp` with the SGU as its gate: fc1 [hidden, dim], fc2 [dim, hidden/2].
pub struct GatedMlp {
    pub fc1: Linear,
    pub gate: SpatialGatingUnit,
    pub fc2: Linear,
    pub dim: usize,
}

impl GatedMlp {
    pub fn load(n: &mut Builder, prefix: &str, dim: usize, hidden: usize, tokens: usize) -> Result<Self> {
        let half = hidden / 2;
        Ok(GatedMlp {
            fc1: Linear::load(n, &format!("{prefix}.fc1"), hidden, dim, false)?,
            gate: SpatialGatingUnit {
                norm_weight: n.take(&format!("{prefix}.gate.norm.weight"), &[half])?,
                norm_bias: n.take(&format!("{prefix}.gate.norm.bias"), &[half])?,
                proj: Linear::load(n, &format!("{prefix}.gate.proj"), tokens, tokens, false)?,
            },
            fc2: Linear::load(n, &format!("{prefix}.fc2"), dim, half, false)?,
            dim,
        })
    }

    /// `x += fc2(u ⊙ (W · LN(v) + b))` with `[u, v] = gelu(fc1(xn))`.
    pub fn describe(&self, n: &mut Builder, s: &Stream, ls: Option<W>) {
        let (t, d) = (s.tokens(), self.dim);
        let (h, half) = (self.fc1.out, self.fc1.out / 2);
        self.fc1.fc1_gelu(n, s);
        // v_n = LayerNorm(v), v being columns [half, h) of each hidden row; written dense to aux.
        let v = View { slot: Slot::Hidden, off: half, ld: h, bs: t * h };
        let g = &self.gate;
        n.push(Step::LayerNorm { rows: t, d: half, eps: SGU_LN_EPS, x: v, gamma: g.norm_weight, beta: g.norm_bias, y: Slot::Aux });
        // s = u ⊙ (W · v_n + b) per image, into xn (free again after fc1).
        let gated = View::dense(s.xn, t, half);
        let proj = Gemm::new(GemmKind::Tokens { x: View::dense(Slot::Aux, t, half), channels: half }, g.proj.w, gated);
        n.gemm(proj.bias(g.proj.b).gate(View::dense(Slot::Hidden, t, h)));
        let fc2 = Gemm::new(GemmKind::Linear { rows: t, a: gated }, self.fc2.w, View::dense(s.x, t, d));
        n.gemm(fc2.bias(self.fc2.b).scale(ls).residual());
    }
}
