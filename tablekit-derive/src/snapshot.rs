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
