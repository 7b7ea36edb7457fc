//! The inter-partition secondary index pattern (design guide §3.2): each
//! employee is stored under `empid_Sales` / `000223` and copied under
//! `email_Sales` / `jonesj@contoso.com` (a unique index: one employee per
//! email) and under `lastname_Sales` / `jones 000223` (a non-unique index:
//! any number of Joneses), partitions that no transaction spans. Every
//! change is one message on a queue; a worker claims the unique email, writes
//! the primary, then the index copies, deleting the copies under old values
//! first, so an index entry a reader sees never points at a missing
//! employee. A change that would take another employee's email is refused
//! (a constraint violation, retried, then poisoned) and writes nothing. Each
//! change carries a stamp, so an older change delivered late changes
//! nothing, and a remove leaves a tombstone until `purge_tombstones`.
//!
//! ```text
//! cargo run --example employee_email_index                 # on the embedded in-process store
//! eval "$(scripts/azurite.sh start)"      # or on Azurite (or export an Azure
//! cargo run --example employee_email_index                 # account's TABLEKIT_CONNECTION_STRING)
//! scripts/azurite.sh stop
//! ```

use std::time::Duration;

use tablekit::{
    DynamicEntity, QueueServiceClient, Storage, TableClient, TableEntity, TableServiceClient,
};
use tablekit_patterns::eventual::{Worker, WorkerBuilder};
use tablekit_patterns::inter_index::{InterIndex, InterPartitionIndex};
use tablekit_patterns::range::KeyRange;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(TableEntity, Debug, Clone)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    first_name: String,
    last_name: String,
    email: String,
}

const HOW_TO_START_AZURITE: &str = "\
No service answered at TABLEKIT_CONNECTION_STRING. Unset it to run on the
embedded store, or start Azurite from this repository (Node.js 20+):
    eval \"$(scripts/azurite.sh start)\"
    cargo run --example employee_email_index
    scripts/azurite.sh stop
or export TABLEKIT_CONNECTION_STRING for an Azure account.";

/// Which account the example talks to: the one place to change. Azure or
/// Azurite when `TABLEKIT_CONNECTION_STRING` is set; otherwise the embedded
/// in-process store, so the example runs with no server.
fn storage() -> tablekit::Result<Storage> {
    match std::env::var("TABLEKIT_CONNECTION_STRING") {
        Ok(conn) => {
            println!("backend: the account of TABLEKIT_CONNECTION_STRING");
            Storage::from_connection_string(&conn)
        }
        Err(_) => {
            println!("backend: embedded (in-process; set TABLEKIT_CONNECTION_STRING for Azure or Azurite)");
            Ok(Storage::embedded())
        }
    }
}

#[tokio::main]
async fn main() {
    let result = async {
        let storage = storage()?;
        run(storage.tables()?.clone(), storage.queues()?.clone()).await
    }
    .await;
    if let Err(e) = result {
        eprintln!("employee_email_index failed: {e}");
        if std::env::var("TABLEKIT_CONNECTION_STRING").is_ok() {
            eprintln!("\n{HOW_TO_START_AZURITE}");
        }
        std::process::exit(1);
    }
}

async fn show(table: &TableClient<DynamicEntity>) -> tablekit::Result<()> {
    for r in table.query().fetch_all().await? {
        println!("  {:<15} {}", r.partition_key, r.row_key);
    }
    Ok(())
}

fn name(e: &Employee) -> String {
    format!(
        "{:06} {} {} <{}>",
        e.employee_id, e.first_name, e.last_name, e.email
    )
}

async fn run(tables: TableServiceClient, queues: QueueServiceClient) -> Result<(), BoxError> {
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let table = tables.table::<Employee>(&format!("Employees{suffix}"))?;
    let jobs = queues.queue(&format!("employee-index-{suffix}"))?;
    let poison = queues.queue(&format!("employee-index-{suffix}-poison"))?;
    table.create_table().await?;
    jobs.create_queue().await?;
    poison.create_queue().await?;
    println!("table {}, queue {}", table.name(), jobs.name());

    // Emails compare ordinally as RowKeys: the key function lower-cases them.
    // One employee per email; any number per last name.
    let by_email = InterIndex::unique("email", "email_", |e: &Employee| e.email.to_lowercase());
    let by_name = InterIndex::non_unique("last name", "lastname_", |e: &Employee| {
        e.last_name.to_lowercase()
    });
    let employees = InterPartitionIndex::new(table.clone(), "empid_", jobs.clone())
        .with_index(&by_email)?
        .with_index(&by_name)?;
    let worker: WorkerBuilder = employees
        .attach(Worker::builder(jobs.clone(), tables.clone()))
        .poison_queue(poison.clone())
        .concurrency(8);
    let worker = worker.build()?;

    for (id, first, last, email) in [
        (223, "Jane", "Jones", "jonesj@contoso.com"),
        (100, "Ann", "Abbott", "abbotta@contoso.com"),
        (152, "Ben", "Adams", "adamsb@contoso.com"),
        (199, "Sam", "Smith", "smiths@contoso.com"),
        (310, "Bea", "Brown", "brownb@contoso.com"),
        (224, "Kim", "Jones", "jonesk@contoso.com"),
    ] {
        let e = Employee {
            department: "Sales".into(),
            employee_id: id,
            first_name: first.into(),
            last_name: last.into(),
            email: email.into(),
        };
        employees.put(&e).await?; // one message; nothing written yet
    }
    println!("enqueued 6 employees; before the worker runs the table is empty:");
    show(&table.with_type()).await?;
    let report = worker.drain().await?;
    println!(
        "worker: {} changes applied; the table now holds:",
        report.succeeded
    );
    show(&table.with_type()).await?;

    let jones = employees
        .lookup(&by_email, "Sales", "jonesj@contoso.com")
        .await?;
    println!(
        "point read email_Sales/jonesj@contoso.com: {:?}",
        jones.as_ref().map(name)
    );
    println!("PartitionKey eq 'empid_Sales' and RowKey ge '000100' and RowKey le '000199':");
    for e in employees
        .list_primary("Sales", KeyRange::inclusive("000100", "000199"))
        .await?
    {
        println!("  {}", name(&e));
    }
    println!("PartitionKey eq 'email_Sales' and RowKey ge 'a' and RowKey lt 'b':");
    for e in employees
        .list(&by_email, "Sales", KeyRange::prefix("a"))
        .await?
    {
        println!("  {}", name(&e));
    }

    let joneses = employees.lookup_all(&by_name, "Sales", "jones").await?;
    println!(
        "every Jones (RowKey ge 'jones ' and RowKey lt 'jones!'): {:?}",
        joneses.iter().map(name).collect::<Vec<_>>()
    );

    // Kim wants Jane's email: the worker refuses the whole change (a
    // constraint violation: nothing written, Jane's copy intact). A refused
    // change is retried, as the holder may give the value up in a change
    // still on its way; here the worker gives up at once (1 attempt) and
    // moves it to the poison queue.
    let mut kim = employees.get(("Sales", "000224")).await?.expect("stored");
    kim.email = "JonesJ@contoso.com".into();
    employees.put(&kim).await?;
    let strict = employees
        .attach(Worker::builder(jobs.clone(), tables.clone()))
        .poison_queue(poison.clone())
        .max_dequeue_count(1)
        .build()?;
    let report = strict.drain().await?;
    let poisoned = poison.receive().await?;
    let why = match poisoned.first() {
        Some(m) => {
            m.json::<tablekit_patterns::eventual::PoisonedMessage>()?
                .error
        }
        None => String::new(),
    };
    println!("refused ({} poisoned): {why}", report.poisoned);
    println!(
        "email_Sales/jonesj@contoso.com is still {:?}",
        employees
            .lookup(&by_email, "Sales", "jonesj@contoso.com")
            .await?
            .map(|e| name(&e))
    );

    // Jane changes her email: the old copy goes, the new one comes.
    let mut jane = employees.get(("Sales", "000223")).await?.expect("stored");
    jane.email = "jane.jones@contoso.com".into();
    employees.put(&jane).await?;
    worker.drain().await?;
    println!(
        "after the change: by old email {:?}, by new email {:?}",
        employees
            .lookup(&by_email, "Sales", "jonesj@contoso.com")
            .await?
            .map(|e| name(&e)),
        employees
            .lookup_verified(&by_email, "Sales", "jane.jones@contoso.com")
            .await?
            .map(|e| name(&e)),
    );

    // Sam leaves: the copies are deleted first, then the employee is replaced by
    // a tombstone (its keys, ChangeStamp, Removed = true) that every read
    // skips and that stops an older put, delivered late, from bringing him back.
    employees.remove(("Sales", "000199")).await?;
    worker.drain().await?;
    println!(
        "after removing 000199 (its tombstone stays in the table): get = {:?}",
        employees.get(("Sales", "000199")).await?.map(|e| name(&e))
    );
    show(&table.with_type()).await?;

    // Tombstones are purged once no older message can still be delivered: past
    // the queue's message time-to-live (7 days) in production; at once here.
    let purged = employees.purge_tombstones(Duration::ZERO).await?;
    println!("purged {purged} tombstone(s); the table now holds:");
    show(&table.with_type()).await?;

    table.delete_table().await?;
    jobs.delete_queue().await?;
    poison.delete_queue().await?;
    println!("deleted the table and queues");
    Ok(())
}
