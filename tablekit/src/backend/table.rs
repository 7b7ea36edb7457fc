//! The table half of the seam: what a table client asks of a backend
//! ([`Operation`]) and what it gets back ([`Response`]).
//!
//! Clients validate and encode before building an [`Operation`]; a backend only
//! carries it out. The entity of a single write travels as an [`EntityBody`]: the
//! service's JSON for HTTP, the checked property bag for a backend that stores
//! bags; transaction bodies are always JSON. Reads come back as a [`Payload`]:
//! JSON from the HTTP backend, stored property bags from the embedded one.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use super::stored::{self, Selection, StoredEntity};
use super::Repeat;
use crate::codec::read::{decode_entity, decode_page};
use crate::codec::write::entity_to_json;
use crate::continuation::Continuation;
use crate::entity::{DynamicEntity, ETag, EntityKey, IfMatch, TableEntity, UpdateMode};
use crate::error::Result;

/// One request to a backend.
#[derive(Debug)]
pub(crate) enum Operation<'a> {
    CreateTable {
        table: &'a str,
    },
    DeleteTable {
        table: &'a str,
    },
    ListTables {
        /// Only names starting with this.
        prefix: Option<&'a str>,
        /// Only names this OData filter (over `TableName`) holds for; checked
        /// by the client.
        filter: Option<&'a str>,
        next_table_name: Option<&'a str>,
        top: Option<usize>,
    },
    Insert {
        table: &'a str,
        body: EntityBody,
    },
    /// Update (with a condition) or upsert (without one).
    Write {
        table: &'a str,
        key: &'a EntityKey,
        body: EntityBody,
        mode: UpdateMode,
        if_match: Option<&'a IfMatch>,
    },
    Delete {
        table: &'a str,
        key: &'a EntityKey,
        if_match: &'a IfMatch,
    },
    Get {
        table: &'a str,
        key: &'a EntityKey,
        select: Option<&'a str>,
        /// Whether the reader needs the service's type annotations.
        annotations: bool,
    },
    Query {
        table: &'a str,
        filter: Option<&'a str>,
        select: Option<&'a str>,
        top: Option<usize>,
        continuation: Option<&'a Continuation>,
        annotations: bool,
    },
    Transaction {
        table: &'a str,
        /// Owned, so a backend that stores bags can keep them without a copy.
        ops: Vec<BatchOp>,
    },
}

impl Operation<'_> {
    /// A short name for logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Operation::CreateTable { .. } => "create_table",
            Operation::DeleteTable { .. } => "delete_table",
            Operation::ListTables { .. } => "list_tables",
            Operation::Insert { .. } => "insert",
            Operation::Write { if_match: None, .. } => "upsert",
            Operation::Write { .. } => "update",
            Operation::Delete { .. } => "delete",
            Operation::Get { .. } => "get",
            Operation::Query { .. } => "query",
            Operation::Transaction { .. } => "transaction",
        }
    }

    /// The table the operation is about, if one.
    pub(crate) fn table(&self) -> Option<&str> {
        match self {
            Operation::ListTables { .. } => None,
            Operation::CreateTable { table }
            | Operation::DeleteTable { table }
            | Operation::Insert { table, .. }
            | Operation::Write { table, .. }
            | Operation::Delete { table, .. }
            | Operation::Get { table, .. }
            | Operation::Query { table, .. }
            | Operation::Transaction { table, .. } => Some(table),
        }
    }

    /// How the operation may be repeated after a failed attempt.
    pub(crate) fn repeat(&self) -> Repeat {
        match self {
            Operation::ListTables { .. } | Operation::Get { .. } | Operation::Query { .. } => {
                Repeat::Read
            }
            // An unconditional write (upsert, or `If-Match: *`) leaves the same
            // entity however often it is applied.
            Operation::Write { if_match, .. } => match if_match {
                Some(IfMatch::ETag(_)) => Repeat::Detected,
                _ => Repeat::Idempotent,
            },
            Operation::Transaction { ops, .. } => {
                let unconditional = |op: &BatchOp| {
                    matches!(
                        op.kind,
                        BatchKind::Upsert(_) | BatchKind::Update(_, IfMatch::Any)
                    )
                };
                if ops.iter().all(unconditional) {
                    Repeat::Idempotent
                } else {
                    Repeat::Detected
                }
            }
            // Applied once, each is refused the second time: 409 for a create
            // or an insert, 412 for a stale ETag, 404 for a delete.
            Operation::Insert { .. }
            | Operation::Delete { .. }
            | Operation::CreateTable { .. }
            | Operation::DeleteTable { .. } => Repeat::Detected,
        }
    }
}

/// The entity of a single write, encoded and validated by the client.
#[derive(Debug)]
pub(crate) enum EntityBody {
    /// The service's JSON.
    Json(Bytes),
    /// The property bag, for a backend that stores bags
    /// ([`Backend::stores_property_bags`]).
    Bag(Box<DynamicEntity>),
}

impl EntityBody {
    /// The JSON of the entity (encoded here if it came as a bag).
    pub(crate) fn json(&self) -> Result<Bytes> {
        match self {
            EntityBody::Json(b) => Ok(b.clone()),
            EntityBody::Bag(e) => Ok(entity_to_json(e.as_ref())?.into()),
        }
    }
}

/// One operation of an entity group transaction, encoded and validated.
#[derive(Debug, Clone)]
pub(crate) struct BatchOp {
    pub(crate) kind: BatchKind,
    pub(crate) key: EntityKey,
    /// The entity's JSON, for every kind but delete. It is what the 4 MiB limit
    /// is measured on, whatever the backend.
    /// Shared: a kept copy (for a read-back) and the backend's read of it
    /// are the same bytes.
    pub(crate) body: Option<Bytes>,
    /// The same entity as a checked property bag, for a backend that stores
    /// bags ([`Backend::stores_property_bags`]), which then need neither parse
    /// `body` nor check the entity again.
    // Read only by the embedded store.
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(crate) bag: Option<crate::codec::bag::CheckedBag>,
    /// With `bag`: the length of its JSON, as the client counted it when it
    /// checked the bag, for the payload limit (so the store need not walk
    /// the entity again) and the bytes a table's stats count as sent.
    pub(crate) bag_json_len: usize,
}

/// What a transaction operation does.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BatchKind {
    Insert,
    Upsert(UpdateMode),
    Update(UpdateMode, IfMatch),
    Delete(IfMatch),
}

/// What a backend answers.
#[derive(Debug)]
pub(crate) enum Response {
    Done,
    Written(Written),
    Entity(Option<Payload>),
    Page {
        payload: Payload,
        continuation: Option<Continuation>,
    },
    Tables {
        names: Vec<String>,
        next_table_name: Option<String>,
    },
    Transaction(Vec<Option<ETag>>),
}

/// The outcome of a successful write: the entity's new ETag and Timestamp.
#[derive(Clone)]
pub struct Written {
    pub(crate) etag: ETag,
    /// The Timestamp, if known apart from the ETag; `None`: the one the ETag
    /// carries, read from it when asked for (most writes' callers never ask).
    pub(crate) timestamp: Option<Option<chrono::DateTime<chrono::Utc>>>,
    pub(crate) confirmed_by_read_back: bool,
}

impl fmt::Debug for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Written")
            .field("etag", &self.etag)
            .field("timestamp", &self.timestamp())
            .field("confirmed_by_read_back", &self.confirmed_by_read_back)
            .finish()
    }
}

impl PartialEq for Written {
    fn eq(&self, other: &Self) -> bool {
        self.etag == other.etag
            && self.confirmed_by_read_back == other.confirmed_by_read_back
            && self.timestamp() == other.timestamp()
    }
}

impl Eq for Written {}

impl Written {
    /// Builds the outcome from the ETag the service returned.
    pub(crate) fn from_etag(etag: ETag) -> Self {
        Written {
            timestamp: None,
            etag,
            confirmed_by_read_back: false,
        }
    }

    /// Whether the write's own answer was lost and its success was confirmed
    /// by reading the entity back instead: an attempt failed in a way that
    /// left its outcome unknown (a connection cut, a timeout, a 500), the
    /// retry met the 409, 412 or 404 that attempt provoked, and the entity
    /// read back held exactly what the write sent (see
    /// [`AmbiguousWrites`](crate::table::AmbiguousWrites)). The ETag and
    /// Timestamp are then the ones read back. `false` for a write the
    /// service acknowledged. Count these to watch how often answers are lost.
    pub fn confirmed_by_read_back(&self) -> bool {
        self.confirmed_by_read_back
    }

    /// The entity's new ETag: pass it as [`IfMatch::ETag`] to make the next write conditional.
    pub fn etag(&self) -> &ETag {
        &self.etag
    }

    /// The entity's new Timestamp, when the service's ETag carries it (Azure and Azurite do).
    pub fn timestamp(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        match self.timestamp {
            Some(given) => given,
            None => self.etag.timestamp(),
        }
    }

    /// Stores the new ETag and Timestamp in an entity that keeps them.
    pub fn apply_to<T: TableEntity>(&self, entity: &mut T) {
        entity.set_etag(self.etag.clone());
        if let Some(t) = self.timestamp() {
            entity.set_timestamp(t);
        }
    }
}

/// Entities as a backend returns them, decoded into the caller's type on demand.
pub(crate) enum Payload {
    /// A JSON body; `etag` is the response's ETag header, for single entities.
    Json { body: Bytes, etag: Option<String> },
    /// Entities held in process (the embedded backend): shared, immutable
    /// versions, viewed through `$select` and decoded straight from their
    /// property bags, never turned into JSON.
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    Stored {
        entities: Vec<Arc<StoredEntity>>,
        select: Option<Selection>,
    },
    /// A page read from an embedded store file: the entities' on-disk keys
    /// and records, decoded straight into the caller's type.
    #[cfg(feature = "durable")]
    Records {
        rows: crate::backend::embedded::durable::rows::Rows,
        select: Option<Selection>,
    },
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Payload::Json { body, .. } => write!(f, "Payload::Json({} bytes)", body.len()),
            Payload::Stored { entities, .. } => {
                write!(f, "Payload::Stored({} entities)", entities.len())
            }
            #[cfg(feature = "durable")]
            Payload::Records { rows, .. } => write!(f, "Payload::Records({} entities)", rows.len()),
        }
    }
}

impl Payload {
    /// How many entities an embedded store's page holds (`None` for JSON,
    /// whose entities are only counted by decoding).
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(crate) fn stored_len(&self) -> Option<usize> {
        match self {
            Payload::Json { .. } => None,
            Payload::Stored { entities, .. } => Some(entities.len()),
            #[cfg(feature = "durable")]
            Payload::Records { rows, .. } => Some(rows.len()),
        }
    }

    /// The ETag of a single-entity answer.
    pub(crate) fn etag(&self) -> Option<&str> {
        match self {
            Payload::Json { etag, .. } => etag.as_deref(),
            Payload::Stored { entities, .. } => entities.first().and_then(|e| e.etag()),
            // Pages of queries only, which have no single ETag.
            #[cfg(feature = "durable")]
            Payload::Records { .. } => None,
        }
    }

    /// The entity of a point read of `key`: one under another key is refused.
    pub(crate) fn decode_one<T: TableEntity>(&self, key: &crate::entity::EntityKey) -> Result<T> {
        match self {
            Payload::Json { body, etag } => decode_entity(
                body,
                etag.as_deref(),
                Some((&key.partition_key, &key.row_key)),
            ),
            Payload::Stored { entities, select } => match entities.first() {
                Some(e) => stored::decode_one(e, select.as_ref()),
                None => Err(crate::error::Error::decode("an empty single-entity answer")),
            },
            #[cfg(feature = "durable")]
            Payload::Records { rows, select } => {
                let mut one = Vec::with_capacity(1);
                stored::decode_rows(rows, select.as_ref(), &mut one)?;
                one.pop()
                    .ok_or_else(|| crate::error::Error::decode("an empty single-entity answer"))
            }
        }
    }

    /// The first `len` entities of a page, each decoded when it is read (a
    /// page of records; other pages are decoded at once).
    #[cfg(feature = "durable")]
    pub(crate) fn decode_each<T: TableEntity>(
        self,
        len: usize,
    ) -> Box<dyn Iterator<Item = Result<T>> + Send> {
        match self {
            Payload::Records { rows, select } => {
                let mut spare = stored::Spare::default();
                Box::new(
                    (0..len.min(rows.len()))
                        .map(move |i| stored::decode_row_at(&rows, i, select.as_ref(), &mut spare)),
                )
            }
            other => {
                let mut items = Vec::new();
                match other.decode_into(&mut items) {
                    Ok(()) => {
                        items.truncate(len);
                        Box::new(items.into_iter().map(Ok))
                    }
                    Err(e) => Box::new(std::iter::once(Err(e))),
                }
            }
        }
    }

    pub(crate) fn decode_into<T: TableEntity>(&self, out: &mut Vec<T>) -> Result<()> {
        match self {
            Payload::Json { body, .. } => decode_page(body, out),
            Payload::Stored { entities, select } => {
                stored::decode_page(entities, select.as_ref(), out)
            }
            #[cfg(feature = "durable")]
            Payload::Records { rows, select } => stored::decode_rows(rows, select.as_ref(), out),
        }
    }
}

/// Something that carries out operations: the HTTP client, or the embedded store.
#[async_trait::async_trait]
pub(crate) trait Backend: Send + Sync + fmt::Debug {
    async fn execute(&self, op: Operation<'_>) -> Result<Response>;

    /// Table ACLs, the Table service's properties and stats. A backend that
    /// does not carry them out refuses them by default.
    #[cfg(feature = "admin")]
    async fn admin(&self, op: super::admin::AdminOp<'_>) -> Result<super::admin::AdminResponse> {
        Err(super::admin::unsupported(&op))
    }

    /// The account's table endpoint, for a backend that has one (over
    /// HTTP): who the account is. `None` for an in-process store.
    fn table_endpoint(&self) -> Option<&str> {
        None
    }

    /// Whether single writes should come as [`EntityBody::Bag`] rather than JSON.
    fn stores_property_bags(&self) -> bool {
        false
    }

    /// Whether it may throttle (503 ServerBusy, 429): the service and a
    /// simulation of it do, a plain embedded store never does. The bulk
    /// writer keeps to the service's targets only where they apply.
    fn may_throttle(&self) -> bool {
        true
    }
}
