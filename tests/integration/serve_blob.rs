//! The Blob service of `tablekit::server`: tablekit's blob clients over HTTP
//! against an in-process server on memory, and raw requests for what
//! tablekit does not send (ranges, conditional headers, MD5s, the service's
//! error answers and codes, sizes). Raw requests carry an account SAS with
//! every permission, so that they pass whatever authentication checks.

use std::time::Duration;

use tablekit::blob::{BlobEntry, BlobHttpHeaders, LeaseDuration};
use tablekit::server::{Server, MAX_BODY};
use tablekit::{BlobServiceClient, IfMatch};

async fn serve() -> (Server, BlobServiceClient) {
    let server = Server::builder().ports(0, 0, 0).start().await.unwrap();
    let blobs = BlobServiceClient::from_connection_string(&server.connection_string()).unwrap();
    (server, blobs)
}

/// Raw requests to a server's Blob service.
struct Raw {
    http: reqwest::Client,
    base: String,
    sas: String,
}

impl Raw {
    fn new(server: &Server) -> Raw {
        Raw {
            http: reqwest::Client::new(),
            base: format!("http://{}/devstoreaccount1", server.blob_address()),
            sas: crate::common::full_access_sas(server),
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        query: &str,
        headers: &[(&str, &str)],
        body: impl Into<Vec<u8>>,
    ) -> Answer {
        let sep = if query.is_empty() { "" } else { "&" };
        let url = format!("{}/{path}?{query}{sep}{}", self.base, self.sas);
        self.request(method, url, headers, None, body).await
    }

    /// The same request signed with the account key (Shared Key Lite), for
    /// what only the key may do (stored access policies).
    async fn send_keyed(
        &self,
        method: &str,
        path: &str,
        query: &str,
        headers: &[(&str, &str)],
        body: impl Into<Vec<u8>>,
    ) -> Answer {
        use base64::Engine as _;
        use hmac::Mac as _;
        let date = chrono::Utc::now()
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let mut ms: Vec<(String, String)> = vec![
            ("x-ms-date".into(), date.clone()),
            ("x-ms-version".into(), "2021-08-06".into()),
        ];
        let mut content_type = "";
        for (k, v) in headers {
            let k = k.to_ascii_lowercase();
            if k.starts_with("x-ms-") {
                ms.push((k, v.trim().to_owned()));
            } else if k == "content-type" {
                content_type = v;
            }
        }
        ms.sort();
        let canonical: String = ms.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let mut resource = format!("/devstoreaccount1/devstoreaccount1/{path}");
        if let Some(comp) = query.split('&').find_map(|p| p.strip_prefix("comp=")) {
            resource.push_str(&format!("?comp={comp}"));
        }
        let to_sign = format!("{method}\n\n{content_type}\n\n{canonical}{resource}");
        let key = base64::engine::general_purpose::STANDARD
            .decode(tablekit::server::DEV_KEY)
            .unwrap();
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
        mac.update(to_sign.as_bytes());
        let signature =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        let url = format!("{}/{path}?{query}", self.base);
        let auth = format!("SharedKeyLite devstoreaccount1:{signature}");
        self.request(method, url, headers, Some((date, auth)), body)
            .await
    }

    async fn request(
        &self,
        method: &str,
        url: String,
        headers: &[(&str, &str)],
        keyed: Option<(String, String)>,
        body: impl Into<Vec<u8>>,
    ) -> Answer {
        let mut req = self
            .http
            .request(method.parse().unwrap(), url)
            .header("x-ms-version", "2021-08-06");
        if let Some((date, auth)) = keyed {
            req = req.header("x-ms-date", date).header("authorization", auth);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.body(body.into()).send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.bytes().await.unwrap().to_vec();
        Answer {
            status,
            headers,
            body,
        }
    }
}

#[derive(Debug)]
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or_else(|| panic!("no `{name}` in {self:?}"))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// An error answer: its status, and its code both in `x-ms-error-code`
    /// and in the XML body (none for a HEAD).
    #[track_caller]
    fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{} {}", self.text(), status);
        assert_eq!(self.header("x-ms-error-code"), code, "{}", self.text());
        if !self.body.is_empty() {
            assert!(
                self.text().contains(&format!("<Code>{code}</Code>")),
                "{}",
                self.text()
            );
            assert!(self.text().contains("RequestId:"), "{}", self.text());
        }
    }
}

/// A Put Blob of `len` zero bytes written to the socket a MiB at a time;
/// the answer's head and body as text (however much the server read before
/// answering).
async fn put_streamed(server: &Server, raw: &Raw, path: &str, len: usize) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut socket = tokio::net::TcpStream::connect(server.blob_address())
        .await
        .unwrap();
    let head = format!(
        "PUT /devstoreaccount1/{path}?{} HTTP/1.1\r\nHost: {}\r\nx-ms-version: 2021-08-06\r\n\
         x-ms-blob-type: BlockBlob\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n",
        raw.sas,
        server.blob_address()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len());
        // The server may answer and close before the last byte.
        if socket.write_all(&chunk[..n]).await.is_err() {
            break;
        }
        left -= n;
    }
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

fn md5_of(data: &[u8]) -> String {
    // Known values (RFC 1321's test suite): the server computes the rest.
    match data {
        b"abc" => "kAFQmDzST7DWlj99KOF/cg==".to_owned(),
        b"" => "1B2M2Y8AsgTpgAmY7PhCfg==".to_owned(),
        _ => panic!("no known MD5 for {data:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_containers_list_carry_metadata_and_are_deleted() {
    let (server, blobs) = serve().await;
    for name in ["photos", "phones", "videos"] {
        blobs
            .container(name)
            .unwrap()
            .create_container()
            .await
            .unwrap();
    }
    let photos = blobs.container("photos").unwrap();
    assert!(photos.create_container().await.unwrap_err().is_conflict());
    assert!(!photos.create_container_if_not_exists().await.unwrap());
    let before = photos.properties().await.unwrap();
    photos.set_metadata([("Owner", "hr")]).send().await.unwrap();
    let after = photos.properties().await.unwrap();
    assert_ne!(after.etag(), before.etag());
    assert_eq!(after.metadata(), [("owner".to_owned(), "hr".to_owned())]);

    let listed = blobs
        .list_containers()
        .prefix("ph")
        .include_metadata()
        .page_size(1)
        .fetch_all()
        .await
        .unwrap();
    let names: Vec<&str> = listed.iter().map(|c| c.name()).collect();
    assert_eq!(names, ["phones", "photos"], "in name order, across pages");
    assert_eq!(listed[1].metadata(), after.metadata());
    assert_eq!(listed[1].etag(), after.etag());

    blobs
        .container("videos")
        .unwrap()
        .delete_container()
        .await
        .unwrap();
    let err = blobs
        .container("videos")
        .unwrap()
        .properties()
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(404));
    assert!(err.to_string().contains("ContainerNotFound"), "{err}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_blobs_round_trip_with_headers_metadata_ranges_and_blocks() {
    let (server, blobs) = serve().await;
    let c = blobs.container("logs").unwrap();
    c.create_container().await.unwrap();
    let a = c.blob("2014/07/a.log").unwrap();
    let written = a
        .upload("hello world!")
        .content_type("text/plain")
        .metadata("Source", "queue")
        .await
        .unwrap();
    let p = a.properties().await.unwrap();
    assert_eq!(p.etag(), written.etag());
    assert_eq!(p.last_modified(), written.last_modified());
    assert_eq!(p.size(), 12);
    assert_eq!(p.content_type(), Some("text/plain"));
    assert_eq!(p.metadata(), [("source".to_owned(), "queue".to_owned())]);
    assert_eq!(
        p.http_headers().get_content_md5().map(<[u8]>::len),
        Some(16),
        "a blob put whole keeps its MD5"
    );
    assert_eq!(&a.download().bytes().await.unwrap()[..], b"hello world!");
    assert_eq!(
        &a.download().range(6..11).bytes().await.unwrap()[..],
        b"world"
    );
    assert_eq!(
        &a.download().range(6..).bytes().await.unwrap()[..],
        b"world!"
    );

    // In blocks: 5 bytes a block, 3 blocks, one block list.
    let big = blobs
        .container("logs")
        .unwrap()
        .blob("2014/08/b.log")
        .unwrap()
        .with_blocks(5, 2)
        .unwrap();
    big.upload(&b"0123456789abcd"[..]).await.unwrap();
    assert_eq!(
        &big.download().bytes().await.unwrap()[..],
        b"0123456789abcd"
    );

    c.blob("top.txt").unwrap().upload("t").await.unwrap();
    let entries = c.list_blobs().delimiter("/").fetch_all().await.unwrap();
    let names: Vec<String> = entries
        .iter()
        .map(|e| match e {
            BlobEntry::Prefix(p) => p.clone(),
            BlobEntry::Blob(b) => b.name().to_owned(),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(names, ["2014/", "top.txt"]);
    let all = c
        .list_blobs()
        .prefix("2014/")
        .page_size(1)
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].metadata(), p.metadata(), "listings carry metadata");
    assert_eq!(all[0].etag(), p.etag());

    // Metadata and HTTP headers after the upload.
    a.set_metadata([("k", "v")]).send().await.unwrap();
    a.set_http_headers(
        BlobHttpHeaders::new()
            .content_type("text/csv")
            .cache_control("no-cache"),
    )
    .send()
    .await
    .unwrap();
    let p2 = a.properties().await.unwrap();
    assert_eq!(p2.metadata(), [("k".to_owned(), "v".to_owned())]);
    assert_eq!(p2.content_type(), Some("text/csv"));
    assert_eq!(p2.http_headers().get_cache_control(), Some("no-cache"));

    // A copy within the account.
    let copy = c.blob("copy.log").unwrap();
    let info = copy.start_copy_from(&a).send().await.unwrap();
    assert_eq!(info.status(), tablekit::blob::CopyStatus::Success);
    assert_eq!(&copy.download().bytes().await.unwrap()[..], b"hello world!");
    assert_eq!(
        copy.properties().await.unwrap().copy().map(|c| c.id()),
        Some(info.id())
    );

    a.delete(IfMatch::Any).await.unwrap();
    assert!(!a.exists().await.unwrap());
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_leases_guard_writes_and_are_released() {
    let (server, blobs) = serve().await;
    let c = blobs.container("jobs").unwrap();
    c.create_container().await.unwrap();
    let job = c.blob("nightly.json").unwrap();
    job.upload("{}").await.unwrap();
    let lease = job
        .acquire_lease(LeaseDuration::Fixed(Duration::from_secs(15)))
        .await
        .unwrap();
    assert!(job.properties().await.unwrap().lease().is_locked());
    assert!(job.upload("x").await.unwrap_err().is_lease_held());
    job.upload("{\"by\":\"a\"}").lease(&lease).await.unwrap();
    lease.renew().await.unwrap();
    lease.release().await.unwrap();
    job.upload("free").await.unwrap();

    let held = c.acquire_lease(LeaseDuration::Infinite).await.unwrap();
    assert!(c.delete_container().await.is_err());
    assert!(c.properties().await.unwrap().lease().is_locked());
    c.delete_container_with_lease(&held).await.unwrap();
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_answers_carry_the_services_headers() {
    let (server, _) = serve().await;
    let raw = Raw::new(&server);
    let made = raw
        .send(
            "PUT",
            "photos",
            "restype=container",
            &[("x-ms-meta-team", "hr")],
            "",
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.text());
    assert!(made.header("etag").starts_with('"'), "ETags are quoted");
    made.header("last-modified");
    made.header("x-ms-request-id");
    assert_eq!(made.header("x-ms-version"), "2021-08-06");

    let put = raw
        .send(
            "PUT",
            "photos/a.txt",
            "",
            &[
                ("x-ms-blob-type", "BlockBlob"),
                ("content-type", "text/plain"),
                ("x-ms-blob-cache-control", "no-cache"),
                ("x-ms-meta-Employee", "456"),
            ],
            "abc",
        )
        .await;
    assert_eq!(put.status, 201, "{}", put.text());
    assert_eq!(put.header("content-md5"), md5_of(b"abc"));
    assert_eq!(put.header("x-ms-request-server-encrypted"), "true");
    let etag = put.header("etag").to_owned();

    let head = raw.send("HEAD", "photos/a.txt", "", &[], "").await;
    assert_eq!(head.status, 200);
    for (name, value) in [
        ("content-length", "3"),
        ("content-type", "text/plain"),
        ("cache-control", "no-cache"),
        ("content-md5", md5_of(b"abc").as_str()),
        ("x-ms-blob-type", "BlockBlob"),
        ("x-ms-lease-state", "available"),
        ("x-ms-lease-status", "unlocked"),
        ("accept-ranges", "bytes"),
        ("x-ms-server-encrypted", "true"),
        ("x-ms-meta-employee", "456"),
        ("etag", etag.as_str()),
    ] {
        assert_eq!(head.header(name), value, "{name}");
    }
    assert_eq!(
        head.header("x-ms-creation-time"),
        head.header("last-modified"),
        "a new blob was created when it was last written"
    );

    let c = raw
        .send("GET", "photos", "restype=container", &[], "")
        .await;
    assert_eq!(c.status, 200);
    assert_eq!(c.header("x-ms-meta-team"), "hr");
    assert_eq!(c.header("x-ms-lease-state"), "available");

    // Listings: the XML the service writes.
    let list = raw
        .send(
            "GET",
            "photos",
            "restype=container&comp=list&include=metadata",
            &[],
            "",
        )
        .await;
    assert_eq!(list.status, 200);
    assert_eq!(list.header("content-type"), "application/xml");
    let xml = list.text();
    assert!(xml.contains("ContainerName=\"photos\""), "{xml}");
    assert!(xml.contains("<Name>a.txt</Name>"), "{xml}");
    assert!(xml.contains("<BlobType>BlockBlob</BlobType>"), "{xml}");
    assert!(
        xml.contains("<Metadata><employee>456</employee></Metadata>"),
        "{xml}"
    );
    let bad = raw
        .send(
            "GET",
            "photos",
            "restype=container&comp=list&maxresults=0",
            &[],
            "",
        )
        .await;
    bad.assert_error(400, "InvalidQueryParameterValue");
    let bad = raw
        .send(
            "GET",
            "photos",
            "restype=container&comp=list&include=everything",
            &[],
            "",
        )
        .await;
    bad.assert_error(400, "InvalidQueryParameterValue");
    let containers = raw
        .send("GET", "", "comp=list&include=metadata", &[], "")
        .await;
    assert_eq!(containers.status, 200);
    assert!(
        containers.text().contains("<Name>photos</Name>"),
        "{}",
        containers.text()
    );
    assert!(
        containers.text().contains("<team>hr</team>"),
        "{}",
        containers.text()
    );

    let deleted = raw.send("DELETE", "photos/a.txt", "", &[], "").await;
    assert_eq!(deleted.status, 202);
    let gone = raw.send("HEAD", "photos/a.txt", "", &[], "").await;
    gone.assert_error(404, "BlobNotFound");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_ranges_answer_206_with_content_range_or_416() {
    let (server, _) = serve().await;
    let raw = Raw::new(&server);
    raw.send("PUT", "rng", "restype=container", &[], "").await;
    let put = raw
        .send(
            "PUT",
            "rng/digits",
            "",
            &[("x-ms-blob-type", "BlockBlob")],
            "0123456789",
        )
        .await;
    assert_eq!(put.status, 201);

    let part = raw
        .send("GET", "rng/digits", "", &[("range", "bytes=2-4")], "")
        .await;
    assert_eq!(part.status, 206);
    assert_eq!(part.body, b"234");
    assert_eq!(part.header("content-range"), "bytes 2-4/10");
    assert_eq!(part.header("content-length"), "3");
    // x-ms-range wins over Range; a range past the end is cut at the end.
    let part = raw
        .send(
            "GET",
            "rng/digits",
            "",
            &[("range", "bytes=0-0"), ("x-ms-range", "bytes=7-100")],
            "",
        )
        .await;
    assert_eq!(part.status, 206);
    assert_eq!(part.body, b"789");
    assert_eq!(part.header("content-range"), "bytes 7-9/10");
    let open = raw
        .send("GET", "rng/digits", "", &[("x-ms-range", "bytes=8-")], "")
        .await;
    assert_eq!((open.status, &open.body[..]), (206, &b"89"[..]));
    // The MD5 of a range, on request.
    let abc = raw
        .send(
            "PUT",
            "rng/abc",
            "",
            &[("x-ms-blob-type", "BlockBlob")],
            "xabcx",
        )
        .await;
    assert_eq!(abc.status, 201);
    let md5 = raw
        .send(
            "GET",
            "rng/abc",
            "",
            &[
                ("x-ms-range", "bytes=1-3"),
                ("x-ms-range-get-content-md5", "true"),
            ],
            "",
        )
        .await;
    assert_eq!(md5.body, b"abc");
    assert_eq!(md5.header("content-md5"), md5_of(b"abc"));
    let unbounded = raw
        .send(
            "GET",
            "rng/abc",
            "",
            &[
                ("x-ms-range", "bytes=1-"),
                ("x-ms-range-get-content-md5", "true"),
            ],
            "",
        )
        .await;
    unbounded.assert_error(400, "OutOfRangeInput");

    let past = raw
        .send("GET", "rng/digits", "", &[("x-ms-range", "bytes=10-")], "")
        .await;
    past.assert_error(416, "InvalidRange");
    let malformed = raw
        .send("GET", "rng/digits", "", &[("x-ms-range", "bytes=5-2")], "")
        .await;
    malformed.assert_error(416, "InvalidRange");
    // A malformed Range is ignored, as HTTP says: the whole blob.
    let whole = raw
        .send("GET", "rng/digits", "", &[("range", "lines=1-2")], "")
        .await;
    assert_eq!((whole.status, &whole.body[..]), (200, &b"0123456789"[..]));
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_conditional_headers_are_checked_as_the_service_does() {
    let (server, _) = serve().await;
    let raw = Raw::new(&server);
    raw.send("PUT", "cat", "restype=container", &[], "").await;
    let put = raw
        .send("PUT", "cat/b", "", &[("x-ms-blob-type", "BlockBlob")], "v1")
        .await;
    let etag = put.header("etag").to_owned();
    let modified = put.header("last-modified").to_owned();
    let bt = ("x-ms-blob-type", "BlockBlob");

    // Reads: If-None-Match / If-Modified-Since say "not modified" (304, no
    // body); If-Match / If-Unmodified-Since fail with 412.
    let r = raw
        .send("GET", "cat/b", "", &[("if-none-match", &etag)], "")
        .await;
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    let r = raw
        .send("GET", "cat/b", "", &[("if-modified-since", &modified)], "")
        .await;
    assert_eq!(r.status, 304);
    let r = raw
        .send(
            "GET",
            "cat/b",
            "",
            &[("if-modified-since", "Thu, 01 Jan 2015 00:00:00 GMT")],
            "",
        )
        .await;
    assert_eq!((r.status, &r.body[..]), (200, &b"v1"[..]));
    let r = raw
        .send("GET", "cat/b", "", &[("if-match", "\"0x1\"")], "")
        .await;
    r.assert_error(412, "ConditionNotMet");
    let r = raw
        .send(
            "HEAD",
            "cat/b",
            "",
            &[("if-unmodified-since", "Thu, 01 Jan 2015 00:00:00 GMT")],
            "",
        )
        .await;
    r.assert_error(412, "ConditionNotMet");
    let r = raw
        .send("GET", "cat/b", "", &[("if-match", &etag)], "")
        .await;
    assert_eq!(r.status, 200);
    // Unquoted, as some clients send it.
    let r = raw
        .send(
            "GET",
            "cat/b",
            "",
            &[("if-match", etag.trim_matches('"'))],
            "",
        )
        .await;
    assert_eq!(r.status, 200);

    // `*` names any version: a read of one cannot be "none of them".
    let r = raw
        .send("GET", "cat/b", "", &[("if-none-match", "*")], "")
        .await;
    r.assert_error(400, "UnsatisfiableCondition");

    // Writes.
    let w = raw
        .send("PUT", "cat/b", "", &[bt, ("if-none-match", "*")], "v2")
        .await;
    w.assert_error(409, "BlobAlreadyExists");
    let w = raw
        .send("PUT", "cat/b", "", &[bt, ("if-match", "\"0x1\"")], "v2")
        .await;
    w.assert_error(412, "ConditionNotMet");
    let w = raw
        .send("PUT", "cat/new", "", &[bt, ("if-match", "*")], "v2")
        .await;
    w.assert_error(412, "ConditionNotMet");
    let w = raw
        .send("PUT", "cat/b", "", &[bt, ("if-none-match", &etag)], "v2")
        .await;
    w.assert_error(412, "ConditionNotMet");
    let w = raw
        .send(
            "PUT",
            "cat/b",
            "",
            &[bt, ("if-modified-since", &modified)],
            "v2",
        )
        .await;
    w.assert_error(412, "ConditionNotMet");
    let w = raw
        .send(
            "DELETE",
            "cat/b",
            "",
            &[("if-unmodified-since", "Thu, 01 Jan 2015 00:00:00 GMT")],
            "",
        )
        .await;
    w.assert_error(412, "ConditionNotMet");
    let w = raw
        .send(
            "PUT",
            "cat/b",
            "comp=metadata",
            &[("if-match", "*"), ("x-ms-meta-a", "1")],
            "",
        )
        .await;
    assert_eq!(w.status, 200, "{}", w.text());
    let etag2 = w.header("etag").to_owned();
    assert_ne!(etag2, etag);
    let w = raw
        .send(
            "PUT",
            "cat/b",
            "",
            &[
                bt,
                ("if-match", &etag2),
                ("if-unmodified-since", "Fri, 01 Jan 2100 00:00:00 GMT"),
            ],
            "v3",
        )
        .await;
    assert_eq!(w.status, 201, "{}", w.text());
    let w = raw
        .send("PUT", "cat/fresh", "", &[bt, ("if-none-match", "*")], "new")
        .await;
    assert_eq!(w.status, 201);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_inputs_are_checked_with_the_services_codes() {
    let (server, _) = serve().await;
    let raw = Raw::new(&server);
    let bt = ("x-ms-blob-type", "BlockBlob");
    raw.send("PUT", "Bad_Name", "restype=container", &[], "")
        .await
        .assert_error(400, "InvalidResourceName");
    raw.send("PUT", "cat", "restype=container", &[], "").await;
    raw.send("PUT", "cat", "restype=container", &[], "")
        .await
        .assert_error(409, "ContainerAlreadyExists");
    raw.send("GET", "none", "restype=container", &[], "")
        .await
        .assert_error(404, "ContainerNotFound");
    raw.send("PUT", "none/b", "", &[bt], "x")
        .await
        .assert_error(404, "ContainerNotFound");
    raw.send("GET", "cat/missing", "", &[], "")
        .await
        .assert_error(404, "BlobNotFound");
    let long = format!("cat/{}", "n".repeat(1025));
    raw.send("PUT", &long, "", &[bt], "x")
        .await
        .assert_error(400, "InvalidResourceName");
    raw.send("PUT", "cat/b", "", &[], "x")
        .await
        .assert_error(400, "MissingRequiredHeader");
    raw.send("PUT", "cat/b", "", &[("x-ms-blob-type", "Cube")], "x")
        .await
        .assert_error(400, "InvalidHeaderValue");
    raw.send("PUT", "cat/b", "", &[("x-ms-blob-type", "PageBlob")], "")
        .await
        .assert_error(501, "NotImplemented");
    raw.send(
        "PUT",
        "cat/b",
        "",
        &[bt, ("content-md5", &md5_of(b""))],
        "abc",
    )
    .await
    .assert_error(400, "Md5Mismatch");
    raw.send(
        "PUT",
        "cat/b",
        "",
        &[bt, ("content-md5", "bm90IDE2")],
        "abc",
    )
    .await
    .assert_error(400, "InvalidMd5");
    let ok = raw
        .send(
            "PUT",
            "cat/b",
            "",
            &[bt, ("content-md5", &md5_of(b"abc"))],
            "abc",
        )
        .await;
    assert_eq!(ok.status, 201);
    raw.send("PUT", "cat/b", "", &[bt, ("x-ms-meta-1st", "x")], "abc")
        .await
        .assert_error(400, "InvalidMetadata");
    raw.send(
        "PUT",
        "cat/b",
        "comp=metadata",
        &[("x-ms-meta-big", &"v".repeat(8 * 1024))],
        "",
    )
    .await
    .assert_error(400, "MetadataTooLarge");
    raw.send(
        "PUT",
        "cat/b",
        "",
        &[bt, ("x-ms-lease-id", "not-a-guid")],
        "abc",
    )
    .await
    .assert_error(400, "InvalidHeaderValue");

    // Blocks: base64 ids of at most 64 bytes, all of one list the same length.
    use base64::Engine as _;
    let id = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let q = |s: &str| {
        format!(
            "comp=block&blockid={}",
            s.replace('+', "%2B")
                .replace('/', "%2F")
                .replace('=', "%3D")
        )
    };
    raw.send("PUT", "cat/blocks", &q("not base64!"), &[], "x")
        .await
        .assert_error(400, "InvalidBlockId");
    raw.send("PUT", "cat/blocks", &q(&id(&"x".repeat(65))), &[], "x")
        .await
        .assert_error(400, "InvalidBlockId");
    raw.send(
        "PUT",
        "cat/blocks",
        &q(&id("b1")),
        &[("content-md5", &md5_of(b"abc"))],
        "xyz",
    )
    .await
    .assert_error(400, "Md5Mismatch");
    for (name, body) in [("b1", "one-"), ("b2", "two-")] {
        let put = raw
            .send("PUT", "cat/blocks", &q(&id(name)), &[], body)
            .await;
        assert_eq!(put.status, 201, "{}", put.text());
        put.header("content-md5");
    }
    let list = |ids: &[&str]| {
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
        for i in ids {
            xml.push_str(&format!("<Latest>{}</Latest>", id(i)));
        }
        xml + "</BlockList>"
    };
    raw.send(
        "PUT",
        "cat/blocks",
        "comp=blocklist",
        &[],
        list(&["b1", "b333"]),
    )
    .await
    .assert_error(400, "InvalidBlockList");
    raw.send(
        "PUT",
        "cat/blocks",
        "comp=blocklist",
        &[],
        list(&["b1", "b9"]),
    )
    .await
    .assert_error(400, "InvalidBlockList");
    raw.send(
        "PUT",
        "cat/blocks",
        "comp=blocklist",
        &[],
        "<BlockList><Latest>",
    )
    .await
    .assert_error(400, "InvalidXmlDocument");
    let committed = "<BlockList><Committed>YjE=</Committed></BlockList>";
    raw.send("PUT", "cat/blocks", "comp=blocklist", &[], committed)
        .await
        .assert_error(501, "NotImplemented");
    let done = raw
        .send(
            "PUT",
            "cat/blocks",
            "comp=blocklist",
            &[("x-ms-blob-content-type", "text/plain")],
            list(&["b2", "b1"]),
        )
        .await;
    assert_eq!(done.status, 201, "{}", done.text());
    let got = raw.send("GET", "cat/blocks", "", &[], "").await;
    assert_eq!(got.body, b"two-one-");
    assert_eq!(got.header("content-type"), "text/plain");
    // Get Block List: the committed blocks in the blob's order, with sizes.
    let listed = raw
        .send(
            "GET",
            "cat/blocks",
            "comp=blocklist&blocklisttype=all",
            &[],
            "",
        )
        .await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(listed.header("x-ms-blob-content-length"), "8");
    assert!(
        listed.text().contains(&format!(
            "<CommittedBlocks><Block><Name>{}</Name><Size>4</Size></Block><Block><Name>{}</Name><Size>4</Size></Block></CommittedBlocks>",
            id("b2"),
            id("b1")
        )),
        "{}",
        listed.text()
    );
    assert!(
        listed
            .text()
            .contains("<UncommittedBlocks></UncommittedBlocks>"),
        "{}",
        listed.text()
    );
    raw.send(
        "GET",
        "cat/blocks",
        "comp=blocklist&blocklisttype=some",
        &[],
        "",
    )
    .await
    .assert_error(400, "InvalidQueryParameterValue");
    // A block id of another length than the blob's blocks.
    raw.send("PUT", "cat/blocks", &q(&id("b4444")), &[], "x")
        .await
        .assert_error(400, "InvalidBlobOrBlock");
    let staged = raw
        .send("PUT", "cat/staged", &q(&id("s1")), &[], "xy")
        .await;
    assert_eq!(staged.status, 201);
    raw.send("PUT", "cat/staged", &q(&id("s22")), &[], "x")
        .await
        .assert_error(400, "InvalidBlobOrBlock");
    let only = raw
        .send(
            "GET",
            "cat/staged",
            "comp=blocklist&blocklisttype=uncommitted",
            &[],
            "",
        )
        .await;
    assert_eq!(only.status, 200, "{}", only.text());
    assert!(only.headers.get("etag").is_none(), "no blob yet");
    assert!(
        only.text().contains(&format!(
            "<UncommittedBlocks><Block><Name>{}</Name><Size>2</Size></Block></UncommittedBlocks>",
            id("s1")
        )),
        "{}",
        only.text()
    );
    raw.send("GET", "cat/none", "comp=blocklist", &[], "")
        .await
        .assert_error(404, "BlobNotFound");

    // What the store cannot do is named, never with the request's SAS.
    let tier = raw
        .send(
            "PUT",
            "cat/blocks",
            "comp=tier",
            &[("x-ms-access-tier", "Cool")],
            "",
        )
        .await;
    tier.assert_error(501, "NotImplemented");
    assert!(tier.text().contains("comp=tier"), "{}", tier.text());
    assert!(!tier.text().contains("sig="), "{}", tier.text());
    let odd = raw
        .send("POST", "cat/blocks", "comp=frobnicate", &[], "")
        .await;
    odd.assert_error(501, "NotImplemented");
    assert!(!odd.text().contains("sig="), "{}", odd.text());

    // Leases: the headers each action needs.
    let lease = |action: &str, extra: &[(&'static str, String)]| {
        let mut h: Vec<(&str, String)> = vec![("x-ms-lease-action", action.to_owned())];
        h.extend(extra.iter().cloned());
        h
    };
    let send_lease = |h: Vec<(&'static str, String)>| {
        let raw = &raw;
        async move {
            let refs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
            raw.send("PUT", "cat/b", "comp=lease", &refs, "").await
        }
    };
    send_lease(lease("acquire", &[]))
        .await
        .assert_error(400, "MissingRequiredHeader");
    send_lease(lease("acquire", &[("x-ms-lease-duration", "10".into())]))
        .await
        .assert_error(400, "InvalidHeaderValue");
    send_lease(lease("seize", &[]))
        .await
        .assert_error(400, "InvalidHeaderValue");
    send_lease(lease("renew", &[]))
        .await
        .assert_error(400, "MissingRequiredHeader");
    let id = "9c3a4d1e-0000-4000-8000-000000000001";
    let got = send_lease(lease(
        "acquire",
        &[
            ("x-ms-lease-duration", "-1".into()),
            ("x-ms-proposed-lease-id", id.into()),
        ],
    ))
    .await;
    assert_eq!(got.status, 201, "{}", got.text());
    assert_eq!(got.header("x-ms-lease-id"), id);
    send_lease(lease("acquire", &[("x-ms-lease-duration", "-1".into())]))
        .await
        .assert_error(409, "LeaseAlreadyPresent");
    raw.send("PUT", "cat/b", "", &[bt], "x")
        .await
        .assert_error(412, "LeaseIdMissing");
    raw.send(
        "PUT",
        "cat/b",
        "",
        &[
            bt,
            ("x-ms-lease-id", "9c3a4d1e-0000-4000-8000-000000000002"),
        ],
        "x",
    )
    .await
    .assert_error(412, "LeaseIdMismatchWithBlobOperation");
    let with = raw
        .send("PUT", "cat/b", "", &[bt, ("x-ms-lease-id", id)], "x")
        .await;
    assert_eq!(with.status, 201);
    let head = raw.send("HEAD", "cat/b", "", &[], "").await;
    assert_eq!(head.header("x-ms-lease-state"), "leased");
    assert_eq!(head.header("x-ms-lease-duration"), "infinite");
    let broken = send_lease(lease("break", &[("x-ms-lease-break-period", "0".into())])).await;
    assert_eq!(broken.status, 202);
    assert_eq!(broken.header("x-ms-lease-time"), "0");

    // Copies: a bad source, and an abort of a copy that is done.
    raw.send(
        "PUT",
        "cat/copy",
        "",
        &[("x-ms-copy-source", "not a url")],
        "",
    )
    .await
    .assert_error(400, "InvalidHeaderValue");
    let src = format!("{}/cat/blocks", raw.base);
    let copied = raw
        .send("PUT", "cat/copy", "", &[("x-ms-copy-source", &src)], "")
        .await;
    assert_eq!(copied.status, 202, "{}", copied.text());
    assert_eq!(copied.header("x-ms-copy-status"), "success");
    // A source reached with a SAS: its signature is not kept.
    let signed = format!("{src}?{}", raw.sas);
    let copied2 = raw
        .send("PUT", "cat/copy2", "", &[("x-ms-copy-source", &signed)], "")
        .await;
    assert_eq!(copied2.status, 202, "{}", copied2.text());
    let head = raw.send("HEAD", "cat/copy2", "", &[], "").await;
    let kept = head.header("x-ms-copy-source");
    assert!(
        kept.contains("sig=REDACTED") && !raw.sas.contains("sig=REDACTED"),
        "{kept}"
    );
    let abort = raw
        .send(
            "PUT",
            "cat/copy",
            &format!("comp=copy&copyid={}", copied.header("x-ms-copy-id")),
            &[("x-ms-copy-action", "abort")],
            "",
        )
        .await;
    abort.assert_error(409, "NoPendingCopyOperation");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_acls_and_service_properties_round_trip() {
    let (server, blobs) = serve().await;
    let raw = Raw::new(&server);
    raw.send("PUT", "cat", "restype=container", &[], "").await;
    let acl = "<?xml version=\"1.0\" encoding=\"utf-8\"?><SignedIdentifiers><SignedIdentifier><Id>read</Id><AccessPolicy><Start>2026-01-01T00:00:00.0000000Z</Start><Expiry>2027-01-01T00:00:00.0000000Z</Expiry><Permission>r</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>";
    let q = "restype=container&comp=acl";
    let set = raw.send_keyed("PUT", "cat", q, &[], acl).await;
    assert_eq!(set.status, 200, "{}", set.text());
    set.header("etag");
    let got = raw.send_keyed("GET", "cat", q, &[], "").await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert!(got.text().contains("<Id>read</Id>"), "{}", got.text());
    let policies = blobs
        .container("cat")
        .unwrap()
        .access_policies()
        .await
        .unwrap();
    assert_eq!(policies.len(), 1);
    // Stored access policies are the key's alone: a SAS with every
    // permission neither reads nor sets them.
    raw.send("GET", "cat", q, &[], "")
        .await
        .assert_error(403, "AuthorizationPermissionMismatch");
    raw.send("PUT", "cat", q, &[], acl)
        .await
        .assert_error(403, "AuthorizationPermissionMismatch");
    raw.send_keyed("PUT", "cat", q, &[("x-ms-blob-public-access", "blob")], acl)
        .await
        .assert_error(501, "NotImplemented");
    raw.send_keyed("PUT", "cat", q, &[], "<SignedIdentifiers><Sig")
        .await
        .assert_error(400, "InvalidXmlDocument");

    let props = blobs.service_properties().await.unwrap();
    blobs.set_service_properties(&props).await.unwrap();
    let stats = raw
        .send("GET", "", "restype=service&comp=stats", &[], "")
        .await;
    assert_eq!(stats.status, 200);
    assert!(
        stats.text().contains("<Status>live</Status>"),
        "{}",
        stats.text()
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_body_is_put_whole_and_one_byte_more_is_refused() {
    let (server, _) = serve().await;
    let raw = Raw::new(&server);
    raw.send("PUT", "big", "restype=container", &[], "").await;
    let largest = vec![7u8; MAX_BODY];
    let put = raw
        .send(
            "PUT",
            "big/largest",
            "",
            &[("x-ms-blob-type", "BlockBlob")],
            largest,
        )
        .await;
    assert_eq!(put.status, 201, "{}", put.text());
    let head = raw.send("HEAD", "big/largest", "", &[], "").await;
    assert_eq!(head.header("content-length"), MAX_BODY.to_string());
    let tail = raw
        .send(
            "GET",
            "big/largest",
            "",
            &[("x-ms-range", &format!("bytes={}-", MAX_BODY - 2))],
            "",
        )
        .await;
    assert_eq!(tail.body, [7, 7]);

    // One byte more, streamed from a small buffer: 413 `RequestBodyTooLarge`.
    let answer = put_streamed(&server, &raw, "big/over", MAX_BODY + 1).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("RequestBodyTooLarge"), "{answer}");
    let none = raw.send("HEAD", "big/over", "", &[], "").await;
    assert_eq!(none.status, 404, "nothing of a refused body is stored");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_store_file_keeps_blobs_leases_and_metadata_across_restarts() {
    let dir = std::env::temp_dir().join(format!("serve-blob-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("store.redb");
    let start = || Server::builder().file(&file).ports(0, 0, 0).start();

    let server = start().await.unwrap();
    let blobs = BlobServiceClient::from_connection_string(&server.connection_string()).unwrap();
    let c = blobs.container("kept").unwrap();
    c.create_container().await.unwrap();
    c.set_metadata([("owner", "hr")]).send().await.unwrap();
    let b = c.blob("a/b.txt").unwrap().with_blocks(4, 2).unwrap();
    let written = b
        .upload(&b"in four-byte blocks"[..])
        .content_type("text/plain")
        .metadata("k", "v")
        .await
        .unwrap();
    b.acquire_lease(LeaseDuration::Infinite).await.unwrap();
    server.shutdown().await.unwrap();

    let server = start().await.unwrap();
    let blobs = BlobServiceClient::from_connection_string(&server.connection_string()).unwrap();
    let c = blobs.container("kept").unwrap();
    assert_eq!(
        c.properties().await.unwrap().metadata(),
        [("owner".to_owned(), "hr".to_owned())]
    );
    let b = c.blob("a/b.txt").unwrap();
    let p = b.properties().await.unwrap();
    assert_eq!(p.etag(), written.etag());
    assert_eq!(p.content_type(), Some("text/plain"));
    assert_eq!(p.metadata(), [("k".to_owned(), "v".to_owned())]);
    assert!(p.lease().is_locked(), "the lease is in the file too");
    assert_eq!(
        &b.download().bytes().await.unwrap()[..],
        b"in four-byte blocks"
    );
    assert!(b.upload("x").await.unwrap_err().is_lease_held());
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_sas_answer_overrides_replace_the_blobs_headers_on_reads() {
    use base64::Engine as _;
    use hmac::Mac as _;
    let (server, blobs) = serve().await;
    let c = blobs.container("cat").unwrap();
    c.create_container().await.unwrap();
    c.blob("b.txt")
        .unwrap()
        .upload("a,b")
        .content_type("text/plain")
        .await
        .unwrap();
    // A service SAS as the official SDKs sign it (version 2021-08-06: the
    // encryption scope, then rscc, rscd, rsce, rscl, rsct).
    let to_sign = "r\n\n2100-01-01T00:00:00Z\n/blob/devstoreaccount1/cat/b.txt\n\n\n\n2021-08-06\nb\n\n\n\nattachment\n\n\ntext/csv";
    let key = base64::engine::general_purpose::STANDARD
        .decode(tablekit::server::DEV_KEY)
        .unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(to_sign.as_bytes());
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    let sig: String = url::form_urlencoded::byte_serialize(sig.as_bytes()).collect();
    let url = format!(
        "http://{}/devstoreaccount1/cat/b.txt?sv=2021-08-06&sr=b&sp=r&se=2100-01-01T00%3A00%3A00Z&rscd=attachment&rsct=text%2Fcsv&sig={sig}",
        server.blob_address()
    );
    let http = reqwest::Client::new();
    for method in [reqwest::Method::GET, reqwest::Method::HEAD] {
        let resp = http.request(method.clone(), &url).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{method}");
        assert_eq!(resp.headers()["content-type"], "text/csv", "{method}");
        assert_eq!(
            resp.headers()["content-disposition"],
            "attachment",
            "{method}"
        );
    }
    // The blob itself keeps its own.
    let p = c.blob("b.txt").unwrap().properties().await.unwrap();
    assert_eq!(p.content_type(), Some("text/plain"));
    server.shutdown().await.unwrap();
}

/// The interpreter of a venv with the official Python SDKs
/// (`tools/python/serve-requirements.txt`, azure-storage-blob among them).
const SDK_PYTHON: &str = "TABLEKIT_SERVE_PYTHON";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_blob_sdk_runs_its_checks_against_the_server() {
    let Some(python) = std::env::var_os(SDK_PYTHON).filter(|p| !p.is_empty()) else {
        eprintln!(
            "\n============ Python blob SDK against the server SKIPPED ============\n\
             {SDK_PYTHON} is not set: python/serve_blob_sdk.py did not run. Set it to the\n\
             interpreter of a venv with azure-storage-blob (tools/python/serve-requirements.txt).\n\
             ===================================================================\n"
        );
        return;
    };
    let (server, _) = serve().await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/integration/python/serve_blob_sdk.py"
    );
    let conn = server.connection_string();
    // The server answers on this runtime: Python waits on a thread of its own.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .arg(conn)
            .output()
            .expect("the SDK's interpreter runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("ok: "),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    server.shutdown().await.unwrap();
}
