//! The high-volume delete pattern (design guide §3.8): entities that expire
//! together live in a table of their own, one table per period
//! (`LoginAttempts20140731`), so deleting a day of data is one request that
//! drops its table instead of a scan and a delete per entity.
//!
//! [`PeriodicTables`] routes each entity to its period's table by a timestamp
//! the entity carries, reads a time window across the tables it spans, and
//! [`sweep`](PeriodicTables::sweep)s the tables older than the retention.
//!
//! | operation | requests |
//! |---|---|
//! | [`insert`](PeriodicTables::insert), [`upsert`](PeriodicTables::upsert) | 1; the first write to a new period also creates its table (+1 create, +1 write again) |
//! | [`query`](PeriodicTables::query) over k periods | one query per period (a missing table costs one answer and is skipped) |
//! | [`sweep`](PeriodicTables::sweep) | 1 table listing (per 1000 tables) + 1 delete per expired table |
//!
//! Table names are letters and digits (3 to 63, starting with a letter), so
//! the prefix is too and the period is written without separators. The
//! service keeps a deleted table's name unavailable for a while (tens of
//! seconds): a period is only swept once it is over and past the retention,
//! so its name is not needed again. The first requests to a new table may be
//! throttled while the service places it.
//!
//! ```
//! use chrono::{Duration, TimeZone, Utc};
//! use tablekit_patterns::periodic::Period;
//!
//! let t = Utc.with_ymd_and_hms(2014, 7, 31, 18, 0, 0).unwrap();
//! assert_eq!(Period::Day.table_name("LoginAttempts", t), "LoginAttempts20140731");
//! assert_eq!(Period::Month.table_name("LoginAttempts", t), "LoginAttempts201407");
//! assert_eq!(Period::Day.parse("LoginAttempts", "LoginAttempts20140731"), Some(Period::Day.start(t)));
//! assert_eq!(Period::Day.next(Period::Day.start(t)), Utc.with_ymd_and_hms(2014, 8, 1, 0, 0, 0).unwrap());
//! ```
//!
//! Login attempts kept 60 days, one table per day:
//!
//! ```
//! use chrono::{DateTime, Duration, TimeZone, Utc};
//! use tablekit::{TableEntity, TableServiceClient};
//! use tablekit_patterns::periodic::{Period, PeriodicTables};
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{user}", row_key = "{id}")]
//! struct LoginAttempt {
//!     user: String,
//!     id: String,
//!     at: DateTime<Utc>,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded(); // or ::from_connection_string(..)
//! let attempts = PeriodicTables::new(service, "LoginAttempts", Period::Day, Duration::days(60), |a: &LoginAttempt| a.at)?;
//! let t = Utc.with_ymd_and_hms(2014, 7, 31, 18, 0, 0).unwrap();
//! let mut a = LoginAttempt { user: "joe".into(), id: "0001".into(), at: t };
//! attempts.insert(&mut a).await?; // creates LoginAttempts20140731 on first use
//! let day = attempts.query(t - Duration::hours(1), t + Duration::hours(1), |q| q).await?;
//! assert_eq!(day.len(), 1);
//! // 61 days after the day ended, its table goes with one request.
//! let swept = attempts.sweep(t + Duration::days(62)).await?;
//! assert_eq!(swept, ["LoginAttempts20140731"]);
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Timelike, Utc};
use futures::TryStreamExt;
use tablekit::{table::Query, Result, TableClient, TableEntity, TableServiceClient, UpdateMode};

use crate::error::refused;

/// The length of time one table covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Period {
    /// One table per UTC hour: `<prefix>YYYYMMDDHH`.
    Hour,
    /// One table per UTC day: `<prefix>YYYYMMDD`.
    Day,
    /// One table per UTC month: `<prefix>YYYYMM`.
    Month,
}

impl Period {
    fn format(self) -> &'static str {
        match self {
            Period::Hour => "%Y%m%d%H",
            Period::Day => "%Y%m%d",
            Period::Month => "%Y%m",
        }
    }

    fn digits(self) -> usize {
        match self {
            Period::Hour => 10,
            Period::Day => 8,
            Period::Month => 6,
        }
    }

    /// The start of the period that holds `t`.
    pub fn start(self, t: DateTime<Utc>) -> DateTime<Utc> {
        let day = Utc
            .with_ymd_and_hms(t.year(), t.month(), t.day(), 0, 0, 0)
            .single()
            .expect("midnight UTC exists");
        match self {
            Period::Hour => day + Duration::hours(i64::from(t.hour())),
            Period::Day => day,
            Period::Month => Utc
                .with_ymd_and_hms(t.year(), t.month(), 1, 0, 0, 0)
                .single()
                .expect("the first of a month exists"),
        }
    }

    /// The start of the period after the one that starts at `start`.
    pub fn next(self, start: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Period::Hour => start + Duration::hours(1),
            Period::Day => start + Duration::days(1),
            Period::Month => {
                let (y, m) = if start.month() == 12 {
                    (start.year() + 1, 1)
                } else {
                    (start.year(), start.month() + 1)
                };
                Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0)
                    .single()
                    .expect("the first of a month exists")
            }
        }
    }

    /// The name of the table of the period that holds `t`.
    pub fn table_name(self, prefix: &str, t: DateTime<Utc>) -> String {
        format!("{prefix}{}", t.format(self.format()))
    }

    /// The start of the period a table name stands for; `None` if the name is
    /// not `prefix` followed by this period's digits.
    pub fn parse(self, prefix: &str, name: &str) -> Option<DateTime<Utc>> {
        let digits = name.strip_prefix(prefix)?;
        if digits.len() != self.digits() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let num = |r: std::ops::Range<usize>| digits[r].parse::<u32>().ok();
        let year = digits[..4].parse::<i32>().ok()?;
        let month = num(4..6)?;
        let day = if self == Period::Month { 1 } else { num(6..8)? };
        let hour = if self == Period::Hour { num(8..10)? } else { 0 };
        let date = NaiveDate::from_ymd_opt(year, month, day)?;
        let t = Utc.from_utc_datetime(&date.and_hms_opt(hour, 0, 0)?);
        // Only canonical names: the name this period would give its start.
        (self.table_name(prefix, t) == name).then_some(t)
    }
}

type AtFn<T> = dyn Fn(&T) -> DateTime<Utc> + Send + Sync;

/// Entities of type `T` in one table per [`Period`]; see the [module docs](self).
/// Cheap to clone.
pub struct PeriodicTables<T> {
    service: TableServiceClient,
    prefix: String,
    period: Period,
    retention: Duration,
    at: Arc<AtFn<T>>,
}

impl<T> Clone for PeriodicTables<T> {
    fn clone(&self) -> Self {
        PeriodicTables {
            service: self.service.clone(),
            prefix: self.prefix.clone(),
            period: self.period,
            retention: self.retention,
            at: self.at.clone(),
        }
    }
}

impl<T> fmt::Debug for PeriodicTables<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeriodicTables")
            .field("prefix", &self.prefix)
            .field("period", &self.period)
            .field("retention", &self.retention)
            .finish()
    }
}

impl<T: TableEntity> PeriodicTables<T> {
    /// Tables named `prefix` + period, holding each entity in the table of the
    /// instant `at(entity)`, kept for `retention` after their period ends.
    /// Fails if the prefix cannot start a valid table name.
    pub fn new(
        service: TableServiceClient,
        prefix: impl Into<String>,
        period: Period,
        retention: Duration,
        at: impl Fn(&T) -> DateTime<Utc> + Send + Sync + 'static,
    ) -> Result<Self> {
        let prefix = prefix.into();
        let sample = format!("{prefix}{}", "0".repeat(period.digits()));
        tablekit::validate::table_name(&sample)?;
        if retention < Duration::zero() {
            return Err(refused("periodic", "the retention cannot be negative"));
        }
        Ok(PeriodicTables {
            service,
            prefix,
            period,
            retention,
            at: Arc::new(at),
        })
    }

    /// The table that holds the entities of instant `t`.
    pub fn table_at(&self, t: DateTime<Utc>) -> Result<TableClient<T>> {
        self.service
            .table::<T>(&self.period.table_name(&self.prefix, t))
    }

    /// The names' prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    async fn routed(&self, entity: &mut T, mode: Option<UpdateMode>) -> Result<()> {
        let table = self.table_at((self.at)(entity))?;
        let mut created = false;
        loop {
            let result = match mode {
                None => table.insert(&mut *entity).await,
                Some(mode) => table.upsert(&mut *entity, mode).await,
            };
            match result {
                Err(e) if !created && is_table_missing(&e) => {
                    table.create_table_if_not_exists().await?;
                    created = true;
                }
                other => return other.map(drop),
            }
        }
    }

    /// Inserts the entity into its period's table, creating the table on the
    /// period's first write. A taken key is a conflict.
    pub async fn insert(&self, entity: &mut T) -> Result<()> {
        crate::trace::traced("PeriodicTables", "insert", None, async move {
            self.routed(entity, None).await
        })
        .await
    }

    /// Inserts or replaces/merges the entity in its period's table.
    pub async fn upsert(&self, entity: &mut T, mode: UpdateMode) -> Result<()> {
        crate::trace::traced("PeriodicTables", "upsert", None, async move {
            self.routed(entity, Some(mode)).await
        })
        .await
    }

    /// The tables of the periods that overlap `from <= t < to`, oldest first.
    pub fn tables_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<TableClient<T>>> {
        let mut tables = Vec::new();
        let mut start = self.period.start(from);
        while start < to {
            tables.push(self.table_at(start)?);
            start = self.period.next(start);
        }
        Ok(tables)
    }

    /// Runs the query `build` makes of each table of the periods overlapping
    /// `from <= t < to` and merges the results into (PartitionKey, RowKey)
    /// order, as if the periods were one table: newest first across days when
    /// RowKeys are [`NewestFirst`](crate::log_tail::NewestFirst) keys. Equal
    /// keys in two periods come oldest period first. A period with no table
    /// (nothing was written then, or it was swept) is skipped. Entities whose
    /// instant (the `at` function) is outside the window are dropped on the
    /// client: only the first and last periods can hold any. `build` adds a
    /// filter within each table (a user's partition, say). Keys are compared as
    /// Rust strings, which is the service's order except between characters
    /// above U+FFFF and U+E000..=U+FFFF.
    pub async fn query<F>(&self, from: DateTime<Utc>, to: DateTime<Utc>, build: F) -> Result<Vec<T>>
    where
        F: Fn(Query<T>) -> Query<T>,
    {
        crate::trace::traced("PeriodicTables", "query", None, async move {
            let mut all = Vec::new();
            for table in self.tables_between(from, to)? {
                match build(table.query()).fetch_all().await {
                    Ok(rows) => all.extend(rows.into_iter().filter(|e| {
                        let t = (self.at)(e);
                        from <= t && t < to
                    })),
                    Err(e) if is_table_missing(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            // Each table's rows are sorted already; a stable sort keeps equal keys in period order.
            all.sort_by(|a, b| {
                (a.partition_key(), a.row_key()).cmp(&(b.partition_key(), b.row_key()))
            });
            Ok(all)
        })
        .await
    }

    /// Deletes every table of this prefix whose period ended at least the
    /// retention before `now`: one delete per table. Returns the names deleted,
    /// oldest first. Tables already gone (another sweeper) are not an error;
    /// names that are not this prefix and period's are left alone.
    pub async fn sweep(&self, now: DateTime<Utc>) -> Result<Vec<String>> {
        crate::trace::traced("PeriodicTables", "sweep", None, async move {
            let cutoff = now - self.retention;
            let mut expired: Vec<(DateTime<Utc>, String)> = self
                .service
                .list_tables()
                .prefix(self.prefix.clone())
                .stream()
                .try_filter_map(|name| async move {
                    Ok(self
                        .period
                        .parse(&self.prefix, &name)
                        .filter(|start| self.period.next(*start) <= cutoff)
                        .map(|start| (start, name)))
                })
                .try_collect()
                .await?;
            expired.sort();
            let mut deleted = Vec::with_capacity(expired.len());
            for (_, name) in expired {
                if self.service.delete_table_if_exists(&name).await? {
                    deleted.push(name);
                }
            }
            Ok(deleted)
        })
        .await
    }
}

fn is_table_missing(e: &tablekit::Error) -> bool {
    matches!(e.code(), Some(tablekit::error::ErrorCode::TableNotFound))
}
