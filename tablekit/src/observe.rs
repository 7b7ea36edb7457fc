//! What tablekit reports of its requests, the way the Azure SDKs and
//! OpenTelemetry define it.
//!
//! # Spans
//!
//! Two levels of `tracing` spans, as the Azure SDK conventions have them:
//!
//! - one per public call, named `tablekit.request` for `tracing` and, for
//!   OpenTelemetry (`otel.name`), after the call: `TableClient.insert`,
//!   `TableClient.get`, `Query.page` (one per page of a query),
//!   `Transaction.send`, `QueueClient.send_message`, ... Kind internal, with
//!   `az.namespace`, `tablekit.operation` and `tablekit.table`, and
//!   `error.type` and `otel.status_code = "ERROR"` when the call failed. The
//!   embedded store's calls (tables, queues and blobs) have it too: a trace
//!   looks the same in tests and in production. Table calls get it from the
//!   client's counting layer (`table::stats::Counted`), queue and blob calls
//!   from `backend::traced`; the service and account calls of `acl` and
//!   `service_properties` over HTTP from the pipeline's caller. The
//!   operations of `tablekit-patterns` have the same span, named for their
//!   type and method (`IndexedTable.insert`, `CountedPartition.insert`,
//!   `Denormalized.assign`, `LogTail.append`, `OneToMany.move_to`,
//!   `OneToMany.apply_move`, the worker's `Worker.run_operation`, ...), through
//!   [`pattern_span`] and [`end_call`]: the table calls an operation makes
//!   (its `Transaction.send`, its `TableClient.get`) are its children. The
//!   patterns' operations on queues and blobs (`Eventual.enqueue`,
//!   `Eventual.requeue`, `LogWriter.flush`, `LogReader.blobs`) take
//!   [`storage_pattern_span`], in `Microsoft.Storage`.
//! - one per HTTP attempt, a child of the first, named by its method (`GET`,
//!   `POST`, `MERGE`, ...), kind client (`otel.kind = "client"`), with
//!   `az.namespace`, `az.client_request_id`, `az.service_request.id`,
//!   `http.request.method`, `http.response.status_code`,
//!   `http.request.resend_count` (from the first retry on), `server.address`,
//!   `server.port`, `url.full` and `error.type`.
//!
//! Nothing secret and nothing of an entity is in them: `url.full` keeps the
//! values of a short list of query parameters that say how a request is made
//! (`comp`, `restype`, `$top`, `$select`, the SAS's version, services,
//! permissions and times, ...) and writes `REDACTED` for every other one,
//! `sig` and `$filter` included; headers (the `Authorization` of a key or a
//! bearer token among them) are never recorded.
//!
//! With no subscriber (or one that does not want them), the spans are
//! disabled and cost a check each: no clock read, no text made.
//!
//! # The `opentelemetry` feature
//!
//! - Trace context on the wire: every attempt carries a W3C `traceparent`
//!   (and `tracestate`, when there is one) of its own span, taken through
//!   `tracing-opentelemetry` from the span's OpenTelemetry context; an
//!   attempt with no OpenTelemetry context (no layer) sends neither.
//! - Metrics, through the OpenTelemetry metrics API (the global meter
//!   provider, meter `tablekit`), rather than the `metrics` facade: the
//!   feature already brings the OpenTelemetry API, whose instruments take the
//!   same attributes as the spans and whose exporters (OTLP, Azure Monitor,
//!   Prometheus) the services that trace with it already run; the facade
//!   would be a second dependency and a second way to configure, and its
//!   exporters would have to map its labels back to OpenTelemetry's. The
//!   instruments are made at the first request: set the global meter provider
//!   before it.
//!
//!   | instrument | kind | attributes |
//!   | --- | --- | --- |
//!   | `http.client.request.duration` (s) | histogram, per attempt | `tablekit.operation`, `http.request.method`, `http.response.status_code` or `error.type`, `server.address`, `server.port` |
//!   | `tablekit.retries` | counter | `tablekit.operation` |
//!   | `tablekit.throttled` | counter, answers 429 / 503 | `tablekit.operation` |
//!   | `tablekit.ambiguous` | counter, attempts' calls whose outcome is unknown (before any read-back) | `tablekit.operation` |
//!   | `tablekit.settled` | counter, ambiguous table writes settled by reading them back | `tablekit.operation`, `outcome` (`applied`, `not_applied`, `unknown` when the read-back failed) |
//!   | `tablekit.table.requests` | counter, billable requests as `Stats` counts them | `tablekit.request_kind` (`Insert`, `Get`, `QueryPage`, ...), `tablekit.table`, `outcome` (`ok`, `failed`, `throttled`) |
//!   | `tablekit.table.entities` | counter | `direction` (`written`, `read`), `tablekit.table` |
//!   | `tablekit.table.bytes` | counter | `direction` (`up`, `down`), `tablekit.table` |
//!
//!   A rate (entities per second of a bulk load, whose batches are table
//!   requests like any other; throttled answers per minute) is the
//!   exporter's or the backend's: these are monotonic counters.
//!
//! The feature is off by default; without it none of this is compiled.
//!
//! # What it costs
//!
//! Measured with `benches/benches/floor.rs` (`FLOOR_MODE=pair` against
//! Azurite: tablekit's inserts, point reads and upsert-merges alternating
//! with a bare hyper loop in one process), the median of 36 per-round CPU
//! ratios tablekit / floor, quartiles in brackets, one run alternating the
//! builds on 2 shared cores under other builds:
//!
//! | build | CPU, tablekit / floor |
//! |---|---|
//! | the spans, no subscriber, feature off | 1.127 [1.074-1.219] |
//! | feature on, no subscriber, no meter provider | 1.145 [1.044-1.383] |
//!
//! On / off: 1.016, within this machine's noise (a second run: 1.027,
//! before the metrics' attributes stopped allocating). With the feature off
//! nothing of it is compiled, and a disabled span is a check; with it on and
//! no meter provider, each attempt still reads the clock once and hands its
//! attributes (on the stack, names shared) to the no-op instruments. And the
//! spans themselves, against the build before them (no per-attempt span, the
//! old `tablekit.request` fields): 1.125 after, 1.116 before, in one run.

use std::fmt::Write as _;

use http::Method;

use crate::backend::Operation;
use crate::error::{Error, ErrorKind};

/// `az.namespace` of the Table service.
pub(crate) const TABLES: &str = "Microsoft.Tables";
/// `az.namespace` of the Queue and Blob services.
pub(crate) const STORAGE: &str = "Microsoft.Storage";

/// The public-call span of `client`'s `method` (its OpenTelemetry name is
/// `client.method`, such as `TableClient.insert`), for `operation` on
/// `table` (if any).
pub(crate) fn call_span(
    client: &'static str,
    method: &'static str,
    namespace: &'static str,
    operation: &'static str,
    table: Option<&str>,
) -> tracing::Span {
    tracing::info_span!(
        "tablekit.request",
        otel.name = format_args!("{client}.{method}"),
        otel.kind = "internal",
        otel.status_code = tracing::field::Empty,
        az.namespace = namespace,
        tablekit.operation = operation,
        tablekit.table = table,
        error.type = tracing::field::Empty,
    )
}

/// The span of a public operation of a pattern (`tablekit-patterns`), the
/// same as a table call's: named `tablekit.request` for `tracing` and
/// `pattern.method` for OpenTelemetry (`otel.name`, such as
/// `IndexedTable.insert`), kind internal, `az.namespace =
/// "Microsoft.Tables"`, `tablekit.operation = method` and `tablekit.table`
/// when the operation works on one table.
///
/// Run the operation in it (`tracing::Instrument`) so the table calls it
/// makes are its children, and end it with [`end_call`]. Disabled (no
/// subscriber wants it), it is a check: nothing is formatted or allocated.
pub fn pattern_span(
    pattern: &'static str,
    method: &'static str,
    table: Option<&str>,
) -> tracing::Span {
    call_span(pattern, method, TABLES, method, table)
}

/// [`pattern_span`] for a pattern operation on queues or blobs (an
/// enqueue, a log flush): `az.namespace = "Microsoft.Storage"` and no
/// table.
pub fn storage_pattern_span(pattern: &'static str, method: &'static str) -> tracing::Span {
    call_span(pattern, method, STORAGE, method, None)
}

/// The public-call span of a table operation.
pub(crate) fn table_call_span(op: &Operation<'_>) -> tracing::Span {
    let (client, method) = match op {
        Operation::ListTables { .. } => ("TableServiceClient", "list_tables"),
        Operation::Query { .. } => ("Query", "page"),
        Operation::Transaction { .. } => ("Transaction", "send"),
        _ => ("TableClient", op.name()),
    };
    call_span(client, method, TABLES, op.name(), op.table())
}

/// Records the end of a call on its span (such as a [`pattern_span`]):
/// `error.type` (the status of the service's answer, such as `409`, or what
/// failed, such as `invalid_input`) and `otel.status_code = "ERROR"`, if it
/// failed; nothing if it succeeded or the span is disabled.
pub fn end_call<T>(span: &tracing::Span, result: &crate::Result<T>) {
    if let Err(e) = result {
        if !span.is_disabled() {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", error_type(e).as_ref());
        }
    }
}

/// `error.type` of `e`, as [`end_call`] records it: the status of a
/// service's answer (`404`, `503`), or what failed (`timeout`, `transport`,
/// `invalid_input`, `decode`, ...). Never anything of the request.
pub fn error_type(e: &Error) -> std::borrow::Cow<'static, str> {
    if let Some(status) = e.status() {
        return status.to_string().into();
    }
    match e.kind() {
        ErrorKind::Transport(_) if e.is_timeout() => "timeout",
        ErrorKind::Transport(_) => "transport",
        ErrorKind::Invalid(_) => "invalid_input",
        ErrorKind::Service(_) => "service",
        ErrorKind::Decode(_) => "decode",
        ErrorKind::Config(_) => "config",
        ErrorKind::NoEntity(_) => "no_entity",
        ErrorKind::Constraint(_) => "constraint",
        ErrorKind::Credential(_) => "credential",
    }
    .into()
}

/// `method`'s name, for the spans' names and the metrics' attributes.
pub(crate) fn method_name(method: &Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "MERGE" => "MERGE",
        "HEAD" => "HEAD",
        "PATCH" => "PATCH",
        "OPTIONS" => "OPTIONS",
        _ => "_OTHER",
    }
}

/// The span of one HTTP attempt of `method`: a child of the current span
/// (the call's).
pub(crate) fn attempt_span(
    method: &Method,
    namespace: &'static str,
    client_request_id: &str,
    host: &str,
    port: u16,
    resend: u32,
) -> tracing::Span {
    macro_rules! span {
        ($name:literal) => {
            tracing::info_span!(
                $name,
                otel.kind = "client",
                otel.status_code = tracing::field::Empty,
                az.namespace = namespace,
                az.client_request_id = client_request_id,
                az.service_request.id = tracing::field::Empty,
                http.request.method = method.as_str(),
                http.response.status_code = tracing::field::Empty,
                http.request.resend_count = (resend > 0).then_some(resend),
                server.address = host,
                server.port = port,
                url.full = tracing::field::Empty,
                error.type = tracing::field::Empty,
            )
        };
    }
    match method_name(method) {
        "GET" => span!("GET"),
        "POST" => span!("POST"),
        "PUT" => span!("PUT"),
        "DELETE" => span!("DELETE"),
        "MERGE" => span!("MERGE"),
        "HEAD" => span!("HEAD"),
        "PATCH" => span!("PATCH"),
        "OPTIONS" => span!("OPTIONS"),
        _ => span!("HTTP"),
    }
}

/// Query parameters whose values say how a request is made, not what it is
/// about nor who may make it: `url.full` keeps them, and only them.
const KEPT: [&str; 22] = [
    "comp",
    "restype",
    "timeout",
    "$top",
    "$select",
    "sv",
    "ss",
    "srt",
    "sp",
    "se",
    "st",
    "spr",
    "sr",
    "sip",
    "si",
    "tn",
    "numofmessages",
    "visibilitytimeout",
    "messagettl",
    "peekonly",
    "maxresults",
    "include",
];

/// `url.full`: `prefix` (`scheme://authority`) and `target` (path and
/// query as sent), every query value not in [`KEPT`] written `REDACTED`.
pub(crate) fn redacted_url(prefix: &str, target: &str) -> String {
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    let mut url = String::with_capacity(prefix.len() + target.len() + 16);
    url.push_str(prefix);
    url.push_str(path);
    if let Some(query) = query {
        for (i, pair) in query.split('&').enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decoded = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
            if KEPT.iter().any(|k| k.eq_ignore_ascii_case(&decoded)) {
                let _ = write!(url, "{name}={value}");
            } else {
                let _ = write!(url, "{name}=REDACTED");
            }
        }
    }
    url
}

/// Records an attempt's answer on its span: its status and the service's
/// request id.
pub(crate) fn record_answer(span: &tracing::Span, status: u16, request_id: Option<&str>) {
    span.record("http.response.status_code", status);
    if let Some(id) = request_id {
        span.record("az.service_request.id", id);
    }
}

/// Records the end of an attempt on its span.
pub(crate) fn end_attempt<T>(span: &tracing::Span, result: &crate::Result<T>) {
    end_call(span, result);
}

#[cfg(feature = "opentelemetry")]
pub(crate) use self::otel::{count_page_read, count_settlement, count_table_call, inject, Meters};

#[cfg(feature = "opentelemetry")]
mod otel {
    use std::sync::OnceLock;

    use http::header::{HeaderMap, HeaderName, HeaderValue};
    use opentelemetry::metrics::{Counter, Histogram};
    use opentelemetry::trace::TraceContextExt as _;
    use opentelemetry::KeyValue;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    /// Puts the W3C `traceparent` (and `tracestate`) of `span`'s
    /// OpenTelemetry context in `headers`; nothing if it has none.
    pub(crate) fn inject(span: &tracing::Span, headers: &mut HeaderMap) {
        if span.is_disabled() {
            return;
        }
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        if !sc.is_valid() {
            return;
        }
        let parent = format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        );
        if let Ok(v) = HeaderValue::from_str(&parent) {
            headers.insert(HeaderName::from_static("traceparent"), v);
        }
        let state = sc.trace_state().header();
        if !state.is_empty() {
            if let Ok(v) = HeaderValue::from_str(&state) {
                headers.insert(HeaderName::from_static("tracestate"), v);
            }
        }
    }

    /// Counts a table call as `Stats` does: the request (by `kind`, a
    /// `RequestKind`'s name, and outcome), the entities written and read and the
    /// bytes sent and received.
    pub(crate) fn count_table_call<T>(
        kind: &'static str,
        table: &opentelemetry::StringValue,
        result: &crate::Result<T>,
        written: u64,
        read: u64,
        up: u64,
        down: u64,
    ) {
        let m = Meters::get();
        let outcome = match result {
            Ok(_) => "ok",
            Err(e) if e.is_throttled() => "throttled",
            Err(_) => "failed",
        };
        let table_kv = KeyValue::new("tablekit.table", table.clone());
        m.table_requests.add(
            1,
            &[
                KeyValue::new("tablekit.request_kind", kind),
                table_kv.clone(),
                KeyValue::new("outcome", outcome),
            ],
        );
        for (direction, n) in [("written", written), ("read", read)] {
            if n > 0 {
                m.table_entities.add(
                    n,
                    &[KeyValue::new("direction", direction), table_kv.clone()],
                );
            }
        }
        for (direction, n) in [("up", up), ("down", down)] {
            if n > 0 {
                m.table_bytes.add(
                    n,
                    &[KeyValue::new("direction", direction), table_kv.clone()],
                );
            }
        }
    }

    /// Counts an ambiguous table write settled by reading it back: `outcome`
    /// is `applied`, `not_applied` or `unknown` (the read-back failed).
    pub(crate) fn count_settlement(operation: &'static str, outcome: &'static str) {
        Meters::get().settled.add(
            1,
            &[
                KeyValue::new("tablekit.operation", operation),
                KeyValue::new("outcome", outcome),
            ],
        );
    }

    /// Counts the entities of a query's page, read from `table`.
    pub(crate) fn count_page_read(table: &opentelemetry::StringValue, entities: u64) {
        if entities > 0 {
            Meters::get().table_entities.add(
                entities,
                &[
                    KeyValue::new("direction", "read"),
                    KeyValue::new("tablekit.table", table.clone()),
                ],
            );
        }
    }

    /// tablekit's instruments, made once from the global meter provider.
    pub(crate) struct Meters {
        pub(crate) duration: Histogram<f64>,
        pub(crate) retries: Counter<u64>,
        pub(crate) throttled: Counter<u64>,
        pub(crate) ambiguous: Counter<u64>,
        pub(crate) settled: Counter<u64>,
        pub(crate) table_requests: Counter<u64>,
        pub(crate) table_entities: Counter<u64>,
        pub(crate) table_bytes: Counter<u64>,
    }

    impl Meters {
        /// The instruments (made at the first call).
        pub(crate) fn get() -> &'static Meters {
            static METERS: OnceLock<Meters> = OnceLock::new();
            METERS.get_or_init(|| {
                let meter = opentelemetry::global::meter("tablekit");
                Meters {
                    duration: meter
                        .f64_histogram("http.client.request.duration")
                        .with_unit("s")
                        .with_description("The duration of one HTTP attempt")
                        .build(),
                    retries: meter
                        .u64_counter("tablekit.retries")
                        .with_description("Attempts sent again after a failed one")
                        .build(),
                    throttled: meter
                        .u64_counter("tablekit.throttled")
                        .with_description("Answers 429 or 503 (the service is busy)")
                        .build(),
                    ambiguous: meter
                        .u64_counter("tablekit.ambiguous")
                        .with_description("Calls whose outcome is unknown (a write that may or may not have happened)")
                        .build(),
                    settled: meter
                        .u64_counter("tablekit.settled")
                        .with_description("Ambiguous table writes settled by reading them back")
                        .build(),
                    table_requests: meter
                        .u64_counter("tablekit.table.requests")
                        .with_description("Billable table requests, as Stats counts them")
                        .build(),
                    table_entities: meter
                        .u64_counter("tablekit.table.entities")
                        .with_description("Entities written and read")
                        .build(),
                    table_bytes: meter
                        .u64_counter("tablekit.table.bytes")
                        .with_unit("By")
                        .with_description("Bytes of entity bodies sent and received")
                        .build(),
                }
            })
        }

        /// Records an attempt's duration (seconds) with its attributes:
        /// nothing is allocated for an answer under 400 (`host` is shared).
        pub(crate) fn record_attempt(
            &self,
            seconds: f64,
            operation: &'static str,
            method: &'static str,
            host: &opentelemetry::StringValue,
            port: u16,
            outcome: Result<u16, std::borrow::Cow<'static, str>>,
        ) {
            let [a, b, c, d] = [
                KeyValue::new("tablekit.operation", operation),
                KeyValue::new("http.request.method", method),
                KeyValue::new("server.address", host.clone()),
                KeyValue::new("server.port", i64::from(port)),
            ];
            match outcome {
                Ok(status) if status < 400 => self.duration.record(
                    seconds,
                    &[
                        a,
                        b,
                        c,
                        d,
                        KeyValue::new("http.response.status_code", i64::from(status)),
                    ],
                ),
                Ok(status) => self.duration.record(
                    seconds,
                    &[
                        a,
                        b,
                        c,
                        d,
                        KeyValue::new("http.response.status_code", i64::from(status)),
                        KeyValue::new("error.type", status.to_string()),
                    ],
                ),
                Err(kind) => self
                    .duration
                    .record(seconds, &[a, b, c, d, KeyValue::new("error.type", kind)]),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_full_keeps_how_and_redacts_what_and_who() {
        let url = redacted_url(
            "https://acc.table.core.windows.net",
            "/T()?%24filter=Name%20eq%20%27x%27&%24top=5&sv=2019-02-02&sp=raud&sig=c2VjcmV0JTJC&NextPartitionKey=p1",
        );
        assert_eq!(
            url,
            "https://acc.table.core.windows.net/T()?%24filter=REDACTED&%24top=5&sv=2019-02-02&sp=raud&sig=REDACTED&NextPartitionKey=REDACTED"
        );
        assert_eq!(redacted_url("http://h:1", "/a/b"), "http://h:1/a/b");
        assert_eq!(
            redacted_url("http://h:1", "/a?SIG=x&flag"),
            "http://h:1/a?SIG=REDACTED&flag=REDACTED"
        );
    }

    #[test]
    fn error_types_are_the_status_or_what_failed() {
        let status = http::StatusCode::from_u16(503).unwrap();
        let e = crate::backend::http::wire::service_error(status, None, None, b"");
        assert_eq!(error_type(&e), "503");
        assert_eq!(error_type(&Error::timed_out("slow")), "timeout");
        assert_eq!(error_type(&Error::config("bad")), "config");
    }
}
