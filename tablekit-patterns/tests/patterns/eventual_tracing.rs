//! The worker reports through `tracing`: one `eventual.message` span per
//! message with its queue, id, dequeue count and kind, and events for each
//! step, the success, the failure and the poisoning. Backend-independent, so
//! it runs on the embedded store only.

use std::sync::{Arc, Mutex};

use tablekit::{DynamicEntity, QueueServiceClient, TableServiceClient};
use tablekit_patterns::eventual::{Archive, Eventual, Worker};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A span's or event's `(field, value)` pairs.
type FieldList = Vec<(String, String)>;
/// A span's name and fields.
type SpanRecord = (String, FieldList);

#[derive(Default, Clone)]
struct Recorder {
    spans: Arc<Mutex<Vec<SpanRecord>>>,
    events: Arc<Mutex<Vec<FieldList>>>,
}

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut spans = self.spans.lock().unwrap();
        let mut fields = Vec::new();
        attrs.record(&mut Fields(&mut fields));
        spans.push((attrs.metadata().name().to_owned(), fields));
        Id::from_u64(spans.len() as u64)
    }
    fn record(&self, id: &Id, values: &Record<'_>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some((_, fields)) = spans.get_mut(id.into_u64() as usize - 1) {
            values.record(&mut Fields(fields));
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = vec![("level".to_owned(), event.metadata().level().to_string())];
        event.record(&mut Fields(&mut fields));
        self.events.lock().unwrap().push(fields);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

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

    let spans = recorder.spans.lock().unwrap().clone();
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

    let events = recorder.events.lock().unwrap().clone();
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
