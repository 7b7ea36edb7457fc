//! The eventually consistent transactions pattern (design guide §3.3) with
//! its three parties in three processes, as in production: a **writer**
//! process that asks for employees to be archived (one queue message each),
//! a **worker** process that carries the archives out, and the storage they
//! share: `tablekit-cli serve` over a store file, or Azure, or Azurite.
//!
//! The example runs all of it. It starts a `tablekit::server::Server` over a
//! store file in a scratch folder (what `tablekit-cli serve FILE` runs),
//! seeds 40 employees in table `Current`, then starts this program again
//! twice as child processes: the writer, which enqueues the 40 archives, and
//! a worker. Once 10 employees are archived the worker is killed (`SIGKILL`: no
//! chance to finish what it holds), and a second worker process finishes the
//! job. At the end every employee is in `Archive` exactly once and none is
//! left in `Current`, and the server is stopped and the store file reopened
//! in this process to show that the archive is in the file.
//!
//! ```text
//! cargo run --example eventual_processes             # its own server over a store file
//! tablekit-cli serve data.redb --table-port 0 --queue-port 0 --blob-port 0   # or a server of yours:
//! TABLEKIT_CONNECTION_STRING='<the string serve printed>' cargo run --example eventual_processes
//! ```

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tablekit::{ETag, Storage, TableEntity};
use tablekit_patterns::eventual::{Archive, Eventual, Worker};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How many employees are archived.
const EMPLOYEES: u32 = 40;
/// How many the first worker archives before it is killed.
const BEFORE_THE_KILL: usize = 10;

#[derive(TableEntity, Debug, Clone)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    name: String,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

/// The names of the run's tables and queue (unique per run), passed to the
/// child processes in the environment.
struct Names {
    current: String,
    archive: String,
    jobs: String,
    poison: String,
}

impl Names {
    fn fresh() -> Names {
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
        Names {
            current: format!("Current{suffix}"),
            archive: format!("Archive{suffix}"),
            jobs: format!("archive-jobs-{suffix}"),
            poison: format!("archive-jobs-{suffix}-poison"),
        }
    }

    fn from_env() -> Result<Names, BoxError> {
        let var = |n: &str| std::env::var(n).map_err(|_| format!("{n} is not set"));
        Ok(Names {
            current: var("EXAMPLE_CURRENT")?,
            archive: var("EXAMPLE_ARCHIVE")?,
            jobs: var("EXAMPLE_JOBS")?,
            poison: var("EXAMPLE_POISON")?,
        })
    }
}

#[tokio::main]
async fn main() {
    let role = std::env::args().nth(1);
    let result = match role.as_deref() {
        None => orchestrate().await,
        Some("writer") => writer().await,
        Some("worker") => worker().await,
        Some(other) => Err(format!("unknown role {other:?}").into()),
    };
    if let Err(e) = result {
        eprintln!(
            "eventual_processes {}: {e}",
            role.as_deref().unwrap_or("main")
        );
        std::process::exit(1);
    }
}

/// The storage of the child processes: the connection string their parent
/// passed.
fn child_storage() -> Result<Storage, BoxError> {
    let conn = std::env::var("EXAMPLE_CONNECTION_STRING")
        .map_err(|_| "EXAMPLE_CONNECTION_STRING is not set")?;
    Ok(Storage::from_connection_string(&conn)?)
}

/// The writer process: one archive request per employee.
async fn writer() -> Result<(), BoxError> {
    let storage = child_storage()?;
    let names = Names::from_env()?;
    let eventual = Eventual::new(storage.queue(&names.jobs)?);
    for id in 1..=EMPLOYEES {
        let op = Archive::<Employee>::new(
            &names.current,
            &names.archive,
            ("Sales", format!("{id:06}").as_str()),
        )?;
        eventual.enqueue(&op).await?;
    }
    println!("writer: enqueued {EMPLOYEES} archives");
    Ok(())
}

/// The worker process: archives until its standard input closes.
async fn worker() -> Result<(), BoxError> {
    let storage = child_storage()?;
    let names = Names::from_env()?;
    let worker = Worker::builder(storage.queue(&names.jobs)?, storage.tables()?.clone())
        .operation::<Archive<Employee>>()
        .poison_queue(storage.queue(&names.poison)?)
        .visibility_timeout(Duration::from_secs(5))
        .concurrency(2)
        .poll_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .build()?;
    // Stop when the parent closes our standard input.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut line = String::new();
        while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
            line.clear();
        }
        let _ = stop.send(());
    });
    let report = worker
        .run(async {
            let _ = stopped.await;
        })
        .await;
    eprintln!(
        "worker: {} done, {} failed, {} poisoned",
        report.succeeded, report.failed, report.poisoned
    );
    Ok(())
}

/// Kills a child on drop, so that no process outlives a failed run.
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn(role: &str, conn: &str, names: &Names) -> Result<Guard, BoxError> {
    let child = Command::new(std::env::current_exe()?)
        .arg(role)
        .env("EXAMPLE_CONNECTION_STRING", conn)
        .env("EXAMPLE_CURRENT", &names.current)
        .env("EXAMPLE_ARCHIVE", &names.archive)
        .env("EXAMPLE_JOBS", &names.jobs)
        .env("EXAMPLE_POISON", &names.poison)
        .stdin(Stdio::piped())
        .spawn()?;
    println!("started the {role} (pid {})", child.id());
    Ok(Guard(Some(child)))
}

async fn orchestrate() -> Result<(), BoxError> {
    // The storage: the one named by TABLEKIT_CONNECTION_STRING, else our
    // own server over a store file in a scratch folder.
    let scratch = std::env::temp_dir().join(format!("eventual-processes-{}", std::process::id()));
    let (conn, server, file) = match std::env::var("TABLEKIT_CONNECTION_STRING") {
        Ok(conn) if !conn.trim().is_empty() => (conn, None, None),
        _ => {
            std::fs::create_dir_all(&scratch)?;
            let file = scratch.join("store.redb");
            let server = tablekit::server::Server::builder()
                .file(&file)
                .ports(0, 0, 0)
                .start()
                .await?;
            println!(
                "serving {} on table {}, queue {}",
                file.display(),
                server.table_address(),
                server.queue_address()
            );
            (server.connection_string(), Some(server), Some(file))
        }
    };
    let storage = Storage::from_connection_string(&conn)?;
    let names = Names::fresh();
    let current = storage.table::<Employee>(&names.current)?;
    let archive = storage.table::<Employee>(&names.archive)?;
    let jobs = storage.queue(&names.jobs)?;
    current.create_table().await?;
    archive.create_table().await?;
    jobs.create_queue().await?;
    storage.queue(&names.poison)?.create_queue().await?;
    let mut tx = current.transaction();
    for id in 1..=EMPLOYEES {
        tx.insert(&Employee {
            department: "Sales".into(),
            employee_id: id,
            name: format!("Employee {id}"),
            etag: None,
        })?;
    }
    tx.send().await?;
    println!("seeded {EMPLOYEES} employees in {}", names.current);

    // The writer and the first worker run side by side.
    let mut first = spawn("worker", &conn, &names)?;
    let mut writer = spawn("writer", &conn, &names)?;
    let status = writer.0.take().expect("spawned").wait()?;
    if !status.success() {
        return Err(format!("the writer failed: {status}").into());
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let seen = loop {
        let archived = archive.query().fetch_all().await?.len();
        if archived >= BEFORE_THE_KILL {
            break archived;
        }
        if let Some(status) = first.0.as_mut().expect("spawned").try_wait()? {
            return Err(format!("the first worker stopped early: {status}").into());
        }
        if Instant::now() > deadline {
            return Err(format!("after 120 s the first worker archived {archived}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // SIGKILL: whatever it held (a message it received, an archive half
    // done) is left as it was, for the message's visibility timeout.
    drop(first);
    println!("killed the first worker once {seen} employees were archived");

    let mut second = spawn("worker", &conn, &names)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let archived = archive.query().fetch_all().await?.len();
        let left = current.query().fetch_all().await?.len();
        if archived == EMPLOYEES as usize && left == 0 && jobs.peek(1).await?.is_empty() {
            break;
        }
        if let Some(status) = second.0.as_mut().expect("spawned").try_wait()? {
            return Err(format!("the second worker stopped early: {status}").into());
        }
        if Instant::now() > deadline {
            return Err(format!("after 120 s: {archived} archived, {left} left").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Closing its standard input stops the second worker gracefully.
    let mut child = second.0.take().expect("spawned");
    drop(child.stdin.take());
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the second worker failed: {status}").into());
    }
    println!("the second worker finished the job and stopped");

    let rows = archive.query().fetch_all().await?;
    let mut ids: Vec<u32> = rows.iter().map(|e| e.employee_id).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() != EMPLOYEES as usize || rows.len() != ids.len() {
        return Err(format!(
            "Archive holds {} rows of {} employees",
            rows.len(),
            ids.len()
        )
        .into());
    }
    println!("Archive holds each of the {EMPLOYEES} employees once; Current is empty");

    match (server, file) {
        (Some(server), Some(file)) => {
            server.shutdown().await?;
            drop(storage);
            let reopened = Storage::embedded_at(&file)?;
            let kept = reopened
                .table::<Employee>(&names.archive)?
                .query()
                .fetch_all()
                .await?
                .len();
            println!(
                "stopped the server; the store file, reopened, holds {kept} archived employees"
            );
            if kept != EMPLOYEES as usize {
                return Err(format!("the file holds {kept} archived employees").into());
            }
            drop(reopened);
            let _ = std::fs::remove_dir_all(&scratch);
        }
        _ => {
            current.delete_table().await?;
            archive.delete_table().await?;
            jobs.delete_queue().await?;
            storage.queue(&names.poison)?.delete_queue().await?;
            println!("deleted the tables and the queues");
        }
    }
    Ok(())
}
