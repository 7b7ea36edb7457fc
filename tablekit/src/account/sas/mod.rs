//! Service shared access signatures, signed with the account key: one core
//! ([`sign_service_sas`]) and one builder per kind of resource.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::{Account, AccountKey, SasToken};
use crate::error::{Error, Result};

/// The setters every service SAS builder shares (they all keep a
/// `window: SasWindow`): start, expiry, protocol, IP range and stored access
/// policy.
macro_rules! service_sas_window_setters {
    () => {
        /// When the SAS becomes valid (`st`); `None` (the default) means as soon as it is
        /// issued. Truncated to whole seconds. Setting it a few minutes in the past absorbs
        /// clock skew between machines.
        pub fn start(mut self, start: impl Into<Option<DateTime<Utc>>>) -> Self {
            self.window.start = start.into();
            self
        }

        /// When the SAS stops working (`se`). Required unless a stored access policy
        /// ([`policy_id`](Self::policy_id)) sets it. Truncated to whole seconds.
        pub fn expiry(mut self, expiry: DateTime<Utc>) -> Self {
            self.window.expiry = Some(expiry);
            self
        }

        /// Restricts the protocols the SAS may be used over (`spr`). Without it the service
        /// accepts both HTTPS and HTTP.
        pub fn protocol(mut self, protocol: SasProtocol) -> Self {
            self.window.protocol = Some(protocol);
            self
        }

        /// Restricts the SAS to requests from these addresses (`sip`).
        pub fn ip_range(mut self, range: SasIpRange) -> Self {
            self.window.ip = Some(range);
            self
        }

        /// Ties the SAS to the stored access policy `id` of the resource (`si`; see
        /// [`crate::acl`]), which gives it its permissions, start and expiry.
        /// Removing or changing the policy revokes or changes every SAS tied to
        /// it, without touching the account key.
        ///
        /// The service refuses a SAS that sets a field its policy sets too. Named
        /// by id alone, the policy may set any of them, so signing refuses a SAS
        /// that also sets its own permissions, start or expiry. To combine them
        /// (a policy that sets only the expiry, say, and permissions per SAS),
        /// name the policy with [`policy`](Self::policy) instead.
        pub fn policy_id(mut self, id: impl Into<String>) -> Self {
            self.window.policy_id = Some(id.into());
            self.window.policy_sets = None;
            self
        }

        /// Ties the SAS to the stored access policy `id`, which sets the fields
        /// flagged: what [`policy`](Self::policy) does with a policy's parts.
        /// (`policy` itself is defined beside the policy type, in `acl`.)
        #[cfg(feature = "admin")]
        pub(crate) fn policy_parts(
            mut self,
            id: &str,
            sets_start: bool,
            sets_expiry: bool,
            sets_permissions: bool,
        ) -> Self {
            self.window.policy_id = Some(id.to_owned());
            self.window.policy_sets = Some(super::PolicySets {
                start: sets_start,
                expiry: sets_expiry,
                permissions: sets_permissions,
            });
            self
        }
    };
}

mod account;
mod blob;
mod ip;
mod queue;
mod table;

pub use account::{AccountSas, AccountSasPermissions, AccountSasResourceTypes, AccountSasServices};
pub use blob::{BlobSas, BlobSasPermissions};
pub use ip::SasIpRange;
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
/// `sv, resource params, sp, st, se, range params, sip, spr, si, sig`.
///
/// With a stored access policy (`si`), the permissions and the expiry may come
/// from the policy instead: each is then left out of the token (signed empty).
/// A field set by both the SAS and its policy (or, for a policy named by id
/// alone, by the SAS at all) is refused, as the service refuses it.
fn sign_service_sas<P: SasPermissions>(
    key: &AccountKey,
    window: &SasWindow,
    permissions: &P,
    sas: ServiceSas<'_>,
) -> Result<SasToken> {
    let sp = permissions.sp();
    let policy = window.policy_id.as_deref();
    let sets = match policy {
        Some(id) => {
            check_policy_id(id).map_err(Error::config)?;
            let sets = window.policy_sets.unwrap_or(PolicySets::ANY);
            let both: Vec<&str> = [
                (sets.permissions && !sp.is_empty(), "permissions"),
                (sets.start && window.start.is_some(), "start"),
                (sets.expiry && window.expiry.is_some(), "expiry"),
            ]
            .iter()
            .filter_map(|(both, field)| both.then_some(*field))
            .collect();
            if !both.is_empty() {
                return Err(Error::config(if window.policy_sets.is_none() {
                    format!(
                        "the SAS names the stored access policy {id:?} by id and sets its own {}: \
                         the service refuses a SAS that sets a field its policy sets too, so a SAS \
                         named by policy id leaves permissions, start and expiry to the policy; \
                         leave them out, or name the policy with `.policy(&policy)` to set what \
                         it leaves out",
                        both.join(", ")
                    )
                } else {
                    format!(
                        "the SAS and its stored access policy {id:?} both set the {}: the service \
                         refuses such a SAS; leave it to the policy",
                        both.join(", ")
                    )
                }));
            }
            sets
        }
        None => PolicySets::NONE,
    };
    if sp.is_empty() && !sets.permissions {
        return Err(Error::config(format!(
            "a SAS needs at least one permission ({}), or a stored access policy that grants them",
            P::NAMES
        )));
    }
    let w = window.check(sets.expiry)?;
    let sp = (!sp.is_empty()).then_some(sp);
    let string_to_sign = service_sas_string_to_sign(&ServiceSasFields {
        sp: sp.as_deref().unwrap_or(""),
        st: w.st.as_deref().unwrap_or(""),
        se: w.se.as_deref().unwrap_or(""),
        resource: &sas.resource,
        si: policy.unwrap_or(""),
        sip: w.sip.as_deref().unwrap_or(""),
        spr: w.spr.unwrap_or(""),
        sv: SAS_VERSION,
        tail: sas.tail,
    });
    let sig = BASE64.encode(key.hmac_sha256(&string_to_sign));
    let mut params = vec![("sv", Some(SAS_VERSION))];
    params.extend_from_slice(sas.resource_params);
    params.extend([
        ("sp", sp.as_deref()),
        ("st", w.st.as_deref()),
        ("se", w.se.as_deref()),
    ]);
    params.extend_from_slice(sas.range_params);
    params.extend([
        ("sip", w.sip.as_deref()),
        ("spr", w.spr),
        ("si", policy),
        ("sig", Some(sig.as_str())),
    ]);
    Ok(sas_query(&params))
}

/// The fields every service SAS signs, as they travel (decoded, `""` when
/// absent), and what one service adds after them.
pub(crate) struct ServiceSasFields<'a> {
    pub(crate) sp: &'a str,
    pub(crate) st: &'a str,
    pub(crate) se: &'a str,
    /// The canonicalized resource: `/{service}/{account}/{name...}`.
    pub(crate) resource: &'a str,
    pub(crate) si: &'a str,
    pub(crate) sip: &'a str,
    pub(crate) spr: &'a str,
    pub(crate) sv: &'a str,
    /// The service's own fields: a table's key range, a blob's resource,
    /// snapshot and answer overrides ([`blob_sas_tail`]), nothing for queues.
    pub(crate) tail: &'a [&'a str],
}

/// A service SAS's string to sign: `sp, st, se, resource, si, sip, spr, sv`
/// and the service's tail, one per line. The one builder of both directions:
/// the SAS builders sign it, the server (`tablekit::server`) verifies it.
pub(crate) fn service_sas_string_to_sign(f: &ServiceSasFields<'_>) -> String {
    let mut fields = vec![f.sp, f.st, f.se, f.resource, f.si, f.sip, f.spr, f.sv];
    fields.extend_from_slice(f.tail);
    fields.join("\n")
}

/// The fields a blob SAS of version `sv` signs after the version: from
/// 2018-11-09 the signed resource (`sr`) and snapshot time, from 2020-12-06
/// the encryption scope (`ses`), then the five answer overrides (`rscc`,
/// `rscd`, `rsce`, `rscl`, `rsct`).
pub(crate) fn blob_sas_tail<'a>(
    sv: &str,
    sr: &'a str,
    snapshot: &'a str,
    ses: &'a str,
    overrides: [&'a str; 5],
) -> Vec<&'a str> {
    let mut tail = Vec::with_capacity(8);
    if sv >= "2018-11-09" {
        tail.extend([sr, snapshot]);
    }
    if sv >= "2020-12-06" {
        tail.push(ses);
    }
    tail.extend(overrides);
    tail
}

/// The fields an account SAS signs, as they travel (decoded, `""` when
/// absent).
pub(crate) struct AccountSasFields<'a> {
    pub(crate) account: &'a str,
    pub(crate) sp: &'a str,
    pub(crate) ss: &'a str,
    pub(crate) srt: &'a str,
    pub(crate) st: &'a str,
    pub(crate) se: &'a str,
    pub(crate) sip: &'a str,
    pub(crate) spr: &'a str,
    pub(crate) sv: &'a str,
    /// The encryption scope, signed from version 2020-12-06.
    pub(crate) ses: &'a str,
}

/// An account SAS's string to sign: the account, `sp, ss, srt, st, se, sip,
/// spr, sv` (and `ses` from 2020-12-06), each followed by a newline. The
/// one builder of both directions, as [`service_sas_string_to_sign`].
pub(crate) fn account_sas_string_to_sign(f: &AccountSasFields<'_>) -> String {
    let mut fields = vec![f.account, f.sp, f.ss, f.srt, f.st, f.se, f.sip, f.spr, f.sv];
    if f.sv >= "2020-12-06" {
        fields.push(f.ses);
    }
    fields.push("");
    fields.join("\n")
}

/// The longest id of a stored access policy the service accepts.
pub(crate) const MAX_POLICY_ID_CHARS: usize = 64;

/// Checks the id of a stored access policy: 1 to 64 characters; the error
/// says why not.
pub(crate) fn check_policy_id(id: &str) -> std::result::Result<(), String> {
    let n = id.chars().count();
    if n == 0 || n > MAX_POLICY_ID_CHARS {
        return Err(format!(
            "a stored access policy id has 1 to {MAX_POLICY_ID_CHARS} characters, not {n}"
        ));
    }
    Ok(())
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

/// The validity window, address range, protocol and stored access policy a
/// SAS carries (an account SAS never has a policy).
#[derive(Debug, Clone, Default)]
struct SasWindow {
    start: Option<DateTime<Utc>>,
    expiry: Option<DateTime<Utc>>,
    protocol: Option<SasProtocol>,
    ip: Option<SasIpRange>,
    /// `si`: the id of a stored access policy of the resource.
    policy_id: Option<String>,
    /// What that policy sets, when the builder was given the policy itself;
    /// `None`: named by id alone, it may set anything.
    policy_sets: Option<PolicySets>,
}

/// Which of the fields a SAS may carry its stored access policy sets.
#[derive(Debug, Clone, Copy)]
struct PolicySets {
    start: bool,
    expiry: bool,
    permissions: bool,
}

impl PolicySets {
    /// A policy known by id alone: it may set any of them.
    const ANY: PolicySets = PolicySets {
        start: true,
        expiry: true,
        permissions: true,
    };
    /// No policy.
    const NONE: PolicySets = PolicySets {
        start: false,
        expiry: false,
        permissions: false,
    };
}

/// A window's signed fields: `st`, `se`, `sip` and `spr`, each if present.
struct SignedWindow {
    st: Option<String>,
    se: Option<String>,
    sip: Option<String>,
    spr: Option<&'static str>,
}

impl SasWindow {
    /// The signed fields; the expiry may be left to a stored access policy
    /// when `policy_expiry` says the SAS names one that may set it.
    fn check(&self, policy_expiry: bool) -> Result<SignedWindow> {
        if self.expiry.is_none() && !policy_expiry {
            return Err(Error::config(
                "a SAS needs an expiry time, or a stored access policy that sets one",
            ));
        }
        if let (Some(start), Some(expiry)) = (self.start, self.expiry) {
            if start.timestamp() >= expiry.timestamp() {
                return Err(Error::config("the SAS start time is not before its expiry"));
            }
        }
        let sip = self.ip.map(|ip| ip.check()).transpose()?;
        Ok(SignedWindow {
            st: self.start.map(sas_time),
            se: self.expiry.map(sas_time),
            sip,
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
    #[cfg(feature = "admin")]
    use crate::acl::StoredAccessPolicy;

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

    // Service SAS tied to a stored access policy (`si`), with the address range
    // (`sip`): the strings to sign are in each comment, the signatures python3
    // hmac over them with the emulator key, as above.

    #[test]
    fn a_table_sas_may_leave_permissions_and_expiry_to_its_policy() {
        // "\n\n\n/table/myaccount/orders\nread-only\n\n\n2019-02-02\n\n\n\n"
        let sas = TableSas::new("orders")
            .policy_id("read-only")
            .sign(&account())
            .unwrap();
        assert_eq!(
            sas.as_query(),
            "sv=2019-02-02&tn=orders&si=read-only\
             &sig=nb54lw%2BNE4zLirkotjlLzbKRsVwq8%2B9l417ECGpdn50%3D"
        );
    }

    #[cfg(feature = "admin")]
    #[test]
    fn a_queue_sas_signs_its_policy_and_address() {
        // "\n\n2030-01-01T00:00:00Z\n/queue/myaccount/jobs\nworkers\n127.0.0.1\n\n2019-02-02"
        // The policy grants the permissions, the SAS sets the expiry.
        let policy = StoredAccessPolicy::new("workers").permissions(QueueSasPermissions::ALL);
        let sas = QueueSas::new("jobs")
            .policy(&policy)
            .expiry(utc(2030, 1, 1, 0, 0, 0))
            .ip_range(SasIpRange::single(std::net::Ipv4Addr::LOCALHOST))
            .sign(&account())
            .unwrap();
        assert_eq!(
            sas.as_query(),
            "sv=2019-02-02&se=2030-01-01T00%3A00%3A00Z&sip=127.0.0.1&si=workers\
             &sig=nEkB1WmIVk0G1lu046JgjL03kPm%2BZpq3OU2%2FMsvS%2B00%3D"
        );
    }

    #[cfg(feature = "admin")]
    #[test]
    fn a_container_sas_signs_its_policy() {
        // "r\n\n\n/blob/myaccount/photos\nreaders\n\n\n2019-02-02\nc\n\n\n\n\n\n"
        // The policy sets the expiry, the SAS the permissions.
        let policy = StoredAccessPolicy::new("readers").expiry(utc(2030, 1, 1, 0, 0, 0));
        let sas = BlobSas::container("photos")
            .permissions(BlobSasPermissions::READ_ONLY)
            .policy(&policy)
            .sign(&account())
            .unwrap();
        assert_eq!(
            sas.as_query(),
            "sv=2019-02-02&sr=c&sp=r&si=readers\
             &sig=LbsY7ot1jGQ88jWPMmaUjiteklyCv03WgpNd6uMsvuM%3D"
        );
    }

    #[test]
    fn a_policy_id_has_one_to_sixty_four_characters() {
        let sas = |id: &str| TableSas::new("orders").policy_id(id).sign(&account());
        assert!(sas(&"p".repeat(64)).is_ok());
        for bad in [String::new(), "p".repeat(65)] {
            let message = sas(&bad).unwrap_err().to_string();
            assert!(message.contains("1 to 64 characters"), "{message}");
        }
        // Without a policy the SAS itself needs permissions and an expiry.
        let bare = TableSas::new("orders").sign(&account()).unwrap_err();
        assert!(bare.to_string().contains("stored access policy"), "{bare}");
    }

    #[cfg(feature = "admin")]
    #[test]
    fn a_sas_named_by_policy_id_that_sets_its_own_fields_is_refused_before_signing() {
        let expiry = utc(2030, 1, 1, 0, 0, 0);
        let start = utc(2029, 12, 31, 0, 0, 0);
        let refused = |r: Result<SasToken>| {
            let e = r.unwrap_err();
            assert!(matches!(e.kind(), crate::ErrorKind::Config(_)), "{e}");
            e.to_string()
        };
        let text = refused(
            TableSas::new("orders")
                .policy_id("read-only")
                .permissions(TableSasPermissions::READ_ONLY)
                .sign(&account()),
        );
        assert!(text.contains("\"read-only\" by id"), "{text}");
        assert!(text.contains("its own permissions"), "{text}");
        assert!(text.contains(".policy(&policy)"), "{text}");
        let text = refused(
            QueueSas::new("jobs")
                .policy_id("workers")
                .expiry(expiry)
                .sign(&account()),
        );
        assert!(text.contains("its own expiry"), "{text}");
        let text = refused(
            BlobSas::container("photos")
                .policy_id("readers")
                .permissions(BlobSasPermissions::READ_ONLY)
                .start(start)
                .expiry(expiry)
                .sign(&account()),
        );
        assert!(text.contains("permissions, start, expiry"), "{text}");
        // Whichever order the setters come in.
        let text = refused(
            TableSas::new("orders")
                .start(start)
                .policy_id("read-only")
                .sign(&account()),
        );
        assert!(text.contains("its own start"), "{text}");
        // The address range and protocol are never the policy's.
        assert!(TableSas::new("orders")
            .policy_id("read-only")
            .protocol(SasProtocol::Https)
            .ip_range(SasIpRange::single(std::net::Ipv4Addr::LOCALHOST))
            .sign(&account())
            .is_ok());
    }

    #[cfg(feature = "admin")]
    #[test]
    fn a_sas_given_its_policy_sets_what_the_policy_leaves_out_and_nothing_else() {
        let expiry = utc(2030, 1, 1, 0, 0, 0);
        let only_expiry =
            StoredAccessPolicy::<TableSasPermissions>::new("until-2030").expiry(expiry);
        // Permissions per SAS, the expiry from the policy.
        let sas = TableSas::new("orders")
            .policy(&only_expiry)
            .permissions(TableSasPermissions::READ_ONLY)
            .sign(&account())
            .unwrap();
        assert!(
            sas.as_query().contains("&sp=r&si=until-2030&"),
            "{}",
            sas.as_query()
        );
        assert!(!sas.as_query().contains("se="), "{}", sas.as_query());
        // Both set the expiry: refused, naming the field.
        let e = TableSas::new("orders")
            .policy(&only_expiry)
            .permissions(TableSasPermissions::READ_ONLY)
            .expiry(expiry)
            .sign(&account())
            .unwrap_err();
        assert!(e.to_string().contains("both set the expiry"), "{e}");
        // Neither sets the permissions: refused as a SAS without any is.
        let e = TableSas::new("orders")
            .policy(&only_expiry)
            .sign(&account())
            .unwrap_err();
        assert!(e.to_string().contains("at least one permission"), "{e}");
        // Neither sets the expiry.
        let only_permissions =
            StoredAccessPolicy::new("readers").permissions(TableSasPermissions::READ_ONLY);
        let e = TableSas::new("orders")
            .policy(&only_permissions)
            .sign(&account())
            .unwrap_err();
        assert!(e.to_string().contains("needs an expiry"), "{e}");
        // A policy that sets everything signs as one named by id.
        let full = only_permissions.clone().expiry(expiry);
        assert_eq!(
            TableSas::new("orders")
                .policy(&full)
                .sign(&account())
                .unwrap()
                .as_query(),
            TableSas::new("orders")
                .policy_id("readers")
                .sign(&account())
                .unwrap()
                .as_query()
        );
        // The last call wins: policy_id after policy forgets what it set.
        let e = TableSas::new("orders")
            .policy(&only_expiry)
            .policy_id("until-2030")
            .permissions(TableSasPermissions::READ_ONLY)
            .sign(&account())
            .unwrap_err();
        assert!(e.to_string().contains("by id"), "{e}");
    }
}
