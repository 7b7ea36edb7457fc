//! Queue messages across SDKs, on Azurite: what the official SDKs' defaults put
//! on the wire, reproduced byte for byte without them (CI has no Python SDK).
//!
//! Recorded by hand with Python's `azure-storage-queue` 12.18.1 at its defaults
//! (`NoEncodePolicy` / `NoDecodePolicy`, x-ms-version 2026-10-06) through a
//! recording proxy in front of Azurite: `send_message(text)` POSTs
//!
//! ```text
//! <?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>{text, XML-escaped}</MessageText></QueueMessage>
//! ```
//!
//! with `Content-Type: application/xml`, escaping only `&`, `<` and `>`
//! (ElementTree's text escaping: quotes, tab, CR and LF and non-ASCII UTF-8 go
//! as they are), and `receive_messages()` hands back the XML-unescaped
//! `MessageText` as `content`, a `str`, untouched. With
//! `TextBase64EncodePolicy` the text is `b64encode(text.encode("utf-8"))`.
//! .NET's `Azure.Storage.Queues` 12.x defaults to `QueueMessageEncoding.None`,
//! the same raw text (its XML writer escapes the same way).

use tablekit::account::{QueueSas, QueueSasPermissions, SasProtocol};
use tablekit::queue::MessageEncoding;
use tablekit::QueueClient;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::common;

/// The texts of the hand check, sent by Python as recorded above.
const PYTHON_SENT: [(&str, &[u8]); 3] = [
    (
        "hello <b>&'\"</b> Grüße 🦀",
        b"<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>hello &lt;b&gt;&amp;'\"&lt;/b&gt; Gr\xc3\xbc\xc3\x9fe \xf0\x9f\xa6\x80</MessageText></QueueMessage>",
    ),
    (
        "{\"order\": 456}",
        b"<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>{\"order\": 456}</MessageText></QueueMessage>",
    ),
    (
        "tab\tand\nnewline",
        b"<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>tab\tand\nnewline</MessageText></QueueMessage>",
    ),
];

/// A queue on Azurite, and a SAS URL prefix for raw requests to it.
struct Raw {
    queue: QueueClient,
    /// `host:port`.
    authority: String,
    /// `/devstoreaccount1/{queue}`.
    path: String,
    sas: String,
}

impl Raw {
    async fn new() -> Option<Raw> {
        let conn = common::connection_string()?;
        let account = tablekit::Account::from_connection_string(&conn).unwrap();
        let name = format!(
            "interop{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let queue = common::queues(&conn).unwrap().queue(&name).unwrap();
        queue.create_queue().await.unwrap();
        let sas = QueueSas::new(&name)
            .permissions(QueueSasPermissions::ALL)
            .expiry(chrono::Utc::now() + chrono::Duration::hours(1))
            .protocol(SasProtocol::HttpsAndHttp)
            .sign(&account)
            .unwrap();
        let endpoint = url::Url::parse(account.queue_endpoint().unwrap()).unwrap();
        assert_eq!(endpoint.scheme(), "http", "raw requests speak plain HTTP");
        let host = endpoint.host_str().unwrap();
        assert!(host == "127.0.0.1" || host == "localhost", "loopback only");
        Some(Raw {
            queue,
            authority: format!("{host}:{}", endpoint.port().unwrap()),
            path: format!("{}/{name}", endpoint.path().trim_end_matches('/')),
            sas: sas.as_query().to_owned(),
        })
    }

    /// One request on its own connection: the status and the body.
    async fn request(&self, method: &str, path_and_query: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let sep = if path_and_query.contains('?') {
            '&'
        } else {
            '?'
        };
        let mut head = format!(
            "{method} {}{path_and_query}{sep}{} HTTP/1.1\r\nHost: {}\r\nx-ms-version: 2021-12-02\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.path,
            self.sas,
            self.authority,
            body.len()
        );
        if !body.is_empty() {
            head.push_str("Content-Type: application/xml\r\n");
        }
        head.push_str("\r\n");
        let mut stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(body).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        let split = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("an HTTP answer");
        let head = String::from_utf8_lossy(&answer[..split]).to_ascii_lowercase();
        let status = head[9..12].parse().unwrap();
        let mut body = answer[split + 4..].to_vec();
        if head.contains("transfer-encoding: chunked") {
            body = dechunk(&body);
        }
        (status, body)
    }

    /// Sends `body` as the message's XML, as another SDK would.
    async fn post(&self, body: &[u8]) {
        let (status, answer) = self.request("POST", "/messages", body).await;
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&answer));
    }

    /// The `MessageText` of every visible message, as a peek returns it on the
    /// wire, XML-unescaped as any XML reader (Python's ElementTree, .NET's
    /// XmlReader) does.
    async fn peek_texts(&self) -> Vec<String> {
        let (status, body) = self
            .request("GET", "/messages?peekonly=true&numofmessages=32", b"")
            .await;
        assert_eq!(status, 200);
        let xml = String::from_utf8(body).unwrap();
        xml.split("<MessageText>")
            .skip(1)
            .map(|rest| unescape(&rest[..rest.find("</MessageText>").unwrap()]))
            .collect()
    }
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n").unwrap();
        let size_text = std::str::from_utf8(&body[..line_end]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[line_end + 2..line_end + 2 + size]);
        body = &body[line_end + 2 + size + 2..];
    }
}

/// XML text content unescaped: the five predefined entities and character references.
fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let end = rest[i..].find(';').unwrap() + i;
        let entity = &rest[i + 1..end];
        out.push(match entity {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let n = match entity.strip_prefix("#x") {
                    Some(hex) => u32::from_str_radix(hex, 16).unwrap(),
                    None => entity.strip_prefix('#').unwrap().parse().unwrap(),
                };
                char::from_u32(n).unwrap()
            }
        });
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Python's default sender, byte for byte: tablekit's default receiver reads
/// each message as the text Python was given, and so does a Base64 receiver
/// (none of these texts is Base64, so none can have been encoded).
#[tokio::test]
async fn messages_in_pythons_default_wire_form_read_as_the_text_python_sent() {
    let Some(raw) = Raw::new().await else { return };
    for (_, body) in PYTHON_SENT {
        raw.post(body).await;
    }
    let expected: Vec<&str> = PYTHON_SENT.iter().map(|(text, _)| *text).collect();

    let peeked = raw.queue.peek(32).await.unwrap();
    let texts: Vec<&str> = peeked.iter().map(|m| m.text().unwrap()).collect();
    assert_eq!(texts, expected);
    assert!(peeked.iter().all(|m| m.encoding() == MessageEncoding::Text));
    assert_eq!(
        peeked[1].json::<serde_json::Value>().unwrap()["order"],
        456,
        "a JSON text reads as JSON"
    );

    let legacy = raw.queue.clone().with_encoding(MessageEncoding::Base64);
    let got = legacy.receive().max_messages(32).await.unwrap();
    let texts: Vec<&str> = got.iter().map(|m| m.text().unwrap()).collect();
    assert_eq!(texts, expected, "a Base64 receiver falls back to the text");
    assert!(got.iter().all(|m| m.encoding() == MessageEncoding::Text));
    raw.queue.delete_queue().await.unwrap();
}

/// tablekit's default sender: what an XML reader finds in `MessageText` (what
/// Python's and .NET's default receivers hand to the application) is the text
/// as given, not Base64.
#[tokio::test]
async fn tablekit_default_messages_are_the_plain_text_other_sdks_read() {
    let Some(raw) = Raw::new().await else { return };
    for (text, _) in PYTHON_SENT {
        raw.queue.send(text).await.unwrap();
    }
    raw.queue
        .send_json(&serde_json::json!({"order": 456, "note": "<rush> & 'soon'"}))
        .await
        .unwrap();
    let mut expected: Vec<String> = PYTHON_SENT.iter().map(|(t, _)| t.to_string()).collect();
    expected.push(r#"{"note":"<rush> & 'soon'","order":456}"#.to_owned());
    assert_eq!(raw.peek_texts().await, expected);
    raw.queue.delete_queue().await.unwrap();
}

/// The other SDKs' Base64 policies (Python's `TextBase64EncodePolicy`, .NET's
/// `QueueMessageEncoding.Base64`, the older SDKs' default) write standard padded
/// Base64 of the UTF-8 text; a tablekit Base64 receiver decodes it, a default
/// (text) receiver gets the Base64 text but still reads its JSON; and what a
/// tablekit Base64 sender writes is exactly that encoding.
#[tokio::test]
async fn base64_messages_interoperate_with_the_sdks_base64_policies() {
    let Some(raw) = Raw::new().await else { return };
    // b64encode('{"order": 456}'.encode("utf-8")), and of "Grüße".
    raw.post(b"<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>eyJvcmRlciI6IDQ1Nn0=</MessageText></QueueMessage>").await;
    raw.post(b"<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>R3LDvMOfZQ==</MessageText></QueueMessage>").await;

    let text = raw.queue.peek(32).await.unwrap();
    assert_eq!(text[0].text().unwrap(), "eyJvcmRlciI6IDQ1Nn0=");
    assert_eq!(text[0].json::<serde_json::Value>().unwrap()["order"], 456);
    assert_eq!(text[1].text().unwrap(), "R3LDvMOfZQ==");

    let legacy = raw.queue.clone().with_encoding(MessageEncoding::Base64);
    let got = legacy.receive().max_messages(32).await.unwrap();
    assert_eq!(got[0].text().unwrap(), r#"{"order": 456}"#);
    assert_eq!(got[1].text().unwrap(), "Grüße");
    assert!(got.iter().all(|m| m.encoding() == MessageEncoding::Base64));
    for m in &got {
        legacy.delete_message(m).await.unwrap();
    }

    legacy.send("Grüße").await.unwrap();
    assert_eq!(raw.peek_texts().await, ["R3LDvMOfZQ=="]);
    raw.queue.delete_queue().await.unwrap();
}
