//! Log data in blobs (design guide §3.13): three hours of the Queue service's
//! log records on 31 July 2014 written in batches to blobs named by time
//! (`queue/2014/07/31/1500/000001.log`, as Storage Analytics names them), then
//! the seed's query: the critical and error messages between 15:04 and 15:06.
//!
//! Run with `cargo run --example queue_logs`. With `TABLEKIT_CONNECTION_STRING`
//! set it uses that account's Blob service (Azure or Azurite), and otherwise
//! the embedded backend, so it runs on a fresh machine with no server. It
//! exits with status 1 if the window it reads differs from what it wrote.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use tablekit::{clock::ManualClock, Storage};
use tablekit_patterns::log_data::{LogReader, LogWriter};

/// One Queue service log record: what Storage Analytics logs per request.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct QueueLog {
    level: Level,
    operation: String,
    status: u16,
    queue: String,
    message: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Critical,
    Error,
    Warning,
    Info,
}

/// The log: one request every 10 seconds from 14:00 to 16:59:50, with a few
/// failures spread over the hours and an incident at 15:04–15:05.
fn timeline() -> Vec<(DateTime<Utc>, QueueLog)> {
    let start = Utc.with_ymd_and_hms(2014, 7, 31, 14, 0, 0).unwrap();
    let operations = ["PutMessage", "GetMessages", "DeleteMessage", "PeekMessages"];
    (0..3 * 360)
        .map(|i: i64| {
            let t = start + chrono::Duration::seconds(10 * i);
            let incident = t >= at(15, 4, 20) && t < at(15, 5, 40);
            let (level, status, message) = if incident {
                if i % 2 == 0 {
                    (
                        Level::Critical,
                        503,
                        "ServerBusy: the partition is throttled",
                    )
                } else {
                    (Level::Error, 500, "InternalError: operation timed out")
                }
            } else if i % 97 == 0 {
                (Level::Error, 500, "InternalError: operation timed out")
            } else if i % 7 == 0 {
                (Level::Warning, 404, "QueueNotFound")
            } else {
                (Level::Info, 200, "Success")
            };
            let record = QueueLog {
                level,
                operation: operations[i as usize % operations.len()].into(),
                status,
                queue: format!("orders-{}", i % 3),
                message: message.into(),
            };
            (t, record)
        })
        .collect()
}

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2014, 7, 31, h, m, s).unwrap()
}

fn serious(r: &QueueLog) -> bool {
    matches!(r.level, Level::Critical | Level::Error)
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("queue_logs failed: {e}");
        std::process::exit(1);
    }
}

async fn run() -> tablekit::Result<()> {
    // The account of TABLEKIT_CONNECTION_STRING, else the embedded store.
    let storage = Storage::from_env()?;
    println!("backend: {}", storage.description());
    let blobs = storage.blobs()?;
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let logs = blobs.container(&format!("logs-{run_id}"))?;
    logs.create_container().await?;

    // Batches of up to 100 records, and no record waits more than five
    // minutes of the writer's clock. The clock is moved by hand here, 10 s
    // per record, as the records are replayed; a live service uses the
    // system clock and calls flush_if_due() from a timer when requests stop.
    let clock = ManualClock::new(at(14, 0, 0));
    let mut writer = LogWriter::new(logs.clone(), "queue")?
        .max_records(100)
        .flush_every(Duration::from_secs(5 * 60))
        .with_clock(clock.clone());
    let records = timeline();
    let mut written = Vec::new();
    for (t, record) in &records {
        written.extend(writer.log(*t, record).await?);
        clock.advance(Duration::from_secs(10));
    }
    written.extend(writer.flush().await?);
    println!(
        "wrote {} records in {} blobs, e.g. {} ({} to {}, {} records)",
        records.len(),
        written.len(),
        written[0].name(),
        written[0].start().format("%H:%M:%S"),
        written[0].end().format("%H:%M:%S"),
        written[0].records()
    );
    check(
        written[0].name() == "queue/2014/07/31/1400/000001.log",
        "the first blob is named as Storage Analytics names it",
    )?;
    check(
        written.iter().map(|b| b.records()).sum::<usize>() == records.len(),
        "every record is in a blob",
    )?;

    // The seed's query: critical and error messages from 15:04 up to 15:06.
    let window = at(15, 4, 0)..at(15, 6, 0);
    let reader = LogReader::<QueueLog>::new(logs.clone(), "queue")?;
    let downloaded = reader.blobs(window.clone()).await?;
    let hour = logs
        .list_blobs()
        .prefix("queue/2014/07/31/1500/")
        .fetch_all()
        .await?;
    println!(
        "15:04–15:06: the 15:00 folder holds {} blobs, {} overlap the window by their metadata: {:?}",
        hour.len(),
        downloaded.len(),
        downloaded.iter().map(|b| b.name()).collect::<Vec<_>>()
    );
    let found: Vec<(DateTime<Utc>, QueueLog)> = reader
        .read(window.clone())
        .try_filter(|r| futures::future::ready(serious(&r.record)))
        .map_ok(|r| (r.time, r.record))
        .try_collect()
        .await?;
    for (t, r) in &found {
        println!(
            "  {} {:?} {} {} {}: {}",
            t.format("%H:%M:%S"),
            r.level,
            r.status,
            r.operation,
            r.queue,
            r.message
        );
    }
    let expected: Vec<(DateTime<Utc>, QueueLog)> = records
        .iter()
        .filter(|(t, r)| window.contains(t) && serious(r))
        .cloned()
        .collect();
    check(!expected.is_empty(), "the incident is in the window")?;
    check(
        found == expected,
        "the window holds exactly what was logged in it",
    )?;
    check(
        downloaded.len() < hour.len(),
        "the reader skips blobs outside the window without downloading them",
    )?;
    println!(
        "{} critical and error messages between 15:04 and 15:06",
        found.len()
    );

    logs.delete_container().await?;
    Ok(())
}

fn check(ok: bool, what: &str) -> tablekit::Result<()> {
    if ok {
        Ok(())
    } else {
        Err(tablekit::error::DecodeError::new(format!("check failed: {what}")).into())
    }
}
