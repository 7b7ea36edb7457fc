//! Requests and bytes per logical operation of the secondary index and the
//! log tail, next to the hand-written equivalent, counted by a loopback proxy
//! in front of the emulator: the combinators make no request the
//! hand-written code would not. Run with `--nocapture` to see the figures.

mod common;

use chrono::{Duration, TimeZone, Utc};
use common::proxy::{CountingProxy, Traffic};
use tablekit::filter::prefix_successor;
use tablekit::{to_dynamic, DynamicEntity, ETag, IfMatch, TableClient, TableEntity, UpdateMode};
use tablekit_patterns::index::{Index, IndexedTable, PRIMARY_ROW_KEY};
use tablekit_patterns::keys::inverted_ticks;
use tablekit_patterns::log_tail::{LogTail, NewestFirst};
use tablekit_patterns::range::KeyRange;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    last_name: String,
    email: String,
    age: i32,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

#[derive(TableEntity, Debug, Clone)]
#[tablekit(partition_key = "{employee}", row_key = "{key}")]
struct Expense {
    employee: String,
    key: NewestFirst,
    amount: f64,
}

fn employee(id: u32, email: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        employee_id: id,
        last_name: "Jones".into(),
        email: email.into(),
        age: 40,
        etag: None,
    }
}

/// The copies a hand-written program would build.
fn copies(e: &Employee) -> Vec<DynamicEntity> {
    let primary = to_dynamic(e).unwrap();
    let mut out = vec![primary.clone()];
    for rk in [
        format!("email_{}", e.email),
        format!("name_{}_{:06}", e.last_name, e.employee_id),
    ] {
        let mut c = primary.clone();
        c.row_key = rk;
        c.etag = None;
        c.set(PRIMARY_ROW_KEY, primary.row_key.clone());
        out.push(c);
    }
    out[0].etag = None;
    out
}

fn row(op: &str, ours: &Traffic, hand: &Traffic) {
    println!(
        "| {op} | {} req, {} B | {} req, {} B |",
        ours.requests.len(),
        ours.bytes,
        hand.requests.len(),
        hand.bytes
    );
    assert_eq!(
        ours.requests.len(),
        hand.requests.len(),
        "{op}: {:?} vs {:?}",
        ours.requests,
        hand.requests
    );
    assert_eq!(
        ours.bytes, hand.bytes,
        "{op}: the same requests, byte for byte ({:?} vs {:?})",
        ours.requests, hand.requests
    );
}

#[tokio::test]
async fn the_secondary_index_makes_the_requests_of_the_hand_written_code() {
    let Some(svc) = common::service() else { return };
    let conn = std::env::var(common::CONNECTION_STRING_VAR).unwrap();
    let proxy = CountingProxy::start(&conn).await;
    let name = common::fresh_table::<Employee>(&svc, "Count")
        .await
        .name()
        .to_owned();
    let table = proxy.service().table::<Employee>(&name).unwrap();
    let raw = table.with_type::<DynamicEntity>();
    let email = Index::new("email", "email_", |e: &Employee| e.email.clone());
    let lastname = Index::new("lastname", "name_", |e: &Employee| {
        format!("{}_{:06}", e.last_name, e.employee_id)
    });
    let dir = IndexedTable::new(table.clone(), "empid_")
        .with_index(&email)
        .unwrap()
        .with_index(&lastname)
        .unwrap();
    println!("| operation (2 indexes) | combinator | hand-written |\n|---|---|---|");
    proxy.take();

    // Insert: one transaction of 3 inserts.
    let mut ours = employee(1, "a1@contoso.com");
    dir.insert(&mut ours).await.unwrap();
    let t_ours = proxy.take();
    let mine = employee(2, "a2@contoso.com");
    let mut tx = raw.transaction();
    for c in copies(&mine) {
        tx.insert(&c).unwrap();
    }
    let done = tx.send().await.unwrap();
    let t_hand = proxy.take();
    row("insert", &t_ours, &t_hand);
    assert_eq!(
        t_ours.bytes, t_hand.bytes,
        "the same transaction, byte for byte"
    );

    // Update changing the email, from a value read before: one transaction of 4.
    let mut new = ours.clone();
    new.email = "b1@contoso.com".into();
    dir.update(&ours, &mut new, IfMatch::ETag(ours.etag.clone().unwrap()))
        .await
        .unwrap();
    let t_ours = proxy.take();
    let mut mine_new = mine.clone();
    mine_new.email = "b2@contoso.com".into();
    let c = copies(&mine_new);
    let mut tx = raw.transaction();
    tx.update(
        &c[0],
        UpdateMode::Replace,
        IfMatch::ETag(done.etag(0).unwrap().clone()),
    )
    .unwrap();
    tx.delete(("Sales", "email_a2@contoso.com"), IfMatch::Any)
        .unwrap();
    tx.insert(&c[1]).unwrap();
    tx.upsert(&c[2], UpdateMode::Replace).unwrap();
    tx.send().await.unwrap();
    let t_hand = proxy.take();
    row("update (email changed)", &t_ours, &t_hand);

    // modify: read + transaction.
    dir.modify(("Sales", "empid_000001"), |e| e.age += 1)
        .await
        .unwrap();
    let t_ours = proxy.take();
    let read = raw.get(("Sales", "empid_000002")).await.unwrap().unwrap();
    let mut changed = Employee::decode(&tablekit::RawEntity::from_dynamic(&read)).unwrap();
    changed.age += 1;
    let c = copies(&changed);
    let mut tx = raw.transaction();
    tx.update(
        &c[0],
        UpdateMode::Replace,
        IfMatch::ETag(read.etag.clone().unwrap()),
    )
    .unwrap();
    tx.upsert(&c[1], UpdateMode::Replace).unwrap();
    tx.upsert(&c[2], UpdateMode::Replace).unwrap();
    tx.send().await.unwrap();
    let t_hand = proxy.take();
    row("modify (read + write)", &t_ours, &t_hand);

    // Lookup by email: one point read.
    assert!(dir
        .lookup(&email, "Sales", "b1@contoso.com")
        .await
        .unwrap()
        .is_some());
    let t_ours = proxy.take();
    assert!(raw
        .get(("Sales", "email_b2@contoso.com"))
        .await
        .unwrap()
        .is_some());
    let t_hand = proxy.take();
    row("lookup by email", &t_ours, &t_hand);

    // List by email prefix: one range query.
    assert_eq!(
        dir.list(&email, "Sales", KeyRange::prefix("b"))
            .await
            .unwrap()
            .len(),
        2
    );
    let t_ours = proxy.take();
    let hand = raw
        .query()
        .filter_raw("PartitionKey eq 'Sales' and RowKey ge 'email_b' and RowKey lt 'email_c'")
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(hand.len(), 2);
    let t_hand = proxy.take();
    row("list email_b..email_c", &t_ours, &t_hand);

    // Delete from a value read before: one transaction of 3 deletes.
    let current = dir.get(("Sales", "empid_000001")).await.unwrap().unwrap();
    let current_hand = raw.get(("Sales", "empid_000002")).await.unwrap().unwrap();
    proxy.take();
    dir.delete(&current, IfMatch::ETag(current.etag.clone().unwrap()))
        .await
        .unwrap();
    let t_ours = proxy.take();
    let mut tx = raw.transaction();
    tx.delete(
        ("Sales", "empid_000002"),
        IfMatch::ETag(current_hand.etag.clone().unwrap()),
    )
    .unwrap();
    tx.delete(("Sales", "email_b2@contoso.com"), IfMatch::Any)
        .unwrap();
    tx.delete(("Sales", "name_Jones_000002"), IfMatch::Any)
        .unwrap();
    tx.send().await.unwrap();
    let t_hand = proxy.take();
    row("delete", &t_ours, &t_hand);
    assert!(common::rows(&table, "Sales").await.is_empty());
}

#[tokio::test]
async fn the_log_tail_makes_the_requests_of_the_hand_written_code() {
    let Some(svc) = common::service() else { return };
    let conn = std::env::var(common::CONNECTION_STRING_VAR).unwrap();
    let proxy = CountingProxy::start(&conn).await;
    let name = common::fresh_table::<Expense>(&svc, "CountTail")
        .await
        .name()
        .to_owned();
    let table: TableClient<Expense> = proxy.service().table(&name).unwrap();
    let log = LogTail::new(table.clone());
    let t0 = Utc.with_ymd_and_hms(2014, 8, 22, 0, 50, 32).unwrap();
    println!("| operation | combinator | hand-written |\n|---|---|---|");
    for i in 0..14 {
        let mut e = Expense {
            employee: "000123".into(),
            key: NewestFirst::new(t0 + Duration::minutes(i), format!("{i:03}")),
            amount: i as f64,
        };
        log.append(&mut e).await.unwrap();
    }
    let appends = proxy.take();
    assert_eq!(appends.requests.len(), 14, "one insert per append");

    let latest = log.latest("000123", 10).await.unwrap();
    let t_ours = proxy.take();
    let page = table
        .query()
        .filter_raw("PartitionKey eq '000123'")
        .page_size(10)
        .next_page()
        .await
        .unwrap();
    let t_hand = proxy.take();
    row("latest(10) of 14", &t_ours, &t_hand);
    assert_eq!(latest.len(), 10);
    assert_eq!(
        latest.iter().map(|e| e.amount).collect::<Vec<_>>(),
        page.items.iter().map(|e| e.amount).collect::<Vec<_>>()
    );

    let window = log
        .between(
            "000123",
            t0 + Duration::minutes(2),
            t0 + Duration::minutes(5),
        )
        .await
        .unwrap();
    assert_eq!(window.len(), 3);
    let t_ours = proxy.take();
    let hand = table
        .query()
        // Past every key of the instant `to` (`gt '{ticks}~'` would do too; the
        // successor of the ticks, `…9` -> `…:`, is what the combinator sends).
        .filter_raw(format!(
            "PartitionKey eq '000123' and RowKey ge '{}' and RowKey lt '{}'",
            prefix_successor(&inverted_ticks(t0 + Duration::minutes(5))).unwrap(),
            prefix_successor(&inverted_ticks(t0 + Duration::minutes(2))).unwrap(),
        ))
        .fetch_all()
        .await
        .unwrap();
    let t_hand = proxy.take();
    assert_eq!(
        hand.iter().map(|e| e.amount).collect::<Vec<_>>(),
        window.iter().map(|e| e.amount).collect::<Vec<_>>()
    );
    row("between (3 of 14)", &t_ours, &t_hand);
}

/// `latest(n)` stops once it has n: over 1,500 entries, `latest(1001)` reads
/// one full page of 1,000 and asks the next page for the 1 still needed.
#[tokio::test]
async fn latest_stops_after_n_entities() {
    let Some(svc) = common::service() else { return };
    let conn = std::env::var(common::CONNECTION_STRING_VAR).unwrap();
    let proxy = CountingProxy::start(&conn).await;
    let name = common::fresh_table::<Expense>(&svc, "CountMany")
        .await
        .name()
        .to_owned();
    let table: TableClient<Expense> = proxy.service().table(&name).unwrap();
    let t0 = Utc.with_ymd_and_hms(2014, 8, 22, 0, 50, 32).unwrap();
    for batch in 0..15 {
        let mut tx = table.transaction();
        for i in 0..100 {
            let n = batch * 100 + i;
            tx.insert(&Expense {
                employee: "000123".into(),
                key: NewestFirst::new(t0 + Duration::seconds(n), "0"),
                amount: n as f64,
            })
            .unwrap();
        }
        tx.send().await.unwrap();
    }
    proxy.take();
    let log = LogTail::new(table);
    let latest = log.latest("000123", 1001).await.unwrap();
    let traffic = proxy.take();
    println!(
        "| latest(1001) of 1500 | {} req, {} B |",
        traffic.requests.len(),
        traffic.bytes
    );
    assert_eq!(latest.len(), 1001);
    assert_eq!(latest[0].amount, 1499.0);
    assert_eq!(latest[1000].amount, 499.0);
    assert_eq!(traffic.requests.len(), 2, "{:?}", traffic.requests);
    let top = |line: &str| {
        line.split(['?', '&', ' '])
            .find_map(|p| {
                p.strip_prefix("%24top=")
                    .or_else(|| p.strip_prefix("$top="))
            })
            .map(str::to_owned)
    };
    assert_eq!(
        top(&traffic.requests[0]).as_deref(),
        Some("1000"),
        "{:?}",
        traffic.requests
    );
    assert_eq!(
        top(&traffic.requests[1]).as_deref(),
        Some("1"),
        "{:?}",
        traffic.requests
    );
}
