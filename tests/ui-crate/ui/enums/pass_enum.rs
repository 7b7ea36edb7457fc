use tablekit::{DynamicEntity, TableEntity};

#[derive(TableEntity)]
#[tablekit(partition_key = "{user}", row_key = "{posted}")]
struct Blog {
    user: String,
    posted: String,
}

#[derive(TableEntity)]
#[tablekit(discriminator = "Kind", table = "Social")]
enum Social {
    Blog(Blog),
    #[tablekit(unknown)]
    Other(DynamicEntity),
}

fn main() {
    let _ = <Social as tablekit::filter::EntityColumns>::columns();
}
