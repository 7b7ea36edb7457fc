//! Each public pattern operation is a span of the Azure SDK conventions,
//! like a table call's (`tablekit::observe`): `tablekit.request`, named for
//! OpenTelemetry `<Type>.<method>`, kind internal, with `az.namespace`,
//! `tablekit.operation` and `tablekit.table`, and `error.type` with
//! `otel.status_code = "ERROR"` when it failed; the table calls it makes
//! are its children. Backend-independent, so it runs on the embedded store.

use crate::common;
use tablekit::filter::EntityColumns as _;
use tablekit::testing::TestEnv;
use tablekit::{DynamicEntity, QueueServiceClient, TableEntity, TableServiceClient};
use tablekit_patterns::eventual::{Eventual, OpError, StepContext, Worker};
use tablekit_patterns::index::{Index, IndexedTable};
use tablekit_patterns::log_tail::LogTail;
use tablekit_patterns::relationships::OneToMany;
use tablekit_patterns::summary::CountedPartition;
use tablekit_test_support::{field, Recorder, SpanRecord};
use tracing::instrument::WithSubscriber as _;

/// An entity value that no span nor event may carry.
const SECRET: &str = "do-not-trace@example.com";

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    email: String,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Member {
    department: String,
    employee_id: u32,
    email: String,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "Department")]
struct Department {
    department: String,
    employee_count: i32,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
enum Staff {
    Member(Member),
    Department(Department),
}

/// Runs `f` on a runtime of its own with `recorder` as the subscriber.
fn recorded<T>(recorder: &Recorder, f: impl std::future::Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(recorder.clone(), || rt.block_on(f))
}

/// The indexes in `spans` of the call spans named `otel_name`.
fn calls(spans: &[SpanRecord], otel_name: &str) -> Vec<usize> {
    spans
        .iter()
        .enumerate()
        .filter(|(_, (name, f))| {
            name == "tablekit.request" && field(f, "otel.name") == Some(otel_name)
        })
        .map(|(i, _)| i)
        .collect()
}

/// The children of span `parent` named `otel_name`.
fn children(recorder: &Recorder, parent: usize, otel_name: &str) -> Vec<usize> {
    let parents = recorder.parents();
    calls(&recorder.spans(), otel_name)
        .into_iter()
        .filter(|&i| parents[i] == Some(parent))
        .collect()
}

/// No field of any span or event holds `SECRET`.
fn assert_no_secret(recorder: &Recorder) {
    for (name, fields) in recorder.spans() {
        for (n, v) in &fields {
            assert!(!v.contains(SECRET), "span {name}: {n} = {v}");
        }
    }
    for fields in recorder.events() {
        for (n, v) in &fields {
            assert!(!v.contains(SECRET), "event: {n} = {v}");
        }
    }
}

fn employee(id: u32, email: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        employee_id: id,
        email: email.into(),
    }
}

#[test]
fn an_indexed_insert_is_a_span_whose_child_is_its_transaction() {
    let recorder = Recorder::default();
    let table_name = recorded(&recorder, async {
        let tables = TableServiceClient::embedded();
        let table = tables.table::<Employee>("Directory").unwrap();
        table.create_table().await.unwrap();
        let by_email = Index::new("email", "email_", |e: &Employee| e.email.clone());
        let directory = IndexedTable::new(table.clone())
            .unwrap()
            .with_index(&by_email)
            .unwrap();
        directory.insert(&mut employee(1, SECRET)).await.unwrap();
        assert!(directory
            .get(("Sales", "empid_000001"))
            .await
            .unwrap()
            .is_some());
        table.name().to_owned()
    });

    let spans = recorder.spans();
    let inserts = calls(&spans, "IndexedTable.insert");
    assert_eq!(inserts.len(), 1, "{spans:?}");
    let insert = &spans[inserts[0]].1;
    assert_eq!(field(insert, "otel.kind"), Some("internal"));
    assert_eq!(field(insert, "az.namespace"), Some("Microsoft.Tables"));
    assert_eq!(field(insert, "tablekit.operation"), Some("insert"));
    assert_eq!(field(insert, "tablekit.table"), Some(table_name.as_str()));
    assert_eq!(field(insert, "error.type"), None);
    assert_eq!(field(insert, "otel.status_code"), None);
    assert_eq!(
        children(&recorder, inserts[0], "Transaction.send").len(),
        1,
        "{spans:?} {:?}",
        recorder.parents()
    );
    // The read: its span, the one of the method it delegates to, and the
    // point read under that.
    let gets = calls(&spans, "IndexedTable.get");
    assert_eq!(gets.len(), 1, "{spans:?}");
    let with_etag = children(&recorder, gets[0], "IndexedTable.get_with_etag");
    assert_eq!(with_etag.len(), 1, "{spans:?}");
    assert_eq!(
        children(&recorder, with_etag[0], "TableClient.get").len(),
        1
    );
    // A table call outside any pattern operation is not a child of one.
    let parents = recorder.parents();
    for create in calls(&spans, "TableClient.create_table") {
        assert_eq!(parents[create], None);
    }
    assert_no_secret(&recorder);
}

#[test]
fn a_unique_index_conflict_records_its_error_type() {
    let recorder = Recorder::default();
    recorded(&recorder, async {
        let tables = TableServiceClient::embedded();
        let table = tables.table::<Employee>("Directory").unwrap();
        table.create_table().await.unwrap();
        let by_email = Index::new("email", "email_", |e: &Employee| e.email.clone());
        let directory = IndexedTable::new(table)
            .unwrap()
            .with_index(&by_email)
            .unwrap();
        directory.insert(&mut employee(1, SECRET)).await.unwrap();
        let err = directory
            .insert(&mut employee(2, SECRET))
            .await
            .unwrap_err();
        assert!(err.is_conflict(), "{err}");
    });

    let spans = recorder.spans();
    let inserts = calls(&spans, "IndexedTable.insert");
    assert_eq!(inserts.len(), 2, "{spans:?}");
    let (ok, failed) = (&spans[inserts[0]].1, &spans[inserts[1]].1);
    assert_eq!(field(ok, "error.type"), None);
    assert_eq!(field(failed, "error.type"), Some("409"));
    assert_eq!(field(failed, "otel.status_code"), Some("ERROR"));
    // The failed transaction is the failed operation's child, failed too.
    let sends = children(&recorder, inserts[1], "Transaction.send");
    assert_eq!(sends.len(), 1);
    assert_eq!(field(&spans[sends[0]].1, "error.type"), Some("409"));
    assert_no_secret(&recorder);
}

#[test]
fn a_move_is_a_span_when_sent_and_when_the_worker_runs_it() {
    let recorder = Recorder::default();
    recorded(&recorder, async {
        let tables = TableServiceClient::embedded();
        let queues = QueueServiceClient::embedded();
        let table = tables.table::<Staff>("Staff").unwrap();
        table.create_table().await.unwrap();
        let jobs = queues.queue("moves").unwrap();
        let poison = queues.queue("moves-poison").unwrap();
        jobs.create_queue().await.unwrap();
        poison.create_queue().await.unwrap();
        let counted = CountedPartition::new(
            table.clone(),
            "Department",
            Department::columns().employee_count,
        )
        .with_summary_property("EntityType", "Department");
        let staff = OneToMany::new(counted, jobs.clone());
        staff
            .insert(&mut Staff::Member(Member {
                department: "Sales".into(),
                employee_id: 1,
                email: SECRET.into(),
            }))
            .await
            .unwrap();
        staff
            .move_to(("Sales", "000001"), "Marketing")
            .await
            .unwrap();
        // Refused before any request: the span says why.
        let err = staff
            .move_to(("Marketing", "000001"), "Marketing")
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
        let worker = staff
            .attach(Worker::builder(jobs, tables))
            .poison_queue(poison)
            .build()
            .unwrap();
        let report = worker.drain().await.unwrap();
        assert_eq!(report.succeeded, 1);
    });

    let spans = recorder.spans();
    let parents = recorder.parents();
    let inserts = calls(&spans, "OneToMany.insert");
    assert_eq!(inserts.len(), 1, "{spans:?}");
    assert_eq!(
        children(&recorder, inserts[0], "CountedPartition.insert").len(),
        1
    );
    let moves = calls(&spans, "OneToMany.move_to");
    assert_eq!(moves.len(), 2, "{spans:?}");
    assert_eq!(field(&spans[moves[0]].1, "error.type"), None);
    // The move is sent through the worker's queue: its enqueue is a span
    // of its own, whose child is the queue call.
    let sent = children(&recorder, moves[0], "Eventual.enqueue");
    assert_eq!(sent.len(), 1, "{spans:?}");
    assert_eq!(
        children(&recorder, sent[0], "QueueClient.send_message").len(),
        1
    );
    assert_eq!(
        field(&spans[moves[1]].1, "error.type"),
        Some("invalid_input")
    );
    assert_eq!(field(&spans[moves[1]].1, "otel.status_code"), Some("ERROR"));

    let applied = calls(&spans, "OneToMany.apply_move");
    assert_eq!(applied.len(), 1, "{spans:?}");
    let apply = &spans[applied[0]].1;
    assert_eq!(field(apply, "tablekit.operation"), Some("apply_move"));
    assert_eq!(field(apply, "error.type"), None);
    // Run by the worker: a child of its run of the operation, in the
    // message's span.
    let run = parents[applied[0]].expect("the worker's span");
    assert_eq!(
        field(&spans[run].1, "otel.name"),
        Some("Worker.run_operation")
    );
    assert_eq!(field(&spans[run].1, "error.type"), None);
    let message = parents[run].expect("the message's span");
    assert_eq!(spans[message].0, "eventual.message");
    // Its two transactions, one per partition, are its children.
    assert_eq!(
        children(&recorder, applied[0], "Transaction.send").len(),
        2,
        "{spans:?} {parents:?}"
    );
    assert_no_secret(&recorder);
}

/// The same on every backend, Azurite's HTTP included: the operation's
/// span with its transaction under it, the conflict's `error.type`, and no
/// entity value in any span (`url.full` and the attempts' spans among them).
async fn an_indexed_insert_and_its_conflict_are_spans_on_every_backend(env: TestEnv) {
    let recorder = Recorder::default();
    let table = common::fresh_table::<Employee>(env.tables(), "Spans").await;
    let table_name = table.name().to_owned();
    let by_email = Index::new("email", "email_", |e: &Employee| e.email.clone());
    let directory = IndexedTable::new(table)
        .unwrap()
        .with_index(&by_email)
        .unwrap();
    async {
        directory.insert(&mut employee(1, SECRET)).await.unwrap();
        let err = directory
            .insert(&mut employee(2, SECRET))
            .await
            .unwrap_err();
        assert!(err.is_conflict(), "{err}");
    }
    .with_subscriber(recorder.clone())
    .await;

    let spans = recorder.spans();
    let inserts = calls(&spans, "IndexedTable.insert");
    assert_eq!(inserts.len(), 2, "{spans:?}");
    for &i in &inserts {
        assert_eq!(
            field(&spans[i].1, "tablekit.table"),
            Some(table_name.as_str())
        );
        assert_eq!(
            children(&recorder, i, "Transaction.send").len(),
            1,
            "{spans:?}"
        );
    }
    assert_eq!(field(&spans[inserts[0]].1, "error.type"), None);
    assert_eq!(field(&spans[inserts[1]].1, "error.type"), Some("409"));
    assert_eq!(
        field(&spans[inserts[1]].1, "otel.status_code"),
        Some("ERROR")
    );
    assert_no_secret(&recorder);
}

tablekit::testing::conformance!(an_indexed_insert_and_its_conflict_are_spans_on_every_backend);

#[test]
fn a_failed_operation_run_by_the_worker_records_its_error_type() {
    let recorder = Recorder::default();
    recorded(&recorder, async {
        let tables = TableServiceClient::embedded();
        let queues = QueueServiceClient::embedded();
        let jobs = queues.queue("jobs").unwrap();
        let poison = queues.queue("jobs-poison").unwrap();
        jobs.create_queue().await.unwrap();
        poison.create_queue().await.unwrap();
        Eventual::new(jobs.clone())
            .enqueue_kind("fails", SECRET)
            .await
            .unwrap();
        let worker = Worker::builder(jobs, tables)
            .handle("fails", |_: String, _: StepContext| async {
                Err::<(), OpError>("the step failed".into())
            })
            .poison_queue(poison)
            .build()
            .unwrap();
        let report = worker.run_once().await.unwrap();
        assert_eq!(report.failed, 1);
    });

    let spans = recorder.spans();
    let runs = calls(&spans, "Worker.run_operation");
    assert_eq!(runs.len(), 1, "{spans:?}");
    assert_eq!(field(&spans[runs[0]].1, "error.type"), Some("operation"));
    assert_eq!(field(&spans[runs[0]].1, "otel.status_code"), Some("ERROR"));
    assert_eq!(field(&spans[runs[0]].1, "tablekit.table"), None);
    assert_no_secret(&recorder);
}

#[test]
fn a_log_tail_append_is_a_span_whose_child_is_its_insert() {
    let recorder = Recorder::default();
    recorded(&recorder, async {
        let tables = TableServiceClient::embedded();
        let table = tables.table::<DynamicEntity>("Log").unwrap();
        table.create_table().await.unwrap();
        let tail = LogTail::new(table).with_prefix("");
        let mut entry = DynamicEntity::new("Sales", "0001");
        entry.set("Note", SECRET);
        tail.append(&mut entry).await.unwrap();
        let err = tail.append(&mut entry).await.unwrap_err();
        assert!(err.is_conflict(), "{err}");
    });

    let spans = recorder.spans();
    let appends = calls(&spans, "LogTail.append");
    assert_eq!(appends.len(), 2, "{spans:?}");
    for &i in &appends {
        assert_eq!(field(&spans[i].1, "tablekit.operation"), Some("append"));
        assert_eq!(children(&recorder, i, "TableClient.insert").len(), 1);
    }
    assert_eq!(field(&spans[appends[0]].1, "error.type"), None);
    assert_eq!(field(&spans[appends[1]].1, "error.type"), Some("409"));
    assert_no_secret(&recorder);
}

/// The children of span `parent` whose `otel.name` starts with `prefix`.
fn children_named(recorder: &Recorder, parent: usize, prefix: &str) -> Vec<String> {
    let parents = recorder.parents();
    recorder
        .spans()
        .iter()
        .enumerate()
        .filter(|(i, _)| parents[*i] == Some(parent))
        .filter_map(|(_, (_, f))| field(f, "otel.name").map(str::to_owned))
        .filter(|name| name.starts_with(prefix))
        .collect()
}

#[test]
fn queue_and_blob_operations_and_compound_reads_are_spans_too() {
    let recorder = Recorder::default();
    recorded(&recorder, async {
        let queues = QueueServiceClient::embedded();
        let jobs = queues.queue("jobs").unwrap();
        jobs.create_queue().await.unwrap();
        let eventual = Eventual::new(jobs);
        eventual
            .enqueue_kind("tablekit.test", &serde_json::json!({ "email": SECRET }))
            .await
            .unwrap();
        let refused = eventual.enqueue_kind("", &1).await.unwrap_err();
        assert!(refused.is_invalid_input(), "{refused}");

        let blobs = tablekit::BlobServiceClient::embedded();
        let logs = blobs.container("logs").unwrap();
        logs.create_container().await.unwrap();
        let mut writer =
            tablekit_patterns::log_data::LogWriter::<serde_json::Value>::new(logs.clone(), "web")
                .unwrap();
        let t = chrono::DateTime::parse_from_rfc3339("2024-05-01T10:00:00Z")
            .unwrap()
            .to_utc();
        writer
            .append(t, &serde_json::json!({ "user": SECRET }))
            .unwrap();
        writer.flush().await.unwrap().expect("a blob was written");
        let reader =
            tablekit_patterns::log_data::LogReader::<serde_json::Value>::new(logs, "web").unwrap();
        assert_eq!(
            reader
                .blobs(t..t + chrono::Duration::hours(1))
                .await
                .unwrap()
                .len(),
            1
        );

        let tables = TableServiceClient::embedded();
        let table = tables.table::<DynamicEntity>("Family").unwrap();
        table.create_table().await.unwrap();
        table
            .insert(&DynamicEntity::new("p", "parent").with("Note", SECRET))
            .await
            .unwrap();
        let family = tablekit_patterns::compound::family("parent");
        let rows = tablekit_patterns::compound::read(&table, "p", &family)
            .await
            .unwrap();
        assert_eq!(rows.len(), 1);
    });

    let spans = recorder.spans();
    let enqueues = calls(&spans, "Eventual.enqueue");
    assert_eq!(enqueues.len(), 2, "{spans:?}");
    assert_eq!(
        field(&spans[enqueues[0]].1, "az.namespace"),
        Some("Microsoft.Storage")
    );
    assert_eq!(
        children_named(&recorder, enqueues[0], "QueueClient."),
        ["QueueClient.send_message"]
    );
    assert_eq!(
        field(&spans[enqueues[1]].1, "error.type"),
        Some("invalid_input")
    );

    let flushes = calls(&spans, "LogWriter.flush");
    assert_eq!(flushes.len(), 1, "{spans:?}");
    assert!(
        !children_named(&recorder, flushes[0], "BlobClient.").is_empty()
            || !children_named(&recorder, flushes[0], "ContainerClient.").is_empty(),
        "{spans:?}"
    );
    let listings = calls(&spans, "LogReader.blobs");
    assert_eq!(listings.len(), 1, "{spans:?}");
    assert!(
        !children_named(&recorder, listings[0], "").is_empty(),
        "{spans:?}"
    );

    let reads = calls(&spans, "compound.read");
    assert_eq!(reads.len(), 1, "{spans:?}");
    assert_eq!(field(&spans[reads[0]].1, "tablekit.table"), Some("Family"));
    assert_eq!(
        field(&spans[reads[0]].1, "az.namespace"),
        Some("Microsoft.Tables")
    );
    assert_eq!(children(&recorder, reads[0], "Query.page").len(), 1);
    assert_no_secret(&recorder);
}
