//! The tablekit tour: create a table, insert, read, query, update with an ETag,
//! run a transaction, delete.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! It uses `TABLEKIT_CONNECTION_STRING` when set (Azure or Azurite), and otherwise
//! the Azurite emulator on its default port (`UseDevelopmentStorage=true`).

use futures::TryStreamExt;
use tablekit::{DynamicEntity, IfMatch, TableServiceClient, UpdateMode};

const HOW_TO_START_AZURITE: &str = "\
No Table service answered.

tablekit talks to Azure Table Storage or to Azurite, the local emulator. Either
  * point it at an account:
        export TABLEKIT_CONNECTION_STRING='DefaultEndpointsProtocol=https;AccountName=...;AccountKey=...'
  * or start Azurite from this repository (needs Node.js 20+) and use what it prints:
        eval \"$(scripts/azurite.sh start)\"
        export TABLEKIT_CONNECTION_STRING=\"$TABLEKIT_TEST_CONNECTION_STRING\"
        cargo run --example quickstart
        scripts/azurite.sh stop
  * or run any Azurite on its default ports (azurite-table listens on 127.0.0.1:10002).";

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        if e.is_transport() {
            eprintln!("{e}\n\n{HOW_TO_START_AZURITE}");
        } else {
            eprintln!("quickstart failed: {e}");
        }
        std::process::exit(1);
    }
}

async fn run() -> tablekit::Result<()> {
    let connection = std::env::var("TABLEKIT_CONNECTION_STRING").unwrap_or_else(|_| {
        println!("TABLEKIT_CONNECTION_STRING is not set: trying Azurite on 127.0.0.1:10002");
        "UseDevelopmentStorage=true".to_owned()
    });
    let service = TableServiceClient::from_connection_string(&connection)?;

    // A fresh table per run: a deleted table's name stays taken for ~40 s on Azure.
    let name = format!(
        "Quickstart{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let blogs = service.table::<DynamicEntity>(&name)?;
    blogs.create().await?;
    println!("created table {name}");

    // Insert: PartitionKey = channel, RowKey = post id, typed properties.
    let mut post = DynamicEntity::new("Channel9", "Oct-29")
        .with("Text", "Hello")
        .with("Rating", 3)
        .with("Views", 9_000_000_000_i64)
        .with("Posted", chrono::Utc::now());
    let written = blogs.insert(&mut post).await?;
    println!(
        "inserted {}/{} with ETag {}",
        post.partition_key,
        post.row_key,
        written.etag()
    );

    // Point read: Option<T>, None when missing.
    let read = blogs
        .get(("Channel9", "Oct-29"))
        .await?
        .expect("just inserted");
    println!("read back: Text = {:?}", read.get("Text"));
    assert!(blogs.get(("Channel9", "nope")).await?.is_none());

    // Update with the ETag we hold: applies only if nobody changed the post since.
    post.set("Text", "Hi there");
    let etag = post.etag.clone().expect("filled by the insert");
    blogs
        .update(&mut post, UpdateMode::Merge, IfMatch::ETag(etag.clone()))
        .await?;
    // A second writer still holding the old ETag is refused with 412.
    let stale = blogs
        .update(&read, UpdateMode::Replace, IfMatch::ETag(etag))
        .await
        .expect_err("the ETag is stale");
    println!(
        "stale writer refused: precondition failed = {}",
        stale.is_precondition_failed()
    );

    // An entity group transaction: all or nothing, one partition.
    let mut tx = blogs.transaction();
    for i in 0..3 {
        tx.insert(
            &DynamicEntity::new("Channel9", format!("Nov-0{i}"))
                .with("Text", format!("post {i}"))
                .with("Rating", i),
        )?;
    }
    let result = tx.send().await?;
    println!("transaction wrote {} entities", result.etags().len());

    // Query: a filter, following continuation tokens as a stream.
    let good: Vec<DynamicEntity> = blogs
        .query()
        .filter(|e| e.partition_key.eq("Channel9") & e.col::<i32>("Rating").ge(2))
        .stream()
        .try_collect()
        .await?;
    for e in &good {
        println!("  {} rating {:?}", e.row_key, e.get("Rating"));
    }

    blogs.delete(("Channel9", "Oct-29"), IfMatch::Any).await?;
    blogs.delete_table().await?;
    println!("deleted table {name}: done");
    Ok(())
}
