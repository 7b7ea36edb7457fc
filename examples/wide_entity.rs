//! The wide entities pattern (design guide §3.10): a year of daily message
//! counts for one employee, 365 properties, more than the 252 one entity may
//! hold, stored as two physical entities written in one transaction and read
//! back with one range query.
//!
//! ```text
//! cargo run --example wide_entity                 # on the embedded in-process store
//! eval "$(scripts/azurite.sh start)"      # or on Azurite (or export an Azure
//! cargo run --example wide_entity                 # account's TABLEKIT_CONNECTION_STRING)
//! scripts/azurite.sh stop
//! ```

use tablekit::{DynamicEntity, EdmValue, IfMatch, Storage, TableServiceClient, UpdateMode};
use tablekit_patterns::wide::WideTable;

const HOW_TO_START_AZURITE: &str = "\
No Table service answered at TABLEKIT_CONNECTION_STRING. Unset it to run on the
embedded store, or start Azurite from this repository (Node.js 20+):
    eval \"$(scripts/azurite.sh start)\"
    cargo run --example wide_entity
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
        eprintln!("wide_entity failed: {e}");
        if e.is_transport() {
            eprintln!("\n{HOW_TO_START_AZURITE}");
        }
        std::process::exit(1);
    }
}

async fn show_parts(table: &tablekit::TableClient<DynamicEntity>) -> tablekit::Result<()> {
    for part in table.query().fetch_all().await? {
        println!(
            "  {} / {}: {} properties",
            part.partition_key,
            part.row_key,
            part.properties.len()
        );
    }
    Ok(())
}

async fn run(service: TableServiceClient) -> tablekit::Result<()> {
    let name = format!(
        "MessageStats{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let table = service.table::<DynamicEntity>(&name)?;
    table.create_table().await?;
    println!("created table {name}");
    let stats = WideTable::new(table.clone());

    let mut year = DynamicEntity::new("000123", "2014");
    for day in 1..=365 {
        year.set(format!("Day{day:03}"), (day % 7) * 3);
    }
    println!(
        "a logical entity with {} properties:",
        year.properties.len()
    );
    for (i, part) in stats.parts(&year)?.iter().enumerate() {
        println!(
            "  part {i}: RowKey {} with {} properties",
            part.row_key,
            part.properties.len()
        );
    }
    stats.insert(&mut year).await?;
    println!("inserted both parts in one transaction; stored:");
    show_parts(&table).await?;

    let back = stats.get(("000123", "2014")).await?.expect("just inserted");
    println!(
        "read back with one range query: {} properties, Day200 = {:?}",
        back.properties.len(),
        back.get("Day200")
    );

    // Read, change one day, write every part under part 0's ETag.
    let changed = stats
        .modify(("000123", "2014"), |e| {
            if let Some(EdmValue::Int32(n)) = e.get("Day365").cloned() {
                e.set("Day365", n + 1);
            }
        })
        .await?
        .expect("exists");
    println!(
        "incremented Day365 to {:?} (read + one transaction)",
        changed.get("Day365")
    );

    // Replace with a smaller entity: the second part is deleted in the same transaction.
    let mut january = DynamicEntity::new("000123", "2014");
    for day in 1..=31 {
        january.set(format!("Day{day:03}"), 1);
    }
    stats
        .update(&mut january, UpdateMode::Replace, IfMatch::Any)
        .await?;
    println!("replaced with 31 days; stored:");
    show_parts(&table).await?;

    // A writer holding an old ETag is refused.
    let stale = changed.etag.clone().expect("read with an ETag");
    match stats
        .update(&mut year, UpdateMode::Replace, IfMatch::ETag(stale))
        .await
    {
        Err(e) if e.is_precondition_failed() => {
            println!("a replace with an old ETag was refused (412)")
        }
        other => println!("unexpected: {other:?}"),
    }

    stats.delete(("000123", "2014"), IfMatch::Any).await?;
    println!(
        "deleted every part in one transaction; {} rows left",
        table.query().fetch_all().await?.len()
    );
    table.delete_table().await?;
    println!("deleted table {name}");
    Ok(())
}
