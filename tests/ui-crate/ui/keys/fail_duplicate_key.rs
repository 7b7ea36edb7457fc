use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "{department}", row_key = "{id}")]
struct TwoSources {
    #[tablekit(partition_key)]
    department: String,
    id: String,
}

fn main() {}
