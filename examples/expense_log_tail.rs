//! The log tail pattern (design guide §3.7) with compound keys (§3.6): an
//! employee's expense claims stored under newest-first RowKeys (inverted
//! ticks), so "the 10 most recent claims" is one range query with `$top=10`.
//!
//! ```text
//! cargo run --example expense_log_tail                 # on the embedded in-process store
//! eval "$(scripts/azurite.sh start)"      # or on Azurite (or export an Azure
//! cargo run --example expense_log_tail                 # account's TABLEKIT_CONNECTION_STRING)
//! scripts/azurite.sh stop
//! ```

use chrono::{Duration, TimeZone, Utc};
use tablekit::{Storage, TableEntity, TableServiceClient};
use tablekit_patterns::log_tail::{LogTail, NewestFirst};

/// An expense claim: the employee is the partition, the RowKey is
/// `<inverted ticks>_<claim id>`, newest first.
#[derive(TableEntity, Debug, Clone)]
#[tablekit(partition_key = "{employee}", row_key = "{key}")]
struct Expense {
    employee: String,
    key: NewestFirst,
    description: String,
    amount: f64,
}

const HOW_TO_START_AZURITE: &str = "\
No Table service answered at TABLEKIT_CONNECTION_STRING. Unset it to run on the
embedded store, or start Azurite from this repository (Node.js 20+):
    eval \"$(scripts/azurite.sh start)\"
    cargo run --example expense_log_tail
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
        eprintln!("expense_log_tail failed: {e}");
        if e.is_transport() {
            eprintln!("\n{HOW_TO_START_AZURITE}");
        }
        std::process::exit(1);
    }
}

async fn run(service: TableServiceClient) -> tablekit::Result<()> {
    let name = format!(
        "EmployeeExpense{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let table = service.table::<Expense>(&name)?;
    table.create_table().await?;
    println!("created table {name}");
    let log = LogTail::new(table.clone());

    // The seed's instant: 2014-08-22T00:50:32Z has inverted ticks 2519936321679999999.
    let t0 = Utc.with_ymd_and_hms(2014, 8, 22, 0, 50, 32).unwrap();
    println!("claims are written oldest first, one a day:");
    for day in 0..15 {
        let at = t0 + Duration::days(day);
        let mut claim = Expense {
            employee: "000123".into(),
            key: NewestFirst::new(at, format!("claim{day:04}")),
            description: format!("taxi on day {day}"),
            amount: 10.0 + day as f64,
        };
        log.append(&mut claim).await?;
        if day < 2 || day == 14 {
            println!("  {at} -> RowKey {}", claim.key);
        } else if day == 2 {
            println!("  ...");
        }
    }
    // Two claims of the same instant: the tie-breaker keeps both.
    let same = t0 + Duration::days(14);
    for _ in 0..2 {
        let mut claim = Expense {
            employee: "000123".into(),
            key: NewestFirst::unique(same),
            description: "lunch".into(),
            amount: 20.0,
        };
        log.append(&mut claim).await?;
        println!("  {same} -> RowKey {} (unique tie-breaker)", claim.key);
    }

    println!("the 10 most recent claims (PartitionKey eq '000123', $top=10):");
    for c in log.latest("000123", 10).await? {
        println!("  {}  {:>6.2}  {}", c.key.at(), c.amount, c.description);
    }

    let from = t0 + Duration::days(3);
    let to = t0 + Duration::days(6);
    println!("claims from {from} up to (not including) {to}, newest first:");
    for c in log.between("000123", from, to).await? {
        println!("  {}  {}", c.key.at(), c.description);
    }

    table.delete_table().await?;
    println!("deleted table {name}");
    Ok(())
}
