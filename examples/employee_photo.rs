//! The large entities pattern (design guide §3.11): an employee whose photo,
//! over the 64 KiB a property may hold, lives in a blob; the entity's `Photo`
//! property names the blob.
//!
//! ```text
//! cargo run --example employee_photo
//! ```
//!
//! It uses `TABLEKIT_CONNECTION_STRING` when set (Azure or Azurite; the
//! account's Table and Blob services), and otherwise the embedded backend, so
//! it runs on a fresh machine with no server. It exits with status 1 if what
//! it reads back differs from what it wrote.

use std::time::Duration;

use chrono::Utc;
use tablekit::{clock::ManualClock, DynamicEntity, ETag, EdmValue, IfMatch, Storage, TableEntity};
use tablekit_patterns::large::{LargeTable, DEFAULT_GRACE};

/// The seed's employee, with a photo.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id}")]
struct Employee {
    department: String,
    employee_id: String,
    first_name: String,
    last_name: String,
    email: String,
    photo: Vec<u8>,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

/// The employee without the photo: what the directory page needs.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id}")]
struct Card {
    department: String,
    employee_id: String,
    first_name: String,
    last_name: String,
}

/// A made-up JPEG of `len` bytes.
fn jpeg(len: usize, seed: u8) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(17) ^ seed)
        .collect();
    bytes[..3].copy_from_slice(&[0xff, 0xd8, 0xff]);
    bytes
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("employee_photo failed: {e}");
        std::process::exit(1);
    }
}

async fn run() -> tablekit::Result<()> {
    // The account of TABLEKIT_CONNECTION_STRING, else the embedded store.
    let storage = Storage::from_env()?;
    println!("backend: {}", storage.description());
    let (tables, blobs) = (storage.tables()?, storage.blobs()?);
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let table = tables.table::<Employee>(&format!("Employees{run_id}"))?;
    table.create_table().await?;
    let photos = blobs.container(&format!("photos-{run_id}"))?;
    photos.create_container().await?;
    let employees = LargeTable::new(table.clone(), photos.clone());

    // A 300 KiB photo: too large for a property, so it goes to a blob first,
    // then the entity is written with the blob's name in Photo.
    let mut jones = Employee {
        department: "Sales".into(),
        employee_id: "000223".into(),
        first_name: "Jonathan".into(),
        last_name: "Jones".into(),
        email: "jonesj@contoso.com".into(),
        photo: jpeg(300 * 1024, 1),
        etag: None,
    };
    employees.insert(&mut jones).await?;
    let stored = table
        .with_type::<DynamicEntity>()
        .get(("Sales", "000223"))
        .await?
        .expect("just inserted");
    let blob = stored.get("Photo").and_then(EdmValue::as_str).unwrap_or("");
    println!("entity Sales/000223: Photo = {blob:?}");

    // The directory page: one request, no photo.
    let card = employees
        .get_without_blobs::<Card>(("Sales", "000223"))
        .await?
        .expect("just inserted");
    println!(
        "card: {} {} (photo in blob {})",
        card.entity.first_name,
        card.entity.last_name,
        card.blobs[0].blob()
    );

    // The profile page: two requests, the whole employee.
    let whole = employees
        .get(("Sales", "000223"))
        .await?
        .expect("just inserted");
    check(
        whole.photo == jones.photo,
        "the photo read back is the one written",
    )?;
    println!(
        "read back the whole employee: photo of {} bytes",
        whole.photo.len()
    );

    // A new photo: a new blob, the entity replaced under its ETag, the old blob deleted.
    jones.photo = jpeg(250 * 1024, 2);
    let etag = jones.etag.clone().expect("set by the insert");
    employees.replace(&mut jones, etag).await?;
    let names: Vec<String> = photos
        .list_blobs()
        .fetch_all()
        .await?
        .iter()
        .map(|b| b.name().to_owned())
        .collect();
    check(names.len() == 1, "one blob after the replace")?;
    println!("replaced the photo: blobs now {names:?}");

    // The sweep finds nothing to do: every blob has its entity. It runs here
    // as it would once the grace period (DEFAULT_GRACE, one hour: a write in
    // flight keeps its blob) has passed, on a clock an hour ahead.
    let later = Utc::now()
        + chrono::Duration::from_std(DEFAULT_GRACE + Duration::from_secs(1)).expect("an hour fits");
    let sweeper = employees.clone().with_clock(ManualClock::new(later));
    let report = sweeper.sweep_orphans().await?;
    check(
        report.live == 1 && report.deleted.is_empty(),
        "the live blob is kept",
    )?;
    println!("sweep: {report:?} (production grace: {DEFAULT_GRACE:?})");

    // Delete: the entity first, then its blob.
    employees.delete(("Sales", "000223"), IfMatch::Any).await?;
    let left = photos.list_blobs().fetch_all().await?.len();
    check(left == 0, "no blob left after the delete")?;
    let report = sweeper.sweep_orphans().await?;
    check(report.deleted.is_empty(), "nothing for the sweep")?;
    println!("deleted the employee and the photo");

    table.delete_table().await?;
    photos.delete_container().await?;
    Ok(())
}

fn check(ok: bool, what: &str) -> tablekit::Result<()> {
    if ok {
        Ok(())
    } else {
        Err(tablekit::error::DecodeError::new(format!("check failed: {what}")).into())
    }
}
