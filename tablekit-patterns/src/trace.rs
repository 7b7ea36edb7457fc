//! One span per public operation of a pattern: `tablekit::observe`'s
//! [`pattern_span`], with the table calls the operation makes as its
//! children.

use std::future::Future;

use tablekit::observe::{end_call, error_type, pattern_span, storage_pattern_span};
use tablekit::Result;
use tracing::Instrument as _;

use crate::eventual::OpResult;

/// Runs `op`, the operation `pattern.method` (on `table`, if it has one),
/// in its span, and records its failure there.
pub(crate) async fn traced<T>(
    pattern: &'static str,
    method: &'static str,
    table: Option<&str>,
    op: impl Future<Output = Result<T>>,
) -> Result<T> {
    let span = pattern_span(pattern, method, table);
    let result = op.instrument(span.clone()).await;
    end_call(&span, &result);
    result
}

/// [`traced`] for an operation on queues or blobs
/// (`az.namespace = "Microsoft.Storage"`).
pub(crate) async fn traced_storage<T>(
    pattern: &'static str,
    method: &'static str,
    op: impl Future<Output = Result<T>>,
) -> Result<T> {
    let span = storage_pattern_span(pattern, method);
    let result = op.instrument(span.clone()).await;
    end_call(&span, &result);
    result
}

/// [`traced`] for an operation the worker runs, whose error may be any
/// error: a tablekit error's `error.type` as a table call's, `operation`
/// for any other.
pub(crate) async fn traced_op<T>(
    pattern: &'static str,
    method: &'static str,
    table: Option<&str>,
    op: impl Future<Output = OpResult<T>>,
) -> OpResult<T> {
    let span = pattern_span(pattern, method, table);
    let result = op.instrument(span.clone()).await;
    if let Err(e) = &result {
        if !span.is_disabled() {
            let kind = match e.downcast_ref::<tablekit::Error>() {
                Some(e) => error_type(e),
                None => "operation".into(),
            };
            span.record("otel.status_code", "ERROR");
            span.record("error.type", kind.as_ref());
        }
    }
    result
}
