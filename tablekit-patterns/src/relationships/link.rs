//! One-to-one: the explicit link [`Link`] and the implicit one
//! [`KeyConvention`], each resolved in one point read.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use tablekit::__private_0_1 as private;
use tablekit::{EntityKey, Result, TableClient, TableEntity};

/// The property names (after the holder's prefix) of a [`Link`].
const PK: &str = "PartitionKey";
const RK: &str = "RowKey";

/// An explicit one-to-one link to an entity of type `T`: its PartitionKey
/// and RowKey, stored as two properties of the entity holding the link.
/// Flatten it into the holder, `#[tablekit(flatten)] manager: Link<Employee>`,
/// and it is stored as `Manager_PartitionKey` and `Manager_RowKey`.
/// [`resolve`](Self::resolve) reads the linked entity in **one point read**
/// of a table of `T`s, which the type checks.
///
/// Nothing keeps a link valid: deleting the linked entity leaves the link
/// naming nothing (`resolve` returns `None`), and moving it leaves the link
/// naming the old key. Write the holder and the linked entity in one
/// transaction when they share a partition, or through the queue worker
/// ([`crate::eventual`]) when they do not.
pub struct Link<T> {
    partition_key: String,
    row_key: String,
    _t: PhantomData<fn() -> T>,
}

impl<T> Link<T> {
    /// A link to the entity with this key (checked when resolved).
    pub fn new(key: impl Into<EntityKey>) -> Self {
        let key = key.into();
        Link {
            partition_key: key.partition_key,
            row_key: key.row_key,
            _t: PhantomData,
        }
    }

    /// The key of the linked entity.
    pub fn key(&self) -> EntityKey {
        EntityKey::new(&self.partition_key, &self.row_key)
    }

    /// The linked entity's PartitionKey.
    pub fn partition_key(&self) -> &str {
        &self.partition_key
    }

    /// The linked entity's RowKey.
    pub fn row_key(&self) -> &str {
        &self.row_key
    }
}

impl<T: TableEntity> Link<T> {
    /// A link to `entity`.
    pub fn to(entity: &T) -> Self {
        Link {
            partition_key: entity.partition_key().into_owned(),
            row_key: entity.row_key().into_owned(),
            _t: PhantomData,
        }
    }

    /// The linked entity, read from `table` in one point read; `None` if
    /// there is none (it was deleted, or never written).
    pub async fn resolve(&self, table: &TableClient<T>) -> Result<Option<T>> {
        crate::trace::traced("Link", "resolve", Some(table.name()), async move {
            table.get(self.key()).await
        })
        .await
    }
}

impl<T> Clone for Link<T> {
    fn clone(&self) -> Self {
        Link {
            partition_key: self.partition_key.clone(),
            row_key: self.row_key.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> PartialEq for Link<T> {
    fn eq(&self, other: &Self) -> bool {
        self.partition_key == other.partition_key && self.row_key == other.row_key
    }
}

impl<T> Eq for Link<T> {}

impl<T> fmt::Debug for Link<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("partition_key", &self.partition_key)
            .field("row_key", &self.row_key)
            .finish()
    }
}

// What `#[derive(TableProperties)]` would write for a struct of two
// `String`s, which the derive cannot do for a generic type.
impl<T> private::TableProperties for Link<T> {
    fn write_properties<W: private::PropertyWriter + ?Sized>(&self, out: &mut W) -> Result<()> {
        <String as private::Property>::write_to(&self.partition_key, PK, out)?;
        <String as private::Property>::write_to(&self.row_key, RK, out)
    }

    fn read_properties(entity: &private::RawEntity<'_>, prefix: &str) -> Result<Self> {
        let (mut pk, mut rk) = (None, None);
        for (name, value) in private::prefixed_properties(entity, prefix) {
            match name {
                PK => pk = Some(value),
                RK => rk = Some(value),
                _ => {}
            }
        }
        let read = |value: Option<private::PropertyValue<'_>>, name: &str| match value {
            Some(v) => <String as private::Property>::read_from(v),
            None => <String as private::Property>::missing(&private::nested_prefix(prefix, name)),
        };
        Ok(Link {
            partition_key: read(pk, PK)?,
            row_key: read(rk, RK)?,
            _t: PhantomData,
        })
    }

    fn is_known(name: &str) -> bool {
        name == PK || name == RK
    }
}

type KeyFn = dyn Fn(&str, &str) -> EntityKey + Send + Sync;

/// An implicit one-to-one link: a convention in the key values, a function
/// from the keys of an entity of type `A` to the key of its entity of type
/// `B` (an employee `("Sales", "000123")` and its details
/// `("Sales", "000123_details")`, or its photo's entity in another table).
/// Nothing is stored; [`resolve`](Self::resolve) is one point read. Cheap to
/// clone.
pub struct KeyConvention<A, B> {
    key_of: Arc<KeyFn>,
    _t: PhantomData<fn(A) -> B>,
}

impl<A, B> Clone for KeyConvention<A, B> {
    fn clone(&self) -> Self {
        KeyConvention {
            key_of: self.key_of.clone(),
            _t: PhantomData,
        }
    }
}

impl<A, B> fmt::Debug for KeyConvention<A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyConvention").finish_non_exhaustive()
    }
}

impl<A: TableEntity, B: TableEntity> KeyConvention<A, B> {
    /// The convention `key_of(partition_key, row_key)` of an `A` gives the
    /// key of its `B`.
    pub fn new(key_of: impl Fn(&str, &str) -> EntityKey + Send + Sync + 'static) -> Self {
        KeyConvention {
            key_of: Arc::new(key_of),
            _t: PhantomData,
        }
    }

    /// The key of the `B` of `entity`.
    pub fn key(&self, entity: &A) -> EntityKey {
        (self.key_of)(&entity.partition_key(), &entity.row_key())
    }

    /// The explicit link this convention makes for `entity`.
    pub fn link(&self, entity: &A) -> Link<B> {
        Link::new(self.key(entity))
    }

    /// The `B` of `entity`, read from `table` in one point read; `None` if
    /// there is none.
    pub async fn resolve(&self, entity: &A, table: &TableClient<B>) -> Result<Option<B>> {
        crate::trace::traced("KeyConvention", "resolve", Some(table.name()), async move {
            table.get(self.key(entity)).await
        })
        .await
    }
}
