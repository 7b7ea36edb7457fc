use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(partition_key = "p", row_key = "r")]
struct WrongEtag {
    #[tablekit(etag)]
    etag: String,
    #[tablekit(timestamp)]
    ts: chrono::DateTime<chrono::Utc>,
}

fn main() {}
