//! LayerNorm over the last dimension (`shaders/layernorm.wgsl`).

use crate::error::Result;
use crate::gpu::{Binding, Gpu, Kernel};

use super::{check_extent, groups, Op};

const SOURCE: &str = include_str!("../../shaders/layernorm.wgsl");
const BINDINGS: &[Binding] = &[Binding::Uniform, Binding::Read, Binding::Read, Binding::Read, Binding::ReadWrite];

/// `y[r, :] = LayerNorm(x[r, :]) * gamma + beta` for `rows` rows of width `d`.
pub fn layer_norm(gpu: &Gpu, rows: usize, d: usize, eps: f32, x: &wgpu::Buffer, gamma: &wgpu::Buffer, beta: &wgpu::Buffer, y: &wgpu::Buffer) -> Result<Op> {
    let n = (rows * d) as u64;
    check_extent("layer_norm x", x, 0, n)?;
    check_extent("layer_norm y", y, 0, n)?;
    check_extent("layer_norm gamma", gamma, 0, d as u64)?;
    check_extent("layer_norm beta", beta, 0, d as u64)?;
    let pipeline = gpu.pipeline(&Kernel::new("layernorm", SOURCE, BINDINGS))?;
    let params = [rows as u32, d as u32, eps.to_bits(), 0];
    Op::new(gpu, pipeline, &params, &[x, gamma, beta, y], [groups(rows as u32, 64), 1, 1])
}
