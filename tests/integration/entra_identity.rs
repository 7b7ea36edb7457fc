//! Microsoft Entra ID end to end, with a credential of the official identity
//! crate: `azure_identity::ClientSecretCredential`, plugged in with
//! `Credential::entra` as the README shows, gets its tokens from a token
//! endpoint of this test's own (an Entra ID authority on a loopback port, over
//! TLS with the test CA of `tablekit/src/backend/http/transport/testdata`:
//! azure_identity takes only `https` authority hosts), and tablekit sends them
//! as `Authorization: Bearer` to a scripted table service (`scripted`).
//!
//! Covered: the token request the credential sends (tenant, client id and
//! secret, scope per target); the bearer on the table request; the cache (a
//! second request fetches nothing) and the refresh before expiry (a token near
//! its end is replaced, on a manual clock: no sleeps); the `401` challenge
//! paths (another tenant, a claims challenge, an audience not configured) and
//! what they come to with a credential that takes its tenant when built; a
//! `403` that keeps the service's own reason; a token endpoint that refuses
//! the secret. Throughout, neither a token nor the client secret shows in any
//! `Debug` output, error or `tracing` record.
//!
//! azure_identity is used without its default features (which bring reqwest's
//! TLS stack of their own): its HTTP client here is reqwest through
//! azure_core's `HttpClient` trait ([`OverReqwest`]), trusting the test CA.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use azure_core::http::{headers::Headers, AsyncRawResponse, HttpClient};
use tablekit::account::{EntraCredential, Target, COSMOS_SCOPE, STORAGE_SCOPE};
use tablekit::clock::ManualClock;
use tablekit::options::{ClientOptions, RetryPolicy};
use tablekit::{Account, Credential, DynamicEntity, TableServiceClient};
use tablekit_test_support::Recorder;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

use crate::scripted::{self, answer, Seen};

const TESTDATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tablekit/src/backend/http/transport/testdata"
);

/// Every secret of this file holds this text: a record that shows it leaked one.
const MARK: &str = "SECRET";
const CLIENT_SECRET: &str = "client-SECRET-4f1c";
const TENANT: &str = "tenant-a";
const CLIENT_ID: &str = "0b5f0a8e-1c1d-4d55-9c85-5f8a1e2b7c31";

/// One token request as the authority read it.
#[derive(Debug, Clone)]
struct Asked {
    path: String,
    form: Vec<(String, String)>,
}

impl Asked {
    fn get(&self, name: &str) -> Option<&str> {
        self.form
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The tenant of `/{tenant}/oauth2/v2.0/token`.
    fn tenant(&self) -> &str {
        self.path
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or("")
    }
}

/// An Entra ID authority on a loopback port over TLS: each token request gets
/// `tok{n}-{tenant}-SECRET`, valid for `expires_in` seconds, or (while
/// `refuse` is set) the answer Entra ID gives to a wrong client secret.
#[derive(Clone)]
struct Authority {
    host: String,
    asked: Arc<Mutex<Vec<Asked>>>,
    expires_in: Arc<AtomicI64>,
    refuse: Arc<AtomicBool>,
}

impl Authority {
    async fn start(expires_in: i64) -> Authority {
        let cert = rustls::pki_types::CertificateDer::from(
            std::fs::read(format!("{TESTDATA}/server.der")).unwrap(),
        );
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
            std::fs::read(format!("{TESTDATA}/server.key.der"))
                .unwrap()
                .into(),
        );
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let authority = Authority {
            host: format!("https://127.0.0.1:{port}"),
            asked: Arc::default(),
            expires_in: Arc::new(AtomicI64::new(expires_in)),
            refuse: Arc::default(),
        };
        let served = authority.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let (acceptor, served) = (acceptor.clone(), served.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(sock).await else {
                        return;
                    };
                    let Some((line, body)) = read_request(&mut tls).await else {
                        return;
                    };
                    let reply = served.answer(&line, &body);
                    let _ = tls.write_all(reply.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        authority
    }

    fn answer(&self, line: &str, body: &[u8]) -> String {
        let path = line.split(' ').nth(1).unwrap_or("").to_owned();
        let form = url::form_urlencoded::parse(body).into_owned().collect();
        let asked = Asked { path, form };
        let tenant = asked.tenant().to_owned();
        let n = {
            let mut all = self.asked.lock().unwrap();
            all.push(asked);
            all.len()
        };
        let (status, json) = if self.refuse.load(Ordering::SeqCst) {
            (
                "400 Bad Request",
                serde_json::json!({
                    "error": "invalid_client",
                    "error_description": "AADSTS7000215: Invalid client secret provided.",
                    "error_codes": [7000215],
                }),
            )
        } else {
            let expires_in = self.expires_in.load(Ordering::SeqCst);
            (
                "200 OK",
                serde_json::json!({
                    "token_type": "Bearer",
                    "expires_in": expires_in,
                    "ext_expires_in": expires_in,
                    "access_token": format!("tok{n}-{tenant}-{MARK}"),
                }),
            )
        };
        let json = json.to_string();
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{json}",
            json.len()
        )
    }

    fn asked(&self) -> Vec<Asked> {
        self.asked.lock().unwrap().clone()
    }

    /// `ClientSecretCredential` of tenant `tenant-a`, with this authority as
    /// its cloud's and reqwest trusting the test CA as its HTTP client.
    fn credential(&self) -> Arc<azure_identity::ClientSecretCredential> {
        let mut cloud = azure_core::cloud::CustomConfiguration::default();
        cloud.authority_host = self.host.clone();
        let options = azure_identity::ClientSecretCredentialOptions {
            client_options: azure_core::http::ClientOptions {
                transport: Some(azure_core::http::Transport::new(Arc::new(
                    OverReqwest::trusting_the_test_ca(),
                ))),
                cloud: Some(Arc::new(cloud.into())),
                retry: azure_core::http::RetryOptions::none(),
                ..Default::default()
            },
        };
        azure_identity::ClientSecretCredential::new(
            TENANT,
            CLIENT_ID.to_owned(),
            CLIENT_SECRET.into(),
            Some(options),
        )
        .unwrap()
    }

    /// The credential as tablekit holds it ([`Credential::entra`]), its cache
    /// reading `clock`.
    fn entra(&self, clock: &ManualClock) -> Credential {
        let Credential::Bearer(entra) = Credential::entra(self.credential()) else {
            panic!("Credential::entra is a bearer credential");
        };
        Credential::Bearer(entra.with_clock(clock.clone()))
    }
}

/// A request's line and body (`Content-Length` framed).
async fn read_request(sock: &mut (impl AsyncRead + Unpin)) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let line = head.lines().next()?.to_owned();
            return Some((line, buf[end + 4..end + 4 + len].to_vec()));
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// azure_core's HTTP client seam on reqwest, trusting the test CA.
#[derive(Debug)]
struct OverReqwest(reqwest::Client);

impl OverReqwest {
    fn trusting_the_test_ca() -> OverReqwest {
        let ca = std::fs::read(format!("{TESTDATA}/ca.der")).unwrap();
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_der(&ca).unwrap())
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        OverReqwest(client)
    }
}

#[async_trait::async_trait]
impl HttpClient for OverReqwest {
    async fn execute_request(
        &self,
        request: &azure_core::http::Request,
    ) -> azure_core::Result<AsyncRawResponse> {
        use azure_core::error::ErrorKind;
        use azure_core::http::{Body, Method};
        let method = match request.method() {
            Method::Post => reqwest::Method::POST,
            Method::Get => reqwest::Method::GET,
            other => {
                return Err(azure_core::Error::with_message(
                    ErrorKind::Other,
                    format!("the test client sends no {other:?}"),
                ))
            }
        };
        let mut builder = self.0.request(method, request.url().as_str());
        for (name, value) in request.headers().iter() {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let Body::Bytes(body) = request.body() else {
            return Err(azure_core::Error::with_message(
                ErrorKind::Other,
                "the test client sends no streams",
            ));
        };
        let response =
            builder.body(body.clone()).send().await.map_err(|e| {
                azure_core::Error::with_error(ErrorKind::Io, e, "the request failed")
            })?;
        let status = response.status().as_u16();
        let mut headers = Headers::new();
        for (name, value) in response.headers() {
            if let Ok(value) = value.to_str() {
                headers.insert(name.as_str().to_owned(), value.to_owned());
            }
        }
        let bytes = response
            .bytes()
            .await
            .map_err(|e| azure_core::Error::with_error(ErrorKind::Io, e, "the body failed"))?;
        Ok(AsyncRawResponse::from_bytes(status.into(), headers, bytes))
    }
}

fn options() -> ClientOptions {
    let mut options = crate::common::client_options();
    options.http.retry = RetryPolicy::none();
    options.http.timeout = Duration::from_secs(20);
    options
}

fn account(endpoint: &str, credential: Credential) -> Account {
    Account::from_connection_string(&format!(
        "AccountName=devstoreaccount1;TableEndpoint={endpoint}"
    ))
    .unwrap()
    .with_credential(credential)
}

fn bearers(seen: &Arc<Mutex<Vec<Seen>>>) -> Vec<String> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|s| s.header("authorization").unwrap_or("").to_owned())
        .collect()
}

/// A table service that answers every request `204` with an ETag.
async fn accepting() -> (String, Arc<Mutex<Vec<Seen>>>) {
    scripted::serve(Arc::new(|_, _| {
        answer(
            "204 No Content",
            &[("ETag", "W/\"datetime'2026-11-26T10%3A00%3A00.1234567Z'\"")],
            "",
        )
    }))
    .await
}

/// Runs `test` on a runtime of its own with every `tracing` record kept, and
/// checks that no record holds a secret.
fn without_leaks<F: std::future::Future<Output = ()>>(test: impl FnOnce() -> F) {
    let recorder = Recorder::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(recorder.clone(), || rt.block_on(test()));
    let events = recorder.events();
    let spans = recorder.spans();
    assert!(
        !events.is_empty() || !spans.is_empty(),
        "the recorder saw the requests"
    );
    for fields in events.iter().chain(spans.iter().map(|(_, f)| f)) {
        for (name, value) in fields {
            assert!(
                !value.contains(MARK),
                "a secret in a tracing record: {name} = {value}"
            );
        }
    }
}

/// `Debug` and `Display` of everything the user holds, without a secret.
fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(MARK), "a secret in {what}: {text}");
}

#[test]
fn a_client_secret_credential_fetches_caches_and_refreshes_the_bearer_token() {
    without_leaks(|| async {
        // Four minutes: azure_identity refreshes tokens that end within five
        // minutes, so it asks the authority each time tablekit asks it, and
        // the authority sees tablekit's cache at work.
        let authority = Authority::start(240).await;
        let (endpoint, seen) = accepting().await;
        let clock = ManualClock::starting_now();
        let credential = authority.entra(&clock);
        let svc =
            TableServiceClient::with_options(account(&endpoint, credential.clone()), options())
                .unwrap();

        svc.create_table("Tokens").await.unwrap();
        let asked = authority.asked();
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert_eq!(asked[0].path, format!("/{TENANT}/oauth2/v2.0/token"));
        assert_eq!(asked[0].get("grant_type"), Some("client_credentials"));
        assert_eq!(asked[0].get("client_id"), Some(CLIENT_ID));
        assert_eq!(asked[0].get("client_secret"), Some(CLIENT_SECRET));
        assert_eq!(asked[0].get("scope"), Some(STORAGE_SCOPE));
        assert_eq!(bearers(&seen), [format!("Bearer tok1-{TENANT}-{MARK}")]);

        // Cached: the next requests fetch nothing.
        let table = svc.table::<DynamicEntity>("Tokens").unwrap();
        table
            .insert(&DynamicEntity::new("p", "r1").with("N", 1))
            .await
            .unwrap();
        clock.advance(Duration::from_secs(119));
        table
            .insert(&DynamicEntity::new("p", "r2").with("N", 2))
            .await
            .unwrap();
        assert_eq!(authority.asked().len(), 1, "one token for three requests");

        // Past half its four minutes the token is refreshed, while still valid.
        clock.advance(Duration::from_secs(2));
        table
            .insert(&DynamicEntity::new("p", "r3").with("N", 3))
            .await
            .unwrap();
        assert_eq!(authority.asked().len(), 2, "refreshed before it expired");
        assert_eq!(
            bearers(&seen),
            [1, 1, 1, 2].map(|n| format!("Bearer tok{n}-{TENANT}-{MARK}"))
        );

        for (what, text) in [
            ("Debug of the credential", format!("{credential:?}")),
            ("Debug of the client", format!("{svc:?}")),
            ("Debug of the table", format!("{table:?}")),
            (
                "Debug of the account",
                format!("{:?}", account(&endpoint, credential.clone())),
            ),
        ] {
            assert_no_secret(what, &text);
        }
    });
}

#[test]
fn the_scope_asked_for_follows_the_target() {
    without_leaks(|| async {
        let authority = Authority::start(3600).await;
        let (endpoint, seen) = accepting().await;
        let clock = ManualClock::starting_now();
        let cosmos = account(&endpoint, authority.entra(&clock)).with_target(Target::CosmosDb);
        TableServiceClient::with_options(cosmos, options())
            .unwrap()
            .create_table("Cosmic")
            .await
            .unwrap();
        let asked = authority.asked();
        assert_eq!(asked[0].get("scope"), Some(COSMOS_SCOPE));
        assert_eq!(bearers(&seen).len(), 1);
    });
}

#[test]
fn a_token_cached_for_an_hour_is_asked_for_once() {
    without_leaks(|| async {
        // Both caches hold it: tablekit's until five minutes before its end,
        // azure_identity's too.
        let authority = Authority::start(3600).await;
        let (endpoint, seen) = accepting().await;
        let clock = ManualClock::starting_now();
        let table = TableServiceClient::with_options(
            account(&endpoint, authority.entra(&clock)),
            options(),
        )
        .unwrap()
        .table::<DynamicEntity>("Hour")
        .unwrap();
        for i in 0..5 {
            table
                .insert(&DynamicEntity::new("p", format!("r{i}")))
                .await
                .unwrap();
            clock.advance(Duration::from_secs(600));
        }
        assert_eq!(authority.asked().len(), 1);
        assert!(bearers(&seen)
            .iter()
            .all(|b| *b == format!("Bearer tok1-{TENANT}-{MARK}")));
    });
}

const OTHER_TENANT: &str = "Bearer authorization_uri=https://login.microsoftonline.com/tenant-b/oauth2/authorize resource_id=https://storage.azure.com";
const CAE: &str = "Bearer realm=\"\", authorization_uri=\"https://login.microsoftonline.com/common/oauth2/authorize\", error=\"insufficient_claims\", claims=\"eyJhY2Nlc3NfdG9rZW4iOnsibmJmIjp7ImVzc2VudGlhbCI6dHJ1ZSwidmFsdWUiOiIxNzI2MDc3NTk1In19fQ==\"";

/// A table service that answers the first request `401` with `challenge`,
/// then `204`.
async fn challenging(challenge: &'static str) -> (String, Arc<Mutex<Vec<Seen>>>) {
    scripted::serve(Arc::new(move |n, _| match n {
        0 => answer(
            "401 Unauthorized",
            &[
                ("WWW-Authenticate", challenge),
                ("x-ms-error-code", "InvalidAuthenticationInfo"),
            ],
            r#"{"odata.error":{"code":"InvalidAuthenticationInfo","message":{"lang":"en-US","value":"Server failed to authenticate the request. Please refer to the information in the www-authenticate header."}}}"#,
        ),
        _ => answer("204 No Content", &[], ""),
    }))
    .await
}

#[test]
fn a_challenge_the_credential_answers_with_the_same_token_is_not_sent_again() {
    // azure_identity's credentials keep the tenant they were built with, and
    // azure_core 1.x passes no claims: asked again, the credential gives back
    // its cached token, the one the service refused. tablekit does not send it
    // again, and says why.
    without_leaks(|| async {
        for (challenge, asked_for) in [
            (OTHER_TENANT, "a token of tenant tenant-b"),
            (CAE, "a token with the claims it named"),
        ] {
            let authority = Authority::start(3600).await;
            let (endpoint, seen) = challenging(challenge).await;
            let clock = ManualClock::starting_now();
            let svc = TableServiceClient::with_options(
                account(&endpoint, authority.entra(&clock)),
                options(),
            )
            .unwrap();
            let e = svc.create_table("Challenged").await.unwrap_err();
            assert!(e.is_credential_error(), "{e}");
            let text = e.to_string();
            assert!(text.contains(asked_for), "{text}");
            assert!(text.contains("gave the same token again"), "{text}");
            assert_no_secret("the error", &text);
            assert_no_secret("the error's Debug", &format!("{e:?}"));
            assert_eq!(seen.lock().unwrap().len(), 1, "not sent again");
            // The credential was asked, and kept its own tenant.
            let asked = authority.asked();
            assert_eq!(asked.len(), 1, "azure_identity answered from its cache");
            assert_eq!(asked[0].tenant(), TENANT);

            // The next call goes out with the credential's token as it is.
            svc.create_table("Challenged").await.unwrap();
            assert_eq!(seen.lock().unwrap().len(), 2);
        }
    });
}

#[test]
fn a_challenge_is_answered_once_with_a_fresh_token_from_the_authority() {
    // A short-lived token: azure_identity asks its authority again, and the
    // request is sent once more with the new token.
    without_leaks(|| async {
        for challenge in [OTHER_TENANT, CAE] {
            let authority = Authority::start(240).await;
            let (endpoint, seen) = challenging(challenge).await;
            let clock = ManualClock::starting_now();
            TableServiceClient::with_options(
                account(&endpoint, authority.entra(&clock)),
                options(),
            )
            .unwrap()
            .create_table("Challenged")
            .await
            .unwrap();
            assert_eq!(
                bearers(&seen),
                [1, 2].map(|n| format!("Bearer tok{n}-{TENANT}-{MARK}"))
            );
            let asked = authority.asked();
            assert_eq!(asked.len(), 2);
            // azure_identity asks the tenant it was built with, whatever the
            // challenge named (tablekit's own TokenCredential receives it:
            // see `entra::a_bearer_challenge_naming_a_tenant_is_answered_once_with_its_token`).
            assert!(asked.iter().all(|a| a.tenant() == TENANT), "{asked:?}");
            let seen = seen.lock().unwrap();
            assert_eq!(seen[0].body, seen[1].body, "the same request, signed again");
        }
    });
}

#[test]
fn a_service_that_keeps_challenging_gets_one_retry() {
    without_leaks(|| async {
        let authority = Authority::start(240).await;
        let (endpoint, seen) = scripted::serve(Arc::new(|_, _| {
            answer(
                "401 Unauthorized",
                &[("WWW-Authenticate", OTHER_TENANT)],
                r#"{"odata.error":{"code":"InvalidAuthenticationInfo","message":{"lang":"en-US","value":"Server failed to authenticate the request."}}}"#,
            )
        }))
        .await;
        let clock = ManualClock::starting_now();
        let e = TableServiceClient::with_options(
            account(&endpoint, authority.entra(&clock)),
            options(),
        )
        .unwrap()
        .create_table("Loop")
        .await
        .unwrap_err();
        assert_eq!(e.status(), Some(401), "{e}");
        let text = e.to_string();
        assert!(text.contains("bearer token for scope"), "{text}");
        assert_no_secret("the error", &text);
        assert_eq!(seen.lock().unwrap().len(), 2, "sent twice, not more");
        assert_eq!(authority.asked().len(), 2);
    });
}

#[test]
fn a_challenge_for_an_audience_not_configured_is_refused_with_a_clear_error() {
    without_leaks(|| async {
        let authority = Authority::start(240).await;
        let (endpoint, seen) = challenging(
            "Bearer authorization_uri=https://login.microsoftonline.com/tenant-b/oauth2/authorize resource_id=https://vault.example.net",
        )
        .await;
        let clock = ManualClock::starting_now();
        let e = TableServiceClient::with_options(
            account(&endpoint, authority.entra(&clock)),
            options(),
        )
        .unwrap()
        .create_table("Foreign")
        .await
        .unwrap_err();
        assert_eq!(e.status(), Some(401), "{e}");
        assert_eq!(
            e.code().map(|c| c.as_str().to_owned()).as_deref(),
            Some("InvalidAuthenticationInfo")
        );
        assert_eq!(e.request_id(), Some("scripted"));
        let text = e.to_string();
        assert!(
            text.contains("audience https://vault.example.net"),
            "{text}"
        );
        assert!(text.contains(STORAGE_SCOPE), "{text}");
        assert_no_secret("the error", &text);
        assert_eq!(seen.lock().unwrap().len(), 1, "not sent again");
        // No token was asked for the audience the challenge named.
        let asked = authority.asked();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].get("scope"), Some(STORAGE_SCOPE));
    });
}

#[test]
fn a_403_keeps_the_reason_the_service_gives() {
    without_leaks(|| async {
        let authority = Authority::start(3600).await;
        let (endpoint, _seen) = scripted::serve(Arc::new(|_, _| {
            answer(
                "403 Server failed to authenticate the request.",
                &[("x-ms-error-code", "AuthenticationFailed")],
                r#"{"odata.error":{"code":"AuthenticationFailed","message":{"lang":"en-US","value":"Server failed to authenticate the request. Make sure the value of the Authorization header is formed correctly including the signature.\nRequestId:9a1b\nTime:2026-11-26T10:00:00.0000000Z"},"AuthenticationErrorDetail":"Issuer validation failed. Issuer did not match."}}"#,
            )
        }))
        .await;
        let clock = ManualClock::starting_now();
        let e = TableServiceClient::with_options(
            account(&endpoint, authority.entra(&clock)),
            options(),
        )
        .unwrap()
        .create_table("Refused")
        .await
        .unwrap_err();
        assert_eq!(e.status(), Some(403), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("Issuer validation failed. Issuer did not match."),
            "{text}"
        );
        assert!(text.contains("bearer token for scope"), "{text}");
        assert_no_secret("the error", &text);
    });
}

#[test]
fn a_refused_client_secret_is_a_credential_error_without_the_secret() {
    without_leaks(|| async {
        let authority = Authority::start(3600).await;
        authority.refuse.store(true, Ordering::SeqCst);
        let (endpoint, seen) = accepting().await;
        let clock = ManualClock::starting_now();
        let e = TableServiceClient::with_options(
            account(&endpoint, authority.entra(&clock)),
            options(),
        )
        .unwrap()
        .create_table("NoToken")
        .await
        .unwrap_err();
        assert!(e.is_credential_error(), "{e}");
        let text = e.to_string();
        assert!(text.contains("AADSTS7000215"), "{text}");
        assert_no_secret("the error", &text);
        assert_no_secret("the error's Debug", &format!("{e:?}"));
        assert!(
            seen.lock().unwrap().is_empty(),
            "nothing sent without a token"
        );
    });
}

/// The README's way, `Credential::entra(credential)` on an account, with an
/// explicit scope set on the cache in front of it.
#[test]
fn an_explicit_scope_reaches_the_authority() {
    without_leaks(|| async {
        let authority = Authority::start(3600).await;
        let (endpoint, _seen) = accepting().await;
        let Credential::Bearer(entra) = Credential::entra(authority.credential()) else {
            panic!("a bearer credential");
        };
        let entra: EntraCredential =
            entra.with_scope("https://devstoreaccount1.table.core.windows.net/.default");
        TableServiceClient::with_options(account(&endpoint, Credential::Bearer(entra)), options())
            .unwrap()
            .create_table("Scoped")
            .await
            .unwrap();
        assert_eq!(
            authority.asked()[0].get("scope"),
            Some("https://devstoreaccount1.table.core.windows.net/.default")
        );
    });
}

/// Counts the token requests of concurrent first calls: one.
#[test]
fn concurrent_first_calls_ask_the_authority_once() {
    without_leaks(|| async {
        let authority = Authority::start(3600).await;
        let (endpoint, seen) = accepting().await;
        let clock = ManualClock::starting_now();
        let table = TableServiceClient::with_options(
            account(&endpoint, authority.entra(&clock)),
            options(),
        )
        .unwrap()
        .table::<DynamicEntity>("Herd")
        .unwrap();
        let done = AtomicUsize::new(0);
        futures::future::join_all((0..8).map(|i| {
            let (table, done) = (&table, &done);
            async move {
                table
                    .insert(&DynamicEntity::new("p", format!("r{i}")))
                    .await
                    .unwrap();
                done.fetch_add(1, Ordering::SeqCst);
            }
        }))
        .await;
        assert_eq!(done.load(Ordering::SeqCst), 8);
        assert_eq!(authority.asked().len(), 1);
        assert_eq!(seen.lock().unwrap().len(), 8);
    });
}
