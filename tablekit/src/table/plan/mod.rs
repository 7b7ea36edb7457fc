//! Writes as values: a [`Plan`] is one or more writes bound to their table,
//! that run alone when awaited or compose, with the writes of design
//! patterns, into one entity group transaction.
//!
//! A plan is made without I/O: [`TableClient::plan_insert`] and its
//! siblings, a pattern's `plan_*` calls, or the building blocks below. It
//! knows the table it writes (its account and name) and the partition, so
//! [`Plan::and`] refuses, before any request, to join writes of another
//! table, account or partition, naming both.
//!
//! A write can depend on what is stored: an addition to a count
//! ([`Plan::add`]), or a write worked out from a read ([`Plan::after_read`],
//! [`Plan::after_range`]). Such a plan declares its reads; it does not make
//! them. When it is sent, each entity is read **once** however many parts of
//! the plan need it, every part is worked out from that read, and the
//! writes are folded into one operation per entity.
//!
//! # Composing is exact
//!
//! The transaction leaves the store as applying the plan's writes one after
//! another would, or the plan is refused before the transaction is sent:
//!
//! * two additions to one count add both (two employees planned from one
//!   read of their department add two);
//! * a merge after a write of the same entity lays its properties over it;
//!   a replace after it replaces it; a delete then an insert is a replace;
//! * what no one operation can do (an insert then a delete, two inserts, an
//!   update after a delete) is refused with the entity named;
//! * nothing is joined because two writes are equal.
//!
//! An ETag condition names the version a plan read before the transaction:
//! conditions on one entity must all name the same version (or be
//! [`IfMatch::Any`]), and a later write under it is not refused because an
//! earlier write of the same plan changed the entity.
//!
//! # Sending
//!
//! [`Plan::send`] (or `.await`) reads, folds, checks the transaction's rules
//! (at most 100 operations, 4 MiB, one partition of one table) and sends
//! one transaction. When the service refuses it because an entity the plan
//! read changed in between (412; 409 where it read nothing; 404 where it
//! read an entity), the plan is worked out again from fresh reads, up to
//! [`MAX_ATTEMPTS`] times. A refusal of a write the caller conditioned
//! (its own ETag) is returned at once. On success every entity passed by
//! `&mut` gets its new ETag, as a single write does.
//!
//! ```
//! use tablekit::{DynamicEntity, ETag, IfMatch, TableEntity, TableServiceClient};
//! use tablekit::table::Plan;
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:05}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     #[tablekit(etag)]
//!     etag: Option<ETag>,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded();
//! let staff = service.table::<Employee>("Staff")?;
//! staff.create_table().await?;
//! let raw = staff.with_type::<DynamicEntity>();
//! let count = |delta| Plan::add(&raw, ("Sales", "Department"), "EmployeeCount", delta, DynamicEntity::new("Sales", "Department"));
//!
//! let mut a = Employee { department: "Sales".into(), employee_id: 1, etag: None };
//! let mut b = Employee { department: "Sales".into(), employee_id: 2, etag: None };
//! // Two employees and two additions to their department's count: one read
//! // of the department, one transaction of three operations.
//! let applied = staff
//!     .plan_insert(&mut a)?
//!     .and(count(1)?)?
//!     .and(staff.plan_insert(&mut b)?)?
//!     .and(count(1)?)?
//!     .await?;
//! assert_eq!(applied.len(), 3);
//! assert!(a.etag.is_some() && b.etag.is_some());
//! let department = raw.get(("Sales", "Department")).await?.unwrap();
//! assert_eq!(department.get("EmployeeCount"), Some(&2.into()));
//!
//! // Another table, or another partition, is refused before any request.
//! let other = service.table::<Employee>("Contractors")?;
//! let c = Employee { department: "Sales".into(), employee_id: 3, etag: None };
//! let err = staff.plan_insert(&c)?.and(other.plan_insert(&c)?).unwrap_err();
//! assert!(err.is_invalid_input());
//! # Ok(()) }
//! ```

mod fold;
mod unit;

use std::collections::HashMap;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::entity::{ETag, EntityKey, IfMatch, TableEntity, UpdateMode};
use crate::error::{Error, Result, ValidationError};
use crate::filter::Column;
use crate::DynamicEntity;

use super::client::{TableClient, TransactionOp};
use fold::{Refusal, Step};

pub use unit::{SaveOutcome, UnitOfWork};

/// How many times a plan is worked out again after an entity it read changed.
pub const MAX_ATTEMPTS: usize = 16;

/// How deep a write worked out from a read may itself depend on reads.
const MAX_READ_DEPTH: usize = 8;

/// Which table a write goes to: the account (its table endpoint, or the
/// in-process store) and the table's name.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TableRef {
    account: Arc<str>,
    table: Arc<str>,
}

impl TableRef {
    pub(crate) fn of<T>(table: &TableClient<T>) -> Self {
        TableRef {
            account: table.handle().account_id().into(),
            table: table.handle().name.clone(),
        }
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The account: its table endpoint, or which in-process store.
    pub fn account(&self) -> &str {
        &self.account
    }
}

impl fmt::Debug for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "table {} of {}", self.table, self.account)
    }
}

/// A hook run with the attempt number before each transaction of a plan
/// (see [`Plan::before_send`]): an error fails the plan there.
type SendHook =
    Arc<dyn Fn(usize) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> + Send + Sync>;

/// Works out writes from an entity as read (`None`: there is none).
type ReadFn<'a> = dyn Fn(Option<&DynamicEntity>) -> Result<Plan<'static>> + Send + Sync + 'a;
/// Works out writes from the entities of a RowKey range, in RowKey order.
type RangeFn<'a> = dyn Fn(&[DynamicEntity]) -> Result<Plan<'static>> + Send + Sync + 'a;
/// Gives a written entity its new ETag (see [`PlanTarget`]).
pub type EtagSink<'a> = Box<dyn FnMut(&ETag) + Send + Sync + 'a>;
type Sink<'a> = EtagSink<'a>;

enum Part<'a> {
    Op(TransactionOp),
    Add {
        key: EntityKey,
        property: String,
        delta: i64,
        created: DynamicEntity,
    },
    Read {
        key: EntityKey,
        resolve: Box<ReadFn<'a>>,
    },
    Modify {
        key: EntityKey,
        change: Arc<fold::ModifyFn<'a>>,
    },
    Range {
        prefix: String,
        select: Option<Vec<String>>,
        resolve: Box<RangeFn<'a>>,
    },
}

impl fmt::Debug for Part<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Op(op) => op.fmt(f),
            Part::Add {
                key,
                property,
                delta,
                ..
            } => write!(f, "Add({key}, {property:?}, {delta:+})"),
            Part::Read { key, .. } => write!(f, "AfterRead({key})"),
            Part::Modify { key, .. } => write!(f, "Modify({key})"),
            Part::Range { prefix, .. } => write!(f, "AfterRange({prefix:?})"),
        }
    }
}

/// The table and partition a plan writes.
#[derive(Clone)]
struct Target {
    client: TableClient<DynamicEntity>,
    table: TableRef,
    partition_key: String,
}

/// One or more writes of one partition of one table, sent as one entity
/// group transaction; see the [module docs](self).
#[must_use = "a plan does nothing until sent or awaited"]
pub struct Plan<'a> {
    target: Option<Target>,
    parts: Vec<Part<'a>>,
    sinks: Vec<(EntityKey, Sink<'a>)>,
    before_send: Option<SendHook>,
}

impl fmt::Debug for Plan<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("table", &self.target.as_ref().map(|t| &t.table))
            .field(
                "partition_key",
                &self.target.as_ref().map(|t| &t.partition_key),
            )
            .field("parts", &self.parts)
            .finish()
    }
}

impl Default for Plan<'_> {
    fn default() -> Self {
        Plan::new()
    }
}

fn refuse(reason: impl Into<String>) -> Error {
    Error::invalid(ValidationError::Plan {
        reason: reason.into(),
    })
}

impl<'a> Plan<'a> {
    /// A plan of no writes: sending it sends nothing.
    pub fn new() -> Self {
        Plan {
            target: None,
            parts: Vec::new(),
            sinks: Vec::new(),
            before_send: None,
        }
    }

    fn on<T>(table: &TableClient<T>, key: &EntityKey, part: Part<'a>) -> Result<Self> {
        key.validate()?;
        Ok(Plan {
            target: Some(Target {
                client: table.with_type_unchecked(),
                table: TableRef::of(table),
                partition_key: key.partition_key.clone(),
            }),
            parts: vec![part],
            sinks: Vec::new(),
            before_send: None,
        })
    }

    /// A plan of one write of `table` (a [`TransactionOp`] of any entity
    /// type).
    pub fn op<T>(table: &TableClient<T>, op: TransactionOp) -> Result<Self> {
        let key = op.key();
        Plan::on(table, &key, Part::Op(op))
    }

    /// `delta` added to the integer property `property` (Int32 or Int64; a
    /// name, or a column handle of the derive) of
    /// the entity `key` of `table`, as it is read when the plan is sent:
    /// merged under the ETag read, so a change in between makes the plan be
    /// worked out again. When the entity does not exist it is inserted as
    /// `created` with the property set to `delta` (at least 0). A stored
    /// entity without the property (or with a value of another type) is a
    /// decode error naming it. Additions to one property in one plan add up.
    pub fn add(
        table: &TableClient<DynamicEntity>,
        key: impl Into<EntityKey>,
        property: impl crate::filter::PropertyName,
        delta: i64,
        created: DynamicEntity,
    ) -> Result<Self> {
        let key = key.into();
        let property = property.property_name().to_string();
        crate::validate::property_name(&property)?;
        let mut created = created;
        created.partition_key = key.partition_key.clone();
        created.row_key = key.row_key.clone();
        created.etag = None;
        created.timestamp = None;
        Plan::on(
            table,
            &key.clone(),
            Part::Add {
                key,
                property,
                delta,
                created,
            },
        )
    }

    /// The entity `key` of `table` changed by `change`, which gets the
    /// entity as the plan's earlier writes leave it (as read when the plan
    /// is sent, then those writes; `None`: absent) and returns it as it must
    /// be (`None`: deleted). The entity is written whole, under the ETag
    /// read, so a change in between makes the plan be worked out again, and
    /// two changes of one entity in one plan compose as one after the other:
    /// the second sees the first's result. [`add`](Self::add) is the case of
    /// one integer property. `change` may run again on each attempt.
    pub fn modify<F>(
        table: &TableClient<DynamicEntity>,
        key: impl Into<EntityKey>,
        change: F,
    ) -> Result<Self>
    where
        F: Fn(Option<&DynamicEntity>) -> Result<Option<DynamicEntity>> + Send + Sync + 'a,
    {
        let key = key.into();
        Plan::on(
            table,
            &key.clone(),
            Part::Modify {
                key,
                change: Arc::new(change),
            },
        )
    }

    /// Writes worked out from the entity `key` of `table` as read when the
    /// plan is sent (`None` when there is none): `resolve` returns them, as a
    /// plan of the same partition of the same table, with no ETag to give
    /// back and nothing borrowed (it is worked out again on every attempt). The read is shared with
    /// every other part of the plan that reads `key`, and `resolve` runs
    /// again from a fresh read when the transaction finds that `key`
    /// changed (write under the ETag read to have that checked).
    pub fn after_read<F>(
        table: &TableClient<DynamicEntity>,
        key: impl Into<EntityKey>,
        resolve: F,
    ) -> Result<Self>
    where
        F: Fn(Option<&DynamicEntity>) -> Result<Plan<'static>> + Send + Sync + 'a,
    {
        let key = key.into();
        Plan::on(
            table,
            &key.clone(),
            Part::Read {
                key,
                resolve: Box::new(resolve),
            },
        )
    }

    /// Writes worked out from the entities of `partition_key` whose RowKey
    /// starts with `prefix`, read when the plan is sent (one range query,
    /// of the `select`ed properties only when given), in RowKey order.
    pub fn after_range<F>(
        table: &TableClient<DynamicEntity>,
        partition_key: &str,
        prefix: &str,
        select: Option<&[&str]>,
        resolve: F,
    ) -> Result<Self>
    where
        F: Fn(&[DynamicEntity]) -> Result<Plan<'static>> + Send + Sync + 'a,
    {
        Plan::on(
            table,
            &EntityKey::new(partition_key, prefix),
            Part::Range {
                prefix: prefix.to_string(),
                select: select.map(|s| s.iter().map(|p| p.to_string()).collect()),
                resolve: Box::new(resolve),
            },
        )
    }

    /// Adds one write of `table` at the end of the plan (refused, and the
    /// plan left as it was, for another table, account or partition).
    pub fn push<T>(&mut self, table: &TableClient<T>, op: TransactionOp) -> Result<&mut Self> {
        let next = Plan::op(table, op)?;
        self.check(&next)?;
        let plan = std::mem::take(self);
        *self = plan.and(next)?;
        Ok(self)
    }

    /// Gives `entity` the ETag written for `key` when the plan succeeds.
    pub(crate) fn with_sink(mut self, key: EntityKey, sink: Sink<'a>) -> Self {
        self.sinks.push((key, sink));
        self
    }

    /// This plan, then `other`'s writes, in one plan. Refused before any
    /// request when `other` writes another table, account or partition.
    pub fn and(mut self, other: Plan<'a>) -> Result<Self> {
        self.check(&other)?;
        if self.target.is_none() {
            self.target = other.target;
        }
        self.parts.extend(other.parts);
        self.sinks.extend(other.sinks);
        if self.before_send.is_none() {
            self.before_send = other.before_send;
        }
        Ok(self)
    }

    fn check(&self, other: &Plan<'_>) -> Result<()> {
        let (Some(mine), Some(theirs)) = (&self.target, &other.target) else {
            return Ok(());
        };
        if mine.table != theirs.table {
            return Err(refuse(format!(
                "this write is for {}, the plan's for {}: a transaction spans one table",
                theirs.table, mine.table
            )));
        }
        if mine.partition_key != theirs.partition_key {
            return Err(refuse(format!(
                "PartitionKey {:?} differs from the plan's {:?} (in {}): a transaction spans one partition",
                theirs.partition_key, mine.partition_key, mine.table
            )));
        }
        Ok(())
    }

    /// The table the plan writes (`None` for an empty plan).
    pub fn table(&self) -> Option<&TableRef> {
        self.target.as_ref().map(|t| &t.table)
    }

    /// The partition the plan writes (`None` for an empty plan).
    pub fn partition_key(&self) -> Option<&str> {
        self.target.as_ref().map(|t| t.partition_key.as_str())
    }

    /// How many writes the plan holds, as given (before they are folded
    /// into one operation per entity).
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether the plan holds no write.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Runs `hook` with the attempt number (1 first) after the plan's reads
    /// and before its transaction, and waits for it: for tracing retries,
    /// and in tests the place where another writer is let in (the attempt
    /// then fails its condition and the plan is worked out again, up to
    /// [`MAX_ATTEMPTS`]). An error it returns fails the plan there, before
    /// the transaction is sent. The hooks of tablekit-patterns' `step_hook`s
    /// are this one.
    pub fn before_send<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(usize) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        self.before_send = Some(Arc::new(move |attempt| Box::pin(hook(attempt))));
        self
    }

    /// The operations the plan sends when the store is as `reads` says:
    /// `None` while a read it needs is missing (then in `missing`).
    fn flatten(
        &self,
        parts: &[Part<'a>],
        reads: &Reads,
        missing: &mut Reads,
        steps: &mut Vec<Step<'a>>,
        depth: usize,
    ) -> Result<()> {
        let target = self
            .target
            .as_ref()
            .expect("a plan with parts has a target");
        for part in parts {
            match part {
                Part::Op(op) => steps.push(Step::Op(op.clone())),
                Part::Add {
                    key,
                    property,
                    delta,
                    created,
                } => match reads.points.get(key) {
                    Some(read) => steps.push(Step::Add {
                        key: key.clone(),
                        property: property.clone(),
                        delta: *delta,
                        created: created.clone(),
                        read: read.clone(),
                    }),
                    None => {
                        missing.points.insert(key.clone(), None);
                    }
                },
                Part::Modify { key, change } => match reads.points.get(key) {
                    Some(read) => steps.push(Step::Modify {
                        key: key.clone(),
                        f: change.clone(),
                        read: read.clone(),
                    }),
                    None => {
                        missing.points.insert(key.clone(), None);
                    }
                },
                Part::Read { key, resolve } => match reads.points.get(key) {
                    Some(read) => {
                        let sub = resolve(read.as_ref())?;
                        self.flatten_sub(target, sub, reads, missing, steps, depth)?;
                    }
                    None => {
                        missing.points.insert(key.clone(), None);
                    }
                },
                Part::Range {
                    prefix,
                    select,
                    resolve,
                } => match reads.ranges.get(&(prefix.clone(), select.clone())) {
                    Some(rows) => {
                        let sub = resolve(rows)?;
                        self.flatten_sub(target, sub, reads, missing, steps, depth)?;
                    }
                    None => {
                        missing
                            .ranges
                            .insert((prefix.clone(), select.clone()), Vec::new());
                    }
                },
            }
        }
        Ok(())
    }

    fn flatten_sub(
        &self,
        target: &Target,
        sub: Plan<'static>,
        reads: &Reads,
        missing: &mut Reads,
        steps: &mut Vec<Step<'a>>,
        depth: usize,
    ) -> Result<()> {
        if sub.target.is_none() {
            return Ok(());
        }
        let me = Plan {
            target: Some(target.clone()),
            parts: Vec::new(),
            sinks: Vec::new(),
            before_send: None,
        };
        me.check(&sub)?;
        if depth >= MAX_READ_DEPTH {
            return Err(refuse(format!(
                "writes worked out from reads nest deeper than {MAX_READ_DEPTH}"
            )));
        }
        self.flatten(&sub.parts, reads, missing, steps, depth + 1)
    }

    /// The plan's operations, worked out from fresh reads (each entity and
    /// range read once), and what was read.
    async fn resolve(&self, target: &Target) -> Result<(Vec<TransactionOp>, Reads)> {
        let mut reads = Reads::default();
        for _ in 0..=MAX_READ_DEPTH + 1 {
            let mut missing = Reads::default();
            let mut steps = Vec::new();
            self.flatten(&self.parts, &reads, &mut missing, &mut steps, 0)?;
            if missing.is_empty() {
                let ops = fold::fold(steps).map_err(|r| match r {
                    Refusal::Compose(why) => refuse(why),
                    Refusal::Decode(d) => Error::from(d),
                    Refusal::Modify(e) => e,
                })?;
                return Ok((ops, reads));
            }
            reads.fetch(target, missing).await?;
        }
        Err(refuse(format!(
            "writes worked out from reads nest deeper than {MAX_READ_DEPTH}"
        )))
    }

    /// Reads what the plan needs, folds its writes and sends them as one
    /// transaction; again from fresh reads when an entity it read changed
    /// meanwhile (see the [module docs](self)). An empty plan, or one whose
    /// reads leave nothing to write, sends nothing.
    pub async fn send(mut self) -> Result<Applied> {
        let Some(target) = self.target.clone() else {
            return Ok(Applied::default());
        };
        let mut attempt = 1;
        loop {
            let (ops, reads) = self.resolve(&target).await?;
            if ops.is_empty() {
                return Ok(Applied::default());
            }
            if let Some(hook) = &self.before_send {
                hook(attempt).await?;
            }
            let keys: Vec<EntityKey> = ops.iter().map(TransactionOp::key).collect();
            let stale_on: Vec<Option<bool>> = keys
                .iter()
                .map(|k| reads.points.get(k).map(Option::is_some))
                .collect();
            let mut tx = target.client.transaction();
            let written: Vec<Option<DynamicEntity>> = ops
                .iter()
                .map(|op| match op {
                    TransactionOp::Insert(e)
                    | TransactionOp::Upsert(e, _)
                    | TransactionOp::Update(e, ..) => Some(e.clone()),
                    TransactionOp::Delete(..) => None,
                })
                .collect();
            tx.extend(ops)?;
            match tx.send().await {
                Ok(result) => {
                    let etags = result.etags().to_vec();
                    for (key, sink) in &mut self.sinks {
                        if let Some(Some(etag)) =
                            keys.iter().position(|k| k == key).map(|i| &etags[i])
                        {
                            sink(etag);
                        }
                    }
                    return Ok(Applied {
                        keys,
                        etags,
                        written,
                        confirmed_by_read_back: result.confirmed_by_read_back(),
                    });
                }
                Err(e) if attempt < MAX_ATTEMPTS && is_stale(&e, &stale_on) => {
                    tokio::time::sleep(pause(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether `e` refuses an operation on an entity the plan read, for a
/// reason that means the read is stale: changed (412), created (409) where
/// none was read, deleted (404) where one was.
fn is_stale(e: &Error, read: &[Option<bool>]) -> bool {
    let Some(Some(found)) = e.batch_index().and_then(|i| read.get(i)) else {
        return false;
    };
    e.is_precondition_failed() || (e.is_conflict() && !found) || (e.is_not_found() && *found)
}

/// A random pause before attempt `attempt + 1`: up to 2 ms doubling to 64 ms.
fn pause(attempt: usize) -> Duration {
    let ceiling = 2u64 << attempt.min(5);
    Duration::from_micros(fastrand::u64(0..=ceiling * 1000))
}

/// What one attempt of a plan read.
#[derive(Default)]
struct Reads {
    points: HashMap<EntityKey, Option<DynamicEntity>>,
    ranges: HashMap<(String, Option<Vec<String>>), Vec<DynamicEntity>>,
}

impl Reads {
    fn is_empty(&self) -> bool {
        self.points.is_empty() && self.ranges.is_empty()
    }

    async fn fetch(&mut self, target: &Target, missing: Reads) -> Result<()> {
        let client = &target.client;
        let points = futures::future::try_join_all(
            missing
                .points
                .into_keys()
                .map(|key| async move { Ok::<_, Error>((key.clone(), client.get(key).await?)) }),
        );
        let pk = target.partition_key.as_str();
        let ranges = futures::future::try_join_all(missing.ranges.into_keys().map(
            |(prefix, select)| async move {
                let row_key = Column::<DynamicEntity, String>::new("RowKey");
                let mut f = Column::<DynamicEntity, String>::new("PartitionKey").eq(pk);
                if !prefix.is_empty() {
                    f = f & row_key.starts_with(prefix.as_str());
                }
                let mut query = client.query().filter_by(f);
                if let Some(s) = &select {
                    query = query.select(s.iter().map(String::as_str));
                }
                let rows = query.fetch_all().await?;
                Ok::<_, Error>(((prefix, select), rows))
            },
        ));
        let (points, ranges) = futures::future::try_join(points, ranges).await?;
        for (key, entity) in points {
            if let Some(e) = &entity {
                if e.etag.is_none() {
                    return Err(crate::error::DecodeError::new(format!(
                        "the service returned {key} without an ETag"
                    ))
                    .into());
                }
            }
            self.points.insert(key, entity);
        }
        for (range, rows) in ranges {
            for row in &rows {
                self.points
                    .entry(EntityKey::new(&row.partition_key, &row.row_key))
                    .or_insert_with(|| Some(row.clone()));
            }
            self.ranges.insert(range, rows);
        }
        Ok(())
    }
}

impl<'a> IntoFuture for Plan<'a> {
    type Output = Result<Applied>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Applied>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// What a sent [`Plan`] wrote: one operation per entity, with its new ETag.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    keys: Vec<EntityKey>,
    etags: Vec<Option<ETag>>,
    written: Vec<Option<DynamicEntity>>,
    confirmed_by_read_back: bool,
}

impl Applied {
    /// The new ETag of the entity `key` (`None` for a delete, or an entity
    /// the plan did not write).
    pub fn etag(&self, key: &EntityKey) -> Option<&ETag> {
        let at = self.keys.iter().position(|k| k == key)?;
        self.etags.get(at)?.as_ref()
    }

    /// The properties sent for the entity `key` (`None` for a delete, or an
    /// entity the plan did not write): where a count was added to, the
    /// count written.
    pub fn written(&self, key: &EntityKey) -> Option<&DynamicEntity> {
        let at = self.keys.iter().position(|k| k == key)?;
        self.written.get(at)?.as_ref()
    }

    /// The entities written, in the transaction's order.
    pub fn keys(&self) -> &[EntityKey] {
        &self.keys
    }

    /// How many operations were sent.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether nothing was sent.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether the transaction's answer was lost and its success confirmed
    /// by reading every entity back.
    pub fn confirmed_by_read_back(&self) -> bool {
        self.confirmed_by_read_back
    }
}

/// What a planned write takes: `&entity`, or `&mut entity` to have the
/// entity's ETag (and Timestamp) set when the plan succeeds. A plan made
/// from `&entity` borrows nothing (the entity is encoded when the plan is
/// made); one made from `&mut entity` holds the borrow until it is sent.
pub trait PlanTarget<'a, T: TableEntity>: Send {
    /// The entity to write.
    fn entity(&self) -> &T;
    /// What gives the entity its new ETag, if anything.
    fn into_sink(self) -> Option<EtagSink<'a>>;
}

impl<'a, T: TableEntity> PlanTarget<'a, T> for &T {
    fn entity(&self) -> &T {
        self
    }
    fn into_sink(self) -> Option<EtagSink<'a>> {
        None
    }
}

impl<'a, T: TableEntity> PlanTarget<'a, T> for &'a mut T {
    fn entity(&self) -> &T {
        self
    }
    fn into_sink(self) -> Option<EtagSink<'a>> {
        Some(Box::new(move |etag: &ETag| {
            crate::backend::Written::from_etag(etag.clone()).apply_to(&mut *self)
        }))
    }
}

impl<T: TableEntity> TableClient<T> {
    fn plan_write<'a>(
        &self,
        target: impl PlanTarget<'a, T>,
        op: impl FnOnce(&T) -> Result<TransactionOp>,
    ) -> Result<Plan<'a>> {
        let op = op(target.entity())?;
        let key = op.key();
        let plan = Plan::op(self, op)?;
        Ok(match target.into_sink() {
            Some(sink) => plan.with_sink(key, sink),
            None => plan,
        })
    }

    /// The insert of `entity` as a [`Plan`], to await alone or join with
    /// other writes of its partition. Passed by `&mut`, the entity gets its
    /// new ETag when the plan succeeds.
    pub fn plan_insert<'a>(&self, entity: impl PlanTarget<'a, T>) -> Result<Plan<'a>> {
        self.plan_write(entity, TransactionOp::insert)
    }

    /// The upsert of `entity` (insert, or merge into / replace the stored
    /// one) as a [`Plan`].
    pub fn plan_upsert<'a>(
        &self,
        entity: impl PlanTarget<'a, T>,
        mode: UpdateMode,
    ) -> Result<Plan<'a>> {
        self.plan_write(entity, |e| TransactionOp::upsert(e, mode))
    }

    /// The update of `entity` under `if_match` as a [`Plan`].
    pub fn plan_update<'a>(
        &self,
        entity: impl PlanTarget<'a, T>,
        mode: UpdateMode,
        if_match: impl Into<IfMatch>,
    ) -> Result<Plan<'a>> {
        let if_match = if_match.into();
        self.plan_write(entity, |e| TransactionOp::update(e, mode, if_match))
    }

    /// The delete of the entity `key` under `if_match` as a [`Plan`].
    pub fn plan_delete(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<Plan<'static>> {
        Plan::op(self, TransactionOp::delete(key, if_match)?)
    }
}

#[cfg(test)]
mod tests;
