//! Log data in blobs (design guide §3.13, the "log data anti-pattern" and
//! what Storage Analytics does instead): log records in append-only blobs
//! named by time, read back by listing the hours a time window touches.
//!
//! Logs in a table have no good key: the time as PartitionKey makes one hot
//! partition that takes every write; spreading the writes over partitions
//! makes a time window a scan of all of them. Blobs named by time need
//! neither: the service lists them by name prefix.
//!
//! - **Names:** `<service>/<yyyy>/<MM>/<dd>/<HH>00/<seq>.log`, one folder per
//!   hour (UTC) and a six-digit sequence number within it:
//!   `queue/2014/07/31/1800/000001.log` is the first log blob of the queue
//!   service for the hour from 18:00 on 31 July 2014 ([`blob_name`]).
//! - **Writing:** [`LogWriter`] buffers records and writes each batch as a
//!   **new** blob (the Blob service has no append here, and a blob written
//!   once is never changed: readers never see half a batch). It claims the
//!   next sequence number of the hour with `If-None-Match: *`, so two
//!   writers never overwrite each other: the one that loses the number
//!   lists the folder and takes the next free one. A batch is written when
//!   it reaches [`max_records`](LogWriter::max_records) or
//!   [`max_bytes`](LogWriter::max_bytes), when a record of another hour
//!   arrives (a blob holds one hour), when its oldest record has waited
//!   [`flush_every`](LogWriter::flush_every) (checked by `log` and by
//!   [`flush_if_due`](LogWriter::flush_if_due)), and on
//!   [`flush`](LogWriter::flush).
//! - **Metadata:** as Storage Analytics does, each blob's metadata holds the
//!   times of its first and last records ([`START_TIME`], [`END_TIME`]) and
//!   their count ([`RECORD_COUNT`]).
//! - **Format:** one record per line, [JSON Lines](https://jsonlines.org):
//!   `{"time":"2014-07-31T15:04:10Z","record":{...}}`, the record being any
//!   serde type. Chosen over Storage Analytics' `;`-delimited lines because
//!   serde writes and reads any record type with no quoting rules of our own
//!   (a `;` or a newline inside a message is escaped by JSON, and JSON never
//!   writes a raw newline inside a line), and because any JSON Lines tool
//!   (`jq`) reads the blobs as they are.
//! - **Reading:** [`LogReader::read`] takes a time window (15:04 to 15:06 in
//!   the seed), lists only the hour folders the window touches, skips blobs
//!   whose metadata says all their records are outside it (without
//!   downloading them), keeps the records inside it and streams them in time
//!   order (records of one instant in the order written).
//!
//! Requests per operation, measured by `tablekit-patterns/tests/patterns/request_counts.rs` through a
//! counting loopback proxy in front of Azurite 3.35 (records of about 75
//! bytes, batches of 5):
//!
//! | operation | requests, in order | measured |
//! |---|---|---|
//! | [`LogWriter::append`], [`LogWriter::log`] | none, or a flush when the batch is full or the hour changes | 0 req while buffering |
//! | [`LogWriter::flush`], first in an hour | listing of the hour folder, upload | 2 req, 1,418 B |
//! | [`LogWriter::flush`], next | upload | 1 req, 987 B |
//! | [`LogReader::read`] of 15:04–15:06, 24 blobs over 14:00–15:59 | listing of the 15:00 folder, 2 downloads (the blobs of 15:00–15:04 and 15:05–15:09; the other 10 skipped by metadata) | 3 req, 1,189 B |
//!
//! In general: a flush is 1 upload (+ 1 listing the first time in an hour,
//! and 1 listing + 1 upload per sequence number lost to another writer); a
//! read is 1 listing per hour of the window (per 5,000 blobs) + 1 download
//! per blob whose records overlap it.
//!
//! # Reliability or cost
//!
//! Records in a writer's buffer are in this process's memory only: a crash
//! loses them. [`max_records(1)`](LogWriter::max_records) writes every record
//! as it comes (the seed's "reliability" end: nothing is lost that `append`
//! returned for, at one request and one blob per record, and a reader lists
//! one blob per record); large batches cost one request per batch and keep
//! the listings short (the seed's "cost and scalability" end) and lose at
//! most a batch. In between, bound how long a record may wait with
//! [`flush_every`](LogWriter::flush_every), and always flush on shutdown. A
//! failed flush keeps the batch in the buffer, so the next flush writes it.
//!
//! # Timed flushes without a background task
//!
//! `flush_every(interval)` starts no task and no timer: the writer notes when
//! the first record of a batch was buffered (on its own clock, not the
//! record's time, which may be any time the caller gives), and
//! [`log`](LogWriter::log) writes the batch, with the record just added, once
//! that is `interval` ago. While records keep coming, no record waits much
//! longer than `interval` plus the time to the next `log`. When they stop,
//! nothing calls `log`: call [`flush_if_due`](LogWriter::flush_if_due) from
//! whatever already runs periodically (a `tokio::time::interval` loop, a
//! health check, the worker's poll), as often as the delay you accept; it
//! makes no request unless the batch is due. A record can then wait at most
//! `interval` plus the time between two of those calls.
//! [`with_clock`](LogWriter::with_clock) gives the writer a
//! [`ManualClock`] that tests move instead of sleeping.
//!
//! # Compared with the log tail table pattern
//!
//! [`log_tail`](crate::log_tail) keeps entries as entities, newest first in
//! one partition per key (an employee's expense claims): "the 10 latest of
//! this employee" is one range query, an entry can be read, updated or
//! deleted on its own by key, and queries can filter on properties. It suits
//! many small logs each read by its key. It does not suit one high-volume
//! log of a whole system: every write lands at the top of the same
//! partition (a hot partition, about 2,000 entities/s at most), and reading
//! a time window across sources scans all partitions. Blob logs take writes
//! in batches (one request per batch, any rate the account takes), read a
//! window by listing one folder per hour, and cost one blob read per batch;
//! but there is no lookup of one record, no filter on the service side (the
//! reader downloads whole blobs and filters), and records are immutable.
//!
//! ```
//! use chrono::{TimeZone, Utc};
//! use futures::TryStreamExt;
//! use tablekit::BlobServiceClient;
//! use tablekit_patterns::log_data::{LogReader, LogWriter};
//!
//! #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
//! struct Entry {
//!     level: String,
//!     message: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let logs = BlobServiceClient::embedded().container("logs")?; // or ::from_connection_string(..)
//! logs.create_container().await?;
//!
//! let mut writer = LogWriter::new(logs.clone(), "queue")?.max_records(100);
//! let at = |h, m| Utc.with_ymd_and_hms(2014, 7, 31, h, m, 0).unwrap();
//! for (minute, level) in [(3, "Info"), (4, "Error"), (5, "Info"), (6, "Critical")] {
//!     let entry = Entry { level: level.into(), message: format!("15:0{minute}") };
//!     writer.log(at(15, minute), &entry).await?; // buffered: nothing written yet
//! }
//! let blob = writer.flush().await?.unwrap();
//! assert_eq!(blob.name(), "queue/2014/07/31/1500/000001.log");
//!
//! // The seed's window: from 15:04 up to 15:06.
//! let reader = LogReader::<Entry>::new(logs, "queue")?;
//! let window: Vec<_> = reader.read(at(15, 4)..at(15, 6)).try_collect().await?;
//! let messages: Vec<&str> = window.iter().map(|r| r.record.message.as_str()).collect();
//! assert_eq!(messages, ["15:04", "15:05"]);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::pin::Pin;
use std::task::{Context, Poll};

use chrono::{DateTime, Duration, SecondsFormat, TimeZone, Utc};
use futures::stream::{self, BoxStream, Stream, StreamExt, TryStreamExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tablekit::{
    blob::BlobProperties,
    clock::ManualClock,
    error::{DecodeError, ErrorCode},
    ContainerClient, Error, Result,
};

use crate::error::refused;

/// The metadata entry holding the time of a blob's first record (RFC 3339).
pub const START_TIME: &str = "StartTime";
/// The metadata entry holding the time of a blob's last record (RFC 3339).
pub const END_TIME: &str = "EndTime";
/// The metadata entry holding the number of records in a blob.
pub const RECORD_COUNT: &str = "RecordCount";

/// The largest sequence number of an hour (six digits).
pub const MAX_SEQUENCE: u32 = 999_999;

/// The default [`LogWriter::max_records`].
pub const DEFAULT_MAX_RECORDS: usize = 1000;

/// The default [`LogWriter::max_bytes`]: 4 MiB, one upload request.
pub const DEFAULT_MAX_BYTES: usize = 4 * 1024 * 1024;

/// How many sequence numbers a flush tries before giving up.
const MAX_CLAIMS: usize = 100;

/// One log record and its time.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord<R> {
    /// When it was logged.
    pub time: DateTime<Utc>,
    /// The record.
    pub record: R,
}

#[derive(Serialize)]
struct LineOut<'a, R> {
    time: &'a str,
    record: &'a R,
}

#[derive(Deserialize)]
struct LineIn<R> {
    time: String,
    record: R,
}

fn format_time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The start of the hour (UTC) holding `t`.
pub fn hour_of(t: DateTime<Utc>) -> DateTime<Utc> {
    let secs = t.timestamp().div_euclid(3600) * 3600;
    Utc.timestamp_opt(secs, 0)
        .single()
        .expect("an hour start is a valid time")
}

/// The folder of the hour holding `t`: `queue/2014/07/31/1800/`.
pub fn hour_prefix(service: &str, t: DateTime<Utc>) -> String {
    format!("{service}/{}/", hour_of(t).format("%Y/%m/%d/%H00"))
}

/// The name of log blob `seq` of the hour holding `t`:
/// `queue/2014/07/31/1800/000001.log`.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// let t = Utc.with_ymd_and_hms(2014, 7, 31, 18, 42, 7).unwrap();
/// assert_eq!(tablekit_patterns::log_data::blob_name("queue", t, 1), "queue/2014/07/31/1800/000001.log");
/// ```
pub fn blob_name(service: &str, t: DateTime<Utc>, seq: u32) -> String {
    format!("{}{seq:06}.log", hour_prefix(service, t))
}

fn check_service(service: &str) -> Result<()> {
    if service.is_empty()
        || service.len() > 255
        || !service
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(refused(
            "log_data",
            format!("log service name {service:?} must be 1 to 255 ASCII letters, digits, - and _"),
        ));
    }
    Ok(())
}

/// The sequence number of a blob name in a folder, if it is one of ours.
fn sequence_of(name: &str, prefix: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(".log")?;
    (digits.len() == 6 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())?
}

fn metadata_time(props: &BlobProperties, name: &str) -> Option<DateTime<Utc>> {
    props
        .metadata()
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| parse_time(v))
}

/// A log blob a [`LogWriter`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBlob {
    name: String,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    records: usize,
}

impl LogBlob {
    /// Its name: `queue/2014/07/31/1800/000001.log`.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The time of its first record.
    pub fn start(&self) -> DateTime<Utc> {
        self.start
    }
    /// The time of its last record.
    pub fn end(&self) -> DateTime<Utc> {
        self.end
    }
    /// How many records it holds.
    pub fn records(&self) -> usize {
        self.records
    }
}

/// Writes log records of type `R` to blobs named by time, in batches; see the
/// [module docs](self). One writer per task (wrap it in a mutex to share);
/// several writers, in one process or many, may log to the same service.
pub struct LogWriter<R> {
    container: ContainerClient,
    service: String,
    max_records: usize,
    max_bytes: usize,
    /// The records of the batch being built, all of one hour, as lines.
    buffer: Vec<(DateTime<Utc>, String)>,
    buffer_bytes: usize,
    /// When the first record of the batch was buffered (the writer's clock).
    buffered_since: Option<DateTime<Utc>>,
    flush_every: Option<std::time::Duration>,
    clock: Option<ManualClock>,
    /// The next sequence number to try, per hour already written to.
    next: HashMap<DateTime<Utc>, u32>,
    _r: PhantomData<fn(&R)>,
}

impl<R> fmt::Debug for LogWriter<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogWriter")
            .field("container", &self.container.name())
            .field("service", &self.service)
            .field("max_records", &self.max_records)
            .field("max_bytes", &self.max_bytes)
            .field("pending", &self.buffer.len())
            .field("flush_every", &self.flush_every)
            .field("clock", &self.clock)
            .finish()
    }
}

impl<R: Serialize> LogWriter<R> {
    /// A writer of `service`'s logs (the first segment of the blob names:
    /// ASCII letters, digits, `-` and `_`) into `container`, which must exist.
    pub fn new(container: ContainerClient, service: impl Into<String>) -> Result<Self> {
        let service = service.into();
        check_service(&service)?;
        Ok(LogWriter {
            container,
            service,
            max_records: DEFAULT_MAX_RECORDS,
            max_bytes: DEFAULT_MAX_BYTES,
            buffer: Vec::new(),
            buffer_bytes: 0,
            buffered_since: None,
            flush_every: None,
            clock: None,
            next: HashMap::new(),
            _r: PhantomData,
        })
    }

    /// Writes a batch when it holds `n` records (at least 1; 1 writes every
    /// record as it comes). Default [`DEFAULT_MAX_RECORDS`].
    pub fn max_records(mut self, n: usize) -> Self {
        self.max_records = n.max(1);
        self
    }

    /// Writes a batch when it holds `n` bytes or more. Default
    /// [`DEFAULT_MAX_BYTES`].
    pub fn max_bytes(mut self, n: usize) -> Self {
        self.max_bytes = n.max(1);
        self
    }

    /// Writes a batch once its oldest record has waited `interval` in the
    /// buffer: [`log`](Self::log) checks it after adding each record, and
    /// [`flush_if_due`](Self::flush_if_due) for idle periods (see the [module
    /// docs](self#timed-flushes-without-a-background-task)). Off by default.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use chrono::{TimeZone, Utc};
    /// # use tablekit::{BlobServiceClient, clock::ManualClock};
    /// # use tablekit_patterns::log_data::LogWriter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tablekit::Result<()> {
    /// # let logs = BlobServiceClient::embedded().container("logs")?;
    /// # logs.create_container().await?;
    /// let clock = ManualClock::starting_now();
    /// let mut writer = LogWriter::new(logs, "queue")?
    ///     .flush_every(Duration::from_secs(10))
    ///     .with_clock(clock.clone());
    /// let t = Utc.with_ymd_and_hms(2014, 7, 31, 15, 4, 0).unwrap();
    /// writer.log(t, &"disk full").await?;
    /// assert!(writer.flush_if_due().await?.is_none()); // not yet: no request
    /// clock.advance(Duration::from_secs(10));
    /// assert_eq!(writer.flush_if_due().await?.unwrap().records(), 1);
    /// # Ok(()) }
    /// ```
    pub fn flush_every(mut self, interval: std::time::Duration) -> Self {
        self.flush_every = Some(interval);
        self
    }

    /// Reads the time for [`flush_every`](Self::flush_every) from `clock`
    /// instead of this machine's clock.
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

    /// Whether the batch's oldest record has waited the
    /// [`flush_every`](Self::flush_every) interval (never without one, or
    /// with an empty batch).
    pub fn is_due(&self) -> bool {
        match (self.flush_every, self.buffered_since) {
            (Some(every), Some(since)) => {
                (self.now() - since).to_std().unwrap_or_default() >= every
            }
            _ => false,
        }
    }

    /// Writes the batch if it [is due](Self::is_due); no request otherwise.
    /// Call it periodically when records may stop coming, so the last ones do
    /// not wait for the next [`log`](Self::log).
    pub async fn flush_if_due(&mut self) -> Result<Option<LogBlob>> {
        if self.is_due() {
            self.flush().await
        } else {
            Ok(None)
        }
    }

    /// How many records wait in the buffer.
    pub fn pending(&self) -> usize {
        self.buffer.len()
    }

    /// Whether the batch must be written before taking a record at `time`.
    pub fn needs_flush_before(&self, time: DateTime<Utc>) -> bool {
        self.buffer
            .first()
            .is_some_and(|(t, _)| hour_of(*t) != hour_of(time))
    }

    /// Adds a record to the batch; the record is serialised here (a record
    /// serde cannot write is refused). Fails, adding nothing, if the batch
    /// must first be written: when it is full
    /// ([`is_full`](Self::is_full)) or holds another hour
    /// ([`needs_flush_before`](Self::needs_flush_before)).
    /// [`log`](Self::log) does both.
    pub fn append(&mut self, time: DateTime<Utc>, record: &R) -> Result<()> {
        if self.is_full() || self.needs_flush_before(time) {
            return Err(refused(
                "log_data",
                "the log batch must be flushed first (it is full or of another hour); use log()",
            ));
        }
        let stamp = format_time(&time);
        let line = serde_json::to_string(&LineOut {
            time: &stamp,
            record,
        })
        .map_err(|e| {
            refused(
                "log_data",
                format!("the log record cannot be written as JSON: {e}"),
            )
        })?;
        self.buffer_bytes += line.len() + 1;
        if self.buffer.is_empty() {
            self.buffered_since = Some(self.now());
        }
        self.buffer.push((time, line));
        Ok(())
    }

    /// Whether the batch has reached `max_records` or `max_bytes`.
    pub fn is_full(&self) -> bool {
        self.buffer.len() >= self.max_records || self.buffer_bytes >= self.max_bytes
    }

    /// Logs a record: writes the batch first if the record is of another
    /// hour, adds the record, and writes the batch if it is then full or
    /// [due](Self::is_due).
    /// Returns the blobs written (none most of the time).
    pub async fn log(&mut self, time: DateTime<Utc>, record: &R) -> Result<Vec<LogBlob>> {
        let mut written = Vec::new();
        if self.needs_flush_before(time) {
            written.extend(self.flush().await?);
        }
        self.append(time, record)?;
        if self.is_full() || self.is_due() {
            written.extend(self.flush().await?);
        }
        Ok(written)
    }

    /// Writes the batch as a new blob, if there is one. On failure the batch
    /// stays in the buffer for the next flush.
    pub async fn flush(&mut self) -> Result<Option<LogBlob>> {
        crate::trace::traced_storage("LogWriter", "flush", self.flush_in_span()).await
    }

    /// [`LogWriter::flush`], inside its span.
    async fn flush_in_span(&mut self) -> Result<Option<LogBlob>> {
        if self.buffer.is_empty() {
            return Ok(None);
        }
        // Time order within the blob; records of one instant as appended.
        self.buffer.sort_by_key(|(t, _)| *t);
        let start = self.buffer[0].0;
        let end = self.buffer[self.buffer.len() - 1].0;
        let hour = hour_of(start);
        let mut body = String::with_capacity(self.buffer_bytes);
        for (_, line) in &self.buffer {
            body.push_str(line);
            body.push('\n');
        }
        let body = body.into_bytes();
        let prefix = hour_prefix(&self.service, hour);
        let mut seq = match self.next.get(&hour) {
            Some(n) => *n,
            None => self.first_free(&prefix).await?,
        };
        for _ in 0..MAX_CLAIMS {
            if seq > MAX_SEQUENCE {
                return Err(refused(
                    "log_data",
                    format!(
                        "{prefix} holds {MAX_SEQUENCE} log blobs already: flush larger batches"
                    ),
                ));
            }
            let name = blob_name(&self.service, hour, seq);
            let sent = self
                .container
                .blob(&name)?
                .upload(body.clone())
                .content_type("application/x-ndjson")
                .metadata(START_TIME, format_time(&start))
                .metadata(END_TIME, format_time(&end))
                .metadata(RECORD_COUNT, self.buffer.len().to_string())
                .if_none_match(tablekit::IfNoneMatch::Any)
                .await;
            match sent {
                Ok(_) => {
                    self.next.insert(hour, seq + 1);
                    let records = self.buffer.len();
                    self.buffer.clear();
                    self.buffer_bytes = 0;
                    self.buffered_since = None;
                    return Ok(Some(LogBlob {
                        name,
                        start,
                        end,
                        records,
                    }));
                }
                // Another writer took this number: the next free one.
                Err(e) if e.code() == Some(&ErrorCode::BlobAlreadyExists) => {
                    seq = self.first_free(&prefix).await?.max(seq + 1);
                }
                Err(e) => return Err(e),
            }
        }
        Err(refused(
            "log_data",
            format!("no free sequence number in {prefix} after {MAX_CLAIMS} attempts"),
        ))
    }

    /// One past the highest sequence number in the folder.
    async fn first_free(&self, prefix: &str) -> Result<u32> {
        let blobs = self
            .container
            .list_blobs()
            .prefix(prefix)
            .fetch_all()
            .await?;
        Ok(blobs
            .iter()
            .filter_map(|b| sequence_of(b.name(), prefix))
            .max()
            .map_or(1, |n| n + 1))
    }
}

/// Reads log records of type `R` from the blobs [`LogWriter`] writes; see the
/// [module docs](self). Cheap to clone.
pub struct LogReader<R> {
    container: ContainerClient,
    service: String,
    _r: PhantomData<fn() -> R>,
}

impl<R> Clone for LogReader<R> {
    fn clone(&self) -> Self {
        LogReader {
            container: self.container.clone(),
            service: self.service.clone(),
            _r: PhantomData,
        }
    }
}

impl<R> fmt::Debug for LogReader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogReader")
            .field("container", &self.container.name())
            .field("service", &self.service)
            .finish()
    }
}

/// A time window, its bounds owned.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Bound<DateTime<Utc>>,
    end: Bound<DateTime<Utc>>,
}

impl Window {
    fn new(range: impl RangeBounds<DateTime<Utc>>) -> Result<Self> {
        let w = Window {
            start: range.start_bound().cloned(),
            end: range.end_bound().cloned(),
        };
        if matches!(w.start, Bound::Unbounded) || matches!(w.end, Bound::Unbounded) {
            return Err(refused(
                "log_data",
                "a log window needs a start and an end (it is read hour by hour)",
            ));
        }
        Ok(w)
    }

    fn after_start(&self, t: DateTime<Utc>) -> bool {
        match self.start {
            Bound::Included(s) => t >= s,
            Bound::Excluded(s) => t > s,
            Bound::Unbounded => true,
        }
    }

    fn before_end(&self, t: DateTime<Utc>) -> bool {
        match self.end {
            Bound::Included(e) => t <= e,
            Bound::Excluded(e) => t < e,
            Bound::Unbounded => true,
        }
    }

    fn contains(&self, t: DateTime<Utc>) -> bool {
        self.after_start(t) && self.before_end(t)
    }

    /// Whether records from `first` to `last` may fall in the window.
    fn overlaps(&self, first: DateTime<Utc>, last: DateTime<Utc>) -> bool {
        self.after_start(last) && self.before_end(first)
    }

    /// The hours the window touches, first to last.
    fn hours(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        let (Bound::Included(s) | Bound::Excluded(s)) = self.start else {
            unreachable!("checked in new")
        };
        let (Bound::Included(e) | Bound::Excluded(e)) = self.end else {
            unreachable!("checked in new")
        };
        (hour_of(s), hour_of(e))
    }
}

impl<R: DeserializeOwned + Send + 'static> LogReader<R> {
    /// A reader of `service`'s logs in `container`.
    pub fn new(container: ContainerClient, service: impl Into<String>) -> Result<Self> {
        let service = service.into();
        check_service(&service)?;
        Ok(LogReader {
            container,
            service,
            _r: PhantomData,
        })
    }

    /// The log blobs a read of `window` downloads, in the order it reads
    /// them: those of the hour folders the window touches whose metadata
    /// range overlaps it (or that have none).
    pub async fn blobs(
        &self,
        window: impl RangeBounds<DateTime<Utc>>,
    ) -> Result<Vec<BlobProperties>> {
        let window = Window::new(window);
        crate::trace::traced_storage("LogReader", "blobs", async move {
            let window = window?;
            let (mut hour, last) = window.hours();
            let mut out = Vec::new();
            while hour <= last {
                out.extend(self.blobs_of_hour(hour, window).await?);
                hour += Duration::hours(1);
            }
            Ok(out)
        })
        .await
    }

    async fn blobs_of_hour(
        &self,
        hour: DateTime<Utc>,
        window: Window,
    ) -> Result<Vec<BlobProperties>> {
        let prefix = hour_prefix(&self.service, hour);
        let listed = self
            .container
            .list_blobs()
            .prefix(&prefix)
            .fetch_all()
            .await?;
        Ok(listed
            .into_iter()
            .filter(|b| sequence_of(b.name(), &prefix).is_some())
            .filter(|b| {
                match (metadata_time(b, START_TIME), metadata_time(b, END_TIME)) {
                    (Some(first), Some(last)) => window.overlaps(first, last),
                    // No usable range: read it to be sure.
                    _ => true,
                }
            })
            .collect())
    }

    /// The records of one hour inside the window, in time order.
    async fn records_of_hour(
        &self,
        hour: DateTime<Utc>,
        window: Window,
    ) -> Result<Vec<LogRecord<R>>> {
        let mut records = Vec::new();
        for blob in self.blobs_of_hour(hour, window).await? {
            let bytes = self.container.blob(blob.name())?.download().bytes().await?;
            let text = std::str::from_utf8(&bytes).map_err(|_| {
                Error::from(DecodeError::new(format!(
                    "log blob {} is not UTF-8",
                    blob.name()
                )))
            })?;
            for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
                let bad = |why: String| {
                    Error::from(DecodeError::new(format!(
                        "log blob {} line {}: {why}",
                        blob.name(),
                        n + 1
                    )))
                };
                let parsed: LineIn<serde_json::Value> =
                    serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
                let time = parse_time(&parsed.time)
                    .ok_or_else(|| bad(format!("bad time {:?}", parsed.time)))?;
                if !window.contains(time) {
                    continue;
                }
                let record = R::deserialize(parsed.record).map_err(|e| bad(e.to_string()))?;
                records.push(LogRecord { time, record });
            }
        }
        // Blobs in sequence order, lines in file order: a stable sort keeps
        // records of one instant in the order they were written.
        records.sort_by_key(|r| r.time);
        Ok(records)
    }

    /// The records logged inside `window` (`from..to`, `from..=to`), in
    /// time order, hour by hour: one listing per hour, one download per blob
    /// that may hold records of the window. An unbounded window is refused.
    pub fn read(&self, window: impl RangeBounds<DateTime<Utc>>) -> LogStream<R> {
        let window = match Window::new(window) {
            Ok(w) => w,
            Err(e) => return LogStream(stream::once(async move { Err(e) }).boxed()),
        };
        let (first, last) = window.hours();
        let reader = self.clone();
        LogStream(
            stream::try_unfold(first, move |hour| {
                let reader = reader.clone();
                async move {
                    if hour > last {
                        return Ok::<_, Error>(None);
                    }
                    let records = reader.records_of_hour(hour, window).await?;
                    Ok(Some((
                        stream::iter(records.into_iter().map(Ok)),
                        hour + Duration::hours(1),
                    )))
                }
            })
            .try_flatten()
            .boxed(),
        )
    }
}

/// The records of a [`LogReader::read`]; a [`Stream`] of
/// `Result<LogRecord<R>>` in time order.
pub struct LogStream<R>(BoxStream<'static, Result<LogRecord<R>>>);

impl<R> fmt::Debug for LogStream<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LogStream")
    }
}

impl<R> Stream for LogStream<R> {
    type Item = Result<LogRecord<R>>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2014, 7, 31, h, m, s).unwrap()
    }

    #[test]
    fn names_follow_storage_analytics() {
        assert_eq!(
            blob_name("queue", at(18, 0, 0), 1),
            "queue/2014/07/31/1800/000001.log"
        );
        assert_eq!(
            blob_name("queue", at(18, 59, 59), 12),
            "queue/2014/07/31/1800/000012.log"
        );
        assert_eq!(hour_prefix("queue", at(15, 4, 0)), "queue/2014/07/31/1500/");
        assert_eq!(
            sequence_of("queue/2014/07/31/1800/000012.log", "queue/2014/07/31/1800/"),
            Some(12)
        );
        assert_eq!(
            sequence_of("queue/2014/07/31/1800/12.log", "queue/2014/07/31/1800/"),
            None
        );
        assert_eq!(
            sequence_of("queue/2014/07/31/1800/000012.txt", "queue/2014/07/31/1800/"),
            None
        );
    }

    #[test]
    fn windows_count_their_bounds() {
        let w = Window::new(at(15, 4, 0)..at(15, 6, 0)).unwrap();
        assert!(w.contains(at(15, 4, 0)) && w.contains(at(15, 5, 59)));
        assert!(!w.contains(at(15, 6, 0)) && !w.contains(at(15, 3, 59)));
        let w = Window::new(at(15, 4, 0)..=at(15, 6, 0)).unwrap();
        assert!(w.contains(at(15, 6, 0)));
        assert!(w.overlaps(at(15, 0, 0), at(15, 4, 0)));
        assert!(w.overlaps(at(15, 6, 0), at(15, 30, 0)));
        assert!(!w.overlaps(at(15, 10, 0), at(15, 20, 0)));
        assert!(!w.overlaps(at(14, 0, 0), at(15, 3, 59)));
        assert_eq!(w.hours(), (at(15, 0, 0), at(15, 0, 0)));
        let across = Window::new(at(14, 55, 0)..at(16, 5, 0)).unwrap();
        assert_eq!(across.hours(), (at(14, 0, 0), at(16, 0, 0)));
        assert!(Window::new(at(15, 4, 0)..).unwrap_err().is_invalid_input());
    }

    #[test]
    fn service_names_are_checked() {
        assert!(check_service("queue").is_ok());
        for bad in ["", "a/b", "logs.v1", "é"] {
            assert!(check_service(bad).unwrap_err().is_invalid_input(), "{bad}");
        }
    }
}
