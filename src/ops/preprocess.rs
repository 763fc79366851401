//! `preprocess.wgsl`: RGBA8 pixels → the model's normalised CHW input (resize, crop, normalise).

use crate::error::{Error, Result};
use crate::gpu::{Binding, Gpu, Kernel};
use crate::preprocess::{Geometry, Preprocess, WindowTaps};

use super::{check_extent, groups, Op};

const SOURCE: &str = include_str!("../../shaders/preprocess.wgsl");
const BINDINGS: &[Binding] = &[Binding::Uniform, Binding::Read, Binding::ReadWrite, Binding::Read];

/// Writes the model input for a `width` x `height` RGBA image held in `pixels` (one u32 per
/// pixel) into `out`, using the resize/crop `g` computed for the original image size: PIL's
/// resampling, with the taps computed here ([`WindowTaps`]) and uploaded beside the pixels.
pub fn rgba_to_input(gpu: &Gpu, pp: &Preprocess, g: &Geometry, pixels: &wgpu::Buffer, width: usize, height: usize, out: &wgpu::Buffer) -> Result<Op> {
    pp.validate()?;
    let [h, w] = pp.size;
    check_extent("preprocess pixels", pixels, 0, (width * height) as u64)?;
    check_extent("preprocess output", out, 0, (pp.channels * h * w) as u64)?;
    if width == 0 || height == 0 {
        return Err(Error::Input("image has zero size".into()));
    }
    let pipeline = gpu.pipeline(&Kernel::new("preprocess", SOURCE, BINDINGS))?;
    let table = WindowTaps::new(width, height, g, pp.size)?.table();
    let taps = gpu.storage_words("preprocess taps", bytemuck::cast_slice(&table))?;
    let mut params: Vec<u32> = [width, height, w, h, pp.channels, 0, 0, 0].iter().map(|&v| v as u32).collect();
    for values in [&pp.mean, &pp.std] {
        let mut v = [0f32; 4];
        for (d, s) in v.iter_mut().zip(values.iter()) {
            *d = *s;
        }
        params.extend(v.map(f32::to_bits));
    }
    Op::new(gpu, pipeline, &params, &[pixels, out, &taps], [groups(w as u32, 8), groups(h as u32, 8), 1])
}
