use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r", version = "2")]
struct Forms {
    #[tablekit(skip = true)]
    a: String,
    #[tablekit(rename)]
    b: String,
    #[tablekit(rename = Name)]
    c: String,
}

fn main() {}
