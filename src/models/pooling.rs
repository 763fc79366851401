//! PoolFormer's token mixer (Yu et al. 2022, "MetaFormer is actually what you need"): no
//! weights at all, just average pooling over each token's 3x3 neighbourhood, minus the token
//! itself (the block's residual already adds it back):
//!
//! ```text
//! x = x + ls1 * (AvgPool3x3(GN1(x)) - GN1(x))
//! ```
//!
//! One kernel (`shaders/pool.wgsl`) does the pooling, the subtraction, the layer scale and the
//! residual add.

use crate::error::Result;
use crate::gpu::Gpu;
use crate::ops::{self, Op};

use super::block::Stream;

/// The fixed mixing kernel; it has no parameters, so there is nothing to load.
pub struct Pooling;

impl Pooling {
    pub fn record(&self, gpu: &Gpu, s: &Stream, ls: Option<&wgpu::Buffer>, ops: &mut Vec<Op>) -> Result<()> {
        let ls = ls.ok_or_else(|| crate::error::Error::Config("PoolFormer blocks need a layer scale".into()))?;
        let (h, w) = s.grid;
        ops.push(ops::pool::pool_mix(gpu, s.batch, h, w, s.dim, s.xn, ls, s.x)?);
        Ok(())
    }
}
