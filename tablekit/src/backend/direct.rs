//! The table backend a client holds: the HTTP backend called directly, or
//! any other behind the [`Backend`] trait.

use std::sync::Arc;

#[cfg(feature = "admin")]
use super::admin::{AdminOp, AdminResponse};
use super::http::HttpBackend;
use super::table::{Backend, Operation, Response};
use crate::error::Result;

/// A table backend as a client holds it: the HTTP backend called directly,
/// its request's future inside the caller's (no boxed future per request),
/// or any other behind the [`Backend`] trait.
#[derive(Debug, Clone)]
pub(crate) enum TableBackend {
    /// The Table service over HTTP.
    Http(Arc<HttpBackend>),
    /// The embedded store, a simulation of the service, or a test's backend.
    Dyn(Arc<dyn Backend>),
}

impl From<Arc<dyn Backend>> for TableBackend {
    fn from(backend: Arc<dyn Backend>) -> Self {
        TableBackend::Dyn(backend)
    }
}

impl TableBackend {
    /// Carries out `op` (see [`Backend::execute`]): the HTTP backend's own
    /// future inside this one, or the boxed one of any other.
    // Not an `async fn`: its arguments would be kept twice in the future,
    // once as captured and once moved into locals.
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn execute<'a>(
        &'a self,
        op: Operation<'a>,
    ) -> impl std::future::Future<Output = Result<Response>> + Send + 'a {
        async move {
            match self {
                TableBackend::Http(http) => http.call(op).await,
                TableBackend::Dyn(backend) => backend.execute(op).await,
            }
        }
    }

    /// See [`Backend::admin`].
    #[cfg(feature = "admin")]
    pub(crate) async fn admin(&self, op: AdminOp<'_>) -> Result<AdminResponse> {
        match self {
            TableBackend::Http(http) => http.admin(op).await,
            TableBackend::Dyn(backend) => backend.admin(op).await,
        }
    }

    /// See [`Backend::stores_property_bags`].
    pub(crate) fn stores_property_bags(&self) -> bool {
        match self {
            TableBackend::Http(http) => http.stores_property_bags(),
            TableBackend::Dyn(backend) => backend.stores_property_bags(),
        }
    }

    /// See [`Backend::may_throttle`].
    pub(crate) fn may_throttle(&self) -> bool {
        match self {
            TableBackend::Http(http) => http.may_throttle(),
            TableBackend::Dyn(backend) => backend.may_throttle(),
        }
    }
}
