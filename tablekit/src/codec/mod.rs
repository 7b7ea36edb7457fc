//! The Table service's JSON wire format: entities out ([`entity_to_json`]) and
//! in ([`entity_from_json`]), and the same walk into a property bag
//! ([`to_dynamic`]). It fills and reads the vocabulary of `entity`, which knows
//! nothing of it.

#[cfg(feature = "server")]
pub(crate) mod answer;
pub(crate) mod bag;
pub(crate) mod read;
pub(crate) mod write;

pub use bag::to_dynamic;
pub use read::entity_from_json;
pub use write::entity_to_json;
