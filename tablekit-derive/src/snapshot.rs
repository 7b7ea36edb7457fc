//! Expansion snapshots: what the derive generates for representative inputs,
//! formatted with prettyplease and compared with insta.

use quote::quote;

use crate::ast::Mode;
use crate::expand::derive;

fn expand(input: proc_macro2::TokenStream, mode: Mode) -> String {
    let out = derive(input, mode);
    match syn::parse2::<syn::File>(out.clone()) {
        Ok(file) => prettyplease::unparse(&file),
        Err(_) => out.to_string(),
    }
}

#[test]
fn employee_expansion() {
    let out = expand(
        quote! {
            #[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}", version = 2)]
            pub struct Employee {
                department: String,
                employee_id: u32,
                first_name: String,
                #[tablekit(rename = "EmailAddress")]
                email: Option<String>,
                #[tablekit(edm = "Int64")]
                age: i32,
                #[tablekit(etag)]
                etag: Option<tablekit::ETag>,
                #[tablekit(skip)]
                cached: Option<String>,
            }
        },
        Mode::Entity,
    );
    insta::assert_snapshot!(out);
}

#[test]
fn flattened_properties_expansion() {
    let out = expand(
        quote! {
            struct Address {
                city: String,
                #[tablekit(default)]
                zip: u32,
            }
        },
        Mode::Properties,
    );
    insta::assert_snapshot!(out);
}

#[test]
fn invalid_input_expands_to_errors_and_a_stub() {
    let out = expand(
        quote! {
            struct Broken {
                #[tablekit(bogus)]
                a: String,
            }
        },
        Mode::Entity,
    );
    assert!(out.contains("compile_error"), "{out}");
    assert!(out.contains("unknown tablekit attribute `bogus`"), "{out}");
    assert!(out.contains("has no PartitionKey"), "{out}");
    assert!(
        out.contains("impl ::tablekit::TableEntity for Broken"),
        "{out}"
    );
}

#[test]
fn a_crate_path_replaces_tablekit_in_every_expansion() {
    let inputs = [
        (
            quote! {
                #[tablekit(crate = "reexport::tk", partition_key = "{a}", row_key = "x_{b:03}", version = 2, table = "Entities")]
                pub struct Entity {
                    a: String,
                    b: u32,
                    #[tablekit(edm = "Int64")]
                    c: i32,
                    #[tablekit(json)]
                    d: Vec<u8>,
                    #[tablekit(flatten)]
                    e: Inner,
                    #[tablekit(etag)]
                    f: Option<ETag>,
                    #[tablekit(timestamp)]
                    g: Option<chrono::DateTime<chrono::Utc>>,
                }
            },
            Mode::Entity,
        ),
        (
            quote! {
                #[tablekit(crate = "reexport::tk", projection_of = "Entity", partition_key = "{a}", row_key = "x_{b:03}")]
                pub struct Projection {
                    a: String,
                    b: u32,
                    #[tablekit(edm = "Int64")]
                    c: i32,
                }
            },
            Mode::Entity,
        ),
        (
            quote! {
                #[tablekit(crate = "reexport::tk")]
                struct Inner {
                    #[tablekit(default)]
                    z: u32,
                    #[tablekit(flatten)]
                    deeper: Deeper,
                }
            },
            Mode::Properties,
        ),
        (
            quote! {
                #[tablekit(crate = "reexport::tk", discriminator = "Kind")]
                enum Either {
                    One(Entity),
                    #[tablekit(unknown)]
                    Other(Dynamic),
                }
            },
            Mode::Entity,
        ),
        (
            quote! {
                #[tablekit(crate = "reexport::tk", row_key_prefix)]
                enum ByPrefix {
                    One(Entity),
                }
            },
            Mode::Entity,
        ),
    ];
    for (input, mode) in inputs {
        let out = derive(input, mode).to_string();
        assert!(!out.contains("compile_error"), "{out}");
        assert!(!out.contains("tablekit ::"), "{out}");
        assert!(out.contains("reexport :: tk :: __private_0_1"), "{out}");
    }
}

#[test]
fn a_crate_path_reaches_the_stub_of_an_invalid_input() {
    let out = derive(
        quote! {
            #[tablekit(crate = "reexport::tk")]
            struct Broken {
                a: String,
            }
        },
        Mode::Entity,
    )
    .to_string();
    assert!(out.contains("compile_error"), "{out}");
    assert!(
        out.contains("impl reexport :: tk :: TableEntity for Broken"),
        "{out}"
    );
    assert!(!out.contains("tablekit ::"), "{out}");
}
