//! The change protocol: the message of a change and its stamp, what the
//! worker reads back, and how a unique value is claimed, released and
//! settled.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tablekit::{DynamicEntity, ETag, EdmValue, EntityKey, Error, TableClient, TableEntity};

use crate::eventual::{Guarded, OpError, OpResult, StepContext, MAX_REREADS};

use super::index::IndexDef;
use super::{
    InterPartitionIndex, CHANGE_STAMP, CLAIM_MESSAGE, CLAIM_WAITING, PENDING, PRIMARY_ROW_KEY,
    REMOVED,
};

/// The message of a change, as it travels. The stamp is required: a message
/// without one does not read, and the worker fails it (then poisons it).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Change {
    Put {
        entity: serde_json::Value,
        stamp: i64,
    },
    Remove {
        partition_key: String,
        row_key: String,
        stamp: i64,
    },
}

/// The next change stamp after `last` at clock reading `now`: `now`, or
/// `last + 1` when the clock has not moved on (or went back).
pub(super) fn next_stamp(last: i64, now: i64) -> i64 {
    now.max(last.saturating_add(1))
}

/// The system clock in microseconds since the Unix epoch (0 before it).
pub(super) fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The pause before attempt `attempt` (2 or more) of a guarded primary
/// write: 5 ms doubling to at most 320 ms, each with up to as much again of
/// jitter, so two workers that collided do not collide again in lockstep.
pub(super) fn backoff(attempt: usize) -> Duration {
    let base = 5u64 << attempt.saturating_sub(2).min(6);
    Duration::from_millis(base + fastrand::u64(0..=base))
}

/// The stamp stored in `d` (0 if it has none: not written by this module).
pub(super) fn stamp_of(d: &DynamicEntity) -> i64 {
    match d.get(CHANGE_STAMP) {
        Some(EdmValue::Int64(s)) => *s,
        Some(EdmValue::Int32(s)) => i64::from(*s),
        _ => 0,
    }
}

pub(super) fn is_tombstone(d: &DynamicEntity) -> bool {
    matches!(d.get(REMOVED), Some(EdmValue::Boolean(true)))
}

/// The copies a tombstone names ([`REMOVED_COPIES`](super::REMOVED_COPIES)):
/// none if it names none, or what it holds does not parse (a tombstone of a
/// version before the property).
pub(super) fn removed_copies(d: &DynamicEntity) -> Vec<(String, EntityKey)> {
    named_copies(d, super::REMOVED_COPIES)
}

/// The copies a primary names as moved off ([`MOVED_COPIES`](super::MOVED_COPIES)):
/// none if it names none (a put that moved off no value, or a version
/// before the property), or what it holds does not parse.
pub(super) fn moved_copies(d: &DynamicEntity) -> Vec<(String, EntityKey)> {
    named_copies(d, super::MOVED_COPIES)
}

fn named_copies(d: &DynamicEntity, property: &str) -> Vec<(String, EntityKey)> {
    let Some(EdmValue::String(text)) = d.get(property) else {
        return Vec::new();
    };
    serde_json::from_str::<Vec<(String, String, String)>>(text)
        .map(|all| {
            all.into_iter()
                .map(|(name, pk, rk)| (name, EntityKey::new(pk, rk)))
                .collect()
        })
        .unwrap_or_default()
}

/// The text of [`REMOVED_COPIES`](super::REMOVED_COPIES) (or
/// [`MOVED_COPIES`](super::MOVED_COPIES)) for these copies.
pub(super) fn removed_copies_text(copies: &[(String, EntityKey)]) -> String {
    let all: Vec<(&str, &str, &str)> = copies
        .iter()
        .map(|(name, k)| (name.as_str(), k.partition_key.as_str(), k.row_key.as_str()))
        .collect();
    serde_json::to_string(&all).unwrap_or_else(|_| "[]".to_owned())
}

/// Inserts `entity` into `table`, then marks the step `"{verb} {table}"`:
/// the ETag it was written with, or `None` if one was there (409).
pub(super) async fn insert_step(
    ctx: &StepContext,
    table: &TableClient<DynamicEntity>,
    entity: &DynamicEntity,
    verb: &str,
) -> OpResult<Option<ETag>> {
    let inserted = match table.insert(entity).await {
        Ok(w) => Some(w.etag().clone()),
        Err(e) if e.is_conflict() => None,
        Err(e) => return Err(e.into()),
    };
    ctx.step(&format!("{verb} {}", table.name())).await?;
    Ok(inserted)
}

pub(super) fn is_pending(d: &DynamicEntity) -> bool {
    matches!(d.get(PENDING), Some(EdmValue::Boolean(true)))
}

/// The primary RowKey a copy names.
pub(super) fn named_primary(d: &DynamicEntity) -> Option<&str> {
    match d.get(PRIMARY_ROW_KEY) {
        Some(EdmValue::String(rk)) => Some(rk),
        _ => None,
    }
}

/// A change that holds a claim, or waits on it: its stamp and the id of the
/// queue message whose attempt took it (`None` for a claim from before
/// claims named their message: any attempt of that change is it).
#[derive(Debug, Clone, PartialEq)]
struct Owner {
    stamp: i64,
    message: Option<String>,
}

impl Owner {
    fn new(stamp: i64, message: &str) -> Owner {
        Owner {
            stamp,
            message: Some(message.to_owned()),
        }
    }

    /// Whether this is an attempt of the message `message` of the change
    /// `stamp` (a later attempt of a message comes only once the earlier
    /// one's hold has lapsed, so it stands for all of them). Another
    /// delivery of the same change (the same message sent twice) is another
    /// owner: it may still be in flight.
    fn is(&self, stamp: i64, message: &str) -> bool {
        self.stamp == stamp && self.message.as_deref().is_none_or(|m| m == message)
    }
}

/// The owners of the claim `d`, oldest first: those waiting
/// ([`CLAIM_WAITING`]), then the one holding it (its stamp and
/// [`CLAIM_MESSAGE`]). Stamps never decrease along the list.
fn owners(d: &DynamicEntity) -> Vec<Owner> {
    let mut list = Vec::new();
    if let Some(EdmValue::String(waiting)) = d.get(CLAIM_WAITING) {
        for entry in waiting.split(';').filter(|e| !e.is_empty()) {
            let (stamp, message) = match entry.split_once(' ') {
                Some((s, m)) => (s, Some(m.to_owned())),
                None => (entry, None),
            };
            if let Ok(stamp) = stamp.parse() {
                list.push(Owner { stamp, message });
            }
        }
    }
    let message = match d.get(CLAIM_MESSAGE) {
        Some(EdmValue::String(m)) => Some(m.clone()),
        _ => None,
    };
    list.push(Owner {
        stamp: stamp_of(d),
        message,
    });
    list
}

/// `copy` as a claim held by the last of `owners` (not empty), the others
/// waiting.
fn claim_of(copy: &DynamicEntity, owners: &[Owner]) -> DynamicEntity {
    let (holder, waiting) = owners.split_last().expect("a claim has an owner");
    let mut claim = copy.clone().with(PENDING, true);
    claim.set(CHANGE_STAMP, holder.stamp);
    claim.properties.remove(CLAIM_MESSAGE);
    claim.properties.remove(CLAIM_WAITING);
    if let Some(m) = &holder.message {
        claim.set(CLAIM_MESSAGE, m.clone());
    }
    if !waiting.is_empty() {
        let list: Vec<String> = waiting
            .iter()
            .map(|o| match &o.message {
                Some(m) => format!("{} {m}", o.stamp),
                None => o.stamp.to_string(),
            })
            .collect();
        claim.set(CLAIM_WAITING, list.join(";"));
    }
    claim
}

/// A primary as a worker read it.
pub(super) enum Current<T> {
    Absent,
    Tombstone {
        stamp: i64,
        etag: ETag,
        /// The copies its remove took off ([`REMOVED_COPIES`](super::REMOVED_COPIES)):
        /// index name and key.
        removed: Vec<(String, EntityKey)>,
    },
    Live {
        entity: T,
        stamp: i64,
        etag: ETag,
        /// The copies the put that wrote it moved off ([`MOVED_COPIES`](super::MOVED_COPIES)).
        moved: Vec<(String, EntityKey)>,
    },
}

impl<T> Current<T> {
    pub(super) fn stamp(&self) -> Option<i64> {
        match self {
            Current::Absent => None,
            Current::Tombstone { stamp, .. } | Current::Live { stamp, .. } => Some(*stamp),
        }
    }

    pub(super) fn etag(&self) -> Option<&ETag> {
        match self {
            Current::Absent => None,
            Current::Tombstone { etag, .. } | Current::Live { etag, .. } => Some(etag),
        }
    }
}

/// How a change may write one copy once its primary is written.
pub(super) enum Slot {
    /// A non-unique index: its RowKey holds the primary's, so no other
    /// entity's copy can be there: insert-or-replace.
    Own,
    /// A unique index whose copy this change holds for its primary (a
    /// claim, or its copy from before, stamped by this change), written
    /// with this ETag: replace under it.
    Held {
        etag: ETag,
        /// What to do with the copy if the change is refused.
        release: Release,
    },
    /// A unique index whose copy a newer change of this primary wrote (its
    /// stamp is higher): never written over with an older stamp, which
    /// would let an older change delete it.
    Newer,
}

/// How a refused change gives back a copy it claimed.
pub(super) enum Release {
    /// A claim this change holds or waits on: given up with the others
    /// ([`give_up_claims`](InterPartitionIndex::give_up_claims)).
    Claim,
    /// This primary's copy from before (as found), stamped by this change:
    /// rewritten from the primary as it is then if that shows the value
    /// (another change of this primary may have been applied meanwhile),
    /// else put back as found.
    Restore(DynamicEntity),
    /// Restamped by an earlier attempt of this change (what it was is not
    /// known): rewrite it from the primary as read, or delete it if that
    /// does not show the value.
    Settle,
    /// Not this change's to give back.
    Leave,
}

/// A claim that found the value taken: the RowKey of the primary holding it.
pub(super) struct Taken(String);

/// A newer change of this entity is claiming the copy `key`: if it goes
/// through, this change is stale; if it is refused, it gives the claim back.
/// Either way, later: the attempt fails and the message is retried.
pub(super) fn newer_claim(key: &EntityKey) -> OpError {
    format!(
        "the index copy {key} is being claimed by a newer change of this entity; will retry later"
    )
    .into()
}

impl<T: TableEntity + Send + Sync + 'static> InterPartitionIndex<T> {
    /// Claims the copy `copy` of the unique index `def` (as `first_read`
    /// found it) for its primary and this change: an insert (as a claim if
    /// `pending`) if there is none. If this primary's copy is there under an
    /// older stamp and `pending`, the same copy stamped `stamp` (so an older
    /// change racing this one, which deletes only copies older than itself,
    /// leaves it); if a claim of an older change of this primary (or of
    /// another delivery of this one) is there, the claim taken over, that
    /// change waiting on it; if a newer change's claim is there, an error
    /// (retried later). [`Taken`] if another primary holds it.
    pub(super) async fn claim(
        &self,
        ctx: &StepContext,
        def: &IndexDef<T>,
        copy: &DynamicEntity,
        stamp: i64,
        pending: bool,
        first_read: Option<(DynamicEntity, ETag)>,
    ) -> OpResult<std::result::Result<Slot, Taken>> {
        let table = self.table_of(def);
        let key = EntityKey::new(&copy.partition_key, &copy.row_key);
        let own = named_primary(copy).unwrap_or_default();
        let message = ctx.message_id();
        let mut first_read = Some(first_read);
        for _ in 0..MAX_REREADS {
            let read = match first_read.take() {
                Some(read) => read,
                None => ctx.read(&table, key.clone()).await?,
            };
            match read {
                Some((found, _)) if named_primary(&found) != Some(own) => {
                    let holder = named_primary(&found).unwrap_or_default().to_owned();
                    return Ok(Err(Taken(holder)));
                }
                Some((found, etag)) if is_pending(&found) => {
                    // A claim of this primary: held by this change (an
                    // earlier attempt), by an older one or another delivery
                    // of this one (taken over: it waits on the claim, which
                    // is given back to it if this change gives up), or by a
                    // newer one (this one waits until that one is done).
                    let mut list = owners(&found);
                    if list.last().is_some_and(|o| o.stamp > stamp) {
                        if !pending {
                            // This change's primary is written: it finishes,
                            // and leaves the claim to the newer change, which
                            // turns it into this primary's copy if it gives up.
                            return Ok(Ok(Slot::Newer));
                        }
                        return Err(newer_claim(&key));
                    }
                    if !pending {
                        // The primary written: the claim to replace.
                        return Ok(Ok(Slot::Held {
                            etag,
                            release: Release::Leave,
                        }));
                    }
                    if list.last().is_some_and(|o| o.is(stamp, message)) {
                        return Ok(Ok(Slot::Held {
                            etag,
                            release: Release::Claim,
                        }));
                    }
                    list.retain(|o| !o.is(stamp, message));
                    list.push(Owner::new(stamp, message));
                    let claim = claim_of(copy, &list);
                    match ctx.replace_if_unchanged(&table, &claim, &etag).await? {
                        Guarded::Done(Some(etag)) => {
                            return Ok(Ok(Slot::Held {
                                etag,
                                release: Release::Claim,
                            }))
                        }
                        Guarded::Done(None) | Guarded::Changed | Guarded::Gone => continue,
                    }
                }
                Some((found, _)) if stamp_of(&found) > stamp => return Ok(Ok(Slot::Newer)),
                Some((_, etag)) if !pending => {
                    // The primary written: the copy to replace.
                    return Ok(Ok(Slot::Held {
                        etag,
                        release: Release::Leave,
                    }));
                }
                Some((found, etag)) if stamp_of(&found) == stamp => {
                    // This primary's copy, restamped by an earlier attempt
                    // of this message, or by another delivery of this
                    // change, which may still be in flight: that one's to
                    // give back, not this one's (put back with an older
                    // stamp, an older change would delete it under the
                    // other delivery's feet).
                    let release = match found.get(CLAIM_MESSAGE) {
                        Some(EdmValue::String(m)) if m != message => Release::Leave,
                        _ => Release::Settle,
                    };
                    return Ok(Ok(Slot::Held { etag, release }));
                }
                Some((found, etag)) => {
                    let mut stamped = found.clone();
                    stamped.set(CHANGE_STAMP, stamp);
                    stamped.set(CLAIM_MESSAGE, message.to_owned());
                    match ctx.replace_if_unchanged(&table, &stamped, &etag).await? {
                        Guarded::Done(Some(etag)) => {
                            return Ok(Ok(Slot::Held {
                                etag,
                                release: Release::Restore(found),
                            }))
                        }
                        Guarded::Done(None) | Guarded::Changed | Guarded::Gone => continue,
                    }
                }
                None => {
                    let claim = if pending {
                        claim_of(copy, &[Owner::new(stamp, message)])
                    } else {
                        copy.clone()
                    };
                    if let Some(etag) = insert_step(ctx, &table, &claim, "claim").await? {
                        let release = if pending {
                            Release::Claim
                        } else {
                            Release::Leave
                        };
                        return Ok(Ok(Slot::Held { etag, release }));
                    }
                }
            }
        }
        Err(format!("the index copy {key} kept changing; will retry later").into())
    }

    /// Claims every unique value of `copies` for their primary. First every
    /// unique copy is read: if one is held by another primary, the change is
    /// refused before any write (what an earlier attempt of it left is
    /// given back). Then each value is claimed in index order; one taken
    /// meanwhile by another primary (a race) refuses the change too, after
    /// the claims it made are given back. A refusal is a
    /// [`Error::constraint`] and a `warn` event naming the index, the value
    /// and both primaries.
    pub(super) async fn claim_all(
        &self,
        ctx: &StepContext,
        copies: &[DynamicEntity],
        stamp: i64,
        pending: bool,
    ) -> OpResult<Vec<Slot>> {
        let mut reads = Vec::with_capacity(copies.len());
        let mut taken = None;
        for (i, (def, copy)) in self.inner.indexes.iter().zip(copies).enumerate() {
            if !def.unique {
                reads.push(None);
                continue;
            }
            let key = EntityKey::new(&copy.partition_key, &copy.row_key);
            let found = ctx.read(&self.table_of(def), key).await?;
            if let Some((f, _)) = &found {
                if taken.is_none() && named_primary(f) != named_primary(copy) {
                    taken = Some((i, named_primary(f).unwrap_or_default().to_owned()));
                }
            }
            reads.push(Some(found));
        }
        // A copy an earlier attempt of this change restamped under one of
        // its values: given back with a refusal (its claims: below).
        let mut leftovers: Vec<Slot> = reads
            .iter()
            .zip(copies)
            .map(|(read, copy)| match read {
                Some(Some((f, etag)))
                    if named_primary(f) == named_primary(copy)
                        && stamp_of(f) == stamp
                        && !is_pending(f) =>
                {
                    Slot::Held {
                        etag: etag.clone(),
                        release: Release::Settle,
                    }
                }
                _ => Slot::Own,
            })
            .collect();
        if let Some((i, holder)) = taken {
            if pending {
                self.release(ctx, copies, &leftovers).await?;
                self.give_up_claims(ctx, copies, stamp).await?;
            }
            return Err(self.refusal(&self.inner.indexes[i], &copies[i], &holder));
        }
        let mut slots = Vec::with_capacity(copies.len());
        for (i, ((def, copy), read)) in self.inner.indexes.iter().zip(copies).zip(reads).enumerate()
        {
            let Some(read) = read else {
                slots.push(Slot::Own);
                continue;
            };
            let error = match self.claim(ctx, def, copy, stamp, pending, read).await {
                Ok(Ok(slot)) => {
                    slots.push(slot);
                    continue;
                }
                Ok(Err(Taken(holder))) => {
                    // Besides what this attempt restamped, what an earlier
                    // attempt restamped under the values not reached yet.
                    slots.push(Slot::Own);
                    if pending {
                        slots.extend(leftovers.drain(i + 1..));
                    }
                    self.refusal(def, copy, &holder)
                }
                // Retried later.
                Err(e) => e,
            };
            // Refused, or retried later: a change that gives up keeps no
            // claim, and no copy it restamped.
            self.release(ctx, copies, &slots).await?;
            if pending {
                self.give_up_claims(ctx, copies, stamp).await?;
            }
            return Err(error);
        }
        Ok(slots)
    }

    /// The primary key the copy `copy` of `def` names.
    pub(super) fn primary_key_of(&self, def: &IndexDef<T>, copy: &DynamicEntity) -> EntityKey {
        EntityKey::new(
            self.primary_partition_key(
                copy.partition_key
                    .strip_prefix(&def.prefix)
                    .unwrap_or_default(),
            ),
            named_primary(copy).unwrap_or_default(),
        )
    }

    /// Gives back the copies a refused change restamped (`slots`, in index
    /// order): each is rewritten from the primary as it is now if that
    /// shows the value (another delivery of this change, or another change
    /// of this primary, may have been applied meanwhile), else put back as
    /// found (or deleted, if what it was is not known), under the ETag this
    /// change holds. Claims are left to
    /// [`give_up_claims`](Self::give_up_claims).
    async fn release(
        &self,
        ctx: &StepContext,
        copies: &[DynamicEntity],
        slots: &[Slot],
    ) -> OpResult {
        for (i, ((def, copy), slot)) in self.inner.indexes.iter().zip(copies).zip(slots).enumerate()
        {
            let Slot::Held { etag, release } = slot else {
                continue;
            };
            if matches!(release, Release::Claim | Release::Leave) {
                continue;
            }
            let table = self.table_of(def);
            let key = EntityKey::new(&copy.partition_key, &copy.row_key);
            let primary = self.primary_key_of(def, copy);
            let mut etag = etag.clone();
            let mut read = self.read_primary(ctx, &primary).await?;
            // Again while the primary changes under it: an older change of
            // this primary that found the copy restamped by this one left
            // it to this one, and may have written the primary since.
            for _ in 0..MAX_REREADS {
                let fresh = match &read {
                    Current::Live { entity, stamp, .. } => {
                        Some(self.stored(entity, *stamp)?.1.swap_remove(i))
                    }
                    _ => None,
                };
                let written = match (fresh, release) {
                    (Some(fresh), _) if fresh.row_key == copy.row_key => {
                        ctx.replace_if_unchanged(&table, &fresh, &etag).await?
                    }
                    (_, Release::Restore(found)) => {
                        ctx.replace_if_unchanged(&table, found, &etag).await?
                    }
                    _ => {
                        ctx.delete_if_unchanged(&table, key.clone(), &etag).await?;
                        break;
                    }
                };
                let Guarded::Done(Some(now)) = written else {
                    break;
                };
                let again = self.read_primary(ctx, &primary).await?;
                if again.etag() == read.etag() {
                    break;
                }
                (etag, read) = (now, again);
            }
        }
        Ok(())
    }

    /// Takes this change (`stamp`, the message being run) off every claim
    /// under its unique values, as holder or waiting: a change that gives
    /// up (refused, failed, or stale) keeps no claim.
    ///
    /// A claim names its holder and the changes waiting on it: older changes
    /// of the same primary, or other deliveries of the same change, whose
    /// claim it took over and which may still be in flight. When the holder
    /// gives up, the claim goes back to the last of them; when none is
    /// left, it is deleted. Changes the primary has overtaken (their stamp
    /// is not newer than the primary's) can never use the claim and are
    /// dropped; if the primary shows the value, the claim becomes its copy.
    /// Each write is under the ETag of the read before it. Two reads per
    /// unique value (the copy, the primary once), on this path only.
    pub(super) async fn give_up_claims(
        &self,
        ctx: &StepContext,
        copies: &[DynamicEntity],
        stamp: i64,
    ) -> OpResult {
        let message = ctx.message_id();
        let mut primary = None;
        for (i, (def, copy)) in self.inner.indexes.iter().zip(copies).enumerate() {
            if !def.unique {
                continue;
            }
            let table = self.table_of(def);
            let key = EntityKey::new(&copy.partition_key, &copy.row_key);
            for _ in 0..MAX_REREADS {
                let Some((found, etag)) = ctx.read(&table, key.clone()).await? else {
                    break;
                };
                if named_primary(&found) != named_primary(copy) || !is_pending(&found) {
                    break;
                }
                let mut list = owners(&found);
                if !list.iter().any(|o| o.is(stamp, message)) {
                    break;
                }
                if primary.is_none() {
                    primary = Some(
                        self.read_primary(ctx, &self.primary_key_of(def, copy))
                            .await?,
                    );
                }
                let current = primary.as_ref().expect("read above");
                let overtaken = current.stamp().unwrap_or(i64::MIN);
                list.retain(|o| !o.is(stamp, message) && o.stamp > overtaken);
                let shown = match current {
                    Current::Live { entity, stamp, .. } => {
                        Some(self.stored(entity, *stamp)?.1.swap_remove(i))
                            .filter(|fresh| fresh.row_key == copy.row_key)
                    }
                    _ => None,
                };
                let outcome = match (list.is_empty(), shown) {
                    (true, Some(fresh)) => ctx.replace_if_unchanged(&table, &fresh, &etag).await?,
                    (true, None) => ctx.delete_if_unchanged(&table, key.clone(), &etag).await?,
                    (false, _) => {
                        ctx.replace_if_unchanged(&table, &claim_of(&found, &list), &etag)
                            .await?
                    }
                };
                if !matches!(outcome, Guarded::Changed) {
                    break;
                }
            }
        }
        Ok(())
    }

    pub(super) fn refusal(&self, def: &IndexDef<T>, copy: &DynamicEntity, holder: &str) -> OpError {
        let own_partition = copy
            .partition_key
            .strip_prefix(&def.prefix)
            .unwrap_or(&copy.partition_key);
        let own_row = named_primary(copy).unwrap_or_default();
        tracing::warn!(
            index = %def.name,
            value = %copy.row_key,
            partition_key = %own_partition,
            primary = %own_row,
            held_by = %holder,
            "change refused: the unique value is held by another entity"
        );
        Box::new(Error::constraint(
            def.name.clone(),
            (copy.partition_key.clone(), copy.row_key.clone()),
            Some((own_partition.to_owned(), holder.to_owned())),
        ))
    }

    /// Deletes the copy `key` of `def` if it names the primary `own` and a
    /// change older than `stamp` wrote it (under its ETag, reading again if
    /// it changed meanwhile): a copy of another primary, or one a newer
    /// change wrote, is left alone.
    pub(super) async fn delete_older_copy(
        &self,
        ctx: &StepContext,
        def: &IndexDef<T>,
        key: EntityKey,
        own: &str,
        stamp: i64,
    ) -> OpResult {
        let table = self.table_of(def);
        for _ in 0..MAX_REREADS {
            let Some((copy, etag)) = ctx.read(&table, key.clone()).await? else {
                return Ok(());
            };
            if named_primary(&copy) != Some(own) || stamp_of(&copy) >= stamp {
                return Ok(());
            }
            match ctx.delete_if_unchanged(&table, key.clone(), &etag).await? {
                Guarded::Changed => continue,
                Guarded::Done(_) | Guarded::Gone => return Ok(()),
            }
        }
        Err(format!("the index copy {key} kept changing; will retry later").into())
    }

    /// Brings a copy this change wrote (`copy`, whose stored ETag is `etag`,
    /// so it still names this primary) in line with the primary `current`,
    /// which a newer change wrote: the copy is rewritten from it if it still
    /// has the copy's value, deleted otherwise; both under `etag`, so a newer
    /// change's own write of the copy wins.
    pub(super) async fn settle_copy(
        &self,
        ctx: &StepContext,
        index: usize,
        copy: &DynamicEntity,
        etag: &ETag,
        current: &Current<T>,
    ) -> OpResult {
        let def = &self.inner.indexes[index];
        let table = self.table_of(def);
        if let Current::Live { entity, stamp, .. } = current {
            let (_, fresh) = self.stored(entity, *stamp)?;
            if fresh[index].row_key == copy.row_key {
                ctx.replace_if_unchanged(&table, &fresh[index], etag)
                    .await?;
                return Ok(());
            }
        }
        let key = EntityKey::new(&copy.partition_key, &copy.row_key);
        ctx.delete_if_unchanged(&table, key, etag).await?;
        Ok(())
    }

    /// The copies of the old primary `current` whose RowKeys differ from the
    /// new `copies`: to delete.
    pub(super) fn old_copies(
        &self,
        current: &Current<T>,
        copies: &[DynamicEntity],
    ) -> Vec<(usize, EntityKey)> {
        let Current::Live { entity: old, .. } = current else {
            return Vec::new();
        };
        let Ok((_, old_copies)) = self.stored(old, 0) else {
            return Vec::new();
        };
        old_copies
            .into_iter()
            .zip(copies)
            .enumerate()
            .filter(|(_, (old, new))| old.row_key != new.row_key)
            .map(|(i, (old, _))| (i, EntityKey::new(old.partition_key, old.row_key)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tombstone_names_the_copies_its_remove_took_off() {
        let copies = vec![
            (
                "email".to_owned(),
                EntityKey::new("email_Sales", "a@contoso.com"),
            ),
            (
                "last name".to_owned(),
                EntityKey::new("lastname_Sales", "Jones 000001"),
            ),
        ];
        let tombstone = DynamicEntity::new("empid_Sales", "000001")
            .with(super::super::REMOVED, true)
            .with(super::super::REMOVED_COPIES, removed_copies_text(&copies));
        assert_eq!(removed_copies(&tombstone), copies);
        // A tombstone of the previous version names none; one that does not
        // parse names none either.
        let old = DynamicEntity::new("empid_Sales", "000001").with(super::super::REMOVED, true);
        assert!(removed_copies(&old).is_empty());
        let bad = old.clone().with(super::super::REMOVED_COPIES, "not json");
        assert!(removed_copies(&bad).is_empty());
    }

    #[test]
    fn stamps_increase_even_when_the_clock_stands_still_or_goes_back() {
        assert_eq!(next_stamp(0, 1_000), 1_000);
        assert_eq!(next_stamp(1_000, 1_000), 1_001);
        assert_eq!(next_stamp(1_001, 900), 1_002);
        assert_eq!(next_stamp(1_002, 5_000), 5_000);
    }

    #[test]
    fn a_claim_lists_its_holder_last_and_the_changes_waiting_before_it() {
        let copy =
            DynamicEntity::new("email_Sales", "a@contoso.com").with(PRIMARY_ROW_KEY, "000001");
        let list = vec![
            Owner::new(5, "m1"),
            Owner {
                stamp: 6,
                message: None,
            },
            Owner::new(7, "m3"),
        ];
        let claim = claim_of(&copy, &list);
        assert_eq!(stamp_of(&claim), 7);
        assert!(is_pending(&claim));
        assert_eq!(owners(&claim), list);
        // Rewritten from a claim that had waiting changes: none are left
        // over from it.
        let again = claim_of(&claim, &list[2..]);
        assert_eq!(owners(&again), list[2..]);
        assert_eq!(again.get(CLAIM_WAITING), None);
        let legacy = claim_of(&again, &list[1..2]);
        assert_eq!(legacy.get(CLAIM_MESSAGE), None);
        assert_eq!(owners(&legacy), list[1..2]);
    }

    #[test]
    fn an_owner_is_its_change_and_message_or_any_message_for_an_old_claim() {
        assert!(Owner::new(5, "m1").is(5, "m1"));
        assert!(!Owner::new(5, "m1").is(5, "m2"), "another delivery");
        assert!(!Owner::new(5, "m1").is(6, "m1"));
        let old = Owner {
            stamp: 5,
            message: None,
        };
        assert!(old.is(5, "m2"));
    }

    #[test]
    fn a_message_carries_its_stamp_and_one_without_is_refused() {
        let json = serde_json::to_value(Change::Put {
            entity: serde_json::json!({}),
            stamp: 7,
        })
        .unwrap();
        assert_eq!(json, serde_json::json!({"put": {"entity": {}, "stamp": 7}}));
        assert!(serde_json::from_str::<Change>(r#"{"put":{"entity":{"a":1}}}"#).is_err());
        assert!(serde_json::from_str::<Change>(
            r#"{"remove":{"partition_key":"p","row_key":"r"}}"#
        )
        .is_err());
    }
}
