use tablekit::TableEntity;

// Three mistakes, three errors, and nothing else.
#[derive(TableEntity)]
#[tablekit(partition_key = "{missing}", row_key = "r")]
struct Three {
    #[tablekit(rename = "Timestamp")]
    when: String,
    #[tablekit(unknown_key)]
    other: String,
}

fn main() {
    let _ = tablekit::codec::entity_to_json(&Three {
        when: String::new(),
        other: String::new(),
    });
}
