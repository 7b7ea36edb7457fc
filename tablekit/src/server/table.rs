//! The Table service: tables, entities, queries and entity group
//! transactions, answered from the embedded table store, as Azure answers
//! them. Entities and queries are in `table_entity`, transactions in
//! `table_batch`, ACLs and the service's settings in `table_admin`; this file
//! routes a request and serves the tables themselves.

use http::{HeaderValue, Method};

use super::auth::{Need, Perm};
use super::reply::{self, Reply};
use super::{table_admin, table_batch, table_entity, Ctx, Failure};
use crate::backend::{Operation, Response};
use crate::codec::answer::Answer;
use crate::entity::EntityKey;
use crate::options::Metadata;

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
fn effective_method(ctx: &Ctx<'_>) -> Result<Method, Failure> {
    let method = ctx.parts.method.clone();
    match ctx.header("x-http-method") {
        Some(tunneled) if method == Method::POST => Method::from_bytes(tunneled.as_bytes())
            .map_err(|_| Failure::invalid("The X-HTTP-Method header is not a method.")),
        _ => Ok(method),
    }
}

fn unsupported(method: &Method, ctx: &Ctx<'_>) -> Failure {
    Failure::new(
        405,
        "MethodNotAllowed",
        format!(
            "The requested method {method} is not allowed on the specified resource /{}.",
            ctx.path
        ),
    )
}

/// What a request's path names.
#[derive(Debug, PartialEq)]
pub(crate) enum Resource<'a> {
    /// `Tables`
    Tables,
    /// `Tables('name')`
    Table(String),
    /// `$batch`
    Batch,
    /// `name`, `name()` or `name(PartitionKey='..',RowKey='..')`.
    Entities {
        table: &'a str,
        key: Option<EntityKey>,
    },
}

/// Reads a (percent-decoded) path after the account.
pub(crate) fn resource(path: &str) -> Result<Resource<'_>, Failure> {
    let bad = || Failure::new(400, "InvalidUri", format!("The path /{path} is not valid."));
    let path = path.strip_suffix('/').unwrap_or(path);
    if path == "Tables" || path == "Tables()" {
        return Ok(Resource::Tables);
    }
    if path == "$batch" {
        return Ok(Resource::Batch);
    }
    let Some(open) = path.find('(') else {
        if path.is_empty() || path.contains('/') {
            return Err(bad());
        }
        return Ok(Resource::Entities {
            table: path,
            key: None,
        });
    };
    let (name, rest) = path.split_at(open);
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(bad)?;
    if name.is_empty() || name.contains('/') {
        return Err(bad());
    }
    if name == "Tables" {
        let (value, rest) = string_literal(inner).ok_or_else(bad)?;
        if !rest.is_empty() {
            return Err(bad());
        }
        return Ok(Resource::Table(value));
    }
    if inner.is_empty() {
        return Ok(Resource::Entities {
            table: name,
            key: None,
        });
    }
    let key = key_predicate(inner).ok_or_else(|| {
        Failure::invalid(format!(
            "The key predicate ({inner}) names no PartitionKey and RowKey."
        ))
    })?;
    Ok(Resource::Entities {
        table: name,
        key: Some(key),
    })
}

/// `PartitionKey='a',RowKey='b'` (in either order) into the key.
fn key_predicate(mut s: &str) -> Option<EntityKey> {
    let (mut pk, mut rk) = (None, None);
    loop {
        let (name, rest) = s.split_once('=')?;
        let (value, rest) = string_literal(rest)?;
        let slot = match name.trim() {
            "PartitionKey" => &mut pk,
            "RowKey" => &mut rk,
            _ => return None,
        };
        if slot.replace(value).is_some() {
            return None;
        }
        match rest.strip_prefix(',') {
            Some(more) => s = more,
            None if rest.trim().is_empty() => break,
            None => return None,
        }
    }
    Some(EntityKey::new(pk?, rk?))
}

/// An OData string literal at the start of `s` (`'it''s'`, quotes doubled),
/// its value and what follows it.
fn string_literal(s: &str) -> Option<(String, &str)> {
    let s = s.trim_start().strip_prefix('\'')?;
    let mut value = String::with_capacity(s.len());
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        if c == '\'' {
            if s[i + 1..].starts_with('\'') {
                value.push('\'');
                chars.next();
            } else {
                return Some((value, &s[i + 1..]));
            }
        } else {
            value.push(c);
        }
    }
    None
}

/// The JSON format an answer is written in: `$format` over `Accept`;
/// minimal metadata when neither names one (JSON is the only format served:
/// an Atom-only `Accept` is refused as the service refuses it since
/// 2015-12-11).
pub(crate) fn metadata(ctx: &Ctx<'_>) -> Result<Metadata, Failure> {
    metadata_of(ctx.param("$format").or_else(|| ctx.header("accept")))
}

/// The JSON format `asked` (a `$format` or `Accept`) names.
pub(crate) fn metadata_of(asked: Option<&str>) -> Result<Metadata, Failure> {
    let Some(asked) = asked else {
        return Ok(Metadata::Minimal);
    };
    let lower = asked.to_ascii_lowercase();
    Ok(if lower.contains("odata=nometadata") {
        Metadata::None
    } else if lower.contains("odata=fullmetadata") {
        Metadata::Full
    } else if lower.contains("atom") && !lower.contains("json") {
        return Err(Failure::new(
            415,
            "AtomFormatNotSupported",
            "Atom format is not supported.",
        ));
    } else {
        Metadata::Minimal
    })
}

/// The Content-Type of a JSON answer in `metadata`.
pub(crate) fn json_type(metadata: Metadata) -> &'static str {
    match metadata {
        Metadata::None => "application/json;odata=nometadata;streaming=true;charset=utf-8",
        Metadata::Full => "application/json;odata=fullmetadata;streaming=true;charset=utf-8",
        _ => "application/json;odata=minimalmetadata;streaming=true;charset=utf-8",
    }
}

/// The account's URL as the client reached it, for the answers' links.
pub(crate) fn base_url(ctx: &Ctx<'_>) -> String {
    let host = ctx
        .header("host")
        .or_else(|| ctx.parts.uri.authority().map(|a| a.as_str()))
        .unwrap_or("127.0.0.1");
    format!("http://{host}/{}", ctx.account.name)
}

/// The answer writer of this request, in the format it asks for.
pub(crate) fn answer<'a>(ctx: &'a Ctx<'_>, base: &'a str, metadata: Metadata) -> Answer<'a> {
    Answer {
        base,
        account: &ctx.account.name,
        metadata,
    }
}

/// What `Prefer` asks of a create or an insert: `Some(false)` for
/// `return-no-content`, `Some(true)` for `return-content`, `None` without it
/// (the service then returns the content, without `Preference-Applied`).
pub(crate) fn prefer_content(prefer: Option<&str>) -> Option<bool> {
    let prefer = prefer?.to_ascii_lowercase();
    if prefer.contains("return-no-content") {
        Some(false)
    } else if prefer.contains("return-content") {
        Some(true)
    } else {
        None
    }
}

/// A 201 with `body` or a 204, as `Prefer` asks, with `Preference-Applied`
/// when it asked.
pub(crate) fn created(
    prefer: Option<bool>,
    metadata: Metadata,
    body: impl FnOnce() -> Vec<u8>,
) -> Reply {
    let mut reply = match prefer {
        Some(false) => reply::empty(204),
        _ => reply::with_body(201, json_type(metadata), body().into()),
    };
    if let Some(content) = prefer {
        reply.headers_mut().insert(
            "preference-applied",
            HeaderValue::from_static(if content {
                "return-content"
            } else {
                "return-no-content"
            }),
        );
    }
    reply
}

/// Sets header `name` of `reply` to `value` (skipped if not a header value,
/// which the values set here always are).
pub(crate) fn set_header(reply: &mut Reply, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        reply.headers_mut().insert(name, v);
    }
}

/// A store's answer that is not the one its operation has.
pub(crate) fn unexpected(response: &Response) -> Failure {
    Failure::new(
        500,
        "InternalError",
        format!("the store answered {response:?}"),
    )
}

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

/// `$top`: 1 to 1,000 (the service refuses other values with 400).
pub(crate) fn top(ctx: &Ctx<'_>) -> Result<Option<usize>, Failure> {
    let Some(text) = ctx.param("$top") else {
        return Ok(None);
    };
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=crate::validate::MAX_PAGE_SIZE).contains(&n) => Ok(Some(n)),
        _ => Err(Failure::new(
            400,
            "InvalidInput",
            format!("The $top value {text:?} is not a number from 1 to 1000."),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_resource() {
        assert_eq!(resource("Tables").unwrap(), Resource::Tables);
        assert_eq!(resource("$batch").unwrap(), Resource::Batch);
        assert_eq!(
            resource("Tables('it''s')").unwrap(),
            Resource::Table("it's".into())
        );
        assert_eq!(
            resource("T1()").unwrap(),
            Resource::Entities {
                table: "T1",
                key: None
            }
        );
        assert_eq!(
            resource("T1").unwrap(),
            Resource::Entities {
                table: "T1",
                key: None
            }
        );
        assert_eq!(
            resource("T1(PartitionKey='a''b(,)',RowKey='')").unwrap(),
            Resource::Entities {
                table: "T1",
                key: Some(EntityKey::new("a'b(,)", ""))
            }
        );
        assert_eq!(
            resource("T1(RowKey='r', PartitionKey='p')").unwrap(),
            Resource::Entities {
                table: "T1",
                key: Some(EntityKey::new("p", "r"))
            }
        );
        for bad in [
            "T1(PartitionKey='a')",
            "T1(PartitionKey='a',RowKey='b',RowKey='c')",
            "T1(PartitionKey='a,RowKey='b')",
            "T1(PartitionKey=a,RowKey=b)",
            "T1(Other='a',RowKey='b')",
            "T1(PartitionKey='a',RowKey='b'",
            "a/b",
            "(PartitionKey='a',RowKey='b')",
        ] {
            assert!(resource(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn prefer_says_whether_content_is_returned() {
        assert_eq!(prefer_content(Some("return-no-content")), Some(false));
        assert_eq!(prefer_content(Some("return-content")), Some(true));
        assert_eq!(prefer_content(Some("odata.continue-on-error")), None);
        assert_eq!(prefer_content(None), None);
    }
}
