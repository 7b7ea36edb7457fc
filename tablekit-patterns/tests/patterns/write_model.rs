//! The write model (issue 36): writes as values bound to their table,
//! composed exactly. The defects that composition had (two planned counts of
//! one entity merged into one; a plan writing into another table), the ETags
//! of composed writes, the unit of work, and a model-based test: random
//! plain writes and pattern plans over a few shared entities of two tables
//! (with the same PartitionKey), grouped at random into plans, against the
//! same writes applied one by one to a plain model. Every group either ends
//! as the model says or is refused before any write.

use crate::common;
use tablekit::testing::TestEnv;

use std::collections::BTreeMap;

use proptest::prelude::*;
use tablekit::table::{Plan, UnitOfWork};
use tablekit::{
    DynamicEntity, ETag, EdmValue, IfMatch, TableClient, TableEntity, TableServiceClient,
    UpdateMode,
};
use tablekit_patterns::index::{Index, IndexedTable};
use tablekit_patterns::summary::CountedPartition;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    email: String,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

fn employee(id: u32) -> Employee {
    Employee {
        department: "Sales".into(),
        employee_id: id,
        email: format!("e{id}@contoso.com"),
        etag: None,
    }
}

/// Three employees planned from one read of their department add three to
/// its count; two counted deletes in one plan take two away. (Before the
/// write model, the three equal "count = 1" writes were merged into one:
/// the count ended at 1.)
async fn three_counted_inserts_in_one_plan_count_three(env: TestEnv) {
    let svc = env.tables().clone();
    let table = common::fresh_table::<Employee>(&svc, "Counted3").await;
    let counted = CountedPartition::new(table.clone(), "Department", "EmployeeCount");
    let (mut a, mut b, mut c) = (employee(1), employee(2), employee(3));
    let applied = counted
        .plan_insert(&mut a)
        .unwrap()
        .and(counted.plan_insert(&mut b).unwrap())
        .unwrap()
        .and(counted.plan_insert(&mut c).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(applied.len(), 4, "three employees and one department");
    assert_eq!(counted.count("Sales").await.unwrap(), 3);
    // Every entity passed by &mut has the ETag its write gave it.
    for e in [&a, &b, &c] {
        let stored = table.get(e.key()).await.unwrap().unwrap();
        assert_eq!(e.etag, stored.etag, "{}", e.employee_id);
    }
    // Once the department exists: two more from one read, then two deletes.
    counted
        .plan_insert(&employee(4))
        .unwrap()
        .and(counted.plan_insert(&employee(5)).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(counted.count("Sales").await.unwrap(), 5);
    counted
        .plan_delete(a.key(), a.etag.clone().unwrap())
        .unwrap()
        .and(counted.plan_delete(b.key(), IfMatch::Any).unwrap())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(counted.count("Sales").await.unwrap(), 3);
    assert_eq!(
        common::rows(&table.with_type::<DynamicEntity>(), "Sales")
            .await
            .len(),
        4,
        "three employees and the department"
    );
}

/// An index over Employees joined with a count over Contractors, of the same
/// PartitionKey: refused before any request, naming both tables. (Before the
/// write model, the contractor and its count were written into Employees.)
async fn a_plan_never_writes_into_another_table(env: TestEnv) {
    let svc = env.tables().clone();
    let employees = common::fresh_table::<Employee>(&svc, "TwoTablesE").await;
    let contractors = common::fresh_table::<Employee>(&svc, "TwoTablesC").await;
    let by_email = Index::new("email", "email_", |e: &Employee| e.email.clone());
    let indexed = IndexedTable::new(employees.clone())
        .unwrap()
        .with_index(&by_email)
        .unwrap();
    let counted = CountedPartition::new(contractors.clone(), "Department", "EmployeeCount");
    let (emp, con) = (employee(1), employee(2));
    let err = indexed
        .plan_insert(&emp)
        .unwrap()
        .and(counted.plan_insert(&con).unwrap())
        .unwrap_err();
    let why = common::assert_invalid(&err);
    assert!(
        why.contains(employees.name()) && why.contains(contractors.name()),
        "{why}"
    );
    assert!(why.contains("a transaction spans one table"), "{why}");
    // Nothing was written, anywhere.
    for t in [&employees, &contractors] {
        assert!(common::rows(&t.with_type::<DynamicEntity>(), "Sales")
            .await
            .is_empty());
    }
    // Each plan alone writes its own table.
    indexed.plan_insert(&emp).unwrap().await.unwrap();
    counted.plan_insert(&con).unwrap().await.unwrap();
    assert!(employees.get(con.key()).await.unwrap().is_none());
    assert_eq!(counted.count("Sales").await.unwrap(), 1);
    assert!(contractors.get(con.key()).await.unwrap().is_some());
}

/// The unit of work: writes of two tables and three partitions saved with
/// one call, each partition's in transactions of at most 100, in order; two
/// writes of one entity go to successive transactions; a refused
/// transaction leaves its partition's later ones unsent and the others
/// written; every write has its outcome.
async fn a_unit_of_work_saves_many_partitions_in_order(env: TestEnv) {
    let svc = env.tables().clone();
    let orders = common::fresh_table::<DynamicEntity>(&svc, "UowOrders").await;
    let lines = common::fresh_table::<DynamicEntity>(&svc, "UowLines").await;
    let mut rows: Vec<DynamicEntity> = (0..130)
        .map(|i| DynamicEntity::new("alice", format!("{i:03}")).with("N", i))
        .collect();
    let mut uow = UnitOfWork::new();
    for row in &mut rows {
        uow.add(orders.plan_insert(row).unwrap());
    }
    // The same PartitionKey in another table: its own transactions.
    for i in 0..3 {
        uow.add(
            lines
                .plan_insert(&DynamicEntity::new("alice", format!("{i:03}")))
                .unwrap(),
        );
    }
    // An insert then a merge of one entity: two transactions, in order.
    let first = uow.add(
        orders
            .plan_insert(&DynamicEntity::new("bob", "x").with("A", 1))
            .unwrap(),
    );
    let second = uow.add(
        orders
            .plan_update(
                &DynamicEntity::new("bob", "x").with("B", 2),
                UpdateMode::Merge,
                IfMatch::Any,
            )
            .unwrap(),
    );
    // A partition whose first transaction is refused (a taken key): its
    // later write is not sent.
    orders
        .insert(&DynamicEntity::new("carol", "taken"))
        .await
        .unwrap();
    let refused = uow.add(
        orders
            .plan_insert(&DynamicEntity::new("carol", "taken"))
            .unwrap(),
    );
    let unsent = uow.add(
        orders
            .plan_delete(("carol", "taken"), IfMatch::Any)
            .unwrap(),
    );
    let saved = uow.save().await;
    assert_eq!(saved.len(), 130 + 3 + 4);
    // alice: 100 + 30 (Orders) + 3 (Lines); bob: 2; carol: 1 sent.
    assert_eq!(saved.transactions(), 2 + 1 + 2 + 1);
    assert!(rows.iter().all(|r| r.etag.is_some()), "ETags given back");
    assert!(saved.get(first).unwrap().is_ok() && saved.get(second).unwrap().is_ok());
    assert!(saved.get(refused).unwrap().unwrap_err().is_conflict());
    let not_sent = saved.get(unsent).unwrap().unwrap_err().to_string();
    assert!(not_sent.contains("not sent"), "{not_sent}");
    assert_eq!(
        saved.failures().map(|(i, _)| i).collect::<Vec<_>>(),
        [refused, unsent]
    );
    assert_eq!(common::rows(&orders, "alice").await.len(), 130);
    assert_eq!(common::rows(&lines, "alice").await.len(), 3);
    let bob = orders.get(("bob", "x")).await.unwrap().unwrap();
    assert_eq!(
        (bob.get("A"), bob.get("B")),
        (Some(&1.into()), Some(&2.into()))
    );
    assert!(
        orders.get(("carol", "taken")).await.unwrap().is_some(),
        "not deleted"
    );
}

tablekit::testing::conformance!(
    three_counted_inserts_in_one_plan_count_three,
    a_plan_never_writes_into_another_table,
    a_unit_of_work_saves_many_partitions_in_order,
);

// ---- The model-based test -------------------------------------------------

const KEYS: [&str; 3] = ["a", "b", "S"];
const COUNT: &str = "N";

/// A condition as generated: any version, the stored one, or an old one.
#[derive(Debug, Clone, Copy)]
enum Cond {
    Any,
    Current,
    Stale,
}

/// Where a write goes: table 0 or 1, partition "p" or "q".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct At {
    table: usize,
    q: bool,
}

type Props = BTreeMap<String, i32>;

#[derive(Debug, Clone)]
enum W {
    Insert(At, usize, Props),
    Upsert(At, usize, Props, UpdateMode),
    Update(At, usize, Props, UpdateMode, Cond),
    Delete(At, usize, Cond),
    /// `CountedPartition::plan_count`: the count of `S` plus `delta`.
    Count(At, i32),
    /// `CountedPartition::plan_insert`: an entity and the count plus one.
    CountedInsert(At, usize),
}

impl W {
    fn at(&self) -> At {
        match self {
            W::Insert(at, ..)
            | W::Upsert(at, ..)
            | W::Update(at, ..)
            | W::Delete(at, ..)
            | W::Count(at, ..)
            | W::CountedInsert(at, ..) => *at,
        }
    }
}

fn at() -> impl Strategy<Value = At> {
    // Mostly one table and partition, so that most groups can be sent.
    prop_oneof![
        14 => Just(At { table: 0, q: false }),
        1 => Just(At { table: 1, q: false }),
        1 => Just(At { table: 0, q: true }),
    ]
}

fn props() -> impl Strategy<Value = Props> {
    proptest::collection::btree_map(
        prop_oneof![Just("A".to_string()), Just(COUNT.to_string())],
        0..3i32,
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
        1 => (at(), k.clone(), props()).prop_map(|(a, k, p)| W::Insert(a, k, p)),
        1 => (at(), k.clone(), props(), mode()).prop_map(|(a, k, p, m)| W::Upsert(a, k, p, m)),
        1 => (at(), k.clone(), props(), mode(), cond())
            .prop_map(|(a, k, p, m, c)| W::Update(a, k, p, m, c)),
        1 => (at(), k.clone(), cond()).prop_map(|(a, k, c)| W::Delete(a, k, c)),
        2 => (at(), -1..=2i32).prop_map(|(a, d)| W::Count(a, d)),
        2 => (at(), 0..2usize).prop_map(|(a, k)| W::CountedInsert(a, k)),
    ]
}

/// The plain model: the properties of every entity, by (table, partition, key).
type Model = BTreeMap<(usize, bool, &'static str), Props>;

fn pk(q: bool) -> &'static str {
    if q {
        "q"
    } else {
        "p"
    }
}

/// The group's writes one by one, conditions checked against the store
/// before the group (the reads its plans were made from): `None` if the
/// service must refuse it.
fn one_by_one(before: &Model, writes: &[W]) -> Option<Model> {
    let mut now = before.clone();
    let holds = |at: At, k: usize, c: Cond| match c {
        Cond::Any => true,
        Cond::Current => before.contains_key(&(at.table, at.q, KEYS[k])),
        Cond::Stale => false,
    };
    let count = |now: &mut Model, at: At, d: i32| -> Option<()> {
        match now.get_mut(&(at.table, at.q, "S")) {
            Some(s) => {
                let n = s.get(COUNT)?;
                s.insert(COUNT.into(), n + d);
            }
            None => {
                now.insert(
                    (at.table, at.q, "S"),
                    [(COUNT.to_string(), d.max(0))].into(),
                );
            }
        }
        Some(())
    };
    for w in writes {
        match w {
            W::Insert(at, k, p) => {
                let key = (at.table, at.q, KEYS[*k]);
                if now.contains_key(&key) {
                    return None;
                }
                now.insert(key, p.clone());
            }
            W::Upsert(at, k, p, m) => {
                let key = (at.table, at.q, KEYS[*k]);
                match (now.get_mut(&key), m) {
                    (Some(e), UpdateMode::Merge) => e.extend(p.clone()),
                    _ => {
                        now.insert(key, p.clone());
                    }
                }
            }
            W::Update(at, k, p, m, c) => {
                if !holds(*at, *k, *c) {
                    return None;
                }
                match (now.get_mut(&(at.table, at.q, KEYS[*k])), m) {
                    (None, _) => return None,
                    (Some(e), UpdateMode::Merge) => e.extend(p.clone()),
                    (Some(e), _) => *e = p.clone(),
                }
            }
            W::Delete(at, k, c) => {
                if !holds(*at, *k, *c) {
                    return None;
                }
                now.remove(&(at.table, at.q, KEYS[*k]))?;
            }
            W::Count(at, d) => count(&mut now, *at, *d)?,
            W::CountedInsert(at, k) => {
                let key = (at.table, at.q, KEYS[*k]);
                if now.contains_key(&key) {
                    return None;
                }
                now.insert(key, Props::new());
                count(&mut now, *at, 1)?;
            }
        }
    }
    Some(now)
}

struct World {
    tables: [TableClient<DynamicEntity>; 2],
    counted: [CountedPartition<DynamicEntity>; 2],
}

fn entity(at: At, k: usize, p: &Props) -> DynamicEntity {
    let mut e = DynamicEntity::new(pk(at.q), KEYS[k]);
    for (n, v) in p {
        e.set(n.clone(), *v);
    }
    e
}

/// The plan of one write, with conditions from `etags` (read before the group).
fn plan_of<'w>(
    world: &'w World,
    etags: &BTreeMap<(usize, bool, &'static str), ETag>,
    w: &W,
) -> tablekit::Result<Plan<'w>> {
    let t = |at: At| &world.tables[at.table];
    let cond = |at: At, k: usize, c: Cond| match c {
        Cond::Any => IfMatch::Any,
        Cond::Current => etags.get(&(at.table, at.q, KEYS[k])).cloned().map_or(
            IfMatch::ETag(ETag::new(
                "W/\"datetime'2000-01-01T00%3A00%3A00.0000000Z'\"",
            )),
            IfMatch::ETag,
        ),
        Cond::Stale => IfMatch::ETag(ETag::new(
            "W/\"datetime'2000-01-01T00%3A00%3A00.0000000Z'\"",
        )),
    };
    match w {
        W::Insert(at, k, p) => t(*at).plan_insert(&entity(*at, *k, p)),
        W::Upsert(at, k, p, m) => t(*at).plan_upsert(&entity(*at, *k, p), *m),
        W::Update(at, k, p, m, c) => t(*at).plan_update(&entity(*at, *k, p), *m, cond(*at, *k, *c)),
        W::Delete(at, k, c) => t(*at).plan_delete((pk(at.q), KEYS[*k]), cond(*at, *k, *c)),
        W::Count(at, d) => world.counted[at.table].plan_count(pk(at.q), *d),
        W::CountedInsert(at, k) => {
            world.counted[at.table].plan_insert(&entity(*at, *k, &Props::new()))
        }
    }
}

async fn stored(world: &World) -> (Model, BTreeMap<(usize, bool, &'static str), ETag>) {
    let mut model = Model::new();
    let mut etags = BTreeMap::new();
    for (i, t) in world.tables.iter().enumerate() {
        for q in [false, true] {
            for e in common::rows(t, pk(q)).await {
                let k = *KEYS.iter().find(|k| **k == e.row_key).unwrap();
                let props = e
                    .properties
                    .iter()
                    .map(|(n, v)| match v {
                        EdmValue::Int32(n2) => (n.to_string(), *n2),
                        other => panic!("{n}: {other:?}"),
                    })
                    .collect();
                etags.insert((i, q, k), e.etag.clone().unwrap());
                model.insert((i, q, k), props);
            }
        }
    }
    (model, etags)
}

/// Counts of what the groups did, to see that the test checks something.
#[derive(Debug, Default)]
struct Seen {
    applied: usize,
    refused_by_service: usize,
    /// Writes of two tables or partitions: refused by `and`.
    refused_at_join: usize,
    /// Refused when the plan was sent, before its transaction.
    refused_at_fold: usize,
    /// Of those, groups that one by one would have succeeded: what no one
    /// operation per entity can do (an insert then a delete).
    refused_at_fold_though_possible: usize,
}

async fn case(svc: TableServiceClient, groups: Vec<Vec<W>>) -> Seen {
    let a = common::fresh_table::<DynamicEntity>(&svc, "ModelA").await;
    let b = common::fresh_table::<DynamicEntity>(&svc, "ModelB").await;
    let world = World {
        counted: [
            CountedPartition::new(a.clone(), "S", COUNT),
            CountedPartition::new(b.clone(), "S", COUNT),
        ],
        tables: [a, b],
    };
    let mut seen = Seen::default();
    let mut model = Model::new();
    for group in &groups {
        let (now, etags) = stored(&world).await;
        assert_eq!(now, model, "the store is the model before {group:?}");
        let one_table = group.iter().all(|w| w.at() == group[0].at());
        let mut plan = Ok(Plan::new());
        for w in group {
            plan = plan.and_then(|p| p.and(plan_of(&world, &etags, w)?));
        }
        let plan = match plan {
            Err(e) => {
                assert!(!one_table, "{group:?}: {e}");
                assert!(e.is_invalid_input(), "{group:?}: {e:?}");
                seen.refused_at_join += 1;
                continue;
            }
            Ok(plan) => plan,
        };
        assert!(one_table, "{group:?} joined across tables or partitions");
        let expected = one_by_one(&model, group);
        match plan.await {
            Ok(_) => {
                let Some(expected) = expected else {
                    panic!("{group:?} was applied where one by one it fails, on {model:?}");
                };
                model = expected;
                seen.applied += 1;
            }
            Err(e) if e.is_invalid_input() => {
                seen.refused_at_fold += 1;
                if expected.is_some() {
                    seen.refused_at_fold_though_possible += 1;
                }
            }
            // A decode error: an addition to a count the group's replace
            // left out, found from the read (the model fails it too).
            Err(e) if matches!(e.kind(), tablekit::error::ErrorKind::Decode(_)) => {
                assert!(expected.is_none(), "{group:?}: {e}");
                seen.refused_at_fold += 1;
            }
            Err(e) => {
                assert!(expected.is_none(), "{group:?} refused by the service ({e}) where one by one it succeeds, on {model:?}");
                seen.refused_by_service += 1;
            }
        }
    }
    let (now, _) = stored(&world).await;
    assert_eq!(now, model, "the store is the model at the end");
    seen
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn groups(max: usize) -> impl Strategy<Value = Vec<Vec<W>>> {
    proptest::collection::vec(proptest::collection::vec(write(), 1..5), 1..max)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_groups_end_as_one_by_one_embedded(groups in groups(12)) {
        runtime().block_on(case(TableServiceClient::embedded(), groups));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 30, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_groups_end_as_one_by_one_embedded_file(groups in groups(12)) {
        let env = TestEnv::file();
        runtime().block_on(case(env.tables().clone(), groups));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_groups_end_as_one_by_one_azurite(groups in groups(10)) {
        if let Some(svc) = common::service() {
            runtime().block_on(case(svc, groups));
        }
    }
}

/// The random groups check something: many are applied, some refused by
/// the service as one by one they would be, some refused before any write.
#[test]
fn the_random_groups_apply_and_refuse_both() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut total = Seen::default();
    for _ in 0..100 {
        let g = groups(12).new_tree(&mut runner).unwrap().current();
        let seen = runtime().block_on(case(TableServiceClient::embedded(), g));
        total.applied += seen.applied;
        total.refused_by_service += seen.refused_by_service;
        total.refused_at_join += seen.refused_at_join;
        total.refused_at_fold += seen.refused_at_fold;
        total.refused_at_fold_though_possible += seen.refused_at_fold_though_possible;
    }
    eprintln!("{total:?}");
    assert!(total.applied > 100, "{total:?}");
    assert!(total.refused_by_service > 50, "{total:?}");
    assert!(total.refused_at_join > 50, "{total:?}");
    assert!(total.refused_at_fold > 20, "{total:?}");
    // The fold refuses little that one by one would do.
    assert!(
        total.refused_at_fold_though_possible * 5 < total.applied,
        "{total:?}"
    );
}
