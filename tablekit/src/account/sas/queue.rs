//! [`QueueSas`]: a service SAS for the messages of one queue.

use chrono::{DateTime, Utc};

use super::{
    letters, sign_service_sas, signing_key, SasIpRange, SasPermissions, SasProtocol, SasWindow,
    ServiceSas,
};
use crate::account::{Account, AccountKey, SasToken};
use crate::error::Result;
use crate::validate;

/// What a queue SAS allows. Each field grants one operation; at least one must be set.
///
/// ```
/// use tablekit::account::QueueSasPermissions;
///
/// let worker = QueueSasPermissions { process: true, ..Default::default() };
/// assert_ne!(worker, QueueSasPermissions::READ_ONLY);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueSasPermissions {
    /// Peek at messages and read the queue's message count (`r`).
    pub read: bool,
    /// Send messages (`a`).
    pub add: bool,
    /// Update received messages (`u`); needs `process` too.
    pub update: bool,
    /// Receive and delete messages (`p`).
    pub process: bool,
}

impl QueueSasPermissions {
    /// Read only: peek and count.
    pub const READ_ONLY: Self = QueueSasPermissions {
        read: true,
        add: false,
        update: false,
        process: false,
    };

    /// Read, add, update and process.
    pub const ALL: Self = QueueSasPermissions {
        read: true,
        add: true,
        update: true,
        process: true,
    };

    /// The `sp` value, in the order the service requires (`raup`).
    pub(crate) fn to_sp(self) -> String {
        letters(&[
            (self.read, 'r'),
            (self.add, 'a'),
            (self.update, 'u'),
            (self.process, 'p'),
        ])
    }
}

/// A builder for a service SAS that grants access to the messages of one queue,
/// signed with the account key (signed version `2019-02-02`). A queue SAS does
/// not allow creating or deleting the queue itself.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use tablekit::account::{QueueSas, QueueSasPermissions, SasProtocol};
/// use tablekit::{Account, Credential, QueueServiceClient};
///
/// let account = Account::development();
/// let sas = QueueSas::new("archive-jobs")
///     .permissions(QueueSasPermissions { add: true, ..Default::default() })
///     .expiry(Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap())
///     .protocol(SasProtocol::HttpsAndHttp)
///     .sign(&account)?;
/// assert!(sas.as_query().starts_with("sv=2019-02-02&sp=a&se=2030-01-01T00%3A00%3A00Z&spr=https%2Chttp&sig="));
///
/// // A sender that holds no key: it can send to archive-jobs, nothing else.
/// let sender = QueueServiceClient::new(account.with_credential(Credential::Sas(sas)))?;
/// # let _ = sender;
/// # Ok::<(), tablekit::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a QueueSas does nothing until `.sign(&account)`"]
pub struct QueueSas {
    queue: String,
    permissions: QueueSasPermissions,
    window: SasWindow,
}

impl QueueSas {
    /// A SAS for `queue`, with no permission yet and no expiry; set both before signing.
    pub fn new(queue: impl Into<String>) -> Self {
        QueueSas {
            queue: queue.into(),
            permissions: QueueSasPermissions::default(),
            window: SasWindow::default(),
        }
    }

    /// The operations the SAS allows.
    pub fn permissions(mut self, permissions: QueueSasPermissions) -> Self {
        self.permissions = permissions;
        self
    }

    service_sas_window_setters!();

    /// Signs the SAS with the account's key.
    ///
    /// # Errors
    ///
    /// A configuration error if the account holds no key, if no permission or no
    /// expiry is set and no stored access policy is named, if the policy id is
    /// empty or longer than 64 characters, if the IP range is backwards, or if
    /// the start is not before the expiry; a validation error if the queue name
    /// is invalid.
    pub fn sign(&self, account: &Account) -> Result<SasToken> {
        let key = signing_key(account)?;
        self.sign_with(account.account_name(), key)
    }

    fn sign_with(&self, account: &str, key: &AccountKey) -> Result<SasToken> {
        validate::queue_name(&self.queue)?;
        // Service SAS string-to-sign for Queue, versions 2015-04-05 and later (the
        // fields end with the version): "Create a service SAS", Version 2015-04-05
        // and later, Queue service;
        // https://learn.microsoft.com/rest/api/storageservices/create-service-sas
        // Cross-checked with the emulator's verifier (Azurite
        // src/queue/authentication/IQueueSASSignatureValues.ts).
        sign_service_sas(
            key,
            &self.window,
            &self.permissions,
            ServiceSas {
                resource: format!("/queue/{account}/{}", self.queue),
                resource_params: &[],
                range_params: &[],
                tail: &[],
            },
        )
    }
}

impl SasPermissions for QueueSasPermissions {
    fn sp(&self) -> String {
        self.to_sp()
    }
    const NAMES: &'static str = "read, add, update or process";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::sas::tests::{account, utc};

    // Expected signatures: python3 hmac over the string to sign in each comment,
    // with the emulator key, percent-encoded as in the query.

    #[test]
    fn queue_sas_matches_the_documented_string_to_sign() {
        // "raup\n2029-12-31T23:00:00Z\n2030-01-01T00:00:00Z\n/queue/myaccount/archive-jobs\n\n\nhttps,http\n2019-02-02"
        let sas = QueueSas::new("archive-jobs")
            .permissions(QueueSasPermissions::ALL)
            .start(utc(2029, 12, 31, 23, 0, 0))
            .expiry(utc(2030, 1, 1, 0, 0, 0))
            .protocol(SasProtocol::HttpsAndHttp)
            .sign(&account())
            .unwrap();
        assert_eq!(
            sas.as_query(),
            "sv=2019-02-02&sp=raup&st=2029-12-31T23%3A00%3A00Z&se=2030-01-01T00%3A00%3A00Z\
             &spr=https%2Chttp&sig=OBYa1bm9Bgpy%2Bs63eF8C%2BkntFiEGS8abLg9h1544TWs%3D"
        );
    }
}
