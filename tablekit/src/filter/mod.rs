//! Filters: the typed filter DSL ([`Filter`], built from [`Column`]s), filters
//! written as OData text ([`RawFilter`], the `odata!` macro, and
//! [`Filter::parse`] to check and look into one), and how a query will be
//! served ([`QueryPlan`]).
//!
//! # How entities are compared
//!
//! The rules of the Table service, which the embedded store follows (and
//! which tablekit's test suite checks against Azurite and the service's
//! documentation):
//!
//! * `PartitionKey` and `RowKey` are `Edm.String`s; `Timestamp` is an
//!   `Edm.DateTime` taken from [`DynamicEntity::timestamp`](crate::DynamicEntity::timestamp) (missing when `None`).
//!   Those names always mean the system properties, never a custom property.
//! * **A missing property makes every comparison false**, `ne` included: the
//!   service has no nulls, and it skips entities that lack the property.
//! * **A literal of another Edm type than the property's makes every comparison
//!   false**, `ne` included (the data model's type-mismatch rule: `Rating gt 1.2`
//!   over `{A: Int32 2, B: Double 2.5}` returns only B). There are no numeric
//!   promotions: an `Edm.Int32` property does not match `2L`, nor an `Edm.Int64`
//!   property `2`, nor either `2.0`.
//! * `not` negates the result of its operand, so `not (Rating eq 2)` **is true**
//!   for an entity without `Rating` or whose `Rating` is a Double: the negation of
//!   a false comparison is true.
//! * Strings compare **ordinally by UTF-16 code units**, as .NET's
//!   `string.CompareOrdinal` does (the service stores UTF-16; the data model
//!   leaves its exact collation unspecified, so keep range-queried keys ASCII):
//!   no case folding or normalisation, and a character outside the Basic
//!   Multilingual Plane (a surrogate pair, `0xD800..=0xDFFF`) sorts *before*
//!   `U+E000..=U+FFFF`, unlike code-point (Rust `str`) order.
//! * Doubles follow IEEE 754: a NaN property is unordered, so `eq`, `gt`, `ge`,
//!   `lt`, `le` are false and `ne` is true; `-0.0 eq 0.0` is true.
//! * Int32, Int64 and DateTime compare numerically (DateTime chronologically);
//!   Boolean `false < true`; Binary bytewise (lexicographic, a prefix first).
//! * Guids compare by their 128-bit big-endian value, which is the order of their
//!   hyphenated text form and of .NET's `Guid.CompareTo` (`Data1` as an unsigned
//!   32-bit number, then `Data2`, `Data3`, then the 8 last bytes in order).

// The evaluator: the embedded store's, and the model of `Filter::matches`
// (test-support) and of the fuzz targets.
#[cfg(any(
    test,
    feature = "embedded",
    feature = "test-support",
    feature = "fuzzing"
))]
mod eval;
mod expr;
mod parse;
mod plan;
pub(crate) mod raw;
#[cfg(any(test, feature = "test-support"))]
pub mod strategies;
mod typed;

pub use crate::columns::EncryptedColumn;
pub use crate::columns::{col, Column, DynColumn, DynamicColumns, EntityColumns, PropertyName};
pub use crate::error::ParseError;
#[cfg(any(test, feature = "embedded", feature = "fuzzing"))]
pub(crate) use eval::matches;
#[cfg(any(test, feature = "embedded"))]
pub(crate) use expr::CmpOp;
pub(crate) use expr::Expr;
pub(crate) use parse::parse;
#[cfg(any(test, feature = "embedded"))]
pub(crate) use plan::plan;
pub use plan::QueryPlan;
pub(crate) use plan::{keys_only, plan_with_residual};
pub use raw::RawFilter;
pub use typed::ComparableColumn;
pub use typed::{
    prefix_successor, Comparison, Filter, FilterValue, IntoFilterValue, MAX_COMPARISONS,
};
