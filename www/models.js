// Models: the picker (embedded, shipped, a file, timm checkpoints from the hub), loading, labels.

import { $, clearError, exclusive, finishProgress, HUB, HUB_MODELS, hubUrl, IMAGENET_LABELS_URL, messageOf, onProgress, resetProgress, setStatus, SHIPPED, showError, state, tm } from './page.js';
import { classifyImageData } from './input.js';
import { drawOverlays, setupViz } from './views.js';

// ---------------------------------------------------------------------------------------
// Models

export function buildModelSelect() {
  const sel = $('model-select');
  const opt = (value, text) => Object.assign(document.createElement('option'), { value, textContent: text });
  const group = (label, options) => {
    const g = document.createElement('optgroup');
    g.label = label;
    g.append(...options);
    return g;
  };
  const hubHost = new URL(HUB).host;
  sel.replaceChildren(
    group('Fashion-MNIST, shipped with tokenmix', [
      opt('embedded', 'Embedded default (MLP-Mixer, Fashion-MNIST)'),
      ...SHIPPED.map((m) => opt(`url:${m.file}`, `${m.label} — ${m.file}`)),
    ]),
    group(`ImageNet-1k, timm checkpoints from ${hubHost}`, [
      ...HUB_MODELS.map((m) => opt(`hub:${m.repo}`, `${m.label} — ${m.repo}`)),
      opt('hub-other', `Another model from ${hubHost}…`),
    ]),
    opt('file', 'Open a .safetensors file…'),
  );
  sel.value = 'embedded';
  sel.addEventListener('change', () => {
    const v = sel.value;
    if (v === 'file') {
      $('model-file').value = '';
      $('model-file').click();
      return;
    }
    if (v === 'current-file') return;
    if (v === 'hub-other') {
      // The select keeps naming the model in use until the one named below loads.
      revertSelect();
      $('hub-form').hidden = false;
      $('hub-repo').focus();
      $('hub-repo').select();
      return;
    }
    let job;
    if (v === 'embedded') job = loadModelSource(null, { label: 'the embedded default model', option: 'embedded' });
    else if (v.startsWith('url:')) job = loadModelSource(v.slice(4), { label: v.slice(4), option: v });
    else if (v.startsWith('hub:')) job = loadModelSource(hubUrl(v.slice(4)), { label: v.slice(4), option: v, cacheable: true });
    job?.catch(() => {});
  });
  $('hub-form').addEventListener('submit', (e) => {
    e.preventDefault();
    loadHubRepo($('hub-repo').value).catch(() => {});
  });
  $('hub-cancel').addEventListener('click', () => { $('hub-form').hidden = true; });
  const file = $('model-file');
  file.addEventListener('change', () => {
    const f = file.files?.[0];
    if (f) loadModelFile(f).catch(() => {});
    else revertSelect();
  });
  file.addEventListener('cancel', revertSelect);
}

export function revertSelect() {
  $('model-select').value = state.modelOption;
}

export function fileOption(name) {
  const sel = $('model-select');
  let o = sel.querySelector('option[value="current-file"]');
  if (!o) {
    o = document.createElement('option');
    o.value = 'current-file';
    sel.insertBefore(o, sel.querySelector('option[value="file"]'));
  }
  o.textContent = `Loaded: ${name}`;
}

export async function loadModelFile(file) {
  let bytes;
  try {
    bytes = new Uint8Array(await file.arrayBuffer());
  } catch (e) {
    const msg = `Could not read ${file.name}: ${messageOf(e)}`;
    showError(msg);
    revertSelect();
    throw new Error(msg);
  }
  return loadModelSource(bytes, { label: file.name, option: 'current-file', fileName: file.name });
}

/** Loads model bytes (ArrayBuffer or Uint8Array). */
export function loadModelBytes(bytes, name = 'model.safetensors') {
  return loadModelSource(bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes), { label: name, option: 'current-file', fileName: name });
}

/**
 * Loads a timm checkpoint from the hub, named in any spelling the CLI reads (the package's
 * `parseHubRepo`, tokenmix's own parser: src/hubname.rs); once it
 * loads, the select lists it among the hub's (so it can be chosen again, from the browser's
 * cache). A name that is no repository is an error and changes nothing.
 */
export async function loadHubRepo(text) {
  let repo;
  try {
    repo = await tm.parseHubRepo(text);
  } catch (e) {
    showError(messageOf(e));
    throw e;
  }
  const info = await loadModelSource(hubUrl(repo), { label: repo, option: `hub:${repo}`, cacheable: true });
  $('hub-form').hidden = true;
  return info;
}

/** The select's option for a hub repository, added to the hub's group if it is not there. */
function hubOption(repo) {
  const sel = $('model-select');
  if ([...sel.options].some((o) => o.value === `hub:${repo}`)) return;
  const o = document.createElement('option');
  o.value = `hub:${repo}`;
  o.textContent = repo;
  const other = sel.querySelector('option[value="hub-other"]');
  other.parentNode.insertBefore(o, other);
}

/** Loads a model from a URL (hub URLs go through the Cache API, like the select does). */
export function loadModelUrl(url) {
  const abs = new URL(url, document.baseURI).href;
  const sel = $('model-select');
  const match = [...sel.options].find((o) =>
    (o.value.startsWith('url:') && new URL(o.value.slice(4), document.baseURI).href === abs) ||
    (o.value.startsWith('hub:') && hubUrl(o.value.slice(4)) === abs));
  const cacheable = abs.startsWith(`${HUB}/`);
  const name = decodeURIComponent(new URL(abs).pathname.split('/').pop() || abs);
  return loadModelSource(abs, { label: url, option: match?.value ?? 'current-file', fileName: name, cacheable });
}

export let loadAbort = null;

/**
 * The one model-loading path. source: null (the embedded default), a URL string, or bytes.
 * tokenmix downloads URLs itself (progress, and the Cache API for hub files); on failure the
 * old model stays.
 */
export async function loadModelSource(source, { label, option, cacheable = false, fileName = null }) {
  loadAbort?.abort();
  const abort = new AbortController();
  loadAbort = abort;
  clearError();
  resetProgress();
  $('progress-row').hidden = typeof source !== 'string';
  state.load = { status: 'loading', label, error: null };
  setStatus('loading', `Loading ${label}…`);
  const t0 = performance.now();
  const superseded = () => new DOMException('superseded', 'AbortError');
  // A load still queued when a newer one starts never runs; one already running is aborted
  // (its download stops, and it does not replace the model), without moving the newer one's
  // progress bar.
  const run = (source, opts) => exclusive(() => {
    if (abort.signal.aborted) throw superseded();
    return tm.loadModel(source, { ...opts, signal: abort.signal });
  });
  const progress = (...a) => { if (!abort.signal.aborted) onProgress(...a); };
  let url = null;
  // What "Reload model" loads again once this load is the one in use.
  const lastLoad = { source, opts: { label, option, cacheable, fileName } };
  try {
    let desc;
    if (typeof source === 'string') {
      url = new URL(source, document.baseURI).href;
      desc = await run(url, { onProgress: progress, name: label, cache: cacheable });
    } else {
      desc = await run(source, { name: label });
    }
    if (abort.signal.aborted) {
      // It had loaded (and replaced tokenmix's model) when the abort came, so tokenmix runs it
      // until the newer load ends: should that one fail, the page adopts this model (below),
      // so that what it shows is what classifies.
      state.loadedMeanwhile = { desc, option, label, fileName, lastLoad };
      throw superseded();
    }
    const fromCache = Boolean(desc?.fromCache);
    finishProgress();
    state.loadedMeanwhile = null;
    state.lastLoad = lastLoad;
    if (option === 'current-file') fileOption(fileName ?? label);
    if (option.startsWith('hub:')) hubOption(option.slice(4));
    await adoptModel(desc, option);
    const info = state.model;
    const secs = ((performance.now() - t0) / 1000).toFixed(1);
    state.load = { status: 'ok', label, error: null };
    setStatus('ok', `Loaded ${info.family}${info.preset ? ` (${info.preset})` : ''} from ${label}${fromCache ? ' (browser cache)' : ''} in ${secs} s.`);
    if (state.image) await classifyImageData(state.image.imageData, state.image.source, state.image.size).catch(() => {});
    return info;
  } catch (e) {
    if (e?.name === 'AbortError' || abort.signal.aborted) {
      // state.load, the status line and the error box belong to the newer load now.
      throw e?.name === 'AbortError' ? e : superseded();
    }
    // loadModel's errors already start with the model's name (the label we passed).
    const detail = messageOf(e);
    const msg = `Could not load ${label}: ${detail.startsWith(`${label}: `) ? detail.slice(label.length + 2) : detail}`;
    const meanwhile = state.loadedMeanwhile;
    state.loadedMeanwhile = null;
    if (meanwhile) {
      state.lastLoad = meanwhile.lastLoad;
      if (meanwhile.option === 'current-file') fileOption(meanwhile.fileName ?? meanwhile.label);
      if (meanwhile.option.startsWith('hub:')) hubOption(meanwhile.option.slice(4));
      await adoptModel(meanwhile.desc, meanwhile.option).catch(() => {});
    }
    state.load = { status: 'error', label, error: msg };
    showError(msg);
    setStatus('error', `Still using ${state.model ? `${state.model.family}${state.model.preset ? ` (${state.model.preset})` : ''}` : 'the previous model'}.`);
    revertSelect();
    throw new Error(msg);
  }
}

export let imagenetLabels = null;
/** Real class names from the file; placeholders such as "class 7" do not count. */
export const hasLabels = (info) => Array.from(info.labels ?? []).some((l, i) => l !== `class ${i}`);

export async function labelsFor(info) {
  if (hasLabels(info)) return Array.from(info.labels);
  if (info.classes === 1000) {
    imagenetLabels ??= fetch(IMAGENET_LABELS_URL).then((r) => {
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      return r.json();
    });
    try {
      const l = await imagenetLabels;
      if (Array.isArray(l) && l.length === 1000) return l;
    } catch (e) {
      imagenetLabels = null;
      console.warn(`ImageNet labels unavailable: ${messageOf(e)}`);
    }
  }
  return [];
}

/**
 * The page's address names the hub model in use (`?model=owner/name`, which app.js loads), so
 * that it can be shared or bookmarked; another model takes the name off.
 */
function linkModel(option) {
  const repo = option?.startsWith('hub:') ? option.slice(4) : null;
  if (!repo && state.linking) return; // the model the address names is still to load
  const url = new URL(location.href);
  if (url.searchParams.get('model') === repo) return;
  if (repo) url.searchParams.set('model', repo);
  else url.searchParams.delete('model');
  // The repository's slash as it is (`?model=timm/name`), as one would type it.
  url.search = url.searchParams.toString().replace(/(^|&)model=([^&]*)/, (_, at, v) => `${at}model=${v.replace(/%2F/gi, '/')}`);
  history.replaceState(history.state, '', url);
}

export async function adoptModel(desc, option) {
  let info = desc ?? {};
  try {
    const now = await exclusive(() => tm.modelInfo());
    if (now) info = { ...info, ...now };
  } catch { /* the description from loadModel is enough */ }
  state.model = info;
  state.generation++;
  state.modelOption = option;
  $('model-select').value = option;
  linkModel(option);
  state.labels = await labelsFor(info);
  state.labelSource = hasLabels(info) ? 'from the model file' : state.labels.length ? 'ImageNet-1k (timm)' : 'class numbers';
  renderModelInfo(info);
  state.overlay = state.pinned = null;
  state.result = null; // energies and the eye view belong to the old model
  state.layer = 0;
  drawOverlays();
  await setupViz();
}

export function renderModelInfo(info) {
  const params = Number(info.params);
  const size = info.inputSize ? Array.from(info.inputSize).join('×') : '–';
  const rows = [
    ['Family', info.family ?? '–'],
    ['timm preset', info.preset ?? 'none (a custom shape)'],
    ['Parameters', Number.isFinite(params) ? (params >= 1e6 ? `${(params / 1e6).toFixed(2)} M` : `${(params / 1e3).toFixed(1)} k`) : '–'],
    ['Classes', `${info.classes ?? '–'} · labels ${state.labelSource}`],
    ['Input (C×H×W)', size],
  ];
  if (info.name) rows.push(['Name', info.name]);
  const dl = $('model-info');
  dl.dataset.family = info.family ?? '';
  dl.dataset.preset = info.preset ?? '';
  dl.replaceChildren(...rows.flatMap(([k, v]) => {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = v;
    return [dt, dd];
  }));
}
