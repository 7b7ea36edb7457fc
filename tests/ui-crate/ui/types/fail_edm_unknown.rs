use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r")]
struct EdmUnknown {
    #[tablekit(edm = "Decimal")]
    price: f64,
}

fn main() {}
