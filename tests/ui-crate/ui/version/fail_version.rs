use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(
    partition_key = "p",
    row_key = "r",
    upgrade = "Self::up",
    version_property = "V"
)]
struct NoVersion {
    a: String,
}

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r", version = 0)]
struct ZeroVersion {
    a: String,
}

#[derive(TableEntity)]
#[tablekit(
    partition_key = "p",
    row_key = "r",
    version = 2,
    version_property = "Version"
)]
struct Clash {
    version: i32,
}

fn main() {}
