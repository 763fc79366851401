//! `tokenmix insight` and `tokenmix explain`: the insight module's data (`tokenmix::insight`,
//! `Model::explain`) as JSON, text, `.npy` or PNG images. Drawing here is only colouring cells
//! of the data the library computed; the page draws the same data in `www/visualise.js`.

use std::path::{Path, PathBuf};

use image::{Rgb, RgbImage};
use tokenmix::insight::{colour, Kernel, LayerInsight};
use tokenmix::{labels, preprocess, Error, Model, Result};

use crate::cli::outln;

/// Pixels per side of the image views in the PNGs.
const VIEW: u32 = 224;

fn save(img: &RgbImage, dir: &Path, name: &str, written: &mut Vec<PathBuf>) -> Result<()> {
    let path = dir.join(name);
    img.save(&path).map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
    written.push(path);
    Ok(())
}

/// A heatmap of `values` (h x w), `cell` pixels per value.
fn heatmap(values: &[f32], h: usize, w: usize, cell: u32, paint: impl Fn(f32) -> [u8; 3]) -> RgbImage {
    RgbImage::from_fn(w as u32 * cell, h as u32 * cell, |x, y| Rgb(paint(values[(y / cell) as usize * w + (x / cell) as usize])))
}

/// The model's-eye view of `input` (CHW, normalised): denormalised, nearest-upscaled to VIEW.
fn eye(model: &Model, input: &[f32]) -> RgbImage {
    let shape @ [_, h, w] = model.info.arch.input_shape();
    let rgb = model.info.preprocess.denormalise_rgb(input, shape);
    let small = RgbImage::from_raw(w as u32, h as u32, rgb).unwrap_or_default();
    let k = (VIEW as usize).div_ceil(h.max(w)).max(1) as u32;
    image::imageops::resize(&small, w as u32 * k, h as u32 * k, image::imageops::FilterType::Nearest)
}

/// `values` on a gh x gw token grid laid over `base` (the page's overlay: alpha 0.62).
fn overlay(base: &RgbImage, values: &[f32], (gh, gw): (usize, usize), paint: impl Fn(f32) -> [u8; 3]) -> RgbImage {
    let (w, h) = base.dimensions();
    RgbImage::from_fn(w, h, |x, y| {
        let t = (y as usize * gh / h as usize) * gw + x as usize * gw / w as usize;
        let (b, c) = (base.get_pixel(x, y).0, paint(values[t]));
        Rgb(std::array::from_fn(|i| (b[i] as f32 * 0.38 + c[i] as f32 * 0.62).round() as u8))
    })
}

/// Tiles images left to right, top to bottom, `cols` per row, `gap` pixels of white between.
fn tile(images: &[RgbImage], cols: usize, gap: u32) -> RgbImage {
    let (cw, ch) = images.iter().fold((1, 1), |(w, h), i| (w.max(i.width()), h.max(i.height())));
    let cols = cols.clamp(1, images.len().max(1));
    let rows = images.len().div_ceil(cols).max(1);
    let mut out = RgbImage::from_pixel(cols as u32 * (cw + gap) + gap, rows as u32 * (ch + gap) + gap, Rgb([255; 3]));
    for (i, img) in images.iter().enumerate() {
        let (x, y) = ((i % cols) as u32 * (cw + gap) + gap, (i / cols) as u32 * (ch + gap) + gap);
        image::imageops::replace(&mut out, img, x as i64, y as i64);
    }
    out
}

fn kernel_png(k: &Kernel) -> RgbImage {
    let cell = (VIEW / k.h.max(k.w) as u32).clamp(4, 64);
    let s = colour::scale(&k.values);
    heatmap(&k.values, k.h, k.w, cell, |v| colour::diverging(v, s))
}

/// Writes the PNG views of one layer into `dir`; returns nothing new for layers with none.
pub fn layer_pngs(model: &Model, li: &LayerInsight, base: &RgbImage, dir: &Path, written: &mut Vec<PathBuf>) -> Result<()> {
    let (gh, gw) = li.grid;
    let l = li.layer;
    match li.kind {
        "mixer" => {
            // Units in display order, each scaled to its own max |w|; pairs share a frame.
            let cell = (48 / gh.max(gw) as u32).max(2);
            let mut tiles = Vec::new();
            for g in &li.groups {
                let units: Vec<RgbImage> = g
                    .iter()
                    .map(|&u| {
                        let row = &li.data[u * li.cols..(u + 1) * li.cols];
                        let s = colour::scale(row);
                        heatmap(row, gh, gw, cell, |v| colour::diverging(v, s))
                    })
                    .collect();
                tiles.push(if units.len() == 2 { frame(&tile(&units, 2, 2)) } else { units.into_iter().next().unwrap_or_default() });
            }
            save(&tile(&tiles, 12, 4), dir, &format!("layer{l}_units.png"), written)?;
            // The first unit of the sort order over the image.
            if let Some(&u) = li.groups.first().and_then(|g| g.first()) {
                let row = &li.data[u * li.cols..(u + 1) * li.cols];
                let s = colour::scale(row);
                save(&overlay(base, row, li.grid, |v| colour::diverging(v, s)), dir, &format!("layer{l}_overlay.png"), written)?;
            }
        }
        "gmlp" | "resmlp" => {
            let s = li.cols;
            let cell = (VIEW / s as u32).max(1);
            let clip = colour::clip99(&li.data);
            save(&heatmap(&li.data, s, s, cell, |v| colour::diverging(v, clip)), dir, &format!("layer{l}_matrix.png"), written)?;
            // The centre token's row: how it mixes from every token, over the image.
            let t = (gh / 2) * gw + gw / 2;
            let row = &li.data[t * s..(t + 1) * s];
            let sc = colour::scale(row);
            save(&overlay(base, row, li.grid, |v| colour::diverging(v, sc)), dir, &format!("layer{l}_overlay.png"), written)?;
        }
        _ => {
            let k = Kernel { h: 3, w: 3, values: li.data.clone() };
            save(&kernel_png(&k), dir, "pool_kernel.png", written)?;
        }
    }
    if let Some(k) = &li.offset_kernel {
        save(&kernel_png(k), dir, &format!("layer{l}_offset_kernel.png"), written)?;
    }
    let _ = model;
    Ok(())
}

fn frame(img: &RgbImage) -> RgbImage {
    let (w, h) = img.dimensions();
    let mut out = RgbImage::from_pixel(w + 2, h + 2, Rgb([40; 3]));
    image::imageops::replace(&mut out, img, 1, 1);
    out
}

/// The image a view is drawn over: `image` preprocessed as the model sees it, or mid-grey.
fn base_image(model: &Model, image: Option<&RgbImage>) -> Result<(RgbImage, Option<Vec<f32>>)> {
    match image {
        Some(img) => {
            let input = preprocess::transform(img, &model.info.preprocess)?;
            Ok((eye(model, &input), Some(input)))
        }
        None => Ok((RgbImage::from_pixel(VIEW, VIEW, Rgb([128; 3])), None)),
    }
}

pub fn insight(model: &Model, name: &str, layer: Option<usize>, json: bool, png: Option<&Path>, image: Option<&Path>) -> Result<()> {
    let layers: Vec<usize> = match layer {
        Some(l) if l >= model.mixing_layers() => {
            return Err(Error::Input(format!(
                "--layer {l}: the model has {} token-mixing layers (0..{})",
                model.mixing_layers(),
                model.mixing_layers()
            )));
        }
        Some(l) => vec![l],
        None => (0..model.mixing_layers()).collect(),
    };
    let views: Vec<LayerInsight> = layers.iter().map(|&l| model.insight(l)).collect::<Result<_>>()?;
    // Read once: `-` is standard input, which cannot be read twice.
    let image = image.map(crate::cli::read_image).transpose()?;
    let (base, input) = base_image(model, image.as_ref())?;
    // PoolFormer's per-stage token energy needs an image.
    let energy = match (&image, &model.info.arch) {
        (Some(img), tokenmix::models::Arch::MetaFormer(_)) => {
            let image = tokenmix::preprocess::Pixels::rgb(img);
            let run = pollster::block_on(model.classify_pixels_cancellable(image, || 0.0, &tokenmix::Cancel::new()))?;
            run.stage_energy
        }
        _ => Vec::new(),
    };
    if let Some(dir) = png {
        png_folder(dir)?;
        let mut written = Vec::new();
        if input.is_some() {
            save(&base, dir, "input.png", &mut written)?;
        }
        for li in &views {
            layer_pngs(model, li, &base, dir, &mut written)?;
        }
        let maps: Vec<RgbImage> = energy
            .iter()
            .map(|((h, w), e)| {
                let s = colour::scale(e);
                heatmap(e, *h, *w, (VIEW / 2 / (*h.max(w)) as u32).max(1), |v| colour::sequential(v, s))
            })
            .collect();
        if !maps.is_empty() {
            save(&tile(&maps, maps.len(), 6), dir, "stage_energy.png", &mut written)?;
        }
        for p in &written {
            eprintln!("wrote {}", p.display());
        }
    }
    if json {
        let energy: Vec<serde_json::Value> =
            energy.iter().enumerate().map(|(i, ((h, w), e))| serde_json::json!({"stage": i, "grid": [h, w], "energy": e})).collect();
        let v = serde_json::json!({
            "model": name,
            "family": model.info.family,
            "layers": model.mixing_layers(),
            "views": views,
            "stage_energy": energy,
        });
        outln!("{v}");
    } else if png.is_none() {
        outln!("model: {name} ({}), {} token-mixing layers", model.info.family, model.mixing_layers());
        for li in &views {
            match (&li.figures, &li.init) {
                (Some(f), Some(i)) => outln!(
                    "layer {:>2} {:<7} locality {:.2} patches (init {:.2}), shift invariance {:.3} (init {:.3}), low frequency {:.3} (init {:.3}){}",
                    li.layer,
                    li.kind,
                    f.locality,
                    i.locality,
                    f.shift_invariance,
                    i.shift_invariance,
                    f.low_frequency,
                    i.low_frequency,
                    if li.kind == "mixer" { format!(", {} opposite-sign pairs", li.pairs) } else { String::new() }
                ),
                _ => outln!("layer {:>2} {}: {}", li.layer, li.kind, li.note),
            }
        }
        if views.iter().any(|v| v.figures.is_some()) {
            outln!("(figures on {})", views.first().map_or("", |v| v.figures_on));
        }
    }
    Ok(())
}

/// `--png DIR`'s folder, made if it is missing. A file already there under that name is
/// refused by name ("File exists (os error 17)" was all it said, e.g. for `explain --png
/// x.png y.png`, where the first image was taken for the folder).
fn png_folder(dir: &Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(Error::Input(format!("--png {}: a file, not a folder (--png names the folder to write the PNGs into)", dir.display())));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))
}

/// `explain IMAGE...`: per image the top-k classes with their evidence maps.
pub fn explain_images(model: &Model, images: &[PathBuf], top_k: usize, json: bool, png: Option<&Path>, relative: bool) -> Result<()> {
    let mut report = crate::cli::Report::new(json, images.len());
    let mut written = Vec::new();
    let mut approximate = false;
    // Each image's PNGs are named after its file; a name met before in this run (a/x.png and
    // b/x.png) gets "-2", "-3", … rather than overwriting the first image's.
    let mut stems = std::collections::HashSet::<String>::new();
    if let Some(dir) = png {
        png_folder(dir)?;
    }
    let unread = crate::cli::in_batches(
        model,
        images,
        model.max_batch(),
        &mut report,
        |inputs| model.explain_blocking(inputs),
        |ex, inputs, i, path, report| {
            approximate |= ex.approximate;
            let (gh, gw) = ex.grid;
            let classes = ex.output.classes;
            let top = ex.output.top_k(i, top_k);
            let mut rows = Vec::new();
            let base = png.map(|_| eye(model, &inputs[i * model.input_len()..(i + 1) * model.input_len()]));
            let name = if crate::cli::is_stdin(path) { "stdin" } else { path.file_stem().and_then(|s| s.to_str()).unwrap_or("image") };
            let stem = (1..).map(|n| if n == 1 { name.to_string() } else { format!("{name}-{n}") }).find(|s| !stems.contains(s)).unwrap_or_default();
            stems.insert(stem.clone());
            for &c in &top {
                let map = ex.map(i, c);
                let logit = ex.output.logits[i * classes + c];
                let label = labels::label(&model.info, c);
                if !json {
                    let (best, v) = map.iter().enumerate().fold((0, f32::MIN), |b, (t, &v)| if v > b.1 { (t, v) } else { b });
                    outln!(
                        "{}  {label}: logit {logit:.3} = {:.3} from tokens + bias {:.3}; strongest token ({}, {}) {v:+.3}",
                        path.display(),
                        map.iter().sum::<f32>(),
                        ex.bias[c],
                        best / gw,
                        best % gw
                    );
                }
                if let (Some(dir), Some(base)) = (png, &base) {
                    // --relative: each token against the mean token (the page's toggle).
                    let mean = map.iter().sum::<f32>() / map.len().max(1) as f32;
                    let shown: Vec<f32> = map.iter().map(|v| if relative { v - mean } else { *v }).collect();
                    let map = &shown[..];
                    let s = colour::scale(map);
                    save(&overlay(base, map, ex.grid, |v| colour::diverging(v, s)), dir, &format!("{stem}_evidence_{c}.png"), &mut written)?;
                }
                rows.push(serde_json::json!({"index": c, "label": label, "logit": logit, "probability": ex.output.probs[i * classes + c], "bias": ex.bias[c], "map": map}));
            }
            report.push(serde_json::json!({"image": path.display().to_string(), "grid": [gh, gw], "approximate": ex.approximate, "classes": rows}));
            Ok(())
        },
    )?;
    for p in &written {
        eprintln!("wrote {}", p.display());
    }
    if !json && approximate {
        outln!("(PoolFormer: the head normalises after pooling; each token's share is taken with this image's pooled statistics, so the split is approximate per token, exact in sum)");
    }
    crate::cli::all_read(unread)
}

/// Raw mode: X [N, C, H, W] (as for `logits`) -> `out` float32 [N, classes, gh, gw] with
/// `Y.sum((2, 3)) + bias == logits`; the bias [classes] into `bias_out` when given.
pub fn explain_raw(model: &Model, data: &[f32], out: &Path, bias_out: Option<&Path>) -> Result<()> {
    let ex = model.explain_blocking(data)?;
    let n = ex.output.logits.len() / ex.output.classes.max(1);
    crate::cli::write_npy(out, &[n, ex.output.classes, ex.grid.0, ex.grid.1], &ex.maps)?;
    if let Some(b) = bias_out {
        crate::cli::write_npy(b, &[ex.bias.len()], &ex.bias)?;
    }
    Ok(())
}
