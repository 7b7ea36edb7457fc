//! Queries against Azurite over 2,500 entities: ordering, paging with `page_size`,
//! `take`, resumable continuations, filters, projection and client-side limits.

use crate::common;
use tablekit::testing::Backend;

use futures::TryStreamExt;
use tablekit::{
    table::Page, Continuation, DynamicEntity, EdmValue, TableClient, TableServiceClient,
};
use tokio::sync::OnceCell;

const PARTITIONS: i32 = 25;
const PER_PARTITION: i32 = 100;
const TOTAL: usize = (PARTITIONS * PER_PARTITION) as usize;

fn entity(n: i32) -> DynamicEntity {
    DynamicEntity::new(
        format!("p{:02}", n / PER_PARTITION),
        format!("r{:03}", n % PER_PARTITION),
    )
    .with("N", n)
    .with("Rating", n % 5)
    .with("Text", format!("entity {n}"))
}

/// The name of a table holding entities 0..2,500 (25 partitions × 100), seeded
/// once per test binary by whichever test gets here first (25 transactions).
/// Each test uses its own client: a client belongs to the runtime it runs on.
async fn seeded_table(svc: &TableServiceClient, backend: Backend) -> TableClient<DynamicEntity> {
    static AZURITE: OnceCell<String> = OnceCell::const_new();
    static EMBEDDED: OnceCell<String> = OnceCell::const_new();
    let svc = common::seed_service(svc, backend);
    // The served store is fresh for each test: seeded by each.
    let each = OnceCell::new();
    let cell = match backend {
        Backend::Azurite => &AZURITE,
        Backend::Memory | Backend::File => &EMBEDDED,
        Backend::Served => &each,
    };
    let name = cell
        .get_or_init(|| async {
            let table = common::fresh_table::<DynamicEntity>(&svc, "Query").await;
            let sends = (0..PARTITIONS).map(|p| {
                let mut tx = table.transaction();
                for r in 0..PER_PARTITION {
                    tx.insert(&entity(p * PER_PARTITION + r)).unwrap();
                }
                tx.send()
            });
            futures::future::try_join_all(sends)
                .await
                .expect("seed 2,500 entities");
            table.name().to_owned()
        })
        .await;
    svc.table(name).unwrap()
}

fn numbers(items: &[DynamicEntity]) -> Vec<i32> {
    items
        .iter()
        .map(|e| {
            e.get("N")
                .and_then(EdmValue::as_i32)
                .expect("N is an Int32")
        })
        .collect()
}

fn all_numbers() -> Vec<i32> {
    (0..TOTAL as i32).collect()
}

async fn collect_pages(
    pages: tablekit::table::PageStream<DynamicEntity>,
) -> Vec<Page<DynamicEntity>> {
    pages.try_collect().await.unwrap()
}

tablekit::testing::conformance! {
    async fn stream_without_page_size_returns_everything_in_key_order(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;

        let all: Vec<DynamicEntity> = t.query().stream().try_collect().await.unwrap();
        assert_eq!(all.len(), TOTAL);
        assert_eq!(numbers(&all), all_numbers());
        let keys: Vec<(String, String)> = all
            .iter()
            .map(|e| (e.partition_key.clone(), e.row_key.clone()))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "results come in (PartitionKey, RowKey) order");
        assert!(all
            .iter()
            .all(|e| e.etag.is_some() && e.timestamp.is_some()));
    }
}

tablekit::testing::conformance! {
    async fn fetch_all_returns_everything(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;
        let all = t.query().fetch_all().await.unwrap();
        assert_eq!(numbers(&all), all_numbers());
    }
}

/// Every page but the last carries a continuation; together they hold every
/// entity once, in order; no page exceeds `page_size`.
fn assert_pages_cover_everything(pages: &[Page<DynamicEntity>], page_size: usize) {
    let (last, rest) = pages.split_last().expect("at least one page");
    assert!(
        last.continuation.is_none(),
        "the last page has no continuation"
    );
    assert!(rest.iter().all(|p| p.continuation.is_some()));
    assert!(pages.iter().all(|p| p.items.len() <= page_size));
    let all: Vec<DynamicEntity> = pages.iter().flat_map(|p| p.items.clone()).collect();
    assert_eq!(numbers(&all), all_numbers());
}

tablekit::testing::conformance! {
    async fn pages_with_page_size_1000_span_at_least_three_pages(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;

        let pages = collect_pages(t.query().page_size(1000).pages()).await;
        assert!(pages.len() >= 3, "{} pages", pages.len());
        assert_pages_cover_everything(&pages, 1000);
    }
}

tablekit::testing::conformance! {
    async fn pages_without_page_size_hold_at_most_1000_entities(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;

        let pages = collect_pages(t.query().pages()).await;
        assert!(pages.len() >= 3, "{} pages", pages.len());
        assert_pages_cover_everything(&pages, 1000);
    }
}

tablekit::testing::conformance! {
    async fn pages_with_page_size_300_span_at_least_nine_pages(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;

        let pages = collect_pages(t.query().page_size(300).pages()).await;
        assert!(pages.len() >= 9, "{} pages", pages.len());
        assert_pages_cover_everything(&pages, 300);
    }
}

tablekit::testing::conformance! {
    async fn take_returns_exactly_that_many_and_stops_fetching(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;

        let first: Vec<DynamicEntity> = t.query().take(250).stream().try_collect().await.unwrap();
        assert_eq!(numbers(&first), (0..250).collect::<Vec<_>>());
        let fetched = t.query().take(250).fetch_all().await.unwrap();
        assert_eq!(fetched.len(), 250);

        // With page_size(100): 100 + 100 + 50 (the last request asks only for what is
        // still needed), and no fourth request even though more entities exist.
        let pages = collect_pages(t.query().page_size(100).take(250).pages()).await;
        let sizes: Vec<usize> = pages.iter().map(|p| p.items.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
        assert!(
            pages.last().unwrap().continuation.is_some(),
            "the results go on; take stopped the paging"
        );
        let all: Vec<DynamicEntity> = pages.into_iter().flat_map(|p| p.items).collect();
        assert_eq!(numbers(&all), (0..250).collect::<Vec<_>>());
    }
}

tablekit::testing::conformance! {
    async fn take_zero_returns_nothing(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;
        let none = t.query().take(0).fetch_all().await.unwrap();
        assert!(none.is_empty());
    }
}

tablekit::testing::conformance! {
    async fn next_page_then_continue_from_resumes_exactly_where_it_stopped(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;

        let first = t.query().page_size(700).next_page().await.unwrap();
        assert_eq!(numbers(&first.items), (0..700).collect::<Vec<_>>());
        let token = first.continuation.expect("more results").to_string();

        // The token survives as text (e.g. stored between two web requests).
        let resumed: Continuation = token.parse().unwrap();
        let second = t
            .query()
            .page_size(700)
            .continue_from(resumed.clone())
            .next_page()
            .await
            .unwrap();
        assert_eq!(numbers(&second.items), (700..1400).collect::<Vec<_>>());

        let rest = t
            .query()
            .page_size(700)
            .continue_from(resumed)
            .fetch_all()
            .await
            .unwrap();
        let mut seen = numbers(&first.items);
        seen.extend(numbers(&rest));
        assert_eq!(seen, all_numbers(), "no duplicates, no gaps");
    }
}

tablekit::testing::conformance! {
    async fn filter_on_a_property_returns_only_matching_entities(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;

        let high = t
            .query()
            .filter_raw("Rating ge 3")
            .fetch_all()
            .await
            .unwrap();
        let expected: Vec<i32> = all_numbers().into_iter().filter(|n| n % 5 >= 3).collect();
        assert_eq!(numbers(&high), expected);
        assert_eq!(high.len(), 1000);
    }
}

tablekit::testing::conformance! {
    async fn filter_on_partition_key_returns_that_partition_in_row_key_order(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;

        let p07 = t
            .query()
            .filter_raw("PartitionKey eq 'p07'")
            .fetch_all()
            .await
            .unwrap();
        assert_eq!(numbers(&p07), (700..800).collect::<Vec<_>>());
        assert!(p07.iter().all(|e| e.partition_key == "p07"));

        let both = t
            .query()
            .filter_raw("PartitionKey eq 'p07' and Rating ge 3 and RowKey lt 'r050'")
            .fetch_all()
            .await
            .unwrap();
        let expected: Vec<i32> = (700..750).filter(|n| n % 5 >= 3).collect();
        assert_eq!(numbers(&both), expected);

        let range = t
            .query()
            .filter_raw("PartitionKey ge 'p10' and PartitionKey lt 'p12'")
            .fetch_all()
            .await
            .unwrap();
        assert_eq!(numbers(&range), (1000..1200).collect::<Vec<_>>());
    }
}

tablekit::testing::conformance! {
    async fn fetch_optional_returns_the_first_match_or_none(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;

        let one = t
            .query()
            .filter_raw("N eq 1234")
            .fetch_optional()
            .await
            .unwrap()
            .expect("entity 1234 exists");
        assert_eq!(
            (one.partition_key.as_str(), one.row_key.as_str()),
            ("p12", "r034")
        );

        let first = t.query().fetch_optional().await.unwrap().unwrap();
        assert_eq!(numbers(&[first]), [0]);

        let none = t
            .query()
            .filter_raw("N eq -1")
            .fetch_optional()
            .await
            .unwrap();
        assert!(none.is_none());
    }
}

tablekit::testing::conformance! {
    async fn empty_result_is_one_empty_page_without_continuation(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;

        let q = || t.query().filter_raw("PartitionKey eq 'nope'");
        assert!(q().fetch_all().await.unwrap().is_empty());
        let pages = collect_pages(q().pages()).await;
        assert_eq!(pages.len(), 1);
        assert!(pages[0].items.is_empty());
        assert!(pages[0].continuation.is_none());
        let page = q().next_page().await.unwrap();
        assert!(page.items.is_empty() && page.continuation.is_none());
    }
}

tablekit::testing::conformance! {
    async fn query_of_an_empty_table_is_empty(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "Empty").await;
        assert!(t.query().fetch_all().await.unwrap().is_empty());
        assert!(t.query().fetch_optional().await.unwrap().is_none());
        common::drop_table(&t).await;
    }
}

tablekit::testing::conformance! {
    async fn select_returns_only_the_selected_properties(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;

        let rows = t
            .query()
            .filter_raw("PartitionKey eq 'p03'")
            .select(["N", "Rating"])
            .take(5)
            .fetch_all()
            .await
            .unwrap();
        assert_eq!(numbers(&rows), (300..305).collect::<Vec<_>>());
        for e in &rows {
            assert_eq!(e.partition_key, "p03");
            assert_eq!(e.properties.len(), 2, "{e:?}");
            assert!(e.get("Text").is_none());
        }
    }
}

tablekit::testing::conformance! {
    async fn select_naming_the_keys_too_returns_keys_and_selected_properties(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let t = seeded_table(&svc, backend).await;

        let rows = t
            .query()
            .filter_raw("PartitionKey eq 'p03'")
            .select(["PartitionKey", "RowKey", "N"])
            .take(3)
            .fetch_all()
            .await
            .unwrap();
        assert_eq!(numbers(&rows), [300, 301, 302]);
        assert!(rows.iter().all(|e| e.properties.len() == 1));
        assert_eq!(rows[1].row_key, "r001");
    }
}

#[tokio::test]
async fn page_size_outside_1_to_1000_is_rejected_before_io() {
    let t = common::offline_table::<DynamicEntity>();
    for n in [0, 1001] {
        let errors = [
            t.query().page_size(n).fetch_all().await.unwrap_err(),
            t.query().page_size(n).next_page().await.unwrap_err(),
            t.query().page_size(n).pages().try_next().await.unwrap_err(),
            t.query()
                .page_size(n)
                .stream()
                .try_next()
                .await
                .unwrap_err(),
        ];
        for err in errors {
            let msg = common::assert_invalid(&err);
            assert_eq!(
                msg,
                format!(
                    "invalid input: page_size({n}) is outside 1..=1000: the service returns at most 1000 entities per page"
                )
            );
        }
    }
}

#[tokio::test]
async fn invalid_select_and_empty_filter_are_rejected_before_io() {
    let t = common::offline_table::<DynamicEntity>();
    let err = t.query().select(["my-prop"]).fetch_all().await.unwrap_err();
    assert!(common::assert_invalid(&err).contains("\"my-prop\""));
    let err = t.query().filter_raw("  ").fetch_all().await.unwrap_err();
    assert!(common::assert_invalid(&err).contains("filter"));
    let err = t.get(("p", "r")).select(["1abc"]).await.unwrap_err();
    assert!(common::assert_invalid(&err).contains("\"1abc\""));
}

#[tokio::test]
async fn malformed_continuation_text_is_rejected() {
    for bad in ["", "a b c", "%FF"] {
        let err = bad.parse::<Continuation>().unwrap_err();
        assert!(
            common::assert_invalid(&err).contains("continuation"),
            "{bad:?}"
        );
    }
}

tablekit::testing::conformance! {
    async fn fetch_one_gives_the_match_or_not_found_and_the_first_of_several(env) {
        let svc = env.tables().clone();
        let t = common::fresh_table::<DynamicEntity>(&svc, "FetchOne").await;
        for (pk, rk, n) in [("a", "2", 2), ("a", "1", 1), ("b", "1", 3)] {
            t.insert(&DynamicEntity::new(pk, rk).with("N", n)).await.unwrap();
        }

        let none = t
            .query()
            .filter(|e| e.col::<i32>("N").gt(10))
            .fetch_one()
            .await
            .unwrap_err();
        assert!(none.is_not_found(), "{none:?}");
        assert_eq!(none.status(), None, "no request answered 404");

        let one = t
            .query()
            .filter(|e| e.col::<i32>("N").eq(3))
            .fetch_one()
            .await
            .unwrap();
        assert_eq!((one.partition_key.as_str(), one.row_key.as_str()), ("b", "1"));

        // Several match: the first in key order, not an error.
        let first = t
            .query()
            .filter(|e| e.partition_key.eq("a"))
            .fetch_one()
            .await
            .unwrap();
        assert_eq!(first.row_key, "1");
        assert_eq!(first.get("N"), Some(&EdmValue::Int32(1)));
        common::drop_table(&t).await;
    }
}
