//! The floors of the peer benchmark (issue 23): what any client must pay, on
//! this kernel and against this Azurite, for the requests of the standard
//! workload, with nothing of an SDK around them.
//!
//! - W2, W6, W7 (and W3, W4): a bare loop of hyper's `conn::http1`, the
//!   connection future polled inline in the caller's task (no spawned
//!   connection task), sending the same requests as tablekit: the same
//!   headers, a Shared Key signature (HMAC over a string built in place,
//!   the date formatted once per second), the same JSON bodies written by
//!   `serde_json` from a plain `#[derive(Serialize)]` struct, and answers read
//!   whole; point reads and pages decoded by `serde_json` into a plain
//!   `#[derive(Deserialize)]` struct (strings stay strings: no Int64, Guid,
//!   DateTime or Binary parsing, no ETag handling).
//! - `enc` and `dec`: the codec alone, in memory, per entity: the bare
//!   `serde_json` encoder and decoder above (the `floor` lines) next to
//!   tablekit's `codec::entity_to_json` and its query page decoder into the
//!   `#[derive(TableEntity)]` struct (the `tablekit` lines), on the same
//!   entities and the same page, alternating, in this one process.
//!
//! - `get`, `insert` and `merge`: in this one process, on one table, rounds
//!   of K point reads (and K inserts, K upsert-merges) by tablekit (`TableClient::get`, `insert`, its hyper
//!   transport) alternating with the same requests by the bare loop: the
//!   cleanest view of what tablekit adds per request, and (with
//!   `FLOOR_MODE=pair`, nothing else runs) the run to profile.
//!   `FLOOR_PAIR_ROUNDS` sets the rounds (3), `FLOOR_PAIR_SIDE=tablekit` or
//!   `floor` runs one side only, and `FLOOR_PAIR_GETS=3` reads each entity
//!   three times per round: a count (cachegrind, allocations) of a run with
//!   3 minus one with 1 is the point reads' alone, per 2 K reads.
//! - `FLOOR_MODE=codec`: only `enc` and `dec`, `FLOOR_CODEC_ROUNDS` times, on
//!   a page kept by an earlier run (`FLOOR_PAGE_OUT=<file>` keeps W4's first
//!   page, `FLOOR_PAGE=<file>` reads it): the codecs' run to profile.
//!
//! Settings as in `workload.rs`: `TABLEKIT_TEST_CONNECTION_STRING` (or
//! `TABLEKIT_CONNECTION_STRING`), `TABLEKIT_BENCH_N`, `TABLEKIT_BENCH_RUNTIME`
//! (`multi_thread`, driven from the main thread as under `#[tokio::main]`, or
//! `current_thread`). One JSON line per figure on stdout, as `workload.rs`
//! prints them (`"backend":"floor"` or `"tablekit"`); `scripts/bench-peer.sh`
//! runs it in every round.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;
use std::time::Instant;

use base64::Engine as _;
use bytes::Bytes;
use chrono::{DateTime, Datelike as _, Timelike as _, Utc};
use hmac::{Hmac, Mac as _};
use http::header::{HeaderName, HeaderValue};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use nix::sys::resource::{getrusage, UsageWho};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::json;
use tablekit::TableEntity;
use tokio::net::TcpStream;
use uuid::Uuid;

const N1: usize = 1_000;
const K: usize = 1_000;
const C: usize = 8;
const PAGE: usize = 1_000;
const BATCH: usize = 100;
const PARTITIONS: usize = 100;
const DEFAULT_N: usize = 10_000;
/// Repetitions of the in-memory codec figures over the whole page.
const CODEC_ROUNDS: usize = 5;

// ---------------------------------------------------------------------------
// The entity, as workload.rs builds it.

fn partition_key(i: usize) -> String {
    format!("p{:03}", i % PARTITIONS)
}

fn row_key(i: usize) -> String {
    format!("{i:08}")
}

fn age(i: usize) -> i32 {
    18 + ((7 * i + i / 100) % 50) as i32
}

fn point_index(k: usize, n: usize) -> usize {
    (k * 7919) % n
}

/// workload.rs's typed entity (the same derive, the same fields).
#[derive(TableEntity, Debug, Clone, PartialEq)]
struct Employee {
    #[tablekit(partition_key)]
    pk: String,
    #[tablekit(row_key)]
    rk: String,
    first_name: String,
    last_name: String,
    email: String,
    age: i32,
    salary: f64,
    employee_id: i64,
    hire_date: DateTime<Utc>,
    id: Uuid,
    active: bool,
    photo: Vec<u8>,
}

fn build(i: usize) -> Employee {
    let minutes = i64::try_from(i).expect("N fits i64") * 60;
    Employee {
        pk: partition_key(i),
        rk: row_key(i),
        first_name: format!("First-{i:08}-abcdef"),
        last_name: format!("Last-{i:08}-ghijklm"),
        email: format!("user{i:08}@example.com"),
        age: age(i),
        salary: 30000.37 + i as f64,
        employee_id: 9_000_000_000 + i as i64,
        hire_date: DateTime::from_timestamp(1_577_836_800 + minutes, 0).expect("in range"),
        id: Uuid::parse_str(&format!("00000000-0000-4000-8000-{i:012x}")).expect("a GUID"),
        active: !i.is_multiple_of(3),
        photo: (0..64).map(|j| ((i + j) & 0xFF) as u8).collect(),
    }
}

/// The bare encoder: a plain serde struct with the annotations written as
/// fields; Int64 as a string, DateTime with seven fraction digits, Binary in
/// base64, as the service wants them.
#[derive(Serialize)]
struct Out<'a> {
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
    #[serde(rename = "Salary")]
    salary: f64,
    #[serde(rename = "EmployeeId@odata.type")]
    employee_id_type: &'static str,
    #[serde(rename = "EmployeeId", serialize_with = "as_text")]
    employee_id: i64,
    #[serde(rename = "HireDate@odata.type")]
    hire_date_type: &'static str,
    #[serde(rename = "HireDate", serialize_with = "as_datetime")]
    hire_date: &'a DateTime<Utc>,
    #[serde(rename = "Id@odata.type")]
    id_type: &'static str,
    #[serde(rename = "Id", serialize_with = "as_text")]
    id: &'a Uuid,
    #[serde(rename = "Active")]
    active: bool,
    #[serde(rename = "Photo@odata.type")]
    photo_type: &'static str,
    #[serde(rename = "Photo", serialize_with = "as_base64")]
    photo: &'a [u8],
}

fn as_text<S: Serializer, V: std::fmt::Display>(v: &V, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn as_datetime<S: Serializer>(v: &&DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    struct Text<'a>(&'a DateTime<Utc>);
    impl std::fmt::Display for Text<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let d = self.0;
            write!(
                f,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:07}Z",
                d.year(),
                d.month(),
                d.day(),
                d.hour(),
                d.minute(),
                d.second(),
                d.nanosecond() / 100
            )
        }
    }
    s.collect_str(&Text(v))
}

fn as_base64<S: Serializer>(v: &&[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
}

impl Employee {
    fn wire(&self) -> Out<'_> {
        Out {
            pk: &self.pk,
            rk: &self.rk,
            first_name: &self.first_name,
            last_name: &self.last_name,
            email: &self.email,
            age: self.age,
            salary: self.salary,
            employee_id_type: "Edm.Int64",
            employee_id: self.employee_id,
            hire_date_type: "Edm.DateTime",
            hire_date: &self.hire_date,
            id_type: "Edm.Guid",
            id: &self.id,
            active: self.active,
            photo_type: "Edm.Binary",
            photo: &self.photo,
        }
    }
}

/// The bare decoder: a plain `#[derive(Deserialize)]` struct; every value
/// as the JSON has it (annotations and unknown members skipped).
#[derive(Deserialize, Debug)]
#[allow(dead_code)] // read only by the checks, or not at all: what counts is the decode
struct Plain {
    #[serde(rename = "odata.etag", default)]
    etag: String,
    #[serde(rename = "PartitionKey")]
    pk: String,
    #[serde(rename = "RowKey")]
    rk: String,
    #[serde(rename = "Timestamp")]
    timestamp: String,
    #[serde(rename = "FirstName")]
    first_name: String,
    #[serde(rename = "LastName")]
    last_name: String,
    #[serde(rename = "Email")]
    email: String,
    #[serde(rename = "Age")]
    age: i32,
    #[serde(rename = "Salary")]
    salary: f64,
    #[serde(rename = "EmployeeId")]
    employee_id: String,
    #[serde(rename = "HireDate")]
    hire_date: String,
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "Active")]
    active: bool,
    #[serde(rename = "Photo")]
    photo: String,
}

#[derive(Deserialize)]
struct PlainPage {
    value: Vec<Plain>,
}

// ---------------------------------------------------------------------------
// Measurement, as in workload.rs.

/// User and system CPU seconds of this process, all threads.
fn client_cpu() -> (f64, f64) {
    let u = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage(RUSAGE_SELF)");
    let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
    (s(u.user_time()), s(u.system_time()))
}

struct Probe {
    wall: Instant,
    cpu: (f64, f64),
}

impl Probe {
    fn start() -> Probe {
        Probe {
            cpu: client_cpu(),
            wall: Instant::now(),
        }
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

fn emit(backend: &str, id: &str, what: &str, n: usize, requests: usize, probe: Probe, ok: bool) {
    let wall_s = probe.wall.elapsed().as_secs_f64();
    let (user, sys) = client_cpu();
    let (user_s, sys_s) = (user - probe.cpu.0, sys - probe.cpu.1);
    let cpu_s = user_s + sys_s;
    let per = |count: usize| (count > 0).then(|| round(cpu_s * 1e6 / count as f64, 3));
    println!(
        "{}",
        json!({
            "backend": backend,
            "workload": id,
            "entity": "typed",
            "what": what,
            "n": n,
            "requests": requests,
            "wall_s": round(wall_s, 6),
            "cpu_user_s": round(user_s, 6),
            "cpu_sys_s": round(sys_s, 6),
            "cpu_s": round(cpu_s, 6),
            "ok": ok,
            "cpu_us_per_request": per(requests),
            "cpu_us_per_entity": per(n),
        })
    );
}

// ---------------------------------------------------------------------------
// The bare client: one hyper connection polled inline, Shared Key by hand.

type Body = Full<Bytes>;

struct Endpoint {
    /// `127.0.0.1:port`.
    authority: String,
    host: HeaderValue,
    /// The endpoint's path, `/devstoreaccount1`.
    base: String,
    account: String,
    key: Vec<u8>,
    date: RefCell<(i64, HeaderValue)>,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

impl Endpoint {
    fn from_connection_string(conn: &str) -> Endpoint {
        let setting = |name: &str| {
            conn.split(';')
                .find_map(|seg| {
                    let (k, v) = seg.split_once('=')?;
                    k.trim()
                        .eq_ignore_ascii_case(name)
                        .then(|| v.trim().to_owned())
                })
                .unwrap_or_else(|| panic!("floor: the connection string has no {name}"))
        };
        let endpoint = setting("TableEndpoint");
        let rest = endpoint
            .strip_prefix("http://")
            .expect("floor: an http:// table endpoint (Azurite on loopback)");
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        assert!(
            authority.starts_with("127.") || authority.starts_with("localhost"),
            "floor: the table endpoint is not on loopback"
        );
        Endpoint {
            authority: authority.to_owned(),
            host: HeaderValue::from_str(authority).expect("a host header"),
            base: format!("/{}", path.trim_end_matches('/')),
            account: setting("AccountName"),
            key: base64::engine::general_purpose::STANDARD
                .decode(setting("AccountKey"))
                .expect("a base64 account key"),
            date: RefCell::new((0, HeaderValue::from_static(""))),
        }
    }

    /// `x-ms-date`, formatted once per second.
    fn date(&self) -> HeaderValue {
        let now = Utc::now();
        let mut cached = self.date.borrow_mut();
        if cached.0 != now.timestamp() {
            let text = format!(
                "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
                DAYS[now.weekday().num_days_from_sunday() as usize],
                now.day(),
                MONTHS[now.month0() as usize],
                now.year(),
                now.hour(),
                now.minute(),
                now.second()
            );
            *cached = (
                now.timestamp(),
                HeaderValue::from_str(&text).expect("ASCII"),
            );
        }
        cached.1.clone()
    }

    /// A signed request: `path` below the endpoint (with its query, which
    /// Shared Key for tables does not sign).
    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> http::Request<Body> {
        let date = self.date();
        let content_type = body.as_ref().map_or("", |(t, _)| t);
        let resource = path.split('?').next().unwrap_or(path);
        let mut to_sign = String::with_capacity(160);
        for part in [method, "", content_type] {
            to_sign.push_str(part);
            to_sign.push('\n');
        }
        to_sign.push_str(date.to_str().unwrap_or(""));
        to_sign.push_str("\n/");
        to_sign.push_str(&self.account);
        to_sign.push_str(&self.base);
        to_sign.push_str(resource);
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(to_sign.as_bytes());
        let mut auth = String::with_capacity(96);
        auth.push_str("SharedKey ");
        auth.push_str(&self.account);
        auth.push(':');
        base64::engine::general_purpose::STANDARD
            .encode_string(mac.finalize().into_bytes(), &mut auth);
        let mut target = String::with_capacity(self.base.len() + path.len());
        target.push_str(&self.base);
        target.push_str(path);
        let mut b = http::Request::builder()
            .method(http::Method::from_bytes(method.as_bytes()).expect("a method"))
            .uri(target)
            .header(http::header::HOST, self.host.clone())
            .header(
                http::header::ACCEPT,
                "application/json;odata=minimalmetadata",
            )
            .header("x-ms-date", date)
            .header("x-ms-version", "2019-02-02")
            .header("DataServiceVersion", "3.0;NetFx")
            .header(
                http::header::AUTHORIZATION,
                HeaderValue::from_str(&auth).expect("base64 is ASCII"),
            );
        let body = match body {
            Some((t, bytes)) => {
                b = b.header(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_str(t).expect("an ASCII content type"),
                );
                Bytes::from(bytes)
            }
            None => Bytes::new(),
        };
        b.body(Full::new(body)).expect("a valid request")
    }
}

/// One HTTP/1.1 connection, driven by whoever awaits a request on it.
struct Conn {
    sender: http1::SendRequest<Body>,
    conn: http1::Connection<TokioIo<TcpStream>, Body>,
}

/// Polls `fut` and the connection together until `fut` is ready.
async fn driving<F: Future>(
    conn: &mut http1::Connection<TokioIo<TcpStream>, Body>,
    fut: F,
) -> F::Output {
    let mut fut = pin!(fut);
    poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(v);
        }
        if let Poll::Ready(r) = std::pin::Pin::new(&mut *conn).poll(cx) {
            panic!("floor: the connection closed: {r:?}");
        }
        Poll::Pending
    })
    .await
}

impl Conn {
    async fn open(ep: &Endpoint) -> Conn {
        let tcp = TcpStream::connect(&ep.authority)
            .await
            .expect("floor: connect to Azurite");
        tcp.set_nodelay(true).expect("TCP_NODELAY");
        let (sender, conn) = http1::handshake(TokioIo::new(tcp))
            .await
            .expect("an HTTP/1.1 handshake");
        Conn { sender, conn }
    }

    /// Sends `req`, reads the whole answer: status, headers, body.
    async fn call(
        &mut self,
        req: http::Request<Body>,
    ) -> (http::StatusCode, http::HeaderMap, Bytes) {
        driving(&mut self.conn, self.sender.ready())
            .await
            .expect("the connection takes a request");
        let resp = driving(&mut self.conn, self.sender.send_request(req))
            .await
            .expect("an answer");
        let (parts, body) = resp.into_parts();
        let body = driving(&mut self.conn, body.collect())
            .await
            .expect("a whole body")
            .to_bytes();
        (parts.status, parts.headers, body)
    }
}

fn entity_path(table: &str, pk: &str, rk: &str) -> String {
    format!("/{table}(PartitionKey='{pk}',RowKey='{rk}')")
}

/// The JSON of one entity, by the bare encoder.
fn encode(e: &Employee) -> Vec<u8> {
    serde_json::to_vec(&e.wire()).expect("JSON")
}

/// A transaction's multipart body, as tablekit and the official SDKs lay it out.
fn batch_body(ep: &Endpoint, table: &str, chunk: &[&Employee]) -> (String, Vec<u8>) {
    let batch = format!("batch_{}", Uuid::new_v4());
    let changeset = format!("changeset_{}", Uuid::new_v4());
    let mut b = Vec::with_capacity(chunk.len() * 700 + 256);
    b.extend_from_slice(
        format!("--{batch}\r\nContent-Type: multipart/mixed; boundary={changeset}\r\n\r\n")
            .as_bytes(),
    );
    for e in chunk {
        let json = encode(e);
        b.extend_from_slice(format!(
            "--{changeset}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nPOST http://{}{}/{table} HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\nDataServiceVersion: 3.0;\r\nContent-Type: application/json\r\nPrefer: return-no-content\r\nContent-Length: {}\r\n\r\n",
            ep.authority, ep.base, json.len()
        ).as_bytes());
        b.extend_from_slice(&json);
        b.extend_from_slice(b"\r\n");
    }
    b.extend_from_slice(format!("--{changeset}--\r\n--{batch}--\r\n").as_bytes());
    (format!("multipart/mixed; boundary={batch}"), b)
}

fn header_str<'a>(h: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

// ---------------------------------------------------------------------------
// The workloads.

async fn workloads(ep: &Endpoint, n: usize) -> bool {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let table = format!("floor{stamp}");
    let single = format!("floor{stamp}single");
    let entities: Vec<Employee> = (0..n).map(build).collect();
    let (n1, k) = (N1.min(n), K.min(n));
    let mut conn = Conn::open(ep).await;
    let mut all_ok = true;
    for t in [&table, &single] {
        let body = format!("{{\"TableName\":\"{t}\"}}").into_bytes();
        let mut req = ep.request("POST", "/Tables", Some(("application/json", body)));
        req.headers_mut()
            .insert("prefer", HeaderValue::from_static("return-no-content"));
        let (status, _, body) = conn.call(req).await;
        if !status.is_success() {
            eprintln!(
                "floor: cannot create table {t}: {status} {}",
                String::from_utf8_lossy(&body)
            );
            return false;
        }
    }
    let prefer = HeaderName::from_static("prefer");
    let no_content = HeaderValue::from_static("return-no-content");

    // W2
    let path = format!("/{single}");
    let probe = Probe::start();
    let mut bad = 0;
    for e in &entities[..n1] {
        let mut req = ep.request("POST", &path, Some(("application/json", encode(e))));
        req.headers_mut().insert(prefer.clone(), no_content.clone());
        let (status, headers, _) = conn.call(req).await;
        bad += usize::from(status != http::StatusCode::NO_CONTENT || headers.get("etag").is_none());
    }
    emit(
        "floor",
        "W2",
        "insert one by one, concurrency 1",
        n1,
        n1,
        probe,
        bad == 0,
    );
    all_ok &= bad == 0;

    // W3: C connections, each taking the next transaction.
    let mut by_partition: Vec<Vec<&Employee>> = vec![Vec::new(); PARTITIONS];
    for (i, e) in entities.iter().enumerate() {
        by_partition[i % PARTITIONS].push(e);
    }
    let chunks: Vec<&[&Employee]> = by_partition.iter().flat_map(|p| p.chunks(BATCH)).collect();
    let next = Cell::new(0);
    let bad = Cell::new(0);
    let probe = Probe::start();
    let workers = (0..C.min(chunks.len())).map(|_| async {
        let mut c = Conn::open(ep).await;
        loop {
            let i = next.get();
            let Some(chunk) = chunks.get(i) else { break };
            next.set(i + 1);
            let (content_type, body) = batch_body(ep, &table, chunk);
            let req = ep.request("POST", "/$batch", Some((&content_type, body)));
            let (status, _, answer) = c.call(req).await;
            let created = memchr_count(&answer, b"HTTP/1.1 204");
            if status != http::StatusCode::ACCEPTED || created != chunk.len() {
                bad.set(bad.get() + 1);
            }
        }
    });
    futures::future::join_all(workers).await;
    let ok = bad.get() == 0;
    emit(
        "floor",
        "W3",
        "entity-group transactions of <= 100, concurrency 8",
        n,
        chunks.len(),
        probe,
        ok,
    );
    all_ok &= ok;

    // W4
    conn = Conn::open(ep).await; // Azurite closes a connection idle for 5 s
    let mut decoded: Vec<Plain> = Vec::with_capacity(n);
    let mut requests = 0;
    let mut first_page = Bytes::new();
    let probe = Probe::start();
    let mut cont: Option<(String, String)> = None;
    loop {
        let mut path = format!("/{table}()?$top={PAGE}");
        if let Some((pk, rk)) = &cont {
            path.push_str(&format!("&NextPartitionKey={pk}&NextRowKey={rk}"));
        }
        let (status, headers, body) = conn.call(ep.request("GET", &path, None)).await;
        requests += 1;
        if !status.is_success() {
            break;
        }
        let page: PlainPage = serde_json::from_slice(&body).expect("a page");
        decoded.extend(page.value);
        if first_page.is_empty() {
            first_page = body;
        }
        cont = match (
            header_str(&headers, "x-ms-continuation-nextpartitionkey"),
            header_str(&headers, "x-ms-continuation-nextrowkey"),
        ) {
            (Some(pk), Some(rk)) => Some((pk.to_owned(), rk.to_owned())),
            _ => None,
        };
        if cont.is_none() {
            break;
        }
    }
    let ok = decoded.len() == n;
    emit(
        "floor",
        "W4",
        "query all, $top=1000",
        decoded.len(),
        requests,
        probe,
        ok,
    );
    all_ok &= ok;
    drop(decoded);

    // W6
    conn = Conn::open(ep).await; // Azurite closes a connection idle for 5 s
    let indices: Vec<usize> = (0..k).map(|k| point_index(k, n)).collect();
    let paths: Vec<String> = indices
        .iter()
        .map(|&i| entity_path(&table, &partition_key(i), &row_key(i)))
        .collect();
    let mut got: Vec<Option<Plain>> = Vec::with_capacity(k);
    let probe = Probe::start();
    for path in &paths {
        let (status, headers, body) = conn.call(ep.request("GET", path, None)).await;
        let e = (status == http::StatusCode::OK)
            .then(|| serde_json::from_slice::<Plain>(&body).ok())
            .flatten()
            .filter(|_| headers.contains_key("etag"));
        got.push(e);
    }
    let ok = got
        .iter()
        .zip(&indices)
        .all(|(e, &i)| matches!(e, Some(e) if e.rk == row_key(i) && e.age == age(i)));
    emit("floor", "W6", "point get, concurrency 1", k, k, probe, ok);
    all_ok &= ok;

    // W7
    conn = Conn::open(ep).await; // Azurite closes a connection idle for 5 s
    let updated: Vec<Employee> = indices
        .iter()
        .map(|&i| {
            let mut e = build(i);
            e.age += 1;
            e.salary += 1.0;
            e
        })
        .collect();
    let mut bad = 0;
    let probe = Probe::start();
    for (e, path) in updated.iter().zip(&paths) {
        let req = ep.request("MERGE", path, Some(("application/json", encode(e))));
        let (status, headers, _) = conn.call(req).await;
        bad += usize::from(status != http::StatusCode::NO_CONTENT || headers.get("etag").is_none());
    }
    emit(
        "floor",
        "W7",
        "upsert-merge, concurrency 1",
        k,
        k,
        probe,
        bad == 0,
    );
    all_ok &= bad == 0;

    if let Ok(path) = std::env::var("FLOOR_PAGE_OUT") {
        // For `FLOOR_MODE=codec` (profiling the codecs without Azurite).
        std::fs::write(&path, &first_page).expect("FLOOR_PAGE_OUT is writable");
    }
    all_ok &= codecs(&entities, &first_page);

    for t in [&table, &single] {
        let (status, _, _) = conn
            .call(ep.request("DELETE", &format!("/Tables('{t}')"), None))
            .await;
        if !status.is_success() {
            eprintln!("floor: could not delete table {t}: {status}");
        }
    }
    all_ok
}

fn memchr_count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Point reads and inserts, tablekit and the bare loop alternating, in this process.
async fn pair(ep: &Endpoint, conn_string: &str, n: usize) -> bool {
    let mut options = tablekit::options::ClientOptions::default();
    options.http.transport = tablekit::options::Transport::Hyper;
    let service = match tablekit::Account::from_connection_string(conn_string)
        .and_then(|a| tablekit::TableServiceClient::with_options(a, options))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("floor: tablekit client: {e}");
            return false;
        }
    };
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let name = format!("floorpair{stamp}");
    let table: tablekit::TableClient<Employee> = service.table(&name).expect("a table name");
    if let Err(e) = table.create_table().await {
        eprintln!("floor: cannot create {name}: {e}");
        return false;
    }
    let k = K.min(n);
    let mut ok = true;
    let rounds = std::env::var("FLOOR_PAIR_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3usize);
    let fresh = |round: usize, side: usize| -> Vec<Employee> {
        (0..k)
            .map(|i| {
                let mut e = build(i);
                e.rk = format!("{:08}-{round}-{side}", i);
                e
            })
            .collect()
    };
    // `FLOOR_PAIR_SIDE=tablekit` or `floor` runs one side only (to profile it).
    let side = std::env::var("FLOOR_PAIR_SIDE").unwrap_or_default();
    // `FLOOR_PAIR_GETS=3` reads each entity 3 times in a round's point reads:
    // a profile of `GETS=3` minus one of `GETS=1` counts the point reads alone.
    let gets = std::env::var("FLOOR_PAIR_GETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1usize)
        .max(1);
    let (tk_side, floor_side) = (side != "floor", side != "tablekit");
    let path = format!("/{name}");
    for round in 0..rounds {
        // Each side inserts its own fresh entities, then reads them back.
        let mine = fresh(round, 0);
        let bare = fresh(round, 1);
        if tk_side {
            let probe = Probe::start();
            let mut bad = 0;
            for e in &mine {
                bad += usize::from(table.insert(e).await.is_err());
            }
            emit(
                "tablekit",
                "insert",
                "insert, concurrency 1 (in one process)",
                k,
                k,
                probe,
                bad == 0,
            );
            ok &= bad == 0;
        }
        if floor_side {
            // Azurite closes a connection idle for 5 s: a fresh one per phase.
            let mut conn = Conn::open(ep).await;
            let probe = Probe::start();
            let mut bad = 0;
            for e in &bare {
                let mut req = ep.request("POST", &path, Some(("application/json", encode(e))));
                req.headers_mut()
                    .insert("prefer", HeaderValue::from_static("return-no-content"));
                let (status, _, _) = conn.call(req).await;
                bad += usize::from(status != http::StatusCode::NO_CONTENT);
            }
            emit(
                "floor",
                "insert",
                "insert, concurrency 1 (in one process)",
                k,
                k,
                probe,
                bad == 0,
            );
            ok &= bad == 0;
        }
        if tk_side {
            let probe = Probe::start();
            let mut bad = 0;
            for e in mine.iter().cycle().take(k * gets) {
                let got = table.get((e.pk.as_str(), e.rk.as_str())).await;
                bad += usize::from(!matches!(got, Ok(Some(_))));
            }
            emit(
                "tablekit",
                "get",
                "point get, concurrency 1 (in one process)",
                k * gets,
                k * gets,
                probe,
                bad == 0,
            );
            ok &= bad == 0;
        }
        if floor_side {
            let paths: Vec<String> = bare
                .iter()
                .map(|e| entity_path(&name, &e.pk, &e.rk))
                .collect();
            let mut conn = Conn::open(ep).await;
            let probe = Probe::start();
            let mut bad = 0;
            for path in paths.iter().cycle().take(k * gets) {
                let (status, headers, body) = conn.call(ep.request("GET", path, None)).await;
                let good = status == http::StatusCode::OK
                    && headers.contains_key("etag")
                    && serde_json::from_slice::<Plain>(&body).is_ok();
                bad += usize::from(!good);
            }
            emit(
                "floor",
                "get",
                "point get, concurrency 1 (in one process)",
                k * gets,
                k * gets,
                probe,
                bad == 0,
            );
            ok &= bad == 0;
        }
        // Upsert-merges of the same entities, Age + 1 and Salary + 1.0 (W7).
        let bump = |es: &[Employee]| -> Vec<Employee> {
            es.iter()
                .map(|e| {
                    let mut e = e.clone();
                    e.age += 1;
                    e.salary += 1.0;
                    e
                })
                .collect()
        };
        if tk_side {
            let merged = bump(&mine);
            let probe = Probe::start();
            let mut bad = 0;
            for e in &merged {
                let r = table.upsert(e, tablekit::UpdateMode::Merge).await;
                bad += usize::from(r.is_err());
            }
            emit(
                "tablekit",
                "merge",
                "upsert-merge, concurrency 1 (in one process)",
                k,
                k,
                probe,
                bad == 0,
            );
            ok &= bad == 0;
        }
        if floor_side {
            let merged = bump(&bare);
            let paths: Vec<String> = merged
                .iter()
                .map(|e| entity_path(&name, &e.pk, &e.rk))
                .collect();
            let mut conn = Conn::open(ep).await;
            let probe = Probe::start();
            let mut bad = 0;
            for (e, path) in merged.iter().zip(&paths) {
                let req = ep.request("MERGE", path, Some(("application/json", encode(e))));
                let (status, headers, _) = conn.call(req).await;
                bad += usize::from(
                    status != http::StatusCode::NO_CONTENT || headers.get("etag").is_none(),
                );
            }
            emit(
                "floor",
                "merge",
                "upsert-merge, concurrency 1 (in one process)",
                k,
                k,
                probe,
                bad == 0,
            );
            ok &= bad == 0;
        }
    }
    if let Err(e) = table.delete_table().await {
        eprintln!("floor: could not delete {name}: {e}");
    }
    ok
}

/// The codecs alone, per entity, alternating floor and tablekit.
fn codecs(entities: &[Employee], page: &[u8]) -> bool {
    let mut ok = true;
    let mut sink = 0usize;
    for _ in 0..CODEC_ROUNDS {
        let probe = Probe::start();
        for e in entities {
            sink += encode(e).len();
        }
        emit(
            "floor",
            "enc",
            "encode one entity (serde_json, plain struct)",
            entities.len(),
            0,
            probe,
            true,
        );
        let probe = Probe::start();
        for e in entities {
            sink += tablekit::codec::entity_to_json(e).map_or(0, |j| j.len());
        }
        emit(
            "tablekit",
            "enc",
            "encode one entity (codec::entity_to_json)",
            entities.len(),
            0,
            probe,
            true,
        );

        let reps = (10_000 / PAGE).max(1);
        let probe = Probe::start();
        let mut count = 0;
        for _ in 0..reps {
            let p: PlainPage = serde_json::from_slice(page).expect("the page");
            count += p.value.len();
        }
        emit(
            "floor",
            "dec",
            "decode a page (serde_json, plain struct)",
            count,
            0,
            probe,
            count > 0,
        );
        let probe = Probe::start();
        let mut tk_count = 0;
        for _ in 0..reps {
            match tablekit::__fuzz::decode_page::<Employee>(page) {
                Ok(v) => tk_count += v.len(),
                Err(e) => {
                    eprintln!("floor: tablekit cannot decode the page: {e}");
                    ok = false;
                }
            }
        }
        emit(
            "tablekit",
            "dec",
            "decode a page (typed, as W4)",
            tk_count,
            0,
            probe,
            tk_count == count,
        );
        ok &= tk_count == count;
    }
    ok && sink > 0
}

fn main() {
    if !std::env::args().skip(1).any(|a| a == "--bench") {
        eprintln!("floor: run it with `cargo bench --bench floor`; skipped");
        return;
    }
    let Some(conn) = [
        "TABLEKIT_TEST_CONNECTION_STRING",
        "TABLEKIT_CONNECTION_STRING",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty())) else {
        eprintln!("floor: no connection string (start Azurite: scripts/azurite.sh start); nothing measured");
        return;
    };
    let n = std::env::var("TABLEKIT_BENCH_N")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_N);
    let flavor = std::env::var("TABLEKIT_BENCH_RUNTIME").unwrap_or_else(|_| "multi_thread".into());
    let mut builder = match flavor.as_str() {
        "multi_thread" => tokio::runtime::Builder::new_multi_thread(),
        "current_thread" => tokio::runtime::Builder::new_current_thread(),
        other => {
            eprintln!(
                "floor: TABLEKIT_BENCH_RUNTIME is multi_thread or current_thread, not {other:?}"
            );
            std::process::exit(2);
        }
    };
    let runtime = builder.enable_all().build().expect("a tokio runtime");
    let ep = Endpoint::from_connection_string(&conn);
    let mode = std::env::var("FLOOR_MODE").unwrap_or_else(|_| "all".into());
    if mode == "codec" {
        // The codecs alone, on a page an earlier run kept (FLOOR_PAGE_OUT),
        // FLOOR_CODEC_ROUNDS times: the run to profile them.
        let path = std::env::var("FLOOR_PAGE").expect("FLOOR_PAGE: a page kept by FLOOR_PAGE_OUT");
        let page = std::fs::read(path).expect("FLOOR_PAGE is readable");
        let entities: Vec<Employee> = (0..n).map(build).collect();
        let rounds = std::env::var("FLOOR_CODEC_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1usize);
        let ok = (0..rounds).all(|_| codecs(&entities, &page));
        std::process::exit(if ok { 0 } else { 1 });
    }
    eprintln!("floor: runtime {flavor}, N = {n}, mode {mode}");
    let ok = runtime.block_on(async {
        match mode.as_str() {
            "pair" => pair(&ep, &conn, n).await,
            "all" => workloads(&ep, n).await & pair(&ep, &conn, n).await,
            other => {
                eprintln!("floor: FLOOR_MODE is all or pair, not {other:?}");
                false
            }
        }
    });
    if !ok {
        std::process::exit(1);
    }
}
