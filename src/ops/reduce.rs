//! Reductions over one axis: mean over tokens (`mean_tokens.wgsl`), softmax (`softmax.wgsl`).

use crate::error::Result;
use crate::gpu::{Binding, Gpu, Kernel};

use super::{check_extent, groups, row_kernel, Op};

const MEAN: &str = include_str!("../../shaders/mean_tokens.wgsl");
const SOFTMAX: &str = concat!(include_str!("../../shaders/row_common.wgsl"), include_str!("../../shaders/softmax.wgsl"));
const BINDINGS: &[Binding] = &[Binding::Uniform, Binding::Read, Binding::ReadWrite];

/// `y[b, c] = mean_t x[b, t, c]`.
pub fn mean_tokens(gpu: &Gpu, batch: usize, tokens: usize, d: usize, x: &wgpu::Buffer, y: &wgpu::Buffer) -> Result<Op> {
    check_extent("mean_tokens x", x, 0, (batch * tokens * d) as u64)?;
    check_extent("mean_tokens y", y, 0, (batch * d) as u64)?;
    let pipeline = gpu.pipeline(&Kernel::new("mean_tokens", MEAN, BINDINGS))?;
    let params = [batch as u32, tokens as u32, d as u32, 0];
    Op::new(gpu, pipeline, &params, &[x, y], [groups((batch * d) as u32, 64), 1, 1])
}

/// Row-wise softmax of `[rows, classes]`.
pub fn softmax(gpu: &Gpu, rows: usize, classes: usize, logits: &wgpu::Buffer, probs: &wgpu::Buffer) -> Result<Op> {
    check_extent("softmax logits", logits, 0, (rows * classes) as u64)?;
    check_extent("softmax probs", probs, 0, (rows * classes) as u64)?;
    let (kernel, workgroups) = row_kernel(gpu, ["softmax", "softmax_wg", "softmax_sg"], SOFTMAX, BINDINGS, rows)?;
    let pipeline = gpu.pipeline(&kernel)?;
    let params = [rows as u32, classes as u32, 0, 0];
    Op::new(gpu, pipeline, &params, &[logits, probs], workgroups)
}
