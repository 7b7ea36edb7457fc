//! A loopback proxy between a client and the emulator that counts the HTTP
//! requests and the bytes the client sends, to show how many requests a
//! pattern makes per logical operation.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the client sent through the proxy.
#[derive(Debug, Default, Clone)]
pub struct Traffic {
    /// The request lines (`POST /devstoreaccount1/$batch HTTP/1.1`), in order.
    pub requests: Vec<String>,
    /// The bytes of all requests (heads and bodies).
    pub bytes: usize,
}

/// A running counting proxy.
#[derive(Clone)]
pub struct CountingProxy {
    traffic: Arc<Mutex<Traffic>>,
    connection_string: String,
}

impl CountingProxy {
    /// Starts a proxy in front of the emulator of `conn` (a connection string
    /// with a loopback `TableEndpoint`, and optionally a `BlobEndpoint`, whose
    /// requests are counted in the same [`Traffic`]).
    pub async fn start(conn: &str) -> CountingProxy {
        let traffic = Arc::new(Mutex::new(Traffic::default()));
        let mut connection_string = conn.to_owned();
        for (key, required) in [("TableEndpoint=", true), ("BlobEndpoint=", false)] {
            let Some(endpoint) = conn
                .split(';')
                .find_map(|p| p.trim().strip_prefix(key))
                .filter(|e| !e.is_empty())
            else {
                assert!(!required, "the connection string has a {key}");
                continue;
            };
            let local = listen(endpoint, traffic.clone()).await;
            connection_string = connection_string.replace(endpoint, &local);
        }
        CountingProxy {
            traffic,
            connection_string,
        }
    }

    /// A service client that talks through the proxy.
    pub fn service(&self) -> tablekit::TableServiceClient {
        tablekit::TableServiceClient::from_connection_string(&self.connection_string).unwrap()
    }

    /// A Blob service client of the same account that talks through the proxy.
    pub fn blob_service(&self) -> tablekit::BlobServiceClient {
        tablekit::BlobServiceClient::from_connection_string(&self.connection_string).unwrap()
    }

    /// The traffic since the last call, and a fresh count.
    pub fn take(&self) -> Traffic {
        std::mem::take(&mut *self.traffic.lock().unwrap())
    }
}

/// Relays a loopback listener to `endpoint` (`http://127.0.0.1:port/path`),
/// counting into `traffic`; returns the endpoint to use instead.
async fn listen(endpoint: &str, traffic: Arc<Mutex<Traffic>>) -> String {
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
            let server = TcpStream::connect(&upstream).await.unwrap();
            tokio::spawn(relay(client, server, traffic.clone()));
        }
    });
    format!("http://{local}/{path}")
}

async fn relay(client: TcpStream, server: TcpStream, traffic: Arc<Mutex<Traffic>>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    });
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        // One request: its head, then Content-Length bytes of body.
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match client_read.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        assert!(
            !head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "the proxy counts Content-Length bodies only"
        );
        let length = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        while buf.len() < head_end + length {
            match client_read.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let request: Vec<u8> = buf.drain(..head_end + length).collect();
        {
            let mut t = traffic.lock().unwrap();
            t.requests
                .push(head.lines().next().unwrap_or_default().to_owned());
            t.bytes += request.len();
        }
        if server_write.write_all(&request).await.is_err() {
            return;
        }
    }
}
