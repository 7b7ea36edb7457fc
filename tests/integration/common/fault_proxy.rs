//! A fault-injecting HTTP proxy on loopback, between a client and the emulator.
//!
//! Each request gets one fate, drawn from a seeded generator: forwarded as it
//! is, delayed and then forwarded, dropped before it reaches the server,
//! answered 500 or 503 by the proxy itself (the server never sees it), dropped
//! after the server applied it (the answer is thrown away), or cut off in the
//! middle of the answer. Every request gets a connection of its own to the
//! server (`Connection: close` both ways), so a fault never spills over to the
//! next request.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How often each fault happens, per request (the rest are forwarded intact).
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    /// The connection is closed before the request is forwarded.
    pub drop_before: f64,
    /// The request is forwarded and applied; its answer is thrown away.
    pub drop_after: f64,
    /// The proxy answers 503 Server Busy without forwarding.
    pub busy_503: f64,
    /// The proxy answers 500 without forwarding.
    pub error_500: f64,
    /// The request waits [`Faults::delay`] before it is forwarded.
    pub delayed: f64,
    /// How long a delayed request waits.
    pub delay: Duration,
    /// The answer is cut off halfway and the connection closed.
    pub reset_mid_answer: f64,
}

impl Faults {
    /// The mix of the issue that measured tablekit: 2% dropped before, 2%
    /// dropped after, 3% 503, 1% 500, 5% delayed, 1% reset mid-answer.
    pub fn standard(delay: Duration) -> Faults {
        Faults {
            drop_before: 0.02,
            drop_after: 0.02,
            busy_503: 0.03,
            error_500: 0.01,
            delayed: 0.05,
            delay,
            reset_mid_answer: 0.01,
        }
    }
}

/// What happened to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fate {
    Forwarded,
    Delayed,
    DroppedBefore,
    DroppedAfter,
    Busy503,
    Error500,
    ResetMidAnswer,
}

/// A running proxy.
#[derive(Clone)]
pub struct FaultProxy {
    connection_string: String,
    fates: Arc<Mutex<Vec<Fate>>>,
}

impl FaultProxy {
    /// Starts a proxy in front of the table endpoint of `conn` (a connection
    /// string naming a loopback `TableEndpoint`), drawing fates from `seed`.
    pub async fn start(conn: &str, faults: Faults, seed: u64) -> FaultProxy {
        let rng = Mutex::new(fastrand::Rng::with_seed(seed));
        Self::dealing(conn, faults, move || draw(faults, &rng)).await
    }

    /// A proxy that deals `fates` to the requests in the order they arrive,
    /// then forwards every later one intact: a fault exactly where a test
    /// wants it (delays last one second).
    pub async fn scripted(conn: &str, fates: Vec<Fate>) -> FaultProxy {
        let script = Mutex::new(std::collections::VecDeque::from(fates));
        let faults = Faults {
            delay: Duration::from_secs(1),
            ..Faults::standard(Duration::ZERO)
        };
        Self::dealing(conn, faults, move || {
            script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Fate::Forwarded)
        })
        .await
    }

    async fn dealing(
        conn: &str,
        faults: Faults,
        deal: impl Fn() -> Fate + Send + Sync + 'static,
    ) -> FaultProxy {
        let endpoint = conn
            .split(';')
            .find_map(|p| p.trim().strip_prefix("TableEndpoint="))
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
        let fates = Arc::new(Mutex::new(Vec::new()));
        let deal = Arc::new(deal);
        let kept = fates.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let deal = deal.clone();
                let kept = kept.clone();
                tokio::spawn(async move {
                    if let Some(fate) = serve(client, &upstream, faults, &*deal).await {
                        kept.lock().unwrap().push(fate);
                    }
                });
            }
        });
        FaultProxy {
            connection_string: conn.replace(endpoint, &format!("http://{local}/{path}")),
            fates,
        }
    }

    /// The connection string that leads through the proxy.
    pub fn connection_string(&self) -> &str {
        &self.connection_string
    }

    /// The fates dealt so far, in the order the requests arrived.
    pub fn fates(&self) -> Vec<Fate> {
        self.fates.lock().unwrap().clone()
    }
}

fn draw(faults: Faults, rng: &Mutex<fastrand::Rng>) -> Fate {
    let x = rng.lock().unwrap().f64();
    let table = [
        (faults.drop_before, Fate::DroppedBefore),
        (faults.drop_after, Fate::DroppedAfter),
        (faults.busy_503, Fate::Busy503),
        (faults.error_500, Fate::Error500),
        (faults.delayed, Fate::Delayed),
        (faults.reset_mid_answer, Fate::ResetMidAnswer),
    ];
    let mut edge = 0.0;
    for (p, fate) in table {
        edge += p;
        if x < edge {
            return fate;
        }
    }
    Fate::Forwarded
}

/// Serves the one request of a client connection.
async fn serve(
    mut client: TcpStream,
    upstream: &str,
    faults: Faults,
    deal: &(dyn Fn() -> Fate + Send + Sync),
) -> Option<Fate> {
    let request = read_request(&mut client).await?;
    let fate = deal();
    match fate {
        Fate::DroppedBefore => return Some(fate),
        Fate::Busy503 | Fate::Error500 => {
            let (status, code) = if fate == Fate::Busy503 {
                ("503 Server Busy", "ServerBusy")
            } else {
                ("500 Internal Server Error", "InternalError")
            };
            let body = format!(
                r#"{{"odata.error":{{"code":"{code}","message":{{"lang":"en-US","value":"injected by the fault proxy"}}}}}}"#
            );
            let answer = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = client.write_all(answer.as_bytes()).await;
            return Some(fate);
        }
        Fate::Delayed => tokio::time::sleep(faults.delay).await,
        _ => {}
    }
    let mut server = TcpStream::connect(upstream).await.ok()?;
    server.write_all(&request).await.ok()?;
    let mut answer = Vec::new();
    server.read_to_end(&mut answer).await.ok()?;
    match fate {
        Fate::DroppedAfter => {}
        Fate::ResetMidAnswer => {
            let _ = client.write_all(&answer[..answer.len() / 2]).await;
        }
        _ => {
            let _ = client.write_all(&answer).await;
        }
    }
    let _ = client.shutdown().await;
    Some(fate)
}

/// Reads one request (head and Content-Length body) and returns it with its
/// head rewritten to `Connection: close`; `None` if the client went away.
async fn read_request(sock: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + 4 + len {
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let mut out = Vec::with_capacity(buf.len() + 20);
    for line in head.split("\r\n") {
        if line
            .split_once(':')
            .is_some_and(|(n, _)| n.eq_ignore_ascii_case("connection"))
        {
            continue;
        }
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out.extend_from_slice(&buf[head_end + 4..head_end + 4 + len]);
    Some(out)
}
