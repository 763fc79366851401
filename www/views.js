// The views: predictions, the two image views with the token overlay, and the visualiser.

import * as viz from './visualise.js';
import { $, exclusive, messageOf, state, tm, VIEW_BOX } from './page.js';

export let vizController = null;

// ---------------------------------------------------------------------------------------
// The two image views and the token overlay

/** The part of the original image the model sees (timm eval: resize, centre crop), as
 * fractions, from the geometry Rust computed for this image and model (`cropGeometry`). */
export function cropRect() {
  const g = state.crop;
  if (!g) return { x: 0, y: 0, w: 1, h: 1 };
  const [rw, rh] = g.resized;
  const [th, tw] = g.size;
  return { x: g.left / rw, y: g.top / rh, w: Math.min(1, tw / rw), h: Math.min(1, th / rh) };
}

export function fitViews() {
  const dpr = window.devicePixelRatio || 1;
  for (const [baseId, overId] of [['original', 'overlay'], ['eye', 'eye-overlay']]) {
    const base = $(baseId), over = $(overId);
    const avail = base.closest('figure')?.clientWidth || VIEW_BOX;
    const box = Math.min(VIEW_BOX, avail);
    const k = Math.min(box / base.width, box / base.height);
    const w = Math.max(1, Math.round(base.width * k)), h = Math.max(1, Math.round(base.height * k));
    for (const c of [base, over]) {
      c.style.width = `${w}px`;
      c.style.height = `${h}px`;
    }
    over.width = Math.round(w * dpr);
    over.height = Math.round(h * dpr);
  }
  drawOverlays();
}

export function drawOverlays() {
  const spec = state.overlay;
  viz.drawOverlay($('overlay'), spec, cropRect());
  viz.drawOverlay($('eye-overlay'), spec, { x: 0, y: 0, w: 1, h: 1 });
  const tip = spec ? `Overlay: ${spec.label}${state.pinned === spec ? ' (pinned; click again to release)' : ''}` : '';
  $('overlay').title = tip;
}

export const overlayHooks = {
  show(spec) { state.overlay = spec; drawOverlays(); },
  clear() { state.overlay = state.pinned; drawOverlays(); },
  pin(spec) {
    const same = state.pinned && spec && state.pinned.label === spec.label;
    state.pinned = same ? null : spec;
    state.overlay = state.pinned ?? spec;
    drawOverlays();
  },
};

/** The token under the pointer on one of the image views, or null. */
export function tokenAt(ev, canvas, rect) {
  const grid = vizController?.grid;
  if (!grid || !vizController.tokenRow) return null;
  const r = canvas.getBoundingClientRect();
  const u = ((ev.clientX - r.left) / r.width - rect.x) / rect.w;
  const v = ((ev.clientY - r.top) / r.height - rect.y) / rect.h;
  if (!(u >= 0 && u < 1 && v >= 0 && v < 1)) return null;
  const [gh, gw] = grid;
  return Math.floor(v * gh) * gw + Math.floor(u * gw);
}

export function wireImageHover(canvas, rectOf) {
  canvas.addEventListener('pointermove', (ev) => {
    if (!vizController?.tokenRow) return; // this mixer has no per-token rows
    const t = tokenAt(ev, canvas, rectOf());
    if (t == null) { overlayHooks.clear(); return; }
    overlayHooks.show(vizController.tokenRow(t));
  });
  canvas.addEventListener('pointerleave', () => overlayHooks.clear());
  canvas.addEventListener('click', (ev) => {
    const t = tokenAt(ev, canvas, rectOf());
    if (t != null) overlayHooks.pin(vizController.tokenRow(t));
  });
}

// ---------------------------------------------------------------------------------------
// Visualiser

export function wireViz() {
  const slider = $('layer');
  slider.addEventListener('input', () => {
    state.layer = Number(slider.value);
    $('layer-value').textContent = `${state.layer} / ${Math.max(0, state.layers - 1)}`;
    scheduleViz();
  });
}

export async function setupViz() {
  const slider = $('layer');
  let probe;
  try {
    probe = await exclusive(() => tm.insight(0));
  } catch (e) {
    $('viz-body').replaceChildren(Object.assign(document.createElement('p'), { className: 'muted', textContent: `No token-mixing weights to show: ${messageOf(e)}` }));
    slider.disabled = true;
    return;
  }
  state.layers = Math.max(1, Number(probe.layers) || 1);
  slider.max = String(state.layers - 1);
  slider.value = '0';
  slider.disabled = state.layers <= 1;
  $('layer-value').textContent = `0 / ${state.layers - 1}`;
  await scheduleViz(probe);
}

export let vizRunning = null, vizDirty = false;

/** Draws the selected layer; slider moves while drawing coalesce into one more draw. */
export function scheduleViz(first = null) {
  if (vizRunning) { vizDirty = true; return vizRunning; }
  vizRunning = (async () => {
    let pre = first;
    do {
      vizDirty = false;
      await drawViz(pre);
      pre = null;
    } while (vizDirty);
  })().finally(() => { vizRunning = null; });
  return vizRunning;
}

export async function drawViz(pre) {
  const layer = state.layer;
  let t;
  try {
    t = pre && Number(pre.layer ?? 0) === layer ? pre : await exclusive(() => tm.insight(layer));
  } catch (e) {
    $('viz-body').replaceChildren(Object.assign(document.createElement('p'), { className: 'muted', textContent: `Layer ${layer}: ${messageOf(e)}` }));
    return;
  }
  const host = $('viz-body');
  vizController = viz.renderTokenMixing(host, t, overlayHooks);
  state.tokenMixing = { kind: t.kind, layer: t.layer ?? layer, layers: t.layers, rows: t.rows, cols: t.cols, grid: Array.from(t.grid ?? []) };
  $('viz-note').textContent = t.note ?? '';
  const section = $('viz');
  section.dataset.kind = t.kind;
  section.dataset.layer = String(layer);
  section.dataset.generation = String(state.generation);
  if (t.kind === 'poolformer') await updateEnergy();
}

export async function updateEnergy() {
  const host = document.getElementById('viz-energy');
  if (!host) return;
  const p = (text) => host.replaceChildren(Object.assign(document.createElement('p'), { className: 'muted', textContent: text }));
  if (!state.result) return p('Classify an image to see where its activations are strong.');
  try {
    const stages = await exclusive(() => tm.stageEnergy());
    viz.renderEnergy(host, stages, overlayHooks);
  } catch (e) {
    p(`No activations: ${messageOf(e)}`);
  }
}

// ---------------------------------------------------------------------------------------
// Class evidence: which tokens argued for a class (explain()), over the image.

/** Forgets the evidence of an earlier image (a new classification or model). */
export function resetEvidence() {
  state.explanation = null;
  clearEvidence();
}

/** Takes the evidence overlay off the image views, if one is shown. */
function clearEvidence() {
  if (state.pinned?.evidence != null) {
    state.pinned = null;
    state.overlay = null;
    drawOverlays();
  }
  for (const li of document.querySelectorAll('#predictions li')) li.setAttribute('aria-pressed', 'false');
  const note = $('evidence-note');
  note.textContent = 'Click a class to see which parts of the image argued for it.';
  delete note.dataset.index;
}

/** Shows (or, clicked again, hides) the per-token evidence for class `index` of the latest result. */
export async function showEvidence(index, redraw = false) {
  const note = $('evidence-note');
  if (!state.result) return;
  if (state.pinned?.evidence === index && !redraw) { clearEvidence(); return; }
  const result = state.result;
  let ex = state.explanation;
  if (!ex || ex.result !== result) {
    try {
      const signal = state.imageWork?.signal;
      const e = await exclusive(() => tm.explain(5, { signal }));
      ex = { ...e, result };
    } catch (err) {
      if (err?.name === 'AbortError') return; // a newer image replaced this one
      note.textContent = `No explanation: ${messageOf(err)}`;
      return;
    }
    if (state.result !== result) return; // a newer image arrived meanwhile
    state.explanation = ex;
  }
  const c = ex.classes.find((k) => k.index === index);
  if (!c) return;
  const map = c.map;
  let sum = 0, min = Infinity, max = -Infinity;
  for (const v of map) { sum += v; min = Math.min(min, v); max = Math.max(max, v); }
  // "Relative" shows each token against the mean token: where a model spreads its evidence
  // over the whole image (every token has mixed with every other), the differences are the
  // story. The exact split is the default.
  const relative = $('evidence-relative').checked;
  const mean = sum / map.length;
  const values = relative ? map.map((v) => v - mean) : map;
  let absMax = 0;
  for (const v of values) absMax = Math.max(absMax, Math.abs(v));
  const spec = { values, grid: Array.from(ex.grid), scale: absMax, cmap: 'diverging', label: `evidence for ${c.label}${relative ? ' (relative to the mean token)' : ''}`, evidence: index };
  state.pinned = spec;
  state.overlay = spec;
  drawOverlays();
  for (const li of document.querySelectorAll('#predictions li')) li.setAttribute('aria-pressed', String(Number(li.dataset.index) === index));
  const f = (v) => viz.fmt(v, 3);
  note.dataset.index = String(index);
  note.dataset.sum = String(sum);
  note.dataset.bias = String(c.bias);
  note.dataset.logit = String(c.logit);
  note.dataset.approximate = String(ex.approximate);
  note.dataset.relative = String(relative);
  note.textContent = `Evidence for ${c.label}: logit ${f(c.logit)} = ${f(sum)} from the ${ex.grid[0]}×${ex.grid[1]} tokens + ${f(c.bias)} bias; ` +
    `tokens give ${f(min)} to ${f(max)}. ` +
    (relative ? `Shown relative to the mean token (${f(mean)}): red tokens give more than average, blue less.` : 'Red tokens raise this class, blue ones lower it.') +
    (ex.approximate ? ' Approximate per token: PoolFormer normalises after pooling, so each share is taken with this image\'s pooled statistics (the sum is exact).' : '');
}

export function wireEvidence() {
  $('evidence-relative').addEventListener('change', () => {
    if (state.pinned?.evidence != null) showEvidence(state.pinned.evidence, true);
  });
}
