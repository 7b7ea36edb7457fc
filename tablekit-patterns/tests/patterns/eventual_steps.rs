//! The idempotent building blocks of `StepContext`, one by one (the outcome
//! of each when repeated, and of the ETag-guarded ones when the ETag is
//! stale or the target gone), and a user operation over a table and a blob
//! stopped at each of its steps. On Azurite and on the embedded store.

use crate::common;
use tablekit::testing::TestEnv;

use common::Services;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit::{DynamicEntity, QueueServiceClient, TableServiceClient};
use tablekit_patterns::eventual::{
    Event, Eventual, Guarded, OpResult, Operation, StepContext, Worker,
};

tablekit::testing::conformance!(
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    table_steps_repeat_safely_and_guarded_ones_report_changed_or_gone,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    blob_steps_repeat_safely_and_guarded_ones_report_changed_or_gone,
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    an_export_to_a_blob_stopped_at_each_step_is_recovered,
);

async fn table_steps_repeat_safely_and_guarded_ones_report_changed_or_gone(env: TestEnv) {
    let s = Services::of(&env);
    let ctx = StepContext::detached(s.tables.clone(), None);
    let t = common::fresh_table::<DynamicEntity>(&s.tables, "Steps").await;
    let e = DynamicEntity::new("p", "r").with("N", 1);
    let first = ctx.insert_or_replace(&t, &e).await.unwrap();
    let second = ctx.insert_or_replace(&t, &e).await.unwrap();
    assert_ne!(first, second);
    assert_eq!(common::rows(&t, "p").await.len(), 1);

    let (read, etag) = ctx.read(&t, ("p", "r")).await.unwrap().unwrap();
    assert_eq!(read.get("N"), Some(&tablekit::EdmValue::Int32(1)));
    assert_eq!(etag, second);
    assert!(ctx.read(&t, ("p", "missing")).await.unwrap().is_none());

    let changed = DynamicEntity::new("p", "r").with("N", 2);
    assert_eq!(
        ctx.replace_if_unchanged(&t, &changed, &first)
            .await
            .unwrap(),
        Guarded::Changed
    );
    let Guarded::Done(Some(third)) = ctx
        .replace_if_unchanged(&t, &changed, &second)
        .await
        .unwrap()
    else {
        panic!("the current ETag replaces");
    };
    let ghost = DynamicEntity::new("p", "ghost");
    assert_eq!(
        ctx.replace_if_unchanged(&t, &ghost, &third).await.unwrap(),
        Guarded::Gone
    );

    assert_eq!(
        ctx.delete_if_unchanged(&t, ("p", "r"), &second)
            .await
            .unwrap(),
        Guarded::Changed
    );
    assert_eq!(
        ctx.delete_if_unchanged(&t, ("p", "r"), &third)
            .await
            .unwrap(),
        Guarded::Done(None)
    );
    assert_eq!(
        ctx.delete_if_unchanged(&t, ("p", "r"), &third)
            .await
            .unwrap(),
        Guarded::Gone
    );
    ctx.insert_or_replace(&t, &e).await.unwrap();
    assert!(ctx.delete_if_exists(&t, ("p", "r")).await.unwrap());
    assert!(!ctx.delete_if_exists(&t, ("p", "r")).await.unwrap());

    // A missing table is not "already done": it is an error.
    let missing = s
        .tables
        .table::<DynamicEntity>(&common::unique_name("Missing"))
        .unwrap();
    assert!(ctx.delete_if_exists(&missing, ("p", "r")).await.is_err());
    assert!(ctx
        .delete_if_unchanged(&missing, ("p", "r"), &third)
        .await
        .is_err());
    assert!(ctx.blobs().is_err(), "no Blob service was given");
}

async fn blob_steps_repeat_safely_and_guarded_ones_report_changed_or_gone(env: TestEnv) {
    let s = Services::of(&env);
    let ctx = StepContext::detached(s.tables.clone(), Some(s.blobs.clone()));
    let container = s
        .blobs
        .container(&common::unique_name("steps-").to_lowercase())
        .unwrap();
    container.create_container().await.unwrap();
    let blob = container.blob("employees/000456.json").unwrap();

    assert!(ctx.put_blob_if_not_exists(&blob, "v1").await.unwrap());
    assert!(!ctx.put_blob_if_not_exists(&blob, "v2").await.unwrap());
    assert_eq!(blob.download().bytes().await.unwrap().as_ref(), b"v1");
    let v1 = blob.properties().await.unwrap().etag().clone();
    let v2 = ctx.put_blob(&blob, "v2").await.unwrap();
    assert_eq!(
        ctx.put_blob_if_unchanged(&blob, "v3", &v1).await.unwrap(),
        Guarded::Changed
    );
    let Guarded::Done(Some(v3)) = ctx.put_blob_if_unchanged(&blob, "v3", &v2).await.unwrap() else {
        panic!("the current ETag writes");
    };
    assert_eq!(blob.download().bytes().await.unwrap().as_ref(), b"v3");
    assert_eq!(
        ctx.delete_blob_if_unchanged(&blob, &v2).await.unwrap(),
        Guarded::Changed
    );
    assert_eq!(
        ctx.delete_blob_if_unchanged(&blob, &v3).await.unwrap(),
        Guarded::Done(None)
    );
    assert_eq!(
        ctx.delete_blob_if_unchanged(&blob, &v3).await.unwrap(),
        Guarded::Gone
    );
    assert_eq!(
        ctx.put_blob_if_unchanged(&blob, "v4", &v3).await.unwrap(),
        Guarded::Gone
    );
    assert!(
        !blob.exists().await.unwrap(),
        "a guarded write creates nothing"
    );
    assert!(!ctx.delete_blob_if_exists(&blob).await.unwrap());
}

/// A user operation: export an entity to a JSON blob, then delete it from
/// its table (the guide's "a table entity and a blob").
#[derive(Serialize, Deserialize)]
struct Export {
    table: String,
    partition_key: String,
    row_key: String,
    container: String,
}

impl Operation for Export {
    const KIND: &'static str = "export";

    async fn run(&self, ctx: &StepContext) -> OpResult {
        let table = ctx.tables().table::<DynamicEntity>(&self.table)?;
        let key = (&*self.partition_key, &*self.row_key);
        let Some((entity, _)) = ctx.read(&table, key).await? else {
            return Ok(()); // exported and deleted by an earlier attempt
        };
        let blob = ctx
            .blobs()?
            .container(&self.container)?
            .blob(&format!("{}/{}.json", self.partition_key, self.row_key))?;
        ctx.put_blob(&blob, tablekit::codec::entity_to_json(&entity)?)
            .await?;
        ctx.delete_if_exists(&table, key).await?;
        Ok(())
    }
}

async fn an_export_to_a_blob_stopped_at_each_step_is_recovered(env: TestEnv) {
    let s = Services::of(&env);
    for boundary in 1..=3usize {
        let t = common::fresh_table::<DynamicEntity>(&s.tables, "Export").await;
        let container = s
            .blobs
            .container(&common::unique_name("export-").to_lowercase())
            .unwrap();
        container.create_container().await.unwrap();
        let (jobs, poison) = common::fresh_queues(&s.queues, "export-").await;
        for id in ["000456", "000457"] {
            t.insert(&DynamicEntity::new("Sales", id).with("Name", format!("n{id}")))
                .await
                .unwrap();
            let op = Export {
                table: t.name().into(),
                partition_key: "Sales".into(),
                row_key: id.into(),
                container: container.name().into(),
            };
            Eventual::new(jobs.clone()).enqueue(&op).await.unwrap();
        }
        let worker = || {
            Worker::builder(jobs.clone(), s.tables.clone())
                .operation::<Export>()
                .blobs(s.blobs.clone())
                .poison_queue(poison.clone())
                .visibility_timeout(s.visibility)
                .concurrency(2)
        };
        let stops = Arc::new(AtomicUsize::new(0));
        let count = stops.clone();
        let report = worker()
            .step_hook(move |event| {
                let count = count.clone();
                async move {
                    match event {
                        Event::Step { step, .. } if step == boundary => {
                            count.fetch_add(1, Ordering::SeqCst);
                            Err("stopped".into())
                        }
                        _ => Ok(()),
                    }
                }
            })
            .build()
            .unwrap()
            .drain()
            .await
            .unwrap();
        // Each message stops at the boundary at least once. On Azurite a drain
        // slower than the visibility timeout (a loaded machine) meets a stopped
        // message again and stops it again: more stops, the same recovery.
        assert!(report.failed >= 2, "boundary {boundary}: {report:?}");
        assert_eq!(report.succeeded, 0, "boundary {boundary}");
        assert_eq!(stops.load(Ordering::SeqCst) as u64, report.failed);
        if s.clock.is_some() {
            assert_eq!(
                report.failed, 2,
                "the embedded clock does not move by itself"
            );
        }

        match &s.clock {
            Some(c) => c.advance(s.visibility + Duration::from_secs(1)),
            None => tokio::time::sleep(s.visibility + Duration::from_millis(700)).await,
        }
        let report = worker().build().unwrap().drain().await.unwrap();
        assert_eq!(report.succeeded, 2, "boundary {boundary}");
        assert!(common::rows(&t, "Sales").await.is_empty());
        let names: Vec<String> = container
            .list_blobs()
            .fetch_all()
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.name().to_owned())
            .collect();
        assert_eq!(names, ["Sales/000456.json", "Sales/000457.json"]);
        let body = container
            .blob("Sales/000456.json")
            .unwrap()
            .download()
            .bytes()
            .await
            .unwrap();
        let back: DynamicEntity = tablekit::codec::entity_from_json(&body).unwrap();
        assert_eq!(
            back.get("Name"),
            Some(&tablekit::EdmValue::String("n000456".into()))
        );
        assert_eq!(jobs.approximate_message_count().await.unwrap(), 0);
        assert_eq!(poison.approximate_message_count().await.unwrap(), 0);
    }
}

#[tokio::test]
async fn an_operation_too_large_for_a_message_is_refused_before_sending() {
    let jobs = QueueServiceClient::embedded().queue("jobs").unwrap();
    jobs.create_queue().await.unwrap();
    let op = Export {
        // Over 64 KiB as text (the default encoding) as well as in Base64.
        table: "T".repeat(64 * 1024),
        partition_key: "p".into(),
        row_key: "r".into(),
        container: "c".into(),
    };
    let err = Eventual::new(jobs.clone()).enqueue(&op).await.unwrap_err();
    common::assert_invalid(&err);
    let err = Eventual::new(jobs.clone())
        .enqueue_kind("", &())
        .await
        .unwrap_err();
    common::assert_invalid(&err);
    assert_eq!(jobs.approximate_message_count().await.unwrap(), 0);
}

#[test]
fn worker_options_the_queue_cannot_honour_are_refused_at_build() {
    let queues = QueueServiceClient::embedded();
    let jobs = queues.queue("jobs").unwrap();
    let poison = queues.queue("jobs-poison").unwrap();
    let base = || {
        Worker::builder(jobs.clone(), TableServiceClient::embedded())
            .operation::<Export>()
            .poison_queue(poison.clone())
    };
    assert!(base().build().is_ok());
    assert!(base().retry_delay(Duration::ZERO).build().is_ok());
    let refused = [
        base().unknown_delay(Duration::from_millis(999)).build(),
        base()
            .unknown_delay(Duration::from_secs(8 * 24 * 3600))
            .build(),
        base().concurrency(0).build(),
        base().concurrency(1025).build(),
        base()
            .visibility_timeout(Duration::from_millis(999))
            .build(),
        base()
            .visibility_timeout(Duration::from_secs(8 * 24 * 3600))
            .build(),
        base()
            .visibility_timeout(Duration::from_secs(10))
            .heartbeat(Duration::from_secs(10))
            .build(),
        base().heartbeat(Duration::ZERO).build(),
        base().max_dequeue_count(0).build(),
        base()
            .poll_backoff(Duration::from_secs(2), Duration::from_secs(1))
            .build(),
        base().operation::<Export>().build(),
        base().poison_queue(jobs.clone()).build(),
        // A give-up for a kind the worker does not run would never run.
        base()
            .on_give_up("test.unknown", |_: String, _| async { Ok(()) })
            .build(),
        Worker::builder(jobs.clone(), TableServiceClient::embedded())
            .operation::<Export>()
            .build(),
        Worker::builder(jobs.clone(), TableServiceClient::embedded())
            .poison_queue(poison.clone())
            .build(),
    ];
    for (i, r) in refused.into_iter().enumerate() {
        let err = r.expect_err(&format!("case {i} is refused"));
        common::assert_invalid(&err);
    }
}

/// Only "the blob already exists" means an earlier attempt wrote it: another
/// conflict (here the container being deleted, a 409 too) is an error, never
/// `Ok(false)`, which would let the operation go on as if the blob were there.
#[tokio::test]
async fn put_blob_if_not_exists_reports_a_conflict_other_than_an_existing_blob() {
    let blobs = common::answering_blob_service(409, "ContainerBeingDeleted").await;
    let ctx = StepContext::detached(TableServiceClient::embedded(), Some(blobs.clone()));
    let blob = blobs.container("exports").unwrap().blob("a.json").unwrap();
    let err = ctx
        .put_blob_if_not_exists(&blob, "v1")
        .await
        .expect_err("a container being deleted is not an existing blob");
    assert!(format!("{err}").contains("ContainerBeingDeleted"), "{err}");

    // The same server answering BlobAlreadyExists: the step reports it as
    // there, and writes nothing.
    let blobs = common::answering_blob_service(409, "BlobAlreadyExists").await;
    let ctx = StepContext::detached(TableServiceClient::embedded(), Some(blobs.clone()));
    let blob = blobs.container("exports").unwrap().blob("a.json").unwrap();
    assert!(!ctx.put_blob_if_not_exists(&blob, "v1").await.unwrap());
}

/// `on_give_up` runs for a message whose last attempt stopped without
/// finishing, once, before the message is poisoned; not for one whose last
/// attempt failed (its handler had its own error path), and not again once
/// the give-up itself stopped.
async fn a_give_up_runs_once_for_a_last_attempt_that_stopped(env: TestEnv) {
    let s = Services::of(&env);
    let (jobs, poison) = common::fresh_queues(&s.queues, "giveup-").await;
    let given_up = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stopped = Arc::new(tokio::sync::Notify::new());
    let worker = |stop_give_up: bool| {
        let (given_up, stopped, stopped2) = (given_up.clone(), stopped.clone(), stopped.clone());
        Worker::builder(jobs.clone(), s.tables.clone())
            .poison_queue(poison.clone())
            .visibility_timeout(s.visibility)
            .max_dequeue_count(1)
            .handle("test.op", move |op: String, _ctx: StepContext| {
                let stopped = stopped.clone();
                async move {
                    if op == "stops" {
                        stopped.notify_one();
                        std::future::pending::<()>().await;
                    }
                    Err("fails".into())
                }
            })
            .on_give_up("test.op", move |op: String, _ctx: StepContext| {
                let (given_up, stopped) = (given_up.clone(), stopped2.clone());
                async move {
                    given_up.lock().unwrap().push(op);
                    if stop_give_up {
                        stopped.notify_one();
                        std::future::pending::<()>().await;
                    }
                    Ok(())
                }
            })
            .build()
            .unwrap()
    };
    let pass_timeout = || async {
        match &s.clock {
            Some(clock) => clock.advance(s.visibility + Duration::from_secs(1)),
            None => tokio::time::sleep(s.visibility + Duration::from_millis(700)).await,
        }
    };
    let stop = |stop_give_up: bool| {
        let worker = worker(stop_give_up);
        let stopped = stopped.clone();
        async move {
            let run = tokio::spawn(async move { worker.run_once().await });
            let reached = tokio::time::timeout(Duration::from_secs(60), stopped.notified()).await;
            run.abort();
            let _ = run.await;
            assert!(reached.is_ok(), "the worker did not stop where it should");
        }
    };
    let eventual = Eventual::new(jobs.clone());

    eventual.enqueue_kind("test.op", "fails").await.unwrap();
    let report = worker(false).drain().await.unwrap();
    assert_eq!(report.poisoned, 1, "{report:?}");
    assert!(
        given_up.lock().unwrap().is_empty(),
        "a failed attempt gives up nothing"
    );

    eventual.enqueue_kind("test.op", "stops").await.unwrap();
    stop(false).await;
    pass_timeout().await;
    let report = worker(false).drain().await.unwrap();
    assert_eq!(report.poisoned, 1, "{report:?}");
    assert_eq!(*given_up.lock().unwrap(), ["stops"]);

    eventual.enqueue_kind("test.op", "stops").await.unwrap();
    stop(false).await;
    pass_timeout().await;
    stop(true).await;
    pass_timeout().await;
    let report = worker(false).drain().await.unwrap();
    assert_eq!(report.poisoned, 1, "{report:?}");
    assert_eq!(*given_up.lock().unwrap(), ["stops", "stops"], "once");

    let errors: Vec<String> = poison
        .receive()
        .max_messages(32)
        .await
        .unwrap()
        .iter()
        .map(|m| {
            m.json::<tablekit_patterns::eventual::PoisonedMessage>()
                .unwrap()
                .error
        })
        .collect();
    assert_eq!(errors.len(), 3);
    assert_eq!(
        errors
            .iter()
            .filter(|e| e.ends_with("; what it held was given up"))
            .count(),
        1,
        "{errors:?}"
    );
}

tablekit::testing::conformance!(
    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    a_give_up_runs_once_for_a_last_attempt_that_stopped,
);
