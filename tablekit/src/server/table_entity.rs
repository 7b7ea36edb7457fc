//! Entities: insert, update, merge, their upserts, delete, point reads and
//! queries, each checked as the service checks it before the store sees it.

use base64::Engine as _;
use http::Method;

use super::auth::{Need, Perm};
use super::reply::{self, Reply};
use super::table::{
    answer, base_url, created, json_type, metadata, prefer_content, set_header, top, unexpected,
};
use super::{Ctx, Failure};
use crate::backend::embedded::check;
use crate::backend::{EntityBody, Operation, Response};
use crate::codec::read::{decode_entity, decode_write_body, duplicated_property};
use crate::continuation::Continuation;
use crate::entity::{DynamicEntity, ETag, EntityKey, IfMatch, UpdateMode};

/// The entity of a write's JSON body, checked as the service checks it
/// (keys, property names and count, value types and sizes, DateTime range,
/// entity size), under `url_key` for an update or upsert.
pub(crate) fn entity_of(
    body: &[u8],
    url_key: Option<&EntityKey>,
) -> Result<DynamicEntity, Failure> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Failure::invalid("The request body is empty."));
    }
    check_annotated_values(body)?;
    let decoded = match url_key {
        None => decode_entity::<DynamicEntity>(body, None, None),
        Some(k) => decode_write_body::<DynamicEntity>(body, (&k.partition_key, &k.row_key)),
    };
    let mut entity = decoded.map_err(|e| match duplicated_property(&e) {
        Some(_) => Failure::new(
            400,
            "DuplicatePropertiesSpecified",
            "A property is specified more than one time.",
        ),
        None => Failure::invalid(format!("One of the request inputs is not valid. ({e})")),
    })?;
    // Timestamp is the service's to set: a sent one is ignored.
    entity.timestamp = None;
    entity.etag = None;
    check::check(&entity)?;
    Ok(entity)
}

/// What the decoder lets through and the service refuses: an annotated
/// value of the wrong JSON form (an `Edm.Int64` as a number rather than a
/// string, an `Edm.Double` as a string other than `NaN` or an infinity),
/// and an annotated property without a value (`PropertiesNeedValue`).
fn check_annotated_values(body: &[u8]) -> Result<(), Failure> {
    let Ok(serde_json::Value::Object(members)) = serde_json::from_slice::<serde_json::Value>(body)
    else {
        // Not a JSON object: the decoder says why.
        return Ok(());
    };
    for (key, edm) in &members {
        let Some(name) = key.strip_suffix("@odata.type") else {
            continue;
        };
        if matches!(name, "PartitionKey" | "RowKey" | "Timestamp") {
            continue;
        }
        let Some(edm) = edm.as_str() else {
            return Err(Failure::invalid(format!(
                "The type annotation of {name:?} is not a string."
            )));
        };
        let value = match members.get(name) {
            None | Some(serde_json::Value::Null) => {
                return Err(Failure::new(
                    400,
                    "PropertiesNeedValue",
                    format!(
                        "Values have not been specified for all properties in the entity. ({name})"
                    ),
                ))
            }
            Some(v) => v,
        };
        let fits = match edm {
            "Edm.Int64" | "Edm.String" | "Edm.Guid" | "Edm.DateTime" | "Edm.Binary" => {
                value.is_string()
            }
            "Edm.Int32" => value.is_i64(),
            "Edm.Boolean" => value.is_boolean(),
            "Edm.Double" => {
                value.is_number()
                    || matches!(value.as_str(), Some("NaN" | "Infinity" | "-Infinity"))
            }
            // An unknown type: the decoder refuses it.
            _ => true,
        };
        if !fits {
            return Err(Failure::invalid(format!(
                "One of the request inputs is not valid. (the value of {name:?} is not an {edm})"
            )));
        }
    }
    Ok(())
}

/// The `If-Match` of a request: `*` or an ETag.
pub(crate) fn if_match(value: Option<&str>) -> Option<IfMatch> {
    let value = value?.trim();
    Some(if value == "*" {
        IfMatch::Any
    } else {
        IfMatch::ETag(ETag::new(value))
    })
}

/// `POST /<table>`: insert.
pub(crate) async fn insert(ctx: &Ctx<'_>, table: &str) -> Result<Reply, Failure> {
    let metadata = metadata(ctx)?;
    let entity = entity_of(&ctx.body, None)?;
    ctx.access.check(Need::Object {
        container: table,
        key: Some((&entity.partition_key, &entity.row_key)),
        perm: Perm::Add,
    })?;
    let prefer = prefer_content(ctx.header("prefer"));
    // The entity goes to the store; a copy stays for the answer's body.
    let kept = (prefer != Some(false)).then(|| entity.clone());
    let response = ctx
        .account
        .tables
        .execute(Operation::Insert {
            table,
            body: EntityBody::Bag(Box::new(entity)),
        })
        .await?;
    let Response::Written(written) = response else {
        return Err(unexpected(&response));
    };
    let base = base_url(ctx);
    let mut reply = created(prefer, metadata, || {
        let mut e = kept.unwrap_or_default();
        e.etag = Some(written.etag().clone());
        e.timestamp = written.timestamp();
        answer(ctx, &base, metadata).entity(table, &e, None)
    });
    set_header(&mut reply, "etag", written.etag().as_str());
    Ok(reply)
}

/// A request on `/<table>(PartitionKey='..',RowKey='..')`.
pub(crate) async fn one(
    ctx: &Ctx<'_>,
    method: &Method,
    table: &str,
    key: &EntityKey,
) -> Result<Reply, Failure> {
    match method.as_str() {
        "GET" => get(ctx, table, key).await,
        "PUT" => write(ctx, table, key, UpdateMode::Replace).await,
        // PATCH is how the newer SDKs (Python's azure-data-tables) spell MERGE.
        "MERGE" | "PATCH" => write(ctx, table, key, UpdateMode::Merge).await,
        "DELETE" => delete(ctx, table, key).await,
        other => Err(Failure::new(
            405,
            "MethodNotAllowed",
            format!("The requested method {other} is not allowed on an entity."),
        )),
    }
}

/// Update (with `If-Match`) or upsert (without).
async fn write(
    ctx: &Ctx<'_>,
    table: &str,
    key: &EntityKey,
    mode: UpdateMode,
) -> Result<Reply, Failure> {
    if ctx.header("if-none-match").is_some() {
        return Err(Failure::invalid(
            "If-None-Match HTTP header cannot be specified for PUT or MERGE operations.",
        ));
    }
    let if_match = if_match(ctx.header("if-match"));
    let entity = entity_of(&ctx.body, Some(key))?;
    let object = |perm| Need::Object {
        container: table,
        key: Some((&key.partition_key, &key.row_key)),
        perm,
    };
    if if_match.is_none() {
        // An upsert may insert: it needs both.
        ctx.access.check(object(Perm::Add))?;
    }
    ctx.access.check(object(Perm::Update))?;
    let response = ctx
        .account
        .tables
        .execute(Operation::Write {
            table,
            key,
            body: EntityBody::Bag(Box::new(entity)),
            mode,
            if_match: if_match.as_ref(),
        })
        .await?;
    let Response::Written(written) = response else {
        return Err(unexpected(&response));
    };
    let mut reply = reply::empty(204);
    set_header(&mut reply, "etag", written.etag().as_str());
    Ok(reply)
}

async fn delete(ctx: &Ctx<'_>, table: &str, key: &EntityKey) -> Result<Reply, Failure> {
    let if_match = if_match(ctx.header("if-match")).ok_or_else(|| {
        Failure::new(
            400,
            "MissingRequiredHeader",
            "An HTTP header that's mandatory for this request is not specified. (If-Match)",
        )
    })?;
    ctx.access.check(Need::Object {
        container: table,
        key: Some((&key.partition_key, &key.row_key)),
        perm: Perm::Delete,
    })?;
    match ctx
        .account
        .tables
        .execute(Operation::Delete {
            table,
            key,
            if_match: &if_match,
        })
        .await?
    {
        Response::Done => Ok(reply::empty(204)),
        other => Err(unexpected(&other)),
    }
}

/// The names a `$select` lists (`None` for none, or `*`).
fn selection(ctx: &Ctx<'_>) -> Option<Vec<String>> {
    let select = ctx.param("$select")?;
    let names: Vec<String> = select
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect();
    (!names.is_empty() && !names.iter().any(|n| n == "*")).then_some(names)
}

async fn get(ctx: &Ctx<'_>, table: &str, key: &EntityKey) -> Result<Reply, Failure> {
    ctx.access.check(Need::Object {
        container: table,
        key: Some((&key.partition_key, &key.row_key)),
        perm: Perm::Read,
    })?;
    let metadata = metadata(ctx)?;
    let select = selection(ctx);
    let response = ctx
        .account
        .tables
        .execute(Operation::Get {
            table,
            key,
            select: None,
            annotations: true,
        })
        .await?;
    let Response::Entity(found) = response else {
        return Err(unexpected(&response));
    };
    let Some(payload) = found else {
        return Err(Failure::new(
            404,
            "ResourceNotFound",
            "The specified resource does not exist.",
        ));
    };
    let entity: DynamicEntity = payload.decode_one(key)?;
    let base = base_url(ctx);
    let body = answer(ctx, &base, metadata).entity(table, &entity, select.as_deref());
    let mut reply = reply::with_body(200, json_type(metadata), body.into());
    if let Some(etag) = &entity.etag {
        set_header(&mut reply, "etag", etag.as_str());
    }
    Ok(reply)
}

/// `GET /<table>()`: a page of the entities `$filter` selects, from
/// `NextPartitionKey` / `NextRowKey`. A SAS limited to a key range sees only
/// the entities of its range.
pub(crate) async fn query(ctx: &Ctx<'_>, table: &str) -> Result<Reply, Failure> {
    ctx.access.check(Need::Object {
        container: table,
        key: None,
        perm: Perm::Read,
    })?;
    let metadata = metadata(ctx)?;
    let top = top(ctx)?;
    let select = selection(ctx);
    let continuation = match ctx.param("NextPartitionKey") {
        None => None,
        Some(pk) => Some(Continuation {
            next_partition_key: decode_token(pk)?,
            next_row_key: ctx.param("NextRowKey").map(decode_token).transpose()?,
        }),
    };
    let filter = ctx.param("$filter").filter(|f| !f.trim().is_empty());
    let response = ctx
        .account
        .tables
        .execute(Operation::Query {
            table,
            filter,
            select: None,
            top,
            continuation: continuation.as_ref(),
            annotations: true,
        })
        .await?;
    let Response::Page {
        payload,
        continuation,
    } = response
    else {
        return Err(unexpected(&response));
    };
    let mut entities: Vec<DynamicEntity> = Vec::new();
    payload.decode_into(&mut entities)?;
    let visible = entities.iter().filter(|e| {
        ctx.access
            .check(Need::Object {
                container: table,
                key: Some((&e.partition_key, &e.row_key)),
                perm: Perm::Read,
            })
            .is_ok()
    });
    let base = base_url(ctx);
    let body = answer(ctx, &base, metadata).page(table, visible, select.as_deref());
    let mut reply = reply::with_body(200, json_type(metadata), body.into());
    if let Some(c) = continuation {
        set_header(
            &mut reply,
            "x-ms-continuation-nextpartitionkey",
            &encode_token(&c.next_partition_key),
        );
        if let Some(rk) = &c.next_row_key {
            set_header(
                &mut reply,
                "x-ms-continuation-nextrowkey",
                &encode_token(rk),
            );
        }
    }
    Ok(reply)
}

/// A continuation key as the service writes it: `1!<length>!<base64>`, the
/// base64's `=` written `-` (a header value whatever the key holds).
pub(crate) fn encode_token(key: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD
        .encode(key.as_bytes())
        .replace('=', "-");
    format!("1!{}!{b64}", b64.len())
}

/// The key of a continuation token [`encode_token`] wrote.
pub(crate) fn decode_token(token: &str) -> Result<String, Failure> {
    let bad = || Failure::invalid(format!("The continuation token {token:?} is not valid."));
    let mut parts = token.splitn(3, '!');
    let (Some("1"), Some(len), Some(b64)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    if len.parse::<usize>().ok() != Some(b64.len()) {
        return Err(bad());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.replace('-', "="))
        .map_err(|_| bad())?;
    String::from_utf8(bytes).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edm::EdmValue;

    #[test]
    fn continuation_tokens_round_trip_any_key() {
        for key in ["", "p", "p1!x", "é😀 /\u{0}'", "a=b-c"] {
            let token = encode_token(key);
            assert!(http::HeaderValue::from_str(&token).is_ok(), "{token}");
            assert_eq!(decode_token(&token).unwrap(), key);
        }
        assert_eq!(encode_token("p001"), "1!8!cDAwMQ--");
        for bad in ["", "cDAwMQ==", "1!7!cDAwMQ--", "2!8!cDAwMQ--", "1!4!@@@@"] {
            assert!(decode_token(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_write_body_is_checked_and_keyed_by_its_url() {
        let key = EntityKey::new("p", "r");
        let e = entity_of(br#"{"A":1,"Timestamp":"2020-01-01T00:00:00Z"}"#, Some(&key)).unwrap();
        assert_eq!((&*e.partition_key, &*e.row_key), ("p", "r"));
        assert_eq!(e.get("A"), Some(&EdmValue::Int32(1)));
        assert!(e.timestamp.is_none());
        let e = entity_of(br#"{"PartitionKey":"x","RowKey":"y"}"#, Some(&key)).unwrap();
        assert_eq!((&*e.partition_key, &*e.row_key), ("p", "r"));
        let code = |body: &[u8]| entity_of(body, None).unwrap_err().code;
        assert_eq!(code(b"not json"), "InvalidInput");
        assert_eq!(code(b""), "InvalidInput");
        assert_eq!(code(br#"{"RowKey":"r"}"#), "InvalidInput");
        assert_eq!(
            code(br#"{"PartitionKey":"p","RowKey":"r","A":1,"A":2}"#),
            "DuplicatePropertiesSpecified"
        );
        assert_eq!(
            code(br#"{"PartitionKey":"p","RowKey":"r","L@odata.type":"Edm.Int64","L":"x"}"#),
            "InvalidInput"
        );
        assert_eq!(
            code(br#"{"PartitionKey":"p","RowKey":"r","G@odata.type":"Edm.Nope","G":"x"}"#),
            "InvalidInput"
        );
        for wrong_form in [
            r#""L@odata.type":"Edm.Int64","L":5"#,
            r#""D@odata.type":"Edm.Double","D":"1.5""#,
            r#""I@odata.type":"Edm.Int32","I":"1""#,
            r#""B@odata.type":"Edm.Boolean","B":1"#,
            r#""T@odata.type":"Edm.DateTime","T":1"#,
            r#""X@odata.type":7,"X":1"#,
        ] {
            let body = format!(r#"{{"PartitionKey":"p","RowKey":"r",{wrong_form}}}"#);
            assert_eq!(code(body.as_bytes()), "InvalidInput", "{wrong_form}");
        }
        for no_value in [
            r#""L@odata.type":"Edm.Int64""#,
            r#""L@odata.type":"Edm.Int64","L":null"#,
        ] {
            let body = format!(r#"{{"PartitionKey":"p","RowKey":"r",{no_value}}}"#);
            assert_eq!(code(body.as_bytes()), "PropertiesNeedValue", "{no_value}");
        }
        // The forms the service accepts.
        let ok = br#"{"PartitionKey":"p","RowKey":"r","D@odata.type":"Edm.Double","D":"NaN",
            "E@odata.type":"Edm.Double","E":2,"I@odata.type":"Edm.Int32","I":-3,
            "PartitionKey@odata.type":"Edm.String"}"#;
        let e = entity_of(ok, None).unwrap();
        assert_eq!(e.get("E"), Some(&EdmValue::Double(2.0)));
        assert_eq!(e.get("I"), Some(&EdmValue::Int32(-3)));
        assert_eq!(
            code(br#"{"PartitionKey":"p/","RowKey":"r"}"#),
            "OutOfRangeInput"
        );
        assert_eq!(
            code(br#"{"PartitionKey":"p","RowKey":"r","T@odata.type":"Edm.DateTime","T":"1600-01-01T00:00:00Z"}"#),
            "OutOfRangeInput"
        );
        assert_eq!(
            code(br#"{"PartitionKey":"p","RowKey":"r","a-b":1}"#),
            "PropertyNameInvalid"
        );
        let big = format!(
            r#"{{"PartitionKey":"p","RowKey":"r","S":"{}"}}"#,
            "x".repeat(32 * 1024 + 1)
        );
        assert_eq!(code(big.as_bytes()), "PropertyValueTooLarge");
        let many: String = (0..253).map(|i| format!(r#","P{i}":1"#)).collect();
        let many = format!(r#"{{"PartitionKey":"p","RowKey":"r"{many}}}"#);
        assert_eq!(code(many.as_bytes()), "TooManyProperties");
    }
}
