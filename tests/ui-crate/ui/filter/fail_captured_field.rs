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

struct Config {
    min_age: i32,
}

fn check(q: Query<Employee>, cfg: Config) {
    let _ = q.filter(filter!(|e| e.age > cfg.min_age));
}

fn main() {}
