//! [`TableSas`]: a service SAS for one table, optionally a key range of it.

use chrono::{DateTime, Utc};

use super::{
    letters, sign_service_sas, signing_key, SasIpRange, SasPermissions, SasProtocol, SasWindow,
    ServiceSas,
};
use crate::account::{Account, AccountKey, SasToken, Target};
use crate::error::{Error, KeyKind, Result, ValidationError};
use crate::validate;

/// What a table SAS allows. Each field grants one operation; at least one must be set.
///
/// ```
/// use tablekit::account::TableSasPermissions;
///
/// let read_and_add = TableSasPermissions { read: true, add: true, ..Default::default() };
/// assert_ne!(read_and_add, TableSasPermissions::READ_ONLY);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableSasPermissions {
    /// Get and query entities (`r`).
    pub read: bool,
    /// Insert entities (`a`); an upsert needs `add` and `update`.
    pub add: bool,
    /// Update and merge entities (`u`); an upsert needs `add` and `update`.
    pub update: bool,
    /// Delete entities (`d`).
    pub delete: bool,
}

impl TableSasPermissions {
    /// Read only: get and query entities.
    pub const READ_ONLY: Self = TableSasPermissions {
        read: true,
        add: false,
        update: false,
        delete: false,
    };

    /// Read, add, update and delete.
    pub const ALL: Self = TableSasPermissions {
        read: true,
        add: true,
        update: true,
        delete: true,
    };

    /// The `sp` value, in the order the service requires (`raud`).
    pub(crate) fn to_sp(self) -> String {
        letters(&[
            (self.read, 'r'),
            (self.add, 'a'),
            (self.update, 'u'),
            (self.delete, 'd'),
        ])
    }
}

/// A builder for a service SAS that grants access to one table, signed with the
/// account key (signed version `2019-02-02`).
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use tablekit::account::{SasProtocol, TableSas, TableSasPermissions};
/// use tablekit::{Account, Credential};
///
/// let account = Account::development();
/// let sas = TableSas::new("orders")
///     .permissions(TableSasPermissions::READ_ONLY)
///     .expiry(Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap())
///     .partition_key_range(Some("customer-17"), Some("customer-17"))
///     .protocol(SasProtocol::HttpsAndHttp)
///     .sign(&account)?;
/// assert!(sas.as_query().starts_with("sv=2019-02-02&tn=orders&sp=r&se=2030-01-01T00%3A00%3A00Z"));
///
/// // Hand it to a reader that holds no key.
/// let reader = account.with_credential(Credential::Sas(sas));
/// # let _ = reader;
/// # Ok::<(), tablekit::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a TableSas does nothing until `.sign(&account)`"]
pub struct TableSas {
    table: String,
    permissions: TableSasPermissions,
    window: SasWindow,
    start_partition_key: Option<String>,
    end_partition_key: Option<String>,
    start_row_key: Option<String>,
    end_row_key: Option<String>,
}

impl TableSas {
    /// A SAS for `table`, with no permission yet and no expiry; set both before signing.
    pub fn new(table: impl Into<String>) -> Self {
        TableSas {
            table: table.into(),
            permissions: TableSasPermissions::default(),
            window: SasWindow::default(),
            start_partition_key: None,
            end_partition_key: None,
            start_row_key: None,
            end_row_key: None,
        }
    }

    /// The operations the SAS allows.
    pub fn permissions(mut self, permissions: TableSasPermissions) -> Self {
        self.permissions = permissions;
        self
    }

    /// Restricts the SAS to partition keys from `start` to `end`, both inclusive
    /// (`spk`, `epk`); `None` leaves that side open.
    pub fn partition_key_range(mut self, start: Option<&str>, end: Option<&str>) -> Self {
        self.start_partition_key = start.map(str::to_owned);
        self.end_partition_key = end.map(str::to_owned);
        self
    }

    /// Refines the partition key bounds with row keys (`srk`, `erk`): the start bound
    /// becomes (`spk`, `srk`) and the end bound (`epk`, `erk`). A row key bound needs the
    /// partition key bound on the same side.
    pub fn row_key_range(mut self, start: Option<&str>, end: Option<&str>) -> Self {
        self.start_row_key = start.map(str::to_owned);
        self.end_row_key = end.map(str::to_owned);
        self
    }

    service_sas_window_setters!();

    /// Signs the SAS with the account's key.
    ///
    /// # Errors
    ///
    /// A configuration error if the account's credential is not
    /// [`SharedKey`](crate::account::Credential::SharedKey) or
    /// [`SharedKeyLite`](crate::account::Credential::SharedKeyLite), if no permission or
    /// no expiry is set and no stored access policy is named, if the SAS sets a
    /// field its stored access policy sets too (see [`policy_id`](Self::policy_id)),
    /// if the policy id is empty or longer than 64 characters, if the start is not
    /// before the expiry, if the IP range is backwards, or if a row key bound has no
    /// partition key bound on its side; a validation error if the table name or a
    /// key bound is invalid, or if the SAS names a stored access policy on an
    /// account whose [`Target`] is Cosmos DB (which has none).
    pub fn sign(&self, account: &Account) -> Result<SasToken> {
        if account.target() == Target::CosmosDb {
            if let Some(id) = &self.window.policy_id {
                return Err(Error::invalid(ValidationError::CosmosDb {
                    reason: format!(
                        "the SAS names the stored access policy {id:?} (si), and Cosmos DB \
                         has no stored access policies: set the permissions and expiry on the SAS"
                    ),
                }));
            }
        }
        let key = signing_key(account)?;
        self.sign_with(account.account_name(), key)
    }

    fn sign_with(&self, account: &str, key: &AccountKey) -> Result<SasToken> {
        validate::table_name(&self.table)?;
        let bounds = [
            (KeyKind::PartitionKey, &self.start_partition_key),
            (KeyKind::PartitionKey, &self.end_partition_key),
            (KeyKind::RowKey, &self.start_row_key),
            (KeyKind::RowKey, &self.end_row_key),
        ];
        for (kind, bound) in bounds {
            if let Some(value) = bound {
                validate::key(kind, value)?;
            }
        }
        if self.start_row_key.is_some() && self.start_partition_key.is_none() {
            return Err(Error::config(
                "SAS row key range: a start row key needs a start partition key",
            ));
        }
        if self.end_row_key.is_some() && self.end_partition_key.is_none() {
            return Err(Error::config(
                "SAS row key range: an end row key needs an end partition key",
            ));
        }
        let spk = self.start_partition_key.as_deref();
        let srk = self.start_row_key.as_deref();
        let epk = self.end_partition_key.as_deref();
        let erk = self.end_row_key.as_deref();
        // Service SAS string-to-sign for Table, versions 2015-04-05 and later (2019-02-02
        // adds nothing for tables): values URL-decoded, empty when absent, table name
        // lower-cased in the canonicalized resource, `si` and `sip` empty (not offered).
        // Source: "Create a service SAS", Constructing the signature string,
        // https://learn.microsoft.com/rest/api/storageservices/create-service-sas
        // (also tongwu-msft/azure-rest-api-specs docs-ref-conceptual/storageservices/create-service-sas.md),
        // cross-checked with Azure/azure-sdk-for-python
        // sdk/tables/azure-data-tables/azure/data/tables/_table_shared_access_signature.py
        // (`add_resource_signature`).
        sign_service_sas(
            key,
            &self.window,
            &self.permissions,
            ServiceSas {
                resource: format!("/table/{account}/{}", self.table.to_ascii_lowercase()),
                resource_params: &[("tn", Some(self.table.as_str()))],
                range_params: &[("spk", spk), ("srk", srk), ("epk", epk), ("erk", erk)],
                tail: &[
                    spk.unwrap_or(""),
                    srk.unwrap_or(""),
                    epk.unwrap_or(""),
                    erk.unwrap_or(""),
                ],
            },
        )
    }
}

impl SasPermissions for TableSasPermissions {
    fn sp(&self) -> String {
        self.to_sp()
    }
    const NAMES: &'static str = "read, add, update or delete";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::sas::tests::{account, utc};
    use crate::account::Credential;

    #[test]
    fn table_sas_with_every_field_matches_the_documented_string_to_sign() {
        // String-to-sign:
        // "raud\n2026-01-02T03:04:05Z\n2026-02-03T04:05:06Z\n/table/myaccount/orders\n\n\nhttps,http\n2019-02-02\ncust 1\na\ncust 9\nz&z"
        // signed as above; the query is '&'.join(k + '=' + urllib.parse.quote(v, safe='')).
        let sas = TableSas::new("Orders")
            .permissions(TableSasPermissions::ALL)
            .start(utc(2026, 1, 2, 3, 4, 5))
            .expiry(utc(2026, 2, 3, 4, 5, 6))
            .partition_key_range(Some("cust 1"), Some("cust 9"))
            .row_key_range(Some("a"), Some("z&z"))
            .protocol(SasProtocol::HttpsAndHttp)
            .sign(&account())
            .expect("signs");
        assert_eq!(
            sas.as_query(),
            "sv=2019-02-02&tn=Orders&sp=raud&st=2026-01-02T03%3A04%3A05Z&se=2026-02-03T04%3A05%3A06Z\
             &spk=cust%201&srk=a&epk=cust%209&erk=z%26z&spr=https%2Chttp\
             &sig=zjXrOmGOQnE9IfUS0AGC%2F8YPWhwhQcbhFeqBjZ%2FdrIE%3D"
        );
    }

    #[test]
    fn table_sas_with_only_required_fields_leaves_the_rest_empty() {
        // "r\n\n2030-01-01T00:00:00Z\n/table/devstoreaccount1/orders\n\n\n\n2019-02-02\n\n\n\n"
        let sas = TableSas::new("orders")
            .permissions(TableSasPermissions::READ_ONLY)
            .expiry(utc(2030, 1, 1, 0, 0, 0))
            .sign(&Account::development())
            .expect("signs");
        assert_eq!(
            sas.as_query(),
            "sv=2019-02-02&tn=orders&sp=r&se=2030-01-01T00%3A00%3A00Z\
             &sig=J3O14Ug0GfliJhgJBEC6UvLVxz%2Faab4xrvXdZOyjH60%3D"
        );
    }

    #[test]
    fn table_sas_permissions_follow_the_service_order() {
        let p = TableSasPermissions {
            delete: true,
            read: true,
            ..Default::default()
        };
        assert_eq!(p.to_sp(), "rd");
        assert_eq!(TableSasPermissions::ALL.to_sp(), "raud");
    }

    fn sign_error(sas: TableSas, account: &Account) -> String {
        match sas.sign(account) {
            Ok(_) => panic!("signing should fail"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn table_sas_needs_an_account_key() {
        let sas_account = account().with_credential(Credential::Sas(SasToken::new("sv=x&sig=y")));
        let sas = TableSas::new("orders")
            .permissions(TableSasPermissions::READ_ONLY)
            .expiry(utc(2030, 1, 1, 0, 0, 0));
        let message = sign_error(sas.clone(), &sas_account);
        assert!(message.contains("needs the account key"), "{message}");
        assert!(message.contains("Sas"), "{message}");
        let anonymous = account().with_credential(Credential::Anonymous);
        assert!(sign_error(sas, &anonymous).contains("Anonymous"));
    }

    #[test]
    fn table_sas_rejects_incomplete_or_inconsistent_settings() {
        let base = || {
            TableSas::new("orders")
                .permissions(TableSasPermissions::READ_ONLY)
                .expiry(utc(2030, 1, 1, 0, 0, 0))
        };
        let a = account();
        let no_permission = base().permissions(TableSasPermissions::default());
        assert!(sign_error(no_permission, &a).contains("at least one permission"));
        let no_expiry = TableSas::new("orders").permissions(TableSasPermissions::READ_ONLY);
        assert!(sign_error(no_expiry, &a).contains("expiry"));
        let reversed = base().start(utc(2031, 1, 1, 0, 0, 0));
        assert!(sign_error(reversed, &a).contains("not before its expiry"));
        let row_without_partition = base().row_key_range(Some("a"), None);
        assert!(sign_error(row_without_partition, &a).contains("start partition key"));
        let end_row_without_partition = base()
            .partition_key_range(Some("p"), None)
            .row_key_range(None, Some("z"));
        assert!(sign_error(end_row_without_partition, &a).contains("end partition key"));
        assert!(sign_error(base().partition_key_range(Some("a/b"), None), &a).contains("'/'"));
        let bad_table = TableSas::new("1orders")
            .permissions(TableSasPermissions::READ_ONLY)
            .expiry(utc(2030, 1, 1, 0, 0, 0));
        assert!(sign_error(bad_table, &a).contains("1orders"));
    }

    #[test]
    fn table_sas_start_none_is_accepted() {
        let sas = TableSas::new("orders")
            .permissions(TableSasPermissions::READ_ONLY)
            .start(None)
            .expiry(utc(2030, 1, 1, 0, 0, 0))
            .protocol(SasProtocol::Https)
            .sign(&account())
            .expect("signs");
        assert!(!sas.as_query().contains("st="));
        assert!(sas.as_query().contains("&spr=https&sig="));
    }
}
