//! One Rust wrapper per kernel: shapes in, a dispatchable [`Op`] out. An op is data —
//! pipeline, bind group, workgroup counts — so a forward pass is a list of ops recorded into
//! one command encoder. Ops check shapes and buffer extents and return typed errors; they know
//! nothing about models.

pub mod gemm;
pub mod norm;
pub mod reduce;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{Gpu, Pipeline};

pub use gemm::{Axis, ConvGeometry, Gemm, Operand};

/// A recorded dispatch. Owns its uniform buffer so that the parameters live as long as the op.
pub struct Op {
    pub pipeline: Arc<Pipeline>,
    pub bind_group: wgpu::BindGroup,
    pub workgroups: [u32; 3],
    _params: wgpu::Buffer,
}

impl Op {
    pub fn new(gpu: &Gpu, pipeline: Arc<Pipeline>, params: &[u32], buffers: &[&wgpu::Buffer], workgroups: [u32; 3]) -> Result<Op> {
        let max = gpu.limits.max_compute_workgroups_per_dimension;
        if workgroups.iter().any(|&w| w > max) {
            return Err(Error::Gpu(format!(
                "{}: dispatch {workgroups:?} exceeds the adapter's {max} workgroups per dimension",
                pipeline.name
            )));
        }
        let uniform = gpu.uniform_init(&pipeline.name, params);
        let mut all: Vec<&wgpu::Buffer> = vec![&uniform];
        all.extend_from_slice(buffers);
        let bind_group = gpu.bind_group(&pipeline, &all);
        Ok(Op { pipeline, bind_group, workgroups, _params: uniform })
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.pipeline.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        let [x, y, z] = self.workgroups;
        if x > 0 && y > 0 && z > 0 {
            pass.dispatch_workgroups(x, y, z);
        }
    }
}

/// Records ops into one compute pass. wgpu inserts the barriers between dispatches that
/// write and then read the same buffer.
pub fn encode_all(encoder: &mut wgpu::CommandEncoder, ops: &[Op]) {
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("forward"), timestamp_writes: None });
    for op in ops {
        op.encode(&mut pass);
    }
}

/// Checks that `floats` f32 values starting at element `offset` fit in `buffer`.
pub(crate) fn check_extent(what: &str, buffer: &wgpu::Buffer, offset: u64, floats: u64) -> Result<()> {
    let need = (offset + floats) * 4;
    if need > buffer.size() {
        return Err(Error::Gpu(format!("{what}: needs {need} bytes, buffer `{:?}` has {}", buffer, buffer.size())));
    }
    Ok(())
}

pub(crate) fn groups(n: u32, per: u32) -> u32 {
    n.div_ceil(per)
}
