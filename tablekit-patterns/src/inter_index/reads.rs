//! The reads: the primary by key, an index by value (plain or verified
//! against the primary), listings, and the purge of tombstones.

use std::sync::Arc;
use std::time::Duration;

use tablekit::codec::to_dynamic;
use tablekit::entity::RawEntity;
use tablekit::error::DecodeError;
use tablekit::filter::prefix_successor;
use tablekit::filter::Column;
use tablekit::{
    DynamicEntity, ETag, EdmValue, EntityKey, IfMatch, Result, TableClient, TableEntity,
};

use crate::error::refused;
use crate::range::KeyRange;

use super::change::{is_pending, is_tombstone, now_micros, stamp_of};
use super::index::{IndexDef, InterIndex};
use super::{
    strip, InterPartitionIndex, CHANGE_STAMP, CLAIM_MESSAGE, CLAIM_WAITING, MOVED_COPIES, PENDING,
    PRIMARY_ROW_KEY, REMOVED,
};

impl<T: TableEntity + Send + Sync + 'static> InterPartitionIndex<T> {
    pub(super) fn decode_primary(&self, mut d: DynamicEntity) -> Result<T> {
        d.partition_key = strip(&self.inner.prefix, &d.partition_key)?.to_owned();
        d.properties.remove(CHANGE_STAMP);
        d.properties.remove(MOVED_COPIES);
        T::decode(&RawEntity::from_dynamic(&d))
    }

    fn decode_copy(&self, def: &IndexDef<T>, mut d: DynamicEntity) -> Result<T> {
        match d.properties.remove(PRIMARY_ROW_KEY) {
            Some(EdmValue::String(rk)) => d.row_key = rk,
            _ => {
                return Err(DecodeError::for_property(
                    PRIMARY_ROW_KEY,
                    format!(
                        "({:?}, {:?}) is not an index copy: it has no {PRIMARY_ROW_KEY} string",
                        d.partition_key, d.row_key
                    ),
                )
                .into())
            }
        }
        d.partition_key = strip(&def.prefix, &d.partition_key)?.to_owned();
        d.properties.remove(CHANGE_STAMP);
        d.properties.remove(PENDING);
        d.properties.remove(CLAIM_MESSAGE);
        d.properties.remove(CLAIM_WAITING);
        d.etag = None;
        T::decode(&RawEntity::from_dynamic(&d))
    }

    pub(super) fn def(&self, index: &InterIndex<T>) -> Result<&Arc<IndexDef<T>>> {
        self.inner
            .indexes
            .iter()
            .find(|d| Arc::ptr_eq(d, &index.def))
            .ok_or_else(|| {
                refused(
                    "inter_index",
                    format!("{:?} is not an index of this table", index.def.name),
                )
            })
    }

    fn unique_def(&self, index: &InterIndex<T>, method: &str) -> Result<&Arc<IndexDef<T>>> {
        let def = self.def(index)?;
        if !def.unique {
            return Err(refused(
                "inter_index",
                format!(
                    "index {:?} is not unique: a value can have several entities; \
                     use {method}_all or list",
                    def.name
                ),
            ));
        }
        Ok(def)
    }

    /// Reads an entity by its own keys (`("Sales", "000223")`) from its
    /// primary partition (`empid_Sales`): one point read.
    pub async fn get(&self, key: impl Into<EntityKey>) -> Result<Option<T>> {
        crate::trace::traced(
            "InterPartitionIndex",
            "get",
            Some(self.inner.primary.name()),
            async move {
                let key = key.into();
                let pk = self.primary_partition_key(&key.partition_key);
                match self.inner.primary.get((&*pk, &*key.row_key)).await? {
                    Some(d) if !is_tombstone(&d) => Ok(Some(self.decode_primary(d)?)),
                    _ => Ok(None),
                }
            },
        )
        .await
    }

    /// Reads the copy of the **unique** `index` for `value` in partition
    /// `partition_key` (`email_Sales` / `jonesj@contoso.com`): one point
    /// read, no check against the primary. A claim (a change still being
    /// applied) reads as `None`. On a non-unique index it is refused before
    /// any request: use [`lookup_all`](Self::lookup_all).
    pub async fn lookup(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        value: &str,
    ) -> Result<Option<T>> {
        crate::trace::traced(
            "InterPartitionIndex",
            "lookup",
            Some(self.inner.primary.name()),
            async move {
                let def = self.unique_def(index, "lookup")?;
                let pk = format!("{}{partition_key}", def.prefix);
                match self.table_of(def).get((&*pk, value)).await? {
                    Some(d) if !is_pending(&d) => Ok(Some(self.decode_copy(def, d)?)),
                    _ => Ok(None),
                }
            },
        )
        .await
    }

    /// Every entity whose value in `index` is `value`, in partition
    /// `partition_key`, in the order of their RowKeys: one range query (for
    /// a non-unique index, `RowKey ge 'jones ' and RowKey lt 'jones!'`), no
    /// check against the primaries. For a unique index, zero or one.
    pub async fn lookup_all(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        value: &str,
    ) -> Result<Vec<T>> {
        crate::trace::traced(
            "InterPartitionIndex",
            "lookup_all",
            Some(self.inner.primary.name()),
            async move {
                self.list(index, partition_key, KeyRange::inclusive(value, value))
                    .await
            },
        )
        .await
    }

    /// Like [`lookup`](Self::lookup), then reads the primary the copy names
    /// and returns it if its indexed value is still `value`. A copy whose
    /// primary is gone, or has another value, is stale: it is deleted (if
    /// unchanged since read, so a concurrent worker's rewrite wins) and the
    /// answer is `None`. A claim whose change has not written the primary
    /// yet is left alone (`None`); one whose primary shows the value counts.
    /// Unique indexes only, like `lookup`.
    pub async fn lookup_verified(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        value: &str,
    ) -> Result<Option<T>> {
        crate::trace::traced(
            "InterPartitionIndex",
            "lookup_verified",
            Some(self.inner.primary.name()),
            async move {
                let def = self.unique_def(index, "lookup")?;
                let pk = format!("{}{partition_key}", def.prefix);
                let table = self.table_of(def);
                let Some(copy) = table.get((&*pk, value)).await? else {
                    return Ok(None);
                };
                self.verify(def, &table, copy).await
            },
        )
        .await
    }

    async fn verify(
        &self,
        def: &IndexDef<T>,
        table: &TableClient<DynamicEntity>,
        copy: DynamicEntity,
    ) -> Result<Option<T>> {
        let etag: Option<ETag> = copy.etag.clone();
        let key = EntityKey::new(&copy.partition_key, &copy.row_key);
        let (pending, copy_stamp) = (is_pending(&copy), stamp_of(&copy));
        let entity = self.decode_copy(def, copy)?;
        let own = to_dynamic(&entity)?;
        // The primary the copy names (its PrimaryRowKey): only its state
        // decides whether the copy is stale.
        let pk = self.primary_partition_key(&own.partition_key);
        let primary = self.inner.primary.get((&*pk, &*own.row_key)).await?;
        let primary_stamp = primary.as_ref().map(stamp_of);
        let primary = match primary {
            Some(d) if !is_tombstone(&d) => Some(self.decode_primary(d)?),
            _ => None,
        };
        if let Some(p) = primary {
            if def.copy_row_key(&(def.key)(&p), &own.row_key) == key.row_key {
                // (A claim counts once its primary shows the value: only
                // the confirming write is still to come.)
                return Ok(Some(p));
            }
        }
        if pending && primary_stamp.is_none_or(|s| s < copy_stamp) {
            // A claim whose change has not written the primary yet.
            return Ok(None);
        }
        let guard = etag.map_or(IfMatch::Any, IfMatch::ETag);
        match table.delete_if_exists(key, guard).await {
            Ok(_) => {}
            Err(e) if e.is_precondition_failed() => {}
            Err(e) => return Err(e),
        }
        tracing::info!(index = %def.name, row_key = %own.row_key, "stale index entry repaired");
        Ok(None)
    }

    async fn copies_in(
        &self,
        def: &IndexDef<T>,
        partition_key: &str,
        range: &KeyRange,
    ) -> Result<Vec<DynamicEntity>> {
        let rows = self
            .table_of(def)
            .query()
            .filter_by(
                def.row_key_range(range)
                    .filter(&format!("{}{partition_key}", def.prefix), ""),
            )
            .fetch_all()
            .await?;
        Ok(rows)
    }

    /// The copies of `index` in partition `partition_key` whose **values**
    /// are in `range`, in value order (then, for a non-unique index, primary
    /// RowKey order): one range query (appendix A: `PartitionKey eq
    /// 'email_Sales' and RowKey ge 'a' and RowKey lt 'b'`). Claims are left
    /// out; no check against the primaries.
    pub async fn list(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        range: KeyRange,
    ) -> Result<Vec<T>> {
        crate::trace::traced(
            "InterPartitionIndex",
            "list",
            Some(self.inner.primary.name()),
            async move {
                let def = self.def(index)?;
                let rows = self.copies_in(def, partition_key, &range).await?;
                rows.into_iter()
                    .filter(|d| !is_pending(d))
                    .map(|d| self.decode_copy(def, d))
                    .collect()
            },
        )
        .await
    }

    /// Like [`list`](Self::list), with each copy checked against its primary
    /// (one point read each) and stale ones repaired and left out, as
    /// [`lookup_verified`](Self::lookup_verified) does.
    pub async fn list_verified(
        &self,
        index: &InterIndex<T>,
        partition_key: &str,
        range: KeyRange,
    ) -> Result<Vec<T>> {
        crate::trace::traced(
            "InterPartitionIndex",
            "list_verified",
            Some(self.inner.primary.name()),
            async move {
                let def = self.def(index)?;
                let table = self.table_of(def);
                let rows = self.copies_in(def, partition_key, &range).await?;
                let mut out = Vec::with_capacity(rows.len());
                for d in rows {
                    if let Some(e) = self.verify(def, &table, d).await? {
                        out.push(e);
                    }
                }
                Ok(out)
            },
        )
        .await
    }

    /// The primaries of partition `partition_key` whose RowKeys are in
    /// `range`, in key order (appendix A: `PartitionKey eq 'empid_Sales' and
    /// RowKey ge '000100' and RowKey le '000199'`).
    pub async fn list_primary(&self, partition_key: &str, range: KeyRange) -> Result<Vec<T>> {
        crate::trace::traced(
            "InterPartitionIndex",
            "list_primary",
            Some(self.inner.primary.name()),
            async move {
                let rows = self
                    .inner
                    .primary
                    .query()
                    .filter_by(range.filter(&self.primary_partition_key(partition_key), ""))
                    .fetch_all()
                    .await?;
                rows.into_iter()
                    .filter(|d| !is_tombstone(d))
                    .map(|d| self.decode_primary(d))
                    .collect()
            },
        )
        .await
    }

    /// Deletes the tombstones that removes left in the primary partitions
    /// (every PartitionKey under this index's primary prefix) whose stamp is
    /// at least `older_than` before now, each under the ETag it was read
    /// with (one that a newer change replaced meanwhile stays). Returns how
    /// many it deleted: one query (a request per page), then one delete each.
    ///
    /// A tombstone is what stops a put older than the remove, delivered late,
    /// from bringing the entity back; so purge only tombstones older than any
    /// message that can still be delivered: the queue's message time-to-live
    /// (7 days unless the messages were sent with another), plus the time a
    /// message may wait in the poison queue if you re-send poisoned messages.
    pub async fn purge_tombstones(&self, older_than: Duration) -> Result<u64> {
        crate::trace::traced(
            "InterPartitionIndex",
            "purge_tombstones",
            Some(self.inner.primary.name()),
            async move {
                let older = i64::try_from(older_than.as_micros()).unwrap_or(i64::MAX);
                let cutoff = now_micros().saturating_sub(older);
                let prefix = &self.inner.prefix;
                let partition_key = Column::<DynamicEntity, String>::new("PartitionKey");
                let mut filter = Column::<DynamicEntity, bool>::new(REMOVED).eq(true);
                if !prefix.is_empty() {
                    filter = filter & partition_key.ge(prefix);
                    if let Some(next) = prefix_successor(prefix) {
                        filter = filter & partition_key.lt(next);
                    }
                }
                let rows = self
                    .inner
                    .primary
                    .query()
                    .filter_by(filter)
                    .fetch_all()
                    .await?;
                let mut purged = 0;
                for d in rows {
                    if !is_tombstone(&d) || stamp_of(&d) > cutoff {
                        continue;
                    }
                    let guard = d.etag.clone().map_or(IfMatch::Any, IfMatch::ETag);
                    let key = EntityKey::new(&d.partition_key, &d.row_key);
                    match self.inner.primary.delete(key, guard).await {
                        Ok(()) => purged += 1,
                        Err(e) if e.is_precondition_failed() || e.is_not_found() => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(purged)
            },
        )
        .await
    }
}
