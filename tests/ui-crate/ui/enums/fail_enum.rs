use tablekit::{DynamicEntity, TableEntity};

#[derive(TableEntity)]
#[tablekit(discriminator = "Kind", row_key_prefix)]
enum Mixed {
    A(DynamicEntity),
    #[tablekit(rename = "A")]
    B(DynamicEntity),
    C {
        inner: DynamicEntity,
    },
    #[tablekit(unknown)]
    D(DynamicEntity),
    #[tablekit(unknown)]
    E(DynamicEntity),
}

#[derive(TableEntity)]
#[tablekit(row_key_prefix)]
enum Prefixes {
    #[tablekit(rename = "EMP")]
    Employee(DynamicEntity),
    #[tablekit(rename = "EMPLOYEE")]
    Other(DynamicEntity),
}

fn main() {}
