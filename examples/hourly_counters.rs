//! The data series pattern (design guide §3.9): how many instant messages an
//! employee sends per hour, as 24 counts `H00`..`H23` in one entity per day,
//! so a chart of the last 24 hours is one request instead of 24.
//!
//! ```text
//! cargo run --example hourly_counters                 # on the embedded in-process store
//! eval "$(scripts/azurite.sh start)"      # or on Azurite (or export an Azure
//! cargo run --example hourly_counters                 # account's TABLEKIT_CONNECTION_STRING)
//! scripts/azurite.sh stop
//! ```

use chrono::{Duration, TimeZone, Utc};
use tablekit::{DynamicEntity, Storage, TableServiceClient};
use tablekit_patterns::series::{DataSeries, HourlyCounters, SeriesLayout};

const HOW_TO_START_AZURITE: &str = "\
No Table service answered at TABLEKIT_CONNECTION_STRING. Unset it to run on the
embedded store, or start Azurite from this repository (Node.js 20+):
    eval \"$(scripts/azurite.sh start)\"
    cargo run --example hourly_counters
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
        eprintln!("hourly_counters failed: {e}");
        if e.is_transport() {
            eprintln!("\n{HOW_TO_START_AZURITE}");
        }
        std::process::exit(1);
    }
}

async fn run(service: TableServiceClient) -> tablekit::Result<()> {
    let name = format!(
        "MessageCounts{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let table = service.table::<DynamicEntity>(&name)?;
    table.create_table().await?;
    println!("created table {name}");

    // Hourly counters that roll over to a new entity (series) every UTC day.
    let counters = HourlyCounters::new(&table);
    let start = Utc.with_ymd_and_hms(2014, 7, 30, 20, 15, 0).unwrap();
    println!("recording messages from {start}, over midnight:");
    for i in 0..12 {
        let t = start + Duration::minutes(50 * i);
        let n = counters.record("000123", t, 1 + i % 3).await?;
        println!(
            "  {t}: hour {} now counts {n} (read + merge under the ETag)",
            t.format("%H")
        );
    }
    println!("stored entities (one per day, 24 hour properties at most):");
    for r in table.query().fetch_all().await? {
        let props: Vec<&str> = r.properties.iter().map(|(n, _)| n).collect();
        println!("  {} / {}: {}", r.partition_key, r.row_key, props.join(" "));
    }

    let now = start + Duration::hours(10);
    println!("the last 24 hours up to {now}, from one range query:");
    for (hour, n) in counters.last_24_hours("000123", now).await? {
        if n > 0 {
            println!("  {hour}: {} {n}", "#".repeat(n as usize));
        }
    }

    // A year of daily counts: 366 slots over the entities 01 and 02.
    let yearly = DataSeries::new(&table, SeriesLayout::daily());
    yearly.add("000124", "", 0, 5).await?;
    yearly.add("000124", "", 300, 7).await?;
    let year = yearly.read("000124", "").await?;
    println!(
        "daily series of 000124: {} slots in {} entities (01, 02), day 1 = {}, day 301 = {}",
        year.values.len(),
        year.etags.len(),
        year.values[0],
        year.values[300]
    );

    table.delete_table().await?;
    println!("deleted table {name}");
    Ok(())
}
