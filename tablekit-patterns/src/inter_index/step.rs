//! The worker step: applying a put or a remove to the primary and the
//! copies of every index.

use tablekit::codec::{entity_from_json, entity_to_json};
use tablekit::{DynamicEntity, ETag, EdmValue, EntityKey, TableEntity};

use crate::eventual::{Guarded, OpResult, StepContext, MAX_REREADS};

use super::change::{
    backoff, insert_step, is_pending, is_tombstone, moved_copies, named_primary, removed_copies,
    removed_copies_text, stamp_of, Change, Current, Slot,
};
use super::index::IndexDef;
use super::{
    InterPartitionIndex, CHANGE_STAMP, CLAIM_MESSAGE, MOVED_COPIES, REMOVED, REMOVED_COPIES,
};

impl<T: TableEntity + Send + Sync + 'static> InterPartitionIndex<T> {
    pub(super) async fn apply(&self, change: Change, ctx: &StepContext) -> OpResult {
        let applied = match &change {
            Change::Put { entity, stamp } => {
                let json = serde_json::to_vec(entity)?;
                let entity: T = entity_from_json(&json)?;
                self.apply_put(&entity, *stamp, ctx).await
            }
            Change::Remove {
                partition_key,
                row_key,
                stamp,
            } => self.apply_remove(partition_key, row_key, *stamp, ctx).await,
        };
        match applied {
            // No attempt follows: what the change holds or left half done
            // is settled here, as the give-up of a stopped one does (claims
            // become copies if its primary is written, else are given back,
            // and the old copies it deleted are written back).
            Err(e) if ctx.is_last_attempt() => match self.give_up(change, ctx).await {
                Ok(()) => Err(e),
                Err(g) => Err(format!("{e}; settling what it held failed: {g}").into()),
            },
            other => other,
        }
    }

    /// Reads the primary `key` as a step.
    pub(super) async fn read_primary(
        &self,
        ctx: &StepContext,
        key: &EntityKey,
    ) -> OpResult<Current<T>> {
        Ok(match ctx.read(&self.inner.primary, key.clone()).await? {
            None => Current::Absent,
            Some((d, etag)) if is_tombstone(&d) => Current::Tombstone {
                stamp: stamp_of(&d),
                removed: removed_copies(&d),
                etag,
            },
            Some((d, etag)) => Current::Live {
                stamp: stamp_of(&d),
                moved: moved_copies(&d),
                entity: self.decode_primary(d)?,
                etag,
            },
        })
    }

    /// Writes `entity` over the primary as read (`current`): replace under
    /// its ETag, or insert if there was none. `false`: someone wrote it
    /// meanwhile, read again.
    async fn write_primary(
        &self,
        ctx: &StepContext,
        entity: &DynamicEntity,
        current: &Current<T>,
    ) -> OpResult<bool> {
        if let Some(etag) = current.etag() {
            let outcome = ctx
                .replace_if_unchanged(&self.inner.primary, entity, etag)
                .await?;
            return Ok(matches!(outcome, Guarded::Done(_)));
        }
        let written = insert_step(ctx, &self.inner.primary, entity, "insert").await?;
        Ok(written.is_some())
    }

    async fn apply_put(&self, entity: &T, stamp: i64, ctx: &StepContext) -> OpResult {
        let (primary, copies) = self.stored(entity, stamp)?;
        let key = EntityKey::new(&primary.partition_key, &primary.row_key);
        let own = primary.row_key.as_str();
        for attempt in 1..=MAX_REREADS {
            if attempt > 1 && self.inner.pauses {
                tokio::time::sleep(backoff(attempt)).await;
            }
            let current = self.read_primary(ctx, &key).await?;
            if let Some(stored) = current.stamp().filter(|s| *s >= stamp) {
                let resumed = match &current {
                    Current::Live { entity: c, .. } if stored == stamp => {
                        entity_to_json(c)? == entity_to_json(entity)?
                    }
                    _ => false,
                };
                if resumed {
                    // An earlier attempt of this message wrote the primary
                    // (after claiming its unique values): the copies it
                    // moved off, which the primary names, may be left.
                    if let Current::Live { moved, .. } = &current {
                        self.delete_named(ctx, moved, own, stamp).await?;
                    }
                    let slots = self.claim_all(ctx, &copies, stamp, false).await?;
                    let etags = self.write_copies(ctx, &copies, &slots).await?;
                    return self.recheck(ctx, &key, &copies, &etags, stamp).await;
                }
                // A newer change (or, on a tie, the one stored) wins; undo
                // what an earlier attempt of this one may have left (a claim,
                // or a copy written after the newer change's).
                return self.undo_leftovers(ctx, &copies, stamp, &current).await;
            }
            // Claim the unique values first: a refused change writes nothing.
            let slots = self.claim_all(ctx, &copies, stamp, true).await?;
            // What the put that wrote the primary moved off and may not
            // have deleted yet (it stopped after its primary write, to be
            // retried, and finds this change's primary then): values the
            // primary no longer shows, deleted now.
            if let Current::Live { moved, .. } = &current {
                self.delete_named(ctx, moved, own, stamp).await?;
            }
            // The copies under the values it moves off are deleted after the
            // primary write, which names them: until the primary has moved
            // off a unique value, its copy keeps it from another entity, and
            // an attempt that stops in between leaves the next one (or the
            // give-up) to delete them.
            let moved: Vec<(String, EntityKey)> = self
                .old_copies(&current, &copies)
                .into_iter()
                .map(|(i, key)| (self.inner.indexes[i].name.clone(), key))
                .collect();
            let naming;
            let written = if moved.is_empty() {
                &primary
            } else {
                naming = primary
                    .clone()
                    .with(MOVED_COPIES, removed_copies_text(&moved));
                &naming
            };
            if !self.write_primary(ctx, written, &current).await? {
                continue;
            }
            // Before the copies, whose write can fail. A change older than
            // this one that read the primary before it may write a copy
            // under an old value after this delete: it reads the primary
            // again after its copies, finds this change, and takes it back.
            self.delete_named(ctx, &moved, own, stamp).await?;
            let etags = self.write_copies(ctx, &copies, &slots).await?;
            return self.recheck(ctx, &key, &copies, &etags, stamp).await;
        }
        Err(format!("the primary {key} kept changing; will retry later").into())
    }

    /// Brings in line what attempts of the change `stamp` left under its
    /// values, the primary being `current`: each copy it wrote is rewritten
    /// from the primary if that shows the value, deleted otherwise; and the
    /// change is taken off its claims.
    ///
    /// If `current` is older than the change (a give-up, which reads the
    /// primary once, at its start), another delivery of the change (the
    /// same message sent twice) may still apply it: a copy with
    /// the change's stamp is then settled only if this message restamped
    /// it. One that names no message was written after a primary write of
    /// the change, so another delivery has written the primary since
    /// `current` was read, and the copy is that primary's; one that names
    /// another message is that delivery's to give back.
    async fn undo_leftovers(
        &self,
        ctx: &StepContext,
        copies: &[DynamicEntity],
        stamp: i64,
        current: &Current<T>,
    ) -> OpResult {
        let older = current.stamp().is_none_or(|s| s < stamp);
        for (i, (def, copy)) in self.inner.indexes.iter().zip(copies).enumerate() {
            let copy_key = EntityKey::new(&copy.partition_key, &copy.row_key);
            if let Some((found, etag)) = ctx.read(&self.table_of(def), copy_key).await? {
                let restamped_here = matches!(
                    found.get(CLAIM_MESSAGE),
                    Some(EdmValue::String(m)) if m == ctx.message_id()
                );
                if named_primary(&found) == named_primary(copy)
                    && stamp_of(&found) == stamp
                    && !is_pending(&found)
                    && (!older || restamped_here)
                {
                    self.settle_copy(ctx, i, copy, &etag, current).await?;
                }
            }
        }
        self.give_up_claims(ctx, copies, stamp).await
    }

    /// What a change gives up when its last attempt stopped without
    /// finishing and it is poisoned (see [`WorkerBuilder::on_give_up`](crate::eventual::WorkerBuilder::on_give_up)):
    /// its claims are given up, and the copies it wrote are brought in line
    /// with the primary as stored, as for a stale change (those another
    /// delivery of the change wrote, which may have written the primary
    /// since it was read here, are left to it: see
    /// [`undo_leftovers`](Self::undo_leftovers)). If it had written
    /// the primary, the primary keeps its values: the copies it names as
    /// moved off are deleted, each claim becomes its copy, and the copies
    /// of the non-unique indexes are written from it, so the primary is not
    /// left without them (then the primary is read again, as after a put's
    /// copies, and they are brought in line if a newer change got in
    /// meanwhile). If it had not, the copies of the primary as stored
    /// under the values the change moves off (all of them, for a remove),
    /// which it deletes before its primary write, are written back
    /// ([`restore_copies`](Self::restore_copies)): the primary keeps its
    /// values, so it must keep their copies. A remove whose tombstone is
    /// written deletes again the copies its tombstone names, as a retry
    /// would: an older change may have written one after its first delete.
    pub(super) async fn give_up(&self, change: Change, ctx: &StepContext) -> OpResult {
        let (entity, stamp) = match change {
            Change::Put { entity, stamp } => (entity, stamp),
            Change::Remove {
                partition_key,
                row_key,
                stamp,
            } => {
                let key = EntityKey::new(self.primary_partition_key(&partition_key), row_key);
                let current = self.read_primary(ctx, &key).await?;
                if let Current::Tombstone {
                    stamp: s, removed, ..
                } = &current
                {
                    if *s == stamp {
                        // Its tombstone written, and the attempt stopped
                        // after it: its second delete, as a retry makes it
                        // (an older change may have written a copy late).
                        return self.delete_named(ctx, removed, &key.row_key, stamp).await;
                    }
                }
                // Its tombstone not written: the copies it deleted first.
                return self
                    .restore_copies_from(ctx, &key, &[], stamp, current)
                    .await;
            }
        };
        let json = serde_json::to_vec(&entity)?;
        let entity: T = entity_from_json(&json)?;
        let (primary, copies) = self.stored(&entity, stamp)?;
        let key = EntityKey::new(&primary.partition_key, &primary.row_key);
        let current = self.read_primary(ctx, &key).await?;
        if let Current::Live {
            entity,
            stamp: s,
            moved,
            ..
        } = &current
        {
            if *s == stamp {
                // Its primary is written: its copies are the primary's, and
                // the ones it moved off go.
                self.delete_named(ctx, moved, &key.row_key, stamp).await?;
                let (_, written) = self.stored(entity, stamp)?;
                let mut etags = Vec::with_capacity(written.len());
                for (def, fresh) in self.inner.indexes.iter().zip(&written) {
                    etags.push(if def.unique {
                        None
                    } else {
                        Some(ctx.insert_or_replace(&self.table_of(def), fresh).await?)
                    });
                }
                if etags.iter().any(Option::is_some) {
                    // As after a put's copies: a newer change may have
                    // got in since the primary was read.
                    self.recheck(ctx, &key, &written, &etags, stamp).await?;
                }
                return self.give_up_claims(ctx, &written, stamp).await;
            }
        }
        self.undo_leftovers(ctx, &copies, stamp, &current).await?;
        // Its primary not written: the copies of the primary as stored
        // under the values it moves off, which it deletes first.
        self.restore_copies(ctx, &key, &copies, stamp).await
    }

    /// Writes back the copies of the primary `key` that a change `stamp`
    /// which did not write its own primary may have deleted before its
    /// primary write (it deletes the copies under the values it moves off
    /// first). The primary is read first (the write that failed may have
    /// gone through): nothing if it is not live, or is this change's or a
    /// newer one's. Else each of its copies whose RowKey differs from the
    /// change's copy in `keep` (all, for a remove: `keep` empty) is
    /// inserted from it. One present is left: this entity's (put back, or
    /// written by another change of it), or another entity's that took the
    /// value meanwhile. Then, if any was written, the primary is read again:
    /// if another change wrote it meanwhile, each copy written back is
    /// brought in line with it, under the ETag of its insert.
    async fn restore_copies(
        &self,
        ctx: &StepContext,
        key: &EntityKey,
        keep: &[DynamicEntity],
        stamp: i64,
    ) -> OpResult {
        let current = self.read_primary(ctx, key).await?;
        self.restore_copies_from(ctx, key, keep, stamp, current)
            .await
    }

    /// [`restore_copies`](Self::restore_copies), the primary as just read
    /// being `current`.
    async fn restore_copies_from(
        &self,
        ctx: &StepContext,
        key: &EntityKey,
        keep: &[DynamicEntity],
        stamp: i64,
        current: Current<T>,
    ) -> OpResult {
        let Current::Live {
            entity,
            stamp: shown,
            etag,
            ..
        } = &current
        else {
            return Ok(());
        };
        if *shown >= stamp {
            return Ok(());
        }
        let (_, copies) = self.stored(entity, *shown)?;
        let mut written = Vec::new();
        for (i, (def, copy)) in self.inner.indexes.iter().zip(copies).enumerate() {
            if keep.get(i).is_some_and(|k| k.row_key == copy.row_key) {
                continue;
            }
            let table = self.table_of(def);
            if let Some(etag) = insert_step(ctx, &table, &copy, "restore").await? {
                written.push((i, copy, etag));
            }
        }
        if written.is_empty() {
            return Ok(());
        }
        let now = self.read_primary(ctx, key).await?;
        if now.etag() == Some(etag) {
            return Ok(());
        }
        for (i, copy, etag) in &written {
            self.settle_copy(ctx, *i, copy, etag, &now).await?;
        }
        Ok(())
    }

    /// Writes each copy as its slot allows; the ETag of each one written.
    async fn write_copies(
        &self,
        ctx: &StepContext,
        copies: &[DynamicEntity],
        slots: &[Slot],
    ) -> OpResult<Vec<Option<ETag>>> {
        let mut etags = Vec::with_capacity(copies.len());
        for ((def, copy), slot) in self.inner.indexes.iter().zip(copies).zip(slots) {
            let table = self.table_of(def);
            etags.push(match slot {
                Slot::Own => Some(ctx.insert_or_replace(&table, copy).await?),
                Slot::Held { etag, .. } => {
                    self.replace_own_copy(ctx, def, copy, Some(etag)).await?
                }
                Slot::Newer => self.write_if_let_go(ctx, def, copy).await?,
            });
        }
        Ok(etags)
    }

    /// Writes this primary's unique copy `copy`, which a newer change of
    /// this primary held (restamped) when this change claimed it, if that
    /// change has let it go since (refused, it put the copy back with an
    /// older stamp, from the primary as it read it then, maybe before this
    /// change's primary write): the primary now shows the value.
    async fn write_if_let_go(
        &self,
        ctx: &StepContext,
        def: &IndexDef<T>,
        copy: &DynamicEntity,
    ) -> OpResult<Option<ETag>> {
        let table = self.table_of(def);
        let key = EntityKey::new(&copy.partition_key, &copy.row_key);
        match ctx.read(&table, key).await? {
            Some((found, etag))
                if named_primary(&found) == named_primary(copy)
                    && !is_pending(&found)
                    && stamp_of(&found) < stamp_of(copy) =>
            {
                self.replace_own_copy(ctx, def, copy, Some(&etag)).await
            }
            // Deleted by that change: put back while the primary is this one's.
            None => self.replace_own_copy(ctx, def, copy, None).await,
            _ => Ok(None),
        }
    }

    /// Replaces this primary's unique copy `copy` (its ETag as last seen, if any:
    /// `etag`) once the primary is written. If another change of this
    /// primary rewrote it meanwhile with a stamp no newer (a refused one
    /// putting back what it found), it is read again and replaced all the
    /// same. A newer change's copy is left (`None`); a newer change's claim
    /// still in flight fails the attempt, to retry later. `None` also if the
    /// copy is another primary's. If it is gone while the primary is still
    /// this change's, it is inserted again: the primary shows the value, so
    /// its copy must hold it. (An older change can have deleted it when
    /// another delivery of this change, refused, put back the copy it had
    /// restamped, with its older stamp.) Gone because a newer change moved
    /// off the value: `None`.
    async fn replace_own_copy(
        &self,
        ctx: &StepContext,
        def: &IndexDef<T>,
        copy: &DynamicEntity,
        etag: Option<&ETag>,
    ) -> OpResult<Option<ETag>> {
        let table = &self.table_of(def);
        let key = EntityKey::new(&copy.partition_key, &copy.row_key);
        let mut etag = etag.cloned();
        for _ in 0..MAX_REREADS {
            if let Some(e) = &etag {
                if let Guarded::Done(written) = ctx.replace_if_unchanged(table, copy, e).await? {
                    return Ok(written);
                }
            }
            match ctx.read(table, key.clone()).await? {
                Some((found, _)) if named_primary(&found) != named_primary(copy) => {
                    return Ok(None)
                }
                // A newer change's copy, or its claim: this change's
                // primary is written, so it leaves the value to that one
                // (which turns a claim it gives up into this primary's copy).
                Some((found, _)) if stamp_of(&found) > stamp_of(copy) => return Ok(None),
                Some((_, fresh)) => etag = Some(fresh),
                None => {
                    let primary = self.primary_key_of(def, copy);
                    let current = self.read_primary(ctx, &primary).await?;
                    if current.stamp() != Some(stamp_of(copy)) {
                        return Ok(None);
                    }
                    // Taken meanwhile (409): read again.
                    if let Some(etag) = insert_step(ctx, table, copy, "insert").await? {
                        return Ok(Some(etag));
                    }
                }
            }
        }
        Err(format!("the index copy {key} kept changing; will retry later").into())
    }

    /// Reads the primary again after the copies were written: if a newer
    /// change replaced it meanwhile, the copies just written may be stale.
    async fn recheck(
        &self,
        ctx: &StepContext,
        key: &EntityKey,
        copies: &[DynamicEntity],
        etags: &[Option<ETag>],
        stamp: i64,
    ) -> OpResult {
        let current = self.read_primary(ctx, key).await?;
        if let Current::Live { stamp: s, .. } = &current {
            if *s == stamp {
                return Ok(());
            }
        }
        for (i, (copy, etag)) in copies.iter().zip(etags).enumerate() {
            if let Some(etag) = etag {
                self.settle_copy(ctx, i, copy, etag, &current).await?;
            }
        }
        Ok(())
    }

    /// Deletes each of `copies` (index name and key) that is still the copy
    /// of the primary `own` written by a change older than `stamp`. An index
    /// this version does not know is skipped.
    async fn delete_named(
        &self,
        ctx: &StepContext,
        copies: &[(String, EntityKey)],
        own: &str,
        stamp: i64,
    ) -> OpResult {
        for (name, key) in copies {
            let Some(def) = self.inner.indexes.iter().find(|d| &d.name == name) else {
                continue;
            };
            self.delete_older_copy(ctx, def, key.clone(), own, stamp)
                .await?;
        }
        Ok(())
    }

    async fn apply_remove(
        &self,
        partition_key: &str,
        row_key: &str,
        stamp: i64,
        ctx: &StepContext,
    ) -> OpResult {
        let key = EntityKey::new(self.primary_partition_key(partition_key), row_key);
        key.validate()?;
        for attempt in 1..=MAX_REREADS {
            if attempt > 1 && self.inner.pauses {
                tokio::time::sleep(backoff(attempt)).await;
            }
            let current = self.read_primary(ctx, &key).await?;
            if let Current::Tombstone {
                stamp: s, removed, ..
            } = &current
            {
                if *s == stamp {
                    // An earlier attempt of this remove wrote its tombstone
                    // and stopped: its second delete, again (an older
                    // change resumed late may have written a copy back).
                    return self.delete_named(ctx, removed, row_key, stamp).await;
                }
            }
            if current.stamp().is_some_and(|s| s >= stamp) {
                // A newer change, or this one's earlier attempt (a tie: the
                // change stored wins).
                return Ok(());
            }
            let old_copies: Vec<(String, EntityKey)> = match &current {
                Current::Live { entity: old, .. } => {
                    let (_, old_copies) = self.stored(old, 0)?;
                    self.inner
                        .indexes
                        .iter()
                        .zip(old_copies)
                        .map(|(def, c)| {
                            (def.name.clone(), EntityKey::new(c.partition_key, c.row_key))
                        })
                        .collect()
                }
                _ => Vec::new(),
            };
            let tombstone = DynamicEntity::new(&key.partition_key, &key.row_key)
                .with(CHANGE_STAMP, stamp)
                .with(REMOVED, true)
                .with(REMOVED_COPIES, removed_copies_text(&old_copies));
            let written = async {
                if let Current::Live { moved, .. } = &current {
                    // As for a put: what the put before moved off.
                    self.delete_named(ctx, moved, row_key, stamp).await?;
                }
                self.delete_named(ctx, &old_copies, row_key, stamp).await?;
                self.write_primary(ctx, &tombstone, &current).await
            };
            if !written.await? {
                continue;
            }
            // As for a put: an older change's late copy write.
            return self.delete_named(ctx, &old_copies, row_key, stamp).await;
        }
        Err(format!("the primary {key} kept changing; will retry later").into())
    }
}
