//! Filters written as OData text, and the support of the `filter!` and `odata!` macros.

use std::fmt;

use chrono::{DateTime, FixedOffset, Utc};
use uuid::Uuid;

use super::typed::{Filter, FilterValue};
use crate::columns::{Column, DynColumn};
use crate::edm::{write_literal, EdmValue};
use crate::entity::DynamicEntity;

/// A filter in OData text, as given to [`Query::filter_raw`](crate::table::Query::filter_raw):
/// a string, or what `odata!` builds (whose values are escaped literals).
/// It is parsed before any request is sent.
#[derive(Clone, PartialEq, Eq)]
pub struct RawFilter(pub(crate) Result<String, String>);

impl RawFilter {
    /// The text, or why it could not be built (a value without a literal).
    pub fn text(&self) -> Result<&str, &str> {
        self.0.as_deref().map_err(String::as_str)
    }
}

impl fmt::Debug for RawFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Ok(t) => write!(f, "RawFilter({t:?})"),
            Err(e) => write!(f, "RawFilter(invalid: {e})"),
        }
    }
}

/// The filter text as given or built; a filter that could not be built (a
/// value with no OData literal) prints why instead (`invalid filter: …`).
///
/// ```
/// let (name, age) = ("O'Brien", 30);
/// let f = tablekit::odata!("LastName eq {name} and Age ge {age}");
/// assert_eq!(f.to_string(), "LastName eq 'O''Brien' and Age ge 30");
/// ```
impl fmt::Display for RawFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Ok(t) => f.write_str(t),
            Err(e) => write!(f, "invalid filter: {e}"),
        }
    }
}

impl From<String> for RawFilter {
    fn from(s: String) -> Self {
        RawFilter(Ok(s))
    }
}

impl From<&str> for RawFilter {
    fn from(s: &str) -> Self {
        RawFilter(Ok(s.to_owned()))
    }
}

impl From<&String> for RawFilter {
    fn from(s: &String) -> Self {
        RawFilter(Ok(s.clone()))
    }
}

/// Something that stands as a condition in `filter!`: a filter, or a Boolean column.
pub trait Condition<E> {
    /// The condition as a filter.
    fn into_filter(self) -> Filter<E>;
}

impl<E> Condition<E> for Filter<E> {
    fn into_filter(self) -> Filter<E> {
        self
    }
}

impl<E> Condition<E> for Column<E, bool> {
    fn into_filter(self) -> Filter<E> {
        self.into()
    }
}

impl<E> Condition<E> for &Column<E, bool> {
    fn into_filter(self) -> Filter<E> {
        self.into()
    }
}

impl Condition<DynamicEntity> for DynColumn<bool> {
    fn into_filter(self) -> Filter<DynamicEntity> {
        self.eq(true)
    }
}

/// `a && b` in `filter!`.
pub fn filter_and<E, A: Condition<E>, B: Condition<E>>(a: A, b: B) -> Filter<E> {
    a.into_filter().and(b.into_filter())
}

/// `a || b` in `filter!`.
pub fn filter_or<E, A: Condition<E>, B: Condition<E>>(a: A, b: B) -> Filter<E> {
    a.into_filter().or(b.into_filter())
}

/// `!a` in `filter!`.
pub fn filter_not<E, A: Condition<E>>(a: A) -> Filter<E> {
    a.into_filter().not()
}

/// A Boolean column standing alone in `filter!`.
pub fn filter_of<E, A: Condition<E>>(a: A) -> Filter<E> {
    a.into_filter()
}

/// A value interpolated by `odata!`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be written as an OData literal",
    label = "no OData literal for this value",
    note = "odata! takes strings, integers, finite floats, booleans, DateTime, Uuid and bytes",
    note = "an `Option` is not a value: the service has no null. Interpolate the value inside, and test absence with `e.field == None` in `filter!` or `column.is_none()`"
)]
pub trait ODataValue {
    /// The value as a typed literal, or why it has none.
    fn odata(&self) -> Result<EdmValue, String>;
}

impl ODataValue for str {
    fn odata(&self) -> Result<EdmValue, String> {
        Ok(EdmValue::String(self.to_owned()))
    }
}

impl<T: ODataValue + ?Sized> ODataValue for &T {
    fn odata(&self) -> Result<EdmValue, String> {
        (**self).odata()
    }
}

macro_rules! odata_value_via_filter_value {
    ($($t:ty),*) => {$(
        impl ODataValue for $t {
            fn odata(&self) -> Result<EdmValue, String> {
                FilterValue::to_edm(self)
            }
        }
    )*};
}

odata_value_via_filter_value!(
    String,
    bool,
    i8,
    i16,
    i32,
    u8,
    u16,
    i64,
    u32,
    u64,
    f32,
    f64,
    DateTime<Utc>,
    DateTime<FixedOffset>,
    Uuid,
    Vec<u8>,
    bytes::Bytes
);

/// A piece of an `odata!` template.
#[derive(Debug)]
pub enum ODataPiece {
    /// Text written as is.
    Text(&'static str),
    /// A value written as a literal.
    Value(Result<EdmValue, String>),
}

/// The literal of an `odata!` argument.
pub fn odata_value<V: ODataValue + ?Sized>(v: &V) -> Result<EdmValue, String> {
    v.odata()
}

/// Joins an `odata!` template's pieces into a filter text.
pub fn odata_build(pieces: &[ODataPiece]) -> RawFilter {
    let mut out = String::new();
    for p in pieces {
        match p {
            ODataPiece::Text(t) => out.push_str(t),
            ODataPiece::Value(Ok(v)) => write_literal(&mut out, v),
            ODataPiece::Value(Err(e)) => return RawFilter(Err(e.clone())),
        }
    }
    RawFilter(Ok(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odata_build_escapes_values() {
        let name = "O'Brien";
        let f = odata_build(&[
            ODataPiece::Text("LastName eq "),
            ODataPiece::Value(odata_value(&name)),
            ODataPiece::Text(" and Age gt "),
            ODataPiece::Value(odata_value(&30)),
            ODataPiece::Text(" and Views lt "),
            ODataPiece::Value(odata_value(&9_000_000_000_i64)),
        ]);
        assert_eq!(
            f.text(),
            Ok("LastName eq 'O''Brien' and Age gt 30 and Views lt 9000000000L")
        );
        let bad = odata_build(&[ODataPiece::Value(odata_value(&f64::NAN))]);
        assert!(bad.text().is_err());
    }

    #[test]
    fn display_is_the_text_or_why_there_is_none() {
        let f = odata_build(&[
            ODataPiece::Text("Name eq "),
            ODataPiece::Value(odata_value(&"a'b")),
        ]);
        assert_eq!(f.to_string(), "Name eq 'a''b'");
        assert_eq!(
            RawFilter::from("Rating gt 3".to_owned()).to_string(),
            "Rating gt 3"
        );
        let bad = odata_build(&[ODataPiece::Value(odata_value(&f64::INFINITY))]);
        assert_eq!(
            bad.to_string(),
            format!("invalid filter: {}", bad.text().unwrap_err())
        );
    }
}
