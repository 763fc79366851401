// Types of the tokenmix package (index.js). Every method returns a promise; failures reject
// with an Error whose message names the problem (the model file, the tensor, the limit).

/** Which executor runs the model: WGSL compute shaders on WebGPU, or WebAssembly SIMD on the CPU. */
export type Backend = 'auto' | 'gpu' | 'cpu';

/** Options of {@link createClassifier}; every one is optional. */
export interface ClassifierOptions {
  /** Run inference, downloads and preprocessing in a dedicated worker (default true). Each
   * classifier made with `false` has a module instance of its own on the page's thread (its
   * own model and backend); a disposed one's instance serves the next. */
  worker?: boolean;
  /** 'auto' (default): the GPU unless WebGPU is missing or a software adapter, then the CPU. */
  backend?: Backend;
  /** Storage on the GPU: 'f32' (default) or 'f16' for GEMM weights and MLP hidden activations,
   * where the adapter has shader-f16 (else f32, said in `adapterInfo().precisionNote`). Sums
   * are f32 either way. */
  precision?: 'f32' | 'f16';
  /** Time the GPU's GEMM kernels per shape class at model load and keep the fastest (stored
   * per adapter in the Cache API, so a later load times nothing). Default: on for hardware
   * GPUs, off for software adapters. */
  autotune?: boolean;
  /** Threads of the CPU executor (1 to 64; default: the cores, at most 8). More than one runs
   * the threaded build (js/pkg-threads), which needs a worker (the default) and a
   * cross-origin-isolated page (Cross-Origin-Opener-Policy: same-origin,
   * Cross-Origin-Embedder-Policy: require-corp); elsewhere one thread, and
   * `adapterInfo().threadsNote` says why. */
  threads?: number;
}

/** What {@link Classifier.classify} accepts. A Blob or File (an upload, a fetch's body) in PNG,
 * JPEG, WebP, GIF, BMP or TIFF is decoded by tokenmix's own decoder, the native CLI's, so it gets the
 * CLI's answer (EXIF orientation applied, alpha dropped, no colour management); another format
 * by the browser; one neither decodes is an error. */
export type ImageSource = ImageData | ImageBitmap | HTMLImageElement | HTMLCanvasElement | HTMLVideoElement | OffscreenCanvas | Blob;

/** A model file: a URL (timm's model.safetensors), timm's name of a model on the Hugging Face
 * hub (`'hf-hub:timm/mixer_b16_224.goog_in21k_ft_in1k'`: its model.safetensors, from
 * {@link LoadOptions.hub}), its bytes, or null for the embedded default. */
export type ModelSource = string | ArrayBuffer | Uint8Array | null;

/** What classify, classifyDetailed and explain take besides `topK`. */
export interface CallOptions {
  /** Aborted, it stops the call (see {@link Classifier.classify} for where). */
  signal?: AbortSignal;
}

/** What classify and classifyDetailed take besides `topK`. */
export interface ClassifyOptions extends CallOptions {
  /** False: the image is answered but does not become the latest classified image, the one
   * explain explains (default true). For images classified beside the one shown, as the page
   * classifies a folder into a table: an explanation of the shown image is then asked at any
   * time, without classifying it again. */
  remember?: boolean;
}

export interface LoadOptions {
  /** Download progress in bytes; `total` is null when the server does not say. */
  onProgress?: (loaded: number, total: number | null) => void;
  /** A label for messages (default: the URL). */
  name?: string;
  /** Read a URL from the Cache API when it is there, and keep it there once it loaded (default false). */
  cache?: boolean;
  /** Switch the executor for this and later calls. */
  backend?: Backend;
  /** Storage on the GPU: 'f32' (default) or 'f16' for GEMM weights and MLP hidden activations
   * (half their memory and bandwidth, where the adapter has shader-f16; else f32, said in
   * `adapterInfo().precisionNote`). For this and later calls. */
  precision?: 'f32' | 'f16';
  /** Turn GEMM autotuning on or off for this and later loads (see {@link ClassifierOptions.autotune}). */
  autotune?: boolean;
  /** Where the GPU backend resizes the images it classifies, for this and later loads: 'gpu'
   * (preprocess.wgsl) or 'cpu'; by default 'gpu' on hardware adapters and 'cpu' on software
   * ones (`adapterInfo().resample` says which). The same pixels either way. */
  resample?: 'gpu' | 'cpu';
  /** The hub a source named `hf-hub:owner/name` downloads from (default https://huggingface.co;
   * a mirror, or a local server in tests). */
  hub?: string;
  /** Aborting it stops the download and the load, which then changes nothing and rejects with
   * the signal's reason (an `AbortError`), as `fetch` does. After the download, the load's
   * conversion and upload stop at the next tensor: at once in the threaded worker (the abort
   * is written into its shared memory); in the one-thread build within a slice, as the file is
   * copied and converted in slices of about 10 ms with the thread given back between them. An
   * abort that comes while the rest of the load holds the thread is read before the model is
   * committed. */
  signal?: AbortSignal;
}

export interface Prediction {
  index: number;
  label: string;
  probability: number;
}

export interface Timings {
  preprocessMs: number;
  forwardMs: number;
  readbackMs: number;
}

export interface DetailedResult {
  predictions: Prediction[];
  timings: Timings;
  /** The model's input made from the image (CHW, normalised). */
  input: { channels: number; height: number; width: number; data: Float32Array };
}

export interface Preprocess {
  size: [number, number];
  crop_pct: number;
  mean: number[];
  std: number[];
  channels: number;
}

export interface ModelDescription {
  name: string;
  family: 'MLP-Mixer' | 'gMLP' | 'ResMLP' | 'PoolFormer';
  /** The timm preset whose shapes match, e.g. 'mixer_b16_224', or null. */
  preset: string | null;
  params: number;
  macs: number;
  classes: number;
  inputSize: [number, number, number];
  labels: string[];
  preprocess: Preprocess;
  /** The inferred timm config (class and fields). */
  arch: { class: 'mlp_mixer' | 'meta_former' } & Record<string, unknown>;
  mixingLayers: number;
  backend: 'gpu' | 'cpu';
  /** Activations stored as f16: `['hidden']` (the MLP hidden layers) under precision 'f16' on
   * the GPU, else empty. */
  f16Activations: string[];
  /** Set by loadModel: whether the bytes came from the cache. */
  fromCache?: boolean;
}

export interface AdapterInfo {
  /** The executor that runs: 'gpu' (WGSL on WebGPU) or 'cpu' (WebAssembly SIMD). */
  backend: 'gpu' | 'cpu';
  /** Why that one, in one line (e.g. "this browser has no WebGPU (navigator.gpu is missing)"). */
  reason: string;
  /** What the adapter request said, when 'auto' fell back to the CPU for want of one. */
  detail: string | null;
  requested: Backend;
  name: string;
  apiBackend: string;
  deviceType: string;
  /** The GEMM kernel (and, where the GPU autotunes, the choice per shape class). */
  gemm: string;
  /** Whether the GPU autotunes its GEMM kernels, and how many shape classes it timed so far
   * (classes whose choice came from the Cache API are not timed). */
  autotune: boolean;
  gemmTimed: number;
  /** How the norms and softmax spread over the GPU: 'workgroup' (one per row, GroupNorm in
   * chunks; hardware adapters) or 'invocation' (one per row, no barriers; software ones such
   * as SwiftShader); null on the CPU executor. */
  rows: 'workgroup' | 'invocation' | null;
  /** Where the GPU executor resizes an image it classifies: 'gpu' (preprocess.wgsl, on real
   * GPUs) or 'cpu' (on a software adapter such as SwiftShader, where the CPU code is faster);
   * null on the CPU backend. Both give the same bytes. */
  resample: 'gpu' | 'cpu' | null;
  /** How GEMM weights are stored: 'f32' or 'f16'. */
  precision: 'f32' | 'f16';
  /** Why the precision is not the one asked for, when it is not. */
  precisionNote: string | null;
  /** The CPU executor's threads (rayon's pool in the threaded build; 1 in the other). */
  threads: number;
  /** Why it runs on one thread although more were asked for (or allowed by default), else null. */
  threadsNote: string | null;
  /** The classify/explain calls an aborted signal stopped: before their pass began, and
   * during it (at a step of the CPU executor, or between the GPU executor's submissions); and
   * the loads it stopped after their download, in their conversion or upload. */
  cancelled: { beforeStart: number; midPass: number; loads: number };
  /** Whether CPU passes (and a load's copy and conversion) run in slices of `every` ms, giving
   * the thread back between them (the one-thread build), the pauses they made and the
   * milliseconds those were away (with what else ran meanwhile). */
  slices: { on: boolean; every: number; pauses: number; pausedMs: number };
}

export interface TokenMixing {
  kind: 'mixer' | 'gmlp' | 'resmlp' | 'poolformer';
  layer: number;
  layers: number;
  rows: number;
  cols: number;
  grid: [number, number];
  /** Row-major rows x cols. */
  data: Float32Array;
  note: string;
}

/** Structure figures of a token map (see the README's "Insight" section). */
export interface Figures {
  /** |M|-weighted mean distance, in patches, between a token and what it mixes from. */
  locality: number;
  /** Share of the map's energy explained by the best relative-offset kernel (0..1). */
  shiftInvariance: number;
  /** Share of the rows' spectral energy at ≤ 0.25 cycles per patch (0..1). */
  lowFrequency: number;
}

export interface MixerUnit {
  unit: number;
  ky: number;
  kx: number;
  radial: number;
  angle: number;
  dcShare: number;
  absMax: number;
  partner: number;
  partnerCorr: number;
  /** The opposite-sign twin it is drawn beside, or -1. */
  pairedWith: number;
}

/** Everything the views show of one token-mixing layer, computed by the Rust insight module. */
export interface LayerInsight extends TokenMixing {
  /** MLP-Mixer: per fc1 unit; empty for the other kinds. */
  units: MixerUnit[];
  /** Display order: single units or opposite-sign pairs (Mixer). */
  groups: number[][];
  pairs: number;
  /** Mean weight by offset pos(s) − pos(t), (2gh−1) × (2gw−1); null for PoolFormer. */
  offsetKernel: { h: number; w: number; values: number[] } | null;
  figuresOn: string;
  figures: Figures | null;
  /** The same figures for timm's initialisation of this architecture. */
  init: Figures | null;
}

export interface ClassEvidence {
  index: number;
  label: string;
  logit: number;
  probability: number;
  /** The part of the logit no token carries. */
  bias: number;
  /** gh × gw row-major: map.sum() + bias == logit. */
  map: Float32Array;
}

export interface Explanation {
  grid: [number, number];
  /** PoolFormer: per-token shares taken with the image's pooled statistics (exact in sum). */
  approximate: boolean;
  classes: ClassEvidence[];
}

export interface StageEnergy {
  stage: number;
  grid: [number, number];
  energy: Float32Array;
}

export interface CropGeometry {
  /** The image size after timm's resize step, [width, height]. */
  resized: [number, number];
  left: number;
  top: number;
  /** The crop (model input) size, [height, width]. */
  size: [number, number];
}

export interface Classifier {
  /** True when the calls run in a dedicated worker. */
  readonly worker: boolean;
  /** Loads a model (a URL is resolved against the page). On failure it rejects and the
   * previous model, backend, precision and autotune setting stay. Of overlapping loads the
   * last called wins: an older one that finishes after it rejects as superseded. */
  loadModel(source?: ModelSource, options?: LoadOptions): Promise<ModelDescription>;
  /** The top `topK` (a whole number from 1; default 5) classes, most probable first. With a
   * `signal`, aborting it before the call settles rejects the call with the signal's reason
   * (as fetch does), and stops its pass where it can: in a worker of a cross-origin-isolated
   * page (the threaded build: the abort is written into the worker's shared memory) a CPU
   * pass stops at its next step (milliseconds), and a call queued behind another before its
   * first. In the one-thread build (a page that is not cross-origin isolated, or `worker:
   * false`) a CPU pass runs in slices of about 10 ms with the thread given back between them,
   * where the abort is read: the pass stops at its next step, or block of a large GEMM, too. A
   * GPU pass stops between its
   * submissions. A pass that ended anyway leaves its image as the latest classified one (what
   * explain explains; not with `remember: false`). Calls run their passes one at a time, in the order they were made. */
  classify(image: ImageSource, topK?: number, options?: ClassifyOptions): Promise<Prediction[]>;
  classify(image: ImageSource, options: ClassifyOptions & { topK?: number }): Promise<Prediction[]>;
  /** As classify, plus the latency split and the model's input. */
  classifyDetailed(image: ImageSource, topK?: number, options?: ClassifyOptions): Promise<DetailedResult>;
  classifyDetailed(image: ImageSource, options: ClassifyOptions & { topK?: number }): Promise<DetailedResult>;
  /** The learned token mixing of one layer (the visualiser's data). */
  tokenMixing(layer: number): Promise<TokenMixing>;
  /** Everything the views show of one layer: the weights, Mixer unit order and pairs, the
   * offset kernel, structure figures beside timm's initialisation. */
  insight(layer: number): Promise<LayerInsight>;
  /** Why the latest classified image got its label: per top class, the logit split into one
   * contribution per token. Rejects before any image was classified. A `signal` stops it as
   * it stops classify. */
  explain(topK?: number, options?: CallOptions): Promise<Explanation>;
  explain(options: CallOptions & { topK?: number }): Promise<Explanation>;
  /** PoolFormer: per-stage token energy of the latest image; empty for other families. */
  stageEnergy(): Promise<StageEnergy[]>;
  /** Where the model's input comes from in a width x height image. */
  cropGeometry(width: number, height: number): Promise<CropGeometry>;
  /** The hub repository `text` names, as `owner/name`: `owner/name`, `hf-hub:owner/name` or
   * its address on huggingface.co (a file's or a page's), as the CLI and the desktop app read
   * it; rejects, saying what is expected, otherwise. */
  parseHubRepo(text: string): Promise<string>;
  /** The pixels classify takes from `image`: for a Blob or File, as tokenmix decodes it (the
   * CLI's decoder: PNG, JPEG, WebP, GIF, BMP, TIFF, EXIF orientation applied), else as the
   * browser does; e.g. to show a TIFF, which browsers do not decode. */
  decodeImage(image: ImageSource): Promise<ImageData>;
  info(): Promise<{ adapter: AdapterInfo; model: ModelDescription }>;
  adapterInfo(): Promise<AdapterInfo>;
  modelInfo(): Promise<ModelDescription>;
  isCached(url: string): Promise<boolean>;
  /** Removes one URL from the model cache, or all of it; rejects where the Cache API does
   * (a URL no Request can be made of, storage turned off). */
  clearCache(url?: string): Promise<boolean>;
  /** Tests of the recovery path: destroys the WebGPU device (the GPU backend only). */
  loseDevice(): Promise<void>;
  /** Ends the worker (or, with `worker: false`, frees the module instance for the next
   * classifier); later calls reject. */
  dispose(): void;
}

export function createClassifier(options?: ClassifierOptions): Promise<Classifier>;
