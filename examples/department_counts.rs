//! Denormalised counts and details in a heterogeneous partition (design
//! guide §3.5, §4.8): the Marketing partition holds employees (`00001`,
//! `00002`) and the department entity (`Department`, EmployeeCount=153, its
//! manager's details). Adding an employee who becomes the manager is one
//! transaction (the employee, the count, the manager's details: three
//! patterns composed); a change of the manager's email changes the
//! department's copy in the same transaction; and one query reads the
//! department with its employees into a typed enum (the kinds told apart by
//! their `EntityType` property, §4.8).
//!
//! ```text
//! cargo run --example department_counts                 # on the embedded in-process store
//! eval "$(scripts/azurite.sh start)"      # or on Azurite (or export an Azure
//! cargo run --example department_counts                 # account's TABLEKIT_CONNECTION_STRING)
//! scripts/azurite.sh stop
//! ```

use tablekit::filter::EntityColumns;
use tablekit::{ETag, EdmValue, IfMatch, Storage, TableEntity, TableServiceClient};
use tablekit_patterns::denormalize::Denormalized;
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
    #[tablekit(etag)]
    etag: Option<ETag>,
}

/// The department entity: its count and its manager's details (§3.5).
#[derive(TableEntity, Debug, Clone)]
#[tablekit(partition_key = "{department}", row_key = "Department")]
struct Department {
    department: String,
    department_name: Option<String>,
    employee_count: i32,
    manager_id: Option<String>,
    manager_first_name: Option<String>,
    manager_last_name: Option<String>,
    manager_email: Option<String>,
}

/// The partition's two kinds, told apart by `EntityType`.
#[derive(TableEntity, Debug, Clone)]
enum Staff {
    Employee(Employee),
    Department(Department),
}

const HOW_TO_START_AZURITE: &str = "\
No Table service answered at TABLEKIT_CONNECTION_STRING. Unset it to run on the
embedded store, or start Azurite from this repository (Node.js 20+):
    eval \"$(scripts/azurite.sh start)\"
    cargo run --example department_counts
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
    let table = service.table::<Staff>(&name)?;
    table.create_table().await?;
    println!("created table {name}");

    // The department entity of the seed, with its manager's details denormalised into it.
    let department = Staff::Department(Department {
        department: "Marketing".into(),
        department_name: Some("Marketing".into()),
        employee_count: 151,
        manager_id: None,
        manager_first_name: None,
        manager_last_name: None,
        manager_email: None,
    });
    table.insert(&department).await?;
    println!("Marketing / Department: EmployeeCount = 151, no manager yet");

    // Property names from the department type's columns: checked when compiled.
    let columns = Department::columns();
    let staff = CountedPartition::new(table.clone(), "Department", columns.employee_count)
        .with_summary_property("EntityType", "Department");
    // The department's copy of its manager: ManagerId names the employee.
    let manager = Denormalized::new(
        table.clone(),
        "Department",
        columns.manager_id,
        |s: &Staff| match s {
            Staff::Employee(e) => (
                format!("{:05}", e.employee_id),
                vec![
                    (
                        "ManagerFirstName".to_string(),
                        EdmValue::from(e.first_name.clone()),
                    ),
                    (
                        "ManagerLastName".to_string(),
                        EdmValue::from(e.last_name.clone()),
                    ),
                    ("ManagerEmail".to_string(), EdmValue::from(e.email.clone())),
                ],
            ),
            Staff::Department(_) => (String::new(), Vec::new()),
        },
    );
    for (id, first, last, age) in [(1, "Don", "Hall", 34), (2, "Jun", "Cao", 47)] {
        let e = Staff::Employee(Employee {
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
            etag: None,
        });
        if id == 1 {
            // Don joins as the manager: the employee, the count and the
            // manager's details, one transaction (one merge of Department).
            staff
                .plan_insert(&e)?
                .and(manager.plan_assign(&e)?)?
                .await?;
            println!("added {id:05} {first} {last} as the manager: read Department once + one transaction (insert, one merge of EmployeeCount and the manager's details)");
        } else {
            let count = staff.insert(&mut e.clone()).await?;
            println!("added {id:05} {first} {last}: read Department + one transaction (insert, merge of EmployeeCount under its ETag) -> {count}");
        }
    }

    // Don's email changes: his entity and the department's copy, one transaction.
    let Some(Staff::Employee(mut don)) = table.get(("Marketing", "00001")).await? else {
        unreachable!("00001 was inserted above");
    };
    don.email = "don.hall@contoso.com".into();
    let etag = don.etag.clone().expect("read with its ETag");
    manager.update(&mut Staff::Employee(don), etag).await?;
    println!("changed 00001's email: read Department + one transaction (replace of 00001, merge of the manager's email)");
    let count = staff.delete(("Marketing", "00002"), IfMatch::Any).await?;
    println!("removed 00002: read Department + one transaction (delete, merge of EmployeeCount) -> {count}");

    let Some(Staff::Department(d)) = table.get(("Marketing", "Department")).await? else {
        unreachable!("the department was inserted above");
    };
    assert_eq!(d.employee_count, 152, "151 + Don + Jun - Jun");
    assert_eq!(d.manager_email.as_deref(), Some("don.hall@contoso.com"));
    println!("one point query gives the department and its manager:");
    if let Some(d) = staff.summary("Marketing").await? {
        for (name, value) in &d.properties {
            println!("  {name} = {value:?}");
        }
    }
    println!("one query reads the partition into the typed enum:");
    for entity in staff.read_partition::<Staff>("Marketing").await? {
        match entity {
            Staff::Employee(e) => println!(
                "  Employee {:05}: {} {}, {}, {}",
                e.employee_id, e.first_name, e.last_name, e.age, e.email
            ),
            Staff::Department(d) => println!(
                "  Department {}: EmployeeCount = {}, manager {} {} {} <{}>",
                d.department,
                d.employee_count,
                d.manager_id.unwrap_or_default(),
                d.manager_first_name.unwrap_or_default(),
                d.manager_last_name.unwrap_or_default(),
                d.manager_email.unwrap_or_default()
            ),
        }
    }

    table.delete_table().await?;
    println!("deleted table {name}");
    Ok(())
}
