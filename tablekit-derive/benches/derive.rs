//! Encode and decode of the standard workload entity (shared WORKLOAD.md)
//! through `#[derive(TableEntity)]` versus the `DynamicEntity` path.
//!
//! ```text
//! cargo bench -p tablekit-derive --bench derive
//! ```
//!
//! Before criterion's timings, it prints the allocations per entity of each
//! path, counted by an instrumented global allocator. Decoding reads a
//! 1000-entity query page: the derived type reads the `odata=nometadata` form it
//! asks the service for, `DynamicEntity` the `odata=minimalmetadata` form it
//! needs (type annotations); the derived type on the annotated page is shown
//! too, for a like-for-like body.

use std::alloc::System;
use std::hint::black_box;

use chrono::{DateTime, Utc};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use tablekit::{codec::entity_to_json, DynamicEntity, TableEntity};
use uuid::Uuid;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const PAGE: usize = 1000;

/// The workload entity, derived.
#[derive(TableEntity, Debug, Clone, PartialEq)]
struct Employee {
    #[tablekit(partition_key)]
    partition: String,
    #[tablekit(row_key)]
    row: String,
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

fn hire_date(i: usize) -> DateTime<Utc> {
    DateTime::from_timestamp(1_577_836_800 + 60 * i as i64, 0).unwrap_or_default()
}

fn guid(i: usize) -> Uuid {
    Uuid::from_u128(0x0000_0000_0000_4000_8000_0000_0000_0000 | i as u128)
}

fn photo(i: usize) -> Vec<u8> {
    (0..64).map(|j| ((i + j) & 0xFF) as u8).collect()
}

fn employee(i: usize) -> Employee {
    Employee {
        partition: format!("p{:03}", i % 100),
        row: format!("{i:08}"),
        first_name: format!("First-{i:08}-abcdef"),
        last_name: format!("Last-{i:08}-ghijklm"),
        email: format!("user{i:08}@example.com"),
        age: 18 + ((7 * i + i / 100) % 50) as i32,
        salary: 30000.37 + i as f64,
        employee_id: 9_000_000_000 + i as i64,
        hire_date: hire_date(i),
        id: guid(i),
        active: !i.is_multiple_of(3),
        photo: photo(i),
    }
}

fn dynamic(i: usize) -> DynamicEntity {
    let e = employee(i);
    DynamicEntity::new(e.partition, e.row)
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

/// A query page as the service sends it; `annotated` keeps the type
/// annotations of `odata=minimalmetadata` (and adds the ETag), otherwise the
/// page is the `odata=nometadata` form.
fn page(annotated: bool) -> Vec<u8> {
    let mut body = String::from(r#"{"value":["#);
    for i in 0..PAGE {
        if i > 0 {
            body.push(',');
        }
        let json = String::from_utf8(entity_to_json(&dynamic(i)).unwrap()).unwrap();
        let members = if annotated {
            json
        } else {
            strip_annotations(&json)
        };
        body.push('{');
        if annotated {
            body.push_str(r#""odata.etag":"W/\"datetime'2024-05-01T12%3A34%3A56.1234567Z'\"","#);
        }
        body.push_str(r#""Timestamp":"2024-05-01T12:34:56.1234567Z","#);
        body.push_str(&members[1..]);
    }
    body.push_str("]}");
    body.into_bytes()
}

/// Removes every `"Name@odata.type":"Edm.T",` member.
fn strip_annotations(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(at) = rest.find("@odata.type\":\"") {
        let start = rest[..at].rfind('"').unwrap_or(at);
        out.push_str(&rest[..start]);
        let after = &rest[at..];
        let end = after.find("\",").map_or(after.len(), |e| e + 2);
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Allocations (count, bytes) per call of `f`, averaged over `n` calls.
fn allocations<R>(n: usize, mut f: impl FnMut() -> R) -> (f64, f64) {
    let region = Region::new(GLOBAL);
    for _ in 0..n {
        black_box(f());
    }
    let s = region.change();
    (
        (s.allocations + s.reallocations) as f64 / n as f64,
        s.bytes_allocated as f64 / n as f64,
    )
}

fn report_allocations() {
    let derived = employee(42);
    let dynamic = dynamic(42);
    assert_eq!(
        entity_to_json(&derived).unwrap(),
        entity_to_json(&dynamic).unwrap()
    );
    let plain = page(false);
    let annotated = page(true);
    let a: Vec<Employee> = tablekit::__private_0_1::bench::decode_page(&plain).unwrap();
    let b: Vec<DynamicEntity> = tablekit::__private_0_1::bench::decode_page(&annotated).unwrap();
    assert_eq!(a.len(), PAGE);
    assert_eq!(b.len(), PAGE);
    assert_eq!(a[7], employee(7));

    let lines = [
        (
            "encode derive",
            allocations(10_000, || entity_to_json(&derived).unwrap()),
        ),
        (
            "encode DynamicEntity",
            allocations(10_000, || entity_to_json(&dynamic).unwrap()),
        ),
        (
            "decode derive (nometadata page)",
            per_entity(allocations(20, || {
                tablekit::__private_0_1::bench::decode_page::<Employee>(&plain).unwrap()
            })),
        ),
        (
            "decode derive (minimalmetadata page)",
            per_entity(allocations(20, || {
                tablekit::__private_0_1::bench::decode_page::<Employee>(&annotated).unwrap()
            })),
        ),
        (
            "decode DynamicEntity (minimalmetadata page)",
            per_entity(allocations(20, || {
                tablekit::__private_0_1::bench::decode_page::<DynamicEntity>(&annotated).unwrap()
            })),
        ),
    ];
    println!("allocations per entity:");
    for (name, (count, bytes)) in lines {
        println!("  {name:<44} {count:>6.2} allocations {bytes:>8.0} bytes");
    }
}

fn per_entity((count, bytes): (f64, f64)) -> (f64, f64) {
    (count / PAGE as f64, bytes / PAGE as f64)
}

fn benches(c: &mut Criterion) {
    report_allocations();

    let derived = employee(42);
    let dynamic = dynamic(42);
    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Elements(1));
    g.bench_function("derive", |b| {
        b.iter(|| entity_to_json(black_box(&derived)).unwrap())
    });
    g.bench_function("dynamic", |b| {
        b.iter(|| entity_to_json(black_box(&dynamic)).unwrap())
    });
    g.finish();

    let plain = page(false);
    let annotated = page(true);
    let mut g = c.benchmark_group("decode_page");
    g.throughput(Throughput::Elements(PAGE as u64));
    g.bench_function("derive_nometadata", |b| {
        b.iter(|| {
            tablekit::__private_0_1::bench::decode_page::<Employee>(black_box(&plain)).unwrap()
        })
    });
    g.bench_function("derive_minimalmetadata", |b| {
        b.iter(|| {
            tablekit::__private_0_1::bench::decode_page::<Employee>(black_box(&annotated)).unwrap()
        })
    });
    g.bench_function("dynamic_minimalmetadata", |b| {
        b.iter(|| {
            tablekit::__private_0_1::bench::decode_page::<DynamicEntity>(black_box(&annotated))
                .unwrap()
        })
    });
    g.finish();
}

criterion_group!(derive_benches, benches);
criterion_main!(derive_benches);
