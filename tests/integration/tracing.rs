//! Each request is a `tablekit.request` span with the operation, table, HTTP
//! method, status, request id and duration, and nothing secret or from the entity.

use crate::common;

use std::sync::{Arc, Mutex};

use tablekit::{DynamicEntity, IfMatch};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A span's name and its `(field, value)` pairs.
type SpanRecord = (String, Vec<(String, String)>);

/// Records every span's name and fields, and every event's fields, as text.
#[derive(Default, Clone)]
struct Recorder {
    spans: Arc<Mutex<Vec<SpanRecord>>>,
    events: Arc<Mutex<Vec<String>>>,
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
        let mut fields = Vec::new();
        event.record(&mut Fields(&mut fields));
        self.events.lock().unwrap().push(format!("{fields:?}"));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn requests_are_spans_with_status_and_request_id_but_no_secrets_or_values() {
    let Some(svc) = common::service() else { return };
    let recorder = Recorder::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(recorder.clone(), || {
        rt.block_on(async {
            let table = common::fresh_table::<DynamicEntity>(&svc, "Traced").await;
            table
                .insert(&DynamicEntity::new("p", "r").with("Secret", "entity-content-xyz"))
                .await
                .unwrap();
            let missing = table.delete(("p", "nope"), IfMatch::Any).await.unwrap_err();
            assert!(missing.is_not_found());
            common::drop_table(&table).await;
        })
    });

    let spans = recorder.spans.lock().unwrap();
    let requests: Vec<_> = spans
        .iter()
        .filter(|(name, _)| name == "tablekit.request")
        .map(|(_, f)| f)
        .collect();
    let field = |fields: &Vec<(String, String)>, name: &str| {
        fields
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let insert = requests
        .iter()
        .find(|f| field(f, "operation").as_deref() == Some("insert"))
        .expect("an insert span");
    assert_eq!(field(insert, "method").as_deref(), Some("POST"));
    assert_eq!(field(insert, "status").as_deref(), Some("204"));
    assert!(field(insert, "table").is_some_and(|t| t.starts_with("Traced")));
    assert!(field(insert, "request_id").is_some_and(|id| !id.is_empty()));
    assert!(field(insert, "duration_us").is_some());

    let delete = requests
        .iter()
        .find(|f| field(f, "operation").as_deref() == Some("delete"))
        .expect("a delete span");
    assert_eq!(field(delete, "method").as_deref(), Some("DELETE"));
    assert_eq!(field(delete, "status").as_deref(), Some("404"));

    let everything = format!("{spans:?} {:?}", recorder.events.lock().unwrap());
    assert!(!everything.contains(common::KEY_FRAGMENT), "no account key");
    assert!(!everything.contains("SharedKey"), "no signature");
    assert!(
        !everything.contains("entity-content-xyz"),
        "no entity values"
    );
}
