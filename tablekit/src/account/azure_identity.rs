//! The adapter of the official identity crates (feature `entra`): any
//! `azure_core::credentials::TokenCredential` (every credential of
//! `azure_identity`) as tablekit's [`TokenCredential`].

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::credential::Credential;
use super::entra::{AccessToken, EntraCredential, TokenCredential, TokenRequest};
use crate::error::{Error, Result};

/// An `azure_core` credential asked through tablekit's trait.
struct AzureIdentity(Arc<dyn azure_core::credentials::TokenCredential>);

impl fmt::Debug for AzureIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // azure_identity's credentials print no secret, but their type is all
        // a reader needs.
        f.write_str("AzureIdentity(..)")
    }
}

#[async_trait::async_trait]
impl TokenCredential for AzureIdentity {
    async fn get_token(&self, request: &TokenRequest) -> Result<AccessToken> {
        let scopes: Vec<&str> = request.scopes.iter().map(String::as_str).collect();
        // azure_core 1.x has no per-request tenant: a credential of
        // azure_identity asks the tenant it was built with.
        let token = self.0.get_token(&scopes, None).await.map_err(|e| {
            Error::credential(format!(
                "azure_identity could not get a token for {}: {e}",
                scopes.join(" ")
            ))
        })?;
        Ok(AccessToken::new(
            token.token.secret(),
            expiry(token.expires_on),
        ))
    }
}

/// `time`'s instant as chrono's; out of range means "expired", so the cache
/// asks again rather than trusting a token forever.
fn expiry(at: azure_core::time::OffsetDateTime) -> DateTime<Utc> {
    DateTime::from_timestamp(at.unix_timestamp(), at.nanosecond()).unwrap_or(DateTime::UNIX_EPOCH)
}

impl Credential {
    /// Microsoft Entra ID through a credential of the official identity crate
    /// `azure_identity` (feature `entra`), cached and refreshed by tablekit.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tablekit::{Account, Credential};
    ///
    /// // `identity` is e.g. `azure_identity::ManagedIdentityCredential::new(None)?`.
    /// fn account(identity: Arc<dyn azure_core::credentials::TokenCredential>) -> tablekit::Result<Account> {
    ///     Account::new(
    ///         "myaccount",
    ///         "https://myaccount.table.core.windows.net",
    ///         Credential::entra(identity),
    ///     )
    /// }
    /// ```
    ///
    /// The scope follows the target ([`Target`](crate::account::Target)):
    /// Azure Storage's or the Cosmos DB Table API's.
    ///
    /// azure_identity's credentials take their tenant when they are built,
    /// and azure_core 1.x passes them no claims: a tenant or the claims that a
    /// service's `401` challenge names reach only credentials of tablekit's
    /// own [`TokenCredential`] trait. After such a challenge, a credential of
    /// azure_identity asked again gives a new token only if its own cache
    /// holds none (it keeps a token until five minutes before it expires);
    /// when it gives back the token the service refused, the call fails with
    /// a credential error naming what the challenge asked for, rather than
    /// sending that token again. `tests/integration/entra_identity.rs` runs a
    /// `ClientSecretCredential` against a token endpoint on a loopback port.
    pub fn entra(credential: Arc<dyn azure_core::credentials::TokenCredential>) -> Self {
        Credential::Bearer(EntraCredential::new(AzureIdentity(credential)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use azure_core::credentials::{TokenCredential as AzureTokenCredential, TokenRequestOptions};
    use std::sync::Mutex;

    /// An azure_core credential that records the scopes it is asked for.
    #[derive(Debug, Default)]
    struct Recording(Mutex<Vec<Vec<String>>>);

    #[async_trait::async_trait]
    impl AzureTokenCredential for Recording {
        async fn get_token(
            &self,
            scopes: &[&str],
            _: Option<TokenRequestOptions<'_>>,
        ) -> azure_core::Result<azure_core::credentials::AccessToken> {
            self.0
                .lock()
                .unwrap()
                .push(scopes.iter().map(|s| (*s).to_owned()).collect());
            if scopes.contains(&"refuse") {
                return Err(azure_core::Error::with_message(
                    azure_core::error::ErrorKind::Credential,
                    "no identity here",
                ));
            }
            Ok(azure_core::credentials::AccessToken::new(
                "from-azure-core",
                azure_core::time::OffsetDateTime::from_unix_timestamp(4_000_000_000).unwrap(),
            ))
        }
    }

    #[tokio::test]
    async fn an_azure_core_credential_gives_tokens_with_their_expiry() {
        let recording = Arc::new(Recording::default());
        let adapter = AzureIdentity(recording.clone());
        let token = adapter
            .get_token(&TokenRequest::new(super::super::STORAGE_SCOPE))
            .await
            .unwrap();
        assert_eq!(token.token(), "from-azure-core");
        assert_eq!(token.expires_on().timestamp(), 4_000_000_000);
        assert_eq!(
            *recording.0.lock().unwrap(),
            [vec![super::super::STORAGE_SCOPE.to_owned()]]
        );
        let e = adapter
            .get_token(&TokenRequest::new("refuse"))
            .await
            .unwrap_err();
        assert!(e.is_credential_error(), "{e}");
        assert!(e.to_string().contains("no identity here"), "{e}");
        assert!(matches!(
            Credential::entra(recording),
            Credential::Bearer(_)
        ));
    }
}
