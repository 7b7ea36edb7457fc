//! Modelling relationships (design guide §5.7, §3.14) with the seed's
//! departments and employees: a department and its employees in one
//! partition, the count kept in the same transaction; employees moved to
//! another department through a queue worker (two partitions: no single
//! transaction can); each department's manager as a link; every employee
//! joined with its department from a client-side cache; and a view of the
//! employees by last name, kept by the same worker.
//!
//! ```text
//! cargo run --example department_moves                 # on the embedded in-process store
//! eval "$(scripts/azurite.sh start)"      # or on Azurite (or export an Azure
//! cargo run --example department_moves                 # account's TABLEKIT_CONNECTION_STRING)
//! scripts/azurite.sh stop
//! ```

use std::time::Duration;

use futures::TryStreamExt;
use tablekit::filter::EntityColumns;
use tablekit::{QueueServiceClient, Storage, TableEntity, TableServiceClient};
use tablekit_patterns::eventual::Worker;
use tablekit_patterns::relationships::{Link, LookupCache, MaterializedView, OneToMany};
use tablekit_patterns::summary::CountedPartition;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    first_name: String,
    last_name: String,
}

/// The department entity, in its employees' partition: their count.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "Department")]
struct Department {
    department: String,
    employee_count: i32,
}

/// The small, rarely changing table of departments the client caches: the
/// floor, and a link to the manager (`Manager_PartitionKey`, `Manager_RowKey`).
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "Departments", row_key = "{name}")]
struct DepartmentInfo {
    name: String,
    floor: i32,
    #[tablekit(flatten)]
    manager: Link<Employee>,
}

/// The partition's two kinds, told apart by `EntityType`.
#[derive(TableEntity, Debug, Clone, PartialEq)]
enum Staff {
    Employee(Employee),
    Department(Department),
}

/// Employees by last name, across departments: the view.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(
    partition_key = "{last_name}",
    row_key = "{department}_{employee_id:06}"
)]
struct ByLastName {
    last_name: String,
    department: String,
    employee_id: u32,
    first_name: String,
}

const HOW_TO_START_AZURITE: &str = "\
No service answered at TABLEKIT_CONNECTION_STRING. Unset it to run on the
embedded store, or start Azurite from this repository (Node.js 20+):
    eval \"$(scripts/azurite.sh start)\"
    cargo run --example department_moves
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
        eprintln!("department_moves failed: {e}");
        if std::env::var_os("TABLEKIT_CONNECTION_STRING").is_some() {
            eprintln!("\n{HOW_TO_START_AZURITE}");
        }
        std::process::exit(1);
    }
}

fn employee(department: &str, id: u32, first: &str, last: &str) -> Employee {
    Employee {
        department: department.into(),
        employee_id: id,
        first_name: first.into(),
        last_name: last.into(),
    }
}

async fn run(tables: TableServiceClient, queues: QueueServiceClient) -> Result<(), BoxError> {
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let names =
        ["Staff", "Departments", "StaffByName", "StaffByNameKeys"].map(|n| format!("{n}{suffix}"));
    for name in &names {
        tables.create_table(name).await?;
    }
    let jobs = queues.queue(&format!("staff-jobs-{suffix}"))?;
    let poison = queues.queue(&format!("staff-jobs-{suffix}-poison"))?;
    jobs.create_queue().await?;
    poison.create_queue().await?;
    println!(
        "tables {}, queues {} and {}",
        names.join(", "),
        jobs.name(),
        poison.name()
    );

    // One-to-many in one partition: each hire and its department's count in
    // one transaction.
    let counted = CountedPartition::new(
        tables.table::<Staff>(&names[0])?,
        "Department",
        Department::columns().employee_count,
    )
    .with_summary_property("EntityType", "Department");
    let staff = OneToMany::new(counted, jobs.clone());
    let hires = [
        employee("Sales", 123, "Ken", "Kwok"),
        employee("Sales", 456, "Kim", "Akers"),
        employee("Sales", 789, "Don", "Hall"),
        employee("Marketing", 111, "Ana", "Jones"),
        employee("Marketing", 222, "Sam", "Jones"),
    ];
    for e in &hires {
        staff.insert(&mut Staff::Employee(e.clone())).await?;
    }
    for d in ["Sales", "Marketing"] {
        let partition: Vec<Staff> = staff.read_partition(d).await?; // one query
        println!(
            "{d}: {} entities in one query, EmployeeCount {}",
            partition.len(),
            staff.count(d).await?
        );
    }

    // Moves: two partitions, so a message each and the worker.
    staff.move_to(("Sales", "000456"), "Marketing").await?;
    staff.move_to(("Sales", "000789"), "Marketing").await?;
    let view = MaterializedView::new(
        &tables,
        &names[0],
        &names[2],
        &names[3],
        jobs.clone(),
        |s: &Staff| match s {
            Staff::Employee(e) => vec![ByLastName {
                last_name: e.last_name.clone(),
                department: e.department.clone(),
                employee_id: e.employee_id,
                first_name: e.first_name.clone(),
            }],
            Staff::Department(_) => Vec::new(),
        },
    )?;
    let worker = view
        .attach(staff.attach(Worker::builder(jobs.clone(), tables.clone())))
        .poison_queue(poison)
        .visibility_timeout(Duration::from_secs(30))
        .build()?;
    let report = worker.drain().await?;
    println!("moves: {} run, {} failed", report.succeeded, report.failed);
    let counts = (staff.count("Sales").await?, staff.count("Marketing").await?);
    println!(
        "Sales: EmployeeCount {}, Marketing: EmployeeCount {}",
        counts.0, counts.1
    );
    check(counts == (1, 4), "the counts after the moves are 1 and 4")?;

    // One-to-one: each department names its manager.
    let departments = tables.table::<DepartmentInfo>(&names[1])?;
    for (name, floor, manager) in [("Sales", 3, &hires[0]), ("Marketing", 5, &hires[3])] {
        departments
            .insert(&DepartmentInfo {
                name: name.into(),
                floor,
                manager: Link::to(manager),
            })
            .await?;
    }
    let marketing = departments
        .get(("Departments", "Marketing"))
        .await?
        .ok_or("no Marketing")?;
    if let Some(m) = marketing
        .manager
        .resolve(&staff.counted().table().with_type::<Employee>())
        .await?
    {
        println!(
            "Marketing's manager (one point read): {} {}",
            m.first_name, m.last_name
        );
    }

    // Join in the client: the departments cached, each employee joined.
    let cache = LookupCache::new(departments, Duration::from_secs(600));
    let everyone: Vec<(Staff, Option<DepartmentInfo>)> = cache
        .join(staff.counted().table().query().stream(), |s: &Staff| {
            let d = match s {
                Staff::Employee(e) => &e.department,
                Staff::Department(d) => &d.department,
            };
            ("Departments", d.as_str()).into()
        })
        .try_collect()
        .await?;
    for (s, d) in &everyone {
        if let Staff::Employee(e) = s {
            let floor = d.as_ref().map_or("?".to_string(), |d| d.floor.to_string());
            println!(
                "  {} {} of {}, floor {floor}",
                e.first_name, e.last_name, e.department
            );
        }
    }
    println!(
        "departments loaded {} time(s) for {} rows",
        cache.loads(),
        everyone.len()
    );
    check(
        cache.loads() == 1 && everyone.len() == 7,
        "one load joins the seven rows",
    )?;

    // The view: after the writes, say which source entities changed.
    for e in &hires {
        view.changed((e.department.as_str(), format!("{:06}", e.employee_id)))
            .await?;
    }
    view.changed(("Marketing", "000456")).await?;
    view.changed(("Marketing", "000789")).await?;
    println!(
        "view lag before the worker: {} pending",
        view.lag().await?.pending
    );
    worker.drain().await?;
    let joneses = view
        .view()
        .query()
        .filter(|r| r.partition_key.eq("Jones"))
        .fetch_all()
        .await?;
    println!(
        "Joneses by last name: {}",
        joneses
            .iter()
            .map(|r| format!("{} ({})", r.first_name, r.department))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let rows = view.view().query().fetch_all().await?.len();
    let pending = view.lag().await?.pending;
    println!("view: {rows} rows, {pending} changes pending");
    check(
        joneses.len() == 2 && rows == 5 && pending == 0,
        "the view holds the five employees",
    )?;
    Ok(())
}

/// An error (and a non-zero exit) when what the example shows is not so.
fn check(holds: bool, what: &str) -> Result<(), BoxError> {
    if holds {
        Ok(())
    } else {
        Err(format!("not so: {what}").into())
    }
}
