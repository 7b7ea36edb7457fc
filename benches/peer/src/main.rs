//! The standard workload (W1–W7 of the shared WORKLOAD.md) measured on a peer:
//! the Azure SDK for Rust's `azure_data_tables` 0.21, against one Azurite on
//! loopback, printing the same JSON lines as tablekit's
//! `benches/benches/workload.rs` (`"backend":"azure_data_tables"`), so the
//! two compare line by line (issue 12). `scripts/bench-peer.sh` runs both.
//!
//! ```text
//! eval "$(bash scripts/azurite.sh start)"      # from the repository root
//! cargo run --release --manifest-path benches/peer/Cargo.toml
//! ```
//!
//! Settings: `TABLEKIT_CONNECTION_STRING` or `TABLEKIT_TEST_CONNECTION_STRING`
//! (`AccountName`, `AccountKey` and a loopback `TableEndpoint`; without one the
//! emulator's well-known account on 127.0.0.1:10002), `PEER_BENCH_N` (N,
//! default 10,000), `PEER_RUNTIME` (`current_thread` or `multi_thread`, the
//! default), `PEER_TRANSPORT` (`default`: the SDK's own reqwest client, built
//! with `pool_max_idle_per_host(0)`, so a new TCP connection per request;
//! `pooled`: a keep-alive `reqwest::Client` given through `TransportOptions`,
//! as a user who benchmarks would; the default is `pooled`). `AZURITE_PID`
//! adds the server's CPU time. Each JSON line names its `"transport"`.
//!
//! What is measured matches workload.rs with its typed entity: the entity is
//! a plain struct built before the clock starts; encoding (serde, with the
//! `@odata.type` annotations a user of this SDK writes by hand for Int64,
//! Double, DateTime, Guid and Binary) and decoding (into the same struct,
//! Int64, DateTime, Guid and Binary parsed) are inside the timed region. One
//! `TableServiceClient` (one connection pool) serves the whole run. Client
//! CPU is `getrusage(RUSAGE_SELF)`: this process only, not Azurite.

use std::time::Instant;

use azure_data_tables::prelude::*;
use azure_storage::{CloudLocation, StorageCredentials};
use futures::StreamExt;
use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;
use serde::{Deserialize, Serialize};
use serde_json::json;

const N1: usize = 1_000;
const K: usize = 1_000;
const C: usize = 8;
const PAGE: u32 = 1_000;
const BATCH: usize = 100;
const PARTITIONS: usize = 100;
const DEFAULT_N: usize = 10_000;

// ---------------------------------------------------------------------------
// The entity, as a user of azure_data_tables writes it.

/// The workload's entity as the application holds it.
#[derive(Debug, Clone, PartialEq)]
struct Employee {
    pk: String,
    rk: String,
    first_name: String,
    last_name: String,
    email: String,
    age: i32,
    salary: f64,
    employee_id: i64,
    hire_date: time::OffsetDateTime,
    id: uuid::Uuid,
    active: bool,
    photo: Vec<u8>,
}

/// What is sent: the properties with their Edm annotations.
#[derive(Serialize)]
struct EmployeeOut<'a> {
    #[serde(rename = "PartitionKey")]
    pk: &'a str,
    #[serde(rename = "RowKey")]
    rk: &'a str,
    #[serde(rename = "FirstName")]
    first_name: &'a str,
    #[serde(rename = "LastName")]
    last_name: &'a str,
    #[serde(rename = "Email")]
    email: &'a str,
    #[serde(rename = "Age")]
    age: i32,
    #[serde(rename = "Salary@odata.type")]
    salary_type: &'static str,
    #[serde(rename = "Salary")]
    salary: f64,
    #[serde(rename = "EmployeeId@odata.type")]
    employee_id_type: &'static str,
    #[serde(rename = "EmployeeId")]
    employee_id: String,
    #[serde(rename = "HireDate@odata.type")]
    hire_date_type: &'static str,
    #[serde(rename = "HireDate", with = "time::serde::rfc3339")]
    hire_date: time::OffsetDateTime,
    #[serde(rename = "Id@odata.type")]
    id_type: &'static str,
    #[serde(rename = "Id")]
    id: uuid::Uuid,
    #[serde(rename = "Active")]
    active: bool,
    #[serde(rename = "Photo@odata.type")]
    photo_type: &'static str,
    #[serde(rename = "Photo")]
    photo: String,
}

impl Employee {
    fn wire(&self) -> EmployeeOut<'_> {
        use base64::Engine as _;
        EmployeeOut {
            pk: &self.pk,
            rk: &self.rk,
            first_name: &self.first_name,
            last_name: &self.last_name,
            email: &self.email,
            age: self.age,
            salary_type: "Edm.Double",
            salary: self.salary,
            employee_id_type: "Edm.Int64",
            employee_id: self.employee_id.to_string(),
            hire_date_type: "Edm.DateTime",
            hire_date: self.hire_date,
            id_type: "Edm.Guid",
            id: self.id,
            active: self.active,
            photo_type: "Edm.Binary",
            photo: base64::engine::general_purpose::STANDARD.encode(&self.photo),
        }
    }
}

/// What is read: the same properties (annotations and system properties ignored).
#[derive(Deserialize, Debug)]
struct EmployeeIn {
    #[serde(rename = "PartitionKey")]
    pk: String,
    #[serde(rename = "RowKey")]
    rk: String,
    #[serde(rename = "FirstName")]
    _first_name: String,
    #[serde(rename = "LastName")]
    _last_name: String,
    #[serde(rename = "Email")]
    _email: String,
    #[serde(rename = "Age")]
    age: i32,
    #[serde(rename = "Salary")]
    _salary: f64,
    #[serde(rename = "EmployeeId", deserialize_with = "int64")]
    employee_id: i64,
    #[serde(rename = "HireDate", with = "time::serde::rfc3339")]
    _hire_date: time::OffsetDateTime,
    #[serde(rename = "Id")]
    _id: uuid::Uuid,
    #[serde(rename = "Active")]
    _active: bool,
    #[serde(rename = "Photo", deserialize_with = "binary")]
    photo: Vec<u8>,
}

fn int64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let s: std::borrow::Cow<'de, str> = Deserialize::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

fn binary<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    use base64::Engine as _;
    let s: std::borrow::Cow<'de, str> = Deserialize::deserialize(d)?;
    base64::engine::general_purpose::STANDARD
        .decode(s.as_bytes())
        .map_err(serde::de::Error::custom)
}

fn partition_key(i: usize) -> String {
    format!("p{:03}", i % PARTITIONS)
}

fn row_key(i: usize) -> String {
    format!("{i:08}")
}

fn age(i: usize) -> i32 {
    18 + ((7 * i + i / 100) % 50) as i32
}

fn employee_id(i: usize) -> i64 {
    9_000_000_000 + i as i64
}

fn build(i: usize) -> Employee {
    Employee {
        pk: partition_key(i),
        rk: row_key(i),
        first_name: format!("First-{i:08}-abcdef"),
        last_name: format!("Last-{i:08}-ghijklm"),
        email: format!("user{i:08}@example.com"),
        age: age(i),
        salary: 30000.37 + i as f64,
        employee_id: employee_id(i),
        hire_date: time::OffsetDateTime::from_unix_timestamp(1_577_836_800 + 60 * i as i64)
            .expect("HireDate in range"),
        id: uuid::Uuid::parse_str(&format!("00000000-0000-4000-8000-{i:012x}"))
            .expect("a valid GUID"),
        active: !i.is_multiple_of(3),
        photo: (0..64).map(|j| ((i + j) & 0xFF) as u8).collect(),
    }
}

fn point_index(k: usize, n: usize) -> usize {
    (k * 7919) % n
}

// ---------------------------------------------------------------------------
// Measurement, as in workload.rs.

fn seconds(t: TimeVal) -> f64 {
    t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6
}

fn client_cpu() -> (f64, f64) {
    let u = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage(RUSAGE_SELF)");
    (seconds(u.user_time()), seconds(u.system_time()))
}

/// utime + stime of Azurite (`AZURITE_PID`), in seconds.
fn server_cpu() -> Option<f64> {
    let pid: u32 = std::env::var("AZURITE_PID").ok()?.trim().parse().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

struct Probe {
    wall: Instant,
    user: f64,
    sys: f64,
    server: Option<f64>,
}

struct Cost {
    wall_s: f64,
    user_s: f64,
    sys_s: f64,
    server_s: Option<f64>,
}

impl Probe {
    fn start() -> Probe {
        let server = server_cpu();
        let (user, sys) = client_cpu();
        Probe {
            wall: Instant::now(),
            user,
            sys,
            server,
        }
    }

    fn stop(self) -> Cost {
        let wall_s = self.wall.elapsed().as_secs_f64();
        let (user, sys) = client_cpu();
        Cost {
            wall_s,
            user_s: user - self.user,
            sys_s: sys - self.sys,
            server_s: match (self.server, server_cpu()) {
                (Some(a), Some(b)) => Some(b - a),
                _ => None,
            },
        }
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

fn emit(id: &str, what: &str, n: usize, requests: usize, cost: &Cost, ok: bool) {
    let cpu_s = cost.user_s + cost.sys_s;
    let per = |count: usize| (count > 0).then(|| round(cpu_s * 1e6 / count as f64, 3));
    let line = json!({
        "backend": "azure_data_tables",
        "transport": transport_name(),
        "workload": id,
        "entity": "typed",
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

/// `PEER_TRANSPORT`: `default` or `pooled` (checked in `main`).
fn transport_name() -> String {
    std::env::var("PEER_TRANSPORT").unwrap_or_else(|_| "pooled".into())
}

fn fail(id: &str, why: impl std::fmt::Display) -> bool {
    eprintln!("peer {id}: {why}");
    false
}

// ---------------------------------------------------------------------------
// The workloads.

async fn workloads(service: &TableServiceClient, n: usize) -> bool {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let table = service.table_client(format!("peer{stamp}"));
    let single = service.table_client(format!("peer{stamp}single"));
    let entities: Vec<Employee> = (0..n).map(build).collect();
    let (n1, k) = (N1.min(n), K.min(n));
    let mut all_ok = true;

    // W1
    let probe = Probe::start();
    let r = table.create().await;
    let cost = probe.stop();
    let ok = r.is_ok() || fail("W1", format!("{r:?}"));
    emit("W1", "create table", 0, 1, &cost, ok);
    if !ok {
        return false;
    }

    // W2
    if let Err(e) = single.create().await {
        return fail("W2", format!("cannot create the second table: {e}"));
    }
    let mut failures = 0;
    let probe = Probe::start();
    for e in &entities[..n1] {
        let r: azure_core::Result<_> = async {
            single
                .insert::<_, serde_json::Value>(e.wire())?
                .await
                .map(drop)
        }
        .await;
        failures += usize::from(r.is_err());
    }
    let cost = probe.stop();
    let ok = failures == 0 || fail("W2", format!("{failures} failed inserts"));
    emit("W2", "insert one by one, concurrency 1", n1, n1, &cost, ok);
    all_ok &= ok;

    // W3
    let mut by_partition: Vec<Vec<&Employee>> = vec![Vec::new(); PARTITIONS];
    for (i, e) in entities.iter().enumerate() {
        by_partition[i % PARTITIONS].push(e);
    }
    let chunks: Vec<&[&Employee]> = by_partition.iter().flat_map(|p| p.chunks(BATCH)).collect();
    let probe = Probe::start();
    let sends = chunks.iter().map(|chunk| {
        let table = &table;
        async move {
            let mut tx = table
                .partition_key_client(chunk[0].pk.as_str())
                .transaction();
            for e in chunk.iter() {
                tx = tx.insert(e.wire())?;
            }
            let r = tx.await?;
            Ok::<bool, azure_core::Error>(
                r.operation_responses.len() == chunk.len()
                    && r.operation_responses.iter().all(|o| {
                        o.status_code == azure_core::StatusCode::Created
                            || o.status_code == azure_core::StatusCode::NoContent
                    }),
            )
        }
    });
    let results: Vec<_> = futures::stream::iter(sends)
        .buffer_unordered(C)
        .collect()
        .await;
    let cost = probe.stop();
    let bad = results.iter().filter(|r| !matches!(r, Ok(true))).count();
    let ok = bad == 0
        || fail(
            "W3",
            format!(
                "{bad} failed transactions; first: {:?}",
                results.iter().find(|r| !matches!(r, Ok(true)))
            ),
        );
    emit(
        "W3",
        "entity-group transactions of <= 100, concurrency 8",
        n,
        chunks.len(),
        &cost,
        ok,
    );
    all_ok &= ok;

    // W4
    let mut decoded: Vec<EmployeeIn> = Vec::with_capacity(n);
    let mut requests = 0;
    let mut error = None;
    let probe = Probe::start();
    let mut pages = table
        .query()
        .top(Top::new(PAGE))
        .into_stream::<EmployeeIn>();
    while let Some(page) = pages.next().await {
        requests += 1;
        match page {
            Ok(p) => decoded.extend(p.entities),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let cost = probe.stop();
    drop(pages);
    let ok = match error {
        Some(e) => fail("W4", e),
        None => check_full_scan(&decoded, n),
    };
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

    // W5
    let expected = (0..n)
        .filter(|&i| i % PARTITIONS == 42 && age(i) >= 30)
        .count();
    let mut found: Vec<EmployeeIn> = Vec::new();
    let mut requests = 0;
    let mut error = None;
    let probe = Probe::start();
    let mut pages = table
        .query()
        .filter(Filter::new("PartitionKey eq 'p042' and Age ge 30"))
        .top(Top::new(PAGE))
        .into_stream::<EmployeeIn>();
    while let Some(page) = pages.next().await {
        requests += 1;
        match page {
            Ok(p) => found.extend(p.entities),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let cost = probe.stop();
    drop(pages);
    let ok = match error {
        Some(e) => fail("W5", e),
        None => {
            found.len() == expected
                || fail(
                    "W5",
                    format!("{} entities, expected {expected}", found.len()),
                )
        }
    };
    emit(
        "W5",
        "filtered query in one partition",
        found.len(),
        requests,
        &cost,
        ok,
    );
    all_ok &= ok;

    // W6
    let indices: Vec<usize> = (0..k).map(|k| point_index(k, n)).collect();
    let keys: Vec<(String, String)> = indices
        .iter()
        .map(|&i| (partition_key(i), row_key(i)))
        .collect();
    let mut got = Vec::with_capacity(k);
    let probe = Probe::start();
    for (pk, rk) in keys {
        let r = table
            .partition_key_client(pk)
            .entity_client(rk)
            .get::<EmployeeIn>()
            .await;
        got.push(r.map(|r| r.entity));
    }
    let cost = probe.stop();
    let ok = got
        .iter()
        .zip(&indices)
        .all(|(r, &i)| matches!(r, Ok(e) if e.rk == row_key(i) && e.age == age(i)))
        || fail("W6", "an entity was not found or differs");
    emit("W6", "point get, concurrency 1", k, k, &cost, ok);
    all_ok &= ok;
    drop(got);

    // W7
    let updated: Vec<Employee> = indices
        .iter()
        .map(|&i| {
            let mut e = build(i);
            e.age += 1;
            e.salary += 1.0;
            e
        })
        .collect();
    let mut failures = 0;
    let probe = Probe::start();
    for e in &updated {
        let r: azure_core::Result<()> = async {
            table
                .partition_key_client(e.pk.as_str())
                .entity_client(e.rk.as_str())
                .insert_or_merge(e.wire())?
                .await
                .map(drop)
        }
        .await;
        failures += usize::from(r.is_err());
    }
    let cost = probe.stop();
    let last = indices.last().copied();
    let read_back = match last {
        None => true,
        Some(i) => match table
            .partition_key_client(partition_key(i))
            .entity_client(row_key(i))
            .get::<EmployeeIn>()
            .await
        {
            Ok(r) => {
                (r.entity.age == age(i) + 1 && r.entity.employee_id == employee_id(i))
                    || fail("W7", format!("entity {i} reads back as {:?}", r.entity))
            }
            Err(e) => fail("W7", e),
        },
    };
    let ok = (failures == 0 || fail("W7", format!("{failures} failed upserts"))) && read_back;
    emit("W7", "upsert-merge, concurrency 1", k, k, &cost, ok);
    all_ok &= ok;

    for t in [&table, &single] {
        if let Err(e) = t.delete().await {
            eprintln!("peer: could not delete table {}: {e}", t.table_name());
        }
    }
    all_ok
}

fn check_full_scan(decoded: &[EmployeeIn], n: usize) -> bool {
    let ages: i64 = decoded.iter().map(|e| i64::from(e.age)).sum();
    let ids: i64 = decoded.iter().map(|e| e.employee_id - 9_000_000_000).sum();
    let photo: usize = decoded.iter().map(|e| e.photo.len()).sum();
    let want_ages: i64 = (0..n).map(|i| i64::from(age(i))).sum();
    let n64 = n as i64;
    (decoded.len() == n || fail("W4", format!("{} entities, expected {n}", decoded.len())))
        && (ages == want_ages || fail("W4", format!("sum(Age) = {ages}")))
        && (ids == n64 * (n64 - 1) / 2 || fail("W4", format!("sum(EmployeeId - 9e9) = {ids}")))
        && (photo == 64 * n || fail("W4", format!("{photo} Photo bytes")))
        && decoded.iter().all(|e| e.pk.starts_with('p'))
}

/// The service from the connection string in the environment (loopback only),
/// or the emulator's well-known account on 127.0.0.1:10002.
fn service() -> Result<TableServiceClient, String> {
    let conn = [
        "TABLEKIT_CONNECTION_STRING",
        "TABLEKIT_TEST_CONNECTION_STRING",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()));
    let pooled = match transport_name().as_str() {
        "pooled" => true,
        "default" => false,
        other => {
            return Err(format!(
                "PEER_TRANSPORT is default or pooled, not {other:?}"
            ))
        }
    };
    let builder = match conn {
        None => azure_data_tables::clients::TableServiceClientBuilder::emulator(),
        Some(conn) => builder_for(&conn)?,
    };
    Ok(if pooled {
        // reqwest's defaults: idle connections kept per host (keep-alive).
        let client = reqwest::Client::builder()
            .build()
            .map_err(|e| format!("cannot build the reqwest client: {e}"))?;
        builder
            .transport(azure_core::TransportOptions::new(std::sync::Arc::new(
                client,
            )))
            .build()
    } else {
        builder.build()
    })
}

/// The builder of the account a connection string names (a loopback endpoint only).
fn builder_for(
    conn: &str,
) -> Result<azure_data_tables::clients::TableServiceClientBuilder, String> {
    let setting = |name: &str| {
        conn.split(';').find_map(|seg| {
            let (k, v) = seg.split_once('=')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    };
    let account = setting("AccountName").ok_or("the connection string has no AccountName")?;
    let key = setting("AccountKey").ok_or("the connection string has no AccountKey")?;
    let endpoint = setting("TableEndpoint").ok_or("the connection string has no TableEndpoint")?;
    let host = endpoint
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split(['/', ':']).next())
        .unwrap_or_default();
    if !(host.starts_with("127.") || host == "localhost" || host == "[") {
        return Err(format!(
            "the table endpoint's host {host:?} is not on loopback; this bench runs only against a local Azurite"
        ));
    }
    let location = CloudLocation::Custom {
        account: account.clone(),
        uri: endpoint.trim_end_matches('/').to_owned(),
    };
    Ok(
        azure_data_tables::clients::TableServiceClientBuilder::with_location(
            location,
            StorageCredentials::access_key(account, key),
        ),
    )
}

fn main() {
    let n = match std::env::var("PEER_BENCH_N") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("peer: PEER_BENCH_N must be a positive integer, not {v:?}");
                std::process::exit(2);
            }
        },
        Err(_) => DEFAULT_N,
    };
    let flavor = std::env::var("PEER_RUNTIME").unwrap_or_else(|_| "multi_thread".into());
    let mut builder = match flavor.as_str() {
        "multi_thread" => tokio::runtime::Builder::new_multi_thread(),
        "current_thread" => tokio::runtime::Builder::new_current_thread(),
        other => {
            eprintln!("peer: PEER_RUNTIME is multi_thread or current_thread, not {other:?}");
            std::process::exit(2);
        }
    };
    let runtime = builder.enable_all().build().expect("a tokio runtime");
    let service = match service() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("peer: {e}");
            std::process::exit(2);
        }
    };
    eprintln!(
        "peer: azure_data_tables 0.21, runtime {flavor}, transport {}, N = {n}",
        transport_name()
    );
    if !runtime.block_on(workloads(&service, n)) {
        std::process::exit(1);
    }
}
