//! The helpers that decide on a status (`*_if_exists`, `*_if_not_exists`)
//! after an attempt whose answer was lost: the retry meets the 409 or 404
//! that the lost attempt itself provoked, which is rightly ambiguous; the end
//! state is what the caller asked for, so the helper succeeds (and says the
//! call did it). Tables through the fault proxy in front of the emulator;
//! queues and blobs against a scripted server. Both transports each.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tablekit::{
    options::{ClientOptions, RetryPolicy, Transport},
    Account, BlobServiceClient, QueueServiceClient, TableServiceClient,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use crate::common::{
    self,
    fault_proxy::{Fate, FaultProxy},
};

const BOTH: [Transport; 2] = [Transport::Hyper, Transport::Reqwest];

fn options(transport: Transport) -> ClientOptions {
    let mut options = common::client_options();
    options.http.transport = transport;
    options.http.retry = RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    };
    options
}

/// The table service behind a proxy that loses the answer of the first
/// request (after the emulator applied it) and forwards the rest.
async fn losing_first_answer(conn: &str, transport: Transport) -> TableServiceClient {
    let proxy = FaultProxy::scripted(conn, vec![Fate::DroppedAfter]).await;
    let account = Account::from_connection_string(proxy.connection_string()).unwrap();
    TableServiceClient::with_options(account, options(transport)).unwrap()
}

#[tokio::test]
async fn table_create_and_delete_helpers_succeed_after_a_lost_answer() {
    let Some(conn) = common::connection_string() else {
        return;
    };
    for transport in BOTH {
        let direct = common::tables(&conn).unwrap();
        let name = common::unique_name("Lost");
        // The create is applied, its answer lost; the retry meets 409.
        let created = losing_first_answer(&conn, transport)
            .await
            .create_table_if_not_exists(&name)
            .await
            .unwrap_or_else(|e| panic!("{transport:?}: {e}"));
        assert!(created, "{transport:?}: the lost attempt created it");
        // It exists: a plain second call says so.
        assert!(!direct.create_table_if_not_exists(&name).await.unwrap());
        // The delete is applied, its answer lost; the retry meets 404.
        let deleted = losing_first_answer(&conn, transport)
            .await
            .delete_table_if_exists(&name)
            .await
            .unwrap_or_else(|e| panic!("{transport:?}: {e}"));
        assert!(deleted, "{transport:?}: the lost attempt deleted it");
        assert!(!direct.delete_table_if_exists(&name).await.unwrap());

        // The same through a table client.
        let name = common::unique_name("Lost");
        let table = losing_first_answer(&conn, transport)
            .await
            .table::<tablekit::DynamicEntity>(&name)
            .unwrap();
        assert!(table.create_table_if_not_exists().await.unwrap());
        let table = losing_first_answer(&conn, transport)
            .await
            .table::<tablekit::DynamicEntity>(&name)
            .unwrap();
        assert!(table.delete_table_if_exists().await.unwrap());
        assert!(!direct.delete_table_if_exists(&name).await.unwrap());
    }
}

/// A server that closes the first connection after reading its request (the
/// answer is lost) and answers every later request with `status` and the
/// error `code` (in `x-ms-error-code` and an XML body).
async fn losing_then(status: &'static str, code: &'static str) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                    return;
                }
                let body = format!(
                    "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{code}</Code><Message>scripted</Message></Error>"
                );
                let answer = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nx-ms-error-code: {code}\r\nx-ms-request-id: r\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(answer.as_bytes()).await;
            });
        }
    });
    (format!("http://{addr}/devstoreaccount1"), count)
}

fn account(endpoint: &str) -> Account {
    Account::from_connection_string(&format!(
        "AccountName=devstoreaccount1;AccountKey={};QueueEndpoint={endpoint};BlobEndpoint={endpoint}",
        common::EMULATOR_KEY
    ))
    .unwrap()
}

#[tokio::test]
async fn queue_and_blob_helpers_succeed_after_a_lost_answer() {
    for transport in BOTH {
        let (endpoint, count) = losing_then("404 Not Found", "QueueNotFound").await;
        let queues = QueueServiceClient::with_options(account(&endpoint), options(transport));
        let deleted = queues
            .unwrap()
            .queue("jobs")
            .unwrap()
            .delete_queue_if_exists()
            .await
            .unwrap_or_else(|e| panic!("{transport:?}: {e}"));
        assert!(deleted, "{transport:?}");
        assert_eq!(count.load(Ordering::SeqCst), 2, "{transport:?}");

        let blobs = |endpoint: &str| {
            BlobServiceClient::with_options(account(endpoint), options(transport))
                .unwrap()
                .container("photos")
                .unwrap()
        };
        let (endpoint, _) = losing_then("409 Conflict", "ContainerAlreadyExists").await;
        let created = blobs(&endpoint)
            .create_container_if_not_exists()
            .await
            .unwrap_or_else(|e| panic!("{transport:?}: {e}"));
        assert!(created, "{transport:?}");
        let (endpoint, _) = losing_then("404 Not Found", "ContainerNotFound").await;
        assert!(blobs(&endpoint).delete_container_if_exists().await.unwrap());
        let (endpoint, _) = losing_then("404 Not Found", "BlobNotFound").await;
        let blob = blobs(&endpoint).blob("a.jpg").unwrap();
        assert!(blob.delete_if_exists().await.unwrap(), "{transport:?}");
    }
}

/// A table of `conn` behind a proxy that loses the first answer, and the same
/// table directly.
async fn table_losing_first_answer(
    conn: &str,
    transport: Transport,
) -> (
    tablekit::TableClient<tablekit::DynamicEntity>,
    tablekit::TableClient<tablekit::DynamicEntity>,
) {
    let direct =
        common::fresh_table::<tablekit::DynamicEntity>(&common::tables(conn).unwrap(), "Confirm")
            .await;
    let faulty = losing_first_answer(conn, transport)
        .await
        .table(direct.name())
        .unwrap();
    (faulty, direct)
}

#[tokio::test]
async fn a_write_whose_answer_was_lost_is_confirmed_by_read_back_even_with_nan() {
    use tablekit::{DynamicEntity, EdmValue};
    let Some(conn) = common::connection_string() else {
        return;
    };
    for transport in BOTH {
        let entity = DynamicEntity::new("p", "nan")
            .with("N", f64::NAN)
            .with("Inf", f64::INFINITY)
            .with("NegInf", f64::NEG_INFINITY)
            .with("X", 0.1 + 0.2);
        let (faulty, direct) = table_losing_first_answer(&conn, transport).await;
        // The insert lands, its answer is lost, the retry meets 409, and the
        // read-back finds what was sent.
        let written = faulty
            .insert(&entity)
            .await
            .unwrap_or_else(|e| panic!("{transport:?}: {e}"));
        assert!(written.confirmed_by_read_back(), "{transport:?}");
        let stored = direct.get(("p", "nan")).await.unwrap().unwrap();
        assert!(matches!(stored.get("N"), Some(EdmValue::Double(d)) if d.is_nan()));
        assert_eq!(stored.etag.as_ref(), Some(written.etag()), "{transport:?}");
        // A write the service acknowledges says so.
        let plain = direct
            .insert(&DynamicEntity::new("p", "plain"))
            .await
            .unwrap();
        assert!(!plain.confirmed_by_read_back());

        // A transaction likewise.
        let (faulty, direct) = table_losing_first_answer(&conn, transport).await;
        let mut tx = faulty.transaction();
        tx.insert(&entity).unwrap();
        tx.insert(&DynamicEntity::new("p", "other").with("N", f64::NAN))
            .unwrap();
        let result = tx
            .send()
            .await
            .unwrap_or_else(|e| panic!("{transport:?}: {e}"));
        assert!(result.confirmed_by_read_back(), "{transport:?}");
        let mut tx = direct.transaction();
        tx.insert(&DynamicEntity::new("p", "third")).unwrap();
        assert!(!tx.send().await.unwrap().confirmed_by_read_back());
        common::drop_table(&direct).await;
    }
}

#[tokio::test]
async fn an_entity_delete_if_exists_succeeds_after_a_lost_answer_even_when_reporting() {
    use crate::retry::{fake_server, table_with, Answer};
    for transport in BOTH {
        let (endpoint, count) = fake_server(vec![
            Answer::Drop,
            Answer::Status("404 Not Found", "ResourceNotFound"),
        ])
        .await;
        let deleted = table_with(&endpoint, options(transport))
            .with_ambiguous_writes(tablekit::table::AmbiguousWrites::Report)
            .delete_if_exists(("p", "r"), tablekit::IfMatch::Any)
            .await
            .unwrap_or_else(|e| panic!("{transport:?}: {e}"));
        assert!(deleted, "{transport:?}");
        assert_eq!(
            count.load(Ordering::SeqCst),
            2,
            "{transport:?}: no read-back"
        );
    }
}
