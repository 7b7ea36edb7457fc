use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r")]
struct Reserved {
    #[tablekit(rename = "Timestamp")]
    when: String,
    row_key_text: String,
    #[tablekit(rename = "RowKey")]
    rk: String,
}

fn main() {}
