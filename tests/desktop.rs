//! The desktop app (`tokenmix view`, feature `desktop`), driven headless with egui_kittest and
//! rendered on the wgpu adapter (lavapipe in CI): a sample classifies as `tokenmix classify`
//! does and its evidence lies over the image; switching models and layers redraws the views; a
//! corrupt model file shows an error while the previous model keeps working; a hub download
//! from a local server shows progress; the window keeps drawing while a slow model classifies
//! and explains, and while a slow layer's views are computed; the camera (synthetic, and none)
//! and pasting; `view --screenshot`; a Mixer with 256 token-MLP units keeps its offset kernel
//! inside the window. Screenshots land in tests/artifacts/desktop-*.png.
#![cfg(feature = "desktop")]

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::Command;

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use tokenmix::desktop::{camera, ModelSource, Viewer};
use tokenmix::Device;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn harness(viewer: Viewer) -> Harness<'static, Viewer> {
    harness_sized(viewer, [1200.0, 820.0])
}

fn harness_sized(viewer: Viewer, size: [f32; 2]) -> Harness<'static, Viewer> {
    Harness::builder().with_size(size).wgpu().build_ui_state(|ui, v: &mut Viewer| v.ui(ui), viewer)
}

/// Steps frames until the background work has ended: the model loading (the picker, Open, a
/// download) adopted, the image classified or explained. The window draws meanwhile.
fn settle(h: &mut Harness<'static, Viewer>) {
    h.step(); // (a click waiting for its frame starts its work there)
    frames_while(h, Viewer::busy);
    assert!(!h.state().busy(), "the background work ended within 60 s");
    h.run();
}

/// Steps frames, 10 ms apart, while `working` holds of the app (at most 60 s); returns how many.
fn frames_while(h: &mut Harness<'static, Viewer>, working: fn(&Viewer) -> bool) -> usize {
    let (mut frames, start) = (0, std::time::Instant::now());
    while working(h.state()) && start.elapsed().as_secs() < 60 {
        h.step();
        frames += 1;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    frames
}

fn viewer() -> Viewer {
    Viewer::new(Device::cpu(), "CPU (test)".into(), None).expect("the embedded model loads")
}

/// Renders the current frame and saves it as a test artefact; returns the pixels.
fn shot(h: &mut Harness<'static, Viewer>, name: &str) -> image::RgbaImage {
    let img = h.render().expect("rendered on the wgpu adapter");
    let dir = root().join("tests/artifacts");
    std::fs::create_dir_all(&dir).expect("artifacts folder");
    img.save(dir.join(format!("desktop-{name}.png"))).expect("screenshot saved");
    img
}

fn cli_classify(image: &str) -> serde_json::Value {
    cli_classify_with(&[], image)
}

/// `tokenmix classify --json` of `image`, with `args` (`--weights W`) before it.
fn cli_classify_with(args: &[&str], image: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tokenmix"))
        .args(["classify", "--json", "--top-k", "5"])
        .args(args)
        .arg(image)
        .output()
        .expect("tokenmix runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn a_sample_classifies_as_the_cli_and_its_evidence_lies_over_the_image() {
    let cli = cli_classify(root().join("www/samples/fmnist-0000-boot.png").to_str().unwrap());
    let mut h = harness(viewer());
    h.run();
    h.get_by_label("boot").click();
    settle(&mut h);
    let c = h.state().classified.as_ref().expect("classified");
    let want = cli[0]["predictions"].as_array().unwrap();
    assert_eq!(c.predictions.len(), 5);
    for (p, w) in c.predictions.iter().zip(want) {
        assert_eq!(p.index as u64, w["index"].as_u64().unwrap(), "class order as the CLI");
        assert!((p.probability as f64 - w["probability"].as_f64().unwrap()).abs() < 1e-3);
    }
    let top = c.predictions[0].label.clone();
    assert_eq!(top, "Ankle boot");
    // Click the top class: its evidence overlay, and the identity line.
    h.get_by_label_contains(&top).click();
    settle(&mut h);
    assert_eq!(h.state().evidence, Some(c_index(&h)));
    h.get_by_label(&format!("Overlay: evidence for {top}"));
    h.get_by_label_contains("Evidence: logit");
    let img = shot(&mut h, "evidence");
    // The overlay tints the image area red where tokens argue for the class.
    let reddish = img.pixels().filter(|p| p[0] > 150 && p[2] < 120 && p[1] < 120).count();
    assert!(reddish > 2000, "evidence overlay drawn ({reddish} red pixels)");
}

fn c_index(h: &Harness<'static, Viewer>) -> usize {
    h.state().classified.as_ref().map(|c| c.predictions[0].index).unwrap_or(usize::MAX)
}

#[test]
fn switching_models_and_layers_redraws_the_views() {
    let mut h = harness(viewer());
    h.run();
    h.get_by_label("sandal").click();
    settle(&mut h);
    let mixer = shot(&mut h, "mixer");
    assert_eq!(h.state().insight.as_ref().map(|i| i.kind), Some("mixer"));
    // The model picker: gMLP.
    h.get_by_label("Model").click();
    h.run();
    h.get_by_label("gmlp_fmnist").click();
    h.step();
    // The model loads on a thread of its own while the window keeps drawing.
    assert_eq!(h.state().loading(), Some("gmlp_fmnist"), "the load runs in the background");
    assert_eq!(h.state().model.info.family, "MLP-Mixer", "the previous model serves until then");
    let by_mixer = h.state().classified.as_ref().map(|c| c.serial);
    settle(&mut h);
    assert_eq!(h.state().model.info.family, "gMLP");
    assert_eq!(h.state().insight.as_ref().map(|i| i.kind), Some("gmlp"));
    let again = h.state().classified.as_ref().map(|c| c.serial);
    assert!(again > by_mixer, "the image is classified again by the new model: {by_mixer:?} -> {again:?}");
    let gmlp0 = shot(&mut h, "gmlp-layer0");
    // The layer slider, by keyboard.
    h.get_by_role_and_label(egui::accesskit::Role::Slider, "Layer").focus();
    h.run();
    for _ in 0..5 {
        h.key_press(egui::Key::ArrowRight);
        settle(&mut h);
    }
    let layer = h.state().insight.as_ref().map(|i| i.layer);
    assert_eq!(layer, Some(5), "five steps of the slider: layer 5");
    let gmlp5 = shot(&mut h, "gmlp-layer5");
    let differ = |a: &image::RgbaImage, b: &image::RgbaImage| a.pixels().zip(b.pixels()).filter(|(x, y)| x != y).count();
    assert!(differ(&mixer, &gmlp0) > 10_000, "a new model redraws the views");
    assert!(differ(&gmlp0, &gmlp5) > 1_000, "a new layer redraws the views");
    // PoolFormer: its fixed kernel and the per-stage energy of the image.
    h.get_by_label("Model").click();
    h.run();
    h.get_by_label("poolformer_fmnist").click();
    h.step();
    settle(&mut h);
    assert_eq!(h.state().insight.as_ref().map(|i| i.kind), Some("poolformer"));
    h.get_by_label("Activation energy of this image, per stage:");
    shot(&mut h, "poolformer");
}

#[test]
fn a_corrupt_model_file_shows_an_error_and_the_previous_model_keeps_working() {
    let dir = common::scratch("desktop");
    let bad = dir.path().join("corrupt.safetensors");
    let mut bytes = std::fs::read(root().join("weights/gmlp_fmnist.safetensors")).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&bad, &bytes).unwrap();
    let mut h = harness(viewer());
    h.run();
    h.get_by_label("Path").click();
    h.run();
    h.get_by_label("Path").type_text(bad.to_str().unwrap());
    h.run();
    assert_eq!(h.state().path_field, bad.to_str().unwrap(), "typed into the path field");
    h.get_by_label("Open").click();
    h.step();
    settle(&mut h);
    let err = h.state().error.clone().expect("an error is shown");
    assert!(err.contains("Could not load") && err.contains("previous model"), "{err}");
    h.get_by_label_contains("Could not load");
    assert_eq!(h.state().model.info.family, "MLP-Mixer", "the previous model stays");
    shot(&mut h, "corrupt-model");
    h.get_by_label("trouser").click();
    settle(&mut h);
    let c = h.state().classified.as_ref().expect("still classifies");
    assert_eq!(c.predictions[0].label, "Trouser");
}

/// A PyTorch checkpoint given in place of a model (typed, or dropped: both go through
/// `open_path`) is loaded as one, and so said to be one, with where its safetensors is; it was
/// taken for an image ("The file extension `.pth` was not recognized as an image format").
#[test]
fn a_pytorch_checkpoint_is_named_as_one_and_the_previous_model_stays() {
    let dir = common::scratch("desktop");
    let zip = std::fs::read(root().join("tests/hostile/41_torch_zip.safetensors")).unwrap();
    for name in ["pytorch_model.bin", "model.PTH"] {
        let path = dir.path().join(name);
        std::fs::write(&path, &zip).unwrap();
        let mut h = harness(viewer());
        h.run();
        h.state_mut().open_path(path);
        settle(&mut h);
        let err = h.state().error.clone().expect("an error is shown");
        assert!(err.contains(&format!("Could not load {}", dir.path().join(name).display())), "{name}: {err}");
        assert!(err.contains("zip archive, PyTorch's torch.save format") && err.contains("model.safetensors"), "{name}: {err}");
        assert_eq!(h.state().model.info.family, "MLP-Mixer", "the previous model stays");
    }
}

/// Files dropped together all count, as on the page: of a model and two images, the first image
/// is shown and answered by that model, as it answers the image alone, and its name says how
/// many came (each was opened in turn: the last image shown); a folder stands for its images.
#[test]
fn files_dropped_together_show_the_first_image_answered_by_the_model_among_them() {
    let dir = common::scratch("desktop");
    let [pullover, trouser] = ["fmnist-0001-pullover.png", "fmnist-0002-trouser.png"].map(|n| {
        let p = dir.path().join(n);
        std::fs::copy(root().join("www/samples").join(n), &p).unwrap();
        p
    });
    std::fs::write(dir.path().join("notes.txt"), b"not an image").unwrap();
    let gmlp = root().join("weights/gmlp_fmnist.safetensors");
    let answer = |h: &Harness<'static, Viewer>| -> Vec<(String, f32)> {
        h.state().classified.as_ref().expect("an image is classified").predictions.iter().map(|p| (p.label.clone(), p.probability)).collect()
    };
    let mut alone = harness(viewer());
    alone.run();
    alone.state_mut().open_path(gmlp.clone());
    settle(&mut alone);
    alone.state_mut().open_path(pullover.clone());
    settle(&mut alone);
    let by_gmlp = answer(&alone);
    let mut mixer = harness(viewer());
    mixer.run();
    mixer.state_mut().open_path(pullover.clone());
    settle(&mut mixer);
    assert_ne!(answer(&mixer), by_gmlp, "the two models answer apart, so the answer shows which one ran");

    let mut h = harness(viewer());
    h.run();
    h.state_mut().open_paths(vec![gmlp.clone(), pullover.clone(), trouser.clone(), dir.path().join("notes.txt")]);
    settle(&mut h);
    assert_eq!(h.state().model.info.family, "gMLP");
    assert_eq!(h.state().classified.as_ref().map(|c| c.source.clone()), Some(format!("{} (1 of 2 images)", pullover.display())));
    assert_eq!(answer(&h), by_gmlp, "answered by the model dropped with it");
    // A folder: its images, the first shown; the others a step away (‹ › under the image, or
    // the arrow keys), round from the last to the first, each answered as it is alone; an
    // image from elsewhere (a sample) ends the stepping. The app showed the first only.
    let pullover_alone = answer(&mixer);
    mixer.state_mut().open_path(trouser.clone());
    settle(&mut mixer);
    let trouser_alone = answer(&mixer);
    let mut h = harness(viewer());
    h.run();
    h.state_mut().open_paths(vec![dir.path().to_path_buf()]);
    settle(&mut h);
    let shown = |h: &Harness<'static, Viewer>| h.state().classified.as_ref().map(|c| c.source.clone()).unwrap_or_default();
    let (first, second) = (format!("{} (1 of 2 images)", pullover.display()), format!("{} (2 of 2 images)", trouser.display()));
    assert_eq!(shown(&h), first);
    assert_eq!(answer(&h), pullover_alone);
    h.get_by_label("1 / 2");
    h.key_press(egui::Key::ArrowRight);
    settle(&mut h);
    assert_eq!((shown(&h), answer(&h)), (second.clone(), trouser_alone.clone()), "→: the next image");
    h.get_by_label("2 / 2");
    assert_eq!(h.state().predictions_json()[0]["image"], trouser.display().to_string(), "named as `classify --json` names it");
    shot(&mut h, "folder-second-image");
    h.get_by_label("›").click();
    settle(&mut h);
    assert_eq!((shown(&h), answer(&h)), (first.clone(), pullover_alone.clone()), "›: round to the first");
    h.key_press(egui::Key::ArrowLeft);
    settle(&mut h);
    assert_eq!(shown(&h), second, "←: round to the last");
    h.get_by_label("‹").click();
    settle(&mut h);
    assert_eq!(shown(&h), first, "‹: the previous image");
    h.state_mut().open_sample("boot");
    settle(&mut h);
    assert!(h.state().images.is_none(), "a sample ends the stepping");
    h.key_press(egui::Key::ArrowRight);
    settle(&mut h);
    assert_eq!(shown(&h), "sample: boot", "the arrow keys then step nothing");
    // A folder with no image is said to be one.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    h.state_mut().open_paths(vec![empty.clone()]);
    assert!(h.state().error.as_ref().is_some_and(|e| e.contains("a folder with no image in it")), "{:?}", h.state().error);
}

/// A folder's image that does not read, stepped to, takes its place as an error: no image and no
/// answer (the previous image's stayed under the new position), and an image still being
/// classified when the step came is let go. "Classify all" answers the folder as `tokenmix
/// classify --json` does, saves that JSON, can be stopped, and ends with the stepping.
#[test]
fn a_folder_is_stepped_past_an_unreadable_image_and_classified_all_into_a_table() {
    let dir = common::scratch("desktop-all");
    for n in ["fmnist-0001-pullover.png", "fmnist-0002-trouser.png"] {
        std::fs::copy(root().join("www/samples").join(n), dir.path().join(n)).unwrap();
    }
    // Named to lie between the two.
    let bad = dir.path().join("fmnist-0001a-notes.png");
    std::fs::write(&bad, b"not an image").unwrap();
    let mut h = harness(viewer());
    h.run();
    h.state_mut().open_paths(vec![dir.path().to_path_buf()]);
    settle(&mut h);
    let shown = |h: &Harness<'static, Viewer>| h.state().classified.as_ref().map(|c| c.source.clone());
    let name = |f: &str, k: usize| format!("{} ({k} of 3 images)", dir.path().join(f).display());
    assert_eq!(shown(&h), Some(name("fmnist-0001-pullover.png", 1)));
    h.key_press(egui::Key::ArrowRight);
    settle(&mut h);
    assert_eq!(shown(&h), None, "no other image's answer under the unreadable one's position");
    assert!(h.state().error.as_ref().is_some_and(|e| e.contains("fmnist-0001a-notes.png")), "{:?}", h.state().error);
    h.get_by_label("2 / 3");
    h.get_by_label(&format!("{} does not read.", name("fmnist-0001a-notes.png", 2)));
    assert_eq!(h.state().predictions_json(), serde_json::json!([]));
    shot(&mut h, "folder-unreadable-image");
    h.key_press(egui::Key::ArrowRight);
    settle(&mut h);
    assert_eq!(shown(&h), Some(name("fmnist-0002-trouser.png", 3)), "the next step goes on past it");
    assert_eq!(h.state().error, None);
    // → round to the pullover, and at once → to the unreadable image: the pullover's answer,
    // arriving after the step, is not shown.
    h.state_mut().step_images(1);
    h.state_mut().step_images(1);
    settle(&mut h);
    assert_eq!(shown(&h), None, "the image stepped past while it was classified is not shown");
    assert!(h.state().error.as_ref().is_some_and(|e| e.contains("fmnist-0001a-notes.png")), "{:?}", h.state().error);
    h.get_by_label("2 / 3");
    h.state_mut().step_images(-1);
    settle(&mut h);
    assert_eq!(shown(&h), Some(name("fmnist-0001-pullover.png", 1)));

    // Classify all: the CLI's answers for the folder, in its order, the unreadable one's error
    // included; the image shown stays.
    let cli = Command::new(env!("CARGO_BIN_EXE_tokenmix")).args(["classify", "--json", "--top-k", "5"]).arg(dir.path()).output().unwrap();
    assert!(!cli.status.success(), "the CLI says an image did not read");
    let cli: serde_json::Value = serde_json::from_slice(&cli.stdout).expect("JSON");
    assert_eq!(cli.as_array().map(Vec::len), Some(3));
    h.get_by_label("Classify all").click();
    settle(&mut h);
    let rows =
        |h: &Harness<'static, Viewer>| serde_json::Value::from(h.state().images.as_ref().and_then(|i| i.all.as_ref()).expect("a table").rows.clone());
    let same = |got: &serde_json::Value, want: &serde_json::Value| {
        let (got, want) = (got.as_array().unwrap(), want.as_array().unwrap());
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g["image"], w["image"]);
            assert_eq!(g["error"], w["error"], "{}", w["image"]);
            let (gp, wp) = (g["predictions"].as_array(), w["predictions"].as_array());
            assert_eq!(gp.map(Vec::len), wp.map(Vec::len));
            for (a, b) in gp.into_iter().flatten().zip(wp.into_iter().flatten()) {
                assert_eq!((&a["index"], &a["label"]), (&b["index"], &b["label"]), "{}", w["image"]);
                assert!((a["probability"].as_f64().unwrap() - b["probability"].as_f64().unwrap()).abs() < 1e-5, "{a} against {b}");
            }
        }
    };
    same(&rows(&h), &cli);
    h.get_by_label("3 / 3 classified");
    assert_eq!(shown(&h), Some(name("fmnist-0001-pullover.png", 1)), "the image shown stays");
    shot(&mut h, "folder-classified-all");
    // A row shows its image, as stepping to it does.
    h.get_by_label("fmnist-0002-trouser.png").click();
    settle(&mut h);
    assert_eq!(shown(&h), Some(name("fmnist-0002-trouser.png", 3)));
    h.get_by_label("3 / 3");
    h.get_by_label("fmnist-0001-pullover.png").click();
    settle(&mut h);
    assert_eq!(shown(&h), Some(name("fmnist-0001-pullover.png", 1)));
    // A column's name sorts the table: by probability, least sure first (the unreadable image
    // below any), then most; by image, the folder's order again. A row still shows its image.
    let order = |h: &mut Harness<'static, Viewer>| -> Vec<String> {
        let all = h.state_mut().images.as_mut().and_then(|i| i.all.as_mut()).expect("a table");
        let order = all.order().to_vec();
        order.iter().map(|&k| all.rows[k]["image"].as_str().unwrap().to_string()).collect()
    };
    let by_probability = |descending: bool| -> Vec<String> {
        let mut rows: Vec<(f64, String)> = cli
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["predictions"][0]["probability"].as_f64().unwrap_or(-1.0), r["image"].as_str().unwrap().to_string()))
            .collect();
        rows.sort_by(|a, b| if descending { b.0.total_cmp(&a.0) } else { a.0.total_cmp(&b.0) });
        rows.into_iter().map(|r| r.1).collect()
    };
    let folder: Vec<String> = cli.as_array().unwrap().iter().map(|r| r["image"].as_str().unwrap().to_string()).collect();
    h.get_by_label("probability").click();
    h.run();
    h.get_by_label("low to high");
    assert_eq!(order(&mut h), by_probability(false), "least sure first");
    assert_eq!(order(&mut h)[0], bad.display().to_string(), "the unreadable image below any probability");
    h.get_by_label("probability").click();
    h.run();
    h.get_by_label("high to low");
    assert_eq!(order(&mut h), by_probability(true), "most sure first");
    shot(&mut h, "folder-sorted");
    let surest = by_probability(true)[0].clone();
    h.get_by_label(std::path::Path::new(&surest).file_name().unwrap().to_str().unwrap()).click();
    settle(&mut h);
    assert!(shown(&h).is_some_and(|s| s.starts_with(&surest)), "{:?}", shown(&h));
    h.get_by_label("image").click();
    h.run();
    h.get_by_label("folder order");
    assert_eq!(order(&mut h), folder, "the folder's order again");
    // The steps' tooltips draw (egui_kittest panics on a glyph the window's font lacks: "←" did).
    for step in ["‹", "›"] {
        h.get_by_label(step).hover();
        h.run();
    }
    h.get_by_label("Next image (right arrow key)");
    h.get_by_label("fmnist-0001-pullover.png").click();
    settle(&mut h);
    // Saved as the CLI prints it; a file that exists is not overwritten.
    let saved = dir.path().join("tokenmix-classify.json");
    h.get_by_label("Save as JSON").click();
    h.run();
    same(&serde_json::from_slice(&std::fs::read(&saved).expect("saved")).expect("JSON"), &cli);
    h.get_by_label(&format!("Saved 3 rows to {}.", saved.display()));
    h.get_by_label("Save as JSON").click();
    h.run();
    h.get_by_label(&format!("{} exists: name another file.", saved.display()));
    // Stopped as it starts: nothing classified, and it says so.
    h.state_mut().classify_all();
    h.state_mut().stop_classify_all();
    settle(&mut h);
    assert_eq!(rows(&h), serde_json::json!([]));
    h.get_by_label("0 / 3 classified (stopped)");
    // A camera's still is an image from elsewhere too: it ends the stepping and the table, where
    // the still was shown under the folder's ‹ k / n › and the arrow keys stepped on.
    h.state_mut().camera = Box::new(camera::Synthetic::new());
    h.get_by_label("Start camera").click();
    h.run();
    h.get_by_label("Capture").click();
    settle(&mut h);
    assert_eq!(shown(&h).as_deref(), Some("camera: synthetic test pattern"));
    assert!(h.state().images.is_none(), "a capture ends the stepping");
    h.get_by_label("Stop camera").click();
    h.run();
    h.state_mut().open_paths(vec![dir.path().to_path_buf()]);
    settle(&mut h);
    h.get_by_label("Classify all").click();
    settle(&mut h);
    // Another model stops a run; an image from elsewhere ends the table with the stepping.
    h.state_mut().classify_all();
    h.state_mut().start_load("gmlp_fmnist", ModelSource::File(root().join("weights/gmlp_fmnist.safetensors")));
    settle(&mut h);
    let all = h.state().images.as_ref().and_then(|i| i.all.as_ref()).expect("a table");
    assert!(all.stopped == Some("stopped: another model was loaded") || (all.stopped.is_none() && all.rows.len() == 3), "{:?}", all.stopped);
    h.state_mut().open_sample("boot");
    settle(&mut h);
    assert!(h.state().images.is_none());
    assert!(h.query_by_label("Classify all").is_none(), "the table went with the stepping");
}

/// An image file is read on the model's thread, not the window's: a 4000×3000 photo's decode
/// stalled the window for its 75 ms at every step through a folder, a slow disk for longer. A
/// FIFO written half a second later stands for such a file: the window draws meanwhile, and
/// the image is answered as its file is.
#[cfg(unix)]
#[test]
fn an_image_file_is_read_off_the_window_thread() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = common::scratch("desktop-slow");
    let fifo = dir.path().join("slow.png");
    assert!(Command::new("mkfifo").arg(&fifo).status().expect("runs mkfifo").success());
    let mut h = harness(viewer());
    h.run();
    // The writer starts only now: the window's start-up does not eat into its half second.
    let written = std::sync::Arc::new(AtomicBool::new(false));
    let writer = {
        let (fifo, written) = (fifo.clone(), written.clone());
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(500));
            written.store(true, Ordering::SeqCst);
            let bytes = std::fs::read(root().join("www/samples/fmnist-0002-trouser.png")).unwrap();
            std::fs::write(&fifo, bytes).expect("writes the FIFO");
        })
    };
    h.state_mut().open_path(fifo.clone());
    assert!(!written.load(Ordering::SeqCst), "open_path returned before the file came");
    h.step();
    assert!(h.state().classifying(), "the window draws while the file is read");
    settle(&mut h);
    writer.join().unwrap();
    let c = h.state().classified.as_ref().unwrap_or_else(|| panic!("classified: {:?}", h.state().error));
    assert_eq!((c.source.as_str(), c.predictions[0].label.as_str()), (fifo.to_str().unwrap(), "Trouser"));
}

/// "Classify all" on a folder of hundreds lays out the table's rows in view, not all of them
/// (each frame drew every row).
#[test]
fn a_long_table_lays_out_only_the_rows_in_view() {
    let dir = common::scratch("desktop-long");
    let n = 300;
    for k in 0..n {
        std::fs::copy(root().join("www/samples/fmnist-0000-boot.png"), dir.path().join(format!("boot-{k:03}.png"))).unwrap();
    }
    let mut h = harness(viewer());
    h.run();
    h.state_mut().open_paths(vec![dir.path().to_path_buf()]);
    settle(&mut h);
    h.get_by_label("Classify all").click();
    settle(&mut h);
    h.get_by_label(&format!("{n} / {n} classified"));
    let laid_out = (0..n).filter(|k| h.query_by_label(&format!("boot-{k:03}.png")).is_some()).count();
    assert!((3..30).contains(&laid_out), "{laid_out} of the {n} rows laid out");
}

/// The window names a label-less 1000-class checkpoint's classes as the page does, in ImageNet-1k's
/// names (`www/imagenet_labels.json`); it showed "class 281".
#[test]
fn an_imagenet_checkpoint_is_answered_in_imagenet_names() {
    let names: Vec<String> = serde_json::from_str(&std::fs::read_to_string(root().join("www/imagenet_labels.json")).unwrap()).unwrap();
    let mut h = harness(viewer());
    h.run();
    h.state_mut().open_path(root().join("tests/fixtures/mixer_many_tokens.safetensors"));
    settle(&mut h);
    h.state_mut().open_path(root().join("www/samples/fmnist-0009-sneaker.png"));
    settle(&mut h);
    let shown = &h.state().classified.as_ref().expect("classified").predictions;
    assert_eq!(shown.len(), 5);
    for p in shown {
        assert_eq!(p.label, names[p.index], "class {}", p.index);
    }
}

#[test]
fn a_hub_download_from_a_local_server_shows_progress_then_loads() {
    let cache_dir = common::scratch("hub-cache");
    let cache = cache_dir.path();
    let base = common::serve(std::fs::read(root().join("tests/fixtures/poolformer_rgb.safetensors")).unwrap());
    let mut v = viewer();
    v.hub_cache = cache.to_path_buf();
    v.hub_base = base;
    // Named as its page's address (pasted from the browser): the repository is read from it.
    v.hub_repo = "https://huggingface.co/timm/poolformer_test/tree/main".into();
    let mut h = harness(v);
    h.run();
    h.get_by_label("Download").click();
    h.step(); // the click starts the download
    assert!(h.state().download.is_some(), "a download runs");
    let mut rendered_progress = false;
    let start = std::time::Instant::now();
    while h.state().download.is_some() && start.elapsed().as_secs() < 60 {
        h.step();
        if !rendered_progress && h.state().progress_seen.iter().any(|&f| f > 0.2 && f < 0.9) {
            h.step();
            shot(&mut h, "hub-progress");
            rendered_progress = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    settle(&mut h); // the downloaded file loads in the background
    let s = h.state();
    assert!(s.error.is_none(), "{:?}", s.error);
    assert!(s.progress_seen.iter().any(|&f| f > 0.0 && f < 1.0), "progress was shown: {:?}", s.progress_seen);
    assert!(rendered_progress, "a frame with the progress bar was rendered");
    assert_eq!(s.model.info.family, "PoolFormer");
    assert_eq!(s.model_name, "timm/poolformer_test");
    assert!(cache.join("timm--poolformer_test/model.safetensors").is_file(), "the download is in the cache");
    // A bad repository name is refused before any request.
    h.state_mut().hub_repo = "../etc/passwd".into();
    h.get_by_label("Download").click();
    h.run();
    assert!(h.state().error.as_deref().unwrap_or("").contains("owner/name"));
    h.state_mut().error = None;

    let wait = |h: &mut Harness<'static, Viewer>| {
        let start = std::time::Instant::now();
        while h.state().download.is_some() && start.elapsed().as_secs() < 60 {
            h.step();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(h.state().download.is_none(), "the download ended");
        settle(h);
    };
    let repo_dir = |name: &str| cache.join(format!("timm--{name}"));
    let download = |h: &mut Harness<'static, Viewer>, name: &str| {
        h.state_mut().hub_repo = format!("timm/{name}");
        h.run(); // (the layout settles first: the click goes where the button is now)
        h.get_by_label("Download").click();
        h.step();
    };

    // The path field takes a model on the hub as the CLI's `--weights` does: timm's name.
    h.get_by_label("Path").click();
    h.run();
    h.get_by_label("Path").type_text("hf-hub:timm/poolformer_typed");
    h.run();
    h.get_by_label("Open").click();
    h.step();
    assert!(h.state().download.is_some(), "a download runs: {:?} / {}", h.state().error, h.state().status);
    wait(&mut h);
    assert_eq!((h.state().model_name.as_str(), h.state().error.as_deref()), ("timm/poolformer_typed", None));
    assert!(repo_dir("poolformer_typed").join("model.safetensors").is_file(), "downloaded into the cache");

    // A model chosen while a download runs is not replaced when the download ends; the file
    // is cached for later.
    download(&mut h, "poolformer_race");
    assert!(h.state().download.is_some(), "a download runs: {:?} / {}", h.state().error, h.state().status);
    h.get_by_label("Model").click();
    h.step();
    h.step(); // the popup opens, then is laid out
    h.get_by_label("gmlp_fmnist").click();
    h.step();
    settle(&mut h);
    assert_eq!(h.state().model.info.family, "gMLP");
    wait(&mut h);
    assert_eq!(h.state().model.info.family, "gMLP", "the download did not replace the model chosen meanwhile");
    assert!(h.state().status.contains("not loaded"), "{}", h.state().status);
    assert!(repo_dir("poolformer_race").join("model.safetensors").is_file(), "the download is cached");

    // A cancelled download stops, loads nothing and leaves no partial file.
    download(&mut h, "poolformer_cancel");
    let leftovers = || std::fs::read_dir(repo_dir("poolformer_cancel")).map(|d| d.count()).unwrap_or(0);
    let start = std::time::Instant::now();
    while !h.state().progress_seen.iter().any(|&f| f > 0.0) && start.elapsed().as_secs() < 20 {
        h.step();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(leftovers(), 1, "bytes arrived, in a partial file");
    h.get_by_label("Cancel download").click();
    h.step();
    assert!(h.state().download.is_none() && h.state().status.contains("cancelled"), "{}", h.state().status);
    let start = std::time::Instant::now();
    while leftovers() > 0 && start.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(leftovers(), 0, "no partial or complete file of the cancelled download");
    assert_eq!(h.state().model.info.family, "gMLP");

    // A cached file that does not load is removed, so that Download fetches it again.
    std::fs::create_dir_all(repo_dir("poolformer_bad")).unwrap();
    std::fs::write(repo_dir("poolformer_bad").join("model.safetensors"), b"<html>a proxy's page</html>").unwrap();
    download(&mut h, "poolformer_bad");
    wait(&mut h);
    let err = h.state().error.clone().unwrap_or_default();
    assert!(err.contains("Could not load") && err.contains("removed from the cache"), "{err}");
    assert!(!repo_dir("poolformer_bad").join("model.safetensors").exists(), "the bad file is gone");
    assert_eq!(h.state().model.info.family, "gMLP", "the previous model stays");
    download(&mut h, "poolformer_bad");
    wait(&mut h);
    assert_eq!(h.state().error, None);
    assert_eq!(h.state().model.info.family, "PoolFormer", "downloaded afresh and loaded");
    assert_eq!(h.state().model_name, "timm/poolformer_bad");
}

/// A camera whose stills take half a second to come, taken in [`camera::Camera::grab`]'s
/// function as ffmpeg's are.
struct Slow(camera::Synthetic);

impl camera::Camera for Slow {
    fn name(&self) -> String {
        format!("slow {}", self.0.name())
    }
    fn start(&mut self) -> tokenmix::Result<()> {
        self.0.start()
    }
    fn frame(&mut self) -> tokenmix::Result<image::RgbImage> {
        self.grab()?()
    }
    fn grab(&mut self) -> tokenmix::Result<camera::Grab> {
        let frame = self.0.frame()?;
        Ok(Box::new(move || {
            std::thread::sleep(std::time::Duration::from_millis(500));
            Ok(frame)
        }))
    }
    fn stop(&mut self) {
        self.0.stop()
    }
    fn running(&self) -> bool {
        self.0.running()
    }
}

#[test]
fn the_camera_captures_frames_or_says_there_is_none() {
    let mut h = harness(viewer());
    h.run();
    // The default camera (ffmpeg on a device) where there is none: a clear message.
    h.state_mut().camera = Box::new(camera::Unavailable);
    h.get_by_label("Start camera").click();
    h.run();
    assert!(h.state().error.as_deref().unwrap_or("").contains("no camera"), "{:?}", h.state().error);
    let mut ff = camera::Ffmpeg::new();
    if let Err(e) = camera::Camera::start(&mut ff) {
        assert!(e.to_string().contains("no camera:"), "{e}");
    }
    h.state_mut().camera = Box::new(camera::Synthetic::new());
    h.state_mut().error = None;
    h.get_by_label("Start camera").click();
    h.run();
    h.get_by_label("Capture").click();
    settle(&mut h);
    let c = h.state().classified.as_ref().expect("a captured frame is classified");
    assert!(c.source.starts_with("camera:"), "{}", c.source);
    h.get_by_label("Stop camera").click();
    h.run();
    assert!(!h.state().camera.running());
    // A camera slow to give its still (ffmpeg opens the device and exposes, a second or so):
    // the window keeps drawing meanwhile, and the still is classified when it comes.
    h.state_mut().camera = Box::new(Slow(camera::Synthetic::new()));
    h.get_by_label("Start camera").click();
    h.run();
    h.get_by_label("Capture").click();
    h.step();
    assert!(h.state().classifying(), "the frame of the click ended before the still came");
    let frames = frames_while(&mut h, Viewer::classifying);
    assert!(frames >= 10, "the window drew {frames} frames while the camera took its still");
    settle(&mut h);
    let c = h.state().classified.as_ref().expect("the slow camera's still is classified");
    assert_eq!(c.source, "camera: slow synthetic test pattern");
    h.get_by_label("Stop camera").click();
    h.run();
    // Pasting with nothing (or no clipboard, headless) to paste: a message, no panic.
    h.state_mut().error = None;
    h.get_by_label("Paste image").click();
    h.run();
    assert!(h.state().error.as_deref().unwrap_or("").contains("No image to paste"), "{:?}", h.state().error);
    // Ctrl/Cmd+V, as egui-winit reports it: an image on the clipboard (PasteImage) is
    // classified; text on it (Paste) makes the app look for an image, and say there is none…
    let sample_rgba = image::open(root().join("www/samples/fmnist-0001-pullover.png")).expect("a sample").to_rgba8();
    let (w, h_) = (sample_rgba.width() as usize, sample_rgba.height() as usize);
    h.state_mut().classified = None;
    h.event(egui::Event::PasteImage(std::sync::Arc::new(egui::ColorImage::from_rgba_unmultiplied([w, h_], sample_rgba.as_raw()))));
    settle(&mut h);
    let c = h.state().classified.as_ref().expect("the pasted image is classified");
    assert_eq!(c.source, "pasted image");
    let pasted: Vec<(usize, f32)> = c.predictions.iter().map(|p| (p.index, p.probability)).collect();
    h.state_mut().open_sample("pullover");
    settle(&mut h);
    let sample: Vec<(usize, f32)> = h.state().classified.as_ref().expect("the sample").predictions.iter().map(|p| (p.index, p.probability)).collect();
    assert_eq!(pasted, sample, "the pasted pixels are classified as the same sample opened from its file");
    // The same pixels half transparent: egui holds them multiplied by alpha, and the model
    // sees them unmultiplied, as the file's, up to egui's 8-bit rounding (a level or two:
    // 0.02 in normalised units, where one level is 1 / (255 * 0.353)).
    let file_input = h.state().classified.as_ref().expect("the sample").input.clone();
    let mut translucent = sample_rgba.clone();
    translucent.pixels_mut().for_each(|p| p[3] = 128);
    h.event(egui::Event::PasteImage(std::sync::Arc::new(egui::ColorImage::from_rgba_unmultiplied([w, h_], translucent.as_raw()))));
    settle(&mut h);
    let c = h.state().classified.as_ref().expect("the translucent image is classified");
    assert_eq!(c.source, "pasted image");
    let worst = c.input.iter().zip(&file_input).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 0.025, "the translucent paste's input differs from the file's by up to {worst}");
    assert_eq!(c.predictions[0].index, sample[0].0, "translucent paste: the file's top class");
    h.state_mut().error = None;
    h.event(egui::Event::Paste("some text".into()));
    h.run();
    assert!(h.state().error.as_deref().unwrap_or("").contains("No image to paste"), "Ctrl+V of text: {:?}", h.state().error);
    // …except in a text field that has the keyboard: the text goes there.
    h.state_mut().error = None;
    h.get_by_label("Path").click();
    h.run();
    h.event(egui::Event::Paste("some text".into()));
    h.run();
    assert_eq!(h.state().error, None, "Ctrl+V in the path field");
    assert_eq!(h.state().path_field, "some text");
}

#[test]
fn view_screenshot_renders_offscreen_and_prints_the_predictions() {
    let sample = root().join("www/samples/fmnist-0009-sneaker.png");
    let out = root().join("tests/artifacts/desktop-view-screenshot.png");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_tokenmix"))
        .args(["view", "--image", sample.to_str().unwrap(), "--screenshot", out.to_str().unwrap(), "--json"])
        .output()
        .expect("tokenmix runs");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let got: serde_json::Value = serde_json::from_slice(&run.stdout).expect("JSON");
    let want = cli_classify(sample.to_str().unwrap());
    let (g, w) = (got[0]["predictions"].as_array().unwrap(), want[0]["predictions"].as_array().unwrap());
    assert_eq!(g.len(), 5);
    for (a, b) in g.iter().zip(w) {
        assert_eq!(a["index"], b["index"]);
        assert!((a["probability"].as_f64().unwrap() - b["probability"].as_f64().unwrap()).abs() < 1e-3);
    }
    let img = image::open(&out).expect("a PNG").to_rgba8();
    assert_eq!(img.dimensions(), (1200, 820));
    let colours: std::collections::HashSet<[u8; 4]> = img.pixels().map(|p| p.0).collect();
    assert!(colours.len() > 50, "a real frame, not a blank one ({} colours)", colours.len());
    // A folder: its first image (by name) is the one shown.
    let scratch = common::scratch("view");
    let folder = scratch.path().join("shoes");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(&sample, folder.join("a.png")).unwrap();
    std::fs::copy(root().join("www/samples/fmnist-0001-pullover.png"), folder.join("b.png")).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_tokenmix"))
        .args(["view", "--image", folder.to_str().unwrap(), "--screenshot", scratch.path().join("folder.png").to_str().unwrap(), "--json"])
        .output()
        .expect("tokenmix runs");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let folder_json: serde_json::Value = serde_json::from_slice(&run.stdout).expect("JSON");
    assert_eq!(folder_json[0]["predictions"], got[0]["predictions"], "the sneaker, a.png, is shown");
    assert_eq!(folder_json[0]["image"], folder.join("a.png").display().to_string(), "named as classify names it");
    // Bad input: one line, no panic.
    let bad =
        Command::new(env!("CARGO_BIN_EXE_tokenmix")).args(["view", "--image", "/nonexistent.png", "--screenshot", "/tmp/x.png"]).output().unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.starts_with("error: ") && !err.contains("panicked"), "{err}");
    // An image that does not decode: its reason, said once ("input: input: …" before).
    let empty = scratch.path().join("empty.png");
    std::fs::write(&empty, b"").expect("a scratch file");
    let bad = Command::new(env!("CARGO_BIN_EXE_tokenmix"))
        .args(["view", "--image", empty.to_str().unwrap(), "--screenshot", "/tmp/x.png"])
        .output()
        .expect("tokenmix runs");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.starts_with("error: input: ") && err.matches("input: ").count() == 1, "{err}");
}

/// `view` with no display says what the window needs, in one line: with neither X11 nor Wayland,
/// that there is no display; on a Wayland session without XWayland, that the window is an X11
/// one and XWayland gives it a display. It used to pass on winit's advice for whoever builds it
/// ("enable the `winit/wayland` feature").
#[cfg(all(unix, not(target_vendor = "apple")))]
#[test]
fn a_window_with_no_display_says_what_it_needs() {
    for (wayland, want) in [(None, "no display (DISPLAY is not set)"), (Some("wayland-tokenmix-test"), "XWayland")] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokenmix"));
        for k in ["DISPLAY", "WAYLAND_DISPLAY", "WAYLAND_SOCKET"] {
            cmd.env_remove(k);
        }
        if let Some(w) = wayland {
            cmd.env("WAYLAND_DISPLAY", w);
        }
        let out = cmd.arg("view").output().expect("tokenmix runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{wayland:?}: should fail");
        assert!(err.starts_with("error: ") && err.trim_end().lines().count() == 1 && !err.contains("panicked"), "{wayland:?}: {err}");
        assert!(err.contains(want) && err.contains("--screenshot") && !err.contains("winit/wayland"), "{wayland:?}: {err}");
    }
}

/// The embedded Mixer with every token MLP widened to `units` hidden units (F16, seeded
/// values): as many units as a hub `mixer_s16_224` has (256), on the shipped 7x7 grid.
fn wide_token_mlps(units: usize) -> Vec<u8> {
    use safetensors::{tensor::TensorView, SafeTensors};
    let st = SafeTensors::deserialize(tokenmix::DEFAULT_MODEL).expect("the embedded model parses");
    let (_, meta) = SafeTensors::read_metadata(tokenmix::DEFAULT_MODEL).expect("its header parses");
    let mut state = 1u32;
    let mut next = move || {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        ((state >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.4
    };
    let mut tensors = Vec::new();
    for (name, t) in st.tensors() {
        let s = t.shape().to_vec();
        let shape = if name.ends_with("mlp_tokens.fc1.weight") {
            vec![units, s[1]]
        } else if name.ends_with("mlp_tokens.fc1.bias") {
            vec![units]
        } else if name.ends_with("mlp_tokens.fc2.weight") {
            vec![s[0], units]
        } else {
            tensors.push((name, t.dtype(), s, t.data().to_vec()));
            continue;
        };
        let n: usize = shape.iter().product();
        let bytes = (0..n).flat_map(|_| half::f16::from_f32(next()).to_le_bytes()).collect();
        tensors.push((name, safetensors::Dtype::F16, shape, bytes));
    }
    let views = tensors.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).expect("tensor view")));
    safetensors::serialize(views, meta.metadata().clone()).expect("serialised")
}

#[test]
fn a_mixer_with_many_token_units_keeps_its_offset_kernel_in_view() {
    let mut h = harness(viewer());
    h.run();
    h.state_mut().load_model("wide", &wide_token_mlps(256));
    settle(&mut h);
    assert_eq!(h.state().insight.as_ref().map(|i| (i.kind, i.rows)), Some(("mixer", 256)), "the widened model is shown");
    h.get_by_label_contains("256 token-MLP units over the 7×7 grid");
    let kernel = h.get_by_label_contains("Mean weight by relative offset").rect();
    shot(&mut h, "mixer-256-units");
    // The kernel image (160 px tall on a 7x7 grid) below its caption, inside the 820 px window.
    assert!(kernel.max.y + 160.0 <= 820.0, "the offset kernel is pushed out of view: its caption ends at y = {}", kernel.max.y);
}

/// A layer's views are computed on a thread of their own: the frame that moves the slider
/// ends with the previous layer's views still shown (dimmed, with a spinner), the window draws
/// while a slow layer is computed, a slider moved over several layers meanwhile computes only
/// the last, and a layer computed before comes back at once (also while another is being
/// computed, which then does not replace it). The slow model: the embedded
/// Mixer with 6144 token-MLP units a layer, whose unit analysis (every pair of units
/// correlated) takes a few tenths of a second a layer.
#[test]
fn a_layers_views_are_computed_while_the_window_draws() {
    let mut h = harness(viewer());
    h.run();
    settle(&mut h);
    assert!(h.state_mut().load_model("wide", &wide_token_mlps(6144)), "{:?}", h.state().error);
    assert!(h.state().computing_insight(), "the load returned before layer 0's views were computed");
    assert!(h.state().insight.is_none(), "the previous model's views are not shown with this one");
    h.step();
    h.get_by_label("Computing layer 0's views …");
    let frames = frames_while(&mut h, Viewer::computing_insight);
    assert!(frames >= 3, "the window drew {frames} frames while layer 0's views were computed");
    settle(&mut h);
    assert_eq!(h.state().insight.as_ref().map(|i| (i.layer, i.rows)), Some((0, 6144)));
    // Four steps of the slider, a frame each.
    h.get_by_role_and_label(egui::accesskit::Role::Slider, "Layer").focus();
    h.run(); // (focused over several frames, the slider keeps the arrow keys to itself)
    h.key_press(egui::Key::ArrowRight);
    h.step();
    assert_eq!(h.state().layer, 1);
    assert!(h.state().computing_insight(), "the frame that moved the slider ended before layer 1's views");
    assert_eq!(h.state().insight.as_ref().map(|i| i.layer), Some(0), "layer 0's views stay until then");
    h.step();
    h.get_by_label("Computing layer 1's views …");
    for _ in 0..3 {
        h.key_press(egui::Key::ArrowRight);
        h.step();
    }
    shot(&mut h, "computing-layer");
    assert_eq!(h.state().layer, 4);
    let frames = frames_while(&mut h, Viewer::computing_insight);
    assert!(frames >= 3, "the window drew {frames} frames while the layers' views were computed");
    settle(&mut h);
    assert_eq!(h.state().insight.as_ref().map(|i| i.layer), Some(4), "the slider's layer is shown");
    assert_eq!(h.state().computed_layers(), [0, 1, 4], "layers 2 and 3, passed while layer 1 was computed, are not");
    // A layer computed before: shown in the frame that asks for it.
    h.state_mut().set_layer(0);
    assert!(!h.state().computing_insight(), "layer 0 is not computed again");
    assert_eq!(h.state().insight.as_ref().map(|i| i.layer), Some(0));
    h.step();
    h.get_by_label_contains("6144 token-MLP units over the 7×7 grid");
    // Back to a layer seen before while another is computed: it is shown at once, and the
    // window does not say it is computing it.
    h.state_mut().set_layer(5);
    h.step();
    assert!(h.state().computing_insight());
    h.state_mut().set_layer(0);
    h.step();
    assert!(!h.state().computing_insight(), "layer 0 is shown while layer 5 is computed");
    assert!(h.query_by_label_contains("Computing layer").is_none(), "no spinner for a layer on screen");
    settle(&mut h);
    assert_eq!(h.state().insight.as_ref().map(|i| i.layer), Some(0), "layer 5, computed after, does not replace it");
    assert_eq!(h.state().computed_layers(), [0, 1, 4, 5]);
}

/// The shipped PoolFormer made to take `side` x `side` images (its metadata's `img_size` and
/// preprocessing size; pooling has no weights tied to the token count): at 1008, 1296 times
/// the work of 28 x 28, 23 GMACs, a few tenths of a second per pass on two CPU threads.
fn large_poolformer(side: usize) -> Vec<u8> {
    use safetensors::{tensor::TensorView, SafeTensors};
    let bytes = std::fs::read(root().join("weights/poolformer_fmnist.safetensors")).expect("the shipped PoolFormer");
    let st = SafeTensors::deserialize(&bytes).expect("it parses");
    let (_, meta) = SafeTensors::read_metadata(&bytes).expect("its header parses");
    let mut metadata = meta.metadata().clone().expect("it has metadata");
    for (key, field) in [("config", "img_size"), ("preprocess", "size")] {
        let mut v: serde_json::Value = serde_json::from_str(&metadata[key]).expect("JSON metadata");
        v[field] = serde_json::json!([side, side]);
        metadata.insert(key.into(), v.to_string());
    }
    let views = st.tensors().into_iter().map(|(n, t)| (n, TensorView::new(t.dtype(), t.shape().to_vec(), t.data()).expect("tensor view")));
    safetensors::serialize(views, Some(metadata)).expect("serialised")
}

/// Classifying and explaining run on a thread of their own: the window keeps drawing (and
/// says what it is doing) while a slow model works; a burst of images shows the last one, and a
/// pass (classifying, explaining) that a newer image makes moot stops early; a model chosen
/// while an image is classified classifies it afresh, and the stale result is dropped.
#[test]
fn the_window_keeps_drawing_while_the_model_works() {
    let dir = common::scratch("desktop-large");
    let file = dir.path().join("poolformer_1008.safetensors");
    std::fs::write(&file, large_poolformer(1008)).expect("written");
    let mut h = harness(viewer());
    h.run();
    assert!(h.state_mut().load_model("poolformer 1008", &std::fs::read(&file).unwrap()), "{:?}", h.state().error);
    settle(&mut h);
    assert_eq!(h.state().model.info.arch.input_shape(), [1, 1008, 1008]);
    // Frames while the model works: the frame of the click ends with the image still being
    // classified, and the window says so.
    h.get_by_label("bag").click();
    h.step();
    assert!(h.state().classifying(), "the frame of the click ended before the classification");
    h.step();
    h.get_by_label("Classifying the image …");
    shot(&mut h, "classifying");
    // (The long status line, "Loaded poolformer 1008 (PoolFormer, 2291338 parameters).",
    // wraps inside the right panel instead of widening it over the middle.)
    let r = h.get_by_label_contains("Loaded poolformer 1008").rect();
    assert!(r.max.x <= 1200.0, "the status line ends at x = {} in a 1200 px window", r.max.x);
    let frames = frames_while(&mut h, Viewer::classifying);
    assert!(frames >= 10, "the window drew {frames} frames while the image was classified");
    settle(&mut h);
    let cli = {
        let out = Command::new(env!("CARGO_BIN_EXE_tokenmix"))
            .args(["classify", "--json", "--top-k", "5", "--weights", file.to_str().unwrap()])
            .arg(root().join("www/samples/fmnist-0018-bag.png"))
            .output()
            .expect("tokenmix runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
    };
    let c = h.state().classified.as_ref().expect("classified");
    assert_eq!(c.source, "sample: bag");
    for (p, w) in c.predictions.iter().zip(cli[0]["predictions"].as_array().unwrap()) {
        assert_eq!(p.index as u64, w["index"].as_u64().unwrap(), "class order as the CLI");
        assert!((p.probability as f64 - w["probability"].as_f64().unwrap()).abs() < 1e-3);
    }
    // The explanation: the overlay comes when it ends, the window drawing meanwhile.
    let top = c.predictions[0].label.clone();
    h.get_by_label_contains(&top).click();
    h.step();
    assert!(h.state().explaining(), "the frame of the click ended before the explanation");
    h.step();
    h.get_by_label("Explaining the prediction token by token …");
    let frames = frames_while(&mut h, Viewer::explaining);
    assert!(frames >= 10, "the window drew {frames} frames while the image was explained");
    settle(&mut h);
    h.get_by_label(&format!("Overlay: evidence for {top}"));
    // A burst of images: the last one is shown; the first one's pass, running when the
    // second came, stopped early (the second, waiting, was replaced by the third).
    let stopped = h.state().cancelled;
    for name in ["boot", "shirt", "coat"] {
        h.get_by_label(name).click();
        h.step();
    }
    settle(&mut h);
    assert_eq!(h.state().classified.as_ref().map(|c| c.source.as_str()), Some("sample: coat"));
    assert_eq!(h.state().error, None);
    assert_eq!(h.state().cancelled - stopped, 1, "the boot's pass stopped when the shirt came");
    // An explanation running when a new image comes stops too, and leaves no error.
    let top = h.state().classified.as_ref().map(|c| c.predictions[0].label.clone()).unwrap_or_default();
    h.get_by_label_contains(&top).click();
    h.step();
    assert!(h.state().explaining());
    h.get_by_label("dress").click();
    h.step();
    settle(&mut h);
    assert_eq!(h.state().cancelled - stopped, 2, "the coat's explanation stopped when the dress came");
    assert_eq!(h.state().classified.as_ref().map(|c| c.source.as_str()), Some("sample: dress"));
    assert_eq!((h.state().error.as_deref(), h.state().evidence), (None, None));
    // Another model while an image is classified: the image is classified by it, and the
    // PoolFormer's result, arriving after, is not shown.
    h.get_by_label("trouser").click();
    h.step();
    assert!(h.state().classifying());
    h.state_mut().load_model("mixer_fmnist (embedded default)", tokenmix::DEFAULT_MODEL);
    settle(&mut h);
    let c = h.state().classified.as_ref().expect("classified");
    let want = cli_classify(root().join("www/samples/fmnist-0002-trouser.png").to_str().unwrap());
    assert_eq!((h.state().model.info.family, c.source.as_str()), ("MLP-Mixer", "sample: trouser"));
    for (p, w) in c.predictions.iter().zip(want[0]["predictions"].as_array().unwrap()) {
        assert_eq!(p.index as u64, w["index"].as_u64().unwrap(), "the trouser, classified by the Mixer as the CLI does");
        assert!((p.probability as f64 - w["probability"].as_f64().unwrap()).abs() < 1e-3, "{} vs {}", p.probability, w["probability"]);
    }
    shot(&mut h, "after-switch");
}

/// ffmpeg, which tools/setup.sh installs: the desktop's default camera backend streams from it.
fn ffmpeg() -> Command {
    let ok = Command::new("ffmpeg").arg("-version").output().is_ok_and(|o| o.status.success());
    assert!(ok, "ffmpeg is missing: tools/setup.sh installs it (the camera tests run the real backend)");
    let mut c = Command::new("ffmpeg");
    c.args(["-nostdin", "-loglevel", "error"]);
    c
}

/// The camera stream's frame format as ffmpeg writes it: two frames of a sample, converted by
/// ffmpeg to binary PPM and read back by `camera::read_ppm`, are the file's pixels exactly
/// (as the image crate decodes the PNG), and the stream's end reads as its end.
#[test]
fn the_camera_reads_ffmpegs_frames_exactly() {
    let png = root().join("www/samples/fmnist-0013-dress.png");
    let want = image::open(&png).expect("a sample").to_rgb8();
    let out =
        ffmpeg().args(["-i"]).arg(&png).args(["-vf", "loop=loop=1:size=1", "-f", "image2pipe", "-vcodec", "ppm", "-"]).output().expect("ffmpeg runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut r = std::io::BufReader::new(&out.stdout[..]);
    for i in 0..2 {
        let frame = camera::read_ppm(&mut r).expect("a frame parses").unwrap_or_else(|| panic!("frame {i} is there"));
        assert_eq!(frame, want, "frame {i} is the file's pixels");
    }
    assert!(camera::read_ppm(&mut r).expect("the end parses").is_none(), "two frames, then the end");
    let mut cut = std::io::BufReader::new(&out.stdout[..out.stdout.len() / 3]);
    assert!(camera::read_ppm(&mut cut).is_err(), "a frame cut short is an error, not a frame");
}

/// The default camera backend for real: ffmpeg streaming one of its own test sources
/// (`testsrc2`, what `TOKENMIX_CAMERA=lavfi:…` selects), as it streams a webcam. The window
/// shows the frames live as they come, a capture classifies the newest, stopping ends the
/// ffmpeg process, and a source ffmpeg cannot open is reported in the window, which stops the
/// camera.
#[test]
fn the_ffmpeg_camera_shows_a_live_preview_and_captures_from_it() {
    drop(ffmpeg());
    let mut h = harness(viewer());
    h.run();
    let mut cam = camera::Ffmpeg::with_input("lavfi", "testsrc2=size=320x240:rate=15");
    camera::Camera::start(&mut cam).expect("ffmpeg starts");
    let pid = cam.process_id().expect("ffmpeg runs");
    h.state_mut().camera = Box::new(cam);
    let live = |h: &mut Harness<'static, Viewer>, frames: u64| {
        let start = std::time::Instant::now();
        while h.state().preview_frames < frames && start.elapsed().as_secs() < 20 {
            h.step();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(h.state().preview_frames >= frames, "the window showed {} camera frames in 20 s", h.state().preview_frames);
        h.state().preview.clone().expect("a frame is shown")
    };
    let (first_n, first) = live(&mut h, 1);
    assert_eq!(first.dimensions(), (320, 240));
    let (n, later) = live(&mut h, 4);
    assert!(n > first_n, "newer frames came");
    assert_ne!(later, first, "testsrc2 moves: the preview is live, not one still");
    h.run();
    h.get_by_label_contains("Live: testsrc2");
    // testsrc2's saturated colour bars, drawn in the image panel (nothing else there is).
    let img = shot(&mut h, "camera-preview");
    let saturated = img.enumerate_pixels().filter(|(x, _, p)| *x < 330 && p[0].max(p[1]).max(p[2]) - p[0].min(p[1]).min(p[2]) > 150).count();
    assert!(saturated > 5000, "the preview is drawn: {saturated} saturated pixels in the image panel");
    h.get_by_label("Capture").click();
    settle(&mut h);
    let c = h.state().classified.as_ref().expect("the newest frame is classified");
    assert_eq!(c.source, "camera: testsrc2=size=320x240:rate=15 (lavfi)");
    // Classify live: frame after frame, whenever the model is free, with no Capture.
    h.get_by_label("Classify live").click();
    let (start, mut seen) = (std::time::Instant::now(), std::collections::BTreeSet::new());
    // (At least 40 frames, so that the restart below numbers its frames well below these.)
    while (seen.len() < 3 || h.state().preview.as_ref().map_or(0, |p| p.0) < 40) && start.elapsed().as_secs() < 30 {
        h.step();
        if let Some(c) = h.state().classified.as_ref().filter(|c| c.source.starts_with("camera (live): testsrc2")) {
            seen.insert(c.serial);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(seen.len() >= 3, "live: {} frames classified in 30 s", seen.len());
    assert_eq!(h.state().cancelled, 0, "a live frame never stops a running pass");
    h.get_by_label("Classify live").click();
    settle(&mut h);
    let last = h.state().classified.as_ref().map(|c| c.serial);
    for _ in 0..20 {
        h.step();
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!h.state().busy(), "not live: nothing is classified without a Capture");
    assert_eq!(h.state().classified.as_ref().map(|c| c.serial), last, "not live: nothing is classified without a Capture");
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "ffmpeg streams until stopped");
    let numbered = h.state().preview.as_ref().map_or(0, |p| p.0);
    h.get_by_label("Stop camera").click();
    h.run();
    assert!(!h.state().camera.running());
    assert!(h.state().preview.is_none(), "no preview once stopped");
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "stopping the camera ended ffmpeg");
    // Started again, ffmpeg numbers its frames afresh: live classification takes them from the
    // first, not only once their numbers pass the last stream's.
    assert!(numbered >= 40, "the first stream ran {numbered} frames");
    h.get_by_label("Start camera").click();
    let shown = h.state().preview_frames;
    live(&mut h, shown + 1);
    h.get_by_label("Classify live").click();
    let start = std::time::Instant::now();
    let live_again = |h: &Harness<'static, Viewer>| h.state().classified.as_ref().is_some_and(|c| c.serial > last.unwrap_or(0));
    while !live_again(&h) && start.elapsed().as_secs() < 30 {
        h.step();
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let frame = h.state().preview.as_ref().map_or(0, |p| p.0);
    assert!(live_again(&h), "live again after a restart");
    assert!(frame < 20, "live again from the restarted stream's first frames, not from frame {frame} (the first stream ran {numbered})");
    h.get_by_label("Classify live").click();
    h.get_by_label("Stop camera").click();
    settle(&mut h);
    // A source ffmpeg cannot open (a busy or missing device is reported the same way).
    h.state_mut().camera = Box::new(camera::Ffmpeg::with_input("lavfi", "nosuchsource"));
    h.get_by_label("Start camera").click();
    let start = std::time::Instant::now();
    while h.state().error.is_none() && start.elapsed().as_secs() < 20 {
        h.step();
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let err = h.state().error.clone().unwrap_or_default();
    assert!(err.contains("camera nosuchsource (lavfi): nosuchsource: "), "the window gives ffmpeg's reason: {err:?}");
    assert!(!h.state().camera.running(), "and the camera stopped");
    h.run();
}

/// An X server of its own (Xvfb, which tools/setup.sh installs) on the display number it
/// picks, ended with the value.
struct XServer {
    display: String,
    server: std::process::Child,
}

impl XServer {
    fn start() -> XServer {
        use std::io::BufRead;
        let mut server = Command::new("Xvfb")
            .args(["-displayfd", "1", "-screen", "0", "1280x900x24", "-nolisten", "tcp"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("Xvfb runs (tools/setup.sh installs it: Debian's xvfb)");
        // With -displayfd, Xvfb writes its display number once it accepts clients.
        let mut line = String::new();
        std::io::BufReader::new(server.stdout.take().expect("Xvfb's stdout")).read_line(&mut line).expect("Xvfb's display number");
        let n: u32 = line.trim().parse().unwrap_or_else(|_| panic!("Xvfb gave no display number: {line:?}"));
        XServer { display: format!(":{n}"), server }
    }

    /// Runs an X client (xdotool, xclip, xwd) on this display; its stdout, after it succeeded.
    fn client(&self, program: &str, args: &[&str]) -> Vec<u8> {
        let out = Command::new(program)
            .args(args)
            .env("DISPLAY", &self.display)
            .output()
            .unwrap_or_else(|e| panic!("{program} runs (tools/setup.sh installs xdotool, xclip, x11-apps): {e}"));
        assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    }

    /// Waits (at most 60 s) until the window's title satisfies `want`; returns it.
    fn title_when(&self, window: &str, want: impl Fn(&str) -> bool) -> String {
        let start = std::time::Instant::now();
        loop {
            let title = String::from_utf8_lossy(&self.client("xdotool", &["getwindowname", window])).trim().to_string();
            if want(&title) || start.elapsed().as_secs() > 60 {
                return title;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// The window's pixels, read with xwd (ZPixmap, 24/32-bit TrueColor).
    fn capture(&self, window: &str) -> image::RgbaImage {
        let xwd = self.client("xwd", &["-id", window, "-silent"]);
        let field = |i: usize| u32::from_be_bytes(xwd[4 * i..4 * i + 4].try_into().expect("an XWD header field"));
        let (header, format, width, height, byte_order, bpp, line, ncolours) =
            (field(0) as usize, field(2), field(4), field(5), field(7), field(11), field(12) as usize, field(19) as usize);
        assert_eq!((format, bpp), (2, 32), "a 32-bit ZPixmap");
        let (rm, gm, bm) = (field(14), field(15), field(16));
        let pixels = &xwd[header + 12 * ncolours..];
        assert!(pixels.len() >= line * height as usize, "the whole image");
        let channel = |v: u32, mask: u32| ((v & mask) >> mask.trailing_zeros()) as u8;
        image::RgbaImage::from_fn(width, height, |x, y| {
            let b: [u8; 4] = pixels[y as usize * line + 4 * x as usize..][..4].try_into().expect("a pixel");
            let v = if byte_order == 0 { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) };
            image::Rgba([channel(v, rm), channel(v, gm), channel(v, bm), 255])
        })
    }
}

impl XServer {
    /// Drops the file `path` on `window` as a file manager does, through the XDND protocol
    /// (version 5) from a source window of its own: XdndEnter offering `text/uri-list`,
    /// XdndPosition at the window's centre, the file's URI served when the target asks for the
    /// selection, XdndDrop once the target accepted and has the URI; returns once the target
    /// says XdndFinished, with whether it accepted the drop.
    fn drop_file(&self, window: &str, path: &std::path::Path) -> bool {
        use x11rb::connection::Connection;
        use x11rb::protocol::xproto::{
            AtomEnum, ClientMessageEvent, ConnectionExt as _, CreateWindowAux, EventMask, PropMode, SelectionNotifyEvent, WindowClass,
            SELECTION_NOTIFY_EVENT,
        };
        use x11rb::protocol::Event;
        use x11rb::wrapper::ConnectionExt as _;
        let target: u32 = window.parse().expect("a window id");
        let (conn, screen) = x11rb::connect(Some(&self.display)).expect("an X connection");
        let root = conn.setup().roots[screen].root;
        let atom = |name: &str| conn.intern_atom(false, name.as_bytes()).expect("intern").reply().expect("an atom").atom;
        let [aware, enter, position, status, drop, finished, selection, copy, uri_list] =
            ["XdndAware", "XdndEnter", "XdndPosition", "XdndStatus", "XdndDrop", "XdndFinished", "XdndSelection", "XdndActionCopy", "text/uri-list"]
                .map(atom);
        let version = conn
            .get_property(false, target, aware, AtomEnum::ATOM, 0, 1)
            .expect("get_property")
            .reply()
            .expect("XdndAware")
            .value32()
            .and_then(|mut v| v.next())
            .expect("the window takes drops (XdndAware)");
        let source = conn.generate_id().expect("an id");
        conn.create_window(0, source, root, 0, 0, 1, 1, 0, WindowClass::INPUT_ONLY, 0, &CreateWindowAux::new()).expect("the source window");
        conn.set_selection_owner(source, selection, x11rb::CURRENT_TIME).expect("owns XdndSelection");
        let send = |kind: u32, data: [u32; 5]| {
            conn.send_event(false, target, EventMask::NO_EVENT, ClientMessageEvent::new(32, target, kind, data)).expect("send_event");
            conn.flush().expect("flush");
        };
        let geometry = conn.get_geometry(target).expect("get_geometry").reply().expect("the window's size");
        let at = conn
            .translate_coordinates(target, root, (geometry.width / 2) as i16, (geometry.height / 2) as i16)
            .expect("translate")
            .reply()
            .expect("the centre on the screen");
        // The URI, percent-encoded but for RFC 3986's unreserved characters and the slashes.
        let encoded: String = path
            .to_str()
            .expect("a UTF-8 path")
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        let uri = format!("file://{encoded}\r\n");
        send(enter, [source, version.min(5) << 24, uri_list, 0, 0]);
        send(position, [source, 0, ((at.dst_x as u16 as u32) << 16) | at.dst_y as u16 as u32, x11rb::CURRENT_TIME, copy]);
        let (mut served, mut accepted, mut dropped) = (false, false, false);
        let start = std::time::Instant::now();
        loop {
            assert!(start.elapsed().as_secs() < 30, "the drop did not finish within 30 s (served {served}, accepted {accepted})");
            let Some(event) = conn.poll_for_event().expect("X events") else {
                std::thread::sleep(std::time::Duration::from_millis(5));
                continue;
            };
            match event {
                Event::SelectionRequest(r) if r.selection == selection => {
                    conn.change_property8(PropMode::REPLACE, r.requestor, r.property, r.target, uri.as_bytes()).expect("the URI");
                    let notify = SelectionNotifyEvent {
                        response_type: SELECTION_NOTIFY_EVENT,
                        sequence: 0,
                        time: r.time,
                        requestor: r.requestor,
                        selection: r.selection,
                        target: r.target,
                        property: r.property,
                    };
                    conn.send_event(false, r.requestor, EventMask::NO_EVENT, notify).expect("SelectionNotify");
                    conn.flush().expect("flush");
                    served = true;
                }
                Event::ClientMessage(m) if m.type_ == status => accepted = m.data.as_data32()[1] & 1 == 1,
                Event::ClientMessage(m) if m.type_ == finished => return m.data.as_data32()[1] & 1 == 1,
                _ => {}
            }
            if served && accepted && !dropped {
                send(drop, [source, 0, x11rb::CURRENT_TIME, 0, 0]);
                dropped = true;
            }
        }
    }
}

impl Drop for XServer {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// `tokenmix view` in a real window (eframe and winit on an X display, Xvfb; rendered on the
/// adapter, lavapipe in CI): with the GPU executor sharing its device with the window's
/// renderer, and with the CPU executor beside eframe's own. The window opens with its title;
/// a mouse click on a sample (at the position the headless harness lays the button out at)
/// classifies it as the CLI does, and the title says so; an image put on the X clipboard
/// (xclip) and pasted with Ctrl+V goes through winit and arboard and is classified too, and so
/// is an image file dropped on the window through the XDND protocol ([`XServer::drop_file`]);
/// a model file dropped so is loaded and classifies the image again.
/// Screenshot: tests/artifacts/desktop-window.png (the real window, read with xwd).
#[test]
fn the_real_window_classifies_a_clicked_sample_a_pasted_image_and_a_dropped_file() {
    let x = XServer::start();
    // Where the harness lays out the coat button, and its frame with the bag pasted: what the
    // real window should show at the end (bar the header's executor line, the timings and the
    // button under the pointer).
    // The harness draws its ui inside an 8-point margin: a harness 16 points larger lays out
    // the window's 1200 x 820 at (8, 8).
    const MARGIN: f32 = 8.0;
    let (click_at, harness_frame) = {
        let mut h = harness_sized(viewer(), [1200.0 + 2.0 * MARGIN, 820.0 + 2.0 * MARGIN]);
        h.run();
        let at = h.get_by_label("coat").rect().center() - egui::vec2(MARGIN, MARGIN);
        let png = image::open(root().join("www/samples/fmnist-0018-bag.png")).expect("the bag sample").to_rgba8();
        let pasted = egui::ColorImage::from_rgba_unmultiplied([png.width() as usize, png.height() as usize], png.as_raw());
        h.state_mut().classify_colour_image("pasted image", &pasted);
        settle(&mut h);
        (at, h.render().expect("rendered on the wgpu adapter"))
    };
    let label_of = |file: &str| {
        let cli = cli_classify(root().join("www/samples").join(file).to_str().unwrap());
        let p = &cli[0]["predictions"][0];
        (p["label"].as_str().unwrap_or_default().to_string(), 100.0 * p["probability"].as_f64().unwrap_or(-1.0))
    };
    let (coat, bag) = (label_of("fmnist-0006-coat.png"), label_of("fmnist-0018-bag.png"));
    // The title's "<label> <percent> %", against the CLI's top class.
    let shows = |title: &str, (label, pct): &(String, f64)| {
        let rest = title.strip_prefix(&format!("tokenmix — {label} ")).and_then(|r| r.split(" %").next());
        rest.and_then(|p| p.parse::<f64>().ok()).is_some_and(|p| (p - pct).abs() <= 0.051)
    };
    for backend in ["gpu", "cpu"] {
        let mut app = Command::new(env!("CARGO_BIN_EXE_tokenmix"))
            .args(["view", "--backend", backend])
            .env("DISPLAY", &x.display)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("tokenmix view starts");
        let start = std::time::Instant::now();
        let window = loop {
            let found = Command::new("xdotool").args(["search", "--name", "^tokenmix"]).env("DISPLAY", &x.display).output().expect("xdotool runs");
            let ids = String::from_utf8_lossy(&found.stdout).split_whitespace().map(str::to_string).collect::<Vec<_>>();
            if let Some(id) = ids.last() {
                break id.clone();
            }
            if let Ok(Some(status)) = app.try_wait() {
                let mut err = String::new();
                app.stderr.take().map(|mut e| e.read_to_string(&mut err));
                panic!("{backend}: tokenmix view ended ({status}) without a window: {err}");
            }
            assert!(start.elapsed().as_secs() < 60, "{backend}: no window within 60 s");
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        let title = x.title_when(&window, |t| t == "tokenmix — mixer_fmnist (embedded default)");
        assert_eq!(title, "tokenmix — mixer_fmnist (embedded default)", "{backend}: the window's first title");
        let before = x.capture(&window);
        // A click on the coat sample.
        let (cx, cy) = (click_at.x.round().to_string(), click_at.y.round().to_string());
        x.client("xdotool", &["mousemove", "--window", &window, &cx, &cy, "click", "1"]);
        let title = x.title_when(&window, |t| shows(t, &coat));
        assert!(shows(&title, &coat), "{backend}: after the click the title is {title:?}, the CLI says {coat:?}");
        // Ctrl+V with a PNG on the clipboard: xclip stays in the background to serve it
        // (until the display ends), so its output is not waited for.
        let bag_png = root().join("www/samples/fmnist-0018-bag.png");
        let served = Command::new("xclip")
            .args(["-selection", "clipboard", "-t", "image/png", "-i"])
            .arg(&bag_png)
            .env("DISPLAY", &x.display)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("xclip runs (tools/setup.sh installs it)");
        assert!(served.success(), "xclip took the image");
        x.client("xdotool", &["windowfocus", "--sync", &window, "key", "ctrl+v"]);
        let title = x.title_when(&window, |t| shows(t, &bag));
        assert!(shows(&title, &bag), "{backend}: after the paste the title is {title:?}, the CLI says {bag:?}");
        let after = x.capture(&window);
        assert_eq!(after.dimensions(), (1200, 820), "{backend}: the window's size");
        let colours: std::collections::HashSet<[u8; 4]> = after.pixels().map(|p| p.0).collect();
        let changed = before.pixels().zip(after.pixels()).filter(|(a, b)| a != b).count();
        assert!(colours.len() > 50 && changed > 5_000, "{backend}: a drawn frame ({} colours), redrawn ({changed} pixels changed)", colours.len());
        // The harness's frame, pixel for pixel within 8 levels, bar 2 % (the header's executor
        // line, the timings, the button under the pointer: 0.3-0.5 % when written).
        let (mut opaque, mut differ) = (0, 0);
        for (x, y, a) in after.enumerate_pixels() {
            let b = harness_frame.get_pixel(x + MARGIN as u32, y + MARGIN as u32);
            if b[3] == 255 {
                opaque += 1;
                differ += (0..3).any(|c| a[c].abs_diff(b[c]) > 8) as usize;
            }
        }
        eprintln!("{backend}: {differ} of the {opaque} pixels the harness draws differ in the window");
        assert!(opaque > 900_000 && differ * 100 < opaque * 2, "{backend}: {differ} of {opaque} pixels differ from the harness's frame");
        if backend == "gpu" {
            let dir = root().join("tests/artifacts");
            std::fs::create_dir_all(&dir).expect("artifacts folder");
            after.save(dir.join("desktop-window.png")).expect("screenshot saved");
        }
        // A file dragged from a file manager and dropped on the window (XDND, through winit and
        // eframe's dropped files) is classified too.
        let dress = label_of("fmnist-0013-dress.png");
        assert_ne!(dress, bag, "the dropped image must answer differently from the pasted one, or the check below checks nothing");
        assert!(x.drop_file(&window, &root().join("www/samples/fmnist-0013-dress.png")), "{backend}: the window accepted the drop");
        let title = x.title_when(&window, |t| shows(t, &dress));
        assert!(shows(&title, &dress), "{backend}: after the drop the title is {title:?}, the CLI says {dress:?}");
        // A model file dropped the same way is loaded, and the image shown is classified again
        // by it: the title gives the CLI's class with that model, and the model's path.
        let gmlp = root().join("weights/gmlp_fmnist.safetensors");
        let cli = cli_classify_with(&["--weights", gmlp.to_str().unwrap()], root().join("www/samples/fmnist-0013-dress.png").to_str().unwrap());
        let p = &cli[0]["predictions"][0];
        let by_gmlp = (p["label"].as_str().unwrap_or_default().to_string(), 100.0 * p["probability"].as_f64().unwrap_or(-1.0));
        assert_ne!(by_gmlp, dress, "the two models must answer differently, or the check below checks nothing");
        assert!(x.drop_file(&window, &gmlp), "{backend}: the window accepted the model file");
        let with_model = |t: &str| shows(t, &by_gmlp) && t.ends_with(&format!(" · {}", gmlp.display()));
        let title = x.title_when(&window, with_model);
        assert!(with_model(&title), "{backend}: after the model's drop the title is {title:?}, the CLI says {by_gmlp:?} with it");
        let _ = app.kill();
        let _ = app.wait();
    }
}

/// A load that a newer one supersedes stops at its next tensor instead of running to its end
/// beside the newer one (a hub model's load holds a core and a copy of the file for seconds),
/// and the newer model is the one adopted. The slow model: the embedded Mixer with 24576
/// token-MLP units a layer, read from a file (about 0.2 s to load here): the newer load is
/// asked for 20 ms into it.
#[test]
fn a_superseded_load_stops_before_it_ends() {
    let mut h = harness(viewer());
    h.run();
    settle(&mut h);
    let dir = std::env::temp_dir().join(format!("tokenmix-superseded-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let file = dir.join("wide.safetensors");
    std::fs::write(&file, wide_token_mlps(24576)).expect("the wide model is written");
    let started = std::time::Instant::now();
    h.state_mut().start_load("wide", ModelSource::File(file.clone()));
    std::thread::sleep(std::time::Duration::from_millis(20));
    h.state_mut().start_load("embedded", ModelSource::Bytes(tokenmix::DEFAULT_MODEL));
    settle(&mut h);
    eprintln!("the second load was asked for 20 ms after the first, and adopted {:?} after it", started.elapsed());
    // (The superseded load's thread counts its stop; nothing waits for it.)
    while h.state().stopped_loads() == 0 && started.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let v = h.state();
    eprintln!("the superseded load had stopped {:?} after it started", started.elapsed());
    assert_eq!(v.stopped_loads(), 1, "the superseded load stopped before it ended");
    // (The newer load, which nothing superseded, ran to its end.)
    assert_eq!(v.model_name, "embedded", "the newer model is adopted");
    assert!(v.error.is_none(), "{:?}", v.error);
    let _ = std::fs::remove_dir_all(&dir);
}
