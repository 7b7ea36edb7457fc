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
//! Requests per operation, measured by `tablekit-patterns/tests/patterns/request_counts.rs` through a
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

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tablekit::{
    clock::ManualClock, BlobClient, ContainerClient, DynamicEntity, Result, TableClient,
    TableEntity,
};

use crate::error::refused;

mod layout;
mod read;
mod split;
mod sweep;
mod write;
use layout::Kind;
pub use split::{split_part_name, SplitTable};

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
/// the [`step_hook`](LargeTable::step_hook) callback.
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

type StepHook = crate::hook::StepHook<Step>;

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

    /// Runs `hook` at each step boundary of every operation ([`Step`]) and
    /// waits for it: a test can make another writer act at a precise point,
    /// or stop the operation there as a crash would (an error it returns, or
    /// a hook that never returns in a task that is then aborted). The one
    /// shape of the patterns' test hooks; not part of the stable API.
    #[doc(hidden)]
    pub fn step_hook<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(Step) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<()>> + Send + 'static,
    {
        self.hook = StepHook::new(hook);
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
}
