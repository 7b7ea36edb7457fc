//! Background schema upgrade: blog posts written with a `Rating` (version 0,
//! no version property) are rewritten as version 2 with `Stars`, page by
//! page, each under the ETag it was read with.
//!
//! ```text
//! cargo run --example schema_upgrade                 # on the embedded in-process store
//! eval "$(scripts/azurite.sh start)"      # or on Azurite (or export an Azure
//! cargo run --example schema_upgrade                 # account's TABLEKIT_CONNECTION_STRING)
//! scripts/azurite.sh stop
//! ```

use tablekit::{entity::RawEntity, DynamicEntity, Storage, TableEntity, TableServiceClient};
use tablekit_patterns::upgrade::SchemaUpgrade;

/// What the old program wrote.
#[derive(TableEntity, Debug, Clone)]
struct BlogV1 {
    #[tablekit(partition_key)]
    channel: String,
    #[tablekit(row_key)]
    posted: String,
    text: String,
    rating: i32,
}

/// The current schema: `Rating` (1 to 5) became `Stars` (out of 10).
#[derive(TableEntity, Debug, Clone)]
#[tablekit(version = 2, upgrade = "Blog::upgrade")]
struct Blog {
    #[tablekit(partition_key)]
    channel: String,
    #[tablekit(row_key)]
    posted: String,
    text: String,
    #[tablekit(default)]
    stars: i64,
}

impl Blog {
    fn upgrade(raw: &RawEntity<'_>, _stored_version: i32) -> tablekit::Result<Self> {
        let mut blog = Self::decode_current_schema(raw)?;
        if let Some(rating) = raw.get("Rating") {
            blog.stars = i64::from(rating.to_i32()?) * 2;
        }
        Ok(blog)
    }
}

const HOW_TO_START_AZURITE: &str = "\
No Table service answered at TABLEKIT_CONNECTION_STRING. Unset it to run on the
embedded store, or start Azurite from this repository (Node.js 20+):
    eval \"$(scripts/azurite.sh start)\"
    cargo run --example schema_upgrade
    scripts/azurite.sh stop
or export TABLEKIT_CONNECTION_STRING for an Azure account.";

#[tokio::main]
async fn main() {
    // The account of TABLEKIT_CONNECTION_STRING (Azure, Azurite, or a store
    // file: UseEmbeddedStorage=true;Path=<file>), else the embedded store in
    // memory, so the example runs with no server; the first line says which.
    let result = async {
        let storage = Storage::from_env()?;
        println!("backend: {}", storage.description());
        run(storage.tables()?.clone()).await
    };
    if let Err(e) = result.await {
        eprintln!("schema_upgrade failed: {e}");
        if e.is_transport() {
            eprintln!("\n{HOW_TO_START_AZURITE}");
        }
        std::process::exit(1);
    }
}

async fn show(table: &tablekit::TableClient<DynamicEntity>) -> tablekit::Result<()> {
    for r in table.query().fetch_all().await? {
        let props: Vec<String> = r
            .properties
            .iter()
            .map(|(n, v)| format!("{n}={v:?}"))
            .collect();
        println!(
            "  {} / {}: {}",
            r.partition_key,
            r.row_key,
            props.join(", ")
        );
    }
    Ok(())
}

async fn run(service: TableServiceClient) -> tablekit::Result<()> {
    let name = format!("Blogs{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let old = service.table::<BlogV1>(&name)?;
    old.create_table().await?;
    println!("created table {name}");
    for (posted, rating) in [("Oct-27", 3), ("Oct-28", 4), ("Oct-29", 5)] {
        old.insert(&BlogV1 {
            channel: "Channel9".into(),
            posted: posted.into(),
            text: "Hello".into(),
            rating,
        })
        .await?;
    }
    println!("written by the old program:");
    show(&old.with_type()).await?;

    let upgrade = SchemaUpgrade::new(
        old.with_type::<Blog>(),
        Blog::VERSION_PROPERTY,
        Blog::SCHEMA_VERSION,
    )
    .page_size(2);
    let mut from = None;
    loop {
        let page = upgrade.run_page(from).await?;
        println!(
            "page: {} read, {} upgraded (1 query + 1 conditional replace each){}",
            page.report.scanned,
            page.report.upgraded,
            if page.continuation.is_some() {
                ", more to come"
            } else {
                ""
            }
        );
        match page.continuation {
            Some(c) => from = Some(c),
            None => break,
        }
    }
    println!("after the upgrade:");
    show(&old.with_type()).await?;

    old.delete_table().await?;
    println!("deleted table {name}");
    Ok(())
}
