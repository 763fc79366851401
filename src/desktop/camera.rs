//! Frames from a camera, behind a small trait so the capture crate can be swapped: the app only
//! asks for the latest frame. [`Synthetic`] draws a moving test pattern (tests, demos);
//! [`Unavailable`] is what a build without a capture backend has, and says so.

use image::RgbImage;

use crate::error::{Error, Result};

pub trait Camera: Send {
    /// What the picker shows.
    fn name(&self) -> String;
    /// Starts capturing; an error says why there is no picture (no device, no permission, no
    /// capture backend in this build).
    fn start(&mut self) -> Result<()>;
    /// The latest frame, once started.
    fn frame(&mut self) -> Result<RgbImage>;
    fn stop(&mut self);
    fn running(&self) -> bool;
}

/// A moving pattern: a bright bar on black that shifts by one column per frame, like a
/// garment on Fashion-MNIST's dark background.
pub struct Synthetic {
    tick: u32,
    on: bool,
}

impl Synthetic {
    pub fn new() -> Self {
        Synthetic { tick: 0, on: false }
    }
}

impl Default for Synthetic {
    fn default() -> Self {
        Self::new()
    }
}

impl Camera for Synthetic {
    fn name(&self) -> String {
        "synthetic test pattern".into()
    }
    fn start(&mut self) -> Result<()> {
        self.on = true;
        Ok(())
    }
    fn frame(&mut self) -> Result<RgbImage> {
        if !self.on {
            return Err(Error::Input("the camera is not started".into()));
        }
        self.tick = self.tick.wrapping_add(1);
        let shift = self.tick % 16;
        Ok(RgbImage::from_fn(64, 64, |x, y| {
            let inside = (16..48).contains(&y) && (8 + shift..40 + shift).contains(&x);
            image::Rgb(if inside { [220, 220, 220] } else { [0, 0, 0] })
        }))
    }
    fn stop(&mut self) {
        self.on = false;
    }
    fn running(&self) -> bool {
        self.on
    }
}

/// No capture backend: every start fails with a message naming what is missing.
pub struct Unavailable;

impl Camera for Unavailable {
    fn name(&self) -> String {
        "no camera".into()
    }
    fn start(&mut self) -> Result<()> {
        Err(Error::Input(
            "no camera: this build has no capture backend (open an image, drop one on the window, or use a sample; tests use the synthetic camera)"
                .into(),
        ))
    }
    fn frame(&mut self) -> Result<RgbImage> {
        self.start().map(|_| RgbImage::new(1, 1))
    }
    fn stop(&mut self) {}
    fn running(&self) -> bool {
        false
    }
}
