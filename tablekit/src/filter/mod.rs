//! Filters: the expression tree of an OData `$filter`, its text form, and (for
//! the embedded backend and for checking) its parser and evaluator.

mod eval;
mod expr;
mod parse;
mod plan;
mod raw;
#[cfg(any(test, feature = "test-support"))]
pub mod strategies;
mod typed;

pub use crate::columns::{col, DynColumn};
pub use crate::error::ParseError;
pub use eval::matches;
pub use expr::{CmpOp, Expr};
pub use parse::parse;
pub(crate) use plan::plan_with_residual;
pub use plan::{plan, QueryPlan};
pub use raw::RawFilter;
#[doc(hidden)]
pub use raw::{
    filter_and, filter_not, filter_of, filter_or, odata_build, odata_value, Condition, ODataPiece,
    ODataValue,
};
pub use typed::{prefix_successor, DynBool, Filter, FilterValue, IntoFilterValue, MAX_COMPARISONS};
