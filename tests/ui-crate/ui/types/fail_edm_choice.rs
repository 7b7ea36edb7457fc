use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r")]
struct EdmChoice {
    #[tablekit(edm = "Int32")]
    name: String,
    #[tablekit(edm = "Int32")]
    count: u32,
}

fn main() {}
