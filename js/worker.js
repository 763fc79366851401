// The dedicated worker of createClassifier({worker: true}): the wasm module, downloads,
// preprocessing and every forward pass run here, so the page's thread never waits on them.
// Messages in: {id, method, args}; out: {id, result} | {id, error} | {id, progress: [loaded, total]}.
import { createCore } from './core.js';

// createClassifier passes its `threads` option in the worker's URL (?threads=N).
const threads = Number(new URL(import.meta.url).searchParams.get('threads')) || undefined;
const core = createCore({ threads });
core.catch(() => {}); // reported per call below

self.onmessage = async ({ data }) => {
  const { id, method, args = [] } = data ?? {};
  try {
    const c = await core;
    if (typeof c[method] !== 'function') throw new Error(`tokenmix worker: no method ${method}`);
    if (method === 'loadModel' && args[1]?.progress) {
      const { progress, ...rest } = args[1];
      args[1] = { ...rest, onProgress: (loaded, total) => self.postMessage({ id, progress: [loaded, total ?? null] }) };
    }
    const result = await c[method](...args);
    self.postMessage({ id, result });
  } catch (e) {
    self.postMessage({ id, error: e && typeof e === 'object' && 'message' in e ? e.message : String(e) });
  }
};
