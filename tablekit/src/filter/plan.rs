//! What kind of read a filter asks of the service, by the ranking of the
//! querying guide: point query, partition range, partition scan, table range,
//! table scan (most to least efficient).

use super::expr::{CmpOp, Expr};
use crate::edm::EdmValue;

/// How the service will serve a query, best first.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueryPlan {
    /// `PartitionKey eq` and `RowKey eq`: one entity, read by key.
    Point {
        /// The PartitionKey.
        partition_key: String,
        /// The RowKey.
        row_key: String,
    },
    /// `PartitionKey eq` and a RowKey range (or prefix): a range inside one partition.
    PartitionRange {
        /// The PartitionKey.
        partition_key: String,
    },
    /// `PartitionKey eq` and other conditions: every entity of one partition is read.
    PartitionScan {
        /// The PartitionKey.
        partition_key: String,
    },
    /// A PartitionKey range: the partitions in the range are read.
    TableRange,
    /// Anything else, including an `or` across partitions: the whole table is read.
    TableScan,
}

impl QueryPlan {
    /// A short name: `point`, `partition range`, `partition scan`, `table range`, `table scan`.
    pub fn name(&self) -> &'static str {
        match self {
            QueryPlan::Point { .. } => "point",
            QueryPlan::PartitionRange { .. } => "partition range",
            QueryPlan::PartitionScan { .. } => "partition scan",
            QueryPlan::TableRange => "table range",
            QueryPlan::TableScan => "table scan",
        }
    }
}

/// The querying guide's words, with the partition where there is one:
/// `point Sales/empid_000223`, `partition range Sales`, `table scan`.
///
/// ```
/// use tablekit::filter::QueryPlan;
/// let plan = QueryPlan::PartitionScan { partition_key: "Sales".into() };
/// assert_eq!(plan.to_string(), "partition scan of Sales");
/// ```
impl std::fmt::Display for QueryPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueryPlan::Point {
                partition_key,
                row_key,
            } => write!(f, "point read of {partition_key}/{row_key}"),
            QueryPlan::PartitionRange { partition_key } => {
                write!(f, "partition range in {partition_key}")
            }
            QueryPlan::PartitionScan { partition_key } => {
                write!(f, "partition scan of {partition_key}")
            }
            QueryPlan::TableRange | QueryPlan::TableScan => f.write_str(self.name()),
        }
    }
}

fn conjuncts<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::And(a, b) => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        other => out.push(other),
    }
}

fn key_eq<'e>(parts: &[&'e Expr], key: &str) -> Option<(usize, &'e str)> {
    parts.iter().enumerate().find_map(|(i, e)| match e {
        Expr::Cmp {
            property,
            op: CmpOp::Eq,
            value: EdmValue::String(v),
        } if property == key => Some((i, v.as_str())),
        _ => None,
    })
}

fn key_range(parts: &[&Expr], key: &str) -> bool {
    parts.iter().any(|e| {
        matches!(e, Expr::Cmp { property, op: CmpOp::Gt | CmpOp::Ge | CmpOp::Lt | CmpOp::Le, value: EdmValue::String(_) } if property == key)
    })
}

/// Whether a filter compares only the keys (`PartitionKey`, `RowKey`) with
/// strings, joined by `and`: every entity in its key range matches, so a
/// query's pages fill up and its request count can be foreseen.
pub(crate) fn keys_only(filter: &Expr) -> bool {
    let mut parts = Vec::new();
    conjuncts(filter, &mut parts);
    parts.iter().all(|e| {
        matches!(e, Expr::Cmp { property, value: EdmValue::String(_), .. }
            if property == "PartitionKey" || property == "RowKey")
    })
}

/// Classifies a filter; `None` (no filter) is a table scan.
#[cfg(any(test, feature = "embedded"))]
pub(crate) fn plan(filter: Option<&Expr>) -> QueryPlan {
    plan_with_residual(filter).0
}

/// The plan, and whether conditions remain beyond the keys of a point query.
pub(crate) fn plan_with_residual(filter: Option<&Expr>) -> (QueryPlan, bool) {
    let Some(filter) = filter else {
        return (QueryPlan::TableScan, false);
    };
    let mut parts = Vec::new();
    conjuncts(filter, &mut parts);
    if let Some((_, pk)) = key_eq(&parts, "PartitionKey") {
        let partition_key = pk.to_owned();
        if let Some((_, rk)) = key_eq(&parts, "RowKey") {
            return (
                QueryPlan::Point {
                    partition_key,
                    row_key: rk.to_owned(),
                },
                parts.len() > 2,
            );
        }
        if key_range(&parts, "RowKey") {
            return (QueryPlan::PartitionRange { partition_key }, false);
        }
        return (QueryPlan::PartitionScan { partition_key }, false);
    }
    if key_range(&parts, "PartitionKey") {
        return (QueryPlan::TableRange, false);
    }
    (QueryPlan::TableScan, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p: &str, op: CmpOp, v: &str) -> Expr {
        Expr::cmp(p, op, v)
    }

    #[test]
    fn the_guide_ranking() {
        let pk = || s("PartitionKey", CmpOp::Eq, "Sales");
        assert_eq!(
            plan(Some(&pk().and(s("RowKey", CmpOp::Eq, "empid_000223")))),
            QueryPlan::Point {
                partition_key: "Sales".into(),
                row_key: "empid_000223".into()
            }
        );
        assert_eq!(
            plan(Some(&pk().and(s("RowKey", CmpOp::Ge, "a")).and(s(
                "RowKey",
                CmpOp::Lt,
                "b"
            ))))
            .name(),
            "partition range"
        );
        assert_eq!(
            plan(Some(&pk().and(s("LastName", CmpOp::Eq, "Jones")))).name(),
            "partition scan"
        );
        assert_eq!(
            plan(Some(&s("PartitionKey", CmpOp::Ge, "A").and(s(
                "PartitionKey",
                CmpOp::Lt,
                "B"
            )))),
            QueryPlan::TableRange
        );
        assert_eq!(
            plan(Some(&s("LastName", CmpOp::Eq, "Jones"))),
            QueryPlan::TableScan
        );
        assert_eq!(
            plan(Some(&pk().or(s("PartitionKey", CmpOp::Eq, "HR")))),
            QueryPlan::TableScan
        );
        assert_eq!(plan(None), QueryPlan::TableScan);
        // A key compared with a non-string literal is not a key predicate.
        assert_eq!(
            plan(Some(&Expr::cmp("PartitionKey", CmpOp::Eq, 3))),
            QueryPlan::TableScan
        );
    }

    #[test]
    fn key_only_filters_are_told_from_filters_on_properties() {
        let pk = s("PartitionKey", CmpOp::Eq, "p");
        assert!(keys_only(&pk.clone().and(s("RowKey", CmpOp::Ge, "a"))));
        assert!(!keys_only(&pk.clone().and(Expr::cmp("Age", CmpOp::Gt, 3))));
        assert!(!keys_only(&pk.clone().or(s(
            "PartitionKey",
            CmpOp::Eq,
            "q"
        ))));
        assert!(!keys_only(&Expr::cmp("RowKey", CmpOp::Eq, 3)));
    }

    #[test]
    fn residual_conditions_of_a_point_query_are_reported() {
        let e = s("PartitionKey", CmpOp::Eq, "p")
            .and(s("RowKey", CmpOp::Eq, "r"))
            .and(Expr::cmp("Age", CmpOp::Gt, 3));
        let (p, residual) = plan_with_residual(Some(&e));
        assert_eq!(p.name(), "point");
        assert!(residual);
    }
}
