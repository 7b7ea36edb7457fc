//! The intra-partition secondary index pattern (§3.1) against a live service:
//! the seeds' keys and ranges, uniqueness, concurrency, the limits, and that no
//! failed request leaves the copies inconsistent.

use crate::common;
use crate::common::BeforeWrite as _;
use tablekit::testing::TestEnv;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tablekit::{DynamicEntity, ETag, EdmValue, IfMatch, TableClient, TableEntity};
use tablekit_patterns::index::{Index, IndexedTable, PRIMARY_ROW_KEY};
use tablekit_patterns::range::KeyRange;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    first_name: String,
    last_name: String,
    email: String,
    age: i32,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

/// The email copies leave out the age (the guide's example of a projection).
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
struct Contact {
    department: String,
    employee_id: u32,
    last_name: String,
    email: String,
}

fn employee(id: u32, last: &str, email: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        employee_id: id,
        first_name: "F".into(),
        last_name: last.into(),
        email: email.into(),
        age: 30 + (id % 20) as i32,
        etag: None,
    }
}

fn by_email() -> Index<Employee> {
    Index::new("email", "email_", |e: &Employee| e.email.to_lowercase())
}

fn by_name() -> Index<Employee> {
    Index::new("lastname", "name_", |e: &Employee| {
        format!("{}_{:06}", e.last_name, e.employee_id)
    })
}

fn directory(table: TableClient<Employee>) -> (IndexedTable<Employee>, Index<Employee>) {
    let email = by_email();
    let t = IndexedTable::new(table)
        .unwrap()
        .with_index(&email)
        .unwrap()
        .with_index(&by_name())
        .unwrap();
    (t, email)
}

fn string(e: &DynamicEntity, name: &str) -> String {
    match e.get(name) {
        Some(EdmValue::String(s)) => s.clone(),
        other => panic!("{name} of {} is {other:?}", e.row_key),
    }
}

/// Reads the partition directly and checks that every primary row has exactly
/// its two copies, with the same properties, and that no other row exists.
/// Returns the primaries' RowKeys and emails.
async fn assert_consistent(table: &TableClient<Employee>) -> Vec<(String, String)> {
    let rows = common::rows(table, "Sales").await;
    let mut expected = BTreeSet::new();
    let mut primaries = Vec::new();
    for r in rows.iter().filter(|r| r.row_key.starts_with("empid_")) {
        let email = string(r, "Email");
        let last = string(r, "LastName");
        let id = &r.row_key["empid_".len()..];
        expected.insert(format!("email_{}", email.to_lowercase()));
        expected.insert(format!("name_{last}_{id}"));
        primaries.push((r.row_key.clone(), email));
    }
    let mut found = BTreeSet::new();
    for c in rows.iter().filter(|r| !r.row_key.starts_with("empid_")) {
        let primary_rk = string(c, PRIMARY_ROW_KEY);
        let primary = rows
            .iter()
            .find(|r| r.row_key == primary_rk)
            .unwrap_or_else(|| panic!("copy {} has no primary {primary_rk}", c.row_key));
        let mut props = c.properties.clone();
        props.remove(PRIMARY_ROW_KEY);
        assert_eq!(
            props, primary.properties,
            "copy {} differs from {primary_rk}",
            c.row_key
        );
        assert!(found.insert(c.row_key.clone()));
    }
    assert_eq!(
        found, expected,
        "the index copies do not match the entities"
    );
    primaries
}

async fn insert_writes_every_copy_and_lookups_find_the_seed_keys(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "Idx").await;
    let (dir, email) = directory(table.clone());

    let mut jones = employee(223, "Jones", "jonesj@contoso.com");
    dir.insert(&mut jones).await.unwrap();
    assert!(jones.etag.is_some(), "insert sets the ETag");

    let keys: Vec<String> = common::rows(&table, "Sales")
        .await
        .into_iter()
        .map(|r| r.row_key)
        .collect();
    assert_eq!(
        keys,
        [
            "email_jonesj@contoso.com",
            "empid_000223",
            "name_Jones_000223"
        ]
    );
    assert_consistent(&table).await;

    // Point reads by the primary key and by the index.
    let got = dir.get(("Sales", "empid_000223")).await.unwrap().unwrap();
    assert_eq!(got, jones);
    let mut via_email = dir
        .lookup(&email, "Sales", "jonesj@contoso.com")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(via_email.etag, None, "a copy's ETag is not the entity's");
    via_email.etag = jones.etag.clone();
    assert_eq!(via_email, jones);
    assert!(dir
        .lookup(&email, "Sales", "nobody@contoso.com")
        .await
        .unwrap()
        .is_none());
}

async fn ranges_come_back_in_the_order_of_the_chosen_index(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxRange").await;
    let (dir, email) = directory(table.clone());
    for (id, last, mail) in [
        (100, "Smith", "zed@contoso.com"),
        (152, "Jones", "bob@contoso.com"),
        (199, "Adams", "amy@contoso.com"),
        (200, "Brown", "al@contoso.com"),
        (99, "Clark", "abe@contoso.com"),
    ] {
        dir.insert(&mut employee(id, last, mail)).await.unwrap();
    }

    // ge 'empid_000100' and le 'empid_000199'
    let ids: Vec<u32> = dir
        .list_primary("Sales", KeyRange::inclusive("000100", "000199"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.employee_id)
        .collect();
    assert_eq!(ids, [100, 152, 199]);

    // ge 'email_a' and lt 'email_b', in email order
    let emails: Vec<String> = dir
        .list(&email, "Sales", KeyRange::prefix("a"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.email)
        .collect();
    assert_eq!(
        emails,
        ["abe@contoso.com", "al@contoso.com", "amy@contoso.com"]
    );

    // the whole index, and nothing of the other index or the primaries
    let all = dir.list(&email, "Sales", KeyRange::all()).await.unwrap();
    assert_eq!(all.len(), 5);
    assert_consistent(&table).await;
}

async fn projected_copies_hold_only_the_projection(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxProj").await;
    let contact = by_email().projected(|e: &Employee| Contact {
        department: e.department.clone(),
        employee_id: e.employee_id,
        last_name: e.last_name.clone(),
        email: e.email.clone(),
    });
    let dir = IndexedTable::new(table.clone())
        .unwrap()
        .with_index(&contact)
        .unwrap();
    dir.insert(&mut employee(223, "Jones", "JonesJ@contoso.com"))
        .await
        .unwrap();

    let rows = common::rows(&table, "Sales").await;
    let copy = rows
        .iter()
        .find(|r| r.row_key == "email_jonesj@contoso.com")
        .unwrap();
    assert!(copy.get("Age").is_none(), "the projection leaves out Age");
    assert!(copy.get("FirstName").is_none());
    let found = dir
        .lookup(&contact, "Sales", "jonesj@contoso.com")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        found,
        Contact {
            department: "Sales".into(),
            employee_id: 223,
            last_name: "Jones".into(),
            email: "JonesJ@contoso.com".into(),
        }
    );
    // An update moves the projected copy too.
    dir.modify(("Sales", "empid_000223"), |e| {
        e.email = "jj@contoso.com".into()
    })
    .await
    .unwrap();
    let keys: Vec<String> = common::rows(&table, "Sales")
        .await
        .into_iter()
        .map(|r| r.row_key)
        .collect();
    assert_eq!(keys, ["email_jj@contoso.com", "empid_000223"]);
}

async fn changing_an_indexed_value_moves_its_copy_in_one_transaction(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxMove").await;
    let (dir, email) = directory(table.clone());
    let mut jones = employee(223, "Jones", "jonesj@contoso.com");
    dir.insert(&mut jones).await.unwrap();

    let mut moved = jones.clone();
    moved.email = "jones.j@contoso.com".into();
    moved.age = 41;
    let etag = jones.etag.clone().unwrap();
    dir.update(&jones, &mut moved, IfMatch::ETag(etag.clone()))
        .await
        .unwrap();
    assert_ne!(moved.etag, Some(etag));

    assert_eq!(
        assert_consistent(&table).await,
        [("empid_000223".to_owned(), "jones.j@contoso.com".to_owned())]
    );
    assert!(dir
        .lookup(&email, "Sales", "jonesj@contoso.com")
        .await
        .unwrap()
        .is_none());
    let found = dir
        .lookup(&email, "Sales", "jones.j@contoso.com")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.age, 41);
}

async fn a_taken_key_or_indexed_value_is_a_conflict_that_writes_nothing(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxDup").await;
    let (dir, _) = directory(table.clone());
    dir.insert(&mut employee(223, "Jones", "jonesj@contoso.com"))
        .await
        .unwrap();
    let before = common::rows(&table, "Sales").await;

    // The same email for another employee: the email copy's insert conflicts.
    let err = dir
        .insert(&mut employee(224, "Other", "JonesJ@contoso.com"))
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    // The same employee id: the primary insert conflicts.
    let err = dir
        .insert(&mut employee(223, "Else", "else@contoso.com"))
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    // Moving another employee's email onto a taken one.
    dir.insert(&mut employee(300, "Kim", "kim@contoso.com"))
        .await
        .unwrap();
    let err = dir
        .modify(("Sales", "empid_000300"), |e| {
            e.email = "jonesj@contoso.com".into()
        })
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");

    let after = common::rows(&table, "Sales").await;
    assert_eq!(after.len(), before.len() + 3);
    assert_eq!(
        assert_consistent(&table).await,
        [
            ("empid_000223".to_owned(), "jonesj@contoso.com".to_owned()),
            ("empid_000300".to_owned(), "kim@contoso.com".to_owned())
        ]
    );
}

/// Failure injected between the read and the write of an update and of a
/// delete: a second client changes the entity. The stale write is refused
/// (412) and the table holds exactly the other writer's consistent version.
async fn a_stale_write_is_refused_and_leaves_the_copies_consistent(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxStale").await;
    let (dir, _) = directory(table.clone());
    let other_table = common::second_service(&svc)
        .table::<Employee>(table.name())
        .unwrap();
    let (other, _) = directory(other_table);

    dir.insert(&mut employee(223, "Jones", "jonesj@contoso.com"))
        .await
        .unwrap();
    let (read, etag) = dir
        .get_with_etag(("Sales", "empid_000223"))
        .await
        .unwrap()
        .unwrap();

    // The other writer changes the email after our read.
    other
        .modify(("Sales", "empid_000223"), |e| {
            e.email = "other@contoso.com".into()
        })
        .await
        .unwrap()
        .unwrap();

    let mut mine = read.clone();
    mine.email = "mine@contoso.com".into();
    let err = dir
        .update(&read, &mut mine, IfMatch::ETag(etag.clone()))
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");
    assert_eq!(
        assert_consistent(&table).await,
        [("empid_000223".to_owned(), "other@contoso.com".to_owned())]
    );

    // A delete with the stale ETag is refused the same way.
    let err = dir.delete(&read, IfMatch::ETag(etag)).await.unwrap_err();
    assert!(
        err.is_precondition_failed() || err.is_not_found(),
        "{err:?}"
    );
    assert_eq!(assert_consistent(&table).await.len(), 1);
}

/// The retrying operations: the closure runs between the read and the write,
/// so a write from a second client there is a deterministic interleaving.
async fn modify_starts_again_from_the_read_after_a_concurrent_writer(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxRetry").await;
    let (dir, _) = directory(table.clone());
    let other_table = common::second_service(&svc)
        .table::<Employee>(table.name())
        .unwrap();
    let (other, _) = directory(other_table);
    dir.insert(&mut employee(223, "Jones", "jonesj@contoso.com"))
        .await
        .unwrap();

    let handle = tokio::runtime::Handle::current();
    let mut calls = 0;
    let written = dir
        .modify(("Sales", "empid_000223"), |e| {
            calls += 1;
            if calls == 1 {
                tokio::task::block_in_place(|| {
                    handle.block_on(async {
                        other
                            .modify(("Sales", "empid_000223"), |e| {
                                e.email = "other@contoso.com".into()
                            })
                            .await
                            .unwrap();
                    })
                });
            }
            e.last_name = "Smith".into();
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(calls, 2, "one conflict, one retry");
    assert_eq!(
        written.email, "other@contoso.com",
        "the retry saw the other write"
    );
    assert_eq!(written.last_name, "Smith");
    assert_consistent(&table).await;
    let rows = common::rows(&table, "Sales").await;
    assert!(rows.iter().any(|r| r.row_key == "name_Smith_000223"));
    assert!(rows.iter().any(|r| r.row_key == "email_other@contoso.com"));
}

async fn upsert_and_delete_key_handle_present_and_missing_entities(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxUpsert").await;
    let (dir, _) = directory(table.clone());

    let mut e = employee(5, "Lee", "lee@contoso.com");
    dir.upsert(&mut e).await.unwrap(); // inserts
    e.email = "lee2@contoso.com".into();
    dir.upsert(&mut e).await.unwrap(); // replaces, moving the email copy
    assert_eq!(
        assert_consistent(&table).await,
        [("empid_000005".to_owned(), "lee2@contoso.com".to_owned())]
    );

    assert!(dir.delete_key(("Sales", "empid_000005")).await.unwrap());
    assert!(!dir.delete_key(("Sales", "empid_000005")).await.unwrap());
    assert!(common::rows(&table, "Sales").await.is_empty());
    assert!(dir
        .modify(("Sales", "empid_000005"), |_| {})
        .await
        .unwrap()
        .is_none());
}

/// `upsert` and `delete_key` read first; a second client writes between that
/// read and the transaction (inserting the entity the upsert found missing,
/// changing the one it found, changing the one to delete). Each transaction
/// is refused, read again and retried, and the copies stay consistent.
async fn upsert_and_delete_key_start_again_after_a_concurrent_writer(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxUpsRace").await;
    let other_table = common::second_service(&svc)
        .table::<Employee>(table.name())
        .unwrap();
    let (other, _) = directory(other_table);
    let calls = Arc::new(Mutex::new(Vec::new()));
    // What the other writer does on our first attempt: insert an entity, or
    // change one's email.
    let action: Arc<Mutex<Option<Employee>>> = Arc::default();
    let handle = tokio::runtime::Handle::current();
    let dir = {
        let (calls, action) = (calls.clone(), action.clone());
        directory(table.clone()).0.before_write(move |attempt| {
            calls.lock().unwrap().push(attempt);
            let Some(mut theirs) = action.lock().unwrap().take() else {
                return;
            };
            tokio::task::block_in_place(|| {
                handle.block_on(async {
                    let key = theirs.key();
                    if other.get(key.clone()).await.unwrap().is_none() {
                        other.insert(&mut theirs).await.unwrap();
                    } else {
                        other
                            .modify(key, |e| e.email = theirs.email.clone())
                            .await
                            .unwrap();
                    }
                })
            });
        })
    };
    let take = || std::mem::take(&mut *calls.lock().unwrap());

    // Missing at the read, inserted by the other before our insert: 409, then an update.
    *action.lock().unwrap() = Some(employee(5, "Lee", "theirs@contoso.com"));
    let mut mine = employee(5, "Lee", "mine@contoso.com");
    dir.upsert(&mut mine).await.unwrap();
    assert_eq!(take(), [1, 2]);
    assert_eq!(
        assert_consistent(&table).await,
        [("empid_000005".to_owned(), "mine@contoso.com".to_owned())]
    );

    // Changed by the other after our read: 412, then an update of their version.
    *action.lock().unwrap() = Some(employee(5, "Lee", "other@contoso.com"));
    mine.email = "mine2@contoso.com".into();
    dir.upsert(&mut mine).await.unwrap();
    assert_eq!(take(), [1, 2]);
    assert_eq!(
        assert_consistent(&table).await,
        [("empid_000005".to_owned(), "mine2@contoso.com".to_owned())]
    );

    // delete_key: changed after our read, 412, then deleted with every copy.
    *action.lock().unwrap() = Some(employee(5, "Lee", "last@contoso.com"));
    assert!(dir.delete_key(("Sales", "empid_000005")).await.unwrap());
    assert_eq!(take(), [1, 2]);
    assert!(common::rows(&table, "Sales").await.is_empty());
}

#[tokio::test]
async fn what_cannot_fit_one_transaction_is_refused_before_any_request() {
    let table = common::offline_service()
        .table::<Employee>("Offline")
        .unwrap();

    // 1 + 2 x 50 operations cannot fit one transaction.
    let mut dir = IndexedTable::new(table.clone()).unwrap();
    for i in 0..49 {
        dir = dir
            .with_index(&Index::new(
                format!("i{i}"),
                format!("i{i:02}_"),
                |e: &Employee| e.email.clone(),
            ))
            .unwrap();
    }
    let err = dir
        .with_index(&Index::new("i49", "i49_", |e: &Employee| e.email.clone()))
        .unwrap_err();
    common::assert_invalid(&err);

    // Prefixes that overlap would mix one index's rows into another's ranges.
    let err = IndexedTable::new(table.clone())
        .unwrap()
        .with_index(&Index::new("bad", "emp", |e: &Employee| e.email.clone()))
        .unwrap_err();
    common::assert_invalid(&err);
    let err = IndexedTable::new(table.clone())
        .unwrap()
        .with_index(&by_email())
        .unwrap()
        .with_index(&Index::new("bad", "email_x", |e: &Employee| {
            e.email.clone()
        }))
        .unwrap_err();
    common::assert_invalid(&err);

    // An indexed value that is not a valid RowKey.
    let (dir, _) = directory(table.clone());
    let err = dir
        .insert(&mut employee(1, "Slash", "a/b@contoso.com"))
        .await
        .unwrap_err();
    common::assert_invalid(&err);

    // Copies x size over 4 MiB: 10 copies of ~480 KB each.
    let raw = common::offline_service()
        .table::<DynamicEntity>("Offline")
        .unwrap();
    let mut wide = IndexedTable::with_primary_prefix(raw, "empid_").unwrap();
    for i in 0..9 {
        wide = wide
            .with_index(&Index::new(
                format!("i{i}"),
                format!("i{i}_"),
                |e: &DynamicEntity| e.row_key.clone(),
            ))
            .unwrap();
    }
    let mut big = DynamicEntity::new("Sales", "empid_000002");
    for p in 0..15 {
        big.set(format!("Blob{p}"), "x".repeat(32_000));
    }
    let err = wide.insert(&mut big).await.unwrap_err();
    let msg = common::assert_invalid(&err);
    assert!(msg.contains("bytes"), "{msg}");

    // A prefix other than the derive's, or none where the derive has none.
    let err = IndexedTable::with_primary_prefix(table, "emp_").unwrap_err();
    assert!(
        common::assert_invalid(&err).contains("start with \"empid_\""),
        "{err}"
    );
    let raw = common::offline_service()
        .table::<DynamicEntity>("Offline")
        .unwrap();
    let err = IndexedTable::new(raw.clone()).unwrap_err();
    assert!(
        common::assert_invalid(&err).contains("with_primary_prefix"),
        "{err}"
    );

    // A RowKey outside the primary prefix.
    let err = IndexedTable::with_primary_prefix(raw, "empid_")
        .unwrap()
        .insert(&mut DynamicEntity::new("Sales", "emp_3"))
        .await
        .unwrap_err();
    common::assert_invalid(&err);
}

tablekit::testing::conformance!(
    insert_writes_every_copy_and_lookups_find_the_seed_keys,
    ranges_come_back_in_the_order_of_the_chosen_index,
    projected_copies_hold_only_the_projection,
    changing_an_indexed_value_moves_its_copy_in_one_transaction,
    a_taken_key_or_indexed_value_is_a_conflict_that_writes_nothing,
    a_stale_write_is_refused_and_leaves_the_copies_consistent,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    modify_starts_again_from_the_read_after_a_concurrent_writer,
    upsert_and_delete_key_handle_present_and_missing_entities,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    upsert_and_delete_key_start_again_after_a_concurrent_writer,
);
