//! Credentials: how requests to an account prove who sends them.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use super::entra::{EntraCredential, TokenCredential};
use crate::error::{Error, Result};

/// How requests to an account are authorized.
///
/// `Debug` shows which kind of credential it is, never the secret.
#[derive(Clone)]
#[non_exhaustive]
pub enum Credential {
    /// Shared Key: each request is signed with the account key (`Authorization: SharedKey …`).
    SharedKey(AccountKey),
    /// Shared Key Lite: a shorter string-to-sign over the date and resource only
    /// (`Authorization: SharedKeyLite …`).
    SharedKeyLite(AccountKey),
    /// A shared access signature, appended to every request's query string.
    Sas(SasToken),
    /// An OAuth bearer token from Microsoft Entra ID (`Authorization: Bearer …`),
    /// from a [`TokenCredential`](super::TokenCredential) behind tablekit's
    /// token cache. Make one with [`Credential::bearer`] or, with the `entra`
    /// feature, `Credential::entra`.
    Bearer(EntraCredential),
    /// No authorization: only useful for public resources or proxies that add it.
    Anonymous,
}

impl Credential {
    /// Microsoft Entra ID tokens from `credential`, cached and refreshed by
    /// tablekit ([`EntraCredential`]); the scope follows the target (Azure
    /// Storage or the Cosmos DB Table API).
    pub fn bearer(credential: impl TokenCredential + 'static) -> Self {
        Credential::Bearer(EntraCredential::new(credential))
    }

    /// The account key, for the two credentials that hold one.
    pub(crate) fn account_key(&self) -> Option<&AccountKey> {
        match self {
            Credential::SharedKey(key) | Credential::SharedKeyLite(key) => Some(key),
            _ => None,
        }
    }

    /// The variant's name, for messages.
    pub(crate) fn kind_name(&self) -> &'static str {
        match self {
            Credential::SharedKey(_) => "SharedKey",
            Credential::SharedKeyLite(_) => "SharedKeyLite",
            Credential::Sas(_) => "Sas",
            Credential::Bearer(_) => "Bearer",
            Credential::Anonymous => "Anonymous",
        }
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::SharedKey(key) | Credential::SharedKeyLite(key) => {
                f.debug_tuple(self.kind_name()).field(key).finish()
            }
            Credential::Sas(token) => f.debug_tuple("Sas").field(token).finish(),
            // The user's TokenCredential may hold a cached token; do not trust its Debug.
            Credential::Bearer(_) => f.write_str("Bearer(***)"),
            Credential::Anonymous => f.write_str("Anonymous"),
        }
    }
}

/// A storage account key: the decoded bytes of the base64 key shown in the Azure portal.
///
/// `Debug` prints `AccountKey(***)`; there is deliberately no `Display`.
#[derive(Clone)]
pub struct AccountKey {
    /// The decoded key (the tests compare it; signing uses `mac`).
    #[cfg_attr(not(test), allow(dead_code))]
    bytes: Arc<[u8]>,
    /// HMAC-SHA256 keyed with the key, set up once and cloned per signature.
    mac: Hmac<Sha256>,
}

impl AccountKey {
    /// Decodes a base64 account key (standard alphabet, with padding).
    ///
    /// # Errors
    ///
    /// A configuration error if the text is empty or not valid base64. The message
    /// never contains the text.
    ///
    /// ```
    /// use tablekit::account::AccountKey;
    ///
    /// let key = AccountKey::from_base64("c2VjcmV0")?;
    /// assert_eq!(format!("{key:?}"), "AccountKey(***)");
    /// assert!(AccountKey::from_base64("not base64!").is_err());
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    pub fn from_base64(text: &str) -> Result<Self> {
        decode_key(text).map_err(|why| Error::config(format!("the account key {why}")))
    }

    pub(super) fn from_bytes(bytes: &[u8]) -> Self {
        AccountKey {
            bytes: Arc::from(bytes),
            // HMAC takes keys of any length; `new_from_slice` fails only for
            // fixed-size MACs.
            mac: Hmac::<Sha256>::new_from_slice(bytes)
                .expect("HMAC-SHA256 accepts keys of any length"),
        }
    }

    /// The key bytes.
    #[cfg(test)]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The key as base64, for the connection string a server prints.
    #[cfg(feature = "server")]
    pub(crate) fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.bytes)
    }

    /// HMAC-SHA256 of `message` keyed with this key, from a clone of the MAC set
    /// up at decoding: the signature of Shared Key and of a SAS.
    pub(crate) fn hmac_sha256(&self, message: &str) -> impl AsRef<[u8]> + use<> {
        let mut mac = self.mac.clone();
        mac.update(message.as_bytes());
        mac.finalize().into_bytes()
    }

    /// Whether `signature` is the HMAC-SHA256 of `message` keyed with this
    /// key, compared in constant time (`hmac`'s `verify_slice`): how the
    /// server checks a Shared Key or SAS signature.
    #[cfg(feature = "server")]
    pub(crate) fn verify_hmac_sha256(&self, message: &str, signature: &[u8]) -> bool {
        let mut mac = self.mac.clone();
        mac.update(message.as_bytes());
        mac.verify_slice(signature).is_ok()
    }
}

/// Decodes a key; the error says why without quoting the input (the `base64` crate's
/// own messages quote the offending byte).
pub(super) fn decode_key(text: &str) -> std::result::Result<AccountKey, &'static str> {
    if text.is_empty() {
        return Err("is empty");
    }
    match base64::engine::general_purpose::STANDARD.decode(text) {
        Ok(bytes) if bytes.is_empty() => Err("is empty"),
        Ok(bytes) => Ok(AccountKey::from_bytes(&bytes)),
        Err(base64::DecodeError::InvalidLength(_)) => {
            Err("is not valid base64: its length is not a multiple of 4")
        }
        Err(base64::DecodeError::InvalidPadding) => {
            Err("is not valid base64: the '=' padding is wrong")
        }
        Err(_) => Err("is not valid base64: it holds a character outside A-Z a-z 0-9 + / ="),
    }
}

impl fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccountKey(***)")
    }
}

/// A shared access signature: the query string (`sv=…&sig=…`) that authorizes requests.
///
/// Make one from a token issued elsewhere with [`SasToken::new`], or sign one for a table
/// with [`TableSas`](crate::account::TableSas). `Debug` prints `SasToken(***)`.
#[derive(Clone)]
pub struct SasToken(Arc<str>);

impl SasToken {
    /// Wraps a SAS token; a leading `?` (as copied from a SAS URL) is removed.
    ///
    /// ```
    /// use tablekit::account::SasToken;
    ///
    /// let sas = SasToken::new("?sv=2019-02-02&sig=abc");
    /// assert_eq!(sas.as_query(), "sv=2019-02-02&sig=abc");
    /// ```
    pub fn new(token: impl Into<String>) -> Self {
        let token = token.into();
        let trimmed = token.strip_prefix('?').unwrap_or(&token);
        SasToken(Arc::from(trimmed))
    }

    /// The token as a query string without the leading `?`, ready to append to a URL.
    pub fn as_query(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SasToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SasToken(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::Account;

    const KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
    const SAS: &str = "sv=2019-02-02&tn=orders&sp=r&se=2030-01-01T00%3A00%3A00Z&sig=SECRETSIG%3D";

    #[derive(Debug)]
    struct LeakyTokens {
        #[allow(dead_code)]
        token: &'static str,
    }

    #[async_trait::async_trait]
    impl TokenCredential for LeakyTokens {
        async fn get_token(
            &self,
            _: &crate::account::TokenRequest,
        ) -> Result<crate::account::AccessToken> {
            Ok(crate::account::AccessToken::new(
                self.token,
                chrono::Utc::now(),
            ))
        }
    }

    #[test]
    fn debug_never_shows_secrets() {
        let key = AccountKey::from_base64(KEY).expect("valid");
        let sas = SasToken::new(SAS);
        assert_eq!(format!("{key:?}"), "AccountKey(***)");
        assert_eq!(format!("{sas:?}"), "SasToken(***)");
        let credentials = [
            Credential::SharedKey(key.clone()),
            Credential::SharedKeyLite(key),
            Credential::Sas(sas),
            Credential::bearer(LeakyTokens { token: "SECRETSIG" }),
            Credential::Anonymous,
        ];
        for credential in credentials {
            let account = Account::development().with_credential(credential);
            let text = format!("{account:?} {:?} {account:#?}", account.credential());
            for secret in [KEY, &KEY[..20], "SECRETSIG", "sig="] {
                assert!(!text.contains(secret), "{text}");
            }
            assert!(text.contains(account.credential().kind_name()), "{text}");
            assert!(text.contains("devstoreaccount1"), "{text}");
        }
    }

    #[test]
    fn account_key_errors_do_not_echo_the_text() {
        let e = AccountKey::from_base64("abc$def=").expect_err("not base64");
        let message = e.to_string();
        assert!(
            message.contains("account key is not valid base64"),
            "{message}"
        );
        assert!(!message.contains("abc"), "{message}");
        assert!(!message.contains('$'), "{message}");
    }

    #[test]
    fn sas_token_strips_one_leading_question_mark() {
        assert_eq!(SasToken::new("?sv=1&sig=2").as_query(), "sv=1&sig=2");
        assert_eq!(SasToken::new("sv=1").as_query(), "sv=1");
    }
}
