use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "{department}", row_key = "empid_{id:8}")]
struct BadSpec {
    department: String,
    id: u32,
}

#[derive(TableEntity)]
#[tablekit(partition_key = "{department", row_key = "{id:08}")]
struct Unclosed {
    department: String,
    id: u32,
}

fn main() {}
