//! The embedded backend: an in-process store with the Azure Table service's
//! semantics, for examples, tests and users' unit tests (see
//! [`TableServiceClient::embedded`](crate::TableServiceClient::embedded)).
//!
//! Everything above the seam is the same code on both backends: the clients
//! validate and encode exactly as they do for HTTP, then hand the store an
//! [`Operation`]. Reads come back as [`Payload::Stored`]: shared versions of
//! the stored property bags, decoded straight into the caller's type.
//!
//! The same store can be kept durably in one file
//! ([`TableServiceClient::embedded_at`](crate::TableServiceClient::embedded_at)):
//! the `durable` module commits each write to a redb database before the store
//! applies it, and says why redb.
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
//! | Int64 literal against an Int32 property (`Age ge 0L`) | false, no entity | the whole query fails: 500 with an empty body, even if other entities hold an Int64 of that name | same rule as above; a 500 is an emulator fault |
//! | `gt`/`ge`/`lt`/`le` on a Binary (`H lt X'0001'` over `[255]`) | bytewise order: false | orders the base64 text (`"/w=="` < `"AAE="`): true | the service compares the bytes it stores |
//! | merge that makes an entity exceed 252 custom properties (or 1 MiB) | 400 `TooManyProperties` / `EntityTooLarge`, nothing written | accepted (no property-count limit) | the limit is the service's; only the server sees the merged entity |
//! | keys of 513 to 1,024 characters | accepted: the limit is 1,024 UTF-16 code units (a character outside the Basic Multilingual Plane, an emoji, counts 2), whatever their size in bytes | rejected (caps keys at 512) | the service's limit, counted as the service counts it; the client checks the same count (`validate::key`) |
//! | `-0.0` stored as a Double | read back as `-0.0` | read back as `0.0` | the service stores the IEEE bits it is given |
//! | a table name in another case than created (`MYTABLE` for `MyTable`) for entity operations | the same table (names are case-insensitive, case-preserving) | 404 `TableNotFound` | data model §3.1 |
//! | transaction of more than 100 operations (bypassing the client's check) | 400 `InvalidInput`, index 99 | 400 `InvalidInput`, index 0 | the service's answer (`99:The batch request operation exceeds ...`) |
//! | transaction over several partitions (bypassing the client's check) | 400 `CommandsInBatchActOnDifferentPartitions`, with the index | accepted | a transaction is atomic within one partition only |
//! | a table's stored access policy without a start, an expiry or permissions | stored: the SAS tied to it supplies the rest | 400 with an empty body (its queue and container policies may leave parts out) | the REST reference makes each part optional |
//!
//! Not modelled: the ~30 s during which a deleted table's name cannot be reused
//! (`TableBeingDeleted`), throttling (unless asked for: see
//! [`Simulation`](crate::simulation::Simulation)), and the 5 s query time limit; pages are cut
//! only at `$top` / 1,000 entities. Each entity a transaction writes gets its own
//! (increasing) Timestamp and ETag: whether the service gives all of one batch the
//! same Timestamp is not documented, so the store does not assume it.

#[cfg(feature = "admin")]
mod admin;
#[cfg(feature = "blob")]
mod blob_lease;
#[cfg(feature = "blob")]
mod blob_manage;
#[cfg(feature = "blob")]
pub(crate) mod blobs;
pub(crate) mod check;
mod clock;
#[cfg(feature = "durable")]
pub(crate) mod durable;
mod errors;
mod key;
#[cfg(feature = "queue")]
pub(crate) mod queues;
mod simulate;
mod store;

use std::sync::Arc;

#[cfg(feature = "durable")]
pub(crate) use durable::{check_file, compact_file, hold as hold_file, remove_file};

use super::{Backend, BatchKind, Operation, Payload, Response, Selection};
use crate::entity::EntityKey;
use crate::error::Result;
pub(crate) use simulate::Simulated;
use store::Store;

/// The in-process backend. Clones share one store.
#[derive(Clone, Default)]
pub(crate) struct EmbeddedBackend {
    store: Arc<Store>,
    /// Table ACLs and the service's settings (kept in memory only).
    #[cfg(feature = "admin")]
    admin: Arc<admin::AdminState>,
}

impl std::fmt::Debug for EmbeddedBackend {
    /// The store's name and size only: no entity, no policy.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedBackend")
            .field("store", &self.store)
            .finish()
    }
}

impl EmbeddedBackend {
    /// A fresh, empty store.
    pub(crate) fn new() -> Self {
        EmbeddedBackend::default()
    }

    /// The store kept in the file at `path` (created if missing), with
    /// everything the file holds (see the `durable` module).
    #[cfg(feature = "durable")]
    pub(crate) fn open(path: &std::path::Path) -> Result<Self> {
        Ok(EmbeddedBackend {
            store: Arc::new(Store::open(path)?),
            #[cfg(feature = "admin")]
            admin: Arc::default(),
        })
    }

    /// How the store names itself in its errors.
    pub(crate) fn name(&self) -> String {
        self.store.name()
    }

    /// [`EmbeddedBackend::run`], waited for on this thread.
    #[cfg(test)]
    pub(crate) fn run_now(&self, op: Operation<'_>) -> Result<Response> {
        block_on(self.run(op))
    }

    async fn run(&self, op: Operation<'_>) -> Result<Response> {
        let store = &self.store;
        Ok(match op {
            Operation::CreateTable { table } => {
                store.create_table(table)?;
                #[cfg(feature = "admin")]
                self.admin.forget(&table.to_ascii_lowercase());
                Response::Done
            }
            Operation::DeleteTable { table } => {
                store.delete_table(table)?;
                #[cfg(feature = "admin")]
                self.admin.forget(&table.to_ascii_lowercase());
                Response::Done
            }
            Operation::ListTables {
                prefix,
                filter,
                next_table_name,
                top,
            } => {
                let filter = filter.map(crate::filter::parse).transpose().map_err(|e| {
                    errors::invalid_input(&format!(
                        "One of the query parameter values is not valid. ({e})"
                    ))
                })?;
                let (names, next_table_name) =
                    store.list_tables(prefix, filter.as_ref(), next_table_name, top);
                Response::Tables {
                    names,
                    next_table_name,
                }
            }
            Operation::Insert { table, body } => {
                let t = store.table(table)?;
                let entity = check::entity_of(body)?;
                let key = EntityKey::new(entity.partition_key.clone(), entity.row_key.clone());
                written(
                    t.write_one(store, &key, &BatchKind::Insert, Some(entity))
                        .await?,
                )?
            }
            Operation::Write {
                table,
                key,
                body,
                mode,
                if_match,
            } => {
                let t = store.table(table)?;
                let mut entity = check::entity_of(body)?;
                // The URL's key is the entity's key; the body's keys are ignored.
                entity.partition_key.clone_from(&key.partition_key);
                entity.row_key.clone_from(&key.row_key);
                let kind = match if_match {
                    None => BatchKind::Upsert(mode),
                    Some(m) => BatchKind::Update(mode, m.clone()),
                };
                written(t.write_one(store, key, &kind, Some(entity)).await?)?
            }
            Operation::Delete {
                table,
                key,
                if_match,
            } => {
                let t = store.table(table)?;
                key.validate().map_err(|v| errors::from_validation(&v))?;
                t.write_one(store, key, &BatchKind::Delete(if_match.clone()), None)
                    .await?;
                Response::Done
            }
            Operation::Get {
                table, key, select, ..
            } => {
                let t = store.table(table)?;
                Response::Entity(t.get(store, key)?.map(|e| Payload::Stored {
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
                let (page, continuation) = t.query(store, filter.as_ref(), top, continuation)?;
                let select = select.map(Selection::parse);
                let payload = match page {
                    store::Page::Shared(entities) => Payload::Stored { entities, select },
                    #[cfg(feature = "durable")]
                    store::Page::Records(rows) => Payload::Records { rows, select },
                };
                Response::Page {
                    payload,
                    continuation,
                }
            }
            Operation::Transaction { table, ops } => {
                // The service names the first operation (index 0) when the
                // table is missing, as for any failure of the whole request.
                let t = store.table(table).map_err(|e| errors::at_index(e, 0))?;
                Response::Transaction(t.transaction(store, ops).await?)
            }
        })
    }
}

/// Runs `f` to its end on this thread, parking it while `f` waits (tests of
/// the store's synchronous parts; the store's waits need no runtime).
#[cfg(test)]
pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
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
            .await
            .map_err(|e| e.answered_by(self.store.name()))
    }

    fn may_throttle(&self) -> bool {
        false
    }

    fn stores_property_bags(&self) -> bool {
        true
    }

    #[cfg(feature = "admin")]
    async fn admin(&self, op: super::admin::AdminOp<'_>) -> Result<super::admin::AdminResponse> {
        // Table names are case-insensitive: policies are kept under the
        // lower-cased name of a table that exists.
        let table_key = |name: &str| {
            self.store.table(name)?;
            Ok(name.to_ascii_lowercase())
        };
        self.admin
            .run(op, table_key, chrono::Utc::now())
            .map_err(|e| e.answered_by(self.store.name()))
    }
}

#[cfg(test)]
mod tests {
    //! The store's own checks, reached by operations that bypass the clients'
    //! validation (the clients refuse all of these before any I/O): each is
    //! answered with the service's status and code, and leaves the store unchanged.

    use super::*;
    use crate::backend::{BatchOp, EntityBody};
    use crate::entity::IfMatch;
    use crate::error::ErrorCode;
    use crate::Continuation;
    use bytes::Bytes;

    fn store_with_table() -> EmbeddedBackend {
        let b = EmbeddedBackend::new();
        b.run_now(Operation::CreateTable { table: "T1x" }).unwrap();
        b
    }

    fn insert(b: &EmbeddedBackend, json: String) -> Result<Response> {
        b.run_now(Operation::Insert {
            table: "T1x",
            body: EntityBody::Json(Bytes::from(json)),
        })
    }

    fn count(b: &EmbeddedBackend) -> usize {
        match b
            .run_now(Operation::Query {
                table: "T1x",
                filter: None,
                select: None,
                top: None,
                continuation: None,
                annotations: true,
            })
            .unwrap()
        {
            Response::Page {
                payload: Payload::Stored { entities, .. },
                ..
            } => entities.len(),
            other => panic!("{other:?}"),
        }
    }

    #[track_caller]
    fn assert_code(r: Result<Response>, status: u16, code: ErrorCode) {
        let err = r.unwrap_err();
        assert_eq!(err.status(), Some(status), "{err:?}");
        assert_eq!(err.code(), Some(&code), "{err:?}");
    }

    #[test]
    fn limits_are_enforced_by_the_store_with_the_service_codes() {
        let b = store_with_table();
        let props: String = (0..253).map(|i| format!(",\"P{i}\":1")).collect();
        assert_code(
            insert(
                &b,
                format!("{{\"PartitionKey\":\"p\",\"RowKey\":\"r\"{props}}}"),
            ),
            400,
            ErrorCode::TooManyProperties,
        );
        let big = "x".repeat(32 * 1024 + 1);
        assert_code(
            insert(
                &b,
                format!("{{\"PartitionKey\":\"p\",\"RowKey\":\"r\",\"S\":\"{big}\"}}"),
            ),
            400,
            ErrorCode::PropertyValueTooLarge,
        );
        // 64 KiB counted as UTF-16: 32,768 'é' are 65,536 bytes (ok), one more is not.
        let e = "\u{e9}".repeat(32 * 1024);
        insert(
            &b,
            format!("{{\"PartitionKey\":\"p\",\"RowKey\":\"ok\",\"S\":\"{e}\"}}"),
        )
        .unwrap();
        let blobs: String = (0..17)
            .map(|i| {
                format!(
                    ",\"B{i}@odata.type\":\"Edm.Binary\",\"B{i}\":\"{}\"",
                    "A".repeat(87380)
                )
            })
            .collect();
        assert_code(
            insert(
                &b,
                format!("{{\"PartitionKey\":\"p\",\"RowKey\":\"r\"{blobs}}}"),
            ),
            400,
            ErrorCode::EntityTooLarge,
        );
        for (pk, rk) in [("a/b", "r"), ("p", "a#b"), ("p", "\u{7f}")] {
            assert_code(
                insert(
                    &b,
                    format!("{{\"PartitionKey\":\"{pk}\",\"RowKey\":\"{rk}\"}}"),
                ),
                400,
                ErrorCode::OutOfRangeInput,
            );
        }
        let long = "k".repeat(1025);
        assert_code(
            insert(
                &b,
                format!("{{\"PartitionKey\":\"p\",\"RowKey\":\"{long}\"}}"),
            ),
            400,
            ErrorCode::OutOfRangeInput,
        );
        assert_code(
            insert(&b, r#"{"PartitionKey":"p","RowKey":"r","D@odata.type":"Edm.DateTime","D":"1600-12-31T23:59:59Z"}"#.into()),
            400,
            ErrorCode::OutOfRangeInput,
        );
        assert_code(
            insert(&b, r#"{"PartitionKey":"p","RowKey":"r","a-b":1}"#.into()),
            400,
            ErrorCode::PropertyNameInvalid,
        );
        assert_code(
            insert(
                &b,
                r#"{"PartitionKey":"p","RowKey":"r","A":1,"A":2}"#.into(),
            ),
            400,
            ErrorCode::DuplicatePropertiesSpecified,
        );
        assert_eq!(count(&b), 1, "only the valid entity was stored");
    }

    #[test]
    fn a_transaction_the_client_would_refuse_fails_whole_with_its_index() {
        let b = store_with_table();
        let op = |pk: &str, rk: &str| BatchOp {
            kind: BatchKind::Insert,
            key: EntityKey::new(pk, rk),
            body: Some(format!("{{\"PartitionKey\":\"{pk}\",\"RowKey\":\"{rk}\"}}").into()),
            bag: None,
            bag_json_len: 0,
        };
        let ops = [op("p", "a"), op("p", "b"), op("q", "c")];
        let err = b
            .run_now(Operation::Transaction {
                table: "T1x",
                ops: ops.to_vec(),
            })
            .unwrap_err();
        assert_eq!(err.status(), Some(400));
        assert_eq!(err.batch_index(), Some(2));
        let ops = [op("p", "a"), op("p", "a")];
        let err = b
            .run_now(Operation::Transaction {
                table: "T1x",
                ops: ops.to_vec(),
            })
            .unwrap_err();
        assert_eq!(err.code(), Some(&ErrorCode::InvalidDuplicateRow));
        assert_eq!(err.batch_index(), Some(1));
        // Over 100 operations: the service's 400 InvalidInput, naming operation 99.
        for n in [101, 150] {
            let ops: Vec<_> = (0..n).map(|i| op("p", &format!("r{i}"))).collect();
            let err = b
                .run_now(Operation::Transaction { table: "T1x", ops })
                .unwrap_err();
            assert_eq!(err.status(), Some(400), "{err:?}");
            assert_eq!(err.code(), Some(&ErrorCode::InvalidInput), "{err:?}");
            assert_eq!(err.batch_index(), Some(99), "{err:?}");
        }
        let ops: Vec<_> = (0..100).map(|i| op("p", &format!("r{i}"))).collect();
        b.run_now(Operation::Transaction { table: "T1x", ops })
            .expect("100 operations are allowed");
        assert_eq!(count(&b), 100);
        b.run_now(Operation::DeleteTable { table: "T1x" }).unwrap();
        b.run_now(Operation::CreateTable { table: "T1x" }).unwrap();
        let del = BatchOp {
            kind: BatchKind::Delete(IfMatch::Any),
            key: EntityKey::new("p", "missing"),
            body: None,
            bag: None,
            bag_json_len: 0,
        };
        let ops = [op("p", "a"), del];
        let err = b
            .run_now(Operation::Transaction {
                table: "T1x",
                ops: ops.to_vec(),
            })
            .unwrap_err();
        assert_eq!(err.status(), Some(404));
        assert_eq!(err.batch_index(), Some(1));
        assert_eq!(count(&b), 0, "nothing applied");
    }

    /// An insert of `{"PartitionKey":"p","RowKey":rk}` padded with JSON whitespace
    /// to exactly `len` bytes.
    fn padded_insert(rk: &str, len: usize) -> BatchOp {
        let mut body = format!("{{\"PartitionKey\":\"p\",\"RowKey\":\"{rk}\"}}").into_bytes();
        body.resize(len, b' ');
        BatchOp {
            kind: BatchKind::Insert,
            key: EntityKey::new("p", rk),
            body: Some(body.into()),
            bag: None,
            bag_json_len: 0,
        }
    }

    #[test]
    fn a_transaction_payload_over_4_mib_is_a_413_without_an_index() {
        let b = store_with_table();
        let quarter = crate::validate::MAX_BATCH_BYTES / 4;
        let over: Vec<_> = (0..4)
            .map(|i| padded_insert(&format!("r{i}"), quarter + usize::from(i == 3)))
            .collect();
        let err = b
            .run_now(Operation::Transaction {
                table: "T1x",
                ops: over,
            })
            .unwrap_err();
        assert_eq!(err.status(), Some(413), "{err:?}");
        assert_eq!(err.code(), Some(&ErrorCode::RequestBodyTooLarge), "{err:?}");
        assert_eq!(err.batch_index(), None, "the request as a whole is refused");
        assert_eq!(count(&b), 0, "nothing applied");
        // Exactly 4 MiB is allowed.
        let exact: Vec<_> = (0..4)
            .map(|i| padded_insert(&format!("r{i}"), quarter))
            .collect();
        b.run_now(Operation::Transaction {
            table: "T1x",
            ops: exact,
        })
        .expect("4 MiB is within the limit");
        assert_eq!(count(&b), 4);
    }

    fn bag_insert(b: &EmbeddedBackend, e: crate::DynamicEntity) -> Result<Response> {
        b.run_now(Operation::Insert {
            table: "T1x",
            body: EntityBody::Bag(Box::new(e)),
        })
    }

    #[test]
    fn the_store_takes_252_custom_properties_and_refuses_253() {
        let b = store_with_table();
        let with = |rk: &str, n: usize| {
            (0..n).fold(crate::DynamicEntity::new("p", rk), |e, i| {
                e.with(format!("P{i}"), 1)
            })
        };
        bag_insert(&b, with("ok", 252)).expect("252 custom properties are allowed");
        assert_code(
            bag_insert(&b, with("over", 253)),
            400,
            ErrorCode::TooManyProperties,
        );
        // The same limits on the JSON path (a transaction's bodies).
        let props: String = (0..252).map(|i| format!(",\"P{i}\":1")).collect();
        insert(
            &b,
            format!("{{\"PartitionKey\":\"p\",\"RowKey\":\"json\"{props}}}"),
        )
        .expect("252 custom properties are allowed");
        assert_eq!(count(&b), 2);
    }

    #[test]
    fn the_store_takes_an_entity_of_exactly_1_mib_and_refuses_one_byte_more() {
        // The service's size formula: 4 bytes, the keys as UTF-16, and per property
        // 8 bytes, its name as UTF-16 and its value (a Binary: 4 + its length).
        let b = store_with_table();
        let limit = crate::validate::MAX_ENTITY_BYTES;
        let entity = |rk: &str, extra: usize| {
            let keys = 4 + 2 * ("p".len() + rk.len());
            let per_full = 8 + 2 * 3 + 4 + 65_536;
            let last = limit - keys - 15 * per_full - (8 + 2 * 3 + 4) + extra;
            (0..16).fold(crate::DynamicEntity::new("p", rk), |e, i| {
                let len = if i == 15 { last } else { 65_536 };
                e.with(format!("B{i:02}"), vec![7u8; len])
            })
        };
        bag_insert(&b, entity("r1", 0)).expect("exactly 1 MiB is allowed");
        assert_code(
            bag_insert(&b, entity("r2", 1)),
            400,
            ErrorCode::EntityTooLarge,
        );
        assert_eq!(count(&b), 1);
    }

    #[test]
    fn debug_output_names_the_store_not_its_entities() {
        let b = store_with_table();
        insert(&b, r#"{"PartitionKey":"p","RowKey":"secret"}"#.into()).unwrap();
        let shown = format!("{b:?}");
        assert_eq!(shown, "EmbeddedBackend { store: Store { tables: 1 } }");
    }

    #[test]
    fn a_continuation_naming_no_entity_resumes_at_the_next_key() {
        let b = store_with_table();
        for rk in ["a", "c", "e"] {
            insert(
                &b,
                format!("{{\"PartitionKey\":\"p\",\"RowKey\":\"{rk}\"}}"),
            )
            .unwrap();
        }
        let c = Continuation {
            next_partition_key: "p".into(),
            next_row_key: Some("b".into()),
        };
        let Response::Page {
            payload,
            continuation,
        } = b
            .run_now(Operation::Query {
                table: "T1x",
                filter: Some("RowKey ne 'x'"),
                select: None,
                top: Some(1),
                continuation: Some(&c),
                annotations: false,
            })
            .unwrap()
        else {
            panic!("a page")
        };
        let mut out: Vec<crate::DynamicEntity> = Vec::new();
        payload.decode_into(&mut out).unwrap();
        assert_eq!(out[0].row_key, "c");
        assert_eq!(continuation.unwrap().next_row_key.as_deref(), Some("e"));
    }
}
