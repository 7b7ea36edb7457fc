//! Microsoft Entra ID: bearer tokens from a [`TokenCredential`], kept by an
//! [`EntraCredential`] that asks for the right scope per target, caches each
//! token and refreshes it before it expires, and follows the service's
//! bearer challenge.
//!
//! The cache works as the official SDKs' bearer policies do:
//!
//! - a token is used until its refresh time: five minutes before it expires
//!   (or half its lifetime, for a token that lives less than ten minutes);
//! - from then on **one** caller fetches a new token while every other caller
//!   keeps sending the still-valid one; if that fetch fails, the old token is
//!   used until it expires and the next fetch is tried 30 seconds later;
//! - once a token has expired (or was never fetched), callers wait for one
//!   fetch and share its result: no thundering herd on the token endpoint;
//! - a `401` answer drops the token that was sent; when it carries a
//!   `WWW-Authenticate: Bearer authorization_uri=…/{tenant}/…` challenge, the
//!   tenant it names is used from then on and the request is sent once more
//!   with a token of that tenant (the Storage SDKs' tenant discovery); when it
//!   is a Continuous Access Evaluation challenge (`error="insufficient_claims"`,
//!   `claims="…"`), the next token is asked with those claims
//!   ([`TokenRequest::claims`]) and the request is sent once more, as the
//!   Azure core libraries do. Once only: a second `401` is the call's error.
//!
//! A challenge is refused, with an error that says why, and nothing is sent
//! again, when it asks for what the credential was not configured for: a
//! `resource_id` (audience) that is neither the scope tokens are asked for nor
//! the target's own, or an `authorization_uri` that is not `https`. tablekit
//! never asks a token for the audience a challenge names: the scope stays the
//! one configured, so a server cannot obtain a token meant for another
//! service. And when the token the credential gives for the second attempt is
//! the one the service just refused (a credential that cannot be asked for
//! another tenant or for claims, such as those of `azure_identity`, whose own
//! cache answers), the call fails with a credential error that names the
//! challenge instead of sending that token again.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::clock::ManualClock;
use crate::error::Result;

/// The scope of a token for Azure Storage (tables, queues, blobs) in every
/// public cloud: `https://storage.azure.com/.default`.
pub const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";

/// The scope of a token for the Azure Cosmos DB Table API:
/// `https://cosmos.azure.com/.default` (what the .NET and Python table SDKs
/// ask for when the endpoint is a Cosmos DB one).
pub const COSMOS_SCOPE: &str = "https://cosmos.azure.com/.default";

/// How long before its expiry a token is refreshed (the Azure SDKs' five minutes).
const REFRESH_BEFORE: Duration = Duration::from_secs(300);
/// How long after a failed early refresh the next one is tried (the .NET SDK's 30 s).
const RETRY_REFRESH_AFTER: Duration = Duration::from_secs(30);

/// An OAuth access token and when it expires.
///
/// `Debug` shows the expiry, never the token.
#[derive(Clone)]
pub struct AccessToken {
    token: Arc<str>,
    expires_on: DateTime<Utc>,
}

impl AccessToken {
    /// A token (without the `Bearer ` prefix) valid until `expires_on`.
    pub fn new(token: impl Into<String>, expires_on: DateTime<Utc>) -> Self {
        AccessToken {
            token: Arc::from(token.into()),
            expires_on,
        }
    }

    /// The token text, without the `Bearer ` prefix.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// When the token expires.
    pub fn expires_on(&self) -> DateTime<Utc> {
        self.expires_on
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessToken")
            .field("token", &"***")
            .field("expires_on", &self.expires_on)
            .finish()
    }
}

/// What a [`TokenCredential`] is asked for: the scopes, and the tenant when one
/// is known (set by [`EntraCredential::with_tenant`] or learnt from a challenge).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenRequest {
    /// The scopes, e.g. [`STORAGE_SCOPE`].
    pub scopes: Vec<String>,
    /// The Entra tenant to ask, if not the credential's own.
    pub tenant_id: Option<String>,
    /// Claims the service demanded in a Continuous Access Evaluation challenge
    /// (`error="insufficient_claims"`, the JSON decoded from its `claims`):
    /// a token without them will be refused again.
    pub claims: Option<String>,
}

impl TokenRequest {
    /// A request for one scope, in the credential's own tenant.
    pub fn new(scope: impl Into<String>) -> Self {
        TokenRequest {
            scopes: vec![scope.into()],
            tenant_id: None,
            claims: None,
        }
    }
}

/// A source of OAuth bearer tokens (Microsoft Entra ID), for [`Credential::Bearer`].
///
/// tablekit asks it only when its cache ([`EntraCredential`]) needs a token,
/// so an implementation need not cache. With the `entra` feature, every
/// credential of the official `azure_identity` crate (managed identity,
/// workload identity, client secret or certificate, the developer tools)
/// plugs in through `Credential::entra` (feature `entra`).
///
/// ```
/// use tablekit::account::{AccessToken, TokenCredential, TokenRequest};
/// use tablekit::{Account, Credential};
///
/// #[derive(Debug)]
/// struct Fixed;
///
/// #[async_trait::async_trait]
/// impl TokenCredential for Fixed {
///     async fn get_token(&self, request: &TokenRequest) -> tablekit::Result<AccessToken> {
///         assert_eq!(request.scopes, ["https://storage.azure.com/.default"]);
///         Ok(AccessToken::new("eyJ0eXAi...", chrono::Utc::now() + chrono::Duration::hours(1)))
///     }
/// }
///
/// let account = Account::new(
///     "myaccount",
///     "https://myaccount.table.core.windows.net",
///     Credential::bearer(Fixed),
/// )?;
/// # Ok::<(), tablekit::Error>(())
/// ```
///
/// [`Credential::Bearer`]: crate::Credential::Bearer
#[async_trait::async_trait]
pub trait TokenCredential: Send + Sync + fmt::Debug {
    /// A token for `request`'s scopes (and tenant), with its expiry. Failures
    /// are best reported with [`Error::credential`](crate::Error::credential).
    async fn get_token(&self, request: &TokenRequest) -> Result<AccessToken>;
}

/// A [`TokenCredential`] with tablekit's token cache in front: what
/// [`Credential::Bearer`](crate::Credential::Bearer) holds.
///
/// Clones (and every client of an [`Account`](crate::Account) holding it)
/// share one cache per scope. The scope is chosen per target unless set with
/// [`with_scope`](EntraCredential::with_scope): [`STORAGE_SCOPE`] for Azure
/// Storage, [`COSMOS_SCOPE`] for the Cosmos DB Table API.
#[derive(Clone)]
pub struct EntraCredential {
    credential: Arc<dyn TokenCredential>,
    scope: Option<Arc<str>>,
    clock: Option<ManualClock>,
    shared: Arc<Shared>,
}

/// What clones share: the tenant and one cache per scope.
#[derive(Default)]
struct Shared {
    tenant: Mutex<Option<String>>,
    caches: Mutex<Vec<Arc<TokenCache>>>,
}

impl fmt::Debug for EntraCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The user's credential may hold a secret: do not trust its Debug.
        f.debug_struct("EntraCredential")
            .field("scope", &self.scope)
            .field("tenant", &self.tenant())
            .finish_non_exhaustive()
    }
}

impl EntraCredential {
    /// The cache in front of `credential`.
    pub fn new(credential: impl TokenCredential + 'static) -> Self {
        Self::from_arc(Arc::new(credential))
    }

    /// The cache in front of a shared `credential`.
    pub fn from_arc(credential: Arc<dyn TokenCredential>) -> Self {
        EntraCredential {
            credential,
            scope: None,
            clock: None,
            shared: Arc::default(),
        }
    }

    /// Asks for `scope` whatever the target, e.g. an account-specific
    /// audience (`https://myaccount.table.core.windows.net/.default`) or a
    /// sovereign cloud's.
    #[must_use]
    pub fn with_scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(Arc::from(scope.into()));
        self.shared = self.fresh_shared();
        self
    }

    /// Asks `tenant` for tokens (the Storage SDKs' `TenantId`); without it the
    /// credential's own tenant is used until a challenge names another.
    #[must_use]
    pub fn with_tenant(self, tenant: impl Into<String>) -> Self {
        *lock(&self.shared.tenant) = Some(tenant.into());
        self
    }

    /// Reads the time from `clock` instead of the system clock, for tests of
    /// expiry and refresh.
    #[must_use]
    pub fn with_clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self.shared = self.fresh_shared();
        self
    }

    /// New caches (their settings changed), the tenant kept.
    fn fresh_shared(&self) -> Arc<Shared> {
        Arc::new(Shared {
            tenant: Mutex::new(self.tenant()),
            caches: Mutex::default(),
        })
    }

    /// The scope set with [`with_scope`](Self::with_scope), if any.
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    /// The tenant tokens are asked from: set, or learnt from a challenge.
    pub fn tenant(&self) -> Option<String> {
        lock(&self.shared.tenant).clone()
    }

    /// The cache of tokens for this target's scope: the one set, else `default_scope`.
    pub(crate) fn cache(&self, default_scope: &str) -> Arc<TokenCache> {
        let scope = self.scope.as_deref().unwrap_or(default_scope);
        let mut caches = lock(&self.shared.caches);
        if let Some(cache) = caches.iter().find(|c| c.scope == scope) {
            return cache.clone();
        }
        let cache = Arc::new(TokenCache {
            credential: self.credential.clone(),
            scope: scope.to_owned(),
            clock: self.clock.clone(),
            shared: self.shared.clone(),
            state: Mutex::default(),
            claims: Mutex::default(),
            refused: Mutex::default(),
            fetch: tokio::sync::Mutex::new(()),
        });
        caches.push(cache.clone());
        cache
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The tokens of one scope: the current one, when to refresh it, and the
/// lock that lets one caller fetch at a time.
pub(crate) struct TokenCache {
    credential: Arc<dyn TokenCredential>,
    scope: String,
    clock: Option<ManualClock>,
    shared: Arc<Shared>,
    state: Mutex<Option<Cached>>,
    /// Claims a challenge demanded, for the next fetch.
    claims: Mutex<Option<String>>,
    /// The token a challenged request carried, and what the challenge asked:
    /// the next fetch must give another token.
    refused: Mutex<Option<Refused>>,
    /// Held by the one caller fetching a token.
    fetch: tokio::sync::Mutex<()>,
}

impl fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenCache")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// A token the service refused with a challenge, and what the challenge asked.
struct Refused {
    token: Arc<str>,
    /// "a token of tenant `t`" or "a token with the claims it named".
    asked: String,
}

#[derive(Clone)]
struct Cached {
    token: AccessToken,
    /// From when on a caller should fetch a new token (the old one still works).
    refresh_at: DateTime<Utc>,
}

/// What the cache holds at a moment.
enum Fresh {
    /// Use it.
    Yes(Arc<str>),
    /// Still valid, but due for a refresh.
    Due(Arc<str>),
    /// Expired or absent: wait for a fetch.
    No,
}

impl TokenCache {
    fn now(&self) -> DateTime<Utc> {
        match &self.clock {
            Some(clock) => clock.now(),
            None => Utc::now(),
        }
    }

    fn look(&self, now: DateTime<Utc>) -> Fresh {
        match &*lock(&self.state) {
            Some(c) if now < c.refresh_at => Fresh::Yes(c.token.token.clone()),
            Some(c) if now < c.token.expires_on => Fresh::Due(c.token.token.clone()),
            _ => Fresh::No,
        }
    }

    /// The scope tokens are asked for.
    pub(crate) fn scope(&self) -> &str {
        &self.scope
    }

    /// A token to send now, fetching one when none is fresh (see the module docs).
    pub(crate) async fn token(&self) -> Result<Arc<str>> {
        match self.look(self.now()) {
            Fresh::Yes(token) => Ok(token),
            Fresh::Due(token) => {
                // Someone else is refreshing: the old token still works.
                let Ok(_guard) = self.fetch.try_lock() else {
                    return Ok(token);
                };
                let now = self.now();
                if let Fresh::Yes(token) = self.look(now) {
                    return Ok(token);
                }
                match self.fetch_and_store(now).await {
                    Ok(new) => Ok(new),
                    Err(e) => {
                        tracing::debug!(error = %e, scope = %self.scope,
                            "refreshing a token failed; the current one is used until it expires");
                        let mut state = lock(&self.state);
                        match state.as_mut() {
                            Some(c) if now < c.token.expires_on => {
                                c.refresh_at = (now + RETRY_REFRESH_AFTER).min(c.token.expires_on);
                                Ok(c.token.token.clone())
                            }
                            _ => Err(e),
                        }
                    }
                }
            }
            Fresh::No => {
                let _guard = self.fetch.lock().await;
                // Whoever held the lock may have fetched one meanwhile.
                let now = self.now();
                if let Fresh::Yes(token) | Fresh::Due(token) = self.look(now) {
                    return Ok(token);
                }
                self.fetch_and_store(now).await
            }
        }
    }

    async fn fetch_and_store(&self, now: DateTime<Utc>) -> Result<Arc<str>> {
        let request = TokenRequest {
            scopes: vec![self.scope.clone()],
            tenant_id: lock(&self.shared.tenant).clone(),
            claims: lock(&self.claims).clone(),
        };
        let token = self.credential.get_token(&request).await?;
        // Claims are asked for once: the token that carries them answers them.
        if request.claims.is_some() {
            *lock(&self.claims) = None;
        }
        if let Some(refused) = lock(&self.refused).take() {
            if refused.token == token.token {
                return Err(crate::Error::credential(format!(
                    "the service refused the token for {} with a challenge asking for {}, and the \
                     credential gave the same token again, so it is not sent again: the credential \
                     cannot be asked for that (azure_identity's credentials keep the tenant they \
                     were built with, and azure_core 1.x passes no claims): build it for that tenant, \
                     or implement tablekit's TokenCredential, which receives the tenant and claims",
                    self.scope, refused.asked
                )));
            }
        }
        let lifetime = (token.expires_on - now).to_std().unwrap_or_default();
        let early = REFRESH_BEFORE.min(lifetime / 2);
        let refresh_at = token.expires_on - chrono::Duration::from_std(early).unwrap_or_default();
        let text = token.token.clone();
        *lock(&self.state) = Some(Cached { token, refresh_at });
        Ok(text)
    }

    /// The service answered `401` to a request that carried `sent`: drop that
    /// token (not a newer one another caller already fetched) and read the
    /// challenge. `Ok(true)` when the request should be sent once more: the
    /// answer carried a Bearer challenge tablekit can answer. `Err(why)` when
    /// the challenge asks for what the credential was not configured for (see
    /// the module docs); `default_scope` is the target's own scope.
    pub(crate) fn unauthorized(
        &self,
        sent: &str,
        www_authenticate: Option<&str>,
        default_scope: &str,
    ) -> std::result::Result<bool, String> {
        {
            let mut state = lock(&self.state);
            if state.as_ref().is_some_and(|c| &*c.token.token == sent) {
                *state = None;
            }
        }
        let Some(challenge) = www_authenticate.and_then(BearerChallenge::parse) else {
            return Ok(false);
        };
        if let Some(resource) = &challenge.resource {
            if !audience_fits(resource, &self.scope, default_scope) {
                return Err(format!(
                    "its bearer challenge asks for a token for the audience {}, which this \
                     credential was not configured for (it asks for {}), so the request is not \
                     sent again; if that audience is right, set it with EntraCredential::with_scope",
                    shown(resource),
                    self.scope
                ));
            }
        }
        if challenge.insecure_authority {
            return Err(
                "its bearer challenge names an authority that is not https, \
                 so the request is not sent again"
                    .to_owned(),
            );
        }
        let asked = if let Some(claims) = challenge.claims {
            // A claims challenge is about the token, not the tenant.
            *lock(&self.claims) = Some(claims);
            "a token with the claims it named".to_owned()
        } else if let Some(tenant) = challenge.tenant {
            let asked = format!("a token of tenant {tenant}");
            let mut current = lock(&self.shared.tenant);
            if current.as_deref() != Some(tenant.as_str()) {
                tracing::debug!(tenant = %tenant, "the service's challenge names another tenant");
                *current = Some(tenant);
                drop(current);
                // Every scope's token came from the old tenant.
                for cache in lock(&self.shared.caches).iter() {
                    *lock(&cache.state) = None;
                }
            }
            asked
        } else {
            "a new token".to_owned()
        };
        *lock(&self.refused) = Some(Refused {
            token: Arc::from(sent),
            asked,
        });
        Ok(true)
    }
}

/// The resource (audience) a scope asks for: the scope without `/.default`.
fn resource_of(scope: &str) -> &str {
    scope
        .strip_suffix("/.default")
        .unwrap_or(scope)
        .trim_end_matches('/')
}

/// Whether a challenge's `resource_id` is an audience the credential serves:
/// the resource of its scope, or of the target's own scope (an account-specific
/// scope such as `https://acc.table.core.windows.net/.default` is answered by a
/// challenge naming the service's, `https://storage.azure.com`).
fn audience_fits(resource: &str, scope: &str, default_scope: &str) -> bool {
    let resource = resource.trim_end_matches('/');
    [scope, default_scope]
        .iter()
        .any(|s| resource_of(s).eq_ignore_ascii_case(resource))
}

/// A value a server sent, as an error shows it: at most 100 characters,
/// control characters escaped.
fn shown(value: &str) -> String {
    let mut out: String = value
        .chars()
        .take(100)
        .flat_map(char::escape_debug)
        .collect();
    if value.chars().count() > 100 {
        out.push('…');
    }
    out
}

/// The parameters of a `Bearer` challenge that tablekit uses.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BearerChallenge {
    /// The tenant of `authorization_uri` (its first path segment).
    pub(crate) tenant: Option<String>,
    /// `resource_id`, the audience the service expects.
    pub(crate) resource: Option<String>,
    /// The claims of an `error="insufficient_claims"` challenge, decoded from base64.
    pub(crate) claims: Option<String>,
    /// `authorization_uri` is there and is not an `https` URL.
    pub(crate) insecure_authority: bool,
}

impl BearerChallenge {
    /// Reads `Bearer authorization_uri=https://login.microsoftonline.com/{tenant}/oauth2/authorize resource_id=https://storage.azure.com`
    /// (values quoted or not, separated by spaces or commas); `None` when the
    /// header holds no Bearer challenge.
    pub(crate) fn parse(header: &str) -> Option<BearerChallenge> {
        let start = find_ignore_case(header, "bearer")?;
        let rest = &header[start + "bearer".len()..];
        if !rest.is_empty() && !rest.starts_with([' ', ',']) {
            return None;
        }
        let mut challenge = BearerChallenge {
            tenant: None,
            resource: None,
            claims: None,
            insecure_authority: false,
        };
        let mut insufficient_claims = false;
        let mut claims = None;
        let mut rest = rest.trim_start_matches([' ', ',']);
        while let Some(eq) = rest.find('=') {
            let name = rest[..eq].trim().to_ascii_lowercase();
            let after = &rest[eq + 1..];
            let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
                let end = quoted.find('"').unwrap_or(quoted.len());
                (&quoted[..end], quoted.get(end + 1..).unwrap_or(""))
            } else {
                let end = after.find([' ', ',']).unwrap_or(after.len());
                (&after[..end], &after[end..])
            };
            match name.as_str() {
                "authorization_uri" | "authorization" => {
                    challenge.tenant = tenant_of(value);
                    challenge.insecure_authority = !value
                        .get(..8)
                        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"));
                }
                "resource_id" | "resource" => challenge.resource = Some(value.to_owned()),
                "error" => insufficient_claims = value == "insufficient_claims",
                "claims" => claims = Some(value.to_owned()),
                _ => {}
            }
            rest = next.trim_start_matches([' ', ',']);
        }
        if insufficient_claims {
            challenge.claims = claims.map(|c| decode_claims(&c));
        }
        Some(challenge)
    }
}

/// The claims JSON of a challenge's base64 (padded or not, either alphabet);
/// the text itself if it is not base64.
fn decode_claims(text: &str) -> String {
    use base64::Engine as _;
    let trimmed = text.trim_end_matches('=');
    [
        base64::engine::general_purpose::STANDARD_NO_PAD,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ]
    .iter()
    .find_map(|engine| engine.decode(trimmed).ok())
    .and_then(|bytes| String::from_utf8(bytes).ok())
    .unwrap_or_else(|| text.to_owned())
}

fn find_ignore_case(haystack: &str, needle: &str) -> Option<usize> {
    haystack
        .as_bytes()
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// `{tenant}` of `https://login.microsoftonline.com/{tenant}/oauth2/authorize`.
fn tenant_of(uri: &str) -> Option<String> {
    let after_scheme = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    let path = after_scheme.split_once('/')?.1;
    let tenant = path.split('/').next()?;
    // The multi-tenant aliases name no tenant.
    if ["common", "organizations", "consumers"]
        .iter()
        .any(|alias| alias.eq_ignore_ascii_case(tenant))
    {
        return None;
    }
    let ok = !tenant.is_empty()
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    ok.then(|| tenant.to_owned())
}

#[cfg(test)]
mod tests;
