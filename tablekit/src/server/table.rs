//! The Table service: tables, entities, queries and entity group
//! transactions, answered from the embedded table store.

use http::Method;

use super::auth::{Need, Perm};
use super::reply::{self, Reply};
use super::{Ctx, Failure};
use crate::backend::{Operation, Response};

/// Answers one Table service request.
pub(crate) async fn handle(ctx: Ctx<'_>) -> Result<Reply, Failure> {
    let method = ctx.parts.method.clone();
    match (&method, ctx.path) {
        (&Method::POST, "Tables") => create_table(&ctx).await,
        _ => Err(Failure::new(
            501,
            "NotImplemented",
            format!("{method} /{} is not served yet.", ctx.path),
        )),
    }
}

async fn create_table(ctx: &Ctx<'_>) -> Result<Reply, Failure> {
    ctx.access.check(Need::Service(Perm::Create))?;
    let body: serde_json::Value = serde_json::from_slice(&ctx.body)
        .map_err(|_| Failure::invalid("The request body is not JSON."))?;
    let name = body
        .get("TableName")
        .and_then(|n| n.as_str())
        .ok_or_else(|| Failure::invalid("The request body names no TableName."))?;
    crate::validate::table_name(name).map_err(Failure::from)?;
    match ctx
        .account
        .tables
        .execute(Operation::CreateTable { table: name })
        .await?
    {
        Response::Done => Ok(reply::empty(204)),
        other => Err(Failure::new(
            500,
            "InternalError",
            format!("the store answered {other:?}"),
        )),
    }
}
