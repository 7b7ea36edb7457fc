//! A poisoned message is never lost, whatever its size: every message
//! `Eventual::enqueue` accepts, up to the largest (64 KiB of text, 48 KiB of
//! JSON on a Base64 queue), comes back whole from the poison queue
//! (`PoisonedMessage::whole_body`), runs again after `Eventual::requeue`,
//! and survives a worker stopped between keeping its body and deleting it
//! from the main queue.

use crate::common;
use tablekit::testing::TestEnv;

use common::Services;

use std::collections::BTreeMap;
use std::future::pending;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tablekit::error::ErrorKind;
use tablekit::queue::{MessageEncoding, QueueMessage, MAX_MESSAGE_BYTES};
use tablekit::{DynamicEntity, QueueClient, TableServiceClient};
use tablekit_patterns::eventual::{
    Event, Eventual, PoisonedMessage, Worker, WorkerBuilder, POISON_BODY_TABLE,
};
use tokio::sync::mpsc;

const FAILING: &str = "always-fails";

/// The envelope `enqueue_kind(FAILING, op)` sends, its fields in order.
fn envelope(op: &str) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Envelope<'a> {
        v: u32,
        kind: &'a str,
        op: &'a str,
    }
    serde_json::to_vec(&Envelope {
        v: 1,
        kind: FAILING,
        op,
    })
    .unwrap()
}

/// `got` is `want`, byte for byte (without printing 64 KiB when not).
#[track_caller]
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    assert!(
        got == want,
        "{what}: {} bytes where {} were expected, first difference at {:?}",
        got.len(),
        want.len(),
        got.iter().zip(want).position(|(a, b)| a != b)
    );
}

/// An operation (a JSON string of quotes, backslashes, accents and emoji,
/// which the envelope and the poison entry both escape) whose envelope
/// `{"v":1,"kind":..,"op":".."}` is exactly `size` bytes.
fn operation_of_envelope_size(size: usize) -> String {
    let pattern = "say \"hi\" \\ café 😀 ";
    let per_pattern = envelope(pattern).len() - envelope("").len();
    let mut op = pattern.repeat(size.saturating_sub(envelope("").len() + 64) / per_pattern);
    while envelope(&op).len() < size {
        op.push('x');
    }
    assert_eq!(envelope(&op).len(), size);
    op
}

/// Every entry of the poison queue, received (hidden for a minute), by
/// message id.
async fn entries(poison: &QueueClient) -> BTreeMap<String, Vec<(QueueMessage, PoisonedMessage)>> {
    let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
    loop {
        let got = poison
            .receive()
            .max_messages(32)
            .visibility_timeout(Duration::from_secs(60))
            .await
            .unwrap();
        if got.is_empty() {
            return out;
        }
        for m in got {
            let p: PoisonedMessage = m.json().unwrap();
            out.entry(p.message_id.clone()).or_default().push((m, p));
        }
    }
}

/// A worker on which every `FAILING` operation fails, poisoned on its first
/// receive.
fn failing_worker(s: &Services, jobs: &QueueClient, poison: &QueueClient) -> WorkerBuilder {
    Worker::builder(jobs.clone(), s.tables.clone())
        .handle(FAILING, |_: String, _| async {
            Err("this operation always fails".into())
        })
        .poison_queue(poison.clone())
        .max_dequeue_count(1)
        .concurrency(8)
        .visibility_timeout(s.visibility)
}

/// The entry of a message as poisoned: carried whole when it fits a queue
/// message (up to 30 KiB of these operations, once escaped in the entry),
/// else a preview and the table with the whole.
#[track_caller]
fn assert_entry(p: &PoisonedMessage, original: &[u8], table: &str) {
    let original_text = std::str::from_utf8(original).unwrap();
    assert!(p.error.contains("always fails"), "{}", p.error);
    if original.len() <= 30 * 1024 {
        assert_eq!(p.body_table, None);
        assert!(!p.body_truncated);
        assert!(p.body == original_text, "whole in the entry");
    } else {
        assert_eq!(p.body_table.as_deref(), Some(table));
        assert!(p.body_truncated);
        assert!(
            !p.body.is_empty() && original_text.starts_with(&p.body),
            "a preview"
        );
    }
}

/// The largest message `enqueue` accepts (64 KiB of text: one byte more is
/// refused), two of them, one of 30 KiB (which the entry still carries
/// whole, and which used to be cut at 24 KiB) and two small ones are
/// poisoned at once. Each entry gives back the message whole, requeued
/// they run again with their operations intact, and the kept bodies are
/// deleted after.
async fn poisoned_messages_up_to_the_largest_enqueue_accepts_come_back_whole(env: TestEnv) {
    let s = Services::of(&env);
    let (jobs, poison) = common::fresh_queues(&s.queues, "poison-size-").await;
    let eventual = Eventual::new(jobs.clone());
    let too_large = operation_of_envelope_size(MAX_MESSAGE_BYTES + 1);
    let err = eventual
        .enqueue_kind(FAILING, &too_large)
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");

    let sizes = [MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES, 30 * 1024, 200, 64];
    let mut sent = BTreeMap::new();
    for size in sizes {
        let op = operation_of_envelope_size(size);
        let message = eventual.enqueue_kind(FAILING, &op).await.unwrap();
        sent.insert(message.id().to_owned(), op);
    }
    let worker = failing_worker(&s, &jobs, &poison).build().unwrap();
    let report = worker.drain().await.unwrap();
    assert_eq!(report.poisoned, sizes.len() as u64, "{report:?}");
    assert_eq!(jobs.approximate_message_count().await.unwrap(), 0);

    let entries = entries(&poison).await;
    assert_eq!(
        entries.keys().collect::<Vec<_>>(),
        sent.keys().collect::<Vec<_>>()
    );
    for (id, op) in &sent {
        let [(m, p)] = &entries[id][..] else {
            panic!("one entry for {id}: {:?}", entries[id].len());
        };
        assert_entry(p, &envelope(op), POISON_BODY_TABLE);
        assert_same(&p.whole_body(&s.tables).await.unwrap(), &envelope(op), id);
        eventual.requeue(p, &s.tables).await.unwrap();
        poison.delete_message(m).await.unwrap();
        assert_eq!(
            p.delete_kept_body(&s.tables).await.unwrap(),
            p.body_table.is_some()
        );
        if p.body_table.is_some() {
            let err = p.whole_body(&s.tables).await.unwrap_err();
            assert!(matches!(err.kind(), ErrorKind::Decode(_)), "{err:?}");
            assert!(err.to_string().contains("there is none"), "{err}");
        }
    }

    // Sent again as they were: they run with their operations whole.
    let mut texts: Vec<String> = jobs
        .peek(32)
        .await
        .unwrap()
        .iter()
        .map(|m| m.text().unwrap().to_owned())
        .collect();
    let mut want: Vec<String> = sent
        .values()
        .map(|op| String::from_utf8(envelope(op)).unwrap())
        .collect();
    texts.sort();
    want.sort();
    assert!(texts == want, "the requeued messages are the originals");
    let ran = Arc::new(Mutex::new(Vec::new()));
    let record = ran.clone();
    let fixed = Worker::builder(jobs.clone(), s.tables.clone())
        .handle(FAILING, move |op: String, _| {
            record.lock().unwrap().push(op);
            async { Ok(()) }
        })
        .poison_queue(poison.clone())
        .concurrency(8)
        .visibility_timeout(s.visibility)
        .build()
        .unwrap();
    assert_eq!(fixed.drain().await.unwrap().succeeded, sizes.len() as u64);
    let mut ran = ran.lock().unwrap().clone();
    let mut ops: Vec<String> = sent.into_values().collect();
    ran.sort();
    ops.sort();
    assert!(ran == ops, "every operation ran whole");
    assert_eq!(poison.approximate_message_count().await.unwrap(), 0);
}

/// On queues that encode as Base64 (the older SDKs' default), the largest
/// operation `enqueue` accepts is 48 KiB of JSON, and a message that is not
/// even UTF-8 is poisoned at once: both come back byte for byte.
async fn base64_queues_keep_the_largest_and_non_utf8_messages_whole(env: TestEnv) {
    let s = Services::of(&env);
    let (jobs, poison) = common::fresh_queues(&s.queues, "poison-b64-").await;
    let (jobs, poison) = (
        jobs.with_encoding(MessageEncoding::Base64),
        poison.with_encoding(MessageEncoding::Base64),
    );
    let eventual = Eventual::new(jobs.clone());
    let largest = MAX_MESSAGE_BYTES / 4 * 3;
    let too_large = operation_of_envelope_size(largest + 1);
    assert!(eventual
        .enqueue_kind(FAILING, &too_large)
        .await
        .unwrap_err()
        .is_invalid_input());
    let op = operation_of_envelope_size(largest);
    let big = eventual.enqueue_kind(FAILING, &op).await.unwrap();
    let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    assert!(std::str::from_utf8(&bytes).is_err());
    let raw = jobs.send(&bytes).await.unwrap();

    let report = failing_worker(&s, &jobs, &poison)
        .build()
        .unwrap()
        .drain()
        .await
        .unwrap();
    assert_eq!(report.poisoned, 2, "{report:?}");
    let entries = entries(&poison).await;
    let (_, p) = &entries[big.id()][0];
    assert_entry(p, &envelope(&op), POISON_BODY_TABLE);
    assert_same(
        &p.whole_body(&s.tables).await.unwrap(),
        &envelope(&op),
        "48 KiB",
    );
    let (_, p) = &entries[raw.id()][0];
    assert!(p.error.contains("not JSON"), "{}", p.error);
    assert_eq!(
        p.body_table.as_deref(),
        Some(POISON_BODY_TABLE),
        "lossy inline"
    );
    assert_same(&p.whole_body(&s.tables).await.unwrap(), &bytes, "not UTF-8");
    eventual.requeue(p, &s.tables).await.unwrap();
    let again = jobs.peek(1).await.unwrap();
    assert_same(again[0].body(), &bytes, "requeued");
    for list in entries.values() {
        assert!(list[0].1.delete_kept_body(&s.tables).await.unwrap());
    }
}

/// A worker stopped (aborted) right after keeping the bodies of the largest
/// messages, or right after sending the entries and before deleting any
/// message from the main queue, loses nothing: a fresh worker poisons what
/// is left, and every message has an entry that gives it back whole (after
/// the second stop, two: the duplicate the module docs promise).
async fn a_worker_stopped_while_poisoning_loses_no_message(env: TestEnv) {
    let s = Services::of(&env);
    for stop_after_sending in [false, true] {
        let (jobs, poison) = common::fresh_queues(&s.queues, "poison-stop-").await;
        // A table of its own, which the worker creates when it first needs it.
        let table = common::unique_name("PoisonBodies");
        let eventual = Eventual::new(jobs.clone());
        let mut sent = BTreeMap::new();
        for size in [MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES, 100, 100] {
            let op = operation_of_envelope_size(size);
            let message = eventual.enqueue_kind(FAILING, &op).await.unwrap();
            sent.insert(message.id().to_owned(), op);
        }
        let (reached, mut held) = mpsc::unbounded_channel::<String>();
        let worker = failing_worker(&s, &jobs, &poison)
            .poison_body_table(&table)
            .step_hook(move |event| {
                let reached = reached.clone();
                async move {
                    let stop = match event {
                        Event::PoisonBodyKept { message_id, .. } if !stop_after_sending => {
                            Some(message_id)
                        }
                        Event::PoisonEntrySent { message_id } if stop_after_sending => {
                            Some(message_id)
                        }
                        _ => None,
                    };
                    if let Some(id) = stop {
                        reached.send(id).unwrap();
                        pending::<()>().await; // held here until aborted
                    }
                    Ok(())
                }
            })
            .build()
            .unwrap();
        let task = tokio::spawn(async move { worker.run_once().await });
        // Only the two large bodies need keeping; every entry is sent.
        let expect = if stop_after_sending { 4 } else { 2 };
        let mut stopped = Vec::new();
        while stopped.len() < expect {
            stopped.push(held.recv().await.unwrap());
        }
        // The small ones, which go on, are poisoned and deleted first.
        while jobs.approximate_message_count().await.unwrap() > expect as u64 {
            tokio::task::yield_now().await;
        }
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        let kept = s.tables.table::<DynamicEntity>(&table).unwrap();
        assert_eq!(kept.query().fetch_all().await.unwrap().len(), 2, "kept");

        match &s.clock {
            Some(clock) => clock.advance(s.visibility + Duration::from_secs(1)),
            None => tokio::time::sleep(s.visibility + Duration::from_millis(700)).await,
        }
        let fresh = failing_worker(&s, &jobs, &poison)
            .poison_body_table(&table)
            .build()
            .unwrap();
        let report = fresh.drain().await.unwrap();
        assert_eq!(report.poisoned, expect as u64, "{report:?}");
        assert_eq!(jobs.approximate_message_count().await.unwrap(), 0);

        let entries = entries(&poison).await;
        assert_eq!(
            entries.keys().collect::<Vec<_>>(),
            sent.keys().collect::<Vec<_>>()
        );
        for (id, op) in &sent {
            let copies = if stopped.contains(id) && stop_after_sending {
                2
            } else {
                1
            };
            assert_eq!(entries[id].len(), copies, "entries of {id}");
            for (_, p) in &entries[id] {
                if p.dequeue_count == 1 {
                    assert_entry(p, &envelope(op), &table);
                }
                assert_same(&p.whole_body(&s.tables).await.unwrap(), &envelope(op), id);
            }
        }
        kept.delete_table().await.unwrap();
    }
}

#[test]
fn a_poison_body_table_name_the_service_refuses_is_refused_at_build() {
    let s = common::embedded_services();
    let jobs = s.queues.queue("jobs").unwrap();
    let poison = s.queues.queue("jobs-poison").unwrap();
    let err = Worker::builder(jobs, TableServiceClient::embedded())
        .handle(FAILING, |_: String, _| async { Ok(()) })
        .poison_queue(poison)
        .poison_body_table("poison-bodies")
        .build()
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
}

tablekit::testing::conformance!(
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    poisoned_messages_up_to_the_largest_enqueue_accepts_come_back_whole,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    base64_queues_keep_the_largest_and_non_utf8_messages_whole,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_worker_stopped_while_poisoning_loses_no_message,
);
