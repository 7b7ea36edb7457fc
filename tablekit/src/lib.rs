//! tablekit: a typed Rust SDK for Azure Table Storage, the Azurite emulator and
//! anything else that speaks the Table service's REST protocol.
//!
//! # A tour
//!
//! A **table** holds **entities**: typed properties under a two-part primary key,
//! the **PartitionKey** (which entities live together and can change together
//! atomically) and the **RowKey** (unique within a partition). Entities come back
//! in (PartitionKey, RowKey) order; there are no other indexes. Every entity has
//! an **ETag**, its version: a write can be made conditional on it, which is how
//! two writers avoid overwriting each other.
//!
//! * [`TableServiceClient`] reaches an account ([`Account`], from a connection
//!   string) and gives [`TableClient`]s for its tables.
//! * [`TableClient<T>`] reads and writes entities typed as `T`, any type that
//!   implements [`TableEntity`]. [`DynamicEntity`] is the untyped property bag.
//! * Writes: [`insert`](TableClient::insert), [`upsert`](TableClient::upsert)
//!   with an [`UpdateMode`], [`update`](TableClient::update) and
//!   [`delete`](TableClient::delete) with an explicit [`IfMatch`].
//! * Reads: [`get`](TableClient::get) gives `Option<T>`; [`query`](TableClient::query)
//!   streams entities across continuation tokens, or pages with a resumable
//!   [`Continuation`].
//! * [`transaction`](TableClient::transaction): up to 100 operations in one
//!   partition, applied all or none.
//! * Every failure is an [`Error`]; input the service would refuse is refused
//!   before any request is sent.
//!
//! ```no_run
//! use futures::TryStreamExt;
//! use tablekit::{DynamicEntity, IfMatch, TableServiceClient, UpdateMode};
//!
//! # async fn run() -> tablekit::Result<()> {
//! let service = TableServiceClient::from_connection_string("UseDevelopmentStorage=true")?;
//! let blogs = service.table::<DynamicEntity>("Blogs")?;
//! blogs.create_if_not_exists().await?;
//!
//! let mut post = DynamicEntity::new("Channel9", "Oct-29").with("Text", "Hello").with("Rating", 3);
//! blogs.insert(&mut post).await?;               // fills post.etag
//!
//! post.set("Text", "Hi there");
//! let etag = post.etag.clone().unwrap();
//! blogs.update(&mut post, UpdateMode::Merge, IfMatch::ETag(etag)).await?;
//!
//! let top_rated: Vec<DynamicEntity> = blogs
//!     .query()
//!     .filter("PartitionKey eq 'Channel9' and Rating ge 3")
//!     .stream()
//!     .try_collect()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Building and reading entities needs no service:
//!
//! ```
//! use tablekit::{entity_to_json, DynamicEntity};
//!
//! let e = DynamicEntity::new("p1", "r1").with("Views", 9_000_000_000_i64);
//! let json = String::from_utf8(entity_to_json(&e)?).unwrap();
//! // Int64 travels as an annotated string, as the service requires.
//! assert_eq!(json, r#"{"PartitionKey":"p1","RowKey":"r1","Views@odata.type":"Edm.Int64","Views":"9000000000"}"#);
//!
//! // Keys the service would refuse are refused before any request.
//! assert!(entity_to_json(&DynamicEntity::new("a/b", "r")).is_err());
//! # Ok::<(), tablekit::Error>(())
//! ```
#![warn(missing_docs, missing_debug_implementations)]
#![deny(rustdoc::broken_intra_doc_links)]

pub mod account;
mod auth;
mod backend;
mod batch;
mod client;
mod codec;
mod columns;
pub mod edm;
mod entity;
mod error;
pub mod filter;
mod http;
mod query;
pub mod validate;

pub use account::{
    Account, AccountKey, Credential, SasProtocol, SasToken, TableSas, TableSasPermissions,
    TokenCredential,
};
pub use backend::Written;
pub use client::{
    ClientOptions, Get, ListTables, TableClient, TableServiceClient, Transaction,
    TransactionResult, WriteTarget,
};
pub use codec::write::entity_to_json;
pub use columns::{Column, EntityColumns};
pub use edm::{EdmType, EdmValue};
pub use entity::{
    to_dynamic, DynamicEntity, ETag, EntityKey, IfMatch, Properties, PropertyValue, PropertyWriter,
    RawEntity, TableEntity, UpdateMode,
};
pub use error::{
    ConfigError, DecodeError, Error, ErrorKind, KeyKind, Result, ServiceError, TransportError,
    ValidationError,
};
pub use http::{HttpOptions, Metadata, RetryPolicy, API_VERSION};
pub use query::{Continuation, EntityStream, Page, PageStream, Query};

/// `#[derive(TableEntity)]`: implements [`TableEntity`] for a struct (see the trait's docs).
#[cfg(feature = "derive")]
pub use tablekit_derive::TableEntity;

#[doc(hidden)]
#[path = "__derive.rs"]
pub mod __derive;

/// Support for tablekit's own macros and benchmarks; not a public API.
#[doc(hidden)]
pub mod __private {
    use crate::{Result, TableEntity};

    /// Decodes a query response body (`{"value":[...]}`) into `T`s.
    pub fn decode_page<T: TableEntity>(body: &[u8]) -> Result<Vec<T>> {
        let mut out = Vec::new();
        crate::codec::read::decode_page(body, &mut out)?;
        Ok(out)
    }

    /// The `Authorization` header value of a SharedKey-signed request.
    pub fn sign_shared_key(
        account: &str,
        key: &crate::AccountKey,
        method: &str,
        content_type: &str,
        date: &str,
        path: &str,
    ) -> String {
        crate::auth::shared_key(
            account,
            key,
            &crate::auth::StringToSign {
                method,
                content_md5: "",
                content_type,
                date,
                path,
                comp: None,
            },
        )
    }
}
