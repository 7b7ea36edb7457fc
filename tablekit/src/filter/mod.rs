//! Filters: the expression tree of an OData `$filter`, its text form, and (for
//! the embedded backend and for checking) its parser and evaluator.

mod expr;

pub use expr::{CmpOp, Expr};
