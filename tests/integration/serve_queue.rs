//! The Queue service of `tablekit::server`: tablekit's queue client over HTTP
//! against an in-process server, and raw requests for what tablekit does not
//! send or does not show (the answers' XML and headers, the service's error
//! codes for input a client would have refused, the largest message taken
//! and the smallest refused). Each test starts its own server on free ports.

use std::time::Duration;

use tablekit::error::ErrorCode;
use tablekit::queue::MessageEncoding;
use tablekit::server::Server;
use tablekit::QueueServiceClient;

async fn start() -> (Server, QueueServiceClient) {
    let server = Server::builder().ports(0, 0, 0).start().await.unwrap();
    let queues = QueueServiceClient::from_connection_string(&server.connection_string()).unwrap();
    (server, queues)
}

/// Raw requests to the server's Queue service, signed with an account SAS.
struct Raw {
    http: reqwest::Client,
    /// `http://127.0.0.1:<port>/devstoreaccount1`.
    base: String,
    sas: String,
}

/// An answer: status, headers, body as text.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The service's error code, from the header and the XML (which agree).
    fn code(&self) -> &str {
        let code = self.header("x-ms-error-code").unwrap_or_default();
        assert!(
            self.body.contains(&format!("<Code>{code}</Code>")),
            "{}",
            self.body
        );
        code
    }

    /// The text of each `<tag>` element, in order.
    fn all(&self, tag: &str) -> Vec<String> {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        self.body
            .split(&open)
            .skip(1)
            .map(|s| s.split(&close).next().unwrap_or_default().to_owned())
            .collect()
    }
}

impl Raw {
    fn new(server: &Server) -> Raw {
        Raw {
            http: reqwest::Client::new(),
            base: format!("http://{}/devstoreaccount1", server.queue_address()),
            sas: crate::common::full_access_sas(server),
        }
    }

    async fn send(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        let sep = if path_and_query.contains('?') {
            '&'
        } else {
            '?'
        };
        let url = format!("{}{path_and_query}{sep}{}", self.base, self.sas);
        let mut req = self
            .http
            .request(method.parse().unwrap(), url)
            .header("x-ms-version", "2021-12-02")
            .body(body.to_vec());
        if !body.is_empty() {
            req = req.header("content-type", "application/xml");
        }
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.text().await.unwrap();
        Answer {
            status,
            headers,
            body,
        }
    }

    async fn get(&self, path_and_query: &str) -> Answer {
        self.send("GET", path_and_query, &[], b"").await
    }
}

fn message_xml(text: &str) -> Vec<u8> {
    format!(
        "<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>{text}</MessageText></QueueMessage>"
    )
    .into_bytes()
}

#[tokio::test]
async fn the_queue_client_works_over_http_against_the_server() {
    let (server, svc) = start().await;
    let q = svc.queue("jobs").unwrap();
    assert!(q.create_queue_if_not_exists().await.unwrap());
    assert!(
        !q.create_queue_if_not_exists().await.unwrap(),
        "there already"
    );

    let sent = q.send("job <1> & more").await.unwrap();
    q.send("job 2")
        .time_to_live(Duration::from_secs(60))
        .await
        .unwrap();
    q.send("later")
        .visibility_delay(Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(q.approximate_message_count().await.unwrap(), 3);

    let peeked = q.peek(32).await.unwrap();
    let texts: Vec<_> = peeked
        .iter()
        .map(|m| m.text().unwrap().to_owned())
        .collect();
    assert_eq!(
        texts,
        ["job <1> & more", "job 2"],
        "the delayed one is hidden"
    );
    assert_eq!(peeked[0].pop_receipt(), None);
    assert_eq!(peeked[0].id(), sent.id());

    let mut got = q.receive().max_messages(32).await.unwrap();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|m| m.dequeue_count() == 1));
    assert!(
        q.receive().await.unwrap().is_empty(),
        "invisible while held"
    );

    // An update with a zero timeout makes it visible again, with a new body.
    let old = got[0].clone();
    q.update_message(&mut got[0], Duration::ZERO, Some(b"job 1, again"))
        .await
        .unwrap();
    assert_ne!(got[0].pop_receipt(), old.pop_receipt());
    let err = q.delete_message(&old).await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::PopReceiptMismatch), "{err}");
    let again = q.receive().await.unwrap().pop().unwrap();
    assert_eq!(again.text().unwrap(), "job 1, again");
    assert_eq!(again.dequeue_count(), 2);
    q.delete_message(&again).await.unwrap();
    let err = q.delete_message(&again).await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::MessageNotFound), "{err}");

    q.clear().await.unwrap();
    assert_eq!(q.approximate_message_count().await.unwrap(), 0);

    // Bytes travel Base64; the largest the client sends is taken.
    let b = q.clone().with_encoding(MessageEncoding::Base64);
    let largest: Vec<u8> = (0..48 * 1024).map(|i| (i % 251) as u8).collect();
    b.send(&largest).await.unwrap();
    assert_eq!(
        b.receive().await.unwrap().pop().unwrap().body(),
        &largest[..]
    );

    q.delete_queue().await.unwrap();
    let err = q.send("x").await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::QueueNotFound), "{err}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn metadata_listing_acl_and_service_properties_through_the_client() {
    let (server, svc) = start().await;
    for name in ["alpha", "beta-1", "beta-2", "beta-3", "gamma"] {
        svc.queue(name).unwrap().create_queue().await.unwrap();
    }
    let b1 = svc.queue("beta-1").unwrap();
    b1.set_metadata([("Owner", "ops"), ("tier", "gold")])
        .await
        .unwrap();
    b1.send("one").await.unwrap();
    let p = b1.properties().await.unwrap();
    assert_eq!(p.metadata_value("owner"), Some("ops"));
    assert_eq!(p.metadata().len(), 2);
    assert_eq!(p.approximate_message_count(), 1);

    let listed = svc
        .list_queues()
        .prefix("beta")
        .include_metadata()
        .page_size(2)
        .fetch_all()
        .await
        .unwrap();
    let names: Vec<_> = listed.iter().map(|q| q.name()).collect();
    assert_eq!(names, ["beta-1", "beta-2", "beta-3"], "across two pages");
    assert_eq!(listed[0].metadata(), p.metadata());
    let all = svc.list_queues().fetch_all().await.unwrap();
    assert_eq!(all.len(), 5);
    assert!(all[1].metadata().is_empty(), "metadata only when asked");

    use tablekit::account::QueueSasPermissions;
    use tablekit::acl::StoredAccessPolicy;
    let policy = StoredAccessPolicy::new("readers")
        .expiry(chrono::Utc::now() + chrono::Duration::days(1))
        .permissions(QueueSasPermissions::READ_ONLY);
    b1.set_access_policies(&[policy]).await.unwrap();
    let back = b1.access_policies().await.unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].id(), "readers");
    assert_eq!(back[0].granted(), Some(QueueSasPermissions::READ_ONLY));

    let mut props = svc.service_properties().await.unwrap();
    assert!(props.cors.as_ref().is_some_and(Vec::is_empty));
    props.cors = Some(vec![tablekit::service_properties::CorsRule::new(
        ["http://a.example"],
        ["GET"],
        60,
    )]);
    svc.set_service_properties(&props).await.unwrap();
    assert_eq!(svc.service_properties().await.unwrap().cors, props.cors);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn answers_carry_the_services_xml_and_headers() {
    let (server, _) = start().await;
    let raw = Raw::new(&server);
    assert_eq!(raw.send("PUT", "/jobs", &[], b"").await.status, 201);

    // Put Message: 201, the message's id, times and receipt, no text.
    let sent = raw
        .send(
            "POST",
            "/jobs/messages?messagettl=-1",
            &[],
            &message_xml("a &amp; b"),
        )
        .await;
    assert_eq!(sent.status, 201, "{}", sent.body);
    assert_eq!(sent.header("content-type"), Some("application/xml"));
    assert!(sent.header("x-ms-request-id").is_some());
    assert_eq!(sent.header("x-ms-version"), Some("2021-12-02"));
    assert_eq!(
        sent.all("ExpirationTime"),
        ["Fri, 31 Dec 9999 23:59:59 GMT"]
    );
    assert_eq!(sent.all("PopReceipt").len(), 1);
    assert_eq!(sent.all("TimeNextVisible").len(), 1);
    assert!(sent.all("MessageText").is_empty() && sent.all("DequeueCount").is_empty());
    let id = sent.all("MessageId").remove(0);
    // A time to live of centuries ends, as the service caps it, in year 9999.
    let centuries = raw
        .send(
            "POST",
            "/jobs/messages?messagettl=9223372036854775807",
            &[],
            &message_xml("long"),
        )
        .await;
    assert_eq!(centuries.status, 201, "{}", centuries.body);
    assert_eq!(
        centuries.all("ExpirationTime"),
        ["Fri, 31 Dec 9999 23:59:59 GMT"]
    );
    let long_id = centuries.all("MessageId").remove(0);
    let long_receipt = centuries.all("PopReceipt").remove(0);
    let gone = raw
        .send(
            "DELETE",
            &format!("/jobs/messages/{long_id}?popreceipt={long_receipt}"),
            &[],
            b"",
        )
        .await;
    assert_eq!(gone.status, 204, "a send's receipt deletes its message");

    // Peek: text and dequeue count, no receipt.
    let peek = raw
        .get("/jobs/messages?peekonly=true&numofmessages=32")
        .await;
    assert_eq!(peek.status, 200);
    assert_eq!(peek.all("MessageText"), ["a &amp; b"], "escaped again");
    assert_eq!(peek.all("DequeueCount"), ["0"]);
    assert!(peek.all("PopReceipt").is_empty() && peek.all("TimeNextVisible").is_empty());

    // Get Messages: everything; Update: 204 with the new receipt and time.
    let got = raw.get("/jobs/messages?visibilitytimeout=10").await;
    assert_eq!(got.all("DequeueCount"), ["1"]);
    let receipt = got.all("PopReceipt").remove(0);
    let url = |r: &str| {
        format!(
            "/jobs/messages/{id}?popreceipt={}&visibilitytimeout=0",
            r.replace('+', "%2B")
                .replace('/', "%2F")
                .replace('=', "%3D")
        )
    };
    let updated = raw
        .send("PUT", &url(&receipt), &[], &message_xml("new"))
        .await;
    assert_eq!(updated.status, 204, "{}", updated.body);
    let new_receipt = updated.header("x-ms-popreceipt").unwrap().to_owned();
    assert_ne!(new_receipt, receipt);
    let next = updated.header("x-ms-time-next-visible").unwrap();
    assert!(next.ends_with(" GMT"), "{next}");
    let stale = raw.send("PUT", &url(&receipt), &[], b"").await;
    assert_eq!((stale.status, stale.code()), (400, "PopReceiptMismatch"));
    // An update without a body keeps the text.
    let kept = raw.send("PUT", &url(&new_receipt), &[], b"").await;
    assert_eq!(kept.status, 204, "{}", kept.body);
    let peek = raw.get("/jobs/messages?peekonly=true").await;
    assert_eq!(peek.all("MessageText"), ["new"]);

    // Get Queue Metadata: the count and each x-ms-meta-* header.
    let set = raw
        .send(
            "PUT",
            "/jobs?comp=metadata",
            &[("x-ms-meta-Owner", "ops")],
            b"",
        )
        .await;
    assert_eq!(set.status, 204);
    for method in ["GET", "HEAD"] {
        let meta = raw.send(method, "/jobs?comp=metadata", &[], b"").await;
        assert_eq!(meta.status, 200);
        assert_eq!(meta.header("x-ms-approximate-messages-count"), Some("1"));
        assert_eq!(meta.header("x-ms-meta-owner"), Some("ops"));
    }

    // Stats, as Azurite answers them on the primary.
    let stats = raw.get("/?restype=service&comp=stats").await;
    assert_eq!(stats.status, 200);
    assert_eq!(stats.all("Status"), ["live"]);

    // The client request id is echoed.
    let echoed = raw
        .send(
            "GET",
            "/?comp=list",
            &[("x-ms-client-request-id", "abc-1")],
            b"",
        )
        .await;
    assert_eq!(echoed.header("x-ms-client-request-id"), Some("abc-1"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_largest_message_is_taken_and_one_byte_more_refused() {
    let (server, _) = start().await;
    let raw = Raw::new(&server);
    raw.send("PUT", "/jobs", &[], b"").await;

    // 65,536 bytes of text once unescaped, markup counted as its characters:
    // the body on the wire is longer.
    let mut text = "é".repeat(32 * 1024 - 2);
    text.push_str("<>&x");
    assert_eq!(text.len(), 65_536);
    let escaped = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let taken = raw
        .send("POST", "/jobs/messages", &[], &message_xml(&escaped))
        .await;
    assert_eq!(taken.status, 201, "{}", taken.body);
    let peek = raw.get("/jobs/messages?peekonly=true").await;
    assert_eq!(peek.all("MessageText"), std::slice::from_ref(&escaped));

    let refused = raw
        .send(
            "POST",
            "/jobs/messages",
            &[],
            &message_xml(&format!("{escaped}y")),
        )
        .await;
    assert_eq!(
        (refused.status, refused.code()),
        (413, "RequestBodyTooLarge")
    );
    // So is an update to that size, and the message stays as it was.
    let got = raw.get("/jobs/messages").await;
    let (id, receipt) = (
        got.all("MessageId").remove(0),
        got.all("PopReceipt").remove(0),
    );
    let update = raw
        .send(
            "PUT",
            &format!("/jobs/messages/{id}?popreceipt={receipt}&visibilitytimeout=0"),
            &[],
            &message_xml(&format!("{escaped}y")),
        )
        .await;
    assert_eq!((update.status, update.code()), (413, "RequestBodyTooLarge"));
    let meta = raw.get("/jobs?comp=metadata").await;
    assert_eq!(meta.header("x-ms-approximate-messages-count"), Some("1"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn out_of_range_and_malformed_input_gets_the_services_codes() {
    let (server, _) = start().await;
    let raw = Raw::new(&server);
    raw.send("PUT", "/jobs", &[], b"").await;
    let body = message_xml("x");
    let cases: [(&str, &str, &[u8], u16, &str); 19] = [
        (
            "POST",
            "/jobs/messages?visibilitytimeout=604801",
            &body,
            400,
            "OutOfRangeQueryParameterValue",
        ),
        (
            "POST",
            "/jobs/messages?visibilitytimeout=-1",
            &body,
            400,
            "OutOfRangeQueryParameterValue",
        ),
        (
            "POST",
            "/jobs/messages?messagettl=0",
            &body,
            400,
            "InvalidQueryParameterValue",
        ),
        (
            "POST",
            "/jobs/messages?messagettl=-2",
            &body,
            400,
            "InvalidQueryParameterValue",
        ),
        (
            "POST",
            "/jobs/messages?messagettl=10&visibilitytimeout=10",
            &body,
            400,
            "InvalidQueryParameterValue",
        ),
        (
            "POST",
            "/jobs/messages?visibilitytimeout=soon",
            &body,
            400,
            "InvalidQueryParameterValue",
        ),
        (
            "POST",
            "/jobs/messages",
            b"<QueueMessage><MessageText>x</QueueMessage>",
            400,
            "InvalidXmlDocument",
        ),
        (
            "POST",
            "/jobs/messages",
            b"<QueueMessage></QueueMessage>",
            400,
            "InvalidXmlDocument",
        ),
        ("POST", "/jobs/messages", b"", 400, "InvalidXmlDocument"),
        (
            "GET",
            "/jobs/messages?numofmessages=0",
            b"",
            400,
            "OutOfRangeQueryParameterValue",
        ),
        (
            "GET",
            "/jobs/messages?numofmessages=33",
            b"",
            400,
            "OutOfRangeQueryParameterValue",
        ),
        (
            "GET",
            "/jobs/messages?peekonly=true&numofmessages=33",
            b"",
            400,
            "OutOfRangeQueryParameterValue",
        ),
        (
            "GET",
            "/jobs/messages?visibilitytimeout=0",
            b"",
            400,
            "OutOfRangeQueryParameterValue",
        ),
        (
            "GET",
            "/jobs/messages?visibilitytimeout=604801",
            b"",
            400,
            "OutOfRangeQueryParameterValue",
        ),
        (
            "PUT",
            "/jobs/messages/abc?visibilitytimeout=0",
            b"",
            400,
            "MissingRequiredQueryParameter",
        ),
        (
            "PUT",
            "/jobs/messages/abc?popreceipt=r",
            b"",
            400,
            "MissingRequiredQueryParameter",
        ),
        (
            "PUT",
            "/jobs/messages/abc?popreceipt=r&visibilitytimeout=0",
            b"",
            404,
            "MessageNotFound",
        ),
        (
            "DELETE",
            "/jobs/messages/abc",
            b"",
            400,
            "MissingRequiredQueryParameter",
        ),
        (
            "GET",
            "/?comp=list&maxresults=0",
            b"",
            400,
            "OutOfRangeQueryParameterValue",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let a = raw.send(method, path, &[], body).await;
        assert_eq!(
            (a.status, a.code()),
            (status, code),
            "{method} {path}: {}",
            a.body
        );
        assert_eq!(a.header("content-type"), Some("application/xml"));
    }
    // Nothing refused was stored.
    let meta = raw.get("/jobs?comp=metadata").await;
    assert_eq!(meta.header("x-ms-approximate-messages-count"), Some("0"));

    // The ends of each range are taken.
    for path in [
        "/jobs/messages?visibilitytimeout=604800&messagettl=-1",
        "/jobs/messages?visibilitytimeout=0&messagettl=1",
    ] {
        let a = raw.send("POST", path, &[], &body).await;
        assert_eq!(a.status, 201, "{path}: {}", a.body);
    }
    for path in [
        "/jobs/messages?numofmessages=32&visibilitytimeout=604800",
        "/jobs/messages?numofmessages=1&visibilitytimeout=1",
    ] {
        assert_eq!(raw.get(path).await.status, 200, "{path}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn names_metadata_and_missing_queues_get_the_services_codes() {
    let (server, _) = start().await;
    let raw = Raw::new(&server);
    for (name, code) in [
        ("ab", "OutOfRangeInput"),
        ("Jobs", "InvalidResourceName"),
        ("a--b", "InvalidResourceName"),
        ("jobs-", "InvalidResourceName"),
    ] {
        let a = raw.send("PUT", &format!("/{name}"), &[], b"").await;
        assert_eq!((a.status, a.code()), (400, code), "{name}");
    }

    // Create with metadata: 201; the same again (names in any case) 204;
    // other metadata, or none, 409.
    let meta = [("x-ms-meta-owner", "ops"), ("x-ms-meta-Tier", "gold")];
    assert_eq!(raw.send("PUT", "/jobs", &meta, b"").await.status, 201);
    let same = [("x-ms-meta-OWNER", "ops"), ("x-ms-meta-tier", "gold")];
    assert_eq!(raw.send("PUT", "/jobs", &same, b"").await.status, 204);
    for other in [&[("x-ms-meta-owner", "dev")][..], &[]] {
        let a = raw.send("PUT", "/jobs", other, b"").await;
        assert_eq!((a.status, a.code()), (409, "QueueAlreadyExists"));
    }
    let m = raw.get("/jobs?comp=metadata").await;
    assert_eq!(
        m.header("x-ms-meta-tier"),
        Some("gold"),
        "unchanged by the refused"
    );
    // Without metadata, a second create is 204; with some, 409.
    assert_eq!(raw.send("PUT", "/plain", &[], b"").await.status, 201);
    assert_eq!(raw.send("PUT", "/plain", &[], b"").await.status, 204);
    assert_eq!(raw.send("PUT", "/plain", &meta, b"").await.status, 409);

    for (headers, code) in [
        (vec![("x-ms-meta-1abc", "v")], "InvalidMetadata"),
        (vec![("x-ms-meta-a-b", "v")], "InvalidMetadata"),
        (
            vec![("x-ms-meta-a", "v"), ("x-ms-meta-A", "w")],
            "InvalidMetadata",
        ),
    ] {
        let a = raw.send("PUT", "/jobs?comp=metadata", &headers, b"").await;
        assert_eq!((a.status, a.code()), (400, code), "{headers:?}");
    }
    let big = "v".repeat(8 * 1024);
    let a = raw
        .send("PUT", "/jobs?comp=metadata", &[("x-ms-meta-a", &big)], b"")
        .await;
    assert_eq!((a.status, a.code()), (400, "MetadataTooLarge"));
    let fits = "v".repeat(8 * 1024 - 1);
    let a = raw
        .send("PUT", "/jobs?comp=metadata", &[("x-ms-meta-a", &fits)], b"")
        .await;
    assert_eq!(a.status, 204, "8 KiB of name and value");

    for (method, path) in [
        ("GET", "/gone?comp=metadata"),
        ("PUT", "/gone?comp=metadata"),
        ("DELETE", "/gone"),
        ("GET", "/gone/messages"),
        ("GET", "/gone/messages?peekonly=true"),
        ("DELETE", "/gone/messages"),
        ("GET", "/gone?comp=acl"),
    ] {
        let a = raw.send(method, path, &[], b"").await;
        assert_eq!(
            (a.status, a.code()),
            (404, "QueueNotFound"),
            "{method} {path}"
        );
    }
    let a = raw
        .send("POST", "/gone/messages", &[], &message_xml("x"))
        .await;
    assert_eq!((a.status, a.code()), (404, "QueueNotFound"));

    // ACLs: the queue's letters only, at most five.
    let acl = |perm: &str| {
        format!(
            "<SignedIdentifiers><SignedIdentifier><Id>p</Id><AccessPolicy>\
             <Permission>{perm}</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>"
        )
    };
    assert_eq!(
        raw.send("PUT", "/jobs?comp=acl", &[], acl("raup").as_bytes())
            .await
            .status,
        204
    );
    let a = raw
        .send("PUT", "/jobs?comp=acl", &[], acl("rw").as_bytes())
        .await;
    assert_eq!((a.status, a.code()), (400, "InvalidXmlDocument"));
    let got = raw.get("/jobs?comp=acl").await;
    assert_eq!(
        got.all("Permission"),
        ["raup"],
        "the refused set changed nothing"
    );

    // Unknown operations.
    let a = raw.get("/jobs?comp=bogus").await;
    assert_eq!((a.status, a.code()), (400, "InvalidQueryParameterValue"));
    let a = raw.send("POST", "/jobs", &[], b"").await;
    assert_eq!((a.status, a.code()), (405, "UnsupportedHttpVerb"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn listing_pages_carry_the_services_markers() {
    let (server, _) = start().await;
    let raw = Raw::new(&server);
    for name in ["q-a", "q-b", "q-c", "other"] {
        raw.send("PUT", &format!("/{name}"), &[], b"").await;
    }
    let first = raw.get("/?comp=list&prefix=q-&maxresults=2").await;
    assert_eq!(first.status, 200);
    assert_eq!(first.all("Name"), ["q-a", "q-b"]);
    assert_eq!(first.all("Prefix"), ["q-"]);
    assert_eq!(first.all("MaxResults"), ["2"]);
    let marker = first.all("NextMarker").remove(0);
    assert_eq!(marker, "/devstoreaccount1/q-c");
    assert!(first.body.contains(&format!(
        "ServiceEndpoint=\"http://{}/devstoreaccount1/\"",
        server.queue_address()
    )));
    let second = raw
        .get(&format!(
            "/?comp=list&prefix=q-&maxresults=2&marker={}",
            marker.replace('/', "%2F")
        ))
        .await;
    assert_eq!(second.all("Name"), ["q-c"]);
    assert_eq!(second.all("Marker"), [marker]);
    assert!(second.body.contains("<NextMarker />"), "{}", second.body);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_served_store_file_keeps_queues_and_messages_across_restarts() {
    let dir = std::env::temp_dir().join(format!("serve-queue-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("store.redb");
    let serve = || Server::builder().file(&file).ports(0, 0, 0).start();

    let server = serve().await.unwrap();
    let svc = QueueServiceClient::from_connection_string(&server.connection_string()).unwrap();
    let q = svc.queue("kept").unwrap();
    q.create_queue().await.unwrap();
    q.set_metadata([("owner", "ops")]).await.unwrap();
    q.send("survives").await.unwrap();
    server.shutdown().await.unwrap();

    let server = serve().await.unwrap();
    let svc = QueueServiceClient::from_connection_string(&server.connection_string()).unwrap();
    let q = svc.queue("kept").unwrap();
    assert_eq!(
        q.properties().await.unwrap().metadata_value("owner"),
        Some("ops")
    );
    let m = q.receive().await.unwrap().pop().unwrap();
    assert_eq!(m.text().unwrap(), "survives");
    server.shutdown().await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The interpreter of the official SDKs' venv that `scripts/test.sh` makes
/// from `tools/python/serve-requirements.txt` (see `serve_python`).
const PYTHON_VAR: &str = "TABLEKIT_SERVE_PYTHON";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_queue_sdk_runs_its_checks_against_the_server() {
    let python = match std::env::var(PYTHON_VAR) {
        Ok(p) if !p.trim().is_empty() => p,
        _ => {
            assert!(
                !std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true")),
                "{PYTHON_VAR} is not set but CI=true: scripts/test.sh makes the venv"
            );
            eprintln!(
                "\n=========== serve_queue: the Python SDK check is SKIPPED ===========\n\
                 {PYTHON_VAR} is not set. Make the venv: python3 -m venv target/serve-venv && \\\n  \
                 target/serve-venv/bin/pip install --no-deps -r tools/python/serve-requirements.txt\n\
                 and set {PYTHON_VAR}=target/serve-venv/bin/python\n\
                 ====================================================================\n"
            );
            return;
        }
    };
    let (server, _) = start().await;
    let conn = server.connection_string();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/integration/python/serve_queue_sdk.py"
    );
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python)
            .arg(script)
            .arg(conn)
            .output()
            .unwrap_or_else(|e| panic!("running {python}: {e}"))
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the SDK's checks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.ends_with("0 failed\n"), "{stdout}");
    assert!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count() >= 30,
        "{stdout}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_receivers_over_http_get_each_message_once() {
    let (server, svc) = start().await;
    let q = svc.queue("work").unwrap();
    q.create_queue().await.unwrap();
    for i in 0..96 {
        q.send(format!("job {i}")).await.unwrap();
    }
    let receivers = (0..6).map(|_| {
        let q = q.clone();
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = q
                    .receive()
                    .max_messages(7)
                    .visibility_timeout(Duration::from_secs(600))
                    .await
                    .unwrap();
                if batch.is_empty() {
                    return got;
                }
                got.extend(batch.into_iter().map(|m| m.text().unwrap().to_owned()));
            }
        })
    });
    let mut all = Vec::new();
    for r in receivers.collect::<Vec<_>>() {
        all.extend(r.await.unwrap());
    }
    all.sort();
    let mut want: Vec<String> = (0..96).map(|i| format!("job {i}")).collect();
    want.sort();
    assert_eq!(all, want, "every message once, none twice");
    server.shutdown().await.unwrap();
}
