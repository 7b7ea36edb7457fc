//! Who may do what: every request is authenticated as the service does it
//! (Shared Key, Shared Key Lite, service and account SAS with stored access
//! policies, bearer tokens) into an [`Access`], which each service's handler
//! asks, through [`Access::check`], for the permission its operation needs.
//!
//! - Shared Key and Shared Key Lite (`auth_key.rs`): the string to sign is
//!   built by the same functions the client signs with
//!   (`backend/http/signer.rs`), the signature compared in constant time,
//!   the date (`x-ms-date` or `Date`) within 15 minutes of now.
//! - SAS (`auth_sas.rs`): the string to sign is built by the same functions
//!   as the client's SAS builders (`account/sas`), for the versions foreign
//!   SDKs sign too; a stored access policy (`si`) is read from the store.
//! - Bearer tokens (`auth_bearer.rs`): JWTs checked against a
//!   [`BearerConfig`]; a valid token gives full access (RBAC roles are not
//!   modelled).
//!
//! A request without any credential is refused (Table and Queue: at once;
//! Blob: by [`Access::check`], so that a public container may one day be read
//! anonymously).

#[path = "auth_bearer.rs"]
mod bearer;
#[path = "auth_key.rs"]
mod key;
#[path = "auth_sas.rs"]
mod sas;

use std::net::IpAddr;

use http::request::Parts;

use super::{AccountState, Failure, Service, State};

pub(crate) use bearer::challenge;
pub use bearer::BearerConfig;
pub(crate) use sas::KeyRange;

/// What an authenticated request may do.
#[derive(Debug, Clone)]
pub(crate) enum Access {
    /// Shared Key, Shared Key Lite or a valid bearer token: everything.
    Full,
    /// No credential at all (Blob only: the others refuse it before the
    /// handler): [`Access::check`] refuses everything.
    Anonymous(Service),
    /// A shared access signature: what it grants.
    Sas(Box<sas::Grant>),
}

/// A permission, as SAS tokens spell them (`r`, `a`, `c`, `u`, `w`, `d`,
/// `l`, `p`).
///
/// What each operation asks, as the REST reference's tables "Account SAS
/// permissions by operation" and the service SAS pages say:
///
/// | Operation | Need |
/// |---|---|
/// | list tables / queues / containers | `Service(List)` |
/// | service properties, stats | `Service(Read)`, `Service(Write)` |
/// | create table | `Service(Create)` (an account SAS asks `srt=c` and `a` or `c`) |
/// | delete table | `Container { table, Delete }` or `Service(Delete)` |
/// | create queue / container | `Container { name, Create }` |
/// | delete queue / container | `Container { name, Delete }` |
/// | get / set metadata, properties | `Container { name, Read }`, `Container { name, Write }` |
/// | get / set the ACL | `Container { name, Acl }` (Shared Key only, as the service) |
/// | list blobs | `Container { container, List }` |
/// | query, get entity | `Object { table, key: Some((pk, rk)) or None, Read }` |
/// | insert / update / merge / delete entity | `Object { table, key, Add / Update / Delete }` (an upsert asks `Add` and `Update`) |
/// | put message / peek / get or delete / update / clear | `Object { queue, None, Add / Read / Process / Update / Delete }` |
/// | read blob / put blob or block / append / delete | `Object { container, None, Read / Write (Create for a new blob) / Add / Delete }` |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Perm {
    Read,
    Add,
    Create,
    Update,
    Write,
    Delete,
    List,
    Process,
    /// Read or write a stored access policy list: only Shared Key (or a
    /// bearer token) may.
    Acl,
}

/// What a request needs permission for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Need<'a> {
    /// The service itself: list tables, queues or containers; its properties.
    Service(Perm),
    /// A table, queue or container: create, delete, its ACL or metadata.
    Container { name: &'a str, perm: Perm },
    /// An entity (with its keys `(PartitionKey, RowKey)`; `None` for a
    /// query, which then restricts itself to [`Access::key_range`]), a
    /// message, or a blob in `container` (`key: None`; the blob a blob SAS
    /// names is checked from the request's path).
    Object {
        container: &'a str,
        key: Option<(&'a str, &'a str)>,
        perm: Perm,
    },
}

impl Access {
    /// Whether the request may do what `need` says: a 403
    /// `AuthorizationPermissionMismatch` (or the code the service gives for
    /// that SAS) if not.
    pub(crate) fn check(&self, need: Need<'_>) -> Result<(), Failure> {
        match self {
            Access::Full => Ok(()),
            Access::Anonymous(service) => Err(no_credentials(*service)),
            Access::Sas(grant) => grant.check(need),
        }
    }

    /// The entities of `table` a table SAS restricts the request to (`spk`,
    /// `srk`, `epk`, `erk`): a query answers only these. `None`: no range.
    pub(crate) fn key_range(&self, table: &str) -> Option<&KeyRange> {
        match self {
            Access::Sas(grant) => grant.key_range(table),
            _ => None,
        }
    }

    /// Whether the request carries no credential (a public container may
    /// still be read).
    pub(crate) fn is_anonymous(&self) -> bool {
        matches!(self, Access::Anonymous(_))
    }
}

/// The answer to a request without any credential: the Blob and Queue
/// services' 401 `NoAuthenticationInformation` (with the bearer challenge),
/// the Table service's 403 `AuthenticationFailed`.
pub(crate) fn no_credentials(service: Service) -> Failure {
    match service {
        Service::Table => Failure::auth("The request carries no Authorization header and no SAS."),
        Service::Blob | Service::Queue => Failure::new(
            401,
            "NoAuthenticationInformation",
            "Server failed to authenticate the request. Please refer to the information in \
             the www-authenticate header.",
        ),
    }
}

/// Authenticates one request to `account`'s `service`, sent from `peer`.
pub(crate) async fn authenticate(
    state: &State,
    account: &AccountState,
    service: Service,
    parts: &Parts,
    query: &[(String, String)],
    path: &str,
    peer: Option<IpAddr>,
) -> Result<Access, Failure> {
    let now = chrono::Utc::now();
    if query.iter().any(|(k, _)| k == "sig") {
        return sas::verify(account, service, parts, query, path, peer, now).await;
    }
    let Some(authorization) = parts.headers.get(http::header::AUTHORIZATION) else {
        return match service {
            Service::Blob => Ok(Access::Anonymous(service)),
            Service::Table | Service::Queue => Err(no_credentials(service)),
        };
    };
    let authorization = authorization
        .to_str()
        .map_err(|_| Failure::auth("The Authorization header is not visible ASCII."))?;
    let (scheme, credentials) = authorization.split_once(' ').unwrap_or((authorization, ""));
    match scheme {
        "SharedKey" => key::verify(account, service, parts, query, false, credentials, now),
        "SharedKeyLite" => key::verify(account, service, parts, query, true, credentials, now),
        "Bearer" => bearer::verify(
            state.bearer.as_ref(),
            account,
            parts,
            credentials.trim(),
            now,
        ),
        _ => Err(Failure::auth(format!(
            "Authentication scheme {} is not supported.",
            scheme.chars().take(32).collect::<String>()
        ))),
    }
}
