//! Relationships (seed §5.7, §3.14): one-to-many in one partition with the
//! count in the same transaction and moves between departments through the
//! worker; one-to-one links, explicit and by key convention; the join in the
//! client over a cached table; the materialized view kept by the worker.
//!
//! The cases run on every backend (Azurite, the embedded store in memory
//! and in a file). A move is stopped between its two transactions (a crash,
//! and a failing step), delivered twice, run by two workers at once, and
//! raced by a change of the employee; the model-based test composes random
//! hires, fires, moves and redeliveries and checks, after each drain, that
//! every department holds exactly the employees the model says and counts
//! them. The view's model composes random writes, renames, deletes,
//! redeliveries and stopped workers and checks after each drain that the
//! view is exactly the projection of the source.

use crate::common;
use tablekit::testing::TestEnv;

use common::Services;

use std::collections::{BTreeMap, BTreeSet};
use std::future::pending;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tablekit::{
    clock::ManualClock, filter::EntityColumns, DynamicEntity, EdmValue, EntityKey, IfMatch,
    QueueClient, TableClient, TableEntity, TableServiceClient, UpdateMode,
};
use tablekit_patterns::eventual::{Event, StepContext, Worker, WorkerBuilder};
use tablekit_patterns::relationships::{
    KeyConvention, Link, LookupCache, MaterializedView, Move, OneToMany,
};
use tablekit_patterns::summary::CountedPartition;
use tokio::sync::{mpsc, Notify};

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    name: String,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "Department")]
struct Department {
    department: String,
    employee_count: i32,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
enum Staff {
    Employee(Employee),
    Department(Department),
}

fn employee(department: &str, id: u32) -> Employee {
    Employee {
        department: department.into(),
        employee_id: id,
        name: format!("employee {id}"),
    }
}

fn rk(id: u32) -> String {
    format!("{id:06}")
}

/// Lets every hidden message become visible again: the clock moved past
/// the visibility timeout, or (on Azurite) the timeout waited out.
async fn pass_visibility_timeout(s: &Services) {
    match &s.clock {
        Some(clock) => clock.advance(s.visibility + Duration::from_secs(1)),
        None => tokio::time::sleep(s.visibility + Duration::from_millis(700)).await,
    }
}

// ---------------------------------------------------------------------------
// One-to-many and moves.

/// A staff table, its moves' queues, and how time passes.
struct Moves {
    s: Services,
    table: TableClient<Staff>,
    staff: OneToMany<Staff>,
    jobs: QueueClient,
    poison: QueueClient,
}

impl Moves {
    async fn new(s: &Services) -> Moves {
        let (jobs, poison) = common::fresh_queues(&s.queues, "moves-").await;
        Moves::in_queue(s, jobs, poison).await
    }

    /// Another staff table on the same queues.
    async fn in_queue(s: &Services, jobs: QueueClient, poison: QueueClient) -> Moves {
        let table = common::fresh_table::<Staff>(&s.tables, "Staff").await;
        let counted = CountedPartition::new(
            table.clone(),
            "Department",
            Department::columns().employee_count,
        )
        .with_summary_property("EntityType", "Department");
        Moves {
            s: s.clone(),
            staff: OneToMany::new(counted, jobs.clone()),
            table,
            jobs,
            poison,
        }
    }

    fn worker(&self) -> WorkerBuilder {
        self.staff
            .attach(Worker::builder(self.jobs.clone(), self.s.tables.clone()))
            .poison_queue(self.poison.clone())
            .visibility_timeout(self.s.visibility)
            .retry_delay(self.s.visibility)
            .concurrency(4)
    }

    async fn hire(&self, department: &str, id: u32) {
        self.staff
            .insert(&mut Staff::Employee(employee(department, id)))
            .await
            .unwrap();
    }

    /// The employees of a department, read through the one typed query.
    async fn ids(&self, department: &str) -> Vec<u32> {
        let partition: Vec<Staff> = self.staff.read_partition(department).await.unwrap();
        partition
            .into_iter()
            .filter_map(|e| match e {
                Staff::Employee(e) => Some(e.employee_id),
                Staff::Department(_) => None,
            })
            .collect()
    }

    async fn employee(&self, department: &str, id: u32) -> Option<Employee> {
        match self.table.get((department, rk(id))).await.unwrap() {
            Some(Staff::Employee(e)) => Some(e),
            other => {
                assert!(other.is_none(), "{other:?}");
                None
            }
        }
    }

    /// Each department counts exactly the employees in its partition.
    async fn assert_counts_right(&self, departments: &[&str]) {
        for d in departments {
            let ids = self.ids(d).await;
            assert_eq!(
                self.staff.count(d).await.unwrap(),
                ids.len() as i32,
                "{}: {d} holds {ids:?}",
                self.table.name()
            );
        }
    }

    async fn assert_queues_empty(&self) {
        assert_eq!(self.jobs.approximate_message_count().await.unwrap(), 0);
        assert_eq!(self.poison.approximate_message_count().await.unwrap(), 0);
    }
}

tablekit::testing::conformance!(a_department_and_its_employees_are_one_query_and_one_transaction);

/// Two departments in each of two tables with the same PartitionKeys: the
/// inserts and deletes keep each table's counts, read back in one typed
/// query per department; the tables do not see each other's.
async fn a_department_and_its_employees_are_one_query_and_one_transaction(env: TestEnv) {
    let svc = env.tables().clone();
    let mut tables = Vec::new();
    for _ in 0..2 {
        let table = common::fresh_table::<Staff>(&svc, "Staff").await;
        let counted = CountedPartition::new(
            table.clone(),
            "Department",
            Department::columns().employee_count,
        )
        .with_summary_property("EntityType", "Department");
        tables.push(counted);
    }
    for (t, counted) in tables.iter().enumerate() {
        for id in 0..(3 + t as u32) {
            for d in ["Sales", "Marketing"] {
                let mut e = Staff::Employee(employee(d, id));
                counted.insert(&mut e).await.unwrap();
            }
        }
        counted
            .delete(("Sales", rk(0)), IfMatch::Any)
            .await
            .unwrap();
    }
    for (t, counted) in tables.iter().enumerate() {
        let n = 3 + t as i32;
        let before = counted.table().stats().transactions;
        let sales: Vec<Staff> = counted.read_partition("Sales").await.unwrap();
        assert_eq!(
            counted.table().stats().transactions - before,
            1,
            "one query"
        );
        let mut want: Vec<Staff> = (1..n as u32)
            .map(|id| Staff::Employee(employee("Sales", id)))
            .collect();
        want.push(Staff::Department(Department {
            department: "Sales".into(),
            employee_count: n - 1,
        }));
        assert_eq!(sales, want);
        assert_eq!(counted.count("Marketing").await.unwrap(), n);
    }
}

tablekit::testing::conformance!(
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_move_costs_six_table_requests_and_a_view_change_four_plus_its_rows,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    moves_between_departments_run_concurrently_keep_every_count,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_move_delivered_twice_or_run_by_two_workers_leaves_one_copy,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_move_stopped_between_its_two_transactions_is_finished_by_the_next_delivery,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_employee_changed_during_a_move_arrives_in_its_new_version,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    two_moves_of_one_employee_at_once_keep_the_counts_right,
);

/// The requests the docs list: a move is a read of the employee, a read of
/// its copy and of the new department plus one transaction, then a read of
/// the old department plus one transaction. A view change of an employee
/// renamed: two reads, the listing, one upsert, one delete, the listing.
async fn a_move_costs_six_table_requests_and_a_view_change_four_plus_its_rows(env: TestEnv) {
    let s = Services::of(&env);
    let env = Moves::new(&s).await;
    env.hire("Sales", 1).await;
    env.hire("Marketing", 2).await;
    env.staff
        .move_to(("Sales", rk(1)), "Marketing")
        .await
        .unwrap();
    let before = env.table.stats().transactions;
    env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(env.table.stats().transactions - before, 6);

    let v = Views::new(&s).await;
    v.write("Sales", 1, "Jones").await;
    v.drain().await;
    v.write("Sales", 1, "Smith").await;
    let stats = || {
        [
            v.staff.stats(),
            v.view.view().stats(),
            v.view.keys().stats(),
        ]
        .iter()
        .map(|s| s.transactions)
        .sum::<u64>()
    };
    let before = stats();
    v.drain().await;
    assert_eq!(stats() - before, 6, "4 + 1 upsert + 1 delete");
}

/// Sales and Marketing swap four employees each way while, in a second
/// table with the same departments, Marketing sends three to Legal: one
/// queue, one worker running four messages at a time.
async fn moves_between_departments_run_concurrently_keep_every_count(env: TestEnv) {
    let s = Services::of(&env);
    let a = Moves::new(&s).await;
    let b = Moves::in_queue(&s, a.jobs.clone(), a.poison.clone()).await;
    for id in 0..8 {
        a.hire("Sales", id).await;
        a.hire("Marketing", 100 + id).await;
        b.hire("Marketing", id).await;
    }
    for id in 0..4 {
        a.staff
            .move_to(("Sales", rk(id)), "Marketing")
            .await
            .unwrap();
        a.staff
            .move_to(("Marketing", rk(100 + id)), "Sales")
            .await
            .unwrap();
    }
    for id in 0..3 {
        b.staff
            .move_to(("Marketing", rk(id)), "Legal")
            .await
            .unwrap();
    }
    let worker = b.staff.attach(a.worker()).build().unwrap();
    let report = worker.drain().await.unwrap();
    assert_eq!(
        (report.succeeded, report.failed, report.poisoned),
        (11, 0, 0),
        "{report:?}"
    );
    assert_eq!(a.ids("Sales").await, [4, 5, 6, 7, 100, 101, 102, 103]);
    assert_eq!(a.ids("Marketing").await, [0, 1, 2, 3, 104, 105, 106, 107]);
    assert_eq!(a.ids("Legal").await, Vec::<u32>::new());
    assert_eq!(b.ids("Marketing").await, [3, 4, 5, 6, 7]);
    assert_eq!(b.ids("Legal").await, [0, 1, 2]);
    assert_eq!(b.ids("Sales").await, Vec::<u32>::new());
    a.assert_counts_right(&["Sales", "Marketing", "Legal"])
        .await;
    b.assert_counts_right(&["Sales", "Marketing", "Legal"])
        .await;
    // The moved entity is the employee, its new department in its key.
    let moved = a.employee("Marketing", 2).await.unwrap();
    assert_eq!(moved, employee("Marketing", 2));
    a.assert_queues_empty().await;
}

/// The same move enqueued twice (a redelivery) and run by a worker four at
/// a time, then once more after it finished, then twice at once in place:
/// one copy, the counts moved once.
async fn a_move_delivered_twice_or_run_by_two_workers_leaves_one_copy(env: TestEnv) {
    let s = Services::of(&env);
    let env = Moves::new(&s).await;
    for id in 0..3 {
        env.hire("Sales", id).await;
    }
    for _ in 0..2 {
        env.staff
            .move_to(("Sales", rk(0)), "Marketing")
            .await
            .unwrap();
    }
    let report = env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!((report.succeeded, report.failed), (2, 0), "{report:?}");
    env.staff
        .move_to(("Sales", rk(0)), "Marketing")
        .await
        .unwrap();
    env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(env.ids("Sales").await, [1, 2]);
    assert_eq!(env.ids("Marketing").await, [0]);
    env.assert_counts_right(&["Sales", "Marketing"]).await;

    // Two runs of one move at the same time (two workers holding the same
    // message after its visibility lapsed), in place.
    let m = Move {
        partition_key: "Sales".into(),
        row_key: rk(1),
        to: "Marketing".into(),
    };
    let ctx = || StepContext::detached(s.tables.clone(), None);
    let (c1, c2) = (ctx(), ctx());
    let (one, two) = tokio::join!(env.staff.apply_move(&m, &c1), env.staff.apply_move(&m, &c2));
    one.unwrap();
    two.unwrap();
    assert_eq!(env.ids("Sales").await, [2]);
    assert_eq!(env.ids("Marketing").await, [0, 1]);
    env.assert_counts_right(&["Sales", "Marketing"]).await;
    env.assert_queues_empty().await;
}

/// Each worker of a first run stops right after the first transaction (the
/// copy and Marketing's count), by a crash (its task aborted) or by the
/// step failing. In between a reader sees each employee in both
/// departments, both counting it; the next delivery finishes the move.
async fn a_move_stopped_between_its_two_transactions_is_finished_by_the_next_delivery(
    env: TestEnv,
) {
    let s = Services::of(&env);
    let mut stopped = Vec::new();
    for crash in [true, false] {
        let env = Moves::new(&s).await;
        for id in 0..4 {
            env.hire("Sales", id).await;
            env.staff
                .move_to(("Sales", rk(id)), "Marketing")
                .await
                .unwrap();
        }
        let (reached, mut at_boundary) = mpsc::unbounded_channel::<String>();
        let worker = env
            .worker()
            .step_hook(move |event| {
                let reached = reached.clone();
                async move {
                    if let Event::Step { step: 2, name, .. } = event {
                        reached.send(name).unwrap();
                        if crash {
                            pending::<()>().await; // held here until aborted
                        }
                        return Err("stopped between the transactions".into());
                    }
                    Ok(())
                }
            })
            .build()
            .unwrap();
        if crash {
            let task = tokio::spawn(async move { worker.run(pending()).await });
            for _ in 0..4 {
                let name = at_boundary.recv().await.unwrap();
                assert!(name.contains("with the count of Marketing"), "{name}");
            }
            task.abort();
            assert!(task.await.unwrap_err().is_cancelled());
        } else {
            let report = worker.drain().await.unwrap();
            assert_eq!(report.succeeded, 0, "{report:?}");
            assert!(report.failed >= 4, "{report:?}");
        }
        // What a reader sees between the two transactions.
        assert_eq!(env.ids("Sales").await, [0, 1, 2, 3]);
        assert_eq!(env.ids("Marketing").await, [0, 1, 2, 3]);
        env.assert_counts_right(&["Sales", "Marketing"]).await;
        stopped.push(env);
    }
    pass_visibility_timeout(&s).await;
    for env in stopped {
        let report = env.worker().build().unwrap().drain().await.unwrap();
        assert_eq!(
            (report.succeeded, report.failed, report.poisoned),
            (4, 0, 0),
            "{report:?}"
        );
        assert_eq!(env.ids("Sales").await, Vec::<u32>::new());
        assert_eq!(env.ids("Marketing").await, [0, 1, 2, 3]);
        env.assert_counts_right(&["Sales", "Marketing"]).await;
        env.assert_queues_empty().await;
    }
}

/// Someone renames the employee after the copy is written and before the
/// old entity is deleted: the delete under the ETag read refuses, the move
/// starts again from the read, and the new department gets the new name.
async fn an_employee_changed_during_a_move_arrives_in_its_new_version(env: TestEnv) {
    let s = Services::of(&env);
    let env = Moves::new(&s).await;
    env.hire("Sales", 7).await;
    env.staff
        .move_to(("Sales", rk(7)), "Marketing")
        .await
        .unwrap();
    let other = common::second_service(&s.tables)
        .table::<Staff>(env.table.name())
        .unwrap();
    let renamed = Arc::new(AtomicBool::new(false));
    let steps = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (seen, once) = (steps.clone(), renamed.clone());
    let worker = env
        .worker()
        .step_hook(move |event| {
            let (other, once, seen) = (other.clone(), once.clone(), seen.clone());
            async move {
                if let Event::Step { step, name, .. } = event {
                    seen.lock().unwrap().push(name);
                    if step == 2 && !once.swap(true, Ordering::SeqCst) {
                        let mut e = employee("Sales", 7);
                        e.name = "renamed".into();
                        other
                            .upsert(&Staff::Employee(e), UpdateMode::Replace)
                            .await
                            .unwrap();
                    }
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let report = worker.drain().await.unwrap();
    assert_eq!((report.succeeded, report.failed), (1, 0), "{report:?}");
    assert_eq!(
        steps.lock().unwrap().len(),
        6,
        "read, copy, refused delete, then again"
    );
    assert_eq!(env.employee("Sales", 7).await, None);
    assert_eq!(env.employee("Marketing", 7).await.unwrap().name, "renamed");
    env.assert_counts_right(&["Sales", "Marketing"]).await;
}

/// What the docs say is not guaranteed: two moves of one employee to two
/// departments in flight at once can leave a copy in each. The counts stay
/// right whatever happens.
async fn two_moves_of_one_employee_at_once_keep_the_counts_right(env: TestEnv) {
    let s = Services::of(&env);
    let env = Moves::new(&s).await;
    env.hire("Sales", 1).await;
    let to = |d: &str| Move {
        partition_key: "Sales".into(),
        row_key: rk(1),
        to: d.into(),
    };
    let ctx = || StepContext::detached(s.tables.clone(), None);
    let (c1, c2, m1, m2) = (ctx(), ctx(), to("Marketing"), to("Legal"));
    let (a, b) = tokio::join!(
        env.staff.apply_move(&m1, &c1),
        env.staff.apply_move(&m2, &c2)
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(env.ids("Sales").await, Vec::<u32>::new());
    let copies = env.ids("Marketing").await.len() + env.ids("Legal").await.len();
    assert!((1..=2).contains(&copies), "{copies} copies");
    env.assert_counts_right(&["Sales", "Marketing", "Legal"])
        .await;
}

#[tokio::test]
async fn a_move_is_refused_before_any_request_when_it_cannot_run() {
    let s = common::embedded_services();
    let env = Moves::new(&s).await;
    for (from, to) in [
        (EntityKey::new("Sales", "000001"), "Sales"),
        (EntityKey::new("Sales", "Department"), "Marketing"),
        (EntityKey::new("Sales", "000001"), "Mar/keting"),
        (EntityKey::new("Sa#les", "000001"), "Marketing"),
    ] {
        let err = env.staff.move_to(from.clone(), to).await.unwrap_err();
        common::assert_invalid(&err);
    }
    assert_eq!(env.jobs.approximate_message_count().await.unwrap(), 0);
    let m = env.jobs.clone();
    tablekit_patterns::eventual::Eventual::new(m)
        .enqueue_kind(
            env.staff.kind(),
            &Move {
                partition_key: "Sales".into(),
                row_key: "000001".into(),
                to: "Sales".into(),
            },
        )
        .await
        .unwrap();
    // A message that could never run fails every attempt and is poisoned.
    let report = env
        .worker()
        .max_dequeue_count(1)
        .build()
        .unwrap()
        .drain()
        .await
        .unwrap();
    assert_eq!(report.poisoned, 1, "{report:?}");
}

// The model: random hires, fires, moves and redeliveries.

const DEPARTMENTS: [&str; 3] = ["Sales", "Marketing", "Legal"];

#[derive(Debug, Clone)]
enum Op {
    Hire {
        id: u32,
        department: usize,
    },
    Fire {
        id: u32,
    },
    Move {
        id: u32,
        to: usize,
    },
    /// The last move's message, sent again (a redelivery).
    Redeliver,
    /// A worker runs the queue, the first move it runs failing between
    /// its two transactions (where a crash would stop it): its next
    /// delivery finds the copy written (where a clock can be moved past
    /// the retry delay; not on Azurite).
    StopBetween,
    Drain,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..6u32, 0..3usize).prop_map(|(id, department)| Op::Hire { id, department }),
        1 => (0..6u32).prop_map(|id| Op::Fire { id }),
        4 => (0..6u32, 0..3usize).prop_map(|(id, to)| Op::Move { id, to }),
        1 => Just(Op::Redeliver),
        1 => Just(Op::StopBetween),
        1 => Just(Op::Drain),
    ]
}

async fn drain_and_check(env: &Moves, model: &BTreeMap<u32, &str>) {
    if let Some(clock) = &env.s.clock {
        clock.advance(env.s.visibility + Duration::from_secs(1)); // past any retry delay
    }
    let report = env.worker().build().unwrap().drain().await.unwrap();
    assert_eq!((report.failed, report.poisoned), (0, 0), "{report:?}");
    for d in DEPARTMENTS {
        let want: Vec<u32> = model
            .iter()
            .filter(|(_, at)| **at == d)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(env.ids(d).await, want, "{d}");
    }
    env.assert_counts_right(&DEPARTMENTS).await;
    env.assert_queues_empty().await;
}

async fn run_model(s: Services, ops: Vec<Op>) {
    let env = Moves::new(&s).await;
    // Where each employee is once the moves enqueued so far are done.
    let mut model: BTreeMap<u32, &str> = BTreeMap::new();
    let mut moving: BTreeSet<u32> = BTreeSet::new();
    let mut last: Option<(u32, &str, &str)> = None;
    for op in ops {
        match op {
            Op::Hire { id, department } if !model.contains_key(&id) => {
                env.hire(DEPARTMENTS[department], id).await;
                model.insert(id, DEPARTMENTS[department]);
            }
            // The contract of the docs: no delete while a move is pending.
            Op::Fire { id } if model.contains_key(&id) && !moving.contains(&id) => {
                let d = model.remove(&id).unwrap();
                env.staff.delete((d, rk(id)), IfMatch::Any).await.unwrap();
            }
            // One move of an employee at a time.
            Op::Move { id, to } if !moving.contains(&id) => {
                let to = DEPARTMENTS[to];
                if let Some(from) = model.get(&id).copied().filter(|from| *from != to) {
                    env.staff.move_to((from, rk(id)), to).await.unwrap();
                    model.insert(id, to);
                    moving.insert(id);
                    last = Some((id, from, to));
                }
            }
            // Sent again while pending, or after it finished as long as
            // the employee is still where it took it.
            Op::Redeliver => {
                if let Some((id, from, to)) = last {
                    if moving.contains(&id) || model.get(&id) == Some(&to) {
                        env.staff.move_to((from, rk(id)), to).await.unwrap();
                    }
                }
            }
            Op::StopBetween if env.s.clock.is_some() => {
                let stopped = Arc::new(AtomicBool::new(false));
                let worker = env
                    .worker()
                    .step_hook(move |event| {
                        let stopped = stopped.clone();
                        async move {
                            match event {
                                Event::Step { step: 2, .. }
                                    if !stopped.swap(true, Ordering::SeqCst) =>
                                {
                                    Err("stopped between the transactions".into())
                                }
                                _ => Ok(()),
                            }
                        }
                    })
                    .build()
                    .unwrap();
                worker.drain().await.unwrap();
                env.assert_counts_right(&DEPARTMENTS).await;
            }
            Op::Drain => {
                drain_and_check(&env, &model).await;
                moving.clear();
            }
            _ => {}
        }
    }
    drain_and_check(&env, &model).await;
}

fn run(cases: u32, max_ops: usize, services: impl Fn() -> Services) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 1..max_ops), |ops| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(run_model(services(), ops));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn random_moves_hires_and_fires_leave_every_count_right_embedded() {
    run(48, 30, common::embedded_services);
}

#[test]
fn random_moves_hires_and_fires_leave_every_count_right_embedded_file() {
    // The file backend's scratch folder, removed with `env`.
    let env = TestEnv::file();
    let dir = env
        .scratch_dir()
        .expect("the file backend has a scratch folder");
    let n = AtomicUsize::new(0);
    run(6, 20, || {
        let sub = n.fetch_add(1, Ordering::SeqCst);
        let clock = ManualClock::starting_now();
        Services {
            tables: TableServiceClient::embedded_at(dir.join(format!("t{sub}.redb"))).unwrap(),
            queues: tablekit::QueueServiceClient::embedded_at_with_clock(
                dir.join(format!("q{sub}.redb")),
                clock.clone(),
            )
            .unwrap(),
            blobs: tablekit::BlobServiceClient::embedded(),
            clock: Some(clock),
            visibility: Duration::from_secs(30),
        }
    });
}

#[test]
fn random_moves_hires_and_fires_leave_every_count_right_azurite() {
    if common::azurite_services().is_none() {
        return;
    }
    run(3, 14, || common::azurite_services().unwrap());
}

// ---------------------------------------------------------------------------
// One-to-one.

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "Department")]
struct ManagedDepartment {
    department: String,
    #[tablekit(flatten)]
    manager: Link<Employee>,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}_details")]
struct Details {
    department: String,
    employee_id: u32,
    biography: String,
}

tablekit::testing::conformance!(links_resolve_in_one_point_read);

/// Two departments each name their manager (an explicit link stored as two
/// properties); employees' details are found by key convention, in a
/// second table with the same PartitionKeys. Each resolve is one point
/// read; a link to a deleted entity resolves to `None`.
async fn links_resolve_in_one_point_read(env: TestEnv) {
    let svc = env.tables().clone();
    let staff = common::fresh_table::<Employee>(&svc, "Staff").await;
    let departments = staff.with_type::<ManagedDepartment>();
    let details = common::fresh_table::<Details>(&svc, "Details").await;
    for (d, id) in [("Sales", 1), ("Marketing", 2)] {
        let manager = employee(d, id);
        staff.insert(&manager).await.unwrap();
        departments
            .insert(&ManagedDepartment {
                department: d.into(),
                manager: Link::to(&manager),
            })
            .await
            .unwrap();
        details
            .insert(&Details {
                department: d.into(),
                employee_id: id,
                biography: format!("bio {id}"),
            })
            .await
            .unwrap();
    }
    // Stored as two properties of the holder.
    let raw = staff
        .with_type::<DynamicEntity>()
        .get(("Marketing", "Department"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        raw.get("Manager_PartitionKey"),
        Some(&EdmValue::String("Marketing".into()))
    );
    assert_eq!(raw.get("Manager_RowKey"), Some(&EdmValue::String(rk(2))));

    let details_of = KeyConvention::<Employee, Details>::new(|pk, rk| {
        EntityKey::new(pk, format!("{rk}_details"))
    });
    for (d, id) in [("Sales", 1), ("Marketing", 2)] {
        let department = departments.get((d, "Department")).await.unwrap().unwrap();
        assert_eq!(department.manager, Link::new((d, rk(id))));
        let before = staff.stats().transactions;
        let manager = department.manager.resolve(&staff).await.unwrap().unwrap();
        assert_eq!(staff.stats().transactions - before, 1, "one point read");
        assert_eq!(manager, employee(d, id));

        let before = details.stats().transactions;
        let bio = details_of
            .resolve(&manager, &details)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(details.stats().transactions - before, 1, "one point read");
        assert_eq!(bio.biography, format!("bio {id}"));
        assert_eq!(details_of.link(&manager).key(), bio.key());
    }
    staff.delete(("Sales", rk(1)), IfMatch::Any).await.unwrap();
    let sales = departments
        .get(("Sales", "Department"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sales.manager.resolve(&staff).await.unwrap(), None);
    // A holder without the link's properties does not decode.
    staff
        .with_type::<DynamicEntity>()
        .insert(&DynamicEntity::new("Legal", "Department"))
        .await
        .unwrap();
    let err = departments.get(("Legal", "Department")).await.unwrap_err();
    assert!(err.to_string().contains("Manager_PartitionKey"), "{err}");
}

// ---------------------------------------------------------------------------
// Join in the client.

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "Departments", row_key = "{name}")]
struct DepartmentInfo {
    name: String,
    floor: i32,
}

const TTL: Duration = Duration::from_secs(600);

async fn departments(svc: &TableServiceClient) -> TableClient<DepartmentInfo> {
    let table = common::fresh_table::<DepartmentInfo>(svc, "Departments").await;
    for (name, floor) in [("Sales", 1), ("Marketing", 2)] {
        table
            .insert(&DepartmentInfo {
                name: name.into(),
                floor,
            })
            .await
            .unwrap();
    }
    table
}

fn dept(name: &str) -> EntityKey {
    EntityKey::new("Departments", name)
}

tablekit::testing::conformance!(
    the_cache_loads_once_per_time_to_live_and_on_refresh,
    readers_arriving_at_an_expired_cache_wait_for_one_load,
    the_join_pairs_each_employee_with_its_department,
);

async fn the_cache_loads_once_per_time_to_live_and_on_refresh(env: TestEnv) {
    let svc = env.tables().clone();
    let table = departments(&svc).await;
    let clock = ManualClock::starting_now();
    let cache = LookupCache::new(table.clone(), TTL).with_clock(clock.clone());
    assert_eq!(cache.get(dept("Sales")).await.unwrap().unwrap().floor, 1);
    let requests = table.stats().transactions;
    for _ in 0..5 {
        assert_eq!(
            cache.get(dept("Marketing")).await.unwrap().unwrap().floor,
            2
        );
    }
    assert_eq!(
        table.stats().transactions,
        requests,
        "served from the cache"
    );
    assert_eq!(cache.loads(), 1);

    // A change is seen after the time to live, not before.
    table
        .upsert(
            &DepartmentInfo {
                name: "Sales".into(),
                floor: 9,
            },
            UpdateMode::Replace,
        )
        .await
        .unwrap();
    clock.advance(TTL - Duration::from_secs(1));
    assert_eq!(cache.get(dept("Sales")).await.unwrap().unwrap().floor, 1);
    clock.advance(Duration::from_secs(1));
    assert_eq!(cache.get(dept("Sales")).await.unwrap().unwrap().floor, 9);
    assert_eq!(cache.loads(), 2);

    // Re-validation on demand: refresh, or invalidate and read.
    table
        .delete(("Departments", "Marketing"), IfMatch::Any)
        .await
        .unwrap();
    let snapshot = cache.refresh().await.unwrap();
    assert_eq!((snapshot.len(), cache.loads()), (1, 3));
    assert_eq!(snapshot.loaded_at(), clock.now());
    assert_eq!(cache.get(dept("Marketing")).await.unwrap(), None);
    cache.invalidate();
    cache.get(dept("Sales")).await.unwrap();
    assert_eq!(cache.loads(), 4);

    // A table that is not small is refused.
    let small = LookupCache::new(table.clone(), TTL).max_entities(0);
    assert!(small.snapshot().await.unwrap_err().is_invalid_input());
    // One partition of a table.
    let other = LookupCache::new(table.clone(), TTL).partition("Elsewhere");
    assert!(other.snapshot().await.unwrap().is_empty());
}

/// Sixteen readers arrive when the load has expired, while the first
/// reader's load is held: they wait for it, and no reader loads again.
async fn readers_arriving_at_an_expired_cache_wait_for_one_load(env: TestEnv) {
    let svc = env.tables().clone();
    let table = departments(&svc).await;
    let clock = ManualClock::starting_now();
    let gate = Arc::new(Notify::new());
    let held = gate.clone();
    let cache = LookupCache::new(table.clone(), TTL)
        .with_clock(clock.clone())
        .load_hook(move |load| {
            let held = held.clone();
            async move {
                if load == 2 {
                    held.notified().await;
                }
                Ok(())
            }
        });
    cache.get(dept("Sales")).await.unwrap();
    table
        .upsert(
            &DepartmentInfo {
                name: "Sales".into(),
                floor: 5,
            },
            UpdateMode::Replace,
        )
        .await
        .unwrap();
    clock.advance(TTL);
    let readers: Vec<_> = (0..16)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.get(dept("Sales")).await })
        })
        .collect();
    // Every reader runs until it waits (this is a one-thread runtime).
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
    assert_eq!(cache.loads(), 2, "one load under way, the others waiting");
    gate.notify_one();
    for r in readers {
        assert_eq!(r.await.unwrap().unwrap().unwrap().floor, 5);
    }
    assert_eq!(cache.loads(), 2);
}

async fn the_join_pairs_each_employee_with_its_department(env: TestEnv) {
    let svc = env.tables().clone();
    let table = departments(&svc).await;
    let staff = common::fresh_table::<Employee>(&svc, "Staff").await;
    for id in 0..6 {
        let d = ["Sales", "Marketing", "Legal"][id as usize % 3];
        staff.insert(&employee(d, id)).await.unwrap();
    }
    let cache = LookupCache::new(table.clone(), TTL);
    let staff_requests = staff.stats().transactions;
    let joined: Vec<(Employee, Option<DepartmentInfo>)> = cache
        .join(staff.query().stream(), |e: &Employee| dept(&e.department))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(staff.stats().transactions - staff_requests, 1, "one query");
    assert_eq!(cache.loads(), 1, "one load for the whole join");
    let floors: Vec<(u32, Option<i32>)> = joined
        .iter()
        .map(|(e, d)| (e.employee_id, d.as_ref().map(|d| d.floor)))
        .collect();
    // Partitions in order: Legal (none), Marketing, Sales.
    assert_eq!(
        floors,
        [
            (2, None),
            (5, None),
            (1, Some(2)),
            (4, Some(2)),
            (0, Some(1)),
            (3, Some(1))
        ]
    );
    // An error of the stream is passed on.
    let missing = svc.table::<Employee>("NoSuchTable123").unwrap();
    let err = cache
        .join(missing.query().stream(), |e: &Employee| dept(&e.department))
        .try_collect::<Vec<_>>()
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
}

// ---------------------------------------------------------------------------
// Materialized view.

/// Employees by last name, across departments: one view row per employee
/// with a last name, none for one without.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(
    partition_key = "{last_name}",
    row_key = "{department}_{employee_id:06}"
)]
struct ByName {
    last_name: String,
    department: String,
    employee_id: u32,
}

fn by_name(e: &Employee) -> Vec<ByName> {
    if e.name.is_empty() {
        return Vec::new();
    }
    vec![ByName {
        last_name: e.name.clone(),
        department: e.department.clone(),
        employee_id: e.employee_id,
    }]
}

struct Views {
    s: Services,
    view: MaterializedView<Employee, ByName>,
    staff: TableClient<Employee>,
    jobs: QueueClient,
    poison: QueueClient,
}

impl Views {
    async fn new(s: &Services) -> Views {
        let staff = common::fresh_table::<Employee>(&s.tables, "Staff").await;
        let rows = common::fresh_table::<ByName>(&s.tables, "ByName").await;
        let keys = common::fresh_table::<DynamicEntity>(&s.tables, "ByNameKeys").await;
        let (jobs, poison) = common::fresh_queues(&s.queues, "view-").await;
        let mut view = MaterializedView::new(
            &s.tables,
            staff.name(),
            rows.name(),
            keys.name(),
            jobs.clone(),
            by_name,
        )
        .unwrap();
        if let Some(clock) = &s.clock {
            view = view.with_clock(clock.clone());
        }
        Views {
            s: s.clone(),
            view,
            staff,
            jobs,
            poison,
        }
    }

    fn worker(&self) -> WorkerBuilder {
        self.view
            .attach(Worker::builder(self.jobs.clone(), self.s.tables.clone()))
            .poison_queue(self.poison.clone())
            .visibility_timeout(self.s.visibility)
            .retry_delay(self.s.visibility)
            .concurrency(4)
    }

    async fn write(&self, department: &str, id: u32, name: &str) {
        let mut e = employee(department, id);
        e.name = name.into();
        self.staff.upsert(&e, UpdateMode::Replace).await.unwrap();
        self.view.changed(e.key()).await.unwrap();
    }

    async fn fire(&self, department: &str, id: u32) {
        self.staff
            .delete_if_exists((department, rk(id)), IfMatch::Any)
            .await
            .unwrap();
        self.view.changed((department, rk(id))).await.unwrap();
    }

    async fn drain(&self) {
        let report = self.worker().build().unwrap().drain().await.unwrap();
        if report.failed > 0 {
            if let Some(c) = &self.s.clock {
                c.advance(Duration::from_secs(60));
            }
        }
        let left: Vec<String> = self
            .jobs
            .peek(32)
            .await
            .unwrap()
            .iter()
            .map(|m| m.text().unwrap().to_string())
            .collect();
        assert_eq!(
            (report.failed, report.poisoned),
            (0, 0),
            "{report:?} {left:?}"
        );
    }

    /// The view is exactly the projection of the source, and the keys
    /// table lists exactly the rows of the source entities that have some.
    async fn assert_view_is_projection(&self) {
        let mut want: Vec<ByName> = self
            .staff
            .query()
            .fetch_all()
            .await
            .unwrap()
            .iter()
            .flat_map(by_name)
            .collect();
        want.sort_by_key(|r| r.key());
        let got = self.view.view().query().fetch_all().await.unwrap();
        assert_eq!(got, want);
        let listed = self.view.keys().query().fetch_all().await.unwrap();
        assert_eq!(listed.len(), want.len());
    }
}

tablekit::testing::conformance!(
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    the_view_follows_inserts_renames_and_deletes,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    changes_run_in_any_order_and_twice_end_at_the_current_state,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_view_update_stopped_at_each_step_is_finished_by_the_next_delivery,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    the_view_is_rebuilt_from_the_source,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    the_lag_of_the_view_is_observable,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_run_that_read_an_older_source_undoes_its_rows_after_a_newer_run,
);

/// Worker A reads Jones and lists the row, then is held; the employee is
/// renamed Smith and worker B runs that change to the end (Smith's row,
/// Jones's deleted). A then writes its stale Jones row, finds at its last
/// step that the keys row changed, and starts again: the Jones row it wrote
/// is deleted and the view is Smith alone.
async fn a_run_that_read_an_older_source_undoes_its_rows_after_a_newer_run(env: TestEnv) {
    let s = Services::of(&env);
    let v = Views::new(&s).await;
    v.write("Sales", 1, "Jones").await;
    let (reached, mut at_three) = mpsc::unbounded_channel::<()>();
    let release = Arc::new(Notify::new());
    let held = release.clone();
    let once = Arc::new(AtomicBool::new(false));
    let a = v
        .worker()
        .concurrency(1)
        .step_hook(move |event| {
            let (reached, held, once) = (reached.clone(), held.clone(), once.clone());
            async move {
                if let Event::Step { step: 3, .. } = event {
                    if !once.swap(true, Ordering::SeqCst) {
                        reached.send(()).unwrap();
                        held.notified().await;
                    }
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let a = tokio::spawn(async move { a.drain().await });
    at_three.recv().await.unwrap();
    v.write("Sales", 1, "Smith").await;
    let b = v
        .worker()
        .concurrency(1)
        .build()
        .unwrap()
        .drain()
        .await
        .unwrap();
    assert_eq!(b.succeeded, 1, "{b:?}");
    release.notify_one();
    let a = a.await.unwrap().unwrap();
    assert_eq!((a.succeeded, a.failed), (1, 0), "{a:?}");
    v.assert_view_is_projection().await;
    let rows = v.view.view().query().fetch_all().await.unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| r.last_name.as_str())
            .collect::<Vec<_>>(),
        ["Smith"]
    );
}

async fn the_view_follows_inserts_renames_and_deletes(env: TestEnv) {
    let s = Services::of(&env);
    let v = Views::new(&s).await;
    v.write("Sales", 1, "Jones").await;
    v.write("Marketing", 1, "Jones").await; // the same PartitionKey in the view
    v.write("Sales", 2, "Smith").await;
    v.drain().await;
    let jones: Vec<ByName> = v
        .view
        .view()
        .query()
        .filter(|r| r.partition_key.eq("Jones"))
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(
        jones
            .iter()
            .map(|r| r.department.as_str())
            .collect::<Vec<_>>(),
        ["Marketing", "Sales"]
    );
    v.assert_view_is_projection().await;

    v.write("Sales", 1, "Brown").await; // the row moves to another partition
    v.write("Sales", 2, "").await; // no row any more
    v.fire("Marketing", 1).await;
    v.drain().await;
    v.assert_view_is_projection().await;
    assert_eq!(v.view.view().query().fetch_all().await.unwrap().len(), 1);
    assert!(v
        .view
        .view()
        .get(("Jones", "Sales_000001"))
        .await
        .unwrap()
        .is_none());
    assert!(v
        .view
        .view()
        .get(("Brown", "Sales_000001"))
        .await
        .unwrap()
        .is_some());
    assert_eq!(v.jobs.approximate_message_count().await.unwrap(), 0);
}

/// Many changes of a few employees, each message twice, run four at a time
/// (so in any order, and the same key by two runs at once): the view ends
/// at the source's state. Then each change once more, after the fact.
async fn changes_run_in_any_order_and_twice_end_at_the_current_state(env: TestEnv) {
    let s = Services::of(&env);
    let v = Views::new(&s).await;
    let names = ["Jones", "Smith", "Brown", ""];
    for round in 0..4usize {
        for id in 0..4u32 {
            let name = names[(round + id as usize) % names.len()];
            v.write("Sales", id, name).await;
            v.view.changed(("Sales", rk(id))).await.unwrap();
        }
    }
    v.fire("Sales", 3).await;
    v.drain().await;
    v.assert_view_is_projection().await;
    for id in 0..4u32 {
        v.view.changed(("Sales", rk(id))).await.unwrap();
    }
    v.drain().await;
    v.assert_view_is_projection().await;
}

/// A change whose worker stops after each of its steps (crash or failure):
/// the next delivery leaves the view the projection, with no row that no
/// keys row lists.
async fn a_view_update_stopped_at_each_step_is_finished_by_the_next_delivery(env: TestEnv) {
    let s = Services::of(&env);
    // Steps of a rename: 1 read keys, 2 read source, 3 list old + new,
    // 4 upsert the new row, 5 delete the old row, 6 list the new only.
    {
        let v = Views::new(&s).await;
        v.write("Sales", 1, "Jones").await;
        v.drain().await;
        v.write("Sales", 1, "Smith").await;
        let names = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = names.clone();
        let worker = v
            .worker()
            .step_hook(move |event| {
                if let Event::Step { name, .. } = event {
                    seen.lock().unwrap().push(name);
                }
                std::future::ready(Ok(()))
            })
            .build()
            .unwrap();
        worker.drain().await.unwrap();
        let (keys, view) = (v.view.keys().name(), v.view.view().name());
        assert_eq!(
            *names.lock().unwrap(),
            [
                format!("read {keys}"),
                format!("read {}", v.staff.name()),
                format!("replace_if_unchanged {keys}"),
                format!("insert_or_replace {view}"),
                format!("delete_if_exists {view}"),
                format!("replace_if_unchanged {keys}"),
            ]
        );
    }
    let mut stopped = Vec::new();
    for boundary in 1..=6usize {
        let v = Views::new(&s).await;
        v.write("Sales", 1, "Jones").await;
        v.drain().await;
        v.write("Sales", 1, "Smith").await;
        let (reached, mut at_boundary) = mpsc::unbounded_channel::<()>();
        let crash = boundary % 2 == 0;
        let worker = v
            .worker()
            .step_hook(move |event| {
                let reached = reached.clone();
                async move {
                    if let Event::Step { step, .. } = event {
                        if step == boundary {
                            reached.send(()).unwrap();
                            if crash {
                                pending::<()>().await;
                            }
                            return Err("stopped".into());
                        }
                    }
                    Ok(())
                }
            })
            .build()
            .unwrap();
        if crash {
            let task = tokio::spawn(async move { worker.run(pending()).await });
            at_boundary.recv().await.unwrap();
            task.abort();
            let _ = task.await;
        } else {
            let report = worker.drain().await.unwrap();
            assert_eq!(report.succeeded, 0, "boundary {boundary}: {report:?}");
        }
        // In between, a reader sees the old row, the new one, or both.
        let rows = v.view.view().query().fetch_all().await.unwrap();
        assert!(
            (1..=2).contains(&rows.len()),
            "boundary {boundary}: {rows:?}"
        );
        stopped.push((boundary, v));
    }
    pass_visibility_timeout(&s).await;
    for (boundary, v) in stopped {
        let report = v.worker().build().unwrap().drain().await.unwrap();
        assert_eq!(
            (report.succeeded, report.failed, report.poisoned),
            (1, 0, 0),
            "boundary {boundary}: {report:?}"
        );
        v.assert_view_is_projection().await;
        let rows = v.view.view().query().fetch_all().await.unwrap();
        assert_eq!(rows[0].last_name, "Smith", "boundary {boundary}");
    }
}

/// A source written without messages, a stray row in the view, a keys row
/// of an entity deleted behind the view's back: the rebuild makes the view
/// the projection of the source.
async fn the_view_is_rebuilt_from_the_source(env: TestEnv) {
    let s = Services::of(&env);
    let v = Views::new(&s).await;
    v.write("Sales", 1, "Jones").await;
    v.write("Sales", 2, "Smith").await;
    v.drain().await;
    // Behind the view's back: a new employee, one deleted, a stray row.
    v.staff
        .insert(&{
            let mut e = employee("Marketing", 3);
            e.name = "Brown".into();
            e
        })
        .await
        .unwrap();
    v.staff
        .delete(("Sales", rk(2)), IfMatch::Any)
        .await
        .unwrap();
    v.view
        .view()
        .insert(&ByName {
            last_name: "Ghost".into(),
            department: "Sales".into(),
            employee_id: 9,
        })
        .await
        .unwrap();
    let report = v.view.rebuild().await.unwrap();
    assert_eq!(
        (report.sources, report.gone, report.strays),
        (2, 1, 1),
        "{report:?}"
    );
    v.assert_view_is_projection().await;
    // Rebuilding again changes nothing.
    let again = v.view.rebuild().await.unwrap();
    assert_eq!((again.sources, again.gone, again.strays), (2, 0, 0));
    v.assert_view_is_projection().await;
    // A step's error comes back as the error it was: the keys table gone.
    v.view.keys().delete_table().await.unwrap();
    let err = v.view.rebuild().await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
}

async fn the_lag_of_the_view_is_observable(env: TestEnv) {
    let s = Services::of(&env);
    let v = Views::new(&s).await;
    let lag = v.view.lag().await.unwrap();
    assert_eq!(
        (lag.pending, lag.oldest_pending, lag.last_applied),
        (0, None, None)
    );
    v.write("Sales", 1, "Jones").await;
    v.write("Sales", 2, "Smith").await;
    let waited = Duration::from_secs(300);
    match &s.clock {
        Some(clock) => clock.advance(waited),
        None => tokio::time::sleep(Duration::from_millis(1100)).await,
    }
    let lag = v.view.lag().await.unwrap();
    assert_eq!(lag.pending, 2);
    let oldest = lag.oldest_pending.unwrap();
    if s.clock.is_some() {
        // The queue keeps times to the millisecond; over HTTP they travel
        // as HTTP dates, cut to the second.
        let precision = if env.backend().is_http() {
            Duration::from_secs(1)
        } else {
            Duration::ZERO
        };
        assert!(
            oldest >= waited && oldest < waited + precision + Duration::from_millis(2),
            "{oldest:?}"
        );
    } else {
        assert!(oldest >= Duration::from_secs(1), "{oldest:?}");
    }
    v.drain().await;
    let lag = v.view.lag().await.unwrap();
    assert_eq!((lag.pending, lag.oldest_pending), (0, None));
    let last = lag.last_applied.unwrap();
    if s.clock.is_some() {
        // The message keeps its time to the millisecond.
        let delay = last.delay();
        assert!(
            delay >= waited && delay < waited + Duration::from_millis(2),
            "{delay:?}"
        );
    } else {
        assert!(last.delay() >= Duration::from_secs(1), "{last:?}");
    }
}

#[test]
fn a_view_needs_three_tables() {
    let tables = TableServiceClient::embedded();
    let queue = tablekit::QueueServiceClient::embedded()
        .queue("jobs")
        .unwrap();
    for (s, v, k) in [
        ("A", "B", "a"),
        ("A", "B", "B"),
        ("A", "A", "C"),
        ("A", "B", "C-"),
    ] {
        let err = MaterializedView::new(&tables, s, v, k, queue.clone(), by_name).unwrap_err();
        common::assert_invalid(&err);
    }
}

/// A clone configured further is a cache of its own; the clones it was made
/// from keep theirs.
#[tokio::test]
async fn a_shared_cache_configured_further_becomes_a_cache_of_its_own() {
    let svc = TableServiceClient::embedded();
    let table = departments(&svc).await;
    let clock = ManualClock::starting_now();
    let shared = LookupCache::new(table, TTL);
    let same = shared.clone();
    shared.snapshot().await.unwrap();
    let own = same.clone().with_clock(clock);
    assert_eq!((shared.loads(), same.loads(), own.loads()), (1, 1, 0));
    own.snapshot().await.unwrap();
    assert_eq!((shared.loads(), own.loads()), (1, 1));
}

// The view's model: random writes, renames, deletes, redeliveries and
// workers stopped at a random step; after each drain the view is exactly
// the projection of the source.

#[derive(Debug, Clone)]
enum ViewOp {
    Write {
        id: u32,
        name: usize,
    },
    Fire {
        id: u32,
    },
    /// A change sent again though nothing changed (a redelivery).
    Again {
        id: u32,
    },
    /// A worker runs the queue, failing once at step `step` (where a crash
    /// would stop it); the message comes back later.
    StopAt {
        step: usize,
    },
    Drain,
}

const LAST_NAMES: [&str; 3] = ["Jones", "Smith", ""];

fn view_op() -> impl Strategy<Value = ViewOp> {
    prop_oneof![
        4 => (0..4u32, 0..3usize).prop_map(|(id, name)| ViewOp::Write { id, name }),
        1 => (0..4u32).prop_map(|id| ViewOp::Fire { id }),
        1 => (0..4u32).prop_map(|id| ViewOp::Again { id }),
        1 => (1..=6usize).prop_map(|step| ViewOp::StopAt { step }),
        1 => Just(ViewOp::Drain),
    ]
}

async fn run_view_model(s: Services, ops: Vec<ViewOp>) {
    let v = Views::new(&s).await;
    let drain_and_check = || async {
        if let Some(clock) = &v.s.clock {
            clock.advance(v.s.visibility + Duration::from_secs(1)); // past any retry delay
        }
        v.drain().await;
        v.assert_view_is_projection().await;
        assert_eq!(v.jobs.approximate_message_count().await.unwrap(), 0);
    };
    for op in ops {
        match op {
            ViewOp::Write { id, name } => v.write("Sales", id, LAST_NAMES[name]).await,
            ViewOp::Fire { id } => v.fire("Sales", id).await,
            ViewOp::Again { id } => {
                v.view.changed(("Sales", rk(id))).await.unwrap();
            }
            ViewOp::StopAt { step } if s.clock.is_some() => {
                let stopped = Arc::new(AtomicBool::new(false));
                let worker = v
                    .worker()
                    .step_hook(move |event| {
                        let stopped = stopped.clone();
                        async move {
                            match event {
                                Event::Step { step: at, .. }
                                    if at == step && !stopped.swap(true, Ordering::SeqCst) =>
                                {
                                    Err("stopped".into())
                                }
                                _ => Ok(()),
                            }
                        }
                    })
                    .build()
                    .unwrap();
                worker.drain().await.unwrap();
            }
            ViewOp::Drain => drain_and_check().await,
            ViewOp::StopAt { .. } => {}
        }
    }
    drain_and_check().await;
}

fn run_views(cases: u32, max_ops: usize, services: impl Fn() -> Services) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(view_op(), 1..max_ops), |ops| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(run_view_model(services(), ops));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn random_writes_and_stops_leave_the_view_the_projection_embedded() {
    run_views(48, 24, common::embedded_services);
}

#[test]
fn random_writes_and_stops_leave_the_view_the_projection_azurite() {
    if common::azurite_services().is_none() {
        return;
    }
    // No stops (they need a clock to move past the retry delay): writes,
    // deletes and redeliveries run four at a time over HTTP.
    run_views(3, 12, || common::azurite_services().unwrap());
}
