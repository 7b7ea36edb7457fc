//! Accounts and credentials: where the service lives and how requests prove who sends them.
//!
//! An [`Account`] is usually parsed from a connection string:
//!
//! ```
//! use tablekit::Account;
//!
//! let account: Account = "DefaultEndpointsProtocol=https;AccountName=myaccount;\
//!     AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
//!     .parse()?;
//! assert_eq!(account.table_endpoint(), Some("https://myaccount.table.core.windows.net"));
//!
//! // The emulator (Azurite) shortcut.
//! let dev = Account::from_connection_string("UseDevelopmentStorage=true")?;
//! assert_eq!(dev.table_endpoint(), Some("http://127.0.0.1:10002/devstoreaccount1"));
//! # Ok::<(), tablekit::Error>(())
//! ```
//!
//! No secret ever appears in the `Debug` output of these types, nor in the message of a
//! connection-string error.
//!
//! [`TableSas`], [`QueueSas`] and [`BlobSas`] sign shared access signatures
//! for one table, queue, container or blob with the account key, optionally
//! tied to a stored access policy of that resource (see [`crate::acl`]);
//! [`AccountSas`] signs one for whole services and their service-level calls.

// One room per job: the account and its endpoints, the connection-string
// parser, the credentials, the SAS builders. How a request is signed with a
// credential is the HTTP backend's business (`backend/http/signer.rs`).
#[cfg(feature = "entra")]
mod azure_identity;
mod connection_string;
mod credential;
mod endpoints;
mod entra;
pub(crate) mod sas;

pub use credential::{AccountKey, Credential, SasToken};
pub use endpoints::{Account, Target};
pub(crate) use entra::TokenCache;
pub use entra::{
    AccessToken, EntraCredential, TokenCredential, TokenRequest, COSMOS_SCOPE, STORAGE_SCOPE,
};
// The stored access policies' rules for their ids (crate::acl).
#[cfg(feature = "admin")]
pub(crate) use sas::{check_policy_id, MAX_POLICY_ID_CHARS};
pub use sas::{
    AccountSas, AccountSasPermissions, AccountSasResourceTypes, AccountSasServices, BlobSas,
    BlobSasPermissions, QueueSas, QueueSasPermissions, SasIpRange, SasProtocol, TableSas,
    TableSasPermissions,
};
