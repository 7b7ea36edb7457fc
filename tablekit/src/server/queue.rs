//! The Queue service, answered from the embedded queue store.

use super::reply::Reply;
use super::{Ctx, Failure};

/// Answers one Queue service request.
pub(crate) async fn handle(ctx: Ctx<'_>) -> Result<Reply, Failure> {
    Err(Failure::new(
        501,
        "NotImplemented",
        format!("{} /{} is not served yet.", ctx.parts.method, ctx.path),
    ))
}
