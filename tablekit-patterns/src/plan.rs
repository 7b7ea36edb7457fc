//! Composing the writes of several patterns, and plain writes, into one
//! entity group transaction.
//!
//! Every pattern that keeps entities of one partition in step can **plan** a
//! write instead of sending it: `plan_insert`, `plan_update`, `plan_delete`
//! return a [`Plan`], the operations it would send. Plans of several patterns
//! and plain [`TransactionOp`]s join with [`Plan::and`] into one plan, which
//! is sent as one transaction ([`Plan::send`]) or added to a transaction of
//! your own ([`Plan::add_to`]). The service applies it all or nothing.
//!
//! The transaction's rules are checked before any request, for the combined
//! plan: one partition ([`Plan::and`] refuses two), at most 100 operations,
//! at most 4 MiB, one operation per entity ([`Plan::add_to`] and
//! [`Plan::send`] refuse more). Two plans that write the same entity are
//! joined into one operation when that is the same write: two merges of
//! different properties under the same condition (the department entity's
//! count and its manager's details), an insert and a merge of a new entity.
//! Any other pair on one entity is refused.
//!
//! A plan that read something first (the count of a partition, the ETag of a
//! department) is only as good as that read: when another writer changed the
//! entity in between, the service refuses the whole transaction (412, or 409
//! for an entity created meanwhile). [`transact`] plans again from fresh
//! reads and retries, as each pattern's own methods do.
//!
//! ```
//! use tablekit::{DynamicEntity, ETag, TableEntity, TableServiceClient, table::TransactionOp};
//! use tablekit_patterns::index::{Index, IndexedTable};
//! use tablekit_patterns::plan::{transact, Plan};
//! use tablekit_patterns::summary::CountedPartition;
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     email: String,
//!     #[tablekit(etag)]
//!     etag: Option<ETag>,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded();
//! let table = service.table::<Employee>("Employees")?;
//! table.create_table().await?;
//! let by_email = Index::new("email", "email_", |e: &Employee| e.email.clone());
//! let indexed = IndexedTable::new(table.clone())?.with_index(&by_email)?;
//! let counted = CountedPartition::new(table.clone(), "Department", "EmployeeCount");
//!
//! let jones = Employee { department: "Sales".into(), employee_id: 223, email: "jonesj@contoso.com".into(), etag: None };
//! // One transaction: the employee, its index copy, the department's count.
//! let applied = transact(&table, |_attempt| async {
//!     indexed.plan_insert(&jones)?.and(counted.plan_insert(&jones).await?)
//! })
//! .await?;
//! assert_eq!(applied.len(), 3);
//! assert_eq!(counted.count("Sales").await?, 1);
//! # Ok(()) }
//! ```

use std::future::Future;
use std::ops::Range;
use std::time::Duration;

use tablekit::{
    table::{Transaction, TransactionOp, TransactionResult},
    DynamicEntity, ETag, EntityKey, Error, IfMatch, Result, TableClient, TableEntity, UpdateMode,
};

use crate::error::refused;

/// How many times [`transact`] plans again after another writer changed an
/// entity the plan read.
pub const MAX_ATTEMPTS: usize = 16;

/// What a refusal of one planned operation means: the plan's read is stale
/// (plan again), or the write itself is refused (report it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stale {
    /// A 409 on this operation means another writer created the entity
    /// since the plan read that it was absent.
    pub(crate) on_conflict: bool,
    /// A 404 on this operation means another writer deleted the entity
    /// since the plan read it.
    pub(crate) on_not_found: bool,
}

impl Stale {
    pub(crate) const NEVER: Stale = Stale {
        on_conflict: false,
        on_not_found: false,
    };
    pub(crate) const CREATED: Stale = Stale {
        on_conflict: true,
        on_not_found: false,
    };
    pub(crate) const DELETED: Stale = Stale {
        on_conflict: false,
        on_not_found: true,
    };

    fn or(self, other: Stale) -> Stale {
        Stale {
            on_conflict: self.on_conflict || other.on_conflict,
            on_not_found: self.on_not_found || other.on_not_found,
        }
    }
}

/// The operations of one entity group transaction, planned by patterns and
/// added by hand; see the [module docs](self).
#[derive(Debug, Clone, Default)]
#[must_use = "a plan does nothing until sent or added to a transaction"]
pub struct Plan {
    ops: Vec<(TransactionOp, Stale)>,
}

impl Plan {
    /// An empty plan.
    pub fn new() -> Self {
        Plan::default()
    }

    /// A plan of one plain operation.
    pub fn of(op: TransactionOp) -> Self {
        Plan {
            ops: vec![(op, Stale::NEVER)],
        }
    }

    /// Adds a pattern's operation with what its refusal means.
    pub(crate) fn push_planned(&mut self, op: TransactionOp, stale: Stale) -> Result<()> {
        self.check_partition(&op)?;
        self.ops.push((op, stale));
        Ok(())
    }

    fn check_partition(&self, op: &TransactionOp) -> Result<()> {
        if let Some((first, _)) = self.ops.first() {
            let (a, b) = (first.key(), op.key());
            if a.partition_key != b.partition_key {
                return Err(refused(
                    "plan",
                    format!(
                        "PartitionKey {:?} differs from the plan's {:?}; a transaction spans one partition",
                        b.partition_key, a.partition_key
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Adds a plain operation (a write of your own). Refused if it is of
    /// another partition, or writes an entity the plan writes in a way that
    /// cannot be one operation.
    pub fn push(&mut self, op: TransactionOp) -> Result<&mut Self> {
        self.join(op, Stale::NEVER)?;
        Ok(self)
    }

    /// This plan and then `other`'s operations, in one plan: writes of one
    /// entity are joined where they are the same write (see the [module
    /// docs](self)), anything else on one entity is refused, and so is a
    /// plan of another partition.
    pub fn and(mut self, other: Plan) -> Result<Plan> {
        for (op, stale) in other.ops {
            self.join(op, stale)?;
        }
        Ok(self)
    }

    fn join(&mut self, op: TransactionOp, stale: Stale) -> Result<()> {
        self.check_partition(&op)?;
        let key = op.key();
        let Some(at) = self.ops.iter().position(|(o, _)| o.key() == key) else {
            self.ops.push((op, stale));
            return Ok(());
        };
        let (mine, my_stale) = self.ops[at].clone();
        let joined = join_ops(mine, op).map_err(|why| {
            refused(
                "plan",
                format!(
                    "two writes of ({:?}, {:?}) cannot be one operation: {why}",
                    key.partition_key, key.row_key
                ),
            )
        })?;
        self.ops[at] = (joined, my_stale.or(stale));
        Ok(())
    }

    /// The planned operations, in order.
    pub fn ops(&self) -> impl Iterator<Item = &TransactionOp> {
        self.ops.iter().map(|(op, _)| op)
    }

    /// How many operations the plan holds.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the plan holds no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The position of the operation that writes `key`, if any.
    pub fn position(&self, key: &EntityKey) -> Option<usize> {
        self.ops.iter().position(|(op, _)| op.key() == *key)
    }

    /// Adds the operations to `tx`, checked there (one partition, at most
    /// 100 operations and 4 MiB, one per entity); returns the indexes they
    /// took in it.
    pub fn add_to<T: TableEntity>(self, tx: &mut Transaction<T>) -> Result<Range<usize>> {
        tx.extend(self.ops.into_iter().map(|(op, _)| op))
    }

    /// Sends the plan as one transaction of `table`. An empty plan sends
    /// nothing. A refusal is returned as the service gave it; use
    /// [`transact`] to plan again when a planned read went stale.
    pub async fn send<T: TableEntity>(self, table: &TableClient<T>) -> Result<Applied> {
        if self.ops.is_empty() {
            return Ok(Applied {
                keys: Vec::new(),
                result: None,
            });
        }
        let keys: Vec<EntityKey> = self.ops.iter().map(|(op, _)| op.key()).collect();
        let mut tx = table.with_type::<DynamicEntity>().transaction();
        self.add_to(&mut tx)?;
        let result = tx.send().await?;
        Ok(Applied {
            keys,
            result: Some(result),
        })
    }

    /// Whether `e`, the refusal of this plan's transaction, means a read the
    /// plan was built from is stale: another writer changed (412), created
    /// (409 where the plan inserts what it read as absent) or deleted (404
    /// where the plan updates what it read) an entity in between.
    pub fn is_stale(&self, e: &Error) -> bool {
        if e.is_precondition_failed() {
            return true;
        }
        let Some((_, stale)) = e.batch_index().and_then(|i| self.ops.get(i)) else {
            return false;
        };
        (e.is_conflict() && stale.on_conflict) || (e.is_not_found() && stale.on_not_found)
    }
}

impl From<TransactionOp> for Plan {
    fn from(op: TransactionOp) -> Self {
        Plan::of(op)
    }
}

/// Joins two writes of one entity into one operation, where they are one
/// write: properties of the second win only where the first does not set
/// them (a property set to two values is refused).
fn join_ops(a: TransactionOp, b: TransactionOp) -> std::result::Result<TransactionOp, String> {
    use TransactionOp::{Insert, Update, Upsert};
    let merge = UpdateMode::Merge;
    Ok(match (a, b) {
        // Two patterns planning the same write of one entity (both delete
        // the employee under the ETag read): one operation.
        (a, b) if a == b => a,
        (Insert(x), Insert(y)) => Insert(union(x, y)?),
        (Insert(x), Upsert(y, m)) | (Upsert(y, m), Insert(x)) if m == merge => Insert(union(x, y)?),
        (Upsert(x, m1), Upsert(y, m2)) if m1 == merge && m2 == merge => Upsert(union(x, y)?, merge),
        (Update(x, m1, c), Upsert(y, m2)) | (Upsert(y, m2), Update(x, m1, c))
            if m1 == merge && m2 == merge =>
        {
            Update(union(x, y)?, merge, c)
        }
        (Update(x, m1, c1), Update(y, m2, c2)) if m1 == merge && m2 == merge && c1 == c2 => {
            Update(union(x, y)?, merge, c1)
        }
        // An empty merge guards an entity (it is unchanged since read): any
        // update or delete under the same condition guards it as well.
        (Update(x, m, c1), Update(y, m2, c2)) | (Update(y, m2, c2), Update(x, m, c1))
            if m2 == merge && y.properties.is_empty() && c1 == c2 =>
        {
            Update(x, m, c1)
        }
        (TransactionOp::Delete(k, c1), Update(y, m2, c2))
        | (Update(y, m2, c2), TransactionOp::Delete(k, c1))
            if m2 == merge && y.properties.is_empty() && c1 == c2 =>
        {
            TransactionOp::Delete(k, c1)
        }
        (Update(_, m1, c1), Update(_, m2, c2)) if m1 == merge && m2 == merge => {
            return Err(format!(
                "two merges under different conditions ({}, {})",
                condition(&c1),
                condition(&c2)
            ))
        }
        (a, b) => return Err(format!("{} and {}", verb(&a), verb(&b))),
    })
}

fn condition(c: &IfMatch) -> String {
    match c {
        IfMatch::Any => "any ETag".into(),
        IfMatch::ETag(e) => format!("ETag {}", e.as_str()),
    }
}

fn verb(op: &TransactionOp) -> &'static str {
    match op {
        TransactionOp::Insert(_) => "an insert",
        TransactionOp::Upsert(_, UpdateMode::Merge) => "an upsert (merge)",
        TransactionOp::Upsert(..) => "an upsert (replace)",
        TransactionOp::Update(_, UpdateMode::Merge, _) => "a merge",
        TransactionOp::Update(..) => "a replace",
        TransactionOp::Delete(..) => "a delete",
        _ => "an operation",
    }
}

fn union(mut x: DynamicEntity, y: DynamicEntity) -> std::result::Result<DynamicEntity, String> {
    for (name, value) in &y.properties {
        match x.get(name) {
            Some(v) if v != value => {
                return Err(format!(
                    "property {name:?} is set to {v:?} and to {value:?}"
                ))
            }
            Some(_) => {}
            None => {
                x.set(name.to_string(), value.clone());
            }
        }
    }
    Ok(x)
}

/// What a sent [`Plan`] wrote: the new ETags by entity.
#[derive(Debug, Clone)]
pub struct Applied {
    keys: Vec<EntityKey>,
    result: Option<TransactionResult>,
}

impl Applied {
    /// The new ETag of the entity `key` (`None` for a delete, or an entity
    /// the plan did not write).
    pub fn etag(&self, key: &EntityKey) -> Option<&ETag> {
        let at = self.keys.iter().position(|k| k == key)?;
        self.result.as_ref()?.etag(at)
    }

    /// How many operations were sent.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether nothing was sent (the plan was empty).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// Builds a plan with `plan` (called with the attempt number, 1 first) and
/// sends it as one transaction of `table`; when the service refuses it
/// because a read the plan was built from went stale
/// ([`Plan::is_stale`]), waits a short random time and plans again from
/// fresh reads, at most [`MAX_ATTEMPTS`] times. Any other refusal (a taken
/// key, a value of a unique index) is returned at once.
pub async fn transact<T, F, Fut>(table: &TableClient<T>, mut plan: F) -> Result<Applied>
where
    T: TableEntity,
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<Plan>>,
{
    let mut attempt = 1;
    loop {
        let planned = plan(attempt).await?;
        let judge = planned.clone();
        match planned.send(table).await {
            Err(e) if judge.is_stale(&e) && attempt < MAX_ATTEMPTS => {
                tokio::time::sleep(pause(attempt)).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// A random pause before attempt `attempt + 1`: up to 2 ms doubling to 64 ms.
fn pause(attempt: usize) -> Duration {
    let ceiling = 2u64 << attempt.min(5);
    Duration::from_micros(fastrand::u64(0..=ceiling * 1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merge(rk: &str, name: &str, v: i32, c: IfMatch) -> TransactionOp {
        TransactionOp::update(
            &DynamicEntity::new("Sales", rk).with(name, v),
            UpdateMode::Merge,
            c,
        )
        .unwrap()
    }

    #[test]
    fn two_merges_of_one_entity_under_one_condition_are_one_operation() {
        let a = Plan::of(merge("Department", "EmployeeCount", 3, IfMatch::Any));
        let b = Plan::of(merge("Department", "ManagerId", 223, IfMatch::Any));
        let joined = a.and(b).unwrap();
        assert_eq!(joined.len(), 1);
        let TransactionOp::Update(e, UpdateMode::Merge, IfMatch::Any) =
            joined.ops().next().unwrap()
        else {
            panic!("a merge")
        };
        assert_eq!(e.properties.len(), 2);
    }

    #[test]
    fn an_insert_and_a_merge_of_a_new_entity_are_one_insert() {
        let insert = TransactionOp::insert(
            &DynamicEntity::new("Sales", "Department").with("EmployeeCount", 1),
        )
        .unwrap();
        let upsert = TransactionOp::upsert(
            &DynamicEntity::new("Sales", "Department").with("ManagerId", "000223"),
            UpdateMode::Merge,
        )
        .unwrap();
        let joined = Plan::of(upsert).and(Plan::of(insert)).unwrap();
        assert!(
            matches!(joined.ops().next(), Some(TransactionOp::Insert(e)) if e.properties.len() == 2)
        );
    }

    #[test]
    fn conflicting_writes_of_one_entity_are_refused() {
        let etag = ETag::new("W/\"1\"");
        let a = Plan::of(merge("Department", "EmployeeCount", 3, IfMatch::Any));
        let b = Plan::of(merge("Department", "EmployeeCount", 4, IfMatch::Any));
        let err = a.clone().and(b).unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
        assert!(
            err.to_string().contains("\"EmployeeCount\" is set to"),
            "{err}"
        );
        let c = Plan::of(merge("Department", "ManagerId", 1, IfMatch::ETag(etag)));
        assert!(a
            .clone()
            .and(c)
            .unwrap_err()
            .to_string()
            .contains("different conditions"));
        let d = Plan::of(TransactionOp::delete(("Sales", "Department"), IfMatch::Any).unwrap());
        assert!(a
            .and(d)
            .unwrap_err()
            .to_string()
            .contains("a merge and a delete"));
    }

    #[test]
    fn two_partitions_are_refused_before_any_request() {
        let a = Plan::of(merge("Department", "EmployeeCount", 3, IfMatch::Any));
        let other = TransactionOp::insert(&DynamicEntity::new("HR", "x")).unwrap();
        let err = a.and(Plan::of(other)).unwrap_err();
        assert!(matches!(
            err.validation(),
            Some(tablekit::error::ValidationError::Pattern {
                pattern: "plan",
                ..
            })
        ));
        assert!(
            err.to_string()
                .contains("a transaction spans one partition"),
            "{err}"
        );
    }
}
