//! Access control and settings of blobs: a container's stored access
//! policies ([`ContainerClient::access_policies`]) and the Blob service's
//! properties ([`BlobServiceClient::service_properties`]).

use crate::account::BlobSasPermissions;
use crate::acl::{self, StoredAccessPolicy};
use crate::backend::admin::AdminOp;
use crate::error::Result;
use crate::service_properties::{self, ServiceProperties};

use super::{BlobServiceClient, ContainerClient};

impl ContainerClient {
    /// The container's stored access policies (Get Container ACL).
    ///
    /// # Errors
    ///
    /// Not found if the container does not exist.
    pub async fn access_policies(&self) -> Result<Vec<StoredAccessPolicy<BlobSasPermissions>>> {
        let raw = self
            .backend
            .admin(AdminOp::GetAcl {
                resource: &self.name,
            })
            .await?
            .into_acl()?;
        acl::from_raw(raw)
    }

    /// Replaces the container's stored access policies (Set Container ACL);
    /// an empty slice removes them all. The request sets no public access
    /// level, so, as the REST reference says of such a request, the
    /// container's blobs are private afterwards. See [`crate::acl`].
    ///
    /// # Errors
    ///
    /// Before any I/O, an invalid-input error for more than five policies, an
    /// id that is empty, longer than 64 characters or given twice. Not found
    /// if the container does not exist.
    pub async fn set_access_policies(
        &self,
        policies: &[StoredAccessPolicy<BlobSasPermissions>],
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

impl BlobServiceClient {
    /// The Blob service's properties: logging, metrics and CORS rules (Get
    /// Blob Service Properties). Blob-only settings (default service version,
    /// soft delete, static website) are not read, and a set leaves them as
    /// they are. See [`crate::service_properties`].
    pub async fn service_properties(&self) -> Result<ServiceProperties> {
        self.backend
            .admin(AdminOp::GetProperties)
            .await?
            .into_properties()
    }

    /// Sets the parts of the Blob service's properties that `properties`
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
