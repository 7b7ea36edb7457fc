//! Index entities, options 2 and 3 (§3.4), against a live service: the
//! seed's `Sales` / `Jones` / `000152`, a last-name change over three
//! entities, concurrent writers, another writer's change injected between
//! the read of an index entity and the write, stale ETags, duplicates, lists
//! split past the 64 KiB a property holds, and the index in another
//! partition with what a failure between its two writes leaves and what
//! racing writers of one entity leave (never the entity unlisted). The
//! random sequences are in `index_entities_model.rs`.

use crate::common;
use crate::common::BeforeWrite as _;
use tablekit::testing::TestEnv;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tablekit::{DynamicEntity, ETag, EdmValue, EntityKey, IfMatch, TableClient, TableEntity};
use tablekit_patterns::index_entity::{
    chunk_row_key, IndexEntities, SeparateIndexEntities, ENTITY_IDS, MAX_CHUNK_UNITS,
};

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

/// The index entities of a partition read directly, by value: for each, its
/// chunks' numbers and entries in RowKey order.
fn index_of(rows: &[DynamicEntity], prefix: &str) -> BTreeMap<String, Vec<(usize, Vec<String>)>> {
    let mut index: BTreeMap<String, Vec<(usize, Vec<String>)>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.row_key.starts_with(prefix)) {
        let (value, n) = r.row_key[prefix.len()..].rsplit_once('_').unwrap();
        let entries: Vec<String> = match r.get(ENTITY_IDS) {
            Some(EdmValue::String(s)) => s.split('\n').map(str::to_owned).collect(),
            other => panic!("{}: {other:?}", r.row_key),
        };
        assert!(
            !entries.is_empty() && !entries.iter().any(String::is_empty),
            "{} is empty",
            r.row_key
        );
        index
            .entry(value.to_owned())
            .or_default()
            .push((n.parse().unwrap(), entries));
    }
    index
}

/// Reads the partition directly: every value's index entities together list
/// exactly the employees with that last name, once each, and there is no
/// empty index entity. Returns each value's sorted RowKeys.
async fn assert_consistent(table: &TableClient<Employee>) -> Vec<(String, Vec<String>)> {
    let rows = common::rows(table, "Sales").await;
    let mut index = Vec::new();
    for (last, chunks) in index_of(&rows, "lastname_") {
        let mut ids: Vec<String> = chunks.into_iter().flat_map(|(_, e)| e).collect();
        ids.sort();
        let mut expected: Vec<String> = rows
            .iter()
            .filter(|e| !e.row_key.starts_with("lastname_"))
            .filter(|e| e.get("LastName") == Some(&EdmValue::String(last.clone())))
            .map(|e| e.row_key.clone())
            .collect();
        expected.sort();
        assert_eq!(ids, expected, "index entities of {last}");
        index.push((last, ids));
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

async fn adding_000152_jones_updates_the_jones_index_entity(env: TestEnv) {
    let svc = env.tables().clone();
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
        .get(("Sales", "lastname_Jones_000"))
        .await
        .unwrap()
        .is_none());
}

async fn stale_writes_and_duplicates_change_nothing(env: TestEnv) {
    let svc = env.tables().clone();
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
async fn concurrent_writers_of_one_index_entity_lose_nothing(env: TestEnv) {
    let svc = env.tables().clone();
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

fn employee_in(dept: &str, id: u32, last: &str) -> Employee {
    Employee {
        department: dept.into(),
        ..employee(id, last)
    }
}

/// Three 6-digit RowKeys fill an index entity of 20 UTF-16 code units
/// (`000001\n000002\n000003`).
async fn a_list_grows_over_several_index_entities_and_shrinks_back(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxEntSplit").await;
    let idx = by_last_name(table.clone()).with_chunk_capacity(20).unwrap();
    for id in 1..=7 {
        idx.insert(&mut employee(id, "Jones")).await.unwrap();
    }
    let rows = common::rows(&table, "Sales").await;
    let chunks: Vec<(usize, usize)> = index_of(&rows, "lastname_")["Jones"]
        .iter()
        .map(|(n, e)| (*n, e.len()))
        .collect();
    assert_eq!(chunks, [(0, 3), (1, 3), (2, 1)]);
    let all: Vec<String> = (1..=7).map(|i| format!("{i:06}")).collect();
    assert_eq!(idx.ids("Sales", "Jones").await.unwrap(), all);
    let found: Vec<u32> = idx
        .find("Sales", "Jones")
        .await
        .unwrap()
        .iter()
        .map(|e| e.employee_id)
        .collect();
    assert_eq!(found, [1, 2, 3, 4, 5, 6, 7]);
    assert_consistent(&table).await;

    // Removing entries shrinks the lists; an emptied index entity is deleted.
    for id in [4, 5, 6, 7, 2] {
        let e = table
            .get(("Sales", format!("{id:06}")))
            .await
            .unwrap()
            .unwrap();
        idx.delete(&e, IfMatch::Any).await.unwrap();
    }
    let rows = common::rows(&table, "Sales").await;
    assert_eq!(
        index_of(&rows, "lastname_")["Jones"],
        [(0, vec!["000001".to_owned(), "000003".to_owned()])]
    );
    // The next entry fills the room left in the first index entity.
    idx.insert(&mut employee(8, "Jones")).await.unwrap();
    assert_eq!(
        idx.ids("Sales", "Jones").await.unwrap(),
        ["000001", "000003", "000008"]
    );
    for id in [1, 3, 8] {
        let e = table
            .get(("Sales", format!("{id:06}")))
            .await
            .unwrap()
            .unwrap();
        idx.delete(&e, IfMatch::Any).await.unwrap();
    }
    assert!(common::rows(&table, "Sales").await.is_empty());
}

async fn a_full_64_kib_index_entity_spills_into_the_next(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxEntBig").await;
    let idx = by_last_name(table.clone());
    // 4,681 RowKeys of 6 digits: 32,766 UTF-16 code units (65,532 bytes), just
    // under the 64 KiB a String may hold; one more RowKey does not fit.
    let ids: Vec<String> = (0..4_681).map(|i| format!("{i:06}")).collect();
    let full = ids.join("\n");
    assert!(full.len() + 7 > MAX_CHUNK_UNITS);
    table
        .with_type::<DynamicEntity>()
        .insert(
            &DynamicEntity::new("Sales", chunk_row_key("lastname_", "Jones", 0))
                .with(ENTITY_IDS, full.clone()),
        )
        .await
        .unwrap();
    let mut e = employee(999_999, "Jones");
    idx.insert(&mut e).await.unwrap();
    let listed = idx.ids("Sales", "Jones").await.unwrap();
    assert_eq!(listed.len(), 4_682);
    assert_eq!(listed.last().unwrap(), "999999");
    let rows = common::rows(&table, "Sales").await;
    let index = index_of(&rows, "lastname_");
    assert_eq!(index["Jones"].len(), 2);
    assert_eq!(index["Jones"][1], (1, vec!["999999".to_owned()]));
    assert_eq!(idx.find("Sales", "Jones").await.unwrap(), [e.clone()]);

    idx.delete(&e, IfMatch::Any).await.unwrap();
    let rows = common::rows(&table, "Sales").await;
    assert_eq!(index_of(&rows, "lastname_")["Jones"], [(0, ids)]);
}

/// Two RowKeys fill an index entity of 13 code units: a rename takes an entry
/// out of one split list and adds it to another, creating and deleting index
/// entities in the same transaction as the employee.
async fn a_last_name_change_moves_an_entry_between_split_lists(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxEntMove").await;
    let idx = by_last_name(table.clone()).with_chunk_capacity(13).unwrap();
    for (id, last) in [(1, "Jones"), (2, "Jones"), (3, "Jones"), (4, "Smith")] {
        idx.insert(&mut employee(id, last)).await.unwrap();
    }
    for id in [1, 3] {
        let e = table
            .get(("Sales", format!("{id:06}")))
            .await
            .unwrap()
            .unwrap();
        let mut renamed = Employee {
            last_name: "Smith".into(),
            ..e.clone()
        };
        idx.update(&e, &mut renamed, IfMatch::ETag(e.etag.clone().unwrap()))
            .await
            .unwrap();
    }
    let rows = common::rows(&table, "Sales").await;
    let index = index_of(&rows, "lastname_");
    assert_eq!(index["Jones"], [(0, vec!["000002".to_owned()])]);
    assert_eq!(
        index["Smith"],
        [
            (0, vec!["000004".to_owned(), "000001".to_owned()]),
            (1, vec!["000003".to_owned()])
        ]
    );
    assert_consistent(&table).await;
}

/// Records the attempts the hook saw and, on the first, lets `inject` write
/// from another client: the step between the read of the index entities and
/// the write.
#[derive(Clone, Default)]
struct Injector {
    calls: Arc<std::sync::Mutex<Vec<usize>>>,
    injected: Arc<AtomicUsize>,
}

impl Injector {
    fn hook<F, Fut>(&self, inject: F) -> impl Fn(usize) + Send + Sync + 'static + use<F, Fut>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()>,
    {
        let this = self.clone();
        let handle = tokio::runtime::Handle::current();
        move |attempt| {
            this.calls.lock().unwrap().push(attempt);
            if this.injected.fetch_add(1, Ordering::SeqCst) == 0 {
                tokio::task::block_in_place(|| handle.block_on(inject()));
            }
        }
    }

    fn take(&self) -> Vec<usize> {
        self.injected.store(0, Ordering::SeqCst);
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

async fn an_index_entity_changed_between_its_read_and_the_transaction_is_read_again(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxEntInject").await;
    let other = by_last_name(
        common::second_service(&svc)
            .table::<Employee>(table.name())
            .unwrap(),
    );
    let next_id = Arc::new(AtomicUsize::new(500));
    let inj = Injector::default();
    // The other writer adds a Jones (insert, delete) or a Smith (update).
    let value = Arc::new(std::sync::Mutex::new("Jones"));
    let hook = {
        let (other, next_id, value) = (other.clone(), next_id.clone(), value.clone());
        inj.hook(move || {
            let (other, next_id, value) = (other.clone(), next_id.clone(), value.clone());
            async move {
                let id = next_id.fetch_add(1, Ordering::SeqCst) as u32;
                let last = *value.lock().unwrap();
                other.insert(&mut employee(id, last)).await.unwrap();
            }
        })
    };
    let idx = by_last_name(table.clone()).before_write(hook);

    // Insert into a value with no index entity yet: the other writer creates
    // it first (409 on our insert of it), and the retry appends.
    let mut e = employee(152, "Jones");
    idx.insert(&mut e).await.unwrap();
    assert_eq!(inj.take(), [1, 2], "one conflict, one retry");
    assert_eq!(
        idx.ids("Sales", "Jones").await.unwrap(),
        ["000500", "000152"]
    );
    assert_consistent(&table).await;

    // Insert into an existing index entity: 412 on it, then a retry.
    idx.insert(&mut employee(153, "Jones")).await.unwrap();
    assert_eq!(inj.take(), [1, 2]);
    assert_eq!(assert_consistent(&table).await[0].1.len(), 4);

    // A rename while the other writer adds to the new value's index entity.
    *value.lock().unwrap() = "Smith";
    other.insert(&mut employee(7, "Smith")).await.unwrap();
    let mut renamed = Employee {
        last_name: "Smith".into(),
        ..e.clone()
    };
    idx.update(&e, &mut renamed, IfMatch::ETag(e.etag.clone().unwrap()))
        .await
        .unwrap();
    assert_eq!(inj.take(), [1, 2]);
    assert_eq!(
        assert_consistent(&table).await,
        [
            (
                "Jones".to_owned(),
                vec![
                    "000153".to_owned(),
                    "000500".to_owned(),
                    "000501".to_owned()
                ]
            ),
            (
                "Smith".to_owned(),
                vec![
                    "000007".to_owned(),
                    "000152".to_owned(),
                    "000502".to_owned()
                ]
            ),
        ]
    );

    // A delete while the other writer adds a Jones.
    *value.lock().unwrap() = "Jones";
    let jones = table.get(("Sales", "000153")).await.unwrap().unwrap();
    idx.delete(&jones, IfMatch::ETag(jones.etag.clone().unwrap()))
        .await
        .unwrap();
    assert_eq!(inj.take(), [1, 2]);
    assert_eq!(
        assert_consistent(&table).await[0],
        (
            "Jones".to_owned(),
            vec![
                "000500".to_owned(),
                "000501".to_owned(),
                "000503".to_owned()
            ]
        )
    );
}

fn separate(
    table: TableClient<Employee>,
    index: &TableClient<DynamicEntity>,
) -> SeparateIndexEntities<Employee> {
    SeparateIndexEntities::new(table, index.clone(), "lastname", "", |e: &Employee| {
        e.last_name.clone()
    })
}

/// Reads the index partition and every entity directly: each value's index
/// entities list exactly the keys of the entities with that value, plus the
/// `dangling` entries. Returns each value's sorted entries.
async fn assert_separate_consistent(
    table: &TableClient<Employee>,
    index: &TableClient<DynamicEntity>,
    dangling: &[(&str, &str, &str)],
) -> BTreeMap<String, Vec<String>> {
    let listed: BTreeMap<String, Vec<String>> =
        index_of(&common::rows(index, "lastname").await, "")
            .into_iter()
            .map(|(value, chunks)| {
                let mut entries: Vec<String> = chunks.into_iter().flat_map(|(_, e)| e).collect();
                entries.sort();
                (value, entries)
            })
            .collect();
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // The index may share the table: read only the entities' partitions.
    let entities = table
        .query()
        .filter(|e| e.partition_key.ne("lastname"))
        .fetch_all()
        .await
        .unwrap();
    for e in &entities {
        expected
            .entry(e.last_name.clone())
            .or_default()
            .push(format!("{}\t{:06}", e.department, e.employee_id));
    }
    for (value, pk, rk) in dangling {
        expected
            .entry(value.to_string())
            .or_default()
            .push(format!("{pk}\t{rk}"));
    }
    for entries in expected.values_mut() {
        entries.sort();
    }
    assert_eq!(listed, expected);
    listed
}

async fn a_separate_index_lists_the_joneses_of_every_department(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxSep").await;
    let index = common::fresh_table::<DynamicEntity>(&svc, "IdxSepIndex").await;
    let idx = separate(table.clone(), &index)
        .with_chunk_capacity(40)
        .unwrap();

    let mut jones = employee(152, "Jones");
    idx.insert(&mut jones).await.unwrap();
    assert!(jones.etag.is_some());
    idx.insert(&mut employee_in("Marketing", 1, "Jones"))
        .await
        .unwrap();
    idx.insert(&mut employee(7, "Smith")).await.unwrap();
    // Three "Dept\t00000n" entries (16 + 15 + 15 + 2 separators) overflow 40
    // units: the third Jones starts a second index entity.
    idx.insert(&mut employee_in("Finance", 9, "Jones"))
        .await
        .unwrap();
    assert_eq!(
        idx.keys("Jones").await.unwrap(),
        [
            EntityKey::new("Sales", "000152"),
            EntityKey::new("Marketing", "000001"),
            EntityKey::new("Finance", "000009")
        ]
    );
    assert_eq!(
        index_of(&common::rows(&index, "lastname").await, "")["Jones"].len(),
        2
    );
    let found = idx.find("Jones").await.unwrap();
    assert!(found.dangling.is_empty());
    let depts: Vec<&str> = found
        .entities
        .iter()
        .map(|e| e.department.as_str())
        .collect();
    assert_eq!(depts, ["Sales", "Marketing", "Finance"]);
    assert_separate_consistent(&table, &index, &[]).await;

    // A rename moves the entry; a delete removes it (and an emptied index entity).
    let mut renamed = Employee {
        last_name: "Smith".into(),
        ..jones.clone()
    };
    idx.update(
        &jones,
        &mut renamed,
        IfMatch::ETag(jones.etag.clone().unwrap()),
    )
    .await
    .unwrap();
    assert_ne!(renamed.etag, jones.etag);
    let finance = table.get(("Finance", "000009")).await.unwrap().unwrap();
    idx.delete(&finance, IfMatch::Any).await.unwrap();
    let listed = assert_separate_consistent(&table, &index, &[]).await;
    assert_eq!(listed["Jones"], ["Marketing\t000001"]);
    assert_eq!(
        index_of(&common::rows(&index, "lastname").await, "")["Jones"].len(),
        1
    );

    // A taken key: the insert conflicts and its entry is taken out again,
    // unless the stored entity has the value (then the entry is its own).
    let err = idx.insert(&mut employee(152, "Brown")).await.unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    let err = idx.insert(&mut employee(152, "Smith")).await.unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    // A stale rename: refused, and the new value's entry is taken out again.
    let mut stale = Employee {
        last_name: "Brown".into(),
        ..jones.clone()
    };
    let err = idx
        .update(
            &renamed,
            &mut stale,
            IfMatch::ETag(jones.etag.clone().unwrap()),
        )
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");
    let listed = assert_separate_consistent(&table, &index, &[]).await;
    assert!(!listed.contains_key("Brown"));
    assert_eq!(listed["Smith"], ["Sales\t000007", "Sales\t000152"]);
}

/// A crash after the index write of an insert (the state is written by an
/// instance whose entities go to another table), after the entity write of a
/// rename and after the entity delete (a panic in the hook, which runs right
/// before the second index write): each leaves only entries that point at
/// nothing, which lookups skip and report.
async fn a_crash_between_the_two_writes_leaves_only_an_entry_pointing_at_nothing(env: TestEnv) {
    let svc = env.tables().clone();
    // The index in another partition of the entities' own table.
    let table = common::fresh_table::<Employee>(&svc, "IdxCrash").await;
    let index = table.with_type::<DynamicEntity>();
    let idx = separate(table.clone(), &index);
    for (id, last) in [(1, "Jones"), (2, "Jones"), (3, "Smith")] {
        idx.insert(&mut employee(id, last)).await.unwrap();
    }

    // Insert: listed, then the process dies before the entity is written.
    let elsewhere = common::fresh_table::<Employee>(&svc, "IdxCrashGhost").await;
    separate(elsewhere, &index)
        .insert(&mut employee(9, "Jones"))
        .await
        .unwrap();

    // Rename 000001 to Smith: dies after the entity write, before the old
    // entry is taken out (the hook's second call).
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let crashing = separate(table.clone(), &index).before_write(move |_| {
        if c.fetch_add(1, Ordering::SeqCst) == 1 {
            panic!("crash before the second index write");
        }
    });
    let e = table.get(("Sales", "000001")).await.unwrap().unwrap();
    let job = {
        let crashing = crashing.clone();
        tokio::spawn(async move {
            let mut renamed = Employee {
                last_name: "Smith".into(),
                ..e.clone()
            };
            crashing.update(&e, &mut renamed, IfMatch::Any).await
        })
    };
    assert!(job.await.unwrap_err().is_panic());
    // Delete 000003: dies after the entity delete (the hook's first call).
    calls.store(1, Ordering::SeqCst);
    let smith = table.get(("Sales", "000003")).await.unwrap().unwrap();
    let job = tokio::spawn(async move { crashing.delete(&smith, IfMatch::Any).await });
    assert!(job.await.unwrap_err().is_panic());

    // No entity is unlisted; three entries point at nothing (or at an entity
    // with another value).
    assert_separate_consistent(
        &table,
        &index,
        &[
            ("Jones", "Sales", "000009"),
            ("Jones", "Sales", "000001"),
            ("Smith", "Sales", "000003"),
        ],
    )
    .await;
    let jones = idx.find("Jones").await.unwrap();
    assert_eq!(
        jones
            .entities
            .iter()
            .map(|e| e.employee_id)
            .collect::<Vec<_>>(),
        [2]
    );
    assert_eq!(
        jones.dangling,
        [
            EntityKey::new("Sales", "000001"),
            EntityKey::new("Sales", "000009")
        ]
    );
    let smiths = idx.find("Smith").await.unwrap();
    assert_eq!(
        smiths
            .entities
            .iter()
            .map(|e| e.employee_id)
            .collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(smiths.dangling, [EntityKey::new("Sales", "000003")]);

    // With no writer running, the dangling entries can be removed.
    assert_eq!(idx.remove_dangling("Jones").await.unwrap().len(), 2);
    assert_eq!(idx.remove_dangling("Smith").await.unwrap().len(), 1);
    assert_separate_consistent(&table, &index, &[]).await;
    assert!(idx.find("Jones").await.unwrap().dangling.is_empty());
}

async fn a_separate_index_entity_changed_between_its_read_and_its_write_is_read_again(
    env: TestEnv,
) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxSepInject").await;
    let index = common::fresh_table::<DynamicEntity>(&svc, "IdxSepInjectIx").await;
    let second = common::second_service(&svc);
    let other = separate(
        second.table::<Employee>(table.name()).unwrap(),
        &second.table::<DynamicEntity>(index.name()).unwrap(),
    );
    let next_id = Arc::new(AtomicUsize::new(500));
    let value = Arc::new(std::sync::Mutex::new("Jones"));
    let inj = Injector::default();
    let hook = {
        let (other, next_id, value) = (other.clone(), next_id.clone(), value.clone());
        inj.hook(move || {
            let (other, next_id, value) = (other.clone(), next_id.clone(), value.clone());
            async move {
                let id = next_id.fetch_add(1, Ordering::SeqCst) as u32;
                let last = *value.lock().unwrap();
                other
                    .insert(&mut employee_in("Marketing", id, last))
                    .await
                    .unwrap();
            }
        })
    };
    let idx = separate(table.clone(), &index).before_write(hook);

    let mut e = employee(152, "Jones");
    idx.insert(&mut e).await.unwrap(); // 409: the other writer created the index entity
    assert_eq!(inj.take(), [1, 2]);
    idx.insert(&mut employee(153, "Jones")).await.unwrap(); // 412
    assert_eq!(inj.take(), [1, 2]);
    assert_eq!(
        assert_separate_consistent(&table, &index, &[]).await["Jones"].len(),
        4
    );

    // A rename: the add to Smith's list races (attempts 1, 2), the removal
    // from Jones's list does not (attempt 1).
    *value.lock().unwrap() = "Smith";
    let mut renamed = Employee {
        last_name: "Smith".into(),
        ..e.clone()
    };
    idx.update(&e, &mut renamed, IfMatch::ETag(e.etag.clone().unwrap()))
        .await
        .unwrap();
    assert_eq!(inj.take(), [1, 2, 1]);
    let listed = assert_separate_consistent(&table, &index, &[]).await;
    assert_eq!(listed["Smith"], ["Marketing\t000502", "Sales\t000152"]);

    // A delete: the removal races with another Smith being added.
    idx.delete(&renamed, IfMatch::ETag(renamed.etag.clone().unwrap()))
        .await
        .unwrap();
    assert_eq!(inj.take(), [1, 2]);
    let listed = assert_separate_consistent(&table, &index, &[]).await;
    assert_eq!(listed["Smith"], ["Marketing\t000502", "Marketing\t000503"]);
}

/// Option 3's delete removes the entity, then its entry. Between the two
/// (the hook, after the delete has read the index entity), another client
/// inserts the same employee with the same last name: the entry the re-insert
/// relies on must survive the delete's removal of its own.
async fn a_delete_racing_a_reinsert_of_the_same_entity_leaves_it_listed(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxSepReins").await;
    let index = common::fresh_table::<DynamicEntity>(&svc, "IdxSepReinsIx").await;
    let second = common::second_service(&svc);
    let other = separate(
        second.table::<Employee>(table.name()).unwrap(),
        &second.table::<DynamicEntity>(index.name()).unwrap(),
    );
    let mut e = employee(152, "Jones");
    separate(table.clone(), &index)
        .insert(&mut e)
        .await
        .unwrap();

    let inj = Injector::default();
    let hook = inj.hook(move || {
        let other = other.clone();
        async move {
            other.insert(&mut employee(152, "Jones")).await.unwrap();
        }
    });
    let idx = separate(table.clone(), &index).before_write(hook);
    idx.delete(&e, IfMatch::ETag(e.etag.clone().unwrap()))
        .await
        .unwrap();
    assert_eq!(inj.take()[0], 1, "the re-insert ran before the removal");

    assert!(table.get(("Sales", "000152")).await.unwrap().is_some());
    let found = idx.find("Jones").await.unwrap();
    assert_eq!(
        found
            .entities
            .iter()
            .map(|e| e.employee_id)
            .collect::<Vec<_>>(),
        [152],
        "the re-inserted employee is listed"
    );
    assert_separate_consistent(&table, &index, &[]).await;
}

/// An insert whose entity write fails takes its entry out again. Between the
/// failure and the removal (the hook's second call), another client inserts
/// the employee with that last name: its entry must survive the removal.
async fn a_failed_write_taking_its_entry_back_leaves_a_concurrent_insert_listed(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxSepTakeBack").await;
    let index = common::fresh_table::<DynamicEntity>(&svc, "IdxSepTakeBackIx").await;
    let second = common::second_service(&svc);
    let other = separate(
        second.table::<Employee>(table.name()).unwrap(),
        &second.table::<DynamicEntity>(index.name()).unwrap(),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let hook = {
        let (calls, handle) = (calls.clone(), tokio::runtime::Handle::current());
        move |_| {
            if calls.fetch_add(1, Ordering::SeqCst) == 1 {
                let other = other.clone();
                tokio::task::block_in_place(|| {
                    handle.block_on(async move {
                        other.insert(&mut employee(152, "Jones")).await.unwrap();
                    })
                });
            }
        }
    };
    let idx = separate(table.clone(), &index).before_write(hook);
    // A rename of an employee that does not exist: listed under Jones, then 404.
    let ghost = employee(152, "Smith");
    let mut renamed = employee(152, "Jones");
    let err = idx
        .update(
            &ghost,
            &mut renamed,
            IfMatch::ETag(ETag::new(
                "W/\"datetime'2000-01-01T00%3A00%3A00.0000000Z'\"",
            )),
        )
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    // The claim, the take-back (412: the other client changed the index
    // entity meanwhile), its retry.
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    assert_eq!(idx.find("Jones").await.unwrap().entities.len(), 1);
    assert_separate_consistent(&table, &index, &[]).await;
}

/// `current` says Jones, but another client renamed the employee to Smith
/// since: a write under `IfMatch::Any` must change the lists of the stored
/// value, not of `current`'s.
async fn a_write_under_any_changes_the_lists_of_the_stored_value(env: TestEnv) {
    let svc = env.tables().clone();
    // Option 2.
    let table = common::fresh_table::<Employee>(&svc, "IdxEntAny").await;
    let idx = by_last_name(table.clone());
    let mut e = employee(152, "Jones");
    idx.insert(&mut e).await.unwrap();
    let mut smith = Employee {
        last_name: "Smith".into(),
        ..e.clone()
    };
    idx.update(&e, &mut smith, IfMatch::Any).await.unwrap();
    // Back to Jones, from the stale `e`: not a "same value" update.
    let mut jones = e.clone();
    idx.update(&e, &mut jones, IfMatch::Any).await.unwrap();
    assert_eq!(
        assert_consistent(&table).await,
        [("Jones".to_owned(), vec!["000152".to_owned()])]
    );
    assert_eq!(idx.find("Sales", "Smith").await.unwrap(), []);
    // A delete from the stale `smith`.
    idx.delete(&smith, IfMatch::Any).await.unwrap();
    assert!(common::rows(&table, "Sales").await.is_empty());

    // Option 3.
    let index = common::fresh_table::<DynamicEntity>(&svc, "IdxSepAny").await;
    let sep = separate(table.clone(), &index);
    let mut e = employee(152, "Jones");
    sep.insert(&mut e).await.unwrap();
    let mut smith = Employee {
        last_name: "Smith".into(),
        ..e.clone()
    };
    sep.update(&e, &mut smith, IfMatch::Any).await.unwrap();
    let mut jones = e.clone();
    sep.update(&e, &mut jones, IfMatch::Any).await.unwrap();
    let listed = assert_separate_consistent(&table, &index, &[]).await;
    assert_eq!(listed["Jones"], ["Sales\t000152"]);
    assert!(sep.find("Smith").await.unwrap().entities.is_empty());
    sep.delete(&smith, IfMatch::Any).await.unwrap();
    assert!(assert_separate_consistent(&table, &index, &[])
        .await
        .is_empty());
    // Under `IfMatch::Any`, a missing entity is not found.
    let err = sep.delete(&smith, IfMatch::Any).await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
}

async fn concurrent_writers_of_one_separate_index_entity_lose_nothing(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "IdxSepRace").await;
    let index = common::fresh_table::<DynamicEntity>(&svc, "IdxSepRaceIx").await;
    let second = common::second_service(&svc);
    let mine = separate(table.clone(), &index);
    let theirs = separate(
        second.table::<Employee>(table.name()).unwrap(),
        &second.table::<DynamicEntity>(index.name()).unwrap(),
    );
    let run = |idx: SeparateIndexEntities<Employee>, dept: &'static str| async move {
        for i in 0..8 {
            idx.insert(&mut employee_in(dept, i, "Jones"))
                .await
                .unwrap();
        }
    };
    tokio::join!(run(mine.clone(), "Sales"), run(theirs, "Marketing"));
    let listed = assert_separate_consistent(&table, &index, &[]).await;
    assert_eq!(listed["Jones"].len(), 16);
    assert_eq!(mine.find("Jones").await.unwrap().entities.len(), 16);
}

#[tokio::test]
async fn bad_values_and_keys_are_refused_before_any_request() {
    let table = common::offline_service()
        .table::<Employee>("Offline")
        .unwrap();
    let idx = by_last_name(table.clone());
    common::assert_invalid(&idx.insert(&mut employee(1, "Jo/nes")).await.unwrap_err());
    common::assert_invalid(&idx.ids("Sales", "a#b").await.unwrap_err());
    let clash = IndexEntities::new(table.clone(), "0", |e: &Employee| e.last_name.clone());
    common::assert_invalid(&clash.insert(&mut employee(1, "Jones")).await.unwrap_err());
    common::assert_invalid(
        &by_last_name(table.clone())
            .with_chunk_capacity(0)
            .unwrap_err(),
    );
    common::assert_invalid(
        &by_last_name(table.clone())
            .with_chunk_capacity(MAX_CHUNK_UNITS + 1)
            .unwrap_err(),
    );

    // Option 3: the same refusals, and an index partition of the entities' table
    // whose prefix would take in the entities' RowKeys.
    let sep = separate(table.clone(), &table.with_type::<DynamicEntity>());
    common::assert_invalid(&sep.insert(&mut employee(1, "Jo/nes")).await.unwrap_err());
    common::assert_invalid(&sep.find("a#b").await.unwrap_err());
    common::assert_invalid(
        &sep.insert(&mut employee_in("lastname", 1, "Jones"))
            .await
            .unwrap_err(),
    );
    let e = employee(1, "Jones");
    let mut moved = employee_in("Marketing", 1, "Smith");
    common::assert_invalid(&sep.update(&e, &mut moved, IfMatch::Any).await.unwrap_err());
}

tablekit::testing::conformance!(
    adding_000152_jones_updates_the_jones_index_entity,
    stale_writes_and_duplicates_change_nothing,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    concurrent_writers_of_one_index_entity_lose_nothing,
    a_list_grows_over_several_index_entities_and_shrinks_back,
    a_full_64_kib_index_entity_spills_into_the_next,
    a_last_name_change_moves_an_entry_between_split_lists,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_index_entity_changed_between_its_read_and_the_transaction_is_read_again,
    a_separate_index_lists_the_joneses_of_every_department,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_crash_between_the_two_writes_leaves_only_an_entry_pointing_at_nothing,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_separate_index_entity_changed_between_its_read_and_its_write_is_read_again,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    concurrent_writers_of_one_separate_index_entity_lose_nothing,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_delete_racing_a_reinsert_of_the_same_entity_leaves_it_listed,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_failed_write_taking_its_entry_back_leaves_a_concurrent_insert_listed,
    a_write_under_any_changes_the_lists_of_the_stored_value,
);
