//! PoolFormer's token mixer (Yu et al. 2022, "MetaFormer is actually what you need"): no
//! weights at all, just average pooling over each token's 3x3 neighbourhood, minus the token
//! itself (the block's residual already adds it back):
//!
//! ```text
//! x = x + ls1 * (AvgPool3x3(GN1(x)) - GN1(x))
//! ```
//!
//! One step does the pooling, the subtraction, the layer scale and the residual add.

use crate::error::{Error, Result};
use crate::net::{Builder, Step, W};

use super::block::Stream;

/// The fixed mixing kernel; it has no parameters, so there is nothing to load.
pub struct Pooling;

impl Pooling {
    pub fn describe(&self, n: &mut Builder, s: &Stream, ls: Option<W>) -> Result<()> {
        let scale = ls.ok_or_else(|| Error::Config("PoolFormer blocks need a layer scale".into()))?;
        let (h, w) = s.grid;
        n.push(Step::PoolMix { h, w, d: s.dim, xn: s.xn, scale, x: s.x });
        Ok(())
    }
}
