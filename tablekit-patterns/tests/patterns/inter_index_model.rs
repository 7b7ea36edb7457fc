//! The inter-partition secondary index against a plain model: random puts
//! and removes of employees 1 to 4 over three shared last names (a
//! non-unique index), three shared emails and three shared badges (two
//! unique ones), sent through
//! the queue, then delivered in a random order, some twice, by one or two
//! workers running several messages at once, with a step failing at a
//! random point, and a worker dying at another (every message it has in
//! flight stops there, and comes back after its visibility timeout; one on
//! its last attempt is then given up). After the queue drains, the stored
//! state is compared with
//! the model: each primary is the newest change that was not refused (a
//! change sent twice is refused only if both its messages were), every
//! last name lists exactly its employees, every email and badge finds
//! exactly its holder (never two), no claim or stale copy is left, and every
//! refused change is a constraint violation of a unique index (or an older
//! put that kept meeting a newer put's claim) that ended in the poison
//! queue. When a change was given up, how far it got is not known, and the
//! check is what must hold anyway: no claim left, no value held twice, and
//! the verified reads agree with the primaries. Many cases on the embedded
//! store, a few on Azurite.

use crate::common;

use common::Services;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tablekit::{DynamicEntity, EdmValue, QueueClient, TableClient, TableEntity};
use tablekit_patterns::eventual::{Event, PoisonedMessage, Worker};
use tablekit_patterns::inter_index::{
    InterIndex, InterPartitionIndex, PENDING, PRIMARY_ROW_KEY, REMOVED,
};
use tablekit_patterns::range::KeyRange;
use tokio::sync::Notify;

const NAMES: [&str; 3] = ["Jones", "Van", "Van Dyke"];
const EMAILS: [&str; 3] = ["a@contoso.com", "b@contoso.com", "c@contoso.com"];
const BADGES: [&str; 3] = ["b1", "b2", "b3"];
const MAX_OPS: usize = 10;
const MAX_DEQUEUE: u32 = 3;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    last_name: String,
    email: String,
    badge: String,
}

#[derive(Debug, Clone)]
enum Op {
    Put {
        id: u32,
        name: usize,
        email: usize,
        badge: usize,
    },
    Remove {
        id: u32,
    },
}

impl Op {
    fn id(&self) -> u32 {
        match self {
            Op::Put { id, .. } | Op::Remove { id } => *id,
        }
    }

    fn entity(&self) -> Option<Employee> {
        match self {
            Op::Put {
                id,
                name,
                email,
                badge,
            } => Some(Employee {
                department: "Sales".into(),
                employee_id: *id,
                last_name: NAMES[*name].into(),
                email: EMAILS[*email].into(),
                badge: BADGES[*badge].into(),
            }),
            Op::Remove { .. } => None,
        }
    }
}

#[derive(Debug, Clone)]
struct Plan {
    ops: Vec<Op>,
    /// Delivery order: message `i` is sent again at rank `order[i]` (ties
    /// keep their order).
    order: Vec<u8>,
    /// Messages sent twice.
    twice: Vec<bool>,
    /// The step (counted over every message of the first round) that fails.
    crash_at: Option<usize>,
    /// The step (counted over every attempt) at which the worker running it
    /// dies: every message it has in flight stops where it is.
    kill_at: Option<usize>,
    workers: usize,
    concurrency: usize,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..=4u32, 0..NAMES.len(), 0..EMAILS.len(), 0..BADGES.len())
            .prop_map(|(id, name, email, badge)| Op::Put { id, name, email, badge }),
        1 => (1..=4u32).prop_map(|id| Op::Remove { id }),
    ]
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        prop::collection::vec(op(), 1..=MAX_OPS),
        prop::collection::vec(any::<u8>(), MAX_OPS),
        prop::collection::vec(prop::bool::weighted(0.25), MAX_OPS),
        prop::option::weighted(0.7, 1..60usize),
        prop::option::weighted(0.3, 1..80usize),
        1..=2usize,
        1..=3usize,
    )
        .prop_map(
            |(ops, order, twice, crash_at, kill_at, workers, concurrency)| Plan {
                ops,
                order,
                twice,
                crash_at,
                kill_at,
                workers,
                concurrency,
            },
        )
}

struct Env {
    s: Services,
    employees: TableClient<Employee>,
    names: TableClient<DynamicEntity>,
    by_email: InterIndex<Employee>,
    by_badge: InterIndex<Employee>,
    by_name: InterIndex<Employee>,
    index: InterPartitionIndex<Employee>,
    jobs: QueueClient,
    poison: QueueClient,
}

impl Env {
    async fn new(s: &Services) -> Env {
        let employees = common::fresh_table::<Employee>(&s.tables, "Model").await;
        let names = common::fresh_table::<DynamicEntity>(&s.tables, "ModelNames").await;
        let (jobs, poison) = common::fresh_queues(&s.queues, "model-").await;
        let by_email = InterIndex::unique("email", "email_", |e: &Employee| e.email.clone());
        let by_badge =
            InterIndex::unique("badge", "badge_", |e: &Employee| e.badge.clone()).in_table(&names);
        let by_name =
            InterIndex::non_unique("last name", "lastname_", |e: &Employee| e.last_name.clone())
                .in_table(&names);
        let index = InterPartitionIndex::new(employees.clone(), "empid_", jobs.clone())
            .with_index(&by_email)
            .unwrap()
            .with_index(&by_name)
            .unwrap()
            .with_index(&by_badge)
            .unwrap();
        Env {
            s: s.clone(),
            employees,
            names,
            by_email,
            by_badge,
            by_name,
            index,
            jobs,
            poison,
        }
    }

    /// Takes every message off the queue and sends them again in the plan's
    /// order, some twice. Returns the stamps of the changes, in the order
    /// they were made (a client's stamps increase).
    async fn redeliver(&self, plan: &Plan) -> Vec<i64> {
        let mut taken = Vec::new();
        while taken.len() < plan.ops.len() {
            let got = self
                .jobs
                .receive()
                .max_messages(32)
                .visibility_timeout(Duration::from_secs(600))
                .await
                .unwrap();
            assert!(!got.is_empty(), "every change is on the queue");
            taken.extend(got);
        }
        let mut stamps: Vec<i64> = taken.iter().map(|m| stamp(m.body())).collect();
        stamps.sort_unstable();
        let mut ranked: Vec<(u8, usize)> = stamps
            .iter()
            .map(|s| {
                let i = stamps.iter().position(|t| t == s).unwrap();
                (plan.order[i], i)
            })
            .collect();
        ranked.sort_unstable();
        for (_, i) in ranked {
            let m = taken.iter().find(|m| stamp(m.body()) == stamps[i]).unwrap();
            for _ in 0..if plan.twice[i] { 2 } else { 1 } {
                self.jobs.send(m.body()).await.unwrap();
            }
        }
        for m in &taken {
            self.jobs.delete_message(m).await.unwrap();
        }
        stamps
    }

    /// Runs the plan's workers until the queue is empty: a round of
    /// concurrent drains, then the retry delay passes, again. A worker that
    /// dies stops its drain there; the messages it had in flight come back
    /// once their visibility timeout has passed. Returns whether one died.
    async fn drain(&self, plan: &Plan) -> bool {
        let steps = Arc::new(AtomicUsize::new(0));
        let all_steps = Arc::new(AtomicUsize::new(0));
        let (crash_at, kill_at) = (plan.crash_at, plan.kill_at);
        let deaths: Vec<Arc<Notify>> = (0..plan.workers).map(|_| Arc::new(Notify::new())).collect();
        let workers: Vec<Worker> = deaths
            .iter()
            .map(|death| {
                let (steps, all_steps, death) = (steps.clone(), all_steps.clone(), death.clone());
                self.index
                    .attach(Worker::builder(self.jobs.clone(), self.s.tables.clone()))
                    .poison_queue(self.poison.clone())
                    .visibility_timeout(self.s.visibility)
                    .retry_delay(Duration::from_secs(1))
                    .max_dequeue_count(MAX_DEQUEUE)
                    .concurrency(plan.concurrency)
                    .step_hook(move |event| {
                        let (steps, all_steps, death) =
                            (steps.clone(), all_steps.clone(), death.clone());
                        async move {
                            // Every step boundary lets the other messages
                            // run: the embedded store never makes a step
                            // wait, so without this the messages a worker
                            // runs at once would not interleave.
                            tokio::task::yield_now().await;
                            // Not in a give-up (received over the limit):
                            // one that dies too leaves its claims, as the
                            // module docs say.
                            if let Event::Step {
                                dequeue_count: 1..=MAX_DEQUEUE,
                                ..
                            } = event
                            {
                                let n = all_steps.fetch_add(1, Ordering::SeqCst) + 1;
                                if Some(n) == kill_at {
                                    death.notify_one();
                                    std::future::pending::<()>().await;
                                }
                            }
                            if let Event::Step {
                                dequeue_count: 1, ..
                            } = event
                            {
                                let n = steps.fetch_add(1, Ordering::SeqCst) + 1;
                                if Some(n) == crash_at {
                                    return Err("crashed".into());
                                }
                            }
                            Ok(())
                        }
                    })
                    .build()
                    .unwrap()
            })
            .collect();
        let mut any_died = false;
        for _round in 0..10 {
            let drains = workers.iter().zip(&deaths).map(|(w, death)| async move {
                tokio::select! {
                    report = w.drain() => {
                        report.unwrap();
                        false
                    }
                    () = death.notified() => true,
                }
            });
            let died = futures::future::join_all(drains).await.contains(&true);
            any_died |= died;
            if !died && self.jobs.approximate_message_count().await.unwrap() == 0 {
                return any_died;
            }
            let wait = if died {
                self.s.visibility + Duration::from_secs(1)
            } else {
                Duration::from_secs(2)
            };
            match &self.s.clock {
                Some(clock) => clock.advance(wait),
                None => tokio::time::sleep(wait - Duration::from_millis(900)).await,
            }
        }
        panic!("the queue did not drain");
    }

    /// The poisoned messages: (stamp, error), one per message (a change
    /// sent twice can have two).
    async fn poisoned(&self) -> Vec<(i64, String)> {
        let mut out = Vec::new();
        loop {
            let got = self
                .poison
                .receive()
                .max_messages(32)
                .visibility_timeout(Duration::from_secs(600))
                .await
                .unwrap();
            if got.is_empty() {
                return out;
            }
            for m in got {
                let p: PoisonedMessage = m.json().unwrap();
                out.push((stamp(p.body.as_bytes()), p.error));
            }
        }
    }

    async fn raw_rows(&self) -> Vec<DynamicEntity> {
        let mut rows = self
            .employees
            .with_type::<DynamicEntity>()
            .query()
            .fetch_all()
            .await
            .unwrap();
        rows.extend(self.names.query().fetch_all().await.unwrap());
        rows
    }
}

fn stamp(body: &[u8]) -> i64 {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    let op = &v["op"];
    let change = op.get("put").or_else(|| op.get("remove")).unwrap();
    change["stamp"].as_i64().unwrap()
}

async fn check(s: Services, plan: Plan) {
    let env = Env::new(&s).await;
    for op in &plan.ops {
        match op.entity() {
            Some(e) => env.index.put(&e).await.unwrap(),
            None => env
                .index
                .remove(("Sales", format!("{:06}", op.id())))
                .await
                .unwrap(),
        };
    }
    let stamps = env.redeliver(&plan).await;
    let died = env.drain(&plan).await;

    // Refused changes: puts, for a unique value, nothing else; and changes
    // whose worker died on their last attempt, given up.
    let poisoned = env.poisoned().await;
    let given_up: Vec<i64> = poisoned
        .iter()
        .filter(|(_, error)| error.contains("over the limit"))
        .map(|(stamp, _)| *stamp)
        .collect();
    // A change is refused when every delivery of it was: of a change sent
    // twice, one delivery can be refused (the value was taken when it read)
    // and the other go through later (the holder moved off it meanwhile).
    let refused: Vec<i64> = stamps
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            let deliveries = if plan.twice[*i] { 2 } else { 1 };
            poisoned.iter().filter(|(p, _)| p == *s).count() >= deliveries
        })
        .map(|(_, s)| *s)
        .collect();
    for (stamp, error) in &poisoned {
        let i = stamps.iter().position(|s| s == stamp).unwrap();
        let op = &plan.ops[i];
        if error.contains("over the limit") {
            assert!(
                error.ends_with("; what it held was given up"),
                "{op:?} poisoned: {error}"
            );
            continue;
        }
        assert!(
            matches!(op, Op::Put { .. })
                && (error.contains(r#"unique constraint "email""#)
                    || error.contains(r#"unique constraint "badge""#)
                    // An older put that met a newer put's claim of the same
                    // employee at each of its attempts (the newer one being
                    // retried too): it gave up, visibly.
                    || error.contains("is being claimed by a newer change of this entity")),
            "{op:?} poisoned: {error}"
        );
        assert!(
            !error.ends_with(&format!("(\"Sales\", \"{:06}\")", op.id())),
            "refused for its own value: {error}"
        );
    }

    if !given_up.is_empty() || (died && !poisoned.is_empty()) {
        // How far a change that was given up got is not known (its primary
        // may be written), nor how far a poisoned one got in an attempt its
        // worker died in: check what holds whatever they did.
        return check_invariants(&env).await;
    }

    // The model: each employee is its newest change that was not refused.
    let poisoned: BTreeMap<i64, &String> = poisoned.iter().map(|(s, e)| (*s, e)).collect();
    let mut model: BTreeMap<u32, Option<Employee>> = BTreeMap::new();
    for (op, stamp) in plan.ops.iter().zip(&stamps) {
        if !refused.contains(stamp) {
            model.insert(op.id(), op.entity());
        }
    }
    let live: BTreeMap<u32, Employee> = model
        .iter()
        .filter_map(|(id, e)| e.clone().map(|e| (*id, e)))
        .collect();
    for id in 1..=4u32 {
        let key = ("Sales", format!("{id:06}"));
        assert_eq!(
            env.index.get(key).await.unwrap(),
            live.get(&id).cloned(),
            "employee {id}; stamps {stamps:?}; poisoned {poisoned:?}"
        );
    }

    // Non-unique: every last name lists exactly its employees.
    for name in NAMES {
        let want: Vec<Employee> = live
            .values()
            .filter(|e| e.last_name == name)
            .cloned()
            .collect();
        let got = env
            .index
            .lookup_all(&env.by_name, "Sales", name)
            .await
            .unwrap();
        assert_eq!(got, want, "last name {name:?}");
    }
    let all = env
        .index
        .list(&env.by_name, "Sales", KeyRange::prefix("Van"))
        .await
        .unwrap();
    assert_eq!(
        all.len(),
        live.values()
            .filter(|e| e.last_name.starts_with("Van"))
            .count()
    );

    // Unique: no two employees share an email or a badge, and each finds
    // its holder.
    for (index, values) in [(&env.by_email, EMAILS), (&env.by_badge, BADGES)] {
        for value in values {
            let holders: Vec<&Employee> =
                live.values().filter(|e| index.value(e) == value).collect();
            assert!(holders.len() <= 1, "{value} held by {holders:?}");
            let found = env.index.lookup(index, "Sales", value).await.unwrap();
            assert_eq!(found.as_ref(), holders.first().copied(), "{value}");
        }
    }

    // Nothing else is stored: no claim, no stale copy, no extra copy.
    let mut want: BTreeSet<(String, String)> = BTreeSet::new();
    for e in live.values() {
        want.insert(("empid_Sales".into(), format!("{:06}", e.employee_id)));
        want.insert(("email_Sales".into(), env.by_email.row_key(e).unwrap()));
        want.insert(("lastname_Sales".into(), env.by_name.row_key(e).unwrap()));
        want.insert(("badge_Sales".into(), env.by_badge.row_key(e).unwrap()));
    }
    let mut got = BTreeSet::new();
    for d in env.raw_rows().await {
        assert_ne!(
            d.get(PENDING),
            Some(&EdmValue::Boolean(true)),
            "a claim is left: {d:?}"
        );
        if d.get(REMOVED) == Some(&EdmValue::Boolean(true)) {
            continue;
        }
        if d.partition_key != "empid_Sales" {
            assert!(d.get(PRIMARY_ROW_KEY).is_some());
        }
        got.insert((d.partition_key, d.row_key));
    }
    assert_eq!(got, want);
}

/// What holds whichever changes were applied: no claim is left, no two
/// employees share an email or a badge, and the verified reads of each
/// index find exactly the employees whose primaries show the value.
async fn check_invariants(env: &Env) {
    for d in env.raw_rows().await {
        assert_ne!(
            d.get(PENDING),
            Some(&EdmValue::Boolean(true)),
            "a claim is left: {d:?}"
        );
    }
    let mut live = Vec::new();
    for id in 1..=4u32 {
        if let Some(e) = env.index.get(("Sales", format!("{id:06}"))).await.unwrap() {
            live.push(e);
        }
    }
    for (index, values) in [(&env.by_email, EMAILS), (&env.by_badge, BADGES)] {
        for value in values {
            let holders: Vec<&Employee> = live.iter().filter(|e| index.value(e) == value).collect();
            assert!(holders.len() <= 1, "{value} held by {holders:?}");
            let found = env
                .index
                .lookup_verified(index, "Sales", value)
                .await
                .unwrap();
            assert_eq!(found.as_ref(), holders.first().copied(), "{value}");
        }
    }
    for name in NAMES {
        let want: Vec<&Employee> = live.iter().filter(|e| e.last_name == name).collect();
        let got = env
            .index
            .list_verified(&env.by_name, "Sales", KeyRange::inclusive(name, name))
            .await
            .unwrap();
        assert_eq!(got.iter().collect::<Vec<_>>(), want, "last name {name:?}");
    }
}

fn run(cases: u32, services: impl Fn() -> Option<Services>) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&plan(), |plan| {
            let Some(s) = services() else {
                return Ok(());
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(check(s, plan));
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_index_matches_the_model_on_embedded() {
    run(256, || Some(common::embedded_services()));
}

#[test]
fn the_index_matches_the_model_on_azurite() {
    run(8, common::azurite_services);
}

/// A case the model test found on 2026-11-26: a change of employee 3 that
/// claimed badge "b2" crashed after the claim; its retry was refused (another
/// employee took its email meanwhile), and the refusal gave back what the
/// retry had claimed but not the earlier attempt's claim of a value it had
/// not reached yet, so "b2" stayed claimed (`a claim is left`).
#[test]
fn regression_a_claim_left_after_a_crash() {
    let ops = vec![
        Op::Remove { id: 3 },
        put(1, 0, 0),
        put(1, 0, 0),
        put(1, 0, 0),
        put(1, 0, 0),
        put(1, 0, 0),
        put(3, 2, 1),
        put(1, 0, 0),
        put(3, 2, 0),
        put(1, 2, 2),
    ];
    let order = [0, 30, 41, 3, 41, 41, 0, 41, 3, 3];
    check_embedded(regression_plan(ops, &order, &[3], Some(39)));
}

/// Runs one plan on the embedded store.
fn check_embedded(plan: Plan) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(check(common::embedded_services(), plan));
}

/// A put of employee `id` with the first last name, email `email` and
/// badge `badge` (indexes into the value lists), for the regression plans.
fn put(id: u32, email: usize, badge: usize) -> Op {
    put_named(id, 0, email, badge)
}

/// A put of employee `id` with last name `name`, email `email` and badge
/// `badge` (indexes into the value lists), for the regression plans.
fn put_named(id: u32, name: usize, email: usize, badge: usize) -> Op {
    Op::Put {
        id,
        name,
        email,
        badge,
    }
}

/// A regression plan: the messages at `twice` are sent twice.
fn regression_plan(ops: Vec<Op>, order: &[u8], twice: &[usize], crash_at: Option<usize>) -> Plan {
    let mut order = order.to_vec();
    order.resize(MAX_OPS, 0);
    let mut sent_twice = vec![false; MAX_OPS];
    for i in twice {
        sent_twice[*i] = true;
    }
    Plan {
        ops,
        order,
        twice: sent_twice,
        crash_at,
        kill_at: None,
        workers: 2,
        concurrency: 3,
    }
}

/// A second case the model test found on 2026-11-26: a change of employee 3
/// claimed an email and crashed; a newer change of employee 3 with the same
/// values restamped that claim as its own; both were then refused (the badge
/// is employee 2's), and the newer one's refusal put the older one's claim
/// back after the older one had given up, so the email stayed claimed.
#[test]
fn regression_a_restored_claim_of_a_refused_change() {
    let ops = vec![
        put(1, 0, 0),
        put(1, 2, 0),
        put(1, 0, 0),
        Op::Remove { id: 2 },
        put(3, 1, 0),
        put(3, 1, 0),
        put(2, 0, 0),
        put(1, 2, 1),
    ];
    let order = [78, 78, 0, 78, 213, 78, 78];
    check_embedded(regression_plan(ops, &order, &[], Some(2)));
}

/// Found by the model test against a first fix of the case above (it
/// passes on the code before that fix): the last change of employee 1 is
/// delivered twice and both deliveries run at once. One is refused (the
/// email was employee 2's when it read), the other goes through once
/// employee 2's claim is given back. The refused one must not give back
/// the other's claims as if they were its own (the same change, the same
/// stamp): that left employee 1's primary on the email with no copy.
#[test]
fn regression_two_deliveries_of_one_change_one_refused() {
    let ops = vec![
        put(1, 0, 0),
        put(1, 0, 0),
        put(2, 0, 0),
        put(1, 0, 0),
        put(1, 0, 0),
        put(1, 0, 0),
        put(1, 0, 1),
    ];
    let mut plan = regression_plan(ops, &[18, 18, 18, 18, 18, 18], &[6], Some(7));
    (plan.workers, plan.concurrency) = (1, 2);
    check_embedded(plan);
}

/// Found by the model test while fixing the cases above; it fails on the
/// code before (2026-11-26): employee 3's change is delivered twice, and the
/// first delivery crashed after claiming the email. The second one, refused
/// (the email was employee 1's when it read), gave back the first one's
/// claim as its own while that one went on, so employees 1 and 3 both ended
/// on the email. Now a claim names the message whose attempt holds it, and
/// a second delivery takes the claim over, with the first one waiting.
#[test]
fn regression_a_second_delivery_meets_the_first_ones_claim() {
    let ops = vec![put(3, 0, 2), Op::Remove { id: 1 }, put(1, 0, 0)];
    let mut plan = regression_plan(ops, &[], &[0], Some(9));
    (plan.workers, plan.concurrency) = (1, 2);
    check_embedded(plan);
}

/// Found by the model test against a second fix (it passes on the code
/// before both): employee 4's email claim is taken over three times, by a
/// second delivery of its change, then by both deliveries of a newer
/// change. When the newer ones gave up, the claim had forgotten the first
/// delivery, which had already written the primary: the claim was deleted
/// under it, and employee 1 took the email too. A claim now lists every
/// change waiting on it, and goes back down the list.
#[test]
fn regression_a_claim_taken_over_three_times_goes_back_down_the_line() {
    let ops = vec![
        put(1, 0, 0),
        put(4, 0, 2),
        put(2, 1, 1),
        Op::Remove { id: 3 },
        put(1, 0, 0),
        put(1, 0, 0),
        put(1, 0, 0),
        put(4, 0, 1),
        put(1, 0, 0),
    ];
    let order = [109, 0, 0, 0, 109, 113, 109];
    check_embedded(regression_plan(ops, &order, &[1, 7], None));
}

/// Found by the model test once it could kill workers: employee 1's last
/// change is sent twice. One delivery is refused at each of its attempts
/// (employee 4 holds the email), while the other, held up by a worker's
/// death, comes back after employee 4 moved off the email, and goes
/// through. Both are right; the change is applied, and one of its two
/// messages is in the poison queue. The model counts a change as refused
/// only when every delivery of it was.
#[test]
fn regression_one_delivery_refused_the_other_applied_later() {
    let ops = vec![
        put(1, 0, 0),
        put(2, 1, 2),
        Op::Remove { id: 2 },
        Op::Remove { id: 1 },
        put(4, 0, 0),
        put(4, 1, 2),
        put(1, 0, 0),
        put(1, 0, 1),
    ];
    let order = [21, 20, 56, 56, 0, 20, 20, 56];
    let mut plan = regression_plan(ops, &order, &[1, 5, 7], Some(11));
    plan.kill_at = Some(48);
    plan.concurrency = 2;
    check_embedded(plan);
}

/// Found by the model test with a worker killed (2026-11-26): employee 2
/// holds "c@contoso.com"; its change to "a@contoso.com" is refused twice
/// (employee 1's crashed change claims that email), then at its last
/// attempt claims the email, deletes employee 2's copy under the old one
/// (step 2) and its worker dies before the primary write. The give-up took
/// the change off its claims but left the old copy deleted: employee 2's
/// primary showed "c@contoso.com" and no lookup found it. Now a change that
/// stops before its primary write (given up, failed or refused) writes the
/// old copies back from the primary as stored.
#[test]
fn regression_a_killed_change_loses_a_copy_the_primary_shows() {
    let ops = vec![
        put(1, 0, 0),
        Op::Remove { id: 1 },
        put(2, 2, 2),
        Op::Remove { id: 3 },
        Op::Remove { id: 3 },
        Op::Put {
            id: 2,
            name: 1,
            email: 0,
            badge: 2,
        },
        put(3, 1, 1),
        Op::Remove { id: 1 },
    ];
    let order = [5, 167, 167, 100, 0, 100, 100, 5, 0, 0];
    let mut plan = regression_plan(ops, &order, &[4, 6, 7], Some(13));
    plan.kill_at = Some(69);
    (plan.workers, plan.concurrency) = (1, 2);
    check_embedded(plan);
}

/// Found by the model test against a version of the fix above that wrote
/// the copies back from the primary as read before the failure: a remove of
/// employee 1 fails at the step right after its tombstone write (the write
/// went through), and its worker dies while writing back the copies it
/// deleted first. The removed employee's email copy stayed. The copies are
/// written back only from the primary as read after the failure, and only
/// if it is older than the change.
#[test]
fn regression_a_write_that_went_through_before_a_failure_is_not_undone() {
    let ops = vec![
        Op::Remove { id: 1 },
        put(1, 0, 0),
        put(1, 0, 0),
        Op::Remove { id: 1 },
    ];
    let mut plan = regression_plan(ops, &[0, 0, 69], &[1], Some(27));
    plan.kill_at = Some(28);
    (plan.workers, plan.concurrency) = (1, 1);
    check_embedded(plan);
}

/// Found by the model test at 2048 cases (it fails on the code before): an
/// older put of employee 1 (last name "Jones") resumes after a crash and
/// writes its "Jones" copy after a newer put to "Van" deleted the old copies
/// and read the primary, but before the newer put's primary write. The newer
/// put's second delete of old copies came after its copies, whose write
/// failed (a still newer put was claiming the badge), and its next attempt
/// no longer knew the old values: "Jones" kept listing employee 1. The
/// second delete now comes right after the primary write.
#[test]
fn regression_an_older_copy_written_late_is_deleted_before_the_copies_fail() {
    let ops = vec![
        put_named(3, 0, 0, 0),
        put_named(1, 0, 0, 0),
        put_named(1, 1, 0, 2),
        put_named(3, 0, 1, 2),
        put_named(1, 1, 0, 2),
        Op::Remove { id: 3 },
    ];
    let mut plan = regression_plan(ops, &[175, 0, 3, 0, 3, 0], &[], None);
    plan.kill_at = Some(74);
    plan.concurrency = 2;
    check_embedded(plan);
}

/// Found by the model test at 2048 cases (it fails on the code before): a
/// remove of employee 1 found no "Jones" copy in its first delete pass; an
/// older put of employee 1, resumed, wrote that copy and read the primary
/// before the remove's tombstone; the remove wrote its tombstone and failed
/// in its second delete pass. Its retry found its own tombstone, which held
/// nothing of the values it removed, and "Jones" kept listing employee 1.
/// The tombstone now names the copies the remove takes off, and a retry
/// that finds it deletes them again.
#[test]
fn regression_a_remove_retried_after_its_tombstone_deletes_a_late_copy() {
    let ops = vec![
        put(1, 0, 0),
        Op::Remove { id: 2 },
        put(2, 0, 0),
        put(2, 1, 0),
        put(1, 0, 0),
        put(1, 0, 1),
        Op::Remove { id: 1 },
    ];
    let mut plan = regression_plan(ops, &[98, 0, 98, 98, 0, 0, 98], &[], Some(45));
    plan.kill_at = Some(13);
    (plan.workers, plan.concurrency) = (1, 3);
    check_embedded(plan);
}

/// Found by the model test at 2048 cases against the first version of the
/// write-back above (it passes on the code before that), which also ran
/// after a failure of an attempt that was not the last: a copy of employee
/// 2's old values stayed under badge "b1" after its primary moved on. A
/// later attempt deletes the old copies and writes the primary again, so a
/// write-back before it only races it; the copies are now written back only
/// when no attempt follows (the last attempt, or the give-up).
#[test]
fn regression_old_copies_are_written_back_only_when_no_attempt_follows() {
    let ops = vec![
        put_named(1, 0, 0, 0),
        put_named(1, 0, 1, 0),
        put_named(2, 0, 0, 0),
        put_named(2, 0, 1, 1),
        put_named(1, 0, 0, 1),
        put_named(2, 2, 2, 2),
    ];
    let order = [131, 130, 122, 161, 244, 154, 209, 87, 7, 47];
    let mut plan = regression_plan(ops, &order, &[1, 3, 9], Some(44));
    plan.kill_at = Some(53);
    (plan.workers, plan.concurrency) = (1, 2);
    check_embedded(plan);
}

/// Found by the model test at 2048 cases (it fails on the code before):
/// employee 2's put wrote its primary in an attempt whose worker died,
/// then met a newer put of employee 2 claiming the same email at each of
/// its later attempts and was poisoned ("will retry later") when they ran
/// out; its claim on badge "b2" was never turned into a copy, and its
/// primary showed "b2" with no copy. A last attempt that fails now does
/// what the give-up of a stopped one does: the claims become copies if the
/// primary is written (else are given back, and the old copies written
/// back).
#[test]
fn regression_a_last_attempt_that_fails_after_the_primary_leaves_no_claim() {
    let ops = vec![
        put_named(3, 0, 0, 0),
        put_named(2, 0, 2, 1),
        put_named(2, 0, 2, 2),
        put_named(3, 0, 0, 2),
        put_named(4, 0, 0, 0),
        put_named(1, 0, 2, 2),
        Op::Remove { id: 4 },
        Op::Remove { id: 1 },
    ];
    let mut plan = regression_plan(ops, &[71, 71, 49, 88, 71, 1, 0, 9, 17, 0], &[], None);
    plan.kill_at = Some(44);
    plan.concurrency = 2;
    check_embedded(plan);
}

/// Found by the model test against the first version of deleting the copies
/// a put moves off after its primary write (it fails on that version): the
/// put of employee 2 from badge "b1" to "b2" (and to last name "Van") fails
/// right after its primary write, and a newer put of employee 2 goes through
/// before it is retried; the retry, stale, no longer knows "b1", and the
/// "b1" copy kept finding employee 2. A put (or a remove) now first deletes
/// what the put before it moved off, which its primary names.
#[test]
fn regression_a_put_deletes_what_the_put_before_it_moved_off() {
    let ops = vec![
        put(1, 0, 0),
        put(1, 0, 0),
        put(1, 0, 0),
        put(2, 0, 0),
        put_named(2, 1, 0, 1),
        put(2, 0, 1),
    ];
    let mut plan = regression_plan(ops, &[100, 100, 100], &[], Some(16));
    (plan.workers, plan.concurrency) = (1, 1);
    check_embedded(plan);
}

/// Found by the model test against the same first version (it fails there):
/// employee 4 moves from last name "Jones" to "Van" while its earlier put,
/// running at the same time, writes its "Jones" copy late; the move stops
/// between its primary write and its deletes, and the remove of employee 4
/// that follows did not know "Jones": the copy kept listing the removed
/// employee. A remove now first deletes what the put before it moved off.
#[test]
fn regression_a_remove_deletes_what_the_put_before_it_moved_off() {
    let ops = vec![
        put(1, 0, 0),
        put(1, 2, 1),
        put(1, 0, 0),
        put(4, 1, 0),
        put_named(4, 1, 2, 0),
        put(1, 0, 0),
        put(1, 0, 0),
        put(3, 0, 0),
        put(3, 0, 1),
        Op::Remove { id: 4 },
    ];
    let mut plan = regression_plan(ops, &[90, 72, 90, 0, 72, 90, 90, 72, 0, 72], &[1], Some(48));
    (plan.workers, plan.concurrency) = (1, 3);
    check_embedded(plan);
}

/// Found by the model test at 2048 cases (it fails on every version before
/// this fix): employee 3's put of "a@contoso.com" is delivered twice. One
/// delivery restamps employee 3's "a@" copy (kept from an earlier put) and
/// fails; giving up, it put the copy back with its earlier stamp, while the
/// other delivery went on with it. A remove of employee 3, older than the
/// put, then deleted the copy as its own, and the other delivery wrote its
/// primary and found the copy gone: employee 3's primary showed "a@" with
/// no copy, and employee 1 took the value. A restamped copy now names the
/// delivery that restamped it (`ClaimMessage`): another delivery leaves it
/// to that one; and a copy found gone while the primary is still this
/// change's is inserted again.
#[test]
fn regression_a_delivery_giving_up_does_not_free_a_value_another_delivery_holds() {
    let ops = vec![
        put(1, 2, 0),
        put(2, 2, 1),
        put(1, 0, 2),
        put(3, 2, 0),
        put(3, 0, 2),
        put(1, 0, 0),
        Op::Remove { id: 3 },
        put(3, 0, 0),
    ];
    let order = [38, 13, 107, 0, 13, 107, 107, 38, 0, 0];
    let mut plan = regression_plan(ops, &order, &[7], Some(51));
    (plan.workers, plan.concurrency) = (2, 2);
    check_embedded(plan);
}

/// Found by the model test at 2048 cases (it fails on every version before
/// this fix, every time): employee 1's put of badge "b1" restamps its
/// "a@contoso.com" copy; an older put of employee 1 ("b3") finds the copy
/// held by that newer change, leaves it to it, and writes its primary. The
/// newer put is refused ("b1" is taken) and gives the copy back, written
/// from the primary as it had read it, before the older put's write: the
/// email copy kept the content of a put before both ("b2") for good. Now
/// the change giving a copy back reads the primary again after its write
/// and follows it, and the older put, after its primary write, writes the
/// copy itself if the newer change has let it go.
#[test]
fn regression_a_copy_given_back_follows_a_primary_written_meanwhile() {
    let ops = vec![
        put(1, 0, 1),
        put(3, 0, 0),
        put(2, 0, 0),
        Op::Remove { id: 2 },
        Op::Remove { id: 3 },
        put(2, 0, 0),
        put(2, 1, 0),
        put(1, 0, 2),
        put(1, 0, 0),
    ];
    let order = [10, 73, 86, 10, 10, 86, 10, 10];
    let mut plan = regression_plan(ops, &order, &[], Some(24));
    (plan.workers, plan.concurrency) = (2, 3);
    check_embedded(plan);
}
