//! A model-based test of the patterns that keep one partition in step, used
//! together as the guide combines them: the intra-partition index (unique
//! email), the department's count, and the department's copy of its
//! manager's details, every write one composed transaction. Random
//! sequences over three employees and three emails (so emails collide), with
//! a second writer that gets in between a plan's reads and its transaction,
//! are run against the pattern and against a plain `BTreeMap`; after every
//! step the stored partition must be exactly what the model says.

use crate::common;

use std::collections::BTreeMap;

use proptest::prelude::*;
use tablekit::{ETag, EdmValue, IfMatch, TableClient, TableEntity, TableServiceClient};
use tablekit_patterns::denormalize::Denormalized;
use tablekit_patterns::index::{Index, IndexedTable};
use tablekit_patterns::plan::Plan;
use tablekit_patterns::range::KeyRange;
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

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "Department")]
struct Department {
    department: String,
    employee_count: i32,
    manager_id: Option<String>,
    manager_email: Option<String>,
}

const EMAILS: [&str; 3] = ["a@x", "b@x", "c@x"];

#[derive(Debug, Clone)]
enum Op {
    Insert { id: u32, email: usize },
    ChangeEmail { id: u32, email: usize },
    Delete { id: u32 },
    MakeManager { id: u32 },
}

#[derive(Debug, Clone)]
struct Step {
    op: Op,
    /// Another writer's change, made after this step's plan read the
    /// partition and before its transaction is sent.
    raced_by: Option<Op>,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1..=3u32, 0..3usize).prop_map(|(id, email)| Op::Insert { id, email }),
        (1..=3u32, 0..3usize).prop_map(|(id, email)| Op::ChangeEmail { id, email }),
        (1..=3u32).prop_map(|id| Op::Delete { id }),
        (1..=3u32).prop_map(|id| Op::MakeManager { id }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (op(), proptest::option::weighted(0.25, op())).prop_map(|(op, raced_by)| Step { op, raced_by })
}

/// The plain model: employees by id, the manager's id.
#[derive(Debug, Clone, Default)]
struct Model {
    employees: BTreeMap<u32, String>,
    manager: Option<(u32, String)>,
}

impl Model {
    fn email_taken(&self, email: &str, by_other_than: u32) -> bool {
        self.employees
            .iter()
            .any(|(id, e)| e == email && *id != by_other_than)
    }

    /// Applies `op`; whether it was applied (a refused op changes nothing).
    fn apply(&mut self, op: &Op) -> bool {
        match *op {
            Op::Insert { id, email } => {
                let email = EMAILS[email];
                if self.employees.contains_key(&id) || self.email_taken(email, id) {
                    return false;
                }
                self.employees.insert(id, email.into());
                true
            }
            Op::ChangeEmail { id, email } => {
                let email = EMAILS[email];
                if !self.employees.contains_key(&id) || self.email_taken(email, id) {
                    return false;
                }
                self.employees.insert(id, email.into());
                if let Some((m, copy)) = &mut self.manager {
                    if *m == id {
                        *copy = email.into();
                    }
                }
                true
            }
            Op::Delete { id } => self.employees.remove(&id).is_some(),
            Op::MakeManager { id } => match self.employees.get(&id) {
                Some(email) => {
                    self.manager = Some((id, email.clone()));
                    true
                }
                None => false,
            },
        }
    }
}

#[derive(Clone)]
struct Patterns {
    table: TableClient<Employee>,
    by_email: Index<Employee>,
    indexed: IndexedTable<Employee>,
    counted: CountedPartition<Employee>,
    manager: Denormalized<Employee>,
}

fn patterns(table: TableClient<Employee>) -> Patterns {
    let by_email = Index::new("email", "email_", |e: &Employee| e.email.clone());
    Patterns {
        indexed: IndexedTable::new(table.clone())
            .unwrap()
            .with_index(&by_email)
            .unwrap(),
        counted: CountedPartition::new(table.clone(), "Department", "EmployeeCount"),
        manager: Denormalized::new(table.clone(), "Department", "ManagerId", |e: &Employee| {
            (
                format!("{:06}", e.employee_id),
                vec![("ManagerEmail".to_string(), EdmValue::from(e.email.clone()))],
            )
        }),
        by_email,
        table,
    }
}

fn employee(id: u32, email: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        employee_id: id,
        email: email.into(),
        etag: None,
    }
}

/// Plans `op` from fresh reads: the composed transaction that applies it,
/// or `None` when the reads say it must be refused (the model refuses it too).
async fn plan<'p>(p: &'p Patterns, op: &Op) -> tablekit::Result<Option<Plan<'p>>> {
    let key = |id: u32| ("Sales".to_string(), format!("empid_{id:06}"));
    Ok(match *op {
        Op::Insert { id, email } => {
            let e = employee(id, EMAILS[email]);
            Some(
                p.indexed
                    .plan_insert(&e)?
                    .and(p.counted.plan_count("Sales", 1)?)?,
            )
        }
        Op::ChangeEmail { id, email } => {
            let Some((current, etag)) = p.indexed.get_with_etag(key(id)).await? else {
                return Ok(None);
            };
            let new = employee(id, EMAILS[email]);
            Some(
                p.indexed
                    .plan_update(&current, &new, IfMatch::ETag(etag))?
                    .and(p.manager.plan_refresh(&new)?)?,
            )
        }
        Op::Delete { id } => {
            let Some((current, etag)) = p.indexed.get_with_etag(key(id)).await? else {
                return Ok(None);
            };
            Some(
                p.indexed
                    .plan_delete(&current, IfMatch::ETag(etag))?
                    .and(p.counted.plan_count("Sales", -1)?)?,
            )
        }
        Op::MakeManager { id } => {
            let Some(current) = p.indexed.get(key(id)).await? else {
                return Ok(None);
            };
            Some(p.manager.plan_assign(&current)?)
        }
    })
}

/// Runs `op`: plans it from the caller's reads and sends it, again from
/// fresh reads when a write under the caller's own ETag is refused (the
/// plan's own reads are worked out again by the plan itself); `raced_by` is
/// applied by the other writer after the first plan's reads, before its
/// transaction. Returns whether `op` was applied, and whether its first plan
/// was to do nothing (then `op` took effect, as a refusal, at that read:
/// before the other writer's change).
async fn run(p: &Patterns, other: &Patterns, step: &Step) -> (bool, bool) {
    let mut first_was_nothing = false;
    for attempt in 1.. {
        let planned = plan(p, &step.op).await.unwrap();
        if attempt == 1 {
            first_was_nothing = planned.is_none();
        }
        let Some(mut planned) = planned else {
            if attempt == 1 {
                if let Some(raced) = &step.raced_by {
                    run_alone(other, raced).await;
                }
            }
            return (false, first_was_nothing);
        };
        if attempt == 1 {
            if let Some(raced) = step.raced_by.clone() {
                let other = other.clone();
                let handle = tokio::runtime::Handle::current();
                planned = planned.before_send(common::sync_hook(move |plan_attempt| {
                    if plan_attempt == 1 {
                        tokio::task::block_in_place(|| handle.block_on(run_alone(&other, &raced)));
                    }
                }));
            }
        }
        match planned.send().await {
            Ok(applied) => return (!applied.is_empty(), first_was_nothing),
            // The caller's own read is stale: read and plan again.
            Err(e) if (e.is_precondition_failed() || e.is_not_found()) && attempt < 16 => {}
            // A taken email (unique index) or a taken id.
            Err(e) if e.is_conflict() => return (false, first_was_nothing),
            Err(e) => panic!("{step:?}: {e:?}"),
        }
    }
    unreachable!()
}

async fn run_alone(p: &Patterns, op: &Op) {
    for _ in 0..16 {
        let Some(planned) = plan(p, op).await.unwrap() else {
            return;
        };
        match planned.send().await {
            Ok(_) => return,
            Err(e) if e.is_precondition_failed() || e.is_not_found() => {}
            Err(e) if e.is_conflict() => return,
            Err(e) => panic!("{op:?}: {e:?}"),
        }
    }
    panic!("{op:?}: 16 stale reads in a row");
}

async fn check(p: &Patterns, model: &Model) {
    let stored: BTreeMap<u32, String> = p
        .indexed
        .list_primary("Sales", KeyRange::all())
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.employee_id, e.email))
        .collect();
    assert_eq!(stored, model.employees, "the employees");
    let by_email: BTreeMap<u32, String> = p
        .indexed
        .list(&p.by_email, "Sales", KeyRange::all())
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.employee_id, e.email))
        .collect();
    assert_eq!(
        by_email, model.employees,
        "the email index lists every employee once"
    );
    let department = p
        .table
        .with_type::<Department>()
        .get(("Sales", "Department"))
        .await
        .unwrap();
    let count = department.as_ref().map_or(0, |d| d.employee_count);
    assert_eq!(count as usize, model.employees.len(), "the count");
    let manager = department.and_then(|d| Some((d.manager_id?, d.manager_email?)));
    assert_eq!(
        manager,
        model
            .manager
            .as_ref()
            .map(|(id, email)| (format!("{id:06}"), email.clone())),
        "the department's copy of its manager"
    );
}

async fn case(svc: TableServiceClient, steps: Vec<Step>) {
    let table = common::fresh_table::<Employee>(&svc, "PartModel").await;
    let other_table = common::second_service(&svc)
        .table::<Employee>(table.name())
        .unwrap();
    let (p, other) = (patterns(table), patterns(other_table));
    let mut model = Model::default();
    for step in &steps {
        let (applied, first_was_nothing) = run(&p, &other, step).await;
        let mut expected = model.clone();
        let applied_in_model = if first_was_nothing {
            // Refused at its read, before the other writer's change.
            let applied = expected.apply(&step.op);
            if let Some(raced) = &step.raced_by {
                expected.apply(raced);
            }
            applied
        } else {
            // The other writer's change commits before this transaction.
            if let Some(raced) = &step.raced_by {
                expected.apply(raced);
            }
            expected.apply(&step.op)
        };
        assert_eq!(applied, applied_in_model, "{step:?} on {model:?}");
        model = expected;
        check(&p, &model).await;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    // The other writer's change runs inside the plan's before-send hook
    // (block_in_place): a multi-thread runtime.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn embedded(steps in proptest::collection::vec(step(), 1..24)) {
        runtime().block_on(case(TableServiceClient::embedded(), steps));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn azurite(steps in proptest::collection::vec(step(), 1..16)) {
        if let Some(svc) = common::service() {
            runtime().block_on(case(svc, steps));
        }
    }
}
