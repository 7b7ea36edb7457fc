//! The clients: [`TableServiceClient`] for an account's tables, [`TableClient`]
//! for the entities of one table.

use std::collections::HashSet;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, BoxStream, Stream, StreamExt, TryStreamExt};

use super::handle::AmbiguousWrites;
use super::handle::{is_missing_entity, TableHandle};
use super::outcome;
use super::query::{self, Query, ScanPolicy};
use crate::account::Account;
use crate::backend::{self, Backend, BatchKind, BatchOp, EntityBody, Operation, Response, Written};
use crate::codec::write::write_entity_json;
use crate::entity::{ETag, EntityKey, IfMatch, TableEntity, UpdateMode};
use crate::error::{Error, ErrorCode, Result, ValidationError};
use crate::options::{full_jitter, ClientOptions};
use crate::validate::{self, MAX_BATCH_BYTES, MAX_BATCH_OPERATIONS};

/// A client for the tables of one storage account. Cheap to clone; clones share
/// one connection pool.
///
/// ```no_run
/// # async fn run() -> tablekit::Result<()> {
/// use tablekit::{DynamicEntity, TableServiceClient};
///
/// let service = TableServiceClient::from_connection_string("UseDevelopmentStorage=true")?;
/// let blogs = service.table::<DynamicEntity>("Blogs")?;
/// blogs.create_table_if_not_exists().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TableServiceClient {
    backend: Arc<dyn Backend>,
}

impl fmt::Debug for TableServiceClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableServiceClient")
            .field("backend", &self.backend)
            .finish()
    }
}

impl TableServiceClient {
    /// A client for this account over HTTP, with default options.
    pub fn new(account: Account) -> Result<Self> {
        Self::with_options(account, ClientOptions::default())
    }

    /// A client for this account over HTTP.
    pub fn with_options(account: Account, options: ClientOptions) -> Result<Self> {
        Ok(TableServiceClient {
            backend: backend::connect(account, &options)?,
        })
    }

    /// A client for a fresh, empty, in-memory account: the embedded backend.
    ///
    /// It carries out the same operations as Azure Table Storage, with the
    /// service's rules (key order, ETags and conditions, transactions, paging,
    /// limits, error codes), inside this process: for examples, and for unit
    /// tests of code written on tablekit, with no emulator to run. Each call
    /// makes a new, isolated store; clones of the client share it. Nothing is
    /// persisted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tablekit::Result<()> {
    /// use tablekit::{DynamicEntity, TableServiceClient};
    ///
    /// let service = TableServiceClient::embedded();
    /// let blogs = service.table::<DynamicEntity>("Blogs")?;
    /// blogs.create_table().await?;
    /// blogs.insert(&DynamicEntity::new("Channel9", "Oct-29").with("Rating", 3)).await?;
    /// let read = blogs.get(("Channel9", "Oct-29")).await?.expect("stored");
    /// assert_eq!(read.get("Rating"), Some(&tablekit::EdmValue::Int32(3)));
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn embedded() -> Self {
        TableServiceClient {
            backend: backend::embedded(),
        }
    }

    /// A client for the embedded store kept durably in the file at `path`,
    /// which is created if it does not exist (with any missing folders above
    /// it, as `std::fs::create_dir_all` makes them) and loaded if it does.
    ///
    /// The same store as [`embedded`](TableServiceClient::embedded), with the
    /// same rules, except that every write (and every transaction, as a whole)
    /// is on disk before it is acknowledged: what an `await` returned survives
    /// a crash or a power loss. One process at a time: opening a file that is
    /// open (in this process or another) is an error, as is a file written by a
    /// newer tablekit. Clones of the client share the open file; it is closed
    /// when the last clone is dropped. The whole store is held in memory, and
    /// each write blocks its thread for one `fsync`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tablekit::Result<()> {
    /// use tablekit::{DynamicEntity, TableServiceClient};
    ///
    /// let path = std::env::temp_dir().join(format!("tablekit-doc-{}.redb", std::process::id()));
    /// # let _ = std::fs::remove_file(&path);
    /// {
    ///     let service = TableServiceClient::embedded_at(&path)?;
    ///     let blogs = service.table::<DynamicEntity>("Blogs")?;
    ///     blogs.create_table().await?;
    ///     blogs.insert(&DynamicEntity::new("Channel9", "Oct-29").with("Rating", 3)).await?;
    /// } // the file is closed with the last clone of the client
    /// let service = TableServiceClient::embedded_at(&path)?;
    /// let read = service.table::<DynamicEntity>("Blogs")?.get(("Channel9", "Oct-29")).await?;
    /// assert_eq!(read.expect("kept").get("Rating"), Some(&tablekit::EdmValue::Int32(3)));
    /// # drop(service); std::fs::remove_file(&path).unwrap();
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "durable")]
    #[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
    pub fn embedded_at(path: impl AsRef<std::path::Path>) -> Result<Self> {
        Ok(TableServiceClient {
            backend: backend::embedded_at(path.as_ref())?,
        })
    }

    /// A client from a connection string (see [`Account::from_connection_string`]).
    ///
    /// `UseEmbeddedStorage=true;Path=<file>` is the embedded store kept in that
    /// file, as [`embedded_at`](TableServiceClient::embedded_at): moving an
    /// application between its local file and Azure Table Storage changes only
    /// its connection string. (The path cannot contain `;`.)
    pub fn from_connection_string(s: &str) -> Result<Self> {
        if let Some(path) = backend::embedded_connection(s) {
            #[cfg(feature = "durable")]
            return Self::embedded_at(path?);
            #[cfg(not(feature = "durable"))]
            return Err(crate::backend::needs_durable(path));
        }
        Self::new(Account::from_connection_string(s)?)
    }

    /// Whether this client works on an in-process embedded store
    /// ([`embedded`](TableServiceClient::embedded)) rather than a service over HTTP.
    ///
    /// ```
    /// assert!(tablekit::TableServiceClient::embedded().is_embedded());
    /// ```
    pub fn is_embedded(&self) -> bool {
        // Only the embedded store keeps property bags.
        self.backend.stores_property_bags()
    }

    /// A client for the entities of one table, typed as `T`. The name is checked here.
    pub fn table<T: TableEntity>(&self, name: &str) -> Result<TableClient<T>> {
        validate::table_name(name)?;
        Ok(TableClient {
            handle: TableHandle {
                backend: self.backend.clone(),
                name: Arc::from(name),
                scan_policy: ScanPolicy::default(),
                ambiguous_writes: AmbiguousWrites::default(),
            },
            _t: PhantomData,
        })
    }

    /// Creates a table; fails with a conflict ([`Error::is_conflict`]) if it exists.
    pub async fn create_table(&self, name: &str) -> Result<()> {
        validate::table_name(name)?;
        self.backend
            .execute(Operation::CreateTable { table: name })
            .await?;
        Ok(())
    }

    /// Creates a table unless it exists; returns whether it was created.
    ///
    /// When an attempt's answer was lost and its retry finds the table
    /// existing, the call succeeds and returns `true`: the table is most
    /// likely the lost attempt's, and it exists either way.
    pub async fn create_table_if_not_exists(&self, name: &str) -> Result<bool> {
        match self.create_table(name).await {
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

    /// Deletes a table and all its entities; fails with not-found if there is none.
    pub async fn delete_table(&self, name: &str) -> Result<()> {
        validate::table_name(name)?;
        self.backend
            .execute(Operation::DeleteTable { table: name })
            .await?;
        Ok(())
    }

    /// Deletes a table if it exists; returns whether it did.
    ///
    /// When an attempt's answer was lost and its retry finds no table, the
    /// call succeeds and returns `true`: the lost attempt most likely deleted
    /// it, and it is gone either way.
    pub async fn delete_table_if_exists(&self, name: &str) -> Result<bool> {
        match self.delete_table(name).await {
            Ok(()) => Ok(true),
            // Ambiguous: a lost answer's retry finding nothing most likely
            // found this call's own deletion. Either way the table is gone.
            Err(e) if e.status() == Some(404) => Ok(e.is_ambiguous()),
            Err(e) => Err(e),
        }
    }

    /// Lists the account's tables, following continuation tokens.
    pub fn list_tables(&self) -> ListTables {
        ListTables {
            backend: self.backend.clone(),
            prefix: None,
            page_size: None,
        }
    }
}

/// A listing of tables; see [`TableServiceClient::list_tables`].
#[must_use = "a listing does nothing until streamed or collected"]
pub struct ListTables {
    backend: Arc<dyn Backend>,
    prefix: Option<String>,
    page_size: Option<usize>,
}

impl fmt::Debug for ListTables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListTables")
            .field("prefix", &self.prefix)
            .field("page_size", &self.page_size)
            .finish()
    }
}

impl ListTables {
    /// Only tables whose name starts with `prefix` (case-sensitive).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// At most `n` (1 to 1000) names per request.
    pub fn page_size(mut self, n: usize) -> Self {
        self.page_size = Some(n);
        self
    }

    /// The names, across as many requests as needed.
    pub fn stream(self) -> TableNames {
        struct State {
            backend: Arc<dyn Backend>,
            prefix: Option<String>,
            top: Option<usize>,
            next: Option<String>,
            done: bool,
        }
        if let Some(n) = self.page_size {
            if !(1..=validate::MAX_PAGE_SIZE).contains(&n) {
                let err = Error::invalid(ValidationError::PageSize {
                    value: n,
                    max: validate::MAX_PAGE_SIZE,
                });
                return TableNames(stream::once(async move { Err(err) }).boxed());
            }
        }
        let state = State {
            backend: self.backend,
            prefix: self.prefix,
            top: self.page_size,
            next: None,
            done: false,
        };
        TableNames(
            stream::try_unfold(state, |mut s| async move {
                if s.done {
                    return Ok(None);
                }
                let resp = s
                    .backend
                    .execute(Operation::ListTables {
                        prefix: s.prefix.as_deref(),
                        next_table_name: s.next.as_deref(),
                        top: s.top,
                    })
                    .await?;
                let Response::Tables {
                    names,
                    next_table_name,
                } = resp
                else {
                    return Err(Error::decode("unexpected answer to a table listing"));
                };
                if next_table_name.is_some() && next_table_name == s.next {
                    return Err(Error::decode(
                        "the service answered a table listing with the continuation it was sent",
                    ));
                }
                s.done = next_table_name.is_none();
                s.next = next_table_name;
                Ok(Some((stream::iter(names.into_iter().map(Ok)), s)))
            })
            .try_flatten()
            .boxed(),
        )
    }

    /// All the names.
    pub async fn fetch_all(self) -> Result<Vec<String>> {
        self.stream().try_collect().await
    }
}

/// The table names of a listing; a [`Stream`] of `Result<String>`, from
/// [`ListTables::stream`].
pub struct TableNames(BoxStream<'static, Result<String>>);

impl fmt::Debug for TableNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TableNames")
    }
}

impl Stream for TableNames {
    type Item = Result<String>;
    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}

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
            .backend
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
            .backend
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

    async fn write(&self, mut target: impl WriteTarget<T>, kind: WriteKind<'_>) -> Result<Written> {
        // A backend that stores property bags gets the bag, checked by the same
        // checker as the JSON encoder: the refusals are identical, and the entity
        // is not printed as JSON only to be parsed back.
        let (key, body) = if self.handle.backend.stores_property_bags() {
            let bag = crate::codec::bag::to_bag(target.entity(), false)?;
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
        let written = match self.handle.backend.execute(op).await {
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
            .backend
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

/// What a [`TableClient::modify`] closure returns (`()`: always write) or a
/// [`TableClient::try_modify`] closure returns ([`ControlFlow`]: `Break` stops
/// without writing). Sealed.
pub trait ModifyStep<T>: Send + sealed::Sealed {
    /// What the `modify` call resolves to.
    type Output;
    #[doc(hidden)]
    fn decide(self) -> ControlFlow<Self::Output>;
    #[doc(hidden)]
    fn written(entity: T) -> Self::Output;
    #[doc(hidden)]
    fn missing() -> Self::Output;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for () {}
    impl<B> Sealed for std::ops::ControlFlow<B> {}
}

impl<T> ModifyStep<T> for () {
    type Output = Option<T>;
    fn decide(self) -> ControlFlow<Option<T>> {
        ControlFlow::Continue(())
    }
    fn written(entity: T) -> Option<T> {
        Some(entity)
    }
    fn missing() -> Option<T> {
        None
    }
}

impl<T, B: Send> ModifyStep<T> for ControlFlow<B> {
    type Output = Modified<T, B>;
    fn decide(self) -> ControlFlow<Modified<T, B>> {
        match self {
            ControlFlow::Continue(()) => ControlFlow::Continue(()),
            ControlFlow::Break(b) => ControlFlow::Break(Modified::Aborted(b)),
        }
    }
    fn written(entity: T) -> Modified<T, B> {
        Modified::Written(entity)
    }
    fn missing() -> Modified<T, B> {
        Modified::Missing
    }
}

/// The outcome of a [`TableClient::try_modify`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Modified<T, B> {
    /// The change was written; this is the entity as written, with its new ETag.
    Written(T),
    /// The closure returned `Break(value)`: nothing was written.
    Aborted(B),
    /// There is no entity with that key; the closure was not called.
    Missing,
}

impl<T, B> Modified<T, B> {
    /// The written entity, if the change was written.
    pub fn written(self) -> Option<T> {
        match self {
            Modified::Written(e) => Some(e),
            _ => None,
        }
    }

    /// The closure's `Break` value, if it stopped.
    pub fn aborted(self) -> Option<B> {
        match self {
            Modified::Aborted(b) => Some(b),
            _ => None,
        }
    }
}

/// A read-modify-write in progress; see [`TableClient::modify`] and
/// [`TableClient::try_modify`]. Await it, or set
/// [`max_attempts`](Self::max_attempts) first.
#[must_use = "modify does nothing until awaited"]
pub struct Modify<'a, T, F> {
    table: &'a TableClient<T>,
    key: EntityKey,
    mode: UpdateMode,
    change: F,
    max_attempts: u32,
}

impl<T, F> fmt::Debug for Modify<'_, T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Modify")
            .field("table", &self.table.handle.name)
            .field("key", &self.key)
            .field("mode", &self.mode)
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}

impl<'a, T, F> Modify<'a, T, F> {
    fn new(table: &'a TableClient<T>, key: EntityKey, mode: UpdateMode, change: F) -> Self {
        Modify {
            table,
            key,
            mode,
            change,
            max_attempts: 16,
        }
    }
}

impl<'a, T, F, R> Modify<'a, T, F>
where
    T: TableEntity,
    F: FnMut(&mut T) -> R + Send + 'a,
    R: ModifyStep<T>,
{
    const BACKOFF_BASE: Duration = Duration::from_millis(10);
    const BACKOFF_MAX: Duration = Duration::from_secs(1);

    /// How many read-change-write rounds to try before giving up with the
    /// last 412 (default 16; values below 1 count as 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Runs the read-modify-write.
    pub async fn send(mut self) -> Result<R::Output> {
        self.key.validate()?;
        let mut attempt = 0;
        loop {
            let Some((mut entity, etag)) = self.table.handle.get_with_etag(&self.key, None).await?
            else {
                return Ok(R::missing());
            };
            if let ControlFlow::Break(stop) = (self.change)(&mut entity).decide() {
                return Ok(stop);
            }
            let if_match = etag.map_or(IfMatch::Any, IfMatch::ETag);
            match self.table.update(&mut entity, self.mode, if_match).await {
                Ok(_) => return Ok(R::written(entity)),
                Err(e) if e.is_precondition_failed() && attempt + 1 < self.max_attempts => {
                    tokio::time::sleep(full_jitter(Self::BACKOFF_BASE, Self::BACKOFF_MAX, attempt))
                        .await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl<'a, T, F, R> IntoFuture for Modify<'a, T, F>
where
    T: TableEntity,
    F: FnMut(&mut T) -> R + Send + 'a,
    R: ModifyStep<T> + 'a,
    R::Output: Send,
{
    type Output = Result<R::Output>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

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
    pub async fn send(self) -> Result<Option<T>> {
        if let Some(s) = &self.select {
            query::validate_select(s)?;
        }
        Ok(self
            .table
            .handle
            .get_with_etag(&self.key, self.select.as_deref())
            .await?
            .map(|(e, _)| e))
    }
}

impl<T: TableEntity> IntoFuture for Get<T> {
    type Output = Result<Option<T>>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// An entity group transaction being built; see [`TableClient::transaction`].
///
/// Each operation is checked as it is added (keys, properties, one partition,
/// one operation per RowKey, at most 100 operations and 4 MiB), so a rule broken
/// by the third operation is reported by the call that added it, with its index.
///
/// ```no_run
/// # async fn run(table: tablekit::TableClient<tablekit::DynamicEntity>) -> tablekit::Result<()> {
/// use tablekit::{DynamicEntity, IfMatch};
/// let mut tx = table.transaction();
/// tx.insert(&DynamicEntity::new("p1", "a").with("N", 1))?;
/// tx.delete(("p1", "b"), IfMatch::Any)?;
/// let result = tx.send().await?;
/// assert!(result.etag(0).is_some());
/// # Ok(()) }
/// ```
#[must_use = "a transaction does nothing until sent"]
pub struct Transaction<T> {
    table: TableClient<T>,
    ops: Vec<BatchOp>,
    row_keys: HashSet<String>,
    size: usize,
}

impl<T> fmt::Debug for Transaction<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction")
            .field("table", &self.table.handle.name)
            .field("operations", &self.ops.len())
            .finish()
    }
}

/// Framing bytes one operation adds to a transaction payload, beyond its body
/// (part headers, request line with the URL): an upper estimate.
const OP_OVERHEAD: usize = 600;

impl<T: TableEntity> Transaction<T> {
    fn push_op(
        &mut self,
        kind: BatchKind,
        key: EntityKey,
        body: Option<Vec<u8>>,
        bag: Option<Box<crate::DynamicEntity>>,
    ) -> Result<&mut Self> {
        let index = self.ops.len();
        let fail = |reason: String| {
            Err(Error::invalid(ValidationError::Batch {
                index: Some(index),
                reason,
            }))
        };
        if index >= MAX_BATCH_OPERATIONS {
            return fail(format!(
                "a transaction holds at most {MAX_BATCH_OPERATIONS} operations"
            ));
        }
        // Keys were validated by the caller: the encoder for entities, `delete` for keys.
        if let Some(first) = self.ops.first() {
            if first.key.partition_key != key.partition_key {
                return fail(format!(
                    "PartitionKey {:?} differs from the transaction's {:?}; a transaction spans one partition",
                    key.partition_key, first.key.partition_key
                ));
            }
        }
        if self.row_keys.contains(&key.row_key) {
            return fail(format!(
                "RowKey {:?} already has an operation; a transaction holds one operation per entity",
                key.row_key
            ));
        }
        let size = self.size
            + body.as_ref().map_or(0, Vec::len)
            + key.partition_key.len() * 3
            + key.row_key.len() * 3
            + OP_OVERHEAD;
        if size > MAX_BATCH_BYTES {
            return fail(format!("the payload would exceed {MAX_BATCH_BYTES} bytes"));
        }
        self.size = size;
        self.row_keys.insert(key.row_key.clone());
        self.ops.push(BatchOp {
            kind,
            key,
            body,
            bag,
        });
        Ok(self)
    }

    fn push_entity<E: TableEntity>(&mut self, kind: BatchKind, entity: &E) -> Result<&mut Self> {
        let index = self.ops.len();
        let at_index = |e: Error| match e.validation() {
            Some(v) => Error::invalid(ValidationError::Batch {
                index: Some(index),
                reason: v.to_string(),
            }),
            None => e,
        };
        let (key, body) = encode(entity).map_err(at_index)?;
        // The JSON is kept either way: the payload limit is measured on it. A
        // backend that stores bags also gets the bag, and parses nothing.
        let bag = if self.table.handle.backend.stores_property_bags() {
            Some(Box::new(
                crate::codec::bag::to_bag(entity, true).map_err(at_index)?,
            ))
        } else {
            None
        };
        self.push_op(kind, key, Some(body), bag)
    }

    /// Adds an insert.
    pub fn insert(&mut self, entity: &T) -> Result<&mut Self> {
        self.push_entity(BatchKind::Insert, entity)
    }

    /// Adds an upsert (insert or merge/replace, unconditionally).
    pub fn upsert(&mut self, entity: &T, mode: UpdateMode) -> Result<&mut Self> {
        self.push_entity(BatchKind::Upsert(mode), entity)
    }

    /// Adds an update of an existing entity under a condition.
    pub fn update(
        &mut self,
        entity: &T,
        mode: UpdateMode,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        self.push_entity(BatchKind::Update(mode, if_match.into()), entity)
    }

    /// Adds a delete.
    pub fn delete(
        &mut self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let key = key.into();
        if let Err(v) = key.validate() {
            return Err(Error::invalid(ValidationError::Batch {
                index: Some(self.ops.len()),
                reason: v.to_string(),
            }));
        }
        self.push_op(BatchKind::Delete(if_match.into()), key, None, None)
    }

    /// Adds an operation built apart from this transaction: a
    /// [`TransactionOp`] of any entity type, such as those a design pattern
    /// plans, checked like the operations added by the other methods.
    /// Returns the operation's index in the transaction (for
    /// [`TransactionResult::etag`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tablekit::Result<()> {
    /// use tablekit::{DynamicEntity, IfMatch, TableServiceClient, UpdateMode, table::TransactionOp};
    ///
    /// let service = TableServiceClient::embedded();
    /// let table = service.table::<DynamicEntity>("Employees")?;
    /// table.create_table().await?;
    /// let mut tx = table.transaction();
    /// tx.insert(&DynamicEntity::new("Sales", "empid_000223").with("LastName", "Jones"))?;
    /// let department = DynamicEntity::new("Sales", "Department").with("ManagerId", "000223");
    /// let at = tx.push(TransactionOp::upsert(&department, UpdateMode::Merge)?)?;
    /// assert_eq!(at, 1);
    /// // The rules hold for pushed operations too: one operation per entity.
    /// let again = TransactionOp::delete(("Sales", "Department"), IfMatch::Any)?;
    /// assert!(tx.push(again).unwrap_err().is_invalid_input());
    /// let result = tx.send().await?;
    /// assert!(result.etag(1).is_some());
    /// # Ok(()) }
    /// ```
    pub fn push(&mut self, op: TransactionOp) -> Result<usize> {
        let index = self.ops.len();
        match &op {
            TransactionOp::Insert(e) => self.push_entity(BatchKind::Insert, e),
            TransactionOp::Upsert(e, mode) => self.push_entity(BatchKind::Upsert(*mode), e),
            TransactionOp::Update(e, mode, if_match) => {
                self.push_entity(BatchKind::Update(*mode, if_match.clone()), e)
            }
            TransactionOp::Delete(key, if_match) => self.delete(key.clone(), if_match.clone()),
        }?;
        Ok(index)
    }

    /// Adds each operation in order, as [`push`](Self::push) does; returns
    /// the indexes they took. The first one refused stops the call, with
    /// its index in the error; those before it stay added.
    pub fn extend(
        &mut self,
        ops: impl IntoIterator<Item = TransactionOp>,
    ) -> Result<std::ops::Range<usize>> {
        let start = self.ops.len();
        for op in ops {
            self.push(op)?;
        }
        Ok(start..self.ops.len())
    }

    /// The number of operations added.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no operation was added.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Sends the transaction. On failure nothing was applied, and the error's
    /// [`Error::batch_index`] names the operation the service rejected.
    ///
    /// A transaction whose answer is lost (a dropped or reset connection, a
    /// timeout, a 500) may have been applied. It is resent like any write: a
    /// batch that holds an insert or a conditional operation is refused as a
    /// whole the second time, and one of upserts only leaves the same entities.
    /// If the call then fails, its outcome is settled by reading every entity
    /// back (see [`AmbiguousWrites`]): all of them as the transaction left
    /// them means it was applied, and the call succeeds with their ETags;
    /// anything else is an [ambiguous](Error::is_ambiguous) error with the
    /// entities found ([`Error::read_back`]), since the service applies a
    /// transaction whole or not at all and another writer may have changed
    /// some of them since.
    pub async fn send(self) -> Result<TransactionResult> {
        if self.ops.is_empty() {
            return Err(Error::invalid(ValidationError::Batch {
                index: None,
                reason: "a transaction needs at least one operation".into(),
            }));
        }
        let handle = &self.table.handle;
        // What each operation sent, kept for a read-back. A backend that stores
        // bags answers every write for certain, so nothing is kept for it.
        let sent: Option<Vec<outcome::SentOp>> = (handle.ambiguous_writes
            == AmbiguousWrites::ReadBack
            && !handle.backend.stores_property_bags())
        .then(|| self.ops.iter().map(outcome::SentOp::of).collect());
        let result = handle
            .backend
            .execute(Operation::Transaction {
                table: &handle.name,
                ops: self.ops,
            })
            .await;
        match result {
            Ok(Response::Transaction(etags)) => Ok(TransactionResult {
                etags,
                confirmed_by_read_back: false,
            }),
            Ok(_) => Err(Error::decode("unexpected answer to a transaction")),
            Err(e) if e.is_ambiguous() && sent.is_some() => {
                let intents = sent
                    .iter()
                    .flatten()
                    .map(outcome::SentOp::intent)
                    .collect::<Result<Vec<_>>>()?;
                let written = outcome::resolve(handle, "transaction", intents, e).await?;
                Ok(TransactionResult {
                    etags: written.into_iter().map(|w| w.map(|w| w.etag)).collect(),
                    confirmed_by_read_back: true,
                })
            }
            Err(e) => Err(e),
        }
    }
}

/// One write of an entity group transaction, built without a client, for
/// any entity type: what a design pattern plans, and what code that composes
/// writes of several types hands to [`Transaction::push`]. The entity is
/// held as its property bag ([`DynamicEntity`](crate::DynamicEntity)), with
/// its keys and typed values checked when it is built; its ETag is not kept
/// (say the condition with [`IfMatch`]).
///
/// ```
/// use tablekit::{DynamicEntity, IfMatch, UpdateMode, table::TransactionOp};
///
/// let op = TransactionOp::update(
///     &DynamicEntity::new("Sales", "Department").with("EmployeeCount", 3),
///     UpdateMode::Merge,
///     IfMatch::Any,
/// )?;
/// assert_eq!(op.key().row_key, "Department");
/// assert!(TransactionOp::insert(&DynamicEntity::new("Sales", "a/b")).is_err());
/// # Ok::<(), tablekit::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TransactionOp {
    /// Insert the entity; the transaction fails if it exists (409).
    Insert(crate::DynamicEntity),
    /// Insert the entity, or merge it into / replace the stored one.
    Upsert(crate::DynamicEntity, UpdateMode),
    /// Merge into or replace the stored entity under the condition.
    Update(crate::DynamicEntity, UpdateMode, IfMatch),
    /// Delete the entity under the condition.
    Delete(EntityKey, IfMatch),
}

impl TransactionOp {
    fn bag<E: TableEntity>(entity: &E) -> Result<crate::DynamicEntity> {
        let mut bag = crate::to_dynamic(entity)?;
        bag.etag = None;
        bag.timestamp = None;
        Ok(bag)
    }

    /// An insert of `entity`.
    pub fn insert<E: TableEntity>(entity: &E) -> Result<Self> {
        Ok(TransactionOp::Insert(Self::bag(entity)?))
    }

    /// An upsert of `entity`.
    pub fn upsert<E: TableEntity>(entity: &E, mode: UpdateMode) -> Result<Self> {
        Ok(TransactionOp::Upsert(Self::bag(entity)?, mode))
    }

    /// An update of `entity` under `if_match`.
    pub fn update<E: TableEntity>(
        entity: &E,
        mode: UpdateMode,
        if_match: impl Into<IfMatch>,
    ) -> Result<Self> {
        Ok(TransactionOp::Update(
            Self::bag(entity)?,
            mode,
            if_match.into(),
        ))
    }

    /// A delete of the entity `key` under `if_match`.
    pub fn delete(key: impl Into<EntityKey>, if_match: impl Into<IfMatch>) -> Result<Self> {
        let key = key.into();
        key.validate()?;
        Ok(TransactionOp::Delete(key, if_match.into()))
    }

    /// The key of the entity the operation writes.
    pub fn key(&self) -> EntityKey {
        match self {
            TransactionOp::Insert(e)
            | TransactionOp::Upsert(e, _)
            | TransactionOp::Update(e, ..) => EntityKey::new(&e.partition_key, &e.row_key),
            TransactionOp::Delete(key, _) => key.clone(),
        }
    }
}

/// The outcome of a successful transaction.
#[derive(Debug, Clone)]
pub struct TransactionResult {
    etags: Vec<Option<ETag>>,
    confirmed_by_read_back: bool,
}

impl TransactionResult {
    /// Whether the transaction's own answer was lost and its success was
    /// confirmed by reading every entity back instead (as
    /// [`Written::confirmed_by_read_back`](crate::table::Written::confirmed_by_read_back)).
    pub fn confirmed_by_read_back(&self) -> bool {
        self.confirmed_by_read_back
    }

    /// The new ETag written by operation `index` (`None` for deletes).
    pub fn etag(&self, index: usize) -> Option<&ETag> {
        self.etags.get(index).and_then(Option::as_ref)
    }

    /// The ETags of all operations, in order.
    pub fn etags(&self) -> &[Option<ETag>] {
        &self.etags
    }
}
