//! Uploads and downloads a large blob in bounded memory, reports the peak
//! memory of the process (Linux: `VmHWM` of /proc/self/status), and exits
//! with status 1 if it went over budget: 50 MiB over HTTP.
//!
//! ```text
//! eval "$(scripts/azurite.sh start)"
//! TABLEKIT_CONNECTION_STRING="$TABLEKIT_TEST_CONNECTION_STRING" \
//!     cargo run --release --example blob_transfer            # 200 MiB by default
//! cargo run --example blob_transfer -- 20                    # 20 MiB, embedded
//! TABLEKIT_BLOB_MIB=50 cargo run --release --example blob_transfer
//! ```
//!
//! The size in MiB is the first argument, else `TABLEKIT_BLOB_MIB`, else 200.
//! The bytes are generated as a stream (nothing holds the whole blob) and the
//! download is checked as it arrives. With no connection string it runs on the
//! embedded store, which keeps the blob itself in memory (its staged blocks and
//! then the committed blob): there the budget is 50 MiB plus twice the blob's
//! size, and the bounded-memory figure is only meaningful over HTTP.

use std::time::Instant;

use bytes::Bytes;
use futures::{stream, StreamExt as _, TryStreamExt};
use tablekit::{storage::StorageKind, Storage};

const CHUNK: usize = 256 * 1024;

/// The client's memory budget, whatever the blob's size (the issue's bound).
const BUDGET_MIB: f64 = 50.0;

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The byte at `i`: a pattern cheap to generate and to check.
fn byte(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

#[tokio::main]
async fn main() -> tablekit::Result<()> {
    let arg = std::env::args().nth(1);
    let mib: u64 = match arg.or_else(|| std::env::var("TABLEKIT_BLOB_MIB").ok()) {
        Some(v) => match v.parse() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("blob_transfer: the size must be a whole number of MiB, got {v:?}");
                std::process::exit(2);
            }
        },
        None => 200,
    };
    let size = mib * 1024 * 1024;
    // The account of TABLEKIT_CONNECTION_STRING, else the embedded store in memory.
    let storage = Storage::from_env()?;
    let budget = match storage.kind() {
        StorageKind::Http => {
            println!("backend: the Blob service of {}", storage.description());
            BUDGET_MIB
        }
        _ => {
            println!(
                "backend: {}; it holds the blob in memory",
                storage.description()
            );
            BUDGET_MIB + 2.0 * mib as f64
        }
    };
    let blobs = storage.blobs()?;
    let container = blobs.container("transfer")?;
    container.create_container_if_not_exists().await?;
    let blob = container.blob("large.bin")?;

    let before = peak_rss_mib();
    let chunks = stream::iter((0..size).step_by(CHUNK)).map(move |start| {
        let end = (start + CHUNK as u64).min(size);
        Ok::<_, std::io::Error>(Bytes::from((start..end).map(byte).collect::<Vec<u8>>()))
    });
    let t = Instant::now();
    let written = blob.upload_stream(chunks).await?;
    let up = t.elapsed();

    let t = Instant::now();
    let mut download = blob.download().send().await?;
    let mut offset = 0u64;
    while let Some(chunk) = download.try_next().await? {
        for (i, b) in chunk.iter().enumerate() {
            assert_eq!(
                *b,
                byte(offset + i as u64),
                "byte {} differs",
                offset + i as u64
            );
        }
        offset += chunk.len() as u64;
    }
    let down = t.elapsed();
    assert_eq!(offset, size, "the download is the whole blob");
    blob.delete(written.etag()).await?;

    let mb_s = |d: std::time::Duration| mib as f64 / d.as_secs_f64();
    println!(
        "{mib} MiB up in {:.2} s ({:.0} MiB/s), down and checked in {:.2} s ({:.0} MiB/s)",
        up.as_secs_f64(),
        mb_s(up),
        down.as_secs_f64(),
        mb_s(down)
    );
    match (before, peak_rss_mib()) {
        (Some(b), Some(p)) => {
            println!(
                "peak RSS: {p:.1} MiB (before the transfer: {b:.1} MiB; budget {budget:.0} MiB)"
            );
            if p > budget {
                eprintln!("blob_transfer: peak RSS {p:.1} MiB is over the {budget:.0} MiB budget");
                std::process::exit(1);
            }
        }
        _ => println!("peak RSS: not available on this platform"),
    }
    Ok(())
}
