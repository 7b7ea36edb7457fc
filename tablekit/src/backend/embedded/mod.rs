//! The embedded store: the storage services' semantics in process.

pub(crate) mod blobs;
pub(crate) mod queues;
