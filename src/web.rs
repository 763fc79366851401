//! The browser API (wasm32 only), exported by wasm-bindgen as an ES module (`make web` →
//! `js/pkg/tokenmix.js`, inside the npm package `js/`):
//!
//! - `setBackend(choice)` → `'auto'` (default), `'gpu'` or `'cpu'`: the executor the state is
//!   made with at the first call (the page passes its `?backend=`); a bad value rejects
//! - `setPrecision('f32' | 'f16')`: storage of GEMM weights and MLP hidden activations of GPU
//!   devices made from then on
//! - `adapterInfo()` → `{backend: 'gpu'|'cpu', reason, requested, name, apiBackend, deviceType,
//!   gemm, rows, resample, precision, precisionNote, threads, cancelled: {beforeStart, midPass, loads}, slices:
//!   {on, every, pauses, pausedMs}}`: which executor runs and why (`js/core.js` adds
//!   `threadsNote`), how many cancelled calls stopped before their pass began, during it, and
//!   how many loads stopped early, and whether CPU passes (and loads' copies and conversions)
//!   run in slices of `every` ms (the one-thread build), with the pauses they made and how long
//!   those were away. `auto` takes
//!   the CPU (WebAssembly SIMD) where WebGPU is missing, gives no adapter, or gives a software
//!   one (SwiftShader, the fallback adapter), else the GPU
//! - `loadModel(source, {onProgress, name, backend, precision, autotune, resample, cache, hub, signal, cancelId})` →
//!   description (with `fromCache`); `source` is a URL, timm's `hf-hub:owner/name` (the
//!   repository's model.safetensors on the hub at `hub`, default huggingface.co), an
//!   ArrayBuffer, Uint8Array, or null for the embedded default. `backend` switches the executor
//!   for this and later calls; `precision` ('f32' | 'f16') the GPU's storage; `resample`
//!   ('gpu' | 'cpu') where the GPU executor resizes an image (`gpu::Resample`); an aborted
//!   `signal` (AbortSignal) stops the download and the load, which then changes nothing; a
//!   cancelled `cancelId` (see `cancelCall`) stops the load at its next tensor or weight (in
//!   the one-thread build, whose copy into wasm memory and conversion run in slices, at the
//!   next slice). On
//!   failure it rejects with an `Error` naming the problem and
//!   the previous model stays loaded.
//! - `isCached(url)`, `clearCache(url?)` → the model cache (`loadModel(url, {cache: true})`
//!   reads and fills it; Cache API `tokenmix-models`)
//! - `decodeImage(bytes, name?)` → an ImageData of the image file in `bytes` (a Uint8Array),
//!   decoded as the CLI decodes it, or null where its format is none tokenmix reads
//! - `parseHubRepo(text)` → `owner/name`: a hub repository in any spelling the CLI reads
//! - `cropGeometry(width, height)` → `{resized, left, top, size}`: where the model's input
//!   comes from in an image of that size (the one implementation the page uses)
//! - `modelInfo()` → description of the current model (the embedded default until one loads)
//! - `classify(imageData, topK = 5, cancelId?, remember = true)` → `[{index, label,
//!   probability}]`, sorted; preprocessing runs in `preprocess.wgsl` in the same GPU submission
//!   as the forward pass. `remember` false: the image does not become the latest classified one
//!   (what `explain` and `stageEnergy` answer for), as for a folder's images classified into a
//!   table beside the one shown
//! - `classifyDetailed(imageData, topK = 5, cancelId?, remember = true)` → `{predictions, timings, input}` (the
//!   page's view: latency split and the model's-eye input)
//! - `classifyFileDetailed(bytes, name?, topK = 5, cancelId?, remember = true)` → the same for an image file's
//!   bytes, decoded and classified in one call (how `js/core.js` classifies a Blob), or null
//!   where its format is none tokenmix reads
//! - `tokenMixing(layer)` → `{kind, layer, layers, rows, cols, grid, data, note}`
//! - `insight(layer)` → everything the views show of one layer, computed in Rust
//!   (`crate::insight`): the weights, Mixer `units`/`groups`/`pairs`, `offsetKernel`,
//!   `figures` and `init` (timm's initialisation), `figuresOn`
//! - `explain(topK = 5, cancelId?)` → `{grid, approximate, classes: [{index, label, logit,
//!   probability, bias, map}]}` for the latest classified image: each logit split per token
//! - `cancelCall(id)` stops the call given `cancelId` `id` (a whole number below 2^31 - 1, one
//!   per running call): it rejects with "cancelled: …" at its next check (the CPU executor's
//!   next step, the GPU executor's next submission). `cancelTable()` → `{memory, offset,
//!   slots}` in the threaded build, else null: where another thread (the page's, while this
//!   worker is busy with the pass) stops call `id` itself, storing `id + 1` with
//!   `Atomics.store` in the Uint32Array `slots` long at byte `offset` of the shared `memory`,
//!   at index `id % slots`. In the one-thread build a CPU pass runs in slices (`SLICES`) and
//!   gives the thread back between them, where the worker's message handler (or the page's
//!   own thread) reads an abort and calls `cancelCall`; passes run one at a time, in call order
//! - `stageEnergy()` → PoolFormer's per-stage token energy for the latest classified image
//! - `loseDevice()` → destroys the device (tests of the recovery path: after a loss every call
//!   fails with "GPU device lost…" until `loadModel` makes a new device)
//!
//! Every export returns a Promise or value; errors become rejected `Error`s with a message.
//! Nothing here unwraps or indexes user data unchecked, so no Rust panic reaches JavaScript.
//! wasm is single-threaded: the state lives in a thread-local, and each call clones the `Rc`
//! of the model it started with, so concurrent `classify` calls and a `loadModel` in between
//! are safe (GPU submissions are ordered, each call maps its own staging buffer).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};

use js_sys::{Array, Float32Array, Object, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;

use crate::error::Error;
use crate::exec::{self, BackendChoice, Cancel, Device, Selected};
use crate::models::Model;

/// The threaded build (`threads`, `js/pkg-threads`): `initThreadPool(n)` starts rayon's pool
/// on `n` Web Workers sharing this module's memory; `js/core.js` calls it before anything else,
/// in a worker (the page's own thread may not block). Without it the pool is the calling
/// thread alone.
#[cfg(feature = "threads")]
pub use wasm_bindgen_rayon::init_thread_pool;

#[wasm_bindgen(inline_js = r#"
export async function fetch_bytes(url, onProgress, signal) {
  // An aborted signal stops the request, or the body's next read, with an AbortError.
  const response = await fetch(url, signal ? { signal } : undefined);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status} ${response.statusText}`);
  const total = Number(response.headers.get('Content-Length')) || null;
  // The body as it came, in chunks: copied once, into WebAssembly memory (copy_in).
  if (!response.body) return [new Uint8Array(await response.arrayBuffer())];
  const reader = response.body.getReader();
  const chunks = [];
  let loaded = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    loaded += value.length;
    if (onProgress) onProgress(loaded, total);
  }
  return chunks;
}
export function now() { return performance.now(); }
// Resolves in a task of its own, after the tasks already queued (an abort's message, a click,
// a frame to draw): a MessageChannel's message, as posted messages keep their order. One
// channel serves every pause; in Node a port would keep the process alive, so it is unref'd.
let pauses = null;
export function next_task() {
  if (!pauses) {
    const channel = new MessageChannel();
    const waiting = [];
    channel.port1.onmessage = () => waiting.shift()?.();
    channel.port1.unref?.();
    pauses = { channel, waiting };
  }
  return new Promise((resolve) => {
    pauses.waiting.push(resolve);
    pauses.channel.port2.postMessage(null);
  });
}
// Resolves once the timers due by now have run (a timer's abort, on a page's own thread).
export function next_timer() {
  return new Promise((resolve) => setTimeout(resolve, 0));
}
export function has_webgpu() { return typeof navigator !== 'undefined' && Boolean(navigator.gpu); }
// Downloaded models are kept in the Cache API under this name (window and worker alike).
const CACHE = 'tokenmix-models';
async function open_cache() {
  try { return typeof caches !== 'undefined' ? await caches.open(CACHE) : null; } catch { return null; }
}
export async function cache_get(url) {
  const c = await open_cache();
  const r = c && await c.match(url);
  return r ? new Uint8Array(await r.arrayBuffer()) : null;
}
export async function cache_put(url, chunks) {
  const c = await open_cache();
  if (!c) return false;
  try {
    const bytes = new Blob(chunks);
    await c.put(url, new Response(bytes, { headers: { 'Content-Type': 'application/octet-stream', 'Content-Length': String(bytes.size) } }));
    return true;
  } catch { return false; } // quota, storage disabled: the model still loaded
}
export async function cache_has(url) {
  const c = await open_cache();
  return Boolean(c && await c.match(url));
}
// The GEMM autotuner's choices, per adapter (the native cache file's JSON), in the Cache API
// under a fixed URL, so that window and worker share them.
const TUNING = 'https://tokenmix.invalid/gemm-tuning.json';
export async function tuning_get() {
  try {
    const c = typeof caches !== 'undefined' ? await caches.open('tokenmix-tuning') : null;
    const r = c && await c.match(TUNING);
    return r ? await r.text() : '';
  } catch { return ''; }
}
export async function tuning_put(text) {
  try {
    const c = typeof caches !== 'undefined' ? await caches.open('tokenmix-tuning') : null;
    if (c) await c.put(TUNING, new Response(text, { headers: { 'Content-Type': 'application/json' } }));
  } catch { /* storage disabled or full: the next load tunes again */ }
}
export async function cache_clear(url) {
  if (typeof caches === 'undefined') return false;
  if (url === undefined || url === null) return caches.delete(CACHE);
  const c = await open_cache();
  return c ? c.delete(url) : false;
}
"#)]
extern "C" {
    #[wasm_bindgen(catch)]
    async fn fetch_bytes(url: &str, on_progress: &JsValue, signal: &JsValue) -> Result<JsValue, JsValue>;
    fn now() -> f64;
    async fn next_task();
    async fn next_timer();
    fn has_webgpu() -> bool;
    // Every async import is `catch`: without it wasm-bindgen's glue unwraps a rejected promise,
    // a panic (an abort in this build) that would leave the module unusable. Cache.match and
    // delete reject on URLs no Request can be made of (credentials, unparsable), for one.
    #[wasm_bindgen(catch)]
    async fn cache_get(url: &str) -> Result<JsValue, JsValue>;
    #[wasm_bindgen(catch)]
    async fn cache_put(url: &str, chunks: &Array) -> Result<JsValue, JsValue>;
    #[wasm_bindgen(catch)]
    async fn cache_has(url: &str) -> Result<JsValue, JsValue>;
    #[wasm_bindgen(catch)]
    async fn cache_clear(url: JsValue) -> Result<JsValue, JsValue>;
    #[wasm_bindgen(catch)]
    async fn tuning_get() -> Result<JsValue, JsValue>;
    #[wasm_bindgen(catch)]
    async fn tuning_put(text: &str) -> Result<JsValue, JsValue>;
}

/// A JavaScript exception's message (an `Error`'s, else its debug form).
fn js_message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message())).unwrap_or_else(|| format!("{e:?}"))
}

/// `chunks` (Uint8Arrays) one after the other in wasm memory, or an error where that memory
/// cannot grow so far (a plain `to_vec` aborts the module instead: wasm32 has at most 4 GiB,
/// shared with the model), or [`Error::Cancelled`] once `cancel` is set (read between pieces
/// in `slices`, where given).
async fn copy_in(chunks: &Array, what: &str, cancel: &Cancel, slices: Option<&crate::exec::cpu::Slices>) -> crate::error::Result<Vec<u8>> {
    let parts: Vec<Uint8Array> = chunks.iter().map(|c| c.dyn_into::<Uint8Array>().unwrap_or_else(|c| Uint8Array::new(&c))).collect();
    let len = parts.iter().map(|p| p.length() as usize).sum::<usize>();
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| Error::Input(format!("{what} is {len} bytes: more than this page's WebAssembly memory can hold")))?;
    // The one-thread build copies in slices, as it converts (0.06 s for a 74 MB model in one
    // piece): a page's own thread keeps drawing, and an abort is read between pieces.
    let mut began = slices.map_or(0.0, |s| (s.clock)());
    for part in &parts {
        let n = part.length();
        let mut at = 0;
        while at < n {
            let end = n.min(at + COPY_PIECE);
            let start = out.len();
            out.resize(start + (end - at) as usize, 0);
            part.subarray(at, end).copy_to(&mut out[start..]);
            at = end;
            if let Some(s) = slices {
                s.pause_if_due(&mut began).await;
                cancel.check()?;
            }
        }
    }
    Ok(out)
}

/// The most bytes [`copy_in`] copies between two looks at the clock (4 MB: about 3 ms).
const COPY_PIECE: u32 = 4 << 20;

/// A whole number from JavaScript (wasm-bindgen would wrap -1 to 4294967295 for a `usize`).
fn whole(name: &str, v: f64, min: usize) -> Result<usize, JsError> {
    if v.is_finite() && v.fract() == 0.0 && v >= min as f64 && v <= u32::MAX as f64 {
        Ok(v as usize)
    } else {
        Err(js_err(Error::Input(format!("{name} is {v}: expected a whole number from {min}"))))
    }
}

/// How long a CPU pass of the one-thread build runs before it gives the thread back (see
/// `Model::run_in_slices`): the event loop then reads an abort (`cancelCall` from the worker's
/// message handler) and a page's own thread draws a frame. A GEMM of more than 32 Mi
/// multiply-adds (about 6 ms in one wasm thread) runs in blocks of columns, so a long one
/// (`mixer_s16_224`'s channel MLP: 205 M, 40 ms) can pause inside: measured on that model, the
/// page's longest wait 39 → 26 ms (when a timer ran in only half the pauses; 15-16 ms since
/// [`timed_pause`]), where 64 Mi gave 31 ms. A pass was 4-5 % longer while each block packed
/// all of A again (16 Mi: 12 %); the blocks now share one packing (`cpu::SharedA`), and a pass
/// takes what it took by steps. The threaded build's worker needs no pauses: the page's
/// thread cancels through shared memory.
const SLICES: crate::exec::cpu::Slices =
    crate::exec::cpu::Slices { every_ms: 10.0, clock: now, pause: || Box::pin(timed_pause()), gemm_macs: 1 << 25 };

/// [`SLICES`] in the one-thread build, where loads and CPU passes run in them; none in the
/// threaded build.
fn slices() -> Option<crate::exec::cpu::Slices> {
    (!cfg!(feature = "threads")).then_some(SLICES)
}

thread_local! {
    /// The pauses CPU passes made, and the milliseconds they were away (`adapterInfo().slices`:
    /// what running in slices costs, with what else ran meanwhile).
    static PAUSED: Cell<(u32, f64)> = const { Cell::new((0, 0.0)) };
}

/// A pause of a pass or load in slices: two rounds of [`next_task`]. Chromium queues a timer
/// that fell due during a slice only when the slice's task ends, after the message the slice
/// posted, so with one round a page's timer ran in only about half the pauses (a
/// `mixer_s16_224` pass on the page's thread: 11 ticks in 22 pauses, its longest wait 26 ms,
/// about two slices); the second round's message is posted after that timer, which runs
/// first (23 ticks in 23 pauses, 15 ms). The second round costs at most 0.5 ms a pass.
async fn timed_pause() {
    let t0 = now();
    next_task().await;
    next_task().await;
    let away = now() - t0;
    PAUSED.with(|p| {
        let (n, ms) = p.get();
        p.set((n + 1, ms + away));
    });
}

/// Whose turn it is to run a pass in slices: calls run their passes one at a time, in the
/// order they asked, as they did when a CPU pass held the thread (the latest classified image
/// is the latest call's, and two passes never share the thread or double the memory).
#[derive(Default)]
struct Turns {
    busy: bool,
    waiting: std::collections::VecDeque<futures_channel::oneshot::Sender<()>>,
}

thread_local! {
    static TURNS: RefCell<Turns> = RefCell::default();
}

/// A call's turn; dropping it gives the turn to the next call still waiting.
struct Turn;

impl Drop for Turn {
    fn drop(&mut self) {
        TURNS.with(|t| {
            let mut t = t.borrow_mut();
            // A waiter whose call was dropped meanwhile is skipped.
            while let Some(next) = t.waiting.pop_front() {
                if next.send(()).is_ok() {
                    return;
                }
            }
            t.busy = false;
        });
    }
}

/// Waits for this call's turn to run a pass of `model`, where its passes run in slices (the
/// CPU executor of the one-thread build); other passes need none.
async fn turn(model: &Model) -> Option<Turn> {
    if !model.runs_in_slices() {
        return None;
    }
    let wait = TURNS.with(|t| {
        let mut t = t.borrow_mut();
        if !t.busy {
            t.busy = true;
            return None;
        }
        let (tx, rx) = futures_channel::oneshot::channel();
        t.waiting.push_back(tx);
        Some(rx)
    });
    if let Some(rx) = wait {
        // The sender is dropped only once the turn was given (it is then ours) or skipped.
        let _ = rx.await;
    }
    Some(Turn)
}

/// Loads a model on `device` with the GEMM autotuner's stored choices for it, then times the
/// shape classes it has none for yet (batch 1, as the page classifies) and stores the result.
/// Only where the device tunes: hardware GPUs, or any with the `autotune` option.
async fn load_tuned(device: &Device, bytes: &[u8], cancel: &Cancel) -> crate::error::Result<Model> {
    let gpu = device.gpu().filter(|g| g.tuning.enabled()).cloned();
    let stored = match &gpu {
        Some(g) => {
            let text = tuning_get().await.ok().and_then(|t| t.as_string()).unwrap_or_default();
            g.tuning.import(&text);
            Some(text)
        }
        None => None,
    };
    // The one-thread build converts the file in slices too (an abort is read between them,
    // and a page's own thread keeps drawing), then runs the model's CPU passes in slices.
    let slices = slices();
    let mut model = Model::load_scoped_in_slices(device.clone(), bytes, None, cancel, slices.as_ref()).await?;
    cancel.check()?;
    model.run_in_slices(slices);
    if let (Some(g), Some(text)) = (gpu, stored) {
        // An abort stops the timing before its next kernel build or timed run; the classes
        // timed by then are stored as well (their choices were measured), so the next load
        // times the rest.
        let before = g.tuning.timed();
        let tuned = model.autotune(1, cancel).await;
        if g.tuning.timed() > before {
            // Storage disabled or full: the next load tunes again.
            let _ = tuning_put(&g.tuning.export(&text)).await;
        }
        tuned?;
    }
    Ok(model)
}

struct State {
    sel: Selected,
    model: Rc<Model>,
    name: String,
    /// PoolFormer's per-stage token energy from the latest classify.
    energy: Vec<((usize, usize), Vec<f32>)>,
    /// The model input of the latest classify (what `explain` explains).
    last_input: Option<Vec<f32>>,
    /// Which `loadModel` call (`LOADS`'s count when it started) loaded `model`; 0: the first.
    loaded: u64,
}

thread_local! {
    static STATE: RefCell<Option<Rc<RefCell<State>>>> = const { RefCell::new(None) };
    /// How many `loadModel` calls have started.
    static LOADS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The backend the state is first made with (`setBackend`).
    static CHOICE: RefCell<BackendChoice> = const { RefCell::new(BackendChoice::Auto) };
    /// Where models loaded from now on resample images on the GPU (`loadModel`'s `resample`);
    /// None: the adapter's default.
    static RESAMPLE: Cell<Option<crate::gpu::Resample>> = const { Cell::new(None) };
}

fn js_err(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// The cancel table: call `id` is cancelled once cell `id % CANCEL_SLOTS` holds `id + 1`, so
/// a cell needs no reset between calls, and a stale value never matches a later call's.
const CANCEL_SLOTS: usize = 256;
static CANCELS: [AtomicU32; CANCEL_SLOTS] = [const { AtomicU32::new(0) }; CANCEL_SLOTS];

/// Calls that stopped cancelled: passes before they began and during them, and loads.
#[derive(Clone, Copy, Default)]
struct Stopped {
    before_start: u32,
    mid_pass: u32,
    loads: u32,
}

thread_local! {
    static STOPPED: Cell<Stopped> = const { Cell::new(Stopped { before_start: 0, mid_pass: 0, loads: 0 }) };
}

fn count_stop(f: impl FnOnce(&mut Stopped)) {
    STOPPED.with(|s| {
        let mut v = s.get();
        f(&mut v);
        s.set(v);
    });
}

/// The cancel table's cell of call id `v` (named `name` in errors), and the value that
/// cancels that call in it.
fn cancel_cell(name: &str, v: f64) -> Result<(&'static AtomicU32, u32), JsError> {
    let id = whole(name, v, 0)?;
    if id >= i32::MAX as usize {
        return Err(js_err(Error::Input(format!("{name} is {id}: expected a whole number below 2^31 - 1"))));
    }
    Ok((&CANCELS[id % CANCEL_SLOTS], id as u32 + 1))
}

/// The token of the call given `cancelId` (none: a token nothing cancels).
fn cancel_token(id: Option<f64>) -> Result<Cancel, JsError> {
    let Some(id) = id else { return Ok(Cancel::new()) };
    let (cell, value) = cancel_cell("cancelId", id)?;
    Ok(Cancel::watching(cell, value))
}

/// Counts a call that stopped cancelled (see `adapterInfo().cancelled`).
fn note_stop<T>(result: &crate::error::Result<T>, cancel: &Cancel) {
    if matches!(result, Err(Error::Cancelled)) {
        let midway = cancel.checks_passed() > 0;
        count_stop(|s| if midway { s.mid_pass += 1 } else { s.before_start += 1 });
    }
}

/// Stops the call given `cancelId` `id` at its next check (see the module's notes).
#[wasm_bindgen(js_name = cancelCall)]
pub fn cancel_call(id: f64) -> Result<(), JsError> {
    let (cell, value) = cancel_cell("cancelCall: id", id)?;
    cell.store(value, Ordering::Relaxed);
    Ok(())
}

/// Where another thread cancels a call in this module's shared memory (threaded build), or
/// null where the memory is not shared (see the module's notes).
#[wasm_bindgen(js_name = cancelTable)]
pub fn cancel_table() -> JsValue {
    if !cfg!(feature = "threads") {
        return JsValue::NULL;
    }
    let t = Object::new();
    set(&t, "memory", wasm_bindgen::memory());
    set(&t, "offset", CANCELS.as_ptr() as usize as u32);
    set(&t, "slots", CANCEL_SLOTS as u32);
    t.into()
}

/// The state, created on first use: the WebGPU device and the embedded default model.
async fn state() -> Result<Rc<RefCell<State>>, JsError> {
    if let Some(s) = STATE.with(|s| s.borrow().clone()) {
        return Ok(s);
    }
    let sel = select(CHOICE.with(|c| *c.borrow())).await?;
    let model = load_tuned(&sel.device, crate::DEFAULT_MODEL, &Cancel::new()).await.map_err(js_err)?;
    let fresh = Rc::new(RefCell::new(State {
        sel,
        model: Rc::new(model),
        name: crate::DEFAULT_MODEL_NAME.into(),
        energy: Vec::new(),
        last_input: None,
        loaded: 0,
    }));
    // Two first calls may race through the awaits above; keep whichever finished first.
    Ok(STATE.with(|s| s.borrow_mut().get_or_insert(fresh).clone()))
}

async fn select(choice: BackendChoice) -> Result<Selected, JsError> {
    if choice == BackendChoice::Auto && !has_webgpu() {
        return Ok(Selected { device: Device::cpu(), choice, reason: "this browser has no WebGPU (navigator.gpu is missing)".into(), detail: None });
    }
    exec::select(choice)
        .await
        .map_err(|e| js_err(format!("WebGPU is not available: {e} (the CPU backend works without it: backend 'cpu' or 'auto')")))
}

/// Chooses the executor the first call makes the state with: `'auto'`, `'gpu'` or `'cpu'`.
/// After the state exists, `loadModel(source, {backend})` switches it.
#[wasm_bindgen(js_name = setBackend)]
pub fn set_backend(choice: &str) -> Result<(), JsError> {
    let c = BackendChoice::parse(choice).map_err(js_err)?;
    CHOICE.with(|x| *x.borrow_mut() = c);
    Ok(())
}

/// Whether devices made from now on autotune their GEMM kernels (`createClassifier`'s
/// `autotune`): true or false, or undefined for the default (hardware GPUs only);
/// `loadModel(source, {autotune})` switches it later.
#[wasm_bindgen(js_name = setAutotune)]
pub fn set_autotune(on: Option<bool>) {
    crate::gpu::tune::request_autotune(on);
}

/// The storage precision ('f32', or 'f16' for GEMM weights and MLP hidden activations) of
/// devices made from now on (`createClassifier`'s `precision`); `loadModel(source,
/// {precision})` switches it later.
#[wasm_bindgen(js_name = setPrecision)]
pub fn set_precision(precision: &str) -> Result<(), JsError> {
    crate::gpu::request_precision(crate::gpu::Precision::parse(precision).map_err(js_err)?);
    Ok(())
}

fn set(obj: &Object, key: &str, value: impl Into<JsValue>) {
    // Reflect::set only fails on frozen objects or proxies; ours are fresh plain objects.
    let _ = Reflect::set(obj, &key.into(), &value.into());
}

fn json(value: &impl serde::Serialize) -> Result<JsValue, JsError> {
    let s = serde_json::to_string(value).map_err(js_err)?;
    js_sys::JSON::parse(&s).map_err(|_| js_err("internal: could not build a JSON value"))
}

fn describe(model: &Model, name: &str) -> Result<JsValue, JsError> {
    let i = &model.info;
    let [c, h, w] = i.arch.input_shape();
    json(&serde_json::json!({
        "name": name,
        "family": i.family,
        "preset": i.preset,
        "params": i.params,
        "macs": i.macs,
        "classes": i.arch.num_classes(),
        "inputSize": [c, h, w],
        "labels": i.labels,
        "preprocess": i.preprocess,
        "arch": i.arch,
        "mixingLayers": model.mixing_layers(),
        "backend": model.backend(),
        "f16Activations": model.f16_activations(),
    }))
}

#[wasm_bindgen(js_name = adapterInfo)]
pub async fn adapter_info() -> Result<JsValue, JsError> {
    let s = state().await?;
    let sel = s.borrow().sel.clone();
    let resample = s.borrow().model.resample().map(|r| r.name());
    let d = &sel.device;
    let (name, api, device_type) = match d {
        Device::Gpu(g) => (g.info.name.clone(), format!("{:?}", g.info.backend), format!("{:?}", g.info.device_type)),
        Device::Cpu(_) => (d.describe(), "WebAssembly".to_string(), "Cpu".to_string()),
    };
    json(&serde_json::json!({
        "backend": d.backend(),
        "reason": sel.reason,
        "detail": sel.detail,
        "requested": sel.choice.name(),
        "name": name,
        "apiBackend": api,
        "deviceType": device_type,
        "gemm": d.kernels(),
        "rows": d.rows(),
        "resample": resample,
        "autotune": d.gpu().is_some_and(|g| g.tuning.enabled()),
        "gemmTimed": d.gpu().map_or(0, |g| g.tuning.timed()),
        "precision": d.precision().0,
        "precisionNote": d.precision().1,
        "threads": exec::Cpu::new().threads,
        "cancelled": STOPPED.with(|c| {
            let s = c.get();
            serde_json::json!({"beforeStart": s.before_start, "midPass": s.mid_pass, "loads": s.loads})
        }),
        "slices": PAUSED.with(|p| {
            let (pauses, ms) = p.get();
            serde_json::json!({"every": SLICES.every_ms, "pauses": pauses, "pausedMs": ms, "on": !cfg!(feature = "threads")})
        }),
    }))
}

#[wasm_bindgen(js_name = modelInfo)]
pub async fn model_info() -> Result<JsValue, JsError> {
    let s = state().await?;
    let s = s.borrow();
    describe(&s.model, &s.name)
}

/// What a load aborted by its `signal` rejects with (after the model's name); `js/index.js`
/// turns it into the signal's reason, an `AbortError`.
const ABORTED: &str = "the load was aborted (its signal)";

/// Loads a timm-named safetensors file from a URL, ArrayBuffer or Uint8Array; `null` (or
/// undefined) goes back to the embedded default model. `options.name` labels the model.
#[wasm_bindgen(js_name = loadModel)]
pub async fn load_model(source: JsValue, options: JsValue) -> Result<JsValue, JsError> {
    let s = state().await?;
    // Loads may overlap (a URL's download is long); the last one called wins, not the last
    // to finish: an older load that ends after a newer one was committed rejects.
    let ticket = LOADS.with(|n| {
        n.set(n.get() + 1);
        n.get()
    });
    let option = |key: &str| {
        if options.is_object() {
            Reflect::get(&options, &key.into()).unwrap_or(JsValue::UNDEFINED)
        } else {
            JsValue::UNDEFINED
        }
    };
    // Every option is read and checked before anything changes.
    let on_progress = option("onProgress");
    // An AbortSignal (`signal`): aborted, it stops the download and keeps the load from
    // replacing the model, whenever it comes before the load ends.
    let signal = option("signal");
    let signal = if signal.is_undefined() || signal.is_null() {
        None
    } else if Reflect::get(&signal, &"aborted".into()).ok().is_some_and(|a| a.as_bool().is_some()) {
        Some(signal)
    } else {
        return Err(js_err("loadModel: options.signal must be an AbortSignal"));
    };
    let aborted = || signal.as_ref().is_some_and(|s| Reflect::get(s, &"aborted".into()).ok().and_then(|a| a.as_bool()) == Some(true));
    // `cancelId` (js/index.js numbers the call): the load stops at its next tensor or weight
    // once that id is cancelled (`cancelCall`, or the cancel table from the page's thread).
    let cancel = cancel_token(option("cancelId").as_f64())?;
    let use_cache = option("cache").as_bool().unwrap_or(false);
    // An option that is absent (undefined or null) is None; a given one must parse.
    let given = |key: &str| Some(option(key)).filter(|v| !v.is_undefined() && !v.is_null());
    let wanted = given("backend")
        .map(|v| {
            let text = v.as_string().ok_or_else(|| js_err("loadModel: options.backend must be 'auto', 'gpu' or 'cpu'"))?;
            BackendChoice::parse(&text).map_err(js_err)
        })
        .transpose()?;
    let precision = given("precision")
        .map(|v| {
            let text = v.as_string().ok_or_else(|| js_err("loadModel: options.precision must be 'f32' or 'f16'"))?;
            crate::gpu::Precision::parse(&text).map_err(js_err)
        })
        .transpose()?;
    let autotune = given("autotune").map(|v| v.as_bool().ok_or_else(|| js_err("loadModel: options.autotune must be true or false"))).transpose()?;
    let resample = given("resample")
        .map(|v| {
            v.as_string().and_then(|t| crate::gpu::Resample::parse(&t)).ok_or_else(|| js_err("loadModel: options.resample must be 'gpu' or 'cpu'"))
        })
        .transpose()?;
    // `hub`: the base address a model named `hf-hub:owner/name` downloads from.
    let hub = given("hub").map(|v| v.as_string().ok_or_else(|| js_err("loadModel: options.hub must be a URL string"))).transpose()?;
    let given_name = option("name").as_string();
    let label = || given_name.clone().or_else(|| source.as_string()).unwrap_or_else(|| "the model".into());
    if aborted() {
        return Err(js_err(format!("{}: {ABORTED}", label())));
    }
    // A URL loaded with `cache: true` comes from the Cache API when it is there, and goes into
    // it once it has loaded (never a file that failed to load).
    let mut cache_after: Option<(String, Array)> = None;
    let mut from_cache = false;
    let (chunks, name) = if source.is_null() || source.is_undefined() {
        (None, crate::DEFAULT_MODEL_NAME.to_string())
    } else if let Some(text) = source.as_string() {
        // timm's `hf-hub:owner/name`: the repository's model.safetensors on the hub, the model
        // named as it was asked for.
        let url = if crate::hubname::is_hub_name(&text) {
            let repo = hub_repo(&text).map_err(|e| js_err(format!("loadModel: {e}")))?;
            crate::hubname::model_url(hub.as_deref().unwrap_or(crate::hubname::HUB), &repo)
        } else {
            text.clone()
        };
        // A cache that cannot answer (storage off, a URL no Request takes) is a miss.
        let hit = if use_cache { cache_get(&url).await.ok().and_then(|v| v.dyn_into::<Uint8Array>().ok()) } else { None };
        let chunks = match hit {
            Some(data) => {
                from_cache = true;
                Array::of1(&data)
            }
            None => {
                let chunks = match fetch_bytes(&url, &on_progress, signal.as_ref().unwrap_or(&JsValue::UNDEFINED)).await {
                    Ok(chunks) => Array::from(&chunks),
                    Err(_) if aborted() => return Err(js_err(format!("{}: {ABORTED}", label()))),
                    Err(e) => return Err(js_err(format!("download failed: {}", js_message(&e)))),
                };
                if use_cache {
                    cache_after = Some((url.clone(), chunks.clone()));
                }
                chunks
            }
        };
        (Some(chunks), text)
    } else if source.is_instance_of::<js_sys::ArrayBuffer>() || source.is_instance_of::<Uint8Array>() {
        (Some(Array::of1(&Uint8Array::new(&source))), "(bytes)".to_string())
    } else {
        return Err(js_err("loadModel: source must be a URL string, an ArrayBuffer or a Uint8Array"));
    };
    let bytes = match &chunks {
        None => crate::DEFAULT_MODEL.to_vec(),
        Some(chunks) => match copy_in(chunks, if source.is_string() { &name } else { "the model" }, &cancel, slices().as_ref()).await {
            Ok(bytes) => bytes,
            Err(Error::Cancelled) => {
                count_stop(|s| s.loads += 1);
                return Err(js_err(format!("{}: {ABORTED}", label())));
            }
            Err(e) => return Err(js_err(e)),
        },
    };
    drop(chunks);
    let name = given_name.unwrap_or(name);
    // The precision and autotune options change what devices made from now on get; a load
    // that fails puts them back as they were.
    let old = s.borrow().sel.clone();
    let before_precision = crate::gpu::precision_override();
    let before_autotune = crate::gpu::tune::autotune_override();
    let before_enabled = old.device.gpu().map(|g| g.tuning.enabled());
    let before_resample = RESAMPLE.get();
    let restore = || {
        RESAMPLE.set(before_resample);
        crate::gpu::set_precision_override(before_precision);
        crate::gpu::tune::request_autotune(before_autotune);
        if let (Some(g), Some(on)) = (old.device.gpu(), before_enabled) {
            g.tuning.set_enabled(on);
        }
    };
    let loaded = async {
        // A backend option switches the executor; after a device loss, loading (the same or
        // another model) starts on a new device. A precision option ('f32' | 'f16') asks new
        // devices for it; a GPU made with another one is replaced (one without shader-f16
        // stays f32 and says so in adapterInfo()).
        let lost = old.device.gpu().is_some_and(|g| g.is_lost());
        let repick = precision.is_some_and(|p| p != crate::gpu::requested_precision().unwrap_or_default());
        if let Some(p) = precision {
            crate::gpu::request_precision(p);
        }
        let sel = match wanted {
            Some(c) if c != old.choice => select(c).await?,
            _ if lost || (repick && old.device.gpu().is_some()) => select(old.choice).await?,
            _ => old.clone(),
        };
        // An autotune option (true/false) applies to this device and to the devices made later.
        if let Some(on) = autotune {
            crate::gpu::tune::request_autotune(Some(on));
            if let Some(g) = sel.device.gpu() {
                g.tuning.set_enabled(on);
            }
        }
        // A resample option applies to this model and those loaded later.
        if resample.is_some() {
            RESAMPLE.set(resample);
        }
        let mut model = match load_tuned(&sel.device, &bytes, &cancel).await {
            Ok(m) => m,
            Err(Error::Cancelled) => {
                count_stop(|s| s.loads += 1);
                return Err(js_err(format!("{name}: {ABORTED}")));
            }
            Err(e) => return Err(js_err(format!("{name}: {e}"))),
        };
        if let Some(r) = RESAMPLE.get() {
            model.set_resample(r);
        }
        let desc = describe(&model, &name)?;
        Ok::<_, JsError>((sel, model, desc))
    };
    let (sel, model, desc) = match loaded.await {
        Ok(done) => done,
        Err(e) => {
            restore();
            return Err(e);
        }
    };
    // An abort that came while the conversion held this thread (the one-thread build's worker,
    // whose message handler is the abort's way in, or a page's own thread, where a timer or an
    // event may abort) is read before the model is committed, so that an aborted load changes
    // nothing: the messages queued by now run before the first await ends, the timers due by
    // now before the second.
    if signal.is_some() {
        next_task().await;
        next_timer().await;
    }
    {
        let mut st = s.borrow_mut();
        if aborted() {
            drop(st);
            restore();
            return Err(js_err(format!("{name}: {ABORTED}")));
        }
        if st.loaded > ticket {
            drop(st);
            restore();
            return Err(js_err(format!("{name}: superseded by a later loadModel call, whose model is in use")));
        }
        st.loaded = ticket;
        st.sel = sel;
        st.model = Rc::new(model);
        st.name = name;
        st.energy.clear();
        st.last_input = None;
    }
    if let Some(c) = wanted {
        CHOICE.with(|x| *x.borrow_mut() = c);
    }
    set(desc.unchecked_ref(), "fromCache", from_cache);
    if let Some((url, data)) = cache_after {
        // Quota or storage disabled: the model still loaded.
        let _ = cache_put(&url, &data).await;
    }
    Ok(desc)
}

/// Whether `url` is in the model cache (a `loadModel(url, {cache: true})` put it there).
#[wasm_bindgen(js_name = isCached)]
pub async fn is_cached(url: String) -> bool {
    // A URL the Cache API cannot take (credentials, unparsable) is in no cache.
    cache_has(&url).await.ok().and_then(|v| v.as_bool()).unwrap_or(false)
}

/// Removes `url` from the model cache, or the whole cache when `url` is null/undefined.
#[wasm_bindgen(js_name = clearCache)]
pub async fn clear_cache(url: JsValue) -> Result<bool, JsError> {
    let done = cache_clear(url).await.map_err(|e| js_err(format!("clearCache: {}", js_message(&e))))?;
    Ok(done.as_bool().unwrap_or(false))
}

/// The hub repository `text` names, in any spelling the CLI and the desktop app read
/// (`hubname::parse_repo`: `owner/name`, `hf-hub:owner/name`, its address on huggingface.co);
/// an error saying what is expected otherwise. The page's "Another model from the hub" field.
#[wasm_bindgen(js_name = parseHubRepo)]
pub fn parse_hub_repo(text: &str) -> Result<String, JsError> {
    hub_repo(text).map_err(js_err)
}

/// `hubname::parse_repo`, its error the sentence the page shows (without the "input: " kind).
fn hub_repo(text: &str) -> std::result::Result<String, String> {
    crate::hubname::parse_repo(text).map_err(|e| match e {
        Error::Input(message) => message,
        other => other.to_string(),
    })
}

/// Where the current model's input comes from in a `width` x `height` image (timm's eval
/// transform): `{resized: [w, h], left, top, size: [h, w]}` — the crop is `size` at
/// (`left`, `top`) of the image resized to `resized`. The page draws its overlays with this.
#[wasm_bindgen(js_name = cropGeometry)]
pub async fn crop_geometry(width: f64, height: f64) -> Result<JsValue, JsError> {
    let (width, height) = (whole("cropGeometry: width", width, 1)?, whole("cropGeometry: height", height, 1)?);
    let s = state().await?;
    let model = s.borrow().model.clone();
    let pp = &model.info.preprocess;
    let g = pp.geometry(width, height).map_err(js_err)?;
    json(&serde_json::json!({"resized": [g.resized.0, g.resized.1], "left": g.left, "top": g.top, "size": pp.size}))
}

/// The image file in `bytes` (named `name` in errors) as an ImageData, decoded as the CLI
/// decodes a file (`preprocess::decode_image`: the same pixels, EXIF orientation applied, alpha
/// dropped as PIL's `convert("RGB")` drops it, the same size limits), so that a file gets the
/// CLI's answer: a browser's canvas premultiplies alpha (a transparent pixel's colour is lost)
/// and its decoders differ in the last bits. `null` where the format is none tokenmix reads
/// (`js/core.js` then lets the browser decode it: AVIF, SVG, …); an error where it is one but
/// the file does not decode or is too large.
#[wasm_bindgen(js_name = decodeImage)]
pub fn decode_image(bytes: &[u8], name: Option<String>) -> Result<Option<web_sys::ImageData>, JsError> {
    if !readable(bytes) {
        return Ok(None);
    }
    let name = name.filter(|n| !n.is_empty()).unwrap_or_else(|| "the image".into());
    let rgb = crate::preprocess::decode_image(bytes, std::path::Path::new(&name)).map_err(js_err)?;
    let rgba = crate::preprocess::rgba_from_rgb(rgb.as_raw());
    // Copied out of wasm memory: an ImageData made on a view of `rgba` would keep reading that
    // memory after `rgba` is freed and reused.
    let data = js_sys::Uint8ClampedArray::new_with_length(rgba.len() as u32);
    data.copy_from(&rgba);
    web_sys::ImageData::new_with_js_u8_clamped_array_and_sh(&data, rgb.width(), rgb.height())
        .map(Some)
        .map_err(|e| js_err(format!("{name}: {}x{} pixels: {e:?}", rgb.width(), rgb.height())))
}

/// Classifies a DOM ImageData of any size with the current model: the top `topK` (default 5)
/// as `[{index, label, probability}]`, most probable first.
#[wasm_bindgen]
pub async fn classify(image: web_sys::ImageData, top_k: Option<f64>, cancel_id: Option<f64>, remember: Option<bool>) -> Result<JsValue, JsError> {
    let out = classify_detailed(image, top_k, cancel_id, remember).await?;
    Reflect::get(&out, &"predictions".into()).map_err(|_| js_err("internal: no predictions"))
}

/// As `classify`, plus what the page shows beside the predictions:
/// `{predictions, timings: {preprocessMs, forwardMs, readbackMs}, input: {channels, height, width, data}}`.
#[wasm_bindgen(js_name = classifyDetailed)]
pub async fn classify_detailed(
    image: web_sys::ImageData,
    top_k: Option<f64>,
    cancel_id: Option<f64>,
    remember: Option<bool>,
) -> Result<JsValue, JsError> {
    let top_k = top_k.map(|k| whole("topK", k, 1)).transpose()?;
    let cancel = cancel_token(cancel_id)?;
    let s = state().await?;
    let model = s.borrow().model.clone();
    let (w, h) = (image.width() as usize, image.height() as usize);
    // The size limit before the pixels are copied into wasm memory (which never shrinks).
    crate::preprocess::check_image_size(w, h).map_err(js_err)?;
    // (The pixels are copied in once it is this call's turn: calls waiting for theirs hold
    // no copy in wasm memory, which never shrinks.)
    let turn = turn(&model).await;
    let pixels = image.data();
    let run = model.classify_rgba_cancellable(&pixels, w, h, now, &cancel).await;
    drop(turn);
    detailed(&s, &model, run, &cancel, top_k, remember.unwrap_or(true))
}

/// As `classifyDetailed`, for an image file's bytes (`bytes`, a Uint8Array; `name` for errors),
/// decoded inside the module as `decodeImage` decodes it and classified as decoded (RGB): no
/// ImageData is copied out of wasm memory and back in. `null` where the format is none
/// tokenmix reads (`js/core.js` then lets the browser decode it).
#[wasm_bindgen(js_name = classifyFileDetailed)]
pub async fn classify_file_detailed(
    bytes: Vec<u8>,
    name: Option<String>,
    top_k: Option<f64>,
    cancel_id: Option<f64>,
    remember: Option<bool>,
) -> Result<JsValue, JsError> {
    if !readable(&bytes) {
        return Ok(JsValue::NULL);
    }
    let top_k = top_k.map(|k| whole("topK", k, 1)).transpose()?;
    let cancel = cancel_token(cancel_id)?;
    let s = state().await?;
    let model = s.borrow().model.clone();
    // Decoded once it is this call's turn, as an ImageData's pixels are copied in then.
    let turn = turn(&model).await;
    let name = name.filter(|n| !n.is_empty()).unwrap_or_else(|| "the image".into());
    let rgb = crate::preprocess::decode_image(&bytes, std::path::Path::new(&name)).map_err(js_err)?;
    drop(bytes);
    let run = model.classify_pixels_cancellable(crate::preprocess::Pixels::rgb(&rgb), now, &cancel).await;
    drop(turn);
    detailed(&s, &model, run, &cancel, top_k, remember.unwrap_or(true))
}

/// Whether `bytes` are an image file of a format tokenmix decodes (told by its first bytes).
fn readable(bytes: &[u8]) -> bool {
    image::guess_format(bytes).is_ok_and(|f| f.reading_enabled())
}

/// `classifyDetailed`'s object for `run`, the state told of its stage energy and input where
/// `remember`.
fn detailed(
    s: &Rc<RefCell<State>>,
    model: &Rc<Model>,
    run: crate::error::Result<crate::models::ImageRun>,
    cancel: &Cancel,
    top_k: Option<usize>,
    remember: bool,
) -> Result<JsValue, JsError> {
    note_stop(&run, cancel);
    let mut run = run.map_err(js_err)?;
    {
        // Only if the model was not swapped while this call ran.
        let mut st = s.borrow_mut();
        if remember && Rc::ptr_eq(&st.model, model) {
            st.energy = std::mem::take(&mut run.stage_energy);
            st.last_input = Some(run.input.clone());
        }
    }
    let probs = &run.output.probs;
    let predictions = Array::new();
    for k in run.output.top_k(0, top_k.unwrap_or(5)) {
        let p = Object::new();
        set(&p, "index", k as u32);
        set(&p, "label", crate::labels::label(&model.info, k));
        set(&p, "probability", probs[k] as f64);
        predictions.push(&p);
    }
    let timings = Object::new();
    set(&timings, "preprocessMs", run.preprocess_ms);
    set(&timings, "forwardMs", run.forward_ms);
    set(&timings, "readbackMs", run.readback_ms);
    let [c, ih, iw] = model.info.arch.input_shape();
    let input = Object::new();
    set(&input, "channels", c as u32);
    set(&input, "height", ih as u32);
    set(&input, "width", iw as u32);
    set(&input, "data", Float32Array::from(&run.input[..]));
    let out = Object::new();
    set(&out, "predictions", predictions);
    set(&out, "timings", timings);
    set(&out, "input", input);
    Ok(out.into())
}

/// PoolFormer: each stage's per-token activation energy (L2 norm over channels) for the latest
/// classified image, `[{stage, grid: [h, w], energy: Float32Array}]`; empty for other families.
#[wasm_bindgen(js_name = stageEnergy)]
pub async fn stage_energy() -> Result<JsValue, JsError> {
    let s = state().await?;
    let out = Array::new();
    for (i, ((h, w), energy)) in s.borrow().energy.iter().enumerate() {
        let e = Object::new();
        set(&e, "stage", i as u32);
        set(&e, "grid", Array::of2(&(*h as u32).into(), &(*w as u32).into()));
        set(&e, "energy", Float32Array::from(&energy[..]));
        out.push(&e);
    }
    Ok(out.into())
}

/// The learned token-mixing weights of one layer of the current model.
#[wasm_bindgen(js_name = tokenMixing)]
pub async fn token_mixing(layer: f64) -> Result<JsValue, JsError> {
    let layer = whole("tokenMixing: layer", layer, 0)?;
    let s = state().await?;
    let model = s.borrow().model.clone();
    let layers = model.mixing_layers();
    let m = model.token_mixing(layer).ok_or_else(|| js_err(Error::Input(format!("layer {layer} is out of range: the model has {layers}"))))?;
    let out = Object::new();
    set(&out, "kind", m.kind);
    set(&out, "layer", layer as u32);
    set(&out, "layers", layers as u32);
    set(&out, "rows", m.rows as u32);
    set(&out, "cols", m.cols as u32);
    let grid = Array::of2(&(m.grid.0 as u32).into(), &(m.grid.1 as u32).into());
    set(&out, "grid", grid);
    set(&out, "data", Float32Array::from(&m.data[..]));
    set(&out, "note", m.note);
    Ok(out.into())
}

/// Everything the views show of one layer (see `crate::insight::LayerInsight`), with `data`
/// as a Float32Array.
#[wasm_bindgen]
pub async fn insight(layer: f64) -> Result<JsValue, JsError> {
    let layer = whole("insight: layer", layer, 0)?;
    let s = state().await?;
    let model = s.borrow().model.clone();
    let mut li = model.insight(layer).map_err(js_err)?;
    let data = std::mem::take(&mut li.data);
    let out = json(&li)?;
    let _ = Reflect::set(&out, &"data".into(), &Float32Array::from(&data[..]).into());
    Ok(out)
}

/// The latest classified image's top `topK` classes, each logit split into one contribution
/// per token (`crate::models::Explained`).
#[wasm_bindgen]
pub async fn explain(top_k: Option<f64>, cancel_id: Option<f64>) -> Result<JsValue, JsError> {
    let top_k = top_k.map(|k| whole("topK", k, 1)).transpose()?;
    let cancel = cancel_token(cancel_id)?;
    let s = state().await?;
    let (model, input) = {
        let st = s.borrow();
        (st.model.clone(), st.last_input.clone())
    };
    let input = input.ok_or_else(|| js_err("explain: classify an image with this model first"))?;
    let turn = turn(&model).await;
    let ex = model.explain_cancellable(&input, &cancel).await;
    drop(turn);
    note_stop(&ex, &cancel);
    let ex = ex.map_err(js_err)?;
    let classes = Array::new();
    for c in ex.output.top_k(0, top_k.unwrap_or(5)) {
        let o = Object::new();
        set(&o, "index", c as u32);
        set(&o, "label", crate::labels::label(&model.info, c));
        set(&o, "logit", ex.output.logits[c] as f64);
        set(&o, "probability", ex.output.probs[c] as f64);
        set(&o, "bias", ex.bias[c] as f64);
        set(&o, "map", Float32Array::from(ex.map(0, c)));
        classes.push(&o);
    }
    let out = Object::new();
    set(&out, "grid", Array::of2(&(ex.grid.0 as u32).into(), &(ex.grid.1 as u32).into()));
    set(&out, "approximate", ex.approximate);
    set(&out, "classes", classes);
    Ok(out.into())
}

/// Destroys the WebGPU device, as a driver reset or a removed GPU would: for tests of the
/// page's recovery (every later call fails with "GPU device lost…" until a model is loaded
/// again, which makes a new device).
#[wasm_bindgen(js_name = loseDevice)]
pub async fn lose_device() -> Result<(), JsError> {
    let s = state().await?;
    let dev = s.borrow().sel.device.clone();
    match dev.gpu() {
        Some(g) => {
            g.device.destroy();
            // Resolve once the loss is visible to every later call, as it is after a real one.
            g.settle_lost().await;
            Ok(())
        }
        None => Err(js_err("loseDevice: the model runs on the CPU backend, which has no device to lose")),
    }
}
