//! `filter!` and `odata!` through a derived entity: the text each query sends,
//! and the checks made before any request (no emulator needed).

use crate::common;

use tablekit::{filter, filter::QueryPlan, odata, table::ScanPolicy, DynamicEntity, TableEntity};

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    last_name: String,
    age: i32,
    salary: f64,
    active: bool,
    views: i64,
}

fn employees() -> tablekit::TableClient<Employee> {
    common::offline_table::<DynamicEntity>().with_type()
}

fn text(q: tablekit::table::Query<Employee>) -> String {
    q.filter_text().unwrap().unwrap()
}

#[test]
fn filter_macro_rewrites_operators_into_typed_comparisons() {
    let min = 30;
    let dept = "Sales".to_owned();
    let q = employees()
        .query()
        .filter(filter!(|e| e.partition_key == dept
            && e.age >= min
            && !e.active));
    assert_eq!(
        text(q),
        "PartitionKey eq 'Sales' and Age ge 30 and not (Active eq true)"
    );
    let q = employees().query().filter(filter!(
        |e| (e.age < 18 || 65 <= e.age) && e.last_name.starts_with("Jo")
    ));
    assert_eq!(
        text(q),
        "(Age lt 18 or Age ge 65) and LastName ge 'Jo' and LastName lt 'Jp'"
    );
    let q = employees().query().filter(filter!(|e| e.active
        && e.views > 9_000_000_000_i64
        && e.salary != 2.5));
    assert_eq!(
        text(q),
        "Active eq true and Views gt 9000000000L and Salary ne 2.5"
    );
}

#[test]
fn the_closure_api_and_the_macro_agree() {
    let by_macro = employees()
        .query()
        .filter(filter!(|e| e.partition_key == "Sales" && e.age >= 30));
    let by_closure = employees()
        .query()
        .filter(|e| e.partition_key.eq("Sales") & e.age.ge(30));
    assert_eq!(text(by_macro), text(by_closure));
}

#[test]
fn string_values_cannot_widen_the_query() {
    let evil = "x' or PartitionKey ne '";
    let q = employees().query().filter(filter!(|e| e.last_name == evil));
    assert_eq!(text(q), "LastName eq 'x'' or PartitionKey ne '''");
    let q = employees().query().filter_raw(odata!("LastName eq {evil}"));
    assert_eq!(text(q), "LastName eq 'x'' or PartitionKey ne '''");
}

#[test]
fn odata_macro_writes_typed_literals() {
    let name = "O'Brien";
    let age = 30;
    let views = 9_000_000_000_i64;
    let q = employees().query().filter_raw(odata!(
        "LastName eq {name} and Age gt {age} and Views lt {}",
        views
    ));
    assert_eq!(
        text(q),
        "LastName eq 'O''Brien' and Age gt 30 and Views lt 9000000000L"
    );
}

#[test]
fn plans_follow_the_querying_guide() {
    let plan = |q: tablekit::table::Query<Employee>| q.plan().unwrap();
    assert_eq!(
        plan(employees().query().filter(filter!(
            |e| e.partition_key == "Sales" && e.row_key == "empid_000223"
        ))),
        QueryPlan::Point {
            partition_key: "Sales".into(),
            row_key: "empid_000223".into()
        }
    );
    assert_eq!(
        plan(
            employees()
                .query()
                .filter(|e| e.partition_key.eq("Sales") & e.row_key.starts_with("empid_0001"))
        )
        .name(),
        "partition range"
    );
    assert_eq!(
        plan(employees().query().filter(filter!(
            |e| e.partition_key == "Sales" && e.last_name == "Jones"
        )))
        .name(),
        "partition scan"
    );
    assert_eq!(
        plan(
            employees()
                .query()
                .filter(|e| e.partition_key.between("A", "M"))
        ),
        QueryPlan::TableRange
    );
    assert_eq!(
        plan(
            employees()
                .query()
                .filter(filter!(|e| e.last_name == "Jones"))
        ),
        QueryPlan::TableScan
    );
    assert_eq!(
        plan(employees().query().filter(filter!(
            |e| e.partition_key == "Sales" || e.partition_key == "HR"
        ))),
        QueryPlan::TableScan
    );
}

#[tokio::test]
async fn problems_are_reported_before_any_request() {
    // 16 comparisons.
    let err = employees()
        .query()
        .filter(|e| e.age.is_in(0..16))
        .fetch_all()
        .await
        .unwrap_err();
    assert!(common::assert_invalid(&err).contains("16 comparisons"));
    // NaN has no literal.
    let err = employees()
        .query()
        .filter(filter!(|e| e.salary > f64::NAN))
        .fetch_all()
        .await
        .unwrap_err();
    common::assert_invalid(&err);
    // Raw text that does not parse.
    for bad in ["Age ge", "Age gt Salary", "startswith(LastName,'J')"] {
        let err = employees()
            .query()
            .filter_raw(bad)
            .fetch_all()
            .await
            .unwrap_err();
        common::assert_invalid(&err);
    }
    // A table scan under a deny policy.
    let err = employees()
        .with_scan_policy(ScanPolicy::Deny)
        .query()
        .filter(filter!(|e| e.last_name == "Jones"))
        .fetch_all()
        .await
        .unwrap_err();
    assert!(common::assert_invalid(&err).contains("table scan"));
}
