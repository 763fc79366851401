//! `preprocess.wgsl`: RGBA8 or RGB8 pixels → the model's normalised CHW input (resize, crop,
//! normalise).

use crate::error::{Error, Result};
use crate::gpu::{Binding, Gpu, Kernel, Resource};
use crate::preprocess::{Preprocess, Window};

use super::{check_extent, groups, Op};

const SOURCE: &str = include_str!("../../shaders/preprocess.wgsl");
const BINDINGS: &[Binding] = &[Binding::Uniform, Binding::Read, Binding::ReadWrite, Binding::Read];
/// Words of zeros after a band's pixels: the shader's packed-RGB reads go up to two words past
/// the last pixel's first byte's word.
const PAD_WORDS: usize = 2;

/// Writes the model input for the part of an image a crop window reads
/// ([`Preprocess::prepare`]) into `out`: PIL's resampling with the window's taps, as two
/// dispatches (horizontal, then vertical), the pixels uploaded as they are (RGBA, or packed RGB)
/// in as few bands of rows as the adapter's binding limit allows (one, unless the window is over
/// 128 MiB on a WebGPU default).
pub fn window_to_input(gpu: &Gpu, pp: &Preprocess, window: &Window, out: &wgpu::Buffer) -> Result<Op> {
    let row_bytes = (window.width.max(1) * window.bpp.max(1)) as u64;
    let band_rows = (gpu.binding_limit().saturating_sub(4 * (PAD_WORDS as u64 + 1)) / row_bytes).max(1) as usize;
    window_to_input_in_bands(gpu, pp, window, out, band_rows)
}

/// [`window_to_input`] with the pixels bound `band_rows` rows at a time (the tests' way to run
/// the banded path on an adapter whose binding limit a test image does not reach).
pub fn window_to_input_in_bands(gpu: &Gpu, pp: &Preprocess, window: &Window, out: &wgpu::Buffer, band_rows: usize) -> Result<Op> {
    pp.validate()?;
    let [h, w] = pp.size;
    let Window { width, height, taps, .. } = window;
    let (width, height) = (*width, *height);
    check_extent("preprocess output", out, 0, (pp.channels * h * w) as u64)?;
    if width == 0 || height == 0 || band_rows == 0 || !window.taps_inside() || taps.cols.len() != w || taps.rows.len() != h {
        return Err(Error::Input(format!(
            "{} bytes and the taps of a {}x{} crop for a {width}x{height} window of {} bytes a pixel in bands of {band_rows} rows",
            window.pixels.len(),
            taps.cols.len(),
            taps.rows.len(),
            window.bpp
        )));
    }
    let table = gpu.storage_words("preprocess taps", bytemuck::cast_slice(&taps.table()))?;
    let mid = gpu.storage("preprocess rows", height * w)?;
    let params = |src_w: usize, rows: usize, row0: usize| {
        let mut p: Vec<u32> = [src_w, rows, row0, pp.channels, w, h, 0, 0].iter().map(|&v| v as u32).collect();
        for values in [&pp.mean, &pp.std] {
            let mut v = [0f32; 4];
            v.iter_mut().zip(values.iter()).for_each(|(d, s)| *d = *s);
            p.extend(v.map(f32::to_bits));
        }
        p
    };
    let row_bytes = width * window.bpp;
    let bands = window
        .pixels
        .chunks(band_rows * row_bytes)
        .enumerate()
        .map(|(i, band)| Ok((i * band_rows, band.len() / row_bytes, gpu.storage_bytes("image", band, PAD_WORDS)?)))
        .collect::<Result<Vec<_>>>()?;
    let each: Vec<(Vec<u32>, Vec<Resource>, [u32; 3])> = bands
        .iter()
        .map(|(row0, rows, buf)| {
            let groups_xy = [groups(w as u32, 8), groups(*rows as u32, 8), 1];
            (params(width, *rows, *row0), vec![Resource::Buffer(buf), Resource::Buffer(&mid), Resource::Buffer(&table)], groups_xy)
        })
        .collect();
    let kernel = Kernel::new("preprocess", SOURCE, BINDINGS).flag("GREY", pp.channels == 1).flag("RGB", window.bpp == 3);
    let horizontal = Op::dispatches(gpu, gpu.pipeline(&kernel)?, &each)?;
    let vertical = Op::new(
        gpu,
        gpu.pipeline(&Kernel::new("preprocess", SOURCE, BINDINGS).flag("VERTICAL", true))?,
        &params(0, 0, 0),
        &[&mid, out, &table],
        [groups(w as u32, 8), groups(h as u32, 8), 1],
    )?;
    horizontal.then(vertical)
}
