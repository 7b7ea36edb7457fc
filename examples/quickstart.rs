//! The tablekit tour: a typed entity, a table, insert, read, query, update with
//! an ETag, a transaction, delete.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! It uses `TABLEKIT_CONNECTION_STRING` when set (Azure, Azurite, or a store file
//! `UseEmbeddedStorage=true;Path=<file>`), and otherwise the embedded backend: an
//! in-memory store with the service's rules, inside this process, so the tour runs
//! on a fresh machine with no server (`tablekit::Storage::from_env` chooses).

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use tablekit::{filter, storage::StorageKind, ETag, IfMatch, Storage, TableEntity, UpdateMode};

/// A blog post: the channel is the partition (posts of a channel are stored
/// together and can change together), the post id the row.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{channel}", row_key = "post_{id:06}")]
struct Post {
    channel: String,
    id: u32,
    text: String,
    rating: i32,
    views: i64,
    posted: DateTime<Utc>,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

const HOW_TO_START_AZURITE: &str = "\
No Table service answered at TABLEKIT_CONNECTION_STRING.

Unset it to run the tour on the embedded backend, or
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
    // The account of TABLEKIT_CONNECTION_STRING, else the embedded store in memory.
    let storage = Storage::from_env()?;
    println!("backend: {}", storage.description());
    if storage.kind() == StorageKind::Memory {
        println!("  (set TABLEKIT_CONNECTION_STRING to run the tour on Azure or Azurite)");
    }
    let service = storage.tables()?;

    // A fresh table per run: a deleted table's name stays taken for ~40 s on Azure.
    let name = format!(
        "Quickstart{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let posts = service.table::<Post>(&name)?;
    posts.create_table().await?;
    println!("created table {name}");

    // Insert. Keys come from the template: PartitionKey "Channel9", RowKey "post_000001".
    let mut post = Post {
        channel: "Channel9".into(),
        id: 1,
        text: "Hello".into(),
        rating: 3,
        views: 9_000_000_000,
        posted: Utc::now(),
        etag: None,
    };
    posts.insert(&mut post).await?; // `&mut`: the new ETag lands in `post.etag`
    println!(
        "inserted {} with ETag {}",
        post.key(),
        post.etag.as_ref().unwrap()
    );

    // Point read by typed key: Option<Post>, None when missing.
    let read = posts
        .get(Post::key("Channel9", 1)?)
        .await?
        .expect("just inserted");
    assert_eq!(read.text, "Hello");
    assert!(posts.get(Post::key("Channel9", 99)?).await?.is_none());

    // Update under the ETag we hold: it applies only if nobody wrote in between.
    post.text = "Hi there".into();
    let etag = post.etag.clone().expect("filled by the insert");
    posts.update(&mut post, UpdateMode::Merge, etag).await?;
    // A second writer still holding the old version is refused with 412.
    let stale = posts
        .update(&read, UpdateMode::Replace, read.etag.clone().unwrap())
        .await
        .expect_err("the ETag is stale");
    println!(
        "stale writer refused: precondition failed = {}",
        stale.is_precondition_failed()
    );

    // An entity group transaction: all or nothing, one partition.
    let mut tx = posts.transaction();
    for id in 2..5 {
        tx.insert(&Post {
            channel: "Channel9".into(),
            id,
            text: format!("post {id}"),
            rating: id as i32,
            views: 0,
            posted: Utc::now(),
            etag: None,
        })?;
    }
    let result = tx.send().await?;
    println!("transaction wrote {} posts", result.etags().len());

    // A typed query: Rust operators over the entity's columns, checked by the
    // compiler, sent as `PartitionKey eq 'Channel9' and Rating ge 3`.
    let min_rating = 3;
    let query = posts.query().filter(filter!(
        |p| p.partition_key == "Channel9" && p.rating >= min_rating
    ));
    println!("query plan: {}", query.plan()?.name());
    let good: Vec<Post> = query.stream().try_collect().await?;
    for p in &good {
        println!("  {} rated {}: {}", p.id, p.rating, p.text);
    }

    posts
        .delete(Post::key("Channel9", 1)?, IfMatch::Any)
        .await?;
    posts.delete_table().await?;
    println!("deleted table {name}: done");
    Ok(())
}
