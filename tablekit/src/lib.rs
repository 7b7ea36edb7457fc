//! tablekit: a typed Rust SDK for Azure Table Storage.
#![warn(missing_docs, missing_debug_implementations)]
#![deny(rustdoc::broken_intra_doc_links)]

pub mod account;
mod auth;
mod backend;
mod batch;
mod client;
mod codec;
pub mod edm;
mod entity;
mod error;
mod http;
mod query;
pub mod validate;

pub use account::{Account, AccountKey, Credential, SasToken, TokenCredential};
pub use backend::Written;
pub use client::{
    ClientOptions, Get, ListTables, TableClient, TableServiceClient, Transaction,
    TransactionResult, WriteTarget,
};
pub use codec::write::entity_to_json;
pub use edm::{EdmType, EdmValue};
pub use entity::{
    to_dynamic, DynamicEntity, ETag, EntityKey, IfMatch, Properties, PropertyValue, PropertyWriter,
    RawEntity, TableEntity, UpdateMode,
};
pub use error::{
    ConfigError, DecodeError, Error, ErrorKind, KeyKind, Result, ServiceError, TransportError,
    ValidationError,
};
pub use http::{HttpOptions, RetryPolicy, API_VERSION};
pub use query::{Continuation, EntityStream, Page, PageStream, Query};
