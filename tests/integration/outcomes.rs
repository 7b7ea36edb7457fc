//! Every write's outcome known, under injected faults.
//!
//! A few hundred writes (inserts, upserts, conditional updates, deletes and
//! transactions) go through the fault proxy of `common::fault_proxy`, each on
//! keys of its own, set up and checked afterwards directly on the emulator.
//! Because every unit writes its keys once, the table tells exactly whether
//! the write landed, and each reported outcome is held against it:
//!
//! - a success must have landed (no acknowledged write lost);
//! - a plain failure must not have landed;
//! - a write that landed and still failed must be flagged ambiguous;
//! - a transaction lands whole or not at all.
//!
//! `TABLEKIT_SOAK_OPS` (default 300) and `TABLEKIT_SOAK_SEED` (default 1) set
//! the size and the seed, `TABLEKIT_SOAK_AMBIGUOUS=report` turns read-back
//! resolution off; the tally is printed on stderr.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use tablekit::{
    options::RetryPolicy, table::AmbiguousWrites, DynamicEntity, EdmValue, IfMatch, TableClient,
    TableServiceClient, UpdateMode,
};

use crate::common::{
    self,
    fault_proxy::{FaultProxy, Faults},
};

/// What one unit of the soak does, on keys of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Insert,
    UpsertReplace,
    UpsertMerge,
    UpdateWithEtag,
    DeleteWithEtag,
    DeleteAny,
    Transaction,
}

const KINDS: [Kind; 7] = [
    Kind::Insert,
    Kind::UpsertReplace,
    Kind::UpsertMerge,
    Kind::UpdateWithEtag,
    Kind::DeleteWithEtag,
    Kind::DeleteAny,
    Kind::Transaction,
];

/// How a unit's write was reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Reported {
    Ok,
    Ambiguous,
    Failed,
}

/// Whether the unit's write is in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Landed {
    Yes,
    No,
    /// Part of a transaction is there and part is not: never allowed.
    Partly,
}

fn marked(pk: &str, rk: &str, marker: &str) -> DynamicEntity {
    DynamicEntity::new(pk, rk)
        .with("Marker", marker)
        .with("Count", EdmValue::Int64(9_000_000_001))
        .with("Text", "caf\u{e9} \u{1F600}")
}

fn marker_of(e: &DynamicEntity) -> Option<&str> {
    match e.properties.get("Marker") {
        Some(EdmValue::String(s)) => Some(s),
        _ => None,
    }
}

/// Sets up the unit's keys directly (no faults) and returns the ETag the
/// conditional writes use.
async fn set_up(
    direct: &TableClient<DynamicEntity>,
    kind: Kind,
    pk: &str,
) -> Option<tablekit::ETag> {
    let old = |rk: &str| marked(pk, rk, "old").with("OnlyOld", true);
    match kind {
        Kind::Insert => None,
        Kind::UpsertReplace
        | Kind::UpsertMerge
        | Kind::UpdateWithEtag
        | Kind::DeleteWithEtag
        | Kind::DeleteAny => Some(direct.insert(&old("k")).await.unwrap().etag().clone()),
        Kind::Transaction => {
            direct.insert(&old("c")).await.unwrap();
            direct.insert(&old("d")).await.unwrap();
            None
        }
    }
}

/// The unit's write, through the faulty client.
async fn write(
    faulty: &TableClient<DynamicEntity>,
    kind: Kind,
    pk: &str,
    etag: Option<tablekit::ETag>,
) -> tablekit::Result<()> {
    let new = |rk: &str| marked(pk, rk, "new");
    match kind {
        Kind::Insert => faulty.insert(&new("k")).await.map(drop),
        Kind::UpsertReplace => faulty
            .upsert(&new("k"), UpdateMode::Replace)
            .await
            .map(drop),
        Kind::UpsertMerge => faulty.upsert(&new("k"), UpdateMode::Merge).await.map(drop),
        Kind::UpdateWithEtag => faulty
            .update(&new("k"), UpdateMode::Replace, etag.unwrap())
            .await
            .map(drop),
        Kind::DeleteWithEtag => faulty.delete((pk, "k"), etag.unwrap()).await,
        Kind::DeleteAny => faulty.delete((pk, "k"), IfMatch::Any).await,
        Kind::Transaction => {
            let mut tx = faulty.transaction();
            tx.insert(&new("a"))?;
            tx.insert(&new("b"))?;
            tx.update(&new("c"), UpdateMode::Merge, IfMatch::Any)?;
            tx.delete((pk, "d"), IfMatch::Any)?;
            tx.send().await.map(drop)
        }
    }
}

/// Whether the unit's write is in the table, read directly.
async fn landed(direct: &TableClient<DynamicEntity>, kind: Kind, pk: &str) -> Landed {
    let read = |rk: &'static str| {
        let direct = direct.clone();
        let pk = pk.to_owned();
        async move { direct.get((pk.as_str(), rk)).await.unwrap() }
    };
    let is_new = |e: &Option<DynamicEntity>| e.as_ref().and_then(marker_of) == Some("new");
    let yes = |b: bool| if b { Landed::Yes } else { Landed::No };
    match kind {
        Kind::Insert | Kind::UpsertReplace | Kind::UpdateWithEtag => {
            let k = read("k").await;
            if let Some(e) = &k {
                // A replace leaves no trace of the old entity.
                assert!(
                    marker_of(e) != Some("new") || e.properties.get("OnlyOld").is_none(),
                    "{kind:?} {pk}: a replace kept an old property"
                );
            }
            yes(is_new(&k))
        }
        Kind::UpsertMerge => {
            let k = read("k").await;
            yes(is_new(&k) && k.unwrap().properties.get("OnlyOld").is_some())
        }
        Kind::DeleteWithEtag | Kind::DeleteAny => yes(read("k").await.is_none()),
        Kind::Transaction => {
            let effects = [
                is_new(&read("a").await),
                is_new(&read("b").await),
                is_new(&read("c").await),
                read("d").await.is_none(),
            ];
            if effects.iter().all(|e| *e) {
                Landed::Yes
            } else if effects.iter().any(|e| *e) {
                Landed::Partly
            } else {
                Landed::No
            }
        }
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test]
async fn no_write_is_lost_or_misreported_under_injected_faults() {
    let Some(conn) = common::connection_string() else {
        return;
    };
    let ops = env_or("TABLEKIT_SOAK_OPS", 300) as usize;
    let seed = env_or("TABLEKIT_SOAK_SEED", 1);
    let direct_svc = common::tables(&conn).unwrap();
    let direct = common::fresh_table::<DynamicEntity>(&direct_svc, "Soak").await;

    // Delays longer than the per-attempt timeout: the server applies the
    // request after the client gave up on it.
    let proxy = FaultProxy::start(&conn, Faults::standard(Duration::from_millis(400)), seed).await;
    let mut options = common::client_options();
    options.http.retry = RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(50),
    };
    options.http.timeout = Duration::from_millis(300);
    let account = tablekit::Account::from_connection_string(proxy.connection_string()).unwrap();
    // TABLEKIT_SOAK_AMBIGUOUS=report shows what read-back resolution saves.
    let policy = match std::env::var("TABLEKIT_SOAK_AMBIGUOUS").as_deref() {
        Ok("report") => AmbiguousWrites::Report,
        _ => AmbiguousWrites::ReadBack,
    };
    let faulty = TableServiceClient::with_options(account, options)
        .unwrap()
        .table::<DynamicEntity>(direct.name())
        .unwrap()
        .with_ambiguous_writes(policy);

    let mut results: Vec<Outcome> = Vec::new();
    let units: Vec<(Kind, String)> = (0..ops)
        .map(|i| (KINDS[i % KINDS.len()], format!("u{i:05}")))
        .collect();
    for chunk in units.chunks(50) {
        let setups = chunk.iter().map(|(kind, pk)| {
            let direct = direct.clone();
            async move { set_up(&direct, *kind, pk).await }
        });
        let etags: Vec<_> = futures::future::join_all(setups).await;
        let mut runs = Vec::new();
        for ((kind, pk), etag) in chunk.iter().zip(etags) {
            runs.push((kind, pk, etag));
        }
        let outcomes = tokio::time::timeout(
            Duration::from_secs(120),
            futures::stream::iter(runs.into_iter().map(|(kind, pk, etag)| {
                let faulty = faulty.clone();
                async move { (*kind, pk.clone(), write(&faulty, *kind, pk, etag).await) }
            }))
            .buffer_unordered(8)
            .collect::<Vec<_>>(),
        )
        .await
        .expect("no write hangs");
        for (kind, pk, result) in outcomes {
            let reported = match &result {
                Ok(()) => Reported::Ok,
                Err(e) if e.is_ambiguous() => Reported::Ambiguous,
                Err(_) => Reported::Failed,
            };
            results.push((kind, pk, reported, result.err().map(|e| e.to_string())));
        }
    }

    let mut tally: HashMap<(Reported, Landed), usize> = HashMap::new();
    let mut problems = Vec::new();
    for (kind, pk, reported, error) in &results {
        let landed = landed(&direct, *kind, pk).await;
        *tally.entry((*reported, landed)).or_default() += 1;
        let wrong = match (reported, landed) {
            (_, Landed::Partly) => Some("a transaction landed in part"),
            (Reported::Ok, Landed::No) => Some("an acknowledged write was lost"),
            (Reported::Failed, Landed::Yes) => {
                Some("a write that landed was reported as a plain failure")
            }
            _ => None,
        };
        if let Some(wrong) = wrong {
            problems.push(format!("{wrong}: {kind:?} {pk} ({error:?})"));
        }
    }
    let fates = proxy.fates();
    eprintln!(
        "soak ({policy:?}): {} writes, seed {seed}, {} requests through the proxy; \
         ok+landed {}, ok+not landed {}, ambiguous+landed {}, ambiguous+not landed {}, \
         failed+landed {}, failed+not landed {}",
        results.len(),
        fates.len(),
        tally.get(&(Reported::Ok, Landed::Yes)).unwrap_or(&0),
        tally.get(&(Reported::Ok, Landed::No)).unwrap_or(&0),
        tally.get(&(Reported::Ambiguous, Landed::Yes)).unwrap_or(&0),
        tally.get(&(Reported::Ambiguous, Landed::No)).unwrap_or(&0),
        tally.get(&(Reported::Failed, Landed::Yes)).unwrap_or(&0),
        tally.get(&(Reported::Failed, Landed::No)).unwrap_or(&0),
    );
    assert!(problems.is_empty(), "{problems:#?}");
    // The faults were really dealt.
    let faulted = fates
        .iter()
        .filter(|f| **f != common::fault_proxy::Fate::Forwarded)
        .count();
    assert!(
        faulted * 20 > fates.len(),
        "only {faulted} of {} requests faulted",
        fates.len()
    );
    common::drop_table(&direct).await;
}

type Outcome = (Kind, String, Reported, Option<String>);
