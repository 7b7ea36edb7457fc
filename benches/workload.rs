//! The standard end-to-end workload (W1–W7 of the shared WORKLOAD.md) against one
//! Azurite on loopback, so tablekit's figures compare with other client libraries
//! measured the same way.
//!
//! ```text
//! eval "$(scripts/azurite.sh start)"    # exports TABLEKIT_TEST_CONNECTION_STRING, AZURITE_PID
//! cargo bench --bench workload           # TABLEKIT_BENCH_N=... to change N (default 10000)
//! scripts/azurite.sh stop
//! ```
//!
//! Each workload prints one JSON line on stdout; progress and errors go to stderr.
//! Client CPU is `getrusage(RUSAGE_SELF)` (all threads); the server's is read from
//! `/proc/$AZURITE_PID/stat`. Correctness is checked after the clock stops.

use std::time::Instant;

use futures::StreamExt;
use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;
use serde_json::json;
use tablekit::{DynamicEntity, EdmValue, EntityKey, TableClient, TableServiceClient, UpdateMode};

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

fn entity(i: usize) -> DynamicEntity {
    let minutes = i64::try_from(i).expect("N fits i64") * 60;
    let hire_date = chrono::DateTime::from_timestamp(1_577_836_800 + minutes, 0)
        .expect("HireDate within chrono's range");
    let id = uuid::Uuid::parse_str(&format!("00000000-0000-4000-8000-{i:012x}"))
        .expect("the generator's GUID text is valid");
    let photo: Vec<u8> = (0..64).map(|j| ((i + j) & 0xFF) as u8).collect();
    DynamicEntity::new(partition_key(i), row_key(i))
        .with("FirstName", format!("First-{i:08}-abcdef"))
        .with("LastName", format!("Last-{i:08}-ghijklm"))
        .with("Email", format!("user{i:08}@example.com"))
        .with("Age", age(i))
        .with("Salary", 30000.37 + i as f64)
        .with("EmployeeId", employee_id(i))
        .with("HireDate", hire_date)
        .with("Id", id)
        .with("Active", i % 3 != 0)
        .with("Photo", photo)
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

/// Prints a workload's JSON line; `n` is the number of entities it wrote or read.
fn emit(id: &str, what: &str, n: usize, requests: usize, cost: &Cost, ok: bool) {
    let cpu_s = cost.user_s + cost.sys_s;
    let per = |count: usize| (count > 0).then(|| round(cpu_s * 1e6 / count as f64, 3));
    let line = json!({
        "workload": id,
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

/// Runs W1–W7 on fresh tables, deletes them, and returns whether every check passed.
async fn run(service: TableServiceClient, n: usize, server: Option<Server>) -> bool {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let main_name = format!("tkbench{stamp}");
    let single_name = format!("tkbench{stamp}single");
    let table: TableClient<DynamicEntity> = service.table(&main_name).expect("a valid table name");
    let single: TableClient<DynamicEntity> =
        service.table(&single_name).expect("a valid table name");
    eprintln!("workload: N = {n}, tables {main_name} and {single_name}");

    let all_ok = workloads(&service, &table, &single, n, server.as_ref()).await;

    for t in [&table, &single] {
        if let Err(e) = t.delete_table_if_exists().await {
            eprintln!("workload: could not delete table {}: {e}", t.name());
        }
    }
    all_ok
}

async fn workloads(
    service: &TableServiceClient,
    table: &TableClient<DynamicEntity>,
    single: &TableClient<DynamicEntity>,
    n: usize,
    server: Option<&Server>,
) -> bool {
    // Everything the timed regions use is built first: entities, keys, chunks.
    let entities: Vec<DynamicEntity> = (0..n).map(entity).collect();
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
    emit("W1", "create table", 0, 1, &cost, ok);
    all_ok &= ok;
    if !ok {
        return false;
    }

    // W2: N1 single inserts, one at a time, into a second table created untimed.
    if let Err(e) = single.create().await {
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
    emit("W2", "insert one by one, concurrency 1", n1, n1, &cost, ok);
    all_ok &= ok;

    // W3: per partition, RowKey order, chunks of <= 100, C transactions in flight.
    let mut by_partition: Vec<Vec<&DynamicEntity>> = vec![Vec::new(); PARTITIONS];
    for (i, e) in entities.iter().enumerate() {
        by_partition[i % PARTITIONS].push(e);
    }
    let chunks: Vec<&[&DynamicEntity]> =
        by_partition.iter().flat_map(|p| p.chunks(BATCH)).collect();
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
    let mut decoded: Vec<DynamicEntity> = Vec::with_capacity(n);
    let mut requests = 0;
    let mut failures = Failures::default();
    let probe = Probe::start(server);
    let mut pages = table.query().top(PAGE).pages();
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
    let mut found: Vec<DynamicEntity> = Vec::with_capacity(expected);
    let mut requests = 0;
    let mut failures = Failures::default();
    let probe = Probe::start(server);
    let mut pages = table
        .query()
        .filter_raw("PartitionKey eq 'p042' and Age ge 30")
        .top(PAGE)
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
    let mut got: Vec<tablekit::Result<Option<DynamicEntity>>> = Vec::with_capacity(k);
    let probe = Probe::start(server);
    for key in keys {
        got.push(table.get(key).await);
    }
    let cost = probe.stop();
    let ok = check_point_reads(&got, &indices);
    emit("W6", "point get, concurrency 1", k, k, &cost, ok);
    all_ok &= ok;
    drop(got);

    // W7: K upsert-merges with Age + 1 and Salary + 1.0, concurrency 1.
    let updated: Vec<DynamicEntity> = indices
        .iter()
        .map(|&i| {
            entity(i)
                .with("Age", age(i) + 1)
                .with("Salary", 30000.37 + i as f64 + 1.0)
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
    emit("W7", "upsert-merge, concurrency 1", k, k, &cost, ok);
    all_ok &= ok;

    all_ok
}

/// One W3 transaction: encodes its inserts and sends them.
async fn send_chunk(
    table: &TableClient<DynamicEntity>,
    chunk: &[&DynamicEntity],
) -> tablekit::Result<()> {
    let mut tx = table.transaction();
    for e in chunk {
        tx.insert(e)?;
    }
    tx.send().await.map(drop)
}

// ---------------------------------------------------------------------------
// Checks, outside the clock.

fn check_full_scan(decoded: &[DynamicEntity], n: usize) -> bool {
    let mut ages: i64 = 0;
    let mut ids: i64 = 0;
    let mut photo_bytes: usize = 0;
    for e in decoded {
        match e.get("Age") {
            Some(EdmValue::Int32(a)) => ages += i64::from(*a),
            other => return fail("W4", format!("{}: Age is {other:?}", e.row_key)),
        }
        match e.get("EmployeeId") {
            Some(EdmValue::Int64(id)) => ids += id - 9_000_000_000,
            other => return fail("W4", format!("{}: EmployeeId is {other:?}", e.row_key)),
        }
        match e.get("Photo") {
            Some(EdmValue::Binary(b)) => photo_bytes += b.len(),
            other => return fail("W4", format!("{}: Photo is {other:?}", e.row_key)),
        }
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

fn check_point_reads(got: &[tablekit::Result<Option<DynamicEntity>>], indices: &[usize]) -> bool {
    let mut failures = Failures::default();
    got.iter().for_each(|r| failures.note(r));
    if !failures.none("W6") {
        return false;
    }
    for (r, &i) in got.iter().zip(indices) {
        let Ok(Some(e)) = r else {
            return fail("W6", format!("entity {i} not found"));
        };
        if e.row_key != row_key(i) || e.get("Age") != Some(&EdmValue::Int32(age(i))) {
            return fail(
                "W6",
                format!("entity {i}: RowKey {}, Age {:?}", e.row_key, e.get("Age")),
            );
        }
    }
    got.len() == indices.len()
}

async fn check_last_merge(table: &TableClient<DynamicEntity>, last: Option<usize>) -> bool {
    let Some(i) = last else { return true };
    match table.get((partition_key(i), row_key(i))).await {
        Ok(Some(e)) => {
            let age_ok = e.get("Age") == Some(&EdmValue::Int32(age(i) + 1));
            let id_ok = e.get("EmployeeId") == Some(&EdmValue::Int64(employee_id(i)));
            age_ok && id_ok
                || fail(
                    "W7",
                    format!(
                        "entity {i} reads back Age {:?}, EmployeeId {:?}",
                        e.get("Age"),
                        e.get("EmployeeId")
                    ),
                )
        }
        Ok(None) => fail("W7", format!("entity {i} is gone")),
        Err(e) => fail("W7", format!("reading entity {i} back: {e}")),
    }
}

// ---------------------------------------------------------------------------

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` does not, and a test run
    // must not start a minutes-long workload.
    if !std::env::args().skip(1).any(|a| a == "--bench") {
        eprintln!("workload: run it with `cargo bench --bench workload`; skipped");
        return;
    }
    let Some(connection) = [
        "TABLEKIT_TEST_CONNECTION_STRING",
        "TABLEKIT_CONNECTION_STRING",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty())) else {
        eprintln!("{HOW_TO_RUN}");
        return;
    };
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
    let service = match TableServiceClient::from_connection_string(&connection) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("workload: bad connection string: {e}");
            std::process::exit(2);
        }
    };
    let server = Server::from_env();
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
    eprintln!("workload: runtime {flavor}");
    let ok = if flavor == "multi_thread_spawned" {
        runtime
            .block_on(runtime.spawn(run(service, n, server)))
            .unwrap_or(false)
    } else {
        runtime.block_on(run(service, n, server))
    };
    if !ok {
        std::process::exit(1);
    }
}
