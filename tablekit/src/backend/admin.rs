//! The access-control and settings half of the seam, shared by the three
//! services: stored access policies of a table, queue or container, the
//! service's properties, and its replication stats. Each service's backend
//! trait carries it as one more method (`admin`), so a client asks the
//! backend it already holds.

use crate::acl::RawPolicy;
use crate::backend::Repeat;
use crate::service_properties::{ServiceProperties, ServiceStats};

/// One access-control or settings request.
#[derive(Debug)]
pub(crate) enum AdminOp<'a> {
    /// The stored access policies of a table, queue or container.
    GetAcl {
        resource: &'a str,
    },
    /// Replaces them all (checked by the client: at most five).
    SetAcl {
        resource: &'a str,
        policies: &'a [RawPolicy],
    },
    GetProperties,
    SetProperties {
        properties: &'a ServiceProperties,
    },
    /// Replication stats, answered by the secondary location.
    Stats,
}

impl AdminOp<'_> {
    /// A short name for logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            AdminOp::GetAcl { .. } => "get_access_policies",
            AdminOp::SetAcl { .. } => "set_access_policies",
            AdminOp::GetProperties => "get_service_properties",
            AdminOp::SetProperties { .. } => "set_service_properties",
            AdminOp::Stats => "get_service_stats",
        }
    }

    /// The table, queue or container the request is about, if one.
    pub(crate) fn resource(&self) -> Option<&str> {
        match self {
            AdminOp::GetAcl { resource } | AdminOp::SetAcl { resource, .. } => Some(resource),
            _ => None,
        }
    }

    /// Reads are repeated freely; a set replaces whole, so repeating it
    /// leaves the same state.
    pub(crate) fn repeat(&self) -> Repeat {
        match self {
            AdminOp::GetAcl { .. } | AdminOp::GetProperties | AdminOp::Stats => Repeat::Read,
            AdminOp::SetAcl { .. } | AdminOp::SetProperties { .. } => Repeat::Idempotent,
        }
    }
}

/// What a backend answers to an [`AdminOp`].
#[derive(Debug)]
pub(crate) enum AdminResponse {
    Done,
    Acl(Vec<RawPolicy>),
    Properties(ServiceProperties),
    Stats(ServiceStats),
}

impl AdminResponse {
    /// The policies of a get, or a decode error naming what came instead.
    pub(crate) fn into_acl(self) -> crate::Result<Vec<RawPolicy>> {
        match self {
            AdminResponse::Acl(p) => Ok(p),
            other => Err(unexpected(&other)),
        }
    }

    /// The settings of a get.
    pub(crate) fn into_properties(self) -> crate::Result<ServiceProperties> {
        match self {
            AdminResponse::Properties(p) => Ok(p),
            other => Err(unexpected(&other)),
        }
    }

    /// The stats of a get.
    pub(crate) fn into_stats(self) -> crate::Result<ServiceStats> {
        match self {
            AdminResponse::Stats(s) => Ok(s),
            other => Err(unexpected(&other)),
        }
    }
}

fn unexpected(r: &AdminResponse) -> crate::Error {
    crate::Error::decode(format!("unexpected answer from the backend: {r:?}"))
}
