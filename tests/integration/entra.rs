//! Microsoft Entra ID (bearer tokens).
//!
//! Against a scripted service (`scripted`): the bearer challenge (a `401`
//! with `WWW-Authenticate: Bearer authorization_uri=…/{tenant}/…` is answered
//! once, with a token of that tenant), a `401` without a challenge, the scope
//! per target and service, and the refusal to send a token over plain HTTP.
//!
//! Against Azurite in its OAuth mode (`--oauth basic`, HTTPS with the test
//! CA of `tablekit/src/backend/http/transport/testdata`, an instance of the
//! test's own on free loopback ports, stopped by its PID when the test ends):
//! tables, queues and blobs with locally minted tokens, an expired token
//! refused and then refreshed by the cache, and a token for the wrong
//! audience refused with a clear error.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use tablekit::account::{
    AccessToken, EntraCredential, Target, TokenCredential, TokenRequest, COSMOS_SCOPE,
    STORAGE_SCOPE,
};
use tablekit::clock::ManualClock;
use tablekit::options::{ClientOptions, RetryPolicy};
use tablekit::transport::RootCertificate;
use tablekit::{
    Account, BlobServiceClient, Credential, DynamicEntity, QueueServiceClient, TableServiceClient,
};

use crate::scripted::{self, answer, Seen};

/// Numbered tokens `tok{n}-{tenant}` (`home` without a tenant), valid for an hour.
#[derive(Debug, Default)]
struct Tokens {
    calls: AtomicUsize,
    asked: Mutex<Vec<TokenRequest>>,
}

#[async_trait::async_trait]
impl TokenCredential for Tokens {
    async fn get_token(&self, request: &TokenRequest) -> tablekit::Result<AccessToken> {
        // A token endpoint takes a while: concurrent callers overlap.
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        self.asked.lock().unwrap().push(request.clone());
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let tenant = request.tenant_id.as_deref().unwrap_or("home");
        Ok(AccessToken::new(
            format!("tok{n}-{tenant}"),
            Utc::now() + chrono::Duration::hours(1),
        ))
    }
}

fn options() -> ClientOptions {
    let mut options = crate::common::client_options();
    options.http.retry = RetryPolicy::none();
    options.http.timeout = Duration::from_secs(20);
    options
}

fn bearer_account(endpoint: &str, tokens: &Arc<Tokens>) -> Account {
    Account::from_connection_string(&format!(
        "AccountName=devstoreaccount1;TableEndpoint={endpoint};QueueEndpoint={endpoint};BlobEndpoint={endpoint}"
    ))
    .unwrap()
    .with_credential(Credential::Bearer(EntraCredential::from_arc(
        tokens.clone(),
    )))
}

fn authorization(seen: &[Seen]) -> Vec<String> {
    seen.iter()
        .map(|s| s.header("authorization").unwrap_or("").to_owned())
        .collect()
}

const CHALLENGE: &str = "Bearer authorization_uri=https://login.microsoftonline.com/tenant-b/oauth2/authorize resource_id=https://storage.azure.com";

#[tokio::test]
async fn a_bearer_challenge_naming_a_tenant_is_answered_once_with_its_token() {
    let (endpoint, seen) = scripted::serve(Arc::new(|n, _| match n {
        0 => answer(
            "401 Unauthorized",
            &[("WWW-Authenticate", CHALLENGE)],
            r#"{"odata.error":{"code":"InvalidAuthenticationInfo","message":{"lang":"en-US","value":"wrong tenant"}}}"#,
        ),
        _ => answer("204 No Content", &[], ""),
    }))
    .await;
    let tokens = Arc::new(Tokens::default());
    let svc =
        TableServiceClient::with_options(bearer_account(&endpoint, &tokens), options()).unwrap();
    svc.create_table("Challenged").await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        authorization(&seen),
        ["Bearer tok1-home", "Bearer tok2-tenant-b"]
    );
    let asked = tokens.asked.lock().unwrap();
    assert_eq!(asked[1].tenant_id.as_deref(), Some("tenant-b"));
    assert_eq!(asked[1].scopes, [STORAGE_SCOPE]);
    assert_eq!(seen[0].body, seen[1].body, "the same request, signed again");
    assert_eq!(seen[1].target(), "/devstoreaccount1/Tables");
}

#[tokio::test]
async fn a_401_without_a_challenge_is_not_sent_again_but_its_token_is_dropped() {
    let (endpoint, seen) = scripted::serve(Arc::new(|n, _| match n {
        0 => answer(
            "401 Unauthorized",
            &[],
            r#"{"odata.error":{"code":"InvalidAuthenticationInfo","message":{"lang":"en-US","value":"expired"}}}"#,
        ),
        _ => answer("204 No Content", &[], ""),
    }))
    .await;
    let tokens = Arc::new(Tokens::default());
    let svc =
        TableServiceClient::with_options(bearer_account(&endpoint, &tokens), options()).unwrap();
    let e = svc.create_table("Refused").await.unwrap_err();
    assert_eq!(e.status(), Some(401), "{e}");
    assert!(!e.to_string().contains("tok1"), "no token in errors: {e}");
    svc.create_table("Refused").await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        authorization(&seen),
        ["Bearer tok1-home", "Bearer tok2-home"]
    );
}

#[tokio::test]
async fn a_claims_challenge_is_answered_once_with_a_token_asked_with_its_claims() {
    const CAE: &str = "Bearer realm=\"\", authorization_uri=\"https://login.microsoftonline.com/common/oauth2/authorize\", error=\"insufficient_claims\", claims=\"eyJhY2Nlc3NfdG9rZW4iOnsibmJmIjp7ImVzc2VudGlhbCI6dHJ1ZSwidmFsdWUiOiIxNzI2MDc3NTk1In19fQ==\"";
    let (endpoint, seen) = scripted::serve(Arc::new(|n, _| match n {
        0 => answer("401 Unauthorized", &[("WWW-Authenticate", CAE)], ""),
        _ => answer("204 No Content", &[], ""),
    }))
    .await;
    let tokens = Arc::new(Tokens::default());
    let svc =
        TableServiceClient::with_options(bearer_account(&endpoint, &tokens), options()).unwrap();
    svc.create_table("Revoked").await.unwrap();
    assert_eq!(
        authorization(&seen.lock().unwrap()),
        ["Bearer tok1-home", "Bearer tok2-home"]
    );
    let asked = tokens.asked.lock().unwrap();
    assert_eq!(
        asked[1].claims.as_deref(),
        Some(r#"{"access_token":{"nbf":{"essential":true,"value":"1726077595"}}}"#)
    );
}

#[tokio::test]
async fn concurrent_first_requests_share_one_token() {
    let (endpoint, seen) = scripted::serve(Arc::new(|_, _| {
        answer(
            "404 Not Found",
            &[],
            r#"{"odata.error":{"code":"ResourceNotFound","message":{"lang":"en-US","value":"none"}}}"#,
        )
    }))
    .await;
    let tokens = Arc::new(Tokens::default());
    let table = TableServiceClient::with_options(bearer_account(&endpoint, &tokens), options())
        .unwrap()
        .table::<DynamicEntity>("Herd")
        .unwrap();
    let reads =
        futures::future::join_all((0..20).map(|i| table.get(("p", format!("r{i}"))).send())).await;
    assert!(reads.iter().all(|r| matches!(r, Ok(None))), "{reads:?}");
    assert_eq!(
        tokens.calls.load(Ordering::SeqCst),
        1,
        "one token for twenty requests"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 20);
    assert!(authorization(&seen).iter().all(|a| a == "Bearer tok1-home"));
}

#[tokio::test]
async fn a_challenge_that_keeps_coming_is_answered_only_once() {
    let (endpoint, seen) = scripted::serve(Arc::new(|_, _| {
        answer("401 Unauthorized", &[("WWW-Authenticate", CHALLENGE)], "")
    }))
    .await;
    let tokens = Arc::new(Tokens::default());
    let svc =
        TableServiceClient::with_options(bearer_account(&endpoint, &tokens), options()).unwrap();
    let e = svc.create_table("Loop").await.unwrap_err();
    assert_eq!(e.status(), Some(401), "{e}");
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn the_scope_follows_the_target_and_the_service() {
    let (endpoint, _seen) = scripted::serve(Arc::new(|_, s: &Seen| {
        if s.method() == "PUT" {
            answer("201 Created", &[], "")
        } else {
            answer("204 No Content", &[], "")
        }
    }))
    .await;
    let scopes = |tokens: &Tokens| -> Vec<String> {
        tokens
            .asked
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| r.scopes.clone())
            .collect()
    };

    let storage = Arc::new(Tokens::default());
    let account = bearer_account(&endpoint, &storage);
    assert_eq!(account.target(), Target::AzureStorage);
    TableServiceClient::with_options(account, options())
        .unwrap()
        .create_table("Storage")
        .await
        .unwrap();
    assert_eq!(scopes(&storage), [STORAGE_SCOPE]);

    let cosmos = Arc::new(Tokens::default());
    let account = bearer_account(&endpoint, &cosmos).with_target(Target::CosmosDb);
    TableServiceClient::with_options(account.clone(), options())
        .unwrap()
        .create_table("Cosmos")
        .await
        .unwrap();
    // Queues live in a storage account whatever the table endpoint is.
    QueueServiceClient::with_options(account, options())
        .unwrap()
        .queue("jobs")
        .unwrap()
        .create_queue()
        .await
        .unwrap();
    assert_eq!(scopes(&cosmos), [COSMOS_SCOPE, STORAGE_SCOPE]);

    let explicit = Arc::new(Tokens::default());
    let account = bearer_account(&endpoint, &explicit).with_credential(Credential::Bearer(
        EntraCredential::from_arc(explicit.clone())
            .with_scope("https://devstoreaccount1.table.core.windows.net/.default"),
    ));
    TableServiceClient::with_options(account, options())
        .unwrap()
        .create_table("Explicit")
        .await
        .unwrap();
    assert_eq!(
        scopes(&explicit),
        ["https://devstoreaccount1.table.core.windows.net/.default"]
    );
}

#[test]
fn a_bearer_token_is_never_sent_over_plain_http_beyond_loopback() {
    let account = Account::new(
        "acc",
        "http://acc.table.core.windows.net",
        Credential::bearer(Tokens::default()),
    )
    .unwrap();
    let e = TableServiceClient::with_options(account, options()).unwrap_err();
    assert!(e.to_string().contains("only over https"), "{e}");
    let account = Account::new(
        "acc",
        "http://[::1]:10002/acc",
        Credential::bearer(Tokens::default()),
    )
    .unwrap();
    assert!(TableServiceClient::with_options(account, options()).is_ok());
}

// ---- Azurite in OAuth mode -------------------------------------------------

const TESTDATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tablekit/src/backend/http/transport/testdata"
);

fn azurite_js() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tools/azurite/node_modules/azurite/dist/src/azurite.js")
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// An Azurite of this test's own, in OAuth mode over HTTPS; stopped (by its
/// PID, through the child handle) when dropped.
struct OAuthAzurite {
    child: std::process::Child,
    ports: [u16; 3],
    dir: PathBuf,
}

impl Drop for OAuthAzurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl OAuthAzurite {
    /// Starts one, or `None` (with a note) when Azurite is not installed and
    /// CI is not set; with CI=true a missing Azurite is a failure.
    fn start() -> Option<OAuthAzurite> {
        let js = azurite_js();
        if !js.exists() {
            if std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
                panic!(
                    "{} is missing: run scripts/azurite.sh start (npm ci)",
                    js.display()
                );
            }
            eprintln!(
                "OAUTH AZURITE CASE SKIPPED: {} is not installed",
                js.display()
            );
            return None;
        }
        let dir = std::env::temp_dir().join(format!("tablekit-oauth-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = std::fs::read(format!("{TESTDATA}/server.der")).unwrap();
        let key = std::fs::read(format!("{TESTDATA}/server.key.der")).unwrap();
        std::fs::write(dir.join("cert.pem"), pem("CERTIFICATE", &cert)).unwrap();
        std::fs::write(dir.join("key.pem"), pem("PRIVATE KEY", &key)).unwrap();
        // Free ports: bound together on port 0, then released for Azurite.
        let listeners: Vec<std::net::TcpListener> = (0..3)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        drop(listeners);
        let log = std::fs::File::create(dir.join("azurite.log")).unwrap();
        let child = std::process::Command::new("node")
            .arg(&js)
            .args(["--oauth", "basic", "--cert"])
            .arg(dir.join("cert.pem"))
            .arg("--key")
            .arg(dir.join("key.pem"))
            .args([
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                &ports[0].to_string(),
            ])
            .args([
                "--queueHost",
                "127.0.0.1",
                "--queuePort",
                &ports[1].to_string(),
            ])
            .args([
                "--tableHost",
                "127.0.0.1",
                "--tablePort",
                &ports[2].to_string(),
            ])
            .args([
                "--inMemoryPersistence",
                "--disableTelemetry",
                "--skipApiVersionCheck",
                "--loose",
            ])
            .current_dir(&dir)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("node starts");
        let mut azurite = OAuthAzurite {
            child,
            ports: [ports[0], ports[1], ports[2]],
            dir,
        };
        // Ready when all three ports accept connections (60 s at most).
        for _ in 0..600 {
            if azurite.child.try_wait().ok().flatten().is_some() {
                break;
            }
            if azurite
                .ports
                .iter()
                .all(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_ok())
            {
                return Some(azurite);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(azurite.dir.join("azurite.log")).unwrap_or_default();
        panic!("the OAuth Azurite did not start; its log:\n{log}");
    }

    fn account(&self, credential: Credential) -> Account {
        let [blob, queue, table] = self.ports;
        Account::from_connection_string(&format!(
            "AccountName=devstoreaccount1;\
             TableEndpoint=https://127.0.0.1:{table}/devstoreaccount1;\
             QueueEndpoint=https://127.0.0.1:{queue}/devstoreaccount1;\
             BlobEndpoint=https://127.0.0.1:{blob}/devstoreaccount1"
        ))
        .unwrap()
        .with_credential(credential)
    }
}

fn trusting_the_test_ca() -> ClientOptions {
    let mut options = options();
    let ca = std::fs::read(format!("{TESTDATA}/ca.der")).unwrap();
    options
        .http
        .root_certificates
        .push(RootCertificate::from_der(ca));
    options
}

/// A JWT as Entra ID shapes one (Azurite's basic mode reads the claims and
/// does not check the signature).
fn jwt(audience: &str, expires: DateTime<Utc>) -> String {
    let b64 = |v: &serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let issued = Utc::now().timestamp() - 300;
    let header = serde_json::json!({"typ": "JWT", "alg": "RS256"});
    let claims = serde_json::json!({
        "aud": audience,
        "iss": "https://sts.windows.net/ab1f708d-50f6-404c-a006-d71b2ac7a606/",
        "iat": issued,
        "nbf": issued,
        "exp": expires.timestamp(),
        "tid": "ab1f708d-50f6-404c-a006-d71b2ac7a606",
    });
    format!("{}.{}.c2lnbmF0dXJl", b64(&header), b64(&claims))
}

/// Mints JWTs locally: the audience is set per test, and the next token's
/// `exp` (as Azurite sees it) may differ from the expiry it reports (as the
/// cache sees it), to stand for a token that expired early.
#[derive(Debug)]
struct Minted {
    audience: Mutex<String>,
    /// (`exp` in the JWT, expiry reported) of the next token; `None`: an hour from now, both.
    next: Mutex<Option<(DateTime<Utc>, DateTime<Utc>)>>,
    calls: AtomicUsize,
}

impl Minted {
    fn new(audience: &str) -> Arc<Minted> {
        Arc::new(Minted {
            audience: Mutex::new(audience.to_owned()),
            next: Mutex::new(None),
            calls: AtomicUsize::new(0),
        })
    }
}

#[async_trait::async_trait]
impl TokenCredential for Minted {
    async fn get_token(&self, _: &TokenRequest) -> tablekit::Result<AccessToken> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let hour = Utc::now() + chrono::Duration::hours(1);
        let (exp, reported) = self.next.lock().unwrap().take().unwrap_or((hour, hour));
        Ok(AccessToken::new(
            jwt(&self.audience.lock().unwrap(), exp),
            reported,
        ))
    }
}

/// One Azurite for the three cases (starting one takes seconds of CPU).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azurite_in_oauth_mode() {
    let Some(azurite) = OAuthAzurite::start() else {
        return;
    };
    takes_entra_tokens_for_tables_queues_and_blobs(&azurite).await;
    refuses_an_expired_token_and_the_cache_refreshes_it(&azurite).await;
    refuses_a_token_for_the_wrong_audience_with_a_clear_error(&azurite).await;
}

async fn takes_entra_tokens_for_tables_queues_and_blobs(azurite: &OAuthAzurite) {
    let minted = Minted::new("https://storage.azure.com");
    let account = azurite.account(Credential::Bearer(EntraCredential::from_arc(
        minted.clone(),
    )));

    let tables = TableServiceClient::with_options(account.clone(), trusting_the_test_ca()).unwrap();
    let table = tables.table::<DynamicEntity>("OAuthTable").unwrap();
    table.create_table().await.unwrap();
    table
        .insert(&DynamicEntity::new("p", "r").with("N", 7))
        .await
        .unwrap();
    let back = table.get(("p", "r")).await.unwrap().expect("stored");
    assert_eq!(back.get("N").and_then(|v| v.as_i32()), Some(7));

    let queue = QueueServiceClient::with_options(account.clone(), trusting_the_test_ca())
        .unwrap()
        .queue("oauth-jobs")
        .unwrap();
    queue.create_queue().await.unwrap();
    queue.send("hello").send().await.unwrap();
    let got = queue.receive().send().await.unwrap();
    assert_eq!(got[0].body(), b"hello");

    let blob = BlobServiceClient::with_options(account.clone(), trusting_the_test_ca())
        .unwrap()
        .container("oauth-photos")
        .unwrap();
    blob.create_container().await.unwrap();
    let photo = blob.blob("a.bin").unwrap();
    photo.upload(vec![1u8, 2, 3]).await.unwrap();
    assert_eq!(&photo.download().bytes().await.unwrap()[..], [1, 2, 3]);

    // One token served every client of the account: one scope, one cache.
    assert_eq!(minted.calls.load(Ordering::SeqCst), 1);
}

async fn refuses_an_expired_token_and_the_cache_refreshes_it(azurite: &OAuthAzurite) {
    let clock = ManualClock::starting_now();
    let minted = Minted::new("https://storage.azure.com");
    // The first token has already expired for the service, while the
    // credential claims an hour: the request is refused.
    *minted.next.lock().unwrap() = Some((
        Utc::now() - chrono::Duration::minutes(10),
        clock.now() + chrono::Duration::hours(1),
    ));
    let entra = EntraCredential::from_arc(minted.clone()).with_clock(clock.clone());
    let tables = TableServiceClient::with_options(
        azurite.account(Credential::Bearer(entra)),
        trusting_the_test_ca(),
    )
    .unwrap();
    let e = tables.create_table("Expired").await.unwrap_err();
    assert_eq!(e.status(), Some(403), "{e}");
    assert!(e.to_string().contains("AuthenticationFailed"), "{e}");
    // The service's own reason (its AuthenticationErrorDetail) is kept.
    assert!(e.to_string().contains("The token is expired."), "{e}");

    // Once the cache's clock says the token has expired, the next request
    // gets a new one, and the service takes it.
    clock.advance(Duration::from_secs(2 * 3600));
    tables.create_table("Expired").await.unwrap();
    assert_eq!(minted.calls.load(Ordering::SeqCst), 2);
}

async fn refuses_a_token_for_the_wrong_audience_with_a_clear_error(azurite: &OAuthAzurite) {
    // A Cosmos DB token sent to a storage account.
    let minted = Minted::new("https://cosmos.azure.com");
    let account = azurite.account(Credential::Bearer(EntraCredential::from_arc(minted)));
    let tables = TableServiceClient::with_options(account.clone(), trusting_the_test_ca()).unwrap();
    let e = tables.create_table("WrongAudience").await.unwrap_err();
    assert_eq!(e.status(), Some(403), "{e}");
    let text = e.to_string();
    assert!(text.contains("AuthenticationFailed"), "{text}");
    assert!(text.contains("Invalid token audience."), "{text}");
    assert!(
        text.contains(&format!(
            "the bearer token for scope {STORAGE_SCOPE} was refused: check that the scope (audience) matches the target"
        )),
        "{text}"
    );
    let blobs = BlobServiceClient::with_options(account, trusting_the_test_ca()).unwrap();
    let e = blobs
        .container("wrong-audience")
        .unwrap()
        .create_container()
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(403), "{e}");
    assert!(e.to_string().contains("bearer token for scope"), "{e}");
    // The blob service's XML error keeps its reason too.
    assert!(e.to_string().contains("Invalid token audience."), "{e}");
}
