//! What every typed view of one table shares: the backend, the table's name and
//! its scan policy, and the point read that both clients and queries make.

use std::sync::Arc;

use super::stats::{Counted, TableCount};
use crate::backend::{Operation, Response};
use crate::entity::{ETag, EntityKey, TableEntity};
use crate::error::{Error, ErrorCode, Result};

/// One table on one backend, untyped: [`TableClient`](super::TableClient) and
/// [`Query`](super::Query) are typed views over it.
#[derive(Clone)]
pub(crate) struct TableHandle {
    /// The service client's backend, which counts every request.
    pub(crate) backend: Arc<Counted>,
    /// The table's counters in it, found once.
    pub(crate) counters: TableCount,
    /// The counters of the service client the table came from.
    pub(crate) stats: Arc<super::stats::Recorder>,
    pub(crate) name: Arc<str>,
    pub(crate) scan_policy: ScanPolicy,
    pub(crate) ambiguous_writes: AmbiguousWrites,
}

impl TableHandle {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Who the account is: its table endpoint over HTTP, or the store
    /// itself (by address) for an in-process backend.
    pub(crate) fn account_id(&self) -> String {
        let backend = &self.backend.inner;
        match backend.table_endpoint() {
            Some(endpoint) => endpoint.to_owned(),
            None => format!(
                "in-process store {:p}",
                std::sync::Arc::as_ptr(backend).cast::<()>()
            ),
        }
    }

    /// Carries out `op`, an operation on this table, counted.
    pub(crate) fn execute<'a>(
        &'a self,
        op: Operation<'a>,
    ) -> impl std::future::Future<Output = crate::error::Result<Response>> + Send + 'a {
        self.backend.execute_in(&self.counters, op)
    }

    /// Counts a page of a query over this table (see `Counted::page_read_in`).
    pub(crate) fn page_read(&self, partition: Option<&str>, entities: usize) {
        self.backend
            .page_read_in(&self.counters, partition, entities);
    }

    pub(crate) fn scan_policy(&self) -> ScanPolicy {
        self.scan_policy
    }

    /// Reads one entity and the ETag it was read at; `None` if there is none.
    pub(crate) async fn get_with_etag<T: TableEntity>(
        &self,
        key: &EntityKey,
        select: Option<&str>,
    ) -> Result<Option<(T, Option<ETag>)>> {
        self.read(key, select, true).await
    }

    /// Reads one entity (its ETag given to it: see
    /// [`TableEntity::set_etag`]); `None` if there is none.
    pub(crate) async fn get<T: TableEntity>(
        &self,
        key: &EntityKey,
        select: Option<&str>,
    ) -> Result<Option<T>> {
        Ok(self.read(key, select, false).await?.map(|(e, _)| e))
    }

    /// A point read. The entity is given its ETag (see
    /// [`TableEntity::set_etag`]), which is returned too with `keep_etag`
    /// (else `None`).
    pub(crate) async fn read<T: TableEntity>(
        &self,
        key: &EntityKey,
        select: Option<&str>,
        keep_etag: bool,
    ) -> Result<Option<(T, Option<ETag>)>> {
        key.validate()?;
        let resp = self
            .execute(Operation::Get {
                table: &self.name,
                key,
                select,
                annotations: T::needs_type_annotations(),
            })
            .await;
        match resp {
            Ok(Response::Entity(Some(payload))) => {
                let mut entity: T = payload.decode_one(key)?;
                let etag = payload.etag().map(ETag::new);
                let kept = match etag {
                    Some(e) if keep_etag => {
                        entity.set_etag(e.clone());
                        Some(e)
                    }
                    Some(e) => {
                        entity.set_etag(e);
                        None
                    }
                    None => None,
                };
                Ok(Some((entity, kept)))
            }
            Ok(Response::Entity(None)) => Ok(None),
            Ok(_) => Err(Error::decode("unexpected answer to a point read")),
            Err(e) if is_missing_entity(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A 404 about the entity, not about its table: a missing table stays an error.
pub(crate) fn is_missing_entity(e: &Error) -> bool {
    e.is_not_found() && e.code() != Some(&ErrorCode::TableNotFound)
}

/// What a query does when it would read the whole table (no PartitionKey
/// equality or range in its filter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScanPolicy {
    /// Run it.
    #[default]
    Allow,
    /// Run it, and log a `tracing` warning naming the table and the filter.
    Warn,
    /// Refuse it before any request, with an invalid-input error.
    Deny,
}

/// What a [`TableClient`](crate::TableClient) does when a write fails with an
/// [ambiguous](Error::is_ambiguous) error: a retried insert met 409, a retried
/// conditional update 412, a retried delete 404, or every attempt lost its
/// answer.
///
/// The default, [`AmbiguousWrites::ReadBack`], reads the entities back and
/// decides, so that a write that landed is reported as the success it was.
/// The comparison is by value: if another writer stored exactly the values
/// this write sent, the write is taken as applied. That is the right answer for
/// "is my data there?", but a read–modify–write where two writers can compute
/// the same value (two increments of the same counter) could then count one
/// increment twice as done; give such writes a property only they write (a
/// writer or operation id), or choose [`AmbiguousWrites::Report`] and decide
/// yourself.
///
/// ```
/// use tablekit::{DynamicEntity, TableServiceClient, table::AmbiguousWrites};
///
/// let svc = TableServiceClient::embedded();
/// let table = svc
///     .table::<DynamicEntity>("Counters")?
///     .with_ambiguous_writes(AmbiguousWrites::Report);
/// assert_eq!(table.ambiguous_writes(), AmbiguousWrites::Report);
/// # Ok::<(), tablekit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AmbiguousWrites {
    /// Read the written entities back (one point read each, eight at a time)
    /// and succeed if they hold what the write sent; otherwise fail with the
    /// ambiguous error and the read-back state ([`Error::read_back`]).
    #[default]
    ReadBack,
    /// Return the ambiguous error without reading anything.
    Report,
}
