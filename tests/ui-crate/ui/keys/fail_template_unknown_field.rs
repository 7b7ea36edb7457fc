use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "{departmnet}", row_key = "{id}")]
struct Typo {
    department: String,
    id: String,
}

fn main() {}
