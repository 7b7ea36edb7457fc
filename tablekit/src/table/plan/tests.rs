//! The fold against its contract: random writes of a few entities, applied
//! one by one to a model of the store, and folded into one transaction
//! applied at once to the same store. Either the fold refuses, or both end
//! the same (both refused, or the same entities).

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::fold::{fold, Refusal, Step};
use crate::edm::EdmValue;
use crate::entity::{ETag, EntityKey, IfMatch, UpdateMode};
use crate::table::TransactionOp;
use crate::DynamicEntity;

const KEYS: [&str; 3] = ["a", "b", "c"];
const COUNT: &str = "N";

/// An entity as stored: its properties and its version.
#[derive(Debug, Clone, PartialEq)]
struct Stored {
    props: BTreeMap<String, EdmValue>,
    version: u32,
}

type Store = BTreeMap<&'static str, Stored>;

fn etag(version: u32) -> ETag {
    ETag::new(format!("W/\"{version}\""))
}

fn entity(rk: &str, props: &BTreeMap<String, EdmValue>) -> DynamicEntity {
    let mut e = DynamicEntity::new("p", rk);
    for (n, v) in props {
        e.set(n.clone(), v.clone());
    }
    e
}

/// A condition as generated: any version, the stored one, or another.
#[derive(Debug, Clone, Copy)]
enum Cond {
    Any,
    Current,
    Stale,
}

#[derive(Debug, Clone)]
enum W {
    Insert(usize, BTreeMap<String, EdmValue>),
    Upsert(usize, BTreeMap<String, EdmValue>, UpdateMode),
    Update(usize, BTreeMap<String, EdmValue>, UpdateMode, Cond),
    Delete(usize, Cond),
    Add(usize, i64, BTreeMap<String, EdmValue>),
    /// A change worked out from the entity: `A` plus one (an absent entity
    /// is created with `A` = 0), or a delete once `A` reaches 2.
    Modify(usize),
}

/// The change of `W::Modify`, on the entity's properties.
fn change(now: Option<&BTreeMap<String, EdmValue>>) -> Option<BTreeMap<String, EdmValue>> {
    let Some(props) = now else {
        return Some([("A".to_string(), EdmValue::Int32(0))].into());
    };
    let a = match props.get("A") {
        Some(EdmValue::Int32(a)) => *a,
        _ => -1,
    };
    if a >= 2 {
        return None;
    }
    let mut p = props.clone();
    p.insert("A".into(), EdmValue::Int32(a + 1));
    Some(p)
}

fn change_entity(rk: &'static str) -> std::sync::Arc<super::fold::ModifyFn<'static>> {
    std::sync::Arc::new(move |now: Option<&DynamicEntity>| {
        let props = now.map(|e| {
            e.properties
                .iter()
                .map(|(n, v)| (n.to_string(), v.clone()))
                .collect::<BTreeMap<_, _>>()
        });
        Ok(change(props.as_ref()).map(|p| entity(rk, &p)))
    })
}

fn props() -> impl Strategy<Value = BTreeMap<String, EdmValue>> {
    proptest::collection::btree_map(
        prop_oneof![
            Just("A".to_string()),
            Just("B".to_string()),
            Just(COUNT.to_string())
        ],
        (0..3i32).prop_map(EdmValue::Int32),
        0..3,
    )
}

fn mode() -> impl Strategy<Value = UpdateMode> {
    prop_oneof![Just(UpdateMode::Merge), Just(UpdateMode::Replace)]
}

fn cond() -> impl Strategy<Value = Cond> {
    prop_oneof![
        Just(Cond::Any),
        Just(Cond::Current),
        Just(Cond::Current),
        Just(Cond::Stale)
    ]
}

fn write() -> impl Strategy<Value = W> {
    let k = 0..KEYS.len();
    prop_oneof![
        (k.clone(), props()).prop_map(|(k, p)| W::Insert(k, p)),
        (k.clone(), props(), mode()).prop_map(|(k, p, m)| W::Upsert(k, p, m)),
        (k.clone(), props(), mode(), cond()).prop_map(|(k, p, m, c)| W::Update(k, p, m, c)),
        (k.clone(), cond()).prop_map(|(k, c)| W::Delete(k, c)),
        (k.clone(), -2..=2i64, props()).prop_map(|(k, d, p)| W::Add(k, d, p)),
        (k.clone(), 1..=2i64).prop_map(|(k, d)| W::Add(k, d, BTreeMap::new())),
        k.prop_map(W::Modify),
    ]
}

fn store() -> impl Strategy<Value = Store> {
    proptest::collection::vec(proptest::option::of((props(), 1..4u32)), KEYS.len()).prop_map(|v| {
        KEYS.iter()
            .zip(v)
            .filter_map(|(k, s)| {
                s.map(|(mut props, version)| {
                    // Most stored entities have a count to add to.
                    if version != 3 {
                        props.entry(COUNT.into()).or_insert(EdmValue::Int32(5));
                    }
                    (*k, Stored { props, version })
                })
            })
            .collect()
    })
}

/// The condition `c` on key `k`, as the caller would write it from a read
/// of `before`.
fn if_match(before: &Store, k: usize, c: Cond) -> IfMatch {
    let version = before.get(KEYS[k]).map_or(1, |s| s.version);
    match c {
        Cond::Any => IfMatch::Any,
        Cond::Current => IfMatch::ETag(etag(version)),
        Cond::Stale => IfMatch::ETag(etag(version + 10)),
    }
}

fn condition_holds(before: &Store, key: &str, c: &IfMatch) -> bool {
    match c {
        IfMatch::Any => true,
        IfMatch::ETag(e) => before.get(key).is_some_and(|s| etag(s.version) == *e),
    }
}

/// The writes one by one, every condition checked against the store
/// before them (the version they were planned from): the contract.
fn one_by_one(
    before: &Store,
    writes: &[W],
) -> Option<BTreeMap<&'static str, BTreeMap<String, EdmValue>>> {
    let mut now: BTreeMap<&'static str, BTreeMap<String, EdmValue>> =
        before.iter().map(|(k, s)| (*k, s.props.clone())).collect();
    for w in writes {
        match w {
            W::Insert(k, p) => {
                if now.contains_key(KEYS[*k]) {
                    return None;
                }
                now.insert(KEYS[*k], p.clone());
            }
            W::Upsert(k, p, m) => match (now.get_mut(KEYS[*k]), m) {
                (Some(e), UpdateMode::Merge) => e.extend(p.clone()),
                _ => {
                    now.insert(KEYS[*k], p.clone());
                }
            },
            W::Update(k, p, m, c) => {
                if !condition_holds(before, KEYS[*k], &if_match(before, *k, *c)) {
                    return None;
                }
                match (now.get_mut(KEYS[*k]), m) {
                    (None, _) => return None,
                    (Some(e), UpdateMode::Merge) => e.extend(p.clone()),
                    (Some(e), _) => *e = p.clone(),
                }
            }
            W::Delete(k, c) => {
                if !condition_holds(before, KEYS[*k], &if_match(before, *k, *c)) {
                    return None;
                }
                now.remove(KEYS[*k])?;
            }
            W::Modify(k) => match change(now.get(KEYS[*k])) {
                Some(p) => {
                    now.insert(KEYS[*k], p);
                }
                None => {
                    now.remove(KEYS[*k]);
                }
            },
            W::Add(k, d, created) => match now.get_mut(KEYS[*k]) {
                Some(e) => match e.get(COUNT) {
                    Some(EdmValue::Int32(n)) => {
                        let v = i32::try_from(i64::from(*n) + d).ok()?;
                        e.insert(COUNT.into(), EdmValue::Int32(v));
                    }
                    _ => return None,
                },
                None => {
                    let mut e = created.clone();
                    e.insert(COUNT.into(), EdmValue::Int32((*d).max(0) as i32));
                    now.insert(KEYS[*k], e);
                }
            },
        }
    }
    Some(now)
}

/// The steps the plan folds: the writes with the reads their additions make.
fn steps(before: &Store, writes: &[W]) -> Vec<Step<'static>> {
    writes
        .iter()
        .map(|w| match w {
            W::Insert(k, p) => Step::Op(TransactionOp::Insert(entity(KEYS[*k], p))),
            W::Upsert(k, p, m) => Step::Op(TransactionOp::Upsert(entity(KEYS[*k], p), *m)),
            W::Update(k, p, m, c) => Step::Op(TransactionOp::Update(
                entity(KEYS[*k], p),
                *m,
                if_match(before, *k, *c),
            )),
            W::Delete(k, c) => Step::Op(TransactionOp::Delete(
                EntityKey::new("p", KEYS[*k]),
                if_match(before, *k, *c),
            )),
            W::Modify(k) => Step::Modify {
                key: EntityKey::new("p", KEYS[*k]),
                f: change_entity(KEYS[*k]),
                read: before.get(KEYS[*k]).map(|s| {
                    let mut e = entity(KEYS[*k], &s.props);
                    e.etag = Some(etag(s.version));
                    e
                }),
            },
            W::Add(k, d, created) => Step::Add {
                key: EntityKey::new("p", KEYS[*k]),
                property: COUNT.into(),
                delta: *d,
                created: entity(KEYS[*k], created),
                read: before.get(KEYS[*k]).map(|s| {
                    let mut e = entity(KEYS[*k], &s.props);
                    e.etag = Some(etag(s.version));
                    e
                }),
            },
        })
        .collect()
}

/// One transaction of `ops` (one per entity) applied to `before`: all or
/// nothing, as the service does.
fn at_once(
    before: &Store,
    ops: &[TransactionOp],
) -> Option<BTreeMap<&'static str, BTreeMap<String, EdmValue>>> {
    let mut now: BTreeMap<&'static str, BTreeMap<String, EdmValue>> =
        before.iter().map(|(k, s)| (*k, s.props.clone())).collect();
    let key_of = |rk: &str| *KEYS.iter().find(|k| **k == rk).unwrap();
    let props_of = |e: &DynamicEntity| -> BTreeMap<String, EdmValue> {
        e.properties
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect()
    };
    for op in ops {
        let key = op.key();
        let k = key_of(&key.row_key);
        match op {
            TransactionOp::Insert(e) => {
                if now.contains_key(k) {
                    return None;
                }
                now.insert(k, props_of(e));
            }
            TransactionOp::Upsert(e, m) => match (now.get_mut(k), m) {
                (Some(s), UpdateMode::Merge) => s.extend(props_of(e)),
                _ => {
                    now.insert(k, props_of(e));
                }
            },
            TransactionOp::Update(e, m, c) => {
                if !condition_holds(before, k, c) {
                    return None;
                }
                match (now.get_mut(k), m) {
                    (None, _) => return None,
                    (Some(s), UpdateMode::Merge) => s.extend(props_of(e)),
                    (Some(s), _) => *s = props_of(e),
                }
            }
            TransactionOp::Delete(_, c) => {
                if !condition_holds(before, k, c) {
                    return None;
                }
                now.remove(k)?;
            }
        }
    }
    Some(now)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Folded or refused, never different.
    #[test]
    fn a_folded_transaction_ends_as_the_writes_one_by_one(
        before in store(),
        writes in proptest::collection::vec(write(), 1..7),
    ) {
        let expected = one_by_one(&before, &writes);
        match fold(steps(&before, &writes)) {
            Ok(ops) => {
                let keys: Vec<_> = ops.iter().map(TransactionOp::key).collect();
                let mut unique = keys.clone();
                unique.dedup();
                prop_assert_eq!(keys.len(), unique.len(), "one operation per entity");
                prop_assert_eq!(at_once(&before, &ops), expected, "{:?}", ops);
            }
            Err(Refusal::Compose(_) | Refusal::Decode(_) | Refusal::Modify(_)) => {}
        }
    }
}

/// The fold refuses only what no transaction does exactly: over many
/// random plans, most of those that succeed one by one are folded.
#[test]
fn most_plans_that_succeed_one_by_one_are_folded() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut succeed, mut folded) = (0, 0);
    for _ in 0..4000 {
        let before = store().new_tree(&mut runner).unwrap().current();
        let writes = proptest::collection::vec(write(), 1..4)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        if one_by_one(&before, &writes).is_some() {
            succeed += 1;
            if fold(steps(&before, &writes)).is_ok() {
                folded += 1;
            }
        }
    }
    assert!(succeed > 500, "{succeed}");
    assert!(folded * 10 >= succeed * 7, "{folded} of {succeed} folded");
}

fn add(k: &str, delta: i64, read: Option<i32>) -> Step<'static> {
    Step::Add {
        key: EntityKey::new("p", k),
        property: COUNT.into(),
        delta,
        created: DynamicEntity::new("p", k),
        read: read.map(|n| {
            let mut e = DynamicEntity::new("p", k).with(COUNT, n);
            e.etag = Some(etag(1));
            e
        }),
    }
}

/// Issue 36's first defect: three counts planned from one read add three.
#[test]
fn additions_planned_from_one_read_add_up() {
    let ops = fold(vec![
        add("d", 1, Some(7)),
        add("d", 1, Some(7)),
        add("d", 1, Some(7)),
    ])
    .unwrap();
    assert_eq!(ops.len(), 1);
    let TransactionOp::Update(e, UpdateMode::Merge, IfMatch::ETag(t)) = &ops[0] else {
        panic!("{ops:?}")
    };
    assert_eq!((e.get(COUNT), t), (Some(&EdmValue::Int32(10)), &etag(1)));
    // From an absent entity: one insert of the sum.
    let ops = fold(vec![
        add("d", 1, None),
        add("d", 1, None),
        add("d", -1, None),
    ])
    .unwrap();
    assert!(
        matches!(&ops[0], TransactionOp::Insert(e) if e.get(COUNT) == Some(&EdmValue::Int32(1)))
    );
    // Two counted deletes: minus two.
    let ops = fold(vec![add("d", -1, Some(3)), add("d", -1, Some(3))]).unwrap();
    assert!(
        matches!(&ops[0], TransactionOp::Update(e, ..) if e.get(COUNT) == Some(&EdmValue::Int32(1)))
    );
}

/// Two changes of one entity worked out from one read compose one after the
/// other: the second sees the first's result (none is lost).
#[test]
fn two_changes_of_one_entity_compose_in_order() {
    let read = {
        let mut e = DynamicEntity::new("p", "a").with("A", 0);
        e.etag = Some(etag(4));
        e
    };
    let m = || Step::Modify {
        key: EntityKey::new("p", "a"),
        f: change_entity("a"),
        read: Some(read.clone()),
    };
    let ops = fold(vec![m(), m()]).unwrap();
    let TransactionOp::Update(e, UpdateMode::Replace, IfMatch::ETag(t)) = &ops[0] else {
        panic!("{ops:?}")
    };
    assert_eq!((e.get("A"), t), (Some(&EdmValue::Int32(2)), &etag(4)));
    // A third reaches the delete.
    let ops = fold(vec![m(), m(), m()]).unwrap();
    assert!(matches!(&ops[0], TransactionOp::Delete(_, IfMatch::ETag(t)) if *t == etag(4)));
}

/// Two equal writes are two writes: never one.
#[test]
fn equal_writes_are_not_merged() {
    let insert = || {
        Step::Op(TransactionOp::Insert(
            DynamicEntity::new("p", "a").with("A", 1),
        ))
    };
    assert!(
        matches!(fold(vec![insert(), insert()]), Err(Refusal::Compose(why)) if why.contains("409"))
    );
    let delete = || {
        Step::Op(TransactionOp::Delete(
            EntityKey::new("p", "a"),
            IfMatch::Any,
        ))
    };
    assert!(
        matches!(fold(vec![delete(), delete()]), Err(Refusal::Compose(why)) if why.contains("deleted twice"))
    );
}
