//! Background schema upgrade: rewrite every entity stored with an older schema
//! version in the current one, so that old versions (and their upgrade code)
//! can eventually be retired.
//!
//! A type derived with `#[tablekit(version = N, upgrade = "...")]` already
//! upgrades entities when it reads them (upgrade on access) and writes the
//! current version. [`SchemaUpgrade`] walks a table (or one partition), page
//! by page, and for each entity whose version property is below the current
//! one (a missing property is version 0) reads it through the type, so the
//! upgrade hook runs, and replaces it under the ETag it was read with. A
//! concurrent writer makes that replace fail (412): the entity is read again
//! and upgraded again if it is still old, so nothing the other writer wrote is
//! overwritten with a stale copy. Entities of a newer version (a newer program
//! is running) are left alone.
//!
//! | step | requests |
//! |---|---|
//! | a page of up to `page_size` entities | 1 query |
//! | each old entity | 1 replace (+1 point read and 1 replace per concurrent change) |
//!
//! [`run_page`](SchemaUpgrade::run_page) returns a [`Continuation`] to resume
//! from after a restart; [`run`](SchemaUpgrade::run) does every page, and
//! [`run_from`](SchemaUpgrade::run_from) every page from a saved continuation,
//! reporting each page's progress.
//!
//! ```
//! use tablekit::{TableEntity, TableServiceClient, entity::RawEntity};
//! use tablekit_patterns::upgrade::SchemaUpgrade;
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(version = 2, upgrade = "Blog::upgrade")]
//! struct Blog {
//!     #[tablekit(partition_key)]
//!     channel: String,
//!     #[tablekit(row_key)]
//!     posted: String,
//!     #[tablekit(default)]
//!     stars: i64,
//! }
//!
//! impl Blog {
//!     fn upgrade(raw: &RawEntity<'_>, _stored: i32) -> tablekit::Result<Self> {
//!         let mut blog = Self::decode_current_schema(raw)?;
//!         if let Some(rating) = raw.get("Rating") {
//!             blog.stars = i64::from(rating.to_i32()?) * 2;
//!         }
//!         Ok(blog)
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded(); // or ::from_connection_string(..)
//! # service.create_table("Blogs").await?;
//! # service.table::<tablekit::DynamicEntity>("Blogs")?.insert(
//! #     &tablekit::DynamicEntity::new("news", "0001").with(Blog::VERSION_PROPERTY, 1).with("Rating", 4),
//! # ).await?;
//! let upgrade = SchemaUpgrade::new(
//!     service.table::<Blog>("Blogs")?,
//!     Blog::VERSION_PROPERTY,
//!     Blog::SCHEMA_VERSION,
//! );
//! let report = upgrade.run().await?;
//! assert_eq!(report.upgraded, 1); // version 1 (Rating 4) -> version 2 (Stars 8)
//! # Ok(()) }
//! ```

use std::ops::AddAssign;

use tablekit::{
    entity::RawEntity, filter::Column, Continuation, DynamicEntity, EdmValue, IfMatch, Result,
    TableClient, TableEntity, UpdateMode,
};

/// How many times one entity is read and upgraded again after concurrent changes.
pub const MAX_ATTEMPTS: usize = 16;

/// What an upgrade did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpgradeReport {
    /// Entities read.
    pub scanned: usize,
    /// Entities rewritten in the current version.
    pub upgraded: usize,
    /// Entities already in the current version (including those another
    /// writer upgraded between the scan and the write).
    pub current: usize,
    /// Entities of a newer version, left alone.
    pub newer: usize,
    /// Old entities deleted by another writer before they could be upgraded.
    pub vanished: usize,
}

impl AddAssign for UpgradeReport {
    fn add_assign(&mut self, o: Self) {
        self.scanned += o.scanned;
        self.upgraded += o.upgraded;
        self.current += o.current;
        self.newer += o.newer;
        self.vanished += o.vanished;
    }
}

/// One page of an upgrade: what it did and where the next page starts.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct UpgradePage {
    /// What this page did.
    pub report: UpgradeReport,
    /// Where the next page starts; `None` when the upgrade is complete.
    pub continuation: Option<Continuation>,
}

/// A background upgrade of the entities of one table; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct SchemaUpgrade<T> {
    table: TableClient<T>,
    raw: TableClient<DynamicEntity>,
    version_property: String,
    current: i32,
    partition: Option<String>,
    page_size: usize,
}

impl<T: TableEntity> SchemaUpgrade<T> {
    /// Upgrades the entities of `table` to version `current`, stored in the
    /// Int32 property `version_property` (the derive's `T::VERSION_PROPERTY`
    /// and `T::SCHEMA_VERSION`).
    pub fn new(table: TableClient<T>, version_property: &str, current: i32) -> Self {
        SchemaUpgrade {
            raw: table.with_type::<DynamicEntity>(),
            table,
            version_property: version_property.to_owned(),
            current,
            partition: None,
            page_size: 100,
        }
    }

    /// Only the entities of one partition.
    pub fn partition(mut self, partition_key: impl Into<String>) -> Self {
        self.partition = Some(partition_key.into());
        self
    }

    /// Entities per page (1 to 1000; 100 by default).
    pub fn page_size(mut self, n: usize) -> Self {
        self.page_size = n;
        self
    }

    fn version(&self, e: &DynamicEntity) -> i32 {
        match e.get(&self.version_property) {
            Some(EdmValue::Int32(v)) => *v,
            Some(EdmValue::Int64(v)) => i32::try_from(*v).unwrap_or(i32::MAX),
            _ => 0,
        }
    }

    /// Upgrades one page of entities, starting at `from` (the start when `None`).
    pub async fn run_page(&self, from: Option<Continuation>) -> Result<UpgradePage> {
        crate::trace::traced(
            "SchemaUpgrade",
            "run_page",
            Some(self.table.name()),
            async move {
                let mut query = self.raw.query().page_size(self.page_size);
                if let Some(pk) = &self.partition {
                    query = query
                        .filter_by(Column::<DynamicEntity, String>::new("PartitionKey").eq(pk));
                }
                if let Some(c) = from {
                    query = query.continue_from(c);
                }
                let page = query.next_page().await?;
                let mut report = UpgradeReport {
                    scanned: page.items.len(),
                    ..UpgradeReport::default()
                };
                for row in page.items {
                    report += self.upgrade_one(row).await?;
                }
                Ok(UpgradePage {
                    report,
                    continuation: page.continuation,
                })
            },
        )
        .await
    }

    /// Upgrades every page.
    pub async fn run(&self) -> Result<UpgradeReport> {
        crate::trace::traced(
            "SchemaUpgrade",
            "run",
            Some(self.table.name()),
            async move { self.run_from(None, |_| {}).await },
        )
        .await
    }

    /// Upgrades every page from `from` (the start when `None`) and returns
    /// the total, calling `on_page` after each page with what it did and
    /// where the next page starts: the place to report progress and to save
    /// the continuation (its `to_string()`; parse it back with `str::parse`)
    /// so that a restarted process resumes there with a new `SchemaUpgrade`.
    pub async fn run_from(
        &self,
        from: Option<Continuation>,
        mut on_page: impl FnMut(&UpgradePage),
    ) -> Result<UpgradeReport> {
        crate::trace::traced(
            "SchemaUpgrade",
            "run_from",
            Some(self.table.name()),
            async move {
                let mut total = UpgradeReport::default();
                let mut from = from;
                loop {
                    let page = self.run_page(from).await?;
                    total += page.report;
                    on_page(&page);
                    match page.continuation {
                        Some(c) => from = Some(c),
                        None => return Ok(total),
                    }
                }
            },
        )
        .await
    }

    async fn upgrade_one(&self, mut row: DynamicEntity) -> Result<UpgradeReport> {
        let mut attempt = 1;
        loop {
            let version = self.version(&row);
            if version > self.current {
                return Ok(UpgradeReport {
                    newer: 1,
                    ..Default::default()
                });
            }
            if version == self.current {
                return Ok(UpgradeReport {
                    current: 1,
                    ..Default::default()
                });
            }
            let entity = T::decode(&RawEntity::from_dynamic(&row))?;
            let if_match = row.etag.clone().map_or(IfMatch::Any, IfMatch::ETag);
            match self
                .table
                .update(&entity, UpdateMode::Replace, if_match)
                .await
            {
                Ok(_) => {
                    return Ok(UpgradeReport {
                        upgraded: 1,
                        ..Default::default()
                    })
                }
                Err(e)
                    if (e.is_precondition_failed() || e.is_not_found())
                        && attempt < MAX_ATTEMPTS =>
                {
                    attempt += 1;
                    match self
                        .raw
                        .get((row.partition_key.as_str(), row.row_key.as_str()))
                        .await?
                    {
                        Some(fresh) => row = fresh,
                        None => {
                            return Ok(UpgradeReport {
                                vanished: 1,
                                ..Default::default()
                            })
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}
