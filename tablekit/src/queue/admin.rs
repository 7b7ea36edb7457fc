//! Access control and settings of queues: a queue's stored access policies
//! ([`QueueClient::access_policies`]) and the Queue service's properties
//! ([`QueueServiceClient::service_properties`]).

use crate::account::QueueSasPermissions;
use crate::acl::{self, StoredAccessPolicy};
use crate::backend::admin::AdminOp;
use crate::error::Result;
use crate::service_properties::{self, ServiceProperties};

use super::{QueueClient, QueueServiceClient};

impl QueueClient {
    /// The queue's stored access policies (Get Queue ACL).
    ///
    /// # Errors
    ///
    /// Not found if the queue does not exist.
    pub async fn access_policies(&self) -> Result<Vec<StoredAccessPolicy<QueueSasPermissions>>> {
        let raw = self
            .backend
            .admin(AdminOp::GetAcl {
                resource: &self.name,
            })
            .await?
            .into_acl()?;
        acl::from_raw(raw)
    }

    /// Replaces the queue's stored access policies (Set Queue ACL); an empty
    /// slice removes them all. See [`crate::acl`].
    ///
    /// # Errors
    ///
    /// Before any I/O, an invalid-input error for more than five policies, an
    /// id that is empty, longer than 64 characters or given twice. Not found
    /// if the queue does not exist.
    pub async fn set_access_policies(
        &self,
        policies: &[StoredAccessPolicy<QueueSasPermissions>],
    ) -> Result<()> {
        let raw = acl::to_raw(policies)?;
        self.backend
            .admin(AdminOp::SetAcl {
                resource: &self.name,
                policies: &raw,
            })
            .await?;
        Ok(())
    }
}

impl QueueServiceClient {
    /// The Queue service's properties: logging, metrics and CORS rules (Get
    /// Queue Service Properties). See [`crate::service_properties`].
    pub async fn service_properties(&self) -> Result<ServiceProperties> {
        self.backend
            .admin(AdminOp::GetProperties)
            .await?
            .into_properties()
    }

    /// Sets the parts of the Queue service's properties that `properties`
    /// carries, leaving the others as they are.
    ///
    /// # Errors
    ///
    /// Before any I/O, as
    /// [`TableServiceClient::set_service_properties`](crate::TableServiceClient::set_service_properties).
    pub async fn set_service_properties(&self, properties: &ServiceProperties) -> Result<()> {
        service_properties::check(properties)?;
        self.backend
            .admin(AdminOp::SetProperties { properties })
            .await?;
        Ok(())
    }
}
