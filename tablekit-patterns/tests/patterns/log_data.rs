//! Log data in blobs (design guide §3.13) on Azurite and on the embedded
//! store: the seed's names (`queue/2014/07/31/1800/000001.log`), the window
//! 15:04–15:06, the metadata range, two writers, and the flush policies.

use crate::common;
use tablekit::testing::TestEnv;

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use common::unique_name;
use futures::TryStreamExt;
use tablekit::{clock::ManualClock, BlobServiceClient, ContainerClient};
use tablekit_patterns::log_data::{LogReader, LogWriter, END_TIME, RECORD_COUNT, START_TIME};

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
struct Entry {
    level: String,
    message: String,
}

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2014, 7, 31, h, m, s).unwrap()
}

fn entry(level: &str, message: &str) -> Entry {
    Entry {
        level: level.into(),
        message: message.into(),
    }
}

async fn fresh_container(env: &TestEnv) -> ContainerClient {
    let container = env.blobs().container(&unique_name("logs-")).unwrap();
    container.create_container().await.unwrap();
    container
}

async fn names(container: &ContainerClient) -> Vec<String> {
    let all = container.list_blobs().fetch_all().await.unwrap();
    all.iter().map(|b| b.name().to_owned()).collect()
}

fn meta(props: &tablekit::blob::BlobProperties, name: &str) -> String {
    let found = props
        .metadata()
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name));
    found.map(|(_, v)| v.clone()).unwrap_or_default()
}

async fn the_seed_window_reads_only_its_hour_and_records(env: TestEnv) {
    let logs = fresh_container(&env).await;
    let mut writer = LogWriter::new(logs.clone(), "queue")
        .unwrap()
        .max_records(3);
    let timeline = [
        (at(14, 59, 30), "Error", "before the hour"),
        (at(15, 3, 59), "Critical", "a second early"),
        (at(15, 4, 0), "Error", "disk full"),
        (at(15, 4, 30), "Info", "retrying"),
        (at(15, 5, 0), "Critical", "queue unavailable"),
        (at(15, 6, 0), "Error", "at the end"),
        (at(15, 30, 0), "Error", "later"),
        (at(16, 1, 0), "Error", "next hour"),
    ];
    for (t, level, message) in timeline {
        writer.log(t, &entry(level, message)).await.unwrap();
    }
    writer.flush().await.unwrap();
    assert_eq!(writer.pending(), 0);
    // One folder per hour; a batch of three, and a new blob when the hour changes.
    assert_eq!(
        names(&logs).await,
        [
            "queue/2014/07/31/1400/000001.log",
            "queue/2014/07/31/1500/000001.log",
            "queue/2014/07/31/1500/000002.log",
            "queue/2014/07/31/1600/000001.log",
        ]
    );
    // The first and last times of each blob are in its metadata.
    let fifteen = logs
        .list_blobs()
        .prefix("queue/2014/07/31/1500")
        .fetch_all()
        .await
        .unwrap();
    let ranges: Vec<(String, String, String)> = fifteen
        .iter()
        .map(|b| {
            (
                meta(b, START_TIME),
                meta(b, END_TIME),
                meta(b, RECORD_COUNT),
            )
        })
        .collect();
    assert_eq!(
        ranges,
        [
            (
                "2014-07-31T15:03:59Z".into(),
                "2014-07-31T15:04:30Z".into(),
                "3".into()
            ),
            (
                "2014-07-31T15:05:00Z".into(),
                "2014-07-31T15:30:00Z".into(),
                "3".into()
            ),
        ]
    );
    // The blob's lines, as written.
    let first = logs
        .blob("queue/2014/07/31/1500/000001.log")
        .unwrap()
        .download()
        .bytes()
        .await
        .unwrap();
    assert_eq!(
        std::str::from_utf8(&first).unwrap().lines().next().unwrap(),
        r#"{"time":"2014-07-31T15:03:59Z","record":{"level":"Critical","message":"a second early"}}"#
    );

    // Blobs whose records are all outside the window are skipped unread:
    // this one would not even parse, and its range is 15:10-15:20.
    logs.blob("queue/2014/07/31/1500/000099.log")
        .unwrap()
        .upload("not a log")
        .metadata(START_TIME, "2014-07-31T15:10:00Z")
        .metadata(END_TIME, "2014-07-31T15:20:00Z")
        .await
        .unwrap();
    // Folders of other hours are not listed, whatever their blobs claim.
    logs.blob("queue/2014/07/31/1600/000002.log")
        .unwrap()
        .upload("not a log either")
        .metadata(START_TIME, "2014-07-31T15:05:00Z")
        .metadata(END_TIME, "2014-07-31T15:05:00Z")
        .await
        .unwrap();

    let reader = LogReader::<Entry>::new(logs.clone(), "queue").unwrap();
    let read: Vec<String> = reader
        .blobs(at(15, 4, 0)..at(15, 6, 0))
        .await
        .unwrap()
        .iter()
        .map(|b| b.name().to_owned())
        .collect();
    assert_eq!(
        read,
        [
            "queue/2014/07/31/1500/000001.log",
            "queue/2014/07/31/1500/000002.log"
        ]
    );

    // The seed's query: the critical and error messages from 15:04 to 15:06.
    let serious: Vec<(DateTime<Utc>, String)> = reader
        .read(at(15, 4, 0)..at(15, 6, 0))
        .try_filter(|r| futures::future::ready(r.record.level != "Info"))
        .map_ok(|r| (r.time, r.record.message))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        serious,
        [
            (at(15, 4, 0), "disk full".to_owned()),
            (at(15, 5, 0), "queue unavailable".to_owned()),
        ]
    );
    // With the end included, and every level.
    let all: Vec<String> = reader
        .read(at(15, 4, 0)..=at(15, 6, 0))
        .map_ok(|r| r.record.message)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        all,
        ["disk full", "retrying", "queue unavailable", "at the end"]
    );
    // A window over three hours lists their folders and reads the bad blob
    // whose range it overlaps: a decode error naming it, not a silent skip.
    let err = reader
        .read(at(14, 59, 0)..at(16, 2, 0))
        .try_collect::<Vec<_>>()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("1500/000099.log line 1"), "{err}");
    for bad in [
        "queue/2014/07/31/1500/000099.log",
        "queue/2014/07/31/1600/000002.log",
    ] {
        logs.blob(bad)
            .unwrap()
            .delete(tablekit::IfMatch::Any)
            .await
            .unwrap();
    }
    let across: Vec<String> = reader
        .read(at(14, 59, 0)..at(16, 2, 0))
        .map_ok(|r| r.record.message)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(across.len(), 8);
    assert_eq!(across.first().map(String::as_str), Some("before the hour"));
    assert_eq!(across.last().map(String::as_str), Some("next hour"));
}

async fn two_writers_never_overwrite_each_other(env: TestEnv) {
    let logs = fresh_container(&env).await;
    let mut a = LogWriter::new(logs.clone(), "queue").unwrap();
    let mut b = LogWriter::new(logs.clone(), "queue").unwrap();
    let t = at(18, 0, 0);
    a.log(t, &entry("Info", "a1")).await.unwrap();
    let a1 = a.flush().await.unwrap().unwrap();
    b.log(t, &entry("Info", "b1")).await.unwrap();
    let b1 = b.flush().await.unwrap().unwrap();
    // a expects 000002 next, but b took it: a's upload is refused, and a
    // takes the next free number.
    a.log(t, &entry("Info", "a2")).await.unwrap();
    let a2 = a.flush().await.unwrap().unwrap();
    assert_eq!(
        [a1.name(), b1.name(), a2.name()],
        [
            "queue/2014/07/31/1800/000001.log",
            "queue/2014/07/31/1800/000002.log",
            "queue/2014/07/31/1800/000003.log",
        ]
    );
    let reader = LogReader::<Entry>::new(logs, "queue").unwrap();
    let messages: Vec<String> = reader
        .read(at(18, 0, 0)..at(19, 0, 0))
        .map_ok(|r| r.record.message)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        messages,
        ["a1", "b1", "a2"],
        "same instant: in the order written"
    );
}

async fn batches_flush_by_count_bytes_and_on_demand(env: TestEnv) {
    let logs = fresh_container(&env).await;
    // Every record as it comes: the reliable end.
    let mut each = LogWriter::new(logs.clone(), "each").unwrap().max_records(1);
    for s in 0..3 {
        let written = each.log(at(18, 0, s), &entry("Info", "x")).await.unwrap();
        assert_eq!(written.len(), 1);
        assert_eq!(each.pending(), 0);
    }
    assert_eq!(
        logs.list_blobs()
            .prefix("each/")
            .fetch_all()
            .await
            .unwrap()
            .len(),
        3
    );

    // By bytes: a line is about 70 bytes, so 100 bytes is two lines.
    let mut bytes = LogWriter::new(logs.clone(), "bytes")
        .unwrap()
        .max_bytes(100);
    assert!(bytes
        .log(at(18, 0, 0), &entry("Info", "one"))
        .await
        .unwrap()
        .is_empty());
    let written = bytes
        .log(at(18, 0, 1), &entry("Info", "two"))
        .await
        .unwrap();
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].records(), 2);

    // Only on demand: nothing is written before the flush.
    let mut manual = LogWriter::new(logs.clone(), "manual").unwrap();
    for s in 0..10 {
        manual.log(at(18, 0, s), &entry("Info", "m")).await.unwrap();
    }
    assert!(logs
        .list_blobs()
        .prefix("manual/")
        .fetch_all()
        .await
        .unwrap()
        .is_empty());
    assert_eq!(manual.pending(), 10);
    let blob = manual.flush().await.unwrap().unwrap();
    assert_eq!(
        (blob.records(), blob.start(), blob.end()),
        (10, at(18, 0, 0), at(18, 0, 9))
    );
    assert!(
        manual.flush().await.unwrap().is_none(),
        "nothing left to write"
    );

    // Records appended out of order are written in time order.
    let mut late = LogWriter::new(logs.clone(), "late").unwrap();
    late.log(at(18, 5, 0), &entry("Info", "second"))
        .await
        .unwrap();
    late.log(at(18, 1, 0), &entry("Info", "first"))
        .await
        .unwrap();
    let blob = late.flush().await.unwrap().unwrap();
    assert_eq!((blob.start(), blob.end()), (at(18, 1, 0), at(18, 5, 0)));
    let reader = LogReader::<Entry>::new(logs, "late").unwrap();
    let order: Vec<String> = reader
        .read(at(18, 0, 0)..at(19, 0, 0))
        .map_ok(|r| r.record.message)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(order, ["first", "second"]);
}

/// `flush_every`: `log` writes the batch once its oldest record has waited
/// the interval on the writer's clock, `flush_if_due` does so when idle, and
/// neither makes a request before (no sleeping: a manual clock).
async fn a_timed_flush_writes_the_batch_once_its_oldest_record_is_due(env: TestEnv) {
    let logs = fresh_container(&env).await;
    let clock = ManualClock::starting_now();
    let mut writer = LogWriter::new(logs.clone(), "queue")
        .unwrap()
        .flush_every(Duration::from_secs(10))
        .with_clock(clock.clone());
    let count =
        |logs: ContainerClient| async move { logs.list_blobs().fetch_all().await.unwrap().len() };

    assert!(writer
        .log(at(15, 4, 0), &entry("Error", "a"))
        .await
        .unwrap()
        .is_empty());
    clock.advance(Duration::from_secs(6));
    // The second record is 6 s after the first was buffered: still buffered.
    assert!(writer
        .log(at(15, 4, 1), &entry("Info", "b"))
        .await
        .unwrap()
        .is_empty());
    assert!(!writer.is_due());
    assert!(writer.flush_if_due().await.unwrap().is_none());
    assert_eq!((writer.pending(), count(logs.clone()).await), (2, 0));

    // Idle: 10 s after the first record, flush_if_due writes both.
    clock.advance(Duration::from_secs(4));
    assert!(writer.is_due());
    let blob = writer.flush_if_due().await.unwrap().unwrap();
    assert_eq!(blob.records(), 2);
    assert_eq!(writer.pending(), 0);
    assert!(!writer.is_due(), "an empty batch is never due");
    assert!(writer.flush_if_due().await.unwrap().is_none());

    // The clock of the new batch starts with its first record: log itself
    // writes the batch, with the record that found it due.
    clock.advance(Duration::from_secs(60));
    assert!(writer
        .log(at(15, 5, 0), &entry("Info", "c"))
        .await
        .unwrap()
        .is_empty());
    clock.advance(Duration::from_secs(11));
    let written = writer
        .log(at(15, 5, 30), &entry("Critical", "d"))
        .await
        .unwrap();
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].records(), 2);
    assert_eq!(count(logs.clone()).await, 2);

    // Without flush_every, time alone writes nothing.
    let mut untimed = LogWriter::new(logs.clone(), "other")
        .unwrap()
        .with_clock(clock.clone());
    untimed
        .log(at(15, 6, 0), &entry("Info", "e"))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(24 * 3600));
    assert!(!untimed.is_due());
    assert!(untimed.flush_if_due().await.unwrap().is_none());
    untimed
        .log(at(15, 6, 1), &entry("Info", "f"))
        .await
        .unwrap();
    assert_eq!(untimed.pending(), 2);

    let reader = LogReader::<Entry>::new(logs, "queue").unwrap();
    let messages: Vec<String> = reader
        .read(at(15, 4, 0)..at(15, 6, 0))
        .map_ok(|r| r.record.message)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(messages, ["a", "b", "c", "d"]);
}

tablekit::testing::conformance!(
    a_timed_flush_writes_the_batch_once_its_oldest_record_is_due,
    the_seed_window_reads_only_its_hour_and_records,
    two_writers_never_overwrite_each_other,
    batches_flush_by_count_bytes_and_on_demand,
);

#[test]
fn bad_input_is_refused_before_any_request() {
    let logs = BlobServiceClient::embedded().container("logs").unwrap();
    assert!(LogWriter::<Entry>::new(logs.clone(), "queue/x")
        .unwrap_err()
        .is_invalid_input());
    assert!(LogReader::<Entry>::new(logs.clone(), "")
        .unwrap_err()
        .is_invalid_input());
    let reader = LogReader::<Entry>::new(logs.clone(), "queue").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // The container does not exist: an unbounded window fails before asking.
    let err = rt
        .block_on(reader.read(at(15, 4, 0)..).try_collect::<Vec<_>>())
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err:?}");
    // A full batch must be flushed before append takes more.
    let mut w = LogWriter::<Entry>::new(logs, "queue")
        .unwrap()
        .max_records(1);
    w.append(at(15, 0, 0), &entry("Info", "1")).unwrap();
    assert!(w
        .append(at(15, 0, 1), &entry("Info", "2"))
        .unwrap_err()
        .is_invalid_input());
    assert_eq!(w.pending(), 1);
}
