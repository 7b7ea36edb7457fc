//! The intra-partition secondary index pattern (design guide §3.1): each entity
//! is stored once under its own RowKey and once more per index, under a RowKey
//! made of the index's prefix and the indexed value, all in its partition, and
//! every write changes all the copies in one entity group transaction.
//!
//! * An [`Index`] is declared once per entity type: a name, a RowKey prefix
//!   (`email_`) and a key function (`|e| e.email.to_lowercase()`), optionally
//!   with a smaller projection type for its copies ([`Index::projected`]).
//! * An [`IndexedTable`] wraps a `TableClient<T>` with its indexes and writes
//!   and reads through them:
//!
//! | operation | requests |
//! |---|---|
//! | [`insert`](IndexedTable::insert) | 1 transaction: insert of every copy |
//! | [`update`](IndexedTable::update) (value read before) | 1 transaction: the entity updated under its ETag; each copy replaced, or deleted and inserted under its new key when the indexed value changed |
//! | [`delete`](IndexedTable::delete) (value read before) | 1 transaction: the entity deleted under its ETag, every copy deleted |
//! | [`modify`](IndexedTable::modify), [`upsert`](IndexedTable::upsert), [`delete_key`](IndexedTable::delete_key) | 1 point read + 1 transaction, again from the read on a concurrent change (412/409) |
//! | [`get`](IndexedTable::get), [`lookup`](IndexedTable::lookup) | 1 point read |
//! | [`list`](IndexedTable::list), [`list_primary`](IndexedTable::list_primary) | 1 range query (one request per page of results) |
//!
//! A transaction is all or nothing, so a failed write leaves every copy as it
//! was; the entity's ETag guards the whole transaction, so a writer that read
//! an old version cannot overwrite a newer one or leave a copy of an old value.
//!
//! # Keys and copies
//!
//! The entity's own RowKey (from its derive, say `empid_{employee_id:06}`) is
//! the primary copy. An index copy holds the entity's properties (or its
//! projection's) and one more, [`PRIMARY_ROW_KEY`], the RowKey of the primary
//! copy, from which the copy is read back as the entity type. Index prefixes
//! must not be prefixes of each other nor of any primary RowKey, or one index's
//! range would return another's rows: both are checked.
//!
//! Azurite caps keys at 512 characters (the service allows 1 KiB), so a long
//! indexed value that tablekit accepts may still be refused there.
//!
//! An index value is unique: inserting an entity whose indexed value is taken
//! fails with a conflict ([`tablekit::Error::is_conflict`]) and writes nothing.
//! RowKeys compare ordinally (`email_A…` is not between `email_a` and `email_b`):
//! normalise values in the key function, for example to lower case.
//!
//! ```
//! use tablekit::{ETag, TableEntity, TableServiceClient};
//! use tablekit_patterns::index::{Index, IndexedTable};
//! use tablekit_patterns::range::KeyRange;
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
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded(); // or ::from_connection_string(..)
//! # service.create_table("Employees").await?;
//! let by_email = Index::new("email", "email_", |e: &Employee| e.email.to_lowercase());
//! let employees = IndexedTable::new(service.table::<Employee>("Employees")?)?
//!     .with_index(&by_email)?;
//!
//! let mut jones = Employee {
//!     department: "Sales".into(),
//!     employee_id: 223,
//!     last_name: "Jones".into(),
//!     email: "jonesj@contoso.com".into(),
//!     etag: None,
//! };
//! employees.insert(&mut jones).await?; // one transaction: empid_000223 and email_jonesj@contoso.com
//!
//! let found = employees.lookup(&by_email, "Sales", "jonesj@contoso.com").await?;
//! assert_eq!(found.map(|e| e.employee_id), Some(223));
//! let a_to_b = employees.list(&by_email, "Sales", KeyRange::prefix("a")).await?;
//! # let _ = a_to_b;
//!
//! // Read, change, write under the ETag; again from the read if someone else wrote first.
//! employees
//!     .modify(("Sales", "empid_000223"), |e| e.email = "jj@contoso.com".into())
//!     .await?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use tablekit::{
    codec::to_dynamic, entity::RawEntity, error::DecodeError, table::TransactionOp, DynamicEntity,
    EdmValue, EntityKey, Error, IfMatch, Result, TableClient, TableEntity, UpdateMode,
};

use crate::error::refused;
use crate::hook::BeforeWrite;
use crate::plan::Plan;
use crate::range::KeyRange;

/// The property of an index copy that holds the RowKey of the entity's primary
/// copy. An entity type must not have a property of this name.
pub const PRIMARY_ROW_KEY: &str = "PrimaryRowKey";

/// How many times the read-then-write operations start again after another
/// writer changed the entity between their read and their write.
pub const MAX_ATTEMPTS: usize = 16;

/// The most indexes one entity type can have: an update that changes every
/// indexed value sends 1 + 2 × indexes operations, and a transaction holds 100.
pub const MAX_INDEXES: usize = 49;

type KeyFn<T> = dyn Fn(&T) -> String + Send + Sync;
type ProjectFn<T> = dyn Fn(&T) -> Result<DynamicEntity> + Send + Sync;

struct IndexDef<T> {
    name: String,
    prefix: String,
    key: Arc<KeyFn<T>>,
    project: Box<ProjectFn<T>>,
}

/// A secondary index of entity type `T` whose copies are stored as `P` (`T`
/// itself unless [`projected`](Index::projected)). Cheap to clone.
///
/// ```
/// use tablekit::{DynamicEntity, EdmValue};
/// use tablekit_patterns::index::Index;
///
/// let by_email = Index::new("email", "email_", |e: &DynamicEntity| match e.get("Email") {
///     Some(EdmValue::String(s)) => s.to_lowercase(),
///     _ => String::new(),
/// });
/// let e = DynamicEntity::new("Sales", "empid_000223").with("Email", "JonesJ@contoso.com");
/// assert_eq!(by_email.row_key(&e), "email_jonesj@contoso.com");
/// assert_eq!(by_email.row_key_of("jonesj@contoso.com"), "email_jonesj@contoso.com");
/// ```
pub struct Index<T, P = T> {
    def: Arc<IndexDef<T>>,
    _copy: PhantomData<fn() -> P>,
}

impl<T, P> Clone for Index<T, P> {
    fn clone(&self) -> Self {
        Index {
            def: self.def.clone(),
            _copy: PhantomData,
        }
    }
}

impl<T, P> fmt::Debug for Index<T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Index")
            .field("name", &self.def.name)
            .field("prefix", &self.def.prefix)
            .field("copy", &std::any::type_name::<P>())
            .finish()
    }
}

impl<T: TableEntity> Index<T, T> {
    /// An index named `name` whose copies have the RowKey `prefix` + `key(entity)`
    /// and hold every property of the entity.
    pub fn new(
        name: impl Into<String>,
        prefix: impl Into<String>,
        key: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> Self {
        Index {
            def: Arc::new(IndexDef {
                name: name.into(),
                prefix: prefix.into(),
                key: Arc::new(key),
                project: Box::new(|e: &T| to_dynamic(e)),
            }),
            _copy: PhantomData,
        }
    }
}

impl<T: TableEntity, P> Index<T, P> {
    /// The same index with copies that hold only the projection `project(entity)`
    /// (the guide: "the email copies can leave out Age"). The projection's keys
    /// are replaced by the copy's, so it may have any key template; it is read
    /// back with the primary copy's RowKey.
    pub fn projected<Q: TableEntity>(
        self,
        project: impl Fn(&T) -> Q + Send + Sync + 'static,
    ) -> Index<T, Q> {
        Index {
            def: Arc::new(IndexDef {
                name: self.def.name.clone(),
                prefix: self.def.prefix.clone(),
                key: self.def.key.clone(),
                project: Box::new(move |e: &T| to_dynamic(&project(e))),
            }),
            _copy: PhantomData,
        }
    }

    /// The index's name.
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// The RowKey prefix of its copies.
    pub fn prefix(&self) -> &str {
        &self.def.prefix
    }

    /// The RowKey of `entity`'s copy in this index.
    pub fn row_key(&self, entity: &T) -> String {
        format!("{}{}", self.def.prefix, (self.def.key)(entity))
    }

    /// The RowKey of the copy whose indexed value is `value`.
    pub fn row_key_of(&self, value: &str) -> String {
        format!("{}{value}", self.def.prefix)
    }
}

/// A table of `T` entities kept with their secondary-index copies; see the
/// [module docs](self). Cheap to clone.
pub struct IndexedTable<T> {
    table: TableClient<T>,
    raw: TableClient<DynamicEntity>,
    primary_prefix: String,
    indexes: Vec<Arc<IndexDef<T>>>,
    before_write: BeforeWrite,
}

impl<T> Clone for IndexedTable<T> {
    fn clone(&self) -> Self {
        IndexedTable {
            table: self.table.clone(),
            raw: self.raw.clone(),
            primary_prefix: self.primary_prefix.clone(),
            indexes: self.indexes.clone(),
            before_write: self.before_write.clone(),
        }
    }
}

impl<T> fmt::Debug for IndexedTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexedTable")
            .field("table", &self.table.name())
            .field("primary_prefix", &self.primary_prefix)
            .field(
                "indexes",
                &self
                    .indexes
                    .iter()
                    .map(|i| (&i.name, &i.prefix))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

fn overlaps(a: &str, b: &str) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

impl<T: TableEntity> IndexedTable<T> {
    /// The entities of `table`, with no index yet. Their own RowKeys all
    /// start with the literal text of the type's RowKey template
    /// ([`TableEntity::row_key_prefix`]: `empid_` for the derive's
    /// `row_key = "empid_{employee_id:06}"`), which the index copies must not
    /// share. Refused when the template starts with a field: use
    /// [`with_primary_prefix`](Self::with_primary_prefix) for such a type or
    /// for a [`DynamicEntity`].
    pub fn new(table: TableClient<T>) -> Result<Self> {
        let prefix = T::row_key_prefix();
        if prefix.is_empty() {
            return Err(refused(
                "index",
                "the entity type's RowKey template starts with a field: the primary copies need a RowKey prefix of their own (row_key = \"empid_{..}\"), or give one with IndexedTable::with_primary_prefix",
            ));
        }
        Ok(Self::unchecked(table, prefix))
    }

    /// The entities of `table`, whose own RowKeys all start with
    /// `primary_prefix`, for a type whose derive does not say it (a
    /// [`DynamicEntity`], a hand-written impl). Refused when the type's
    /// derive names another prefix, or the prefix is empty.
    pub fn with_primary_prefix(
        table: TableClient<T>,
        primary_prefix: impl Into<String>,
    ) -> Result<Self> {
        let primary_prefix = primary_prefix.into();
        let derived = T::row_key_prefix();
        if primary_prefix.is_empty() || (!derived.is_empty() && derived != primary_prefix) {
            return Err(refused(
                "index",
                format!(
                    "primary prefix {primary_prefix:?}: the entity type's RowKeys start with {derived:?}"
                ),
            ));
        }
        Ok(Self::unchecked(table, primary_prefix))
    }

    fn unchecked(table: TableClient<T>, primary_prefix: impl Into<String>) -> Self {
        IndexedTable {
            raw: table.with_type::<DynamicEntity>(),
            table,
            primary_prefix: primary_prefix.into(),
            indexes: Vec::new(),
            before_write: BeforeWrite::default(),
        }
    }

    /// Runs `hook` with the attempt number (1 first) after the read of
    /// [`upsert`](Self::upsert), [`delete_key`](Self::delete_key) and
    /// [`modify`](Self::modify) and before their transaction: for tracing
    /// retries, and in tests the exact place to let another client write.
    #[doc(hidden)]
    pub fn step_hook<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(usize) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<()>> + Send + 'static,
    {
        self.before_write = BeforeWrite::new(hook);
        self
    }

    /// Adds an index. Fails if its prefix is empty, overlaps the primary prefix
    /// or another index's, or if there would be more than [`MAX_INDEXES`]
    /// (an update of every indexed value must fit one transaction).
    pub fn with_index<P>(mut self, index: &Index<T, P>) -> Result<Self> {
        let def = &index.def;
        if def.prefix.is_empty() {
            return Err(refused(
                "index",
                format!("index {:?} needs a RowKey prefix", def.name),
            ));
        }
        if overlaps(&def.prefix, &self.primary_prefix) {
            return Err(refused(
                "index",
                format!(
                    "index {:?}: prefix {:?} overlaps the primary prefix {:?}",
                    def.name, def.prefix, self.primary_prefix
                ),
            ));
        }
        if let Some(other) = self
            .indexes
            .iter()
            .find(|o| overlaps(&o.prefix, &def.prefix))
        {
            return Err(refused(
                "index",
                format!(
                    "index {:?}: prefix {:?} overlaps index {:?}'s {:?}",
                    def.name, def.prefix, other.name, other.prefix
                ),
            ));
        }
        if self.indexes.len() + 1 > MAX_INDEXES {
            return Err(refused("index", format!(
                "at most {MAX_INDEXES} indexes: an update changing every indexed value sends 1 + 2 x indexes operations, and a transaction holds 100"
            )));
        }
        self.indexes.push(def.clone());
        Ok(self)
    }

    /// The typed table client of the primary copies.
    pub fn table(&self) -> &TableClient<T> {
        &self.table
    }

    /// How many copies each entity has (itself and one per index).
    pub fn copies(&self) -> usize {
        1 + self.indexes.len()
    }

    fn primary(&self, entity: &T) -> Result<DynamicEntity> {
        self.keys(entity)?;
        let mut d = to_dynamic(entity)?;
        d.etag = None;
        Ok(d)
    }

    /// The entity's keys, its RowKey checked against the primary prefix.
    fn keys(&self, entity: &T) -> Result<EntityKey> {
        let key = entity.key();
        if !key.row_key.starts_with(&self.primary_prefix) {
            return Err(refused(
                "index",
                format!(
                    "RowKey {:?} does not start with the primary prefix {:?}",
                    key.row_key, self.primary_prefix
                ),
            ));
        }
        Ok(key)
    }

    fn copy(&self, def: &IndexDef<T>, entity: &T, primary: &EntityKey) -> Result<DynamicEntity> {
        let mut c = (def.project)(entity)?;
        c.partition_key = primary.partition_key.clone();
        c.row_key = format!("{}{}", def.prefix, (def.key)(entity));
        c.etag = None;
        c.set(PRIMARY_ROW_KEY, primary.row_key.clone());
        Ok(c)
    }

    /// The insert of the entity and of every index copy, planned: the
    /// operations [`insert`](Self::insert) sends, the entity first, for a
    /// transaction composed with other writes of its partition
    /// ([`crate::plan`]). A taken key (the entity's or an indexed value) makes
    /// the transaction fail with a conflict.
    pub fn plan_insert(&self, entity: &T) -> Result<Plan<'static>> {
        let mut plan = Plan::new();
        plan.push(&self.raw, TransactionOp::Insert(self.primary(entity)?))?;
        plan.and(self.plan_insert_copies(entity)?)
    }

    /// The inserts of the index copies alone, for an entity whose own row a
    /// pattern that stores it differently writes (the parts of a
    /// [wide entity](crate::wide::WideTable::plan_insert)): each copy names
    /// the entity's RowKey as its [`PRIMARY_ROW_KEY`].
    pub fn plan_insert_copies(&self, entity: &T) -> Result<Plan<'static>> {
        let primary = self.keys(entity)?;
        let mut plan = Plan::new();
        for def in &self.indexes {
            plan.push(
                &self.raw,
                TransactionOp::Insert(self.copy(def, entity, &primary)?),
            )?;
        }
        Ok(plan)
    }

    /// Inserts the entity and its index copies in one transaction. A taken key
    /// (the entity's or an indexed value) fails with a conflict and writes
    /// nothing. Sets the entity's ETag.
    pub async fn insert(&self, entity: &mut T) -> Result<()> {
        crate::trace::traced(
            "IndexedTable",
            "insert",
            Some(self.table.name()),
            async move {
                let key = entity.key();
                let done = self.plan_insert(entity)?.send().await?;
                if let Some(etag) = done.etag(&key) {
                    entity.set_etag(etag.clone());
                }
                Ok(())
            },
        )
        .await
    }

    /// The replacement of `current` (the value as read, whose indexed values
    /// say which copies exist) by `new`, planned: the entity replaced under
    /// `if_match` (a 412 or 404 there means the read is stale), each copy
    /// replaced, or deleted and inserted under its new key when its indexed
    /// value changed. The operations [`update`](Self::update) sends.
    pub fn plan_update(
        &self,
        current: &T,
        new: &T,
        if_match: impl Into<IfMatch>,
    ) -> Result<Plan<'static>> {
        let old = self.primary(current)?;
        let primary = self.primary(new)?;
        if old.partition_key != primary.partition_key || old.row_key != primary.row_key {
            return Err(refused(
                "index",
                format!(
                    "an update keeps the entity's key ({:?}, {:?}); delete and insert to move it",
                    old.partition_key, old.row_key
                ),
            ));
        }
        let mut plan = Plan::new();
        let copies = self
            .indexes
            .iter()
            .map(|def| Ok((def, self.copy(def, new, &primary.key())?)))
            .collect::<Result<Vec<_>>>()?;
        let pk = primary.partition_key.clone();
        plan.push(
            &self.raw,
            TransactionOp::Update(primary, UpdateMode::Replace, if_match.into()),
        )?;
        for (def, copy) in copies {
            let old_key = format!("{}{}", def.prefix, (def.key)(current));
            if old_key == copy.row_key {
                plan.push(&self.raw, TransactionOp::Upsert(copy, UpdateMode::Replace))?;
            } else {
                plan.push(
                    &self.raw,
                    TransactionOp::Delete(EntityKey::new(pk.as_str(), old_key), IfMatch::Any),
                )?;
                plan.push(&self.raw, TransactionOp::Insert(copy))?;
            }
        }
        Ok(plan)
    }

    /// Replaces `current` (the value as read, whose indexed values say which
    /// copies exist) with `new` in one transaction, on the condition `if_match`
    /// on the primary copy (use the ETag `current` was read with). A copy whose
    /// indexed value changed is deleted and inserted under its new key; a
    /// conflict means the new value is taken. Sets `new`'s ETag.
    pub async fn update(
        &self,
        current: &T,
        new: &mut T,
        if_match: impl Into<IfMatch>,
    ) -> Result<()> {
        crate::trace::traced(
            "IndexedTable",
            "update",
            Some(self.table.name()),
            async move {
                let key = new.key();
                let done = self.plan_update(current, new, if_match)?.send().await?;
                if let Some(etag) = done.etag(&key) {
                    new.set_etag(etag.clone());
                }
                Ok(())
            },
        )
        .await
    }

    /// The delete of `current` (the value as read) under `if_match` and of
    /// its copies, planned: the operations [`delete`](Self::delete) sends.
    pub fn plan_delete(&self, current: &T, if_match: impl Into<IfMatch>) -> Result<Plan<'static>> {
        let primary = self.primary(current)?;
        let mut plan = Plan::new();
        plan.push(
            &self.raw,
            TransactionOp::Delete(
                EntityKey::new(primary.partition_key.as_str(), primary.row_key.as_str()),
                if_match.into(),
            ),
        )?;
        for def in &self.indexes {
            let key = EntityKey::new(
                primary.partition_key.as_str(),
                format!("{}{}", def.prefix, (def.key)(current)),
            );
            key.validate()?;
            plan.push(&self.raw, TransactionOp::Delete(key, IfMatch::Any))?;
        }
        Ok(plan)
    }

    /// Deletes `current` (the value as read) and its copies in one transaction,
    /// on the condition `if_match` on the primary copy.
    pub async fn delete(&self, current: &T, if_match: impl Into<IfMatch>) -> Result<()> {
        crate::trace::traced(
            "IndexedTable",
            "delete",
            Some(self.table.name()),
            async move { self.plan_delete(current, if_match)?.send().await.map(drop) },
        )
        .await
    }

    /// Reads the primary copy with its ETag (whether or not `T` keeps one).
    pub async fn get_with_etag(
        &self,
        key: impl Into<EntityKey>,
    ) -> Result<Option<(T, tablekit::ETag)>> {
        crate::trace::traced(
            "IndexedTable",
            "get_with_etag",
            Some(self.table.name()),
            async move {
                let Some(d) = self.raw.get(key).await? else {
                    return Ok(None);
                };
                let etag = d
                    .etag
                    .clone()
                    .ok_or_else(|| Error::from(DecodeError::new("the service returned no ETag")))?;
                Ok(Some((T::decode(&RawEntity::from_dynamic(&d))?, etag)))
            },
        )
        .await
    }

    /// Reads an entity by its own key (a point read of the primary copy).
    pub async fn get(&self, key: impl Into<EntityKey>) -> Result<Option<T>> {
        crate::trace::traced("IndexedTable", "get", Some(self.table.name()), async move {
            Ok(self.get_with_etag(key).await?.map(|(e, _)| e))
        })
        .await
    }

    /// Reads the entity whose value in `index` is `value`: one point read of its
    /// copy, decoded as the index's copy type `P`.
    pub async fn lookup<P: TableEntity>(
        &self,
        index: &Index<T, P>,
        partition_key: &str,
        value: &str,
    ) -> Result<Option<P>> {
        crate::trace::traced(
            "IndexedTable",
            "lookup",
            Some(self.table.name()),
            async move {
                let key = EntityKey::new(partition_key, index.row_key_of(value));
                match self.raw.get(key).await? {
                    Some(d) => decode_copy(d).map(Some),
                    None => Ok(None),
                }
            },
        )
        .await
    }

    /// The entities of a partition whose value in `index` lies in `range`, in
    /// the index's order: one range query (`RowKey ge 'email_a' and RowKey lt
    /// 'email_b'` for `KeyRange::prefix("a")`).
    pub async fn list<P: TableEntity>(
        &self,
        index: &Index<T, P>,
        partition_key: &str,
        range: KeyRange,
    ) -> Result<Vec<P>> {
        crate::trace::traced(
            "IndexedTable",
            "list",
            Some(self.table.name()),
            async move {
                let rows = self
                    .raw
                    .query()
                    .filter_by(range.filter(partition_key, &index.def.prefix))
                    .fetch_all()
                    .await?;
                rows.into_iter().map(decode_copy).collect()
            },
        )
        .await
    }

    /// The entities of a partition whose own RowKey, after the primary prefix,
    /// lies in `range`, in RowKey order (`RowKey ge 'empid_000100' and RowKey le
    /// 'empid_000199'` for `KeyRange::inclusive("000100", "000199")`).
    pub async fn list_primary(&self, partition_key: &str, range: KeyRange) -> Result<Vec<T>> {
        crate::trace::traced(
            "IndexedTable",
            "list_primary",
            Some(self.table.name()),
            async move {
                self.table
                    .query()
                    .filter_by(range.filter(partition_key, &self.primary_prefix))
                    .fetch_all()
                    .await
            },
        )
        .await
    }
}

impl<T: TableEntity + Clone> IndexedTable<T> {
    /// Reads the entity, lets `change` modify it, and writes it and its copies
    /// in one transaction under the ETag read; if another writer changed it in
    /// between, reads again and retries (at most [`MAX_ATTEMPTS`] times).
    /// `change` may be called more than once. Returns the written value, or
    /// `None` if there is no entity with that key.
    pub async fn modify<F>(&self, key: impl Into<EntityKey>, mut change: F) -> Result<Option<T>>
    where
        F: FnMut(&mut T) + Send,
    {
        crate::trace::traced(
            "IndexedTable",
            "modify",
            Some(self.table.name()),
            async move {
                let key = key.into();
                let mut attempt = 1;
                loop {
                    let Some((current, etag)) = self.get_with_etag(key.clone()).await? else {
                        return Ok(None);
                    };
                    let mut new = current.clone();
                    change(&mut new);
                    self.before_write.call(attempt).await?;
                    match self.update(&current, &mut new, IfMatch::ETag(etag)).await {
                        Ok(()) => return Ok(Some(new)),
                        Err(e) if e.is_precondition_failed() && attempt < MAX_ATTEMPTS => {
                            attempt += 1
                        }
                        Err(e) => return Err(e),
                    }
                }
            },
        )
        .await
    }

    /// Inserts the entity, or replaces the stored one (read first, to know which
    /// index copies to remove). Retries from the read when another writer
    /// inserted, changed or deleted it in between (at most [`MAX_ATTEMPTS`] times).
    pub async fn upsert(&self, entity: &mut T) -> Result<()> {
        crate::trace::traced(
            "IndexedTable",
            "upsert",
            Some(self.table.name()),
            async move {
                let key = entity.key();
                let mut attempt = 1;
                loop {
                    let stored = self.get_with_etag(key.clone()).await?;
                    self.before_write.call(attempt).await?;
                    let result = match stored {
                        None => self.insert(entity).await,
                        Some((current, etag)) => {
                            self.update(&current, entity, IfMatch::ETag(etag)).await
                        }
                    };
                    match result {
                        Err(e) if is_race(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                        other => return other,
                    }
                }
            },
        )
        .await
    }

    /// Deletes the entity with this key and its copies (read first, to know the
    /// copies' keys); returns whether there was one. Retries from the read when
    /// another writer changed it in between (at most [`MAX_ATTEMPTS`] times).
    pub async fn delete_key(&self, key: impl Into<EntityKey>) -> Result<bool> {
        crate::trace::traced(
            "IndexedTable",
            "delete_key",
            Some(self.table.name()),
            async move {
                let key = key.into();
                let mut attempt = 1;
                loop {
                    let Some((current, etag)) = self.get_with_etag(key.clone()).await? else {
                        return Ok(false);
                    };
                    self.before_write.call(attempt).await?;
                    match self.delete(&current, IfMatch::ETag(etag)).await {
                        Ok(()) => return Ok(true),
                        Err(e) if is_race(&e) && attempt < MAX_ATTEMPTS => attempt += 1,
                        Err(e) => return Err(e),
                    }
                }
            },
        )
        .await
    }
}

/// A write that lost a race with another writer since the read: the entity
/// changed (412), appeared (409 on the primary insert) or vanished (404).
fn is_race(e: &Error) -> bool {
    e.is_precondition_failed()
        || (e.is_conflict() && e.batch_index() == Some(0))
        || (e.is_not_found() && e.batch_index() == Some(0))
}

/// Reads an index copy as the entity type: its RowKey becomes the primary
/// copy's again, and its ETag (the copy's, not the entity's) is dropped.
fn decode_copy<P: TableEntity>(mut d: DynamicEntity) -> Result<P> {
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
    d.etag = None;
    P::decode(&RawEntity::from_dynamic(&d))
}
