//! Command-line front end. Every failure prints one line, `error: …`, and exits non-zero.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use tokenmix::exec::{self, BackendChoice, Selected};
use tokenmix::gpu::{GemmVariant, Precision, Resample, RowKernel};
use tokenmix::ops::{rel_diff, ActTexture, Gemm, Matrix, Op, Operand};
use tokenmix::{labels, preprocess, Cancel, Device, Error, Gpu, Model, Result};

#[derive(Parser)]
#[command(name = "tokenmix", version, about = "MLP-Mixer and friends: every layer a WGSL compute shader on the GPU, or SIMD kernels on the CPU")]
struct Cli {
    /// Executor: auto (the GPU unless it is missing or a software rasteriser, then the CPU),
    /// gpu (WGSL on wgpu) or cpu (SIMD kernels). Default: TOKENMIX_BACKEND, else auto.
    #[arg(long, global = true)]
    backend: Option<String>,
    /// Storage on the GPU: f32, or f16 for GEMM weights and MLP hidden activations (half their
    /// memory and bandwidth; sums stay f32; where the adapter has shader-f16, else f32 with a
    /// note). Default: TOKENMIX_PRECISION, else f32.
    #[arg(long, global = true)]
    precision: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Raw logits for preprocessed inputs: X.npy float32/float64 [N,C,H,W] -> Y.npy float32 [N,classes]
    Logits {
        /// Model file, or hf-hub:owner/name (a timm model on the Hugging Face hub, downloaded once
        /// into a cache); the embedded default model when omitted
        #[arg(long)]
        weights: Option<PathBuf>,
        #[arg(long)]
        input: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
    /// Classify images with timm's eval preprocessing
    Classify {
        /// Model file, or hf-hub:owner/name (a timm model on the Hugging Face hub, downloaded once
        /// into a cache); the embedded default model when omitted
        #[arg(long)]
        weights: Option<PathBuf>,
        /// Image files (PNG, JPEG, WebP, GIF, BMP, TIFF), or folders: a folder stands for the image
        /// files in it and in its subfolders, in name order; `-` is an image on standard input
        #[arg(required = true)]
        images: Vec<PathBuf>,
        /// How many classes, the likeliest first (at least 1)
        #[arg(long, default_value_t = 5, value_parser = at_least_one)]
        top_k: usize,
        /// Print a JSON array, one object per image
        #[arg(long)]
        json: bool,
    },
    /// Inferred architecture, timm preset, parameters and GMACs
    Info {
        /// Model file, or hf-hub:owner/name (a timm model on the Hugging Face hub, downloaded once
        /// into a cache); the embedded default model when omitted
        #[arg(long)]
        weights: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Top-1 accuracy on the Fashion-MNIST test set (IDX files, gzip or raw), or on a folder of
    /// class folders of images (each named as a label of the model, or by its class index)
    Eval {
        /// Model file, or hf-hub:owner/name (a timm model on the Hugging Face hub, downloaded once
        /// into a cache); the embedded default model when omitted
        #[arg(long)]
        weights: Option<PathBuf>,
        /// Folder holding t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz]; or one
        /// folder per class (DATA/Trouser/*.png, DATA/1/*.jpg, …: torchvision's ImageFolder)
        #[arg(long, default_value = "/usr/share/datasets/fashion-mnist")]
        data: PathBuf,
        #[arg(long, default_value_t = 64)]
        batch: usize,
        /// Print one JSON line: {"top1", "correct", "total", "images_per_s"}, and for class
        /// folders "classes": [{"index", "label", "correct", "total", "top1"}]
        #[arg(long)]
        json: bool,
    },
    /// What the token mixers learned: per layer the views' data and structure figures beside
    /// timm's initialisation (text, --json, or --png DIR with one image per view)
    Insight {
        /// Model file, or hf-hub:owner/name (a timm model on the Hugging Face hub, downloaded once
        /// into a cache); the embedded default model when omitted
        #[arg(long)]
        weights: Option<PathBuf>,
        /// One layer (default: all)
        #[arg(long)]
        layer: Option<usize>,
        #[arg(long)]
        json: bool,
        /// Write one PNG per view into this folder
        #[arg(long)]
        png: Option<PathBuf>,
        /// Draw overlays over this image (as the model sees it; `-`: standard input); PoolFormer:
        /// its per-stage energy
        #[arg(long)]
        image: Option<PathBuf>,
    },
    /// Why an image got its label: each top class's logit split into one contribution per token
    Explain {
        /// Model file, or hf-hub:owner/name (a timm model on the Hugging Face hub, downloaded once
        /// into a cache); the embedded default model when omitted
        #[arg(long)]
        weights: Option<PathBuf>,
        /// Image files, folders or `-` (as in classify)
        #[arg(required_unless_present = "input")]
        images: Vec<PathBuf>,
        /// How many classes, the likeliest first (at least 1)
        #[arg(long, default_value_t = 5, value_parser = at_least_one)]
        top_k: usize,
        /// Print a JSON array, one object per image
        #[arg(long)]
        json: bool,
        /// Write each image's evidence overlays (model's-eye view) into this folder
        #[arg(long)]
        png: Option<PathBuf>,
        /// PNGs show each token relative to the mean token (the exact split stays in --json)
        #[arg(long, requires = "png")]
        relative: bool,
        /// Raw mode: preprocessed X.npy float32/float64 [N,C,H,W] ...
        #[arg(long, requires = "out", conflicts_with = "images")]
        input: Option<PathBuf>,
        /// ... to Y.npy float32 [N,classes,gh,gw], Y.sum((2,3)) + bias == logits
        #[arg(long, requires = "input")]
        out: Option<PathBuf>,
        /// Raw mode: also write the bias [classes] here
        #[arg(long, requires = "input")]
        bias: Option<PathBuf>,
    },
    /// The desktop app: the page's views in a window; or, with --screenshot, its first frame
    /// rendered offscreen to a PNG (no display needed). Needs a build with `--features desktop`.
    View {
        /// Model file, or hf-hub:owner/name (a timm model on the Hugging Face hub, downloaded once
        /// into a cache); the embedded default model when omitted
        #[arg(long)]
        weights: Option<PathBuf>,
        /// An image to classify at start (a folder: its images, the first shown)
        image: Option<PathBuf>,
        /// The same, as an option (for --screenshot)
        #[arg(long = "image", conflicts_with = "image")]
        image_opt: Option<PathBuf>,
        /// Render the first complete frame to this PNG and exit
        #[arg(long)]
        screenshot: Option<PathBuf>,
        /// With --screenshot: print the predictions shown, in `classify --json`'s format
        #[arg(long, requires = "screenshot")]
        json: bool,
        /// With --screenshot: the frame size in pixels, WxH
        #[arg(long, default_value = "1200x820")]
        size: String,
        /// The Hugging Face hub's base URL (default: TOKENMIX_HUB, else https://huggingface.co)
        #[arg(long)]
        hub: Option<String>,
    },
    /// Forward latency, throughput and GFLOP/s; or a GEMM micro-benchmark with --gemm MxKxN
    Bench {
        /// Model file, or hf-hub:owner/name (a timm model on the Hugging Face hub, downloaded once
        /// into a cache); the embedded default model when omitted
        #[arg(long)]
        weights: Option<PathBuf>,
        /// Comma-separated batch sizes
        #[arg(long, default_value = "1,8", value_delimiter = ',')]
        batch: Vec<usize>,
        /// Timed runs per batch size (at least 1)
        #[arg(long, default_value_t = 10, value_parser = at_least_one)]
        iters: usize,
        /// GEMM micro-benchmark shape MxKxN ([M,K]·[K,N]), run with every kernel variant
        #[arg(long)]
        gemm: Option<String>,
        /// Also time each step of one forward pass per batch size (GPU timestamps, or the CPU
        /// clock) and print where the time goes, by kind of step (in --json: each run's "profile")
        #[arg(long)]
        profile: bool,
        /// Also time classifying this image file, decoded once: its resize and one forward
        /// pass, as the page and the desktop app classify an image; on the GPU, resized by
        /// preprocess.wgsl and on the CPU (in --json: "image")
        #[arg(long)]
        image: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

/// A count flag's value: 0 is refused rather than quietly taken as 1.
fn at_least_one(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// `println!` for the CLI's output. A reader that stops reading (`tokenmix classify *.png |
/// head -3`) ends the run quietly with status 0, as ripgrep does, instead of `println!`'s
/// panic, "failed printing to stdout: Broken pipe"; any other failure to write is an error
/// line and status 1.
macro_rules! outln {
    () => { $crate::cli::write_out(format_args!("")) };
    ($($arg:tt)*) => { $crate::cli::write_out(format_args!($($arg)*)) };
}
pub(crate) use outln;

pub(crate) fn write_out(line: std::fmt::Arguments) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(line).and_then(|()| out.write_all(b"\n")) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing the output: {e}");
        std::process::exit(1);
    }
}

/// Mesa's Vulkan device-select layer (loaded with every Mesa driver, lavapipe included) asks
/// the Wayland compositor which GPU is the default one whenever the Vulkan instance enables
/// `VK_KHR_wayland_surface`, which wgpu always does. Where `XDG_RUNTIME_DIR` is unset (a
/// shell over ssh, a container, a service) libwayland cannot look, and prints "error:
/// XDG_RUNTIME_DIR is invalid or not set in the environment." for each instance: four lines
/// that read like tokenmix's own errors before a run that then succeeds. No Wayland session
/// can be reached there, so the layer has nothing to learn; it is turned off
/// (`NODEVICE_SELECT=1`) for this process, unless the user set either of its variables. wgpu
/// chooses the adapter itself (`WGPU_POWER_PREF`, `WGPU_ADAPTER_NAME`), not by the layer's
/// order.
fn quiet_mesa_device_select() {
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    let runtime_dir_ok = std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| Path::new(&d).is_absolute());
    let wayland_named = std::env::var_os("WAYLAND_DISPLAY").is_some_and(|d| Path::new(&d).is_absolute()) || set("WAYLAND_SOCKET");
    if cfg!(target_os = "linux") && !runtime_dir_ok && !wayland_named && !set("NODEVICE_SELECT") && !set("MESA_VK_DEVICE_SELECT") {
        // The first thing `main` does: no other thread exists yet to read the environment.
        std::env::set_var("NODEVICE_SELECT", "1");
    }
}

pub fn main() -> ExitCode {
    quiet_mesa_device_select();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    let choice = match cli.backend.as_deref().map(BackendChoice::parse).transpose().and_then(|c| match c {
        Some(c) => Ok(c),
        None => BackendChoice::from_env().map(Option::unwrap_or_default),
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let _ = BACKEND.set(choice);
    let precision = match cli.precision.as_deref().map_or_else(tokenmix::gpu::requested_precision, Precision::parse) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    tokenmix::gpu::request_precision(precision);
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Logits { weights, input, out } => logits(weights.as_deref(), &input, &out),
        Command::Classify { weights, images, top_k, json } => classify(weights.as_deref(), &image_files(&images)?, top_k, json),
        Command::Info { weights, json } => info(weights.as_deref(), json),
        Command::View { weights, image, image_opt, screenshot, json, size, hub } => {
            view(weights.as_deref(), image.or(image_opt).as_deref(), screenshot.as_deref(), json, &size, hub)
        }
        Command::Insight { weights, layer, json, png, image } => {
            let model = load_or_default(device()?.device, weights.as_deref())?;
            crate::cli_views::insight(&model, &model_name(weights.as_deref()), layer, json, png.as_deref(), image.as_deref())
        }
        Command::Explain { weights, images, top_k, json, png, relative, input, out, bias } => match (input, out) {
            (Some(input), Some(out)) => {
                let (shape, data) = read_npy_input(&input)?;
                let model = load_sized(device()?.device, weights.as_deref(), Some([shape[2], shape[3]]))?;
                check_channels(&model, &input, shape[1])?;
                crate::cli_views::explain_raw(&model, &data, &out, bias.as_deref())
            }
            _ => {
                let images = image_files(&images)?;
                let model = load_or_default(device()?.device, weights.as_deref())?;
                crate::cli_views::explain_images(&model, &images, top_k, json, png.as_deref(), relative)
            }
        },
        Command::Eval { weights, data, batch, json } => eval(weights.as_deref(), &data, batch, json),
        Command::Bench { weights, batch, iters, gemm, profile, image, json } => match gemm {
            Some(_) if profile => Err(Error::Input("--profile times a model's steps; it does not go with --gemm".into())),
            Some(_) if image.is_some() => Err(Error::Input("--image times a model classifying it; it does not go with --gemm".into())),
            Some(shape) => bench_gemm(&shape, iters, json),
            None => bench_model(weights.as_deref(), &batch, iters, profile, image.as_deref(), json),
        },
    }
}

/// The backend asked for (`--backend`, else `TOKENMIX_BACKEND`, else auto).
static BACKEND: std::sync::OnceLock<BackendChoice> = std::sync::OnceLock::new();

/// The executor for this run, and why it was chosen.
fn device() -> Result<Selected> {
    pollster::block_on(exec::select(BACKEND.get().copied().unwrap_or_default()))
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    tokenmix::file::read_bounded(path, tokenmix::file::MAX_MODEL_BYTES, what)
}

fn load(dev: Device, path: &Path, img_size: Option<[usize; 2]>) -> Result<Model> {
    load_from(dev, path, None, img_size)
}

/// [`load`], the hub's address taken from `hub` where given (`view --hub`).
fn load_from(dev: Device, path: &Path, hub: Option<&str>, img_size: Option<[usize; 2]>) -> Result<Model> {
    let file = model_file(path, hub)?;
    let bytes = tokenmix::file::read_model(&file)?;
    Model::load(dev, &bytes, img_size).map_err(|e| match e {
        Error::Io { .. } => e,
        other => {
            // As in the desktop app: a hub file that is no model of these families is not
            // kept, so the next run fetches it again; one this device could not run stays.
            let from_hub = hub_repo(path).is_some() && matches!(other, Error::Format(_) | Error::Tensor { .. } | Error::Config(_));
            let removed = if from_hub && std::fs::remove_file(&file).is_ok() { " (removed from the hub cache)" } else { "" };
            Error::Input(format!("{}: {other}{removed}", path.display()))
        }
    })
}

/// The `--weights` value, if it names a model on the hub: as timm names it
/// (`timm.create_model("hf-hub:timm/NAME")`, also the older `hf_hub:`), or by its address there
/// (`https://huggingface.co/timm/NAME`); `tokenmix::hubname::names_hub_model`. The repository
/// is read from it by `hub::parse_repo`.
fn hub_repo(path: &Path) -> Option<&str> {
    path.to_str().filter(|s| tokenmix::hubname::names_hub_model(s))
}

/// The model file a `--weights` value names: a path as it is, or for `hf-hub:owner/name` (or
/// the repository's address on the hub) the repository's `model.safetensors` from the hub's
/// cache, downloaded first if it is not there (with a progress bar on a terminal, and a note of
/// what came). The cache and the base URL are the desktop app's ([`tokenmix::hub`]:
/// `TOKENMIX_CACHE_DIR`; `hub_base`, else `TOKENMIX_HUB`).
fn model_file<'a>(path: &'a Path, hub_base: Option<&str>) -> Result<std::borrow::Cow<'a, Path>> {
    let Some(named) = hub_repo(path) else { return Ok(path.into()) };
    #[cfg(feature = "hub")]
    {
        use tokenmix::hub;
        let base = hub_base.map(str::to_string).or_else(|| tokenmix::env::env().hub.clone()).unwrap_or_else(|| hub::HUB.to_string());
        let download = hub::Download::start(&base, named, &hub::cache_dir())?;
        let repo = &download.repo;
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{msg} {bytes}/{total_bytes} {bytes_per_sec} {elapsed}") {
            bar.set_style(style);
        }
        bar.set_message(format!("hf-hub:{repo}"));
        loop {
            match download.progress() {
                hub::Progress::Running { loaded, total } => {
                    if let Some(t) = total {
                        bar.set_length(t);
                    }
                    bar.set_position(loaded);
                    std::thread::sleep(Duration::from_millis(50));
                }
                hub::Progress::Done { path, cached } => {
                    bar.finish_and_clear();
                    if !cached {
                        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                        eprintln!("note: hf-hub:{repo}: downloaded {} into {}", indicatif::HumanBytes(size), path.display());
                    }
                    return Ok(path.into());
                }
                hub::Progress::Failed(why) => {
                    bar.finish_and_clear();
                    return Err(Error::Input(format!("hf-hub:{repo}: {why}")));
                }
            }
        }
    }
    #[cfg(not(feature = "hub"))]
    let _ = hub_base;
    #[cfg(not(feature = "hub"))]
    Err(Error::Input(format!(
        "{named}: this tokenmix was built without hub downloads (build it with --features hub, or make desktop); \
         or download the repository's model.safetensors (https://huggingface.co/OWNER/NAME/resolve/main/model.safetensors) and give its path"
    )))
}

/// The given model file, or the embedded default model.
fn load_or_default(dev: Device, path: Option<&Path>) -> Result<Model> {
    load_sized(dev, path, None)
}

/// [`load_or_default`] for inputs of `size` where one is given (`logits` and `explain
/// --input`: the arrays' own height and width).
fn load_sized(dev: Device, path: Option<&Path>, size: Option<[usize; 2]>) -> Result<Model> {
    match path {
        Some(p) => load(dev, p, size),
        None => Model::load(dev, tokenmix::DEFAULT_MODEL, size),
    }
}

/// The command line's images, each folder replaced by the image files in it and its
/// subfolders (by extension, [`preprocess::IMAGE_EXTENSIONS`]), depth first in name order;
/// hidden entries and links to folders are left out, so a link back up cannot loop. A file
/// named on the command line is taken whatever its name, since the decoder goes by content; in
/// a folder only the extension says what an image is, and a note on stderr counts the other
/// files left out. A folder with no image is an error.
fn image_files(args: &[PathBuf]) -> Result<Vec<PathBuf>> {
    if args.iter().filter(|a| is_stdin(a)).count() > 1 {
        return Err(Error::Input(format!("{STDIN}: standard input holds one image and is read once; name it once")));
    }
    let mut files = Vec::new();
    for arg in args {
        if is_stdin(arg) || !arg.is_dir() {
            files.push(arg.clone());
            continue;
        }
        let (mut found, mut skipped) = (Vec::new(), Vec::new());
        preprocess::find_images(arg, &mut found, &mut skipped)?;
        if found.is_empty() {
            return Err(preprocess::no_images_in(arg));
        }
        note_skipped(arg, &skipped);
        files.append(&mut found);
    }
    Ok(files)
}

/// The image name that stands for standard input (`curl -s URL | tokenmix classify -`), as in
/// cat, sha256sum and tar; it names the image in the output too. A file called so is `./-`.
const STDIN: &str = "-";

/// Most bytes read from standard input (as from any pipe given as an image).
const STDIN_MAX_BYTES: u64 = preprocess::MAX_IMAGE_FILE_BYTES;

pub(crate) fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == STDIN
}

/// An image of the command line, decoded: a file, or standard input for `-` (read whole, once,
/// told by its content: [`preprocess::decode_image`]).
pub(crate) fn read_image(path: &Path) -> Result<image::RgbImage> {
    if !is_stdin(path) {
        return preprocess::load_image(path);
    }
    use std::io::IsTerminal;
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(Error::Input(format!("{STDIN}: standard input is a terminal; pipe an image into it (… - < photo.jpg), or name its file")));
    }
    match tokenmix::file::read_at_most(stdin.lock(), STDIN_MAX_BYTES, 0, path)? {
        None => Err(Error::Input(format!("{STDIN}: more than {} MiB came on standard input; no image taken is that large", STDIN_MAX_BYTES >> 20))),
        Some(bytes) if bytes.is_empty() => Err(Error::Input(format!("{STDIN}: nothing came on standard input (an image was expected)"))),
        Some(bytes) => preprocess::decode_image(&bytes, path),
    }
}

/// The note on stderr for the files a folder held that were left out, if any.
fn note_skipped(dir: &Path, skipped: &[PathBuf]) {
    if let Some(first) = skipped.first() {
        let (count, more) = match skipped.len() {
            1 => ("1 file".to_string(), String::new()),
            n => (format!("{n} files"), format!(" and {} more", n - 1)),
        };
        eprintln!("note: {}: left out {count} not named as an image ({}): {}{more}", dir.display(), preprocess::IMAGE_FORMATS, first.display());
    }
}

fn model_name(path: Option<&Path>) -> String {
    path.map_or_else(|| tokenmix::DEFAULT_MODEL_NAME.to_string(), |p| p.display().to_string())
}

#[cfg(feature = "desktop")]
fn view(weights: Option<&Path>, image: Option<&Path>, screenshot: Option<&Path>, json: bool, size: &str, hub: Option<String>) -> Result<()> {
    use tokenmix::desktop::{screenshot as render, Viewer};
    let parse = || -> Option<[u32; 2]> {
        let (w, h) = size.split_once('x')?;
        Some([w.parse().ok().filter(|&w| (200..=8192).contains(&w))?, h.parse().ok().filter(|&h| (200..=8192).contains(&h))?])
    };
    let px = parse().ok_or_else(|| Error::Input(format!("--size {size}: expected WxH, each 200..8192")))?;
    let sel = device()?;
    let line = format!("{} · {}", sel.device.describe(), sel.reason);
    // Loaded as every command loads --weights (a hub file that is no model leaves the cache).
    let mut viewer = match weights {
        Some(w) => Viewer::with_model(sel.device.clone(), line, &w.display().to_string(), load_from(sel.device.clone(), w, hub.as_deref(), None)?),
        None => Viewer::new(sel.device.clone(), line, None)?,
    };
    if let Some(h) = hub {
        viewer.hub_base = h;
    }
    if let Some(p) = image {
        viewer.open_paths(vec![p.to_path_buf()]);
        // (Classification runs on the viewer's work thread: its error comes when it ends.)
        viewer.finish(std::time::Duration::from_secs(600));
        if let Some(e) = viewer.error.take() {
            // The window's message is an error's text already ("input: …"): not prefixed twice.
            return Err(Error::Input(e.strip_prefix("input: ").unwrap_or(&e).to_string()));
        }
    }
    match screenshot {
        Some(out) => {
            let img = render(&mut viewer, px)?;
            img.save(out).map_err(|e| Error::Input(format!("{}: {e}", out.display())))?;
            if json {
                outln!("{}", viewer.predictions_json());
            }
            Ok(())
        }
        None => tokenmix::desktop::run_window(viewer),
    }
}

#[cfg(not(feature = "desktop"))]
fn view(_: Option<&Path>, _: Option<&Path>, _: Option<&Path>, _: bool, _: &str, _: Option<String>) -> Result<()> {
    Err(Error::Input(
        "this tokenmix was built without the desktop app: build it with `cargo build --release --features desktop` (or `make desktop`)".into(),
    ))
}

/// A preprocessed input batch: a float32 or float64 .npy [N, C, H, W], either byte order.
fn read_npy_input(input: &Path) -> Result<([usize; 4], Vec<f32>)> {
    let bytes = read(input, "an input batch")?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|e| Error::Input(format!("{}: not a .npy file: {e}", input.display())))?;
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let [n, c, h, w] = shape[..] else {
        return Err(Error::Input(format!("{}: shape {shape:?}, expected [N, C, H, W]", input.display())));
    };
    let fortran = npy.order() == npyz::Order::Fortran;
    let descr = npy.dtype().descr();
    let bad = |e: std::io::Error| Error::Input(format!("{}: {e}", input.display()));
    // numpy's own default is float64 (`np.random.rand`, `np.array([0.5])`), and a file may
    // come from a big-endian machine: either float width, either byte order, is read as f32.
    let data: Vec<f32> = match descr.as_str() {
        "'<f4'" | "'>f4'" => npy.into_vec::<f32>().map_err(bad)?,
        "'<f8'" | "'>f8'" => npy.into_vec::<f64>().map_err(bad)?.into_iter().map(|v| v as f32).collect(),
        _ => return Err(Error::Input(format!("{}: dtype {descr}, expected float32 or float64", input.display()))),
    };
    // numpy writes a Fortran-ordered array (`np.asfortranarray`, a transpose's result) with
    // its first index fastest; read as it is, it would be a different batch, silently.
    let data = if fortran { c_order(&data, [n, c, h, w]) } else { data };
    Ok(([n, c, h, w], data))
}

/// A Fortran-ordered (first index fastest) 4-D array's elements in C order (last index fastest).
fn c_order(data: &[f32], [n, c, h, w]: [usize; 4]) -> Vec<f32> {
    let mut out = Vec::with_capacity(data.len());
    for i in 0..n {
        for j in 0..c {
            for y in 0..h {
                out.extend((0..w).map(|x| data[i + n * (j + c * (y + h * x))]));
            }
        }
    }
    out
}

fn check_channels(model: &Model, input: &Path, c: usize) -> Result<()> {
    let [mc, _, _] = model.info.arch.input_shape();
    if c != mc {
        return Err(Error::Input(format!("{}: {c} channels, the model takes {mc}", input.display())));
    }
    Ok(())
}

/// Writes float32 `data` as a .npy of `shape`.
pub(crate) fn write_npy(out: &Path, shape: &[usize], data: &[f32]) -> Result<()> {
    let file = std::fs::File::create(out).map_err(|e| Error::io(out, e))?;
    use npyz::WriterBuilder;
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let mut writer =
        npyz::WriteOptions::new().default_dtype().shape(&shape).writer(std::io::BufWriter::new(file)).begin_nd().map_err(|e| Error::io(out, e))?;
    writer.extend(data.iter().copied()).map_err(|e| Error::io(out, e))?;
    writer.finish().map_err(|e| Error::io(out, e))?;
    Ok(())
}

fn logits(weights: Option<&Path>, input: &Path, out: &Path) -> Result<()> {
    let ([n, c, h, w], data) = read_npy_input(input)?;
    let model = load_sized(device()?.device, weights, Some([h, w]))?;
    check_channels(&model, input, c)?;
    let result = model.forward_blocking(&data)?;
    write_npy(out, &[n, result.classes], &result.logits)
}

/// The images named on the command line, read and transformed a batch at a time (`batch_size`
/// images, at most the model's largest batch, so a folder of thousands is never all in memory
/// at once): `run` runs a batch's input, then `each` gets its result, the input, and each
/// image's place in it and path, in order, with the JSON report to add to. An image that does
/// not read is reported on stderr and as `{"image", "error"}` in its place in the report, and
/// the others are done; [`all_read`] then fails the command saying how many did not read. A
/// single image's error is the command's.
pub(crate) fn in_batches<T>(
    model: &Model,
    images: &[PathBuf],
    batch_size: usize,
    report: &mut Report,
    run: impl Fn(&[f32]) -> Result<T>,
    mut each: impl FnMut(&T, &[f32], usize, &Path, &mut Report) -> Result<()>,
) -> Result<Unread> {
    let mut unread = 0;
    for batch in preprocess::Batches::new(model, images, batch_size).read_with(read_image) {
        let out = if batch.input.is_empty() { None } else { Some(run(&batch.input)?) };
        for (path, place) in batch.paths.iter().zip(batch.places) {
            match (place, &out) {
                (Ok(i), Some(out)) => each(out, &batch.input, i, path, report)?,
                (Err(e), _) if images.len() == 1 => return Err(e),
                (Err(e), _) => {
                    eprintln!("error: {e}");
                    unread += 1;
                    report.push(serde_json::json!({"image": path.display().to_string(), "error": e.to_string()}));
                }
                (Ok(_), None) => {}
            }
        }
    }
    Ok(Unread(unread, images.len()))
}

/// How many of how many images did not read.
pub(crate) struct Unread(usize, usize);

/// `--json`'s array of per-image results, written as each image is done rather than at the end:
/// a folder of thousands shows its answers batch by batch, and a run stopped part-way has given
/// those it finished. One element per line, the first opening the array and the last closing
/// it (the number of images is known from the start), so a single image's output is one line,
/// `[{…}]`, as it always was. Without `--json` it writes nothing.
pub(crate) struct Report {
    json: bool,
    total: usize,
    written: usize,
}

impl Report {
    /// The report of `total` images; `json` false: one that writes nothing.
    pub(crate) fn new(json: bool, total: usize) -> Report {
        Report { json, total, written: 0 }
    }

    /// Writes the next image's element.
    pub(crate) fn push(&mut self, value: serde_json::Value) {
        if self.json {
            let (open, close) = (if self.written == 0 { "[" } else { "" }, if self.written + 1 >= self.total { "]" } else { "," });
            // Standard output is line-buffered: the line goes out now.
            outln!("{open}{value}{close}");
        }
        self.written += 1;
    }
}

/// The command's end once its output is written: an error where some images did not read.
pub(crate) fn all_read(Unread(unread, total): Unread) -> Result<()> {
    match unread {
        0 => Ok(()),
        n => Err(Error::Input(format!("{n} of the {total} images did not read (above); the rest were done"))),
    }
}

fn classify(weights: Option<&Path>, images: &[PathBuf], top_k: usize, json: bool) -> Result<()> {
    let model = load_or_default(device()?.device, weights)?;
    let mut report = Report::new(json, images.len());
    let unread = in_batches(
        &model,
        images,
        model.max_batch(),
        &mut report,
        |input| model.forward_blocking(input),
        |out, _, i, path, report| {
            let probs = &out.probs[i * out.classes..(i + 1) * out.classes];
            let preds: Vec<serde_json::Value> = out
                .top_k(i, top_k)
                .iter()
                .map(|&k| serde_json::json!({"index": k, "label": labels::label(&model.info, k), "probability": probs[k]}))
                .collect();
            if !json {
                outln!("{}", path.display());
                for p in &preds {
                    outln!("  {:>6.2}%  {:>4}  {}", p["probability"].as_f64().unwrap_or(0.0) * 100.0, p["index"], p["label"].as_str().unwrap_or(""));
                }
            }
            report.push(serde_json::json!({"image": path.display().to_string(), "predictions": preds}));
            Ok(())
        },
    )?;
    all_read(unread)
}

fn info(weights: Option<&Path>, json: bool) -> Result<()> {
    let sel = device()?;
    let adapter = sel.device.describe();
    let model = load_or_default(sel.device.clone(), weights)?;
    let i = &model.info;
    if json {
        let mut v = serde_json::to_value(i).map_err(|e| Error::Input(e.to_string()))?;
        v["adapter"] = adapter.into();
        // "labels" is the file's; "label_source" says where the names printed come from.
        v["label_source"] = labels::Source::of(i).key().into();
        v["backend"] = sel.device.backend().into();
        v["backend_reason"] = sel.reason.clone().into();
        v["backend_detail"] = sel.detail.clone().into();
        v["kernels"] = sel.device.kernels().into();
        v["rows"] = sel.device.rows().into();
        v["resample"] = sel.device.resample().into();
        let (precision, note) = sel.device.precision();
        v["precision"] = precision.into();
        v["precision_note"] = note.into();
        v["f16_activations"] = model.f16_activations().into();
        let (autotune, choices) = sel.device.gemm_tuning();
        v["gemm_autotune"] = autotune.into();
        v["gemm_tuning"] = serde_json::json!(choices);
        outln!("{v}");
        return Ok(());
    }
    outln!("model:       {}", model_name(weights));
    outln!("family:      {}", i.family);
    outln!("preset:      {}", i.preset.unwrap_or("(none: no timm preset has these shapes)"));
    match &i.arch {
        tokenmix::models::Arch::MlpMixer(c) => outln!(
            "config:      image {}x{}, patch {}, in_chans {}, dim {}, depth {}, {}channels_hidden {}, classes {}",
            c.img_size[0],
            c.img_size[1],
            c.patch,
            c.in_chans,
            c.dim,
            c.depth,
            c.tokens_hidden.map_or(String::new(), |t| format!("tokens_hidden {t}, ")),
            c.channels_hidden,
            c.num_classes
        ),
        tokenmix::models::Arch::MetaFormer(c) => outln!(
            "config:      image {}x{}, in_chans {}, depths {:?}, dims {:?}, mlp_hidden {:?}, classes {}",
            c.img_size[0],
            c.img_size[1],
            c.in_chans,
            c.depths,
            c.dims,
            c.mlp_hidden,
            c.num_classes
        ),
    }
    outln!("parameters:  {} ({:.2} M)", i.params, i.params as f64 / 1e6);
    outln!("GMACs:       {:.3} per image", i.macs as f64 / 1e9);
    let p = &i.preprocess;
    outln!("preprocess:  {}x{}x{}, crop_pct {}, mean {:?}, std {:?}", p.channels, p.size[0], p.size[1], p.crop_pct, p.mean, p.std);
    outln!(
        "labels:      {}",
        match labels::Source::of(i) {
            labels::Source::File => format!("{}, from the model file", i.labels.len()),
            other => other.describe().to_string(),
        }
    );
    outln!("backend:     {} ({}; asked for: {})", sel.device.backend(), sel.reason, sel.choice.name());
    outln!("runs on:     {adapter}");
    outln!("kernels:     {}", sel.device.kernels());
    if let Some(rows) = sel.device.rows().and_then(RowKernel::parse) {
        let how = match rows {
            RowKernel::Invocation => "one invocation per row (LayerNorm, softmax)",
            RowKernel::Workgroup => "one workgroup per row (LayerNorm, softmax); GroupNorm in chunks",
            RowKernel::Subgroup => "one workgroup per row, reduced by subgroups first (LayerNorm, softmax); GroupNorm in chunks",
        };
        outln!("norm rows:   {how}");
    }
    if let Some(resample) = sel.device.resample().and_then(Resample::parse) {
        let how = match resample {
            Resample::Gpu => "an image classified is resampled by preprocess.wgsl, in the forward pass's submission",
            Resample::Cpu => "an image classified is resampled on the CPU, its model input uploaded (a CPU rasteriser runs the shader slower)",
        };
        outln!("resize:      {how}");
    }
    let halves = model.f16_activations();
    let stored =
        if halves.is_empty() { String::new() } else { format!(": GEMM weights and the {} activations in f16, all sums in f32", halves.join(", ")) };
    match sel.device.precision() {
        (p, None) => outln!("precision:   {p}{stored}"),
        (p, Some(note)) => outln!("precision:   {p}{stored} ({note})"),
    }
    Ok(())
}

fn check_batch(batch: usize) -> Result<()> {
    if batch == 0 || batch > tokenmix::models::MAX_BATCH {
        return Err(Error::Input(format!("batch {batch} is outside 1..={}", tokenmix::models::MAX_BATCH)));
    }
    Ok(())
}

/// Top-1 over the Fashion-MNIST test set. The model must take 1x28x28 inputs; pixels are
/// scaled to [0, 1] and normalised with the model's mean/std, exactly as `tools/train.py`.
fn eval(weights: Option<&Path>, data: &Path, batch: usize, json: bool) -> Result<()> {
    check_batch(batch)?;
    if data.is_dir() && !tokenmix::dataset::holds_fashion_mnist(data) {
        return eval_folders(weights, data, batch, json);
    }
    let set = tokenmix::dataset::fashion_mnist_test(data)?;
    let model = load_or_default(device()?.device, weights)?;
    let [c, h, w] = model.info.arch.input_shape();
    if [c, h, w] != [1, set.height, set.width] {
        return Err(Error::Input(format!(
            "{}: the model takes {c}x{h}x{w} inputs, the test images are 1x{}x{}",
            model_name(weights),
            set.height,
            set.width
        )));
    }
    if model.info.arch.num_classes() < 10 {
        return Err(Error::Input(format!("{}: {} classes, Fashion-MNIST has 10", model_name(weights), model.info.arch.num_classes())));
    }
    let (mean, std) = (model.info.preprocess.mean[0], model.info.preprocess.std[0]);
    let per = h * w;
    let bar = progress(set.count, "eval");
    if json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let start = Instant::now();
    let mut correct = 0usize;
    for (pixels, labels) in set.pixels.chunks(batch * per).zip(set.labels.chunks(batch)) {
        let input: Vec<f32> = pixels.iter().map(|&p| (p as f32 / 255.0 - mean) / std).collect();
        let out = model.forward_blocking(&input)?;
        for (row, &label) in out.logits.chunks(out.classes).zip(labels) {
            correct += (top1(row) == label as usize) as usize;
        }
        bar.inc(labels.len() as u64);
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let (total, top1) = (set.count, correct as f64 / set.count.max(1) as f64);
    if json {
        outln!("{}", serde_json::json!({"top1": top1, "correct": correct, "total": total, "images_per_s": total as f64 / secs}));
    } else {
        outln!("{}: top-1 {:.2}% ({correct}/{total}), {:.1} images/s (batch {batch})", model_name(weights), top1 * 100.0, total as f64 / secs);
    }
    Ok(())
}

/// The likeliest class of one image's logits (the lowest index on a tie, as `argmax` picks).
fn top1(row: &[f32]) -> usize {
    (0..row.len()).max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a))).unwrap_or(0)
}

/// `eval` on a folder of class folders (torchvision's `ImageFolder` layout: `DATA/Trouser/*.png`,
/// or `DATA/1/*.png`), each named as one of the model's labels or by its class index
/// ([`tokenmix::dataset::class_of_folder`]); their images (in subfolders too, by extension, as
/// `classify` takes a folder) are read and transformed as `classify` does, `batch` at a time.
/// Prints the top-1 over all of them and per class; an image that does not read is reported,
/// left out of the count, and fails the command at the end, as in `classify`.
fn eval_folders(weights: Option<&Path>, data: &Path, batch: usize, json: bool) -> Result<()> {
    let model = load_or_default(device()?.device, weights)?;
    let classes = model.info.arch.num_classes();
    let mut entries = std::fs::read_dir(data).and_then(|d| d.collect::<std::io::Result<Vec<_>>>()).map_err(|e| Error::io(data, e))?;
    entries.sort_by_key(|e| e.file_name());
    let (mut images, mut class_of, mut skipped) = (Vec::new(), std::collections::HashMap::new(), Vec::new());
    for entry in entries {
        let (path, name) = (entry.path(), entry.file_name().to_string_lossy().into_owned());
        if name.starts_with('.') {
            continue;
        }
        if !path.is_dir() {
            skipped.push(path);
            continue;
        }
        let Some(class) = tokenmix::dataset::class_of_folder(&name, labels::names(&model.info), classes) else {
            let named: Vec<String> = (0..classes).take(12).map(|c| labels::label(&model.info, c)).collect();
            return Err(Error::Input(format!(
                "{}: a class folder named as none of {}'s classes ({}{}) nor by a class index (0 to {})",
                path.display(),
                model_name(weights),
                named.join(", "),
                if classes > 12 { ", …" } else { "" },
                classes.saturating_sub(1)
            )));
        };
        let mut found = Vec::new();
        preprocess::find_images(&path, &mut found, &mut skipped)?;
        class_of.extend(found.iter().map(|p| (p.clone(), class)));
        images.append(&mut found);
    }
    note_skipped(data, &skipped);
    if images.is_empty() {
        return Err(Error::Input(format!(
            "{}: neither the Fashion-MNIST IDX files (t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]) nor class folders with images ({}) in them",
            data.display(),
            preprocess::IMAGE_FORMATS
        )));
    }
    let bar = progress(images.len(), "eval");
    if json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let start = Instant::now();
    // Per class: images read, and answered right.
    let mut tally = vec![(0usize, 0usize); classes];
    let unread = in_batches(
        &model,
        &images,
        batch,
        &mut Report::new(false, images.len()),
        |input| model.forward_blocking(input),
        |out, _, i, path, _| {
            let class = class_of.get(path).copied().unwrap_or(0);
            tally[class].0 += 1;
            tally[class].1 += (top1(&out.logits[i * out.classes..(i + 1) * out.classes]) == class) as usize;
            bar.inc(1);
            Ok(())
        },
    )?;
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let (total, correct) = tally.iter().fold((0, 0), |(t, c), &(n, k)| (t + n, c + k));
    let top = correct as f64 / total.max(1) as f64;
    // The classes with images: (index, label, read, right).
    let rows: Vec<(usize, String, usize, usize)> =
        tally.iter().enumerate().filter(|(_, &(n, _))| n > 0).map(|(c, &(n, k))| (c, labels::label(&model.info, c), n, k)).collect();
    if json {
        let per_class: Vec<serde_json::Value> = rows
            .iter()
            .map(|(c, label, n, k)| serde_json::json!({"index": c, "label": label, "correct": k, "total": n, "top1": *k as f64 / *n as f64}))
            .collect();
        outln!("{}", serde_json::json!({"top1": top, "correct": correct, "total": total, "images_per_s": total as f64 / secs, "classes": per_class}));
    } else {
        outln!("{}: top-1 {:.2}% ({correct}/{total}), {:.1} images/s (batch {batch})", model_name(weights), top * 100.0, total as f64 / secs);
        for (_, label, n, k) in &rows {
            outln!("  {:>7.2}%  {:>6}/{:<6} {label}", *k as f64 / *n as f64 * 100.0, k, n);
        }
    }
    all_read(unread)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn progress(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    if let Ok(style) = ProgressStyle::with_template("{msg:>24} [{bar:30}] {pos}/{len} {elapsed}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}

fn bench_model(weights: Option<&Path>, batches: &[usize], iters: usize, profile: bool, image: Option<&Path>, json: bool) -> Result<()> {
    let start = Instant::now();
    let sel = device()?;
    let dev = &sel.device;
    // Read first: a bad file is refused before anything is timed.
    let image = image.map(|p| read_image(p).map(|img| (p, img))).transpose()?;
    let mut model = load_or_default(dev.clone(), weights)?;
    let per = model.input_len();
    let first_input: Vec<f32> = (0..per).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    model.forward_blocking(&first_input)?;
    let first = start.elapsed();
    let macs = model.info.macs as f64;
    let mut rows = Vec::new();
    if !json {
        outln!("backend: {} ({})", dev.backend(), sel.reason);
        outln!("runs on: {}   gemm: {}   precision: {}", dev.describe(), dev.kernels(), dev.precision().0);
        outln!("model:   {} ({})", model.info.preset.unwrap_or(model.info.family), model_name(weights));
        outln!("time to first result (load + pipelines + first forward, batch 1): {:.1} ms", first.as_secs_f64() * 1e3);
    }
    for &batch in batches {
        check_batch(batch)?;
        let input: Vec<f32> = first_input.iter().cycle().take(batch * per).copied().collect();
        model.forward_blocking(&input)?; // build the plan, warm up
        let bar = progress(iters, &format!("batch {batch}"));
        if json {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t = Instant::now();
            model.forward_blocking(&input)?;
            times.push(t.elapsed());
            bar.inc(1);
        }
        bar.finish_and_clear();
        let med = median(times).as_secs_f64();
        // On a GPU, the same pass with its input already there (what PyTorch's timing with a
        // CUDA tensor measures); the median above includes the upload, a few ms at batch 64.
        // The first rerun warms up, and says whether there is a GPU to rerun on.
        let mut resident = Vec::with_capacity(iters);
        if batch <= model.max_batch() && model.rerun_resident(batch)? {
            for _ in 0..iters {
                let t = Instant::now();
                model.rerun_resident(batch)?;
                resident.push(t.elapsed());
            }
        }
        let device = (!resident.is_empty()).then(|| median(resident).as_secs_f64());
        let mut row = serde_json::json!({
            "batch": batch, "median_ms": med * 1e3, "images_per_s": batch as f64 / med,
            "gflops": 2.0 * macs * batch as f64 / med / 1e9,
        });
        if let Some(d) = device {
            row["device_ms"] = serde_json::json!(d * 1e3);
        }
        if !json {
            outln!(
                "batch {batch:>3}: median {:>9.2} ms   {:>8.2} images/s   {:>7.2} GFLOP/s{}",
                med * 1e3,
                batch as f64 / med,
                2.0 * macs * batch as f64 / med / 1e9,
                device.map_or(String::new(), |d| format!("   input already on the GPU {:.2} ms", d * 1e3))
            );
        }
        if profile {
            let (_, p) = model.profile(&input)?;
            if json {
                row["profile"] = serde_json::to_value(&p).map_err(|e| Error::Input(format!("profile: {e}")))?;
            } else {
                outln!("{}", p.lines().join("\n"));
            }
        }
        rows.push(row);
    }
    let image = match image {
        Some((path, img)) => Some(bench_image(&mut model, path, &img, iters, json)?),
        None => None,
    };
    if !json && dev.gemm_tuning().0 {
        outln!("gemm (autotuned per shape class): {}", dev.kernels());
    }
    if json {
        let ((autotune, tuning), (precision, precision_note)) = (dev.gemm_tuning(), dev.precision());
        let mut v = serde_json::json!({
            "backend": dev.backend(), "backend_reason": sel.reason, "adapter": dev.describe(), "gemm": dev.kernels(),
            "rows": dev.rows(), "resample": dev.resample(), "gemm_autotune": autotune, "gemm_tuning": tuning, "model": model.info.preset,
            "precision": precision, "precision_note": precision_note, "f16_activations": model.f16_activations(),
            "first_result_ms": first.as_secs_f64() * 1e3, "runs": rows,
        });
        if let Some(image) = image {
            v["image"] = image;
        }
        outln!("{v}");
    }
    Ok(())
}

/// `bench --image`: `iters` classifications of `img` (decoded once), after one untimed, by
/// each route the executor has: on the GPU resized by `preprocess.wgsl` ("gpu") and on the CPU
/// ("cpu"), on the CPU executor its own ("cpu"). Each: the median of the whole call and of its
/// preprocessing (the CPU half and, on the GPU, the recording; the shader runs in the pass),
/// and the top class, which must be the same for every route.
fn bench_image(model: &mut Model, path: &Path, img: &image::RgbImage, iters: usize, json: bool) -> Result<serde_json::Value> {
    use tokenmix::gpu::Resample;
    use tokenmix::preprocess::Pixels;
    fn now() -> f64 {
        static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        T0.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3
    }
    let before = model.resample();
    let routes: Vec<Option<Resample>> = if before.is_some() { vec![Some(Resample::Gpu), Some(Resample::Cpu)] } else { vec![None] };
    let mut out = serde_json::Map::new();
    for route in routes {
        if let Some(r) = route {
            model.set_resample(r);
        }
        let classify = || pollster::block_on(model.classify_pixels_cancellable(Pixels::rgb(img), now, &Cancel::new()));
        let warm = classify()?;
        let (mut total, mut pre) = (Vec::with_capacity(iters), Vec::with_capacity(iters));
        for _ in 0..iters {
            let t = Instant::now();
            let run = classify()?;
            total.push(t.elapsed());
            pre.push(Duration::from_secs_f64(run.preprocess_ms.max(0.0) / 1e3));
        }
        let top = warm.output.top_k(0, 1).first().copied().unwrap_or(0);
        let (total, pre) = (median(total).as_secs_f64() * 1e3, median(pre).as_secs_f64() * 1e3);
        let name = route.map_or("cpu", |r| r.name());
        if !json {
            outln!(
                "image {} ({}x{}), resized on the {name}: median {total:.2} ms, of it {pre:.2} ms preprocessing on the CPU; top class {top} ({:.4})",
                path.display(),
                img.width(),
                img.height(),
                warm.output.probs[top]
            );
        }
        out.insert(name.into(), serde_json::json!({ "median_ms": total, "preprocess_ms": pre, "top1": top, "probability": warm.output.probs[top] }));
    }
    if let Some(r) = before {
        model.set_resample(r);
    }
    Ok(serde_json::json!({ "file": path.display().to_string(), "width": img.width(), "height": img.height(), "routes": out }))
}

fn bench_gemm(shape: &str, iters: usize, json: bool) -> Result<()> {
    let dims: Vec<usize> = shape
        .split('x')
        .map(|s| s.trim().parse::<usize>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::Input(format!("--gemm {shape}: expected MxKxN, e.g. 1568x512x2048")))?;
    let [m, k, n] = dims[..] else {
        return Err(Error::Input(format!("--gemm {shape}: expected MxKxN")));
    };
    if m == 0 || k == 0 || n == 0 {
        return Err(Error::Input(format!("--gemm {shape}: each of M, K and N must be at least 1")));
    }
    // Each operand is made here, in host memory, before any kernel runs: one larger than a GPU
    // binding can be (2 GiB on the H200) is refused now, not allocated until the kernel kills
    // the process (70000x70000x1 did, on a 23 GB machine).
    const MAX_OPERAND: usize = 1 << 29;
    if [(m, k), (k, n), (m, n)].iter().any(|&(r, c)| r.checked_mul(c).is_none_or(|e| e > MAX_OPERAND)) {
        return Err(Error::Input(format!("--gemm {shape}: an operand of over {MAX_OPERAND} floats (2 GiB), more than a GPU binding holds")));
    }
    let a: Vec<f32> = (0..m * k).map(|i| ((i % 13) as f32 - 6.0) / 13.0).collect();
    let w: Vec<f32> = (0..n * k).map(|i| ((i % 7) as f32 - 3.0) / 7.0).collect();
    let wtok: Vec<f32> = (0..m * k).map(|i| ((i % 7) as f32 - 3.0) / 7.0).collect();
    let x: Vec<f32> = (0..k * n).map(|i| ((i % 11) as f32 - 5.0) / 11.0).collect();
    let flops = 2.0 * (m * n * k) as f64;
    let mut rows = Vec::new();
    // The CPU executor's GEMM, both layouts, always; its results are what each GPU kernel's
    // error is measured against.
    let mut c = vec![0f32; m * n];
    let mut cpu_results = Vec::new();
    for (layout, linear) in [("A·W^T (linear)", true), ("W·X (token mixing)", false)] {
        let mut run = || -> Result<Duration> {
            let t = Instant::now();
            if linear {
                exec::cpu::linear(m, k, n, &a, &w, &mut c)?
            } else {
                exec::cpu::weight_times(m, k, n, &wtok, &x, &mut c)?
            }
            Ok(t.elapsed())
        };
        run()?;
        // At most ~2 s of timing (but 3 runs at least): the CPU GEMM is the reference, and at
        // a GPU's sizes (4096³ is 137 GFLOP) `--iters 20` would spend a minute on it alone.
        let started = Instant::now();
        let mut times = Vec::new();
        while times.len() < iters && (times.len() < 3 || started.elapsed() < Duration::from_secs(2)) {
            times.push(run()?);
        }
        let med = median(times).as_secs_f64();
        if !json {
            outln!(
                "{:>13} {layout:<20} {m}x{k}x{n}: median {:>8.2} ms  {:>7.2} GFLOP/s   [{}]",
                "cpu",
                med * 1e3,
                flops / med / 1e9,
                Device::cpu().describe()
            );
        }
        rows.push(serde_json::json!({"variant": "cpu", "layout": layout, "median_ms": med * 1e3, "gflops": flops / med / 1e9}));
        cpu_results.push(c.clone());
    }
    let choice = BACKEND.get().copied().unwrap_or_default();
    let gpu = match choice {
        BackendChoice::Cpu => None,
        _ => match pollster::block_on(Gpu::new()) {
            Ok(g) => Some(Arc::new(g)),
            Err(e) if choice == BackendChoice::Auto => {
                eprintln!("note: no GPU adapter, so only the CPU GEMM ran ({e})");
                None
            }
            Err(e) => return Err(e),
        },
    };
    // The JSON report (which tools/bench_torch.py reads): the runs, and the executor's
    // default kernel and precision, as a model's `bench --json` gives them.
    let report = |adapter: String, gemm: String, (precision, note): (&str, Option<String>), rows: &[serde_json::Value]| {
        let v = serde_json::json!({"adapter": adapter, "gemm": gemm, "precision": precision, "precision_note": note,
            "m": m, "k": k, "n": n, "runs": rows});
        outln!("{v}");
    };
    let Some(gpu) = gpu else {
        if json {
            let cpu = Device::cpu();
            report(cpu.describe(), cpu.kernels(), cpu.precision(), &rows);
        }
        return Ok(());
    };
    let abuf = gpu.storage_init("a", &a)?;
    // W is [N, K] for the linear layout and [M, K] for token mixing (W · X, X = [K, N]).
    let wlin = Matrix::upload_with(&gpu, "w", &w, n, k, true)?;
    // (Twice: with textures for the texture kernel, whose token mixing is transposed, and
    // without, as a model's token mixing is for the other kernels.)
    let wtok_plain = Matrix::upload_with(&gpu, "wt", &wtok, m, k, false)?;
    let wtok = Matrix::upload_with(&gpu, "wt", &wtok, m, k, true)?;
    let xbuf = gpu.storage_init("x", &x)?;
    // Texture mirrors of the activations, as a model plan makes them for the texture kernel.
    let atex = ActTexture::new(&gpu, "a", m, k);
    let xtex = ActTexture::new(&gpu, "x", k, n);
    let cbuf = gpu.storage("c", m * n)?;
    if !json {
        outln!("adapter: {}   default gemm: {}   weights: {}", gpu.describe(), gpu.gemm.name(), gpu.precision.name());
    }
    for variant in gpu.gemm_variants() {
        for ((layout, b_trans), want) in [("A·W^T (linear)", true), ("W·X (token mixing)", false)].into_iter().zip(&cpu_results) {
            let mut ops = Vec::new();
            let tex = |t: &Option<ActTexture>, buf: &wgpu::Buffer, ops: &mut Vec<Op>| -> Result<()> {
                if let (GemmVariant::Texture, Some(t)) = (variant, t) {
                    ops.push(Op::copy_to_texture(buf, t)?);
                }
                Ok(())
            };
            let op = if b_trans {
                tex(&atex, &abuf, &mut ops)?;
                Gemm::linear(m, Operand::new(&abuf, k, 0), &wlin, Operand::new(&cbuf, n, 0)).a_texture(atex.as_ref()).build_with(&gpu, variant)?
            } else {
                tex(&xtex, &xbuf, &mut ops)?;
                let mut tok = Gemm::across_tokens(1, &wtok, Operand::new(&xbuf, n, 0), n, Operand::new(&cbuf, n, 0)).a_texture(xtex.as_ref());
                if variant != GemmVariant::Texture {
                    tok = Gemm::across_tokens(1, &wtok_plain, Operand::new(&xbuf, n, 0), n, Operand::new(&cbuf, n, 0));
                }
                tok.build_with(&gpu, variant)?
            };
            ops.push(op);
            let run = || -> Result<Duration> {
                let t = Instant::now();
                gpu.run_ops(&ops)?;
                Ok(t.elapsed())
            };
            run()?;
            let bar = progress(iters, &format!("{} {layout}", variant.name()));
            if json {
                bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
            }
            let mut times = Vec::new();
            for _ in 0..iters {
                times.push(run()?);
                bar.inc(1);
            }
            bar.finish_and_clear();
            let med = median(times).as_secs_f64();
            // max |GPU - CPU| over max(1, max |CPU|): ~1e-6 for f32 kernels, ~1e-3 for f16.
            let got = pollster::block_on(gpu.read_buffer(&cbuf, m * n))?;
            let err = rel_diff(want, &got);
            if !json {
                outln!(
                    "{:>13} {layout:<20} {m}x{k}x{n}: median {:>8.2} ms  {:>7.2} GFLOP/s   rel. error {err:.1e}",
                    variant.name(),
                    med * 1e3,
                    flops / med / 1e9
                );
            }
            rows.push(serde_json::json!({"variant": variant.name(), "layout": layout, "median_ms": med * 1e3, "gflops": flops / med / 1e9, "rel_error": err}));
        }
    }
    if json {
        report(gpu.describe(), gpu.gemm.name().to_string(), (gpu.precision.name(), gpu.precision_note.clone()), &rows);
    }
    Ok(())
}
