#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| hymical_forms::testing::fuzzing::webhook_url(data));
