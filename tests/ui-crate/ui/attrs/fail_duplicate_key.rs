use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r")]
#[tablekit(row_key = "s")]
struct Duplicate {
    #[tablekit(rename = "X", rename = "Y")]
    a: String,
}

fn main() {}
