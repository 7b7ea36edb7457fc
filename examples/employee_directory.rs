//! The intra-partition secondary index pattern (design guide §3.1): employees
//! stored once by id (`empid_000223`) and once by email
//! (`email_jonesj@contoso.com`) in their department's partition, every write
//! changing both copies in one entity group transaction.
//!
//! ```text
//! cargo run --example employee_directory                 # on the embedded in-process store
//! eval "$(scripts/azurite.sh start)"      # or on Azurite (or export an Azure
//! cargo run --example employee_directory                 # account's TABLEKIT_CONNECTION_STRING)
//! scripts/azurite.sh stop
//! ```

use tablekit::{ETag, IfMatch, Storage, TableEntity, TableServiceClient};
use tablekit_patterns::index::{Index, IndexedTable};
use tablekit_patterns::range::KeyRange;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    first_name: String,
    last_name: String,
    email: String,
    age: i32,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

const HOW_TO_START_AZURITE: &str = "\
No Table service answered at TABLEKIT_CONNECTION_STRING. Unset it to run on the
embedded store, or start Azurite from this repository (Node.js 20+):
    eval \"$(scripts/azurite.sh start)\"
    cargo run --example employee_directory
    scripts/azurite.sh stop
or export TABLEKIT_CONNECTION_STRING for an Azure account.";

#[tokio::main]
async fn main() {
    // The account of TABLEKIT_CONNECTION_STRING (Azure, Azurite, or a store
    // file: UseEmbeddedStorage=true;Path=<file>), else the embedded store in
    // memory, so the example runs with no server; the first line says which.
    let result = async {
        let storage = Storage::from_env()?;
        println!("backend: {}", storage.description());
        run(storage.tables()?.clone()).await
    };
    if let Err(e) = result.await {
        eprintln!("employee_directory failed: {e}");
        if e.is_transport() {
            eprintln!("\n{HOW_TO_START_AZURITE}");
        }
        std::process::exit(1);
    }
}

fn employee(id: u32, first: &str, last: &str, email: &str, age: i32) -> Employee {
    Employee {
        department: "Sales".into(),
        employee_id: id,
        first_name: first.into(),
        last_name: last.into(),
        email: email.into(),
        age,
        etag: None,
    }
}

async fn run(service: TableServiceClient) -> tablekit::Result<()> {
    let name = format!(
        "Employees{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let table = service.table::<Employee>(&name)?;
    table.create_table().await?;
    println!("created table {name}");

    // Declared once: the email index. Emails are lower-cased in the key, since
    // RowKeys compare ordinally ('email_A...' is not between 'email_a' and 'email_b').
    let by_email = Index::new("email", "email_", |e: &Employee| e.email.to_lowercase());
    let directory = IndexedTable::new(table.clone())?.with_index(&by_email)?;
    println!(
        "each employee is stored {} times: by id and by email",
        directory.copies()
    );

    let mut jones = employee(223, "Jonathan", "Jones", "jonesj@contoso.com", 34);
    directory.insert(&mut jones).await?;
    println!("inserted employee 000223 in one transaction of 2 inserts:");
    for r in table
        .with_type::<tablekit::DynamicEntity>()
        .query()
        .fetch_all()
        .await?
    {
        println!("  Sales / {}", r.row_key);
    }
    for (id, first, last, email, age) in [
        (100, "Ann", "Adams", "adamsa@contoso.com", 29),
        (152, "Ben", "Jones", "bjones@contoso.com", 41),
        (199, "Alma", "Baker", "almab@contoso.com", 52),
        (250, "Cy", "Chan", "chanc@contoso.com", 38),
    ] {
        directory
            .insert(&mut employee(id, first, last, email, age))
            .await?;
    }
    println!("inserted 4 more employees");

    println!("point query RowKey eq 'email_jonesj@contoso.com':");
    if let Some(e) = directory
        .lookup(&by_email, "Sales", "jonesj@contoso.com")
        .await?
    {
        println!(
            "  found {} {} (id {:06})",
            e.first_name, e.last_name, e.employee_id
        );
    }

    println!("range RowKey ge 'empid_000100' and RowKey le 'empid_000199' (id order):");
    for e in directory
        .list_primary("Sales", KeyRange::inclusive("000100", "000199"))
        .await?
    {
        println!("  {:06} {}", e.employee_id, e.email);
    }
    println!("range RowKey ge 'email_a' and RowKey lt 'email_b' (email order):");
    for e in directory
        .list(&by_email, "Sales", KeyRange::prefix("a"))
        .await?
    {
        println!("  {} ({:06})", e.email, e.employee_id);
    }

    // Changing the email: one transaction that updates empid_000223 under its
    // ETag, deletes email_jonesj@... and inserts email_jonathan.jones@...
    let mut changed = jones.clone();
    changed.email = "jonathan.jones@contoso.com".into();
    let etag = jones.etag.clone().expect("insert set the ETag");
    directory
        .update(&jones, &mut changed, IfMatch::ETag(etag.clone()))
        .await?;
    println!(
        "changed the email of 000223 (delete old copy + insert new copy + update, one transaction)"
    );

    // A writer holding the old version is refused, and nothing changes.
    let mut stale = jones.clone();
    stale.age = 99;
    match directory
        .update(&jones, &mut stale, IfMatch::ETag(etag))
        .await
    {
        Err(e) if e.is_precondition_failed() => {
            println!("a write with the old ETag was refused (412): the copies stay consistent")
        }
        other => println!("unexpected: {other:?}"),
    }

    // An email that is taken cannot be given to someone else.
    let mut dup = employee(300, "Dee", "Dup", "almab@contoso.com", 20);
    match directory.insert(&mut dup).await {
        Err(e) if e.is_conflict() => {
            println!("a second employee with almab@contoso.com was refused (409)")
        }
        other => println!("unexpected: {other:?}"),
    }

    // read + change + write under the ETag, again from the read on a conflict
    directory
        .modify(("Sales", "empid_000152"), |e| e.age += 1)
        .await?;
    println!("modified 000152 (read, change, conditional write)");

    directory.delete_key(("Sales", "empid_000250")).await?;
    println!("deleted 000250 and its email copy in one transaction");

    println!("final rows:");
    for r in table
        .with_type::<tablekit::DynamicEntity>()
        .query()
        .fetch_all()
        .await?
    {
        println!("  Sales / {}", r.row_key);
    }
    table.delete_table().await?;
    println!("deleted table {name}");
    Ok(())
}
