//! The index entities pattern, option 2 (design guide §3.4): for a value many
//! entities share (a last name), an index entity in the same partition lists
//! the RowKeys of the entities that have it, and every write changes the
//! entity and the index entity in one entity group transaction under the
//! index entity's ETag.
//!
//! The guide leaves some decisions open (§8 item 1); this module takes these:
//!
//! * The index entity's RowKey is a prefix and the value (`lastname_Jones`),
//!   so index entities cannot collide with the entities (RowKey `000152`).
//! * The list is the property [`ENTITY_IDS`], the RowKeys joined by `\n`,
//!   which no key may contain, so no escaping is needed.
//! * The first entity with a value inserts the index entity in the same
//!   transaction; if a concurrent writer created it first, the transaction
//!   fails with a conflict and starts again from the read.
//! * Removing the last RowKey deletes the index entity.
//! * A String property holds at most 64 KiB (about 32,000 characters, far
//!   below the 1 MB the guide assumes): a list that would outgrow it is
//!   refused before any request; use blobs (option 1) for such values.
//!
//! | operation | requests |
//! |---|---|
//! | [`insert`](IndexEntities::insert), [`delete`](IndexEntities::delete) | 1 point read (index entity) + 1 transaction of 2 |
//! | [`update`](IndexEntities::update) changing the value | 2 point reads + 1 transaction of 3; not changing it: 1 update |
//! | [`ids`](IndexEntities::ids) | 1 point read |
//! | [`find`](IndexEntities::find) | 1 point read + 1 point read per entity (concurrently) |
//!
//! ```no_run
//! use tablekit::{TableEntity, TableServiceClient};
//! use tablekit_patterns::index_entity::IndexEntities;
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     last_name: String,
//! }
//!
//! # async fn run() -> tablekit::Result<()> {
//! let service = TableServiceClient::from_connection_string("UseDevelopmentStorage=true")?;
//! let by_last_name = IndexEntities::new(
//!     service.table::<Employee>("Employees")?,
//!     "lastname_",
//!     |e: &Employee| e.last_name.clone(),
//! );
//! let mut e = Employee { department: "Sales".into(), employee_id: 152, last_name: "Jones".into() };
//! by_last_name.insert(&mut e).await?; // 000152 and lastname_Jones (EmployeeIDs += 000152)
//! let joneses = by_last_name.find("Sales", "Jones").await?;
//! # let _ = joneses;
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::Arc;

use futures::future::try_join_all;
use tablekit::{
    to_dynamic, DynamicEntity, EdmValue, EntityKey, Error, IfMatch, Result, TableClient,
    TableEntity, Transaction, UpdateMode,
};

use crate::error::invalid;

/// The String property of an index entity that lists the entities' RowKeys,
/// separated by `\n`.
pub const ENTITY_IDS: &str = "EntityIDs";

/// How many times a write starts again after a concurrent change of an index entity.
pub const MAX_ATTEMPTS: usize = 16;

type KeyFn<T> = dyn Fn(&T) -> String + Send + Sync;

/// Entities of type `T` with index entities for one non-unique value; see the
/// [module docs](self). Cheap to clone.
pub struct IndexEntities<T> {
    table: TableClient<T>,
    raw: TableClient<DynamicEntity>,
    prefix: String,
    key: Arc<KeyFn<T>>,
}

impl<T> Clone for IndexEntities<T> {
    fn clone(&self) -> Self {
        IndexEntities {
            table: self.table.clone(),
            raw: self.raw.clone(),
            prefix: self.prefix.clone(),
            key: self.key.clone(),
        }
    }
}

impl<T> fmt::Debug for IndexEntities<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexEntities")
            .field("table", &self.table.name())
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// An index entity as read: its RowKey list and ETag (`None`: there is none).
struct Listing {
    row_key: String,
    ids: Vec<String>,
    etag: Option<tablekit::ETag>,
}

impl Listing {
    fn entity(&self, partition_key: &str) -> DynamicEntity {
        DynamicEntity::new(partition_key, self.row_key.as_str())
            .with(ENTITY_IDS, self.ids.join("\n"))
    }

    /// Adds the index entity's write to `tx`: insert, update under its ETag,
    /// or delete when the list became empty.
    fn write(&self, tx: &mut Transaction<DynamicEntity>, partition_key: &str) -> Result<()> {
        match (&self.etag, self.ids.is_empty()) {
            (None, true) => {}
            (None, false) => {
                tx.insert(&self.entity(partition_key))?;
            }
            (Some(etag), true) => {
                tx.delete(
                    (partition_key, self.row_key.as_str()),
                    IfMatch::ETag(etag.clone()),
                )?;
            }
            (Some(etag), false) => {
                tx.update(
                    &self.entity(partition_key),
                    UpdateMode::Replace,
                    IfMatch::ETag(etag.clone()),
                )?;
            }
        }
        Ok(())
    }
}

impl<T: TableEntity> IndexEntities<T> {
    /// Index entities with RowKeys `prefix` + `key(entity)` in each entity's
    /// partition. The prefix must keep them apart from the entities' RowKeys.
    pub fn new(
        table: TableClient<T>,
        prefix: impl Into<String>,
        key: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> Self {
        IndexEntities {
            raw: table.with_type::<DynamicEntity>(),
            table,
            prefix: prefix.into(),
            key: Arc::new(key),
        }
    }

    /// The typed table client.
    pub fn table(&self) -> &TableClient<T> {
        &self.table
    }

    fn check(&self, entity: &T) -> Result<()> {
        if self.prefix.is_empty() || entity.row_key().starts_with(&self.prefix) {
            return Err(invalid(format!(
                "RowKey {:?} would mix with the index entities of prefix {:?}",
                entity.row_key(),
                self.prefix
            )));
        }
        Ok(())
    }

    async fn listing(&self, partition_key: &str, value: &str) -> Result<Listing> {
        let row_key = format!("{}{value}", self.prefix);
        let key = EntityKey::new(partition_key, row_key.as_str());
        key.validate().map_err(Error::from)?;
        let stored = self.raw.get(key).await?;
        Ok(match stored {
            None => Listing {
                row_key,
                ids: Vec::new(),
                etag: None,
            },
            Some(e) => Listing {
                row_key,
                ids: match e.get(ENTITY_IDS) {
                    Some(EdmValue::String(s)) if !s.is_empty() => {
                        s.split('\n').map(str::to_owned).collect()
                    }
                    _ => Vec::new(),
                },
                etag: e.etag,
            },
        })
    }

    /// The RowKeys of the entities of partition `partition_key` whose value is
    /// `value`, in the order they were added: one point read.
    pub async fn ids(&self, partition_key: &str, value: &str) -> Result<Vec<String>> {
        Ok(self.listing(partition_key, value).await?.ids)
    }

    /// The entities whose value is `value`: the index entity, then a point
    /// read of each entity (concurrently). An entity listed but missing is
    /// left out.
    pub async fn find(&self, partition_key: &str, value: &str) -> Result<Vec<T>> {
        let ids = self.ids(partition_key, value).await?;
        let found = try_join_all(
            ids.iter()
                .map(|id| self.table.get((partition_key, id.as_str())).send()),
        )
        .await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// Inserts the entity and adds its RowKey to its value's index entity, in
    /// one transaction under the index entity's ETag (or inserting it); starts
    /// again from the read when another writer changed the index entity. A
    /// taken key is a conflict.
    pub async fn insert(&self, entity: &mut T) -> Result<()> {
        self.check(entity)?;
        let pk = entity.partition_key().into_owned();
        let rk = entity.row_key().into_owned();
        let mut attempt = 1;
        loop {
            let mut listing = self.listing(&pk, &(self.key)(entity)).await?;
            listing.ids.push(rk.clone());
            let mut tx = self.raw.transaction();
            tx.insert(&bag(entity)?)?;
            match send(tx, &pk, &[&listing]).await {
                Ok(etag) => {
                    set_etag(entity, etag);
                    return Ok(());
                }
                Err(e) if index_race(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes `current` (the value as read) under `if_match` and removes its
    /// RowKey from its index entity, in one transaction; starts again when
    /// another writer changed the index entity.
    pub async fn delete(&self, current: &T, if_match: impl Into<IfMatch>) -> Result<()> {
        self.check(current)?;
        let if_match = if_match.into();
        let pk = current.partition_key().into_owned();
        let rk = current.row_key().into_owned();
        let mut attempt = 1;
        loop {
            let mut listing = self.listing(&pk, &(self.key)(current)).await?;
            listing.ids.retain(|id| *id != rk);
            let mut tx = self.raw.transaction();
            tx.delete((pk.as_str(), rk.as_str()), if_match.clone())?;
            match send(tx, &pk, &[&listing]).await {
                Ok(_) => return Ok(()),
                Err(e) if index_race(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Replaces `current` (the value as read) with `new` under `if_match`. If
    /// the indexed value changed, one transaction updates three entities: the
    /// entity, the old value's index entity and the new value's; it starts
    /// again when another writer changed either index entity.
    pub async fn update(
        &self,
        current: &T,
        new: &mut T,
        if_match: impl Into<IfMatch>,
    ) -> Result<()> {
        self.check(new)?;
        if current.key() != new.key() {
            return Err(invalid(
                "an update keeps the entity's key; delete and insert to move it",
            ));
        }
        let if_match = if_match.into();
        let (old_value, new_value) = ((self.key)(current), (self.key)(new));
        if old_value == new_value {
            return self
                .table
                .update(new, UpdateMode::Replace, if_match)
                .await
                .map(drop);
        }
        let pk = new.partition_key().into_owned();
        let rk = new.row_key().into_owned();
        let mut attempt = 1;
        loop {
            let mut old = self.listing(&pk, &old_value).await?;
            old.ids.retain(|id| *id != rk);
            let mut fresh = self.listing(&pk, &new_value).await?;
            fresh.ids.push(rk.clone());
            let mut tx = self.raw.transaction();
            tx.update(&bag(new)?, UpdateMode::Replace, if_match.clone())?;
            match send(tx, &pk, &[&old, &fresh]).await {
                Ok(etag) => {
                    set_etag(new, etag);
                    return Ok(());
                }
                Err(e) if index_race(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

fn bag<T: TableEntity>(entity: &T) -> Result<DynamicEntity> {
    let mut d = to_dynamic(entity)?;
    d.etag = None;
    Ok(d)
}

fn set_etag<T: TableEntity>(entity: &mut T, etag: Option<tablekit::ETag>) {
    if let Some(etag) = etag {
        entity.set_etag(etag);
    }
}

/// Adds the index entities' writes after the entity's operation (index 0),
/// sends the transaction and returns the entity's new ETag.
async fn send(
    mut tx: Transaction<DynamicEntity>,
    partition_key: &str,
    listings: &[&Listing],
) -> Result<Option<tablekit::ETag>> {
    for l in listings {
        l.write(&mut tx, partition_key)?;
    }
    Ok(tx.send().await?.etag(0).cloned())
}

/// A transaction that failed on an index entity (operation 1 or later)
/// because another writer changed, created or deleted it since the read.
fn index_race(e: &Error) -> bool {
    e.batch_index().is_some_and(|i| i >= 1)
        && (e.is_precondition_failed() || e.is_conflict() || e.is_not_found())
}
