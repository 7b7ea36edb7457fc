//! The Table service: tables, entities, queries and entity group
//! transactions, answered from the embedded table store, as Azure answers
//! them. Entities and queries are in `table_entity`, transactions in
//! `table_batch`, ACLs and the service's settings in `table_admin`; this file
//! routes a request and serves the tables themselves.

use http::Method;

use super::auth::{Need, Perm};
use super::reply::{self, Reply};
use super::table_wire::{
    answer, base_url, created, effective_method, json_type, metadata, prefer_content, resource,
    set_header, top, unexpected, unsupported, Resource,
};
use super::{table_admin, table_batch, table_entity, Ctx, Failure};
use crate::backend::{Operation, Response};

/// Answers one Table service request.
pub(crate) async fn handle(ctx: Ctx<'_>) -> Result<Reply, Failure> {
    let method = effective_method(&ctx)?;
    let comp = ctx.param("comp");
    // The service's root; the Python SDK asks for stats at
    // `/<account>-secondary/<account>/`, naming the account twice.
    let root = ctx.path.trim_end_matches('/');
    if root.is_empty() || (root == ctx.account.name && ctx.param("restype") == Some("service")) {
        return match (ctx.param("restype"), comp) {
            (Some("service"), Some("properties" | "stats")) => {
                table_admin::service(&ctx, &method).await
            }
            _ => Err(unsupported(&method, &ctx)),
        };
    }
    if comp == Some("acl") {
        return table_admin::acl(&ctx, &method, ctx.path).await;
    }
    match resource(ctx.path)? {
        Resource::Tables => match method {
            Method::POST => create_table(&ctx).await,
            Method::GET => list_tables(&ctx).await,
            _ => Err(unsupported(&method, &ctx)),
        },
        Resource::Table(name) => match method {
            Method::DELETE => delete_table(&ctx, &name).await,
            Method::GET => get_table(&ctx, &name).await,
            _ => Err(unsupported(&method, &ctx)),
        },
        Resource::Batch => match method {
            Method::POST => table_batch::batch(&ctx).await,
            _ => Err(unsupported(&method, &ctx)),
        },
        Resource::Entities { table, key: None } => match method {
            Method::POST => table_entity::insert(&ctx, table).await,
            Method::GET => table_entity::query(&ctx, table).await,
            _ => Err(unsupported(&method, &ctx)),
        },
        Resource::Entities {
            table,
            key: Some(key),
        } => table_entity::one(&ctx, &method, table, &key).await,
    }
}

/// The method a request stands for: a `POST` may tunnel another
/// (`X-HTTP-Method: MERGE`), for clients that cannot send it.
async fn create_table(ctx: &Ctx<'_>) -> Result<Reply, Failure> {
    ctx.access.check(Need::Service(Perm::Create))?;
    let metadata = metadata(ctx)?;
    let body: serde_json::Value = serde_json::from_slice(&ctx.body)
        .map_err(|_| Failure::invalid("The request body is not JSON."))?;
    let name = body
        .get("TableName")
        .and_then(|n| n.as_str())
        .ok_or_else(|| Failure::new(400, "PropertiesNeedValue", "The TableName is missing."))?;
    crate::validate::table_name(name).map_err(Failure::from)?;
    match ctx
        .account
        .tables
        .execute(Operation::CreateTable { table: name })
        .await?
    {
        Response::Done => {}
        other => return Err(unexpected(&other)),
    }
    let base = base_url(ctx);
    let prefer = prefer_content(ctx.header("prefer"));
    Ok(created(prefer, metadata, || {
        answer(ctx, &base, metadata).table(name)
    }))
}

async fn delete_table(ctx: &Ctx<'_>, name: &str) -> Result<Reply, Failure> {
    ctx.access.check(Need::Service(Perm::Delete))?;
    match ctx
        .account
        .tables
        .execute(Operation::DeleteTable { table: name })
        .await?
    {
        Response::Done => Ok(reply::empty(204)),
        other => Err(unexpected(&other)),
    }
}

async fn list_tables(ctx: &Ctx<'_>) -> Result<Reply, Failure> {
    ctx.access.check(Need::Service(Perm::List))?;
    let metadata = metadata(ctx)?;
    let top = top(ctx)?;
    let filter = ctx.param("$filter").filter(|f| !f.trim().is_empty());
    let response = ctx
        .account
        .tables
        .execute(Operation::ListTables {
            prefix: None,
            filter,
            next_table_name: ctx.param("NextTableName"),
            top,
        })
        .await?;
    let Response::Tables {
        names,
        next_table_name,
    } = response
    else {
        return Err(unexpected(&response));
    };
    let base = base_url(ctx);
    let body = answer(ctx, &base, metadata).tables(&names);
    let mut reply = reply::with_body(200, json_type(metadata), body.into());
    if let Some(next) = next_table_name {
        set_header(&mut reply, "x-ms-continuation-nexttablename", &next);
    }
    Ok(reply)
}

/// `GET /Tables('name')`: the one table, or 404.
async fn get_table(ctx: &Ctx<'_>, name: &str) -> Result<Reply, Failure> {
    ctx.access.check(Need::Service(Perm::List))?;
    let metadata = metadata(ctx)?;
    let filter = format!("TableName eq '{}'", name.replace('\'', "''"));
    let response = ctx
        .account
        .tables
        .execute(Operation::ListTables {
            prefix: None,
            filter: Some(&filter),
            next_table_name: None,
            top: Some(1),
        })
        .await?;
    let Response::Tables { names, .. } = response else {
        return Err(unexpected(&response));
    };
    let Some(found) = names.first() else {
        return Err(Failure::new(
            404,
            "TableNotFound",
            "The table specified does not exist.",
        ));
    };
    let base = base_url(ctx);
    let body = answer(ctx, &base, metadata).table(found);
    Ok(reply::with_body(200, json_type(metadata), body.into()))
}
