//! RowKey ranges inside one partition, written as the `$filter` a range query sends.
//!
//! Every pattern of this crate reads with range queries: a fixed PartitionKey
//! and RowKey bounds, the second-best query after a point read. [`KeyRange`]
//! holds the bounds; [`KeyRange::filter`] turns them into tablekit's typed
//! [`Filter`], whose literals tablekit escapes, so a value holding `'` cannot
//! change the query.

use std::ops::Bound;

use tablekit::filter::prefix_successor;
use tablekit::{filter::Column, Filter};

/// Bounds on RowKeys (or on the part of a RowKey after a fixed prefix), in the
/// service's ordinal string order.
///
/// ```
/// use tablekit::DynamicEntity;
/// use tablekit_patterns::range::KeyRange;
///
/// // The seed's "emails starting with a": ge 'email_a' and lt 'email_b'.
/// assert_eq!(
///     KeyRange::prefix("a").filter::<DynamicEntity>("Sales", "email_").to_string(),
///     "PartitionKey eq 'Sales' and RowKey ge 'email_a' and RowKey lt 'email_b'"
/// );
/// // The seed's IDs 000100 to 000199, both included.
/// assert_eq!(
///     KeyRange::inclusive("000100", "000199").filter::<DynamicEntity>("Sales", "empid_").to_string(),
///     "PartitionKey eq 'Sales' and RowKey ge 'empid_000100' and RowKey le 'empid_000199'"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    lower: Bound<String>,
    upper: Bound<String>,
}

impl KeyRange {
    /// Every key (under the prefix the range is used with).
    pub fn all() -> Self {
        KeyRange {
            lower: Bound::Unbounded,
            upper: Bound::Unbounded,
        }
    }

    /// Keys that start with `prefix`: `ge 'prefix'` and `lt` its successor.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        if prefix.is_empty() {
            return KeyRange::all();
        }
        let upper = match prefix_successor(&prefix) {
            Some(next) => Bound::Excluded(next),
            None => Bound::Unbounded,
        };
        KeyRange {
            lower: Bound::Included(prefix),
            upper,
        }
    }

    /// `from <= key <= to`.
    pub fn inclusive(from: impl Into<String>, to: impl Into<String>) -> Self {
        KeyRange {
            lower: Bound::Included(from.into()),
            upper: Bound::Included(to.into()),
        }
    }

    /// `from <= key < to`.
    pub fn half_open(from: impl Into<String>, to: impl Into<String>) -> Self {
        KeyRange {
            lower: Bound::Included(from.into()),
            upper: Bound::Excluded(to.into()),
        }
    }

    /// Any bounds.
    pub fn new(lower: Bound<String>, upper: Bound<String>) -> Self {
        KeyRange { lower, upper }
    }

    /// The lower bound.
    pub fn lower(&self) -> &Bound<String> {
        &self.lower
    }

    /// The upper bound.
    pub fn upper(&self) -> &Bound<String> {
        &self.upper
    }

    /// The filter of this range in partition `partition_key`, for RowKeys
    /// made of `prefix` followed by a key in this range, as a typed
    /// [`Filter`] over the PartitionKey and RowKey of any entity type (its
    /// literals are escaped by tablekit, so a value holding `'` cannot change
    /// the query). An unbounded side stays inside the prefix (`ge 'prefix'`,
    /// `lt` its successor), so a range over one index never returns the rows
    /// of another.
    pub fn filter<E>(&self, partition_key: &str, prefix: &str) -> Filter<E> {
        let row_key = Column::<E, String>::new("RowKey");
        let mut f = Column::<E, String>::new("PartitionKey").eq(partition_key);
        match &self.lower {
            Bound::Included(v) => f = f & row_key.ge(format!("{prefix}{v}")),
            Bound::Excluded(v) => f = f & row_key.gt(format!("{prefix}{v}")),
            Bound::Unbounded if !prefix.is_empty() => f = f & row_key.ge(prefix),
            Bound::Unbounded => {}
        }
        match &self.upper {
            Bound::Included(v) => f = f & row_key.le(format!("{prefix}{v}")),
            Bound::Excluded(v) => f = f & row_key.lt(format!("{prefix}{v}")),
            Bound::Unbounded => {
                if let Some(next) = prefix_successor(prefix) {
                    f = f & row_key.lt(next);
                }
            }
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablekit::DynamicEntity;

    fn text(range: KeyRange, partition_key: &str, prefix: &str) -> String {
        range
            .filter::<DynamicEntity>(partition_key, prefix)
            .to_odata()
            .unwrap()
    }

    #[test]
    fn unbounded_sides_stay_inside_the_prefix() {
        assert_eq!(
            text(KeyRange::all(), "Sales", "email_"),
            "PartitionKey eq 'Sales' and RowKey ge 'email_' and RowKey lt 'email`'"
        );
        assert_eq!(
            text(KeyRange::all(), "Sales", ""),
            "PartitionKey eq 'Sales'"
        );
    }

    #[test]
    fn quotes_are_doubled() {
        assert_eq!(
            text(KeyRange::prefix("o'b"), "O'Brien", "n_"),
            "PartitionKey eq 'O''Brien' and RowKey ge 'n_o''b' and RowKey lt 'n_o''c'"
        );
    }

    #[test]
    fn the_compound_key_seed_range() {
        // §3.6: the employee and all of their reviews, via the §7 erratum's fix.
        assert_eq!(
            text(KeyRange::half_open("000123", "000124"), "Sales", "empid_"),
            "PartitionKey eq 'Sales' and RowKey ge 'empid_000123' and RowKey lt 'empid_000124'"
        );
    }
}
