//! The table clients: [`TableServiceClient`] for an account's tables,
//! [`TableClient`] for the entities of one table, [`Query`] and [`Transaction`].

pub mod bulk;
mod client;
mod handle;
mod outcome;
pub mod plan;
pub(crate) mod query;
pub(crate) mod stats;

pub use crate::backend::Written;
pub use client::{
    Get, ListTables, Modified, Modify, ModifyStep, TableClient, TableItem, TableNames,
    TableServiceClient, Transaction, TransactionOp, TransactionResult, WriteTarget,
};
pub use handle::AmbiguousWrites;
pub use outcome::ReadBack;
pub use plan::{Applied, Plan, PlanTarget, SaveOutcome, TableRef, UnitOfWork};
pub use query::{EntityStream, Page, PageStream, Query, ScanPolicy};
pub use stats::{
    PartitionStats, RequestKind, Stats, ACCOUNT_TARGET, HEAT_SHARE, MAX_PARTITIONS,
    PARTITION_TARGET, WARNING_INTERVAL,
};
