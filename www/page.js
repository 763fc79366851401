// Shared by the page's modules: constants, the page state, the classifier (`tm`), the one
// queue every call goes through, errors, status and progress.

import { loadModelSource } from './models.js';

export const SAMPLES = [
  'fmnist-0000-boot.png', 'fmnist-0001-pullover.png', 'fmnist-0002-trouser.png', 'fmnist-0004-shirt.png',
  'fmnist-0006-coat.png', 'fmnist-0008-sandal.png', 'fmnist-0009-sneaker.png', 'fmnist-0013-dress.png',
  'fmnist-0018-bag.png', 'fmnist-0019-tshirt.png',
];

// Trained defaults shipped in weights/ (URLs relative to index.html; some may not exist yet).
export const SHIPPED = [
  { file: 'weights/mixer_fmnist.safetensors', label: 'MLP-Mixer' },
  { file: 'weights/gmlp_fmnist.safetensors', label: 'gMLP' },
  { file: 'weights/poolformer_fmnist.safetensors', label: 'PoolFormer' },
];

// timm ImageNet-1k checkpoints as they are on the hub (float32 safetensors; sizes rounded).
export const HUB_MODELS = [
  { repo: 'timm/mixer_b16_224.goog_in21k_ft_in1k', label: 'MLP-Mixer B/16, ≈240 MB' },
  { repo: 'timm/gmlp_s16_224.ra3_in1k', label: 'gMLP-S/16, ≈78 MB' },
  { repo: 'timm/resmlp_12_224.fb_in1k', label: 'ResMLP-12, ≈61 MB' },
  { repo: 'timm/poolformer_s12.sail_in1k', label: 'PoolFormer-S12, ≈48 MB' },
];

// ImageNet-1k class names for timm checkpoints (which carry no labels): www/imagenet_labels.json
// is the first WordNet lemma of each synset, in class-index (synset) order, made from timm's
// timm/data/_info/imagenet_synsets.txt and imagenet_synset_to_lemma.txt (timm: Apache-2.0;
// the lemmas come from WordNet 3.0, WordNet licence, Princeton University).
export const IMAGENET_LABELS_URL = new URL('./imagenet_labels.json', import.meta.url);

export const MAX_IMAGE_SIDE = 2048; // larger photos are shown scaled down (a file is classified at full size)
export const VIEW_BOX = 280; // CSS px for the image views

// `?hub=http://127.0.0.1:PORT/hub` points hub downloads elsewhere (tests use a local server).
export const HUB = hubBase(new URLSearchParams(location.search).get('hub'));
export const hubUrl = (repo) => `${HUB}/${repo}/resolve/main/model.safetensors`;

export function hubBase(param) {
  const fallback = 'https://huggingface.co';
  if (!param) return fallback;
  try {
    const u = new URL(param, location.href);
    if (u.protocol === 'http:' || u.protocol === 'https:') return u.href.replace(/\/+$/, '');
  } catch { /* fall through */ }
  console.warn(`ignoring ?hub=${param}: not an http(s) URL`);
  return fallback;
}

export const $ = (id) => document.getElementById(id);
export const messageOf = (e) => (e && typeof e === 'object' && 'message' in e ? e.message : String(e));

export const state = {
  webgpu: null, // navigator.gpu exists: true, false, or null while starting
  worker: null, // tokenmix runs in a worker
  crop: null, // cropGeometry() of the current image and model
  backend: null, // 'gpu' or 'cpu' once started
  adapter: null,
  model: null, // description of the loaded model (+ preprocess)
  modelOption: 'embedded', // the select value that names the loaded model
  linking: false, // the hub model ?model= names is loading (app.js)
  loadedMeanwhile: null, // a superseded load that still loaded while a newer one runs
  labels: [],
  generation: 0, // bumps on every model change
  layer: 0,
  layers: 0,
  tokenMixing: null, // {kind, layer, layers, rows, cols, grid} of the drawn layer
  image: null, // {imageData (an ImageData, or the image file: a Blob), source, size: {width, height}}
  images: null, // several images that came together (a folder): {items, index, name of the one shown, run, results}
  imageWork: null, // the AbortController of the image's classification and explanation; a newer image aborts it
  result: null, // the last classify() result
  progress: { loaded: 0, total: null, calls: 0 },
  load: { status: 'idle', label: null, error: null },
  lastError: null,
  overlay: null,
  pinned: null,
};

export let tm = null; // the classifier (js/index.js), once started
export function setApi(classifier) {
  tm = classifier;
}

// ---------------------------------------------------------------------------------------
// One wasm call at a time.

export let queue = Promise.resolve();
export function exclusive(fn) {
  const run = queue.then(() => fn());
  queue = run.then(() => {}, () => {});
  return run;
}

// ---------------------------------------------------------------------------------------
// Errors and status

// Rust's gpu::DEVICE_LOST starts every error about a lost device.
export const DEVICE_LOST = 'GPU device lost';

export function showError(message) {
  state.lastError = message;
  $('error-text').textContent = message;
  // A lost device (driver reset, GPU removed, out of memory) needs a new one: loading the
  // model again makes it, so offer exactly that.
  $('error-reload').hidden = !message.includes(DEVICE_LOST);
  $('error').hidden = false;
}
export function clearError() {
  $('error').hidden = true;
  $('error-reload').hidden = true;
  $('error-text').textContent = '';
}

/** Loads the current model again from where it came (on a new device after a loss). */
export function reloadModel() {
  const last = state.lastLoad ?? { source: null, opts: { label: 'the embedded default model', option: 'embedded' } };
  return loadModelSource(last.source, last.opts);
}

/** "CPU: 1 thread, wasm simd128 (gemm128 4x8) · backend cpu" or the GPU adapter and its GEMM. */
export function adapterText(a) {
  return a.backend === 'cpu'
    ? [a.name, 'backend: cpu'].join(' · ')
    : [a.name || 'unnamed adapter', a.apiBackend, a.deviceType, a.gemm && `GEMM: ${a.gemm}`, 'backend: gpu'].filter(Boolean).join(' · ');
}

export function showMissing(detail) {
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

export function setStatus(status, text) {
  state.load.status = status;
  const el = $('model-status');
  el.dataset.state = status;
  el.textContent = text;
}

export const mb = (n) => `${(n / 1e6).toFixed(n < 1e7 ? 2 : 1)} MB`;

export function onProgress(loaded, total) {
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

export function resetProgress() {
  state.progress = { loaded: 0, total: null, calls: 0 };
  const bar = $('progress');
  bar.max = 1;
  bar.value = 0;
  bar.dataset.done = 'false';
  $('progress-text').textContent = '';
}

export function finishProgress() {
  const bar = $('progress');
  const { loaded, calls } = state.progress;
  if (!calls) return; // nothing was downloaded (a file from disk)
  bar.max = Math.max(1, loaded);
  bar.value = bar.max;
  bar.dataset.done = 'true';
}
