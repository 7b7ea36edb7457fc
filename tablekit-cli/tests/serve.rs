//! `tablekit-cli serve` as a process: spawned on free ports (port 0) and a
//! temporary store file, found through the connection string it prints, and
//! stopped with SIGTERM (graceful, exit 0) or SIGKILL (nothing acknowledged
//! lost); a second `serve` on the same file and a port in use are refused
//! with exit code 2 and a message that says why.
//!
//! Every child is stopped by its PID when its guard drops, whatever the test
//! did before.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};

use tablekit::{DynamicEntity, Storage};

const BIN: &str = env!("CARGO_BIN_EXE_tablekit-cli");

/// A running `tablekit-cli serve`, killed (SIGKILL) and reaped on drop.
struct Served {
    child: Child,
    /// Standard output after the ready lines, kept open (a closed pipe would
    /// fail the server's later writes).
    _stdout: BufReader<ChildStdout>,
    /// The ready lines, as printed.
    lines: Vec<String>,
    connection_string: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// `tablekit-cli serve <args>` on three free ports, once it has printed
    /// its connection string.
    fn start(args: &[&str]) -> Served {
        let mut child = serve_command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tablekit-cli serve");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut lines = Vec::new();
        let connection_string = loop {
            let mut line = String::new();
            let n = stdout.read_line(&mut line).expect("read serve's output");
            if n == 0 {
                // It exited before it was ready: say why.
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                let status = child.wait().expect("wait");
                panic!("serve exited ({status}) before it was ready: {err}\n{lines:?}");
            }
            let line = line.trim_end().to_owned();
            lines.push(line.clone());
            if let Some(cs) = line.strip_prefix("connection string: ") {
                break cs.to_owned();
            }
        };
        Served {
            child,
            _stdout: stdout,
            lines,
            connection_string,
        }
    }

    fn storage(&self) -> Storage {
        Storage::from_connection_string(&self.connection_string).expect("a connection string")
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("send the signal");
    }

    /// Reads standard error up to a line that contains `text` (the lines
    /// read are gone).
    fn stderr_until(&mut self, text: &str) -> String {
        let stderr = self.child.stderr.as_mut().expect("piped");
        let mut read = Vec::new();
        let mut byte = [0u8; 1];
        // Byte by byte, so that nothing after the line is taken from the pipe.
        loop {
            match stderr.read(&mut byte).expect("read serve's standard error") {
                0 => panic!(
                    "no {text:?} on standard error: {}",
                    String::from_utf8_lossy(&read)
                ),
                _ => read.push(byte[0]),
            }
            if byte[0] == b'\n' {
                let text_read = String::from_utf8_lossy(&read);
                if text_read.lines().last().is_some_and(|l| l.contains(text)) {
                    return text_read.into_owned();
                }
            }
        }
    }

    /// Sends `signal` and waits for the exit (bounded: a server that does
    /// not stop fails the test instead of hanging it).
    fn stop_with(&mut self, signal: nix::sys::signal::Signal) -> (ExitStatus, String) {
        self.signal(signal);
        self.exit()
    }

    /// Waits for the exit (bounded); its status and the rest of standard
    /// error.
    fn exit(&mut self) -> (ExitStatus, String) {
        let status = wait_bounded(&mut self.child);
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut err)
                .expect("read serve's standard error");
        }
        (status, err)
    }
}

fn serve_command(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("serve")
        .args(["--blob-port", "0", "--queue-port", "0", "--table-port", "0"])
        .args(args)
        .stdin(Stdio::null());
    command
}

/// The exit status of `child`, waited for at most a minute (then killed and
/// the test failed: a hang guard, not a timing assertion).
fn wait_bounded(child: &mut Child) -> ExitStatus {
    for _ in 0..600 {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("serve did not exit within a minute");
}

/// `tablekit-cli serve <args>` that must fail to start: its exit status and
/// standard error.
fn refused(args: &[&str]) -> (ExitStatus, String) {
    let mut child = serve_command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tablekit-cli serve");
    // Killed on the way out if it started after all.
    struct Guard(Child);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut out)
        .ok();
    let mut guard = Guard(child);
    let status = wait_bounded(&mut guard.0);
    let mut err = String::new();
    if let Some(mut e) = guard.0.stderr.take() {
        e.read_to_string(&mut err)
            .expect("read serve's standard error");
    }
    assert!(
        !out.contains("connection string:"),
        "it started: {out}\n{err}"
    );
    (status, err)
}

/// A store file path in a fresh temporary folder, removed (with the files
/// beside it) on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "tablekit-cli-serve-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        TempDir(dir)
    }

    fn file(&self) -> PathBuf {
        self.0.join("store.redb")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

/// The table names a store file holds, opened in this process (the server
/// that held it is gone).
fn tables_in(file: &Path) -> Vec<String> {
    runtime().block_on(async {
        let storage = Storage::embedded_at(file).expect("the file reopens");
        storage
            .tables()
            .unwrap()
            .list_tables()
            .fetch_all()
            .await
            .expect("list the tables")
    })
}

#[test]
fn the_printed_lines_name_each_service_and_a_working_connection_string() {
    let served = Served::start(&[]);
    let lines = served.lines.join("\n");
    assert!(lines.contains("(in memory)"), "{lines}");
    for service in ["blob", "queue", "table"] {
        let line = served
            .lines
            .iter()
            .find(|l| l.starts_with(&format!("{service}: http://127.0.0.1:")))
            .unwrap_or_else(|| panic!("no {service} line: {lines}"));
        let port: u16 = line.rsplit(':').next().unwrap().parse().unwrap();
        assert_ne!(port, 0, "{line}");
        assert!(
            served
                .connection_string
                .contains(&format!("http://127.0.0.1:{port}/devstoreaccount1")),
            "{line} in {}",
            served.connection_string
        );
    }
    // The printed connection string reaches the server: tablekit over HTTP.
    let storage = served.storage();
    runtime().block_on(async {
        let table = storage.table::<DynamicEntity>("Printed").unwrap();
        assert!(table.create_table_if_not_exists().await.unwrap());
        assert!(!table.create_table_if_not_exists().await.unwrap());
        table
            .insert(&DynamicEntity::new("p", "r").with("Said", "hello"))
            .await
            .unwrap();
        let read = table.get(("p", "r")).await.unwrap().expect("the entity");
        assert_eq!(read.get("Said"), Some(&"hello".into()));
    });
}

#[test]
fn sigterm_stops_gracefully_with_exit_0_and_the_file_reopens_with_the_data() {
    let dir = TempDir::new();
    let file = dir.file();
    let mut served = Served::start(&[path_str(&file)]);
    assert!(
        served.lines[0].contains(&format!("(store file {})", file.display())),
        "{:?}",
        served.lines
    );
    let storage = served.storage();
    runtime().block_on(async {
        for name in ["Before", "Sigterm"] {
            storage.tables().unwrap().create_table(name).await.unwrap();
        }
        let table = storage.table::<DynamicEntity>("Sigterm").unwrap();
        table
            .insert(&DynamicEntity::new("p", "kept").with("N", 7))
            .await
            .unwrap();
    });
    let (status, err) = served.stop_with(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("SIGTERM: stopping"), "{err}");
    assert!(err.contains("stopped"), "{err}");
    // Closed: this process can open it, with what was written.
    assert_eq!(tables_in(&file), ["Before", "Sigterm"]);
    runtime().block_on(async {
        let storage = Storage::embedded_at(&file).unwrap();
        let table = storage.table::<DynamicEntity>("Sigterm").unwrap();
        let kept = table.get(("p", "kept")).await.unwrap().expect("the entity");
        assert_eq!(kept.get("N"), Some(&7.into()));
    });
}

#[test]
fn sigint_stops_gracefully_too() {
    let mut served = Served::start(&[]);
    let (status, err) = served.stop_with(nix::sys::signal::Signal::SIGINT);
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("SIGINT: stopping"), "{err}");
}

#[test]
fn sigkill_after_acknowledged_writes_loses_none_of_them() {
    const N: usize = 200;
    let dir = TempDir::new();
    let file = dir.file();
    let mut served = Served::start(&[path_str(&file)]);
    let storage = served.storage();
    runtime().block_on(async {
        let table = storage.table::<DynamicEntity>("Acked").unwrap();
        table.create_table().await.unwrap();
        // Each acknowledged (the server answered) before the next is sent.
        for i in 0..N {
            let e =
                DynamicEntity::new(format!("p{}", i % 7), format!("r{i:04}")).with("I", i as i64);
            table.insert(&e).await.unwrap();
        }
        let queue = storage.queue("acked").unwrap();
        queue.create_queue().await.unwrap();
        queue.send("the acknowledged message").await.unwrap();
        let container = storage.container("acked").unwrap();
        container.create_container().await.unwrap();
        container
            .blob("acked.bin")
            .unwrap()
            .upload(vec![7u8; 5000])
            .await
            .unwrap();
    });
    let (status, _) = served.stop_with(nix::sys::signal::Signal::SIGKILL);
    assert_eq!(status.code(), None, "killed, not exited");
    drop(served);
    // A new server on the file has every acknowledged write.
    let again = Served::start(&[path_str(&file)]);
    let storage = again.storage();
    runtime().block_on(async {
        let table = storage.table::<DynamicEntity>("Acked").unwrap();
        let all = table.query().fetch_all().await.unwrap();
        assert_eq!(all.len(), N, "entities after the SIGKILL");
        for i in 0..N {
            let e = table
                .get((format!("p{}", i % 7).as_str(), format!("r{i:04}").as_str()))
                .await
                .unwrap()
                .expect("an acknowledged entity");
            assert_eq!(e.get("I"), Some(&(i as i64).into()));
        }
        let messages = storage.queue("acked").unwrap().peek(32).await.unwrap();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert_eq!(messages[0].text().unwrap(), "the acknowledged message");
        let blob = storage
            .container("acked")
            .unwrap()
            .blob("acked.bin")
            .unwrap()
            .download()
            .bytes()
            .await
            .unwrap();
        assert_eq!(&blob[..], &[7u8; 5000][..]);
    });
}

#[test]
fn a_second_serve_on_the_same_file_is_refused_naming_the_file() {
    let dir = TempDir::new();
    let file = dir.file();
    let _first = Served::start(&[path_str(&file)]);
    let (status, err) = refused(&[path_str(&file)]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains(path_str(&file)), "{err}");
    assert!(err.contains("in use"), "{err}");
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let (status, err) = refused(&["--table-port", &port]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "cannot listen on 127.0.0.1:{port} for the Table service"
        )),
        "{err}"
    );
    assert!(err.contains("--table-port"), "{err}");
}

#[test]
fn bad_options_exit_2_with_the_usage() {
    let (status, err) = refused(&["--table-port", "many"]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("--table-port needs a port number"), "{err}");
    assert!(err.contains("usage: tablekit-cli serve"), "{err}");
    let help = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("SIGTERM"), "{help}");
    let main_help = Command::new(BIN).arg("--help").output().unwrap();
    let main_help = String::from_utf8(main_help.stdout).unwrap();
    assert!(
        main_help.contains("tablekit-cli serve [<file>]"),
        "{main_help}"
    );
}

/// A request whose body has not all been sent: in flight until the rest
/// comes. `table_address` is `127.0.0.1:<port>`.
fn half_sent_request(table_address: &str) -> (std::net::TcpStream, &'static [u8]) {
    let body: &'static [u8] = br#"{"TableName":"InFlight"}"#;
    let mut stream = std::net::TcpStream::connect(table_address).unwrap();
    write!(
        stream,
        "POST /devstoreaccount1/Tables HTTP/1.1\r\nHost: {table_address}\r\n\
         Content-Type: application/json\r\nAccept: application/json;odata=nometadata\r\n\
         x-ms-version: 2019-02-02\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.write_all(&body[..5]).unwrap();
    stream.flush().unwrap();
    (stream, &body[5..])
}

fn table_address(served: &Served) -> String {
    served
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("table: http://"))
        .expect("a table line")
        .to_owned()
}

#[test]
fn a_request_in_flight_at_sigterm_is_answered_before_the_exit() {
    let mut served = Served::start(&[]);
    let (mut stream, rest) = half_sent_request(&table_address(&served));
    served.signal(nix::sys::signal::Signal::SIGTERM);
    served.stderr_until("SIGTERM: stopping");
    // The rest of the body, after the signal: the request is answered.
    stream.write_all(rest).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("x-ms-request-id:"),
        "{answer}"
    );
    let (status, err) = served.exit();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("stopped"), "{err}");
}

#[test]
fn a_second_signal_exits_at_once_without_waiting_for_requests_in_flight() {
    let mut served = Served::start(&[]);
    // Never finished: the graceful shutdown would wait for it.
    let (_stream, _) = half_sent_request(&table_address(&served));
    served.signal(nix::sys::signal::Signal::SIGTERM);
    served.stderr_until("SIGTERM: stopping");
    let (status, err) = served.stop_with(nix::sys::signal::Signal::SIGINT);
    assert_eq!(status.code(), Some(128 + 2), "{err}");
    assert!(err.contains("SIGINT: exiting at once"), "{err}");
    assert!(!err.contains("stopped"), "{err}");
}

/// One request over a connection of its own (closed after the answer): the
/// answer's head and body as text.
fn raw_request(address: &str, head: &str, body: &[u8]) -> String {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "{head}\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.write_all(body).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// An HS256 JWT of `claims`, signed with `secret`.
fn hs256_token(secret: &[u8], claims: &str) -> String {
    use base64::Engine as _;
    use hmac::Mac as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let signed = format!(
        "{}.{}",
        b64.encode(br#"{"alg":"HS256","typ":"JWT"}"#),
        b64.encode(claims)
    );
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret).unwrap();
    mac.update(signed.as_bytes());
    format!("{signed}.{}", b64.encode(mac.finalize().into_bytes()))
}

/// Creates the table `name` with `token` as its bearer token: the answer.
fn create_table_with_token(served: &Served, name: &str, token: &str) -> String {
    let body = format!(r#"{{"TableName":"{name}"}}"#);
    raw_request(
        &table_address(served),
        &format!(
            "POST /devstoreaccount1/Tables HTTP/1.1\r\nAuthorization: Bearer {token}\r\n\
             x-ms-version: 2021-12-02\r\nContent-Type: application/json\r\n\
             Accept: application/json;odata=nometadata\r\nPrefer: return-no-content"
        ),
        body.as_bytes(),
    )
}

#[test]
fn bearer_tokens_are_checked_with_the_secret_from_its_file() {
    let dir = TempDir::new();
    let secret_file = dir.0.join("bearer-secret");
    std::fs::write(&secret_file, "the test issuer's secret\n").unwrap();
    let issuer = "https://sts.windows.net/test-tenant/";
    let served = Served::start(&[
        "--bearer-hs256-secret-file",
        path_str(&secret_file),
        "--bearer-issuer",
        issuer,
        "--bearer-tenant",
        "test-tenant",
    ]);
    let exp = unix_now() + 3600;
    let claims =
        |iss: &str| format!(r#"{{"aud":"https://storage.azure.com","iss":"{iss}","exp":{exp}}}"#);
    // The file's secret, without its newline, signs a token that is taken.
    let good = hs256_token(b"the test issuer's secret", &claims(issuer));
    let answer = create_table_with_token(&served, "ByBearer", &good);
    assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
    // Another secret, or another issuer: 401 with the challenge.
    for token in [
        hs256_token(b"another secret", &claims(issuer)),
        hs256_token(
            b"the test issuer's secret",
            &claims("https://evil.example/"),
        ),
    ] {
        let answer = create_table_with_token(&served, "Refused", &token);
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        assert!(
            answer.contains("login.microsoftonline.com/test-tenant/oauth2/authorize"),
            "{answer}"
        );
    }
    // A server without a bearer option takes no token at all.
    let plain = Served::start(&[]);
    let answer = create_table_with_token(&plain, "NoBearer", &good);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
}

/// Seconds since the epoch.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn another_account_is_served_from_its_own_file_with_its_own_key() {
    use base64::Engine as _;
    let dir = TempDir::new();
    let file = dir.file();
    let key = base64::engine::general_purpose::STANDARD.encode([42u8; 64]);
    let account = format!("other1:{key}");
    let mut served = Served::start(&[path_str(&file), "--account", &account]);
    assert!(
        served
            .lines
            .iter()
            .any(|l| l == "accounts: devstoreaccount1, other1"),
        "{:?}",
        served.lines
    );
    assert!(
        !served.lines.iter().any(|l| l.contains(&key)),
        "its key is not printed"
    );
    // Its connection string: the printed endpoints, its name and key.
    let other = served
        .connection_string
        .replace("devstoreaccount1", "other1")
        .replace(tablekit::server::DEV_KEY, &key);
    let wrong_key = served
        .connection_string
        .replace("devstoreaccount1", "other1");
    runtime().block_on(async {
        let storage = Storage::from_connection_string(&other).unwrap();
        storage
            .tables()
            .unwrap()
            .create_table("OtherOnly")
            .await
            .unwrap();
        // Signed with another key: refused.
        let wrong = Storage::from_connection_string(&wrong_key).unwrap();
        let err = wrong
            .tables()
            .unwrap()
            .create_table("Refused")
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(403), "{err}");
    });
    let (status, err) = served.stop_with(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(status.code(), Some(0), "{err}");
    // Its store is the file beside the emulator account's.
    let mut other_file = file.clone().into_os_string();
    other_file.push(".other1");
    assert_eq!(tables_in(std::path::Path::new(&other_file)), ["OtherOnly"]);
    assert!(tables_in(&file).is_empty());
}
