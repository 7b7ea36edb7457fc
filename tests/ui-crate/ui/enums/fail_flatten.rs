use tablekit::TableEntity;

struct Address {
    city: String,
}

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r")]
struct Person {
    #[tablekit(flatten)]
    home: Address,
    #[tablekit(flatten)]
    work: Option<Address>,
}

fn main() {}
