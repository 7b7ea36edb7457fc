//! [proptest](mod@proptest) strategies for filters: literals of every Edm
//! type, and random filters built through the typed DSL ([`col`],
//! `starts_with`, `&`, `|`, `not`), for property tests of code built on
//! tablekit, tablekit's own, and the cross-crate differential test of the two
//! backends (with [`Filter::matches`] as the model of the service).
//!
//! Compiled for tablekit's unit tests and behind the non-default
//! `test-support` feature. A feature rather than an always-compiled
//! `#[doc(hidden)]` module, because this module needs proptest: as a feature,
//! proptest stays out of every user's dependency graph, and only test code
//! (the `tests/` package) turns it on.

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use uuid::Uuid;

use super::expr::CmpOp;
#[cfg(test)]
use super::expr::Expr;
use super::Filter;
use crate::columns::col;
use crate::edm::{max_datetime, min_datetime, EdmType, EdmValue};
use crate::entity::DynamicEntity;

/// Property names, the three system properties included.
#[cfg(test)]
const NAMES: &[&str] = &[
    "PartitionKey",
    "RowKey",
    "Timestamp",
    "A",
    "B",
    "Rating",
    "_x1",
];

/// The six comparison operators.
#[cfg(test)]
fn op() -> impl Strategy<Value = CmpOp> {
    prop::sample::select(vec![
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Gt,
        CmpOp::Ge,
        CmpOp::Lt,
        CmpOp::Le,
    ])
}

/// Any instant the service stores, at its 100 ns resolution.
pub fn datetime() -> impl Strategy<Value = DateTime<Utc>> {
    let (lo, hi) = (min_datetime().timestamp(), max_datetime().timestamp());
    (lo..=hi, 0u32..10_000_000)
        .prop_map(|(s, ticks)| DateTime::from_timestamp(s, ticks * 100).expect("in range"))
}

/// Literals of all eight types over their whole range (finite doubles).
pub fn wide_literal() -> impl Strategy<Value = EdmValue> {
    prop_oneof![
        any::<String>().prop_map(EdmValue::String),
        "[a'\u{e9}\u{FFFD}\u{1F600} ]{0,8}".prop_map(EdmValue::String),
        any::<i32>().prop_map(EdmValue::Int32),
        any::<i64>().prop_map(EdmValue::Int64),
        any::<f64>()
            .prop_filter("finite", |d| d.is_finite())
            .prop_map(EdmValue::Double),
        any::<bool>().prop_map(EdmValue::Boolean),
        datetime().prop_map(EdmValue::DateTime),
        any::<u128>().prop_map(|g| EdmValue::Guid(Uuid::from_u128(g))),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(EdmValue::Binary),
    ]
}

/// Values of one Edm type from a small pool, so that comparisons often tie.
/// The Int64 pool reaches past the Int32 range; the Double pool holds `-0.0`
/// (which Azurite reads back as `0.0`: filter it out where that matters).
pub fn small_value_of(edm: EdmType) -> BoxedStrategy<EdmValue> {
    match edm {
        EdmType::String => prop::sample::select(vec![
            "",
            "a",
            "b",
            "ab",
            "O'Brien",
            "\u{FFFD}",
            "\u{1F600}",
            "\u{E000}x",
        ])
        .prop_map(EdmValue::from)
        .boxed(),
        EdmType::Int32 => (-2i32..=2).prop_map(EdmValue::Int32).boxed(),
        EdmType::Int64 => {
            prop::sample::select(vec![-3_000_000_000_i64, -2, -1, 0, 1, 2, 3_000_000_000])
                .prop_map(EdmValue::Int64)
                .boxed()
        }
        EdmType::Double => prop::sample::select(vec![-1.5, -0.0, 0.0, 1.0, 2.5])
            .prop_map(EdmValue::Double)
            .boxed(),
        EdmType::Boolean => any::<bool>().prop_map(EdmValue::Boolean).boxed(),
        EdmType::DateTime => prop::sample::select(vec![0i64, 1, 1_000_000_000])
            .prop_map(|s| EdmValue::DateTime(DateTime::from_timestamp(s, 0).expect("valid")))
            .boxed(),
        EdmType::Guid => prop::sample::select(vec![
            0u128,
            1,
            0x7fff_ffff << 96,
            0x8000_0000 << 96,
            u128::MAX,
        ])
        .prop_map(|g| EdmValue::Guid(Uuid::from_u128(g)))
        .boxed(),
        EdmType::Binary => {
            prop::sample::select(vec![vec![], vec![0u8], vec![0, 1], vec![1], vec![255]])
                .prop_map(EdmValue::Binary)
                .boxed()
        }
    }
}

/// Every Edm type, in the order of [`small_value`]'s arms.
pub const EDM_TYPES: [EdmType; 8] = [
    EdmType::String,
    EdmType::Int32,
    EdmType::Int64,
    EdmType::Double,
    EdmType::Boolean,
    EdmType::DateTime,
    EdmType::Guid,
    EdmType::Binary,
];

/// Values from the small pools of every type ([`small_value_of`]).
/// `nan` adds a NaN to the doubles (stored values only: literals cannot be NaN).
pub fn small_value(nan: bool) -> impl Strategy<Value = EdmValue> {
    let arms: Vec<BoxedStrategy<EdmValue>> = EDM_TYPES
        .iter()
        .map(|&t| match t {
            EdmType::Double if nan => prop_oneof![
                5 => small_value_of(t),
                1 => Just(EdmValue::Double(f64::NAN)),
            ]
            .boxed(),
            t => small_value_of(t),
        })
        .collect();
    prop::strategy::Union::new(arms)
}

/// Random trees (of the crate's expression type): and/or/not nested up to
/// depth 4 over comparisons.
#[cfg(test)]
pub(crate) fn expr(
    literal: impl Strategy<Value = EdmValue> + 'static,
) -> impl Strategy<Value = Expr> {
    let leaf = (prop::sample::select(NAMES), op(), literal)
        .prop_map(|(name, op, value)| Expr::cmp(name, op, value));
    leaf.prop_recursive(4, 32, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a.and(b)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a.or(b)),
            inner.prop_map(Expr::negate),
        ]
    })
}

/// The typed DSL's comparison `col::<T>(name).op(value)`, where `T` is the Rust
/// type of the value's Edm type (`i32` for Int32, `Vec<u8>` for Binary, ...).
fn dsl_comparison(name: &str, op: CmpOp, value: EdmValue) -> Filter<DynamicEntity> {
    fn apply<V>(c: super::DynColumn<V>, op: CmpOp, v: V) -> Filter<DynamicEntity>
    where
        V: super::FilterValue,
    {
        match op {
            CmpOp::Eq => c.eq(v),
            CmpOp::Ne => c.ne(v),
            CmpOp::Gt => c.gt(v),
            CmpOp::Ge => c.ge(v),
            CmpOp::Lt => c.lt(v),
            CmpOp::Le => c.le(v),
        }
    }
    match value {
        EdmValue::String(v) => apply(col::<String>(name), op, v),
        EdmValue::Int32(v) => apply(col::<i32>(name), op, v),
        EdmValue::Int64(v) => apply(col::<i64>(name), op, v),
        EdmValue::Double(v) => apply(col::<f64>(name), op, v),
        EdmValue::Boolean(v) => apply(col::<bool>(name), op, v),
        EdmValue::DateTime(v) => apply(col::<DateTime<Utc>>(name), op, v),
        EdmValue::Guid(v) => apply(col::<Uuid>(name), op, v),
        EdmValue::Binary(v) => apply(col::<Vec<u8>>(name), op, v),
    }
}

/// Random filters over `columns` (each a property name and a strategy for its
/// values, of one Edm type), built only through the typed DSL: comparisons
/// with the six operators, `starts_with` on String values, combined with `&`,
/// `|` and `not` up to `depth` levels. Filters over the service's limit of 15
/// comparisons are left out.
pub fn dsl_filter(
    columns: Vec<(&'static str, BoxedStrategy<EdmValue>)>,
    depth: u32,
) -> BoxedStrategy<Filter<DynamicEntity>> {
    assert!(!columns.is_empty(), "dsl_filter needs a column");
    let leaves: Vec<BoxedStrategy<Filter<DynamicEntity>>> = columns
        .into_iter()
        .map(|(name, values)| {
            // 0..6 pick an operator; 6 asks for `starts_with` (a String value only).
            (values, 0..7u8)
                .prop_map(move |(v, k)| match (k, v) {
                    (6, EdmValue::String(prefix)) => col::<String>(name).starts_with(&prefix),
                    (k, v) => {
                        let ops = [
                            CmpOp::Eq,
                            CmpOp::Ne,
                            CmpOp::Gt,
                            CmpOp::Ge,
                            CmpOp::Lt,
                            CmpOp::Le,
                        ];
                        dsl_comparison(name, ops[usize::from(k % 6)], v)
                    }
                })
                .boxed()
        })
        .collect();
    prop::strategy::Union::new(leaves)
        .prop_recursive(depth, 1 << depth, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(a, b)| a & b),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| a | b),
                inner.prop_map(Filter::not),
            ]
        })
        .prop_filter("at most 15 comparisons", |f| f.expr().is_ok())
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{matches, parse};

    proptest! {
        /// What the DSL generator builds prints as OData that parses back to the
        /// same tree, and a `starts_with` leaf matches exactly the prefixed strings.
        #[test]
        fn dsl_filters_print_and_parse_back(
            f in dsl_filter(
                vec![
                    ("S", small_value_of(EdmType::String)),
                    ("N", small_value_of(EdmType::Int64)),
                    ("G", small_value_of(EdmType::Guid)),
                ],
                3,
            ),
        ) {
            let expr = f.expr().unwrap();
            prop_assert_eq!(&parse(&expr.to_string()).unwrap(), expr);
        }

        #[test]
        fn a_starts_with_leaf_matches_the_prefixed_strings(
            prefix in small_value_of(EdmType::String),
            s in small_value_of(EdmType::String),
        ) {
            let (EdmValue::String(prefix), EdmValue::String(s)) = (prefix, s) else {
                unreachable!("String pools")
            };
            let f = col::<String>("S").starts_with(&prefix);
            let e = DynamicEntity::new("p", "r").with("S", s.as_str());
            prop_assert_eq!(matches(f.expr().unwrap(), &e), s.starts_with(&prefix));
        }
    }
}
