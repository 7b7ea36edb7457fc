//! The data series pattern (design guide §3.9): a series of counts kept as
//! the properties of one entity (or a few), so that the whole series is read
//! with one request and one slot is updated with a merge that sends only that
//! slot's property.
//!
//! * A [`SeriesLayout`] says how many slots a series has, their property
//!   names and how many go in one entity: [`SeriesLayout::hourly`] is 24
//!   counts `H00`..`H23` in one entity; [`SeriesLayout::daily`] is 366 counts
//!   `Day001`..`Day366` in the two entities `01` (days 1–183) and `02`
//!   (days 184–366), the guide's wide-entity example.
//! * [`DataSeries`] reads a whole series ([`read`](DataSeries::read): one
//!   range query) and adds to one slot ([`add`](DataSeries::add): a point read
//!   and a merge under the ETag, again on a concurrent change, so no
//!   increment is lost; an unconditional merge would lose them).
//! * [`HourlyCounters`] rolls over: each UTC day is a series of its own
//!   (RowKey `20140731_01`), and [`last_24_hours`](HourlyCounters::last_24_hours)
//!   reads the two series a 24-hour chart needs with one range query.
//! * [`plan_add`](DataSeries::plan_add), [`plan_set`](DataSeries::plan_set)
//!   and [`plan_record`](HourlyCounters::plan_record) return the change as a
//!   [`Plan`], to join other writes of the partition in one transaction
//!   ([`crate::plan`]): an expense entry and its hour's count, say. Two
//!   additions to one slot in one plan add up, whether the entity holds
//!   the slot ([`Plan::add`]) or not ([`Plan::modify`]).
//!
//! Many writers of one series contend for one entity's ETag; spread writers
//! over series, or accept retries.
//!
//! ```
//! use tablekit_patterns::series::SeriesLayout;
//!
//! let daily = SeriesLayout::daily();
//! assert_eq!(daily.slot(0).unwrap(), ("01".to_owned(), "Day001".to_owned()));
//! assert_eq!(daily.slot(183).unwrap(), ("02".to_owned(), "Day184".to_owned()));
//! assert_eq!(daily.entities(), 2);
//! let hourly = SeriesLayout::hourly();
//! assert_eq!(hourly.slot(23).unwrap(), ("01".to_owned(), "H23".to_owned()));
//! assert!(hourly.slot(24).is_err());
//! ```
//!
//! Hourly counts of one employee's messages:
//!
//! ```
//! use tablekit::{DynamicEntity, TableServiceClient};
//! use tablekit_patterns::series::{DataSeries, SeriesLayout};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded(); // or ::from_connection_string(..)
//! # service.create_table("MessageStats").await?;
//! let stats = DataSeries::new(&service.table::<DynamicEntity>("MessageStats")?, SeriesLayout::hourly());
//! stats.add("000123", "", 9, 2).await?; // a point read and a merge of H09 under its ETag
//! stats.add("000123", "", 9, 1).await?;
//! let day = stats.read("000123", "").await?; // one request for the 24 counts
//! assert_eq!(day.values[9], 3);
//! assert_eq!(day.values.iter().sum::<i64>(), 3);
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Duration, Timelike, Utc};
use tablekit::validate::MAX_PROPERTIES;
use tablekit::{
    error::DecodeError, table::TransactionOp, DynamicEntity, ETag, EdmValue, EntityKey, Error,
    IfMatch, Result, TableClient, TableEntity, UpdateMode,
};

use crate::error::refused;
use crate::hook::BeforeWrite;
use crate::plan::Plan;
use crate::range::KeyRange;

/// How many times [`DataSeries::add`] starts again after a concurrent change.
pub const MAX_ATTEMPTS: usize = 16;

type NameFn = dyn Fn(usize) -> String + Send + Sync;

/// The shape of a series: slot count, slots per entity, property names.
#[derive(Clone)]
pub struct SeriesLayout {
    slots: usize,
    per_entity: usize,
    name: Arc<NameFn>,
}

impl fmt::Debug for SeriesLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeriesLayout")
            .field("slots", &self.slots)
            .field("per_entity", &self.per_entity)
            .field("first", &(self.name)(0))
            .finish()
    }
}

impl SeriesLayout {
    /// `slots` slots, `per_entity` of them per entity (at most 252), slot `i`
    /// stored as the property `name(i)`. At most 99 entities.
    pub fn new(
        slots: usize,
        per_entity: usize,
        name: impl Fn(usize) -> String + Send + Sync + 'static,
    ) -> Result<Self> {
        if slots == 0 || per_entity == 0 || per_entity > MAX_PROPERTIES {
            return Err(refused(
                "series",
                format!(
                    "a series needs at least one slot and 1 to {MAX_PROPERTIES} slots per entity"
                ),
            ));
        }
        if slots.div_ceil(per_entity) > 99 {
            return Err(refused("series", "a series spans at most 99 entities"));
        }
        Ok(SeriesLayout {
            slots,
            per_entity,
            name: Arc::new(name),
        })
    }

    /// 24 hourly counts, `H00`..`H23`, in one entity.
    pub fn hourly() -> Self {
        SeriesLayout::new(24, 24, |i| format!("H{i:02}")).expect("a valid layout")
    }

    /// 366 daily counts, `Day001`..`Day366`, in two entities of 183.
    pub fn daily() -> Self {
        SeriesLayout::new(366, 183, |i| format!("Day{:03}", i + 1)).expect("a valid layout")
    }

    /// The number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The number of entities a series is stored in.
    pub fn entities(&self) -> usize {
        self.slots.div_ceil(self.per_entity)
    }

    /// The entity suffix (`01`, `02`, …) and property name of slot `i`.
    pub fn slot(&self, i: usize) -> Result<(String, String)> {
        if i >= self.slots {
            return Err(refused(
                "series",
                format!("slot {i} is outside the series' {} slots", self.slots),
            ));
        }
        Ok((chunk(i / self.per_entity), (self.name)(i)))
    }
}

fn chunk(index: usize) -> String {
    format!("{:02}", index + 1)
}

/// The RowKey of entity `suffix` of series `series` (`01` alone when the
/// series has no name, else `<series>_01`).
fn row_key(series: &str, suffix: &str) -> String {
    if series.is_empty() {
        suffix.to_owned()
    } else {
        format!("{series}_{suffix}")
    }
}

/// A whole series as read: one value per slot (a slot never written is 0)
/// and the ETag of each entity (`None` for one not yet written).
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesData {
    /// The values, slot 0 first.
    pub values: Vec<i64>,
    /// The ETags of the series' entities, `01` first.
    pub etags: Vec<Option<ETag>>,
}

/// Series of counts stored in a table; see the [module docs](self). Cheap to clone.
#[derive(Debug, Clone)]
pub struct DataSeries {
    table: TableClient<DynamicEntity>,
    layout: SeriesLayout,
    before_write: BeforeWrite,
}

/// The series entity `now` (`None`: absent, then `created`, every slot 0)
/// with `delta` added to its property `name`: an integer keeps its type
/// (an Int32 that overflows is an error, as [`Plan::add`] makes it), a
/// missing slot or a value of another type counts as 0 and is stored as
/// Int64, as [`DataSeries::add`] stores it.
fn added(
    now: Option<&DynamicEntity>,
    created: &DynamicEntity,
    name: &str,
    delta: i64,
) -> Result<DynamicEntity> {
    let mut e = now.cloned().unwrap_or_else(|| created.clone());
    let overflow = |base: i64| {
        Error::from(DecodeError::for_property(
            name.to_owned(),
            format!("{base} + {delta} overflows"),
        ))
    };
    let value = match e.get(name) {
        Some(EdmValue::Int32(n)) => EdmValue::Int32(
            i64::from(*n)
                .checked_add(delta)
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(|| overflow(i64::from(*n)))?,
        ),
        Some(EdmValue::Int64(n)) => {
            EdmValue::Int64(n.checked_add(delta).ok_or_else(|| overflow(*n))?)
        }
        _ => EdmValue::Int64(delta),
    };
    e.set(name.to_owned(), value);
    Ok(e)
}

fn count(value: Option<&EdmValue>) -> i64 {
    match value {
        Some(EdmValue::Int64(n)) => *n,
        Some(EdmValue::Int32(n)) => i64::from(*n),
        _ => 0,
    }
}

impl DataSeries {
    /// Series of `layout` in `table` (a table of any entity type: series rows
    /// are read and written as property bags).
    pub fn new<T: TableEntity>(table: &TableClient<T>, layout: SeriesLayout) -> Self {
        DataSeries {
            table: table.with_type::<DynamicEntity>(),
            layout,
            before_write: BeforeWrite::default(),
        }
    }

    /// Runs `hook` with the attempt number (1 first) after
    /// [`add`](Self::add) read the slot's entity and before its conditional
    /// write: for tracing retries, and in tests the exact place to let
    /// another client write.
    pub fn step_hook<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(usize) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<()>> + Send + 'static,
    {
        self.before_write = BeforeWrite::new(hook);
        self
    }

    /// The layout.
    pub fn layout(&self) -> &SeriesLayout {
        &self.layout
    }

    /// Reads the whole series `series` of partition `partition_key`: one range
    /// query over its entities.
    pub async fn read(&self, partition_key: &str, series: &str) -> Result<SeriesData> {
        crate::trace::traced("DataSeries", "read", Some(self.table.name()), async move {
            let last = chunk(self.layout.entities() - 1);
            let range = KeyRange::inclusive(row_key(series, "01"), row_key(series, &last));
            let rows = self
                .table
                .query()
                .filter_by(range.filter(partition_key, ""))
                .fetch_all()
                .await?;
            Ok(self.assemble(series, &rows))
        })
        .await
    }

    fn assemble(&self, series: &str, rows: &[DynamicEntity]) -> SeriesData {
        let n = self.layout.entities();
        let mut data = SeriesData {
            values: vec![0; self.layout.slots],
            etags: vec![None; n],
        };
        for (c, etag) in data.etags.iter_mut().enumerate() {
            let rk = row_key(series, &chunk(c));
            if let Some(row) = rows.iter().find(|r| r.row_key == rk) {
                *etag = row.etag.clone();
                let first = c * self.layout.per_entity;
                let end = (first + self.layout.per_entity).min(self.layout.slots);
                for i in first..end {
                    data.values[i] = count(row.get(&(self.layout.name)(i)));
                }
            }
        }
        data
    }

    /// Sets slot `slot` to `value` whatever it holds: one merge that sends only
    /// that slot's property (creating the entity if needed). Last writer wins.
    pub async fn set(
        &self,
        partition_key: &str,
        series: &str,
        slot: usize,
        value: i64,
    ) -> Result<()> {
        crate::trace::traced("DataSeries", "set", Some(self.table.name()), async move {
            let (suffix, name) = self.layout.slot(slot)?;
            let e = DynamicEntity::new(partition_key, row_key(series, &suffix)).with(name, value);
            self.table.upsert(&e, UpdateMode::Merge).await.map(drop)
        })
        .await
    }

    /// The key of the entity that holds slot `slot` of `series`, and the
    /// slot's property name.
    fn slot_key(
        &self,
        partition_key: &str,
        series: &str,
        slot: usize,
    ) -> Result<(EntityKey, String)> {
        let (suffix, name) = self.layout.slot(slot)?;
        let key = EntityKey::new(partition_key, row_key(series, &suffix));
        key.validate().map_err(Error::from)?;
        Ok((key, name))
    }

    /// The entity `key`, holding slot `slot`, with every one of its slots 0.
    fn zeroed(&self, key: &EntityKey, slot: usize) -> DynamicEntity {
        let first = slot / self.layout.per_entity * self.layout.per_entity;
        let end = (first + self.layout.per_entity).min(self.layout.slots);
        let mut e = DynamicEntity::new(key.partition_key.as_str(), key.row_key.as_str());
        for i in first..end {
            e.set((self.layout.name)(i), 0i64);
        }
        e
    }

    /// Slot `slot` set to `value` whatever it holds, planned: the one merge
    /// (an upsert of that slot's property alone) that [`set`](Self::set)
    /// sends, for a transaction composed with other writes of the partition
    /// ([`crate::plan`]). An addition to the slot later in the same plan
    /// adds to `value`.
    pub fn plan_set(
        &self,
        partition_key: &str,
        series: &str,
        slot: usize,
        value: i64,
    ) -> Result<Plan<'static>> {
        let (key, name) = self.slot_key(partition_key, series, slot)?;
        let e = DynamicEntity::new(key.partition_key, key.row_key).with(name, value);
        Plan::op(&self.table, TransactionOp::upsert(&e, UpdateMode::Merge)?)
    }

    /// `delta` added to slot `slot`, planned: the slot's entity is read when
    /// the plan is sent (one point read, shared with every part of the plan
    /// that reads it) and the new value written under the ETag read, so the
    /// plan is worked out again when another writer changed the entity
    /// meanwhile. Additions to one slot in one plan, from two `plan_add`
    /// calls or from other plans, add up, and one after a
    /// [`plan_set`](Self::plan_set) of the slot adds to the value set:
    ///
    /// * A slot the entity holds as an integer: [`Plan::add`], the merge of
    ///   that slot alone (the value keeps its type, Int32 or Int64).
    /// * No entity yet: [`Plan::add`] inserting it with **every slot it
    ///   holds** 0 (Int64) and this one `delta` (Int32, as `Plan::add`
    ///   creates a count), so that additions to any of its slots in the same
    ///   plan, or in later plans, compose; [`add`](Self::add) stores the
    ///   written slots only. A negative `delta`, or one past Int32, is stored
    ///   as Int64.
    /// * An entity without the slot (a series entity written by `add` or
    ///   `set`, which store only the slots written) or with a value of
    ///   another type: [`Plan::modify`] of the entity as the plan's earlier
    ///   writes leave it, the slot counted as 0 (as `add` counts it) and
    ///   stored as Int64 (as `add` stores it). The entity is written whole,
    ///   under the ETag read, rather than merged.
    pub fn plan_add(
        &self,
        partition_key: &str,
        series: &str,
        slot: usize,
        delta: i64,
    ) -> Result<Plan<'static>> {
        let (key, name) = self.slot_key(partition_key, series, slot)?;
        let created = self.zeroed(&key, slot);
        let table = self.table.clone();
        let at = key.clone();
        Plan::after_read(&self.table, key, move |stored| match stored {
            Some(s) if matches!(s.get(&name), Some(EdmValue::Int32(_) | EdmValue::Int64(_))) => {
                Plan::add(&table, at.clone(), name.as_str(), delta, created.clone())
            }
            None if (0..=i64::from(i32::MAX)).contains(&delta) => {
                Plan::add(&table, at.clone(), name.as_str(), delta, created.clone())
            }
            _ => {
                let (name, created) = (name.clone(), created.clone());
                Plan::modify(&table, at.clone(), move |now| {
                    added(now, &created, &name, delta).map(Some)
                })
            }
        })
    }

    /// Adds `delta` to slot `slot` and returns the new value: reads the slot's
    /// entity, then merges only that slot's property under the ETag read (or
    /// inserts the entity if there is none); if another writer changed it in
    /// between, reads again and retries (at most [`MAX_ATTEMPTS`] times).
    pub async fn add(
        &self,
        partition_key: &str,
        series: &str,
        slot: usize,
        delta: i64,
    ) -> Result<i64> {
        crate::trace::traced("DataSeries", "add", Some(self.table.name()), async move {
            let (suffix, name) = self.layout.slot(slot)?;
            let key = EntityKey::new(partition_key, row_key(series, &suffix));
            key.validate().map_err(Error::from)?;
            let mut attempt = 1;
            loop {
                let stored = self.table.get(key.clone()).await?;
                let value = count(stored.as_ref().and_then(|e| e.get(&name))) + delta;
                let e = DynamicEntity::new(key.partition_key.as_str(), key.row_key.as_str())
                    .with(name.as_str(), value);
                self.before_write.call(attempt).await?;
                let result = match stored.and_then(|s| s.etag) {
                    Some(etag) => self
                        .table
                        .update(&e, UpdateMode::Merge, IfMatch::ETag(etag))
                        .await
                        .map(drop),
                    None => self.table.insert(&e).await.map(drop),
                };
                match result {
                    Ok(()) => return Ok(value),
                    Err(e)
                        if (e.is_precondition_failed() || e.is_conflict() || e.is_not_found())
                            && attempt < MAX_ATTEMPTS =>
                    {
                        attempt += 1
                    }
                    Err(e) => return Err(e),
                }
            }
        })
        .await
    }
}

/// Hourly counts that roll over to a new series every UTC day: the series of
/// a day is named `YYYYMMDD` (RowKey `20140731_01`), its slots are the hours.
#[derive(Debug, Clone)]
pub struct HourlyCounters {
    series: DataSeries,
}

fn day_of(t: DateTime<Utc>) -> String {
    t.format("%Y%m%d").to_string()
}

impl HourlyCounters {
    /// Hourly counters stored in `table`.
    pub fn new<T: TableEntity>(table: &TableClient<T>) -> Self {
        HourlyCounters {
            series: DataSeries::new(table, SeriesLayout::hourly()),
        }
    }

    /// The underlying series.
    pub fn series(&self) -> &DataSeries {
        &self.series
    }

    /// `delta` added to the count of the hour of `t`, planned: the
    /// [`plan_add`](DataSeries::plan_add) of that hour's slot of that day's
    /// series.
    pub fn plan_record(
        &self,
        partition_key: &str,
        t: DateTime<Utc>,
        delta: i64,
    ) -> Result<Plan<'static>> {
        self.series
            .plan_add(partition_key, &day_of(t), t.hour() as usize, delta)
    }

    /// Adds `delta` to the count of the hour of `t` and returns the new count.
    pub async fn record(&self, partition_key: &str, t: DateTime<Utc>, delta: i64) -> Result<i64> {
        crate::trace::traced(
            "HourlyCounters",
            "record",
            Some(self.series.table.name()),
            async move {
                self.series
                    .add(partition_key, &day_of(t), t.hour() as usize, delta)
                    .await
            },
        )
        .await
    }

    /// The counts of the 24 hours up to and including the hour of `now`,
    /// oldest first, each with the start of its hour: one range query over
    /// yesterday's and today's series.
    pub async fn last_24_hours(
        &self,
        partition_key: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<(DateTime<Utc>, i64)>> {
        crate::trace::traced(
            "HourlyCounters",
            "last_24_hours",
            Some(self.series.table.name()),
            async move {
                let this_hour = now
                    .with_minute(0)
                    .and_then(|t| t.with_second(0))
                    .and_then(|t| t.with_nanosecond(0))
                    .expect("the start of an hour exists");
                let first = this_hour - Duration::hours(23);
                let (yesterday, today) = (day_of(first), day_of(this_hour));
                let range = KeyRange::inclusive(row_key(&yesterday, "01"), row_key(&today, "01"));
                let rows = self
                    .series
                    .table
                    .query()
                    .filter_by(range.filter(partition_key, ""))
                    .fetch_all()
                    .await?;
                let old = self.series.assemble(&yesterday, &rows);
                let new = self.series.assemble(&today, &rows);
                Ok((0..24)
                    .map(|i| {
                        let t = first + Duration::hours(i);
                        let data = if day_of(t) == today { &new } else { &old };
                        (t, data.values[t.hour() as usize])
                    })
                    .collect())
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_addition_by_modify_counts_a_missing_slot_as_0_stored_as_int64() {
        let created = DynamicEntity::new("p", "01")
            .with("H00", 0i64)
            .with("H01", 0i64);
        let stored = DynamicEntity::new("p", "01")
            .with("H00", 5i32)
            .with("H01", 7i64)
            .with("H02", "text");
        let slot = |e: Result<DynamicEntity>, name: &str| e.unwrap().get(name).cloned();
        // An integer keeps its type.
        assert_eq!(
            slot(added(Some(&stored), &created, "H00", 2), "H00"),
            Some(EdmValue::Int32(7))
        );
        assert_eq!(
            slot(added(Some(&stored), &created, "H01", -9), "H01"),
            Some(EdmValue::Int64(-2))
        );
        // Missing, or another type: 0, stored as Int64.
        assert_eq!(
            slot(added(Some(&stored), &created, "H03", 4), "H03"),
            Some(EdmValue::Int64(4))
        );
        assert_eq!(
            slot(added(Some(&stored), &created, "H02", 4), "H02"),
            Some(EdmValue::Int64(4))
        );
        // No entity: the one created, every other slot kept.
        let new = added(None, &created, "H01", -3).unwrap();
        assert_eq!(new.get("H00"), Some(&EdmValue::Int64(0)));
        assert_eq!(new.get("H01"), Some(&EdmValue::Int64(-3)));
        // The other properties of a stored entity stay.
        let kept = added(Some(&stored), &created, "H03", 1).unwrap();
        assert_eq!(kept.get("H02"), Some(&EdmValue::from("text")));
        // An Int32 past its range is an error naming the slot, as Plan::add makes it.
        let max = DynamicEntity::new("p", "01").with("H00", i32::MAX);
        let err = added(Some(&max), &created, "H00", 1).unwrap_err();
        assert!(err.to_string().contains("H00"), "{err}");
        let err = added(
            Some(&DynamicEntity::new("p", "01").with("H00", i64::MAX)),
            &created,
            "H00",
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("overflows"), "{err}");
    }
}
