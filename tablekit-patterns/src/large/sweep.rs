//! The sweep of [`LargeTable`](super::LargeTable): blobs no row lists
//! and older than the grace period.

use std::collections::HashMap;

use futures::TryStreamExt;
use tablekit::{error::ErrorCode, ETag, EntityKey, Result, TableEntity};

use crate::error::refused;

use super::layout::{bad_blob_list, blob_list, blob_refs, parse_blob_name};
use super::{LargeTable, SweepReport, BLOBS, MAX_ATTEMPTS};

impl<T: TableEntity> LargeTable<T> {
    /// Deletes the blobs under [`blob_prefix`](Self::blob_prefix) that no
    /// entity points to and that are older than the [grace
    /// period](Self::grace) (see the [module
    /// docs](super#the-grace-period-and-the-write-deadline); [`DEFAULT_GRACE`](super::DEFAULT_GRACE)
    /// is one hour). Each orphan is deleted only if it is still the version
    /// listed. Blobs named otherwise than this pattern names them are left
    /// alone, and so are the blobs of an entity whose [`BLOBS`] list does
    /// not read ([`SweepReport::unreadable`], and a `tracing::warn!`); see
    /// [the sweep](super#the-sweep). A failed request ends the sweep with its
    /// error; running it again is safe.
    pub async fn sweep_orphans(&self) -> Result<SweepReport> {
        crate::trace::traced(
            "LargeTable",
            "sweep_orphans",
            Some(self.raw.name()),
            async move {
                let grace = chrono::Duration::from_std(self.grace).map_err(|_| {
                    refused(
                        "large",
                        format!("grace period {:?} is too long", self.grace),
                    )
                })?;
                let cutoff = self.now() - grace;
                let mut report = SweepReport::default();
                let mut listing = self
                    .container
                    .list_blobs()
                    .prefix(self.blob_prefix())
                    .stream();
                // Blobs come in name order, so the blobs of one entity come together.
                let mut group: Option<(EntityKey, Vec<Candidate>)> = None;
                while let Some(blob) = listing.try_next().await? {
                    report.listed += 1;
                    let Some((key, property)) = parse_blob_name(self.raw.name(), blob.name())
                    else {
                        report.foreign += 1;
                        continue;
                    };
                    if blob.last_modified() > cutoff {
                        report.too_young += 1;
                        continue;
                    }
                    let candidate = (blob.name().to_owned(), property, blob.etag().clone());
                    match &mut group {
                        Some((k, blobs)) if *k == key => blobs.push(candidate),
                        _ => {
                            if let Some((k, blobs)) = group.take() {
                                self.sweep_entity(k, blobs, &mut report).await?;
                            }
                            group = Some((key, vec![candidate]));
                        }
                    }
                }
                if let Some((k, blobs)) = group.take() {
                    self.sweep_entity(k, blobs, &mut report).await?;
                }
                Ok(report)
            },
        )
        .await
    }

    async fn sweep_entity(
        &self,
        key: EntityKey,
        blobs: Vec<Candidate>,
        report: &mut SweepReport,
    ) -> Result<()> {
        let live = match self.live_blobs(&key, &blobs).await? {
            Ok(live) => live,
            Err(e) => {
                // Never "no references": a row we cannot read may point at
                // any of these blobs. Leave them, and say so.
                tracing::warn!(
                    table = %self.raw.name(),
                    partition_key = %key.partition_key,
                    row_key = %key.row_key,
                    error = %e,
                    blobs = blobs.len(),
                    "sweep_orphans: the entity's blob list cannot be read; its blobs are left alone"
                );
                report.unreadable += 1;
                return Ok(());
            }
        };
        for (name, property, etag) in blobs {
            if live.get(&name) == Some(&property) {
                report.live += 1;
                continue;
            }
            match self.container.blob(&name)?.delete(etag).await {
                Ok(()) => report.deleted.push(name),
                Err(e)
                    if e.code() == Some(&ErrorCode::BlobNotFound) || e.is_precondition_failed() => {
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The blobs the entity `key` points to now (blob name to property),
    /// read with `$select` of [`BLOBS`] and of every property that list
    /// names: the candidates' properties first, then, if the list names
    /// others, again with those (so a row is judged only whole). The outer
    /// error is a failed request; the inner one a row that does not read.
    async fn live_blobs(
        &self,
        key: &EntityKey,
        blobs: &[Candidate],
    ) -> Result<Result<HashMap<String, String>>> {
        let mut select: Vec<String> = vec![BLOBS.to_owned()];
        for (_, property, _) in blobs {
            if !select.contains(property) {
                select.push(property.clone());
            }
        }
        for _ in 0..MAX_ATTEMPTS {
            let Some(row) = self.raw.get(key.clone()).select(&select).await? else {
                return Ok(Ok(HashMap::new()));
            };
            let listed = match blob_list(&row) {
                Ok(l) => l,
                Err(e) => return Ok(Err(e)),
            };
            let unread: Vec<String> = listed
                .into_iter()
                .map(|(p, _)| p)
                .filter(|p| !select.contains(p))
                .collect();
            if unread.is_empty() {
                return Ok(blob_refs(&row)
                    .map(|refs| refs.into_iter().map(|r| (r.blob, r.property)).collect()));
            }
            // The list names properties not asked for: ask for them too.
            select.extend(unread);
        }
        Ok(Err(bad_blob_list(format!(
            "the list changed at every one of {MAX_ATTEMPTS} reads"
        ))))
    }
}

/// A blob old enough to sweep: its name, its property, the ETag listed.
type Candidate = (String, String, ETag);
