//! PoolFormer's token mixer, `pool.wgsl`: 3x3 average pooling (stride 1, padding 1,
//! count_include_pad=False) minus identity, times the layer scale, added to the residual stream.

use crate::error::Result;
use crate::gpu::{Binding, Gpu, Kernel};

use super::{check_extent, grid, Op};

const SOURCE: &str = include_str!("../../shaders/pool.wgsl");
const BINDINGS: &[Binding] = &[Binding::Uniform, Binding::Read, Binding::Read, Binding::ReadWrite];

/// `x += layer_scale * (avgpool3x3(xn) - xn)` over `batch` channels-last images [h, w, d].
pub fn pool_mix(
    gpu: &Gpu,
    batch: usize,
    h: usize,
    w: usize,
    d: usize,
    xn: &wgpu::Buffer,
    layer_scale: &wgpu::Buffer,
    x: &wgpu::Buffer,
) -> Result<Op> {
    let n = batch * h * w * d;
    check_extent("pool xn", xn, 0, n as u64)?;
    check_extent("pool x", x, 0, n as u64)?;
    check_extent("pool layer scale", layer_scale, 0, d as u64)?;
    let pipeline = gpu.pipeline(&Kernel::new("pool", SOURCE, BINDINGS))?;
    Op::new(gpu, pipeline, &[batch as u32, h as u32, w as u32, d as u32], &[xn, layer_scale, x], grid(gpu, n)?)
}
