//! Filters: the expression tree of an OData `$filter`, its text form, and (for
//! the embedded backend and for checking) its parser and evaluator.

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
pub use eval::matches;
pub use expr::{CmpOp, Expr};
pub use parse::parse;
pub(crate) use plan::{keys_only, plan_with_residual};
pub use plan::{plan, QueryPlan};
pub use raw::RawFilter;
pub use typed::ComparableColumn;
pub use typed::{prefix_successor, DynBool, Filter, FilterValue, IntoFilterValue, MAX_COMPARISONS};
