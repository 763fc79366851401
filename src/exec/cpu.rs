//! The CPU executor: runs a [`Net`] where the GPU is software or missing. GEMMs go natively to
//! `matrixmultiply` (SIMD microkernels: AVX2/FMA, AVX-512, NEON; threads) and, for one image's
//! rows, to `gemm` (see `sgemm`), and in wasm to tokenmix's own simd128 kernel (`gemm128`); all
//! take any row and column stride, so Linear layers read PyTorch's [out, in] weights transposed
//! in place, token mixing reads the activations in their own layout and convolutions run on an
//! im2col copy. Epilogues, norms, pooling and reductions are
//! plain loops over contiguous rows that the compiler vectorises; GELU is the exact erf.
//!
//! Weights are f32 from load on; activations live in a per-batch `Workspace` made once and
//! reused, so a forward pass allocates nothing but its outputs.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::net::{ConvGeometry, Gemm, GemmKind, Net, Slot, SlotSizes, Step};
use crate::preprocess::{Pixels, Preprocess, Window};

use super::{Cancel, Output, Profile, RunTimes, MAX_BATCH};

/// The GEMMs the CPU executor uses here (see `sgemm` in this module's source).
#[cfg(not(target_arch = "wasm32"))]
pub const GEMM_NAME: &str = "gemm+matrixmultiply";
#[cfg(target_arch = "wasm32")]
pub const GEMM_NAME: &str = "gemm128 4x8";

/// The CPU as a device: its thread count and SIMD level, for reports.
#[derive(Clone, Debug)]
pub struct Cpu {
    pub threads: usize,
}

impl Default for Cpu {
    fn default() -> Self {
        Self::new()
    }
}

impl Cpu {
    pub fn new() -> Cpu {
        #[cfg(not(target_arch = "wasm32"))]
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        // In wasm: the pool `initThreadPool` started in the threaded build (one thread until
        // then), else one.
        #[cfg(all(target_arch = "wasm32", feature = "threads"))]
        let threads = rayon::current_num_threads();
        #[cfg(all(target_arch = "wasm32", not(feature = "threads")))]
        let threads = 1;
        Cpu { threads }
    }

    /// The SIMD instructions the GEMM kernels can use on this machine.
    pub fn simd() -> &'static str {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                return "avx512";
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return "avx2+fma";
            }
            return "sse2";
        }
        #[cfg(target_arch = "aarch64")]
        return "neon";
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        return "wasm simd128";
        #[allow(unreachable_code)]
        "scalar"
    }

    pub fn describe(&self) -> String {
        format!("CPU: {} thread{}, {} ({GEMM_NAME})", self.threads, if self.threads == 1 { "" } else { "s" }, Self::simd())
    }
}

/// Activations for one batch size.
struct Workspace {
    batch: usize,
    /// Sized for the evidence steps too.
    explain: bool,
    slots: Vec<Vec<f32>>,
    /// A GEMM's product before its epilogue, and im2col columns.
    scratch: Vec<f32>,
    cols: Vec<f32>,
    /// Each stage's output of the last image (nets with snapshots).
    stages: Vec<f32>,
    /// Where the next snapshot goes in `stages` (a pass in slices resumes mid-way).
    stage_at: usize,
    /// The blocks of a GEMM step done where a pass in slices paused inside it (see
    /// [`Slices::gemm_macs`]).
    gemm_at: usize,
    /// The A operand shared by the calls of one GEMM step.
    shared_a: SharedA,
}

impl Workspace {
    /// Readies the workspace for a pass from its first step (a stopped pass in slices may have
    /// left its place in the stage snapshots or in a GEMM).
    fn begin(&mut self) {
        self.stage_at = 0;
        self.gemm_at = 0;
    }
}

/// How a pass gives its thread back between steps, on a thread that must not be held for a
/// whole pass: the browser's one-thread build, where the event loop must run for an abort to
/// be read at all, and where a page's own thread (`worker: false`) would freeze. After a step,
/// or a block of a large GEMM's columns, once `every_ms` have passed by `clock` since the
/// slice began, the pass awaits `pause()` and goes on from there: the same products on the
/// same workspace, so the same bits.
#[derive(Clone, Copy)]
pub struct Slices {
    pub every_ms: f64,
    pub clock: fn() -> f64,
    pub pause: fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
    /// The most multiply-adds a GEMM runs between two looks at the clock: a larger one runs in
    /// blocks of its output's columns (of whole tiles of the wasm kernel, 8 wide, where a
    /// block is narrower than the output), each the same sums as in one piece. Without it a
    /// step is the unit, and one GEMM (`mixer_s16_224`'s channel MLP: 40 ms in one wasm
    /// thread) held the thread whole.
    pub gemm_macs: usize,
}

impl Slices {
    /// Awaits a pause once the slice that began at `began` (by `clock`) has run `every_ms`,
    /// and starts the next one: for work that looks at the clock between pieces of its own.
    pub async fn pause_if_due(&self, began: &mut f64) {
        if (self.clock)() - *began >= self.every_ms {
            (self.pause)().await;
            *began = (self.clock)();
        }
    }
}

pub struct CpuExec {
    net: Net,
    /// Per-image slot sizes without and with the evidence steps.
    slot_floats: [SlotSizes; 2],
    /// [`Net::widest_slot_bytes`].
    widest: u64,
    /// The multiply-adds of the net's largest GEMM for one image.
    #[cfg_attr(all(target_arch = "wasm32", not(feature = "threads")), allow(dead_code))] // one thread: no pool
    largest_gemm: usize,
    work: Mutex<HashMap<(usize, bool), Workspace>>,
}

impl CpuExec {
    pub fn new(net: Net) -> Result<CpuExec> {
        let slot_floats = [net.slot_floats(false), net.slot_floats(true)];
        for step in net.steps_for(true) {
            if let Step::Gemm(g) = step {
                let reads = match g.kind {
                    GemmKind::Linear { a, .. } => a.slot,
                    GemmKind::Tokens { x, .. } => x.slot,
                    GemmKind::Conv { input, .. } => input,
                };
                if reads == g.c.slot || g.gate.is_some_and(|v| v.slot == g.c.slot) {
                    return Err(Error::Config(format!("a GEMM with `{}` reads the slot it writes", net.weight(g.w).name)));
                }
            }
        }
        let widest = net.widest_slot_bytes(false);
        let largest_gemm = net
            .steps_for(true)
            .filter_map(|s| match s {
                Step::Gemm(g) => Some(net.gemm_dims(g)),
                _ => None,
            })
            .map(|(m, n, k)| m.saturating_mul(n).saturating_mul(k))
            .max()
            .unwrap_or(0);
        let exec = CpuExec { net, slot_floats, widest, largest_gemm, work: Mutex::default() };
        // Like the GPU executor, make the batch-1 workspace at load.
        exec.with_workspace(1, false, |_| Ok(()))?;
        Ok(exec)
    }

    pub fn widest_activation_bytes(&self) -> u64 {
        self.widest
    }

    pub fn max_batch(&self) -> usize {
        MAX_BATCH
    }

    fn with_workspace<T>(&self, batch: usize, explain: bool, f: impl FnOnce(&mut Workspace) -> Result<T>) -> Result<T> {
        let mut work = self.work.lock().map_err(|_| Error::Input("CPU workspace poisoned by an earlier failure".into()))?;
        let key = (batch, explain);
        if !work.contains_key(&key) {
            // Keep at most the batch-1 workspaces and one other, so a long eval does not pile up.
            work.retain(|&(b, _), _| b == 1);
            work.insert(key, self.workspace(batch, explain));
        }
        let ws = work.get_mut(&key).ok_or_else(|| Error::Input("no workspace".into()))?;
        f(ws)
    }

    fn workspace(&self, batch: usize, explain: bool) -> Workspace {
        let mut scratch = 0;
        let mut cols = 0;
        for step in self.net.steps_for(explain) {
            if let Step::Gemm(g) = step {
                let (m, n, k) = self.net.gemm_dims(g);
                scratch = scratch.max(batch * m * n);
                if matches!(g.kind, GemmKind::Conv { .. }) {
                    cols = cols.max(batch * m * k);
                }
            }
        }
        let stages = self.net.stages.iter().map(|((h, w), d)| h * w * d).sum();
        Workspace {
            batch,
            explain,
            slots: self.slot_floats[explain as usize].iter().map(|&n| vec![0f32; batch * n.max(1)]).collect(),
            scratch: vec![0f32; scratch],
            cols: vec![0f32; cols],
            stages: vec![0f32; stages],
            stage_at: 0,
            gemm_at: 0,
            shared_a: SharedA::default(),
        }
    }

    /// The cached workspace for (`batch`, `explain`) taken out of the cache, or a new one: a
    /// pass in slices holds it across its pauses, when another call may run a pass of its own.
    fn take_workspace(&self, batch: usize, explain: bool) -> Result<Workspace> {
        let mut work = self.work.lock().map_err(|_| Error::Input("CPU workspace poisoned by an earlier failure".into()))?;
        Ok(work.remove(&(batch, explain)).unwrap_or_else(|| self.workspace(batch, explain)))
    }

    /// Puts a workspace taken with [`Self::take_workspace`] back, unless another has taken
    /// its place meanwhile (as [`Self::with_workspace`] keeps them).
    fn put_workspace(&self, ws: Workspace) {
        if let Ok(mut work) = self.work.lock() {
            let key = (ws.batch, ws.explain);
            if !work.contains_key(&key) {
                work.retain(|&(b, _), _| b == 1);
                work.insert(key, ws);
            }
        }
    }

    /// Runs `input` ([batch, C, H, W], preprocessed) through the net; stops at the first step
    /// after `cancel` is set. With `slices`, in slices (see [`Slices`]); else it never awaits.
    pub async fn forward(&self, input: &[f32], cancel: &Cancel, slices: Option<&Slices>) -> Result<Output> {
        Ok(self.run_chunks(input, &[], cancel, slices, None).await?.0)
    }

    /// [`Self::forward`] with the evidence steps: also returns, per image, the
    /// [`Slot::Evidence`] and [`Slot::Pooled`] floats (see [`crate::net::Explain`]).
    pub async fn explain(&self, input: &[f32], cancel: &Cancel, slices: Option<&Slices>) -> Result<(Output, Vec<f32>, Vec<f32>)> {
        if self.net.explain.is_none() {
            return Err(Error::Config("this model has no per-token split of its logits".into()));
        }
        // The evidence (tokens x classes an image) is not bounded at load as the forward pass's
        // activations are; the GPU executor refuses it past its binding limit, this one past
        // the same bound as those activations.
        let widest = self.net.widest_slot_bytes(true);
        let bound = crate::models::inspect::MAX_ACTIVATION_BYTES;
        if widest > bound {
            return Err(Error::Config(format!("one image's class evidence needs {widest} bytes, over tokenmix's {bound}-byte bound")));
        }
        let (out, mut kept) = self.run_chunks(input, &[Slot::Evidence, Slot::Pooled], cancel, slices, None).await?;
        let pooled = kept.pop().unwrap_or_default();
        Ok((out, kept.pop().unwrap_or_default(), pooled))
    }

    /// Runs `input` in chunks of at most [`MAX_BATCH`] images; with `keep` slots, the evidence
    /// steps too, returning each kept slot's per-image floats for all images; with `stages`,
    /// copies the last image's stage snapshots there. Without `slices` a chunk runs on the
    /// cached workspace (on rayon's pool, see [`Self::run`]); with them it takes that workspace
    /// out of the cache for as long as it runs, so that a pass interleaved at the pauses gets
    /// one of its own.
    async fn run_chunks(
        &self,
        input: &[f32],
        keep: &[Slot],
        cancel: &Cancel,
        slices: Option<&Slices>,
        mut stages: Option<&mut Vec<f32>>,
    ) -> Result<(Output, Vec<Vec<f32>>)> {
        let per = self.net.input;
        let classes = self.net.classes;
        let explain = !keep.is_empty();
        let floats = &self.slot_floats[explain as usize];
        let total = input.len() / per.max(1);
        let mut out = Output { classes, logits: Vec::with_capacity(total * classes), probs: Vec::with_capacity(total * classes) };
        let mut kept = vec![Vec::new(); keep.len()];
        let mut gather = |ws: &Workspace| {
            let logits = &ws.slots[Slot::Logits.index()][..ws.batch * classes];
            out.logits.extend_from_slice(logits);
            for row in logits.chunks(classes) {
                softmax(row, &mut out.probs);
            }
            for (k, s) in kept.iter_mut().zip(keep) {
                k.extend_from_slice(&ws.slots[s.index()][..ws.batch * floats[s.index()]]);
            }
            if let Some(s) = stages.as_deref_mut() {
                s.clone_from(&ws.stages);
            }
        };
        for chunk in input.chunks(MAX_BATCH * per) {
            let batch = chunk.len() / per;
            let Some(slices) = slices else {
                self.with_workspace(batch, explain, |ws| {
                    ws.slots[Slot::Input.index()][..chunk.len()].copy_from_slice(chunk);
                    self.run(ws, None, Some(cancel))?;
                    gather(ws);
                    Ok(())
                })?;
                continue;
            };
            let mut ws = self.take_workspace(batch, explain)?;
            ws.slots[Slot::Input.index()][..chunk.len()].copy_from_slice(chunk);
            ws.begin();
            let mut from = 0;
            let ran = loop {
                let began = (slices.clock)();
                let mut due = || (slices.clock)() - began >= slices.every_ms;
                match self.steps_from(&mut ws, from, None, Some(cancel), slices.gemm_macs, &mut due) {
                    Ok(Some(next)) => {
                        from = next;
                        (slices.pause)().await;
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                }
            };
            if ran.is_ok() {
                gather(&ws);
            }
            // (A stopped pass leaves a workspace as good as a finished one: every step writes
            // its output before any step reads it.)
            self.put_workspace(ws);
            ran?;
        }
        Ok((out, kept))
    }

    /// One image: preprocessing on the CPU (the same resampling as `preprocess.wgsl`), then
    /// the forward pass (in `slices`, where given). Returns the output, the model input, the
    /// stage snapshots and the timings.
    pub async fn classify_image(
        &self,
        pp: &Preprocess,
        image: Pixels<'_>,
        now: fn() -> f64,
        cancel: &Cancel,
        slices: Option<&Slices>,
    ) -> Result<(Output, Vec<f32>, Vec<f32>, RunTimes)> {
        let t0 = now();
        let window = pp.prepare(image)?;
        let input = window_to_input(pp, &window)?;
        let t1 = now();
        let mut stages = Vec::new();
        let (out, _) = self.run_chunks(&input, &[], cancel, slices, Some(&mut stages)).await?;
        let t2 = now();
        Ok((out, input, stages, RunTimes { preprocess_ms: t1 - t0, forward_ms: t2 - t1, readback_ms: 0.0 }))
    }

    /// Runs the workspace's steps on one of rayon's threads. Called from a thread outside the
    /// pool (the CLI's main thread; in the threaded wasm build the page's worker, whose pool is
    /// other Web Workers), rayon would hand every parallel loop to the pool and block the caller
    /// until it ends: two cross-thread wake-ups per loop, which in the browser (Atomics.wait and
    /// notify) cost about 0.1 ms each time, hundreds of times per forward pass, and left one
    /// worker's work on a thread whose caches had not seen the data. Inside the pool a loop's
    /// halves go to the local queue and an idle worker steals one. A net too small for any of
    /// its GEMMs to be split (the Fashion-MNIST models at batch 1) stays on the caller, which
    /// saves the one hand-over to the pool and back.
    fn run(&self, ws: &mut Workspace, profile: Option<&mut Profile>, cancel: Option<&Cancel>) -> Result<()> {
        #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
        if rayon::current_thread_index().is_none() && ws.batch.saturating_mul(self.largest_gemm) >= split::macs() {
            return rayon::scope(|_| self.run_steps(ws, profile, cancel));
        }
        self.run_steps(ws, profile, cancel)
    }

    /// Runs the workspace's steps; with `profile` (natively also with `TOKENMIX_CPU_PROFILE=1`,
    /// which prints it) times each; with `cancel`, checks it before each.
    fn run_steps(&self, ws: &mut Workspace, profile: Option<&mut Profile>, cancel: Option<&Cancel>) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        let mut printed = (profile.is_none() && *PROFILE).then(|| Profile::new(ws.batch, CLOCK));
        #[cfg(target_arch = "wasm32")]
        let mut printed: Option<Profile> = None;
        let mut profile = profile.or(printed.as_mut());
        let run_started = profile.is_some().then(crate::gpu::clock_ms);
        ws.begin();
        self.steps_from(ws, 0, profile.as_deref_mut(), cancel, usize::MAX, &mut || false)?;
        if let (Some(p), Some(t)) = (profile, run_started) {
            p.span_ms = crate::gpu::clock_ms() - t;
        }
        if let Some(p) = printed {
            eprintln!("cpu {}", p.lines().join("\n"));
        }
        Ok(())
    }

    /// Runs the workspace's steps from step `from` on; with `profile` times each; with
    /// `cancel`, checks it before each. Returns `Some(i)` where `pause()`, asked after each
    /// step but the last and after each block of a GEMM of more than `gemm_macs`, said to stop
    /// before step `i` or in it (`ws.gemm_at`): a pass in slices goes on from there. A pass
    /// begins with [`Workspace::begin`].
    fn steps_from(
        &self,
        ws: &mut Workspace,
        from: usize,
        mut profile: Option<&mut Profile>,
        cancel: Option<&Cancel>,
        gemm_macs: usize,
        pause: &mut dyn FnMut() -> bool,
    ) -> Result<Option<usize>> {
        // The clock is read only while profiling.
        let timing = profile.is_some();
        let clock = || timing.then(crate::gpu::clock_ms);
        for (i, step) in self.net.steps_for(ws.explain).enumerate().skip(from) {
            if i > from && pause() {
                return Ok(Some(i));
            }
            if let Some(c) = cancel {
                c.check()?;
            }
            let started = clock();
            match step {
                Step::Gemm(g) => {
                    let first = if i == from { std::mem::take(&mut ws.gemm_at) } else { 0 };
                    if let Some(next) = self.gemm(ws, g, first, gemm_macs, pause)? {
                        ws.gemm_at = next;
                        return Ok(Some(i));
                    }
                }
                Step::LayerNorm { rows, d, eps, x, gamma, beta, y } => {
                    let (gamma, beta) = (&self.net.weight(*gamma).data, &self.net.weight(*beta).data);
                    let mut out = std::mem::take(&mut ws.slots[y.index()]);
                    let src = &ws.slots[x.slot.index()];
                    let n = ws.batch * rows;
                    let fits = n == 0 || src.len() >= x.off + (n - 1) * x.ld + d;
                    if fits {
                        let (xv, d, eps) = (*x, *d, *eps);
                        for_rows(&mut out[..n * d], d, |r, o| layer_norm(&src[xv.off + r * xv.ld..][..d], o, gamma, beta, eps));
                    }
                    ws.slots[y.index()] = out;
                    if !fits {
                        return Err(overrun("layer norm input"));
                    }
                }
                Step::Affine { rows, d, x, alpha, beta, y } => {
                    let (alpha, beta) = (&self.net.weight(*alpha).data, &self.net.weight(*beta).data);
                    let n = ws.batch * rows * d;
                    let mut out = std::mem::take(&mut ws.slots[y.index()]);
                    let (src, d) = (&ws.slots[x.index()][..n], *d);
                    for_rows(&mut out[..n], d, |r, o| {
                        for (((o, x), a), b) in o.iter_mut().zip(&src[r * d..][..d]).zip(alpha).zip(beta) {
                            *o = a * x + b;
                        }
                    });
                    ws.slots[y.index()] = out;
                }
                Step::GroupNorm { tokens, d, eps, x, gamma, beta, y } => {
                    let (gamma, beta) = (&self.net.weight(*gamma).data, &self.net.weight(*beta).data);
                    let per = tokens * d;
                    let mut out = std::mem::take(&mut ws.slots[y.index()]);
                    for b in 0..ws.batch {
                        let img = &ws.slots[x.index()][b * per..(b + 1) * per];
                        group_norm(img, &mut out[b * per..(b + 1) * per], *d, gamma, beta, *eps);
                    }
                    ws.slots[y.index()] = out;
                }
                Step::PoolMix { h, w, d, xn, scale, x } => {
                    let scale = &self.net.weight(*scale).data;
                    let per = h * w * d;
                    let mut dst = std::mem::take(&mut ws.slots[x.index()]);
                    for b in 0..ws.batch {
                        let src = &ws.slots[xn.index()][b * per..(b + 1) * per];
                        pool_mix(src, &mut dst[b * per..(b + 1) * per], (*h, *w, *d), scale);
                    }
                    ws.slots[x.index()] = dst;
                }
                Step::MeanTokens { tokens, d, x, y } => {
                    let per = tokens * d;
                    let mut out = std::mem::take(&mut ws.slots[y.index()]);
                    for b in 0..ws.batch {
                        let img = &ws.slots[x.index()][b * per..(b + 1) * per];
                        let o = &mut out[b * d..(b + 1) * d];
                        o.fill(0.0);
                        for t in img.chunks(*d) {
                            for (a, v) in o.iter_mut().zip(t) {
                                *a += v;
                            }
                        }
                        let inv = 1.0 / *tokens as f32;
                        o.iter_mut().for_each(|v| *v *= inv);
                    }
                    ws.slots[y.index()] = out;
                }
                Step::Snapshot { x, floats } => {
                    // The last image's stage output (batch-1 runs are the page's).
                    let b = ws.batch - 1;
                    let src = &ws.slots[x.index()][b * floats..(b + 1) * floats];
                    let at = ws.stage_at;
                    ws.stages[at..at + floats].copy_from_slice(src);
                    ws.stage_at += floats;
                }
            }
            if let (Some(p), Some(t)) = (profile.as_deref_mut(), started) {
                p.add(&self.net.step_kind(step), "", crate::gpu::clock_ms() - t);
            }
        }
        Ok(None)
    }

    /// One forward pass of `input` (at most [`MAX_BATCH`] images) with every step timed.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn profile(&self, input: &[f32]) -> Result<(Output, Profile)> {
        let batch = input.len() / self.net.input.max(1);
        let classes = self.net.classes;
        let mut profile = Profile::new(batch, CLOCK);
        let mut out = Output { classes, logits: Vec::new(), probs: Vec::new() };
        self.with_workspace(batch, false, |ws| {
            ws.slots[Slot::Input.index()][..input.len()].copy_from_slice(input);
            self.run(ws, Some(&mut profile), None)?;
            out.logits.extend_from_slice(&ws.slots[Slot::Logits.index()][..batch * classes]);
            Ok(())
        })?;
        for row in out.logits.chunks(classes) {
            softmax(row, &mut out.probs);
        }
        Ok((out, profile))
    }

    /// GEMM step `g` from its block `first` on. A block is a run of C's columns (for token
    /// mixing, of one image's) of at most `gemm_macs` multiply-adds, at least one tile wide;
    /// returns `Some(b)` where `pause()`, asked after each block but the last, said to stop
    /// before block `b`.
    fn gemm(&self, ws: &mut Workspace, g: &Gemm, first: usize, gemm_macs: usize, pause: &mut dyn FnMut() -> bool) -> Result<Option<usize>> {
        let (m, n, k) = self.net.gemm_dims(g);
        let tokens = matches!(g.kind, GemmKind::Tokens { .. });
        // Token mixing runs one image at a time; the other kinds every image's rows at once.
        let (images, rows) = if tokens { (ws.batch, m) } else { (1, ws.batch * m) };
        let per_column = rows.saturating_mul(k).max(1);
        let width = match gemm_macs / per_column {
            w if w >= n => n,
            w => w.max(1).next_multiple_of(BLOCK_COLUMNS).min(n),
        };
        let blocks = n.div_ceil(width.max(1)).max(1);
        if first == 0 {
            if let GemmKind::Conv { input, geometry, nhwc } = g.kind {
                // im2col checks that the columns hold rows x k.
                im2col(&ws.slots[input.index()], ws.batch, &geometry, nhwc, &mut ws.cols)?;
            }
        }
        let calls = images * blocks;
        for at in first..calls {
            if at > first && pause() {
                return Ok(Some(at));
            }
            let (image, j0) = (at / blocks, (at % blocks) * width);
            // Calls that share A read it as the first packed it (through pauses too: a pass in
            // slices holds its workspace, and no step runs before this one's last block).
            let a_use = match (calls, at) {
                (1, _) => AUse::Own,
                (_, 0) => AUse::Pack,
                _ => AUse::Packed,
            };
            self.gemm_block(ws, g, image, j0..n.min(j0 + width), a_use)?;
        }
        Ok(None)
    }

    /// Columns `cols` of GEMM step `g`'s output: of every image's rows at once, or for token
    /// mixing of image `image`'s; A taken as `a_use` says.
    fn gemm_block(&self, ws: &mut Workspace, g: &Gemm, image: usize, cols: std::ops::Range<usize>, a_use: AUse) -> Result<()> {
        let (m, n, k) = self.net.gemm_dims(g);
        let (j0, nb) = (cols.start, cols.len());
        let w = &self.net.weight(g.w).data;
        let batch = ws.batch;
        let bias_per_row = matches!(g.kind, GemmKind::Tokens { .. });
        let epi = Epilogue {
            // A bias and a scale per column are this block's columns of them.
            bias: g.bias.map(|b| &self.net.weight(b).data[..]).map(|b| if bias_per_row { b } else { &b[cols.clone()] }),
            bias_per_row,
            scale: g.scale.map(|s| &self.net.weight(s).data[cols.clone()]),
            gelu: g.gelu,
            residual: g.residual,
        };
        let mut c = std::mem::take(&mut ws.slots[g.c.slot.index()]);
        let mut scratch = std::mem::take(&mut ws.scratch);
        let result = (|| -> Result<()> {
            let cv = g.c;
            match g.kind {
                GemmKind::Linear { .. } | GemmKind::Conv { .. } => {
                    // Every image's rows at once. A: the activations, or a convolution's im2col columns.
                    let rows = batch * m;
                    let (a, lda): (&[f32], usize) = match g.kind {
                        GemmKind::Conv { .. } => (&ws.cols[..], k),
                        GemmKind::Linear { a, .. } => (rows_at(&ws.slots[a.slot.index()], a.off, rows, k, a.ld, "GEMM A")?, a.ld),
                        GemmKind::Tokens { .. } => unreachable!(),
                    };
                    let gate = g
                        .gate
                        .map(|v| Ok::<_, Error>((rows_at(&ws.slots[v.slot.index()], v.off + j0, rows, nb, v.ld, "GEMM gate")?, v.ld)))
                        .transpose()?;
                    let cs = rows_at_mut(&mut c, cv.off + j0, rows, nb, cv.ld, "GEMM C")?;
                    // W is [n, k]: column j of B is its row j.
                    let wb = &w[j0 * k..];
                    let shared = &mut ws.shared_a;
                    epi.apply(cs, cv.ld, rows, nb, gate, &mut scratch, |out, ld, acc| {
                        shared.sgemm(a_use, rows, k, nb, a, (lda, 1), wb, (1, k), out, ld, acc)
                    });
                }
                GemmKind::Tokens { x, .. } => {
                    // One image: C[b] = W · X[b].
                    let b = image;
                    let xs = rows_at(&ws.slots[x.slot.index()], x.off + b * x.bs + j0, k, nb, x.ld, "token-mixing input")?;
                    let gate = g
                        .gate
                        .map(|v| Ok::<_, Error>((rows_at(&ws.slots[v.slot.index()], v.off + b * v.bs + j0, m, nb, v.ld, "GEMM gate")?, v.ld)))
                        .transpose()?;
                    let cs = rows_at_mut(&mut c, cv.off + b * cv.bs + j0, m, nb, cv.ld, "token-mixing output")?;
                    let shared = &mut ws.shared_a;
                    epi.apply(cs, cv.ld, m, nb, gate, &mut scratch, |out, ld, acc| {
                        shared.sgemm(a_use, m, k, nb, w, (k, 1), xs, (x.ld, 1), out, ld, acc)
                    });
                }
            }
            debug_assert!(n >= j0 + nb);
            Ok(())
        })();
        ws.slots[g.c.slot.index()] = c;
        ws.scratch = scratch;
        result
    }
}

/// How one of a GEMM step's calls (its blocks of columns, token mixing's images) takes A.
#[derive(Clone, Copy)]
enum AUse {
    /// The step's only call.
    Own,
    /// The first of several: packs A for the others.
    Pack,
    /// A later one: reads the first's packing.
    Packed,
}

/// A GEMM step's A operand packed once for all its calls. In wasm, `gemm128` would otherwise
/// pack all of A again for each block of C's columns (a full-size Mixer's `fc2` in the
/// one-thread build: 6 blocks of 2048 x 196 values) and for each image of token mixing (the
/// same weights); natively the GEMM crates pack their operands themselves, and this holds
/// nothing.
#[derive(Default)]
struct SharedA {
    #[cfg(target_arch = "wasm32")]
    packed: super::gemm128::PackedA,
}

impl SharedA {
    /// [`sgemm`] for one of a step's calls, A taken as `a_use` says. The same bits either way.
    #[allow(clippy::too_many_arguments)]
    fn sgemm(
        &mut self,
        a_use: AUse,
        m: usize,
        k: usize,
        n: usize,
        a: &[f32],
        sa: (usize, usize),
        b: &[f32],
        sb: (usize, usize),
        c: &mut [f32],
        ldc: usize,
        accumulate: bool,
    ) {
        #[cfg(target_arch = "wasm32")]
        {
            // A packing of other extents is never read (a step's calls share m and k).
            if matches!(a_use, AUse::Pack) || (matches!(a_use, AUse::Packed) && self.packed.dims() != (m, k)) {
                self.packed.pack(m, k, a, sa);
            }
            if !matches!(a_use, AUse::Own) {
                return super::gemm128::sgemm_packed(&self.packed, n, b, sb, c, ldc, accumulate);
            }
        }
        #[cfg(not(target_arch = "wasm32"))]
        let _ = a_use;
        sgemm(m, k, n, a, sa, b, sb, c, ldc, accumulate)
    }
}

/// A GEMM run in blocks of columns ([`Slices::gemm_macs`]) has blocks a multiple of this wide
/// (but the last): whole 8-wide tiles of the wasm kernel (`gemm128::NR`).
const BLOCK_COLUMNS: usize = 8;

/// What follows a GEMM's product (see [`crate::net::Gemm`]).
struct Epilogue<'a> {
    bias: Option<&'a [f32]>,
    /// The bias has one value per row of C (token mixing) rather than per column.
    bias_per_row: bool,
    scale: Option<&'a [f32]>,
    gelu: bool,
    residual: bool,
}

impl Epilogue<'_> {
    fn row_bias(&self, r: usize) -> Bias<'_> {
        match self.bias {
            None => Bias::None,
            Some(b) if self.bias_per_row => Bias::Row(b[r]),
            Some(b) => Bias::Columns(b),
        }
    }

    /// C (`m` rows of `n`, row stride `ldc`, checked to fit) (+)= this epilogue of the product
    /// that `product(out, ld, accumulate)` computes. With nothing but a bias (and the residual)
    /// after the product, the bias goes into C first and the GEMM accumulates onto it; else the
    /// product goes to `scratch` and the epilogue combines it into C row by row.
    fn apply(
        &self,
        c: &mut [f32],
        ldc: usize,
        m: usize,
        n: usize,
        gate: Option<(&[f32], usize)>,
        scratch: &mut [f32],
        product: impl FnOnce(&mut [f32], usize, bool),
    ) {
        let c = &mut c[..(m - 1) * ldc + n];
        if self.scale.is_none() && !self.gelu && gate.is_none() {
            if self.bias.is_some() {
                for_rows(c, ldc, |r, out| {
                    let out = &mut out[..n];
                    match (self.row_bias(r), self.residual) {
                        (Bias::Columns(b), true) => out.iter_mut().zip(b).for_each(|(o, b)| *o += b),
                        (Bias::Columns(b), false) => out.copy_from_slice(b),
                        (Bias::Row(b), true) => out.iter_mut().for_each(|o| *o += b),
                        (Bias::Row(b), false) => out.fill(b),
                        (Bias::None, _) => {}
                    }
                });
            }
            product(c, ldc, self.residual || self.bias.is_some());
            return;
        }
        let prod = &mut scratch[..m * n];
        product(prod, n, false);
        let prod = &*prod;
        for_rows(c, ldc, |r, out| {
            let gate_row = gate.map(|(gs, ld)| &gs[r * ld..r * ld + n]);
            epilogue_row(&prod[r * n..(r + 1) * n], &mut out[..n], self.row_bias(r), self.scale, self.gelu, gate_row, self.residual);
        });
    }
}

/// `TOKENMIX_CPU_PROFILE=1`: print the time spent in each kind of step after every forward.
#[cfg(not(target_arch = "wasm32"))]
static PROFILE: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| crate::env::env().cpu_profile);

/// How the CPU executor's [`Profile`] times steps.
#[cfg(not(target_arch = "wasm32"))]
const CLOCK: &str = "CPU wall clock per step";

/// The least work the executor splits over threads: a loop over `floats()` floats, a wasm GEMM
/// of `macs()` multiply-adds (`gemm128`). Below, waking the pool costs more than it saves. In
/// the threaded wasm build each wake-up is a Web Worker returning from `Atomics.wait`: with 16 Ki
/// floats and 64 Ki multiply-adds the Fashion-MNIST models ran up to 2x slower on two threads
/// than on one; with 32 Ki and 4 Mi as fast, and the timm-size models as fast as before
/// (`tests/browser/bench.mjs --threads 2`, builds alternating). Atomics so that tests can split
/// everything ([`split_everything`]).
#[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
pub(crate) mod split {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    static FLOATS: AtomicUsize = AtomicUsize::new(if cfg!(target_arch = "wasm32") { 1 << 15 } else { 1 << 14 });
    static MACS: AtomicUsize = AtomicUsize::new(1 << 22);

    pub fn floats() -> usize {
        FLOATS.load(Relaxed)
    }

    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    pub fn macs() -> usize {
        MACS.load(Relaxed)
    }

    pub fn everything() {
        FLOATS.store(0, Relaxed);
        MACS.store(0, Relaxed);
    }
}

/// Tests only: from now on split every loop and GEMM over the pool that the executor can, so
/// that small golden models run through every parallel path (the threaded wasm suite).
#[doc(hidden)]
#[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
pub fn split_everything() {
    split::everything();
}

/// `f(r, row)` for each `ld`-strided row of `out` (the last may be shorter, down to the
/// `width` a caller touches): on rayon's pool natively and in the threaded wasm build, in
/// order in the other wasm build (one thread).
fn for_rows(out: &mut [f32], ld: usize, f: impl Fn(usize, &mut [f32]) + Sync + Send) {
    #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
    if out.len() >= split::floats() {
        use rayon::prelude::*;
        out.par_chunks_mut(ld.max(1)).with_min_len(8).enumerate().for_each(|(r, row)| f(r, row));
        return;
    }
    out.chunks_mut(ld.max(1)).enumerate().for_each(|(r, row)| f(r, row));
}

fn overrun(what: &str) -> Error {
    Error::Input(format!("{what}: view outside its activation buffer"))
}

/// A [rows, cols] matrix with row stride `ld` must fit in `len` floats, its rows apart.
fn check(len: usize, rows: usize, cols: usize, ld: usize, what: &str) -> Result<()> {
    if rows == 0 || cols == 0 || (rows > 1 && cols > ld) || (rows - 1) * ld + cols > len {
        return Err(overrun(what));
    }
    Ok(())
}

/// The [rows, cols] matrix with row stride `ld` that starts at `off` of `buf`, checked to fit.
fn rows_at<'a>(buf: &'a [f32], off: usize, rows: usize, cols: usize, ld: usize, what: &str) -> Result<&'a [f32]> {
    let s = buf.get(off..).ok_or_else(|| overrun(what))?;
    check(s.len(), rows, cols, ld, what)?;
    Ok(s)
}

/// [`rows_at`], writable.
fn rows_at_mut<'a>(buf: &'a mut [f32], off: usize, rows: usize, cols: usize, ld: usize, what: &str) -> Result<&'a mut [f32]> {
    let s = buf.get_mut(off..).ok_or_else(|| overrun(what))?;
    check(s.len(), rows, cols, ld, what)?;
    Ok(s)
}

/// GEMMs with at most this many rows use the `gemm` crate natively (see [`sgemm`]).
#[cfg(not(target_arch = "wasm32"))]
const SMALL_M: usize = 256;

/// `C = A · B` (or `C += A · B`), A [m, k] and B [k, n] with (row, column) strides, C [m, n]
/// with row stride `ldc`. Callers check every extent first ([`check`]).
#[allow(clippy::too_many_arguments)]
fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    (rsa, csa): (usize, usize),
    b: &[f32],
    (rsb, csb): (usize, usize),
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    debug_assert!(a.len() > (m - 1) * rsa + (k - 1) * csa);
    debug_assert!(b.len() > (k - 1) * rsb + (n - 1) * csb);
    debug_assert!(c.len() >= (m - 1) * ldc + n);
    // In wasm: tokenmix's own simd128 kernel (see `gemm128`: matrixmultiply's spills in V8).
    #[cfg(target_arch = "wasm32")]
    super::gemm128::sgemm(m, k, n, a, (rsa, csa), b, (rsb, csb), c, ldc, accumulate);
    // Natively, few rows (one image's tokens: 196 at 224²) go to the `gemm` crate, which
    // measured 1.1-1.6x matrixmultiply there (196x512x2048: 150-180 vs 110 GFLOP/s, 2 threads);
    // at 1568 rows matrixmultiply was as fast or faster (162 vs 102-155).
    #[cfg(not(target_arch = "wasm32"))]
    {
        if m <= SMALL_M {
            // SAFETY: as below; `gemm` takes the same pointers and strides (column stride first).
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    c.as_mut_ptr(),
                    1,
                    ldc as isize,
                    accumulate,
                    a.as_ptr(),
                    csa as isize,
                    rsa as isize,
                    b.as_ptr(),
                    csb as isize,
                    rsb as isize,
                    if accumulate { 1.0 } else { 0.0 },
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::Rayon(rayon::current_num_threads()),
                );
            }
            return;
        }
        // SAFETY: the extents above are checked by the callers (`check`) for every operand: each
        // pointer plus its largest offset stays inside its slice, and C does not alias A or B
        // (they are different slices; `CpuExec::new` refuses GEMMs that read the slot they write).
        unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                1.0,
                a.as_ptr(),
                rsa as isize,
                csa as isize,
                b.as_ptr(),
                rsb as isize,
                csb as isize,
                if accumulate { 1.0 } else { 0.0 },
                c.as_mut_ptr(),
                ldc as isize,
                1,
            );
        }
    }
}

/// `C = A · Wᵀ`, A [m, k], W [n, k] (a Linear layer's weight), C [m, n] (for benchmarks).
pub fn linear(m: usize, k: usize, n: usize, a: &[f32], w: &[f32], c: &mut [f32]) -> Result<()> {
    check(a.len(), m, k, k, "A")?;
    check(w.len(), n, k, k, "W")?;
    check(c.len(), m, n, n, "C")?;
    sgemm(m, k, n, a, (k, 1), w, (1, k), c, n, false);
    Ok(())
}

/// `C = W · X`, W [m, k], X [k, n], C [m, n] (token mixing, for benchmarks).
pub fn weight_times(m: usize, k: usize, n: usize, w: &[f32], x: &[f32], c: &mut [f32]) -> Result<()> {
    check(w.len(), m, k, k, "W")?;
    check(x.len(), k, n, n, "X")?;
    check(c.len(), m, n, n, "C")?;
    sgemm(m, k, n, w, (k, 1), x, (n, 1), c, n, false);
    Ok(())
}

/// A GEMM's bias as one row of its output sees it.
#[derive(Clone, Copy)]
enum Bias<'a> {
    None,
    /// One value per column (a Linear layer's output features).
    Columns(&'a [f32]),
    /// One value for the whole row (token mixing's per-token bias).
    Row(f32),
}

/// Defines `fn $name` whose body is compiled twice on x86-64: for the baseline the crate is
/// built for (SSE2, 4 f32 lanes) and for AVX2 (8 lanes), the AVX2 build chosen at run time
/// where the CPU has it, as matrixmultiply chooses its kernels. Elsewhere (wasm, with simd128
/// from the build flags) the body once. For the loops around the GEMMs that LLVM vectorises.
macro_rules! avx2_at_run_time {
    ($(#[$attr:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$attr])*
        fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn any($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2")]
            fn avx2($($arg: $ty),*) $(-> $ret)? {
                any($($arg),*)
            }

            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked just above); the function is otherwise safe.
                return unsafe { avx2($($arg),*) };
            }
            any($($arg),*)
        }
    };
}

avx2_at_run_time! {
    /// `out (+)= gate ⊙ (act(prod + bias) * scale)` for one row, in chunks of 64 that stay in
    /// registers/L1, one tight loop per stage so each vectorises (GELU included).
    fn epilogue_row(prod: &[f32], out: &mut [f32], bias: Bias, scale: Option<&[f32]>, gelu: bool, gate: Option<&[f32]>, residual: bool) {
        const CHUNK: usize = 64;
        let mut tmp = [0f32; CHUNK];
        let n = prod.len();
        let mut j0 = 0;
        while j0 < n {
            let len = CHUNK.min(n - j0);
            let range = j0..j0 + len;
            let t = &mut tmp[..len];
            t.copy_from_slice(&prod[range.clone()]);
            match bias {
                Bias::Columns(b) => t.iter_mut().zip(&b[range.clone()]).for_each(|(v, b)| *v += b),
                Bias::Row(b) => t.iter_mut().for_each(|v| *v += b),
                Bias::None => {}
            }
            if gelu {
                t.iter_mut().for_each(|v| *v = gelu_erf(*v));
            }
            if let Some(s) = scale {
                t.iter_mut().zip(&s[range.clone()]).for_each(|(v, s)| *v *= s);
            }
            if let Some(g) = gate {
                t.iter_mut().zip(&g[range.clone()]).for_each(|(v, g)| *v *= g);
            }
            let o = &mut out[range];
            if residual {
                o.iter_mut().zip(t.iter()).for_each(|(o, v)| *o += v);
            } else {
                o.copy_from_slice(t);
            }
            j0 += len;
        }
    }
}

/// GELU with the exact erf, as torch.nn.GELU() (not the tanh approximation).
#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// erf in f32 as a rational function of x on [-4, 4] (beyond which erf is ±1 in f32): the
/// minimax form XLA and Eigen use for float. No branches and no `exp`, so the compiler
/// vectorises the epilogue loops that call it (plain multiply-adds: `mul_add` without FMA
/// enabled at compile time is a libm call) (libm's scalar `erff` made GELU the largest cost
/// of a Mixer forward on the CPU). Within 1e-6 of libm's erff everywhere (tested below).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2 * -2.726_142_3e-10 + 2.770_681_4e-8;
    p = x2 * p - 2.101_024e-6;
    p = x2 * p - 5.692_506_4e-5;
    p = x2 * p - 7.349_906e-4;
    p = x2 * p - 2.954_6e-3;
    p = x2 * p - 1.609_603_3e-2;
    let mut q = x2 * -1.456_607_2e-5 - 2.133_740_6e-4;
    q = x2 * q - 1.682_827e-3;
    q = x2 * q - 7.373_329e-3;
    q = x2 * q - 1.426_474e-2;
    x * p / q
}

/// What [`moment`] adds up over a row or image: its values, or their squared distances from
/// its mean.
#[derive(Clone, Copy)]
enum Moment {
    Sum,
    SquaresAbout(f64),
}

avx2_at_run_time! {
    /// The sum of `x`'s values or squared deviations, in f64. Kept in 16 independent partial
    /// sums so that it vectorises (one running f64 sum is a chain of dependent adds, one per
    /// element: the norms' statistics were 10 % of a gMLP or PoolFormer forward on the CPU
    /// that way), and compiled for AVX2 too. The same order of additions on every call.
    fn moment(x: &[f32], m: Moment) -> f64 {
        #[inline(always)]
        fn lanes(x: &[f32], f: impl Fn(f64) -> f64) -> f64 {
            const LANES: usize = 16;
            let mut acc = [0f64; LANES];
            let mut chunks = x.chunks_exact(LANES);
            for c in &mut chunks {
                for (a, &v) in acc.iter_mut().zip(c) {
                    *a += f(v as f64);
                }
            }
            let tail: f64 = chunks.remainder().iter().map(|&v| f(v as f64)).sum();
            acc.iter().sum::<f64>() + tail
        }
        match m {
            Moment::Sum => lanes(x, |v| v),
            Moment::SquaresAbout(mean) => lanes(x, |v| (v - mean) * (v - mean)),
        }
    }
}

/// [`moment`] over a whole image: fixed pieces summed in parallel, then added in order, so
/// the result does not depend on how the threads split the work.
fn par_moment(x: &[f32], m: Moment) -> f64 {
    const PIECE: usize = 1 << 13;
    #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
    if x.len() >= split::floats() {
        use rayon::prelude::*;
        let parts: Vec<f64> = x.par_chunks(PIECE).map(|c| moment(c, m)).collect();
        return parts.iter().sum();
    }
    x.chunks(PIECE).map(|c| moment(c, m)).sum()
}

avx2_at_run_time! {
    /// `y = (x - mean) * inv * gamma + beta` over one row, compiled for AVX2 too.
    fn normalise(x: &[f32], y: &mut [f32], mean: f32, inv: f32, gamma: &[f32], beta: &[f32]) {
        for (((y, &x), &g), &b) in y.iter_mut().zip(x).zip(gamma).zip(beta) {
            *y = (x - mean) * inv * g + b;
        }
    }
}

/// LayerNorm of one row, statistics in f64 (two passes, so a large common offset cannot
/// cancel the variance).
fn layer_norm(x: &[f32], y: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let d = x.len() as f64;
    let mean = moment(x, Moment::Sum) / d;
    let var = moment(x, Moment::SquaresAbout(mean)) / d;
    let inv = (1.0 / (var + eps as f64).sqrt()) as f32;
    normalise(x, y, mean as f32, inv, gamma, beta);
}

/// GroupNorm with one group over one image's [tokens, d].
fn group_norm(x: &[f32], y: &mut [f32], d: usize, gamma: &[f32], beta: &[f32], eps: f32) {
    let n = x.len() as f64;
    let mean = par_moment(x, Moment::Sum) / n;
    let var = par_moment(x, Moment::SquaresAbout(mean)) / n;
    let inv = (1.0 / (var + eps as f64).sqrt()) as f32;
    for_rows(y, d, |t, yo| normalise(&x[t * d..(t + 1) * d], yo, mean as f32, inv, gamma, beta));
}

/// `x += scale * (AvgPool3x3(xn) - xn)` over one channels-last [h, w, d] image,
/// count_include_pad = False; rows of the grid in parallel, channels in register-sized chunks
/// (no allocation).
fn pool_mix(xn: &[f32], x: &mut [f32], (h, w, d): (usize, usize, usize), scale: &[f32]) {
    const CHUNK: usize = 64;
    for_rows(&mut x[..h * w * d], w * d, |y, out_row| {
        let (y0, y1) = (y.saturating_sub(1), (y + 2).min(h));
        for xx in 0..w {
            let (x0, x1) = (xx.saturating_sub(1), (xx + 2).min(w));
            let inv = 1.0 / ((y1 - y0) * (x1 - x0)) as f32;
            let at = (y * w + xx) * d;
            for c0 in (0..d).step_by(CHUNK) {
                let len = CHUNK.min(d - c0);
                let mut acc = [0f32; CHUNK];
                let acc = &mut acc[..len];
                for ny in y0..y1 {
                    for nx in x0..x1 {
                        let t = &xn[(ny * w + nx) * d + c0..][..len];
                        acc.iter_mut().zip(t).for_each(|(a, v)| *a += v);
                    }
                }
                let own = &xn[at + c0..][..len];
                let out = &mut out_row[xx * d + c0..][..len];
                for c in 0..len {
                    out[c] += scale[c0 + c] * (acc[c] * inv - own[c]);
                }
            }
        }
    });
}

/// Columns of an implicit-im2col convolution made explicit: row (img, oy, ox), column
/// (ci, ky, kx) in PyTorch's weight order; zero outside the image.
fn im2col(src: &[f32], batch: usize, g: &ConvGeometry, nhwc: bool, cols: &mut [f32]) -> Result<()> {
    let (oh, ow) = g.out_hw()?;
    let k = g.cin * g.kh * g.kw;
    let per = g.cin * g.ih * g.iw;
    if src.len() < batch * per || cols.len() < batch * oh * ow * k {
        return Err(overrun("convolution input"));
    }
    for_rows(&mut cols[..batch * oh * ow * k], k, |r, row| {
        let (img, oy, ox) = (r / (oh * ow), r / ow % oh, r % ow);
        let x = &src[img * per..(img + 1) * per];
        for ci in 0..g.cin {
            for ky in 0..g.kh {
                let iy = (oy * g.stride + ky) as isize - g.pad as isize;
                for kx in 0..g.kw {
                    let ix = (ox * g.stride + kx) as isize - g.pad as isize;
                    let inside = iy >= 0 && ix >= 0 && (iy as usize) < g.ih && (ix as usize) < g.iw;
                    row[(ci * g.kh + ky) * g.kw + kx] = match (inside, nhwc) {
                        (false, _) => 0.0,
                        (true, true) => x[(iy as usize * g.iw + ix as usize) * g.cin + ci],
                        (true, false) => x[(ci * g.ih + iy as usize) * g.iw + ix as usize],
                    };
                }
            }
        }
    });
    Ok(())
}

/// Appends the softmax of one row of logits.
fn softmax(row: &[f32], out: &mut Vec<f32>) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let sum: f64 = row.iter().map(|&v| ((v - max) as f64).exp()).sum();
    out.extend(row.iter().map(|&v| (((v - max) as f64).exp() / sum) as f32));
}

/// timm's eval transform of the part of an image a crop window reads
/// ([`Preprocess::prepare`]) on the CPU: PIL's resampling with its taps (the ones
/// `preprocess.wgsl` gets), normalised, CHW ([`Preprocess::window_input`], as the CLI's transform).
pub fn window_to_input(pp: &Preprocess, window: &Window) -> Result<Vec<f32>> {
    pp.validate()?;
    if !window.taps_inside() {
        return Err(Error::Input(format!(
            "{} bytes for a {}x{} window of {} bytes a pixel, or taps that read outside it",
            window.pixels.len(),
            window.width,
            window.height,
            window.bpp
        )));
    }
    Ok(pp.window_input(&window.taps, window.pixels, window.width, window.bpp))
}

impl CpuExec {
    /// Runs the steps once for `batch` images with the given slot contents (the rest zero) and
    /// returns every slot afterwards, in [`Slot::ALL`] order — the single-step kernel tests'
    /// way in, the same on both executors.
    pub fn run_slots(&self, batch: usize, inputs: &[(Slot, Vec<f32>)]) -> Result<Vec<Vec<f32>>> {
        self.with_workspace(batch, false, |ws| {
            for (slot, data) in inputs {
                let dst = ws.slots[slot.index()].get_mut(..data.len()).ok_or_else(|| overrun("test input"))?;
                dst.copy_from_slice(data);
            }
            self.run(ws, None, None)?;
            Ok(ws.slots.clone())
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fast_erf_is_within_1e6_of_libm() {
        let mut worst = (0f32, 0f32);
        for i in -80_000..=80_000 {
            let x = i as f32 * 1e-4;
            let d = (super::erf(x) - libm::erff(x)).abs();
            if d > worst.1 {
                worst = (x, d);
            }
        }
        assert!(worst.1 <= 1e-6, "erf({}) is {} off", worst.0, worst.1);
    }
}
