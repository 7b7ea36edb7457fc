//! The Table service's JSON wire format: entities out ([`write`]) and in ([`read`]).

pub(crate) mod read;
pub(crate) mod write;
