//! Writes whose outcome is unknown, resolved by reading back.
//!
//! A write that is not idempotent (an insert, a conditional update or delete, a
//! transaction) can fail after the service applied it: the answer was lost, the
//! client retried, and the retry met the 409, 412 or 404 that the first attempt
//! caused. The retry loop marks such an error [ambiguous](Error::is_ambiguous).
//! Here the table client reads the entities back and decides: if they hold what
//! the write sent, the write happened and the call succeeds; if not, the caller
//! gets the ambiguous error with what was read ([`Error::read_back`]).

use std::fmt;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};

use super::handle::TableHandle;
use crate::backend::{BatchKind, BatchOp, EntityBody, Written};
use crate::codec::read::decode_entity;
use crate::edm::EdmValue;
use crate::entity::{DynamicEntity, ETag, EntityKey, UpdateMode};
use crate::error::{Error, Result};

/// What a write meant to leave at one key.
#[derive(Debug)]
pub(crate) enum Intent {
    /// An entity holding the properties of `entity`: exactly those (an insert
    /// or a replace), or at least those (a merge).
    Holds { entity: DynamicEntity, exact: bool },
    /// No entity (a delete).
    Absent(EntityKey),
}

impl Intent {
    /// The intent of a single write whose body was `body`.
    pub(crate) fn of_body(body: &EntityBody, mode: UpdateMode) -> Result<Self> {
        let entity = match body {
            EntityBody::Json(json) => decode_entity::<DynamicEntity>(json, None, None)?,
            EntityBody::Bag(bag) => (**bag).clone(),
        };
        Ok(Intent::Holds {
            entity,
            exact: mode == UpdateMode::Replace,
        })
    }

    fn key(&self) -> EntityKey {
        match self {
            Intent::Holds { entity, .. } => {
                EntityKey::new(entity.partition_key.clone(), entity.row_key.clone())
            }
            Intent::Absent(key) => key.clone(),
        }
    }

    /// Whether `stored` (the entity read back, if any) is what the write left.
    fn is_met_by(&self, stored: Option<&DynamicEntity>) -> bool {
        match (self, stored) {
            (Intent::Absent(_), stored) => stored.is_none(),
            (Intent::Holds { .. }, None) => false,
            (Intent::Holds { entity, exact }, Some(stored)) => {
                (!exact || stored.properties.len() == entity.properties.len())
                    && entity.properties.iter().all(|(name, value)| {
                        stored
                            .properties
                            .get(name)
                            .is_some_and(|s| same_as_stored(value, s))
                    })
            }
        }
    }
}

/// Whether `stored` (read back) is `sent` as the service stores it: a Double
/// by its bits (any NaN is the service's one NaN; -0.0 is not 0.0), a
/// DateTime to its 100 ns tick (a later nanosecond is cut when written), a
/// Guid by its 16 bytes, the rest by value; and always of the same type.
fn same_as_stored(sent: &EdmValue, stored: &EdmValue) -> bool {
    match (sent, stored) {
        (EdmValue::Double(a), EdmValue::Double(b)) => {
            (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
        }
        (EdmValue::DateTime(a), EdmValue::DateTime(b)) => {
            // As `edm::write_datetime`: a leap second folds into the last tick.
            let tick = |t: &chrono::DateTime<chrono::Utc>| {
                (
                    t.timestamp(),
                    t.timestamp_subsec_nanos().min(999_999_999) / 100,
                )
            };
            tick(a) == tick(b)
        }
        (EdmValue::Guid(a), EdmValue::Guid(b)) => a.as_bytes() == b.as_bytes(),
        (a, b) => a == b,
    }
}

/// What one transaction operation sent, kept until the transaction's outcome
/// is known; its intent is only worked out if a read-back is needed.
#[derive(Debug)]
pub(crate) struct SentOp {
    kind: BatchKind,
    key: EntityKey,
    /// The operation's JSON, shared with the operation (not copied).
    body: Option<bytes::Bytes>,
    /// The operation's entity, for a backend that stores property bags (and
    /// sends no JSON): copied, which only the bulk writer's read-back of an
    /// entity in doubt asks for.
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    bag: Option<DynamicEntity>,
}

impl SentOp {
    pub(crate) fn of(op: &BatchOp) -> Self {
        #[cfg(feature = "embedded")]
        let bag = match (&op.body, &op.bag) {
            (None, Some(bag)) => Some(bag.entity().clone()),
            _ => None,
        };
        #[cfg(not(feature = "embedded"))]
        let bag = None;
        SentOp {
            kind: op.kind.clone(),
            key: op.key.clone(),
            body: op.body.clone(),
            bag,
        }
    }

    /// What the operation meant to leave at its key.
    pub(crate) fn intent(&self) -> Result<Intent> {
        let mode = match &self.kind {
            BatchKind::Delete(_) => return Ok(Intent::Absent(self.key.clone())),
            BatchKind::Insert => UpdateMode::Replace,
            BatchKind::Upsert(mode) | BatchKind::Update(mode, _) => *mode,
        };
        let entity = match (&self.body, &self.bag) {
            (Some(json), _) => decode_entity::<DynamicEntity>(json, None, None)?,
            (None, Some(bag)) => bag.clone(),
            (None, None) => return Err(Error::decode("a transaction write without a body")),
        };
        Ok(Intent::Holds {
            entity,
            exact: mode == UpdateMode::Replace,
        })
    }
}

/// An entity read back, with the ETag it was read at; `None` where there is none.
type ReadBackEntity = Option<(DynamicEntity, Option<ETag>)>;

/// What tablekit read back after a write whose outcome was unknown and could
/// not be confirmed: one row per entity of the write, in the write's order,
/// with the entity found at that key (`None` where there was none).
///
/// It is attached to the ambiguous error ([`Error::read_back`]) so that the
/// caller can decide without another request: the entities may hold another
/// writer's values (the write did not land, or was overwritten since), or part
/// of what the write sent.
#[derive(Clone)]
pub struct ReadBack {
    entities: Vec<(EntityKey, Option<DynamicEntity>)>,
}

impl ReadBack {
    /// The keys of the write, each with the entity found there (`None`: no entity).
    pub fn entities(&self) -> &[(EntityKey, Option<DynamicEntity>)] {
        &self.entities
    }

    /// The entity found at `key`; `None` if there was none or the write did
    /// not touch `key`.
    pub fn get(&self, key: &EntityKey) -> Option<&DynamicEntity> {
        self.entities
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, e)| e.as_ref())
    }
}

impl fmt::Debug for ReadBack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys and whether an entity was there; property values stay out of logs.
        f.debug_list()
            .entries(
                self.entities
                    .iter()
                    .map(|(k, e)| (k.to_string(), e.is_some())),
            )
            .finish()
    }
}

impl Error {
    /// After a table write failed [ambiguously](Error::is_ambiguous) and its
    /// read-back could not confirm it: what was read. `None` for every other
    /// error, and when the read-back itself failed (or was turned off with
    /// [`AmbiguousWrites::Report`](crate::table::AmbiguousWrites::Report)).
    pub fn read_back(&self) -> Option<&ReadBack> {
        self.read_back_state()?.downcast_ref()
    }
}

/// Decides the outcome of an ambiguous write from its intents: reads every key
/// back, and returns what the write would have returned (the new ETag and
/// Timestamp per intent, `None` for deletes) if every intent is met, or `error`
/// with the read-back state if not. A failed read-back returns `error` as it is.
pub(crate) async fn resolve(
    handle: &TableHandle,
    operation: &'static str,
    intents: Vec<Intent>,
    error: Error,
) -> Result<Vec<Option<Written>>> {
    let keys: Vec<EntityKey> = intents.iter().map(Intent::key).collect();
    // Owned keys and handles: a future borrowing from a closure's argument is
    // not `Send` for every lifetime, which the callers' futures must be.
    let reads_futures: Vec<_> = keys
        .iter()
        .cloned()
        .map(|key| {
            let handle = handle.clone();
            async move { handle.get_with_etag::<DynamicEntity>(&key, None).await }
        })
        .collect();
    let reads: Result<Vec<ReadBackEntity>> = futures::stream::iter(reads_futures)
        .buffered(8)
        .try_collect()
        .await;
    let reads = match reads {
        Ok(reads) => reads,
        Err(read_error) => {
            tracing::warn!(
                operation,
                table = handle.name(),
                error = %read_error,
                "the outcome of a write is unknown and reading it back failed"
            );
            #[cfg(feature = "opentelemetry")]
            crate::observe::count_settlement(operation, "unknown");
            return Err(error);
        }
    };
    let met = intents
        .iter()
        .zip(&reads)
        .all(|(intent, read)| intent.is_met_by(read.as_ref().map(|(e, _)| e)));
    tracing::info!(
        operation,
        table = handle.name(),
        entities = intents.len(),
        client_request_id = error.client_request_id().unwrap_or(""),
        applied = met,
        "the outcome of an ambiguous write was decided by read-back"
    );
    #[cfg(feature = "opentelemetry")]
    crate::observe::count_settlement(operation, if met { "applied" } else { "not_applied" });
    if met {
        let mut written = Vec::with_capacity(reads.len());
        for (intent, read) in intents.iter().zip(reads) {
            written.push(match (intent, read) {
                (Intent::Absent(_), _) => None,
                (Intent::Holds { .. }, Some((entity, Some(etag)))) => {
                    let mut w = Written::from_etag(etag);
                    w.confirmed_by_read_back = true;
                    if entity.timestamp.is_some() {
                        w.timestamp = Some(entity.timestamp);
                    }
                    Some(w)
                }
                (Intent::Holds { .. }, _) => return Err(error),
            });
        }
        return Ok(written);
    }
    let state = ReadBack {
        entities: keys
            .into_iter()
            .zip(reads.into_iter().map(|r| r.map(|(e, _)| e)))
            .collect(),
    };
    Err(error.with_read_back(Arc::new(state)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds(entity: DynamicEntity, exact: bool) -> Intent {
        Intent::Holds { entity, exact }
    }

    #[test]
    fn what_a_transaction_operation_sent_is_kept_without_a_copy() {
        // A backend that takes JSON (no request is made here).
        let service =
            crate::TableServiceClient::from_connection_string("UseDevelopmentStorage=true")
                .unwrap();
        let table = service.table::<DynamicEntity>("Kept").unwrap();
        let mut tx = table.transaction();
        tx.insert(&DynamicEntity::new("p", "r").with("S", "x".repeat(1000)))
            .unwrap();
        // Kept twice: both are the operation's own bytes.
        let (sent, again) = (tx.sent_op(0).unwrap(), tx.sent_op(0).unwrap());
        let (body, other) = (sent.body.as_ref().unwrap(), again.body.as_ref().unwrap());
        assert!(body.len() > 1000);
        assert_eq!(body.as_ptr(), other.as_ptr(), "the same bytes, shared");
        assert!(matches!(
            sent.intent().unwrap(),
            Intent::Holds { exact: true, .. }
        ));
    }

    /// The embedded store takes property bags and no JSON: what its
    /// operation sent is its bag (the bulk writer reads back an entity in
    /// doubt by it; it was "a transaction write without a body").
    #[cfg(feature = "embedded")]
    #[test]
    fn what_an_operation_sent_to_a_store_of_property_bags_is_its_entity() {
        let service = crate::TableServiceClient::embedded();
        let table = service.table::<DynamicEntity>("Kept").unwrap();
        let entity = DynamicEntity::new("p", "r").with("N", 7).with("S", "x");
        let mut tx = table.transaction();
        tx.insert(&entity).unwrap();
        let sent = tx.sent_op(0).unwrap();
        assert!(sent.body.is_none());
        let intent = sent.intent().unwrap();
        assert!(matches!(intent, Intent::Holds { exact: true, .. }));
        assert!(intent.is_met_by(Some(&entity)));
        assert!(!intent.is_met_by(Some(&entity.clone().with("N", 8))));
    }

    #[test]
    fn an_exact_intent_needs_the_same_properties_and_types() {
        let sent = DynamicEntity::new("p", "r").with("N", 1).with("S", "a");
        let intent = holds(sent.clone(), true);
        assert!(intent.is_met_by(Some(&sent)));
        // Another type with the same number is not what was sent.
        let int64 = DynamicEntity::new("p", "r")
            .with("N", EdmValue::Int64(1))
            .with("S", "a");
        assert!(!intent.is_met_by(Some(&int64)));
        // An extra property means somebody else's entity, or a merge into one.
        let extra = sent.clone().with("X", true);
        assert!(!intent.is_met_by(Some(&extra)));
        assert!(!intent.is_met_by(None));
    }

    #[test]
    fn a_merge_intent_needs_only_its_own_properties() {
        let sent = DynamicEntity::new("p", "r").with("N", 2);
        let intent = holds(sent, false);
        let stored = DynamicEntity::new("p", "r")
            .with("N", 2)
            .with("Old", "kept");
        assert!(intent.is_met_by(Some(&stored)));
        let other = DynamicEntity::new("p", "r")
            .with("N", 3)
            .with("Old", "kept");
        assert!(!intent.is_met_by(Some(&other)));
    }

    #[test]
    fn a_delete_intent_is_met_by_absence_only() {
        let intent = Intent::Absent(EntityKey::new("p", "r"));
        assert!(intent.is_met_by(None));
        assert!(!intent.is_met_by(Some(&DynamicEntity::new("p", "r"))));
    }

    #[test]
    fn the_intent_of_a_json_body_reads_its_types_from_the_annotations() {
        let e = DynamicEntity::new("p", "r")
            .with("Big", EdmValue::Int64(9_000_000_000))
            .with("D", 2.0)
            .with("I", 7);
        let json = crate::codec::write::entity_to_json(&e).unwrap();
        let Intent::Holds { entity, exact } =
            Intent::of_body(&EntityBody::Json(json.into()), UpdateMode::Merge).unwrap()
        else {
            panic!("a write's intent holds an entity")
        };
        assert!(!exact);
        assert_eq!(entity.properties, e.properties);
    }

    #[test]
    fn read_back_debug_shows_keys_not_values() {
        let rb = ReadBack {
            entities: vec![(
                EntityKey::new("p", "r"),
                Some(DynamicEntity::new("p", "r").with("Secret", "hunter2")),
            )],
        };
        let text = format!("{rb:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("true"), "{text}");
    }

    /// Whether an entity holding `sent` under `name` is met by one holding `stored`.
    fn meets(sent: EdmValue, stored: EdmValue) -> bool {
        holds(DynamicEntity::new("p", "r").with("V", sent), true)
            .is_met_by(Some(&DynamicEntity::new("p", "r").with("V", stored)))
    }

    #[test]
    fn doubles_are_compared_by_their_bits_and_nan_meets_nan() {
        use EdmValue::Double;
        assert!(meets(Double(f64::NAN), Double(f64::NAN)));
        // Another NaN payload: the service keeps only "NaN".
        assert!(meets(
            Double(f64::from_bits(0x7ff8_0000_0000_0001)),
            Double(f64::NAN)
        ));
        assert!(meets(Double(-f64::NAN), Double(f64::NAN)));
        assert!(!meets(Double(f64::NAN), Double(0.0)));
        assert!(meets(Double(-0.0), Double(-0.0)));
        assert!(
            !meets(Double(-0.0), Double(0.0)),
            "-0.0 is not 0.0 as stored"
        );
        assert!(meets(Double(f64::INFINITY), Double(f64::INFINITY)));
        assert!(meets(Double(f64::NEG_INFINITY), Double(f64::NEG_INFINITY)));
        assert!(!meets(Double(f64::INFINITY), Double(f64::NEG_INFINITY)));
        assert!(!meets(Double(f64::INFINITY), Double(f64::MAX)));
        assert!(meets(Double(0.1 + 0.2), Double(0.1 + 0.2)));
        assert!(!meets(Double(0.1 + 0.2), Double(0.3)));
        assert!(meets(
            Double(f64::MIN_POSITIVE / 2.0),
            Double(f64::MIN_POSITIVE / 2.0)
        ));
    }

    #[test]
    fn datetimes_are_compared_to_the_100_ns_tick_the_service_keeps() {
        use chrono::{TimeZone as _, Utc};
        let at = |nanos: u32| EdmValue::DateTime(Utc.timestamp_opt(1_700_000_000, nanos).unwrap());
        assert!(meets(at(123_456_789), at(123_456_700)), "cut to the tick");
        assert!(meets(at(123_456_700), at(123_456_700)));
        assert!(!meets(at(123_456_789), at(123_456_800)), "cut, not rounded");
        assert!(!meets(at(123_456_700), at(123_456_600)));
        assert!(meets(at(0), at(99)));
        // A leap second is written as the last tick of its second.
        let in_59th =
            |nanos: u32| EdmValue::DateTime(Utc.timestamp_opt(1_700_000_039, nanos).unwrap());
        assert!(meets(in_59th(1_500_000_000), in_59th(999_999_900)));
        let other_second = EdmValue::DateTime(Utc.timestamp_opt(1_700_000_001, 0).unwrap());
        assert!(!meets(at(0), other_second));
    }

    #[test]
    fn guids_are_compared_by_their_bytes() {
        let g = uuid::Uuid::parse_str("3F2504E0-4F89-11D3-9A0C-0305E82C3301").unwrap();
        let same = uuid::Uuid::parse_str("3f2504e0-4f89-11d3-9a0c-0305e82c3301").unwrap();
        assert!(meets(EdmValue::Guid(g), EdmValue::Guid(same)));
        assert!(!meets(EdmValue::Guid(g), EdmValue::Guid(uuid::Uuid::nil())));
        assert!(!meets(EdmValue::Guid(g), EdmValue::String(g.to_string())));
    }

    #[test]
    fn the_other_types_are_compared_by_value_and_type() {
        use EdmValue::*;
        assert!(meets(String("a".into()), String("a".into())));
        assert!(!meets(String("a".into()), String("A".into())));
        assert!(meets(Binary(vec![0, 1]), Binary(vec![0, 1])));
        assert!(!meets(Binary(vec![0, 1]), Binary(vec![0])));
        assert!(meets(Boolean(true), Boolean(true)));
        assert!(!meets(Boolean(true), Boolean(false)));
        assert!(meets(Int32(i32::MIN), Int32(i32::MIN)));
        assert!(!meets(Int32(1), Int64(1)));
        assert!(meets(Int64(i64::MAX), Int64(i64::MAX)));
        assert!(!meets(Int64(1), Double(1.0)));
    }
}
