//! The denormalisation pattern (design guide §3.5): a copy of one entity's
//! details kept in another entity of its partition, so that one point read
//! returns both. The guide's case: the department entity (`Sales` /
//! `Department`) names its manager (`ManagerId`) and holds a copy of the
//! manager's details (`ManagerFirstName`, `ManagerLastName`, `ManagerEmail`);
//! the manager is an employee entity of the same partition.
//!
//! Both entities are in one partition, so every write of the manager's
//! employee entity changes the department entity **in the same entity group
//! transaction**: a reader never sees the manager changed and the copy not
//! (or the other way round), and a write that fails changes neither.
//!
//! * [`Denormalized::update`] replaces an employee and, when the target names
//!   that employee, merges the new copy into it, under the target's ETag.
//! * [`Denormalized::assign`] makes an employee the one the target copies
//!   (the department gets a new manager): the holder property and the copy,
//!   merged into the target (or a new target inserted), on the condition
//!   that the employee is still as read (an empty merge under its ETag in
//!   the same transaction), so the copy is never of an older version.
//! * The `plan_*` forms return the operations instead of sending them, to
//!   join other writes of the partition in one transaction ([`crate::plan`]):
//!   inserting a new employee with its index copies, the department's count
//!   and the department's new manager is one transaction.
//!
//! Only the holder property and the copied properties of the target are
//! written (merges), so the target's other properties (its name, a count kept
//! by [`CountedPartition`](crate::summary::CountedPartition)) stay as they are.
//!
//! | operation | requests |
//! |---|---|
//! | [`update`](Denormalized::update), [`assign`](Denormalized::assign) | 1 point read (the target) + 1 transaction of 2 (or 1), again from the read when the target changed meanwhile |
//! | [`plan_refresh`](Denormalized::plan_refresh), [`plan_assign`](Denormalized::plan_assign) | 1 point read (the target), nothing sent |
//!
//! ```
//! use tablekit::{EdmValue, ETag, IfMatch, TableEntity, TableServiceClient};
//! use tablekit_patterns::denormalize::Denormalized;
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     last_name: String,
//!     email: String,
//!     #[tablekit(etag)]
//!     etag: Option<ETag>,
//! }
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "Department")]
//! struct Department {
//!     department: String,
//!     manager_id: Option<String>,
//!     manager_last_name: Option<String>,
//!     manager_email: Option<String>,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded();
//! let employees = service.table::<Employee>("Employees")?;
//! employees.create_table().await?;
//! let manager = Denormalized::new(employees.clone(), "Department", "ManagerId", |e: &Employee| {
//!     (format!("{:06}", e.employee_id), vec![
//!         ("ManagerLastName".to_string(), EdmValue::from(e.last_name.clone())),
//!         ("ManagerEmail".to_string(), EdmValue::from(e.email.clone())),
//!     ])
//! });
//!
//! let mut jones = Employee { department: "Sales".into(), employee_id: 223, last_name: "Jones".into(), email: "jonesj@contoso.com".into(), etag: None };
//! employees.insert(&jones).await?;
//! manager.assign(&mut jones).await?; // Sales/Department: ManagerId 000223 and Jones's details
//!
//! let current = employees.get(jones.key()).await?.unwrap();
//! jones.email = "jj@contoso.com".into();
//! manager.update(&mut jones, current.etag.unwrap()).await?; // the employee and the copy, one transaction
//!
//! let sales = service.table::<Department>("Employees")?.get(("Sales", "Department")).await?.unwrap();
//! assert_eq!(sales.manager_email.as_deref(), Some("jj@contoso.com"));
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::Arc;

use tablekit::{
    table::TransactionOp, DynamicEntity, EdmValue, EntityKey, Error, IfMatch, Result, TableClient,
    TableEntity, UpdateMode,
};

use crate::error::refused;
use crate::hook::BeforeWrite;
use crate::plan::{Plan, Stale};

/// How many times a write starts again after a concurrent change of the target.
pub const MAX_ATTEMPTS: usize = 16;

type CopyFn<S> = dyn Fn(&S) -> (String, Vec<(String, EdmValue)>) + Send + Sync;

/// Details of source entities `S` (employees) copied into the target entity
/// of their partition (the department); see the [module docs](self). Cheap
/// to clone.
pub struct Denormalized<S> {
    table: TableClient<S>,
    raw: TableClient<DynamicEntity>,
    target_row_key: String,
    holder_property: String,
    copy: Arc<CopyFn<S>>,
    before_write: BeforeWrite,
}

impl<S> Clone for Denormalized<S> {
    fn clone(&self) -> Self {
        Denormalized {
            table: self.table.clone(),
            raw: self.raw.clone(),
            target_row_key: self.target_row_key.clone(),
            holder_property: self.holder_property.clone(),
            copy: self.copy.clone(),
            before_write: self.before_write.clone(),
        }
    }
}

impl<S> fmt::Debug for Denormalized<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Denormalized")
            .field("table", &self.table.name())
            .field("target_row_key", &self.target_row_key)
            .field("holder_property", &self.holder_property)
            .finish()
    }
}

/// The target as read: its holder and ETag.
struct Target {
    holder: Option<String>,
    etag: IfMatch,
}

impl<S: TableEntity> Denormalized<S> {
    /// Sources of `table` whose details `copy` gives: `copy(source)` returns
    /// the source's id (stored in the target's `holder_property`, the
    /// `ManagerId`) and the properties copied into the target (the
    /// `ManagerEmail`, ...). The target of a partition is its entity with
    /// RowKey `target_row_key`.
    pub fn new(
        table: TableClient<S>,
        target_row_key: impl Into<String>,
        holder_property: impl Into<String>,
        copy: impl Fn(&S) -> (String, Vec<(String, EdmValue)>) + Send + Sync + 'static,
    ) -> Self {
        Denormalized {
            raw: table.with_type::<DynamicEntity>(),
            table,
            target_row_key: target_row_key.into(),
            holder_property: holder_property.into(),
            copy: Arc::new(copy),
            before_write: BeforeWrite::default(),
        }
    }

    /// Runs `hook` with the attempt number (1 first) after each write's read
    /// of the target and before its transaction: for tracing retries, and in
    /// tests the exact place to let another client change the target.
    pub fn before_write(mut self, hook: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.before_write = BeforeWrite::new(hook);
        self
    }

    fn target_key(&self, partition_key: &str) -> EntityKey {
        EntityKey::new(partition_key, self.target_row_key.as_str())
    }

    async fn read_target(&self, partition_key: &str) -> Result<Option<Target>> {
        let Some(target) = self.raw.get(self.target_key(partition_key)).await? else {
            return Ok(None);
        };
        let holder = match target.get(&self.holder_property) {
            Some(EdmValue::String(s)) => Some(s.clone()),
            _ => None,
        };
        Ok(Some(Target {
            holder,
            etag: target.etag.map_or(IfMatch::Any, IfMatch::ETag),
        }))
    }

    /// `source`'s id and its copy, as the target's change (keys and copied
    /// properties).
    fn copy_of(&self, source: &S) -> Result<(String, DynamicEntity)> {
        let (id, properties) = (self.copy)(source);
        let mut change = DynamicEntity::new(
            source.partition_key().as_ref(),
            self.target_row_key.as_str(),
        );
        for (name, value) in properties {
            if name == self.holder_property {
                return Err(refused(
                    "denormalize",
                    format!("the copy sets {name:?}, the property that names the holder"),
                ));
            }
            change.set(name, value);
        }
        Ok((id, change))
    }

    /// `change` merged into the target as read, or inserted when absent.
    fn target_plan(&self, target: Option<&Target>, change: &DynamicEntity) -> Result<Plan> {
        let mut plan = Plan::new();
        match target {
            Some(t) => plan.push_planned(
                TransactionOp::update(change, UpdateMode::Merge, t.etag.clone())?,
                Stale::DELETED,
            )?,
            None => plan.push_planned(TransactionOp::insert(change)?, Stale::CREATED)?,
        }
        Ok(plan)
    }

    fn check(&self, source: &S) -> Result<()> {
        if source.row_key() == self.target_row_key {
            return Err(refused(
                "denormalize",
                format!(
                    "RowKey {:?} is the target entity's, not a source's",
                    self.target_row_key
                ),
            ));
        }
        Ok(())
    }

    /// The refresh of the copy after a write of `source`, planned from one
    /// read of the target: a merge of the copied properties under the
    /// target's ETag when the target names `source` as its holder, nothing
    /// (an empty plan) otherwise. Join it with the write of `source` itself.
    pub async fn plan_refresh(&self, source: &S) -> Result<Plan> {
        self.check(source)?;
        let (id, change) = self.copy_of(source)?;
        match self.read_target(&change.partition_key).await? {
            Some(t) if t.holder.as_deref() == Some(id.as_str()) => {
                self.target_plan(Some(&t), &change)
            }
            _ => Ok(Plan::new()),
        }
    }

    /// `source` made the holder of its partition's target, planned from one
    /// read of the target: the holder property and the copied properties
    /// merged into the target under its ETag, or a new target inserted.
    ///
    /// The copy must be of `source` as stored. Pass `source` as read, with
    /// its ETag: the plan then also holds an empty merge of `source` under
    /// that ETag, so a source changed since the read refuses the
    /// transaction (and [`transact`](crate::plan::transact) plans again).
    /// A `source` without an ETag is taken as written by the same
    /// transaction (an employee inserted as the new manager).
    pub async fn plan_assign(&self, source: &S) -> Result<Plan> {
        self.check(source)?;
        let (id, mut change) = self.copy_of(source)?;
        change.set(self.holder_property.as_str(), id);
        let target = self.read_target(&change.partition_key).await?;
        let mut plan = self.target_plan(target.as_ref(), &change)?;
        if let Some(etag) = source.etag() {
            let key = source.key();
            let unchanged = DynamicEntity::new(key.partition_key, key.row_key);
            plan.push_planned(
                TransactionOp::update(&unchanged, UpdateMode::Merge, IfMatch::ETag(etag.clone()))?,
                Stale::DELETED,
            )?;
        }
        Ok(plan)
    }

    /// Replaces `source` under `if_match` and, when the target of its
    /// partition names it, merges the new copy into the target, in one
    /// transaction; again from a fresh read of the target when another
    /// writer changed the target meanwhile. Sets `source`'s ETag.
    pub async fn update(&self, source: &mut S, if_match: impl Into<IfMatch>) -> Result<()> {
        let if_match = if_match.into();
        let key = source.key();
        let mut attempt = 1;
        loop {
            let write = TransactionOp::update(&*source, UpdateMode::Replace, if_match.clone())?;
            let plan = Plan::of(write).and(self.plan_refresh(source).await?)?;
            self.before_write.call(attempt);
            match plan.send(&self.raw).await {
                Ok(done) => {
                    if let Some(etag) = done.etag(&key) {
                        source.set_etag(etag.clone());
                    }
                    return Ok(());
                }
                Err(e) if target_race(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Makes `source` the holder of its partition's target (the
    /// department's new manager): one transaction merging the holder and the
    /// copy into the target, again from a fresh read when another writer
    /// changed the target meanwhile. With an ETag in `source` (as read), the
    /// transaction also requires `source` unchanged (see
    /// [`plan_assign`](Self::plan_assign)) and sets `source`'s new ETag.
    pub async fn assign(&self, source: &mut S) -> Result<()> {
        let key = source.key();
        let mut attempt = 1;
        loop {
            let plan = self.plan_assign(source).await?;
            self.before_write.call(attempt);
            match plan.send(&self.raw).await {
                Ok(done) => {
                    if let Some(etag) = done.etag(&key) {
                        source.set_etag(etag.clone());
                    }
                    return Ok(());
                }
                // The target changed (operation 0); a change of the source
                // itself (operation 1) is the caller's to resolve.
                Err(e)
                    if e.batch_index() == Some(0)
                        && (e.is_precondition_failed() || e.is_conflict() || e.is_not_found())
                        && attempt < MAX_ATTEMPTS =>
                {
                    attempt += 1
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The transaction failed on the target (operation 1): another writer
/// changed, created or deleted it since the read.
fn target_race(e: &Error) -> bool {
    e.batch_index() == Some(1)
        && (e.is_precondition_failed() || e.is_conflict() || e.is_not_found())
}
