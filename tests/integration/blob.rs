//! The blob client on both backends: Azurite over HTTP and the embedded store.
//! Containers, uploads small and in blocks (from bytes, streams and readers),
//! streamed and ranged downloads, properties and metadata, conditions, listings.

use bytes::Bytes;
use futures::{stream, TryStreamExt};
use tablekit::account::{BlobSas, BlobSasPermissions, SasProtocol};
use tablekit::{BlobServiceClient, ContainerClient, ErrorCode};

use crate::common;

fn embedded() -> BlobServiceClient {
    BlobServiceClient::embedded()
}

fn azurite() -> Option<BlobServiceClient> {
    Some(BlobServiceClient::from_connection_string(&common::connection_string()?).unwrap())
}

async fn fresh_container(blobs: &BlobServiceClient) -> ContainerClient {
    let name = format!("c{}", &uuid::Uuid::new_v4().simple().to_string()[..20]);
    let c = blobs.container(&name).unwrap();
    assert!(c.create_container_if_not_exists().await.unwrap());
    c
}

/// Each case as `::embedded` and `::azurite` tests.
macro_rules! on_both {
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            #[tokio::test]
            async fn embedded() {
                super::$case(super::embedded(), false).await;
            }
            #[tokio::test]
            async fn azurite() {
                if let Some(blobs) = super::azurite() {
                    super::$case(blobs, true).await;
                }
            }
        }
    )*};
}

on_both!(
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

async fn container_lifecycle_and_names(blobs: BlobServiceClient, _azurite: bool) {
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

async fn small_upload_round_trips_with_properties_and_ranges(
    blobs: BlobServiceClient,
    _azurite: bool,
) {
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

async fn large_uploads_go_in_blocks_and_come_back_whole(blobs: BlobServiceClient, _azurite: bool) {
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

async fn conditions_protect_blobs(blobs: BlobServiceClient, _azurite: bool) {
    let c = fresh_container(&blobs).await;
    let b = c.blob("report.txt").unwrap();
    let first = b.upload("v1").if_not_exists().await.unwrap();

    let err = b.upload("v2").if_not_exists().await.unwrap_err();
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
    let err = b.delete(Some(first.etag().clone())).await.unwrap_err();
    assert!(err.is_precondition_failed(), "{err}");
    assert_eq!(&b.download().bytes().await.unwrap()[..], b"v2");

    // Blocks too: the commit carries the condition.
    let big = c.blob("big").unwrap().with_blocks(1024, 2).unwrap();
    big.upload(pattern(3000)).await.unwrap();
    let err = big.upload(pattern(3000)).if_not_exists().await.unwrap_err();
    assert!(err.is_conflict(), "{err}");

    b.delete(Some(second.etag().clone())).await.unwrap();
    assert!(!b.exists().await.unwrap());
    assert!(!b.delete_if_exists().await.unwrap());
}

async fn listing_by_prefix_pages_in_name_order(blobs: BlobServiceClient, _azurite: bool) {
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
    assert!(c
        .list_blobs()
        .page_size(0)
        .fetch_all()
        .await
        .unwrap_err()
        .is_invalid_input());
}

async fn missing_things_are_named_errors(blobs: BlobServiceClient, azurite: bool) {
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
        b.delete(None).await.unwrap_err(),
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

async fn a_failing_source_leaves_the_blob_as_it_was(blobs: BlobServiceClient, _azurite: bool) {
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
    let owner = BlobServiceClient::from_connection_string(&conn).unwrap();
    let c = fresh_container(&owner).await;
    let photo = c.blob("employees/000456 photo.jpg").unwrap();
    photo.upload("jpeg bytes").await.unwrap();

    // A connection string with only a BlobEndpoint and the SAS: no table endpoint.
    let read_only = blob_sas_connection(
        &conn,
        BlobSas::blob(c.name(), photo.name()).permissions(BlobSasPermissions::READ_ONLY),
    );
    let err = tablekit::TableServiceClient::from_connection_string(&read_only).unwrap_err();
    assert!(err.to_string().contains("no table endpoint"), "{err}");
    let reader = BlobServiceClient::from_connection_string(&read_only)
        .unwrap()
        .container(c.name())
        .unwrap();
    let b = reader.blob(photo.name()).unwrap();
    assert_eq!(&b.download().bytes().await.unwrap()[..], b"jpeg bytes");
    assert_eq!(b.properties().await.unwrap().size(), 10);
    let err = b.upload("replaced").await.unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");
    let err = b.delete(None).await.unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");

    // Widening the permissions breaks the signature (Azurite checks it).
    let forged = read_only.replace("sp=r&", "sp=rcw&");
    assert_ne!(forged, read_only);
    let forger = BlobServiceClient::from_connection_string(&forged).unwrap();
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
    let writer = BlobServiceClient::from_connection_string(&blob_sas_connection(
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
