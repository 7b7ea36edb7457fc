//! The compound key pattern (design guide §3.6): related entities of different
//! types share a partition, and their RowKeys start with the parent's, so one
//! range query returns the parent and everything that belongs to it, in order.
//!
//! The keys themselves come from the derive's templates: the employee
//! `row_key = "empid_{employee_id:06}"` (`empid_000123`) and the review
//! `row_key = "empid_{employee_id:06}_{year}"` (`empid_000123_2012`). The
//! guide's separator example `000123_2012` is `"{employee_id:06}_{year}"`.
//! This module gives the ranges:
//!
//! ```
//! use tablekit::DynamicEntity;
//! use tablekit_patterns::compound::{children, family};
//!
//! // §3.6 (S4's bounds; S0's `lt '000123_2012'` is an empty range, §7 item 1):
//! assert_eq!(
//!     family("empid_000123").filter::<DynamicEntity>("Sales", "").to_string(),
//!     "PartitionKey eq 'Sales' and RowKey ge 'empid_000123' and RowKey lt 'empid_000124'"
//! );
//! // Only the children: the reviews of 000123, in year order.
//! assert_eq!(
//!     children("empid_000123", "_").filter::<DynamicEntity>("Sales", "").to_string(),
//!     "PartitionKey eq 'Sales' and RowKey ge 'empid_000123_' and RowKey lt 'empid_000123`'"
//! );
//! ```
//!
//! The parent and its children share a partition, so an entity group
//! transaction can change them together ([`tablekit::TableClient::transaction`]).
//! Read a mixed range as a `#[derive(TableEntity)]` enum or as
//! [`tablekit::DynamicEntity`]; read only the children as their own type.
//!
//! # Writes
//!
//! This pattern is a choice of keys and ranges: it has no write of its own,
//! so nothing to plan. Its keys come from the types' derives, and a parent
//! with its children is written in one transaction by joining the table
//! client's own plans ([`TableClient::plan_insert`] and its siblings, one
//! client per entity type over the same table), as with any other writes of
//! one partition ([`crate::plan`]):
//!
//! ```
//! use tablekit::{TableEntity, TableServiceClient};
//! use tablekit_patterns::compound::{children, read};
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}")]
//! struct Employee {
//!     department: String,
//!     employee_id: u32,
//!     last_name: String,
//! }
//!
//! #[derive(TableEntity, Debug, Clone, PartialEq)]
//! #[tablekit(partition_key = "{department}", row_key = "empid_{employee_id:06}_{year}")]
//! struct Review {
//!     department: String,
//!     employee_id: u32,
//!     year: u16,
//!     rating: i32,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tablekit::Result<()> {
//! let service = TableServiceClient::embedded();
//! let employees = service.table::<Employee>("Employees")?;
//! employees.create_table().await?;
//! let reviews = service.table::<Review>("Employees")?; // the same table
//!
//! let jones = Employee { department: "Sales".into(), employee_id: 123, last_name: "Jones".into() };
//! let review = |year| Review { department: "Sales".into(), employee_id: 123, year, rating: 4 };
//! // The parent and two children: one transaction of three inserts.
//! let applied = employees
//!     .plan_insert(&jones)?
//!     .and(reviews.plan_insert(&review(2012))?)?
//!     .and(reviews.plan_insert(&review(2013))?)?
//!     .await?;
//! assert_eq!(applied.len(), 3);
//! let family = read(&reviews, "Sales", &children("empid_000123", "_")).await?;
//! assert_eq!(family, [review(2012), review(2013)]);
//! # Ok(()) }
//! ```

use tablekit::{Result, TableClient, TableEntity};

use crate::range::KeyRange;

/// The parent's RowKey and every RowKey that starts with it: `ge 'parent'` and
/// `lt` its successor (`empid_000123` → `lt 'empid_000124'`).
///
/// With fixed-width numbers, RowKeys that extend the parent's number
/// (`empid_0001234` for a 7-digit id) cannot exist, so the range holds exactly
/// the parent and its children.
pub fn family(parent_row_key: &str) -> KeyRange {
    KeyRange::prefix(parent_row_key)
}

/// The children only: RowKeys that start with `parent_row_key` + `separator`.
pub fn children(parent_row_key: &str, separator: &str) -> KeyRange {
    KeyRange::prefix(format!("{parent_row_key}{separator}"))
}

/// Reads a range of one partition as `T` (one range query, one request per
/// page), in RowKey order.
pub async fn read<T: TableEntity>(
    table: &TableClient<T>,
    partition_key: &str,
    range: &KeyRange,
) -> Result<Vec<T>> {
    crate::trace::traced(
        "compound",
        "read",
        Some(table.name()),
        table
            .query()
            .filter_by(range.filter(partition_key, ""))
            .fetch_all(),
    )
    .await
}
