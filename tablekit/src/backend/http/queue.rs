//! The Queue service over HTTP: requests built from [`QueueOp`]s, signed with the
//! Blob/Queue form of Shared Key (or a SAS or bearer token), retried with the
//! table client's policy, and XML answers read with quick-xml.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Datelike as _, Utc};
use http::header::{HeaderMap, HeaderValue};
use http::Method;
use tracing::Instrument;

use super::account::{Account, Credential};
use super::storage_auth::{self, StorageRequest};
use super::transport::{HttpTransport, Incoming};
use super::wire::{header_str, header_string, header_value, names, parse_retry_after, QueryString};
use super::{
    auth, client_request_id, error_answer, http_request, parse_endpoint, with_retries, HttpOptions,
    RetryPolicy, API_VERSION,
};
use crate::backend::queue::{QueueBackend, QueueOp, QueueResponse, RawMessage};
use crate::error::{Error, Result};

/// The HTTP transport of the queue client.
pub(crate) struct HttpQueueBackend {
    transport: HttpTransport,
    account: Account,
    base_path: String,
    retry: RetryPolicy,
}

impl fmt::Debug for HttpQueueBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpQueueBackend")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

/// A queue request before signing.
struct Request {
    method: Method,
    /// The resource below the endpoint: `jobs`, `jobs/messages`, `jobs/messages/{id}`.
    resource: String,
    /// Decoded query parameters, signed as they are.
    query: Vec<(&'static str, String)>,
    body: Bytes,
}

impl HttpQueueBackend {
    pub(crate) fn new(account: Account, options: &HttpOptions) -> Result<Self> {
        let endpoint = account.queue_endpoint().ok_or_else(|| {
            Error::config(
                "the connection string names no queue endpoint (QueueEndpoint, or AccountName with AccountKey)",
            )
        })?;
        let (base, base_path) = parse_endpoint(endpoint, "queue")?;
        if matches!(account.credential(), Credential::SharedKeyLite(_)) {
            return Err(Error::config(
                "the queue client signs with SharedKey, a SAS or a bearer token, not SharedKeyLite",
            ));
        }
        Ok(HttpQueueBackend {
            transport: HttpTransport::new(&base, options)?,
            base_path,
            account,
            retry: options.retry.clone(),
        })
    }

    fn build(&self, op: &QueueOp<'_>) -> Request {
        let secs = |d: Duration| d.as_secs().to_string();
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
            QueueOp::Count { queue } => (
                Method::GET,
                queue.to_string(),
                vec![("comp", "metadata".to_owned())],
                None,
            ),
        };
        let body = match text {
            Some(t) => Bytes::from(format!(
                "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessage><MessageText>{}</MessageText></QueueMessage>",
                quick_xml::escape::escape(t)
            )),
            None => Bytes::new(),
        };
        Request {
            method,
            resource,
            query,
            body,
        }
    }

    async fn send_once(&self, req: &Request, client_request_id: &str) -> Result<Incoming> {
        let mut path = String::with_capacity(self.base_path.len() + req.resource.len() + 1);
        path.push_str(&self.base_path);
        path.push('/');
        path.push_str(&req.resource);
        let mut q = QueryString::default();
        for (name, value) in &req.query {
            q.push(name, value);
        }

        let date_value = auth::x_ms_date();
        let date = date_value.to_str().unwrap_or("");
        let mut headers = HeaderMap::with_capacity(8);
        headers.insert(names::X_MS_DATE, date_value.clone());
        headers.insert(names::X_MS_VERSION, HeaderValue::from_static(API_VERSION));
        headers.insert(
            names::X_MS_CLIENT_REQUEST_ID,
            header_value(client_request_id)?,
        );
        let content_type = if req.body.is_empty() {
            ""
        } else {
            "application/xml"
        };
        if !content_type.is_empty() {
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/xml"),
            );
        }
        match self.account.credential() {
            Credential::SharedKey(key) => {
                let query: Vec<(&str, &str)> =
                    req.query.iter().map(|(n, v)| (*n, v.as_str())).collect();
                let signed = StorageRequest {
                    method: req.method.as_str(),
                    content_length: req.body.len() as u64,
                    content_type,
                    ms_headers: &[
                        ("x-ms-client-request-id", client_request_id),
                        ("x-ms-date", date),
                        ("x-ms-version", API_VERSION),
                    ],
                    path: &path,
                    query: &query,
                    ..Default::default()
                };
                let mut v = header_value(&storage_auth::shared_key(
                    self.account.account_name(),
                    key,
                    &signed,
                ))?;
                v.set_sensitive(true);
                headers.insert(http::header::AUTHORIZATION, v);
            }
            Credential::Sas(sas) => {
                if !q.0.is_empty() {
                    q.0.push('&');
                }
                q.0.push_str(sas.as_query());
            }
            Credential::Bearer(tokens) => {
                let token = tokens.bearer_token().await?;
                let mut v = header_value(&format!("Bearer {token}"))?;
                v.set_sensitive(true);
                headers.insert(http::header::AUTHORIZATION, v);
            }
            _ => {}
        }
        let request = http_request(&req.method, &path, &q.0, None, headers, req.body.clone())?;
        self.transport.send(request).await
    }

    async fn interpret(&self, op: &QueueOp<'_>, resp: Incoming) -> Result<QueueResponse> {
        let status = resp.status();
        let request_id = header_string(resp.headers(), &names::X_MS_REQUEST_ID);
        tracing::Span::current().record("status", status.as_u16());
        if !status.is_success() {
            let retry_after = header_str(resp.headers(), &names::RETRY_AFTER)
                .and_then(|v| parse_retry_after(v, Utc::now()));
            return Err(error_answer(resp, status, request_id, retry_after).await);
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
                let body = resp.bytes().await?;
                let sent = parse_messages(&body)?
                    .into_iter()
                    .next()
                    .ok_or_else(|| Error::decode("a sent message came back with no description"))?;
                QueueResponse::Sent(sent)
            }
            QueueOp::Receive { .. } | QueueOp::Peek { .. } => {
                let body = resp.bytes().await?;
                QueueResponse::Messages(parse_messages(&body)?)
            }
        })
    }
}

#[async_trait::async_trait]
impl QueueBackend for HttpQueueBackend {
    async fn queue(&self, op: QueueOp<'_>) -> Result<QueueResponse> {
        let span = tracing::debug_span!(
            "tablekit.request",
            operation = op.name(),
            status = tracing::field::Empty,
            client_request_id = tracing::field::Empty,
        );
        let req = self.build(&op);
        let id = client_request_id();
        with_retries(&self.retry, op.name(), op.repeat(), &id, || async {
            let resp = self.send_once(&req, &id).await?;
            self.interpret(&op, resp).await
        })
        .instrument(span)
        .await
    }
}

/// An RFC 1123 date as the Queue service writes them; year 9999 means "never".
fn parse_http_date(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc2822(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Reads a `QueueMessagesList` answer (send, receive, peek).
fn parse_messages(body: &[u8]) -> Result<Vec<RawMessage>> {
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
