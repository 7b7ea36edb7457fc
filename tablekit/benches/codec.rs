//! Per-entity and per-request client costs of tablekit, through its public API only.
//!
//! ```text
//! cargo bench -p tablekit --bench codec
//! ```
//!
//! - `encode`: `entity_to_json` of the standard workload entity (shared WORKLOAD.md);
//!   `entity_to_json_duplicate_search` is the same entity behind a type that does not
//!   promise unique property names, so the encoder also looks for a repeated name
//!   (what hand-written `TableEntity` impls and the embedded store's checks pay).
//! - `sign`: a table SAS (`TableSas::sign`): one HMAC-SHA256 over a short
//!   string-to-sign, the same work as a request's SharedKey signature (which has no
//!   public entry point).
//! - `request`, `transaction`, `query_page`: whole client calls against an in-process
//!   fake Table service on loopback that answers every request with canned bytes. The
//!   figure is the **CPU time of the client thread** (`getrusage(RUSAGE_THREAD)`, user
//!   and system, on a current-thread runtime), so the fake server's work and the
//!   loopback latency are not counted: it is what the workload bench's `cpu_us_per_*`
//!   measures, without Azurite.
//!
//! `request/raw_tcp_round_trip_floor` is the same point-read exchange over a bare
//! blocking socket: the kernel's share of any request here, which no client avoids.
//!
//! Page decoding has no public entry point either; its per-entity cost is
//! `query_page/1000_entities` minus `request/query_empty_page`, divided by 1000.

use std::hint::black_box;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use nix::sys::resource::{getrusage, UsageWho};
use tablekit::{
    account::{AccountKey, Credential, TableSas, TableSasPermissions},
    codec::entity_to_json,
    entity::{PropertyWriter, RawEntity},
    Account, DynamicEntity, TableClient, TableEntity, TableServiceClient, UpdateMode,
};

/// The emulator's published development key.
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const ACCOUNT: &str = "devstoreaccount1";
const PAGE: usize = 1_000;
const BATCH: usize = 100;
const TIMESTAMP: &str = "2024-05-01T12:34:56.1234567Z";
const ETAG: &str = "W/\"datetime'2024-05-01T12%3A34%3A56.1234567Z'\"";

// ---------------------------------------------------------------------------
// The workload entity (WORKLOAD.md), typed and as the service returns it.

fn entity(i: usize) -> DynamicEntity {
    let hire_date = chrono::DateTime::from_timestamp(1_577_836_800 + 60 * i as i64, 0)
        .expect("HireDate within chrono's range");
    let id = uuid::Uuid::parse_str(&format!("00000000-0000-4000-8000-{i:012x}"))
        .expect("the generator's GUID text is valid");
    DynamicEntity::new(format!("p{:03}", i % 100), format!("{i:08}"))
        .with("FirstName", format!("First-{i:08}-abcdef"))
        .with("LastName", format!("Last-{i:08}-ghijklm"))
        .with("Email", format!("user{i:08}@example.com"))
        .with("Age", 18 + ((7 * i + i / 100) % 50) as i32)
        .with("Salary", 30000.37 + i as f64)
        .with("EmployeeId", 9_000_000_000_i64 + i as i64)
        .with("HireDate", hire_date)
        .with("Id", id)
        .with("Active", !i.is_multiple_of(3))
        .with("Photo", photo(i))
}

/// The workload entity behind a hand-written impl that keeps the default
/// `unique_property_names() == false`: the encoder searches for duplicate names.
struct MayRepeatNames(DynamicEntity);

impl TableEntity for MayRepeatNames {
    fn partition_key(&self) -> std::borrow::Cow<'_, str> {
        self.0.partition_key()
    }
    fn row_key(&self) -> std::borrow::Cow<'_, str> {
        self.0.row_key()
    }
    fn write_properties<W: PropertyWriter + ?Sized>(&self, out: &mut W) -> tablekit::Result<()> {
        self.0.write_properties(out)
    }
    fn decode(entity: &RawEntity<'_>) -> tablekit::Result<Self> {
        DynamicEntity::decode(entity).map(MayRepeatNames)
    }
}

fn photo(i: usize) -> Vec<u8> {
    (0..64).map(|j| ((i + j) & 0xFF) as u8).collect()
}

/// Entity `i`'s members as a minimal-metadata query or point-read answer carries them.
fn wire_members(i: usize) -> String {
    let etag = ETAG.replace('"', "\\\"");
    let hire = chrono::DateTime::from_timestamp(1_577_836_800 + 60 * i as i64, 0)
        .expect("HireDate within chrono's range")
        .format("%Y-%m-%dT%H:%M:%SZ");
    let photo = base64::engine::general_purpose::STANDARD.encode(photo(i));
    format!(
        concat!(
            r#""odata.etag":"{etag}","PartitionKey":"p{pk:03}","RowKey":"{i:08}","Timestamp":"{ts}","#,
            r#""FirstName":"First-{i:08}-abcdef","LastName":"Last-{i:08}-ghijklm","#,
            r#""Email":"user{i:08}@example.com","Age":{age},"Salary":{salary},"#,
            r#""EmployeeId@odata.type":"Edm.Int64","EmployeeId":"{id}","#,
            r#""HireDate@odata.type":"Edm.DateTime","HireDate":"{hire}","#,
            r#""Id@odata.type":"Edm.Guid","Id":"00000000-0000-4000-8000-{i:012x}","#,
            r#""Active":{active},"Photo@odata.type":"Edm.Binary","Photo":"{photo}""#
        ),
        etag = etag,
        pk = i % 100,
        i = i,
        ts = TIMESTAMP,
        age = 18 + (7 * i + i / 100) % 50,
        salary = 30000.37 + i as f64,
        id = 9_000_000_000_u64 + i as u64,
        hire = hire,
        active = !i.is_multiple_of(3),
        photo = photo,
    )
}

/// A query answer holding entities `0..n`.
fn page_body(n: usize) -> String {
    let mut body =
        format!(r#"{{"odata.metadata":"http://127.0.0.1/{ACCOUNT}/$metadata#Bench","value":["#);
    for i in 0..n {
        if i > 0 {
            body.push(',');
        }
        body.push('{');
        body.push_str(&wire_members(i));
        body.push('}');
    }
    body.push_str("]}");
    body
}

// ---------------------------------------------------------------------------
// A fake Table service: one thread per connection, canned answers.

struct Canned {
    page: Vec<u8>,
    empty_page: Vec<u8>,
    entity: Vec<u8>,
    written: Vec<u8>,
    batch: Vec<u8>,
}

fn response(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut r = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    r.push_str("x-ms-request-id: 00000000-0000-0000-0000-000000000000\r\n");
    r.push_str("x-ms-version: 2019-02-02\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    let mut r = r.into_bytes();
    r.extend_from_slice(body);
    r
}

impl Canned {
    fn new() -> Self {
        const JSON: &str = "application/json;odata=minimalmetadata;streaming=true;charset=utf-8";
        let entity_body = format!(
            r#"{{"odata.metadata":"http://127.0.0.1/{ACCOUNT}/$metadata#Bench/@Element",{}}}"#,
            wire_members(42)
        );
        let mut batch = String::from(
            "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n",
        );
        for _ in 0..BATCH {
            batch.push_str(
                "--changesetresponse_2\r\nContent-Type: application/http\r\n\
                 Content-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 204 No Content\r\n\
                 X-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\n\
                 DataServiceVersion: 3.0;\r\n",
            );
            batch.push_str(&format!("ETag: {ETAG}\r\n\r\n\r\n"));
        }
        batch.push_str("--changesetresponse_2--\r\n--batchresponse_1--\r\n");
        Canned {
            page: response(
                "200 OK",
                &[("Content-Type", JSON)],
                page_body(PAGE).as_bytes(),
            ),
            empty_page: response("200 OK", &[("Content-Type", JSON)], page_body(0).as_bytes()),
            entity: response(
                "200 OK",
                &[("Content-Type", JSON), ("ETag", ETAG)],
                entity_body.as_bytes(),
            ),
            written: response("204 No Content", &[("ETag", ETAG)], b""),
            batch: response(
                "202 Accepted",
                &[("Content-Type", "multipart/mixed; boundary=batchresponse_1")],
                batch.as_bytes(),
            ),
        }
    }

    fn answer(&self, method: &str, path: &str) -> &[u8] {
        match method {
            "GET" if path.contains("/Page()") => &self.page,
            "GET" if path.contains("()") => &self.empty_page,
            "GET" => &self.entity,
            "POST" if path.ends_with("/$batch") => &self.batch,
            _ => &self.written,
        }
    }
}

fn serve(mut conn: TcpStream, canned: &Canned) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(1 << 20);
    let mut chunk = vec![0u8; 256 * 1024];
    loop {
        // The head, then as many body bytes as Content-Length says.
        let head_end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let n = conn.read(&mut chunk)?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut words = head.split_whitespace();
        let method = words.next().unwrap_or("").to_owned();
        let path = words.next().unwrap_or("").to_owned();
        let length: usize = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let n = conn.read(&mut chunk)?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        buf.drain(..head_end + length);
        conn.write_all(canned.answer(&method, &path))?;
    }
}

/// Starts the fake service; returns its address and the length of its point-read
/// answer. It lives as long as the process.
fn start_fake_service() -> (std::net::SocketAddr, usize) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let addr = listener.local_addr().expect("a bound address");
    let canned = Arc::new(Canned::new());
    let entity_len = canned.entity.len();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let canned = canned.clone();
            std::thread::spawn(move || {
                let _ = serve(conn, &canned);
            });
        }
    });
    (addr, entity_len)
}

/// The floor under any HTTP client here: one point-read exchange over a blocking
/// socket, with no HTTP library, signing or decoding (two syscalls and a wait).
fn raw_round_trip(conn: &mut TcpStream, answer_len: usize, buf: &mut [u8]) {
    const REQUEST: &[u8] = b"GET /devstoreaccount1/Bench(PartitionKey='p042',RowKey='00000042') HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n";
    conn.write_all(REQUEST).expect("a write");
    let mut got = 0;
    while got < answer_len {
        let n = conn.read(&mut buf[got..]).expect("a read");
        assert!(n > 0, "the fake service closed the connection");
        got += n;
    }
}

// ---------------------------------------------------------------------------
// Client-thread CPU time.

fn thread_cpu() -> Duration {
    let u = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage(RUSAGE_THREAD)");
    let micros = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    micros(u.user_time()) + micros(u.system_time())
}

/// Runs `iters` calls of `call` on a current-thread runtime and returns the CPU time
/// the calling thread spent, which is all of the client's (hyper's connection tasks
/// run on the same thread).
fn client_cpu<F, Fut>(rt: &tokio::runtime::Runtime, iters: u64, mut call: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let before = thread_cpu();
    rt.block_on(async {
        for _ in 0..iters {
            call().await;
        }
    });
    thread_cpu() - before
}

// ---------------------------------------------------------------------------
// The benchmarks.

fn short<M: criterion::measurement::Measurement>(g: &mut BenchmarkGroup<'_, M>) {
    g.sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
}

fn key() -> AccountKey {
    AccountKey::from_base64(DEV_KEY).expect("the development key is base64")
}

fn client(endpoint: &str, credential: Credential, table: &str) -> TableClient<DynamicEntity> {
    let account = Account::new(ACCOUNT, endpoint, credential).expect("a valid account");
    TableServiceClient::new(account)
        .expect("an HTTP client")
        .table(table)
        .expect("a valid table name")
}

fn codec(c: &mut Criterion) {
    let e = entity(42);

    let mut g = c.benchmark_group("encode");
    short(&mut g);
    g.throughput(Throughput::Elements(1));
    g.bench_function("entity_to_json", |b| {
        b.iter(|| entity_to_json(black_box(&e)).expect("a valid entity"))
    });
    // The same entity with its three strings in accented Latin, CJK and
    // emoji (the same number of characters): every non-ASCII character is
    // written as \uXXXX (two for an emoji), which is what this measures.
    let non_ascii = e
        .clone()
        .with("FirstName", "Fírst-\u{e9}\u{e8}\u{ea}\u{eb}-\u{e0}bcdéf-x")
        .with("LastName", "\u{6771}\u{4eac}\u{4e2d}".repeat(7))
        .with("Email", "\u{1F600}".repeat(24));
    g.bench_function("entity_to_json_non_ascii_text", |b| {
        b.iter(|| entity_to_json(black_box(&non_ascii)).expect("a valid entity"))
    });
    let searched = MayRepeatNames(e.clone());
    g.bench_function("entity_to_json_duplicate_search", |b| {
        b.iter(|| entity_to_json(black_box(&searched)).expect("a valid entity"))
    });
    g.finish();

    let account = Account::new(
        ACCOUNT,
        "http://127.0.0.1:10002/devstoreaccount1",
        Credential::SharedKey(key()),
    )
    .expect("a valid account");
    let expiry = chrono::DateTime::from_timestamp(4_102_444_800, 0).expect("2100-01-01");
    let mut g = c.benchmark_group("sign");
    short(&mut g);
    g.throughput(Throughput::Elements(1));
    g.bench_function("table_sas_hmac_sha256", |b| {
        b.iter(|| {
            TableSas::new("Bench")
                .permissions(TableSasPermissions::ALL)
                .expiry(expiry)
                .sign(black_box(&account))
                .expect("a signable SAS")
        })
    });
    g.finish();
}

fn over_loopback(c: &mut Criterion) {
    let (addr, entity_len) = start_fake_service();
    let endpoint = format!("http://{addr}/{ACCOUNT}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let bench = client(&endpoint, Credential::SharedKey(key()), "Bench");
    let page = client(&endpoint, Credential::SharedKey(key()), "Page");
    let e = entity(42);
    let tx_entities: Vec<DynamicEntity> = (0..BATCH).map(|j| entity(42 + 100 * j)).collect();

    // Open the connection before measuring.
    rt.block_on(async {
        for t in [&bench, &page] {
            t.get(("p042", "00000042"))
                .await
                .expect("the fake service answers");
        }
    });

    let mut g = c.benchmark_group("request");
    short(&mut g);
    g.throughput(Throughput::Elements(1));
    let mut raw = TcpStream::connect(addr).expect("connect to the fake service");
    raw.set_nodelay(true).expect("TCP_NODELAY");
    let mut buf = vec![0u8; entity_len];
    g.bench_function("raw_tcp_round_trip_floor", |b| {
        b.iter_custom(|iters| {
            let before = thread_cpu();
            for _ in 0..iters {
                raw_round_trip(&mut raw, entity_len, &mut buf);
            }
            thread_cpu() - before
        })
    });
    g.bench_function("get", |b| {
        b.iter_custom(|iters| {
            client_cpu(&rt, iters, || async {
                let got = bench.get(("p042", "00000042")).await;
                black_box(got.expect("a point read").expect("an entity"));
            })
        })
    });
    g.bench_function("insert", |b| {
        b.iter_custom(|iters| {
            client_cpu(&rt, iters, || async {
                black_box(bench.insert(&e).await.expect("an insert"));
            })
        })
    });
    g.bench_function("upsert_merge", |b| {
        b.iter_custom(|iters| {
            client_cpu(&rt, iters, || async {
                black_box(
                    bench
                        .upsert(&e, UpdateMode::Merge)
                        .await
                        .expect("an upsert"),
                );
            })
        })
    });
    g.bench_function("query_empty_page", |b| {
        b.iter_custom(|iters| {
            client_cpu(&rt, iters, || async {
                let p = bench.query().page_size(PAGE).next_page().await;
                black_box(p.expect("a page"));
            })
        })
    });
    g.finish();

    let mut g = c.benchmark_group("transaction");
    short(&mut g);
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("insert_100", |b| {
        b.iter_custom(|iters| {
            client_cpu(&rt, iters, || async {
                let mut tx = bench.transaction();
                for e in &tx_entities {
                    tx.insert(e).expect("a valid operation");
                }
                black_box(tx.send().await.expect("a transaction"));
            })
        })
    });
    g.bench_function("build_100_unsent", |b| {
        b.iter(|| {
            let mut tx = bench.transaction();
            for e in &tx_entities {
                tx.insert(e).expect("a valid operation");
            }
            tx
        })
    });
    g.finish();

    let mut g = c.benchmark_group("query_page");
    short(&mut g);
    g.throughput(Throughput::Elements(PAGE as u64));
    g.bench_function("1000_entities", |b| {
        b.iter_custom(|iters| {
            client_cpu(&rt, iters, || async {
                let p = page
                    .query()
                    .page_size(PAGE)
                    .next_page()
                    .await
                    .expect("a page");
                assert_eq!(p.items.len(), PAGE);
                black_box(p);
            })
        })
    });
    g.finish();
}

criterion_group!(benches, codec, over_loopback);
criterion_main!(benches);
