//! Schema evolution from the 2009 Windows Azure Table paper, with derived types
//! against Azurite: readers ignore properties they do not know, an upgrade hook
//! moves an old field into a new one when an entity is read (upgrade on access),
//! and a Replace write removes the dropped property.

use crate::common;

use futures::TryStreamExt;
use tablekit::{entity::RawEntity, DynamicEntity, EdmValue, IfMatch, TableEntity, UpdateMode};

/// The first version: a blog post with a rating.
#[derive(TableEntity, Debug, Clone, PartialEq)]
struct BlogV1 {
    #[tablekit(partition_key)]
    channel: String,
    #[tablekit(row_key)]
    posted: String,
    text: String,
    rating: i32,
}

/// The paper's BlogV2: `Rating` removed.
#[derive(TableEntity, Debug, Clone, PartialEq)]
struct BlogV2 {
    #[tablekit(partition_key)]
    channel: String,
    #[tablekit(row_key)]
    posted: String,
    text: String,
    #[tablekit(etag)]
    etag: Option<tablekit::ETag>,
}

/// A strict reader: a property it does not know is an error.
#[derive(TableEntity, Debug)]
#[tablekit(deny_unknown)]
struct StrictBlog {
    #[tablekit(partition_key)]
    channel: String,
    #[tablekit(row_key)]
    posted: String,
    text: String,
}

/// Version 2 of the schema: `Rating` (Int32, 1 to 5) became `Stars` (Int64,
/// out of 10); entities stored before (no version property: version 0) are
/// upgraded when read.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(version = 2, upgrade = "BlogV3::upgrade")]
struct BlogV3 {
    #[tablekit(partition_key)]
    channel: String,
    #[tablekit(row_key)]
    posted: String,
    text: String,
    #[tablekit(default)]
    stars: i64,
    #[tablekit(etag)]
    etag: Option<tablekit::ETag>,
}

impl BlogV3 {
    fn upgrade(raw: &RawEntity<'_>, stored_version: i32) -> tablekit::Result<Self> {
        assert_eq!(
            stored_version, 0,
            "entities written by BlogV1 carry no version"
        );
        let mut blog = Self::decode_current_schema(raw)?;
        if let Some(rating) = raw.get("Rating") {
            blog.stars = i64::from(rating.to_i32()?) * 2;
        }
        Ok(blog)
    }
}

fn v1(posted: &str, rating: i32) -> BlogV1 {
    BlogV1 {
        channel: "Channel9".into(),
        posted: posted.into(),
        text: "Hello".into(),
        rating,
    }
}

#[tokio::test]
async fn a_reader_without_rating_reads_entities_that_have_it() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<BlogV1>(&svc, "Evolve").await;
    t.insert(&v1("a", 3)).await.unwrap();

    let v2 = t.with_type::<BlogV2>();
    let read = v2.get(("Channel9", "a")).await.unwrap().expect("stored");
    assert_eq!(read.text, "Hello");

    let strict = t
        .with_type::<StrictBlog>()
        .get(("Channel9", "a"))
        .await
        .unwrap_err();
    assert!(strict.to_string().contains("\"Rating\""), "{strict}");
    common::drop_table(&t).await;
}

#[tokio::test]
async fn replace_removes_the_dropped_property_and_merge_keeps_it() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<BlogV1>(&svc, "Evolve").await;
    t.insert(&v1("merge", 3)).await.unwrap();
    t.insert(&v1("replace", 4)).await.unwrap();
    let v2 = t.with_type::<BlogV2>();

    // The paper's migration: query into BlogV2, update each.
    let all: Vec<BlogV2> = v2.query().stream().try_collect().await.unwrap();
    assert_eq!(all.len(), 2);
    for mut b in all {
        let mode = if b.posted == "merge" {
            UpdateMode::Merge
        } else {
            UpdateMode::Replace
        };
        let etag = b.etag.clone().expect("query results carry the ETag");
        b.text = "Hi there".into();
        v2.update(&mut b, mode, IfMatch::ETag(etag)).await.unwrap();
    }

    let raw = t.with_type::<DynamicEntity>();
    let merged = raw.get(("Channel9", "merge")).await.unwrap().unwrap();
    assert_eq!(
        merged.get("Rating"),
        Some(&EdmValue::Int32(3)),
        "Merge keeps Rating"
    );
    assert_eq!(merged.get("Text"), Some(&EdmValue::from("Hi there")));
    let replaced = raw.get(("Channel9", "replace")).await.unwrap().unwrap();
    assert_eq!(replaced.get("Rating"), None, "Replace removes Rating");
    assert_eq!(replaced.get("Text"), Some(&EdmValue::from("Hi there")));
    common::drop_table(&t).await;
}

#[tokio::test]
async fn the_upgrade_hook_moves_the_old_field_on_access() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<BlogV1>(&svc, "Evolve").await;
    t.insert(&v1("old", 4)).await.unwrap();
    let v3 = t.with_type::<BlogV3>();

    let mut b = v3.get(("Channel9", "old")).await.unwrap().expect("stored");
    assert_eq!(b.stars, 8, "Rating 4 of 5 became 8 of 10");

    // Writing stores the current version (and, with Replace, drops Rating).
    let etag = b.etag.clone().unwrap();
    v3.update(&mut b, UpdateMode::Replace, IfMatch::ETag(etag))
        .await
        .unwrap();
    let stored = t
        .with_type::<DynamicEntity>()
        .get(("Channel9", "old"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.get(BlogV3::VERSION_PROPERTY),
        Some(&EdmValue::Int32(2))
    );
    assert_eq!(stored.get("Stars"), Some(&EdmValue::Int64(8)));
    assert_eq!(stored.get("Rating"), None);

    // A current entity is read without the hook.
    let again = v3.get(("Channel9", "old")).await.unwrap().unwrap();
    assert_eq!(again.stars, 8);

    // The background upgrade finds old entities by version.
    t.insert(&v1("older", 1)).await.unwrap();
    let pending: Vec<DynamicEntity> = t
        .with_type::<DynamicEntity>()
        .query()
        .filter_raw(format!(
            "{} lt {}",
            BlogV3::VERSION_PROPERTY,
            BlogV3::SCHEMA_VERSION
        ))
        .stream()
        .try_collect()
        .await
        .unwrap();
    // Azurite, like the service, skips entities without the property.
    assert!(pending.iter().all(|e| e.row_key != "old"), "{pending:?}");
    common::drop_table(&t).await;
}
