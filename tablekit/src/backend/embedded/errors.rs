//! The service's error answers, as the embedded store gives them: the same
//! status, code and message text (with the failing operation's index for a
//! transaction) that Azure Table Storage sends. The answers name the store
//! that gave them, not the service ([`store_name`], attached by each
//! embedded backend), and carry no request id: no request was made.

use crate::error::{Error, ErrorCode, ErrorKind, ServiceError, ValidationError};

pub(crate) fn service(status: u16, code: ErrorCode, message: &str) -> Error {
    ErrorKind::Service(ServiceError {
        status,
        code: Some(code),
        message: Some(message.to_owned()),
        request_id: None,
        batch_index: None,
        retry_after: None,
    })
    .into()
}

/// How an embedded store names itself in its errors: with its file, if it
/// has one ("the embedded store file /data/app.redb answered 404 ...").
pub(crate) fn store_name(file: Option<&std::path::Path>) -> String {
    match file {
        Some(path) => format!("the embedded store file {}", path.display()),
        None => "the embedded store (in memory)".to_owned(),
    }
}

/// The same error, attributed to operation `index` of a transaction.
pub(crate) fn at_index(err: Error, index: usize) -> Error {
    match err.kind() {
        ErrorKind::Service(e) => ErrorKind::Service(ServiceError {
            batch_index: Some(index),
            ..e.clone()
        })
        .into(),
        _ => err,
    }
}

pub(crate) fn table_not_found() -> Error {
    service(
        404,
        ErrorCode::TableNotFound,
        "The table specified does not exist.",
    )
}

pub(crate) fn table_exists() -> Error {
    service(
        409,
        ErrorCode::TableAlreadyExists,
        "The table specified already exists.",
    )
}

pub(crate) fn resource_not_found() -> Error {
    service(
        404,
        ErrorCode::ResourceNotFound,
        "The specified resource does not exist.",
    )
}

pub(crate) fn entity_exists() -> Error {
    service(
        409,
        ErrorCode::EntityAlreadyExists,
        "The specified entity already exists.",
    )
}

pub(crate) fn condition_not_met() -> Error {
    service(
        412,
        ErrorCode::UpdateConditionNotSatisfied,
        "The update condition specified in the request was not satisfied.",
    )
}

pub(crate) fn invalid_input(message: &str) -> Error {
    service(400, ErrorCode::InvalidInput, message)
}

/// A rule of the data model broken by a stored entity, answered with the code the
/// service uses for it (400 in every case).
pub(crate) fn from_validation(v: &ValidationError) -> Error {
    let (code, message) = match v {
        ValidationError::KeyTooLong { .. } | ValidationError::KeyForbiddenChar { .. } => {
            (ErrorCode::OutOfRangeInput, "One of the request inputs is out of range.")
        }
        ValidationError::DateTimeOutOfRange { .. } | ValidationError::ValueOutOfRange { .. } => {
            (ErrorCode::OutOfRangeInput, "One of the request inputs is out of range.")
        }
        ValidationError::PropertyName { name, .. } if name.chars().count() > 255 => (
            ErrorCode::PropertyNameTooLong,
            "The property name exceeds the maximum allowed length (255).",
        ),
        ValidationError::PropertyName { .. } => {
            (ErrorCode::PropertyNameInvalid, "The property name is invalid.")
        }
        ValidationError::DuplicateProperty { .. } => (
            ErrorCode::DuplicatePropertiesSpecified,
            "A property is specified more than one time.",
        ),
        ValidationError::TooManyProperties { .. } => (
            ErrorCode::TooManyProperties,
            "The entity contains more properties than allowed. Each entity can include up to 252 properties to store data. Each entity also has 3 system properties.",
        ),
        ValidationError::ValueTooLarge { .. } => (
            ErrorCode::PropertyValueTooLarge,
            "The property value exceeds the maximum allowed size (64KB). If the property value is a string, it is UTF-16 encoded and the maximum number of characters should be 32K or less.",
        ),
        ValidationError::EntityTooLarge { .. } => (
            ErrorCode::EntityTooLarge,
            "The entity is larger than the maximum allowed size (1MB).",
        ),
        _ => (ErrorCode::InvalidInput, "One of the request inputs is not valid."),
    };
    service(400, code, message)
}
