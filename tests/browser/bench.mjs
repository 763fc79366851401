// Browser benchmark (not a test): tokenmix in headless Chromium with WebGPU (SwiftShader),
// through the page's own wasm module. For each model: time to first result (loadModel, which
// creates the pipelines and the batch-1 plan, plus the first classify) and the median of the
// warm classify calls.
//
//   node tests/browser/bench.mjs [--iters 5] [name=path.safetensors ...]
//
// Without arguments it measures the shipped Fashion-MNIST models; pass timm checkpoints made by
// tools/timm_checkpoint.py (e.g. mixer_s16_224=/tmp/mixer_s16_224.safetensors) for ImageNet
// sizes. Prints one JSON line per model. Run after `make web`; nothing else should run beside it.
// onnxruntime-web is not part of this script yet.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { start } from './server.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const ARGS = ['--headless=new', '--no-sandbox', '--enable-unsafe-webgpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'];

const argv = process.argv.slice(2);
let iters = 5;
const models = [];
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--iters') iters = Number(argv[++i]);
  else {
    const [name, file] = argv[i].split('=');
    models.push({ name, file: path.resolve(file) });
  }
}
if (models.length === 0) {
  for (const m of ['mixer', 'gmlp', 'poolformer']) models.push({ name: `${m}_fmnist`, file: path.join(ROOT, 'weights', `${m}_fmnist.safetensors`) });
}

// Serve each model through the hub stand-in: /hub/bench/<name>/resolve/main/model.safetensors.
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tokenmix-bench-'));
for (const m of models) {
  fs.mkdirSync(path.join(dir, 'bench', m.name), { recursive: true });
  fs.copyFileSync(m.file, path.join(dir, 'bench', m.name, 'model.safetensors'));
}
const server = await start(0, { root: ROOT, hubDir: dir });
const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tokenmix-chromium-'));
const context = await chromium.launchPersistentContext(userDir, { executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, args: ARGS });
context.setDefaultTimeout(30 * 60_000);
try {
  const page = await context.newPage();
  await page.goto(`${server.url}/tests/browser/blank.html`);
  for (const m of models) {
    const result = await page.evaluate(async ({ url, iters }) => {
      const api = await import('/www/pkg/tokenmix.js');
      await api.default();
      const adapter = await api.adapterInfo();
      const t0 = performance.now();
      const info = await api.loadModel(url);
      const [c, h, w] = info.inputSize;
      const pixels = new Uint8ClampedArray(w * h * 4).map((_, i) => (i * 7919) % 251);
      const image = new ImageData(pixels, w, h);
      await api.classify(image, 5);
      const first = performance.now() - t0;
      const times = [];
      for (let i = 0; i < iters; i++) {
        const t = performance.now();
        await api.classify(image, 5);
        times.push(performance.now() - t);
      }
      times.sort((a, b) => a - b);
      return { adapter: `${adapter.name || 'unnamed adapter'} [${adapter.backend}, ${adapter.deviceType}] gemm ${adapter.gemm}`,
        preset: info.preset, family: info.family, input: info.inputSize, first_result_ms: first,
        warm_median_ms: times[Math.floor(times.length / 2)], iters };
    }, { url: `${server.url}/hub/bench/${m.name}/resolve/main/model.safetensors`, iters });
    console.log(JSON.stringify({ model: m.name, ...result }));
  }
} finally {
  await context.close();
  await server.close();
  fs.rmSync(dir, { recursive: true, force: true });
  fs.rmSync(userDir, { recursive: true, force: true });
}
