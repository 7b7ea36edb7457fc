//! `tablekit-cli serve`: the Table, Queue and Blob REST APIs over HTTP from
//! the embedded store ([`tablekit::server::Server`]), in memory or in a
//! store file, until SIGTERM or Ctrl-C.
//!
//! When it is ready it prints, and flushes, one line per service address and
//! the emulator account's connection string, so that a caller that asked
//! for port 0 learns the ports from standard output:
//!
//! ```text
//! blob: http://127.0.0.1:10000
//! queue: http://127.0.0.1:10001
//! table: http://127.0.0.1:10002
//! connection string: DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=...;BlobEndpoint=...;QueueEndpoint=...;TableEndpoint=...;
//! ```
//!
//! A first SIGTERM or SIGINT stops accepting connections, lets the requests
//! in flight finish, closes the store and exits 0; a second one exits at once
//! (128 + the signal's number), which loses nothing acknowledged either: the
//! store file keeps every write it acknowledged, even through a SIGKILL.
//! What stops it from starting (a bad option, a port in use, a store file
//! held by another process) is said on standard error, with exit code 2.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;

use tablekit::server::{BearerConfig, Server, ServerBuilder, DEV_ACCOUNT};

/// `tablekit-cli serve --help`.
pub(crate) const HELP: &str = "\
usage: tablekit-cli serve [<file>] [--host <ip>] [--blob-port <n>] [--queue-port <n>]
                          [--table-port <n>] [--account <name>:<base64 key>]...
                          [--bearer-hs256-secret-file <file> | --bearer-rs256-key-file <pem>]
                          [--bearer-audience <aud>]... [--bearer-issuer <iss>] [--bearer-tenant <t>]

Serves the Table, Queue and Blob REST APIs over HTTP from the embedded store,
for any client that reaches Azurite: the official SDKs, Storage Explorer,
tablekit over HTTP, several processes at once. The embedded store's strict
rules hold: it answers as the service does where Azurite does not.

<file>           keep the store in this file (created if missing), the same file
                 an application opens with embedded_at, one process at a time;
                 every write acknowledged is there after a crash. Without it the
                 store is in memory and gone when serve stops.
--host <ip>      the address to listen on (default 127.0.0.1)
--blob-port <n>  the Blob service's port (default 10000)
--queue-port <n> the Queue service's port (default 10001)
--table-port <n> the Table service's port (default 10002)
                 The defaults are Azurite's, so UseDevelopmentStorage=true
                 reaches serve unchanged; port 0 picks a free port.
--account <name>:<base64 key>
                 serve one more account (3 to 24 lower-case letters and digits),
                 beside the emulator's devstoreaccount1 and its well-known key;
                 with <file>, its store is <file>.<name>. May be repeated.
                 (The key is visible in the process list: use it for test keys.)

Requests are authenticated as the service does it: Shared Key and Shared Key
Lite with an account's key, service and account SAS (stored access policies
included), and, when configured, bearer tokens (Authorization: Bearer <JWT>,
as Microsoft Entra ID issues them), which give full access to the account:
--bearer-hs256-secret-file <file>
                 accept tokens signed with HS256 keyed with the file's bytes
                 (less one trailing newline)
--bearer-rs256-key-file <pem>
                 accept tokens signed with RS256, verified with the RSA public
                 key in the PEM file (BEGIN PUBLIC KEY or BEGIN RSA PUBLIC KEY)
--bearer-audience <aud>
                 accept tokens for this audience (aud); may be repeated. The
                 default is https://storage.azure.com and the account's own
                 endpoint on this server.
--bearer-issuer <iss>
                 accept only tokens issued by <iss> (default: any issuer)
--bearer-tenant <t>
                 the tenant the 401 challenge names (default: common)
Tokens are checked for their signature, audience, issuer and lifetime (exp,
nbf, five minutes of skew). Without a bearer option, bearer tokens are refused.

When ready, serve prints one line per service (blob: http://127.0.0.1:10000)
and the emulator account's connection string (connection string: ...), then
flushes standard output: with port 0, that is how a caller learns the ports.
Use 127.0.0.1 rather than localhost in a connection string: the Python SDK
takes localhost on a port other than 10002 for the Cosmos DB emulator.

SIGTERM or Ctrl-C stops it gracefully: no new connections, the requests in
flight finish, the store is closed, exit code 0. A second signal exits at
once. A port in use, a store file held by another process, or a bad option is
an error (exit code 2).";

/// What `serve`'s command line asks for.
#[derive(Debug, PartialEq)]
pub(crate) enum Serve {
    /// `serve --help`.
    Help,
    /// Serve with these options.
    Run(ServeArgs),
}

/// `serve`'s options.
#[derive(PartialEq)]
pub(crate) struct ServeArgs {
    file: Option<PathBuf>,
    host: Option<IpAddr>,
    blob_port: u16,
    queue_port: u16,
    table_port: u16,
    /// More accounts: name and base64 key (never printed: see `Debug`).
    accounts: Vec<(String, String)>,
    bearer: BearerArgs,
}

/// How bearer tokens are checked, as the command line says.
#[derive(Debug, Default, PartialEq)]
struct BearerArgs {
    hs256_secret_file: Option<PathBuf>,
    rs256_key_file: Option<PathBuf>,
    audiences: Vec<String>,
    issuer: Option<String>,
    tenant: Option<String>,
}

impl std::fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeArgs")
            .field("file", &self.file)
            .field("host", &self.host)
            .field("blob_port", &self.blob_port)
            .field("queue_port", &self.queue_port)
            .field("table_port", &self.table_port)
            .field(
                "accounts",
                &self.accounts.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("bearer", &self.bearer)
            .finish()
    }
}

/// Reads `serve`'s arguments (those after `serve`).
pub(crate) fn parse(args: &[String]) -> Result<Serve, String> {
    let mut parsed = ServeArgs {
        file: None,
        host: None,
        blob_port: 10000,
        queue_port: 10001,
        table_port: 10002,
        accounts: Vec::new(),
        bearer: BearerArgs::default(),
    };
    let mut args = args.iter();
    while let Some(a) = args.next() {
        let mut value = |what: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs {what}"))
        };
        let port = |v: String| {
            v.parse::<u16>()
                .map_err(|_| format!("{a} needs a port number (0 to 65535), not {v:?}"))
        };
        match a.as_str() {
            "--help" | "-h" => return Ok(Serve::Help),
            "--host" => {
                let v = value("an IP address")?;
                parsed.host = Some(v.parse().map_err(|_| {
                    format!("--host needs an IP address (127.0.0.1, ::1, 0.0.0.0), not {v:?}")
                })?);
            }
            "--blob-port" => parsed.blob_port = port(value("a port number")?)?,
            "--queue-port" => parsed.queue_port = port(value("a port number")?)?,
            "--table-port" => parsed.table_port = port(value("a port number")?)?,
            "--account" => {
                let v = value("<name>:<base64 key>")?;
                let (name, key) = v
                    .split_once(':')
                    .filter(|(n, k)| !n.is_empty() && !k.is_empty())
                    .ok_or("--account needs <name>:<base64 key>")?;
                parsed.accounts.push((name.to_owned(), key.to_owned()));
            }
            "--bearer-hs256-secret-file" => {
                parsed.bearer.hs256_secret_file = Some(PathBuf::from(value("a file")?));
            }
            "--bearer-rs256-key-file" => {
                parsed.bearer.rs256_key_file = Some(PathBuf::from(value("a PEM file")?));
            }
            "--bearer-audience" => parsed.bearer.audiences.push(value("an audience")?),
            "--bearer-issuer" => parsed.bearer.issuer = Some(value("an issuer")?),
            "--bearer-tenant" => parsed.bearer.tenant = Some(value("a tenant")?),
            other if other.starts_with('-') => {
                return Err(format!("unknown option {other:?}"));
            }
            file => {
                if parsed.file.is_some() {
                    return Err(format!(
                        "one store file only, and {file:?} is a second (options start with --)"
                    ));
                }
                parsed.file = Some(PathBuf::from(file));
            }
        }
    }
    let b = &parsed.bearer;
    match (&b.hs256_secret_file, &b.rs256_key_file) {
        (Some(_), Some(_)) => {
            return Err(
                "one bearer key: --bearer-hs256-secret-file or --bearer-rs256-key-file".into(),
            );
        }
        (None, None) if !b.audiences.is_empty() || b.issuer.is_some() || b.tenant.is_some() => {
            return Err(
                "--bearer-audience, --bearer-issuer and --bearer-tenant need a bearer key \
                        (--bearer-hs256-secret-file or --bearer-rs256-key-file)"
                    .into(),
            );
        }
        _ => {}
    }
    let ports = [parsed.blob_port, parsed.queue_port, parsed.table_port];
    for (i, p) in ports.iter().enumerate() {
        if *p != 0 && ports[..i].contains(p) {
            return Err(format!("port {p} is given to two services"));
        }
    }
    Ok(Serve::Run(parsed))
}

impl ServeArgs {
    /// The server these options describe; an account refused (its name or
    /// key) is an error that does not show the key.
    fn builder(&self) -> Result<ServerBuilder, String> {
        let mut builder = Server::builder().ports(self.blob_port, self.queue_port, self.table_port);
        if let Some(host) = self.host {
            builder = builder.host(host);
        }
        if let Some(file) = &self.file {
            builder = builder.file(file);
        }
        for (name, key) in &self.accounts {
            builder = builder.account(name, key).map_err(|e| {
                format!(
                    "--account {name}:<key>: {}",
                    e.to_string().replace(key, "<key>")
                )
            })?;
        }
        if let Some(bearer) = self.bearer.config()? {
            builder = builder.bearer(bearer);
        }
        Ok(builder)
    }
}

impl BearerArgs {
    /// The bearer check these options ask for (`None` without a key),
    /// its key read from its file. An error names the file, never its
    /// content.
    fn config(&self) -> Result<Option<BearerConfig>, String> {
        let read = |option: &str, path: &PathBuf| {
            std::fs::read(path).map_err(|e| format!("{option} {}: {e}", path.display()))
        };
        let mut config = if let Some(path) = &self.hs256_secret_file {
            let mut secret = read("--bearer-hs256-secret-file", path)?;
            // One trailing newline, as an editor or `echo` leaves it.
            if secret.last() == Some(&b'\n') {
                secret.pop();
                if secret.last() == Some(&b'\r') {
                    secret.pop();
                }
            }
            if secret.is_empty() {
                return Err(format!(
                    "--bearer-hs256-secret-file {}: the file is empty",
                    path.display()
                ));
            }
            BearerConfig::hs256(secret)
        } else if let Some(path) = &self.rs256_key_file {
            let pem = read("--bearer-rs256-key-file", path)?;
            let pem = String::from_utf8(pem).map_err(|_| {
                format!(
                    "--bearer-rs256-key-file {}: not a PEM text file",
                    path.display()
                )
            })?;
            BearerConfig::rs256_pem(&pem)
                .map_err(|e| format!("--bearer-rs256-key-file {}: {e}", path.display()))?
        } else {
            return Ok(None);
        };
        for audience in &self.audiences {
            config = config.audience(audience.clone());
        }
        if let Some(issuer) = &self.issuer {
            config = config.issuer(issuer.clone());
        }
        if let Some(tenant) = &self.tenant {
            config = config.tenant(tenant.clone());
        }
        Ok(Some(config))
    }
}

/// Runs `serve` with its arguments, on a multi-threaded runtime of its own,
/// until a signal stops it; the process's exit code. The runtime, and with
/// it the server and its store, is gone when this returns.
pub(crate) fn main(args: &[String]) -> i32 {
    let serve = match parse(args) {
        Ok(Serve::Help) => {
            println!("{HELP}");
            return 0;
        }
        Ok(Serve::Run(serve)) => serve,
        Err(e) => {
            let usage: Vec<&str> = HELP.lines().take_while(|l| !l.is_empty()).collect();
            eprintln!(
                "tablekit-cli serve: {e}\n{}\n(tablekit-cli serve --help says more)",
                usage.join("\n")
            );
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tablekit-cli serve: cannot start the runtime: {e}");
            return 2;
        }
    };
    let code = runtime.block_on(async {
        match run(&serve, &mut std::io::stdout()).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("tablekit-cli serve: {e}");
                2
            }
        }
    });
    drop(runtime);
    code
}

/// Starts the server, says where it is on `out`, and serves until a signal:
/// 0 after a graceful shutdown, 128 + the signal's number after a second
/// signal cut it short.
async fn run(serve: &ServeArgs, out: &mut impl Write) -> Result<i32, String> {
    // Listened for before anything is printed: a caller may signal as soon
    // as it has read the connection string.
    let mut signals = Signals::new().map_err(|e| format!("cannot listen for signals: {e}"))?;
    let server = serve.builder()?.start().await.map_err(|e| {
        let mut message = e.to_string();
        if message.contains("cannot listen on") {
            message.push_str(
                "\n(Azurite or another serve on that port? --blob-port, --queue-port and \
                 --table-port choose others; 0 picks a free one)",
            );
        }
        message
    })?;
    ready(&server, serve, out).map_err(|e| format!("cannot write to standard output: {e}"))?;
    let first = signals.next().await;
    eprintln!(
        "tablekit-cli serve: {}: stopping (the requests in flight finish; another signal exits at once)",
        first.name
    );
    tokio::select! {
        stopped = server.shutdown() => {
            stopped.map_err(|e| e.to_string())?;
            eprintln!("tablekit-cli serve: stopped");
            Ok(0)
        }
        second = signals.next() => {
            eprintln!("tablekit-cli serve: {}: exiting at once", second.name);
            Ok(128 + second.number)
        }
    }
}

/// The lines a caller reads to find the server: each service's address,
/// the accounts, the emulator account's connection string; flushed.
fn ready(server: &Server, serve: &ServeArgs, out: &mut impl Write) -> std::io::Result<()> {
    let store = match &serve.file {
        Some(file) => format!("store file {}", file.display()),
        None => "in memory".to_owned(),
    };
    writeln!(out, "tablekit-cli serve: serving ({store})")?;
    writeln!(out, "blob: http://{}", server.blob_address())?;
    writeln!(out, "queue: http://{}", server.queue_address())?;
    writeln!(out, "table: http://{}", server.table_address())?;
    write!(out, "accounts: {DEV_ACCOUNT}")?;
    for (name, _) in &serve.accounts {
        // Never its key: the caller gave it.
        write!(out, ", {name}")?;
    }
    writeln!(out)?;
    writeln!(out, "connection string: {}", server.connection_string())?;
    out.flush()
}

/// A signal received.
struct Received {
    name: &'static str,
    number: i32,
}

/// SIGTERM and SIGINT (Ctrl-C), listened for from [`Signals::new`] on: from
/// then on they no longer end the process by themselves.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Signals {})
        }
    }

    /// The next signal.
    async fn next(&mut self) -> Received {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => Received { name: "SIGTERM", number: 15 },
                _ = self.int.recv() => Received { name: "SIGINT", number: 2 },
            }
        }
        #[cfg(not(unix))]
        {
            // Ctrl-C is all there is; an error listening for it means none comes.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
            Received {
                name: "Ctrl-C",
                number: 2,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    fn run_args(s: &[&str]) -> ServeArgs {
        match parse(&args(s)).unwrap() {
            Serve::Run(a) => a,
            Serve::Help => panic!("help"),
        }
    }

    #[test]
    fn the_defaults_are_azurites_ports_in_memory() {
        let a = run_args(&[]);
        assert_eq!(a.file, None);
        assert_eq!(a.host, None);
        assert_eq!(
            (a.blob_port, a.queue_port, a.table_port),
            (10000, 10001, 10002)
        );
        assert!(a.accounts.is_empty());
    }

    #[test]
    fn options_and_a_file_are_read_in_any_order() {
        let a = run_args(&[
            "--table-port",
            "0",
            "store.redb",
            "--host",
            "::1",
            "--blob-port",
            "1",
            "--queue-port",
            "65535",
            "--account",
            "other1:a2V5",
            "--account",
            "other2:a2V5Mg==",
        ]);
        assert_eq!(a.file, Some(PathBuf::from("store.redb")));
        assert_eq!(a.host, Some("::1".parse().unwrap()));
        assert_eq!((a.blob_port, a.queue_port, a.table_port), (1, 65535, 0));
        assert_eq!(
            a.accounts,
            vec![
                ("other1".to_owned(), "a2V5".to_owned()),
                ("other2".to_owned(), "a2V5Mg==".to_owned())
            ]
        );
        assert!(!format!("{a:?}").contains("a2V5"), "no key in Debug");
        assert_eq!(parse(&args(&["--help"])).unwrap(), Serve::Help);
        assert_eq!(parse(&args(&["x", "-h"])).unwrap(), Serve::Help);
    }

    #[test]
    fn bad_options_say_what_is_wrong() {
        for (line, says) in [
            (
                &["--table-port", "70000"][..],
                "--table-port needs a port number (0 to 65535), not \"70000\"",
            ),
            (&["--blob-port"], "--blob-port needs a port number"),
            (&["--host", "localhost"], "--host needs an IP address"),
            (
                &["--account", "nokey"],
                "--account needs <name>:<base64 key>",
            ),
            (
                &["--account", ":a2V5"],
                "--account needs <name>:<base64 key>",
            ),
            (&["--verbose"], "unknown option \"--verbose\""),
            (
                &["a.redb", "b.redb"],
                "one store file only, and \"b.redb\" is a second",
            ),
            (
                &["--queue-port", "5000", "--table-port", "5000"],
                "port 5000 is given to two services",
            ),
        ] {
            let err = parse(&args(line)).unwrap_err();
            assert!(err.contains(says), "{line:?}: {err}");
        }
        // Port 0 twice is two free ports.
        assert!(parse(&args(&["--blob-port", "0", "--queue-port", "0"])).is_ok());
    }

    #[test]
    fn a_refused_account_is_named_without_its_key() {
        let a = run_args(&["--account", "Bad_Name:c2VjcmV0LWtleQ=="]);
        let err = a.builder().unwrap_err();
        assert!(err.contains("--account Bad_Name:<key>"), "{err}");
        assert!(
            err.contains("3 to 24 lower-case letters and digits"),
            "{err}"
        );
        assert!(!err.contains("c2VjcmV0"), "{err}");
        let a = run_args(&["--account", "good:not*base64!"]);
        let err = a.builder().unwrap_err();
        assert!(err.contains("--account good:<key>"), "{err}");
        assert!(!err.contains("not*base64!"), "{err}");
    }

    #[test]
    fn bearer_options_need_one_key_and_read_it_from_its_file() {
        let a = run_args(&[
            "--bearer-hs256-secret-file",
            "secret.txt",
            "--bearer-audience",
            "api://one",
            "--bearer-audience",
            "api://two",
            "--bearer-issuer",
            "https://sts.example/t/",
            "--bearer-tenant",
            "t",
        ]);
        assert_eq!(
            a.bearer,
            BearerArgs {
                hs256_secret_file: Some(PathBuf::from("secret.txt")),
                rs256_key_file: None,
                audiences: vec!["api://one".into(), "api://two".into()],
                issuer: Some("https://sts.example/t/".into()),
                tenant: Some("t".into()),
            }
        );
        for (line, says) in [
            (
                &[
                    "--bearer-hs256-secret-file",
                    "a",
                    "--bearer-rs256-key-file",
                    "b",
                ][..],
                "one bearer key",
            ),
            (&["--bearer-issuer", "x"], "need a bearer key"),
            (&["--bearer-audience", "x"], "need a bearer key"),
            (&["--bearer-tenant", "x"], "need a bearer key"),
            (
                &["--bearer-rs256-key-file"],
                "--bearer-rs256-key-file needs a PEM file",
            ),
        ] {
            let err = parse(&args(line)).unwrap_err();
            assert!(err.contains(says), "{line:?}: {err}");
        }
        // No bearer option: no bearer check.
        assert!(run_args(&[]).bearer.config().unwrap().is_none());
    }

    #[test]
    fn a_bearer_key_file_that_is_missing_empty_or_not_a_key_is_named_without_its_content() {
        let dir = std::env::temp_dir().join(format!(
            "tablekit-cli-bearer-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing");
        let err = run_args(&["--bearer-hs256-secret-file", missing.to_str().unwrap()])
            .bearer
            .config()
            .unwrap_err();
        assert!(
            err.contains(&format!("--bearer-hs256-secret-file {}", missing.display())),
            "{err}"
        );
        let empty = dir.join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let err = run_args(&["--bearer-hs256-secret-file", empty.to_str().unwrap()])
            .bearer
            .config()
            .unwrap_err();
        assert!(err.contains("the file is empty"), "{err}");
        let not_pem = dir.join("not.pem");
        std::fs::write(&not_pem, "a secret that is no key").unwrap();
        let err = run_args(&["--bearer-rs256-key-file", not_pem.to_str().unwrap()])
            .bearer
            .config()
            .unwrap_err();
        assert!(err.contains("not an RSA public key"), "{err}");
        assert!(!err.contains("a secret that is no key"), "{err}");
        let secret = dir.join("secret");
        std::fs::write(&secret, "s3cret\r\n").unwrap();
        let config = run_args(&["--bearer-hs256-secret-file", secret.to_str().unwrap()])
            .bearer
            .config()
            .unwrap()
            .expect("a bearer check");
        assert!(!format!("{config:?}").contains("s3cret"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ready_lines_name_every_service_and_the_connection_string() {
        let a = run_args(&["--blob-port", "0", "--queue-port", "0", "--table-port", "0"]);
        let server = a.builder().unwrap().start().await.unwrap();
        let mut out = Vec::new();
        ready(&server, &a, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("(in memory)"), "{text}");
        assert!(
            text.contains(&format!("\nblob: http://{}\n", server.blob_address())),
            "{text}"
        );
        assert!(
            text.contains(&format!("\nqueue: http://{}\n", server.queue_address())),
            "{text}"
        );
        assert!(
            text.contains(&format!("\ntable: http://{}\n", server.table_address())),
            "{text}"
        );
        assert!(text.contains("\naccounts: devstoreaccount1\n"), "{text}");
        assert!(
            text.ends_with(&format!(
                "\nconnection string: {}\n",
                server.connection_string()
            )),
            "{text}"
        );
        server.shutdown().await.unwrap();
    }
}
