//! Fuzzes the model-file loader up to the GPU: see `tokenmix::fuzz::load_weights`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tokenmix::fuzz::load_weights(data));
