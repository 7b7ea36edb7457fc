//! The two HTTP transports (`tablekit::options::Transport`): the suite runs on the
//! inline hyper transport (what `Transport::Auto` picks for `http://`
//! endpoints); these cases run the transport-sensitive behaviours on both,
//! forcing each one through `HttpOptions::transport`: large bodies streamed
//! both ways against Azurite (a near-4 MiB transaction, blobs of several MiB),
//! a server that closes an idle keep-alive connection, a write cut off after
//! it was sent (ambiguous), and the plain table, queue and blob round trips.
//! The embedded backend has no transport; its half of each Azurite case is
//! the same case on `TableServiceClient::embedded()`.
//!
//! The wire cases also run on reqwest with `TABLEKIT_TRANSPORT=reqwest`: the
//! harness (`tablekit::testing::client_options`) reads it and sets
//! `HttpOptions::transport`; the clients themselves read no such variable.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt as _;
use tablekit::{
    options::{ClientOptions, RetryPolicy, Transport},
    table::AmbiguousWrites,
    Account, BlobServiceClient, DynamicEntity, QueueServiceClient, TableServiceClient,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use crate::common;
use crate::retry::{fake_server, table_with, Answer};

const BOTH: [Transport; 2] = [Transport::Hyper, Transport::Reqwest];

fn options(transport: Transport) -> ClientOptions {
    let mut options = common::client_options();
    options.http.transport = transport;
    options
}

/// The Azurite account on `transport`, or `None` without an emulator.
fn azurite(
    transport: Transport,
) -> Option<(TableServiceClient, BlobServiceClient, QueueServiceClient)> {
    let conn = common::connection_string()?;
    let account = Account::from_connection_string(&conn).unwrap();
    Some((
        TableServiceClient::with_options(account.clone(), options(transport)).unwrap(),
        BlobServiceClient::with_options(account.clone(), options(transport)).unwrap(),
        QueueServiceClient::with_options(account, options(transport)).unwrap(),
    ))
}

/// A transaction of 100 entities of ~36 KB each (two strings of 18,000
/// characters: a string may hold 64 KiB of UTF-16): ~3.7 MB of multipart
/// body out, and 100 answers back.
async fn a_near_4_mib_transaction_goes_through(svc: TableServiceClient) {
    let t = common::fresh_table::<DynamicEntity>(&svc, "Big").await;
    let filler = "x".repeat(18_000);
    let mut tx = t.transaction();
    for i in 0..100 {
        tx.insert(
            &DynamicEntity::new("p", format!("r{i:03}"))
                .with("A", filler.as_str())
                .with("B", filler.as_str()),
        )
        .unwrap();
    }
    let result = tx.send().await.unwrap();
    assert_eq!(result.etags().len(), 100);
    let rows: Vec<DynamicEntity> = t.query().stream().try_collect().await.unwrap();
    assert_eq!(rows.len(), 100);
    for key in ["A", "B"] {
        assert!(rows
            .iter()
            .all(|r| r.get(key).and_then(|v| v.as_str()) == Some(filler.as_str())));
    }
    common::drop_table(&t).await;
}

/// 6 MiB up (two 4 MiB-or-less blocks in flight) and down as a stream.
async fn blobs_of_several_mib_stream_both_ways(blobs: BlobServiceClient) {
    let name = format!("c{}", &uuid::Uuid::new_v4().simple().to_string()[..20]);
    let c = blobs.container(&name).unwrap();
    c.create_container_if_not_exists().await.unwrap();
    let body: Bytes = (0..6 * 1024 * 1024 + 7)
        .map(|i: usize| (i * 31 % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    let blob = c.blob("big.bin").unwrap();
    blob.upload(body.clone()).await.unwrap();
    let download = blob.download().send().await.unwrap();
    assert_eq!(download.properties().size(), body.len() as u64);
    let chunks: Vec<Bytes> = download.try_collect().await.unwrap();
    assert!(chunks.len() > 1, "a body of 6 MiB arrives in pieces");
    assert_eq!(chunks.concat(), &body[..]);
    // Ranged and whole reads on the same (pooled) connections.
    let part = blob
        .download()
        .range(5_000_000..5_000_100)
        .bytes()
        .await
        .unwrap();
    assert_eq!(&part[..], &body[5_000_000..5_000_100]);
    c.delete_container().await.unwrap();
}

#[tokio::test]
async fn a_near_4_mib_transaction_goes_through_on_both_transports() {
    for transport in BOTH {
        if let Some((svc, _, _)) = azurite(transport) {
            a_near_4_mib_transaction_goes_through(svc).await;
        }
    }
}

#[tokio::test]
async fn a_near_4_mib_transaction_goes_through_embedded() {
    a_near_4_mib_transaction_goes_through(TableServiceClient::embedded()).await;
}

#[tokio::test]
async fn blobs_of_several_mib_stream_both_ways_on_both_transports() {
    for transport in BOTH {
        if let Some((_, blobs, _)) = azurite(transport) {
            blobs_of_several_mib_stream_both_ways(blobs).await;
        }
    }
}

#[tokio::test]
async fn blobs_of_several_mib_stream_both_ways_embedded() {
    blobs_of_several_mib_stream_both_ways(BlobServiceClient::embedded()).await;
}

#[tokio::test]
async fn tables_queues_and_blobs_round_trip_on_reqwest() {
    let Some((svc, blobs, queues)) = azurite(Transport::Reqwest) else {
        return;
    };
    let t = common::fresh_table::<DynamicEntity>(&svc, "Rq").await;
    t.insert(&DynamicEntity::new("p", "r").with("N", 1))
        .await
        .unwrap();
    let got = t.get(("p", "r")).await.unwrap().unwrap();
    assert_eq!(got.get("N").and_then(|v| v.as_i32()), Some(1));
    assert!(t.get(("p", "missing")).await.unwrap().is_none());
    common::drop_table(&t).await;

    let q = queues
        .queue(&format!(
            "q{}",
            &uuid::Uuid::new_v4().simple().to_string()[..20]
        ))
        .unwrap();
    q.create_queue_if_not_exists().await.unwrap();
    q.send("hello").await.unwrap();
    let got = q.receive().await.unwrap();
    assert_eq!(got[0].text().unwrap(), "hello");
    q.delete_queue().await.unwrap();

    let c = blobs
        .container(&format!(
            "c{}",
            &uuid::Uuid::new_v4().simple().to_string()[..20]
        ))
        .unwrap();
    c.create_container_if_not_exists().await.unwrap();
    let b = c.blob("a.txt").unwrap();
    b.upload(Bytes::from_static(b"abc")).await.unwrap();
    assert_eq!(&b.download().bytes().await.unwrap()[..], b"abc");
    c.delete_container().await.unwrap();
}

/// Answers every request on a connection with 204 (an insert's answer), then
/// closes that connection, as a server's idle timeout would. Counts
/// connections and requests; `closed` counts closed connections.
async fn answer_once_per_connection() -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let (r, c) = (requests.clone(), closed.clone());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = Vec::new();
            let mut byte = [0u8; 4096];
            // Head, then the body its Content-Length announces.
            let done = loop {
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break true;
                    }
                }
                match sock.read(&mut byte).await {
                    Ok(0) | Err(_) => break false,
                    Ok(n) => buf.extend_from_slice(&byte[..n]),
                }
            };
            if done {
                r.fetch_add(1, Ordering::SeqCst);
                let _ = sock
                    .write_all(b"HTTP/1.1 204 No Content\r\nETag: W/\"datetime'2024-01-01T00%3A00%3A00.0000000Z'\"\r\nContent-Length: 0\r\n\r\n")
                    .await;
            }
            drop(sock);
            c.fetch_add(1, Ordering::SeqCst);
        }
    });
    (format!("http://{addr}/devstoreaccount1"), requests, closed)
}

#[tokio::test]
async fn a_write_after_the_server_closed_the_idle_connection_needs_no_retry() {
    for transport in BOTH {
        let (endpoint, requests, closed) = answer_once_per_connection().await;
        let mut options = options(transport);
        options.http.retry = RetryPolicy::none();
        let t = table_with(&endpoint, options);
        t.insert(&DynamicEntity::new("p", "a")).await.unwrap();
        // The server has closed the kept-alive connection (a flag, no timing).
        while closed.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Not retried (the policy allows none): it went on a fresh connection.
        t.insert(&DynamicEntity::new("p", "b"))
            .await
            .unwrap_or_else(|e| panic!("{transport:?}: {e}"));
        assert_eq!(requests.load(Ordering::SeqCst), 2, "{transport:?}");
    }
}

#[tokio::test]
async fn a_write_cut_off_after_it_was_sent_is_ambiguous_on_both_transports() {
    for transport in BOTH {
        let (endpoint, count) = fake_server(vec![
            Answer::Drop,
            Answer::Status("409 Conflict", "EntityAlreadyExists"),
        ])
        .await;
        let mut options = options(transport);
        options.http.retry = RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
        };
        let err = table_with(&endpoint, options)
            .with_ambiguous_writes(AmbiguousWrites::Report)
            .insert(&DynamicEntity::new("p", "r"))
            .await
            .expect_err("the retry conflicts");
        assert!(err.is_ambiguous(), "{transport:?}: {err}");
        assert_eq!(err.status(), Some(409), "{transport:?}");
        assert_eq!(count.load(Ordering::SeqCst), 2, "{transport:?}");
    }
}

/// What a recording transport saw: method and path of each request, with
/// the names of its headers.
type Seen = Arc<std::sync::Mutex<Vec<(String, String, Vec<String>)>>>;

/// Records every request, then sends it on tablekit's own transport.
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn tablekit::transport::HttpService>,
    seen: Seen,
}

#[async_trait::async_trait]
impl tablekit::transport::HttpService for Recording {
    async fn call(
        &self,
        request: http::Request<Bytes>,
    ) -> tablekit::Result<tablekit::transport::HttpResponse> {
        self.seen.lock().unwrap().push((
            request.method().to_string(),
            request.uri().path().to_owned(),
            request
                .headers()
                .keys()
                .map(|k| k.as_str().to_owned())
                .collect(),
        ));
        self.inner.call(request).await
    }
}

#[derive(Debug)]
struct RecordingConnector {
    seen: Seen,
    options: tablekit::options::HttpOptions,
}

impl tablekit::transport::HttpConnector for RecordingConnector {
    fn connect(
        &self,
        endpoint: &http::Uri,
    ) -> tablekit::Result<Arc<dyn tablekit::transport::HttpService>> {
        let inner = tablekit::transport::HyperConnector::new(&self.options).connect(endpoint)?;
        Ok(Arc::new(Recording {
            inner,
            seen: self.seen.clone(),
        }))
    }
}

#[tokio::test]
async fn a_transport_passed_in_code_sees_every_request_of_a_table_insert_and_a_queue_send() {
    let Some(conn) = common::connection_string() else {
        return;
    };
    let account = Account::from_connection_string(&conn).unwrap();
    let seen = Seen::default();
    let mut options = common::client_options();
    options.http.connector = Some(Arc::new(RecordingConnector {
        seen: seen.clone(),
        options: options.http.clone(),
    }));
    let svc = TableServiceClient::with_options(account.clone(), options.clone()).unwrap();
    let t = common::fresh_table::<DynamicEntity>(&svc, "Rec").await;
    seen.lock().unwrap().clear();
    t.insert(&DynamicEntity::new("p", "r")).await.unwrap();
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let (method, path, headers) = &seen[0];
        assert_eq!(method, "POST");
        assert!(path.ends_with(&format!("/{}", t.name())), "{path}");
        for h in ["authorization", "x-ms-date", "x-ms-version", "content-type"] {
            assert!(headers.iter().any(|n| n == h), "{h} in {headers:?}");
        }
    }
    common::drop_table(&t).await;

    let queues = QueueServiceClient::with_options(account, options).unwrap();
    let name = format!("q{}", &uuid::Uuid::new_v4().simple().to_string()[..20]);
    let q = queues.queue(&name).unwrap();
    q.create_queue_if_not_exists().await.unwrap();
    seen.lock().unwrap().clear();
    q.send("hello").await.unwrap();
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].0, "POST");
        assert!(
            seen[0].1.ends_with(&format!("/{name}/messages")),
            "{seen:?}"
        );
        assert!(seen[0].2.iter().any(|n| n == "authorization"));
    }
    q.delete_queue().await.unwrap();
}

/// Adds a header to every attempt and counts the attempts.
#[derive(Debug, Default)]
struct Tagging {
    attempts: AtomicUsize,
}

impl tablekit::transport::RequestHook for Tagging {
    fn on_request(&self, request: &mut http::Request<Bytes>) -> tablekit::Result<()> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        request
            .headers()
            .contains_key("authorization")
            .then_some(())
            .expect("hooks see the signed request");
        request
            .headers_mut()
            .insert("x-caller", http::HeaderValue::from_static("billing"));
        Ok(())
    }
}

/// Refuses every request that deletes.
#[derive(Debug)]
struct NoDeletes;

impl tablekit::transport::RequestHook for NoDeletes {
    fn on_request(&self, request: &mut http::Request<Bytes>) -> tablekit::Result<()> {
        if request.method() == http::Method::DELETE {
            return Err(tablekit::transport::failure(
                tablekit::transport::Failure::Request,
                "deletes are refused by policy",
                None,
            ));
        }
        Ok(())
    }
}

#[tokio::test]
async fn request_hooks_add_headers_record_and_fail_requests_on_purpose() {
    let Some(conn) = common::connection_string() else {
        return;
    };
    let account = Account::from_connection_string(&conn).unwrap();
    let seen = Seen::default();
    let tagging = Arc::new(Tagging::default());
    let mut options = common::client_options();
    options.http.hooks = vec![tagging.clone(), Arc::new(NoDeletes)];
    options.http.connector = Some(Arc::new(RecordingConnector {
        seen: seen.clone(),
        options: options.http.clone(),
    }));
    let svc = TableServiceClient::with_options(account, options).unwrap();
    let t = common::fresh_table::<DynamicEntity>(&svc, "Hook").await;
    let before = tagging.attempts.load(Ordering::SeqCst);
    t.insert(&DynamicEntity::new("p", "r")).await.unwrap();
    assert_eq!(tagging.attempts.load(Ordering::SeqCst), before + 1);
    assert!(seen
        .lock()
        .unwrap()
        .last()
        .is_some_and(|(_, _, headers)| headers.iter().any(|h| h == "x-caller")));

    let sent = seen.lock().unwrap().len();
    let err = t
        .delete(("p", "r"), tablekit::IfMatch::Any)
        .await
        .unwrap_err();
    assert!(err.is_transport(), "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("refused by policy"), "{err}");
    assert_eq!(seen.lock().unwrap().len(), sent, "nothing reached the wire");
    assert!(
        t.get(("p", "r")).await.unwrap().is_some(),
        "the entity stays"
    );

    // Table deletion is a DELETE too: drop the table with a client without hooks.
    let plain = common::tables(&conn).unwrap();
    plain.delete_table(t.name()).await.unwrap();
}
