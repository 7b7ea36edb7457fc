use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r")]
struct Conflicts {
    #[tablekit(json, flatten)]
    a: Vec<String>,
    #[tablekit(skip, rename = "B")]
    b: String,
    #[tablekit(stored)]
    c: String,
}

fn main() {}
