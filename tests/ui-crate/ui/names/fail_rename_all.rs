use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r", rename_all = "kebab-case")]
struct Kebab {
    first_name: String,
}

fn main() {}
