//! Background schema upgrade against a live service: the 2009 paper's blog
//! posts, `Rating` (V1, no version) becoming `Stars` (version 2).

use crate::common;
use tablekit::testing::TestEnv;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tablekit::{entity::RawEntity, DynamicEntity, EdmValue, TableClient, TableEntity, UpdateMode};
use tablekit_patterns::upgrade::SchemaUpgrade;

#[derive(TableEntity, Debug, Clone, PartialEq)]
struct BlogV1 {
    #[tablekit(partition_key)]
    channel: String,
    #[tablekit(row_key)]
    posted: String,
    text: String,
    rating: i32,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(version = 2, upgrade = "BlogV2::upgrade")]
struct BlogV2 {
    #[tablekit(partition_key)]
    channel: String,
    #[tablekit(row_key)]
    posted: String,
    text: String,
    #[tablekit(default)]
    stars: i64,
}

impl BlogV2 {
    fn upgrade(raw: &RawEntity<'_>, _stored: i32) -> tablekit::Result<Self> {
        let mut blog = Self::decode_current_schema(raw)?;
        if let Some(rating) = raw.get("Rating") {
            blog.stars = i64::from(rating.to_i32()?) * 2;
        }
        Ok(blog)
    }
}

fn v1(channel: &str, posted: &str, rating: i32) -> BlogV1 {
    BlogV1 {
        channel: channel.into(),
        posted: posted.into(),
        text: "Hello".into(),
        rating,
    }
}

async fn stored(table: &TableClient<BlogV1>, channel: &str) -> Vec<DynamicEntity> {
    common::rows(table, channel).await
}

async fn old_entities_are_rewritten_in_the_current_version_once(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<BlogV1>(&svc, "Upgrade").await;
    for (i, rating) in [1, 2, 3, 4, 5].into_iter().enumerate() {
        table
            .insert(&v1("Channel9", &format!("Oct-2{i}"), rating))
            .await
            .unwrap();
    }
    let v2 = table.with_type::<BlogV2>();
    v2.insert(&BlogV2 {
        channel: "Channel9".into(),
        posted: "Nov-01".into(),
        text: "new".into(),
        stars: 7,
    })
    .await
    .unwrap();
    // A newer program's entity: left alone.
    table
        .with_type::<DynamicEntity>()
        .insert(&DynamicEntity::new("Channel9", "Nov-02").with("SchemaVersion", 3))
        .await
        .unwrap();

    let upgrade = SchemaUpgrade::new(v2.clone(), BlogV2::VERSION_PROPERTY, BlogV2::SCHEMA_VERSION)
        .page_size(2);
    let report = upgrade.run().await.unwrap();
    assert_eq!(
        (
            report.scanned,
            report.upgraded,
            report.current,
            report.newer,
            report.vanished
        ),
        (7, 5, 1, 1, 0)
    );
    for r in stored(&table, "Channel9")
        .await
        .iter()
        .filter(|r| r.row_key.starts_with("Oct"))
    {
        assert_eq!(
            r.get("SchemaVersion"),
            Some(&EdmValue::Int32(2)),
            "{}",
            r.row_key
        );
        assert!(
            r.get("Rating").is_none(),
            "the replace drops the old property"
        );
        let n: i64 = r.row_key[5..].parse::<i64>().unwrap() + 1;
        assert_eq!(r.get("Stars"), Some(&EdmValue::Int64(n * 2)));
    }
    // Again: nothing left to do.
    let again = upgrade.run().await.unwrap();
    assert_eq!((again.upgraded, again.current), (0, 6));
}

async fn one_partition_and_resumable_pages(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<BlogV1>(&svc, "UpgradePart").await;
    for i in 0..5 {
        table.insert(&v1("A", &format!("p{i}"), 1)).await.unwrap();
        table.insert(&v1("B", &format!("p{i}"), 1)).await.unwrap();
    }
    let upgrade = SchemaUpgrade::new(table.with_type::<BlogV2>(), BlogV2::VERSION_PROPERTY, 2)
        .partition("A")
        .page_size(2);
    let first = upgrade.run_page(None).await.unwrap();
    assert_eq!(first.report.upgraded, 2);
    // Resume from the continuation, as a restarted process would.
    let mut total = first.report;
    let mut from = first.continuation;
    while let Some(c) = from {
        let page = upgrade.run_page(Some(c)).await.unwrap();
        total += page.report;
        from = page.continuation;
    }
    assert_eq!(total.upgraded, 5);
    let b = stored(&table, "B").await;
    assert!(
        b.iter().all(|r| r.get("SchemaVersion").is_none()),
        "partition B untouched"
    );
}

static RACE_TABLE: Mutex<Option<TableClient<BlogV1>>> = Mutex::new(None);
static RACE_CALLS: AtomicUsize = AtomicUsize::new(0);

/// The same schema, whose upgrade hook (which runs between the upgrade's read
/// and its write) lets an old program (a second client) rewrite the entity
/// the first time.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(version = 2, upgrade = "RacingBlog::upgrade")]
struct RacingBlog {
    #[tablekit(partition_key)]
    channel: String,
    #[tablekit(row_key)]
    posted: String,
    text: String,
    #[tablekit(default)]
    stars: i64,
}

impl RacingBlog {
    fn upgrade(raw: &RawEntity<'_>, _stored: i32) -> tablekit::Result<Self> {
        if RACE_CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
            let other = RACE_TABLE.lock().unwrap().clone().unwrap();
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(async {
                    other
                        .upsert(&v1("Channel9", "Oct-29", 5), UpdateMode::Replace)
                        .await
                        .unwrap();
                })
            });
        }
        let mut blog = Self::decode_current_schema(raw)?;
        if let Some(rating) = raw.get("Rating") {
            blog.stars = i64::from(rating.to_i32()?) * 2;
        }
        Ok(blog)
    }
}

async fn a_concurrent_old_writer_is_not_overwritten_with_a_stale_copy(env: TestEnv) {
    let svc = env.tables().clone();
    // The race hook's statics are shared by this case's two runs (Azurite and
    // embedded): one at a time.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE_AT_A_TIME.lock().await;
    RACE_CALLS.store(0, Ordering::SeqCst);
    let table = common::fresh_table::<BlogV1>(&svc, "UpgradeRace").await;
    table.insert(&v1("Channel9", "Oct-29", 1)).await.unwrap();
    *RACE_TABLE.lock().unwrap() = Some(common::second_service(&svc).table(table.name()).unwrap());

    let upgrade = SchemaUpgrade::new(
        table.with_type::<RacingBlog>(),
        RacingBlog::VERSION_PROPERTY,
        2,
    );
    let report = upgrade.run().await.unwrap();
    assert_eq!((report.scanned, report.upgraded), (1, 1));
    assert_eq!(
        RACE_CALLS.load(Ordering::SeqCst),
        2,
        "read again after the 412"
    );
    let row = &stored(&table, "Channel9").await[0];
    assert_eq!(
        row.get("Stars"),
        Some(&EdmValue::Int64(10)),
        "from the other writer's rating 5, not the stale 1"
    );
    assert_eq!(row.get("SchemaVersion"), Some(&EdmValue::Int32(2)));
}

/// A process upgrades one page, saves the continuation as text and dies; a
/// new process (a new client and a new `SchemaUpgrade`) parses it and
/// upgrades the rest, reporting each page, without reading the first page
/// again.
async fn a_saved_continuation_resumes_in_a_fresh_instance_with_progress(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<BlogV1>(&svc, "UpgradeResume").await;
    for i in 0..7 {
        table
            .insert(&v1("Channel9", &format!("Oct-{i:02}"), i + 1))
            .await
            .unwrap();
    }
    let saved = {
        let first = SchemaUpgrade::new(
            table.with_type::<BlogV2>(),
            BlogV2::VERSION_PROPERTY,
            BlogV2::SCHEMA_VERSION,
        )
        .page_size(3);
        let page = first.run_page(None).await.unwrap();
        assert_eq!((page.report.scanned, page.report.upgraded), (3, 3));
        page.continuation.expect("more pages").to_string()
    };

    let fresh = common::second_service(&svc)
        .table::<BlogV2>(table.name())
        .unwrap();
    let resumed =
        SchemaUpgrade::new(fresh, BlogV2::VERSION_PROPERTY, BlogV2::SCHEMA_VERSION).page_size(3);
    let mut pages = Vec::new();
    let total = resumed
        .run_from(Some(saved.parse().unwrap()), |p| {
            pages.push((
                p.report.scanned,
                p.report.upgraded,
                p.continuation.is_some(),
            ))
        })
        .await
        .unwrap();
    assert_eq!((total.scanned, total.upgraded, total.current), (4, 4, 0));
    assert_eq!(pages.iter().map(|p| p.0).sum::<usize>(), 4);
    assert!(
        !pages.last().unwrap().2,
        "the last page has no continuation"
    );
    assert!(pages.iter().rev().skip(1).all(|p| p.2));
    let rows = stored(&table, "Channel9").await;
    assert_eq!(rows.len(), 7);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(
            r.get("SchemaVersion"),
            Some(&EdmValue::Int32(2)),
            "{}",
            r.row_key
        );
        assert_eq!(r.get("Stars"), Some(&EdmValue::Int64(2 * (i as i64 + 1))));
    }
    // A garbled continuation is refused, not read as the start.
    assert!("not a continuation"
        .parse::<tablekit::Continuation>()
        .is_err());
}

tablekit::testing::conformance!(
    a_saved_continuation_resumes_in_a_fresh_instance_with_progress,
    old_entities_are_rewritten_in_the_current_version_once,
    one_partition_and_resumable_pages,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_concurrent_old_writer_is_not_overwritten_with_a_stale_copy,
);
