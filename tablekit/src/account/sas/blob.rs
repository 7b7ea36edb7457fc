//! [`BlobSas`]: a service SAS for a container or one blob.

use chrono::{DateTime, Utc};

use super::{
    blob_sas_tail, letters, sign_service_sas, signing_key, SasIpRange, SasPermissions, SasProtocol,
    SasWindow, ServiceSas, SAS_VERSION,
};
use crate::account::{Account, AccountKey, SasToken};
use crate::error::{Error, Result};
use crate::validate;

/// What a blob or container SAS allows. Each field grants one operation; at
/// least one must be set.
///
/// ```
/// use tablekit::account::BlobSasPermissions;
///
/// let uploader = BlobSasPermissions { create: true, write: true, ..Default::default() };
/// assert_ne!(uploader, BlobSasPermissions::READ_ONLY);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlobSasPermissions {
    /// Download blobs and read their properties (`r`).
    pub read: bool,
    /// Append blocks to append blobs (`a`).
    pub add: bool,
    /// Create blobs that do not exist yet (`c`).
    pub create: bool,
    /// Write blobs (put blob, put block, put block list) (`w`).
    pub write: bool,
    /// Delete blobs (`d`).
    pub delete: bool,
    /// List the container's blobs (`l`); container SAS only.
    pub list: bool,
}

impl BlobSasPermissions {
    /// Read only: download and read properties.
    pub const READ_ONLY: Self = BlobSasPermissions {
        read: true,
        add: false,
        create: false,
        write: false,
        delete: false,
        list: false,
    };

    /// The `sp` value, in the order the service requires (`racwdl`).
    pub(crate) fn to_sp(self) -> String {
        letters(&[
            (self.read, 'r'),
            (self.add, 'a'),
            (self.create, 'c'),
            (self.write, 'w'),
            (self.delete, 'd'),
            (self.list, 'l'),
        ])
    }
}

/// A builder for a service SAS that grants access to one container (`sr=c`: every
/// blob in it) or to one blob (`sr=b`), signed with the account key (signed
/// version `2019-02-02`).
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use tablekit::account::{BlobSas, BlobSasPermissions, SasProtocol};
/// use tablekit::{Account, BlobServiceClient, Credential};
///
/// let account = Account::development();
/// let sas = BlobSas::blob("photos", "employees/000456.jpg")
///     .permissions(BlobSasPermissions::READ_ONLY)
///     .expiry(Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap())
///     .protocol(SasProtocol::HttpsAndHttp)
///     .sign(&account)?;
/// assert!(sas.as_query().starts_with("sv=2019-02-02&sr=b&sp=r&se=2030-01-01T00%3A00%3A00Z"));
///
/// // A reader of that one photo.
/// let reader = BlobServiceClient::new(account.with_credential(Credential::Sas(sas)))?;
/// # let _ = reader;
/// # Ok::<(), tablekit::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a BlobSas does nothing until `.sign(&account)`"]
pub struct BlobSas {
    container: String,
    blob: Option<String>,
    permissions: BlobSasPermissions,
    window: SasWindow,
}

impl BlobSas {
    /// A SAS for every blob of `container`, with no permission yet and no expiry.
    pub fn container(container: impl Into<String>) -> Self {
        BlobSas {
            container: container.into(),
            blob: None,
            permissions: BlobSasPermissions::default(),
            window: SasWindow::default(),
        }
    }

    /// A SAS for the blob `blob` of `container`, with no permission yet and no expiry.
    pub fn blob(container: impl Into<String>, blob: impl Into<String>) -> Self {
        BlobSas {
            blob: Some(blob.into()),
            ..BlobSas::container(container)
        }
    }

    /// The operations the SAS allows.
    pub fn permissions(mut self, permissions: BlobSasPermissions) -> Self {
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
    /// empty or longer than 64 characters, if the IP range is backwards, if the
    /// start is not before the expiry, or if a blob SAS asks for `list`; a
    /// validation error if the container or blob name is invalid.
    pub fn sign(&self, account: &Account) -> Result<SasToken> {
        let key = signing_key(account)?;
        self.sign_with(account.account_name(), key)
    }

    fn sign_with(&self, account: &str, key: &AccountKey) -> Result<SasToken> {
        validate::container_name(&self.container)?;
        if let Some(blob) = &self.blob {
            validate::blob_name(blob)?;
            if self.permissions.list {
                return Err(Error::config(
                    "a blob SAS cannot grant `list`; make a container SAS to list blobs",
                ));
            }
        }
        let (sr, resource) = match &self.blob {
            Some(blob) => ("b", format!("/blob/{account}/{}/{blob}", self.container)),
            None => ("c", format!("/blob/{account}/{}", self.container)),
        };
        // Service SAS string-to-sign for Blob, versions 2018-11-09 to 2020-02-10
        // (2020-12-06 adds the encryption scope after the snapshot time): "Create a
        // service SAS", Blob service; values un-encoded, the blob name as stored.
        // https://learn.microsoft.com/rest/api/storageservices/create-service-sas
        // Cross-checked with Azure/azure-sdk-for-js
        // sdk/storage/storage-blob/src/sas/BlobSASSignatureValues.ts
        // (generateBlobSASQueryParameters20181109) and Azurite's verifier.
        sign_service_sas(
            key,
            &self.window,
            &self.permissions,
            ServiceSas {
                resource,
                resource_params: &[("sr", Some(sr))],
                range_params: &[],
                tail: &blob_sas_tail(SAS_VERSION, sr, "", "", [""; 5]),
            },
        )
    }
}

impl SasPermissions for BlobSasPermissions {
    fn sp(&self) -> String {
        self.to_sp()
    }
    const NAMES: &'static str = "read, add, create, write, delete or list";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::sas::tests::{account, utc};

    // Expected signatures: python3 hmac over the string to sign in each comment,
    // with the emulator key, percent-encoded as in the query.

    #[test]
    fn blob_sas_matches_the_documented_string_to_sign() {
        // "r\n\n2030-01-01T00:00:00Z\n/blob/myaccount/photos/employees/000456 photo.jpg\n\n\n\n2019-02-02\nb\n\n\n\n\n\n"
        let sas = BlobSas::blob("photos", "employees/000456 photo.jpg")
            .permissions(BlobSasPermissions::READ_ONLY)
            .expiry(utc(2030, 1, 1, 0, 0, 0))
            .sign(&account())
            .unwrap();
        assert_eq!(
            sas.as_query(),
            "sv=2019-02-02&sr=b&sp=r&se=2030-01-01T00%3A00%3A00Z\
             &sig=34Fk8a52bOd%2B8Xj%2FnprKx5hGnHpjILc8lHvbj2wcaew%3D"
        );
        // "racwdl\n\n2030-01-01T00:00:00Z\n/blob/myaccount/photos\n\n\nhttps\n2019-02-02\nc\n\n\n\n\n\n"
        let all = BlobSasPermissions {
            read: true,
            add: true,
            create: true,
            write: true,
            delete: true,
            list: true,
        };
        let sas = BlobSas::container("photos")
            .permissions(all)
            .expiry(utc(2030, 1, 1, 0, 0, 0))
            .protocol(SasProtocol::Https)
            .sign(&account())
            .unwrap();
        assert_eq!(
            sas.as_query(),
            "sv=2019-02-02&sr=c&sp=racwdl&se=2030-01-01T00%3A00%3A00Z&spr=https\
             &sig=M8H0TRvlRrKq3I2c9GSKWgU%2FHO5rrcfLnT6AHkLX5yU%3D"
        );
    }
}
