// The token-mixing visualiser: colour maps, heatmaps on canvases, and one view per kind of
// token mixer (insight(layer).kind). Nothing here talks to the model or computes what to show:
// the page passes in what insight()/stageEnergy()/explain() returned (the Rust insight module). Every canvas drawn from weights carries
// data-min/-max/-checksum (sum of the values drawn) so a test can tie pixels to weights.

// ColorBrewer RdBu (9 classes), blue for negative, near-white at zero, red for positive.
const RDBU = ['2166ac', '4393c3', '92c5de', 'd1e5f0', 'f7f7f7', 'fddbc7', 'f4a582', 'd6604d', 'b2182b'];
// viridis, 9 stops: dark purple (low) to yellow (high).
const VIRIDIS = ['440154', '472d7b', '3b528b', '2c728e', '21918c', '28ae80', '5ec962', 'addc30', 'fde725'];

function makeLut(stops) {
  const rgb = stops.map((h) => [0, 2, 4].map((i) => parseInt(h.slice(i, i + 2), 16)));
  const lut = new Uint8ClampedArray(256 * 3);
  for (let i = 0; i < 256; i++) {
    const x = (i / 255) * (rgb.length - 1);
    const j = Math.min(Math.floor(x), rgb.length - 2);
    const f = x - j;
    for (let c = 0; c < 3; c++) lut[i * 3 + c] = Math.round(rgb[j][c] * (1 - f) + rgb[j + 1][c] * f);
  }
  return lut;
}
const DIVERGING = makeLut(RDBU);
const SEQUENTIAL = makeLut(VIRIDIS);

/** Colour for value v: diverging maps [-scale, scale], sequential maps [0, scale]. */
export function colour(v, scale, cmap = 'diverging') {
  if (!Number.isFinite(v)) return [128, 128, 128];
  const s = scale > 0 ? scale : 1;
  const t = cmap === 'diverging' ? (Math.max(-1, Math.min(1, v / s)) + 1) / 2 : Math.max(0, Math.min(1, v / s));
  const lut = cmap === 'diverging' ? DIVERGING : SEQUENTIAL;
  const i = Math.round(t * 255) * 3;
  return [lut[i], lut[i + 1], lut[i + 2]];
}

export function stats(values) {
  let min = Infinity, max = -Infinity, sum = 0, absMax = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v < min) min = v;
    if (v > max) max = v;
    sum += v;
    const a = Math.abs(v);
    if (a > absMax) absMax = a;
  }
  return { min, max, sum, absMax, count: values.length };
}

/** Records what was drawn on an element: data-min, data-max, data-checksum, data-count. */
export function stamp(el, values, extra = {}) {
  const s = stats(values);
  el.dataset.min = String(s.min);
  el.dataset.max = String(s.max);
  el.dataset.checksum = String(s.sum);
  el.dataset.count = String(s.count);
  for (const [k, v] of Object.entries(extra)) el.dataset[k] = String(v);
  return s;
}

export function fmt(v, digits = 3) {
  if (!Number.isFinite(v)) return String(v);
  if (v === 0) return '0';
  const a = Math.abs(v);
  const s = a >= 1e-3 && a < 1e4 ? v.toPrecision(digits) : v.toExponential(digits - 1);
  return s.replace('-', '−');
}

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  e.append(...children.filter((c) => c != null));
  return e;
}

/**
 * Draws values (row-major h x w) as a heatmap, `cell` canvas pixels per value (CSS scales it
 * up with nearest-neighbour). scale: |v| that saturates (diverging) or the top of the
 * sequential map; defaults to max |v| (diverging) or max v (sequential).
 */
export function drawHeatmap(canvas, values, h, w, { scale, cmap = 'diverging', cell = 1, extra = {} } = {}) {
  const s = stats(values);
  const sc = scale ?? (cmap === 'diverging' ? s.absMax : Math.max(s.max, 0));
  canvas.width = w * cell;
  canvas.height = h * cell;
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(w * cell, h * cell);
  const px = img.data;
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const [r, g, b] = colour(values[y * w + x], sc, cmap);
      for (let dy = 0; dy < cell; dy++) {
        let o = ((y * cell + dy) * w * cell + x * cell) * 4;
        for (let dx = 0; dx < cell; dx++, o += 4) {
          px[o] = r; px[o + 1] = g; px[o + 2] = b; px[o + 3] = 255;
        }
      }
    }
  }
  ctx.putImageData(img, 0, 0);
  stamp(canvas, values, { scale: sc, rows: h, cols: w, ...extra });
  return { ...s, scale: sc };
}

/** A colour bar for the legend (CSS stretches it). */
export function drawLegend(canvas, cmap = 'diverging') {
  canvas.width = 256;
  canvas.height = 1;
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(256, 1);
  for (let i = 0; i < 256; i++) {
    const v = cmap === 'diverging' ? (i / 255) * 2 - 1 : i / 255;
    const [r, g, b] = colour(v, 1, cmap);
    img.data.set([r, g, b, 255], i * 4);
  }
  ctx.putImageData(img, 0, 0);
  return canvas;
}

function legend(cmap, lo, mid, hi, text) {
  const bar = drawLegend(el('canvas', { class: 'legend-bar', 'data-testid': 'viz-legend', 'aria-hidden': 'true' }), cmap);
  return el('div', { class: 'legend' },
    el('div', { class: 'legend-scale' }, bar,
      el('div', { class: 'legend-ticks' }, el('span', { text: lo }), el('span', { text: mid }), el('span', { text: hi }))),
    el('p', { class: 'muted', text }));
}

/** The [gh, gw] token grid of an insight() result, checked against its column count. */
function gridOf(t, count) {
  const g = Array.from(t.grid ?? []);
  if (g.length === 2 && g[0] * g[1] === count) return g;
  const side = Math.round(Math.sqrt(count));
  return side * side === count ? [side, side] : [1, count];
}

// ---------------------------------------------------------------------------------------
// What was learned, in numbers: the layer's structure figures beside timm's initialisation.

const FIGURES = [
  ['locality', 'Locality', 'patches', '|w|-weighted mean distance between a token and what it mixes from: lower is more local', 2],
  ['shiftInvariance', 'Shift invariance', '', "share of the map's energy one relative-offset kernel explains (1 = a convolution)", 3],
  ['lowFrequency', 'Low-frequency share', '', "share of the rows' spectral energy at ≤ 0.25 cycles per patch", 3],
];

/** The figures table of an insight(layer) result, or nothing where the mixer is fixed. */
export function figuresTable(t) {
  if (!t.figures || !t.init) return null;
  const rows = FIGURES.map(([key, name, unit, help, digits]) => {
    const v = t.figures[key], i = t.init[key];
    const u = unit ? ` ${unit}` : '';
    return el('tr', { dataset: { figure: key, value: String(v), init: String(i) }, title: help },
      el('th', { scope: 'row', text: name }),
      el('td', { text: `${v.toFixed(digits)}${u}` }),
      el('td', { class: 'muted', text: `${i.toFixed(digits)}${u}` }));
  });
  return el('div', { class: 'figures-box' },
    el('table', { class: 'figures', 'data-testid': 'viz-figures' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col', text: `Layer ${t.layer}` }), el('th', { scope: 'col', text: 'learned' }), el('th', { scope: 'col', text: 'timm init' }))),
      el('tbody', {}, ...rows)),
    el('p', { class: 'muted figures-on', text: `Measured on ${t.figuresOn}. Far from the init values means the layer learned structure: local, convolution-like, smooth.` }));
}

// ---------------------------------------------------------------------------------------
// MLP-Mixer: token-MLP fc1 units, each a pattern over the token grid.

function renderMixer(host, t, hooks) {
  const rows = t.rows, cols = t.cols, data = t.data;
  const [gh, gw] = gridOf(t, cols);
  // Frequencies, partners and the display order come from Rust (insight(layer)).
  const units = t.units ?? [];
  const groups = t.groups ?? [];
  if (units.length !== rows) {
    host.replaceChildren(el('p', { class: 'muted', text: `No unit analysis for this layer (${units.length} of ${rows} units).` }));
    return { grid: [gh, gw] };
  }
  const caption = el('p', { class: 'viz-caption', 'aria-live': 'polite', text: 'Hover a unit to see it laid over the image.' });
  const grid = el('div', { class: 'units', 'data-testid': 'viz-units', style: `--aspect: ${gw} / ${gh}` });
  const rowValues = (u) => data.subarray(u * cols, (u + 1) * cols);
  const describe = (u) => {
    const a = units[u];
    const partner = a.pairedWith >= 0 ? `; paired with unit ${a.pairedWith} (r = ${fmt(a.partnerCorr, 2)})` : '';
    return `unit ${u}: max |w| ${fmt(a.absMax)}, dominant frequency (ky, kx) = (${a.ky}, ${a.kx})${partner}`;
  };
  const unitCanvas = (u) => {
    const c = el('canvas', {
      class: 'unit', 'data-testid': 'viz-unit', role: 'img',
      'aria-label': describe(u), title: describe(u),
    });
    const vals = rowValues(u);
    drawHeatmap(c, vals, gh, gw, { scale: units[u].absMax, extra: { unit: u, layer: t.layer } });
    const show = () => {
      caption.textContent = describe(u);
      hooks.show({ values: vals, grid: [gh, gw], scale: units[u].absMax, cmap: 'diverging', label: `unit ${u}` });
    };
    c.addEventListener('pointerenter', show);
    c.addEventListener('pointerleave', () => hooks.clear());
    c.addEventListener('click', () => hooks.pin({ values: vals, grid: [gh, gw], scale: units[u].absMax, cmap: 'diverging', label: `unit ${u}` }));
    return c;
  };
  for (const g of groups) {
    if (g.length === 2) grid.append(el('div', { class: 'pair', title: 'opposite-sign pair' }, unitCanvas(g[0]), unitCanvas(g[1])));
    else grid.append(unitCanvas(g[0]));
  }
  const pairs = groups.filter((g) => g.length === 2).length;
  stamp(grid, data, { layer: t.layer, units: rows, pairs });
  host.replaceChildren(
    figuresTable(t),
    el('p', { class: 'viz-lead', text:
      `Token-mixing MLP, first layer: ${rows} hidden units, each a weight pattern over the ${gh}×${gw} token grid ` +
      `(what it sums across image positions). Sorted by dominant spatial frequency; ${pairs} opposite-sign pairs sit side by side (outlined).` }),
    legend('diverging', '−max', '0', '+max', 'Each unit is scaled by its own max |w|.'),
    caption,
    grid,
  );
  return { grid: [gh, gw] };
}

// ---------------------------------------------------------------------------------------
// gMLP / ResMLP (and PoolFormer's fixed matrix): a tokens x tokens mixing matrix.

function percentileAbs(data, q) {
  const a = Float32Array.from(data, Math.abs).sort();
  return a.length ? a[Math.min(a.length - 1, Math.floor(q * (a.length - 1)))] : 0;
}

function cellAt(canvas, ev, h, w) {
  const r = canvas.getBoundingClientRect();
  const x = Math.floor(((ev.clientX - r.left) / r.width) * w);
  const y = Math.floor(((ev.clientY - r.top) / r.height) * h);
  return x >= 0 && y >= 0 && x < w && y < h ? [y, x] : null;
}

function renderMatrix(host, t, hooks, what) {
  const S = t.cols, data = t.data;
  const [gh, gw] = gridOf(t, S);
  const s = stats(data);
  const clip = percentileAbs(data, 0.99) || s.absMax || 1;
  const pos = (i) => `(${Math.floor(i / gw)}, ${i % gw})`;
  const caption = el('p', { class: 'viz-caption', 'aria-live': 'polite', text: 'Hover or click the image, or a row of the matrix, to see how that token mixes from all the others.' });
  const matrix = el('canvas', { class: 'matrix', 'data-testid': 'viz-matrix', role: 'img',
    'aria-label': `${what}: ${S}×${S} token-mixing matrix, layer ${t.layer}` });
  drawHeatmap(matrix, data, S, S, { scale: clip, extra: { layer: t.layer, kind: t.kind } });
  const row = (i) => data.subarray(i * S, (i + 1) * S);
  const rowSpec = (i) => {
    const r = row(i);
    return { values: r, grid: [gh, gw], scale: stats(r).absMax, cmap: 'diverging', highlight: i, label: `token ${pos(i)}` };
  };
  matrix.addEventListener('pointermove', (ev) => {
    const c = cellAt(matrix, ev, S, S);
    if (!c) return;
    const [ti, si] = c;
    caption.textContent = `W[t = ${pos(ti)}, s = ${pos(si)}] = ${fmt(data[ti * S + si])}: output token ${pos(ti)} takes this much of token ${pos(si)}.`;
    hooks.show(rowSpec(ti));
  });
  matrix.addEventListener('pointerleave', () => hooks.clear());
  matrix.addEventListener('click', (ev) => { const c = cellAt(matrix, ev, S, S); if (c) hooks.pin(rowSpec(c[0])); });

  const k = t.offsetKernel; // mean weight by offset, computed in Rust
  const cell = Math.max(1, Math.min(24, Math.floor(240 / Math.max(k.h, k.w))));
  const kernel = el('canvas', { class: 'kernel', 'data-testid': 'viz-offset-kernel', role: 'img',
    'aria-label': `Mean weight by relative offset, ${k.h}×${k.w}` });
  drawHeatmap(kernel, k.values, k.h, k.w, { cell, extra: { layer: t.layer } });
  if (cell >= 4) {
    const ctx = kernel.getContext('2d');
    ctx.strokeStyle = '#000';
    ctx.lineWidth = Math.max(1, cell / 8);
    ctx.strokeRect((gw - 1) * cell + 0.5, (gh - 1) * cell + 0.5, cell - 1, cell - 1);
  }
  kernel.addEventListener('pointermove', (ev) => {
    const c = cellAt(kernel, ev, k.h, k.w);
    if (c) caption.textContent = `offset (dy, dx) = (${c[0] - gh + 1}, ${c[1] - gw + 1}): mean weight ${fmt(k.values[c[0] * k.w + c[1]])}`;
  });
  host.replaceChildren(
    figuresTable(t),
    el('p', { class: 'viz-lead', text: `${what}: a ${S}×${S} matrix over the ${gh}×${gw} token grid. Row t is how output token t mixes from every token s.` }),
    el('div', { class: 'figs' },
      el('figure', {}, matrix, el('figcaption', { text: `W (${S}×${S}); colour saturates at ±${fmt(clip)} (99th percentile of |w|; max |w| ${fmt(s.absMax)})` })),
      el('figure', {}, kernel, el('figcaption', { text: `Mean weight by offset pos(s) − pos(t), ${k.h}×${k.w}; the outlined centre is the token itself. A bright centre that fades outwards means local mixing.` }))),
    legend('diverging', `−${fmt(clip)}`, '0', `+${fmt(clip)}`, 'Blue: negative weight, red: positive.'),
    caption,
  );
  return { grid: [gh, gw], tokenRow: rowSpec };
}

// ---------------------------------------------------------------------------------------
// PoolFormer: the mixer is fixed 3x3 average pooling minus identity.

function renderPool(host, t) {
  const data = t.data;
  // Either the 9x9 matrix of the mixer on a 3x3 token grid (row 4 = the centre token's
  // kernel) or the 3x3 kernel itself.
  let kernelValues, matrix = null;
  if (t.rows * t.cols === 81 && data.length === 81) {
    kernelValues = data.slice(4 * 9, 5 * 9);
    matrix = el('canvas', { class: 'kernel', 'data-testid': 'viz-pool-matrix', role: 'img',
      'aria-label': 'The pooling mixer as a 9×9 matrix over a 3×3 token grid' });
    drawHeatmap(matrix, data, 9, 9, { cell: 24, extra: { layer: t.layer } });
  } else {
    kernelValues = data.slice(0, 9);
  }
  const cell = 64;
  const kernel = el('canvas', { class: 'kernel text', 'data-testid': 'viz-pool-kernel', role: 'img',
    'aria-label': `Fixed kernel: ${Array.from(kernelValues, (v) => fmt(v)).join(', ')}` });
  drawHeatmap(kernel, kernelValues, 3, 3, { cell, extra: { layer: t.layer } });
  const ctx = kernel.getContext('2d');
  ctx.font = `${cell / 4}px system-ui, sans-serif`;
  ctx.textAlign = 'center';
  ctx.textBaseline = 'middle';
  const s = stats(kernelValues);
  for (let i = 0; i < 9; i++) {
    const v = kernelValues[i];
    ctx.fillStyle = Math.abs(v) > 0.6 * s.absMax ? '#fff' : '#000';
    ctx.fillText(fmt(v), (i % 3 + 0.5) * cell, (Math.floor(i / 3) + 0.5) * cell);
  }
  const energy = el('div', { id: 'viz-energy', class: 'energy', 'data-testid': 'viz-energy-host' });
  host.replaceChildren(
    el('p', { class: 'viz-lead', text:
      'PoolFormer mixes tokens with 3×3 average pooling minus the identity. Pooling has no learned weights: ' +
      'every block, in every checkpoint, uses this same fixed kernel; what training learns is the norms, layer scales and channel MLPs around it.' }),
    el('div', { class: 'figs' },
      el('figure', {}, kernel, el('figcaption', { text: 'The kernel for an interior token (1/9 each, minus 1 at the centre).' })),
      matrix && el('figure', {}, matrix, el('figcaption', { text: 'The same mixer as a matrix over a 3×3 grid: border tokens average fewer neighbours (padding is not counted).' }))),
    el('h3', { class: 'sub', text: 'Activation energy of this image, per stage' }),
    energy,
  );
  return { grid: [3, 3] };
}

/** Per-stage token energy (L2 norm per token) of the last classified image. */
export function renderEnergy(host, stages, hooks) {
  if (!stages.length) {
    host.replaceChildren(el('p', { class: 'muted', text: 'No activations recorded yet.' }));
    return;
  }
  const figs = stages.map((st) => {
    const [h, w] = Array.from(st.grid);
    const c = el('canvas', { class: 'energy-map', 'data-testid': 'viz-energy', role: 'img',
      'aria-label': `Stage ${st.stage}: token energy on a ${h}×${w} grid` });
    const s = drawHeatmap(c, st.energy, h, w, { cmap: 'sequential', extra: { stage: st.stage } });
    const spec = { values: st.energy, grid: [h, w], scale: s.max, cmap: 'sequential', label: `stage ${st.stage} energy` };
    c.addEventListener('pointerenter', () => hooks.show(spec));
    c.addEventListener('pointerleave', () => hooks.clear());
    c.addEventListener('click', () => hooks.pin(spec));
    return el('figure', {}, c, el('figcaption', { text: `stage ${st.stage} · ${h}×${w} · max ${fmt(s.max)}` }));
  });
  host.replaceChildren(
    el('div', { class: 'figs energy-figs' }, ...figs),
    legend('sequential', '0', '', 'max', 'Per-token L2 norm of the activations after each stage, each stage scaled to its own max. Hover one to lay it over the image.'),
  );
}

/**
 * Draws the visualiser for one insight() result into host. hooks: {show(spec), clear(),
 * pin(spec)} put a token-grid heatmap over the input image. Returns {grid, tokenRow?(t)}.
 */
export function renderTokenMixing(host, t, hooks) {
  switch (t.kind) {
    case 'mixer': return renderMixer(host, t, hooks);
    case 'gmlp': return renderMatrix(host, t, hooks, 'gMLP spatial gating unit (SGU) projection');
    case 'resmlp': return renderMatrix(host, t, hooks, 'ResMLP linear token mixing');
    case 'poolformer': return renderPool(host, t);
    default:
      host.replaceChildren(el('p', { class: 'muted', text: `No view for token mixer kind “${t.kind}”.` }));
      return { grid: Array.from(t.grid ?? [1, 1]) };
  }
}

/**
 * Lays a token-grid heatmap over an image. rect: the part of the image the model sees, as
 * fractions of the canvas ({x, y, w, h}); spec: {values, grid, scale, cmap, highlight} or null.
 */
export function drawOverlay(canvas, spec, rect) {
  const ctx = canvas.getContext('2d');
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  if (!spec) {
    delete canvas.dataset.checksum;
    return;
  }
  const [gh, gw] = spec.grid;
  const X = rect.x * canvas.width, Y = rect.y * canvas.height;
  const cw = (rect.w * canvas.width) / gw, ch = (rect.h * canvas.height) / gh;
  ctx.globalAlpha = 0.62;
  for (let y = 0; y < gh; y++) for (let x = 0; x < gw; x++) {
    const [r, g, b] = colour(spec.values[y * gw + x], spec.scale, spec.cmap);
    ctx.fillStyle = `rgb(${r},${g},${b})`;
    ctx.fillRect(X + x * cw, Y + y * ch, cw, ch);
  }
  ctx.globalAlpha = 1;
  if (gh * gw <= 1024 && Math.min(cw, ch) >= 4) {
    ctx.strokeStyle = 'rgba(255,255,255,0.35)';
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let x = 0; x <= gw; x++) { ctx.moveTo(X + x * cw, Y); ctx.lineTo(X + x * cw, Y + gh * ch); }
    for (let y = 0; y <= gh; y++) { ctx.moveTo(X, Y + y * ch); ctx.lineTo(X + gw * cw, Y + y * ch); }
    ctx.stroke();
  }
  if (spec.highlight != null) {
    const hx = X + (spec.highlight % gw) * cw, hy = Y + Math.floor(spec.highlight / gw) * ch;
    ctx.lineWidth = 3;
    ctx.strokeStyle = '#000';
    ctx.strokeRect(hx, hy, cw, ch);
    ctx.lineWidth = 1.5;
    ctx.strokeStyle = '#fff';
    ctx.strokeRect(hx, hy, cw, ch);
  }
  if (rect.x > 0.001 || rect.y > 0.001 || rect.w < 0.999 || rect.h < 0.999) {
    ctx.setLineDash([6, 4]);
    ctx.strokeStyle = '#fff';
    ctx.lineWidth = 1;
    ctx.strokeRect(X, Y, rect.w * canvas.width, rect.h * canvas.height);
    ctx.setLineDash([]);
  }
  stamp(canvas, spec.values);
}
