use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "{region}", row_key = "{id}")]
struct KeyKinds {
    region: Option<String>,
    #[tablekit(json)]
    id: Vec<String>,
    #[tablekit(stored)]
    name: String,
}

fn main() {}
