//! A model-based property test of the eventual worker: random operations
//! (an idempotent "add to a counter" in two steps: a log entry, then an
//! ETag-guarded update of the counter that remembers which operations it
//! applied), some enqueued twice (a duplicate delivery), some of a kind only
//! the newer of two workers knows, some not an envelope at all; run by two
//! workers at random, with a step failing or the worker dying at a random
//! step, and with one worker held past its visibility timeout while the
//! other runs the same message. After a final drain the state must be what
//! a `BTreeMap` model says: each operation applied exactly once in effect,
//! the queue empty, and in the poison queue exactly the messages that were
//! never envelopes.
//!
//! 64 cases on the embedded store (its clock moved past the visibility
//! timeout), 3 on Azurite (a visibility timeout of 1 s, waited for).

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde::{Deserialize, Serialize};
use tablekit::{DynamicEntity, EdmValue, QueueClient, TableClient};
use tablekit_patterns::eventual::{
    Event, Eventual, Guarded, OpResult, Operation, PoisonedMessage, StepContext, Worker,
};
use tokio::sync::{mpsc, Notify};

const COUNTERS: [&str; 3] = ["c0", "c1", "c2"];
/// The kind the older worker does not know.
const ADD_V2: &str = "test.add.v2";

/// Adds `amount` to counter `counter`, once per `id` however often it runs:
/// 1. insert-or-replace the log entry `(counter, id)`;
/// 2. read the counter with its ETag;
/// 3. if `id` is not among those it applied, replace it with the sum and
///    `id` added, if unchanged since the read (else read again).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Add {
    log: String,
    counters: String,
    counter: usize,
    id: u32,
    amount: i64,
}

impl Operation for Add {
    const KIND: &'static str = "test.add";

    async fn run(&self, ctx: &StepContext) -> OpResult {
        let log = ctx.tables().table::<DynamicEntity>(&self.log)?;
        let counters = ctx.tables().table::<DynamicEntity>(&self.counters)?;
        let name = COUNTERS[self.counter];
        let entry = DynamicEntity::new(name, format!("{:06}", self.id)).with("Amount", self.amount);
        ctx.insert_or_replace(&log, &entry).await?;
        for _ in 0..16 {
            let (mut row, etag) = ctx
                .read(&counters, ("c", name))
                .await?
                .ok_or("the counter is missing")?;
            let applied = applied(&row);
            if applied.contains(&self.id) {
                return Ok(());
            }
            let total = row.get("Total").and_then(EdmValue::as_i64).unwrap_or(0);
            let mut ids: Vec<String> = applied.iter().map(u32::to_string).collect();
            ids.push(self.id.to_string());
            row.set("Total", total + self.amount);
            row.set("Applied", ids.join(","));
            match ctx.replace_if_unchanged(&counters, &row, &etag).await? {
                Guarded::Done(_) => return Ok(()),
                Guarded::Changed => continue,
                _ => return Err("the counter is gone".into()),
            }
        }
        Err("the counter kept changing".into())
    }
}

fn applied(row: &DynamicEntity) -> Vec<u32> {
    row.get("Applied")
        .and_then(EdmValue::as_str)
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    /// Knows `test.add` only.
    Old,
    /// Knows `test.add` and `test.add.v2`.
    New,
}

#[derive(Debug, Clone)]
enum Op {
    /// An Add, enqueued once or twice (a duplicate delivery), as `test.add`
    /// or as the newer kind.
    Enqueue {
        counter: usize,
        amount: i64,
        twice: bool,
        newer_kind: bool,
    },
    /// A message that is no envelope: the one thing that must be poisoned.
    Garbage,
    /// One receive by a worker; a step hook that fails at `fail_at`, or
    /// holds the worker there until it is aborted (`die`).
    Run {
        worker: Which,
        fail_at: Option<usize>,
        die: bool,
    },
    /// Worker `held` is stopped after step `at` while its visibility lapses;
    /// the other worker drains the queue; then the first goes on.
    Race { held: Which, at: usize },
    /// The visibility timeout passes.
    Pass,
}

fn op() -> impl Strategy<Value = Op> {
    let which = prop_oneof![Just(Which::Old), Just(Which::New)];
    prop_oneof![
        5 => (0..COUNTERS.len(), 1i64..=5, prop::bool::weighted(0.25), prop::bool::weighted(0.25))
            .prop_map(|(counter, amount, twice, newer_kind)| Op::Enqueue { counter, amount, twice, newer_kind }),
        1 => Just(Op::Garbage),
        5 => (which.clone(), prop::option::weighted(0.5, 1usize..=3), any::<bool>())
            .prop_map(|(worker, fail_at, die)| Op::Run { worker, fail_at, die }),
        1 => (which, 1usize..=3).prop_map(|(held, at)| Op::Race { held, at }),
        2 => Just(Op::Pass),
    ]
}

struct Env {
    s: common::Services,
    log: TableClient<DynamicEntity>,
    counters: TableClient<DynamicEntity>,
    jobs: QueueClient,
    poison: QueueClient,
}

impl Env {
    async fn new(s: common::Services) -> Env {
        let log = common::fresh_table::<DynamicEntity>(&s.tables, "Log").await;
        let counters = common::fresh_table::<DynamicEntity>(&s.tables, "Counters").await;
        for name in COUNTERS {
            counters
                .insert(
                    &DynamicEntity::new("c", name)
                        .with("Total", 0i64)
                        .with("Applied", ""),
                )
                .await
                .unwrap();
        }
        let (jobs, poison) = common::fresh_queues(&s.queues, "model-").await;
        Env {
            s,
            log,
            counters,
            jobs,
            poison,
        }
    }

    fn worker<F, Fut>(&self, which: Which, hook: F) -> Worker
    where
        F: Fn(Event) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = OpResult> + Send + 'static,
    {
        let mut b = Worker::builder(self.jobs.clone(), self.s.tables.clone())
            .operation::<Add>()
            .poison_queue(self.poison.clone())
            .visibility_timeout(self.s.visibility)
            // Enough receives that only a message no worker can read is poisoned.
            .max_dequeue_count(1_000)
            .step_hook(hook);
        if which == Which::New {
            b = b.handle(ADD_V2, |op: Add, ctx: StepContext| async move {
                op.run(&ctx).await
            });
        }
        b.build().unwrap()
    }

    async fn pass(&self) {
        match &self.s.clock {
            Some(clock) => clock.advance(self.s.visibility + Duration::from_secs(1)),
            None => tokio::time::sleep(self.s.visibility + Duration::from_millis(300)).await,
        }
    }
}

fn no_hook(_: Event) -> std::future::Ready<OpResult> {
    std::future::ready(Ok(()))
}

/// Runs `worker.run_once()` in a task; when the hook says it reached its
/// point, `on_reached` runs, then the task is aborted (`abort`) or left to
/// finish after `release` is notified.
async fn run_with_stop(
    worker: Worker,
    mut reached: mpsc::UnboundedReceiver<()>,
    abort: bool,
    release: Option<Arc<Notify>>,
    on_reached: impl std::future::Future<Output = ()>,
) {
    let mut task = tokio::spawn(async move { worker.run_once().await.unwrap() });
    tokio::select! {
        done = &mut task => {
            done.unwrap();
        }
        Some(()) = reached.recv() => {
            on_reached.await;
            if abort {
                task.abort();
                assert!(task.await.unwrap_err().is_cancelled());
            } else {
                if let Some(r) = release {
                    r.notify_waiters();
                }
                task.await.unwrap();
            }
        }
    }
}

async fn run_case(s: common::Services, ops: Vec<Op>) {
    let env = Env::new(s).await;
    let eventual = Eventual::new(env.jobs.clone());
    // The model: per counter, the operations it must have applied, once.
    let mut model: BTreeMap<usize, BTreeMap<u32, i64>> = BTreeMap::new();
    let mut garbage = 0u64;
    let mut next_id = 0u32;

    for op in &ops {
        match op {
            Op::Enqueue {
                counter,
                amount,
                twice,
                newer_kind,
            } => {
                next_id += 1;
                let add = Add {
                    log: env.log.name().to_owned(),
                    counters: env.counters.name().to_owned(),
                    counter: *counter,
                    id: next_id,
                    amount: *amount,
                };
                for _ in 0..(1 + usize::from(*twice)) {
                    if *newer_kind {
                        eventual.enqueue_kind(ADD_V2, &add).await.unwrap();
                    } else {
                        eventual.enqueue(&add).await.unwrap();
                    }
                }
                model.entry(*counter).or_default().insert(next_id, *amount);
            }
            Op::Garbage => {
                env.jobs.send("add 5 to c0").await.unwrap();
                garbage += 1;
            }
            Op::Run {
                worker,
                fail_at,
                die,
            } => {
                let (tx, rx) = mpsc::unbounded_channel();
                let (fail_at, die) = (*fail_at, *die);
                let w = env.worker(*worker, move |e| {
                    let tx = tx.clone();
                    async move {
                        if let Event::Step { step, .. } = e {
                            if Some(step) == fail_at {
                                let _ = tx.send(());
                                if die {
                                    std::future::pending::<()>().await;
                                }
                                return Err("injected failure".into());
                            }
                        }
                        Ok(())
                    }
                });
                run_with_stop(w, rx, die, None, async {}).await;
            }
            Op::Race { held, at } => {
                let (tx, rx) = mpsc::unbounded_channel();
                let release = Arc::new(Notify::new());
                let gate = release.clone();
                let at = *at;
                let once = Arc::new(AtomicBool::new(false));
                let first = env.worker(*held, move |e| {
                    let (tx, gate, once) = (tx.clone(), gate.clone(), once.clone());
                    async move {
                        match e {
                            Event::Heartbeat { .. } => return Err("heartbeat lost".into()),
                            Event::Step { step, .. }
                                if step == at && !once.swap(true, Ordering::SeqCst) =>
                            {
                                let released = gate.notified();
                                let _ = tx.send(());
                                released.await;
                            }
                            _ => {}
                        }
                        Ok(())
                    }
                });
                let other = match held {
                    Which::Old => Which::New,
                    Which::New => Which::Old,
                };
                let second = env.worker(other, no_hook);
                let env = &env;
                run_with_stop(first, rx, false, Some(release), async move {
                    env.pass().await;
                    second.drain().await.unwrap();
                })
                .await;
            }
            Op::Pass => env.pass().await,
        }
    }

    // Drain with the newer worker until nothing is left, hidden or not.
    let finisher = env.worker(Which::New, no_hook);
    for round in 0.. {
        finisher.drain().await.unwrap();
        if env.jobs.approximate_message_count().await.unwrap() == 0 {
            break;
        }
        assert!(round < 10, "the queue does not drain");
        env.pass().await;
    }

    for (c, name) in COUNTERS.iter().enumerate() {
        let row = env.counters.get(("c", *name)).await.unwrap().unwrap();
        let want = model.get(&c).cloned().unwrap_or_default();
        let mut got = applied(&row);
        got.sort();
        assert_eq!(
            got,
            want.keys().copied().collect::<Vec<_>>(),
            "{name}: applied once each"
        );
        assert_eq!(
            row.get("Total").and_then(EdmValue::as_i64),
            Some(want.values().sum::<i64>()),
            "{name}: total"
        );
        let logged: Vec<String> = common::rows(&env.log, name)
            .await
            .into_iter()
            .map(|r| r.row_key)
            .collect();
        let want_logged: Vec<String> = want.keys().map(|id| format!("{id:06}")).collect();
        assert_eq!(logged, want_logged, "{name}: log");
    }
    let poisoned = env.poison.peek(32).await.unwrap();
    assert_eq!(
        env.poison.approximate_message_count().await.unwrap(),
        garbage,
        "poisoned"
    );
    for m in poisoned {
        let p: PoisonedMessage = m.json().unwrap();
        assert_eq!(p.body, "add 5 to c0");
    }
}

fn run(cases: u32, max_ops: usize, services: impl Fn() -> common::Services) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 1..max_ops), |ops| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(run_case(services(), ops));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn the_worker_applies_each_operation_once_embedded() {
    run(64, 24, common::embedded_services);
}

#[test]
fn the_worker_applies_each_operation_once_azurite() {
    if common::azurite_services().is_none() {
        return;
    }
    run(3, 10, || common::Services {
        visibility: Duration::from_secs(1),
        ..common::azurite_services().unwrap()
    });
}
