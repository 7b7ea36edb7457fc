//! A scripted service on a loopback port: it reads each request (head and
//! body, case kept), records it, and answers with the text a script returns
//! for it, then closes the connection. The Entra ID and Cosmos DB suites use
//! it to answer as a REST reference documents where no emulator can.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request line, e.g. `POST /devstoreaccount1/Tables HTTP/1.1`.
    pub line: String,
    /// The headers, names lower-cased, values as sent.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Seen {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The verb.
    pub fn method(&self) -> &str {
        self.line.split(' ').next().unwrap_or("")
    }

    /// The request target (path and query).
    pub fn target(&self) -> &str {
        self.line.split(' ').nth(1).unwrap_or("")
    }
}

/// What the script answers: the whole HTTP response, head and body.
pub type Script = Arc<dyn Fn(usize, &Seen) -> String + Send + Sync>;

/// An HTTP/1.1 response with `status`, extra `headers` and a JSON `body`
/// (an empty body when `body` is empty).
pub fn answer(status: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut out =
        format!("HTTP/1.1 {status}\r\nConnection: close\r\nx-ms-request-id: scripted\r\n");
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        out.push_str("Content-Type: application/json;odata=nometadata\r\n");
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    out
}

/// Serves `script`; returns the path-style endpoint
/// (`http://127.0.0.1:{port}/devstoreaccount1`) and the requests seen so far.
pub async fn serve(script: Script) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (script, log) = (script.clone(), log.clone());
            tokio::spawn(async move {
                let Some(request) = read(&mut sock).await else {
                    return;
                };
                let reply = {
                    let mut log = log.lock().unwrap();
                    let n = log.len();
                    log.push(request.clone());
                    script(n, &request)
                };
                let _ = sock.write_all(reply.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (format!("http://{addr}/devstoreaccount1"), seen)
}

async fn read(sock: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let mut lines = head.split("\r\n");
            let line = lines.next()?.to_owned();
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            let len = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .and_then(|(_, v)| v.parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            return Some(Seen {
                line,
                headers,
                body: buf[end + 4..end + 4 + len].to_vec(),
            });
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
