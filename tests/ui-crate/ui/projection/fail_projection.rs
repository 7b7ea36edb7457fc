use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "{department}", row_key = "{id}")]
struct Employee {
    department: String,
    id: String,
    first_name: String,
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
    first_nme: String,
    age: String,
}

fn main() {}
