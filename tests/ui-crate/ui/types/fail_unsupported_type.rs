use std::collections::HashMap;
use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r")]
struct Unsupported {
    map: HashMap<String, i32>,
    ok: String,
}

fn main() {}
