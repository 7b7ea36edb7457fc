//! The clients: [`TableServiceClient`] for an account's tables, [`TableClient`]
//! for the entities of one table.

use std::collections::HashSet;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::pin::Pin;

use super::handle::AmbiguousWrites;
use super::handle::{is_missing_entity, TableHandle};
use super::outcome;
use super::query::{self, Query, ScanPolicy};
use crate::backend::{EntityBody, Operation, Response, Written};
use crate::codec::write::write_entity_json;
use crate::entity::{EntityKey, IfMatch, TableEntity, UpdateMode};
use crate::error::{Error, ErrorCode, Result};

#[cfg(feature = "admin")]
mod admin;
mod modify;
mod service;
mod transaction;
pub use modify::{Modified, Modify, ModifyStep};
pub use service::{ListTables, TableItem, TableNames, TableServiceClient};
pub use transaction::{Transaction, TransactionOp, TransactionResult};

/// What a write takes: `&entity`, or `&mut entity` to have the entity's ETag
/// and Timestamp updated after the write (for types that keep them).
pub trait WriteTarget<T: TableEntity>: Send {
    /// The entity to write.
    fn entity(&self) -> &T;
    /// Called after a successful write.
    fn written(&mut self, written: &Written);
}

impl<T: TableEntity> WriteTarget<T> for &T {
    fn entity(&self) -> &T {
        self
    }
    fn written(&mut self, _: &Written) {}
}

impl<T: TableEntity> WriteTarget<T> for &mut T {
    fn entity(&self) -> &T {
        self
    }
    fn written(&mut self, written: &Written) {
        written.apply_to(&mut **self);
    }
}

/// A client for the entities of one table, typed as `T`. Cheap to clone.
///
/// `TableClient<DynamicEntity>` is the untyped form.
pub struct TableClient<T> {
    handle: TableHandle,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for TableClient<T> {
    fn clone(&self) -> Self {
        TableClient {
            handle: self.handle.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for TableClient<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableClient")
            .field("table", &self.handle.name)
            .field("entity", &std::any::type_name::<T>())
            .finish()
    }
}

fn bag_key(bag: &crate::DynamicEntity) -> EntityKey {
    EntityKey::new(bag.partition_key.clone(), bag.row_key.clone())
}

fn encode<T: TableEntity>(entity: &T) -> Result<(EntityKey, Vec<u8>)> {
    let mut body = Vec::with_capacity(crate::codec::write::ENCODE_CAPACITY);
    write_entity_json(entity, &mut body)?;
    Ok((entity.key(), body))
}

impl<T> TableClient<T> {
    /// The table's name.
    pub fn name(&self) -> &str {
        &self.handle.name
    }

    /// What queries that would read the whole table do: run ([`ScanPolicy::Allow`],
    /// the default), log a warning through `tracing`, or fail before any request.
    pub fn with_scan_policy(mut self, policy: ScanPolicy) -> Self {
        self.handle.scan_policy = policy;
        self
    }

    /// The table-scan policy.
    pub fn scan_policy(&self) -> ScanPolicy {
        self.handle.scan_policy
    }

    /// What a write whose outcome is unknown does: read back and decide
    /// ([`AmbiguousWrites::ReadBack`], the default), or fail with the
    /// [ambiguous](Error::is_ambiguous) error as it is.
    pub fn with_ambiguous_writes(mut self, policy: AmbiguousWrites) -> Self {
        self.handle.ambiguous_writes = policy;
        self
    }

    /// The policy for writes whose outcome is unknown.
    pub fn ambiguous_writes(&self) -> AmbiguousWrites {
        self.handle.ambiguous_writes
    }

    /// The same table as another type, with no bound on either.
    pub(crate) fn with_type_unchecked<U>(&self) -> TableClient<U> {
        TableClient {
            handle: self.handle.clone(),
            _t: PhantomData,
        }
    }

    /// The table on its backend, untyped (for the bulk writer's read-backs).
    pub(crate) fn handle(&self) -> &TableHandle {
        &self.handle
    }

    /// What the requests to this table cost so far, from every client of
    /// it made by the same [`TableServiceClient`] (see
    /// [`Stats`](crate::table::Stats)).
    pub fn stats(&self) -> crate::table::Stats {
        self.handle.stats.stats(Some(&self.handle.name))
    }
}

impl<T: TableEntity> TableClient<T> {
    /// The same table read and written as another type (e.g. `DynamicEntity`).
    pub fn with_type<U: TableEntity>(&self) -> TableClient<U> {
        TableClient {
            handle: self.handle.clone(),
            _t: PhantomData,
        }
    }

    /// Creates the table; fails with a conflict ([`Error::is_conflict`],
    /// [`ErrorCode::TableAlreadyExists`]) if it exists.
    ///
    /// The four table-lifecycle calls carry `table` in their names, as in the
    /// official SDKs, so `create_table` cannot be misread as creating an entity.
    pub async fn create_table(&self) -> Result<()> {
        self.handle
            .execute(Operation::CreateTable {
                table: &self.handle.name,
            })
            .await
            .map(drop)
    }

    /// Creates the table unless it exists; returns whether it was created
    /// (`true` when a lost answer's retry finds it: see
    /// [`TableServiceClient::create_table_if_not_exists`]).
    pub async fn create_table_if_not_exists(&self) -> Result<bool> {
        match self.create_table().await {
            Ok(()) => Ok(true),
            // Ambiguous: the conflict met by a retry after a lost answer is
            // most likely this call's own table. Either way the table exists.
            Err(e)
                if e.status() == Some(409) && e.code() != Some(&ErrorCode::TableBeingDeleted) =>
            {
                Ok(e.is_ambiguous())
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes the table and all its entities.
    pub async fn delete_table(&self) -> Result<()> {
        self.handle
            .execute(Operation::DeleteTable {
                table: &self.handle.name,
            })
            .await
            .map(drop)
    }

    /// Deletes the table if it exists; returns whether it did (`true` when a
    /// lost answer's retry finds none: see
    /// [`TableServiceClient::delete_table_if_exists`]).
    pub async fn delete_table_if_exists(&self) -> Result<bool> {
        match self.delete_table().await {
            Ok(()) => Ok(true),
            // Ambiguous: a lost answer's retry finding nothing most likely
            // found this call's own deletion. Either way the table is gone.
            Err(e) if e.status() == Some(404) => Ok(e.is_ambiguous()),
            Err(e) => Err(e),
        }
    }

    async fn write(&self, target: impl WriteTarget<T>, kind: WriteKind<'_>) -> Result<Written> {
        crate::entity::refuse_unencrypted_write::<T>(match kind {
            WriteKind::Insert => None,
            WriteKind::Write(mode, _) => Some(mode),
        })?;
        if let WriteKind::Write(mode, _) = kind {
            crate::entity::refuse_metadata_merge(target.entity(), mode)?;
        }
        self.write_checked(target, kind).await
    }

    /// Key rotation's merge of `_ClientEncryptionMetadata1` alone (which
    /// [`write`](Self::write) refuses to anyone else): the content key is
    /// the same, only its wrapping changes, so no property is lost.
    #[cfg(feature = "encryption")]
    pub(crate) async fn merge_rewrapped_key(
        &self,
        target: impl WriteTarget<T>,
        if_match: &IfMatch,
    ) -> Result<Written> {
        self.write_checked(target, WriteKind::Write(UpdateMode::Merge, Some(if_match)))
            .await
    }

    async fn write_checked(
        &self,
        mut target: impl WriteTarget<T>,
        kind: WriteKind<'_>,
    ) -> Result<Written> {
        // A backend that stores property bags gets the bag, checked by the same
        // checker as the JSON encoder: the refusals are identical, and the entity
        // is not printed as JSON only to be parsed back.
        let (key, body) = if self.handle.backend.stores_property_bags() {
            let bag = crate::codec::bag::to_bag(target.entity())?;
            (bag_key(&bag), EntityBody::Bag(Box::new(bag)))
        } else {
            let (key, body) = encode(target.entity())?;
            (key, EntityBody::Json(bytes::Bytes::from(body)))
        };
        // What the write sent, kept for a read-back; the JSON is shared, not copied.
        let sent = match (&body, self.handle.ambiguous_writes) {
            (EntityBody::Json(json), AmbiguousWrites::ReadBack) => {
                Some(EntityBody::Json(json.clone()))
            }
            _ => None,
        };
        let (op, mode) = match kind {
            WriteKind::Insert => (
                Operation::Insert {
                    table: &self.handle.name,
                    body,
                },
                UpdateMode::Replace,
            ),
            WriteKind::Write(mode, if_match) => (
                Operation::Write {
                    table: &self.handle.name,
                    key: &key,
                    body,
                    mode,
                    if_match,
                },
                mode,
            ),
        };
        let name = op.name();
        let written = match self.handle.execute(op).await {
            Ok(Response::Written(w)) => w,
            Ok(_) => return Err(Error::decode("unexpected answer to a write")),
            Err(e) if e.is_ambiguous() => match sent {
                Some(sent) => {
                    let intent = outcome::Intent::of_body(&sent, mode)?;
                    outcome::resolve(&self.handle, name, vec![intent], e)
                        .await?
                        .pop()
                        .flatten()
                        .ok_or_else(|| Error::decode("a resolved write without its ETag"))?
                }
                None => return Err(e),
            },
            Err(e) => return Err(e),
        };
        target.written(&written);
        Ok(written)
    }

    /// Inserts a new entity; fails with a conflict ([`Error::is_conflict`]) if one
    /// with the same key exists. Pass `&mut entity` to have its ETag updated.
    pub async fn insert(&self, entity: impl WriteTarget<T>) -> Result<Written> {
        self.write(entity, WriteKind::Insert).await
    }

    /// Inserts the entity, or overwrites the stored one whatever its version:
    /// `Merge` keeps stored properties the entity lacks, `Replace` removes them.
    pub async fn upsert(&self, entity: impl WriteTarget<T>, mode: UpdateMode) -> Result<Written> {
        self.write(entity, WriteKind::Write(mode, None)).await
    }

    /// Updates an existing entity. With `IfMatch::ETag` the write applies only if
    /// nobody changed the entity since that ETag was read; otherwise it fails with
    /// [`Error::is_precondition_failed`]. Fails with not-found if there is no entity.
    pub async fn update(
        &self,
        entity: impl WriteTarget<T>,
        mode: UpdateMode,
        if_match: impl Into<IfMatch>,
    ) -> Result<Written> {
        let if_match = if_match.into();
        self.write(entity, WriteKind::Write(mode, Some(&if_match)))
            .await
    }

    /// Deletes an entity; fails with not-found if there is none, or with a
    /// precondition failure if its ETag no longer matches.
    pub async fn delete(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<()> {
        let key = key.into();
        key.validate()?;
        let if_match = if_match.into();
        match self
            .handle
            .execute(Operation::Delete {
                table: &self.handle.name,
                key: &key,
                if_match: &if_match,
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(e)
                if e.is_ambiguous()
                    && self.handle.ambiguous_writes == AmbiguousWrites::ReadBack =>
            {
                let intent = outcome::Intent::Absent(key);
                outcome::resolve(&self.handle, "delete", vec![intent], e)
                    .await
                    .map(drop)
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes an entity if it exists; returns whether it did. A missing entity is
    /// not an error, which makes the call safe to repeat. When an attempt's
    /// answer was lost and the retry finds no entity, it returns `true` (the
    /// lost attempt most likely deleted it), also with
    /// [`AmbiguousWrites::Report`].
    pub async fn delete_if_exists(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<bool> {
        match self.delete(key, if_match).await {
            Ok(()) => Ok(true),
            Err(e) if is_missing_entity(&e) => Ok(false),
            Err(e) if e.status() == Some(404) && e.code() != Some(&ErrorCode::TableNotFound) => {
                Ok(e.is_ambiguous())
            }
            Err(e) => Err(e),
        }
    }

    /// Reads one entity by key; `None` if there is none. Await it, or add
    /// `.select([...])` first to read only some properties.
    pub fn get(&self, key: impl Into<EntityKey>) -> Get<T> {
        Get {
            table: self.clone(),
            key: key.into(),
            select: T::select().map(query::join_select),
        }
    }

    /// A query over the table; see [`Query`].
    pub fn query(&self) -> Query<T> {
        Query::new(self.handle.clone())
    }

    /// An entity group transaction: up to 100 operations on entities of one
    /// partition, applied all or none.
    pub fn transaction(&self) -> Transaction<T> {
        Transaction {
            table: self.clone(),
            ops: Vec::new(),
            row_keys: HashSet::new(),
            size: 0,
        }
    }

    /// Reads an entity, lets `change` modify it, and writes it back on the
    /// condition that nobody changed it in between (optimistic concurrency).
    /// Resolves to the written entity, or `None` if there is no entity with that
    /// key (then `change` is not called).
    ///
    /// When another writer got there first (412), it waits a short random time,
    /// reads the new version and calls `change` again, up to
    /// [`Modify::max_attempts`] rounds (default 16); after that the 412 is
    /// returned ([`Error::is_precondition_failed`]). `change` may thus run more
    /// than once: keep it free of side effects other than on the entity.
    /// Between rounds it waits a random time under a ceiling that starts at
    /// 10 ms and doubles up to 1 s (full jitter), so that writers contending for
    /// one entity spread out instead of colliding again.
    ///
    /// A change that may decline to write is [`try_modify`](Self::try_modify).
    ///
    /// ```no_run
    /// # async fn run(counters: tablekit::TableClient<tablekit::DynamicEntity>) -> tablekit::Result<()> {
    /// use tablekit::{EdmValue, UpdateMode};
    ///
    /// counters
    ///     .modify(("pages", "home"), UpdateMode::Merge, |e| {
    ///         let n = e.get("Hits").and_then(EdmValue::as_i64).unwrap_or(0);
    ///         e.set("Hits", n + 1);
    ///     })
    ///     .max_attempts(50)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn modify<F>(
        &self,
        key: impl Into<EntityKey>,
        mode: UpdateMode,
        change: F,
    ) -> Modify<'_, T, F>
    where
        F: FnMut(&mut T) + Send,
    {
        Modify::new(self, key.into(), mode, change)
    }

    /// [`modify`](Self::modify) with a change that may stop without writing:
    /// `change` returns [`ControlFlow::Continue(())`](ControlFlow::Continue) to
    /// write, or [`ControlFlow::Break(value)`](ControlFlow::Break) to stop, and
    /// the call resolves to [`Modified::Written`], [`Modified::Aborted`] with
    /// that value, or [`Modified::Missing`]. Retries and
    /// [`max_attempts`](Modify::max_attempts) are as for `modify`.
    ///
    /// `ControlFlow` rather than `Result` because declining is not a failure
    /// (a balance too low, a state machine in the wrong state) and needs no
    /// error type; an error of your own travels the same way, as `Break(Err(e))`.
    /// A separate method rather than one generic `modify` because a plain
    /// closure `|e| { ... }` then needs no return value and no annotation.
    ///
    /// ```no_run
    /// # async fn run(accounts: tablekit::TableClient<tablekit::DynamicEntity>) -> tablekit::Result<()> {
    /// use std::ops::ControlFlow;
    /// use tablekit::{EdmValue, UpdateMode, table::Modified};
    ///
    /// let outcome = accounts
    ///     .try_modify(("eu", "alice"), UpdateMode::Merge, |e| {
    ///         let balance = e.get("Balance").and_then(EdmValue::as_i64).unwrap_or(0);
    ///         if balance < 30 {
    ///             return ControlFlow::Break(balance);
    ///         }
    ///         e.set("Balance", balance - 30);
    ///         ControlFlow::Continue(())
    ///     })
    ///     .await?;
    /// match outcome {
    ///     Modified::Written(_) => println!("paid"),
    ///     Modified::Aborted(balance) => println!("only {balance} left"),
    ///     _ => println!("no such account"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_modify<F, B>(
        &self,
        key: impl Into<EntityKey>,
        mode: UpdateMode,
        change: F,
    ) -> Modify<'_, T, F>
    where
        F: FnMut(&mut T) -> ControlFlow<B> + Send,
        B: Send,
    {
        Modify::new(self, key.into(), mode, change)
    }
}

#[derive(Clone, Copy)]
enum WriteKind<'a> {
    Insert,
    Write(UpdateMode, Option<&'a IfMatch>),
}

/// A point read; await it for `Result<Option<T>>`.
#[must_use = "a point read does nothing until awaited"]
pub struct Get<T> {
    table: TableClient<T>,
    key: EntityKey,
    select: Option<String>,
}

impl<T> fmt::Debug for Get<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Get")
            .field("table", &self.table.handle.name)
            .field("key", &self.key)
            .field("select", &self.select)
            .finish()
    }
}

impl<T: TableEntity> Get<T> {
    /// Reads only these properties (the keys and system properties always come).
    pub fn select<I, S>(mut self, properties: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.select = Some(query::join_select(properties));
        self
    }

    /// Sends the read.
    // Not an `async fn`: its arguments would be kept twice in the future,
    // once as captured and once moved into locals.
    #[allow(clippy::manual_async_fn)]
    pub fn send(self) -> impl Future<Output = Result<Option<T>>> + Send {
        async move {
            if let Some(s) = &self.select {
                query::validate_select(s)?;
            }
            let read = self
                .table
                .handle
                .read(&self.key, self.select.as_deref(), false);
            Ok(read.await?.map(|(entity, _)| entity))
        }
    }
}

impl<T: TableEntity> IntoFuture for Get<T> {
    type Output = Result<Option<T>>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}
