//! Pieces of the REST wire format shared by single requests and transactions:
//! resource paths, query strings, headers and error bodies.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::entity::EntityKey;
use crate::error::{Error, ErrorCode, ErrorKind, Result, ServiceError};

/// Everything but the unreserved characters of RFC 3986 is escaped in keys and
/// query values, so `'`, `%`, `+`, `&`, spaces and non-ASCII text travel intact.
pub(crate) const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `name=value`, the value percent-encoded, appended to a query in `out`.
pub(crate) fn push_query_pair(out: &mut String, name: &str, value: &str) {
    out.push_str(name);
    out.push('=');
    out.extend(utf8_percent_encode(value, COMPONENT));
}

/// `Table(PartitionKey='..',RowKey='..')` with each key's `'` doubled, then percent-encoded.
pub(crate) fn entity_resource(table: &str, key: &EntityKey) -> String {
    let mut s =
        String::with_capacity(table.len() + key.partition_key.len() + key.row_key.len() + 32);
    s.push_str(table);
    s.push_str("(PartitionKey='");
    push_key(&mut s, &key.partition_key);
    s.push_str("',RowKey='");
    push_key(&mut s, &key.row_key);
    s.push_str("')");
    s
}

fn push_key(out: &mut String, key: &str) {
    if key.contains('\'') {
        out.extend(utf8_percent_encode(&key.replace('\'', "''"), COMPONENT));
    } else {
        out.extend(utf8_percent_encode(key, COMPONENT));
    }
}

/// The bounds of a prefix range: `[prefix, successor)`, where the successor
/// bumps the last character that can be bumped. `None` as upper bound means no bound.
pub(crate) fn prefix_bounds(prefix: &str) -> (String, Option<String>) {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = last as u32 + 1;
        // Skip the surrogate range, which holds no chars.
        if (0xD800..=0xDFFF).contains(&next) {
            next = 0xE000;
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return (prefix.to_owned(), Some(chars.into_iter().collect()));
        }
    }
    (prefix.to_owned(), None)
}

pub(crate) fn header_value(s: &str) -> Result<HeaderValue> {
    HeaderValue::from_str(s)
        .map_err(|_| Error::config("a header value holds characters HTTP does not allow"))
}

/// A response header as text, borrowed: only the values a caller keeps are copied.
pub(crate) fn header_str<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// [`header_str`], copied.
pub(crate) fn header_string(headers: &HeaderMap, name: &HeaderName) -> Option<String> {
    header_str(headers, name).map(str::to_owned)
}

/// The names of the headers tablekit sends and reads, parsed once.
pub(crate) mod names {
    use http::header::HeaderName;

    pub(crate) const X_MS_DATE: HeaderName = HeaderName::from_static("x-ms-date");
    pub(crate) const X_MS_VERSION: HeaderName = HeaderName::from_static("x-ms-version");
    pub(crate) const X_MS_CLIENT_REQUEST_ID: HeaderName =
        HeaderName::from_static("x-ms-client-request-id");
    pub(crate) const X_MS_REQUEST_ID: HeaderName = HeaderName::from_static("x-ms-request-id");
    pub(crate) const X_MS_ERROR_CODE: HeaderName = HeaderName::from_static("x-ms-error-code");
    pub(crate) const PREFER: HeaderName = HeaderName::from_static("prefer");
    pub(crate) const DATASERVICEVERSION: HeaderName = HeaderName::from_static("dataserviceversion");
    pub(crate) const MAXDATASERVICEVERSION: HeaderName =
        HeaderName::from_static("maxdataserviceversion");
    pub(crate) const NEXT_PARTITION_KEY: HeaderName =
        HeaderName::from_static("x-ms-continuation-nextpartitionkey");
    pub(crate) const NEXT_ROW_KEY: HeaderName =
        HeaderName::from_static("x-ms-continuation-nextrowkey");
    pub(crate) const NEXT_TABLE_NAME: HeaderName =
        HeaderName::from_static("x-ms-continuation-nexttablename");
    #[cfg(feature = "queue")]
    pub(crate) const APPROXIMATE_MESSAGES_COUNT: HeaderName =
        HeaderName::from_static("x-ms-approximate-messages-count");
    #[cfg(feature = "queue")]
    pub(crate) const POPRECEIPT: HeaderName = HeaderName::from_static("x-ms-popreceipt");
    #[cfg(feature = "queue")]
    pub(crate) const TIME_NEXT_VISIBLE: HeaderName =
        HeaderName::from_static("x-ms-time-next-visible");
    pub(crate) const RETRY_AFTER: HeaderName = http::header::RETRY_AFTER;
}

/// Builds the error of a failed response from its status, its `Retry-After`
/// delay and its body (JSON or XML).
pub(crate) fn service_error(
    status: StatusCode,
    request_id: Option<String>,
    retry_after: Option<Duration>,
    body: &[u8],
) -> Error {
    let (code, message) = parse_error_body(body);
    let (batch_index, message) = split_batch_index(message);
    ErrorKind::Service(ServiceError {
        status: status.as_u16(),
        code: code.map(ErrorCode::from),
        message,
        request_id,
        batch_index,
        retry_after,
    })
    .into()
}

/// The delay a `Retry-After` value asks for: delta-seconds (`120`) or an HTTP
/// date (`Wed, 21 Oct 2015 07:28:00 GMT`), which counts from `now` (a date in
/// the past means no wait). Anything else is ignored.
pub(crate) fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = DateTime::parse_from_rfc2822(value)
        .ok()?
        .with_timezone(&Utc);
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

/// The service's message of a failed transaction starts with the failing
/// operation's index: `2:The specified entity already exists.`
pub(crate) fn split_batch_index(message: Option<String>) -> (Option<usize>, Option<String>) {
    if let Some(m) = &message {
        if let Some(i) = m.find(':') {
            if i > 0 {
                if let Ok(n) = m[..i].parse::<usize>() {
                    return (Some(n), Some(m[i + 1..].to_owned()));
                }
            }
        }
    }
    (None, message)
}

/// Reads `code` and `message` from a JSON (`odata.error`) or XML (`<error>`) body.
///
/// An authentication failure carries the service's reason apart from its
/// message (`AuthenticationErrorDetail`: "Lifetime validation failed. The
/// token is expired.", "Invalid token audience.", the string a wrong
/// signature was computed over): it joins the message's first line, which
/// is what an error shows, its line breaks written `\n`.
pub(crate) fn parse_error_body(body: &[u8]) -> (Option<String>, Option<String>) {
    #[derive(serde::Deserialize)]
    struct Envelope {
        #[serde(rename = "odata.error")]
        odata_error: Option<Inner>,
    }
    #[derive(serde::Deserialize)]
    struct Inner {
        code: Option<String>,
        message: Option<Message>,
        #[serde(rename = "AuthenticationErrorDetail")]
        detail: Option<String>,
    }
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Message {
        Text(String),
        Lang { value: String },
    }
    if let Ok(Envelope {
        odata_error: Some(inner),
    }) = serde_json::from_slice::<Envelope>(body)
    {
        let message = inner.message.map(|m| match m {
            Message::Text(t) | Message::Lang { value: t } => t,
        });
        return (inner.code, with_detail(message, inner.detail));
    }
    let text = String::from_utf8_lossy(body);
    let message = xml_element(&text, "message");
    let detail = xml_element(&text, "AuthenticationErrorDetail");
    (xml_element(&text, "code"), with_detail(message, detail))
}

/// `message` with `detail` at the end of its first line (on one line).
fn with_detail(message: Option<String>, detail: Option<String>) -> Option<String> {
    let detail = detail
        .map(|d| d.trim().replace("\r\n", "\\n").replace('\n', "\\n"))
        .filter(|d| !d.is_empty());
    let Some(detail) = detail else {
        return message;
    };
    let message = message.unwrap_or_default();
    let (first, rest) = message.split_once('\n').unwrap_or((&message, ""));
    let first = first.trim_end();
    let mut joined = String::with_capacity(message.len() + detail.len() + 1);
    joined.push_str(first);
    if !first.is_empty() {
        joined.push(' ');
    }
    joined.push_str(&detail);
    if !rest.is_empty() {
        joined.push('\n');
        joined.push_str(rest);
    }
    Some(joined)
}

/// The text of the first element with this local name (any namespace prefix).
fn xml_element(xml: &str, local: &str) -> Option<String> {
    let mut rest = xml;
    while let Some(start) = rest.find('<') {
        rest = &rest[start + 1..];
        let end = rest.find('>')?;
        let tag = &rest[..end];
        let name = tag.split_whitespace().next().unwrap_or("");
        let name_local = name.rsplit(':').next().unwrap_or(name);
        if name_local.eq_ignore_ascii_case(local) && !tag.ends_with('/') && !name.starts_with('/') {
            let content = &rest[end + 1..];
            let close = content.find("</")?;
            return Some(xml_unescape(content[..close].trim()));
        }
        rest = &rest[end + 1..];
    }
    None
}

fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_gives_its_code_and_message() {
        let xml2 = b"<?xml version=\"1.0\"?><Error><Code>AuthorizationFailure</Code><Message>Server failed &amp; more</Message></Error>";
        let (code, msg) = parse_error_body(xml2);
        assert_eq!(code.as_deref(), Some("AuthorizationFailure"));
        assert_eq!(msg.as_deref(), Some("Server failed & more"));
        assert_eq!(parse_error_body(b""), (None, None));
    }

    #[test]
    fn an_authentication_failures_reason_joins_the_first_line_of_its_message() {
        // The Table service's JSON, as Azurite writes it.
        let json = br#"{"odata.error":{"code":"AuthenticationFailed","message":{"lang":"en-US","value":"Server failed to authenticate the request.\nRequestId:r1\nTime:t"},"AuthenticationErrorDetail":"Invalid token audience."}}"#;
        let (code, msg) = parse_error_body(json);
        assert_eq!(code.as_deref(), Some("AuthenticationFailed"));
        assert_eq!(
            msg.as_deref(),
            Some("Server failed to authenticate the request. Invalid token audience.\nRequestId:r1\nTime:t")
        );

        // Queue and Blob XML, as Azure writes it.
        let xml = b"<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed</Code>\
            <Message>Server failed to authenticate the request.\nRequestId:r2\nTime:t</Message>\
            <AuthenticationErrorDetail>Lifetime validation failed. The token is expired.</AuthenticationErrorDetail></Error>";
        let (_, msg) = parse_error_body(xml);
        assert_eq!(
            msg.as_deref(),
            Some("Server failed to authenticate the request. Lifetime validation failed. The token is expired.\nRequestId:r2\nTime:t")
        );

        // A string to sign keeps its line breaks, written out on the one line.
        let xml = b"<Error><Code>AuthenticationFailed</Code><Message>Server failed.</Message>\
            <AuthenticationErrorDetail>Server used following string to sign: 'GET\n\n/a'.</AuthenticationErrorDetail></Error>";
        let (_, msg) = parse_error_body(xml);
        assert_eq!(
            msg.as_deref(),
            Some("Server failed. Server used following string to sign: 'GET\\n\\n/a'.")
        );

        // A reason without a message is the message.
        let (_, msg) = parse_error_body(
            br#"{"odata.error":{"code":"AuthenticationFailed","AuthenticationErrorDetail":"Invalid token audience."}}"#,
        );
        assert_eq!(msg.as_deref(), Some("Invalid token audience."));
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = DateTime::parse_from_rfc3339("2015-10-21T07:27:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(parse_retry_after("1", now), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:26:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past asks for no wait"
        );
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("", now), None);
    }

    #[test]
    fn batch_index_needs_a_number_before_the_colon() {
        assert_eq!(split_batch_index(Some(":x".into())).0, None);
        assert_eq!(split_batch_index(Some("abc:x".into())).0, None);
        assert_eq!(split_batch_index(None), (None, None));
    }
}
