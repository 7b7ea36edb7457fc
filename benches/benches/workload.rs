//! The standard end-to-end workload (W1–W7 of the shared WORKLOAD.md) against one
//! Azurite on loopback, so tablekit's figures compare with other client libraries
//! measured the same way, and against the embedded backend, so the cost of the
//! library itself (and of the in-process store) shows next to it.
//!
//! ```text
//! eval "$(scripts/azurite.sh start)"    # exports TABLEKIT_TEST_CONNECTION_STRING, AZURITE_PID
//! cargo bench --bench workload           # TABLEKIT_BENCH_N=... to change N (default 10000)
//! scripts/azurite.sh stop
//! ```
//!
//! `TABLEKIT_BENCH_BACKEND` picks the backends: `azurite`, `embedded`,
//! `embedded_file` (the embedded store kept in a file in the temporary
//! directory, `TableServiceClient::embedded_at`: every write waits for its
//! `fsync`), `served` and `served_file` (tablekit's own emulator,
//! `tablekit::server` as `tablekit-cli serve` runs it, in a child process of
//! this bench, over memory or a fresh store file; its CPU is read as
//! Azurite's is), `both` (azurite and embedded: the default when a connection string
//! is set; `embedded` otherwise) or `all` (the three), or a comma-separated list. Each JSON
//! line carries `"backend"`, and with more than one backend a table on stderr puts
//! the per-request and per-entity CPU figures side by side.
//!
//! The whole sequence runs once per entity representation, each in fresh tables:
//! `TABLEKIT_BENCH_ENTITY=typed` (the `#[derive(TableEntity)]` struct [`Employee`]),
//! `dynamic` (the untyped [`DynamicEntity`]) or `both` (the default: typed, then dynamic).
//! `TABLEKIT_BENCH_RUNTIME` picks the tokio runtime (see `main`).
//! `TABLEKIT_BENCH_TRANSPORT` picks the HTTP transport of the Azurite runs:
//! `hyper` (tablekit's inline transport), `reqwest`, or `both` (reqwest, then
//! hyper, against the same Azurite); the backends are then named
//! `azurite_hyper` and `azurite_reqwest`. Unset, `azurite` runs on
//! `Transport::Auto`.
//!
//! Each workload prints one JSON line on stdout, with `"entity":"typed"` or
//! `"dynamic"`; progress and errors go to stderr.
//! Client CPU is `getrusage(RUSAGE_SELF)` (all threads); the server's is read from
//! `/proc/$AZURITE_PID/stat` (or the served child's). Correctness is checked
//! after the clock stops.
//!
//! `TABLEKIT_BENCH_STARTUP=1` measures start-up instead: the time from
//! spawning a server to its first answer on the Table port, five times each
//! for the served store (memory and a fresh file) and Azurite
//! (`--inMemoryPersistence`, as `scripts/azurite.sh` starts it), medians and
//! their ratio on stderr.

use std::time::Instant;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;
use serde_json::json;
use tablekit::{
    options::{ClientOptions, Transport},
    Account, DynamicEntity, EdmValue, EntityKey, TableClient, TableEntity, TableServiceClient,
    UpdateMode,
};
use uuid::Uuid;

/// Entities of W2.
const N1: usize = 1_000;
/// Point reads of W6 and upserts of W7 (at most N).
const K: usize = 1_000;
/// Transactions in flight in W3.
const C: usize = 8;
/// `$top` of the queries.
const PAGE: usize = 1_000;
/// Operations per transaction.
const BATCH: usize = 100;
const PARTITIONS: usize = 100;
const DEFAULT_N: usize = 10_000;

const HOW_TO_RUN: &str = "\
workload: no Table service configured; nothing was measured.

Start Azurite from the repository root and run the bench with what it exports:
    export AZURITE_STATE_DIR=/tmp/tk-bench-azurite
    eval \"$(scripts/azurite.sh start)\"
    cargo bench --bench workload
    scripts/azurite.sh stop
(or set TABLEKIT_TEST_CONNECTION_STRING / TABLEKIT_CONNECTION_STRING to any Table endpoint)";

// ---------------------------------------------------------------------------
// The generator: entity `i` exactly as WORKLOAD.md defines it.

fn partition_key(i: usize) -> String {
    format!("p{:03}", i % PARTITIONS)
}

fn row_key(i: usize) -> String {
    format!("{i:08}")
}

fn age(i: usize) -> i32 {
    // < 68, so the conversion cannot fail.
    18 + ((7 * i + i / 100) % 50) as i32
}

fn employee_id(i: usize) -> i64 {
    9_000_000_000 + i as i64
}

/// The workload's entity as a typed struct: the properties of WORKLOAD.md with
/// their Edm types (the derive's PascalCase names: `first_name` is `FirstName`).
#[derive(TableEntity, Debug, Clone, PartialEq)]
struct Employee {
    #[tablekit(partition_key)]
    pk: String,
    #[tablekit(row_key)]
    rk: String,
    first_name: String,
    last_name: String,
    email: String,
    /// Edm.Int32.
    age: i32,
    /// Edm.Double.
    salary: f64,
    /// Edm.Int64.
    employee_id: i64,
    /// Edm.DateTime.
    hire_date: DateTime<Utc>,
    /// Edm.Guid.
    id: Uuid,
    active: bool,
    /// Edm.Binary.
    photo: Vec<u8>,
}

/// What the workload needs of an entity representation.
trait BenchEntity: TableEntity + Clone {
    /// The `entity` field of the JSON lines.
    const KIND: &'static str;

    /// Entity `i` of the generator.
    fn build(i: usize) -> Self;

    /// W7's change: `Age + 1` and `Salary + 1.0`.
    fn bump(&mut self);

    /// Age, if it is there as an Int32.
    fn age(&self) -> Option<i32>;

    /// EmployeeId, if it is there as an Int64.
    fn employee_id(&self) -> Option<i64>;

    /// The length of Photo, if it is there as Binary.
    fn photo_len(&self) -> Option<usize>;
}

impl BenchEntity for Employee {
    const KIND: &'static str = "typed";

    fn build(i: usize) -> Self {
        let minutes = i64::try_from(i).expect("N fits i64") * 60;
        let hire_date = DateTime::from_timestamp(1_577_836_800 + minutes, 0)
            .expect("HireDate within chrono's range");
        let id = Uuid::parse_str(&format!("00000000-0000-4000-8000-{i:012x}"))
            .expect("the generator's GUID text is valid");
        Employee {
            pk: partition_key(i),
            rk: row_key(i),
            first_name: format!("First-{i:08}-abcdef"),
            last_name: format!("Last-{i:08}-ghijklm"),
            email: format!("user{i:08}@example.com"),
            age: age(i),
            salary: 30000.37 + i as f64,
            employee_id: employee_id(i),
            hire_date,
            id,
            active: !i.is_multiple_of(3),
            photo: (0..64).map(|j| ((i + j) & 0xFF) as u8).collect(),
        }
    }

    fn bump(&mut self) {
        self.age += 1;
        self.salary += 1.0;
    }

    fn age(&self) -> Option<i32> {
        Some(self.age)
    }

    fn employee_id(&self) -> Option<i64> {
        Some(self.employee_id)
    }

    fn photo_len(&self) -> Option<usize> {
        Some(self.photo.len())
    }
}

impl BenchEntity for DynamicEntity {
    const KIND: &'static str = "dynamic";

    /// The same values as the typed generator, as a property bag.
    fn build(i: usize) -> Self {
        let e = Employee::build(i);
        DynamicEntity::new(e.pk, e.rk)
            .with("FirstName", e.first_name)
            .with("LastName", e.last_name)
            .with("Email", e.email)
            .with("Age", e.age)
            .with("Salary", e.salary)
            .with("EmployeeId", e.employee_id)
            .with("HireDate", e.hire_date)
            .with("Id", e.id)
            .with("Active", e.active)
            .with("Photo", e.photo)
    }

    fn bump(&mut self) {
        let (Some(&EdmValue::Int32(age)), Some(&EdmValue::Double(salary))) =
            (self.get("Age"), self.get("Salary"))
        else {
            panic!("{}: Age or Salary missing or mistyped", self.row_key);
        };
        self.set("Age", age + 1);
        self.set("Salary", salary + 1.0);
    }

    fn age(&self) -> Option<i32> {
        match self.get("Age") {
            Some(&EdmValue::Int32(a)) => Some(a),
            _ => None,
        }
    }

    fn employee_id(&self) -> Option<i64> {
        match self.get("EmployeeId") {
            Some(&EdmValue::Int64(id)) => Some(id),
            _ => None,
        }
    }

    fn photo_len(&self) -> Option<usize> {
        match self.get("Photo") {
            Some(EdmValue::Binary(b)) => Some(b.len()),
            _ => None,
        }
    }
}

/// Entity `i` of W6 and W7's `k`-th call.
fn point_index(k: usize, n: usize) -> usize {
    (k * 7919) % n
}

// ---------------------------------------------------------------------------
// Measurement.

fn seconds(t: TimeVal) -> f64 {
    t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6
}

/// User and system CPU seconds of this process, all threads.
fn client_cpu() -> (f64, f64) {
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => (seconds(u.user_time()), seconds(u.system_time())),
        Err(e) => panic!("getrusage(RUSAGE_SELF) failed: {e}"),
    }
}

/// The Azurite process whose CPU time is read from `/proc/<pid>/stat`.
struct Server {
    pid: u32,
    ticks_per_s: f64,
}

impl Server {
    fn from_env() -> Option<Server> {
        let pid = std::env::var("AZURITE_PID").ok()?.trim().parse().ok()?;
        Server::of(pid)
    }

    fn of(pid: u32) -> Option<Server> {
        let ticks_per_s = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|&t| t > 0)
            .map_or(100.0, |t| t as f64);
        let server = Server { pid, ticks_per_s };
        if server.cpu().is_none() {
            eprintln!("workload: cannot read /proc/{pid}/stat; server_cpu_s will be null");
            return None;
        }
        Some(server)
    }

    /// utime + stime in seconds.
    fn cpu(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        // The command name (field 2) may hold spaces: count fields after its ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        // Field 3 (state) is the first after ')'; utime and stime are fields 14 and 15.
        let utime: u64 = fields.nth(11)?.parse().ok()?;
        let stime: u64 = fields.next()?.parse().ok()?;
        Some((utime + stime) as f64 / self.ticks_per_s)
    }
}

/// The clocks at the start of a workload.
struct Probe<'a> {
    server: Option<&'a Server>,
    wall: Instant,
    user: f64,
    sys: f64,
    server_cpu: Option<f64>,
}

/// What a workload cost.
struct Cost {
    wall_s: f64,
    user_s: f64,
    sys_s: f64,
    server_s: Option<f64>,
}

impl<'a> Probe<'a> {
    fn start(server: Option<&'a Server>) -> Self {
        let server_cpu = server.and_then(Server::cpu);
        let (user, sys) = client_cpu();
        Probe {
            server,
            wall: Instant::now(),
            user,
            sys,
            server_cpu,
        }
    }

    fn stop(self) -> Cost {
        let wall_s = self.wall.elapsed().as_secs_f64();
        let (user, sys) = client_cpu();
        let server_s = match (self.server_cpu, self.server.and_then(Server::cpu)) {
            (Some(before), Some(after)) => Some(after - before),
            _ => None,
        };
        Cost {
            wall_s,
            user_s: user - self.user,
            sys_s: sys - self.sys,
            server_s,
        }
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// One emitted figure, kept for the side-by-side table at the end.
struct Figure {
    backend: &'static str,
    entity: String,
    workload: String,
    per_request_us: Option<f64>,
    per_entity_us: Option<f64>,
    server_per_request_us: Option<f64>,
}

static FIGURES: std::sync::Mutex<Vec<Figure>> = std::sync::Mutex::new(Vec::new());

/// The backend being measured, for `emit` (backends are measured one after the other).
static BACKEND: std::sync::Mutex<&'static str> = std::sync::Mutex::new("azurite");

/// Prints a workload's JSON line; `n` is the number of entities it wrote or read.
fn emit(entity: &str, id: &str, what: &str, n: usize, requests: usize, cost: &Cost, ok: bool) {
    let cpu_s = cost.user_s + cost.sys_s;
    let per = |count: usize| (count > 0).then(|| round(cpu_s * 1e6 / count as f64, 3));
    let backend = *BACKEND
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    FIGURES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(Figure {
            backend,
            entity: entity.to_owned(),
            workload: id.to_owned(),
            per_request_us: per(requests),
            per_entity_us: per(n),
            server_per_request_us: cost
                .server_s
                .filter(|_| requests > 0)
                .map(|s| round(s * 1e6 / requests as f64, 1)),
        });
    let line = json!({
        "backend": backend,
        "workload": id,
        "entity": entity,
        "what": what,
        "n": n,
        "requests": requests,
        "wall_s": round(cost.wall_s, 6),
        "cpu_user_s": round(cost.user_s, 6),
        "cpu_sys_s": round(cost.sys_s, 6),
        "cpu_s": round(cpu_s, 6),
        "server_cpu_s": cost.server_s.map(|s| round(s, 3)),
        "ok": ok,
        "cpu_us_per_request": per(requests),
        "cpu_us_per_entity": per(n),
    });
    println!("{line}");
}

/// Counts failures and keeps the first for stderr.
#[derive(Default)]
struct Failures {
    count: usize,
    first: Option<String>,
}

impl Failures {
    fn note<T>(&mut self, r: &tablekit::Result<T>) {
        if let Err(e) = r {
            self.count += 1;
            if self.first.is_none() {
                self.first = Some(e.to_string());
            }
        }
    }

    /// Whether there were none; reports them on stderr otherwise.
    fn none(&self, id: &str) -> bool {
        if let Some(first) = &self.first {
            eprintln!(
                "workload {id}: {} failed call(s); first: {first}",
                self.count
            );
        }
        self.count == 0
    }
}

fn fail(id: &str, why: impl std::fmt::Display) -> bool {
    eprintln!("workload {id}: check failed: {why}");
    false
}

// ---------------------------------------------------------------------------
// The workloads.

/// Which entity representations to measure, in order.
fn kinds_from_env() -> Vec<&'static str> {
    match std::env::var("TABLEKIT_BENCH_ENTITY") {
        Err(_) => vec![Employee::KIND, DynamicEntity::KIND],
        Ok(v) => match v.trim() {
            "both" | "" => vec![Employee::KIND, DynamicEntity::KIND],
            "typed" => vec![Employee::KIND],
            "dynamic" => vec![DynamicEntity::KIND],
            other => {
                eprintln!(
                    "workload: TABLEKIT_BENCH_ENTITY is typed, dynamic or both, not {other:?}"
                );
                std::process::exit(2);
            }
        },
    }
}

/// Runs the whole sequence for each representation in `kinds`; whether every check passed.
async fn run_all(
    service: TableServiceClient,
    n: usize,
    server: Option<Server>,
    kinds: Vec<&'static str>,
) -> bool {
    let mut all_ok = true;
    for kind in kinds {
        all_ok &= if kind == Employee::KIND {
            run::<Employee>(&service, n, server.as_ref()).await
        } else {
            run::<DynamicEntity>(&service, n, server.as_ref()).await
        };
    }
    all_ok
}

/// Runs W1–W7 with entities of type `T` on fresh tables, deletes them, and
/// returns whether every check passed.
async fn run<T: BenchEntity>(
    service: &TableServiceClient,
    n: usize,
    server: Option<&Server>,
) -> bool {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let main_name = format!("tkbench{stamp}{}", T::KIND);
    let single_name = format!("tkbench{stamp}{}single", T::KIND);
    let table: TableClient<T> = service.table(&main_name).expect("a valid table name");
    let single: TableClient<T> = service.table(&single_name).expect("a valid table name");
    eprintln!(
        "workload: {} entities, N = {n}, tables {main_name} and {single_name}",
        T::KIND
    );

    let all_ok = workloads(service, &table, &single, n, server).await;

    for t in [&table, &single] {
        if let Err(e) = t.delete_table_if_exists().await {
            eprintln!("workload: could not delete table {}: {e}", t.name());
        }
    }
    all_ok
}

async fn workloads<T: BenchEntity>(
    service: &TableServiceClient,
    table: &TableClient<T>,
    single: &TableClient<T>,
    n: usize,
    server: Option<&Server>,
) -> bool {
    let kind = T::KIND;
    // Everything the timed regions use is built first: entities, keys, chunks.
    let entities: Vec<T> = (0..n).map(T::build).collect();
    let n1 = N1.min(n);
    let k = K.min(n);
    let mut all_ok = true;

    // W1: create the main table.
    let probe = Probe::start(server);
    let created = service.create_table(table.name()).await;
    let cost = probe.stop();
    let mut failures = Failures::default();
    failures.note(&created);
    let ok = failures.none("W1");
    emit(kind, "W1", "create table", 0, 1, &cost, ok);
    all_ok &= ok;
    if !ok {
        return false;
    }

    // W2: N1 single inserts, one at a time, into a second table created untimed.
    if let Err(e) = single.create_table().await {
        eprintln!("workload W2: cannot create the second table: {e}");
        return false;
    }
    let mut failures = Failures::default();
    let probe = Probe::start(server);
    for e in &entities[..n1] {
        let r = single.insert(e).await;
        failures.note(&r);
    }
    let cost = probe.stop();
    let ok = failures.none("W2");
    emit(
        kind,
        "W2",
        "insert one by one, concurrency 1",
        n1,
        n1,
        &cost,
        ok,
    );
    all_ok &= ok;

    // W3: per partition, RowKey order, chunks of <= 100, C transactions in flight.
    let mut by_partition: Vec<Vec<&T>> = vec![Vec::new(); PARTITIONS];
    for (i, e) in entities.iter().enumerate() {
        by_partition[i % PARTITIONS].push(e);
    }
    let chunks: Vec<&[&T]> = by_partition.iter().flat_map(|p| p.chunks(BATCH)).collect();
    let probe = Probe::start(server);
    // Futures do nothing until polled: each transaction is encoded when its turn comes.
    let sends: Vec<_> = chunks.iter().map(|c| send_chunk(table, c)).collect();
    let results: Vec<tablekit::Result<()>> = futures::stream::iter(sends)
        .buffer_unordered(C)
        .collect()
        .await;
    let cost = probe.stop();
    let mut failures = Failures::default();
    results.iter().for_each(|r| failures.note(r));
    let ok = failures.none("W3");
    emit(
        kind,
        "W3",
        "entity-group transactions of <= 100, concurrency 8",
        n,
        chunks.len(),
        &cost,
        ok,
    );
    all_ok &= ok;
    drop(results);

    // W4: the whole table, 1000 per page, every entity decoded.
    let mut decoded: Vec<T> = Vec::with_capacity(n);
    let mut requests = 0;
    let mut failures = Failures::default();
    let probe = Probe::start(server);
    let mut pages = table.query().page_size(PAGE).pages();
    while let Some(page) = pages.next().await {
        requests += 1;
        match page {
            Ok(p) => decoded.extend(p.items),
            Err(e) => {
                failures.note::<()>(&Err(e));
                break;
            }
        }
    }
    let cost = probe.stop();
    drop(pages);
    let ok = failures.none("W4") && check_full_scan(&decoded, n);
    emit(
        kind,
        "W4",
        "query all, $top=1000",
        decoded.len(),
        requests,
        &cost,
        ok,
    );
    all_ok &= ok;
    drop(decoded);

    // W5: a filtered query inside one partition.
    let expected = (0..n)
        .filter(|&i| i % PARTITIONS == 42 && age(i) >= 30)
        .count();
    let mut found: Vec<T> = Vec::with_capacity(expected);
    let mut requests = 0;
    let mut failures = Failures::default();
    let probe = Probe::start(server);
    let mut pages = table
        .query()
        .filter_raw("PartitionKey eq 'p042' and Age ge 30")
        .page_size(PAGE)
        .pages();
    while let Some(page) = pages.next().await {
        requests += 1;
        match page {
            Ok(p) => found.extend(p.items),
            Err(e) => {
                failures.note::<()>(&Err(e));
                break;
            }
        }
    }
    let cost = probe.stop();
    drop(pages);
    let ok = failures.none("W5")
        && (found.len() == expected
            || fail(
                "W5",
                format!("{} entities, expected {expected}", found.len()),
            ));
    emit(
        kind,
        "W5",
        "filtered query in one partition",
        found.len(),
        requests,
        &cost,
        ok,
    );
    all_ok &= ok;

    // W6: K point reads, concurrency 1.
    let indices: Vec<usize> = (0..k).map(|k| point_index(k, n)).collect();
    let keys: Vec<EntityKey> = indices
        .iter()
        .map(|&i| EntityKey::new(partition_key(i), row_key(i)))
        .collect();
    let mut got: Vec<tablekit::Result<Option<T>>> = Vec::with_capacity(k);
    let probe = Probe::start(server);
    for key in keys {
        got.push(table.get(key).await);
    }
    let cost = probe.stop();
    let ok = check_point_reads(&got, &indices);
    emit(kind, "W6", "point get, concurrency 1", k, k, &cost, ok);
    all_ok &= ok;
    drop(got);

    // W7: K upsert-merges with Age + 1 and Salary + 1.0, concurrency 1.
    let updated: Vec<T> = indices
        .iter()
        .map(|&i| {
            let mut e = T::build(i);
            e.bump();
            e
        })
        .collect();
    let mut failures = Failures::default();
    let probe = Probe::start(server);
    for e in &updated {
        let r = table.upsert(e, UpdateMode::Merge).await;
        failures.note(&r);
    }
    let cost = probe.stop();
    let ok = failures.none("W7") && check_last_merge(table, indices.last().copied()).await;
    emit(kind, "W7", "upsert-merge, concurrency 1", k, k, &cost, ok);
    all_ok &= ok;

    all_ok
}

/// One W3 transaction: encodes its inserts and sends them.
async fn send_chunk<T: BenchEntity>(table: &TableClient<T>, chunk: &[&T]) -> tablekit::Result<()> {
    let mut tx = table.transaction();
    for e in chunk {
        tx.insert(e)?;
    }
    tx.send().await.map(drop)
}

// ---------------------------------------------------------------------------
// Checks, outside the clock.

fn check_full_scan<T: BenchEntity>(decoded: &[T], n: usize) -> bool {
    let mut ages: i64 = 0;
    let mut ids: i64 = 0;
    let mut photo_bytes: usize = 0;
    for e in decoded {
        let (Some(age), Some(id), Some(photo)) = (e.age(), e.employee_id(), e.photo_len()) else {
            return fail(
                "W4",
                format!(
                    "{}: Age {:?}, EmployeeId {:?}, Photo length {:?}",
                    e.row_key(),
                    e.age(),
                    e.employee_id(),
                    e.photo_len()
                ),
            );
        };
        ages += i64::from(age);
        ids += id - 9_000_000_000;
        photo_bytes += photo;
    }
    let want_ages: i64 = (0..n).map(|i| i64::from(age(i))).sum();
    let n64 = n as i64;
    if decoded.len() != n {
        return fail("W4", format!("{} entities, expected {n}", decoded.len()));
    }
    if ages != want_ages {
        return fail("W4", format!("sum(Age) = {ages}, expected {want_ages}"));
    }
    if ids != n64 * (n64 - 1) / 2 {
        return fail("W4", format!("sum(EmployeeId - 9e9) = {ids}"));
    }
    if photo_bytes != 64 * n {
        return fail(
            "W4",
            format!("{photo_bytes} Photo bytes, expected {}", 64 * n),
        );
    }
    true
}

fn check_point_reads<T: BenchEntity>(
    got: &[tablekit::Result<Option<T>>],
    indices: &[usize],
) -> bool {
    let mut failures = Failures::default();
    got.iter().for_each(|r| failures.note(r));
    if !failures.none("W6") {
        return false;
    }
    for (r, &i) in got.iter().zip(indices) {
        let Ok(Some(e)) = r else {
            return fail("W6", format!("entity {i} not found"));
        };
        if e.row_key() != row_key(i) || e.age() != Some(age(i)) {
            return fail(
                "W6",
                format!("entity {i}: RowKey {}, Age {:?}", e.row_key(), e.age()),
            );
        }
    }
    got.len() == indices.len()
}

/// Reads the last merged entity back as `T`, and (for the typed representation)
/// also as a property bag, so that the stored Edm types are checked too.
async fn check_last_merge<T: BenchEntity>(table: &TableClient<T>, last: Option<usize>) -> bool {
    let Some(i) = last else { return true };
    let typed_ok = read_back(table, i).await;
    typed_ok
        && (T::KIND == DynamicEntity::KIND
            || read_back(&table.with_type::<DynamicEntity>(), i).await)
}

/// The one untimed get of W7: `Age + 1` and the Int64 EmployeeId intact.
async fn read_back<T: BenchEntity>(table: &TableClient<T>, i: usize) -> bool {
    match table.get((partition_key(i), row_key(i))).await {
        Ok(Some(e)) => {
            e.age() == Some(age(i) + 1) && e.employee_id() == Some(employee_id(i))
                || fail(
                    "W7",
                    format!(
                        "entity {i} reads back ({}) with Age {:?}, EmployeeId {:?}",
                        T::KIND,
                        e.age(),
                        e.employee_id()
                    ),
                )
        }
        Ok(None) => fail("W7", format!("entity {i} is gone")),
        Err(e) => fail("W7", format!("reading entity {i} back: {e}")),
    }
}

// ---------------------------------------------------------------------------

/// The per-request and per-entity CPU figures of every backend, side by side (stderr).
fn print_comparison(backends: &[&'static str]) {
    let figures = FIGURES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
    let mut header = format!("{:<8} {:<4}", "entity", "id");
    for b in backends {
        header.push_str(&format!(
            " {:>20} {:>20} {:>22}",
            format!("{b} us/req"),
            format!("{b} us/ent"),
            format!("{b} server us/req")
        ));
    }
    eprintln!("\n{header}");
    let mut rows: Vec<(&str, &str)> = Vec::new();
    for f in figures.iter() {
        if !rows.contains(&(f.entity.as_str(), f.workload.as_str())) {
            rows.push((&f.entity, &f.workload));
        }
    }
    for (entity, id) in rows {
        let mut line = format!("{entity:<8} {id:<4}");
        for b in backends {
            let f = figures
                .iter()
                .find(|f| f.backend == *b && f.entity == entity && f.workload == id);
            line.push_str(&format!(
                " {:>20} {:>20} {:>22}",
                show(f.and_then(|f| f.per_request_us)),
                show(f.and_then(|f| f.per_entity_us)),
                show(f.and_then(|f| f.server_per_request_us))
            ));
        }
        eprintln!("{line}");
    }
}

/// The served store's child process: this bench binary run with
/// `--serve-role [FILE]` serves until its standard input closes.
struct Served {
    child: std::process::Child,
    connection: String,
    file: Option<std::path::PathBuf>,
}

impl Served {
    /// Starts the child and waits for its connection string.
    fn spawn(file: Option<std::path::PathBuf>) -> Served {
        use std::io::BufRead as _;
        let mut command = std::process::Command::new(std::env::current_exe().expect("own path"));
        command.arg("--serve-role");
        if let Some(f) = &file {
            let _ = std::fs::remove_file(f);
            command.arg(f);
        }
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the served store");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("the server's connection string");
        Served {
            child,
            connection: line.trim().to_owned(),
            file,
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
        if let Some(f) = &self.file {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The `--serve-role` child: a server on free ports, its connection string
/// on stdout, until stdin closes.
fn serve_role(file: Option<&str>) {
    use std::io::{Read as _, Write as _};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let mut builder = tablekit::server::Server::builder().ports(0, 0, 0);
        if let Some(f) = file {
            builder = builder.file(f);
        }
        let server = builder.start().await.expect("start the server");
        println!("{}", server.connection_string());
        let _ = std::io::stdout().flush();
        let _ = tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await;
        server.shutdown().await.expect("stop the server");
    });
}

/// The milliseconds from spawning `command` to the first answer of its
/// Table port `port` (any HTTP status).
fn time_to_first_answer(
    mut command: std::process::Command,
    port: impl Fn(&mut std::process::Child) -> u16,
) -> f64 {
    use std::io::{Read as _, Write as _};
    let start = Instant::now();
    let mut child = command.spawn().expect("start the server");
    let port = port(&mut child);
    loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let request = format!(
                "GET /devstoreaccount1/Tables HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
            );
            let mut answer = [0u8; 12];
            if stream.write_all(request.as_bytes()).is_ok()
                && stream.read_exact(&mut answer).is_ok()
                && answer.starts_with(b"HTTP/1.1 ")
            {
                break;
            }
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "no answer within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let _ = child.kill();
    let _ = child.wait();
    ms
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `TABLEKIT_BENCH_STARTUP`: start-up times of the served store and Azurite.
fn startup() {
    use std::io::BufRead as _;
    const RUNS: usize = 5;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let served = |file: Option<std::path::PathBuf>| {
        let mut command = std::process::Command::new(std::env::current_exe().expect("own path"));
        command.arg("--serve-role");
        if let Some(f) = &file {
            let _ = std::fs::remove_file(f);
            command.arg(f);
        }
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let ms = time_to_first_answer(command, |child| {
            let mut line = String::new();
            std::io::BufReader::new(child.stdout.take().expect("piped"))
                .read_line(&mut line)
                .expect("the server's connection string");
            let table = line
                .split(';')
                .find_map(|s| s.strip_prefix("TableEndpoint=http://127.0.0.1:"))
                .expect("a table endpoint");
            table.split('/').next().unwrap().parse().expect("a port")
        });
        if let Some(f) = &file {
            let _ = std::fs::remove_file(f);
        }
        ms
    };
    let file = std::env::temp_dir().join(format!("tablekit-startup-{}.redb", std::process::id()));
    let served_memory = median((0..RUNS).map(|_| served(None)).collect());
    let served_file = median((0..RUNS).map(|_| served(Some(file.clone()))).collect());
    let azurite_js = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tools/azurite/node_modules/azurite/dist/src/azurite.js");
    let azurite = azurite_js.exists().then(|| {
        let work = std::env::temp_dir().join(format!("tablekit-startup-az-{}", std::process::id()));
        std::fs::create_dir_all(&work).expect("a scratch folder");
        let ms = median(
            (0..RUNS)
                .map(|_| {
                    let (blob, queue, table) = (free_port(), free_port(), free_port());
                    let mut command = std::process::Command::new("node");
                    command
                        .current_dir(&work)
                        .arg(&azurite_js)
                        .args(["--blobHost", "127.0.0.1", "--blobPort", &blob.to_string()])
                        .args([
                            "--queueHost",
                            "127.0.0.1",
                            "--queuePort",
                            &queue.to_string(),
                        ])
                        .args([
                            "--tableHost",
                            "127.0.0.1",
                            "--tablePort",
                            &table.to_string(),
                        ])
                        .args([
                            "--inMemoryPersistence",
                            "--disableTelemetry",
                            "--skipApiVersionCheck",
                            "--loose",
                        ])
                        .stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null());
                    time_to_first_answer(command, |_| table)
                })
                .collect(),
        );
        let _ = std::fs::remove_dir_all(&work);
        ms
    });
    for (name, ms) in [
        ("served", Some(served_memory)),
        ("served_file", Some(served_file)),
        ("azurite", azurite),
    ] {
        println!(
            "{}",
            json!({"startup": name, "runs": RUNS, "median_ms": ms.map(|m| round(m, 1))})
        );
    }
    match azurite {
        Some(az) => eprintln!(
            "start-up, median of {RUNS}: served {served_memory:.1} ms, served over a file \
             {served_file:.1} ms, Azurite {az:.1} ms; served/Azurite = {:.3}",
            served_memory / az
        ),
        None => eprintln!(
            "start-up, median of {RUNS}: served {served_memory:.1} ms, served over a file \
             {served_file:.1} ms (Azurite not installed: tools/azurite, npm ci)"
        ),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--serve-role") {
        serve_role(args.get(2).map(String::as_str));
        return;
    }
    // `cargo bench` passes --bench; `cargo test --benches` does not, and a test run
    // must not start a minutes-long workload.
    if !std::env::args().skip(1).any(|a| a == "--bench") {
        eprintln!("workload: run it with `cargo bench --bench workload`; skipped");
        return;
    }
    if std::env::var_os("TABLEKIT_BENCH_STARTUP").is_some() {
        startup();
        return;
    }
    let connection = [
        "TABLEKIT_TEST_CONNECTION_STRING",
        "TABLEKIT_CONNECTION_STRING",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()));
    let backends: Vec<&'static str> = match std::env::var("TABLEKIT_BENCH_BACKEND") {
        Err(_) if connection.is_some() => vec!["azurite", "embedded"],
        Err(_) => {
            eprintln!("workload: no connection string: measuring the embedded backend only");
            vec!["embedded"]
        }
        Ok(v) => {
            let mut picked = Vec::new();
            for one in v.split(',').map(str::trim) {
                match one {
                    "both" | "" => picked.extend(["azurite", "embedded"]),
                    "all" => picked.extend(["azurite", "embedded", "embedded_file"]),
                    "azurite" => picked.push("azurite"),
                    "embedded" => picked.push("embedded"),
                    "embedded_file" => picked.push("embedded_file"),
                    "served" => picked.push("served"),
                    "served_file" => picked.push("served_file"),
                    other => {
                        eprintln!("workload: TABLEKIT_BENCH_BACKEND is azurite, embedded, embedded_file, served, served_file, both or all (or a list), not {other:?}");
                        std::process::exit(2);
                    }
                }
            }
            picked.dedup();
            picked
        }
    };
    if backends.contains(&"azurite") && connection.is_none() {
        eprintln!("{HOW_TO_RUN}");
        return;
    }
    let transports: Vec<&'static str> = match std::env::var("TABLEKIT_BENCH_TRANSPORT") {
        Err(_) => vec!["azurite"],
        Ok(v) => {
            match v.trim() {
                "" => vec!["azurite"],
                "hyper" => vec!["azurite_hyper"],
                "reqwest" => vec!["azurite_reqwest"],
                "both" => vec!["azurite_reqwest", "azurite_hyper"],
                other => {
                    eprintln!("workload: TABLEKIT_BENCH_TRANSPORT is hyper, reqwest or both, not {other:?}");
                    std::process::exit(2);
                }
            }
        }
    };
    let backends: Vec<&'static str> = backends
        .into_iter()
        .flat_map(|b| {
            if b == "azurite" {
                transports.clone()
            } else {
                vec![b]
            }
        })
        .collect();
    let n = match std::env::var("TABLEKIT_BENCH_N") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("workload: TABLEKIT_BENCH_N must be a positive integer, not {v:?}");
                std::process::exit(2);
            }
        },
        Err(_) => DEFAULT_N,
    };
    let kinds = kinds_from_env();
    // The runtime: a multi-thread one with the workload driven from the main thread
    // (as under `#[tokio::main]`) by default; the others help to tell runtime
    // overhead from the library's own cost.
    let flavor = std::env::var("TABLEKIT_BENCH_RUNTIME").unwrap_or_else(|_| "multi_thread".into());
    let mut builder = match flavor.as_str() {
        "multi_thread" | "multi_thread_spawned" => tokio::runtime::Builder::new_multi_thread(),
        "current_thread" => tokio::runtime::Builder::new_current_thread(),
        other => {
            eprintln!(
                "workload: TABLEKIT_BENCH_RUNTIME is multi_thread, multi_thread_spawned or current_thread, not {other:?}"
            );
            std::process::exit(2);
        }
    };
    let runtime = builder.enable_all().build().expect("a tokio runtime");
    eprintln!("workload: runtime {flavor}, entities {kinds:?}, backends {backends:?}");
    let mut ok = true;
    // The store file of `embedded_file`, removed at the end.
    let file = std::env::temp_dir().join(format!("tablekit-bench-{}.redb", std::process::id()));
    for &backend in &backends {
        // The served store's child, stopped after its backend's run.
        let mut served = None;
        let (service, server) = if backend.starts_with("served") {
            let child = Served::spawn((backend == "served_file").then(|| {
                std::env::temp_dir()
                    .join(format!("tablekit-bench-served-{}.redb", std::process::id()))
            }));
            let service = Account::from_connection_string(&child.connection)
                .and_then(TableServiceClient::new)
                .expect("the served store's connection string");
            let server = Server::of(child.child.id());
            served = Some(child);
            (service, server)
        } else if backend == "embedded_file" {
            let _ = std::fs::remove_file(&file);
            match TableServiceClient::embedded_at(&file) {
                Ok(s) => (s, None),
                Err(e) => {
                    eprintln!("workload: cannot open the store file: {e}");
                    std::process::exit(2);
                }
            }
        } else if backend.starts_with("azurite") {
            let connection = connection.as_deref().unwrap_or_default();
            let mut options = ClientOptions::default();
            options.http.transport = match backend {
                "azurite_hyper" => Transport::Hyper,
                "azurite_reqwest" => Transport::Reqwest,
                _ => Transport::Auto,
            };
            match Account::from_connection_string(connection)
                .and_then(|account| TableServiceClient::with_options(account, options))
            {
                Ok(s) => (s, Server::from_env()),
                Err(e) => {
                    eprintln!("workload: bad connection string: {e}");
                    std::process::exit(2);
                }
            }
        } else {
            (TableServiceClient::embedded(), None)
        };
        let kinds = kinds.clone();
        *BACKEND
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = backend;
        let measured = run_all(service, n, server, kinds);
        ok &= if flavor == "multi_thread_spawned" {
            runtime.block_on(runtime.spawn(measured)).unwrap_or(false)
        } else {
            runtime.block_on(measured)
        };
        drop(served);
    }
    let _ = std::fs::remove_file(&file);
    if backends.len() > 1 {
        print_comparison(&backends);
    }
    if !ok {
        std::process::exit(1);
    }
}
