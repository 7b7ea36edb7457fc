//! The public-call spans of queue and blob calls (see `crate::observe`),
//! around any queue or blob backend, over HTTP or embedded: a trace looks the
//! same in tests and in production. (Table calls get theirs from the client's
//! counting layer, `table::stats::Counted`.)

use std::fmt;
use std::sync::Arc;

use tracing::Instrument as _;

#[cfg(feature = "blob")]
use super::blob::{BlobBackend, BlobOp, BlobResponse};
#[cfg(feature = "queue")]
use super::queue::{QueueBackend, QueueOp, QueueResponse};
use crate::error::Result;
use crate::observe;

/// A backend whose calls each run in a public-call span.
pub(crate) struct Traced<B: ?Sized>(pub(crate) Arc<B>);

impl<B: ?Sized + fmt::Debug> fmt::Debug for Traced<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The backend it traces, as before tracing existed.
        self.0.fmt(f)
    }
}

/// Runs `call` in `span`, and records its end there.
async fn in_span<T>(
    span: tracing::Span,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let result = if span.is_disabled() {
        call.await
    } else {
        call.instrument(span.clone()).await
    };
    observe::end_call(&span, &result);
    result
}

#[cfg(feature = "queue")]
#[async_trait::async_trait]
impl QueueBackend for Traced<dyn QueueBackend> {
    async fn queue(&self, op: QueueOp<'_>) -> Result<QueueResponse> {
        let span = observe::call_span("QueueClient", op.name(), observe::STORAGE, op.name(), None);
        in_span(span, self.0.queue(op)).await
    }

    #[cfg(feature = "admin")]
    async fn admin(
        &self,
        op: crate::backend::admin::AdminOp<'_>,
    ) -> Result<crate::backend::admin::AdminResponse> {
        self.0.admin(op).await
    }
}

#[cfg(feature = "blob")]
#[async_trait::async_trait]
impl BlobBackend for Traced<dyn BlobBackend> {
    async fn blob(&self, op: BlobOp<'_>) -> Result<BlobResponse> {
        let span = observe::call_span("BlobClient", op.name(), observe::STORAGE, op.name(), None);
        in_span(span, self.0.blob(op)).await
    }

    #[cfg(feature = "admin")]
    async fn admin(
        &self,
        op: crate::backend::admin::AdminOp<'_>,
    ) -> Result<crate::backend::admin::AdminResponse> {
        self.0.admin(op).await
    }
}
