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
    probe = await exclusive(() => tm.tokenMixing(0));
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
    t = pre && Number(pre.layer ?? 0) === layer ? pre : await exclusive(() => tm.tokenMixing(layer));
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
