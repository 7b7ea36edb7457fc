use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "{department}", row_key = "{id}")]
struct Employee {
    department: String,
    id: String,
    #[tablekit(edm = "Int64")]
    level: i32,
    age: i32,
}

#[derive(TableEntity)]
#[tablekit(
    projection_of = "Employee",
    partition_key = "{department}",
    row_key = "{id}"
)]
struct Summary {
    department: String,
    id: String,
    level: i32,
    #[tablekit(edm = "Int64")]
    age: i32,
}

fn main() {}
