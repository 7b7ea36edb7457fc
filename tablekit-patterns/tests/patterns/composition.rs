//! Patterns composed into one entity group transaction (`tablekit_patterns::plan`):
//! the guide's combinations, the department entity holding its manager's
//! details (§3.5), and the transaction rules checked for the combined plan
//! before any request. Each case runs on Azurite and on the embedded store.

use crate::common;
use crate::common::BeforeWrite as _;
use tablekit::testing::TestEnv;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tablekit::{
    table::TransactionOp, DynamicEntity, ETag, EdmValue, IfMatch, TableClient, TableEntity,
    TableServiceClient, UpdateMode,
};
use tablekit_patterns::denormalize::Denormalized;
use tablekit_patterns::index::{Index, IndexedTable};
use tablekit_patterns::plan::Plan;
use tablekit_patterns::range::KeyRange;
use tablekit_patterns::summary::CountedPartition;
use tablekit_patterns::wide::WideTable;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    last_name: String,
    email: String,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "Department")]
struct Department {
    department: String,
    #[tablekit(default)]
    employee_count: i32,
    manager_id: Option<String>,
    manager_last_name: Option<String>,
    manager_email: Option<String>,
}

fn employee(id: u32, last: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        employee_id: id,
        last_name: last.into(),
        email: format!("{}{id}@contoso.com", last.to_lowercase()),
        etag: None,
    }
}

struct Env {
    table: TableClient<Employee>,
    by_email: Index<Employee>,
    indexed: IndexedTable<Employee>,
    counted: CountedPartition<Employee>,
    manager: Denormalized<Employee>,
}

fn manager_of(table: &TableClient<Employee>) -> Denormalized<Employee> {
    Denormalized::new(table.clone(), "Department", "ManagerId", |e: &Employee| {
        (
            format!("{:06}", e.employee_id),
            vec![
                (
                    "ManagerLastName".to_string(),
                    EdmValue::from(e.last_name.clone()),
                ),
                ("ManagerEmail".to_string(), EdmValue::from(e.email.clone())),
            ],
        )
    })
}

async fn setup(svc: &TableServiceClient) -> Env {
    let table = common::fresh_table::<Employee>(svc, "Compose").await;
    let by_email = Index::new("email", "email_", |e: &Employee| e.email.clone());
    let indexed = IndexedTable::new(table.clone())
        .unwrap()
        .with_index(&by_email)
        .unwrap();
    let counted = CountedPartition::new(table.clone(), "Department", "EmployeeCount");
    let manager = manager_of(&table);
    Env {
        table,
        by_email,
        indexed,
        counted,
        manager,
    }
}

async fn department(table: &TableClient<Employee>) -> Option<Department> {
    table
        .with_type::<Department>()
        .get(("Sales", "Department"))
        .await
        .unwrap()
}

/// The guide's combination: a new employee with its index copy, the
/// department's count and the department's new manager, one transaction.
async fn an_employee_its_index_the_count_and_the_manager_are_one_transaction(env: TestEnv) {
    let svc = env.tables().clone();
    let env = setup(&svc).await;
    let jones = employee(223, "Jones");
    let applied = env
        .indexed
        .plan_insert(&jones)
        .unwrap()
        .and(env.counted.plan_count("Sales", 1).unwrap())
        .unwrap()
        .and(env.manager.plan_assign(&jones).unwrap())
        .unwrap()
        .await
        .unwrap();
    // The employee, its copy, and one insert of the department holding both
    // the count and the manager (a count and a copy of one entity, folded).
    assert_eq!(applied.len(), 3);
    assert!(applied.etag(&jones.key()).is_some());
    assert_eq!(
        department(&env.table).await.unwrap(),
        Department {
            department: "Sales".into(),
            employee_count: 1,
            manager_id: Some("000223".into()),
            manager_last_name: Some("Jones".into()),
            manager_email: Some("jones223@contoso.com".into()),
        }
    );

    // The second: the department exists, so its count and its new manager
    // are one merge under its ETag.
    let smith = employee(224, "Smith");
    env.indexed
        .plan_insert(&smith)
        .unwrap()
        .and(env.counted.plan_count("Sales", 1).unwrap())
        .unwrap()
        .and(env.manager.plan_assign(&smith).unwrap())
        .unwrap()
        .await
        .unwrap();
    let sales = department(&env.table).await.unwrap();
    assert_eq!(sales.employee_count, 2);
    assert_eq!(sales.manager_id.as_deref(), Some("000224"));
    assert_eq!(
        env.indexed
            .lookup(&env.by_email, "Sales", "smith224@contoso.com")
            .await
            .unwrap()
            .map(|e| e.employee_id),
        Some(224)
    );

    // A taken email refuses the whole transaction: no employee, no count,
    // no new manager.
    let mut clash = employee(225, "Smith");
    clash.email = "smith224@contoso.com".into();
    let err = env
        .indexed
        .plan_insert(&clash)
        .unwrap()
        .and(env.counted.plan_count("Sales", 1).unwrap())
        .unwrap()
        .and(env.manager.plan_assign(&clash).unwrap())
        .unwrap()
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    assert_eq!(err.batch_index(), Some(1), "the index copy is refused");
    assert!(env.table.get(clash.key()).await.unwrap().is_none());
    let sales = department(&env.table).await.unwrap();
    assert_eq!(
        (sales.employee_count, sales.manager_id.as_deref()),
        (2, Some("000224"))
    );
}

/// A change of the department between the plan's read and its transaction
/// makes the transaction stale: the plan is worked out again from a fresh
/// read, and nothing is lost.
async fn a_stale_plan_is_planned_again_from_fresh_reads(env: TestEnv) {
    let svc = env.tables().clone();
    let env = setup(&svc).await;
    let mut first = employee(1, "Adams");
    env.counted.insert(&mut first).await.unwrap();
    let other = common::second_service(&svc)
        .table::<Employee>(env.table.name())
        .unwrap();
    let attempts = Arc::new(AtomicUsize::new(0));
    let handle = tokio::runtime::Handle::current();
    let hook = {
        let attempts = attempts.clone();
        Arc::new(move |attempt: usize| {
            attempts.store(attempt, Ordering::SeqCst);
            if attempt == 1 {
                // Another writer adds an employee after this plan's read.
                tokio::task::block_in_place(|| {
                    handle.block_on(async {
                        CountedPartition::new(other.clone(), "Department", "EmployeeCount")
                            .insert(&mut employee(2, "Baker"))
                            .await
                            .unwrap();
                    })
                });
            }
        })
    };
    let mut jones = employee(223, "Jones");
    env.counted
        .plan_insert(&mut jones)
        .unwrap()
        .and(
            env.indexed
                .plan_insert_copies(&employee(223, "Jones"))
                .unwrap(),
        )
        .unwrap()
        .before_send(common::sync_hook(move |a| hook(a)))
        .await
        .unwrap();
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert!(
        jones.etag.is_some(),
        "the entity passed by &mut gets its ETag"
    );
    assert_eq!(env.counted.count("Sales").await.unwrap(), 3);
}

/// The department entity holds its manager's details (§3.5): a write of the
/// manager changes both in one transaction; a write of anyone else leaves
/// the department alone; a failed write of the manager changes neither.
async fn the_department_follows_its_manager_in_the_same_transaction(env: TestEnv) {
    let svc = env.tables().clone();
    let env = setup(&svc).await;
    let mut jones = employee(223, "Jones");
    let mut smith = employee(224, "Smith");
    env.indexed.insert(&mut jones).await.unwrap();
    env.indexed.insert(&mut smith).await.unwrap();
    env.manager.assign(&mut jones).await.unwrap();

    // Two employees share a last name: only the holder's write is copied.
    smith.last_name = "Jones".into();
    let etag = smith.etag.clone().unwrap();
    env.manager.update(&mut smith, etag).await.unwrap();
    assert_eq!(
        department(&env.table)
            .await
            .map(|d| d.manager_email.unwrap()),
        Some("jones223@contoso.com".into())
    );

    jones.email = "jj@contoso.com".into();
    let etag = jones.etag.clone().unwrap();
    env.manager.update(&mut jones, etag.clone()).await.unwrap();
    let sales = department(&env.table).await.unwrap();
    assert_eq!(sales.manager_email.as_deref(), Some("jj@contoso.com"));
    assert_eq!(
        env.table.get(jones.key()).await.unwrap().unwrap().email,
        "jj@contoso.com"
    );

    // A stale ETag: the employee write is refused, and so is the copy.
    let mut stale = jones.clone();
    stale.email = "old@contoso.com".into();
    let err = env.manager.update(&mut stale, etag).await.unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");
    assert_eq!(err.batch_index(), Some(0));
    assert_eq!(
        department(&env.table)
            .await
            .unwrap()
            .manager_email
            .as_deref(),
        Some("jj@contoso.com")
    );
}

/// Another writer changes the department between the manager write's read
/// and its transaction: the write starts again from a fresh read, and the
/// other writer's change (a new count) is kept.
async fn a_manager_write_racing_a_department_change_is_retried(env: TestEnv) {
    let svc = env.tables().clone();
    let env = setup(&svc).await;
    let mut jones = employee(223, "Jones");
    env.counted.insert(&mut jones).await.unwrap();
    env.manager.assign(&mut jones).await.unwrap();
    let other = common::second_service(&svc)
        .table::<Employee>(env.table.name())
        .unwrap();
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handle = tokio::runtime::Handle::current();
    let manager = manager_of(&env.table).before_write({
        let calls = calls.clone();
        move |attempt| {
            calls.lock().unwrap().push(attempt);
            if attempt == 1 {
                // Between attempt 1's read of the department and its
                // transaction, another writer adds an employee (a new count).
                tokio::task::block_in_place(|| {
                    handle.block_on(async {
                        CountedPartition::new(other.clone(), "Department", "EmployeeCount")
                            .insert(&mut employee(224, "Smith"))
                            .await
                            .unwrap();
                    })
                });
            }
        }
    });
    let mut current = env.table.get(jones.key()).await.unwrap().unwrap();
    current.email = "jj@contoso.com".into();
    let etag = current.etag.clone().unwrap();
    manager.update(&mut current, etag).await.unwrap();
    assert_eq!(*calls.lock().unwrap(), [1, 2], "one stale read, one retry");
    let sales = department(&env.table).await.unwrap();
    assert_eq!(sales.employee_count, 2, "the other writer's count is kept");
    assert_eq!(sales.manager_email.as_deref(), Some("jj@contoso.com"));
}

/// A wide entity's parts and its index copy in one transaction.
async fn a_wide_entity_and_its_index_copy_are_one_transaction(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<DynamicEntity>(&svc, "ComposeWide").await;
    let wide = WideTable::new(table.clone());
    let owner = |e: &DynamicEntity| match e.get("Owner") {
        Some(EdmValue::String(s)) => s.clone(),
        _ => String::new(),
    };
    // The copy holds only the owner, not the 365 counts.
    let by_owner = Index::new("owner", "owner_", owner).projected(move |e: &DynamicEntity| {
        DynamicEntity::new(e.partition_key.as_str(), e.row_key.as_str()).with("Owner", owner(e))
    });
    let indexed = IndexedTable::with_primary_prefix(table.clone(), "stats_")
        .unwrap()
        .with_index(&by_owner)
        .unwrap();
    let mut year = DynamicEntity::new("000123", "stats_2014").with("Owner", "jones");
    for day in 1..=365 {
        year.set(format!("Day{day:03}"), day);
    }
    let plan = wide
        .plan_insert(&year)
        .unwrap()
        .and(indexed.plan_insert_copies(&year).unwrap())
        .unwrap();
    assert_eq!(plan.len(), 3, "two parts and one copy");
    plan.send().await.unwrap();
    assert_eq!(
        wide.get(("000123", "stats_2014"))
            .await
            .unwrap()
            .unwrap()
            .properties
            .len(),
        366
    );
    let found = indexed
        .list(&by_owner, "000123", KeyRange::prefix("jo"))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].row_key, "stats_2014");
}

/// The transaction rules hold for the combined plan, before any request.
#[tokio::test]
async fn the_rules_of_one_transaction_are_checked_for_the_combined_plan() {
    let table = common::offline_service()
        .table::<Employee>("Offline")
        .unwrap();
    let by_email = Index::new("email", "email_", |e: &Employee| e.email.clone());
    let indexed = IndexedTable::new(table.clone())
        .unwrap()
        .with_index(&by_email)
        .unwrap();

    // Two partitions.
    let mut hr = employee(1, "Adams");
    hr.department = "HR".into();
    let err = indexed
        .plan_insert(&employee(1, "Adams"))
        .unwrap()
        .and(indexed.plan_insert(&hr).unwrap())
        .unwrap_err();
    assert!(
        common::assert_invalid(&err).contains("a transaction spans one partition"),
        "{err}"
    );

    // Two writes of one entity that no one operation does: refused when the
    // plan is sent, before any request (the offline service has no server).
    let err = indexed
        .plan_insert(&employee(1, "Adams"))
        .unwrap()
        .and(
            table
                .plan_delete(("Sales", "empid_000001"), IfMatch::Any)
                .unwrap(),
        )
        .unwrap()
        .await
        .unwrap_err();
    assert!(
        common::assert_invalid(&err).contains("inserted and deleted in one plan"),
        "{err}"
    );

    // 51 employees with one copy each: 102 operations, refused at the 101st.
    let mut plan = Plan::new();
    for id in 0..51 {
        plan = plan
            .and(indexed.plan_insert(&employee(id, "Adams")).unwrap())
            .unwrap();
    }
    assert_eq!(plan.len(), 102);
    let err = plan.send().await.unwrap_err();
    assert!(
        common::assert_invalid(&err).contains("at most 100 operations"),
        "{err}"
    );
    assert_eq!(err.batch_index(), Some(100));

    // 4 MiB: a plain write too large for the payload next to a plan.
    let mut plan = indexed.plan_insert(&employee(1, "Adams")).unwrap();
    for i in 0..70 {
        let big =
            DynamicEntity::new("Sales", format!("blob_{i:03}")).with("Data", vec![7u8; 63 * 1024]);
        plan.push(
            &table,
            TransactionOp::upsert(&big, UpdateMode::Replace).unwrap(),
        )
        .unwrap();
    }
    let err = plan.send().await.unwrap_err();
    assert!(
        common::assert_invalid(&err).contains("4194304 bytes"),
        "{err}"
    );
}

tablekit::testing::conformance!(
    an_employee_its_index_the_count_and_the_manager_are_one_transaction,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_stale_plan_is_planned_again_from_fresh_reads,
    the_department_follows_its_manager_in_the_same_transaction,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_manager_write_racing_a_department_change_is_retried,
    a_wide_entity_and_its_index_copy_are_one_transaction,
);
