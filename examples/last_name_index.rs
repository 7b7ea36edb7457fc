//! The index entities pattern (design guide §3.4). Option 2: for each last
//! name in a department, index entities `lastname_<name>_000`, `_001`, …
//! list the employees' RowKeys; an employee and the index entity change
//! together in one transaction under the index entity's ETag. Option 3: an
//! index table of its own lists (department, id) pairs, so one lookup finds
//! the Joneses of every department.
//!
//! ```text
//! cargo run --example last_name_index                 # on the embedded in-process store
//! eval "$(scripts/azurite.sh start)"      # or on Azurite (or export an Azure
//! cargo run --example last_name_index                 # account's TABLEKIT_CONNECTION_STRING)
//! scripts/azurite.sh stop
//! ```

use tablekit::{DynamicEntity, ETag, EdmValue, IfMatch, Storage, TableEntity, TableServiceClient};
use tablekit_patterns::index_entity::{IndexEntities, SeparateIndexEntities, ENTITY_IDS};

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
No Table service answered at TABLEKIT_CONNECTION_STRING. Unset it to run on the
embedded store, or start Azurite from this repository (Node.js 20+):
    eval \"$(scripts/azurite.sh start)\"
    cargo run --example last_name_index
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
        eprintln!("last_name_index failed: {e}");
        if e.is_transport() {
            eprintln!("\n{HOW_TO_START_AZURITE}");
        }
        std::process::exit(1);
    }
}

async fn show(table: &tablekit::TableClient<DynamicEntity>) -> tablekit::Result<()> {
    for r in table.query().fetch_all().await? {
        match r.get(ENTITY_IDS) {
            Some(EdmValue::String(ids)) => {
                println!(
                    "  {} / {}: {ENTITY_IDS} = [{}]",
                    r.partition_key,
                    r.row_key,
                    ids.replace('\n', ", ")
                )
            }
            _ => println!(
                "  {} / {}: {:?}",
                r.partition_key,
                r.row_key,
                r.get("LastName")
            ),
        }
    }
    Ok(())
}

async fn run(service: TableServiceClient) -> tablekit::Result<()> {
    let name = format!(
        "Employees{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let table = service.table::<Employee>(&name)?;
    table.create_table().await?;
    println!("created table {name}");
    let by_last_name = IndexEntities::new(table.clone(), "lastname_", |e: &Employee| {
        e.last_name.clone()
    });

    for (id, first, last) in [
        (100, "Ann", "Jones"),
        (152, "Ben", "Jones"),
        (7, "Cy", "Smith"),
    ] {
        let mut e = Employee {
            department: "Sales".into(),
            employee_id: id,
            first_name: first.into(),
            last_name: last.into(),
            etag: None,
        };
        by_last_name.insert(&mut e).await?;
        println!("added {id:06} {first} {last} (read index entity + one transaction of 2)");
    }
    show(&table.with_type()).await?;

    println!("all the Joneses in Sales (index entity, then a point read each):");
    for e in by_last_name.find("Sales", "Jones").await? {
        println!("  {:06} {} {}", e.employee_id, e.first_name, e.last_name);
    }

    let ben = table.get(("Sales", "000152")).await?.expect("inserted");
    let mut renamed = ben.clone();
    renamed.last_name = "Smith".into();
    by_last_name
        .update(
            &ben,
            &mut renamed,
            IfMatch::ETag(ben.etag.clone().expect("read with an ETag")),
        )
        .await?;
    println!(
        "renamed 000152 Jones -> Smith: one transaction over the employee and both index entities"
    );
    show(&table.with_type()).await?;

    let ann = table.get(("Sales", "000100")).await?.expect("inserted");
    by_last_name
        .delete(
            &ann,
            IfMatch::ETag(ann.etag.clone().expect("read with an ETag")),
        )
        .await?;
    println!("deleted 000100, the last Jones: the index entity went with it");
    show(&table.with_type()).await?;

    // Option 3: the index in a table of its own, across departments.
    let index = service.table::<DynamicEntity>(&format!("{name}Ix"))?;
    index.create_table().await?;
    let everywhere = SeparateIndexEntities::new(
        table.clone(),
        index.clone(),
        "lastname",
        "",
        |e: &Employee| e.last_name.clone(),
    );
    for (dept, id, first) in [("Sales", 300, "Dee"), ("Marketing", 1, "Don")] {
        let mut e = Employee {
            department: dept.into(),
            employee_id: id,
            first_name: first.into(),
            last_name: "Jones".into(),
            etag: None,
        };
        everywhere.insert(&mut e).await?;
        println!("added {dept}/{id:06} {first} Jones (index entity first, then the employee)");
    }
    let found = everywhere.find("Jones").await?;
    println!(
        "every Jones (one range query of the index, then a point read each), {} dangling:",
        found.dangling.len()
    );
    for e in &found.entities {
        println!(
            "  {} / {:06} {} {}",
            e.department, e.employee_id, e.first_name, e.last_name
        );
    }
    index.delete_table().await?;

    table.delete_table().await?;
    println!("deleted table {name}");
    Ok(())
}
