//! Shared test helpers: one GPU per test binary, named tolerances, fixture loading.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use tokenmix::gpu::{GemmVariant, Precision, RowKernel};
use tokenmix::{Device, Gpu};

/// Named tolerances (Burn-style presets) instead of magic numbers in each test.
pub mod tol {
    /// Golden parity with timm: max|Δlogit| ≤ GOLDEN · max(1, max|logit_timm|).
    pub const GOLDEN: f32 = 1e-4;
    /// The same with f16 GEMM weights (`--precision f16`): relative logit error ≤ 1e-2.
    pub const F16: f32 = 1e-2;
    /// A single fp32 GEMM against a f64 CPU reference, relative to the output scale.
    pub const GEMM: f32 = 1e-5;
    /// Norms and reductions against a f64 CPU reference.
    pub const NORM: f32 = 1e-5;
}

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures")
}

/// Creates a device with the given GEMM variant (or the adapter's default) and prints the
/// adapter, so `make test` output shows the suite runs on a real adapter.
pub fn gpu_with(variant: Option<GemmVariant>) -> Arc<Gpu> {
    let mut gpu = pollster::block_on(Gpu::new()).expect("a wgpu adapter (lavapipe on CI)");
    if let Some(v) = variant {
        fix_gemm(&mut gpu, v);
    }
    eprintln!("adapter: {} (gemm: {})", gpu.describe(), gpu.gemm.name());
    Arc::new(gpu)
}

/// Fixes the GEMM kernel and pairs it with the row kernels (LayerNorm, softmax, GroupNorm) its
/// kind of adapter runs: the barrier-free GEMMs (CPU rasterisers' defaults) with one invocation
/// per row, the shared-memory and tensor-core ones (real GPUs') with one workgroup per row and
/// GroupNorm in chunks, reducing by subgroups first where the adapter has them (as natively on
/// real GPUs). So the suites that run every GEMM variant on lavapipe run those forms too, each
/// beside the GEMMs it meets on an adapter (the plain workgroup form: the row-kernel tests).
pub fn fix_gemm(gpu: &mut Gpu, v: GemmVariant) {
    gpu.fix_gemm(v);
    let barrier_free = matches!(v, GemmVariant::Register | GemmVariant::Subgroup | GemmVariant::Texture);
    gpu.rows = match (barrier_free, gpu.subgroup_lanes()) {
        (true, _) => RowKernel::Invocation,
        (false, Some(_)) => RowKernel::Subgroup,
        (false, None) => RowKernel::Workgroup,
    };
}

/// A test's own scratch folder (`tokenmix-{what}-…` in the temporary directory), removed when
/// the test ends, pass or fail.
pub fn scratch(what: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("tokenmix-{what}-")).tempdir().expect("a temporary folder")
}

/// One shared default device per test binary.
pub fn gpu() -> Arc<Gpu> {
    static GPU: OnceLock<Arc<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| gpu_with(None)).clone()
}

/// A device like the test adapter, with GEMM `variant`, whose storage bindings hold at most
/// `limit` bytes (to exercise batch chunking and weight splitting on a small limit).
pub fn limited(variant: GemmVariant, limit: u64) -> Arc<Gpu> {
    let mut gpu = pollster::block_on(Gpu::new()).expect("a wgpu adapter (lavapipe on CI)");
    fix_gemm(&mut gpu, variant);
    gpu.limits.max_storage_buffer_binding_size = limit;
    Arc::new(gpu)
}

/// `TOKENMIX_TEST_GEMM` narrows the suites to some executors: a comma-separated list of GPU
/// GEMM variant names and `cpu`. A value that names nothing fails loudly rather than running
/// zero cases.
pub fn wanted(name: &str) -> bool {
    std::env::var("TOKENMIX_TEST_GEMM").map_or(true, |o| o.split(',').any(|w| w.trim() == name))
}

/// Every GEMM variant the adapter supports, each on its own device (WGSL kernel tests).
pub fn all_variants() -> Vec<Arc<Gpu>> {
    let v: Vec<_> = gpu().gemm_variants().into_iter().filter(|v| wanted(v.name())).map(|v| gpu_with(Some(v))).collect();
    if v.is_empty() && !wanted("cpu") {
        panic!("TOKENMIX_TEST_GEMM={:?} names no GEMM variant of this adapter", std::env::var("TOKENMIX_TEST_GEMM"));
    }
    v
}

/// Every GEMM variant the adapter supports at f16 (as [`all_variants`], plus the kernels that
/// compute in f16: coop where the adapter has cooperative matrices, its lane-by-lane double
/// where subgroups have one size, as lavapipe's), each on a device made for `--precision f16`.
/// The test adapter must have shader-f16 (lavapipe does): its absence fails loudly rather than
/// checking nothing.
pub fn all_variants_f16() -> Vec<Arc<Gpu>> {
    let base = Arc::new(pollster::block_on(Gpu::new_at(Precision::F16)).expect("a wgpu adapter (lavapipe on CI)"));
    assert_eq!(base.precision, Precision::F16, "the test adapter has shader-f16");
    // A kernel named on purpose (`make test-coop` names coop) must run, not quietly drop out.
    if let Ok(names) = std::env::var("TOKENMIX_TEST_GEMM") {
        for name in names.split(',').map(str::trim).filter(|&n| n != "cpu") {
            let v = GemmVariant::parse(name).unwrap_or_else(|| panic!("TOKENMIX_TEST_GEMM names {name:?}, which is no GEMM variant"));
            if let Err(why) = base.supports(v) {
                panic!("TOKENMIX_TEST_GEMM names {name}, which this adapter cannot run at f16: {why}");
            }
        }
    }
    let v: Vec<_> = GemmVariant::ALL
        .into_iter()
        .filter(|&v| wanted(v.name()) && base.supports(v).is_ok())
        .map(|v| {
            let mut gpu = pollster::block_on(Gpu::new_at(Precision::F16)).expect("a wgpu adapter (lavapipe on CI)");
            fix_gemm(&mut gpu, v);
            Arc::new(gpu)
        })
        .collect();
    if v.is_empty() && !wanted("cpu") {
        panic!("TOKENMIX_TEST_GEMM={:?} names no GEMM variant of this adapter", std::env::var("TOKENMIX_TEST_GEMM"));
    }
    eprintln!(
        "f16 GEMM kernels: {}; not on this adapter: {}",
        v.iter().map(|g| g.gemm.name()).collect::<Vec<_>>().join(", "),
        GemmVariant::ALL.into_iter().filter_map(|v| base.supports(v).err().map(|why| format!("{} ({why})", v.name()))).collect::<Vec<_>>().join("; ")
    );
    v
}

/// Every executor: the WGSL path with each GEMM variant the adapter has (lavapipe in CI),
/// then the CPU executor. Never empty.
pub fn all_devices() -> Vec<Device> {
    let mut v: Vec<Device> = all_variants().into_iter().map(Device::from).collect();
    if wanted("cpu") {
        v.push(cpu());
    }
    assert!(!v.is_empty(), "no executor to test");
    v
}

/// The CPU executor.
pub fn cpu() -> Device {
    let d = Device::cpu();
    eprintln!("executor: {}", d.describe());
    d
}

/// Reads named F32 tensors from a safetensors file: (shape, data).
pub fn read_tensors(path: &std::path::Path, names: &[&str]) -> Vec<(Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("fixture parses");
    names
        .iter()
        .map(|n| {
            let t = st.tensor(n).expect("fixture tensor");
            let data = t.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            (t.shape().to_vec(), data)
        })
        .collect()
}

/// The larger of `m` and `x`, NaN once either is: `f32::max` returns the other argument for a
/// NaN, so a fold with it would call an all-NaN output a perfect match.
pub fn max_or_nan(m: f32, x: f32) -> f32 {
    if x > m || x.is_nan() {
        x
    } else {
        m
    }
}

/// `diff <= bound`, written as a call where a test fails on its negation: false for a NaN
/// difference, which `diff > bound` would let through.
pub fn within(diff: f32, bound: f32) -> bool {
    diff <= bound
}

/// max|v|; NaN if any value is NaN.
pub fn max_abs(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |m, x| max_or_nan(m, x.abs()))
}

/// max|a - b|; NaN if any difference is NaN, so every `diff <= bound` check fails on it.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).fold(0f32, |m, (x, y)| max_or_nan(m, (x - y).abs()))
}

/// Deterministic pseudo-random values in [-1, 1) (xorshift), so CPU references are repeatable.
pub fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// torch.nn.GELU() (exact erf) in f64.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// erf in f64 (std has none), independent of any kernel's approximation: the Maclaurin series
/// for |x| < 2 and the continued fraction of erfc beyond, where the series would cancel
/// catastrophically. Accurate to ~1e-14.
pub fn erf(x: f64) -> f64 {
    let z = x.abs();
    if z < 2.0 {
        let (mut sum, mut term, mut n) = (0f64, x, 0f64);
        while term.abs() > 1e-18 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
        }
        return sum * 2.0 / std::f64::consts::PI.sqrt();
    }
    // erfc(z) = exp(-z²)/√π · 1/(z + (1/2)/(z + 1/(z + (3/2)/(z + ...))))
    let mut k = z;
    for n in (1..=120).rev() {
        k = z + (n as f64 / 2.0) / k;
    }
    let erfc = (-z * z).exp() / (std::f64::consts::PI.sqrt() * k);
    x.signum() * (1.0 - erfc)
}

/// Reference convolution; the input is NCHW, or channels-last NHWC with `nhwc`.
pub fn conv_reference(x: &[f32], w: &[f32], bias: &[f32], images: usize, g: &tokenmix::net::ConvGeometry, cout: usize, nhwc: bool) -> Vec<f32> {
    let (oh, ow) = g.out_hw().unwrap();
    let mut out = vec![0f32; images * oh * ow * cout];
    for img in 0..images {
        for oy in 0..oh {
            for ox in 0..ow {
                for co in 0..cout {
                    let mut acc = bias[co] as f64;
                    for ci in 0..g.cin {
                        for ky in 0..g.kh {
                            for kx in 0..g.kw {
                                let iy = (oy * g.stride + ky) as isize - g.pad as isize;
                                let ix = (ox * g.stride + kx) as isize - g.pad as isize;
                                if iy < 0 || ix < 0 || iy >= g.ih as isize || ix >= g.iw as isize {
                                    continue;
                                }
                                let (iy, ix) = (iy as usize, ix as usize);
                                let at =
                                    if nhwc { ((img * g.ih + iy) * g.iw + ix) * g.cin + ci } else { ((img * g.cin + ci) * g.ih + iy) * g.iw + ix };
                                let xv = x[at] as f64;
                                let wv = w[((co * g.cin + ci) * g.kh + ky) * g.kw + kx] as f64;
                                acc += xv * wv;
                            }
                        }
                    }
                    // Channels-last output: [(img, oy, ox), co]
                    out[((img * oh + oy) * ow + ox) * cout + co] = acc as f32;
                }
            }
        }
    }
    out
}

/// Reference PoolFormer mixing: `x0 + ls * (avgpool3x3(xn) - xn)` with count_include_pad =
/// False, over `batch` channels-last [h, w, d] images.
pub fn pool_reference(xn: &[f32], x0: &[f32], ls: &[f32], (batch, h, w, d): (usize, usize, usize, usize)) -> Vec<f32> {
    let mut want = x0.to_vec();
    for b in 0..batch {
        for y in 0..h {
            for xx in 0..w {
                for c in 0..d {
                    let (mut sum, mut count) = (0f64, 0f64);
                    for ny in y.saturating_sub(1)..(y + 2).min(h) {
                        for nx in xx.saturating_sub(1)..(xx + 2).min(w) {
                            sum += xn[((b * h + ny) * w + nx) * d + c] as f64;
                            count += 1.0;
                        }
                    }
                    let at = ((b * h + y) * w + xx) * d + c;
                    want[at] = (x0[at] as f64 + ls[c] as f64 * (sum / count - xn[at] as f64)) as f32;
                }
            }
        }
    }
    want
}

/// f64 LayerNorm of `rows` rows of width `d` read at `off + r * ld` in `x`; dense [rows, d].
pub fn layer_norm_reference(x: &[f32], rows: usize, d: usize, (off, ld): (usize, usize), gamma: &[f32], beta: &[f32], eps: f32) -> Vec<f32> {
    let mut want = vec![0f32; rows * d];
    for r in 0..rows {
        let row: Vec<f64> = x[off + r * ld..off + r * ld + d].iter().map(|&v| v as f64).collect();
        let mean = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d as f64;
        for c in 0..d {
            want[r * d + c] = ((row[c] - mean) / (var + eps as f64).sqrt() * gamma[c] as f64 + beta[c] as f64) as f32;
        }
    }
    want
}

/// f64 GroupNorm with one group over each of the images of `n` values (channels-last, `d`
/// channels) in `x`.
pub fn group_norm_reference(x: &[f32], n: usize, d: usize, gamma: &[f32], beta: &[f32], eps: f32) -> Vec<f32> {
    let mut want = vec![0f32; x.len()];
    for (img, out) in x.chunks(n).zip(want.chunks_mut(n)) {
        let img: Vec<f64> = img.iter().map(|&v| v as f64).collect();
        let mean = img.iter().sum::<f64>() / n as f64;
        let var = img.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        for (j, v) in img.iter().enumerate() {
            out[j] = ((v - mean) / (var + eps as f64).sqrt() * gamma[j % d] as f64 + beta[j % d] as f64) as f32;
        }
    }
    want
}

/// f64 mean over the tokens of `batch` [tokens, d] images: [batch, d].
pub fn mean_tokens_reference(x: &[f32], batch: usize, tokens: usize, d: usize) -> Vec<f32> {
    let mut want = vec![0f32; batch * d];
    for b in 0..batch {
        for c in 0..d {
            want[b * d + c] = ((0..tokens).map(|t| x[(b * tokens + t) * d + c] as f64).sum::<f64>() / tokens as f64) as f32;
        }
    }
    want
}

/// Pending once, then ready: what awaiting the event loop's next task looks like (a
/// [`tokenmix::exec::cpu::Slices`] pause, for tests that poll sliced work with pollster).
pub struct Yield(pub bool);

impl std::future::Future for Yield {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// A [`tokenmix::exec::cpu::Slices`] pause for tests (a `fn`, as `Slices` takes one) that counts
/// the pauses made on this thread and, at a chosen one, cancels a token, as an abort read
/// during a pause would. Per thread, so tests that run at once do not see each other's.
pub mod pauses {
    use std::cell::{Cell, RefCell};
    use std::future::Future;
    use std::pin::Pin;

    use tokenmix::Cancel;

    thread_local! {
        static COUNT: Cell<usize> = const { Cell::new(0) };
        static CANCEL: RefCell<Option<(usize, Cancel)>> = const { RefCell::new(None) };
    }

    pub fn pause() -> Pin<Box<dyn Future<Output = ()>>> {
        let n = COUNT.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        CANCEL.with(|t| {
            if let Some((at, token)) = t.borrow().as_ref() {
                if *at == n {
                    token.cancel();
                }
            }
        });
        Box::pin(super::Yield(false))
    }

    /// The pauses made on this thread so far.
    pub fn count() -> usize {
        COUNT.with(Cell::get)
    }

    /// Cancels `token` in the `nth` pause from now (1: the next one).
    pub fn cancel_in(nth: usize, token: &Cancel) {
        CANCEL.with(|t| *t.borrow_mut() = Some((count() + nth, token.clone())));
    }

    /// No pause cancels anything any more.
    pub fn clear() {
        CANCEL.with(|t| *t.borrow_mut() = None);
    }
}

/// A one-file HTTP server for the hub stand-in: sends `body` slowly, in 16 pieces, for any
/// repository `timm/poolformer_*` (404 for any other path). Returns its base URL.
pub fn serve(body: Vec<u8>) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut s = stream;
            let mut req = [0u8; 2048];
            let n = s.read(&mut req).unwrap_or(0);
            let line = String::from_utf8_lossy(&req[..n]).lines().next().unwrap_or("").to_string();
            if !(line.contains("/timm/poolformer_") && line.contains("/resolve/main/model.safetensors")) {
                let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                continue;
            }
            let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            for piece in body.chunks(body.len().div_ceil(16)) {
                let _ = s.write_all(piece);
                let _ = s.flush();
                std::thread::sleep(std::time::Duration::from_millis(60));
            }
        }
    });
    format!("http://{addr}")
}
