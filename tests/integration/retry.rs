//! Retries against a scripted fake server on loopback: transient answers are
//! retried, permanent ones are not, and a write whose retry meets 409 is
//! reported as ambiguous rather than as a plain conflict. Also what every
//! request carries (User-Agent) and the per-attempt timeout.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tablekit::{
    account::{AccountKey, Credential},
    options::{ClientOptions, RetryPolicy},
    table::AmbiguousWrites,
    Account, DynamicEntity, TableClient, TableServiceClient,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the fake server does with one request.
#[derive(Clone, Copy)]
pub(crate) enum Answer {
    /// Reply with this status line, an `x-ms-request-id` and a JSON error body for this code.
    Status(&'static str, &'static str),
    /// As `Status`, with a `Retry-After` header of this value.
    RetryAfter(&'static str, &'static str, &'static str),
    /// 204 with an ETag, as a successful insert with `return-no-content`.
    Created,
    /// 200 with this JSON entity and an ETag, as a point read.
    Entity(&'static str),
    /// Wait this long, then answer as `Created`.
    Slow(Duration),
    /// Read the request, then close the connection without answering.
    Drop,
    /// Answer this status with a JSON error body for this code, but close the
    /// connection halfway through the body.
    CutBody(&'static str, &'static str),
}

/// The request heads the fake server received, lower-cased, in order.
pub(crate) type Heads = Arc<Mutex<Vec<String>>>;

/// Serves `script` in order (the last answer repeats) and counts requests.
pub(crate) async fn fake_server(script: Vec<Answer>) -> (String, Arc<AtomicUsize>) {
    let (endpoint, count, _) = recording_server(script).await;
    (endpoint, count)
}

/// [`fake_server`], keeping each request's head.
pub(crate) async fn recording_server(script: Vec<Answer>) -> (String, Arc<AtomicUsize>, Heads) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let heads: Heads = Arc::default();
    let seen = count.clone();
    let kept = heads.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let script = script.clone();
            let seen = seen.clone();
            let kept = kept.clone();
            tokio::spawn(async move {
                while let Some(head) = read_request(&mut sock).await {
                    kept.lock().unwrap().push(head);
                    let n = seen.fetch_add(1, Ordering::SeqCst);
                    let answer = script[n.min(script.len() - 1)];
                    let created = "HTTP/1.1 204 No Content\r\nETag: W/\"datetime'2024-01-01T00%3A00%3A00.0000000Z'\"\r\nx-ms-request-id: ok\r\nContent-Length: 0\r\n\r\n".to_owned();
                    let error = |status: &str, code: &str, extra: &str| {
                        let body = format!(
                            r#"{{"odata.error":{{"code":"{code}","message":{{"lang":"en-US","value":"scripted"}}}}}}"#
                        );
                        format!(
                            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nx-ms-request-id: rid-{n}\r\n{extra}Content-Length: {}\r\n\r\n{body}",
                            body.len()
                        )
                    };
                    let reply = match answer {
                        Answer::Drop => return,
                        Answer::CutBody(status, code) => {
                            let whole = error(status, code, "");
                            let cut = whole.len() - 40;
                            let _ = sock.write_all(&whole.as_bytes()[..cut]).await;
                            let _ = sock.flush().await;
                            return;
                        }
                        Answer::RetryAfter(status, code, after) => {
                            error(status, code, &format!("Retry-After: {after}\r\n"))
                        }
                        Answer::Entity(json) => format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json;odata=minimalmetadata\r\nETag: W/\"datetime'2024-01-01T00%3A00%3A0{}.0000000Z'\"\r\nContent-Length: {}\r\n\r\n{json}",
                            n % 10,
                            json.len()
                        ),
                        Answer::Slow(wait) => {
                            tokio::time::sleep(wait).await;
                            created
                        }
                        Answer::Created => created,
                        Answer::Status(status, code) => error(status, code, ""),
                    };
                    if sock.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}/devstoreaccount1"), count, heads)
}

/// Reads one request (headers and a Content-Length body) and returns its head,
/// lower-cased; `None` at end of stream.
async fn read_request(sock: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                match sock.read(&mut byte).await {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => buf.extend_from_slice(&byte[..n]),
                }
            }
            return Some(head);
        }
        match sock.read(&mut byte).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&byte[..n]),
        }
    }
}

/// A table client of the fake server at `endpoint`: three quick retries.
pub(crate) fn table(endpoint: &str) -> TableClient<DynamicEntity> {
    let mut options = crate::common::client_options();
    options.http.retry = RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    };
    options.http.timeout = Duration::from_secs(5);
    table_with(endpoint, options)
}

pub(crate) fn table_with(endpoint: &str, options: ClientOptions) -> TableClient<DynamicEntity> {
    let key = AccountKey::from_base64("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=").unwrap();
    let account = Account::new("devstoreaccount1", endpoint, Credential::SharedKey(key)).unwrap();
    TableServiceClient::with_options(account, options)
        .unwrap()
        .table("Retries")
        .unwrap()
}

#[tokio::test]
async fn transient_503_is_retried_until_success() {
    let (endpoint, count) = fake_server(vec![
        Answer::Status("503 Server Busy", "ServerBusy"),
        Answer::Status("503 Server Busy", "ServerBusy"),
        Answer::Created,
    ])
    .await;
    let written = table(&endpoint)
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .unwrap();
    assert!(written.timestamp().is_some());
    assert_eq!(count.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn retries_stop_at_the_policy_limit_and_keep_the_last_error() {
    let (endpoint, count) = fake_server(vec![Answer::Status(
        "500 Internal Server Error",
        "InternalError",
    )])
    .await;
    let err = table(&endpoint)
        .get(("p", "r"))
        .await
        .expect_err("the server always fails");
    assert_eq!(err.status(), Some(500));
    assert_eq!(err.code(), Some(&tablekit::error::ErrorCode::InternalError));
    assert_eq!(err.request_id(), Some("rid-3"));
    assert!(err.is_retryable());
    assert_eq!(
        count.load(Ordering::SeqCst),
        4,
        "one attempt and three retries"
    );
}

#[tokio::test]
async fn permanent_errors_are_not_retried() {
    let (endpoint, count) =
        fake_server(vec![Answer::Status("409 Conflict", "EntityAlreadyExists")]).await;
    let err = table(&endpoint)
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .expect_err("conflict");
    assert!(err.is_conflict());
    assert!(!err.is_ambiguous(), "a first-attempt conflict is certain");
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_insert_whose_answer_was_lost_then_conflicts_is_ambiguous_not_a_conflict() {
    let (endpoint, count) = fake_server(vec![
        Answer::Drop,
        Answer::Status("409 Conflict", "EntityAlreadyExists"),
    ])
    .await;
    let err = table(&endpoint)
        .with_ambiguous_writes(AmbiguousWrites::Report)
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .expect_err("the retry conflicts");
    assert!(err.is_ambiguous(), "{err}");
    // The 409 may be the caller's own entity: not a conflict, but the status stays.
    assert!(!err.is_conflict(), "{err}");
    assert_eq!(err.status(), Some(409));
    assert!(err.to_string().contains("outcome is unknown"), "{err}");
    assert!(err.read_back().is_none(), "Report reads nothing back");
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_ambiguous_insert_that_reads_back_as_sent_succeeds() {
    let (endpoint, count) = fake_server(vec![
        Answer::Drop,
        Answer::Status("409 Conflict", "EntityAlreadyExists"),
        Answer::Entity(r#"{"PartitionKey":"p","RowKey":"r","N":7,"S":"x"}"#),
    ])
    .await;
    let written = table(&endpoint)
        .insert(&DynamicEntity::new("p", "r").with("N", 7).with("S", "x"))
        .await
        .expect("the read-back shows the insert landed");
    assert!(
        written.etag().as_str().contains("2024-01-01"),
        "{written:?}"
    );
    assert_eq!(count.load(Ordering::SeqCst), 3, "insert, retry, read-back");
}

#[tokio::test]
async fn an_ambiguous_insert_that_reads_back_otherwise_fails_with_what_was_read() {
    let (endpoint, _) = fake_server(vec![
        Answer::Drop,
        Answer::Status("409 Conflict", "EntityAlreadyExists"),
        Answer::Entity(r#"{"PartitionKey":"p","RowKey":"r","N":8,"S":"x"}"#),
    ])
    .await;
    let err = table(&endpoint)
        .insert(&DynamicEntity::new("p", "r").with("N", 7).with("S", "x"))
        .await
        .expect_err("somebody else's entity is there");
    assert!(err.is_ambiguous() && !err.is_conflict(), "{err}");
    let found = err
        .read_back()
        .and_then(|rb| rb.get(&tablekit::EntityKey::new("p", "r")))
        .expect("the read-back state is kept");
    assert_eq!(
        found.properties.get("N"),
        Some(&tablekit::EdmValue::Int32(8))
    );
}

#[tokio::test]
async fn an_insert_whose_every_answer_is_lost_is_ambiguous() {
    let (endpoint, count) = fake_server(vec![Answer::Drop]).await;
    let err = table(&endpoint)
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .expect_err("no answer ever arrives");
    assert!(err.is_transport(), "{err:?}");
    assert!(err.is_ambiguous(), "the insert may have landed: {err:?}");
    assert!(err.read_back().is_none(), "the read-back failed too");
    // One attempt, three retries, then one read-back attempt and its three retries.
    assert_eq!(count.load(Ordering::SeqCst), 8);
}

#[tokio::test]
async fn a_read_whose_answers_are_lost_is_not_ambiguous() {
    let (endpoint, _) = fake_server(vec![Answer::Drop]).await;
    let err = table(&endpoint).get(("p", "r")).await.unwrap_err();
    assert!(err.is_transport() && !err.is_ambiguous(), "{err:?}");
}

#[tokio::test]
async fn a_503_proves_nothing_was_applied_so_a_later_conflict_is_certain() {
    let (endpoint, count) = fake_server(vec![
        Answer::Status("503 Server Busy", "ServerBusy"),
        Answer::Status("409 Conflict", "EntityAlreadyExists"),
    ])
    .await;
    let err = table(&endpoint)
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .unwrap_err();
    assert!(err.is_conflict() && !err.is_ambiguous(), "{err:?}");
    assert_eq!(count.load(Ordering::SeqCst), 2, "no read-back");
}

#[tokio::test]
async fn a_500_leaves_the_outcome_unknown() {
    let (endpoint, _) = fake_server(vec![
        Answer::Status("500 Internal Server Error", "InternalError"),
        Answer::Status("409 Conflict", "EntityAlreadyExists"),
    ])
    .await;
    let err = table(&endpoint)
        .with_ambiguous_writes(AmbiguousWrites::Report)
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .unwrap_err();
    assert!(err.is_ambiguous() && !err.is_conflict(), "{err:?}");
}

#[tokio::test]
async fn a_reset_inside_an_error_answer_keeps_its_status() {
    let (endpoint, count) =
        fake_server(vec![Answer::CutBody("409 Conflict", "EntityAlreadyExists")]).await;
    let err = table(&endpoint)
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .expect_err("the service answered 409");
    assert!(!err.is_transport(), "{err:?}");
    assert_eq!(err.status(), Some(409));
    assert!(err.is_conflict() && !err.is_ambiguous(), "{err:?}");
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_ambiguous_delete_that_finds_nothing_succeeds() {
    let (endpoint, count) = fake_server(vec![
        Answer::Drop,
        Answer::Status("404 Not Found", "ResourceNotFound"),
    ])
    .await;
    table(&endpoint)
        .delete(("p", "r"), tablekit::IfMatch::Any)
        .await
        .expect("the entity is gone, as the delete wanted");
    // delete, retry (404), read-back (404: no entity)
    assert_eq!(count.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_ambiguous_conditional_update_that_reads_back_as_sent_succeeds() {
    let (endpoint, _) = fake_server(vec![
        Answer::Drop,
        Answer::Status("412 Precondition Failed", "UpdateConditionNotSatisfied"),
        Answer::Entity(r#"{"PartitionKey":"p","RowKey":"r","N":2,"Old":"kept"}"#),
    ])
    .await;
    let etag = tablekit::ETag::new("W/\"datetime'2023-01-01T00%3A00%3A00.0000000Z'\"");
    table(&endpoint)
        .update(
            &DynamicEntity::new("p", "r").with("N", 2),
            tablekit::UpdateMode::Merge,
            etag,
        )
        .await
        .expect("the merge is in the stored entity");
}

#[tokio::test]
async fn every_attempt_of_a_call_sends_one_client_request_id() {
    let (endpoint, _, heads) = recording_server(vec![
        Answer::Status("503 Server Busy", "ServerBusy"),
        Answer::Created,
        Answer::Status("400 Bad Request", "InvalidInput"),
    ])
    .await;
    let t = table(&endpoint);
    t.insert(&DynamicEntity::new("p", "r")).await.unwrap();
    let err = t.insert(&DynamicEntity::new("p", "s")).await.unwrap_err();
    let ids: Vec<String> = heads
        .lock()
        .unwrap()
        .iter()
        .map(|h| {
            h.lines()
                .find_map(|l| l.strip_prefix("x-ms-client-request-id:"))
                .expect("every request carries a client request id")
                .trim()
                .to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], ids[1], "a retry keeps its call's id");
    assert_ne!(ids[1], ids[2], "each call has its own id");
    assert!(uuid::Uuid::parse_str(&ids[2]).is_ok(), "{}", ids[2]);
    assert_eq!(err.client_request_id(), Some(ids[2].as_str()));
}

#[tokio::test]
async fn a_closed_port_is_a_transport_error() {
    let err = table("http://127.0.0.1:9/devstoreaccount1")
        .get(("p", "r"))
        .await
        .expect_err("nothing listens on the discard port");
    assert!(err.is_transport(), "{err:?}");
    assert!(err.status().is_none());
}

#[tokio::test]
async fn retry_after_of_a_503_is_waited_for() {
    let (endpoint, count) = fake_server(vec![
        Answer::RetryAfter("503 Server Busy", "ServerBusy", "1"),
        Answer::Created,
    ])
    .await;
    let mut options = crate::common::client_options();
    // Backoff alone would wait at most 1 ms; only Retry-After explains a second.
    options.http.retry = RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_secs(3),
    };
    let started = Instant::now();
    table_with(&endpoint, options)
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "waited only {:?}",
        started.elapsed()
    );
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_last_throttling_answer_reports_its_retry_after() {
    let (endpoint, _) = fake_server(vec![Answer::RetryAfter(
        "429 Too Many Requests",
        "TooManyRequests",
        "Wed, 21 Oct 2015 07:28:00 GMT",
    )])
    .await;
    let err = table(&endpoint).get(("p", "r")).await.unwrap_err();
    assert!(err.is_throttled());
    // An HTTP date in the past asks for no wait at all.
    assert_eq!(err.retry_after(), Some(Duration::ZERO));
}

#[tokio::test]
async fn every_request_names_tablekit_as_user_agent() {
    let (endpoint, _, heads) = recording_server(vec![Answer::Created]).await;
    table(&endpoint)
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .unwrap();
    let heads = heads.lock().unwrap();
    let want = format!("user-agent: tablekit/{} (rust)", env!("CARGO_PKG_VERSION"));
    assert!(
        heads[0].lines().any(|l| l == want),
        "{want:?} not in {:?}",
        heads[0]
    );
}

#[tokio::test]
async fn a_slow_answer_runs_into_the_per_attempt_timeout() {
    let (endpoint, count) = fake_server(vec![Answer::Slow(Duration::from_secs(3))]).await;
    let mut options = crate::common::client_options();
    options.http.retry = RetryPolicy::none();
    options.http.timeout = Duration::from_millis(200);
    let err = table_with(&endpoint, options)
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .expect_err("the answer comes after the timeout");
    assert!(err.is_transport() && err.is_timeout(), "{err:?}");
    assert!(err.is_retryable());
    // The insert may have landed after the timeout: ambiguous, and read back
    // (which times out as well, so the error stays).
    assert!(err.is_ambiguous(), "{err:?}");
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_timed_out_attempt_is_retried() {
    let (endpoint, count) =
        fake_server(vec![Answer::Slow(Duration::from_secs(3)), Answer::Created]).await;
    let mut options = crate::common::client_options();
    options.http.retry = RetryPolicy {
        max_retries: 1,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(1),
    };
    options.http.timeout = Duration::from_millis(300);
    table_with(&endpoint, options)
        .upsert(&DynamicEntity::new("p", "r"), tablekit::UpdateMode::Merge)
        .await
        .unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

/// A server that does not speak TLS: every connection gets a plain HTTP answer.
async fn plain_http_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            let _ = sock
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    (port, connections)
}

#[tokio::test]
async fn a_tls_handshake_failure_is_not_retried() {
    let (port, connections) = plain_http_server().await;
    let err = table(&format!("https://127.0.0.1:{port}/devstoreaccount1"))
        .get(("p", "r"))
        .await
        .expect_err("the server does not speak TLS");
    assert!(err.is_transport(), "{err:?}");
    assert!(!err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("TLS"), "{err}");
    assert_eq!(connections.load(Ordering::SeqCst), 1, "no retry");
}

/// A call retries alike traced or not (one way for every attempt): the same
/// requests, under one client request id, and the same end; traced, it is
/// one public-call span and one span per attempt, with the attempt's status
/// and resend count.
#[tokio::test]
async fn a_call_retries_alike_whether_or_not_it_is_traced() {
    const ENTITY: &str =
        r#"{"PartitionKey":"p","RowKey":"r","Timestamp":"2024-01-01T00:00:00Z","N":7}"#;
    for traced in [false, true] {
        let (endpoint, count, heads) = recording_server(vec![
            Answer::Status("503 Server Busy", "ServerBusy"),
            Answer::Status("500 Internal Server Error", "InternalError"),
            Answer::Entity(ENTITY),
        ])
        .await;
        let recorder = tablekit_test_support::Recorder::default();
        let guard = traced.then(|| tracing::subscriber::set_default(recorder.clone()));
        let got = table(&endpoint).get(("p", "r")).await;
        drop(guard);
        let got = got.unwrap().expect("the entity, on the third attempt");
        assert_eq!(
            got.get("N").and_then(|v| v.as_i32()),
            Some(7),
            "traced: {traced}"
        );
        assert_eq!(count.load(Ordering::SeqCst), 3, "traced: {traced}");
        let ids: Vec<String> = heads
            .lock()
            .unwrap()
            .iter()
            .filter_map(|h| {
                h.lines()
                    .find_map(|l| l.strip_prefix("x-ms-client-request-id:"))
                    .map(|id| id.trim().to_owned())
            })
            .collect();
        assert_eq!(ids.len(), 3, "traced: {traced}");
        assert!(ids.iter().all(|id| *id == ids[0]), "one id: {ids:?}");
        let spans = recorder.spans();
        let requests = spans.iter().filter(|(name, _)| name == "tablekit.request");
        let attempts: Vec<_> = spans
            .iter()
            .filter(|(name, _)| name == "GET")
            .map(|(_, f)| f)
            .collect();
        match traced {
            false => assert_eq!((requests.count(), attempts.len()), (0, 0)),
            true => {
                let fields: Vec<_> = requests.map(|(_, f)| f).collect();
                assert_eq!(fields.len(), 1, "one span for the call");
                assert_eq!(
                    tablekit_test_support::field(fields[0], "otel.name"),
                    Some("TableClient.get")
                );
                // One span per attempt: its status, its resend count, one
                // client request id.
                let field = |f, name| tablekit_test_support::field(f, name);
                let seen: Vec<_> = attempts
                    .iter()
                    .map(|f| {
                        (
                            field(f, "http.response.status_code"),
                            field(f, "http.request.resend_count"),
                            field(f, "az.client_request_id"),
                        )
                    })
                    .collect();
                let id = Some(ids[0].as_str());
                assert_eq!(
                    seen,
                    [
                        (Some("503"), None, id),
                        (Some("500"), Some("1"), id),
                        (Some("200"), Some("2"), id),
                    ]
                );
                assert_eq!(field(attempts[0], "error.type"), Some("503"));
                assert_eq!(field(attempts[2], "error.type"), None);
            }
        }
    }
}
