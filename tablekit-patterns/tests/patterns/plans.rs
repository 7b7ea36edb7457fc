//! The plans of the index entities (option 2), data series and log tail
//! patterns (`plan_insert`/`plan_update`/`plan_delete`, `plan_add`/`plan_set`/
//! `plan_record`, `plan_append`): alone, each leaves the store as the
//! pattern's own method does; joined with another pattern's plan of the same
//! partition, it is one transaction, worked out again from fresh reads when
//! another writer got in between; joined with a plan of the same
//! PartitionKey in another table, it is refused before any request. Each
//! case runs on Azurite, the embedded store and the durable embedded store.

use crate::common;
use tablekit::testing::TestEnv;

use std::sync::{Arc, Mutex};

use chrono::{DateTime, TimeZone, Utc};
use tablekit::{DynamicEntity, ETag, EdmValue, IfMatch, TableClient, TableEntity};
use tablekit_patterns::index_entity::{chunk_row_key, IndexEntities, ENTITY_IDS};
use tablekit_patterns::log_tail::{LogTail, NewestFirst};
use tablekit_patterns::plan::Plan;
use tablekit_patterns::series::{DataSeries, HourlyCounters, SeriesLayout};
use tablekit_patterns::summary::CountedPartition;

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

/// Expense claims of an employee, newest first, sharing the employee's
/// partition with the hourly counts of claims and a summary.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{employee}", row_key = "claim_{key}")]
struct Claim {
    employee: String,
    key: NewestFirst,
    amount: f64,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

fn claim(at: DateTime<Utc>, tie: &str, amount: f64) -> Claim {
    Claim {
        employee: "000123".into(),
        key: NewestFirst::new(at, tie),
        amount,
        etag: None,
    }
}

fn at(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2014, 7, 31, h, m, 0).unwrap()
}

/// Two RowKeys of 6 digits fill an index entity of 13 UTF-16 code units,
/// so the lists split and shrink over several index entities.
fn by_last_name(table: TableClient<Employee>) -> IndexEntities<Employee> {
    IndexEntities::new(table, "lastname_", |e: &Employee| e.last_name.clone())
        .with_chunk_capacity(13)
        .unwrap()
}

fn counted(table: TableClient<Employee>) -> CountedPartition<Employee> {
    CountedPartition::new(table, "Department", "EmployeeCount")
}

/// Every row of a partition as stored: RowKey and properties, no ETag or
/// Timestamp.
async fn stored<T: TableEntity>(
    table: &TableClient<T>,
    pk: &str,
) -> Vec<(String, Vec<(String, EdmValue)>)> {
    common::rows(table, pk)
        .await
        .into_iter()
        .map(|r| {
            let props = r
                .properties
                .iter()
                .map(|(n, v)| (n.to_owned(), v.clone()))
                .collect();
            (r.row_key, props)
        })
        .collect()
}

async fn current(table: &TableClient<Employee>, id: u32) -> Employee {
    table
        .get(("Sales", format!("{id:06}")))
        .await
        .unwrap()
        .unwrap()
}

/// Records the attempts a plan's before-send hook saw and, on the first,
/// lets another client write: the step between the plan's reads and its
/// transaction.
fn injecting<F, Fut>(calls: &Arc<Mutex<Vec<usize>>>, inject: F) -> Arc<dyn Fn(usize) + Send + Sync>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let calls = calls.clone();
    let handle = tokio::runtime::Handle::current();
    Arc::new(move |attempt| {
        calls.lock().unwrap().push(attempt);
        if attempt == 1 {
            tokio::task::block_in_place(|| handle.block_on(inject()));
        }
    })
}

/// The same writes through the pattern's methods in one table and through
/// its plans in another leave the two tables the same, row for row, after
/// every write: inserts that fill and split the lists, a change of value
/// under an ETag and under `IfMatch::Any`, an update keeping the value, and
/// deletes under both.
async fn index_entity_plans_write_what_the_methods_write(env: TestEnv) {
    let svc = env.tables().clone();
    let by_method = common::fresh_table::<Employee>(&svc, "PlanIdxM").await;
    let by_plan = common::fresh_table::<Employee>(&svc, "PlanIdxP").await;
    let (m, p) = (
        by_last_name(by_method.clone()),
        by_last_name(by_plan.clone()),
    );
    let same = || async {
        assert_eq!(
            stored(&by_method, "Sales").await,
            stored(&by_plan, "Sales").await
        )
    };

    for (id, last) in [(1, "Jones"), (2, "Jones"), (3, "Jones"), (4, "Smith")] {
        m.insert(&mut employee(id, last)).await.unwrap();
        let mut e = employee(id, last);
        let applied = p.plan_insert(&mut e).unwrap().await.unwrap();
        assert_eq!(applied.len(), 2, "the employee and one index entity");
        assert_eq!(
            e.etag,
            current(&by_plan, id).await.etag,
            "&mut gets the ETag"
        );
        same().await;
    }
    assert_eq!(
        p.ids("Sales", "Jones").await.unwrap(),
        ["000001", "000002", "000003"]
    );
    assert!(by_plan
        .with_type::<DynamicEntity>()
        .get(("Sales", chunk_row_key("lastname_", "Jones", 1)))
        .await
        .unwrap()
        .is_some());

    // A change of value under the ETag read: one transaction of three.
    for (table, idx, planned) in [(&by_method, &m, false), (&by_plan, &p, true)] {
        let was = current(table, 1).await;
        let mut renamed = Employee {
            last_name: "Smith".into(),
            ..was.clone()
        };
        let etag = was.etag.clone().unwrap();
        if planned {
            let applied = idx
                .plan_update(&was, &mut renamed, etag)
                .unwrap()
                .await
                .unwrap();
            assert_eq!(applied.len(), 3);
            assert_eq!(renamed.etag, current(table, 1).await.etag);
        } else {
            idx.update(&was, &mut renamed, etag).await.unwrap();
        }
    }
    same().await;

    // Under IfMatch::Any the stored value says which list the entry leaves:
    // `current` is out of date on purpose.
    for (table, idx, planned) in [(&by_method, &m, false), (&by_plan, &p, true)] {
        let stale = employee(2, "Nobody");
        let mut renamed = employee(2, "Brown");
        if planned {
            idx.plan_update(&stale, &mut renamed, IfMatch::Any)
                .unwrap()
                .await
                .unwrap();
            assert_eq!(renamed.etag, current(table, 2).await.etag);
        } else {
            idx.update(&stale, &mut renamed, IfMatch::Any)
                .await
                .unwrap();
        }
    }
    same().await;
    assert_eq!(p.ids("Sales", "Brown").await.unwrap(), ["000002"]);

    // An update that keeps the value changes the entity alone.
    for (table, idx, planned) in [(&by_method, &m, false), (&by_plan, &p, true)] {
        let was = current(table, 3).await;
        let mut same_name = was.clone();
        let etag = was.etag.clone().unwrap();
        if planned {
            let applied = idx
                .plan_update(&was, &mut same_name, etag)
                .unwrap()
                .await
                .unwrap();
            assert_eq!(applied.len(), 1);
        } else {
            idx.update(&was, &mut same_name, etag).await.unwrap();
        }
    }
    same().await;

    // Deletes: under the ETag (the last entry of an index entity deletes it)
    // and under IfMatch::Any.
    for (table, idx, planned) in [(&by_method, &m, false), (&by_plan, &p, true)] {
        let jones = current(table, 3).await;
        let smith = current(table, 4).await;
        let etag = jones.etag.clone().unwrap();
        if planned {
            idx.plan_delete(&jones, etag).unwrap().await.unwrap();
            idx.plan_delete(&employee(4, "Stale"), IfMatch::Any)
                .unwrap()
                .await
                .unwrap();
        } else {
            idx.delete(&jones, etag).await.unwrap();
            idx.delete(&smith, IfMatch::Any).await.unwrap();
        }
    }
    same().await;
    assert_eq!(p.ids("Sales", "Smith").await.unwrap(), ["000001"]);
    assert!(p.ids("Sales", "Jones").await.unwrap().is_empty());

    // What the methods refuse, the plans refuse: a taken key, a stale ETag,
    // an entity that is gone under IfMatch::Any.
    let err = p
        .plan_insert(&employee(1, "Jones"))
        .unwrap()
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    let was = current(&by_plan, 1).await;
    let stale = ETag::new("W/\"datetime'2000-01-01T00%3A00%3A00Z'\"");
    let err = p
        .plan_update(&was, &employee(1, "Jones"), stale.clone())
        .unwrap()
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");
    assert_eq!(
        err.batch_index(),
        Some(0),
        "the employee, not an index entity"
    );
    let err = p
        .plan_delete(&employee(4, "Smith"), IfMatch::Any)
        .unwrap()
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    same().await;
}

/// An index-entity write and the partition's count in one transaction, from
/// one read each: insert, rename and delete, with the count following.
async fn index_entity_plans_join_a_count_of_the_partition(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "PlanIdxCount").await;
    let idx = by_last_name(table.clone());
    let count = counted(table.clone());

    let mut jones = employee(152, "Jones");
    let applied = idx
        .plan_insert(&mut jones)
        .unwrap()
        .and(count.plan_count("Sales", 1).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        applied.len(),
        3,
        "the employee, its index entity, the department"
    );
    assert!(jones.etag.is_some());
    let mut smith = employee(7, "Smith");
    idx.plan_insert(&mut smith)
        .unwrap()
        .and(count.plan_count("Sales", 1).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(count.count("Sales").await.unwrap(), 2);
    assert_eq!(idx.ids("Sales", "Jones").await.unwrap(), ["000152"]);

    // A rename joined with another pattern's write of the partition: the
    // count is kept, the entry moves.
    let mut renamed = Employee {
        last_name: "Smith".into(),
        ..jones.clone()
    };
    let applied = idx
        .plan_update(&jones, &mut renamed, jones.etag.clone().unwrap())
        .unwrap()
        .and(count.plan_count("Sales", 0).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(applied.len(), 4);
    assert_eq!(
        idx.ids("Sales", "Smith").await.unwrap(),
        ["000007", "000152"]
    );
    assert!(idx.ids("Sales", "Jones").await.unwrap().is_empty());

    // A delete and the count minus one.
    idx.plan_delete(&renamed, renamed.etag.clone().unwrap())
        .unwrap()
        .and(count.plan_count("Sales", -1).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(count.count("Sales").await.unwrap(), 1);
    assert_eq!(idx.ids("Sales", "Smith").await.unwrap(), ["000007"]);

    // A refused write refuses the count with it.
    let err = idx
        .plan_insert(&employee(7, "Brown"))
        .unwrap()
        .and(count.plan_count("Sales", 1).unwrap())
        .unwrap()
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    assert_eq!(count.count("Sales").await.unwrap(), 1);
    assert!(idx.ids("Sales", "Brown").await.unwrap().is_empty());

    // Two employees of one new value and the count plus two in one plan:
    // the index entity both join is one insert listing both.
    let applied = idx
        .plan_insert(&employee(1, "Adams"))
        .unwrap()
        .and(idx.plan_insert(&employee(2, "Adams")).unwrap())
        .unwrap()
        .and(count.plan_count("Sales", 2).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(applied.len(), 4);
    assert_eq!(
        idx.ids("Sales", "Adams").await.unwrap(),
        ["000001", "000002"]
    );
    assert_eq!(count.count("Sales").await.unwrap(), 3);
}

/// Index entities of 27 UTF-16 code units: four RowKeys of 6 digits.
fn roomy(table: TableClient<Employee>) -> IndexEntities<Employee> {
    IndexEntities::new(table, "lastname_", |e: &Employee| e.last_name.clone())
        .with_chunk_capacity(27)
        .unwrap()
}

/// The rows of the index entities of `value`: RowKey and list.
async fn index_rows(table: &TableClient<Employee>, value: &str) -> Vec<(String, String)> {
    let prefix = chunk_row_key("lastname_", value, 0);
    let prefix = &prefix[..prefix.len() - 3];
    stored(table, "Sales")
        .await
        .into_iter()
        .filter(|(rk, _)| rk.starts_with(prefix))
        .map(|(rk, props)| {
            let list = match &props[..] {
                [(name, EdmValue::String(list))] if name == ENTITY_IDS => list.clone(),
                other => panic!("{rk}: {other:?}"),
            };
            (rk, list)
        })
        .collect()
}

/// Two entities with one value in one plan: each entry is added to the
/// index entity as the other change leaves it, so both are listed, whether
/// the index entity is new (one insert), stored (one update), or joined by
/// a rename and an insert. An entry the read's index entity has no room
/// for once the earlier change is made is refused before the transaction,
/// nothing written.
async fn two_index_entity_plans_of_one_value_list_both(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "PlanIdxTwo").await;
    let idx = roomy(table.clone());
    let count = counted(table.clone());

    // No index entity of Adams yet.
    let (mut a, mut b) = (employee(1, "Adams"), employee(2, "Adams"));
    let applied = idx
        .plan_insert(&mut a)
        .unwrap()
        .and(idx.plan_insert(&mut b).unwrap())
        .unwrap()
        .and(count.plan_count("Sales", 2).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        applied.len(),
        4,
        "two employees, one index entity, the department"
    );
    assert!(a.etag.is_some() && b.etag.is_some());
    assert_eq!(
        index_rows(&table, "Adams").await,
        [("lastname_Adams_000".to_owned(), "000001\n000002".to_owned())]
    );

    // The stored index entity: one update listing both.
    let applied = idx
        .plan_insert(&employee(3, "Adams"))
        .unwrap()
        .and(idx.plan_insert(&employee(4, "Adams")).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(applied.len(), 3);
    assert_eq!(
        idx.ids("Sales", "Adams").await.unwrap(),
        ["000001", "000002", "000003", "000004"]
    );

    // A rename into Brown and an insert of a Brown under the ETag; an
    // insert of an Evans and a rename into Evans under IfMatch::Any.
    idx.insert(&mut employee(5, "Brown")).await.unwrap();
    let was = current(&table, 1).await;
    let renamed = Employee {
        last_name: "Brown".into(),
        ..was.clone()
    };
    idx.plan_update(&was, &renamed, was.etag.clone().unwrap())
        .unwrap()
        .and(idx.plan_insert(&employee(6, "Brown")).unwrap())
        .unwrap()
        .await
        .unwrap();
    idx.plan_insert(&employee(7, "Evans"))
        .unwrap()
        .and(
            idx.plan_update(&employee(2, "Stale"), &employee(2, "Evans"), IfMatch::Any)
                .unwrap(),
        )
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        idx.ids("Sales", "Brown").await.unwrap(),
        ["000005", "000001", "000006"]
    );
    assert_eq!(
        idx.ids("Sales", "Evans").await.unwrap(),
        ["000007", "000002"]
    );
    assert_eq!(
        idx.ids("Sales", "Adams").await.unwrap(),
        ["000003", "000004"]
    );
    assert_eq!(count.count("Sales").await.unwrap(), 2);

    // Index entities of 13 units: Clark's has room for one more RowKey,
    // which the first change takes. The second is refused, not lost.
    let tight = by_last_name(table.clone());
    tight.insert(&mut employee(8, "Clark")).await.unwrap();
    let err = tight
        .plan_insert(&employee(9, "Clark"))
        .unwrap()
        .and(tight.plan_insert(&employee(10, "Clark")).unwrap())
        .unwrap()
        .await
        .unwrap_err();
    let message = common::assert_invalid(&err);
    assert!(
        message.contains("lastname_Clark_000") && message.contains("no room"),
        "{message}"
    );
    assert_eq!(tight.ids("Sales", "Clark").await.unwrap(), ["000008"]);
    for id in [9, 10] {
        assert!(table
            .get(("Sales", format!("{id:06}")))
            .await
            .unwrap()
            .is_none());
    }
}

/// An entry added to and another removed from one index entity in one plan,
/// in either order: one write of the index entity, both changes in it. A
/// delete of its last entry and an insert refill it (one update). An update
/// that moves an entry into a value and a delete of the same entity, in one
/// plan (what a unit of work may collect), take it out again.
async fn an_add_and_a_remove_of_one_index_entity_in_one_plan(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "PlanIdxMix").await;
    let idx = roomy(table.clone());
    for id in [1, 2] {
        idx.insert(&mut employee(id, "Jones")).await.unwrap();
    }

    // An insert, then a delete.
    let one = current(&table, 1).await;
    let applied = idx
        .plan_insert(&employee(3, "Jones"))
        .unwrap()
        .and(idx.plan_delete(&one, one.etag.clone().unwrap()).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(applied.len(), 3, "two employees, one index entity");
    assert_eq!(
        index_rows(&table, "Jones").await,
        [("lastname_Jones_000".to_owned(), "000002\n000003".to_owned())]
    );

    // A delete, then an insert.
    let two = current(&table, 2).await;
    idx.plan_delete(&two, two.etag.clone().unwrap())
        .unwrap()
        .and(idx.plan_insert(&employee(4, "Jones")).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        idx.ids("Sales", "Jones").await.unwrap(),
        ["000003", "000004"]
    );

    // The last entry out and another in: the index entity stays, rewritten.
    idx.insert(&mut employee(5, "Smith")).await.unwrap();
    let five = current(&table, 5).await;
    let applied = idx
        .plan_delete(&five, IfMatch::Any)
        .unwrap()
        .and(idx.plan_insert(&employee(6, "Smith")).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(applied.len(), 3);
    assert_eq!(
        index_rows(&table, "Smith").await,
        [("lastname_Smith_000".to_owned(), "000006".to_owned())]
    );

    // Jones 3 renamed to Smith, then deleted, in one plan: listed nowhere.
    let three = current(&table, 3).await;
    let renamed = Employee {
        last_name: "Smith".into(),
        ..three.clone()
    };
    let etag = three.etag.clone().unwrap();
    idx.plan_update(&three, &renamed, etag.clone())
        .unwrap()
        .and(idx.plan_delete(&renamed, etag).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert!(table.get(("Sales", "000003")).await.unwrap().is_none());
    assert_eq!(idx.ids("Sales", "Jones").await.unwrap(), ["000004"]);
    assert_eq!(idx.ids("Sales", "Smith").await.unwrap(), ["000006"]);

    // Two removals of one entry from one list: two renames of Jones 4
    // under IfMatch::Any, each out of the value read. Refused, nothing written.
    let err = idx
        .plan_update(&employee(4, "Stale"), &employee(4, "Adams"), IfMatch::Any)
        .unwrap()
        .and(
            idx.plan_update(&employee(4, "Stale"), &employee(4, "Brown"), IfMatch::Any)
                .unwrap(),
        )
        .unwrap()
        .await
        .unwrap_err();
    let message = common::assert_invalid(&err);
    assert!(message.contains("no longer lists"), "{message}");
    assert_eq!(current(&table, 4).await.last_name, "Jones");
    assert_eq!(idx.ids("Sales", "Jones").await.unwrap(), ["000004"]);

    // Entities written around the pattern, which no index entity lists: the
    // removal looks where an addition would have put the entry, finds
    // nothing, and leaves the lists as they were (Jones' index entity is
    // rewritten unchanged; Nobody has none, so nothing is written for it).
    for (id, last, writes) in [(11, "Jones", 2), (12, "Nobody", 1)] {
        table.insert(&employee(id, last)).await.unwrap();
        let stray = current(&table, id).await;
        let applied = idx
            .plan_delete(&stray, stray.etag.clone().unwrap())
            .unwrap()
            .await
            .unwrap();
        assert_eq!(applied.len(), writes, "{last}");
        assert!(table.get(stray.key()).await.unwrap().is_none());
    }
    assert_eq!(idx.ids("Sales", "Jones").await.unwrap(), ["000004"]);
    assert!(index_rows(&table, "Nobody").await.is_empty());
}

/// Another writer creates the index entity a plan is about to insert,
/// between the plan's reads and its transaction: the insert is refused
/// (409) on an index entity the plan read as absent, so the plan is worked
/// out again from fresh reads and joins it. Then another writer changes an
/// index entity a rename reads (412): again from fresh reads.
async fn an_index_entity_plan_raced_by_another_writer_is_worked_out_again(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "PlanIdxRace").await;
    let idx = by_last_name(table.clone());
    let count = counted(table.clone());
    let other = by_last_name(
        common::second_service(&svc)
            .table::<Employee>(table.name())
            .unwrap(),
    );
    let calls = Arc::new(Mutex::new(Vec::new()));

    let hook = {
        let other = other.clone();
        injecting(&calls, move || {
            let other = other.clone();
            async move { other.insert(&mut employee(500, "Jones")).await.unwrap() }
        })
    };
    let mut jones = employee(152, "Jones");
    idx.plan_insert(&mut jones)
        .unwrap()
        .and(count.plan_count("Sales", 1).unwrap())
        .unwrap()
        .before_send(common::sync_hook(move |a| hook(a)))
        .await
        .unwrap();
    assert_eq!(std::mem::take(&mut *calls.lock().unwrap()), [1, 2]);
    assert!(jones.etag.is_some());
    assert_eq!(
        idx.ids("Sales", "Jones").await.unwrap(),
        ["000500", "000152"]
    );
    assert_eq!(count.count("Sales").await.unwrap(), 1);

    // A rename to Smith while the other writer adds a Smith.
    other.insert(&mut employee(7, "Smith")).await.unwrap();
    let hook = {
        let other = other.clone();
        injecting(&calls, move || {
            let other = other.clone();
            async move { other.insert(&mut employee(8, "Smith")).await.unwrap() }
        })
    };
    let mut renamed = Employee {
        last_name: "Smith".into(),
        ..jones.clone()
    };
    idx.plan_update(&jones, &mut renamed, jones.etag.clone().unwrap())
        .unwrap()
        .before_send(common::sync_hook(move |a| hook(a)))
        .await
        .unwrap();
    assert_eq!(std::mem::take(&mut *calls.lock().unwrap()), [1, 2]);
    assert_eq!(idx.ids("Sales", "Jones").await.unwrap(), ["000500"]);
    let mut smiths = idx.ids("Sales", "Smith").await.unwrap();
    smiths.sort();
    assert_eq!(smiths, ["000007", "000008", "000152"]);
}

/// Additions and sets planned leave the series as `add` and `set` do (the
/// values read back are the same), and an entity a plan creates holds every
/// slot of it.
async fn series_plans_write_what_the_methods_write(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "PlanSeries").await;
    let series = DataSeries::new(&table, SeriesLayout::daily());
    let steps: [(bool, usize, i64); 8] = [
        // (set?, slot, value or delta)
        (false, 0, 7),
        (false, 0, 2),
        (false, 182, -4),
        (true, 9, 40),
        (false, 9, 2),
        (false, 183, -3),
        (false, 365, 5),
        (true, 183, 1),
    ];
    for (set, slot, n) in steps {
        if set {
            series.set("method", "", slot, n).await.unwrap();
            series.plan_set("plan", "", slot, n).unwrap().await.unwrap();
        } else {
            series.add("method", "", slot, n).await.unwrap();
            let applied = series.plan_add("plan", "", slot, n).unwrap().await.unwrap();
            assert_eq!(applied.len(), 1);
        }
        assert_eq!(
            series.read("plan", "").await.unwrap().values,
            series.read("method", "").await.unwrap().values,
            "after {}({slot}, {n})",
            if set { "set" } else { "add" }
        );
    }
    let values = series.read("plan", "").await.unwrap().values;
    assert_eq!(
        (values[0], values[9], values[182], values[183], values[365]),
        (9, 42, -4, 1, 5)
    );
    // The first entity was created by an addition: every one of its 183
    // slots is stored; the method stores the slots written.
    let rows = common::rows(&table, "plan").await;
    assert_eq!(rows[0].properties.len(), 183);
    assert_eq!(common::rows(&table, "method").await[0].properties.len(), 3);

    // An entity that `add` wrote holds only its slots: an addition to
    // another slot, planned, counts it as 0.
    series.add("sparse", "", 3, 1).await.unwrap();
    series.plan_add("sparse", "", 4, 6).unwrap().await.unwrap();
    series.plan_add("sparse", "", 3, 1).unwrap().await.unwrap();
    let values = series.read("sparse", "").await.unwrap().values;
    assert_eq!((values[3], values[4]), (2, 6));
}

/// Additions to one slot from two plans add both, whether the entity exists
/// or not; a set then an addition adds to the set value; additions to two
/// slots of a new entity are one insert. Another writer adding in between
/// makes the plan be worked out again, and nothing is lost.
async fn series_additions_in_one_plan_add_up(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "PlanSeriesAdd").await;
    let series = DataSeries::new(&table, SeriesLayout::hourly());
    let plan = |slot, n| series.plan_add("000123", "", slot, n).unwrap();

    // A new entity: both additions to H05, and one to H06.
    let applied = plan(5, 2)
        .and(plan(5, 3))
        .unwrap()
        .and(plan(6, 1))
        .unwrap()
        .await
        .unwrap();
    assert_eq!(applied.len(), 1, "one insert");
    let values = series.read("000123", "").await.unwrap().values;
    assert_eq!((values[5], values[6]), (5, 1));

    // The entity exists: both additions land on the value read.
    plan(5, 10).and(plan(5, -1)).unwrap().await.unwrap();
    assert_eq!(series.read("000123", "").await.unwrap().values[5], 14);

    // A set, then an addition, of one slot.
    series
        .plan_set("000123", "", 7, 100)
        .unwrap()
        .and(plan(7, 5))
        .unwrap()
        .await
        .unwrap();
    assert_eq!(series.read("000123", "").await.unwrap().values[7], 105);

    // Another writer adds to H05 between the plan's read and its transaction.
    let other = DataSeries::new(
        &common::second_service(&svc)
            .table::<DynamicEntity>(table.name())
            .unwrap(),
        SeriesLayout::hourly(),
    );
    let calls = Arc::new(Mutex::new(Vec::new()));
    let hook = injecting(&calls, move || {
        let other = other.clone();
        async move {
            other.add("000123", "", 5, 1000).await.unwrap();
        }
    });
    plan(5, 1)
        .and(plan(5, 1))
        .unwrap()
        .before_send(common::sync_hook(move |a| hook(a)))
        .await
        .unwrap();
    assert_eq!(*calls.lock().unwrap(), [1, 2]);
    assert_eq!(series.read("000123", "").await.unwrap().values[5], 1016);
}

/// Additions to a slot that a stored entity lacks (`add` and `set` store the
/// slots written) add up in one plan, stored as Int64 as `add` stores them;
/// so do an addition after a set of such a slot, additions to it and to a
/// slot the entity holds, negative additions to an entity not yet stored,
/// and additions to a slot holding another type (counted as 0, as `add`
/// counts it). Another writer adding to the slot between the plan's read
/// and its transaction makes the plan be worked out again.
async fn series_additions_to_a_slot_the_entity_lacks_add_up(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "PlanSeriesLack").await;
    let series = DataSeries::new(&table, SeriesLayout::hourly());
    let plan = |slot, n| series.plan_add("000123", "", slot, n).unwrap();
    let slot = |name: &'static str| {
        let table = table.clone();
        async move {
            table
                .get(("000123", "01"))
                .await
                .unwrap()
                .unwrap()
                .get(name)
                .cloned()
        }
    };
    series.add("000123", "", 3, 1).await.unwrap();

    let applied = plan(4, 2).and(plan(4, 3)).unwrap().await.unwrap();
    assert_eq!(applied.len(), 1);
    assert_eq!(slot("H04").await, Some(EdmValue::Int64(5)));

    series
        .plan_set("000123", "", 7, 100)
        .unwrap()
        .and(plan(7, 5))
        .unwrap()
        .await
        .unwrap();
    plan(8, 1)
        .and(plan(3, 1))
        .unwrap()
        .and(plan(8, 1))
        .unwrap()
        .await
        .unwrap();
    table
        .upsert(
            &DynamicEntity::new("000123", "01").with("H09", "none"),
            tablekit::UpdateMode::Merge,
        )
        .await
        .unwrap();
    plan(9, 2).and(plan(9, 3)).unwrap().await.unwrap();
    let values = series.read("000123", "").await.unwrap().values;
    assert_eq!(
        (values[3], values[4], values[7], values[8], values[9]),
        (2, 5, 105, 2, 5)
    );

    // No entity of partition 000124 yet: negative additions, and one each way.
    let other = |slot, n| series.plan_add("000124", "", slot, n).unwrap();
    let applied = other(5, -1)
        .and(other(5, -2))
        .unwrap()
        .and(other(6, 2))
        .unwrap()
        .and(other(6, -5))
        .unwrap()
        .await
        .unwrap();
    assert_eq!(applied.len(), 1, "one insert");
    let values = series.read("000124", "").await.unwrap().values;
    assert_eq!((values[5], values[6]), (-3, -3));

    // Another writer adds to H10, which the entity lacks, in between.
    let theirs = DataSeries::new(
        &common::second_service(&svc)
            .table::<DynamicEntity>(table.name())
            .unwrap(),
        SeriesLayout::hourly(),
    );
    let calls = Arc::new(Mutex::new(Vec::new()));
    let hook = injecting(&calls, move || {
        let theirs = theirs.clone();
        async move {
            theirs.add("000123", "", 10, 1000).await.unwrap();
        }
    });
    plan(10, 1)
        .and(plan(10, 1))
        .unwrap()
        .before_send(common::sync_hook(move |a| hook(a)))
        .await
        .unwrap();
    assert_eq!(*calls.lock().unwrap(), [1, 2]);
    assert_eq!(series.read("000123", "").await.unwrap().values[10], 1002);
}

/// The plan of a claim, the count of its hour and the count of all claims
/// of its partition.
fn entry_and_counts<'a>(
    log: &LogTail<Claim>,
    hours: &HourlyCounters,
    claims: &CountedPartition<Claim>,
    c: &'a mut Claim,
) -> Plan<'a> {
    let (pk, t) = (c.employee.clone(), c.key.at());
    log.plan_append(c)
        .unwrap()
        .and(hours.plan_record(&pk, t, 1).unwrap())
        .unwrap()
        .and(claims.plan_count(&pk, 1).unwrap())
        .unwrap()
}

/// An expense claim, its hour's count and the partition's claim count in
/// one transaction: the log tail's entry and two other patterns' additions.
async fn a_log_entry_its_hour_and_its_count_are_one_transaction(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Claim>(&svc, "PlanTail").await;
    let log = LogTail::new(table.clone());
    let hours = HourlyCounters::new(&table);
    let claims = CountedPartition::new(table.clone(), "Summary", "Claims");

    let mut first = claim(at(9, 5), "a", 12.5);
    let applied = entry_and_counts(&log, &hours, &claims, &mut first)
        .await
        .unwrap();
    assert_eq!(applied.len(), 3);
    assert!(first.etag.is_some(), "&mut gets the ETag");
    let mut second = claim(at(9, 40), "b", 3.0);
    entry_and_counts(&log, &hours, &claims, &mut second)
        .await
        .unwrap();
    let mut third = claim(at(10, 1), "c", 8.0);
    entry_and_counts(&log, &hours, &claims, &mut third)
        .await
        .unwrap();

    let latest = log.latest("000123", 10).await.unwrap();
    assert_eq!(
        latest.iter().map(|c| c.amount).collect::<Vec<_>>(),
        [8.0, 3.0, 12.5]
    );
    let day = hours
        .series()
        .read("000123", "20140731")
        .await
        .unwrap()
        .values;
    assert_eq!((day[9], day[10]), (2, 1));
    assert_eq!(claims.count("000123").await.unwrap(), 3);

    // A taken key refuses the entry, its hour and its count together.
    let mut taken = claim(at(9, 5), "a", 1.0);
    let err = entry_and_counts(&log, &hours, &claims, &mut taken)
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    assert_eq!(err.batch_index(), Some(0), "the entry");
    assert_eq!(claims.count("000123").await.unwrap(), 3);
    assert_eq!(
        hours
            .series()
            .read("000123", "20140731")
            .await
            .unwrap()
            .values[9],
        2
    );

    // Alone, the planned entry is what `append` stores.
    let mut by_method = claim(at(11, 0), "m", 1.0);
    log.append(&mut by_method).await.unwrap();
    let mut by_plan = Claim {
        employee: "000124".into(),
        ..claim(at(11, 0), "m", 1.0)
    };
    log.plan_append(&mut by_plan).unwrap().await.unwrap();
    let row = |pk: &'static str| {
        let table = table.clone();
        async move {
            stored(&table, pk)
                .await
                .into_iter()
                .filter(|(rk, _)| rk.starts_with("claim_") && rk.ends_with("_m"))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(row("000123").await, row("000124").await);
    assert_eq!(
        by_plan.etag,
        table.get(by_plan.key()).await.unwrap().unwrap().etag
    );
}

/// Each plan joined with a plan of the same PartitionKey in another table
/// (of the same account) is refused when joined, before any request: the
/// offline service has no server to send one to.
#[tokio::test]
async fn a_plan_of_the_same_partition_key_in_another_table_is_refused() {
    let svc = common::offline_service();
    let employees = svc.table::<Employee>("Employees").unwrap();
    let contractors = svc.table::<Employee>("Contractors").unwrap();
    let idx = by_last_name(employees.clone());
    let elsewhere = || counted(contractors.clone()).plan_count("Sales", 1).unwrap();
    fn refused(plan: Plan<'_>, other: Plan<'_>) {
        let err = plan.and(other).unwrap_err();
        let message = common::assert_invalid(&err);
        assert!(
            message.contains("Employees") && message.contains("Contractors"),
            "{message}"
        );
    }

    let jones = Employee {
        etag: Some(ETag::new("W/\"1\"")),
        ..employee(152, "Jones")
    };
    let smith = Employee {
        last_name: "Smith".into(),
        ..jones.clone()
    };
    let etag = jones.etag.clone().unwrap();
    refused(idx.plan_insert(&jones).unwrap(), elsewhere());
    refused(
        idx.plan_update(&jones, &smith, etag.clone()).unwrap(),
        elsewhere(),
    );
    refused(
        idx.plan_update(&jones, &smith, IfMatch::Any).unwrap(),
        elsewhere(),
    );
    refused(idx.plan_delete(&jones, etag).unwrap(), elsewhere());
    refused(idx.plan_delete(&jones, IfMatch::Any).unwrap(), elsewhere());
    // The other way round: the plan of the other table first.
    refused(elsewhere(), idx.plan_insert(&jones).unwrap());

    let series = DataSeries::new(&employees, SeriesLayout::hourly());
    let hours = HourlyCounters::new(&employees);
    refused(series.plan_add("Sales", "", 5, 1).unwrap(), elsewhere());
    refused(series.plan_set("Sales", "", 5, 1).unwrap(), elsewhere());
    refused(
        hours.plan_record("Sales", at(9, 0), 1).unwrap(),
        elsewhere(),
    );
    // Two additions to one slot, one per table, are two partitions.
    let theirs = DataSeries::new(&contractors, SeriesLayout::hourly());
    refused(
        series.plan_add("Sales", "", 5, 1).unwrap(),
        theirs.plan_add("Sales", "", 5, 1).unwrap(),
    );

    let claims = svc.table::<Claim>("Employees").unwrap();
    let log = LogTail::new(claims);
    let entry = Claim {
        employee: "Sales".into(),
        ..claim(at(9, 0), "a", 1.0)
    };
    refused(log.plan_append(&entry).unwrap(), elsewhere());

    // The same table under another type joins: one partition of one table.
    let plan = log
        .plan_append(&entry)
        .unwrap()
        .and(idx.plan_insert(&jones).unwrap())
        .unwrap();
    assert_eq!(
        plan.len(),
        3,
        "the entry, the employee, the read of its index entities"
    );
    assert_eq!(plan.table().map(|t| t.table()), Some("Employees"));
}

tablekit::testing::conformance!(
    index_entity_plans_write_what_the_methods_write,
    index_entity_plans_join_a_count_of_the_partition,
    two_index_entity_plans_of_one_value_list_both,
    an_add_and_a_remove_of_one_index_entity_in_one_plan,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_index_entity_plan_raced_by_another_writer_is_worked_out_again,
    series_plans_write_what_the_methods_write,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    series_additions_in_one_plan_add_up,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    series_additions_to_a_slot_the_entity_lacks_add_up,
    a_log_entry_its_hour_and_its_count_are_one_transaction,
);
