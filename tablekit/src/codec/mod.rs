//! The Table service's JSON wire format: entities out ([`write`]) and in
//! ([`read`]), and the same walk into a property bag ([`bag`]). It fills and
//! reads the vocabulary of `entity`, which knows nothing of it.

pub(crate) mod bag;
pub(crate) mod read;
pub(crate) mod write;
