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

  // In a worker an image travels as an ImageBitmap (transferred) or an ImageData (copied).
  const image = async (img) => {
    if (!call.worker) return img;
    if (typeof ImageData !== 'undefined' && img instanceof ImageData) return img;
    if (typeof ImageBitmap !== 'undefined' && img instanceof ImageBitmap) return img;
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

  return {
    worker: call.worker,
    async loadModel(source = null, { onProgress, name, cache = false, backend: b, precision: p, autotune, signal } = {}) {
      if (b !== undefined && !BACKENDS.includes(b)) throw new Error(`backend ${b}: expected auto, gpu or cpu`);
      if (p !== undefined && !PRECISIONS.includes(p)) throw new Error(`precision ${p}: expected f32 or f16`);
      checkAutotune(autotune);
      if (signal != null && !(typeof AbortSignal !== 'undefined' && signal instanceof AbortSignal)) throw new Error('signal: expected an AbortSignal');
      signal?.throwIfAborted();
      const src = source instanceof ArrayBuffer ? new Uint8Array(source) : typeof source === 'string' ? absolute(source) : source;
      const options = { name, cache, backend: b, precision: p, autotune };
      // Aborted, the load rejects as fetch does, with the signal's reason (an AbortError).
      const aborted = (e) => {
        if (signal?.aborted) throw signal.reason;
        throw e;
      };
      if (call.worker) {
        const load = call('loadModel', [src, { ...options, progress: Boolean(onProgress), abortable: Boolean(signal) }], [], onProgress, signal);
        return load.catch(aborted);
      }
      return call('loadModel', [src, { ...options, onProgress, signal }]).catch(aborted);
    },
    async classify(img, topK = 5) {
      const i = await image(img);
      return call('classify', [i, topK], transfer(i, img));
    },
    async classifyDetailed(img, topK = 5) {
      const i = await image(img);
      return call('classifyDetailed', [i, topK], transfer(i, img));
    },
    tokenMixing: (layer) => call('tokenMixing', [layer]),
    insight: (layer) => call('insight', [layer]),
    explain: (topK = 5) => call('explain', [topK]),
    stageEnergy: () => call('stageEnergy', []),
    cropGeometry: (width, height) => call('cropGeometry', [width, height]),
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

/**
 * A model URL resolved against the page (document.baseURI), so that it names the same file in
 * the worker, whose own URL is js/worker.js, and the same Cache API entry from both. A string
 * that is no URL is passed on as it is (loadModel then says why it cannot be downloaded).
 */
function absolute(url) {
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
  const call = async (method, args) => {
    if (disposed) throw new Error('tokenmix: this classifier was disposed');
    return core[method](...args);
  };
  call.worker = false;
  call.dispose = () => {
    if (!disposed) core.release();
    disposed = true;
  };
  return call;
}

/** Calls into a dedicated module worker, one message each, answered by id. */
function workerCalls(threads) {
  const url = new URL('./worker.js', import.meta.url);
  if (threads !== undefined) url.searchParams.set('threads', threads);
  const w = new Worker(url, { type: 'module', name: 'tokenmix' });
  const pending = new Map();
  let next = 0;
  let failure = null;
  w.onmessage = ({ data }) => {
    const p = pending.get(data.id);
    if (!p) return;
    if (data.progress) {
      p.onProgress?.(...data.progress);
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
  // A signal (loadModel's) cannot travel to the worker: its abort is a message of its own.
  const call = (method, args, transfer = [], onProgress = null, signal = null) => new Promise((resolve, reject) => {
    if (failure) return reject(failure);
    const id = next++;
    const abort = () => w.postMessage({ abort: id });
    signal?.addEventListener('abort', abort, { once: true });
    const done = (settle) => (v) => {
      signal?.removeEventListener('abort', abort);
      settle(v);
    };
    pending.set(id, { resolve: done(resolve), reject: done(reject), onProgress });
    w.postMessage({ id, method, args }, transfer);
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
