//! Entities: the [`TableEntity`] trait, the [`PropertyWriter`] it writes to and
//! the [`RawEntity`] view it reads from, keys, ETags and the untyped
//! [`DynamicEntity`]. The vocabulary every other layer speaks; it knows no
//! wire format (the JSON codec in `codec` sits above it).

use std::borrow::Cow;
use std::fmt;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::edm::EdmValue;
use crate::error::{KeyKind, Result, ValidationError};
use crate::validate;

mod etag;
mod forward;
mod raw;

pub use etag::{ETag, IfMatch, IfNoneMatch};
pub(crate) use forward::{forward_property_writer, Forward, PropertyArg};
pub use raw::{PropertyValue, RawEntity};
pub(crate) use raw::{Scalar, Slot};

/// A type stored as one entity of a table.
///
/// `#[derive(TableEntity)]` writes this impl for a plain struct; [`DynamicEntity`]
/// implements it for the untyped property bag. A hand-written impl is fine too:
///
/// ```
/// use std::borrow::Cow;
/// use tablekit::{Result, TableEntity, entity::{PropertyWriter, RawEntity}};
///
/// struct Blog { channel: String, posted: String, text: String, rating: i32 }
///
/// impl TableEntity for Blog {
///     fn partition_key(&self) -> Cow<'_, str> { Cow::Borrowed(&self.channel) }
///     fn row_key(&self) -> Cow<'_, str> { Cow::Borrowed(&self.posted) }
///     fn write_properties<W: PropertyWriter + ?Sized>(&self, out: &mut W) -> Result<()> {
///         out.string("Text", &self.text)?;
///         out.int32("Rating", self.rating)
///     }
///     fn decode(e: &RawEntity<'_>) -> Result<Self> {
///         Ok(Blog {
///             channel: e.partition_key().to_owned(),
///             posted: e.row_key().to_owned(),
///             text: e.required("Text")?.as_str()?.to_owned(),
///             rating: e.required("Rating")?.to_i32()?,
///         })
///     }
/// }
/// ```
pub trait TableEntity: Sized + Send + Sync + 'static {
    /// The PartitionKey of this value.
    fn partition_key(&self) -> Cow<'_, str>;

    /// The RowKey of this value.
    fn row_key(&self) -> Cow<'_, str>;

    /// Writes every stored property other than PartitionKey, RowKey and Timestamp.
    fn write_properties<W: PropertyWriter + ?Sized>(&self, out: &mut W) -> Result<()>;

    /// Builds a value from a stored entity. Properties the type does not know are
    /// to be ignored (the service has no schema, and older readers must keep working).
    fn decode(entity: &RawEntity<'_>) -> Result<Self>;

    /// The ETag this value was read or last written with, if the type keeps one.
    fn etag(&self) -> Option<&ETag> {
        None
    }

    /// Stores the ETag after a read or a write; types that keep none ignore it.
    fn set_etag(&mut self, etag: ETag) {
        let _ = etag;
    }

    /// Stores the service's Timestamp after a write; types that keep none ignore it.
    fn set_timestamp(&mut self, timestamp: DateTime<Utc>) {
        let _ = timestamp;
    }

    /// The properties to ask for with `$select` when reading this type; `None` reads all.
    fn select() -> Option<&'static [&'static str]> {
        None
    }

    /// Whether decoding needs the service's type annotations. A type that knows
    /// the Edm type of each of its fields does not; a property bag does.
    fn needs_type_annotations() -> bool {
        true
    }

    /// Whether the names passed to the [`PropertyWriter`] were checked when the
    /// type was compiled (the derive checks them), so writes skip checking them
    /// again. A hand-written impl leaves it `false`.
    fn property_names_checked() -> bool {
        false
    }

    /// Whether the type can never write two properties with one name (a map, or
    /// a derived struct with no flattened fields), so writes skip looking for
    /// duplicates. A hand-written impl leaves it `false`.
    fn unique_property_names() -> bool {
        false
    }

    /// The literal text every RowKey of the type starts with: `empid_` for
    /// the derive's `row_key = "empid_{employee_id:06}"`, empty when the
    /// RowKey starts with a field (or the type is not derived). Patterns that
    /// keep other rows beside the entities of a partition (index copies, a
    /// summary) read it instead of asking for the prefix again.
    ///
    /// ```
    /// use tablekit::TableEntity;
    ///
    /// #[derive(TableEntity)]
    /// #[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
    /// struct Employee { department: String, employee_id: u32 }
    ///
    /// assert_eq!(Employee::row_key_prefix(), "empid_");
    /// assert_eq!(tablekit::DynamicEntity::row_key_prefix(), "");
    /// ```
    fn row_key_prefix() -> &'static str {
        ""
    }

    /// The names of the properties stored encrypted (client-side
    /// encryption, feature `encryption`): the fields marked
    /// `#[tablekit(encrypt)]`. Empty for a type with none, and for
    /// [`DynamicEntity`], whose encrypted properties an encryption resolver
    /// names. A type with any is written only through an encrypted table
    /// (`TableClient::encrypted`): a plain write would store the plaintext,
    /// and a merge is refused everywhere (see the guide's chapter on
    /// client-side encryption).
    fn encrypted_properties() -> &'static [&'static str] {
        &[]
    }

    /// The key of this value.
    fn key(&self) -> EntityKey {
        EntityKey::new(self.partition_key(), self.row_key())
    }
}

/// Receives the properties of an entity being written, one call per property.
///
/// The JSON encoder of the HTTP backend, the property bag of the embedded backend
/// and the size checks all implement it, so an entity is walked once per write.
pub trait PropertyWriter {
    /// Writes an `Edm.String`.
    fn string(&mut self, name: &str, value: &str) -> Result<()>;
    /// Writes an `Edm.Binary`.
    fn binary(&mut self, name: &str, value: &[u8]) -> Result<()>;
    /// Writes an `Edm.Boolean`.
    fn boolean(&mut self, name: &str, value: bool) -> Result<()>;
    /// Writes an `Edm.DateTime`.
    fn datetime(&mut self, name: &str, value: &DateTime<Utc>) -> Result<()>;
    /// Writes an `Edm.Double`.
    fn double(&mut self, name: &str, value: f64) -> Result<()>;
    /// Writes an `Edm.Guid`.
    fn guid(&mut self, name: &str, value: &Uuid) -> Result<()>;
    /// Writes an `Edm.Int32`.
    fn int32(&mut self, name: &str, value: i32) -> Result<()>;
    /// Writes an `Edm.Int64`.
    fn int64(&mut self, name: &str, value: i64) -> Result<()>;

    /// Writes any value by its type.
    fn value(&mut self, name: &str, value: &EdmValue) -> Result<()> {
        match value {
            EdmValue::String(v) => self.string(name, v),
            EdmValue::Binary(v) => self.binary(name, v),
            EdmValue::Boolean(v) => self.boolean(name, *v),
            EdmValue::DateTime(v) => self.datetime(name, v),
            EdmValue::Double(v) => self.double(name, *v),
            EdmValue::Guid(v) => self.guid(name, v),
            EdmValue::Int32(v) => self.int32(name, *v),
            EdmValue::Int64(v) => self.int64(name, *v),
        }
    }
}

/// Refuses, before any I/O, a write of a type with encrypted properties
/// through a client that does not encrypt: a merge (of which the
/// encryption format has none: the stored entity's properties may be
/// encrypted under another content key, and merging new ones and new
/// metadata would make them unreadable), and any other write (it would
/// store the plaintext). `mode`: `None` for an insert.
pub(crate) fn refuse_unencrypted_write<T: TableEntity>(mode: Option<UpdateMode>) -> Result<()> {
    let encrypted = T::encrypted_properties();
    if encrypted.is_empty() {
        return Ok(());
    }
    let ty = std::any::type_name::<T>();
    let reason = if mode == Some(UpdateMode::Merge) {
        format!(
            "{ty} has encrypted properties ({}): merge and insert-or-merge are refused for encrypted entities (write the whole entity with UpdateMode::Replace)",
            encrypted.join(", ")
        )
    } else {
        format!(
            "{ty} has encrypted properties ({}): write it through an encrypted table (TableClient::encrypted, feature `encryption`), not a plain one, which would store them in clear",
            encrypted.join(", ")
        )
    };
    Err(crate::error::Error::invalid(ValidationError::Encryption {
        reason,
    }))
}

/// Refuses a merge of a property bag that carries the encryption metadata of
/// the .NET and Python libraries (`_ClientEncryptionMetadata1`/`2`): merged
/// into the stored entity, it would replace the key of properties encrypted
/// under another one.
pub(crate) fn refuse_encrypted_merge(bag: &DynamicEntity, mode: UpdateMode) -> Result<()> {
    if mode == UpdateMode::Merge
        && ENCRYPTION_METADATA
            .iter()
            .any(|name| bag.properties.get(name).is_some())
    {
        return Err(crate::error::Error::invalid(ValidationError::Encryption {
            reason: format!(
                "entity {}/{} carries client-side encryption metadata: merge and insert-or-merge are refused for encrypted entities",
                bag.partition_key, bag.row_key
            ),
        }));
    }
    Ok(())
}

/// [`refuse_encrypted_merge`] for any entity type: a merge of an entity
/// whose properties include the encryption metadata is refused (its names
/// are walked only for a merge).
pub(crate) fn refuse_metadata_merge<T: TableEntity>(entity: &T, mode: UpdateMode) -> Result<()> {
    struct Names(bool);
    impl Names {
        fn see(&mut self, name: &str) -> Result<()> {
            self.0 |= ENCRYPTION_METADATA.contains(&name);
            Ok(())
        }
    }
    impl PropertyWriter for Names {
        fn string(&mut self, name: &str, _: &str) -> Result<()> {
            self.see(name)
        }
        fn binary(&mut self, name: &str, _: &[u8]) -> Result<()> {
            self.see(name)
        }
        fn boolean(&mut self, name: &str, _: bool) -> Result<()> {
            self.see(name)
        }
        fn datetime(&mut self, name: &str, _: &DateTime<Utc>) -> Result<()> {
            self.see(name)
        }
        fn double(&mut self, name: &str, _: f64) -> Result<()> {
            self.see(name)
        }
        fn guid(&mut self, name: &str, _: &Uuid) -> Result<()> {
            self.see(name)
        }
        fn int32(&mut self, name: &str, _: i32) -> Result<()> {
            self.see(name)
        }
        fn int64(&mut self, name: &str, _: i64) -> Result<()> {
            self.see(name)
        }
    }
    if mode != UpdateMode::Merge {
        return Ok(());
    }
    let mut names = Names(false);
    entity.write_properties(&mut names)?;
    if names.0 {
        return Err(crate::error::Error::invalid(ValidationError::Encryption {
            reason: format!(
                "entity {} carries client-side encryption metadata: merge and insert-or-merge are refused for encrypted entities",
                entity.key()
            ),
        }));
    }
    Ok(())
}

/// The reserved properties of client-side encryption: the wrapped content
/// key and IVs (a JSON string), and the encrypted list of encrypted properties.
pub(crate) const ENCRYPTION_METADATA: [&str; 2] =
    ["_ClientEncryptionMetadata1", "_ClientEncryptionMetadata2"];

/// How an update or upsert treats the properties the stored entity has and the
/// written one lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateMode {
    /// Keep them (HTTP `MERGE`): a partial update.
    Merge,
    /// Remove them (HTTP `PUT`): the stored entity becomes exactly the written one.
    Replace,
}

/// `merge` or `replace`.
impl fmt::Display for UpdateMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UpdateMode::Merge => "merge",
            UpdateMode::Replace => "replace",
        })
    }
}

/// The primary key of an entity: its PartitionKey and RowKey.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityKey {
    /// The PartitionKey.
    pub partition_key: String,
    /// The RowKey.
    pub row_key: String,
}

impl EntityKey {
    /// A key from its two parts. Checked against the service's key rules before any
    /// request that uses it (see [`EntityKey::validate`]).
    pub fn new(partition_key: impl Into<String>, row_key: impl Into<String>) -> Self {
        EntityKey {
            partition_key: partition_key.into(),
            row_key: row_key.into(),
        }
    }

    /// Checks both parts: at most 1024 characters, none of `/ \ # ?` or control characters.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::key(KeyKind::PartitionKey, &self.partition_key)?;
        validate::key(KeyKind::RowKey, &self.row_key)
    }
}

/// `PartitionKey/RowKey`, as a person reads it: `Sales/empid_000223`. Keys can
/// hold no `/`, so the text names one key unambiguously.
///
/// ```
/// assert_eq!(tablekit::EntityKey::new("Sales", "empid_000223").to_string(), "Sales/empid_000223");
/// ```
impl fmt::Display for EntityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.partition_key, self.row_key)
    }
}

impl<P: Into<String>, R: Into<String>> From<(P, R)> for EntityKey {
    fn from((p, r): (P, R)) -> Self {
        EntityKey::new(p, r)
    }
}

/// An ordered bag of named, typed properties. Setting a name that exists replaces it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Properties {
    entries: Vec<(Name, EdmValue)>,
}

/// A property's name in a [`Properties`] bag: owned, or shared by the bags
/// of entities of one shape (the bags of a transaction's writes, which the
/// embedded store keeps as they are).
#[derive(Clone)]
pub(crate) enum Name {
    Owned(String),
    Shared(std::sync::Arc<str>),
}

impl Name {
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Name::Owned(s) => s,
            Name::Shared(s) => s,
        }
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

// As the name's text, whether owned or shared.
impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// The properties of a [`Properties`] bag in insertion order, as names and values.
#[derive(Debug, Clone)]
pub struct PropertiesIter<'a>(std::slice::Iter<'a, (Name, EdmValue)>);

impl<'a> Iterator for PropertiesIter<'a> {
    type Item = (&'a str, &'a EdmValue);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(n, v)| (n.as_str(), v))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for PropertiesIter<'_> {}

impl DoubleEndedIterator for PropertiesIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(n, v)| (n.as_str(), v))
    }
}

impl Properties {
    /// An empty bag.
    pub fn new() -> Self {
        Properties::default()
    }

    /// An empty bag with room for `n` properties.
    pub fn with_capacity(n: usize) -> Self {
        Properties {
            entries: Vec::with_capacity(n),
        }
    }

    /// Sets a property, replacing any value of the same name; returns the old value.
    pub fn insert(
        &mut self,
        name: impl Into<String>,
        value: impl Into<EdmValue>,
    ) -> Option<EdmValue> {
        let name = name.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(n, _)| n.as_str() == name) {
            Some((_, v)) => Some(std::mem::replace(v, value)),
            None => {
                self.entries.push((Name::Owned(name), value));
                None
            }
        }
    }

    /// The value of a property.
    pub fn get(&self, name: &str) -> Option<&EdmValue> {
        self.entries
            .iter()
            .find(|(n, _)| n.as_str() == name)
            .map(|(_, v)| v)
    }

    /// Removes a property and returns its value.
    pub fn remove(&mut self, name: &str) -> Option<EdmValue> {
        let i = self.entries.iter().position(|(n, _)| n.as_str() == name)?;
        Some(self.entries.remove(i).1)
    }

    /// The number of properties.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The properties in insertion order.
    pub fn iter(&self) -> PropertiesIter<'_> {
        PropertiesIter(self.entries.iter())
    }

    /// The entries with their names as kept (shared or owned).
    pub(crate) fn entries(&self) -> &[(Name, EdmValue)] {
        &self.entries
    }

    /// Appends without looking for an existing name; the decoder uses it for
    /// service payloads, whose names are unique.
    pub(crate) fn push_unchecked(&mut self, name: String, value: EdmValue) {
        self.entries.push((Name::Owned(name), value));
    }

    /// [`push_unchecked`](Self::push_unchecked) of a name as kept (shared or owned).
    pub(crate) fn push_name(&mut self, name: Name, value: EdmValue) {
        self.entries.push((name, value));
    }

    /// The values, to change in place (the embedded store normalises DateTimes).
    #[cfg(feature = "embedded")]
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut EdmValue> {
        self.entries.iter_mut().map(|(_, v)| v)
    }

    /// The entries, moved out (the embedded store's merge reuses them).
    #[cfg(feature = "embedded")]
    pub(crate) fn into_entries(self) -> Vec<(Name, EdmValue)> {
        self.entries
    }
}

impl<N: Into<String>, V: Into<EdmValue>> FromIterator<(N, V)> for Properties {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        let mut p = Properties::new();
        for (n, v) in iter {
            p.insert(n, v);
        }
        p
    }
}

impl<'a> IntoIterator for &'a Properties {
    type Item = (&'a str, &'a EdmValue);
    type IntoIter = PropertiesIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// An untyped entity: keys, system properties and a bag of typed properties.
///
/// Use it for heterogeneous tables, tools, and anything whose shape is only known
/// at run time. `TableClient<DynamicEntity>` is the untyped table client.
///
/// ```
/// use tablekit::{DynamicEntity, EdmValue};
///
/// let mut e = DynamicEntity::new("Channel9", "Oct-29");
/// e.set("Text", "Hello");
/// e.set("Rating", 3);
/// e.set("Views", 9_000_000_000_i64);
/// assert_eq!(e.get("Rating"), Some(&EdmValue::Int32(3)));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DynamicEntity {
    /// The PartitionKey.
    pub partition_key: String,
    /// The RowKey.
    pub row_key: String,
    /// The service's Timestamp, filled on read.
    pub timestamp: Option<DateTime<Utc>>,
    /// The ETag, filled on read and after writes made through `&mut`.
    pub etag: Option<ETag>,
    /// The custom properties.
    pub properties: Properties,
}

impl DynamicEntity {
    /// An entity with these keys and no properties.
    pub fn new(partition_key: impl Into<String>, row_key: impl Into<String>) -> Self {
        DynamicEntity {
            partition_key: partition_key.into(),
            row_key: row_key.into(),
            ..Default::default()
        }
    }

    /// Sets a property; returns `self` for chaining.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<EdmValue>) -> Self {
        self.properties.insert(name, value);
        self
    }

    /// Sets a property, replacing any value of the same name.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<EdmValue>) -> Option<EdmValue> {
        self.properties.insert(name, value)
    }

    /// The value of a property.
    pub fn get(&self, name: &str) -> Option<&EdmValue> {
        self.properties.get(name)
    }
}

impl<'a> RawEntity<'a> {
    /// A view of a property bag with these keys.
    pub fn from_dynamic(entity: &'a DynamicEntity) -> Self {
        RawEntity {
            partition_key: Cow::Borrowed(&entity.partition_key),
            row_key: Cow::Borrowed(&entity.row_key),
            timestamp: entity
                .timestamp
                .map(|t| Cow::Owned(crate::edm::format_datetime(&t))),
            etag: entity.etag.as_ref().map(|e| Cow::Borrowed(e.as_str())),
            etag_is_json: false,
            props: entity
                .properties
                .iter()
                .map(|(n, v)| (Cow::Borrowed(n), Slot::Value(Cow::Borrowed(v))))
                .collect(),
        }
    }
}

impl TableEntity for DynamicEntity {
    fn partition_key(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.partition_key)
    }

    fn row_key(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.row_key)
    }

    fn write_properties<W: PropertyWriter + ?Sized>(&self, out: &mut W) -> Result<()> {
        for (name, value) in &self.properties {
            out.value(name, value)?;
        }
        Ok(())
    }

    fn decode(entity: &RawEntity<'_>) -> Result<Self> {
        let mut properties = Properties::with_capacity(entity.len());
        for p in entity.properties() {
            properties.push_unchecked(p.name().to_owned(), p.to_value()?);
        }
        Ok(DynamicEntity {
            partition_key: entity.partition_key().to_owned(),
            row_key: entity.row_key().to_owned(),
            timestamp: entity.timestamp(),
            etag: entity.etag(),
            properties,
        })
    }

    fn etag(&self) -> Option<&ETag> {
        self.etag.as_ref()
    }

    fn set_etag(&mut self, etag: ETag) {
        self.etag = Some(etag);
    }

    fn set_timestamp(&mut self, timestamp: DateTime<Utc>) {
        self.timestamp = Some(timestamp);
    }

    fn unique_property_names() -> bool {
        // `Properties` replaces on insert: a name appears once.
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_insert_replaces_same_name() {
        let mut p = Properties::new();
        assert_eq!(p.insert("A", 1), None);
        assert_eq!(p.insert("A", 2), Some(EdmValue::Int32(1)));
        assert_eq!(p.len(), 1);
        assert_eq!(p.get("A"), Some(&EdmValue::Int32(2)));
    }
}
