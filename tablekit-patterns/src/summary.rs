//! Denormalised counts in a heterogeneous partition (design guide §3.5 and
//! §4.8): a summary entity under a fixed RowKey (the department entity,
//! `Department`, with `EmployeeCount`) lives in the partition of the entities
//! it counts, and every insert or delete changes the entity and the count in
//! one entity group transaction under the summary's ETag, so the count is
//! never off by a write that failed or raced.
//!
//! The count changes by a merge that sends only the count property, so the
//! other denormalised properties of the summary (the department's name, its
//! manager's details) are left as they are. The first entity of a partition
//! inserts the summary; a summary that exists without the count property is
//! an error ("Invalid entity, EmployeeCount property not found.", the guide's
//! own message), never silently reset.
//!
//! | operation | requests |
//! |---|---|
//! | [`insert`](CountedPartition::insert), [`delete`](CountedPartition::delete) | 1 point read (summary) + 1 transaction of 2, again on a concurrent change of the summary |
//! | [`count`](CountedPartition::count) | 1 point read |
//! | [`read_partition`](CountedPartition::read_partition) | 1 partition query (1 request per 1,000 entities) |
//!
//! ```
//! use tablekit::{TableEntity, TableServiceClient};
//! use tablekit_patterns::summary::CountedPartition;
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:05}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     first_name: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded();
//! # service.create_table("Employees").await?;
//! let staff = CountedPartition::new(service.table::<Employee>("Employees")?, "Department", "EmployeeCount");
//! let mut don = Employee { department: "Marketing".into(), employee_id: 1, first_name: "Don".into() };
//! let count = staff.insert(&mut don).await?; // 00001 and Department.EmployeeCount += 1
//! assert_eq!(count, 1);
//! assert_eq!(staff.count("Marketing").await?, 1);
//! # Ok(()) }
//! ```
//!
//! # The department with its employees, typed
//!
//! The guide's heterogeneous partition (§4.8) read in one query: an enum
//! derived with [`TableEntity`] tells the kinds apart by their `EntityType`
//! property. Counting the enum itself stores `EntityType` with every
//! employee, and [`with_summary_property`](CountedPartition::with_summary_property)
//! gives a summary the pattern creates its own.
//!
//! ```
//! use tablekit::{filter::EntityColumns, TableEntity, TableServiceClient};
//! use tablekit_patterns::summary::CountedPartition;
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:05}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     first_name: String,
//! }
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "Department")]
//! struct Department {
//!     department: String,
//!     employee_count: i32,
//! }
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! enum Staff {
//!     Employee(Employee),
//!     Department(Department),
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded();
//! # service.create_table("Employees").await?;
//! // The count's name from the summary type: checked by the compiler.
//! let count = Department::columns().employee_count;
//! let staff = CountedPartition::new(service.table::<Staff>("Employees")?, "Department", count)
//!     .with_summary_property("EntityType", "Department");
//! let don = Employee { department: "Marketing".into(), employee_id: 1, first_name: "Don".into() };
//! staff.insert(&mut Staff::Employee(don.clone())).await?;
//!
//! let partition: Vec<Staff> = staff.read_partition("Marketing").await?;
//! assert_eq!(
//!     partition,
//!     [
//!         Staff::Employee(don),
//!         Staff::Department(Department { department: "Marketing".into(), employee_count: 1 }),
//!     ]
//! );
//! # Ok(()) }
//! ```

use std::fmt;

use tablekit::{
    error::DecodeError, filter::PropertyName, table::PlanTarget, DynamicEntity, EdmValue,
    EntityKey, Error, IfMatch, Result, TableClient, TableEntity,
};

use crate::error::refused;
use crate::hook::BeforeWrite;
use crate::plan::Plan;
use crate::range::KeyRange;

/// How many times a write starts again after a concurrent change of the summary.
pub const MAX_ATTEMPTS: usize = tablekit::table::plan::MAX_ATTEMPTS;

/// Entities of type `T` counted in a summary entity of their partition; see
/// the [module docs](self). Cheap to clone.
pub struct CountedPartition<T> {
    table: TableClient<T>,
    raw: TableClient<DynamicEntity>,
    summary_row_key: String,
    count_property: String,
    new_summary: Vec<(String, EdmValue)>,
    before_write: BeforeWrite,
}

impl<T> Clone for CountedPartition<T> {
    fn clone(&self) -> Self {
        CountedPartition {
            table: self.table.clone(),
            raw: self.raw.clone(),
            summary_row_key: self.summary_row_key.clone(),
            count_property: self.count_property.clone(),
            new_summary: self.new_summary.clone(),
            before_write: self.before_write.clone(),
        }
    }
}

impl<T> fmt::Debug for CountedPartition<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountedPartition")
            .field("table", &self.table.name())
            .field("summary_row_key", &self.summary_row_key)
            .field("count_property", &self.count_property)
            .finish()
    }
}

impl<T: TableEntity> CountedPartition<T> {
    /// Entities of `table` counted in the Int32 property `count_property` of
    /// the entity with RowKey `summary_row_key` in each partition. The
    /// property is a name or, better, the summary type's column handle
    /// (`Department::columns().employee_count`), which the compiler checks.
    pub fn new(
        table: TableClient<T>,
        summary_row_key: impl Into<String>,
        count_property: impl PropertyName,
    ) -> Self {
        CountedPartition {
            raw: table.with_type::<DynamicEntity>(),
            table,
            summary_row_key: summary_row_key.into(),
            count_property: count_property.property_name().to_string(),
            new_summary: Vec::new(),
            before_write: BeforeWrite::default(),
        }
    }

    /// A property (such as `EntityType` = `Department`) that a summary this
    /// pattern creates, for the first entity of a partition, is given besides
    /// the count. Summaries that exist are not changed.
    pub fn with_summary_property(
        mut self,
        name: impl PropertyName,
        value: impl Into<EdmValue>,
    ) -> Self {
        self.new_summary
            .push((name.property_name().to_string(), value.into()));
        self
    }

    /// Runs `hook` with the attempt number (1 first) after each write's read
    /// of the summary and before its transaction: for tracing retries, and in
    /// tests the exact place to let another client change the summary.
    #[doc(hidden)]
    pub fn step_hook<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(usize) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<()>> + Send + 'static,
    {
        self.before_write = BeforeWrite::new(hook);
        self
    }

    /// Every entity of the partition, the summary among them, decoded into
    /// `E`: typically an enum derived with [`TableEntity`] over the counted
    /// type and the summary's type (the guide's heterogeneous partition,
    /// §4.8), in RowKey order. One partition query (one request per 1,000
    /// entities).
    pub async fn read_partition<E: TableEntity>(&self, partition_key: &str) -> Result<Vec<E>> {
        crate::trace::traced(
            "CountedPartition",
            "read_partition",
            Some(self.table.name()),
            async move {
                EntityKey::new(partition_key, self.summary_row_key.as_str())
                    .validate()
                    .map_err(Error::from)?;
                self.table
                    .with_type::<E>()
                    .query()
                    .filter_by(KeyRange::all().filter(partition_key, ""))
                    .fetch_all()
                    .await
            },
        )
        .await
    }

    /// The typed table client.
    pub fn table(&self) -> &TableClient<T> {
        &self.table
    }

    /// The RowKey of the summary entity of each partition.
    pub fn summary_row_key(&self) -> &str {
        &self.summary_row_key
    }

    /// The summary entity of a partition (with every denormalised property).
    pub async fn summary(&self, partition_key: &str) -> Result<Option<DynamicEntity>> {
        crate::trace::traced(
            "CountedPartition",
            "summary",
            Some(self.table.name()),
            async move {
                self.raw
                    .get((partition_key, self.summary_row_key.as_str()))
                    .await
            },
        )
        .await
    }

    fn read_count(&self, summary: &DynamicEntity) -> Result<i32> {
        match summary.get(&self.count_property) {
            Some(EdmValue::Int32(n)) => Ok(*n),
            Some(EdmValue::Int64(n)) => i32::try_from(*n).map_err(|_| {
                Error::from(DecodeError::for_property(
                    self.count_property.clone(),
                    format!("{n} does not fit an Int32 count"),
                ))
            }),
            _ => Err(DecodeError::for_property(
                self.count_property.clone(),
                format!(
                    "Invalid entity, {} property not found.",
                    self.count_property
                ),
            )
            .into()),
        }
    }

    /// The count of a partition: one point read of its summary (0 if none).
    pub async fn count(&self, partition_key: &str) -> Result<i32> {
        crate::trace::traced(
            "CountedPartition",
            "count",
            Some(self.table.name()),
            async move {
                match self.summary(partition_key).await? {
                    Some(s) => self.read_count(&s),
                    None => Ok(0),
                }
            },
        )
        .await
    }

    fn check(&self, entity: &T) -> Result<()> {
        if entity.row_key() == self.summary_row_key {
            return Err(refused(
                "summary",
                format!("RowKey {:?} is the summary entity's", self.summary_row_key),
            ));
        }
        Ok(())
    }

    /// The change of the count of `partition_key` by `delta`, planned: an
    /// addition to the summary's count, read when the plan is sent and
    /// merged under the summary's ETag (a change in between makes the plan be
    /// worked out again), or, for the first entity of the partition, the
    /// insert of a new summary with the count `delta` (at least 0). The
    /// count alone, with no counted entity's write: join it with the writes
    /// of the entities counted, e.g. an [`IndexedTable`](crate::index::IndexedTable)'s.
    /// Two counts of one partition in one plan add up.
    pub fn plan_count(&self, partition_key: &str, delta: i32) -> Result<Plan<'static>> {
        let key = EntityKey::new(partition_key, self.summary_row_key.as_str());
        let mut created = DynamicEntity::new(partition_key, self.summary_row_key.as_str());
        for (name, value) in &self.new_summary {
            created.set(name.as_str(), value.clone());
        }
        Plan::add(
            &self.raw,
            key,
            self.count_property.as_str(),
            i64::from(delta),
            created,
        )
    }

    /// The insert of `entity` and the count of its partition plus one,
    /// planned: the writes [`insert`](Self::insert) sends, for a transaction
    /// composed with other writes of the partition ([`crate::plan`]).
    /// Passed by `&mut`, the entity gets its new ETag when the plan
    /// succeeds. Joined with a [`Denormalized`](crate::denormalize::Denormalized)
    /// plan, the count and the manager's details are one merge of the
    /// summary, from one read of it.
    pub fn plan_insert<'a>(&self, entity: impl PlanTarget<'a, T>) -> Result<Plan<'a>> {
        self.check(entity.entity())?;
        let pk = entity.entity().partition_key().into_owned();
        self.table
            .plan_insert(entity)?
            .and(self.plan_count(&pk, 1)?)
    }

    /// The delete of the entity `key` under `if_match` and the count of its
    /// partition minus one, planned: the writes [`delete`](Self::delete) sends.
    pub fn plan_delete(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<Plan<'static>> {
        let key = self.counted_key(key.into())?;
        let count = self.plan_count(&key.partition_key, -1)?;
        self.table.plan_delete(key, if_match)?.and(count)
    }

    fn counted_key(&self, key: EntityKey) -> Result<EntityKey> {
        if key.row_key == self.summary_row_key {
            return Err(refused(
                "summary",
                "the summary entity is not one of the counted entities",
            ));
        }
        Ok(key)
    }

    /// Sends `plan` (with the before-write hook) and returns the count it wrote.
    async fn send_counted(&self, plan: Plan<'_>, partition_key: &str) -> Result<i32> {
        let done = self.before_write.attach(plan).send().await?;
        let key = EntityKey::new(partition_key, self.summary_row_key.as_str());
        let summary = done
            .written(&key)
            .ok_or_else(|| Error::from(DecodeError::new("the count was not written")))?;
        self.read_count(summary)
    }

    /// Inserts the entity and adds one to its partition's count, in one
    /// transaction (again from a fresh read of the summary when another
    /// writer changed it meanwhile); returns the new count. A taken key is a
    /// conflict. Sets the entity's ETag.
    pub async fn insert(&self, entity: &mut T) -> Result<i32> {
        crate::trace::traced(
            "CountedPartition",
            "insert",
            Some(self.table.name()),
            async move {
                let pk = entity.partition_key().into_owned();
                let plan = self.plan_insert(&mut *entity)?;
                self.send_counted(plan, &pk).await
            },
        )
        .await
    }

    /// Deletes the entity with this key under `if_match` and subtracts one
    /// from its partition's count, in one transaction; returns the new count.
    pub async fn delete(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<i32> {
        crate::trace::traced(
            "CountedPartition",
            "delete",
            Some(self.table.name()),
            async move {
                let key = key.into();
                let pk = key.partition_key.clone();
                let plan = self.plan_delete(key, if_match)?;
                self.send_counted(plan, &pk).await
            },
        )
        .await
    }
}
