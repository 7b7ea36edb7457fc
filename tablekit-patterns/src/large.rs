//! The large entities pattern (design guide §3.11): what does not fit an entity
//! (a String or Binary property over 64 KiB, or an entity over 1 MiB in all)
//! goes to blobs, and the entity keeps each blob's name in the property the
//! value came from (the seed's employee `Photo` = the photo's blob).
//!
//! [`LargeTable`] stores any `#[derive(TableEntity)]` type this way and reads it
//! back whole. The rules that keep the entity and its blobs consistent without
//! a transaction spanning both services:
//!
//! - **Blob first, entity second.** A write uploads the blobs, then writes the
//!   entity, so an entity never points to a blob that is not there yet.
//! - **A new blob per write.** Blob names are
//!   `<table>/<PartitionKey>/<RowKey>/<write id>/<Property>` (keys
//!   percent-encoded, the write id a fresh UUID), uploaded with
//!   `If-None-Match: *`: a replace never overwrites the blob the current
//!   entity points at, and readers of the old version keep reading it.
//! - **Old blobs go after the entity is replaced**, and only when the replace
//!   was conditional on the version whose blobs they are (the ETag read):
//!   a concurrent writer's entity makes the replace fail with 412 instead of
//!   losing the blobs it points at.
//! - **Delete: entity first, blob second.**
//! - **Orphans are swept.** A crash between the two steps leaves a blob no
//!   entity points to (uploaded but the entity never written, or the entity
//!   deleted but not its blobs). [`LargeTable::sweep_orphans`] lists the
//!   table's blobs by prefix and deletes those older than a grace period that
//!   no entity points to (see [the sweep](self#the-sweep)). A write that
//!   fails on its own (a conflict, a 412) deletes the blobs it uploaded at
//!   once; the sweep is for crashes. Run it periodically, from a background
//!   task or a timer-driven job.
//!
//! # What is atomic, and what a reader sees
//!
//! Only the entity write is atomic (one request to the Table service); the
//! blobs are separate requests to the Blob service, and nothing spans both.
//! What a reader can see, operation by operation:
//!
//! - **Insert**: before the entity write, nothing (the uploaded blobs are
//!   invisible to [`get`](LargeTable::get): no entity names them); after
//!   it, the whole new entity.
//! - **Replace / upsert**: the old version, whole, until the entity write;
//!   then the new version, whole. A `get` that read the old entity just
//!   before the replace and downloads after the old blobs were deleted
//!   finds a blob missing and reads the entity again, so it returns one
//!   version or the other, never a mix.
//! - **Delete**: the entity, whole, until it is deleted; then nothing.
//!   Its blobs go afterwards.
//! - A [`get_without_blobs`](LargeTable::get_without_blobs) caller that
//!   downloads a blob itself later may find it gone (a replace or delete in
//!   between): read the entity again.
//!
//! The entity and its blobs are *eventually* consistent in one direction
//! only: an entity never points to a missing blob, but a blob may for a
//! while have no entity pointing to it (an orphan, from a crash or a
//! failed best-effort delete) until the sweep removes it.
//!
//! # The sweep
//!
//! [`sweep_orphans`](LargeTable::sweep_orphans) lists the blobs under
//! [`blob_prefix`](LargeTable::blob_prefix) in name order, so the blobs of
//! one entity come together, and for each entity with a blob older than the
//! grace period reads the entity once with `$select` of [`BLOBS`] and of
//! every property that list names (the candidates' properties first; if the
//! list names others, a second read asks for those too), so it judges a
//! blob against the entity's whole, current list. A blob is deleted only if
//! that entity does not exist or does not point to it, and only if the blob
//! is still the version listed (its ETag). An entity whose list cannot be
//! read is never taken for one that points to nothing: its blobs are left
//! alone, a `tracing::warn!` names it, and
//! [`SweepReport::unreadable`] counts it.
//!
//! # The grace period and the write deadline
//!
//! The grace period protects writes in flight: a blob uploaded a moment ago
//! whose entity is about to be written must not be swept. One setting,
//! [`LargeTable::grace`] ([`DEFAULT_GRACE`], one hour), gives both sides of
//! that promise, so they cannot disagree:
//!
//! - the sweep deletes only orphans whose Last-Modified is more than `grace`
//!   ago;
//! - a write sends its entity only while less than
//!   [`write_deadline`](LargeTable::write_deadline) = `grace / 2` has passed
//!   since its upload started (checked before each attempt of the entity
//!   write, retries after a concurrent change included). Past it, the write
//!   deletes the blobs it uploaded and fails with
//!   [`is_timeout`](tablekit::Error::is_timeout) (and
//!   [`is_retryable`](tablekit::Error::is_retryable): nothing was written, so
//!   the write can be made again).
//!
//! A blob's Last-Modified is at or after its upload started, so when the
//! sweep considers a blob, its writer either sent its entity write within
//! the first half of the grace or never will. What remains is the other
//! half, `grace / 2`, as margin for what no client-side check can bound:
//! the entity write's own time in flight (the HTTP layer's retries of that
//! one request included) and the skew between this machine's clock and the
//! service's (the sweep compares the service's Last-Modified with this
//! clock). The deadline is measured on this machine's clock, or on the
//! [`ManualClock`] given to [`with_clock`](LargeTable::with_clock), which
//! tests move instead of sleeping.
//!
//! Which properties go to blobs: every String over 64 KiB (as UTF-16, the
//! service's measure) and Binary over 64 KiB; then, while the entity would
//! still be over 1 MiB, the largest remaining String or Binary; and every
//! property named with [`LargeTable::always_in_blob`] (the seed keeps the
//! photo in a blob whatever its size). Sizes are counted as the service counts
//! them, with [`tablekit::validate::entity_size`] (4 bytes, the keys as UTF-16,
//! and per property 8 bytes, its name as UTF-16 and its value: a String as 4
//! bytes plus UTF-16, a Binary as 4 bytes plus its length, fixed sizes for the
//! rest), the size tablekit itself checks before any request.
//! The entity also holds [`BLOBS`], the list of properties kept in blobs.
//!
//! Requests per operation, measured by `tests/request_counts.rs` through a
//! counting loopback proxy in front of Azurite 3.35 (table and blob
//! endpoints), with one 100 KiB photo in a blob; bytes are the requests'
//! heads and bodies as sent:
//!
//! | operation | requests, in order | measured |
//! |---|---|---|
//! | [`insert`](LargeTable::insert) | upload blob, insert entity | 2 req, 103,635 B |
//! | [`get`](LargeTable::get) | point read, download blob (**two requests**) | 2 req, 907 B |
//! | [`get_without_blobs`](LargeTable::get_without_blobs) | point read | 1 req, 487 B |
//! | [`replace`](LargeTable::replace) (90 KiB photo), [`upsert`](LargeTable::upsert) | point read, upload new blob, update entity, delete old blob | 4 req, 94,375 B |
//! | [`delete`](LargeTable::delete) | point read, delete entity, delete blob | 3 req, 1,458 B |
//! | [`sweep_orphans`](LargeTable::sweep_orphans), 3 live entities + 1 orphan | listing, 4 point reads (one per entity with blobs past the grace; a second one for an entity only some of whose listed blobs are past it), delete orphan | 6 req, 3,072 B |
//!
//! In general: one upload and one download or delete per blob, one listing
//! per 5,000 blobs for the sweep; a retry after a concurrent change repeats
//! the read and the entity write (and a `get`, the read and the downloads).
//! The same photo split over `Photo_0`, `Photo_1` by [`SplitTable`] is
//! 1 request of 137,253 B to insert (Binary travels as base64, a third
//! larger) and 1 request of 487 B to read.
//!
//! An entity with no large property is stored as a plain entity: no blob, no
//! [`BLOBS`] property, one request per operation plus the reads above.
//!
//! When the data fits one entity (1 MiB) there is a cheaper way without
//! blobs: [`SplitTable`] splits each property over 64 KiB over several Binary
//! properties (`Photo_0`, `Photo_1`, ...) of the same entity, one request per
//! operation, atomic, and refuses before any request what would exceed 1 MiB.
//!
//! ```
//! use tablekit::{BlobServiceClient, ETag, TableEntity, TableServiceClient};
//! use tablekit_patterns::large::LargeTable;
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id}")]
//! struct Employee {
//!     department: String,
//!     employee_id: String,
//!     last_name: String,
//!     photo: Vec<u8>,
//!     #[tablekit(etag)]
//!     etag: Option<ETag>,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let tables = TableServiceClient::embedded(); // or ::from_connection_string(..)
//! let blobs = BlobServiceClient::embedded();   // the same account's Blob service
//! # tables.create_table("Employees").await?;
//! let photos = blobs.container("photos")?;
//! photos.create_container_if_not_exists().await?;
//! let employees = LargeTable::new(tables.table::<Employee>("Employees")?, photos);
//!
//! let mut jones = Employee {
//!     department: "Sales".into(),
//!     employee_id: "000223".into(),
//!     last_name: "Jones".into(),
//!     photo: vec![0xff; 200 * 1024], // 200 KiB: over the 64 KiB of a property
//!     etag: None,
//! };
//! employees.insert(&mut jones).await?; // the photo's blob, then the entity
//!
//! // The whole entity: the entity, then the blob.
//! let back = employees.get(("Sales", "000223")).await?.unwrap();
//! assert_eq!(back.photo.len(), 200 * 1024);
//!
//! // Only the entity; the photo stays in its blob, named here.
//! let row = employees.get_without_blobs::<tablekit::DynamicEntity>(("Sales", "000223")).await?.unwrap();
//! assert_eq!(row.blobs[0].property(), "Photo");
//! assert!(row.blobs[0].blob().starts_with("Employees/Sales/000223/"));
//! assert!(row.entity.get("Photo").is_none());
//! # Ok(()) }
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use tablekit::validate::{
    entity_size, property_size, value_size, MAX_ENTITY_BYTES, MAX_VALUE_BYTES,
};
use tablekit::{
    clock::ManualClock,
    codec::entity_to_json,
    entity::RawEntity,
    error::{DecodeError, ErrorCode, ErrorKind},
    BlobClient, ContainerClient, DynamicEntity, ETag, EdmValue, EntityKey, Error, IfMatch, Result,
    TableClient, TableEntity, UpdateMode,
};

use crate::error::refused;

/// The String property listing the properties kept in blobs, as
/// `Photo:Binary,Notes:String`. An entity type must not have a property of
/// this name.
pub const BLOBS: &str = "LargeBlobs";

/// The String property of a [`SplitTable`] entity listing the split
/// properties and their part counts, as `Photo:Binary:3`. An entity type must
/// not have a property of this name.
pub const SPLIT: &str = "LargeSplit";

/// The grace period of a [`LargeTable`] unless [`LargeTable::grace`] says
/// otherwise: blobs younger than this are never swept, and a write must send
/// its entity within half of it.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60 * 60);

/// How many times a write or read starts again after a concurrent change.
pub const MAX_ATTEMPTS: usize = 16;

/// The boundaries between the steps of a [`LargeTable`] operation, given to
/// the [`on_step`](LargeTable::on_step) callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// A write uploaded its new blobs and is about to write the entity.
    BlobsUploaded,
    /// A write wrote the entity and is about to delete the blobs of the
    /// version it replaced.
    EntityWritten,
    /// A delete deleted the entity and is about to delete its blobs.
    EntityDeleted,
    /// A [`get`](LargeTable::get) read the entity and is about to download
    /// its blobs (on every attempt, so a test can count the re-reads).
    EntityRead,
}

/// The type of a property kept outside its entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Binary,
    String,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Binary => "Binary",
            Kind::String => "String",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        match s {
            "Binary" => Some(Kind::Binary),
            "String" => Some(Kind::String),
            _ => None,
        }
    }

    fn of(value: &EdmValue) -> Option<Kind> {
        match value {
            EdmValue::Binary(_) => Some(Kind::Binary),
            EdmValue::String(_) => Some(Kind::String),
            _ => None,
        }
    }

    fn into_bytes(value: EdmValue) -> Vec<u8> {
        match value {
            EdmValue::Binary(b) => b,
            EdmValue::String(s) => s.into_bytes(),
            _ => unreachable!("only String and Binary values leave an entity"),
        }
    }

    fn value(self, property: &str, bytes: Vec<u8>) -> Result<EdmValue> {
        Ok(match self {
            Kind::Binary => EdmValue::Binary(bytes),
            Kind::String => EdmValue::String(String::from_utf8(bytes).map_err(|_| {
                Error::from(DecodeError::for_property(
                    property,
                    "the String kept outside the entity is not UTF-8",
                ))
            })?),
        })
    }
}

/// One property kept in a blob, as an entity read without its blobs names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    property: String,
    kind: Kind,
    blob: String,
}

impl BlobRef {
    /// The property the value belongs to (`Photo`).
    pub fn property(&self) -> &str {
        &self.property
    }

    /// The blob's name in the table's container.
    pub fn blob(&self) -> &str {
        &self.blob
    }

    /// Whether the value is Binary (else a String, stored as UTF-8).
    pub fn is_binary(&self) -> bool {
        self.kind == Kind::Binary
    }
}

/// An entity read without its blobs: `entity` decoded from the stored
/// properties other than those in blobs, and where those are.
#[derive(Debug, Clone)]
pub struct WithoutBlobs<U> {
    /// The entity, decoded without the properties kept in blobs.
    pub entity: U,
    /// The properties kept in blobs.
    pub blobs: Vec<BlobRef>,
}

/// What [`LargeTable::sweep_orphans`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepReport {
    /// Blobs under the table's prefix.
    pub listed: usize,
    /// Blobs an entity points to.
    pub live: usize,
    /// Blobs younger than the grace period, left alone.
    pub too_young: usize,
    /// Blobs under the prefix not named the way this pattern names them, left alone.
    pub foreign: usize,
    /// The orphans deleted, by name.
    pub deleted: Vec<String>,
    /// Entities whose [`BLOBS`] list could not be read (not a list of
    /// `Property:Binary` / `Property:String` items, or a listed property
    /// not holding a blob name): their blobs are left alone, never taken
    /// for orphans, and each one is logged with `tracing::warn!`.
    pub unreadable: usize,
}

#[derive(Clone, Default)]
struct StepHook(Option<Arc<dyn Fn(Step) + Send + Sync>>);

impl StepHook {
    fn call(&self, step: Step) {
        if let Some(hook) = &self.0 {
            hook(step);
        }
    }
}

impl fmt::Debug for StepHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

/// Whether a value is over the 64 KiB a property may hold (a String measured
/// in UTF-16, as the service measures it).
fn over_property_limit(value: &EdmValue) -> bool {
    matches!(value, EdmValue::String(_) | EdmValue::Binary(_))
        && value_size(value) - 4 > MAX_VALUE_BYTES
}

/// A key as one segment of a blob name: ASCII letters, digits, `-` and `_`
/// as they are, every other byte of its UTF-8 as `%XX`; the empty key as
/// `%00` (a byte no key may hold), so no segment is empty, `.` or `..`.
fn encode_segment(key: &str) -> String {
    if key.is_empty() {
        return "%00".to_owned();
    }
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn decode_segment(segment: &str) -> Option<String> {
    if segment == "%00" {
        return Some(String::new());
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The entity and property a blob of this pattern belongs to, from its name.
fn parse_blob_name(table: &str, name: &str) -> Option<(EntityKey, String)> {
    let mut parts = name.split('/');
    let (t, pk, rk, write, prop) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if parts.next().is_some()
        || t != table
        || write.len() != 32
        || !write.bytes().all(|b| b.is_ascii_hexdigit())
        || prop.is_empty()
    {
        return None;
    }
    Some((
        EntityKey::new(decode_segment(pk)?, decode_segment(rk)?),
        prop.to_owned(),
    ))
}

/// The properties an entity's [`BLOBS`] property lists, with their types.
fn blob_list(row: &DynamicEntity) -> Result<Vec<(String, Kind)>> {
    let Some(list) = row.get(BLOBS) else {
        return Ok(Vec::new());
    };
    let list = list
        .as_str()
        .ok_or_else(|| bad_blob_list("not a String".to_owned()))?;
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(|item| {
            item.split_once(':')
                .and_then(|(p, k)| Some((p.to_owned(), Kind::parse(k)?)))
                .ok_or_else(|| {
                    bad_blob_list(format!(
                        "expected `Property:Binary` or `Property:String` items, got {item:?}"
                    ))
                })
        })
        .collect()
}

fn bad_blob_list(why: String) -> Error {
    DecodeError::for_property(BLOBS, why).into()
}

/// The properties an entity keeps in blobs, from its [`BLOBS`] property and
/// the properties it names (which `row` must hold).
fn blob_refs(row: &DynamicEntity) -> Result<Vec<BlobRef>> {
    blob_list(row)?
        .into_iter()
        .map(|(property, kind)| {
            let blob = row
                .get(&property)
                .and_then(EdmValue::as_str)
                .ok_or_else(|| bad_blob_list(format!("{property} should hold its blob's name")))?
                .to_owned();
            Ok(BlobRef {
                property,
                kind,
                blob,
            })
        })
        .collect()
}

/// A write worked out before any request: the entity row to write and the
/// blobs to upload first.
struct Plan {
    row: DynamicEntity,
    uploads: Vec<(BlobClient, Vec<u8>, Kind)>,
}

/// A table of entities of type `T` whose large properties live in blobs of
/// one container; see the [module docs](self). Cheap to clone.
pub struct LargeTable<T> {
    raw: TableClient<DynamicEntity>,
    container: ContainerClient,
    always: Vec<String>,
    hook: StepHook,
    grace: Duration,
    clock: Option<ManualClock>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for LargeTable<T> {
    fn clone(&self) -> Self {
        LargeTable {
            raw: self.raw.clone(),
            container: self.container.clone(),
            always: self.always.clone(),
            hook: self.hook.clone(),
            grace: self.grace,
            clock: self.clock.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for LargeTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LargeTable")
            .field("table", &self.raw.name())
            .field("container", &self.container.name())
            .field("entity", &std::any::type_name::<T>())
            .field("always_in_blob", &self.always)
            .field("on_step", &self.hook)
            .field("grace", &self.grace)
            .field("clock", &self.clock)
            .finish()
    }
}

impl<T: TableEntity> LargeTable<T> {
    /// The entities of `table`, with their large properties in `container`
    /// (which must exist; it may be shared with other tables: each table's
    /// blobs are under `<table name>/`).
    pub fn new(table: TableClient<T>, container: ContainerClient) -> Self {
        LargeTable {
            raw: table.with_type::<DynamicEntity>(),
            container,
            always: Vec::new(),
            hook: StepHook::default(),
            grace: DEFAULT_GRACE,
            clock: None,
            _t: PhantomData,
        }
    }

    /// Keeps this String or Binary property in a blob whatever its size (the
    /// seed's `Photo`, so that the photo can be served from blob storage).
    ///
    /// ```
    /// # use tablekit::{BlobServiceClient, DynamicEntity, TableServiceClient};
    /// # use tablekit_patterns::large::LargeTable;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tablekit::Result<()> {
    /// # let tables = TableServiceClient::embedded();
    /// # tables.create_table("Employees").await?;
    /// # let photos = BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// let employees = LargeTable::new(tables.table::<DynamicEntity>("Employees")?, photos)
    ///     .always_in_blob("Photo");
    /// let mut e = DynamicEntity::new("Sales", "000223").with("Photo", vec![1u8, 2, 3]);
    /// employees.insert(&mut e).await?;
    /// let row = employees.get_without_blobs::<DynamicEntity>(("Sales", "000223")).await?.unwrap();
    /// assert_eq!(row.blobs.len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn always_in_blob(mut self, property: impl Into<String>) -> Self {
        self.always.push(property.into());
        self
    }

    /// Runs `hook` at each step boundary of every operation ([`Step`]): a
    /// test can make another writer act at a precise point, or stop the
    /// operation there as a crash would (a panic in a spawned task).
    pub fn on_step(mut self, hook: impl Fn(Step) + Send + Sync + 'static) -> Self {
        self.hook = StepHook(Some(Arc::new(hook)));
        self
    }

    /// Sets the grace period (default [`DEFAULT_GRACE`]): the sweep keeps
    /// blobs younger than it, and a write must send its entity within half of
    /// it after its upload started (see [the module docs](self#the-grace-period-and-the-write-deadline)).
    /// Refused, before any request, if zero or too long for a date.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tablekit::{BlobServiceClient, DynamicEntity, TableServiceClient};
    /// # use tablekit_patterns::large::LargeTable;
    /// # let table = TableServiceClient::embedded().table::<DynamicEntity>("Employees").unwrap();
    /// # let photos = BlobServiceClient::embedded().container("photos").unwrap();
    /// let employees = LargeTable::new(table, photos).grace(Duration::from_secs(600))?;
    /// assert_eq!(employees.write_deadline(), Duration::from_secs(300));
    /// assert!(employees.clone().grace(Duration::ZERO).unwrap_err().is_invalid_input());
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    pub fn grace(mut self, grace: Duration) -> Result<Self> {
        if grace.is_zero() || chrono::Duration::from_std(grace).is_err() {
            return Err(refused(
                "large",
                format!("grace period {grace:?}: it must be more than zero and fit a date"),
            ));
        }
        self.grace = grace;
        Ok(self)
    }

    /// The grace period of the sweep.
    pub fn grace_period(&self) -> Duration {
        self.grace
    }

    /// How long a write may take from the start of its upload to sending its
    /// entity: half the [grace period](Self::grace).
    pub fn write_deadline(&self) -> Duration {
        self.grace / 2
    }

    /// Reads the time for the write deadline and the sweep from `clock`
    /// instead of this machine's clock: tests move it forward instead of
    /// sleeping (the blobs' Last-Modified still comes from the Blob service).
    pub fn with_clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    fn now(&self) -> DateTime<Utc> {
        match &self.clock {
            Some(c) => c.now(),
            None => Utc::now(),
        }
    }

    /// The container holding the blobs.
    pub fn container(&self) -> &ContainerClient {
        &self.container
    }

    /// The prefix of every blob of this table: `<table name>/`.
    pub fn blob_prefix(&self) -> String {
        format!("{}/", self.raw.name())
    }

    /// A client for the blob holding a property, to stream it or sign a SAS for it.
    pub fn blob(&self, r: &BlobRef) -> Result<BlobClient> {
        self.container.blob(&r.blob)
    }

    fn plan(&self, entity: &T) -> Result<Plan> {
        let (pk, rk) = (entity.partition_key(), entity.row_key());
        let props = crate::props::collect(entity, BLOBS, "large")?;
        for name in &self.always {
            if let Some((_, v)) = props.iter().find(|(n, _)| n == name) {
                if Kind::of(v).is_none() {
                    return Err(refused("large", format!(
                        "always_in_blob({name:?}): only String and Binary properties can go to a blob, it is {}",
                        v.edm_type()
                    )));
                }
            }
        }
        let write_id = uuid::Uuid::new_v4().simple().to_string();
        let prefix = format!(
            "{}/{}/{}/{write_id}/",
            self.raw.name(),
            encode_segment(&pk),
            encode_segment(&rk)
        );
        let mut moved: Vec<bool> = props
            .iter()
            .map(|(n, v)| {
                over_property_limit(v) || (self.always.contains(n) && Kind::of(v).is_some())
            })
            .collect();
        let size_with = |moved: &[bool]| {
            let mut list = String::new();
            let mut size = entity_size(&pk, &rk, []);
            for ((name, value), m) in props.iter().zip(moved) {
                if *m {
                    let pointer = EdmValue::String(format!("{prefix}{name}"));
                    size += property_size(name, &pointer);
                    list.push_str(&format!("{name}:Binary,"));
                } else {
                    size += property_size(name, value);
                }
            }
            if !list.is_empty() {
                size += property_size(BLOBS, &EdmValue::String(list));
            }
            size
        };
        while size_with(&moved) > MAX_ENTITY_BYTES {
            let largest = props
                .iter()
                .enumerate()
                .filter(|(i, (_, v))| !moved[*i] && Kind::of(v).is_some())
                .max_by_key(|(_, (n, v))| property_size(n, v))
                .map(|(i, _)| i);
            match largest {
                Some(i) => moved[i] = true,
                None => {
                    return Err(refused("large", format!(
                        "entity ({pk}, {rk}) is over 1 MiB even with every String and Binary property in a blob"
                    )))
                }
            }
        }
        let mut row = DynamicEntity::new(pk.as_ref(), rk.as_ref());
        let mut uploads = Vec::new();
        let mut list = Vec::new();
        for ((name, value), m) in props.into_iter().zip(moved) {
            if m {
                let kind = Kind::of(&value).expect("only String and Binary are moved");
                let blob_name = format!("{prefix}{name}");
                uploads.push((
                    self.container.blob(&blob_name)?,
                    Kind::into_bytes(value),
                    kind,
                ));
                list.push(format!("{name}:{}", kind.as_str()));
                row.set(name, blob_name);
            } else {
                row.set(name, value);
            }
        }
        if !list.is_empty() {
            row.set(BLOBS, list.join(","));
        }
        // tablekit's own checks (keys, names, sizes), before any request.
        entity_to_json(&row)?;
        Ok(Plan { row, uploads })
    }

    async fn upload(&self, plan: &Plan) -> Result<()> {
        let sent = futures::future::join_all(plan.uploads.iter().map(|(blob, bytes, kind)| {
            let content_type = match kind {
                Kind::Binary => "application/octet-stream",
                Kind::String => "text/plain; charset=utf-8",
            };
            blob.upload(bytes.clone())
                .content_type(content_type)
                .if_none_match(tablekit::IfNoneMatch::Any)
                .send()
        }))
        .await;
        if let Some(Err(e)) = sent.into_iter().find(Result::is_err) {
            self.discard(plan).await;
            return Err(e);
        }
        Ok(())
    }

    /// Deletes the blobs a write uploaded, when its entity write failed.
    /// Best effort: what is left is an orphan for the sweep.
    async fn discard(&self, plan: &Plan) {
        let _ =
            futures::future::join_all(plan.uploads.iter().map(|(b, _, _)| b.delete_if_exists()))
                .await;
    }

    /// Deletes blobs of a version no entity points to any more. Best effort:
    /// the write they belonged to succeeded, and what is left is an orphan
    /// for the sweep.
    async fn delete_blobs(&self, refs: &[BlobRef], keep: &DynamicEntity) {
        let _ = futures::future::join_all(
            refs.iter()
                .filter(|r| keep.get(&r.property).and_then(EdmValue::as_str) != Some(&r.blob))
                .map(|r| async move {
                    match self.container.blob(&r.blob) {
                        Ok(b) => b.delete_if_exists().await.map(drop),
                        Err(e) => Err(e),
                    }
                }),
        )
        .await;
    }

    async fn write(&self, entity: &mut T, mode: Mode) -> Result<()> {
        let mut plan = self.plan(entity)?;
        let key = entity.key();
        let mut uploaded = false;
        let mut started = self.now();
        let mut attempt = 1;
        loop {
            let current = match mode {
                Mode::Insert => None,
                _ => match self.raw.get(key.clone()).await {
                    Ok(c) => c,
                    Err(e) => {
                        if uploaded {
                            self.discard(&plan).await;
                        }
                        return Err(e);
                    }
                },
            };
            let condition = match (&mode, &current) {
                (Mode::Replace(_), None) => {
                    if uploaded {
                        self.discard(&plan).await;
                    }
                    return Err(not_found(&key, self.raw.name()));
                }
                (Mode::Insert | Mode::Upsert, None) => None,
                (Mode::Replace(IfMatch::ETag(e)), Some(_)) => Some(e.clone()),
                (_, Some(c)) => Some(c.etag.clone().ok_or_else(|| no_etag(&key))?),
            };
            if !uploaded {
                started = self.now();
                self.upload(&plan).await?;
                uploaded = true;
                self.hook.call(Step::BlobsUploaded);
            }
            if !plan.uploads.is_empty() {
                let took = (self.now() - started).to_std().unwrap_or_default();
                if took > self.write_deadline() {
                    self.discard(&plan).await;
                    return Err(Error::timed_out(format!(
                        "the write of {key} in table {} took {took:?} since its upload started, \
                         over its deadline of {:?} (half the sweep's grace period): its blobs \
                         were deleted and its entity not written",
                        self.raw.name(),
                        self.write_deadline()
                    )));
                }
            }
            plan.row.etag = None;
            let sent = match &condition {
                None => self.raw.insert(&mut plan.row).await,
                Some(etag) => {
                    self.raw
                        .update(
                            &mut plan.row,
                            UpdateMode::Replace,
                            IfMatch::ETag(etag.clone()),
                        )
                        .await
                }
            };
            match sent {
                Ok(written) => {
                    self.hook.call(Step::EntityWritten);
                    if let (Some(old), Some(cond)) = (&current, &condition) {
                        // Only the blobs of the version this write replaced.
                        if old.etag.as_ref() == Some(cond) {
                            if let Ok(refs) = blob_refs(old) {
                                self.delete_blobs(&refs, &plan.row).await;
                            }
                        }
                    }
                    written.apply_to(entity);
                    return Ok(());
                }
                Err(e) if attempt < MAX_ATTEMPTS && mode.retries(&e, condition.is_some()) => {
                    attempt += 1;
                }
                Err(e) => {
                    self.discard(&plan).await;
                    return Err(e);
                }
            }
        }
    }

    /// Inserts the entity: its blobs first, then the entity. A conflict (an
    /// entity with this key exists) deletes the uploaded blobs again. Sets the
    /// entity's ETag.
    pub async fn insert(&self, entity: &mut T) -> Result<()> {
        self.write(entity, Mode::Insert).await
    }

    /// Replaces the stored entity on the condition `if_match`: reads it (to
    /// know its blobs), uploads the new blobs, replaces the entity under the
    /// ETag read (or the one given), then deletes the old blobs. With
    /// [`IfMatch::Any`] a concurrent change starts it again from the read.
    /// Fails with not-found if there is no such entity.
    ///
    /// It is `replace`, not [`TableClient::update`](tablekit::TableClient::update)
    /// with a mode: a large entity is always written whole, its blobs with it,
    /// so there is no merge of a large entity.
    pub async fn replace(&self, entity: &mut T, if_match: impl Into<IfMatch>) -> Result<()> {
        self.write(entity, Mode::Replace(if_match.into())).await
    }

    /// Inserts the entity, or replaces the stored one whatever its version
    /// (still conditional on the version whose blobs it deletes).
    pub async fn upsert(&self, entity: &mut T) -> Result<()> {
        self.write(entity, Mode::Upsert).await
    }

    async fn download(&self, refs: &[BlobRef]) -> Result<Vec<Vec<u8>>> {
        futures::future::try_join_all(refs.iter().map(|r| async move {
            Ok(self
                .container
                .blob(&r.blob)?
                .download()
                .bytes()
                .await?
                .to_vec())
        }))
        .await
    }

    /// Reads the whole entity: the entity, then its blobs (two requests with
    /// one blob). A blob gone between the two (a concurrent replace or delete)
    /// reads the entity again.
    pub async fn get(&self, key: impl Into<EntityKey>) -> Result<Option<T>> {
        let key = key.into();
        let mut attempt = 1;
        loop {
            let Some(row) = self.raw.get(key.clone()).await? else {
                return Ok(None);
            };
            let refs = blob_refs(&row)?;
            self.hook.call(Step::EntityRead);
            let values = match self.download(&refs).await {
                Ok(v) => v,
                Err(e) if e.code() == Some(&ErrorCode::BlobNotFound) && attempt < MAX_ATTEMPTS => {
                    attempt += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut whole = row;
            whole.properties.remove(BLOBS);
            for (r, bytes) in refs.iter().zip(values) {
                whole.set(r.property.as_str(), r.kind.value(&r.property, bytes)?);
            }
            return T::decode(&RawEntity::from_dynamic(&whole)).map(Some);
        }
    }

    /// Reads the entity without its blobs, one request: `U` is decoded from
    /// the properties stored in the entity (`T` itself if its large fields are
    /// `Option` or `default`, a smaller type, or [`DynamicEntity`]), and the
    /// properties in blobs are named in [`WithoutBlobs::blobs`].
    pub async fn get_without_blobs<U: TableEntity>(
        &self,
        key: impl Into<EntityKey>,
    ) -> Result<Option<WithoutBlobs<U>>> {
        let Some(mut row) = self.raw.get(key).await? else {
            return Ok(None);
        };
        let blobs = blob_refs(&row)?;
        row.properties.remove(BLOBS);
        for r in &blobs {
            row.properties.remove(&r.property);
        }
        Ok(Some(WithoutBlobs {
            entity: U::decode(&RawEntity::from_dynamic(&row))?,
            blobs,
        }))
    }

    /// Deletes the entity on the condition `if_match` (with [`IfMatch::Any`],
    /// under the version read, again on a concurrent change), then its blobs.
    /// Returns whether it existed.
    pub async fn delete(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<bool> {
        let key = key.into();
        key.validate()?;
        let if_match = if_match.into();
        let mut attempt = 1;
        loop {
            let Some(current) = self.raw.get(key.clone()).await? else {
                return Ok(false);
            };
            let read = current.etag.clone().ok_or_else(|| no_etag(&key))?;
            let condition = match &if_match {
                IfMatch::Any => read.clone(),
                IfMatch::ETag(e) => e.clone(),
            };
            match self
                .raw
                .delete(key.clone(), IfMatch::ETag(condition.clone()))
                .await
            {
                Ok(()) => {
                    self.hook.call(Step::EntityDeleted);
                    if condition == read {
                        let refs = blob_refs(&current)?;
                        let none = DynamicEntity::new("", "");
                        self.delete_blobs(&refs, &none).await;
                    }
                    return Ok(true);
                }
                Err(e) if e.is_not_found() && !matches!(if_match, IfMatch::Any) => {
                    return Ok(false)
                }
                Err(e)
                    if matches!(if_match, IfMatch::Any)
                        && (e.is_precondition_failed() || e.is_not_found())
                        && attempt < MAX_ATTEMPTS =>
                {
                    attempt += 1
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes the blobs under [`blob_prefix`](Self::blob_prefix) that no
    /// entity points to and that are older than the [grace
    /// period](Self::grace) (see the [module
    /// docs](self#the-grace-period-and-the-write-deadline); [`DEFAULT_GRACE`]
    /// is one hour). Each orphan is deleted only if it is still the version
    /// listed. Blobs named otherwise than this pattern names them are left
    /// alone, and so are the blobs of an entity whose [`BLOBS`] list does
    /// not read ([`SweepReport::unreadable`], and a `tracing::warn!`); see
    /// [the sweep](self#the-sweep). A failed request ends the sweep with its
    /// error; running it again is safe.
    pub async fn sweep_orphans(&self) -> Result<SweepReport> {
        let grace = chrono::Duration::from_std(self.grace).map_err(|_| {
            refused(
                "large",
                format!("grace period {:?} is too long", self.grace),
            )
        })?;
        let cutoff = self.now() - grace;
        let mut report = SweepReport::default();
        let mut listing = self
            .container
            .list_blobs()
            .prefix(self.blob_prefix())
            .stream();
        // Blobs come in name order, so the blobs of one entity come together.
        let mut group: Option<(EntityKey, Vec<Candidate>)> = None;
        while let Some(blob) = listing.try_next().await? {
            report.listed += 1;
            let Some((key, property)) = parse_blob_name(self.raw.name(), blob.name()) else {
                report.foreign += 1;
                continue;
            };
            if blob.last_modified() > cutoff {
                report.too_young += 1;
                continue;
            }
            let candidate = (blob.name().to_owned(), property, blob.etag().clone());
            match &mut group {
                Some((k, blobs)) if *k == key => blobs.push(candidate),
                _ => {
                    if let Some((k, blobs)) = group.take() {
                        self.sweep_entity(k, blobs, &mut report).await?;
                    }
                    group = Some((key, vec![candidate]));
                }
            }
        }
        if let Some((k, blobs)) = group.take() {
            self.sweep_entity(k, blobs, &mut report).await?;
        }
        Ok(report)
    }

    async fn sweep_entity(
        &self,
        key: EntityKey,
        blobs: Vec<Candidate>,
        report: &mut SweepReport,
    ) -> Result<()> {
        let live = match self.live_blobs(&key, &blobs).await? {
            Ok(live) => live,
            Err(e) => {
                // Never "no references": a row we cannot read may point at
                // any of these blobs. Leave them, and say so.
                tracing::warn!(
                    table = %self.raw.name(),
                    partition_key = %key.partition_key,
                    row_key = %key.row_key,
                    error = %e,
                    blobs = blobs.len(),
                    "sweep_orphans: the entity's blob list cannot be read; its blobs are left alone"
                );
                report.unreadable += 1;
                return Ok(());
            }
        };
        for (name, property, etag) in blobs {
            if live.get(&name) == Some(&property) {
                report.live += 1;
                continue;
            }
            match self.container.blob(&name)?.delete(etag).await {
                Ok(()) => report.deleted.push(name),
                Err(e)
                    if e.code() == Some(&ErrorCode::BlobNotFound) || e.is_precondition_failed() => {
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The blobs the entity `key` points to now (blob name to property),
    /// read with `$select` of [`BLOBS`] and of every property that list
    /// names: the candidates' properties first, then, if the list names
    /// others, again with those (so a row is judged only whole). The outer
    /// error is a failed request; the inner one a row that does not read.
    async fn live_blobs(
        &self,
        key: &EntityKey,
        blobs: &[Candidate],
    ) -> Result<Result<HashMap<String, String>>> {
        let mut select: Vec<String> = vec![BLOBS.to_owned()];
        for (_, property, _) in blobs {
            if !select.contains(property) {
                select.push(property.clone());
            }
        }
        for _ in 0..MAX_ATTEMPTS {
            let Some(row) = self.raw.get(key.clone()).select(&select).await? else {
                return Ok(Ok(HashMap::new()));
            };
            let listed = match blob_list(&row) {
                Ok(l) => l,
                Err(e) => return Ok(Err(e)),
            };
            let unread: Vec<String> = listed
                .into_iter()
                .map(|(p, _)| p)
                .filter(|p| !select.contains(p))
                .collect();
            if unread.is_empty() {
                return Ok(blob_refs(&row)
                    .map(|refs| refs.into_iter().map(|r| (r.blob, r.property)).collect()));
            }
            // The list names properties not asked for: ask for them too.
            select.extend(unread);
        }
        Ok(Err(bad_blob_list(format!(
            "the list changed at every one of {MAX_ATTEMPTS} reads"
        ))))
    }
}

/// A blob old enough to sweep: its name, its property, the ETag listed.
type Candidate = (String, String, ETag);

#[derive(Debug)]
enum Mode {
    Insert,
    Replace(IfMatch),
    Upsert,
}

impl Mode {
    /// Whether a failed entity write is a race to retry from the read.
    fn retries(&self, e: &Error, was_update: bool) -> bool {
        match self {
            Mode::Insert | Mode::Replace(IfMatch::ETag(_)) => false,
            Mode::Replace(IfMatch::Any) => e.is_precondition_failed(),
            Mode::Upsert => {
                (was_update && (e.is_precondition_failed() || e.is_not_found()))
                    || (!was_update && e.is_conflict())
            }
        }
    }
}

fn not_found(key: &EntityKey, table: &str) -> Error {
    ErrorKind::NoEntity(format!("no entity {key} in table {table}")).into()
}

fn no_etag(key: &EntityKey) -> Error {
    DecodeError::new(format!("{key} came without an ETag")).into()
}

/// A table of entities of type `T` whose String and Binary properties over
/// 64 KiB are split over several Binary properties of the same entity:
/// `Photo` of 150 KiB is stored as `Photo_0` and `Photo_1` (64 KiB each) and
/// `Photo_2`, with [`SPLIT`] saying so (`Photo:Binary:3`; a String is split as
/// its UTF-8). No blob: each operation is one request and atomic, but the
/// whole entity must fit the service's 1 MiB (counted as the service counts,
/// see the [module docs](self)); a larger one is refused before any request.
/// A property of 64 KiB or less stays as it is. Cheap to clone.
///
/// | operation | requests | measured (100 KiB photo) |
/// |---|---|---|
/// | [`insert`](SplitTable::insert), [`upsert`](SplitTable::upsert), [`replace`](SplitTable::replace) | 1 write | insert: 1 req, 137,253 B |
/// | [`get`](SplitTable::get) | 1 point read | 1 req, 487 B |
/// | [`delete`](SplitTable::delete) | 1 delete | |
///
/// ```
/// use tablekit::{DynamicEntity, TableServiceClient};
/// use tablekit_patterns::large::SplitTable;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tablekit::Result<()> {
/// let service = TableServiceClient::embedded();
/// # service.create_table("Employees").await?;
/// let employees = SplitTable::new(service.table::<DynamicEntity>("Employees")?);
/// let mut e = DynamicEntity::new("Sales", "000223").with("Photo", vec![7u8; 150 * 1024]);
/// let stored = employees.encode(&e)?;
/// assert_eq!(stored.get("Photo_2").unwrap().as_binary().unwrap().len(), 150 * 1024 - 2 * 65536);
/// employees.insert(&mut e).await?;
/// let back = employees.get(("Sales", "000223")).await?.unwrap();
/// assert_eq!(back.get("Photo"), e.get("Photo"));
///
/// // Over 1 MiB in all: refused before any request.
/// let huge = DynamicEntity::new("Sales", "000224").with("Photo", vec![7u8; 1024 * 1024]);
/// assert!(employees.encode(&huge).unwrap_err().is_invalid_input());
/// # Ok(()) }
/// ```
pub struct SplitTable<T> {
    raw: TableClient<DynamicEntity>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for SplitTable<T> {
    fn clone(&self) -> Self {
        SplitTable {
            raw: self.raw.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for SplitTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SplitTable")
            .field("table", &self.raw.name())
            .field("entity", &std::any::type_name::<T>())
            .finish()
    }
}

/// The name of part `index` of a split property.
pub fn split_part_name(property: &str, index: usize) -> String {
    format!("{property}_{index}")
}

impl<T: TableEntity> SplitTable<T> {
    /// The entities of `table`.
    pub fn new(table: TableClient<T>) -> Self {
        SplitTable {
            raw: table.with_type::<DynamicEntity>(),
            _t: PhantomData,
        }
    }

    /// The entity as stored: large properties split into parts. Fails (before
    /// any request) if a part's name is taken by another property, or if the
    /// stored entity would be over 1 MiB.
    pub fn encode(&self, entity: &T) -> Result<DynamicEntity> {
        let (pk, rk) = (entity.partition_key(), entity.row_key());
        let props = crate::props::collect(entity, SPLIT, "large")?;
        let mut row = DynamicEntity::new(pk.as_ref(), rk.as_ref());
        let mut taken: HashSet<String> = props.iter().map(|(n, _)| n.clone()).collect();
        let mut list = Vec::new();
        for (name, value) in props {
            if !over_property_limit(&value) {
                row.properties.insert(name, value);
                continue;
            }
            let kind = Kind::of(&value).expect("only String and Binary go over the limit");
            let bytes = Kind::into_bytes(value);
            let chunks: Vec<&[u8]> = bytes.chunks(MAX_VALUE_BYTES).collect();
            for (i, chunk) in chunks.iter().enumerate() {
                let part = split_part_name(&name, i);
                if !taken.insert(part.clone()) {
                    return Err(refused(
                        "large",
                        format!(
                        "{name} is split into {part}, but the entity has a property of that name"
                    ),
                    ));
                }
                row.set(part, chunk.to_vec());
            }
            list.push(format!("{name}:{}:{}", kind.as_str(), chunks.len()));
        }
        if !list.is_empty() {
            row.set(SPLIT, list.join(","));
        }
        let size = entity_size(&pk, &rk, row.properties.iter());
        if size > MAX_ENTITY_BYTES {
            return Err(refused(
                "large",
                format!(
                "entity ({pk}, {rk}) is {size} bytes with its large properties split, over the \
                 {MAX_ENTITY_BYTES} bytes (1 MiB) an entity may hold: keep them in blobs with \
                 LargeTable"
            ),
            ));
        }
        entity_to_json(&row)?;
        Ok(row)
    }

    /// The entity from its stored form: the parts joined again.
    pub fn decode(&self, row: &DynamicEntity) -> Result<T> {
        let mut whole = row.clone();
        if let Some(list) = whole.properties.remove(SPLIT) {
            let bad = |why: String| Error::from(DecodeError::for_property(SPLIT, why));
            let list = list
                .as_str()
                .ok_or_else(|| bad("not a String".into()))?
                .to_owned();
            for item in list.split(',').filter(|s| !s.is_empty()) {
                let mut fields = item.split(':');
                let (Some(name), Some(kind), Some(n), None) =
                    (fields.next(), fields.next(), fields.next(), fields.next())
                else {
                    return Err(bad(format!(
                        "expected `Property:Binary:parts`, got {item:?}"
                    )));
                };
                let kind =
                    Kind::parse(kind).ok_or_else(|| bad(format!("unknown type in {item:?}")))?;
                let n: usize = n
                    .parse()
                    .map_err(|_| bad(format!("bad part count in {item:?}")))?;
                let mut bytes = Vec::new();
                for i in 0..n {
                    let part = split_part_name(name, i);
                    match whole.properties.remove(&part) {
                        Some(EdmValue::Binary(b)) => bytes.extend_from_slice(&b),
                        _ => return Err(bad(format!("part {part} is missing or not Binary"))),
                    }
                }
                whole.set(name, kind.value(name, bytes)?);
            }
        }
        T::decode(&RawEntity::from_dynamic(&whole))
    }

    /// Inserts the entity (one request); a conflict if it exists. Sets its ETag.
    pub async fn insert(&self, entity: &mut T) -> Result<()> {
        let mut row = self.encode(entity)?;
        self.raw.insert(&mut row).await?.apply_to(entity);
        Ok(())
    }

    /// Inserts or replaces the entity whatever its version (one request).
    pub async fn upsert(&self, entity: &mut T) -> Result<()> {
        let mut row = self.encode(entity)?;
        self.raw
            .upsert(&mut row, UpdateMode::Replace)
            .await?
            .apply_to(entity);
        Ok(())
    }

    /// Replaces the stored entity on the condition `if_match` (one request):
    /// parts no longer needed go with the replace.
    pub async fn replace(&self, entity: &mut T, if_match: impl Into<IfMatch>) -> Result<()> {
        let mut row = self.encode(entity)?;
        self.raw
            .update(&mut row, UpdateMode::Replace, if_match)
            .await?
            .apply_to(entity);
        Ok(())
    }

    /// Reads the entity (one point read) and joins its parts.
    pub async fn get(&self, key: impl Into<EntityKey>) -> Result<Option<T>> {
        match self.raw.get(key).await? {
            Some(row) => Ok(Some(self.decode(&row)?)),
            None => Ok(None),
        }
    }

    /// Deletes the entity with all its parts (one request); returns whether it existed.
    pub async fn delete(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<bool> {
        self.raw.delete_if_exists(key, if_match).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_segments_round_trip_and_never_hold_a_slash_or_dot() {
        for key in [
            "Sales",
            "",
            "a.b",
            "..",
            "ü/x",
            "empid_000223",
            "%00",
            "a b%",
        ] {
            let seg = encode_segment(key);
            assert!(
                !seg.contains('/') && !seg.contains('.') && !seg.is_empty(),
                "{seg}"
            );
            assert_eq!(decode_segment(&seg).as_deref(), Some(key), "{key:?}");
        }
        assert_eq!(encode_segment("Sales"), "Sales");
        assert_eq!(encode_segment("a.b"), "a%2Eb");
        assert_eq!(decode_segment("%G0"), None);
    }

    #[test]
    fn blob_names_parse_back_to_their_entity_and_property() {
        let id = "0123456789abcdef0123456789abcdef";
        let name = format!("Employees/Sales/000%2E1/{id}/Photo");
        let (key, prop) = parse_blob_name("Employees", &name).unwrap();
        assert_eq!(key, EntityKey::new("Sales", "000.1"));
        assert_eq!(prop, "Photo");
        assert!(parse_blob_name("Other", &name).is_none());
        assert!(parse_blob_name("Employees", "Employees/Sales/1/short/Photo").is_none());
        assert!(parse_blob_name("Employees", &format!("{name}/extra")).is_none());
    }

    #[test]
    fn the_size_formula_is_tablekits_at_the_1_mib_boundary() {
        // 15 Binary properties of 64 KiB and one that brings the entity to
        // exactly 1 MiB: tablekit takes it, and refuses one byte more.
        let build = |extra: usize| {
            let mut e = DynamicEntity::new("Sales", "000223");
            for i in 0..15 {
                e.set(format!("B{i:02}"), vec![0u8; MAX_VALUE_BYTES]);
            }
            let so_far = entity_size("Sales", "000223", e.properties.iter());
            let last = MAX_ENTITY_BYTES - so_far - property_size("B15", &EdmValue::Binary(vec![]));
            e.set("B15", vec![0u8; last + extra]);
            e
        };
        let exact = build(0);
        assert_eq!(
            entity_size("Sales", "000223", exact.properties.iter()),
            MAX_ENTITY_BYTES
        );
        entity_to_json(&exact).expect("exactly 1 MiB");
        let over = build(1);
        assert!(entity_to_json(&over).unwrap_err().is_invalid_input());
    }

    #[test]
    fn string_sizes_count_utf16() {
        assert_eq!(value_size(&EdmValue::String("ab".into())), 8);
        assert_eq!(value_size(&EdmValue::String("😀".into())), 8);
        assert!(over_property_limit(&EdmValue::String(
            "é".repeat(32 * 1024 + 1)
        )));
        assert!(!over_property_limit(&EdmValue::String(
            "é".repeat(32 * 1024)
        )));
        assert!(over_property_limit(&EdmValue::Binary(vec![0; 65_537])));
        assert!(!over_property_limit(&EdmValue::Binary(vec![0; 65_536])));
    }
}
