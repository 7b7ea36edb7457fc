//! Procedural macros of tablekit. Use them through `tablekit` (its `derive` feature,
//! on by default): `#[derive(tablekit::TableEntity)]`.

use proc_macro::TokenStream;

/// Derives `tablekit::TableEntity` for a struct. (Placeholder until the derive lands.)
#[proc_macro_derive(TableEntity, attributes(tablekit))]
pub fn derive_table_entity(input: TokenStream) -> TokenStream {
    let _ = input;
    "::core::compile_error!(\"#[derive(TableEntity)] is not implemented yet\");"
        .parse()
        .unwrap_or_default()
}
