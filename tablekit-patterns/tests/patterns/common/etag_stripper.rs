//! A loopback proxy between a client and the emulator's Table endpoint that
//! strips every ETag from the answers, as a broken server or proxy might:
//! the `ETag` header, the `odata.etag` of every entity of a JSON body, and
//! the `ETag:` lines of a transaction's answer. The patterns must report
//! what is missing as an error, never panic.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running ETag-stripping proxy.
pub struct EtagStripper {
    connection_string: String,
}

impl EtagStripper {
    /// Starts a proxy in front of the Table endpoint of `conn` (a loopback
    /// emulator's connection string).
    pub async fn start(conn: &str) -> EtagStripper {
        let endpoint = conn
            .split(';')
            .find_map(|p| p.trim().strip_prefix("TableEndpoint="))
            .filter(|e| !e.is_empty())
            .expect("the connection string has a TableEndpoint");
        let rest = endpoint.strip_prefix("http://").expect("an http endpoint");
        let (upstream, path) = rest.split_once('/').unwrap_or((rest, ""));
        assert!(
            upstream.starts_with("127.0.0.1:"),
            "loopback only: {upstream}"
        );
        let upstream = upstream.to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(relay(client, server));
            }
        });
        EtagStripper {
            connection_string: conn.replace(endpoint, &format!("http://{local}/{path}")),
        }
    }

    /// A Table service client that talks through the proxy.
    pub fn service(&self) -> tablekit::TableServiceClient {
        tablekit::TableServiceClient::from_connection_string(&self.connection_string).unwrap()
    }
}

/// Reads from `from` into `buf` until it holds `\r\n\r\n`; the head's length
/// (with that blank line), or `None` at the end of the stream.
async fn read_head(from: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i + 4);
        }
        match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Makes `buf` hold at least `n` bytes; `false` if the stream ends first.
async fn fill(from: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>, n: usize) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    while buf.len() < n {
        match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
        }
    }
    true
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// One answer's body, however the server framed it (Content-Length, chunked,
/// or none); `None` if the stream ends first.
async fn read_body(
    from: &mut (impl AsyncRead + Unpin),
    buf: &mut Vec<u8>,
    status: u16,
    head: &str,
) -> Option<Vec<u8>> {
    if status < 200 || status == 204 || status == 304 {
        return Some(Vec::new());
    }
    if header(head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                let have = buf.len();
                if !fill(from, buf, have + 1).await {
                    return None;
                }
            };
            let size_text = String::from_utf8_lossy(&buf[..line_end]).to_string();
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            buf.drain(..line_end + 2);
            if size == 0 {
                // No trailers from the emulator: the closing blank line.
                if !fill(from, buf, 2).await {
                    return None;
                }
                buf.drain(..2);
                return Some(body);
            }
            if !fill(from, buf, size + 2).await {
                return None;
            }
            body.extend_from_slice(&buf[..size]);
            buf.drain(..size + 2);
        }
    }
    let length: usize = header(head, "content-length")?.parse().ok()?;
    if !fill(from, buf, length).await {
        return None;
    }
    Some(buf.drain(..length).collect())
}

fn strip_json(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.remove("odata.etag");
            map.values_mut().for_each(strip_json);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_json),
        _ => {}
    }
}

/// The answer without its ETags, framed with a Content-Length.
fn strip(head: &str, body: Vec<u8>) -> Vec<u8> {
    let content_type = header(head, "content-type")
        .unwrap_or("")
        .to_ascii_lowercase();
    let body = if content_type.contains("json") {
        match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(mut value) => {
                strip_json(&mut value);
                serde_json::to_vec(&value).unwrap()
            }
            Err(_) => body,
        }
    } else if content_type.contains("multipart") {
        let text = String::from_utf8_lossy(&body);
        text.split_inclusive("\r\n")
            .filter(|l| !l.to_ascii_lowercase().starts_with("etag:"))
            .collect::<String>()
            .into_bytes()
    } else {
        body
    };
    let mut out = String::new();
    for (i, line) in head.split("\r\n").enumerate() {
        let name = line.split(':').next().unwrap_or("").trim();
        if i > 0
            && (line.is_empty()
                || ["etag", "content-length", "transfer-encoding"]
                    .iter()
                    .any(|h| name.eq_ignore_ascii_case(h)))
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut answer = out.into_bytes();
    answer.extend_from_slice(&body);
    answer
}

/// Relays requests as they are and answers without their ETags, one
/// request at a time (the client waits for each answer).
async fn relay(mut client: TcpStream, mut server: TcpStream) {
    let (mut from_client, mut from_server) = (Vec::new(), Vec::new());
    loop {
        let Some(head_end) = read_head(&mut client, &mut from_client).await else {
            return;
        };
        let head = String::from_utf8_lossy(&from_client[..head_end]).to_string();
        let length = header(&head, "content-length").map_or(0, |v| v.parse().unwrap_or(0));
        if !fill(&mut client, &mut from_client, head_end + length).await {
            return;
        }
        let request: Vec<u8> = from_client.drain(..head_end + length).collect();
        if server.write_all(&request).await.is_err() {
            return;
        }

        let Some(head_end) = read_head(&mut server, &mut from_server).await else {
            return;
        };
        let head = String::from_utf8_lossy(&from_server[..head_end])
            .trim_end()
            .to_owned();
        from_server.drain(..head_end);
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let Some(body) = read_body(&mut server, &mut from_server, status, &head).await else {
            return;
        };
        if client.write_all(&strip(&head, body)).await.is_err() {
            return;
        }
    }
}
