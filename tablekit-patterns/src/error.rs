//! The errors the patterns raise themselves, as tablekit errors.

use tablekit::{Error, ValidationError};

/// Input a pattern refuses before any request: reported like tablekit's own
/// transaction rules, so `is_invalid_input()` holds.
pub(crate) fn invalid(reason: impl Into<String>) -> Error {
    ValidationError::batch(None, reason).into()
}
