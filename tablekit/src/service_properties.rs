//! The settings of a whole service (analytics logging, hour and minute
//! metrics, CORS rules) and the table service's replication stats. Tables,
//! queues and blobs share the one shape: [`ServiceProperties`].
//!
//! ```
//! # async fn run() -> tablekit::Result<()> {
//! use tablekit::service_properties::{CorsRule, Metrics, ServiceProperties};
//! use tablekit::TableServiceClient;
//!
//! let service = TableServiceClient::embedded();
//! let mut settings = ServiceProperties::default();
//! settings.hour_metrics = Some(Metrics::enabled(true, Some(7)));
//! settings.cors = Some(vec![CorsRule::new(["https://www.contoso.com"], ["GET", "PUT"], 3600)]);
//! service.set_service_properties(&settings).await?;
//!
//! let read = service.service_properties().await?;
//! assert_eq!(read.hour_metrics, settings.hour_metrics);
//! assert_eq!(read.cors.as_ref().map(Vec::len), Some(1));
//! # Ok(()) }
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
//! ```
//!
//! A set changes only the parts it carries (`None` leaves a part as it is),
//! as the service does. The embedded store keeps the settings in memory and
//! returns them; it writes no logs or metrics and answers no CORS preflight.

use chrono::{DateTime, Utc};

use crate::error::{Error, Result, ValidationError};

/// The most CORS rules one service holds.
pub const MAX_CORS_RULES: usize = 5;

/// The longest retention the service accepts, in days.
pub const MAX_RETENTION_DAYS: u32 = 365;

/// A service's settings, as Get/Set Service Properties carry them. `None`
/// parts are left out of a set (and so left unchanged) and are what a get
/// returns for a part the service did not send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServiceProperties {
    /// Storage analytics logging.
    pub logging: Option<Logging>,
    /// Hourly aggregated metrics.
    pub hour_metrics: Option<Metrics>,
    /// Per-minute metrics.
    pub minute_metrics: Option<Metrics>,
    /// CORS rules, at most five; `Some(vec![])` removes every rule.
    pub cors: Option<Vec<CorsRule>>,
}

/// Which requests storage analytics logs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Logging {
    /// The analytics version, `1.0`.
    pub version: String,
    /// Log delete requests.
    pub delete: bool,
    /// Log read requests.
    pub read: bool,
    /// Log write requests.
    pub write: bool,
    /// How many days logs are kept (1 to 365); `None` keeps them until deleted.
    pub retention_days: Option<u32>,
}

impl Logging {
    /// Logging of the requests chosen, kept `retention_days` days.
    pub fn new(read: bool, write: bool, delete: bool, retention_days: Option<u32>) -> Self {
        Logging {
            version: "1.0".to_owned(),
            delete,
            read,
            write,
            retention_days,
        }
    }
}

impl Default for Logging {
    /// Nothing logged.
    fn default() -> Self {
        Logging::new(false, false, false, None)
    }
}

/// Hour or minute metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// The analytics version, `1.0`.
    pub version: String,
    /// Whether metrics are collected.
    pub enabled: bool,
    /// Whether they include per-API figures; the service needs it set when
    /// metrics are enabled.
    pub include_apis: Option<bool>,
    /// How many days metrics are kept (1 to 365); `None` keeps them until deleted.
    pub retention_days: Option<u32>,
}

impl Metrics {
    /// Metrics collected, with or without per-API figures, kept `retention_days` days.
    pub fn enabled(include_apis: bool, retention_days: Option<u32>) -> Self {
        Metrics {
            version: "1.0".to_owned(),
            enabled: true,
            include_apis: Some(include_apis),
            retention_days,
        }
    }

    /// No metrics.
    pub fn disabled() -> Self {
        Metrics {
            version: "1.0".to_owned(),
            enabled: false,
            include_apis: None,
            retention_days: None,
        }
    }
}

impl Default for Metrics {
    /// No metrics.
    fn default() -> Self {
        Metrics::disabled()
    }
}

/// One CORS rule: which origins may call the service from a browser, with
/// which methods and headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CorsRule {
    /// Origins allowed (`*` for any).
    pub allowed_origins: Vec<String>,
    /// HTTP methods allowed (`GET`, `PUT`, ...).
    pub allowed_methods: Vec<String>,
    /// Request headers allowed.
    pub allowed_headers: Vec<String>,
    /// Response headers exposed to the browser.
    pub exposed_headers: Vec<String>,
    /// How long a browser may cache the preflight answer, in seconds.
    pub max_age_seconds: u32,
}

impl CorsRule {
    /// A rule for these origins and methods, with no header allowed or exposed.
    pub fn new<O, M>(origins: O, methods: M, max_age_seconds: u32) -> Self
    where
        O: IntoIterator,
        O::Item: Into<String>,
        M: IntoIterator,
        M::Item: Into<String>,
    {
        CorsRule {
            allowed_origins: origins.into_iter().map(Into::into).collect(),
            allowed_methods: methods.into_iter().map(Into::into).collect(),
            allowed_headers: Vec::new(),
            exposed_headers: Vec::new(),
            max_age_seconds,
        }
    }
}

/// The replication state of the account's secondary location, from
/// [`TableServiceClient::service_stats`](crate::TableServiceClient::service_stats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceStats {
    pub(crate) status: GeoReplicationStatus,
    pub(crate) last_sync_time: Option<DateTime<Utc>>,
}

impl ServiceStats {
    /// Whether the secondary is live, bootstrapping or unavailable.
    pub fn status(&self) -> GeoReplicationStatus {
        self.status
    }

    /// Writes before this time are readable from the secondary; `None` when
    /// the service gives no time (while bootstrapping or unavailable).
    pub fn last_sync_time(&self) -> Option<DateTime<Utc>> {
        self.last_sync_time
    }
}

/// The state of geo-replication to the secondary location.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GeoReplicationStatus {
    /// The secondary is active and serving reads.
    Live,
    /// The initial synchronisation is in progress.
    Bootstrap,
    /// The secondary is unavailable.
    Unavailable,
}

/// Checks settings before any I/O: at most five CORS rules, retentions of 1
/// to 365 days, `include_apis` set for enabled metrics.
pub(crate) fn check(p: &ServiceProperties) -> Result<()> {
    let refuse = |reason: String| {
        Error::invalid(ValidationError::Settings {
            what: "service properties",
            reason,
        })
    };
    let days = |what: &str, d: Option<u32>| match d {
        Some(d) if d == 0 || d > MAX_RETENTION_DAYS => Err(refuse(format!(
            "the {what} retention is 1 to {MAX_RETENTION_DAYS} days, not {d}"
        ))),
        _ => Ok(()),
    };
    if let Some(l) = &p.logging {
        days("logging", l.retention_days)?;
    }
    for (what, m) in [
        ("hour metrics", &p.hour_metrics),
        ("minute metrics", &p.minute_metrics),
    ] {
        if let Some(m) = m {
            days(what, m.retention_days)?;
            if m.enabled && m.include_apis.is_none() {
                return Err(refuse(format!(
                    "enabled {what} need include_apis set (true or false)"
                )));
            }
        }
    }
    if let Some(rules) = &p.cors {
        if rules.len() > MAX_CORS_RULES {
            return Err(refuse(format!(
                "a service holds at most {MAX_CORS_RULES} CORS rules, not {}",
                rules.len()
            )));
        }
    }
    Ok(())
}

/// The `StorageServiceProperties` body of a set request.
pub(crate) fn encode(p: &ServiceProperties) -> String {
    use quick_xml::escape::escape;
    use std::fmt::Write as _;
    let retention = |xml: &mut String, days: Option<u32>| {
        match days {
            Some(d) => write!(
                xml,
                "<RetentionPolicy><Enabled>true</Enabled><Days>{d}</Days></RetentionPolicy>"
            ),
            None => write!(
                xml,
                "<RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>"
            ),
        }
        .expect("writing to a String");
    };
    let mut xml =
        String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><StorageServiceProperties>");
    if let Some(l) = &p.logging {
        let _ = write!(
            xml,
            "<Logging><Version>{}</Version><Delete>{}</Delete><Read>{}</Read><Write>{}</Write>",
            escape(l.version.as_str()),
            l.delete,
            l.read,
            l.write
        );
        retention(&mut xml, l.retention_days);
        xml.push_str("</Logging>");
    }
    for (tag, m) in [
        ("HourMetrics", &p.hour_metrics),
        ("MinuteMetrics", &p.minute_metrics),
    ] {
        if let Some(m) = m {
            let _ = write!(
                xml,
                "<{tag}><Version>{}</Version><Enabled>{}</Enabled>",
                escape(m.version.as_str()),
                m.enabled
            );
            if let Some(i) = m.include_apis {
                let _ = write!(xml, "<IncludeAPIs>{i}</IncludeAPIs>");
            }
            retention(&mut xml, m.retention_days);
            let _ = write!(xml, "</{tag}>");
        }
    }
    if let Some(rules) = &p.cors {
        xml.push_str("<Cors>");
        for r in rules {
            let list = |v: &[String]| escape(v.join(",").as_str()).into_owned();
            let _ = write!(
                xml,
                "<CorsRule><AllowedOrigins>{}</AllowedOrigins><AllowedMethods>{}</AllowedMethods>\
                 <MaxAgeInSeconds>{}</MaxAgeInSeconds><ExposedHeaders>{}</ExposedHeaders>\
                 <AllowedHeaders>{}</AllowedHeaders></CorsRule>",
                list(&r.allowed_origins),
                list(&r.allowed_methods),
                r.max_age_seconds,
                list(&r.exposed_headers),
                list(&r.allowed_headers)
            );
        }
        xml.push_str("</Cors>");
    }
    xml.push_str("</StorageServiceProperties>");
    xml
}

mod wire {
    //! The answers' XML, as serde reads it.
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(super) struct Properties {
        pub(super) logging: Option<Logging>,
        pub(super) hour_metrics: Option<Metrics>,
        pub(super) minute_metrics: Option<Metrics>,
        pub(super) cors: Option<Cors>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(super) struct Logging {
        pub(super) version: Option<String>,
        pub(super) delete: bool,
        pub(super) read: bool,
        pub(super) write: bool,
        pub(super) retention_policy: Option<Retention>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(super) struct Metrics {
        pub(super) version: Option<String>,
        pub(super) enabled: bool,
        #[serde(rename = "IncludeAPIs")]
        pub(super) include_apis: Option<bool>,
        pub(super) retention_policy: Option<Retention>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(super) struct Retention {
        pub(super) enabled: bool,
        pub(super) days: Option<u32>,
    }
    #[derive(serde::Deserialize)]
    pub(super) struct Cors {
        #[serde(rename = "CorsRule", default)]
        pub(super) rules: Vec<CorsRule>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(super) struct CorsRule {
        #[serde(default)]
        pub(super) allowed_origins: String,
        #[serde(default)]
        pub(super) allowed_methods: String,
        #[serde(default)]
        pub(super) allowed_headers: String,
        #[serde(default)]
        pub(super) exposed_headers: String,
        #[serde(default)]
        pub(super) max_age_in_seconds: u32,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(super) struct Stats {
        pub(super) geo_replication: GeoReplication,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(super) struct GeoReplication {
        pub(super) status: String,
        pub(super) last_sync_time: Option<String>,
    }
}

fn xml_text<'a>(body: &'a [u8], what: &str) -> Result<&'a str> {
    std::str::from_utf8(body)
        .map_err(|e| Error::decode_caused_by(format!("a {what} answer is not UTF-8"), e))
}

/// Reads a `StorageServiceProperties` answer.
pub(crate) fn decode(body: &[u8]) -> Result<ServiceProperties> {
    let text = xml_text(body, "service properties")?;
    let p: wire::Properties = quick_xml::de::from_str(text).map_err(|e| {
        Error::decode_caused_by("a service properties answer is not the expected XML", e)
    })?;
    let days = |r: Option<wire::Retention>| r.filter(|r| r.enabled).and_then(|r| r.days);
    let version = |v: Option<String>| v.unwrap_or_else(|| "1.0".to_owned());
    let metrics = |m: wire::Metrics| Metrics {
        version: version(m.version),
        enabled: m.enabled,
        include_apis: m.include_apis,
        retention_days: days(m.retention_policy),
    };
    let list = |s: String| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };
    Ok(ServiceProperties {
        logging: p.logging.map(|l| Logging {
            version: version(l.version),
            delete: l.delete,
            read: l.read,
            write: l.write,
            retention_days: days(l.retention_policy),
        }),
        hour_metrics: p.hour_metrics.map(metrics),
        minute_metrics: p.minute_metrics.map(metrics),
        cors: p.cors.map(|c| {
            c.rules
                .into_iter()
                .map(|r| CorsRule {
                    allowed_origins: list(r.allowed_origins),
                    allowed_methods: list(r.allowed_methods),
                    allowed_headers: list(r.allowed_headers),
                    exposed_headers: list(r.exposed_headers),
                    max_age_seconds: r.max_age_in_seconds,
                })
                .collect()
        }),
    })
}

/// Reads a `StorageServiceStats` answer.
pub(crate) fn decode_stats(body: &[u8]) -> Result<ServiceStats> {
    let text = xml_text(body, "service stats")?;
    let s: wire::Stats = quick_xml::de::from_str(text).map_err(|e| {
        Error::decode_caused_by("a service stats answer is not the expected XML", e)
    })?;
    let status = match s.geo_replication.status.to_ascii_lowercase().as_str() {
        "live" => GeoReplicationStatus::Live,
        "bootstrap" => GeoReplicationStatus::Bootstrap,
        "unavailable" => GeoReplicationStatus::Unavailable,
        other => {
            return Err(Error::decode(format!(
                "the geo-replication status {other:?} is not live, bootstrap or unavailable"
            )))
        }
    };
    let last_sync_time = s
        .geo_replication
        .last_sync_time
        .filter(|t| !t.trim().is_empty())
        .map(|t| {
            DateTime::parse_from_rfc2822(&t)
                .or_else(|_| DateTime::parse_from_rfc3339(&t))
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| Error::decode(format!("the last sync time {t:?} is not a date")))
        })
        .transpose()?;
    Ok(ServiceStats {
        status,
        last_sync_time,
    })
}

/// Applies a set to the stored settings: the parts it carries replace theirs.
#[cfg(feature = "embedded")]
pub(crate) fn merge(stored: &mut ServiceProperties, set: &ServiceProperties) {
    if let Some(l) = &set.logging {
        stored.logging = Some(l.clone());
    }
    if let Some(m) = &set.hour_metrics {
        stored.hour_metrics = Some(m.clone());
    }
    if let Some(m) = &set.minute_metrics {
        stored.minute_metrics = Some(m.clone());
    }
    if let Some(c) = &set.cors {
        stored.cors = Some(c.clone());
    }
}

/// What a new account's service holds: nothing logged, no metrics, no CORS rule.
#[cfg(feature = "embedded")]
pub(crate) fn initial() -> ServiceProperties {
    ServiceProperties {
        logging: Some(Logging::default()),
        hour_metrics: Some(Metrics::disabled()),
        minute_metrics: Some(Metrics::disabled()),
        cors: Some(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> ServiceProperties {
        let mut cors = CorsRule::new(
            ["http://a.example", "http://b.example"],
            ["GET", "PUT"],
            500,
        );
        cors.allowed_headers = vec!["x-ms-meta-data*".into(), "x-ms-meta-target*".into()];
        cors.exposed_headers = vec!["x-ms-meta-*".into()];
        ServiceProperties {
            logging: Some(Logging::new(true, false, true, Some(7))),
            hour_metrics: Some(Metrics::enabled(false, Some(14))),
            minute_metrics: Some(Metrics::disabled()),
            cors: Some(vec![cors]),
        }
    }

    #[test]
    fn properties_travel_as_the_documented_xml_and_read_back() {
        let xml = encode(&full());
        assert_eq!(
            xml,
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><StorageServiceProperties>\
             <Logging><Version>1.0</Version><Delete>true</Delete><Read>true</Read><Write>false</Write>\
             <RetentionPolicy><Enabled>true</Enabled><Days>7</Days></RetentionPolicy></Logging>\
             <HourMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>false</IncludeAPIs>\
             <RetentionPolicy><Enabled>true</Enabled><Days>14</Days></RetentionPolicy></HourMetrics>\
             <MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled>\
             <RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics>\
             <Cors><CorsRule><AllowedOrigins>http://a.example,http://b.example</AllowedOrigins>\
             <AllowedMethods>GET,PUT</AllowedMethods><MaxAgeInSeconds>500</MaxAgeInSeconds>\
             <ExposedHeaders>x-ms-meta-*</ExposedHeaders>\
             <AllowedHeaders>x-ms-meta-data*,x-ms-meta-target*</AllowedHeaders></CorsRule></Cors>\
             </StorageServiceProperties>"
        );
        assert_eq!(decode(xml.as_bytes()).unwrap(), full());
        // A set of one part leaves the others out.
        let only_cors = ServiceProperties {
            cors: Some(Vec::new()),
            ..Default::default()
        };
        assert!(encode(&only_cors)
            .ends_with("<StorageServiceProperties><Cors></Cors></StorageServiceProperties>"));
    }

    #[test]
    fn an_answer_without_cors_or_with_an_empty_one_is_read() {
        let xml = b"<?xml version=\"1.0\" encoding=\"utf-8\"?><StorageServiceProperties>\
            <Logging><Version>1.0</Version><Delete>false</Delete><Read>false</Read><Write>false</Write>\
            <RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging><Cors /></StorageServiceProperties>";
        let p = decode(xml).unwrap();
        assert_eq!(p.logging, Some(Logging::default()));
        assert_eq!(p.cors, Some(Vec::new()));
        assert_eq!(p.hour_metrics, None);
        assert!(decode(b"<nope").is_err());
    }

    #[test]
    fn stats_are_read_with_their_sync_time() {
        let xml =
            b"<?xml version=\"1.0\" encoding=\"utf-8\"?><StorageServiceStats><GeoReplication>\
            <Status>live</Status><LastSyncTime>Tue, 19 Jan 2021 22:28:43 GMT</LastSyncTime>\
            </GeoReplication></StorageServiceStats>";
        let s = decode_stats(xml).unwrap();
        assert_eq!(s.status(), GeoReplicationStatus::Live);
        assert_eq!(
            s.last_sync_time().unwrap().to_rfc3339(),
            "2021-01-19T22:28:43+00:00"
        );
        let bootstrapping = b"<StorageServiceStats><GeoReplication><Status>bootstrap</Status>\
            <LastSyncTime></LastSyncTime></GeoReplication></StorageServiceStats>";
        let s = decode_stats(bootstrapping).unwrap();
        assert_eq!(s.status(), GeoReplicationStatus::Bootstrap);
        assert_eq!(s.last_sync_time(), None);
    }

    #[test]
    fn bad_settings_are_refused_before_io() {
        let mut p = full();
        assert!(check(&p).is_ok());
        p.cors = Some(vec![CorsRule::default(); 6]);
        assert!(check(&p)
            .unwrap_err()
            .to_string()
            .contains("at most 5 CORS rules"));
        let mut p = full();
        p.logging = Some(Logging::new(true, true, true, Some(366)));
        assert!(check(&p).unwrap_err().to_string().contains("1 to 365 days"));
        let mut p = full();
        p.hour_metrics = Some(Metrics {
            include_apis: None,
            ..Metrics::enabled(true, None)
        });
        assert!(check(&p).unwrap_err().to_string().contains("include_apis"));
    }

    #[test]
    #[cfg(feature = "embedded")]
    fn a_set_replaces_only_the_parts_it_carries() {
        let mut stored = initial();
        let set = ServiceProperties {
            hour_metrics: Some(Metrics::enabled(true, Some(3))),
            ..Default::default()
        };
        merge(&mut stored, &set);
        assert_eq!(stored.hour_metrics, set.hour_metrics);
        assert_eq!(stored.logging, Some(Logging::default()));
        assert_eq!(stored.cors, Some(Vec::new()));
    }
}
