//! Stored access policies and service settings in the embedded store: kept
//! and returned as the service keeps them, in memory (also for a store kept
//! in a file), and never enforced: the store authorizes nothing, so a SAS,
//! with or without a policy, means nothing to it.

use std::collections::HashMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};

use crate::acl::{RawPolicy, MAX_POLICIES};
use crate::backend::admin::{AdminOp, AdminResponse};
use crate::error::{Error, ErrorCode, Result};
use crate::service_properties::{self, GeoReplicationStatus, ServiceProperties, ServiceStats};

/// One service's policies (by resource) and settings.
#[derive(Debug, Default)]
pub(crate) struct AdminState {
    /// The policies of each resource that has some, by the key its store
    /// knows it by.
    acls: Mutex<HashMap<String, Vec<RawPolicy>>>,
    /// `None` until the first set: the service's initial settings.
    properties: Mutex<Option<ServiceProperties>>,
}

impl AdminState {
    /// Carries out `op`. `resource_key` finds the table, queue or container an
    /// ACL request names: the key its policies are kept under, or its
    /// not-found error. Stats say the one copy is live and in sync at `now`.
    pub(crate) fn run(
        &self,
        op: AdminOp<'_>,
        resource_key: impl Fn(&str) -> Result<String>,
        now: DateTime<Utc>,
    ) -> Result<AdminResponse> {
        Ok(match op {
            AdminOp::GetAcl { resource } => {
                let key = resource_key(resource)?;
                let acls = lock(&self.acls);
                AdminResponse::Acl(acls.get(&key).cloned().unwrap_or_default())
            }
            AdminOp::SetAcl { resource, policies } => {
                let key = resource_key(resource)?;
                if policies.len() > MAX_POLICIES {
                    // The service's answer to a sixth policy.
                    return Err(Error::service(
                        400,
                        ErrorCode::from("InvalidXmlDocument"),
                        "XML specified is not syntactically valid.",
                    ));
                }
                let mut acls = lock(&self.acls);
                if policies.is_empty() {
                    acls.remove(&key);
                } else {
                    acls.insert(key, policies.to_vec());
                }
                AdminResponse::Done
            }
            AdminOp::GetProperties => AdminResponse::Properties(
                lock(&self.properties)
                    .clone()
                    .unwrap_or_else(service_properties::initial),
            ),
            AdminOp::SetProperties { properties } => {
                let mut stored = lock(&self.properties);
                let current = stored.get_or_insert_with(service_properties::initial);
                service_properties::merge(current, properties);
                AdminResponse::Done
            }
            AdminOp::Stats => AdminResponse::Stats(ServiceStats {
                status: GeoReplicationStatus::Live,
                last_sync_time: Some(now),
            }),
        })
    }

    /// Drops the policies of a resource that was deleted or created anew.
    pub(crate) fn forget(&self, key: &str) {
        lock(&self.acls).remove(key);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
