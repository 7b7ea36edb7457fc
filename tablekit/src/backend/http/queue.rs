//! The Queue service over HTTP: requests built from [`QueueOp`]s, signed with the
//! Blob/Queue form of Shared Key (or a SAS or bearer token), retried with the
//! table client's policy, and XML answers read with quick-xml.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Datelike as _, Utc};
use http::header::HeaderValue;
use http::Method;

use super::limits::Kind;
use super::pipeline::{Outgoing, Pipeline};
use super::signer::Service;
use super::transport::Incoming;
use super::wire::{header_str, header_string, names, parse_retry_after};
use super::{error_answer, HttpOptions};
use crate::account::Account;
use crate::backend::queue::{QueueBackend, QueueOp, QueueResponse, RawMessage};
use crate::error::{Error, Result};

/// The HTTP transport of the queue client.
pub(crate) struct HttpQueueBackend {
    pipeline: Pipeline,
    account: Account,
}

impl fmt::Debug for HttpQueueBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpQueueBackend")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

impl HttpQueueBackend {
    pub(crate) fn new(account: Account, options: &HttpOptions) -> Result<Self> {
        let endpoint = account.queue_endpoint().ok_or_else(|| {
            Error::config(
                "the connection string names no queue endpoint (QueueEndpoint, or AccountName with AccountKey)",
            )
        })?;
        Ok(HttpQueueBackend {
            pipeline: Pipeline::new(Service::Queue, &account, endpoint, options)?,
            account,
        })
    }

    /// The request of `op`: the resource below the endpoint (`jobs`,
    /// `jobs/messages`, `jobs/messages/{id}`), decoded query parameters, an XML body.
    fn build(&self, op: &QueueOp<'_>) -> Outgoing {
        let secs = |d: Duration| d.as_secs().to_string();
        let mut headers = Vec::new();
        let (method, resource, query, text) = match op {
            QueueOp::Create { queue } => (Method::PUT, queue.to_string(), vec![], None),
            QueueOp::Delete { queue } => (Method::DELETE, queue.to_string(), vec![], None),
            QueueOp::Send {
                queue,
                text,
                visibility_delay,
                time_to_live,
            } => {
                let mut q = vec![("visibilitytimeout", secs(*visibility_delay))];
                match time_to_live {
                    None => {}
                    Some(None) => q.push(("messagettl", "-1".to_owned())),
                    Some(Some(ttl)) => q.push(("messagettl", secs(*ttl))),
                }
                (Method::POST, format!("{queue}/messages"), q, Some(*text))
            }
            QueueOp::Receive {
                queue,
                max,
                visibility_timeout,
            } => (
                Method::GET,
                format!("{queue}/messages"),
                vec![
                    ("numofmessages", max.to_string()),
                    ("visibilitytimeout", secs(*visibility_timeout)),
                ],
                None,
            ),
            QueueOp::Peek { queue, max } => (
                Method::GET,
                format!("{queue}/messages"),
                vec![
                    ("numofmessages", max.to_string()),
                    ("peekonly", "true".to_owned()),
                ],
                None,
            ),
            QueueOp::Update {
                queue,
                id,
                pop_receipt,
                visibility_timeout,
                text,
            } => (
                Method::PUT,
                format!("{queue}/messages/{id}"),
                vec![
                    ("popreceipt", pop_receipt.to_string()),
                    ("visibilitytimeout", secs(*visibility_timeout)),
                ],
                *text,
            ),
            QueueOp::DeleteMessage {
                queue,
                id,
                pop_receipt,
            } => (
                Method::DELETE,
                format!("{queue}/messages/{id}"),
                vec![("popreceipt", pop_receipt.to_string())],
                None,
            ),
            QueueOp::Clear { queue } => (Method::DELETE, format!("{queue}/messages"), vec![], None),
            QueueOp::Count { queue } | QueueOp::Properties { queue } => (
                Method::GET,
                queue.to_string(),
                vec![("comp", "metadata".to_owned())],
                None,
            ),
            QueueOp::SetMetadata { queue, metadata } => {
                for (name, value) in metadata.iter() {
                    // Checked by the client: identifiers, printable ASCII.
                    if let (Ok(n), Ok(v)) = (
                        http::header::HeaderName::from_bytes(
                            format!("x-ms-meta-{name}").as_bytes(),
                        ),
                        HeaderValue::from_str(value),
                    ) {
                        headers.push((n, v));
                    }
                }
                (
                    Method::PUT,
                    queue.to_string(),
                    vec![("comp", "metadata".to_owned())],
                    None,
                )
            }
            QueueOp::List {
                prefix,
                marker,
                max,
                metadata,
            } => {
                let mut q = vec![("comp", "list".to_owned())];
                if let Some(p) = prefix {
                    q.push(("prefix", p.to_string()));
                }
                if let Some(m) = marker {
                    q.push(("marker", m.to_string()));
                }
                if let Some(n) = max {
                    q.push(("maxresults", n.to_string()));
                }
                if *metadata {
                    q.push(("include", "metadata".to_owned()));
                }
                (Method::GET, String::new(), q, None)
            }
        };
        let body = match text {
            Some(t) => Bytes::from(format!(
                "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessage><MessageText>{}</MessageText></QueueMessage>",
                quick_xml::escape::escape(t)
            )),
            None => Bytes::new(),
        };
        if !body.is_empty() {
            headers.push((
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/xml"),
            ));
        }
        Outgoing {
            method,
            resource,
            query,
            headers,
            body,
        }
    }

    async fn interpret(&self, op: &QueueOp<'_>, resp: Incoming) -> Result<QueueResponse> {
        let status = resp.status();
        let request_id = header_string(resp.headers(), &names::X_MS_REQUEST_ID);
        if !status.is_success() {
            let retry_after = header_str(resp.headers(), &names::RETRY_AFTER)
                .and_then(|v| parse_retry_after(v, Utc::now()));
            return Err(error_answer(
                resp,
                status,
                request_id,
                retry_after,
                self.pipeline.limits(),
            )
            .await);
        }
        Ok(match op {
            QueueOp::Create { .. } => QueueResponse::Created(status.as_u16() == 201),
            QueueOp::Delete { .. } | QueueOp::DeleteMessage { .. } | QueueOp::Clear { .. } => {
                QueueResponse::Done
            }
            QueueOp::Count { .. } => QueueResponse::Count(
                header_str(resp.headers(), &names::APPROXIMATE_MESSAGES_COUNT)
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| {
                        Error::decode("the queue's properties carry no message count")
                    })?,
            ),
            QueueOp::Properties { .. } => QueueResponse::Properties {
                count: header_str(resp.headers(), &names::APPROXIMATE_MESSAGES_COUNT)
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| {
                        Error::decode("the queue's properties carry no message count")
                    })?,
                metadata: metadata_of(resp.headers()),
            },
            QueueOp::SetMetadata { .. } => QueueResponse::Done,
            QueueOp::List { .. } => {
                let body = self.pipeline.limits().read(resp, Kind::Listing).await?;
                parse_queue_listing(&body)?
            }
            QueueOp::Update { .. } => {
                let pop_receipt =
                    header_string(resp.headers(), &names::POPRECEIPT).ok_or_else(|| {
                        Error::decode("an updated message came back with no pop receipt")
                    })?;
                let next_visible_on = header_str(resp.headers(), &names::TIME_NEXT_VISIBLE)
                    .and_then(parse_http_date)
                    .ok_or_else(|| {
                        Error::decode("an updated message came back with no next-visible time")
                    })?;
                QueueResponse::Updated {
                    pop_receipt,
                    next_visible_on,
                }
            }
            QueueOp::Send { .. } => {
                let body = self.pipeline.limits().read(resp, Kind::Messages).await?;
                let sent = parse_messages(&body)?
                    .into_iter()
                    .next()
                    .ok_or_else(|| Error::decode("a sent message came back with no description"))?;
                QueueResponse::Sent(sent)
            }
            QueueOp::Receive { .. } | QueueOp::Peek { .. } => {
                let body = self.pipeline.limits().read(resp, Kind::Messages).await?;
                QueueResponse::Messages(parse_messages(&body)?)
            }
        })
    }
}

#[async_trait::async_trait]
impl QueueBackend for HttpQueueBackend {
    async fn queue(&self, op: QueueOp<'_>) -> Result<QueueResponse> {
        let req = self.build(&op);
        // The call's span is the client's (`backend::traced`), around this future.
        let span = tracing::Span::none();
        self.pipeline
            .call(req, op.name(), op.repeat(), span, |resp| {
                self.interpret(&op, resp)
            })
            .await
    }

    #[cfg(feature = "admin")]
    async fn admin(
        &self,
        op: crate::backend::admin::AdminOp<'_>,
    ) -> Result<crate::backend::admin::AdminResponse> {
        super::admin::call(&self.pipeline, Service::Queue, op).await
    }
}

/// An RFC 1123 date as the Queue service writes them; year 9999 means "never".
fn parse_http_date(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc2822(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The `x-ms-meta-*` headers of an answer: names lower case (as HTTP/1.1
/// header names arrive), sorted.
fn metadata_of(headers: &http::HeaderMap) -> Vec<(String, String)> {
    let mut metadata: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(n, v)| {
            let name = n.as_str().strip_prefix("x-ms-meta-")?;
            Some((name.to_ascii_lowercase(), v.to_str().ok()?.to_owned()))
        })
        .collect();
    metadata.sort();
    metadata
}

/// Reads an `EnumerationResults` answer of a queue listing.
pub(crate) fn parse_queue_listing(body: &[u8]) -> Result<QueueResponse> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Results {
        #[serde(default)]
        queues: Queues,
        next_marker: Option<String>,
    }
    #[derive(serde::Deserialize, Default)]
    struct Queues {
        #[serde(rename = "Queue", default)]
        items: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Item {
        name: String,
        /// `<Metadata><name>value</name>...</Metadata>`: element names are the keys.
        #[serde(default)]
        metadata: std::collections::BTreeMap<String, String>,
    }
    let text = std::str::from_utf8(body)
        .map_err(|e| Error::decode_caused_by("a queue listing is not UTF-8", e))?;
    let results: Results = quick_xml::de::from_str(text)
        .map_err(|e| Error::decode_caused_by("a queue listing is not the expected XML", e))?;
    let queues = results
        .queues
        .items
        .into_iter()
        .map(|q| {
            let mut metadata: Vec<(String, String)> = q
                .metadata
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect();
            metadata.sort();
            (q.name, metadata)
        })
        .collect();
    Ok(QueueResponse::Queues {
        queues,
        next_marker: results.next_marker.filter(|m| !m.is_empty()),
    })
}

/// Reads a `QueueMessagesList` answer (send, receive, peek).
pub(crate) fn parse_messages(body: &[u8]) -> Result<Vec<RawMessage>> {
    #[derive(serde::Deserialize)]
    struct List {
        #[serde(rename = "QueueMessage", default)]
        messages: Vec<Message>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Message {
        message_id: String,
        insertion_time: String,
        expiration_time: String,
        pop_receipt: Option<String>,
        time_next_visible: Option<String>,
        dequeue_count: Option<u32>,
        message_text: Option<String>,
    }
    let text = std::str::from_utf8(body)
        .map_err(|e| Error::decode_caused_by("a queue answer is not UTF-8", e))?;
    let list: List = quick_xml::de::from_str(text)
        .map_err(|e| Error::decode_caused_by("a queue answer is not the expected XML", e))?;
    let date = |what: &str, t: &str| {
        parse_http_date(t).ok_or_else(|| Error::decode(format!("{what} {t:?} is not an HTTP date")))
    };
    list.messages
        .into_iter()
        .map(|m| {
            let expires = date("ExpirationTime", &m.expiration_time)?;
            Ok(RawMessage {
                id: m.message_id,
                pop_receipt: m.pop_receipt,
                dequeue_count: m.dequeue_count.unwrap_or(0),
                inserted_on: date("InsertionTime", &m.insertion_time)?,
                expires_on: (expires.year() < 9999).then_some(expires),
                next_visible_on: m
                    .time_next_visible
                    .as_deref()
                    .map(|t| date("TimeNextVisible", t))
                    .transpose()?,
                text: m.message_text.unwrap_or_default(),
            })
        })
        .collect()
}

/// The server's half of the codec: what the client above encodes, read; what
/// it reads, written. Each is tested as a round trip with the client's half.
#[cfg(feature = "server")]
pub(crate) mod serve {
    use std::fmt::Write as _;

    use chrono::{DateTime, Utc};

    use crate::backend::queue::RawMessage;

    /// An XML time as the Queue service writes them (RFC 1123); the service's
    /// last second of year 9999 for "never", and for any later time (a time
    /// to live of centuries), as the service caps it.
    pub(crate) fn xml_time(t: Option<DateTime<Utc>>) -> String {
        use chrono::Datelike as _;
        match t {
            Some(t) if t.year() < 9999 => t.format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
            _ => "Fri, 31 Dec 9999 23:59:59 GMT".to_owned(),
        }
    }

    /// Which answer a `QueueMessagesList` is: each carries other fields.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Listed {
        /// Put Message: id, times, pop receipt and next visibility; no text.
        Sent,
        /// Get Messages: everything.
        Received,
        /// Peek Messages: no pop receipt, no next visibility.
        Peeked,
    }

    /// The `QueueMessagesList` answer of a send, receive or peek.
    pub(crate) fn encode_messages(messages: &[RawMessage], listed: Listed) -> String {
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList>");
        for m in messages {
            let _ = write!(
                xml,
                "<QueueMessage><MessageId>{}</MessageId><InsertionTime>{}</InsertionTime>\
                 <ExpirationTime>{}</ExpirationTime>",
                quick_xml::escape::escape(m.id.as_str()),
                xml_time(Some(m.inserted_on)),
                xml_time(m.expires_on),
            );
            if listed != Listed::Peeked {
                let _ = write!(
                    xml,
                    "<PopReceipt>{}</PopReceipt><TimeNextVisible>{}</TimeNextVisible>",
                    quick_xml::escape::escape(m.pop_receipt.as_deref().unwrap_or_default()),
                    xml_time(Some(m.next_visible_on.unwrap_or(m.inserted_on))),
                );
            }
            if listed != Listed::Sent {
                let _ = write!(
                    xml,
                    "<DequeueCount>{}</DequeueCount><MessageText>{}</MessageText>",
                    m.dequeue_count,
                    quick_xml::escape::escape(m.text.as_str()),
                );
            }
            xml.push_str("</QueueMessage>");
        }
        xml.push_str("</QueueMessagesList>");
        xml
    }

    /// What a request's `<QueueMessage>` body says.
    #[derive(Debug, PartialEq, Eq)]
    pub(crate) enum MessageBody {
        /// The `MessageText`, XML-unescaped (possibly empty).
        Text(String),
        /// An XML `QueueMessage` with no `MessageText`.
        NoText,
        /// Not XML, or not a `QueueMessage`.
        Malformed,
    }

    /// Reads the `<QueueMessage><MessageText>` body of a send or update.
    pub(crate) fn decode_message_body(body: &[u8]) -> MessageBody {
        #[derive(serde::Deserialize)]
        struct Message {
            #[serde(rename = "MessageText", default)]
            text: Option<Text>,
        }
        #[derive(serde::Deserialize)]
        struct Text {
            #[serde(rename = "$text", default)]
            value: String,
        }
        let Ok(text) = std::str::from_utf8(body) else {
            return MessageBody::Malformed;
        };
        if root_name(text).as_deref() != Some("QueueMessage") {
            return MessageBody::Malformed;
        }
        match quick_xml::de::from_str::<Message>(text) {
            // A character reference to a character XML 1.0 cannot hold
            // (`&#1;`) makes the document invalid, as the service reads it.
            Ok(Message { text: Some(t) }) if !t.value.chars().all(xml_char) => {
                MessageBody::Malformed
            }
            Ok(Message { text: Some(t) }) => MessageBody::Text(t.value),
            Ok(Message { text: None }) => MessageBody::NoText,
            Err(_) => MessageBody::Malformed,
        }
    }

    /// Whether XML 1.0 can hold `c` (its `Char` production).
    fn xml_char(c: char) -> bool {
        matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
    }

    /// The name of the document's root element, if it is well-formed up to it.
    fn root_name(text: &str) -> Option<String> {
        use quick_xml::events::Event;
        let mut reader = quick_xml::Reader::from_str(text);
        loop {
            match reader.read_event().ok()? {
                Event::Start(e) | Event::Empty(e) => return Some(e.name().as_ref().to_owned()),
                Event::Decl(_) | Event::Comment(_) | Event::PI(_) => {}
                Event::Text(t) if t.trim().is_empty() => {}
                _ => return None,
            }
        }
    }

    /// One page of a queue listing, as `EnumerationResults`.
    pub(crate) struct Listing<'a> {
        /// `http://host/account/`.
        pub(crate) endpoint: &'a str,
        pub(crate) prefix: Option<&'a str>,
        pub(crate) marker: Option<&'a str>,
        pub(crate) max_results: Option<usize>,
        /// Each queue's name and, when asked for, metadata.
        pub(crate) queues: &'a [(String, Vec<(String, String)>)],
        pub(crate) with_metadata: bool,
        pub(crate) next_marker: Option<&'a str>,
    }

    /// The `EnumerationResults` answer of a queue listing.
    pub(crate) fn encode_queue_listing(l: &Listing<'_>) -> String {
        use quick_xml::escape::escape;
        let mut xml = format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults ServiceEndpoint=\"{}\">",
            escape(l.endpoint)
        );
        if let Some(p) = l.prefix {
            let _ = write!(xml, "<Prefix>{}</Prefix>", escape(p));
        }
        if let Some(m) = l.marker {
            let _ = write!(xml, "<Marker>{}</Marker>", escape(m));
        }
        if let Some(n) = l.max_results {
            let _ = write!(xml, "<MaxResults>{n}</MaxResults>");
        }
        xml.push_str("<Queues>");
        for (name, metadata) in l.queues {
            let _ = write!(xml, "<Queue><Name>{}</Name>", escape(name.as_str()));
            if l.with_metadata {
                xml.push_str("<Metadata>");
                for (k, v) in metadata {
                    // Names are identifiers: element names as they are.
                    let _ = write!(xml, "<{k}>{}</{k}>", escape(v.as_str()));
                }
                xml.push_str("</Metadata>");
            }
            xml.push_str("</Queue>");
        }
        xml.push_str("</Queues>");
        match l.next_marker {
            Some(m) => {
                let _ = write!(xml, "<NextMarker>{}</NextMarker>", escape(m));
            }
            None => xml.push_str("<NextMarker />"),
        }
        xml.push_str("</EnumerationResults>");
        xml
    }

    #[cfg(test)]
    mod tests {
        use super::super::{parse_messages, parse_queue_listing};
        use super::*;
        use crate::backend::queue::QueueResponse;

        fn message(text: &str, expires: bool) -> RawMessage {
            let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();
            RawMessage {
                id: "id-1".into(),
                pop_receipt: Some("receipt".into()),
                dequeue_count: 3,
                inserted_on: t("2026-11-29T06:00:00Z"),
                expires_on: expires.then(|| t("2026-12-06T06:00:00Z")),
                next_visible_on: Some(t("2026-11-29T06:00:30Z")),
                text: text.into(),
            }
        }

        #[test]
        fn message_lists_read_back_by_the_client_as_written() {
            let sent = [message("a <b> & 'c' \"d\" Grüße", true), message("", false)];
            let back = parse_messages(encode_messages(&sent, Listed::Received).as_bytes()).unwrap();
            assert_eq!(
                back, sent,
                "everything of a receive, markup and never-expiring included"
            );

            let back = parse_messages(encode_messages(&sent, Listed::Peeked).as_bytes()).unwrap();
            assert_eq!(back[0].text, sent[0].text);
            assert_eq!(back[0].dequeue_count, 3);
            assert_eq!(
                (back[0].pop_receipt.as_deref(), back[0].next_visible_on),
                (None, None)
            );

            let xml = encode_messages(&sent[..1], Listed::Sent);
            assert!(
                !xml.contains("MessageText") && !xml.contains("DequeueCount"),
                "{xml}"
            );
            let back = parse_messages(xml.as_bytes()).unwrap();
            assert_eq!(back[0].pop_receipt.as_deref(), Some("receipt"));
            assert_eq!(back[0].next_visible_on, sent[0].next_visible_on);
            assert_eq!(back[0].expires_on, sent[0].expires_on);
        }

        #[test]
        fn times_past_year_9999_are_written_as_the_services_never() {
            assert_eq!(xml_time(None), "Fri, 31 Dec 9999 23:59:59 GMT");
            assert_eq!(xml_time(Some(DateTime::<Utc>::MAX_UTC)), xml_time(None));
            let t = DateTime::parse_from_rfc3339("2026-11-29T06:05:04.9Z")
                .unwrap()
                .to_utc();
            assert_eq!(xml_time(Some(t)), "Sun, 29 Nov 2026 06:05:04 GMT");
        }

        #[test]
        fn message_bodies_the_client_writes_are_read_with_their_text() {
            let backend = super::super::HttpQueueBackend::new(
                crate::Account::from_connection_string("UseDevelopmentStorage=true").unwrap(),
                &crate::options::HttpOptions::default(),
            )
            .unwrap();
            for text in ["a<b>&\"c\"' Grüße 🦀", "", "  spaced\ttab  "] {
                let req = backend.build(&crate::backend::queue::QueueOp::Send {
                    queue: "jobs",
                    text,
                    visibility_delay: std::time::Duration::ZERO,
                    time_to_live: None,
                });
                assert_eq!(
                    decode_message_body(&req.body),
                    MessageBody::Text(text.to_owned())
                );
            }
            // Python's ElementTree: single quotes, a newline after the declaration.
            assert_eq!(
                decode_message_body(
                    b"<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>x &amp; y</MessageText></QueueMessage>"
                ),
                MessageBody::Text("x & y".into())
            );
            assert_eq!(
                decode_message_body(b"<QueueMessage><MessageText/></QueueMessage>"),
                MessageBody::Text(String::new())
            );
            assert_eq!(
                decode_message_body(b"<QueueMessage></QueueMessage>"),
                MessageBody::NoText
            );
            for bad in [
                &b"not xml"[..],
                b"<QueueMessage><MessageText>a</QueueMessage>",
                b"<Other><MessageText>a</MessageText></Other>",
                b"<QueueMessage><MessageText>&bogus;</MessageText></QueueMessage>",
                b"<QueueMessage><MessageText>a&#1;b</MessageText></QueueMessage>",
                b"<QueueMessage><MessageText>a\x01b</MessageText></QueueMessage>",
                b"<QueueMessage><MessageText>a&#xFFFE;b</MessageText></QueueMessage>",
                b"\xff",
                b"",
            ] {
                assert_eq!(decode_message_body(bad), MessageBody::Malformed, "{bad:?}");
            }
        }

        #[test]
        fn listings_read_back_by_the_client_as_written() {
            let queues = vec![
                (
                    "jobs".to_owned(),
                    vec![("owner".to_owned(), "ops & co".to_owned())],
                ),
                ("jobs-2".to_owned(), vec![]),
            ];
            let listing = Listing {
                endpoint: "http://127.0.0.1:10001/devstoreaccount1/",
                prefix: Some("jo"),
                marker: None,
                max_results: Some(2),
                queues: &queues,
                with_metadata: true,
                next_marker: Some("/devstoreaccount1/jobs-3"),
            };
            let QueueResponse::Queues {
                queues: back,
                next_marker,
            } = parse_queue_listing(encode_queue_listing(&listing).as_bytes()).unwrap()
            else {
                panic!("a listing")
            };
            assert_eq!(back, queues);
            assert_eq!(next_marker.as_deref(), Some("/devstoreaccount1/jobs-3"));

            let last = Listing {
                next_marker: None,
                with_metadata: false,
                ..listing
            };
            let xml = encode_queue_listing(&last);
            assert!(
                xml.contains("<NextMarker />") && !xml.contains("<Metadata>"),
                "{xml}"
            );
            let QueueResponse::Queues { next_marker, .. } =
                parse_queue_listing(xml.as_bytes()).unwrap()
            else {
                panic!("a listing")
            };
            assert_eq!(next_marker, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_lists_are_read_with_entities_unescaped() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?><QueueMessagesList><QueueMessage><MessageId>a1</MessageId><InsertionTime>Thu, 31 Jul 2014 18:00:00 GMT</InsertionTime><ExpirationTime>Fri, 31 Dec 9999 23:59:59 GMT</ExpirationTime><PopReceipt>AgAAAA==</PopReceipt><TimeNextVisible>Thu, 31 Jul 2014 18:00:30 GMT</TimeNextVisible><DequeueCount>2</DequeueCount><MessageText>a &lt;b&gt; &amp; c</MessageText></QueueMessage></QueueMessagesList>"#;
        let m = parse_messages(xml).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].id, "a1");
        assert_eq!(m[0].text, "a <b> & c");
        assert_eq!(m[0].dequeue_count, 2);
        assert_eq!(m[0].pop_receipt.as_deref(), Some("AgAAAA=="));
        assert_eq!(m[0].expires_on, None, "year 9999 means never");
        assert_eq!(
            m[0].next_visible_on.unwrap().to_rfc3339(),
            "2014-07-31T18:00:30+00:00"
        );
    }

    #[test]
    fn queue_listings_are_read_with_metadata_names_in_lower_case() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="https://myaccount.queue.core.windows.net/"><Prefix>jo</Prefix><MaxResults>2</MaxResults><Queues><Queue><Name>jobs</Name><Metadata><Owner>ops &amp; co</Owner><color>red</color></Metadata></Queue><Queue><Name>jobs-2</Name><Metadata /></Queue></Queues><NextMarker>/myaccount/jobs-3</NextMarker></EnumerationResults>"#;
        let QueueResponse::Queues {
            queues,
            next_marker,
        } = parse_queue_listing(xml).unwrap()
        else {
            panic!("a listing")
        };
        assert_eq!(
            queues,
            [
                (
                    "jobs".to_owned(),
                    vec![
                        ("color".to_owned(), "red".to_owned()),
                        ("owner".to_owned(), "ops & co".to_owned())
                    ]
                ),
                ("jobs-2".to_owned(), vec![]),
            ]
        );
        assert_eq!(next_marker.as_deref(), Some("/myaccount/jobs-3"));
        let QueueResponse::Queues {
            queues,
            next_marker,
        } = parse_queue_listing(
            br#"<EnumerationResults><Queues /><NextMarker /></EnumerationResults>"#,
        )
        .unwrap()
        else {
            panic!("a listing")
        };
        assert!(queues.is_empty() && next_marker.is_none());
    }

    #[test]
    fn set_metadata_sends_each_entry_as_a_header() {
        let backend = HttpQueueBackend::new(
            Account::from_connection_string("UseDevelopmentStorage=true").unwrap(),
            &HttpOptions::default(),
        )
        .unwrap();
        let metadata = [("owner".to_owned(), "ops".to_owned())];
        let req = backend.build(&QueueOp::SetMetadata {
            queue: "jobs",
            metadata: &metadata,
        });
        assert_eq!(req.method, Method::PUT);
        assert_eq!(req.query, [("comp", "metadata".to_owned())]);
        assert_eq!(req.headers.len(), 1);
        assert_eq!(req.headers[0].0.as_str(), "x-ms-meta-owner");
        assert_eq!(req.headers[0].1, "ops");
    }

    #[test]
    fn an_empty_list_is_no_messages() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?><QueueMessagesList />"#;
        assert!(parse_messages(xml).unwrap().is_empty());
        assert!(parse_messages(b"<QueueMessagesList></QueueMessagesList>")
            .unwrap()
            .is_empty());
        assert!(parse_messages(b"not xml at all <")
            .unwrap_err()
            .to_string()
            .contains("XML"));
    }

    #[test]
    fn message_text_is_escaped_in_request_bodies() {
        let backend = HttpQueueBackend::new(
            Account::from_connection_string("UseDevelopmentStorage=true").unwrap(),
            &HttpOptions::default(),
        )
        .unwrap();
        let req = backend.build(&QueueOp::Send {
            queue: "jobs",
            text: "a<b>&\"c\"",
            visibility_delay: Duration::from_secs(5),
            time_to_live: Some(None),
        });
        let body = std::str::from_utf8(&req.body).unwrap();
        assert!(
            body.contains("<MessageText>a&lt;b&gt;&amp;&quot;c&quot;</MessageText>"),
            "{body}"
        );
        assert_eq!(
            req.query,
            [
                ("visibilitytimeout", "5".to_owned()),
                ("messagettl", "-1".to_owned())
            ]
        );
    }
}
