//! Denormalised counts in a heterogeneous partition (§3.5, §4.8) against a
//! live service, with the seed's Marketing department (EmployeeCount 153):
//! the count in step with every insert and delete, another writer's change
//! injected between the read of the summary and the transaction, and the
//! department with its employees read in one query into a typed enum.

use crate::common;
use crate::common::BeforeWrite as _;
use tablekit::testing::TestEnv;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tablekit::{DynamicEntity, ETag, EdmValue, IfMatch, TableClient, TableEntity};
use tablekit_patterns::summary::CountedPartition;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:05}")]
struct Employee {
    department: String,
    employee_id: u32,
    first_name: String,
    last_name: String,
    age: i32,
    email: String,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

fn employee(dept: &str, id: u32, first: &str, last: &str, age: i32) -> Employee {
    Employee {
        department: dept.into(),
        employee_id: id,
        first_name: first.into(),
        last_name: last.into(),
        age,
        email: format!(
            "{}{}@contoso.com",
            first.to_lowercase(),
            &last[..1].to_lowercase()
        ),
        etag: None,
    }
}

fn staff(table: TableClient<Employee>) -> CountedPartition<Employee> {
    CountedPartition::new(table, "Department", "EmployeeCount")
}

/// Reads the partition directly: the count equals the number of employees
/// written through the pattern plus `base`.
async fn assert_count(table: &TableClient<Employee>, pk: &str, base: i32) -> i32 {
    let rows = common::rows(table, pk).await;
    let employees = rows.iter().filter(|r| r.row_key != "Department").count() as i32;
    let summary = rows
        .iter()
        .find(|r| r.row_key == "Department")
        .expect("a summary");
    assert_eq!(
        summary.get("EmployeeCount"),
        Some(&EdmValue::Int32(base + employees))
    );
    base + employees
}

async fn the_marketing_department_counts_its_employees(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "Dept").await;
    // §1.1: Marketing/Department with EmployeeCount=153, plus manager details (§3.5).
    table
        .with_type::<DynamicEntity>()
        .insert(
            &DynamicEntity::new("Marketing", "Department")
                .with("DepartmentName", "Marketing")
                .with("EmployeeCount", 153)
                .with("ManagerFirstName", "Don")
                .with("ManagerEmail", "donh@contoso.com"),
        )
        .await
        .unwrap();
    let staff = staff(table.clone());
    assert_eq!(
        staff
            .insert(&mut employee("Marketing", 1, "Don", "Hall", 34))
            .await
            .unwrap(),
        154
    );
    let mut jun = employee("Marketing", 2, "Jun", "Cao", 47);
    assert_eq!(staff.insert(&mut jun).await.unwrap(), 155);
    assert!(jun.etag.is_some());
    assert_eq!(staff.count("Marketing").await.unwrap(), 155);
    assert_eq!(assert_count(&table, "Marketing", 153).await, 155);

    let summary = staff.summary("Marketing").await.unwrap().unwrap();
    assert_eq!(
        summary.get("ManagerEmail"),
        Some(&EdmValue::String("donh@contoso.com".into()))
    );
    assert_eq!(
        summary.get("DepartmentName"),
        Some(&EdmValue::String("Marketing".into()))
    );

    assert_eq!(
        staff
            .delete(("Marketing", "00001"), IfMatch::Any)
            .await
            .unwrap(),
        154
    );
    assert_eq!(assert_count(&table, "Marketing", 153).await, 154);

    // The first employee of Sales creates its summary.
    assert_eq!(
        staff
            .insert(&mut employee("Sales", 10, "Ken", "Kwok", 23))
            .await
            .unwrap(),
        1
    );
    assert_eq!(assert_count(&table, "Sales", 0).await, 1);
    assert_eq!(staff.count("Finance").await.unwrap(), 0);
}

async fn a_summary_without_its_count_is_an_error_that_writes_nothing(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "DeptBad").await;
    table
        .with_type::<DynamicEntity>()
        .insert(&DynamicEntity::new("Sales", "Department").with("DepartmentName", "Sales"))
        .await
        .unwrap();
    let err = staff(table.clone())
        .insert(&mut employee("Sales", 10, "Ken", "Kwok", 23))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("Invalid entity, EmployeeCount property not found."),
        "{err}"
    );
    assert_eq!(common::rows(&table, "Sales").await.len(), 1);
}

async fn duplicates_and_stale_deletes_leave_the_count_right(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "DeptDup").await;
    let staff = staff(table.clone());
    let mut ken = employee("Sales", 10, "Ken", "Kwok", 23);
    staff.insert(&mut ken).await.unwrap();

    let err = staff
        .insert(&mut employee("Sales", 10, "Kim", "Lee", 30))
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    assert_eq!(err.batch_index(), Some(0));
    assert_eq!(assert_count(&table, "Sales", 0).await, 1);

    // Another client changes Ken after our read: our delete under the old ETag is refused.
    let other = common::second_service(&svc)
        .table::<Employee>(table.name())
        .unwrap();
    let mut theirs = ken.clone();
    theirs.age = 24;
    other
        .update(
            &mut theirs,
            tablekit::UpdateMode::Replace,
            IfMatch::ETag(ken.etag.clone().unwrap()),
        )
        .await
        .unwrap();
    let err = staff
        .delete(("Sales", "00010"), IfMatch::ETag(ken.etag.clone().unwrap()))
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");
    assert_eq!(assert_count(&table, "Sales", 0).await, 1);
}

async fn concurrent_inserts_are_all_counted(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "DeptRace").await;
    let mine = staff(table.clone());
    let theirs = staff(
        common::second_service(&svc)
            .table::<Employee>(table.name())
            .unwrap(),
    );
    let run = |s: CountedPartition<Employee>, base: u32| async move {
        for i in 0..8 {
            s.insert(&mut employee("Sales", base + i, "A", "B", 30))
                .await
                .unwrap();
        }
    };
    tokio::join!(run(mine.clone(), 100), run(theirs, 200));
    assert_eq!(assert_count(&table, "Sales", 0).await, 16);
}

/// The department entity of §1.1 (its count and the manager's details, §3.5).
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "Department")]
struct Department {
    department: String,
    department_name: Option<String>,
    employee_count: i32,
    manager_email: Option<String>,
}

/// The heterogeneous partition, told apart by `EntityType` (§4.8).
#[derive(TableEntity, Debug, Clone, PartialEq)]
enum Staff {
    Employee(Employee),
    Department(Department),
}

fn typed_staff(table: TableClient<Staff>) -> CountedPartition<Staff> {
    CountedPartition::new(table, "Department", "EmployeeCount")
        .with_summary_property("EntityType", "Department")
}

async fn the_department_and_its_employees_read_as_one_typed_partition(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Staff>(&svc, "DeptTyped").await;
    table
        .insert(&Staff::Department(Department {
            department: "Marketing".into(),
            department_name: Some("Marketing".into()),
            employee_count: 153,
            manager_email: Some("donh@contoso.com".into()),
        }))
        .await
        .unwrap();
    let staff = typed_staff(table.clone());
    let mut don = Staff::Employee(employee("Marketing", 1, "Don", "Hall", 34));
    let mut jun = Staff::Employee(employee("Marketing", 2, "Jun", "Cao", 47));
    assert_eq!(staff.insert(&mut don).await.unwrap(), 154);
    assert_eq!(staff.insert(&mut jun).await.unwrap(), 155);
    // The department row is not one of the counted entities.
    let err = staff
        .insert(&mut Staff::Department(Department {
            department: "Marketing".into(),
            department_name: None,
            employee_count: 0,
            manager_email: None,
        }))
        .await
        .unwrap_err();
    common::assert_invalid(&err);

    let partition = staff.read_partition::<Staff>("Marketing").await.unwrap();
    let [Staff::Employee(a), Staff::Employee(b), Staff::Department(d)] = &partition[..] else {
        panic!("{partition:#?}")
    };
    assert_eq!(
        (a.first_name.as_str(), a.last_name.as_str(), a.age),
        ("Don", "Hall", 34)
    );
    assert_eq!(
        (b.first_name.as_str(), b.last_name.as_str(), b.age),
        ("Jun", "Cao", 47)
    );
    assert_eq!(
        d,
        &Department {
            department: "Marketing".into(),
            department_name: Some("Marketing".into()),
            employee_count: 155,
            manager_email: Some("donh@contoso.com".into()),
        }
    );

    // A summary the pattern creates is typed too.
    staff
        .insert(&mut Staff::Employee(employee(
            "Sales", 10, "Ken", "Kwok", 23,
        )))
        .await
        .unwrap();
    let sales = staff.read_partition::<Staff>("Sales").await.unwrap();
    assert_eq!(sales.len(), 2);
    assert_eq!(
        sales[1],
        Staff::Department(Department {
            department: "Sales".into(),
            department_name: None,
            employee_count: 1,
            manager_email: None,
        })
    );
    assert!(staff
        .read_partition::<Staff>("Finance")
        .await
        .unwrap()
        .is_empty());
}

/// The other writer adds an employee between our read of the summary and our
/// transaction: the transaction fails on the summary (409 when it created
/// it, 412 after), the hook sees a second attempt, and the count is right.
async fn a_summary_changed_between_its_read_and_the_transaction_is_read_again(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "DeptInject").await;
    let other = staff(
        common::second_service(&svc)
            .table::<Employee>(table.name())
            .unwrap(),
    );
    let calls = Arc::new(Mutex::new(Vec::new()));
    let next = Arc::new(AtomicU32::new(500));
    let handle = tokio::runtime::Handle::current();
    let mine = {
        let (calls, next) = (calls.clone(), next.clone());
        staff(table.clone()).before_write(move |attempt| {
            calls.lock().unwrap().push(attempt);
            if attempt == 1 {
                let id = next.fetch_add(1, Ordering::SeqCst);
                tokio::task::block_in_place(|| {
                    handle.block_on(async {
                        other
                            .insert(&mut employee("Sales", id, "O", "Ther", 40))
                            .await
                            .unwrap();
                    })
                });
            }
        })
    };
    let take = || std::mem::take(&mut *calls.lock().unwrap());

    // No summary yet: the other writer creates it first (409 on ours).
    assert_eq!(
        mine.insert(&mut employee("Sales", 10, "Ken", "Kwok", 23))
            .await
            .unwrap(),
        2
    );
    assert_eq!(take(), [1, 2], "one conflict, one retry");
    assert_eq!(assert_count(&table, "Sales", 0).await, 2);
    // The summary exists: 412 on ours.
    assert_eq!(
        mine.insert(&mut employee("Sales", 11, "Kim", "Lee", 30))
            .await
            .unwrap(),
        4
    );
    assert_eq!(take(), [1, 2]);
    assert_eq!(assert_count(&table, "Sales", 0).await, 4);
    // A delete.
    assert_eq!(
        mine.delete(("Sales", "00010"), IfMatch::Any).await.unwrap(),
        4
    );
    assert_eq!(take(), [1, 2]);
    assert_eq!(assert_count(&table, "Sales", 0).await, 4);
}

#[tokio::test]
async fn bad_keys_are_refused_before_any_request() {
    let staff = staff(
        common::offline_service()
            .table::<Employee>("Offline")
            .unwrap(),
    );
    common::assert_invalid(
        &staff
            .insert(&mut employee("Sa/les", 1, "A", "B", 1))
            .await
            .unwrap_err(),
    );
    common::assert_invalid(
        &staff
            .delete(("Sales", "Department"), IfMatch::Any)
            .await
            .unwrap_err(),
    );
    common::assert_invalid(
        &staff
            .delete(("Sales", "a#b"), IfMatch::Any)
            .await
            .unwrap_err(),
    );
}

tablekit::testing::conformance!(
    the_marketing_department_counts_its_employees,
    a_summary_without_its_count_is_an_error_that_writes_nothing,
    duplicates_and_stale_deletes_leave_the_count_right,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    concurrent_inserts_are_all_counted,
    the_department_and_its_employees_read_as_one_typed_partition,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_summary_changed_between_its_read_and_the_transaction_is_read_again,
);
