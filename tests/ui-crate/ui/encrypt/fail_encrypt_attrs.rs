use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "{department}", row_key = "{id}")]
pub struct Employee {
    // Keys are stored in clear.
    #[tablekit(encrypt)]
    department: String,
    id: String,
    // The format encrypts strings only.
    #[tablekit(encrypt)]
    salary: i64,
    // Not with another way of storing the field.
    #[tablekit(json, encrypt)]
    tags: Vec<String>,
}

fn main() {}
