//! Writers that pass each property on (renamed, or to two writers at once):
//! the eight [`PropertyWriter`] methods are written once, here, as calls of
//! [`Forward::forward`] with the value as a [`PropertyArg`].

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::PropertyWriter;
use crate::error::Result;

/// The value of one [`PropertyWriter`] call, borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PropertyArg<'a> {
    String(&'a str),
    Binary(&'a [u8]),
    Boolean(bool),
    DateTime(&'a DateTime<Utc>),
    Double(f64),
    Guid(&'a Uuid),
    Int32(i32),
    Int64(i64),
}

impl PropertyArg<'_> {
    /// Makes the call this value came from on `out`.
    #[inline]
    pub(crate) fn write_to<W: PropertyWriter + ?Sized>(
        self,
        out: &mut W,
        name: &str,
    ) -> Result<()> {
        match self {
            PropertyArg::String(v) => out.string(name, v),
            PropertyArg::Binary(v) => out.binary(name, v),
            PropertyArg::Boolean(v) => out.boolean(name, v),
            PropertyArg::DateTime(v) => out.datetime(name, v),
            PropertyArg::Double(v) => out.double(name, v),
            PropertyArg::Guid(v) => out.guid(name, v),
            PropertyArg::Int32(v) => out.int32(name, v),
            PropertyArg::Int64(v) => out.int64(name, v),
        }
    }
}

/// A writer that handles every property the same way, whatever its type.
/// Its `PropertyWriter` impl is [`forward_property_writer!`].
pub(crate) trait Forward {
    /// Passes one property on.
    fn forward(&mut self, name: &str, value: PropertyArg<'_>) -> Result<()>;
}

/// The body of `impl PropertyWriter for T` where `T: Forward`: each method
/// calls `Forward::forward` with its value.
macro_rules! forward_property_writer {
    () => {
        $crate::entity::forward_property_writer!(@methods
            string(&str) => String,
            binary(&[u8]) => Binary,
            boolean(bool) => Boolean,
            datetime(&::chrono::DateTime<::chrono::Utc>) => DateTime,
            double(f64) => Double,
            guid(&::uuid::Uuid) => Guid,
            int32(i32) => Int32,
            int64(i64) => Int64
        );
    };
    (@methods $($m:ident($t:ty) => $v:ident),*) => {$(
        #[inline]
        fn $m(&mut self, name: &str, value: $t) -> $crate::error::Result<()> {
            $crate::entity::Forward::forward(self, name, $crate::entity::PropertyArg::$v(value))
        }
    )*};
}
pub(crate) use forward_property_writer;
