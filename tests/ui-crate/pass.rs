//! The `pass_*` cases of `ui/`: uses of the macros that must compile, and
//! run. They are built here, with this package's tests (where tablekit is
//! already built); the `fail_*` cases are `ui.rs`'s.

/// Each case in a module of its own, as if it were built alone, with
/// a test that runs its `main`.
macro_rules! pass {
    ($($name:ident => $path:literal),* $(,)?) => {
        $(
            #[allow(dead_code)]
            mod $name {
                include!($path);

                #[test]
                fn compiles_and_runs() {
                    main()
                }
            }
        )*

        /// Every `ui/*/pass_*.rs` is one of the cases above.
        #[test]
        fn every_pass_case_is_listed() {
            let listed = [$($path),*];
            let mut found = Vec::new();
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            for topic in std::fs::read_dir(root.join("ui")).unwrap() {
                let topic = topic.unwrap().path();
                for case in std::fs::read_dir(&topic).unwrap() {
                    let case = case.unwrap().path();
                    let name = case.file_name().unwrap().to_str().unwrap().to_owned();
                    if name.starts_with("pass_") && name.ends_with(".rs") {
                        let topic = topic.file_name().unwrap().to_str().unwrap();
                        found.push(format!("ui/{topic}/{name}"));
                    }
                }
            }
            found.sort();
            let mut listed: Vec<String> = listed.iter().map(|p| p.to_string()).collect();
            listed.sort();
            assert_eq!(found, listed, "add each pass case to pass.rs");
        }
    };
}

pass! {
    enums => "ui/enums/pass_enum.rs",
    filter => "ui/filter/pass_filter_macro.rs",
    keys => "ui/keys/pass_keys.rs",
    types => "ui/types/pass_types.rs",
}
