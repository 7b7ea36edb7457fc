use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "sales/{region}", row_key = "{id}")]
struct Slash {
    region: String,
    id: String,
}

fn main() {}
