//! The spans of the Azure SDK conventions (`tablekit::observe`'s docs): one
//! `tablekit.request` span per public call (`otel.name` such as
//! `TableClient.insert`), on the HTTP backend and the embedded store alike,
//! and one span per HTTP attempt, named by its method, with the standard
//! attributes; nothing secret (a SAS signature, a bearer token, an account
//! key) and nothing of an entity in any span or event.

use std::sync::Arc;

use crate::common;
use crate::scripted::{self, answer};

use tablekit::account::{AccessToken, EntraCredential, TokenCredential, TokenRequest};
use tablekit::options::RetryPolicy;
use tablekit::{Account, Credential, DynamicEntity, IfMatch, TableServiceClient, UpdateMode};
use tablekit_test_support::{field, Recorder, SpanRecord};

/// The spans named `name`.
fn named<'a>(spans: &'a [SpanRecord], name: &str) -> Vec<&'a [(String, String)]> {
    spans
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, f)| f.as_slice())
        .collect()
}

#[test]
fn requests_are_a_call_span_and_attempt_spans_with_the_standard_attributes() {
    let Some(svc) = common::service() else { return };
    let recorder = Recorder::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(recorder.clone(), || {
        rt.block_on(async {
            let table = common::fresh_table::<DynamicEntity>(&svc, "Traced").await;
            table
                .insert(&DynamicEntity::new("p", "r").with("Secret", "entity-content-xyz"))
                .await
                .unwrap();
            let missing = table.delete(("p", "nope"), IfMatch::Any).await.unwrap_err();
            assert!(missing.is_not_found());
            common::drop_table(&table).await;
        })
    });

    let spans = recorder.spans();
    let calls = named(&spans, "tablekit.request");
    let insert = calls
        .iter()
        .find(|f| field(f, "otel.name") == Some("TableClient.insert"))
        .expect("an insert span");
    assert_eq!(field(insert, "otel.kind"), Some("internal"));
    assert_eq!(field(insert, "az.namespace"), Some("Microsoft.Tables"));
    assert_eq!(field(insert, "tablekit.operation"), Some("insert"));
    assert!(field(insert, "tablekit.table").is_some_and(|t| t.starts_with("Traced")));
    assert_eq!(field(insert, "error.type"), None);

    let post = named(&spans, "POST");
    let post = post
        .iter()
        .find(|f| field(f, "url.full").is_some_and(|u| u.contains("/Traced")))
        .expect("the insert's attempt");
    assert_eq!(field(post, "http.response.status_code"), Some("204"));
    assert_eq!(field(post, "otel.kind"), Some("client"));
    assert_eq!(field(post, "http.request.method"), Some("POST"));
    assert_eq!(field(post, "az.namespace"), Some("Microsoft.Tables"));
    assert_eq!(field(post, "server.address"), Some("127.0.0.1"));
    assert!(field(post, "server.port").is_some_and(|p| p.parse::<u16>().is_ok()));
    assert!(field(post, "az.client_request_id").is_some_and(|id| id.len() == 36));
    assert!(field(post, "az.service_request.id").is_some_and(|id| !id.is_empty()));
    let url = field(post, "url.full").unwrap_or("");
    assert!(
        url.starts_with("http://127.0.0.1:") && url.contains("/Traced"),
        "{url}"
    );
    assert_eq!(field(post, "http.request.resend_count"), None);

    let delete = calls
        .iter()
        .find(|f| field(f, "otel.name") == Some("TableClient.delete"))
        .expect("a delete span");
    assert_eq!(field(delete, "error.type"), Some("404"));
    assert_eq!(field(delete, "otel.status_code"), Some("ERROR"));
    let attempt = named(&spans, "DELETE");
    let attempt = attempt
        .iter()
        .find(|f| field(f, "http.response.status_code") == Some("404"))
        .expect("the delete's attempt");
    assert_eq!(field(attempt, "error.type"), Some("404"));

    let everything = format!("{spans:?} {:?}", recorder.events());
    assert!(!everything.contains(common::KEY_FRAGMENT), "no account key");
    assert!(!everything.contains("SharedKey"), "no signature");
    assert!(
        !everything.contains("entity-content-xyz"),
        "no entity values"
    );
}

/// The embedded store's calls have the same public-call spans (and no
/// attempts): a trace looks the same in tests and in production.
#[test]
fn the_embedded_store_emits_the_same_call_spans() {
    let recorder = Recorder::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(recorder.clone(), || {
        rt.block_on(async {
            let svc = TableServiceClient::embedded();
            let table = svc.table::<DynamicEntity>("Local").unwrap();
            table.create_table().await.unwrap();
            table
                .insert(&DynamicEntity::new("p", "r").with("Secret", "entity-content-xyz"))
                .await
                .unwrap();
            let mut tx = table.transaction();
            tx.insert(&DynamicEntity::new("p", "r2")).unwrap();
            tx.send().await.unwrap();
            let _ = table.get(("p", "nope")).await.unwrap();
            table
                .insert(&DynamicEntity::new("p", "r"))
                .await
                .expect_err("a conflict");
        })
    });
    let spans = recorder.spans();
    let names: Vec<_> = named(&spans, "tablekit.request")
        .iter()
        .map(|f| field(f, "otel.name").unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "TableClient.create_table",
            "TableClient.insert",
            "Transaction.send",
            "TableClient.get",
            "TableClient.insert"
        ]
    );
    let last = named(&spans, "tablekit.request")[4];
    assert_eq!(field(last, "error.type"), Some("409"));
    assert_eq!(field(last, "tablekit.table"), Some("Local"));
    assert!(
        spans.iter().all(|(n, _)| n == "tablekit.request"),
        "no attempts"
    );
    let everything = format!("{spans:?} {:?}", recorder.events());
    assert!(!everything.contains("entity-content-xyz"));
}

/// A token credential handing out one known bearer token.
#[derive(Debug)]
struct Token;

const TOKEN: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJub25lIn0.c2VjcmV0LWJlYXJlcg.c2ln";

#[async_trait::async_trait]
impl TokenCredential for Token {
    async fn get_token(&self, _: &TokenRequest) -> tablekit::Result<AccessToken> {
        Ok(AccessToken::new(
            TOKEN,
            chrono::Utc::now() + chrono::Duration::hours(1),
        ))
    }
}

const SIG: &str = "c2VjcmV0LXNpZ25hdHVyZQ%3D%3D";

/// Neither a SAS signature nor a bearer token appears in any span or event,
/// while the attempts (one retried) are traced: `url.full` says
/// `sig=REDACTED`, and headers are never recorded.
#[tokio::test]
async fn no_sas_signature_or_bearer_token_in_any_span_or_event() {
    let script: scripted::Script = Arc::new(|n, _| match n % 2 {
        0 => answer("503 Server Busy", &[], ""),
        _ => answer("204 No Content", &[("ETag", "W/\"1\"")], ""),
    });
    let (endpoint, seen) = scripted::serve(script).await;
    let sas = Account::from_connection_string(&format!(
        "TableEndpoint={endpoint};SharedAccessSignature=sv=2019-02-02&tn=tee&sp=raud&se=2099-01-01&sig={SIG}"
    ))
    .unwrap();
    let bearer = Account::from_connection_string(&format!(
        "AccountName=devstoreaccount1;TableEndpoint={endpoint}"
    ))
    .unwrap()
    .with_credential(Credential::Bearer(EntraCredential::from_arc(Arc::new(
        Token,
    ))));
    let recorder = Recorder::default();
    let guard = tracing::subscriber::set_default(recorder.clone());
    for account in [sas, bearer] {
        let mut options = common::client_options();
        options.http.retry = RetryPolicy {
            max_retries: 2,
            base_delay: std::time::Duration::from_millis(1),
            max_delay: std::time::Duration::from_millis(1),
        };
        let svc = TableServiceClient::with_options(account, options).unwrap();
        let table = svc.table::<DynamicEntity>("tee").unwrap();
        table
            .upsert(&DynamicEntity::new("p", "r"), UpdateMode::Replace)
            .await
            .expect("the second attempt");
    }
    drop(guard);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4, "two attempts of each call");
    assert!(seen[0].target().contains(SIG), "the SAS was sent");
    assert!(seen[2]
        .header("authorization")
        .is_some_and(|a| a.contains(TOKEN)));

    let spans = recorder.spans();
    let attempts = named(&spans, "PUT");
    assert_eq!(attempts.len(), 4);
    assert!(field(attempts[0], "url.full").is_some_and(|u| u.contains("sig=REDACTED")));
    assert_eq!(field(attempts[1], "http.request.resend_count"), Some("1"));
    let everything = format!("{spans:?} {:?}", recorder.events());
    assert!(!everything.contains(SIG), "no SAS signature: {everything}");
    assert!(
        !everything.contains("c2VjcmV0"),
        "nothing of the signature: {everything}"
    );
    assert!(!everything.contains(TOKEN), "no bearer token: {everything}");
    assert!(!everything.contains("c2VjcmV0LWJlYXJlcg"));
}

/// Queue and blob calls have their public-call spans on the embedded store
/// too (the HTTP backends' attempts are children of the same spans).
#[test]
fn embedded_queue_and_blob_calls_have_call_spans() {
    let recorder = Recorder::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(recorder.clone(), || {
        rt.block_on(async {
            let jobs = tablekit::QueueServiceClient::embedded()
                .queue("jobs")
                .unwrap();
            jobs.create_queue().await.unwrap();
            jobs.send("job 1").await.unwrap();
            let photos = tablekit::BlobServiceClient::embedded()
                .container("photos")
                .unwrap();
            photos.create_container().await.unwrap();
            photos.blob("a.txt").unwrap().upload("hello").await.unwrap();
        })
    });
    let spans = recorder.spans();
    let calls: Vec<(String, String)> = named(&spans, "tablekit.request")
        .iter()
        .map(|f| {
            (
                field(f, "otel.name").unwrap_or("").to_owned(),
                field(f, "az.namespace").unwrap_or("").to_owned(),
            )
        })
        .collect();
    let storage = "Microsoft.Storage".to_owned();
    assert_eq!(
        calls,
        [
            ("QueueClient.create_queue".to_owned(), storage.clone()),
            ("QueueClient.send_message".to_owned(), storage.clone()),
            ("BlobClient.create_container".to_owned(), storage.clone()),
            ("BlobClient.put_blob".to_owned(), storage),
        ]
    );
}
