//! The `tokenmix` binary as a user runs it: exact `logits` interface, classify, info, bench,
//! and one-line errors with a non-zero exit code.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{fixtures, max_abs, max_abs_diff, read_tensors, scratch, tol};

fn tokenmix(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tokenmix")).args(args).output().expect("runs tokenmix")
}

fn write_npy(path: &Path, shape: &[u64], data: &[f32]) {
    write_npy_as(path, shape, "<f4", npyz::Order::C, data.iter().copied());
}

/// `values` in the file's order as a .npy of numpy type `descr` (`<f4`, `<f8`, `>f4`, …),
/// under a header that says `order`.
fn write_npy_as<T: npyz::Serialize>(path: &Path, shape: &[u64], descr: &str, order: npyz::Order, values: impl IntoIterator<Item = T>) {
    use npyz::WriterBuilder;
    let f = std::fs::File::create(path).unwrap();
    let dtype = npyz::DType::new_scalar(descr.parse().unwrap());
    let mut w = npyz::WriteOptions::new().dtype(dtype).shape(shape).order(order).writer(f).begin_nd().unwrap();
    w.extend(values).unwrap();
    w.finish().unwrap();
}

/// The 37x23 colour gradient the CLI tests classify, saved as a PNG at `path`.
fn save_gradient(path: &Path) {
    image::RgbImage::from_fn(37, 23, |x, y| image::Rgb([(x * 7) as u8, (y * 11) as u8, 128])).save(path).unwrap();
}

/// `data` (C order, last index fastest) written as numpy writes a Fortran-ordered array: the
/// header says `fortran_order: True` and the first index runs fastest.
fn write_npy_fortran(path: &Path, shape: &[u64], data: &[f32]) {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let fortran = (0..data.len()).map(|mut f| {
        // f's multi-index, first index fastest, then its C-order position.
        let index: Vec<usize> = dims
            .iter()
            .map(|&d| {
                let i = f % d;
                f /= d;
                i
            })
            .collect();
        data[index.iter().zip(&dims).fold(0, |c, (&i, &d)| c * d + i)]
    });
    write_npy_as(path, shape, "<f4", npyz::Order::Fortran, fortran);
}

fn read_npy(path: &Path) -> (Vec<u64>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape = npy.shape().to_vec();
    (shape, npy.into_vec().unwrap())
}

fn assert_clean_error(out: &Output) {
    assert!(!out.status.success(), "should fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: "), "stderr should be one clear line: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line, no backtrace: {err}");
    assert!(!err.contains("panicked"), "no panic: {err}");
}

#[test]
fn logits_command_matches_timm() {
    let tmp = scratch("cli");
    for name in ["mixer_p4_rgb", "mixer_p8_grey_nonsquare"] {
        let io = read_tensors(&fixtures().join(format!("{name}.io.safetensors")), &["input", "logits"]);
        let (shape, input) = &io[0];
        let (eshape, expected) = &io[1];
        let x = tmp.path().join(format!("{name}.x.npy"));
        let y = tmp.path().join(format!("{name}.y.npy"));
        write_npy(&x, &shape.iter().map(|&d| d as u64).collect::<Vec<_>>(), input);
        let weights = fixtures().join(format!("{name}.safetensors"));
        let out = tokenmix(&["logits", "--weights", weights.to_str().unwrap(), "--input", x.to_str().unwrap(), "--out", y.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let (yshape, got) = read_npy(&y);
        assert_eq!(yshape, eshape.iter().map(|&d| d as u64).collect::<Vec<_>>());
        assert!(max_abs_diff(&got, expected) <= tol::GOLDEN * max_abs(expected).max(1.0));
        // The same batch in Fortran order (numpy's `np.asfortranarray`): the same logits (it
        // used to be read as if it were C order, and answered for a different batch).
        write_npy_fortran(&x, &shape.iter().map(|&d| d as u64).collect::<Vec<_>>(), input);
        let out = tokenmix(&["logits", "--weights", weights.to_str().unwrap(), "--input", x.to_str().unwrap(), "--out", y.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let (_, fortran) = read_npy(&y);
        assert!(max_abs_diff(&fortran, expected) <= tol::GOLDEN * max_abs(expected).max(1.0), "Fortran order: {}", max_abs_diff(&fortran, expected));
        // numpy's default float64, and either float in big-endian order: the same logits (they
        // used to be refused, "expected float32 (<f4)"). An integer array is still refused.
        let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        for descr in ["<f8", ">f8", ">f4", "<i4"] {
            match descr {
                "<f8" | ">f8" => write_npy_as(&x, &dims, descr, npyz::Order::C, input.iter().map(|&v| f64::from(v))),
                ">f4" => write_npy_as(&x, &dims, descr, npyz::Order::C, input.iter().copied()),
                _ => write_npy_as(&x, &dims, descr, npyz::Order::C, input.iter().map(|&v| v as i32)),
            }
            let out = tokenmix(&["logits", "--weights", weights.to_str().unwrap(), "--input", x.to_str().unwrap(), "--out", y.to_str().unwrap()]);
            if descr == "<i4" {
                assert_clean_error(&out);
                assert!(String::from_utf8_lossy(&out.stderr).contains("expected float32 or float64"));
                continue;
            }
            assert!(out.status.success(), "{descr}: {}", String::from_utf8_lossy(&out.stderr));
            let (_, got) = read_npy(&y);
            assert!(max_abs_diff(&got, expected) <= tol::GOLDEN * max_abs(expected).max(1.0), "{descr}: {}", max_abs_diff(&got, expected));
        }
    }
    // Without --weights, the embedded default model, as every other command does (it used to be
    // "the following required arguments were not provided: --weights"): the same logits as the
    // file it embeds, and ten of them per image.
    let x = tmp.path().join("fmnist.x.npy");
    write_npy(&x, &[2, 1, 28, 28], &(0..2 * 28 * 28).map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0).collect::<Vec<_>>());
    let [embedded, file] = ["embedded.npy", "file.npy"].map(|n| tmp.path().join(n));
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("weights/mixer_fmnist.safetensors");
    for (args, y) in [(vec![], &embedded), (vec!["--weights", shipped.to_str().unwrap()], &file)] {
        let mut all = vec!["logits", "--input", x.to_str().unwrap(), "--out", y.to_str().unwrap()];
        all.extend(args);
        let out = tokenmix(&all);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let (shape, got) = read_npy(&embedded);
    assert_eq!(shape, [2, 10]);
    assert_eq!(got, read_npy(&file).1, "the embedded model is weights/mixer_fmnist.safetensors");
}

#[test]
fn info_names_family_and_counts() {
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let out = tokenmix(&["info", "--weights", weights.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["family"], "MLP-Mixer");
    assert_eq!(v["arch"]["depth"], 2);
    assert_eq!(v["arch"]["tokens_hidden"], 16);
    // Parameter count as torch counts it: sum of numel over the state dict.
    let bytes = std::fs::read(&weights).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let numel: usize = st.iter().map(|(_, t)| t.shape().iter().product::<usize>()).sum();
    assert_eq!(v["params"], numel);
}

/// A 1000-class checkpoint without labels (timm's ImageNet-1k checkpoints carry none) is
/// answered in ImageNet-1k's class names, the page's list (`www/imagenet_labels.json`): the CLI
/// and the desktop app printed "class 281" where the page showed "tabby". Other label-less
/// models keep class numbers, and a model's own labels win.
#[test]
fn imagenet_checkpoints_are_answered_in_imagenet_names() {
    let tmp = scratch("cli");
    let img = tmp.path().join("grey.png");
    save_gradient(&img);
    let names: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("www/imagenet_labels.json")).unwrap()).unwrap();
    assert_eq!(names.len(), 1000);
    let imagenet = fixtures().join("mixer_many_tokens.safetensors");
    let numbers = fixtures().join("mixer_p4_rgb.safetensors");
    let run = |args: &[&str]| -> serde_json::Value {
        let out = tokenmix(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let labels_of = |weights: Option<&Path>| -> Vec<(usize, String)> {
        let mut args = vec!["classify", "--json", "--top-k", "5", img.to_str().unwrap()];
        if let Some(w) = weights {
            args.extend(["--weights", w.to_str().unwrap()]);
        }
        run(&args)[0]["predictions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["index"].as_u64().unwrap() as usize, p["label"].as_str().unwrap().to_string()))
            .collect()
    };
    let answered = labels_of(Some(&imagenet));
    for (index, label) in &answered {
        assert_eq!(label, &names[*index], "class {index}");
    }
    // eval's class folders, for such a model: ImageNet's synset folders (its own val/ layout)
    // and its class names.
    let data = tmp.path().join("imagenet");
    for folder in ["n01440764", "tabby"] {
        std::fs::create_dir_all(data.join(folder)).unwrap();
        save_gradient(&data.join(folder).join("x.png"));
    }
    let v = run(&["eval", "--weights", imagenet.to_str().unwrap(), "--data", data.to_str().unwrap(), "--json"]);
    let classes: Vec<(u64, u64)> =
        v["classes"].as_array().unwrap().iter().map(|c| (c["index"].as_u64().unwrap(), c["total"].as_u64().unwrap())).collect();
    assert_eq!(classes, [(0, 1), (281, 1)], "n01440764 is tench (0), tabby is 281: {v}");
    let top = answered[0].0;
    assert_eq!(v["correct"], usize::from(top == 0) + usize::from(top == 281), "right where classify's top 1 is the folder's class: {v}");
    for (index, label) in labels_of(Some(&numbers)) {
        assert_eq!(label, format!("class {index}"));
    }
    let own = labels_of(None);
    assert!(own.iter().all(|(_, l)| !l.starts_with("class ")), "the default model's own labels: {own:?}");
    for (weights, source) in [(Some(&imagenet), "imagenet-1k"), (Some(&numbers), "none"), (None, "file")] {
        let mut args = vec!["info", "--json"];
        if let Some(w) = weights {
            args.extend(["--weights", w.to_str().unwrap()]);
        }
        assert_eq!(run(&args)["label_source"], source, "{weights:?}");
    }
    let text = tokenmix(&["info", "--weights", imagenet.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("labels:      ImageNet-1k's (none in the file"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
}

#[test]
fn classify_prints_json_for_each_image() {
    let tmp = scratch("cli");
    let img = tmp.path().join("grey.png");
    save_gradient(&img);
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let out = tokenmix(&["classify", "--weights", weights.to_str().unwrap(), "--json", "--top-k", "3", img.to_str().unwrap(), img.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    let preds = arr[0]["predictions"].as_array().unwrap();
    assert_eq!(preds.len(), 3);
    let p: Vec<f64> = preds.iter().map(|p| p["probability"].as_f64().unwrap()).collect();
    assert!(p[0] >= p[1] && p[1] >= p[2], "sorted: {p:?}");
    assert_eq!(arr[0]["predictions"], arr[1]["predictions"], "same image, same answer");
}

/// `model` then `tail` bytes of `fill`, written from a thread into a new FIFO `name` while
/// tokenmix runs `args` with `{}` standing for the FIFO; returns its output and the bytes the
/// writer got through before tokenmix closed its end (a write then fails: EPIPE).
#[cfg(unix)]
fn through_a_fifo(dir: &Path, name: &str, model: &[u8], tail: u64, fill: u8, args: &[&str]) -> (Output, u64) {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    let fifo = dir.join(name);
    assert!(Command::new("mkfifo").arg(&fifo).status().expect("runs mkfifo").success(), "mkfifo {}", fifo.display());
    let opened = std::sync::Arc::new(AtomicBool::new(false));
    let writer = {
        let (fifo, opened, model) = (fifo.clone(), opened.clone(), model.to_vec());
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(&fifo).expect("opens the FIFO to write");
            opened.store(true, Ordering::SeqCst);
            let chunk = vec![fill; 1 << 16];
            let mut written = 0u64;
            let mut write = |bytes: &[u8]| f.write_all(bytes).map(|()| written += bytes.len() as u64);
            let _ = write(&model).and_then(|()| (0..tail.div_ceil(chunk.len() as u64)).try_for_each(|_| write(&chunk)));
            written
        })
    };
    let args: Vec<&str> = args.iter().map(|a| if *a == "{}" { fifo.to_str().unwrap() } else { a }).collect();
    let out = tokenmix(&args);
    if !opened.load(Ordering::SeqCst) {
        // tokenmix never opened it: opening it here lets the writer's open return, and its
        // first write fail once this end is closed, rather than the test hanging.
        drop(std::fs::File::open(&fifo));
    }
    (out, writer.join().expect("the writer thread"))
}

/// A model given as a pipe (`--weights <(curl …)`, a FIFO) is read as far as its safetensors
/// header says: it classifies as the same file does; followed by 256 MiB more it is refused
/// with the parser's error once one byte past its tensors is read; a stream that is no model
/// is refused after its first 8 bytes. The CLI used to read a pipe up to 4 GiB first.
#[cfg(unix)]
#[test]
fn a_model_on_a_pipe_is_read_as_far_as_its_header_says() {
    let tmp = scratch("cli");
    let img = tmp.path().join("grey.png");
    save_gradient(&img);
    let img = img.to_str().unwrap();
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let model = std::fs::read(&weights).unwrap();
    let want = tokenmix(&["classify", "--weights", weights.to_str().unwrap(), "--json", img]);
    assert!(want.status.success(), "{}", String::from_utf8_lossy(&want.stderr));
    let args = ["classify", "--weights", "{}", "--json", img];
    let (out, written) = through_a_fifo(tmp.path(), "whole", &model, 0, 0, &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, want.stdout, "the model from a pipe answers as from its file");
    assert_eq!(written, model.len() as u64);
    // The writer gets at most a pipe's buffer (64 KiB on Linux; 1 MiB allowed) past what is
    // read: with the old reading it got all 256 MiB through.
    let bound = 1 << 20;
    let (out, written) = through_a_fifo(tmp.path(), "endless", &model, 256 << 20, 0, &args);
    assert_clean_error(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("a model and 256 MiB more: {written} bytes written; {}", err.trim());
    assert!(written < model.len() as u64 + bound, "{written} bytes of a model of {} went through", model.len());
    assert!(err.contains(&format!("more bytes than its header's tensors take: they end at {}", model.len())), "{err}");
    let (out, written) = through_a_fifo(tmp.path(), "garbage", &[], 256 << 20, 0xff, &args);
    assert_clean_error(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("no model, 256 MiB: {written} bytes written; {}", err.trim());
    assert!(err.contains("garbage"), "names the file: {err}");
    assert!(written < bound, "{written} bytes of garbage went through");
}

/// An image on a pipe (`tokenmix classify <(curl -s URL)`, a FIFO) is read whole, then decoded:
/// it is answered as its file is. It was "Illegal seek (os error 29)": the decoder seeks back
/// to the start after telling the format.
#[cfg(unix)]
#[test]
fn an_image_on_a_pipe_is_answered_as_its_file() {
    let tmp = scratch("cli");
    let img = tmp.path().join("grey.png");
    save_gradient(&img);
    let predictions = |out: &Output| -> serde_json::Value {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")[0]["predictions"].clone()
    };
    let want = predictions(&tokenmix(&["classify", "--json", img.to_str().unwrap()]));
    let png = std::fs::read(&img).unwrap();
    let (out, written) = through_a_fifo(tmp.path(), "photo.png", &png, 0, 0, &["classify", "--json", "{}"]);
    assert_eq!(predictions(&out), want, "the image from a pipe answers as from its file");
    assert_eq!(written, png.len() as u64);
    // Not an image: said so, as of a file.
    let (out, _) = through_a_fifo(tmp.path(), "notes.png", b"not an image", 0, 0, &["classify", "{}"]);
    assert_clean_error(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("notes.png") && !err.contains("seek"), "{err}");
}

/// A run from a shell with no `XDG_RUNTIME_DIR` (ssh, a container, a service) prints only what
/// tokenmix prints. Mesa's device-select layer used to add "error: XDG_RUNTIME_DIR is invalid
/// or not set in the environment." four times on stderr to a run that succeeded, once per
/// Vulkan instance (`cli::quiet_mesa_device_select`).
#[test]
fn a_run_without_a_runtime_dir_writes_nothing_to_stderr() {
    let tmp = scratch("cli");
    let img = tmp.path().join("grey.png");
    save_gradient(&img);
    for args in [&["--backend", "gpu", "classify", img.to_str().unwrap()][..], &["info"], &["--backend", "cpu", "classify", img.to_str().unwrap()]] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokenmix"));
        for k in ["XDG_RUNTIME_DIR", "WAYLAND_DISPLAY", "WAYLAND_SOCKET", "NODEVICE_SELECT", "MESA_VK_DEVICE_SELECT"] {
            cmd.env_remove(k);
        }
        let out = cmd.args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!out.stdout.is_empty(), "{args:?} printed nothing");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}: stderr");
    }
}

/// A reader that stops reading (`tokenmix classify *.png | head -3`) ends the run quietly, with
/// status 0, on every command: `println!` used to panic there ("failed printing to stdout:
/// Broken pipe" and a backtrace, status 101). The output goes into a pipe whose reading end is
/// closed before the run starts, so every write fails.
#[test]
fn a_closed_pipe_on_stdout_ends_the_run_quietly() {
    let tmp = scratch("cli");
    let img = tmp.path().join("grey.png");
    save_gradient(&img);
    let i = img.to_str().unwrap();
    let runs: [&[&str]; 6] = [
        &["classify", i, i],
        &["classify", "--json", i],
        &["explain", i],
        &["insight"],
        &["info", "--json"],
        &["--backend", "cpu", "bench", "--batch", "1", "--iters", "1"],
    ];
    for args in runs {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_tokenmix")).args(args).stdout(writer).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && stderr.is_empty(), "{args:?}: {:?}, stderr: {stderr}", out.status);
    }
    // And the same runs write their output where it is read (the runs above did run).
    for args in runs {
        let out = tokenmix(args);
        assert!(out.status.success() && !out.stdout.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// An image that does not read among several is reported (on stderr, and in place in the JSON)
/// and the others are classified and explained all the same, the command failing at the end;
/// the images run in batches of at most 64, each answer given to its own image. (An unreadable
/// image used to fail the whole command with nothing printed, and every image was held in
/// memory at once.)
#[test]
fn classify_and_explain_go_on_past_an_unreadable_image() {
    let tmp = scratch("cli");
    let [a, b] = ["a.png", "b.png"].map(|name| tmp.path().join(name));
    save_gradient(&a);
    image::RgbImage::from_fn(30, 41, |x, y| image::Rgb([(y * 5) as u8, 200, (x * 13) as u8])).save(&b).unwrap();
    let bad = tmp.path().join("not.png");
    std::fs::write(&bad, b"hello").unwrap();
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let w = weights.to_str().unwrap();
    let json = |out: &Output| -> Vec<serde_json::Value> {
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("a JSON array").as_array().expect("an array").clone()
    };
    let alone =
        |img: &Path| json(&tokenmix(&["classify", "--weights", w, "--json", "--top-k", "3", img.to_str().unwrap()]))[0]["predictions"].clone();
    let (answer_a, answer_b) = (alone(&a), alone(&b));
    assert_ne!(answer_a, answer_b, "two images that answer alike would not show answers given to the wrong image");
    // 70 images, two of them unreadable: two batches (64 + 6).
    let pick = |i: usize| match i {
        2 | 65 => bad.as_path(),
        i if i % 2 == 0 => a.as_path(),
        _ => b.as_path(),
    };
    let paths: Vec<&Path> = (0..70).map(pick).collect();
    let mut args = vec!["classify", "--weights", w, "--json", "--top-k", "3"];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    let out = tokenmix(&args);
    assert!(!out.status.success(), "two images did not read: the command fails");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 3, "one line per unread image, and the summary: {err}");
    assert!(lines[..2].iter().all(|l| l.starts_with("error: input: ") && l.contains("not.png")), "{err}");
    assert_eq!(lines[2], "error: input: 2 of the 70 images did not read (above); the rest were done");
    let arr = json(&out);
    assert_eq!(arr.len(), 70, "every image in order");
    for (i, (entry, path)) in arr.iter().zip(&paths).enumerate() {
        assert_eq!(entry["image"], path.display().to_string(), "entry {i}");
        if *path == bad {
            assert!(entry["error"].as_str().is_some_and(|e| e.contains("not.png")), "entry {i}: {entry}");
            continue;
        }
        let want = if *path == a { &answer_a } else { &answer_b };
        let got = &entry["predictions"];
        for k in 0..3 {
            assert_eq!(got[k]["index"], want[k]["index"], "entry {i}, its own image's answer: {got} vs {want}");
            let (p, q) = (got[k]["probability"].as_f64().unwrap(), want[k]["probability"].as_f64().unwrap());
            assert!((p - q).abs() <= 1e-5, "entry {i}: {p} vs {q} alone");
        }
    }
    // Text, and explain: the same.
    let out = tokenmix(&["classify", "--weights", w, a.to_str().unwrap(), bad.to_str().unwrap(), b.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && text.contains("a.png") && text.contains("b.png") && !text.contains("not.png"), "{text}");
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim_end().lines().count(), 2);
    let out = tokenmix(&["explain", "--weights", w, "--json", "--top-k", "2", a.to_str().unwrap(), bad.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(!out.status.success());
    let arr = json(&out);
    assert_eq!(arr.len(), 3);
    assert!(arr[0]["classes"].as_array().is_some_and(|c| c.len() == 2) && arr[2]["classes"].as_array().is_some_and(|c| c.len() == 2), "{arr:?}");
    assert!(arr[1]["error"].as_str().is_some_and(|e| e.contains("not.png")), "{}", arr[1]);
}

/// A folder on the command line stands for the PNG and JPEG files in it and its subfolders, in
/// name order, each answered as it is alone; other files are counted in one note, hidden ones
/// and a link back up left out, and a folder with no image is an error of its own.
#[test]
fn a_folder_stands_for_its_images() {
    let tmp = scratch("cli");
    let photos = tmp.path().join("photos");
    std::fs::create_dir_all(photos.join("sub")).unwrap();
    std::fs::create_dir_all(photos.join("empty")).unwrap();
    save_gradient(&photos.join("b.png"));
    image::RgbImage::from_fn(30, 41, |x, y| image::Rgb([(y * 5) as u8, 200, (x * 13) as u8]))
        .save_with_format(photos.join("a.JPG"), image::ImageFormat::Jpeg)
        .unwrap();
    image::RgbImage::from_fn(19, 33, |x, y| image::Rgb([90, (x * 9) as u8, (y * 3) as u8]))
        .save_with_format(photos.join("sub/c.jpeg"), image::ImageFormat::Jpeg)
        .unwrap();
    image::RgbImage::from_fn(26, 30, |x, y| image::Rgb([(x * 9) as u8, 40, (y * 8) as u8]))
        .save_with_format(photos.join("d.webp"), image::ImageFormat::WebP)
        .unwrap();
    std::fs::write(photos.join("notes.txt"), b"not an image").unwrap();
    save_gradient(&photos.join(".hidden.png"));
    #[cfg(unix)]
    std::os::unix::fs::symlink("..", photos.join("sub/up")).unwrap();
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let w = weights.to_str().unwrap();
    let run = |cmd: &str, paths: &[&Path]| {
        let mut args = vec![cmd, "--weights", w, "--json", "--top-k", "3"];
        args.extend(paths.iter().map(|p| p.to_str().unwrap()));
        tokenmix(&args)
    };
    let json = |out: &Output| -> Vec<serde_json::Value> {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("a JSON array").as_array().expect("an array").clone()
    };
    let want: Vec<PathBuf> = ["a.JPG", "b.png", "d.webp", "sub/c.jpeg"].iter().map(|n| photos.join(n)).collect();
    let alone: Vec<serde_json::Value> = want.iter().map(|p| json(&run("classify", &[p]))[0]["predictions"].clone()).collect();
    assert!((1..4).all(|i| !alone[..i].contains(&alone[i])), "images that answer apart, so an answer given to the wrong one shows");
    let loose = tmp.path().join("loose.png");
    save_gradient(&loose);
    let out = run("classify", &[&photos, &loose]);
    let arr = json(&out);
    let images: Vec<&str> = arr.iter().map(|e| e["image"].as_str().unwrap_or("")).collect();
    let expected: Vec<String> = want.iter().chain([&loose]).map(|p| p.display().to_string()).collect();
    assert_eq!(images, expected, "the folder's images in name order (sub/ included, .hidden.png and the link up left out), then the file");
    for (i, answer) in alone.iter().enumerate() {
        assert_eq!(&arr[i]["predictions"], answer, "{}: its answer alone", images[i]);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("note: ") && err.contains("left out 1 file") && err.contains("notes.txt"), "{err}");
    // explain takes folders too.
    let arr = json(&run("explain", &[&photos]));
    assert_eq!(arr.len(), 4, "{arr:?}");
    assert!(arr.iter().all(|e| e["classes"].as_array().is_some_and(|c| c.len() == 3)), "{arr:?}");
    // A folder with no image in it.
    for cmd in ["classify", "explain"] {
        let out = run(cmd, &[&photos.join("empty")]);
        assert_clean_error(&out);
        assert!(String::from_utf8_lossy(&out.stderr).contains("a folder with no image in it"), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// `-` is an image on standard input (`curl -s URL | tokenmix classify -`): read whole, told by
/// its content, answered as its file is and named `-`, alone or among files; `explain` too,
/// its PNGs named `stdin_…`. Nothing on it, bytes that are no image, and `-` twice are one-line
/// errors.
#[test]
fn an_image_can_come_on_standard_input() {
    use std::io::Write;
    let tmp = scratch("cli");
    let png = tmp.path().join("gradient.png");
    save_gradient(&png);
    let jpeg = tmp.path().join("photo.jpg");
    image::RgbImage::from_fn(30, 41, |x, y| image::Rgb([(y * 5) as u8, 200, (x * 13) as u8]))
        .save_with_format(&jpeg, image::ImageFormat::Jpeg)
        .unwrap();
    let webp = tmp.path().join("other.webp");
    image::RgbImage::from_fn(26, 30, |x, y| image::Rgb([(x * 9) as u8, 40, (y * 8) as u8]))
        .save_with_format(&webp, image::ImageFormat::WebP)
        .unwrap();
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let piped = |args: &[&str], stdin: &[u8]| -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tokenmix"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runs tokenmix");
        let mut input = child.stdin.take().unwrap();
        // A binary that never reads its stdin must not block the test: a write to a closed pipe errs.
        let _ = input.write_all(stdin);
        drop(input);
        child.wait_with_output().unwrap()
    };
    let w = weights.to_str().unwrap();
    let json = |out: &Output| -> Vec<serde_json::Value> {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("a JSON array").as_array().expect("an array").clone()
    };
    let file = |cmd: &str, p: &Path| json(&tokenmix(&[cmd, "--weights", w, "--json", "--top-k", "3", p.to_str().unwrap()]));
    let answers: Vec<serde_json::Value> = [&png, &jpeg, &webp].iter().map(|p| file("classify", p)[0]["predictions"].clone()).collect();
    assert!(answers[0] != answers[1] && answers[1] != answers[2] && answers[0] != answers[2], "images that answer apart: {answers:?}");
    for (p, answer) in [&png, &jpeg, &webp].iter().zip(&answers) {
        let arr = json(&piped(&["classify", "--weights", w, "--json", "--top-k", "3", "-"], &std::fs::read(p).unwrap()));
        assert_eq!(arr.len(), 1, "{arr:?}");
        assert_eq!(arr[0]["image"], "-", "{arr:?}");
        assert_eq!(&arr[0]["predictions"], answer, "{}: piped as its file is answered", p.display());
    }
    // Among files, in its place; the text output names it `-` too.
    let arr = json(&piped(
        &["classify", "--weights", w, "--json", "--top-k", "3", png.to_str().unwrap(), "-", jpeg.to_str().unwrap()],
        &std::fs::read(&webp).unwrap(),
    ));
    let names: Vec<&str> = arr.iter().map(|e| e["image"].as_str().unwrap_or("")).collect();
    assert_eq!(names, [png.to_str().unwrap(), "-", jpeg.to_str().unwrap()]);
    assert_eq!([&arr[0]["predictions"], &arr[1]["predictions"], &arr[2]["predictions"]], [&answers[0], &answers[2], &answers[1]]);
    let out = piped(&["classify", "--weights", w, "-"], &std::fs::read(&png).unwrap());
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).starts_with("-\n"), "{}", String::from_utf8_lossy(&out.stdout));
    // explain: the same split as its file's, the overlays named after stdin.
    let pngs = tmp.path().join("overlays");
    let out = piped(&["explain", "--weights", w, "--json", "--top-k", "2", "--png", pngs.to_str().unwrap(), "-"], &std::fs::read(&jpeg).unwrap());
    let arr = json(&out);
    let alone = json(&tokenmix(&["explain", "--weights", w, "--json", "--top-k", "2", jpeg.to_str().unwrap()]));
    assert_eq!(arr[0]["image"], "-");
    assert_eq!(arr[0]["classes"], alone[0]["classes"], "explain: piped as its file is explained");
    let written: Vec<String> = std::fs::read_dir(&pngs).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!written.is_empty() && written.iter().all(|n| n.starts_with("stdin_")), "{written:?}");
    // insight --image -: PoolFormer's stage energy, as over its file.
    let pool = fixtures().join("poolformer_rgb.safetensors");
    let insight = |image: &str, stdin: &[u8]| piped(&["insight", "--weights", pool.to_str().unwrap(), "--json", "--image", image], stdin);
    let (from_file, from_pipe) = (insight(png.to_str().unwrap(), b""), insight("-", &std::fs::read(&png).unwrap()));
    assert!(from_pipe.status.success(), "{}", String::from_utf8_lossy(&from_pipe.stderr));
    let energy = |out: &Output| serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("insight's JSON")["stage_energy"].clone();
    assert!(energy(&from_file).as_array().is_some_and(|a| !a.is_empty()), "{}", String::from_utf8_lossy(&from_file.stdout));
    assert_eq!(energy(&from_pipe), energy(&from_file));
    // Errors.
    for (args, stdin, says) in [
        (vec!["classify", "-"], &b""[..], "-: nothing came on standard input"),
        (
            vec!["classify", "-"],
            &b"just some text\n"[..],
            "-: not an image tokenmix reads (PNG, JPEG, WebP, GIF, BMP or TIFF): its first bytes are none of theirs",
        ),
        (vec!["explain", "-"], &b"\x89PNG\r\n\x1a\n broken"[..], "-: "),
        (vec!["classify", "-", png.to_str().unwrap(), "-"], &b""[..], "-: standard input holds one image and is read once"),
    ] {
        let out = piped(&args, stdin);
        assert_clean_error(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with(&format!("error: input: {says}")), "{args:?}: {err}");
    }
}

/// Whether two `--json` answers (lists of {"index", `value`, …}) name the same classes with the
/// same `value`s to float rounding: an image in another place of a batch, whose sums run in
/// another order.
fn same_answer(a: &serde_json::Value, b: &serde_json::Value, value: &str) -> bool {
    let (Some(a), Some(b)) = (a.as_array(), b.as_array()) else { return false };
    let number = |v: &serde_json::Value| v[value].as_f64().unwrap_or(f64::NAN);
    !a.is_empty()
        && a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| a["index"] == b["index"] && (number(a) - number(b)).abs() <= 1e-5 * number(b).abs().max(1.0))
}

/// `jpeg` with an EXIF segment (APP1) saying `orientation` right after its start marker, as a
/// camera writes it: a big-endian TIFF header and one IFD with the one entry, Orientation
/// (tag 0x0112, a SHORT).
fn with_exif_orientation(jpeg: &[u8], orientation: u16) -> Vec<u8> {
    let mut exif = b"Exif\0\0MM\0\x2a\0\0\0\x08".to_vec();
    exif.extend([0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1]);
    exif.extend(orientation.to_be_bytes());
    exif.extend([0, 0, 0, 0, 0, 0]);
    let mut out = jpeg[..2].to_vec();
    out.extend([0xFF, 0xE1]);
    out.extend(u16::try_from(exif.len() + 2).unwrap().to_be_bytes());
    out.extend(exif);
    out.extend(&jpeg[2..]);
    out
}

/// A photo is classified as it is shown: turned as its EXIF orientation says, as viewers and
/// browsers turn it (the page's answers, e2e `o`). Each of the eight orientations must answer
/// as the stored pixels turned by the table of EXIF 2.32 (written out here, pixel by pixel)
/// and saved as a PNG, and the turns must answer apart.
#[test]
fn a_photo_is_classified_upright_as_its_exif_orientation_says() {
    let tmp = scratch("cli");
    let (w, h) = (37u32, 23u32);
    let pattern = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([(x * 7) as u8, (y * 11) as u8, ((x * y * 3) % 256) as u8]));
    let mut jpeg = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 95).encode_image(&pattern).unwrap();
    // The pixels as stored: every copy below holds these, with only its EXIF told apart.
    let stored = image::load_from_memory(&jpeg).unwrap().to_rgb8();
    // Orientation k: where the stored row 0 and column 0 are shown (1: top, left; 2: top,
    // right; 3: bottom, right; 4: bottom, left; 5: left, top; 6: right, top; 7: right,
    // bottom; 8: left, bottom). The stored pixel shown at (x, y):
    let source = |k: u16, x: u32, y: u32| match k {
        1 => (x, y),
        2 => (w - 1 - x, y),
        3 => (w - 1 - x, h - 1 - y),
        4 => (x, h - 1 - y),
        5 => (y, x),
        6 => (y, h - 1 - x),
        7 => (w - 1 - y, h - 1 - x),
        _ => (w - 1 - y, x),
    };
    let mut files = Vec::new();
    for k in 1..=8u16 {
        let (sw, sh) = if k >= 5 { (h, w) } else { (w, h) };
        let shown = image::RgbImage::from_fn(sw, sh, |x, y| {
            let (sx, sy) = source(k, x, y);
            *stored.get_pixel(sx, sy)
        });
        let (photo, upright) = (tmp.path().join(format!("exif{k}.jpg")), tmp.path().join(format!("shown{k}.png")));
        std::fs::write(&photo, with_exif_orientation(&jpeg, k)).unwrap();
        shown.save(&upright).unwrap();
        files.extend([photo, upright]);
    }
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let mut args = vec!["classify", "--weights", weights.to_str().unwrap(), "--json", "--top-k", "3"];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let out = tokenmix(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let arr: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let answer = |i: usize| &arr[i]["predictions"];
    for k in 0..8 {
        assert!(
            same_answer(answer(2 * k), answer(2 * k + 1), "probability"),
            "orientation {}: {} vs turned {}",
            k + 1,
            answer(2 * k),
            answer(2 * k + 1)
        );
    }
    for (a, b) in [(1, 2), (1, 3), (1, 6), (6, 8), (5, 7), (2, 4)] {
        assert!(!same_answer(answer(2 * (a - 1) + 1), answer(2 * (b - 1) + 1), "probability"), "orientations {a} and {b} must answer apart");
    }
}

/// `classify --json` and `explain --json` write each image's element as it is done, one per
/// line, rather than the whole array at the end: a batch's answers are out while the next batch
/// is still being read. Here the next batch's only image is standard input, which the test
/// holds open until it has read the first batch's lines; the output as a whole is the array the
/// files give.
#[test]
fn json_results_come_out_batch_by_batch() {
    use std::io::{BufRead, Write};
    let tmp = scratch("cli");
    let png = tmp.path().join("gradient.png");
    save_gradient(&png);
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let w = weights.to_str().unwrap();
    let batch = tokenmix::exec::MAX_BATCH;
    let files = vec![png.to_str().unwrap(); batch];
    for cmd in ["classify", "explain"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tokenmix"))
            .args([cmd, "--weights", w, "--json", "--top-k", "2"])
            .args(&files)
            .arg("-")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("runs tokenmix");
        let mut stdin = child.stdin.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let reader = std::thread::spawn(move || {
            for line in stdout.lines() {
                if tx.send(line.expect("output lines")).is_err() {
                    break;
                }
            }
        });
        let wait = std::time::Duration::from_secs(120);
        let mut lines = Vec::new();
        for i in 0..batch {
            let line = rx.recv_timeout(wait).unwrap_or_else(|e| {
                let _ = child.kill();
                panic!("{cmd}: line {i} of the first batch did not come while the second was being read ({e}): the output is not streamed")
            });
            lines.push(line);
        }
        assert!(child.try_wait().unwrap().is_none(), "{cmd}: it waits for standard input, the next batch");
        stdin.write_all(&std::fs::read(&png).unwrap()).unwrap();
        drop(stdin);
        lines.extend(rx.iter());
        reader.join().unwrap();
        assert!(child.wait().unwrap().success(), "{cmd}");
        assert_eq!(lines.len(), batch + 1, "{cmd}: one line per image");
        assert!(lines[0].starts_with("[{") && lines[batch].ends_with("}]"), "{cmd}: {} … {}", lines[0], lines[batch]);
        assert!(lines[..batch].iter().all(|l| l.ends_with("},")), "{cmd}: each line but the last ends its element");
        let streamed: serde_json::Value = serde_json::from_str(&lines.join("\n")).expect("the lines make one JSON array");
        let streamed = streamed.as_array().expect("an array");
        let alone = tokenmix(&[cmd, "--weights", w, "--json", "--top-k", "2", png.to_str().unwrap()]);
        assert_eq!(String::from_utf8_lossy(&alone.stdout).lines().count(), 1, "{cmd}: one image is one line, [{{…}}]");
        let alone: serde_json::Value = serde_json::from_slice(&alone.stdout).expect("JSON");
        let key = if cmd == "classify" { "predictions" } else { "classes" };
        assert!(alone[0][key].as_array().is_some_and(|a| a.len() == 2), "{alone}");
        // The same classes; the numbers to float rounding (a batch of 64 sums in another order).
        let value = if cmd == "classify" { "probability" } else { "logit" };
        for (i, e) in streamed.iter().enumerate() {
            assert_eq!(e["image"], if i < batch { png.to_str().unwrap() } else { "-" }, "{cmd}");
            assert!(same_answer(&e[key], &alone[0][key], value), "{cmd}: image {i} answered as the file alone is: {} vs {}", e[key], alone[0][key]);
        }
    }
}

/// `--weights hf-hub:owner/name`, timm's own spelling, downloads the repository's
/// model.safetensors from the hub (a local stand-in here, `TOKENMIX_HUB`) into the cache once,
/// saying so, and answers as the file does; the next run reads the cache, with the server gone.
/// A name that is no repository and one the hub does not have are one-line errors that leave
/// nothing in the cache.
#[test]
#[cfg(feature = "hub")]
fn a_model_named_on_the_hub_is_downloaded_once_then_read_from_the_cache() {
    let tmp = scratch("cli");
    let (cache, image) = (tmp.path().join("cache"), tmp.path().join("gradient.png"));
    save_gradient(&image);
    let fixture = fixtures().join("poolformer_rgb.safetensors");
    let base = common::serve(std::fs::read(&fixture).unwrap());
    let run = |weights: &str, hub: &str| {
        Command::new(env!("CARGO_BIN_EXE_tokenmix"))
            .args(["classify", "--json", "--weights", weights, image.to_str().unwrap()])
            .env("TOKENMIX_HUB", hub)
            .env("TOKENMIX_CACHE_DIR", &cache)
            .output()
            .unwrap()
    };
    let answer = |out: &Output| {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")[0]["predictions"].clone()
    };
    let want = answer(&run(fixture.to_str().unwrap(), &base));
    // What downloads left in the model's folder: one killed an hour ago, one still writing.
    let folder = cache.join("timm--poolformer_cli");
    std::fs::create_dir_all(&folder).unwrap();
    let (killed, running) = (folder.join("model.4242-0.part"), folder.join("model.4243-0.part"));
    for part in [&killed, &running] {
        std::fs::write(part, b"part of a model").unwrap();
    }
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&killed).unwrap().set_modified(hour_ago).unwrap();
    let first = run("hf-hub:timm/poolformer_cli", &base);
    assert_eq!(answer(&first), want, "the downloaded model answers as its file");
    let note = String::from_utf8_lossy(&first.stderr);
    assert!(note.starts_with("note: hf-hub:timm/poolformer_cli: downloaded ") && note.trim_end().lines().count() == 1, "{note}");
    let cached = cache.join("timm--poolformer_cli/model.safetensors");
    assert_eq!(std::fs::read(&cached).unwrap(), std::fs::read(&fixture).unwrap(), "the file in the cache is the file served");
    assert!(!killed.exists(), "a killed download's partial file is removed by the next download");
    assert!(running.exists(), "one still being written to is not");
    std::fs::remove_file(&running).unwrap();
    // Again, with nothing listening at the hub's address: the cache, quietly; timm's older spelling too.
    let gone = "http://127.0.0.1:9";
    for name in ["hf-hub:timm/poolformer_cli", "hf_hub:timm/poolformer_cli", "https://huggingface.co/timm/poolformer_cli/blob/main/model.safetensors"]
    {
        let again = run(name, gone);
        assert_eq!(answer(&again), want, "{name}: from the cache");
        assert!(again.stderr.is_empty(), "{name}: {}", String::from_utf8_lossy(&again.stderr));
    }
    // info names it as given.
    let info = Command::new(env!("CARGO_BIN_EXE_tokenmix"))
        .args(["info", "--weights", "hf-hub:timm/poolformer_cli"])
        .env("TOKENMIX_HUB", gone)
        .env("TOKENMIX_CACHE_DIR", &cache)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&info.stdout).contains("model:       hf-hub:timm/poolformer_cli"), "{}", String::from_utf8_lossy(&info.stdout));
    for (name, hub, says) in [
        ("hf-hub:../etc/passwd", base.as_str(), "hub repository `../etc/passwd`: expected owner/name"),
        ("https://huggingface.co/timm", base.as_str(), "hub repository `https://huggingface.co/timm`: expected owner/name"),
        ("hf-hub:timm/missing_model", base.as_str(), "hf-hub:timm/missing_model: "),
        ("hf-hub:timm/poolformer_other", gone, "hf-hub:timm/poolformer_other: "),
    ] {
        let out = run(name, hub);
        assert_clean_error(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with(&format!("error: input: {says}")), "{name}: {err}");
    }
    // A file that is no model (a cut one here): an error, and not kept in the cache.
    let cut = common::serve(std::fs::read(&fixture).unwrap()[..1000].to_vec());
    let out = run("hf-hub:timm/poolformer_cut", &cut);
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert!(!out.status.success() && lines.len() == 2 && lines[0].starts_with("note: hf-hub:timm/poolformer_cut: downloaded 1000 B into "), "{err}");
    assert!(lines[1].starts_with("error: input: hf-hub:timm/poolformer_cut: ") && lines[1].ends_with("(removed from the hub cache)"), "{err}");
    assert!(!cache.join("timm--poolformer_cut/model.safetensors").exists());
    // The desktop app's command line too (it loaded the file itself, and kept it).
    #[cfg(feature = "desktop")]
    {
        let shot = tmp.path().join("view.png");
        let out = Command::new(env!("CARGO_BIN_EXE_tokenmix"))
            .args(["view", "--weights", "hf-hub:timm/poolformer_cut", "--screenshot", shot.to_str().unwrap()])
            .env("TOKENMIX_HUB", &cut)
            .env("TOKENMIX_CACHE_DIR", &cache)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.trim_end().ends_with("(removed from the hub cache)") && !shot.exists(), "view: {err}");
        assert!(!cache.join("timm--poolformer_cut/model.safetensors").exists(), "view: not kept");
    }
    let left: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|d| std::fs::read_dir(d).map_or(true, |mut f| f.next().is_some()))
        .map(|d| d.file_name().unwrap_or_default().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["timm--poolformer_cli"], "a failed download and a file that is no model leave nothing in the cache");
}

/// Built without the `hub` feature (a plain `cargo build`), `hf-hub:` says what to do instead.
#[test]
#[cfg(not(feature = "hub"))]
fn a_model_named_on_the_hub_needs_the_hub_feature() {
    let out = tokenmix(&["info", "--weights", "hf-hub:timm/mixer_b16_224.goog_in21k_ft_in1k"]);
    assert_clean_error(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: input: hf-hub:timm/mixer_b16_224.goog_in21k_ft_in1k: ") && err.contains("built without hub downloads"), "{err}");
}

#[test]
fn errors_are_one_line() {
    let tmp = scratch("cli");
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let w = weights.to_str().unwrap();
    // Missing file, truncated weights, wrong input rank, not an image.
    assert_clean_error(&tokenmix(&["info", "--weights", "/nonexistent/model.safetensors"]));
    let truncated = tmp.path().join("trunc.safetensors");
    std::fs::write(&truncated, &std::fs::read(&weights).unwrap()[..500]).unwrap();
    assert_clean_error(&tokenmix(&["info", "--weights", truncated.to_str().unwrap()]));
    // Cut in its tensors' data (an interrupted download): said so, with the size it should have.
    let model = std::fs::read(&weights).unwrap();
    std::fs::write(&truncated, &model[..model.len() - 100]).unwrap();
    let out = tokenmix(&["info", "--weights", truncated.to_str().unwrap()]);
    assert_clean_error(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cut short: {} bytes, where its header's tensors end at {}", model.len() - 100, model.len())), "{err}");
    let bad = tmp.path().join("rank2.npy");
    write_npy(&bad, &[2, 3], &[0.0; 6]);
    assert_clean_error(&tokenmix(&["logits", "--weights", w, "--input", bad.to_str().unwrap(), "--out", tmp.path().join("o.npy").to_str().unwrap()]));
    let notimg = tmp.path().join("not.png");
    std::fs::write(&notimg, b"hello").unwrap();
    assert_clean_error(&tokenmix(&["classify", "--weights", w, notimg.to_str().unwrap()]));
    let wrong_size = tmp.path().join("wrongsize.npy");
    write_npy(&wrong_size, &[1, 3, 20, 16], &[0.0; 960]);
    let out = tmp.path().join("o2.npy");
    assert_clean_error(&tokenmix(&["logits", "--weights", w, "--input", wrong_size.to_str().unwrap(), "--out", out.to_str().unwrap()]));
    // A device is not a model file: /dev/zero used to be read until the process was killed.
    #[cfg(unix)]
    assert_clean_error(&tokenmix(&["info", "--weights", "/dev/zero"]));
    // GEMM shapes with a zero dimension, or an operand no GPU binding holds (this one used to
    // abort in the allocator).
    for shape in ["0x8x8", "8x8x0", "99999999x99999x9999", "70000x70000x1"] {
        assert_clean_error(&tokenmix(&["bench", "--gemm", shape]));
    }
    // `--png` naming a file, not a folder (as in `explain --png x.png y.png`): said by name, not
    // "File exists (os error 17)".
    let img = tmp.path().join("grey.png");
    save_gradient(&img);
    let i = img.to_str().unwrap();
    for out in [tokenmix(&["explain", "--png", i, i]), tokenmix(&["insight", "--png", i])] {
        assert_clean_error(&out);
        assert!(String::from_utf8_lossy(&out.stderr).contains("a file, not a folder"), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // A count of 0 is refused by the argument parser (it used to be taken as 1 without a word).
    for (args, flag) in
        [(&["classify", "--top-k", "0", w][..], "--top-k"), (&["explain", "--top-k", "0", w], "--top-k"), (&["bench", "--iters", "0"], "--iters")]
    {
        let out = tokenmix(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with(&format!("error: invalid value '0' for '{flag}")) && err.contains("must be at least 1"), "{args:?}: {err}");
    }
}

#[test]
fn bench_reports_json() {
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let out = tokenmix(&["bench", "--weights", weights.to_str().unwrap(), "--batch", "1,2", "--iters", "2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
    assert!(v["first_result_ms"].as_f64().unwrap() > 0.0);
    assert!(v["precision"].is_string() && v["f16_activations"].is_array(), "{v}");
    let out = tokenmix(&["bench", "--gemm", "33x17x65", "--iters", "1", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let variants: Vec<&str> = v["runs"].as_array().unwrap().iter().map(|r| r["variant"].as_str().unwrap()).collect();
    assert!(variants.contains(&"cpu") && variants.iter().any(|&x| x != "cpu"), "the CPU GEMM and the WGSL kernels: {variants:?}");
    for v in ["tiled", "tiled128", "tiled128k16", "tiled32", "register"] {
        assert!(variants.contains(&v), "{v} missing from {variants:?}");
    }
    // Each WGSL kernel's result against the CPU GEMM's (f32: rounding only).
    for r in v["runs"].as_array().unwrap().iter().filter(|r| r["variant"] != "cpu") {
        let err = r["rel_error"].as_f64().unwrap_or(f64::NAN);
        assert!(err < 1e-5, "{} {}: rel. error {err}", r["variant"], r["layout"]);
    }
    assert_eq!(v["precision"], "f32", "{v}");
    assert!(v["gemm"].as_str().is_some_and(|g| !g.is_empty()), "the default kernel: {v}");
    // f16 weights (lavapipe has shader-f16): reported as such, and still close to the CPU GEMM.
    let out = tokenmix(&["bench", "--gemm", "33x17x65", "--iters", "1", "--precision", "f16", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["precision"], "f16", "{v}");
    let gpu_runs: Vec<_> = v["runs"].as_array().unwrap().iter().filter(|r| r["variant"] != "cpu").collect();
    assert!(!gpu_runs.is_empty(), "no WGSL kernel ran: {v}");
    for r in gpu_runs {
        let err = r["rel_error"].as_f64().unwrap_or(f64::NAN);
        assert!(err < 1e-2, "{} {} (f16): rel. error {err}", r["variant"], r["layout"]);
    }
}

/// `bench --profile` on both executors: each run says where one forward pass's time went, per
/// kind of step (the GPU's with the kernel that ran it), in the table and in --json; without
/// the flag there is no profile, and with --gemm the flag is refused in one clear line.
#[test]
fn bench_profile_says_where_the_time_goes() {
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let w = weights.to_str().unwrap();
    for backend in ["gpu", "cpu"] {
        let out = tokenmix(&["--backend", backend, "bench", "--weights", w, "--batch", "1,2", "--iters", "1", "--profile", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let runs = v["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{v}");
        for run in runs {
            // The GPU also times the pass with its input left on the device; the CPU has no upload.
            let device = run["device_ms"].as_f64();
            assert_eq!(device.is_some(), backend == "gpu", "{backend}: device_ms on the GPU alone: {run}");
            assert!(device.is_none_or(|d| d > 0.0), "{backend}: {run}");
            let p = &run["profile"];
            assert_eq!(p["batch"], run["batch"], "{backend}: {p}");
            let rows = p["rows"].as_array().unwrap();
            let kinds: Vec<&str> = rows.iter().map(|r| r["kind"].as_str().unwrap()).collect();
            assert!(kinds.contains(&"layer_norm") && kinds.iter().any(|k| k.starts_with("tokens")), "{backend}: {kinds:?}");
            let kernels = rows.iter().filter(|r| r["kernel"].as_str().is_some_and(|k| !k.is_empty())).count();
            assert_eq!(kernels, if backend == "gpu" { rows.len() } else { 0 }, "{backend}: GPU rows name their kernel, CPU rows none: {p}");
            let total: f64 = rows.iter().map(|r| r["ms"].as_f64().unwrap()).sum();
            assert!(total > 0.0 && p["span_ms"].as_f64().unwrap() > 0.0, "{backend}: {p}");
        }
        let out = tokenmix(&["--backend", backend, "bench", "--weights", w, "--batch", "1", "--iters", "1", "--profile"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("profile, batch 1 (") && text.contains("layer_norm"), "{backend}: {text}");
    }
    let out = tokenmix(&["bench", "--weights", w, "--batch", "1", "--iters", "1", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["runs"][0].get("profile").is_none(), "a profile only when asked for: {v}");
    assert_clean_error(&tokenmix(&["bench", "--gemm", "33x17x65", "--profile"]));
}

/// `bench --image`: a file classified as the page and the desktop app classify one, timed by
/// each route of the executor (on the GPU: resized by `preprocess.wgsl` and on the CPU; the
/// CPU executor its own), each giving `classify`'s answer for the file; a file that is no
/// image, or `--image` with `--gemm`, is a one-line error.
#[test]
fn bench_times_an_image_by_each_resize_route() {
    let tmp = scratch("cli");
    let file = tmp.path().join("photo.png");
    image::RgbImage::from_fn(640, 480, |x, y| image::Rgb([(x * 7 + y) as u8, (y * 3 + x / 16) as u8, ((x ^ y) >> 3) as u8])).save(&file).unwrap();
    let f = file.to_str().unwrap();
    let classify = tokenmix(&["classify", "--json", "--top-k", "1", f]);
    assert!(classify.status.success(), "{}", String::from_utf8_lossy(&classify.stderr));
    let want: serde_json::Value = serde_json::from_slice(&classify.stdout).unwrap();
    let want = &want[0]["predictions"][0];
    for (backend, routes) in [("gpu", vec!["cpu", "gpu"]), ("cpu", vec!["cpu"])] {
        let out = tokenmix(&["--backend", backend, "bench", "--batch", "1", "--iters", "2", "--image", f, "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let image = &v["image"];
        assert_eq!((image["width"].as_u64(), image["height"].as_u64()), (Some(640), Some(480)), "{v}");
        let got = image["routes"].as_object().expect("routes");
        assert_eq!(got.keys().map(String::as_str).collect::<Vec<_>>(), routes, "{backend}: {v}");
        for (route, r) in got {
            assert!(r["median_ms"].as_f64().unwrap() > 0.0 && r["preprocess_ms"].as_f64().unwrap() >= 0.0, "{backend} {route}: {r}");
            assert_eq!(r["top1"], want["index"], "{backend} {route}: {r} vs classify's {want}");
            let (p, q) = (r["probability"].as_f64().unwrap(), want["probability"].as_f64().unwrap());
            assert!((p - q).abs() <= 1e-5, "{backend} {route}: {p} vs classify's {q}");
        }
    }
    let text = tokenmix(&["--backend", "gpu", "bench", "--batch", "1", "--iters", "1", "--image", f]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("(640x480), resized on the gpu: median") && stdout.contains("resized on the cpu: median"), "{stdout}");
    let notes = tmp.path().join("notes.txt");
    std::fs::write(&notes, "hello").unwrap();
    let out = tokenmix(&["bench", "--image", notes.to_str().unwrap()]);
    assert_clean_error(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("notes.txt: not an image tokenmix reads"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_clean_error(&tokenmix(&["bench", "--gemm", "33x17x65", "--image", f]));
}

/// With the autotuner on (`TOKENMIX_AUTOTUNE=1`: by default it tunes real GPUs only), `bench
/// --json` and `info --json` report its choice per shape class, the choices persist in
/// `TOKENMIX_CACHE_DIR`, and a second run reads them; `TOKENMIX_GEMM` fixes the kernel and
/// turns it off; a bad kernel name is a one-line error naming the valid ones.
#[test]
fn autotuned_gemm_choices_are_reported_and_cached() {
    let tmp = scratch("cli");
    let weights = fixtures().join("gmlp_p4_rgb.safetensors");
    let cache = tmp.path().join("tune-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let run = |args: &[&str], envs: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokenmix"));
        cmd.args(args)
            .env("TOKENMIX_CACHE_DIR", &cache)
            .env_remove("TOKENMIX_GEMM")
            .env_remove("TOKENMIX_AUTOTUNE")
            .env_remove("TOKENMIX_ROWS")
            .env_remove("TOKENMIX_RESAMPLE");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.output().expect("runs tokenmix")
    };
    let bench = ["bench", "--backend", "gpu", "--weights", weights.to_str().unwrap(), "--batch", "1", "--iters", "1", "--json"];
    let out = run(&bench, &[("TOKENMIX_AUTOTUNE", "1"), ("TOKENMIX_TUNE_LOG", "1")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["gemm_autotune"], true, "{v}");
    let tuning = v["gemm_tuning"].as_object().expect("choices").clone();
    assert!(tuning.len() >= 3, "linear, token-mixing and head GEMMs each have a class: {v}");
    // TOKENMIX_TUNE_LOG: one line per timed class, a time for every candidate, the choice the
    // fastest of them.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let logged: Vec<&str> = stderr.lines().filter_map(|l| l.strip_prefix("tune: ")).collect();
    assert_eq!(logged.len(), tuning.len(), "{stderr}");
    for line in logged {
        let (class, times) = line.split_once(": ").expect("class: times");
        let times: Vec<(&str, f64)> = times
            .split(", ")
            .map(|t| {
                let (kernel, ms) = t.split_once(' ').expect("kernel time");
                (kernel, ms.strip_suffix(" ms").and_then(|m| m.parse().ok()).unwrap_or_else(|| panic!("{line}")))
            })
            .collect();
        assert!(times.len() >= 2 && times.iter().all(|&(_, ms)| ms > 0.0), "{line}");
        let least = times.iter().map(|&(_, ms)| ms).fold(f64::INFINITY, f64::min);
        let chosen = tuning.get(class).and_then(|k| k.as_str()).unwrap_or_else(|| panic!("{class} untuned"));
        assert!(times.iter().any(|&(k, ms)| k == chosen && ms == least), "{chosen} is not the fastest: {line}");
    }
    assert!(tuning.keys().any(|k| k.starts_with("linear")) && tuning.keys().any(|k| k.starts_with("tokens")), "{v}");
    let cached = std::fs::read_to_string(cache.join("gemm-tuning.json")).expect("the cache file");
    assert!(tuning.keys().all(|k| cached.contains(k.as_str())), "{cached}");
    // The second run reads the cache: the same choices.
    let info = run(&["info", "--backend", "gpu", "--weights", weights.to_str().unwrap(), "--json"], &[("TOKENMIX_AUTOTUNE", "1")]);
    assert!(info.status.success(), "{}", String::from_utf8_lossy(&info.stderr));
    let i: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    for (class, kernel) in i["gemm_tuning"].as_object().expect("choices") {
        assert_eq!(tuning.get(class), Some(kernel), "{class}");
    }
    // A fixed kernel: no tuning, and the kernel named.
    let out = run(&bench, &[("TOKENMIX_AUTOTUNE", "1"), ("TOKENMIX_GEMM", "tiled32")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["gemm"].as_str(), &v["gemm_autotune"]), (Some("tiled32"), &serde_json::json!(false)), "{v}");
    let out = run(&bench, &[("TOKENMIX_GEMM", "tiled64")]);
    assert!(!out.status.success());
    assert_clean_error(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("tiled128"), "{}", String::from_utf8_lossy(&out.stderr));
    // The norms' row kernel: the software adapter's by default, TOKENMIX_ROWS's when set, a
    // name that is neither a one-line error.
    let rows_of = |envs: &[(&str, &str)]| {
        let out = run(&bench, envs);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["rows"].as_str().map(str::to_string)
    };
    assert_eq!(rows_of(&[]).as_deref(), Some("invocation"), "lavapipe is a CPU rasteriser");
    assert_eq!(rows_of(&[("TOKENMIX_ROWS", "workgroup")]).as_deref(), Some("workgroup"));
    assert_eq!(rows_of(&[("TOKENMIX_ROWS", "subgroup")]).as_deref(), Some("subgroup"), "lavapipe has subgroups");
    let out = run(&bench, &[("TOKENMIX_ROWS", "warp")]);
    assert!(!out.status.success());
    assert_clean_error(&out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("TOKENMIX_ROWS=warp: expected invocation, workgroup or subgroup"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Where an image is resized: on the CPU by default on a CPU rasteriser, TOKENMIX_RESAMPLE's
    // when set (`info --json` too), a name that is neither a one-line error.
    let resample_of = |args: &[&str], envs: &[(&str, &str)]| {
        let out = run(args, envs);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["resample"].as_str().map(str::to_string)
    };
    let info = ["info", "--backend", "gpu", "--weights", weights.to_str().unwrap(), "--json"];
    assert_eq!(resample_of(&bench, &[]).as_deref(), Some("cpu"), "lavapipe is a CPU rasteriser");
    assert_eq!(resample_of(&bench, &[("TOKENMIX_RESAMPLE", "gpu")]).as_deref(), Some("gpu"));
    assert_eq!(resample_of(&info, &[("TOKENMIX_RESAMPLE", "gpu")]).as_deref(), Some("gpu"));
    assert_eq!(resample_of(&["info", "--backend", "cpu", "--json"], &[]), None, "the CPU executor has no GPU resampling");
    let out = run(&info, &[("TOKENMIX_RESAMPLE", "shader")]);
    assert!(!out.status.success());
    assert_clean_error(&out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("TOKENMIX_RESAMPLE=shader: expected gpu or cpu"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--backend` and `TOKENMIX_BACKEND` choose the executor; `info` and `bench --json` say which
/// and why; `auto` on this machine's software adapter (lavapipe) is the CPU; both give the
/// same logits; a bad value is a one-line error.
#[test]
fn backend_is_chosen_reported_and_consistent() {
    let tmp = scratch("cli");
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let w = weights.to_str().unwrap();
    let info = |args: &[&str], env: Option<&str>| -> serde_json::Value {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokenmix"));
        cmd.args(args).env_remove("TOKENMIX_BACKEND");
        if let Some(e) = env {
            cmd.env("TOKENMIX_BACKEND", e);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let auto = info(&["info", "--weights", w, "--json"], None);
    let software = common::gpu().info.device_type == wgpu::DeviceType::Cpu;
    assert_eq!(auto["backend"], if software { "cpu" } else { "gpu" }, "{}", auto["backend_reason"]);
    assert!(auto["backend_reason"].as_str().unwrap().len() > 10);
    assert_eq!(info(&["--backend", "gpu", "info", "--weights", w, "--json"], None)["backend"], "gpu");
    assert_eq!(info(&["info", "--weights", w, "--json"], Some("cpu"))["backend"], "cpu");
    // The flag wins over the environment.
    assert_eq!(info(&["--backend", "gpu", "info", "--weights", w, "--json"], Some("cpu"))["backend"], "gpu");
    let bench = info(&["--backend", "cpu", "bench", "--weights", w, "--batch", "1", "--iters", "1", "--json"], None);
    assert_eq!(bench["backend"], "cpu");
    assert_eq!(bench["gemm"], "gemm+matrixmultiply");

    // Same logits from both executors through the `logits` command.
    let io = read_tensors(&fixtures().join("mixer_p4_rgb.io.safetensors"), &["input", "logits"]);
    let (shape, input) = &io[0];
    let x = tmp.path().join("backend.x.npy");
    write_npy(&x, &shape.iter().map(|&d| d as u64).collect::<Vec<_>>(), input);
    let mut got = Vec::new();
    for b in ["cpu", "gpu"] {
        let y = tmp.path().join(format!("backend.{b}.npy"));
        let out = tokenmix(&["--backend", b, "logits", "--weights", w, "--input", x.to_str().unwrap(), "--out", y.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        got.push(read_npy(&y).1);
    }
    assert!(max_abs_diff(&got[0], &got[1]) <= tol::GOLDEN * max_abs(&io[1].1).max(1.0));

    assert_clean_error(&tokenmix(&["--backend", "tpu", "info"]));
    let out = Command::new(env!("CARGO_BIN_EXE_tokenmix")).args(["info"]).env("TOKENMIX_BACKEND", "fast").output().unwrap();
    assert_clean_error(&out);
}

/// `explain --input X.npy --out Y.npy --bias B.npy` on both executors: Y is timm's evidence
/// (tools/make_goldens.py --explain) and `Y.sum((2, 3)) + B` is timm's logits.
#[test]
fn explain_raw_mode_matches_timm_on_both_backends() {
    let tmp = scratch("cli");
    for name in ["mixer_p8_grey_nonsquare", "poolformer_rgb", "resmlp_p4_bf16"] {
        let io = read_tensors(&fixtures().join(format!("{name}.io.safetensors")), &["input", "logits"]);
        let ex = read_tensors(&fixtures().join(format!("{name}.explain.safetensors")), &["evidence", "bias"]);
        let ((shape, input), (_, logits)) = (&io[0], &io[1]);
        let x = tmp.path().join(format!("{name}.ex.x.npy"));
        write_npy(&x, &shape.iter().map(|&d| d as u64).collect::<Vec<_>>(), input);
        let weights = fixtures().join(format!("{name}.safetensors"));
        for backend in ["gpu", "cpu"] {
            let (y, b) = (tmp.path().join(format!("{name}.{backend}.ev.npy")), tmp.path().join(format!("{name}.{backend}.bias.npy")));
            let args = ["--backend", backend, "explain", "--weights", weights.to_str().unwrap(), "--input", x.to_str().unwrap()];
            let out = tokenmix(&[&args[..], &["--out", y.to_str().unwrap(), "--bias", b.to_str().unwrap()]].concat());
            assert!(out.status.success(), "{name} {backend}: {}", String::from_utf8_lossy(&out.stderr));
            let ((yshape, got), (_, bias)) = (read_npy(&y), read_npy(&b));
            assert_eq!(yshape, ex[0].0.iter().map(|&d| d as u64).collect::<Vec<_>>(), "{name}: [N, classes, gh, gw]");
            assert!(max_abs_diff(&got, &ex[0].1) <= tol::GOLDEN * max_abs(&ex[0].1).max(1.0), "{name} {backend}: maps");
            let per = (yshape[2] * yshape[3]) as usize;
            let sums: Vec<f32> = got.chunks(per).enumerate().map(|(i, m)| m.iter().sum::<f32>() + bias[i % bias.len()]).collect();
            assert!(max_abs_diff(&sums, logits) <= tol::GOLDEN * max_abs(logits).max(1.0), "{name} {backend}: sum + bias = logits");
        }
    }
    // Raw mode needs both files; a missing input is one clear line.
    assert!(!tokenmix(&["explain", "--input", "x.npy"]).status.success());
    assert_clean_error(&tokenmix(&["explain", "--input", "/nonexistent.npy", "--out", tmp.path().join("never.npy").to_str().unwrap()]));
}

#[test]
fn explain_json_and_insight_json_and_png() {
    let tmp = scratch("cli");
    let img = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("www/samples/fmnist-0000-boot.png");
    let out = tokenmix(&["--backend", "cpu", "explain", img.to_str().unwrap(), "--top-k", "3", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &v[0];
    assert_eq!(first["grid"], serde_json::json!([7, 7]));
    let classes = first["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 3);
    assert_eq!(classes[0]["label"], "Ankle boot", "the embedded model's top class for the boot sample");
    for c in classes {
        let map: Vec<f64> = c["map"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(map.len(), 49);
        let sum = map.iter().sum::<f64>() + c["bias"].as_f64().unwrap();
        assert!((sum - c["logit"].as_f64().unwrap()).abs() < 1e-4, "{sum} vs {}", c["logit"]);
    }
    // insight --json: every layer with figures beside the initialisation's; --png: files.
    let dir = tmp.path().join("insight-png");
    let out = tokenmix(&["insight", "--json", "--png", dir.to_str().unwrap(), "--image", img.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let views = v["views"].as_array().unwrap();
    assert_eq!(views.len(), v["layers"].as_u64().unwrap() as usize);
    assert!(views.len() >= 2);
    for l in views {
        assert!(l["figures"]["locality"].as_f64().unwrap() > 0.0 && l["init"]["shiftInvariance"].as_f64().unwrap() > 0.0);
        assert_eq!(l["groups"].as_array().unwrap().iter().map(|g| g.as_array().unwrap().len()).sum::<usize>(), l["rows"].as_u64().unwrap() as usize);
    }
    for f in ["input.png", "layer0_units.png", "layer0_overlay.png", "layer0_offset_kernel.png"] {
        let bytes = std::fs::read(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{f}");
    }
    assert_clean_error(&tokenmix(&["insight", "--layer", "99"]));
    assert_clean_error(&tokenmix(&["explain", "/nonexistent.png"]));
    // explain --png: two images with one file name (a/x.png, b/x.png) keep a PNG each (the
    // second used to overwrite the first's).
    let samples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("www/samples");
    let [a, b] = ["a", "b"].map(|d| tmp.path().join(d).join("x.png"));
    for (to, from) in [(&a, "fmnist-0000-boot.png"), (&b, "fmnist-0002-trouser.png")] {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(samples.join(from), to).unwrap();
    }
    let dir = tmp.path().join("explain-png");
    // Every one of the 10 classes for each: the same class's map for both images.
    let out = tokenmix(&["explain", "--top-k", "10", "--png", dir.to_str().unwrap(), a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let names: std::collections::BTreeSet<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let want: std::collections::BTreeSet<String> = (0..10).flat_map(|c| [format!("x_evidence_{c}.png"), format!("x-2_evidence_{c}.png")]).collect();
    assert_eq!(names, want, "a PNG per image and class");
    let [first, second] = ["x_evidence_9.png", "x-2_evidence_9.png"].map(|f| std::fs::read(dir.join(f)).unwrap());
    assert_ne!(first, second, "two images, two pictures");
}

/// `--precision` (and `TOKENMIX_PRECISION`): f16 GEMM weights and hidden activations on the
/// GPU (lavapipe has shader-f16), reported by `info --json` (with `f16_activations`) and
/// `bench --json`; the CPU executor stays f32 and
/// says so; a bad value is a one-line error. The f16 logits stay within the f16 bound of f32's.
#[test]
fn precision_is_chosen_and_reported() {
    let tmp = scratch("cli");
    let weights = fixtures().join("mixer_p4_rgb.safetensors");
    let w = weights.to_str().unwrap();
    let info = |args: &[&str]| -> serde_json::Value {
        let out = tokenmix(&[&["info", "--weights", w, "--json"], args].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let v = info(&["--backend", "gpu", "--precision", "f16"]);
    assert_eq!((&v["precision"], &v["precision_note"]), (&serde_json::json!("f16"), &serde_json::Value::Null), "{v}");
    assert_eq!(v["f16_activations"], serde_json::json!(["hidden"]), "{v}");
    let v = info(&["--backend", "gpu"]);
    assert_eq!((&v["precision"], &v["f16_activations"]), (&serde_json::json!("f32"), &serde_json::json!([])), "{v}");
    let v = info(&["--backend", "cpu", "--precision", "f16"]);
    assert_eq!(v["precision"], "f32");
    assert!(v["precision_note"].as_str().unwrap_or("").contains("CPU executor computes in f32"), "{v}");
    let out = Command::new(env!("CARGO_BIN_EXE_tokenmix")).args(["info", "--backend", "gpu"]).env("TOKENMIX_PRECISION", "f16").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("precision:   f16"), "{}", String::from_utf8_lossy(&out.stdout));
    assert_clean_error(&tokenmix(&["info", "--precision", "f64"]));

    // The same inputs through f32 and f16 weights on the GPU: logits within the f16 bound.
    let io = read_tensors(&fixtures().join("mixer_p4_rgb.io.safetensors"), &["input"]);
    let (shape, data) = &io[0];
    let x = tmp.path().join("prec_x.npy");
    write_npy(&x, &shape.iter().map(|&d| d as u64).collect::<Vec<_>>(), data);
    let mut logits = Vec::new();
    for p in ["f32", "f16"] {
        let y = tmp.path().join(format!("prec_{p}.npy"));
        let out =
            tokenmix(&["logits", "--backend", "gpu", "--precision", p, "--weights", w, "--input", x.to_str().unwrap(), "--out", y.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        logits.push(read_npy(&y).1);
    }
    let diff = max_abs_diff(&logits[0], &logits[1]);
    let scale = max_abs(&logits[0]).max(1.0);
    assert!(diff > 0.0 && diff <= 1e-2 * scale, "f16 vs f32 weights: max|Δlogit| {diff} (scale {scale})");
}

/// The Rust example, `examples/classify.rs` (the library as a user calls it: `exec::select`,
/// `Model::load`, `preprocess::Batches`, `Model::forward_blocking`), answers a folder as
/// `tokenmix classify --json` does, each image's top class and probability, an unreadable file
/// a line saying why in its place, and then exits with 2.
#[test]
fn the_rust_example_classifies_a_folder_as_the_cli_does() {
    let tmp = scratch("cli");
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("www/samples");
    let mut names: Vec<_> =
        std::fs::read_dir(&samples).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n.to_string_lossy().ends_with(".png")).collect();
    names.sort();
    for n in names.iter().take(5) {
        std::fs::copy(samples.join(n), tmp.path().join(n)).unwrap();
    }
    std::fs::write(tmp.path().join("fmnist-0002b-notes.png"), b"not a picture").unwrap();
    let dir = tmp.path().to_str().unwrap();
    let cli = tokenmix(&["--backend", "cpu", "classify", "--json", dir]);
    let cli: serde_json::Value = serde_json::from_slice(&cli.stdout).expect("classify --json");
    let cli = cli.as_array().unwrap();
    assert_eq!(cli.len(), 6);
    let out = Command::new(example("classify")).arg(dir).env("TOKENMIX_BACKEND", "cpu").output().expect("runs the example");
    assert_eq!(out.status.code(), Some(2), "one image did not read: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), cli.len(), "{stdout}");
    for (line, want) in lines.iter().zip(cli) {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields[0], want["image"].as_str().unwrap(), "the CLI's order");
        match want.get("error") {
            Some(e) => assert_eq!(fields[1], format!("error: {}", e.as_str().unwrap())),
            None => {
                let top = &want["predictions"][0];
                assert_eq!(fields[1], top["label"].as_str().unwrap(), "{line}");
                let p: f64 = fields[2].parse().unwrap();
                assert!((p - top["probability"].as_f64().unwrap()).abs() <= 5e-5, "{line} vs {top}");
            }
        }
    }
    // Without arguments: its usage, as an error.
    let out = Command::new(example("classify")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("usage: classify"));
}

/// The binary of the example `name`, built by cargo in this test's profile and features
/// (`cargo test` builds the examples too; a run of one test file does not, so it is built here,
/// and a binary older than its source is rebuilt).
fn example(name: &str) -> PathBuf {
    let profile_dir = std::env::current_exe().unwrap().parent().and_then(Path::parent).unwrap().to_path_buf();
    let profile = match profile_dir.file_name().and_then(|p| p.to_str()).unwrap() {
        "debug" => "dev",
        p => p,
    }
    .to_string();
    let mut cargo = Command::new(env!("CARGO"));
    // Not with what cargo set for this test: a build script that reads it would rebuild.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if (k.starts_with("CARGO_") && k != "CARGO_HOME" && k != "CARGO_TARGET_DIR") || k == "LD_LIBRARY_PATH" || k == "RUST_RECURSION_COUNT" {
            cargo.env_remove(k.as_ref());
        }
    }
    cargo.current_dir(env!("CARGO_MANIFEST_DIR")).args(["build", "--quiet", "--profile", &profile, "--example", name]);
    if cfg!(feature = "desktop") {
        cargo.args(["--features", "desktop"]);
    }
    let built = cargo.status().expect("runs cargo");
    assert!(built.success(), "cargo build --example {name}");
    let exe = profile_dir.join("examples").join(name);
    assert!(exe.is_file(), "{} was built", exe.display());
    exe
}
