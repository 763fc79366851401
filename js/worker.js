// The dedicated worker of createClassifier({worker: true}): the wasm module, downloads,
// preprocessing and every forward pass run here, so the page's thread never waits on them.
// Messages in: {id, method, args, cancellable} | {abort: id}; out: {id, result} | {id, error} |
// {id, progress: [loaded, total]} | {cancelTable} (once, from the threaded build).
// A cancellable call (classify, classifyDetailed, explain; a load with a signal) gets its id
// as its last argument, which an abort cancels.
import { createCore } from './core.js';

// createClassifier passes its `threads` option in the worker's URL (?threads=N).
const threads = Number(new URL(import.meta.url).searchParams.get('threads')) || undefined;
const core = createCore({ threads });
core.catch(() => {}); // reported per call below
// The page's thread stops a pass this thread is busy with through the threaded build's cancel
// table, in the shared memory (index.js).
core.then((c) => {
  const cancelTable = c.cancelTable();
  if (cancelTable) self.postMessage({ cancelTable });
}).catch(() => {});

// The running loads that have a signal on the caller's side, by call id.
const aborts = new Map();
// The cancellable calls under way, by id.
const running = new Set();

self.onmessage = async ({ data }) => {
  if (data && 'abort' in data) {
    aborts.get(data.abort)?.abort();
    if (running.has(data.abort)) core.then((c) => c.cancel(data.abort)).catch(() => {});
    return;
  }
  const { id, method, args = [], cancellable = false } = data ?? {};
  if (cancellable) {
    running.add(id);
    args.push(id);
  }
  // (Before anything is awaited: an abort may be the very next message.)
  if (method === 'loadModel' && args[1] && typeof args[1] === 'object') {
    const { progress, abortable, ...rest } = args[1];
    args[1] = rest;
    if (progress) args[1].onProgress = (loaded, total) => self.postMessage({ id, progress: [loaded, total ?? null] });
    if (abortable) {
      const controller = new AbortController();
      aborts.set(id, controller);
      args[1].signal = controller.signal;
    }
  }
  try {
    const c = await core;
    if (typeof c[method] !== 'function') throw new Error(`tokenmix worker: no method ${method}`);
    const result = await c[method](...args);
    self.postMessage({ id, result });
  } catch (e) {
    self.postMessage({ id, error: e && typeof e === 'object' && 'message' in e ? e.message : String(e) });
  } finally {
    aborts.delete(id);
    running.delete(id);
  }
};
