//! The log tail pattern (design guide §3.7): RowKeys that sort newest first, so
//! "the n most recent" is the start of a range query and `$top` does the rest.
//!
//! * [`NewestFirst`] is a RowKey value: the instant's inverted ticks as 19
//!   digits (`2519936321679999999` for 2014-08-22T00:50:32Z), `_`, and a
//!   tie-breaker, so two entries of the same instant do not collide. It
//!   implements `Display` and `FromStr`, so it can be a key field of a derived
//!   type (`#[tablekit(row_key)] key: NewestFirst`, or the last field of a
//!   template such as `row_key = "claim_{key}"`).
//! * [`LogTail`] reads such a partition: [`latest`](LogTail::latest) (one range
//!   query that stops after n entities) and [`between`](LogTail::between) two
//!   instants, newest first. It writes with [`append`](LogTail::append), one
//!   insert, or plans that insert ([`plan_append`](LogTail::plan_append)) to
//!   join other writes of the partition in one transaction.
//!
//! The order is Azure Table storage's; the Cosmos DB Table API does not sort
//! results by key, and this pattern does not work there. Every new entry goes
//! to the top of one partition: mind that partition's throughput target.
//!
//! ```
//! use chrono::{TimeZone, Utc};
//! use tablekit_patterns::log_tail::NewestFirst;
//!
//! let t = Utc.with_ymd_and_hms(2014, 8, 22, 0, 50, 32).unwrap();
//! let key = NewestFirst::new(t, "claim7");
//! assert_eq!(key.to_string(), "2519936321679999999_claim7");
//! let back: NewestFirst = "2519936321679999999_claim7".parse().unwrap();
//! assert_eq!((back.at(), back.tie()), (t, "claim7"));
//!
//! // Later instants sort first; equal instants are ordered by the tie-breaker.
//! let later = NewestFirst::new(t + chrono::Duration::seconds(1), "a");
//! assert!(later.to_string() < key.to_string());
//! ```
//!
//! ```
//! use chrono::Utc;
//! use tablekit::{TableEntity, TableServiceClient};
//! use tablekit_patterns::log_tail::{LogTail, NewestFirst};
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{employee}", row_key = "{key}")]
//! struct Expense {
//!     employee: String,
//!     key: NewestFirst,
//!     amount: f64,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded(); // or ::from_connection_string(..)
//! # service.create_table("EmployeeExpense").await?;
//! let log = LogTail::new(service.table::<Expense>("EmployeeExpense")?);
//! let mut claim = Expense { employee: "000123".into(), key: NewestFirst::unique(Utc::now()), amount: 12.5 };
//! log.append(&mut claim).await?;
//! let ten_most_recent = log.latest("000123", 10).await?;
//! assert_eq!(ten_most_recent.len(), 1);
//! # Ok(()) }
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use tablekit::filter::prefix_successor;
use tablekit::{
    table::{PlanTarget, Query},
    Result, TableClient, TableEntity,
};

use crate::keys::{from_inverted_ticks, inverted_ticks};
use crate::plan::Plan;
use crate::range::KeyRange;

/// A newest-first RowKey: `{inverted ticks:019}_{tie-breaker}`; see the
/// [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NewestFirst {
    at: DateTime<Utc>,
    tie: String,
}

impl NewestFirst {
    /// The key of an entry at `at`, told apart from other entries of the same
    /// instant (to 100 ns) by `tie`: a message id, a sequence number, a GUID.
    /// Use a fixed width for numbers, so they sort in order.
    pub fn new(at: DateTime<Utc>, tie: impl Into<String>) -> Self {
        NewestFirst {
            at,
            tie: tie.into(),
        }
    }

    /// A key at `at` with a tie-breaker unique across processes: 16 hex digits
    /// of a random v4 UUID followed by a per-process sequence number.
    pub fn unique(at: DateTime<Utc>) -> Self {
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        let random = uuid::Uuid::new_v4().simple().to_string();
        let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        NewestFirst::new(at, format!("{}{seq:08x}", &random[..16]))
    }

    /// The instant, to 100 ns (what the key keeps of it).
    pub fn at(&self) -> DateTime<Utc> {
        self.at
    }

    /// The tie-breaker.
    pub fn tie(&self) -> &str {
        &self.tie
    }
}

impl fmt::Display for NewestFirst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", inverted_ticks(self.at), self.tie)
    }
}

impl FromStr for NewestFirst {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (ticks, tie) = s
            .split_once('_')
            .ok_or_else(|| format!("{s:?} is not `<19 digits>_<tie-breaker>`"))?;
        let at = from_inverted_ticks(ticks)
            .ok_or_else(|| format!("{ticks:?} is not 19 digits of inverted ticks"))?;
        Ok(NewestFirst {
            at,
            tie: tie.to_owned(),
        })
    }
}

/// The RowKey range (after any prefix) of the entries at `from <= t < to`.
/// Newest first: the range starts with the entries just before `to`.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use tablekit::DynamicEntity;
/// use tablekit_patterns::log_tail::instants;
///
/// let from = Utc.with_ymd_and_hms(2014, 7, 31, 18, 0, 0).unwrap();
/// let to = Utc.with_ymd_and_hms(2014, 8, 22, 0, 50, 32).unwrap();
/// assert_eq!(
///     instants(from, to).filter::<DynamicEntity>("000123", "").to_string(),
///     "PartitionKey eq '000123' and RowKey ge '251993632167999999:' and RowKey lt '251995471199999999:'"
/// );
/// ```
pub fn instants(from: DateTime<Utc>, to: DateTime<Utc>) -> KeyRange {
    let successor = |t| prefix_successor(&inverted_ticks(t)).expect("digits have a successor");
    KeyRange::half_open(successor(to), successor(from))
}

/// A partition of newest-first entries of type `T`, read from its top; see
/// the [module docs](self). Cheap to clone.
#[derive(Debug, Clone)]
pub struct LogTail<T> {
    table: TableClient<T>,
    prefix: String,
}

impl<T: TableEntity> LogTail<T> {
    /// The log entries of `table`, whose RowKeys are [`NewestFirst`] keys
    /// after the literal start of the type's RowKey template, if it has one
    /// ([`TableEntity::row_key_prefix`]: `claim_` for the derive's
    /// `row_key = "claim_{key}"`, so entries may share a partition with other
    /// entity types).
    pub fn new(table: TableClient<T>) -> Self {
        LogTail {
            table,
            prefix: T::row_key_prefix().to_owned(),
        }
    }

    /// The same, for RowKeys `prefix` + [`NewestFirst`], for a type whose
    /// derive does not say it (a [`DynamicEntity`](tablekit::DynamicEntity),
    /// a hand-written impl).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The table client.
    pub fn table(&self) -> &TableClient<T> {
        &self.table
    }

    /// Adds an entry (one insert). A key that exists is a conflict
    /// ([`tablekit::Error::is_conflict`]): pick another tie-breaker. Sets
    /// the entry's ETag.
    pub async fn append(&self, entry: &mut T) -> Result<()> {
        crate::trace::traced("LogTail", "append", Some(self.table.name()), async move {
            self.table.insert(entry).await.map(drop)
        })
        .await
    }

    /// The insert of an entry, planned: what [`append`](Self::append)
    /// writes, for a transaction composed with other writes of the entry's
    /// partition ([`crate::plan`]), such as a count of the entries in a
    /// summary entity of the partition
    /// ([`CountedPartition::plan_count`](crate::summary::CountedPartition::plan_count)).
    /// Passed by `&mut`, the entry gets its new ETag when the plan succeeds.
    ///
    /// An entry is one insert and reads nothing: there is no more to plan.
    /// Alone, `append` sends it as a single insert; the plan sends an entity
    /// group transaction, so a taken key is a conflict whose
    /// [`batch_index`](tablekit::Error::batch_index) names the entry.
    pub fn plan_append<'a>(&self, entry: impl PlanTarget<'a, T>) -> Result<Plan<'a>> {
        self.table.plan_insert(entry)
    }

    /// The query of a partition's entries in `range` (see [`instants`]),
    /// newest first, to stream or page through.
    pub fn query(&self, partition_key: &str, range: &KeyRange) -> Query<T> {
        self.table
            .query()
            .filter_by(range.filter(partition_key, &self.prefix))
    }

    /// The `n` newest entries of a partition, newest first: one range query
    /// that asks for `n` (`$top`) and follows continuations only until `n`
    /// have arrived (the service may return fewer than asked with a token).
    pub async fn latest(&self, partition_key: &str, n: usize) -> Result<Vec<T>> {
        crate::trace::traced("LogTail", "latest", Some(self.table.name()), async move {
            if n == 0 {
                return Ok(Vec::new());
            }
            self.query(partition_key, &KeyRange::all())
                .take(n)
                .fetch_all()
                .await
        })
        .await
    }

    /// The entries of a partition at `from <= t < to`, newest first.
    pub async fn between(
        &self,
        partition_key: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<T>> {
        crate::trace::traced("LogTail", "between", Some(self.table.name()), async move {
            self.query(partition_key, &instants(from, to))
                .fetch_all()
                .await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn the_seed_vectors_as_keys() {
        for (t, inverted) in [
            ((2014, 8, 22, 0, 50, 32), "2519936321679999999"),
            ((2014, 7, 31, 18, 0, 0), "2519954711999999999"),
            ((2019, 5, 21, 0, 0, 0), "2518439039999999999"),
        ] {
            let at = Utc.with_ymd_and_hms(t.0, t.1, t.2, t.3, t.4, t.5).unwrap();
            let key = NewestFirst::new(at, "x_y");
            assert_eq!(key.to_string(), format!("{inverted}_x_y"));
            assert_eq!(key.to_string().parse::<NewestFirst>(), Ok(key));
        }
    }

    #[test]
    fn unique_keys_of_one_instant_differ() {
        let t = Utc::now();
        assert_ne!(NewestFirst::unique(t), NewestFirst::unique(t));
        assert!("123_x".parse::<NewestFirst>().is_err());
        assert!("2519936321679999999".parse::<NewestFirst>().is_err());
    }

    #[test]
    fn instants_is_half_open() {
        let at = |s| Utc.with_ymd_and_hms(2014, 8, 22, 0, 50, s).unwrap();
        let range = instants(at(10), at(20));
        let inside = |t| {
            let k = NewestFirst::new(t, "zzz").to_string();
            let k0 = NewestFirst::new(t, "0").to_string();
            let within = |k: &String| match (range.lower(), range.upper()) {
                (std::ops::Bound::Included(lo), std::ops::Bound::Excluded(hi)) => k >= lo && k < hi,
                _ => unreachable!(),
            };
            assert_eq!(within(&k), within(&k0));
            within(&k)
        };
        assert!(inside(at(10)));
        assert!(inside(at(19)));
        assert!(!inside(at(20)));
        assert!(!inside(at(9)));
    }
}
