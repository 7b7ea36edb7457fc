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
    error::DecodeError, filter::PropertyName, table::TransactionOp, DynamicEntity, EdmValue,
    EntityKey, IfMatch, Result, TableClient, TableEntity, UpdateMode,
};

use crate::error::refused;
use crate::hook::BeforeWrite;
use crate::plan::Plan;

/// How many times a write starts again after a concurrent change of the target.
pub const MAX_ATTEMPTS: usize = tablekit::table::plan::MAX_ATTEMPTS;

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

impl<S: TableEntity> Denormalized<S> {
    /// Sources of `table` whose details `copy` gives: `copy(source)` returns
    /// the source's id (stored in the target's `holder_property`, the
    /// `ManagerId`) and the properties copied into the target (the
    /// `ManagerEmail`, ...). The target of a partition is its entity with
    /// RowKey `target_row_key`.
    pub fn new(
        table: TableClient<S>,
        target_row_key: impl Into<String>,
        holder_property: impl PropertyName,
        copy: impl Fn(&S) -> (String, Vec<(String, EdmValue)>) + Send + Sync + 'static,
    ) -> Self {
        Denormalized {
            raw: table.with_type::<DynamicEntity>(),
            table,
            target_row_key: target_row_key.into(),
            holder_property: holder_property.property_name().to_string(),
            copy: Arc::new(copy),
            before_write: BeforeWrite::default(),
        }
    }

    /// Runs `hook` with the attempt number (1 first) after each write's read
    /// of the target and before its transaction: for tracing retries, and in
    /// tests the exact place to let another client change the target.
    #[doc(hidden)]
    pub fn step_hook<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(usize) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<()>> + Send + 'static,
    {
        self.before_write = BeforeWrite::new(hook);
        self
    }

    fn target_key(&self, partition_key: &str) -> EntityKey {
        EntityKey::new(partition_key, self.target_row_key.as_str())
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

    /// `change` merged into the target as read (under the ETag read), or,
    /// when there is none, merged into whatever is there when the
    /// transaction runs (an upsert): the holder and the copy are right on a
    /// target created meanwhile too, and a count planned with them (which
    /// needs the target still absent) folds with it into one insert.
    fn target_write(
        target: Option<&DynamicEntity>,
        change: &DynamicEntity,
    ) -> Result<TransactionOp> {
        match target.map(|t| t.etag.clone()) {
            Some(Some(etag)) => {
                TransactionOp::update(change, UpdateMode::Merge, IfMatch::ETag(etag))
            }
            Some(None) => Err(DecodeError::new("the target was read without an ETag").into()),
            None => TransactionOp::upsert(change, UpdateMode::Merge),
        }
    }

    /// The holder the target names.
    fn holder_of(&self, target: &DynamicEntity) -> Option<String> {
        match target.get(&self.holder_property) {
            Some(EdmValue::String(s)) => Some(s.clone()),
            _ => None,
        }
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

    /// The refresh of the copy after a write of `source`, planned: a merge
    /// of the copied properties under the target's ETag when the target,
    /// as read when the plan is sent, names `source` as its holder; nothing
    /// otherwise. Join it with the write of `source` itself.
    pub fn plan_refresh(&self, source: &S) -> Result<Plan<'_>> {
        self.check(source)?;
        let (id, change) = self.copy_of(source)?;
        let key = self.target_key(&change.partition_key);
        Plan::after_read(&self.raw, key, move |target| match target {
            Some(t) if self.holder_of(t).as_deref() == Some(id.as_str()) => {
                Plan::op(&self.raw, Self::target_write(Some(t), &change)?)
            }
            _ => Ok(Plan::new()),
        })
    }

    /// `source` made the holder of its partition's target, planned: the
    /// holder property and the copied properties merged into the target
    /// under the ETag read when the plan is sent, or a new target inserted.
    ///
    /// The copy must be of `source` as stored. Pass `source` as read, with
    /// its ETag: the plan then also holds an empty merge of `source` under
    /// that ETag, so a source changed since the read refuses the
    /// transaction (a refusal returned to you: the source is yours to read
    /// again). A `source` without an ETag is taken as written by the same
    /// transaction (an employee inserted as the new manager).
    pub fn plan_assign(&self, source: &S) -> Result<Plan<'_>> {
        self.check(source)?;
        let (id, mut change) = self.copy_of(source)?;
        change.set(self.holder_property.as_str(), id);
        let key = self.target_key(&change.partition_key);
        let mut plan = Plan::after_read(&self.raw, key, move |target| {
            Plan::op(&self.raw, Self::target_write(target, &change)?)
        })?;
        if let Some(etag) = source.etag() {
            let key = source.key();
            let unchanged = DynamicEntity::new(key.partition_key, key.row_key);
            plan = plan.and(Plan::op(
                &self.raw,
                TransactionOp::update(&unchanged, UpdateMode::Merge, IfMatch::ETag(etag.clone()))?,
            )?)?;
        }
        Ok(plan)
    }

    /// Replaces `source` under `if_match` and, when the target of its
    /// partition names it, merges the new copy into the target, in one
    /// transaction; again from a fresh read of the target when another
    /// writer changed the target meanwhile. Sets `source`'s ETag.
    pub async fn update(&self, source: &mut S, if_match: impl Into<IfMatch>) -> Result<()> {
        crate::trace::traced(
            "Denormalized",
            "update",
            Some(self.table.name()),
            async move {
                let refresh = self.plan_refresh(source)?;
                let plan = self
                    .table
                    .plan_update(&mut *source, UpdateMode::Replace, if_match)?
                    .and(refresh)?;
                self.before_write.attach(plan).send().await.map(drop)
            },
        )
        .await
    }

    /// Makes `source` the holder of its partition's target (the
    /// department's new manager): one transaction merging the holder and the
    /// copy into the target, again from a fresh read when another writer
    /// changed the target meanwhile. With an ETag in `source` (as read), the
    /// transaction also requires `source` unchanged (see
    /// [`plan_assign`](Self::plan_assign)) and sets `source`'s new ETag.
    pub async fn assign(&self, source: &mut S) -> Result<()> {
        crate::trace::traced(
            "Denormalized",
            "assign",
            Some(self.table.name()),
            async move {
                let key = source.key();
                let plan = self.plan_assign(source)?;
                let done = self.before_write.attach(plan).send().await?;
                if let Some(etag) = done.etag(&key) {
                    source.set_etag(etag.clone());
                }
                Ok(())
            },
        )
        .await
    }
}
