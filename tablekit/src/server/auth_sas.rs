//! Shared access signatures: service SAS (tables, queues, containers and
//! blobs) and account SAS, with stored access policies, verified with the
//! string to sign of the client's own SAS builders.

use std::net::{IpAddr, Ipv4Addr};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use chrono::{DateTime, NaiveDate, Utc};
use http::request::Parts;

use super::super::reply::http_date;
use super::super::{AccountState, Failure, Service};
use super::{Access, Need, Perm};
use crate::account::sas::{
    account_sas_string_to_sign, blob_sas_tail, service_sas_string_to_sign, AccountSasFields,
    ServiceSasFields,
};
use crate::backend::admin::AdminOp;

/// What a valid SAS grants: its permissions on its resource.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    service: Service,
    /// The `sp` letters in force (the SAS's or its policy's).
    perms: String,
    scope: Scope,
    /// A blob SAS's answer header overrides, by header name.
    overrides: Vec<(&'static str, String)>,
}

/// The resource a SAS is for.
#[derive(Debug, Clone)]
enum Scope {
    /// An account SAS: the levels of resource (`srt`) of the service.
    Account { srt: String },
    /// A table SAS (`tn`), with its key range.
    Table { table: String, range: KeyRange },
    /// A queue SAS.
    Queue { queue: String },
    /// A container SAS (`sr=c`) or blob SAS (`sr=b`: the blob of the
    /// request's path, which the signature covers).
    Blob { container: String, whole: bool },
}

/// The entities a table SAS reaches: from (`spk`, `srk`) to (`epk`, `erk`),
/// both included, each side open when absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyRange {
    pub(crate) start_partition_key: Option<String>,
    pub(crate) start_row_key: Option<String>,
    pub(crate) end_partition_key: Option<String>,
    pub(crate) end_row_key: Option<String>,
}

impl KeyRange {
    /// Whether the range sets any bound.
    pub(crate) fn is_bounded(&self) -> bool {
        self.start_partition_key.is_some() || self.end_partition_key.is_some()
    }

    /// Whether the entity `(pk, rk)` is in the range (keys compare as the
    /// service compares them: ordinal).
    pub(crate) fn contains(&self, pk: &str, rk: &str) -> bool {
        let after_start = match (&self.start_partition_key, &self.start_row_key) {
            (None, _) => true,
            (Some(spk), None) => pk >= spk.as_str(),
            (Some(spk), Some(srk)) => (pk, rk) >= (spk.as_str(), srk.as_str()),
        };
        let before_end = match (&self.end_partition_key, &self.end_row_key) {
            (None, _) => true,
            (Some(epk), None) => pk <= epk.as_str(),
            (Some(epk), Some(erk)) => (pk, rk) <= (epk.as_str(), erk.as_str()),
        };
        after_start && before_end
    }
}

impl Grant {
    /// Whether the SAS allows `need`.
    pub(super) fn check(&self, need: Need<'_>) -> Result<(), Failure> {
        let perm = match need {
            Need::Service(p) | Need::Container { perm: p, .. } | Need::Object { perm: p, .. } => p,
        };
        if perm == Perm::Acl {
            return Err(Failure::permission());
        }
        match &self.scope {
            Scope::Account { srt } => {
                let level = match need {
                    // Listing, creating and deleting tables are container
                    // operations of an account SAS.
                    Need::Service(Perm::List | Perm::Create | Perm::Delete)
                        if self.service == Service::Table =>
                    {
                        'c'
                    }
                    Need::Service(_) => 's',
                    Need::Container { .. } => 'c',
                    Need::Object { .. } => 'o',
                };
                if !srt.contains(level) {
                    return Err(resource_type_mismatch());
                }
            }
            Scope::Table { table, range } => match need {
                Need::Object { container, key, .. } if container.eq_ignore_ascii_case(table) => {
                    if let Some((pk, rk)) = key {
                        if !range.contains(pk, rk) {
                            return Err(Failure::permission());
                        }
                    }
                }
                _ => return Err(Failure::permission()),
            },
            Scope::Queue { queue } => match need {
                Need::Object { container, .. } if container == queue => {}
                Need::Container {
                    name,
                    perm: Perm::Read,
                } if name == queue => {}
                _ => return Err(Failure::permission()),
            },
            Scope::Blob { container, whole } => match need {
                Need::Object { container: c, .. } if c == container => {}
                // A container SAS lists blobs; it reads nothing else of the
                // container (its properties, metadata, ACL).
                Need::Container {
                    name,
                    perm: Perm::List,
                } if *whole && name == container => {}
                _ => return Err(Failure::permission()),
            },
        }
        if self.allows(perm) {
            Ok(())
        } else {
            Err(Failure::permission())
        }
    }

    /// Whether the letters in force grant `perm`.
    fn allows(&self, perm: Perm) -> bool {
        let has = |c: char| self.perms.contains(c);
        let account = matches!(self.scope, Scope::Account { .. });
        match perm {
            Perm::Read => has('r'),
            Perm::Add => has('a') || (self.service == Service::Blob && has('w')),
            // A new table (account SAS only), queue, container or blob:
            // `c` or `w`.
            Perm::Create => (account || self.service != Service::Table) && (has('c') || has('w')),
            Perm::Update => has('u'),
            Perm::Write => has('w'),
            Perm::Delete => has('d'),
            Perm::List => has('l'),
            Perm::Process => has('p'),
            Perm::Acl => false,
        }
    }

    /// A blob SAS's answer header overrides.
    pub(super) fn answer_overrides(&self) -> &[(&'static str, String)] {
        &self.overrides
    }

    /// The key range of a table SAS for `table`.
    pub(super) fn key_range(&self, table: &str) -> Option<&KeyRange> {
        match &self.scope {
            Scope::Table { table: t, range }
                if t.eq_ignore_ascii_case(table) && range.is_bounded() =>
            {
                Some(range)
            }
            _ => None,
        }
    }
}

fn resource_type_mismatch() -> Failure {
    Failure::new(
        403,
        "AuthorizationResourceTypeMismatch",
        "This request is not authorized to perform this operation using this resource type.",
    )
}

fn service_mismatch() -> Failure {
    Failure::new(
        403,
        "AuthorizationServiceMismatch",
        "This request is not authorized to perform this operation using this service.",
    )
}

fn protocol_mismatch() -> Failure {
    Failure::new(
        403,
        "AuthorizationProtocolMismatch",
        "This request is not authorized to perform this operation using this protocol.",
    )
}

fn source_ip_mismatch(peer: Option<IpAddr>) -> Failure {
    Failure::new(
        403,
        "AuthorizationSourceIPMismatch",
        format!(
            "This request is not authorized to perform this operation using this source IP {}.",
            peer.map_or_else(|| "(unknown)".to_owned(), |p| p.to_string())
        ),
    )
}

fn not_well_formed() -> Failure {
    Failure::auth("Signature fields not well formed.")
}

/// Checks the SAS in `query` of a request to `account`'s `service` for
/// `path`, sent from `peer` at `now`.
pub(super) async fn verify(
    account: &AccountState,
    service: Service,
    parts: &Parts,
    query: &[(String, String)],
    path: &str,
    peer: Option<IpAddr>,
    now: DateTime<Utc>,
) -> Result<Access, Failure> {
    let _ = parts;
    let q = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let o = |name: &str| q(name).unwrap_or("");
    let signature = BASE64.decode(o("sig")).map_err(|_| not_well_formed())?;
    let sv = o("sv");
    if sv.is_empty() {
        return Err(Failure::auth("sv is mandatory. Cannot be empty"));
    }
    if q("skoid").is_some() {
        return Err(Failure::auth(
            "A user delegation SAS needs Microsoft Entra ID, which this server does not model.",
        ));
    }
    let verify = |string_to_sign: String| -> Result<(), Failure> {
        if account.key.verify_hmac_sha256(&string_to_sign, &signature) {
            Ok(())
        } else {
            Err(Failure::auth(format!(
                "Signature did not match. String to sign used was {string_to_sign}"
            )))
        }
    };

    if q("ss").is_some() {
        // An account SAS.
        verify(account_sas_string_to_sign(&AccountSasFields {
            account: &account.name,
            sp: o("sp"),
            ss: o("ss"),
            srt: o("srt"),
            st: o("st"),
            se: o("se"),
            sip: o("sip"),
            spr: o("spr"),
            sv,
            ses: o("ses"),
        }))?;
        let letter = match service {
            Service::Blob => 'b',
            Service::Queue => 'q',
            Service::Table => 't',
        };
        if !o("ss").contains(letter) {
            return Err(service_mismatch());
        }
        for (name, value) in [("sp", o("sp")), ("srt", o("srt")), ("se", o("se"))] {
            if value.is_empty() {
                return Err(Failure::auth(format!(
                    "{name} is mandatory. Cannot be empty"
                )));
            }
        }
        check_window(parse_time(q("st"))?, parse_time(q("se"))?, now)?;
        check_ip(q("sip"), peer)?;
        check_protocol(q("spr"))?;
        return Ok(Access::Sas(Box::new(Grant {
            service,
            perms: o("sp").to_owned(),
            scope: Scope::Account {
                srt: o("srt").to_owned(),
            },
            overrides: Vec::new(),
        })));
    }

    // A service SAS: its resource, from the request (`tn` for a table).
    let first = path.split('/').next().unwrap_or("");
    let (resource, scope, acl_resource, tail): (String, Scope, String, Vec<&str>) = match service {
        Service::Table => {
            let tn = o("tn");
            if tn.is_empty() {
                return Err(Failure::auth("tn is mandatory. Cannot be empty"));
            }
            let range = KeyRange {
                start_partition_key: q("spk").map(str::to_owned),
                start_row_key: q("srk").map(str::to_owned),
                end_partition_key: q("epk").map(str::to_owned),
                end_row_key: q("erk").map(str::to_owned),
            };
            (
                format!("/table/{}/{}", account.name, tn.to_ascii_lowercase()),
                Scope::Table {
                    table: tn.to_owned(),
                    range,
                },
                tn.to_owned(),
                vec![o("spk"), o("srk"), o("epk"), o("erk")],
            )
        }
        Service::Queue => (
            format!("/queue/{}/{first}", account.name),
            Scope::Queue {
                queue: first.to_owned(),
            },
            first.to_owned(),
            Vec::new(),
        ),
        Service::Blob => {
            let sr = o("sr");
            let whole = match sr {
                "c" => true,
                "b" | "bs" | "bv" => false,
                "" => return Err(Failure::auth("sr is mandatory. Cannot be empty")),
                _ => return Err(not_well_formed()),
            };
            let resource = if whole {
                format!("/blob/{}/{first}", account.name)
            } else {
                format!("/blob/{}/{path}", account.name)
            };
            let snapshot = if sr == "bs" { o("snapshot") } else { "" };
            let tail = blob_sas_tail(
                sv,
                sr,
                snapshot,
                o("ses"),
                [o("rscc"), o("rscd"), o("rsce"), o("rscl"), o("rsct")],
            );
            (
                resource,
                Scope::Blob {
                    container: first.to_owned(),
                    whole,
                },
                first.to_owned(),
                tail,
            )
        }
    };
    verify(service_sas_string_to_sign(&ServiceSasFields {
        sp: o("sp"),
        st: o("st"),
        se: o("se"),
        resource: &resource,
        si: o("si"),
        sip: o("sip"),
        spr: o("spr"),
        sv,
        tail: &tail,
    }))?;

    // What the SAS leaves to its stored access policy.
    let mut sp = q("sp").filter(|s| !s.is_empty()).map(str::to_owned);
    let mut st = parse_time(q("st"))?;
    let mut se = parse_time(q("se"))?;
    if let Some(id) = q("si") {
        let admin = AdminOp::GetAcl {
            resource: &acl_resource,
        };
        let answer = match service {
            Service::Table => account.tables.admin(admin).await,
            Service::Queue => account.queues.admin(admin).await,
            Service::Blob => account.blobs.admin(admin).await,
        };
        let policies = answer.and_then(|a| a.into_acl()).map_err(|_| {
            Failure::auth(format!(
                "The signed identifier {id:?} names no stored access policy of the resource."
            ))
        })?;
        let policy = policies.iter().find(|p| p.id == id).ok_or_else(|| {
            Failure::auth(format!(
                "The signed identifier {id:?} names no stored access policy of the resource."
            ))
        })?;
        let both = || {
            Failure::auth(
                "Access policy fields can be associated with signature or SAS identifier but not both",
            )
        };
        if let Some(p) = policy.permission.as_deref().filter(|p| !p.is_empty()) {
            if sp.is_some() {
                return Err(both());
            }
            sp = Some(p.to_owned());
        }
        if let Some(t) = parse_time(policy.start.as_deref())? {
            if st.is_some() {
                return Err(both());
            }
            st = Some(t);
        }
        if let Some(t) = parse_time(policy.expiry.as_deref())? {
            if se.is_some() {
                return Err(both());
            }
            se = Some(t);
        }
    }
    let Some(sp) = sp else {
        return Err(Failure::auth("sp is mandatory. Cannot be empty"));
    };
    if se.is_none() {
        return Err(Failure::auth("se is mandatory. Cannot be empty"));
    }
    check_window(st, se, now)?;
    check_ip(q("sip"), peer)?;
    check_protocol(q("spr"))?;
    let overrides = match service {
        Service::Blob => [
            ("rscc", "cache-control"),
            ("rscd", "content-disposition"),
            ("rsce", "content-encoding"),
            ("rscl", "content-language"),
            ("rsct", "content-type"),
        ]
        .into_iter()
        .filter_map(|(param, header)| Some((header, q(param)?.to_owned())))
        .collect(),
        Service::Table | Service::Queue => Vec::new(),
    };
    Ok(Access::Sas(Box::new(Grant {
        service,
        perms: sp,
        scope,
        overrides,
    })))
}

/// A SAS or policy time: ISO 8601 in UTC, to the second or finer
/// (`2030-01-01T00:00:00Z`, `…00.0000000Z`), to the minute, or a date.
fn parse_time(value: Option<&str>) -> Result<Option<DateTime<Utc>>, Failure> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if let Ok(t) = DateTime::parse_from_rfc3339(value) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    if let Ok(t) = chrono::NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%MZ") {
        return Ok(Some(t.and_utc()));
    }
    if let Ok(d) = NaiveDate::parse_from_str(value, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).map(|t| t.and_utc()));
    }
    Err(not_well_formed())
}

/// The window: a start before the expiry, now inside it.
fn check_window(
    st: Option<DateTime<Utc>>,
    se: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<(), Failure> {
    if let (Some(st), Some(se)) = (st, se) {
        if st >= se {
            return Err(Failure::auth(format!(
                "Signed expiry time [{}] must be after signed start time [{}]",
                http_date(se),
                http_date(st)
            )));
        }
    }
    let early = st.is_some_and(|st| now < st);
    let late = se.is_some_and(|se| now >= se);
    if early || late {
        let show = |t: Option<DateTime<Utc>>| t.map(http_date).unwrap_or_default();
        return Err(Failure::auth(format!(
            "Signature not valid in the specified time frame: Start [{}] - Expiry [{}] - Current [{}]",
            show(st),
            show(se),
            http_date(now)
        )));
    }
    Ok(())
}

/// `sip`: one IPv4 address or an inclusive range; the peer must be in it.
fn check_ip(sip: Option<&str>, peer: Option<IpAddr>) -> Result<(), Failure> {
    let Some(sip) = sip.filter(|s| !s.is_empty()) else {
        return Ok(());
    };
    let parse = |s: &str| s.trim().parse::<Ipv4Addr>().map_err(|_| not_well_formed());
    let (start, end) = match sip.split_once('-') {
        Some((a, b)) => (parse(a)?, parse(b)?),
        None => {
            let a = parse(sip)?;
            (a, a)
        }
    };
    let v4 = match peer {
        Some(IpAddr::V4(a)) => Some(a),
        Some(IpAddr::V6(a)) => a.to_ipv4_mapped(),
        None => None,
    };
    match v4 {
        Some(a) if start <= a && a <= end => Ok(()),
        _ => Err(source_ip_mismatch(peer)),
    }
}

/// `spr`: `https` alone is refused (this server speaks http);
/// `https,http` is fine.
fn check_protocol(spr: Option<&str>) -> Result<(), Failure> {
    match spr {
        None | Some("") | Some("https,http") | Some("http,https") | Some("http") => Ok(()),
        Some("https") => Err(protocol_mismatch()),
        Some(_) => Err(not_well_formed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_range_includes_both_bounds_and_refines_by_row_key() {
        let range = KeyRange {
            start_partition_key: Some("b".into()),
            start_row_key: Some("5".into()),
            end_partition_key: Some("d".into()),
            end_row_key: None,
        };
        assert!(range.contains("b", "5"));
        assert!(!range.contains("b", "4"));
        assert!(range.contains("c", ""));
        assert!(range.contains("d", "zzz"));
        assert!(!range.contains("e", ""));
        assert!(!range.contains("a", "9"));
        assert!(KeyRange::default().contains("anything", "at all"));
        assert!(!KeyRange::default().is_bounded());
    }

    fn grant(service: Service, perms: &str, scope: Scope) -> Grant {
        Grant {
            service,
            perms: perms.to_owned(),
            scope,
            overrides: Vec::new(),
        }
    }

    fn code(result: Result<(), Failure>) -> String {
        result.map_or_else(|f| f.code, |()| "ok".to_owned())
    }

    #[test]
    fn an_account_sas_grants_by_level_and_letter() {
        let account = |service, perms: &str, srt: &str| {
            grant(
                service,
                perms,
                Scope::Account {
                    srt: srt.to_owned(),
                },
            )
        };
        // Listing and creating tables are container-level; properties service-level.
        let tables = account(Service::Table, "lc", "c");
        assert_eq!(code(tables.check(Need::Service(Perm::List))), "ok");
        assert_eq!(code(tables.check(Need::Service(Perm::Create))), "ok");
        assert_eq!(
            code(tables.check(Need::Service(Perm::Read))),
            "AuthorizationResourceTypeMismatch"
        );
        assert_eq!(
            code(account(Service::Table, "w", "c").check(Need::Service(Perm::Create))),
            "ok"
        );
        assert_eq!(
            code(account(Service::Table, "a", "c").check(Need::Service(Perm::Create))),
            "AuthorizationPermissionMismatch"
        );
        let objects = account(Service::Queue, "rp", "o");
        let message = |perm| Need::Object {
            container: "jobs",
            key: None,
            perm,
        };
        assert_eq!(code(objects.check(message(Perm::Process))), "ok");
        assert_eq!(
            code(objects.check(message(Perm::Add))),
            "AuthorizationPermissionMismatch"
        );
        assert_eq!(
            code(objects.check(Need::Container {
                name: "jobs",
                perm: Perm::Read
            })),
            "AuthorizationResourceTypeMismatch"
        );
        // A new queue or container: `c` or `w`; the ACL never.
        let writer = account(Service::Blob, "w", "sco");
        let container = |perm| Need::Container {
            name: "photos",
            perm,
        };
        assert_eq!(code(writer.check(container(Perm::Create))), "ok");
        assert_eq!(
            code(writer.check(container(Perm::Acl))),
            "AuthorizationPermissionMismatch"
        );
    }

    #[test]
    fn a_service_sas_grants_its_own_resource_only() {
        let queue = grant(
            Service::Queue,
            "rp",
            Scope::Queue {
                queue: "jobs".into(),
            },
        );
        let on = |container, perm| Need::Object {
            container,
            key: None,
            perm,
        };
        assert_eq!(code(queue.check(on("jobs", Perm::Process))), "ok");
        assert_ne!(code(queue.check(on("other", Perm::Process))), "ok");
        assert_ne!(code(queue.check(on("jobs", Perm::Update))), "ok");
        assert_eq!(
            code(queue.check(Need::Container {
                name: "jobs",
                perm: Perm::Read
            })),
            "ok"
        );
        assert_ne!(
            code(queue.check(Need::Container {
                name: "jobs",
                perm: Perm::Delete
            })),
            "ok"
        );
        let blob = grant(
            Service::Blob,
            "rl",
            Scope::Blob {
                container: "photos".into(),
                whole: false,
            },
        );
        let list = Need::Container {
            name: "photos",
            perm: Perm::List,
        };
        assert_eq!(code(blob.check(on("photos", Perm::Read))), "ok");
        assert_ne!(code(blob.check(list)), "ok", "a blob SAS lists nothing");
        let container = grant(
            Service::Blob,
            "rl",
            Scope::Blob {
                container: "photos".into(),
                whole: true,
            },
        );
        assert_eq!(code(container.check(list)), "ok");
        let properties = Need::Container {
            name: "photos",
            perm: Perm::Read,
        };
        assert_ne!(code(container.check(properties)), "ok");
        assert_ne!(code(container.check(on("photos", Perm::Delete))), "ok");
        assert_ne!(code(container.check(Need::Service(Perm::List))), "ok");
        let table = grant(
            Service::Table,
            "ra",
            Scope::Table {
                table: "Orders".into(),
                range: KeyRange::default(),
            },
        );
        assert_eq!(code(table.check(on("orders", Perm::Add))), "ok");
        assert_ne!(code(table.check(on("orders", Perm::Delete))), "ok");
        assert_ne!(code(table.check(on("other", Perm::Read))), "ok");
        assert_ne!(code(table.check(Need::Service(Perm::Create))), "ok");
        assert!(table.key_range("Orders").is_none(), "no range set");
    }

    #[test]
    fn sas_times_parse_in_the_forms_the_sdks_write() {
        let t = |s: &str| parse_time(Some(s)).unwrap().unwrap().to_rfc3339();
        assert_eq!(t("2030-01-01T00:00:00Z"), "2030-01-01T00:00:00+00:00");
        assert_eq!(
            t("2030-01-01T00:00:00.0000000Z"),
            "2030-01-01T00:00:00+00:00"
        );
        assert_eq!(t("2030-01-01T10:30Z"), "2030-01-01T10:30:00+00:00");
        assert_eq!(t("2030-01-01"), "2030-01-01T00:00:00+00:00");
        assert!(parse_time(Some("tomorrow")).is_err());
        assert!(parse_time(None).unwrap().is_none());
    }

    #[test]
    fn the_source_ip_must_be_in_the_range() {
        let peer = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert!(check_ip(None, peer("10.0.0.1")).is_ok());
        assert!(check_ip(Some("127.0.0.1"), peer("127.0.0.1")).is_ok());
        assert!(check_ip(Some("127.0.0.1"), peer("::ffff:127.0.0.1")).is_ok());
        assert!(check_ip(Some("10.0.0.1-10.0.0.9"), peer("10.0.0.9")).is_ok());
        let refused = check_ip(Some("10.0.0.1-10.0.0.9"), peer("10.0.0.10")).unwrap_err();
        assert_eq!(refused.code, "AuthorizationSourceIPMismatch");
        assert_eq!(refused.status, 403);
        assert_eq!(
            check_ip(Some("not an address"), peer("10.0.0.1"))
                .unwrap_err()
                .code,
            "AuthenticationFailed"
        );
    }

    #[test]
    fn https_only_is_refused_over_http() {
        assert!(check_protocol(Some("https,http")).is_ok());
        assert!(check_protocol(None).is_ok());
        assert_eq!(
            check_protocol(Some("https")).unwrap_err().code,
            "AuthorizationProtocolMismatch"
        );
    }

    #[test]
    fn the_window_needs_a_start_before_its_expiry_and_now_inside() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let now = at("2030-01-01T12:00:00Z");
        assert!(check_window(None, Some(at("2030-01-01T12:00:01Z")), now).is_ok());
        let expired = check_window(None, Some(now), now).unwrap_err();
        assert!(
            expired
                .detail
                .as_deref()
                .unwrap()
                .starts_with("Signature not valid in the specified time frame"),
            "{expired:?}"
        );
        let early = check_window(
            Some(at("2030-01-01T12:00:01Z")),
            Some(at("2030-01-02T00:00:00Z")),
            now,
        );
        assert!(early.is_err());
        let backwards = check_window(
            Some(at("2030-01-03T00:00:00Z")),
            Some(at("2030-01-02T00:00:00Z")),
            now,
        )
        .unwrap_err();
        assert!(
            backwards
                .detail
                .as_deref()
                .unwrap()
                .contains("must be after signed start time"),
            "{backwards:?}"
        );
    }
}
