//! [`AccountSas`]: an account SAS, for several services and for service-level
//! calls (service properties, listing, creating and deleting tables, queues
//! and containers) that a service SAS cannot grant.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use chrono::{DateTime, Utc};

use super::{
    account_sas_string_to_sign, letters, sas_query, signing_key, AccountSasFields, SasIpRange,
    SasProtocol, SasWindow, SAS_VERSION,
};
use crate::account::{Account, AccountKey, SasToken};
use crate::error::{Error, Result};

/// The services an account SAS is valid for (`ss`); at least one must be set.
///
/// ```
/// use tablekit::account::AccountSasServices;
///
/// let tables_and_queues = AccountSasServices { table: true, queue: true, ..Default::default() };
/// assert_ne!(tables_and_queues, AccountSasServices::ALL);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountSasServices {
    /// The Blob service (`b`).
    pub blob: bool,
    /// The Queue service (`q`).
    pub queue: bool,
    /// The Table service (`t`).
    pub table: bool,
}

impl AccountSasServices {
    /// Blobs, queues and tables.
    pub const ALL: Self = AccountSasServices {
        blob: true,
        queue: true,
        table: true,
    };

    fn to_ss(self) -> String {
        letters(&[(self.blob, 'b'), (self.queue, 'q'), (self.table, 't')])
    }
}

/// The levels of resource an account SAS is valid for (`srt`); at least one
/// must be set.
///
/// ```
/// use tablekit::account::AccountSasResourceTypes;
///
/// let entities_only = AccountSasResourceTypes { object: true, ..Default::default() };
/// assert_ne!(entities_only, AccountSasResourceTypes::ALL);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountSasResourceTypes {
    /// Service-level calls (`s`): service properties and stats, listing
    /// containers, queues and tables.
    pub service: bool,
    /// Container-level calls (`c`): create and delete tables, queues and
    /// containers, list blobs, queue and container metadata.
    pub container: bool,
    /// Object-level calls (`o`): entities, messages and blobs.
    pub object: bool,
}

impl AccountSasResourceTypes {
    /// Service, container and object.
    pub const ALL: Self = AccountSasResourceTypes {
        service: true,
        container: true,
        object: true,
    };

    fn to_srt(self) -> String {
        letters(&[
            (self.service, 's'),
            (self.container, 'c'),
            (self.object, 'o'),
        ])
    }
}

/// What an account SAS allows (`sp`); each permission applies only where the
/// REST reference's table for it says ("Account SAS permissions by
/// operation"). At least one must be set.
///
/// ```
/// use tablekit::account::AccountSasPermissions;
///
/// let reader = AccountSasPermissions { read: true, list: true, ..Default::default() };
/// assert_ne!(reader, AccountSasPermissions::READ_ONLY);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountSasPermissions {
    /// Read (`r`): get entities, peek messages, download blobs, get service properties.
    pub read: bool,
    /// Write (`w`): create tables, queues and containers, write blobs, set service properties.
    pub write: bool,
    /// Delete (`d`): delete tables, queues, containers, entities and blobs.
    pub delete: bool,
    /// List (`l`): list tables, queues, containers and blobs.
    pub list: bool,
    /// Add (`a`): insert entities, send messages, append blocks.
    pub add: bool,
    /// Create (`c`): create tables, queues, containers and new blobs.
    pub create: bool,
    /// Update (`u`): update entities and messages.
    pub update: bool,
    /// Process (`p`): receive and delete messages.
    pub process: bool,
}

impl AccountSasPermissions {
    /// Read only.
    pub const READ_ONLY: Self = AccountSasPermissions {
        read: true,
        write: false,
        delete: false,
        list: false,
        add: false,
        create: false,
        update: false,
        process: false,
    };

    /// Every permission.
    pub const ALL: Self = AccountSasPermissions {
        read: true,
        write: true,
        delete: true,
        list: true,
        add: true,
        create: true,
        update: true,
        process: true,
    };

    /// The `sp` value, in the order of the REST reference (`rwdlacup`).
    fn to_sp(self) -> String {
        letters(&[
            (self.read, 'r'),
            (self.write, 'w'),
            (self.delete, 'd'),
            (self.list, 'l'),
            (self.add, 'a'),
            (self.create, 'c'),
            (self.update, 'u'),
            (self.process, 'p'),
        ])
    }
}

/// A builder for an account SAS, signed with the account key (signed version
/// `2019-02-02`): valid for the chosen services and levels of resource of the
/// whole account, including the service-level calls no service SAS can grant.
/// An account SAS cannot name a stored access policy, so the only way to
/// revoke one before it expires is to rotate the key that signed it.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use tablekit::account::{
///     AccountSas, AccountSasPermissions, AccountSasResourceTypes, AccountSasServices, SasProtocol,
/// };
/// use tablekit::{Account, Credential, TableServiceClient};
///
/// let account = Account::development();
/// let sas = AccountSas::new()
///     .services(AccountSasServices { table: true, ..Default::default() })
///     .resource_types(AccountSasResourceTypes { service: true, container: true, ..Default::default() })
///     .permissions(AccountSasPermissions { read: true, list: true, ..Default::default() })
///     .expiry(Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap())
///     .protocol(SasProtocol::HttpsAndHttp)
///     .sign(&account)?;
/// assert!(sas.as_query().starts_with("sv=2019-02-02&ss=t&srt=sc&sp=rl&se=2030-01-01T00%3A00%3A00Z"));
///
/// // A client that can list the account's tables and read its settings, nothing more.
/// let auditor = TableServiceClient::new(account.with_credential(Credential::Sas(sas)))?;
/// # let _ = auditor;
/// # Ok::<(), tablekit::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "an AccountSas does nothing until `.sign(&account)`"]
pub struct AccountSas {
    services: AccountSasServices,
    resource_types: AccountSasResourceTypes,
    permissions: AccountSasPermissions,
    window: SasWindow,
}

impl AccountSas {
    /// An account SAS with no service, resource type or permission yet and no
    /// expiry; set all four before signing.
    pub fn new() -> Self {
        AccountSas::default()
    }

    /// The services the SAS is valid for.
    pub fn services(mut self, services: AccountSasServices) -> Self {
        self.services = services;
        self
    }

    /// The levels of resource the SAS is valid for.
    pub fn resource_types(mut self, resource_types: AccountSasResourceTypes) -> Self {
        self.resource_types = resource_types;
        self
    }

    /// The operations the SAS allows.
    pub fn permissions(mut self, permissions: AccountSasPermissions) -> Self {
        self.permissions = permissions;
        self
    }

    /// When the SAS becomes valid (`st`); `None` (the default) means as soon as
    /// it is issued. Truncated to whole seconds.
    pub fn start(mut self, start: impl Into<Option<DateTime<Utc>>>) -> Self {
        self.window.start = start.into();
        self
    }

    /// When the SAS stops working (`se`). Required. Truncated to whole seconds.
    pub fn expiry(mut self, expiry: DateTime<Utc>) -> Self {
        self.window.expiry = Some(expiry);
        self
    }

    /// Restricts the protocols the SAS may be used over (`spr`).
    pub fn protocol(mut self, protocol: SasProtocol) -> Self {
        self.window.protocol = Some(protocol);
        self
    }

    /// Restricts the SAS to requests from these addresses (`sip`).
    pub fn ip_range(mut self, range: SasIpRange) -> Self {
        self.window.ip = Some(range);
        self
    }

    /// Signs the SAS with the account's key.
    ///
    /// # Errors
    ///
    /// A configuration error if the account holds no key, if no service, no
    /// resource type, no permission or no expiry is set, if the start is not
    /// before the expiry, or if the IP range is backwards.
    pub fn sign(&self, account: &Account) -> Result<SasToken> {
        let key = signing_key(account)?;
        self.sign_with(account.account_name(), key)
    }

    fn sign_with(&self, account: &str, key: &AccountKey) -> Result<SasToken> {
        let ss = self.services.to_ss();
        let srt = self.resource_types.to_srt();
        let sp = self.permissions.to_sp();
        for (value, what) in [
            (&ss, "service (blob, queue or table)"),
            (&srt, "resource type (service, container or object)"),
            (
                &sp,
                "permission (read, write, delete, list, add, create, update or process)",
            ),
        ] {
            if value.is_empty() {
                return Err(Error::config(format!(
                    "an account SAS needs at least one {what}"
                )));
            }
        }
        let w = self.window.check(false)?;
        // Account SAS string-to-sign, versions 2015-04-05 to 2020-08-04 (2020-12-06
        // adds the encryption scope): account name, sp, ss, srt, st, se, sip, spr, sv,
        // each followed by a newline, values URL-decoded. "Create an account SAS",
        // Constructing the signature string,
        // https://learn.microsoft.com/rest/api/storageservices/create-account-sas
        let string_to_sign = account_sas_string_to_sign(&AccountSasFields {
            account,
            sp: &sp,
            ss: &ss,
            srt: &srt,
            st: w.st.as_deref().unwrap_or(""),
            se: w.se.as_deref().unwrap_or(""),
            sip: w.sip.as_deref().unwrap_or(""),
            spr: w.spr.unwrap_or(""),
            sv: SAS_VERSION,
            ses: "",
        });
        let sig = BASE64.encode(key.hmac_sha256(&string_to_sign));
        Ok(sas_query(&[
            ("sv", Some(SAS_VERSION)),
            ("ss", Some(&ss)),
            ("srt", Some(&srt)),
            ("sp", Some(&sp)),
            ("st", w.st.as_deref()),
            ("se", w.se.as_deref()),
            ("sip", w.sip.as_deref()),
            ("spr", w.spr),
            ("sig", Some(&sig)),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::account::sas::tests::{account, utc};

    // Expected signatures: python3 hmac over the string to sign in each comment,
    // with the emulator key, percent-encoded as in the query.

    #[test]
    fn account_sas_with_every_field_matches_the_documented_string_to_sign() {
        // "myaccount\nrwdlacup\nbqt\nsco\n2026-01-02T03:04:05Z\n2026-02-03T04:05:06Z\n168.1.5.60-168.1.5.70\nhttps\n2019-02-02\n"
        let sas = AccountSas::new()
            .services(AccountSasServices::ALL)
            .resource_types(AccountSasResourceTypes::ALL)
            .permissions(AccountSasPermissions::ALL)
            .start(utc(2026, 1, 2, 3, 4, 5))
            .expiry(utc(2026, 2, 3, 4, 5, 6))
            .ip_range(SasIpRange::range(
                Ipv4Addr::new(168, 1, 5, 60),
                Ipv4Addr::new(168, 1, 5, 70),
            ))
            .protocol(SasProtocol::Https)
            .sign(&account())
            .unwrap();
        assert_eq!(sas.as_query(), ACCOUNT_SAS_EVERY_FIELD);
    }

    #[test]
    fn account_sas_with_only_required_fields_leaves_the_rest_empty() {
        // "myaccount\nr\nt\no\n\n2030-01-01T00:00:00Z\n\n\n2019-02-02\n"
        let sas = AccountSas::new()
            .services(AccountSasServices {
                table: true,
                ..Default::default()
            })
            .resource_types(AccountSasResourceTypes {
                object: true,
                ..Default::default()
            })
            .permissions(AccountSasPermissions::READ_ONLY)
            .expiry(utc(2030, 1, 1, 0, 0, 0))
            .sign(&account())
            .unwrap();
        assert_eq!(sas.as_query(), ACCOUNT_SAS_REQUIRED_ONLY);
    }

    #[test]
    fn account_sas_refuses_missing_settings_before_signing() {
        let full = || {
            AccountSas::new()
                .services(AccountSasServices::ALL)
                .resource_types(AccountSasResourceTypes::ALL)
                .permissions(AccountSasPermissions::ALL)
                .expiry(utc(2030, 1, 1, 0, 0, 0))
        };
        let err = |sas: AccountSas| sas.sign(&account()).unwrap_err().to_string();
        assert!(err(full().services(AccountSasServices::default())).contains("service"));
        assert!(err(full().resource_types(Default::default())).contains("resource type"));
        assert!(err(full().permissions(Default::default())).contains("permission"));
        let no_expiry = AccountSas::new()
            .services(AccountSasServices::ALL)
            .resource_types(AccountSasResourceTypes::ALL)
            .permissions(AccountSasPermissions::ALL);
        assert!(err(no_expiry).contains("expiry"));
        assert!(err(full().start(utc(2031, 1, 1, 0, 0, 0))).contains("not before"));
        let keyless = account().with_credential(crate::account::Credential::Anonymous);
        assert!(full()
            .sign(&keyless)
            .unwrap_err()
            .to_string()
            .contains("account key"));
    }

    const ACCOUNT_SAS_EVERY_FIELD: &str = "sv=2019-02-02&ss=bqt&srt=sco&sp=rwdlacup\
        &st=2026-01-02T03%3A04%3A05Z&se=2026-02-03T04%3A05%3A06Z&sip=168.1.5.60-168.1.5.70\
        &spr=https&sig=NfYIH1uWSZlLCimYjlmnZzHblYMyVCeK2WcBTibng%2Bw%3D";
    const ACCOUNT_SAS_REQUIRED_ONLY: &str =
        "sv=2019-02-02&ss=t&srt=o&sp=r&se=2030-01-01T00%3A00%3A00Z\
        &sig=ytS94xGpydLr%2FPvKabI4x%2BI5QEYc23O8ULNeSJ09twQ%3D";
}
