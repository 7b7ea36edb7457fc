//! The inter-partition secondary index, checked **exhaustively** on small
//! configurations: two employees, two emails (one index, unique or not),
//! two workers, one change delivered twice and one worker dying at any step. A
//! scheduler of this file drives the real pattern code and the real
//! `Worker` on the embedded store, and explores every interleaving of the
//! two workers at step granularity, depth first.
//!
//! The configurations (`families`): `move` (1 holds `a`; 2 asks for `a`
//! while 1 moves to `b`), `swap` (1 holds `a`, 2 holds `b`, each asks for
//! the other's), `remove` (1 holds `a` and is removed while 2 asks for it)
//! and `reorder` (2 holds `b`; 1 asks for `a`, then for `b`), on a unique
//! index; `shared` (1 and 2 have `a`; 1 moves to `b`, then is removed), on
//! a non-unique one. The suite runs a bounded subset (`bounded`: each
//! family's two changes sent once, a message tried once, plus twice for
//! `swap` and `remove`, and one put sent twice, all with one crash; about a
//! minute in a debug build). The full configuration (`full`: each family
//! with each of its changes sent twice, in every sending order, a message
//! tried once or twice, one crash: 60 scenarios, about 4.3 million distinct
//! states) takes about a quarter of an hour in a release build, and is
//! ignored:
//!
//! ```text
//! cargo test --release -p tablekit-patterns --test patterns \
//!     inter_index_exhaustive::every_interleaving_of_the_full -- --ignored --nocapture
//! ```
//!
//! (`INTER_INDEX_EXHAUSTIVE=move,swap` in the environment keeps only those
//! families.) Each scenario prints its complete interleavings and distinct
//! states.
//!
//! # What is checked
//!
//! What the module docs and the guide promise:
//!
//! * once the queue is drained (`check_drained`): no message left; no
//!   claim left; each employee's primary is the newest of its changes that
//!   was not refused (a change given up may or may not be applied); each
//!   live primary has its copy, with its content and stamp, and there is
//!   no other copy; no value is shown by two primaries (except as the docs
//!   allow: a remove given up before its tombstone, whose value another
//!   employee took meanwhile); `get` and `lookup` read just that; the poison
//!   queue holds only puts refused for another employee's value, older puts
//!   that kept meeting a newer put's claim, and changes given up;
//! * in every state (`check_between`): no copy a reader sees (not a claim)
//!   names a missing or removed primary; no two primaries show one value,
//!   unless a remove of one of them is still to come;
//! * at every step (`foreign_writes`): a change writes, deletes or inserts
//!   only copies that name its own employee, before and after.
//!
//! A violation fails the test, with the shortest run of each kind as a
//! schedule that `replay` runs again (the `regression_*` tests). The
//! [`KNOWN`] kinds, which the code does not fix, are counted and printed
//! instead, each pinned by an ignored test (`known_*`) that fails.
//!
//! # How a run is scheduled
//!
//! Each worker runs one message at a time (`run_once`, concurrency 1) with a
//! step hook that reports the step to the scheduler and waits for its word.
//! Every building block of `StepContext` is one request and ends in the
//! hook, so between two decisions exactly one worker makes exactly one
//! request (its queue requests go with the request before or after them).
//! At each decision point the scheduler chooses one of:
//!
//! * let a worker that is stopped at a hook make its next step (the message
//!   may end there: deleted, failed and hidden for the retry delay, or
//!   poisoned);
//! * let an idle worker receive the next message (the queue hands them out
//!   by the time they became visible, then in sending order, as the embedded
//!   store and Azurite do; the full configuration sends them in every
//!   order); if none is visible, time passes first until the next hidden
//!   message is visible again (a failed one after the retry delay, or the
//!   one of a worker that died after its visibility timeout). Letting time
//!   pass at any other moment changes nothing a worker sees before its next
//!   receive, so this loses no interleaving;
//! * while the crash is not spent: receive a message with a worker that is
//!   **doomed** (its visibility timeout short, so its message comes back
//!   while the other worker may still be running its own); a doomed worker
//!   can die at every decision point after each of its steps (its task is
//!   aborted: the process dying, whatever the step left undone). A doomed
//!   run that ends without dying is dropped: it is a run of a worker that
//!   lives, explored as such.
//!
//! The two workers are interchangeable: only the first idle one is offered
//! a receive, and the state's fingerprint holds the workers as a sorted
//! list. Not explored: a second crash (a give-up that dies too), a message
//! coming back while its worker still runs it (the heartbeat keeps it
//! hidden), and failures of single requests.
//!
//! # Pruning
//!
//! A future cannot be copied, so each path is replayed from a fresh store
//! (driving the workers without reading the store, up to the last decision,
//! where the store is read and compared with what was saved there). A state
//! reached again is not explored twice: its fingerprint hashes the store
//! (every row, each ETag named by the step that wrote it and each message id
//! by its delivery), the queue (per delivery: dequeue count, visible, hidden
//! or held, and the order in which they come back), the poison queue, and
//! per worker its message, attempt and everything it has observed in this
//! attempt: for each of its steps, the step's name and the rows of the
//! step's table it could have read (its own primary, or every copy of the
//! unique index). The pattern code is deterministic given those
//! observations, so two states with one fingerprint have the same futures.
//! The number of complete interleavings is counted over the graph of states
//! (a state's count is the sum over its choices), so it is exact although
//! most of them are never run to their end.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use tablekit::clock::ManualClock;
use tablekit::{
    DynamicEntity, EdmValue, QueueClient, QueueServiceClient, TableClient, TableEntity,
    TableServiceClient,
};
use tablekit_patterns::eventual::{Event, PoisonedMessage, Report, Worker};
use tablekit_patterns::inter_index::{
    InterIndex, InterPartitionIndex, CHANGE_STAMP, CLAIM_MESSAGE, CLAIM_WAITING, PENDING,
    PRIMARY_ROW_KEY, REMOVED,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

const EMAILS: [&str; 2] = ["a@contoso.com", "b@contoso.com"];
const IDS: [u32; 2] = [1, 2];
const DEPARTMENT: &str = "Sales";
const PRIMARY_PK: &str = "empid_Sales";
const EMAIL_PK: &str = "email_Sales";

/// How long a message received by a worker that lives stays hidden: longer
/// than any run, so it never comes back while that worker holds it.
const HELD: Duration = Duration::from_secs(6 * 24 * 3600);
/// How long a message received by the doomed worker stays hidden: it comes
/// back this long after the receive, once that worker died.
const DOOMED: Duration = Duration::from_secs(1000);
/// How long a failed message stays hidden.
const RETRY: Duration = Duration::from_secs(1);

/// The tables: primaries, and the unique index's copies.
const EMP: u8 = 0;
const EMAIL: u8 = 1;
const TABLES: [&str; 2] = ["Emp", "Email"];

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    email: String,
}

fn row_key(id: u32) -> String {
    format!("{id:06}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Put { id: u32, email: usize },
    Remove { id: u32 },
}

impl Op {
    fn id(self) -> u32 {
        match self {
            Op::Put { id, .. } | Op::Remove { id } => id,
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Put { id, email } => write!(f, "put {id} {}", ["a", "b"][*email]),
            Op::Remove { id } => write!(f, "remove {id}"),
        }
    }
}

/// One configuration to explore.
#[derive(Debug, Clone)]
struct Scenario {
    /// Changes applied (by a plain worker) before the exploration.
    seeds: Vec<Op>,
    /// The changes explored, in the order they were made (their stamps).
    changes: Vec<Op>,
    /// The deliveries, in sending order: delivery `k` is of change
    /// `order[k]`; a change sent twice appears twice.
    order: Vec<usize>,
    max_dequeue: u32,
    /// Whether one worker dies (once, at any step).
    crash: bool,
    /// Whether the email index is unique (else two employees can share a
    /// value, each with a copy of its own).
    unique: bool,
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seeds: Vec<String> = self.seeds.iter().map(Op::to_string).collect();
        let sent: Vec<String> = self
            .order
            .iter()
            .map(|c| format!("c{c} {}", self.changes[*c]))
            .collect();
        write!(
            f,
            "{} index, seeds [{}], sent [{}], max dequeue {}, {}",
            if self.unique { "unique" } else { "non-unique" },
            seeds.join(", "),
            sent.join(", "),
            self.max_dequeue,
            if self.crash { "one crash" } else { "no crash" }
        )
    }
}

/// The messages of a scenario's changes, made once so that every replay
/// sends the same bytes (and so the same stamps).
struct Prepared {
    seeds: Vec<Vec<u8>>,
    seed_stamps: Vec<i64>,
    changes: Vec<Vec<u8>>,
    stamps: Vec<i64>,
}

fn stamp_in(body: &[u8]) -> i64 {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    let op = &v["op"];
    let change = op.get("put").or_else(|| op.get("remove")).unwrap();
    change["stamp"].as_i64().unwrap()
}

/// The services of one run, fresh.
struct Services {
    clock: ManualClock,
    tables: TableServiceClient,
    emp: TableClient<DynamicEntity>,
    email: TableClient<DynamicEntity>,
    jobs: QueueClient,
    poison: QueueClient,
    index: InterPartitionIndex<Employee>,
    by_email: InterIndex<Employee>,
}

impl Services {
    async fn new(unique: bool) -> Services {
        let clock = ManualClock::starting_now();
        let tables = TableServiceClient::embedded();
        let queues = QueueServiceClient::embedded_with_clock(clock.clone());
        let emp = tables.table::<Employee>(TABLES[0]).unwrap();
        let email = tables.table::<DynamicEntity>(TABLES[1]).unwrap();
        emp.create_table().await.unwrap();
        email.create_table().await.unwrap();
        let jobs = queues.queue("jobs").unwrap();
        let poison = queues.queue("jobs-poison").unwrap();
        jobs.create_queue().await.unwrap();
        poison.create_queue().await.unwrap();
        let key = |e: &Employee| e.email.clone();
        let by_email = if unique {
            InterIndex::unique("email", "email_", key)
        } else {
            InterIndex::non_unique("email", "email_", key)
        }
        .in_table(&email);
        // The scheduler orders the steps: the pause before a primary is
        // read again would only be a real wait.
        let index = InterPartitionIndex::new(emp.clone(), "empid_", jobs.clone())
            .with_index(&by_email)
            .unwrap()
            .without_pauses();
        Services {
            clock,
            tables,
            emp: emp.with_type::<DynamicEntity>(),
            email,
            jobs,
            poison,
            index,
            by_email,
        }
    }

    async fn send(&self, op: Op) {
        match op {
            Op::Put { id, email } => self.index.put(&employee(id, email)).await.unwrap(),
            Op::Remove { id } => self.index.remove((DEPARTMENT, row_key(id))).await.unwrap(),
        };
    }

    /// Every row of both tables, in key order.
    async fn rows(&self) -> Vec<(u8, DynamicEntity)> {
        let mut out = Vec::new();
        for (t, table) in [(EMP, &self.emp), (EMAIL, &self.email)] {
            let mut rows = table.query().fetch_all().await.unwrap();
            rows.sort_by(|a, b| {
                (&a.partition_key, &a.row_key).cmp(&(&b.partition_key, &b.row_key))
            });
            out.extend(rows.into_iter().map(|d| (t, d)));
        }
        out
    }
}

fn employee(id: u32, email: usize) -> Employee {
    Employee {
        department: DEPARTMENT.into(),
        employee_id: id,
        email: EMAILS[email].into(),
    }
}

impl Prepared {
    async fn new(sc: &Scenario) -> Prepared {
        let s = Services::new(sc.unique).await;
        for op in sc.seeds.iter().chain(&sc.changes) {
            s.send(*op).await;
        }
        let sent = s.jobs.peek(32).await.unwrap();
        assert_eq!(sent.len(), sc.seeds.len() + sc.changes.len());
        let mut bodies: Vec<Vec<u8>> = sent.iter().map(|m| m.body().to_vec()).collect();
        let changes = bodies.split_off(sc.seeds.len());
        Prepared {
            seed_stamps: bodies.iter().map(|b| stamp_in(b)).collect(),
            seeds: bodies,
            stamps: changes.iter().map(|b| stamp_in(b)).collect(),
            changes,
        }
    }
}

// ---------------------------------------------------------------------------
// One run.

/// What a worker's step hook and its task tell the scheduler.
enum Signal {
    Step {
        actor: usize,
        message_id: String,
        dequeue_count: u32,
        step: usize,
        name: String,
        go: oneshot::Sender<()>,
    },
    Done {
        actor: usize,
        report: tablekit::Result<Report>,
    },
}

fn worker(
    s: &Services,
    actor: usize,
    visibility: Duration,
    max_dequeue: u32,
    tx: mpsc::UnboundedSender<Signal>,
) -> Worker {
    s.index
        .attach(Worker::builder(s.jobs.clone(), s.tables.clone()))
        .poison_queue(s.poison.clone())
        .visibility_timeout(visibility)
        .retry_delay(RETRY)
        .max_dequeue_count(max_dequeue)
        .concurrency(1)
        .step_hook(move |event| {
            let tx = tx.clone();
            async move {
                let (message_id, dequeue_count, step, name) = match event {
                    Event::Step {
                        message_id,
                        dequeue_count,
                        step,
                        name,
                        ..
                    } => (message_id, dequeue_count, step, name),
                    // Heartbeats: the visibility timeouts are longer than
                    // any run, so none is due; one would be skipped.
                    Event::Heartbeat { .. } => {
                        return Err("no heartbeat in a scheduled run".into());
                    }
                    // The boundaries of a move to the poison queue are not
                    // scheduling points of this model: the move goes on.
                    _ => return Ok(()),
                };
                let (go, wait) = oneshot::channel();
                let signal = Signal::Step {
                    actor,
                    message_id,
                    dequeue_count,
                    step,
                    name,
                    go,
                };
                if tx.send(signal).is_err() || wait.await.is_err() {
                    // The scheduler dropped this run: it stops here.
                    std::future::pending::<()>().await;
                }
                Ok(())
            }
        })
        .build()
        .unwrap()
}

/// A delivery as the scheduler keeps track of it (the queue's own state,
/// predicted, and checked against what the workers receive).
#[derive(Debug)]
struct Delivery {
    change: usize,
    dequeue_count: u32,
    /// When it is (or was) visible again, in seconds from the start.
    visible_at: u64,
    held_by: Option<usize>,
    gone: bool,
}

enum Actor {
    Idle,
    Running {
        task: JoinHandle<()>,
        go: Option<oneshot::Sender<()>>,
        delivery: usize,
        dequeue_count: u32,
        doomed: bool,
        /// A hash of what it observed in this attempt.
        seen: u64,
    },
}

/// An actor as the fingerprint holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum ActorKey {
    Idle,
    Running {
        delivery: usize,
        dequeue_count: u32,
        doomed: bool,
        seen: u64,
    },
}

/// What a poisoned message's error says.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Class {
    /// A unique value held by this primary RowKey.
    Refused(String),
    /// An older put that kept meeting a newer put's claim.
    NewerClaim,
    /// Its last attempt stopped; given up.
    GivenUp,
    Other(String),
}

fn classify(error: &str) -> Class {
    if error.contains("over the limit") {
        return if error.ends_with("; what it held was given up") {
            Class::GivenUp
        } else {
            Class::Other(error.to_owned())
        };
    }
    if error.contains("failed:") {
        return Class::Other(error.to_owned());
    }
    if let Some(at) = error.find(&format!("is held by (\"{DEPARTMENT}\", \"")) {
        let rest = &error[at + format!("is held by (\"{DEPARTMENT}\", \"").len()..];
        if let Some(end) = rest.find('"') {
            return Class::Refused(rest[..end].to_owned());
        }
    }
    if error.contains("is being claimed by a newer change of this entity") {
        return Class::NewerClaim;
    }
    Class::Other(error.to_owned())
}

/// A stored row, with its ETag named by the step that wrote it and the
/// message ids it holds named by their deliveries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Row {
    table: u8,
    pk: String,
    rk: String,
    version: String,
    props: Vec<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    /// The worker stopped at a hook makes its next step.
    Step(usize),
    /// The doomed worker dies here.
    Crash(usize),
    /// An idle worker receives the next message (after time passed, if
    /// `reveal`), doomed or not.
    Start {
        actor: usize,
        doomed: bool,
        reveal: bool,
    },
}

/// A schedule as text: `0`, `1`: that worker steps; `x0`: worker 0 dies;
/// `s0`: worker 0 receives (`d0`: doomed), `r` first if time passes.
impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Choice::Step(i) => write!(f, "{i}"),
            Choice::Crash(i) => write!(f, "x{i}"),
            Choice::Start {
                actor,
                doomed,
                reveal,
            } => write!(
                f,
                "{}{}{actor}",
                if *reveal { "r" } else { "" },
                if *doomed { "d" } else { "s" }
            ),
        }
    }
}

impl std::str::FromStr for Choice {
    type Err = String;
    fn from_str(s: &str) -> Result<Choice, String> {
        let (reveal, rest) = match s.strip_prefix('r') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let worker = |t: &str| t.parse::<usize>().map_err(|e| format!("{s:?}: {e}"));
        Ok(match rest.split_at(rest.len().min(1)) {
            ("x", i) => Choice::Crash(worker(i)?),
            ("s", i) => Choice::Start {
                actor: worker(i)?,
                doomed: false,
                reveal,
            },
            ("d", i) => Choice::Start {
                actor: worker(i)?,
                doomed: true,
                reveal,
            },
            _ => Choice::Step(worker(s)?),
        })
    }
}

struct World<'a> {
    sc: &'a Scenario,
    prep: &'a Prepared,
    s: Services,
    workers: Vec<[Worker; 2]>,
    tx: mpsc::UnboundedSender<Signal>,
    rx: mpsc::UnboundedReceiver<Signal>,
    actors: Vec<Actor>,
    deliveries: Vec<Delivery>,
    ids: HashMap<String, usize>,
    now: u64,
    crash_left: bool,
    /// A doomed worker ended its message without dying: not a run to count.
    dead_end: bool,
    /// Replaying a path already explored: the workers are driven, but the
    /// store is not read and nothing is hashed (see [`Saved`]).
    replaying: bool,
    versions: HashMap<String, String>,
    raw: Vec<(u8, DynamicEntity)>,
    rows: Vec<Row>,
    /// A hash of `rows`.
    rows_hash: u64,
    poisoned: Vec<(usize, Class)>,
    trace: Vec<String>,
    /// The choices made so far.
    path: Vec<Choice>,
    /// What the last step did that the docs rule out (see
    /// [`foreign_writes`](Self::foreign_writes)).
    step_problems: Vec<String>,
}

impl Drop for World<'_> {
    fn drop(&mut self) {
        for a in &self.actors {
            if let Actor::Running { task, .. } = a {
                task.abort();
            }
        }
    }
}

impl<'a> World<'a> {
    async fn new(sc: &'a Scenario, prep: &'a Prepared) -> World<'a> {
        let s = Services::new(sc.unique).await;
        // The seeds, by a worker of their own.
        for body in &prep.seeds {
            s.jobs.send(body).never_expire().await.unwrap();
        }
        let seeder = s
            .index
            .attach(Worker::builder(s.jobs.clone(), s.tables.clone()))
            .poison_queue(s.poison.clone())
            .build()
            .unwrap();
        let report = seeder.drain().await.unwrap();
        assert_eq!(report.succeeded, prep.seeds.len() as u64, "{report:?}");
        let mut deliveries = Vec::new();
        let mut ids = HashMap::new();
        for (k, c) in sc.order.iter().enumerate() {
            let sent = s.jobs.send(&prep.changes[*c]).never_expire().await.unwrap();
            ids.insert(sent.id().to_owned(), k);
            deliveries.push(Delivery {
                change: *c,
                dequeue_count: 0,
                visible_at: 0,
                held_by: None,
                gone: false,
            });
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let workers = (0..2)
            .map(|a| {
                [
                    worker(&s, a, HELD, sc.max_dequeue, tx.clone()),
                    worker(&s, a, DOOMED, sc.max_dequeue, tx.clone()),
                ]
            })
            .collect();
        let mut world = World {
            sc,
            prep,
            s,
            workers,
            tx,
            rx,
            actors: vec![Actor::Idle, Actor::Idle],
            deliveries,
            ids,
            now: 0,
            crash_left: sc.crash,
            dead_end: false,
            replaying: false,
            versions: HashMap::new(),
            raw: Vec::new(),
            rows: Vec::new(),
            rows_hash: 0,
            poisoned: Vec::new(),
            trace: Vec::new(),
            path: Vec::new(),
            step_problems: Vec::new(),
        };
        world.snapshot("seed").await;
        world
    }

    /// Reads the store again; a version not seen before was written by
    /// `writer`.
    async fn snapshot(&mut self, writer: &str) {
        self.raw = self.s.rows().await;
        let mut rows = Vec::with_capacity(self.raw.len());
        for (t, d) in &self.raw {
            let raw = d.etag.as_ref().expect("a stored row has an ETag").as_str();
            let version = match self.versions.get(raw) {
                Some(v) => v.clone(),
                None => {
                    let v = if writer == "seed" {
                        format!(
                            "seed {} {} {}",
                            TABLES[*t as usize], d.partition_key, d.row_key
                        )
                    } else {
                        writer.to_owned()
                    };
                    self.versions.insert(raw.to_owned(), v.clone());
                    v
                }
            };
            let mut props: Vec<(String, String)> = d
                .properties
                .iter()
                .map(|(name, value)| (name.to_owned(), self.canonical(name, value)))
                .collect();
            props.sort();
            rows.push(Row {
                table: *t,
                pk: d.partition_key.clone(),
                rk: d.row_key.clone(),
                version,
                props,
            });
        }
        let mut h = DefaultHasher::new();
        rows.hash(&mut h);
        self.rows_hash = h.finish();
        self.rows = rows;
    }

    /// A property's value, message ids named by their deliveries.
    fn canonical(&self, name: &str, value: &EdmValue) -> String {
        let label = |id: &str| match self.ids.get(id) {
            Some(k) => format!("d{k}"),
            None => format!("?{id}"),
        };
        match (name, value) {
            (n, EdmValue::String(id)) if n == CLAIM_MESSAGE => label(id),
            (n, EdmValue::String(list)) if n == CLAIM_WAITING => list
                .split(';')
                .map(|e| match e.split_once(' ') {
                    Some((stamp, id)) => format!("{stamp} {}", label(id)),
                    None => e.to_owned(),
                })
                .collect::<Vec<_>>()
                .join(";"),
            _ => format!("{value:?}"),
        }
    }

    fn entity_of(&self, delivery: usize) -> u32 {
        self.sc.changes[self.deliveries[delivery].change].id()
    }

    /// What a step of a change of `id` on `table` could have read, in the
    /// state before it: its primary, or every copy of the unique index.
    fn view(&self, id: u32, table: &str) -> u64 {
        let t = TABLES
            .iter()
            .position(|n| *n == table)
            .unwrap_or_else(|| panic!("a step on an unknown table {table:?}"));
        let rk = row_key(id);
        let mut h = DefaultHasher::new();
        for r in &self.rows {
            if r.table == t as u8 && (r.table != EMP || r.rk == rk) {
                r.hash(&mut h);
            }
        }
        h.finish()
    }

    fn visible(&self, k: usize) -> bool {
        let d = &self.deliveries[k];
        !d.gone && d.held_by.is_none() && d.visible_at <= self.now
    }

    /// The delivery the queue hands out next: the one visible first, then
    /// the first sent.
    fn next_visible(&self) -> Option<usize> {
        (0..self.deliveries.len())
            .filter(|k| self.visible(*k))
            .min_by_key(|k| (self.deliveries[*k].visible_at, *k))
    }

    /// When the next hidden delivery no worker holds is visible again, if
    /// that is before any held one would come back.
    fn next_reveal(&self) -> Option<u64> {
        let waiting = self
            .deliveries
            .iter()
            .filter(|d| !d.gone && d.held_by.is_none() && d.visible_at > self.now)
            .map(|d| d.visible_at)
            .min()?;
        let held = self
            .deliveries
            .iter()
            .filter(|d| !d.gone && d.held_by.is_some())
            .map(|d| d.visible_at)
            .min()
            .unwrap_or(u64::MAX);
        assert!(
            waiting < held,
            "a held message would come back first: {:?}",
            self.deliveries
        );
        Some(waiting)
    }

    fn doomed_running(&self) -> bool {
        self.actors
            .iter()
            .any(|a| matches!(a, Actor::Running { doomed: true, .. }))
    }

    fn choices(&self) -> Vec<Choice> {
        let mut out = Vec::new();
        for (i, a) in self.actors.iter().enumerate() {
            if let Actor::Running { doomed, .. } = a {
                out.push(Choice::Step(i));
                if *doomed {
                    out.push(Choice::Crash(i));
                }
            }
        }
        // Idle workers are interchangeable: the first one stands for all.
        if let Some(actor) = self.actors.iter().position(|a| matches!(a, Actor::Idle)) {
            let reveal = if self.next_visible().is_some() {
                Some(false)
            } else {
                self.next_reveal().map(|_| true)
            };
            if let Some(reveal) = reveal {
                out.push(Choice::Start {
                    actor,
                    doomed: false,
                    reveal,
                });
                if self.crash_left && !self.doomed_running() {
                    out.push(Choice::Start {
                        actor,
                        doomed: true,
                        reveal,
                    });
                }
            }
        }
        out
    }

    fn terminal(&self) -> bool {
        self.actors.iter().all(|a| matches!(a, Actor::Idle))
            && self.deliveries.iter().all(|d| d.gone)
    }

    fn fingerprint(&self) -> u128 {
        let mut parts = (DefaultHasher::new(), DefaultHasher::new());
        0xe5u8.hash(&mut parts.1);
        let mut hash = |x: &dyn Fn(&mut DefaultHasher)| {
            x(&mut parts.0);
            x(&mut parts.1);
        };
        hash(&|h| self.rows_hash.hash(h));
        // The queue: the order in which the visible ones come, and when the
        // others come back (relative to now).
        let mut visible: Vec<u64> = (0..self.deliveries.len())
            .filter(|k| self.visible(*k))
            .map(|k| self.deliveries[k].visible_at)
            .collect();
        visible.sort_unstable();
        visible.dedup();
        for (k, d) in self.deliveries.iter().enumerate() {
            let when: i64 = if d.gone {
                -3
            } else if self.visible(k) {
                -10 - visible.iter().position(|v| *v == d.visible_at).unwrap() as i64
            } else if d
                .held_by
                .is_some_and(|a| matches!(self.actors[a], Actor::Running { doomed: false, .. }))
            {
                -1
            } else {
                (d.visible_at - self.now) as i64
            };
            hash(&|h| (d.dequeue_count, d.held_by.is_some(), when).hash(h));
        }
        let mut poisoned = self.poisoned.clone();
        poisoned.sort();
        hash(&|h| poisoned.hash(h));
        let mut actors: Vec<ActorKey> = self
            .actors
            .iter()
            .map(|a| match a {
                Actor::Idle => ActorKey::Idle,
                Actor::Running {
                    delivery,
                    dequeue_count,
                    doomed,
                    seen,
                    ..
                } => ActorKey::Running {
                    delivery: *delivery,
                    dequeue_count: *dequeue_count,
                    doomed: *doomed,
                    seen: *seen,
                },
            })
            .collect();
        actors.sort();
        hash(&|h| (&actors, self.crash_left).hash(h));
        (u128::from(parts.0.finish()) << 64) | u128::from(parts.1.finish())
    }

    async fn apply(&mut self, choice: Choice) {
        self.path.push(choice);
        match choice {
            Choice::Step(i) => {
                let Actor::Running { go, .. } = &mut self.actors[i] else {
                    panic!("worker {i} is not running");
                };
                go.take()
                    .expect("stopped at a hook")
                    .send(())
                    .expect("the worker waits");
                self.next_signal(i).await;
            }
            Choice::Crash(i) => {
                let Actor::Running { task, delivery, .. } =
                    std::mem::replace(&mut self.actors[i], Actor::Idle)
                else {
                    panic!("worker {i} is not running");
                };
                task.abort();
                let _ = task.await;
                self.deliveries[delivery].held_by = None;
                self.crash_left = false;
                self.trace.push(format!("w{i} dies"));
            }
            Choice::Start {
                actor,
                doomed,
                reveal,
            } => {
                if reveal {
                    let at = self.next_reveal().expect("a message to come back");
                    self.s.clock.advance(Duration::from_secs(at - self.now));
                    self.trace.push(format!("{} s pass", at - self.now));
                    self.now = at;
                }
                let k = self.next_visible().expect("a visible message");
                let worker = self.workers[actor][usize::from(doomed)].clone();
                let tx = self.tx.clone();
                let task = tokio::spawn(async move {
                    let report = worker.run_once().await;
                    let _ = tx.send(Signal::Done { actor, report });
                });
                let d = &mut self.deliveries[k];
                d.dequeue_count += 1;
                d.held_by = Some(actor);
                d.visible_at = self.now + if doomed { DOOMED } else { HELD }.as_secs();
                let dequeue_count = d.dequeue_count;
                self.trace.push(format!(
                    "w{actor} receives d{k} (c{} {}), attempt {dequeue_count}{}",
                    d.change,
                    self.sc.changes[d.change],
                    if doomed { ", and will die" } else { "" }
                ));
                self.actors[actor] = Actor::Running {
                    task,
                    go: None,
                    delivery: k,
                    dequeue_count,
                    doomed,
                    seen: 0,
                };
                self.next_signal(actor).await;
            }
        }
    }

    /// Waits for worker `i`, which was let go, to stop at its next hook or
    /// end its message.
    async fn next_signal(&mut self, i: usize) {
        let signal = self.rx.recv().await.expect("the workers signal");
        match signal {
            Signal::Step {
                actor,
                message_id,
                dequeue_count,
                step,
                name,
                go,
            } => {
                assert_eq!(actor, i, "only the worker let go moves");
                let table = name.rsplit(' ').next().unwrap_or_default().to_owned();
                let Actor::Running {
                    delivery,
                    dequeue_count: count,
                    ..
                } = &self.actors[i]
                else {
                    panic!("worker {i} is not running");
                };
                let (delivery, count) = (*delivery, *count);
                assert_eq!(
                    self.ids.get(&message_id),
                    Some(&delivery),
                    "the queue handed out the predicted message"
                );
                assert_eq!(dequeue_count, count, "the predicted dequeue count");
                self.trace.push(format!(
                    "w{i} d{delivery}#{dequeue_count} step {step}: {name}"
                ));
                if self.replaying {
                    let Actor::Running { go: slot, .. } = &mut self.actors[i] else {
                        unreachable!()
                    };
                    *slot = Some(go);
                    return;
                }
                let view = self.view(self.entity_of(delivery), &table);
                let Actor::Running { go: slot, seen, .. } = &mut self.actors[i] else {
                    unreachable!()
                };
                let mut h = DefaultHasher::new();
                (*seen, &name, view).hash(&mut h);
                *seen = h.finish();
                *slot = Some(go);
                // A read changes nothing: only a write needs the store read again.
                if !name.starts_with("read ") {
                    let before = std::mem::take(&mut self.raw);
                    self.snapshot(&format!("d{delivery}#{dequeue_count}.{step}"))
                        .await;
                    let own = row_key(self.entity_of(delivery));
                    for problem in self.foreign_writes(&before, &own) {
                        self.step_problems.push(format!(
                            "w{i} d{delivery}#{dequeue_count} step {step} ({name}): {problem}"
                        ));
                    }
                }
            }
            Signal::Done { actor, report } => {
                assert_eq!(actor, i, "only the worker let go moves");
                let report = report.expect("the receive works");
                let Actor::Running {
                    task,
                    delivery,
                    doomed,
                    dequeue_count,
                    ..
                } = std::mem::replace(&mut self.actors[i], Actor::Idle)
                else {
                    panic!("worker {i} is not running");
                };
                let _ = task.await;
                if doomed {
                    self.dead_end = true;
                }
                let d = &mut self.deliveries[delivery];
                d.held_by = None;
                let outcome = if report.succeeded == 1 {
                    d.gone = true;
                    "done"
                } else if report.failed == 1 {
                    d.visible_at = self.now + RETRY.as_secs();
                    "failed"
                } else if report.poisoned == 1 {
                    d.gone = true;
                    "poisoned"
                } else {
                    panic!("d{delivery}: {report:?}")
                };
                self.trace
                    .push(format!("w{i} d{delivery}#{dequeue_count} {outcome}"));
                if outcome == "poisoned" {
                    self.read_poison().await;
                }
                if self.replaying {
                    return;
                }
                let versions = self.versions.len();
                self.snapshot(&format!("d{delivery}#{dequeue_count}.end"))
                    .await;
                assert_eq!(versions, self.versions.len(), "a write after the last step");
            }
        }
    }

    /// What the scheduler knows of this state beyond what a replay
    /// rebuilds: the store as hashed, and what each worker observed.
    fn save(&self) -> Saved {
        Saved {
            rows: self.rows.clone(),
            rows_hash: self.rows_hash,
            seen: self
                .actors
                .iter()
                .map(|a| match a {
                    Actor::Running { seen, .. } => *seen,
                    Actor::Idle => 0,
                })
                .collect(),
        }
    }

    /// Ends a replay at the state `saved` was taken in: the store read
    /// again must hold the same rows (the code is deterministic), whose
    /// ETags are then named as they were.
    async fn resync(&mut self, saved: &Saved) {
        let raw = self.s.rows().await;
        assert_eq!(
            raw.len(),
            saved.rows.len(),
            "a replay left other rows:\n{}",
            self.trace()
        );
        self.versions.clear();
        for ((t, d), row) in raw.iter().zip(&saved.rows) {
            let mut props: Vec<(String, String)> = d
                .properties
                .iter()
                .map(|(name, value)| (name.to_owned(), self.canonical(name, value)))
                .collect();
            props.sort();
            assert!(
                *t == row.table
                    && d.partition_key == row.pk
                    && d.row_key == row.rk
                    && props == row.props,
                "a replay left another row: {d:?}, not {row:?}:\n{}",
                self.trace()
            );
            let etag = d.etag.as_ref().expect("a stored row has an ETag");
            self.versions
                .insert(etag.as_str().to_owned(), row.version.clone());
        }
        self.raw = raw;
        self.rows = saved.rows.clone();
        self.rows_hash = saved.rows_hash;
        for (a, s) in self.actors.iter_mut().zip(&saved.seen) {
            if let Actor::Running { seen, .. } = a {
                *seen = *s;
            }
        }
        self.replaying = false;
    }

    async fn read_poison(&mut self) {
        let mut out = Vec::new();
        for m in self.s.poison.peek(32).await.unwrap() {
            let p: PoisonedMessage = m.json().unwrap();
            let k = *self.ids.get(&p.message_id).expect("a delivery");
            out.push((k, classify(&p.error)));
        }
        self.poisoned = out;
    }

    fn trace(&self) -> String {
        let mut out = format!("{}\n", self.sc);
        for (n, line) in self.trace.iter().enumerate() {
            let _ = writeln!(out, "  {n:3}. {line}");
        }
        let script: Vec<String> = self.path.iter().map(Choice::to_string).collect();
        let _ = writeln!(out, "  schedule: \"{}\"", script.join(" "));
        out
    }

    /// The stored primaries: RowKey → row.
    fn primaries(&self) -> BTreeMap<String, &DynamicEntity> {
        self.raw
            .iter()
            .filter(|(t, d)| *t == EMP && d.partition_key == PRIMARY_PK)
            .map(|(_, d)| (d.row_key.clone(), d))
            .collect()
    }

    fn copies(&self) -> impl Iterator<Item = &DynamicEntity> {
        self.raw.iter().filter(|(t, _)| *t == EMAIL).map(|(_, d)| d)
    }

    /// The copies a step of a change of the employee `own` wrote, deleted or
    /// inserted that name another employee, before or after it (`before`:
    /// the rows before the step). The docs: no copy is rewritten or deleted
    /// except on behalf of the entity it names.
    fn foreign_writes(&self, before: &[(u8, DynamicEntity)], own: &str) -> Vec<String> {
        let copies = |rows: &[(u8, DynamicEntity)]| -> BTreeMap<String, (String, String)> {
            rows.iter()
                .filter(|(t, _)| *t == EMAIL)
                .map(|(_, d)| {
                    let etag = d.etag.as_ref().map(|e| e.as_str().to_owned());
                    let named = text(d, PRIMARY_ROW_KEY).unwrap_or_default().to_owned();
                    (d.row_key.clone(), (etag.unwrap_or_default(), named))
                })
                .collect()
        };
        let (was, is) = (copies(before), copies(&self.raw));
        let mut out = Vec::new();
        for key in was.keys().chain(is.keys()) {
            let (old, new) = (was.get(key), is.get(key));
            if old.map(|(e, _)| e) == new.map(|(e, _)| e) {
                continue;
            }
            for (when, row) in [("before", old), ("after", new)] {
                if let Some((_, named)) = row.filter(|(_, n)| n != own) {
                    out.push(format!(
                        "changed the copy {key}, which names {named} {when}"
                    ));
                }
            }
        }
        out.dedup();
        out
    }

    /// What the docs promise at every moment: a copy a reader sees
    /// (not a claim) never points at a missing primary; and two primaries
    /// never show one unique value, except while a remove of one of them
    /// is under way (its copies are deleted before its tombstone).
    fn check_between(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let primaries = self.primaries();
        for c in self.copies() {
            if is_pending(c) {
                continue;
            }
            let named = text(c, PRIMARY_ROW_KEY).unwrap_or_default();
            match primaries.get(named) {
                Some(p) if !is_tombstone(p) => {}
                Some(_) => problems.push(format!(
                    "the copy {} names {named}, which is removed (a tombstone)",
                    c.row_key
                )),
                None => problems.push(format!(
                    "the copy {} names {named}, which is missing",
                    c.row_key
                )),
            }
        }
        for email in EMAILS.iter().filter(|_| self.sc.unique) {
            let showing: Vec<&String> = primaries
                .iter()
                .filter(|(_, p)| !is_tombstone(p) && text(p, "Email") == Some(*email))
                .map(|(rk, _)| rk)
                .collect();
            if showing.len() > 1 {
                let removing = showing.iter().any(|rk| self.remove_pending(rk));
                if !removing {
                    problems.push(format!("{email} is shown by the primaries {showing:?}"));
                }
            }
        }
        problems
    }

    /// Whether a remove of the entity `rk` newer than its primary is still
    /// to be applied (or was given up).
    fn remove_pending(&self, rk: &str) -> bool {
        let stored = self.primaries().get(rk).map_or(0, |p| stamp(p));
        self.deliveries.iter().enumerate().any(|(k, d)| {
            let change = self.sc.changes[d.change];
            matches!(change, Op::Remove { .. })
                && row_key(change.id()) == rk
                && self.prep.stamps[d.change] > stored
                && (!d.gone || self.poisoned.iter().any(|(p, _)| *p == k))
        })
    }

    /// The RowKey of the copy of employee `id` under `email`.
    fn copy_key(&self, id: u32, email: &str) -> String {
        if self.sc.unique {
            email.to_owned()
        } else {
            format!("{email} {}", row_key(id))
        }
    }

    /// The value in the RowKey `rk` of a copy.
    fn value_of<'r>(&self, rk: &'r str) -> &'r str {
        if self.sc.unique {
            rk
        } else {
            rk.split(' ').next().unwrap_or_default()
        }
    }

    /// What the docs promise once the queue is drained.
    async fn check_drained(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let left = self.s.jobs.approximate_message_count().await.unwrap();
        if left != 0 {
            problems.push(format!("{left} messages left on the queue"));
        }
        // The poison queue holds only what the docs say may end there.
        for (k, class) in &self.poisoned {
            let op = self.sc.changes[self.deliveries[*k].change];
            match class {
                Class::Refused(holder) if matches!(op, Op::Put { .. }) && self.sc.unique => {
                    if *holder == row_key(op.id()) {
                        problems.push(format!("d{k} ({op}) refused for its own value"));
                    }
                }
                Class::NewerClaim if matches!(op, Op::Put { .. }) => {}
                Class::GivenUp => {}
                other => problems.push(format!("d{k} ({op}) poisoned: {other:?}")),
            }
        }
        for c in self.copies() {
            if is_pending(c) {
                problems.push(format!("a claim is left: {c:?}"));
            }
        }
        let primaries = self.primaries();
        let given_up_remove = |id: u32| {
            self.poisoned.iter().any(|(k, class)| {
                *class == Class::GivenUp
                    && self.sc.changes[self.deliveries[*k].change] == Op::Remove { id }
            })
        };
        let mut live: BTreeMap<u32, Employee> = BTreeMap::new();
        for id in IDS {
            let rk = row_key(id);
            // Every change not refused (or given up) in all its deliveries
            // is applied, or found a newer one: the primary is at least the
            // newest of them. One given up may or may not be applied.
            let mut must: (i64, Option<Op>) = (0, None);
            for (op, stamp) in self.sc.seeds.iter().zip(&self.prep.seed_stamps) {
                if op.id() == id {
                    must = (*stamp, Some(*op));
                }
            }
            let mut may = Vec::new();
            for (c, op) in self.sc.changes.iter().enumerate() {
                if op.id() != id {
                    continue;
                }
                let stamp = self.prep.stamps[c];
                let classes: Vec<Option<&Class>> = self
                    .deliveries
                    .iter()
                    .enumerate()
                    .filter(|(_, d)| d.change == c)
                    .map(|(k, _)| self.poisoned.iter().find(|(p, _)| *p == k).map(|(_, c)| c))
                    .collect();
                if classes.iter().any(Option::is_none) {
                    if stamp > must.0 {
                        must = (stamp, Some(*op));
                    }
                } else if classes.contains(&Some(&Class::GivenUp)) {
                    may.push((stamp, *op));
                }
            }
            let stored = primaries.get(&rk);
            let stored_stamp = stored.map_or(0, |p| stamp(p));
            let applied = if stored_stamp == must.0 {
                must.1
            } else if let Some((_, op)) =
                may.iter().find(|(s, _)| *s == stored_stamp && *s > must.0)
            {
                Some(*op)
            } else {
                problems.push(format!(
                    "employee {id}: the primary has stamp {stored_stamp}, expected {} ({:?}) or one given up of {may:?}",
                    must.0, must.1
                ));
                continue;
            };
            match (applied, stored) {
                (None, None) => {}
                (Some(Op::Remove { .. }), Some(p)) if is_tombstone(p) => {}
                (Some(Op::Put { email, .. }), Some(p))
                    if !is_tombstone(p) && text(p, "Email") == Some(EMAILS[email]) =>
                {
                    live.insert(id, employee(id, email));
                }
                (applied, stored) => problems.push(format!(
                    "employee {id}: the primary is {stored:?}, expected {applied:?}"
                )),
            }
            // What a reader gets.
            let got = self.s.index.get((DEPARTMENT, rk.as_str())).await.unwrap();
            if got.as_ref() != live.get(&id) {
                problems.push(format!("employee {id}: get reads {got:?}"));
            }
        }
        // Every copy matches its primary, every live primary has its copy,
        // and no value is held twice. The one exception the docs make: a
        // remove given up before its tombstone writes its copies back, and
        // if another employee took the value meanwhile, both primaries
        // show it (the copy is the other's).
        let shared = |id: u32, email: &str| {
            self.sc.unique
                && given_up_remove(id)
                && live.iter().any(|(o, e)| *o != id && e.email == email)
        };
        for (id, e) in &live {
            let rk = row_key(*id);
            let p = primaries[&rk];
            if shared(*id, &e.email) {
                continue;
            }
            let key = self.copy_key(*id, &e.email);
            let copy = self
                .copies()
                .find(|c| c.partition_key == EMAIL_PK && c.row_key == key);
            match copy {
                Some(c)
                    if text(c, PRIMARY_ROW_KEY) == Some(&rk)
                        && !is_pending(c)
                        && stamp(c) == stamp(p)
                        && text(c, "Email") == Some(&e.email) => {}
                other => problems.push(format!(
                    "employee {id} ({}): its copy is {other:?}",
                    e.email
                )),
            }
        }
        for c in self.copies() {
            let named = text(c, PRIMARY_ROW_KEY).unwrap_or_default();
            let shows = IDS
                .iter()
                .find(|id| row_key(**id) == named)
                .and_then(|id| live.get(id))
                .is_some_and(|e| e.email == self.value_of(&c.row_key));
            if !shows {
                problems.push(format!(
                    "a stale copy: {} names {named}, whose primary does not show it",
                    c.row_key
                ));
            }
        }
        for email in EMAILS {
            let holders: Vec<&u32> = live
                .iter()
                .filter(|(_, e)| e.email == email)
                .map(|(id, _)| id)
                .collect();
            if !self.sc.unique {
                let found = self
                    .s
                    .index
                    .lookup_all(&self.s.by_email, DEPARTMENT, email)
                    .await
                    .unwrap();
                let want: Vec<Employee> = holders.iter().map(|id| live[*id].clone()).collect();
                if found != want {
                    problems.push(format!(
                        "lookup_all {email} finds {found:?}, expected {want:?}"
                    ));
                }
                continue;
            }
            if holders.len() > 1 && !holders.iter().any(|id| given_up_remove(**id)) {
                problems.push(format!("{email} is held by employees {holders:?}"));
            }
            let found = self
                .s
                .index
                .lookup(&self.s.by_email, DEPARTMENT, email)
                .await
                .unwrap();
            let want = (holders.len() == 1).then(|| live[holders[0]].clone());
            if holders.len() <= 1 && found != want {
                problems.push(format!("lookup {email} finds {found:?}, expected {want:?}"));
            }
        }
        problems
    }
}

fn text<'d>(d: &'d DynamicEntity, name: &str) -> Option<&'d str> {
    match d.get(name) {
        Some(EdmValue::String(s)) => Some(s),
        _ => None,
    }
}

fn stamp(d: &DynamicEntity) -> i64 {
    match d.get(CHANGE_STAMP) {
        Some(EdmValue::Int64(s)) => *s,
        _ => 0,
    }
}

fn is_pending(d: &DynamicEntity) -> bool {
    d.get(PENDING) == Some(&EdmValue::Boolean(true))
}

fn is_tombstone(d: &DynamicEntity) -> bool {
    d.get(REMOVED) == Some(&EdmValue::Boolean(true))
}

// ---------------------------------------------------------------------------
// The search.

/// What a frame keeps of its state for a replay to resume from.
struct Saved {
    rows: Vec<Row>,
    rows_hash: u64,
    seen: Vec<u64>,
}

struct Frame {
    fingerprint: u128,
    saved: Saved,
    choices: Vec<Choice>,
    next: usize,
    paths: u128,
}

/// What a search found and how big it was.
#[derive(Debug, Default)]
struct Explored {
    /// Complete interleavings (counted over the state graph).
    interleavings: u128,
    /// Distinct states.
    states: usize,
    /// Runs replayed from a fresh store.
    runs: u64,
    /// Steps made in all.
    transitions: u64,
    /// Distinct drained states checked.
    drained: u64,
    /// Violations by kind: how many states or steps showed one, and the
    /// shortest run that did (its length, and what it found with the run).
    violations: BTreeMap<&'static str, (u64, usize, String)>,
    /// The same for the [`KNOWN`] kinds, which are reported, not failed.
    known: BTreeMap<&'static str, (u64, usize, String)>,
    elapsed: Duration,
}

impl Explored {
    fn add(&mut self, other: Explored) {
        self.interleavings += other.interleavings;
        self.states += other.states;
        self.runs += other.runs;
        self.transitions += other.transitions;
        self.drained += other.drained;
        for (kind, (count, length, found)) in other.violations {
            add_violation(&mut self.violations, kind, count, length, found);
        }
        for (kind, (count, length, found)) in other.known {
            add_violation(&mut self.known, kind, count, length, found);
        }
        self.elapsed += other.elapsed;
    }

    fn violation_count(&self) -> u64 {
        self.violations.values().map(|(n, _, _)| n).sum()
    }

    /// What it found: the violations (`kind: count`), and the known ones.
    fn findings(&self) -> String {
        let list = |map: &BTreeMap<&'static str, (u64, usize, String)>| {
            let kinds: Vec<String> = map
                .iter()
                .map(|(kind, (n, _, _))| format!("{kind}: {n}"))
                .collect();
            kinds.join(", ")
        };
        let mut out = format!("{} violations", self.violation_count());
        if !self.violations.is_empty() {
            let _ = write!(out, " ({})", list(&self.violations));
        }
        if !self.known.is_empty() {
            let _ = write!(out, ", known: {}", list(&self.known));
        }
        out
    }
}

fn add_violation(
    map: &mut BTreeMap<&'static str, (u64, usize, String)>,
    kind: &'static str,
    count: u64,
    length: usize,
    found: String,
) {
    let entry = map.entry(kind).or_insert((0, usize::MAX, String::new()));
    entry.0 += count;
    if length < entry.1 {
        (entry.1, entry.2) = (length, found);
    }
}

/// Kinds of violation the search finds and the code does not fix (see the
/// ignored tests `known_*`): counted and printed, with the shortest run of
/// each, but not failed. A copy names a removed primary for a moment: the
/// docs say a copy a reader sees never does ("it is written after the
/// primary and deleted before it"), but a copy is written after a read of
/// the primary that a remove can overtake, and is only deleted when the
/// worker that wrote it reads the primary again. Every such copy must be
/// gone once the queue is drained (`check_drained` finds one left).
const KNOWN: [&str; 1] = ["a copy names a removed primary"];

/// The kind of a problem the checks report.
fn kind(problem: &str) -> &'static str {
    const KINDS: [(&str, &str); 13] = [
        ("which is removed", "a copy names a removed primary"),
        ("which is missing", "a copy names a missing primary"),
        ("is shown by the primaries", "two primaries show a value"),
        (
            "changed the copy",
            "a change touched another employee's copy",
        ),
        ("messages left", "messages left on the queue"),
        ("poisoned:", "a message poisoned for another reason"),
        ("refused for its own value", "refused for its own value"),
        ("a claim is left", "a claim left"),
        ("the primary", "a primary other than expected"),
        ("get reads", "get reads another entity"),
        ("its copy is", "a primary without its copy"),
        ("a stale copy", "a stale copy"),
        ("is held by employees", "a value held twice"),
    ];
    KINDS
        .iter()
        .find(|(text, _)| problem.contains(text))
        .map_or("lookup reads another entity", |(_, kind)| kind)
}

/// Counts each of `problems` by its kind, keeping the shortest run of each.
fn record(out: &mut Explored, problems: Vec<String>, world: &World<'_>) {
    if problems.is_empty() {
        return;
    }
    let found = format!("{}\n{}", problems.join("\n"), world.trace());
    let mut kinds: Vec<&'static str> = problems.iter().map(|p| kind(p)).collect();
    kinds.sort_unstable();
    kinds.dedup();
    for k in kinds {
        let map = if KNOWN.contains(&k) {
            &mut out.known
        } else {
            &mut out.violations
        };
        add_violation(map, k, 1, world.path.len(), found.clone());
    }
}

async fn explore(sc: &Scenario) -> Explored {
    let started = Instant::now();
    let prep = Prepared::new(sc).await;
    let mut out = Explored::default();
    let mut visited: HashMap<u128, u128> = HashMap::new();
    let mut stack: Vec<Frame> = Vec::new();
    loop {
        out.runs += 1;
        let mut world = World::new(sc, &prep).await;
        world.replaying = stack.len() > 1;
        let mut depth = 0;
        let leaf = loop {
            if depth < stack.len() {
                if depth + 1 == stack.len() {
                    if world.replaying {
                        world.resync(&stack[depth].saved).await;
                    }
                    assert_eq!(
                        stack[depth].fingerprint,
                        world.fingerprint(),
                        "a replay went another way at depth {depth}:\n{}",
                        world.trace()
                    );
                }
                let choice = stack[depth].choices[stack[depth].next];
                world.apply(choice).await;
                out.transitions += 1;
                depth += 1;
                record(&mut out, std::mem::take(&mut world.step_problems), &world);
                continue;
            }
            if world.dead_end {
                break 0;
            }
            let fingerprint = world.fingerprint();
            if let Some(paths) = visited.get(&fingerprint) {
                break *paths;
            }
            let mut problems = world.check_between();
            let terminal = world.terminal();
            if terminal {
                out.drained += 1;
                problems.extend(world.check_drained().await);
            }
            record(&mut out, problems, &world);
            if terminal {
                visited.insert(fingerprint, 1);
                break 1;
            }
            let choices = world.choices();
            assert!(!choices.is_empty(), "no way on:\n{}", world.trace());
            let choice = choices[0];
            stack.push(Frame {
                fingerprint,
                saved: world.save(),
                choices,
                next: 0,
                paths: 0,
            });
            world.apply(choice).await;
            out.transitions += 1;
            depth += 1;
            record(&mut out, std::mem::take(&mut world.step_problems), &world);
        };
        drop(world);
        let mut add = leaf;
        loop {
            let Some(top) = stack.last_mut() else {
                out.interleavings = add;
                out.states = visited.len();
                out.elapsed = started.elapsed();
                return out;
            };
            top.paths = top.paths.saturating_add(add);
            top.next += 1;
            if top.next < top.choices.len() {
                break;
            }
            let done = stack.pop().expect("not empty");
            visited.insert(done.fingerprint, done.paths);
            add = done.paths;
        }
    }
}

/// Explores every scenario in turn, printing what each took.
fn run_all(scenarios: &[Scenario]) -> Explored {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut total = Explored::default();
    for sc in scenarios {
        let found = rt.block_on(explore(sc));
        println!(
            "{sc}: {} complete interleavings, {} distinct states ({} runs, {} steps, {} drained states), {}, {:.1?}",
            found.interleavings,
            found.states,
            found.runs,
            found.transitions,
            found.drained,
            found.findings(),
            found.elapsed
        );
        total.add(found);
    }
    println!(
        "{} scenarios: {} complete interleavings, {} distinct states ({} runs, {} steps, {} drained states), {}, {:.1?}",
        scenarios.len(),
        total.interleavings,
        total.states,
        total.runs,
        total.transitions,
        total.drained,
        total.findings(),
        total.elapsed
    );
    for (kind, (_, _, run)) in &total.known {
        println!("known, {kind}; the shortest run:\n{run}");
    }
    total
}

fn assert_clean(found: &Explored) {
    assert!(
        found.violations.is_empty(),
        "{}; the shortest run of each kind:\n\n{}",
        found.findings(),
        found
            .violations
            .iter()
            .map(|(kind, (_, _, run))| format!("{kind}:\n{run}"))
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

// ---------------------------------------------------------------------------
// The configurations.

fn put(id: u32, email: usize) -> Op {
    Op::Put { id, email }
}

fn remove(id: u32) -> Op {
    Op::Remove { id }
}

/// A family of scenarios: the seeds and the changes explored.
struct Family {
    name: &'static str,
    unique: bool,
    seeds: Vec<Op>,
    changes: Vec<Op>,
}

/// The configurations, two employees and two emails each:
///
/// * `move`: 1 holds `a`; 2 asks for `a` while 1 moves to `b` (the later
///   change), so 2 is refused or gets `a`, by the order;
/// * `swap`: 1 holds `a` and 2 holds `b`; each asks for the other's;
/// * `remove`: 1 holds `a` and is removed while 2 asks for `a`;
/// * `reorder`: 2 holds `b`; 1 asks for `a`, then for `b` (refused),
///   the two changes of one employee racing and delivered in any order;
/// * `shared`: the index is not unique; 1 and 2 both have `a`; 1 moves to
///   `b`, then is removed.
fn families() -> Vec<Family> {
    let (a, b) = (0, 1);
    vec![
        Family {
            name: "move",
            unique: true,
            seeds: vec![put(1, a)],
            changes: vec![put(2, a), put(1, b)],
        },
        Family {
            name: "swap",
            unique: true,
            seeds: vec![put(1, a), put(2, b)],
            changes: vec![put(1, b), put(2, a)],
        },
        Family {
            name: "remove",
            unique: true,
            seeds: vec![put(1, a)],
            changes: vec![remove(1), put(2, a)],
        },
        Family {
            name: "reorder",
            unique: true,
            seeds: vec![put(2, b)],
            changes: vec![put(1, a), put(1, b)],
        },
        Family {
            name: "shared",
            unique: false,
            seeds: vec![put(1, a), put(2, a)],
            changes: vec![put(1, b), remove(1)],
        },
    ]
}

/// Every sending order of the deliveries of `changes` changes, change
/// `twice` sent twice: the distinct permutations.
fn orders(changes: usize, twice: usize) -> Vec<Vec<usize>> {
    let mut deliveries: Vec<usize> = (0..changes).collect();
    deliveries.push(twice);
    let mut out: Vec<Vec<usize>> = Vec::new();
    fn permute(rest: &mut Vec<usize>, done: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if rest.is_empty() {
            if !out.contains(done) {
                out.push(done.clone());
            }
            return;
        }
        for i in 0..rest.len() {
            let x = rest.remove(i);
            done.push(x);
            permute(rest, done, out);
            done.pop();
            rest.insert(i, x);
        }
    }
    permute(&mut deliveries, &mut Vec::new(), &mut out);
    out
}

/// The full configuration: every family, each change in turn sent twice,
/// in every sending order, a message tried once or twice, one crash.
fn full() -> Vec<Scenario> {
    let only = std::env::var("INTER_INDEX_EXHAUSTIVE").unwrap_or_default();
    let mut out = Vec::new();
    for f in families() {
        if !only.is_empty() && !only.split(',').any(|n| n == f.name) {
            continue;
        }
        for twice in 0..f.changes.len() {
            for order in orders(f.changes.len(), twice) {
                for max_dequeue in [1, 2] {
                    out.push(Scenario {
                        seeds: f.seeds.clone(),
                        changes: f.changes.clone(),
                        order: order.clone(),
                        max_dequeue,
                        crash: true,
                        unique: f.unique,
                    });
                }
            }
        }
    }
    out
}

/// The subset the suite runs, about a minute in a debug build: every
/// family with its two changes sent once, in the order they were made, a
/// message tried once (so a worker dying at any attempt leads to the
/// give-up), one crash; `swap` and `remove` also with a message tried
/// twice (a refused change retried); and one change sent twice (employee
/// 2 asking for `a`), tried once, one crash.
fn bounded() -> Vec<Scenario> {
    let mut out = Vec::new();
    for f in families() {
        let tries: &[u32] = if matches!(f.name, "swap" | "remove") {
            &[1, 2]
        } else {
            &[1]
        };
        for max_dequeue in tries {
            out.push(Scenario {
                seeds: f.seeds.clone(),
                changes: f.changes.clone(),
                order: vec![0, 1],
                max_dequeue: *max_dequeue,
                crash: true,
                unique: f.unique,
            });
        }
    }
    out.push(Scenario {
        seeds: Vec::new(),
        changes: vec![put(2, 0)],
        order: vec![0, 0],
        max_dequeue: 1,
        crash: true,
        unique: true,
    });
    out
}

#[test]
fn every_interleaving_of_the_bounded_configurations() {
    assert_clean(&run_all(&bounded()));
}

/// The full configuration: every interleaving of every scenario. Too big
/// for a debug build; run it as the module docs say.
#[test]
#[ignore = "about a quarter of an hour in a release build (see the module docs)"]
fn every_interleaving_of_the_full_configuration() {
    assert_clean(&run_all(&full()));
}

/// Runs `schedule` (as [`Choice`] prints it) on `sc` and then the rest of
/// the run (the first worker running steps, no worker dies), and checks
/// what must hold in every state on the way and once the queue is drained.
///
/// Problems of the [`KNOWN`] kinds count only if `strict`.
fn replay(sc: &Scenario, schedule: &str, strict: bool) {
    let (mut problems, trace) = run_schedule(sc, schedule);
    problems.retain(|p| strict || !KNOWN.contains(&kind(p)));
    assert!(problems.is_empty(), "{}\n{trace}", problems.join("\n"));
}

/// A known race replayed: the copy naming a removed primary is seen in
/// between (the race happens), and nothing else is wrong, drained included.
fn replay_known(sc: &Scenario, schedule: &str) {
    let (problems, trace) = run_schedule(sc, schedule);
    assert!(
        !problems.is_empty(),
        "the known race did not happen:\n{trace}"
    );
    assert!(
        problems.iter().all(|p| KNOWN.contains(&kind(p))),
        "{}\n{trace}",
        problems.join("\n")
    );
}

/// Runs `schedule`, then the queue to the end: every problem found, and the trace.
fn run_schedule(sc: &Scenario, schedule: &str) -> (Vec<String>, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let prep = Prepared::new(sc).await;
        let mut world = World::new(sc, &prep).await;
        let mut problems = Vec::new();
        for token in schedule.split_whitespace() {
            let choice: Choice = token.parse().unwrap();
            assert!(
                world.choices().contains(&choice),
                "{choice} is not a choice here:\n{}",
                world.trace()
            );
            world.apply(choice).await;
            problems.append(&mut world.step_problems);
            problems.extend(world.check_between());
        }
        while !world.terminal() {
            let choice = world.choices()[0];
            assert!(
                !matches!(choice, Choice::Start { doomed: true, .. }),
                "the schedule leaves a worker to die:\n{}",
                world.trace()
            );
            world.apply(choice).await;
            assert!(!world.dead_end, "the doomed worker outlives the schedule");
            problems.append(&mut world.step_problems);
            problems.extend(world.check_between());
        }
        assert!(
            world.terminal(),
            "the schedule ends before the queue is drained:\n{}",
            world.trace()
        );
        problems.extend(world.check_drained().await);
        (problems, world.trace())
    })
}

/// Found by the search (2026-11-29; it fails on the code before the fix):
/// a put of employee 2 to `a` is sent twice, and a message is tried once.
/// The first delivery claims `a` and its worker dies; the second takes the
/// claim over. The first comes back over the limit and its give-up reads
/// the primary (absent); the second then writes the primary and turns the
/// claim into employee 2's copy; the give-up, finding a plain copy with
/// its change's stamp, settled it against the primary as it had read it
/// and deleted it. Employee 2's primary showed `a`, with no copy.
#[test]
fn regression_a_give_up_leaves_the_copy_another_delivery_wrote() {
    let sc = Scenario {
        seeds: vec![],
        changes: vec![put(2, 0)],
        order: vec![0, 0],
        max_dequeue: 1,
        crash: true,
        unique: true,
    };
    // d0 claims `a` and dies; d1 takes the claim over; d0 comes back and
    // its give-up reads the primary; d1 writes the primary and its copy.
    replay(&sc, "d0 0 0 x0 s0 0 0 rs1 0 0 0 0", false);
}

/// Found by the search (2026-11-29; it fails on the code before the fix):
/// the index is not unique; 1 and 2 have `a`; 1 moves to `b`, then is
/// removed; a message is tried once. The put writes 1's primary and
/// deletes the `a` copy; the remove reads the primary (`b`) and finds no
/// `b` copy yet; the put writes it and ends; the remove writes its
/// tombstone (naming the `b` copy), reads the copy in its second delete
/// pass and its worker dies. The remove comes back over the limit, and its
/// give-up, finding a tombstone, did nothing: the removed employee 1 kept
/// its `b` copy for good (`lookup_all("b")` found it). The give-up of a
/// remove whose tombstone is written now makes the second delete, as a
/// retry does.
#[test]
fn regression_a_remove_given_up_after_its_tombstone_deletes_what_it_names() {
    let sc = Scenario {
        seeds: vec![put(1, 0), put(2, 0)],
        changes: vec![put(1, 1), remove(1)],
        order: vec![0, 1],
        max_dequeue: 1,
        crash: true,
        unique: false,
    };
    replay(&sc, "s0 0 0 0 d1 1 1 0 0 0 1 1 x1", false);
}

/// Found by the search (2026-11-29; it fails on the code before the fix):
/// as above (non-unique; 1 moves to `b`, then is removed; a message tried
/// once). The put writes 1's primary, deletes the `a` copy and its worker
/// dies; the remove reads the primary (`b`) and finds no `b` copy. The put
/// comes back over the limit and its give-up reads the primary (the put's);
/// the remove writes its tombstone and ends; the give-up, its primary
/// written, wrote the non-unique copies from the primary as it had read
/// it, and did not read it again: the removed employee 1 kept its `b` copy
/// for good. It now reads the primary again after them, as a put does
/// after its copies, and brings them in line.
#[test]
fn regression_a_put_given_up_reads_the_primary_again_after_its_copies() {
    let sc = Scenario {
        seeds: vec![put(1, 0), put(2, 0)],
        changes: vec![put(1, 1), remove(1)],
        order: vec![0, 1],
        max_dequeue: 1,
        crash: true,
        unique: false,
    };
    replay(&sc, "d0 0 0 0 x0 s0 0 0 rs1 0 0 0", false);
}

/// Known (found by the search, 2026-11-29), not fixed, and checked to stay
/// as the docs now say (for a moment only): the docs say a copy
/// a reader sees never points at a missing primary, but one can for a
/// moment. The index is not unique; 1 and 2 have `a`; 1 moves to `b`, then
/// is removed, both messages run at once, no worker dies. The put writes
/// 1's primary (`b`) and deletes the `a` copy; the remove reads the
/// primary and finds no `b` copy yet; the put writes the `b` copy; the
/// remove writes its tombstone. Until the put reads the primary again (and
/// deletes the copy), `lookup_all("b")` finds the removed employee 1.
#[test]
fn known_an_older_put_writes_its_copy_after_a_newer_remove() {
    let sc = Scenario {
        seeds: vec![put(1, 0), put(2, 0)],
        changes: vec![put(1, 1), remove(1)],
        order: vec![0, 1],
        max_dequeue: 1,
        crash: false,
        unique: false,
    };
    replay_known(&sc, "s0 0 0 0 s1 1 1 0 1");
}

/// Known (found by the search, 2026-11-29), not fixed, and checked to stay
/// as the docs now say (for a moment only): as above, with a
/// unique index. 1 holds `a`; its remove is sent twice, a message is tried
/// once; 2's put of `a` is refused. The first delivery deletes 1's copy; the
/// second one's worker dies, and its give-up reads the primary (still 1's,
/// live) just before the first delivery writes the tombstone; the give-up
/// then writes 1's copy back, from the primary as it read it, and the copy
/// names the removed employee until the give-up reads the primary again
/// (and deletes it). A give-up that died there too would leave it.
#[test]
fn known_a_give_up_writes_back_a_copy_another_delivery_removed() {
    let sc = Scenario {
        seeds: vec![put(1, 0)],
        changes: vec![remove(1), put(2, 0)],
        order: vec![0, 1, 0],
        max_dequeue: 1,
        crash: true,
        unique: true,
    };
    replay_known(&sc, "s0 0 s1 1 0 1 1 1 1 1 1 d1 1 x1 rs1 0 1");
}
