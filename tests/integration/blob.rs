//! The blob client on both backends: Azurite over HTTP and the embedded store.
//! Containers, uploads small and in blocks (from bytes, streams and readers),
//! streamed and ranged downloads, properties and metadata, conditions, listings.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::{stream, TryStreamExt};
use tablekit::account::{BlobSas, BlobSasPermissions, SasProtocol};
use tablekit::{error::ErrorCode, BlobServiceClient, ContainerClient};

use crate::common;
use tablekit::testing::TestEnv;

async fn fresh_container(blobs: &BlobServiceClient) -> ContainerClient {
    let name = format!("c{}", &uuid::Uuid::new_v4().simple().to_string()[..20]);
    let c = blobs.container(&name).unwrap();
    assert!(c.create_container_if_not_exists().await.unwrap());
    c
}

tablekit::testing::conformance!(
    container_lifecycle_and_names,
    small_upload_round_trips_with_properties_and_ranges,
    large_uploads_go_in_blocks_and_come_back_whole,
    conditions_protect_blobs,
    listing_by_prefix_pages_in_name_order,
    missing_things_are_named_errors,
    a_failing_source_leaves_the_blob_as_it_was,
);

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

async fn container_lifecycle_and_names(env: TestEnv) {
    let blobs = env.blobs().clone();
    for bad in ["ab", "Photos", "-photos", "a--b", "ph_otos"] {
        assert!(
            blobs.container(bad).unwrap_err().is_invalid_input(),
            "{bad}"
        );
    }
    let c = fresh_container(&blobs).await;
    assert!(!c.create_container_if_not_exists().await.unwrap());
    let err = c.create_container().await.unwrap_err();
    assert_eq!(
        err.code(),
        Some(&ErrorCode::ContainerAlreadyExists),
        "{err}"
    );
    assert!(err.is_conflict());
    assert!(c.blob("").unwrap_err().is_invalid_input());
    assert!(c.blob(&"x".repeat(1025)).unwrap_err().is_invalid_input());
    assert!(c.blob("a\u{1}b").unwrap_err().is_invalid_input());
    assert!(c.delete_container_if_exists().await.unwrap());
    assert!(!c.delete_container_if_exists().await.unwrap());
}

async fn small_upload_round_trips_with_properties_and_ranges(env: TestEnv) {
    let blobs = env.blobs().clone();
    let c = fresh_container(&blobs).await;
    let photo = c.blob("employees/000456 photo.jpg").unwrap();
    let body = pattern(10_000);
    let written = photo
        .upload(body.clone())
        .content_type("image/jpeg")
        .metadata("employee", "456")
        .await
        .unwrap();

    let props = photo.properties().await.unwrap();
    assert_eq!(props.size(), 10_000);
    assert_eq!(props.etag(), written.etag());
    assert_eq!(props.content_type(), Some("image/jpeg"));
    assert_eq!(
        props.metadata(),
        [("employee".to_owned(), "456".to_owned())]
    );
    assert!(photo.exists().await.unwrap());

    let all = photo.download().bytes().await.unwrap();
    assert_eq!(&all[..], &body[..]);
    let part = photo.download().range(100..200).bytes().await.unwrap();
    assert_eq!(&part[..], &body[100..200]);
    let tail = photo.download().range(9_990..).send().await.unwrap();
    assert_eq!(
        tail.properties().size(),
        10_000,
        "the whole size, not the range's"
    );
    assert_eq!(&tail.bytes().await.unwrap()[..], &body[9_990..]);
    let past_end = photo
        .download()
        .range(9_999..=20_000)
        .bytes()
        .await
        .unwrap();
    assert_eq!(&past_end[..], &body[9_999..]);
    assert!(photo
        .download()
        .range(5..5)
        .bytes()
        .await
        .unwrap_err()
        .is_invalid_input());
    assert!(photo
        .upload(Bytes::new())
        .metadata("not-an-identifier", "x")
        .await
        .unwrap_err()
        .is_invalid_input());

    let empty = c.blob("empty").unwrap();
    empty.upload(Bytes::new()).await.unwrap();
    assert_eq!(empty.properties().await.unwrap().size(), 0);
    assert!(empty.download().bytes().await.unwrap().is_empty());
}

async fn large_uploads_go_in_blocks_and_come_back_whole(env: TestEnv) {
    let blobs = env.blobs().clone();
    let c = fresh_container(&blobs).await;
    let body = pattern(1024 * 1024 + 123);

    // From bytes: 17 blocks of 64 KiB, three in flight.
    let from_bytes = c
        .blob("from-bytes")
        .unwrap()
        .with_blocks(64 * 1024, 3)
        .unwrap();
    from_bytes.upload(body.clone()).await.unwrap();
    assert_eq!(&from_bytes.download().bytes().await.unwrap()[..], &body[..]);

    // From a stream of odd-sized chunks, cut into blocks.
    let chunks: Vec<Result<Bytes, std::io::Error>> = body
        .chunks(7_777)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let from_stream = c
        .blob("from-stream")
        .unwrap()
        .with_blocks(100_000, 2)
        .unwrap();
    from_stream
        .upload_stream(stream::iter(chunks))
        .content_type("application/octet-stream")
        .await
        .unwrap();
    let download = from_stream.download().send().await.unwrap();
    assert_eq!(download.properties().size(), body.len() as u64);
    assert_eq!(
        download.properties().content_type(),
        Some("application/octet-stream")
    );
    let pieces: Vec<Bytes> = download.try_collect().await.unwrap();
    assert_eq!(pieces.concat(), body);

    // From a reader: smaller than one block, so one request.
    let small = c.blob("from-reader").unwrap();
    small
        .upload_reader(std::io::Cursor::new(body[..5_000].to_vec()))
        .await
        .unwrap();
    assert_eq!(&small.download().bytes().await.unwrap()[..], &body[..5_000]);

    let err = c.blob("x").unwrap().with_blocks(0, 1).unwrap_err();
    assert!(err.is_invalid_input());
}

async fn conditions_protect_blobs(env: TestEnv) {
    let blobs = env.blobs().clone();
    let c = fresh_container(&blobs).await;
    let b = c.blob("report.txt").unwrap();
    let first = b
        .upload("v1")
        .if_none_match(tablekit::IfNoneMatch::Any)
        .await
        .unwrap();

    let err = b
        .upload("v2")
        .if_none_match(tablekit::IfNoneMatch::Any)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::BlobAlreadyExists), "{err}");
    assert!(err.is_conflict());

    let second = b.upload("v2").if_match(first.etag().clone()).await.unwrap();
    assert_ne!(second.etag(), first.etag());
    let err = b
        .upload("v3")
        .if_match(first.etag().clone())
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err}");
    let err = b
        .download()
        .if_match(first.etag().clone())
        .bytes()
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err}");
    let err = b.delete(first.etag()).await.unwrap_err();
    assert!(err.is_precondition_failed(), "{err}");
    assert_eq!(&b.download().bytes().await.unwrap()[..], b"v2");

    // Blocks too: the commit carries the condition.
    let big = c.blob("big").unwrap().with_blocks(1024, 2).unwrap();
    big.upload(pattern(3000)).await.unwrap();
    let err = big
        .upload(pattern(3000))
        .if_none_match(tablekit::IfNoneMatch::Any)
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");

    b.delete(second.etag()).await.unwrap();
    assert!(!b.exists().await.unwrap());
    assert!(!b.delete_if_exists().await.unwrap());

    // A conditional delete of a blob that is gone fails its condition, as the
    // service answers any write whose If-Match names no existing blob.
    let err = b.delete(second.etag()).await.unwrap_err();
    assert!(err.is_precondition_failed(), "{err}");
    assert_eq!(err.code(), Some(&ErrorCode::ConditionNotMet), "{err}");
    let err = b
        .upload("v4")
        .if_match(second.etag().clone())
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err}");
    assert!(!b.exists().await.unwrap());
}

async fn listing_by_prefix_pages_in_name_order(env: TestEnv) {
    let blobs = env.blobs().clone();
    let c = fresh_container(&blobs).await;
    // The log-data pattern: blobs named by time, read by a time window's prefix.
    for name in [
        "queue/2014/07/31/1800/000001.log",
        "queue/2014/07/31/1504/000001.log",
        "queue/2014/07/31/1505/000001.log",
        "queue/2014/07/31/1505/000002.log",
        "queue/2014/07/31/1506/000001.log",
        "table/2014/07/31/1505/000001.log",
    ] {
        c.blob(name).unwrap().upload(name.to_owned()).await.unwrap();
    }
    let names: Vec<String> = c
        .list_blobs()
        .prefix("queue/2014/07/31/15")
        .page_size(2)
        .stream()
        .map_ok(|p| p.name().to_owned())
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        names,
        [
            "queue/2014/07/31/1504/000001.log",
            "queue/2014/07/31/1505/000001.log",
            "queue/2014/07/31/1505/000002.log",
            "queue/2014/07/31/1506/000001.log",
        ]
    );
    let all = c.list_blobs().fetch_all().await.unwrap();
    assert_eq!(all.len(), 6);
    assert_eq!(all[0].size(), 32);
    assert!(all[0].metadata().is_empty());

    // Listings carry each blob's user metadata, as properties() does.
    c.blob("table/2014/07/31/1505/000001.log")
        .unwrap()
        .upload("with metadata")
        .metadata("source", "table")
        .metadata("Host", "vm7")
        .content_type("text/plain")
        .await
        .unwrap();
    let listed = c.list_blobs().prefix("table/").fetch_all().await.unwrap();
    assert_eq!(
        listed[0].metadata(),
        [
            ("host".to_owned(), "vm7".to_owned()),
            ("source".to_owned(), "table".to_owned())
        ]
    );
    assert_eq!(listed[0].content_type(), Some("text/plain"));
    assert!(c
        .list_blobs()
        .page_size(0)
        .fetch_all()
        .await
        .unwrap_err()
        .is_invalid_input());
}

async fn missing_things_are_named_errors(env: TestEnv) {
    let blobs = env.blobs().clone();
    let azurite = env.backend().is_azurite();
    let missing = blobs.container("no-such-container").unwrap();
    let err = missing.blob("x").unwrap().upload("x").await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::ContainerNotFound), "{err}");
    let err = missing.list_blobs().fetch_all().await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::ContainerNotFound), "{err}");

    let c = fresh_container(&blobs).await;
    let b = c.blob("absent").unwrap();
    for err in [
        b.download().bytes().await.unwrap_err(),
        b.properties().await.unwrap_err(),
        b.delete(tablekit::IfMatch::Any).await.unwrap_err(),
    ] {
        assert_eq!(err.code(), Some(&ErrorCode::BlobNotFound), "{err}");
        assert!(err.is_not_found());
    }
    b.upload("four").await.unwrap();
    let past_the_end = b.download().range(4..).bytes().await;
    if azurite {
        // Azurite answers a range that starts past the end with no bytes; the
        // service (and the embedded store) refuse it with 416 InvalidRange.
        assert!(past_the_end.unwrap().is_empty());
    } else {
        let err = past_the_end.unwrap_err();
        assert_eq!(err.status(), Some(416), "{err}");
        assert_eq!(err.code(), Some(&ErrorCode::InvalidRange), "{err}");
    }
}

async fn a_failing_source_leaves_the_blob_as_it_was(env: TestEnv) {
    let blobs = env.blobs().clone();
    let c = fresh_container(&blobs).await;
    let b = c.blob("kept").unwrap().with_blocks(1024, 2).unwrap();
    b.upload("original").await.unwrap();
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from(pattern(1024))),
        Ok(Bytes::from(pattern(1024))),
        Err(std::io::Error::other("disk unplugged")),
    ];
    let err = b.upload_stream(stream::iter(chunks)).await.unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert_eq!(&b.download().bytes().await.unwrap()[..], b"original");
}

fn blob_sas_connection(conn: &str, sas: BlobSas) -> String {
    let account = tablekit::Account::from_connection_string(conn).unwrap();
    let token = sas
        .expiry(chrono::Utc::now() + chrono::Duration::hours(1))
        .protocol(SasProtocol::HttpsAndHttp)
        .sign(&account)
        .unwrap();
    format!(
        "BlobEndpoint={};SharedAccessSignature={}",
        account
            .blob_endpoint()
            .expect("the test account has a blob endpoint"),
        token.as_query()
    )
}

#[tokio::test]
async fn a_read_only_blob_sas_downloads_but_cannot_upload_and_other_blobs_refuse_it() {
    let Some(conn) = common::connection_string() else {
        return;
    };
    let owner = common::blobs(&conn).unwrap();
    let c = fresh_container(&owner).await;
    let photo = c.blob("employees/000456 photo.jpg").unwrap();
    photo.upload("jpeg bytes").await.unwrap();

    // A connection string with only a BlobEndpoint and the SAS: no table endpoint.
    let read_only = blob_sas_connection(
        &conn,
        BlobSas::blob(c.name(), photo.name()).permissions(BlobSasPermissions::READ_ONLY),
    );
    let err = common::tables(&read_only).unwrap_err();
    assert!(err.to_string().contains("no table endpoint"), "{err}");
    let reader = common::blobs(&read_only)
        .unwrap()
        .container(c.name())
        .unwrap();
    let b = reader.blob(photo.name()).unwrap();
    assert_eq!(&b.download().bytes().await.unwrap()[..], b"jpeg bytes");
    assert_eq!(b.properties().await.unwrap().size(), 10);
    let err = b.upload("replaced").await.unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");
    let err = b.delete(tablekit::IfMatch::Any).await.unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");

    // Widening the permissions breaks the signature (Azurite checks it).
    let forged = read_only.replace("sp=r&", "sp=rcw&");
    assert_ne!(forged, read_only);
    let forger = common::blobs(&forged).unwrap();
    let err = forger
        .container(c.name())
        .unwrap()
        .blob(photo.name())
        .unwrap()
        .download()
        .bytes()
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");

    // Signed for that blob, presented for another one of the same container.
    c.blob("other.jpg").unwrap().upload("x").await.unwrap();
    let err = reader
        .blob("other.jpg")
        .unwrap()
        .download()
        .bytes()
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");
    assert!(!err.to_string().contains("sig="), "{err}");

    // A container SAS that may create and write uploads, in blocks too, but not read.
    let writer = common::blobs(&blob_sas_connection(
        &conn,
        BlobSas::container(c.name()).permissions(BlobSasPermissions {
            create: true,
            write: true,
            ..Default::default()
        }),
    ))
    .unwrap()
    .container(c.name())
    .unwrap();
    let upload = writer
        .blob("upload.bin")
        .unwrap()
        .with_blocks(1024, 2)
        .unwrap();
    upload.upload(pattern(3000)).await.unwrap();
    let err = upload.download().bytes().await.unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");
    assert_eq!(
        &c.blob("upload.bin")
            .unwrap()
            .download()
            .bytes()
            .await
            .unwrap()[..],
        &pattern(3000)[..]
    );
}

/// One request the block-counting server saw: Put Blob, Put Block, Put Block List.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Blob { len: usize },
    Block { id: String, len: usize },
    BlockList { body: String },
}

#[derive(Default)]
struct Traffic {
    seen: Vec<Seen>,
    in_flight: usize,
    max_in_flight: usize,
}

/// A loopback Blob endpoint that answers uploads and records them. Each Put
/// Block is held until `hold_for` blocks are in flight together (or half a
/// second passes, for the last few), so the highest concurrency the client
/// reaches is observed without depending on timing.
async fn block_counting_server(hold_for: usize) -> (String, Arc<Mutex<Traffic>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let traffic: Arc<Mutex<Traffic>> = Arc::default();
    let shared = traffic.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let traffic = shared.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = vec![0u8; 64 * 1024];
                loop {
                    // One request: the head, then Content-Length bytes of body.
                    let end = loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break end;
                        }
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    while buf.len() < end + 4 + len {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = buf[end + 4..end + 4 + len].to_vec();
                    buf.drain(..end + 4 + len);
                    let target = head.split(' ').nth(1).unwrap_or_default().to_owned();
                    let query: Vec<(String, String)> = target
                        .split_once('?')
                        .map(|(_, q)| {
                            url::form_urlencoded::parse(q.as_bytes())
                                .into_owned()
                                .collect()
                        })
                        .unwrap_or_default();
                    let param = |name: &str| {
                        query
                            .iter()
                            .find(|(k, _)| k == name)
                            .map(|(_, v)| v.clone())
                    };
                    let seen = match param("comp").as_deref() {
                        Some("block") => Seen::Block {
                            id: param("blockid").unwrap_or_default(),
                            len,
                        },
                        Some("blocklist") => Seen::BlockList {
                            body: String::from_utf8_lossy(&body).into_owned(),
                        },
                        _ => Seen::Blob { len },
                    };
                    let is_block = matches!(seen, Seen::Block { .. });
                    {
                        let mut t = traffic.lock().unwrap();
                        t.seen.push(seen);
                        t.in_flight += 1;
                        t.max_in_flight = t.max_in_flight.max(t.in_flight);
                    }
                    if is_block {
                        let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
                        while traffic.lock().unwrap().in_flight < hold_for
                            && tokio::time::Instant::now() < deadline
                        {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                    }
                    let reply = "HTTP/1.1 201 Created\r\nETag: \"0x8D1\"\r\n\
                                 Last-Modified: Thu, 31 Jul 2014 18:00:00 GMT\r\n\
                                 x-ms-request-id: counted\r\nContent-Length: 0\r\n\r\n";
                    let ok = sock.write_all(reply.as_bytes()).await.is_ok();
                    traffic.lock().unwrap().in_flight -= 1;
                    if !ok {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}/devstoreaccount1"), traffic)
}

fn counted_container(endpoint: &str) -> ContainerClient {
    let conn = format!(
        "AccountName=devstoreaccount1;AccountKey={};BlobEndpoint={endpoint}",
        common::EMULATOR_KEY
    );
    common::blobs(&conn).unwrap().container("counted").unwrap()
}

#[tokio::test]
async fn a_large_upload_is_put_blocks_at_most_in_flight_then_one_block_list() {
    let (endpoint, traffic) = block_counting_server(3).await;
    let blob = counted_container(&endpoint)
        .blob("large.bin")
        .unwrap()
        .with_blocks(1024, 3)
        .unwrap();
    blob.upload(pattern(10 * 1024 + 5)).await.unwrap();

    let t = traffic.lock().unwrap();
    let blocks: Vec<(String, usize)> = t
        .seen
        .iter()
        .filter_map(|s| match s {
            Seen::Block { id, len } => Some((id.clone(), *len)),
            _ => None,
        })
        .collect();
    assert_eq!(blocks.len(), 11, "ten full blocks and a 5-byte tail");
    assert_eq!(
        blocks.iter().map(|(_, len)| len).sum::<usize>(),
        10 * 1024 + 5
    );
    assert!(!t.seen.iter().any(|s| matches!(s, Seen::Blob { .. })));
    assert_eq!(t.max_in_flight, 3, "three blocks in flight, never more");
    let Some(Seen::BlockList { body }) = t.seen.last() else {
        panic!("the commit comes last: {:?}", t.seen.last());
    };
    let tail = blocks.iter().find(|(_, len)| *len == 5).unwrap().0.clone();
    let listed: Vec<&str> = body
        .split("<Latest>")
        .skip(1)
        .map(|s| s.split("</Latest>").next().unwrap())
        .collect();
    assert_eq!(
        listed.last(),
        Some(&tail.as_str()),
        "the tail is committed last"
    );
    let mut put: Vec<&str> = blocks.iter().map(|(id, _)| id.as_str()).collect();
    let mut committed = listed.clone();
    put.sort_unstable();
    committed.sort_unstable();
    assert_eq!(committed, put, "every block put is committed, once");
}

#[tokio::test]
async fn a_streamed_upload_keeps_to_its_in_flight_limit() {
    let (endpoint, traffic) = block_counting_server(2).await;
    let blob = counted_container(&endpoint)
        .blob("streamed.bin")
        .unwrap()
        .with_blocks(1000, 2)
        .unwrap();
    let chunks: Vec<Result<Bytes, std::io::Error>> = pattern(9_500)
        .chunks(333)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    blob.upload_stream(stream::iter(chunks)).await.unwrap();
    let t = traffic.lock().unwrap();
    let blocks = t
        .seen
        .iter()
        .filter(|s| matches!(s, Seen::Block { .. }))
        .count();
    assert_eq!(blocks, 10);
    assert_eq!(t.max_in_flight, 2);
    assert!(matches!(t.seen.last(), Some(Seen::BlockList { .. })));
}

#[tokio::test]
async fn a_small_upload_is_one_put_blob() {
    let (endpoint, traffic) = block_counting_server(1).await;
    let c = counted_container(&endpoint);
    let blob = c.blob("small.bin").unwrap().with_blocks(1024, 3).unwrap();
    blob.upload(pattern(1024)).await.unwrap();
    // From a stream too: one block's worth and the end is one request.
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        vec![Ok(Bytes::from(pattern(500))), Ok(Bytes::from(pattern(524)))];
    blob.upload_stream(stream::iter(chunks)).await.unwrap();
    let t = traffic.lock().unwrap();
    assert_eq!(t.seen, [Seen::Blob { len: 1024 }, Seen::Blob { len: 1024 }]);
}
