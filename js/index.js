// tokenmix in a web page: createClassifier() loads the wasm build (./pkg) in a dedicated
// worker (default) or on the calling thread, and returns one object whose methods all return
// promises. See index.d.ts for the types and README.md for an example.
import { createCore, notReady, toImageData } from './core.js';

const BACKENDS = ['auto', 'gpu', 'cpu'];
const PRECISIONS = ['f32', 'f16'];
const checkAutotune = (a) => {
  if (a !== undefined && typeof a !== 'boolean') throw new Error(`autotune ${a}: expected true or false`);
};

/** @param {import('./index.js').ClassifierOptions} [options] */
export async function createClassifier({ worker = true, backend = 'auto', precision = 'f32', autotune, threads } = {}) {
  if (!BACKENDS.includes(backend)) throw new Error(`backend ${backend}: expected auto, gpu or cpu`);
  if (!PRECISIONS.includes(precision)) throw new Error(`precision ${precision}: expected f32 or f16`);
  checkAutotune(autotune);
  if (threads !== undefined && !(Number.isInteger(threads) && threads >= 1 && threads <= 64)) {
    throw new Error(`threads ${threads}: expected a whole number from 1 to 64`);
  }
  const call = worker && typeof Worker !== 'undefined' ? workerCalls(threads) : await inlineCalls(threads);
  try {
    await call('init', [{ backend, precision, autotune }]);
  } catch (e) {
    call.dispose(); // the worker (and its threads) would otherwise live on, unreachable
    throw e;
  }

  // In a worker an image travels as an ImageBitmap (transferred), an ImageData (copied) or a
  // Blob (by reference).
  const image = async (img) => {
    if (!call.worker) return img;
    if (typeof ImageData !== 'undefined' && img instanceof ImageData) return img;
    if (typeof ImageBitmap !== 'undefined' && img instanceof ImageBitmap) return img;
    // A Blob is decoded in the worker, by the CLI's decoder (core.js toImageData).
    if (typeof Blob !== 'undefined' && img instanceof Blob) return img;
    // An <img> still loading, a video without a frame: the same error as on this thread.
    if (notReady(img)) return toImageData(img);
    try {
      return await createImageBitmap(img);
    } catch {
      return toImageData(img); // e.g. a video element without createImageBitmap support
    }
  };
  // Only a bitmap made here is transferred: the caller's own ImageBitmap stays usable (it is copied).
  const transfer = (made, given) => (made !== given && typeof ImageBitmap !== 'undefined' && made instanceof ImageBitmap ? [made] : []);
  // classify(image, topK?, {signal}?) and classify(image, {topK, signal}): aborted, the call
  // stops (see index.d.ts for where) and rejects with the signal's reason, as fetch does.
  const classifyCall = async (method, img, topK, options) => {
    const { k, signal, remember } = callOptions(topK, options);
    signal?.throwIfAborted();
    const i = await image(img);
    if (signal?.aborted) {
      if (i !== img && typeof ImageBitmap !== 'undefined' && i instanceof ImageBitmap) i.close();
      throw signal.reason;
    }
    return unlessAborted(call(method, [i, k, remember], transfer(i, img), null, signal, true), signal);
  };

  return {
    worker: call.worker,
    async loadModel(source = null, { onProgress, name, cache = false, backend: b, precision: p, autotune, resample, hub, signal } = {}) {
      if (b !== undefined && !BACKENDS.includes(b)) throw new Error(`backend ${b}: expected auto, gpu or cpu`);
      if (p !== undefined && !PRECISIONS.includes(p)) throw new Error(`precision ${p}: expected f32 or f16`);
      if (resample !== undefined && !['gpu', 'cpu'].includes(resample)) throw new Error(`resample ${resample}: expected gpu or cpu`);
      checkAutotune(autotune);
      if (signal != null && !(typeof AbortSignal !== 'undefined' && signal instanceof AbortSignal)) throw new Error('signal: expected an AbortSignal');
      signal?.throwIfAborted();
      const src = source instanceof ArrayBuffer ? new Uint8Array(source) : typeof source === 'string' ? absolute(source) : source;
      if (hub !== undefined && typeof hub !== 'string') throw new Error('hub: expected the hub\'s base URL, a string');
      const options = { name, cache, backend: b, precision: p, autotune, resample, hub: hub === undefined ? undefined : absolute(hub) };
      // Aborted, the load rejects as fetch does, with the signal's reason (an AbortError).
      // With a signal the load is cancellable too: an abort after the download stops the
      // conversion and upload at the next tensor (in the threaded worker from this thread; in
      // the one-thread build at the next of the slices its copy and conversion run in).
      const cancellable = Boolean(signal);
      if (call.worker) {
        const load = call('loadModel', [src, { ...options, progress: Boolean(onProgress), abortable: Boolean(signal) }], [], onProgress, signal, cancellable);
        return load.catch(aborted(signal));
      }
      return call('loadModel', [src, { ...options, onProgress, signal }], [], null, signal, cancellable).catch(aborted(signal));
    },
    classify: (img, topK, options) => classifyCall('classify', img, topK, options),
    classifyDetailed: (img, topK, options) => classifyCall('classifyDetailed', img, topK, options),
    tokenMixing: (layer) => call('tokenMixing', [layer]),
    insight: (layer) => call('insight', [layer]),
    async explain(topK, options) {
      const { k, signal } = callOptions(topK, options);
      signal?.throwIfAborted();
      return unlessAborted(call('explain', [k], [], null, signal, true), signal);
    },
    stageEnergy: () => call('stageEnergy', []),
    cropGeometry: (width, height) => call('cropGeometry', [width, height]),
    parseHubRepo: (text) => call('parseHubRepo', [String(text ?? '')]),
    decodeImage: async (img) => call('decodeImage', [await image(img)]),
    info: () => call('info', []),
    adapterInfo: () => call('adapterInfo', []),
    modelInfo: () => call('modelInfo', []),
    isCached: (url) => call('isCached', [absolute(String(url))]),
    clearCache: (url) => call('clearCache', [url == null ? null : absolute(String(url))]),
    loseDevice: () => call('loseDevice', []),
    dispose() {
      call.dispose();
    },
  };
}

/** A classify/explain call's `topK`, `signal` and `remember` (classify's: default true), from
 * (topK, {signal, remember}) or ({topK, signal, remember}). */
function callOptions(topK, options) {
  if (topK !== null && typeof topK === 'object') {
    if (options !== undefined) throw new Error('classify/explain: pass the options once, as (topK, {signal}) or ({topK, signal})');
    options = topK;
    topK = topK.topK;
  }
  const signal = options?.signal ?? null;
  if (signal !== null && !(typeof AbortSignal !== 'undefined' && signal instanceof AbortSignal)) throw new Error('signal: expected an AbortSignal');
  const remember = options?.remember ?? true;
  if (typeof remember !== 'boolean') throw new Error('remember: expected true or false');
  return { k: topK ?? 5, signal, remember };
}

/** A call's rejection, or the signal's reason where its signal aborted it. */
const aborted = (signal) => (e) => {
  if (signal?.aborted) throw signal.reason;
  throw e;
};

/**
 * A cancellable call's promise, which rejects with the signal's reason once the signal aborted
 * before it settled, as fetch's does, also where the pass had ended meanwhile.
 */
const unlessAborted = (promise, signal) => promise.then((v) => {
  if (signal?.aborted) throw signal.reason;
  return v;
}, aborted(signal));

/**
 * A model URL resolved against the page (document.baseURI), so that it names the same file in
 * the worker, whose own URL is js/worker.js, and the same Cache API entry from both. A string
 * that is no URL is passed on as it is (loadModel then says why it cannot be downloaded).
 */
function absolute(url) {
  // timm's name of a model on the hub (hf-hub:owner/name) is no URL: tokenmix resolves it.
  if (/^\s*hf[-_]hub:/.test(url)) return url;
  try {
    return new URL(url, globalThis.document?.baseURI ?? globalThis.location?.href).href;
  } catch {
    return url;
  }
}

/**
 * Calls on this thread (the one-thread build: a page's thread may not wait on others). Each
 * classifier made with `worker: false` has a module instance of its own (js/core.js), so its
 * own model and backend; a disposed one's instance serves the next.
 */
async function inlineCalls(threads) {
  const core = await createCore({ threads });
  let disposed = false;
  let next = 0;
  // A cancellable call gets an id as its last argument; its signal cancels that id. On this
  // thread a CPU pass runs in slices of about 10 ms, between which the event loop runs (the
  // page draws, an abort is read), so the signal stops it at its next step; a GPU pass,
  // between its submissions.
  const call = async (method, args, _transfer, _onProgress, signal = null, cancellable = false) => {
    if (disposed) throw new Error('tokenmix: this classifier was disposed');
    if (!cancellable) return core[method](...args);
    const id = next;
    next = (next + 1) % CANCEL_IDS;
    const cancel = () => core.cancel(id);
    signal?.addEventListener('abort', cancel, { once: true });
    try {
      return await core[method](...args, id);
    } finally {
      signal?.removeEventListener('abort', cancel);
    }
  };
  call.worker = false;
  call.dispose = () => {
    if (!disposed) core.release();
    disposed = true;
  };
  return call;
}

/** Call ids wrap below this: the wasm cancel table's ids are below 2^31 - 1. */
const CANCEL_IDS = 0x7fff_fffe;

/** Calls into a dedicated module worker, one message each, answered by id. */
function workerCalls(threads) {
  const url = new URL('./worker.js', import.meta.url);
  if (threads !== undefined) url.searchParams.set('threads', threads);
  const w = new Worker(url, { type: 'module', name: 'tokenmix' });
  const pending = new Map();
  let next = 0;
  let failure = null;
  // The threaded build's cancel table (worker.js posts it once it has started): an aborted
  // call is stopped from here, in the worker's shared memory, while the worker is busy with it.
  let table = null;
  w.onmessage = ({ data }) => {
    if (data?.cancelTable) {
      table = new Uint32Array(data.cancelTable.memory.buffer, data.cancelTable.offset, data.cancelTable.slots);
      return;
    }
    const p = pending.get(data.id);
    if (!p) return;
    if (data.progress) {
      // A progress message the worker posted before it read the abort can arrive after it:
      // an aborted call reports no more progress (e2e o, 'no progress after the abort').
      if (!p.signal?.aborted) p.onProgress?.(...data.progress);
      return;
    }
    pending.delete(data.id);
    if ('error' in data) p.reject(new Error(data.error));
    else p.resolve(data.result);
  };
  w.onerror = (e) => {
    e.preventDefault?.();
    failure = new Error(`tokenmix worker failed: ${e.message || 'could not start (is ./pkg built? make web)'}`);
    for (const p of pending.values()) p.reject(failure);
    pending.clear();
  };
  // A signal cannot travel to the worker: its abort is a message of its own, which the worker
  // reads when it is not busy (a load's download, a GPU pass's wait, a call still queued, the
  // one-thread build's pauses between a CPU pass's slices). A cancellable call's abort is also
  // written into the threaded build's cancel table, where the pass itself sees it at its next
  // step.
  const call = (method, args, transfer = [], onProgress = null, signal = null, cancellable = false) => new Promise((resolve, reject) => {
    if (failure) return reject(failure);
    const id = next;
    next = (next + 1) % CANCEL_IDS;
    const abort = () => {
      if (cancellable && table) Atomics.store(table, id % table.length, id + 1);
      w.postMessage({ abort: id });
    };
    signal?.addEventListener('abort', abort, { once: true });
    const done = (settle) => (v) => {
      signal?.removeEventListener('abort', abort);
      settle(v);
    };
    pending.set(id, { resolve: done(resolve), reject: done(reject), onProgress, signal });
    w.postMessage({ id, method, args, cancellable }, transfer);
  });
  call.worker = true;
  call.dispose = () => {
    w.terminate();
    failure = new Error('tokenmix: this classifier was disposed');
    for (const p of pending.values()) p.reject(failure);
    pending.clear();
  };
  return call;
}
