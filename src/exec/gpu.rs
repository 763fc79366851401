//! The wgpu executor: runs a [`Net`] as WGSL compute shaders. Weights are uploaded once
//! (GEMM weights as [`Matrix`], split into row blocks past the binding limit, with texture
//! copies where the adapter's GEMM gathers from textures); per batch size a `Plan` owns the
//! slot buffers, the texture mirrors and the recorded ops, so a forward pass is one command
//! encoder, one submission and one read-back of logits and probabilities.
//!
//! Everything adapter-specific lives here and in `ops/`: which GEMM kernel runs (`Gpu::gemm`),
//! which activations get texture mirrors (any dense GEMM input whose rows are a multiple of 64
//! floats, on the texture kernel), how weights are split.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::gpu::{GemmVariant, Gpu, Precision, Resample};
use crate::net::{GemmKind, Net, Slot, SlotSizes, Step, Tensor, View, W};
use crate::ops::{self, norm::Rows, ActTexture, Axis, Matrix, Op, Operand};
use crate::preprocess::{Pixels, Preprocess};

use super::{Cancel, Output, RunTimes};

enum GpuWeight {
    Matrix(Matrix),
    Vector(wgpu::Buffer),
}

/// Slot buffers, mirrors and recorded ops for one batch size (and, for explanations, with the
/// evidence steps).
struct Plan {
    batch: usize,
    explain: bool,
    slots: Vec<wgpu::Buffer>,
    probs: wgpu::Buffer,
    /// Batch-1 plans of nets with snapshots: each stage's output, one after the other.
    stages: Option<wgpu::Buffer>,
    ops: Vec<Op>,
    /// Each op's kind of step ([`Net::step_kind`], "softmax" for the probabilities), for a
    /// profile (native only so far: the browser asks for no timestamp queries).
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    kinds: Vec<String>,
}

pub struct GpuExec {
    pub gpu: Arc<Gpu>,
    steps: Vec<Step>,
    /// [`crate::net::Explain::steps`] (empty for nets without an evidence split).
    explain_steps: Vec<Step>,
    /// [`Net::step_kind`] of each step, then of each evidence step.
    step_kinds: Vec<String>,
    /// (name, rows, cols) of each weight, for shapes and messages; the data lives on the GPU.
    shapes: Vec<(String, usize, usize)>,
    weights: Vec<GpuWeight>,
    /// Per-image slot sizes without and with the evidence steps.
    slot_floats: [SlotSizes; 2],
    /// [`Net::widest_slot_bytes`] without and with the evidence steps.
    widest: u64,
    widest_explain: u64,
    input: usize,
    classes: usize,
    /// Floats of all stage snapshots of one image (nets with [`Step::Snapshot`]s).
    stage_floats: usize,
    plans: Mutex<HashMap<(usize, bool), Arc<Plan>>>,
}

impl GpuExec {
    /// Uploads the weights (checking `cancel` before each) and builds the batch-1 plan, which
    /// compiles every pipeline: the first forward pass compiles nothing.
    pub fn new(gpu: Arc<Gpu>, net: Net, cancel: &Cancel) -> Result<GpuExec> {
        let slot_floats = [net.slot_floats(false), net.slot_floats(true)];
        let limit = gpu.binding_limit();
        let widest = net.widest_slot_bytes(false);
        let widest_explain = net.widest_slot_bytes(true);
        if widest > limit {
            return Err(Error::Config(format!(
                "one image's widest activation needs {widest} bytes, over the adapter's binding limit of {limit} bytes"
            )));
        }
        let is_matrix = net.gemm_weights();
        let mut shapes = Vec::with_capacity(net.weights.len());
        let mut weights = Vec::with_capacity(net.weights.len());
        for (t, matrix) in net.weights.iter().zip(is_matrix) {
            cancel.check()?;
            let Tensor { name, data, .. } = t;
            let (rows, cols) = (t.rows(), t.cols());
            weights.push(if matrix {
                GpuWeight::Matrix(Matrix::upload(&gpu, name, data, rows, cols)?)
            } else {
                GpuWeight::Vector(gpu.storage_init(name, data)?)
            });
            shapes.push((name.clone(), rows, cols));
        }
        let stage_floats = net.stages.iter().map(|((h, w), d)| h * w * d).sum();
        let step_kinds = net.steps_for(true).map(|s| net.step_kind(s)).collect();
        let explain_steps = net.explain.map(|e| e.steps).unwrap_or_default();
        let exec = GpuExec {
            gpu,
            steps: net.steps,
            explain_steps,
            step_kinds,
            shapes,
            weights,
            slot_floats,
            widest,
            widest_explain,
            input: net.input,
            classes: net.classes,
            stage_floats,
            plans: Mutex::default(),
        };
        cancel.check()?;
        exec.plan(1, false, cancel)?;
        Ok(exec)
    }

    /// Bytes of the widest activation buffer for one image.
    pub fn widest_activation_bytes(&self) -> u64 {
        self.widest
    }

    /// The largest batch one plan runs: [`super::MAX_BATCH`], or fewer when a batch's
    /// activations would pass the adapter's storage-binding limit. Longer inputs run in chunks.
    pub fn max_batch(&self) -> usize {
        self.batch_limit(self.widest)
    }

    /// The most images whose widest slot (`widest` bytes each) fits one storage binding.
    fn batch_limit(&self, widest: u64) -> usize {
        ((self.gpu.binding_limit() / widest.max(1)) as usize).clamp(1, super::MAX_BATCH)
    }

    /// Whether slot `s` is stored as f16: on an f16 device, [`Slot::Hidden`], the wide MLP
    /// activations that only GEMMs write and GEMMs (and gMLP's gate LayerNorm) read — as
    /// PyTorch's f16 autocast keeps linear layers' outputs in f16. It carries most of a block's
    /// activation traffic (fc1 writes and fc2 reads 4x the channels). The residual stream, norm
    /// outputs, pooling and logits stay f32, as under autocast, so the f16 rounding does not
    /// accumulate over the blocks.
    fn is_half(&self, s: Slot) -> bool {
        s == Slot::Hidden && self.gpu.precision == Precision::F16
    }

    /// The slots this device stores as f16 (empty at f32), by name.
    pub fn half_slots(&self) -> Vec<&'static str> {
        Slot::ALL.iter().filter(|&&s| self.is_half(s)).map(|s| s.name()).collect()
    }

    fn precision_of(&self, s: Slot) -> Precision {
        if self.is_half(s) {
            Precision::F16
        } else {
            Precision::F32
        }
    }

    /// An error unless every one of `slots` is f32: for the steps whose kernels read and write
    /// f32 only (the net description never puts [`Self::is_half`] slots there).
    fn f32_slots(&self, what: &str, slots: &[Slot]) -> Result<()> {
        match slots.iter().find(|&&s| self.is_half(s)) {
            Some(s) => Err(Error::Config(format!("internal: {what} on the f16 slot `{}`", s.name()))),
            None => Ok(()),
        }
    }

    /// This batch size's slot buffers, each in its slot's precision.
    fn slot_buffers(&self, batch: usize, explain: bool) -> Result<Vec<wgpu::Buffer>> {
        let floats = &self.slot_floats[explain as usize];
        Slot::ALL.iter().map(|&s| self.gpu.storage_of(s.name(), batch * floats[s.index()].max(1), self.precision_of(s))).collect()
    }

    fn matrix(&self, w: W) -> Result<&Matrix> {
        match &self.weights[w.0] {
            GpuWeight::Matrix(m) => Ok(m),
            GpuWeight::Vector(_) => Err(Error::Config(format!("`{}` is not uploaded as a matrix", self.shapes[w.0].0))),
        }
    }

    fn vector(&self, w: W) -> &wgpu::Buffer {
        match &self.weights[w.0] {
            GpuWeight::Vector(b) => b,
            GpuWeight::Matrix(m) => &m.blocks()[0].buf,
        }
    }

    /// The plan of a `batch`-image pass (with the evidence steps when `explain`), built and
    /// cached the first time; `cancel` stops that build's autotuning (see
    /// [`ops::Gemm::build_cancellable`]), and no plan is cached then.
    fn plan(&self, batch: usize, explain: bool, cancel: &Cancel) -> Result<Arc<Plan>> {
        let mut plans = self.plans.lock().map_err(|_| Error::Gpu("plan cache poisoned".into()))?;
        if let Some(p) = plans.get(&(batch, explain)) {
            return Ok(p.clone());
        }
        let gpu = &self.gpu;
        let slots = self.slot_buffers(batch, explain)?;
        let probs = gpu.storage("probs", batch * self.classes)?;
        let stages = match self.stage_floats {
            n if n > 0 && batch == 1 => Some(gpu.storage("stages", n)?),
            _ => None,
        };
        let mirrors = self.mirrors(batch);
        let mut ops = Vec::new();
        let mut kinds = Vec::new();
        let mut stage_offset = 0;
        let explaining = if explain { &self.explain_steps[..] } else { &[] };
        for (step, kind) in self.steps.iter().chain(explaining).zip(&self.step_kinds) {
            self.record(batch, step, &slots, &mirrors, &mut ops, cancel)?;
            if let (Step::Snapshot { x, floats }, Some(st)) = (step, &stages) {
                self.f32_slots("a stage snapshot", &[*x])?;
                ops.push(Op::copy_buffer(&slots[x.index()], st, stage_offset, *floats)?);
                stage_offset += floats;
            }
            kinds.resize(ops.len(), kind.clone());
        }
        ops.push(ops::reduce::softmax(gpu, batch, self.classes, &slots[Slot::Logits.index()], &probs)?);
        kinds.push("softmax".into());
        gpu.check()?;
        let plan = Arc::new(Plan { batch, explain, slots, probs, stages, ops, kinds });
        plans.insert((batch, explain), plan.clone());
        Ok(plan)
    }

    /// The dense activation matrix a GEMM reads as its A operand (rows over the whole batch).
    fn gemm_input(&self, batch: usize, g: &crate::net::Gemm) -> Option<(Slot, usize, usize)> {
        // The weight's columns are K: A's row length (Linear) or X's row count (Tokens).
        let k = self.shapes[g.w.0].2;
        match g.kind {
            GemmKind::Linear { rows, a } if a.off == 0 && a.ld == k => Some((a.slot, batch * rows, k)),
            GemmKind::Tokens { x, channels } if x.off == 0 && x.ld == channels && x.bs == k * channels => Some((x.slot, batch * k, channels)),
            _ => None,
        }
    }

    /// Texture mirrors of the GEMM inputs, for adapters whose GEMM gathers from textures.
    fn mirrors(&self, batch: usize) -> HashMap<(Slot, usize, usize), ActTexture> {
        let mut out = HashMap::new();
        if self.gpu.gemm != GemmVariant::Texture {
            return out;
        }
        for step in self.steps.iter().chain(&self.explain_steps) {
            if let Step::Gemm(g) = step {
                if let Some(key @ (slot, rows, cols)) = self.gemm_input(batch, g).filter(|&(s, ..)| !self.is_half(s)) {
                    if let std::collections::hash_map::Entry::Vacant(e) = out.entry(key) {
                        if let Some(t) = ActTexture::new(&self.gpu, slot.name(), rows, cols) {
                            e.insert(t);
                        }
                    }
                }
            }
        }
        out
    }

    /// The GEMM a step records, on this batch's slot buffers (and A's texture mirror).
    fn gemm<'a>(&'a self, batch: usize, g: &crate::net::Gemm, slots: &'a [wgpu::Buffer], mirror: Option<&'a ActTexture>) -> Result<ops::Gemm<'a>> {
        let buf = |s: Slot| &slots[s.index()];
        let w = self.matrix(g.w)?;
        // Linear GEMMs fold the batch into rows (bs = 0); the others keep the view's stride.
        let operand = |v: &View, fold: bool| -> Result<Operand<'a>> {
            let word = |n: usize| u32::try_from(n).map_err(|_| Error::Input(format!("activation offset {n} is too large for 32-bit indexing")));
            Ok(Operand { buf: buf(v.slot), off: word(v.off)?, ld: word(v.ld)?, bs: if fold { 0 } else { word(v.bs)? }, half: self.is_half(v.slot) })
        };
        let mut gemm = match g.kind {
            GemmKind::Linear { rows, a } => {
                let mut k = ops::Gemm::linear(batch * rows, operand(&a, true)?, w, operand(&g.c, true)?).a_texture(mirror);
                if let Some(b) = g.bias {
                    k = k.bias(self.vector(b), Axis::N);
                }
                if let Some(s) = g.scale {
                    k = k.scale(self.vector(s), Axis::N);
                }
                if let Some(gate) = &g.gate {
                    k = k.gate(operand(gate, true)?);
                }
                k
            }
            GemmKind::Tokens { x, channels } => {
                let mut k = ops::Gemm::across_tokens(batch, w, operand(&x, false)?, channels, operand(&g.c, false)?).a_texture(mirror);
                if let Some(b) = g.bias {
                    k = k.token_bias(self.vector(b));
                }
                k = k.channel_scale(g.scale.map(|s| self.vector(s)));
                if let Some(gate) = &g.gate {
                    k = k.gate(operand(gate, false)?);
                }
                k
            }
            GemmKind::Conv { input, geometry, nhwc } => {
                self.f32_slots("a convolution", &[input, g.c.slot])?;
                if g.c.off != 0 || g.c.ld != w.rows || g.gate.is_some() || g.scale.is_some() {
                    return Err(Error::Config("a convolution writes dense channels-last rows, with a bias only".into()));
                }
                let k = if nhwc {
                    ops::Gemm::conv_nhwc(batch, geometry, buf(input), w, buf(g.c.slot))?
                } else {
                    ops::Gemm::conv(batch, geometry, buf(input), w, buf(g.c.slot))?
                };
                match g.bias {
                    Some(b) => k.bias(self.vector(b), Axis::N),
                    None => k,
                }
            }
        };
        if g.gelu {
            gemm = gemm.gelu();
        }
        if g.residual {
            gemm = gemm.residual();
        }
        Ok(gemm)
    }

    /// Times the GEMM kernels for each shape class of this batch size's GEMMs that the device
    /// has no choice for yet, and drops the plans built before, so the next forward pass uses
    /// the choices: the browser's autotuning (a plan is built synchronously there, and timing
    /// must wait for the GPU); natively the first plan build has tuned already. Returns the
    /// number of classes timed. Stops with [`Error::Cancelled`] at its next timing once
    /// `cancel` is set: the classes timed by then keep their choices (in the device's
    /// [`crate::gpu::tune::Tuning`]), the one in progress has none, and the plans stay.
    pub async fn autotune(&self, batch: usize, cancel: &Cancel) -> Result<usize> {
        let gpu = &self.gpu;
        if !gpu.tuning.enabled() {
            return Ok(0);
        }
        let slots = self.slot_buffers(batch, false)?;
        let mut timed = 0;
        for step in &self.steps {
            if let Step::Gemm(g) = step {
                timed += self.gemm(batch, g, &slots, None)?.tune_async(gpu, cancel).await? as usize;
            }
        }
        if timed > 0 {
            self.plans.lock().map_err(|_| Error::Gpu("plan cache poisoned".into()))?.clear();
        }
        Ok(timed)
    }

    /// Records one step as ops on this batch's slot buffers.
    fn record(
        &self,
        batch: usize,
        step: &Step,
        slots: &[wgpu::Buffer],
        mirrors: &HashMap<(Slot, usize, usize), ActTexture>,
        ops: &mut Vec<Op>,
        cancel: &Cancel,
    ) -> Result<()> {
        let gpu = &self.gpu;
        let buf = |s: Slot| &slots[s.index()];
        match step {
            Step::Gemm(g) => {
                let input = self.gemm_input(batch, g);
                let mirror = input.and_then(|key| mirrors.get(&key));
                if let (Some((slot, _, _)), Some(t)) = (input, mirror) {
                    // The texture must hold what the previous steps just wrote.
                    ops.push(Op::copy_to_texture(buf(slot), t)?);
                }
                ops.push(self.gemm(batch, g, slots, mirror)?.build_cancellable(gpu, cancel)?);
            }
            Step::LayerNorm { rows, d, eps, x, gamma, beta, y } => {
                self.f32_slots("a LayerNorm's output", &[*y])?;
                let x = Rows { buf: buf(x.slot), off: x.off, ld: x.ld, half: self.is_half(x.slot) };
                ops.push(ops::norm::layer_norm_rows(gpu, batch * rows, *d, *eps, x, self.vector(*gamma), self.vector(*beta), buf(*y))?);
            }
            Step::Affine { rows, d, x, alpha, beta, y } => {
                self.f32_slots("an Affine", &[*x, *y])?;
                ops.push(ops::norm::affine(gpu, batch * rows, *d, buf(*x), self.vector(*alpha), self.vector(*beta), buf(*y))?);
            }
            Step::GroupNorm { tokens, d, eps, x, gamma, beta, y } => {
                self.f32_slots("a GroupNorm", &[*x, *y])?;
                ops.push(ops::norm::group_norm(gpu, batch, *tokens, *d, *eps, buf(*x), self.vector(*gamma), self.vector(*beta), buf(*y))?);
            }
            Step::PoolMix { h, w, d, xn, scale, x } => {
                self.f32_slots("a pooling", &[*xn, *x])?;
                ops.push(ops::pool::pool_mix(gpu, batch, *h, *w, *d, buf(*xn), self.vector(*scale), buf(*x))?);
            }
            Step::MeanTokens { tokens, d, x, y } => {
                self.f32_slots("a mean over tokens", &[*x, *y])?;
                ops.push(ops::reduce::mean_tokens(gpu, batch, *tokens, *d, buf(*x), buf(*y))?);
            }
            // Recorded by the caller when the plan keeps snapshots.
            Step::Snapshot { .. } => {}
        }
        Ok(())
    }

    /// Runs `input` ([batch, C, H, W], preprocessed) through the net, in chunks of at most
    /// [`Self::max_batch`] images.
    pub async fn forward(&self, input: &[f32], cancel: &Cancel) -> Result<Output> {
        Ok(self.run_chunks(input, false, cancel).await?.0)
    }

    /// [`Self::forward`] with the evidence steps: also returns, per image, the
    /// [`Slot::Evidence`] and [`Slot::Pooled`] floats (see [`crate::net::Explain`]).
    pub async fn explain(&self, input: &[f32], cancel: &Cancel) -> Result<(Output, Vec<f32>, Vec<f32>)> {
        if self.explain_steps.is_empty() {
            return Err(Error::Config("this model has no per-token split of its logits".into()));
        }
        if self.widest_explain > self.gpu.binding_limit() {
            return Err(Error::Config(format!(
                "one image's class evidence needs {} bytes, over the adapter's binding limit of {} bytes",
                self.widest_explain,
                self.gpu.binding_limit()
            )));
        }
        self.run_chunks(input, true, cancel).await
    }

    /// Runs `input` in chunks as large as one binding holds; with `explain`, the evidence steps
    /// too, returning every image's [`Slot::Evidence`] and [`Slot::Pooled`] floats (else empty).
    /// `cancel` is checked before each chunk is submitted.
    async fn run_chunks(&self, input: &[f32], explain: bool, cancel: &Cancel) -> Result<(Output, Vec<f32>, Vec<f32>)> {
        let per = self.input;
        let total = input.len() / per.max(1);
        let classes = self.classes;
        let mut out = Output { classes, logits: Vec::with_capacity(total * classes), probs: Vec::with_capacity(total * classes) };
        let (mut evidence, mut pooled) = (Vec::new(), Vec::new());
        let widest = if explain { self.widest_explain } else { self.widest };
        let evidence_floats = self.slot_floats[1][Slot::Evidence.index()];
        for chunk in input.chunks(self.batch_limit(widest) * per) {
            let batch = chunk.len() / per;
            let plan = self.plan(batch, explain, cancel)?;
            cancel.check()?;
            let staging = self.submit(&plan, Some(chunk), None, false, None)?;
            // Logits, probabilities, then (explaining) the evidence and pooled slots, whole.
            let mut data = self.gpu.read_back(&staging).await?;
            let mut rest = data.split_off(2 * batch * classes);
            let probs = data.split_off(batch * classes);
            out.logits.extend(data);
            out.probs.extend(probs);
            if explain {
                pooled.extend(rest.split_off(batch * evidence_floats));
                evidence.extend(rest);
            }
        }
        Ok((out, evidence, pooled))
    }

    /// Records `prologue` (ops that write the plan's input) or uploads `input`, then the
    /// forward pass, and copies logits, probabilities and — for one `image` classified — the
    /// input (unless it was uploaded: the caller has it) and stage snapshots into a fresh
    /// staging buffer, returned for mapping. A fresh staging buffer per call keeps concurrent
    /// calls (the web's async classify) independent. `record`,
    /// if given, records the forward pass's ops in place of [`ops::encode_all`] (a profile's
    /// timed passes).
    fn submit(
        &self,
        plan: &Plan,
        input: Option<&[f32]>,
        prologue: Option<&Op>,
        image: bool,
        record: Option<&mut dyn FnMut(&mut wgpu::CommandEncoder)>,
    ) -> Result<wgpu::Buffer> {
        let gpu = &self.gpu;
        gpu.check()?;
        let n = (plan.batch * self.classes) as u64 * 4;
        let input_bytes = if image && input.is_none() { (plan.batch * self.input) as u64 * 4 } else { 0 };
        let snapshot = plan.stages.as_ref().filter(|_| image);
        let stage_bytes = snapshot.map_or(0, |st| st.size());
        // Explanations also bring back the evidence and the pooled vectors, whole slots.
        let extra: Vec<Slot> = if plan.explain { vec![Slot::Evidence, Slot::Pooled] } else { Vec::new() };
        let extra_bytes: u64 = extra.iter().map(|s| plan.slots[s.index()].size()).sum();
        let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("staging"),
            size: 2 * n + input_bytes + stage_bytes + extra_bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let slot = |s: Slot| &plan.slots[s.index()];
        if let Some(input) = input {
            gpu.queue.write_buffer(slot(Slot::Input), 0, bytemuck::cast_slice(input));
        }
        let mut encoder = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") });
        if let Some(op) = prologue {
            ops::encode_all(&mut encoder, std::slice::from_ref(op));
        }
        match record {
            Some(record) => record(&mut encoder),
            None => ops::encode_all(&mut encoder, &plan.ops),
        }
        encoder.copy_buffer_to_buffer(slot(Slot::Logits), 0, &staging, 0, n);
        encoder.copy_buffer_to_buffer(&plan.probs, 0, &staging, n, n);
        if input_bytes > 0 {
            encoder.copy_buffer_to_buffer(slot(Slot::Input), 0, &staging, 2 * n, input_bytes);
        }
        if let Some(st) = snapshot {
            encoder.copy_buffer_to_buffer(st, 0, &staging, 2 * n + input_bytes, stage_bytes);
        }
        let mut at = 2 * n + input_bytes + stage_bytes;
        for s in extra {
            let b = slot(s);
            encoder.copy_buffer_to_buffer(b, 0, &staging, at, b.size());
            at += b.size();
        }
        gpu.queue.submit([encoder.finish()]);
        Ok(staging)
    }

    /// One image, resampled where `resample` says: by `preprocess.wgsl` in the same
    /// submission as the forward pass, or on the CPU with the input uploaded. Returns the
    /// output, the model input, the stage snapshots and the timings.
    pub async fn classify_image(
        &self,
        pp: &Preprocess,
        image: Pixels<'_>,
        resample: Resample,
        now: fn() -> f64,
        cancel: &Cancel,
    ) -> Result<(Output, Vec<f32>, Vec<f32>, RunTimes)> {
        let t0 = now();
        let window = pp.prepare(image)?;
        let plan = self.plan(1, false, cancel)?;
        // The input resampled on the CPU is kept, not read back after its upload.
        let (staging, uploaded) = match resample {
            Resample::Gpu => {
                let op = ops::preprocess::window_to_input(&self.gpu, pp, &window, &plan.slots[Slot::Input.index()])?;
                cancel.check()?;
                (self.submit(&plan, None, Some(&op), true, None)?, None)
            }
            Resample::Cpu => {
                let input = super::cpu::window_to_input(pp, &window)?;
                cancel.check()?;
                (self.submit(&plan, Some(&input), None, true, None)?, Some(input))
            }
        };
        let t1 = now();
        self.gpu.map_read(&staging).await?;
        let t2 = now();
        let mut data = self.gpu.copy_mapped(&staging)?;
        let classes = self.classes;
        let mut rest = data.split_off(2 * classes);
        let (input, stages) = match uploaded {
            Some(input) => (input, rest),
            None => {
                let stages = rest.split_off(self.input);
                (rest, stages)
            }
        };
        let probs = data.split_off(classes);
        let t3 = now();
        let times = RunTimes { preprocess_ms: t1 - t0, forward_ms: t2 - t1, readback_ms: t3 - t2 };
        Ok((Output { classes, logits: data, probs }, input, stages, times))
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl GpuExec {
    /// The forward pass of `batch` images again on the input the last forward pass of that
    /// batch uploaded, which stays on the device: nothing is uploaded, the logits are read back.
    /// What a framework's timing with its input already on the GPU measures (`bench`'s
    /// `device_ms`, beside PyTorch's in `tools/bench_torch.py`). At most [`Self::max_batch`].
    pub fn rerun_resident(&self, batch: usize) -> Result<()> {
        if batch == 0 || batch > self.max_batch() {
            return Err(Error::Input(format!("a resident rerun takes 1 to {} images, not {batch}", self.max_batch())));
        }
        let plan = self.plan(batch, false, &Cancel::new())?;
        let staging = self.submit(&plan, None, None, false, None)?;
        pollster::block_on(self.gpu.read_back(&staging))?;
        Ok(())
    }

    /// One forward pass of `input` (at most [`Self::max_batch`] images) with GPU timestamps at
    /// the start and end of each step's work. Each step gets a compute pass of its own, so steps
    /// cannot overlap, as they may in [`Self::forward`]'s shared passes; copies are timed where
    /// the adapter allows timestamps outside passes, else counted as untimed.
    pub fn profile(&self, input: &[f32]) -> Result<(Output, super::Profile)> {
        let gpu = &self.gpu;
        let (passes, copies) = gpu.timestamps();
        if !passes {
            return Err(Error::Gpu(format!(
                "{} has no GPU timestamps (TIMESTAMP_QUERY), so its steps cannot be timed; the CPU executor can be (--backend cpu)",
                gpu.describe()
            )));
        }
        let batch = input.len() / self.input.max(1);
        let plan = self.plan(batch, false, &Cancel::new())?;
        let count = (2 * plan.ops.len()).clamp(2, wgpu::QUERY_SET_MAX_QUERIES as usize) as u32;
        let queries = gpu.device.create_query_set(&wgpu::QuerySetDescriptor { label: Some("profile"), ty: wgpu::QueryType::Timestamp, count });
        let bytes = count as u64 * wgpu::QUERY_SIZE as u64;
        let buffer =
            |label, usage| gpu.device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size: bytes, usage, mapped_at_creation: false });
        let resolved = buffer("profile resolve", wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC);
        let stamps = buffer("profile stamps", wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let mut timed = Vec::new();
        let staging = self.submit(
            &plan,
            Some(input),
            None,
            false,
            Some(&mut |encoder: &mut wgpu::CommandEncoder| {
                timed = ops::encode_timed(encoder, &plan.ops, &queries, copies);
                encoder.resolve_query_set(&queries, 0..count, &resolved, 0);
                encoder.copy_buffer_to_buffer(&resolved, 0, &stamps, 0, bytes);
            }),
        )?;
        let mut logits = pollster::block_on(gpu.read_back(&staging))?;
        let probs = logits.split_off(batch * self.classes);
        let ticks: Vec<u64> = pollster::block_on(gpu.read_back_bytes(&stamps))?
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect();
        let ns = gpu.queue.get_timestamp_period() as f64;
        let clock = if copies { "GPU timestamps, one pass per step, copies too" } else { "GPU timestamps, one pass per step" };
        let mut profile = super::Profile::new(batch, clock);
        let (mut first, mut last) = (u64::MAX, 0u64);
        for (i, ((op, kind), timed)) in plan.ops.iter().zip(&plan.kinds).zip(timed).enumerate() {
            if !timed {
                profile.untimed += 1;
                continue;
            }
            let (start, end) = (ticks[2 * i], ticks[2 * i + 1]);
            (first, last) = (first.min(start), last.max(end));
            profile.add(kind, &op.kernel(), end.saturating_sub(start) as f64 * ns / 1e6);
        }
        profile.span_ms = last.saturating_sub(first) as f64 * ns / 1e6;
        Ok((Output { classes: self.classes, logits, probs }, profile))
    }

    /// Runs the steps once for `batch` images with the given slot contents (the rest zero) and
    /// returns every slot afterwards, in [`Slot::ALL`] order (see `CpuExec::run_slots`).
    pub fn run_slots(&self, batch: usize, inputs: &[(Slot, Vec<f32>)]) -> Result<Vec<Vec<f32>>> {
        let plan = self.plan(batch, false, &Cancel::new())?;
        // f16 slots take and give f32 values, rounded to f16 and widened.
        for (&slot, b) in Slot::ALL.iter().zip(&plan.slots) {
            let given = inputs.iter().find(|(s, _)| *s == slot).map_or(&[][..], |(_, d)| &d[..]);
            self.gpu.write_all(b, given, self.precision_of(slot))?;
        }
        self.gpu.run_ops(&plan.ops)?;
        Slot::ALL.iter().zip(&plan.slots).map(|(&s, b)| pollster::block_on(self.gpu.read_all(b, self.precision_of(s)))).collect()
    }
}
