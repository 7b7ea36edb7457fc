//! The index declarations: [`InterIndex`], its definition as the worker
//! sees it, and how a value becomes the RowKey of a copy.

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use tablekit::codec::to_dynamic;
use tablekit::{DynamicEntity, Result, TableClient, TableEntity};

use crate::range::KeyRange;

use super::VALUE_SEPARATOR;

type KeyFn<T> = dyn Fn(&T) -> String + Send + Sync;

pub(super) struct IndexDef<T> {
    pub(super) name: String,
    pub(super) prefix: String,
    pub(super) key: Arc<KeyFn<T>>,
    pub(super) table: Option<TableClient<DynamicEntity>>,
    pub(super) unique: bool,
}

impl<T> IndexDef<T> {
    /// The RowKey of the copy of the entity with RowKey `primary_row_key`
    /// whose indexed value is `value`.
    pub(super) fn copy_row_key(&self, value: &str, primary_row_key: &str) -> String {
        if self.unique {
            value.to_owned()
        } else {
            format!("{}{VALUE_SEPARATOR}{primary_row_key}", escape_value(value))
        }
    }

    /// `range` over values, as a range over the RowKeys of the copies.
    pub(super) fn row_key_range(&self, range: &KeyRange) -> KeyRange {
        if self.unique {
            return range.clone();
        }
        // Copies of value v are `escape(v) + ' ' + rk`; every key of a value
        // above v (escaped) is at least `escape(v) + '!'`.
        let lower = match range.lower() {
            Bound::Included(v) => Bound::Included(escape_value(v)),
            Bound::Excluded(v) => Bound::Included(format!("{}!", escape_value(v))),
            Bound::Unbounded => Bound::Unbounded,
        };
        let upper = match range.upper() {
            Bound::Included(v) => Bound::Excluded(format!("{}!", escape_value(v))),
            Bound::Excluded(v) => Bound::Excluded(escape_value(v)),
            Bound::Unbounded => Bound::Unbounded,
        };
        KeyRange::new(lower, upper)
    }
}

/// A value as it is written before [`VALUE_SEPARATOR`] in a non-unique
/// index's RowKey: `' '` becomes `"!!"` and `'!'` becomes `"!\""`, every
/// other character stays. The code is prefix-free and keeps the order of
/// values, so a prefix or range of values is a prefix or range of RowKeys,
/// and no escaped value holds the separator.
fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for ch in value.chars() {
        match ch {
            ' ' => out.push_str("!!"),
            '!' => out.push_str("!\""),
            c => out.push(c),
        }
    }
    out
}

/// One index of an [`InterPartitionIndex`](super::InterPartitionIndex): a name, whether a value belongs
/// to one entity at most ([`unique`](InterIndex::unique)) or to any number
/// ([`non_unique`](InterIndex::non_unique)), the PartitionKey prefix of its
/// copies (`email_`), the function giving an entity's indexed value, and
/// optionally a table of its own. Cheap to clone.
///
/// There is no `InterIndex::new`: whether an index is unique decides what a
/// second entity with the same value gets (a refusal, or a copy of its own),
/// so every declaration says which.
///
/// ```
/// use tablekit::{DynamicEntity, EdmValue};
/// use tablekit_patterns::inter_index::InterIndex;
///
/// let text = |name: &'static str| {
///     move |e: &DynamicEntity| match e.get(name) {
///         Some(EdmValue::String(s)) => s.to_lowercase(),
///         _ => String::new(),
///     }
/// };
/// let by_email = InterIndex::unique("email", "email_", text("Email"));
/// let by_name = InterIndex::non_unique("last name", "lastname_", text("LastName"));
/// let jones = DynamicEntity::new("Sales", "000223")
///     .with("Email", "JonesJ@contoso.com")
///     .with("LastName", "Jones");
/// assert_eq!(by_email.value(&jones), "jonesj@contoso.com");
/// assert_eq!(by_email.partition_key("Sales"), "email_Sales");
/// assert_eq!(by_email.row_key(&jones)?, "jonesj@contoso.com");
/// // A non-unique copy's RowKey is the value, a space and the primary RowKey.
/// assert_eq!(by_name.row_key(&jones)?, "jones 000223");
/// # Ok::<(), tablekit::Error>(())
/// ```
pub struct InterIndex<T> {
    pub(super) def: Arc<IndexDef<T>>,
}

impl<T> Clone for InterIndex<T> {
    fn clone(&self) -> Self {
        InterIndex {
            def: self.def.clone(),
        }
    }
}

impl<T> fmt::Debug for InterIndex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterIndex")
            .field("name", &self.def.name)
            .field("unique", &self.def.unique)
            .field("prefix", &self.def.prefix)
            .field("table", &self.def.table.as_ref().map(|t| t.name()))
            .finish()
    }
}

impl<T: TableEntity> InterIndex<T> {
    /// A **unique** index named `name`: at most one entity of a partition
    /// per value. The copy of an entity of partition `p` goes to partition
    /// `prefix` + `p` under the RowKey `key(entity)` (the seed's
    /// `email_Sales` / `jonesj@contoso.com`), in the primary's table. A
    /// change that would take a value another entity holds is refused by the
    /// worker with [`Error::constraint`](tablekit::Error::constraint) (see the [module docs](super)).
    pub fn unique(
        name: impl Into<String>,
        prefix: impl Into<String>,
        key: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> Self {
        Self::declare(name.into(), prefix.into(), Arc::new(key), true)
    }

    /// A **non-unique** index named `name`: any number of entities per
    /// value. The copy of an entity of partition `p` goes to partition
    /// `prefix` + `p` under the RowKey `key(entity)` + [`VALUE_SEPARATOR`] +
    /// the entity's own RowKey (`lastname_Sales` / `jones 000223`), so two
    /// Joneses have two copies. Read it with
    /// [`lookup_all`](super::InterPartitionIndex::lookup_all) or
    /// [`list`](super::InterPartitionIndex::list), which take values, not RowKeys.
    pub fn non_unique(
        name: impl Into<String>,
        prefix: impl Into<String>,
        key: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> Self {
        Self::declare(name.into(), prefix.into(), Arc::new(key), false)
    }

    fn declare(name: String, prefix: String, key: Arc<KeyFn<T>>, unique: bool) -> Self {
        InterIndex {
            def: Arc::new(IndexDef {
                name,
                prefix,
                key,
                table: None,
                unique,
            }),
        }
    }

    /// The same index with its copies in `table` (the guide: "the copies may
    /// also go into separate tables"). Create the table first.
    pub fn in_table<U: TableEntity>(self, table: &TableClient<U>) -> Self {
        InterIndex {
            def: Arc::new(IndexDef {
                name: self.def.name.clone(),
                prefix: self.def.prefix.clone(),
                key: self.def.key.clone(),
                table: Some(table.with_type::<DynamicEntity>()),
                unique: self.def.unique,
            }),
        }
    }

    /// The index's name (the name a constraint violation carries).
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// Whether a value belongs to one entity at most.
    pub fn is_unique(&self) -> bool {
        self.def.unique
    }

    /// The PartitionKey of the copies of the entities of partition `partition_key`.
    pub fn partition_key(&self, partition_key: &str) -> String {
        format!("{}{partition_key}", self.def.prefix)
    }

    /// The indexed value of `entity`.
    pub fn value(&self, entity: &T) -> String {
        (self.def.key)(entity)
    }

    /// The RowKey of `entity`'s copy: its value for a unique index; for a
    /// non-unique one the value (a space written `!!`, a `!` written `!"`),
    /// [`VALUE_SEPARATOR`] and the entity's own RowKey. An error if the
    /// entity does not encode.
    pub fn row_key(&self, entity: &T) -> Result<String> {
        let value = self.value(entity);
        if self.def.unique {
            return Ok(value);
        }
        Ok(self.def.copy_row_key(&value, &to_dynamic(entity)?.row_key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn def(unique: bool) -> IndexDef<()> {
        IndexDef {
            name: "n".into(),
            prefix: "p_".into(),
            key: Arc::new(|_: &()| String::new()),
            table: None,
            unique,
        }
    }

    #[test]
    fn escaped_values_keep_their_order_and_never_hold_the_separator() {
        let values = [
            "", " ", "!", "a", "a b", "a!", "a c", "ab", "van dyke", "van", "vana",
        ];
        let non_unique = def(false);
        let mut by_value: Vec<&str> = values.to_vec();
        by_value.sort();
        let mut by_key: Vec<(String, &str)> = values
            .iter()
            .map(|v| (non_unique.copy_row_key(v, "000223"), *v))
            .collect();
        by_key.sort();
        assert_eq!(by_key.iter().map(|(_, v)| *v).collect::<Vec<_>>(), by_value);
        for v in values {
            assert!(!escape_value(v).contains(VALUE_SEPARATOR), "{v:?}");
        }
        assert_eq!(non_unique.copy_row_key("jones", "000223"), "jones 000223");
        assert_eq!(def(true).copy_row_key("jones", "000223"), "jones");
    }

    #[test]
    fn a_value_range_selects_exactly_the_copies_of_those_values() {
        let non_unique = def(false);
        let keys: Vec<(String, &str)> = ["van", "van dyke", "vana", "vb", "va", "van!"]
            .iter()
            .flat_map(|v| ["000001", "0 2"].map(|rk| (non_unique.copy_row_key(v, rk), *v)))
            .collect();
        let within = |range: KeyRange, value: &str| {
            let range = non_unique.row_key_range(&range);
            let ok_lower = match range.lower() {
                Bound::Included(b) => value >= b.as_str(),
                Bound::Excluded(b) => value > b.as_str(),
                Bound::Unbounded => true,
            };
            let ok_upper = match range.upper() {
                Bound::Included(b) => value <= b.as_str(),
                Bound::Excluded(b) => value < b.as_str(),
                Bound::Unbounded => true,
            };
            ok_lower && ok_upper
        };
        type Case = (KeyRange, fn(&str) -> bool);
        let cases: Vec<Case> = vec![
            (KeyRange::inclusive("van", "van"), |v| v == "van"),
            (KeyRange::prefix("van"), |v| v.starts_with("van")),
            (KeyRange::inclusive("va", "van"), |v| {
                ("va"..="van").contains(&v)
            }),
            (KeyRange::half_open("van", "vana"), |v| {
                ("van".."vana").contains(&v)
            }),
            (
                KeyRange::new(Bound::Excluded("van".into()), Bound::Unbounded),
                |v| v > "van",
            ),
        ];
        for (range, want) in cases {
            for (key, value) in &keys {
                assert_eq!(
                    within(range.clone(), key),
                    want(value),
                    "{range:?} {value:?}"
                );
            }
        }
    }
}
