//! Client-side encryption of chosen string properties, in the wire format
//! of the .NET storage library and the legacy Python table library
//! (`azure-cosmosdb-table`): entities either writes, tablekit reads, and
//! the other way round (feature `encryption`).
//!
//! Each entity gets its own random 256-bit content key; each encrypted
//! property is AES-256-CBC under it, with an IV derived from the entity's
//! IV, its keys and the property's name, and stored as `Edm.Binary`. The
//! content key is wrapped by a [`KeyEncryptionKey`] (AES key wrap,
//! RSA-OAEP, or a key vault's) and stored, with the key's id, in the
//! reserved property `_ClientEncryptionMetadata1`; the list of encrypted
//! properties is itself encrypted in `_ClientEncryptionMetadata2`.
//!
//! What is **not** encrypted: the PartitionKey and RowKey, the Timestamp,
//! the names of all properties, and every property not chosen.
//!
//! ```no_run
//! # async fn run(service: tablekit::TableServiceClient) -> tablekit::Result<()> {
//! use tablekit::encryption::{AesKeyWrap, EncryptionPolicy};
//! use tablekit::TableEntity;
//!
//! #[derive(TableEntity, Debug, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "{id}")]
//! struct Employee {
//!     department: String,
//!     id: String,
//!     name: String,
//!     #[tablekit(encrypt)]
//!     ssn: String,
//! }
//!
//! let key = AesKeyWrap::new("local:key1", [7u8; 32]); // keep the key somewhere safe
//! let employees = service
//!     .table::<Employee>("Employees")?
//!     .encrypted(EncryptionPolicy::new(key));
//! let e = Employee { department: "Sales".into(), id: "1".into(), name: "Jones".into(), ssn: "123".into() };
//! employees.insert(&e).await?;
//! assert_eq!(employees.get(("Sales", "1")).await?, Some(e));
//! # Ok(()) }
//! ```
//!
//! Merge and insert-or-merge are refused, before any request, for every
//! encrypted entity (as the .NET and Python libraries refuse them): the
//! stored entity may hold properties encrypted under another content key,
//! which a merged-in metadata would make unreadable. A filter that compares
//! an encrypted property is refused too: at compile time through the
//! derive's columns, at run time for OData text.

mod format;
mod keys;

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};

pub use keys::{AesKeyWrap, KeyEncryptionKey, KeyResolver, KeyRing, RsaOaepKey};
/// The RSA key types of the `rsa` crate that [`RsaOaepKey`] takes.
pub use rsa::{RsaPrivateKey, RsaPublicKey};
/// The wiping wrapper of unwrapped content keys (the `zeroize` crate's), which
/// [`KeyEncryptionKey::unwrap_key`] returns.
pub use zeroize::Zeroizing;

use crate::entity::{DynamicEntity, EntityKey, IfMatch, RawEntity, TableEntity, UpdateMode};
use crate::error::{Error, Result};
use crate::filter::{self, Filter, RawFilter};
use crate::table::{EntityStream, Plan, TableClient, TransactionOp, WriteTarget, Written};

/// The names of the two reserved properties of the format.
pub const METADATA_PROPERTIES: [&str; 2] = [format::METADATA1, format::METADATA2];

type EncryptionResolver = dyn Fn(&str, &str, &str) -> bool + Send + Sync;

/// How an [`EncryptedTable`] encrypts and decrypts: the key that wraps new
/// content keys, the resolver that finds the key of a stored entity, which
/// properties to encrypt beyond the derive's `#[tablekit(encrypt)]` fields,
/// and whether every entity read must be encrypted. The Python library's
/// `key_encryption_key`, `key_resolver_function`,
/// `encryption_resolver_function` and `require_encryption`.
#[derive(Clone, Default)]
pub struct EncryptionPolicy {
    key: Option<Arc<dyn KeyEncryptionKey>>,
    resolver: Option<Arc<dyn KeyResolver>>,
    encryption_resolver: Option<Arc<EncryptionResolver>>,
    require_encryption: bool,
}

impl EncryptionPolicy {
    /// Writes (and reads) with `key`.
    pub fn new(key: impl KeyEncryptionKey + 'static) -> Self {
        EncryptionPolicy::with_shared_key(Arc::new(key))
    }

    /// Writes (and reads) with a shared `key`.
    pub fn with_shared_key(key: Arc<dyn KeyEncryptionKey>) -> Self {
        EncryptionPolicy {
            key: Some(key),
            ..EncryptionPolicy::default()
        }
    }

    /// Reads only: finds each entity's key by the key id it names. A write
    /// through it fails (no key to wrap with).
    pub fn read_only(resolver: impl KeyResolver + 'static) -> Self {
        EncryptionPolicy::default().key_resolver(resolver)
    }

    /// Finds the key of a stored entity by the key id it names, before the
    /// policy's own key (as the Python library gives its resolver priority).
    pub fn key_resolver(mut self, resolver: impl KeyResolver + 'static) -> Self {
        self.resolver = Some(Arc::new(resolver));
        self
    }

    /// Which properties to encrypt, by `(PartitionKey, RowKey, property)`:
    /// for [`DynamicEntity`], or to override a derived type's
    /// `#[tablekit(encrypt)]` fields (when set, it alone decides). A
    /// property it picks must be a string.
    pub fn encryption_resolver(
        mut self,
        resolver: impl Fn(&str, &str, &str) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.encryption_resolver = Some(Arc::new(resolver));
        self
    }

    /// Whether an entity read without encryption metadata is an error (by
    /// default it is read as it is, as the Python library does).
    pub fn require_encryption(mut self, required: bool) -> Self {
        self.require_encryption = required;
        self
    }

    fn write_key(&self) -> Result<&Arc<dyn KeyEncryptionKey>> {
        self.key.as_ref().ok_or_else(|| {
            keys::key_error(
                "this policy has no key-encryption key to write with (EncryptionPolicy::read_only)"
                    .into(),
            )
        })
    }

    /// The key that unwraps content keys of `key_id`.
    async fn read_key(
        &self,
        entity: &DynamicEntity,
        key_id: &str,
    ) -> Result<Arc<dyn KeyEncryptionKey>> {
        if let Some(resolver) = &self.resolver {
            return resolver.resolve(key_id).await?.ok_or_else(|| {
                keys::key_error(format!(
                    "entity {}/{} is encrypted under the key {key_id:?}, which the key resolver does not know",
                    entity.partition_key, entity.row_key
                ))
            });
        }
        self.key.clone().ok_or_else(|| {
            keys::key_error(format!(
                "entity {}/{} is encrypted under the key {key_id:?}, and the policy has neither a key nor a key resolver",
                entity.partition_key, entity.row_key
            ))
        })
    }

    /// The properties of `bag` to encrypt.
    fn chooser<'a, T: TableEntity>(
        &'a self,
        bag: &'a DynamicEntity,
    ) -> impl Fn(&str) -> bool + Sync + 'a {
        move |name: &str| match &self.encryption_resolver {
            Some(r) => r(&bag.partition_key, &bag.row_key, name),
            None => T::encrypted_properties().contains(&name),
        }
    }

    /// The entity's bag with its chosen properties encrypted and the metadata added.
    pub(crate) async fn encrypt<T: TableEntity>(&self, entity: &T) -> Result<DynamicEntity> {
        let key = self.write_key()?;
        let mut bag = crate::codec::to_dynamic(entity)?;
        bag.etag = None;
        bag.timestamp = None;
        let plain = bag.clone();
        let choose = self.chooser::<T>(&plain);
        format::encrypt_entity(&mut bag, &choose, key.as_ref(), None).await?;
        Ok(bag)
    }

    /// Decrypts a stored entity in place.
    pub(crate) async fn decrypt(&self, entity: &mut DynamicEntity) -> Result<()> {
        let Some((data, metadata2)) = format::EncryptionData::of(entity)? else {
            if self.require_encryption {
                return Err(keys::key_error(format!(
                    "entity {}/{} is not encrypted, and the policy requires encryption",
                    entity.partition_key, entity.row_key
                )));
            }
            return Ok(());
        };
        let key = self
            .read_key(entity, &data.wrapped_content_key.key_id)
            .await?;
        let cek = format::unwrap_cek(entity, &data, key.as_ref()).await?;
        format::decrypt_entity(entity, &data, &metadata2, &cek)
    }
}

/// The key ids, the resolvers' presence and the flag: no key material.
impl fmt::Debug for EncryptionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptionPolicy")
            .field("key_id", &self.key.as_ref().map(|k| k.key_id().to_owned()))
            .field("key_resolver", &self.resolver.is_some())
            .field("encryption_resolver", &self.encryption_resolver.is_some())
            .field("require_encryption", &self.require_encryption)
            .finish()
    }
}

impl<T: TableEntity> TableClient<T> {
    /// This table read and written with client-side encryption under
    /// `policy`: see [`EncryptedTable`].
    pub fn encrypted(&self, policy: EncryptionPolicy) -> EncryptedTable<T> {
        EncryptedTable {
            table: self.with_type_unchecked::<DynamicEntity>(),
            policy: Arc::new(policy),
            _t: PhantomData,
        }
    }
}

/// A table whose entities are written with chosen properties encrypted,
/// and read back decrypted, on any backend (see the [module](self)).
///
/// It writes whole entities only: insert, replace, insert-or-replace and
/// delete. A merge is refused before any request.
pub struct EncryptedTable<T> {
    table: TableClient<DynamicEntity>,
    policy: Arc<EncryptionPolicy>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for EncryptedTable<T> {
    fn clone(&self) -> Self {
        EncryptedTable {
            table: self.table.clone(),
            policy: self.policy.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for EncryptedTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptedTable")
            .field("table", &self.table.name())
            .field("entity", &std::any::type_name::<T>())
            .field("policy", &self.policy)
            .finish()
    }
}

fn refuse_merge(mode: UpdateMode) -> Result<()> {
    if mode == UpdateMode::Merge {
        return Err(keys::key_error(
            "merge and insert-or-merge are refused for encrypted entities: the stored entity may hold properties encrypted under another content key (write the whole entity with UpdateMode::Replace)"
                .into(),
        ));
    }
    Ok(())
}

/// What [`EncryptedTable::rotate_keys`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rotation {
    /// Entities whose content key is now wrapped by the new key.
    pub rewrapped: u64,
    /// Entities already under the new key, left as they were.
    pub already_current: u64,
    /// Entities without encryption metadata, left as they were.
    pub not_encrypted: u64,
    /// Rewrites refused because the entity changed after it was read (its
    /// ETag): each was read again and rotated from the new version.
    pub retried: u64,
    /// Entities deleted between the read and the rewrite.
    pub vanished: u64,
}

/// How often one entity is read again after a concurrent change, before
/// rotation gives up with the precondition failure.
const ROTATE_ATTEMPTS: u32 = 8;

impl<T: TableEntity> EncryptedTable<T> {
    /// The table's name.
    pub fn name(&self) -> &str {
        self.table.name()
    }

    /// The policy.
    pub fn policy(&self) -> &EncryptionPolicy {
        &self.policy
    }

    /// The same table, untyped and unencrypted: what the service stores.
    pub fn raw(&self) -> &TableClient<DynamicEntity> {
        &self.table
    }

    /// Inserts `entity`, its chosen properties encrypted.
    pub async fn insert(&self, mut entity: impl WriteTarget<T>) -> Result<Written> {
        let bag = self.policy.encrypt(entity.entity()).await?;
        let written = self.table.insert(&bag).await?;
        entity.written(&written);
        Ok(written)
    }

    /// Inserts `entity` or replaces the stored one (`mode` must be
    /// [`UpdateMode::Replace`]: a merge is refused before any request).
    pub async fn upsert(
        &self,
        mut entity: impl WriteTarget<T>,
        mode: UpdateMode,
    ) -> Result<Written> {
        refuse_merge(mode)?;
        let bag = self.policy.encrypt(entity.entity()).await?;
        let written = self.table.upsert(&bag, mode).await?;
        entity.written(&written);
        Ok(written)
    }

    /// Replaces the stored entity under `if_match` (`mode` must be
    /// [`UpdateMode::Replace`]).
    pub async fn update(
        &self,
        mut entity: impl WriteTarget<T>,
        mode: UpdateMode,
        if_match: impl Into<IfMatch>,
    ) -> Result<Written> {
        refuse_merge(mode)?;
        let bag = self.policy.encrypt(entity.entity()).await?;
        let written = self.table.update(&bag, mode, if_match).await?;
        entity.written(&written);
        Ok(written)
    }

    /// Deletes an entity (nothing to decrypt).
    pub async fn delete(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<()> {
        self.table.delete(key, if_match).await
    }

    /// Decrypts a stored entity and decodes it as `T`.
    async fn open(policy: &EncryptionPolicy, mut entity: DynamicEntity) -> Result<T> {
        policy.decrypt(&mut entity).await?;
        T::decode(&RawEntity::from_dynamic(&entity))
    }

    fn select() -> Option<Vec<&'static str>> {
        T::select().map(|s| s.iter().copied().chain(METADATA_PROPERTIES).collect())
    }

    /// Reads one entity by key, decrypted; `None` if there is none.
    pub async fn get(&self, key: impl Into<EntityKey>) -> Result<Option<T>> {
        let mut get = self.table.get(key);
        if let Some(select) = Self::select() {
            get = get.select(select);
        }
        match get.await? {
            Some(e) => Ok(Some(Self::open(&self.policy, e).await?)),
            None => Ok(None),
        }
    }

    /// A query over the table, its entities decrypted.
    pub fn query(&self) -> EncryptedQuery<T> {
        let mut query = self.table.query();
        if let Some(select) = Self::select() {
            query = query.select(select);
        }
        EncryptedQuery {
            query: Ok(query),
            policy: self.policy.clone(),
            _t: PhantomData,
        }
    }

    /// The insert of `entity`, encrypted, as an operation to push into a
    /// transaction of [`raw`](Self::raw) (`raw().transaction()`) or a
    /// [`Plan`].
    pub async fn insert_op(&self, entity: &T) -> Result<TransactionOp> {
        Ok(TransactionOp::Insert(self.policy.encrypt(entity).await?))
    }

    /// The upsert of `entity`, encrypted (`mode` must be `Replace`).
    pub async fn upsert_op(&self, entity: &T, mode: UpdateMode) -> Result<TransactionOp> {
        refuse_merge(mode)?;
        Ok(TransactionOp::Upsert(
            self.policy.encrypt(entity).await?,
            mode,
        ))
    }

    /// The update of `entity`, encrypted, under `if_match` (`mode` must be `Replace`).
    pub async fn update_op(
        &self,
        entity: &T,
        mode: UpdateMode,
        if_match: impl Into<IfMatch>,
    ) -> Result<TransactionOp> {
        refuse_merge(mode)?;
        let if_match = if_match.into();
        Ok(TransactionOp::Update(
            self.policy.encrypt(entity).await?,
            mode,
            if_match,
        ))
    }

    /// The insert of `entity`, encrypted, as a [`Plan`].
    pub async fn plan_insert(&self, entity: &T) -> Result<Plan<'static>> {
        Plan::op(&self.table, self.insert_op(entity).await?)
    }

    /// The upsert of `entity`, encrypted, as a [`Plan`] (`mode` must be `Replace`).
    pub async fn plan_upsert(&self, entity: &T, mode: UpdateMode) -> Result<Plan<'static>> {
        Plan::op(&self.table, self.upsert_op(entity, mode).await?)
    }

    /// The update of `entity`, encrypted, as a [`Plan`] (`mode` must be `Replace`).
    pub async fn plan_update(
        &self,
        entity: &T,
        mode: UpdateMode,
        if_match: impl Into<IfMatch>,
    ) -> Result<Plan<'static>> {
        Plan::op(&self.table, self.update_op(entity, mode, if_match).await?)
    }

    /// Key rotation over the whole table: see [`rotate_keys_where`](Self::rotate_keys_where).
    pub async fn rotate_keys(&self, new_key: Arc<dyn KeyEncryptionKey>) -> Result<Rotation> {
        self.rotate(new_key, None).await
    }

    /// Key rotation: the content key of every encrypted entity that
    /// `filter` (OData text over keys and clear properties) selects is
    /// unwrapped with the key it names (through the policy) and wrapped
    /// again by `new_key`. Only `_ClientEncryptionMetadata1` is rewritten
    /// (a merge of that one property, allowed here because the content key
    /// and every encrypted property stay as they are), on the condition of
    /// the ETag read: an entity changed in between is read again and
    /// rotated from its new version. Entities already under `new_key`, and
    /// entities that are not encrypted, are left as they are.
    ///
    /// The policy must still resolve the old keys; afterwards readers need
    /// only `new_key` (for the entities walked).
    pub async fn rotate_keys_where(
        &self,
        new_key: Arc<dyn KeyEncryptionKey>,
        filter: impl Into<RawFilter>,
    ) -> Result<Rotation> {
        self.rotate(new_key, Some(filter.into())).await
    }

    async fn rotate(
        &self,
        new_key: Arc<dyn KeyEncryptionKey>,
        filter: Option<RawFilter>,
    ) -> Result<Rotation> {
        let mut query = self.table.query().select(METADATA_PROPERTIES);
        if let Some(f) = filter {
            query = query.filter_raw(f);
        }
        let mut report = Rotation::default();
        let mut entities = query.stream();
        while let Some(entity) = entities.try_next().await? {
            self.rotate_one(entity, new_key.as_ref(), &mut report)
                .await?;
        }
        Ok(report)
    }

    async fn rotate_one(
        &self,
        mut entity: DynamicEntity,
        new_key: &dyn KeyEncryptionKey,
        report: &mut Rotation,
    ) -> Result<()> {
        for attempt in 1..=ROTATE_ATTEMPTS {
            let Some((data, _)) = format::EncryptionData::of(&entity)? else {
                report.not_encrypted += 1;
                return Ok(());
            };
            if data.wrapped_content_key.key_id == new_key.key_id() {
                report.already_current += 1;
                return Ok(());
            }
            let old = self
                .policy
                .read_key(&entity, &data.wrapped_content_key.key_id)
                .await?;
            let m1 = format::rewrap(&entity, data, old.as_ref(), new_key).await?;
            let etag = entity
                .etag
                .clone()
                .ok_or_else(|| Error::decode("a read entity without its ETag"))?;
            let patch = DynamicEntity::new(&entity.partition_key, &entity.row_key)
                .with(format::METADATA1, m1);
            match self
                .table
                .merge_rewrapped_key(&patch, &IfMatch::ETag(etag))
                .await
            {
                Ok(_) => {
                    report.rewrapped += 1;
                    return Ok(());
                }
                Err(e) if e.is_precondition_failed() && attempt < ROTATE_ATTEMPTS => {
                    report.retried += 1;
                    let key = EntityKey::new(&entity.partition_key, &entity.row_key);
                    match self.table.get(key).select(METADATA_PROPERTIES).await? {
                        Some(fresh) => entity = fresh,
                        None => {
                            report.vanished += 1;
                            return Ok(());
                        }
                    }
                }
                Err(e) if e.is_not_found() => {
                    report.vanished += 1;
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        Err(keys::key_error(format!(
            "entity {}/{} kept changing during key rotation ({ROTATE_ATTEMPTS} attempts)",
            entity.partition_key, entity.row_key
        )))
    }
}

/// A query over an [`EncryptedTable`]: [`Query`](crate::table::Query)'s
/// filters and limits, its entities decrypted. A filter that compares an
/// encrypted property of `T` is refused before any request.
#[must_use = "a query does nothing until streamed or fetched"]
pub struct EncryptedQuery<T> {
    query: Result<crate::table::Query<DynamicEntity>>,
    policy: Arc<EncryptionPolicy>,
    _t: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for EncryptedQuery<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptedQuery")
            .field("query", &self.query)
            .field("policy", &self.policy)
            .finish()
    }
}

impl<T: TableEntity> EncryptedQuery<T> {
    fn map(
        mut self,
        f: impl FnOnce(crate::table::Query<DynamicEntity>) -> Result<crate::table::Query<DynamicEntity>>,
    ) -> Self {
        self.query = self.query.and_then(f);
        self
    }

    /// A filter over the entity's typed columns (an encrypted column has
    /// no comparisons: such a filter does not compile).
    pub fn filter<F, R>(self, build: F) -> Self
    where
        T: filter::EntityColumns,
        F: FnOnce(&T::Columns) -> R,
        R: Into<Filter<T>>,
    {
        self.filter_by(build(T::columns()))
    }

    /// A filter built beforehand.
    pub fn filter_by(self, filter: impl Into<Filter<T>>) -> Self {
        let filter = filter.into();
        self.map(|q| {
            crate::table::query::refuse_encrypted_filter(
                filter.expr()?,
                T::encrypted_properties(),
            )?;
            Ok(q.filter_by(filter.cast::<DynamicEntity>()))
        })
    }

    /// A filter in OData text; refused before any request if it compares
    /// an encrypted property of `T`.
    pub fn filter_raw(self, odata: impl Into<RawFilter>) -> Self {
        let odata = odata.into();
        self.map(|q| {
            if let Ok(text) = odata.text() {
                if let Ok(expr) = filter::parse(text) {
                    crate::table::query::refuse_encrypted_filter(&expr, T::encrypted_properties())?;
                }
            }
            Ok(q.filter_raw(odata))
        })
    }

    /// At most `n` entities per request.
    pub fn page_size(self, n: usize) -> Self {
        self.map(|q| Ok(q.page_size(n)))
    }

    /// At most `n` entities in all.
    pub fn take(self, n: usize) -> Self {
        self.map(|q| Ok(q.take(n)))
    }

    /// The entities, decrypted, one at a time.
    pub fn stream(self) -> EntityStream<T> {
        let policy = self.policy;
        match self.query {
            Ok(q) => EntityStream::from_boxed(
                q.stream()
                    .and_then(move |e| {
                        let policy = policy.clone();
                        async move { EncryptedTable::<T>::open(&policy, e).await }
                    })
                    .boxed(),
            ),
            Err(e) => EntityStream::from_boxed(futures::stream::once(async { Err(e) }).boxed()),
        }
    }

    /// All the entities, decrypted.
    pub async fn fetch_all(self) -> Result<Vec<T>> {
        self.stream().try_collect().await
    }

    /// The first entity, if any.
    pub async fn fetch_optional(self) -> Result<Option<T>> {
        self.take(1).stream().try_next().await
    }
}
