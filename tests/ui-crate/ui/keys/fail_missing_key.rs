use tablekit::TableEntity;

#[derive(TableEntity)]
struct NoKeys {
    name: String,
}

fn needs_entity<T: TableEntity>() {}

fn main() {
    // No "TableEntity is not implemented" error follows the derive's errors.
    needs_entity::<NoKeys>();
}
