use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r", tabel = "Employees")]
struct Unknown {
    #[tablekit(renam = "X")]
    a: String,
}

fn main() {}
