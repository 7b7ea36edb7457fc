//! Requests and bytes per logical operation of the secondary index and the
//! log tail, next to the hand-written equivalent, counted by a loopback proxy
//! in front of the emulator: the combinators make no request the
//! hand-written code would not. The large entities and log data patterns,
//! which also talk to the Blob service, are counted through the same proxy
//! (table and blob endpoints) and their request sequences asserted. Run with
//! `--nocapture` to see the figures.

use crate::common;

use chrono::{Duration, TimeZone, Utc};
use common::proxy::{CountingProxy, Traffic};
use futures::TryStreamExt;
use tablekit::filter::prefix_successor;
use tablekit::{
    codec::to_dynamic, ContainerClient, DynamicEntity, ETag, IfMatch, TableClient, TableEntity,
    UpdateMode,
};
use tablekit_patterns::denormalize::Denormalized;
use tablekit_patterns::index::{Index, IndexedTable, PRIMARY_ROW_KEY};
use tablekit_patterns::keys::inverted_ticks;
use tablekit_patterns::large::{LargeTable, SplitTable};
use tablekit_patterns::log_data::{LogReader, LogWriter};
use tablekit_patterns::log_tail::{LogTail, NewestFirst};
use tablekit_patterns::range::KeyRange;
use tablekit_patterns::summary::CountedPartition;

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

/// An employee table reached through a counting proxy, with the two indexes
/// of the secondary-index cases: by email and by last name.
struct Directory {
    proxy: CountingProxy,
    table: TableClient<Employee>,
    raw: TableClient<DynamicEntity>,
    email: Index<Employee, Employee>,
    dir: IndexedTable<Employee>,
}

impl Directory {
    /// A fresh table named `prefix` + a unique suffix, or `None` (a failure
    /// with `CI=true`) without Azurite.
    async fn new(prefix: &str) -> Option<Directory> {
        let svc = common::service()?;
        let conn = std::env::var(common::CONNECTION_STRING_VAR).unwrap();
        let proxy = CountingProxy::start(&conn).await;
        let name = common::fresh_table::<Employee>(&svc, prefix)
            .await
            .name()
            .to_owned();
        let table = proxy.service().table::<Employee>(&name).unwrap();
        let raw = table.with_type::<DynamicEntity>();
        let email = Index::new("email", "email_", |e: &Employee| e.email.clone());
        let lastname = Index::new("lastname", "name_", |e: &Employee| {
            format!("{}_{:06}", e.last_name, e.employee_id)
        });
        let dir = IndexedTable::new(table.clone())
            .unwrap()
            .with_index(&email)
            .unwrap()
            .with_index(&lastname)
            .unwrap();
        Some(Directory {
            proxy,
            table,
            raw,
            email,
            dir,
        })
    }
}

#[tokio::test]
async fn the_secondary_index_makes_the_requests_of_the_hand_written_code() {
    let Some(Directory {
        proxy,
        table,
        raw,
        email,
        dir,
    }) = Directory::new("Count").await
    else {
        return;
    };
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
    let mut changed = Employee::decode(&tablekit::entity::RawEntity::from_dynamic(&read)).unwrap();
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

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "Department")]
struct Department {
    department: String,
    employee_count: i32,
    manager_id: Option<String>,
    manager_email: Option<String>,
}

/// The guide's composition, an employee inserted with its index copies, the
/// department's count and its new manager's details in one transaction:
/// the same requests as hand-written code, byte for byte: the plans of the
/// count and of the manager both need the department, and the plan reads
/// it once, as hand-written code does.
#[tokio::test]
async fn a_composed_transaction_is_the_hand_written_transaction() {
    let Some(Directory {
        proxy,
        table,
        raw,
        dir,
        ..
    }) = Directory::new("CountCompose").await
    else {
        return;
    };
    let counted = CountedPartition::new(table.clone(), "Department", "EmployeeCount");
    let manager = Denormalized::new(table.clone(), "Department", "ManagerId", |e: &Employee| {
        (
            format!("{:06}", e.employee_id),
            vec![("ManagerEmail".to_string(), e.email.clone().into())],
        )
    });
    // The department exists: its count and manager change by one merge.
    let dept = DynamicEntity::new("Sales", "Department").with("EmployeeCount", 0);
    raw.insert(&dept).await.unwrap();
    println!("| composed transaction (2 indexes) | combinator | hand-written |\n|---|---|---|");
    proxy.take();

    let ours = employee(1, "a1@contoso.com");
    dir.plan_insert(&ours)
        .unwrap()
        .and(counted.plan_count("Sales", 1).unwrap())
        .unwrap()
        .and(manager.plan_assign(&ours).unwrap())
        .unwrap()
        .await
        .unwrap();
    let t_ours = proxy.take();

    let mine = employee(2, "a2@contoso.com");
    let read = raw.get(("Sales", "Department")).await.unwrap().unwrap();
    let mut tx = raw.transaction();
    for c in copies(&mine) {
        tx.insert(&c).unwrap();
    }
    let change = DynamicEntity::new("Sales", "Department")
        .with("EmployeeCount", 2)
        .with("ManagerId", "000002")
        .with("ManagerEmail", "a2@contoso.com");
    tx.update(
        &change,
        UpdateMode::Merge,
        IfMatch::ETag(read.etag.unwrap()),
    )
    .unwrap();
    tx.send().await.unwrap();
    let t_hand = proxy.take();
    println!(
        "| employee + copies + count + manager | {} req, {} B | {} req, {} B |",
        t_ours.requests.len(),
        t_ours.bytes,
        t_hand.requests.len(),
        t_hand.bytes
    );
    let batches = |t: &Traffic| t.requests.iter().filter(|r| r.contains("$batch")).count();
    assert_eq!(
        (batches(&t_ours), t_ours.requests.len()),
        (1, 2),
        "{:?}",
        t_ours.requests
    );
    assert_eq!(
        (batches(&t_hand), t_hand.requests.len()),
        (1, 2),
        "{:?}",
        t_hand.requests
    );
    let dept = table
        .with_type::<Department>()
        .get(("Sales", "Department"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (dept.employee_count, dept.manager_id.as_deref()),
        (2, Some("000002"))
    );
    // The same requests, byte for byte (the ids, emails and ETags are of
    // one length).
    assert_eq!(t_ours.bytes, t_hand.bytes);
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

/// The seed's employee with a photo (§3.11).
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id}")]
struct Staff {
    department: String,
    employee_id: String,
    last_name: String,
    photo: Vec<u8>,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

fn staff(id: &str, photo_len: usize) -> Staff {
    Staff {
        department: "Marketing".into(),
        employee_id: id.into(),
        last_name: "Hall".into(),
        photo: vec![0xa5; photo_len],
        etag: None,
    }
}

/// The requests as `METHOD service`: `PUT blob`, `LIST blob` (a listing),
/// `POST table`... A blob request is one whose path is in `container`.
fn kinds(traffic: &Traffic, container: &str) -> Vec<String> {
    let blob_path = format!("/devstoreaccount1/{container}");
    traffic
        .requests
        .iter()
        .map(|line| {
            let mut parts = line.split(' ');
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if !path.starts_with(&blob_path) {
                format!("{method} table")
            } else if path.contains("comp=list") {
                "LIST blob".to_owned()
            } else {
                format!("{method} blob")
            }
        })
        .collect()
}

/// Prints a row of the published table and asserts the request sequence.
#[track_caller]
fn measured(op: &str, traffic: &Traffic, container: &str, expected: &[&str]) {
    println!(
        "| {op} | {} req, {} B | {} |",
        traffic.requests.len(),
        traffic.bytes,
        kinds(traffic, container).join(", ")
    );
    assert_eq!(
        kinds(traffic, container),
        expected,
        "{op}: {:?}",
        traffic.requests
    );
}

async fn proxied_container(proxy: &CountingProxy, prefix: &str) -> ContainerClient {
    let container = proxy
        .blob_service()
        .container(&common::unique_name(prefix))
        .unwrap();
    container.create_container().await.unwrap();
    container
}

/// LargeTable and SplitTable with a 100 KiB photo: the requests of each
/// operation as measured, not as read from the code.
#[tokio::test]
async fn large_entities_make_the_requests_their_docs_list() {
    let Some(svc) = common::service() else { return };
    let conn = std::env::var(common::CONNECTION_STRING_VAR).unwrap();
    let proxy = CountingProxy::start(&conn).await;
    let name = common::fresh_table::<Staff>(&svc, "CountLarge")
        .await
        .name()
        .to_owned();
    let table: TableClient<Staff> = proxy.service().table(&name).unwrap();
    let container = proxied_container(&proxy, "count-").await;
    let c = container.name().to_owned();
    let large = LargeTable::new(table.clone(), container.clone());
    println!("| operation (100 KiB photo) | measured | requests |\n|---|---|---|");
    proxy.take();

    let mut don = staff("00001", 100 * 1024);
    large.insert(&mut don).await.unwrap();
    measured(
        "LargeTable::insert",
        &proxy.take(),
        &c,
        &["PUT blob", "POST table"],
    );

    let back = large.get(("Marketing", "00001")).await.unwrap().unwrap();
    assert_eq!(back.photo, don.photo);
    measured(
        "LargeTable::get",
        &proxy.take(),
        &c,
        &["GET table", "GET blob"],
    );

    let row = large
        .get_without_blobs::<DynamicEntity>(("Marketing", "00001"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.blobs.len(), 1);
    measured(
        "LargeTable::get_without_blobs",
        &proxy.take(),
        &c,
        &["GET table"],
    );

    let mut newer = don.clone();
    newer.photo = vec![0x5a; 90 * 1024];
    large
        .replace(&mut newer, don.etag.clone().unwrap())
        .await
        .unwrap();
    measured(
        "LargeTable::replace",
        &proxy.take(),
        &c,
        &["GET table", "PUT blob", "PUT table", "DELETE blob"],
    );

    assert!(large
        .delete(("Marketing", "00001"), IfMatch::Any)
        .await
        .unwrap());
    measured(
        "LargeTable::delete",
        &proxy.take(),
        &c,
        &["GET table", "DELETE table", "DELETE blob"],
    );

    // The sweep over a small set: three live entities and one orphan (a blob
    // named the pattern's way whose entity was never written).
    for id in ["00002", "00003", "00004"] {
        large.insert(&mut staff(id, 70 * 1024)).await.unwrap();
    }
    let orphan = format!("{name}/Marketing/00005/{}/Photo", "0".repeat(32));
    container.blob(&orphan).unwrap().upload("x").await.unwrap();
    proxy.take();
    // An hour and a second later, on a clock of the test's own: no sleeping.
    let later = Utc::now() + Duration::seconds(3601);
    let report = large
        .clone()
        .with_clock(tablekit::clock::ManualClock::new(later))
        .sweep_orphans()
        .await
        .unwrap();
    assert_eq!((report.listed, report.live), (4, 3));
    assert_eq!(report.deleted, [orphan]);
    measured(
        "LargeTable::sweep_orphans (3 live, 1 orphan)",
        &proxy.take(),
        &c,
        &[
            "LIST blob",
            "GET table",
            "GET table",
            "GET table",
            "GET table",
            "DELETE blob",
        ],
    );

    let split = SplitTable::new(table);
    let mut jun = staff("00010", 100 * 1024);
    split.insert(&mut jun).await.unwrap();
    measured("SplitTable::insert", &proxy.take(), &c, &["POST table"]);
    let back = split.get(("Marketing", "00010")).await.unwrap().unwrap();
    assert_eq!(back.photo, jun.photo);
    measured("SplitTable::get", &proxy.take(), &c, &["GET table"]);
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
struct QueueLog {
    level: String,
    message: String,
}

/// LogWriter's flushes and LogReader's read of the seed's window 15:04–15:06
/// over two hours of blobs.
#[tokio::test]
async fn log_data_makes_the_requests_its_docs_list() {
    if common::service().is_none() {
        return;
    }
    let conn = std::env::var(common::CONNECTION_STRING_VAR).unwrap();
    let proxy = CountingProxy::start(&conn).await;
    let container = proxied_container(&proxy, "countlogs-").await;
    let c = container.name().to_owned();
    println!("| operation | measured | requests |\n|---|---|---|");
    proxy.take();
    let at = |h: u32, m: u32| Utc.with_ymd_and_hms(2014, 7, 31, h, m, 0).unwrap();
    let record = |m: u32| QueueLog {
        level: if m.is_multiple_of(7) { "Error" } else { "Info" }.into(),
        message: format!("minute {m}"),
    };

    // Batches of 5 records, one a minute from 14:00 to 15:59: 12 blobs an hour.
    let mut writer = LogWriter::new(container.clone(), "queue")
        .unwrap()
        .max_records(5);
    for m in 0..4 {
        writer.log(at(14, m), &record(m)).await.unwrap();
    }
    assert!(proxy.take().requests.is_empty(), "buffered: no request");
    let written = writer.log(at(14, 4), &record(4)).await.unwrap();
    assert_eq!(written.len(), 1);
    measured(
        "LogWriter::flush, first in the hour",
        &proxy.take(),
        &c,
        &["LIST blob", "PUT blob"],
    );
    for m in 5..10 {
        writer.log(at(14, m), &record(m)).await.unwrap();
    }
    measured("LogWriter::flush, next", &proxy.take(), &c, &["PUT blob"]);
    for h in [14, 15] {
        for m in 0..60 {
            if h == 14 && m < 10 {
                continue;
            }
            writer.log(at(h, m), &record(m)).await.unwrap();
        }
    }
    assert_eq!(writer.pending(), 0);
    assert_eq!(container.list_blobs().fetch_all().await.unwrap().len(), 24);
    proxy.take();

    let reader = LogReader::<QueueLog>::new(container.clone(), "queue").unwrap();
    let window: Vec<_> = reader
        .read(at(15, 4)..at(15, 6))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        window.iter().map(|r| r.time).collect::<Vec<_>>(),
        [at(15, 4), at(15, 5)]
    );
    // One listing of the 15:00 folder (12 blobs), two downloads: 15:00–15:04
    // and 15:05–15:09; the other ten are skipped by their metadata.
    measured(
        "LogReader::read 15:04..15:06 (24 blobs in 2 hours)",
        &proxy.take(),
        &c,
        &["LIST blob", "GET blob", "GET blob"],
    );
}
