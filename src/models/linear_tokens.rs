//! ResMLP's token mixer (Touvron et al. 2021): one linear layer across the token axis,
//! `Y^T = W · X_n + b` with W [tokens, tokens], then the per-channel layer scale:
//!
//! ```text
//! x = x + ls1 * (W · Aff1(x) + b)
//! ```
//!
//! One GEMM, weight · activations in place, with bias, layer scale and residual fused.

use crate::error::Result;
use crate::net::{Builder, Gemm, GemmKind, View, W};

use super::block::{Linear, Stream};

/// timm `ResBlock.linear_tokens`: weight `[tokens, tokens]`, bias `[tokens]`.
pub struct LinearTokens(pub Linear);

impl LinearTokens {
    pub fn load(n: &mut Builder, prefix: &str, tokens: usize) -> Result<Self> {
        Ok(LinearTokens(Linear::load(n, prefix, tokens, tokens, false)?))
    }

    /// `x += ls * (W · xn + b)` per image, the bias along the token axis.
    pub fn describe(&self, n: &mut Builder, s: &Stream, ls: Option<W>) {
        let (t, d) = (s.tokens(), s.dim);
        let x = View::dense(s.xn, t, d);
        n.gemm(Gemm::new(GemmKind::Tokens { x, channels: d }, self.0.w, View::dense(s.x, t, d)).bias(self.0.b).scale(ls).residual());
    }
}
