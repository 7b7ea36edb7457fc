use tablekit::{filter, TableEntity, table::Query};

#[derive(TableEntity)]
#[tablekit(partition_key = "{department}", row_key = "{id}")]
pub struct Employee {
    department: String,
    id: String,
    last_name: String,
    age: i32,
    views: i64,
    active: bool,
}

fn check(q: Query<Employee>) {
    let min = 30;
    let name = "Jones";
    let _ = q.filter(filter!(|e| e.last_name == name && e.age >= min && !e.active && (e.views > 1_i64 || 3 < e.age)));
}

fn main() {}
