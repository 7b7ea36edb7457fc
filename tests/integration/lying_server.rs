//! A lying server: a loopback listener that answers each request with a
//! scripted, broken answer (a body cut short under a good status, a
//! Content-Length that lies either way, an endless chunked body, a declared
//! terabyte, a slow drip, a head of hundreds of KiB, HTML under a 200, JSON
//! with duplicate or mistyped properties and `odata.type` lies, invalid UTF-8,
//! a transaction answer whose parts do not match, XML with entity expansion,
//! continuations that never end). Every case must end in a clear error (or,
//! where the answer is still readable, the right value), never a panic or a
//! hang, with memory bounded by `AnswerLimits`. Every case runs on both
//! built-in transports.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::TryStreamExt as _;
use tablekit::{
    options::{ClientOptions, RetryPolicy, Transport},
    Account, BlobServiceClient, DynamicEntity, QueueServiceClient, TableClient, TableServiceClient,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::common;

const BOTH: [Transport; 2] = [Transport::Hyper, Transport::Reqwest];

/// What the server does on a connection once it has read a request: it is
/// given the socket, the request's head (lower-cased) and its number (from 0).
type Script = Arc<dyn Fn(TcpStream, String, usize) -> BoxFuture<'static, ()> + Send + Sync>;

/// Serves `script` on every request; returns the endpoint and the request count.
async fn lying_server(script: Script) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (script, seen) = (script.clone(), seen.clone());
            tokio::spawn(async move {
                if let Some(head) = read_request(&mut sock).await {
                    let n = seen.fetch_add(1, Ordering::SeqCst);
                    script(sock, head, n).await;
                }
            });
        }
    });
    (format!("http://{addr}/devstoreaccount1"), count)
}

/// Reads one request's head and its Content-Length body; the head, lower-cased.
async fn read_request(sock: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            return Some(head);
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A script that writes `bytes` and closes the connection.
fn raw(bytes: impl Into<Vec<u8>>) -> Script {
    let bytes: Arc<Vec<u8>> = Arc::new(bytes.into());
    Arc::new(move |mut sock, _, _| {
        let bytes = bytes.clone();
        Box::pin(async move {
            let _ = sock.write_all(&bytes).await;
            let _ = sock.shutdown().await;
        })
    })
}

/// A 200 with `content_type`, `extra` headers and `body`, its length declared.
fn ok(content_type: &str, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nETag: W/\"datetime'2024-01-01T00%3A00%3A00.0000000Z'\"\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

const JSON: &str = "application/json;odata=minimalmetadata;streaming=true;charset=utf-8";

/// A script that writes `head` (which asks for a chunked body) and then
/// chunks of `unit` forever, until the client goes away.
fn endless_chunked(head: &'static str, unit: &'static [u8]) -> Script {
    Arc::new(move |mut sock, _, _| {
        Box::pin(async move {
            if sock.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let mut chunk = format!("{:x}\r\n", unit.len()).into_bytes();
            chunk.extend_from_slice(unit);
            chunk.extend_from_slice(b"\r\n");
            while sock.write_all(&chunk).await.is_ok() {}
        })
    })
}

/// A script that writes `head`, then one byte of `body` every `every`,
/// until the client goes away.
fn drip(head: &'static str, every: Duration) -> Script {
    Arc::new(move |mut sock, _, _| {
        Box::pin(async move {
            if sock.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            loop {
                tokio::time::sleep(every).await;
                if sock.write_all(b" ").await.is_err() {
                    return;
                }
            }
        })
    })
}

fn options(transport: Transport) -> ClientOptions {
    let mut options = common::client_options();
    options.http.transport = transport;
    options.http.retry = RetryPolicy::none();
    options.http.timeout = Duration::from_secs(10);
    options
}

fn account(endpoint: &str) -> Account {
    Account::from_connection_string(&format!(
        "AccountName=devstoreaccount1;AccountKey={key};TableEndpoint={endpoint};QueueEndpoint={endpoint};BlobEndpoint={endpoint}",
        key = common::EMULATOR_KEY
    ))
    .unwrap()
}

fn table_on(endpoint: &str, options: ClientOptions) -> TableClient<DynamicEntity> {
    TableServiceClient::with_options(account(endpoint), options)
        .unwrap()
        .table("Lies")
        .unwrap()
}

/// Runs `call` against a server playing `script`, on both transports, with
/// `tune` applied to the options; returns each transport's error.
async fn each_transport<F, Fut, T>(
    script: Script,
    tune: impl Fn(&mut ClientOptions),
    call: F,
) -> Vec<(Transport, tablekit::Error)>
where
    F: Fn(String, ClientOptions) -> Fut,
    Fut: std::future::Future<Output = tablekit::Result<T>>,
    T: std::fmt::Debug,
{
    let mut errors = Vec::new();
    for transport in BOTH {
        let (endpoint, _) = lying_server(script.clone()).await;
        let mut options = options(transport);
        tune(&mut options);
        // A hang fails the test here rather than the whole suite's timeout.
        let result = tokio::time::timeout(Duration::from_secs(60), call(endpoint, options))
            .await
            .unwrap_or_else(|_| panic!("{transport:?}: the call hung"));
        match result {
            Ok(v) => panic!("{transport:?}: a lying answer was accepted: {v:?}"),
            Err(e) => errors.push((transport, e)),
        }
    }
    errors
}

async fn point_read(
    endpoint: String,
    options: ClientOptions,
) -> tablekit::Result<Option<DynamicEntity>> {
    table_on(&endpoint, options).get(("p", "r")).await
}

async fn query_all(endpoint: String, options: ClientOptions) -> tablekit::Result<usize> {
    table_on(&endpoint, options)
        .query()
        .fetch_all()
        .await
        .map(|v| v.len())
}

const ENTITY: &str =
    r#"{"PartitionKey":"p","RowKey":"r","Timestamp":"2024-01-01T00:00:00Z","n":1}"#;

#[tokio::test]
async fn a_body_cut_short_under_a_good_status_is_a_transport_error() {
    let mut cut = ok(JSON, "", ENTITY.as_bytes());
    cut.truncate(cut.len() - 10);
    for (t, e) in each_transport(raw(cut), |_| {}, point_read).await {
        assert!(e.is_transport() && !e.is_answer_too_large(), "{t:?}: {e}");
    }
}

#[tokio::test]
async fn a_content_length_longer_than_the_body_is_a_transport_error() {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {JSON}\r\nContent-Length: {}\r\n\r\n{ENTITY}",
        ENTITY.len() + 100
    );
    for (t, e) in each_transport(raw(head), |_| {}, point_read).await {
        assert!(e.is_transport(), "{t:?}: {e}");
    }
}

#[tokio::test]
async fn a_content_length_shorter_than_the_body_is_a_decode_error() {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {JSON}\r\nETag: W/\"x\"\r\nContent-Length: 20\r\n\r\n{ENTITY}"
    );
    for (t, e) in each_transport(raw(head), |_| {}, point_read).await {
        assert!(
            matches!(e.kind(), tablekit::error::ErrorKind::Decode(_)),
            "{t:?}: {e}"
        );
    }
}

#[tokio::test]
async fn an_endless_chunked_body_stops_at_its_limit() {
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    let unit: &'static [u8] = Box::leak(vec![b' '; 64 * 1024].into_boxed_slice());
    // A query page under a 1 MiB limit, and a point read under the default one.
    let tight = |o: &mut ClientOptions| {
        o.http.limits.query_page = 1024 * 1024;
    };
    for (t, e) in each_transport(endless_chunked(head, unit), tight, query_all).await {
        assert!(e.is_answer_too_large(), "{t:?}: {e}");
        assert!(
            e.to_string().contains("AnswerLimits::query_page"),
            "{t:?}: {e}"
        );
    }
    for (t, e) in each_transport(endless_chunked(head, unit), |_| {}, point_read).await {
        assert!(e.is_answer_too_large(), "{t:?}: {e}");
        assert!(!e.is_retryable(), "{t:?}: {e}");
    }
}

#[tokio::test]
async fn a_declared_terabyte_is_refused_before_it_is_read() {
    for declared in [2u64 << 30, 1 << 40] {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {JSON}\r\nContent-Length: {declared}\r\n\r\n{{\"value\":["
        );
        for (t, e) in each_transport(raw(head.clone()), |_| {}, query_all).await {
            assert!(e.is_answer_too_large(), "{t:?}: {e}");
            assert!(e.to_string().contains(&declared.to_string()), "{t:?}: {e}");
        }
    }
}

#[tokio::test]
async fn a_slow_drip_ends_with_the_attempt_timeout() {
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n";
    let short = |o: &mut ClientOptions| o.http.timeout = Duration::from_millis(500);
    for (t, e) in each_transport(drip(head, Duration::from_millis(20)), short, point_read).await {
        assert!(e.is_timeout(), "{t:?}: {e}");
    }
}

#[tokio::test]
async fn a_head_dripping_in_ends_with_the_attempt_timeout() {
    let script: Script = Arc::new(|mut sock, _, _| {
        Box::pin(async move {
            if sock
                .write_all(b"HTTP/1.1 200 OK\r\nx-slow: ")
                .await
                .is_err()
            {
                return;
            }
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if sock.write_all(b"a").await.is_err() {
                    return;
                }
            }
        })
    });
    let short = |o: &mut ClientOptions| o.http.timeout = Duration::from_millis(500);
    for (t, e) in each_transport(script, short, point_read).await {
        assert!(e.is_timeout(), "{t:?}: {e}");
    }
}

#[tokio::test]
async fn a_head_over_64_kib_is_refused() {
    // Under hyper's own buffer: tablekit's check; far over it: hyper's.
    for size in [70 * 1024, 2 * 1024 * 1024] {
        let pad = "a".repeat(size / 2);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {JSON}\r\nx-pad-1: {pad}\r\nx-pad-2: {pad}\r\nContent-Length: {}\r\n\r\n{ENTITY}",
            ENTITY.len()
        );
        for (t, e) in each_transport(raw(head), |_| {}, point_read).await {
            assert!(e.is_answer_too_large(), "{t:?} {size}: {e}");
        }
    }
}

#[tokio::test]
async fn html_under_a_200_is_a_decode_error() {
    let page = ok(
        "text/html",
        "",
        b"<html><body>Welcome to the captive portal</body></html>",
    );
    for (t, e) in each_transport(raw(page), |_| {}, point_read).await {
        assert!(
            matches!(e.kind(), tablekit::error::ErrorKind::Decode(_)),
            "{t:?}: {e}"
        );
    }
}

#[tokio::test]
async fn mistyped_properties_and_odata_type_lies_are_decode_errors() {
    for body in [
        r#"{"PartitionKey":"p","RowKey":"r","n@odata.type":"Edm.Int64","n":"twelve"}"#,
        r#"{"PartitionKey":"p","RowKey":"r","n@odata.type":"Edm.Guid","n":"not-a-guid"}"#,
        r#"{"PartitionKey":"p","RowKey":"r","n@odata.type":"Edm.DateTime","n":17}"#,
        r#"{"PartitionKey":"p","RowKey":"r","n@odata.type":"Edm.Binary","n":"***"}"#,
        r#"{"PartitionKey":"p","RowKey":"r","n@odata.type":"Edm.Unheard","n":"x"}"#,
        r#"{"PartitionKey":7,"RowKey":"r"}"#,
        r#"{"PartitionKey":"p","RowKey":"r","n":{"nested":true}}"#,
        r#"[1,2,3]"#,
    ] {
        for (t, e) in each_transport(raw(ok(JSON, "", body.as_bytes())), |_| {}, point_read).await {
            assert!(
                matches!(e.kind(), tablekit::error::ErrorKind::Decode(_)),
                "{t:?} {body}: {e}"
            );
        }
    }
}

#[tokio::test]
async fn invalid_utf8_is_a_decode_error() {
    let mut body = br#"{"PartitionKey":"p","RowKey":"r","s":""#.to_vec();
    body.extend_from_slice(&[0xff, 0xfe, 0x80]);
    body.extend_from_slice(br#""}"#);
    for (t, e) in each_transport(raw(ok(JSON, "", &body)), |_| {}, point_read).await {
        assert!(
            matches!(e.kind(), tablekit::error::ErrorKind::Decode(_)),
            "{t:?}: {e}"
        );
    }
}

#[tokio::test]
async fn a_transaction_answer_whose_parts_do_not_match_is_an_error() {
    // One part for a transaction of two operations.
    let body = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_1\r\n\r\n--changesetresponse_1\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 204 No Content\r\nETag: W/\"x\"\r\n\r\n\r\n--changesetresponse_1--\r\n--batchresponse_1--\r\n";
    let answer = format!(
        "HTTP/1.1 202 Accepted\r\nContent-Type: multipart/mixed; boundary=batchresponse_1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let call = |endpoint: String, options: ClientOptions| async move {
        let t = table_on(&endpoint, options);
        let mut tx = t.transaction();
        tx.insert(&DynamicEntity::new("p", "a"))?;
        tx.insert(&DynamicEntity::new("p", "b"))?;
        tx.send().await.map(|_| ())
    };
    for (t, e) in each_transport(raw(answer), |_| {}, call).await {
        assert!(!e.is_retryable(), "{t:?}: {e}");
    }
}

/// A billion laughs: entities that expand to gigabytes if expanded.
const LAUGHS: &str = r#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;"><!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;"><!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;"><!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;"><!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;"><!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;"><!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;"><!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">]>"#;

#[tokio::test]
async fn xml_entity_expansion_in_queue_and_blob_answers_is_refused() {
    let messages = format!(
        "{LAUGHS}<QueueMessagesList><QueueMessage><MessageId>1</MessageId><InsertionTime>Mon, 01 Jan 2024 00:00:00 GMT</InsertionTime><ExpirationTime>Mon, 08 Jan 2024 00:00:00 GMT</ExpirationTime><PopReceipt>x</PopReceipt><TimeNextVisible>Mon, 01 Jan 2024 00:00:30 GMT</TimeNextVisible><DequeueCount>1</DequeueCount><MessageText>&lol9;</MessageText></QueueMessage></QueueMessagesList>"
    );
    let receive = |endpoint: String, options: ClientOptions| async move {
        QueueServiceClient::with_options(account(&endpoint), options)?
            .queue("jobs")?
            .receive()
            .await
            .map(|m| m.len())
    };
    for (t, e) in each_transport(
        raw(ok("application/xml", "", messages.as_bytes())),
        |_| {},
        receive,
    )
    .await
    {
        assert!(
            matches!(e.kind(), tablekit::error::ErrorKind::Decode(_)),
            "{t:?}: {e}"
        );
    }
    let listing = format!(
        "{LAUGHS}<EnumerationResults ContainerName=\"photos\"><Blobs><Blob><Name>&lol9;</Name><Properties><Content-Length>1</Content-Length><Etag>x</Etag><Last-Modified>Mon, 01 Jan 2024 00:00:00 GMT</Last-Modified></Properties></Blob></Blobs><NextMarker/></EnumerationResults>"
    );
    let list = |endpoint: String, options: ClientOptions| async move {
        BlobServiceClient::with_options(account(&endpoint), options)?
            .container("photos")?
            .list_blobs()
            .fetch_all()
            .await
            .map(|b| b.len())
    };
    for (t, e) in each_transport(
        raw(ok("application/xml", "", listing.as_bytes())),
        |_| {},
        list,
    )
    .await
    {
        assert!(
            matches!(e.kind(), tablekit::error::ErrorKind::Decode(_)),
            "{t:?}: {e}"
        );
    }
}

#[tokio::test]
async fn an_endless_queue_or_blob_listing_stops_at_its_limit() {
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nTransfer-Encoding: chunked\r\n\r\n";
    let unit: &'static [u8] = Box::leak(b"<QueueMessagesList>".repeat(1000).into_boxed_slice());
    let tight = |o: &mut ClientOptions| {
        o.http.limits.messages = 512 * 1024;
        o.http.limits.listing = 512 * 1024;
    };
    let peek = |endpoint: String, options: ClientOptions| async move {
        QueueServiceClient::with_options(account(&endpoint), options)?
            .queue("jobs")?
            .peek(32)
            .await
            .map(|m| m.len())
    };
    for (t, e) in each_transport(endless_chunked(head, unit), tight, peek).await {
        assert!(
            e.to_string().contains("AnswerLimits::messages"),
            "{t:?}: {e}"
        );
    }
    let list = |endpoint: String, options: ClientOptions| async move {
        BlobServiceClient::with_options(account(&endpoint), options)?
            .container("photos")?
            .list_blobs()
            .fetch_all()
            .await
            .map(|b| b.len())
    };
    for (t, e) in each_transport(endless_chunked(head, unit), tight, list).await {
        assert!(
            e.to_string().contains("AnswerLimits::listing"),
            "{t:?}: {e}"
        );
    }
}

#[tokio::test]
async fn a_blob_download_past_its_declared_size_fails() {
    // A chunked 206 (no Content-Length) for a blob of 5 bytes that never ends.
    let head = "HTTP/1.1 206 Partial Content\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 0-4/5\r\nETag: \"x\"\r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\nTransfer-Encoding: chunked\r\n\r\n";
    let download = |endpoint: String, options: ClientOptions| async move {
        BlobServiceClient::with_options(account(&endpoint), options)?
            .container("photos")?
            .blob("b")?
            .download()
            .range(0..5)
            .bytes()
            .await
            .map(|b| b.len())
    };
    for (t, e) in each_transport(endless_chunked(head, b"abc"), |_| {}, download).await {
        assert!(e.is_answer_too_large(), "{t:?}: {e}");
    }
}

#[tokio::test]
async fn an_error_answer_with_an_endless_body_keeps_its_status() {
    let head = "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    let unit: &'static [u8] = Box::leak(vec![b' '; 64 * 1024].into_boxed_slice());
    for (t, e) in each_transport(endless_chunked(head, unit), |_| {}, point_read).await {
        assert_eq!(e.status(), Some(409), "{t:?}: {e}");
    }
}

#[tokio::test]
async fn query_results_stream_stops_on_error() {
    // The stream API surfaces the same error as fetch_all.
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {JSON}\r\nContent-Length: {}\r\n\r\n{{\"value\":[",
        1u64 << 40
    );
    let stream = |endpoint: String, options: ClientOptions| async move {
        let mut s = table_on(&endpoint, options).query().stream();
        let mut n = 0usize;
        while s.try_next().await?.is_some() {
            n += 1;
        }
        Ok::<_, tablekit::Error>(n)
    };
    for (t, e) in each_transport(raw(head), |_| {}, stream).await {
        assert!(e.is_answer_too_large(), "{t:?}: {e}");
    }
}

/// A keep-alive script: answers request `n` (with its head) with `answer(n, head)`.
fn pages(answer: impl Fn(usize, &str) -> Vec<u8> + Send + Sync + 'static) -> Script {
    let answer = Arc::new(answer);
    Arc::new(move |mut sock, head, _| {
        let answer = answer.clone();
        Box::pin(async move {
            let mut head = head;
            let mut n = 0;
            loop {
                if sock.write_all(&answer(n, &head)).await.is_err() {
                    return;
                }
                n += 1;
                match read_request(&mut sock).await {
                    Some(h) => head = h,
                    None => return,
                }
            }
        })
    })
}

/// A query page of `entities` (PartitionKey `p`, RowKeys from `first`) with
/// `headers` (continuations), kept alive.
fn page(first: usize, entities: usize, headers: &str) -> Vec<u8> {
    let values: Vec<String> = (first..first + entities)
        .map(|i| format!(r#"{{"PartitionKey":"p","RowKey":"{i:06}"}}"#))
        .collect();
    let body = format!(r#"{{"value":[{}]}}"#, values.join(","));
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {JSON}\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn a_query_page_of_more_than_1000_entities_is_refused() {
    let script = pages(|_, _| page(0, 1001, ""));
    for (t, e) in each_transport(script, |_| {}, query_all).await {
        assert!(
            e.to_string().contains("more than 1000 entities"),
            "{t:?}: {e}"
        );
    }
}

#[tokio::test]
async fn a_continuation_answered_with_itself_ends_the_query() {
    // Every page, empty or not, names the same next page.
    for size in [0, 3] {
        let script = pages(move |_, _| {
            page(0, size, "x-ms-continuation-NextPartitionKey: 1!4!cA--\r\nx-ms-continuation-NextRowKey: 1!4!cg--\r\n")
        });
        for (t, e) in each_transport(script.clone(), |_| {}, query_all).await {
            assert!(
                e.to_string().contains("continuation it was sent"),
                "{t:?}: {e}"
            );
        }
        let stream = |endpoint: String, options: ClientOptions| async move {
            let mut s = table_on(&endpoint, options).query().take(10).stream();
            let mut n = 0usize;
            while s.try_next().await?.is_some() {
                n += 1;
            }
            Ok::<_, tablekit::Error>(n)
        };
        for (t, e) in each_transport(script.clone(), |_| {}, stream).await {
            assert!(
                e.to_string().contains("continuation it was sent"),
                "{t:?}: {e}"
            );
        }
        let one_page = |endpoint: String, options: ClientOptions| async move {
            let t = table_on(&endpoint, options);
            let first = t.query().next_page().await?;
            let next = first.continuation.clone().expect("a continuation");
            t.query()
                .continue_from(next)
                .next_page()
                .await
                .map(|p| p.items.len())
        };
        for (t, e) in each_transport(script, |_| {}, one_page).await {
            assert!(
                e.to_string().contains("continuation it was sent"),
                "{t:?}: {e}"
            );
        }
    }
}

#[tokio::test]
async fn empty_pages_with_a_fresh_continuation_forever_end_the_query() {
    let script = pages(|n, _| {
        page(
            0,
            0,
            &format!("x-ms-continuation-NextPartitionKey: 1!8!{n:06}\r\n"),
        )
    });
    let take = |endpoint: String, options: ClientOptions| async move {
        table_on(&endpoint, options)
            .query()
            .take(5)
            .fetch_all()
            .await
            .map(|v| v.len())
    };
    for (t, e) in each_transport(script, |_| {}, take).await {
        assert!(
            e.to_string().contains("10000 empty query pages"),
            "{t:?}: {e}"
        );
    }
}

#[tokio::test]
async fn a_few_empty_pages_with_a_continuation_are_followed() {
    // What the service does when a query step runs out of time.
    for transport in BOTH {
        let asked = Arc::new(AtomicUsize::new(0));
        let seen = asked.clone();
        let script = pages(move |n, _| {
            seen.fetch_add(1, Ordering::SeqCst);
            match n {
                0..=2 => page(
                    0,
                    0,
                    &format!("x-ms-continuation-NextPartitionKey: 1!8!{n:06}\r\n"),
                ),
                _ => page(0, 2, ""),
            }
        });
        let (endpoint, _) = lying_server(script).await;
        let n = query_all(endpoint, options(transport)).await.unwrap();
        assert_eq!((n, asked.load(Ordering::SeqCst)), (2, 4), "{transport:?}");
    }
}

#[tokio::test]
async fn a_table_or_blob_listing_answered_with_its_own_marker_ends() {
    let tables = pages(|_, _| {
        let body = r#"{"value":[{"TableName":"a"}]}"#;
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {JSON}\r\nx-ms-continuation-NextTableName: 1!4!YQ--\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let list_tables = |endpoint: String, options: ClientOptions| async move {
        TableServiceClient::with_options(account(&endpoint), options)?
            .list_tables()
            .stream()
            .try_collect::<Vec<_>>()
            .await
            .map(|v| v.len())
    };
    for (t, e) in each_transport(tables, |_| {}, list_tables).await {
        assert!(
            e.to_string().contains("continuation it was sent"),
            "{t:?}: {e}"
        );
    }
    let blobs = pages(|_, _| {
        let body = "<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults ContainerName=\"photos\"><Blobs/><NextMarker>m1</NextMarker></EnumerationResults>";
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let list = |endpoint: String, options: ClientOptions| async move {
        BlobServiceClient::with_options(account(&endpoint), options)?
            .container("photos")?
            .list_blobs()
            .fetch_all()
            .await
            .map(|b| b.len())
    };
    for (t, e) in each_transport(blobs, |_| {}, list).await {
        assert!(e.to_string().contains("marker it was sent"), "{t:?}: {e}");
    }
}

#[tokio::test]
async fn an_entity_with_a_property_twice_is_refused() {
    let body = r#"{"PartitionKey":"p","RowKey":"r","n":1,"n":2}"#;
    for (t, e) in each_transport(raw(ok(JSON, "", body.as_bytes())), |_| {}, point_read).await {
        assert!(e.to_string().contains("appears twice"), "{t:?}: {e}");
    }
    let page = format!(r#"{{"value":[{body}]}}"#);
    for (t, e) in each_transport(raw(ok(JSON, "", page.as_bytes())), |_| {}, query_all).await {
        assert!(e.to_string().contains("appears twice"), "{t:?}: {e}");
    }
}

#[tokio::test]
async fn a_point_read_answered_with_another_entity_is_refused() {
    let body = r#"{"PartitionKey":"p","RowKey":"someone-else","n":1}"#;
    for (t, e) in each_transport(raw(ok(JSON, "", body.as_bytes())), |_| {}, point_read).await {
        assert!(
            e.to_string()
                .contains(r#"holds the entity ("p", "someone-else")"#),
            "{t:?}: {e}"
        );
    }
}

#[tokio::test]
async fn a_transaction_answer_over_its_limit_is_settled_by_read_back() {
    // The transaction's answer never ends; reading the entities back finds
    // what it sent: applied, and said to be confirmed by the read-back.
    let script: Script = Arc::new(|mut sock, head, _| {
        Box::pin(async move {
            let mut head = head;
            loop {
                if head.starts_with("post") {
                    let _ = sock
                        .write_all(b"HTTP/1.1 202 Accepted\r\nContent-Type: multipart/mixed; boundary=batchresponse_1\r\nTransfer-Encoding: chunked\r\n\r\n")
                        .await;
                    let chunk = format!("{:x}\r\n{}\r\n", 4096, "-".repeat(4096));
                    while sock.write_all(chunk.as_bytes()).await.is_ok() {}
                    return;
                }
                let rk = if head.contains("rowkey='a'") {
                    "a"
                } else {
                    "b"
                };
                let body = format!(r#"{{"PartitionKey":"p","RowKey":"{rk}","n":1}}"#);
                let mut answer = ok(JSON, "", body.as_bytes());
                // Keep the connection for the next read.
                let text = String::from_utf8(answer)
                    .unwrap()
                    .replace("Connection: close\r\n", "");
                answer = text.into_bytes();
                if sock.write_all(&answer).await.is_err() {
                    return;
                }
                match read_request(&mut sock).await {
                    Some(h) => head = h,
                    None => return,
                }
            }
        })
    });
    for transport in BOTH {
        let (endpoint, _) = lying_server(script.clone()).await;
        let mut options = options(transport);
        options.http.limits.batch = 256 * 1024;
        let t = table_on(&endpoint, options);
        let mut tx = t.transaction();
        tx.insert(&DynamicEntity::new("p", "a").with("n", 1))
            .unwrap();
        tx.insert(&DynamicEntity::new("p", "b").with("n", 1))
            .unwrap();
        let result = tokio::time::timeout(Duration::from_secs(60), tx.send())
            .await
            .unwrap_or_else(|_| panic!("{transport:?}: hung"))
            .unwrap_or_else(|e| panic!("{transport:?}: {e}"));
        assert!(result.confirmed_by_read_back(), "{transport:?}");
    }
}
