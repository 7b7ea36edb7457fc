use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "{department:04}", row_key = "{year}{month:02}")]
struct Padding {
    department: String,
    year: u16,
    month: u8,
}

fn main() {}
