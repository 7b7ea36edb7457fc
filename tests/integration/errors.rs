//! What errors keep for the caller: a malformed raw filter reports where it
//! broke and what was expected there, as a typed value rather than a string;
//! a refused request shows the service's own reason.

use std::sync::Arc;

use tablekit::filter::ParseError;
use tablekit::{error::ValidationError, Account, DynamicEntity};
use tablekit::{QueueServiceClient, TableServiceClient};

use crate::common;
use crate::scripted::{self, answer};

#[tokio::test]
async fn a_malformed_raw_filter_keeps_its_position_and_expectation() {
    let text = "PartitionKey eq 'p1' and (Rating gt 3";
    let err = common::offline_table::<DynamicEntity>()
        .query()
        .filter_raw(text)
        .fetch_all()
        .await
        .expect_err("the filter does not parse");
    common::assert_invalid(&err);
    let Some(ValidationError::Filter(parse)) = err.validation() else {
        panic!("expected a filter parse error, got {err:?}");
    };
    let parse: &ParseError = parse;
    assert_eq!(parse.position(), text.len());
    assert_eq!(parse.column(), text.chars().count() + 1);
    assert_eq!(parse.expected(), Some("`)`"));
    assert!(
        err.to_string().contains(&format!("at byte {}", text.len())),
        "{err}"
    );
}

#[tokio::test]
async fn a_filter_with_a_stray_word_says_what_could_follow() {
    let err = common::offline_table::<DynamicEntity>()
        .query()
        .filter_raw("Rating gt 3 Rating")
        .fetch_all()
        .await
        .unwrap_err();
    match err.validation() {
        Some(ValidationError::Filter(p)) => {
            assert_eq!(p.position(), 12);
            assert_eq!(p.expected(), Some("`and`, `or` or the end"));
        }
        other => panic!("{other:?}"),
    }
}

/// What a newer writer stored, read by an older reader with narrower fields.
#[derive(tablekit::TableEntity, Debug)]
#[tablekit(partition_key = "{pk}", row_key = "{rk}")]
struct Narrow {
    pk: String,
    rk: String,
    small: u8,
}

#[derive(tablekit::TableEntity, Debug)]
#[tablekit(partition_key = "{pk}", row_key = "{rk}")]
struct WithJson {
    pk: String,
    rk: String,
    #[tablekit(json)]
    tags: Vec<String>,
}

/// The underlying error a decode error keeps as its `source()`.
fn cause<E: std::error::Error + 'static>(err: &tablekit::Error) -> &E {
    let source = std::error::Error::source(err).unwrap_or_else(|| panic!("{err} has no source"));
    source
        .downcast_ref::<E>()
        .unwrap_or_else(|| panic!("{err}: the source {source:?} is not the expected type"))
}

tablekit::testing::conformance! {
    async fn a_stored_value_a_derived_field_cannot_hold_keeps_its_cause(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Decode").await;
        t.insert(
            &DynamicEntity::new("p", "wide")
                .with("Small", 300)
                .with("Tags", "not JSON"),
        )
        .await
        .unwrap();

        let err = t.with_type::<Narrow>().get(("p", "wide")).await.unwrap_err();
        assert!(err.to_string().contains("\"Small\""), "{err}");
        assert!(err.to_string().contains("300 does not fit"), "{err}");
        cause::<std::num::TryFromIntError>(&err);

        let err = t.with_type::<WithJson>().get(("p", "wide")).await.unwrap_err();
        assert!(err.to_string().contains("\"Tags\""), "{err}");
        assert!(cause::<serde_json::Error>(&err).is_syntax());
        common::drop_table(&t).await;
    }
}

/// A 403 shows the reason the service gives beside its message
/// (`AuthenticationErrorDetail`): in the Table service's JSON, as Azurite
/// writes it, and in the Queue service's XML, as Azure writes it.
#[tokio::test]
async fn a_403_shows_the_services_reason() {
    let (endpoint, seen) = scripted::serve(Arc::new(|_, s: &scripted::Seen| {
        if s.target().contains("/Tables") {
            answer(
                "403 Server failed to authenticate the request",
                &[("x-ms-error-code", "AuthenticationFailed")],
                r#"{"odata.error":{"code":"AuthenticationFailed","message":{"lang":"en-US","value":"Server failed to authenticate the request. Make sure the value of the Authorization header is formed correctly including the signature.\nRequestId:r1\nTime:2026-11-29T00:00:00Z"},"AuthenticationErrorDetail":"Invalid token audience."}}"#,
            )
        } else {
            let body = "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed</Code>\
                <Message>Server failed to authenticate the request. Make sure the value of the Authorization header is formed correctly including the signature.\n\
                RequestId:r2\nTime:2026-11-29T00:00:00Z</Message>\
                <AuthenticationErrorDetail>Lifetime validation failed. The token is expired.</AuthenticationErrorDetail></Error>";
            format!(
                "HTTP/1.1 403 Server failed to authenticate the request\r\nConnection: close\r\n\
                 x-ms-request-id: r2\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        }
    }))
    .await;
    let account = Account::from_connection_string(&format!(
        "AccountName=devstoreaccount1;AccountKey=c2VjcmV0LWtleQ==;TableEndpoint={endpoint};QueueEndpoint={endpoint}",
    ))
    .unwrap();
    let mut options = common::client_options();
    options.http.retry = tablekit::options::RetryPolicy::none();

    let tables = TableServiceClient::with_options(account.clone(), options.clone()).unwrap();
    let err = tables.create_table("Refused").await.unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");
    assert_eq!(
        err.to_string(),
        "the service answered 403 AuthenticationFailed: Server failed to authenticate the request. \
         Make sure the value of the Authorization header is formed correctly including the signature. \
         Invalid token audience. (request id scripted)"
    );

    let queue = QueueServiceClient::with_options(account, options)
        .unwrap()
        .queue("refused")
        .unwrap();
    let err = queue.create_queue().await.unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");
    assert!(
        err.to_string().contains(
            "including the signature. Lifetime validation failed. The token is expired. (request id r2)"
        ),
        "{err}"
    );
    assert_eq!(seen.lock().unwrap().len(), 2);
}
