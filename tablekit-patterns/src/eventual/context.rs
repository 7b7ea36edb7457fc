//! What a step runs with: the services, the message's identity, and the
//! idempotent building blocks ([`StepContext`], [`Guarded`]).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tablekit::{
    entity::RawEntity, error::ErrorCode, BlobClient, BlobServiceClient, DynamicEntity, ETag,
    EntityKey, Error, IfMatch, Result, TableClient, TableEntity, TableServiceClient, UpdateMode,
};

use super::{BoxFuture, OpResult};

// ---------------------------------------------------------------------------
// Steps.

/// A step boundary, a heartbeat or a boundary of the move to the poison
/// queue, as seen by a [`WorkerBuilder::step_hook`](super::WorkerBuilder::step_hook).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// A step has just completed.
    Step {
        /// The message being run.
        message_id: String,
        /// Its dequeue count (1 on the first attempt).
        dequeue_count: u32,
        /// The step's number within this attempt: 1 after the first.
        step: usize,
        /// What the step did, for example `"insert_or_replace Archive"`.
        name: String,
    },
    /// The worker is about to extend the message's visibility. A hook error
    /// skips this heartbeat (as if it were lost).
    Heartbeat {
        /// The message being run.
        message_id: String,
    },
    /// The worker moving a message to the poison queue has just written its
    /// whole body to the poison body table (the entry cannot carry it);
    /// next it sends the poison entry. A hook error stops the move here: the
    /// message stays on the main queue and is poisoned again later.
    PoisonBodyKept {
        /// The message being poisoned.
        message_id: String,
        /// The table its body is in.
        table: String,
    },
    /// The worker moving a message to the poison queue has just sent its
    /// entry; next it deletes the message from the main queue. A hook error
    /// stops the move here: the message stays, and poisoning it again later
    /// leaves a second entry for it.
    PoisonEntrySent {
        /// The message being poisoned.
        message_id: String,
    },
}

pub(super) type Hook = Arc<dyn Fn(Event) -> BoxFuture<OpResult> + Send + Sync>;

/// The outcome of an ETag-guarded write or delete.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Guarded {
    /// Applied; the new ETag for a write, `None` for a delete.
    Done(Option<ETag>),
    /// Someone changed it since the ETag was read (412): read again and redo.
    Changed,
    /// It is gone (404): for a delete, someone (an earlier attempt, another
    /// worker) already did it.
    Gone,
}

/// What a step runs with: the services, the message's identity, and the
/// idempotent building blocks. Each building block, once it succeeded, marks
/// a step boundary (the [`WorkerBuilder::step_hook`](super::WorkerBuilder::step_hook) sees it); call
/// [`step`](StepContext::step) after steps of your own.
#[derive(Clone)]
pub struct StepContext {
    pub(super) inner: Arc<ContextInner>,
}

pub(super) struct ContextInner {
    pub(super) tables: TableServiceClient,
    pub(super) blobs: Option<BlobServiceClient>,
    pub(super) message_id: String,
    pub(super) dequeue_count: u32,
    /// The worker's limit: the attempt at it is the last.
    pub(super) max_dequeue_count: u32,
    pub(super) hook: Option<Hook>,
    pub(super) steps: AtomicUsize,
}

impl fmt::Debug for StepContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepContext")
            .field("message_id", &self.inner.message_id)
            .field("dequeue_count", &self.inner.dequeue_count)
            .field("steps", &self.inner.steps.load(Ordering::Relaxed))
            .finish()
    }
}

/// A blob write or delete under an ETag answered 412: Azurite (and, by HTTP's
/// rules, the service) answers so also when the blob is missing, where the
/// embedded store says 404. One more request tells which it is.
async fn changed_or_gone(blob: &BlobClient) -> Result<Guarded> {
    Ok(if blob.exists().await? {
        Guarded::Changed
    } else {
        Guarded::Gone
    })
}

fn is_missing_entity(e: &Error) -> bool {
    e.is_not_found() && e.code() != Some(&ErrorCode::TableNotFound)
}

impl StepContext {
    /// A context outside any worker, for running an operation's steps
    /// directly (in a test, or synchronously as a fallback): no message, no hook.
    pub fn detached(tables: TableServiceClient, blobs: Option<BlobServiceClient>) -> Self {
        StepContext {
            inner: Arc::new(ContextInner {
                tables,
                blobs,
                message_id: String::new(),
                dequeue_count: 0,
                max_dequeue_count: 0,
                hook: None,
                steps: AtomicUsize::new(0),
            }),
        }
    }

    /// The Table service the worker was built with.
    pub fn tables(&self) -> &TableServiceClient {
        &self.inner.tables
    }

    /// The Blob service the worker was built with; an error if it has none
    /// ([`WorkerBuilder::blobs`](super::WorkerBuilder::blobs)).
    pub fn blobs(&self) -> OpResult<&BlobServiceClient> {
        self.inner.blobs.as_ref().ok_or_else(|| {
            "this worker has no Blob service: add one with WorkerBuilder::blobs".into()
        })
    }

    /// The id of the message being run (empty for a detached context).
    pub fn message_id(&self) -> &str {
        &self.inner.message_id
    }

    /// How many times the message has been received, this time included: 1
    /// on the first attempt.
    pub fn dequeue_count(&self) -> u32 {
        self.inner.dequeue_count
    }

    /// Whether this is the message's last attempt: if it fails, the message
    /// is poisoned rather than run again (always, for a detached context).
    /// A step that leaves things for a later attempt to finish must finish
    /// or undo them itself when there is none.
    ///
    /// ```
    /// use tablekit::TableServiceClient;
    /// use tablekit_patterns::eventual::StepContext;
    ///
    /// let ctx = StepContext::detached(TableServiceClient::embedded(), None);
    /// assert!(ctx.is_last_attempt(), "nothing runs a detached step again");
    /// ```
    pub fn is_last_attempt(&self) -> bool {
        self.inner.dequeue_count >= self.inner.max_dequeue_count
    }

    /// Marks a step boundary named `name`: the step hook runs here, and a hook
    /// error stops the operation as a failure of this step would.
    pub async fn step(&self, name: &str) -> OpResult {
        let step = self.inner.steps.fetch_add(1, Ordering::SeqCst) + 1;
        tracing::debug!(message_id = %self.inner.message_id, step, name, "step done");
        match &self.inner.hook {
            Some(hook) => {
                hook(Event::Step {
                    message_id: self.inner.message_id.clone(),
                    dequeue_count: self.inner.dequeue_count,
                    step,
                    name: name.to_owned(),
                })
                .await
            }
            None => Ok(()),
        }
    }

    /// Reads an entity with its ETag (whether or not `T` keeps one); `None`
    /// if there is none, which in a retried operation usually means an
    /// earlier attempt already moved or deleted it. Step `"read <table>"`.
    pub async fn read<T: TableEntity>(
        &self,
        table: &TableClient<T>,
        key: impl Into<EntityKey>,
    ) -> OpResult<Option<(T, ETag)>> {
        let found = table.with_type::<DynamicEntity>().get(key).await?;
        let found = match found {
            Some(d) => {
                let etag = d.etag.clone().ok_or("the service returned no ETag")?;
                Some((T::decode(&RawEntity::from_dynamic(&d))?, etag))
            }
            None => None,
        };
        self.step(&format!("read {}", table.name())).await?;
        Ok(found)
    }

    /// Inserts the entity or replaces whatever is stored under its key
    /// (no If-Match): the same state however often it runs. Returns the new
    /// ETag. Step `"insert_or_replace <table>"`.
    pub async fn insert_or_replace<T: TableEntity>(
        &self,
        table: &TableClient<T>,
        entity: &T,
    ) -> OpResult<ETag> {
        let written = table.upsert(entity, UpdateMode::Replace).await?;
        self.step(&format!("insert_or_replace {}", table.name()))
            .await?;
        Ok(written.etag().clone())
    }

    /// Deletes the entity if it exists (`If-Match: *`, 404 is success);
    /// returns whether it was there. Step `"delete_if_exists <table>"`.
    pub async fn delete_if_exists<T: TableEntity>(
        &self,
        table: &TableClient<T>,
        key: impl Into<EntityKey>,
    ) -> OpResult<bool> {
        let existed = table.delete_if_exists(key, IfMatch::Any).await?;
        self.step(&format!("delete_if_exists {}", table.name()))
            .await?;
        Ok(existed)
    }

    /// Replaces the entity only if it is unchanged since `etag` was read.
    /// Step `"replace_if_unchanged <table>"` (also when the outcome is
    /// [`Guarded::Changed`] or [`Guarded::Gone`]).
    pub async fn replace_if_unchanged<T: TableEntity>(
        &self,
        table: &TableClient<T>,
        entity: &T,
        etag: &ETag,
    ) -> OpResult<Guarded> {
        let outcome = match table
            .update(entity, UpdateMode::Replace, IfMatch::ETag(etag.clone()))
            .await
        {
            Ok(w) => Guarded::Done(Some(w.etag().clone())),
            Err(e) if e.is_precondition_failed() => Guarded::Changed,
            Err(e) if is_missing_entity(&e) => Guarded::Gone,
            Err(e) => return Err(e.into()),
        };
        self.step(&format!("replace_if_unchanged {}", table.name()))
            .await?;
        Ok(outcome)
    }

    /// Deletes the entity only if it is unchanged since `etag` was read:
    /// [`Guarded::Changed`] means read again and redo, [`Guarded::Gone`] that
    /// it is already deleted. Step `"delete_if_unchanged <table>"`.
    pub async fn delete_if_unchanged<T: TableEntity>(
        &self,
        table: &TableClient<T>,
        key: impl Into<EntityKey>,
        etag: &ETag,
    ) -> OpResult<Guarded> {
        let outcome = match table.delete(key, IfMatch::ETag(etag.clone())).await {
            Ok(()) => Guarded::Done(None),
            Err(e) if e.is_precondition_failed() => Guarded::Changed,
            Err(e) if is_missing_entity(&e) => Guarded::Gone,
            Err(e) => return Err(e.into()),
        };
        self.step(&format!("delete_if_unchanged {}", table.name()))
            .await?;
        Ok(outcome)
    }

    /// Uploads the blob, replacing any. Step `"put_blob <name>"`.
    pub async fn put_blob(
        &self,
        blob: &BlobClient,
        body: impl Into<bytes::Bytes>,
    ) -> OpResult<ETag> {
        let written = blob.upload(body).await?;
        self.step(&format!("put_blob {}", blob.name())).await?;
        Ok(written.etag().clone())
    }

    /// Uploads the blob only if there is none; returns `false` (and writes
    /// nothing) if it exists, for example because an earlier attempt wrote it.
    /// Step `"put_blob_if_not_exists <name>"`.
    pub async fn put_blob_if_not_exists(
        &self,
        blob: &BlobClient,
        body: impl Into<bytes::Bytes>,
    ) -> OpResult<bool> {
        let written = match blob
            .upload(body)
            .if_none_match(tablekit::IfNoneMatch::Any)
            .await
        {
            Ok(_) => true,
            // Only this code says the blob is there: another 409 (the
            // container being deleted, a lease) says nothing of it.
            Err(e) if e.code() == Some(&ErrorCode::BlobAlreadyExists) => false,
            Err(e) => return Err(e.into()),
        };
        self.step(&format!("put_blob_if_not_exists {}", blob.name()))
            .await?;
        Ok(written)
    }

    /// Replaces the blob only if it is unchanged since `etag`
    /// ([`Guarded::Gone`] if it no longer exists).
    /// Step `"put_blob_if_unchanged <name>"`.
    pub async fn put_blob_if_unchanged(
        &self,
        blob: &BlobClient,
        body: impl Into<bytes::Bytes>,
        etag: &ETag,
    ) -> OpResult<Guarded> {
        let outcome = match blob.upload(body).if_match(etag.clone()).await {
            Ok(w) => Guarded::Done(Some(w.etag().clone())),
            Err(e) if e.is_precondition_failed() => changed_or_gone(blob).await?,
            Err(e) if e.is_not_found() => Guarded::Gone,
            Err(e) => return Err(e.into()),
        };
        self.step(&format!("put_blob_if_unchanged {}", blob.name()))
            .await?;
        Ok(outcome)
    }

    /// Deletes the blob if it exists; returns whether it did.
    /// Step `"delete_blob_if_exists <name>"`.
    pub async fn delete_blob_if_exists(&self, blob: &BlobClient) -> OpResult<bool> {
        let existed = blob.delete_if_exists().await?;
        self.step(&format!("delete_blob_if_exists {}", blob.name()))
            .await?;
        Ok(existed)
    }

    /// Deletes the blob only if it is unchanged since `etag`
    /// ([`Guarded::Gone`] if an earlier attempt deleted it).
    /// Step `"delete_blob_if_unchanged <name>"`.
    pub async fn delete_blob_if_unchanged(
        &self,
        blob: &BlobClient,
        etag: &ETag,
    ) -> OpResult<Guarded> {
        let outcome = match blob.delete(etag).await {
            Ok(()) => Guarded::Done(None),
            Err(e) if e.is_precondition_failed() => changed_or_gone(blob).await?,
            Err(e) if e.code() == Some(&ErrorCode::BlobNotFound) => Guarded::Gone,
            Err(e) => return Err(e.into()),
        };
        self.step(&format!("delete_blob_if_unchanged {}", blob.name()))
            .await?;
        Ok(outcome)
    }
}
