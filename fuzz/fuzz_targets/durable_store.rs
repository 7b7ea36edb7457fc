#![no_main]

// libfuzzer-sys's panic hook aborts on any panic, even one caught inside: the
// store's open catches redb 2.2's assertions on damaged files (its documented
// behaviour) and turns them into an error. The default hook lets those
// unwind to the catch; a panic that escapes the target still aborts the run.
libfuzzer_sys::fuzz_target!(
    init: {
        let _ = std::panic::take_hook();
    },
    |data: &[u8]| tablekit_fuzz::durable_store(data)
);
