//! The blob management calls (issue 24) on both backends: container listings
//! and properties, listings by delimiter, metadata and HTTP headers set after
//! an upload, leases on blobs and containers (expiry on the embedded store's
//! manual clock, never a real wait), and server-side copies.

use std::time::Duration;

use tablekit::blob::{BlobEntry, BlobHttpHeaders, CopyStatus, LeaseDuration, LeaseState};
use tablekit::clock::ManualClock;
use tablekit::error::ErrorCode;
use tablekit::{BlobServiceClient, ContainerClient, IfMatch};

use crate::common;
use tablekit::testing::{Backend, TestEnv};

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..16]
    )
}

async fn fresh_container(blobs: &BlobServiceClient) -> ContainerClient {
    let c = blobs.container(&unique("m")).unwrap();
    c.create_container().await.unwrap();
    c
}

fn md(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

tablekit::testing::conformance!(
    containers_list_by_prefix_in_pages_with_their_metadata,
    a_listing_by_delimiter_rolls_names_up_into_folders,
    metadata_and_http_headers_are_set_after_an_upload,
    a_blob_lease_guards_writes_deletes_and_sets,
    a_lease_ends_on_the_clock_and_breaks_after_its_period,
    a_container_lease_guards_its_deletion,
    a_copy_within_the_account_carries_bytes_headers_and_metadata,
);

async fn containers_list_by_prefix_in_pages_with_their_metadata(env: TestEnv) {
    let blobs = env.blobs().clone();
    let prefix = unique("lc");
    let names: Vec<String> = ["-c", "-a", "-b"]
        .iter()
        .map(|s| format!("{prefix}{s}"))
        .collect();
    for n in &names {
        blobs
            .container(n)
            .unwrap()
            .create_container()
            .await
            .unwrap();
    }
    let b = blobs.container(&names[2]).unwrap();
    let before = b.properties().await.unwrap();
    assert!(before.metadata().is_empty());
    assert_eq!(before.lease().state(), LeaseState::Available);
    b.set_metadata([("Owner", "hr"), ("tier", "gold")])
        .await
        .unwrap();
    let after = b.properties().await.unwrap();
    assert_eq!(after.metadata(), md(&[("owner", "hr"), ("tier", "gold")]));
    assert_ne!(after.etag(), before.etag(), "a metadata set is a change");

    let all = blobs
        .list_containers()
        .prefix(&prefix)
        .include_metadata()
        .page_size(2)
        .fetch_all()
        .await
        .unwrap();
    let listed: Vec<&str> = all.iter().map(|c| c.name()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "in name order, across pages");
    assert_eq!(all[1].metadata(), after.metadata());
    assert_eq!(all[1].etag(), after.etag());
    assert!(all[0].metadata().is_empty());

    let bare = blobs
        .list_containers()
        .prefix(&prefix)
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(bare.len(), 3);
    assert!(
        bare.iter().all(|c| c.metadata().is_empty()),
        "metadata only when asked"
    );
    assert!(blobs
        .list_containers()
        .page_size(0)
        .fetch_all()
        .await
        .unwrap_err()
        .is_invalid_input());

    // Clearing.
    b.set_metadata(Vec::<(String, String)>::new())
        .await
        .unwrap();
    assert!(b.properties().await.unwrap().metadata().is_empty());
    let missing = blobs.container(&unique("missing")).unwrap();
    let err = missing.properties().await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::ContainerNotFound), "{err}");
    for n in &names {
        blobs
            .container(n)
            .unwrap()
            .delete_container()
            .await
            .unwrap();
    }
}

async fn a_listing_by_delimiter_rolls_names_up_into_folders(env: TestEnv) {
    let blobs = env.blobs().clone();
    let c = fresh_container(&blobs).await;
    for name in [
        "2014/07/31/a.log",
        "2014/07/31/b.log",
        "2014/08/01/c.log",
        "2014/index.txt",
        "2014-notes.txt",
        "readme.txt",
        "z/deep/er/x",
    ] {
        c.blob(name).unwrap().upload(name.to_owned()).await.unwrap();
    }
    let names = |entries: Vec<BlobEntry>| -> Vec<String> {
        entries
            .iter()
            .map(|e| match e {
                BlobEntry::Blob(p) => format!("blob {}", p.name()),
                BlobEntry::Prefix(p) => format!("dir {p}"),
                _ => unreachable!("a blob or a prefix"),
            })
            .collect()
    };
    let top = names(c.list_blobs().delimiter("/").fetch_all().await.unwrap());
    assert_eq!(
        top,
        [
            "blob 2014-notes.txt",
            "dir 2014/",
            "blob readme.txt",
            "dir z/"
        ]
    );
    for page in [1, 2, 3] {
        let paged = c
            .list_blobs()
            .delimiter("/")
            .page_size(page)
            .fetch_all()
            .await
            .unwrap();
        assert_eq!(names(paged), top, "pages of {page}");
    }
    let year = c
        .list_blobs()
        .prefix("2014/")
        .delimiter("/")
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(
        names(year.clone()),
        ["dir 2014/07/", "dir 2014/08/", "blob 2014/index.txt"]
    );
    let BlobEntry::Blob(index) = &year[2] else {
        panic!("a blob")
    };
    assert_eq!(index.size(), "2014/index.txt".len() as u64);
    let paged = c
        .list_blobs()
        .prefix("2014/")
        .delimiter("/")
        .page_size(1)
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(paged, year);
    // A prefix that is not a folder.
    let partial = c
        .list_blobs()
        .prefix("2014")
        .delimiter("/")
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(names(partial), ["blob 2014-notes.txt", "dir 2014/"]);
    assert!(c
        .list_blobs()
        .delimiter("")
        .fetch_all()
        .await
        .unwrap_err()
        .is_invalid_input());
    c.delete_container().await.unwrap();
}

async fn metadata_and_http_headers_are_set_after_an_upload(env: TestEnv) {
    let blobs = env.blobs().clone();
    let c = fresh_container(&blobs).await;
    let report = c.blob("reports/2014.csv").unwrap();
    let v1 = report
        .upload("a,b\n1,2\n")
        .content_type("text/plain")
        .metadata("author", "ann")
        .await
        .unwrap();

    let v2 = report
        .set_metadata([("Author", "bob"), ("reviewed", "yes")])
        .if_match(v1.etag())
        .await
        .unwrap();
    assert_ne!(v2.etag(), v1.etag());
    let p = report.properties().await.unwrap();
    assert_eq!(p.etag(), v2.etag());
    assert_eq!(p.metadata(), md(&[("author", "bob"), ("reviewed", "yes")]));
    assert_eq!(p.content_type(), Some("text/plain"), "headers stay");
    let stale = report
        .set_metadata([("x", "y")])
        .if_match(v1.etag())
        .await
        .unwrap_err();
    assert!(stale.is_precondition_failed(), "{stale}");
    let bad = report
        .set_metadata([("not-an-identifier", "1")])
        .await
        .unwrap_err();
    assert!(bad.is_invalid_input());

    let md5: Vec<u8> = (0..16).collect();
    let headers = BlobHttpHeaders::new()
        .content_type("text/csv")
        .content_encoding("identity")
        .content_language("en-GB")
        .content_disposition("attachment; filename=\"2014.csv\"")
        .cache_control("max-age=3600")
        .content_md5(md5.clone());
    let v3 = report
        .set_http_headers(headers.clone())
        .if_match(v2.etag())
        .await
        .unwrap();
    let p = report.properties().await.unwrap();
    assert_eq!(p.etag(), v3.etag());
    assert_eq!(p.http_headers(), &headers);
    assert_eq!(p.metadata().len(), 2, "metadata stays");
    let listed = c.list_blobs().fetch_all().await.unwrap();
    assert_eq!(
        listed[0].http_headers(),
        &headers,
        "listings carry them too"
    );
    let download = report.download().range(0..3).send().await.unwrap();
    assert_eq!(
        download.properties().http_headers(),
        &headers,
        "a ranged read too"
    );
    assert_eq!(&download.bytes().await.unwrap()[..], b"a,b");
    assert_eq!(&report.download().bytes().await.unwrap()[..], b"a,b\n1,2\n");

    // All six at once: those not given are cleared.
    report
        .set_http_headers(BlobHttpHeaders::new().cache_control("no-cache"))
        .await
        .unwrap();
    let p = report.properties().await.unwrap();
    assert_eq!(
        p.http_headers(),
        &BlobHttpHeaders::new().cache_control("no-cache")
    );

    let short_md5 = report
        .set_http_headers(BlobHttpHeaders::new().content_md5(vec![1, 2, 3]))
        .await
        .unwrap_err();
    assert!(short_md5.is_invalid_input());
    let missing = c.blob("missing").unwrap();
    let err = missing.set_metadata([("a", "b")]).await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::BlobNotFound), "{err}");
    let err = missing
        .set_http_headers(BlobHttpHeaders::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::BlobNotFound), "{err}");

    // Headers given with the upload, also for one in blocks.
    let big = c.blob("big.gz").unwrap().with_blocks(1000, 2).unwrap();
    big.upload(vec![9u8; 2500])
        .http_headers(
            BlobHttpHeaders::new()
                .content_encoding("gzip")
                .content_language("de"),
        )
        .content_type("application/gzip")
        .await
        .unwrap();
    let p = big.properties().await.unwrap();
    assert_eq!(p.content_type(), Some("application/gzip"));
    assert_eq!(p.http_headers().get_content_encoding(), Some("gzip"));
    assert_eq!(p.http_headers().get_content_language(), Some("de"));
    c.delete_container().await.unwrap();
}

async fn a_blob_lease_guards_writes_deletes_and_sets(env: TestEnv) {
    let blobs = env.blobs().clone();
    let c = fresh_container(&blobs).await;
    let job = c.blob("jobs/nightly.json").unwrap();
    job.upload("{}").await.unwrap();
    let fifteen = LeaseDuration::Fixed(Duration::from_secs(15));

    let mut lease = job.acquire_lease(fifteen).await.unwrap();
    let p = job.properties().await.unwrap();
    assert_eq!(p.lease().state(), LeaseState::Leased);
    assert!(p.lease().is_locked());
    assert_eq!(p.lease().is_infinite(), Some(false));

    // Without the lease: refused, and the blob is as it was.
    let err = job.upload("{\"by\":\"other\"}").await.unwrap_err();
    assert!(err.is_lease_held(), "{err}");
    assert_eq!(err.status(), Some(412));
    assert!(job
        .set_metadata([("a", "b")])
        .await
        .unwrap_err()
        .is_lease_held());
    assert!(job
        .set_http_headers(BlobHttpHeaders::new())
        .await
        .unwrap_err()
        .is_lease_held());
    assert!(job.delete(IfMatch::Any).await.unwrap_err().is_lease_held());
    let blocks = job.clone().with_blocks(4, 2).unwrap();
    let err = blocks.upload("0123456789").await.unwrap_err();
    assert!(err.is_lease_held(), "a block put too: {err}");
    assert_eq!(&job.download().bytes().await.unwrap()[..], b"{}");
    // Reads need no lease.
    assert!(job.exists().await.unwrap());

    // With it: allowed.
    job.upload("{\"by\":\"me\"}").lease(&lease).await.unwrap();
    blocks.upload("0123456789").lease(&lease).await.unwrap();
    assert_eq!(&job.download().bytes().await.unwrap()[..], b"0123456789");
    job.set_metadata([("owner", "me")])
        .lease(&lease)
        .await
        .unwrap();
    job.set_http_headers(BlobHttpHeaders::new().content_type("application/json"))
        .lease(&lease)
        .await
        .unwrap();
    assert_eq!(
        job.properties().await.unwrap().lease().state(),
        LeaseState::Leased,
        "writes keep the lease"
    );

    // Somebody else cannot take it; its holder can again (that renews it).
    let other = uuid::Uuid::new_v4().to_string();
    let err = job
        .acquire_lease_with_id(fifteen, Some(&other))
        .await
        .unwrap_err();
    assert!(err.is_lease_held(), "{err}");
    assert_eq!(err.code(), Some(&ErrorCode::LeaseAlreadyPresent));
    let again = job
        .acquire_lease_with_id(
            LeaseDuration::Fixed(Duration::from_secs(60)),
            Some(lease.id().as_str()),
        )
        .await
        .unwrap();
    assert_eq!(again.id(), lease.id());
    lease.renew().await.unwrap();
    assert!(job
        .lease(other.as_str())
        .renew()
        .await
        .unwrap_err()
        .is_lease_lost());

    // A changed lease: the old id guards nothing.
    let old = lease.id().clone();
    let new_id = uuid::Uuid::new_v4().to_string();
    lease.change(&new_id).await.unwrap();
    assert_eq!(lease.id().as_str(), new_id);
    let err = job.upload("x").lease(&old).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert_eq!(
        err.code(),
        Some(&ErrorCode::LeaseIdMismatchWithBlobOperation)
    );
    job.upload("y").lease(&lease).await.unwrap();
    assert!(lease
        .clone()
        .change("not a guid")
        .await
        .unwrap_err()
        .is_invalid_input());

    // Released: anyone writes, and the old lease's id is refused.
    lease.clone().release().await.unwrap();
    assert_eq!(
        job.properties().await.unwrap().lease().state(),
        LeaseState::Available
    );
    job.upload("z").await.unwrap();
    let err = job.upload("w").lease(&lease).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert!(lease.clone().release().await.unwrap_err().is_lease_lost());

    // An infinite lease, broken at once by somebody else.
    let held = job.acquire_lease(LeaseDuration::Infinite).await.unwrap();
    assert_eq!(
        job.properties().await.unwrap().lease().is_infinite(),
        Some(true)
    );
    assert_eq!(
        job.break_lease(Some(Duration::ZERO)).await.unwrap(),
        Duration::ZERO
    );
    assert_eq!(
        job.properties().await.unwrap().lease().state(),
        LeaseState::Broken
    );
    assert!(held.renew().await.unwrap_err().is_lease_lost());
    held.clone().release().await.unwrap(); // its id may still release it
    job.upload("free").await.unwrap();

    // Deleting under a lease.
    let lease = job.acquire_lease(LeaseDuration::Infinite).await.unwrap();
    job.delete_with_lease(&lease, IfMatch::Any).await.unwrap();
    assert!(!job.exists().await.unwrap());
    let missing = c.blob("never").unwrap();
    let err = missing.acquire_lease(fifteen).await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::BlobNotFound), "{err}");

    // Checked before any I/O.
    for bad in [0, 14, 61] {
        let d = LeaseDuration::Fixed(Duration::from_secs(bad));
        assert!(missing
            .acquire_lease(d)
            .await
            .unwrap_err()
            .is_invalid_input());
    }
    let err = missing
        .acquire_lease_with_id(fifteen, Some("not-a-guid"))
        .await
        .unwrap_err();
    assert!(err.is_invalid_input());
    assert!(missing
        .break_lease(Some(Duration::from_secs(61)))
        .await
        .unwrap_err()
        .is_invalid_input());
    c.delete_container().await.unwrap();
}

async fn a_lease_ends_on_the_clock_and_breaks_after_its_period(env: TestEnv) {
    let c = fresh_container(env.blobs()).await;
    let job = c.blob("job").unwrap();
    job.upload("v1").await.unwrap();
    let lease = job
        .acquire_lease(LeaseDuration::Fixed(Duration::from_secs(30)))
        .await
        .unwrap();

    // A break with a period: still held meanwhile, and no longer renewable.
    let left = job
        .break_lease(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(
        left > Duration::ZERO && left <= Duration::from_secs(10),
        "{left:?}"
    );
    let p = job.properties().await.unwrap();
    assert_eq!(p.lease().state(), LeaseState::Breaking);
    assert!(p.lease().is_locked());
    assert!(job.upload("x").await.unwrap_err().is_lease_held());
    job.upload("v2").lease(&lease).await.unwrap();
    let err = lease.renew().await.unwrap_err();
    assert_eq!(
        err.code(),
        Some(&ErrorCode::LeaseIsBrokenAndCannotBeRenewed)
    );
    assert!(err.is_lease_lost());
    let other = uuid::Uuid::new_v4().to_string();
    let err = job
        .acquire_lease_with_id(LeaseDuration::Infinite, Some(&other))
        .await
        .unwrap_err();
    assert!(err.is_lease_held(), "{err}");

    // The rest needs time to pass: on the embedded store's clock only.
    let Some(clock) = env.clock() else {
        job.break_lease(Some(Duration::ZERO)).await.unwrap();
        c.delete_container().await.unwrap();
        return;
    };
    clock.advance(left);
    assert_eq!(
        job.properties().await.unwrap().lease().state(),
        LeaseState::Broken
    );
    job.upload("v3").await.unwrap();

    // A fixed lease runs out unless renewed.
    let lease = job
        .acquire_lease(LeaseDuration::Fixed(Duration::from_secs(15)))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(14));
    assert!(job.upload("x").await.unwrap_err().is_lease_held());
    lease.renew().await.unwrap();
    clock.advance(Duration::from_secs(14));
    assert!(
        job.upload("x").await.unwrap_err().is_lease_held(),
        "renewed for 15 s more"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        job.properties().await.unwrap().lease().state(),
        LeaseState::Expired
    );
    let err = job.upload("v5").lease(&lease).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    // Nobody took it or wrote meanwhile: its holder may renew it.
    lease.renew().await.unwrap();
    assert!(job.upload("x").await.unwrap_err().is_lease_held());
    clock.advance(Duration::from_secs(15));
    // A write after it ran out ends it for good.
    job.upload("v4").await.unwrap();
    assert_eq!(
        job.properties().await.unwrap().lease().state(),
        LeaseState::Available
    );
    assert!(lease.renew().await.unwrap_err().is_lease_lost());
    let lease = job
        .acquire_lease(LeaseDuration::Fixed(Duration::from_secs(15)))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(15));
    // Somebody else took it: the first holder has lost it.
    let second = job
        .acquire_lease_with_id(LeaseDuration::Infinite, Some(&other))
        .await
        .unwrap();
    assert!(lease.renew().await.unwrap_err().is_lease_lost());
    assert!(job
        .upload("x")
        .lease(&lease)
        .await
        .unwrap_err()
        .is_lease_lost());

    // A fixed lease broken without a period breaks when it would have ended.
    second.release().await.unwrap();
    job.acquire_lease(LeaseDuration::Fixed(Duration::from_secs(20)))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        job.break_lease(None).await.unwrap(),
        Duration::from_secs(15)
    );
    clock.advance(Duration::from_secs(14));
    assert_eq!(
        job.properties().await.unwrap().lease().state(),
        LeaseState::Breaking
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        job.properties().await.unwrap().lease().state(),
        LeaseState::Broken
    );
    c.delete_container().await.unwrap();
}

async fn a_container_lease_guards_its_deletion(env: TestEnv) {
    let blobs = env.blobs().clone();
    let c = fresh_container(&blobs).await;
    c.blob("a").unwrap().upload("a").await.unwrap();
    let lease = c.acquire_lease(LeaseDuration::Infinite).await.unwrap();
    let p = c.properties().await.unwrap();
    assert!(p.lease().is_locked());
    assert_eq!(p.lease().is_infinite(), Some(true));
    let listed = blobs
        .list_containers()
        .prefix(c.name())
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(listed[0].lease().state(), LeaseState::Leased);

    let err = c.delete_container().await.unwrap_err();
    assert!(err.is_lease_held(), "{err}");
    let wrong = uuid::Uuid::new_v4().to_string();
    let err = c
        .delete_container_with_lease(wrong.as_str())
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    // Metadata needs no lease, but a wrong one is refused.
    c.set_metadata([("a", "1")]).await.unwrap();
    c.set_metadata([("a", "2")]).lease(&lease).await.unwrap();
    let err = c
        .set_metadata([("a", "3")])
        .lease(wrong.as_str())
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    // The container's lease is not its blobs'.
    c.blob("a").unwrap().upload("b").await.unwrap();

    lease.renew().await.unwrap();
    assert_eq!(
        c.break_lease(Some(Duration::ZERO)).await.unwrap(),
        Duration::ZERO
    );
    assert_eq!(
        c.properties().await.unwrap().lease().state(),
        LeaseState::Broken
    );
    let second = c
        .acquire_lease(LeaseDuration::Fixed(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(c.delete_container().await.unwrap_err().is_lease_held());
    c.delete_container_with_lease(&second).await.unwrap();
    assert!(!c.delete_container_if_exists().await.unwrap());
}

/// The blob endpoint a copy source URL starts with: the HTTP backend's, or
/// any on the embedded store, which reads only the URL's path.
fn blob_endpoint(env: &TestEnv) -> String {
    match env.backend() {
        Backend::Azurite | Backend::Served => {
            let conn = env.connection_string().expect("an HTTP backend's");
            let account = tablekit::Account::from_connection_string(&conn).unwrap();
            account
                .blob_endpoint()
                .unwrap()
                .trim_end_matches('/')
                .to_owned()
        }
        Backend::Memory => "http://127.0.0.1:10000/devstoreaccount1".into(),
        Backend::File => "https://example.invalid".into(),
    }
}

async fn a_copy_within_the_account_carries_bytes_headers_and_metadata(env: TestEnv) {
    let blobs = env.blobs().clone();
    let endpoint = blob_endpoint(&env);
    let c = fresh_container(&blobs).await;
    let body: Vec<u8> = (0..20_000).map(|i| (i * 7 % 256) as u8).collect();
    let original = c
        .blob("photos/000456 original.jpg")
        .unwrap()
        .with_blocks(8192, 2)
        .unwrap();
    original
        .upload(body.clone())
        .content_type("image/jpeg")
        .http_headers(BlobHttpHeaders::new().cache_control("max-age=60"))
        .metadata("employee", "456")
        .await
        .unwrap();

    let backup = c.blob("backup/000456.jpg").unwrap();
    let started = backup.start_copy_from(&original).await.unwrap();
    assert!(!started.id().is_empty());
    let done = match started.status() {
        CopyStatus::Pending => backup
            .wait_for_copy(Duration::from_millis(200))
            .await
            .unwrap(),
        _ => backup.wait_for_copy(Duration::ZERO).await.unwrap(),
    };
    assert_eq!(done.status(), CopyStatus::Success);
    assert_eq!(done.id(), started.id());
    let p = backup.properties().await.unwrap();
    assert_eq!(p.size(), body.len() as u64);
    assert_eq!(p.content_type(), Some("image/jpeg"));
    assert_eq!(p.http_headers().get_cache_control(), Some("max-age=60"));
    assert_eq!(p.metadata(), md(&[("employee", "456")]));
    let copy = p.copy().unwrap();
    assert_eq!(copy.id(), started.id());
    assert_eq!(
        copy.progress(),
        Some((body.len() as u64, body.len() as u64))
    );
    assert!(copy.source().is_some());
    assert_eq!(&backup.download().bytes().await.unwrap()[..], &body[..]);
    let listed = c.list_blobs().prefix("backup/").fetch_all().await.unwrap();
    assert_eq!(
        listed[0].copy().map(|c| c.status()),
        Some(CopyStatus::Success)
    );

    // New metadata instead of the source's; the source stays as it was.
    let renamed = c.blob("renamed.jpg").unwrap();
    renamed
        .start_copy_from(&original)
        .metadata("copied", "yes")
        .await
        .unwrap();
    assert_eq!(
        renamed.properties().await.unwrap().metadata(),
        md(&[("copied", "yes")])
    );
    assert_eq!(
        original.properties().await.unwrap().metadata(),
        md(&[("employee", "456")])
    );
    assert!(original.properties().await.unwrap().copy().is_none());

    // From a URL of the same account.
    let url = format!("{endpoint}/{}/photos/000456%20original.jpg", c.name());
    let by_url = c.blob("by-url.jpg").unwrap();
    let started = by_url.start_copy_from_url(url).await.unwrap();
    if started.status() == CopyStatus::Pending {
        by_url
            .wait_for_copy(Duration::from_millis(200))
            .await
            .unwrap();
    }
    assert_eq!(&by_url.download().bytes().await.unwrap()[..], &body[..]);

    // A destination under lease, a stale ETag, a missing source.
    let lease = backup.acquire_lease(LeaseDuration::Infinite).await.unwrap();
    let err = backup.start_copy_from(&renamed).await.unwrap_err();
    assert!(err.is_lease_held(), "{err}");
    backup
        .start_copy_from(&renamed)
        .lease(&lease)
        .await
        .unwrap();
    assert_eq!(
        backup.properties().await.unwrap().lease().state(),
        LeaseState::Leased,
        "a copy keeps the destination's lease"
    );
    let stale = backup
        .start_copy_from(&original)
        .lease(&lease)
        .if_match(p.etag())
        .await
        .unwrap_err();
    assert!(stale.is_precondition_failed(), "{stale}");
    let err = c
        .blob("x")
        .unwrap()
        .start_copy_from(&c.blob("missing").unwrap())
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(!c.blob("x").unwrap().exists().await.unwrap());
    // Polling a blob that was never a copy's destination is an error.
    assert!(original.wait_for_copy(Duration::ZERO).await.is_err());
    backup.break_lease(Some(Duration::ZERO)).await.unwrap();
    c.delete_container().await.unwrap();
}

/// The store file keeps what the management calls set: container metadata
/// and leases, blob metadata, headers, leases and copies; a lease's end is
/// absolute, so it ends on the clock after a reopen too.
#[tokio::test]
async fn a_store_file_keeps_metadata_headers_leases_and_copies() {
    let file = common::TempStore::new();
    let clock = ManualClock::starting_now();
    let headers = BlobHttpHeaders::new()
        .content_type("text/plain")
        .content_language("fr")
        .content_md5(vec![7u8; 16]);
    let (lease_id, copy_id) = {
        let blobs = BlobServiceClient::embedded_at_with_clock(file.path(), clock.clone()).unwrap();
        let c = blobs.container("kept").unwrap();
        c.create_container().await.unwrap();
        c.set_metadata([("owner", "hr")]).await.unwrap();
        c.acquire_lease(LeaseDuration::Infinite).await.unwrap();
        let a = c.blob("a.txt").unwrap();
        a.upload("bonjour").await.unwrap();
        a.set_http_headers(headers.clone()).await.unwrap();
        a.set_metadata([("lang", "fr")]).await.unwrap();
        let copy = c.blob("b.txt").unwrap().start_copy_from(&a).await.unwrap();
        let lease = a
            .acquire_lease(LeaseDuration::Fixed(Duration::from_secs(20)))
            .await
            .unwrap();
        (lease.id().clone(), copy.id().to_owned())
    };
    let blobs = BlobServiceClient::embedded_at_with_clock(file.path(), clock.clone()).unwrap();
    let c = blobs.container("kept").unwrap();
    let cp = c.properties().await.unwrap();
    assert_eq!(cp.metadata(), md(&[("owner", "hr")]));
    assert!(cp.lease().is_locked());
    assert!(c.delete_container().await.unwrap_err().is_lease_held());
    let a = c.blob("a.txt").unwrap();
    let p = a.properties().await.unwrap();
    assert_eq!(p.http_headers(), &headers);
    assert_eq!(p.metadata(), md(&[("lang", "fr")]));
    assert_eq!(p.lease().state(), LeaseState::Leased);
    assert!(a.upload("x").await.unwrap_err().is_lease_held());
    a.upload("salut").lease(&lease_id).await.unwrap();
    let b = c.blob("b.txt").unwrap().properties().await.unwrap();
    assert_eq!(
        b.copy().map(|c| (c.id(), c.status())),
        Some((copy_id.as_str(), CopyStatus::Success))
    );
    assert_eq!(b.metadata(), md(&[("lang", "fr")]));
    clock.advance(Duration::from_secs(20));
    assert_eq!(
        a.properties().await.unwrap().lease().state(),
        LeaseState::Expired
    );
    a.upload("libre").await.unwrap();
}

/// What the scripted copy server saw.
#[derive(Default)]
struct CopyTraffic {
    /// The `x-ms-copy-source` and `x-ms-lease-id` of each Copy Blob.
    copies: Vec<(String, Option<String>)>,
    heads: usize,
}

/// A loopback Blob endpoint that answers Copy Blob with `pending`, then the
/// destination's properties with `pending` for `pending_heads` reads, then
/// with `last` (and its description): the polling of a long copy, which
/// Azurite and the embedded store never show (they copy at once).
async fn copy_server(
    pending_heads: usize,
    last: &'static str,
) -> (String, std::sync::Arc<std::sync::Mutex<CopyTraffic>>) {
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let traffic: Arc<Mutex<CopyTraffic>> = Arc::default();
    let shared = traffic.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let traffic = shared.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = vec![0u8; 16 * 1024];
                loop {
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
                    let header = |name: &str| {
                        head.lines().find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                        })
                    };
                    let len: usize = header("content-length")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    while buf.len() < end + 4 + len {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..end + 4 + len);
                    let common =
                        "ETag: \"0x8D2\"\r\nLast-Modified: Thu, 31 Jul 2014 18:00:00 GMT\r\n\
                                  x-ms-request-id: scripted\r\nx-ms-copy-id: copy-1\r\n";
                    let reply = if head.starts_with("PUT ") {
                        traffic.lock().unwrap().copies.push((
                            header("x-ms-copy-source").unwrap_or_default(),
                            header("x-ms-lease-id"),
                        ));
                        format!("HTTP/1.1 202 Accepted\r\n{common}x-ms-copy-status: pending\r\nContent-Length: 0\r\n\r\n")
                    } else {
                        let heads = {
                            let mut t = traffic.lock().unwrap();
                            t.heads += 1;
                            t.heads
                        };
                        let status = if heads <= pending_heads {
                            "x-ms-copy-status: pending\r\nx-ms-copy-progress: 40/100\r\n".to_owned()
                        } else {
                            format!(
                                "x-ms-copy-status: {last}\r\nx-ms-copy-progress: 100/100\r\n\
                                 x-ms-copy-completion-time: Thu, 31 Jul 2014 18:01:00 GMT\r\n\
                                 x-ms-copy-status-description: scripted {last}\r\n"
                            )
                        };
                        format!(
                            "HTTP/1.1 200 OK\r\n{common}{status}x-ms-copy-source: http://elsewhere/a\r\n\
                             Content-Type: image/jpeg\r\nContent-Length: 100\r\n\r\n"
                        )
                    };
                    if sock.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}/devstoreaccount1"), traffic)
}

fn scripted_blobs(endpoint: &str) -> BlobServiceClient {
    let conn = format!(
        "AccountName=devstoreaccount1;AccountKey={};BlobEndpoint={endpoint}",
        common::EMULATOR_KEY
    );
    common::blobs(&conn).unwrap()
}

#[tokio::test]
async fn a_pending_copy_is_polled_until_it_ends() {
    let (endpoint, traffic) = copy_server(3, "success").await;
    let c = scripted_blobs(&endpoint).container("photos").unwrap();
    let source = c.blob("a b/000456.jpg").unwrap();
    let dest = c.blob("backup.jpg").unwrap();
    let lease = "6f3c1d8e-9a0b-4c2d-8e1f-0a1b2c3d4e5f";
    let started = dest.start_copy_from(&source).lease(lease).await.unwrap();
    assert_eq!(
        (started.id(), started.status()),
        ("copy-1", CopyStatus::Pending)
    );
    let pending = dest.properties().await.unwrap();
    assert_eq!(pending.copy().unwrap().progress(), Some((40, 100)));

    let done = dest.wait_for_copy(Duration::ZERO).await.unwrap();
    assert_eq!(done.status(), CopyStatus::Success);
    assert_eq!(done.progress(), Some((100, 100)));
    assert_eq!(done.source(), Some("http://elsewhere/a"));
    assert_eq!(
        done.completed_on().map(|t| t.to_rfc3339()).as_deref(),
        Some("2014-07-31T18:01:00+00:00")
    );
    let t = traffic.lock().unwrap();
    assert_eq!(t.heads, 4, "one read, then pending twice more and done");
    assert_eq!(
        t.copies,
        [(
            format!("{endpoint}/photos/a%20b/000456.jpg"),
            Some(lease.to_owned())
        )],
        "the source's URL on the account's endpoint, and the destination's lease"
    );
}

#[tokio::test]
async fn a_failed_copy_ends_the_polling_with_its_reason() {
    let (endpoint, _) = copy_server(1, "failed").await;
    let dest = scripted_blobs(&endpoint)
        .container("photos")
        .unwrap()
        .blob("backup.jpg")
        .unwrap();
    dest.start_copy_from_url("http://elsewhere/a")
        .await
        .unwrap();
    let ended = dest.wait_for_copy(Duration::ZERO).await.unwrap();
    assert_eq!(ended.status(), CopyStatus::Failed);
    assert_eq!(ended.status_description(), Some("scripted failed"));
}
