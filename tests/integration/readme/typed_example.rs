// The README's "A typed example", line for line: rustdoc only compiles the
// README's copy (`no_run`), so `readme::the_typed_example_runs_*` run this one, in
// a child process whose environment they choose. `readme::the_typed_example_is_the_readmes`
// fails when the two differ: change both together.
use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use tablekit::{filter, ETag, Storage, TableEntity, UpdateMode};

#[derive(TableEntity, Debug, Clone)]
#[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
struct Employee {
    department: String,                 // PartitionKey "Sales"
    employee_id: u32,                   // RowKey "empid_000223"
    first_name: String,                 // property "FirstName", Edm.String
    age: i32,                           // Edm.Int32
    views: i64,                         // Edm.Int64, annotated on the wire for you
    hired: DateTime<Utc>,               // Edm.DateTime, 100 ns precision
    #[tablekit(etag)] etag: Option<ETag>, // filled on read and after writes through &mut
}

#[tokio::main]
async fn main() -> tablekit::Result<()> {
    // The account of TABLEKIT_CONNECTION_STRING (Azure, Azurite, or a file:
    // UseEmbeddedStorage=true;Path=./data/app.redb), else the embedded store in memory.
    let storage = Storage::from_env()?;
    println!("storage: {}", storage.description());
    let staff = storage.table::<Employee>("Employees")?;           // name checked here
    staff.create_table_if_not_exists().await?;

    let mut e = Employee { department: "Sales".into(), employee_id: 223, first_name: "Jon".into(),
                           age: 34, views: 9_000_000_000, hired: Utc::now(), etag: None };
    staff.upsert(&mut e, UpdateMode::Replace).await?;             // insert or replace; e.etag is now set

    e.age += 1;
    let etag = e.etag.clone().unwrap();
    staff.update(&mut e, UpdateMode::Merge, etag).await?;          // 412 if someone wrote first

    let min = 30;
    let seniors: Vec<Employee> = staff.query()
        .filter(filter!(|e| e.partition_key == "Sales" && e.age >= min)) // type-checked, escaped
        .take(100)                                                 // stops fetching after 100
        .stream().try_collect().await?;                            // follows continuation tokens
    let one = staff.get(Employee::key("Sales", 223)?).await?;      // Option<Employee>
    println!("{} seniors, {:?}", seniors.len(), one.map(|e| e.first_name));
    Ok(())
}
