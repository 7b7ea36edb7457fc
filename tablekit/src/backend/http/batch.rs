//! The `multipart/mixed` wire format of entity group transactions: one batch
//! holding one changeset, one HTTP request per operation.

use std::borrow::Cow;

use super::wire::{entity_resource, parse_error_body, split_batch_index};
use crate::backend::{BatchKind, BatchOp};
use crate::entity::{ETag, UpdateMode};
use crate::error::{Error, ErrorCode, ErrorKind, Result, ServiceError};

/// An encoded transaction request.
pub(crate) struct Encoded {
    pub(crate) content_type: String,
    pub(crate) body: Vec<u8>,
}

/// One line of a multipart body: `parts` joined, then CRLF.
fn line(b: &mut Vec<u8>, parts: &[&str]) {
    for p in parts {
        b.extend_from_slice(p.as_bytes());
    }
    b.extend_from_slice(b"\r\n");
}

/// The start of a batch body: its boundary and the head of its one
/// changeset (a request's and an answer's alike).
fn open_changeset(b: &mut Vec<u8>, batch: &str, changeset: &str) {
    line(b, &["--", batch]);
    line(b, &["Content-Type: multipart/mixed; boundary=", changeset]);
    line(b, &[]);
}

/// The head of one operation's part of a changeset, before its HTTP message.
fn open_part(b: &mut Vec<u8>, changeset: &str) {
    line(b, &["--", changeset]);
    line(b, &["Content-Type: application/http"]);
    line(b, &["Content-Transfer-Encoding: binary"]);
    line(b, &[]);
}

/// Encodes the operations as one changeset inside one batch.
pub(crate) fn encode(endpoint: &str, table: &str, ops: &[BatchOp]) -> Encoded {
    let batch = format!("batch_{}", uuid::Uuid::new_v4());
    let changeset = format!("changeset_{}", uuid::Uuid::new_v4());
    let size: usize = ops
        .iter()
        .map(|o| o.body.as_ref().map_or(0, bytes::Bytes::len) + 400 + endpoint.len())
        .sum();
    let mut b = Vec::with_capacity(size + 256);
    open_changeset(&mut b, &batch, &changeset);
    for op in ops {
        open_part(&mut b, &changeset);
        let (method, if_match) = match &op.kind {
            BatchKind::Insert => ("POST", None),
            BatchKind::Upsert(UpdateMode::Merge) => ("MERGE", None),
            BatchKind::Upsert(UpdateMode::Replace) => ("PUT", None),
            BatchKind::Update(UpdateMode::Merge, m) => ("MERGE", Some(m)),
            BatchKind::Update(UpdateMode::Replace, m) => ("PUT", Some(m)),
            BatchKind::Delete(m) => ("DELETE", Some(m)),
        };
        let resource = match op.kind {
            BatchKind::Insert => table.to_owned(),
            _ => entity_resource(table, &op.key),
        };
        line(
            &mut b,
            &[method, " ", endpoint, "/", &resource, " HTTP/1.1"],
        );
        line(&mut b, &["Accept: application/json;odata=minimalmetadata"]);
        line(&mut b, &["DataServiceVersion: 3.0;"]);
        if let Some(m) = if_match {
            line(&mut b, &["If-Match: ", m.header_value()]);
        }
        if let Some(body) = &op.body {
            line(&mut b, &["Content-Type: application/json"]);
            if op.kind == BatchKind::Insert {
                line(&mut b, &["Prefer: return-no-content"]);
            }
            line(
                &mut b,
                &["Content-Length: ", itoa::Buffer::new().format(body.len())],
            );
            line(&mut b, &[]);
            b.extend_from_slice(body);
            line(&mut b, &[]);
        } else {
            line(&mut b, &[]);
        }
    }
    line(&mut b, &["--", &changeset, "--"]);
    line(&mut b, &["--", &batch, "--"]);
    Encoded {
        content_type: format!("multipart/mixed; boundary={batch}"),
        body: b,
    }
}

/// One HTTP response inside a multipart body.
#[derive(Debug)]
struct PartResponse<'a> {
    status: u16,
    etag: Option<&'a str>,
    body: &'a [u8],
}

/// Parses a transaction response: the ETag of each operation on success, or the
/// error of the failing operation, carrying its index.
pub(crate) fn parse_response(
    content_type: &str,
    body: &[u8],
    operations: usize,
    request_id: Option<String>,
) -> Result<Vec<Option<ETag>>> {
    let boundary = boundary_of(content_type)
        .ok_or_else(|| Error::decode("a transaction response without a multipart boundary"))?;
    let mut parts = Vec::with_capacity(operations);
    collect_parts(body, &boundary, &mut parts, 0)?;
    if let Some(failed) = parts.iter().find(|p| !(200..300).contains(&p.status)) {
        let (code, message) = parse_error_body(failed.body);
        let (batch_index, message) = split_batch_index(message);
        return Err(ErrorKind::Service(ServiceError {
            status: failed.status,
            code: code.map(ErrorCode::from),
            message,
            request_id,
            batch_index,
            retry_after: None,
        })
        .into());
    }
    if parts.len() != operations {
        return Err(Error::decode(format!(
            "the transaction response holds {} answers for {operations} operations",
            parts.len()
        )));
    }
    Ok(parts.into_iter().map(|p| p.etag.map(ETag::new)).collect())
}

/// The `boundary` parameter of a `multipart/*` Content-Type. Parameter names
/// are case-insensitive (`Boundary=`, `BOUNDARY=`) and values are a token or a
/// quoted string with `\` escapes (RFC 2045 §5.1, RFC 7230 §3.2.6), which may
/// hold `;`. `None` if there is no boundary or the header is malformed.
fn boundary_of(content_type: &str) -> Option<Cow<'_, str>> {
    let (_media_type, mut rest) = content_type.split_once(';')?;
    loop {
        rest = rest.trim_start_matches([' ', '\t', ';']);
        if rest.is_empty() {
            return None;
        }
        let (name, after) = rest.split_once('=')?;
        let name = name.trim();
        let after = after.trim_start_matches([' ', '\t']);
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let (value, len) = quoted_string(quoted)?;
            (value, &quoted[len..])
        } else {
            let end = after.find(';').unwrap_or(after.len());
            (Cow::Borrowed(after[..end].trim_end()), &after[end..])
        };
        if name.eq_ignore_ascii_case("boundary") {
            return (!value.is_empty()).then_some(value);
        }
        rest = next;
    }
}

/// The content of a quoted string whose opening `"` is already consumed, and
/// how many bytes it took, closing `"` included.
fn quoted_string(s: &str) -> Option<(Cow<'_, str>, usize)> {
    let mut owned: Option<String> = None;
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                let value = owned.map_or(Cow::Borrowed(&s[..i]), Cow::Owned);
                return Some((value, i + 1));
            }
            '\\' => {
                let (_, escaped) = chars.next()?;
                owned.get_or_insert_with(|| s[..i].to_owned()).push(escaped);
            }
            c => {
                if let Some(o) = owned.as_mut() {
                    o.push(c);
                }
            }
        }
    }
    None
}

/// Splits `body` at its boundary lines and walks every part: nested multiparts
/// are entered, `application/http` parts are parsed as HTTP responses.
fn collect_parts<'a>(
    body: &'a [u8],
    boundary: &str,
    out: &mut Vec<PartResponse<'a>>,
    depth: usize,
) -> Result<()> {
    walk_parts(body, boundary, depth, None, &mut |content, _| {
        out.push(parse_http(content)?);
        Ok(())
    })
}

/// Splits `body` at its boundary lines and walks every part: nested
/// multiparts are entered, and the content of each `application/http` part
/// (an HTTP message) is handed to `on_http` with the changeset it was met in
/// (`None` in the batch itself, else the index of the batch's nested
/// multipart that holds it).
fn walk_parts<'a>(
    body: &'a [u8],
    boundary: &str,
    depth: usize,
    changeset: Option<usize>,
    on_http: &mut dyn FnMut(&'a [u8], Option<usize>) -> Result<()>,
) -> Result<()> {
    if depth > 2 {
        return Err(Error::decode("transaction response nested too deeply"));
    }
    let delim = format!("--{boundary}");
    let delim = delim.as_bytes();
    // One finder for the whole body: building it costs more than a search.
    let finder = memchr::memmem::Finder::new(delim);
    let find = |hay: &[u8]| finder.find(hay);
    let mut rest = body;
    let Some(first) = find(rest) else {
        return Err(Error::decode("transaction response without its boundary"));
    };
    rest = &rest[first + delim.len()..];
    let mut nested = 0;
    loop {
        if rest.starts_with(b"--") {
            return Ok(());
        }
        let end = find(rest).unwrap_or(rest.len());
        let part = trim_line_break(&rest[..end]);
        let part = skip_line_break(part);
        let (headers, content) = split_head(part);
        let ct = header(headers, "content-type").unwrap_or(b"");
        if starts_with_ignore_case(ct, "multipart/mixed") {
            let inner = std::str::from_utf8(ct)
                .ok()
                .and_then(boundary_of)
                .ok_or_else(|| Error::decode("nested multipart without boundary"))?;
            let group = changeset.unwrap_or(nested);
            walk_parts(content, &inner, depth + 1, Some(group), on_http)?;
            nested += 1;
        } else if starts_with_ignore_case(ct, "application/http") {
            on_http(content, changeset)?;
        }
        if end == rest.len() {
            return Ok(());
        }
        rest = &rest[end + delim.len()..];
    }
}

fn skip_line_break(b: &[u8]) -> &[u8] {
    b.strip_prefix(b"\r\n")
        .or_else(|| b.strip_prefix(b"\n"))
        .unwrap_or(b)
}

fn trim_line_break(b: &[u8]) -> &[u8] {
    b.strip_suffix(b"\r\n")
        .or_else(|| b.strip_suffix(b"\n"))
        .unwrap_or(b)
}

/// Splits a header block from its content at the first empty line
/// (`\r\n\r\n`, or `\n\n` from lenient writers), in one pass.
fn split_head(b: &[u8]) -> (&[u8], &[u8]) {
    let mut at = 0;
    let (head, content) = loop {
        match memchr::memchr(b'\n', &b[at..]) {
            None => break (b, &b[b.len()..]),
            Some(i) => {
                let nl = at + i;
                let rest = &b[nl + 1..];
                if rest.starts_with(b"\r\n") {
                    break (&b[..nl], &rest[2..]);
                }
                if rest.starts_with(b"\n") {
                    break (&b[..nl], &rest[1..]);
                }
                at = nl + 1;
            }
        }
    };
    let head = head.strip_suffix(b"\r").unwrap_or(head);
    (head, content)
}

/// Whether `s` starts with `prefix`, ignoring ASCII case (no lower-cased copy).
fn starts_with_ignore_case(s: &[u8], prefix: &str) -> bool {
    s.get(..prefix.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// The lines of a header block, without their `\r`, found with `memchr`.
fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(head);
    std::iter::from_fn(move || {
        let text = rest?;
        let line = match memchr::memchr(b'\n', text) {
            Some(i) => {
                rest = Some(&text[i + 1..]);
                &text[..i]
            }
            None => {
                rest = None;
                text
            }
        };
        Some(line.strip_suffix(b"\r").unwrap_or(line))
    })
}

/// The value of header `name` (any case) in a header block, trimmed. Read as
/// bytes: only the values wanted are taken as text.
fn header<'a>(head: &'a [u8], name: &str) -> Option<&'a [u8]> {
    lines(head).find_map(|l| {
        let colon = memchr::memchr(b':', l)?;
        l[..colon]
            .trim_ascii()
            .eq_ignore_ascii_case(name.as_bytes())
            .then(|| l[colon + 1..].trim_ascii())
    })
}

fn parse_http(b: &[u8]) -> Result<PartResponse<'_>> {
    let (head, body) = split_head(b);
    let status_line = lines(head).next().unwrap_or(b"");
    let status = status_line
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .nth(1)
        .and_then(|s| std::str::from_utf8(s).ok()?.parse().ok())
        .ok_or_else(|| {
            Error::decode(format!(
                "bad status line in a transaction answer: {:?}",
                String::from_utf8_lossy(status_line)
            ))
        })?;
    Ok(PartResponse {
        status,
        etag: header(head, "etag").and_then(|v| std::str::from_utf8(v).ok()),
        body: trim_line_break(body),
    })
}

// The server's half of the format (`tablekit::server`): a transaction
// request read (what `encode` writes) and its answer written (what
// `parse_response` reads).

/// One HTTP request inside a batch.
#[derive(Debug)]
#[cfg(feature = "server")]
pub(crate) struct RequestPart<'a> {
    pub(crate) method: &'a str,
    /// The request line's URL, as written (absolute or a path).
    pub(crate) url: &'a str,
    head: &'a [u8],
    pub(crate) body: &'a [u8],
    /// The changeset it came in (`None`: in the batch itself), counted
    /// from 0 in the batch's order.
    pub(crate) changeset: Option<usize>,
}

#[cfg(feature = "server")]
impl RequestPart<'_> {
    /// The value of header `name` (any case), if it is text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        header(self.head, name).and_then(|v| std::str::from_utf8(v).ok())
    }
}

/// The requests of a batch body of Content-Type `content_type`, in order.
/// A decode error for a body that is not such a multipart.
#[cfg(feature = "server")]
pub(crate) fn parse_request<'a>(
    content_type: &str,
    body: &'a [u8],
) -> Result<Vec<RequestPart<'a>>> {
    let boundary = boundary_of(content_type)
        .ok_or_else(|| Error::decode("a batch without a multipart boundary"))?;
    let mut out = Vec::new();
    walk_parts(body, &boundary, 0, None, &mut |content, changeset| {
        let (head, body) = split_head(content);
        let mut lines = lines(head);
        let request_line = std::str::from_utf8(lines.next().unwrap_or(b""))
            .map_err(|_| Error::decode("a batch request line that is not text"))?;
        let mut words = request_line.split_ascii_whitespace();
        let (Some(method), Some(url)) = (words.next(), words.next()) else {
            return Err(Error::decode(format!(
                "a bad request line in a batch: {request_line:?}"
            )));
        };
        // The head without its request line.
        let head = memchr::memchr(b'\n', head).map_or(&head[head.len()..], |i| &head[i + 1..]);
        out.push(RequestPart {
            method,
            url,
            head,
            body: trim_line_break(body),
            changeset,
        });
        Ok(())
    })?;
    Ok(out)
}

/// One operation's answer inside a changeset.
#[derive(Debug, Default)]
#[cfg(feature = "server")]
pub(crate) struct PartAnswer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
}

/// A batch answer holding one changeset with `parts`, as the service
/// writes it: its Content-Type and body.
#[cfg(feature = "server")]
pub(crate) fn encode_response(parts: &[PartAnswer]) -> Encoded {
    let batch = format!("batchresponse_{}", uuid::Uuid::new_v4());
    let changeset = format!("changesetresponse_{}", uuid::Uuid::new_v4());
    let mut b = Vec::with_capacity(256 + parts.iter().map(|p| 300 + p.body.len()).sum::<usize>());
    open_changeset(&mut b, &batch, &changeset);
    for p in parts {
        open_part(&mut b, &changeset);
        let reason = http::StatusCode::from_u16(p.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        line(
            &mut b,
            &[
                "HTTP/1.1 ",
                itoa::Buffer::new().format(p.status),
                " ",
                reason,
            ],
        );
        for (name, value) in &p.headers {
            line(&mut b, &[name, ": ", value]);
        }
        line(&mut b, &[]);
        b.extend_from_slice(&p.body);
        line(&mut b, &[]);
    }
    line(&mut b, &["--", &changeset, "--"]);
    line(&mut b, &["--", &batch, "--"]);
    Encoded {
        content_type: format!("multipart/mixed; boundary={batch}"),
        body: b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::{EntityKey, IfMatch};

    #[test]
    fn encode_writes_one_changeset_with_a_request_per_operation() {
        let ops = vec![
            BatchOp {
                kind: BatchKind::Insert,
                key: EntityKey::new("p", "1"),
                body: Some(bytes::Bytes::from_static(
                    br#"{"PartitionKey":"p","RowKey":"1"}"#,
                )),
                bag: None,
                bag_json_len: 0,
            },
            BatchOp {
                kind: BatchKind::Delete(IfMatch::Any),
                key: EntityKey::new("p", "2'"),
                body: None,
                bag: None,
                bag_json_len: 0,
            },
        ];
        let e = encode("http://127.0.0.1:1/acct", "T1", &ops);
        let text = String::from_utf8(e.body).unwrap();
        let batch = e
            .content_type
            .strip_prefix("multipart/mixed; boundary=")
            .unwrap();
        assert!(text.starts_with(&format!(
            "--{batch}\r\nContent-Type: multipart/mixed; boundary=changeset_"
        )));
        assert!(text.contains("POST http://127.0.0.1:1/acct/T1 HTTP/1.1\r\n"));
        assert!(text.contains(
            "DELETE http://127.0.0.1:1/acct/T1(PartitionKey='p',RowKey='2%27%27') HTTP/1.1\r\n"
        ));
        assert!(text.contains("If-Match: *\r\n"));
        assert!(text.ends_with(&format!("--{batch}--\r\n")));
    }

    const SUCCESS: &str = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n--changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 204 No Content\r\nETag: W/\"a\"\r\n\r\n\r\n--changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 204 No Content\r\nETag: W/\"b\"\r\n\r\n\r\n--changesetresponse_2--\r\n--batchresponse_1--\r\n";

    #[test]
    fn success_maps_etags_in_order() {
        let etags = parse_response(
            "multipart/mixed; boundary=batchresponse_1",
            SUCCESS.as_bytes(),
            2,
            None,
        )
        .unwrap();
        assert_eq!(
            etags,
            vec![Some(ETag::new("W/\"a\"")), Some(ETag::new("W/\"b\""))]
        );
        assert!(parse_response(
            "multipart/mixed; boundary=batchresponse_1",
            SUCCESS.as_bytes(),
            3,
            None
        )
        .is_err());
    }

    #[test]
    fn part_headers_are_read_in_any_case_with_either_line_break() {
        // Content types and header names in other cases, `\n` line breaks,
        // and a byte that is not UTF-8 in another header of the part.
        let mut body = b"--b1\nCONTENT-TYPE: Multipart/Mixed; boundary=c2\n\n--c2\ncontent-type: Application/HTTP\n\nHTTP/1.1 201 Created\nX-Other: \xff\netag:  W/\"x\" \n\n\n--c2\r\nContent-Type: application/http\r\n\r\nHTTP/1.1 204 No Content\r\nEtag: W/\"y\"\r\n\r\n\r\n--c2--\n--b1--\n".to_vec();
        let etags = parse_response("multipart/mixed; boundary=b1", &body, 2, None).unwrap();
        assert_eq!(
            etags,
            vec![Some(ETag::new("W/\"x\"")), Some(ETag::new("W/\"y\""))]
        );
        // A part that is not an HTTP answer is not one of the operations.
        let at = body
            .windows(16)
            .position(|w| w == b"Application/HTTP")
            .unwrap();
        body.splice(at..at + 16, b"text/plain".iter().copied());
        assert!(parse_response("multipart/mixed; boundary=b1", &body, 2, None).is_err());
        assert_eq!(
            parse_response("multipart/mixed; boundary=b1", &body, 1, None).unwrap(),
            vec![Some(ETag::new("W/\"y\""))]
        );
    }

    #[test]
    fn the_boundary_parameter_is_found_in_any_case_and_quoted() {
        let b = |ct| boundary_of(ct).map(Cow::into_owned);
        assert_eq!(
            b("multipart/mixed; boundary=batchresponse_x"),
            Some("batchresponse_x".into())
        );
        assert_eq!(
            b("multipart/mixed; Boundary=batchresponse_x"),
            Some("batchresponse_x".into())
        );
        assert_eq!(b("Multipart/Mixed;BOUNDARY=b1"), Some("b1".into()));
        assert_eq!(
            b("multipart/mixed; charset=utf-8; boundary=\"batchresponse_x\""),
            Some("batchresponse_x".into())
        );
        // A quoted value may hold `;` and escaped quotes.
        assert_eq!(
            b(r#"multipart/mixed; boundary="a;b\"c"; charset=utf-8"#),
            Some(r#"a;b"c"#.into())
        );
        // A parameter whose name only ends in "boundary" is not it.
        assert_eq!(
            b("multipart/mixed; xboundary=no; boundary=yes"),
            Some("yes".into())
        );
        assert_eq!(b("multipart/mixed; boundary=\"unterminated"), None);
        assert_eq!(b("multipart/mixed; boundary="), None);
        assert_eq!(b("multipart/mixed"), None);
    }

    #[test]
    fn a_response_with_a_capitalised_boundary_parameter_parses() {
        let etags = parse_response(
            "multipart/mixed; Boundary=\"batchresponse_1\"",
            SUCCESS.as_bytes(),
            2,
            None,
        )
        .unwrap();
        assert_eq!(etags.len(), 2);
        let nested = SUCCESS.replace(
            "; boundary=changesetresponse_2",
            "; BOUNDARY=changesetresponse_2",
        );
        assert!(parse_response(
            "multipart/mixed; boundary=batchresponse_1",
            nested.as_bytes(),
            2,
            None
        )
        .is_ok());
    }

    #[test]
    fn the_paper_failure_example_reports_index_and_code() {
        // The WP's example (with the blank lines a real response has).
        let body = "--batchresponse_7ab1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_6cc8\r\n\r\n--changesetresponse_6cc8\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 400 Bad Request\r\nContent-ID: 4\r\nContent-Type: application/xml\r\nCache-Control: no-cache\r\nDataServiceVersion: 1.0;\r\n\r\n<?xml version=\"1.0\" encoding=\"utf-8\" standalone=\"yes\"?>\r\n<error xmlns=\"http://schemas.microsoft.com/ado/2007/08/dataservices/metadata\">\r\n  <code>InvalidInput</code>\r\n  <message xml:lang=\"en-US\">1:One of the request inputs is not valid.</message>\r\n</error>\r\n--changesetresponse_6cc8--\r\n--batchresponse_7ab1--\r\n";
        let err = parse_response(
            "multipart/mixed; boundary=batchresponse_7ab1",
            body.as_bytes(),
            5,
            Some("rid".into()),
        )
        .unwrap_err();
        assert_eq!(err.status(), Some(400));
        assert_eq!(err.code(), Some(&ErrorCode::InvalidInput));
        assert_eq!(err.batch_index(), Some(1));
        assert_eq!(err.request_id(), Some("rid"));
    }

    #[cfg(feature = "server")]
    #[test]
    fn a_request_the_client_encodes_is_read_back_by_the_server() {
        let ops = vec![
            BatchOp {
                kind: BatchKind::Insert,
                key: EntityKey::new("p", "1"),
                body: Some(bytes::Bytes::from_static(
                    br#"{"PartitionKey":"p","RowKey":"1"}"#,
                )),
                bag: None,
                bag_json_len: 0,
            },
            BatchOp {
                kind: BatchKind::Update(UpdateMode::Merge, IfMatch::ETag(ETag::new("W/\"x\""))),
                key: EntityKey::new("p", "2"),
                body: Some(bytes::Bytes::from_static(
                    br#"{"PartitionKey":"p","RowKey":"2","A":1}"#,
                )),
                bag: None,
                bag_json_len: 0,
            },
            BatchOp {
                kind: BatchKind::Delete(IfMatch::Any),
                key: EntityKey::new("p", "3'"),
                body: None,
                bag: None,
                bag_json_len: 0,
            },
        ];
        let e = encode("http://127.0.0.1:1/acct", "T1", &ops);
        let parts = parse_request(&e.content_type, &e.body).unwrap();
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| p.changeset == Some(0)));
        assert_eq!(
            (parts[0].method, parts[0].url),
            ("POST", "http://127.0.0.1:1/acct/T1")
        );
        assert_eq!(parts[0].body, br#"{"PartitionKey":"p","RowKey":"1"}"#);
        assert_eq!(parts[0].header("prefer"), Some("return-no-content"));
        assert_eq!(parts[1].method, "MERGE");
        assert_eq!(parts[1].header("If-Match"), Some("W/\"x\""));
        assert_eq!(parts[1].body, br#"{"PartitionKey":"p","RowKey":"2","A":1}"#);
        assert_eq!(parts[2].method, "DELETE");
        assert_eq!(
            parts[2].url,
            "http://127.0.0.1:1/acct/T1(PartitionKey='p',RowKey='3%27%27')"
        );
        assert_eq!(parts[2].header("if-match"), Some("*"));
        assert!(parts[2].body.is_empty());
        assert!(parse_request("multipart/mixed", &e.body).is_err());
        // Two changesets and a request in the batch itself: each part says
        // where it came.
        let body = "--b\r\nContent-Type: multipart/mixed; boundary=c1\r\n\r\n\
            --c1\r\nContent-Type: application/http\r\n\r\nPOST http://h/a/T HTTP/1.1\r\n\r\n{}\r\n--c1--\r\n\
            --b\r\nContent-Type: multipart/mixed; boundary=c2\r\n\r\n\
            --c2\r\nContent-Type: application/http\r\n\r\nDELETE http://h/a/T(PartitionKey='p',RowKey='r') HTTP/1.1\r\nIf-Match: *\r\n\r\n\r\n--c2--\r\n\
            --b\r\nContent-Type: application/http\r\n\r\nGET http://h/a/T() HTTP/1.1\r\n\r\n\r\n--b--\r\n";
        let parts = parse_request("multipart/mixed; boundary=b", body.as_bytes()).unwrap();
        let seen: Vec<_> = parts.iter().map(|p| (p.method, p.changeset)).collect();
        assert_eq!(
            seen,
            [("POST", Some(0)), ("DELETE", Some(1)), ("GET", None)]
        );
    }

    #[cfg(feature = "server")]
    #[test]
    fn an_answer_the_server_encodes_is_read_by_the_client() {
        let ok = encode_response(&[
            PartAnswer {
                status: 204,
                headers: vec![("ETag", "W/\"a\"".into())],
                body: Vec::new(),
            },
            PartAnswer {
                status: 201,
                headers: vec![("ETag", "W/\"b\"".into())],
                body: br#"{"PartitionKey":"p","RowKey":"2"}"#.to_vec(),
            },
        ]);
        let text = String::from_utf8(ok.body.clone()).unwrap();
        assert!(
            text.contains("HTTP/1.1 204 No Content\r\nETag: W/\"a\"\r\n"),
            "{text}"
        );
        assert!(text.contains("HTTP/1.1 201 Created\r\n"), "{text}");
        assert_eq!(
            parse_response(&ok.content_type, &ok.body, 2, None).unwrap(),
            vec![Some(ETag::new("W/\"a\"")), Some(ETag::new("W/\"b\""))]
        );
        let failed = encode_response(&[PartAnswer {
            status: 409,
            headers: vec![("Content-Type", "application/json".into())],
            body: br#"{"odata.error":{"code":"EntityAlreadyExists","message":{"lang":"en-US","value":"1:The specified entity already exists."}}}"#.to_vec(),
        }]);
        let err = parse_response(&failed.content_type, &failed.body, 2, None).unwrap_err();
        assert_eq!(err.status(), Some(409));
        assert_eq!(err.code(), Some(&ErrorCode::EntityAlreadyExists));
        assert_eq!(err.batch_index(), Some(1));
    }
}
