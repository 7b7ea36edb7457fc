//! A model-based property test of `LargeTable`: random inserts, replaces,
//! upserts and deletes of three keys of an entity type with two large
//! properties (a Binary photo and a String resume, sized around the 64 KiB a
//! property may hold, so each is sometimes inline and sometimes in a blob),
//! interleaved with sweeps at random clock moves, writes that crash between
//! their steps, and a blob upload that lands a second after its sibling.
//! After every step each key reads back as a `BTreeMap` model says (so no
//! blob a live entity points to was ever deleted); after a final sweep past
//! the grace period, the container holds exactly the blobs the live entities
//! point to.
//!
//! 64 cases on the embedded store, 8 on Azurite.

use crate::common;
use crate::common::OnStep as _;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tablekit::{
    clock::ManualClock, BlobServiceClient, ContainerClient, DynamicEntity, ETag, IfMatch,
    TableEntity, TableServiceClient,
};
use tablekit_patterns::large::{LargeTable, Step};

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{pk}", row_key = "{rk}")]
struct Doc {
    pk: String,
    rk: String,
    seed: u8,
    photo: Vec<u8>,
    resume: String,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

const KEYS: [&str; 3] = ["k0", "k1", "k2"];
/// Binary: at, under and over the 64 KiB a property holds.
const PHOTO_BYTES: [usize; 4] = [1_000, 65_536, 65_537, 70_000];
/// String, counted as UTF-16 (2 bytes a character here): 32,768 characters
/// are exactly 64 KiB.
const RESUME_CHARS: [usize; 4] = [1_000, 32_768, 32_769, 36_000];
const GRACE: Duration = Duration::from_secs(10);

/// What the model keeps of an entity: enough to rebuild it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Value {
    seed: u8,
    photo: usize,
    resume: usize,
}

impl Value {
    fn doc(&self, key: usize) -> Doc {
        Doc {
            pk: "M".into(),
            rk: KEYS[key].into(),
            seed: self.seed,
            photo: (0..PHOTO_BYTES[self.photo])
                .map(|i| (i as u8).wrapping_mul(7) ^ self.seed)
                .collect(),
            resume: char::from(b'a' + self.seed % 26)
                .to_string()
                .repeat(RESUME_CHARS[self.resume]),
            etag: None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Insert,
    Replace,
    Upsert,
}

#[derive(Debug, Clone)]
enum Op {
    Write {
        key: usize,
        mode: Mode,
        value: Value,
        /// The step at which the writer dies, if it gets that far.
        crash: Option<Step>,
    },
    Delete {
        key: usize,
        crash: bool,
    },
    /// The entity's last blob is uploaded again `gap` seconds later: what
    /// the service's Last-Modified shows when an insert's two uploads
    /// straddle a second.
    SlowUpload {
        key: usize,
        /// Seconds between the two uploads (embedded store only).
        gap: u64,
    },
    Advance(u64),
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let value = (any::<u8>(), 0..PHOTO_BYTES.len(), 0..RESUME_CHARS.len()).prop_map(
        |(seed, photo, resume)| Value {
            seed,
            photo,
            resume,
        },
    );
    let mode = prop_oneof![Just(Mode::Insert), Just(Mode::Replace), Just(Mode::Upsert)];
    let crash = prop_oneof![
        6 => Just(None),
        1 => Just(Some(Step::BlobsUploaded)),
        1 => Just(Some(Step::EntityWritten)),
    ];
    prop_oneof![
        6 => (key.clone(), mode, value, crash).prop_map(|(key, mode, value, crash)| Op::Write {
            key,
            mode,
            value,
            crash
        }),
        2 => (key.clone(), prop::bool::weighted(0.3)).prop_map(|(key, crash)| Op::Delete { key, crash }),
        2 => (key.clone(), 1u64..=8).prop_map(|(key, gap)| Op::SlowUpload { key, gap }),
        3 => (0u64..=4).prop_map(Op::Advance),
        3 => Just(Op::Sweep),
    ]
}

struct Env {
    tables: TableServiceClient,
    blobs: BlobServiceClient,
    /// The clock of the table and of the embedded Blob service.
    clock: ManualClock,
    embedded: bool,
}

impl Env {
    fn embedded() -> Env {
        let clock = ManualClock::starting_now();
        Env {
            tables: TableServiceClient::embedded(),
            blobs: BlobServiceClient::embedded_with_clock(clock.clone()),
            clock,
            embedded: true,
        }
    }

    fn azurite() -> Option<Env> {
        let s = common::azurite_services()?;
        Some(Env {
            tables: s.tables,
            blobs: s.blobs,
            clock: ManualClock::starting_now(),
            embedded: false,
        })
    }
}

async fn blob_names(container: &ContainerClient) -> BTreeSet<String> {
    container
        .list_blobs()
        .fetch_all()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name().to_owned())
        .collect()
}

/// Runs `write` on a table whose `step` callback panics at `crash`, in a
/// task of its own as a process dying there; returns whether it died.
async fn crashing<F, Fut>(large: &LargeTable<Doc>, crash: Step, write: F) -> bool
where
    F: FnOnce(LargeTable<Doc>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let dying = large.clone().on_step(move |s| {
        if s == crash {
            panic!("simulated crash at {s:?}");
        }
    });
    match tokio::spawn(write(dying)).await {
        Ok(()) => false,
        Err(e) => {
            let payload = e.into_panic();
            let text = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            // Any other panic is a failed assertion inside the write.
            if !text.starts_with("simulated crash") {
                std::panic::resume_unwind(payload);
            }
            true
        }
    }
}

async fn check_reads(large: &LargeTable<Doc>, model: &BTreeMap<usize, Value>, after: &Op) {
    for (key, name) in KEYS.iter().enumerate() {
        let got = large
            .get(("M", *name))
            .await
            .unwrap_or_else(|e| panic!("get {name} after {after:?}: {e} (a live blob deleted?)"));
        match (got, model.get(&key)) {
            (None, None) => {}
            (Some(mut got), Some(want)) => {
                got.etag = None;
                assert!(got == want.doc(key), "{name} after {after:?} differs");
            }
            (got, want) => panic!(
                "{name} after {after:?}: stored {:?}, model {want:?}",
                got.map(|d| d.seed)
            ),
        }
    }
}

async fn run_case(env: Env, ops: Vec<Op>) {
    let table = common::fresh_table::<Doc>(&env.tables, "LargeModel").await;
    let container = env
        .blobs
        .container(&common::unique_name("large-model-"))
        .unwrap();
    container.create_container().await.unwrap();
    let large = LargeTable::new(table.clone(), container.clone())
        .grace(GRACE)
        .unwrap()
        .with_clock(env.clock.clone());
    let mut model: BTreeMap<usize, Value> = BTreeMap::new();

    for op in &ops {
        match op {
            Op::Write {
                key,
                mode,
                value,
                crash,
            } => {
                let exists = model.contains_key(key);
                let succeeds = match mode {
                    Mode::Insert => !exists,
                    Mode::Replace => exists,
                    Mode::Upsert => true,
                };
                let mut doc = value.doc(*key);
                let mode = *mode;
                let write = move |l: LargeTable<Doc>| async move {
                    let r = match mode {
                        Mode::Insert => l.insert(&mut doc).await,
                        Mode::Replace => l.replace(&mut doc, IfMatch::Any).await,
                        Mode::Upsert => l.upsert(&mut doc).await,
                    };
                    if let Err(e) = r {
                        assert!(!succeeds, "{mode:?} failed: {e}");
                        assert!(e.is_conflict() || e.is_not_found(), "{mode:?}: {e}");
                    } else {
                        assert!(succeeds, "{mode:?} succeeded against the model");
                    }
                };
                match crash {
                    None => {
                        write(large.clone()).await;
                        if succeeds {
                            model.insert(*key, *value);
                        }
                    }
                    Some(step) => {
                        let died = crashing(&large, *step, write).await;
                        // Reached: past EntityWritten the entity is written.
                        if died && *step == Step::EntityWritten {
                            assert!(succeeds);
                            model.insert(*key, *value);
                        }
                        // A write that succeeds passes both points.
                        assert!(died || !succeeds, "{op:?} did not reach its crash point");
                    }
                }
            }
            Op::Delete { key, crash } => {
                let exists = model.contains_key(key);
                let name = KEYS[*key];
                if *crash {
                    let died = crashing(&large, Step::EntityDeleted, move |l| async move {
                        assert!(!l.delete(("M", name), IfMatch::Any).await.unwrap());
                    })
                    .await;
                    assert_eq!(died, exists);
                } else {
                    let existed = large.delete(("M", name), IfMatch::Any).await.unwrap();
                    assert_eq!(existed, exists);
                }
                model.remove(key);
            }
            Op::SlowUpload { key, gap } => {
                let got = large
                    .get_without_blobs::<DynamicEntity>(("M", KEYS[*key]))
                    .await
                    .unwrap();
                if let Some(r) = got.and_then(|g| g.blobs.last().cloned()) {
                    if env.embedded {
                        env.clock.advance(Duration::from_secs(*gap));
                    }
                    let blob = large.blob(&r).unwrap();
                    let bytes = blob.download().bytes().await.unwrap();
                    blob.upload(bytes).await.unwrap();
                }
            }
            Op::Advance(secs) => env.clock.advance(Duration::from_secs(*secs)),
            Op::Sweep => {
                let report = large.sweep_orphans().await.unwrap();
                assert_eq!(report.unreadable, 0, "{report:?}");
            }
        }
        check_reads(&large, &model, op).await;
    }

    // A last sweep past the grace of every blob (on Azurite, Last-Modified
    // is real time): only the live entities' blobs are left.
    let later = env.clock.now().max(chrono::Utc::now())
        + chrono::Duration::from_std(GRACE + Duration::from_secs(2)).unwrap();
    let report = large
        .clone()
        .with_clock(ManualClock::new(later))
        .sweep_orphans()
        .await
        .unwrap();
    assert_eq!(report.unreadable, 0, "{report:?}");
    let mut live = BTreeSet::new();
    for key in model.keys() {
        let row = large
            .get_without_blobs::<DynamicEntity>(("M", KEYS[*key]))
            .await
            .unwrap()
            .unwrap();
        live.extend(row.blobs.into_iter().map(|r| r.blob().to_owned()));
    }
    assert_eq!(
        blob_names(&container).await,
        live,
        "orphans left: {report:?}"
    );
    let rows: BTreeSet<String> = common::rows(&table, "M")
        .await
        .into_iter()
        .map(|r| r.row_key)
        .collect();
    let want: BTreeSet<String> = model.keys().map(|k| KEYS[*k].to_owned()).collect();
    assert_eq!(rows, want);
    check_reads(&large, &model, &Op::Sweep).await;
}

/// Keeps the simulated crashes out of the output; other panics as usual.
fn quiet_simulated_crashes() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let text = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or_default();
            if !text.starts_with("simulated crash") {
                default(info);
            }
        }));
    });
}

fn run(cases: u32, make: impl Fn() -> Env) {
    quiet_simulated_crashes();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 1..32), |ops| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(run_case(make(), ops));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn large_table_matches_the_model_embedded() {
    run(64, Env::embedded);
}

#[test]
fn large_table_matches_the_model_azurite() {
    if Env::azurite().is_none() {
        return;
    }
    run(8, || Env::azurite().unwrap());
}
