//! Fuzzes the CPU half of image classification: see `tokenmix::fuzz::preprocess_image`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tokenmix::fuzz::preprocess_image(data));
