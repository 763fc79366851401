//! Replays what the cargo-fuzz targets found (`fuzz/regressions/<target>/`, minimised with
//! `cargo fuzz tmin`) and the seed corpora through the same entry points the fuzzers call
//! (`tokenmix::fuzz`): each input must return without a panic.

use std::path::PathBuf;

fn files(dir: &str) -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut out: Vec<PathBuf> =
        std::fs::read_dir(root.join(dir)).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect()).unwrap_or_default();
    out.sort();
    out
}

#[test]
fn load_weights_regressions_and_seeds_return() {
    let mut n = 0;
    for dir in ["fuzz/regressions/load_weights", "tests/hostile", "tests/fixtures", "weights"] {
        for path in files(dir) {
            tokenmix::fuzz::load_weights(&std::fs::read(&path).expect("readable"));
            n += 1;
        }
    }
    assert!(n > 50, "replayed {n} files");
}

#[test]
fn preprocess_image_regressions_return() {
    let found = files("fuzz/regressions/preprocess_image");
    // An empty or missing folder would replay nothing and still pass. It holds the findings and
    // edge sizes the target's byte layout can express (edge-WxH: 0, 1 and 65535 px sides,
    // 30000², with a short pixel buffer).
    assert!(!found.is_empty(), "fuzz/regressions/preprocess_image is empty or missing");
    for path in found {
        tokenmix::fuzz::preprocess_image(&std::fs::read(&path).expect("readable"));
    }
}
