//! tablekit with OpenTelemetry (feature `opentelemetry`), through an
//! in-memory exporter: the spans' names, kinds, parents and attributes of an
//! insert (retried once), a transaction and a paged query; the `traceparent`
//! a loopback server receives, checked against the exported spans; the
//! metrics; and nothing secret in any of them.
//!
//! A test binary of its own: tablekit makes its instruments from the global
//! meter provider at its first request, and every test here sets that
//! provider (once, [`metrics`]) before it makes one.

#[path = "../integration/scripted.rs"]
mod scripted;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tablekit::account::{AccessToken, EntraCredential, TokenCredential, TokenRequest};
use tablekit::options::{ClientOptions, RetryPolicy};
use tablekit::{Account, Credential, DynamicEntity, TableServiceClient, UpdateMode};
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;

use scripted::{answer, Script, Seen};

const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The global meter provider of this binary and its exporter.
struct Metrics {
    provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let exporter = InMemoryMetricExporter::default();
        let reader = PeriodicReader::builder(exporter.clone()).build();
        let provider = SdkMeterProvider::builder().with_reader(reader).build();
        opentelemetry::global::set_meter_provider(provider.clone());
        Metrics { provider, exporter }
    })
}

/// Where a test's spans go, and the provider that sends them there (kept
/// while the test runs: dropping it shuts the exporter down).
struct Traced {
    exporter: InMemorySpanExporter,
    _provider: SdkTracerProvider,
}

impl Traced {
    /// The spans ended so far.
    fn spans(&self) -> Vec<SpanData> {
        self.exporter.get_finished_spans().unwrap()
    }
}

/// A subscriber whose spans go to OpenTelemetry (an in-memory exporter),
/// the default of this thread while the guard lives.
fn traced() -> (Traced, tracing::subscriber::DefaultGuard) {
    metrics();
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("tests")));
    let guard = tracing::subscriber::set_default(subscriber);
    (
        Traced {
            exporter,
            _provider: provider,
        },
        guard,
    )
}

fn options() -> ClientOptions {
    let mut options = ClientOptions::default();
    options.http.retry = RetryPolicy {
        max_retries: 2,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(1),
    };
    options.http.timeout = Duration::from_secs(10);
    options
}

fn key_account(endpoint: &str) -> Account {
    Account::from_connection_string(&format!(
        "AccountName=devstoreaccount1;AccountKey={KEY};TableEndpoint={endpoint}"
    ))
    .unwrap()
}

/// An attribute's value as text.
fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

const BATCH: &str = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_1\r\n\r\n--changesetresponse_1\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 204 No Content\r\nETag: W/\"x\"\r\n\r\n\r\n--changesetresponse_1--\r\n--batchresponse_1--\r\n";

/// The scripted service: the first request is answered 503 (throttled), an
/// insert 204, a transaction with one part, a query's first page with a
/// continuation and its second without.
fn service() -> Script {
    Arc::new(|n, seen: &Seen| {
        if n == 0 {
            return answer("503 Server Busy", &[], "");
        }
        match seen.method() {
            "POST" if seen.target().contains("$batch") => format!(
                "HTTP/1.1 202 Accepted\r\nConnection: close\r\nx-ms-request-id: scripted\r\nContent-Type: multipart/mixed; boundary=batchresponse_1\r\nContent-Length: {}\r\n\r\n{BATCH}",
                BATCH.len()
            ),
            "POST" => answer("204 No Content", &[("ETag", "W/\"1\"")], ""),
            _ if seen.target().contains("NextPartitionKey") => answer(
                "200 OK",
                &[],
                r#"{"value":[{"PartitionKey":"p","RowKey":"b"}]}"#,
            ),
            _ => answer(
                "200 OK",
                &[
                    ("x-ms-continuation-NextPartitionKey", "p"),
                    ("x-ms-continuation-NextRowKey", "b"),
                ],
                r#"{"value":[{"PartitionKey":"p","RowKey":"a"}]}"#,
            ),
        }
    })
}

#[tokio::test]
async fn spans_parents_attributes_and_the_traceparent_on_the_wire() {
    let (spans, guard) = traced();
    let (endpoint, seen) = scripted::serve(service()).await;
    let svc = TableServiceClient::with_options(key_account(&endpoint), options()).unwrap();
    let table = svc.table::<DynamicEntity>("Spans").unwrap();
    async {
        table.insert(&DynamicEntity::new("p", "r")).await.unwrap();
        let mut tx = table.transaction();
        tx.insert(&DynamicEntity::new("p", "t")).unwrap();
        tx.send().await.unwrap();
        let all = table.query().fetch_all().await.unwrap();
        assert_eq!(all.len(), 2, "two pages");
    }
    .instrument(tracing::info_span!("test.root"))
    .await;
    drop(guard);

    let mut spans = spans.spans();
    spans.sort_by_key(|s| s.start_time);
    let root = spans.iter().find(|s| s.name == "test.root").unwrap();
    let trace = root.span_context.trace_id();
    assert!(spans.iter().all(|s| s.span_context.trace_id() == trace));

    // The public calls: internal, children of the caller's span.
    let calls: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.parent_span_id == root.span_context.span_id())
        .collect();
    let names: Vec<&str> = calls.iter().map(|s| &*s.name).collect();
    assert_eq!(
        names,
        [
            "TableClient.insert",
            "Transaction.send",
            "Query.page",
            "Query.page"
        ]
    );
    for call in &calls {
        assert_eq!(call.span_kind, SpanKind::Internal, "{}", call.name);
        assert_eq!(
            attr(call, "az.namespace").as_deref(),
            Some("Microsoft.Tables")
        );
        assert_eq!(attr(call, "tablekit.table").as_deref(), Some("Spans"));
    }

    // The attempts: client spans named by the method, children of their call.
    let attempts: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.span_kind == SpanKind::Client)
        .collect();
    let shape: Vec<(&str, &str, Option<String>)> = attempts
        .iter()
        .map(|a| {
            let parent = calls
                .iter()
                .find(|c| c.span_context.span_id() == a.parent_span_id)
                .map_or("?", |c| &*c.name);
            (&*a.name, parent, attr(a, "http.response.status_code"))
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("POST", "TableClient.insert", Some("503".to_owned())),
            ("POST", "TableClient.insert", Some("204".to_owned())),
            ("POST", "Transaction.send", Some("202".to_owned())),
            ("GET", "Query.page", Some("200".to_owned())),
            ("GET", "Query.page", Some("200".to_owned())),
        ]
    );
    let port = endpoint
        .trim_start_matches("http://127.0.0.1:")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let (first, retried) = (attempts[0], attempts[1]);
    assert_eq!(attr(first, "error.type").as_deref(), Some("503"));
    assert!(matches!(first.status, Status::Error { .. }));
    assert_eq!(attr(first, "http.request.resend_count"), None);
    assert_eq!(
        attr(retried, "http.request.resend_count").as_deref(),
        Some("1")
    );
    assert_eq!(attr(retried, "error.type"), None);
    assert_eq!(
        attr(first, "az.client_request_id"),
        attr(retried, "az.client_request_id"),
        "one client request id per call"
    );
    for a in &attempts {
        assert_eq!(attr(a, "az.namespace").as_deref(), Some("Microsoft.Tables"));
        assert_eq!(
            attr(a, "az.service_request.id").as_deref(),
            Some("scripted")
        );
        assert_eq!(attr(a, "http.request.method").as_deref(), Some(&*a.name));
        assert_eq!(attr(a, "server.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(attr(a, "server.port"), Some(port.clone()));
        let url = attr(a, "url.full").unwrap();
        assert!(
            url.starts_with(&format!("http://127.0.0.1:{port}/devstoreaccount1/")),
            "{url}"
        );
    }
    assert!(attr(attempts[4], "url.full")
        .unwrap()
        .contains("NextPartitionKey=REDACTED"));

    // What the server received: each attempt's own trace context.
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), attempts.len());
    assert!(String::from_utf8_lossy(&seen[2].body).contains("changeset"));
    for (request, attempt) in seen.iter().zip(&attempts) {
        let sc = &attempt.span_context;
        assert_eq!(
            request.header("traceparent"),
            Some(format!("00-{}-{}-01", sc.trace_id(), sc.span_id()).as_str()),
            "{}",
            request.line
        );
    }
}

/// Without an OpenTelemetry layer (no subscriber at all), no trace context
/// goes on the wire.
#[tokio::test]
async fn no_traceparent_without_a_context() {
    metrics();
    let (endpoint, seen) = scripted::serve(Arc::new(|_, _: &Seen| {
        answer("204 No Content", &[("ETag", "W/\"1\"")], "")
    }))
    .await;
    let svc = TableServiceClient::with_options(key_account(&endpoint), options()).unwrap();
    let table = svc.table::<DynamicEntity>("Untraced").unwrap();
    table.insert(&DynamicEntity::new("p", "r")).await.unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("traceparent"), None);
}

/// The sum of the data points of the metric `name` whose attributes include
/// `having`, as `f64` (a histogram's count).
fn metric_total(name: &str, having: &[KeyValue]) -> f64 {
    let m = metrics();
    m.provider.force_flush().unwrap();
    let mut total = 0.0;
    let finished = m.exporter.get_finished_metrics().unwrap();
    // Cumulative: the last export holds every count so far.
    let Some(last) = finished.last() else {
        return 0.0;
    };
    let matches = |attrs: Vec<&KeyValue>| having.iter().all(|h| attrs.contains(&h));
    for scope in last.scope_metrics() {
        for metric in scope.metrics().filter(|m| m.name() == name) {
            match metric.data() {
                AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                    for p in sum.data_points() {
                        if matches(p.attributes().collect()) {
                            total += p.value() as f64;
                        }
                    }
                }
                AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                    for p in h.data_points() {
                        if matches(p.attributes().collect()) {
                            total += p.count() as f64;
                        }
                    }
                }
                other => panic!("{name}: {other:?}"),
            }
        }
    }
    total
}

#[tokio::test]
async fn metrics_count_attempts_retries_throttling_and_what_stats_counts() {
    metrics();
    let (endpoint, _seen) = scripted::serve(service()).await;
    let port = endpoint
        .trim_start_matches("http://127.0.0.1:")
        .split('/')
        .next()
        .unwrap()
        .parse::<i64>()
        .unwrap();
    let svc = TableServiceClient::with_options(key_account(&endpoint), options()).unwrap();
    let table = svc.table::<DynamicEntity>("Metered").unwrap();
    table.insert(&DynamicEntity::new("p", "r")).await.unwrap();
    assert_eq!(table.query().fetch_all().await.unwrap().len(), 2);

    let here = KeyValue::new("server.port", port);
    let insert = KeyValue::new("tablekit.operation", "insert");
    let duration = "http.client.request.duration";
    assert_eq!(
        metric_total(duration, std::slice::from_ref(&here)),
        4.0,
        "four attempts"
    );
    assert_eq!(
        metric_total(
            duration,
            &[
                here.clone(),
                insert.clone(),
                KeyValue::new("http.response.status_code", 503i64)
            ]
        ),
        1.0
    );
    assert_eq!(
        metric_total(
            duration,
            &[
                here,
                KeyValue::new("tablekit.operation", "query"),
                KeyValue::new("http.response.status_code", 200i64)
            ]
        ),
        2.0
    );
    // Retries and throttled answers are counted per operation, for every
    // client of the process: this test's are among them.
    assert!(metric_total("tablekit.retries", std::slice::from_ref(&insert)) >= 1.0);
    assert!(metric_total("tablekit.throttled", &[insert]) >= 1.0);
    let metered = KeyValue::new("tablekit.table", "Metered");
    assert_eq!(
        metric_total(
            "tablekit.table.requests",
            &[metered.clone(), KeyValue::new("outcome", "ok")]
        ),
        3.0,
        "the insert and two pages"
    );
    assert_eq!(
        metric_total(
            "tablekit.table.entities",
            &[metered.clone(), KeyValue::new("direction", "read")]
        ),
        2.0
    );
    assert_eq!(
        metric_total(
            "tablekit.table.entities",
            &[metered.clone(), KeyValue::new("direction", "written")]
        ),
        1.0
    );
    assert!(
        metric_total(
            "tablekit.table.bytes",
            &[metered, KeyValue::new("direction", "up")]
        ) > 0.0
    );
}

/// A token credential handing out one known bearer token.
#[derive(Debug)]
struct Token;

const TOKEN: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJub25lIn0.b3RlbC1iZWFyZXI.c2ln";
const SIG: &str = "b3RlbC1zaWduYXR1cmU%3D";

#[async_trait::async_trait]
impl TokenCredential for Token {
    async fn get_token(&self, _: &TokenRequest) -> tablekit::Result<AccessToken> {
        Ok(AccessToken::new(
            TOKEN,
            chrono::Utc::now() + chrono::Duration::hours(1),
        ))
    }
}

/// No SAS signature and no bearer token in any exported span, event or
/// metric, while their requests (retried once each) are traced.
#[tokio::test]
async fn nothing_secret_in_exported_spans_events_or_metrics() {
    let (spans, guard) = traced();
    let script: Script = Arc::new(|n, _: &Seen| match n % 2 {
        0 => answer("503 Server Busy", &[], ""),
        _ => answer("204 No Content", &[("ETag", "W/\"1\"")], ""),
    });
    let (endpoint, seen) = scripted::serve(script).await;
    let sas = Account::from_connection_string(&format!(
        "TableEndpoint={endpoint};SharedAccessSignature=sv=2019-02-02&tn=secrets&sp=raud&se=2099-01-01&sig={SIG}"
    ))
    .unwrap();
    let bearer = key_account(&endpoint).with_credential(Credential::Bearer(
        EntraCredential::from_arc(Arc::new(Token)),
    ));
    for account in [sas, bearer] {
        let svc = TableServiceClient::with_options(account, options()).unwrap();
        let table = svc.table::<DynamicEntity>("secrets").unwrap();
        table
            .upsert(
                &DynamicEntity::new("p", "r").with("V", "entity-value-xyz"),
                UpdateMode::Replace,
            )
            .await
            .unwrap();
    }
    drop(guard);
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 4);
        assert!(seen[0].target().contains(SIG), "the SAS was sent");
        assert!(seen[2]
            .header("authorization")
            .is_some_and(|a| a.contains(TOKEN)));
    }
    let spans = spans.spans();
    assert_eq!(
        spans
            .iter()
            .filter(|s| s.span_kind == SpanKind::Client)
            .count(),
        4
    );
    let m = metrics();
    m.provider.force_flush().unwrap();
    let everything = format!("{spans:?} {:?}", m.exporter.get_finished_metrics().unwrap());
    assert!(everything.contains("sig=REDACTED"));
    for secret in [
        SIG,
        "b3RlbC1zaWduYXR1cmU",
        TOKEN,
        "b3RlbC1iZWFyZXI",
        KEY,
        "entity-value-xyz",
    ] {
        assert!(!everything.contains(secret), "{secret} in {everything}");
    }
    // The attribute values are text or numbers the exporter can take.
    assert!(spans.iter().flat_map(|s| &s.attributes).all(|kv| matches!(
        kv.value,
        Value::String(_) | Value::I64(_) | Value::Bool(_) | Value::F64(_)
    )));
}

/// An insert whose answers are lost (500) is ambiguous, and the read-back
/// settles it as applied: both are counted.
#[tokio::test]
async fn ambiguous_writes_and_their_settlement_are_counted() {
    metrics();
    let before = (
        metric_total(
            "tablekit.ambiguous",
            &[KeyValue::new("tablekit.operation", "insert")],
        ),
        metric_total(
            "tablekit.settled",
            &[
                KeyValue::new("tablekit.operation", "insert"),
                KeyValue::new("outcome", "applied"),
            ],
        ),
    );
    let script: Script = Arc::new(|_, seen: &Seen| match seen.method() {
        "POST" => answer("500 Internal Server Error", &[], ""),
        _ => answer(
            "200 OK",
            &[("ETag", "W/\"1\"")],
            r#"{"PartitionKey":"p","RowKey":"r","Timestamp":"2024-01-01T00:00:00Z"}"#,
        ),
    });
    let (endpoint, _seen) = scripted::serve(script).await;
    let svc = TableServiceClient::with_options(key_account(&endpoint), options()).unwrap();
    let table = svc.table::<DynamicEntity>("Settled").unwrap();
    let written = table.insert(&DynamicEntity::new("p", "r")).await.unwrap();
    assert!(written.confirmed_by_read_back());
    let after = (
        metric_total(
            "tablekit.ambiguous",
            &[KeyValue::new("tablekit.operation", "insert")],
        ),
        metric_total(
            "tablekit.settled",
            &[
                KeyValue::new("tablekit.operation", "insert"),
                KeyValue::new("outcome", "applied"),
            ],
        ),
    );
    // Other tests of this binary may add theirs at the same time: at least ours.
    assert!(after.0 > before.0, "{before:?} {after:?}");
    assert!(after.1 > before.1, "{before:?} {after:?}");
}
