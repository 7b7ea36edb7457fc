use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r")]
struct Clash {
    #[tablekit(rename = "Stamp")]
    timestamp: String,
}

fn main() {}
