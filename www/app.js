// The tokenmix page: pick an image (file, drop, paste, camera, samples), classify it with the
// WebAssembly build (www/pkg/tokenmix.js, `make web`), show the top-5 and the model's input,
// load other models (shipped defaults, a local file, timm checkpoints from the Hugging Face
// hub, cached with the Cache API) and draw what the token mixers learned (visualise.js).
//
// Every call into the wasm module goes through one queue (`exclusive`): the module holds one
// model, and a classification must not run in the middle of a model swap.
//
// window.tokenmixApp = {ready, classifySample(name), loadModelUrl(url), state, ...} is there
// for tests and the console.

import * as viz from './visualise.js';

const SAMPLES = [
  'fmnist-0000-boot.png', 'fmnist-0001-pullover.png', 'fmnist-0002-trouser.png', 'fmnist-0004-shirt.png',
  'fmnist-0006-coat.png', 'fmnist-0008-sandal.png', 'fmnist-0009-sneaker.png', 'fmnist-0013-dress.png',
  'fmnist-0018-bag.png', 'fmnist-0019-tshirt.png',
];

// Trained defaults shipped in weights/ (URLs relative to index.html; some may not exist yet).
const SHIPPED = [
  { file: 'weights/mixer_fmnist.safetensors', label: 'MLP-Mixer' },
  { file: 'weights/gmlp_fmnist.safetensors', label: 'gMLP' },
  { file: 'weights/poolformer_fmnist.safetensors', label: 'PoolFormer' },
];

// timm ImageNet-1k checkpoints as they are on the hub (float32 safetensors; sizes rounded).
const HUB_MODELS = [
  { repo: 'timm/mixer_b16_224.goog_in21k_ft_in1k', label: 'MLP-Mixer B/16, ≈240 MB' },
  { repo: 'timm/gmlp_s16_224.ra3_in1k', label: 'gMLP-S/16, ≈78 MB' },
  { repo: 'timm/resmlp_12_224.fb_in1k', label: 'ResMLP-12, ≈61 MB' },
  { repo: 'timm/poolformer_s12.sail_in1k', label: 'PoolFormer-S12, ≈48 MB' },
];

// ImageNet-1k class names for timm checkpoints (which carry no labels): www/imagenet_labels.json
// is the first WordNet lemma of each synset, in class-index (synset) order, made from timm's
// timm/data/_info/imagenet_synsets.txt and imagenet_synset_to_lemma.txt (timm: Apache-2.0;
// the lemmas come from WordNet 3.0, WordNet licence, Princeton University).
const IMAGENET_LABELS_URL = new URL('./imagenet_labels.json', import.meta.url);

const CACHE_NAME = 'tokenmix-models';
const MAX_IMAGE_SIDE = 2048; // larger photos are scaled down before classification
const VIEW_BOX = 280; // CSS px for the image views

// `?hub=http://127.0.0.1:PORT/hub` points hub downloads elsewhere (tests use a local server).
const HUB = hubBase(new URLSearchParams(location.search).get('hub'));
const hubUrl = (repo) => `${HUB}/${repo}/resolve/main/model.safetensors`;

function hubBase(param) {
  const fallback = 'https://huggingface.co';
  if (!param) return fallback;
  try {
    const u = new URL(param, location.href);
    if (u.protocol === 'http:' || u.protocol === 'https:') return u.href.replace(/\/+$/, '');
  } catch { /* fall through */ }
  console.warn(`ignoring ?hub=${param}: not an http(s) URL`);
  return fallback;
}

const $ = (id) => document.getElementById(id);
const messageOf = (e) => (e && typeof e === 'object' && 'message' in e ? e.message : String(e));
// serde-wasm-bindgen may hand maps over as Map; the page wants plain objects.
const plain = (x) => (x instanceof Map ? Object.fromEntries([...x].map(([k, v]) => [k, plain(v)])) : x);

const state = {
  webgpu: null, // navigator.gpu exists: true, false, or null while starting
  backend: null, // 'gpu' or 'cpu' once started
  adapter: null,
  model: null, // description of the loaded model (+ preprocess)
  modelOption: 'embedded', // the select value that names the loaded model
  labels: [],
  generation: 0, // bumps on every model change
  layer: 0,
  layers: 0,
  tokenMixing: null, // {kind, layer, layers, rows, cols, grid} of the drawn layer
  image: null, // {imageData, source}
  result: null, // the last classify() result
  progress: { loaded: 0, total: null, calls: 0 },
  load: { status: 'idle', label: null, error: null },
  lastError: null,
  overlay: null,
  pinned: null,
};

let tm = null; // the wasm module
let vizController = null;

$('error-close').addEventListener('click', clearError);
$('error-reload').addEventListener('click', () => reloadModel().catch(() => {}));

let resolveReady;
const ready = new Promise((r) => { resolveReady = r; });
window.tokenmixApp = {
  ready, state, classifySample, classifyImageData, loadModelUrl, loadModelBytes, reloadModel,
  samples: SAMPLES, hub: HUB,
  get api() { return tm; },
};

// ---------------------------------------------------------------------------------------
// One wasm call at a time.

let queue = Promise.resolve();
function exclusive(fn) {
  const run = queue.then(() => fn());
  queue = run.then(() => {}, () => {});
  return run;
}

// ---------------------------------------------------------------------------------------
// Errors and status

// Rust's gpu::DEVICE_LOST starts every error about a lost device.
const DEVICE_LOST = 'GPU device lost';

function showError(message) {
  state.lastError = message;
  $('error-text').textContent = message;
  // A lost device (driver reset, GPU removed, out of memory) needs a new one: loading the
  // model again makes it, so offer exactly that.
  $('error-reload').hidden = !message.includes(DEVICE_LOST);
  $('error').hidden = false;
}
function clearError() {
  $('error').hidden = true;
  $('error-reload').hidden = true;
  $('error-text').textContent = '';
}

/** Loads the current model again from where it came (on a new device after a loss). */
function reloadModel() {
  const last = state.lastLoad ?? { source: null, opts: { label: 'the embedded default model', option: 'embedded' } };
  return loadModelSource(last.source, last.opts);
}

/** "CPU: 1 thread, wasm simd128 (matrixmultiply) · backend cpu" or the GPU adapter and its GEMM. */
function adapterText(a) {
  return a.backend === 'cpu'
    ? [a.name, 'backend: cpu'].join(' · ')
    : [a.name || 'unnamed adapter', a.apiBackend, a.deviceType, a.gemm && `GEMM: ${a.gemm}`, 'backend: gpu'].filter(Boolean).join(' · ');
}

function showMissing(detail) {
  state.webgpu = false;
  $('app').hidden = true;
  $('webgpu-missing').hidden = false;
  $('adapter').textContent = 'WebGPU unavailable';
  document.body.classList.add('no-webgpu');
  if (detail) {
    $('webgpu-detail').textContent = detail;
    $('webgpu-detail').hidden = false;
  }
}

function setStatus(status, text) {
  state.load.status = status;
  const el = $('model-status');
  el.dataset.state = status;
  el.textContent = text;
}

const mb = (n) => `${(n / 1e6).toFixed(n < 1e7 ? 2 : 1)} MB`;

function onProgress(loaded, total) {
  state.progress = { loaded, total: total ?? null, calls: state.progress.calls + 1 };
  const bar = $('progress');
  $('progress-row').hidden = false;
  if (total && total > 0) {
    bar.max = total;
    bar.value = Math.min(loaded, total);
    $('progress-text').textContent = `${mb(loaded)} / ${mb(total)} (${Math.min(100, Math.round((100 * loaded) / total))} %)`;
  } else {
    bar.removeAttribute('value'); // indeterminate
    $('progress-text').textContent = mb(loaded);
  }
}

function resetProgress() {
  state.progress = { loaded: 0, total: null, calls: 0 };
  const bar = $('progress');
  bar.max = 1;
  bar.value = 0;
  bar.dataset.done = 'false';
  $('progress-text').textContent = '';
}

function finishProgress() {
  const bar = $('progress');
  const { loaded, calls } = state.progress;
  if (!calls) return; // nothing was downloaded (a file from disk)
  bar.max = Math.max(1, loaded);
  bar.value = bar.max;
  bar.dataset.done = 'true';
}

// ---------------------------------------------------------------------------------------
// Start-up

async function start() {
  // ?backend=auto|gpu|cpu picks the executor; auto runs WGSL on a hardware GPU and the
  // WebAssembly SIMD kernels where WebGPU is missing or software (SwiftShader).
  const backend = new URLSearchParams(location.search).get('backend') || 'auto';
  const webgpu = Boolean(navigator.gpu);
  state.webgpu = webgpu;
  try {
    tm = await import('./pkg/tokenmix.js');
  } catch (e) {
    $('adapter').textContent = 'not started';
    showError(`Could not load the WebAssembly build (www/pkg/tokenmix.js): ${messageOf(e)}. Build it with “make web”.`);
    return { webgpu, ok: false, error: messageOf(e) };
  }
  try {
    await tm.default();
    tm.setBackend(backend);
    state.adapter = plain(await tm.adapterInfo());
  } catch (e) {
    // Only a forced GPU backend gets here without an adapter; auto falls back to the CPU.
    showMissing(webgpu ? `Starting the GPU backend failed: ${messageOf(e)}` : (window.isSecureContext ? null
      : 'This page is not in a secure context, so the browser hides WebGPU: serve it over https or from localhost.'));
    return { webgpu, ok: false, error: messageOf(e) };
  }
  const a = state.adapter;
  state.backend = a.backend;
  $('adapter').textContent = adapterText(a);
  const note = $('backend-note');
  note.hidden = a.backend !== 'cpu';
  note.textContent = a.backend === 'cpu' ? `Running on the CPU (WebAssembly SIMD): ${a.reason}.` : '';
  $('app').hidden = false;

  buildSamples();
  buildModelSelect();
  wireInputs();
  wireViz();
  fitViews();

  try {
    await adoptModel(plain(await exclusive(() => tm.modelInfo())), 'embedded');
    setStatus('ok', 'Embedded default model.');
  } catch (e) {
    showError(`Could not read the embedded model: ${messageOf(e)}`);
    return { webgpu: state.webgpu, backend: state.backend, ok: false, error: messageOf(e) };
  }
  try {
    await classifySample(SAMPLES[0]);
  } catch (e) {
    return { webgpu: state.webgpu, backend: state.backend, ok: false, error: messageOf(e) };
  }
  return { webgpu: state.webgpu, backend: state.backend, ok: true };
}

// ---------------------------------------------------------------------------------------
// Images in

function sampleUrl(name) {
  return new URL(`./samples/${name}`, import.meta.url).href;
}

function buildSamples() {
  const host = $('samples');
  host.replaceChildren(...SAMPLES.map((name) => {
    const label = name.replace(/^fmnist-\d+-/, '').replace(/\.png$/, '');
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'sample';
    b.dataset.sample = name;
    b.title = `Sample: ${label}`;
    b.setAttribute('aria-label', `Classify sample: ${label}`);
    const img = new Image(28, 28);
    img.src = sampleUrl(name);
    img.alt = '';
    b.append(img);
    b.addEventListener('click', () => classifySample(name).catch(() => {}));
    return b;
  }));
}

/** Draws an image source onto the original canvas at its own size (at most MAX_IMAGE_SIDE). */
function drawOriginal(source, width, height) {
  const k = Math.min(1, MAX_IMAGE_SIDE / Math.max(width, height));
  const w = Math.max(1, Math.round(width * k)), h = Math.max(1, Math.round(height * k));
  const c = $('original');
  c.width = w;
  c.height = h;
  const ctx = c.getContext('2d', { willReadFrequently: true });
  ctx.imageSmoothingEnabled = true;
  ctx.imageSmoothingQuality = 'high';
  ctx.clearRect(0, 0, w, h);
  ctx.drawImage(source, 0, 0, w, h);
  c.classList.toggle('pixelated', Math.max(w, h) < VIEW_BOX);
  $('original-caption').textContent = `Original · ${width}×${height}${k < 1 ? ` (scaled to ${w}×${h})` : ''}`;
  fitViews();
  return ctx.getImageData(0, 0, w, h);
}

async function classifyBlob(blob, name) {
  clearError();
  let bitmap;
  try {
    // No colour management: the pixels the file holds, as the native CLI reads them.
    bitmap = await createImageBitmap(blob, { colorSpaceConversion: 'none', premultiplyAlpha: 'none' });
  } catch (e) {
    const msg = `Could not read ${name} as an image: ${messageOf(e)}`;
    showError(msg);
    throw new Error(msg);
  }
  const data = drawOriginal(bitmap, bitmap.width, bitmap.height);
  bitmap.close();
  return classifyImageData(data, name);
}

async function classifySample(name) {
  if (!SAMPLES.includes(name)) throw new Error(`unknown sample ${name}`);
  for (const b of document.querySelectorAll('.sample')) b.setAttribute('aria-pressed', String(b.dataset.sample === name));
  let blob;
  try {
    const r = await fetch(sampleUrl(name));
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    blob = await r.blob();
  } catch (e) {
    const msg = `Could not fetch sample ${name}: ${messageOf(e)}`;
    showError(msg);
    throw new Error(msg);
  }
  return classifyBlob(blob, name);
}

let classifySeq = 0;

/** Classifies an ImageData (already drawn on the original canvas) and shows the result. */
async function classifyImageData(imageData, source = 'image') {
  if (!tm) throw new Error('tokenmix is not running');
  state.image = { imageData, source };
  const seq = ++classifySeq;
  $('predictions').setAttribute('aria-busy', 'true');
  let r;
  try {
    r = await exclusive(() => tm.classifyDetailed(imageData, 5));
  } catch (e) {
    const msg = `Classification failed: ${messageOf(e)}`;
    if (seq === classifySeq) {
      showError(msg);
      $('predictions').removeAttribute('aria-busy');
    }
    throw new Error(msg);
  }
  const result = {
    predictions: Array.from(r.predictions, (p) => {
      p = plain(p);
      return { index: p.index, label: state.labels[p.index] ?? p.label, probability: p.probability };
    }),
    timings: { ...plain(r.timings) },
    input: plain(r.input),
    source,
  };
  if (seq === classifySeq) { // a newer request will draw itself
    state.result = result;
    renderPredictions(result.predictions, source);
    renderTimings(result.timings);
    drawEye(result.input);
    updateEnergy();
    $('predictions').removeAttribute('aria-busy');
  }
  // Plain, serialisable summary for callers (tests).
  const { channels, height, width } = result.input ?? {};
  return { predictions: result.predictions, timings: result.timings, input: { channels, height, width }, source };
}

function renderPredictions(preds, source) {
  const ol = $('predictions');
  ol.dataset.source = source;
  ol.dataset.generation = String(state.generation);
  ol.replaceChildren(...preds.map((p, i) => {
    const li = document.createElement('li');
    li.dataset.index = String(p.index);
    li.dataset.label = p.label;
    li.dataset.probability = String(p.probability);
    if (i === 0) li.className = 'top';
    const pct = 100 * p.probability;
    const pctText = pct >= 0.1 || pct === 0 ? `${pct.toFixed(1)} %` : '<0.1 %';
    const name = document.createElement('span');
    name.className = 'label';
    name.textContent = p.label;
    name.title = `class ${p.index}`;
    const bar = document.createElement('span');
    bar.className = 'bar';
    bar.setAttribute('aria-hidden', 'true');
    const fill = document.createElement('span');
    fill.style.width = `${Math.max(0, Math.min(100, pct)).toFixed(2)}%`;
    bar.append(fill);
    const value = document.createElement('span');
    value.className = 'pct';
    value.textContent = pctText;
    li.append(name, bar, value);
    return li;
  }));
}

function renderTimings(t) {
  const ms = (v) => (Number.isFinite(v) ? `${v.toFixed(v < 10 ? 2 : 1)} ms` : '–');
  const total = (t.preprocessMs ?? 0) + (t.forwardMs ?? 0) + (t.readbackMs ?? 0);
  const rows = [
    ['Preprocess', ms(t.preprocessMs)],
    ['Forward', ms(t.forwardMs)],
    ['Read-back', ms(t.readbackMs)],
    ['Total', ms(total)],
    ['Runs on', state.adapter ? [state.adapter.name || 'unnamed adapter', state.adapter.backend].filter(Boolean).join(' · ') : '–'],
  ];
  $('timings').replaceChildren(...rows.flatMap(([k, v]) => {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = v;
    return [dt, dd];
  }));
}

/** The model's input, de-normalised with its mean/std; CSS upscales it nearest-neighbour. */
function drawEye(input) {
  const c = $('eye');
  if (!input || !input.data) return;
  const { channels: C, height: H, width: W, data } = input;
  const plane = H * W;
  const pp = state.model?.preprocess;
  const mean = pp && Array.from(pp.mean ?? []), std = pp && Array.from(pp.std ?? []);
  const known = mean && std && mean.length === C && std.length === C;
  let lo = 0, hi = 1;
  if (!known) { // no preprocess info: stretch to the data's own range
    const s = viz.stats(data);
    lo = s.min;
    hi = s.max > s.min ? s.max : s.min + 1;
  }
  const img = new ImageData(W, H);
  for (let i = 0; i < plane; i++) {
    for (let k = 0; k < 3; k++) {
      const ch = C === 1 ? 0 : Math.min(k, C - 1);
      const x = data[ch * plane + i];
      const v = known ? x * std[ch] + mean[ch] : (x - lo) / (hi - lo);
      img.data[i * 4 + k] = Math.round(Math.max(0, Math.min(1, v)) * 255);
    }
    img.data[i * 4 + 3] = 255;
  }
  c.width = W;
  c.height = H;
  c.getContext('2d').putImageData(img, 0, 0);
  viz.stamp(c, data, { channels: C, height: H, width: W });
  $('eye-caption').textContent = `Model's-eye view · ${C === 1 ? 'grey' : 'RGB'} ${W}×${H}`;
  fitViews();
}

// ---------------------------------------------------------------------------------------
// The two image views and the token overlay

/** The part of the original image the model sees (timm eval: resize, centre crop), as fractions. */
function cropRect() {
  const c = $('original');
  const W = c.width, H = c.height;
  const size = state.model?.inputSize;
  const pp = state.model?.preprocess ?? {};
  if (!size || !W || !H) return { x: 0, y: 0, w: 1, h: 1 };
  const th = Number(size[1]), tw = Number(size[2]);
  const crop = Number(pp.crop_pct ?? pp.cropPct ?? 1) || 1;
  const sh = Math.floor(th / crop), sw = Math.floor(tw / crop);
  let rw, rh;
  if (sh === sw) { // torchvision Resize(int): the shorter side becomes sh
    if (W <= H) { rw = sw; rh = Math.floor((sw * H) / W); } else { rh = sh; rw = Math.floor((sh * W) / H); }
  } else {
    const r = Math.max(sw / W, sh / H);
    rw = Math.round(W * r);
    rh = Math.round(H * r);
  }
  const left = Math.round((rw - tw) / 2), top = Math.round((rh - th) / 2);
  return { x: left / rw, y: top / rh, w: Math.min(1, tw / rw), h: Math.min(1, th / rh) };
}

function fitViews() {
  const dpr = window.devicePixelRatio || 1;
  for (const [baseId, overId] of [['original', 'overlay'], ['eye', 'eye-overlay']]) {
    const base = $(baseId), over = $(overId);
    const avail = base.closest('figure')?.clientWidth || VIEW_BOX;
    const box = Math.min(VIEW_BOX, avail);
    const k = Math.min(box / base.width, box / base.height);
    const w = Math.max(1, Math.round(base.width * k)), h = Math.max(1, Math.round(base.height * k));
    for (const c of [base, over]) {
      c.style.width = `${w}px`;
      c.style.height = `${h}px`;
    }
    over.width = Math.round(w * dpr);
    over.height = Math.round(h * dpr);
  }
  drawOverlays();
}

function drawOverlays() {
  const spec = state.overlay;
  viz.drawOverlay($('overlay'), spec, cropRect());
  viz.drawOverlay($('eye-overlay'), spec, { x: 0, y: 0, w: 1, h: 1 });
  const tip = spec ? `Overlay: ${spec.label}${state.pinned === spec ? ' (pinned; click again to release)' : ''}` : '';
  $('overlay').title = tip;
}

const overlayHooks = {
  show(spec) { state.overlay = spec; drawOverlays(); },
  clear() { state.overlay = state.pinned; drawOverlays(); },
  pin(spec) {
    const same = state.pinned && spec && state.pinned.label === spec.label;
    state.pinned = same ? null : spec;
    state.overlay = state.pinned ?? spec;
    drawOverlays();
  },
};

/** The token under the pointer on one of the image views, or null. */
function tokenAt(ev, canvas, rect) {
  const grid = vizController?.grid;
  if (!grid || !vizController.tokenRow) return null;
  const r = canvas.getBoundingClientRect();
  const u = ((ev.clientX - r.left) / r.width - rect.x) / rect.w;
  const v = ((ev.clientY - r.top) / r.height - rect.y) / rect.h;
  if (!(u >= 0 && u < 1 && v >= 0 && v < 1)) return null;
  const [gh, gw] = grid;
  return Math.floor(v * gh) * gw + Math.floor(u * gw);
}

function wireImageHover(canvas, rectOf) {
  canvas.addEventListener('pointermove', (ev) => {
    if (!vizController?.tokenRow) return; // this mixer has no per-token rows
    const t = tokenAt(ev, canvas, rectOf());
    if (t == null) { overlayHooks.clear(); return; }
    overlayHooks.show(vizController.tokenRow(t));
  });
  canvas.addEventListener('pointerleave', () => overlayHooks.clear());
  canvas.addEventListener('click', (ev) => {
    const t = tokenAt(ev, canvas, rectOf());
    if (t != null) overlayHooks.pin(vizController.tokenRow(t));
  });
}

// ---------------------------------------------------------------------------------------
// Input wiring: file picker, drag and drop, paste, camera

function wireInputs() {
  const dz = $('dropzone');
  $('image-file').addEventListener('change', (ev) => {
    const f = ev.target.files?.[0];
    ev.target.value = '';
    if (f) handleFile(f);
  });
  // Dropping outside the zone must not navigate away from the page.
  window.addEventListener('dragover', (e) => e.preventDefault());
  window.addEventListener('drop', (e) => e.preventDefault());
  dz.addEventListener('dragenter', () => dz.classList.add('over'));
  dz.addEventListener('dragover', (e) => {
    e.preventDefault();
    if (e.dataTransfer) e.dataTransfer.dropEffect = 'copy';
    dz.classList.add('over');
  });
  dz.addEventListener('dragleave', () => dz.classList.remove('over'));
  dz.addEventListener('drop', (e) => {
    e.preventDefault();
    dz.classList.remove('over');
    const f = e.dataTransfer?.files?.[0];
    if (f) handleFile(f);
  });
  document.addEventListener('paste', (e) => {
    const f = [...(e.clipboardData?.files ?? [])].find((x) => x.type.startsWith('image/'));
    if (f) handleFile(f);
  });

  const video = $('camera');
  let stream = null;
  const camButtons = (on) => {
    $('camera-start').disabled = on;
    $('camera-capture').disabled = !on;
    $('camera-stop').disabled = !on;
    video.hidden = !on;
  };
  if (!navigator.mediaDevices?.getUserMedia) {
    $('camera-start').disabled = true;
    $('camera-start').title = 'This browser gives no camera access here (it needs https or localhost).';
  }
  $('camera-start').addEventListener('click', async () => {
    clearError();
    try {
      stream = await navigator.mediaDevices.getUserMedia({ video: { facingMode: 'environment', width: { ideal: 640 } }, audio: false });
      video.srcObject = stream;
      await video.play();
      camButtons(true);
    } catch (e) {
      showError(`Camera: ${messageOf(e)}`);
    }
  });
  $('camera-capture').addEventListener('click', () => {
    if (!video.videoWidth) return;
    const data = drawOriginal(video, video.videoWidth, video.videoHeight);
    classifyImageData(data, 'camera').catch(() => {});
  });
  $('camera-stop').addEventListener('click', () => {
    stream?.getTracks().forEach((t) => t.stop());
    stream = null;
    video.srcObject = null;
    camButtons(false);
  });

  wireImageHover($('overlay'), cropRect);
  wireImageHover($('eye-overlay'), () => ({ x: 0, y: 0, w: 1, h: 1 }));
  let resizeQueued = false;
  window.addEventListener('resize', () => {
    if (resizeQueued) return;
    resizeQueued = true;
    requestAnimationFrame(() => { resizeQueued = false; fitViews(); });
  });
}

function handleFile(f) {
  if (/\.safetensors$/i.test(f.name)) {
    loadModelFile(f).catch(() => {});
  } else if (f.type && !f.type.startsWith('image/')) {
    showError(`${f.name} is not an image (${f.type}); drop a PNG/JPEG/WebP, or a .safetensors model.`);
  } else {
    classifyBlob(f, f.name).catch(() => {});
  }
}

// ---------------------------------------------------------------------------------------
// Models

function buildModelSelect() {
  const sel = $('model-select');
  const opt = (value, text) => Object.assign(document.createElement('option'), { value, textContent: text });
  const group = (label, options) => {
    const g = document.createElement('optgroup');
    g.label = label;
    g.append(...options);
    return g;
  };
  const hubHost = new URL(HUB).host;
  sel.replaceChildren(
    group('Fashion-MNIST, shipped with tokenmix', [
      opt('embedded', 'Embedded default (MLP-Mixer, Fashion-MNIST)'),
      ...SHIPPED.map((m) => opt(`url:${m.file}`, `${m.label} — ${m.file}`)),
    ]),
    group(`ImageNet-1k, timm checkpoints from ${hubHost}`, HUB_MODELS.map((m) => opt(`hub:${m.repo}`, `${m.label} — ${m.repo}`))),
    opt('file', 'Open a .safetensors file…'),
  );
  sel.value = 'embedded';
  sel.addEventListener('change', () => {
    const v = sel.value;
    if (v === 'file') {
      $('model-file').value = '';
      $('model-file').click();
      return;
    }
    if (v === 'current-file') return;
    let job;
    if (v === 'embedded') job = loadModelSource(null, { label: 'the embedded default model', option: 'embedded' });
    else if (v.startsWith('url:')) job = loadModelSource(v.slice(4), { label: v.slice(4), option: v });
    else if (v.startsWith('hub:')) job = loadModelSource(hubUrl(v.slice(4)), { label: v.slice(4), option: v, cacheable: true });
    job?.catch(() => {});
  });
  const file = $('model-file');
  file.addEventListener('change', () => {
    const f = file.files?.[0];
    if (f) loadModelFile(f).catch(() => {});
    else revertSelect();
  });
  file.addEventListener('cancel', revertSelect);
}

function revertSelect() {
  $('model-select').value = state.modelOption;
}

function fileOption(name) {
  const sel = $('model-select');
  let o = sel.querySelector('option[value="current-file"]');
  if (!o) {
    o = document.createElement('option');
    o.value = 'current-file';
    sel.insertBefore(o, sel.querySelector('option[value="file"]'));
  }
  o.textContent = `Loaded: ${name}`;
}

async function loadModelFile(file) {
  let bytes;
  try {
    bytes = new Uint8Array(await file.arrayBuffer());
  } catch (e) {
    const msg = `Could not read ${file.name}: ${messageOf(e)}`;
    showError(msg);
    revertSelect();
    throw new Error(msg);
  }
  return loadModelSource(bytes, { label: file.name, option: 'current-file', fileName: file.name });
}

/** Loads model bytes (ArrayBuffer or Uint8Array). */
function loadModelBytes(bytes, name = 'model.safetensors') {
  return loadModelSource(bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes), { label: name, option: 'current-file', fileName: name });
}

/** Loads a model from a URL (hub URLs go through the Cache API, like the select does). */
function loadModelUrl(url) {
  const abs = new URL(url, document.baseURI).href;
  const sel = $('model-select');
  const match = [...sel.options].find((o) =>
    (o.value.startsWith('url:') && new URL(o.value.slice(4), document.baseURI).href === abs) ||
    (o.value.startsWith('hub:') && hubUrl(o.value.slice(4)) === abs));
  const cacheable = abs.startsWith(`${HUB}/`);
  const name = decodeURIComponent(new URL(abs).pathname.split('/').pop() || abs);
  return loadModelSource(abs, { label: url, option: match?.value ?? 'current-file', fileName: name, cacheable });
}

let loadAbort = null;

/**
 * The one model-loading path. source: null (the embedded default), a URL string, or bytes.
 * Hub URLs are fetched here through the Cache API (progress from the response stream); other
 * URLs go to loadModel() itself, which reports progress. On failure the old model stays.
 */
async function loadModelSource(source, { label, option, cacheable = false, fileName = null }) {
  loadAbort?.abort();
  const abort = new AbortController();
  loadAbort = abort;
  clearError();
  resetProgress();
  $('progress-row').hidden = typeof source !== 'string';
  state.load = { status: 'loading', label, error: null };
  setStatus('loading', `Loading ${label}…`);
  const t0 = performance.now();
  let cache = null, fromCache = false, url = null;
  try {
    let desc;
    if (typeof source === 'string') {
      url = new URL(source, document.baseURI).href;
      cache = cacheable ? await openCache() : null;
      if (cache) {
        const got = await fetchBytes(url, cache, abort.signal);
        fromCache = got.fromCache;
        if (!fromCache) {
          // Cached before loading (Response copies the bytes); deleted again below if they do not load.
          await cache.put(url, new Response(got.bytes, { headers: {
            'Content-Type': 'application/octet-stream', 'Content-Length': String(got.bytes.length) } }))
            .catch((e) => console.warn(`not cached (${messageOf(e)})`));
        }
        if (abort.signal.aborted) throw new DOMException('superseded', 'AbortError');
        setStatus('loading', `Preparing ${label}…`);
        desc = await exclusive(() => tm.loadModel(got.bytes, { name: label }));
      } else {
        desc = await exclusive(() => tm.loadModel(url, { onProgress, name: label }));
      }
    } else {
      desc = await exclusive(() => tm.loadModel(source, { name: label }));
    }
    finishProgress();
    state.lastLoad = { source, opts: { label, option, cacheable, fileName } };
    if (option === 'current-file') fileOption(fileName ?? label);
    await adoptModel(plain(desc), option);
    const info = state.model;
    const secs = ((performance.now() - t0) / 1000).toFixed(1);
    state.load = { status: 'ok', label, error: null };
    setStatus('ok', `Loaded ${info.family}${info.preset ? ` (${info.preset})` : ''} from ${label}${fromCache ? ' (browser cache)' : ''} in ${secs} s.`);
    if (state.image) await classifyImageData(state.image.imageData, state.image.source).catch(() => {});
    return info;
  } catch (e) {
    if (e?.name === 'AbortError') {
      state.load = { status: 'aborted', label, error: null };
      throw e;
    }
    if (cache && url) cache.delete(url).catch(() => {}); // never keep a file that did not load
    // loadModel's errors already start with the model's name (the label we passed).
    const detail = messageOf(e);
    const msg = `Could not load ${label}: ${detail.startsWith(`${label}: `) ? detail.slice(label.length + 2) : detail}`;
    state.load = { status: 'error', label, error: msg };
    showError(msg);
    setStatus('error', `Still using ${state.model ? `${state.model.family}${state.model.preset ? ` (${state.model.preset})` : ''}` : 'the previous model'}.`);
    revertSelect();
    throw new Error(msg);
  }
}

async function openCache() {
  try {
    return 'caches' in window ? await caches.open(CACHE_NAME) : null;
  } catch {
    return null; // e.g. storage disabled: download without caching
  }
}

/** Fetches url (from the cache when there), reading the stream for progress. */
async function fetchBytes(url, cache, signal) {
  const hit = await cache.match(url).catch(() => undefined);
  const resp = hit ?? await fetch(url, { signal });
  if (!resp.ok) throw new Error(`download failed: HTTP ${resp.status}${resp.statusText ? ` ${resp.statusText}` : ''} for ${url}`);
  const total = Number(resp.headers.get('Content-Length')) || null;
  if (!resp.body) {
    const bytes = new Uint8Array(await resp.arrayBuffer());
    onProgress(bytes.length, bytes.length);
    return { bytes, fromCache: !!hit };
  }
  const reader = resp.body.getReader();
  let buf = total ? new Uint8Array(total) : null; // filled in place while the length holds
  const chunks = [];
  let loaded = 0;
  onProgress(0, total);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (buf && loaded + value.length <= buf.length) {
      buf.set(value, loaded);
    } else {
      if (buf) { chunks.push(buf.subarray(0, loaded)); buf = null; }
      chunks.push(value);
    }
    loaded += value.length;
    onProgress(loaded, total && loaded <= total ? total : null);
  }
  let bytes;
  if (buf) {
    bytes = loaded === buf.length ? buf : buf.slice(0, loaded);
  } else {
    bytes = new Uint8Array(loaded);
    let o = 0;
    for (const c of chunks) { bytes.set(c, o); o += c.length; }
  }
  onProgress(loaded, loaded);
  return { bytes, fromCache: !!hit };
}

let imagenetLabels = null;
/** Real class names from the file; placeholders such as "class 7" do not count. */
const hasLabels = (info) => Array.from(info.labels ?? []).some((l, i) => l !== `class ${i}`);

async function labelsFor(info) {
  if (hasLabels(info)) return Array.from(info.labels);
  if (info.classes === 1000) {
    imagenetLabels ??= fetch(IMAGENET_LABELS_URL).then((r) => {
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      return r.json();
    });
    try {
      const l = await imagenetLabels;
      if (Array.isArray(l) && l.length === 1000) return l;
    } catch (e) {
      imagenetLabels = null;
      console.warn(`ImageNet labels unavailable: ${messageOf(e)}`);
    }
  }
  return [];
}

async function adoptModel(desc, option) {
  let info = desc ?? {};
  try {
    const now = plain(await exclusive(() => tm.modelInfo()));
    if (now) info = { ...info, ...now };
  } catch { /* the description from loadModel is enough */ }
  if (info.preprocess) info.preprocess = plain(info.preprocess);
  state.model = info;
  state.generation++;
  state.modelOption = option;
  $('model-select').value = option;
  state.labels = await labelsFor(info);
  state.labelSource = hasLabels(info) ? 'from the model file' : state.labels.length ? 'ImageNet-1k (timm)' : 'class numbers';
  renderModelInfo(info);
  state.overlay = state.pinned = null;
  state.result = null; // energies and the eye view belong to the old model
  state.layer = 0;
  drawOverlays();
  await setupViz();
}

function renderModelInfo(info) {
  const params = Number(info.params);
  const size = info.inputSize ? Array.from(info.inputSize).join('×') : '–';
  const rows = [
    ['Family', info.family ?? '–'],
    ['timm preset', info.preset ?? 'none (a custom shape)'],
    ['Parameters', Number.isFinite(params) ? (params >= 1e6 ? `${(params / 1e6).toFixed(2)} M` : `${(params / 1e3).toFixed(1)} k`) : '–'],
    ['Classes', `${info.classes ?? '–'} · labels ${state.labelSource}`],
    ['Input (C×H×W)', size],
  ];
  if (info.name) rows.push(['Name', info.name]);
  const dl = $('model-info');
  dl.dataset.family = info.family ?? '';
  dl.dataset.preset = info.preset ?? '';
  dl.replaceChildren(...rows.flatMap(([k, v]) => {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = v;
    return [dt, dd];
  }));
}

// ---------------------------------------------------------------------------------------
// Visualiser

function wireViz() {
  const slider = $('layer');
  slider.addEventListener('input', () => {
    state.layer = Number(slider.value);
    $('layer-value').textContent = `${state.layer} / ${Math.max(0, state.layers - 1)}`;
    scheduleViz();
  });
}

async function setupViz() {
  const slider = $('layer');
  if (typeof tm.tokenMixing !== 'function') {
    $('viz-body').replaceChildren(Object.assign(document.createElement('p'), { className: 'muted', textContent: 'This build has no tokenMixing().' }));
    slider.disabled = true;
    return;
  }
  let probe;
  try {
    probe = plain(await exclusive(() => tm.tokenMixing(0)));
  } catch (e) {
    $('viz-body').replaceChildren(Object.assign(document.createElement('p'), { className: 'muted', textContent: `No token-mixing weights to show: ${messageOf(e)}` }));
    slider.disabled = true;
    return;
  }
  state.layers = Math.max(1, Number(probe.layers) || 1);
  slider.max = String(state.layers - 1);
  slider.value = '0';
  slider.disabled = state.layers <= 1;
  $('layer-value').textContent = `0 / ${state.layers - 1}`;
  await scheduleViz(probe);
}

let vizRunning = null, vizDirty = false;

/** Draws the selected layer; slider moves while drawing coalesce into one more draw. */
function scheduleViz(first = null) {
  if (vizRunning) { vizDirty = true; return vizRunning; }
  vizRunning = (async () => {
    let pre = first;
    do {
      vizDirty = false;
      await drawViz(pre);
      pre = null;
    } while (vizDirty);
  })().finally(() => { vizRunning = null; });
  return vizRunning;
}

async function drawViz(pre) {
  const layer = state.layer;
  let t;
  try {
    t = pre && Number(pre.layer ?? 0) === layer ? pre : plain(await exclusive(() => tm.tokenMixing(layer)));
  } catch (e) {
    $('viz-body').replaceChildren(Object.assign(document.createElement('p'), { className: 'muted', textContent: `Layer ${layer}: ${messageOf(e)}` }));
    return;
  }
  const host = $('viz-body');
  vizController = viz.renderTokenMixing(host, t, overlayHooks);
  state.tokenMixing = { kind: t.kind, layer: t.layer ?? layer, layers: t.layers, rows: t.rows, cols: t.cols, grid: Array.from(t.grid ?? []) };
  $('viz-note').textContent = t.note ?? '';
  const section = $('viz');
  section.dataset.kind = t.kind;
  section.dataset.layer = String(layer);
  section.dataset.generation = String(state.generation);
  if (t.kind === 'poolformer') await updateEnergy();
}

async function updateEnergy() {
  const host = document.getElementById('viz-energy');
  if (!host) return;
  const p = (text) => host.replaceChildren(Object.assign(document.createElement('p'), { className: 'muted', textContent: text }));
  if (typeof tm.stageEnergy !== 'function') return p('This build does not report activations (no stageEnergy()).');
  if (!state.result) return p('Classify an image to see where its activations are strong.');
  try {
    const stages = Array.from(await exclusive(() => tm.stageEnergy()) ?? [], plain);
    viz.renderEnergy(host, stages, overlayHooks);
  } catch (e) {
    p(`No activations: ${messageOf(e)}`);
  }
}

// ---------------------------------------------------------------------------------------

start().then(resolveReady, (e) => {
  // Anything unexpected: say so, keep the page alive, and let waiters go on.
  console.error(e);
  try { showError(`tokenmix failed to start: ${messageOf(e)}`); } catch { /* no DOM */ }
  resolveReady({ webgpu: state.webgpu, ok: false, error: messageOf(e) });
});
