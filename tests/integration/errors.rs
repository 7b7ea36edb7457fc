//! What errors keep for the caller: a malformed raw filter reports where it
//! broke and what was expected there, as a typed value rather than a string.

use tablekit::filter::ParseError;
use tablekit::{error::ValidationError, DynamicEntity};

use crate::common;

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

crate::both! {
    async fn a_stored_value_a_derived_field_cannot_hold_keeps_its_cause(svc, backend) {
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
