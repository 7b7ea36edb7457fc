use tablekit::TableEntity;

#[derive(TableEntity)]
#[tablekit(
    table = "Employees",
    partition_key = "{department}",
    row_key = "empid_{employee_id:08}",
    version = 2
)]
struct Employee {
    department: String,
    employee_id: u32,
    first_name: String,
    #[tablekit(rename = "EmailAddress")]
    email: String,
    age: i32,
    salary: f64,
    hired: chrono::DateTime<chrono::Utc>,
    id: uuid::Uuid,
    #[tablekit(etag)]
    etag: Option<tablekit::ETag>,
    #[tablekit(timestamp)]
    timestamp: Option<chrono::DateTime<chrono::Utc>>,
    #[tablekit(skip)]
    cached: Option<String>,
}

#[derive(TableEntity)]
struct Marked {
    #[tablekit(partition_key)]
    channel: String,
    #[tablekit(row_key)]
    posted: String,
}

fn main() {
    let _ = Employee::key("Sales", 223);
    let _ = Marked::key("a", "b");
    let _ = Employee::TABLE_NAME;
}
