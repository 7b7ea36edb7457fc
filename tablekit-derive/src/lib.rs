//! Procedural macros of [tablekit](https://docs.rs/tablekit): `#[derive(TableEntity)]`
//! and `#[derive(TableProperties)]`.
//!
//! Use them through `tablekit` (its `derive` feature, on by default), which documents
//! every attribute on its re-export `tablekit::TableEntity`:
//!
//! ```
//! use tablekit::TableEntity;
//!
//! #[derive(TableEntity, Debug, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     first_name: String,
//!     age: i32,
//! }
//!
//! let e = Employee { department: "Sales".into(), employee_id: 223, first_name: "Jo".into(), age: 41 };
//! let json = String::from_utf8(tablekit::codec::entity_to_json(&e)?).unwrap();
//! assert_eq!(json, r#"{"PartitionKey":"Sales","RowKey":"empid_000223","FirstName":"Jo","Age":41}"#);
//! assert_eq!(Employee::row_key(223)?, "empid_000223");
//! # Ok::<(), tablekit::Error>(())
//! ```
//!
//! The macro is built like serde's: the input is parsed once into an IR
//! (`ast`), collecting every attribute error with its span in one sink
//! (`ctxt`); a check pass (`check`) validates the IR; code generation
//! (`expand`) reads only the IR. When anything is wrong, the errors come with a
//! stub impl (`fallback`) so no "trait not implemented" error follows them.

#![warn(missing_docs, missing_debug_implementations)]
#![deny(rustdoc::broken_intra_doc_links)]

use proc_macro::TokenStream;

mod ast;
mod attr;
mod case;
mod check;
mod ctxt;
mod expand;
mod fallback;
mod filter_macro;
mod odata_macro;
mod template;
mod ty;

#[cfg(test)]
mod snapshot;

/// Derives `tablekit::TableEntity` (and `tablekit::filter::EntityColumns`) for a struct
/// with named fields, or for an enum of entity types. See the documentation of
/// `tablekit::TableEntity` for the attributes.
#[proc_macro_derive(TableEntity, attributes(tablekit))]
pub fn derive_table_entity(input: TokenStream) -> TokenStream {
    expand::derive(input.into(), ast::Mode::Entity).into()
}

/// Derives the support trait that lets a struct be stored inside an entity with
/// `#[tablekit(flatten)]`, its properties named `Outer_Inner`. It takes the same
/// field attributes as `TableEntity`, but no keys, ETag or version.
#[proc_macro_derive(TableProperties, attributes(tablekit))]
pub fn derive_table_properties(input: TokenStream) -> TokenStream {
    expand::derive(input.into(), ast::Mode::Properties).into()
}

/// `filter!(|e| e.department == "Sales" && e.age >= min && !e.active)`: a query
/// filter written with Rust operators over the entity's typed columns.
///
/// The closure body is rewritten into the typed calls (`==` → `eq`, `>=` → `ge`,
/// `&&` → `and`, `!` → `not`, ...), so each comparison is type-checked against the
/// column's Rust type. Values are literals and variables; arithmetic, `if`,
/// comparing two columns, calling methods on values and fields of other structs
/// are compile errors at the offending token. Pass the result to `Query::filter`.
///
/// # `None`: properties that are not set
///
/// The Table service has no null. An `Option` field that is `None` is not
/// written at all, and every comparison with a missing property is false, `ne`
/// included. `filter!` keeps the meaning Rust gives to comparing an `Option`:
///
/// | written | selects | sent as |
/// |---|---|---|
/// | `e.age == None`, `e.age.is_none()` | Age not set | `not (Age eq 0 or Age ne 0)` |
/// | `e.age != None`, `e.age.is_some()` | Age set | `Age eq 0 or Age ne 0` |
/// | `e.age == Some(30)` | Age set and 30 | `Age eq 30` |
/// | `e.age != Some(30)` | Age not set, or not 30 | `not (Age eq 30)` |
/// | `e.age != 30` | Age set and not 30 (a plain comparison needs a value) | `Age ne 30` |
///
/// "Not set" also takes in a property stored as another Edm type than the
/// column's, which a typed read could not decode anyway. A test for `None`
/// costs two of the 15 comparisons a filter may hold, and no index serves it.
/// Ordering against `None` or `Some(..)` (`e.age < None`) and a variable of
/// type `Option` (`e.age == maybe`) are compile errors: match on the
/// `Option` before the filter. `odata!` refuses `null` for the same reason.
///
/// ```
/// use tablekit::{filter, TableEntity};
///
/// #[derive(TableEntity)]
/// #[tablekit(partition_key = "{team}", row_key = "{name}")]
/// struct Player {
///     team: String,
///     name: String,
///     email: Option<String>,
///     age: Option<i32>,
/// }
///
/// let svc = tablekit::TableServiceClient::from_connection_string("UseDevelopmentStorage=true")?;
/// let players = svc.table::<Player>("Players")?;
/// let q = players
///     .query()
///     .filter(filter!(|e| e.email == None && e.age != Some(30)));
/// assert_eq!(
///     q.filter_text()?.as_deref(),
///     Some("not (Email eq '' or Email ne '') and not (Age eq 30)")
/// );
/// # Ok::<(), tablekit::Error>(())
/// ```
#[proc_macro]
pub fn filter(input: TokenStream) -> TokenStream {
    filter_macro::expand(input.into()).into()
}

/// `odata!("LastName eq {name} and Age gt {age}")`: a hand-written OData filter
/// whose `{placeholders}` (variables, or `{}` with arguments) are written as typed,
/// escaped literals (`'O''Brien'`, `30`, `9000000000L`, `datetime'…'`). Pass the
/// result to `Query::filter_raw`; it is parsed before any request.
///
/// `null` is a compile error (the service stores no nulls), and so is a value
/// of type `Option`: test a property that is not set with `filter!`'s
/// `e.field == None`.
#[proc_macro]
pub fn odata(input: TokenStream) -> TokenStream {
    odata_macro::expand(input.into()).into()
}
