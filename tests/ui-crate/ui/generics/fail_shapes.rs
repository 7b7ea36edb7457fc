use tablekit::TableEntity;

#[derive(TableEntity)]
struct Tuple(String, String);

#[derive(TableEntity)]
union U {
    a: u32,
}

fn main() {}
