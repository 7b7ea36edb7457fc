use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r")]
struct Invalid {
    #[tablekit(rename = "my-prop")]
    a: String,
    #[tablekit(rename = "1abc")]
    b: String,
    #[tablekit(
        rename = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    )]
    c: String,
}

fn main() {}
