use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::error::Error;

const T0: &str = "2026-11-26T10:00:00Z";

/// A credential that numbers its tokens (`t1`, `t2`, ...), each valid for
/// `lifetime` from the clock's time, yields a few times inside `get_token` so
/// that concurrent callers overlap, and fails while `failing` is set.
#[derive(Debug)]
struct Numbered {
    clock: ManualClock,
    lifetime: chrono::Duration,
    calls: AtomicUsize,
    failing: Mutex<bool>,
    requests: Mutex<Vec<TokenRequest>>,
}

impl Numbered {
    fn new(clock: &ManualClock, lifetime: chrono::Duration) -> Arc<Self> {
        Arc::new(Numbered {
            clock: clock.clone(),
            lifetime,
            calls: AtomicUsize::new(0),
            failing: Mutex::new(false),
            requests: Mutex::default(),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl TokenCredential for Numbered {
    async fn get_token(&self, request: &TokenRequest) -> Result<AccessToken> {
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        lock(&self.requests).push(request.clone());
        if *lock(&self.failing) {
            return Err(Error::credential("the token endpoint is down"));
        }
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(AccessToken::new(
            format!("t{n}"),
            self.clock.now() + self.lifetime,
        ))
    }
}

fn setup(lifetime_minutes: i64) -> (ManualClock, Arc<Numbered>, Arc<TokenCache>) {
    let clock = ManualClock::new(T0.parse().unwrap());
    let credential = Numbered::new(&clock, chrono::Duration::minutes(lifetime_minutes));
    let entra = EntraCredential::from_arc(credential.clone()).with_clock(clock.clone());
    let cache = entra.cache(STORAGE_SCOPE);
    (clock, credential, cache)
}

fn minutes(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

#[tokio::test]
async fn a_token_is_reused_until_five_minutes_before_it_expires() {
    let (clock, credential, cache) = setup(60);
    assert_eq!(&*cache.token().await.unwrap(), "t1");
    assert_eq!(&*cache.token().await.unwrap(), "t1");
    clock.advance(minutes(54));
    assert_eq!(&*cache.token().await.unwrap(), "t1");
    assert_eq!(credential.calls(), 1);
    clock.advance(minutes(2));
    assert_eq!(&*cache.token().await.unwrap(), "t2", "refreshed early");
    assert_eq!(credential.calls(), 2);
    let asked = lock(&credential.requests);
    assert_eq!(asked[0].scopes, [STORAGE_SCOPE]);
    assert_eq!(asked[0].tenant_id, None);
}

#[tokio::test]
async fn a_short_lived_token_is_refreshed_at_half_its_life() {
    let (clock, credential, cache) = setup(4);
    assert_eq!(&*cache.token().await.unwrap(), "t1");
    clock.advance(Duration::from_secs(119));
    assert_eq!(&*cache.token().await.unwrap(), "t1");
    clock.advance(Duration::from_secs(2));
    assert_eq!(&*cache.token().await.unwrap(), "t2");
    assert_eq!(credential.calls(), 2);
}

#[tokio::test]
async fn an_expired_token_is_never_sent() {
    let (clock, credential, cache) = setup(60);
    assert_eq!(&*cache.token().await.unwrap(), "t1");
    clock.advance(minutes(120));
    assert_eq!(&*cache.token().await.unwrap(), "t2");
    assert_eq!(credential.calls(), 2);
}

#[tokio::test]
async fn callers_without_a_valid_token_share_one_fetch() {
    let (clock, credential, cache) = setup(60);
    let tokens = futures::future::join_all((0..16).map(|_| cache.token())).await;
    assert!(tokens.iter().all(|t| t.as_deref().ok() == Some("t1")));
    assert_eq!(credential.calls(), 1, "one fetch for sixteen callers");

    clock.advance(minutes(90));
    let tokens = futures::future::join_all((0..16).map(|_| cache.token())).await;
    assert!(tokens.iter().all(|t| t.as_deref().ok() == Some("t2")));
    assert_eq!(credential.calls(), 2);
}

#[tokio::test]
async fn during_a_refresh_the_other_callers_keep_the_valid_token() {
    let (clock, credential, cache) = setup(60);
    cache.token().await.unwrap();
    clock.advance(minutes(57));
    let tokens: Vec<String> = futures::future::join_all((0..8).map(|_| cache.token()))
        .await
        .into_iter()
        .map(|t| t.unwrap().to_string())
        .collect();
    assert_eq!(credential.calls(), 2, "one refresh");
    assert_eq!(
        tokens.iter().filter(|t| *t == "t2").count(),
        1,
        "{tokens:?}"
    );
    assert_eq!(
        tokens.iter().filter(|t| *t == "t1").count(),
        7,
        "{tokens:?}"
    );
    assert_eq!(&*cache.token().await.unwrap(), "t2");
}

#[tokio::test]
async fn a_failed_refresh_keeps_the_valid_token_and_waits_before_trying_again() {
    let (clock, credential, cache) = setup(60);
    cache.token().await.unwrap();
    clock.advance(minutes(56));
    *lock(&credential.failing) = true;
    assert_eq!(
        &*cache.token().await.unwrap(),
        "t1",
        "the old token still works"
    );
    let tries = lock(&credential.requests).len();
    clock.advance(Duration::from_secs(20));
    assert_eq!(&*cache.token().await.unwrap(), "t1");
    assert_eq!(
        lock(&credential.requests).len(),
        tries,
        "no retry within 30 s"
    );
    clock.advance(Duration::from_secs(11));
    assert_eq!(&*cache.token().await.unwrap(), "t1");
    assert_eq!(
        lock(&credential.requests).len(),
        tries + 1,
        "retried after 30 s"
    );
    clock.advance(minutes(5));
    let e = cache.token().await.unwrap_err();
    assert!(e.is_credential_error(), "{e}");
    assert!(e.to_string().contains("the token endpoint is down"), "{e}");
    *lock(&credential.failing) = false;
    assert_eq!(&*cache.token().await.unwrap(), "t2");
}

#[tokio::test]
async fn a_401_drops_the_token_that_was_sent_and_only_that_one() {
    let (_clock, credential, cache) = setup(60);
    cache.token().await.unwrap();
    // A stale 401 (for a token already replaced) leaves the current one alone.
    assert_eq!(cache.unauthorized("t0", None, STORAGE_SCOPE), Ok(false));
    assert_eq!(&*cache.token().await.unwrap(), "t1");
    // A 401 without a challenge: dropped, not retried.
    assert_eq!(cache.unauthorized("t1", None, STORAGE_SCOPE), Ok(false));
    assert_eq!(&*cache.token().await.unwrap(), "t2");
    assert_eq!(credential.calls(), 2);
}

#[tokio::test]
async fn a_challenge_naming_a_tenant_switches_every_scope_to_it() {
    let clock = ManualClock::new(T0.parse().unwrap());
    let credential = Numbered::new(&clock, chrono::Duration::minutes(60));
    let entra = EntraCredential::from_arc(credential.clone()).with_clock(clock);
    let storage = entra.cache(STORAGE_SCOPE);
    let cosmos = entra.cache(COSMOS_SCOPE);
    assert!(Arc::ptr_eq(&storage, &entra.clone().cache(STORAGE_SCOPE)));
    storage.token().await.unwrap();
    cosmos.token().await.unwrap();
    let challenge = "Bearer authorization_uri=https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/oauth2/authorize resource_id=https://storage.azure.com";
    assert_eq!(
        storage.unauthorized("t1", Some(challenge), STORAGE_SCOPE),
        Ok(true)
    );
    assert_eq!(
        entra.tenant().as_deref(),
        Some("72f988bf-86f1-41af-91ab-2d7cd011db47")
    );
    assert_eq!(&*storage.token().await.unwrap(), "t3");
    assert_eq!(&*cosmos.token().await.unwrap(), "t4", "the other scope too");
    let asked = lock(&credential.requests);
    assert_eq!(asked[2].tenant_id.as_deref(), entra.tenant().as_deref());
    assert_eq!(asked[3].scopes, [COSMOS_SCOPE]);
}

#[test]
fn an_explicit_scope_and_tenant_win() {
    let clock = ManualClock::new(T0.parse().unwrap());
    let credential = Numbered::new(&clock, chrono::Duration::minutes(60));
    let entra = EntraCredential::from_arc(credential)
        .with_tenant("contoso")
        .with_scope("https://acc.table.core.windows.net/.default");
    assert_eq!(
        entra.cache(COSMOS_SCOPE).scope(),
        "https://acc.table.core.windows.net/.default"
    );
    assert_eq!(entra.tenant().as_deref(), Some("contoso"));
    assert!(!format!("{entra:?}").contains("Numbered"));
}

#[test]
fn bearer_challenges_are_read_as_the_sdks_read_them() {
    let parsed = BearerChallenge::parse(
        "Bearer authorization_uri=\"https://login.microsoftonline.com/tenant-1/oauth2/authorize\", resource_id=\"https://storage.azure.com\"",
    )
    .unwrap();
    assert_eq!(parsed.tenant.as_deref(), Some("tenant-1"));
    assert_eq!(
        parsed.resource.as_deref(),
        Some("https://storage.azure.com")
    );
    let parsed = BearerChallenge::parse(
        "bearer authorization_uri=https://login.microsoftonline.com/t2/oauth2/authorize",
    )
    .unwrap();
    assert_eq!(parsed.tenant.as_deref(), Some("t2"));
    assert_eq!(
        BearerChallenge::parse("Bearer"),
        Some(BearerChallenge {
            tenant: None,
            resource: None,
            claims: None,
            insecure_authority: false,
        })
    );
    assert_eq!(BearerChallenge::parse("Basic realm=x"), None);
    assert_eq!(BearerChallenge::parse("Bearerish x=y"), None);
    // A tenant with characters no tenant has is not taken.
    let parsed = BearerChallenge::parse("Bearer authorization_uri=https://x/a%2Fb/oauth2").unwrap();
    assert_eq!(parsed.tenant, None);
}

#[test]
fn debug_never_shows_the_token() {
    let token = AccessToken::new("SECRET", T0.parse().unwrap());
    let text = format!("{token:?}");
    assert!(!text.contains("SECRET"), "{text}");
    assert!(text.contains("2026-11-26"), "{text}");
}

/// A Continuous Access Evaluation challenge, as Microsoft's documentation
/// shows one (claims: `{"access_token":{"nbf":{"essential":true,"value":"1726077595"}}}`).
const CAE: &str = "Bearer realm=\"\", authorization_uri=\"https://login.microsoftonline.com/common/oauth2/authorize\", error=\"insufficient_claims\", claims=\"eyJhY2Nlc3NfdG9rZW4iOnsibmJmIjp7ImVzc2VudGlhbCI6dHJ1ZSwidmFsdWUiOiIxNzI2MDc3NTk1In19fQ==\"";

#[tokio::test]
async fn a_claims_challenge_asks_the_next_token_with_its_claims_once() {
    let (_clock, credential, cache) = setup(60);
    cache.token().await.unwrap();
    assert_eq!(cache.unauthorized("t1", Some(CAE), STORAGE_SCOPE), Ok(true));
    assert_eq!(&*cache.token().await.unwrap(), "t2");
    assert_eq!(cache.unauthorized("t2", None, STORAGE_SCOPE), Ok(false));
    assert_eq!(&*cache.token().await.unwrap(), "t3");
    let asked = lock(&credential.requests);
    assert_eq!(asked[0].claims, None);
    assert_eq!(
        asked[1].claims.as_deref(),
        Some(r#"{"access_token":{"nbf":{"essential":true,"value":"1726077595"}}}"#)
    );
    assert_eq!(asked[2].claims, None, "claims are asked for once");
    assert!(
        asked.iter().all(|r| r.tenant_id.is_none()),
        "`common` is no tenant"
    );
}

#[test]
fn claims_count_only_in_an_insufficient_claims_challenge() {
    let parsed = BearerChallenge::parse("Bearer error=\"invalid_token\", claims=\"e30=\"").unwrap();
    assert_eq!(parsed.claims, None);
    let parsed = BearerChallenge::parse(CAE).unwrap();
    assert!(parsed.claims.unwrap().starts_with("{\"access_token\""));
}

/// A credential that always gives the same token, as a credential with a
/// cache of its own that takes no tenant nor claims does.
#[derive(Debug)]
struct Same(ManualClock);

#[async_trait::async_trait]
impl TokenCredential for Same {
    async fn get_token(&self, _: &TokenRequest) -> Result<AccessToken> {
        Ok(AccessToken::new(
            "same-SECRET",
            self.0.now() + chrono::Duration::hours(1),
        ))
    }
}

#[tokio::test]
async fn a_challenge_answered_with_the_refused_token_fails_instead_of_sending_it_again() {
    const TENANT: &str = "Bearer authorization_uri=https://login.microsoftonline.com/tenant-b/oauth2/authorize resource_id=https://storage.azure.com";
    for (challenge, asked) in [
        (TENANT, "a token of tenant tenant-b"),
        (CAE, "a token with the claims it named"),
    ] {
        let clock = ManualClock::new(T0.parse().unwrap());
        let cache = EntraCredential::new(Same(clock.clone()))
            .with_clock(clock)
            .cache(STORAGE_SCOPE);
        let sent = cache.token().await.unwrap();
        assert_eq!(
            cache.unauthorized(&sent, Some(challenge), STORAGE_SCOPE),
            Ok(true)
        );
        let e = cache.token().await.unwrap_err();
        assert!(e.is_credential_error(), "{e}");
        let text = e.to_string();
        assert!(text.contains(asked), "{text}");
        assert!(text.contains("gave the same token again"), "{text}");
        assert!(!text.contains("SECRET"), "no token in errors: {text}");
        // Once: the next call takes the credential's token as it is.
        assert_eq!(&*cache.token().await.unwrap(), "same-SECRET");
    }
}

#[tokio::test]
async fn a_challenge_for_an_audience_not_configured_is_refused_and_changes_nothing() {
    let (_clock, credential, cache) = setup(60);
    cache.token().await.unwrap();
    let foreign = "Bearer authorization_uri=https://login.microsoftonline.com/tenant-b/oauth2/authorize resource_id=https://vault.example.net";
    let why = cache
        .unauthorized("t1", Some(foreign), STORAGE_SCOPE)
        .unwrap_err();
    assert!(why.contains("audience https://vault.example.net"), "{why}");
    assert!(why.contains(STORAGE_SCOPE), "{why}");
    assert!(why.contains("with_scope"), "{why}");
    // Neither the tenant nor the scope followed the challenge.
    assert_eq!(&*cache.token().await.unwrap(), "t2");
    let asked = lock(&credential.requests);
    assert_eq!(asked[1].tenant_id, None);
    assert_eq!(asked[1].scopes, [STORAGE_SCOPE]);
}

#[tokio::test]
async fn a_challenge_for_the_services_audience_fits_an_account_scope() {
    let clock = ManualClock::new(T0.parse().unwrap());
    let credential = Numbered::new(&clock, chrono::Duration::minutes(60));
    let cache = EntraCredential::from_arc(credential)
        .with_clock(clock)
        .with_scope("https://acc.table.core.windows.net/.default")
        .cache(STORAGE_SCOPE);
    cache.token().await.unwrap();
    for resource in [
        "https://storage.azure.com",
        "https://storage.azure.com/",
        "https://acc.table.core.windows.net",
    ] {
        let challenge = format!("Bearer authorization_uri=https://login.microsoftonline.com/t/oauth2/authorize resource_id={resource}");
        assert_eq!(
            cache.unauthorized("t1", Some(&challenge), STORAGE_SCOPE),
            Ok(true),
            "{resource}"
        );
    }
    // The Cosmos DB audience is another service's.
    let cosmos = "Bearer resource_id=https://cosmos.azure.com";
    assert!(cache
        .unauthorized("t1", Some(cosmos), STORAGE_SCOPE)
        .is_err());
}

#[test]
fn a_challenge_naming_an_authority_over_http_is_refused() {
    let (_clock, _credential, cache) = setup(60);
    let plain = "Bearer authorization_uri=http://login.example/tenant-b/oauth2/authorize";
    let why = cache
        .unauthorized("t1", Some(plain), STORAGE_SCOPE)
        .unwrap_err();
    assert!(why.contains("not https"), "{why}");
    let parsed = BearerChallenge::parse(plain).unwrap();
    assert!(parsed.insecure_authority);
    assert!(!BearerChallenge::parse(CAE).unwrap().insecure_authority);
}
