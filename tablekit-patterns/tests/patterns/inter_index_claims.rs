//! Who a claim of the inter-partition index belongs to, when a change finds
//! one already under its value: a claim written by an older version of the
//! worker (a rolling deployment: no `ClaimMessage`), a claim of another
//! delivery of the same change, and a claim of an older change of the same
//! employee. Each case puts the claim in place by hand, as the worker that
//! left it would have, then runs the change. And a change whose last attempt
//! stops (its worker dies) after claiming: the worker that then poisons it
//! gives its claims up first. On Azurite and on the embedded store.

use crate::common;
use tablekit::testing::TestEnv;

use common::Services;

use std::sync::Arc;
use std::time::Duration;

use tablekit::{DynamicEntity, EdmValue, QueueClient, TableClient, TableEntity};
use tablekit_patterns::eventual::{Event, PoisonedMessage, Worker};
use tablekit_patterns::inter_index::{
    InterIndex, InterPartitionIndex, CHANGE_STAMP, CLAIM_MESSAGE, CLAIM_WAITING, PENDING,
    PRIMARY_ROW_KEY,
};
use tokio::sync::Notify;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    email: String,
    badge: String,
}

fn emp(id: u32, email: &str, badge: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        employee_id: id,
        email: email.into(),
        badge: badge.into(),
    }
}

struct Env {
    s: Services,
    raw: TableClient<DynamicEntity>,
    by_email: InterIndex<Employee>,
    by_badge: InterIndex<Employee>,
    index: InterPartitionIndex<Employee>,
    jobs: QueueClient,
    poison: QueueClient,
}

impl Env {
    async fn new(s: &Services) -> Env {
        let employees = common::fresh_table::<Employee>(&s.tables, "Claims").await;
        let (jobs, poison) = common::fresh_queues(&s.queues, "claims-").await;
        let by_email = InterIndex::unique("email", "email_", |e: &Employee| e.email.clone());
        let by_badge = InterIndex::unique("badge", "badge_", |e: &Employee| e.badge.clone());
        let index = InterPartitionIndex::new(employees.clone(), "empid_", jobs.clone())
            .with_index(&by_email)
            .unwrap()
            .with_index(&by_badge)
            .unwrap();
        Env {
            s: s.clone(),
            raw: employees.with_type(),
            by_email,
            by_badge,
            index,
            jobs,
            poison,
        }
    }

    /// Runs every message once; a failed one goes to the poison queue.
    async fn drain(&self) -> (u64, u64) {
        let report = self
            .index
            .attach(Worker::builder(self.jobs.clone(), self.s.tables.clone()))
            .poison_queue(self.poison.clone())
            .visibility_timeout(self.s.visibility)
            .max_dequeue_count(1)
            .build()
            .unwrap()
            .drain()
            .await
            .unwrap();
        (report.succeeded, report.poisoned)
    }

    /// Sends the put of `e`; its stamp, read from the queue.
    async fn put(&self, e: &Employee) -> i64 {
        self.index.put(e).await.unwrap();
        let peeked = self.jobs.peek(32).await.unwrap();
        let body: serde_json::Value =
            serde_json::from_slice(peeked.last().unwrap().body()).unwrap();
        body["op"]["put"]["stamp"].as_i64().unwrap()
    }

    /// Stores a claim of employee `id` on email `email`, held by the change
    /// `stamp` (by `message`, if any) with `waiting` listed.
    async fn claim(&self, id: u32, email: &str, stamp: i64, message: Option<&str>, waiting: &str) {
        let mut claim = DynamicEntity::new("email_Sales", email)
            .with(PRIMARY_ROW_KEY, format!("{id:06}"))
            .with(CHANGE_STAMP, stamp)
            .with(PENDING, true);
        if let Some(m) = message {
            claim.set(CLAIM_MESSAGE, m.to_owned());
        }
        if !waiting.is_empty() {
            claim.set(CLAIM_WAITING, waiting.to_owned());
        }
        self.raw.insert(&claim).await.unwrap();
    }

    async fn email_row(&self, email: &str) -> Option<DynamicEntity> {
        self.raw.get(("email_Sales", email)).await.unwrap()
    }
}

impl Env {
    /// Runs one message with a worker that stops for good at the first step
    /// named `name` (a worker that dies there), on receive `at`, and is then
    /// aborted; the message comes back after its visibility timeout.
    async fn stop_at(&self, name: &'static str, at: u32) {
        self.stop_at_only(name, at).await;
        self.pass_visibility().await;
    }

    /// [`Env::stop_at`], without waiting for the message to come back.
    async fn stop_at_only(&self, name: &'static str, at: u32) {
        let reached = Arc::new(Notify::new());
        let signal = reached.clone();
        let worker = self
            .index
            .attach(Worker::builder(self.jobs.clone(), self.s.tables.clone()))
            .poison_queue(self.poison.clone())
            .visibility_timeout(self.s.visibility)
            .max_dequeue_count(1)
            .step_hook(move |event| {
                let signal = signal.clone();
                async move {
                    if let Event::Step {
                        name: step,
                        dequeue_count,
                        ..
                    } = event
                    {
                        if dequeue_count == at && step.starts_with(name) {
                            signal.notify_one();
                            std::future::pending::<()>().await;
                        }
                    }
                    Ok(())
                }
            })
            .build()
            .unwrap();
        let run = tokio::spawn(async move { worker.run_once().await });
        let reached = tokio::time::timeout(Duration::from_secs(60), reached.notified()).await;
        run.abort();
        assert!(reached.is_ok(), "no step {name:?} on receive {at}");
        let _ = run.await;
    }

    /// Waits until a message a dead worker had in flight is visible again.
    async fn pass_visibility(&self) {
        match &self.s.clock {
            Some(clock) => clock.advance(self.s.visibility + Duration::from_secs(1)),
            None => tokio::time::sleep(self.s.visibility + Duration::from_millis(700)).await,
        }
    }

    /// The error texts of the poisoned messages.
    async fn poisoned(&self) -> Vec<String> {
        let got = self.poison.receive().max_messages(32).await.unwrap();
        got.iter()
            .map(|m| m.json::<PoisonedMessage>().unwrap().error)
            .collect()
    }
}

fn is_claim(d: &DynamicEntity) -> bool {
    d.get(PENDING) == Some(&EdmValue::Boolean(true))
}

/// A worker of the version before claims named their message crashed after
/// claiming; the new worker runs the change again: the claim is its own.
/// Applied, it becomes the copy; refused (the badge is taken), it is given
/// up and deleted.
async fn a_claim_from_before_claims_named_their_message_is_its_changes(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    let stamp = env.put(&emp(223, "jones@contoso.com", "b1")).await;
    env.claim(223, "jones@contoso.com", stamp, None, "").await;
    assert_eq!(env.drain().await, (1, 0));
    let copy = env.email_row("jones@contoso.com").await.unwrap();
    assert!(!is_claim(&copy), "{copy:?}");
    let found = env
        .index
        .lookup(&env.by_email, "Sales", "jones@contoso.com");
    assert_eq!(
        found.await.unwrap(),
        Some(emp(223, "jones@contoso.com", "b1"))
    );

    let stamp = env.put(&emp(224, "kim@contoso.com", "b1")).await;
    env.claim(224, "kim@contoso.com", stamp, None, "").await;
    assert_eq!(env.drain().await, (0, 1), "refused: b1 is 223's");
    assert_eq!(env.email_row("kim@contoso.com").await, None);
}

/// The change was sent twice; the first delivery claimed the email and
/// crashed (its message will run again). The second takes the claim over
/// with the first one waiting: if it goes through, the claim becomes the
/// copy; if it is refused, the claim goes back to the first delivery, which
/// is still to run, instead of being deleted under it.
async fn a_claim_of_another_delivery_goes_back_to_it(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    let stamp = env.put(&emp(223, "jones@contoso.com", "b1")).await;
    env.claim(223, "jones@contoso.com", stamp, Some("first"), "")
        .await;
    assert_eq!(env.drain().await, (1, 0));
    let copy = env.email_row("jones@contoso.com").await.unwrap();
    assert!(!is_claim(&copy), "{copy:?}");

    let stamp = env.put(&emp(224, "kim@contoso.com", "b1")).await;
    env.claim(224, "kim@contoso.com", stamp, Some("first"), "")
        .await;
    assert_eq!(env.drain().await, (0, 1), "refused: b1 is 223's");
    let claim = env.email_row("kim@contoso.com").await.unwrap();
    assert!(is_claim(&claim), "{claim:?}");
    assert_eq!(claim.get(CHANGE_STAMP), Some(&EdmValue::Int64(stamp)));
    assert_eq!(
        claim.get(CLAIM_MESSAGE),
        Some(&EdmValue::String("first".into()))
    );
    assert_eq!(claim.get(CLAIM_WAITING), None);
}

/// An older change of 224 holds the email's claim, and another change
/// older still waits on it. The newer change takes the claim over: refused
/// (the badge is 223's), it gives the claim back to the older holder, with
/// the one waiting still listed; applied (with a free badge), the older
/// changes are overtaken and the claim becomes the copy.
async fn a_claim_of_older_changes_goes_back_down_the_line(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.put(&emp(223, "jones@contoso.com", "b1")).await;
    assert_eq!(env.drain().await, (1, 0));

    let stamp = env.put(&emp(224, "kim@contoso.com", "b1")).await;
    let waiting = format!("{} oldest", stamp - 2);
    env.claim(224, "kim@contoso.com", stamp - 1, Some("older"), &waiting)
        .await;
    assert_eq!(env.drain().await, (0, 1), "refused: b1 is 223's");
    let claim = env.email_row("kim@contoso.com").await.unwrap();
    assert!(is_claim(&claim), "{claim:?}");
    assert_eq!(claim.get(CHANGE_STAMP), Some(&EdmValue::Int64(stamp - 1)));
    assert_eq!(
        claim.get(CLAIM_MESSAGE),
        Some(&EdmValue::String("older".into()))
    );
    assert_eq!(claim.get(CLAIM_WAITING), Some(&EdmValue::String(waiting)));

    env.put(&emp(224, "kim@contoso.com", "b2")).await;
    assert_eq!(env.drain().await, (1, 0));
    let copy = env.email_row("kim@contoso.com").await.unwrap();
    assert!(!is_claim(&copy), "{copy:?}");
    assert_eq!(copy.get(CLAIM_WAITING), None);
    let found = env.index.lookup(&env.by_badge, "Sales", "b2");
    assert_eq!(
        found.await.unwrap(),
        Some(emp(224, "kim@contoso.com", "b2"))
    );
}

/// The last attempt of 223's change stops for good right after claiming
/// its email (its worker dies). The message comes back over its limit: the
/// worker gives the claim up, then poisons it, and the email is free for
/// 224. Had the attempt stopped after writing the primary, the primary
/// keeps the email, and the claim becomes its copy.
async fn a_change_whose_last_attempt_stopped_gives_up_its_claims(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.put(&emp(223, "jones@contoso.com", "b1")).await;
    env.stop_at("claim", 1).await;
    assert!(is_claim(&env.email_row("jones@contoso.com").await.unwrap()));
    assert_eq!(env.drain().await, (0, 1));
    let errors = env.poisoned().await;
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].ends_with("; what it held was given up"),
        "{errors:?}"
    );
    assert_eq!(env.email_row("jones@contoso.com").await, None);
    env.put(&emp(224, "jones@contoso.com", "b2")).await;
    assert_eq!(env.drain().await, (1, 0), "the email is free");

    env.put(&emp(225, "lee@contoso.com", "b3")).await;
    env.stop_at("insert", 1).await;
    assert_eq!(env.drain().await, (0, 1));
    let copy = env.email_row("lee@contoso.com").await.unwrap();
    assert!(!is_claim(&copy), "{copy:?}");
    let found = env.index.lookup(&env.by_badge, "Sales", "b3");
    assert_eq!(
        found.await.unwrap(),
        Some(emp(225, "lee@contoso.com", "b3"))
    );
}

/// The give-up runs once: if it stops too (on the receive after the limit),
/// the next receive poisons the message without it, and the claim stays
/// (the case the module docs name).
async fn a_give_up_that_stops_too_is_not_run_again(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.put(&emp(223, "jones@contoso.com", "b1")).await;
    env.stop_at("claim", 1).await;
    env.stop_at("read", 2).await;
    assert_eq!(env.drain().await, (0, 1));
    let errors = env.poisoned().await;
    assert!(!errors[0].contains("given up"), "{errors:?}");
    assert!(is_claim(&env.email_row("jones@contoso.com").await.unwrap()));
}

/// 223 moves from jones@ to lee@, and its worker dies at the first delete
/// of a copy; while its message is away, 224 asks for jones@. Then 223's
/// change is given up. One employee holds jones@ at the end, and a lookup of
/// it finds that one. Before the old copies were deleted after the primary
/// write (with the primary naming them), the delete came first: 224 found
/// jones@ free and took it, the give-up wrote 223's copy back over nothing
/// (224's was there), and both primaries showed jones@, the lookup naming 224.
async fn a_value_moved_off_is_not_taken_before_the_primary_moves(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    env.put(&emp(223, "jones@contoso.com", "b1")).await;
    assert_eq!(env.drain().await, (1, 0));
    env.put(&emp(223, "lee@contoso.com", "b1")).await;
    env.stop_at_only("delete_if_unchanged", 1).await;
    env.put(&emp(224, "jones@contoso.com", "b2")).await;
    env.drain().await;
    env.pass_visibility().await;
    env.drain().await;
    let mut holders = Vec::new();
    for id in [223, 224] {
        if let Some(e) = env.index.get(("Sales", format!("{id:06}"))).await.unwrap() {
            if e.email == "jones@contoso.com" {
                holders.push(e);
            }
        }
    }
    assert!(holders.len() <= 1, "jones@ held by {holders:?}");
    let found = env
        .index
        .lookup_verified(&env.by_email, "Sales", "jones@contoso.com")
        .await
        .unwrap();
    assert_eq!(found.as_ref(), holders.first());
}

/// 224's put writes its primary and then fails; before it runs again, a
/// newer change of 224 claims its email (by hand here, as that change's
/// worker would: held by the newer stamp, 224's put waiting). The retry
/// finds its primary written: it finishes, and leaves the claim to the
/// newer change (which turns it into 224's copy if it gives up). Before, it
/// failed on every attempt while the newer claim stood, and ended in the
/// poison queue although its primary was written.
async fn a_put_whose_primary_is_written_finishes_past_a_newer_claim(env: TestEnv) {
    let s = Services::of(&env);
    let env = Env::new(&s).await;
    let kim = emp(224, "kim@contoso.com", "b2");
    let stamp = env.put(&kim).await;
    let primary_insert = format!("insert {}", env.raw.name());
    let report = env
        .index
        .attach(Worker::builder(env.jobs.clone(), env.s.tables.clone()))
        .poison_queue(env.poison.clone())
        .visibility_timeout(env.s.visibility)
        .retry_delay(Duration::from_secs(1))
        .max_dequeue_count(3)
        .step_hook(move |event| {
            let primary_insert = primary_insert.clone();
            async move {
                match event {
                    Event::Step {
                        name,
                        dequeue_count: 1,
                        ..
                    } if name == primary_insert => Err("failed after the primary write".into()),
                    _ => Ok(()),
                }
            }
        })
        .build()
        .unwrap()
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.failed, 1, "{report:?}");
    assert!(env.index.get(("Sales", "000224")).await.unwrap().is_some());
    let newer = DynamicEntity::new("email_Sales", "kim@contoso.com")
        .with(PRIMARY_ROW_KEY, "000224")
        .with(CHANGE_STAMP, stamp + 1)
        .with(PENDING, true)
        .with(CLAIM_MESSAGE, "newer")
        .with(CLAIM_WAITING, format!("{stamp}"));
    env.raw
        .upsert(&newer, tablekit::UpdateMode::Replace)
        .await
        .unwrap();
    match &env.s.clock {
        Some(clock) => clock.advance(Duration::from_secs(2)),
        None => tokio::time::sleep(Duration::from_millis(1100)).await,
    }
    let report = env
        .index
        .attach(Worker::builder(env.jobs.clone(), env.s.tables.clone()))
        .poison_queue(env.poison.clone())
        .visibility_timeout(env.s.visibility)
        .max_dequeue_count(3)
        .build()
        .unwrap()
        .drain()
        .await
        .unwrap();
    assert_eq!((report.succeeded, report.poisoned), (1, 0), "{report:?}");
    assert_eq!(
        env.index.get(("Sales", "000224")).await.unwrap(),
        Some(kim.clone())
    );
    let claim = env.email_row("kim@contoso.com").await.unwrap();
    assert!(
        is_claim(&claim),
        "the newer change's, left to it: {claim:?}"
    );
    assert_eq!(claim.get(CHANGE_STAMP), Some(&EdmValue::Int64(stamp + 1)));
    assert_eq!(
        env.index
            .lookup(&env.by_badge, "Sales", "b2")
            .await
            .unwrap(),
        Some(kim)
    );
}

tablekit::testing::conformance!(
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_put_whose_primary_is_written_finishes_past_a_newer_claim,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_value_moved_off_is_not_taken_before_the_primary_moves,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_change_whose_last_attempt_stopped_gives_up_its_claims,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_give_up_that_stops_too_is_not_run_again,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_claim_from_before_claims_named_their_message_is_its_changes,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_claim_of_another_delivery_goes_back_to_it,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_claim_of_older_changes_goes_back_down_the_line,
);
