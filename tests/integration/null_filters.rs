//! `None` in filters: the service has no null, so a property that is not set
//! (an `Option` field that is `None`) is missing, and every comparison with a
//! missing property is false, `ne` included. `filter!` keeps Rust's meaning of
//! comparing an `Option` anyway: `== None` is "not set", `!= None` "set",
//! `== Some(v)` "set and equal", `!= Some(v)` "not set, or another value";
//! each query's answer here is checked against the same predicate run in Rust
//! over the entities written, on every backend.

use std::collections::BTreeSet;

use chrono::{DateTime, TimeZone, Utc};
use tablekit::{filter, filter::col, DynamicEntity, Filter, TableClient, TableEntity};
use uuid::Uuid;

use crate::common;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{group}", row_key = "{id:04}")]
struct Contact {
    group: String,
    id: u32,
    email: Option<String>,
    age: Option<i32>,
    views: Option<i64>,
    score: Option<f64>,
    vip: Option<bool>,
    since: Option<DateTime<Utc>>,
    badge: Option<Uuid>,
    photo: Option<Vec<u8>>,
}

/// 48 contacts in two partitions; each property set or not by a fixed
/// pseudo-random pattern, with the values a presence test writes (`''`, `0`,
/// `false`, the epoch, the nil Guid, no bytes) among the ones set.
fn contacts() -> Vec<Contact> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..48u32)
        .map(|id| {
            let r = next();
            let set = |bit: u32| r >> bit & 1 == 1;
            let pick = |bit: u32| (r >> (bit + 20)) & 3;
            Contact {
                group: if id % 2 == 0 { "a" } else { "b" }.to_owned(),
                id,
                email: set(0).then(|| {
                    ["", "x@contoso.com", "o'brien@contoso.com", ""][pick(0) as usize].to_owned()
                }),
                age: set(1).then(|| [0, 30, 41, -5][pick(1) as usize]),
                views: set(2).then(|| [0, 1, 5_000_000_000, -1][pick(2) as usize]),
                score: set(3).then(|| [0.0, -0.0, 2.5, 1e300][pick(3) as usize]),
                vip: set(4).then(|| pick(4) % 2 == 1),
                since: set(5).then(|| Utc.timestamp_opt(pick(5) as i64 * 86_400 * 400, 0).unwrap()),
                badge: set(6).then(|| Uuid::from_u128(u128::from(pick(6)))),
                photo: set(7).then(|| vec![7; pick(7) as usize]),
            }
        })
        .collect()
}

async fn seeded(svc: &tablekit::TableServiceClient) -> (TableClient<Contact>, Vec<Contact>) {
    let table = common::fresh_table::<Contact>(svc, "Nulls").await;
    let all = contacts();
    // Each property is set on some contacts and not on others, so no check
    // below passes by selecting all or nothing.
    let set: [fn(&Contact) -> bool; 8] = [
        |c| c.email.is_some(),
        |c| c.age.is_some(),
        |c| c.views.is_some(),
        |c| c.score.is_some(),
        |c| c.vip.is_some(),
        |c| c.since.is_some(),
        |c| c.badge.is_some(),
        |c| c.photo.is_some(),
    ];
    for (i, is_set) in set.iter().enumerate() {
        let n = all.iter().filter(|c| is_set(c)).count();
        assert!((8..=40).contains(&n), "property {i} is set on {n} of 48");
    }
    for c in &all {
        table.insert(c).await.unwrap();
    }
    (table, all)
}

/// The query's rows are exactly the contacts `want` picks.
async fn check(
    table: &TableClient<Contact>,
    all: &[Contact],
    what: &str,
    filter: Filter<Contact>,
    want: impl Fn(&Contact) -> bool,
) {
    let text = filter.to_odata().unwrap();
    let got: BTreeSet<u32> = table
        .query()
        .filter_by(filter)
        .fetch_all()
        .await
        .unwrap_or_else(|e| panic!("{what} ({text}): {e}"))
        .into_iter()
        .map(|c| c.id)
        .collect();
    let expected: BTreeSet<u32> = all.iter().filter(|c| want(c)).map(|c| c.id).collect();
    assert_eq!(got, expected, "{what}: {text}");
}

/// The columns of `Contact`, for a `filter!` closure outside a query.
fn f(
    build: impl FnOnce(&<Contact as tablekit::filter::EntityColumns>::Columns) -> Filter<Contact>,
) -> Filter<Contact> {
    build(<Contact as tablekit::filter::EntityColumns>::columns())
}

tablekit::testing::conformance! {
    async fn none_and_some_in_filters_select_what_rust_would(env) {
        let svc = env.tables().clone();
        let (t, all) = seeded(&svc).await;
        let all = &all[..];
        // Every property type, set and not set.
        check(&t, all, "email none", f(filter!(|e| e.email == None)), |c| c.email.is_none()).await;
        check(&t, all, "email some", f(filter!(|e| e.email != None)), |c| c.email.is_some()).await;
        check(&t, all, "age none", f(filter!(|e| e.age == None)), |c| c.age.is_none()).await;
        check(&t, all, "views some", f(filter!(|e| None != e.views)), |c| c.views.is_some()).await;
        check(&t, all, "score none", f(filter!(|e| e.score.is_none())), |c| c.score.is_none()).await;
        check(&t, all, "vip some", f(filter!(|e| e.vip.is_some())), |c| c.vip.is_some()).await;
        check(&t, all, "since none", f(filter!(|e| e.since == None)), |c| c.since.is_none()).await;
        check(&t, all, "badge some", f(filter!(|e| e.badge != None)), |c| c.badge.is_some()).await;
        check(&t, all, "photo none", f(filter!(|e| e.photo == None)), |c| c.photo.is_none()).await;

        // `Some(v)`: set and equal; `!= Some(v)`: not set, or another value.
        check(&t, all, "age == Some(0)", f(filter!(|e| e.age == Some(0))), |c| c.age == Some(0)).await;
        check(&t, all, "age != Some(0)", f(filter!(|e| e.age != Some(0))), |c| c.age != Some(0)).await;
        let empty = String::new();
        check(&t, all, "email != Some('')", f(filter!(|e| e.email != Some(&empty))), |c| {
            c.email.as_deref() != Some("")
        })
        .await;
        check(&t, all, "vip == Some(false)", f(filter!(|e| e.vip == Some(false))), |c| {
            c.vip == Some(false)
        })
        .await;

        // A plain comparison holds only where the property is set: `!=` too.
        check(&t, all, "age != 30", f(filter!(|e| e.age != 30)), |c| c.age.is_some_and(|a| a != 30)).await;
        check(&t, all, "not age == 30", f(filter!(|e| !(e.age == 30))), |c| c.age != Some(30)).await;

        // Composed, with keys: the partition's range and presence together.
        check(
            &t,
            all,
            "a, no age or old, score set",
            f(filter!(|e| e.partition_key == "a" && (e.age == None || e.age > 35) && e.score != None)),
            |c| c.group == "a" && c.age.is_none_or(|a| a > 35) && c.score.is_some(),
        )
        .await;

        // The untyped columns of `DynamicEntity` mean the same.
        let raw = t.with_type::<DynamicEntity>();
        let no_email: BTreeSet<String> = raw
            .query()
            .filter(|_| col::<String>("Email").is_none() & col::<i32>("Age").is_some())
            .fetch_all()
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.row_key().into_owned())
            .collect();
        let expected: BTreeSet<String> = all
            .iter()
            .filter(|c| c.email.is_none() && c.age.is_some())
            .map(|c| format!("{:04}", c.id))
            .collect();
        assert_eq!(no_email, expected);
        common::drop_table(&t).await;
    }
}
