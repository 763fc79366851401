//! MLP-Mixer's token mixer: the same two-layer MLP applied across the token axis of every
//! channel, `Y^T = W2 · GELU(W1 · X_n + b1) + b2` with X_n the normalised [tokens, channels]
//! matrix. Written as weight · activations, the GEMMs read X in its own layout: no transpose.

use crate::error::Result;
use crate::net::{Builder, Gemm, GemmKind, Slot, View, W};

use super::block::{Mlp, Stream};

/// An [`Mlp`] whose features are the tokens: fc1 [hidden, tokens], fc2 [tokens, hidden].
pub struct TokenMlp(pub Mlp);

impl TokenMlp {
    pub fn load(n: &mut Builder, prefix: &str, tokens: usize, hidden: usize) -> Result<Self> {
        Ok(TokenMlp(Mlp::load(n, prefix, tokens, hidden, false)?))
    }

    /// `x += ls * (W2 · gelu(W1 · xn + b1) + b2)` per image, biases along the token axis.
    pub fn describe(&self, n: &mut Builder, s: &Stream, ls: Option<W>) {
        let (m, d) = (&self.0, s.dim);
        let (t, h) = (m.features, m.hidden);
        let hidden = View::dense(Slot::Hidden, h, d);
        n.gemm(Gemm::new(GemmKind::Tokens { x: View::dense(s.xn, t, d), channels: d }, m.fc1.w, hidden).bias(m.fc1.b).gelu());
        n.gemm(Gemm::new(GemmKind::Tokens { x: hidden, channels: d }, m.fc2.w, View::dense(s.x, t, d)).bias(m.fc2.b).scale(ls).residual());
    }
}
