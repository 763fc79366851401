//! One Rust wrapper per kernel: shapes in, a dispatchable [`Op`] out. An op is data —
//! pipeline, bind group, workgroup counts — so a forward pass is a list of ops recorded into
//! one command encoder. Ops check shapes and buffer extents and return typed errors; they know
//! nothing about models.

pub mod gemm;
pub mod norm;
pub mod pool;
pub mod preprocess;
pub mod reduce;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{Gpu, Pipeline, Resource};

pub use gemm::{Axis, ConvGeometry, Gemm, Matrix, Operand};

/// One recorded step of a forward pass: a dispatch, or a copy of an activation buffer into
/// the texture a later GEMM reads it from. Owns its uniform buffer so the parameters live as
/// long as the op.
pub struct Op {
    work: Work,
}

enum Work {
    /// One or more dispatches, in order (a weight split into row blocks runs one dispatch per
    /// block; a split-K GEMM its partial sums, then their reduction).
    Dispatch {
        runs: Vec<Run>,
    },
    Copy {
        buffer: wgpu::Buffer,
        texture: wgpu::Texture,
        texels: u32,
        rows: u32,
    },
    CopyBuffer {
        src: wgpu::Buffer,
        dst: wgpu::Buffer,
        dst_offset: u64,
        bytes: u64,
    },
}

/// One dispatch: its pipeline, bind group, workgroup counts and the uniform buffer it binds.
struct Run {
    pipeline: Arc<Pipeline>,
    bind_group: wgpu::BindGroup,
    workgroups: [u32; 3],
    _params: wgpu::Buffer,
}

impl Op {
    pub fn new(gpu: &Gpu, pipeline: Arc<Pipeline>, params: &[u32], buffers: &[&wgpu::Buffer], workgroups: [u32; 3]) -> Result<Op> {
        let resources: Vec<Resource> = buffers.iter().map(|b| Resource::Buffer(b)).collect();
        Self::with_resources(gpu, pipeline, params, &resources, workgroups)
    }

    pub fn with_resources(gpu: &Gpu, pipeline: Arc<Pipeline>, params: &[u32], resources: &[Resource], workgroups: [u32; 3]) -> Result<Op> {
        let run = Self::run(gpu, &pipeline, params, resources, workgroups)?;
        Ok(Op { work: Work::Dispatch { runs: vec![run] } })
    }

    /// Several dispatches of one pipeline, in order, each with its own parameters and bindings.
    pub fn dispatches(gpu: &Gpu, pipeline: Arc<Pipeline>, each: &[(Vec<u32>, Vec<Resource>, [u32; 3])]) -> Result<Op> {
        let runs = each.iter().map(|(params, resources, wg)| Self::run(gpu, &pipeline, params, resources, *wg)).collect::<Result<_>>()?;
        Ok(Op { work: Work::Dispatch { runs } })
    }

    /// This op's dispatches, then `next`'s (both dispatches; anything else is an error).
    pub fn then(self, next: Op) -> Result<Op> {
        match (self.work, next.work) {
            (Work::Dispatch { mut runs }, Work::Dispatch { runs: more }) => {
                runs.extend(more);
                Ok(Op { work: Work::Dispatch { runs } })
            }
            _ => Err(Error::Gpu("internal: only dispatches can be chained".into())),
        }
    }

    fn run(gpu: &Gpu, pipeline: &Arc<Pipeline>, params: &[u32], resources: &[Resource], workgroups: [u32; 3]) -> Result<Run> {
        let max = gpu.limits.max_compute_workgroups_per_dimension;
        if workgroups.iter().any(|&w| w > max) {
            return Err(Error::Gpu(format!("{}: dispatch {workgroups:?} exceeds the adapter's {max} workgroups per dimension", pipeline.name)));
        }
        let uniform = gpu.uniform_init(&pipeline.name, params);
        let mut all = vec![Resource::Buffer(&uniform)];
        all.extend_from_slice(resources);
        let bind_group = gpu.bind_group(pipeline, &all);
        Ok(Run { pipeline: pipeline.clone(), bind_group, workgroups, _params: uniform })
    }

    /// What runs this op, for a profile: its kernels' names in order, each once ("gemm_tiled+
    /// gemm_splitk" for a split-K GEMM), or the kind of copy.
    pub fn kernel(&self) -> String {
        match &self.work {
            Work::Dispatch { runs } => {
                let mut names: Vec<&str> = Vec::new();
                for r in runs {
                    let name = r.pipeline.name.split('[').next().unwrap_or_default();
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
                names.join("+")
            }
            Work::Copy { .. } => "copy to texture".into(),
            Work::CopyBuffer { .. } => "copy".into(),
        }
    }

    /// Copies the first `t.rows x t.cols` floats of `buffer` (row-major) into `t`.
    pub fn copy_to_texture(buffer: &wgpu::Buffer, t: &ActTexture) -> Result<Op> {
        check_extent("copy to texture", buffer, 0, (t.rows * t.cols) as u64)?;
        Ok(Op { work: Work::Copy { buffer: buffer.clone(), texture: t.texture.clone(), texels: (t.cols / 4) as u32, rows: t.rows as u32 } })
    }

    /// Copies the first `floats` values of `src` into `dst` at float offset `dst_offset` (a
    /// snapshot of an activation, e.g. a stage's output for the page).
    pub fn copy_buffer(src: &wgpu::Buffer, dst: &wgpu::Buffer, dst_offset: usize, floats: usize) -> Result<Op> {
        check_extent("copy source", src, 0, floats as u64)?;
        check_extent("copy destination", dst, dst_offset as u64, floats as u64)?;
        Ok(Op { work: Work::CopyBuffer { src: src.clone(), dst: dst.clone(), dst_offset: dst_offset as u64 * 4, bytes: floats as u64 * 4 } })
    }
}

/// An activation matrix [rows, cols] mirrored in an rgba32float texture (4 columns per texel),
/// so the texture GEMM can gather it. Only made when a row is a whole number of 256-byte copy
/// rows (cols % 64 == 0) and the texture fits the adapter's limits.
pub struct ActTexture {
    pub texture: wgpu::Texture,
    pub view: wgpu::TextureView,
    pub rows: usize,
    pub cols: usize,
}

impl ActTexture {
    pub fn new(gpu: &Gpu, label: &str, rows: usize, cols: usize) -> Option<ActTexture> {
        if !cols.is_multiple_of(64) {
            return None;
        }
        let texture = gpu.rgba32f_texture(label, rows, cols / 4)?;
        let view = texture.create_view(&Default::default());
        Some(ActTexture { texture, view, rows, cols })
    }
}

/// Records ops for a profile: each dispatch op in a compute pass of its own whose start and
/// end timestamps go to queries 2i and 2i + 1 of `queries`; with `around_copies`
/// (`TIMESTAMP_QUERY_INSIDE_ENCODERS`) copies are timed the same way by encoder timestamps.
/// Ops past the query set's room run untimed. Returns whether each op was timed.
pub fn encode_timed(encoder: &mut wgpu::CommandEncoder, ops: &[Op], queries: &wgpu::QuerySet, around_copies: bool) -> Vec<bool> {
    let room = queries.count() / 2;
    let mut timed = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let i = u32::try_from(i).ok().filter(|&i| i < room);
        match (&op.work, i) {
            (Work::Dispatch { runs }, Some(i)) => {
                let stamps = wgpu::ComputePassTimestampWrites {
                    query_set: queries,
                    beginning_of_pass_write_index: Some(2 * i),
                    end_of_pass_write_index: Some(2 * i + 1),
                };
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("profiled"), timestamp_writes: Some(stamps) });
                record_runs(&mut pass, runs, &mut None);
                timed.push(true);
            }
            (Work::Copy { .. } | Work::CopyBuffer { .. }, Some(i)) if around_copies => {
                encoder.write_timestamp(queries, 2 * i);
                encode_all(encoder, std::slice::from_ref(op));
                encoder.write_timestamp(queries, 2 * i + 1);
                timed.push(true);
            }
            _ => {
                encode_all(encoder, std::slice::from_ref(op));
                timed.push(false);
            }
        }
    }
    timed
}

/// Records one op's dispatches into `pass`, setting a pipeline only when it is not `current`
/// (the pass's last one).
fn record_runs<'p>(pass: &mut wgpu::ComputePass<'_>, runs: &'p [Run], current: &mut Option<&'p Arc<Pipeline>>) {
    for Run { pipeline, bind_group, workgroups: [x, y, z], .. } in runs {
        if !current.is_some_and(|c| Arc::ptr_eq(c, pipeline)) {
            pass.set_pipeline(&pipeline.pipeline);
            *current = Some(pipeline);
        }
        pass.set_bind_group(0, bind_group, &[]);
        if *x > 0 && *y > 0 && *z > 0 {
            pass.dispatch_workgroups(*x, *y, *z);
        }
    }
}

/// Records ops into one command encoder: dispatches share compute passes (wgpu inserts the
/// barriers between dispatches that write and then read the same buffer); a copy closes the
/// pass, copies, and the next dispatch opens a new one.
pub fn encode_all(encoder: &mut wgpu::CommandEncoder, ops: &[Op]) {
    let mut i = 0;
    while i < ops.len() {
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("forward"), timestamp_writes: None });
            let mut current: Option<&Arc<Pipeline>> = None;
            while let Some(Work::Dispatch { runs }) = ops.get(i).map(|o| &o.work) {
                record_runs(&mut pass, runs, &mut current);
                i += 1;
            }
        }
        loop {
            match ops.get(i).map(|o| &o.work) {
                Some(Work::Copy { buffer, texture, texels, rows }) => encoder.copy_buffer_to_texture(
                    wgpu::TexelCopyBufferInfo {
                        buffer,
                        layout: wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(texels * 16), rows_per_image: Some(*rows) },
                    },
                    texture.as_image_copy(),
                    wgpu::Extent3d { width: *texels, height: *rows, depth_or_array_layers: 1 },
                ),
                Some(Work::CopyBuffer { src, dst, dst_offset, bytes }) => encoder.copy_buffer_to_buffer(src, 0, dst, *dst_offset, *bytes),
                _ => break,
            }
            i += 1;
        }
    }
}

/// Checks that `floats` f32 values starting at element `offset` fit in `buffer`.
pub(crate) fn check_extent(what: &str, buffer: &wgpu::Buffer, offset: u64, floats: u64) -> Result<()> {
    check_extent_of(what, buffer, offset + floats, 4)
}

/// As [`check_extent`] for `elems` elements of `bytes` bytes each (2 for an f16 weight).
pub(crate) fn check_extent_of(what: &str, buffer: &wgpu::Buffer, elems: u64, bytes: u64) -> Result<()> {
    let need = elems * bytes;
    if need > buffer.size() {
        return Err(Error::Gpu(format!("{what}: needs {need} bytes, buffer `{:?}` has {}", buffer, buffer.size())));
    }
    Ok(())
}

/// max |got - want| over max(1, max |want|), NaN when any difference is: how far a kernel's
/// result is from a reference (the autotuner's coop check, `bench --gemm`'s error column).
pub fn rel_diff(want: &[f32], got: &[f32]) -> f32 {
    let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
    let diff = want.iter().zip(got).fold(0f32, |m, (a, b)| if (a - b).abs() > m || (a - b).is_nan() { (a - b).abs() } else { m });
    diff / scale
}

pub(crate) fn groups(n: u32, per: u32) -> u32 {
    n.div_ceil(per)
}

/// Workgroups of 64 for `n` independent items, folded into two dimensions when one would pass
/// the adapter's per-dimension limit; the kernels index `gid.x + gid.y * num_workgroups.x * 64`.
pub(crate) fn grid(gpu: &Gpu, n: usize) -> Result<[u32; 3]> {
    if n > u32::MAX as usize {
        return Err(Error::Input(format!("{n} items is more than one dispatch can cover")));
    }
    workgroup_grid(gpu, n.div_ceil(64))
}

/// A row kernel (`row_common.wgsl` in front of `source`) over `rows` rows, in the device's
/// [`RowKernel`](crate::gpu::RowKernel) form: the kernel named `names[0]` (one invocation per row),
/// `names[1]` (one workgroup per row, `ROW_WORKGROUP`) or `names[2]` (the same reducing by
/// subgroups first, `ROW_SUBGROUP`), and its grid (the name is what profiles show).
pub(crate) fn row_kernel(
    gpu: &Gpu,
    names: [&'static str; 3],
    source: &'static str,
    bindings: &'static [crate::gpu::Binding],
    rows: usize,
) -> Result<(crate::gpu::Kernel, [u32; 3])> {
    Ok(match gpu.rows {
        crate::gpu::RowKernel::Invocation => (crate::gpu::Kernel::new(names[0], source, bindings), grid(gpu, rows)?),
        _ => (workgroup_row_kernel(gpu, [names[1], names[2]], source, bindings), workgroup_grid(gpu, rows)?),
    })
}

/// A kernel of `row_common.wgsl`'s workgroup forms (a workgroup per row or per chunk), as the
/// device reduces: `names[0]` through workgroup memory alone (`ROW_WORKGROUP`), or `names[1]`
/// by subgroups first where the device's form is `RowKernel::Subgroup` (`ROW_SUBGROUP` too).
/// The row kernels' workgroup forms and GroupNorm's chunks.
pub(crate) fn workgroup_row_kernel(
    gpu: &Gpu,
    names: [&'static str; 2],
    source: &'static str,
    bindings: &'static [crate::gpu::Binding],
) -> crate::gpu::Kernel {
    let by_subgroup = gpu.rows == crate::gpu::RowKernel::Subgroup;
    crate::gpu::Kernel::new(names[by_subgroup as usize], source, bindings).flag("ROW_WORKGROUP", true).flag("ROW_SUBGROUP", by_subgroup)
}

/// `n` workgroups (one per row, say), folded into two dimensions as [`grid`] folds; the kernels
/// index `wid.x + wid.y * num_workgroups.x`.
pub(crate) fn workgroup_grid(gpu: &Gpu, n: usize) -> Result<[u32; 3]> {
    let max = gpu.limits.max_compute_workgroups_per_dimension as usize;
    let x = n.clamp(1, max);
    let y = n.max(1).div_ceil(x);
    if y > max {
        return Err(Error::Input(format!("{n} workgroups is more than one dispatch can cover")));
    }
    Ok([x as u32, y as u32, 1])
}
