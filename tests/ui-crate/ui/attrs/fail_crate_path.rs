use tablekit::{TableEntity, TableProperties};

#[derive(TableEntity)]
#[tablekit(crate = 5, partition_key = "p", row_key = "r")]
struct NotAString {
    a: String,
}

#[derive(TableProperties)]
#[tablekit(crate = "not a path")]
struct NotAPath {
    a: String,
}

#[derive(TableEntity)]
#[tablekit(crate)]
enum NoValue {
    A(NotAString),
}

fn main() {}
