//! Relationships between entities (seed §5.7 and §3.14): the typed building
//! blocks of the four ways the design guide models them. Each is a thin front
//! on a pattern of this crate where the relationship *is* that pattern.
//!
//! | relationship | the type | built on | consistency |
//! |---|---|---|---|
//! | one-to-many in one partition (a department and its employees) | [`OneToMany`] | [`summary::CountedPartition`](crate::summary::CountedPartition) | each insert or delete and the count: one transaction |
//! | moving one of the many to another partition | [`OneToMany::move_to`], a [`Move`] message | the queue [`Worker`](crate::eventual::Worker) | eventually consistent: two transactions (see below) |
//! | one-to-one, explicit | [`Link`]: the other entity's PartitionKey and RowKey as two properties | a point read | none: a link can name a deleted entity |
//! | one-to-one, implicit | [`KeyConvention`]: a function from one entity's keys to the other's | a point read | none |
//! | join in the client | [`LookupCache`]: a typed copy of a small, rarely changing table, and [`LookupCache::join`] | one query per load | as old as the time to live |
//! | materialized view (CQRS) | [`MaterializedView`] | the queue [`Worker`](crate::eventual::Worker) | eventually consistent, rebuildable, lag observable |
//!
//! # One-to-many: a department and its employees in one partition
//!
//! The seed's first design: separate entity types, **one partition, one
//! table**. The department entity and its employees share the PartitionKey
//! (the department's name), so the whole department is one query, read
//! into a derived enum, and the department's employee count changes in the
//! same entity group transaction as each insert or delete. The cost the
//! seed names: every operation of a department hits one partition.
//!
//! ```
//! use tablekit::{filter::EntityColumns, QueueServiceClient, TableEntity, TableServiceClient};
//! use tablekit_patterns::eventual::Worker;
//! use tablekit_patterns::relationships::OneToMany;
//! use tablekit_patterns::summary::CountedPartition;
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     name: String,
//! }
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "Department")]
//! struct Department {
//!     department: String,
//!     employee_count: i32,
//! }
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! enum Staff {
//!     Employee(Employee),
//!     Department(Department),
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let tables = TableServiceClient::embedded(); // or ::from_connection_string(..)
//! let queues = QueueServiceClient::embedded();
//! # tables.create_table("Staff").await?;
//! let moves = queues.queue("staff-moves")?;
//! # moves.create_queue().await?;
//! // The enum is what is counted, so every employee is stored with its
//! // `EntityType`; the department the pattern creates gets one too.
//! let counted = CountedPartition::new(tables.table::<Staff>("Staff")?, "Department", Department::columns().employee_count)
//!     .with_summary_property("EntityType", "Department");
//! let staff = OneToMany::new(counted, moves.clone());
//!
//! let kim = Employee { department: "Sales".into(), employee_id: 123, name: "Kim".into() };
//! staff.insert(&mut Staff::Employee(kim.clone())).await?; // Kim, and Sales' count + 1: one transaction
//!
//! // The department and its employees: one query, typed.
//! let sales: Vec<Staff> = staff.read_partition("Sales").await?;
//! assert_eq!(sales, [
//!     Staff::Employee(kim.clone()),
//!     Staff::Department(Department { department: "Sales".into(), employee_count: 1 }),
//! ]);
//!
//! // Kim moves to Marketing: two partitions, so a message and a worker.
//! staff.move_to(("Sales", "000123"), "Marketing").await?;
//! # let poison = queues.queue("staff-moves-poison")?;
//! # poison.create_queue().await?;
//! let worker = staff.attach(Worker::builder(moves, tables.clone())).poison_queue(poison).build()?;
//! worker.drain().await?;
//! assert_eq!((staff.count("Sales").await?, staff.count("Marketing").await?), (0, 1));
//! let marketing: Vec<Staff> = staff.read_partition("Marketing").await?;
//! assert_eq!(marketing[0], Staff::Employee(Employee { department: "Marketing".into(), ..kim }));
//! # Ok(()) }
//! ```
//!
//! ## Moving an employee: what is guaranteed
//!
//! An entity group transaction cannot span two partitions, so a move is two
//! transactions, run by the queue worker from one message ([`Move`]):
//! first the copy in the new department **with** its count + 1, then the
//! delete from the old department **with** its count − 1 (under the ETag
//! read, so a change made meanwhile is carried: the move starts again from
//! the read). [`OneToMany::apply_move`] lists the steps.
//!
//! * **Counts are always right.** Every change of an employee entity is in
//!   the same transaction as the change of its department's count, so at
//!   every moment, crashes and redeliveries included, each department's
//!   count is the number of employee entities in its partition.
//! * **Between the two transactions** a reader sees the employee in both
//!   departments, each counting it (the total of the counts is one more
//!   than the number of employees). A crash there leaves that state until
//!   the message comes back (after the worker's visibility timeout) and
//!   the move finishes.
//! * **Nothing is lost.** The old entity is deleted only after the new one
//!   is written, and only if unchanged since it was copied.
//! * **Redelivery is harmless.** A move that runs again finds the old entity
//!   gone and stops, or finds the copy there and replaces it (its count
//!   unchanged) before deleting the old one; two workers running one move at
//!   once leave one copy.
//! * **What is not guaranteed.** Until the move is done the old entity is
//!   the employee: a write to the new copy in that time may be overwritten
//!   by the move, and deleting the old entity in that time leaves the copy
//!   (the move wins). Two moves of one employee in flight at once (to two
//!   departments) can leave a copy in each; and a move message run again
//!   after a later move brought the employee back (only when a worker lost
//!   its delete of the finished message) moves it again. The counts stay
//!   right in all of these. Enqueue one move per employee at a time, and
//!   delete an employee only when no move of it is pending.
//! * **The RowKey is the employee's identity** across departments: an
//!   entity already under the same RowKey in the new department is taken for
//!   the copy of an earlier attempt and replaced.
//! * **A move that ends in the poison queue** (its delete kept failing) can
//!   leave the employee in both departments, each counting it, until it is
//!   [requeued](crate::eventual::Eventual::requeue) and runs to the end.
//!
//! # One-to-one: a link, explicit or by convention
//!
//! An explicit [`Link<T>`](Link) stores the other entity's PartitionKey and
//! RowKey in the holder; a [`KeyConvention`] computes them from the holder's
//! own keys. Either resolves in one point read, typed by the table.
//!
//! ```
//! use tablekit::{TableEntity, TableServiceClient};
//! use tablekit_patterns::relationships::{KeyConvention, Link};
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     name: String,
//! }
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{department}", row_key = "Department")]
//! struct Department {
//!     department: String,
//!     #[tablekit(flatten)]
//!     manager: Link<Employee>, // stored as Manager_PartitionKey, Manager_RowKey
//! }
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:06}_details")]
//! struct EmployeeDetails {
//!     department: String,
//!     employee_id: u32,
//!     biography: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let tables = TableServiceClient::embedded();
//! # tables.create_table("Staff").await?;
//! # tables.create_table("Details").await?;
//! let staff = tables.table::<Employee>("Staff")?;
//! let departments = staff.with_type::<Department>();
//! let kim = Employee { department: "Sales".into(), employee_id: 123, name: "Kim".into() };
//! staff.insert(&kim).await?;
//! departments.insert(&Department { department: "Sales".into(), manager: Link::to(&kim) }).await?;
//!
//! // Explicit: the department names its manager; one point read.
//! let sales = departments.get(("Sales", "Department")).await?.unwrap();
//! assert_eq!(sales.manager.resolve(&staff).await?, Some(kim.clone()));
//!
//! // Implicit: an employee's details are under its RowKey + "_details".
//! let details = tables.table::<EmployeeDetails>("Details")?;
//! let details_of = KeyConvention::<Employee, EmployeeDetails>::new(|pk, rk| (pk, format!("{rk}_details")).into());
//! details.insert(&EmployeeDetails { department: "Sales".into(), employee_id: 123, biography: "…".into() }).await?;
//! assert_eq!(details_of.resolve(&kim, &details).await?.map(|d| d.employee_id), Some(123));
//! # Ok(()) }
//! ```
//!
//! # Join in the client
//!
//! Small tables that rarely change (a small organisation's departments) can
//! be read once and kept by the client as lookup data ([`LookupCache`]):
//! each employee is then joined with its department without a request.
//!
//! ```
//! use std::time::Duration;
//! use futures::TryStreamExt;
//! use tablekit::{TableEntity, TableServiceClient};
//! use tablekit_patterns::relationships::LookupCache;
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
//! struct Employee { department: String, employee_id: u32, name: String }
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "Departments", row_key = "{name}")]
//! struct Department { name: String, floor: i32 }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let tables = TableServiceClient::embedded();
//! # tables.create_table("Staff").await?;
//! # tables.create_table("Departments").await?;
//! let staff = tables.table::<Employee>("Staff")?;
//! let departments = tables.table::<Department>("Departments")?;
//! departments.insert(&Department { name: "Sales".into(), floor: 3 }).await?;
//! staff.insert(&Employee { department: "Sales".into(), employee_id: 1, name: "Kim".into() }).await?;
//! staff.insert(&Employee { department: "Legal".into(), employee_id: 2, name: "Ana".into() }).await?;
//!
//! // Loaded once, good for ten minutes.
//! let cache = LookupCache::new(departments, Duration::from_secs(600));
//! let joined: Vec<(Employee, Option<Department>)> = cache
//!     .join(staff.query().stream(), |e: &Employee| ("Departments", e.department.as_str()).into())
//!     .try_collect()
//!     .await?;
//! assert_eq!(joined[0].1, None); // Legal: no such department
//! assert_eq!(joined[1].1.as_ref().map(|d| d.floor), Some(3));
//! assert_eq!(cache.loads(), 1);
//! # Ok(()) }
//! ```
//!
//! # Materialized view (CQRS)
//!
//! A view table worked out from a source table by a function, kept by the
//! queue worker from "this source entity changed" messages, rebuildable
//! from the source, its lag observable ([`MaterializedView`]). The view is
//! eventually consistent: a reader sees the source's state as of the last
//! change the worker applied, never a mix of two states of one source
//! entity once its message ran, and rows of a state older than the current
//! one only while a change of it is pending.
//!
//! ```
//! use tablekit::{QueueServiceClient, TableEntity, TableServiceClient};
//! use tablekit_patterns::eventual::Worker;
//! use tablekit_patterns::relationships::MaterializedView;
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
//! struct Employee { department: String, employee_id: u32, last_name: String }
//!
//! /// Employees by last name, across departments.
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{last_name}", row_key = "{employee_id:06}")]
//! struct ByLastName { last_name: String, employee_id: u32, department: String }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let tables = TableServiceClient::embedded();
//! let queues = QueueServiceClient::embedded();
//! for t in ["Staff", "StaffByName", "StaffByNameKeys"] { tables.create_table(t).await?; }
//! let (jobs, poison) = (queues.queue("staff-view")?, queues.queue("staff-view-poison")?);
//! # jobs.create_queue().await?;
//! # poison.create_queue().await?;
//! let view = MaterializedView::new(&tables, "Staff", "StaffByName", "StaffByNameKeys", jobs.clone(), |e: &Employee| {
//!     vec![ByLastName { last_name: e.last_name.clone(), employee_id: e.employee_id, department: e.department.clone() }]
//! })?;
//!
//! // The write side: write the source, then say it changed.
//! let staff = view.source().clone();
//! staff.insert(&Employee { department: "Sales".into(), employee_id: 7, last_name: "Jones".into() }).await?;
//! view.changed(("Sales", "000007")).await?;
//! assert_eq!(view.lag().await?.pending, 1);
//!
//! let worker = view.attach(Worker::builder(jobs, tables.clone())).poison_queue(poison).build()?;
//! worker.drain().await?;
//! let jones = view.view().get(("Jones", "000007")).await?.unwrap();
//! assert_eq!(jones.department, "Sales");
//! assert_eq!(view.lag().await?.pending, 0);
//! assert!(view.lag().await?.last_applied.is_some());
//! # Ok(()) }
//! ```

mod cache;
mod link;
mod one_to_many;
mod view;

pub use cache::{LookupCache, Snapshot, DEFAULT_MAX_ENTITIES};
pub use link::{KeyConvention, Link};
pub use one_to_many::{Move, OneToMany, MOVE_KIND_PREFIX};
pub use view::{
    Changed, LastApplied, MaterializedView, RebuildReport, ViewLag, ROWS_PROPERTY, VIEW_KIND_PREFIX,
};
