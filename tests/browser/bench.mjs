// Browser benchmark (not a test): tokenmix in headless Chromium with WebGPU (SwiftShader here),
// through the page's own wasm module, beside onnxruntime-web (WebGPU and wasm execution
// providers) on the same models, in the same browser, in the same run.
//
//   node tests/browser/bench.mjs [--iters 5] [--ort-iters 3] [--threads 2] [--cpu-profile] [name=path.safetensors ...]
//
// Without model arguments it measures the shipped Fashion-MNIST models. Pass timm checkpoints
// made by tools/timm_checkpoint.py for ImageNet sizes; when `path.onnx` sits beside
// `path.safetensors` (timm_checkpoint.py --onnx writes it, same weights) the model is also run
// through onnxruntime-web, fed the very input tokenmix preprocessed, and the two outputs are
// compared (top-1 and max |Δp| over tokenmix's top 5) before their speed is.
//
// Per engine: time to first result (tokenmix: loadModel, which creates the pipelines and the
// batch-1 plan, plus the first classify; ORT: InferenceSession.create plus the first run) and
// the median of the warm calls. Prints one JSON line per model and a table at the end.
// tokenmix runs twice: its wasm module on the page's thread (one thread), then the package's
// worker at --threads (default 2: the threaded build; 1: the one-thread build in the worker;
// 0 skips it), beside ORT's 2 threads.
// --cpu-profile then samples V8's CPU profiler (DevTools protocol, 100 µs) over `iters` more
// tokenmix classify calls and prints the functions with the most self time (the wasm keeps
// its name section, so these are the Rust functions' names): where the wasm path spends it.
// `make bench-web` installs onnxruntime-web and binaryen (npm, not in package.json: the tests
// do not need them), makes the timm files and runs this. Nothing else should run beside it.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { start } from './server.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const ARGS = ['--headless=new', '--no-sandbox', '--enable-unsafe-webgpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'];
const ORT_DIST = path.join(ROOT, 'node_modules', 'onnxruntime-web', 'dist');

const argv = process.argv.slice(2);
let iters = 5;
let ortIters = 3;
let backend = 'auto';
let ortEps = ['wasm'];
let cpuProfile = false;
let tmThreads = 2;
const models = [];
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--iters') iters = Number(argv[++i]);
  else if (argv[i] === '--ort-iters') ortIters = Number(argv[++i]);
  else if (argv[i] === '--backend') backend = argv[++i];
  else if (argv[i] === '--ort-eps') ortEps = argv[++i].split(',').filter(Boolean);
  else if (argv[i] === '--cpu-profile') cpuProfile = true;
  else if (argv[i] === '--threads') tmThreads = Number(argv[++i]);
  else {
    const [name, file] = argv[i].split('=');
    if (!file) throw new Error(`expected name=path.safetensors, got ${argv[i]}`);
    models.push({ name, file: path.resolve(file) });
  }
}
if (models.length === 0) {
  for (const m of ['mixer', 'gmlp', 'poolformer']) models.push({ name: `${m}_fmnist`, file: path.join(ROOT, 'weights', `${m}_fmnist.safetensors`) });
}
const haveOrt = fs.existsSync(path.join(ORT_DIST, 'ort.webgpu.min.mjs'));
for (const m of models) {
  const onnx = m.file.replace(/\.safetensors$/, '.onnx');
  m.onnx = haveOrt && onnx !== m.file && fs.existsSync(onnx) ? onnx : null;
}
if (!haveOrt && models.some((m) => fs.existsSync(m.file.replace(/\.safetensors$/, '.onnx')))) {
  console.error('onnxruntime-web is not installed (make bench-web installs it): ORT columns skipped');
}

// Serve each model through the hub stand-in: /hub/bench/<name>/resolve/main/model.{safetensors,onnx}.
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tokenmix-bench-'));
for (const m of models) {
  fs.mkdirSync(path.join(dir, 'bench', m.name), { recursive: true });
  fs.symlinkSync(m.file, path.join(dir, 'bench', m.name, 'model.safetensors'));
  if (m.onnx) fs.symlinkSync(m.onnx, path.join(dir, 'bench', m.name, 'model.onnx'));
}
// Cross-origin isolated, so that ORT's wasm backend may use threads as a real deployment would.
const server = await start(0, { root: ROOT, hubDir: dir, isolated: true });
const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tokenmix-chromium-'));
const context = await chromium.launchPersistentContext(userDir, { executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, args: ARGS });
context.setDefaultTimeout(60 * 60_000);
const rows = [];
try {
  const page = await context.newPage();
  page.on('console', (msg) => { if (msg.type() === 'error') console.error(`page: ${msg.text()}`); });
  await page.goto(`${server.url}/tests/browser/blank.html`);
  for (const m of models) {
    const base = `${server.url}/hub/bench/${m.name}/resolve/main`;
    const tm = await page.evaluate(async ({ url, iters, backend }) => {
      const api = await import('/js/pkg/tokenmix.js');
      await api.default();
      api.setBackend(backend);
      const adapter = await api.adapterInfo();
      const t0 = performance.now();
      const info = await api.loadModel(url);
      const load = performance.now() - t0;
      const [c, h, w] = info.inputSize;
      const pixels = new Uint8ClampedArray(w * h * 4).map((_, i) => (i * 7919) % 251);
      const image = new ImageData(pixels, w, h);
      const out = await api.classifyDetailed(image, 5);
      const first = performance.now() - t0;
      const times = [];
      for (let i = 0; i < iters; i++) {
        const t = performance.now();
        await api.classify(image, 5);
        times.push(performance.now() - t);
      }
      times.sort((a, b) => a - b);
      window.benchInput = out.input.data; // what ORT is fed
      window.benchInputSize = [w, h];
      return { backend: adapter.backend, adapter: `${adapter.name || 'unnamed adapter'} [${adapter.apiBackend}, ${adapter.deviceType}] gemm ${adapter.gemm}`,
        preset: info.preset, family: info.family, input: info.inputSize, first_result_ms: first, load_ms: load,
        warm_median_ms: times[Math.floor(times.length / 2)], iters, top5: out.predictions.map((p) => [p.index, p.probability]) };
    }, { url: `${base}/model.safetensors`, iters, backend });
    const row = { model: m.name, ...tm };
    if (cpuProfile) row.cpu_profile = await sampleClassify(page, iters);
    if (tmThreads >= 1) {
      // The package as a page uses it: createClassifier's worker, here with the threaded build
      // (the page is cross-origin isolated), on the same image; its answer beside the above.
      row.threaded = await page.evaluate(async ({ url, iters, backend, threads, top5 }) => {
        const { createClassifier } = await import('/js/index.js');
        const t0 = performance.now();
        const c = await createClassifier({ backend, threads });
        try {
          const adapter = await c.adapterInfo();
          const info = await c.loadModel(url);
          const [, h, w] = info.inputSize;
          const image = new ImageData(new Uint8ClampedArray(w * h * 4).map((_, i) => (i * 7919) % 251), w, h);
          const out = await c.classify(image, 5);
          const first = performance.now() - t0;
          const times = [];
          for (let i = 0; i < iters; i++) {
            const t = performance.now();
            await c.classify(image, 5);
            times.push(performance.now() - t);
          }
          times.sort((a, b) => a - b);
          const maxDp = Math.max(...top5.map(([index, p]) => Math.abs(p - (out.find((o) => o.index === index)?.probability ?? 0))));
          return { threads: adapter.threads, threadsNote: adapter.threadsNote, gemm: adapter.gemm, first_result_ms: first,
            warm_median_ms: times[Math.floor(times.length / 2)], same_top1: out[0].index === top5[0][0], max_dp_top5: maxDp };
        } finally {
          c.dispose();
        }
      }, { url: `${base}/model.safetensors`, iters, backend, threads: tmThreads, top5: tm.top5 });
      if (row.threaded.threads !== tmThreads) throw new Error(`the threaded build ran ${row.threaded.threads} threads, not ${tmThreads}: ${row.threaded.threadsNote}`);
    }
    if (m.onnx) {
      // ORT fixes the wasm thread count at its first use: one fresh page per configuration, wasm
      // at tokenmix's thread count (1) and, where the page is cross-origin isolated, at 2.
      const configs = ortEps.flatMap((ep) => (ep === 'wasm' ? [['wasm', 1], ['wasm', 2]] : [[ep, 0]]));
      for (const [ep, threads] of configs) {
        const key = ep === 'wasm' ? `ort_wasm${threads}` : `ort_${ep}`;
        const input = await page.evaluate(() => Array.from(window.benchInput));
        const ortPage = await context.newPage();
        await ortPage.goto(`${server.url}/tests/browser/blank.html`);
        row[key] = await ortPage.evaluate(async ({ url, ep, threads, iters, shape, top5, input }) => {
          if (threads > 1 && !self.crossOriginIsolated) return null;
          window.benchInput = new Float32Array(input);
          const ort = await import('/node_modules/onnxruntime-web/dist/ort.webgpu.min.mjs');
          ort.env.wasm.wasmPaths = '/node_modules/onnxruntime-web/dist/';
          ort.env.wasm.numThreads = Math.max(1, threads);
          const t0 = performance.now();
          const session = await ort.InferenceSession.create(url, { executionProviders: [ep], graphOptimizationLevel: 'all' });
          const feeds = { [session.inputNames[0]]: new ort.Tensor('float32', window.benchInput, [1, ...shape]) };
          let out = await session.run(feeds);
          const first = performance.now() - t0;
          const times = [];
          for (let i = 0; i < iters; i++) {
            const t = performance.now();
            out = await session.run(feeds);
            times.push(performance.now() - t);
          }
          times.sort((a, b) => a - b);
          const logits = out[session.outputNames[0]].data;
          let max = -Infinity;
          for (const v of logits) max = Math.max(max, v);
          let sum = 0;
          for (const v of logits) sum += Math.exp(v - max);
          let top1 = 0;
          for (let i = 1; i < logits.length; i++) if (logits[i] > logits[top1]) top1 = i;
          const maxDp = Math.max(...top5.map(([i, p]) => Math.abs(Math.exp(logits[i] - max) / sum - p)));
          await session.release();
          return { first_result_ms: first, warm_median_ms: times[Math.floor(times.length / 2)], iters,
            threads: ep === 'wasm' ? ort.env.wasm.numThreads : undefined, top1, same_top1: top1 === top5[0][0], max_dp_top5: maxDp };
        }, { url: `${base}/model.onnx`, ep, threads, iters: ortIters, shape: tm.input, top5: tm.top5, input });
        await ortPage.close();
      }
      for (const k of ['ort_webgpu', 'ort_wasm1', 'ort_wasm2']) if (row[k]) row[`ratio_vs_${k}`] = row.warm_median_ms / row[k].warm_median_ms;
      if (row.threaded && row.ort_wasm2) row.threaded.ratio_vs_ort_wasm2 = row.threaded.warm_median_ms / row.ort_wasm2.warm_median_ms;
    }
    console.log(JSON.stringify(row));
    rows.push(row);
  }
} finally {
  await context.close();
  await server.close();
  fs.rmSync(dir, { recursive: true, force: true });
  fs.rmSync(userDir, { recursive: true, force: true });
}

// V8's sampling profiler over `iters` warm classify calls of the loaded model: the 15
// functions with the most self time, as a share of all samples (idle and GC included).
async function sampleClassify(page, iters) {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 100 });
  await cdp.send('Profiler.start');
  await page.evaluate(async (iters) => {
    const api = await import('/js/pkg/tokenmix.js');
    const pixels = new Uint8ClampedArray(window.benchInputSize[0] * window.benchInputSize[1] * 4).map((_, i) => (i * 104729) % 251);
    const image = new ImageData(pixels, window.benchInputSize[0], window.benchInputSize[1]);
    for (let i = 0; i < iters; i++) await api.classify(image, 5);
  }, iters);
  const { profile } = await cdp.send('Profiler.stop');
  await cdp.detach();
  if (profile.samples.length === 0) throw new Error('--cpu-profile: the profiler took no samples');
  const self = new Map();
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  let total = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    const f = byId.get(id).callFrame;
    const name = f.functionName || `(${f.url ? path.basename(f.url) : 'anonymous'})`;
    self.set(name, (self.get(name) ?? 0) + dt);
    total += dt;
  });
  return [...self].sort((a, b) => b[1] - a[1]).slice(0, 15)
    .map(([name, us]) => ({ function: name, self_ms: us / 1000 / iters, share: us / total }));
}

const ms = (v) => (v === undefined ? '–' : v >= 10_000 ? `${(v / 1000).toFixed(1)} s` : `${v.toFixed(v < 100 ? 1 : 0)} ms`);
for (const r of rows.filter((r) => r.cpu_profile)) {
  console.log(`\n${r.model}: self time per classify (${r.iters} calls sampled)`);
  for (const f of r.cpu_profile) console.log(`${(100 * f.share).toFixed(1).padStart(5)} %  ${f.self_ms.toFixed(1).padStart(7)} ms  ${f.function}`);
}
console.log(`\ntokenmix backend ${rows[0]?.backend ?? '?'}: ${rows[0]?.adapter ?? ''}`);
console.log(`| model | tokenmix first | tokenmix warm | tokenmix ${tmThreads} threads warm | ORT wasm 1 thread warm | ORT wasm 2 threads warm | ORT WebGPU warm | tokenmix / ORT wasm 1t | tokenmix / ORT wasm 2t | tokenmix ${tmThreads}t / ORT wasm 2t | tokenmix / ORT WebGPU | first / warm | agree (top-1, max Δp) |`);
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of rows) {
  const orts = ['ort_wasm1', 'ort_wasm2', 'ort_webgpu'].map((k) => r[k]).filter(Boolean);
  const others = [...orts, ...(r.threaded ? [r.threaded] : [])];
  const agree = others.length ? `${others.every((o) => o.same_top1) ? 'yes' : 'NO'}, ${Math.max(...others.map((o) => o.max_dp_top5)).toExponential(1)}` : '–';
  const ratio = (k) => r[`ratio_vs_${k}`]?.toFixed(2) ?? '–';
  console.log(`| ${r.model} | ${ms(r.first_result_ms)} | ${ms(r.warm_median_ms)} | ${ms(r.threaded?.warm_median_ms)} | ${ms(r.ort_wasm1?.warm_median_ms)} | ${ms(r.ort_wasm2?.warm_median_ms)} | ${ms(r.ort_webgpu?.warm_median_ms)} | ${ratio('ort_wasm1')} | ${ratio('ort_wasm2')} | ${r.threaded?.ratio_vs_ort_wasm2?.toFixed(2) ?? '–'} | ${ratio('ort_webgpu')} | ${(r.first_result_ms / r.warm_median_ms).toFixed(2)} | ${agree} |`);
}
