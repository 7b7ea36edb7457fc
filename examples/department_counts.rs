//! Denormalised counts in a heterogeneous partition (design guide §3.5, §4.8):
//! the Marketing partition holds employees (`00001`, `00002`) and the
//! department entity (`Department`, EmployeeCount=153, the manager's details);
//! adding or removing an employee changes the count in the same transaction.
//!
//! ```text
//! cargo run --example department_counts                 # on the embedded in-process store
//! eval "$(scripts/azurite.sh start)"      # or on Azurite (or export an Azure
//! cargo run --example department_counts                 # account's TABLEKIT_CONNECTION_STRING)
//! scripts/azurite.sh stop
//! ```

use tablekit::{DynamicEntity, IfMatch, TableEntity, TableServiceClient};
use tablekit_patterns::summary::CountedPartition;

#[derive(TableEntity, Debug, Clone)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:05}")]
struct Employee {
    department: String,
    employee_id: u32,
    first_name: String,
    last_name: String,
    age: i32,
    email: String,
}

const HOW_TO_START_AZURITE: &str = "\
No Table service answered at TABLEKIT_CONNECTION_STRING. Unset it to run on the
embedded store, or start Azurite from this repository (Node.js 20+):
    eval \"$(scripts/azurite.sh start)\"
    cargo run --example department_counts
    scripts/azurite.sh stop
or export TABLEKIT_CONNECTION_STRING for an Azure account.";

/// Which Table service the example talks to: the one place to change.
/// Azure or Azurite when `TABLEKIT_CONNECTION_STRING` is set; otherwise the
/// embedded in-process store, so the example runs with no server.
fn service() -> Option<tablekit::Result<TableServiceClient>> {
    match std::env::var("TABLEKIT_CONNECTION_STRING") {
        Ok(conn) => {
            println!("backend: the account of TABLEKIT_CONNECTION_STRING");
            Some(TableServiceClient::from_connection_string(&conn))
        }
        Err(_) => {
            println!("backend: embedded (in-process; set TABLEKIT_CONNECTION_STRING for Azure or Azurite)");
            Some(Ok(TableServiceClient::embedded()))
        }
    }
}

#[tokio::main]
async fn main() {
    let Some(service) = service() else {
        eprintln!("TABLEKIT_CONNECTION_STRING is not set.\n\n{HOW_TO_START_AZURITE}");
        std::process::exit(1);
    };
    if let Err(e) = async { run(service?).await }.await {
        eprintln!("department_counts failed: {e}");
        if e.is_transport() {
            eprintln!("\n{HOW_TO_START_AZURITE}");
        }
        std::process::exit(1);
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

    // The department entity of the seed, with its manager's details denormalised into it.
    let department = DynamicEntity::new("Marketing", "Department")
        .with("DepartmentName", "Marketing")
        .with("EmployeeCount", 153)
        .with("ManagerFirstName", "Don")
        .with("ManagerLastName", "Hall")
        .with("ManagerEmail", "donh@contoso.com");
    table
        .with_type::<DynamicEntity>()
        .insert(&department)
        .await?;
    println!("Marketing / Department: EmployeeCount = 153, manager Don Hall");

    let staff = CountedPartition::new(table.clone(), "Department", "EmployeeCount");
    for (id, first, last, age) in [(1, "Don", "Hall", 34), (2, "Jun", "Cao", 47)] {
        let mut e = Employee {
            department: "Marketing".into(),
            employee_id: id,
            first_name: first.into(),
            last_name: last.into(),
            age,
            email: format!(
                "{}{}@contoso.com",
                first.to_lowercase(),
                &last[..1].to_lowercase()
            ),
        };
        let count = staff.insert(&mut e).await?;
        println!("added {id:05} {first} {last}: read Department + one transaction (insert, merge of EmployeeCount under its ETag) -> {count}");
    }
    let count = staff.delete(("Marketing", "00002"), IfMatch::Any).await?;
    println!("removed 00002: read Department + one transaction (delete, merge of EmployeeCount) -> {count}");

    println!("one point query gives the department and its manager:");
    if let Some(d) = staff.summary("Marketing").await? {
        for (name, value) in &d.properties {
            println!("  {name} = {value:?}");
        }
    }
    println!("the heterogeneous partition, read as property bags:");
    for r in table
        .with_type::<DynamicEntity>()
        .query()
        .fetch_all()
        .await?
    {
        println!(
            "  {} / {} ({} properties)",
            r.partition_key,
            r.row_key,
            r.properties.len()
        );
    }

    table.delete_table().await?;
    println!("deleted table {name}");
    Ok(())
}
