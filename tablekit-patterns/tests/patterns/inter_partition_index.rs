//! The inter-partition secondary index (§3.2) kept through a queue: the
//! seed's copies `empid_Sales`/`000223` and `email_Sales`/`jonesj@contoso.com`,
//! appendix A's point and range reads, a second index in a table of its own,
//! and a worker stopped at each step of a put, a change and a remove, with
//! recovery proven by the final rows. After every stop no index copy points
//! at a missing primary. On Azurite and on the embedded store.

use crate::common;
use tablekit::testing::TestEnv;

use common::Services;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tablekit::{DynamicEntity, EdmValue, QueueClient, TableClient, TableEntity};
use tablekit_patterns::eventual::{Event, PoisonedMessage, Worker, WorkerBuilder};
use tablekit_patterns::inter_index::{
    InterIndex, InterPartitionIndex, CHANGE_STAMP, MOVED_COPIES, PENDING, PRIMARY_ROW_KEY, REMOVED,
    REMOVED_COPIES,
};
use tablekit_patterns::range::KeyRange;
use tokio::sync::Notify;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    last_name: String,
    email: String,
}

fn jones() -> Employee {
    Employee {
        department: "Sales".into(),
        employee_id: 223,
        last_name: "Jones".into(),
        email: "jonesj@contoso.com".into(),
    }
}

fn emp(id: u32, last_name: &str, email: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        employee_id: id,
        last_name: last_name.into(),
        email: email.into(),
    }
}

/// An employee table with a unique email index in the same table and a
/// non-unique last-name index in another.
struct Env {
    s: Services,
    employees: TableClient<Employee>,
    names: TableClient<DynamicEntity>,
    by_email: InterIndex<Employee>,
    by_name: InterIndex<Employee>,
    index: InterPartitionIndex<Employee>,
    jobs: QueueClient,
    poison: QueueClient,
}

impl Env {
    async fn new(s: &Services) -> Env {
        let employees = common::fresh_table::<Employee>(&s.tables, "Employees").await;
        let names = common::fresh_table::<DynamicEntity>(&s.tables, "EmployeeNames").await;
        let (jobs, poison) = common::fresh_queues(&s.queues, "index-").await;
        let by_email = InterIndex::unique("email", "email_", |e: &Employee| e.email.to_lowercase());
        let by_name =
            InterIndex::non_unique("last name", "lastname_", |e: &Employee| e.last_name.clone())
                .in_table(&names);
        let index = InterPartitionIndex::new(employees.clone(), "empid_", jobs.clone())
            .with_index(&by_email)
            .unwrap()
            .with_index(&by_name)
            .unwrap();
        Env {
            s: s.clone(),
            employees,
            names,
            by_email,
            by_name,
            index,
            jobs,
            poison,
        }
    }

    fn worker(&self) -> WorkerBuilder {
        self.index
            .attach(Worker::builder(self.jobs.clone(), self.s.tables.clone()))
            .poison_queue(self.poison.clone())
            .visibility_timeout(self.s.visibility)
            .concurrency(8)
    }

    async fn drain(&self) {
        let report = self.worker().build().unwrap().drain().await.unwrap();
        assert_eq!((report.failed, report.poisoned), (0, 0), "{report:?}");
    }

    async fn pass_visibility_timeout(&self) {
        match &self.s.clock {
            Some(clock) => clock.advance(self.s.visibility + Duration::from_secs(1)),
            None => tokio::time::sleep(self.s.visibility + Duration::from_millis(700)).await,
        }
    }

    /// Every stored row but the tombstones, as (PartitionKey, RowKey), of
    /// both tables.
    async fn keys(&self) -> BTreeSet<(String, String)> {
        self.rows(false).await
    }

    /// The tombstones removes left, as (PartitionKey, RowKey).
    async fn tombstones(&self) -> BTreeSet<(String, String)> {
        self.rows(true).await
    }

    async fn rows(&self, tombstones: bool) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for t in [
            self.employees.with_type::<DynamicEntity>(),
            self.names.clone(),
        ] {
            for d in t.query().fetch_all().await.unwrap() {
                let tombstone = d.get(REMOVED) == Some(&EdmValue::Boolean(true));
                if tombstone {
                    assert_eq!(
                        d.properties.len(),
                        3,
                        "a tombstone holds its stamp, the mark and the copies removed: {d:?}"
                    );
                    assert!(matches!(d.get(CHANGE_STAMP), Some(EdmValue::Int64(_))));
                    // Each copy it names is an [index name, PartitionKey, RowKey].
                    let Some(EdmValue::String(named)) = d.get(REMOVED_COPIES) else {
                        panic!("a tombstone names the copies it removed: {d:?}");
                    };
                    let named: Vec<(String, String, String)> = serde_json::from_str(named).unwrap();
                    assert!(
                        named.iter().all(|(_, pk, _)| pk.ends_with("_Sales")),
                        "{named:?}"
                    );
                }
                if tombstone == tombstones {
                    out.insert((d.partition_key, d.row_key));
                }
            }
        }
        out
    }

    /// No index copy a reader sees (claims are not seen) points at a
    /// missing primary.
    async fn assert_no_dangling_copy(&self) {
        let keys = self.keys().await;
        for t in [
            self.employees.with_type::<DynamicEntity>(),
            self.names.clone(),
        ] {
            for d in t.query().fetch_all().await.unwrap() {
                if d.get(PENDING) == Some(&EdmValue::Boolean(true)) {
                    continue;
                }
                if let Some(EdmValue::String(rk)) = d.get(PRIMARY_ROW_KEY) {
                    let dept = d.partition_key.split_once('_').unwrap().1;
                    let primary = (format!("empid_{dept}"), rk.clone());
                    assert!(
                        keys.contains(&primary),
                        "copy ({}, {}) points at missing {primary:?}",
                        d.partition_key,
                        d.row_key
                    );
                }
            }
        }
    }
}

/// A worker of one message at a time whose step hook, at the first step of
/// the message it runs for which `pause(number, name)` holds, says so
/// (`reached`) and waits until `release`d.
struct Paused {
    worker: Worker,
    reached: Arc<Notify>,
    release: Arc<Notify>,
}

impl Paused {
    fn new(env: &Env, at: usize) -> Paused {
        Paused::when(env, move |step, _| step == at)
    }

    fn when(env: &Env, pause: impl Fn(usize, &str) -> bool + Send + Sync + 'static) -> Paused {
        let (reached, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let (r, g) = (reached.clone(), release.clone());
        let pause = Arc::new(pause);
        let paused = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // A paused run holds its message for as long as the case needs: on
        // Azurite the cases' 2 s visibility can run out while the machine is
        // loaded (a heartbeat late), and the message would then be received
        // a second time by the run the case expects to see only the other.
        let worker = env
            .worker()
            .visibility_timeout(Duration::from_secs(60))
            .concurrency(1)
            .step_hook(move |event| {
                let (r, g) = (r.clone(), g.clone());
                let (pause, paused) = (pause.clone(), paused.clone());
                async move {
                    if let Event::Step { step, name, .. } = event {
                        if pause(step, &name) && !paused.swap(true, Ordering::SeqCst) {
                            r.notify_one();
                            g.notified().await;
                        }
                    }
                    Ok(())
                }
            })
            .build()
            .unwrap();
        Paused {
            worker,
            reached,
            release,
        }
    }

    /// Starts receiving one message; `Some` once the worker is paused at its
    /// step, `None` if the message ran to its end before that step.
    async fn start(self) -> Option<PausedRun> {
        let worker = self.worker.clone();
        let mut run = tokio::spawn(async move { worker.run_once().await.unwrap() });
        tokio::select! {
            _ = self.reached.notified() => Some(PausedRun { run, release: self.release }),
            report = &mut run => {
                assert_eq!(report.unwrap().total(), 1, "the worker received a message");
                None
            }
        }
    }
}

struct PausedRun {
    run: tokio::task::JoinHandle<tablekit_patterns::eventual::Report>,
    release: Arc<Notify>,
}

impl PausedRun {
    async fn finish(self) {
        self.release.notify_one();
        let report = self.run.await.unwrap();
        assert_eq!((report.succeeded, report.failed), (1, 0), "{report:?}");
    }
}

/// Runs one message with a worker whose step hook fails at step 1 (after the
/// read, before any write): the message comes back after the retry delay.
async fn hold_back_one_message(env: &Env) {
    let report = env
        .worker()
        .concurrency(1)
        .step_hook(|event| async move {
            match event {
                Event::Step { step: 1, .. } => Err("held back".into()),
                _ => Ok(()),
            }
        })
        .build()
        .unwrap()
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.failed, 1, "{report:?}");
}

fn set(keys: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    keys.iter()
        .map(|(p, r)| (p.to_string(), r.to_string()))
        .collect()
}

/// The primary of a put that moves off a value names the copy it deletes
/// after its write (`MovedCopies`); a put that moves off nothing names none;
/// reads leave the property out, and an entity type of its own with a
/// property of that name is refused before any message is sent.
async fn a_primary_names_the_copies_its_put_moved_off(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.index.put(&jones()).await.unwrap();
    env.drain().await;
    let primary = || async {
        env.employees
            .with_type::<DynamicEntity>()
            .get(("empid_Sales", "000223"))
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(
        primary().await.get(MOVED_COPIES),
        None,
        "the first put moves off nothing"
    );
    let moved = Employee {
        email: "jj@contoso.com".into(),
        ..jones()
    };
    env.index.put(&moved).await.unwrap();
    env.drain().await;
    let Some(EdmValue::String(named)) = primary().await.get(MOVED_COPIES).cloned() else {
        panic!("the primary names the copy moved off");
    };
    let named: Vec<(String, String, String)> = serde_json::from_str(&named).unwrap();
    assert_eq!(
        named,
        [(
            "email".to_owned(),
            "email_Sales".to_owned(),
            "jonesj@contoso.com".to_owned()
        )]
    );
    assert_eq!(
        env.index
            .lookup(&env.by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        env.index.get(("Sales", "000223")).await.unwrap(),
        Some(moved.clone())
    );
    // The same values again: nothing moved off.
    env.index.put(&moved).await.unwrap();
    env.drain().await;
    assert_eq!(primary().await.get(MOVED_COPIES), None);

    #[derive(TableEntity, Debug, Clone)]
    #[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
    struct Clashing {
        department: String,
        employee_id: u32,
        moved_copies: String,
    }
    let table = common::fresh_table::<Clashing>(&s.tables, "Clashing").await;
    let index = InterPartitionIndex::new(table, "empid_", env.jobs.clone());
    let before = env.jobs.approximate_message_count().await.unwrap();
    let refused = index
        .put(&Clashing {
            department: "Sales".into(),
            employee_id: 1,
            moved_copies: "x".into(),
        })
        .await
        .unwrap_err();
    assert!(refused.to_string().contains(MOVED_COPIES), "{refused}");
    assert_eq!(env.jobs.approximate_message_count().await.unwrap(), before);
}

tablekit::testing::conformance!(
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_primary_names_the_copies_its_put_moved_off,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    the_seed_copies_are_written_and_read_by_point_and_range,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_email_change_moves_the_copy_and_a_remove_deletes_every_copy,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_worker_stopped_at_each_step_of_a_change_is_recovered,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_verified_lookup_repairs_stale_and_dangling_entries,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_older_put_delivered_after_a_newer_one_changes_nothing,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    two_changes_interleaved_at_every_step_end_at_the_newer,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_copy_written_after_a_newer_change_is_undone_when_redelivered,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_put_older_than_a_remove_does_not_resurrect_the_entity,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    purge_tombstones_deletes_only_old_tombstones,
);

fn older() -> Employee {
    emp(223, "Adams", "adamsj@contoso.com")
}

fn newer() -> Employee {
    emp(223, "Brown", "jonesj@contoso.com")
}

/// The state after `newer()` won, read with the unverified reads only: the
/// primary and exactly the newer copies.
async fn assert_newer_won(env: &Env, context: &str) {
    assert_eq!(
        env.keys().await,
        set(&[
            ("email_Sales", "jonesj@contoso.com"),
            ("empid_Sales", "000223"),
            ("lastname_Sales", "Brown 000223"),
        ]),
        "{context}"
    );
    assert_eq!(
        env.index.get(("Sales", "000223")).await.unwrap(),
        Some(newer()),
        "{context}"
    );
    let by_email = env
        .index
        .list(&env.by_email, "Sales", KeyRange::all())
        .await
        .unwrap();
    assert_eq!(by_email, [newer()], "{context}");
    let by_name = env
        .index
        .list(&env.by_name, "Sales", KeyRange::all())
        .await
        .unwrap();
    assert_eq!(by_name, [newer()], "{context}");
}

async fn an_older_put_delivered_after_a_newer_one_changes_nothing(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.index.put(&jones()).await.unwrap();
    env.drain().await;
    env.index.put(&older()).await.unwrap();
    hold_back_one_message(&env).await;
    env.index.put(&newer()).await.unwrap();
    env.drain().await;
    assert_newer_won(&env, "the newer change applied").await;

    env.pass_visibility_timeout().await;
    let report = env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(report.succeeded, 1, "the older change ran: {report:?}");
    assert_newer_won(&env, "after the older change ran").await;
    assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 0);
}

/// Two workers change the same employee (jones → older(): a new email and
/// last name; jones → newer(): a new last name, the same email), each order
/// stopped at every step boundary of one of them in turn:
/// 1. the older pauses after step `at`, the newer runs whole, the older ends;
/// 2. the older reads and pauses, the newer runs to step `at`, the older
///    ends, then the newer;
/// 3. the older pauses after its primary write, the newer runs to step
///    `at`, the older ends, then the newer.
async fn two_changes_interleaved_at_every_step_end_at_the_newer(env: TestEnv) {
    let s = Services::of(&env);
    for order in 1..=3 {
        for at in 1.. {
            let env = Env::new(&s).await;
            env.index.put(&jones()).await.unwrap();
            env.drain().await;
            let context = format!("order {order}, at step {at}");
            env.index.put(&older()).await.unwrap();
            let primary_write = format!("replace_if_unchanged {}", env.employees.name());
            let first = match order {
                1 => Paused::new(&env, at),
                2 => Paused::new(&env, 1),
                _ => Paused::when(&env, move |_, name| name == primary_write),
            }
            .start()
            .await;
            env.index.put(&newer()).await.unwrap();
            let reached = match (order, first) {
                (1, first) => {
                    env.drain().await;
                    let reached = first.is_some();
                    if let Some(run) = first {
                        run.finish().await;
                    }
                    reached
                }
                (2, first) => {
                    let first = first.expect("the older change reads");
                    let second = Paused::new(&env, at).start().await;
                    first.finish().await;
                    let reached = second.is_some();
                    if let Some(run) = second {
                        run.finish().await;
                    }
                    reached
                }
                (_, first) => {
                    let first = first.expect("the older change writes its primary");
                    let second = Paused::new(&env, at).start().await;
                    first.finish().await;
                    let reached = second.is_some();
                    if let Some(run) = second {
                        run.finish().await;
                    }
                    reached
                }
            };
            assert_newer_won(&env, &context).await;
            env.assert_no_dangling_copy().await;
            assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 0);
            if !reached {
                assert!(at > 4, "{context}: the change has more steps than that");
                break;
            }
        }
    }
}

/// The hole stamps close: an older change writes its primary and pauses; a
/// newer one runs whole; the older one writes its copies and stops before
/// its re-read. Its copy under the same last name (older content) is stale
/// until the message runs again; its email copy is not written at all.
async fn a_copy_written_after_a_newer_change_is_undone_when_redelivered(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.index.put(&jones()).await.unwrap();
    env.drain().await;
    let same_name = Employee {
        email: "jj@contoso.com".into(),
        ..jones()
    };
    let newer = Employee {
        email: "jones.j@contoso.com".into(),
        ..jones()
    };
    env.index.put(&same_name).await.unwrap();

    let (reached, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (r, g) = (reached.clone(), release.clone());
    // The first guarded replace in Employees is the primary write (the
    // email copy's is the second).
    let primary_write = format!("replace_if_unchanged {}", env.employees.name());
    let last_copy = format!("insert_or_replace {}", env.names.name());
    let paused = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = env
        .worker()
        .concurrency(1)
        .step_hook(move |event| {
            let (r, g) = (r.clone(), g.clone());
            let (primary_write, last_copy) = (primary_write.clone(), last_copy.clone());
            let paused = paused.clone();
            async move {
                if let Event::Step { name, .. } = event {
                    if name == primary_write && !paused.swap(true, Ordering::SeqCst) {
                        r.notify_one();
                        g.notified().await;
                    } else if name == last_copy {
                        return Err("stopped before the re-read".into());
                    }
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let older_run = tokio::spawn(async move { worker.run_once().await.unwrap() });
    reached.notified().await;
    env.index.put(&newer).await.unwrap();
    env.drain().await;
    release.notify_one();
    assert_eq!(older_run.await.unwrap().failed, 1);

    // The stale copy, as the stopped worker left it. The email copy it wrote
    // was guarded by the ETag of its claim, which the newer change deleted
    // (an older change's claim under a value it no longer has): no stale
    // copy there.
    assert_eq!(
        env.index
            .lookup(&env.by_email, "Sales", "jj@contoso.com")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        env.index
            .lookup_all(&env.by_name, "Sales", "Jones")
            .await
            .unwrap(),
        [same_name]
    );

    env.pass_visibility_timeout().await;
    let report = env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(report.succeeded, 1, "{report:?}");
    assert_eq!(
        env.keys().await,
        set(&[
            ("email_Sales", "jones.j@contoso.com"),
            ("empid_Sales", "000223"),
            ("lastname_Sales", "Jones 000223"),
        ])
    );
    for (index, value) in [
        (&env.by_email, "jones.j@contoso.com"),
        (&env.by_name, "Jones"),
    ] {
        assert_eq!(
            env.index.lookup_all(index, "Sales", value).await.unwrap(),
            std::slice::from_ref(&newer),
            "{value}"
        );
    }
}

/// What every read says of employee 223 once removed: nothing.
async fn assert_gone(env: &Env, context: &str) {
    assert_eq!(
        env.index.get(("Sales", "000223")).await.unwrap(),
        None,
        "{context}"
    );
    let primaries = env
        .index
        .list_primary("Sales", KeyRange::all())
        .await
        .unwrap();
    assert_eq!(
        primaries,
        [emp(100, "Abbott", "abbotta@contoso.com")],
        "{context}"
    );
    for index in [&env.by_email, &env.by_name] {
        for e in [jones(), older()] {
            let value = index.value(&e);
            assert_eq!(
                env.index.lookup_all(index, "Sales", &value).await.unwrap(),
                []
            );
            if index.is_unique() {
                assert_eq!(
                    env.index.lookup(index, "Sales", &value).await.unwrap(),
                    None
                );
                assert_eq!(
                    env.index
                        .lookup_verified(index, "Sales", &value)
                        .await
                        .unwrap(),
                    None
                );
            }
        }
        for listed in [
            env.index
                .list(index, "Sales", KeyRange::all())
                .await
                .unwrap(),
            env.index
                .list_verified(index, "Sales", KeyRange::all())
                .await
                .unwrap(),
        ] {
            assert!(
                listed.iter().all(|e| e.employee_id != 223),
                "{context}: {listed:?}"
            );
        }
    }
    assert_eq!(
        env.tombstones().await,
        set(&[("empid_Sales", "000223")]),
        "{context}"
    );
}

async fn a_put_older_than_a_remove_does_not_resurrect_the_entity(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.index
        .put(&emp(100, "Abbott", "abbotta@contoso.com"))
        .await
        .unwrap();
    env.index.put(&jones()).await.unwrap();
    env.drain().await;
    env.index.put(&older()).await.unwrap();
    hold_back_one_message(&env).await;
    env.index.remove(("Sales", "000223")).await.unwrap();
    env.drain().await;
    assert_gone(&env, "after the remove").await;

    env.pass_visibility_timeout().await;
    let report = env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(report.succeeded, 1, "the older put ran: {report:?}");
    assert_gone(&env, "after the older put ran").await;

    // A put newer than the remove brings the employee back.
    env.index.put(&newer()).await.unwrap();
    env.drain().await;
    assert_eq!(
        env.index.get(("Sales", "000223")).await.unwrap(),
        Some(newer())
    );
    assert_eq!(
        env.index
            .lookup_all(&env.by_name, "Sales", "Brown")
            .await
            .unwrap(),
        [newer()]
    );
    assert_eq!(env.tombstones().await, BTreeSet::new());
}

async fn purge_tombstones_deletes_only_old_tombstones(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.index.put(&jones()).await.unwrap();
    env.index
        .put(&emp(100, "Abbott", "abbotta@contoso.com"))
        .await
        .unwrap();
    env.drain().await;
    env.index.remove(("Sales", "000223")).await.unwrap();
    env.index.remove(("Marketing", "000007")).await.unwrap(); // never stored
    env.drain().await;
    let both = set(&[("empid_Marketing", "000007"), ("empid_Sales", "000223")]);
    assert_eq!(env.tombstones().await, both);

    // Younger than an hour: kept.
    let purged = env
        .index
        .purge_tombstones(Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(purged, 0);
    assert_eq!(env.tombstones().await, both);

    let purged = env.index.purge_tombstones(Duration::ZERO).await.unwrap();
    assert_eq!(purged, 2);
    assert_eq!(env.tombstones().await, BTreeSet::new());
    // The live employee and its copies are untouched.
    assert_eq!(
        env.keys().await,
        set(&[
            ("email_Sales", "abbotta@contoso.com"),
            ("empid_Sales", "000100"),
            ("lastname_Sales", "Abbott 000100"),
        ])
    );
}

async fn the_seed_copies_are_written_and_read_by_point_and_range(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.index.put(&jones()).await.unwrap();
    for (id, name, email) in [
        (100, "Abbott", "abbotta@contoso.com"),
        (152, "Jones", "adamsj@contoso.com"),
        (199, "Smith", "smithb@contoso.com"),
        (200, "Brown", "ab@contoso.com"),
    ] {
        env.index.put(&emp(id, name, email)).await.unwrap();
    }
    env.drain().await;

    // The rows as the seed writes them.
    let rows = common::rows(&env.employees, "email_Sales").await;
    let copy = rows
        .iter()
        .find(|d| d.row_key == "jonesj@contoso.com")
        .unwrap();
    assert_eq!(
        copy.get(PRIMARY_ROW_KEY),
        Some(&EdmValue::String("000223".into()))
    );
    assert_eq!(
        copy.get("Email"),
        Some(&EdmValue::String("jonesj@contoso.com".into()))
    );
    assert!(env
        .employees
        .with_type::<DynamicEntity>()
        .get(("empid_Sales", "000223"))
        .await
        .unwrap()
        .is_some());
    assert!(env
        .names
        .get(("lastname_Sales", "Jones 000223"))
        .await
        .unwrap()
        .is_some());

    // Point reads by each key.
    assert_eq!(
        env.index.get(("Sales", "000223")).await.unwrap(),
        Some(jones())
    );
    assert_eq!(
        env.index
            .lookup(&env.by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap(),
        Some(jones())
    );
    assert_eq!(
        env.index
            .lookup_verified(&env.by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap(),
        Some(jones())
    );
    assert_eq!(
        env.index
            .lookup_all(&env.by_name, "Sales", "Jones")
            .await
            .unwrap(),
        [emp(152, "Jones", "adamsj@contoso.com"), jones()]
    );

    // Appendix A's ranges.
    assert_eq!(
        KeyRange::inclusive("000100", "000199")
            .filter::<DynamicEntity>("empid_Sales", "")
            .to_string(),
        "PartitionKey eq 'empid_Sales' and RowKey ge '000100' and RowKey le '000199'"
    );
    assert_eq!(
        KeyRange::prefix("a")
            .filter::<DynamicEntity>("email_Sales", "")
            .to_string(),
        "PartitionKey eq 'email_Sales' and RowKey ge 'a' and RowKey lt 'b'"
    );
    let ids: Vec<u32> = env
        .index
        .list_primary("Sales", KeyRange::inclusive("000100", "000199"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.employee_id)
        .collect();
    assert_eq!(ids, [100, 152, 199]);
    let emails: Vec<String> = env
        .index
        .list(&env.by_email, "Sales", KeyRange::prefix("a"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.email)
        .collect();
    assert_eq!(
        emails,
        [
            "ab@contoso.com",
            "abbotta@contoso.com",
            "adamsj@contoso.com"
        ]
    );
    let joneses: Vec<u32> = env
        .index
        .list_verified(&env.by_name, "Sales", KeyRange::prefix("Jones"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.employee_id)
        .collect();
    assert_eq!(joneses, [152, 223]);
}

async fn an_email_change_moves_the_copy_and_a_remove_deletes_every_copy(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.index.put(&jones()).await.unwrap();
    env.drain().await;
    let mut changed = jones();
    changed.email = "jj@contoso.com".into();
    env.index.put(&changed).await.unwrap();
    env.drain().await;
    assert_eq!(
        env.keys().await,
        set(&[
            ("email_Sales", "jj@contoso.com"),
            ("empid_Sales", "000223"),
            ("lastname_Sales", "Jones 000223"),
        ])
    );
    assert_eq!(
        env.index
            .lookup(&env.by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap(),
        None
    );
    env.index.remove(("Sales", "000223")).await.unwrap();
    env.drain().await;
    assert_eq!(env.keys().await, BTreeSet::new());
    assert_eq!(env.tombstones().await, set(&[("empid_Sales", "000223")]));
    assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 0);
}

/// A put of a new entity (read, read + claim the email, insert primary, 2
/// copies, re-read = 7 boundaries), an email change (read, read + claim the
/// new email, primary, read + delete the old email copy, 2 copies, re-read
/// = 9) and a remove (read, read + delete
/// each of 2 copies, tombstone, read each copy again = 8), each stopped
/// after every boundary in turn; then a fresh worker finishes.
///
/// Each of the 25 stops has its own tables and queue: all are stopped
/// first, then the visibility timeout passes once for all of them (on
/// Azurite, one real wait instead of 25), then each is recovered.
async fn a_worker_stopped_at_each_step_of_a_change_is_recovered(env: TestEnv) {
    let s = Services::of(&env);
    #[derive(Clone, Copy, Debug)]
    enum Case {
        Insert,
        Change,
        Remove,
    }
    let mut changed = jones();
    changed.email = "jj@contoso.com".into();
    let mut stopped = Vec::new();
    for (case, boundaries) in [(Case::Insert, 7), (Case::Change, 9), (Case::Remove, 8)] {
        for boundary in 1..=boundaries {
            let env = Env::new(&s).await;
            match case {
                Case::Insert => {}
                Case::Change | Case::Remove => {
                    env.index.put(&jones()).await.unwrap();
                    env.drain().await;
                }
            }
            match case {
                Case::Insert => env.index.put(&jones()).await.unwrap(),
                Case::Change => env.index.put(&changed).await.unwrap(),
                Case::Remove => env.index.remove(("Sales", "000223")).await.unwrap(),
            };
            let reached = Arc::new(AtomicUsize::new(0));
            let seen = reached.clone();
            let worker = env
                .worker()
                .step_hook(move |event| {
                    let seen = seen.clone();
                    async move {
                        if let Event::Step { step, .. } = event {
                            if step == boundary {
                                seen.fetch_add(1, Ordering::SeqCst);
                                return Err("stopped".into());
                            }
                        }
                        Ok(())
                    }
                })
                .build()
                .unwrap();
            let report = worker.drain().await.unwrap();
            assert_eq!(report.failed, 1, "{case:?} at {boundary}");
            assert_eq!(reached.load(Ordering::SeqCst), 1, "{case:?} at {boundary}");
            env.assert_no_dangling_copy().await;
            stopped.push((case, boundary, env));
        }
    }

    // Every stopped message was received before this: it is visible again
    // after one timeout (the clock, or Azurite's, is shared by all the envs).
    stopped[0].2.pass_visibility_timeout().await;
    for (case, boundary, env) in stopped {
        env.drain().await;
        let want = match case {
            Case::Insert => set(&[
                ("email_Sales", "jonesj@contoso.com"),
                ("empid_Sales", "000223"),
                ("lastname_Sales", "Jones 000223"),
            ]),
            Case::Change => set(&[
                ("email_Sales", "jj@contoso.com"),
                ("empid_Sales", "000223"),
                ("lastname_Sales", "Jones 000223"),
            ]),
            Case::Remove => BTreeSet::new(),
        };
        assert_eq!(env.keys().await, want, "{case:?} at {boundary}");
        let tombstones = match case {
            Case::Remove => set(&[("empid_Sales", "000223")]),
            Case::Insert | Case::Change => BTreeSet::new(),
        };
        assert_eq!(env.tombstones().await, tombstones, "{case:?} at {boundary}");
        assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 0);
        assert_eq!(env.poison.approximate_message_count().await.unwrap(), 0);
        if let Case::Change = case {
            assert_eq!(
                env.index
                    .lookup(&env.by_email, "Sales", "jj@contoso.com")
                    .await
                    .unwrap(),
                Some(changed.clone())
            );
        }
    }
}

async fn a_verified_lookup_repairs_stale_and_dangling_entries(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.index.put(&jones()).await.unwrap();
    env.drain().await;
    let raw = env.employees.with_type::<DynamicEntity>();
    // A copy under an old value (the primary now says jonesj@), and one whose
    // primary does not exist: what racing changes of one entity can leave.
    let copy = |e: Employee| {
        let mut d = tablekit::codec::to_dynamic(&e).unwrap();
        let primary_row_key = d.row_key.clone();
        d.partition_key = "email_Sales".into();
        d.row_key = e.email.clone();
        d.with(PRIMARY_ROW_KEY, primary_row_key)
    };
    let stale = copy(emp(223, "Jones", "old@contoso.com"));
    let dangling = copy(emp(999, "Ghost", "ghost@contoso.com"));
    raw.insert(&stale).await.unwrap();
    raw.insert(&dangling).await.unwrap();

    // Unverified reads return them as stored.
    assert!(env
        .index
        .lookup(&env.by_email, "Sales", "old@contoso.com")
        .await
        .unwrap()
        .is_some());
    // Verified ones refuse them and delete them.
    assert_eq!(
        env.index
            .lookup_verified(&env.by_email, "Sales", "old@contoso.com")
            .await
            .unwrap(),
        None
    );
    let listed: Vec<String> = env
        .index
        .list_verified(&env.by_email, "Sales", KeyRange::all())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.email)
        .collect();
    assert_eq!(listed, ["jonesj@contoso.com"]);
    assert_eq!(
        env.keys().await,
        set(&[
            ("email_Sales", "jonesj@contoso.com"),
            ("empid_Sales", "000223"),
            ("lastname_Sales", "Jones 000223"),
        ])
    );
}

#[tokio::test]
async fn bad_input_is_refused_before_any_message() {
    let s = common::embedded_services();
    let env = Env::new(&s).await;
    // An email that is not a valid RowKey.
    let bad = emp(5, "Slash", "a/b@contoso.com");
    common::assert_invalid(&env.index.put(&bad).await.unwrap_err());
    // Overlapping prefixes in one table, and a duplicate name.
    let overlapping = InterIndex::unique("emp", "empid_x", |e: &Employee| e.email.clone());
    let table = env.employees.clone();
    let err = InterPartitionIndex::new(table.clone(), "empid_", env.jobs.clone())
        .with_index(&overlapping)
        .unwrap_err();
    common::assert_invalid(&err);
    let twice = InterPartitionIndex::new(table, "empid_", env.jobs.clone())
        .with_index(&env.by_email)
        .unwrap()
        .with_index(&env.by_email);
    common::assert_invalid(&twice.unwrap_err());
    // An index that is not this table's.
    let other = InterIndex::unique("other", "other_", |e: &Employee| e.email.clone());
    common::assert_invalid(&env.index.lookup(&other, "Sales", "x").await.unwrap_err());
    // An entity type with the copies' own property.
    let dynamic = InterPartitionIndex::new(
        env.employees.with_type::<DynamicEntity>(),
        "empid_",
        env.jobs.clone(),
    );
    let err = dynamic
        .put(&DynamicEntity::new("Sales", "000001").with(PRIMARY_ROW_KEY, "x"))
        .await
        .unwrap_err();
    common::assert_invalid(&err);
    assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 0);
}

tablekit::testing::conformance!(
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    two_employees_with_one_last_name_are_both_listed,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    one_jones_leaving_keeps_the_other_findable,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    taking_another_employees_email_is_refused_and_leaves_its_copy,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_refused_change_is_applied_once_the_holder_lets_the_value_go,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_value_range_of_a_non_unique_index_keeps_its_bounds,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_older_change_of_another_entity_keeps_the_value_it_took,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_change_refused_on_its_second_unique_index_gives_back_the_first,
);

fn ids(employees: Vec<Employee>) -> Vec<u32> {
    employees.into_iter().map(|e| e.employee_id).collect()
}

async fn two_employees_with_one_last_name_are_both_listed(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.index
        .put(&emp(223, "Jones", "jonesj@contoso.com"))
        .await
        .unwrap();
    env.index
        .put(&emp(224, "Jones", "jonesk@contoso.com"))
        .await
        .unwrap();
    env.index
        .put(&emp(225, "Jonesy", "jy@contoso.com"))
        .await
        .unwrap();
    env.drain().await;
    let joneses = env
        .index
        .lookup_all(&env.by_name, "Sales", "Jones")
        .await
        .unwrap();
    assert_eq!(ids(joneses), [223, 224]);
    let starting_jones = env
        .index
        .list(&env.by_name, "Sales", KeyRange::prefix("Jones"))
        .await
        .unwrap();
    assert_eq!(ids(starting_jones), [223, 224, 225]);
    let verified = env
        .index
        .list_verified(&env.by_name, "Sales", KeyRange::inclusive("Jones", "Jones"))
        .await
        .unwrap();
    assert_eq!(ids(verified), [223, 224]);
    // A non-unique index has no single answer for a value.
    common::assert_invalid(
        &env.index
            .lookup(&env.by_name, "Sales", "Jones")
            .await
            .unwrap_err(),
    );
}

async fn one_jones_leaving_keeps_the_other_findable(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.index
        .put(&emp(223, "Jones", "jonesj@contoso.com"))
        .await
        .unwrap();
    env.index
        .put(&emp(224, "Jones", "jonesk@contoso.com"))
        .await
        .unwrap();
    env.drain().await;
    env.index
        .put(&emp(223, "Smith", "jonesj@contoso.com"))
        .await
        .unwrap();
    env.drain().await;
    let joneses = env
        .index
        .lookup_all(&env.by_name, "Sales", "Jones")
        .await
        .unwrap();
    assert_eq!(ids(joneses), [224]);
    let smiths = env
        .index
        .lookup_all(&env.by_name, "Sales", "Smith")
        .await
        .unwrap();
    assert_eq!(ids(smiths), [223]);
    // And 224 leaving as well, by a remove.
    env.index.remove(("Sales", "000224")).await.unwrap();
    env.drain().await;
    let joneses = env
        .index
        .lookup_all(&env.by_name, "Sales", "Jones")
        .await
        .unwrap();
    assert!(joneses.is_empty(), "{joneses:?}");
    assert_eq!(
        ids(env
            .index
            .lookup_all(&env.by_name, "Sales", "Smith")
            .await
            .unwrap()),
        [223]
    );
}

/// 224 wants 223's email: the change is refused as a whole (its primary is
/// not written), reported as a constraint violation through the worker
/// (failed, then poisoned with the error), and 223's copy is untouched.
async fn taking_another_employees_email_is_refused_and_leaves_its_copy(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    let kim = emp(224, "Kim", "kim@contoso.com");
    env.index.put(&jones()).await.unwrap();
    env.index.put(&kim).await.unwrap();
    env.drain().await;
    let before = env.keys().await;

    let thief = emp(224, "Kim", "JonesJ@contoso.com");
    env.index.put(&thief).await.unwrap();
    let report = env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!((report.succeeded, report.failed), (0, 1), "{report:?}");
    assert_eq!(
        env.keys().await,
        before,
        "nothing of the change was written"
    );
    assert_eq!(
        env.index.get(("Sales", "000224")).await.unwrap(),
        Some(kim.clone())
    );
    for lookup in [
        env.index
            .lookup(&env.by_email, "Sales", "jonesj@contoso.com")
            .await,
        env.index
            .lookup_verified(&env.by_email, "Sales", "jonesj@contoso.com")
            .await,
    ] {
        assert_eq!(lookup.unwrap(), Some(jones()));
    }
    assert_eq!(
        env.index
            .lookup(&env.by_email, "Sales", "kim@contoso.com")
            .await
            .unwrap(),
        Some(kim)
    );

    // At its last attempt the refusal goes to the poison queue, with the
    // constraint named.
    env.pass_visibility_timeout().await;
    let report = env
        .worker()
        .max_dequeue_count(2)
        .build()
        .unwrap()
        .drain()
        .await
        .unwrap();
    assert_eq!(report.poisoned, 1, "{report:?}");
    let poisoned = env.poison.receive().await.unwrap();
    let poisoned: PoisonedMessage = poisoned[0].json().unwrap();
    assert!(
        poisoned.error.contains(
            r#"unique constraint "email": ("email_Sales", "jonesj@contoso.com") is held by ("Sales", "000223")"#
        ),
        "{poisoned:?}"
    );
    assert_eq!(env.keys().await, before);
    assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 0);
}

/// Delivery is not in order: 224's change to 223's email can run before
/// 223's change away from it. It is refused, retried after the retry
/// delay, and applied once the value is free.
async fn a_refused_change_is_applied_once_the_holder_lets_the_value_go(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.index.put(&jones()).await.unwrap();
    env.drain().await;
    let moved = emp(223, "Jones", "jj@contoso.com");
    let taker = emp(224, "Kim", "jonesj@contoso.com");
    env.index.put(&taker).await.unwrap();
    let report = env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(report.failed, 1, "{report:?}");
    assert_eq!(env.index.get(("Sales", "000224")).await.unwrap(), None);

    env.index.put(&moved).await.unwrap();
    env.drain().await;
    env.pass_visibility_timeout().await;
    env.drain().await;
    assert_eq!(
        env.index
            .lookup(&env.by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap(),
        Some(taker.clone())
    );
    assert_eq!(
        env.index
            .lookup(&env.by_email, "Sales", "jj@contoso.com")
            .await
            .unwrap(),
        Some(moved)
    );
    assert_eq!(
        env.index.get(("Sales", "000224")).await.unwrap(),
        Some(taker)
    );
    assert_eq!(env.poison.approximate_message_count().await.unwrap(), 0);
}

/// Values that are prefixes of each other, and values with spaces and `!`
/// (escaped in the RowKeys): a value range returns exactly its values.
async fn a_value_range_of_a_non_unique_index_keeps_its_bounds(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    for (id, name) in [
        (1, "Van"),
        (2, "Van Dyke"),
        (3, "Vana"),
        (4, "Van"),
        (5, "Van!"),
        (6, "Vb"),
    ] {
        env.index
            .put(&emp(id, name, &format!("e{id}@contoso.com")))
            .await
            .unwrap();
    }
    env.drain().await;
    let list = |range: KeyRange| {
        let env = &env;
        async move { ids(env.index.list(&env.by_name, "Sales", range).await.unwrap()) }
    };
    assert_eq!(
        ids(env
            .index
            .lookup_all(&env.by_name, "Sales", "Van")
            .await
            .unwrap()),
        [1, 4]
    );
    assert_eq!(
        ids(env
            .index
            .lookup_all(&env.by_name, "Sales", "Van Dyke")
            .await
            .unwrap()),
        [2]
    );
    // Value order: "Van" < "Van Dyke" < "Van!" < "Vana" < "Vb".
    assert_eq!(list(KeyRange::all()).await, [1, 4, 2, 5, 3, 6]);
    assert_eq!(list(KeyRange::prefix("Van")).await, [1, 4, 2, 5, 3]);
    assert_eq!(list(KeyRange::prefix("Van ")).await, [2]);
    assert_eq!(list(KeyRange::inclusive("Van", "Van!")).await, [1, 4, 2, 5]);
    assert_eq!(list(KeyRange::half_open("Van", "Van!")).await, [1, 4, 2]);
    assert_eq!(
        list(KeyRange::new(
            std::ops::Bound::Excluded("Van".into()),
            std::ops::Bound::Included("Vana".into())
        ))
        .await,
        [2, 5, 3]
    );
}

/// 224's change to jonesj@ is made first but delivered late (held back);
/// 223's newer change away from jonesj@ pauses at its primary write. Its
/// copy still holds jonesj@, so 224's change is refused for now: two
/// primaries never show the value. Once 223's change has written its
/// primary and deleted the copy it moved off, 224's retry takes jonesj@
/// (with a stamp older than 223's), and keeps it.
async fn an_older_change_of_another_entity_keeps_the_value_it_took(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.index.put(&jones()).await.unwrap();
    env.drain().await;
    let taker = emp(224, "Kim", "jonesj@contoso.com");
    env.index.put(&taker).await.unwrap();
    let report = env
        .worker()
        .concurrency(1)
        .retry_delay(Duration::from_secs(1))
        .step_hook(|event| async move {
            match event {
                Event::Step { step: 1, .. } => Err("held back".into()),
                _ => Ok(()),
            }
        })
        .build()
        .unwrap()
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.failed, 1, "{report:?}");
    let moved = emp(223, "Jones", "jj@contoso.com");
    env.index.put(&moved).await.unwrap();
    let primary_write = format!("replace_if_unchanged {}", env.employees.name());
    let paused = Paused::when(&env, move |_, name| name == primary_write)
        .start()
        .await
        .expect("223's change writes its primary");
    match &env.s.clock {
        Some(clock) => clock.advance(Duration::from_secs(2)),
        None => tokio::time::sleep(Duration::from_millis(1100)).await,
    }
    let report = env
        .worker()
        .retry_delay(Duration::from_secs(1))
        .build()
        .unwrap()
        .drain()
        .await
        .unwrap();
    assert_eq!(report.failed, 1, "224's change waits: {report:?}");
    paused.finish().await;
    match &env.s.clock {
        Some(clock) => clock.advance(Duration::from_secs(2)),
        None => tokio::time::sleep(Duration::from_millis(1100)).await,
    }
    let report = env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(report.succeeded, 1, "224's change ran: {report:?}");
    assert_eq!(
        env.index
            .lookup_verified(&env.by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap(),
        Some(taker)
    );
    assert_eq!(
        env.index
            .lookup(&env.by_email, "Sales", "jj@contoso.com")
            .await
            .unwrap(),
        Some(moved)
    );
}

/// The `(level, fields)` of every event, recorded by a subscriber of the
/// test's own.
#[derive(Default, Clone)]
struct Events(Arc<std::sync::Mutex<Vec<Recorded>>>);

type Recorded = (tracing::Level, Vec<(String, String)>);

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl tracing::Subscriber for Events {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Vec::new();
        event.record(&mut Fields(&mut fields));
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), fields));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn a_refusal_is_a_warn_event_naming_the_index_the_value_and_both_employees() {
    let events = Events::default();
    tracing::subscriber::with_default(events.clone(), || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let env = Env::new(&common::embedded_services()).await;
            env.index.put(&jones()).await.unwrap();
            env.drain().await;
            env.index
                .put(&emp(224, "Kim", "jonesj@contoso.com"))
                .await
                .unwrap();
            let report = env.worker().build().unwrap().drain().await.unwrap();
            assert_eq!(report.failed, 1, "{report:?}");
        });
    });
    let events = events.0.lock().unwrap();
    let refusal = events
        .iter()
        .find(|(_, fields)| {
            fields.iter().any(|(name, value)| {
                name == "message" && value.contains("unique value is held by another entity")
            })
        })
        .unwrap_or_else(|| panic!("no refusal event in {events:?}"));
    assert_eq!(refusal.0, tracing::Level::WARN);
    let field = |name: &str| {
        refusal
            .1
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(field("index"), Some("email"));
    assert_eq!(field("value"), Some("jonesj@contoso.com"));
    assert_eq!(field("partition_key"), Some("Sales"));
    assert_eq!(field("primary"), Some("000224"));
    assert_eq!(field("held_by"), Some("000223"));
}

/// Two unique indexes (email, and the last name as a badge). 223 keeps its
/// email and asks for the badge "Lee". Its first attempt restamps its email
/// copy (its claim on the value it keeps) and stops; then 225 takes "Lee".
/// The next attempt is refused and gives the email copy back as the primary
/// shows it: the same stamp, no claim left. Without the stop, the refusal
/// comes before any write.
async fn a_change_refused_on_its_second_unique_index_gives_back_the_first(env: TestEnv) {
    let s = Services::of(&env);
    for stop_after_restamp in [false, true] {
        let env = Env::new(&s).await;
        let by_badge = InterIndex::unique("badge", "badge_", |e: &Employee| e.last_name.clone());
        let index = InterPartitionIndex::new(env.employees.clone(), "empid_", env.jobs.clone())
            .with_index(&env.by_email)
            .unwrap()
            .with_index(&by_badge)
            .unwrap();
        let worker = |stop: bool| {
            index
                .attach(Worker::builder(env.jobs.clone(), env.s.tables.clone()))
                .poison_queue(env.poison.clone())
                .visibility_timeout(env.s.visibility)
                .retry_delay(Duration::from_secs(1))
                .concurrency(1)
                .step_hook(move |event| async move {
                    match event {
                        // read primary, read email copy, read badge copy,
                        // restamp the email copy.
                        Event::Step {
                            step: 4,
                            dequeue_count: 1,
                            name,
                            ..
                        } if stop => {
                            assert!(name.starts_with("replace_if_unchanged"), "{name}");
                            Err("stopped after the restamp".into())
                        }
                        _ => Ok(()),
                    }
                })
                .build()
                .unwrap()
        };
        index.put(&jones()).await.unwrap();
        worker(false).drain().await.unwrap();
        let raw = env.employees.with_type::<DynamicEntity>();
        let before = raw.query().fetch_all().await.unwrap();
        let lee = emp(225, "Lee", "lee@contoso.com");

        let change = emp(223, "Lee", "jonesj@contoso.com");
        if stop_after_restamp {
            index.put(&change).await.unwrap();
            let report = worker(true).run_once().await.unwrap();
            assert_eq!(report.failed, 1, "{report:?}");
            index.put(&lee).await.unwrap();
            worker(false).drain().await.unwrap();
            match &env.s.clock {
                Some(clock) => clock.advance(Duration::from_secs(2)),
                None => tokio::time::sleep(Duration::from_millis(1100)).await,
            }
        } else {
            index.put(&lee).await.unwrap();
            worker(false).drain().await.unwrap();
            index.put(&change).await.unwrap();
        }
        let report = worker(false).drain().await.unwrap();
        assert_eq!(report.failed, 1, "{report:?}");
        let after: Vec<DynamicEntity> = raw
            .query()
            .fetch_all()
            .await
            .unwrap()
            .into_iter()
            .filter(|d| !["Lee", "lee@contoso.com", "000225"].contains(&d.row_key.as_str()))
            .collect();
        let view = |rows: &[DynamicEntity]| -> Vec<(String, String, Option<EdmValue>, bool)> {
            rows.iter()
                .map(|d| {
                    (
                        d.partition_key.clone(),
                        d.row_key.clone(),
                        d.get(CHANGE_STAMP).cloned(),
                        d.get(PENDING).is_some(),
                    )
                })
                .collect()
        };
        assert_eq!(view(&after), view(&before), "stop: {stop_after_restamp}");
        assert_eq!(
            index
                .lookup(&env.by_email, "Sales", "jonesj@contoso.com")
                .await
                .unwrap(),
            Some(jones())
        );
        assert_eq!(
            index.lookup(&by_badge, "Sales", "Lee").await.unwrap(),
            Some(lee)
        );
    }
}
