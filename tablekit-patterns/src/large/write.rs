//! The writes of [`LargeTable`](super::LargeTable): the plan worked out
//! before any request, the uploads, and the row write with its retries.

use tablekit::validate::{entity_size, property_size, MAX_ENTITY_BYTES};
use tablekit::{
    codec::entity_to_json, BlobClient, DynamicEntity, EdmValue, Error, IfMatch, Result,
    TableEntity, UpdateMode,
};

use crate::error::refused;

use super::layout::{blob_refs, encode_segment, over_property_limit, Kind};
use super::read::{no_etag, not_found};
use super::{BlobRef, LargeTable, Step, BLOBS, MAX_ATTEMPTS};

/// A write worked out before any request: the entity row to write and the
/// blobs to upload first.
struct Plan {
    row: DynamicEntity,
    uploads: Vec<(BlobClient, Vec<u8>, Kind)>,
}

impl<T: TableEntity> LargeTable<T> {
    fn plan(&self, entity: &T) -> Result<Plan> {
        let (pk, rk) = (entity.partition_key(), entity.row_key());
        let props = crate::props::collect(entity, BLOBS, "large")?;
        for name in &self.always {
            if let Some((_, v)) = props.iter().find(|(n, _)| n == name) {
                if Kind::of(v).is_none() {
                    return Err(refused("large", format!(
                        "always_in_blob({name:?}): only String and Binary properties can go to a blob, it is {}",
                        v.edm_type()
                    )));
                }
            }
        }
        let write_id = uuid::Uuid::new_v4().simple().to_string();
        let prefix = format!(
            "{}/{}/{}/{write_id}/",
            self.raw.name(),
            encode_segment(&pk),
            encode_segment(&rk)
        );
        let mut moved: Vec<bool> = props
            .iter()
            .map(|(n, v)| {
                over_property_limit(v) || (self.always.contains(n) && Kind::of(v).is_some())
            })
            .collect();
        let size_with = |moved: &[bool]| {
            let mut list = String::new();
            let mut size = entity_size(&pk, &rk, []);
            for ((name, value), m) in props.iter().zip(moved) {
                if *m {
                    let pointer = EdmValue::String(format!("{prefix}{name}"));
                    size += property_size(name, &pointer);
                    list.push_str(&format!("{name}:Binary,"));
                } else {
                    size += property_size(name, value);
                }
            }
            if !list.is_empty() {
                size += property_size(BLOBS, &EdmValue::String(list));
            }
            size
        };
        while size_with(&moved) > MAX_ENTITY_BYTES {
            let largest = props
                .iter()
                .enumerate()
                .filter(|(i, (_, v))| !moved[*i] && Kind::of(v).is_some())
                .max_by_key(|(_, (n, v))| property_size(n, v))
                .map(|(i, _)| i);
            match largest {
                Some(i) => moved[i] = true,
                None => {
                    return Err(refused("large", format!(
                        "entity ({pk}, {rk}) is over 1 MiB even with every String and Binary property in a blob"
                    )))
                }
            }
        }
        let mut row = DynamicEntity::new(pk.as_ref(), rk.as_ref());
        let mut uploads = Vec::new();
        let mut list = Vec::new();
        for ((name, value), m) in props.into_iter().zip(moved) {
            if m {
                let kind = Kind::of(&value).expect("only String and Binary are moved");
                let blob_name = format!("{prefix}{name}");
                uploads.push((
                    self.container.blob(&blob_name)?,
                    Kind::into_bytes(value),
                    kind,
                ));
                list.push(format!("{name}:{}", kind.as_str()));
                row.set(name, blob_name);
            } else {
                row.set(name, value);
            }
        }
        if !list.is_empty() {
            row.set(BLOBS, list.join(","));
        }
        // tablekit's own checks (keys, names, sizes), before any request.
        entity_to_json(&row)?;
        Ok(Plan { row, uploads })
    }

    async fn upload(&self, plan: &Plan) -> Result<()> {
        let sent = futures::future::join_all(plan.uploads.iter().map(|(blob, bytes, kind)| {
            let content_type = match kind {
                Kind::Binary => "application/octet-stream",
                Kind::String => "text/plain; charset=utf-8",
            };
            blob.upload(bytes.clone())
                .content_type(content_type)
                .if_none_match(tablekit::IfNoneMatch::Any)
                .send()
        }))
        .await;
        if let Some(Err(e)) = sent.into_iter().find(Result::is_err) {
            self.discard(plan).await;
            return Err(e);
        }
        Ok(())
    }

    /// Deletes the blobs a write uploaded, when its entity write failed.
    /// Best effort: what is left is an orphan for the sweep.
    async fn discard(&self, plan: &Plan) {
        let _ =
            futures::future::join_all(plan.uploads.iter().map(|(b, _, _)| b.delete_if_exists()))
                .await;
    }

    /// Deletes blobs of a version no entity points to any more. Best effort:
    /// the write they belonged to succeeded, and what is left is an orphan
    /// for the sweep.
    pub(super) async fn delete_blobs(&self, refs: &[BlobRef], keep: &DynamicEntity) {
        let _ = futures::future::join_all(
            refs.iter()
                .filter(|r| keep.get(&r.property).and_then(EdmValue::as_str) != Some(&r.blob))
                .map(|r| async move {
                    match self.container.blob(&r.blob) {
                        Ok(b) => b.delete_if_exists().await.map(drop),
                        Err(e) => Err(e),
                    }
                }),
        )
        .await;
    }

    async fn write(&self, entity: &mut T, mode: Mode) -> Result<()> {
        let mut plan = self.plan(entity)?;
        let key = entity.key();
        let mut uploaded = false;
        let mut started = self.now();
        let mut attempt = 1;
        loop {
            let current = match mode {
                Mode::Insert => None,
                _ => match self.raw.get(key.clone()).await {
                    Ok(c) => c,
                    Err(e) => {
                        if uploaded {
                            self.discard(&plan).await;
                        }
                        return Err(e);
                    }
                },
            };
            let condition = match (&mode, &current) {
                (Mode::Replace(_), None) => {
                    if uploaded {
                        self.discard(&plan).await;
                    }
                    return Err(not_found(&key, self.raw.name()));
                }
                (Mode::Insert | Mode::Upsert, None) => None,
                (Mode::Replace(IfMatch::ETag(e)), Some(_)) => Some(e.clone()),
                (_, Some(c)) => Some(c.etag.clone().ok_or_else(|| no_etag(&key))?),
            };
            if !uploaded {
                started = self.now();
                self.upload(&plan).await?;
                uploaded = true;
                self.hook.call(Step::BlobsUploaded).await?;
            }
            if !plan.uploads.is_empty() {
                let took = (self.now() - started).to_std().unwrap_or_default();
                if took > self.write_deadline() {
                    self.discard(&plan).await;
                    return Err(Error::timed_out(format!(
                        "the write of {key} in table {} took {took:?} since its upload started, \
                         over its deadline of {:?} (half the sweep's grace period): its blobs \
                         were deleted and its entity not written",
                        self.raw.name(),
                        self.write_deadline()
                    )));
                }
            }
            plan.row.etag = None;
            let sent = match &condition {
                None => self.raw.insert(&mut plan.row).await,
                Some(etag) => {
                    self.raw
                        .update(
                            &mut plan.row,
                            UpdateMode::Replace,
                            IfMatch::ETag(etag.clone()),
                        )
                        .await
                }
            };
            match sent {
                Ok(written) => {
                    self.hook.call(Step::EntityWritten).await?;
                    if let (Some(old), Some(cond)) = (&current, &condition) {
                        // Only the blobs of the version this write replaced.
                        if old.etag.as_ref() == Some(cond) {
                            if let Ok(refs) = blob_refs(old) {
                                self.delete_blobs(&refs, &plan.row).await;
                            }
                        }
                    }
                    written.apply_to(entity);
                    return Ok(());
                }
                Err(e) if attempt < MAX_ATTEMPTS && mode.retries(&e, condition.is_some()) => {
                    attempt += 1;
                }
                Err(e) => {
                    self.discard(&plan).await;
                    return Err(e);
                }
            }
        }
    }

    /// Inserts the entity: its blobs first, then the entity. A conflict (an
    /// entity with this key exists) deletes the uploaded blobs again. Sets the
    /// entity's ETag.
    pub async fn insert(&self, entity: &mut T) -> Result<()> {
        crate::trace::traced("LargeTable", "insert", Some(self.raw.name()), async move {
            self.write(entity, Mode::Insert).await
        })
        .await
    }

    /// Replaces the stored entity on the condition `if_match`: reads it (to
    /// know its blobs), uploads the new blobs, replaces the entity under the
    /// ETag read (or the one given), then deletes the old blobs. With
    /// [`IfMatch::Any`] a concurrent change starts it again from the read.
    /// Fails with not-found if there is no such entity.
    ///
    /// It is `replace`, not [`TableClient::update`](tablekit::TableClient::update)
    /// with a mode: a large entity is always written whole, its blobs with it,
    /// so there is no merge of a large entity.
    pub async fn replace(&self, entity: &mut T, if_match: impl Into<IfMatch>) -> Result<()> {
        crate::trace::traced("LargeTable", "replace", Some(self.raw.name()), async move {
            self.write(entity, Mode::Replace(if_match.into())).await
        })
        .await
    }

    /// Inserts the entity, or replaces the stored one whatever its version
    /// (still conditional on the version whose blobs it deletes).
    pub async fn upsert(&self, entity: &mut T) -> Result<()> {
        crate::trace::traced("LargeTable", "upsert", Some(self.raw.name()), async move {
            self.write(entity, Mode::Upsert).await
        })
        .await
    }
}

#[derive(Debug)]
enum Mode {
    Insert,
    Replace(IfMatch),
    Upsert,
}

impl Mode {
    /// Whether a failed entity write is a race to retry from the read.
    fn retries(&self, e: &Error, was_update: bool) -> bool {
        match self {
            Mode::Insert | Mode::Replace(IfMatch::ETag(_)) => false,
            Mode::Replace(IfMatch::Any) => e.is_precondition_failed(),
            Mode::Upsert => {
                (was_update && (e.is_precondition_failed() || e.is_not_found()))
                    || (!was_update && e.is_conflict())
            }
        }
    }
}
