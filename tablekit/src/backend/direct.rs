//! The table backend a client holds: the HTTP backend called directly, or
//! any other behind the [`Backend`] trait.

use std::sync::Arc;

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
    /// Carries out `op` (see [`Backend::execute`]).
    pub(crate) async fn execute(&self, op: Operation<'_>) -> Result<Response> {
        match self {
            TableBackend::Http(http) => http.call(op).await,
            TableBackend::Dyn(backend) => backend.execute(op).await,
        }
    }

    /// See [`Backend::admin`].
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
