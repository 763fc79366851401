//! The desktop app (`tokenmix view`, cargo feature `desktop`): the page's product in a window,
//! drawn with egui on the same wgpu core. [`Viewer`] holds the state and draws one frame
//! ([`Viewer::ui`]); everything it shows is computed by the library — predictions and timings
//! by [`Model::classify_rgba`], per-token class evidence by [`Model::explain`], the token-mixing
//! views by [`Model::insight`] — so there is no third implementation of any view. The window
//! (`run_window`, eframe with its wgpu renderer) and the headless screenshot
//! ([`render::Offscreen`]) draw the same frames; tests drive them with egui_kittest.

pub mod camera;
pub use crate::hub;
pub mod render;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use egui::{Color32, ColorImage, TextureHandle, TextureOptions, Vec2};
use image::RgbImage;

use crate::error::{Error, Result};
use crate::exec::{Cancel, Device};
use crate::insight::{colour, LayerInsight};
use crate::models::{Explained, Model};
use crate::preprocess;

use camera::Camera;

/// The models the app ships (the same files as `weights/`; the Mixer is the embedded default).
/// A `static`, so each is in the binary once (see [`crate::DEFAULT_MODEL`]).
pub static SHIPPED: &[(&str, &[u8])] = &[
    ("mixer_fmnist (embedded default)", crate::DEFAULT_MODEL),
    ("gmlp_fmnist", include_bytes!("../../weights/gmlp_fmnist.safetensors")),
    ("poolformer_fmnist", include_bytes!("../../weights/poolformer_fmnist.safetensors")),
];

/// The bundled Fashion-MNIST samples (`www/samples/`).
pub const SAMPLES: &[(&str, &[u8])] = &[
    ("boot", include_bytes!("../../www/samples/fmnist-0000-boot.png")),
    ("pullover", include_bytes!("../../www/samples/fmnist-0001-pullover.png")),
    ("trouser", include_bytes!("../../www/samples/fmnist-0002-trouser.png")),
    ("shirt", include_bytes!("../../www/samples/fmnist-0004-shirt.png")),
    ("coat", include_bytes!("../../www/samples/fmnist-0006-coat.png")),
    ("sandal", include_bytes!("../../www/samples/fmnist-0008-sandal.png")),
    ("sneaker", include_bytes!("../../www/samples/fmnist-0009-sneaker.png")),
    ("dress", include_bytes!("../../www/samples/fmnist-0013-dress.png")),
    ("bag", include_bytes!("../../www/samples/fmnist-0018-bag.png")),
    ("t-shirt", include_bytes!("../../www/samples/fmnist-0019-tshirt.png")),
];

/// One prediction row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Prediction {
    pub index: usize,
    pub label: String,
    pub probability: f32,
}

/// Images that came together ([`Viewer::images`]).
pub struct Images {
    pub paths: Vec<std::path::PathBuf>,
    /// The one shown, and the name it is classified under: "a.png (2 of 3 images)".
    pub index: usize,
    pub name: String,
    /// The one shown does not read: its place shows why, with no other image's answer
    /// ([`Viewer::step_images`]).
    pub unreadable: bool,
    /// "Classify all" ([`Viewer::classify_all`]), once asked for.
    pub all: Option<ClassifyAll>,
}

impl Images {
    /// The name image `k` is shown and classified under.
    fn name_of(&self, k: usize) -> String {
        format!("{} ({} of {} images)", self.paths[k].display(), k + 1, self.paths.len())
    }

    /// The file a classification named `source` is of, as `tokenmix classify` names it.
    fn file_of(&self, source: &str) -> Option<String> {
        (0..self.paths.len()).find(|&k| self.name_of(k) == source).map(|k| self.paths[k].display().to_string())
    }
}

/// "Classify all": the images that came together classified in turn on a thread of their own,
/// as `tokenmix classify` does them, into a table that saves as `classify --json` prints it.
pub struct ClassifyAll {
    /// `classify --json`'s elements, in the images' order: `{"image", "predictions"}` (the top
    /// 5), or `{"image", "error"}` for an image that does not read.
    pub rows: Vec<serde_json::Value>,
    /// Why it ended before the last image, if it did ("stopped", another model loaded).
    pub stopped: Option<&'static str>,
    running: Option<(Cancel, std::sync::mpsc::Receiver<serde_json::Value>)>,
    /// The column the table is sorted by, and whether descending ([`Self::sort_by`]).
    pub sort: (SortKey, bool),
    /// The rows in the order shown (indices into [`Self::rows`]), kept for [`Self::sort`] and
    /// the rows there are ([`Self::order`]).
    order: Vec<usize>,
    /// Where "Save as JSON" writes (the field under the table), and what the last save said.
    pub save_path: String,
    pub saved: Option<std::result::Result<String, String>>,
}

impl Drop for ClassifyAll {
    /// A table let go (an image from elsewhere ended the stepping) stops its run.
    fn drop(&mut self) {
        self.stop("stopped");
    }
}

/// A column of the "Classify all" table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// The folder's order (`tokenmix classify`'s).
    Image,
    /// The top class's name.
    Class,
    /// The top class's probability; an image that does not read below any.
    Probability,
}

impl ClassifyAll {
    pub fn running(&self) -> bool {
        self.running.is_some()
    }

    /// Sorts the table by `key`: ascending, or, by the same key again, descending. By
    /// probability ascending, the images the model is least sure of come first. Saved, the
    /// table keeps the folder's order.
    pub fn sort_by(&mut self, key: SortKey) {
        self.sort = (key, self.sort.0 == key && !self.sort.1);
        self.order.clear();
    }

    /// The rows in the order shown (indices into [`Self::rows`]); ties keep the folder's order.
    pub fn order(&mut self) -> &[usize] {
        self.ordered_rows().0
    }

    /// [`Self::order`] beside the rows it indexes (borrowed together, so the window lays the
    /// rows in view out without copying the order each frame).
    fn ordered_rows(&mut self) -> (&[usize], &[serde_json::Value]) {
        if self.order.len() != self.rows.len() {
            let (key, descending) = self.sort;
            // The key sorted by, taken once per row (not per comparison), and only that one.
            fn top(row: &serde_json::Value) -> &serde_json::Value {
                &row["predictions"][0]
            }
            let class: Vec<String> = match key {
                SortKey::Class => self.rows.iter().map(|r| top(r)["label"].as_str().unwrap_or_default().to_lowercase()).collect(),
                _ => Vec::new(),
            };
            let probability: Vec<f64> = match key {
                SortKey::Probability => self.rows.iter().map(|r| top(r)["probability"].as_f64().unwrap_or(-1.0)).collect(),
                _ => Vec::new(),
            };
            let mut order: Vec<usize> = (0..self.rows.len()).collect();
            order.sort_by(|&a, &b| {
                let by = match key {
                    SortKey::Image => a.cmp(&b),
                    SortKey::Class => class[a].cmp(&class[b]),
                    SortKey::Probability => probability[a].total_cmp(&probability[b]),
                };
                if descending { by.reverse() } else { by }.then(a.cmp(&b))
            });
            self.order = order;
        }
        (&self.order, &self.rows)
    }

    /// Stops the run (the rows done stay), saying why.
    fn stop(&mut self, why: &'static str) {
        if let Some((cancel, _)) = self.running.take() {
            cancel.cancel();
            self.stopped = Some(why);
        }
    }

    /// Takes the rows done meanwhile; false once the run has ended.
    fn poll(&mut self) -> bool {
        let Some((_, rx)) = &self.running else { return false };
        loop {
            match rx.try_recv() {
                Ok(row) => self.rows.push(row),
                Err(std::sync::mpsc::TryRecvError::Empty) => return true,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    self.running = None;
                    return false;
                }
            }
        }
    }

    /// Writes the table as `classify --json` prints it to [`Self::save_path`], a file that
    /// must not exist yet.
    pub fn save(&mut self) {
        let path = Path::new(self.save_path.trim());
        let json = serde_json::to_string_pretty(&self.rows).map(|j| j + "\n");
        let written = json.map_err(std::io::Error::other).and_then(|j| {
            use std::io::Write;
            std::fs::File::create_new(path)?.write_all(j.as_bytes())
        });
        self.saved = Some(match written {
            Ok(()) => Ok(format!("Saved {} rows to {}.", self.rows.len(), path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(format!("{} exists: name another file.", path.display())),
            Err(e) => Err(format!("Could not save {}: {e}", path.display())),
        });
    }
}

/// Classifies `paths` in batches, each image read and transformed as `tokenmix classify` does
/// it ([`preprocess::Batches`]), and sends each its `classify --json` element, in order; stops
/// at `cancel`.
fn classify_files(model: &Model, paths: &[std::path::PathBuf], cancel: &Cancel, tx: &std::sync::mpsc::Sender<serde_json::Value>) {
    const BATCH: usize = 8;
    let named = |p: &Path| p.display().to_string();
    for batch in preprocess::Batches::new(model, paths, BATCH).until(cancel) {
        let out = match batch.input.is_empty() {
            true => Ok(None),
            false => match pollster::block_on(model.forward_cancellable(&batch.input, cancel)) {
                Ok(out) => Ok(Some(out)),
                Err(Error::Cancelled) => return,
                Err(e) => Err(format!("Classification failed: {e}")),
            },
        };
        for (p, place) in batch.paths.iter().zip(batch.places) {
            let row = match (place, &out) {
                (Ok(i), Ok(Some(out))) => {
                    let predictions: Vec<Prediction> = out
                        .top_k(i, 5)
                        .into_iter()
                        .map(|k| Prediction { index: k, label: crate::labels::label(&model.info, k), probability: out.probs[i * out.classes + k] })
                        .collect();
                    serde_json::json!({"image": named(p), "predictions": predictions})
                }
                (Err(e), _) => serde_json::json!({"image": named(p), "error": e.to_string()}),
                (Ok(_), Err(e)) => serde_json::json!({"image": named(p), "error": e}),
                (Ok(_), Ok(None)) => continue,
            };
            if tx.send(row).is_err() {
                return;
            }
        }
    }
}

/// The latest classified image and what the model said about it.
pub struct Classified {
    /// Which classification request this answers ([`Viewer::classify`] numbers them).
    pub serial: u64,
    pub source: String,
    /// The image as given, and the model's input (CHW, normalised).
    pub image: RgbImage,
    pub input: Vec<f32>,
    pub predictions: Vec<Prediction>,
    pub times: [f64; 3],
    pub stage_energy: Vec<((usize, usize), Vec<f32>)>,
    /// The per-token split, computed when a class is first clicked (a second pass through
    /// the model, so classifying alone does not pay for it).
    pub explained: Option<Explained>,
}

/// A token-grid heatmap laid over the image.
#[derive(Clone, Debug)]
pub struct Overlay {
    pub label: String,
    pub grid: (usize, usize),
    pub values: Vec<f32>,
    pub sequential: bool,
}

/// The app's whole state; [`Viewer::ui`] draws it and applies what the user did.
pub struct Viewer {
    pub device: Device,
    /// Which executor runs and why (shown in the header).
    pub backend_line: String,
    pub model: Arc<Model>,
    pub model_name: String,
    pub classified: Option<Classified>,
    /// The class whose evidence is laid over the image.
    pub evidence: Option<usize>,
    pub relative: bool,
    /// The token-mixing layer the slider is on.
    pub layer: usize,
    /// The views on screen: of [`Self::layer`], or, while that one is computed, of the layer
    /// shown before it (drawn dimmed).
    pub insight: Option<Arc<LayerInsight>>,
    /// Every layer of the current model whose views have been computed: the slider shows them
    /// again at once.
    insights: HashMap<usize, Arc<LayerInsight>>,
    /// A layer's views being computed on a thread of their own (a hub model's first layer takes
    /// tens of milliseconds, a Mixer's every layer some, which the slider would stall for).
    insight_work: Option<InsightRunning>,
    /// A token row of the current layer under the pointer (gMLP/ResMLP).
    pub hover: Option<Overlay>,
    pub error: Option<String>,
    /// Why the current layer has no token-mixing view (kept apart from [`Self::error`], which
    /// the next successful classification clears).
    pub insight_error: Option<String>,
    pub status: String,
    pub path_field: String,
    pub hub_base: String,
    pub hub_repo: String,
    /// Where downloads are kept ([`hub::cache_dir`]).
    pub hub_cache: std::path::PathBuf,
    pub download: Option<hub::Download>,
    /// [`Self::model_changes`] when the running download started: a download finishing after
    /// the user chose another model does not replace it.
    download_since: u64,
    /// Counts the models the user asked for (picker, file, drop, hub).
    pub model_changes: u64,
    /// A model loading on a thread of its own (reading the file, building the plans, compiling
    /// the pipelines and, on a GPU, timing GEMM kernels: seconds for a hub model), so that the
    /// window keeps drawing; a newer request supersedes it.
    loading: Option<PendingLoad>,
    /// The model's work on an image (classifying it, explaining it) running on a thread of its
    /// own, so that the window keeps drawing: on a CPU, a hub model takes a second or more, an
    /// explanation as long again, and a GPU's first pass times kernels.
    work: Option<Running>,
    /// The request that waits for [`Self::work`]; a newer one replaces it, so a burst of clicks
    /// runs the first and the last.
    queued: Option<Request>,
    /// The number of the latest classification asked for; a result of an older one (another
    /// image, or the image under the previous model) is dropped.
    serial: u64,
    /// How many passes of the model were stopped early because a newer request made their
    /// result moot.
    pub cancelled: u64,
    /// How many loads a newer one (or a closed window) stopped before they ended, counted by
    /// their threads as they stop.
    stopped_loads: Arc<AtomicU64>,
    /// Where a finished piece of work asks for the next frame at once (set by [`Self::ui`]).
    repaint: Option<egui::Context>,
    /// Fractions of the running download seen by the window (tests check progress showed).
    pub progress_seen: Vec<f32>,
    pub camera: Box<dyn Camera>,
    /// Several images that came together (a folder, several files dropped), the one shown and
    /// its name: stepped through with ‹ › under the image or the arrow keys
    /// ([`Self::step_images`]); None where one image came.
    pub images: Option<Images>,
    /// The camera's newest frame and its number while it runs: the live preview.
    pub preview: Option<(u64, image::RgbImage)>,
    /// How many camera frames the window has taken for its preview.
    pub preview_frames: u64,
    /// The preview's texture and the number of the frame it holds (apart from [`Textures`],
    /// whose textures follow the model's generation).
    preview_texture: Option<(u64, TextureHandle)>,
    /// "Classify live": while the camera runs, its newest frame is classified whenever the
    /// model has nothing else to do (frames that come meanwhile are skipped, never queued).
    pub live: bool,
    /// The number of the newest camera frame handed to the model live.
    live_frame: u64,
    /// Bumped whenever what the views draw changes (textures are keyed by it).
    pub generation: u64,
    textures: Textures,
}

/// Where a model to load in the background comes from.
pub enum ModelSource {
    /// A model built into the binary (the picker's).
    Bytes(&'static [u8]),
    /// A `.safetensors` file, read on the loading thread.
    File(std::path::PathBuf),
}

/// A load running on its thread: the model's name and where the result arrives.
struct PendingLoad {
    name: String,
    /// Stops it: a newer load makes it moot.
    cancel: Cancel,
    rx: std::sync::mpsc::Receiver<Result<Model>>,
    /// Set when it loads a hub download (named after the repository once it loaded).
    hub: Option<HubFile>,
}

/// Model work for the thread: classify an image (or a camera's next still), or explain a
/// classification's input.
enum Request {
    Classify {
        serial: u64,
        source: String,
        image: RgbImage,
    },
    /// An image file, read on the thread (a large photo's decode would stall the window).
    Open {
        serial: u64,
        source: String,
        path: std::path::PathBuf,
    },
    Capture {
        serial: u64,
        source: String,
        grab: camera::Grab,
    },
    Explain {
        serial: u64,
        input: Vec<f32>,
    },
}

/// A layer's views ([`Model::insight`]) being computed on their thread.
struct InsightRunning {
    layer: usize,
    model: Arc<Model>,
    rx: std::sync::mpsc::Receiver<Result<LayerInsight>>,
}

/// What a [`Request`] ended with.
enum Done {
    Classified(Result<Classified>),
    /// The file of a [`Request::Open`] (named as asked) did not read as an image.
    Unreadable(String, Error),
    Explained(Result<Explained>),
}

/// A [`Request`] running on its thread: for which classification, whether it explains, on
/// which model, and where the result arrives.
struct Running {
    serial: u64,
    explains: bool,
    model: Arc<Model>,
    rx: std::sync::mpsc::Receiver<Done>,
    /// Stops it early once nothing it could give would be shown.
    cancel: Cancel,
}

impl Request {
    /// Runs on the work thread.
    fn run(self, model: &Model, cancel: &Cancel) -> Done {
        match self {
            Request::Classify { serial, source, image } => Done::Classified(classify_image(model, serial, source, image, cancel)),
            Request::Open { serial, source, path } => match preprocess::load_image(&path) {
                Ok(image) => Done::Classified(classify_image(model, serial, source, image, cancel)),
                Err(e) => Done::Unreadable(source, e),
            },
            Request::Capture { serial, source, grab } => {
                Done::Classified(grab().and_then(|image| classify_image(model, serial, source, image, cancel)))
            }
            Request::Explain { input, .. } => Done::Explained(pollster::block_on(model.explain_cancellable(&input, cancel))),
        }
    }
}

/// What a background thread sent on `rx`: `None` while it still runs; `lost()` when it ended
/// without sending (a panic on the thread).
fn received<T>(rx: &std::sync::mpsc::Receiver<T>, lost: impl FnOnce() -> T) -> Option<T> {
    match rx.try_recv() {
        Ok(sent) => Some(sent),
        Err(std::sync::mpsc::TryRecvError::Empty) => None,
        Err(std::sync::mpsc::TryRecvError::Disconnected) => Some(lost()),
    }
}

/// `image` through `model`: the top five classes, the times, the per-stage energy.
fn classify_image(model: &Model, serial: u64, source: String, image: RgbImage, cancel: &Cancel) -> Result<Classified> {
    let run = pollster::block_on(model.classify_pixels_cancellable(crate::preprocess::Pixels::rgb(&image), millis, cancel))?;
    let out = &run.output;
    let predictions = out
        .top_k(0, 5)
        .into_iter()
        .map(|k| Prediction { index: k, label: crate::labels::label(&model.info, k), probability: out.probs[k] })
        .collect();
    Ok(Classified {
        serial,
        source,
        image,
        input: run.input,
        predictions,
        times: [run.preprocess_ms, run.forward_ms, run.readback_ms],
        stage_energy: run.stage_energy,
        explained: None,
    })
}

struct HubFile {
    repo: String,
    path: std::path::PathBuf,
    cached: bool,
}

/// A model file's bytes, refusing one larger than any checkpoint of these families (or a
/// device) before it is all in memory, and reading a pipe only as far as its header says.
fn read_model_file(path: &Path) -> Result<Vec<u8>> {
    crate::file::read_model(path)
}

/// The views' textures, remade only when [`Viewer::generation`] moved on; a field of its own
/// so a frame can fill it while it reads the rest of the state.
#[derive(Default)]
struct Textures(HashMap<String, (u64, TextureHandle)>);

impl Textures {
    /// The texture `key` of this generation, made by `make` when there is none yet.
    fn get(&mut self, ctx: &egui::Context, generation: u64, key: &str, make: impl FnOnce() -> ColorImage) -> TextureHandle {
        if let Some((g, t)) = self.0.get(key) {
            if *g == generation {
                return t.clone();
            }
        }
        let t = ctx.load_texture(key, make(), TextureOptions::NEAREST);
        self.0.insert(key.to_string(), (generation, t.clone()));
        t
    }
}

fn millis() -> f64 {
    use std::sync::OnceLock;
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64() * 1e3
}

impl Viewer {
    /// The app on `device` with the model in `bytes` (the embedded default when `None`).
    pub fn new(device: Device, backend_line: String, model: Option<(&str, &[u8])>) -> Result<Viewer> {
        let (name, bytes) = model.unwrap_or(SHIPPED[0]);
        let m = Model::load(device.clone(), bytes, None).map_err(|e| Error::Input(format!("{name}: {e}")))?;
        Ok(Viewer::with_model(device, backend_line, name, m))
    }

    /// The app with `model`, loaded by the caller on `device` (the CLI's `view --weights`, which
    /// loads as its other commands do) and named `name`.
    pub fn with_model(device: Device, backend_line: String, name: &str, model: Model) -> Viewer {
        let mut v = Viewer {
            device,
            backend_line,
            model: Arc::new(model),
            model_name: name.to_string(),
            classified: None,
            evidence: None,
            relative: false,
            layer: 0,
            insight: None,
            insights: HashMap::new(),
            insight_work: None,
            hover: None,
            error: None,
            insight_error: None,
            status: format!("Loaded {name}."),
            path_field: String::new(),
            hub_base: crate::env::env().hub.clone().unwrap_or_else(|| hub::HUB.to_string()),
            hub_repo: "timm/gmlp_s16_224.ra3_in1k".into(),
            hub_cache: hub::cache_dir(),
            download: None,
            download_since: 0,
            model_changes: 0,
            loading: None,
            work: None,
            queued: None,
            serial: 0,
            cancelled: 0,
            stopped_loads: Arc::default(),
            repaint: None,
            progress_seen: Vec::new(),
            camera: Box::new(camera::Ffmpeg::new()),
            images: None,
            preview: None,
            preview_frames: 0,
            preview_texture: None,
            live: false,
            live_frame: 0,
            generation: 0,
            textures: Textures::default(),
        };
        // The first layer's views before the first frame, as the model itself is loaded: a
        // window (or a screenshot) opens with them.
        // (A model without a view gets its error from `refresh_insight`.)
        if let Ok(first) = v.model.insight(0) {
            v.insights.insert(0, Arc::new(first));
        }
        v.refresh_insight();
        v
    }

    /// Swaps in the model in `bytes`; on failure the error is shown and the previous model
    /// stays (and keeps classifying). True when the model loaded.
    pub fn load_model(&mut self, name: &str, bytes: &[u8]) -> bool {
        self.try_load_model(name, bytes).is_ok()
    }

    fn try_load_model(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        self.model_changes += 1;
        self.loading = None;
        let loaded = Model::load(self.device.clone(), bytes, None);
        self.adopt(name, loaded)
    }

    /// Starts loading a model on a thread of its own; [`Self::ui`] adopts it when it is ready
    /// (or shows why not), unless a newer request came meanwhile. What the app's own widgets
    /// (the model picker, Open, a dropped file, a finished download) use.
    pub fn start_load(&mut self, name: &str, source: ModelSource) {
        self.start_load_for(name, source, None);
    }

    fn start_load_for(&mut self, name: &str, source: ModelSource, hub: Option<HubFile>) {
        self.model_changes += 1;
        // The load this one supersedes stops at its next tensor or weight: its model would not
        // be adopted, and a hub model's load holds the CPU and a copy of the file meanwhile.
        if let Some(old) = &self.loading {
            old.cancel.cancel();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let device = self.device.clone();
        let cancel = Cancel::new();
        let stop = cancel.clone();
        let stopped = self.stopped_loads.clone();
        std::thread::spawn(move || {
            let load = |bytes: &[u8]| Model::load_cancellable(device, bytes, None, &stop);
            let loaded = match source {
                ModelSource::Bytes(bytes) => load(bytes),
                ModelSource::File(path) => stop.check().and_then(|()| read_model_file(&path)).and_then(|bytes| load(&bytes)),
            };
            if matches!(loaded, Err(Error::Cancelled)) {
                stopped.fetch_add(1, Ordering::Relaxed);
            }
            // (A superseded load's receiver is gone: nothing to do.)
            let _ = tx.send(loaded);
        });
        self.status = format!("Loading {name} …");
        self.loading = Some(PendingLoad { name: name.to_string(), cancel, rx, hub });
    }

    /// How many loads a newer one (or a closed window) stopped before they ended.
    pub fn stopped_loads(&self) -> u64 {
        self.stopped_loads.load(Ordering::Relaxed)
    }

    /// The name of the model loading in the background, if one is.
    pub fn loading(&self) -> Option<&str> {
        self.loading.as_ref().map(|p| p.name.as_str())
    }

    /// Adopts the background load once it has ended. True while one runs.
    pub fn poll_load(&mut self) -> bool {
        let Some(p) = &self.loading else { return false };
        let Some(loaded) = received(&p.rx, || Err(Error::Input("the loading thread ended without a model".into()))) else { return true };
        let Some(p) = self.loading.take() else { return false };
        let outcome = self.adopt(&p.name, loaded);
        if let Some(h) = p.hub {
            self.hub_loaded(h, outcome);
        }
        false
    }

    /// The model (or the error) a load ended with: swapped in, views and classification
    /// redone; or the error shown with the previous model kept.
    fn adopt(&mut self, name: &str, loaded: Result<Model>) -> Result<()> {
        match loaded {
            Ok(m) => {
                // An explanation by the previous model would not be shown: stopped. (An image
                // it classifies is classified again by this one when it ends; see `poll_work`.)
                if let Some(w) = self.work.as_ref().filter(|w| w.explains) {
                    w.cancel.cancel();
                }
                self.model = Arc::new(m);
                self.model_name = name.to_string();
                // A table of the previous model's answers is not continued by this one.
                if let Some(all) = self.images.as_mut().and_then(|i| i.all.as_mut()) {
                    all.stop("stopped: another model was loaded");
                }
                self.error = None;
                self.status = format!("Loaded {name} ({}, {} parameters).", self.model.info.family, self.model.info.params);
                self.layer = 0;
                self.evidence = None;
                self.hover = None;
                // Another model's views are not shown, nor is the one being computed waited
                // for (its thread ends by itself).
                self.insight = None;
                self.insight_error = None;
                self.insights.clear();
                self.insight_work = None;
                self.generation += 1;
                self.refresh_insight();
                // The image is classified again by this model: now, or, where one is being
                // classified, when that ends (on the model it started with: see `poll_work`).
                if let Some(c) = self.classified.as_ref().filter(|_| !self.classifying()) {
                    let (source, image) = (c.source.clone(), c.image.clone());
                    self.classify(source, image);
                }
                Ok(())
            }
            Err(e) => {
                self.error = Some(format!("Could not load {name}: {e}. The previous model ({}) stays loaded.", self.model_name));
                Err(e)
            }
        }
    }

    /// Opens a file the user gave (the path field, a dropped file): a model file loads in the
    /// background, anything else is classified as an image. Model files are `.safetensors`, and
    /// the other model formats a user may drop (PyTorch's `.bin`/`.pth`/`.pt`/`.ckpt`, GGUF,
    /// Keras `.h5`), whose load says what they are and where the safetensors is.
    pub fn open_path(&mut self, path: std::path::PathBuf) {
        if is_model_name(&path) {
            self.start_load(&path.display().to_string(), ModelSource::File(path));
        } else {
            self.open_image(&path);
        }
    }

    /// Opens what the path field names: a path ([`Self::open_paths`]), or a model on the hub
    /// named as the CLI's `--weights` takes one (`hf-hub:owner/name`, its address on
    /// huggingface.co), downloaded as the hub field downloads it.
    pub fn open_text(&mut self, text: &str) {
        let text = text.trim();
        if crate::hubname::names_hub_model(text) {
            self.hub_repo = text.to_string();
            self.start_download();
        } else {
            self.open_paths(vec![std::path::PathBuf::from(text)]);
        }
    }

    /// Opens what was dropped on the window at once, as the page does: one path as
    /// [`Self::open_path`] opens it; of several, the first image is classified and the first
    /// model file loaded, in that order, so the image is shown at once and then answered by the
    /// new model (or keeps the previous model's answer should the load fail). A folder stands
    /// for its images, as in `tokenmix classify` ([`preprocess::find_images`]). The app shows
    /// one image at a time: where several came, its name says which of how many it is, and the
    /// others are a step away ([`Self::step_images`]). Where neither an image nor a model is
    /// among them, the first path gets [`Self::open_path`]'s error.
    pub fn open_paths(&mut self, paths: Vec<std::path::PathBuf>) {
        if let [path] = &paths[..] {
            if !path.is_dir() {
                self.open_path(path.clone());
                return;
            }
        }
        let model = paths.iter().find(|p| is_model_name(p)).cloned();
        let mut images = Vec::new();
        for p in paths.iter().filter(|p| !is_model_name(p)) {
            if p.is_dir() {
                if let Err(e) = preprocess::find_images(p, &mut images, &mut Vec::new()) {
                    self.error = Some(e.to_string());
                    return;
                }
            } else if preprocess::is_image_name(p) {
                images.push(p.clone());
            }
        }
        if model.is_none() && images.is_empty() {
            match paths.iter().find(|p| p.is_dir()) {
                Some(dir) => self.error = Some(preprocess::no_images_in(dir).to_string()),
                None => {
                    if let Some(first) = paths.first() {
                        self.open_path(first.clone());
                    }
                }
            }
            return;
        }
        match images.len() {
            0 => {}
            1 => self.open_image(&images[0]),
            _ => {
                self.images = Some(Images { paths: images, index: 0, name: String::new(), unreadable: false, all: None });
                self.step_images(0);
            }
        }
        if let Some(m) = model {
            self.start_load(&m.display().to_string(), ModelSource::File(m));
        }
    }

    /// Shows the image `delta` steps from the one shown of those that came together, round
    /// from the last to the first (0: the one shown, again); nothing where one image came. An
    /// image that does not read takes its place as an error: no image and no answer are shown
    /// (the previous image's, under this one's position, would be taken for its), an image
    /// still being classified is let go, and the next step goes on past it.
    pub fn step_images(&mut self, delta: isize) {
        let Some(images) = &mut self.images else { return };
        let n = images.paths.len();
        images.index = (images.index as isize + delta).rem_euclid(n as isize) as usize;
        let path = images.paths[images.index].clone();
        images.name = images.name_of(images.index);
        let name = images.name.clone();
        self.open_image_as(&path, name);
    }

    /// Opens an image file (`preprocess::IMAGE_FORMATS`) and classifies it. An image larger than classification
    /// takes ([`preprocess::check_image_size`]) is refused from its header, before decoding
    /// ([`preprocess::load_image`]).
    pub fn open_image(&mut self, path: &Path) {
        self.open_image_as(path, path.display().to_string());
    }

    /// [`Self::open_image`], the image classified under `name`. The file is read on the work
    /// thread, as the image is classified: a large photo's decode (a tenth of a second and
    /// more) does not stall the window, and stepping on lets it go.
    fn open_image_as(&mut self, path: &Path, name: String) {
        let path = path.to_path_buf();
        self.submit(name, |serial, source| Request::Open { serial, source, path });
    }

    /// "Classify all": classifies every image that came together, in turn, on a thread of its
    /// own, into a table ([`ClassifyAll`]), as `tokenmix classify` does them. The image shown
    /// stays. An image from elsewhere ends it with the stepping; another model stops it.
    pub fn classify_all(&mut self) {
        let Some(images) = &mut self.images else { return };
        let (tx, rx) = std::sync::mpsc::channel();
        let cancel = Cancel::new();
        let on_thread = cancel.clone();
        let (model, paths, repaint) = (self.model.clone(), images.paths.clone(), self.repaint.clone());
        std::thread::spawn(move || {
            classify_files(&model, &paths, &on_thread, &tx);
            // A run stopped has nothing more to draw (its rows are no longer taken): no frame
            // for it, which came at any time after the stop.
            if let Some(ctx) = repaint.filter(|_| !on_thread.is_cancelled()) {
                ctx.request_repaint();
            }
        });
        let folder = images.paths[0].parent().unwrap_or(Path::new("."));
        let save_path = folder.join("tokenmix-classify.json").display().to_string();
        // A new run keeps the order the table was sorted in.
        let sort = images.all.as_ref().map_or((SortKey::Image, false), |a| a.sort);
        images.all =
            Some(ClassifyAll { rows: Vec::new(), stopped: None, running: Some((cancel, rx)), sort, order: Vec::new(), save_path, saved: None });
    }

    /// Stops "Classify all" (the rows done stay).
    pub fn stop_classify_all(&mut self) {
        if let Some(all) = self.images.as_mut().and_then(|i| i.all.as_mut()) {
            all.stop("stopped");
        }
    }

    /// Adopts the rows "Classify all" did meanwhile; true while it runs.
    pub fn poll_all(&mut self) -> bool {
        self.images.as_mut().and_then(|i| i.all.as_mut()).is_some_and(ClassifyAll::poll)
    }

    /// Whether "Classify all" runs.
    pub fn classifying_all(&self) -> bool {
        self.images.as_ref().and_then(|i| i.all.as_ref()).is_some_and(ClassifyAll::running)
    }

    /// Classifies a bundled sample by name.
    pub fn open_sample(&mut self, name: &str) {
        let Some((_, bytes)) = SAMPLES.iter().find(|(n, _)| *n == name) else {
            self.error = Some(format!("no sample `{name}`"));
            return;
        };
        match image::load_from_memory(bytes) {
            Ok(img) => self.classify(format!("sample: {name}"), img.to_rgb8()),
            Err(e) => self.error = Some(format!("sample {name}: {e}")),
        }
    }

    /// Classifies `image` (any size: timm's eval preprocessing) on the work thread; the result
    /// replaces [`Self::classified`] when it arrives, unless a newer image (or model) was asked
    /// for meanwhile. The previous result stays in view until then.
    pub fn classify(&mut self, source: String, image: RgbImage) {
        self.submit(source, |serial, source| Request::Classify { serial, source, image });
    }

    /// Asks the work thread for what `make` makes of the next serial number and `source`: an
    /// image to classify ([`Self::classify`]), or a file to read and classify.
    fn submit(&mut self, source: String, make: impl FnOnce(u64, String) -> Request) {
        // An image from elsewhere (a sample, a file, the camera) ends stepping through several.
        match &mut self.images {
            Some(i) if i.name != source => self.images = None,
            Some(i) => i.unreadable = false,
            None => {}
        }
        // What runs now (an older image, or the shown one's explanation) would not be shown:
        // stopped.
        if let Some(w) = &self.work {
            w.cancel.cancel();
        }
        self.serial += 1;
        self.request(make(self.serial, source));
    }

    /// Runs `r` now, or after the running request (replacing one that waited).
    fn request(&mut self, r: Request) {
        if self.work.is_some() {
            self.queued = Some(r);
        } else {
            self.start_work(r);
        }
    }

    fn start_work(&mut self, r: Request) {
        let (tx, rx) = std::sync::mpsc::channel();
        let model = self.model.clone();
        let (serial, explains) = match &r {
            Request::Classify { serial, .. } | Request::Open { serial, .. } | Request::Capture { serial, .. } => (*serial, false),
            Request::Explain { serial, .. } => (*serial, true),
        };
        let repaint = self.repaint.clone();
        let on_thread = model.clone();
        let cancel = Cancel::new();
        let stop = cancel.clone();
        std::thread::spawn(move || {
            // (A receiver gone with a closed window: nothing to do.)
            let _ = tx.send(r.run(&on_thread, &stop));
            if let Some(ctx) = repaint {
                ctx.request_repaint();
            }
        });
        self.work = Some(Running { serial, explains, model, rx, cancel });
    }

    /// Adopts the running request's result once it has ended and starts the one that waited.
    /// True while work runs.
    pub fn poll_work(&mut self) -> bool {
        let Some(w) = &self.work else { return false };
        let Some(done) = received(&w.rx, || Done::Classified(Err(Error::Input("the model's thread ended without a result".into())))) else {
            return true;
        };
        let Some(w) = self.work.take() else { return false };
        if matches!(done, Done::Classified(Err(Error::Cancelled)) | Done::Explained(Err(Error::Cancelled))) {
            self.cancelled += 1;
        }
        let current = Arc::ptr_eq(&w.model, &self.model);
        let shown = self.classified.as_ref().is_some_and(|c| c.serial == w.serial);
        match done {
            // A newer image, or this one under a newer model, is on its way: this one is
            // dropped.
            Done::Classified(_) if w.serial != self.serial => {}
            // The latest image, classified by a model since replaced: classified again by the
            // one in use (an image captured meanwhile included).
            Done::Classified(Ok(c)) if !current => self.classify(c.source, c.image),
            Done::Classified(Ok(c)) => {
                self.classified = Some(c);
                self.evidence = None;
                self.error = None;
                self.generation += 1;
            }
            Done::Classified(Err(e)) => {
                self.error = Some(format!("Classification failed: {e}"));
            }
            Done::Unreadable(..) if w.serial != self.serial => {}
            // One of several, stepped to, takes the place of the one shown: no image and no
            // answer (the previous image's, under this one's position, would be taken for its).
            // A file alone leaves the image shown before.
            Done::Unreadable(source, e) => {
                if let Some(i) = self.images.as_mut().filter(|i| i.name == source) {
                    i.unreadable = true;
                    self.classified = None;
                    self.evidence = None;
                    self.generation += 1;
                }
                self.error = Some(e.to_string());
            }
            // An explanation of what is no longer shown (another image, another model) is
            // dropped.
            Done::Explained(_) if !(shown && current) => {}
            // Stopped for a newer image that has not arrived: the evidence asked for is let go.
            Done::Explained(Err(Error::Cancelled)) => self.evidence = None,
            Done::Explained(Ok(ex)) => {
                if let Some(c) = &mut self.classified {
                    c.explained = Some(ex);
                }
                self.generation += 1;
            }
            Done::Explained(Err(e)) => {
                self.evidence = None;
                self.error = Some(format!("No explanation: {e}"));
            }
        }
        if let Some(r) = self.queued.take() {
            self.start_work(r);
        }
        self.work.is_some()
    }

    /// Whether the latest image asked for is still being classified (the shown predictions,
    /// if any, are of an earlier one).
    pub fn classifying(&self) -> bool {
        self.classified.as_ref().map(|c| c.serial) != Some(self.serial) && (self.work.is_some() || self.queued.is_some())
    }

    /// Whether anything runs in the background that will change what the window shows: a
    /// model loading, an image being classified or explained.
    pub fn busy(&self) -> bool {
        self.model_busy() || self.classifying_all()
    }

    /// [`Self::busy`] but for "Classify all": a model loading, an image being classified or
    /// explained, a layer's views being computed.
    fn model_busy(&self) -> bool {
        self.loading.is_some() || self.work.is_some() || self.queued.is_some() || self.insight_work.is_some()
    }

    /// Waits (without a window) until [`Self::busy`] is false, or `limit` has passed; what
    /// `view --screenshot` renders is then complete. True when it finished.
    pub fn finish(&mut self, limit: std::time::Duration) -> bool {
        let start = std::time::Instant::now();
        loop {
            self.poll_load();
            self.poll_work();
            self.poll_insight();
            self.poll_all();
            if !self.busy() {
                return true;
            }
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Shows layer `layer` of the current model's token mixing: at once if its views were
    /// computed before, else when they have been (on a thread of their own, after the one
    /// being computed: a slider dragged over many layers computes the first and the last).
    pub fn set_layer(&mut self, layer: usize) {
        self.layer = layer.min(self.model.mixing_layers().saturating_sub(1));
        self.hover = None;
        self.refresh_insight();
    }

    /// Shows [`Self::layer`]'s views if they are computed, else starts computing them unless
    /// a layer is being computed already ([`Self::poll_insight`] starts it when that ends).
    fn refresh_insight(&mut self) {
        if let Some(i) = self.insights.get(&self.layer) {
            if !self.insight.as_ref().is_some_and(|shown| Arc::ptr_eq(shown, i)) {
                self.insight = Some(i.clone());
                self.insight_error = None;
                self.generation += 1;
            }
            return;
        }
        if self.insight_work.is_some() {
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (model, layer, repaint) = (self.model.clone(), self.layer, self.repaint.clone());
        let on_thread = model.clone();
        std::thread::spawn(move || {
            // (A receiver gone with another model or a closed window: nothing to do.)
            let _ = tx.send(on_thread.insight(layer));
            if let Some(ctx) = repaint {
                ctx.request_repaint();
            }
        });
        self.insight_work = Some(InsightRunning { layer, model, rx });
    }

    /// Adopts a layer's views once they are computed, and starts on the slider's layer if it
    /// moved meanwhile. True while views are computed.
    pub fn poll_insight(&mut self) -> bool {
        let Some(w) = &self.insight_work else { return false };
        let Some(computed) = received(&w.rx, || Err(Error::Input("the views' thread ended without them".into()))) else { return true };
        let Some(w) = self.insight_work.take() else { return false };
        if Arc::ptr_eq(&w.model, &self.model) {
            match computed {
                Ok(i) => {
                    self.insights.insert(w.layer, Arc::new(i));
                }
                Err(e) if w.layer == self.layer => {
                    self.insight = None;
                    self.insight_error = Some(format!("No token-mixing view: {e}"));
                    self.generation += 1;
                    return false;
                }
                Err(_) => {}
            }
        }
        self.refresh_insight();
        self.insight_work.is_some()
    }

    /// Whether the slider's layer is still being computed: the views shown, if any, are of
    /// another layer. (A layer left behind may still be computed while the slider's, computed
    /// before, is shown.)
    pub fn computing_insight(&self) -> bool {
        self.insight_work.is_some() && !self.shows_current_layer()
    }

    /// Whether the views shown are of the slider's layer.
    fn shows_current_layer(&self) -> bool {
        self.insight.as_ref().is_some_and(|li| li.layer == self.layer)
    }

    /// The layers of the current model whose views have been computed, ascending.
    pub fn computed_layers(&self) -> Vec<usize> {
        let mut l: Vec<usize> = self.insights.keys().copied().collect();
        l.sort_unstable();
        l
    }

    /// The window's title: the model and, once an image is classified, its top class with its
    /// probability, so that the taskbar says what the window shows.
    pub fn title(&self) -> String {
        match self.classified.as_ref().and_then(|c| c.predictions.first()) {
            Some(p) => format!("tokenmix — {} {:.1} % · {}", p.label, 100.0 * p.probability, self.model_name),
            None => format!("tokenmix — {}", self.model_name),
        }
    }

    /// The predictions in `tokenmix classify --json`'s format.
    pub fn predictions_json(&self) -> serde_json::Value {
        match &self.classified {
            Some(c) => {
                // The file, as `classify --json` names it, without what the window adds.
                let image = self.images.as_ref().and_then(|i| i.file_of(&c.source)).unwrap_or_else(|| c.source.clone());
                serde_json::json!([{"image": image, "predictions": c.predictions}])
            }
            None => serde_json::json!([]),
        }
    }

    /// The evidence overlay of the selected class, if any.
    pub fn evidence_overlay(&self) -> Option<Overlay> {
        let (c, ex) = (self.evidence?, self.classified.as_ref()?.explained.as_ref()?);
        let map = ex.map(0, c);
        let mean = map.iter().sum::<f32>() / map.len().max(1) as f32;
        let values = map.iter().map(|v| if self.relative { v - mean } else { *v }).collect();
        let label = crate::labels::label(&self.model.info, c);
        Some(Overlay { label: format!("evidence for {label}"), grid: ex.grid, values, sequential: false })
    }

    /// Shows (or, selected again, hides) class `k`'s evidence. The image is explained on the
    /// work thread the first time; the overlay appears when that ends.
    pub fn select_evidence(&mut self, k: usize) {
        if self.evidence == Some(k) {
            self.evidence = None;
            return;
        }
        let Some(c) = &self.classified else { return };
        self.evidence = Some(k);
        if c.explained.is_none() && !self.explaining() {
            let r = Request::Explain { serial: c.serial, input: c.input.clone() };
            self.request(r);
        }
    }

    /// Whether the shown classification is being explained.
    pub fn explaining(&self) -> bool {
        let serial = self.classified.as_ref().map(|c| c.serial);
        let running = matches!(&self.work, Some(w) if w.explains && Some(w.serial) == serial);
        running || matches!(&self.queued, Some(Request::Explain { serial: s, .. }) if Some(*s) == serial)
    }

    /// Starts a hub download (or takes the cached file).
    pub fn start_download(&mut self) {
        match hub::Download::start(&self.hub_base, self.hub_repo.trim(), &self.hub_cache) {
            Ok(d) => {
                self.status = format!("Downloading {} …", d.url);
                self.progress_seen.clear();
                self.download = Some(d);
                self.download_since = self.model_changes;
            }
            Err(e) => self.error = Some(e.to_string()),
        }
    }

    /// Stops the running download (its thread ends at its next read and removes its partial
    /// file); the model stays as it is.
    pub fn cancel_download(&mut self) {
        if let Some(d) = self.download.take() {
            d.cancel();
            self.status = format!("Download of {} cancelled.", d.repo);
        }
    }

    /// Advances a running download; loads the model when it is done, unless the user chose
    /// another model meanwhile. Returns true while one runs.
    pub fn poll_download(&mut self) -> bool {
        let Some(d) = &self.download else { return false };
        match d.progress() {
            hub::Progress::Running { loaded, total } => {
                if let Some(t) = total.filter(|&t| t > 0) {
                    let f = loaded as f32 / t as f32;
                    if self.progress_seen.last() != Some(&f) {
                        self.progress_seen.push(f);
                    }
                }
                true
            }
            hub::Progress::Done { path, cached } => {
                let repo = d.repo.clone();
                self.download = None;
                if self.model_changes != self.download_since {
                    self.status =
                        format!("Downloaded {repo} into the cache; not loaded, as another model was asked for meanwhile (Download loads it).");
                    return false;
                }
                let name = path.display().to_string();
                self.start_load_for(&name, ModelSource::File(path.clone()), Some(HubFile { repo, path, cached }));
                false
            }
            hub::Progress::Failed(e) => {
                self.download = None;
                self.error = Some(format!("Download failed: {e}"));
                false
            }
        }
    }

    /// A downloaded (or cached) hub file's load ended.
    fn hub_loaded(&mut self, h: HubFile, outcome: Result<()>) {
        match outcome {
            Ok(()) => {
                self.model_name = h.repo;
                self.status = format!("Loaded {} from the hub{}.", self.model_name, if h.cached { " (cached)" } else { "" });
            }
            // A file that is not a model of these families is not kept, so that the next
            // Download fetches it again; one this device could not run (memory, limits) is a
            // good file and stays.
            Err(Error::Format(_) | Error::Tensor { .. } | Error::Config(_)) => {
                if std::fs::remove_file(&h.path).is_ok() {
                    if let Some(e) = &mut self.error {
                        e.push_str(&format!(" The {} file was removed from the cache.", if h.cached { "cached" } else { "downloaded" }));
                    }
                }
            }
            Err(_) => {}
        }
    }

    /// Classifies the image on the clipboard.
    pub fn paste(&mut self) {
        let got = arboard::Clipboard::new().and_then(|mut c| c.get_image());
        match got {
            Ok(img) => self.classify_pixels("pasted image", img.width, img.height, img.bytes.chunks_exact(4).map(|p| [p[0], p[1], p[2]])),
            Err(e) => self.error = Some(format!("No image to paste: {e}")),
        }
    }

    /// Classifies an image egui holds (a Ctrl+V `PasteImage`). egui keeps colours multiplied
    /// by alpha; the model sees them unmultiplied, as the CLI and the page see a file's
    /// pixels (alpha is left out everywhere).
    pub fn classify_colour_image(&mut self, source: &str, img: &ColorImage) {
        let [w, h] = img.size;
        self.classify_pixels(
            source,
            w,
            h,
            img.pixels.iter().map(|p| {
                let [r, g, b, _] = p.to_srgba_unmultiplied();
                [r, g, b]
            }),
        );
    }

    /// Classifies a `w` x `h` image given as its RGB pixels (a pasted one), checking its size
    /// before anything is copied.
    fn classify_pixels(&mut self, source: &str, w: usize, h: usize, rgb: impl Iterator<Item = [u8; 3]>) {
        if let Err(e) = preprocess::check_image_size(w, h) {
            self.error = Some(format!("{source}: {e}"));
            return;
        }
        match RgbImage::from_raw(w as u32, h as u32, rgb.flatten().collect()) {
            Some(i) => self.classify(source.into(), i),
            None => self.error = Some(format!("{source}: its pixels do not make a {w}x{h} image")),
        }
    }

    /// Takes one still from the camera and classifies it, both on the work thread (a camera
    /// takes a second or more to open and expose).
    pub fn capture(&mut self) {
        match self.camera.grab() {
            // An image from elsewhere, as a file or a sample is: it ends stepping through
            // several, and what runs for an older image is stopped.
            Ok(grab) => self.submit(format!("camera: {}", self.camera.name()), |serial, source| Request::Capture { serial, source, grab }),
            Err(e) => self.error = Some(e.to_string()),
        }
    }

    /// While the camera runs: its newest frame, drawn live (at most 15 frames a second), or
    /// why it stopped. A stopped camera's last frame is let go, and its frame numbers (a
    /// restarted stream numbers its frames afresh).
    fn camera_preview(&mut self, ui: &mut egui::Ui) {
        if !self.camera.running() {
            self.preview = None;
            self.preview_texture = None;
            self.live_frame = 0;
            return;
        }
        match self.camera.preview_since(self.preview.as_ref().map_or(0, |p| p.0)) {
            Ok(Some(frame)) => {
                self.preview = Some(frame);
                self.preview_frames += 1;
            }
            Ok(None) => {}
            Err(e) => {
                self.error = Some(e.to_string());
                self.camera.stop();
                return;
            }
        }
        let name = self.camera.name();
        ui.checkbox(&mut self.live, "Classify live")
            .on_hover_text("Classify the newest frame whenever the model is free, instead of one frame per Capture");
        // Live: the newest frame not handed over yet, when the work thread is idle (so a live
        // frame never stops a pass, nor waits in the queue for one).
        // ("Classify all" is not waited for: a live frame, from elsewhere, ends it.)
        if let Some((n, frame)) = self.preview.as_ref().filter(|(n, _)| self.live && *n > self.live_frame && !self.model_busy()) {
            let (n, frame) = (*n, frame.clone());
            self.live_frame = n;
            self.classify(format!("camera (live): {name}"), frame);
        }
        match &self.preview {
            Some((n, frame)) => {
                let (w, h) = (frame.width() as usize, frame.height() as usize);
                let tex = match &mut self.preview_texture {
                    Some((shown, t)) if *shown == *n => t.clone(),
                    Some((shown, t)) => {
                        t.set(ColorImage::from_rgb([w, h], frame.as_raw()), TextureOptions::LINEAR);
                        *shown = *n;
                        t.clone()
                    }
                    None => {
                        let t = ui.ctx().load_texture("camera preview", ColorImage::from_rgb([w, h], frame.as_raw()), TextureOptions::LINEAR);
                        self.preview_texture = Some((*n, t.clone()));
                        t
                    }
                };
                let width = 240.0;
                ui.image((tex.id(), Vec2::new(width, width * h as f32 / w.max(1) as f32)));
                ui.label(if self.live {
                    format!("Live: {name}. Each frame the model is free for is classified.")
                } else {
                    format!("Live: {name}. Capture classifies the newest frame.")
                });
            }
            None => {
                ui.label(format!("Starting {name} …"));
            }
        }
        // The next frame: a delay, not an immediate repaint, so a waiting window stays idle.
        ui.ctx().request_repaint_after(std::time::Duration::from_millis(66));
    }

    /// Draws one frame and applies what the user did in it.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        if self.repaint.is_none() {
            self.repaint = Some(ui.ctx().clone());
        }
        self.poll_download();
        self.poll_load();
        self.poll_work();
        self.poll_insight();
        self.poll_all();
        let dropped: Vec<std::path::PathBuf> =
            ui.ctx().input(|i| i.raw.dropped_files.iter().map(|f| f.path().to_path_buf()).filter(|p| !p.as_os_str().is_empty()).collect());
        if !dropped.is_empty() {
            self.open_paths(dropped);
        }
        // Ctrl/Cmd+V: egui-winit (with its arboard clipboard, Cargo.toml) turns it into
        // `PasteImage` when the clipboard holds an image and no text, which is classified; into
        // `Paste` when it holds text, which goes to a text field that has the keyboard, and
        // elsewhere makes the app look for an image on the clipboard (and say there is none).
        let (image, text) = ui.ctx().input(|i| {
            let image = i.events.iter().rev().find_map(|e| if let egui::Event::PasteImage(img) = e { Some(img.clone()) } else { None });
            (image, i.events.iter().any(|e| matches!(e, egui::Event::Paste(_))))
        });
        // The arrow keys step through several images, unless a text field has the keyboard.
        if self.images.is_some() && !ui.ctx().egui_wants_keyboard_input() {
            let step = ui.ctx().input(|i| i.key_pressed(egui::Key::ArrowRight) as isize - i.key_pressed(egui::Key::ArrowLeft) as isize);
            if step != 0 {
                self.step_images(step);
            }
        }
        if let Some(img) = image {
            self.classify_colour_image("pasted image", &img);
        } else if text && !ui.ctx().egui_wants_keyboard_input() {
            self.paste();
        }
        egui::Panel::top("header").show(ui, |ui| {
            ui.horizontal(|ui| {
                ui.heading("tokenmix");
                ui.label(format!("· {}", self.backend_line));
            });
        });
        egui::Panel::left("image").resizable(false).exact_size(330.0).show(ui, |ui| self.image_panel(ui));
        egui::Panel::right("prediction").resizable(false).exact_size(330.0).show(ui, |ui| self.prediction_panel(ui));
        egui::CentralPanel::default().show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| self.insight_panel(ui));
        });
        if self.download.is_some() || self.busy() {
            // Progress, loads and work are polled; a frame every 50 ms is enough for them (and
            // finished work asks for one at once).
            ui.ctx().request_repaint_after(std::time::Duration::from_millis(50));
        }
        // Views of earlier generations that this frame did not draw again (another model's
        // 512 unit tiles, say) are let go.
        self.textures.0.retain(|_, (g, _)| *g == self.generation);
    }

    fn image_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("Image");
        ui.label("Drop an image or a .safetensors model on the window, or open a path:");
        ui.horizontal(|ui| {
            let label = ui.label("Path");
            ui.add(
                egui::TextEdit::singleline(&mut self.path_field).desired_width(180.0).hint_text("an image, a folder, a model or hf-hub:owner/name"),
            )
            .labelled_by(label.id);
            if ui.button("Open").clicked() {
                self.open_text(&self.path_field.clone());
            }
        });
        ui.label("Samples (Fashion-MNIST test set):");
        ui.horizontal_wrapped(|ui| {
            for (name, _) in SAMPLES {
                if ui.button(*name).clicked() {
                    self.open_sample(name);
                }
            }
        });
        ui.horizontal(|ui| {
            if ui.button("Paste image").clicked() {
                self.paste();
            }
            if !self.camera.running() {
                if ui.button("Start camera").clicked() {
                    if let Err(e) = self.camera.start() {
                        self.error = Some(e.to_string());
                    }
                }
            } else {
                if ui.button("Capture").clicked() {
                    self.capture();
                }
                if ui.button("Stop camera").clicked() {
                    self.camera.stop();
                }
            }
        });
        self.camera_preview(ui);
        ui.separator();
        let Some(c) = &self.classified else {
            match &self.images {
                Some(i) if i.unreadable => {
                    ui.colored_label(ERROR_TEXT, format!("{} does not read.", i.name));
                }
                _ => {
                    ui.label(if self.classifying() { "Classifying …" } else { "No image yet." });
                }
            }
            let step = self.images_controls(ui);
            if step != 0 {
                self.step_images(step);
            }
            return;
        };
        let shape @ [_, h, w] = self.model.info.arch.input_shape();
        let pp = &self.model.info.preprocess;
        let eye = self.textures.get(ui.ctx(), self.generation, "eye", || ColorImage::from_rgb([w, h], &pp.denormalise_rgb(&c.input, shape)));
        let source = c.source.clone();
        let side = 300.0;
        let size = Vec2::new(side, side * h as f32 / w as f32);
        let response = ui.add(egui::Image::new((eye.id(), size)).sense(egui::Sense::hover()));
        ui.label(format!("Model's-eye view · {source}"));
        let step = self.images_controls(ui);
        // The token under the pointer mixes from these tokens (gMLP/ResMLP matrices).
        self.hover = None;
        let current = self.insight.as_ref().filter(|li| li.layer == self.layer);
        if let (Some(pos), Some(li)) = (response.hover_pos(), current) {
            if li.kind == "gmlp" || li.kind == "resmlp" {
                let (gh, gw) = li.grid;
                let (u, v) = ((pos - response.rect.min) / response.rect.size()).into();
                let t = ((v * gh as f32) as usize).min(gh - 1) * gw + ((u * gw as f32) as usize).min(gw - 1);
                let row = li.data[t * li.cols..(t + 1) * li.cols].to_vec();
                self.hover =
                    Some(Overlay { label: format!("token ({}, {}) mixes from", t / gw, t % gw), grid: li.grid, values: row, sequential: false });
            }
        }
        if let Some(o) = self.hover.clone().or_else(|| self.evidence_overlay()) {
            paint_overlay(ui.painter(), response.rect, &o);
            ui.label(format!("Overlay: {}", o.label));
        }
        if step != 0 {
            self.step_images(step);
        }
    }

    /// Under the image, while it is one of several that came together: ‹ k / n › and
    /// "Classify all", whose table follows once asked for. Returns the step asked for.
    fn images_controls(&mut self, ui: &mut egui::Ui) -> isize {
        let Some(images) = &mut self.images else { return 0 };
        let (mut step, mut all, mut stop, mut save) = (0, false, false, false);
        ui.horizontal(|ui| {
            if ui.button("‹").on_hover_text("Previous image (left arrow key)").clicked() {
                step = -1;
            }
            ui.label(format!("{} / {}", images.index + 1, images.paths.len()));
            if ui.button("›").on_hover_text("Next image (right arrow key)").clicked() {
                step = 1;
            }
            match images.all.as_ref().is_some_and(ClassifyAll::running) {
                false => all = ui.button("Classify all").on_hover_text("Classify every image into a table, as `tokenmix classify` does").clicked(),
                true => stop = ui.button("Stop").clicked(),
            }
        });
        if let Some(t) = &mut images.all {
            let n = images.paths.len();
            ui.label(format!("{} / {n} classified{}", t.rows.len(), t.stopped.map_or(String::new(), |w| format!(" ({w})"))));
            // A column's name sorts the table by it (again: the other way round), said in words:
            // the window's font (egui's Ubuntu Light) has no arrows.
            ui.horizontal_wrapped(|ui| {
                ui.label("Sort:");
                for (key, name) in [(SortKey::Image, "image"), (SortKey::Class, "class"), (SortKey::Probability, "probability")] {
                    if ui.selectable_label(t.sort.0 == key, name).clicked() {
                        t.sort_by(key);
                    }
                }
                ui.label(match t.sort {
                    (SortKey::Image, false) => "folder order",
                    (SortKey::Image, true) => "reversed",
                    (SortKey::Class, false) => "A to Z",
                    (SortKey::Class, true) => "Z to A",
                    (SortKey::Probability, false) => "low to high",
                    (SortKey::Probability, true) => "high to low",
                });
            });
            // Only the rows in view are laid out: a folder of thousands costs a frame no more.
            let row_height = ui.spacing().interact_size.y;
            let (order, rows) = t.ordered_rows();
            egui::ScrollArea::vertical().max_height(150.0).id_salt("classify-all").show_rows(ui, row_height, rows.len(), |ui, in_view| {
                egui::Grid::new("classify-all-table").striped(true).num_columns(3).min_col_width(60.0).show(ui, |ui| {
                    for &k in &order[in_view] {
                        let row = &rows[k];
                        let image = row["image"].as_str().unwrap_or_default();
                        // A row's image is a button: it shows that image, as stepping to it does.
                        let name = Path::new(image).file_name().map_or(image.into(), |f| f.to_string_lossy());
                        if ui.selectable_label(k == images.index, name).on_hover_text(format!("Show {image}")).clicked() {
                            step = k as isize - images.index as isize;
                        }
                        match (&row["predictions"][0], row["error"].as_str()) {
                            (_, Some(e)) => {
                                ui.colored_label(ERROR_TEXT, "does not read").on_hover_text(e);
                                ui.label("–");
                            }
                            (top, None) => {
                                ui.label(top["label"].as_str().unwrap_or_default());
                                ui.label(format!("{:.1} %", 100.0 * top["probability"].as_f64().unwrap_or(0.0)));
                            }
                        }
                        ui.end_row();
                    }
                });
            });
            if !t.running() && !t.rows.is_empty() {
                ui.horizontal(|ui| {
                    let label = ui.label("Save to");
                    ui.add(egui::TextEdit::singleline(&mut t.save_path).desired_width(170.0)).labelled_by(label.id);
                    save = ui.button("Save as JSON").clicked();
                });
                match &t.saved {
                    Some(Ok(m)) => ui.label(m),
                    Some(Err(e)) => ui.colored_label(ERROR_TEXT, e),
                    None => ui.label(""),
                };
            }
            if save {
                t.save();
            }
        }
        if all {
            self.classify_all();
        } else if stop {
            self.stop_classify_all();
        }
        step
    }

    fn prediction_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("Prediction");
        if let Some(e) = &self.error {
            ui.colored_label(ERROR_TEXT, e);
        }
        let mut clicked = None;
        // While a newer image (or the image under a newer model) is classified, the shown
        // predictions are greyed and cannot be explained.
        let stale = self.classifying();
        if stale {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("Classifying the image …");
            });
        }
        if let Some(c) = &self.classified {
            for p in &c.predictions {
                let selected = self.evidence == Some(p.index);
                let text = format!("{}  {:.1} %", p.label, 100.0 * p.probability);
                let r = ui.add_enabled(!stale, egui::Button::selectable(selected, text).min_size(Vec2::new(300.0, 0.0)));
                ui.add(egui::ProgressBar::new(p.probability).desired_width(300.0).desired_height(6.0));
                if r.clicked() {
                    clicked = Some(p.index);
                }
            }
        }
        if let Some(k) = clicked {
            self.select_evidence(k);
        }
        if let Some(c) = &self.classified {
            match (&c.explained, self.evidence) {
                (Some(ex), Some(k)) => {
                    let sum: f32 = ex.map(0, k).iter().sum();
                    ui.label(format!(
                        "Evidence: logit {:.3} = {sum:.3} from the {}×{} tokens + {:.3} bias.{}",
                        ex.output.logits[k],
                        ex.grid.0,
                        ex.grid.1,
                        ex.bias[k],
                        if ex.approximate { " Approximate per token (PoolFormer normalises after pooling; exact in sum)." } else { "" }
                    ));
                }
                (None, Some(_)) if self.explaining() => {
                    ui.horizontal(|ui| {
                        ui.spinner();
                        ui.label("Explaining the prediction token by token …");
                    });
                }
                _ => {
                    ui.label("Click a class to lay its per-token evidence over the image.");
                }
            }
            ui.checkbox(&mut self.relative, "Evidence relative to the mean token");
            let [p, f, r] = c.times;
            ui.label(format!("Preprocess {p:.2} ms · forward {f:.2} ms · read-back {r:.2} ms"));
        }
        ui.separator();
        ui.heading("Models");
        let mut pick = None;
        egui::ComboBox::from_label("Model").selected_text(self.model_name.clone()).width(260.0).show_ui(ui, |ui| {
            for (i, (name, _)) in SHIPPED.iter().enumerate() {
                if ui.selectable_label(self.model_name == *name, *name).clicked() {
                    pick = Some(i);
                }
            }
        });
        if let Some(i) = pick {
            let (name, bytes) = SHIPPED[i];
            self.start_load(name, ModelSource::Bytes(bytes));
        }
        let i = &self.model.info;
        ui.label(format!("{} · {:.2} M parameters · {} classes · {}", i.family, i.params as f64 / 1e6, i.arch.num_classes(), self.model.backend()));
        let label = ui.label("Hub repository (timm checkpoints):");
        ui.add(egui::TextEdit::singleline(&mut self.hub_repo).desired_width(300.0))
            .labelled_by(label.id)
            .on_hover_text("owner/name, hf-hub:owner/name, or the model's address on huggingface.co");
        ui.horizontal(|ui| {
            let busy = self.download.is_some();
            if ui.add_enabled(!busy, egui::Button::new("Download")).clicked() {
                self.start_download();
            }
            if busy && ui.button("Cancel download").clicked() {
                self.cancel_download();
            }
            ui.label(self.hub_base.clone());
        });
        if let Some(d) = &self.download {
            if let hub::Progress::Running { loaded, total } = d.progress() {
                let frac = total.map_or(0.0, |t| loaded as f32 / t.max(1) as f32);
                let text = format!("{:.1} / {} MB", loaded as f64 / 1e6, total.map_or("?".into(), |t| format!("{:.1}", t as f64 / 1e6)));
                ui.add(egui::ProgressBar::new(frac).text(text).desired_width(300.0));
            }
        }
        ui.horizontal(|ui| {
            if self.loading.is_some() {
                ui.spinner();
            }
            // Wrapped: a long status (a model opened by its path) would widen the panel over
            // the window's middle.
            ui.add(egui::Label::new(self.status.clone()).wrap());
        });
    }

    fn insight_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("What the token mixers learned");
        let layers = self.model.mixing_layers();
        if layers > 1 {
            let mut l = self.layer;
            ui.add(egui::Slider::new(&mut l, 0..=layers - 1).text("Layer"));
            if l != self.layer {
                self.set_layer(l);
            }
        }
        if self.computing_insight() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(format!("Computing layer {}'s views …", self.layer));
            });
        }
        let Some(li) = self.insight.clone() else {
            if let Some(e) = &self.insight_error {
                ui.colored_label(ERROR_TEXT, e);
            }
            return;
        };
        // Another layer's views, while the slider's is computed: dimmed.
        if li.layer != self.layer {
            ui.disable();
        }
        let (textures, generation) = (&mut self.textures, self.generation);
        ui.label(li.note);
        if let (Some(f), Some(i)) = (li.figures, li.init) {
            egui::Grid::new("figures").striped(true).show(ui, |ui| {
                ui.label(format!("layer {}", li.layer));
                ui.label("learned");
                ui.label("timm init");
                ui.end_row();
                for (name, a, b) in [
                    ("Locality (patches)", f.locality, i.locality),
                    ("Shift invariance", f.shift_invariance, i.shift_invariance),
                    ("Low-frequency share", f.low_frequency, i.low_frequency),
                ] {
                    ui.label(name);
                    ui.label(format!("{a:.3}"));
                    ui.label(format!("{b:.3}"));
                    ui.end_row();
                }
            });
            ui.small(format!("Measured on {}.", li.figures_on));
        }
        let (gh, gw) = li.grid;
        match li.kind {
            "mixer" => {
                ui.label(format!(
                    "{} token-MLP units over the {gh}×{gw} grid, sorted by spatial frequency; {} opposite-sign pairs.",
                    li.rows, li.pairs
                ));
                // Tiles shrink with the unit count (36 px for 48 units, ~27 px for 128) so that the
                // grid stays about 320 px tall and the offset kernel below it stays in view.
                let gap = ui.spacing().item_spacing.x;
                let side = ((ui.available_width() * 320.0 / li.rows.max(1) as f32).sqrt() - gap).clamp(16.0, 36.0);
                ui.horizontal_wrapped(|ui| {
                    for g in &li.groups {
                        for &u in g {
                            let row = &li.data[u * li.cols..(u + 1) * li.cols];
                            let t = textures.get(ui.ctx(), generation, &format!("unit{u}"), || heat(row, gh, gw, false));
                            ui.add(egui::Image::new((t.id(), Vec2::new(side, side * gh as f32 / gw as f32))));
                        }
                        if g.len() == 2 {
                            ui.separator();
                        }
                    }
                });
            }
            "gmlp" | "resmlp" => {
                ui.label(format!("Tokens × tokens map ({0}×{0}); hover the image to see one token's row over it.", li.cols));
                let n = li.cols;
                // Clipped at the 99th percentile of |w|, as the page and the CLI draw it.
                let t = textures.get(ui.ctx(), generation, "matrix", || heat_scaled(&li.data, n, n, false, colour::clip99(&li.data)));
                ui.add(egui::Image::new((t.id(), Vec2::new(260.0, 260.0))));
            }
            _ => {
                let t = textures.get(ui.ctx(), generation, "pool", || heat(&li.data, 3, 3, false));
                ui.add(egui::Image::new((t.id(), Vec2::new(120.0, 120.0))));
                if let Some(c) = &self.classified {
                    ui.label("Activation energy of this image, per stage:");
                    ui.horizontal(|ui| {
                        for (i, ((h, w), e)) in c.stage_energy.iter().enumerate() {
                            let t = textures.get(ui.ctx(), generation, &format!("energy{i}"), || heat(e, *h, *w, true));
                            ui.add(egui::Image::new((t.id(), Vec2::new(90.0, 90.0 * *h as f32 / *w as f32))));
                        }
                    });
                }
            }
        }
        if let Some(k) = &li.offset_kernel {
            ui.label("Mean weight by relative offset (centre: the token itself):");
            let t = textures.get(ui.ctx(), generation, "offset", || heat(&k.values, k.h, k.w, false));
            ui.add(egui::Image::new((t.id(), Vec2::new(160.0, 160.0 * k.h as f32 / k.w as f32))));
        }
    }
}

/// A closed window stops the work it leaves running (its thread ends at the pass's next check).
impl Drop for Viewer {
    fn drop(&mut self) {
        if let Some(w) = &self.work {
            w.cancel.cancel();
        }
        if let Some(l) = &self.loading {
            l.cancel.cancel();
        }
    }
}

/// A heatmap image of `values` (h x w): diverging around zero, or sequential from zero.
fn heat(values: &[f32], h: usize, w: usize, sequential: bool) -> ColorImage {
    heat_scaled(values, h, w, sequential, colour::scale(values))
}

/// [`heat`] saturating at `s` rather than at the largest |v|.
fn heat_scaled(values: &[f32], h: usize, w: usize, sequential: bool, s: f32) -> ColorImage {
    let rgb: Vec<u8> = values.iter().flat_map(|&v| if sequential { colour::sequential(v, s) } else { colour::diverging(v, s) }).collect();
    ColorImage::from_rgb([w, h], &rgb)
}

fn paint_overlay(painter: &egui::Painter, rect: egui::Rect, o: &Overlay) {
    let (gh, gw) = o.grid;
    let s = colour::scale(&o.values);
    let (cw, ch) = (rect.width() / gw as f32, rect.height() / gh as f32);
    for (t, &v) in o.values.iter().enumerate().take(gh * gw) {
        let [r, g, b] = if o.sequential { colour::sequential(v, s) } else { colour::diverging(v, s) };
        let min = rect.min + Vec2::new((t % gw) as f32 * cw, (t / gw) as f32 * ch);
        painter.rect_filled(egui::Rect::from_min_size(min, Vec2::new(cw, ch)), 0.0, Color32::from_rgba_unmultiplied(r, g, b, 158));
    }
}

/// Renders the app's first complete frame for `image` offscreen (`tokenmix view
/// --screenshot`): the window's content at `size` logical pixels, on the inference GPU where
/// the executor is the GPU, else on a device of the first adapter.
pub fn screenshot(viewer: &mut Viewer, size: [u32; 2]) -> Result<image::RgbaImage> {
    if !viewer.finish(std::time::Duration::from_secs(600)) {
        return Err(Error::Input("the model was still working after 10 minutes".into()));
    }
    let gpu = match viewer.device.gpu() {
        Some(g) => g.clone(),
        None => {
            Arc::new(pollster::block_on(crate::Gpu::new()).map_err(|e| Error::Input(format!("rendering a screenshot needs a wgpu adapter: {e}")))?)
        }
    };
    let mut offscreen = render::Offscreen::new(gpu);
    let ctx = egui::Context::default();
    let input = || egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(egui::Pos2::ZERO, Vec2::new(size[0] as f32, size[1] as f32))),
        ..Default::default()
    };
    // egui lays out in the first passes (sizes of panels and text); the third is complete.
    let mut last = None;
    for _ in 0..3 {
        let out = ctx.run_ui(input(), |ui| viewer.ui(ui));
        if let Some(prev) = last.replace(out) {
            offscreen.render(&ctx, prev, size)?;
        }
    }
    let out = last.ok_or_else(|| Error::Input("no frame".into()))?;
    offscreen.render(&ctx, out, size)
}

/// Opens the app's window (eframe, wgpu renderer). The window's wgpu instance — and, where the
/// executor is the GPU, its device — is the inference one.
pub fn run_window(viewer: Viewer) -> Result<()> {
    let mut options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default().with_inner_size([1200.0, 820.0]).with_title("tokenmix"),
        renderer: eframe::Renderer::Wgpu,
        ..Default::default()
    };
    if let Some(g) = viewer.device.gpu() {
        options.wgpu_options.wgpu_setup = egui_wgpu::WgpuSetup::Existing(egui_wgpu::WgpuSetupExisting {
            instance: g.instance.clone(),
            adapter: g.adapter.clone(),
            device: g.device.clone(),
            queue: g.queue.clone(),
        });
    }
    struct App {
        viewer: Viewer,
        title: String,
    }
    impl eframe::App for App {
        fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
            self.viewer.ui(ui);
            let title = self.viewer.title();
            if title != self.title {
                ui.ctx().send_viewport_cmd(egui::ViewportCommand::Title(title.clone()));
                self.title = title;
            }
        }
    }
    let app = App { viewer, title: String::new() };
    eframe::run_native("tokenmix", options, Box::new(move |_cc| Ok(Box::new(app)))).map_err(|e| Error::Input(window_error(&e.to_string())))
}

/// What a failure to open the window says. winit's own words on Linux end in advice for whoever
/// builds it ("enable the `winit/wayland` feature"); the user is told instead what the window
/// needs: an X11 display, which a Wayland desktop gives through XWayland.
fn window_error(winit: &str) -> String {
    let offscreen = "`tokenmix view --image IMG --screenshot OUT.png` renders the window without a display";
    let unset = |k: &str| std::env::var_os(k).is_none_or(|v| v.is_empty());
    if cfg!(all(unix, not(target_vendor = "apple"))) && unset("DISPLAY") {
        if unset("WAYLAND_DISPLAY") && unset("WAYLAND_SOCKET") {
            format!("could not open a window: no display (DISPLAY is not set); {offscreen}")
        } else {
            format!(
                "could not open a window: it is an X11 window and DISPLAY is not set. On a Wayland desktop, XWayland gives X11 \
                 windows their display (GNOME and KDE start it themselves; under sway, `xwayland enable`); {offscreen}"
            )
        }
    } else {
        format!("could not open a window: {winit} ({offscreen})")
    }
}

/// The colour of an error's text in the window.
const ERROR_TEXT: Color32 = Color32::from_rgb(178, 24, 43);

/// Whether `path` names a model file (see [`Viewer::open_path`]); as an image such a file got
/// "The file extension `.pth` was not recognized as an image format".
fn is_model_name(path: &Path) -> bool {
    const MODEL_FILES: [&str; 7] = ["safetensors", "bin", "pth", "pt", "ckpt", "gguf", "h5"];
    path.extension().is_some_and(|e| MODEL_FILES.iter().any(|m| e.eq_ignore_ascii_case(m)))
}
