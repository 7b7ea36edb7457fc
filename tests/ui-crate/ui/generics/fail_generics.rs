use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r")]
struct Generic<T> {
    value: T,
}

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r")]
struct Borrowed<'a> {
    name: &'a str,
}

fn main() {}
