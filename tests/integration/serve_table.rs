//! The Table service of `tablekit::server`, on the wire: what tablekit's own
//! client never asks for (the three JSON metadata formats, `Prefer`, the
//! raw multipart of a batch answer, the service's error JSON and codes for
//! bad input, continuation tokens across pages), sent raw and signed with
//! Shared Key Lite as any SDK signs it, tablekit's clients over HTTP
//! against an in-process server, and the official Python SDK
//! (`python/table_sdk_interop.py`, in the official SDKs' venv that
//! `scripts/test.sh` makes). (The behaviour suites run on a served store
//! too: their `served` tests.)

use base64::Engine as _;
use hmac::{Hmac, Mac};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sha2::Sha256;
use tablekit::server::{Server, DEV_ACCOUNT, DEV_KEY};
use tablekit::{DynamicEntity, EdmValue, Storage};

/// A raw client of the served Table endpoint.
struct Raw {
    http: reqwest::Client,
    /// `http://127.0.0.1:<port>/devstoreaccount1`
    base: String,
    /// The path to sign in place of the request's (as the Python SDKs sign
    /// a request to the secondary: over the primary's path).
    signed_path: Option<String>,
}

struct Answer {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The service's error code, from the body and the header (which agree).
    #[track_caller]
    fn code(&self) -> String {
        let json = self.json();
        let code = json["odata.error"]["code"].as_str().unwrap().to_owned();
        assert_eq!(self.header("x-ms-error-code"), Some(code.as_str()));
        code
    }
}

impl Raw {
    fn new(server: &Server) -> Self {
        Raw {
            http: reqwest::Client::new(),
            base: format!("http://{}/{DEV_ACCOUNT}", server.table_address()),
            signed_path: None,
        }
    }

    /// Sends `method` to `path` (after the account, with its query), signed
    /// with Shared Key Lite, with `headers` and `body`.
    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<reqwest::Body>,
    ) -> Answer {
        let url = format!("{}/{path}", self.base);
        let parsed = reqwest::Url::parse(&url).unwrap();
        let date = httpdate(chrono::Utc::now());
        // Shared Key Lite (Table): the date, then the canonical resource,
        // the account named before the path-style path, with `comp` kept.
        let path = self.signed_path.as_deref().unwrap_or(parsed.path());
        let mut resource = format!("/{DEV_ACCOUNT}{path}");
        if let Some((_, comp)) = parsed.query_pairs().find(|(k, _)| k == "comp") {
            resource.push_str(&format!("?comp={comp}"));
        }
        let key = base64::engine::general_purpose::STANDARD
            .decode(DEV_KEY)
            .unwrap();
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
        mac.update(format!("{date}\n{resource}").as_bytes());
        let signature =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        let mut req = self
            .http
            .request(Method::from_bytes(method.as_bytes()).unwrap(), parsed)
            .header("x-ms-date", &date)
            .header("x-ms-version", "2019-02-02")
            .header("DataServiceVersion", "3.0;NetFx")
            .header(
                "Authorization",
                format!("SharedKeyLite {DEV_ACCOUNT}:{signature}"),
            );
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.body(body).send().await.unwrap();
        Answer {
            status: resp.status(),
            headers: resp.headers().clone(),
            body: resp.text().await.unwrap(),
        }
    }

    async fn create_table(&self, name: &str) {
        let a = self
            .send(
                "POST",
                "Tables",
                &[
                    ("Content-Type", "application/json"),
                    ("Prefer", "return-no-content"),
                ],
                json!({ "TableName": name }).to_string(),
            )
            .await;
        assert_eq!(a.status, 204, "{}", a.body);
    }

    async fn insert(&self, table: &str, entity: &Value, headers: &[(&str, &str)]) -> Answer {
        let mut all = vec![("Content-Type", "application/json")];
        all.extend_from_slice(headers);
        self.send("POST", table, &all, entity.to_string()).await
    }
}

fn httpdate(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

async fn start() -> (Server, Raw) {
    let server = Server::builder().ports(0, 0, 0).start().await.unwrap();
    let raw = Raw::new(&server);
    (server, raw)
}

const MINIMAL: &str = "application/json;odata=minimalmetadata";
const FULL: &str = "application/json;odata=fullmetadata";
const NONE: &str = "application/json;odata=nometadata";

fn sample(rk: &str) -> Value {
    json!({
        "PartitionKey": "p", "RowKey": rk,
        "S": "x", "I": 1, "D": 2.5,
        "L@odata.type": "Edm.Int64", "L": "5000000000",
        "G@odata.type": "Edm.Guid", "G": "c9da6455-213d-42c9-9a79-3e9149a57833",
        "T@odata.type": "Edm.DateTime", "T": "2020-01-01T00:00:00Z",
        "B@odata.type": "Edm.Binary", "B": "AQID",
    })
}

#[tokio::test]
async fn an_insert_answers_in_the_format_and_with_the_content_asked_for() {
    let (server, raw) = start().await;
    raw.create_table("Formats").await;

    // No Prefer: 201 with the entity, no Preference-Applied.
    let a = raw
        .insert("Formats", &sample("1"), &[("Accept", MINIMAL)])
        .await;
    assert_eq!(a.status, 201, "{}", a.body);
    assert!(a.header("preference-applied").is_none());
    assert!(a
        .header("content-type")
        .unwrap()
        .starts_with("application/json;odata=minimalmetadata"));
    let etag = a.header("etag").unwrap().to_owned();
    assert!(etag.starts_with("W/\"datetime'"), "{etag}");
    let body = a.json();
    assert_eq!(body["odata.etag"], etag.as_str());
    assert_eq!(
        body["odata.metadata"],
        format!("{}/$metadata#Formats/@Element", raw.base)
    );
    assert_eq!(body["L@odata.type"], "Edm.Int64");
    assert_eq!(body["L"], "5000000000");
    assert_eq!(body["T"], "2020-01-01T00:00:00.0000000Z");
    assert_eq!(body["D"], 2.5);
    assert!(body["Timestamp"].as_str().unwrap().ends_with('Z'));
    assert!(body.get("odata.id").is_none());

    // Prefer: return-no-content: 204, said so, with the ETag.
    let a = raw
        .insert("Formats", &sample("2"), &[("Prefer", "return-no-content")])
        .await;
    assert_eq!(a.status, 204);
    assert_eq!(a.header("preference-applied"), Some("return-no-content"));
    assert!(a.header("etag").is_some());
    assert!(a.body.is_empty());

    // Prefer: return-content, full metadata.
    let a = raw
        .insert(
            "Formats",
            &sample("3"),
            &[("Prefer", "return-content"), ("Accept", FULL)],
        )
        .await;
    assert_eq!(a.status, 201);
    assert_eq!(a.header("preference-applied"), Some("return-content"));
    let body = a.json();
    assert_eq!(body["odata.type"], format!("{DEV_ACCOUNT}.Formats"));
    assert_eq!(
        body["odata.id"],
        format!("{}/Formats(PartitionKey='p',RowKey='3')", raw.base)
    );
    assert_eq!(
        body["odata.editLink"],
        "Formats(PartitionKey='p',RowKey='3')"
    );
    assert_eq!(body["Timestamp@odata.type"], "Edm.DateTime");
    assert_eq!(body["G@odata.type"], "Edm.Guid");
    assert!(body.get("I@odata.type").is_none());

    // No metadata: no annotation, no odata member, Int64 still a string.
    let a = raw
        .insert("Formats", &sample("4"), &[("Accept", NONE)])
        .await;
    let body = a.json();
    assert!(body
        .as_object()
        .unwrap()
        .keys()
        .all(|k| !k.contains("odata")));
    assert_eq!(body["L"], "5000000000");

    // $format overrides Accept, on a point read.
    let a = raw
        .send(
            "GET",
            "Formats(PartitionKey='p',RowKey='1')?$format=application/json;odata=nometadata",
            &[("Accept", FULL)],
            "",
        )
        .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("etag"), Some(etag.as_str()));
    assert!(a.json().get("odata.metadata").is_none());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn tables_are_created_listed_in_pages_and_deleted() {
    let (server, raw) = start().await;
    let a = raw
        .send(
            "POST",
            "Tables",
            &[("Content-Type", "application/json"), ("Accept", FULL)],
            json!({ "TableName": "Alpha" }).to_string(),
        )
        .await;
    assert_eq!(a.status, 201);
    assert_eq!(a.json()["odata.editLink"], "Tables('Alpha')");
    for name in ["Beta", "Gamma"] {
        raw.create_table(name).await;
    }
    let a = raw
        .send(
            "POST",
            "Tables",
            &[("Content-Type", "application/json")],
            json!({ "TableName": "Beta" }).to_string(),
        )
        .await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (409, "TableAlreadyExists")
    );
    let a = raw
        .send(
            "POST",
            "Tables",
            &[("Content-Type", "application/json")],
            json!({ "TableName": "1bad" }).to_string(),
        )
        .await;
    assert_eq!(a.status, 400);

    let a = raw.send("GET", "Tables?$top=2", &[], "").await;
    let names: Vec<_> = a.json()["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["TableName"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["Alpha", "Beta"]);
    let next = a
        .header("x-ms-continuation-nexttablename")
        .unwrap()
        .to_owned();
    let a = raw
        .send(
            "GET",
            &format!("Tables?$top=2&NextTableName={next}"),
            &[],
            "",
        )
        .await;
    assert_eq!(a.json()["value"][0]["TableName"], "Gamma");
    assert!(a.header("x-ms-continuation-nexttablename").is_none());

    let a = raw
        .send("GET", "Tables?$filter=TableName%20eq%20'Gamma'", &[], "")
        .await;
    assert_eq!(a.json()["value"].as_array().unwrap().len(), 1);

    let a = raw.send("DELETE", "Tables('Beta')", &[], "").await;
    assert_eq!(a.status, 204);
    // As the service answers a delete of a missing table.
    let a = raw.send("DELETE", "Tables('Beta')", &[], "").await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (404, "ResourceNotFound")
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_refused_with_the_services_status_and_code() {
    let (server, raw) = start().await;
    raw.create_table("Bad").await;
    let entity = |extra: Value| {
        let mut e = json!({ "PartitionKey": "p", "RowKey": "r" });
        e.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        e
    };
    let many: serde_json::Map<String, Value> =
        (0..253).map(|i| (format!("P{i}"), json!(i))).collect();
    let huge: serde_json::Map<String, Value> = (0..17)
        .map(|i| {
            let b = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 65536]);
            (format!("B{i}"), json!(b))
        })
        .flat_map(|(k, v)| [(format!("{k}@odata.type"), json!("Edm.Binary")), (k, v)])
        .collect();
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            json!({ "PartitionKey": "p/", "RowKey": "r" }),
            400,
            "OutOfRangeInput",
        ),
        (
            json!({ "PartitionKey": "p", "RowKey": "r#" }),
            400,
            "OutOfRangeInput",
        ),
        (
            json!({ "PartitionKey": "p".repeat(1025), "RowKey": "r" }),
            400,
            "OutOfRangeInput",
        ),
        (
            entity(json!({ "L@odata.type": "Edm.Int64", "L": "five" })),
            400,
            "InvalidInput",
        ),
        (
            entity(json!({ "G@odata.type": "Edm.Guid", "G": "nope" })),
            400,
            "InvalidInput",
        ),
        (
            entity(json!({ "X@odata.type": "Edm.Whatever", "X": "1" })),
            400,
            "InvalidInput",
        ),
        (
            entity(json!({ "T@odata.type": "Edm.DateTime", "T": "1600-12-31T23:59:59Z" })),
            400,
            "OutOfRangeInput",
        ),
        (entity(json!({ "a-b": 1 })), 400, "PropertyNameInvalid"),
        (
            entity(json!({ "S": "x".repeat(32 * 1024 + 1) })),
            400,
            "PropertyValueTooLarge",
        ),
        (entity(Value::Object(many)), 400, "TooManyProperties"),
        (entity(Value::Object(huge)), 400, "EntityTooLarge"),
        (entity(json!({ "O": { "nested": 1 } })), 400, "InvalidInput"),
        (
            entity(json!({ "L@odata.type": "Edm.Int64", "L": 5 })),
            400,
            "InvalidInput",
        ),
        (
            entity(json!({ "L@odata.type": "Edm.Int64" })),
            400,
            "PropertiesNeedValue",
        ),
        (json!({ "RowKey": "r" }), 400, "InvalidInput"),
    ];
    for (body, status, code) in cases {
        let a = raw.insert("Bad", &body, &[]).await;
        assert_eq!(
            (a.status.as_u16(), a.code().as_str()),
            (status, code),
            "{}",
            &body.to_string()[..body.to_string().len().min(120)]
        );
    }
    // Not JSON, and a property given twice (which a JSON object cannot hold).
    let a = raw
        .send(
            "POST",
            "Bad",
            &[("Content-Type", "application/json")],
            "not json",
        )
        .await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (400, "InvalidInput")
    );
    let a = raw
        .send(
            "POST",
            "Bad",
            &[("Content-Type", "application/json")],
            r#"{"PartitionKey":"p","RowKey":"r","A":1,"A":2}"#,
        )
        .await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (400, "DuplicatePropertiesSpecified")
    );
    // The error body is the service's JSON: code, and the message with the
    // request id and time.
    let json = a.json();
    let message = json["odata.error"]["message"]["value"].as_str().unwrap();
    assert!(message.contains(&format!(
        "\nRequestId:{}\n",
        a.header("x-ms-request-id").unwrap()
    )));
    assert_eq!(json["odata.error"]["message"]["lang"], "en-US");

    // Nothing was stored by any of them.
    let a = raw.send("GET", "Bad()", &[], "").await;
    assert_eq!(a.json()["value"].as_array().unwrap().len(), 0);

    // A delete needs If-Match; $top is 1 to 1000; a missing entity is 404.
    let a = raw
        .send("DELETE", "Bad(PartitionKey='p',RowKey='r')", &[], "")
        .await;
    assert_eq!(a.status, 400);
    let a = raw.send("GET", "Bad()?$top=1001", &[], "").await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (400, "InvalidInput")
    );
    let a = raw
        .send("GET", "Bad(PartitionKey='p',RowKey='r')", &[], "")
        .await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (404, "ResourceNotFound")
    );
    let a = raw.send("GET", "Bad()?$filter=A%20eqq%201", &[], "").await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (400, "InvalidInput")
    );
    let a = raw
        .insert(
            "Missing",
            &json!({ "PartitionKey": "p", "RowKey": "r" }),
            &[],
        )
        .await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (404, "TableNotFound")
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn updates_merges_and_deletes_follow_if_match() {
    let (server, raw) = start().await;
    raw.create_table("Writes").await;
    // Keys with a quote and non-ASCII text travel as OData literals,
    // percent-encoded.
    let path = "Writes(PartitionKey='it%27%27s',RowKey='%C3%A9%2B1')";
    // Upsert by PUT (no If-Match), the body without its keys.
    let a = raw
        .send(
            "PUT",
            path,
            &[("Content-Type", "application/json")],
            r#"{"A":1,"B":"b"}"#,
        )
        .await;
    assert_eq!(a.status, 204, "{}", a.body);
    let first = a.header("etag").unwrap().to_owned();
    // MERGE tunnelled through POST, conditional on the ETag.
    let a = raw
        .send(
            "POST",
            path,
            &[
                ("Content-Type", "application/json"),
                ("X-HTTP-Method", "MERGE"),
                ("If-Match", &first),
            ],
            r#"{"C":true}"#,
        )
        .await;
    assert_eq!(a.status, 204, "{}", a.body);
    let second = a.header("etag").unwrap().to_owned();
    assert_ne!(first, second);
    let a = raw.send("GET", path, &[("Accept", NONE)], "").await;
    let body = a.json();
    assert_eq!(body["PartitionKey"], "it's");
    assert_eq!(body["RowKey"], "é+1");
    assert_eq!(
        (body["A"].clone(), body["B"].clone(), body["C"].clone()),
        (json!(1), json!("b"), json!(true))
    );
    // PATCH, as the Python SDK spells MERGE.
    let a = raw
        .send(
            "PATCH",
            path,
            &[("Content-Type", "application/json"), ("If-Match", "*")],
            r#"{"D":4}"#,
        )
        .await;
    assert_eq!(a.status, 204, "{}", a.body);
    let second = a.header("etag").unwrap().to_owned();
    let a = raw.send("GET", path, &[], "").await;
    assert_eq!(
        (a.json()["C"].clone(), a.json()["D"].clone()),
        (json!(true), json!(4))
    );
    // A stale ETag: 412, nothing changed.
    let a = raw
        .send(
            "PUT",
            path,
            &[("Content-Type", "application/json"), ("If-Match", &first)],
            r#"{"Z":1}"#,
        )
        .await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (412, "UpdateConditionNotSatisfied")
    );
    // An update of a missing entity: 404.
    let a = raw
        .send(
            "PUT",
            "Writes(PartitionKey='x',RowKey='y')",
            &[("Content-Type", "application/json"), ("If-Match", "*")],
            "{}",
        )
        .await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (404, "ResourceNotFound")
    );
    // $select keeps what it names, the ETag always.
    let a = raw.send("GET", &format!("{path}?$select=B"), &[], "").await;
    let mut keys: Vec<String> = a.json().as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["B", "odata.etag", "odata.metadata"]);
    let a = raw.send("DELETE", path, &[("If-Match", &first)], "").await;
    assert_eq!(a.status, 412);
    let a = raw.send("DELETE", path, &[("If-Match", &second)], "").await;
    assert_eq!(a.status, 204);
    let a = raw.send("GET", path, &[], "").await;
    assert_eq!(a.status, 404);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_query_continues_across_pages_with_the_services_tokens() {
    let (server, raw) = start().await;
    let storage = Storage::from_connection_string(&server.connection_string()).unwrap();
    let table = storage.table::<DynamicEntity>("Pages").unwrap();
    table.create_table().await.unwrap();
    for pk in ["a", "b/2", "é"] {
        for i in 0..5 {
            let e = DynamicEntity::new(pk.replace('/', "-"), format!("{i:02}")).with("N", i);
            table.insert(&e).await.unwrap();
        }
    }
    let mut seen = Vec::new();
    let mut next: Option<(String, String)> = None;
    let mut pages = 0;
    loop {
        let mut path = "Pages()?$top=4&$filter=N%20ge%201".to_owned();
        if let Some((pk, rk)) = &next {
            let enc = |s: &str| {
                percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC)
                    .to_string()
            };
            path.push_str(&format!(
                "&NextPartitionKey={}&NextRowKey={}",
                enc(pk),
                enc(rk)
            ));
        }
        let a = raw.send("GET", &path, &[], "").await;
        assert_eq!(a.status, 200, "{}", a.body);
        pages += 1;
        for e in a.json()["value"].as_array().unwrap() {
            seen.push(format!(
                "{}/{}",
                e["PartitionKey"].as_str().unwrap(),
                e["RowKey"].as_str().unwrap()
            ));
        }
        match (
            a.header("x-ms-continuation-nextpartitionkey"),
            a.header("x-ms-continuation-nextrowkey"),
        ) {
            (Some(pk), Some(rk)) => {
                assert!(pk.starts_with("1!"), "{pk}");
                next = Some((pk.to_owned(), rk.to_owned()));
            }
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    let want: Vec<String> = ["a", "b-2", "é"]
        .iter()
        .flat_map(|pk| (1..5).map(move |i| format!("{pk}/{i:02}")))
        .collect();
    assert_eq!(seen, want);
    // tablekit's client follows the same tokens.
    let all = table.query().page_size(2).fetch_all().await.unwrap();
    assert_eq!(all.len(), 15);
    // A token the server did not write is refused.
    let a = raw
        .send("GET", "Pages()?NextPartitionKey=garbage", &[], "")
        .await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (400, "InvalidInput")
    );
    server.shutdown().await.unwrap();
}

/// One operation of a raw batch: method, resource, extra headers, body.
type Op = (
    &'static str,
    String,
    Vec<(&'static str, &'static str)>,
    Option<String>,
);

/// A `$batch` body of one changeset with `ops`.
fn batch_body(base: &str, ops: &[Op]) -> (String, String) {
    let (b, c) = ("batch_t1", "changeset_t2");
    let mut out = format!("--{b}\r\nContent-Type: multipart/mixed; boundary={c}\r\n\r\n");
    for (method, resource, headers, body) in ops {
        out.push_str(&format!(
            "--{c}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n{method} {base}/{resource} HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\n"
        ));
        for (k, v) in headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        match body {
            Some(body) => out.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}\r\n",
                body.len()
            )),
            None => out.push_str("\r\n"),
        }
    }
    out.push_str(&format!("--{c}--\r\n--{b}--\r\n"));
    (format!("multipart/mixed; boundary={b}"), out)
}

async fn send_batch(raw: &Raw, ops: &[Op]) -> Answer {
    let (ct, body) = batch_body(&raw.base, ops);
    raw.send("POST", "$batch", &[("Content-Type", &ct)], body)
        .await
}

fn ins(
    rk: &str,
) -> (
    &'static str,
    String,
    Vec<(&'static str, &'static str)>,
    Option<String>,
) {
    (
        "POST",
        "Batch".to_owned(),
        vec![("Prefer", "return-no-content")],
        Some(json!({ "PartitionKey": "p", "RowKey": rk }).to_string()),
    )
}

#[tokio::test]
async fn a_batch_is_answered_in_the_services_multipart() {
    let (server, raw) = start().await;
    raw.create_table("Batch").await;
    let a = send_batch(
        &raw,
        &[
            ins("1"),
            (
                "POST",
                "Batch".to_owned(),
                vec![],
                Some(json!({ "PartitionKey": "p", "RowKey": "2", "X": 1 }).to_string()),
            ),
            (
                "MERGE",
                "Batch(PartitionKey='p',RowKey='3')".to_owned(),
                vec![],
                Some("{}".to_owned()),
            ),
        ],
    )
    .await;
    assert_eq!(a.status, 202, "{}", a.body);
    let ct = a.header("content-type").unwrap();
    let boundary = ct.strip_prefix("multipart/mixed; boundary=").unwrap();
    assert!(boundary.starts_with("batchresponse_"), "{ct}");
    let body = &a.body;
    assert!(body.starts_with(&format!(
        "--{boundary}\r\nContent-Type: multipart/mixed; boundary=changesetresponse_"
    )));
    assert!(body.ends_with(&format!("--{boundary}--\r\n")));
    assert_eq!(
        body.matches("Content-Type: application/http\r\n").count(),
        3
    );
    assert_eq!(body.matches("HTTP/1.1 204 No Content\r\n").count(), 2);
    assert_eq!(body.matches("HTTP/1.1 201 Created\r\n").count(), 1);
    assert_eq!(body.matches("\r\nETag: W/\"datetime'").count(), 3);
    assert!(body.contains(&format!(
        "Location: {}/Batch(PartitionKey='p',RowKey='1')\r\n",
        raw.base
    )));
    // The 201 carries the entity as inserted.
    assert!(body.contains("\"RowKey\":\"2\",\"Timestamp\":"), "{body}");
    let all = raw.send("GET", "Batch()", &[], "").await;
    assert_eq!(all.json()["value"].as_array().unwrap().len(), 3);

    // A failure: the failing operation's answer alone, its index first in
    // the message; nothing of the batch applied.
    let a = send_batch(&raw, &[ins("4"), ins("1")]).await;
    assert_eq!(a.status, 202);
    assert!(a.body.contains("HTTP/1.1 409 Conflict\r\n"), "{}", a.body);
    assert!(a.body.contains("\"code\":\"EntityAlreadyExists\""));
    assert!(a
        .body
        .contains("\"value\":\"1:The specified entity already exists."));
    assert!(!a.body.contains("ETag"));
    let four = raw
        .send("GET", "Batch(PartitionKey='p',RowKey='4')", &[], "")
        .await;
    assert_eq!(four.status, 404);

    // What the service refuses: two partitions, one row twice, a query in
    // the changeset, more than 100 operations, a delete without If-Match.
    let other = (
        "POST",
        "Batch".to_owned(),
        vec![("Prefer", "return-no-content")],
        Some(json!({ "PartitionKey": "q", "RowKey": "9" }).to_string()),
    );
    let get = (
        "GET",
        "Batch(PartitionKey='p',RowKey='1')".to_owned(),
        vec![],
        None,
    );
    let delete = (
        "DELETE",
        "Batch(PartitionKey='p',RowKey='1')".to_owned(),
        vec![],
        None,
    );
    let many: Vec<_> = (0..101).map(|i| ins(&format!("m{i}"))).collect();
    for (ops, status, code, index) in [
        (
            vec![ins("5"), other],
            "400",
            "CommandsInBatchActOnDifferentPartitions",
            "1:",
        ),
        (
            vec![ins("5"), ins("6"), ins("5")],
            "400",
            "InvalidDuplicateRow",
            "2:",
        ),
        (vec![ins("5"), get], "400", "InvalidInput", "1:"),
        (many, "400", "InvalidInput", "99:"),
        (vec![delete], "400", "MissingRequiredHeader", "0:"),
    ] {
        // The failing operation's answer in the changeset's, as the store's
        // refusals come.
        let a = send_batch(&raw, &ops).await;
        assert_eq!(a.status, 202, "{code}: {}", a.body);
        for part in [
            format!("HTTP/1.1 {status} "),
            format!("\"code\":\"{code}\""),
            format!("\"value\":\"{index}"),
        ] {
            assert!(a.body.contains(&part), "{code}: {}", a.body);
        }
    }
    let a = raw.send("GET", "Batch()", &[], "").await;
    assert_eq!(a.json()["value"].as_array().unwrap().len(), 3);

    // A second changeset: the service carries out only one; refused whole.
    let (ct, one) = batch_body(&raw.base, &[ins("7")]);
    let (_, two) = batch_body(&raw.base, &[ins("8")]);
    let second = two
        .replace("batch_t1", "batch_t9")
        .replace("changeset_t2", "changeset_t3");
    let inner = second
        .strip_prefix("--batch_t9\r\n")
        .unwrap()
        .strip_suffix("--batch_t9--\r\n")
        .unwrap();
    let body = one.replace(
        "--batch_t1--\r\n",
        &format!("--batch_t1\r\n{inner}--batch_t1--\r\n"),
    );
    let a = raw
        .send("POST", "$batch", &[("Content-Type", &ct)], body)
        .await;
    assert!(a.body.contains("HTTP/1.1 400 "), "{}", a.body);
    assert!(a.body.contains("\"value\":\"1:"), "{}", a.body);
    let a = raw.send("GET", "Batch()", &[], "").await;
    assert_eq!(a.json()["value"].as_array().unwrap().len(), 3);

    // Not a multipart, and over 4 MiB.
    let a = raw
        .send(
            "POST",
            "$batch",
            &[("Content-Type", "application/json")],
            "{}",
        )
        .await;
    assert_eq!(a.status, 400);
    let a = raw
        .send(
            "POST",
            "$batch",
            &[("Content-Type", "multipart/mixed; boundary=batch_x")],
            vec![b'x'; 4 * 1024 * 1024 + 1],
        )
        .await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (413, "RequestBodyTooLarge")
    );
    server.shutdown().await.unwrap();
}

/// tablekit's clients over HTTP: what they write and read, the types of
/// every value, transactions, policies, the service's settings and stats.
#[tokio::test]
async fn tablekits_clients_work_against_the_server() {
    use tablekit::account::TableSasPermissions;
    use tablekit::acl::StoredAccessPolicy;
    let server = Server::builder().ports(0, 0, 0).start().await.unwrap();
    let storage = Storage::from_connection_string(&server.connection_string()).unwrap();
    let table = storage.table::<DynamicEntity>("Clients").unwrap();
    table.create_table().await.unwrap();
    let e = DynamicEntity::new("p", "r")
        .with("S", "é \"q\" 😀")
        .with("I", 7)
        .with("L", 1_i64 << 40)
        .with("D", 2.0)
        .with("N", f64::NEG_INFINITY)
        .with("B", vec![0u8, 255])
        .with("G", uuid::Uuid::from_u128(42))
        .with(
            "T",
            tablekit::edm::parse_datetime("2020-07-23T21:20:41.6667782Z").unwrap(),
        )
        .with("F", false);
    let written = table.insert(&e).await.unwrap();
    let back = table.get(("p", "r")).await.unwrap().unwrap();
    assert_eq!(back.properties, e.properties);
    assert_eq!(back.etag.as_ref(), Some(written.etag()));
    assert_eq!(back.timestamp, written.timestamp());
    let selected = table
        .get(("p", "r"))
        .select(["I"])
        .send()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(selected.get("I"), Some(&EdmValue::Int32(7)));
    assert!(selected.get("S").is_none());

    let mut tx = table.transaction();
    tx.insert(&DynamicEntity::new("p", "t1")).unwrap();
    tx.upsert(
        &DynamicEntity::new("p", "t2").with("A", 1),
        tablekit::UpdateMode::Merge,
    )
    .unwrap();
    tx.delete(("p", "r"), tablekit::IfMatch::Any).unwrap();
    let outcome = tx.send().await.unwrap();
    assert!(outcome.etag(0).is_some() && outcome.etag(1).is_some());
    assert!(table.get(("p", "r")).await.unwrap().is_none());
    let mut tx = table.transaction();
    tx.insert(&DynamicEntity::new("p", "t3")).unwrap();
    tx.insert(&DynamicEntity::new("p", "t1")).unwrap();
    let err = tx.send().await.unwrap_err();
    assert_eq!(err.status(), Some(409));
    assert_eq!(err.batch_index(), Some(1));
    assert!(table.get(("p", "t3")).await.unwrap().is_none());

    let policies = vec![StoredAccessPolicy::new("readers")
        .permissions(TableSasPermissions::READ_ONLY)
        .expiry(
            chrono::DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
                .unwrap()
                .to_utc(),
        )];
    table.set_access_policies(&policies).await.unwrap();
    assert_eq!(table.access_policies().await.unwrap(), policies);

    let svc = storage.tables().unwrap();
    let mut props = svc.service_properties().await.unwrap();
    props.cors = Some(vec![tablekit::service_properties::CorsRule::new(
        ["https://example.com"],
        ["GET"],
        60,
    )]);
    svc.set_service_properties(&props).await.unwrap();
    assert_eq!(svc.service_properties().await.unwrap().cors, props.cors);
    let stats = svc.service_stats().await.unwrap();
    assert_eq!(
        stats.status(),
        tablekit::service_properties::GeoReplicationStatus::Live
    );
    table.delete_table().await.unwrap();
    server.shutdown().await.unwrap();
}

/// The service's settings and stats in its XML, stats also where the
/// Python SDK asks for them (the secondary account, then the account again
/// in the path).
#[tokio::test]
async fn service_properties_and_stats_answer_in_xml() {
    let (server, raw) = start().await;
    let a = raw
        .send("GET", "?restype=service&comp=properties", &[], "")
        .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), Some("application/xml"));
    assert!(a.body.contains("<StorageServiceProperties>"), "{}", a.body);
    let a = raw
        .send("PUT", "?restype=service&comp=properties", &[], "<nope")
        .await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (400, "InvalidXmlDocument")
    );
    let secondary = Raw {
        http: reqwest::Client::new(),
        base: format!("http://{}/{DEV_ACCOUNT}-secondary", server.table_address()),
        signed_path: None,
    };
    // As the Python SDK sends it: `/<account>-secondary` put before the
    // primary's path after the request was signed over it.
    let python = Raw {
        http: reqwest::Client::new(),
        base: secondary.base.clone(),
        signed_path: Some(format!("/{DEV_ACCOUNT}/")),
    };
    for (client, path) in [
        (&secondary, "?restype=service&comp=stats".to_owned()),
        (
            &secondary,
            format!("{DEV_ACCOUNT}/?restype=service&comp=stats"),
        ),
        (
            &python,
            format!("{DEV_ACCOUNT}/?restype=service&comp=stats"),
        ),
    ] {
        let a = client.send("GET", &path, &[], "").await;
        assert_eq!(a.status, 200, "{path}: {}", a.body);
        assert!(
            a.body
                .contains("<GeoReplication><Status>live</Status><LastSyncTime>"),
            "{}",
            a.body
        );
    }
    // Signed over a path that is neither: refused.
    let wrong = Raw {
        signed_path: Some(format!("/{DEV_ACCOUNT}/Tables")),
        ..python
    };
    let a = wrong
        .send(
            "GET",
            &format!("{DEV_ACCOUNT}/?restype=service&comp=stats"),
            &[],
            "",
        )
        .await;
    assert_eq!(
        (a.status.as_u16(), a.code().as_str()),
        (403, "AuthenticationFailed")
    );
    server.shutdown().await.unwrap();
}

/// The interpreter of the official SDKs' venv (`scripts/test.sh` makes it
/// from `tools/python/serve-requirements.txt`): `None`, with a banner,
/// without it, and a failure when `CI=true`, as `serve_python` does.
fn interop_python() -> Option<std::path::PathBuf> {
    const VAR: &str = "TABLEKIT_SERVE_PYTHON";
    match std::env::var(VAR) {
        Ok(p) if !p.trim().is_empty() => Some(p.into()),
        _ => {
            assert!(
                !std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true")),
                "{VAR} is not set but CI=true: the Python SDK interop needs the SDKs' venv \
                 (scripts/test.sh makes it)"
            );
            eprintln!(
                "\n=========== Python table SDK interop SKIPPED ===========\n\
                 {VAR} is not set: azure-data-tables was not run against the server.\n\
                 Make the venv: python3 -m venv target/serve-venv && \\\n  \
                 target/serve-venv/bin/pip install --no-deps -r tools/python/serve-requirements.txt\n\
                 and set {VAR}=target/serve-venv/bin/python\n\
                 ========================================================\n"
            );
            None
        }
    }
}

/// The official Python SDK (azure-data-tables) against the server: every
/// call it makes is answered in a form it reads, as Azure answers it (the
/// script asserts each answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_is_answered_as_azure_answers_it() {
    let Some(python) = interop_python() else {
        return;
    };
    let server = Server::builder().ports(0, 0, 0).start().await.unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/integration/python/table_sdk_interop.py"
    );
    let connection = server.connection_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python)
            .arg(script)
            .env("TABLEKIT_SERVED_CONNECTION_STRING", connection)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", python.display()))
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the Python SDK's run failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    server.shutdown().await.unwrap();
}
