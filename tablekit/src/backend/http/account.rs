//! Accounts and credentials (documented where `tablekit::account` re-exports them).

use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use base64::Engine as _;

use crate::error::{Error, Result};

/// The name of the emulator's built-in account.
const DEV_ACCOUNT: &str = "devstoreaccount1";

/// The emulator's well-known account key, decoded. It is published in the Azurite
/// documentation as `Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==`;
/// the bytes are spelled out so that [`Account::development`] cannot fail
/// (`dev_key_matches_published_base64` checks them).
const DEV_KEY: [u8; 64] = [
    0x11, 0xbc, 0xbc, 0xbd, 0xd3, 0x34, 0xdb, 0x13, 0x4e, 0x72, 0xa1, 0x65, 0xa9, 0x4c, 0x09, 0x3c,
    0xb9, 0x66, 0x12, 0xd9, 0x42, 0x0d, 0x72, 0x75, 0x39, 0x4c, 0xc5, 0x4f, 0x9d, 0x2e, 0x49, 0x16,
    0x7a, 0x20, 0x5b, 0x2e, 0x16, 0xad, 0x94, 0x54, 0x4a, 0xc2, 0xcf, 0x82, 0x3a, 0xb6, 0xaf, 0xca,
    0xd5, 0x26, 0x45, 0x3d, 0x33, 0xad, 0xaf, 0xf2, 0x81, 0x1c, 0x17, 0xa4, 0xb2, 0x81, 0x8c, 0x1b,
];

/// The emulator's ports, in the order table, queue, blob.
const DEV_PORTS: [u16; 3] = [10002, 10001, 10000];

const DEFAULT_ENDPOINT_SUFFIX: &str = "core.windows.net";

/// A storage account: its name, its service endpoints and the credential that signs
/// requests to it.
///
/// Cloning is cheap (one reference count), so clients can each keep their own copy.
///
/// Build one with [`Account::from_connection_string`] (or [`str::parse`]),
/// [`Account::development`] for the Azurite emulator, or [`Account::new`].
///
/// ```
/// use tablekit::{Account, Credential};
///
/// let account = Account::new(
///     "myaccount",
///     "https://myaccount.table.core.windows.net/",
///     Credential::Anonymous,
/// )?;
/// assert_eq!(account.account_name(), "myaccount");
/// assert_eq!(account.table_endpoint(), Some("https://myaccount.table.core.windows.net"));
/// # Ok::<(), tablekit::Error>(())
/// ```
#[derive(Clone)]
pub struct Account {
    inner: Arc<AccountInner>,
}

#[derive(Clone)]
struct AccountInner {
    name: String,
    table_endpoint: Option<String>,
    queue_endpoint: Option<String>,
    blob_endpoint: Option<String>,
    credential: Credential,
}

impl Account {
    /// Parses a storage connection string.
    ///
    /// A connection string is a list of `Setting=value` segments separated by `;`.
    /// Setting names are matched case-insensitively; values may contain `=` (as base64
    /// keys and SAS tokens do); empty segments and a trailing `;` are ignored. The
    /// settings are:
    ///
    /// | setting | meaning |
    /// |---|---|
    /// | `UseDevelopmentStorage=true` | the Azurite emulator, as [`Account::development`]; only `DevelopmentStorageProxyUri` may accompany it |
    /// | `DevelopmentStorageProxyUri` | scheme and host that replace `http://127.0.0.1` for the emulator |
    /// | `DefaultEndpointsProtocol` | `https` (the default) or `http`, for derived endpoints |
    /// | `AccountName` | the account name |
    /// | `AccountKey` | the base64 account key: requests are signed with [`Credential::SharedKey`] |
    /// | `EndpointSuffix` | the DNS suffix of derived endpoints, `core.windows.net` by default |
    /// | `TableEndpoint`, `QueueEndpoint`, `BlobEndpoint` | explicit endpoints, `http://` or `https://` |
    /// | `FileEndpoint` | accepted (the Azure portal writes it) and ignored |
    /// | `SharedAccessSignature` | a SAS token: requests carry [`Credential::Sas`]; a leading `?` is stripped |
    ///
    /// Endpoints: without an explicit endpoint, each one is derived as
    /// `{protocol}://{AccountName}.{table|queue|blob}.{EndpointSuffix}`. As soon as any
    /// `*Endpoint` setting is given, only the given endpoints are set (the others are then
    /// `None`: a connection string with only a `QueueEndpoint` serves a queue client,
    /// and a table client built on it is refused with a configuration error).
    ///
    /// Account name: `AccountName`, or else derived from the first of `TableEndpoint`,
    /// `QueueEndpoint` and `BlobEndpoint` that is given: the first DNS label of a host of
    /// the form `{name}.table.…` (`.queue.`, `.blob.`; or `{name}.privatelink.table.…`),
    /// otherwise the first path segment of a path-style endpoint such as
    /// `http://127.0.0.1:10002/devstoreaccount1`.
    ///
    /// Credential: `AccountKey` wins when both `AccountKey` and `SharedAccessSignature`
    /// are present, because the key can do everything the SAS can. With neither, the
    /// account is [`Credential::Anonymous`].
    ///
    /// # Errors
    ///
    /// A configuration error (see [`crate::error::ConfigError`]) that names the offending segment
    /// or setting: a segment without `=`, an unknown or repeated setting, an invalid value,
    /// an `AccountKey` that is not base64, or a missing `AccountName`. The message never
    /// contains the account key or the SAS token.
    ///
    /// ```
    /// use tablekit::Account;
    ///
    /// let account = Account::from_connection_string(
    ///     "TableEndpoint=https://myaccount.table.core.windows.net/;SharedAccessSignature=?sv=2019-02-02&tn=orders&sig=abc",
    /// )?;
    /// assert_eq!(account.account_name(), "myaccount");
    /// println!("{:?}", account.table_endpoint());
    ///
    /// let err = Account::from_connection_string("AccountName=myaccount;Foo=1").unwrap_err();
    /// assert!(err.to_string().contains("unknown setting `Foo`"));
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    pub fn from_connection_string(s: &str) -> Result<Self> {
        ConnectionString::parse(s)?.into_account()
    }

    /// The Azurite emulator's built-in account `devstoreaccount1`, signed with its
    /// well-known key, at `http://127.0.0.1:10002/devstoreaccount1` (tables),
    /// `http://127.0.0.1:10001/devstoreaccount1` (queues) and
    /// `http://127.0.0.1:10000/devstoreaccount1` (blobs).
    ///
    /// The same as the connection string `UseDevelopmentStorage=true`.
    ///
    /// ```
    /// let dev = tablekit::Account::development();
    /// assert_eq!(dev.account_name(), "devstoreaccount1");
    /// assert_eq!(dev.queue_endpoint(), Some("http://127.0.0.1:10001/devstoreaccount1"));
    /// ```
    pub fn development() -> Self {
        Self::development_at("http", "127.0.0.1")
    }

    fn development_at(scheme: &str, host: &str) -> Self {
        let [table, queue, blob] =
            DEV_PORTS.map(|port| format!("{scheme}://{host}:{port}/{DEV_ACCOUNT}"));
        Account::from_inner(AccountInner {
            name: DEV_ACCOUNT.to_owned(),
            table_endpoint: Some(table),
            queue_endpoint: Some(queue),
            blob_endpoint: Some(blob),
            credential: Credential::SharedKey(AccountKey::from_bytes(&DEV_KEY)),
        })
    }

    /// An account with an explicit table endpoint and no queue or blob endpoint.
    ///
    /// A trailing `/` of the endpoint is removed. For a path-style endpoint (the
    /// emulator) the endpoint includes the account: `http://127.0.0.1:10002/devstoreaccount1`.
    ///
    /// # Errors
    ///
    /// A configuration error if the account name is empty, or the endpoint does not start
    /// with `http://` or `https://`, has no host, or contains a query string.
    pub fn new(
        account_name: impl Into<String>,
        table_endpoint: impl AsRef<str>,
        credential: Credential,
    ) -> Result<Self> {
        let name = account_name.into();
        if name.is_empty() {
            return Err(Error::config("the account name is empty"));
        }
        let table_endpoint = Endpoint::parse(table_endpoint.as_ref())
            .map_err(|why| Error::config(format!("the table endpoint {why}")))?
            .text;
        Ok(Account::from_inner(AccountInner {
            name,
            table_endpoint: Some(table_endpoint),
            queue_endpoint: None,
            blob_endpoint: None,
            credential,
        }))
    }

    fn from_inner(inner: AccountInner) -> Self {
        Account {
            inner: Arc::new(inner),
        }
    }

    /// The account name, as used in SharedKey signatures.
    pub fn account_name(&self) -> &str {
        &self.inner.name
    }

    /// The Table service endpoint, without a trailing `/`, when known: a
    /// connection string that names only a `QueueEndpoint` or a `BlobEndpoint`
    /// has none, and a table client refuses such an account when it is built.
    pub fn table_endpoint(&self) -> Option<&str> {
        self.inner.table_endpoint.as_deref()
    }

    /// The Queue service endpoint, without a trailing `/`, when known.
    pub fn queue_endpoint(&self) -> Option<&str> {
        self.inner.queue_endpoint.as_deref()
    }

    /// The Blob service endpoint, without a trailing `/`, when known.
    pub fn blob_endpoint(&self) -> Option<&str> {
        self.inner.blob_endpoint.as_deref()
    }

    /// The credential that authorizes requests.
    pub fn credential(&self) -> &Credential {
        &self.inner.credential
    }

    /// The same account with another credential, e.g. a SAS made from its key, or
    /// [`Credential::SharedKeyLite`] instead of [`Credential::SharedKey`].
    ///
    /// ```
    /// use tablekit::{Account, Credential};
    ///
    /// let anonymous = Account::development().with_credential(Credential::Anonymous);
    /// assert!(matches!(anonymous.credential(), Credential::Anonymous));
    /// ```
    #[must_use]
    pub fn with_credential(mut self, credential: Credential) -> Self {
        Arc::make_mut(&mut self.inner).credential = credential;
        self
    }
}

impl FromStr for Account {
    type Err = Error;

    /// Same as [`Account::from_connection_string`].
    fn from_str(s: &str) -> Result<Self> {
        Account::from_connection_string(s)
    }
}

impl fmt::Debug for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &*self.inner;
        f.debug_struct("Account")
            .field("name", &inner.name)
            .field("table_endpoint", &inner.table_endpoint)
            .field("queue_endpoint", &inner.queue_endpoint)
            .field("blob_endpoint", &inner.blob_endpoint)
            .field("credential", &inner.credential)
            .finish()
    }
}

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
    /// An OAuth bearer token from Microsoft Entra ID, fetched per request from the
    /// [`TokenCredential`].
    Bearer(Arc<dyn TokenCredential>),
    /// No authorization: only useful for public resources or proxies that add it.
    Anonymous,
}

impl Credential {
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
    /// use tablekit::AccountKey;
    ///
    /// let key = AccountKey::from_base64("c2VjcmV0")?;
    /// assert_eq!(format!("{key:?}"), "AccountKey(***)");
    /// assert!(AccountKey::from_base64("not base64!").is_err());
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    pub fn from_base64(text: &str) -> Result<Self> {
        decode_key(text).map_err(|why| Error::config(format!("the account key {why}")))
    }

    fn from_bytes(bytes: &[u8]) -> Self {
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

    /// A fresh HMAC-SHA256 keyed with this key (a clone of the one set up at decoding).
    pub(crate) fn mac(&self) -> Hmac<Sha256> {
        self.mac.clone()
    }
}

/// Decodes a key; the error says why without quoting the input (the `base64` crate's
/// own messages quote the offending byte).
fn decode_key(text: &str) -> std::result::Result<AccountKey, &'static str> {
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
    /// use tablekit::SasToken;
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

/// A source of OAuth bearer tokens (Microsoft Entra ID), for [`Credential::Bearer`].
///
/// tablekit calls [`bearer_token`](TokenCredential::bearer_token) before every request
/// and sends `Authorization: Bearer <token>`, so the implementation is expected to cache
/// the token and refresh it shortly before it expires, rather than fetch one per call.
/// The token must be for the `https://storage.azure.com/.default` scope.
///
/// tablekit never prints a `TokenCredential` (its `Debug` is required only so that
/// containing types can derive `Debug`); still, do not put the token in it.
///
/// ```
/// use tablekit::{Account, Credential, TokenCredential};
/// use std::sync::Arc;
///
/// #[derive(Debug)]
/// struct Fixed;
///
/// #[async_trait::async_trait]
/// impl TokenCredential for Fixed {
///     async fn bearer_token(&self) -> tablekit::Result<String> {
///         Ok("eyJ0eXAi...".to_owned())
///     }
/// }
///
/// let account = Account::new(
///     "myaccount",
///     "https://myaccount.table.core.windows.net",
///     Credential::Bearer(Arc::new(Fixed)),
/// )?;
/// # Ok::<(), tablekit::Error>(())
/// ```
#[async_trait::async_trait]
pub trait TokenCredential: Send + Sync + std::fmt::Debug {
    /// A currently valid access token, without the `Bearer ` prefix.
    async fn bearer_token(&self) -> Result<String>;
}

/// A validated endpoint: `http(s)://host[:port][/path]`, without a trailing `/`.
struct Endpoint {
    text: String,
    https: bool,
    /// The host as the `url` crate parsed it (IPv6 literals keep their brackets).
    host: String,
    /// The first path segment, if any (`devstoreaccount1` of a path-style URL).
    first_segment: Option<String>,
}

impl Endpoint {
    fn parse(text: &str) -> std::result::Result<Self, &'static str> {
        let text = text.trim();
        // The checks that `url` would accept or word less helpfully come first.
        let (https, rest) = if let Some(rest) = strip_prefix_ignore_case(text, "https://") {
            (true, rest)
        } else if let Some(rest) = strip_prefix_ignore_case(text, "http://") {
            (false, rest)
        } else {
            return Err("must start with http:// or https://");
        };
        if rest.contains(['?', '#']) {
            return Err(
                "must not contain a query string or fragment (put a SAS in SharedAccessSignature)",
            );
        }
        let rest = rest.trim_end_matches('/');
        // `url` reads `http:///host` as `http://host`; a connection string means no host.
        if rest.is_empty() || rest.starts_with(['/', ':']) {
            return Err("has no host");
        }
        if rest.contains(char::is_whitespace) {
            return Err("contains whitespace");
        }
        let text = &text[..text.len() - (text.len() - text.trim_end_matches('/').len())];
        let url = url::Url::parse(text).map_err(|e| match e {
            url::ParseError::EmptyHost => "has no host",
            url::ParseError::InvalidPort => "has an invalid port",
            _ => "is not a valid URL (check the host name)",
        })?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err("must not contain user information (`user@`)");
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or("has no host")?;
        let first_segment = url
            .path_segments()
            .and_then(|mut segments| segments.next())
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        Ok(Endpoint {
            text: text.to_owned(),
            https,
            host: host.to_owned(),
            first_segment,
        })
    }

    /// The account name implied by the endpoint of `service` (`table`, `queue`,
    /// `blob`): `{name}` in `{name}.table.…` (or `{name}.privatelink.table.…`), else
    /// the first path segment (`/devstoreaccount1`).
    fn account_name(&self, service: &str) -> Option<&str> {
        if !is_ip_or_localhost(&self.host) {
            let mut labels = self.host.split('.');
            let first = labels.next().filter(|l| !l.is_empty());
            if labels.any(|l| l.eq_ignore_ascii_case(service)) {
                return first;
            }
        }
        self.first_segment.as_deref()
    }
}

fn is_ip_or_localhost(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.starts_with('[')
        || host.parse::<std::net::Ipv4Addr>().is_ok()
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// The settings a connection string may hold.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Setting {
    UseDevelopmentStorage,
    DevelopmentStorageProxyUri,
    DefaultEndpointsProtocol,
    AccountName,
    AccountKey,
    EndpointSuffix,
    TableEndpoint,
    QueueEndpoint,
    BlobEndpoint,
    FileEndpoint,
    SharedAccessSignature,
}

impl Setting {
    const ALL: [Setting; 11] = [
        Setting::UseDevelopmentStorage,
        Setting::DevelopmentStorageProxyUri,
        Setting::DefaultEndpointsProtocol,
        Setting::AccountName,
        Setting::AccountKey,
        Setting::EndpointSuffix,
        Setting::TableEndpoint,
        Setting::QueueEndpoint,
        Setting::BlobEndpoint,
        Setting::FileEndpoint,
        Setting::SharedAccessSignature,
    ];

    fn name(self) -> &'static str {
        match self {
            Setting::UseDevelopmentStorage => "UseDevelopmentStorage",
            Setting::DevelopmentStorageProxyUri => "DevelopmentStorageProxyUri",
            Setting::DefaultEndpointsProtocol => "DefaultEndpointsProtocol",
            Setting::AccountName => "AccountName",
            Setting::AccountKey => "AccountKey",
            Setting::EndpointSuffix => "EndpointSuffix",
            Setting::TableEndpoint => "TableEndpoint",
            Setting::QueueEndpoint => "QueueEndpoint",
            Setting::BlobEndpoint => "BlobEndpoint",
            Setting::FileEndpoint => "FileEndpoint",
            Setting::SharedAccessSignature => "SharedAccessSignature",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Setting::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name))
    }
}

/// Text from a connection string that is quoted in an error only if it looks like a
/// setting name: a stray fragment of a key or SAS must never be echoed.
fn quotable(text: &str) -> Option<&str> {
    let looks_like_a_name = !text.is_empty()
        && text.len() <= 32
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    looks_like_a_name.then_some(text)
}

/// One connection string, split into settings; each value remembers its segment number.
struct ConnectionString<'a> {
    values: [Option<(usize, &'a str)>; Setting::ALL.len()],
}

impl<'a> ConnectionString<'a> {
    fn parse(s: &'a str) -> Result<Self> {
        let mut values = [None; Setting::ALL.len()];
        for (index, segment) in s.split(';').enumerate() {
            let number = index + 1;
            let segment = segment.trim();
            if segment.is_empty() {
                continue;
            }
            let Some((name, value)) = segment.split_once('=') else {
                return Err(Error::config(match quotable(segment) {
                    Some(text) => format!("connection string segment {number} (`{text}`) has no '='; expected Setting=value"),
                    None => format!("connection string segment {number} has no '='; expected Setting=value (the text is not shown: it may hold a secret)"),
                }));
            };
            let name = name.trim();
            let Some(setting) = Setting::from_name(name) else {
                let known = Setting::ALL.map(Setting::name).join(", ");
                return Err(Error::config(match quotable(name) {
                    Some(name) => format!("connection string segment {number}: unknown setting `{name}`; expected one of {known}"),
                    None => format!("connection string segment {number}: unknown setting (the name is not shown: it may hold a secret); expected one of {known}"),
                }));
            };
            let slot = &mut values[setting as usize];
            if let Some((first, _)) = slot {
                return Err(Error::config(format!(
                    "connection string segment {number}: {} appears twice (first in segment {first})",
                    setting.name()
                )));
            }
            *slot = Some((number, value.trim()));
        }
        Ok(ConnectionString { values })
    }

    fn get(&self, setting: Setting) -> Option<(usize, &'a str)> {
        self.values[setting as usize]
    }

    /// An error about one setting's value. Values are never quoted: two of them are secrets.
    fn invalid(&self, setting: Setting, why: &str) -> Error {
        let segment = self.get(setting).map_or(0, |(number, _)| number);
        Error::config(format!(
            "connection string segment {segment}: {} {why}",
            setting.name()
        ))
    }

    fn endpoint(&self, setting: Setting) -> Result<Option<Endpoint>> {
        self.get(setting)
            .map(|(_, value)| Endpoint::parse(value).map_err(|why| self.invalid(setting, why)))
            .transpose()
    }

    fn into_account(self) -> Result<Account> {
        if let Some((_, value)) = self.get(Setting::UseDevelopmentStorage) {
            if value.eq_ignore_ascii_case("true") {
                return self.development_account();
            }
            if !value.eq_ignore_ascii_case("false") {
                return Err(
                    self.invalid(Setting::UseDevelopmentStorage, "must be `true` or `false`")
                );
            }
        }
        if let Some((number, _)) = self.get(Setting::DevelopmentStorageProxyUri) {
            return Err(Error::config(format!(
                "connection string segment {number}: DevelopmentStorageProxyUri needs UseDevelopmentStorage=true"
            )));
        }

        let https = match self.get(Setting::DefaultEndpointsProtocol) {
            None => true,
            Some((_, p)) if p.eq_ignore_ascii_case("https") => true,
            Some((_, p)) if p.eq_ignore_ascii_case("http") => false,
            Some(_) => {
                return Err(self.invalid(
                    Setting::DefaultEndpointsProtocol,
                    "must be `https` or `http`",
                ))
            }
        };
        let suffix = match self.get(Setting::EndpointSuffix) {
            None => DEFAULT_ENDPOINT_SUFFIX,
            Some((_, s)) => {
                let s = s.trim_matches(|c| c == '.' || c == '/');
                if s.is_empty() || s.contains(|c: char| c.is_whitespace() || c == '/') {
                    return Err(self.invalid(
                        Setting::EndpointSuffix,
                        "must be a DNS suffix such as core.windows.net",
                    ));
                }
                s
            }
        };
        let explicit_name = match self.get(Setting::AccountName) {
            Some((_, "")) => return Err(self.invalid(Setting::AccountName, "is empty")),
            Some((_, name)) if name.contains(|c: char| c.is_whitespace() || c == '/') => {
                return Err(self.invalid(Setting::AccountName, "must not contain whitespace or '/'"))
            }
            Some((_, name)) => Some(name),
            None => None,
        };

        let table = self.endpoint(Setting::TableEndpoint)?;
        let queue = self.endpoint(Setting::QueueEndpoint)?;
        let blob = self.endpoint(Setting::BlobEndpoint)?;
        self.endpoint(Setting::FileEndpoint)?;
        let any_explicit = table.is_some() || queue.is_some() || blob.is_some();

        let named_by = [
            (&table, "table", "TableEndpoint"),
            (&queue, "queue", "QueueEndpoint"),
            (&blob, "blob", "BlobEndpoint"),
        ]
        .into_iter()
        .find_map(|(e, service, setting)| e.as_ref().map(|e| (e, service, setting)));
        let name = match (explicit_name, named_by) {
            (Some(name), _) => name.to_owned(),
            (None, Some((endpoint, service, setting))) => endpoint
                .account_name(service)
                .map(str::to_owned)
                .ok_or_else(|| {
                    Error::config(format!(
                        "missing AccountName: it cannot be derived from {setting} \
                         (expected a host `{{name}}.{service}.…` or a path `/{{name}}`)"
                    ))
                })?,
            (None, None) => {
                return Err(Error::config(
                    "missing AccountName (or TableEndpoint): the connection string does not say which account to use",
                ))
            }
        };

        let scheme = if https { "https" } else { "http" };
        let derived = |service: &str| format!("{scheme}://{name}.{service}.{suffix}");
        // As soon as one endpoint is explicit, none is derived: a connection string
        // for a queue alone (QueueEndpoint + SAS) names no table endpoint.
        let (table_endpoint, queue_endpoint, blob_endpoint) = if any_explicit {
            (
                table.map(|e| e.text),
                queue.map(|e| e.text),
                blob.map(|e| e.text),
            )
        } else {
            (
                Some(derived("table")),
                Some(derived("queue")),
                Some(derived("blob")),
            )
        };

        let credential = self.credential()?;
        Ok(Account::from_inner(AccountInner {
            name,
            table_endpoint,
            queue_endpoint,
            blob_endpoint,
            credential,
        }))
    }

    fn credential(&self) -> Result<Credential> {
        // AccountKey wins over SharedAccessSignature: the key can do all the SAS can.
        if let Some((_, key)) = self.get(Setting::AccountKey) {
            return decode_key(key)
                .map(Credential::SharedKey)
                .map_err(|why| self.invalid(Setting::AccountKey, why));
        }
        if let Some((_, sas)) = self.get(Setting::SharedAccessSignature) {
            let token = SasToken::new(sas);
            if token.as_query().is_empty() {
                return Err(self.invalid(Setting::SharedAccessSignature, "is empty"));
            }
            return Ok(Credential::Sas(token));
        }
        Ok(Credential::Anonymous)
    }

    fn development_account(&self) -> Result<Account> {
        let allowed = [
            Setting::UseDevelopmentStorage,
            Setting::DevelopmentStorageProxyUri,
        ];
        if let Some((setting, (number, _))) = Setting::ALL
            .into_iter()
            .filter(|s| !allowed.contains(s))
            .find_map(|s| self.get(s).map(|v| (s, v)))
        {
            return Err(Error::config(format!(
                "connection string segment {number}: {} cannot be combined with UseDevelopmentStorage=true",
                setting.name()
            )));
        }
        let Some(proxy) = self.endpoint(Setting::DevelopmentStorageProxyUri)? else {
            return Ok(Account::development());
        };
        let host = proxy.host.as_str();
        let scheme = if proxy.https { "https" } else { "http" };
        Ok(Account::development_at(scheme, host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
    const SAS: &str = "sv=2019-02-02&tn=orders&sp=r&se=2030-01-01T00%3A00%3A00Z&sig=SECRETSIG%3D";

    fn parse(s: &str) -> Account {
        match Account::from_connection_string(s) {
            Ok(account) => account,
            Err(e) => panic!("{s:?} should parse: {e}"),
        }
    }

    /// The error message for `s`, checked to be a config error that quotes no secret.
    fn error(s: &str) -> String {
        let e = match Account::from_connection_string(s) {
            Ok(account) => panic!("{s:?} should fail, got {account:?}"),
            Err(e) => e,
        };
        assert!(matches!(e.kind(), crate::ErrorKind::Config(_)), "{e:?}");
        let message = e.to_string();
        for secret in [KEY, &KEY[..20], "SECRETSIG", "sig="] {
            assert!(!message.contains(secret), "{message:?} leaks {secret:?}");
        }
        message
    }

    fn key_of(credential: &Credential) -> &[u8] {
        match credential {
            Credential::SharedKey(key) => key.as_bytes(),
            other => panic!("expected SharedKey, got {other:?}"),
        }
    }

    #[test]
    fn account_is_cheap_to_share_across_tasks() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<Account>();
        assert_send_sync::<Credential>();
    }

    #[test]
    fn setting_slots_follow_declaration_order() {
        for (index, setting) in Setting::ALL.into_iter().enumerate() {
            assert_eq!(setting as usize, index, "{setting:?}");
            assert_eq!(
                Setting::from_name(&setting.name().to_uppercase()),
                Some(setting)
            );
        }
    }

    #[test]
    fn dev_key_matches_published_base64() {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(KEY)
            .expect("valid base64");
        assert_eq!(decoded, DEV_KEY);
    }

    #[test]
    fn use_development_storage_is_the_emulator_account() {
        for s in [
            "UseDevelopmentStorage=true",
            "usedevelopmentstorage=TRUE;",
            " UseDevelopmentStorage = true ; ;",
        ] {
            let account = parse(s);
            assert_eq!(account.account_name(), "devstoreaccount1");
            assert_eq!(
                account.table_endpoint().unwrap(),
                "http://127.0.0.1:10002/devstoreaccount1"
            );
            assert_eq!(
                account.queue_endpoint(),
                Some("http://127.0.0.1:10001/devstoreaccount1")
            );
            assert_eq!(
                account.blob_endpoint(),
                Some("http://127.0.0.1:10000/devstoreaccount1")
            );
            assert_eq!(key_of(account.credential()), DEV_KEY);
        }
        let dev = Account::development();
        assert_eq!(
            dev.table_endpoint().unwrap(),
            "http://127.0.0.1:10002/devstoreaccount1"
        );
        assert_eq!(key_of(dev.credential()), DEV_KEY);
    }

    #[test]
    fn development_storage_proxy_replaces_scheme_and_host() {
        let account = parse(
            "UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://ipv4.fiddler:8888/",
        );
        assert_eq!(
            account.table_endpoint().unwrap(),
            "http://ipv4.fiddler:10002/devstoreaccount1"
        );
        assert_eq!(
            account.blob_endpoint(),
            Some("http://ipv4.fiddler:10000/devstoreaccount1")
        );
        let message = error("UseDevelopmentStorage=true;DevelopmentStorageProxyUri=ipv4.fiddler");
        assert!(
            message.contains("segment 2: DevelopmentStorageProxyUri must start with http://"),
            "{message}"
        );
        let message = error("AccountName=a;DevelopmentStorageProxyUri=http://proxy");
        assert!(
            message
                .contains("segment 2: DevelopmentStorageProxyUri needs UseDevelopmentStorage=true"),
            "{message}"
        );
    }

    #[test]
    fn use_development_storage_rejects_other_settings_and_values() {
        let message = error(&format!("UseDevelopmentStorage=true;AccountKey={KEY}"));
        assert!(
            message.contains(
                "segment 2: AccountKey cannot be combined with UseDevelopmentStorage=true"
            ),
            "{message}"
        );
        let message = error("UseDevelopmentStorage=yes");
        assert!(
            message.contains("segment 1: UseDevelopmentStorage must be `true` or `false`"),
            "{message}"
        );
        let account = parse("UseDevelopmentStorage=false;AccountName=myaccount");
        assert_eq!(
            account.table_endpoint().unwrap(),
            "https://myaccount.table.core.windows.net"
        );
    }

    #[test]
    fn account_name_and_key_derive_https_endpoints() {
        let account: Account = format!("AccountName=myaccount;AccountKey={KEY}")
            .parse()
            .expect("parses");
        assert_eq!(account.account_name(), "myaccount");
        assert_eq!(
            account.table_endpoint().unwrap(),
            "https://myaccount.table.core.windows.net"
        );
        assert_eq!(
            account.queue_endpoint(),
            Some("https://myaccount.queue.core.windows.net")
        );
        assert_eq!(
            account.blob_endpoint(),
            Some("https://myaccount.blob.core.windows.net")
        );
        assert_eq!(key_of(account.credential()), DEV_KEY);
    }

    #[test]
    fn protocol_and_endpoint_suffix_shape_derived_endpoints() {
        let account = parse(&format!(
            "DefaultEndpointsProtocol=HTTP;AccountName=myaccount;AccountKey={KEY};EndpointSuffix=core.chinacloudapi.cn"
        ));
        assert_eq!(
            account.table_endpoint().unwrap(),
            "http://myaccount.table.core.chinacloudapi.cn"
        );
        let account =
            parse("DefaultEndpointsProtocol=https;AccountName=a1;EndpointSuffix=.example.org/");
        assert_eq!(
            account.table_endpoint().unwrap(),
            "https://a1.table.example.org"
        );
        let message = error("DefaultEndpointsProtocol=ftp;AccountName=a");
        assert!(
            message.contains("segment 1: DefaultEndpointsProtocol must be `https` or `http`"),
            "{message}"
        );
        let message = error("AccountName=a;EndpointSuffix=bad suffix");
        assert!(
            message.contains("segment 2: EndpointSuffix must be a DNS suffix"),
            "{message}"
        );
    }

    #[test]
    fn explicit_endpoints_override_and_are_the_only_ones_set() {
        let account = parse(&format!(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={KEY};\
             TableEndpoint=http://127.0.0.1:10002/devstoreaccount1/;"
        ));
        assert_eq!(account.account_name(), "devstoreaccount1");
        assert_eq!(
            account.table_endpoint().unwrap(),
            "http://127.0.0.1:10002/devstoreaccount1"
        );
        assert_eq!(account.queue_endpoint(), None);
        assert_eq!(account.blob_endpoint(), None);

        let account = parse(
            "TableEndpoint=https://x.table.core.windows.net;QueueEndpoint=https://x.queue.core.windows.net/;\
             BlobEndpoint=https://x.blob.core.windows.net;FileEndpoint=https://x.file.core.windows.net",
        );
        assert_eq!(
            account.queue_endpoint(),
            Some("https://x.queue.core.windows.net")
        );
        assert_eq!(
            account.blob_endpoint(),
            Some("https://x.blob.core.windows.net")
        );
    }

    #[test]
    fn a_queue_or_blob_endpoint_alone_sets_only_that_endpoint() {
        let blob_only = parse("AccountName=a;BlobEndpoint=https://a.blob.core.windows.net");
        assert_eq!(
            blob_only.blob_endpoint(),
            Some("https://a.blob.core.windows.net")
        );
        assert_eq!(blob_only.table_endpoint(), None);
        assert_eq!(blob_only.queue_endpoint(), None);

        // The account name comes from the queue endpoint when nothing else names it.
        let queue_only = parse(&format!(
            "QueueEndpoint=https://jobsacct.queue.core.windows.net/;SharedAccessSignature={SAS}"
        ));
        assert_eq!(queue_only.account_name(), "jobsacct");
        assert_eq!(
            queue_only.queue_endpoint(),
            Some("https://jobsacct.queue.core.windows.net")
        );
        assert_eq!(queue_only.table_endpoint(), None);
        let emulator = parse("QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1");
        assert_eq!(emulator.account_name(), "devstoreaccount1");

        // A host that is not `{name}.blob.…` names no account.
        let message = error("BlobEndpoint=https://files.contoso.com");
        assert!(message.contains("missing AccountName"), "{message}");
        assert!(message.contains("BlobEndpoint"), "{message}");
    }

    #[test]
    fn account_name_is_derived_from_the_table_endpoint() {
        let cases = [
            ("https://myaccount.table.core.windows.net", "myaccount"),
            ("https://myaccount.table.cosmos.azure.com:443/", "myaccount"),
            (
                "https://myaccount.privatelink.table.core.windows.net",
                "myaccount",
            ),
            (
                "http://127.0.0.1:10002/devstoreaccount1",
                "devstoreaccount1",
            ),
            (
                "http://localhost:10002/devstoreaccount1/",
                "devstoreaccount1",
            ),
            ("http://[::1]:10002/other", "other"),
            ("http://azurite:10002/devstoreaccount1", "devstoreaccount1"),
        ];
        for (endpoint, name) in cases {
            let account = parse(&format!("TableEndpoint={endpoint};AccountKey={KEY}"));
            assert_eq!(account.account_name(), name, "{endpoint}");
            assert_eq!(
                account.table_endpoint().unwrap(),
                endpoint.trim_end_matches('/')
            );
        }
        let message = error(&format!(
            "TableEndpoint=https://tables.contoso.com;AccountKey={KEY}"
        ));
        assert!(message.contains("missing AccountName"), "{message}");
        let message = error(&format!(
            "TableEndpoint=http://127.0.0.1:10002;AccountKey={KEY}"
        ));
        assert!(message.contains("missing AccountName"), "{message}");
    }

    #[test]
    fn missing_account_name_is_an_error() {
        let message = error(&format!("AccountKey={KEY}"));
        assert!(message.contains("missing AccountName"), "{message}");
        let message = error("");
        assert!(message.contains("missing AccountName"), "{message}");
        let message = error("AccountName=;");
        assert!(
            message.contains("segment 1: AccountName is empty"),
            "{message}"
        );
    }

    #[test]
    fn shared_access_signature_becomes_a_sas_credential() {
        let account = parse(&format!(
            "TableEndpoint=https://myaccount.table.core.windows.net;SharedAccessSignature=?{SAS}"
        ));
        match account.credential() {
            Credential::Sas(token) => assert_eq!(token.as_query(), SAS),
            other => panic!("expected a SAS, got {other:?}"),
        }
        let message = error("AccountName=a;SharedAccessSignature=?");
        assert!(
            message.contains("segment 2: SharedAccessSignature is empty"),
            "{message}"
        );
    }

    #[test]
    fn account_key_wins_over_shared_access_signature() {
        let account = parse(&format!(
            "AccountName=a;SharedAccessSignature={SAS};AccountKey={KEY}"
        ));
        assert_eq!(key_of(account.credential()), DEV_KEY);
    }

    #[test]
    fn no_key_and_no_sas_is_anonymous() {
        let account = parse("AccountName=a");
        assert!(matches!(account.credential(), Credential::Anonymous));
    }

    #[test]
    fn invalid_account_key_names_the_segment_without_echoing_it() {
        let broken = format!("{}!{}", &KEY[..40], &KEY[41..]);
        let message = error(&format!("AccountName=a;AccountKey={broken}"));
        assert!(
            message.contains("segment 2: AccountKey is not valid base64"),
            "{message}"
        );
        assert!(!message.contains(&broken[..20]), "{message}");
        let message = error(&format!("AccountName=a;AccountKey={}", &KEY[..87]));
        assert!(
            message.contains("AccountKey is not valid base64"),
            "{message}"
        );
        let message = error("AccountName=a;AccountKey=");
        assert!(message.contains("AccountKey is empty"), "{message}");
    }

    #[test]
    fn segment_without_equals_is_named() {
        let message = error("AccountName=a;;Foo");
        assert!(
            message.contains("segment 3 (`Foo`) has no '='"),
            "{message}"
        );
        // A stray piece of a key is not quoted.
        let message = error(&format!("AccountName=a;{}", &KEY[..40]));
        assert!(message.contains("segment 2 has no '='"), "{message}");
        assert!(!message.contains(&KEY[..40]), "{message}");
    }

    #[test]
    fn unknown_setting_is_named() {
        let message = error("AccountName=a;Foo=bar");
        assert!(
            message.contains("segment 2: unknown setting `Foo`"),
            "{message}"
        );
        assert!(
            message.contains("AccountKey"),
            "lists the known settings: {message}"
        );
        // A key pasted without its `AccountKey=` splits at its '=' padding: not quoted.
        let message = error(&format!("AccountName=a;{KEY}"));
        assert!(
            message.contains("segment 2: unknown setting (the name is not shown"),
            "{message}"
        );
    }

    #[test]
    fn repeated_setting_is_named() {
        let message = error("AccountName=a;accountname=b");
        assert!(
            message.contains("segment 2: AccountName appears twice (first in segment 1)"),
            "{message}"
        );
    }

    #[test]
    fn malformed_endpoints_are_named_without_quoting_them() {
        let message = error("TableEndpoint=myaccount.table.core.windows.net");
        assert!(
            message.contains("segment 1: TableEndpoint must start with http:// or https://"),
            "{message}"
        );
        let message = error(&format!(
            "TableEndpoint=https://a.table.core.windows.net/?{SAS}"
        ));
        assert!(
            message.contains("segment 1: TableEndpoint must not contain a query string"),
            "{message}"
        );
        let message = error("AccountName=a;QueueEndpoint=https://");
        assert!(
            message.contains("segment 2: QueueEndpoint has no host"),
            "{message}"
        );
    }

    #[test]
    fn endpoints_are_checked_by_a_real_url_parser() {
        let message = error("TableEndpoint=http://127.0.0.1:99999/devstoreaccount1");
        assert!(
            message.contains("TableEndpoint has an invalid port"),
            "{message}"
        );
        let message = error("TableEndpoint=http://user:pw@127.0.0.1:10002/devstoreaccount1");
        assert!(
            message.contains("must not contain user information"),
            "{message}"
        );
        assert!(!message.contains("pw"), "{message}");
        let message = error("TableEndpoint=http://exa<mple.com/a");
        assert!(message.contains("is not a valid URL"), "{message}");
        // IPv6 literals and ports parse; the account comes from the path.
        let account = parse(&format!(
            "TableEndpoint=http://[::1]:10002/devstoreaccount1;AccountKey={KEY}"
        ));
        assert_eq!(account.account_name(), "devstoreaccount1");
        assert_eq!(
            account.table_endpoint().unwrap(),
            "http://[::1]:10002/devstoreaccount1"
        );
    }

    #[test]
    fn new_validates_the_endpoint() {
        let account = Account::new(
            "a",
            "HTTPS://a.table.core.windows.net//",
            Credential::Anonymous,
        )
        .expect("valid");
        assert_eq!(
            account.table_endpoint().unwrap(),
            "HTTPS://a.table.core.windows.net"
        );
        assert_eq!(account.queue_endpoint(), None);
        for bad in [
            "a.table.core.windows.net",
            "ftp://x",
            "https://",
            "https://x/?sig=1",
        ] {
            assert!(
                Account::new("a", bad, Credential::Anonymous).is_err(),
                "{bad}"
            );
        }
        assert!(Account::new("", "https://x", Credential::Anonymous).is_err());
    }

    #[test]
    fn with_credential_leaves_clones_and_endpoints_alone() {
        let dev = Account::development();
        let anonymous = dev.clone().with_credential(Credential::Anonymous);
        assert!(matches!(anonymous.credential(), Credential::Anonymous));
        assert_eq!(
            anonymous.table_endpoint().unwrap(),
            dev.table_endpoint().unwrap()
        );
        assert_eq!(key_of(dev.credential()), DEV_KEY);
    }

    #[derive(Debug)]
    struct LeakyTokens {
        #[allow(dead_code)]
        token: &'static str,
    }

    #[async_trait::async_trait]
    impl TokenCredential for LeakyTokens {
        async fn bearer_token(&self) -> Result<String> {
            Ok(self.token.to_owned())
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
            Credential::Bearer(Arc::new(LeakyTokens { token: "SECRETSIG" })),
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
