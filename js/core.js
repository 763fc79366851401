// The classifier over the wasm module (./pkg, built by `make web`), the same object in a worker
// and on the main thread: index.js uses it directly (worker: false) or through worker.js.

/**
 * Whether `image` is an element with nothing to draw yet: an <img> still loading (it has its
 * width attribute but no pixels) or a video without a frame.
 */
export function notReady(image) {
  return Boolean(image && (('naturalWidth' in image && !(image.complete && image.naturalWidth > 0))
    || ('videoWidth' in image && !(image.readyState >= 2 && image.videoWidth > 0))));
}

/**
 * A Blob or File (an upload, a fetch's body) decoded as the page decodes a file: the pixels it
 * holds, no colour management, as the native CLI reads them. One the browser does not decode is
 * an error that says so.
 */
export async function blobBitmap(blob) {
  try {
    return await createImageBitmap(blob, { colorSpaceConversion: 'none', premultiplyAlpha: 'none' });
  } catch (e) {
    const what = [blob.name, blob.type].filter(Boolean).join(', ');
    throw new Error(`classify: the Blob${what ? ` (${what})` : ''} is not an image this browser decodes: ${e?.message ?? e}`);
  }
}

/**
 * An ImageData from anything a page can hand over (ImageBitmap, canvases, img, video, Blob).
 * A Blob or File is decoded by `decode` (the wasm module's `decodeImage`: the CLI's decoder, so
 * a file gets the CLI's answer), and by the browser where that takes no such format (AVIF, SVG).
 */
export async function toImageData(image, decode = null) {
  if (typeof ImageData !== 'undefined' && image instanceof ImageData) return image;
  if (typeof Blob !== 'undefined' && image instanceof Blob) {
    if (decode) {
      let data;
      try {
        data = decode(new Uint8Array(await image.arrayBuffer()), image.name || null);
      } catch (e) {
        throw new Error(`classify: ${String(e?.message ?? e).replace(/^input: /, '')}`);
      }
      if (data) return data;
    }
    const bitmap = await blobBitmap(image);
    try {
      return await toImageData(bitmap);
    } finally {
      bitmap.close();
    }
  }
  const noPixels = () => new Error('classify: the image has no pixels yet (not loaded, or a video without a frame)');
  if (notReady(image)) throw noPixels();
  const w = image?.naturalWidth || image?.videoWidth || image?.width;
  const h = image?.naturalHeight || image?.videoHeight || image?.height;
  if (!w || !h) throw noPixels();
  const canvas = typeof OffscreenCanvas !== 'undefined' ? new OffscreenCanvas(w, h) : Object.assign(document.createElement('canvas'), { width: w, height: h });
  const ctx = canvas.getContext('2d', { willReadFrequently: true });
  ctx.drawImage(image, 0, 0, w, h);
  return ctx.getImageData(0, 0, w, h);
}

/** How long the threaded build's workers may take to start before the one-thread build runs. */
const POOL_START_MS = 30_000;

/** The thread count `threads: undefined` asks for: the cores, at most 8. */
export const defaultThreads = () => Math.max(1, Math.min(8, globalThis.navigator?.hardwareConcurrency || 1));

/**
 * Why the threaded build cannot run here, or null when it can. It needs shared memory
 * (SharedArrayBuffer, which browsers give only to cross-origin-isolated pages: served with
 * Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp) and
 * a worker: the threads' work is waited for with Atomics.wait, which a page's own thread may
 * not call.
 */
function threadsUnavailable() {
  if (typeof WorkerGlobalScope === 'undefined' || !(self instanceof WorkerGlobalScope)) return "on the page's thread (worker: false); the threads need a worker";
  if (!globalThis.crossOriginIsolated || typeof SharedArrayBuffer === 'undefined') {
    return 'the page is not cross-origin isolated (serve it with Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp)';
  }
  return null;
}

// The one-thread build's module holds one model and one device, and a module is made once per
// URL: each core on a thread gets an instance of its own (the first the plain URL, later ones
// ?instance=N), so that classifiers made with worker: false do not share a model. A released
// core's instance (a disposed classifier's) serves the next one, starting it from the embedded
// model, rather than leaving its memory behind.
const idle = [];
let instances = 0;

async function oneThreadModule() {
  const reused = idle.pop();
  if (reused) return { tm: reused, reused: true };
  const url = new URL('./pkg/tokenmix.js', import.meta.url);
  if (instances > 0) url.searchParams.set('instance', String(instances));
  instances += 1;
  const tm = await import(url.href);
  await tm.default();
  return { tm, reused: false };
}

/**
 * Loads the wasm module and returns the methods both modes expose. With `threads` > 1 where
 * that can run (see `threadsUnavailable`), the threaded build (./pkg-threads: the CPU
 * executor's GEMMs, epilogues and norms on a rayon pool of `threads` Web Workers); else, or if
 * it fails to start, the one-thread build (./pkg), saying why in `adapterInfo().threadsNote`.
 */
export async function createCore({ threads = defaultThreads() } = {}) {
  let tm = null;
  let note = threads > 1 ? threadsUnavailable() : null;
  if (threads > 1 && note === null) {
    try {
      const t = await import(new URL('./pkg-threads/tokenmix.js', import.meta.url).href);
      await t.default();
      // A worker that never starts (no nested workers, say) would otherwise wait for ever.
      let timer;
      const stalled = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`its ${threads} workers did not start within ${POOL_START_MS / 1000} s`)), POOL_START_MS);
      });
      try {
        await Promise.race([t.initThreadPool(threads), stalled]);
      } finally {
        clearTimeout(timer);
      }
      tm = t;
    } catch (e) {
      note = `the threaded build did not start (${e?.message ?? e}); running on one thread`;
    }
  }
  let reused = false;
  const oneThread = !tm;
  if (oneThread) ({ tm, reused } = await oneThreadModule());
  const adapterInfo = async () => ({ ...(await tm.adapterInfo()), threadsNote: note });
  const decode = (bytes, name) => tm.decodeImage(bytes, name);
  // A Blob or File of a format tokenmix reads is decoded and classified inside the module in
  // one call (its pixels never copied out to JavaScript and back); anything else becomes an
  // ImageData first (toImageData: the browser decodes what tokenmix does not read).
  // remember false: the image does not become the latest classified one (what explain explains).
  const classifyDetailed = async (image, topK = 5, remember = true, cancelId) => {
    if (typeof Blob !== 'undefined' && image instanceof Blob) {
      const bytes = new Uint8Array(await image.arrayBuffer());
      const out = await tm.classifyFileDetailed(bytes, image.name || null, topK, cancelId, remember).catch((e) => {
        throw new Error(String(e?.message ?? e).replace(/^input: /, 'classify: '));
      });
      if (out) return out;
      return tm.classifyDetailed(await toImageData(image), topK, cancelId, remember);
    }
    return tm.classifyDetailed(await toImageData(image, decode), topK, cancelId, remember);
  };
  return {
    async init({ backend = 'auto', precision = 'f32', autotune } = {}) {
      tm.setBackend(backend);
      tm.setPrecision(precision);
      tm.setAutotune(autotune);
      // A reused instance has its previous owner's model and device: back to the embedded
      // model, on the executor and precision asked for now.
      if (reused) await tm.loadModel(null, { backend, precision, autotune: autotune ?? null });
      return adapterInfo();
    },
    /** Hands a one-thread instance to the next core on this thread (a disposed classifier). */
    release() {
      if (oneThread && !idle.includes(tm)) idle.push(tm);
    },
    adapterInfo,
    modelInfo: () => tm.modelInfo(),
    async info() {
      return { adapter: await adapterInfo(), model: await tm.modelInfo() };
    },
    // cancelId (a cancellable call's id, from index.js): cancel(id) stops the load at its next tensor.
    loadModel: (source, options = {}, cancelId) => tm.loadModel(source ?? null, cancelId === undefined ? options : { ...options, cancelId }),
    // cancelId: a whole number naming this call for cancel(id) (index.js numbers its calls).
    classify: async (image, topK = 5, remember = true, cancelId) => (await classifyDetailed(image, topK, remember, cancelId)).predictions,
    classifyDetailed,
    decodeImage: (image) => toImageData(image, decode),
    tokenMixing: (layer) => tm.tokenMixing(layer),
    insight: (layer) => tm.insight(layer),
    explain: (topK = 5, cancelId) => tm.explain(topK, cancelId),
    /** Stops the call given cancelId `id` at its next check (the CPU's next step, the GPU's next submission). */
    cancel: (id) => tm.cancelCall(id),
    /**
     * The threaded build's cancel table ({memory, offset, slots}: see src/web.rs), through which
     * the page's thread stops a pass this worker's thread is busy with; null in the one-thread
     * build, whose memory is not shared.
     */
    cancelTable: () => tm.cancelTable(),
    stageEnergy: () => tm.stageEnergy(),
    cropGeometry: (width, height) => tm.cropGeometry(width, height),
    parseHubRepo: (text) => tm.parseHubRepo(String(text ?? '')),
    isCached: (url) => tm.isCached(url),
    clearCache: (url) => tm.clearCache(url ?? null),
    loseDevice: () => tm.loseDevice(),
  };
}
