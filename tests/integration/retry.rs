//! Retries against a scripted fake server on loopback: transient answers are
//! retried, permanent ones are not, and a write whose retry meets 409 is
//! reported as ambiguous rather than as a plain conflict.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tablekit::{
    Account, AccountKey, ClientOptions, Credential, DynamicEntity, RetryPolicy, TableClient,
    TableServiceClient,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the fake server does with one request.
#[derive(Clone, Copy)]
enum Answer {
    /// Reply with this status line, an `x-ms-request-id` and a JSON error body for this code.
    Status(&'static str, &'static str),
    /// 204 with an ETag, as a successful insert with `return-no-content`.
    Created,
    /// Read the request, then close the connection without answering.
    Drop,
}

/// Serves `script` in order (the last answer repeats) and counts requests.
async fn fake_server(script: Vec<Answer>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let script = script.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                while read_request(&mut sock).await {
                    let n = seen.fetch_add(1, Ordering::SeqCst);
                    let answer = script[n.min(script.len() - 1)];
                    let reply = match answer {
                        Answer::Drop => return,
                        Answer::Created => "HTTP/1.1 204 No Content\r\nETag: W/\"datetime'2024-01-01T00%3A00%3A00.0000000Z'\"\r\nx-ms-request-id: ok\r\nContent-Length: 0\r\n\r\n".to_owned(),
                        Answer::Status(status, code) => {
                            let body = format!(
                                r#"{{"odata.error":{{"code":"{code}","message":{{"lang":"en-US","value":"scripted"}}}}}}"#
                            );
                            format!(
                                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nx-ms-request-id: rid-{n}\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            )
                        }
                    };
                    if sock.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}/devstoreaccount1"), count)
}

/// Reads one request (headers and a Content-Length body); false at end of stream.
async fn read_request(sock: &mut TcpStream) -> bool {
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
                    Ok(0) | Err(_) => return false,
                    Ok(n) => buf.extend_from_slice(&byte[..n]),
                }
            }
            return true;
        }
        match sock.read(&mut byte).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&byte[..n]),
        }
    }
}

fn table(endpoint: &str) -> TableClient<DynamicEntity> {
    let key = AccountKey::from_base64("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=").unwrap();
    let account = Account::new("devstoreaccount1", endpoint, Credential::SharedKey(key)).unwrap();
    let mut options = ClientOptions::default();
    options.http.retry = RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    };
    options.http.timeout = Duration::from_secs(5);
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
    assert_eq!(err.code(), Some(&tablekit::ErrorCode::InternalError));
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
async fn an_insert_whose_answer_was_lost_then_conflicts_is_ambiguous() {
    let (endpoint, count) = fake_server(vec![
        Answer::Drop,
        Answer::Status("409 Conflict", "EntityAlreadyExists"),
    ])
    .await;
    let err = table(&endpoint)
        .insert(&DynamicEntity::new("p", "r"))
        .await
        .expect_err("the retry conflicts");
    assert!(err.is_conflict());
    assert!(err.is_ambiguous(), "{err}");
    assert!(err.to_string().contains("may have been applied"), "{err}");
    assert_eq!(count.load(Ordering::SeqCst), 2);
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
