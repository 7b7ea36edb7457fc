//! The error codes of the storage services, as [`ErrorCode`].

use std::fmt;

macro_rules! error_codes {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// An error code of the storage services (the `code` of an error answer),
        /// as documented for the Table, Queue and Blob services; any other code
        /// is kept as [`ErrorCode::Other`].
        ///
        /// Match on it rather than on strings: a typo in a variant name does not compile.
        ///
        /// ```
        /// use tablekit::error::ErrorCode;
        /// assert_eq!(ErrorCode::from("EntityAlreadyExists"), ErrorCode::EntityAlreadyExists);
        /// assert_eq!(ErrorCode::EntityAlreadyExists.as_str(), "EntityAlreadyExists");
        /// assert_eq!(ErrorCode::from("SomethingNew"), ErrorCode::Other("SomethingNew".into()));
        /// ```
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($(#[$doc])* $name,)*
            /// A code this version of tablekit does not name.
            Other(String),
        }

        impl ErrorCode {
            /// The code as the service spells it.
            pub fn as_str(&self) -> &str {
                match self {
                    $(ErrorCode::$name => stringify!($name),)*
                    ErrorCode::Other(s) => s,
                }
            }
        }

        impl From<&str> for ErrorCode {
            fn from(code: &str) -> Self {
                match code {
                    $(stringify!($name) => ErrorCode::$name,)*
                    other => ErrorCode::Other(other.to_owned()),
                }
            }
        }
    };
}

error_codes! {
    // Common to the storage services.
    /// The account is disabled.
    AccountIsDisabled,
    /// The request's signature or credentials were not accepted.
    AuthenticationFailed,
    /// The credentials do not allow this operation.
    AuthorizationFailure,
    /// A conditional header (`If-Match`, `If-None-Match`, ...) was not satisfied.
    ConditionNotMet,
    /// The service failed internally; retrying may succeed.
    InternalError,
    /// The authentication information is malformed.
    InvalidAuthenticationInfo,
    /// A header value is malformed.
    InvalidHeaderValue,
    /// The request body or one of its values is invalid.
    InvalidInput,
    /// A query parameter value is invalid.
    InvalidQueryParameterValue,
    /// A resource (table, queue, container, blob) name is invalid.
    InvalidResourceName,
    /// The request URI is invalid.
    InvalidUri,
    /// The XML of the request body is invalid.
    InvalidXmlDocument,
    /// A required header is missing.
    MissingRequiredHeader,
    /// The operation did not finish in the allowed time.
    OperationTimedOut,
    /// A value is outside its allowed range.
    OutOfRangeInput,
    /// A query parameter value is outside its allowed range.
    OutOfRangeQueryParameterValue,
    /// The request body is too large.
    RequestBodyTooLarge,
    /// The resource already exists.
    ResourceAlreadyExists,
    /// The resource (for tables: the entity) does not exist.
    ResourceNotFound,
    /// The service is busy: slow down and retry.
    ServerBusy,
    /// The HTTP verb is not supported here.
    UnsupportedHttpVerb,
    // The Table service.
    /// Two properties of one entity have the same name.
    DuplicatePropertiesSpecified,
    /// An entity with this PartitionKey and RowKey already exists.
    EntityAlreadyExists,
    /// The entity does not exist.
    EntityNotFound,
    /// The entity is larger than the service stores.
    EntityTooLarge,
    /// A transaction names the same entity twice.
    InvalidDuplicateRow,
    /// A value does not match its declared type.
    InvalidValueType,
    /// The JSON format asked for is not supported.
    JsonFormatNotSupported,
    /// The operation is not allowed on this resource.
    MethodNotAllowed,
    /// The operation is not implemented.
    NotImplemented,
    /// A property has no value.
    PropertiesNeedValue,
    /// A property name is invalid.
    PropertyNameInvalid,
    /// A property name is too long.
    PropertyNameTooLong,
    /// A property value is too large.
    PropertyValueTooLarge,
    /// A table with this name already exists.
    TableAlreadyExists,
    /// The table is being deleted; its name is not free yet.
    TableBeingDeleted,
    /// The table does not exist.
    TableNotFound,
    /// The entity has more properties than the service stores.
    TooManyProperties,
    /// An ETag condition failed: the entity changed since it was read.
    UpdateConditionNotSatisfied,
    // The Queue service.
    /// A message is larger than the service stores.
    MessageTooLarge,
    /// The message does not exist (or its visibility timeout is over).
    MessageNotFound,
    /// The pop receipt does not match the message's latest one.
    PopReceiptMismatch,
    /// A queue with this name already exists.
    QueueAlreadyExists,
    /// The queue is being deleted.
    QueueBeingDeleted,
    /// The queue does not exist.
    QueueNotFound,
    // The Blob service.
    /// A blob with this name already exists.
    BlobAlreadyExists,
    /// The blob does not exist.
    BlobNotFound,
    /// A container with this name already exists.
    ContainerAlreadyExists,
    /// The container is being deleted.
    ContainerBeingDeleted,
    /// The container does not exist.
    ContainerNotFound,
    /// A block list names a block that was not uploaded.
    InvalidBlockList,
    /// A range is outside the blob.
    InvalidRange,
    // Blob and container leases: see `Error::is_lease_held` and `Error::is_lease_lost`.
    /// An acquire met a lease held by somebody else.
    LeaseAlreadyPresent,
    /// A write named no lease, but one is held.
    LeaseIdMissing,
    /// A blob write named a lease other than the one held.
    LeaseIdMismatchWithBlobOperation,
    /// A container call named a lease other than the one held.
    LeaseIdMismatchWithContainerOperation,
    /// A renew, change or release named a lease other than the one held (or none is).
    LeaseIdMismatchWithLeaseOperation,
    /// An acquire met a lease being broken.
    LeaseIsBreakingAndCannotBeAcquired,
    /// A change met its lease being broken.
    LeaseIsBreakingAndCannotBeChanged,
    /// A renew met its lease broken.
    LeaseIsBrokenAndCannotBeRenewed,
    /// The lease named has expired.
    LeaseLost,
    /// A blob write named a lease, but none is held.
    LeaseNotPresentWithBlobOperation,
    /// A container call named a lease, but none is held.
    LeaseNotPresentWithContainerOperation,
    /// A change or break met no lease.
    LeaseNotPresentWithLeaseOperation,
    /// The service could not read a copy's source.
    CannotVerifyCopySource,
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<String> for ErrorCode {
    fn from(code: String) -> Self {
        match ErrorCode::from(code.as_str()) {
            ErrorCode::Other(_) => ErrorCode::Other(code),
            known => known,
        }
    }
}

impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
