// The classifier over the wasm module (./pkg, built by `make web`), the same object in a worker
// and on the main thread: index.js uses it directly (worker: false) or through worker.js.

/** An ImageData from anything a page can hand over (ImageBitmap, canvases, img, video). */
export async function toImageData(image) {
  if (typeof ImageData !== 'undefined' && image instanceof ImageData) return image;
  const w = image?.naturalWidth || image?.videoWidth || image?.width;
  const h = image?.naturalHeight || image?.videoHeight || image?.height;
  if (!w || !h) throw new Error('classify: the image has no pixels yet (not loaded, or a video without a frame)');
  const canvas = typeof OffscreenCanvas !== 'undefined' ? new OffscreenCanvas(w, h) : Object.assign(document.createElement('canvas'), { width: w, height: h });
  const ctx = canvas.getContext('2d', { willReadFrequently: true });
  ctx.drawImage(image, 0, 0, w, h);
  return ctx.getImageData(0, 0, w, h);
}

/** Loads the wasm module and returns the methods both modes expose. */
export async function createCore(moduleUrl = new URL('./pkg/tokenmix.js', import.meta.url)) {
  const tm = await import(moduleUrl.href);
  await tm.default();
  return {
    async init({ backend = 'auto', precision = 'f32', autotune } = {}) {
      tm.setBackend(backend);
      tm.setPrecision(precision);
      tm.setAutotune(autotune);
      return tm.adapterInfo();
    },
    adapterInfo: () => tm.adapterInfo(),
    modelInfo: () => tm.modelInfo(),
    async info() {
      return { adapter: await tm.adapterInfo(), model: await tm.modelInfo() };
    },
    loadModel: (source, options = {}) => tm.loadModel(source ?? null, options),
    classify: async (image, topK = 5) => tm.classify(await toImageData(image), topK),
    classifyDetailed: async (image, topK = 5) => tm.classifyDetailed(await toImageData(image), topK),
    tokenMixing: (layer) => tm.tokenMixing(layer),
    insight: (layer) => tm.insight(layer),
    explain: (topK = 5) => tm.explain(topK),
    stageEnergy: () => tm.stageEnergy(),
    cropGeometry: (width, height) => tm.cropGeometry(width, height),
    isCached: (url) => tm.isCached(url),
    clearCache: (url) => tm.clearCache(url ?? null),
    loseDevice: () => tm.loseDevice(),
  };
}
