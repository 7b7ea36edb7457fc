//! The worker reports through `tracing`: one `eventual.message` span per
//! message with its queue, id, dequeue count and kind, and events for each
//! step, the success, the failure and the poisoning. Backend-independent, so
//! it runs on the embedded store only.

use tablekit::{DynamicEntity, QueueServiceClient, TableServiceClient};
use tablekit_patterns::eventual::{Archive, Eventual, Worker};
use tablekit_test_support::{field, FieldList, Recorder, SpanRecord};

#[test]
fn each_message_is_a_span_with_its_id_dequeue_count_and_kind() {
    let recorder = Recorder::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (archived_id, deferred_id, poisoned_id) =
        tracing::subscriber::with_default(recorder.clone(), || {
            rt.block_on(async {
                let tables = TableServiceClient::embedded();
                let queues = QueueServiceClient::embedded();
                let current = tables.table::<DynamicEntity>("Current").unwrap();
                current.create_table().await.unwrap();
                tables.create_table("Archive").await.unwrap();
                current
                    .insert(&DynamicEntity::new("Sales", "000456"))
                    .await
                    .unwrap();
                let jobs = queues.queue("jobs").unwrap();
                let poison = queues.queue("jobs-poison").unwrap();
                jobs.create_queue().await.unwrap();
                poison.create_queue().await.unwrap();
                let op = Archive::<DynamicEntity>::new("Current", "Archive", ("Sales", "000456"))
                    .unwrap();
                let archived = Eventual::new(jobs.clone()).enqueue(&op).await.unwrap();
                let deferred = Eventual::new(jobs.clone())
                    .enqueue_kind("nobody-runs-this", &())
                    .await
                    .unwrap();
                let poisoned = jobs.send("archive employee 456").await.unwrap();
                let worker = Worker::builder(jobs, tables)
                    .operation::<Archive<DynamicEntity>>()
                    .poison_queue(poison)
                    .build()
                    .unwrap();
                let report = worker.drain().await.unwrap();
                assert_eq!(
                    (report.succeeded, report.deferred, report.poisoned),
                    (1, 1, 1)
                );
                (
                    archived.id().to_owned(),
                    deferred.id().to_owned(),
                    poisoned.id().to_owned(),
                )
            })
        });

    let spans = recorder.spans();
    let message_spans: Vec<&SpanRecord> = spans
        .iter()
        .filter(|(name, _)| name == "eventual.message")
        .collect();
    assert_eq!(message_spans.len(), 3, "{spans:?}");
    let archived = message_spans
        .iter()
        .find(|(_, f)| field(f, "message_id") == Some(archived_id.as_str()))
        .expect("a span for the archive message");
    assert_eq!(field(&archived.1, "queue"), Some("jobs"));
    assert_eq!(field(&archived.1, "dequeue_count"), Some("1"));
    assert_eq!(field(&archived.1, "kind"), Some("tablekit.archive"));
    let deferred = message_spans
        .iter()
        .find(|(_, f)| field(f, "message_id") == Some(deferred_id.as_str()))
        .expect("a span for the message of an unknown kind");
    assert_eq!(field(&deferred.1, "kind"), Some("nobody-runs-this"));
    assert!(message_spans
        .iter()
        .any(|(_, f)| field(f, "message_id") == Some(poisoned_id.as_str())));

    let events = recorder.events();
    let messages: Vec<&str> = events.iter().filter_map(|f| field(f, "message")).collect();
    assert!(messages.contains(&"step done"), "{messages:?}");
    assert!(
        messages.contains(&"operation done, message deleted"),
        "{messages:?}"
    );
    assert!(
        messages.contains(&"message moved to the poison queue"),
        "{messages:?}"
    );
    // The message of an unknown kind: a warning, not a poisoning.
    let warned: Vec<&FieldList> = events
        .iter()
        .filter(|f| field(f, "level") == Some("WARN"))
        .filter(|f| field(f, "reason").is_some_and(|r| r.contains("nobody-runs-this")))
        .collect();
    assert_eq!(warned.len(), 1, "{events:?}");
    assert!(
        field(warned[0], "message").is_some_and(|m| m.contains("left on the queue")),
        "{warned:?}"
    );
    let steps: Vec<&str> = events
        .iter()
        .filter(|f| field(f, "message") == Some("step done"))
        .filter_map(|f| field(f, "name"))
        .collect();
    assert_eq!(
        steps,
        [
            "read Current",
            "insert_or_replace Archive",
            "delete_if_unchanged Current"
        ]
    );
}
