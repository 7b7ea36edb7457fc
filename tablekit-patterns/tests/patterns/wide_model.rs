//! A model-based test of wide entities: random inserts, replaces, merges and
//! deletes of two logical entities of one partition, with sizes that cross
//! the one-part boundary both ways (1 to 3 parts) and writes under current
//! and stale ETags, against a plain `BTreeMap` model. After every step each
//! logical entity reads back exactly as the model holds it, and the
//! partition holds exactly the parts it needs (no part left behind).

// The model reads clearer as "is it there? then what the store must say".
#![allow(clippy::map_entry)]

use crate::common;

use std::collections::BTreeMap;

use proptest::prelude::*;
use tablekit::{DynamicEntity, ETag, EdmValue, IfMatch, TableServiceClient, UpdateMode};
use tablekit_patterns::wide::{WideTable, PARTS};

const KEYS: [&str; 2] = ["2014", "2015"];

#[derive(Debug, Clone)]
enum Op {
    /// Insert with properties `Day000..Day{n}` set to `v`.
    Insert {
        key: usize,
        n: usize,
        v: i32,
    },
    /// Replace with `n` properties, under the current ETag or a stale one.
    Replace {
        key: usize,
        n: usize,
        v: i32,
        stale: bool,
    },
    /// Merge properties `from..from+n` set to `v`.
    Merge {
        key: usize,
        from: usize,
        n: usize,
        v: i32,
    },
    Delete {
        key: usize,
        stale: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let n = prop_oneof![Just(3usize), Just(250), Just(260), Just(520), 1..600usize];
    prop_oneof![
        (0..2usize, n.clone(), 0..5i32).prop_map(|(key, n, v)| Op::Insert { key, n, v }),
        (0..2usize, n.clone(), 0..5i32, proptest::bool::weighted(0.2))
            .prop_map(|(key, n, v, stale)| Op::Replace { key, n, v, stale }),
        (0..2usize, 0..600usize, n, 0..5i32).prop_map(|(key, from, n, v)| Op::Merge {
            key,
            from,
            n: n.min(300),
            v
        }),
        (0..2usize, proptest::bool::weighted(0.2))
            .prop_map(|(key, stale)| Op::Delete { key, stale }),
    ]
}

fn entity(key: usize, from: usize, n: usize, v: i32) -> DynamicEntity {
    let mut e = DynamicEntity::new("000123", KEYS[key]);
    for d in from..from + n {
        e.set(format!("Day{d:03}"), v);
    }
    e
}

type Props = BTreeMap<String, i32>;

fn props(e: &DynamicEntity) -> Props {
    e.properties
        .iter()
        .map(|(k, v)| match v {
            EdmValue::Int32(i) => (k.to_string(), *i),
            other => panic!("{k}: {other:?}"),
        })
        .collect()
}

async fn case(svc: TableServiceClient, ops: Vec<Op>) {
    let table = common::fresh_table::<DynamicEntity>(&svc, "WideModel").await;
    let wide = WideTable::new(table.clone());
    let mut model: BTreeMap<usize, Props> = BTreeMap::new();
    // The ETag of each entity as last written, and one from before that.
    let mut etags: BTreeMap<usize, (ETag, Option<ETag>)> = BTreeMap::new();
    for op in &ops {
        match *op {
            Op::Insert { key, n, v } => {
                let mut e = entity(key, 0, n, v);
                let result = wide.insert(&mut e).await;
                if model.contains_key(&key) {
                    assert!(result.unwrap_err().is_conflict(), "{op:?}");
                } else {
                    result.unwrap();
                    model.insert(key, props(&e));
                    etags.insert(key, (e.etag.unwrap(), None));
                }
            }
            Op::Replace { key, n, v, stale } => {
                let mut e = entity(key, 0, n, v);
                let condition = match (etags.get(&key), stale) {
                    (Some((_, Some(old))), true) => IfMatch::ETag(old.clone()),
                    (Some((current, _)), _) => IfMatch::ETag(current.clone()),
                    (None, _) => IfMatch::Any,
                };
                let stale_write = stale && matches!(etags.get(&key), Some((_, Some(_))));
                let result = wide.update(&mut e, UpdateMode::Replace, condition).await;
                if !model.contains_key(&key) {
                    assert!(result.unwrap_err().is_not_found(), "{op:?}");
                } else if stale_write {
                    assert!(result.unwrap_err().is_precondition_failed(), "{op:?}");
                } else {
                    result.unwrap();
                    model.insert(key, props(&e));
                    let old = etags.remove(&key).map(|(c, _)| c);
                    etags.insert(key, (e.etag.unwrap(), old));
                }
            }
            Op::Merge { key, from, n, v } => {
                let mut e = entity(key, from, n, v);
                let result = wide.update(&mut e, UpdateMode::Merge, IfMatch::Any).await;
                match model.get_mut(&key) {
                    None => assert!(result.unwrap_err().is_not_found(), "{op:?}"),
                    Some(stored) => {
                        let mut merged = stored.clone();
                        merged.extend(props(&e));
                        match result {
                            Ok(()) => {
                                *stored = merged;
                                let old = etags.remove(&key).map(|(c, _)| c);
                                etags.insert(key, (e.etag.unwrap(), old));
                            }
                            // More than 100 parts or 4 MiB cannot happen
                            // here; a merged entity over the limits would be
                            // refused before any request.
                            Err(err) => panic!("{op:?}: {err:?}"),
                        }
                    }
                }
            }
            Op::Delete { key, stale } => {
                let condition = match (etags.get(&key), stale) {
                    (Some((_, Some(old))), true) => IfMatch::ETag(old.clone()),
                    (Some((current, _)), _) => IfMatch::ETag(current.clone()),
                    (None, _) => IfMatch::Any,
                };
                let stale_write = stale && matches!(etags.get(&key), Some((_, Some(_))));
                let result = wide
                    .delete_if_exists(("000123", KEYS[key]), condition)
                    .await;
                if !model.contains_key(&key) {
                    assert!(!result.unwrap(), "{op:?}");
                } else if stale_write {
                    assert!(result.unwrap_err().is_precondition_failed(), "{op:?}");
                } else {
                    assert!(result.unwrap(), "{op:?}");
                    model.remove(&key);
                    etags.remove(&key);
                }
            }
        }
        // Every entity reads back as the model holds it.
        for (key, rk) in KEYS.iter().enumerate() {
            let stored = wide.get(("000123", *rk)).await.unwrap();
            assert_eq!(
                stored.as_ref().map(props).as_ref(),
                model.get(&key),
                "{rk} after {op:?}"
            );
        }
        // Exactly the parts each needs: part 0's count says how many.
        let rows = common::rows(&table, "000123").await;
        let mut expected_parts = 0;
        for (key, rk) in KEYS.iter().enumerate() {
            if !model.contains_key(&key) {
                continue;
            }
            let part0 = rows
                .iter()
                .find(|r| r.row_key == format!("{rk}_0"))
                .expect("part 0");
            let Some(EdmValue::Int32(n)) = part0.get(PARTS) else {
                panic!("no part count")
            };
            expected_parts += *n as usize;
        }
        assert_eq!(
            rows.len(),
            expected_parts,
            "no part left behind after {op:?}"
        );
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn embedded(ops in proptest::collection::vec(op(), 1..16)) {
        runtime().block_on(case(TableServiceClient::embedded(), ops));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn azurite(ops in proptest::collection::vec(op(), 1..10)) {
        if let Some(svc) = common::service() {
            runtime().block_on(case(svc, ops));
        }
    }
}
