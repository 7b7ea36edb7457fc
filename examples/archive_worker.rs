//! The eventually consistent transactions pattern (design guide §3.3): the
//! archive of employee #456 from table `Current` to table `Archive` through a
//! queue. The client puts one message on the queue; a worker reads the
//! employee from Current, inserts-or-replaces it into Archive, deletes it
//! from Current under the ETag it read, and only then deletes the message. A
//! message that is no envelope at all goes to a poison queue with the
//! reason; one from a newer client (a format version or kind this worker
//! does not know) is left on the queue for a worker that knows it.
//!
//! ```text
//! cargo run --example archive_worker                 # on the embedded in-process store
//! eval "$(scripts/azurite.sh start)"      # or on Azurite (or export an Azure
//! cargo run --example archive_worker                 # account's TABLEKIT_CONNECTION_STRING)
//! scripts/azurite.sh stop
//! ```

use std::time::Duration;

use tablekit::{ETag, QueueServiceClient, Storage, TableClient, TableEntity, TableServiceClient};
use tablekit_patterns::eventual::{Archive, Event, Eventual, PoisonedMessage, Worker};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(TableEntity, Debug, Clone)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    first_name: String,
    last_name: String,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

const HOW_TO_START_AZURITE: &str = "\
No service answered at TABLEKIT_CONNECTION_STRING. Unset it to run on the
embedded store, or start Azurite from this repository (Node.js 20+):
    eval \"$(scripts/azurite.sh start)\"
    cargo run --example archive_worker
    scripts/azurite.sh stop
or export TABLEKIT_CONNECTION_STRING for an Azure account.";

#[tokio::main]
async fn main() {
    // The account of TABLEKIT_CONNECTION_STRING (Azure, Azurite, or a store
    // file), else the embedded store in memory; the first line says which.
    let result = async {
        let storage = Storage::from_env()?;
        println!("backend: {}", storage.description());
        run(storage.tables()?.clone(), storage.queues()?.clone()).await
    }
    .await;
    if let Err(e) = result {
        eprintln!("archive_worker failed: {e}");
        if std::env::var_os("TABLEKIT_CONNECTION_STRING").is_some() {
            eprintln!("\n{HOW_TO_START_AZURITE}");
        }
        std::process::exit(1);
    }
}

async fn show(label: &str, table: &TableClient<Employee>) -> tablekit::Result<()> {
    let ids: Vec<String> = table
        .query()
        .fetch_all()
        .await?
        .into_iter()
        .map(|e| format!("{:06} {} {}", e.employee_id, e.first_name, e.last_name))
        .collect();
    println!("  {label:<8} {ids:?}");
    Ok(())
}

async fn run(tables: TableServiceClient, queues: QueueServiceClient) -> Result<(), BoxError> {
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let current = tables.table::<Employee>(&format!("Current{suffix}"))?;
    let archive = tables.table::<Employee>(&format!("Archive{suffix}"))?;
    let jobs = queues.queue(&format!("archive-jobs-{suffix}"))?;
    let poison = queues.queue(&format!("archive-jobs-{suffix}-poison"))?;
    current.create_table().await?;
    archive.create_table().await?;
    jobs.create_queue().await?;
    poison.create_queue().await?;
    println!(
        "tables {} and {}, queues {} and {}",
        current.name(),
        archive.name(),
        jobs.name(),
        poison.name()
    );

    for (id, first, last) in [
        (123, "Ken", "Kwok"),
        (456, "Kim", "Akers"),
        (789, "Don", "Hall"),
    ] {
        let e = Employee {
            department: "Sales".into(),
            employee_id: id,
            first_name: first.into(),
            last_name: last.into(),
            etag: None,
        };
        current.insert(&e).await?;
    }
    show("Current", &current).await?;

    // The client: "archive employee #456" is one message ("#" cannot be in a
    // key, so the RowKey is 000456), which never expires. A message in a
    // format this worker does not know is left for a newer worker; one that
    // is no envelope at all shows the poison queue.
    let eventual = Eventual::new(jobs.clone());
    let op = Archive::<Employee>::new(current.name(), archive.name(), ("Sales", "000456"))?;
    let sent = eventual.enqueue(&op).await?;
    println!(
        "enqueued archive of employee #456 as message {} (expires: {:?})",
        sent.id(),
        sent.expires_on()
    );
    jobs.send(r#"{"v":2,"kind":"tablekit.archive","op":{}}"#)
        .await?;
    println!("enqueued a message of a future format version");
    jobs.send("archive employee 456, please").await?;
    println!("enqueued a message that is not an envelope");

    // The worker, with a hook that prints each step as it completes.
    let worker = Worker::builder(jobs.clone(), tables.clone())
        .operation::<Archive<Employee>>()
        .poison_queue(poison.clone())
        .visibility_timeout(Duration::from_secs(30)) // longer than the slowest archive
        .max_dequeue_count(5)
        .concurrency(4)
        .poll_backoff(Duration::from_millis(50), Duration::from_secs(1))
        .step_hook(|event| async move {
            if let Event::Step { step, name, .. } = event {
                println!("  worker: step {step} done: {name}");
            }
            Ok(())
        })
        .build()?;

    // Run it until no message is visible, then tell it to stop: it finishes
    // what it holds and returns.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn({
        let worker = worker.clone();
        async move {
            worker
                .run(async {
                    let _ = stopped.await;
                })
                .await
        }
    });
    while !jobs.peek(1).await?.is_empty() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(());
    let report = running.await?;
    println!(
        "worker stopped: {} done, {} failed, {} poisoned, {} left for a newer worker",
        report.succeeded, report.failed, report.poisoned, report.deferred
    );

    show("Current", &current).await?;
    show("Archive", &archive).await?;
    for m in poison.receive().max_messages(32).await? {
        let p: PoisonedMessage = m.json()?;
        println!(
            "  poison: message {} from {}: {}",
            p.message_id, p.queue, p.error
        );
    }

    // A second archive of #456 (a duplicate delivery) finds it gone: done.
    eventual.enqueue(&op).await?;
    let again = Worker::builder(jobs.clone(), tables.clone())
        .operation::<Archive<Employee>>()
        .poison_queue(poison.clone())
        .build()?
        .drain()
        .await?;
    println!(
        "the same message again: {} done (already archived), Archive still holds one copy",
        again.succeeded
    );
    show("Archive", &archive).await?;

    current.delete_table().await?;
    archive.delete_table().await?;
    jobs.delete_queue().await?;
    poison.delete_queue().await?;
    println!("deleted the tables and queues");
    Ok(())
}
