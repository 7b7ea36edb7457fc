//! What errors keep for the caller: a malformed raw filter reports where it
//! broke and what was expected there, as a typed value rather than a string.

use tablekit::filter::ParseError;
use tablekit::{DynamicEntity, ValidationError};

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
