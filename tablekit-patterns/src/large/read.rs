//! The reads and the delete of [`LargeTable`](super::LargeTable).

use tablekit::{
    entity::RawEntity,
    error::{DecodeError, ErrorCode, ErrorKind},
    DynamicEntity, EntityKey, Error, IfMatch, Result, TableEntity,
};

use super::layout::blob_refs;
use super::{BlobRef, LargeTable, Step, WithoutBlobs, BLOBS, MAX_ATTEMPTS};

impl<T: TableEntity> LargeTable<T> {
    pub(super) async fn download(&self, refs: &[BlobRef]) -> Result<Vec<Vec<u8>>> {
        futures::future::try_join_all(refs.iter().map(|r| async move {
            Ok(self
                .container
                .blob(&r.blob)?
                .download()
                .bytes()
                .await?
                .to_vec())
        }))
        .await
    }

    /// Reads the whole entity: the entity, then its blobs (two requests with
    /// one blob). A blob gone between the two (a concurrent replace or delete)
    /// reads the entity again.
    pub async fn get(&self, key: impl Into<EntityKey>) -> Result<Option<T>> {
        crate::trace::traced("LargeTable", "get", Some(self.raw.name()), async move {
            let key = key.into();
            let mut attempt = 1;
            loop {
                let Some(row) = self.raw.get(key.clone()).await? else {
                    return Ok(None);
                };
                let refs = blob_refs(&row)?;
                self.hook.call(Step::EntityRead).await?;
                let values = match self.download(&refs).await {
                    Ok(v) => v,
                    Err(e)
                        if e.code() == Some(&ErrorCode::BlobNotFound) && attempt < MAX_ATTEMPTS =>
                    {
                        attempt += 1;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let mut whole = row;
                whole.properties.remove(BLOBS);
                for (r, bytes) in refs.iter().zip(values) {
                    whole.set(r.property.as_str(), r.kind.value(&r.property, bytes)?);
                }
                return T::decode(&RawEntity::from_dynamic(&whole)).map(Some);
            }
        })
        .await
    }

    /// Reads the entity without its blobs, one request: `U` is decoded from
    /// the properties stored in the entity (`T` itself if its large fields are
    /// `Option` or `default`, a smaller type, or [`DynamicEntity`]), and the
    /// properties in blobs are named in [`WithoutBlobs::blobs`].
    pub async fn get_without_blobs<U: TableEntity>(
        &self,
        key: impl Into<EntityKey>,
    ) -> Result<Option<WithoutBlobs<U>>> {
        crate::trace::traced(
            "LargeTable",
            "get_without_blobs",
            Some(self.raw.name()),
            async move {
                let Some(mut row) = self.raw.get(key).await? else {
                    return Ok(None);
                };
                let blobs = blob_refs(&row)?;
                row.properties.remove(BLOBS);
                for r in &blobs {
                    row.properties.remove(&r.property);
                }
                Ok(Some(WithoutBlobs {
                    entity: U::decode(&RawEntity::from_dynamic(&row))?,
                    blobs,
                }))
            },
        )
        .await
    }

    /// Deletes the entity on the condition `if_match` (with [`IfMatch::Any`],
    /// under the version read, again on a concurrent change), then its blobs.
    /// Returns whether it existed.
    pub async fn delete(
        &self,
        key: impl Into<EntityKey>,
        if_match: impl Into<IfMatch>,
    ) -> Result<bool> {
        crate::trace::traced("LargeTable", "delete", Some(self.raw.name()), async move {
            let key = key.into();
            key.validate()?;
            let if_match = if_match.into();
            let mut attempt = 1;
            loop {
                let Some(current) = self.raw.get(key.clone()).await? else {
                    return Ok(false);
                };
                let read = current.etag.clone().ok_or_else(|| no_etag(&key))?;
                let condition = match &if_match {
                    IfMatch::Any => read.clone(),
                    IfMatch::ETag(e) => e.clone(),
                };
                match self
                    .raw
                    .delete(key.clone(), IfMatch::ETag(condition.clone()))
                    .await
                {
                    Ok(()) => {
                        self.hook.call(Step::EntityDeleted).await?;
                        if condition == read {
                            let refs = blob_refs(&current)?;
                            let none = DynamicEntity::new("", "");
                            self.delete_blobs(&refs, &none).await;
                        }
                        return Ok(true);
                    }
                    Err(e) if e.is_not_found() && !matches!(if_match, IfMatch::Any) => {
                        return Ok(false)
                    }
                    Err(e)
                        if matches!(if_match, IfMatch::Any)
                            && (e.is_precondition_failed() || e.is_not_found())
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

pub(super) fn not_found(key: &EntityKey, table: &str) -> Error {
    ErrorKind::NoEntity(format!("no entity {key} in table {table}")).into()
}

pub(super) fn no_etag(key: &EntityKey) -> Error {
    DecodeError::new(format!("{key} came without an ETag")).into()
}
