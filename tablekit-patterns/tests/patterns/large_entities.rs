//! The large entities pattern (design guide §3.11) on Azurite and on the
//! embedded store: the seed's employee with a photo in a blob, the order of
//! the writes, failure at each step and the sweep that recovers from it, a
//! concurrent replace, and the split-properties mode at its boundaries.

use crate::common;
use crate::common::OnStep as _;
use tablekit::testing::TestEnv;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{assert_invalid, fresh_table, offline_service, second_service, unique_name};
use tablekit::{
    clock::ManualClock,
    options::{ClientOptions, RetryPolicy},
    Account, BlobServiceClient, ContainerClient, DynamicEntity, ETag, EdmValue, IfMatch,
    TableClient, TableEntity,
};
use tablekit_patterns::large::{
    LargeTable, SplitTable, Step, SweepReport, BLOBS, DEFAULT_GRACE, SPLIT,
};

/// The seed's employee (§1.1), with the photo of §3.11.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id}")]
struct Employee {
    department: String,
    employee_id: String,
    first_name: String,
    last_name: String,
    age: i32,
    email: String,
    photo: Vec<u8>,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

/// The employee without the photo: what a one-request read decodes into.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id}")]
struct EmployeeCard {
    department: String,
    employee_id: String,
    first_name: String,
    last_name: String,
}

fn photo(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn don_hall(photo_len: usize) -> Employee {
    Employee {
        department: "Marketing".into(),
        employee_id: "00001".into(),
        first_name: "Don".into(),
        last_name: "Hall".into(),
        age: 34,
        email: "donh@contoso.com".into(),
        photo: photo(photo_len, 1),
        etag: None,
    }
}

/// A fresh container in the Blob service of the case's backend.
async fn fresh_container(env: &TestEnv) -> ContainerClient {
    let container = env
        .blobs()
        .container(&unique_name("large-"))
        .expect("valid container name");
    container
        .create_container()
        .await
        .expect("create the container");
    container
}

async fn setup(env: &TestEnv) -> (LargeTable<Employee>, TableClient<Employee>) {
    let table = fresh_table::<Employee>(env.tables(), "Large").await;
    let container = fresh_container(env).await;
    (LargeTable::new(table.clone(), container), table)
}

/// Every blob of the container: name and bytes.
async fn blobs(container: &ContainerClient) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for p in container.list_blobs().fetch_all().await.unwrap() {
        let bytes = container
            .blob(p.name())
            .unwrap()
            .download()
            .bytes()
            .await
            .unwrap();
        out.push((p.name().to_owned(), bytes.to_vec()));
    }
    out
}

/// The stored entity, read directly.
async fn row(table: &TableClient<Employee>, pk: &str, rk: &str) -> Option<DynamicEntity> {
    table
        .with_type::<DynamicEntity>()
        .get((pk, rk))
        .await
        .unwrap()
}

/// The sweep as it would run once the grace period has passed: the same
/// table on a clock past it (no sleeping).
async fn sweep_later(large: &LargeTable<Employee>) -> tablekit::Result<SweepReport> {
    let later = chrono::Utc::now()
        + chrono::Duration::from_std(DEFAULT_GRACE + Duration::from_secs(1)).unwrap();
    large
        .clone()
        .with_clock(ManualClock::new(later))
        .sweep_orphans()
        .await
}

fn same_employee(a: &Employee, b: &Employee) {
    let strip = |e: &Employee| Employee {
        etag: None,
        ..e.clone()
    };
    assert_eq!(strip(a), strip(b));
}

async fn seed_photo_goes_to_a_blob_and_comes_back_whole(env: TestEnv) {
    let (large, table) = setup(&env).await;
    let mut don = don_hall(200 * 1024);
    large.insert(&mut don).await.unwrap();
    assert!(don.etag.is_some(), "insert sets the ETag");

    // The entity holds the blob's name in Photo, and says so in LargeBlobs.
    let stored = row(&table, "Marketing", "00001").await.unwrap();
    let name = stored
        .get("Photo")
        .and_then(EdmValue::as_str)
        .unwrap()
        .to_owned();
    assert!(
        name.starts_with(&format!("{}/Marketing/00001/", table.name())),
        "{name}"
    );
    assert_eq!(stored.get(BLOBS), Some(&EdmValue::from("Photo:Binary")));
    assert_eq!(stored.get("FirstName"), Some(&EdmValue::from("Don")));
    // The blob holds the photo's bytes, and nothing else is in the container.
    assert_eq!(
        blobs(large.container()).await,
        vec![(name.clone(), don.photo.clone())]
    );

    // Two requests: the whole typed entity.
    let back = large.get(("Marketing", "00001")).await.unwrap().unwrap();
    same_employee(&back, &don);
    assert_eq!(back.etag, don.etag);
    // One request: the entity without its blob.
    let card = large
        .get_without_blobs::<EmployeeCard>(("Marketing", "00001"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(card.entity.last_name, "Hall");
    assert_eq!(card.blobs.len(), 1);
    assert_eq!(
        (card.blobs[0].property(), card.blobs[0].blob()),
        ("Photo", name.as_str())
    );
    assert!(card.blobs[0].is_binary());
    let direct = large
        .blob(&card.blobs[0])
        .unwrap()
        .download()
        .bytes()
        .await
        .unwrap();
    assert_eq!(direct.as_ref(), don.photo.as_slice());
    assert!(large.get(("Marketing", "00002")).await.unwrap().is_none());
}

async fn a_small_photo_stays_in_the_entity(env: TestEnv) {
    let (large, table) = setup(&env).await;
    // Exactly 64 KiB still fits a Binary property.
    let mut don = don_hall(64 * 1024);
    large.insert(&mut don).await.unwrap();
    let stored = row(&table, "Marketing", "00001").await.unwrap();
    assert_eq!(
        stored.get("Photo"),
        Some(&EdmValue::Binary(don.photo.clone()))
    );
    assert!(stored.get(BLOBS).is_none());
    assert!(blobs(large.container()).await.is_empty());
    same_employee(
        &large.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &don,
    );

    // One byte more goes to a blob.
    let mut bigger = don.clone();
    bigger.photo = photo(64 * 1024 + 1, 2);
    large.replace(&mut bigger, IfMatch::Any).await.unwrap();
    assert_eq!(blobs(large.container()).await.len(), 1);
    same_employee(
        &large.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &bigger,
    );

    // And back: the replace deletes the blob no entity needs any more.
    large.replace(&mut don, IfMatch::Any).await.unwrap();
    assert!(blobs(large.container()).await.is_empty());
}

async fn always_in_blob_keeps_a_small_photo_in_a_blob(env: TestEnv) {
    let (large, table) = setup(&env).await;
    let large = large.always_in_blob("Photo");
    let mut don = don_hall(1000);
    large.insert(&mut don).await.unwrap();
    let stored = row(&table, "Marketing", "00001").await.unwrap();
    assert!(stored.get("Photo").and_then(EdmValue::as_str).is_some());
    assert_eq!(blobs(large.container()).await.len(), 1);
    same_employee(
        &large.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &don,
    );
}

async fn an_entity_over_1_mib_of_small_properties_moves_the_largest(env: TestEnv) {
    let svc = env.tables().clone();
    let table = fresh_table::<DynamicEntity>(&svc, "Large").await;
    let large = LargeTable::new(table.clone(), fresh_container(&env).await);
    // 20 Binary properties of 60 KiB each (every one under 64 KiB, 1.2 MB in
    // all) and a 50 KiB String (100 KiB as UTF-16: over the limit).
    let mut e = DynamicEntity::new("Sales", "000223");
    for i in 0..20 {
        e.set(format!("Chunk{i:02}"), photo(60 * 1024 + i, i as u8));
    }
    e.set("Notes", "n".repeat(50 * 1024));
    e.set("Age", 34);
    large.insert(&mut e).await.unwrap();
    let stored = table.get(("Sales", "000223")).await.unwrap().unwrap();
    let listed = stored
        .get(BLOBS)
        .and_then(EdmValue::as_str)
        .unwrap()
        .to_owned();
    // Notes (over 64 KiB), then the largest chunks until the rest fits 1 MiB.
    assert!(
        listed.starts_with("Notes:String,") || listed.contains("Notes:String"),
        "{listed}"
    );
    assert!(listed.contains("Chunk19:Binary"), "{listed}");
    assert!(!listed.contains("Chunk00"), "the smallest stay: {listed}");
    assert_eq!(stored.get("Age"), Some(&EdmValue::Int32(34)));
    let moved = listed.split(',').count();
    assert_eq!(blobs(large.container()).await.len(), moved);
    let back = large.get(("Sales", "000223")).await.unwrap().unwrap();
    assert_eq!(back.properties.len(), e.properties.len());
    for (name, value) in e.properties.iter() {
        assert_eq!(back.get(name), Some(value), "{name}");
    }
}

async fn replace_writes_a_new_blob_and_then_deletes_the_old(env: TestEnv) {
    let (large, table) = setup(&env).await;
    let mut don = don_hall(100 * 1024);
    large.insert(&mut don).await.unwrap();
    let old = blobs(large.container()).await;

    // Each step sees the state the write order promises.
    let seen: Arc<Mutex<Vec<(Step, usize)>>> = Arc::default();
    let large = {
        let (seen, container) = (seen.clone(), large.container().clone());
        let handle = tokio::runtime::Handle::current();
        large.on_step(move |step| {
            let n = tokio::task::block_in_place(|| {
                handle.block_on(async { container.list_blobs().fetch_all().await.unwrap().len() })
            });
            seen.lock().unwrap().push((step, n));
        })
    };
    let mut newer = don.clone();
    newer.photo = photo(120 * 1024, 9);
    let before = don.etag.clone().unwrap();
    large.replace(&mut newer, before.clone()).await.unwrap();
    assert_ne!(newer.etag.as_ref(), Some(&before));
    // Blobs uploaded: old and new exist; entity written: still both; then the old goes.
    assert_eq!(
        *seen.lock().unwrap(),
        [(Step::BlobsUploaded, 2), (Step::EntityWritten, 2)]
    );
    let now = blobs(large.container()).await;
    assert_eq!(now.len(), 1);
    assert_ne!(now[0].0, old[0].0, "a new blob name per write");
    assert_eq!(now[0].1, newer.photo);
    let stored = row(&table, "Marketing", "00001").await.unwrap();
    assert_eq!(
        stored.get("Photo").and_then(EdmValue::as_str),
        Some(now[0].0.as_str())
    );
    same_employee(
        &large.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &newer,
    );

    // A stale ETag: 412, and the blob uploaded for it is deleted again.
    let mut stale = don.clone();
    stale.photo = photo(90 * 1024, 3);
    let err = large.replace(&mut stale, before).await.unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");
    assert_eq!(blobs(large.container()).await, now);
    // Replacing what is not there: not found, nothing left behind.
    let mut ghost = don_hall(100 * 1024);
    ghost.employee_id = "00002".into();
    assert!(large.replace(&mut ghost, IfMatch::Any).await.is_err());
    assert_eq!(blobs(large.container()).await, now);
    // Upsert inserts, then replaces.
    large.upsert(&mut ghost).await.unwrap();
    ghost.photo = photo(70 * 1024, 4);
    large.upsert(&mut ghost).await.unwrap();
    same_employee(
        &large.get(("Marketing", "00002")).await.unwrap().unwrap(),
        &ghost,
    );
    assert_eq!(blobs(large.container()).await.len(), 2);
}

async fn a_failed_insert_deletes_the_blob_it_uploaded(env: TestEnv) {
    let (large, table) = setup(&env).await;
    let mut don = don_hall(100 * 1024);
    large.insert(&mut don).await.unwrap();
    let before = blobs(large.container()).await;
    // The entity write fails after the blob was uploaded (the key is taken).
    let mut again = don_hall(150 * 1024);
    let err = large.insert(&mut again).await.unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    assert_eq!(
        blobs(large.container()).await,
        before,
        "the new blob is gone"
    );
    same_employee(
        &large.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &don,
    );
    assert!(row(&table, "Marketing", "00001").await.is_some());
}

/// Runs `op` in a task whose `step` callback panics, as a process dying there.
async fn crash_at<F>(large: &LargeTable<Employee>, step: Step, op: F)
where
    F: FnOnce(LargeTable<Employee>) -> futures::future::BoxFuture<'static, ()>,
{
    let crashing = large.clone().on_step(move |s| {
        if s == step {
            panic!("simulated crash at {s:?}");
        }
    });
    let err = tokio::spawn(op(crashing)).await.unwrap_err();
    assert!(err.is_panic(), "the operation reached the crash point");
}

async fn crash_after_the_upload_leaves_an_orphan_the_sweep_removes(env: TestEnv) {
    let (large, table) = setup(&env).await;
    crash_at(&large, Step::BlobsUploaded, |l| {
        Box::pin(async move {
            let _ = l.insert(&mut don_hall(100 * 1024)).await;
        })
    })
    .await;
    // The blob is there, the entity is not: an orphan, never a dangling pointer.
    assert!(row(&table, "Marketing", "00001").await.is_none());
    assert_eq!(blobs(large.container()).await.len(), 1);

    // Within the grace period it could be a write in flight: kept.
    let report = large.sweep_orphans().await.unwrap();
    assert_eq!((report.listed, report.too_young), (1, 1));
    assert!(report.deleted.is_empty());
    assert_eq!(blobs(large.container()).await.len(), 1);

    // Past it: deleted.
    let report = sweep_later(&large).await.unwrap();
    assert_eq!(
        (report.listed, report.deleted.len(), report.live),
        (1, 1, 0)
    );
    assert!(blobs(large.container()).await.is_empty());
    // The write can be made again.
    let mut don = don_hall(100 * 1024);
    large.insert(&mut don).await.unwrap();
    same_employee(
        &large.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &don,
    );
}

async fn crash_after_the_entity_delete_leaves_an_orphan_the_sweep_removes(env: TestEnv) {
    let (large, table) = setup(&env).await;
    let mut don = don_hall(100 * 1024);
    large.insert(&mut don).await.unwrap();
    let mut jun = don_hall(80 * 1024);
    jun.employee_id = "00002".into();
    large.insert(&mut jun).await.unwrap();

    crash_at(&large, Step::EntityDeleted, |l| {
        Box::pin(async move {
            let _ = l.delete(("Marketing", "00001"), IfMatch::Any).await;
        })
    })
    .await;
    assert!(row(&table, "Marketing", "00001").await.is_none());
    assert_eq!(
        blobs(large.container()).await.len(),
        2,
        "Don's photo is left"
    );

    let report = sweep_later(&large).await.unwrap();
    assert_eq!(
        (report.listed, report.live, report.deleted.len()),
        (2, 1, 1)
    );
    assert!(
        report.deleted[0].contains("/00001/"),
        "{:?}",
        report.deleted
    );
    // Jun is untouched.
    assert_eq!(
        blobs(large.container())
            .await
            .into_iter()
            .map(|b| b.1)
            .collect::<Vec<_>>(),
        [jun.photo.clone()]
    );
    same_employee(
        &large.get(("Marketing", "00002")).await.unwrap().unwrap(),
        &jun,
    );
}

async fn crash_after_a_replace_leaves_the_old_blob_for_the_sweep(env: TestEnv) {
    let (large, _table) = setup(&env).await;
    let mut don = don_hall(100 * 1024);
    large.insert(&mut don).await.unwrap();
    let mut newer = don.clone();
    newer.photo = photo(110 * 1024, 5);
    let written = newer.clone();
    crash_at(&large, Step::EntityWritten, move |l| {
        Box::pin(async move {
            let mut e = written;
            let _ = l.replace(&mut e, IfMatch::Any).await;
        })
    })
    .await;
    // The entity points at the new blob and reads whole; the old one is left.
    same_employee(
        &large.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &newer,
    );
    assert_eq!(blobs(large.container()).await.len(), 2);
    // A blob under the prefix that this pattern did not name is left alone.
    let foreign = format!("{}notes.txt", large.blob_prefix());
    large
        .container()
        .blob(&foreign)
        .unwrap()
        .upload("x")
        .await
        .unwrap();

    let report = sweep_later(&large).await.unwrap();
    assert_eq!(
        (
            report.listed,
            report.live,
            report.foreign,
            report.deleted.len()
        ),
        (3, 1, 1, 1)
    );
    let left: Vec<Vec<u8>> = blobs(large.container())
        .await
        .into_iter()
        .map(|b| b.1)
        .collect();
    assert_eq!(left.len(), 2);
    assert!(left.contains(&newer.photo) && left.contains(&b"x".to_vec()));
    same_employee(
        &large.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &newer,
    );
    // A second sweep finds nothing to do.
    assert!(sweep_later(&large).await.unwrap().deleted.is_empty());
}

/// Another writer replaces the entity while this one is between its upload
/// and its entity write.
fn racing(
    large: &LargeTable<Employee>,
    other: LargeTable<Employee>,
) -> (LargeTable<Employee>, Arc<Mutex<Option<Employee>>>) {
    let action: Arc<Mutex<Option<Employee>>> = Arc::default();
    let handle = tokio::runtime::Handle::current();
    let hooked = {
        let action = action.clone();
        large.clone().on_step(move |step| {
            if step != Step::BlobsUploaded {
                return;
            }
            let Some(mut theirs) = action.lock().unwrap().take() else {
                return;
            };
            tokio::task::block_in_place(|| {
                handle.block_on(async { other.replace(&mut theirs, IfMatch::Any).await.unwrap() })
            });
        })
    };
    (hooked, action)
}

async fn a_concurrent_replace_leaves_no_dangling_pointer_and_no_lost_blob(env: TestEnv) {
    let svc = env.tables().clone();
    let (large, table) = setup(&env).await;
    let other = LargeTable::new(
        second_service(&svc)
            .table::<Employee>(table.name())
            .unwrap(),
        large.container().clone(),
    );
    let mut don = don_hall(100 * 1024);
    large.insert(&mut don).await.unwrap();
    let (mine, theirs_slot) = racing(&large, other);

    // With the ETag this writer read: the other's replace wins, this one gets
    // 412 and deletes only its own upload; the other's blob is untouched.
    let mut theirs = don.clone();
    theirs.photo = photo(90 * 1024, 7);
    *theirs_slot.lock().unwrap() = Some(theirs.clone());
    let mut stale = don.clone();
    stale.photo = photo(95 * 1024, 8);
    let err = mine
        .replace(&mut stale, don.etag.clone().unwrap())
        .await
        .unwrap_err();
    assert!(err.is_precondition_failed(), "{err:?}");
    same_employee(
        &large.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &theirs,
    );
    assert_eq!(
        blobs(large.container())
            .await
            .into_iter()
            .map(|b| b.1)
            .collect::<Vec<_>>(),
        [theirs.photo.clone()]
    );

    // With IfMatch::Any: 412 on the version read, read again, replace the
    // other's version and delete its blob (which no entity needs any more).
    let mut theirs2 = don.clone();
    theirs2.photo = photo(85 * 1024, 10);
    *theirs_slot.lock().unwrap() = Some(theirs2);
    let mut last = don.clone();
    last.photo = photo(99 * 1024, 11);
    mine.replace(&mut last, IfMatch::Any).await.unwrap();
    same_employee(
        &large.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &last,
    );
    let left = blobs(large.container()).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].1, last.photo);
    // Nothing for the sweep: every blob is live.
    let report = sweep_later(&large).await.unwrap();
    assert_eq!((report.live, report.deleted.len()), (1, 0));
}

/// `get` reads the entity, then downloads the blob it names; another writer
/// replacing the entity in between deletes that blob. The download finds it
/// gone, and `get` reads the entity again and returns the new whole entity.
async fn get_rereads_when_a_concurrent_replace_deleted_its_blob(env: TestEnv) {
    let svc = env.tables().clone();
    let (large, table) = setup(&env).await;
    let other = LargeTable::new(
        second_service(&svc)
            .table::<Employee>(table.name())
            .unwrap(),
        large.container().clone(),
    );
    let mut don = don_hall(100 * 1024);
    large.insert(&mut don).await.unwrap();
    let mut theirs = don.clone();
    theirs.photo = photo(90 * 1024, 12);
    theirs.last_name = "Hall-Smith".into();

    let reads = Arc::new(Mutex::new(0usize));
    let slot = Arc::new(Mutex::new(Some(theirs.clone())));
    let handle = tokio::runtime::Handle::current();
    let reader = {
        let (reads, slot) = (reads.clone(), slot.clone());
        large.clone().on_step(move |step| {
            if step != Step::EntityRead {
                return;
            }
            *reads.lock().unwrap() += 1;
            let Some(mut theirs) = slot.lock().unwrap().take() else {
                return;
            };
            tokio::task::block_in_place(|| {
                handle.block_on(async { other.replace(&mut theirs, IfMatch::Any).await.unwrap() })
            });
        })
    };
    let got = reader.get(("Marketing", "00001")).await.unwrap().unwrap();
    same_employee(&got, &theirs);
    assert_eq!(got.photo, theirs.photo, "the new photo, not a mix");
    assert_eq!(*reads.lock().unwrap(), 2, "read, blob gone, read again");
    assert!(slot.lock().unwrap().is_none(), "the replace ran in between");
    // The old blob is gone, the new one is the only one.
    let left = blobs(large.container()).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].1, theirs.photo);
}

/// A table whose clock the `BlobsUploaded` step moves forward by `delay`:
/// a write that took that long between its upload and its entity write.
fn slow_writer(large: &LargeTable<Employee>, delay: Duration) -> LargeTable<Employee> {
    let clock = ManualClock::starting_now();
    let moved = clock.clone();
    large
        .clone()
        .grace(Duration::from_secs(60))
        .unwrap()
        .with_clock(clock)
        .on_step(move |step| {
            if step == Step::BlobsUploaded {
                moved.advance(delay);
            }
        })
}

async fn a_write_past_its_deadline_deletes_its_blob_and_writes_nothing(env: TestEnv) {
    let (large, table) = setup(&env).await;
    assert_eq!(large.write_deadline(), DEFAULT_GRACE / 2);
    // Grace 60 s, so the deadline is 30 s: 31 s after the upload started is too late.
    let late = slow_writer(&large, Duration::from_secs(31));
    assert_eq!(late.write_deadline(), Duration::from_secs(30));
    let err = late.insert(&mut don_hall(100 * 1024)).await.unwrap_err();
    assert!(err.is_timeout() && err.is_retryable(), "{err:?}");
    assert!(!err.is_invalid_input());
    assert!(row(&table, "Marketing", "00001").await.is_none());
    assert!(
        blobs(large.container()).await.is_empty(),
        "its blob is gone"
    );

    // 29 s is in time.
    let in_time = slow_writer(&large, Duration::from_secs(29));
    let mut don = don_hall(100 * 1024);
    in_time.insert(&mut don).await.unwrap();
    same_employee(
        &large.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &don,
    );
    let before = blobs(large.container()).await;
    assert_eq!(before.len(), 1);

    // A late replace leaves the stored entity and its blob as they were.
    let mut newer = don.clone();
    newer.photo = photo(80 * 1024, 13);
    let err = late.replace(&mut newer, IfMatch::Any).await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    same_employee(
        &large.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &don,
    );
    assert_eq!(blobs(large.container()).await, before);

    // An entity with nothing in blobs has no deadline to keep.
    let mut small = don_hall(1024);
    small.employee_id = "00002".into();
    late.insert(&mut small).await.unwrap();
}

/// The sweep and the writers share one clock and one grace: a blob is swept
/// only once the grace has passed on that clock.
async fn the_sweep_waits_out_the_grace_on_the_tables_clock(env: TestEnv) {
    let (large, table) = setup(&env).await;
    let clock = ManualClock::starting_now();
    let large = large
        .grace(Duration::from_secs(600))
        .unwrap()
        .with_clock(clock.clone());
    crash_at(&large, Step::BlobsUploaded, |l| {
        Box::pin(async move {
            let _ = l.insert(&mut don_hall(100 * 1024)).await;
        })
    })
    .await;
    assert!(row(&table, "Marketing", "00001").await.is_none());
    clock.advance(Duration::from_secs(300));
    let report = large.sweep_orphans().await.unwrap();
    assert_eq!((report.too_young, report.deleted.len()), (1, 0));
    clock.advance(Duration::from_secs(301));
    let report = large.sweep_orphans().await.unwrap();
    assert_eq!((report.too_young, report.deleted.len()), (0, 1));
    assert!(blobs(large.container()).await.is_empty());
}

async fn delete_removes_the_entity_then_its_blob(env: TestEnv) {
    let (large, table) = setup(&env).await;
    let mut don = don_hall(100 * 1024);
    large.insert(&mut don).await.unwrap();
    let stale: ETag = don.etag.clone().unwrap();
    let mut newer = don.clone();
    newer.photo = photo(70 * 1024, 6);
    large.replace(&mut newer, IfMatch::Any).await.unwrap();
    // A stale ETag leaves both alone.
    assert!(large
        .delete(("Marketing", "00001"), stale)
        .await
        .unwrap_err()
        .is_precondition_failed());
    assert_eq!(blobs(large.container()).await.len(), 1);

    assert!(large
        .delete(("Marketing", "00001"), newer.etag.clone().unwrap())
        .await
        .unwrap());
    assert!(row(&table, "Marketing", "00001").await.is_none());
    assert!(blobs(large.container()).await.is_empty());
    assert!(!large
        .delete(("Marketing", "00001"), IfMatch::Any)
        .await
        .unwrap());
}

// ---- entities with two properties in blobs ----

/// An applicant with two large properties: a photo and a resume.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{applicant_id}")]
struct Applicant {
    department: String,
    applicant_id: String,
    name: String,
    photo: Vec<u8>,
    resume: String,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

fn applicant(id: &str, seed: u8) -> Applicant {
    Applicant {
        department: "Hiring".into(),
        applicant_id: id.into(),
        name: format!("applicant {id}"),
        photo: photo(90 * 1024, seed),
        // 40,000 ASCII characters are 80,000 bytes as UTF-16: over 64 KiB.
        resume: "r".repeat(39_990) + &format!("{seed:010}"),
        etag: None,
    }
}

/// A LargeTable of applicants and the manual clock of its Blob service
/// (`None` on Azurite, whose Last-Modified is real time).
async fn applicants(env: &TestEnv) -> (LargeTable<Applicant>, Option<ManualClock>) {
    let table = fresh_table::<Applicant>(env.tables(), "Applicants").await;
    let container = env.blobs().container(&unique_name("large-")).unwrap();
    container.create_container().await.unwrap();
    (LargeTable::new(table, container), env.clock().cloned())
}

/// Lets at least a second pass on the Blob service's clock (Last-Modified
/// has a resolution of one second).
async fn a_second_passes(clock: &Option<ManualClock>) {
    match clock {
        Some(c) => c.advance(Duration::from_secs(2)),
        None => tokio::time::sleep(Duration::from_millis(1_200)).await,
    }
}

/// Uploads the blob again with the same bytes: its Last-Modified moves to
/// now, as when an insert's second upload lands a second after its first.
async fn touch(container: &ContainerClient, name: &str) {
    let blob = container.blob(name).unwrap();
    let bytes = blob.download().bytes().await.unwrap();
    blob.upload(bytes).await.unwrap();
}

/// Every blob of the container with its Last-Modified.
async fn listed(container: &ContainerClient) -> Vec<(String, chrono::DateTime<chrono::Utc>)> {
    container
        .list_blobs()
        .fetch_all()
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.name().to_owned(), p.last_modified()))
        .collect()
}

/// The sweep with its clock set so that its cutoff is `cutoff`.
async fn sweep_with_cutoff<T: TableEntity>(
    large: &LargeTable<T>,
    cutoff: chrono::DateTime<chrono::Utc>,
) -> SweepReport {
    let now = cutoff + chrono::Duration::from_std(large.grace_period()).unwrap();
    large
        .clone()
        .with_clock(ManualClock::new(now))
        .sweep_orphans()
        .await
        .unwrap()
}

/// One insert's two blobs a second apart, and a sweep whose cutoff falls
/// between them: the older blob is a candidate, the younger is not, and the
/// entity's list names both. The live photo must stay.
async fn a_sweep_between_an_entitys_two_blobs_keeps_both(env: TestEnv) {
    let (large, blob_clock) = applicants(&env).await;
    let mut ann = applicant("a1", 1);
    large.insert(&mut ann).await.unwrap();
    let before = listed(large.container()).await;
    assert_eq!(before.len(), 2);
    let resume = before.iter().find(|(n, _)| n.ends_with("/Resume")).unwrap();
    let photo_at = before
        .iter()
        .find(|(n, _)| n.ends_with("/Photo"))
        .unwrap()
        .1;
    a_second_passes(&blob_clock).await;
    touch(large.container(), &resume.0).await;

    let report = sweep_with_cutoff(&large, photo_at).await;
    assert_eq!(report.deleted, Vec::<String>::new(), "{report:?}");
    assert_eq!(
        (report.listed, report.live, report.too_young),
        (2, 1, 1),
        "{report:?}"
    );
    assert_eq!(listed(large.container()).await.len(), 2, "both blobs exist");
    let back = large.get(("Hiring", "a1")).await.unwrap().unwrap();
    assert_eq!((&back.photo, &back.resume), (&ann.photo, &ann.resume));
}

/// Two entities with two blobs each and one orphan, swept together at a
/// cutoff between each entity's two blobs, then past all of them: only the
/// orphan goes.
async fn two_entities_with_two_blobs_each_are_swept_together(env: TestEnv) {
    let (large, blob_clock) = applicants(&env).await;
    let mut ann = applicant("a1", 1);
    let mut bob = applicant("b2", 2);
    large.insert(&mut ann).await.unwrap();
    large.insert(&mut bob).await.unwrap();
    // An orphan: the upload of c3 whose writer died before its entity write.
    let crashing = large.clone().on_step(|s| {
        if s == Step::BlobsUploaded {
            panic!("simulated crash at {s:?}");
        }
    });
    let died = tokio::spawn(async move {
        let _ = crashing.insert(&mut applicant("c3", 3)).await;
    })
    .await;
    assert!(died.unwrap_err().is_panic());
    let first = listed(large.container()).await;
    assert_eq!(first.len(), 6);
    let oldest_photo = first
        .iter()
        .filter(|(n, _)| n.ends_with("/Photo"))
        .map(|(_, t)| *t)
        .max()
        .unwrap();
    a_second_passes(&blob_clock).await;
    for (name, _) in first.iter().filter(|(n, _)| n.ends_with("/Resume")) {
        touch(large.container(), name).await;
    }

    // Every photo is a candidate, no resume is.
    let report = sweep_with_cutoff(&large, oldest_photo).await;
    assert_eq!(
        (
            report.listed,
            report.live,
            report.too_young,
            report.deleted.len()
        ),
        (6, 2, 3, 1),
        "{report:?}"
    );
    assert!(report.deleted[0].contains("/c3/"), "{report:?}");

    // Past every blob: the rest of the orphan goes, the four live blobs stay.
    let latest = listed(large.container())
        .await
        .into_iter()
        .map(|(_, t)| t)
        .max()
        .unwrap();
    let report = sweep_with_cutoff(&large, latest).await;
    assert_eq!(
        (report.listed, report.live, report.deleted.len()),
        (5, 4, 1),
        "{report:?}"
    );
    for want in [&ann, &bob] {
        let back = large.get(want.key()).await.unwrap().unwrap();
        assert_eq!((&back.photo, &back.resume), (&want.photo, &want.resume));
    }
    assert_eq!(listed(large.container()).await.len(), 4);
}

/// An entity whose blob list does not read is skipped and counted, never
/// taken as "points to nothing": its blobs stay.
async fn a_row_whose_blob_list_does_not_read_keeps_its_blobs(env: TestEnv) {
    let svc = env.tables().clone();
    let (large, _) = applicants(&env).await;
    let mut ann = applicant("a1", 1);
    large.insert(&mut ann).await.unwrap();
    let mut bob = applicant("b2", 2);
    large.insert(&mut bob).await.unwrap();
    let raw = svc
        .table::<DynamicEntity>(large.blob_prefix().trim_end_matches('/'))
        .unwrap();
    let mut row = raw.get(("Hiring", "a1")).await.unwrap().unwrap();
    row.set(BLOBS, "Photo:Jpeg,Resume:String");
    raw.update(&mut row, tablekit::UpdateMode::Merge, IfMatch::Any)
        .await
        .unwrap();

    let latest = listed(large.container())
        .await
        .into_iter()
        .map(|(_, t)| t)
        .max()
        .unwrap();
    let report = sweep_with_cutoff(&large, latest).await;
    assert_eq!(
        (
            report.listed,
            report.live,
            report.unreadable,
            report.deleted.len()
        ),
        (4, 2, 1, 0),
        "{report:?}"
    );
    assert_eq!(listed(large.container()).await.len(), 4);
}

tablekit::testing::conformance!(
    a_sweep_between_an_entitys_two_blobs_keeps_both,
    two_entities_with_two_blobs_each_are_swept_together,
    a_row_whose_blob_list_does_not_read_keeps_its_blobs,
);

tablekit::testing::conformance!(
    seed_photo_goes_to_a_blob_and_comes_back_whole,
    a_small_photo_stays_in_the_entity,
    always_in_blob_keeps_a_small_photo_in_a_blob,
    an_entity_over_1_mib_of_small_properties_moves_the_largest,
    #[runtime(flavor = "multi_thread")]
    replace_writes_a_new_blob_and_then_deletes_the_old,
    a_failed_insert_deletes_the_blob_it_uploaded,
    crash_after_the_upload_leaves_an_orphan_the_sweep_removes,
    crash_after_the_entity_delete_leaves_an_orphan_the_sweep_removes,
    crash_after_a_replace_leaves_the_old_blob_for_the_sweep,
    #[runtime(flavor = "multi_thread")]
    a_concurrent_replace_leaves_no_dangling_pointer_and_no_lost_blob,
    #[runtime(flavor = "multi_thread")]
    get_rereads_when_a_concurrent_replace_deleted_its_blob,
    a_write_past_its_deadline_deletes_its_blob_and_writes_nothing,
    the_sweep_waits_out_the_grace_on_the_tables_clock,
    delete_removes_the_entity_then_its_blob,
);

// ---- split properties: no blob ----

async fn split_round_trips_at_the_64_kib_boundary(env: TestEnv) {
    let svc = env.tables().clone();
    let table = fresh_table::<Employee>(&svc, "Split").await;
    let split = SplitTable::new(table.clone());
    // Exactly 64 KiB: one Binary property, as is.
    let mut don = don_hall(65_536);
    split.insert(&mut don).await.unwrap();
    let stored = row(&table, "Marketing", "00001").await.unwrap();
    assert_eq!(
        stored.get("Photo"),
        Some(&EdmValue::Binary(don.photo.clone()))
    );
    assert!(stored.get(SPLIT).is_none());
    same_employee(
        &split.get(("Marketing", "00001")).await.unwrap().unwrap(),
        &don,
    );

    // 64 KiB + 1: two parts, 65,536 bytes and 1.
    let mut bigger = don.clone();
    bigger.photo = photo(65_537, 3);
    split
        .replace(&mut bigger, don.etag.clone().unwrap())
        .await
        .unwrap();
    let stored = row(&table, "Marketing", "00001").await.unwrap();
    assert!(stored.get("Photo").is_none());
    assert_eq!(
        stored
            .get("Photo_0")
            .and_then(EdmValue::as_binary)
            .map(<[u8]>::len),
        Some(65_536)
    );
    assert_eq!(
        stored.get("Photo_1").and_then(EdmValue::as_binary),
        Some(&bigger.photo[65_536..])
    );
    assert_eq!(stored.get(SPLIT), Some(&EdmValue::from("Photo:Binary:2")));
    let back = split.get(("Marketing", "00001")).await.unwrap().unwrap();
    same_employee(&back, &bigger);
    assert_eq!(back.etag, bigger.etag);

    // Back to a small photo: the replace drops the parts.
    split.replace(&mut don, IfMatch::Any).await.unwrap();
    let stored = row(&table, "Marketing", "00001").await.unwrap();
    assert!(stored.get("Photo_0").is_none() && stored.get(SPLIT).is_none());
    assert!(split
        .delete(("Marketing", "00001"), IfMatch::Any)
        .await
        .unwrap());
    assert!(split.get(("Marketing", "00001")).await.unwrap().is_none());
}

async fn split_strings_round_trip(env: TestEnv) {
    let svc = env.tables().clone();
    let table = fresh_table::<DynamicEntity>(&svc, "Split").await;
    let split = SplitTable::new(table.clone());
    // 40,000 characters are 80,000 bytes as UTF-16 (over 64 KiB), 40,000 as
    // UTF-8 (one part); the emoji make the UTF-8 cross a part boundary.
    let notes = "n".repeat(40_000);
    let emoji = "😀".repeat(20_000);
    let mut e = DynamicEntity::new("Sales", "000223")
        .with("Notes", notes.clone())
        .with("Emoji", emoji.clone())
        .with("Short", "s");
    split.upsert(&mut e).await.unwrap();
    let stored = table.get(("Sales", "000223")).await.unwrap().unwrap();
    assert_eq!(
        stored.get(SPLIT),
        Some(&EdmValue::from("Notes:String:1,Emoji:String:2"))
    );
    let back = split.get(("Sales", "000223")).await.unwrap().unwrap();
    assert_eq!(back.get("Notes"), Some(&EdmValue::from(notes)));
    assert_eq!(back.get("Emoji"), Some(&EdmValue::from(emoji)));
    assert_eq!(back.get("Short"), Some(&EdmValue::from("s")));
}

/// The largest photo a split entity Marketing/00001 with only a photo holds:
/// 4 bytes and the keys as UTF-16 (18 + 10), the LargeSplit property
/// (8 + 20 + 4 + 30 = 62 for "Photo:Binary:16"), ten full parts
/// Photo_0..Photo_9 (8 + 14 + 4 + 65,536 each), five full parts
/// Photo_10..Photo_14 (8 + 16 + 4 + 65,536 each) and Photo_15 (8 + 16 + 4 + x):
/// 32 + 62 + 655,620 + 327,820 + 28 + x = 1,048,576 gives x = 65,014.
const LARGEST_SPLIT_PHOTO: usize = 15 * 65_536 + 65_014;

fn photo_only(len: usize) -> DynamicEntity {
    DynamicEntity::new("Marketing", "00001").with("Photo", photo(len, 1))
}

async fn split_takes_an_entity_of_exactly_1_mib(env: TestEnv) {
    let svc = env.tables().clone();
    let table = fresh_table::<DynamicEntity>(&svc, "Split").await;
    let split = SplitTable::new(table.clone());
    let mut e = photo_only(LARGEST_SPLIT_PHOTO);
    split.insert(&mut e).await.unwrap();
    let back = split.get(("Marketing", "00001")).await.unwrap().unwrap();
    assert_eq!(back.get("Photo"), e.get("Photo"));
}

#[test]
fn split_refuses_over_1_mib_before_any_request() {
    let split = SplitTable::new(offline_service().table::<DynamicEntity>("Split").unwrap());
    split
        .encode(&photo_only(LARGEST_SPLIT_PHOTO))
        .expect("exactly 1 MiB");
    let err = split
        .encode(&photo_only(LARGEST_SPLIT_PHOTO + 1))
        .unwrap_err();
    let message = assert_invalid(&err);
    assert!(message.contains("1048577 bytes"), "{message}");
    assert!(message.contains("LargeTable"), "{message}");
    // The insert is refused the same way: the offline client would fail with
    // a transport error had anything been sent.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut e = photo_only(LARGEST_SPLIT_PHOTO + 1);
    assert_invalid(&rt.block_on(split.insert(&mut e)).unwrap_err());
    // A part's name taken by another property, and the reserved name.
    let taken = photo_only(70_000).with("Photo_1", 1);
    assert!(assert_invalid(&split.encode(&taken).unwrap_err()).contains("Photo_1"));
    assert_invalid(&split.encode(&photo_only(1).with(SPLIT, "x")).unwrap_err());
}

#[test]
fn large_table_refuses_bad_input_before_any_request() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let conn = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;\
        AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;\
        BlobEndpoint=http://127.0.0.1:9/devstoreaccount1";
    let mut options = ClientOptions::default();
    options.http.retry = RetryPolicy::none();
    let blobs =
        BlobServiceClient::with_options(Account::from_connection_string(conn).unwrap(), options)
            .unwrap();
    let container = blobs.container("photos").unwrap();
    let table = offline_service()
        .table::<DynamicEntity>("Employees")
        .unwrap();
    let large = LargeTable::new(table.clone(), container.clone());

    let reserved = DynamicEntity::new("Sales", "1").with(BLOBS, "x");
    assert_invalid(
        &rt.block_on(large.insert(&mut reserved.clone()))
            .unwrap_err(),
    );
    let numbers = LargeTable::new(table.clone(), container.clone()).always_in_blob("Age");
    let mut e = DynamicEntity::new("Sales", "1").with("Age", 34);
    assert!(assert_invalid(&rt.block_on(numbers.insert(&mut e)).unwrap_err()).contains("Age"));
    let mut bad_key = DynamicEntity::new("Sales/EU", "1").with("Photo", vec![0u8; 70_000]);
    assert_invalid(&rt.block_on(large.insert(&mut bad_key)).unwrap_err());
    // 253 small Int32 properties cannot be helped by blobs.
    let mut wide = DynamicEntity::new("Sales", "1");
    for i in 0..253 {
        wide.set(format!("P{i}"), i);
    }
    assert_invalid(&rt.block_on(large.upsert(&mut wide)).unwrap_err());
    // And a bad key on delete.
    assert_invalid(
        &rt.block_on(large.delete(("a#b", "1"), IfMatch::Any))
            .unwrap_err(),
    );
}

tablekit::testing::conformance!(
    split_round_trips_at_the_64_kib_boundary,
    split_strings_round_trip,
    split_takes_an_entity_of_exactly_1_mib,
);
