//! The one place that names the concrete backends: the clients ask here for a
//! backend behind the seam's traits and never import a backend's module.

use std::sync::Arc;

use super::blob::BlobBackend;
use super::embedded::blobs::Blobs;
use super::embedded::queues::Queues;
use super::embedded::EmbeddedBackend;
use super::http::account::Account;
use super::http::blob::HttpBlobBackend;
use super::http::queue::HttpQueueBackend;
use super::http::HttpBackend;
use super::queue::QueueBackend;
use super::Backend;
use crate::clock::Clock;
use crate::error::Result;
use crate::options::ClientOptions;

/// The Table service of `account`, over HTTP.
pub(crate) fn connect(account: Account, options: &ClientOptions) -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(HttpBackend::new(account, &options.http)?))
}

/// A fresh, empty, in-process table store.
pub(crate) fn embedded() -> Arc<dyn Backend> {
    Arc::new(EmbeddedBackend::new())
}

/// The in-process table store kept in the file at `path` (created if missing).
pub(crate) fn embedded_at(path: &std::path::Path) -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(EmbeddedBackend::open(path)?))
}

/// The Queue service of `account`, over HTTP.
pub(crate) fn connect_queues(
    account: Account,
    options: &ClientOptions,
) -> Result<Arc<dyn QueueBackend>> {
    Ok(Arc::new(HttpQueueBackend::new(account, &options.http)?))
}

/// A fresh, empty, in-process queue store on `clock`.
pub(crate) fn embedded_queues(clock: Clock) -> Arc<dyn QueueBackend> {
    Arc::new(Queues::new(clock))
}

/// The Blob service of `account`, over HTTP.
pub(crate) fn connect_blobs(
    account: Account,
    options: &ClientOptions,
) -> Result<Arc<dyn BlobBackend>> {
    Ok(Arc::new(HttpBlobBackend::new(account, &options.http)?))
}

/// A fresh, empty, in-process blob store on `clock`.
pub(crate) fn embedded_blobs(clock: Clock) -> Arc<dyn BlobBackend> {
    Arc::new(Blobs::new(clock))
}
