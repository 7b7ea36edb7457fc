//! Index entities, option 2 (§3.4), against a live service: the seed's
//! `Sales` / `Jones` / `000152`, a last-name change over three entities,
//! concurrent writers, stale ETags, duplicates and the 64 KiB list limit.

mod common;

use tablekit::TableServiceClient;

use tablekit::{DynamicEntity, ETag, EdmValue, IfMatch, TableClient, TableEntity};
use tablekit_patterns::index_entity::{IndexEntities, ENTITY_IDS};

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    last_name: String,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

fn employee(id: u32, last: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        employee_id: id,
        last_name: last.into(),
        etag: None,
    }
}

fn by_last_name(table: TableClient<Employee>) -> IndexEntities<Employee> {
    IndexEntities::new(table, "lastname_", |e: &Employee| e.last_name.clone())
}

/// Reads the partition directly: every index entity lists exactly the
/// employees with its last name, and there is no empty index entity.
async fn assert_consistent(table: &TableClient<Employee>) -> Vec<(String, Vec<String>)> {
    let rows = common::rows(table, "Sales").await;
    let mut index = Vec::new();
    for r in rows.iter().filter(|r| r.row_key.starts_with("lastname_")) {
        let last = &r.row_key["lastname_".len()..];
        let mut ids: Vec<String> = match r.get(ENTITY_IDS) {
            Some(EdmValue::String(s)) => s.split('\n').map(str::to_owned).collect(),
            other => panic!("{}: {other:?}", r.row_key),
        };
        ids.sort();
        let mut expected: Vec<String> = rows
            .iter()
            .filter(|e| !e.row_key.starts_with("lastname_"))
            .filter(|e| e.get("LastName") == Some(&EdmValue::String(last.to_owned())))
            .map(|e| e.row_key.clone())
            .collect();
        expected.sort();
        assert_eq!(ids, expected, "index entity {}", r.row_key);
        index.push((last.to_owned(), ids));
    }
    for e in rows.iter().filter(|e| !e.row_key.starts_with("lastname_")) {
        let Some(EdmValue::String(last)) = e.get("LastName") else {
            panic!()
        };
        assert!(
            index.iter().any(|(l, _)| l == last),
            "{} is not indexed",
            e.row_key
        );
    }
    index
}

async fn adding_000152_jones_updates_the_jones_index_entity(svc: TableServiceClient) {
    let table = common::fresh_table::<Employee>(&svc, "IdxEnt").await;
    let idx = by_last_name(table.clone());
    idx.insert(&mut employee(100, "Jones")).await.unwrap(); // creates lastname_Jones
    let mut e = employee(152, "Jones");
    idx.insert(&mut e).await.unwrap();
    assert!(e.etag.is_some());
    idx.insert(&mut employee(7, "Smith")).await.unwrap();

    assert_eq!(
        idx.ids("Sales", "Jones").await.unwrap(),
        ["000100", "000152"]
    );
    let found: Vec<u32> = idx
        .find("Sales", "Jones")
        .await
        .unwrap()
        .iter()
        .map(|e| e.employee_id)
        .collect();
    assert_eq!(found, [100, 152]);
    assert!(idx.find("Sales", "Nobody").await.unwrap().is_empty());
    assert_eq!(
        assert_consistent(&table).await,
        [
            (
                "Jones".to_owned(),
                vec!["000100".to_owned(), "000152".to_owned()]
            ),
            ("Smith".to_owned(), vec!["000007".to_owned()])
        ]
    );

    // A last-name change: one transaction over the employee and both index entities.
    let mut renamed = e.clone();
    renamed.last_name = "Smith".into();
    idx.update(&e, &mut renamed, IfMatch::ETag(e.etag.clone().unwrap()))
        .await
        .unwrap();
    assert_eq!(idx.ids("Sales", "Jones").await.unwrap(), ["000100"]);
    assert_eq!(
        idx.ids("Sales", "Smith").await.unwrap(),
        ["000007", "000152"]
    );
    assert_consistent(&table).await;

    // Removing the last Jones deletes the index entity.
    let jones = table.get(("Sales", "000100")).await.unwrap().unwrap();
    idx.delete(&jones, IfMatch::ETag(jones.etag.clone().unwrap()))
        .await
        .unwrap();
    assert_eq!(assert_consistent(&table).await.len(), 1);
    assert!(table
        .with_type::<DynamicEntity>()
        .get(("Sales", "lastname_Jones"))
        .await
        .unwrap()
        .is_none());
}

async fn stale_writes_and_duplicates_change_nothing(svc: TableServiceClient) {
    let table = common::fresh_table::<Employee>(&svc, "IdxEntStale").await;
    let idx = by_last_name(table.clone());
    let other = by_last_name(
        common::second_service(&svc)
            .table::<Employee>(table.name())
            .unwrap(),
    );
    let mut e = employee(152, "Jones");
    idx.insert(&mut e).await.unwrap();

    // Another client renames the employee after our read: our rename is refused.
    let mut theirs = e.clone();
    theirs.last_name = "Brown".into();
    other
        .update(&e, &mut theirs, IfMatch::ETag(e.etag.clone().unwrap()))
        .await
        .unwrap();
    let mut mine = e.clone();
    mine.last_name = "Smith".into();
    let err = idx
        .update(&e, &mut mine, IfMatch::ETag(e.etag.clone().unwrap()))
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");
    assert_eq!(
        err.batch_index(),
        Some(0),
        "the employee, not an index entity"
    );
    assert_eq!(
        assert_consistent(&table).await,
        [("Brown".to_owned(), vec!["000152".to_owned()])]
    );

    // A duplicate employee id is a conflict and the index keeps one entry.
    let err = idx.insert(&mut employee(152, "Brown")).await.unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    assert_eq!(
        assert_consistent(&table).await,
        [("Brown".to_owned(), vec!["000152".to_owned()])]
    );
}

/// Two clients add employees of one last name at once, the index entity not
/// existing yet: creations collide (409) and updates race (412), and every
/// loser starts again from the read, so no RowKey is lost.
async fn concurrent_writers_of_one_index_entity_lose_nothing(svc: TableServiceClient) {
    let table = common::fresh_table::<Employee>(&svc, "IdxEntRace").await;
    let mine = by_last_name(table.clone());
    let theirs = by_last_name(
        common::second_service(&svc)
            .table::<Employee>(table.name())
            .unwrap(),
    );
    let run = |idx: IndexEntities<Employee>, base: u32| async move {
        for i in 0..8 {
            idx.insert(&mut employee(base + i, "Jones")).await.unwrap();
        }
    };
    tokio::join!(run(mine.clone(), 100), run(theirs, 200));
    let index = assert_consistent(&table).await;
    assert_eq!(index.len(), 1);
    assert_eq!(index[0].1.len(), 16);
}

async fn a_list_past_64_kib_is_refused_before_the_write(svc: TableServiceClient) {
    let table = common::fresh_table::<Employee>(&svc, "IdxEntBig").await;
    let idx = by_last_name(table.clone());
    // 4,681 RowKeys of 6 digits: 32,766 characters (65,532 UTF-16 bytes), just
    // under the 64 KiB a String may hold; one more RowKey would not fit.
    let ids: Vec<String> = (0..4_681).map(|i| format!("{i:06}")).collect();
    table
        .with_type::<DynamicEntity>()
        .insert(&DynamicEntity::new("Sales", "lastname_Jones").with(ENTITY_IDS, ids.join("\n")))
        .await
        .unwrap();
    let err = idx
        .insert(&mut employee(999_999, "Jones"))
        .await
        .unwrap_err();
    common::assert_invalid(&err);
    assert!(table.get(("Sales", "999999")).await.unwrap().is_none());
    assert_eq!(idx.ids("Sales", "Jones").await.unwrap().len(), 4_681);
}

#[tokio::test]
async fn bad_values_and_keys_are_refused_before_any_request() {
    let table = common::offline_service()
        .table::<Employee>("Offline")
        .unwrap();
    let idx = by_last_name(table.clone());
    common::assert_invalid(&idx.insert(&mut employee(1, "Jo/nes")).await.unwrap_err());
    common::assert_invalid(&idx.ids("Sales", "a#b").await.unwrap_err());
    let clash = IndexEntities::new(table, "0", |e: &Employee| e.last_name.clone());
    common::assert_invalid(&clash.insert(&mut employee(1, "Jones")).await.unwrap_err());
}

common::on_both! {
    adding_000152_jones_updates_the_jones_index_entity,
    stale_writes_and_duplicates_change_nothing,
    concurrent_writers_of_one_index_entity_lose_nothing [flavor = "multi_thread", worker_threads = 2],
    a_list_past_64_kib_is_refused_before_the_write,
}
