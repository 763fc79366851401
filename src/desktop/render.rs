//! Offscreen rendering of the app's frames (`tokenmix view --screenshot`): egui's own wgpu
//! renderer drawing into a texture on a device tokenmix made — the inference device itself
//! where the executor is the GPU — and the pixels read back. No window or display needed.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::Gpu;

/// The texture format frames are drawn in (egui's shader writes gamma-space colours into a
/// non-sRGB target, which is what a PNG holds).
const FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;

pub struct Offscreen {
    gpu: Arc<Gpu>,
    renderer: egui_wgpu::Renderer,
}

impl Offscreen {
    pub fn new(gpu: Arc<Gpu>) -> Offscreen {
        let renderer = egui_wgpu::Renderer::new(&gpu.device, FORMAT, egui_wgpu::RendererOptions::default());
        Offscreen { gpu, renderer }
    }

    /// Draws one frame's output at `size` physical pixels and returns its pixels.
    pub fn render(&mut self, ctx: &egui::Context, output: egui::FullOutput, size: [u32; 2]) -> Result<image::RgbaImage> {
        let (device, queue) = (&self.gpu.device, &self.gpu.queue);
        for (id, deltas) in &output.textures_delta.set {
            for delta in deltas {
                self.renderer.update_texture(device, queue, *id, delta);
            }
        }
        let ppp = output.pixels_per_point;
        let jobs = ctx.tessellate(output.shapes, ppp);
        let screen = egui_wgpu::ScreenDescriptor { size_in_pixels: size, pixels_per_point: ppp };
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("frame") });
        let user = self.renderer.update_buffers(device, queue, &mut encoder, &jobs, &screen);
        let extent = wgpu::Extent3d { width: size[0], height: size[1], depth_or_array_layers: 1 };
        let texture = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("frame"),
            size: extent,
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: FORMAT,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
            view_formats: &[],
        });
        let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
        {
            let mut pass = encoder
                .begin_render_pass(&wgpu::RenderPassDescriptor {
                    label: Some("frame"),
                    color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                        view: &view,
                        resolve_target: None,
                        ops: wgpu::Operations { load: wgpu::LoadOp::Clear(wgpu::Color::WHITE), store: wgpu::StoreOp::Store },
                        depth_slice: None,
                    })],
                    ..Default::default()
                })
                .forget_lifetime();
            self.renderer.render(&mut pass, &jobs, &screen);
        }
        // Rows padded to the copy alignment, unpadded after mapping.
        let row = size[0] as usize * 4;
        let padded = row.div_ceil(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT as usize) * wgpu::COPY_BYTES_PER_ROW_ALIGNMENT as usize;
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("frame read-back"),
            size: (padded * size[1] as usize) as u64,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        encoder.copy_texture_to_buffer(
            texture.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: &staging,
                layout: wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(padded as u32), rows_per_image: None },
            },
            extent,
        );
        queue.submit(user.into_iter().chain(std::iter::once(encoder.finish())));
        for id in &output.textures_delta.free {
            self.renderer.free_texture(id);
        }
        let data = pollster::block_on(self.gpu.read_back_bytes(&staging))?;
        let pixels: Vec<u8> = data.chunks_exact(padded).flat_map(|r| r[..row].iter().copied()).collect();
        image::RgbaImage::from_raw(size[0], size[1], pixels).ok_or_else(|| Error::Gpu("frame read-back has the wrong size".into()))
    }
}
