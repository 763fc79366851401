//! Frames from a camera, behind a small trait so the capture crate can be swapped: the app asks
//! for the newest frame (a live preview) and takes a still from it. [`Ffmpeg`] streams frames
//! from the ffmpeg program (the default); [`Synthetic`] draws a moving test pattern (tests,
//! demos); [`Unavailable`] says there is no camera.

use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, Condvar, Mutex};

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
    /// The newest frame of a camera that streams (what the window shows while it runs), with
    /// its number, when it is newer than frame `seen` (0: none seen yet); `None` when there is no
    /// newer one yet, or the camera shows no preview. An error where the stream ended (the
    /// device went away or is busy, ffmpeg failed).
    fn preview_since(&mut self, _seen: u64) -> Result<Option<(u64, RgbImage)>> {
        Ok(None)
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
    /// A new frame at every call: the pattern moves as fast as the window draws.
    fn preview_since(&mut self, _seen: u64) -> Result<Option<(u64, RgbImage)>> {
        let frame = self.frame()?;
        Ok(Some((u64::from(self.tick), frame)))
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

/// A camera read through the `ffmpeg` program, which streams its frames (at most 15 a second,
/// at most 640 pixels wide) as PPM images down a pipe: `v4l2` on Linux (`/dev/video0`, or
/// `TOKENMIX_CAMERA`), `avfoundation` on macOS (device `0`), `dshow` on Windows
/// (`TOKENMIX_CAMERA` = the device name); `TOKENMIX_CAMERA=lavfi:SOURCE` reads one of ffmpeg's
/// own test sources instead (e.g. `lavfi:testsrc2=size=320x240:rate=15`: a demo without a
/// camera, and what the tests use). No build-time dependency; where ffmpeg or the device is
/// missing, `start` says which, and where the stream fails later (a busy device), the preview
/// says why. A still is the newest frame: no wait for the device per capture.
pub struct Ffmpeg {
    input: (String, String),
    stream: Option<Stream>,
}

/// The running ffmpeg process and what its reader thread has seen.
struct Stream {
    child: std::process::Child,
    shared: Arc<(Mutex<Frames>, Condvar)>,
}

/// The newest frame, its number (1 for the first), and why the stream ended, once it has.
#[derive(Default)]
struct Frames {
    newest: Option<(u64, RgbImage)>,
    ended: Option<String>,
}

impl Ffmpeg {
    pub fn new() -> Ffmpeg {
        let device = std::env::var("TOKENMIX_CAMERA").ok().filter(|d| !d.is_empty());
        if let Some(source) = device.as_deref().and_then(|d| d.strip_prefix("lavfi:")) {
            return Ffmpeg::with_input("lavfi", source);
        }
        let input = if cfg!(target_os = "macos") {
            ("avfoundation".to_string(), device.unwrap_or_else(|| "0".into()))
        } else if cfg!(windows) {
            ("dshow".to_string(), format!("video={}", device.unwrap_or_default()))
        } else {
            ("v4l2".to_string(), device.unwrap_or_else(|| "/dev/video0".into()))
        };
        Ffmpeg { input, stream: None }
    }

    /// ffmpeg reading `device` with input format `format` (`-f format -i device`).
    pub fn with_input(format: &str, device: &str) -> Ffmpeg {
        Ffmpeg { input: (format.to_string(), device.to_string()), stream: None }
    }

    /// The ffmpeg process's id while it streams.
    pub fn process_id(&self) -> Option<u32> {
        self.stream.as_ref().map(|s| s.child.id())
    }
}

impl Default for Ffmpeg {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Ffmpeg {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Camera for Ffmpeg {
    fn name(&self) -> String {
        format!("{} ({})", self.input.1, self.input.0)
    }
    fn start(&mut self) -> Result<()> {
        use std::process::{Command, Stdio};
        self.stop();
        let (format, device) = &self.input;
        if format == "v4l2" && !std::path::Path::new(device).exists() {
            return Err(Error::Input(format!("no camera: {device} does not exist (TOKENMIX_CAMERA names another device)")));
        }
        if format == "dshow" && device == "video=" {
            return Err(Error::Input("no camera: set TOKENMIX_CAMERA to the DirectShow device name".into()));
        }
        let mut ffmpeg = Command::new("ffmpeg");
        // `-re` paces a test source as a camera is paced; the filter keeps frames few and small.
        ffmpeg.args(["-nostdin", "-loglevel", "error"]);
        if format == "lavfi" {
            ffmpeg.arg("-re");
        }
        ffmpeg
            .args(["-f", format, "-i", device, "-vf", "fps=15,scale=w=min(640\\,iw):h=-2", "-f", "image2pipe", "-vcodec", "ppm", "-"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = ffmpeg.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::Input("no camera: capturing needs the ffmpeg program on the PATH".into()),
            _ => Error::Input(format!("no camera: ffmpeg did not start: {e}")),
        })?;
        let shared = Arc::new((Mutex::new(Frames::default()), Condvar::new()));
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let seen = shared.clone();
        let name = self.name();
        std::thread::spawn(move || {
            // ffmpeg's own words on why it stopped: the last line it wrote.
            let why = std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut e) = stderr {
                    let _ = e.read_to_string(&mut text);
                }
                text.lines().rev().find(|l| !l.trim().is_empty()).map(str::to_string)
            });
            let mut reader = stdout.map(BufReader::new);
            let mut count = 0u64;
            let ended = loop {
                let Some(r) = reader.as_mut() else { break "no output".to_string() };
                match read_ppm(r) {
                    Ok(Some(frame)) => {
                        count += 1;
                        let (lock, wake) = &*seen;
                        if let Ok(mut f) = lock.lock() {
                            f.newest = Some((count, frame));
                        }
                        wake.notify_all();
                    }
                    Ok(None) => break "the stream ended".to_string(),
                    Err(e) => break format!("unreadable frame: {e}"),
                }
            };
            let why = why.join().ok().flatten().unwrap_or(ended);
            let (lock, wake) = &*seen;
            if let Ok(mut f) = lock.lock() {
                f.ended = Some(format!("camera {name}: {why}"));
            }
            wake.notify_all();
        });
        self.stream = Some(Stream { child, shared });
        Ok(())
    }
    fn frame(&mut self) -> Result<RgbImage> {
        self.grab()?()
    }
    /// The newest frame, waited for in the returned function where none has come yet (opening
    /// the device and exposing take a second or so).
    fn grab(&mut self) -> Result<Grab> {
        let Some(s) = &self.stream else { return Err(Error::Input("the camera is not started".into())) };
        let shared = s.shared.clone();
        let name = self.name();
        Ok(Box::new(move || {
            let (lock, wake) = &*shared;
            let poisoned = || Error::Input(format!("camera {name}: its reader failed"));
            let guard = lock.lock().map_err(|_| poisoned())?;
            let (f, _) = wake.wait_timeout_while(guard, FRAME_TIMEOUT, |f| f.newest.is_none() && f.ended.is_none()).map_err(|_| poisoned())?;
            match (&f.newest, &f.ended) {
                (Some((_, frame)), _) => Ok(frame.clone()),
                (None, Some(why)) => Err(Error::Input(why.clone())),
                (None, None) => Err(Error::Input(format!("camera {name}: no frame within {} s", FRAME_TIMEOUT.as_secs()))),
            }
        }))
    }
    fn preview_since(&mut self, seen: u64) -> Result<Option<(u64, RgbImage)>> {
        let Some(s) = &self.stream else { return Ok(None) };
        let f = s.shared.0.lock().map_err(|_| Error::Input("the camera's reader failed".into()))?;
        match (&f.newest, &f.ended) {
            (Some((n, frame)), _) if *n > seen => Ok(Some((*n, frame.clone()))),
            (_, Some(why)) => Err(Error::Input(why.clone())),
            _ => Ok(None),
        }
    }
    /// Ends the ffmpeg process (its reader thread ends with its pipe).
    fn stop(&mut self) {
        if let Some(mut s) = self.stream.take() {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
    fn running(&self) -> bool {
        self.stream.is_some()
    }
}

/// One binary PPM image (P6, 8 bits: what ffmpeg's ppm encoder writes) from `r`; `None` at the
/// end of the stream.
pub fn read_ppm(r: &mut impl BufRead) -> std::io::Result<Option<RgbImage>> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    if r.fill_buf()?.is_empty() {
        return Ok(None);
    }
    let magic = ppm_token(r)?;
    if magic != "P6" {
        return Err(bad("not a binary PPM (P6)"));
    }
    let mut number = |what: &str| ppm_token(r).and_then(|t| t.parse::<u32>().map_err(|_| bad(what)));
    let (w, h, max) = (number("width")?, number("height")?, number("maximum value")?);
    if w == 0 || h == 0 || w > 8192 || h > 8192 || max != 255 {
        return Err(bad("a frame of an unexpected size or depth"));
    }
    let mut data = vec![0u8; w as usize * h as usize * 3];
    r.read_exact(&mut data)?;
    RgbImage::from_raw(w, h, data).map(Some).ok_or_else(|| bad("short frame"))
}

/// The next whitespace-delimited token of a PPM header, and the one whitespace byte after it.
fn ppm_token(r: &mut impl BufRead) -> std::io::Result<String> {
    let mut token = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        r.read_exact(&mut byte)?;
        match byte[0] {
            b'#' if token.is_empty() => {
                let mut comment = Vec::new();
                r.read_until(b'\n', &mut comment)?;
            }
            c if c.is_ascii_whitespace() => {
                if !token.is_empty() {
                    break;
                }
            }
            c => {
                if token.len() > 16 {
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "a PPM header token is too long"));
                }
                token.push(c);
            }
        }
    }
    Ok(String::from_utf8_lossy(&token).into_owned())
}

/// How long the first frame from ffmpeg may take (opening the device, exposure, one frame).
const FRAME_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(8);
