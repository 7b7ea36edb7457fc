//! The errors the patterns raise themselves, as tablekit errors.

use tablekit::{error::ValidationError, Error};

/// A declaration or a write that pattern `pattern` refuses before any
/// request: [`ValidationError::Pattern`], so `is_invalid_input()` holds and
/// the message names the pattern.
pub(crate) fn refused(pattern: &'static str, reason: impl Into<String>) -> Error {
    ValidationError::pattern(pattern, reason).into()
}
