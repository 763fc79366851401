// Images in: samples, files, drop, paste, the camera; classifying what came in.

import * as viz from './visualise.js';
import { $, clearError, exclusive, MAX_IMAGE_SIDE, messageOf, SAMPLES, showError, state, tm, VIEW_BOX } from './page.js';
import { cropRect, fitViews, resetEvidence, showEvidence, updateEnergy, wireImageHover } from './views.js';
import { loadModelFile } from './models.js';

// ---------------------------------------------------------------------------------------
// Images in

export function sampleUrl(name) {
  return new URL(`./samples/${name}`, import.meta.url).href;
}

export function buildSamples() {
  const host = $('samples');
  host.replaceChildren(...SAMPLES.map((name) => {
    const label = name.replace(/^fmnist-\d+-/, '').replace(/\.png$/, '');
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'sample';
    b.dataset.sample = name;
    b.title = `Sample: ${label}`;
    b.setAttribute('aria-label', `Classify sample: ${label}`);
    const img = new Image(28, 28);
    img.src = sampleUrl(name);
    img.alt = '';
    b.append(img);
    b.addEventListener('click', () => classifySample(name).catch(() => {}));
    return b;
  }));
}

/** Draws an image source onto the original canvas at its own size (at most MAX_IMAGE_SIDE). */
export function drawOriginal(source, width, height, name = '') {
  const k = Math.min(1, MAX_IMAGE_SIDE / Math.max(width, height));
  const w = Math.max(1, Math.round(width * k)), h = Math.max(1, Math.round(height * k));
  const c = $('original');
  c.width = w;
  c.height = h;
  const ctx = c.getContext('2d', { willReadFrequently: true });
  ctx.imageSmoothingEnabled = true;
  ctx.imageSmoothingQuality = 'high';
  ctx.clearRect(0, 0, w, h);
  ctx.drawImage(source, 0, 0, w, h);
  c.classList.toggle('pixelated', Math.max(w, h) < VIEW_BOX);
  $('original-caption').textContent = `Original · ${name ? `${name} · ` : ''}${width}×${height}${k < 1 ? ` (scaled to ${w}×${h})` : ''}`;
  fitViews();
  return ctx.getImageData(0, 0, w, h);
}

/** Marks the sample shown as pressed, or none for an image from elsewhere. */
function markSample(sample) {
  for (const b of document.querySelectorAll('.sample')) b.setAttribute('aria-pressed', String(b.dataset.sample === sample));
}

/** Why an older image's work stops: a newer image came (an AbortError, as the package throws). */
const superseded = () => new DOMException('superseded by a newer image', 'AbortError');

// The newest image file asked to be shown: an older one's decode that ends later is not drawn.
let shownSeq = 0;

/**
 * Shows an image file and classifies it. The browser decodes it to show it while tokenmix
 * decodes and classifies the file itself (in the package's worker, with the CLI's decoder, at
 * full size: the CLI's answer): the two run at once, where the classification used to wait for
 * the display's decode. The result is shown once both are in.
 */
export async function classifyBlob(blob, name, sample = null) {
  markSample(sample);
  clearError();
  const shown = showFile(blob, name, ++shownSeq);
  shown.catch(() => {}); // reported by classifyImageData
  return classifyImageData(blob, name, shown);
}

/** Draws an image file on the original canvas (unless a newer one came); its size. */
async function showFile(blob, name, seq) {
  let bitmap;
  try {
    // No colour management: the pixels the file holds, as the native CLI reads them.
    bitmap = await createImageBitmap(blob, { colorSpaceConversion: 'none', premultiplyAlpha: 'none' });
  } catch (e) {
    // A format the browser does not decode but tokenmix does (TIFF): shown as tokenmix decodes it.
    const image = tm ? await tm.decodeImage(blob).catch(() => null) : null;
    bitmap = image ? await createImageBitmap(image).catch(() => null) : null;
    if (!bitmap) throw new Error(`Could not read ${name} as an image: ${messageOf(e)}`);
  }
  const size = { width: bitmap.width, height: bitmap.height };
  if (seq === shownSeq) drawOriginal(bitmap, size.width, size.height, name);
  bitmap.close();
  return size;
}

export async function classifySample(name) {
  if (!SAMPLES.includes(name)) throw new Error(`unknown sample ${name}`);
  markSample(name);
  let blob;
  try {
    const r = await fetch(sampleUrl(name));
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    blob = await r.blob();
  } catch (e) {
    const msg = `Could not fetch sample ${name}: ${messageOf(e)}`;
    showError(msg);
    throw new Error(msg);
  }
  return classifyBlob(blob, name, name);
}

export let classifySeq = 0;

/**
 * Classifies an image drawn on the original canvas — an ImageData, or the file itself (a Blob)
 * of `size`, or of the size a promise gives once the file is shown (`classifyBlob`) — and shows
 * the result. A file that cannot be shown is an error (the previous image stays).
 */
export async function classifyImageData(imageData, source = 'image', size = imageData) {
  if (!tm) throw new Error('tokenmix is not running');
  const previous = state.image;
  const image = { imageData, source, size };
  state.image = image;
  // An image from elsewhere (a sample, a file, the camera) ends stepping through several.
  if (state.images && source !== state.images.name) {
    state.images.run?.abort();
    state.images = null;
    updateImagesNav();
  }
  const seq = ++classifySeq;
  // Only the newest image is drawn: the older image's classification (or explanation), if one
  // runs, stops at its next step, and frees the queue for this one.
  state.imageWork?.abort(superseded());
  const work = new AbortController();
  state.imageWork = work;
  $('predictions').setAttribute('aria-busy', 'true');
  const [classified, sized] = await Promise.allSettled([
    exclusive(() => {
      // A newer image came while this one waited its turn: this one is not classified at all
      // (a burst of clicks runs the first, stopped when the second came, and the last).
      if (seq !== classifySeq) throw superseded();
      return tm.classifyDetailed(imageData, 5, { signal: work.signal });
    }),
    size,
  ]);
  const fail = (msg) => {
    if (seq === classifySeq) {
      showError(msg);
      $('predictions').removeAttribute('aria-busy');
    }
    return new Error(msg);
  };
  if (classified.status === 'rejected' && classified.reason?.name === 'AbortError') throw classified.reason;
  if (sized.status === 'rejected') {
    // A file alone that does not read leaves the image shown before; one of several, stepped
    // to, takes its place as unreadable (the previous one under its position would pass for it).
    const newest = seq === classifySeq;
    const error = fail(messageOf(sized.reason));
    if (state.images && source === state.images.name) {
      if (newest) showUnreadable(source);
    } else if (state.image === image) state.image = previous;
    throw error;
  }
  if (classified.status === 'rejected') throw fail(`Classification failed: ${messageOf(classified.reason)}`);
  const r = classified.value;
  image.size = sized.value;
  state.crop = await exclusive(() => tm.cropGeometry(image.size.width, image.size.height)).catch(() => null);
  const result = {
    predictions: Array.from(r.predictions, (p) => {
      return { index: p.index, label: state.labels[p.index] ?? p.label, probability: p.probability };
    }),
    timings: { ...r.timings },
    input: r.input,
    source,
  };
  if (seq === classifySeq) { // a newer request will draw itself
    state.result = result;
    resetEvidence();
    renderPredictions(result.predictions, source);
    renderTimings(result.timings);
    drawEye(result.input);
    updateEnergy();
    $('predictions').removeAttribute('aria-busy');
  }
  // Plain, serialisable summary for callers (tests).
  const { channels, height, width } = result.input ?? {};
  return { predictions: result.predictions, timings: result.timings, input: { channels, height, width }, source };
}

export function renderPredictions(preds, source) {
  const ol = $('predictions');
  ol.dataset.source = source;
  ol.dataset.generation = String(state.generation);
  ol.replaceChildren(...preds.map((p, i) => {
    const li = document.createElement('li');
    li.dataset.index = String(p.index);
    li.dataset.label = p.label;
    li.dataset.probability = String(p.probability);
    if (i === 0) li.className = 'top';
    const pct = 100 * p.probability;
    const pctText = pct >= 0.1 || pct === 0 ? `${pct.toFixed(1)} %` : '<0.1 %';
    const name = document.createElement('span');
    name.className = 'label';
    name.textContent = p.label;
    name.title = `class ${p.index}`;
    const bar = document.createElement('span');
    bar.className = 'bar';
    bar.setAttribute('aria-hidden', 'true');
    const fill = document.createElement('span');
    fill.style.width = `${Math.max(0, Math.min(100, pct)).toFixed(2)}%`;
    bar.append(fill);
    const value = document.createElement('span');
    value.className = 'pct';
    value.textContent = pctText;
    li.append(name, bar, value);
    // A class is a button: it lays its per-token evidence over the image.
    li.tabIndex = 0;
    li.setAttribute('role', 'button');
    li.setAttribute('aria-pressed', 'false');
    li.title = `Show which parts of the image argued for ${p.label}`;
    li.addEventListener('click', () => showEvidence(p.index));
    li.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); showEvidence(p.index); }
    });
    return li;
  }));
}

export function renderTimings(t) {
  const ms = (v) => (Number.isFinite(v) ? `${v.toFixed(v < 10 ? 2 : 1)} ms` : '–');
  const parts = [t.preprocessMs, t.forwardMs, t.readbackMs];
  const total = parts.some(Number.isFinite) ? parts.reduce((sum, v) => sum + (v ?? 0), 0) : NaN; // none: '–'
  const rows = [
    ['Preprocess', ms(t.preprocessMs)],
    ['Forward', ms(t.forwardMs)],
    ['Read-back', ms(t.readbackMs)],
    ['Total', ms(total)],
    ['Runs on', state.adapter ? [state.adapter.name || 'unnamed adapter', state.adapter.backend].filter(Boolean).join(' · ') : '–'],
  ];
  $('timings').replaceChildren(...rows.flatMap(([k, v]) => {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = v;
    return [dt, dd];
  }));
}

/** The model's input, de-normalised with its mean/std; CSS upscales it nearest-neighbour. */
export function drawEye(input) {
  const c = $('eye');
  if (!input || !input.data) return;
  const { channels: C, height: H, width: W, data } = input;
  const plane = H * W;
  const pp = state.model?.preprocess;
  const mean = pp && Array.from(pp.mean ?? []), std = pp && Array.from(pp.std ?? []);
  const known = mean && std && mean.length === C && std.length === C;
  let lo = 0, hi = 1;
  if (!known) { // no preprocess info: stretch to the data's own range
    const s = viz.stats(data);
    lo = s.min;
    hi = s.max > s.min ? s.max : s.min + 1;
  }
  const img = new ImageData(W, H);
  for (let i = 0; i < plane; i++) {
    for (let k = 0; k < 3; k++) {
      const ch = C === 1 ? 0 : Math.min(k, C - 1);
      const x = data[ch * plane + i];
      const v = known ? x * std[ch] + mean[ch] : (x - lo) / (hi - lo);
      img.data[i * 4 + k] = Math.round(Math.max(0, Math.min(1, v)) * 255);
    }
    img.data[i * 4 + 3] = 255;
  }
  c.width = W;
  c.height = H;
  c.getContext('2d').putImageData(img, 0, 0);
  viz.stamp(c, data, { channels: C, height: H, width: W });
  $('eye-caption').textContent = `Model's-eye view · ${C === 1 ? 'grey' : 'RGB'} ${W}×${H}`;
  fitViews();
}

// ---------------------------------------------------------------------------------------
// Input wiring: file picker, drag and drop, paste, camera

export function wireInputs() {
  const dz = $('dropzone');
  $('image-file').addEventListener('change', (ev) => {
    const files = [...(ev.target.files ?? [])];
    ev.target.value = '';
    handleFiles(files).catch(() => {});
  });
  // A folder picked: the browser lists every file in it and its subfolders, each with its path.
  $('folder-open').addEventListener('click', () => $('folder-file').click());
  $('folder-file').addEventListener('change', (ev) => {
    const files = [...(ev.target.files ?? [])];
    ev.target.value = '';
    try {
      handleFiles(pickedFolder(files)).catch(() => {});
    } catch (e) {
      showError(messageOf(e));
    }
  });
  // Dropping outside the zone must not navigate away from the page.
  window.addEventListener('dragover', (e) => e.preventDefault());
  window.addEventListener('drop', (e) => e.preventDefault());
  dz.addEventListener('dragenter', () => dz.classList.add('over'));
  dz.addEventListener('dragover', (e) => {
    e.preventDefault();
    if (e.dataTransfer) e.dataTransfer.dropEffect = 'copy';
    dz.classList.add('over');
  });
  dz.addEventListener('dragleave', () => dz.classList.remove('over'));
  dz.addEventListener('drop', (e) => {
    e.preventDefault();
    dz.classList.remove('over');
    // A folder's entry is only to be had while the event lasts: the DataTransfer is emptied after.
    const files = [...(e.dataTransfer?.files ?? [])];
    const items = [...(e.dataTransfer?.items ?? [])].filter((i) => i.kind === 'file');
    const entries = items.length === files.length ? items.map((i) => i.webkitGetAsEntry?.() ?? null) : [];
    droppedFiles(files, entries).then(handleFiles, (err) => showError(messageOf(err))).catch(() => {});
  });
  // Several images that came together: ‹ › under the image, and the arrow keys (unless a
  // field or control has them).
  $('images-prev').addEventListener('click', () => stepImages(-1));
  $('images-next').addEventListener('click', () => stepImages(1));
  $('images-all').addEventListener('click', () => { classifyAll().catch((e) => showError(messageOf(e))); });
  $('images-stop').addEventListener('click', () => state.images?.run?.abort());
  $('images-save').addEventListener('click', saveResults);
  for (const th of $('images-table').querySelectorAll('th[data-sort]')) th.querySelector('button').addEventListener('click', () => sortTable(th.dataset.sort));
  document.addEventListener('keydown', (e) => {
    if (!state.images || e.altKey || e.ctrlKey || e.metaKey || !['ArrowLeft', 'ArrowRight'].includes(e.key)) return;
    if (e.target instanceof Element && e.target.closest('input, select, textarea, [contenteditable]')) return;
    e.preventDefault();
    stepImages(e.key === 'ArrowLeft' ? -1 : 1);
  });
  document.addEventListener('paste', (e) => {
    const f = [...(e.clipboardData?.files ?? [])].find((x) => x.type.startsWith('image/'));
    if (f) handleFile(f);
  });

  const video = $('camera');
  let stream = null;
  const camButtons = (on) => {
    $('camera-start').disabled = on;
    $('camera-capture').disabled = !on;
    $('camera-stop').disabled = !on;
    $('camera-live').disabled = !on;
    video.hidden = !on;
  };
  // The video's frame of this moment, drawn as the original and classified.
  const captureFrame = (source) => {
    markSample(null);
    return classifyImageData(drawOriginal(video, video.videoWidth, video.videoHeight, source), source);
  };
  // Classify live: each time the previous live classification has settled, the video's frame
  // of that moment is classified. Only then: a live frame never aborts a running pass (a newer
  // image does, which would starve a live stream on a slow model), and frames that come
  // meanwhile are skipped, never queued.
  let liveRunning = false;
  const liveTick = async () => {
    if (!$('camera-live').checked || !stream || liveRunning) return;
    if (video.videoWidth && !document.hidden) {
      liveRunning = true;
      try {
        await captureFrame('camera (live)');
      } catch {
        // Shown by classifyImageData; an AbortError means a newer image came (a sample click).
      } finally {
        liveRunning = false;
      }
    }
    // The next frame the video presents (or, without that API, the next animation frame).
    if (video.requestVideoFrameCallback) video.requestVideoFrameCallback(() => liveTick());
    else requestAnimationFrame(() => liveTick());
  };
  $('camera-live').addEventListener('change', () => liveTick());
  if (!navigator.mediaDevices?.getUserMedia) {
    $('camera-start').disabled = true;
    $('camera-start').title = 'This browser gives no camera access here (it needs https or localhost).';
  }
  $('camera-start').addEventListener('click', async () => {
    clearError();
    // Disabled while the camera starts: a second click would open a second stream, which
    // Stop would never end (the camera light would stay on).
    $('camera-start').disabled = true;
    let s = null;
    try {
      s = await navigator.mediaDevices.getUserMedia({ video: { facingMode: 'environment', width: { ideal: 640 } }, audio: false });
      video.srcObject = s;
      await video.play();
      stream = s;
      camButtons(true);
    } catch (e) {
      s?.getTracks().forEach((t) => t.stop());
      video.srcObject = null;
      camButtons(false);
      showError(`Camera: ${messageOf(e)}`);
    }
  });
  $('camera-capture').addEventListener('click', () => {
    if (!video.videoWidth) return;
    captureFrame('camera').catch(() => {});
  });
  $('camera-stop').addEventListener('click', () => {
    stream?.getTracks().forEach((t) => t.stop());
    stream = null;
    video.srcObject = null;
    $('camera-live').checked = false;
    camButtons(false);
  });

  wireImageHover($('overlay'), cropRect);
  wireImageHover($('eye-overlay'), () => ({ x: 0, y: 0, w: 1, h: 1 }));
  let resizeQueued = false;
  window.addEventListener('resize', () => {
    if (resizeQueued) return;
    resizeQueued = true;
    requestAnimationFrame(() => { resizeQueued = false; fitViews(); });
  });
}

// Model files: safetensors, and the other formats a user may drop in its place (PyTorch's
// .bin/.pth/.pt/.ckpt, GGUF, Keras .h5), whose load says what they are and where the
// safetensors is (as images they failed to decode, or were "not an image").
const MODEL_FILE = /\.(safetensors|bin|pth|pt|ckpt|gguf|h5)$/i;

// What a folder stands for, as in the CLI and the desktop app: its image files by extension.
const IMAGE_FILE = /\.(png|jpe?g|webp|gif|bmp|tiff?)$/i;
const IMAGE_FORMATS = 'PNG, JPEG, WebP, GIF, BMP or TIFF';
// A folder given as images that holds none (the CLI's `preprocess::no_images_in`).
const noImagesIn = (name) => new Error(`${name}: a folder with no image in it (${IMAGE_FORMATS}, by extension)`);

/**
 * The files of a drop, each dropped folder replaced by the image files in it and its subfolders
 * (by extension), depth first in name order, hidden entries left out: what `tokenmix classify
 * FOLDER` and the desktop app take. A folder's images stay entries (FileSystemFileEntry) until
 * one is shown, so a folder of thousands costs one walk, not thousands of File objects.
 * `entries[i]` is `files[i]`'s entry, or null (a drop made by script has none). A folder with no
 * image in it is an error, as there.
 */
export async function droppedFiles(files, entries) {
  if (!entries.some((e) => e?.isDirectory)) return files;
  const out = [];
  for (const [i, file] of files.entries()) {
    const entry = entries[i];
    if (!entry?.isDirectory) {
      out.push(file);
      continue;
    }
    const found = [];
    await walkFolder(entry, found);
    if (!found.length) throw noImagesIn(entry.name);
    out.push(...found);
  }
  return out;
}

/**
 * A picked folder's files (each with its `webkitRelativePath`, "photos/sub/a.png") as a dropped
 * folder's: its images by extension, hidden entries left out, depth first in name order (the
 * paths compared part by part). A folder with no image in it is an error.
 */
export function pickedFolder(files) {
  const parts = (f) => f.webkitRelativePath.split('/');
  const images = files
    // Hidden entries inside it; the folder picked counts whatever its name, as in the CLI.
    .filter((f) => IMAGE_FILE.test(f.name) && !parts(f).slice(1).some((p) => p.startsWith('.')))
    .map((f) => [parts(f), f])
    .sort(([a], [b]) => {
      for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
      return a.length - b.length;
    })
    .map(([, f]) => f);
  if (!images.length) {
    const name = files[0] ? parts(files[0])[0] : 'The folder';
    throw noImagesIn(name);
  }
  return images;
}

async function walkFolder(dir, found) {
  const reader = dir.createReader();
  const all = [];
  // readEntries gives a batch (Chromium: 100) per call, and an empty one at the end.
  for (;;) {
    const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
    if (!batch.length) break;
    all.push(...batch);
  }
  all.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const entry of all) {
    if (entry.name.startsWith('.')) continue;
    if (entry.isDirectory) await walkFolder(entry, found);
    else if (IMAGE_FILE.test(entry.name)) found.push(entry);
  }
}

const isFile = (f) => typeof File !== 'undefined' && f instanceof File;
// A folder's image is named by its path in the folder dropped or picked ("photos/sub/a.png"), a
// file by its name.
const nameOf = (f) => (isFile(f) ? f.webkitRelativePath || f.name : f.fullPath.replace(/^\//, ''));
const asFile = (f) => (isFile(f) ? Promise.resolve(f) : new Promise((resolve, reject) => f.file(resolve, reject)));

/**
 * Files dropped (or picked) together, a folder's images among them (`droppedFiles`,
 * `pickedFolder`). One file is handled as `handleFile` handles it. Of several, the first image
 * is classified and the first model file loaded, in that order, so the image is shown at once
 * and then answered by the new model (a load classifies the current image again);
 * should the load fail, the image keeps the previous model's answer. The page shows one image
 * at a time: the image's name then says which of how many it is, and the others are a step
 * away (`stepImages`: the ‹ › buttons under it, or the arrow keys). With no image or model
 * among them, the first file gets `handleFile`'s error.
 */
export async function handleFiles(files) {
  if (files.length <= 1 && (!files[0] || isFile(files[0]))) {
    if (files[0]) handleFile(files[0]);
    return;
  }
  const model = files.find((f) => MODEL_FILE.test(f.name));
  const images = files.filter((f) => !MODEL_FILE.test(f.name) && (!isFile(f) || !f.type || f.type.startsWith('image/')));
  if (!model && !images.length) {
    handleFile(files[0]);
    return;
  }
  if (images.length) {
    state.images?.run?.abort();
    $('images-results').hidden = true;
    state.images = images.length > 1 ? { items: images, index: 0, name: null } : null;
    await showImageOf(images, 0);
  }
  if (model) await loadModelFile(model).catch(() => {});
}

/**
 * Shows image `index` of several that came together, unreadable: no image, no answer, and
 * none of an image still being read or classified (stepped past) drawn after.
 */
function showUnreadable(name) {
  ++shownSeq;
  ++classifySeq;
  state.imageWork?.abort(superseded());
  state.image = state.result = state.crop = null;
  for (const id of ['original', 'eye']) {
    const c = $(id);
    c.getContext('2d').clearRect(0, 0, c.width, c.height);
  }
  $('original-caption').textContent = `Original · ${name} · does not read`;
  $('eye-caption').textContent = 'Model\'s-eye view';
  const ol = $('predictions');
  ol.replaceChildren();
  ol.dataset.source = name;
  ol.removeAttribute('aria-busy');
  renderTimings({});
  resetEvidence();
  updateEnergy();
}

/** Shows and classifies image `index` of `images` (Files or a folder's entries). */
async function showImageOf(images, index) {
  const item = images[index];
  const name = images.length > 1 ? `${nameOf(item)} (${index + 1} of ${images.length} images)` : nameOf(item);
  const batched = state.images?.items === images;
  if (batched) Object.assign(state.images, { index, name });
  updateImagesNav();
  // Stepped past while its file was read: not shown (as an image from elsewhere it would end
  // the stepping).
  const current = () => !batched || (state.images?.items === images && state.images.index === index);
  let file = null;
  try {
    file = await asFile(item);
  } catch (e) {
    if (!current()) return;
    if (batched) showUnreadable(name);
    showError(`Could not read ${nameOf(item)}: ${messageOf(e)}`);
  }
  if (file && current()) await classifyBlob(file, name).catch(() => {});
}

/**
 * Steps `delta` images through the images that came together (a folder, several files), round
 * from the last to the first; nothing when one image came.
 */
export function stepImages(delta) {
  const batch = state.images;
  if (!batch) return Promise.resolve();
  const n = batch.items.length;
  return showImageOf(batch.items, (((batch.index + delta) % n) + n) % n);
}

/** The ‹ k / n › control under the image: shown while the image shown is one of several. */
export function updateImagesNav() {
  const batch = state.images;
  $('images-nav').hidden = !batch;
  if (batch) $('images-pos').textContent = `${batch.index + 1} / ${batch.items.length}`;
  else $('images-results').hidden = true;
  // The table's row of the image shown.
  for (const tr of $('images-table').querySelectorAll('tbody tr')) tr.setAttribute('aria-current', String(Number(tr.dataset.k) === batch?.index));
}

/**
 * Classifies every image that came together, one after another, into a table (image, top
 * class, probability), as `tokenmix classify` does a folder; saved, it is `classify --json`'s
 * output. The image shown stays. Stopped, the table keeps what was done; an image from
 * elsewhere ends the run and the table with the stepping. An image that cannot be read is a
 * row saying why.
 */
export function classifyAll() {
  const batch = state.images;
  if (!batch) return Promise.resolve([]);
  batch.run?.abort();
  const run = new AbortController();
  batch.run = run;
  return tableOf(batch, run);
}

async function tableOf(batch, run) {
  const n = batch.items.length;
  const body = $('images-table').querySelector('tbody');
  body.replaceChildren();
  $('images-results').hidden = false;
  $('images-save').disabled = true;
  $('images-stop').hidden = false;
  const rows = [];
  const cell = (text, cls) => {
    const td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  };
  const progress = () => { $('images-progress').textContent = `${rows.length} / ${n} classified${run.signal.aborted ? ' (stopped)' : ''}`; };
  progress();
  for (const item of batch.items) {
    if (run.signal.aborted || state.images !== batch) break;
    const image = nameOf(item);
    let row;
    try {
      const file = await asFile(item);
      // remember: false: the package goes on explaining the image shown, not the table's.
      const predictions = await exclusive(() => tm.classify(file, 5, { signal: run.signal, remember: false }));
      row = { image, predictions: predictions.map((p) => ({ index: p.index, label: state.labels[p.index] ?? p.label, probability: p.probability })) };
    } catch (e) {
      if (e?.name === 'AbortError') break;
      row = { image, error: messageOf(e) };
    }
    rows.push(row);
    const tr = document.createElement('tr');
    const top = row.predictions?.[0];
    // A row is a button: it shows its image (as stepping to it does).
    const k = rows.length - 1;
    const show = () => { if (state.images === batch) showImageOf(batch.items, k); };
    tr.tabIndex = 0;
    tr.title = `Show ${image}`;
    tr.setAttribute('aria-current', String(k === batch.index));
    tr.addEventListener('click', show);
    tr.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); show(); }
    });
    tr.dataset.k = String(k);
    tr.dataset.index = top ? String(top.index) : '';
    tr.dataset.label = top ? top.label : '';
    tr.dataset.probability = top ? String(top.probability) : '';
    tr.append(cell(image), ...(top ? [cell(top.label), cell(`${(100 * top.probability).toFixed(1)} %`)] : [cell(row.error, 'error'), cell('–')]));
    // In the table's order (the folder's, or as a header sorts it): found by halving, so a
    // folder of thousands sorted meanwhile costs each row a dozen comparisons.
    let [lo, hi] = [0, body.rows.length];
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (compareRows(body.rows[mid], tr) <= 0) lo = mid + 1;
      else hi = mid;
    }
    body.insertBefore(tr, body.rows[lo] ?? null);
    progress();
  }
  progress();
  $('images-stop').hidden = true;
  batch.results = rows;
  $('images-save').disabled = rows.length === 0;
  return rows;
}

// The table's order: by `key` ('image': the folder's order; 'label': the top class's name;
// 'probability'), ascending (`dir` 1) or descending (-1). Saved, the table keeps the folder's.
const tableSort = { key: 'image', dir: 1 };

/** Compares two rows of the table in `tableSort`'s order; ties keep the folder's order. */
function compareRows(a, b) {
  const k = Number(a.dataset.k) - Number(b.dataset.k);
  // An image that does not read sorts below any probability, and before any class name.
  const p = (tr) => (tr.dataset.probability === '' ? -1 : Number(tr.dataset.probability));
  const { key } = tableSort;
  const by = key === 'image' ? k : key === 'label' ? a.dataset.label.localeCompare(b.dataset.label) : p(a) - p(b);
  return tableSort.dir * by || k;
}

/**
 * Sorts the table by a column (its header clicked): ascending first, descending when clicked
 * again. By probability ascending, the images the model is least sure of come first.
 */
export function sortTable(key) {
  tableSort.dir = tableSort.key === key ? -tableSort.dir : 1;
  tableSort.key = key;
  const body = $('images-table').querySelector('tbody');
  body.append(...[...body.rows].sort(compareRows));
  for (const th of $('images-table').querySelectorAll('th[data-sort]')) {
    th.setAttribute('aria-sort', th.dataset.sort !== key ? 'none' : tableSort.dir > 0 ? 'ascending' : 'descending');
  }
}

/** Saves the table of `classifyAll` as `tokenmix classify --json` prints it. */
function saveResults() {
  const rows = state.images?.results;
  if (!rows?.length) return;
  const url = URL.createObjectURL(new Blob([`${JSON.stringify(rows, null, 2)}\n`], { type: 'application/json' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = 'tokenmix-classify.json';
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export function handleFile(f) {
  if (MODEL_FILE.test(f.name)) {
    loadModelFile(f).catch(() => {});
  } else if (f.type && !f.type.startsWith('image/')) {
    showError(`${f.name} is not an image (${f.type}); drop a ${IMAGE_FORMATS}, or a .safetensors model.`);
  } else {
    classifyBlob(f, nameOf(f)).catch(() => {});
  }
}
