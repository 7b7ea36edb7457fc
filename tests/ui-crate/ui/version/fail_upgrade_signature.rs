use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(
    partition_key = "p",
    row_key = "r",
    version = 2,
    upgrade = "Self::upgrade"
)]
struct Hook {
    a: String,
}

impl Hook {
    fn upgrade(version: i32) -> Self {
        let _ = version;
        Hook { a: String::new() }
    }
}

fn main() {}
