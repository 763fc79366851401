//! Frames from a camera, behind a small trait so the capture crate can be swapped: the app only
//! asks for the latest frame. [`Ffmpeg`] captures stills through the ffmpeg program (the
//! default); [`Synthetic`] draws a moving test pattern (tests, demos); [`Unavailable`] says
//! there is no camera.

use image::RgbImage;

use crate::error::{Error, Result};

/// A still being taken, run where waiting for it does not stop the window (the app's work
/// thread).
pub type Grab = Box<dyn FnOnce() -> Result<RgbImage> + Send>;

pub trait Camera: Send {
    /// What the picker shows.
    fn name(&self) -> String;
    /// Starts capturing; an error says why there is no picture (no device, no permission, no
    /// capture backend in this build).
    fn start(&mut self) -> Result<()>;
    /// The latest frame, once started.
    fn frame(&mut self) -> Result<RgbImage>;
    /// The next frame, to be taken by the returned function (on another thread); an error now
    /// where the camera cannot give one (not started). A camera whose frames are slow to come
    /// takes them in the function; by default the frame is taken here.
    fn grab(&mut self) -> Result<Grab> {
        let frame = self.frame()?;
        Ok(Box::new(move || Ok(frame)))
    }
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
        Err(Error::Input("no camera: none is set up here (open an image, drop one on the window, paste one, or use a sample)".into()))
    }
    fn frame(&mut self) -> Result<RgbImage> {
        self.start().map(|_| RgbImage::new(1, 1))
    }
    fn stop(&mut self) {}
    fn running(&self) -> bool {
        false
    }
}

/// A camera read through the `ffmpeg` program, one still per capture: `v4l2` on Linux
/// (`/dev/video0`, or `TOKENMIX_CAMERA`), `avfoundation` on macOS (device `0`), `dshow` on
/// Windows (`TOKENMIX_CAMERA` = the device name). No build-time dependency; where ffmpeg or the
/// device is missing, `start` says which.
pub struct Ffmpeg {
    input: (String, String),
    on: bool,
}

impl Ffmpeg {
    pub fn new() -> Ffmpeg {
        let device = std::env::var("TOKENMIX_CAMERA").ok().filter(|d| !d.is_empty());
        let input = if cfg!(target_os = "macos") {
            ("avfoundation".to_string(), device.unwrap_or_else(|| "0".into()))
        } else if cfg!(windows) {
            ("dshow".to_string(), format!("video={}", device.unwrap_or_default()))
        } else {
            ("v4l2".to_string(), device.unwrap_or_else(|| "/dev/video0".into()))
        };
        Ffmpeg { input, on: false }
    }
}

impl Default for Ffmpeg {
    fn default() -> Self {
        Self::new()
    }
}

impl Camera for Ffmpeg {
    fn name(&self) -> String {
        format!("{} ({})", self.input.1, self.input.0)
    }
    fn start(&mut self) -> Result<()> {
        let (format, device) = &self.input;
        if format == "v4l2" && !std::path::Path::new(device).exists() {
            return Err(Error::Input(format!("no camera: {device} does not exist (TOKENMIX_CAMERA names another device)")));
        }
        if format == "dshow" && device == "video=" {
            return Err(Error::Input("no camera: set TOKENMIX_CAMERA to the DirectShow device name".into()));
        }
        match std::process::Command::new("ffmpeg").arg("-version").output() {
            Ok(o) if o.status.success() => {
                self.on = true;
                Ok(())
            }
            _ => Err(Error::Input("no camera: capturing needs the ffmpeg program on the PATH".into())),
        }
    }
    fn frame(&mut self) -> Result<RgbImage> {
        self.grab()?()
    }
    /// One still from ffmpeg, taken in the returned function (opening the device and exposing
    /// take a second or so).
    fn grab(&mut self) -> Result<Grab> {
        if !self.on {
            return Err(Error::Input("the camera is not started".into()));
        }
        let ((format, device), name) = (self.input.clone(), self.name());
        Ok(Box::new(move || {
            let mut ffmpeg = std::process::Command::new("ffmpeg");
            ffmpeg.args(["-loglevel", "error", "-f", &format, "-i", &device, "-frames:v", "1", "-f", "image2pipe", "-vcodec", "png", "-"]);
            // A busy or stuck device is not waited for without end: ffmpeg is ended after a while.
            let out = output_within(ffmpeg, FRAME_TIMEOUT).map_err(|e| Error::Input(format!("camera {name}: ffmpeg: {e}")))?;
            if !out.status.success() {
                let why = String::from_utf8_lossy(&out.stderr);
                return Err(Error::Input(format!("camera {name}: {}", why.lines().last().unwrap_or("ffmpeg failed"))));
            }
            Ok(image::load_from_memory(&out.stdout).map_err(|e| Error::Input(format!("camera frame: {e}")))?.to_rgb8())
        }))
    }
    fn stop(&mut self) {
        self.on = false;
    }
    fn running(&self) -> bool {
        self.on
    }
}

/// How long one still from ffmpeg may take (opening the device, exposure, one frame).
const FRAME_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(8);

/// `command`'s output, as `Command::output` gives it, or an error (and the process killed)
/// when it has not ended within `limit`.
pub fn output_within(mut command: std::process::Command, limit: std::time::Duration) -> std::io::Result<std::process::Output> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    // The pipes are drained on threads of their own, so a large frame cannot block the child;
    // they hand their bytes over a channel, so a grandchild still holding a pipe open cannot
    // block this function either.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            let _ = tx.send(bytes);
        });
        rx
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let start = std::time::Instant::now();
    let status = loop {
        let waited = child.try_wait();
        if !matches!(waited, Ok(None)) || start.elapsed() > limit {
            if let Ok(Some(status)) = waited {
                break status;
            }
            // Timed out, or the wait itself failed: the process does not outlive the call.
            let _ = child.kill();
            let _ = child.wait();
            return Err(match waited {
                Err(e) => e,
                _ => std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no answer within {} s", limit.as_secs_f64())),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let take = |rx: std::sync::mpsc::Receiver<Vec<u8>>| rx.recv_timeout(std::time::Duration::from_secs(2)).unwrap_or_default();
    Ok(std::process::Output { status, stdout: take(stdout), stderr: take(stderr) })
}
