//! What the test suites of the workspace share; a dev-dependency of
//! `tablekit-patterns` and `tablekit-tests`, never published.
//!
//! [`Recorder`] is a `tracing` subscriber that keeps every span and event as
//! text, for the tests of what tablekit and its patterns report.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A span's or an event's `(field, value)` pairs, in the order recorded.
pub type FieldList = Vec<(String, String)>;

/// A span's name and its fields (those recorded after it was created too).
pub type SpanRecord = (String, FieldList);

/// A subscriber that records every span (its name and fields) and every
/// event (its level, as the field `level`, then its fields), values as text.
/// Clones share the records: install one with
/// `tracing::subscriber::with_default(recorder.clone(), ..)` and read the
/// other afterwards.
#[derive(Default, Clone)]
pub struct Recorder {
    spans: Arc<Mutex<Vec<SpanRecord>>>,
    events: Arc<Mutex<Vec<FieldList>>>,
    /// The parent of each span: its index in `spans`.
    parents: Arc<Mutex<Vec<Option<usize>>>>,
    /// The spans each thread is in (entered, not yet exited), innermost
    /// last.
    entered: Arc<Mutex<HashMap<ThreadId, Vec<usize>>>>,
}

impl Recorder {
    /// The spans so far, in the order they were created.
    pub fn spans(&self) -> Vec<SpanRecord> {
        self.spans.lock().unwrap().clone()
    }

    /// The parent of each span of [`spans`](Self::spans), as its index
    /// there: the span given as its parent, or else the innermost span its
    /// thread was in when it was created (`None` for a root).
    pub fn parents(&self) -> Vec<Option<usize>> {
        self.parents.lock().unwrap().clone()
    }

    /// The events so far, in order.
    pub fn events(&self) -> Vec<FieldList> {
        self.events.lock().unwrap().clone()
    }
}

/// The value last recorded for the field `name`, if any.
pub fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

struct Fields<'a>(&'a mut FieldList);

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
        let parent = if attrs.is_root() {
            None
        } else if let Some(id) = attrs.parent() {
            Some(id.into_u64() as usize - 1)
        } else {
            let entered = self.entered.lock().unwrap();
            entered
                .get(&std::thread::current().id())
                .and_then(|stack| stack.last().copied())
        };
        spans.push((attrs.metadata().name().to_owned(), fields));
        self.parents.lock().unwrap().push(parent);
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
    fn enter(&self, id: &Id) {
        let mut entered = self.entered.lock().unwrap();
        entered
            .entry(std::thread::current().id())
            .or_default()
            .push(id.into_u64() as usize - 1);
    }
    fn exit(&self, id: &Id) {
        let mut entered = self.entered.lock().unwrap();
        if let Some(stack) = entered.get_mut(&std::thread::current().id()) {
            let index = id.into_u64() as usize - 1;
            if let Some(at) = stack.iter().rposition(|&i| i == index) {
                stack.remove(at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_keep_later_fields_and_events_their_level() {
        let recorder = Recorder::default();
        tracing::subscriber::with_default(recorder.clone(), || {
            let span = tracing::info_span!("op", table = "T", status = tracing::field::Empty);
            span.record("status", 204);
            let _entered = span.enter();
            tracing::warn!(reason = "r", "went wrong");
        });
        let spans = recorder.spans();
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].0, "op");
        assert_eq!(field(&spans[0].1, "table"), Some("T"));
        assert_eq!(field(&spans[0].1, "status"), Some("204"));
        let events = recorder.events();
        assert_eq!(events.len(), 1);
        assert_eq!(field(&events[0], "level"), Some("WARN"));
        assert_eq!(field(&events[0], "reason"), Some("r"));
        assert_eq!(field(&events[0], "message"), Some("went wrong"));
        assert_eq!(field(&events[0], "missing"), None);
    }

    #[test]
    fn a_span_made_inside_another_is_its_child() {
        let recorder = Recorder::default();
        tracing::subscriber::with_default(recorder.clone(), || {
            let outer = tracing::info_span!("outer");
            let _before = tracing::info_span!("before");
            let entered = outer.enter();
            let _inner = tracing::info_span!("inner");
            drop(entered);
            let _after = tracing::info_span!("after");
        });
        assert_eq!(recorder.parents(), [None, None, Some(0), None]);
    }
}
