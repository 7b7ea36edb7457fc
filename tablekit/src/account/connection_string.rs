//! Parsing a storage connection string into an [`Account`].

use std::str::FromStr;

use super::credential::{decode_key, Credential, SasToken};
use super::endpoints::{Account, AccountInner, Endpoint, DEFAULT_ENDPOINT_SUFFIX};
use crate::error::{Error, Result};

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
}

impl FromStr for Account {
    type Err = Error;

    /// Same as [`Account::from_connection_string`].
    fn from_str(s: &str) -> Result<Self> {
        Account::from_connection_string(s)
    }
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
pub(super) struct ConnectionString<'a> {
    values: [Option<(usize, &'a str)>; Setting::ALL.len()],
}

impl<'a> ConnectionString<'a> {
    pub(super) fn parse(s: &'a str) -> Result<Self> {
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

    pub(super) fn into_account(self) -> Result<Account> {
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
            target: None,
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
    use crate::account::endpoints::DEV_KEY;

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
}
