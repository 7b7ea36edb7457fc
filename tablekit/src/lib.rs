//! tablekit: a typed Rust SDK for Azure Table Storage.
#![warn(missing_docs, missing_debug_implementations)]
#![deny(rustdoc::broken_intra_doc_links)]

mod codec;
pub mod edm;
mod entity;
mod error;
pub mod validate;

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
