//! Access control and settings of tables: a table's stored access policies
//! ([`TableClient::access_policies`]), the Table service's properties and
//! stats ([`TableServiceClient::service_properties`]).

use crate::account::TableSasPermissions;
use crate::acl::{self, StoredAccessPolicy};
use crate::backend::admin::AdminOp;
use crate::error::Result;
use crate::service_properties::{self, ServiceProperties, ServiceStats};

use super::{TableClient, TableServiceClient};

impl<T> TableClient<T> {
    /// The table's stored access policies (Get Table ACL).
    ///
    /// # Errors
    ///
    /// Not found if the table does not exist.
    pub async fn access_policies(&self) -> Result<Vec<StoredAccessPolicy<TableSasPermissions>>> {
        let raw = self
            .handle
            .backend
            .admin(AdminOp::GetAcl {
                resource: self.handle.name(),
            })
            .await?
            .into_acl()?;
        acl::from_raw(raw)
    }

    /// Replaces the table's stored access policies (Set Table ACL); an empty
    /// slice removes them all, revoking every SAS tied to one. The service may
    /// take up to 30 seconds to apply a change. See [`crate::acl`].
    ///
    /// # Errors
    ///
    /// Before any I/O, an invalid-input error for more than five policies, an
    /// id that is empty, longer than 64 characters or given twice. Not found
    /// if the table does not exist.
    pub async fn set_access_policies(
        &self,
        policies: &[StoredAccessPolicy<TableSasPermissions>],
    ) -> Result<()> {
        let raw = acl::to_raw(policies)?;
        self.handle
            .backend
            .admin(AdminOp::SetAcl {
                resource: self.handle.name(),
                policies: &raw,
            })
            .await?;
        Ok(())
    }
}

impl TableServiceClient {
    /// The Table service's properties: logging, metrics and CORS rules (Get
    /// Table Service Properties). See [`crate::service_properties`].
    pub async fn service_properties(&self) -> Result<ServiceProperties> {
        self.backend
            .admin(AdminOp::GetProperties)
            .await?
            .into_properties()
    }

    /// Sets the parts of the Table service's properties that `properties`
    /// carries, leaving the others as they are (Set Table Service Properties).
    ///
    /// # Errors
    ///
    /// Before any I/O, an invalid-input error for more than five CORS rules, a
    /// retention outside 1 to 365 days, or enabled metrics without
    /// `include_apis`.
    pub async fn set_service_properties(&self, properties: &ServiceProperties) -> Result<()> {
        service_properties::check(properties)?;
        self.backend
            .admin(AdminOp::SetProperties { properties })
            .await?;
        Ok(())
    }

    /// The replication state of the account's secondary location (Get Table
    /// Service Stats).
    ///
    /// The service answers this only at the secondary endpoint of an account
    /// with read-access geo-redundant replication: tablekit sends it there,
    /// deriving the endpoint from the table endpoint
    /// (`{account}-secondary.table.core.windows.net`, or
    /// `/{account}-secondary` for a path-style endpoint such as Azurite's,
    /// which answers it with status live). The embedded store has one copy,
    /// always in sync: live, synchronised now.
    ///
    /// # Errors
    ///
    /// A configuration error if the endpoint names the account neither in its
    /// host nor in its path (a custom domain): there is no secondary endpoint
    /// to derive. The service's error for an account without read access to a
    /// secondary.
    pub async fn service_stats(&self) -> Result<ServiceStats> {
        self.backend.admin(AdminOp::Stats).await?.into_stats()
    }
}
