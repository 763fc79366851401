// GEMM kernel lab for Chromium's WebGPU on the CPU (SwiftShader): times hand-written WGSL GEMM
// kernels, C[M,N] = A[M,K] * W[N,K]^T, with raw WebGPU (no tokenmix), and checks a few entries
// against a CPU dot product. This is how the register kernel's unrolled form and tile were chosen.
//
//   SHAPE=196x512x2048 python3 tools/swiftshader_gemm_lab/gen.py loops:8:4:8 unr:8:8:8 > /tmp/k.json
//   SHAPE=196x512x2048 ITERS=3 node tools/swiftshader_gemm_lab/lab.mjs /tmp/k.json
//
// Kernel specs (gen.py): loops:R:C:L is the old looped register kernel (R rows x C columns per
// lane, L lanes), unr:R:C:L the same spelled out, unrwt:R:C:L reading W pre-transposed [K,N],
// unrk:R:C:L:S with the k loop unrolled S times, v4:R:C4:L with vec4 columns.
import fs from 'node:fs'; import os from 'node:os'; import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { start } from '../../tests/browser/server.mjs';
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const server = await start(0, { root: ROOT });
const ARGS = ['--headless=new', '--no-sandbox', '--enable-unsafe-webgpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'];
const [M, K, N] = (process.env.SHAPE || '196x512x2048').split('x').map(Number);
const kernels = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'lab-'));
const ctx = await chromium.launchPersistentContext(userDir, { executablePath: '/usr/bin/chromium', headless: true, args: ARGS });
const page = await ctx.newPage();
page.on('console', m => console.log('page:', m.text()));
await page.goto(server.url + '/tests/browser/blank.html');
const res = await page.evaluate(async ({ M, K, N, kernels, iters }) => {
  const adapter = await navigator.gpu.requestAdapter();
  const device = await adapter.requestDevice({ requiredLimits: { maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize } });
  device.lost.then(i => console.log('LOST', i.message)); device.onuncapturederror = ev => console.log('GPUERR', ev.error.message);
  const mk = (n, f) => { const a = new Float32Array(n); for (let i = 0; i < n; i++) a[i] = f(i); return a; };
  const A = mk(M * K, i => ((i % 13) - 6) / 13), W = mk(N * K, i => ((i % 7) - 3) / 7);
  const buf = (data, usage) => { const b = device.createBuffer({ size: data.byteLength, usage, mappedAtCreation: true }); new data.constructor(b.getMappedRange()).set(data); b.unmap(); return b; };
  const S = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  const a = buf(A, S), w = buf(W, S);
  const WT = new Float32Array(N * K); for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) WT[k * N + n] = W[n * K + k];
  const wt = buf(WT, S);
  const c = device.createBuffer({ size: M * N * 4, usage: S });
  const rb = device.createBuffer({ size: M * N * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const tiny = device.createBuffer({ size: 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const p = buf(new Uint32Array([M, N, K, 0]), GPUBufferUsage.UNIFORM);
  // reference: a few entries on CPU
  const ref = (m, n) => { let s = 0; for (let k = 0; k < K; k++) s += A[m * K + k] * W[n * K + k]; return s; };
  const out = [];
  for (const kn of kernels) {
    const module = device.createShaderModule({ code: kn.code });
    const info = await module.getCompilationInfo();
    if (info.messages.some(m => m.type === 'error')) { out.push({ name: kn.name, error: info.messages.map(m => m.lineNum + ':' + m.message).join('\n') }); continue; }
    const pipe = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
    const bg = device.createBindGroup({ layout: pipe.getBindGroupLayout(0), entries: [
      { binding: 0, resource: { buffer: p } }, { binding: 1, resource: { buffer: a } },
      { binding: 2, resource: { buffer: kn.wt ? wt : w } }, { binding: 5, resource: { buffer: c } }] });
    const run = async () => {
      const e = device.createCommandEncoder(); const pass = e.beginComputePass();
      pass.setPipeline(pipe); pass.setBindGroup(0, bg); pass.dispatchWorkgroups(...kn.grid); pass.end();
      e.copyBufferToBuffer(c, 0, tiny, 0, 4); device.queue.submit([e.finish()]); await tiny.mapAsync(GPUMapMode.READ); tiny.unmap();
    };
    const t0 = performance.now(); await run(); const first = performance.now() - t0;
    const times = [];
    for (let i = 0; i < iters; i++) { const t = performance.now(); await run(); times.push(performance.now() - t); }
    times.sort((x, y) => x - y);
    const e = device.createCommandEncoder(); e.copyBufferToBuffer(c, 0, rb, 0, M * N * 4); device.queue.submit([e.finish()]);
    await rb.mapAsync(GPUMapMode.READ); const C = new Float32Array(rb.getMappedRange().slice(0)); rb.unmap();
    let err = 0; for (const [m, n] of [[0, 0], [M - 1, N - 1], [7, 100], [M >> 1, N - 3], [M - 2, 5]]) err = Math.max(err, Math.abs(C[m * N + n] - ref(m, n)));
    // clear c
    const e2 = device.createCommandEncoder(); e2.clearBuffer(c); device.queue.submit([e2.finish()]);
    const med = times[times.length >> 1];
    out.push({ name: kn.name, first_ms: +first.toFixed(1), median_ms: +med.toFixed(1), gflops: +(2 * M * N * K / med / 1e6).toFixed(3), maxerr: err });
  }
  return out;
}, { M, K, N, kernels, iters: Number(process.env.ITERS || 3) });
for (const r of res) console.log(JSON.stringify(r));
await server.close(); await ctx.close(); fs.rmSync(userDir, { recursive: true, force: true });
