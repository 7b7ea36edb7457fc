//! The XML answers of the Blob service's listings (blobs, with or without a
//! delimiter, and containers), read with quick-xml's serde support.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::backend::blob::{
    BlobHttpHeaders, BlobProperties, BlobResponse, ContainerProperties, CopyInfo, CopyStatus,
    LeaseInfo, LeaseState,
};
use crate::entity::ETag;
use crate::error::{Error, Result};

pub(super) fn http_date(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc2822(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}
pub(super) fn lease_from(state: Option<&str>, duration: Option<&str>) -> LeaseInfo {
    let state = state.and_then(LeaseState::parse).unwrap_or_default();
    LeaseInfo {
        state,
        infinite: match duration {
            Some("infinite") => Some(true),
            Some("fixed") => Some(false),
            _ => None,
        },
    }
}
/// `bytes copied/total`.
pub(super) fn copy_progress(text: &str) -> Option<(u64, u64)> {
    let (done, total) = text.split_once('/')?;
    Some((done.trim().parse().ok()?, total.trim().parse().ok()?))
}
pub(super) fn md5_from(text: Option<&str>) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text?.trim())
        .ok()
}

/// An element that may be absent or empty (`<Content-Type />`): empty is none.
fn text(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

/// `<Metadata><name>value</name>...</Metadata>`: names in lower case, in name order.
fn metadata(m: BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut m: Vec<(String, String)> = m
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    m.sort();
    m
}

fn date(name: &str, text: &str) -> Result<chrono::DateTime<chrono::Utc>> {
    http_date(text)
        .ok_or_else(|| Error::decode(format!("Last-Modified of {name:?} is not an HTTP date")))
}

fn utf8(body: &[u8], what: &str) -> Result<String> {
    std::str::from_utf8(body)
        .map(str::to_owned)
        .map_err(|e| Error::decode_caused_by(format!("{what} is not UTF-8"), e))
}

/// Reads an `EnumerationResults` answer of a blob listing: its blobs and,
/// with a delimiter, its `BlobPrefix`es, in any order.
pub(crate) fn parse_listing(body: &[u8]) -> Result<BlobResponse> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Results {
        #[serde(default)]
        blobs: Blobs,
        next_marker: Option<String>,
    }
    #[derive(serde::Deserialize, Default)]
    struct Blobs {
        #[serde(rename = "$value", default)]
        entries: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    enum Entry {
        Blob(Box<Item>),
        BlobPrefix(Prefix),
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Prefix {
        name: String,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Item {
        name: String,
        properties: Props,
        /// `<Metadata><name>value</name>...</Metadata>`: element names are the keys.
        #[serde(default)]
        metadata: BTreeMap<String, String>,
    }
    #[derive(serde::Deserialize)]
    struct Props {
        #[serde(rename = "Last-Modified")]
        last_modified: String,
        #[serde(rename = "Etag")]
        etag: String,
        #[serde(rename = "Content-Length")]
        content_length: u64,
        #[serde(rename = "Content-Type")]
        content_type: Option<String>,
        #[serde(rename = "Content-Encoding")]
        content_encoding: Option<String>,
        #[serde(rename = "Content-Language")]
        content_language: Option<String>,
        #[serde(rename = "Content-Disposition")]
        content_disposition: Option<String>,
        #[serde(rename = "Cache-Control")]
        cache_control: Option<String>,
        #[serde(rename = "Content-MD5")]
        content_md5: Option<String>,
        #[serde(rename = "LeaseState")]
        lease_state: Option<String>,
        #[serde(rename = "LeaseDuration")]
        lease_duration: Option<String>,
        #[serde(rename = "CopyId")]
        copy_id: Option<String>,
        #[serde(rename = "CopyStatus")]
        copy_status: Option<String>,
        #[serde(rename = "CopySource")]
        copy_source: Option<String>,
        #[serde(rename = "CopyProgress")]
        copy_progress: Option<String>,
        #[serde(rename = "CopyCompletionTime")]
        copy_completion_time: Option<String>,
        #[serde(rename = "CopyStatusDescription")]
        copy_status_description: Option<String>,
    }
    let text_body = utf8(body, "a blob listing")?;
    let results: Results = quick_xml::de::from_str(&text_body)
        .map_err(|e| Error::decode_caused_by("a blob listing is not the expected XML", e))?;
    let mut blobs = Vec::new();
    let mut prefixes = Vec::new();
    for entry in results.blobs.entries {
        let b = match entry {
            Entry::BlobPrefix(p) => {
                prefixes.push(p.name);
                continue;
            }
            Entry::Blob(b) => b,
        };
        let p = b.properties;
        let copy = match (
            text(p.copy_id),
            p.copy_status.as_deref().and_then(CopyStatus::parse),
        ) {
            (Some(id), Some(status)) => Some(CopyInfo {
                id,
                status,
                source: text(p.copy_source),
                progress: p.copy_progress.as_deref().and_then(copy_progress),
                completed_on: p.copy_completion_time.as_deref().and_then(http_date),
                status_description: text(p.copy_status_description),
            }),
            _ => None,
        };
        blobs.push(BlobProperties {
            last_modified: date(&b.name, &p.last_modified)?,
            name: b.name,
            size: p.content_length,
            etag: ETag::new(p.etag),
            http: BlobHttpHeaders {
                content_type: text(p.content_type),
                content_encoding: text(p.content_encoding),
                content_language: text(p.content_language),
                content_disposition: text(p.content_disposition),
                cache_control: text(p.cache_control),
                content_md5: md5_from(text(p.content_md5).as_deref()),
            },
            metadata: metadata(b.metadata),
            lease: lease_from(p.lease_state.as_deref(), p.lease_duration.as_deref()),
            copy,
        });
    }
    Ok(BlobResponse::Listing {
        blobs,
        prefixes,
        next_marker: text(results.next_marker),
    })
}

/// Reads an `EnumerationResults` answer of a container listing.
pub(crate) fn parse_containers(body: &[u8]) -> Result<BlobResponse> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Results {
        #[serde(default)]
        containers: Containers,
        next_marker: Option<String>,
    }
    #[derive(serde::Deserialize, Default)]
    struct Containers {
        #[serde(rename = "Container", default)]
        items: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Item {
        name: String,
        properties: Props,
        #[serde(default)]
        metadata: BTreeMap<String, String>,
    }
    #[derive(serde::Deserialize)]
    struct Props {
        #[serde(rename = "Last-Modified")]
        last_modified: String,
        #[serde(rename = "Etag")]
        etag: String,
        #[serde(rename = "LeaseState")]
        lease_state: Option<String>,
        #[serde(rename = "LeaseDuration")]
        lease_duration: Option<String>,
    }
    let text_body = utf8(body, "a container listing")?;
    let results: Results = quick_xml::de::from_str(&text_body)
        .map_err(|e| Error::decode_caused_by("a container listing is not the expected XML", e))?;
    let containers = results
        .containers
        .items
        .into_iter()
        .map(|c| {
            Ok(ContainerProperties {
                last_modified: date(&c.name, &c.properties.last_modified)?,
                name: c.name,
                etag: ETag::new(c.properties.etag),
                metadata: metadata(c.metadata),
                lease: lease_from(
                    c.properties.lease_state.as_deref(),
                    c.properties.lease_duration.as_deref(),
                ),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(BlobResponse::Containers {
        containers,
        next_marker: text(results.next_marker),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_are_read_with_their_marker() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://127.0.0.1:10000/devstoreaccount1" ContainerName="logs"><Prefix>queue/</Prefix><MaxResults>2</MaxResults><Blobs><Blob><Name>queue/2014/07/31/1800/000001.log</Name><Properties><Last-Modified>Thu, 31 Jul 2014 18:00:00 GMT</Last-Modified><Etag>0x8D1</Etag><Content-Length>12</Content-Length><Content-Type>text/plain</Content-Type><Content-Encoding>gzip</Content-Encoding><Content-Language /><Content-MD5>AAECAwQFBgcICQoLDA0ODw==</Content-MD5><Cache-Control>no-cache</Cache-Control><BlobType>BlockBlob</BlobType><LeaseStatus>locked</LeaseStatus><LeaseState>leased</LeaseState><LeaseDuration>infinite</LeaseDuration></Properties><Metadata><source>queue</source><Host>vm&amp;7</Host></Metadata></Blob><Blob><Name>queue/a&amp;b.log</Name><Properties><Last-Modified>Thu, 31 Jul 2014 18:01:00 GMT</Last-Modified><Etag>0x8D2</Etag><Content-Length>0</Content-Length><Content-Type /><CopyId>c-1</CopyId><CopyStatus>success</CopyStatus><CopySource>http://127.0.0.1/a/b</CopySource><CopyProgress>0/0</CopyProgress></Properties></Blob></Blobs><NextMarker>2!abc</NextMarker></EnumerationResults>"#;
        let BlobResponse::Listing {
            blobs,
            prefixes,
            next_marker,
        } = parse_listing(xml).unwrap()
        else {
            panic!("a listing")
        };
        assert_eq!(next_marker.as_deref(), Some("2!abc"));
        assert!(prefixes.is_empty());
        assert_eq!(blobs.len(), 2);
        assert_eq!(blobs[0].name, "queue/2014/07/31/1800/000001.log");
        assert_eq!(blobs[0].size, 12);
        let h = &blobs[0].http;
        assert_eq!(h.content_type.as_deref(), Some("text/plain"));
        assert_eq!(h.content_encoding.as_deref(), Some("gzip"));
        assert_eq!(h.content_language, None, "empty is none");
        assert_eq!(h.cache_control.as_deref(), Some("no-cache"));
        assert_eq!(
            h.content_md5.as_deref(),
            Some(&(0..16).collect::<Vec<u8>>()[..])
        );
        assert!(blobs[0].lease.is_locked());
        assert_eq!(blobs[0].lease.is_infinite(), Some(true));
        assert_eq!(blobs[0].copy, None);
        assert_eq!(blobs[1].name, "queue/a&b.log");
        assert_eq!(blobs[1].http.content_type, None);
        assert!(!blobs[1].lease.is_locked());
        let copy = blobs[1].copy.as_ref().unwrap();
        assert_eq!(
            (copy.id(), copy.status(), copy.source(), copy.progress()),
            (
                "c-1",
                CopyStatus::Success,
                Some("http://127.0.0.1/a/b"),
                Some((0, 0))
            )
        );
        assert_eq!(
            blobs[0].metadata,
            [
                ("host".to_owned(), "vm&7".to_owned()),
                ("source".to_owned(), "queue".to_owned())
            ]
        );
        assert!(blobs[1].metadata.is_empty());

        let empty = br#"<EnumerationResults><Blobs /><NextMarker /></EnumerationResults>"#;
        let BlobResponse::Listing {
            blobs, next_marker, ..
        } = parse_listing(empty).unwrap()
        else {
            panic!("a listing")
        };
        assert!(blobs.is_empty());
        assert_eq!(next_marker, None);
    }

    #[test]
    fn a_listing_with_a_delimiter_reads_prefixes_between_blobs() {
        let xml = br#"<EnumerationResults><Delimiter>/</Delimiter><Blobs><BlobPrefix><Name>2014/</Name></BlobPrefix><Blob><Name>a.log</Name><Properties><Last-Modified>Thu, 31 Jul 2014 18:00:00 GMT</Last-Modified><Etag>0x1</Etag><Content-Length>1</Content-Length></Properties></Blob><BlobPrefix><Name>b/</Name></BlobPrefix></Blobs><NextMarker /></EnumerationResults>"#;
        let BlobResponse::Listing {
            blobs, prefixes, ..
        } = parse_listing(xml).unwrap()
        else {
            panic!("a listing")
        };
        assert_eq!(prefixes, ["2014/", "b/"]);
        assert_eq!(blobs.len(), 1);
        assert_eq!(blobs[0].name, "a.log");
    }

    #[test]
    fn container_listings_carry_metadata_and_leases() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://127.0.0.1:10000/devstoreaccount1"><Prefix>ph</Prefix><Containers><Container><Name>photos</Name><Properties><Last-Modified>Thu, 31 Jul 2014 18:00:00 GMT</Last-Modified><Etag>"0x8D1"</Etag><LeaseStatus>unlocked</LeaseStatus><LeaseState>available</LeaseState></Properties><Metadata><Owner>hr</Owner></Metadata></Container><Container><Name>phones</Name><Properties><Last-Modified>Thu, 31 Jul 2014 18:00:01 GMT</Last-Modified><Etag>"0x8D2"</Etag><LeaseState>leased</LeaseState><LeaseDuration>fixed</LeaseDuration></Properties></Container></Containers><NextMarker>phz</NextMarker></EnumerationResults>"#;
        let BlobResponse::Containers {
            containers,
            next_marker,
        } = parse_containers(xml).unwrap()
        else {
            panic!("a listing")
        };
        assert_eq!(next_marker.as_deref(), Some("phz"));
        assert_eq!(containers.len(), 2);
        assert_eq!(containers[0].name(), "photos");
        assert_eq!(containers[0].etag().as_str(), "\"0x8D1\"");
        assert_eq!(
            containers[0].metadata(),
            [("owner".to_owned(), "hr".to_owned())]
        );
        assert!(!containers[0].lease().is_locked());
        assert!(containers[1].lease().is_locked());
        assert_eq!(containers[1].lease().is_infinite(), Some(false));

        let empty = br#"<EnumerationResults><Containers /><NextMarker /></EnumerationResults>"#;
        let BlobResponse::Containers {
            containers,
            next_marker,
        } = parse_containers(empty).unwrap()
        else {
            panic!("a listing")
        };
        assert!(containers.is_empty() && next_marker.is_none());
    }
}
