//! The wide entities pattern (design guide §3.10): a logical entity with more
//! properties than one entity may hold (252 custom properties, 1 MiB) stored as
//! several physical entities of one partition, `<RowKey>_0`, `<RowKey>_1`, …,
//! written together in one entity group transaction and read back with one
//! range query.
//!
//! The logical entity is any [`TableEntity`]: a [`DynamicEntity`] with 365
//! daily counts, or a hand-written impl over an array (the derive itself
//! refuses more than 252 properties). Its properties are dealt, in the order
//! it writes them, into parts of at most 251 properties and about 900 KB; part
//! 0 also holds [`PARTS`], the number of parts. Part 0's ETag is the logical
//! entity's: every write rewrites part 0 under it, so two writers cannot
//! interleave their parts.
//!
//! | operation | requests |
//! |---|---|
//! | [`insert`](WideTable::insert) | 1 transaction (an insert per part) |
//! | [`get`](WideTable::get) | 1 range query |
//! | [`update`](WideTable::update) replace, [`delete`](WideTable::delete) | 1 range query (which parts exist, keys only) + 1 transaction |
//! | [`update`](WideTable::update) merge, [`modify`](WideTable::modify) | 1 range query (the whole entity) + 1 transaction, again on a concurrent change |
//!
//! A logical entity must fit one transaction: at most 100 parts and 4 MiB in
//! all, checked before any request. Avoid base RowKeys that extend another's
//! with `_` and digits (`x` and `x_0`): their parts would share a range.
//!
//! ```
//! use tablekit::{DynamicEntity, IfMatch, TableServiceClient};
//! use tablekit_patterns::wide::WideTable;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded(); // or ::from_connection_string(..)
//! # service.create_table("MessageStats").await?;
//! let stats = WideTable::new(service.table::<DynamicEntity>("MessageStats")?);
//! let mut year = DynamicEntity::new("000123", "2014");
//! for day in 1..=365 {
//!     year.set(format!("Day{day:03}"), 0);
//! }
//! stats.insert(&mut year).await?; // 2 parts, 1 transaction
//! let back = stats.get(("000123", "2014")).await?.unwrap();
//! assert_eq!(back.properties.len(), 365);
//! # Ok(()) }
//! ```

use std::fmt;
use std::marker::PhantomData;

use tablekit::validate::MAX_PROPERTIES;
use tablekit::{
    entity::RawEntity,
    error::{DecodeError, ErrorKind},
    table::TransactionOp,
    DynamicEntity, ETag, EdmValue, EntityKey, Error, IfMatch, Result, TableClient, TableEntity,
    UpdateMode,
};

use crate::error::refused;
use crate::plan::Plan;
use crate::range::KeyRange;

/// The Int32 property of part 0 that holds the number of parts. An entity
/// type must not have a property of this name.
pub const PARTS: &str = "WideParts";

/// The estimated size above which a part is closed and the next one begun;
/// below the service's 1 MiB so the estimate's error cannot reach the limit.
pub const PART_BUDGET_BYTES: usize = 900 * 1024;

/// How many times [`WideTable::update`] (with [`IfMatch::Any`]) and
/// [`WideTable::modify`] start again after a concurrent change.
pub const MAX_ATTEMPTS: usize = 16;

/// A table of logical entities of type `T`, each stored as several parts; see
/// the [module docs](self). Cheap to clone.
pub struct WideTable<T> {
    raw: TableClient<DynamicEntity>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for WideTable<T> {
    fn clone(&self) -> Self {
        WideTable {
            raw: self.raw.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for WideTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WideTable")
            .field("table", &self.raw.name())
            .field("entity", &std::any::type_name::<T>())
            .finish()
    }
}

/// The RowKey of part `index` of the logical entity `row_key`.
pub fn part_row_key(row_key: &str, index: usize) -> String {
    format!("{row_key}_{index}")
}

fn inconsistent(message: String) -> Error {
    DecodeError::for_property(PARTS, message).into()
}

/// An upper estimate of a property's stored size (the service counts names
/// and strings in UTF-16).
fn estimate(name: &str, value: &EdmValue) -> usize {
    8 + name.len() * 2
        + match value {
            EdmValue::String(s) => s.len() * 2,
            EdmValue::Binary(b) => b.len(),
            _ => 16,
        }
}

/// The stored parts of one logical entity, as read.
struct Stored {
    parts: Vec<DynamicEntity>,
    etag: ETag,
}

impl<T: TableEntity> WideTable<T> {
    /// The logical entities of `table`.
    pub fn new(table: TableClient<T>) -> Self {
        WideTable {
            raw: table.with_type::<DynamicEntity>(),
            _t: PhantomData,
        }
    }

    /// The physical entities `entity` is stored as, part 0 first. Fails if a
    /// property name repeats or is [`PARTS`].
    pub fn parts(&self, entity: &T) -> Result<Vec<DynamicEntity>> {
        parts_of(entity)
    }
}

/// The parts of any logical entity (see [`WideTable::parts`]).
fn parts_of<E: TableEntity>(entity: &E) -> Result<Vec<DynamicEntity>> {
    let (pk, rk) = (entity.partition_key(), entity.row_key());
    let all = crate::props::collect(entity, PARTS, "wide")?;
    let mut parts = vec![DynamicEntity::new(pk.as_ref(), part_row_key(&rk, 0))];
    // Part 0 keeps room for the part count.
    let mut room = MAX_PROPERTIES - 1;
    let mut size = 0;
    for (name, value) in all {
        let cost = estimate(&name, &value);
        if room == 0 || (size + cost > PART_BUDGET_BYTES && size > 0) {
            let index = parts.len();
            parts.push(DynamicEntity::new(pk.as_ref(), part_row_key(&rk, index)));
            room = MAX_PROPERTIES;
            size = 0;
        }
        room -= 1;
        size += cost;
        parts
            .last_mut()
            .expect("there is a part")
            .properties
            .insert(name, value);
    }
    let n = parts.len();
    parts[0].set(PARTS, n as i32);
    Ok(parts)
}

impl<T: TableEntity> WideTable<T> {
    /// The inserts of every part, planned: the operations
    /// [`insert`](Self::insert) sends, part 0 first, for a transaction
    /// composed with other writes of the partition ([`crate::plan`]), such as
    /// the entity's [index copies](crate::index::IndexedTable::plan_insert_copies).
    pub fn plan_insert(&self, entity: &T) -> Result<Plan<'static>> {
        let mut plan = Plan::new();
        for p in self.parts(entity)? {
            plan.push(&self.raw, TransactionOp::Insert(p))?;
        }
        Ok(plan)
    }

    /// Inserts the logical entity: one transaction inserting every part. An
    /// entity that exists is a conflict. Sets the entity's ETag (part 0's).
    pub async fn insert(&self, entity: &mut T) -> Result<()> {
        crate::trace::traced("WideTable", "insert", Some(self.raw.name()), async move {
            let part0 = EntityKey::new(
                entity.partition_key().as_ref(),
                part_row_key(&entity.row_key(), 0),
            );
            let done = self.plan_insert(entity)?.send().await?;
            if let Some(etag) = done.etag(&part0) {
                entity.set_etag(etag.clone());
            }
            Ok(())
        })
        .await
    }

    async fn read(&self, key: &EntityKey, keys_only: bool) -> Result<Option<Stored>> {
        let mut query = self
            .raw
            .query()
            .filter_by(KeyRange::all().filter(&key.partition_key, &format!("{}_", key.row_key)));
        if keys_only {
            query = query.select([PARTS]);
        }
        let rows = query.fetch_all().await?;
        stored_of(key, rows)
    }

    fn assemble(key: &EntityKey, stored: &Stored) -> Result<T> {
        let mut whole = DynamicEntity::new(key.partition_key.as_str(), key.row_key.as_str());
        whole.etag = Some(stored.etag.clone());
        whole.timestamp = stored.parts[0].timestamp;
        for part in &stored.parts {
            for (name, value) in &part.properties {
                if name != PARTS {
                    whole.properties.insert(name, value.clone());
                }
            }
        }
        T::decode(&RawEntity::from_dynamic(&whole))
    }

    /// Reads the logical entity (one range query over its parts) with its ETag.
    pub async fn get_with_etag(&self, key: impl Into<EntityKey>) -> Result<Option<(T, ETag)>> {
        crate::trace::traced(
            "WideTable",
            "get_with_etag",
            Some(self.raw.name()),
            async move {
                let key = key.into();
                match self.read(&key, false).await? {
                    Some(stored) => Ok(Some((Self::assemble(&key, &stored)?, stored.etag))),
                    None => Ok(None),
                }
            },
        )
        .await
    }

    /// Reads the logical entity: one range query over its parts.
    pub async fn get(&self, key: impl Into<EntityKey>) -> Result<Option<T>> {
        crate::trace::traced("WideTable", "get", Some(self.raw.name()), async move {
            Ok(self.get_with_etag(key).await?.map(|(e, _)| e))
        })
        .await
    }

    /// The write of `entity` over the parts `stored`: part 0 replaced under
    /// `if_match`, the other parts upserted, parts no longer needed deleted.
    fn plan_over<E: TableEntity>(
        &self,
        entity: &E,
        stored: &Stored,
        if_match: IfMatch,
    ) -> Result<Plan<'static>> {
        let mut parts = parts_of(entity)?.into_iter();
        let mut plan = Plan::new();
        let first = parts.next().expect("part 0 is always there");
        plan.push(
            &self.raw,
            TransactionOp::Update(first, UpdateMode::Replace, if_match),
        )?;
        let mut written = 1;
        for p in parts {
            plan.push(&self.raw, TransactionOp::Upsert(p, UpdateMode::Replace))?;
            written += 1;
        }
        for old in stored.parts.iter().skip(written) {
            plan.push(
                &self.raw,
                TransactionOp::Delete(
                    EntityKey::new(old.partition_key.as_str(), old.row_key.as_str()),
                    IfMatch::Any,
                ),
            )?;
        }
        Ok(plan)
    }

    async fn write_over<E: TableEntity>(
        &self,
        entity: &mut E,
        stored: &Stored,
        if_match: IfMatch,
    ) -> Result<()> {
        let part0 = EntityKey::new(
            entity.partition_key().as_ref(),
            part_row_key(&entity.row_key(), 0),
        );
        let done = self.plan_over(entity, stored, if_match)?.send().await?;
        if let Some(etag) = done.etag(&part0) {
            entity.set_etag(etag.clone());
        }
        Ok(())
    }

    /// The replacement of the stored logical entity by `entity`, planned
    /// from one keys-only range query over its parts: part 0 replaced under
    /// `if_match` ([`IfMatch::Any`]: under the version whose parts were
    /// listed), the other parts upserted, parts no longer needed deleted.
    /// Not found if there is no such entity.
    pub fn plan_replace<'a>(
        &'a self,
        entity: &'a T,
        if_match: impl Into<IfMatch>,
    ) -> Result<Plan<'a>> {
        let key = entity.key();
        let if_match = if_match.into();
        let prefix = format!("{}_", key.row_key);
        let pk = key.partition_key.clone();
        Plan::after_range(&self.raw, &pk, &prefix, Some(&[PARTS]), move |rows| {
            let Some(stored) = stored_of(&key, rows.to_vec())? else {
                return Err(not_found(&key, self.raw.name()));
            };
            let condition = match &if_match {
                IfMatch::Any => IfMatch::ETag(stored.etag.clone()),
                other => other.clone(),
            };
            self.plan_over(entity, &stored, condition)
        })
    }

    /// Updates the stored logical entity with `entity`, on the condition
    /// `if_match` (checked on part 0, whose ETag is the entity's), as
    /// [`TableClient::update`] does for one entity:
    ///
    /// * [`UpdateMode::Replace`]: the stored properties `entity` lacks are
    ///   removed, parts no longer needed deleted; 1 keys-only range query + 1
    ///   transaction.
    /// * [`UpdateMode::Merge`]: `entity`'s properties are merged into the
    ///   stored ones (which it lacks are kept; properties may move between
    ///   parts); 1 range query of the whole entity + 1 transaction.
    ///
    /// With [`IfMatch::Any`] the write is still made conditional on the
    /// version read, and starts again on a concurrent change. Sets
    /// `entity`'s ETag. Not found if there is no such entity.
    pub async fn update(
        &self,
        entity: &mut T,
        mode: UpdateMode,
        if_match: impl Into<IfMatch>,
    ) -> Result<()> {
        crate::trace::traced("WideTable", "update", Some(self.raw.name()), async move {
            match mode {
                UpdateMode::Merge => self.merge(entity, if_match.into()).await,
                _ => self.replace(entity, if_match.into()).await,
            }
        })
        .await
    }

    async fn replace(&self, entity: &mut T, if_match: IfMatch) -> Result<()> {
        let key = entity.key();
        let mut attempt = 1;
        loop {
            let Some(stored) = self.read(&key, true).await? else {
                return Err(not_found(&key, self.raw.name()));
            };
            let condition = match &if_match {
                IfMatch::Any => IfMatch::ETag(stored.etag.clone()),
                other => other.clone(),
            };
            match self.write_over(entity, &stored, condition).await {
                Err(e)
                    if e.is_precondition_failed()
                        && matches!(if_match, IfMatch::Any)
                        && attempt < MAX_ATTEMPTS =>
                {
                    attempt += 1
                }
                other => return other,
            }
        }
    }

    /// Deletes every part of the logical entity in one transaction, on the
    /// condition `if_match` (checked on part 0). Not found if there is no
    /// such entity, as [`TableClient::delete`].
    pub async fn delete(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<()> {
        crate::trace::traced("WideTable", "delete", Some(self.raw.name()), async move {
            let key = key.into();
            match self.delete_if_exists(key.clone(), if_match).await? {
                true => Ok(()),
                false => Err(not_found(&key, self.raw.name())),
            }
        })
        .await
    }

    /// Like [`delete`](Self::delete); returns whether the entity existed
    /// instead of failing, as [`TableClient::delete_if_exists`].
    pub async fn delete_if_exists(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<bool> {
        crate::trace::traced(
            "WideTable",
            "delete_if_exists",
            Some(self.raw.name()),
            async move {
                let key = key.into();
                let if_match = if_match.into();
                let mut attempt = 1;
                loop {
                    let Some(stored) = self.read(&key, true).await? else {
                        return Ok(false);
                    };
                    let mut tx = self.raw.transaction();
                    for (i, p) in stored.parts.iter().enumerate() {
                        let condition = match (&if_match, i) {
                            (IfMatch::Any, 0) => IfMatch::ETag(stored.etag.clone()),
                            (given, 0) => given.clone(),
                            _ => IfMatch::Any,
                        };
                        tx.delete((p.partition_key.as_str(), p.row_key.as_str()), condition)?;
                    }
                    match tx.send().await {
                        Ok(_) => return Ok(true),
                        Err(e)
                            if e.is_precondition_failed()
                                && matches!(if_match, IfMatch::Any)
                                && attempt < MAX_ATTEMPTS =>
                        {
                            attempt += 1
                        }
                        Err(e) => return Err(e),
                    }
                }
            },
        )
        .await
    }

    async fn merge(&self, entity: &mut T, if_match: IfMatch) -> Result<()> {
        let key = entity.key();
        let changes = crate::props::collect(&*entity, PARTS, "wide")?;
        let mut attempt = 1;
        loop {
            let Some(stored) = self.read(&key, false).await? else {
                return Err(not_found(&key, self.raw.name()));
            };
            let mut merged = WideTable::<DynamicEntity>::assemble(&key, &stored)?;
            for (name, value) in &changes {
                merged.properties.insert(name, value.clone());
            }
            let condition = match &if_match {
                IfMatch::Any => IfMatch::ETag(stored.etag.clone()),
                other => other.clone(),
            };
            match self.write_over(&mut merged, &stored, condition).await {
                Ok(()) => {
                    if let Some(etag) = merged.etag {
                        entity.set_etag(etag);
                    }
                    return Ok(());
                }
                Err(e)
                    if e.is_precondition_failed()
                        && matches!(if_match, IfMatch::Any)
                        && attempt < MAX_ATTEMPTS =>
                {
                    attempt += 1
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads the logical entity, lets `change` modify it, and writes it back
    /// (replace) under the ETag read; on a concurrent change reads again and
    /// retries (at most [`MAX_ATTEMPTS`] times). Returns the written entity, or
    /// `None` if there is none.
    pub async fn modify<F>(&self, key: impl Into<EntityKey>, mut change: F) -> Result<Option<T>>
    where
        F: FnMut(&mut T) + Send,
    {
        crate::trace::traced("WideTable", "modify", Some(self.raw.name()), async move {
            let key = key.into();
            let mut attempt = 1;
            loop {
                let Some(stored) = self.read(&key, false).await? else {
                    return Ok(None);
                };
                let mut entity = Self::assemble(&key, &stored)?;
                change(&mut entity);
                if entity.key() != key {
                    return Err(refused(
                        "wide",
                        format!(
                            "modify keeps the entity's key {key}; delete and insert to move it"
                        ),
                    ));
                }
                let etag = IfMatch::ETag(stored.etag.clone());
                match self.write_over(&mut entity, &stored, etag).await {
                    Ok(()) => return Ok(Some(entity)),
                    Err(e) if e.is_precondition_failed() && attempt < MAX_ATTEMPTS => attempt += 1,
                    Err(e) => return Err(e),
                }
            }
        })
        .await
    }
}

fn not_found(key: &EntityKey, table: &str) -> Error {
    ErrorKind::NoEntity(format!("no wide entity {key} in table {table}")).into()
}

/// The parts of the logical entity `key` among `rows` (its RowKey range).
fn stored_of(key: &EntityKey, rows: Vec<DynamicEntity>) -> Result<Option<Stored>> {
    let mut parts: Vec<(usize, DynamicEntity)> = rows
        .into_iter()
        .filter_map(|r| {
            let suffix = r.row_key.get(key.row_key.len() + 1..)?;
            let index = suffix
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| suffix.parse::<usize>().ok())??;
            Some((index, r))
        })
        .collect();
    if parts.is_empty() {
        return Ok(None);
    }
    parts.sort_by_key(|(i, _)| *i);
    let n = match parts[0].1.get(PARTS) {
        Some(EdmValue::Int32(n)) if parts[0].0 == 0 && *n >= 1 => *n as usize,
        _ => {
            return Err(inconsistent(format!(
                "{key}: part 0 with the part count is missing"
            )))
        }
    };
    if parts.len() < n || parts.iter().take(n).enumerate().any(|(i, (j, _))| i != *j) {
        return Err(inconsistent(format!(
            "{key}: part 0 says {n} parts, {} found",
            parts.len()
        )));
    }
    parts.truncate(n);
    let etag = parts[0]
        .1
        .etag
        .clone()
        .ok_or_else(|| inconsistent(format!("{key}: part 0 came without an ETag")))?;
    Ok(Some(Stored {
        parts: parts.into_iter().map(|(_, p)| p).collect(),
        etag,
    }))
}
