//! Bearer tokens: `Authorization: Bearer <JWT>`, checked against the
//! [`BearerConfig`] the server was given.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD as BASE64URL;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac as _};
use http::request::Parts;
use sha2::{Digest as _, Sha256};

use super::super::{AccountState, Failure};
use super::Access;
use crate::error::{Error, Result};

/// The audience of Azure Storage's tokens.
const STORAGE_AUDIENCE: &str = "https://storage.azure.com";

/// How far `exp` and `nbf` may be off.
const SKEW_SECONDS: i64 = 5 * 60;

/// How the server checks bearer tokens (`Authorization: Bearer <JWT>`, as
/// Microsoft Entra ID issues them): give it to
/// [`ServerBuilder::bearer`](super::super::ServerBuilder::bearer). Without
/// one, the server refuses every bearer token.
///
/// A token is accepted when its signature verifies with the configured key
/// (`HS256` with a shared secret, or `RS256` with an RSA public key), its
/// audience (`aud`) is one of the configured ones (by default
/// `https://storage.azure.com`, with or without a trailing `/`, and the
/// account's own endpoint on this server, `http://<host>/<account>`), its
/// issuer (`iss`) is the configured one if one is set, and it is within its
/// lifetime (`exp`, required, and `nbf`), give or take five minutes. A valid
/// token gives full access to the account: roles (RBAC) are not modelled.
/// Refused tokens are answered 401 `InvalidAuthenticationInfo` with the
/// service's `WWW-Authenticate: Bearer authorization_uri=…
/// resource_id=https://storage.azure.com` challenge.
///
/// ```
/// use tablekit::server::{BearerConfig, Server};
///
/// let bearer = BearerConfig::hs256(b"a secret the test token issuer shares".to_vec())
///     .issuer("https://sts.windows.net/my-tenant/")
///     .tenant("my-tenant");
/// let builder = Server::builder().ports(0, 0, 0).bearer(bearer);
/// # let _ = builder;
/// ```
///
/// `Debug` shows neither the secret nor the key.
#[derive(Clone)]
pub struct BearerConfig {
    key: Key,
    audiences: Option<Vec<String>>,
    issuer: Option<String>,
    tenant: String,
}

#[derive(Clone)]
enum Key {
    Hs256(Hmac<Sha256>),
    Rs256(Box<rsa::RsaPublicKey>),
}

impl fmt::Debug for BearerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerConfig")
            .field(
                "key",
                &match self.key {
                    Key::Hs256(_) => "HS256(***)",
                    Key::Rs256(_) => "RS256(public key)",
                },
            )
            .field("audiences", &self.audiences)
            .field("issuer", &self.issuer)
            .field("tenant", &self.tenant)
            .finish()
    }
}

impl BearerConfig {
    /// Tokens signed with HMAC-SHA256 (`alg: HS256`) keyed with `secret`.
    pub fn hs256(secret: impl AsRef<[u8]>) -> Self {
        // HMAC takes keys of any length.
        let mac = Hmac::<Sha256>::new_from_slice(secret.as_ref())
            .expect("HMAC-SHA256 accepts keys of any length");
        BearerConfig::with_key(Key::Hs256(mac))
    }

    /// Tokens signed with RSASSA-PKCS1-v1_5 and SHA-256 (`alg: RS256`),
    /// verified with the RSA public key `pem` (`BEGIN PUBLIC KEY` or
    /// `BEGIN RSA PUBLIC KEY`).
    ///
    /// # Errors
    ///
    /// A configuration error if `pem` is not an RSA public key in PEM.
    pub fn rs256_pem(pem: &str) -> Result<Self> {
        use rsa::pkcs1::DecodeRsaPublicKey as _;
        use rsa::pkcs8::DecodePublicKey as _;
        let key = rsa::RsaPublicKey::from_public_key_pem(pem)
            .or_else(|_| rsa::RsaPublicKey::from_pkcs1_pem(pem))
            .map_err(|_| Error::config("the bearer key is not an RSA public key in PEM"))?;
        Ok(BearerConfig::with_key(Key::Rs256(Box::new(key))))
    }

    fn with_key(key: Key) -> Self {
        BearerConfig {
            key,
            audiences: None,
            issuer: None,
            tenant: "common".to_owned(),
        }
    }

    /// Accepts tokens for `audience` too; the first call replaces the
    /// defaults (`https://storage.azure.com` and the account's endpoint).
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.audiences
            .get_or_insert_with(Vec::new)
            .push(audience.into());
        self
    }

    /// Accepts only tokens issued by `issuer` (`iss`, compared exactly).
    /// Without it, any issuer.
    pub fn issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// The tenant the challenge of a refused token names
    /// (`authorization_uri=https://login.microsoftonline.com/<tenant>/oauth2/authorize`);
    /// `common` by default.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = tenant.into();
        self
    }

    /// Whether `aud` is an audience this server accepts for `account`,
    /// reached through `host`.
    fn accepts_audience(&self, aud: &str, account: &str, host: &str) -> bool {
        let aud = aud.trim_end_matches('/');
        match &self.audiences {
            Some(list) => list.iter().any(|a| a.trim_end_matches('/') == aud),
            None => {
                aud == STORAGE_AUDIENCE
                    || (!host.is_empty()
                        && (aud == format!("http://{host}/{account}")
                            || aud == format!("https://{host}/{account}")))
            }
        }
    }

    /// Whether `signature` signs `signed` (`header.payload`) with the key,
    /// for the token's `alg`.
    fn verifies(&self, alg: &str, signed: &str, signature: &[u8]) -> bool {
        match (&self.key, alg) {
            (Key::Hs256(mac), "HS256") => {
                let mut mac = mac.clone();
                mac.update(signed.as_bytes());
                mac.verify_slice(signature).is_ok()
            }
            (Key::Rs256(key), "RS256") => {
                // The DER DigestInfo of SHA-256 before the hash, as
                // PKCS #1 v1.5 signs it.
                const SHA256_PREFIX: [u8; 19] = [
                    0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04,
                    0x02, 0x01, 0x05, 0x00, 0x04, 0x20,
                ];
                let mut hashed = SHA256_PREFIX.to_vec();
                hashed.extend_from_slice(&Sha256::digest(signed.as_bytes()));
                key.verify(rsa::Pkcs1v15Sign::new_unprefixed(), &hashed, signature)
                    .is_ok()
            }
            _ => false,
        }
    }
}

/// The `WWW-Authenticate` challenge of a 401 answer.
pub(crate) fn challenge(config: Option<&BearerConfig>) -> String {
    let tenant = config.map_or("common", |c| c.tenant.as_str());
    format!(
        "Bearer authorization_uri=https://login.microsoftonline.com/{tenant}/oauth2/authorize \
         resource_id={STORAGE_AUDIENCE}"
    )
}

/// A refused token: 401 `InvalidAuthenticationInfo` with `detail`.
fn refused(detail: &str) -> Failure {
    Failure {
        detail: Some(detail.to_owned()),
        ..Failure::new(
            401,
            "InvalidAuthenticationInfo",
            "Server failed to authenticate the request. Please refer to the information in the \
             www-authenticate header.",
        )
    }
}

/// Checks the bearer `token` of a request to `account`.
pub(super) fn verify(
    config: Option<&BearerConfig>,
    account: &AccountState,
    parts: &Parts,
    token: &str,
    now: DateTime<Utc>,
) -> std::result::Result<Access, Failure> {
    let Some(config) = config else {
        return Err(refused(
            "Bearer tokens are not accepted: the server was started without a BearerConfig.",
        ));
    };
    let mut pieces = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (pieces.next(), pieces.next(), pieces.next(), pieces.next())
    else {
        return Err(refused("The token is not a JWT (three base64url parts)."));
    };
    let json = |part: &str| -> Option<serde_json::Value> {
        serde_json::from_slice(&BASE64URL.decode(part).ok()?).ok()
    };
    let (Some(header_json), Some(claims)) = (json(header), json(payload)) else {
        return Err(refused(
            "The token's header or claims are not base64url JSON.",
        ));
    };
    let alg = header_json
        .get("alg")
        .and_then(|a| a.as_str())
        .unwrap_or("");
    let signature = BASE64URL
        .decode(signature)
        .map_err(|_| refused("Signature validation failed."))?;
    let signed = &token[..header.len() + 1 + payload.len()];
    if !config.verifies(alg, signed, &signature) {
        return Err(refused("Signature validation failed."));
    }
    let skew = chrono::Duration::seconds(SKEW_SECONDS);
    let time = |name: &str| {
        claims
            .get(name)
            .and_then(|v| v.as_i64())
            .and_then(|s| DateTime::from_timestamp(s, 0))
    };
    let Some(exp) = time("exp") else {
        return Err(refused(
            "Lifetime validation failed. The token has no expiry.",
        ));
    };
    if now - skew >= exp {
        return Err(refused("Lifetime validation failed. The token is expired."));
    }
    if time("nbf").is_some_and(|nbf| now + skew < nbf) {
        return Err(refused(
            "Lifetime validation failed. The token is not yet valid.",
        ));
    }
    let host = parts
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let audience_ok = match claims.get("aud") {
        Some(serde_json::Value::String(a)) => config.accepts_audience(a, &account.name, host),
        Some(serde_json::Value::Array(list)) => list.iter().any(|a| {
            a.as_str()
                .is_some_and(|a| config.accepts_audience(a, &account.name, host))
        }),
        _ => false,
    };
    if !audience_ok {
        return Err(refused(
            "Audience validation failed. Audience did not match.",
        ));
    }
    if let Some(issuer) = &config.issuer {
        if claims.get("iss").and_then(|i| i.as_str()) != Some(issuer.as_str()) {
            return Err(refused("Issuer validation failed. Issuer did not match."));
        }
    }
    Ok(Access::Full)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hs256_token(secret: &[u8], claims: serde_json::Value) -> String {
        let header = BASE64URL.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let payload = BASE64URL.encode(claims.to_string());
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(format!("{header}.{payload}").as_bytes());
        let sig = BASE64URL.encode(mac.finalize().into_bytes());
        format!("{header}.{payload}.{sig}")
    }

    fn account() -> AccountState {
        AccountState::open(
            "devstoreaccount1",
            crate::account::AccountKey::from_base64(super::super::super::DEV_KEY).unwrap(),
            None,
            crate::clock::Clock::System,
        )
        .unwrap()
    }

    fn parts() -> Parts {
        http::Request::get("http://127.0.0.1:10002/devstoreaccount1/Tables")
            .header("host", "127.0.0.1:10002")
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn an_hs256_token_is_checked_for_signature_lifetime_audience_and_issuer() {
        let now = Utc::now();
        let secret = b"shared secret";
        let config = BearerConfig::hs256(secret).issuer("https://issuer.test/");
        let claims = |aud: &str, iss: &str, exp: i64| serde_json::json!({ "aud": aud, "iss": iss, "exp": exp, "nbf": now.timestamp() - 10 });
        let good = claims(
            STORAGE_AUDIENCE,
            "https://issuer.test/",
            now.timestamp() + 600,
        );
        let check = |token: &str| verify(Some(&config), &account(), &parts(), token, now);
        assert!(check(&hs256_token(secret, good.clone())).is_ok());
        // The account's own endpoint, and an array of audiences.
        let own = claims(
            "http://127.0.0.1:10002/devstoreaccount1",
            "https://issuer.test/",
            now.timestamp() + 600,
        );
        assert!(check(&hs256_token(secret, own)).is_ok());
        let mut listed = good.clone();
        listed["aud"] = serde_json::json!(["https://other", "https://storage.azure.com/"]);
        assert!(check(&hs256_token(secret, listed)).is_ok());
        let detail = |token: String| check(&token).unwrap_err().detail.unwrap();
        assert!(detail(hs256_token(b"another secret", good.clone())).starts_with("Signature"));
        // One byte of the claims changed after signing.
        let token = hs256_token(secret, good.clone());
        let mut bytes = token.into_bytes();
        let i = bytes.iter().position(|b| *b == b'.').unwrap() + 3;
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        assert!(check(&String::from_utf8(bytes).unwrap()).is_err());
        let expired = claims(
            STORAGE_AUDIENCE,
            "https://issuer.test/",
            now.timestamp() - 301,
        );
        assert!(detail(hs256_token(secret, expired)).contains("expired"));
        // Within the five minutes' skew.
        let just = claims(
            STORAGE_AUDIENCE,
            "https://issuer.test/",
            now.timestamp() - 200,
        );
        assert!(check(&hs256_token(secret, just)).is_ok());
        let early = serde_json::json!({
            "aud": STORAGE_AUDIENCE, "iss": "https://issuer.test/",
            "exp": now.timestamp() + 3600, "nbf": now.timestamp() + 600,
        });
        assert!(detail(hs256_token(secret, early)).contains("not yet valid"));
        let aud = claims(
            "https://vault.azure.net",
            "https://issuer.test/",
            now.timestamp() + 600,
        );
        assert!(detail(hs256_token(secret, aud)).starts_with("Audience"));
        let iss = claims(
            STORAGE_AUDIENCE,
            "https://elsewhere/",
            now.timestamp() + 600,
        );
        assert!(detail(hs256_token(secret, iss)).starts_with("Issuer"));
        // `alg: none` and an algorithm the key is not for.
        let none = format!(
            "{}.{}.",
            BASE64URL.encode(br#"{"alg":"none"}"#),
            BASE64URL.encode(good.to_string())
        );
        assert!(check(&none).is_err());
        let err = check("not a token").unwrap_err();
        assert_eq!(
            (err.status, err.code.as_str()),
            (401, "InvalidAuthenticationInfo")
        );
        // Without a configuration every token is refused.
        let unconfigured =
            verify(None, &account(), &parts(), &hs256_token(secret, good), now).unwrap_err();
        assert_eq!(unconfigured.status, 401);
    }

    /// The public half of a throwaway 1024-bit key pair (`openssl
    /// genpkey`), and a token signed with its private half by `openssl dgst
    /// -sha256 -sign` over `header.payload` (claims: `aud`
    /// https://storage.azure.com, `iss` https://sts.windows.net/rs256-test/,
    /// `exp` 2100-01-01).
    const TEST_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----\n\
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDGOrep0Buw3dt0w/xdx9EjH1tB\n\
jdbgARP23Zlhhe2HP679omm+Ql8rizlLiZqHrpAgzmwQVom19rb21JB9GIKIErj1\n\
/566Ajwlss4CSSkfbVjBgrUq2IlvIaTuZ748lsdAVNN/7FWHyPqi0oMrz1/AXymT\n\
TfLGk/uZzsmZEW9nhwIDAQAB\n\
-----END PUBLIC KEY-----";

    const OPENSSL_RS256_TOKEN: &str = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJhdWQiOiJodHRwczovL3N0b3JhZ2UuYXp1cmUuY29tIiwiZXhwIjo0MTAyNDQ0ODAwLCJpc3MiOiJodHRwczovL3N0cy53aW5kb3dzLm5ldC9yczI1Ni10ZXN0LyJ9.QHlVQ4wVZHP6A-Qn3eM0lXPkmFcN9b7cUlIfD_MUfH2w-H2-_qtKMu-Egsj36WvURZkNPsU5mF6DuPwfgoVnL0LXqZ6tLsea8qewmKqiqEyHIoPYgwigyFmWvi7mpnPSUOVO0t5u8nREMaWlwuo8PREv7FFiWEiWooJrAzC60dY";

    #[test]
    fn an_rs256_token_verifies_with_the_public_key_only() {
        let now = Utc::now();
        let config = BearerConfig::rs256_pem(TEST_PUBLIC_KEY).unwrap();
        assert!(format!("{config:?}").contains("RS256"));
        let token = OPENSSL_RS256_TOKEN;
        assert!(verify(Some(&config), &account(), &parts(), token, now).is_ok());
        let claims = serde_json::json!({ "aud": STORAGE_AUDIENCE, "exp": now.timestamp() + 600 });
        // Claims changed after signing.
        let (signed, signature) = token.rsplit_once('.').unwrap();
        let (header, _) = signed.split_once('.').unwrap();
        let mut other = claims.clone();
        other["aud"] = serde_json::json!("https://storage.azure.com/other");
        let forged = format!(
            "{header}.{}.{signature}",
            BASE64URL.encode(other.to_string())
        );
        assert!(verify(Some(&config), &account(), &parts(), &forged, now).is_err());
        // An HS256 token keyed with the public key's text (the classic
        // algorithm confusion) is refused.
        let confused = hs256_token(TEST_PUBLIC_KEY.as_bytes(), claims);
        assert!(verify(Some(&config), &account(), &parts(), &confused, now).is_err());
    }

    #[test]
    fn configured_audiences_replace_the_defaults() {
        let config = BearerConfig::hs256(b"k").audience("api://mine");
        assert!(config.accepts_audience("api://mine/", "a", "h:1"));
        assert!(!config.accepts_audience(STORAGE_AUDIENCE, "a", "h:1"));
        let defaults = BearerConfig::hs256(b"k");
        assert!(defaults.accepts_audience("https://storage.azure.com/", "a", "h:1"));
        assert!(defaults.accepts_audience("http://h:1/a", "a", "h:1"));
        assert!(!defaults.accepts_audience("http://h:1/b", "a", "h:1"));
    }

    #[test]
    fn debug_shows_no_secret_and_the_challenge_names_the_tenant() {
        let config = BearerConfig::hs256(b"topsecret").tenant("t1");
        let shown = format!("{config:?}");
        assert!(!shown.contains("topsecret"), "{shown}");
        assert!(shown.contains("HS256(***)"), "{shown}");
        assert_eq!(
            challenge(Some(&config)),
            "Bearer authorization_uri=https://login.microsoftonline.com/t1/oauth2/authorize \
             resource_id=https://storage.azure.com"
        );
        assert!(BearerConfig::rs256_pem("not a key").is_err());
    }
}
