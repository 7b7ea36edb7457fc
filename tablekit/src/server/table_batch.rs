//! Entity group transactions: `POST /$batch`, one changeset of up to 100
//! writes to one partition of one table, carried out as one
//! [`Operation::Transaction`] and answered as the service answers it.

use bytes::Bytes;
use http::{HeaderValue, Response as HttpResponse, StatusCode};
use http_body_util::Full;

use super::auth::{Need, Perm};
use super::reply::Reply;
use super::table::{json_type, metadata_of, prefer_content, resource, unexpected, Resource};
use super::table_entity::{entity_of, if_match};
use super::{Ctx, Failure};
use crate::backend::http::batch::{encode_response, parse_request, PartAnswer, RequestPart};
use crate::backend::{BatchKind, BatchOp, Operation, Response};
use crate::codec::answer::Answer;
use crate::codec::bag::CheckedBag;
use crate::entity::{DynamicEntity, ETag, EntityKey, UpdateMode};
use crate::options::Metadata;
use crate::validate::{MAX_BATCH_BYTES, MAX_BATCH_OPERATIONS};

/// One operation as read, before the store.
struct Planned {
    op: BatchOp,
    returned: Returned,
}

/// The entity of an insert whose answer returns it (no
/// `Prefer: return-no-content`), its format, and what `Prefer` asked.
type Returned = Option<(DynamicEntity, Metadata, Option<bool>)>;

/// `POST /$batch`.
pub(crate) async fn batch(ctx: &Ctx<'_>) -> Result<Reply, Failure> {
    if ctx.body.len() > MAX_BATCH_BYTES {
        return Err(Failure::new(
            413,
            "RequestBodyTooLarge",
            "The request body is too large and exceeds the maximum permissible limit.",
        ));
    }
    let content_type = ctx.header("content-type").unwrap_or("");
    if !content_type
        .to_ascii_lowercase()
        .starts_with("multipart/mixed")
    {
        return Err(Failure::invalid(
            "A batch's Content-Type must be multipart/mixed with a boundary.",
        ));
    }
    let parts = parse_request(content_type, &ctx.body)
        .map_err(|e| Failure::invalid(format!("The batch request body is not valid. ({e})")))?;
    // A refusal of one operation is the changeset's answer, as a failure of
    // the store is.
    let refuse = |index: usize, failure: Failure| {
        Ok(multipart(&[failed_part(index, &failure, ctx.request_id)]))
    };
    if parts.is_empty() {
        return refuse(
            0,
            Failure::invalid("One of the request inputs is not valid."),
        );
    }
    if parts.len() > MAX_BATCH_OPERATIONS {
        // The service names the 100th operation whatever the count.
        return refuse(
            MAX_BATCH_OPERATIONS - 1,
            Failure::invalid(
                "The batch request operation exceeds the maximum 100 changes per change set.",
            ),
        );
    }
    let base = super::table::base_url(ctx);
    let mut table: Option<String> = None;
    let mut ops = Vec::with_capacity(parts.len());
    let mut returned = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let p = match plan(ctx, part, &mut table) {
            Ok(p) => p,
            Err(f) => return refuse(i, f),
        };
        ops.push(p.op);
        returned.push(p.returned);
    }
    let table = table.unwrap_or_default();
    let kinds: Vec<(BatchKind, EntityKey)> = ops
        .iter()
        .map(|o| (o.kind.clone(), o.key.clone()))
        .collect();
    let result = ctx
        .account
        .tables
        .execute(Operation::Transaction { table: &table, ops })
        .await;
    let answers = match result {
        Ok(Response::Transaction(etags)) => {
            let mut answers = Vec::with_capacity(etags.len());
            for ((r, etag), (kind, key)) in returned.into_iter().zip(etags).zip(kinds) {
                answers.push(success(&base, ctx, &table, r, &kind, &key, etag));
            }
            answers
        }
        Ok(other) => return Err(unexpected(&other)),
        Err(e) => {
            let failure = Failure::from(e);
            match failure.batch_index {
                Some(i) => vec![failed_part(i, &failure, ctx.request_id)],
                // A refusal of the whole request (its size): a plain answer.
                None => return Err(failure),
            }
        }
    };
    Ok(multipart(&answers))
}

/// Reads one part into its operation, checked as a single request's.
fn plan(
    ctx: &Ctx<'_>,
    part: &RequestPart<'_>,
    table: &mut Option<String>,
) -> Result<Planned, Failure> {
    match part.changeset {
        Some(0) if !part.method.eq_ignore_ascii_case("GET") => {}
        Some(0) => {
            return Err(Failure::invalid(
                "A changeset holds writes only: a query is not allowed in it.",
            ))
        }
        // The service carries out the first changeset only.
        Some(_) => {
            return Err(Failure::invalid(
                "The Table service supports a single changeset in a batch.",
            ))
        }
        None => {
            return Err(Failure::invalid(
                "A batch holds one changeset of writes: a query is not served in a batch.",
            ))
        }
    }
    let path = part_path(part.url, &ctx.account.name)?;
    let Resource::Entities { table: name, key } = resource(&path)? else {
        return Err(Failure::invalid(format!(
            "The batch operation's URL {} names no table or entity.",
            part.url
        )));
    };
    match table {
        Some(t) if !t.eq_ignore_ascii_case(name) => {
            return Err(Failure::invalid(
                "All operations of a batch must be on the same table.",
            ));
        }
        Some(_) => {}
        None => *table = Some(name.to_owned()),
    }
    let method = match part.header("x-http-method") {
        Some(m) if part.method.eq_ignore_ascii_case("POST") => m,
        _ => part.method,
    }
    .to_ascii_uppercase();
    let condition = if_match(part.header("if-match"));
    let kind = match (method.as_str(), &key, condition) {
        ("POST", None, _) => BatchKind::Insert,
        ("PUT", Some(_), None) => BatchKind::Upsert(UpdateMode::Replace),
        ("MERGE" | "PATCH", Some(_), None) => BatchKind::Upsert(UpdateMode::Merge),
        ("PUT", Some(_), Some(m)) => BatchKind::Update(UpdateMode::Replace, m),
        ("MERGE" | "PATCH", Some(_), Some(m)) => BatchKind::Update(UpdateMode::Merge, m),
        ("DELETE", Some(_), Some(m)) => BatchKind::Delete(m),
        ("DELETE", Some(_), None) => {
            return Err(Failure::new(
                400,
                "MissingRequiredHeader",
                "An HTTP header that's mandatory for this request is not specified. (If-Match)",
            ))
        }
        _ => {
            return Err(Failure::invalid(format!(
                "The batch operation {method} {} is not a write of an entity.",
                part.url
            )))
        }
    };
    let (key, entity) = match (&kind, key) {
        (BatchKind::Delete(_), Some(key)) => {
            key.validate().map_err(Failure::from)?;
            (key, None)
        }
        (_, url_key) => {
            let entity = entity_of(part.body, url_key.as_ref())?;
            let key = EntityKey::new(&*entity.partition_key, &*entity.row_key);
            (key, Some(entity))
        }
    };
    let object = |perm| Need::Object {
        container: name,
        key: Some((&key.partition_key, &key.row_key)),
        perm,
    };
    match &kind {
        BatchKind::Insert => ctx.access.check(object(Perm::Add))?,
        BatchKind::Upsert(_) => {
            ctx.access.check(object(Perm::Add))?;
            ctx.access.check(object(Perm::Update))?;
        }
        BatchKind::Update(..) => ctx.access.check(object(Perm::Update))?,
        BatchKind::Delete(_) => ctx.access.check(object(Perm::Delete))?,
    }
    let prefer = prefer_content(part.header("prefer"));
    let returned = match (&kind, &entity) {
        (BatchKind::Insert, Some(e)) if prefer != Some(false) => {
            let metadata = metadata_of(part.header("accept"))?;
            Some((e.clone(), metadata, prefer))
        }
        _ => None,
    };
    let (bag, bag_json_len) = match entity {
        Some(e) => {
            let bag = CheckedBag::of(&e, None)?;
            let len = bag.json_len();
            (Some(bag), len)
        }
        None => (None, 0),
    };
    Ok(Planned {
        op: BatchOp {
            kind,
            key,
            body: None,
            bag,
            bag_json_len,
        },
        returned,
    })
}

/// The path after the account of a batch operation's URL (absolute, or a
/// path), percent-decoded.
fn part_path(url: &str, account: &str) -> Result<String, Failure> {
    let path = match url.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("", |i| &rest[i..]),
        None => url,
    };
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let decoded = percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .map_err(|_| Failure::new(400, "InvalidUri", "The path is not UTF-8."))?;
    let trimmed = decoded.trim_start_matches('/');
    let rest = trimmed
        .strip_prefix(account)
        .and_then(|r| r.strip_prefix('/'))
        .unwrap_or(trimmed);
    Ok(rest.to_owned())
}

/// The answer of one successful operation.
fn success(
    base: &str,
    ctx: &Ctx<'_>,
    table: &str,
    returned: Returned,
    kind: &BatchKind,
    key: &EntityKey,
    etag: Option<ETag>,
) -> PartAnswer {
    let mut headers = vec![
        ("X-Content-Type-Options", "nosniff".to_owned()),
        ("Cache-Control", "no-cache".to_owned()),
        ("DataServiceVersion", "3.0;".to_owned()),
    ];
    if !matches!(kind, BatchKind::Delete(_)) {
        let link = format!(
            "{base}/{}",
            crate::backend::http::wire::entity_resource(table, key)
        );
        headers.push(("Location", link.clone()));
        headers.push(("DataServiceId", link));
    }
    let mut status = 204;
    let mut body = Vec::new();
    if let Some((mut entity, metadata, prefer)) = returned {
        status = 201;
        entity.etag.clone_from(&etag);
        entity.timestamp = etag.as_ref().and_then(ETag::timestamp);
        let answer = Answer {
            base,
            account: &ctx.account.name,
            metadata,
        };
        body = answer.entity(table, &entity, None);
        headers.push(("Content-Type", json_type(metadata).to_owned()));
        if prefer == Some(true) {
            headers.push(("Preference-Applied", "return-content".to_owned()));
        }
    } else if matches!(kind, BatchKind::Insert) {
        headers.push(("Preference-Applied", "return-no-content".to_owned()));
    }
    if let Some(etag) = etag {
        headers.push(("ETag", etag.as_str().to_owned()));
    }
    PartAnswer {
        status,
        headers,
        body,
    }
}

/// The answer of the failing operation `index`: its status and the
/// service's error JSON, the message led by the index.
fn failed_part(index: usize, failure: &Failure, request_id: &str) -> PartAnswer {
    let time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let message = format!(
        "{index}:{}\nRequestId:{request_id}\nTime:{time}",
        failure.message
    );
    let body = serde_json::json!({
        "odata.error": {
            "code": failure.code,
            "message": { "lang": "en-US", "value": message },
        }
    })
    .to_string();
    PartAnswer {
        status: failure.status,
        headers: vec![
            ("Content-ID", (index + 1).to_string()),
            ("X-Content-Type-Options", "nosniff".to_owned()),
            ("Cache-Control", "no-cache".to_owned()),
            ("DataServiceVersion", "3.0;".to_owned()),
            (
                "Content-Type",
                "application/json;odata=minimalmetadata;streaming=true;charset=utf-8".to_owned(),
            ),
        ],
        body: body.into_bytes(),
    }
}

/// The 202 multipart answer holding `parts`.
fn multipart(parts: &[PartAnswer]) -> Reply {
    let encoded = encode_response(parts);
    let mut reply = HttpResponse::new(Full::new(Bytes::from(encoded.body)));
    *reply.status_mut() = StatusCode::ACCEPTED;
    if let Ok(ct) = HeaderValue::from_str(&encoded.content_type) {
        reply.headers_mut().insert(http::header::CONTENT_TYPE, ct);
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parts_url_gives_the_path_after_the_account() {
        let account = "devstoreaccount1";
        for (url, path) in [
            (
                "http://127.0.0.1:10002/devstoreaccount1/T1(PartitionKey='a%27%27',RowKey='b')",
                "T1(PartitionKey='a''',RowKey='b')",
            ),
            ("https://acct.table.core.windows.net/T1", "T1"),
            ("/devstoreaccount1/T1", "T1"),
            ("T1()", "T1()"),
            ("http://h/devstoreaccount1/T1()?$select=A", "T1()"),
        ] {
            assert_eq!(part_path(url, account).unwrap(), path, "{url}");
        }
    }
}
