//! The HTTP backend: builds, signs and sends REST requests to Azure Table Storage
//! or Azurite, retries transient failures, and turns answers into [`Response`]s.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::Method;

use self::limits::Kind;
use self::pipeline::{Outgoing, Pipeline};
use self::signer::Service;
use self::transport::Incoming;
use self::wire::{
    entity_resource, header_str, header_string, header_value, names, prefix_bounds, service_error,
};
use crate::account::Account;
use crate::backend::{Backend, Operation, Payload, Response, Written};
use crate::continuation::Continuation;
use crate::entity::{ETag, UpdateMode};
use crate::error::{Error, Result};
pub(crate) use crate::options::{HttpOptions, Metadata};

#[cfg(feature = "admin")]
pub(crate) mod admin;
pub(crate) mod batch;
#[cfg(feature = "blob")]
pub(crate) mod blob;
#[cfg(feature = "blob")]
pub(crate) mod blob_xml;
mod cosmos;
pub(crate) mod limits;
pub(crate) mod pipeline;
#[cfg(feature = "queue")]
pub(crate) mod queue;
pub(crate) mod signer;
pub(crate) mod transport;
pub(crate) mod wire;

pub use self::pipeline::API_VERSION;

#[cfg(test)]
use self::transport::USER_AGENT;

impl Metadata {
    fn accept(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Metadata::None => "application/json;odata=nometadata",
            Metadata::Minimal => "application/json;odata=minimalmetadata",
            Metadata::Full => "application/json;odata=fullmetadata",
        })
    }
}

/// Sends operations to the Table service over HTTP.
pub(crate) struct HttpBackend {
    pipeline: Pipeline,
    account: Account,
    metadata: Option<Metadata>,
    /// The secondary location, for stats.
    #[cfg(feature = "admin")]
    secondary: admin::Secondary,
    /// The account is a Cosmos DB Table API one: its own limits are checked too.
    cosmos: bool,
    /// The spelling of each table name used, on Cosmos DB (case-sensitive there).
    cosmos_names: cosmos::TableNames,
}

impl fmt::Debug for HttpBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpBackend")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

impl HttpBackend {
    pub(crate) fn new(account: Account, options: &HttpOptions) -> Result<Self> {
        let endpoint = account.table_endpoint().ok_or_else(|| {
            Error::config(
                "the connection string names no table endpoint (TableEndpoint, or AccountName with AccountKey)",
            )
        })?;
        account.check_credential_for_target()?;
        Ok(HttpBackend {
            pipeline: Pipeline::new(Service::Table, &account, endpoint, options)?,
            #[cfg(feature = "admin")]
            secondary: admin::Secondary::new(Service::Table, &account, options),
            cosmos: account.target() == crate::account::Target::CosmosDb,
            cosmos_names: cosmos::TableNames::default(),
            account,
            metadata: options.metadata,
        })
    }

    /// Builds the request of an operation. Bodies are already validated JSON.
    fn build(&self, op: &Operation<'_>) -> Result<Outgoing> {
        let mut prefer_no_content = false;
        let mut if_match_header = None;
        let mut content_type: Option<HeaderValue> = None;
        let mut body = Bytes::new();
        // A reader that needs annotations never gets fewer than minimal metadata:
        // without them Int64, Guid and DateTime values would read as strings.
        let accept = |annotations: bool| {
            match (self.metadata, annotations) {
                (Some(Metadata::None) | None, true) => Metadata::Minimal,
                (Some(m), _) => m,
                (None, false) => Metadata::None,
            }
            .accept()
        };
        let mut accept_header = accept(true);
        let mut query: Vec<(&'static str, String)> = Vec::new();
        let (method, resource) = match op {
            Operation::CreateTable { table } => {
                content_type = Some(HeaderValue::from_static("application/json"));
                prefer_no_content = true;
                let mut b = Vec::with_capacity(table.len() + 16);
                b.extend_from_slice(b"{\"TableName\":");
                crate::codec::write::write_json_str(&mut b, table);
                b.push(b'}');
                body = b.into();
                (Method::POST, "Tables".to_owned())
            }
            Operation::DeleteTable { table } => (Method::DELETE, format!("Tables('{table}')")),
            Operation::ListTables {
                prefix,
                filter,
                next_table_name,
                top,
            } => {
                let range = prefix.map(|p| {
                    // The prefix range: names >= p and < p with its last character bumped.
                    let (lo, hi) = prefix_bounds(p);
                    match hi {
                        Some(hi) => format!(
                            "TableName ge '{}' and TableName lt '{}'",
                            lo.replace('\'', "''"),
                            hi.replace('\'', "''")
                        ),
                        None => format!("TableName ge '{}'", lo.replace('\'', "''")),
                    }
                });
                match (range, filter) {
                    (Some(r), Some(f)) => query.push(("$filter", format!("{r} and ({f})"))),
                    (Some(r), None) => query.push(("$filter", r)),
                    (None, Some(f)) => query.push(("$filter", (*f).to_owned())),
                    (None, None) => {}
                }
                if let Some(t) = top {
                    query.push(("$top", itoa::Buffer::new().format(*t).to_owned()));
                }
                if let Some(n) = next_table_name {
                    query.push(("NextTableName", n.to_string()));
                }
                (Method::GET, "Tables".to_owned())
            }
            Operation::Insert { table, body: b, .. } => {
                content_type = Some(HeaderValue::from_static("application/json"));
                prefer_no_content = true;
                body = b.json()?;
                (Method::POST, table.to_string())
            }
            Operation::Write {
                table,
                key,
                body: b,
                mode,
                if_match,
            } => {
                content_type = Some(HeaderValue::from_static("application/json"));
                if let Some(m) = if_match {
                    if_match_header = Some(header_value(m.header_value())?);
                }
                body = b.json()?;
                let method = match mode {
                    UpdateMode::Replace => Method::PUT,
                    UpdateMode::Merge => {
                        Method::from_bytes(b"MERGE").map_err(|_| Error::config("MERGE"))?
                    }
                };
                (method, entity_resource(table, key))
            }
            Operation::Delete {
                table,
                key,
                if_match,
            } => {
                if_match_header = Some(header_value(if_match.header_value())?);
                (Method::DELETE, entity_resource(table, key))
            }
            Operation::Get {
                table,
                key,
                select,
                annotations,
            } => {
                accept_header = accept(*annotations);
                if let Some(s) = select {
                    query.push(("$select", s.to_string()));
                }
                (Method::GET, entity_resource(table, key))
            }
            Operation::Query {
                table,
                filter,
                select,
                top,
                continuation,
                annotations,
            } => {
                accept_header = accept(*annotations);
                if let Some(f) = filter {
                    query.push(("$filter", f.to_string()));
                }
                if let Some(s) = select {
                    query.push(("$select", s.to_string()));
                }
                if let Some(t) = top {
                    query.push(("$top", itoa::Buffer::new().format(*t).to_owned()));
                }
                if let Some(c) = continuation {
                    query.push(("NextPartitionKey", c.next_partition_key.clone()));
                    if let Some(rk) = &c.next_row_key {
                        query.push(("NextRowKey", rk.clone()));
                    }
                }
                let mut resource = String::with_capacity(table.len() + 2);
                resource.push_str(table);
                resource.push_str("()");
                (Method::GET, resource)
            }
            Operation::Transaction { table, ops } => {
                let encoded = batch::encode(
                    // `new` refused an account without one.
                    self.account.table_endpoint().unwrap_or_default(),
                    table,
                    ops,
                );
                content_type = Some(header_value(&encoded.content_type)?);
                body = encoded.body.into();
                (Method::POST, "$batch".to_owned())
            }
        };
        let mut headers = Vec::with_capacity(6);
        headers.push((http::header::ACCEPT, accept_header));
        if prefer_no_content {
            headers.push((names::PREFER, HeaderValue::from_static("return-no-content")));
        }
        if let Some(m) = if_match_header {
            headers.push((http::header::IF_MATCH, m));
        }
        if let Some(ct) = content_type {
            headers.push((http::header::CONTENT_TYPE, ct));
        }
        headers.push((
            names::DATASERVICEVERSION,
            HeaderValue::from_static("3.0;NetFx"),
        ));
        headers.push((
            names::MAXDATASERVICEVERSION,
            HeaderValue::from_static("3.0;NetFx"),
        ));
        Ok(Outgoing {
            method,
            resource,
            query,
            headers,
            body,
        })
    }

    /// Turns a response into the operation's answer or its error.
    ///
    /// What the headers say is read before the future is made, which then
    /// holds only the body being read (or nothing, for an answer without
    /// one): this future sits inside every request's.
    fn interpret(
        &self,
        op: &Operation<'_>,
        resp: Incoming,
    ) -> impl std::future::Future<Output = Result<Response>> + Send + use<> {
        use futures::future::{ready, Either};
        use futures::FutureExt as _;
        let status = resp.status();
        let limits = self.pipeline.limits();
        // The service's request id is kept only where an error may carry it.
        if !status.is_success() {
            let request_id = header_string(resp.headers(), &names::X_MS_REQUEST_ID);
            let retry_after = header_str(resp.headers(), &names::RETRY_AFTER)
                .and_then(|v| wire::parse_retry_after(v, chrono::Utc::now()));
            let error = error_answer(resp, status, request_id, retry_after, limits);
            return Either::Left(Either::Left(error.map(Err)));
        }
        let etag = header_string(resp.headers(), &http::header::ETAG);
        let (then, kind) =
            match op {
                Operation::CreateTable { .. }
                | Operation::DeleteTable { .. }
                | Operation::Delete { .. } => {
                    return Either::Left(Either::Right(ready(Ok(Response::Done))))
                }
                Operation::Insert { .. } | Operation::Write { .. } => {
                    let written = etag
                        .ok_or_else(|| Error::decode("the service returned no ETag for a write"))
                        .map(|etag| Response::Written(Written::from_etag(ETag::new(etag))));
                    return Either::Left(Either::Right(ready(written)));
                }
                Operation::Get { .. } => (Body::Entity { etag }, Kind::Entity),
                Operation::Query { .. } => {
                    let continuation = header_string(resp.headers(), &names::NEXT_PARTITION_KEY)
                        .map(|pk| Continuation {
                            next_partition_key: pk,
                            next_row_key: header_string(resp.headers(), &names::NEXT_ROW_KEY),
                        });
                    (Body::Page { continuation }, Kind::QueryPage)
                }
                Operation::ListTables { .. } => {
                    let next_table_name = header_string(resp.headers(), &names::NEXT_TABLE_NAME);
                    (Body::Tables { next_table_name }, Kind::Listing)
                }
                Operation::Transaction { ops, .. } => {
                    let request_id = header_string(resp.headers(), &names::X_MS_REQUEST_ID);
                    let content_type = header_string(resp.headers(), &http::header::CONTENT_TYPE)
                        .unwrap_or_default();
                    let body = Body::Transaction {
                        content_type,
                        operations: ops.len(),
                        request_id,
                    };
                    (body, Kind::Batch)
                }
            };
        Either::Right(limits.read(resp, kind).map(move |body| then.answer(body?)))
    }
}

/// What a successful answer's body becomes, and what of its headers that needs.
enum Body {
    Entity {
        etag: Option<String>,
    },
    Page {
        continuation: Option<Continuation>,
    },
    Tables {
        next_table_name: Option<String>,
    },
    Transaction {
        content_type: String,
        operations: usize,
        request_id: Option<String>,
    },
}

impl Body {
    fn answer(self, body: Bytes) -> Result<Response> {
        Ok(match self {
            Body::Entity { etag } => Response::Entity(Some(Payload::Json { body, etag })),
            Body::Page { continuation } => Response::Page {
                payload: Payload::Json { body, etag: None },
                continuation,
            },
            Body::Tables { next_table_name } => Response::Tables {
                names: crate::codec::read::decode_table_names(&body)?,
                next_table_name,
            },
            Body::Transaction {
                content_type,
                operations,
                request_id,
            } => Response::Transaction(batch::parse_response(
                &content_type,
                &body,
                operations,
                request_id,
            )?),
        })
    }
}

#[async_trait::async_trait]
impl Backend for HttpBackend {
    async fn execute(&self, op: Operation<'_>) -> Result<Response> {
        // The call's span is the client's (`Counted`), around this future.
        let span = tracing::Span::none();
        let mut req = self.build(&op)?;
        if self.cosmos {
            cosmos::tunnel_merge(&mut req);
            cosmos::check(&op, &req)?;
            self.cosmos_names.check(&op)?;
        }
        let answer = self
            .pipeline
            .call(req, op.name(), op.repeat(), span, |resp| {
                self.interpret(&op, resp)
            })
            .await;
        if self.cosmos && answer.is_ok() {
            self.cosmos_names.record(&op);
        }
        answer
    }

    /// The account's table endpoint (no credential in it).
    fn table_endpoint(&self) -> Option<&str> {
        self.account.table_endpoint()
    }

    #[cfg(feature = "admin")]
    async fn admin(
        &self,
        op: crate::backend::admin::AdminOp<'_>,
    ) -> Result<crate::backend::admin::AdminResponse> {
        if self.cosmos {
            cosmos::check_admin(&op)?;
        }
        if let crate::backend::admin::AdminOp::Stats = op {
            let primary = self.account.table_endpoint().unwrap_or_default();
            return self.secondary.call(primary, op).await;
        }
        admin::call(&self.pipeline, Service::Table, op).await
    }
}

/// The error of an answer whose status says it failed. If the connection
/// breaks while its body is read, the status stands (it is the service's
/// answer); only the code and message of the body are lost.
pub(crate) fn error_answer(
    resp: Incoming,
    status: http::StatusCode,
    request_id: Option<String>,
    retry_after: Option<Duration>,
    limits: &limits::AnswerLimits,
) -> impl std::future::Future<Output = Error> + Send + use<> {
    use futures::FutureExt as _;
    limits
        .read(resp, limits::Kind::Error)
        .map(move |body| match body {
            Ok(body) => service_error(status, request_id, retry_after, &body),
            Err(e) => {
                tracing::debug!(status = status.as_u16(), error = %e, "an error answer's body was cut short");
                service_error(status, request_id, retry_after, b"")
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agent_names_the_crate_and_its_version() {
        assert_eq!(
            USER_AGENT,
            format!("tablekit/{} (rust)", env!("CARGO_PKG_VERSION"))
        );
    }
}
