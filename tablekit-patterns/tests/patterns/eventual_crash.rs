//! Eventually consistent transactions through a queue (§3.3): the archive of
//! employees from `Current` to `Archive` by a `Worker`, stopped at each step
//! boundary in turn (task aborted, or the step failing), raced by a second
//! worker, killed with SIGKILL on the file-backed store, and failing for
//! good. After recovery there is exactly one copy of each entity, in Archive,
//! none in Current, no message left in the queue and none in the poison queue
//! unless its operation could never succeed.
//!
//! Every case runs on Azurite (visibility timeout 2 s, waited for in real
//! time) and on the embedded store (a `ManualClock` moved past the timeout).

use crate::common;
use tablekit::testing::TestEnv;

use common::Services;

use std::future::pending;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tablekit::{
    clock::ManualClock, DynamicEntity, ETag, QueueClient, QueueServiceClient, TableClient,
    TableEntity, TableServiceClient, UpdateMode,
};
use tablekit_patterns::eventual::{
    Archive, Event, Eventual, PoisonedMessage, Worker, WorkerBuilder, ARCHIVE_KIND,
};
use tokio::sync::{mpsc, Notify};

#[derive(TableEntity, Debug, Clone)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    name: String,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

fn employee(id: u32) -> Employee {
    Employee {
        department: "Sales".into(),
        employee_id: id,
        name: format!("employee {id}"),
        etag: None,
    }
}

/// The guide's employee #456 and 19 more.
fn ids() -> Vec<u32> {
    (0..20)
        .map(|i| if i == 0 { 456 } else { 1000 + i })
        .collect()
}

/// One archive run: fresh tables and queues.
struct Env {
    s: Services,
    current: TableClient<Employee>,
    archive: TableClient<Employee>,
    jobs: QueueClient,
    poison: QueueClient,
}

fn queue_name(prefix: &str) -> String {
    common::unique_name(prefix).to_lowercase()
}

impl Env {
    async fn new(s: &Services) -> Env {
        let current = common::fresh_table::<Employee>(&s.tables, "Current").await;
        let archive = common::fresh_table::<Employee>(&s.tables, "Archive").await;
        let jobs = s.queues.queue(&queue_name("archive-")).unwrap();
        let poison = s.queues.queue(&format!("{}-poison", jobs.name())).unwrap();
        jobs.create_queue().await.unwrap();
        poison.create_queue().await.unwrap();
        Env {
            s: s.clone(),
            current,
            archive,
            jobs,
            poison,
        }
    }

    /// Puts the employees in Current and one archive message each on the queue.
    async fn seed(&self, ids: &[u32]) {
        let eventual = Eventual::new(self.jobs.clone());
        for &id in ids {
            self.current.insert(&employee(id)).await.unwrap();
            let op = Archive::<Employee>::new(
                self.current.name(),
                self.archive.name(),
                ("Sales", format!("{id:06}")),
            )
            .unwrap();
            eventual.enqueue(&op).await.unwrap();
        }
    }

    fn worker(&self) -> WorkerBuilder {
        Worker::builder(self.jobs.clone(), self.s.tables.clone())
            .operation::<Archive<Employee>>()
            .poison_queue(self.poison.clone())
            .visibility_timeout(self.s.visibility)
            .concurrency(20)
    }

    /// Lets every hidden message become visible again.
    async fn pass_visibility_timeout(&self) {
        match &self.s.clock {
            Some(clock) => clock.advance(self.s.visibility + Duration::from_secs(1)),
            None => tokio::time::sleep(self.s.visibility + Duration::from_millis(700)).await,
        }
    }

    async fn ids_in(&self, table: &TableClient<Employee>) -> Vec<u32> {
        let mut ids: Vec<u32> = table
            .query()
            .fetch_all()
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.employee_id)
            .collect();
        ids.sort();
        ids
    }

    /// Exactly one copy of each, in Archive; none in Current; both queues empty.
    async fn assert_archived(&self, ids: &[u32]) {
        let mut want = ids.to_vec();
        want.sort();
        assert_eq!(self.ids_in(&self.archive).await, want, "Archive");
        assert_eq!(
            self.ids_in(&self.current).await,
            Vec::<u32>::new(),
            "Current"
        );
        assert_eq!(
            self.jobs.approximate_message_count().await.unwrap(),
            0,
            "queue"
        );
        assert_eq!(
            self.poison.approximate_message_count().await.unwrap(),
            0,
            "poison"
        );
    }
}

#[tokio::test]
async fn an_archive_message_is_the_versioned_envelope() {
    let s = common::embedded_services();
    let jobs = s.queues.queue("jobs").unwrap();
    jobs.create_queue().await.unwrap();
    let op = Archive::<Employee>::new("Current", "Archive", ("Sales", "000456")).unwrap();
    Eventual::new(jobs.clone()).enqueue(&op).await.unwrap();
    let m = jobs.peek(1).await.unwrap().pop().unwrap();
    assert_eq!(
        m.text().unwrap(),
        r#"{"v":1,"kind":"tablekit.archive","op":{"from":"Current","to":"Archive","partition_key":"Sales","row_key":"000456"}}"#
    );
}

tablekit::testing::conformance!(
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    the_archive_of_twenty_employees_moves_each_once,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_worker_stopped_at_each_step_boundary_is_recovered_by_a_fresh_one,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    two_workers_racing_on_the_same_messages_leave_one_copy_each,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_entity_changed_after_the_read_is_archived_in_its_new_version,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_archive_that_can_never_succeed_lands_in_poison_with_its_error,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    unreadable_messages_go_to_poison_at_once,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_message_whose_workers_kept_dying_is_poisoned_without_running,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    the_heartbeat_keeps_a_long_operation_hidden,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    run_stops_on_shutdown_after_finishing_what_it_holds,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_operation_waits_out_a_worker_outage_of_eight_days,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_operation_with_a_time_to_live_of_one_day_is_gone_after_two,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_message_from_a_newer_client_waits_for_a_worker_that_knows_it,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_unknown_kind_is_poisoned_at_the_dequeue_limit,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_operation_enqueued_as_base64_by_an_older_client_still_runs,
);

/// A message enqueued before the queue client's default encoding became the
/// text as is (Base64 then) runs after the upgrade: the worker, reading as
/// text, finds the envelope in the text's Base64 reading.
async fn an_operation_enqueued_as_base64_by_an_older_client_still_runs(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.current.insert(&employee(456)).await.unwrap();
    let op = Archive::<Employee>::new(env.current.name(), env.archive.name(), ("Sales", "000456"))
        .unwrap();
    let older = env
        .jobs
        .clone()
        .with_encoding(tablekit::queue::MessageEncoding::Base64);
    Eventual::new(older).enqueue(&op).await.unwrap();
    let peeked = env.jobs.peek(1).await.unwrap().pop().unwrap();
    assert!(
        !peeked.text().unwrap().starts_with('{'),
        "Base64 on the wire"
    );
    let report = env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(
        (report.succeeded, report.failed, report.poisoned),
        (1, 0, 0),
        "{report:?}"
    );
    env.assert_archived(&[456]).await;
}

async fn the_archive_of_twenty_employees_moves_each_once(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.seed(&ids()).await;
    let report = env
        .worker()
        .concurrency(4)
        .build()
        .unwrap()
        .drain()
        .await
        .unwrap();
    assert_eq!(
        (report.succeeded, report.failed, report.poisoned),
        (20, 0, 0)
    );
    env.assert_archived(&ids()).await;
}

/// The boundaries of an archive: 1 after the read from Current, 2 after the
/// insert-or-replace into Archive, 3 after the delete from Current (the
/// message not yet deleted). For each, every worker of a first run stops
/// there, either because its task is aborted (a crash) or because the step
/// fails; a fresh worker then finishes the work. (All six are stopped first,
/// each in its own tables and queue, then the visibility timeout passes once
/// for all of them, then each is recovered.)
async fn a_worker_stopped_at_each_step_boundary_is_recovered_by_a_fresh_one(env: TestEnv) {
    let s = Services::of(&env);
    let ids = ids();
    let n = ids.len();
    let mut stopped = Vec::new();
    for boundary in 1..=3usize {
        for crash in [true, false] {
            let env = Env::new(&s).await;
            env.seed(&ids).await;
            let (reached, mut at_boundary) = mpsc::unbounded_channel::<String>();
            let names = Arc::new(std::sync::Mutex::new(Vec::new()));
            let seen = names.clone();
            let worker = env
                .worker()
                .step_hook(move |event| {
                    let reached = reached.clone();
                    let seen = seen.clone();
                    async move {
                        if let Event::Step { step, name, .. } = event {
                            seen.lock().unwrap().push((step, name.clone()));
                            if step == boundary {
                                reached.send(name).unwrap();
                                if crash {
                                    pending::<()>().await; // held here until aborted
                                }
                                return Err("stopped at the boundary".into());
                            }
                        }
                        Ok(())
                    }
                })
                .build()
                .unwrap();
            if crash {
                let task = tokio::spawn(async move { worker.run(pending()).await });
                for _ in 0..n {
                    at_boundary.recv().await.unwrap();
                }
                task.abort();
                assert!(task.await.unwrap_err().is_cancelled());
            } else {
                let report = worker.drain().await.unwrap();
                // Every message failed at the boundary, none went further. On
                // a loaded machine a drain can outlast Azurite's 2 s retry
                // delay and receive a failed message again (failing it at the
                // same boundary): at least n failures, not exactly n.
                assert_eq!(report.succeeded, 0, "boundary {boundary}: {report:?}");
                assert!(report.failed >= n as u64, "boundary {boundary}: {report:?}");
            }
            let names = names.lock().unwrap().clone();
            let expected = [
                format!("read {}", env.current.name()),
                format!("insert_or_replace {}", env.archive.name()),
                format!("delete_if_unchanged {}", env.current.name()),
            ];
            assert!(names
                .iter()
                .all(|(step, name)| *step <= boundary && *name == expected[step - 1]));

            // What a reader sees between the steps: after the copy and before
            // the delete, the employees are in both tables.
            let (in_current, in_archive) = match boundary {
                1 => (n, 0),
                2 => (n, n),
                _ => (0, n),
            };
            assert_eq!(env.ids_in(&env.current).await.len(), in_current);
            assert_eq!(env.ids_in(&env.archive).await.len(), in_archive);
            assert_eq!(
                env.jobs.approximate_message_count().await.unwrap(),
                n as u64
            );

            stopped.push((boundary, crash, env));
        }
    }

    stopped[0].2.pass_visibility_timeout().await;
    for (boundary, crash, env) in stopped {
        let report = env.worker().build().unwrap().drain().await.unwrap();
        assert_eq!(
            (report.succeeded, report.failed, report.poisoned),
            (n as u64, 0, 0),
            "boundary {boundary}, crash {crash}"
        );
        env.assert_archived(&ids).await;
    }
}

/// Worker A is held after step `held_at` while the message's visibility
/// lapses (its heartbeat is stopped); worker B receives the same messages and
/// archives them all; then A goes on and finds the work done.
async fn two_workers_racing_on_the_same_messages_leave_one_copy_each(env: TestEnv) {
    let s = Services::of(&env);
    let ids = ids();
    for held_at in [1usize, 2] {
        let env = Env::new(&s).await;
        env.seed(&ids).await;
        let release = Arc::new(Notify::new());
        let (reached, mut at_boundary) = mpsc::unbounded_channel::<()>();
        let gate = release.clone();
        let a = env
            .worker()
            .step_hook(move |event| {
                let gate = gate.clone();
                let reached = reached.clone();
                async move {
                    match event {
                        Event::Heartbeat { .. } => return Err("heartbeat lost".into()),
                        Event::Step {
                            step,
                            dequeue_count: 1,
                            ..
                        } if step == held_at => {
                            let released = gate.notified();
                            reached.send(()).unwrap();
                            released.await;
                        }
                        _ => {}
                    }
                    Ok(())
                }
            })
            .build()
            .unwrap();
        let a = tokio::spawn(async move { a.run_once().await.unwrap() });
        for _ in 0..ids.len() {
            at_boundary.recv().await.unwrap();
        }
        env.pass_visibility_timeout().await;
        let b = env.worker().build().unwrap().drain().await.unwrap();
        assert_eq!(b.succeeded, ids.len() as u64, "B did all the work");
        release.notify_waiters();
        let a = a.await.unwrap();
        assert_eq!(a.succeeded, ids.len() as u64, "A found it done");
        env.assert_archived(&ids).await;
    }
}

/// The guarded delete: someone renames the employee in Current after the
/// worker read it; the delete fails with 412 and the worker archives the new
/// version instead of the stale copy it had written.
async fn an_entity_changed_after_the_read_is_archived_in_its_new_version(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.seed(&[456]).await;
    let current = env.current.clone();
    let renamed = Arc::new(AtomicUsize::new(0));
    let count = renamed.clone();
    let worker = env
        .worker()
        .step_hook(move |event| {
            let current = current.clone();
            let count = count.clone();
            async move {
                let Event::Step { name, .. } = event else {
                    return Ok(());
                };
                if name.starts_with("insert_or_replace")
                    && count.fetch_add(1, Ordering::SeqCst) == 0
                {
                    let mut e = employee(456);
                    e.name = "Kim Akers (renamed)".into();
                    current.upsert(&e, UpdateMode::Replace).await?;
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let report = worker.drain().await.unwrap();
    assert_eq!(report.succeeded, 1);
    assert_eq!(
        renamed.load(Ordering::SeqCst),
        2,
        "copied twice: stale, then new"
    );
    let archived = env.archive.get(("Sales", "000456")).await.unwrap().unwrap();
    assert_eq!(archived.name, "Kim Akers (renamed)");
    env.assert_archived(&[456]).await;
}

const DAY: Duration = Duration::from_secs(24 * 3600);

/// "Never lost" has no expiry date: an archive enqueued before a worker
/// outage of eight days (the queue's default time to live is seven) is still
/// there when a worker comes back, and is applied. On Azurite, where time
/// cannot be moved, the message says it never expires (the service's
/// 9999-12-31), as sent and as received.
async fn an_operation_waits_out_a_worker_outage_of_eight_days(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.current.insert(&employee(456)).await.unwrap();
    let op = Archive::<Employee>::new(env.current.name(), env.archive.name(), ("Sales", "000456"))
        .unwrap();
    let sent = Eventual::new(env.jobs.clone()).enqueue(&op).await.unwrap();
    assert_eq!(sent.expires_on(), None, "sent to never expire");
    let peeked = env.jobs.peek(1).await.unwrap().pop().unwrap();
    assert_eq!(peeked.expires_on(), None, "stored to never expire");
    if let Some(clock) = &s.clock {
        clock.advance(8 * DAY);
    }
    let report = env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(
        (report.succeeded, report.failed, report.poisoned),
        (1, 0, 0)
    );
    env.assert_archived(&[456]).await;
}

/// A time to live is a choice, with its price: the operation is dropped
/// unrun once it has passed (on Azurite: the expiry the service stored).
async fn an_operation_with_a_time_to_live_of_one_day_is_gone_after_two(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.current.insert(&employee(456)).await.unwrap();
    let op = Archive::<Employee>::new(env.current.name(), env.archive.name(), ("Sales", "000456"))
        .unwrap();
    let eventual = Eventual::new(env.jobs.clone()).with_time_to_live(DAY);
    assert_eq!(eventual.time_to_live(), Some(DAY));
    let sent = eventual.enqueue(&op).await.unwrap();
    let day = chrono::Duration::from_std(DAY).unwrap();
    assert_eq!(sent.expires_on(), Some(sent.inserted_on() + day));
    let Some(clock) = &s.clock else {
        let peeked = env.jobs.peek(1).await.unwrap().pop().unwrap();
        assert_eq!(peeked.expires_on(), Some(sent.inserted_on() + day));
        return;
    };
    clock.advance(2 * DAY);
    let report = env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(report.total(), 0, "nothing to receive");
    assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 0);
    assert_eq!(env.poison.approximate_message_count().await.unwrap(), 0);
    assert_eq!(env.ids_in(&env.current).await, [456], "never archived");
    assert_eq!(env.ids_in(&env.archive).await, Vec::<u32>::new());
}

/// The kind a newer client sends and only a newer worker runs.
const COUNT_KIND: &str = "test.count";

/// What a rolling deployment does: a newer client sends a kind the old
/// workers do not know, and a message in a newer envelope version. An old
/// worker receives both and poisons neither: it warns and hides them for
/// its retry delay. Once that has passed, a newer worker (one that knows
/// the kind) runs the first; the second, which no worker here reads, stays
/// as it was sent.
async fn a_message_from_a_newer_client_waits_for_a_worker_that_knows_it(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    let counted = Eventual::new(env.jobs.clone())
        .enqueue_kind(COUNT_KIND, &serde_json::json!({"n": 1}))
        .await
        .unwrap();
    let v2_body = r#"{"v":2,"kind":"tablekit.archive","op":{},"trace":"t-1"}"#;
    env.jobs.send(v2_body).await.unwrap();

    let old = env.worker().build().unwrap();
    let report = old.drain().await.unwrap();
    assert_eq!(report.poisoned, 0, "{report:?}");
    assert_eq!(report.succeeded, 0, "{report:?}");
    assert_eq!(env.poison.approximate_message_count().await.unwrap(), 0);
    assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 2);
    assert!(
        env.jobs.peek(32).await.unwrap().is_empty(),
        "both hidden for the retry delay"
    );

    env.pass_visibility_timeout().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let seen = runs.clone();
    let newer = env
        .worker()
        .handle(COUNT_KIND, move |op: serde_json::Value, _ctx| {
            let seen = seen.clone();
            async move {
                assert_eq!(op["n"], 1);
                seen.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .build()
        .unwrap();
    let report = newer.drain().await.unwrap();
    assert_eq!((report.succeeded, report.poisoned), (1, 0), "{report:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(env.poison.approximate_message_count().await.unwrap(), 0);

    env.pass_visibility_timeout().await;
    let left = env.jobs.peek(32).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_ne!(left[0].id(), counted.id());
    assert_eq!(left[0].text().unwrap(), v2_body, "not rewritten");
    assert_eq!(left[0].dequeue_count(), 2);
}

async fn poisoned(poison: &QueueClient) -> Vec<PoisonedMessage> {
    let mut out = Vec::new();
    for m in poison.peek(32).await.unwrap() {
        out.push(m.json::<PoisonedMessage>().unwrap());
    }
    out
}

/// The archive table does not exist: every attempt fails the same way; after
/// the third the message is in the poison queue with that error, and the
/// entity is still in Current.
async fn an_archive_that_can_never_succeed_lands_in_poison_with_its_error(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.current.insert(&employee(456)).await.unwrap();
    let missing = common::unique_name("Missing");
    let op = Archive::<Employee>::new(env.current.name(), &missing, ("Sales", "000456")).unwrap();
    let sent = Eventual::new(env.jobs.clone()).enqueue(&op).await.unwrap();
    let worker = env.worker().max_dequeue_count(3).build().unwrap();
    let mut reports = Vec::new();
    for _ in 0..3 {
        let r = worker.drain().await.unwrap();
        reports.push((r.succeeded, r.failed, r.poisoned));
        env.pass_visibility_timeout().await;
    }
    assert_eq!(reports, [(0, 1, 0), (0, 1, 0), (0, 0, 1)]);
    assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 0);
    let got = poisoned(&env.poison).await;
    assert_eq!(got.len(), 1);
    let p = &got[0];
    assert_eq!(p.message_id, sent.id());
    assert_eq!(p.queue, env.jobs.name());
    assert_eq!(p.dequeue_count, 3);
    assert!(
        p.error.contains("not found") || p.error.contains("TableNotFound"),
        "{}",
        p.error
    );
    // The poisoned body is the message as last stored: the operation and its last error.
    let body: serde_json::Value = serde_json::from_str(&p.body).unwrap();
    assert_eq!(body["kind"], ARCHIVE_KIND);
    assert_eq!(body["op"]["to"], missing.as_str());
    assert!(body["last_error"].is_string());
    assert_eq!(env.ids_in(&env.current).await, [456]);
    assert_eq!(env.ids_in(&env.archive).await, Vec::<u32>::new());
}

/// What no worker can ever read goes to the poison queue on its first
/// receive; a newer client's kind or version too, with
/// `poison_unknown_at_once`.
async fn unreadable_messages_go_to_poison_at_once(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.jobs.send("archive employee 456").await.unwrap();
    env.jobs
        .send(r#"{"kind":"tablekit.archive","op":{}}"#)
        .await
        .unwrap();
    env.jobs
        .send(r#"{"v":1,"kind":"tablekit.archive","op":{"from":"Current"}}"#)
        .await
        .unwrap();
    let worker = env.worker().max_dequeue_count(1).build().unwrap();
    let report = worker.drain().await.unwrap();
    assert_eq!(report.poisoned, 3, "{report:?}");
    let errors: Vec<String> = poisoned(&env.poison)
        .await
        .into_iter()
        .map(|p| p.error)
        .collect();
    assert_eq!(errors.len(), 3);
    assert!(errors.iter().any(|e| e.contains("not JSON")), "{errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("no format version")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("does not read") && e.contains("missing field")),
        "{errors:?}"
    );
    assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 0);

    // The option: a kind or a version this worker does not know, at once too.
    env.poison.clear().await.unwrap();
    env.jobs
        .send(r#"{"v":2,"kind":"tablekit.archive","op":{}}"#)
        .await
        .unwrap();
    env.jobs
        .send(r#"{"v":1,"kind":"fire-everyone","op":{}}"#)
        .await
        .unwrap();
    let strict = env.worker().poison_unknown_at_once().build().unwrap();
    let report = strict.drain().await.unwrap();
    assert_eq!((report.poisoned, report.deferred), (2, 0), "{report:?}");
    let errors: Vec<String> = poisoned(&env.poison)
        .await
        .into_iter()
        .map(|p| p.error)
        .collect();
    assert!(
        errors.iter().any(|e| e.contains("version 2 is newer")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("unknown operation kind \"fire-everyone\"")),
        "{errors:?}"
    );
    assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 0);
}

/// A kind no worker ever comes to know is poisoned once it has been
/// received the dequeue limit's number of times, and not before.
async fn an_unknown_kind_is_poisoned_at_the_dequeue_limit(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    Eventual::new(env.jobs.clone())
        .enqueue_kind("fire-everyone", &())
        .await
        .unwrap();
    let worker = env.worker().max_dequeue_count(3).build().unwrap();
    let mut reports = Vec::new();
    for _ in 0..3 {
        let r = worker.drain().await.unwrap();
        reports.push((r.deferred, r.poisoned));
        env.pass_visibility_timeout().await;
    }
    assert_eq!(reports, [(1, 0), (1, 0), (0, 1)]);
    let p = poisoned(&env.poison).await.pop().unwrap();
    assert_eq!(p.dequeue_count, 3);
    assert!(
        p.error.contains("unknown operation kind \"fire-everyone\"")
            && p.error.contains("received 3 times (the limit is 3)"),
        "{}",
        p.error
    );
    assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 0);
}

/// Received three times by workers that died before recording anything: a
/// worker allowing two receives moves it to poison without running it.
async fn a_message_whose_workers_kept_dying_is_poisoned_without_running(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.seed(&[456]).await;
    for _ in 0..2 {
        let got = env
            .jobs
            .receive()
            .visibility_timeout(s.visibility)
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        env.pass_visibility_timeout().await;
    }
    let ran = Arc::new(AtomicUsize::new(0));
    let steps = ran.clone();
    let worker = env
        .worker()
        .max_dequeue_count(2)
        .step_hook(move |event| {
            // The steps of a run; the move to the poison queue has its own events.
            if let Event::Step { .. } = event {
                steps.fetch_add(1, Ordering::SeqCst);
            }
            async { Ok(()) }
        })
        .build()
        .unwrap();
    let report = worker.drain().await.unwrap();
    assert_eq!(report.poisoned, 1);
    assert_eq!(ran.load(Ordering::SeqCst), 0, "never ran");
    let p = poisoned(&env.poison).await.pop().unwrap();
    assert_eq!(p.dequeue_count, 3);
    assert!(
        p.error.contains("received 3 times, over the limit of 2"),
        "{}",
        p.error
    );
    assert!(p.error.contains("none recorded"), "{}", p.error);
    assert_eq!(env.ids_in(&env.current).await, [456]);
}

/// An operation held for longer than two visibility timeouts stays hidden
/// from other receivers because the worker renews it, and is deleted with the
/// pop receipt of the last renewal.
async fn the_heartbeat_keeps_a_long_operation_hidden(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.seed(&[456]).await;
    let release = Arc::new(Notify::new());
    let beats = Arc::new(AtomicUsize::new(0));
    let (reached, mut held) = mpsc::unbounded_channel::<()>();
    let (gate, count) = (release.clone(), beats.clone());
    let heartbeat = Duration::from_millis(100);
    let worker = env
        .worker()
        .heartbeat(heartbeat)
        .step_hook(move |event| {
            let (gate, count, reached) = (gate.clone(), count.clone(), reached.clone());
            async move {
                match event {
                    Event::Heartbeat { .. } => {
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    Event::Step { step: 1, .. } => {
                        let released = gate.notified();
                        reached.send(()).unwrap();
                        released.await;
                    }
                    _ => {}
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let task = tokio::spawn(async move { worker.run_once().await.unwrap() });
    held.recv().await.unwrap();
    let other = env.s.queues.queue(env.jobs.name()).unwrap();
    for _ in 0..3 {
        match &s.clock {
            Some(clock) => clock.advance(s.visibility * 2 / 3),
            None => tokio::time::sleep(s.visibility * 2 / 3).await,
        }
        // Two heartbeats after the time moved: the first one's renewal is done.
        let before = beats.load(Ordering::SeqCst);
        while beats.load(Ordering::SeqCst) < before + 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let got = other
            .receive()
            .visibility_timeout(Duration::from_secs(1))
            .await
            .unwrap();
        assert!(got.is_empty(), "renewed, so still hidden: {got:?}");
    }
    release.notify_waiters();
    let report = task.await.unwrap();
    assert_eq!(report.succeeded, 1);
    env.assert_archived(&[456]).await;
}

/// `run` with a shutdown signal: the operations it holds when the signal
/// comes are finished, and it returns.
async fn run_stops_on_shutdown_after_finishing_what_it_holds(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.seed(&ids()[..4]).await;
    let release = Arc::new(Notify::new());
    let (reached, mut held) = mpsc::unbounded_channel::<()>();
    let gate = release.clone();
    let worker = env
        .worker()
        .poll_backoff(Duration::from_millis(10), Duration::from_millis(50))
        .step_hook(move |event| {
            let (gate, reached) = (gate.clone(), reached.clone());
            async move {
                if let Event::Step { step: 2, .. } = event {
                    let released = gate.notified();
                    reached.send(()).unwrap();
                    released.await;
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let stop = Arc::new(Notify::new());
    let signal = stop.clone();
    let task =
        tokio::spawn(async move { worker.run(async move { signal.notified().await }).await });
    for _ in 0..4 {
        held.recv().await.unwrap();
    }
    stop.notify_one();
    // Once told to stop it receives nothing more; it still holds four.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!task.is_finished(), "it finishes what it holds first");
    release.notify_waiters();
    let report = task.await.unwrap();
    assert_eq!(
        (report.succeeded, report.failed, report.poisoned),
        (4, 0, 0)
    );
    env.assert_archived(&ids()[..4]).await;
}

// ---------------------------------------------------------------------------
// SIGKILL on the file-backed embedded store.

const KILL_VAR: &str = "TABLEKIT_EVENTUAL_KILL_CHILD";

/// Run only as the child of the SIGKILL test (`KILL_VAR` is
/// `path;current;archive;queue;boundary`): a worker over the store file that
/// prints `HELD <message id>` when an operation reaches the boundary, and
/// waits there to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_child_helper() {
    use std::io::Write;
    let Ok(spec) = std::env::var(KILL_VAR) else {
        return;
    };
    let parts: Vec<&str> = spec.split(';').collect();
    let [path, _current, _archive, queue, boundary] = parts[..] else {
        panic!("bad {KILL_VAR}: {spec}");
    };
    let boundary: usize = boundary.parse().unwrap();
    let conn = format!("UseEmbeddedStorage=true;Path={path}");
    let tables = TableServiceClient::from_connection_string(&conn).unwrap();
    let queues = QueueServiceClient::from_connection_string(&conn).unwrap();
    let worker = Worker::builder(queues.queue(queue).unwrap(), tables)
        .operation::<Archive<Employee>>()
        .poison_queue(queues.queue(&format!("{queue}-poison")).unwrap())
        .concurrency(20)
        .step_hook(move |event| async move {
            if let Event::Step {
                step, message_id, ..
            } = event
            {
                if step == boundary {
                    let mut out = std::io::stdout();
                    writeln!(out, "HELD {message_id}").unwrap();
                    out.flush().unwrap();
                    pending::<()>().await;
                }
            }
            Ok(())
        })
        .build()
        .unwrap();
    worker.run(pending()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_at_each_step_boundary_is_recovered_from_the_store_file() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let ids = ids();
    for boundary in 1..=3usize {
        let path = std::env::temp_dir().join(format!(
            "tablekit-eventual-{}.redb",
            uuid::Uuid::new_v4().simple()
        ));
        let (current, archive, queue) = ("Current", "Archive", "archive-jobs");
        {
            let tables = TableServiceClient::embedded_at(&path).unwrap();
            let queues = QueueServiceClient::embedded_at(&path).unwrap();
            let env = Env {
                s: Services {
                    tables: tables.clone(),
                    queues: queues.clone(),
                    blobs: tablekit::BlobServiceClient::embedded(), // not used
                    clock: None,
                    visibility: Duration::from_secs(30),
                },
                current: tables.table(current).unwrap(),
                archive: tables.table(archive).unwrap(),
                jobs: queues.queue(queue).unwrap(),
                poison: queues.queue(&format!("{queue}-poison")).unwrap(),
            };
            env.current.create_table().await.unwrap();
            env.archive.create_table().await.unwrap();
            env.jobs.create_queue().await.unwrap();
            env.poison.create_queue().await.unwrap();
            env.seed(&ids).await;
        }
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "eventual_crash::kill_child_helper",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                KILL_VAR,
                format!("{};{current};{archive};{queue};{boundary}", path.display()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let n = ids.len();
        let held = tokio::task::spawn_blocking(move || {
            let mut held = 0;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("HELD ") {
                    held += 1;
                    if held == n {
                        break;
                    }
                }
            }
            held
        })
        .await
        .unwrap();
        assert_eq!(
            held, n,
            "the child reached boundary {boundary} for every message"
        );
        child.kill().unwrap(); // SIGKILL on Unix
        assert!(!child.wait().unwrap().success());

        // A fresh process's view: the file, and a clock past the visibility timeout.
        let clock = ManualClock::starting_now();
        clock.advance(Duration::from_secs(31));
        let tables = TableServiceClient::embedded_at(&path).unwrap();
        let queues = QueueServiceClient::embedded_at_with_clock(&path, clock).unwrap();
        let env = Env {
            s: Services {
                tables: tables.clone(),
                queues: queues.clone(),
                blobs: tablekit::BlobServiceClient::embedded(), // not used
                clock: None,
                visibility: Duration::from_secs(30),
            },
            current: tables.table(current).unwrap(),
            archive: tables.table(archive).unwrap(),
            jobs: queues.queue(queue).unwrap(),
            poison: queues.queue(&format!("{queue}-poison")).unwrap(),
        };
        let in_archive = env.ids_in(&env.archive).await.len();
        assert_eq!(
            in_archive,
            if boundary == 1 { 0 } else { n },
            "boundary {boundary}"
        );
        let report = env.worker().build().unwrap().drain().await.unwrap();
        assert_eq!(report.succeeded, n as u64, "boundary {boundary}");
        env.assert_archived(&ids).await;
        drop((env, tables, queues));
        let _ = std::fs::remove_file(&path);
    }
}

/// `Archive<DynamicEntity>` copies every property, also those no type declares.
#[tokio::test]
async fn a_dynamic_archive_keeps_every_property() {
    let s = common::embedded_services();
    let env = Env::new(&s).await;
    let current = env.current.with_type::<DynamicEntity>();
    current
        .insert(
            &DynamicEntity::new("Sales", "000456")
                .with("Name", "Kim")
                .with("Badge", 77_i64),
        )
        .await
        .unwrap();
    let op = Archive::<DynamicEntity>::new(current.name(), env.archive.name(), ("Sales", "000456"))
        .unwrap();
    Eventual::new(env.jobs.clone()).enqueue(&op).await.unwrap();
    let worker = Worker::builder(env.jobs.clone(), s.tables.clone())
        .operation::<Archive<DynamicEntity>>()
        .poison_queue(env.poison.clone())
        .build()
        .unwrap();
    assert_eq!(worker.drain().await.unwrap().succeeded, 1);
    let got = env
        .archive
        .with_type::<DynamicEntity>()
        .get(("Sales", "000456"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.get("Badge"), Some(&tablekit::EdmValue::Int64(77)));
}
