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
        #[serde(rename = "Creation-Time")]
        creation_time: Option<String>,
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
            created: p.creation_time.as_deref().and_then(http_date),
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

/// Where a blob listing started and what it asked for: the parts of an
/// `EnumerationResults` answer besides its entries.
#[cfg(feature = "server")]
#[derive(Debug, Default)]
pub(crate) struct ListingHead<'a> {
    /// `http://host/account/`.
    pub(crate) endpoint: &'a str,
    pub(crate) prefix: Option<&'a str>,
    pub(crate) marker: Option<&'a str>,
    pub(crate) max: Option<u32>,
    pub(crate) delimiter: Option<&'a str>,
    pub(crate) include_metadata: bool,
    pub(crate) include_copy: bool,
}

#[cfg(feature = "server")]
fn push_element(xml: &mut String, tag: &str, value: Option<&str>) {
    use quick_xml::escape::partial_escape;
    match value {
        Some(v) if !v.is_empty() => {
            xml.push_str(&format!("<{tag}>{}</{tag}>", partial_escape(v)));
        }
        _ => xml.push_str(&format!("<{tag} />")),
    }
}

/// The `LeaseStatus`, `LeaseState` and (for a held lease) `LeaseDuration`
/// of a lease, as a listing and the `x-ms-lease-*` headers spell them.
#[cfg(feature = "server")]
pub(crate) fn lease_words(lease: &LeaseInfo) -> (&'static str, &'static str, Option<&'static str>) {
    let state = match lease.state {
        LeaseState::Available => "available",
        LeaseState::Leased => "leased",
        LeaseState::Expired => "expired",
        LeaseState::Breaking => "breaking",
        LeaseState::Broken => "broken",
    };
    let status = if lease.is_locked() {
        "locked"
    } else {
        "unlocked"
    };
    let duration = match (lease.state, lease.infinite) {
        (LeaseState::Leased, Some(true)) => Some("infinite"),
        (LeaseState::Leased, Some(false)) => Some("fixed"),
        _ => None,
    };
    (status, state, duration)
}

/// `x-ms-copy-status` and the listing's `CopyStatus`.
#[cfg(feature = "server")]
pub(crate) fn copy_status_word(status: CopyStatus) -> &'static str {
    match status {
        CopyStatus::Pending => "pending",
        CopyStatus::Success => "success",
        CopyStatus::Aborted => "aborted",
        CopyStatus::Failed => "failed",
    }
}

#[cfg(feature = "server")]
fn push_metadata(xml: &mut String, metadata: &[(String, String)]) {
    use quick_xml::escape::partial_escape;
    xml.push_str("<Metadata>");
    for (name, value) in metadata {
        xml.push_str(&format!(
            "<{name}>{}</{name}>",
            partial_escape(value.as_str())
        ));
    }
    xml.push_str("</Metadata>");
}

/// The `EnumerationResults` answer of a blob listing (the server's half of
/// [`parse_listing`]): its blobs and `BlobPrefix`es in name order, each blob
/// with the properties the service lists, its metadata when asked for
/// (`include=metadata`) and its last copy when asked for (`include=copy`).
#[cfg(feature = "server")]
pub(crate) fn encode_listing(
    head: &ListingHead<'_>,
    container: &str,
    blobs: &[BlobProperties],
    prefixes: &[String],
    next_marker: Option<&str>,
) -> String {
    use quick_xml::escape::{escape, partial_escape};
    use std::fmt::Write as _;
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults ServiceEndpoint=\"{}\" ContainerName=\"{}\">",
        escape(head.endpoint),
        escape(container)
    );
    if let Some(p) = head.prefix {
        push_element(&mut xml, "Prefix", Some(p));
    }
    if let Some(m) = head.marker {
        push_element(&mut xml, "Marker", Some(m));
    }
    if let Some(n) = head.max {
        let _ = write!(xml, "<MaxResults>{n}</MaxResults>");
    }
    if let Some(d) = head.delimiter {
        push_element(&mut xml, "Delimiter", Some(d));
    }
    xml.push_str("<Blobs>");
    // Blobs and prefixes interleaved in name order, as the service lists them.
    let (mut b, mut p) = (blobs.iter().peekable(), prefixes.iter().peekable());
    loop {
        let blob_first = match (b.peek(), p.peek()) {
            (Some(blob), Some(prefix)) => blob.name.as_str() < prefix.as_str(),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if !blob_first {
            let prefix = p.next().expect("peeked");
            let _ = write!(
                xml,
                "<BlobPrefix><Name>{}</Name></BlobPrefix>",
                partial_escape(prefix.as_str())
            );
            continue;
        }
        let blob = b.next().expect("peeked");
        let h = &blob.http;
        let _ = write!(
            xml,
            "<Blob><Name>{}</Name><Properties>{}<Last-Modified>{}</Last-Modified><Etag>{}</Etag><Content-Length>{}</Content-Length>",
            partial_escape(blob.name.as_str()),
            blob.created.map_or_else(String::new, |t| format!(
                "<Creation-Time>{}</Creation-Time>",
                http_date_text(t)
            )),
            http_date_text(blob.last_modified),
            partial_escape(blob.etag.as_str()),
            blob.size
        );
        push_element(&mut xml, "Content-Type", h.content_type.as_deref());
        push_element(&mut xml, "Content-Encoding", h.content_encoding.as_deref());
        push_element(&mut xml, "Content-Language", h.content_language.as_deref());
        push_element(
            &mut xml,
            "Content-MD5",
            md5_text(h.content_md5.as_deref()).as_deref(),
        );
        push_element(&mut xml, "Cache-Control", h.cache_control.as_deref());
        push_element(
            &mut xml,
            "Content-Disposition",
            h.content_disposition.as_deref(),
        );
        xml.push_str("<BlobType>BlockBlob</BlobType><AccessTier>Hot</AccessTier><AccessTierInferred>true</AccessTierInferred>");
        let (status, state, duration) = lease_words(&blob.lease);
        let _ = write!(
            xml,
            "<LeaseStatus>{status}</LeaseStatus><LeaseState>{state}</LeaseState>"
        );
        if let Some(d) = duration {
            let _ = write!(xml, "<LeaseDuration>{d}</LeaseDuration>");
        }
        xml.push_str("<ServerEncrypted>true</ServerEncrypted>");
        if let (true, Some(c)) = (head.include_copy, &blob.copy) {
            push_element(&mut xml, "CopyId", Some(&c.id));
            push_element(&mut xml, "CopyStatus", Some(copy_status_word(c.status)));
            push_element(&mut xml, "CopySource", c.source.as_deref());
            if let Some((done, total)) = c.progress {
                let _ = write!(xml, "<CopyProgress>{done}/{total}</CopyProgress>");
            }
            if let Some(t) = c.completed_on {
                let _ = write!(
                    xml,
                    "<CopyCompletionTime>{}</CopyCompletionTime>",
                    http_date_text(t)
                );
            }
            if let Some(d) = &c.status_description {
                push_element(&mut xml, "CopyStatusDescription", Some(d));
            }
        }
        xml.push_str("</Properties>");
        if head.include_metadata {
            push_metadata(&mut xml, &blob.metadata);
        }
        xml.push_str("</Blob>");
    }
    xml.push_str("</Blobs>");
    push_element(&mut xml, "NextMarker", next_marker);
    xml.push_str("</EnumerationResults>");
    xml
}

/// The `EnumerationResults` answer of a container listing (the server's
/// half of [`parse_containers`]).
#[cfg(feature = "server")]
pub(crate) fn encode_containers(
    head: &ListingHead<'_>,
    containers: &[ContainerProperties],
    next_marker: Option<&str>,
) -> String {
    use quick_xml::escape::{escape, partial_escape};
    use std::fmt::Write as _;
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults ServiceEndpoint=\"{}\">",
        escape(head.endpoint)
    );
    if let Some(p) = head.prefix {
        push_element(&mut xml, "Prefix", Some(p));
    }
    if let Some(m) = head.marker {
        push_element(&mut xml, "Marker", Some(m));
    }
    if let Some(n) = head.max {
        let _ = write!(xml, "<MaxResults>{n}</MaxResults>");
    }
    xml.push_str("<Containers>");
    for c in containers {
        let (status, state, duration) = lease_words(&c.lease);
        let _ = write!(
            xml,
            "<Container><Name>{}</Name><Properties><Last-Modified>{}</Last-Modified><Etag>{}</Etag><LeaseStatus>{status}</LeaseStatus><LeaseState>{state}</LeaseState>",
            partial_escape(c.name.as_str()),
            http_date_text(c.last_modified),
            partial_escape(c.etag.as_str()),
        );
        if let Some(d) = duration {
            let _ = write!(xml, "<LeaseDuration>{d}</LeaseDuration>");
        }
        xml.push_str("<HasImmutabilityPolicy>false</HasImmutabilityPolicy><HasLegalHold>false</HasLegalHold></Properties>");
        if head.include_metadata {
            push_metadata(&mut xml, &c.metadata);
        }
        xml.push_str("</Container>");
    }
    xml.push_str("</Containers>");
    push_element(&mut xml, "NextMarker", next_marker);
    xml.push_str("</EnumerationResults>");
    xml
}

/// An HTTP date (RFC 1123, GMT), as listings and `Last-Modified` carry it.
#[cfg(feature = "server")]
pub(crate) fn http_date_text(t: DateTime<Utc>) -> String {
    t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// An MD5 hash in base64, as headers and listings carry it.
#[cfg(feature = "server")]
pub(crate) fn md5_text(md5: Option<&[u8]>) -> Option<String> {
    use base64::Engine as _;
    md5.map(|m| base64::engine::general_purpose::STANDARD.encode(m))
}

/// The `BlockList` answer of Get Block List (the server's half of
/// [`parse_block_list_answer`]): committed blocks, then uncommitted ones,
/// each its id and size; a list not asked for is left out.
#[cfg(feature = "server")]
pub(crate) fn encode_block_list_answer(
    committed: Option<&[(String, u64)]>,
    uncommitted: Option<&[(String, u64)]>,
) -> String {
    use quick_xml::escape::partial_escape;
    use std::fmt::Write as _;
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
    for (tag, blocks) in [
        ("CommittedBlocks", committed),
        ("UncommittedBlocks", uncommitted),
    ] {
        let Some(blocks) = blocks else { continue };
        let _ = write!(xml, "<{tag}>");
        for (id, size) in blocks {
            let _ = write!(
                xml,
                "<Block><Name>{}</Name><Size>{size}</Size></Block>",
                partial_escape(id.as_str())
            );
        }
        let _ = write!(xml, "</{tag}>");
    }
    xml.push_str("</BlockList>");
    xml
}

/// Blocks by id and size, committed and uncommitted.
pub(crate) type BlockLists = (Vec<(String, u64)>, Vec<(String, u64)>);

/// Reads the `BlockList` answer of Get Block List.
pub(crate) fn parse_block_list_answer(body: &[u8]) -> Result<BlockLists> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Answer {
        #[serde(default)]
        committed_blocks: Blocks,
        #[serde(default)]
        uncommitted_blocks: Blocks,
    }
    #[derive(serde::Deserialize, Default)]
    struct Blocks {
        #[serde(rename = "Block", default)]
        blocks: Vec<Block>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Block {
        name: String,
        size: u64,
    }
    let text = utf8(body, "a block list")?;
    let a: Answer = quick_xml::de::from_str(&text)
        .map_err(|e| Error::decode_caused_by("a block list is not the expected XML", e))?;
    let pairs = |b: Blocks| b.blocks.into_iter().map(|b| (b.name, b.size)).collect();
    Ok((pairs(a.committed_blocks), pairs(a.uncommitted_blocks)))
}

/// Which blocks an entry of a block list names.
#[cfg(feature = "server")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockKind {
    /// The uncommitted block of that id if there is one, else the committed one.
    Latest,
    Committed,
    Uncommitted,
}

/// The `BlockList` body of a Put Block List request, every id the latest
/// version of its block (what the client sends).
pub(crate) fn encode_block_list(block_ids: &[String]) -> String {
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
    for id in block_ids {
        xml.push_str("<Latest>");
        xml.push_str(&quick_xml::escape::escape(id.as_str()));
        xml.push_str("</Latest>");
    }
    xml.push_str("</BlockList>");
    xml
}

/// Reads a `BlockList` request body (the server's half of
/// [`encode_block_list`]): its entries in order. `None` if it is not a
/// block list.
#[cfg(feature = "server")]
pub(crate) fn parse_block_list(body: &[u8]) -> Option<Vec<(BlockKind, String)>> {
    #[derive(serde::Deserialize)]
    struct List {
        #[serde(rename = "$value", default)]
        entries: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    enum Entry {
        Latest(String),
        Committed(String),
        Uncommitted(String),
    }
    let text = std::str::from_utf8(body).ok()?;
    if !text.contains("<BlockList") {
        return None;
    }
    let list: List = quick_xml::de::from_str(text).ok()?;
    Some(
        list.entries
            .into_iter()
            .map(|e| match e {
                Entry::Latest(id) => (BlockKind::Latest, id),
                Entry::Committed(id) => (BlockKind::Committed, id),
                Entry::Uncommitted(id) => (BlockKind::Uncommitted, id),
            })
            .collect(),
    )
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

    #[cfg(feature = "server")]
    fn sample_blob(name: &str, copy: bool) -> BlobProperties {
        BlobProperties {
            name: name.to_owned(),
            size: 12,
            etag: ETag::new("\"0x8DC0000000000001\""),
            last_modified: "2014-07-31T18:00:00Z".parse().unwrap(),
            created: copy.then(|| "2014-07-30T18:00:00Z".parse().unwrap()),
            http: BlobHttpHeaders {
                content_type: Some("text/plain".into()),
                content_encoding: Some("gzip".into()),
                content_language: None,
                content_disposition: Some("attachment; filename=\"a&b.txt\"".into()),
                cache_control: Some("no-cache".into()),
                content_md5: Some((0..16).collect()),
            },
            metadata: vec![
                ("host".into(), "vm&7".into()),
                ("source".into(), "queue".into()),
            ],
            lease: LeaseInfo {
                state: LeaseState::Leased,
                infinite: Some(false),
            },
            copy: copy.then(|| CopyInfo {
                id: "c-1".into(),
                status: CopyStatus::Success,
                source: Some("http://127.0.0.1/a/b".into()),
                progress: Some((12, 12)),
                completed_on: Some("2014-07-31T18:00:00Z".parse().unwrap()),
                status_description: None,
            }),
        }
    }

    #[cfg(feature = "server")]
    #[test]
    fn a_listing_the_server_writes_reads_back_whole_in_the_clients_parser() {
        let blobs = vec![sample_blob("a<1>.log", true), sample_blob("c.log", false)];
        let prefixes = vec!["b/".to_owned(), "d/".to_owned()];
        let head = ListingHead {
            endpoint: "http://127.0.0.1:10000/devstoreaccount1/",
            prefix: Some(""),
            max: Some(4),
            delimiter: Some("/"),
            include_metadata: true,
            include_copy: true,
            ..ListingHead::default()
        };
        let xml = encode_listing(&head, "logs", &blobs, &prefixes, Some("e.log"));
        // Blobs and prefixes interleave in name order.
        let order: Vec<usize> = ["a&lt;1&gt;.log", "b/", "c.log", "d/"]
            .iter()
            .map(|n| xml.find(&format!("<Name>{n}</Name>")).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{xml}");
        let BlobResponse::Listing {
            blobs: read,
            prefixes: read_prefixes,
            next_marker,
        } = parse_listing(xml.as_bytes()).unwrap()
        else {
            panic!("a listing")
        };
        assert_eq!(read, blobs);
        assert_eq!(read_prefixes, prefixes);
        assert_eq!(next_marker.as_deref(), Some("e.log"));

        // Without include=metadata,copy neither is listed; no marker is none.
        let bare = ListingHead::default();
        let xml = encode_listing(&bare, "logs", &blobs, &[], None);
        let BlobResponse::Listing {
            blobs: read,
            next_marker,
            ..
        } = parse_listing(xml.as_bytes()).unwrap()
        else {
            panic!("a listing")
        };
        assert!(read
            .iter()
            .all(|b| b.metadata.is_empty() && b.copy.is_none()));
        assert_eq!(next_marker, None);
    }

    #[cfg(feature = "server")]
    #[test]
    fn a_container_listing_the_server_writes_reads_back_whole() {
        let containers = vec![
            ContainerProperties {
                name: "photos".into(),
                etag: ETag::new("\"0x8D1\""),
                last_modified: "2014-07-31T18:00:00Z".parse().unwrap(),
                metadata: vec![("owner".into(), "h&r".into())],
                lease: LeaseInfo::default(),
            },
            ContainerProperties {
                name: "phones".into(),
                etag: ETag::new("\"0x8D2\""),
                last_modified: "2014-07-31T18:00:01Z".parse().unwrap(),
                metadata: vec![],
                lease: LeaseInfo {
                    state: LeaseState::Leased,
                    infinite: Some(true),
                },
            },
        ];
        let head = ListingHead {
            endpoint: "http://127.0.0.1:10000/devstoreaccount1/",
            prefix: Some("ph"),
            include_metadata: true,
            ..ListingHead::default()
        };
        let xml = encode_containers(&head, &containers, Some("pi"));
        let BlobResponse::Containers {
            containers: read,
            next_marker,
        } = parse_containers(xml.as_bytes()).unwrap()
        else {
            panic!("a listing")
        };
        assert_eq!(read, containers);
        assert_eq!(next_marker.as_deref(), Some("pi"));
    }

    #[cfg(feature = "server")]
    #[test]
    fn a_block_list_answer_the_server_writes_reads_back_whole() {
        let committed = vec![("QUFB".to_owned(), 3), ("Q0ND".to_owned(), 1000)];
        let uncommitted = vec![("QkJC".to_owned(), 7)];
        let xml = encode_block_list_answer(Some(&committed), Some(&uncommitted));
        assert_eq!(
            parse_block_list_answer(xml.as_bytes()).unwrap(),
            (committed.clone(), uncommitted)
        );
        let only = encode_block_list_answer(Some(&committed), None);
        assert!(!only.contains("UncommittedBlocks"), "{only}");
        assert_eq!(
            parse_block_list_answer(only.as_bytes()).unwrap(),
            (committed, vec![])
        );
        let empty = encode_block_list_answer(Some(&[]), Some(&[]));
        assert_eq!(
            parse_block_list_answer(empty.as_bytes()).unwrap(),
            (vec![], vec![])
        );
    }

    #[cfg(feature = "server")]
    #[test]
    fn a_block_list_the_client_writes_the_server_reads_in_order() {
        let ids: Vec<String> = ["QUFB", "QkJC", "Q0ND"].map(String::from).to_vec();
        let read = parse_block_list(encode_block_list(&ids).as_bytes()).unwrap();
        assert_eq!(
            read,
            ids.iter()
                .map(|i| (BlockKind::Latest, i.clone()))
                .collect::<Vec<_>>()
        );
        // The three kinds, in the order given.
        let mixed = b"<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList><Uncommitted>QkJC</Uncommitted><Committed>QUFB</Committed><Latest>Q0ND</Latest></BlockList>";
        assert_eq!(
            parse_block_list(mixed).unwrap(),
            [
                (BlockKind::Uncommitted, "QkJC".to_owned()),
                (BlockKind::Committed, "QUFB".to_owned()),
                (BlockKind::Latest, "Q0ND".to_owned()),
            ]
        );
        assert_eq!(parse_block_list(b"<BlockList />").unwrap(), []);
        for bad in [
            &b"not xml"[..],
            b"<BlockList><Other>x</Other></BlockList>",
            b"<Nope/>",
        ] {
            assert!(
                parse_block_list(bad).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
