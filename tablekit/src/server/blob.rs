//! The Blob service, answered from the embedded blob store.

use super::reply::Reply;
use super::{Ctx, Failure};

/// Answers one Blob service request.
pub(crate) async fn handle(ctx: Ctx<'_>) -> Result<Reply, Failure> {
    Err(Failure::new(
        501,
        "NotImplemented",
        format!("{} /{} is not served yet.", ctx.parts.method, ctx.path),
    ))
}
