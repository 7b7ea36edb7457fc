use tablekit::{filter, TableEntity, table::Query};

#[derive(TableEntity)]
#[tablekit(partition_key = "{department}", row_key = "{id}")]
pub struct Employee {
    department: String,
    id: String,
    last_name: String,
    #[tablekit(encrypt)]
    ssn: String,
}

fn check(q: Query<Employee>) {
    // The typed calls, and the same through filter!: an encrypted column
    // has no comparison a filter could send.
    let _ = q.filter(|e| e.ssn.eq("123-45-6789"));
}

fn check_macro(q: Query<Employee>) {
    let _ = q.filter(filter!(|e| e.last_name == "Jones" && e.ssn != "x"));
}

fn main() {}
