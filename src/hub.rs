//! timm checkpoints from the Hugging Face hub, for the desktop app and the CLI's `--weights
//! hf-hub:owner/name`: `<base>/<repo>/resolve/main/model.safetensors`, downloaded on a thread
//! into a cache directory with progress the window (or the CLI's bar) polls. The base URL is
//! configurable (`--hub`, `TOKENMIX_HUB`), so tests serve a local file.
//! A download can be cancelled; one whose server stops answering fails after a while; a
//! failed or cancelled one leaves no partial file behind.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};

pub use crate::hubname::{model_url, parse_repo, HUB};
/// The largest checkpoint a download accepts: the largest model file tokenmix reads.
pub const MAX_BYTES: u64 = crate::file::MAX_MODEL_BYTES;
/// How long the server may take to accept the connection, and to send each piece.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Where downloads live: `$TOKENMIX_CACHE_DIR`, else `$XDG_CACHE_HOME/tokenmix/hub`, else
/// `~/.cache/tokenmix/hub`.
pub fn cache_dir() -> PathBuf {
    crate::env::cache_dir_override().unwrap_or_else(|| crate::env::cache_home().join("hub"))
}

/// A download's state, shared with the window.
#[derive(Clone, Debug, PartialEq)]
pub enum Progress {
    Running {
        loaded: u64,
        total: Option<u64>,
    },
    /// The file in the cache, and whether it came from the cache without a download.
    Done {
        path: PathBuf,
        cached: bool,
    },
    Failed(String),
}

/// One download in flight (or finished).
pub struct Download {
    pub repo: String,
    pub url: String,
    state: Arc<Mutex<Progress>>,
    cancelled: Arc<AtomicBool>,
}

impl Download {
    /// Starts fetching `repo` (any spelling [`parse_repo`] takes) from `base` into the cache
    /// folder `cache` on a thread; a file already in the cache is used as is.
    pub fn start(base: &str, repo: &str, cache: &Path) -> Result<Download> {
        let repo = &parse_repo(repo)?;
        let url = model_url(base, repo);
        let path = cache.join(repo.replace('/', "--")).join("model.safetensors");
        let state = Arc::new(Mutex::new(Progress::Running { loaded: 0, total: None }));
        let cancelled = Arc::new(AtomicBool::new(false));
        if path.is_file() {
            *state.lock().map_err(|_| Error::Input("download state poisoned".into()))? = Progress::Done { path, cached: true };
        } else {
            let (s, u, c) = (state.clone(), url.clone(), cancelled.clone());
            std::thread::spawn(move || {
                let end = match fetch(&u, &path, &s, &c) {
                    Ok(()) => Progress::Done { path, cached: false },
                    // The message itself ("URL: why"), without the error kind's "input: ".
                    Err(Error::Input(why)) => Progress::Failed(why),
                    Err(e) => Progress::Failed(e.to_string()),
                };
                if let Ok(mut g) = s.lock() {
                    *g = end;
                }
            });
        }
        Ok(Download { repo: repo.to_string(), url, state, cancelled })
    }

    /// Asks the download to stop: its thread ends at its next read (at most the read timeout
    /// later) and removes its partial file.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    pub fn progress(&self) -> Progress {
        self.state.lock().map(|g| g.clone()).unwrap_or_else(|_| Progress::Failed("download state poisoned".into()))
    }
}

fn fetch(url: &str, path: &Path, state: &Mutex<Progress>, cancelled: &AtomicBool) -> Result<()> {
    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_connect(Some(CONNECT_TIMEOUT)).timeout_per_read(Some(READ_TIMEOUT)).build().into();
    let mut response = agent.get(url).call().map_err(|e| Error::Input(format!("{url}: {e}")))?;
    let total = response.body().content_length();
    if total.is_some_and(|t| t > MAX_BYTES) {
        return Err(Error::Input(format!("{url}: {} bytes is more than a checkpoint of these families needs", total.unwrap_or(0))));
    }
    let dir = path.parent().ok_or_else(|| Error::Input("cache path has no folder".into()))?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    // Written beside the target under a name of its own (two downloads of one repository, in
    // two windows, do not write one file) and renamed at the end: a cut download never looks
    // complete, and a failed or cancelled one is removed.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    remove_stale_parts(path);
    let part = path.with_extension(format!("{}-{}.part", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst)));
    let written = write_part(url, &part, response.body_mut().with_config().limit(MAX_BYTES).reader(), total, state, cancelled)
        .and_then(|()| std::fs::rename(&part, path).map_err(|e| Error::io(path, e)));
    if written.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    written
}

/// A partial file not written to for this long was left by a download that can no longer be
/// running: a live one writes after every read, and a read waits at most [`READ_TIMEOUT`].
const STALE_PART: Duration = Duration::from_secs(300);

/// Removes the partial files of `path` that downloads killed part-way (Ctrl-C, a closed
/// window, a crash) left beside it; those of downloads still running, in other processes too,
/// are written to within [`STALE_PART`] and stay. Best effort: what cannot be removed stays.
fn remove_stale_parts(path: &Path) {
    let (Some(dir), Some(stem)) = (path.parent(), path.file_stem().and_then(|s| s.to_str())) else { return };
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_part = name.to_str().is_some_and(|n| n.strip_prefix(stem).is_some_and(|rest| rest.starts_with('.') && rest.ends_with(".part")));
        let idle = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        if is_part && idle.is_some_and(|d| d > STALE_PART) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn write_part(url: &str, part: &Path, mut reader: impl Read, total: Option<u64>, state: &Mutex<Progress>, cancelled: &AtomicBool) -> Result<()> {
    let mut file = std::fs::File::create(part).map_err(|e| Error::io(part, e))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut loaded = 0u64;
    loop {
        let n = reader.read(&mut buf).map_err(|e| Error::Input(format!("{url}: {e}")))?;
        // (After every read, the last one too: a cancelled download renames nothing.)
        if cancelled.load(Ordering::SeqCst) {
            return Err(Error::Input(format!("{url}: cancelled")));
        }
        if n == 0 {
            break;
        }
        file.write_all(&buf[..n]).map_err(|e| Error::io(part, e))?;
        loaded += n as u64;
        if let Ok(mut g) = state.lock() {
            *g = Progress::Running { loaded, total };
        }
    }
    if total.is_some_and(|t| t != loaded) {
        return Err(Error::Input(format!("{url}: the download stopped at {loaded} of {} bytes", total.unwrap_or(0))));
    }
    file.flush().map_err(|e| Error::io(part, e))
}
