//! [`SplitTable`]: large properties split over several properties of the
//! same entity, no blob.

use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;

use tablekit::validate::{entity_size, MAX_ENTITY_BYTES, MAX_VALUE_BYTES};
use tablekit::{
    codec::entity_to_json, entity::RawEntity, error::DecodeError, DynamicEntity, EdmValue,
    EntityKey, Error, IfMatch, Result, TableClient, TableEntity, UpdateMode,
};

use crate::error::refused;

use super::layout::{over_property_limit, Kind};
use super::SPLIT;

/// A table of entities of type `T` whose String and Binary properties over
/// 64 KiB are split over several Binary properties of the same entity:
/// `Photo` of 150 KiB is stored as `Photo_0` and `Photo_1` (64 KiB each) and
/// `Photo_2`, with [`SPLIT`] saying so (`Photo:Binary:3`; a String is split as
/// its UTF-8). No blob: each operation is one request and atomic, but the
/// whole entity must fit the service's 1 MiB (counted as the service counts,
/// see the [module docs](super)); a larger one is refused before any request.
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
        crate::trace::traced("SplitTable", "insert", Some(self.raw.name()), async move {
            let mut row = self.encode(entity)?;
            self.raw.insert(&mut row).await?.apply_to(entity);
            Ok(())
        })
        .await
    }

    /// Inserts or replaces the entity whatever its version (one request).
    pub async fn upsert(&self, entity: &mut T) -> Result<()> {
        crate::trace::traced("SplitTable", "upsert", Some(self.raw.name()), async move {
            let mut row = self.encode(entity)?;
            self.raw
                .upsert(&mut row, UpdateMode::Replace)
                .await?
                .apply_to(entity);
            Ok(())
        })
        .await
    }

    /// Replaces the stored entity on the condition `if_match` (one request):
    /// parts no longer needed go with the replace.
    pub async fn replace(&self, entity: &mut T, if_match: impl Into<IfMatch>) -> Result<()> {
        crate::trace::traced("SplitTable", "replace", Some(self.raw.name()), async move {
            let mut row = self.encode(entity)?;
            self.raw
                .update(&mut row, UpdateMode::Replace, if_match)
                .await?
                .apply_to(entity);
            Ok(())
        })
        .await
    }

    /// Reads the entity (one point read) and joins its parts.
    pub async fn get(&self, key: impl Into<EntityKey>) -> Result<Option<T>> {
        crate::trace::traced("SplitTable", "get", Some(self.raw.name()), async move {
            match self.raw.get(key).await? {
                Some(row) => Ok(Some(self.decode(&row)?)),
                None => Ok(None),
            }
        })
        .await
    }

    /// Deletes the entity with all its parts (one request); returns whether it existed.
    pub async fn delete(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<bool> {
        crate::trace::traced("SplitTable", "delete", Some(self.raw.name()), async move {
            self.raw.delete_if_exists(key, if_match).await
        })
        .await
    }
}
