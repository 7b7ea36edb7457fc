//! Authentication and authorization of `tablekit::server`, end to end:
//! tablekit's clients (and, for what they do not sign, requests signed by
//! hand) over HTTP against an in-process server on free ports.
//!
//! A call the credential is accepted for is answered by its service's
//! handler (a success, a 404 of a missing resource, or a 501 of an operation
//! not served yet): anything but the 401/403 of a credential refused before
//! the handler.

use base64::engine::general_purpose::{STANDARD as BASE64, URL_SAFE_NO_PAD as BASE64URL};
use base64::Engine as _;
use chrono::{DateTime, Duration, Utc};
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use tablekit::account::{
    AccessToken, AccountKey, AccountSas, AccountSasPermissions, AccountSasResourceTypes,
    AccountSasServices, BlobSas, BlobSasPermissions, QueueSas, QueueSasPermissions, SasIpRange,
    SasProtocol, SasToken, TableSas, TableSasPermissions, TokenCredential, TokenRequest,
};
use tablekit::acl::StoredAccessPolicy;
use tablekit::options::{ClientOptions, RetryPolicy};
use tablekit::server::{BearerConfig, Server, DEV_ACCOUNT, DEV_KEY};
use tablekit::{
    Account, BlobServiceClient, Credential, DynamicEntity, QueueServiceClient, Storage,
    TableServiceClient,
};

async fn serve() -> Server {
    Server::builder().ports(0, 0, 0).start().await.unwrap()
}

fn options() -> ClientOptions {
    let mut options = ClientOptions::default();
    options.http.retry = RetryPolicy::none();
    options
}

fn account(server: &Server) -> Account {
    Account::from_connection_string(&server.connection_string()).unwrap()
}

fn tables(account: Account) -> TableServiceClient {
    TableServiceClient::with_options(account, options()).unwrap()
}

fn queues(account: Account) -> QueueServiceClient {
    QueueServiceClient::with_options(account, options()).unwrap()
}

fn blobs(account: Account) -> BlobServiceClient {
    BlobServiceClient::with_options(account, options()).unwrap()
}

fn with_sas(account: &Account, sas: SasToken) -> Account {
    account.clone().with_credential(Credential::Sas(sas))
}

/// The status and error code of a failed call.
fn refused<T: std::fmt::Debug>(result: tablekit::Result<T>) -> (u16, String) {
    let e = result.expect_err("the call should fail");
    (
        e.status().unwrap_or(0),
        e.code().map(|c| c.as_str().to_owned()).unwrap_or_default(),
    )
}

/// A call authenticated and handed to its service: it succeeds, or fails
/// for another reason than its credential (not 401 nor 403).
fn served_after_auth<T: std::fmt::Debug>(result: tablekit::Result<T>) {
    if let Err(e) = result {
        let status = e.status().unwrap_or(0);
        assert!(
            !matches!(status, 0 | 401 | 403),
            "authenticated, then answered by the service: {e}"
        );
    }
}

fn later() -> DateTime<Utc> {
    Utc::now() + Duration::hours(1)
}

fn earlier() -> DateTime<Utc> {
    Utc::now() - Duration::hours(1)
}

/// HMAC-SHA256 of `text` keyed with the emulator's key, base64.
fn dev_signature(text: &str) -> String {
    let key = BASE64.decode(DEV_KEY).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(text.as_bytes());
    BASE64.encode(mac.finalize().into_bytes())
}

fn rfc1123(t: DateTime<Utc>) -> String {
    t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// A GET of `path` (with `?comp=...` if given) signed with Shared Key Lite
/// in the Blob and Queue services' form, dated `date`; `tamper` changes the
/// signature's first character.
async fn lite_get(
    address: std::net::SocketAddr,
    path: &str,
    comp: Option<&str>,
    date: DateTime<Utc>,
    tamper: bool,
) -> reqwest::Response {
    let date = rfc1123(date);
    let full_path = format!("/{DEV_ACCOUNT}/{path}");
    // VERB, Content-MD5, Content-Type, Date, canonicalized headers, resource.
    let mut resource = format!("/{DEV_ACCOUNT}{full_path}");
    if let Some(comp) = comp {
        resource.push_str(&format!("?comp={comp}"));
    }
    let string_to_sign =
        format!("GET\n\n\n\nx-ms-date:{date}\nx-ms-version:2021-08-06\n{resource}");
    let mut signature = dev_signature(&string_to_sign);
    if tamper {
        let first = if signature.starts_with('A') { "B" } else { "A" };
        signature.replace_range(0..1, first);
    }
    let url = match comp {
        Some(comp) => format!("http://{address}{full_path}?comp={comp}"),
        None => format!("http://{address}{full_path}"),
    };
    reqwest::Client::new()
        .get(url)
        .header("x-ms-date", date)
        .header("x-ms-version", "2021-08-06")
        .header(
            "Authorization",
            format!("SharedKeyLite {DEV_ACCOUNT}:{signature}"),
        )
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_key_and_lite_are_accepted_by_every_service() {
    let server = serve().await;
    let account = account(&server);
    // Shared Key, the Table service's form: served.
    assert!(tables(account.clone())
        .table::<DynamicEntity>("KeyTable")
        .unwrap()
        .create_table_if_not_exists()
        .await
        .unwrap());
    // Shared Key Lite, the Table service's form.
    let key = AccountKey::from_base64(DEV_KEY).unwrap();
    let lite = account
        .clone()
        .with_credential(Credential::SharedKeyLite(key));
    assert!(tables(lite)
        .table::<DynamicEntity>("LiteTable")
        .unwrap()
        .create_table_if_not_exists()
        .await
        .unwrap());
    // Shared Key, the Blob and Queue services' form: authenticated.
    served_after_auth(
        queues(account.clone())
            .queue("jobs")
            .unwrap()
            .create_queue()
            .await,
    );
    served_after_auth(
        blobs(account.clone())
            .container("photos")
            .unwrap()
            .create_container()
            .await,
    );
    // Shared Key Lite for queues and blobs, signed by hand.
    for (address, path, comp) in [
        (server.queue_address(), "jobs", Some("metadata")),
        (server.blob_address(), "photos/a.txt", None),
    ] {
        let good = lite_get(address, path, comp, Utc::now(), false).await;
        assert!(
            !matches!(good.status().as_u16(), 401 | 403),
            "{path}: {}",
            good.status()
        );
        let bad = lite_get(address, path, comp, Utc::now(), true).await;
        assert_eq!(bad.status(), 403, "{path}");
        assert_eq!(bad.headers()["x-ms-error-code"], "AuthenticationFailed");
        let body = bad.text().await.unwrap();
        assert!(
            body.contains(
                "is not the same as any computed signature. Server used following string to sign"
            ),
            "{body}"
        );
        assert!(!body.contains(DEV_KEY), "{body}");
        // A date older than 15 minutes, even signed right.
        let stale = lite_get(
            address,
            path,
            comp,
            Utc::now() - Duration::minutes(16),
            false,
        )
        .await;
        assert_eq!(stale.status(), 403, "{path}");
        assert!(stale
            .text()
            .await
            .unwrap()
            .contains("Request date header too old"));
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_another_account_or_no_credential_is_refused() {
    const OTHER_KEY: &str = "b3RoZXIgYWNjb3VudCBrZXkgb2YgdGhlIHNlcnZlIHRlc3Q=";
    let server = Server::builder()
        .ports(0, 0, 0)
        .account("other", OTHER_KEY)
        .unwrap()
        .start()
        .await
        .unwrap();
    let wrong = account(&server).with_credential(Credential::SharedKey(
        AccountKey::from_base64(OTHER_KEY).unwrap(),
    ));
    let denied = (403, "AuthenticationFailed".to_owned());
    assert_eq!(
        refused(tables(wrong.clone()).create_table("Wrong").await),
        denied
    );
    assert_eq!(
        refused(
            queues(wrong.clone())
                .queue("jobs")
                .unwrap()
                .create_queue()
                .await
        ),
        denied
    );
    assert_eq!(
        refused(
            blobs(wrong)
                .container("photos")
                .unwrap()
                .create_container()
                .await
        ),
        denied
    );
    // The other account with its own key; and with the emulator's.
    let other =
        Account::from_connection_string(&server.connection_string_for("other").unwrap()).unwrap();
    assert_eq!(other.account_name(), "other");
    tables(other.clone()).create_table("Theirs").await.unwrap();
    let borrowed = other.with_credential(Credential::SharedKey(
        AccountKey::from_base64(DEV_KEY).unwrap(),
    ));
    assert_eq!(refused(tables(borrowed).create_table("Mine").await), denied);
    // No credential at all: the Table service's 403, the Queue service's
    // 401 with the bearer challenge.
    let http = reqwest::Client::new();
    let table = http
        .post(format!(
            "http://{}/{DEV_ACCOUNT}/Tables",
            server.table_address()
        ))
        .body(r#"{"TableName":"Anon"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(table.status(), 403);
    assert_eq!(table.headers()["x-ms-error-code"], "AuthenticationFailed");
    let queue = http
        .get(format!(
            "http://{}/{DEV_ACCOUNT}/jobs?comp=metadata",
            server.queue_address()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(queue.status(), 401);
    assert_eq!(
        queue.headers()["x-ms-error-code"],
        "NoAuthenticationInformation"
    );
    let challenge = queue.headers()["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.starts_with("Bearer authorization_uri=https://login.microsoftonline.com/")
            && challenge.ends_with("resource_id=https://storage.azure.com"),
        "{challenge}"
    );
    server.shutdown().await.unwrap();
}

fn account_sas(
    services: AccountSasServices,
    types: AccountSasResourceTypes,
    permissions: AccountSasPermissions,
) -> AccountSas {
    AccountSas::new()
        .services(services)
        .resource_types(types)
        .permissions(permissions)
        .expiry(later())
}

const TABLES: AccountSasServices = AccountSasServices {
    blob: false,
    queue: false,
    table: true,
};
const CONTAINERS: AccountSasResourceTypes = AccountSasResourceTypes {
    service: false,
    container: true,
    object: false,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_sas_is_held_to_its_services_types_permissions_window_address_and_protocol() {
    let server = serve().await;
    let account = account(&server);
    let create = AccountSasPermissions {
        create: true,
        ..Default::default()
    };
    let create_with = |sas: AccountSas| {
        let client = tables(with_sas(&account, sas.sign(&account).unwrap()));
        async move {
            client
                .create_table(&format!("T{}", fastrand::u32(..)))
                .await
        }
    };
    // Allowed: tables, container level, create.
    create_with(account_sas(TABLES, CONTAINERS, create))
        .await
        .unwrap();
    // Within its address range; `https,http` allows http.
    create_with(
        account_sas(TABLES, CONTAINERS, create)
            .ip_range(SasIpRange::single(std::net::Ipv4Addr::LOCALHOST))
            .protocol(SasProtocol::HttpsAndHttp),
    )
    .await
    .unwrap();
    let code = |(_, code): (u16, String)| code;
    let objects = AccountSasResourceTypes {
        object: true,
        ..Default::default()
    };
    assert_eq!(
        code(refused(
            create_with(account_sas(TABLES, objects, AccountSasPermissions::ALL)).await
        )),
        "AuthorizationResourceTypeMismatch"
    );
    assert_eq!(
        code(refused(
            create_with(account_sas(
                TABLES,
                CONTAINERS,
                AccountSasPermissions::READ_ONLY
            ))
            .await
        )),
        "AuthorizationPermissionMismatch"
    );
    let queues_only = AccountSasServices {
        queue: true,
        ..Default::default()
    };
    assert_eq!(
        code(refused(
            create_with(account_sas(queues_only, CONTAINERS, create)).await
        )),
        "AuthorizationServiceMismatch"
    );
    assert_eq!(
        refused(
            create_with(
                account_sas(TABLES, CONTAINERS, create)
                    .start(earlier() - Duration::hours(1))
                    .expiry(earlier())
            )
            .await
        ),
        (403, "AuthenticationFailed".to_owned())
    );
    assert_eq!(
        code(refused(
            create_with(
                account_sas(TABLES, CONTAINERS, create)
                    .start(later())
                    .expiry(later() + Duration::hours(1))
            )
            .await
        )),
        "AuthenticationFailed"
    );
    assert_eq!(
        code(refused(
            create_with(account_sas(TABLES, CONTAINERS, create).protocol(SasProtocol::Https)).await
        )),
        "AuthorizationProtocolMismatch"
    );
    assert_eq!(
        code(refused(
            create_with(
                account_sas(TABLES, CONTAINERS, create).ip_range(SasIpRange::range(
                    std::net::Ipv4Addr::new(10, 0, 0, 1),
                    std::net::Ipv4Addr::new(10, 0, 0, 9),
                ))
            )
            .await
        )),
        "AuthorizationSourceIPMismatch"
    );
    // A signature changed by one character.
    let sas = account_sas(TABLES, CONTAINERS, create)
        .sign(&account)
        .unwrap();
    let tampered = tamper(&sas);
    assert_eq!(
        refused(
            tables(with_sas(&account, tampered))
                .create_table("Tampered")
                .await
        ),
        (403, "AuthenticationFailed".to_owned())
    );
    // The same kind of SAS for queues and blobs: authenticated or not.
    let all = account_sas(
        AccountSasServices::ALL,
        AccountSasResourceTypes::ALL,
        AccountSasPermissions::ALL,
    )
    .sign(&account)
    .unwrap();
    served_after_auth(
        queues(with_sas(&account, all.clone()))
            .queue("jobs")
            .unwrap()
            .create_queue()
            .await,
    );
    served_after_auth(
        blobs(with_sas(&account, all))
            .container("photos")
            .unwrap()
            .create_container()
            .await,
    );
    let tables_sas = account_sas(
        TABLES,
        AccountSasResourceTypes::ALL,
        AccountSasPermissions::ALL,
    )
    .sign(&account)
    .unwrap();
    assert_eq!(
        code(refused(
            queues(with_sas(&account, tables_sas))
                .queue("jobs")
                .unwrap()
                .create_queue()
                .await
        )),
        "AuthorizationServiceMismatch"
    );
    server.shutdown().await.unwrap();
}

/// `sas` with the first character of its signature changed.
fn tamper(sas: &SasToken) -> SasToken {
    let query = sas.as_query();
    let at = query.find("sig=").unwrap() + 4;
    let mut changed = query.to_owned();
    let first = if &query[at..at + 1] == "A" { "B" } else { "A" };
    changed.replace_range(at..at + 1, first);
    SasToken::new(changed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_sas_authenticates_for_its_resource_only() {
    let server = serve().await;
    let account = account(&server);
    // A table SAS: entity calls pass authentication, creating a table is
    // not among what it grants.
    let table_sas = TableSas::new("Orders")
        .permissions(TableSasPermissions::ALL)
        .expiry(later())
        .sign(&account)
        .unwrap();
    let orders = tables(with_sas(&account, table_sas.clone()));
    served_after_auth(
        orders
            .table::<DynamicEntity>("Orders")
            .unwrap()
            .get(("p", "r"))
            .await,
    );
    assert_eq!(
        refused(orders.create_table("Orders").await),
        (403, "AuthorizationPermissionMismatch".to_owned())
    );
    assert_eq!(
        refused(
            tables(with_sas(&account, tamper(&table_sas)))
                .table::<DynamicEntity>("Orders")
                .unwrap()
                .get(("p", "r"))
                .await
        ),
        (403, "AuthenticationFailed".to_owned())
    );
    let expired = TableSas::new("Orders")
        .permissions(TableSasPermissions::ALL)
        .start(earlier() - Duration::hours(1))
        .expiry(earlier())
        .sign(&account)
        .unwrap();
    assert_eq!(
        refused(
            tables(with_sas(&account, expired))
                .table::<DynamicEntity>("Orders")
                .unwrap()
                .get(("p", "r"))
                .await
        ),
        (403, "AuthenticationFailed".to_owned())
    );
    // A queue SAS: for its queue, not another.
    let queue_sas = QueueSas::new("jobs")
        .permissions(QueueSasPermissions::ALL)
        .expiry(later())
        .sign(&account)
        .unwrap();
    let q = queues(with_sas(&account, queue_sas));
    served_after_auth(q.queue("jobs").unwrap().peek(1).await);
    assert_eq!(
        refused(q.queue("other").unwrap().peek(1).await),
        (403, "AuthenticationFailed".to_owned())
    );
    // A blob SAS: for its blob, not its neighbour; a container SAS for all.
    let blob_sas = BlobSas::blob("photos", "a.txt")
        .permissions(BlobSasPermissions::READ_ONLY)
        .expiry(later())
        .sign(&account)
        .unwrap();
    let container = blobs(with_sas(&account, blob_sas))
        .container("photos")
        .unwrap();
    served_after_auth(container.blob("a.txt").unwrap().properties().await);
    assert_eq!(
        refused(container.blob("b.txt").unwrap().properties().await),
        (403, "AuthenticationFailed".to_owned())
    );
    let container_sas = BlobSas::container("photos")
        .permissions(BlobSasPermissions::READ_ONLY)
        .expiry(later())
        .sign(&account)
        .unwrap();
    let container = blobs(with_sas(&account, container_sas))
        .container("photos")
        .unwrap();
    served_after_auth(container.blob("b.txt").unwrap().properties().await);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sas_naming_a_stored_access_policy_the_resource_lacks_is_refused() {
    // (The SAS a policy authorises, and the merge of their fields, are
    // tested in the unit tests of `server::auth`, where the test sets the
    // policy in the store: the handlers of the ACL calls come separately.)
    let server = serve().await;
    let account = account(&server);
    let store = Storage::from_connection_string(&server.connection_string()).unwrap();
    store
        .table::<DynamicEntity>("Orders")
        .unwrap()
        .create_table()
        .await
        .unwrap();
    let table_sas = TableSas::new("Orders")
        .policy_id("revoked")
        .sign(&account)
        .unwrap();
    assert_eq!(
        refused(
            tables(with_sas(&account, table_sas))
                .table::<DynamicEntity>("Orders")
                .unwrap()
                .get(("p", "r"))
                .await
        ),
        (403, "AuthenticationFailed".to_owned())
    );
    let queue_sas = QueueSas::new("jobs")
        .policy_id("revoked")
        .sign(&account)
        .unwrap();
    assert_eq!(
        refused(
            queues(with_sas(&account, queue_sas))
                .queue("jobs")
                .unwrap()
                .peek(1)
                .await
        ),
        (403, "AuthenticationFailed".to_owned())
    );
    let viewers = StoredAccessPolicy::<BlobSasPermissions>::new("revoked").expiry(later());
    let blob_sas = BlobSas::container("photos")
        .policy(&viewers)
        .permissions(BlobSasPermissions::READ_ONLY)
        .sign(&account)
        .unwrap();
    let container = blobs(with_sas(&account, blob_sas))
        .container("photos")
        .unwrap();
    assert_eq!(
        refused(container.blob("a.txt").unwrap().properties().await),
        (403, "AuthenticationFailed".to_owned())
    );
    server.shutdown().await.unwrap();
}

/// The same token every time.
#[derive(Debug)]
struct StaticToken(String);

#[async_trait::async_trait]
impl TokenCredential for StaticToken {
    async fn get_token(&self, _: &TokenRequest) -> tablekit::Result<AccessToken> {
        Ok(AccessToken::new(self.0.clone(), later()))
    }
}

const SECRET: &[u8] = b"the serve_auth tests' token signing secret";
const ISSUER: &str = "https://sts.windows.net/serve-auth-tenant/";

fn hs256(secret: &[u8], claims: serde_json::Value) -> String {
    let header = BASE64URL.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = BASE64URL.encode(claims.to_string());
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
    mac.update(format!("{header}.{payload}").as_bytes());
    format!(
        "{header}.{payload}.{}",
        BASE64URL.encode(mac.finalize().into_bytes())
    )
}

fn claims(aud: &str, iss: &str, exp: DateTime<Utc>) -> serde_json::Value {
    serde_json::json!({ "aud": aud, "iss": iss, "exp": exp.timestamp(), "nbf": earlier().timestamp() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_are_checked_against_the_configured_key_audience_issuer_and_lifetime() {
    let server = Server::builder()
        .ports(0, 0, 0)
        .bearer(BearerConfig::hs256(SECRET).issuer(ISSUER))
        .start()
        .await
        .unwrap();
    let with_token =
        |token: String| account(&server).with_credential(Credential::bearer(StaticToken(token)));
    let good = hs256(SECRET, claims("https://storage.azure.com", ISSUER, later()));
    tables(with_token(good.clone()))
        .create_table("Bearer")
        .await
        .unwrap();
    served_after_auth(
        queues(with_token(good.clone()))
            .queue("jobs")
            .unwrap()
            .create_queue()
            .await,
    );
    served_after_auth(
        blobs(with_token(good.clone()))
            .container("photos")
            .unwrap()
            .create_container()
            .await,
    );
    let bad_tokens = [
        (
            "expired",
            hs256(
                SECRET,
                claims("https://storage.azure.com", ISSUER, earlier()),
            ),
        ),
        (
            "audience",
            hs256(SECRET, claims("https://vault.azure.net", ISSUER, later())),
        ),
        (
            "issuer",
            hs256(
                SECRET,
                claims("https://storage.azure.com", "https://evil/", later()),
            ),
        ),
        (
            "key",
            hs256(
                b"another secret",
                claims("https://storage.azure.com", ISSUER, later()),
            ),
        ),
    ];
    let http = reqwest::Client::new();
    for (why, token) in bad_tokens {
        // The service's answer: 401 with its challenge.
        let answer = http
            .post(format!(
                "http://{}/{DEV_ACCOUNT}/Tables",
                server.table_address()
            ))
            .header("Authorization", format!("Bearer {token}"))
            .header("x-ms-version", "2019-02-02")
            .body(r#"{"TableName":"Refused"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 401, "{why}");
        assert_eq!(
            answer.headers()["x-ms-error-code"],
            "InvalidAuthenticationInfo",
            "{why}"
        );
        assert!(answer.headers().contains_key("www-authenticate"), "{why}");
        // tablekit's client reads the challenge, asks its credential for a
        // new token, gets the same one and gives up.
        let e = tables(with_token(token))
            .create_table("Refused")
            .await
            .unwrap_err();
        assert!(e.to_string().contains("refused the token"), "{why}: {e}");
    }
    server.shutdown().await.unwrap();
    // A server without a BearerConfig refuses every token.
    let plain = serve().await;
    let token = account(&plain).with_credential(Credential::bearer(StaticToken(good)));
    let e = tables(token).create_table("NoBearer").await.unwrap_err();
    assert!(e.to_string().contains("refused the token"), "{e}");
    plain.shutdown().await.unwrap();
}
