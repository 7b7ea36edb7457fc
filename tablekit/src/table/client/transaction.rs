//! Entity group transactions: [`Transaction`], its operations and its result.

use std::collections::HashSet;
use std::fmt;

use crate::backend::{BatchKind, BatchOp, Operation, Response};
use crate::codec::bag::CheckedBag;
use crate::entity::{ETag, EntityKey, IfMatch, TableEntity, UpdateMode};
use crate::error::{Error, Result, ValidationError};
use crate::table::handle::AmbiguousWrites;
use crate::table::outcome;
use crate::validate::{MAX_BATCH_BYTES, MAX_BATCH_OPERATIONS};

use super::{encode, TableClient};

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
    pub(super) table: TableClient<T>,
    pub(super) ops: Vec<BatchOp>,
    /// The hashes of the operations' RowKeys ([`row_key_hash`]): a RowKey
    /// whose hash is here is then looked for in `ops`, so the check is
    /// exact, and no RowKey is copied for it.
    pub(super) row_keys: HashSet<u64>,
    pub(super) size: usize,
}

impl<T> fmt::Debug for Transaction<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction")
            .field("table", &self.table.handle.name)
            .field("operations", &self.ops.len())
            .finish()
    }
}

/// The hash of a RowKey kept in [`Transaction::row_keys`]: a filter before
/// the exact comparison, so a fixed hasher is enough.
pub(super) fn row_key_hash(row_key: &str) -> u64 {
    use std::hash::BuildHasher;
    std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(row_key)
}

/// Framing bytes one operation adds to a transaction payload, beyond its body
/// (part headers, request line with the URL): an upper estimate.
const OP_OVERHEAD: usize = 600;

impl<T: TableEntity> Transaction<T> {
    fn push_op(
        &mut self,
        kind: BatchKind,
        key: EntityKey,
        body: Option<bytes::Bytes>,
        body_len: usize,
        bag: Option<CheckedBag>,
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
        let row_key_hash = row_key_hash(&key.row_key);
        if self.holds_row_key(row_key_hash, &key.row_key) {
            return fail(format!(
                "RowKey {:?} already has an operation; a transaction holds one operation per entity",
                key.row_key
            ));
        }
        let size = self.size
            + body_len
            + key.partition_key.len() * 3
            + key.row_key.len() * 3
            + OP_OVERHEAD;
        if size > MAX_BATCH_BYTES {
            return fail(format!("the payload would exceed {MAX_BATCH_BYTES} bytes"));
        }
        self.size = size;
        if index == 0 {
            // Room for a whole transaction at once: growing step by step
            // reallocated (and copied) the operations five times, each a
            // large block for which the system allocator tidies its free lists.
            self.ops.reserve_exact(MAX_BATCH_OPERATIONS);
            self.row_keys.reserve(MAX_BATCH_OPERATIONS);
        }
        self.row_keys.insert(row_key_hash);
        let bag_json_len = if bag.is_some() { body_len } else { 0 };
        self.ops.push(BatchOp {
            kind,
            key,
            body,
            bag,
            bag_json_len,
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
        crate::entity::refuse_unencrypted_write::<E>(match &kind {
            BatchKind::Upsert(mode) | BatchKind::Update(mode, _) => Some(*mode),
            BatchKind::Insert | BatchKind::Delete(_) => None,
        })
        .map_err(at_index)?;
        // The payload limit is measured on the JSON. A backend that stores
        // bags gets the bag and parses nothing: for it the JSON's length is
        // counted (with the encoder's checks), not written.
        if self.table.handle.backend.stores_property_bags() {
            // The entities of a transaction are often of one shape: the bag
            // shares the previous one's names, and is sized by it.
            let like = self.ops.iter().rev().find_map(|op| op.bag.as_ref());
            let bag = CheckedBag::of(entity, like).map_err(at_index)?;
            let key = EntityKey::new(&bag.entity().partition_key, &bag.entity().row_key);
            let len = bag.json_len();
            return self.push_op(kind, key, None, len, Some(bag));
        }
        let (key, body) = encode(entity).map_err(at_index)?;
        let len = body.len();
        self.push_op(kind, key, Some(bytes::Bytes::from(body)), len, None)
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
        self.push_op(BatchKind::Delete(if_match.into()), key, None, 0, None)
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
        op.refuse_encrypted_merge()
            .map_err(|e| match e.validation() {
                Some(v) => Error::invalid(ValidationError::Batch {
                    index: Some(index),
                    reason: v.to_string(),
                }),
                None => e,
            })?;
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

impl<T> Transaction<T> {
    /// A copy holding the operations whose indexes `keep` accepts, in order:
    /// what the bulk writer resends after a refusal or a throttling answer.
    pub(crate) fn copy_keeping(&self, keep: impl Fn(usize) -> bool) -> Self {
        let ops: Vec<BatchOp> = self
            .ops
            .iter()
            .enumerate()
            .filter(|(i, _)| keep(*i))
            .map(|(_, op)| op.clone())
            .collect();
        let size = ops
            .iter()
            .map(|op| {
                op.body.as_ref().map_or(op.bag_json_len, bytes::Bytes::len)
                    + op.key.partition_key.len() * 3
                    + op.key.row_key.len() * 3
                    + OP_OVERHEAD
            })
            .sum();
        Transaction {
            table: self.table.clone(),
            row_keys: ops.iter().map(|op| row_key_hash(&op.key.row_key)).collect(),
            ops,
            size,
        }
    }

    /// Whether an operation on the entity of `row_key` was added.
    pub(crate) fn has_row_key(&self, row_key: &str) -> bool {
        self.holds_row_key(row_key_hash(row_key), row_key)
    }

    /// Whether an operation on `row_key`, whose hash is `hash`, was added.
    fn holds_row_key(&self, hash: u64, row_key: &str) -> bool {
        self.row_keys.contains(&hash) && self.ops.iter().any(|op| op.key.row_key == row_key)
    }

    /// What operation `index` sends, for working out its intent.
    pub(crate) fn sent_op(&self, index: usize) -> Option<outcome::SentOp> {
        self.ops.get(index).map(outcome::SentOp::of)
    }

    /// The table the transaction writes.
    pub(crate) fn table(&self) -> &TableClient<T> {
        &self.table
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
    pub(super) fn bag<E: TableEntity>(entity: &E) -> Result<crate::DynamicEntity> {
        let mut bag = crate::codec::to_dynamic(entity)?;
        bag.etag = None;
        bag.timestamp = None;
        Ok(bag)
    }

    /// An insert of `entity`.
    pub fn insert<E: TableEntity>(entity: &E) -> Result<Self> {
        crate::entity::refuse_unencrypted_write::<E>(None)?;
        Ok(TransactionOp::Insert(Self::bag(entity)?))
    }

    /// An upsert of `entity`.
    pub fn upsert<E: TableEntity>(entity: &E, mode: UpdateMode) -> Result<Self> {
        crate::entity::refuse_unencrypted_write::<E>(Some(mode))?;
        let bag = Self::bag(entity)?;
        crate::entity::refuse_encrypted_merge(&bag, mode)?;
        Ok(TransactionOp::Upsert(bag, mode))
    }

    /// An update of `entity` under `if_match`.
    pub fn update<E: TableEntity>(
        entity: &E,
        mode: UpdateMode,
        if_match: impl Into<IfMatch>,
    ) -> Result<Self> {
        crate::entity::refuse_unencrypted_write::<E>(Some(mode))?;
        let bag = Self::bag(entity)?;
        crate::entity::refuse_encrypted_merge(&bag, mode)?;
        Ok(TransactionOp::Update(bag, mode, if_match.into()))
    }

    /// A delete of the entity `key` under `if_match`.
    pub fn delete(key: impl Into<EntityKey>, if_match: impl Into<IfMatch>) -> Result<Self> {
        let key = key.into();
        key.validate()?;
        Ok(TransactionOp::Delete(key, if_match.into()))
    }

    /// Refuses a merge of an entity that carries client-side encryption
    /// metadata (see [`TableEntity::encrypted_properties`]).
    pub(crate) fn refuse_encrypted_merge(&self) -> Result<()> {
        match self {
            TransactionOp::Upsert(e, mode) | TransactionOp::Update(e, mode, _) => {
                crate::entity::refuse_encrypted_merge(e, *mode)
            }
            TransactionOp::Insert(_) | TransactionOp::Delete(..) => Ok(()),
        }
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

#[cfg(test)]
mod tests {
    use crate::{DynamicEntity, IfMatch, TableServiceClient};

    /// An entity of about 480 KB of JSON: the 9th of them crosses 4 MiB.
    fn big(i: usize) -> DynamicEntity {
        let text = "x".repeat(32_000);
        let mut e = DynamicEntity::new("p", format!("r{i}"));
        for p in 0..15 {
            e.set(format!("S{p}"), text.as_str());
        }
        e
    }

    /// A copy of a transaction counts the payload of the operations it keeps
    /// on the embedded store too (whose operations carry bags, not JSON), so
    /// the 4 MiB limit still falls where it falls in the original.
    #[test]
    fn a_copy_counts_the_payload_it_keeps_on_a_store_of_bags() {
        let table = TableServiceClient::embedded()
            .table::<DynamicEntity>("Copies")
            .unwrap();
        let mut tx = table.transaction();
        for i in 0..8 {
            tx.insert(&big(i)).unwrap();
        }
        let mut copy = tx.copy_keeping(|_| true);
        assert_eq!(copy.size, tx.size);
        let err = copy.insert(&big(8)).unwrap_err();
        assert_eq!(err.batch_index(), Some(8));
        assert!(err.to_string().contains("payload"), "{err}");
        assert!(tx.insert(&big(8)).is_err());

        let half = tx.copy_keeping(|i| i % 2 == 0);
        assert_eq!(half.len(), 4);
        assert!(
            half.size < tx.size / 2 + 4_000,
            "{} of {}",
            half.size,
            tx.size
        );
    }

    /// The RowKey rule is exact and covers the operations a copy keeps.
    #[test]
    fn row_keys_are_found_exactly_in_a_transaction_and_its_copies() {
        let table = TableServiceClient::embedded()
            .table::<DynamicEntity>("RowKeys")
            .unwrap();
        let mut tx = table.transaction();
        for rk in ["a", "b", "ab", ""] {
            tx.insert(&DynamicEntity::new("p", rk)).unwrap();
        }
        for rk in ["a", "b", "ab", ""] {
            assert!(tx.has_row_key(rk), "{rk:?}");
        }
        for rk in ["A", "ba", "a ", "c"] {
            assert!(!tx.has_row_key(rk), "{rk:?}");
        }
        let err = tx.delete(("p", "ab"), IfMatch::Any).unwrap_err();
        assert_eq!(err.batch_index(), Some(4));
        let copy = tx.copy_keeping(|i| i != 1);
        assert!(copy.has_row_key("a") && copy.has_row_key("ab"));
        assert!(!copy.has_row_key("b"));
    }
}
