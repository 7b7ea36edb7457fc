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
/// permissions by operation" and the service SAS pages say (and Azurite's
/// maps of operations to permissions agree):
///
/// | Operation | Need |
/// |---|---|
/// | list tables / queues / containers | `Service(List)` |
/// | service properties, stats | `Service(Read)`, `Service(Write)` |
/// | create table | `Service(Create)` (an account SAS asks `srt=c` and `c` or `w`) |
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

    /// The answer headers a blob or container SAS overrides (`rscc`,
    /// `rscd`, `rsce`, `rscl`, `rsct`: `Cache-Control`,
    /// `Content-Disposition`, `Content-Encoding`, `Content-Language`,
    /// `Content-Type`), which a blob read answers with instead of the
    /// blob's own.
    pub(crate) fn answer_overrides(&self) -> &[(&'static str, String)] {
        match self {
            Access::Sas(grant) => grant.answer_overrides(),
            _ => &[],
        }
    }

    /// Whether the request carries no credential (a public container may
    /// still be read; a CORS preflight is answered).
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
        // A browser's CORS preflight carries no credential: its answer is
        // the service's CORS rules', not a refusal.
        if parts.method == http::Method::OPTIONS {
            return Ok(Access::Anonymous(service));
        }
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

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::net::Ipv4Addr;

    use base64::Engine as _;
    use bytes::Bytes;
    use chrono::{Duration, Utc};
    use http::{HeaderMap, HeaderValue, Method};

    use super::super::{parse_query, split_path, AccountState, State, DEV_ACCOUNT, DEV_KEY};
    use super::*;
    use crate::account::{
        AccountKey, BlobSas, BlobSasPermissions, Credential, SasIpRange, SasProtocol, TableSas,
        TableSasPermissions,
    };
    use crate::acl::{RawPolicy, StoredAccessPolicy};
    use crate::backend::admin::AdminOp;
    use crate::backend::http::signer::{
        authorization, for_account, x_ms_date, Attempt, Service as ClientService, StorageRequest,
    };
    use crate::backend::Operation;
    use crate::Account;

    fn state() -> State {
        let key = AccountKey::from_base64(DEV_KEY).unwrap();
        State {
            accounts: vec![
                AccountState::open(DEV_ACCOUNT, key, None, crate::clock::Clock::System).unwrap(),
            ],
            bearer: None,
        }
    }

    fn request(method: Method, path_and_query: &str, headers: HeaderMap) -> Parts {
        let mut builder = http::Request::builder()
            .method(method)
            .uri(format!("http://127.0.0.1:10002{path_and_query}"));
        for (name, value) in &headers {
            builder = builder.header(name, value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    async fn auth(state: &State, service: Service, parts: &Parts) -> Result<Access, Failure> {
        let (name, path) = split_path(parts.uri.path()).unwrap();
        let account = state.account(&name).unwrap();
        let query = parse_query(parts.uri.query().unwrap_or(""));
        let peer = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
        authenticate(state, account, service, parts, &query, &path, peer).await
    }

    /// A request signed by the client's own signer for `credential`.
    fn signed_by_client(
        service: ClientService,
        credential: Credential,
        method: Method,
        path: &str,
        query: &[(&'static str, String)],
        body: &str,
    ) -> Parts {
        let account = Account::development().with_credential(credential);
        let signer = for_account(service, &account).unwrap();
        let body = Bytes::from(body.to_owned());
        let mut headers = HeaderMap::new();
        headers.insert("x-ms-date", x_ms_date());
        headers.insert("x-ms-version", HeaderValue::from_static("2019-02-02"));
        headers.insert("x-ms-client-request-id", HeaderValue::from_static("c  1"));
        if !body.is_empty() {
            headers.insert("content-type", HeaderValue::from_static("application/json"));
            headers.insert("content-length", HeaderValue::from(body.len()));
        }
        let encoded: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut attempt = Attempt {
            method: &method,
            path,
            query,
            encoded_query: Cow::Owned(encoded.join("&")),
            headers,
            body: &body,
        };
        signer.sign_now(&mut attempt).unwrap().unwrap();
        let uri = if attempt.encoded_query.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{}", attempt.encoded_query)
        };
        request(method.clone(), &uri, attempt.headers)
    }

    /// `parts` with the header `name` set to `value`.
    fn with_header(parts: &Parts, name: &'static str, value: &str) -> Parts {
        let mut headers = parts.headers.clone();
        headers.insert(name, HeaderValue::from_str(value).unwrap());
        let path = parts.uri.path_and_query().unwrap().as_str().to_owned();
        request(parts.method.clone(), &path, headers)
    }

    /// The `Authorization` value with one character of its signature changed.
    fn tampered_authorization(parts: &Parts) -> String {
        let value = parts.headers["authorization"].to_str().unwrap().to_owned();
        let at = value.rfind(':').unwrap() + 1;
        let mut changed = value.clone();
        let first = if &value[at..=at] == "A" { "B" } else { "A" };
        changed.replace_range(at..=at, first);
        changed
    }

    fn refusal(result: Result<Access, Failure>) -> Failure {
        result.expect_err("the request should be refused")
    }

    #[tokio::test]
    async fn what_the_clients_signers_sign_the_server_verifies_and_one_byte_changed_fails() {
        let state = state();
        let key = || AccountKey::from_base64(DEV_KEY).unwrap();
        let cases = [
            (
                ClientService::Table,
                Service::Table,
                Credential::SharedKey(key()),
                "/devstoreaccount1/Tables",
                vec![],
            ),
            (
                ClientService::Table,
                Service::Table,
                Credential::SharedKeyLite(key()),
                "/devstoreaccount1/mytable",
                vec![("comp", "acl".to_owned())],
            ),
            (
                ClientService::Queue,
                Service::Queue,
                Credential::SharedKey(key()),
                "/devstoreaccount1/jobs/messages",
                vec![
                    ("visibilitytimeout", "30".to_owned()),
                    ("messagettl", "60".to_owned()),
                ],
            ),
            (
                ClientService::Blob,
                Service::Blob,
                Credential::SharedKey(key()),
                "/devstoreaccount1/photos/a%20b.txt",
                vec![("comp", "metadata".to_owned())],
            ),
        ];
        for (client, service, credential, path, query) in cases {
            let parts =
                signed_by_client(client, credential, Method::PUT, path, &query, "{\"a\":1}");
            assert!(
                matches!(auth(&state, service, &parts).await, Ok(Access::Full)),
                "{path}"
            );
            // The signature, then a signed header, changed by one byte.
            let forged = with_header(&parts, "authorization", &tampered_authorization(&parts));
            let failure = refusal(auth(&state, service, &forged).await);
            assert_eq!(
                (failure.status, failure.code.as_str()),
                (403, "AuthenticationFailed")
            );
            let detail = failure.detail.unwrap();
            assert!(
                detail.contains("is not the same as any computed signature. Server used following string to sign: '"),
                "{detail}"
            );
            assert!(!detail.contains(DEV_KEY), "{detail}");
            let earlier = crate::backend::http::signer::rfc1123(Utc::now() - Duration::seconds(2));
            let retyped = with_header(&parts, "x-ms-date", &earlier);
            assert!(auth(&state, service, &retyped).await.is_err(), "{path}");
        }
    }

    #[tokio::test]
    async fn shared_key_lite_of_blobs_and_queues_and_the_date_header_are_verified() {
        let state = state();
        let key = AccountKey::from_base64(DEV_KEY).unwrap();
        let date = crate::backend::http::signer::rfc1123(Utc::now());
        for (service, path) in [
            (Service::Queue, "/devstoreaccount1/jobs"),
            (Service::Blob, "/devstoreaccount1/photos"),
        ] {
            // Signed with `Date` (no x-ms-date), as some clients do.
            let string_to_sign = StorageRequest {
                method: "GET",
                date: &date,
                path,
                query: &[("comp", "list"), ("restype", "container")],
                ..Default::default()
            }
            .string_to_sign_lite(DEV_ACCOUNT);
            assert!(string_to_sign.ends_with("?comp=list"), "{string_to_sign}");
            let mut headers = HeaderMap::new();
            headers.insert("date", HeaderValue::from_str(&date).unwrap());
            let value = authorization("SharedKeyLite", DEV_ACCOUNT, &key, &string_to_sign);
            headers.insert("authorization", HeaderValue::from_str(&value).unwrap());
            let parts = request(
                Method::GET,
                &format!("{path}?comp=list&restype=container"),
                headers,
            );
            assert!(matches!(
                auth(&state, service, &parts).await,
                Ok(Access::Full)
            ));
            let forged = with_header(&parts, "authorization", &tampered_authorization(&parts));
            assert!(auth(&state, service, &forged).await.is_err());
        }
        // No date at all; a date of another account's header.
        let parts = signed_by_client(
            ClientService::Table,
            Credential::SharedKey(key.clone()),
            Method::GET,
            "/devstoreaccount1/Tables",
            &[],
            "",
        );
        let mut headers = parts.headers.clone();
        headers.remove("x-ms-date");
        let undated = request(Method::GET, "/devstoreaccount1/Tables", headers);
        let failure = refusal(auth(&state, Service::Table, &undated).await);
        assert_eq!(
            failure.detail.as_deref(),
            Some("Request date header not specified")
        );
        let value = parts.headers["authorization"].to_str().unwrap();
        let other = with_header(
            &parts,
            "authorization",
            &value.replace(DEV_ACCOUNT, "other"),
        );
        let failure = refusal(auth(&state, Service::Table, &other).await);
        assert!(failure
            .detail
            .unwrap()
            .contains("is not the account of the request"));
        // A CORS preflight carries no credential and is let through.
        let preflight = request(
            Method::OPTIONS,
            "/devstoreaccount1/Tables",
            HeaderMap::new(),
        );
        assert!(auth(&state, Service::Table, &preflight)
            .await
            .unwrap()
            .is_anonymous());
        let anonymous = request(Method::GET, "/devstoreaccount1/Tables", HeaderMap::new());
        assert_eq!(
            refusal(auth(&state, Service::Table, &anonymous).await).code,
            "AuthenticationFailed"
        );
        let blob = request(
            Method::GET,
            "/devstoreaccount1/photos/a.txt",
            HeaderMap::new(),
        );
        let access = auth(&state, Service::Blob, &blob).await.unwrap();
        let refused = access
            .check(Need::Object {
                container: "photos",
                key: None,
                perm: Perm::Read,
            })
            .unwrap_err();
        assert_eq!(
            (refused.status, refused.code.as_str()),
            (401, "NoAuthenticationInformation")
        );
        // A scheme the service does not know.
        let basic = with_header(&parts, "authorization", "Basic dXNlcjpwYXNz");
        assert_eq!(
            refusal(auth(&state, Service::Table, &basic).await).status,
            403
        );
    }

    #[tokio::test]
    async fn every_field_of_a_service_sas_is_signed() {
        let state = state();
        let account = Account::development();
        let sas = TableSas::new("Orders")
            .permissions(TableSasPermissions::ALL)
            .start(Utc::now() - Duration::minutes(5))
            .expiry(Utc::now() + Duration::hours(1))
            .partition_key_range(Some("a"), Some("m"))
            .row_key_range(Some("1"), Some("9"))
            .ip_range(SasIpRange::range(
                Ipv4Addr::new(127, 0, 0, 0),
                Ipv4Addr::new(127, 0, 0, 9),
            ))
            .protocol(SasProtocol::HttpsAndHttp)
            .sign(&account)
            .unwrap();
        let path = "/devstoreaccount1/Orders(PartitionKey='b',RowKey='2')";
        let parts =
            |query: &str| request(Method::GET, &format!("{path}?{query}"), HeaderMap::new());
        let access = auth(&state, Service::Table, &parts(sas.as_query()))
            .await
            .unwrap();
        let read = |pk: &'static str| Need::Object {
            container: "orders",
            key: Some((pk, "5")),
            perm: Perm::Read,
        };
        access.check(read("b")).unwrap();
        assert_eq!(
            access.check(read("z")).unwrap_err().code,
            "AuthorizationPermissionMismatch"
        );
        assert!(access.key_range("Orders").is_some());
        for (name, _) in parse_query(sas.as_query()) {
            if name == "sig" {
                continue;
            }
            // The same field with another value the service would accept.
            let changed: Vec<String> = sas
                .as_query()
                .split('&')
                .map(|pair| {
                    let (k, v) = pair.split_once('=').unwrap();
                    if k != name {
                        return pair.to_owned();
                    }
                    let other = match k {
                        "sv" => "2018-03-28".to_owned(),
                        "tn" => "Orderx".to_owned(),
                        "sp" => "rau".to_owned(),
                        "st" | "se" => {
                            v.replace("Z", "").replace("%3A", ":").to_owned()[..16].to_owned() + "Z"
                        }
                        "sip" => "127.0.0.1".to_owned(),
                        "spr" => "http,https".to_owned(),
                        _ => format!("{v}0"),
                    };
                    format!("{k}={other}")
                })
                .collect();
            let failure = refusal(auth(&state, Service::Table, &parts(&changed.join("&"))).await);
            assert!(
                failure
                    .detail
                    .as_deref()
                    .is_some_and(|d| d.starts_with("Signature did not match")),
                "{name}: {failure:?}"
            );
        }
    }

    /// A SAS query signing `string_to_sign` (written out from the REST
    /// reference's layout, not built by tablekit) with the emulator's key.
    fn foreign_sas(params: &str, string_to_sign: &str) -> String {
        let sig = base64::engine::general_purpose::STANDARD.encode(
            AccountKey::from_base64(DEV_KEY)
                .unwrap()
                .hmac_sha256(string_to_sign),
        );
        format!(
            "{params}&sig={}",
            percent_encoding::utf8_percent_encode(&sig, percent_encoding::NON_ALPHANUMERIC)
        )
    }

    #[tokio::test]
    async fn the_sas_of_newer_versions_the_sdks_sign_is_verified() {
        let state = state();
        let get = |path: &str, query: &str| {
            request(Method::GET, &format!("{path}?{query}"), HeaderMap::new())
        };
        // Blob SAS, 2020-12-06 and later: sr, snapshot time and encryption
        // scope before the five answer overrides.
        let blob = foreign_sas(
            "sv=2021-08-06&sr=b&sp=r&se=2100-01-01T00%3A00%3A00Z&rsct=text%2Fplain",
            "r\n\n2100-01-01T00:00:00Z\n/blob/devstoreaccount1/photos/a.txt\n\n\n\n2021-08-06\nb\n\n\n\n\n\n\ntext/plain",
        );
        let access = auth(
            &state,
            Service::Blob,
            &get("/devstoreaccount1/photos/a.txt", &blob),
        )
        .await
        .unwrap();
        let read = Need::Object {
            container: "photos",
            key: None,
            perm: Perm::Read,
        };
        access.check(read).unwrap();
        assert_eq!(
            access.answer_overrides(),
            [("content-type", "text/plain".to_owned())]
        );
        // The same with the override left out of the query: not what was signed.
        let cut = blob.replace("&rsct=text%2Fplain", "");
        assert!(auth(
            &state,
            Service::Blob,
            &get("/devstoreaccount1/photos/a.txt", &cut)
        )
        .await
        .is_err());
        // Blob SAS, 2018-11-09 to 2020-10-02: no encryption scope.
        let older = foreign_sas(
            "sv=2019-12-12&sr=c&sp=rl&se=2100-01-01T00%3A00%3A00Z",
            "rl\n\n2100-01-01T00:00:00Z\n/blob/devstoreaccount1/photos\n\n\n\n2019-12-12\nc\n\n\n\n\n\n",
        );
        auth(
            &state,
            Service::Blob,
            &get("/devstoreaccount1/photos/b.txt", &older),
        )
        .await
        .unwrap()
        .check(read)
        .unwrap();
        // Account SAS, 2020-12-06 and later: the encryption scope, then a newline.
        let account = foreign_sas(
            "sv=2021-08-06&ss=bqt&srt=sco&sp=rl&se=2100-01-01T00%3A00%3A00Z",
            "devstoreaccount1\nrl\nbqt\nsco\n\n2100-01-01T00:00:00Z\n\n\n2021-08-06\n\n",
        );
        let access = auth(&state, Service::Queue, &get("/devstoreaccount1/", &account))
            .await
            .unwrap();
        access.check(Need::Service(Perm::List)).unwrap();
        assert_eq!(
            access.check(Need::Service(Perm::Write)).unwrap_err().code,
            "AuthorizationPermissionMismatch"
        );
        // A user delegation SAS: refused, not mistaken for a service SAS.
        let delegated = format!("{blob}&skoid=00000000-0000-0000-0000-000000000000");
        let failure = refusal(
            auth(
                &state,
                Service::Blob,
                &get("/devstoreaccount1/photos/a.txt", &delegated),
            )
            .await,
        );
        assert_eq!(failure.code, "AuthenticationFailed");
    }

    #[tokio::test]
    async fn a_stored_access_policy_fills_in_what_the_sas_leaves_out() {
        let state = state();
        let store = &state.accounts[0];
        store
            .tables
            .execute(Operation::CreateTable { table: "Orders" })
            .await
            .unwrap();
        let at = |d: Duration| {
            (Utc::now() + d)
                .format("%Y-%m-%dT%H:%M:%S.0000000Z")
                .to_string()
        };
        let set = |policies: Vec<RawPolicy>| async move {
            store
                .tables
                .admin(AdminOp::SetAcl {
                    resource: "Orders",
                    policies: &policies,
                })
                .await
                .unwrap();
        };
        let policy = |id: &str, permission: Option<&str>, expiry: Duration| RawPolicy {
            id: id.to_owned(),
            start: None,
            expiry: Some(at(expiry)),
            permission: permission.map(str::to_owned),
        };
        set(vec![
            policy("readers", Some("r"), Duration::hours(1)),
            policy("until", None, Duration::hours(1)),
            policy("lapsed", Some("r"), -Duration::minutes(1)),
        ])
        .await;
        let account = Account::development();
        let get = |sas: crate::account::SasToken| {
            request(
                Method::GET,
                &format!("/devstoreaccount1/Orders()?{}", sas.as_query()),
                HeaderMap::new(),
            )
        };
        let read = Need::Object {
            container: "Orders",
            key: None,
            perm: Perm::Read,
        };
        let add = Need::Object {
            container: "Orders",
            key: Some(("p", "r")),
            perm: Perm::Add,
        };
        // The policy grants read, and only read.
        let sas = TableSas::new("Orders")
            .policy_id("readers")
            .sign(&account)
            .unwrap();
        let access = auth(&state, Service::Table, &get(sas)).await.unwrap();
        access.check(read).unwrap();
        assert!(access.check(add).is_err());
        // The policy sets the expiry, the SAS its permissions.
        let until = StoredAccessPolicy::<TableSasPermissions>::new("until")
            .expiry(Utc::now() + Duration::hours(1));
        let sas = TableSas::new("Orders")
            .policy(&until)
            .permissions(TableSasPermissions::ALL)
            .sign(&account)
            .unwrap();
        let access = auth(&state, Service::Table, &get(sas)).await.unwrap();
        access.check(add).unwrap();
        // Both set the permissions: refused, as the service does.
        let claims_only_expiry = StoredAccessPolicy::<TableSasPermissions>::new("readers")
            .expiry(Utc::now() + Duration::hours(1));
        let sas = TableSas::new("Orders")
            .policy(&claims_only_expiry)
            .permissions(TableSasPermissions::READ_ONLY)
            .sign(&account)
            .unwrap();
        let failure = refusal(auth(&state, Service::Table, &get(sas)).await);
        assert!(failure.detail.unwrap().contains("but not both"));
        // A lapsed policy, then a revoked one.
        let lapsed = TableSas::new("Orders")
            .policy_id("lapsed")
            .sign(&account)
            .unwrap();
        let failure = refusal(auth(&state, Service::Table, &get(lapsed)).await);
        assert!(failure
            .detail
            .unwrap()
            .starts_with("Signature not valid in the specified time frame"));
        set(Vec::new()).await;
        let sas = TableSas::new("Orders")
            .policy_id("readers")
            .sign(&account)
            .unwrap();
        let failure = refusal(auth(&state, Service::Table, &get(sas)).await);
        assert!(failure
            .detail
            .unwrap()
            .contains("names no stored access policy"));
        // Neither sets the permissions.
        set(vec![policy("until", None, Duration::hours(1))]).await;
        let query = format!(
            "sv=2019-02-02&tn=Orders&si=until&sig={}",
            percent_encoding::utf8_percent_encode(
                &base64::engine::general_purpose::STANDARD.encode(
                    AccountKey::from_base64(DEV_KEY).unwrap().hmac_sha256(
                        "\n\n\n/table/devstoreaccount1/orders\nuntil\n\n\n2019-02-02\n\n\n\n"
                    )
                ),
                percent_encoding::NON_ALPHANUMERIC
            )
        );
        let parts = request(
            Method::GET,
            &format!("/devstoreaccount1/Orders()?{query}"),
            HeaderMap::new(),
        );
        let failure = refusal(auth(&state, Service::Table, &parts).await);
        assert_eq!(
            failure.detail.as_deref(),
            Some("sp is mandatory. Cannot be empty")
        );
        // A blob SAS names its container's policy: no container, no policy.
        let sas = BlobSas::container("photos")
            .permissions(BlobSasPermissions::READ_ONLY)
            .policy(
                &StoredAccessPolicy::<BlobSasPermissions>::new("p")
                    .expiry(Utc::now() + Duration::hours(1)),
            )
            .sign(&account)
            .unwrap();
        let parts = request(
            Method::GET,
            &format!("/devstoreaccount1/photos/a.txt?{}", sas.as_query()),
            HeaderMap::new(),
        );
        assert!(auth(&state, Service::Blob, &parts).await.is_err());
    }
}
