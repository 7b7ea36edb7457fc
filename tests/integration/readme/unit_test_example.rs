// The README's "Unit tests without an emulator" example, line for line (rustdoc
// compiles the README's copy but drops `#[tokio::test]` functions, so this copy is
// the one that runs). `readme::the_unit_test_example_is_the_readmes` fails when the
// two differ: change both together.
use tablekit::{DynamicEntity, IfMatch, TableClient, UpdateMode};

/// The code under test: a conditional counter increment.
async fn bump(views: &TableClient<DynamicEntity>, page: &str) -> tablekit::Result<i64> {
    let e = views
        .modify(("pages", page), UpdateMode::Merge, |e| {
            let n = e.get("Views").and_then(|v| v.as_i64()).unwrap_or(0);
            e.set("Views", n + 1);
        })
        .await?
        .expect("the page exists");
    Ok(e.get("Views").and_then(|v| v.as_i64()).unwrap_or(0))
}

#[tokio::test]
async fn bump_counts_every_call() -> tablekit::Result<()> {
    let service = tablekit::TableServiceClient::embedded();
    let views = service.table::<DynamicEntity>("Views")?;
    views.create_table().await?;
    views
        .insert(&DynamicEntity::new("pages", "home").with("Views", 0_i64))
        .await?;

    bump(&views, "home").await?;
    assert_eq!(bump(&views, "home").await?, 2);

    // The service's errors, too: a stale ETag is a 412.
    let stale = DynamicEntity::new("pages", "home").with("Views", 0_i64);
    let err = views
        .update(
            &stale,
            UpdateMode::Replace,
            IfMatch::ETag(tablekit::ETag::new("W/\"stale\"")),
        )
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed());
    Ok(())
}
