//! The Queue service, answered from the embedded queue store.
//!
//! Every input is checked as the service checks it, with the service's
//! status and error code, before the store sees it (the store trusts its
//! clients, which check first): queue names, metadata, message sizes, the
//! query parameters' ranges, the XML bodies. Where Azurite and the service
//! differ, the answer is the service's.

use std::time::Duration;

use http::{HeaderName, HeaderValue, Method};

use super::auth::{Need, Perm};
use super::reply::{self, Reply};
use super::{Ctx, Failure};
use crate::backend::admin::{AdminOp, AdminResponse};
use crate::backend::http::queue::serve::{self, Listed, MessageBody};
use crate::backend::queue::{QueueOp, QueueResponse};
use crate::error::ErrorCode;

/// The most a visibility timeout (or delay) may be: 7 days, in seconds.
const MAX_VISIBILITY_SECS: i64 = 7 * 24 * 3600;
/// The largest message text, in UTF-8 bytes after XML unescaping.
const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// The most metadata a queue holds: names and values, 8 KiB.
const MAX_METADATA_BYTES: usize = 8 * 1024;
/// The most messages one receive or peek returns.
const MAX_MESSAGES: i64 = 32;
/// The most queues one listing page holds.
const MAX_LIST: usize = 5000;
/// A receive's visibility timeout when it names none.
const DEFAULT_RECEIVE_VISIBILITY: Duration = Duration::from_secs(30);
/// The letters a queue's stored access policy may grant.
const QUEUE_POLICY_LETTERS: &str = "raup";

/// Answers one Queue service request.
pub(crate) async fn handle(ctx: Ctx<'_>) -> Result<Reply, Failure> {
    let method = ctx.parts.method.clone();
    let path = ctx.path.trim_end_matches('/');
    if path.is_empty() {
        return service(&ctx, &method).await;
    }
    let mut segments = path.splitn(3, '/');
    let queue = segments.next().unwrap_or_default();
    check_queue_name(queue)?;
    match (segments.next(), segments.next()) {
        (None, _) => queue_request(&ctx, &method, queue).await,
        (Some("messages"), None) => messages(&ctx, &method, queue).await,
        (Some("messages"), Some(id)) => message(&ctx, &method, queue, id).await,
        _ => Err(Failure::new(
            400,
            "InvalidUri",
            format!(
                "The requested URI /{} does not represent any resource on the server.",
                ctx.path
            ),
        )),
    }
}

/// The account-level requests: list, properties, stats.
async fn service(ctx: &Ctx<'_>, method: &Method) -> Result<Reply, Failure> {
    let restype = ctx.param("restype");
    match (method, restype, ctx.param("comp")) {
        (&Method::GET, None, Some("list")) => list(ctx).await,
        (&Method::GET, Some("service"), Some("properties")) => {
            ctx.access.check(Need::Service(Perm::Read))?;
            let props = admin(ctx, AdminOp::GetProperties)
                .await?
                .into_properties()
                .map_err(Failure::from)?;
            Ok(xml(200, crate::service_properties::encode(&props)))
        }
        (&Method::PUT, Some("service"), Some("properties")) => {
            ctx.access.check(Need::Service(Perm::Write))?;
            let props = crate::service_properties::decode(&ctx.body)
                .map_err(|_| invalid_xml("The service properties are not the expected XML."))?;
            crate::service_properties::check(&props).map_err(|e| invalid_xml(e.to_string()))?;
            admin(ctx, AdminOp::SetProperties { properties: &props }).await?;
            Ok(reply::empty(202))
        }
        (&Method::GET, Some("service"), Some("stats")) => {
            ctx.access.check(Need::Service(Perm::Read))?;
            let stats = admin(ctx, AdminOp::Stats)
                .await?
                .into_stats()
                .map_err(Failure::from)?;
            Ok(xml(200, crate::backend::http::admin::encode_stats(&stats)))
        }
        (_, _, comp) => Err(unsupported(method, restype, comp)),
    }
}

/// The requests on a queue itself: create, delete, metadata, ACL.
async fn queue_request(ctx: &Ctx<'_>, method: &Method, queue: &str) -> Result<Reply, Failure> {
    let comp = ctx.param("comp");
    match (method, comp) {
        (&Method::PUT, None) => create(ctx, queue).await,
        (&Method::DELETE, None) => {
            ctx.access.check(Need::Service(Perm::Delete))?;
            run(ctx, QueueOp::Delete { queue }).await?;
            Ok(reply::empty(204))
        }
        (&Method::GET | &Method::HEAD, Some("metadata")) => {
            ctx.access.check(Need::Container {
                name: queue,
                perm: Perm::Read,
            })?;
            let QueueResponse::Properties { count, metadata } =
                run(ctx, QueueOp::Properties { queue }).await?
            else {
                return Err(unexpected("metadata"));
            };
            let mut answer = reply::empty(200);
            let headers = answer.headers_mut();
            headers.insert("x-ms-approximate-messages-count", HeaderValue::from(count));
            for (name, value) in &metadata {
                if let (Ok(n), Ok(v)) = (
                    HeaderName::from_bytes(format!("x-ms-meta-{name}").as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    headers.append(n, v);
                }
            }
            Ok(answer)
        }
        (&Method::PUT, Some("metadata")) => {
            ctx.access.check(Need::Container {
                name: queue,
                perm: Perm::Write,
            })?;
            let metadata = request_metadata(ctx)?;
            run(
                ctx,
                QueueOp::SetMetadata {
                    queue,
                    metadata: &metadata,
                },
            )
            .await?;
            Ok(reply::empty(204))
        }
        (&Method::GET | &Method::HEAD, Some("acl")) => {
            ctx.access.check(Need::Container {
                name: queue,
                perm: Perm::Read,
            })?;
            let policies = admin(ctx, AdminOp::GetAcl { resource: queue })
                .await?
                .into_acl()
                .map_err(Failure::from)?;
            Ok(xml(200, crate::acl::encode(&policies)))
        }
        (&Method::PUT, Some("acl")) => {
            ctx.access.check(Need::Container {
                name: queue,
                perm: Perm::Write,
            })?;
            let policies = request_policies(&ctx.body)?;
            admin(
                ctx,
                AdminOp::SetAcl {
                    resource: queue,
                    policies: &policies,
                },
            )
            .await?;
            Ok(reply::empty(204))
        }
        (_, comp) => Err(unsupported(method, None, comp)),
    }
}

/// Create Queue: 201 when new; for an existing queue, 204 if its metadata is
/// the request's, else 409 `QueueAlreadyExists`.
async fn create(ctx: &Ctx<'_>, queue: &str) -> Result<Reply, Failure> {
    ctx.access.check(Need::Service(Perm::Create))?;
    let wanted = request_metadata(ctx)?;
    let existing = match ctx.account.queues.queue(QueueOp::Create { queue }).await {
        Ok(QueueResponse::Created(true)) => {
            if !wanted.is_empty() {
                run(
                    ctx,
                    QueueOp::SetMetadata {
                        queue,
                        metadata: &wanted,
                    },
                )
                .await?;
            }
            return Ok(reply::empty(201));
        }
        // There already, without metadata.
        Ok(QueueResponse::Created(false)) => Vec::new(),
        Ok(_) => return Err(unexpected("create")),
        // There already, with metadata (the store refuses to compare it).
        Err(e) if e.code() == Some(&ErrorCode::QueueAlreadyExists) => {
            match run(ctx, QueueOp::Properties { queue }).await? {
                QueueResponse::Properties { metadata, .. } => metadata,
                _ => return Err(unexpected("metadata")),
            }
        }
        Err(e) => return Err(e.into()),
    };
    if existing == wanted {
        Ok(reply::empty(204))
    } else {
        Err(Failure::new(
            409,
            "QueueAlreadyExists",
            "The specified queue already exists.",
        ))
    }
}

/// `/<queue>/messages`: send, receive, peek, clear.
async fn messages(ctx: &Ctx<'_>, method: &Method, queue: &str) -> Result<Reply, Failure> {
    match *method {
        Method::POST => send(ctx, queue).await,
        Method::GET
            if ctx
                .param("peekonly")
                .is_some_and(|p| p.eq_ignore_ascii_case("true")) =>
        {
            ctx.access.check(Need::Object {
                container: queue,
                key: None,
                perm: Perm::Read,
            })?;
            let max = number_of_messages(ctx)?;
            let QueueResponse::Messages(found) = run(ctx, QueueOp::Peek { queue, max }).await?
            else {
                return Err(unexpected("peek"));
            };
            Ok(xml(200, serve::encode_messages(&found, Listed::Peeked)))
        }
        Method::GET => {
            ctx.access.check(Need::Object {
                container: queue,
                key: None,
                perm: Perm::Process,
            })?;
            let max = number_of_messages(ctx)?;
            let visibility_timeout = match seconds(ctx, "visibilitytimeout")? {
                None => DEFAULT_RECEIVE_VISIBILITY,
                Some(s) => in_range("visibilitytimeout", s, 1, MAX_VISIBILITY_SECS)?,
            };
            let QueueResponse::Messages(found) = run(
                ctx,
                QueueOp::Receive {
                    queue,
                    max,
                    visibility_timeout,
                },
            )
            .await?
            else {
                return Err(unexpected("receive"));
            };
            Ok(xml(200, serve::encode_messages(&found, Listed::Received)))
        }
        Method::DELETE => {
            ctx.access.check(Need::Object {
                container: queue,
                key: None,
                perm: Perm::Delete,
            })?;
            run(ctx, QueueOp::Clear { queue }).await?;
            Ok(reply::empty(204))
        }
        _ => Err(unsupported(method, None, None)),
    }
}

/// Put Message.
async fn send(ctx: &Ctx<'_>, queue: &str) -> Result<Reply, Failure> {
    ctx.access.check(Need::Object {
        container: queue,
        key: None,
        perm: Perm::Add,
    })?;
    let text = match serve::decode_message_body(&ctx.body) {
        MessageBody::Text(t) => t,
        MessageBody::NoText | MessageBody::Malformed => {
            return Err(invalid_xml(
                "The body is not a QueueMessage with a MessageText.",
            ))
        }
    };
    check_message_size(&text)?;
    let visibility = seconds(ctx, "visibilitytimeout")?;
    let visibility_delay = match visibility {
        None => Duration::ZERO,
        Some(s) => in_range("visibilitytimeout", s, 0, MAX_VISIBILITY_SECS)?,
    };
    let time_to_live = match seconds(ctx, "messagettl")? {
        None => None,
        Some(-1) => Some(None),
        Some(ttl) if ttl < 1 => {
            return Err(Failure::new(
                400,
                "InvalidQueryParameterValue",
                format!(
                    "Value for one of the query parameters specified in the request URI is \
                     invalid. messagettl={ttl}: 1 or more seconds, or -1 for never."
                ),
            ))
        }
        Some(ttl) => {
            if visibility.is_some_and(|v| v >= ttl) {
                return Err(Failure::new(
                    400,
                    "InvalidQueryParameterValue",
                    "Value for one of the query parameters specified in the request URI is \
                     invalid. The visibilitytimeout must be smaller than the messagettl.",
                ));
            }
            Some(Some(Duration::from_secs(ttl.unsigned_abs())))
        }
    };
    let QueueResponse::Sent(sent) = run(
        ctx,
        QueueOp::Send {
            queue,
            text: &text,
            visibility_delay,
            time_to_live,
        },
    )
    .await?
    else {
        return Err(unexpected("send"));
    };
    Ok(xml(201, serve::encode_messages(&[sent], Listed::Sent)))
}

/// `/<queue>/messages/<id>`: update, delete.
async fn message(ctx: &Ctx<'_>, method: &Method, queue: &str, id: &str) -> Result<Reply, Failure> {
    let pop_receipt = || {
        ctx.param("popreceipt").ok_or_else(|| {
            Failure::new(
                400,
                "MissingRequiredQueryParameter",
                "A query parameter that's mandatory for this request is not specified. \
                 popreceipt",
            )
        })
    };
    match *method {
        Method::PUT => {
            ctx.access.check(Need::Object {
                container: queue,
                key: None,
                perm: Perm::Update,
            })?;
            let pop_receipt = pop_receipt()?;
            let Some(s) = seconds(ctx, "visibilitytimeout")? else {
                return Err(Failure::new(
                    400,
                    "MissingRequiredQueryParameter",
                    "A query parameter that's mandatory for this request is not specified. \
                     visibilitytimeout",
                ));
            };
            let visibility_timeout = in_range("visibilitytimeout", s, 0, MAX_VISIBILITY_SECS)?;
            let text = if ctx.body.is_empty() {
                None
            } else {
                match serve::decode_message_body(&ctx.body) {
                    MessageBody::Text(t) => {
                        check_message_size(&t)?;
                        Some(t)
                    }
                    MessageBody::NoText => None,
                    MessageBody::Malformed => {
                        return Err(invalid_xml("The body is not a QueueMessage."))
                    }
                }
            };
            let QueueResponse::Updated {
                pop_receipt,
                next_visible_on,
            } = run(
                ctx,
                QueueOp::Update {
                    queue,
                    id,
                    pop_receipt,
                    visibility_timeout,
                    text: text.as_deref(),
                },
            )
            .await?
            else {
                return Err(unexpected("update"));
            };
            let mut answer = reply::empty(204);
            let headers = answer.headers_mut();
            if let Ok(v) = HeaderValue::from_str(&pop_receipt) {
                headers.insert("x-ms-popreceipt", v);
            }
            if let Ok(v) = HeaderValue::from_str(&reply::http_date(next_visible_on)) {
                headers.insert("x-ms-time-next-visible", v);
            }
            Ok(answer)
        }
        Method::DELETE => {
            ctx.access.check(Need::Object {
                container: queue,
                key: None,
                perm: Perm::Process,
            })?;
            let pop_receipt = pop_receipt()?;
            run(
                ctx,
                QueueOp::DeleteMessage {
                    queue,
                    id,
                    pop_receipt,
                },
            )
            .await?;
            Ok(reply::empty(204))
        }
        _ => Err(unsupported(method, None, None)),
    }
}

/// List Queues: `prefix`, `marker`, `maxresults`, `include=metadata`.
async fn list(ctx: &Ctx<'_>) -> Result<Reply, Failure> {
    ctx.access.check(Need::Service(Perm::List))?;
    let account = &ctx.account.name;
    let prefix = ctx.param("prefix").filter(|p| !p.is_empty());
    let marker = ctx.param("marker").filter(|m| !m.is_empty());
    let max_results = match ctx.param("maxresults") {
        None => None,
        Some(text) => {
            let n = integer("maxresults", text)?;
            if n < 1 {
                return Err(out_of_range("maxresults", text));
            }
            Some(usize::try_from(n).unwrap_or(usize::MAX))
        }
    };
    let mut with_metadata = false;
    if let Some(include) = ctx.param("include") {
        for item in include.split(',').filter(|i| !i.is_empty()) {
            if item == "metadata" {
                with_metadata = true;
            } else {
                return Err(Failure::new(
                    400,
                    "InvalidQueryParameterValue",
                    format!(
                        "Value for one of the query parameters specified in the request URI is \
                         invalid. include={include}"
                    ),
                ));
            }
        }
    }
    // The service's markers are `/<account>/<first name of the page>`.
    let from = marker.map(|m| {
        m.strip_prefix(&format!("/{account}/"))
            .unwrap_or(m)
            .to_owned()
    });
    let QueueResponse::Queues {
        queues,
        next_marker,
    } = run(
        ctx,
        QueueOp::List {
            prefix,
            marker: from.as_deref(),
            max: Some(max_results.unwrap_or(MAX_LIST).min(MAX_LIST)),
            metadata: with_metadata,
        },
    )
    .await?
    else {
        return Err(unexpected("list"));
    };
    let host = ctx.header("host").unwrap_or("127.0.0.1");
    let endpoint = format!("http://{host}/{account}/");
    let next_marker = next_marker.map(|n| format!("/{account}/{n}"));
    Ok(xml(
        200,
        serve::encode_queue_listing(&serve::Listing {
            endpoint: &endpoint,
            prefix,
            marker,
            max_results,
            queues: &queues,
            with_metadata,
            next_marker: next_marker.as_deref(),
        }),
    ))
}

/// Runs `op` on the account's queue store.
async fn run(ctx: &Ctx<'_>, op: QueueOp<'_>) -> Result<QueueResponse, Failure> {
    Ok(ctx.account.queues.queue(op).await?)
}

/// Runs `op` on the account's queue ACLs and settings.
async fn admin(ctx: &Ctx<'_>, op: AdminOp<'_>) -> Result<AdminResponse, Failure> {
    Ok(ctx.account.queues.admin(op).await?)
}

fn unexpected(what: &str) -> Failure {
    Failure::new(
        500,
        "InternalError",
        format!("The store answered a {what} with something else."),
    )
}

/// An XML answer.
fn xml(status: u16, body: String) -> Reply {
    reply::with_body(status, "application/xml", body.into())
}

fn invalid_xml(detail: impl Into<String>) -> Failure {
    Failure::new(
        400,
        "InvalidXmlDocument",
        format!(
            "XML specified is not syntactically valid. {}",
            detail.into()
        ),
    )
}

/// A method or `comp` the resource does not answer.
fn unsupported(method: &Method, restype: Option<&str>, comp: Option<&str>) -> Failure {
    match comp {
        Some(comp) if !matches!(comp, "list" | "properties" | "stats" | "metadata" | "acl") => {
            Failure::new(
                400,
                "InvalidQueryParameterValue",
                format!(
                    "Value for one of the query parameters specified in the request URI is \
                     invalid. comp={comp}"
                ),
            )
        }
        _ if restype.is_some_and(|r| r != "service") => Failure::new(
            400,
            "InvalidQueryParameterValue",
            format!(
                "Value for one of the query parameters specified in the request URI is \
                 invalid. restype={}",
                restype.unwrap_or_default()
            ),
        ),
        _ => Failure::new(
            405,
            "UnsupportedHttpVerb",
            format!("The resource doesn't support the specified HTTP verb {method}."),
        ),
    }
}

/// A queue name as the service checks it: 3 to 63 characters
/// (`OutOfRangeInput`), lower-case letters, digits and single hyphens, not at
/// either end (`InvalidResourceName`).
fn check_queue_name(name: &str) -> Result<(), Failure> {
    if !(3..=63).contains(&name.len()) {
        return Err(Failure::new(
            400,
            "OutOfRangeInput",
            "The specified resource name length is not within the permissible limits.",
        ));
    }
    let chars_ok = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !chars_ok || name.split('-').any(str::is_empty) {
        return Err(Failure::new(
            400,
            "InvalidResourceName",
            "The specified resource name contains invalid characters.",
        ));
    }
    Ok(())
}

/// The `x-ms-meta-*` headers of the request, checked as the service checks
/// them: names are C# identifiers, each once in any case (`InvalidMetadata`);
/// 8 KiB in all (`MetadataTooLarge`). Names in lower case, sorted.
fn request_metadata(ctx: &Ctx<'_>) -> Result<Vec<(String, String)>, Failure> {
    let invalid = |why: String| {
        Failure::new(
            400,
            "InvalidMetadata",
            format!("The metadata specified is invalid. {why}"),
        )
    };
    let mut out: Vec<(String, String)> = Vec::new();
    let mut size = 0;
    for (name, value) in &ctx.parts.headers {
        let Some(meta) = name.as_str().strip_prefix("x-ms-meta-") else {
            continue;
        };
        let identifier = meta
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && meta.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !identifier {
            return Err(invalid(format!("The name {meta:?} is not an identifier.")));
        }
        let value = value
            .to_str()
            .map_err(|_| invalid(format!("The value of {meta:?} is not ASCII.")))?;
        let meta = meta.to_ascii_lowercase();
        if out.iter().any(|(n, _)| *n == meta) {
            return Err(invalid(format!("The name {meta:?} is given twice.")));
        }
        size += meta.len() + value.len();
        out.push((meta, value.to_owned()));
    }
    if size > MAX_METADATA_BYTES {
        return Err(Failure::new(
            400,
            "MetadataTooLarge",
            format!(
                "The size of the specified metadata exceeds the maximum size permitted: \
                 {size} bytes, at most {MAX_METADATA_BYTES}."
            ),
        ));
    }
    out.sort();
    Ok(out)
}

/// The `SignedIdentifiers` of a Set Queue ACL request, checked as the
/// service checks them: at most five, ids of 1 to 64 characters, each once,
/// ISO 8601 times, the queue's permission letters (`InvalidXmlDocument`).
fn request_policies(body: &[u8]) -> Result<Vec<crate::acl::RawPolicy>, Failure> {
    let mut policies = crate::acl::decode(body)
        .map_err(|_| invalid_xml("The access policies are not the expected XML."))?;
    if policies.len() > crate::acl::MAX_POLICIES {
        return Err(invalid_xml(format!(
            "A queue holds at most {} stored access policies.",
            crate::acl::MAX_POLICIES
        )));
    }
    for (i, p) in policies.iter().enumerate() {
        crate::account::check_policy_id(&p.id).map_err(invalid_xml)?;
        if policies[..i].iter().any(|q| q.id == p.id) {
            return Err(invalid_xml(format!("The id {:?} is given twice.", p.id)));
        }
        if let Some(letters) = &p.permission {
            if let Some(c) = letters.chars().find(|c| !QUEUE_POLICY_LETTERS.contains(*c)) {
                return Err(invalid_xml(format!(
                    "{c:?} is not a queue permission (r, a, u, p)."
                )));
            }
        }
    }
    for p in &mut policies {
        for time in [&mut p.start, &mut p.expiry].into_iter().flatten() {
            let t = acl_time(time)
                .ok_or_else(|| invalid_xml(format!("{time:?} is not an ISO 8601 time.")))?;
            // Kept and answered as the service writes them.
            *time = format!(
                "{}.{:07}Z",
                t.format("%Y-%m-%dT%H:%M:%S"),
                t.timestamp_subsec_nanos() / 100
            );
        }
    }
    Ok(policies)
}

/// A policy's start or expiry in one of the ISO 8601 forms the service takes:
/// `YYYY-MM-DD`, `YYYY-MM-DDThh:mmTZD`, `YYYY-MM-DDThh:mm:ss[.f]TZD`.
fn acl_time(text: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    use chrono::{DateTime, NaiveDate, NaiveDateTime};
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.to_utc());
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Some(d.and_hms_opt(0, 0, 0)?.and_utc());
    }
    if let Some(naive) = text.strip_suffix('Z') {
        return NaiveDateTime::parse_from_str(naive, "%Y-%m-%dT%H:%M")
            .ok()
            .map(|t| t.and_utc());
    }
    DateTime::parse_from_str(text, "%Y-%m-%dT%H:%M%:z")
        .ok()
        .map(|t| t.to_utc())
}

/// A message text within the service's 64 KiB (UTF-8 bytes, as unescaped).
fn check_message_size(text: &str) -> Result<(), Failure> {
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(Failure::new(
            413,
            "RequestBodyTooLarge",
            format!(
                "The request body is too large and exceeds the maximum permissible limit: \
                 a message text of {} bytes, at most {MAX_MESSAGE_BYTES}.",
                text.len()
            ),
        ));
    }
    Ok(())
}

/// `numofmessages`: 1 (when absent) to 32.
fn number_of_messages(ctx: &Ctx<'_>) -> Result<u8, Failure> {
    match ctx.param("numofmessages") {
        None => Ok(1),
        Some(text) => {
            let n = integer("numofmessages", text)?;
            if !(1..=MAX_MESSAGES).contains(&n) {
                return Err(out_of_range("numofmessages", text));
            }
            Ok(u8::try_from(n).unwrap_or(1))
        }
    }
}

/// An integer query parameter, if given.
fn seconds(ctx: &Ctx<'_>, name: &str) -> Result<Option<i64>, Failure> {
    ctx.param(name).map(|t| integer(name, t)).transpose()
}

/// A query parameter's text as an integer (`InvalidQueryParameterValue` if not one).
fn integer(name: &str, text: &str) -> Result<i64, Failure> {
    text.parse().map_err(|_| {
        Failure::new(
            400,
            "InvalidQueryParameterValue",
            format!(
                "Value for one of the query parameters specified in the request URI is \
                 invalid. {name}={text}"
            ),
        )
    })
}

/// `secs` as a duration if within `min..=max` (`OutOfRangeQueryParameterValue` if not).
fn in_range(name: &str, secs: i64, min: i64, max: i64) -> Result<Duration, Failure> {
    if !(min..=max).contains(&secs) {
        return Err(out_of_range(name, &secs.to_string()));
    }
    Ok(Duration::from_secs(secs.unsigned_abs()))
}

fn out_of_range(name: &str, text: &str) -> Failure {
    Failure::new(
        400,
        "OutOfRangeQueryParameterValue",
        format!(
            "One of the query parameters specified in the request URI is outside the \
             permissible range. {name}={text}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_are_refused_with_the_services_two_codes() {
        for ok in ["abc", "a-b-c", "q1", &"a".repeat(63)] {
            if ok.len() >= 3 {
                assert!(check_queue_name(ok).is_ok(), "{ok}");
            }
        }
        for (name, code) in [
            ("ab", "OutOfRangeInput"),
            (&"a".repeat(64) as &str, "OutOfRangeInput"),
            ("Abc", "InvalidResourceName"),
            ("a--b", "InvalidResourceName"),
            ("-ab", "InvalidResourceName"),
            ("ab-", "InvalidResourceName"),
            ("a_b", "InvalidResourceName"),
            ("a.b", "InvalidResourceName"),
        ] {
            let f = check_queue_name(name).unwrap_err();
            assert_eq!((f.status, f.code.as_str()), (400, code), "{name}");
        }
    }

    #[test]
    fn ranges_refuse_outside_and_take_both_ends() {
        assert_eq!(in_range("v", 0, 0, 5).unwrap(), Duration::ZERO);
        assert_eq!(in_range("v", 5, 0, 5).unwrap(), Duration::from_secs(5));
        assert_eq!(
            in_range("v", 6, 0, 5).unwrap_err().code,
            "OutOfRangeQueryParameterValue"
        );
        assert_eq!(
            in_range("v", -1, 0, 5).unwrap_err().code,
            "OutOfRangeQueryParameterValue"
        );
        assert_eq!(
            integer("v", "1.5").unwrap_err().code,
            "InvalidQueryParameterValue"
        );
    }

    #[test]
    fn the_largest_message_is_64_kib_of_utf8() {
        assert!(check_message_size(&"x".repeat(MAX_MESSAGE_BYTES)).is_ok());
        let f = check_message_size(&"x".repeat(MAX_MESSAGE_BYTES + 1)).unwrap_err();
        assert_eq!((f.status, f.code.as_str()), (413, "RequestBodyTooLarge"));
        // Multibyte: counted in bytes, not characters.
        let wide = "é".repeat(MAX_MESSAGE_BYTES / 2 + 1);
        assert!(check_message_size(&wide).is_err());
    }

    #[test]
    fn policies_are_checked_as_the_service_checks_them() {
        let policy = |id: &str, start: Option<&str>, perm: &str| crate::acl::RawPolicy {
            id: id.into(),
            start: start.map(str::to_owned),
            expiry: None,
            permission: Some(perm.into()),
        };
        let body = |p: &[crate::acl::RawPolicy]| crate::acl::encode(p).into_bytes();
        let ok = [policy("a", Some("2026-11-29T06:00:00.0000000Z"), "raup")];
        assert_eq!(request_policies(&body(&ok)).unwrap(), ok);
        // Every form the service takes is kept as it writes times.
        for (given, kept) in [
            ("2026-11-29T06:00:00Z", "2026-11-29T06:00:00.0000000Z"),
            (
                "2026-11-29T06:00:00.1234567Z",
                "2026-11-29T06:00:00.1234567Z",
            ),
            ("2026-11-29T07:00:00+01:00", "2026-11-29T06:00:00.0000000Z"),
            ("2026-11-29T06:00Z", "2026-11-29T06:00:00.0000000Z"),
            ("2026-11-29T07:00+01:00", "2026-11-29T06:00:00.0000000Z"),
            ("2026-11-29", "2026-11-29T00:00:00.0000000Z"),
        ] {
            let got = request_policies(&body(&[policy("a", Some(given), "r")])).unwrap();
            assert_eq!(got[0].start.as_deref(), Some(kept), "{given}");
        }
        assert!(request_policies(b"").unwrap().is_empty());
        for bad in [
            vec![policy("a", None, "w")],
            vec![policy("a", Some("yesterday"), "r")],
            vec![policy(&"i".repeat(65), None, "r")],
            vec![policy("a", None, "r"), policy("a", None, "p")],
            (0..6).map(|i| policy(&i.to_string(), None, "r")).collect(),
        ] {
            let f = request_policies(&body(&bad)).unwrap_err();
            assert_eq!(
                (f.status, f.code.as_str()),
                (400, "InvalidXmlDocument"),
                "{bad:?}"
            );
        }
        assert_eq!(
            request_policies(b"<SignedIdentifiers><oops")
                .unwrap_err()
                .code,
            "InvalidXmlDocument"
        );
    }
}
