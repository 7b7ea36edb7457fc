use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "{department}", row_key = "{id}")]
struct Employee {
    department: String,
    id: String,
    #[tablekit(rename = "Given")]
    first_name: String,
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
    first_name: String,
}

fn main() {}
