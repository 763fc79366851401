// The tokenmix page: pick an image (file, drop, paste, camera, samples), classify it with the
// tokenmix package (js/index.js: its WebAssembly build in js/pkg, `make web`, in a worker),
// show the top-5 and the model's input, load other models (shipped defaults, a local file,
// timm checkpoints from the Hugging Face hub, cached) and draw what the token mixers learned.
//
// This file only starts and wires the modules: page.js (state, the classifier, the call
// queue, errors, status), input.js (images in), models.js (the model picker and loading),
// views.js (predictions, image views, overlay, visualiser; drawing in visualise.js).
// Every call into tokenmix goes through one queue (`exclusive`): the module holds one model,
// and a classification must not run in the middle of a model swap.
//
// window.tokenmixApp = {ready, classifySample(name), loadModelUrl(url), state, ...} is there
// for tests and the console.

import { $, adapterText, clearError, exclusive, HUB, messageOf, reloadModel, SAMPLES, setApi, setStatus, showError, showMissing, state, tm } from './page.js';
import { buildSamples, classifyImageData, classifySample, wireInputs } from './input.js';
import { fitViews, wireEvidence, wireViz } from './views.js';
import { adoptModel, buildModelSelect, loadHubRepo, loadModelBytes, loadModelUrl } from './models.js';

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
// Start-up

async function start() {
  // ?backend=auto|gpu|cpu picks the executor; auto runs WGSL on a hardware GPU and the
  // WebAssembly SIMD kernels where WebGPU is missing or software (SwiftShader).
  const params = new URLSearchParams(location.search);
  const backend = params.get('backend') || 'auto';
  const webgpu = Boolean(navigator.gpu);
  state.webgpu = webgpu;
  // ?worker=0 runs tokenmix on the page's thread (for comparison); by default a worker does.
  const worker = params.get('worker') !== '0';
  // ?model= (below): the embedded model adopted meanwhile leaves it in the address.
  const linked = params.get('model');
  state.linking = Boolean(linked);
  // ?threads=N: the CPU executor's threads (default: the cores, at most 8), where the page is
  // cross-origin isolated (the demo server sends the headers); elsewhere one.
  let threads = params.has('threads') ? Number(params.get('threads')) : undefined;
  if (threads !== undefined && !(Number.isInteger(threads) && threads >= 1 && threads <= 64)) {
    console.warn(`?threads=${params.get('threads')}: expected a whole number from 1 to 64; using the default`);
    threads = undefined;
  }
  let createClassifier;
  try {
    ({ createClassifier } = await import('../js/index.js'));
  } catch (e) {
    $('adapter').textContent = 'not started';
    showError(`Could not load the tokenmix package (js/index.js): ${messageOf(e)}.`);
    return { webgpu, ok: false, error: messageOf(e) };
  }
  try {
    setApi(await createClassifier({ backend, worker, threads }));
    state.adapter = await tm.adapterInfo();
  } catch (e) {
    const msg = messageOf(e);
    $('adapter').textContent = 'not started';
    if (/WebGPU/.test(msg)) {
      // Only a forced GPU backend gets here without an adapter; auto falls back to the CPU.
      showMissing(webgpu ? `Starting the GPU backend failed: ${msg}` : (window.isSecureContext ? null
        : 'This page is not in a secure context, so the browser hides WebGPU: serve it over https or from localhost.'));
    } else {
      showError(`Could not start tokenmix: ${msg}. Build the WebAssembly module with “make web”.`);
    }
    return { webgpu, ok: false, error: msg };
  }
  state.worker = tm.worker;
  const a = state.adapter;
  state.backend = a.backend;
  $('adapter').textContent = adapterText(a);
  // Why the CPU executor has one thread, where more were allowed (hover): e.g. no COOP/COEP.
  $('adapter').title = a.threadsNote ?? '';
  const note = $('backend-note');
  note.hidden = a.backend !== 'cpu';
  note.textContent = a.backend === 'cpu' ? `Running on the CPU (WebAssembly SIMD): ${a.reason}.` : '';
  $('app').hidden = false;

  buildSamples();
  buildModelSelect();
  wireInputs();
  wireViz();
  wireEvidence();
  fitViews();

  try {
    await adoptModel(await exclusive(() => tm.modelInfo()), 'embedded');
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
  // ?model=owner/name (or hf-hub:owner/name, or its address on huggingface.co): a link to the
  // page with that hub model, which loads once the page runs (its download does not hold up
  // the start). The address names the hub model in use from then on (models.js).
  if (linked) loadHubRepo(linked).catch(() => {}).finally(() => { state.linking = false; });
  return { webgpu: state.webgpu, backend: state.backend, ok: true };
}

// ---------------------------------------------------------------------------------------

start().then(resolveReady, (e) => {
  // Anything unexpected: say so, keep the page alive, and let waiters go on.
  console.error(e);
  try { showError(`tokenmix failed to start: ${messageOf(e)}`); } catch { /* no DOM */ }
  resolveReady({ webgpu: state.webgpu, ok: false, error: messageOf(e) });
});
