//! Stored access policies: up to five named policies on a table, queue or blob
//! container, each a start, an expiry and permissions that a service SAS tied
//! to it by id ([`TableSas::policy_id`](crate::account::TableSas::policy_id))
//! takes instead of carrying them. Changing or removing the policy changes or
//! revokes every SAS tied to it at once, without rotating the account key.
//!
//! ```
//! # async fn run() -> tablekit::Result<()> {
//! use chrono::{TimeZone, Utc};
//! use tablekit::account::{TableSas, TableSasPermissions};
//! use tablekit::acl::StoredAccessPolicy;
//! use tablekit::{Account, DynamicEntity, TableServiceClient};
//!
//! let service = TableServiceClient::embedded();
//! let orders = service.table::<DynamicEntity>("Orders")?;
//! orders.create_table().await?;
//! let until = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
//! orders
//!     .set_access_policies(&[StoredAccessPolicy::new("auditors")
//!         .permissions(TableSasPermissions::READ_ONLY)
//!         .expiry(until)])
//!     .await?;
//! let policies = orders.access_policies().await?;
//! assert_eq!(policies[0].id(), "auditors");
//! assert_eq!(policies[0].expiry_time(), Some(until));
//!
//! // A SAS that reads Orders for as long as the policy says.
//! let sas = TableSas::new("Orders").policy_id("auditors").sign(&Account::development())?;
//! assert!(sas.as_query().contains("si=auditors"));
//! # Ok(()) }
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
//! ```
//!
//! The embedded store keeps and returns the policies of its tables, queues and
//! containers (in memory, also for a store kept in a file) but, having no SAS
//! authorization at all, does not enforce them.

use std::fmt;

use chrono::{DateTime, SubsecRound as _, Utc};

use crate::account::{
    BlobSas, BlobSasPermissions, QueueSas, QueueSasPermissions, TableSas, TableSasPermissions,
};
use crate::error::{Error, Result, ValidationError};

/// The most stored access policies one table, queue or container may hold.
pub const MAX_POLICIES: usize = 5;

/// The longest id a stored access policy may have, in characters.
pub const MAX_POLICY_ID_CHARS: usize = crate::account::MAX_POLICY_ID_CHARS;

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::account::TableSasPermissions {}
    impl Sealed for crate::account::QueueSasPermissions {}
    impl Sealed for crate::account::BlobSasPermissions {}
}

/// The permissions of one kind of resource, as a stored access policy holds
/// them: [`TableSasPermissions`], [`QueueSasPermissions`] or
/// [`BlobSasPermissions`]. Sealed: implemented only by those three.
pub trait AccessPermissions:
    sealed::Sealed + Copy + Default + PartialEq + fmt::Debug + Send + Sync + 'static
{
    /// The permission letters, in the order the service requires.
    fn to_letters(&self) -> String;
    /// The permissions of `letters`, or `None` if one letter is not of this kind.
    fn from_letters(letters: &str) -> Option<Self>;
}

impl AccessPermissions for TableSasPermissions {
    fn to_letters(&self) -> String {
        self.to_sp()
    }
    fn from_letters(letters: &str) -> Option<Self> {
        let mut p = TableSasPermissions::default();
        for c in letters.chars() {
            match c {
                'r' => p.read = true,
                'a' => p.add = true,
                'u' => p.update = true,
                'd' => p.delete = true,
                _ => return None,
            }
        }
        Some(p)
    }
}

impl AccessPermissions for QueueSasPermissions {
    fn to_letters(&self) -> String {
        self.to_sp()
    }
    fn from_letters(letters: &str) -> Option<Self> {
        let mut p = QueueSasPermissions::default();
        for c in letters.chars() {
            match c {
                'r' => p.read = true,
                'a' => p.add = true,
                'u' => p.update = true,
                'p' => p.process = true,
                _ => return None,
            }
        }
        Some(p)
    }
}

impl AccessPermissions for BlobSasPermissions {
    fn to_letters(&self) -> String {
        self.to_sp()
    }
    fn from_letters(letters: &str) -> Option<Self> {
        let mut p = BlobSasPermissions::default();
        for c in letters.chars() {
            match c {
                'r' => p.read = true,
                'a' => p.add = true,
                'c' => p.create = true,
                'w' => p.write = true,
                'd' => p.delete = true,
                'l' => p.list = true,
                _ => return None,
            }
        }
        Some(p)
    }
}

/// `policy(&StoredAccessPolicy)` of each service SAS builder: defined here,
/// beside the policy type, so that the SAS builders need not name it.
macro_rules! sas_policy_setter {
    ($builder:ty, $permissions:ty) => {
        impl $builder {
            /// Ties the SAS to `policy` (`si`: its id), as
            /// [`policy_id`](Self::policy_id) does, knowing what the policy sets:
            /// the SAS may set what the policy leaves out (permissions, start,
            /// expiry), and signing refuses a field set in both, as the service
            /// would. Give the policy as it is stored on the resource (what
            /// `access_policies` reads back).
            pub fn policy(self, policy: &StoredAccessPolicy<$permissions>) -> Self {
                self.policy_parts(
                    &policy.id,
                    policy.start.is_some(),
                    policy.expiry.is_some(),
                    policy.permissions.is_some(),
                )
            }
        }
    };
}

sas_policy_setter!(TableSas, TableSasPermissions);
sas_policy_setter!(QueueSas, QueueSasPermissions);
sas_policy_setter!(BlobSas, BlobSasPermissions);

/// One stored access policy (a `SignedIdentifier` of the REST API): an id and
/// the parts of a SAS it supplies. Each part is optional; what the policy
/// leaves out, a SAS tied to it must carry (and what it sets, the SAS must not).
/// Times are kept to whole seconds, as a SAS carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAccessPolicy<P> {
    id: String,
    start: Option<DateTime<Utc>>,
    expiry: Option<DateTime<Utc>>,
    permissions: Option<P>,
}

impl<P: AccessPermissions> StoredAccessPolicy<P> {
    /// A policy named `id` (1 to 64 characters, checked when the policies are
    /// set) that sets nothing yet.
    pub fn new(id: impl Into<String>) -> Self {
        StoredAccessPolicy {
            id: id.into(),
            start: None,
            expiry: None,
            permissions: None,
        }
    }

    /// When SAS tied to the policy become valid; truncated to whole seconds.
    pub fn start(mut self, start: impl Into<Option<DateTime<Utc>>>) -> Self {
        self.start = start.into().map(|t| t.trunc_subsecs(0));
        self
    }

    /// When SAS tied to the policy stop working; truncated to whole seconds.
    pub fn expiry(mut self, expiry: impl Into<Option<DateTime<Utc>>>) -> Self {
        self.expiry = expiry.into().map(|t| t.trunc_subsecs(0));
        self
    }

    /// What SAS tied to the policy may do.
    pub fn permissions(mut self, permissions: impl Into<Option<P>>) -> Self {
        self.permissions = permissions.into();
        self
    }

    /// The policy's id, the `si` of the SAS tied to it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The start it sets, if any.
    pub fn start_time(&self) -> Option<DateTime<Utc>> {
        self.start
    }

    /// The expiry it sets, if any.
    pub fn expiry_time(&self) -> Option<DateTime<Utc>> {
        self.expiry
    }

    /// The permissions it sets, if any.
    pub fn granted(&self) -> Option<P> {
        self.permissions
    }

    fn to_raw(&self) -> RawPolicy {
        RawPolicy {
            id: self.id.clone(),
            start: self.start.map(acl_time),
            expiry: self.expiry.map(acl_time),
            permission: self.permissions.map(|p| p.to_letters()),
        }
    }

    fn from_raw(raw: RawPolicy) -> Result<Self> {
        let time = |what: &str, t: Option<String>| {
            t.filter(|t| !t.is_empty())
                .map(|t| {
                    DateTime::parse_from_rfc3339(&t)
                        .map(|t| t.with_timezone(&Utc).trunc_subsecs(0))
                        .map_err(|_| {
                            Error::decode(format!(
                                "the policy's {what} {t:?} is not an ISO 8601 time"
                            ))
                        })
                })
                .transpose()
        };
        let permissions = match raw.permission.filter(|p| !p.is_empty()) {
            None => None,
            Some(letters) => Some(P::from_letters(&letters).ok_or_else(|| {
                Error::decode(format!(
                    "the policy's permissions {letters:?} are not of this kind of resource"
                ))
            })?),
        };
        Ok(StoredAccessPolicy {
            start: time("start", raw.start)?,
            expiry: time("expiry", raw.expiry)?,
            permissions,
            id: raw.id,
        })
    }
}

/// The stored access policy as it travels: the letters and times as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawPolicy {
    pub(crate) id: String,
    pub(crate) start: Option<String>,
    pub(crate) expiry: Option<String>,
    pub(crate) permission: Option<String>,
}

/// An ACL time (whole seconds): ISO 8601 UTC with the seven fractional digits the
/// service writes.
fn acl_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S.0000000Z").to_string()
}

/// Checks a set of policies before any I/O (at most five, ids of 1 to 64
/// characters, no id twice) and turns them into their wire form.
pub(crate) fn to_raw<P: AccessPermissions>(
    policies: &[StoredAccessPolicy<P>],
) -> Result<Vec<RawPolicy>> {
    let refuse = |reason: String| {
        Error::invalid(ValidationError::Settings {
            what: "stored access policies",
            reason,
        })
    };
    if policies.len() > MAX_POLICIES {
        return Err(refuse(format!(
            "a resource holds at most {MAX_POLICIES}, not {}",
            policies.len()
        )));
    }
    for (i, p) in policies.iter().enumerate() {
        crate::account::check_policy_id(&p.id).map_err(refuse)?;
        if policies[..i].iter().any(|q| q.id == p.id) {
            return Err(refuse(format!("the id {:?} is given twice", p.id)));
        }
    }
    Ok(policies.iter().map(StoredAccessPolicy::to_raw).collect())
}

/// The typed policies of an answer.
pub(crate) fn from_raw<P: AccessPermissions>(
    raw: Vec<RawPolicy>,
) -> Result<Vec<StoredAccessPolicy<P>>> {
    raw.into_iter().map(StoredAccessPolicy::from_raw).collect()
}

/// The `SignedIdentifiers` XML body of a set-ACL request.
pub(crate) fn encode(policies: &[RawPolicy]) -> String {
    use quick_xml::escape::escape;
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><SignedIdentifiers>");
    for p in policies {
        xml.push_str("<SignedIdentifier><Id>");
        xml.push_str(&escape(p.id.as_str()));
        xml.push_str("</Id><AccessPolicy>");
        for (tag, value) in [
            ("Start", &p.start),
            ("Expiry", &p.expiry),
            ("Permission", &p.permission),
        ] {
            if let Some(v) = value {
                xml.push_str(&format!("<{tag}>{}</{tag}>", escape(v.as_str())));
            }
        }
        xml.push_str("</AccessPolicy></SignedIdentifier>");
    }
    xml.push_str("</SignedIdentifiers>");
    xml
}

/// Reads a `SignedIdentifiers` answer (an empty body is no policy).
pub(crate) fn decode(body: &[u8]) -> Result<Vec<RawPolicy>> {
    #[derive(serde::Deserialize)]
    struct List {
        #[serde(rename = "SignedIdentifier", default)]
        items: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        #[serde(rename = "Id")]
        id: String,
        #[serde(rename = "AccessPolicy", default)]
        policy: Option<Policy>,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(rename_all = "PascalCase")]
    struct Policy {
        start: Option<String>,
        expiry: Option<String>,
        permission: Option<String>,
    }
    let text = std::str::from_utf8(body)
        .map_err(|e| Error::decode_caused_by("an access policy answer is not UTF-8", e))?;
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let list: List = quick_xml::de::from_str(text).map_err(|e| {
        Error::decode_caused_by("an access policy answer is not the expected XML", e)
    })?;
    Ok(list
        .items
        .into_iter()
        .map(|i| {
            let p = i.policy.unwrap_or_default();
            RawPolicy {
                id: i.id,
                start: p.start,
                expiry: p.expiry,
                permission: p.permission,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;

    use super::*;

    fn utc(y: i32, mo: u32, d: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, 0, 0, 0).unwrap()
    }

    #[test]
    fn policies_travel_as_the_documented_signed_identifiers() {
        let policies = [
            StoredAccessPolicy::new("a<&>")
                .start(utc(2029, 12, 31))
                .expiry(utc(2030, 1, 1))
                .permissions(TableSasPermissions::ALL),
            StoredAccessPolicy::new("bare"),
        ];
        let xml = encode(&to_raw(&policies).unwrap());
        assert_eq!(
            xml,
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><SignedIdentifiers>\
             <SignedIdentifier><Id>a&lt;&amp;&gt;</Id><AccessPolicy>\
             <Start>2029-12-31T00:00:00.0000000Z</Start><Expiry>2030-01-01T00:00:00.0000000Z</Expiry>\
             <Permission>raud</Permission></AccessPolicy></SignedIdentifier>\
             <SignedIdentifier><Id>bare</Id><AccessPolicy></AccessPolicy></SignedIdentifier>\
             </SignedIdentifiers>"
        );
        let back: Vec<StoredAccessPolicy<TableSasPermissions>> =
            from_raw(decode(xml.as_bytes()).unwrap()).unwrap();
        assert_eq!(back, policies);
    }

    #[test]
    fn answers_with_other_time_forms_and_no_policy_are_read() {
        // Azurite writes milliseconds; an empty list may come as an empty body.
        let xml = b"<?xml version=\"1.0\" encoding=\"utf-8\"?><SignedIdentifiers><SignedIdentifier>\
            <Id>p</Id><AccessPolicy><Expiry>2030-01-01T00:00:00.000Z</Expiry><Permission>rp</Permission>\
            </AccessPolicy></SignedIdentifier></SignedIdentifiers>";
        let p: Vec<StoredAccessPolicy<QueueSasPermissions>> =
            from_raw(decode(xml).unwrap()).unwrap();
        assert_eq!(p[0].expiry_time(), Some(utc(2030, 1, 1)));
        assert_eq!(p[0].start_time(), None);
        let rp = QueueSasPermissions {
            read: true,
            process: true,
            ..Default::default()
        };
        assert_eq!(p[0].granted(), Some(rp));
        assert!(decode(b"").unwrap().is_empty());
        assert!(decode(b"<SignedIdentifiers />").unwrap().is_empty());
        let wrong_kind = from_raw::<TableSasPermissions>(decode(xml).unwrap()).unwrap_err();
        assert!(
            wrong_kind.to_string().contains("not of this kind"),
            "{wrong_kind}"
        );
    }

    #[test]
    fn more_than_five_policies_or_a_bad_id_are_refused_before_io() {
        let p = |id: &str| StoredAccessPolicy::<BlobSasPermissions>::new(id);
        let five: Vec<_> = (0..5).map(|i| p(&i.to_string())).collect();
        assert!(to_raw(&five).is_ok());
        let six: Vec<_> = (0..6).map(|i| p(&i.to_string())).collect();
        let err = to_raw(&six).unwrap_err();
        assert!(err.is_invalid_input(), "{err:?}");
        assert!(err.to_string().contains("at most 5"), "{err}");
        assert!(to_raw(&[p(&"x".repeat(65))])
            .unwrap_err()
            .to_string()
            .contains("1 to 64"));
        assert!(to_raw(&[p("")]).is_err());
        assert!(to_raw(&[p("same"), p("same")])
            .unwrap_err()
            .to_string()
            .contains("twice"));
        assert!(
            to_raw(&[p(&"é".repeat(64))]).is_ok(),
            "characters, not bytes"
        );
    }

    #[test]
    fn permission_letters_round_trip_for_each_kind() {
        let blob = BlobSasPermissions {
            read: true,
            create: true,
            list: true,
            ..Default::default()
        };
        assert_eq!(blob.to_letters(), "rcl");
        assert_eq!(BlobSasPermissions::from_letters("rcl"), Some(blob));
        assert_eq!(QueueSasPermissions::ALL.to_letters(), "raup");
        assert_eq!(TableSasPermissions::from_letters("rw"), None);
    }
}
