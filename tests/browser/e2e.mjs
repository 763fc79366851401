// End-to-end tests of the page (index.html + www/ + the tokenmix package js/ with its wasm builds in js/pkg/ and js/pkg-threads/) in headless
// Chromium with WebGPU (SwiftShader). Run after `make web` and `cargo build --release`:
//
//   npm install && npm run test:browser
//
// Environment: CHROMIUM (default /usr/bin/chromium), TOKENMIX_BIN (default
// target/release/tokenmix; `make test` passes its test-profile build), E2E_TIMEOUT_MS (per
// wait, default 180000), WEB_ROOT (serve another directory as the site root; default the repo
// root). Screenshots go to tests/artifacts/ (git-ignored); page console errors and warnings are
// printed to the log.

import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { start } from './server.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const WEB_ROOT = process.env.WEB_ROOT ? path.resolve(process.env.WEB_ROOT) : ROOT;
const ARTIFACTS = path.join(ROOT, 'tests', 'artifacts');
const FIXTURE = path.join(ROOT, 'tests', 'fixtures', 'poolformer_rgb.safetensors');
const BIN = path.resolve(ROOT, process.env.TOKENMIX_BIN || 'target/release/tokenmix');
const SAMPLE = 'fmnist-0000-boot.png';
const HUB_REPO = 'timm/poolformer_s12.sail_in1k';
// A repository the page does not list: named by the user in "Another model from …".
const TYPED_REPO = 'timm/poolformer_typed.test';
const TIMEOUT = Number(process.env.E2E_TIMEOUT_MS || 180_000);
// Exactly the flags that give headless Chromium a WebGPU adapter here (../shared/design.md).
// The two media flags give getUserMedia Chromium's synthetic camera (a moving test pattern) and
// accept its permission prompt, for the webcam test.
const CHROMIUM_ARGS = ['--headless=new', '--no-sandbox', '--enable-unsafe-webgpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic',
  '--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream'];

let server, context, hubDir, userDir;
// A full-size MLP-Mixer (mixer_s16_224's shapes, random weights, 74 MB) for the worker test.
const BIG_REPO = 'timm/mixer_s16_224.random';

/** A safetensors file of random F32 tensors with these names and shapes. */
function safetensors(tensors) {
  const header = {};
  let offset = 0;
  for (const [name, shape] of tensors) {
    const n = shape.reduce((a, b) => a * b, 1);
    header[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + 4 * n] };
    offset += 4 * n;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const out = Buffer.alloc(8 + json.length + offset);
  out.writeBigUInt64LE(BigInt(json.length), 0);
  out.write(json, 8, 'latin1');
  const data = new Float32Array(out.buffer, out.byteOffset + 8 + json.length, offset / 4);
  let seed = 12345;
  for (let i = 0; i < data.length; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    data[i] = ((seed >>> 8) / (1 << 24) - 0.5) * 0.05;
  }
  return out;
}

/** timm's mixer_s16_224: patch 16, dim 512, depth 8, token MLP 256, channel MLP 2048, 1000 classes. */
function mixerS16() {
  const [d, t, th, ch] = [512, 196, 256, 2048];
  const tensors = [['stem.proj.weight', [d, 3, 16, 16]], ['stem.proj.bias', [d]]];
  for (let i = 0; i < 8; i++) {
    const b = `blocks.${i}`;
    tensors.push([`${b}.norm1.weight`, [d]], [`${b}.norm1.bias`, [d]], [`${b}.mlp_tokens.fc1.weight`, [th, t]], [`${b}.mlp_tokens.fc1.bias`, [th]],
      [`${b}.mlp_tokens.fc2.weight`, [t, th]], [`${b}.mlp_tokens.fc2.bias`, [t]], [`${b}.norm2.weight`, [d]], [`${b}.norm2.bias`, [d]],
      [`${b}.mlp_channels.fc1.weight`, [ch, d]], [`${b}.mlp_channels.fc1.bias`, [ch]], [`${b}.mlp_channels.fc2.weight`, [d, ch]], [`${b}.mlp_channels.fc2.bias`, [d]]);
  }
  tensors.push(['norm.weight', [d]], ['norm.bias', [d]], ['head.weight', [1000, d]], ['head.bias', [1000]]);
  return safetensors(tensors);
}

before(async () => {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  // The hub stand-in: $HUB_DIR/timm/<repo>/model.safetensors, served as
  // /hub/timm/<repo>/resolve/main/model.safetensors. A tiny PoolFormer, not a real s12.
  hubDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tokenmix-hub-'));
  fs.mkdirSync(path.join(hubDir, HUB_REPO), { recursive: true });
  fs.copyFileSync(FIXTURE, path.join(hubDir, HUB_REPO, 'model.safetensors'));
  fs.mkdirSync(path.join(hubDir, TYPED_REPO), { recursive: true });
  fs.copyFileSync(FIXTURE, path.join(hubDir, TYPED_REPO, 'model.safetensors'));
  fs.mkdirSync(path.join(hubDir, BIG_REPO), { recursive: true });
  fs.writeFileSync(path.join(hubDir, BIG_REPO, 'model.safetensors'), mixerS16());
  process.env.HUB_DIR = hubDir;
  server = await start(0, { root: WEB_ROOT, hubDir });
  userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tokenmix-chromium-'));
  context = await chromium.launchPersistentContext(userDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 1000 },
  });
  context.setDefaultTimeout(TIMEOUT);
});

after(async () => {
  await context?.close();
  await server?.close();
  for (const d of [hubDir, userDir]) if (d) fs.rmSync(d, { recursive: true, force: true });
});

/** Opens the page, logs its console errors and page errors, waits for tokenmixApp.ready. */
/**
 * Page-side helpers, added to every page openPage opens:
 * - `abortTries(api, start, ms, fractions, stopped)` calls `start(signal)` and aborts it
 *   `f * ms` later, for each fraction `f` until a try `stopped` (default: midway), and returns
 *   the tries: what the call settled with, how soon after the abort (for the log only, never
 *   asserted), and the passes the abort stopped before they began and midway
 *   (`adapterInfo().cancelled`);
 * - `watchTimer(ms)` starts a timer every `ms` and returns a function that stops it and says
 *   how often it ran and its longest wait: whether this thread was free meanwhile.
 */
const PAGE_HELPERS = `window.abortTries = async (api, start, ms, fractions, stopped = (t) => t.midPass > 0) => {
  const counts = async () => (await api.adapterInfo()).cancelled;
  const tries = [];
  for (const f of fractions) {
    const ac = new AbortController();
    const before = await counts();
    const call = start(ac.signal).then((v) => ({ ok: v }), (e) => ({ error: e?.message ?? String(e), name: e?.name }));
    await new Promise((res) => setTimeout(res, ms * f));
    ac.abort();
    const aborted = performance.now();
    const got = await call;
    const answeredMs = performance.now() - aborted;
    const after = await counts();
    const t = { f, got, answeredMs, midPass: after.midPass - before.midPass, beforeStart: after.beforeStart - before.beforeStart };
    tries.push(t);
    if (stopped(t)) break;
  }
  return tries;
};
window.watchTimer = (ms) => {
  let last = performance.now(), maxGap = 0, ticks = 0;
  const timer = setInterval(() => {
    const t = performance.now();
    maxGap = Math.max(maxGap, t - last);
    last = t;
    ticks++;
  }, ms);
  return () => {
    clearInterval(timer);
    return { ticks, maxGap };
  };
};`;

async function openPage(tag, query = '', initScript = null, ctx = context, base = server.url) {
  const page = await ctx.newPage();
  const pageErrors = [];
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') console.log(`[${tag}] console.${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => {
    pageErrors.push(e.message);
    console.log(`[${tag}] page error: ${e.stack || e.message}`);
  });
  if (initScript) await page.addInitScript(initScript);
  await page.goto(`${base}/index.html${query}`);
  await page.addScriptTag({ content: PAGE_HELPERS });
  await page.waitForFunction(() => window.tokenmixApp, null, { timeout: 30_000 });
  const status = await page.evaluate(() => window.tokenmixApp.ready);
  console.log(`[${tag}] ready: ${JSON.stringify(status)}; adapter: ${await page.textContent('#adapter')}`);
  return { page, pageErrors, status };
}

/** The page started; `backend` ('gpu' or 'cpu'), when given, is the executor it must have chosen. */
function assertStarted(status, backend = null) {
  assert.equal(status.ok, true, `the page did not start: ${status.error ?? ''}`);
  if (backend) assert.equal(status.backend, backend, `the page runs on ${status.backend}, expected ${backend}`);
}

const shot = (page, name) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });

/** What the page shows in #predictions. */
/**
 * A PNG of `width` x `height`, 8 bits a channel, RGB (`channels` 3) or RGBA (4), whose pixel
 * (x, y) is `pixel(x, y)`: written here, so that a test controls every byte (a canvas would
 * premultiply alpha and lose a transparent pixel's colour).
 */
function png(width, height, channels, pixel) {
  const raw = Buffer.alloc((width * channels + 1) * height);
  for (let y = 0; y < height; y++) {
    const row = y * (width * channels + 1); // filter byte 0: none
    for (let x = 0; x < width; x++) raw.set(pixel(x, y).slice(0, channels), row + 1 + x * channels);
  }
  const chunk = (type, data) => {
    const head = Buffer.alloc(4);
    head.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(zlib.crc32(body));
    return Buffer.concat([head, body, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, channels === 4 ? 6 : 2, 0, 0, 0], 8);
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk('IHDR', ihdr), chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

/** A baseline TIFF (uncompressed RGB, 8 bits a channel, one strip) of `width` x `height`,
 * pixel (x, y) `pixel(x, y)`: a format Chromium does not decode, tokenmix does. */
function tiff(width, height, pixel) {
  const entries = [[256, 4, width], [257, 4, height], [258, 3, null], [259, 3, 1], [262, 3, 2], [273, 4, null],
    [277, 3, 3], [278, 4, height], [279, 4, width * height * 3], [284, 3, 1]];
  const ifdEnd = 8 + 2 + entries.length * 12 + 4;
  const [bitsAt, dataAt] = [ifdEnd, ifdEnd + 6];
  const out = Buffer.alloc(dataAt + width * height * 3);
  out.write('II', 0, 'latin1');
  out.writeUInt16LE(42, 2);
  out.writeUInt32LE(8, 4);
  out.writeUInt16LE(entries.length, 8);
  entries.forEach(([tag, type, value], i) => {
    const at = 10 + i * 12;
    out.writeUInt16LE(tag, at);
    out.writeUInt16LE(type, at + 2);
    out.writeUInt32LE(tag === 258 ? 3 : 1, at + 4);
    const v = tag === 258 ? bitsAt : tag === 273 ? dataAt : value;
    if (type === 3 && tag !== 258) out.writeUInt16LE(v, at + 8);
    else out.writeUInt32LE(v, at + 8);
  });
  for (let i = 0; i < 3; i++) out.writeUInt16LE(8, bitsAt + 2 * i);
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) out.set(pixel(x, y), dataAt + (y * width + x) * 3);
  return out;
}

const shownPredictions = (page) => page.$$eval('#predictions li', (lis) => lis.map((li) => ({
  index: Number(li.dataset.index), label: li.dataset.label, probability: Number(li.dataset.probability),
})));

function cliClassify(image) {
  assert.ok(fs.existsSync(BIN), `${BIN} is missing: run cargo build --release, or set TOKENMIX_BIN`);
  const out = execFileSync(BIN, ['classify', '--json', '--top-k', '5', image], { cwd: ROOT, encoding: 'utf8' });
  const json = JSON.parse(out.slice(out.indexOf('[')));
  return json[0].predictions;
}

/**
 * `bytes` written to `dir/name` and picked on the page: shown, and answered as `tokenmix
 * classify` answers the file (the same classes, probabilities to 1e-5).
 */
async function pickedAnswersAsTheCli(page, tag, dir, name, bytes) {
  const file = path.join(dir, name);
  fs.writeFileSync(file, bytes);
  await page.setInputFiles('#image-file', file);
  await page.waitForFunction((s) => document.querySelector('#predictions').dataset.source === s, name);
  const [want, got] = [cliClassify(file), await shownPredictions(page)];
  const timing = await page.textContent('#timings');
  assert.match(await page.textContent('#original-caption'), new RegExp(`^Original · ${name} · \\d+×\\d+`), `${name}: shown`);
  console.log(`[${tag}] ${name}: page ${JSON.stringify(got.map((p) => [p.index, p.probability]))}, CLI ${JSON.stringify(want.map((p) => [p.index, p.probability]))}; ${timing}`);
  assert.deepEqual(got.map((p) => p.index), want.map((p) => p.index), `${name}: the CLI's classes`);
  got.forEach((p, i) => assert.ok(Math.abs(p.probability - want[i].probability) <= 1e-5, `${name}: class ${p.index}: ${p.probability} vs CLI ${want[i].probability}`));
}

test('a. the default model classifies a sample as the native CLI does', { timeout: 4 * TIMEOUT }, async () => {
  const cli = cliClassify(`www/samples/${SAMPLE}`);
  const { page, pageErrors, status } = await openPage('a');
  // Chromium's only adapter here is SwiftShader, a software rasteriser: auto picks the CPU.
  assert.equal(status.webgpu, true, 'this Chromium has navigator.gpu');
  assertStarted(status, 'cpu');
  assert.notEqual((await page.textContent('#adapter')).trim(), '');

  const r = await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
  console.log(`[a] cli: ${JSON.stringify(cli)}\n[a] page: ${JSON.stringify(r.predictions)}; timings ${JSON.stringify(r.timings)}`);
  assert.equal(r.predictions.length, 5);
  assert.equal(r.predictions[0].index, cli[0].index, 'top-1 class differs from the CLI');
  assert.ok(Math.abs(r.predictions[0].probability - cli[0].probability) <= 1e-3,
    `top-1 probability ${r.predictions[0].probability} vs CLI ${cli[0].probability}`);
  for (const c of cli) { // the rest of the top 5, where both list the class
    const p = r.predictions.find((q) => q.index === c.index);
    assert.ok(p, `class ${c.index} of the CLI's top 5 is in the page's`);
    assert.ok(Math.abs(p.probability - c.probability) <= 1e-3, `class ${c.index}: ${p.probability} vs CLI ${c.probability}`);
  }
  for (let i = 1; i < r.predictions.length; i++) assert.ok(r.predictions[i - 1].probability >= r.predictions[i].probability);
  // The API's plain form: classify(imageData, topK) resolves to [{index, label, probability}].
  const plain = await page.evaluate(async () => {
    const out = await window.tokenmixApp.api.classify(window.tokenmixApp.state.image.imageData, 3);
    return { isArray: Array.isArray(out), items: out.map((p) => ({ index: p.index, label: p.label, probability: p.probability })) };
  });
  assert.equal(plain.isArray, true);
  assert.deepEqual(plain.items.map((p) => [p.index, p.probability]), r.predictions.slice(0, 3).map((p) => [p.index, p.probability]));
  assert.ok(plain.items.every((p) => typeof p.label === 'string' && p.label.length > 0));

  // The DOM shows the same thing: labelled bars, timings, the model's-eye view.
  const shown = await shownPredictions(page);
  assert.equal(shown.length, 5);
  assert.equal(shown[0].index, cli[0].index);
  assert.ok(Math.abs(shown[0].probability - cli[0].probability) <= 1e-3);
  assert.ok(shown[0].label.length > 0);
  const timings = await page.textContent('#timings');
  assert.match(timings, /Forward/);
  assert.match(timings, /ms/);
  const eye = await page.$eval('#eye', (c) => ({ ...c.dataset, width: c.width, height: c.height }));
  assert.equal(Number(eye.count), r.input.channels * r.input.height * r.input.width);
  assert.equal(eye.width, r.input.width);
  await shot(page, 'e2e-a-default-model');

  // Image files picked on the page are answered as the CLI answers them, to float rounding:
  // decoded by the CLI's own decoder in the module, at full size. A PNG whose transparent
  // pixels hold colour (a canvas's decode loses it; PIL's convert("RGB") keeps it, and the
  // CLI), a photo-sized one (the page used to scale it to 2048 px, then box-shrink it; e2e `i` picks it
  // on the WGSL path), and a
  // TIFF (Chromium does not decode one; the page said it "could not read" it).
  const files = fs.mkdtempSync(path.join(os.tmpdir(), 'tokenmix-files-'));
  const made = [
    ['transparent.png', png(64, 48, 4, (x, y) => [200 - 3 * x, 40 + 4 * y, 250 - 2 * x, x < 24 ? 0 : x < 30 ? 9 : 255])],
    ['large.png', png(2400, 1800, 3, (x, y) => [(x * 7 + y) & 255, (y * 3 + (x >> 4)) & 255, ((x ^ y) >> 3) & 255])],
    // A TIFF, which Chromium does not decode: shown, and answered, as tokenmix decodes it.
    ['scan.tif', tiff(300, 200, (x, y) => [(x * 5) & 255, (y * 9 + x) & 255, x > 150 ? 230 : 20])],
  ];
  for (const [name, bytes] of made) {
    await pickedAnswersAsTheCli(page, 'a', files, name, bytes);
    if (name === 'scan.tif') await shot(page, 'e2e-a-tiff');
  }
  fs.rmSync(files, { recursive: true, force: true });
  assert.deepEqual(pageErrors, []);
  await page.close();
});

test('b. the visualiser draws the token-mixing weights', { timeout: 4 * TIMEOUT }, async () => {
  const { page, pageErrors, status } = await openPage('b');
  assertStarted(status);

  // What the API says layer L's weights are, from the page's own classifier (in its worker).
  const weights = (layer) => page.evaluate(async (l) => {
    const t = await window.tokenmixApp.api.tokenMixing(l);
    let sum = 0, abs = 0;
    for (const v of t.data) { sum += v; abs += Math.abs(v); }
    const rows = [];
    for (let r = 0; r < t.rows; r++) {
      let s = 0, min = Infinity, max = -Infinity;
      for (let c = 0; c < t.cols; c++) {
        const v = t.data[r * t.cols + c];
        s += v; min = Math.min(min, v); max = Math.max(max, v);
      }
      rows.push({ sum: s, min, max });
    }
    return { kind: t.kind, layer: t.layer, layers: t.layers, rows: t.rows, cols: t.cols, grid: Array.from(t.grid), length: t.data.length, sum, abs, rowStats: rows };
  }, layer);

  // The canvases drawn for the current layer: their stamps and whether they hold real pixels.
  const drawn = () => page.evaluate(() => {
    const canvases = [...document.querySelectorAll('#viz canvas[data-checksum]')];
    const pixels = (c) => {
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      const colours = new Set();
      let painted = 0, nonWhite = 0;
      for (let i = 0; i < d.length; i += 4) {
        if (d[i + 3] === 0) continue;
        painted++;
        colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
        if (Math.min(d[i], d[i + 1], d[i + 2]) < 235) nonWhite++;
      }
      return { painted, nonWhite, colours: colours.size };
    };
    const viz = document.querySelector('#viz');
    return {
      kind: viz.dataset.kind, layer: Number(viz.dataset.layer),
      slider: { min: Number(document.querySelector('#layer').min), max: Number(document.querySelector('#layer').max) },
      legend: document.querySelectorAll('#viz [data-testid="viz-legend"]').length,
      canvases: canvases.map((c) => ({
        testid: c.dataset.testid, unit: c.dataset.unit == null ? null : Number(c.dataset.unit),
        checksum: Number(c.dataset.checksum), min: Number(c.dataset.min), max: Number(c.dataset.max),
        count: Number(c.dataset.count), width: c.width, height: c.height, ...pixels(c),
      })),
      units: document.querySelector('#viz [data-testid="viz-units"]')?.dataset.checksum ?? null,
    };
  });

  const near = (a, b, scale) => Math.abs(a - b) <= 1e-9 * Math.max(1, scale);
  const checkLayer = (w, d) => {
    assert.equal(d.kind, w.kind);
    assert.equal(d.slider.max, w.layers - 1, 'layer slider range');
    assert.ok(d.legend >= 1, 'a colour legend');
    if (w.kind === 'mixer') {
      const [gh, gw] = w.grid;
      assert.equal(gh * gw, w.cols);
      const units = d.canvases.filter((c) => c.testid === 'viz-unit');
      assert.equal(units.length, w.rows, 'one canvas per token-MLP unit');
      assert.deepEqual([...new Set(units.map((c) => c.unit))].sort((a, b) => a - b), [...Array(w.rows).keys()]);
      const total = units.reduce((s, c) => s + c.checksum, 0);
      assert.ok(near(total, w.sum, w.abs), `unit canvases sum to ${total}, tokenMixing to ${w.sum}`);
      assert.ok(near(Number(d.units), w.sum, w.abs), 'units grid checksum');
      for (const c of units.slice(0, 8)) {
        const row = w.rowStats[c.unit];
        assert.ok(near(c.checksum, row.sum, w.abs), `unit ${c.unit} checksum`);
        assert.equal(c.min, row.min);
        assert.equal(c.max, row.max);
        assert.equal(c.width, gw);
        assert.equal(c.height, gh);
      }
      const first = units[0];
      assert.equal(first.painted, gh * gw, 'every token of the unit is painted');
      assert.ok(first.nonWhite > 0 && first.colours > 1, 'the unit canvas shows weights, not background');
    } else {
      const m = d.canvases.find((c) => c.testid === 'viz-matrix' || c.testid === 'viz-pool-matrix' || c.testid === 'viz-pool-kernel');
      assert.ok(m, 'a matrix canvas');
      if (m.testid !== 'viz-pool-kernel') assert.ok(near(m.checksum, w.sum, w.abs), `matrix checksum ${m.checksum} vs ${w.sum}`);
      assert.ok(m.nonWhite > 0 && m.colours > 1, 'the matrix canvas shows weights, not background');
    }
  };

  const w0 = await weights(0);
  const d0 = await drawn();
  console.log(`[b] layer 0: ${w0.kind}, ${w0.rows}x${w0.cols}, grid ${w0.grid}, ${w0.layers} layers, sum ${w0.sum}`);
  assert.equal(d0.layer, 0);
  checkLayer(w0, d0);

  // Hovering a unit (or a matrix row) lays it over the input image.
  const target = w0.kind === 'mixer' ? '[data-testid="viz-unit"]' : '[data-testid="viz-matrix"]';
  assert.ok(await page.$(target), `the visualiser has ${target}`);
  await page.hover(target);
  const overlay = await page.$eval('#overlay', (c) => c.dataset.checksum ?? null);
  assert.ok(overlay != null, 'hover draws the overlay');
  await page.locator('#viz').screenshot({ path: path.join(ARTIFACTS, 'e2e-b-visualiser.png') });

  // The slider redraws another layer from that layer's weights (the default Mixer has 6).
  assert.ok(w0.layers > 1, 'the default model has several layers to slide through');
  {
    const last = w0.layers - 1;
    await page.$eval('#layer', (el, v) => {
      el.value = String(v);
      el.dispatchEvent(new Event('input', { bubbles: true }));
    }, last);
    await page.waitForFunction((v) => document.querySelector('#viz').dataset.layer === String(v), last);
    const wl = await weights(last);
    assert.notEqual(wl.sum, w0.sum, 'different layers have different weights');
    checkLayer(wl, await drawn());
  }
  await shot(page, 'e2e-b-visualiser-page');
  assert.deepEqual(pageErrors, []);
  await page.close();
});

test('c. a timm checkpoint from the hub stand-in downloads with progress, then classifies', { timeout: 4 * TIMEOUT }, async () => {
  const hub = `${server.url}/hub`;
  const { page, pageErrors, status } = await openPage('c', `?hub=${encodeURIComponent(hub)}`);
  assertStarted(status);
  assert.equal(await page.evaluate(() => window.tokenmixApp.hub), hub);

  // Waits for the load of `label` to end (ok or not: the caller checks which).
  const loadEnded = (label) => page.waitForFunction((repo) => {
    const l = window.tokenmixApp.state.load;
    return l.label === repo && l.status !== 'loading';
  }, label);
  await page.selectOption('#model-select', `hub:${HUB_REPO}`);
  await loadEnded(HUB_REPO);
  const load = await page.evaluate(() => window.tokenmixApp.state.load);
  assert.equal(load.status, 'ok', `load failed: ${load.error}`);

  const progress = await page.evaluate(() => {
    const p = document.querySelector('#progress');
    return { value: p.value, max: p.max, done: p.dataset.done, ...window.tokenmixApp.state.progress };
  });
  console.log(`[c] progress: ${JSON.stringify(progress)}`);
  assert.ok(progress.calls >= 1, 'download progress was reported');
  assert.equal(progress.loaded, fs.statSync(FIXTURE).size);
  assert.ok(progress.max > 0);
  assert.equal(progress.value, progress.max, 'the progress bar reached its end');
  assert.equal(progress.done, 'true');

  const model = await page.evaluate(() => window.tokenmixApp.state.model);
  console.log(`[c] model: ${JSON.stringify({ ...model, labels: model.labels?.length })}`);
  assert.match(model.family, /poolformer/i);
  assert.equal(model.preset ?? null, null, 'the tiny fixture matches no timm preset');
  assert.match(await page.textContent('#model-info'), /none/);

  const r = await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
  assert.ok(r.predictions.length > 0);
  const shown = await shownPredictions(page);
  assert.ok(shown.length > 0, 'predictions are listed');
  assert.equal(shown[0].index, r.predictions[0].index);

  // The download is in the Cache API now.
  const url = `${hub}/${HUB_REPO}/resolve/main/model.safetensors`;
  const cached = await page.evaluate(async (u) => !!(await (await caches.open('tokenmix-models')).match(u)), url);
  assert.equal(cached, true, 'the checkpoint is cached');

  // The visualiser shows PoolFormer's fixed kernel, and per-stage energy where the build has it.
  await page.waitForFunction(() => document.querySelector('#viz').dataset.kind === 'poolformer');
  assert.ok(await page.$('[data-testid="viz-pool-kernel"]'), 'the fixed pooling kernel is drawn');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="viz-energy"]').length > 0);
  await shot(page, 'e2e-c-hub-poolformer');

  // A model the page does not list, named by the user ("Another model from …"; it could only
  // be loaded through the API before): a name that is no repository is an error that changes
  // nothing; the model's address on the hub, pasted from the browser, names its repository,
  // which downloads from the page's hub and is then listed in the select, in use.
  await page.selectOption('#model-select', 'hub-other');
  assert.ok(await page.isVisible('#hub-repo'), 'the name field opens');
  assert.equal(await page.$eval('#model-select', (s) => s.value), `hub:${HUB_REPO}`, 'the select still names the model in use');
  await page.fill('#hub-repo', 'https://huggingface.co/timm');
  await page.click('[data-testid="hub-load"]');
  await page.waitForFunction(() => /expected owner\/name/.test(document.querySelector('#error-text').textContent));
  assert.equal((await page.textContent('#error-text')).trim(),
    'hub repository `https://huggingface.co/timm`: expected owner/name (or hf-hub:owner/name, or its address on huggingface.co), e.g. timm/gmlp_s16_224.ra3_in1k');
  assert.equal(await page.evaluate(() => window.tokenmixApp.state.load.label), HUB_REPO, 'no load started');
  await shot(page, 'e2e-c-hub-name-refused');
  await page.fill('#hub-repo', `https://huggingface.co/${TYPED_REPO}/tree/main`);
  await page.click('[data-testid="hub-load"]');
  await loadEnded(TYPED_REPO);
  const typed = await page.evaluate(() => window.tokenmixApp.state.load);
  assert.equal(typed.status, 'ok', `load failed: ${typed.error}`);
  assert.equal(await page.$eval('#model-select', (s) => s.value), `hub:${TYPED_REPO}`, 'listed, and named as the model in use');
  await page.waitForSelector('#hub-form', { state: 'hidden' }); // the name field closes once the model loaded
  assert.ok((await page.textContent('#model-status')).includes(`Loaded PoolFormer from ${TYPED_REPO}`), await page.textContent('#model-status'));
  const typedUrl = `${hub}/${TYPED_REPO}/resolve/main/model.safetensors`;
  assert.equal(await page.evaluate(async (u) => !!(await (await caches.open('tokenmix-models')).match(u)), typedUrl), true, 'cached as the listed ones are');
  // timm's own spelling, for the listed one: it is chosen again.
  await page.selectOption('#model-select', 'hub-other');
  await page.fill('#hub-repo', `hf-hub:${HUB_REPO}`);
  await page.press('#hub-repo', 'Enter');
  await page.waitForFunction((repo) => window.tokenmixApp.state.load.label === repo && window.tokenmixApp.state.load.status === 'ok', HUB_REPO);
  assert.equal(await page.$eval('#model-select', (s) => s.value), `hub:${HUB_REPO}`);
  assert.equal(await page.$$eval(`#model-select option[value="hub:${HUB_REPO}"]`, (o) => o.length), 1, 'listed once');
  console.log(`[c] typed: ${TYPED_REPO} from its address, then hf-hub:${HUB_REPO}`);
  // The package: timm's name of a model on the hub loads from the `hub` given, and its parser
  // is the CLI's (the page's field above uses it): each spelling, and the CLI's refusal.
  const api = await page.evaluate(async ({ repo, hub }) => {
    const api = window.tokenmixApp.api;
    const parse = (t) => api.parseHubRepo(t).catch((e) => `error: ${e.message}`);
    const spellings = await Promise.all([repo, ` hf_hub:${repo}`, `https://huggingface.co/${repo}/blob/main/model.safetensors?download=true`, 'timm', '../etc/passwd'].map(parse));
    await api.loadModel(null);
    const loaded = await api.loadModel(`hf_hub:${repo}`, { hub });
    let refused = null;
    try {
      await api.loadModel('hf-hub:timm', { hub });
    } catch (e) {
      refused = e.message;
    }
    return { spellings, loaded, refused, after: (await api.modelInfo()).family };
  }, { repo: TYPED_REPO, hub });
  console.log(`[c] the package: ${JSON.stringify({ ...api, loaded: { family: api.loaded.family, name: api.loaded.name } })}`);
  const expected = (t) => `error: hub repository \`${t}\`: expected owner/name (or hf-hub:owner/name, or its address on huggingface.co), e.g. timm/gmlp_s16_224.ra3_in1k`;
  assert.deepEqual(api.spellings, [TYPED_REPO, TYPED_REPO, TYPED_REPO, expected('timm'), expected('../etc/passwd')]);
  assert.match(api.loaded.family, /poolformer/i, 'hf_hub:owner/name loads from the hub given');
  assert.equal(api.loaded.name, `hf_hub:${TYPED_REPO}`, 'named as it was asked for');
  assert.match(api.refused ?? '', /hub repository `timm`: expected owner\/name/);
  assert.match(api.after, /poolformer/i, 'a refused name changes nothing');
  assert.deepEqual(pageErrors, []);
  await page.close();

  // A link to the page with ?model= (timm's spelling here) opens with that hub model, and the
  // address then names the hub model in use, in its plain form (to share or bookmark); a
  // model that is not on the hub takes the name off; a name that is no repository is an error.
  const linked = await openPage('c', `?hub=${encodeURIComponent(hub)}&model=${encodeURIComponent(`hf-hub:${TYPED_REPO}`)}`);
  assertStarted(linked.status);
  const loadedAs = (p, repo) => p.waitForFunction((r) => window.tokenmixApp.state.load.label === r && window.tokenmixApp.state.load.status === 'ok', repo);
  const modelParam = (p) => p.evaluate(() => new URL(location.href).searchParams.get('model'));
  await loadedAs(linked.page, TYPED_REPO);
  assert.match(await linked.page.evaluate(() => window.tokenmixApp.state.model.family), /poolformer/i);
  assert.equal(await linked.page.$eval('#model-select', (s) => s.value), `hub:${TYPED_REPO}`);
  assert.equal(await modelParam(linked.page), TYPED_REPO);
  await linked.page.selectOption('#model-select', 'embedded');
  await loadedAs(linked.page, 'the embedded default model');
  assert.equal(await modelParam(linked.page), null, 'the embedded model: no ?model=');
  await linked.page.selectOption('#model-select', `hub:${HUB_REPO}`);
  await loadedAs(linked.page, HUB_REPO);
  assert.equal(await modelParam(linked.page), HUB_REPO);
  assert.ok(linked.page.url().endsWith(`&model=${HUB_REPO}`), `the name as one types it: ${linked.page.url()}`);
  console.log(`[c] linked: ?model=hf-hub:${TYPED_REPO} loaded; the address then ${linked.page.url().replace(server.url, '')}`);
  assert.deepEqual(linked.pageErrors, []);
  await linked.page.close();
  const bad = await openPage('c', `?hub=${encodeURIComponent(hub)}&model=timm`);
  assertStarted(bad.status);
  await bad.page.waitForFunction(() => /expected owner\/name/.test(document.querySelector('#error-text').textContent));
  assert.match(await bad.page.evaluate(() => window.tokenmixApp.state.model.family), /mixer/i, 'the embedded model stays');
  assert.deepEqual(bad.pageErrors, []);
  await bad.page.close();
});

test('d. a corrupt model file shows an error and the page keeps working', { timeout: 4 * TIMEOUT }, async () => {
  const { page, pageErrors, status } = await openPage('d');
  assertStarted(status);
  const before = await page.evaluate(() => window.tokenmixApp.state.model.family);

  await page.setInputFiles('#model-file', {
    name: 'corrupt.safetensors', mimeType: 'application/octet-stream', buffer: fs.readFileSync(FIXTURE).subarray(0, 100),
  });
  await page.waitForFunction(() => {
    const e = document.querySelector('#error');
    return !e.hidden && e.textContent.trim().length > 0;
  });
  const message = (await page.textContent('#error-text')).trim();
  console.log(`[d] error shown: ${message}`);
  assert.match(message, /corrupt\.safetensors/);
  assert.ok(await page.isVisible('#error'));
  await shot(page, 'e2e-d-corrupt-file');
  assert.equal(await page.evaluate(() => window.tokenmixApp.state.model.family), before, 'the previous model stays');
  assert.equal(await page.$eval('#model-select', (s) => s.value), 'embedded');

  const r = await page.evaluate(() => window.tokenmixApp.classifySample('fmnist-0001-pullover.png'));
  assert.ok(r.predictions.length > 0);
  await page.waitForSelector('#predictions[data-source="fmnist-0001-pullover.png"] li');
  assert.ok((await shownPredictions(page)).length > 0);

  // A PyTorch checkpoint dropped (or picked) in place of a model is loaded as one, and so named:
  // it used to be "not an image (application/octet-stream)".
  await page.setInputFiles('#image-file', {
    name: 'pytorch_model.bin', mimeType: 'application/octet-stream', buffer: fs.readFileSync(path.join(ROOT, 'tests/hostile/41_torch_zip.safetensors')),
  });
  await page.waitForFunction(() => /pytorch_model\.bin/.test(document.querySelector('#error-text').textContent));
  const torch = (await page.textContent('#error-text')).trim();
  console.log(`[d] PyTorch checkpoint: ${torch}`);
  assert.match(torch, /zip archive, PyTorch's torch\.save format/);
  assert.equal(await page.evaluate(() => window.tokenmixApp.state.model.family), before, 'the previous model stays');

  // Several files dropped at once, the model first: the first image is classified and the model
  // loaded, so the image is answered by it, as the same image classified under that model alone
  // (only the first file dropped used to count: the model loaded, the images were ignored).
  const [pullover, trouser] = ['fmnist-0001-pullover.png', 'fmnist-0002-trouser.png'];
  await page.evaluate(() => window.tokenmixApp.loadModelUrl('weights/gmlp_fmnist.safetensors'));
  await page.evaluate((s) => window.tokenmixApp.classifySample(s), pullover);
  await page.waitForSelector(`#predictions[data-source="${pullover}"] li`);
  const byGmlp = await shownPredictions(page);
  await page.evaluate(() => window.tokenmixApp.loadModelUrl('weights/mixer_fmnist.safetensors'));
  await page.evaluate((s) => window.tokenmixApp.classifySample(s), pullover);
  await page.waitForSelector(`#predictions[data-source="${pullover}"] li`);
  assert.notDeepEqual(await shownPredictions(page), byGmlp, 'the two models answer apart, so the answer shows which one ran');
  await page.evaluate((s) => window.tokenmixApp.classifySample(s), trouser);
  const dropped = [['gmlp_fmnist.safetensors', 'weights/gmlp_fmnist.safetensors', ''], [pullover, `www/samples/${pullover}`, 'image/png'], [trouser, `www/samples/${trouser}`, 'image/png']]
    .map(([name, file, type]) => ({ name, type, b64: fs.readFileSync(path.join(ROOT, file)).toString('base64') }));
  await page.evaluate((files) => {
    const dt = new DataTransfer();
    for (const f of files) dt.items.add(new File([Uint8Array.from(atob(f.b64), (c) => c.charCodeAt(0))], f.name, { type: f.type }));
    document.querySelector('#dropzone').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, dropped);
  const source = `${pullover} (1 of 2 images)`;
  await page.waitForFunction(({ source, want }) => {
    const lis = [...document.querySelectorAll('#predictions li')];
    return document.querySelector('#predictions').dataset.source === source && window.tokenmixApp.state.model.family === 'gMLP'
      && JSON.stringify(lis.map((li) => [Number(li.dataset.index), Number(li.dataset.probability)])) === JSON.stringify(want.map((p) => [p.index, p.probability]));
  }, { source, want: byGmlp });
  // The image says which it is and how many came, and no sample is marked as the one shown.
  const caption = await page.textContent('#original-caption');
  assert.equal(caption, `Original · ${source} · 28×28`);
  assert.deepEqual(await page.$$eval('.sample[aria-pressed="true"]', (bs) => bs.map((b) => b.dataset.sample)), []);
  console.log(`[d] three files dropped: ${await page.$eval('#predictions', (o) => o.dataset.source)} answered by ${await page.evaluate(() => window.tokenmixApp.state.model.family)}`);
  await shot(page, 'e2e-d-dropped-together');

  // Two images picked at once (the picker takes several): the first shown, so said.
  await page.setInputFiles('#image-file', [trouser, pullover].map((n) => path.join(ROOT, 'www/samples', n)));
  await page.waitForFunction((s) => document.querySelector('#predictions').dataset.source === s, `${trouser} (1 of 2 images)`);
  assert.equal(await page.textContent('#original-caption'), `Original · ${trouser} (1 of 2 images) · 28×28`);
  const trouserByGmlp = await shownPredictions(page);

  // A file that is no image, picked: said so, and the image and answer shown stay. Then two
  // files picked one after the other, a large PNG (slow to decode) first: the later one is
  // shown and answered, though the earlier one's decode ends last. The page used to classify a
  // file only once its display's decode ended, so the earlier file was drawn over the later
  // one and answered last.
  const picks = fs.mkdtempSync(path.join(os.tmpdir(), 'tm-picks-'));
  const shownNow = async () => ({
    source: await page.$eval('#predictions', (o) => o.dataset.source),
    caption: await page.textContent('#original-caption'),
    predictions: await shownPredictions(page),
  });
  const shownBefore = await shownNow();
  fs.writeFileSync(path.join(picks, 'notes.png'), 'not an image');
  await page.setInputFiles('#image-file', path.join(picks, 'notes.png'));
  await page.waitForFunction(() => /notes\.png/.test(document.querySelector('#error-text').textContent));
  assert.match((await page.textContent('#error-text')).trim(), /^Could not read notes\.png as an image: /);
  await page.waitForFunction(() => !document.querySelector('#predictions').hasAttribute('aria-busy'));
  assert.deepEqual(await shownNow(), shownBefore, 'the image and answer shown stay');
  fs.writeFileSync(path.join(picks, 'large.png'), png(3000, 2000, 3, (x, y) => [(x * 7 + y) & 255, (y * 3 + (x >> 4)) & 255, ((x ^ y) >> 3) & 255]));
  fs.copyFileSync(path.join(ROOT, 'www/samples', pullover), path.join(picks, 'small.png'));
  await page.setInputFiles('#image-file', path.join(picks, 'large.png'));
  await page.setInputFiles('#image-file', path.join(picks, 'small.png'));
  await page.waitForFunction(() => document.querySelector('#predictions').dataset.source === 'small.png');
  await page.waitForTimeout(2000); // the large file's decode and classification, had they gone on
  const later = await shownNow();
  console.log(`[d] picked large.png then small.png: ${later.source} shown (${later.caption})`);
  assert.equal(later.source, 'small.png');
  assert.equal(later.caption, 'Original · small.png · 28×28');
  fs.rmSync(picks, { recursive: true, force: true });

  // A folder dropped from a file manager: a real drop through the browser (CDP's
  // Input.dispatchDragEvent with the folder's path, as the OS hands it over), so the page gets
  // the folder's entry. It stands for its images as in the CLI: in name order, subfolders
  // walked, hidden and non-image files left out; the first is shown and says how many came (it
  // used to be "Could not read photos as an image"). Files are written in reverse name order,
  // so the listing's own order cannot pass for name order.
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'tm-drop-'));
  const photos = path.join(folder, 'photos');
  fs.mkdirSync(path.join(photos, 'sub'), { recursive: true });
  fs.mkdirSync(path.join(folder, 'empty'));
  const sample = (n) => fs.readFileSync(path.join(ROOT, 'www/samples', n));
  for (const [name, bytes] of [['sub/a-boot.png', sample(SAMPLE)], ['c-pullover.png', sample(pullover)], ['b-trouser.png', sample(trouser)],
    ['a-notes.txt', Buffer.from('not an image')], ['.hidden.png', sample(pullover)]]) fs.writeFileSync(path.join(photos, name), bytes);
  const cdp = await page.context().newCDPSession(page);
  const dropPaths = async (files) => {
    await page.locator('#dropzone').scrollIntoViewIfNeeded();
    const box = await page.locator('#dropzone').boundingBox();
    const [x, y] = [box.x + box.width / 2, box.y + box.height / 2];
    const data = { items: [], files, dragOperationsMask: 1 };
    for (const type of ['dragEnter', 'dragOver', 'drop']) await cdp.send('Input.dispatchDragEvent', { type, x, y, data });
  };
  await dropPaths([photos]);
  const fromFolder = 'photos/b-trouser.png (1 of 3 images)';
  await page.waitForFunction(({ source, want }) => {
    const lis = [...document.querySelectorAll('#predictions li')];
    return document.querySelector('#predictions').dataset.source === source
      && JSON.stringify(lis.map((li) => [Number(li.dataset.index), Number(li.dataset.probability)])) === JSON.stringify(want);
  }, { source: fromFolder, want: trouserByGmlp.map((p) => [p.index, p.probability]) });
  assert.equal(await page.textContent('#original-caption'), `Original · ${fromFolder} · 28×28`);
  assert.ok(await page.isHidden('#error'), 'no error for the folder');
  console.log(`[d] folder dropped: ${fromFolder}`);
  await shot(page, 'e2e-d-folder-dropped');
  // Its other images are a step away: ‹ › under the image, and the arrow keys, round from the
  // last to the first; each answered as that image alone is. An image from elsewhere (a
  // sample) ends the stepping.
  const stepTo = async (step, source) => {
    await step();
    await page.waitForFunction((s) => document.querySelector('#predictions').dataset.source === s && !document.querySelector('#predictions').hasAttribute('aria-busy'), source);
    return { caption: await page.textContent('#original-caption'), pos: await page.textContent('#images-pos'), predictions: await shownPredictions(page) };
  };
  assert.equal(await page.textContent('#images-pos'), '1 / 3');
  assert.ok(await page.isVisible('[data-testid="images-next"]'), 'the steps are shown');
  const second = await stepTo(() => page.click('[data-testid="images-next"]'), 'photos/c-pullover.png (2 of 3 images)');
  assert.deepEqual(second, { caption: 'Original · photos/c-pullover.png (2 of 3 images) · 28×28', pos: '2 / 3', predictions: byGmlp });
  const third = await stepTo(() => page.keyboard.press('ArrowRight'), 'photos/sub/a-boot.png (3 of 3 images)');
  assert.equal(third.pos, '3 / 3');
  await shot(page, 'e2e-d-folder-third-image');
  const round = await stepTo(() => page.keyboard.press('ArrowRight'), fromFolder);
  assert.deepEqual(round, { caption: `Original · ${fromFolder} · 28×28`, pos: '1 / 3', predictions: trouserByGmlp });
  assert.equal((await stepTo(() => page.click('[data-testid="images-prev"]'), 'photos/sub/a-boot.png (3 of 3 images)')).pos, '3 / 3');
  console.log(`[d] stepped: ${second.caption} · ${third.caption} · ${round.caption}`);
  // "Classify all": every image into a table, as `tokenmix classify --json` answers the folder
  // with the same model, and saved as that JSON. The image shown stays, and so does what its
  // explanation explains: the package explains its latest classified image, which the run's
  // images are not (classified with `remember: false`; the shown image is stepped to the
  // pullover first, so that the last image classified, the boot, is another).
  await stepTo(() => page.click('[data-testid="images-prev"]'), 'photos/c-pullover.png (2 of 3 images)');
  const cliFolder = JSON.parse(execFileSync(BIN, ['classify', '--json', '--top-k', '5', '--weights', 'weights/gmlp_fmnist.safetensors', photos], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
  await page.click('[data-testid="images-all"]');
  await page.waitForFunction(() => document.querySelector('#images-progress').textContent === '3 / 3 classified' && !document.querySelector('#images-save').disabled);
  const table = await page.$$eval('#images-table tbody tr', (trs) => trs.map((tr) => [tr.cells[0].textContent, Number(tr.dataset.index), Number(tr.dataset.probability)]));
  assert.deepEqual(table.map((r) => r[0]), cliFolder.map((e) => `photos/${path.relative(photos, e.image)}`), 'the CLI\'s images, in its order');
  table.forEach(([name, index, probability], i) => {
    assert.equal(index, cliFolder[i].predictions[0].index, name);
    assert.ok(Math.abs(probability - cliFolder[i].predictions[0].probability) <= 1e-5, `${name}: ${probability} vs ${cliFolder[i].predictions[0].probability}`);
  });
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#images-save')]);
  const saved = JSON.parse(fs.readFileSync(await download.path(), 'utf8'));
  assert.equal(download.suggestedFilename(), 'tokenmix-classify.json');
  assert.deepEqual(saved.map((e) => [e.image, e.predictions.map((p) => [p.index, p.label])]), cliFolder.map((e) => [`photos/${path.relative(photos, e.image)}`, e.predictions.map((p) => [p.index, p.label])]));
  saved.forEach((e, i) => e.predictions.forEach((p, k) => assert.ok(Math.abs(p.probability - cliFolder[i].predictions[k].probability) <= 1e-5, `${e.image} #${k}`)));
  assert.equal((await shownNow()).caption, 'Original · photos/c-pullover.png (2 of 3 images) · 28×28', 'the image shown stays');
  await shot(page, 'e2e-d-folder-classified-all');
  const top = (await shownPredictions(page))[0];
  await page.click(`#predictions li[data-index="${top.index}"]`);
  await page.waitForFunction((i) => document.querySelector('#evidence-note').dataset.index === String(i), top.index);
  const logit = Number(await page.$eval('#evidence-note', (n) => n.dataset.logit));
  const cliExplained = JSON.parse(execFileSync(BIN, ['explain', '--json', '--weights', 'weights/gmlp_fmnist.safetensors', path.join(photos, 'c-pullover.png')], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
  const want = cliExplained[0].classes.find((c) => c.index === top.index).logit;
  console.log(`[d] classified all: ${JSON.stringify(table)}; the shown image's evidence: logit ${logit} (CLI ${want})`);
  assert.ok(Math.abs(logit - want) <= 1e-4, `the evidence explains the image shown: logit ${logit} vs the CLI's ${want}`);
  // A row shows its image, as stepping to it does: clicked, or Enter on it; the row of the image
  // shown is marked.
  const current = () => page.$$eval('#images-table tbody tr', (trs) => trs.map((tr) => tr.getAttribute('aria-current')));
  assert.deepEqual(await current(), ['false', 'true', 'false']);
  const byRow = await stepTo(() => page.click('#images-table tbody tr:nth-child(1)'), fromFolder);
  assert.deepEqual(byRow, { caption: `Original · ${fromFolder} · 28×28`, pos: '1 / 3', predictions: trouserByGmlp });
  assert.deepEqual(await current(), ['true', 'false', 'false']);
  await page.focus('#images-table tbody tr:nth-child(2)');
  assert.equal((await stepTo(() => page.keyboard.press('Enter'), 'photos/c-pullover.png (2 of 3 images)')).pos, '2 / 3');
  // A header sorts the table: by probability, least sure first, then most; by top class; by
  // image, the folder's order again (ties keep it). A row still shows its own image.
  const rowNames = () => page.$$eval('#images-table tbody tr', (trs) => trs.map((tr) => tr.cells[0].textContent));
  const sortBy = async (key, want, dir) => {
    await page.click(`#images-table th[data-sort="${key}"] button`);
    assert.deepEqual(await rowNames(), want, `by ${key}, ${dir}`);
    assert.equal(await page.getAttribute(`#images-table th[data-sort="${key}"]`, 'aria-sort'), dir);
  };
  const entries = table.map(([name, , probability], k) => ({ name, probability, label: cliFolder[k].predictions[0].label, k }));
  const sorted = (cmp) => [...entries].sort((a, b) => cmp(a, b) || a.k - b.k).map((e) => e.name);
  await sortBy('probability', sorted((a, b) => a.probability - b.probability), 'ascending');
  await sortBy('probability', sorted((a, b) => b.probability - a.probability), 'descending');
  const [first] = await rowNames();
  const surest = entries.find((e) => e.name === first);
  const bySorted = await stepTo(() => page.click('#images-table tbody tr:nth-child(1)'), `${surest.name} (${surest.k + 1} of 3 images)`);
  assert.equal(bySorted.pos, `${surest.k + 1} / 3`, 'the sorted row shows its own image');
  assert.equal(await page.$eval('#images-table tbody tr[aria-current="true"]', (tr) => tr.cells[0].textContent), surest.name);
  await sortBy('label', sorted((a, b) => a.label.localeCompare(b.label)), 'ascending');
  await sortBy('image', entries.map((e) => e.name), 'ascending');
  assert.equal(await page.getAttribute('#images-table th[data-sort="probability"]', 'aria-sort'), 'none');
  console.log(`[d] sorted: by probability ${JSON.stringify(sorted((a, b) => a.probability - b.probability))}`);
  await stepTo(() => page.click('#images-table tbody tr:nth-child(2)'), 'photos/c-pullover.png (2 of 3 images)');
  // Stopped as it starts: nothing classified, said so, nothing to save; the image shown stays.
  await page.evaluate(() => {
    document.querySelector('#images-all').click();
    document.querySelector('#images-stop').click();
  });
  await page.waitForFunction(() => document.querySelector('#images-stop').hidden);
  assert.equal(await page.textContent('#images-progress'), '0 / 3 classified (stopped)');
  assert.equal(await page.$$eval('#images-table tbody tr', (trs) => trs.length), 0);
  assert.ok(await page.$eval('#images-save', (b) => b.disabled), 'nothing to save');
  assert.equal((await shownNow()).caption, 'Original · photos/c-pullover.png (2 of 3 images) · 28×28');
  // A folder's image that does not read, stepped to, takes its place: no image, no answer, and
  // its error (the previous image and its answer stayed under the new position). Stepped past
  // while its file was read, the next image's answer is not drawn over it either.
  const broken = path.join(folder, 'broken');
  fs.mkdirSync(broken);
  fs.writeFileSync(path.join(broken, 'a-pullover.png'), sample(pullover));
  fs.writeFileSync(path.join(broken, 'b-notes.png'), 'not an image');
  fs.writeFileSync(path.join(broken, 'c-trouser.png'), sample(trouser));
  await dropPaths([broken]);
  await page.waitForFunction(() => document.querySelector('#predictions').dataset.source === 'broken/a-pullover.png (1 of 3 images)' && !document.querySelector('#predictions').hasAttribute('aria-busy'));
  const unreadable = async () => ({
    caption: await page.textContent('#original-caption'),
    pos: await page.textContent('#images-pos'),
    predictions: await page.$$eval('#predictions li', (lis) => lis.length),
    error: (await page.isVisible('#error')) ? (await page.textContent('#error-text')).trim() : null,
  });
  const notes = 'broken/b-notes.png (2 of 3 images)';
  await page.click('[data-testid="images-next"]');
  await page.waitForFunction((c) => document.querySelector('#original-caption').textContent === c, `Original · ${notes} · does not read`);
  const atNotes = await unreadable();
  console.log(`[d] stepped to an unreadable image: ${JSON.stringify(atNotes)}`);
  assert.deepEqual({ ...atNotes, error: null }, { caption: `Original · ${notes} · does not read`, pos: '2 / 3', predictions: 0, error: null });
  assert.match(atNotes.error ?? '', /^Could not read broken\/b-notes\.png \(2 of 3 images\) as an image: /);
  await shot(page, 'e2e-d-folder-unreadable');
  await stepTo(() => page.keyboard.press('ArrowRight'), 'broken/c-trouser.png (3 of 3 images)');
  assert.ok(await page.isHidden('#error'), 'the next readable image clears the error');
  await page.evaluate(() => {
    document.querySelector('[data-testid="images-next"]').click(); // round to the pullover, classified…
    document.querySelector('[data-testid="images-next"]').click(); // …stepped past at once
  });
  await page.waitForFunction((c) => document.querySelector('#original-caption').textContent === c, `Original · ${notes} · does not read`);
  await page.waitForTimeout(1500);
  assert.deepEqual({ ...(await unreadable()), error: null }, { caption: `Original · ${notes} · does not read`, pos: '2 / 3', predictions: 0, error: null }, 'nothing drawn over it');
  // "Classify all" there: a row saying the unreadable one does not read, as the CLI's report
  // has an error in its place; the unreadable image stays shown as such.
  // Sorted by probability before the run, each row goes to its place as it comes.
  const sortTable = (key) => page.evaluate(async (k) => (await import(new URL('www/input.js', document.baseURI).href)).sortTable(k), key);
  await sortTable('probability');
  await page.click('[data-testid="images-all"]');
  await page.waitForFunction(() => document.querySelector('#images-progress').textContent === '3 / 3 classified');
  const brokenTable = () => page.$$eval('#images-table tbody tr', (trs) => trs.map((tr) => [tr.cells[0].textContent, tr.cells[1].className, Number(tr.dataset.probability || -1)]));
  const bySure = await brokenTable();
  assert.deepEqual(bySure[0].slice(0, 2), ['broken/b-notes.png', 'error'], 'the unreadable image first');
  assert.ok(bySure[1][2] <= bySure[2][2], JSON.stringify(bySure));
  await sortTable('image');
  assert.deepEqual((await brokenTable()).map((r) => r.slice(0, 2)), [['broken/a-pullover.png', ''], ['broken/b-notes.png', 'error'], ['broken/c-trouser.png', '']]);
  assert.equal(await page.textContent('#original-caption'), `Original · ${notes} · does not read`);
  // The same folder picked ("Open folder…", a webkitdirectory input): the same image, so said.
  await page.evaluate(() => window.tokenmixApp.classifySample('fmnist-0000-boot.png'));
  await page.waitForSelector('#predictions[data-source="fmnist-0000-boot.png"] li');
  assert.ok(await page.isHidden('#images-nav'), 'a sample ends the stepping');
  await page.keyboard.press('ArrowRight');
  await page.waitForTimeout(300);
  assert.equal(await page.$eval('#predictions', (o) => o.dataset.source), 'fmnist-0000-boot.png', 'the arrow keys then step nothing');
  // Through its button inside the drop zone: the folder chooser opens, not the zone's file one.
  const choosers = [];
  const onChooser = (c) => choosers.push(c);
  page.on('filechooser', onChooser);
  await page.click('#folder-open');
  await page.waitForTimeout(500);
  page.off('filechooser', onChooser);
  assert.deepEqual(await Promise.all(choosers.map((c) => c.element().evaluate((e) => e.id))), ['folder-file'], 'one chooser, for a folder');
  await choosers[0].setFiles(photos);
  await page.waitForFunction((s) => document.querySelector('#predictions').dataset.source === s, fromFolder);
  assert.deepEqual(await shownPredictions(page), trouserByGmlp, 'the folder picked: its first image, answered as the trouser is');
  assert.equal(await page.textContent('#images-pos'), '1 / 3');
  // The order a picked folder's files are taken in is the CLI's, whatever order the browser
  // lists them in: the same paths, shuffled, against `tokenmix classify --json` on them on disk.
  const tree = path.join(folder, 'p');
  const paths = ['z.png', 'sub/b.jpg', '.git/x.png', 'a.txt', 'sub.png', 'a b.webp', 'sub/a/c.gif', 'B.bmp', 'sub/.h.png'];
  for (const p of paths) {
    fs.mkdirSync(path.dirname(path.join(tree, p)), { recursive: true });
    fs.writeFileSync(path.join(tree, p), sample(SAMPLE));
  }
  const cliOrder = JSON.parse(execFileSync(BIN, ['classify', '--json', '--top-k', '1', tree], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }))
    .map((e) => `p/${path.relative(tree, e.image)}`);
  assert.equal(cliOrder.length, 6, cliOrder.join(', '));
  const pageOrder = (root) => page.evaluate(async ({ paths, root }) => {
    const { pickedFolder } = await import(new URL('www/input.js', document.baseURI).href);
    const file = (p) => Object.defineProperty(new File(['x'], p.split('/').pop()), 'webkitRelativePath', { value: `${root}/${p}` });
    return pickedFolder(paths.map(file)).map((f) => f.webkitRelativePath);
  }, { paths, root });
  assert.deepEqual(await pageOrder('p'), cliOrder);
  // A folder picked whose own name is hidden counts, as `tokenmix classify .p/` does.
  assert.deepEqual(await pageOrder('.p'), cliOrder.map((p) => `.${p}`));
  // A folder with no image in it: said as the CLI says it, and the image shown stays.
  await dropPaths([path.join(folder, 'empty')]);
  await page.waitForFunction(() => /a folder with no image in it/.test(document.querySelector('#error-text').textContent));
  assert.equal((await page.textContent('#error-text')).trim(), 'empty: a folder with no image in it (PNG, JPEG, WebP, GIF, BMP or TIFF, by extension)');
  assert.equal(await page.$eval('#predictions', (o) => o.dataset.source), fromFolder);
  // ... picked: a folder of no images but a note.
  fs.writeFileSync(path.join(folder, 'empty', 'readme.txt'), 'no image here');
  await page.click('#error-close');
  await page.waitForSelector('#error', { state: 'hidden' });
  await page.setInputFiles('#folder-file', path.join(folder, 'empty'));
  await page.waitForFunction(() => /a folder with no image in it/.test(document.querySelector('#error-text').textContent) && !document.querySelector('#error').hidden);
  assert.equal((await page.textContent('#error-text')).trim(), 'empty: a folder with no image in it (PNG, JPEG, WebP, GIF, BMP or TIFF, by extension)');
  await cdp.detach();
  fs.rmSync(folder, { recursive: true, force: true });

  // A failed download is reported the same way.
  const failure = await page.evaluate(() => window.tokenmixApp.loadModelUrl('weights/does-not-exist.safetensors').then(() => null, (e) => e.message));
  console.log(`[d] failed download: ${failure}`);
  assert.ok(failure, 'loading a missing URL fails');
  assert.ok(await page.isVisible('#error'));
  assert.equal(await page.evaluate(() => window.tokenmixApp.state.model.family), 'gMLP', 'the model dropped stays');
  const again = await page.evaluate(() => window.tokenmixApp.classifySample('fmnist-0002-trouser.png'));
  assert.ok(again.predictions.length > 0);
  assert.deepEqual(pageErrors, []);
  await page.close();
});

test('o. the API on misuse and racing loads: a relative URL in the worker, an image still loading, a superseded load, bad numbers', { timeout: 4 * TIMEOUT }, async () => {
  const { page, pageErrors, status } = await openPage('o');
  assertStarted(status);
  const r = await page.evaluate(async (sample) => {
    const app = window.tokenmixApp;
    const api = app.api;
    const settle = (p) => p.then((v) => ({ ok: v }), (e) => ({ error: e?.message ?? String(e), name: e?.name }));
    const out = { worker: api.worker };
    // A relative URL names the file next to the page, also in the worker (whose own URL is js/worker.js).
    out.relative = await settle(api.loadModel('tests/fixtures/poolformer_rgb.safetensors').then((d) => d.family));
    out.cachedRelative = await api.isCached('tests/fixtures/poolformer_rgb.safetensors');
    await api.loadModel(null);
    // An <img> with a size but no pixels yet is refused, not classified as a blank image.
    const img = new Image(64, 64);
    img.src = `www/samples/${sample}?unique=${Date.now()}`;
    out.unloaded = await settle(api.classify(img));
    await img.decode();
    out.loaded = await settle(api.classify(img).then((p) => p.length));
    // A Blob or File (an upload, a fetch's body) is an image too, in the worker and on the
    // page's thread; one the browser does not decode is an error saying so. It used to be
    // decoded only in the worker, and on the page's thread called "no pixels yet".
    const blob = await (await fetch(`www/samples/${sample}`)).blob();
    const notImage = new File(['not an image'], 'notes.txt', { type: 'text/plain' });
    const pairs = (p) => p.map((x) => [x.index, x.probability]);
    out.blob = await settle(api.classify(blob).then(pairs));
    out.blobBad = await settle(api.classify(notImage));
    const { createClassifier: classifierOf } = await import(new URL('js/index.js', document.baseURI).href);
    const local = await classifierOf({ worker: false });
    await local.loadModel(null);
    out.localBlob = await settle(local.classify(new File([blob], sample, { type: 'image/png' })).then(pairs));
    out.localBad = await settle(local.classify(notImage));
    local.dispose();
    // A photo turned by its EXIF orientation, as the browser shows it (createImageBitmap's
    // default), which the CLI must match: the sample as a JPEG with an EXIF segment (APP1,
    // Orientation = k) right after its start marker, as a camera writes it.
    const bitmap = await createImageBitmap(blob);
    const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
    canvas.getContext('2d').drawImage(bitmap, 0, 0);
    const jpeg = new Uint8Array(await (await canvas.convertToBlob({ type: 'image/jpeg', quality: 0.95 })).arrayBuffer());
    const withExif = (k) => {
      const exif = [...new TextEncoder().encode('Exif'), 0, 0, 0x4d, 0x4d, 0, 0x2a, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, k, 0, 0, 0, 0, 0, 0];
      return new Uint8Array([...jpeg.subarray(0, 2), 0xff, 0xe1, 0, exif.length + 2, ...exif, ...jpeg.subarray(2)]);
    };
    out.exif = [];
    for (const k of [1, 3, 6, 8]) {
      const bytes = withExif(k);
      out.exif.push({ k, bytes: Array.from(bytes), answer: await settle(api.classify(new Blob([bytes], { type: 'image/jpeg' })).then(pairs)) });
    }
    // Whole numbers are checked, not wrapped (-1 would be 4294967295).
    out.crop = await settle(api.cropGeometry(-1, 100));
    out.topK = await settle(api.classify(img, 0));
    // The page: a load superseded while still queued never runs; one already running when a
    // newer load starts still loads, and when the newer one fails the page shows the model
    // tokenmix runs, not the one from before both.
    const race = async (started) => {
      const a = app.loadModelUrl('tests/fixtures/poolformer_rgb.safetensors').then(() => 'loaded', (e) => e.name);
      if (started) await new Promise((r) => setTimeout(r, 0)); // the first is with the worker now
      const b = app.loadModelBytes(new Uint8Array(100), 'bad.safetensors').then(() => 'loaded', (e) => e.message);
      return {
        a: await a, b: await b, pageFamily: app.state.model.family, coreFamily: (await api.modelInfo()).family,
        status: document.querySelector('#model-status').textContent, error: document.querySelector('#error-text').textContent,
      };
    };
    out.queued = await race(false);
    out.running = await race(true);
    // A load's signal, in the worker and on the page's thread: aborted midway, the download
    // stops (the server sees its response abandoned), no progress comes after, the load
    // rejects with the signal's reason and the model stays.
    const pause = (ms) => new Promise((r) => setTimeout(r, ms));
    const served = async () => (await fetch('/__throttled', { cache: 'no-store' })).json();
    // The server's counts once it has seen a response abandoned since `start` (or after 5 s).
    const servedAfterAbandon = async (start) => {
      let end = await served();
      for (let i = 0; i < 100 && end.abandoned === start.abandoned; i++) {
        await pause(50);
        end = await served();
      }
      return end;
    };
    const abortMidway = async (classifier) => {
      const before = (await classifier.modelInfo()).family;
      const start = await served();
      const ac = new AbortController();
      let progress = 0;
      // 16 pieces 200 ms apart: 3 s for the whole file.
      const url = `tests/fixtures/poolformer_rgb.safetensors?throttle=200&n=${Math.random()}`;
      const load = settle(classifier.loadModel(url, { signal: ac.signal, onProgress: () => { progress += 1; } }));
      for (let i = 0; i < 500 && progress === 0; i++) await pause(10);
      const atAbort = progress;
      ac.abort();
      const result = await load;
      const end = await servedAfterAbandon(start);
      await pause(500); // the next pieces would have come by now
      return {
        result, atAbort, after: progress - atAbort, before, family: (await classifier.modelInfo()).family,
        abandoned: end.abandoned - start.abandoned, completed: end.completed - start.completed,
      };
    };
    out.abortWorker = await abortMidway(api);
    const { createClassifier } = await import(new URL('js/index.js', document.baseURI).href);
    const inline = await createClassifier({ worker: false });
    out.abortInline = await abortMidway(inline);
    // The page aborts a running download that a newer load replaces.
    {
      const start = await served();
      const url = `tests/fixtures/poolformer_rgb.safetensors?throttle=200&n=${Math.random()}`;
      const first = app.loadModelUrl(url).then(() => 'loaded', (e) => e.name);
      for (let i = 0; i < 100 && (await served()).completed === start.completed && document.querySelector('#progress-row').hidden; i++) await pause(20);
      await pause(300); // a few pieces in
      const second = await app.loadModelUrl('weights/mixer_fmnist.safetensors').then((m) => m.family, (e) => e.message);
      const end = await servedAfterAbandon(start);
      out.pageAbort = { first: await first, second, abandoned: end.abandoned - start.abandoned, completed: end.completed - start.completed };
    }
    // An already aborted signal rejects at once; something else is refused.
    out.preAborted = await settle(api.loadModel(null, { signal: AbortSignal.abort() }));
    out.badSignal = await settle(api.loadModel(null, { signal: { aborted: false } }));
    // Classifiers on the page's thread have a model each (a module instance each): loading
    // into the second leaves the first's as it was. A disposed one's instance serves the
    // next, which starts from the embedded model.
    const second = await createClassifier({ worker: false });
    await second.loadModel('tests/fixtures/poolformer_rgb.safetensors');
    await api.loadModel(null); // (the worker's model after the races may be either)
    const [mine, theirs] = [await inline.classify(img), await api.classify(img)];
    out.twoInline = {
      first: (await inline.modelInfo()).family, second: (await second.modelInfo()).family,
      sameAsWorker: JSON.stringify(mine) === JSON.stringify(theirs),
    };
    second.dispose();
    const third = await createClassifier({ worker: false });
    out.twoInline.third = (await third.modelInfo()).family;
    out.twoInline.modules = [...new Set(performance.getEntriesByType('resource').map((e) => e.name).filter((n) => n.includes('/js/pkg/tokenmix.js')))].length;
    out.twoInline.disposed = await settle(second.modelInfo());
    third.dispose();
    inline.dispose();
    out.classified = await settle(app.classifySample('fmnist-0001-pullover.png').then((x) => x.predictions.length));
    // Three images at once: the two that would wait their turn behind a newer one are not
    // classified (AbortError); the newest is, and is what the page shows.
    const names = ['fmnist-0002-trouser.png', 'fmnist-0004-shirt.png', 'fmnist-0006-coat.png'];
    const images = await Promise.all(names.map(async (n) => {
      const bitmap = await createImageBitmap(await (await fetch(`www/samples/${n}`)).blob());
      const ctx = new OffscreenCanvas(bitmap.width, bitmap.height).getContext('2d');
      ctx.drawImage(bitmap, 0, 0);
      return ctx.getImageData(0, 0, bitmap.width, bitmap.height);
    }));
    const burst = await Promise.all(images.map((d, i) => app.classifyImageData(d, names[i]).then((x) => x.source, (e) => e.name)));
    out.burst = { burst, shown: document.querySelector('#predictions').dataset.source, error: document.querySelector('#error-text').textContent };
    return out;
  }, SAMPLE);
  console.log(`[o] ${JSON.stringify({ ...r, exif: r.exif.map(({ k, answer }) => ({ k, answer })) })}`);
  assert.equal(r.worker, true, 'the default page runs tokenmix in a worker');
  assert.deepEqual(r.relative, { ok: 'PoolFormer' }, 'a relative URL loads in the worker');
  assert.equal(r.cachedRelative, false);
  assert.match(r.unloaded.error ?? '', /no pixels yet/, 'an image still loading is refused');
  assert.deepEqual(r.loaded, { ok: 5 }, 'once loaded it classifies');
  const cli = cliClassify(`www/samples/${SAMPLE}`);
  for (const [where, got] of [['worker', r.blob], ['page thread', r.localBlob]]) {
    assert.ok(got.ok, `${where}: a Blob classifies: ${JSON.stringify(got)}`);
    assert.deepEqual(got.ok.map(([i]) => i), cli.map((c) => c.index), `${where}: a Blob answered as the CLI answers its file`);
    got.ok.forEach(([, p], i) => assert.ok(Math.abs(p - cli[i].probability) <= 1e-5, `${where}: class ${cli[i].index}: ${p} vs CLI ${cli[i].probability}`));
  }
  // EXIF orientations: the page's answer (the module decodes a Blob with the CLI's decoder,
  // which turns the photo as the browser shows it) is the CLI's on the same bytes, and the
  // turns answer apart.
  const exifDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tokenmix-exif-'));
  const turned = r.exif.map(({ k, bytes, answer }) => {
    assert.ok(answer.ok, `orientation ${k}: ${JSON.stringify(answer)}`);
    const file = path.join(exifDir, `exif${k}.jpg`);
    fs.writeFileSync(file, Buffer.from(bytes));
    const cli = cliClassify(file);
    assert.equal(answer.ok[0][0], cli[0].index, `orientation ${k}: the page's top class is the CLI's: ${JSON.stringify(answer.ok)} vs ${JSON.stringify(cli)}`);
    assert.ok(Math.abs(answer.ok[0][1] - cli[0].probability) <= 1e-5, `orientation ${k}: ${answer.ok[0][1]} vs CLI ${cli[0].probability}`);
    return { k, top: answer.ok[0] };
  });
  fs.rmSync(exifDir, { recursive: true, force: true });
  console.log(`[o] EXIF orientations, page top class: ${JSON.stringify(turned)}`);
  for (let i = 1; i < turned.length; i++) {
    const [a, b] = [turned[0].top, turned[i].top];
    assert.ok(a[0] !== b[0] || Math.abs(a[1] - b[1]) > 0.05, `orientation ${turned[i].k} must answer apart from 1: ${JSON.stringify(turned)}`);
  }
  for (const bad of [r.blobBad, r.localBad]) assert.match(bad.error ?? '', /^classify: the Blob \(notes\.txt, text\/plain\) is not an image this browser decodes/);
  assert.match(r.crop.error ?? '', /cropGeometry: width is -1: expected a whole number/);
  assert.match(r.topK.error ?? '', /topK is 0: expected a whole number from 1/);
  // Queued, the first load never ran: tokenmix runs the model from before both. Running, it
  // was aborted: as a rule it had not loaded yet (the same), but an abort that comes after it
  // loaded leaves its model in use, and the page then shows that one.
  for (const [race, families] of [['queued', ['MLP-Mixer']], ['running', ['MLP-Mixer', 'PoolFormer']]]) {
    const x = r[race];
    assert.equal(x.a, 'AbortError', `${race}: the first load was superseded`);
    assert.match(x.b, /Could not load bad\.safetensors/, race);
    assert.ok(families.includes(x.coreFamily), `${race}: tokenmix runs ${x.coreFamily}`);
    assert.equal(x.pageFamily, x.coreFamily, `${race}: the page shows the model tokenmix runs`);
    assert.equal(x.status, `Still using ${x.coreFamily}.`, race);
    assert.match(x.error, /bad\.safetensors/, race);
  }
  for (const where of ['abortWorker', 'abortInline']) {
    const x = r[where];
    assert.equal(x.result.name, 'AbortError', `${where}: the load rejects with the signal's reason: ${JSON.stringify(x.result)}`);
    assert.ok(x.atAbort > 0, `${where}: the download had begun`);
    assert.equal(x.after, 0, `${where}: no progress after the abort`);
    assert.equal(x.family, x.before, `${where}: the model stays`);
    assert.deepEqual([x.abandoned, x.completed], [1, 0], `${where}: the server saw the download abandoned`);
  }
  assert.deepEqual(
    { ...r.twoInline, disposed: undefined },
    { first: 'MLP-Mixer', second: 'PoolFormer', sameAsWorker: true, third: 'MLP-Mixer', modules: 2, disposed: undefined },
    'worker: false classifiers have a model each; a disposed one\'s module instance serves the next, from the embedded model',
  );
  assert.match(r.twoInline.disposed.error ?? '', /disposed/);
  assert.deepEqual(r.pageAbort, { first: 'AbortError', second: 'MLP-Mixer', abandoned: 1, completed: 0 }, 'the page aborts a download a newer load replaces');
  assert.equal(r.preAborted.name, 'AbortError', 'an aborted signal rejects at once');
  assert.match(r.badSignal.error ?? '', /signal: expected an AbortSignal/);
  assert.deepEqual(r.classified, { ok: 5 });
  assert.deepEqual({ ...r.burst, error: undefined }, { burst: ['AbortError', 'AbortError', 'fmnist-0006-coat.png'], shown: 'fmnist-0006-coat.png', error: undefined }, 'a burst classifies the newest only');
  assert.doesNotMatch(r.burst.error, /superseded|Classification failed/, 'the skipped ones show no error');
  await shot(page, 'e2e-o-superseded');
  assert.deepEqual(pageErrors, []);
  await page.close();
});

test('f. every file of the hostile corpus is refused by loadModel; the loaded model classifies the same', { timeout: 6 * TIMEOUT }, async () => {
  // tests/hostile/ (tools/make_hostile.py): the same files tests/hostile.rs loads natively.
  const manifest = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests', 'hostile', 'manifest.json'), 'utf8'));
  assert.ok(manifest.cases.length >= 30);
  const { page, pageErrors, status } = await openPage('f');
  assertStarted(status);
  const family = await page.evaluate(() => window.tokenmixApp.state.model.family);
  const probe = 'fmnist-0004-shirt.png';
  const before = await page.evaluate((s) => window.tokenmixApp.classifySample(s), probe);
  const failures = [];
  for (const c of manifest.cases) {
    // Through the wasm API directly (bytes), and through the page's URL path for every file.
    const bytes = [...fs.readFileSync(path.join(ROOT, 'tests', 'hostile', c.file))];
    const direct = await page.evaluate(async (b) => {
      try { await window.tokenmixApp.api.loadModel(new Uint8Array(b)); return null; } catch (e) { return `${e?.constructor?.name}: ${e?.message}`; }
    }, bytes);
    const viaPage = await page.evaluate((u) => window.tokenmixApp.loadModelUrl(u).then(() => null, (e) => e.message), `tests/hostile/${c.file}`);
    const shown = await page.evaluate(() => !document.querySelector('#error').hidden && document.querySelector('#error-text').textContent);
    if (!shown || !shown.includes(c.file)) failures.push(`${c.file}: the page shows ${JSON.stringify(shown)}`);
    if (c === manifest.cases[manifest.cases.length - 1]) await shot(page, 'e2e-f-hostile-corpus');
    const after = await page.evaluate((s) => window.tokenmixApp.classifySample(s), probe);
    console.log(`[f] ${c.file}: ${direct}`);
    if (!direct || !direct.startsWith('Error: ')) failures.push(`${c.file}: loadModel gave ${direct}, expected an Error`);
    else if (!direct.toLowerCase().includes(c.expect.toLowerCase())) failures.push(`${c.file}: \`${direct}\` lacks \`${c.expect}\``);
    if (!viaPage) failures.push(`${c.file}: the page loaded it`);
    if (JSON.stringify(after.predictions) !== JSON.stringify(before.predictions)) failures.push(`${c.file}: predictions changed after the rejection`);
  }
  assert.equal(await page.evaluate(() => window.tokenmixApp.state.model.family), family, 'the previous model stays');
  // Images: 1x1 is a bounded, correct result (uniform input); a wrong-length buffer is an error.
  const one = await page.evaluate(() => window.tokenmixApp.classifyImageData(new ImageData(new Uint8ClampedArray([200, 200, 200, 255]), 1, 1), '1x1'));
  assert.equal(one.predictions.length, 5);
  const bad = await page.evaluate(() => window.tokenmixApp.api.classify({ data: new Uint8ClampedArray(12), width: 2, height: 2 }).then(() => null, (e) => e.message));
  console.log(`[f] 2x2 image with 12 bytes: ${bad}`);
  assert.ok(bad, 'a wrong-length image is refused');
  const last = await page.evaluate((s) => window.tokenmixApp.classifySample(s), probe);
  assert.deepEqual(last.predictions, before.predictions);
  assert.deepEqual(failures, [], failures.join('\n'));
  assert.deepEqual(pageErrors, []);
  await page.close();
});

test('g. a lost GPU device is reported with an offer to reload, and reloading restores the model', { timeout: 4 * TIMEOUT }, async () => {
  const { page, pageErrors, status } = await openPage('g', '?backend=gpu');
  assertStarted(status, 'gpu');
  const probe = 'fmnist-0006-coat.png';
  const before = await page.evaluate((s) => window.tokenmixApp.classifySample(s), probe);
  await page.evaluate(() => window.tokenmixApp.api.loseDevice());
  const failed = await page.evaluate((s) => window.tokenmixApp.classifySample(s).then(() => null, (e) => e.message), probe);
  console.log(`[g] classify after the loss: ${failed}`);
  assert.match(failed ?? '', /GPU device lost/);
  await page.waitForSelector('#error-reload', { state: 'visible' });
  await shot(page, 'e2e-g-device-lost');
  await page.click('#error-reload');
  await page.waitForFunction(() => window.tokenmixApp.state.load?.status === 'ok');
  assert.ok(await page.isHidden('#error-reload'));
  const after = await page.evaluate((s) => window.tokenmixApp.classifySample(s), probe);
  assert.deepEqual(after.predictions, before.predictions, 'the reloaded model classifies as before');
  assert.deepEqual(pageErrors, []);
  await page.close();
});

test('h. the webcam: start, capture a frame, classify it, classify live, stop', { timeout: 4 * TIMEOUT }, async () => {
  const { page, pageErrors, status } = await openPage('h');
  assertStarted(status);
  await page.click('#camera-start');
  await page.waitForSelector('#camera-capture:not([disabled])');
  await page.waitForFunction(() => document.getElementById('camera').videoWidth > 0);
  const size = await page.$eval('#camera', (v) => [v.videoWidth, v.videoHeight]);
  console.log(`[h] camera: ${size.join('x')}`);
  await page.click('#camera-capture');
  await page.waitForFunction(() => window.tokenmixApp.state.result?.source === 'camera'
    && !document.getElementById('predictions').hasAttribute('aria-busy'));
  const shown = await shownPredictions(page);
  assert.equal(shown.length, 5);
  assert.ok(shown.every((p) => p.probability >= 0 && p.probability <= 1 && p.label.length > 0));
  assert.equal(await page.$eval('#predictions', (ol) => ol.dataset.source), 'camera');
  // The original view holds the captured frame (the camera's aspect; large frames are scaled
  // down for the view), not a blank canvas.
  const frame = await page.evaluate(() => {
    const d = window.tokenmixApp.state.image.imageData;
    let lo = 255, hi = 0;
    for (let i = 0; i < d.data.length; i += 4) { lo = Math.min(lo, d.data[i + 1]); hi = Math.max(hi, d.data[i + 1]); }
    return { w: d.width, h: d.height, lo, hi };
  });
  console.log(`[h] frame ${JSON.stringify(frame)}; predictions ${JSON.stringify(shown)}`);
  assert.ok(frame.w <= size[0] && Math.abs(frame.w / frame.h - size[0] / size[1]) < 0.02, `frame ${frame.w}x${frame.h} vs camera ${size}`);
  assert.ok(frame.hi > frame.lo, 'the captured frame is uniform');
  await shot(page, 'e2e-h-webcam');
  // Classify live: frame after frame while the box is ticked, without a Capture, and no live
  // frame stops a running pass; once unticked, nothing more is classified.
  const live = await page.evaluate(async () => {
    const app = window.tokenmixApp;
    const pause = (ms) => new Promise((r) => setTimeout(r, ms));
    const before = (await app.api.adapterInfo()).cancelled;
    const seen = new Set();
    const start = performance.now();
    document.getElementById('camera-live').click();
    while (seen.size < 3 && performance.now() - start < 60_000) {
      if (app.state.result?.source === 'camera (live)') seen.add(app.state.result);
      await pause(10);
    }
    document.getElementById('camera-live').click();
    await pause(1000); // a live classification under way when it was unticked ends
    const last = app.state.result;
    await pause(1000);
    const after = (await app.api.adapterInfo()).cancelled;
    return {
      classified: seen.size, seconds: (performance.now() - start) / 1000, stopped: app.state.result === last,
      aborted: after.beforeStart + after.midPass - before.beforeStart - before.midPass,
      shown: document.querySelector('#predictions').dataset.source,
    };
  });
  console.log(`[h] live: ${JSON.stringify(live)}`);
  assert.ok(live.classified >= 3, `live: ${live.classified} frames classified`);
  assert.equal(live.shown, 'camera (live)');
  assert.equal(live.aborted, 0, 'no live frame stopped a pass');
  assert.equal(live.stopped, true, 'unticked, nothing more is classified');
  await page.click('#camera-stop');
  assert.ok(await page.isDisabled('#camera-live'));
  assert.ok(await page.isDisabled('#camera-capture'));
  assert.equal(await page.$eval('#camera', (v) => v.srcObject), null);
  assert.deepEqual(pageErrors, []);
  await page.close();
});

const removeWebGpu = () => {
  delete Navigator.prototype.gpu;
  try {
    if ('gpu' in navigator) Object.defineProperty(Navigator.prototype, 'gpu', { get: () => undefined, configurable: true });
  } catch { /* already gone */ }
};

/** Chromium as most Linux users have it: no --enable-unsafe-webgpu, so navigator.gpu exists
 * but requestAdapter() gives null, in windows and workers alike (the realistic "no WebGPU"). */
async function withoutWebGpu(fn) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tokenmix-chromium-nogpu-'));
  const ctx = await chromium.launchPersistentContext(dir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: CHROMIUM_ARGS.filter((a) => a !== '--enable-unsafe-webgpu'),
    viewport: { width: 1280, height: 1000 },
  });
  ctx.setDefaultTimeout(TIMEOUT);
  try {
    return await fn(ctx);
  } finally {
    await ctx.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

test('e. without a WebGPU adapter the page runs on the CPU backend: classify as the CLI, visualiser, hub model', { timeout: 4 * TIMEOUT }, () => withoutWebGpu(async (ctx) => {
  const cli = cliClassify(`www/samples/${SAMPLE}`);
  const hub = `${server.url}/hub`;
  const { page, pageErrors, status } = await openPage('e', `?hub=${encodeURIComponent(hub)}`, null, ctx);
  assert.equal(status.webgpu, true, 'navigator.gpu is there, its adapter is not');
  assertStarted(status, 'cpu');
  assert.equal(await page.isVisible('#webgpu-missing'), false, 'no dead end');
  const note = await page.textContent('#backend-note');
  assert.ok(await page.isVisible('#backend-note'), 'one line says the CPU runs the model');
  assert.match(note, /CPU/);
  assert.match(note, /no GPU adapter/);
  assert.ok(!note.includes("\n") && note.length < 120, `one short line: ${note}`);
  const r = await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
  console.log(`[e] cli: ${JSON.stringify(cli)}\n[e] page (cpu): ${JSON.stringify(r.predictions)}; timings ${JSON.stringify(r.timings)}`);
  assert.equal(r.predictions.length, 5);
  for (const c of cli) {
    const p = r.predictions.find((q) => q.index === c.index);
    assert.ok(p, `class ${c.index} is in the page's top 5`);
    assert.ok(Math.abs(p.probability - c.probability) <= 1e-3, `class ${c.index}: ${p.probability} vs CLI ${c.probability}`);
  }
  const mixing = await page.evaluate(() => window.tokenmixApp.api.tokenMixing(0).then((m) => ({ rows: m.rows, cols: m.cols, n: m.data.length })));
  assert.ok(mixing.rows > 0 && mixing.n === mixing.rows * mixing.cols, 'the visualiser data is there');
  await shot(page, 'e2e-e-cpu-backend');
  // A hub checkpoint (the tiny PoolFormer stand-in) downloads and classifies on the CPU too.
  const desc = await page.evaluate((url) => window.tokenmixApp.loadModelUrl(url), `${hub}/${HUB_REPO}/resolve/main/model.safetensors`);
  assert.equal(desc.family, 'PoolFormer');
  assert.equal((await page.evaluate(() => window.tokenmixApp.api.modelInfo())).backend, 'cpu');
  const r2 = await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
  assert.ok(r2.predictions.length > 0);
  assert.deepEqual(pageErrors, []);
  await page.close();
}));

test('e1. with navigator.gpu removed (on the page thread, ?worker=0) the page says so and runs on the CPU', { timeout: 2 * TIMEOUT }, async () => {
  const cli = cliClassify(`www/samples/${SAMPLE}`);
  const { page, pageErrors, status } = await openPage('e1', '?worker=0', removeWebGpu);
  assert.equal(status.webgpu, false);
  assertStarted(status, 'cpu');
  assert.match(await page.textContent('#backend-note'), /no WebGPU/);
  const r = await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
  assert.equal(r.predictions[0].index, cli[0].index);
  assert.ok(Math.abs(r.predictions[0].probability - cli[0].probability) <= 1e-3);
  assert.deepEqual(pageErrors, []);
  await page.close();
});

test('e2. ?backend=gpu without a WebGPU adapter explains what is missing and throws nothing', { timeout: 2 * TIMEOUT }, () => withoutWebGpu(async (ctx) => {
  // The classifier that failed to start ends its worker (it would live on, unreachable).
  const countTerminate = () => {
    window.terminated = 0;
    const terminate = Worker.prototype.terminate;
    Worker.prototype.terminate = function () { window.terminated++; return terminate.call(this); };
  };
  const { page, pageErrors, status } = await openPage('e2', '?backend=gpu', countTerminate, ctx);
  assert.equal(status.ok, false);
  assert.equal(await page.evaluate(() => window.terminated), 1, 'the failed classifier\'s worker was ended');
  assert.ok(await page.isVisible('#webgpu-missing'), 'the WebGPU-missing panel is shown');
  assert.equal(await page.isVisible('#app'), false, 'the app is hidden');
  const text = await page.textContent('#webgpu-missing');
  for (const s of ['chrome://flags/#enable-unsafe-webgpu', 'Chrome', 'Edge 113', 'Safari 26', 'Firefox 141', 'Windows', 'tokenmix classify']) {
    assert.ok(text.includes(s), `the panel mentions ${s}`);
  }
  await page.waitForTimeout(500); // late errors, if any
  await shot(page, 'e2e-e2-webgpu-missing');
  assert.deepEqual(pageErrors, []);
  await page.close();
}));

test('i. ?backend=gpu still runs the WGSL path on SwiftShader and classifies as the CLI', { timeout: 4 * TIMEOUT }, async () => {
  const cli = cliClassify(`www/samples/${SAMPLE}`);
  const { page, pageErrors, status } = await openPage('i', '?backend=gpu');
  assertStarted(status, 'gpu');
  const adapter = await page.textContent('#adapter');
  assert.match(adapter, /GEMM: /);
  assert.equal(await page.isVisible('#backend-note'), false);
  const r = await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
  console.log(`[i] page (gpu): ${JSON.stringify(r.predictions)}; timings ${JSON.stringify(r.timings)}; adapter ${adapter}`);
  assert.equal(r.predictions[0].index, cli[0].index);
  assert.ok(Math.abs(r.predictions[0].probability - cli[0].probability) <= 1e-3);
  // A photo-sized file, 2400x1800 (10x its resize), resized as the CLI resizes it, to float
  // rounding (this path box-shrank an image over 4x its resize first): on the CPU, SwiftShader's
  // default, and by preprocess.wgsl once a load asks for it; a bad option is refused.
  const files = fs.mkdtempSync(path.join(os.tmpdir(), 'tokenmix-files-'));
  const large = png(2400, 1800, 3, (x, y) => [(x * 7 + y) & 255, (y * 3 + (x >> 4)) & 255, ((x ^ y) >> 3) & 255]);
  const resample = (options) => page.evaluate(async (o) => {
    const api = window.tokenmixApp.api;
    let refused = null;
    if (o) await api.loadModel(null, o).catch((e) => { refused = e.message; });
    return { resample: (await api.adapterInfo()).resample, refused };
  }, options);
  assert.deepEqual(await resample(null), { resample: 'cpu', refused: null }, 'SwiftShader resizes on the CPU by default');
  await pickedAnswersAsTheCli(page, 'i', files, 'large-cpu.png', large);
  assert.deepEqual(await resample({ resample: 'shader' }), { resample: 'cpu', refused: 'resample shader: expected gpu or cpu' });
  assert.deepEqual(await resample({ resample: 'gpu' }), { resample: 'gpu', refused: null });
  await pickedAnswersAsTheCli(page, 'i', files, 'large-gpu.png', large);
  fs.rmSync(files, { recursive: true, force: true });
  // f16 weights are asked for: SwiftShader has no shader-f16, so the new device stays f32 and
  // says why; a bad precision is refused and the model keeps working.
  const p = await page.evaluate(async () => {
    const api = window.tokenmixApp.api;
    const before = (await api.adapterInfo()).precision;
    const described = await api.loadModel(null, { precision: 'f16' });
    const info = await api.adapterInfo();
    let refused = null;
    try {
      await api.loadModel(null, { precision: 'f64' });
    } catch (e) {
      refused = e.message;
    }
    await api.loadModel(null, { precision: 'f32' });
    return { before, after: info.precision, note: info.precisionNote, backend: info.backend, rows: info.rows, refused, halves: described.f16Activations };
  });
  console.log(`[i] precision: ${JSON.stringify(p)}`);
  assert.deepEqual([p.before, p.after, p.backend], ['f32', 'f32', 'gpu']);
  // A software rasteriser: the norms' barrier-free row kernels, as the GEMM's.
  assert.equal(p.rows, 'invocation');
  assert.deepEqual(p.halves, [], 'an f32 device stores no activations in f16');
  assert.match(p.note, /f16 was asked for.*shader-f16/);
  assert.match(p.refused, /precision f64: expected f32 or f16/);
  const again = await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
  assert.equal(again.predictions[0].index, cli[0].index);
  // Autotuning (off by default on a software adapter): asked for, the load times each GEMM
  // shape class of the model and the page reports the choices; they go to the Cache API, so
  // after a reload the same load times nothing and still has them.
  const tune = () => page.evaluate(async () => {
    const api = window.tokenmixApp.api;
    const before = (await api.adapterInfo()).autotune;
    const t = performance.now();
    await api.loadModel(null, { autotune: true });
    const info = await api.adapterInfo();
    return { before, ms: Math.round(performance.now() - t), autotune: info.autotune, timed: info.gemmTimed, gemm: info.gemm };
  });
  // Aborted while it times (its load done by then, once a first class is timed): the load
  // rejects, counted as a load stopped by its token (not merely refused at the end), and the
  // model stays; the classes timed before the abort were stored, so after a reload the next
  // load times only the rest.
  const stopped = await page.evaluate(async () => {
    const api = window.tokenmixApp.api;
    const before = await api.adapterInfo();
    const ac = new AbortController();
    let settled = false;
    const load = api.loadModel(null, { autotune: true, signal: ac.signal }).then(() => 'loaded', (e) => `${e.name}: ${e.message}`).finally(() => { settled = true; });
    let info = before;
    while (info.gemmTimed < 1 && !settled) {
      await new Promise((r) => setTimeout(r, 2));
      info = await api.adapterInfo();
    }
    ac.abort();
    const aborted = performance.now();
    const got = await load;
    const answeredMs = Math.round(performance.now() - aborted);
    const after = await api.adapterInfo();
    return { got, answeredMs, timed: after.gemmTimed, loadsStopped: after.cancelled.loads - before.cancelled.loads, autotune: after.autotune, gemm: after.gemm };
  });
  console.log(`[i] autotune aborted once a class was timed: ${JSON.stringify(stopped)}`);
  assert.match(stopped.got, /^AbortError/);
  assert.equal(stopped.loadsStopped, 1, 'the load stopped in its autotuning');
  assert.equal(stopped.autotune, false, 'the aborted load left the autotune setting as it was');
  assert.ok(stopped.timed >= 1, 'a class was timed before the abort');
  const fresh = async () => {
    await page.reload();
    await page.waitForFunction(() => window.tokenmixApp, null, { timeout: 30_000 });
    assertStarted(await page.evaluate(() => window.tokenmixApp.ready), 'gpu');
  };
  await fresh();
  const first = await tune();
  console.log(`[i] autotune after a reload: ${JSON.stringify(first)}`);
  assert.deepEqual([first.before, first.autotune], [false, true]);
  assert.ok(first.timed > 0, 'shape classes were timed');
  const classes = (first.gemm.match(/→/g) ?? []).length;
  assert.equal(first.timed + stopped.timed, classes, `the aborted load's ${stopped.timed} came from the Cache API, the rest were timed: ${first.gemm}`);
  const tuned = await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
  assert.equal(tuned.predictions[0].index, cli[0].index);
  assert.ok(Math.abs(tuned.predictions[0].probability - cli[0].probability) <= 1e-3);
  await fresh();
  const second = await tune();
  console.log(`[i] autotune after another reload: ${JSON.stringify(second)}`);
  assert.equal(second.timed, 0, 'the choices came from the Cache API');
  assert.equal(second.gemm, first.gemm);
  const refused = await page.evaluate(() => window.tokenmixApp.api.loadModel(null, { autotune: 'yes' }).then(() => null, (e) => e.message));
  assert.match(refused, /autotune yes: expected true or false/);
  assert.deepEqual(pageErrors, []);
  await page.close();
});

/** Loads the full-size model and classifies a 224² image while a 10 ms timer runs on the page's
 * thread; returns the longest gap between its ticks and how long the work took. */
async function responsiveness(page) {
  return page.evaluate(async (url) => {
    const api = window.tokenmixApp.api;
    const stop = window.watchTimer(10);
    const t0 = performance.now();
    const desc = await api.loadModel(url, { name: 'mixer_s16_224 (random)' });
    const t1 = performance.now();
    const pixels = new Uint8ClampedArray(224 * 224 * 4).map((_, i) => (i * 7919) % 251);
    const top = await api.classify(new ImageData(pixels, 224, 224), 5);
    const t2 = performance.now();
    await new Promise((r) => setTimeout(r, 30));
    const { ticks, maxGap } = stop();
    await api.loadModel(null); // back to the embedded model
    return { maxGap, ticks, loadMs: t1 - t0, classifyMs: t2 - t1, preset: desc.preset, top: top.length };
  }, `${server.url}/hub/${BIG_REPO}/resolve/main/model.safetensors`);
}

test('j. in worker mode the page keeps responding while a full-size timm model loads and classifies', { timeout: 4 * TIMEOUT }, async () => {
  const { page, pageErrors, status } = await openPage('j');
  assertStarted(status);
  assert.equal(await page.evaluate(() => window.tokenmixApp.api.worker), true, 'the page runs tokenmix in a worker');
  const r = await responsiveness(page);
  console.log(`[j] worker: ${JSON.stringify(r)}`);
  assert.equal(r.preset, 'mixer_s16_224');
  assert.equal(r.top, 5);
  // The work is long enough that blocking would show (a 74 MB model, a 196-token forward).
  assert.ok(r.loadMs + r.classifyMs > 200, `the work took only ${r.loadMs + r.classifyMs} ms`);
  assert.ok(r.maxGap < 50, `the page's timer stalled for ${r.maxGap.toFixed(0)} ms`);
  assert.deepEqual(pageErrors, []);
  await page.close();
  // The same on the page's own thread (?worker=0), for the log: the stall a worker avoids.
  const inline = await openPage('j0', '?worker=0');
  assertStarted(inline.status);
  console.log(`[j] without a worker: ${JSON.stringify(await responsiveness(inline.page))}`);
  await inline.page.close();
});

test('k. the example consumer (examples/web-minimal, TypeScript) type-checks and classifies as the CLI', { timeout: 4 * TIMEOUT }, async () => {
  const tsc = path.join(ROOT, 'node_modules', '.bin', 'tsc');
  execFileSync(tsc, ['-p', path.join(ROOT, 'examples', 'web-minimal')], { cwd: ROOT, stdio: 'inherit' });
  const cli = cliClassify(`www/samples/${SAMPLE}`);
  const page = await context.newPage();
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') console.log(`[k] console.error: ${m.text()}`); });
  await page.goto(`${server.url}/examples/web-minimal/index.html`);
  await page.waitForFunction(() => document.body.dataset.result, null, { timeout: TIMEOUT });
  const result = JSON.parse(await page.evaluate(() => document.body.dataset.result));
  console.log(`[k] example: ${await page.textContent('#out')}`);
  assert.equal(result.length, 3);
  assert.equal(result[0].index, cli[0].index);
  assert.ok(Math.abs(result[0].probability - cli[0].probability) <= 1e-3);
  await shot(page, 'e2e-k-example');
  assert.deepEqual(pageErrors, []);
  await page.close();
});

test('l. clicking a class lays its per-token evidence over the image; the figures table shows what was learned', { timeout: 4 * TIMEOUT }, async () => {
  // The native CLI's explanation of the same sample: an independent path (native CPU executor).
  const out = execFileSync(BIN, ['--backend', 'cpu', 'explain', '--json', '--top-k', '5', `www/samples/${SAMPLE}`], { cwd: ROOT, encoding: 'utf8' });
  const cli = JSON.parse(out.slice(out.indexOf('[')))[0];
  const { page, pageErrors, status } = await openPage('l');
  assertStarted(status);
  await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
  await page.waitForSelector(`#predictions[data-source="${SAMPLE}"] li`);

  // The API: every top class's map sums with its bias to its logit, and matches the CLI's.
  const api = await page.evaluate(async () => {
    const e = await window.tokenmixApp.api.explain(5);
    return { grid: Array.from(e.grid), approximate: e.approximate, classes: e.classes.map((c) => ({ ...c, map: Array.from(c.map) })) };
  });
  assert.deepEqual(api.grid, cli.grid);
  assert.equal(api.classes.length, 5);
  for (const c of api.classes) {
    const sum = c.map.reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(sum + c.bias - c.logit) <= 1e-4 * Math.max(1, Math.abs(c.logit)), `class ${c.index}: ${sum} + ${c.bias} vs ${c.logit}`);
    const k = cli.classes.find((q) => q.index === c.index);
    assert.ok(k, `class ${c.index} is in the CLI's top 5`);
    const scale = Math.max(1e-6, ...k.map.map(Math.abs));
    const diff = Math.max(...c.map.map((v, i) => Math.abs(v - k.map[i])));
    assert.ok(diff <= 1e-3 * scale, `class ${c.index}: page map differs from the CLI's by ${diff} (scale ${scale})`);
  }

  // The page: click the top class; the overlay draws its map, the note states the identity.
  const top = cli.classes[0];
  await page.click('#predictions li:first-child');
  await page.waitForSelector(`#evidence-note[data-index="${top.index}"]`);
  const shown = await page.evaluate(() => {
    const note = document.querySelector('#evidence-note');
    const ov = document.querySelector('#overlay');
    const d = ov.getContext('2d').getImageData(0, 0, ov.width, ov.height).data;
    let painted = 0, red = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0) { painted++; if (d[i] > d[i + 2] + 40) red++; }
    return { ...note.dataset, text: note.textContent, checksum: Number(ov.dataset.checksum), count: Number(ov.dataset.count), painted, red,
      pressed: document.querySelector('#predictions li:first-child').getAttribute('aria-pressed') };
  });
  console.log(`[l] ${shown.text}; overlay painted ${shown.painted}, red ${shown.red}`);
  assert.equal(shown.pressed, 'true');
  assert.equal(shown.count, cli.grid[0] * cli.grid[1], 'the overlay draws one value per token');
  assert.ok(Math.abs(shown.checksum - Number(shown.sum)) <= 1e-5 * Math.max(1, Math.abs(Number(shown.sum))), 'the overlay is the map the note sums');
  assert.ok(Math.abs(Number(shown.sum) + Number(shown.bias) - Number(shown.logit)) <= 1e-4 * Math.max(1, Math.abs(Number(shown.logit))));
  assert.ok(Math.abs(Number(shown.logit) - top.logit) <= 1e-3 * Math.max(1, Math.abs(top.logit)), 'the logit the CLI reports');
  assert.ok(shown.painted > 1000 && shown.red > 100, 'the overlay is drawn, and the top class has tokens for it');
  assert.equal(shown.approximate, 'false');
  await shot(page, 'e2e-l-evidence-mixer');
  // Relative to the mean token: the overlay's values sum to zero; the note says so.
  await page.check('#evidence-relative');
  await page.waitForSelector('#evidence-note[data-relative="true"]');
  const rel = await page.$eval('#overlay', (c) => Number(c.dataset.checksum));
  assert.ok(Math.abs(rel) <= 1e-5 * Math.max(1, Math.abs(Number(shown.sum))), `relative map sums to ${rel}`);
  await shot(page, 'e2e-l-evidence-mixer-relative');
  await page.uncheck('#evidence-relative');
  await page.waitForSelector('#evidence-note[data-relative="false"]');
  // Another class replaces it; clicking it again takes the overlay off.
  await page.click('#predictions li:nth-child(2)');
  await page.waitForSelector(`#evidence-note[data-index="${cli.classes[1].index}"]`);
  await page.click('#predictions li:nth-child(2)');
  await page.waitForFunction(() => !document.querySelector('#evidence-note').dataset.index && !document.querySelector('#overlay').dataset.checksum);

  // What was learned, in numbers: the table is insight(layer)'s figures beside timm's init.
  const figs = await page.evaluate(async () => {
    const t = await window.tokenmixApp.api.insight(window.tokenmixApp.state.layer);
    const rows = [...document.querySelectorAll('#viz [data-testid="viz-figures"] tr[data-figure]')].map((r) => ({ ...r.dataset }));
    return { figures: t.figures, init: t.init, rows };
  });
  assert.equal(figs.rows.length, 3);
  for (const r of figs.rows) {
    assert.equal(Number(r.value), figs.figures[r.figure]);
    assert.equal(Number(r.init), figs.init[r.figure]);
  }

  // PoolFormer: the split is labelled approximate in the page.
  await page.evaluate(() => window.tokenmixApp.loadModelUrl('weights/poolformer_fmnist.safetensors'));
  await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
  await page.waitForFunction(() => document.querySelector('#predictions li') && !document.querySelector('#evidence-note').dataset.index);
  await page.click('#predictions li:first-child');
  await page.waitForSelector('#evidence-note[data-index]');
  const pool = await page.$eval('#evidence-note', (n) => ({ ...n.dataset, text: n.textContent }));
  assert.equal(pool.approximate, 'true');
  assert.match(pool.text, /Approximate/);
  assert.ok(Math.abs(Number(pool.sum) + Number(pool.bias) - Number(pool.logit)) <= 1e-4 * Math.max(1, Math.abs(Number(pool.logit))));
  await shot(page, 'e2e-l-evidence-poolformer');
  assert.deepEqual(pageErrors, []);
  await page.close();
});

test('m. each package wasm (one-thread and threaded) embeds the default model exactly once', () => {
  const model = fs.readFileSync(path.join(ROOT, 'weights', 'mixer_fmnist.safetensors'));
  const piece = model.subarray(model.length >> 1, (model.length >> 1) + 256);
  for (const pkg of ['pkg', 'pkg-threads']) {
    const wasm = fs.readFileSync(path.join(ROOT, 'js', pkg, 'tokenmix_bg.wasm'));
    let copies = 0;
    for (let at = wasm.indexOf(piece); at >= 0; at = wasm.indexOf(piece, at + 1)) copies += 1;
    console.log(`[m] js/${pkg}/tokenmix_bg.wasm: ${wasm.length} bytes, ${copies} copy of the ${model.length}-byte default model`);
    assert.equal(copies, 1, `js/${pkg}: a second copy costs every page load 2.3 MB (a const's data is copied per codegen unit)`);
  }
});

test('n. served cross-origin isolated, the CPU executor runs on 2 threads with the one-thread answers; the WGSL path runs in that build too', { timeout: 8 * TIMEOUT }, async () => {
  const cli = cliClassify(`www/samples/${SAMPLE}`);
  const isolated = await start(0, { root: WEB_ROOT, hubDir, isolated: true });
  try {
    // The default model on the sample, then the full-size Mixer (its GEMMs split over the
    // threads by columns) on the same sample: on one thread (this suite's server sends no
    // COOP/COEP, so the page runs js/pkg) and on two (js/pkg-threads).
    const run = async (tag, base) => {
      const { page, pageErrors, status } = await openPage(tag, '?backend=cpu&threads=2', null, context, base);
      assertStarted(status, 'cpu');
      const adapter = await page.evaluate(() => window.tokenmixApp.api.adapterInfo());
      const small = await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
      const desc = await page.evaluate((url) => window.tokenmixApp.loadModelUrl(url), `${base}/hub/${BIG_REPO}/resolve/main/model.safetensors`);
      assert.equal(desc.preset, 'mixer_s16_224');
      const big = await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
      const pick = (r) => r.predictions.map((p) => [p.index, p.probability]);
      console.log(`[${tag}] ${adapter.name}; note ${adapter.threadsNote}; default ${JSON.stringify(pick(small))}; mixer_s16 ${JSON.stringify(pick(big))} in ${big.timings.forwardMs.toFixed(0)} ms`);
      assert.deepEqual(pageErrors, []);
      return { page, adapter, small: pick(small), big: pick(big) };
    };
    const one = await run('n1', server.url);
    assert.equal(one.adapter.threads, 1);
    assert.match(one.adapter.threadsNote, /not cross-origin isolated/, 'the one-thread page says why');
    await one.page.close();
    const two = await run('n2', isolated.url);
    assert.equal(two.adapter.threads, 2, `the isolated page runs 2 threads: ${two.adapter.threadsNote}`);
    assert.equal(two.adapter.threadsNote, null);
    assert.match(await two.page.textContent('#adapter'), /CPU: 2 threads/);
    await shot(two.page, 'e2e-n-threads');
    await two.page.close();
    // Each element of a split GEMM is the same sum in the same order: the same bits.
    assert.deepEqual(two.small, one.small, 'the default model: two threads answer as one');
    assert.deepEqual(two.big, one.big, 'mixer_s16: two threads answer as one');
    assert.equal(two.small[0][0], cli[0].index, 'and as the CLI');
    assert.ok(Math.abs(two.small[0][1] - cli[0].probability) <= 1e-3);

    // The GPU executor from the threaded build (its memory is shared: wgpu's copies in and out
    // of it must still work), against the CLI.
    const { page, pageErrors, status } = await openPage('n3', '?backend=gpu&threads=2', null, context, isolated.url);
    assertStarted(status, 'gpu');
    assert.equal((await page.evaluate(() => window.tokenmixApp.api.adapterInfo())).threads, 2);
    const r = await page.evaluate((name) => window.tokenmixApp.classifySample(name), SAMPLE);
    console.log(`[n3] page (gpu, threaded build): ${JSON.stringify(r.predictions.map((p) => [p.index, p.probability]))}`);
    for (const c of cli) {
      const p = r.predictions.find((q) => q.index === c.index);
      assert.ok(p, `class ${c.index} is in the page's top 5`);
      assert.ok(Math.abs(p.probability - c.probability) <= 1e-3, `class ${c.index}: ${p.probability} vs CLI ${c.probability}`);
    }
    assert.deepEqual(pageErrors, []);
    await page.close();
  } finally {
    await isolated.close();
  }
});

test('p. an aborted classification stops mid-pass in the threaded worker; the page stops an older image\'s work when a newer one comes', { timeout: 8 * TIMEOUT }, async () => {
  const OTHER = 'fmnist-0018-bag.png';
  const isolated = await start(0, { root: WEB_ROOT, hubDir, isolated: true });
  try {
    const { page, pageErrors, status } = await openPage('p', '?backend=cpu&threads=2', null, context, isolated.url);
    assertStarted(status, 'cpu');
    const r = await page.evaluate(async ({ sample, other, url }) => {
      const app = window.tokenmixApp;
      const api = app.api;
      const pause = (ms) => new Promise((res) => setTimeout(res, ms));
      const settle = (p) => p.then((v) => ({ ok: v }), (e) => ({ error: e?.message ?? String(e), name: e?.name }));
      const pick = (preds) => preds.map((q) => [q.index, q.probability]);
      const counts = async () => (await api.adapterInfo()).cancelled;
      const out = { threads: (await api.adapterInfo()).threads };
      // The full-size Mixer: a pass of about 200 steps, long enough to abort in its middle.
      out.preset = (await app.loadModelUrl(url)).preset;
      const bitmap = await createImageBitmap(await (await fetch(`www/samples/${sample}`)).blob());
      const plain = await api.classifyDetailed(bitmap, 5);
      out.plain = pick(plain.predictions);
      // A pass's length: the median of three warm ones (the first after a load runs colder).
      const warm = [];
      for (let i = 0; i < 3; i++) warm.push((await api.classifyDetailed(bitmap, 5)).timings.forwardMs);
      out.passMs = warm.sort((x, y) => x - y)[1];
      // The API: a classification aborted a fraction of a pass after it was called. Where the
      // abort came before the pass began (a slow start), the next try waits longer.
      out.tries = await window.abortTries(api, (signal) => api.classify(bitmap, 5, { signal }), out.passMs, [0.4, 0.6, 0.8]);
      // Then it classifies as before, bit for bit; the options-object form too.
      out.again = pick(await api.classify(bitmap, 5));
      out.top2 = pick(await api.classify(bitmap, { topK: 2 }));
      // A call queued behind another, aborted while it waits: it never runs a step.
      {
        const before = await counts();
        const ac = new AbortController();
        const first = settle(api.classify(bitmap, 5));
        const queued = settle(api.classify(bitmap, 5, { signal: ac.signal }));
        await pause(out.passMs * 0.3);
        ac.abort();
        out.queued = { first: await first, queued: await queued };
        const after = await counts();
        out.queued.midPass = after.midPass - before.midPass;
        out.queued.beforeStart = after.beforeStart - before.beforeStart;
      }
      // explain, aborted in its pass (timed first: a fraction of a pass of its own).
      {
        const t0 = performance.now();
        await api.explain(5);
        out.explainMs = performance.now() - t0;
        const tries = await window.abortTries(api, (signal) => api.explain(5, { signal }), out.explainMs, [0.5, 0.3, 0.7], (t) => t.midPass + t.beforeStart > 0);
        const last = tries.at(-1);
        out.explain = { ...last.got, stopped: last.midPass + last.beforeStart };
      }
      out.badSignal = await settle(api.classify(bitmap, 5, { signal: 'stop' }));
      out.badRemember = await settle(api.classify(bitmap, { remember: 'no' }));
      // A load aborted when its download has ended (its last progress event): its conversion
      // and upload stop at the next tensor, and the model stays. Where the abort lands is a race
      // the page cannot see: the worker may not yet have read the stream's end (the abort then
      // stops the download) or, on a loaded machine, may have converted every tensor before the
      // page's thread ran onProgress (the abort then only keeps the model from being replaced).
      // So it tries up to six times, the abort a few ms after the last progress event in some
      // tries, and stops at the first load stopped in its conversion.
      out.loads = [];
      for (const delay of [0, 10, 0, 25, 0, 10]) {
        const before = await counts();
        const ac = new AbortController();
        const t0 = performance.now();
        let tAbort = null;
        const abort = () => { tAbort = performance.now() - t0; ac.abort(); };
        const load = settle(api.loadModel(`${url}?again=${out.loads.length}`, {
          signal: ac.signal,
          onProgress: (loaded, total) => { if (loaded === total) { if (delay) setTimeout(abort, delay); else abort(); } },
        }));
        const result = await load;
        const tEnd = performance.now() - t0;
        out.loads.push({ delay, result, model: (await api.modelInfo()).preset, tAbort, tEnd, stopped: (await counts()).loads - before.loads });
        if (out.loads.at(-1).stopped) break;
      }
      // The page: a sample clicked while the previous image's pass runs stops that pass, and
      // the newer image is shown.
      {
        const before = await counts();
        const older = settle(app.classifySample(sample));
        await pause(out.passMs * 0.5);
        const newer = await settle(app.classifySample(other));
        out.page = { older: await older, newer, shown: document.querySelector('#predictions').dataset.source };
        const after = await counts();
        out.page.midPass = after.midPass - before.midPass;
        out.page.beforeStart = after.beforeStart - before.beforeStart;
        out.page.direct = pick(await api.classify(await createImageBitmap(await (await fetch(`www/samples/${other}`)).blob()), 5));
      }
      out.slices = (await api.adapterInfo()).slices;
      return out;
    }, { sample: SAMPLE, other: OTHER, url: `${isolated.url}/hub/${BIG_REPO}/resolve/main/model.safetensors` });
    console.log(`[p] ${JSON.stringify(r)}`);
    assert.equal(r.threads, 2, 'the threaded build runs');
    assert.deepEqual([r.slices.on, r.slices.pauses], [false, 0], 'the threaded worker runs a pass whole: the page cancels it through shared memory');
    assert.equal(r.preset, 'mixer_s16_224');
    for (const t of r.tries) assert.equal(t.got.name, 'AbortError', `an aborted call rejects with the signal's reason: ${JSON.stringify(t.got)}`);
    const last = r.tries[r.tries.length - 1];
    assert.equal(last.midPass, 1, `a pass aborted in its middle stopped there (tries: ${JSON.stringify(r.tries)})`);
    assert.deepEqual(r.again, r.plain, 'after the stopped passes it classifies as before');
    assert.deepEqual(r.top2, r.plain.slice(0, 2));
    assert.deepEqual(r.queued.first.ok?.map((q) => [q.index, q.probability]), r.plain, 'the call before the aborted one ran');
    assert.equal(r.queued.queued.name, 'AbortError');
    assert.equal(r.queued.beforeStart, 1, `the queued call stopped before its first step: ${JSON.stringify(r.queued)}`);
    assert.equal(r.queued.midPass, 0);
    assert.equal(r.explain.name, 'AbortError');
    assert.equal(r.explain.stopped, 1, 'the explanation stopped');
    assert.match(r.badSignal.error, /signal: expected an AbortSignal/);
    assert.match(r.badRemember.error, /remember: expected true or false/);
    assert.ok(r.loads.length > 0, 'a load was aborted');
    for (const l of r.loads) {
      assert.equal(l.result.name, 'AbortError', `the load aborted after its download rejects: ${JSON.stringify(l)}`);
      assert.equal(l.model, 'mixer_s16_224', 'the model stays');
    }
    assert.equal(r.loads.at(-1).stopped, 1, `a load's conversion stopped (tries: ${JSON.stringify(r.loads)})`);
    assert.equal(r.page.older.name, 'AbortError', `the older image's classification was stopped: ${JSON.stringify(r.page)}`);
    assert.equal(r.page.midPass + r.page.beforeStart, 1, 'the page stopped one pass');
    assert.equal(r.page.shown, OTHER, 'the newer image is shown');
    assert.deepEqual(r.page.newer.ok.predictions.map((q) => [q.index, q.probability]), r.page.direct, 'as the API classifies it');
    assert.deepEqual(await shownPredictions(page).then((ps) => ps.map((q) => [q.index, q.probability])), r.page.direct);
    // The load's status line names the long hub URL: it wraps inside its panel.
    const line = await page.$eval('#model-status', (e) => ({ text: e.textContent, over: e.scrollWidth - e.clientWidth }));
    assert.match(line.text, /resolve\/main\/model\.safetensors/);
    assert.ok(line.over <= 0, `the model status runs ${line.over} px past its panel: ${line.text}`);
    await shot(page, 'e2e-p-superseded');
    assert.deepEqual(pageErrors, []);
    await page.close();

    // The one-thread build (this suite's server is not cross-origin isolated): the abort is
    // read between passes, so an aborted call still rejects with the signal's reason, and the
    // worker goes on.
    const one = await openPage('p1', '?backend=cpu');
    assertStarted(one.status, 'cpu');
    const s = await one.page.evaluate(async (sample) => {
      const api = window.tokenmixApp.api;
      const settle = (p) => p.then((v) => ({ ok: v }), (e) => ({ error: e?.message ?? String(e), name: e?.name }));
      const bitmap = await createImageBitmap(await (await fetch(`www/samples/${sample}`)).blob());
      const ac = new AbortController();
      const call = settle(api.classify(bitmap, 5, { signal: ac.signal }));
      ac.abort();
      const pre = new AbortController();
      pre.abort();
      return {
        table: (await api.adapterInfo()).threads, aborted: await call,
        preAborted: await settle(api.classify(bitmap, 5, { signal: pre.signal })),
        after: (await api.classify(bitmap, 5)).length,
      };
    }, SAMPLE);
    console.log(`[p1] ${JSON.stringify(s)}`);
    assert.equal(s.table, 1);
    assert.equal(s.aborted.name, 'AbortError');
    assert.equal(s.preAborted.name, 'AbortError');
    assert.equal(s.after, 5);
    assert.deepEqual(one.pageErrors, []);
    await one.page.close();
  } finally {
    await isolated.close();
  }
});

test('q. in the one-thread build a CPU pass runs in slices: an abort stops it mid-pass in the worker and on the page\'s own thread, which keeps drawing; calls keep their order; a load converts in slices too: aborted, it stops in its conversion and changes nothing', { timeout: 8 * TIMEOUT }, async () => {
  const OTHER = 'fmnist-0018-bag.png';
  // This suite's server is not cross-origin isolated: the one-thread build, in the worker.
  const { page, pageErrors, status } = await openPage('q', '?backend=cpu');
  assertStarted(status, 'cpu');
  const r = await page.evaluate(async ({ sample, other, url }) => {
    const pause = (ms) => new Promise((res) => setTimeout(res, ms));
    const settle = (p) => p.then((v) => ({ ok: v }), (e) => ({ error: e?.message ?? String(e), name: e?.name }));
    const pick = (preds) => preds.map((q) => [q.index, q.probability]);
    const bitmapOf = async (name) => createImageBitmap(await (await fetch(`www/samples/${name}`)).blob());
    const [a, b] = [await bitmapOf(sample), await bitmapOf(other)];
    // The same checks on a classifier in the worker and on one on this thread.
    const checks = async (api) => {
      const counts = async () => (await api.adapterInfo()).cancelled;
      const out = { threads: (await api.adapterInfo()).threads, start: (await api.modelInfo()).name };
      // A load aborted when its download has ended, in its conversion, which runs in slices:
      // it stops there (counted in `cancelled.loads`), rejects and changes nothing (the
      // embedded model stays). Where the abort comes first it stops the download instead; it
      // tries until a try stopped in its conversion.
      out.loads = [];
      for (const delay of [0, 10, 25, 0, 50, 10]) {
        const before = (await counts()).loads;
        const ac = new AbortController();
        const t0 = performance.now();
        let tAsked = null, tAbort = null;
        const abort = () => { tAbort = performance.now() - t0; ac.abort(); };
        const load = await settle(api.loadModel(`${url}?q=${Math.random()}`, {
          signal: ac.signal,
          onProgress: (loaded, total) => {
            if (loaded !== total) return;
            tAsked = performance.now() - t0 + delay;
            if (delay) setTimeout(abort, delay); else abort();
          },
        }));
        const tEnd = performance.now() - t0;
        const stopped = (await counts()).loads - before;
        out.loads.push({ delay, name: load.name, after: (await api.modelInfo()).name, tAsked, tAbort, tEnd, stopped });
        if (stopped) break;
      }
      // The full-size Mixer: a pass long enough to abort in its middle. This thread's timer
      // from its download's end to its end: how often it ran while the conversion went on.
      {
        const s0 = (await api.adapterInfo()).slices;
        let stop = null, tDownloaded = 0;
        const desc = await api.loadModel(url, { name: 'mixer_s16_224 (random)', onProgress: (loaded, total) => {
          if (loaded === total && !stop) {
            tDownloaded = performance.now();
            stop = window.watchTimer(1);
          }
        } });
        const ms = performance.now() - tDownloaded;
        const { ticks, maxGap } = stop();
        const s1 = (await api.adapterInfo()).slices;
        out.preset = desc.preset;
        out.convert = { ms, ticks, maxGap, pauses: s1.pauses - s0.pauses, pausedMs: s1.pausedMs - s0.pausedMs };
      }
      const plain = await api.classifyDetailed(a, 5);
      out.plain = pick(plain.predictions);
      const warm = [];
      for (let i = 0; i < 3; i++) warm.push((await api.classifyDetailed(a, 5)).timings.forwardMs);
      out.passMs = warm.sort((x, y) => x - y)[1];
      // This thread's timer during one pass: how often it ran, and its longest wait.
      {
        const s0 = (await api.adapterInfo()).slices;
        const stop = window.watchTimer(1);
        const t0 = performance.now();
        const again = await api.classifyDetailed(a, 5);
        const callMs = performance.now() - t0;
        const { ticks, maxGap } = stop();
        const s1 = (await api.adapterInfo()).slices;
        out.timer = { ticks, maxGap, callMs, forwardMs: again.timings.forwardMs, same: JSON.stringify(pick(again.predictions)) === JSON.stringify(out.plain),
          slices: s1.on, every: s1.every, pauses: s1.pauses - s0.pauses, pausedMs: s1.pausedMs - s0.pausedMs };
      }
      out.tries = (await window.abortTries(api, (signal) => api.classify(a, 5, { signal }), out.passMs, [0.4, 0.6, 0.8]))
        .map((t) => ({ ...t, got: t.got.name }));
      // Two calls at once run one after the other, in order, each with its own image; a third
      // call queued behind them, aborted while it waits, never runs a step.
      {
        const before = await counts();
        const order = [];
        const ac = new AbortController();
        const first = api.classify(a, 5).then((v) => { order.push('first'); return pick(v); });
        const second = api.classify(b, 5).then((v) => { order.push('second'); return pick(v); });
        const third = settle(api.classify(a, 5, { signal: ac.signal }));
        await pause(out.passMs * 0.3);
        ac.abort();
        out.order = { first: await first, second: await second, third: (await third).name, order };
        const after = await counts();
        out.order.beforeStart = after.beforeStart - before.beforeStart;
        out.order.midPass = after.midPass - before.midPass;
        out.order.alone = pick(await api.classify(b, 5));
      }
      // explain, aborted in its pass (timed first: a fraction of a pass of its own).
      {
        await api.classify(a, 5);
        const t0 = performance.now();
        await api.explain(5);
        out.explainMs = performance.now() - t0;
        const tries = await window.abortTries(api, (signal) => api.explain(5, { signal }), out.explainMs, [0.5, 0.3, 0.7], (t) => t.midPass + t.beforeStart > 0);
        const last = tries.at(-1);
        out.explain = last.got.name;
        out.explainStopped = last.midPass + last.beforeStart;
        out.explainAfter = (await api.explain(3)).classes.length;
      }
      return out;
    };
    const worker = await checks(window.tokenmixApp.api);
    const { createClassifier } = await import(new URL('js/index.js', document.baseURI).href);
    const inline = await createClassifier({ worker: false, backend: 'cpu' });
    const onPage = await checks(inline);
    inline.dispose();
    return { worker, onPage };
  }, { sample: SAMPLE, other: OTHER, url: `${server.url}/hub/${BIG_REPO}/resolve/main/model.safetensors` });
  console.log(`[q] ${JSON.stringify(r)}`);
  for (const [where, o] of Object.entries(r)) {
    assert.equal(o.threads, 1, `${where}: the one-thread build`);
    assert.ok(o.loads.length > 0, `${where}: a load was aborted`);
    for (const l of o.loads) {
      assert.equal(l.name, 'AbortError', `${where}: the aborted load rejects: ${JSON.stringify(l)}`);
      assert.equal(l.after, o.start, `${where}: the aborted load changed nothing: ${JSON.stringify(o.loads)}`);
    }
    assert.equal(o.loads.at(-1).stopped, 1, `${where}: a load stopped in its conversion: ${JSON.stringify(o.loads)}`);
    assert.equal(o.preset, 'mixer_s16_224');
    // The copy and the conversion gave the thread back: held whole before, this thread's timer
    // ran once at most meanwhile.
    assert.ok(o.convert.pauses >= 3, `${where}: the load paused ${o.convert.pauses} times: ${JSON.stringify(o.convert)}`);
    assert.ok(o.convert.ticks >= 3, `${where}: this thread's timer ran ${o.convert.ticks} times during a load's last ${o.convert.ms.toFixed(0)} ms`);
    assert.ok(o.timer.same, `${where}: the pass in slices classifies as before`);
    assert.equal(o.timer.slices, true, `${where}: CPU passes run in slices`);
    assert.ok(o.timer.pauses >= 3, `${where}: the pass paused ${o.timer.pauses} times`);
    // The thread came back during the pass: a pass held it whole before (one tick at most).
    assert.ok(o.timer.ticks >= 5, `${where}: this thread's timer ran ${o.timer.ticks} times during a ${o.timer.callMs.toFixed(0)} ms call`);
    // On the page's own thread a 1 ms timer is due whenever a slice ends, and a pause lets it
    // run (two rounds of messages: with one, Chromium ran it in only about half the pauses).
    if (where === 'onPage') {
      assert.ok(o.timer.ticks >= 0.8 * o.timer.pauses, `${where}: this thread's timer ran ${o.timer.ticks} times in a pass's ${o.timer.pauses} pauses`);
      assert.ok(o.convert.ticks >= 0.8 * o.convert.pauses, `${where}: this thread's timer ran ${o.convert.ticks} times in a load's ${o.convert.pauses} pauses`);
    }
    for (const t of o.tries) assert.equal(t.got, 'AbortError', `${where}: ${JSON.stringify(t)}`);
    assert.equal(o.tries.at(-1).midPass, 1, `${where}: a pass aborted in its middle stopped there (tries: ${JSON.stringify(o.tries)})`);
    assert.deepEqual(o.order.first, o.plain, `${where}: the first of two calls`);
    assert.deepEqual(o.order.second, o.order.alone, `${where}: the second, with its own image`);
    assert.notDeepEqual(o.order.second, o.order.first, `${where}: two images, two results`);
    assert.deepEqual(o.order.order, ['first', 'second'], `${where}: in the order they were made`);
    assert.equal(o.order.third, 'AbortError');
    assert.equal(o.order.beforeStart, 1, `${where}: the queued call stopped before its first step: ${JSON.stringify(o.order)}`);
    assert.equal(o.order.midPass, 0, `${where}: ${JSON.stringify(o.order)}`);
    assert.equal(o.explain, 'AbortError');
    assert.equal(o.explainStopped, 1, `${where}: the explanation stopped`);
    assert.equal(o.explainAfter, 3);
  }
  assert.deepEqual(r.onPage.plain, r.worker.plain, 'the same classes in the worker and on this thread');
  assert.deepEqual(pageErrors, []);
  await page.close();
});
