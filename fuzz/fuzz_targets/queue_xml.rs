#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tablekit_fuzz::queue_xml(data));
