//! [`Account`]: a storage account's name, its service endpoints and its
//! credential, and the validation of an endpoint.

use std::fmt;
use std::sync::Arc;

use super::credential::{AccountKey, Credential};
use crate::error::{Error, Result};

/// The name of the emulator's built-in account.
const DEV_ACCOUNT: &str = "devstoreaccount1";

/// The emulator's well-known account key, decoded. It is published in the Azurite
/// documentation as `Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==`;
/// the bytes are spelled out so that [`Account::development`] cannot fail
/// (`dev_key_matches_published_base64` checks them).
pub(super) const DEV_KEY: [u8; 64] = [
    0x11, 0xbc, 0xbc, 0xbd, 0xd3, 0x34, 0xdb, 0x13, 0x4e, 0x72, 0xa1, 0x65, 0xa9, 0x4c, 0x09, 0x3c,
    0xb9, 0x66, 0x12, 0xd9, 0x42, 0x0d, 0x72, 0x75, 0x39, 0x4c, 0xc5, 0x4f, 0x9d, 0x2e, 0x49, 0x16,
    0x7a, 0x20, 0x5b, 0x2e, 0x16, 0xad, 0x94, 0x54, 0x4a, 0xc2, 0xcf, 0x82, 0x3a, 0xb6, 0xaf, 0xca,
    0xd5, 0x26, 0x45, 0x3d, 0x33, 0xad, 0xaf, 0xf2, 0x81, 0x1c, 0x17, 0xa4, 0xb2, 0x81, 0x8c, 0x1b,
];

/// The emulator's ports, in the order table, queue, blob.
const DEV_PORTS: [u16; 3] = [10002, 10001, 10000];

pub(super) const DEFAULT_ENDPOINT_SUFFIX: &str = "core.windows.net";

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
pub(super) struct AccountInner {
    pub(super) name: String,
    pub(super) table_endpoint: Option<String>,
    pub(super) queue_endpoint: Option<String>,
    pub(super) blob_endpoint: Option<String>,
    pub(super) credential: Credential,
    /// The service behind the table endpoint, when said explicitly.
    pub(super) target: Option<Target>,
}

/// The service behind an account's table endpoint: Azure Table Storage (and
/// Azurite), or the Azure Cosmos DB Table API, whose limits and features differ
/// (guide chapter 6). It decides which limits the client enforces before any
/// I/O and which Microsoft Entra ID scope a bearer token is asked for.
///
/// [`Account::target`] recognises Cosmos DB endpoints
/// (`https://{account}.table.cosmos.azure.com`, `….table.cosmosdb.azure.com`,
/// and the same under other clouds' domains); say it explicitly with
/// [`Account::with_target`] for anything else (the Cosmos DB emulator, a proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// Azure Table Storage, or an emulator of it (Azurite).
    AzureStorage,
    /// The Azure Cosmos DB Table API.
    CosmosDb,
}

impl Target {
    /// The target an endpoint's host implies: Cosmos DB for
    /// `*.table.cosmos.*` and `*.table.cosmosdb.*` (the test the Python SDK
    /// makes), Azure Storage otherwise.
    pub(super) fn of_host(host: &str) -> Target {
        let host = host.to_ascii_lowercase();
        if host.contains(".table.cosmos.") || host.contains(".table.cosmosdb.") {
            Target::CosmosDb
        } else {
            Target::AzureStorage
        }
    }

    /// The Entra ID scope of a token for this target.
    pub fn token_scope(self) -> &'static str {
        match self {
            Target::AzureStorage => super::entra::STORAGE_SCOPE,
            Target::CosmosDb => super::entra::COSMOS_SCOPE,
        }
    }
}

impl Account {
    /// Refuses, before any request, a credential the account's target cannot
    /// take: on Cosmos DB, a SAS that names a stored access policy (`si`),
    /// since the Cosmos DB Table API has no stored access policies.
    pub(crate) fn check_credential_for_target(&self) -> crate::Result<()> {
        if self.target() != Target::CosmosDb {
            return Ok(());
        }
        if let super::Credential::Sas(sas) = self.credential() {
            let names_a_policy = sas
                .as_query()
                .split('&')
                .any(|pair| pair.split('=').next() == Some("si"));
            if names_a_policy {
                return Err(crate::Error::invalid(
                    crate::error::ValidationError::CosmosDb {
                        reason: "the account's SAS names a stored access policy (si), and \
                                 Cosmos DB has no stored access policies: use a SAS that \
                                 carries its own permissions and expiry"
                            .to_owned(),
                    },
                ));
            }
        }
        Ok(())
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

    pub(super) fn development_at(scheme: &str, host: &str) -> Self {
        let [table, queue, blob] =
            DEV_PORTS.map(|port| format!("{scheme}://{host}:{port}/{DEV_ACCOUNT}"));
        Account::from_inner(AccountInner {
            name: DEV_ACCOUNT.to_owned(),
            table_endpoint: Some(table),
            queue_endpoint: Some(queue),
            blob_endpoint: Some(blob),
            credential: Credential::SharedKey(AccountKey::from_bytes(&DEV_KEY)),
            target: None,
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
            target: None,
        }))
    }

    pub(super) fn from_inner(inner: AccountInner) -> Self {
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

    /// The service behind the table endpoint: as set with
    /// [`with_target`](Account::with_target), else recognised from the
    /// endpoint's host (see [`Target`]).
    ///
    /// ```
    /// use tablekit::account::Target;
    /// use tablekit::{Account, Credential};
    ///
    /// let cosmos = Account::new("acc", "https://acc.table.cosmos.azure.com:443/", Credential::Anonymous)?;
    /// assert_eq!(cosmos.target(), Target::CosmosDb);
    /// assert_eq!(Account::development().target(), Target::AzureStorage);
    /// // The Cosmos DB emulator answers on localhost: say so.
    /// let emulator = Account::new("localhost", "https://localhost:8902", Credential::Anonymous)?
    ///     .with_target(Target::CosmosDb);
    /// assert_eq!(emulator.target(), Target::CosmosDb);
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    pub fn target(&self) -> Target {
        if let Some(target) = self.inner.target {
            return target;
        }
        self.inner
            .table_endpoint
            .as_deref()
            .and_then(|e| Endpoint::parse(e).ok())
            .map_or(Target::AzureStorage, |e| Target::of_host(&e.host))
    }

    /// The same account with its table endpoint's service said explicitly.
    #[must_use]
    pub fn with_target(mut self, target: Target) -> Self {
        Arc::make_mut(&mut self.inner).target = Some(target);
        self
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
            .field("target", &self.target())
            .finish()
    }
}

/// A validated endpoint: `http(s)://host[:port][/path]`, without a trailing `/`.
///
/// Checked here rather than by a general URL parser, as strictly as the
/// WHATWG rules the `url` crate applies and stricter where a storage endpoint
/// never needs more: the host is a DNS name (letters, digits, `-`, `_`), a
/// dotted IPv4 address or a bracketed IPv6 address, never percent-encoded or
/// international; the path holds only the characters RFC 3986 allows, with
/// valid percent escapes and no `.` or `..` segment. What passes is also a
/// valid [`http::Uri`], the form every transport sends.
pub(super) struct Endpoint {
    pub(super) text: String,
    pub(super) https: bool,
    /// The host in lower case (IPv6 literals keep their brackets).
    pub(super) host: String,
    /// The first path segment, if any (`devstoreaccount1` of a path-style URL).
    first_segment: Option<String>,
}

impl Endpoint {
    pub(super) fn parse(text: &str) -> std::result::Result<Self, &'static str> {
        let text = text.trim();
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
        // `http:///host` is not read as `http://host`: a connection string means no host.
        if rest.is_empty() || rest.starts_with(['/', ':']) {
            return Err("has no host");
        }
        if rest.contains(char::is_whitespace) {
            return Err("contains whitespace");
        }
        let text = &text[..text.len() - (text.len() - text.trim_end_matches('/').len())];
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.contains('@') {
            return Err("must not contain user information (`user@`)");
        }
        let (host, port) = split_host_port(authority)?;
        let host = checked_host(host)?;
        if let Some(port) = port {
            // An empty port is the scheme's default, as in any URL.
            if !port.is_empty()
                && (!port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err())
            {
                return Err("has an invalid port");
            }
        }
        check_path(path)?;
        if http::Uri::try_from(text).is_err() {
            return Err("is not a valid URL (check the host name)");
        }
        let first_segment = path
            .split('/')
            .nth(1)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        Ok(Endpoint {
            text: text.to_owned(),
            https,
            host,
            first_segment,
        })
    }

    /// The account name implied by the endpoint of `service` (`table`, `queue`,
    /// `blob`): `{name}` in `{name}.table.…` (or `{name}.privatelink.table.…`), else
    /// the first path segment (`/devstoreaccount1`).
    pub(super) fn account_name(&self, service: &str) -> Option<&str> {
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

/// `host` and the text after its `:` (if any) of an authority.
fn split_host_port(authority: &str) -> std::result::Result<(&str, Option<&str>), &'static str> {
    if authority.starts_with('[') {
        let end = authority.find(']').ok_or(NOT_A_URL)?;
        let (host, after) = authority.split_at(end + 1);
        return match after.strip_prefix(':') {
            Some(port) => Ok((host, Some(port))),
            None if after.is_empty() => Ok((host, None)),
            None => Err(NOT_A_URL),
        };
    }
    Ok(match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

const NOT_A_URL: &str = "is not a valid URL (check the host name)";

/// The host, checked and in lower case: `[IPv6]` (in its canonical form), a
/// dotted IPv4 address (a name whose last label is a number is read as one,
/// as browsers and the `url` crate do, and must be a valid one), or a DNS name.
fn checked_host(host: &str) -> std::result::Result<String, &'static str> {
    if host.is_empty() {
        return Err("has no host");
    }
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or(NOT_A_URL)?;
        let address: std::net::Ipv6Addr = inner.parse().map_err(|_| NOT_A_URL)?;
        return Ok(format!("[{address}]"));
    }
    let labels_ok = host.split('.').all(|label| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    if !labels_ok {
        return Err(NOT_A_URL);
    }
    let last = host.rsplit('.').next().unwrap_or(host);
    let hex = last
        .strip_prefix("0x")
        .or_else(|| last.strip_prefix("0X"))
        .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_hexdigit()));
    if hex || last.bytes().all(|b| b.is_ascii_digit()) {
        let address: std::net::Ipv4Addr = host.parse().map_err(|_| NOT_A_URL)?;
        return Ok(address.to_string());
    }
    Ok(host.to_ascii_lowercase())
}

/// The path (empty or starting with `/`) holds only RFC 3986 path characters
/// with valid percent escapes, and no `.` or `..` segment (which a URL
/// parser would resolve, so the request would not go where the text says).
fn check_path(path: &str) -> std::result::Result<(), &'static str> {
    const BAD_PATH: &str = "is not a valid URL (its path holds a character a URL does not allow)";
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let escape = bytes.get(i + 1..i + 3).ok_or(BAD_PATH)?;
                if !escape.iter().all(u8::is_ascii_hexdigit) {
                    return Err(BAD_PATH);
                }
                i += 3;
                continue;
            }
            b if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b) => {}
            _ => return Err(BAD_PATH),
        }
        i += 1;
    }
    if path
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Err("must not contain `.` or `..` path segments");
    }
    Ok(())
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    const KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

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
    fn dev_key_matches_published_base64() {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(KEY)
            .expect("valid base64");
        assert_eq!(decoded, DEV_KEY);
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

    fn endpoint(text: &str) -> Endpoint {
        match Endpoint::parse(text) {
            Ok(e) => e,
            Err(why) => panic!("{text:?} should parse: {why}"),
        }
    }

    #[test]
    fn endpoint_hosts_are_names_or_addresses_in_lower_case() {
        let e = endpoint("HTTPS://MyAcc.Table.core.windows.net/");
        assert_eq!(e.text, "HTTPS://MyAcc.Table.core.windows.net");
        assert!(e.https);
        assert_eq!(e.host, "myacc.table.core.windows.net");
        assert_eq!(e.account_name("table"), Some("myacc"));
        let e = endpoint("http://[0:0::1]:10002/devstoreaccount1");
        assert_eq!(e.host, "[::1]");
        assert_eq!(e.account_name("table"), Some("devstoreaccount1"));
        let e = endpoint("http://127.0.0.1:/devstoreaccount1/x");
        assert_eq!((e.host.as_str(), e.https), ("127.0.0.1", false));
        assert_eq!(e.first_segment.as_deref(), Some("devstoreaccount1"));
        assert_eq!(
            endpoint("http://azurite_1:10002/a%41b")
                .first_segment
                .as_deref(),
            Some("a%41b")
        );
        for bad in [
            "http://256.0.0.1/x",
            "http://1.2.3/x",
            "http://10.0.0.0x1/x",
            "http://[::g]/x",
            "http://[::1/x",
            "http://[::1]x/y",
            "http://a..b/x",
            "http://exa%41mple.com/x",
            "http://ex\u{e4}mple.com/x",
            "http://a!b.com/x",
        ] {
            assert_eq!(Endpoint::parse(bad).err(), Some(NOT_A_URL), "{bad}");
        }
    }

    #[test]
    fn endpoint_ports_and_paths_are_checked() {
        for bad in [
            "http://a:+1/x",
            "http://a:abc",
            "http://a:65536/x",
            "http://a:-1",
        ] {
            assert_eq!(
                Endpoint::parse(bad).err(),
                Some("has an invalid port"),
                "{bad}"
            );
        }
        for bad in [
            "http://a/\"q",
            "http://a/{x}",
            "http://a/%zz",
            "http://a/b%4",
            "http://a/\u{e9}",
        ] {
            let why = Endpoint::parse(bad).err().unwrap_or_default();
            assert!(why.contains("its path holds a character"), "{bad}: {why}");
        }
        for bad in ["http://a/b/../c", "http://a/./c"] {
            let why = Endpoint::parse(bad).err().unwrap_or_default();
            assert!(why.contains("`.` or `..`"), "{bad}: {why}");
        }
        assert_eq!(
            Endpoint::parse("http://u@a/x").err(),
            Some("must not contain user information (`user@`)")
        );
        // What passes is a URI the transports can send.
        for good in ["http://a/b~c/d;e=f/@:x", "https://a.b:443/p%20q"] {
            let e = endpoint(good);
            assert!(e.text.parse::<http::Uri>().is_ok(), "{good}");
        }
    }
}
