//! The high-volume delete pattern (design guide §3.8): login attempts stored
//! in one table per day (`LoginAttempts20140731`), kept 60 days; deleting a
//! day of attempts is one request that drops its table.
//!
//! ```text
//! cargo run --example login_retention                 # on the embedded in-process store
//! eval "$(scripts/azurite.sh start)"      # or on Azurite (or export an Azure
//! cargo run --example login_retention                 # account's TABLEKIT_CONNECTION_STRING)
//! scripts/azurite.sh stop
//! ```

use chrono::{DateTime, Duration, TimeZone, Utc};
use tablekit::{Storage, TableEntity, TableServiceClient};
use tablekit_patterns::log_tail::NewestFirst;
use tablekit_patterns::periodic::{Period, PeriodicTables};

/// A login attempt: one partition per user (no hot partition), newest first.
#[derive(TableEntity, Debug, Clone)]
#[tablekit(partition_key = "{user}", row_key = "{key}")]
struct LoginAttempt {
    user: String,
    key: NewestFirst,
    success: bool,
}

const HOW_TO_START_AZURITE: &str = "\
No Table service answered at TABLEKIT_CONNECTION_STRING. Unset it to run on the
embedded store, or start Azurite from this repository (Node.js 20+):
    eval \"$(scripts/azurite.sh start)\"
    cargo run --example login_retention
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
        eprintln!("login_retention failed: {e}");
        if e.is_transport() {
            eprintln!("\n{HOW_TO_START_AZURITE}");
        }
        std::process::exit(1);
    }
}

async fn run(service: TableServiceClient) -> tablekit::Result<()> {
    // A prefix of this run's own, so the sweep touches only this run's tables.
    let prefix = format!(
        "LoginAttempts{}",
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    );
    let logins = PeriodicTables::new(
        service.clone(),
        prefix.clone(),
        Period::Day,
        Duration::days(60),
        |a: &LoginAttempt| a.key.at(),
    )?;
    let start = Utc.with_ymd_and_hms(2014, 7, 31, 18, 0, 0).unwrap();
    println!(
        "attempts at {start} go to table {}",
        logins.table_at(start)?.name()
    );

    // Five days of attempts by three users; each day's first write creates its table.
    for d in 0..5 {
        for (i, user) in ["alice", "bob", "carol"].iter().enumerate() {
            let at: DateTime<Utc> = start + Duration::days(d) + Duration::minutes(i as i64);
            let mut attempt = LoginAttempt {
                user: (*user).into(),
                key: NewestFirst::unique(at),
                success: i != 1,
            };
            logins.insert(&mut attempt).await?;
        }
    }
    let mut tables = service
        .list_tables()
        .prefix(prefix.clone())
        .fetch_all()
        .await?;
    tables.sort();
    println!("wrote 15 attempts into {} tables:", tables.len());
    for t in &tables {
        println!("  {t}");
    }

    let from = start + Duration::days(1);
    let to = start + Duration::days(4);
    println!("bob's attempts from {from} to {to}, over the 4 day tables it touches, newest first:");
    for a in logins
        .query(from, to, |q| q.filter(|e| e.partition_key.eq("bob")))
        .await?
    {
        println!("  {} success={}", a.key.at(), a.success);
    }

    // 60 days after 2014-08-02 ends: the first three days are past retention.
    let now = Utc.with_ymd_and_hms(2014, 10, 2, 0, 0, 0).unwrap();
    let swept = logins.sweep(now).await?;
    println!(
        "sweep at {now} (60-day retention) dropped {} tables, one request each:",
        swept.len()
    );
    for t in &swept {
        println!("  {t}");
    }
    let left = service
        .list_tables()
        .prefix(prefix.clone())
        .fetch_all()
        .await?;
    println!("{} tables left", left.len());

    for t in left {
        service.delete_table(&t).await?;
    }
    println!("cleaned up");
    Ok(())
}
