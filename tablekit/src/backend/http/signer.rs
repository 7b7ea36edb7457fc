//! Signing a request: one [`RequestSigner`] per credential and service, plugged
//! into the one [`Pipeline`](super::pipeline::Pipeline) that sends every request.
//!
//! Shared Key signs a different string per service. The Table service's form
//! ([`table_shared_key`]) names the verb, type, date and the resource with
//! `comp`; the Blob and Queue services' form ([`shared_key`]) names eleven
//! standard headers, then every `x-ms-` header, then the resource with every
//! query parameter:
//!
//! ```text
//! VERB\n Content-Encoding\n Content-Language\n Content-Length\n Content-MD5\n
//! Content-Type\n Date\n If-Modified-Since\n If-Match\n If-None-Match\n
//! If-Unmodified-Since\n Range\n
//! x-ms-a:v\n x-ms-b:v\n ...            (lower-case names, sorted, values trimmed)
//! /account/path\nparam:v1,v2 ...        (lower-case names, sorted, decoded values)
//! ```
//!
//! A `Content-Length` of zero is signed as the empty string (versions 2015-02-21
//! and later), and `Date` stays empty because the request carries `x-ms-date`.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::Method;

use std::fmt::Write as _;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use chrono::{DateTime, Datelike as _, Timelike as _, Utc};

use super::wire::{header_value, names};
use crate::account::{Account, AccountKey, Credential, SasToken, TokenCache};
use crate::error::{Error, Result};

/// The service a request goes to: it decides the form of a Shared Key signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Service {
    /// The Table service.
    Table,
    /// The Queue service.
    #[cfg(feature = "queue")]
    Queue,
    /// The Blob service.
    #[cfg(feature = "blob")]
    Blob,
}

impl Service {
    /// The service's `az.namespace` in spans.
    pub(crate) fn namespace(self) -> &'static str {
        match self {
            Service::Table => crate::observe::TABLES,
            #[cfg(feature = "queue")]
            Service::Queue => crate::observe::STORAGE,
            #[cfg(feature = "blob")]
            Service::Blob => crate::observe::STORAGE,
        }
    }

    /// The client of the service, in the names of spans.
    #[cfg(feature = "admin")]
    pub(crate) fn client(self) -> &'static str {
        match self {
            Service::Table => "TableServiceClient",
            #[cfg(feature = "queue")]
            Service::Queue => "QueueServiceClient",
            #[cfg(feature = "blob")]
            Service::Blob => "BlobServiceClient",
        }
    }

    /// The service's name in messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Service::Table => "table",
            #[cfg(feature = "queue")]
            Service::Queue => "queue",
            #[cfg(feature = "blob")]
            Service::Blob => "blob",
        }
    }
}

/// One attempt's request as the signer sees it: everything that will be sent.
#[derive(Debug)]
pub(crate) struct Attempt<'a> {
    /// The verb.
    pub(crate) method: &'a Method,
    /// The path as sent: the endpoint's path, `/`, the resource.
    pub(crate) path: &'a str,
    /// The query parameters, decoded (what Shared Key signs).
    pub(crate) query: &'a [(&'static str, String)],
    /// The encoded query as sent (without its `?`); a SAS signer appends to it.
    pub(crate) encoded_query: std::borrow::Cow<'a, str>,
    /// Every header; a signer adds `Authorization`.
    pub(crate) headers: HeaderMap,
    /// The body.
    pub(crate) body: &'a Bytes,
}

impl Attempt<'_> {
    /// A header's value as text, `""` when absent or not text.
    pub(crate) fn header(&self, name: &HeaderName) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// Adds a credential to one attempt of a request, after every other header is
/// set (the signature covers them).
#[async_trait::async_trait]
pub(crate) trait RequestSigner: Send + Sync + fmt::Debug {
    /// Signs `attempt` in place: an `Authorization` header or a query.
    async fn sign(&self, attempt: &mut Attempt<'_>) -> Result<()>;

    /// Signs `attempt` at once if this signer never waits (keys, SAS): the
    /// pipeline then skips [`RequestSigner::sign`]'s boxed future. `None`
    /// for a signer that may wait (a token fetch).
    fn sign_now(&self, _attempt: &mut Attempt<'_>) -> Option<Result<()>> {
        None
    }

    /// Whether a `401` answer means something to this signer (bearer tokens),
    /// so that the pipeline keeps the `Authorization` it sent.
    fn reads_challenges(&self) -> bool {
        false
    }

    /// The service answered `401` (headers `answer`) to an attempt that sent
    /// `Authorization: sent`. `true`: sign the request again and send it once
    /// more; an error: the call's error (a challenge the signer refuses).
    fn unauthorized(&self, _sent: Option<&HeaderValue>, _answer: &HeaderMap) -> Result<bool> {
        Ok(false)
    }

    /// The error of a call signed by this signer, with what the signer knows
    /// about why the service refused it.
    fn explain(&self, error: Error) -> Error {
        error
    }
}

/// The signer of `account`'s credential for `service`.
pub(crate) fn for_account(service: Service, account: &Account) -> Result<Arc<dyn RequestSigner>> {
    let name = account.account_name().to_owned();
    Ok(match account.credential() {
        Credential::SharedKey(key) if service == Service::Table => Arc::new(TableSharedKey {
            account: name,
            key: key.clone(),
            lite: false,
        }),
        Credential::SharedKeyLite(key) if service == Service::Table => Arc::new(TableSharedKey {
            account: name,
            key: key.clone(),
            lite: true,
        }),
        #[cfg(any(feature = "queue", feature = "blob"))]
        Credential::SharedKey(key) => Arc::new(StorageSharedKey {
            account: name,
            key: key.clone(),
        }),
        Credential::SharedKeyLite(_) => {
            return Err(Error::config(format!(
                "the {} client signs with SharedKey, a SAS or a bearer token, not SharedKeyLite",
                service.name()
            )))
        }
        Credential::Sas(token) => Arc::new(Sas(token.clone())),
        Credential::Bearer(entra) => {
            let endpoint = match service {
                Service::Table => account.table_endpoint(),
                #[cfg(feature = "queue")]
                Service::Queue => account.queue_endpoint(),
                #[cfg(feature = "blob")]
                Service::Blob => account.blob_endpoint(),
            };
            refuse_plain_http(service, endpoint.unwrap_or(""))?;
            let scope = match service {
                Service::Table => account.target().token_scope(),
                #[cfg(any(feature = "queue", feature = "blob"))]
                _ => crate::account::STORAGE_SCOPE,
            };
            Arc::new(Bearer {
                cache: entra.cache(scope),
                default_scope: scope,
            })
        }
        _ => Arc::new(Anonymous),
    })
}

/// An `Authorization` value that never shows in logs.
fn sensitive(value: &str) -> Result<HeaderValue> {
    let mut v = header_value(value)?;
    v.set_sensitive(true);
    Ok(v)
}

/// Shared Key (or Shared Key Lite) in the Table service's form.
struct TableSharedKey {
    account: String,
    key: AccountKey,
    lite: bool,
}

impl fmt::Debug for TableSharedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.lite {
            "TableSharedKeyLite(***)"
        } else {
            "TableSharedKey(***)"
        })
    }
}

#[async_trait::async_trait]
impl RequestSigner for TableSharedKey {
    async fn sign(&self, attempt: &mut Attempt<'_>) -> Result<()> {
        self.sign_table(attempt)
    }

    fn sign_now(&self, attempt: &mut Attempt<'_>) -> Option<Result<()>> {
        Some(self.sign_table(attempt))
    }
}

impl TableSharedKey {
    fn sign_table(&self, attempt: &mut Attempt<'_>) -> Result<()> {
        let comp = attempt
            .query
            .iter()
            .find(|(n, _)| *n == "comp")
            .map(|(_, v)| v.as_str());
        let input = StringToSign {
            method: attempt.method.as_str(),
            content_md5: "",
            content_type: attempt.header(&header::CONTENT_TYPE),
            date: attempt.header(&names::X_MS_DATE),
            path: attempt.path,
            comp,
        };
        let value = if self.lite {
            table_shared_key_lite(&self.account, &self.key, &input)
        } else {
            table_shared_key(&self.account, &self.key, &input)
        };
        attempt
            .headers
            .insert(header::AUTHORIZATION, sensitive(&value)?);
        Ok(())
    }
}

/// Shared Key in the Blob and Queue services' form.
#[cfg(any(feature = "queue", feature = "blob"))]
struct StorageSharedKey {
    account: String,
    key: AccountKey,
}

#[cfg(any(feature = "queue", feature = "blob"))]
impl fmt::Debug for StorageSharedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StorageSharedKey(***)")
    }
}

#[async_trait::async_trait]
#[cfg(any(feature = "queue", feature = "blob"))]
impl RequestSigner for StorageSharedKey {
    async fn sign(&self, attempt: &mut Attempt<'_>) -> Result<()> {
        self.sign_storage(attempt)
    }

    fn sign_now(&self, attempt: &mut Attempt<'_>) -> Option<Result<()>> {
        Some(self.sign_storage(attempt))
    }
}

#[cfg(any(feature = "queue", feature = "blob"))]
impl StorageSharedKey {
    fn sign_storage(&self, attempt: &mut Attempt<'_>) -> Result<()> {
        let query: Vec<(&str, &str)> = attempt
            .query
            .iter()
            .map(|(n, v)| (*n, v.as_str()))
            .collect();
        let ms: Vec<(&str, &str)> = attempt
            .headers
            .iter()
            .filter(|(n, _)| n.as_str().starts_with("x-ms-"))
            .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
            .collect();
        let value = shared_key(
            &self.account,
            &self.key,
            &StorageRequest {
                method: attempt.method.as_str(),
                content_length: attempt.body.len() as u64,
                content_type: attempt.header(&header::CONTENT_TYPE),
                if_match: attempt.header(&header::IF_MATCH),
                if_none_match: attempt.header(&header::IF_NONE_MATCH),
                ms_headers: &ms,
                path: attempt.path,
                query: &query,
                ..Default::default()
            },
        );
        attempt
            .headers
            .insert(header::AUTHORIZATION, sensitive(&value)?);
        Ok(())
    }
}

/// A shared access signature, appended to the query.
#[derive(Debug)]
struct Sas(SasToken);

#[async_trait::async_trait]
impl RequestSigner for Sas {
    async fn sign(&self, attempt: &mut Attempt<'_>) -> Result<()> {
        self.append(attempt);
        Ok(())
    }

    fn sign_now(&self, attempt: &mut Attempt<'_>) -> Option<Result<()>> {
        self.append(attempt);
        Some(Ok(()))
    }
}

impl Sas {
    fn append(&self, attempt: &mut Attempt<'_>) {
        let query = attempt.encoded_query.to_mut();
        if !query.is_empty() {
            query.push('&');
        }
        query.push_str(self.0.as_query());
    }
}

/// A bearer token must not travel in clear text: refused over `http://`
/// (as the Azure SDKs do), except to a loopback address, where scripted test
/// servers listen.
fn refuse_plain_http(service: Service, endpoint: &str) -> Result<()> {
    let Ok(uri) = endpoint.parse::<http::Uri>() else {
        return Ok(());
    };
    if uri
        .scheme_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("https"))
    {
        return Ok(());
    }
    let host = uri.host().unwrap_or("");
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        return Ok(());
    }
    Err(Error::config(format!(
        "the {} endpoint is http://: bearer tokens (Microsoft Entra ID) are sent only over https",
        service.name()
    )))
}

/// A bearer token from the account's token cache for the service's scope.
struct Bearer {
    cache: Arc<TokenCache>,
    /// The target's own scope (the cache's, unless one was set).
    default_scope: &'static str,
}

impl fmt::Debug for Bearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Bearer(***)")
    }
}

#[async_trait::async_trait]
impl RequestSigner for Bearer {
    async fn sign(&self, attempt: &mut Attempt<'_>) -> Result<()> {
        let token = self.cache.token().await?;
        let mut value = String::with_capacity(7 + token.len());
        value.push_str("Bearer ");
        value.push_str(&token);
        let value = sensitive(&value).map_err(|_| {
            Error::credential(format!(
                "the token for {} is not valid in an HTTP header",
                self.cache.scope()
            ))
        })?;
        attempt.headers.insert(header::AUTHORIZATION, value);
        Ok(())
    }

    fn reads_challenges(&self) -> bool {
        true
    }

    fn explain(&self, error: Error) -> Error {
        use crate::error::ErrorCode;
        let refused = matches!(error.status(), Some(401 | 403))
            && matches!(
                error.code(),
                Some(ErrorCode::AuthenticationFailed | ErrorCode::InvalidAuthenticationInfo)
            );
        if !refused {
            return error;
        }
        let note = format!(
            "[the bearer token for scope {} was refused: check that the scope (audience) \
             matches the target, the token's tenant and expiry, and that the identity holds \
             a data role on the account]",
            self.cache.scope()
        );
        error.with_service_note(&note)
    }

    fn unauthorized(&self, sent: Option<&HeaderValue>, answer: &HeaderMap) -> Result<bool> {
        let sent = sent
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let challenge = answer
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok());
        self.cache
            .unauthorized(sent, challenge, self.default_scope)
            .map_err(|why| refused_challenge(answer, &why))
    }
}

/// The error of a `401` whose challenge the signer refused: the service's
/// status, error code (`x-ms-error-code`) and request id, with `why` as its
/// message (the body, which only points at the challenge, is not read).
fn refused_challenge(answer: &HeaderMap, why: &str) -> Error {
    let text = |name: &HeaderName| answer.get(name).and_then(|v| v.to_str().ok());
    let code = text(&names::X_MS_ERROR_CODE).unwrap_or("InvalidAuthenticationInfo");
    let body = serde_json::json!({ "odata.error": { "code": code, "message": why } });
    super::wire::service_error(
        http::StatusCode::UNAUTHORIZED,
        text(&names::X_MS_REQUEST_ID).map(str::to_owned),
        None,
        body.to_string().as_bytes(),
    )
}

/// No credential.
#[derive(Debug)]
struct Anonymous;

#[async_trait::async_trait]
impl RequestSigner for Anonymous {
    async fn sign(&self, _: &mut Attempt<'_>) -> Result<()> {
        Ok(())
    }

    fn sign_now(&self, _: &mut Attempt<'_>) -> Option<Result<()>> {
        Some(Ok(()))
    }
}

#[cfg(any(feature = "queue", feature = "blob"))]
/// What a Blob or Queue request signs; every field as sent, `""` when absent.
#[derive(Debug, Default)]
pub(crate) struct StorageRequest<'a> {
    /// The HTTP verb, upper case.
    pub method: &'a str,
    pub content_encoding: &'a str,
    pub content_language: &'a str,
    /// The body's length; 0 is signed as `""`.
    pub content_length: u64,
    pub content_md5: &'a str,
    pub content_type: &'a str,
    pub if_modified_since: &'a str,
    pub if_match: &'a str,
    pub if_none_match: &'a str,
    pub if_unmodified_since: &'a str,
    pub range: &'a str,
    /// The `Date` header: `""` when the request carries `x-ms-date` (the
    /// client always does; a server verifying a request signs what came).
    pub date: &'a str,
    /// Every `x-ms-*` header (`x-ms-date` and `x-ms-version` included), any order and case.
    pub ms_headers: &'a [(&'a str, &'a str)],
    /// The request URI's path as sent (percent-encoded), starting with `/`; for a
    /// path-style (emulator) URL it starts with the account name.
    pub path: &'a str,
    /// The query parameters, decoded, any order.
    pub query: &'a [(&'a str, &'a str)],
}

#[cfg(any(feature = "queue", feature = "blob"))]
impl StorageRequest<'_> {
    /// The string to sign, as the services build it.
    pub(crate) fn string_to_sign(&self, account: &str) -> String {
        let mut s = String::with_capacity(256 + self.path.len());
        let length = if self.content_length == 0 {
            String::new()
        } else {
            self.content_length.to_string()
        };
        for part in [
            self.method,
            self.content_encoding,
            self.content_language,
            &length,
            self.content_md5,
            self.content_type,
            self.date, // "" when the request sends x-ms-date.
            self.if_modified_since,
            self.if_match,
            self.if_none_match,
            self.if_unmodified_since,
            self.range,
        ] {
            s.push_str(part);
            s.push('\n');
        }

        self.push_canonicalized_headers(&mut s);
        s.push('/');
        s.push_str(account);
        s.push_str(self.path);
        let mut params: Vec<(String, Vec<&str>)> = Vec::new();
        for (name, value) in self.query {
            let name = name.to_ascii_lowercase();
            match params.iter_mut().find(|(n, _)| *n == name) {
                Some((_, values)) => values.push(value),
                None => params.push((name, vec![value])),
            }
        }
        params.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, mut values) in params {
            values.sort_unstable();
            s.push('\n');
            s.push_str(&name);
            s.push(':');
            s.push_str(&values.join(","));
        }
        s
    }

    /// The string to sign of Shared Key Lite for the Blob and Queue
    /// services: `VERB\nContent-MD5\nContent-Type\nDate\n`, the
    /// canonicalized `x-ms-` headers, then `/{account}{path}` with only the
    /// `comp` parameter (`?comp=list`). tablekit's clients do not sign it;
    /// the server verifies it for the clients that do.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn string_to_sign_lite(&self, account: &str) -> String {
        let mut s = String::with_capacity(128 + self.path.len());
        for part in [self.method, self.content_md5, self.content_type, self.date] {
            s.push_str(part);
            s.push('\n');
        }
        self.push_canonicalized_headers(&mut s);
        s.push('/');
        s.push_str(account);
        s.push_str(self.path);
        if let Some((_, comp)) = self
            .query
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("comp"))
        {
            s.push_str("?comp=");
            s.push_str(comp);
        }
        s
    }

    /// Every `x-ms-` header as `name:value\n`: names lower-cased and sorted,
    /// values with white space folded.
    fn push_canonicalized_headers(&self, s: &mut String) {
        let mut headers: Vec<(String, String)> = self
            .ms_headers
            .iter()
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), fold_whitespace(v)))
            .filter(|(n, _)| n.starts_with("x-ms-"))
            .collect();
        headers.sort();
        for (name, value) in &headers {
            s.push_str(name);
            s.push(':');
            s.push_str(value);
            s.push('\n');
        }
    }
}

#[cfg(any(feature = "queue", feature = "blob"))]
/// Header values are signed trimmed, with runs of white space folded to one space
/// (outside quoted strings, which these requests do not carry).
fn fold_whitespace(v: &str) -> String {
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(any(feature = "queue", feature = "blob"))]
/// The `Authorization` header value: `SharedKey {account}:{signature}`.
pub(crate) fn shared_key(account: &str, key: &AccountKey, request: &StorageRequest<'_>) -> String {
    authorization("SharedKey", account, key, &request.string_to_sign(account))
}

/// What a Shared Key signature covers, taken from the request as it will be sent.
pub(crate) struct StringToSign<'a> {
    /// The HTTP verb, upper case.
    pub method: &'a str,
    /// The `Content-MD5` header, or `""`.
    pub content_md5: &'a str,
    /// The `Content-Type` header, or `""`.
    pub content_type: &'a str,
    /// The `x-ms-date` header ([`rfc1123`]).
    pub date: &'a str,
    /// The request URI's path exactly as sent: percent-encoded, starting with `/`. For a
    /// path-style (emulator) URL it starts with the account: `/devstoreaccount1/Tables`.
    pub path: &'a str,
    /// The value of the `comp` query parameter, if the request has one.
    pub comp: Option<&'a str>,
}

impl StringToSign<'_> {
    /// Appends `CanonicalizedResource`: `/{account}{path}[?comp={comp}]`.
    fn push_canonicalized_resource(&self, out: &mut String, account: &str) {
        out.push('/');
        out.push_str(account);
        out.push_str(self.path);
        if let Some(comp) = self.comp {
            out.push_str("?comp=");
            out.push_str(comp);
        }
    }

    fn resource_len(&self, account: &str) -> usize {
        1 + account.len() + self.path.len() + self.comp.map_or(0, |c| 6 + c.len())
    }
}

/// The Table service's string to sign: for Shared Key
/// `VERB\nContent-MD5\nContent-Type\nDate\nCanonicalizedResource`, for Shared
/// Key Lite (`lite`) `Date\nCanonicalizedResource`. The one builder of both
/// directions: the client signs it, the server (`tablekit::server`) verifies it.
pub(crate) fn table_string_to_sign(account: &str, input: &StringToSign<'_>, lite: bool) -> String {
    let mut s = String::with_capacity(
        input.method.len()
            + input.content_md5.len()
            + input.content_type.len()
            + input.date.len()
            + input.resource_len(account)
            + 4,
    );
    if !lite {
        for part in [input.method, input.content_md5, input.content_type] {
            s.push_str(part);
            s.push('\n');
        }
    }
    s.push_str(input.date);
    s.push('\n');
    input.push_canonicalized_resource(&mut s, account);
    s
}

/// The `Authorization` header value for Shared Key:
/// `SharedKey {account}:{base64(HMAC-SHA256(key, string-to-sign))}`, over
/// [`table_string_to_sign`].
pub(crate) fn table_shared_key(
    account: &str,
    key: &AccountKey,
    input: &StringToSign<'_>,
) -> String {
    authorization(
        "SharedKey",
        account,
        key,
        &table_string_to_sign(account, input, false),
    )
}

/// The `Authorization` header value for Shared Key Lite:
/// `SharedKeyLite {account}:{signature}` over `Date\nCanonicalizedResource`.
pub(crate) fn table_shared_key_lite(
    account: &str,
    key: &AccountKey,
    input: &StringToSign<'_>,
) -> String {
    authorization(
        "SharedKeyLite",
        account,
        key,
        &table_string_to_sign(account, input, true),
    )
}

/// `{scheme} {account}:{base64(HMAC-SHA256(key, string_to_sign))}`.
pub(crate) fn authorization(
    scheme: &str,
    account: &str,
    key: &AccountKey,
    string_to_sign: &str,
) -> String {
    // 44 characters of base64 for a 32-byte HMAC-SHA256.
    let mut header = String::with_capacity(scheme.len() + account.len() + 46);
    header.push_str(scheme);
    header.push(' ');
    header.push_str(account);
    header.push(':');
    BASE64.encode_string(key.hmac_sha256(string_to_sign), &mut header);
    header
}

const DAY_NAMES: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTH_NAMES: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Formats a time for `x-ms-date`: RFC 1123 in GMT with English names, e.g.
/// `Sun, 22 Nov 2026 15:26:34 GMT`. One allocation, no locale.
pub(crate) fn rfc1123(now: DateTime<Utc>) -> String {
    let mut out = String::with_capacity(29);
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        DAY_NAMES[now.weekday().num_days_from_sunday() as usize],
        now.day(),
        MONTH_NAMES[now.month0() as usize],
        now.year(),
        now.hour(),
        now.minute(),
        now.second(),
    );
    out
}

/// The `x-ms-date` value of one second, formatted once per second per
/// thread: requests of the same second share it.
#[derive(Debug, Default)]
pub(crate) struct DateCache {
    second: Option<i64>,
    value: Option<HeaderValue>,
    /// How many times a value was formatted (the cache's whole point).
    formatted: u64,
}

impl DateCache {
    /// The header value for `now`: the cached one while the second is the same.
    #[cfg(test)]
    pub(crate) fn at(&mut self, now: DateTime<Utc>) -> HeaderValue {
        self.at_second(now.timestamp())
    }

    /// The header value for the second `second` of the Unix epoch: the
    /// cached one while it is the same (checked without any calendar work).
    pub(crate) fn at_second(&mut self, second: i64) -> HeaderValue {
        match &self.value {
            Some(v) if self.second == Some(second) => v.clone(),
            _ => {
                let now = DateTime::from_timestamp(second, 0).unwrap_or_default();
                // RFC 1123 text is ASCII: always a valid header value.
                let v = HeaderValue::from_str(&rfc1123(now))
                    .unwrap_or_else(|_| HeaderValue::from_static(""));
                self.second = Some(second);
                self.value = Some(v.clone());
                self.formatted += 1;
                v
            }
        }
    }
}

thread_local! {
    static DATE: std::cell::RefCell<DateCache> = std::cell::RefCell::new(DateCache::default());
}

/// The `x-ms-date` header value for now, from this thread's [`DateCache`].
pub(crate) fn x_ms_date() -> HeaderValue {
    // The second from the system clock, as `Utc::now()` reads it, without
    // building a calendar date on every request.
    let second = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    DATE.with(|c| c.borrow_mut().at_second(second))
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;

    use super::*;

    #[cfg(any(feature = "queue", feature = "blob"))]
    const DEV_KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    #[cfg(any(feature = "queue", feature = "blob"))]
    fn put_message() -> StorageRequest<'static> {
        StorageRequest {
            method: "POST",
            content_length: 81,
            content_type: "application/xml",
            ms_headers: &[
                ("x-ms-version", "2019-02-02"),
                ("X-MS-Date", "Mon, 23 Nov 2026 10:00:00 GMT"),
                ("x-ms-client-request-id", "  a   b "),
                ("Content-Type", "ignored: not x-ms"),
            ],
            path: "/devstoreaccount1/jobs/messages",
            query: &[("visibilitytimeout", "30"), ("messagettl", "60")],
            ..Default::default()
        }
    }

    #[cfg(any(feature = "queue", feature = "blob"))]
    #[test]
    fn string_to_sign_has_the_services_layout() {
        assert_eq!(
            put_message().string_to_sign("devstoreaccount1"),
            "POST\n\n\n81\n\napplication/xml\n\n\n\n\n\n\n\
             x-ms-client-request-id:a b\n\
             x-ms-date:Mon, 23 Nov 2026 10:00:00 GMT\n\
             x-ms-version:2019-02-02\n\
             /devstoreaccount1/devstoreaccount1/jobs/messages\n\
             messagettl:60\n\
             visibilitytimeout:30"
        );
    }

    #[cfg(any(feature = "queue", feature = "blob"))]
    #[test]
    fn zero_length_is_signed_empty_and_repeated_parameters_join_sorted() {
        let req = StorageRequest {
            method: "GET",
            path: "/acc/c",
            query: &[
                ("comp", "list"),
                ("Include", "metadata"),
                ("include", "copy"),
            ],
            ..Default::default()
        };
        assert_eq!(
            req.string_to_sign("acc"),
            "GET\n\n\n\n\n\n\n\n\n\n\n\n/acc/acc/c\ncomp:list\ninclude:copy,metadata"
        );
    }

    #[cfg(any(feature = "queue", feature = "blob"))]
    #[test]
    fn signature_matches_an_independent_hmac() {
        // Computed separately: base64(HMAC-SHA256(base64decode(DEV_KEY), string_to_sign))
        // with Python's hmac module over the string asserted above.
        let key = AccountKey::from_base64(DEV_KEY).unwrap();
        let header = shared_key("devstoreaccount1", &key, &put_message());
        assert_eq!(
            header,
            format!("SharedKey devstoreaccount1:{}", EXPECTED_SIGNATURE)
        );
    }

    #[cfg(any(feature = "queue", feature = "blob"))]
    const EXPECTED_SIGNATURE: &str = "NJW6dqEvKML3a97fAAYzQcCDo8+qr6a2dwYgXXiByPg=";

    /// The emulator's published key; every expected signature below was computed with it.
    const KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
    const DATE: &str = "Sun, 22 Nov 2026 15:26:34 GMT";

    fn key() -> AccountKey {
        AccountKey::from_base64(KEY).expect("the test key is valid base64")
    }

    #[test]
    fn the_date_header_is_formatted_once_per_second() {
        let mut cache = DateCache::default();
        let t = Utc.with_ymd_and_hms(2026, 11, 22, 15, 26, 34).unwrap();
        let first = cache.at(t);
        assert_eq!(first, DATE);
        let later = cache.at(t + chrono::Duration::milliseconds(999));
        assert_eq!(later, DATE);
        assert_eq!(cache.formatted, 1, "the same second is not formatted again");
        let next = cache.at(t + chrono::Duration::seconds(1));
        assert_eq!(next, "Sun, 22 Nov 2026 15:26:35 GMT");
        assert_eq!(cache.formatted, 2);
        // A clock that steps back gets its own (correct) value too.
        assert_eq!(cache.at(t), DATE);
        assert_eq!(x_ms_date().len(), DATE.len());
        // The header of now, read from the system clock without chrono.
        let before = rfc1123(Utc::now());
        let now = x_ms_date();
        let after = rfc1123(Utc::now());
        assert!(now == before.as_str() || now == after.as_str(), "{now:?}");
    }

    #[test]
    fn a_cloned_key_signs_like_the_original() {
        let k = key();
        let copy = k.clone();
        assert_eq!(
            authorization("SharedKey", "a", &k, "text"),
            authorization("SharedKey", "a", &copy, "text")
        );
        // Each signature starts from the bare key: signing twice gives the same result.
        assert_eq!(
            authorization("SharedKey", "a", &k, "text"),
            authorization("SharedKey", "a", &k, "text")
        );
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
            .single()
            .expect("a valid test date")
    }

    fn input<'a>(
        method: &'a str,
        content_type: &'a str,
        path: &'a str,
        comp: Option<&'a str>,
    ) -> StringToSign<'a> {
        StringToSign {
            method,
            content_md5: "",
            content_type,
            date: DATE,
            path,
            comp,
        }
    }

    // Expected values: python3 -c 'import hmac,hashlib,base64;
    //   print(base64.b64encode(hmac.new(base64.b64decode(KEY), STRING_TO_SIGN.encode(),
    //   hashlib.sha256).digest()).decode())'
    // with STRING_TO_SIGN written out in each test's comment.

    #[cfg(any(feature = "queue", feature = "blob"))]
    #[test]
    fn shared_key_signs_verb_type_date_and_resource() {
        // "PUT\n\napplication/json\nSun, 22 Nov 2026 15:26:34 GMT\n/myaccount/mytable(PartitionKey='a%20b',RowKey='1')"
        let header = table_shared_key(
            "myaccount",
            &key(),
            &input(
                "PUT",
                "application/json",
                "/mytable(PartitionKey='a%20b',RowKey='1')",
                None,
            ),
        );
        assert_eq!(
            header,
            "SharedKey myaccount:0H/Q2f0hZrCrsvjP4ZsEueo07253QYs/yJ6H/2GjJPc="
        );
    }

    #[cfg(any(feature = "queue", feature = "blob"))]
    #[test]
    fn shared_key_appends_comp_to_the_resource() {
        // "GET\n\n\nSun, 22 Nov 2026 15:26:34 GMT\n/myaccount/?comp=properties"
        let header = table_shared_key(
            "myaccount",
            &key(),
            &input("GET", "", "/", Some("properties")),
        );
        assert_eq!(
            header,
            "SharedKey myaccount:8UzkFx0hOuGjR6DpjeqcDl2I/7T/ixKQiOccOwiLFmw="
        );
    }

    #[test]
    fn shared_key_lite_on_a_path_style_url_repeats_the_account() {
        // "Sun, 22 Nov 2026 15:26:34 GMT\n/devstoreaccount1/devstoreaccount1/Tables"
        let header = table_shared_key_lite(
            "devstoreaccount1",
            &key(),
            &input("POST", "application/json", "/devstoreaccount1/Tables", None),
        );
        assert_eq!(
            header,
            "SharedKeyLite devstoreaccount1:gJ+3La8I11pupdmUFkhGh2XYfB5c47w/UuQEscFeg8Q="
        );
    }

    #[test]
    fn shared_key_lite_appends_comp_to_the_resource() {
        // "Sun, 22 Nov 2026 15:26:34 GMT\n/myaccount/mytable?comp=acl"
        let header = table_shared_key_lite(
            "myaccount",
            &key(),
            &input("GET", "", "/mytable", Some("acl")),
        );
        assert_eq!(
            header,
            "SharedKeyLite myaccount:Rc6pdnIzyf/D9Iu4Eeb+3aJcl2HbwvGRSVbzEbhsh9E="
        );
    }

    #[test]
    fn rfc1123_uses_english_names_and_gmt() {
        // Expected values from python3 email.utils.format_datetime(d, usegmt=True).
        assert_eq!(rfc1123(utc(2026, 11, 22, 15, 26, 34)), DATE);
        assert_eq!(
            rfc1123(utc(2009, 4, 30, 20, 45, 13)),
            "Thu, 30 Apr 2009 20:45:13 GMT"
        );
        assert_eq!(
            rfc1123(utc(2024, 2, 29, 0, 0, 5)),
            "Thu, 29 Feb 2024 00:00:05 GMT"
        );
    }
}
