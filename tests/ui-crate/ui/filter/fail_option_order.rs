use tablekit::{filter, TableEntity, table::Query};

#[derive(TableEntity)]
#[tablekit(partition_key = "{department}", row_key = "{id}")]
pub struct Employee {
    department: String,
    id: String,
    last_name: String,
    age: Option<i32>,
    views: i64,
    active: bool,
}

fn check(q: Query<Employee>) {
    let _ = q.filter(filter!(|e| e.age < None));
}

fn main() {}
