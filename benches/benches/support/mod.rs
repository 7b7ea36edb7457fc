//! What the durable-store benches share: the entity they write and the
//! resident-memory reading. (A folder, so cargo does not take it for a bench.)

use tablekit::DynamicEntity;

/// How many partitions the entities are spread over.
pub const PARTITIONS: usize = 100;

/// Entity `i`, with the shape of the workload's entity (WORKLOAD.md).
pub fn entity(i: usize) -> DynamicEntity {
    DynamicEntity::new(format!("p{:03}", i % PARTITIONS), format!("{i:08}"))
        .with("FirstName", format!("First-{i:08}-abcdef"))
        .with("LastName", format!("Last-{i:08}-ghijklm"))
        .with("Email", format!("user{i:08}@example.com"))
        .with("Age", 18 + ((7 * i + i / 100) % 50) as i32)
        .with("Salary", 30000.37 + i as f64)
        .with("EmployeeId", 9_000_000_000 + i as i64)
        .with("Active", !i.is_multiple_of(3))
        .with(
            "Photo",
            (0..64).map(|j| ((i + j) & 0xFF) as u8).collect::<Vec<u8>>(),
        )
}

/// A field of `/proc/self/status` in KiB.
pub fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}
