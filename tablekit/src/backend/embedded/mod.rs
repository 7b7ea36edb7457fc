//! The embedded backend: an in-process store with the Azure Table service's
//! semantics, for examples, tests and users' unit tests (see
//! [`TableServiceClient::embedded`](crate::TableServiceClient::embedded)).
//!
//! Everything above the seam is the same code on both backends: the clients
//! validate and encode exactly as they do for HTTP, then hand the store an
//! [`Operation`]. Reads come back as [`Payload::Stored`]: shared versions of
//! the stored property bags, decoded straight into the caller's type.
//!
//! # Where the embedded store follows the service and Azurite does not
//!
//! The store implements the service's documented rules. Azurite (3.35), the
//! emulator the integration tests run on, is laxer in these places; the
//! behaviour suite asserts the service's answer on embedded and Azurite's on
//! Azurite. This table is the one list of those differences.
//!
//! | case | Azure Table service and the embedded store | Azurite 3.35 | why the store follows the service |
//! |---|---|---|---|
//! | filter literal of another type than the property (`Rating gt 1.2` over an Int32 `Rating`) | the comparison is false: the entity is skipped (data model §11) | compares by JS coercion: `Rating gt 1.2` matches Int32 2, `Rating eq '2'` matches Int64 2 | code tested on Azurite would otherwise match entities Azure never returns |
//! | Int64 literal against an Int32 property (`Age ge 0L`) | false, no entity | 500 with an empty body | same rule as above; a 500 is an emulator fault |
//! | merge that makes an entity exceed 252 custom properties (or 1 MiB) | 400 `TooManyProperties` / `EntityTooLarge`, nothing written | accepted (no property-count limit) | the limit is the service's; only the server sees the merged entity |
//! | keys of 513 to 1,024 characters | accepted (limit 1 KiB) | rejected (caps keys at 512) | the service's limit; the client checks 1,024 |
//! | `-0.0` stored as a Double | read back as `-0.0` | read back as `0.0` | the service stores the IEEE bits it is given |
//! | a table name in another case than created (`MYTABLE` for `MyTable`) for entity operations | the same table (names are case-insensitive, case-preserving) | 404 `TableNotFound` | data model §3.1 |
//! | transaction over several partitions (bypassing the client's check) | 400 `CommandsInBatchActOnDifferentPartitions`, with the index | accepted | a transaction is atomic within one partition only |
//!
//! Not modelled: the ~30 s during which a deleted table's name cannot be reused
//! (`TableBeingDeleted`), throttling, and the 5 s query time limit; pages are cut
//! only at `$top` / 1,000 entities.

mod check;
mod clock;
mod errors;
mod key;
mod store;

use std::sync::Arc;

use super::{Backend, BatchKind, Operation, Payload, Response, Selection};
use crate::entity::EntityKey;
use crate::error::Result;
use store::Store;

/// The in-process backend. Clones share one store.
#[derive(Debug, Clone, Default)]
pub(crate) struct EmbeddedBackend {
    store: Arc<Store>,
}

impl EmbeddedBackend {
    /// A fresh, empty store.
    pub(crate) fn new() -> Self {
        EmbeddedBackend::default()
    }

    fn run(&self, op: Operation<'_>) -> Result<Response> {
        let store = &self.store;
        Ok(match op {
            Operation::CreateTable { table } => {
                store.create_table(table)?;
                Response::Done
            }
            Operation::DeleteTable { table } => {
                store.delete_table(table)?;
                Response::Done
            }
            Operation::ListTables {
                prefix,
                next_table_name,
                top,
            } => {
                let (names, next_table_name) = store.list_tables(prefix, next_table_name, top);
                Response::Tables {
                    names,
                    next_table_name,
                }
            }
            Operation::Insert { table, body } => {
                let t = store.table(table)?;
                let entity = check::entity_from_body(&body)?;
                let key = EntityKey::new(entity.partition_key.clone(), entity.row_key.clone());
                written(t.write_one(store.clock(), &key, &BatchKind::Insert, Some(entity))?)?
            }
            Operation::Write {
                table,
                key,
                body,
                mode,
                if_match,
            } => {
                let t = store.table(table)?;
                let mut entity = check::entity_from_body(&body)?;
                // The URL's key is the entity's key; the body's keys are ignored.
                entity.partition_key.clone_from(&key.partition_key);
                entity.row_key.clone_from(&key.row_key);
                let kind = match if_match {
                    None => BatchKind::Upsert(mode),
                    Some(m) => BatchKind::Update(mode, m.clone()),
                };
                written(t.write_one(store.clock(), key, &kind, Some(entity))?)?
            }
            Operation::Delete {
                table,
                key,
                if_match,
            } => {
                let t = store.table(table)?;
                key.validate().map_err(|v| errors::from_validation(&v))?;
                t.write_one(
                    store.clock(),
                    key,
                    &BatchKind::Delete(if_match.clone()),
                    None,
                )?;
                Response::Done
            }
            Operation::Get {
                table, key, select, ..
            } => {
                let t = store.table(table)?;
                Response::Entity(t.get(key).map(|e| Payload::Stored {
                    entities: vec![e],
                    select: select.map(Selection::parse),
                }))
            }
            Operation::Query {
                table,
                filter,
                select,
                top,
                continuation,
                ..
            } => {
                let t = store.table(table)?;
                let filter = filter.map(crate::filter::parse).transpose().map_err(|e| {
                    errors::invalid_input(&format!(
                        "One of the query parameter values is not valid. ({e})"
                    ))
                })?;
                let (entities, continuation) = t.query(filter.as_ref(), top, continuation);
                Response::Page {
                    payload: Payload::Stored {
                        entities,
                        select: select.map(Selection::parse),
                    },
                    continuation,
                }
            }
            Operation::Transaction { table, ops } => {
                let t = store.table(table)?;
                Response::Transaction(t.transaction(store.clock(), ops)?)
            }
        })
    }
}

fn written(w: Option<super::Written>) -> Result<Response> {
    w.map(Response::Written)
        .ok_or_else(|| crate::error::Error::decode("a write produced no version"))
}

#[async_trait::async_trait]
impl Backend for EmbeddedBackend {
    async fn execute(&self, op: Operation<'_>) -> Result<Response> {
        self.run(op)
    }
}
