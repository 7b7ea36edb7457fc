use tablekit::TableEntity;

#[derive(TableEntity)]
struct Twice {
    #[tablekit(partition_key)]
    p: String,
    #[tablekit(row_key)]
    r: String,
    email: String,
    #[tablekit(rename = "Email")]
    mail: String,
}

fn main() {}
