//! Composing the writes of several patterns, and plain writes, into one
//! entity group transaction: the patterns' side of [`tablekit::table::Plan`].
//!
//! Every pattern that keeps entities of one partition in step **plans** its
//! writes instead of sending them: `plan_insert`, `plan_update`,
//! `plan_delete`, `plan_count`, `plan_assign`, ... return a [`Plan`], the
//! same value a [`TableClient`](tablekit::TableClient)'s own `plan_insert`
//! returns. Plans join with [`Plan::and`] and are sent as one transaction
//! by awaiting them (or [`Plan::send`]). The service applies it all or
//! nothing.
//!
//! Every `plan_*` call is synchronous and makes no request: a plan declares
//! the reads it depends on (the department's count, the target of a copy)
//! and the executor makes them when the plan is sent, **once per entity**
//! however many patterns read it, then works every part out from that read.
//! When the transaction finds an entity the plan read changed in between,
//! the plan is worked out again from fresh reads (up to
//! [`MAX_ATTEMPTS`](tablekit::table::plan::MAX_ATTEMPTS)); no closure of yours
//! is called again, so there is no `transact` loop to write.
//!
//! Composition is exact ([`tablekit::table::plan`] says how): two additions
//! to a count add both, and what one operation cannot do is refused before
//! the transaction is sent. Each pattern's plan holds only the rows the
//! pattern owns plus, in its `plan_insert`/`plan_delete`, the entity's own
//! write; to compose two patterns over one entity, take the entity's write
//! from one and the other's own rows alone (`plan_insert_copies`,
//! `plan_count`, `plan_assign`), since two writes of one entity are two
//! writes, not one.
//!
//! ```
//! use tablekit::{ETag, TableEntity, TableServiceClient};
//! use tablekit_patterns::index::{Index, IndexedTable};
//! use tablekit_patterns::summary::CountedPartition;
//!
//! #[derive(TableEntity, Debug, Clone)]
//! #[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     email: String,
//!     #[tablekit(etag)]
//!     etag: Option<ETag>,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded();
//! let table = service.table::<Employee>("Employees")?;
//! table.create_table().await?;
//! let by_email = Index::new("email", "email_", |e: &Employee| e.email.clone());
//! let indexed = IndexedTable::new(table.clone())?.with_index(&by_email)?;
//! let counted = CountedPartition::new(table.clone(), "Department", "EmployeeCount");
//!
//! let jones = Employee { department: "Sales".into(), employee_id: 223, email: "jonesj@contoso.com".into(), etag: None };
//! let smith = Employee { department: "Sales".into(), employee_id: 224, email: "smithj@contoso.com".into(), etag: None };
//! // One transaction: two employees, their index copies, and the department's
//! // count plus two (from one read of the department).
//! let applied = indexed
//!     .plan_insert(&jones)?
//!     .and(indexed.plan_insert(&smith)?)?
//!     .and(counted.plan_count("Sales", 2)?)?
//!     .await?;
//! assert_eq!(applied.len(), 5);
//! assert_eq!(counted.count("Sales").await?, 2);
//! # Ok(()) }
//! ```

pub use tablekit::table::{Applied, Plan};
