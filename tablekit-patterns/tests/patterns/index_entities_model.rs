//! Index entities, options 2 and 3 (§3.4), against a model: random sequences
//! of inserts, value changes and deletes over five employees and three shared
//! last names (so lists are shared and, with small index entities, split),
//! while a second client writes the same employees at a random step inside
//! a write (the `before_write` hook: after the write read the index
//! entities, before it changes one).
//!
//! After every step the stored employees must be those of a plain
//! `BTreeMap` model, for one of the two orders the racing pair of writes can
//! have taken, with the same successes and failures; `find(value)` must
//! return exactly the model's employees with that value and the listed keys
//! must include every one of them (option 2: exactly them).

use crate::common;
use crate::common::BeforeWrite as _;

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tablekit::TableServiceClient;
use tablekit::{DynamicEntity, ETag, EdmValue, EntityKey, IfMatch, TableClient, TableEntity};
use tablekit_patterns::index_entity::{IndexEntities, SeparateIndexEntities, ENTITY_IDS};
use tablekit_patterns::range::KeyRange;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    last_name: String,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

const VALUES: [&str; 3] = ["Jones", "Smith", "Brown"];
const IDS: u32 = 5;

/// Option 2 keeps every employee in Sales (its index is per partition);
/// option 3 spreads them over two departments.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Option_ {
    Two,
    Three,
}

impl Option_ {
    fn department(self, id: u32) -> &'static str {
        match self {
            Option_::Two => "Sales",
            Option_::Three if id.is_multiple_of(2) => "Marketing",
            Option_::Three => "Sales",
        }
    }

    fn departments(self) -> &'static [&'static str] {
        match self {
            Option_::Two => &["Sales"],
            Option_::Three => &["Sales", "Marketing"],
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert {
        id: u32,
        value: usize,
    },
    /// Changes the last name; `any`: under `IfMatch::Any` instead of the
    /// ETag the writer last saw.
    Update {
        id: u32,
        value: usize,
        any: bool,
    },
    Delete {
        id: u32,
        any: bool,
    },
}

impl Op {
    fn id(&self) -> u32 {
        match self {
            Op::Insert { id, .. } | Op::Update { id, .. } | Op::Delete { id, .. } => *id,
        }
    }
}

/// One write of the first client and, maybe, the second client's write run
/// from inside it at the `n`-th call of its hook (after it, if the write
/// makes fewer calls).
#[derive(Debug, Clone)]
struct Step {
    op: Op,
    inject: Option<(usize, Op)>,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1..=IDS, 0..VALUES.len()).prop_map(|(id, value)| Op::Insert { id, value }),
        3 => (1..=IDS, 0..VALUES.len(), any::<bool>())
            .prop_map(|(id, value, any)| Op::Update { id, value, any }),
        2 => (1..=IDS, any::<bool>()).prop_map(|(id, any)| Op::Delete { id, any }),
    ]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (op(), proptest::option::of((1..=3usize, op())))
        .prop_map(|(op, inject)| Step { op, inject });
    proptest::collection::vec(step, 1..16)
}

/// Either option behind one interface.
#[derive(Clone)]
enum Index {
    Two(IndexEntities<Employee>),
    Three(SeparateIndexEntities<Employee>),
}

impl Index {
    async fn insert(&self, e: &mut Employee) -> tablekit::Result<()> {
        match self {
            Index::Two(i) => i.insert(e).await,
            Index::Three(i) => i.insert(e).await,
        }
    }

    async fn update(
        &self,
        current: &Employee,
        new: &mut Employee,
        if_match: IfMatch,
    ) -> tablekit::Result<()> {
        match self {
            Index::Two(i) => i.update(current, new, if_match).await,
            Index::Three(i) => i.update(current, new, if_match).await,
        }
    }

    async fn delete(&self, current: &Employee, if_match: IfMatch) -> tablekit::Result<()> {
        match self {
            Index::Two(i) => i.delete(current, if_match).await,
            Index::Three(i) => i.delete(current, if_match).await,
        }
    }

    /// The keys of the employees `find` returns, sorted.
    async fn found(&self, value: &str) -> Vec<EntityKey> {
        let found = match self {
            Index::Two(i) => i.find("Sales", value).await.unwrap(),
            Index::Three(i) => i.find(value).await.unwrap().entities,
        };
        for e in &found {
            assert_eq!(e.last_name, value, "find({value:?}) returned {e:?}");
        }
        let mut keys: Vec<EntityKey> = found.iter().map(TableEntity::key).collect();
        keys.sort();
        keys
    }

    /// The keys the index entities list, sorted, with repeats.
    async fn listed(&self, value: &str) -> Vec<EntityKey> {
        let mut keys: Vec<EntityKey> = match self {
            Index::Two(i) => i
                .ids("Sales", value)
                .await
                .unwrap()
                .into_iter()
                .map(|rk| EntityKey::new("Sales", rk))
                .collect(),
            Index::Three(i) => i.keys(value).await.unwrap(),
        };
        keys.sort();
        keys
    }
}

/// The stored state of one employee in the model: its last name and ETag.
type Model = BTreeMap<u32, (String, ETag)>;

/// What a write did, as its caller saw it: the employee's new state (`None`
/// after a delete), or the kind of failure.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Wrote(Option<(String, ETag)>),
    /// 404, 409 or 412: the condition of the write did not hold.
    Refused,
}

/// A write as the model sees it: its op and the ETag it was conditional on.
#[derive(Debug, Clone)]
struct Sent {
    op: Op,
    etag: Option<ETag>,
}

impl Sent {
    /// Whether the write's condition holds in `model`.
    fn holds(&self, model: &Model) -> bool {
        let stored = model.get(&self.op.id());
        match (&self.op, &self.etag) {
            (Op::Insert { .. }, _) => stored.is_none(),
            (_, Some(etag)) => stored.is_some_and(|(_, e)| e == etag),
            (_, None) => stored.is_some(),
        }
    }

    /// Applies the write to `model` if the outcome agrees with it there.
    fn apply(&self, model: &mut Model, outcome: &Outcome) -> bool {
        match (self.holds(model), outcome) {
            (false, Outcome::Refused) => true,
            (true, Outcome::Wrote(state)) => {
                match state {
                    Some(state) => model.insert(self.op.id(), state.clone()),
                    None => model.remove(&self.op.id()),
                };
                true
            }
            _ => false,
        }
    }
}

/// Sends `op` through `index`, as a writer whose last read of the employee
/// was `seen` (its last name and ETag; `stale`: the ETag of a deleted
/// version, for a conditional write of an employee the writer saw deleted).
async fn send(
    index: &Index,
    option: Option_,
    op: &Op,
    seen: Option<&(String, ETag)>,
    stale: Option<&ETag>,
) -> (Sent, Outcome) {
    let id = op.id();
    let employee = |value: &str, etag: Option<ETag>| Employee {
        department: option.department(id).into(),
        employee_id: id,
        last_name: value.into(),
        etag,
    };
    let current = match seen {
        Some((value, etag)) => employee(value, Some(etag.clone())),
        None => employee(VALUES[0], None),
    };
    let condition = |any: bool| match (any, &current.etag, stale) {
        (false, Some(etag), _) | (false, None, Some(etag)) => Some(etag.clone()),
        _ => None,
    };
    let (etag, result) = match op {
        Op::Insert { value, .. } => {
            let mut e = employee(VALUES[*value], None);
            let r = index.insert(&mut e).await;
            (
                None,
                r.map(|()| Some((e.last_name, e.etag.expect("insert sets the ETag")))),
            )
        }
        Op::Update { value, any, .. } => {
            let etag = condition(*any);
            let if_match = etag.clone().map_or(IfMatch::Any, IfMatch::ETag);
            let mut new = employee(VALUES[*value], current.etag.clone());
            let r = index.update(&current, &mut new, if_match).await;
            let state = r.map(|()| {
                let etag = new.etag.expect("update sets the ETag");
                assert_ne!(
                    Some(&etag),
                    current.etag.as_ref(),
                    "update sets the new ETag"
                );
                Some((new.last_name, etag))
            });
            (etag, state)
        }
        Op::Delete { any, .. } => {
            let etag = condition(*any);
            let if_match = etag.clone().map_or(IfMatch::Any, IfMatch::ETag);
            (etag, index.delete(&current, if_match).await.map(|()| None))
        }
    };
    let outcome = match result {
        Ok(state) => Outcome::Wrote(state),
        Err(e) if e.is_not_found() || e.is_conflict() || e.is_precondition_failed() => {
            Outcome::Refused
        }
        Err(e) => panic!("{op:?}: {e:?}"),
    };
    (
        Sent {
            op: op.clone(),
            etag,
        },
        outcome,
    )
}

/// The second client: a thread of its own with its own runtime, which the
/// first client's hook asks to run a write and waits for.
struct Other {
    ask: mpsc::Sender<Op>,
    answer: mpsc::Receiver<(Sent, Outcome)>,
}

fn spawn_other(index: Index, table: TableClient<Employee>, option: Option_) -> Other {
    let (ask, asked) = mpsc::channel::<Op>();
    let (answer_tx, answer) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        while let Ok(op) = asked.recv() {
            let done = rt.block_on(async {
                // The other writer reads the employee, then writes.
                let key = (option.department(op.id()), format!("{:06}", op.id()));
                let seen = table
                    .get(key)
                    .await
                    .unwrap()
                    .map(|e| (e.last_name, e.etag.unwrap()));
                send(&index, option, &op, seen.as_ref(), None).await
            });
            if answer_tx.send(done).is_err() {
                break;
            }
        }
    });
    Other { ask, answer }
}

/// What the hook does during the current step.
#[derive(Default)]
struct Plan {
    calls: usize,
    fire_at: Option<usize>,
    op: Option<Op>,
    done: Option<(Sent, Outcome)>,
}

/// Every stored employee, read directly.
async fn stored(table: &TableClient<Employee>, option: Option_) -> Model {
    let mut model = Model::new();
    for dept in option.departments() {
        let rows = table
            .query()
            .filter_by(KeyRange::inclusive("000000", "999999").filter(dept, ""))
            .fetch_all()
            .await
            .unwrap();
        for e in rows {
            model.insert(e.employee_id, (e.last_name, e.etag.unwrap()));
        }
    }
    model
}

async fn run(svc: TableServiceClient, option: Option_, steps: Vec<Step>) {
    let table = common::fresh_table::<Employee>(&svc, "IdxModel").await;
    let second = common::second_service(&svc);
    let other_table = second.table::<Employee>(table.name()).unwrap();
    let plan = Arc::new(Mutex::new(Plan::default()));
    let mut index_table = None;
    let (index, other_index) = match option {
        Option_::Two => {
            // Three 6-digit RowKeys fill an index entity of 20 code units.
            let make = |t: TableClient<Employee>| {
                IndexEntities::new(t, "lastname_", |e: &Employee| e.last_name.clone())
                    .with_chunk_capacity(20)
                    .unwrap()
            };
            (
                Index::Two(make(table.clone())),
                Index::Two(make(other_table.clone())),
            )
        }
        Option_::Three => {
            let ix = common::fresh_table::<DynamicEntity>(&svc, "IdxModelIx").await;
            index_table = Some(ix.clone());
            // Two entries ("Sales\t000001", "Marketing\t000002") fill 30 units.
            let make = |t: TableClient<Employee>, ix: TableClient<DynamicEntity>| {
                SeparateIndexEntities::new(t, ix, "lastname", "", |e: &Employee| {
                    e.last_name.clone()
                })
                .with_chunk_capacity(30)
                .unwrap()
            };
            (
                Index::Three(make(table.clone(), ix.clone())),
                Index::Three(make(
                    other_table.clone(),
                    second.table::<DynamicEntity>(ix.name()).unwrap(),
                )),
            )
        }
    };
    let other = Arc::new(Mutex::new(spawn_other(other_index, other_table, option)));
    let hooked = {
        let (plan, other) = (plan.clone(), other.clone());
        let hook = move |_attempt: usize| {
            let op = {
                let mut p = plan.lock().unwrap();
                p.calls += 1;
                if p.fire_at != Some(p.calls) {
                    return;
                }
                p.op.take()
            };
            if let Some(op) = op {
                let other = other.lock().unwrap();
                other.ask.send(op).unwrap();
                let done = other.answer.recv().unwrap();
                plan.lock().unwrap().done = Some(done);
            }
        };
        match &index {
            Index::Two(i) => Index::Two(i.clone().before_write(hook)),
            Index::Three(i) => Index::Three(i.clone().before_write(hook)),
        }
    };

    let mut model = Model::new();
    let mut deleted: BTreeMap<u32, ETag> = BTreeMap::new();
    for (n, step) in steps.iter().enumerate() {
        *plan.lock().unwrap() = Plan {
            fire_at: step.inject.as_ref().map(|(at, _)| *at),
            op: step.inject.as_ref().map(|(_, op)| op.clone()),
            ..Plan::default()
        };
        let id = step.op.id();
        let mine = send(&hooked, option, &step.op, model.get(&id), deleted.get(&id)).await;
        let (theirs, inside) = {
            let mut p = plan.lock().unwrap();
            match (p.done.take(), p.op.take()) {
                (Some(done), _) => (Some(done), true),
                (None, Some(op)) => {
                    // The write made fewer hook calls: the other client writes after it.
                    drop(p);
                    let other = other.lock().unwrap();
                    other.ask.send(op).unwrap();
                    (Some(other.answer.recv().unwrap()), false)
                }
                (None, None) => (None, false),
            }
        };

        // The orders the pair may have taken: the other client's write ran
        // inside ours, so before or after our write's entity write.
        let actual = stored(&table, option).await;
        let mut orders: Vec<Vec<&(Sent, Outcome)>> = Vec::new();
        match &theirs {
            None => orders.push(vec![&mine]),
            Some(t) if inside => {
                orders.push(vec![t, &mine]);
                orders.push(vec![&mine, t]);
            }
            Some(t) => orders.push(vec![&mine, t]),
        }
        let next = orders.iter().find_map(|order| {
            let mut m = model.clone();
            order
                .iter()
                .all(|(sent, outcome)| sent.apply(&mut m, outcome))
                .then_some(m)
                .filter(|m| *m == actual)
        });
        let Some(next) = next else {
            panic!(
                "step {n} {step:?}: ours {mine:?}, theirs {theirs:?}: no order of the two \
                 explains the stored employees {actual:?} from {model:?}"
            );
        };
        for (id, (_, etag)) in &model {
            if !next.contains_key(id) {
                deleted.insert(*id, etag.clone());
            }
        }
        model = next;

        for value in VALUES {
            let expected: Vec<EntityKey> = model
                .iter()
                .filter(|(_, (v, _))| v == value)
                .map(|(id, _)| EntityKey::new(option.department(*id), format!("{id:06}")))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let found = index.found(value).await;
            assert_eq!(
                found, expected,
                "step {n} {step:?}: find({value:?}) (model {model:?})"
            );
            let listed = index.listed(value).await;
            for key in &expected {
                assert!(
                    listed.contains(key),
                    "step {n} {step:?}: {key:?} has {value:?} but is not listed: {listed:?}"
                );
            }
            if option == Option_::Two {
                assert_eq!(
                    listed, expected,
                    "step {n} {step:?}: option 2 lists exactly the entities of {value:?}"
                );
            }
        }
    }

    // With no writer running, option 3's extra entries can be removed: then
    // it lists exactly the entities of each value too.
    if let (Index::Three(i), Some(ix)) = (&index, &index_table) {
        for value in VALUES {
            i.remove_dangling(value).await.unwrap();
            let expected: Vec<EntityKey> = model
                .iter()
                .filter(|(_, (v, _))| v == value)
                .map(|(id, _)| EntityKey::new(option.department(*id), format!("{id:06}")))
                .collect();
            let mut listed = raw_entries(ix, value).await;
            listed.sort();
            let mut expected = expected;
            expected.sort();
            assert_eq!(listed, expected, "after remove_dangling({value:?})");
        }
    }
}

/// Every entry of `value`'s index entities, repeats included, read directly.
async fn raw_entries(index: &TableClient<DynamicEntity>, value: &str) -> Vec<EntityKey> {
    let rows = index
        .query()
        .filter_by(KeyRange::prefix(format!("{value}_")).filter("lastname", ""))
        .fetch_all()
        .await
        .unwrap();
    rows.iter()
        .flat_map(|r| match r.get(ENTITY_IDS) {
            Some(EdmValue::String(s)) => s.split('\n').map(str::to_owned).collect(),
            _ => Vec::new(),
        })
        .map(|e| {
            let (pk, rk) = e.split_once('\t').unwrap();
            EntityKey::new(pk, rk)
        })
        .collect()
}

fn check(option: Option_, azurite: bool, cases: u32) {
    if azurite && common::service().is_none() {
        return;
    }
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&steps(), |steps| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let svc = if azurite {
                common::service().unwrap()
            } else {
                TableServiceClient::embedded()
            };
            run(svc, option, steps).await
        });
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

mod option_2_lists_exactly_the_entities_of_each_value {
    use super::*;

    #[test]
    fn embedded() {
        check(Option_::Two, false, 256);
    }

    #[test]
    fn azurite() {
        check(Option_::Two, true, 16);
    }
}

mod option_3_lists_every_entity_under_its_value {
    use super::*;

    #[test]
    fn embedded() {
        check(Option_::Three, false, 256);
    }

    #[test]
    fn azurite() {
        check(Option_::Three, true, 16);
    }
}
