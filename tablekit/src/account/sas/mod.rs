//! Service shared access signatures, signed with the account key: one core
//! ([`sign_service_sas`]) and one builder per kind of resource.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::{Account, AccountKey, SasToken};
use crate::error::{Error, Result};

mod blob;
mod queue;
mod table;

pub use blob::{BlobSas, BlobSasPermissions};
pub use queue::{QueueSas, QueueSasPermissions};
pub use table::{TableSas, TableSasPermissions};

/// The signed version (`sv`) of the SAS tokens tablekit makes.
const SAS_VERSION: &str = "2019-02-02";

/// Query values are percent-encoded except for RFC 3986 unreserved characters.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Which protocols a SAS may be used over (`spr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SasProtocol {
    /// HTTPS only (`spr=https`).
    Https,
    /// HTTPS or HTTP (`spr=https,http`); needed for the emulator over plain HTTP.
    HttpsAndHttp,
}

impl SasProtocol {
    fn as_str(self) -> &'static str {
        match self {
            SasProtocol::Https => "https",
            SasProtocol::HttpsAndHttp => "https,http",
        }
    }
}

/// The permissions of one kind of resource: the letters of `sp`.
trait SasPermissions {
    /// The `sp` value, in the order the service requires.
    fn sp(&self) -> String;
    /// The permissions' names, for the error of an empty set.
    const NAMES: &'static str;
}

/// What one service's SAS adds to the fields every service SAS has.
struct ServiceSas<'a> {
    /// The canonicalized resource: `/{service}/{account}/{name...}`.
    resource: String,
    /// Query parameters between `sv` and `sp` (`tn`, `sr`).
    resource_params: &'a [(&'a str, Option<&'a str>)],
    /// Query parameters between `se` and `spr` (the table's key range).
    range_params: &'a [(&'a str, Option<&'a str>)],
    /// Fields of the string to sign after the version.
    tail: &'a [&'a str],
}

/// The one service SAS core: checks the permissions and window, signs
/// `sp, st, se, resource, si, sip, spr, sv, tail...` and writes the query
/// `sv, resource params, sp, st, se, range params, spr, sig`.
fn sign_service_sas<P: SasPermissions>(
    key: &AccountKey,
    window: &SasWindow,
    permissions: &P,
    sas: ServiceSas<'_>,
) -> Result<SasToken> {
    let sp = permissions.sp();
    if sp.is_empty() {
        return Err(Error::config(format!(
            "a SAS needs at least one permission ({})",
            P::NAMES
        )));
    }
    let w = window.check()?;
    let mut fields = vec![
        sp.as_str(),
        w.st.as_deref().unwrap_or(""),
        &w.se,
        &sas.resource,
        "", // si: signed identifier
        "", // sip: signed IP range
        w.spr.unwrap_or(""),
        SAS_VERSION,
    ];
    fields.extend_from_slice(sas.tail);
    let sig = BASE64.encode(key.hmac_sha256(&fields.join("\n")));
    let mut params = vec![("sv", Some(SAS_VERSION))];
    params.extend_from_slice(sas.resource_params);
    params.extend([
        ("sp", Some(sp.as_str())),
        ("st", w.st.as_deref()),
        ("se", Some(w.se.as_str())),
    ]);
    params.extend_from_slice(sas.range_params);
    params.extend([("spr", w.spr), ("sig", Some(sig.as_str()))]);
    Ok(sas_query(&params))
}

/// The account key a SAS is signed with, or a configuration error naming the
/// credential the account has instead.
fn signing_key(account: &Account) -> Result<&AccountKey> {
    let credential = account.credential();
    credential.account_key().ok_or_else(|| {
        Error::config(format!(
            "signing a SAS needs the account key (a SharedKey or SharedKeyLite credential), \
             but the account's credential is {}",
            credential.kind_name()
        ))
    })
}

/// The validity window and protocol every service SAS carries.
#[derive(Debug, Clone, Default)]
struct SasWindow {
    start: Option<DateTime<Utc>>,
    expiry: Option<DateTime<Utc>>,
    protocol: Option<SasProtocol>,
}

/// A window's signed fields: `st` (if any), `se` and `spr` (if any).
struct SignedWindow {
    st: Option<String>,
    se: String,
    spr: Option<&'static str>,
}

impl SasWindow {
    fn check(&self) -> Result<SignedWindow> {
        let Some(expiry) = self.expiry else {
            return Err(Error::config("a SAS needs an expiry time"));
        };
        if let Some(start) = self.start {
            if start.timestamp() >= expiry.timestamp() {
                return Err(Error::config("the SAS start time is not before its expiry"));
            }
        }
        Ok(SignedWindow {
            st: self.start.map(sas_time),
            se: sas_time(expiry),
            spr: self.protocol.map(SasProtocol::as_str),
        })
    }
}

/// `name=value&...` of the present parameters, values percent-encoded.
fn sas_query(params: &[(&str, Option<&str>)]) -> SasToken {
    let mut query = String::with_capacity(256);
    for (name, value) in params {
        let Some(value) = value else { continue };
        if !query.is_empty() {
            query.push('&');
        }
        query.push_str(name);
        query.push('=');
        query.extend(utf8_percent_encode(value, QUERY_VALUE));
    }
    SasToken::new(query)
}

/// `sp` letters of the granted permissions, in the order given (the service's).
fn letters(grants: &[(bool, char)]) -> String {
    grants
        .iter()
        .filter_map(|(granted, letter)| granted.then_some(*letter))
        .collect()
}

/// A SAS time: ISO 8601 UTC to the second, `2030-01-01T00:00:00Z`.
fn sas_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;

    use super::*;
    use crate::account::Credential;

    /// The emulator's published key; every expected signature was computed with it.
    const KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    fn key() -> AccountKey {
        AccountKey::from_base64(KEY).expect("the test key is valid base64")
    }

    pub(super) fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
            .single()
            .expect("a valid test date")
    }

    pub(super) fn account() -> Account {
        Account::new(
            "myaccount",
            "https://myaccount.table.core.windows.net",
            Credential::SharedKey(key()),
        )
        .expect("a valid test account")
    }

    #[test]
    fn queue_and_blob_sas_refuse_bad_settings_before_signing() {
        let expiry = utc(2030, 1, 1, 0, 0, 0);
        let err = |r: Result<SasToken>| r.unwrap_err().to_string();
        let no_permission = QueueSas::new("jobs").expiry(expiry).sign(&account());
        assert!(err(no_permission).contains("permission"));
        let no_expiry = QueueSas::new("jobs")
            .permissions(QueueSasPermissions::READ_ONLY)
            .sign(&account());
        assert!(err(no_expiry).contains("expiry"));
        let bad_queue = QueueSas::new("Jobs")
            .permissions(QueueSasPermissions::READ_ONLY)
            .expiry(expiry)
            .sign(&account());
        assert!(bad_queue.unwrap_err().is_invalid_input());
        let listing_a_blob = BlobSas::blob("photos", "a.jpg")
            .permissions(BlobSasPermissions {
                list: true,
                ..BlobSasPermissions::READ_ONLY
            })
            .expiry(expiry)
            .sign(&account());
        assert!(err(listing_a_blob).contains("container SAS"));
        let backwards = BlobSas::container("photos")
            .permissions(BlobSasPermissions::READ_ONLY)
            .start(expiry)
            .expiry(expiry)
            .sign(&account());
        assert!(err(backwards).contains("not before"));
        let keyless = account().with_credential(Credential::Anonymous);
        let sas = BlobSas::container("photos")
            .permissions(BlobSasPermissions::READ_ONLY)
            .expiry(expiry);
        assert!(err(sas.sign(&keyless)).contains("Anonymous"));
        let bad_container = BlobSas::container("ph")
            .permissions(BlobSasPermissions::READ_ONLY)
            .expiry(expiry)
            .sign(&account());
        assert!(bad_container.unwrap_err().is_invalid_input());
    }
}
