//! The eight property types of the Table service (the Entity Data Model subset it stores).

use std::fmt::{self, Write as _};

use chrono::{DateTime, Datelike, NaiveDate, Timelike, Utc};
use uuid::Uuid;

use crate::error::{Error, Result};

/// The type of a stored property, as named on the wire (`Edm.Int64`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EdmType {
    /// UTF-16 text of at most 64 KiB.
    String,
    /// Bytes, at most 64 KiB.
    Binary,
    /// `true` or `false`.
    Boolean,
    /// A UTC instant from 1601-01-01 with 100 ns resolution.
    DateTime,
    /// A 64-bit IEEE 754 number, NaN and infinities included.
    Double,
    /// A 128-bit identifier.
    Guid,
    /// A 32-bit signed integer.
    Int32,
    /// A 64-bit signed integer.
    Int64,
}

impl EdmType {
    /// The wire name, such as `Edm.Int64`.
    pub const fn as_str(self) -> &'static str {
        match self {
            EdmType::String => "Edm.String",
            EdmType::Binary => "Edm.Binary",
            EdmType::Boolean => "Edm.Boolean",
            EdmType::DateTime => "Edm.DateTime",
            EdmType::Double => "Edm.Double",
            EdmType::Guid => "Edm.Guid",
            EdmType::Int32 => "Edm.Int32",
            EdmType::Int64 => "Edm.Int64",
        }
    }

    /// Parses a wire name; `None` for types the service does not store.
    pub fn from_wire(s: &str) -> Option<EdmType> {
        Some(match s {
            "Edm.String" => EdmType::String,
            "Edm.Binary" => EdmType::Binary,
            "Edm.Boolean" => EdmType::Boolean,
            "Edm.DateTime" => EdmType::DateTime,
            "Edm.Double" => EdmType::Double,
            "Edm.Guid" => EdmType::Guid,
            "Edm.Int32" => EdmType::Int32,
            "Edm.Int64" => EdmType::Int64,
            _ => return None,
        })
    }
}

impl fmt::Display for EdmType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A typed property value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum EdmValue {
    /// `Edm.String`.
    String(String),
    /// `Edm.Binary`.
    Binary(Vec<u8>),
    /// `Edm.Boolean`.
    Boolean(bool),
    /// `Edm.DateTime`, 100 ns resolution.
    DateTime(DateTime<Utc>),
    /// `Edm.Double`.
    Double(f64),
    /// `Edm.Guid`.
    Guid(Uuid),
    /// `Edm.Int32`.
    Int32(i32),
    /// `Edm.Int64`.
    Int64(i64),
}

/// The value as an OData literal, the form a `$filter` compares with:
/// `'O''Brien'`, `123`, `123L`, `2.5`, `true`,
/// `datetime'2009-05-01T00:00:00.0000000Z'`, `guid'…'`, `X'0a1b'`.
///
/// A literal rather than the bare value, because the type is part of what a
/// value means in the service (`5` and `5L` are different values) and a reader
/// of a log line should see it. NaN and the infinities print as OData's `NaN`,
/// `INF` and `-INF`, which the Table service does not accept in a filter.
///
/// ```
/// use tablekit::EdmValue;
///
/// assert_eq!(EdmValue::from("O'Brien").to_string(), "'O''Brien'");
/// assert_eq!(EdmValue::Int64(5).to_string(), "5L");
/// assert_eq!(EdmValue::Double(2.0).to_string(), "2.0");
/// assert_eq!(EdmValue::Binary(vec![10, 27]).to_string(), "X'0a1b'");
/// ```
impl fmt::Display for EdmValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EdmValue::Double(d) if d.is_nan() => f.write_str("NaN"),
            EdmValue::Double(d) if d.is_infinite() => {
                f.write_str(if *d > 0.0 { "INF" } else { "-INF" })
            }
            value => {
                let mut out = String::new();
                write_literal(&mut out, value);
                f.write_str(&out)
            }
        }
    }
}

/// Appends a literal in OData form: `'O''Brien'`, `123`, `123L`, `2.0`, `true`,
/// `datetime'2020-07-23T21:20:41.6667782Z'`, `guid'…'`, `X'01ff'`.
///
/// Doubles must be finite (the caller checks): NaN and the infinities have no literal.
pub(crate) fn write_literal(out: &mut String, value: &EdmValue) {
    match value {
        EdmValue::String(s) => {
            out.push('\'');
            for ch in s.chars() {
                if ch == '\'' {
                    out.push('\'');
                }
                out.push(ch);
            }
            out.push('\'');
        }
        EdmValue::Int32(i) => {
            let _ = write!(out, "{i}");
        }
        EdmValue::Int64(i) => {
            let _ = write!(out, "{i}L");
        }
        EdmValue::Double(d) => {
            // Debug prints the shortest text that reads back to the same bits, and
            // always with a '.' or an exponent, so it never reads as an integer.
            let _ = write!(out, "{d:?}");
        }
        EdmValue::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        EdmValue::DateTime(dt) => {
            let mut buf = Vec::with_capacity(28);
            write_datetime(&mut buf, dt);
            out.push_str("datetime'");
            out.push_str(std::str::from_utf8(&buf).unwrap_or_default());
            out.push('\'');
        }
        EdmValue::Guid(g) => {
            let _ = write!(out, "guid'{}'", g.hyphenated());
        }
        EdmValue::Binary(b) => {
            out.push_str("X'");
            for byte in b {
                let _ = write!(out, "{byte:02x}");
            }
            out.push('\'');
        }
    }
}

impl EdmValue {
    /// The type of this value.
    pub fn edm_type(&self) -> EdmType {
        match self {
            EdmValue::String(_) => EdmType::String,
            EdmValue::Binary(_) => EdmType::Binary,
            EdmValue::Boolean(_) => EdmType::Boolean,
            EdmValue::DateTime(_) => EdmType::DateTime,
            EdmValue::Double(_) => EdmType::Double,
            EdmValue::Guid(_) => EdmType::Guid,
            EdmValue::Int32(_) => EdmType::Int32,
            EdmValue::Int64(_) => EdmType::Int64,
        }
    }

    /// The string, if this is an `Edm.String`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            EdmValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is an `Edm.Int32`.
    pub fn as_i32(&self) -> Option<i32> {
        match self {
            EdmValue::Int32(v) => Some(*v),
            _ => None,
        }
    }

    /// The integer, if this is an `Edm.Int64` or an `Edm.Int32`.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            EdmValue::Int64(v) => Some(*v),
            EdmValue::Int32(v) => Some(i64::from(*v)),
            _ => None,
        }
    }

    /// The number, if this is an `Edm.Double`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            EdmValue::Double(v) => Some(*v),
            _ => None,
        }
    }

    /// The flag, if this is an `Edm.Boolean`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            EdmValue::Boolean(v) => Some(*v),
            _ => None,
        }
    }

    /// The instant, if this is an `Edm.DateTime`.
    pub fn as_datetime(&self) -> Option<DateTime<Utc>> {
        match self {
            EdmValue::DateTime(v) => Some(*v),
            _ => None,
        }
    }

    /// The identifier, if this is an `Edm.Guid`.
    pub fn as_guid(&self) -> Option<Uuid> {
        match self {
            EdmValue::Guid(v) => Some(*v),
            _ => None,
        }
    }

    /// The bytes, if this is an `Edm.Binary`.
    pub fn as_binary(&self) -> Option<&[u8]> {
        match self {
            EdmValue::Binary(v) => Some(v),
            _ => None,
        }
    }
}

macro_rules! edm_from {
    ($($t:ty => $variant:ident $(as $conv:ty)?),* $(,)?) => {$(
        impl From<$t> for EdmValue {
            fn from(v: $t) -> Self {
                EdmValue::$variant(v $(as $conv)?)
            }
        }
    )*};
}

edm_from! {
    String => String,
    Vec<u8> => Binary,
    bool => Boolean,
    DateTime<Utc> => DateTime,
    f64 => Double,
    Uuid => Guid,
    i32 => Int32,
    i64 => Int64,
    i16 => Int32 as i32,
    i8 => Int32 as i32,
    u16 => Int32 as i32,
    u8 => Int32 as i32,
    u32 => Int64 as i64,
    f32 => Double as f64,
}

impl From<&str> for EdmValue {
    fn from(v: &str) -> Self {
        EdmValue::String(v.to_owned())
    }
}

impl From<&[u8]> for EdmValue {
    fn from(v: &[u8]) -> Self {
        EdmValue::Binary(v.to_vec())
    }
}

/// The earliest instant the service stores: 1601-01-01T00:00:00Z.
pub fn min_datetime() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(1601, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|d| d.and_utc())
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The latest instant the service stores: 9999-12-31T23:59:59.9999999Z.
pub fn max_datetime() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(9999, 12, 31)
        .and_then(|d| d.and_hms_nano_opt(23, 59, 59, 999_999_900))
        .map(|d| d.and_utc())
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Appends `dt` in the service's form: `YYYY-MM-DDTHH:MM:SS.fffffffZ`, always
/// seven fractional digits (100 ns), truncating finer precision.
pub(crate) fn write_datetime(out: &mut Vec<u8>, dt: &DateTime<Utc>) {
    fn push_num(out: &mut Vec<u8>, mut v: u32, width: usize) {
        let start = out.len();
        out.resize(start + width, b'0');
        for i in (0..width).rev() {
            out[start + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    }
    let year = dt.year();
    if (0..=9999).contains(&year) {
        push_num(out, year as u32, 4);
    } else {
        // Out of the service's range; still produce ISO 8601 so validation can report it.
        out.extend_from_slice(format!("{year:+05}").as_bytes());
    }
    out.push(b'-');
    push_num(out, dt.month(), 2);
    out.push(b'-');
    push_num(out, dt.day(), 2);
    out.push(b'T');
    push_num(out, dt.hour(), 2);
    out.push(b':');
    push_num(out, dt.minute(), 2);
    out.push(b':');
    push_num(out, dt.second().min(59), 2);
    out.push(b'.');
    // A leap second (nanosecond >= 1e9) is folded into the last 100 ns of the second.
    let ticks = (dt.nanosecond().min(999_999_999)) / 100;
    push_num(out, ticks, 7);
    out.push(b'Z');
}

/// Formats `dt` in the service's form with seven fractional digits.
pub fn format_datetime(dt: &DateTime<Utc>) -> String {
    let mut v = Vec::with_capacity(28);
    write_datetime(&mut v, dt);
    // write_datetime only writes ASCII.
    String::from_utf8(v).unwrap_or_default()
}

/// Parses an ISO 8601 / RFC 3339 instant as the service writes it (any number of
/// fractional digits, `Z` or an offset), normalised to UTC.
pub fn parse_datetime(s: &str) -> Result<DateTime<Utc>> {
    parse_datetime_text(s)
        .map_err(|e| Error::decode_caused_by(format!("{s:?} is not an ISO 8601 date and time"), e))
}

/// [`parse_datetime`] with chrono's error, for callers that name the property.
pub(crate) fn parse_datetime_text(
    s: &str,
) -> std::result::Result<DateTime<Utc>, chrono::ParseError> {
    if let Some(dt) = parse_service_datetime(s.as_bytes()) {
        return Ok(dt);
    }
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .or_else(|e| {
            // Some writers omit the zone; the service treats such values as UTC.
            // The year has four digits, as in RFC 3339: chrono's `%Y` also takes
            // a sign and any width (`-070-…`), which prints back (`-0070-…`) as
            // text no parser here reads.
            let four_digit_year = s
                .as_bytes()
                .get(..5)
                .is_some_and(|b| b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-');
            if !four_digit_year {
                return Err(e);
            }
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").map(|d| d.and_utc())
        })
}

/// The form the service writes, `YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z`, parsed without
/// the general RFC 3339 machinery: every DateTime property and every Timestamp
/// of a query page comes this way. `None` sends the text to the general parser.
fn parse_service_datetime(b: &[u8]) -> Option<DateTime<Utc>> {
    fn num(b: &[u8]) -> Option<u32> {
        b.iter().try_fold(0u32, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
        })
    }
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (rest, zone) = b[19..].split_at(b.len() - 20);
    if zone != b"Z" {
        return None;
    }
    let nanos = match rest {
        [] => 0,
        [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
            num(digits)? * 10u32.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    let date = NaiveDate::from_ymd_opt(num(&b[0..4])? as i32, num(&b[5..7])?, num(&b[8..10])?)?;
    let time = chrono::NaiveTime::from_hms_nano_opt(
        num(&b[11..13])?,
        num(&b[14..16])?,
        num(&b[17..19])?,
        nanos,
    )?;
    Some(date.and_time(time).and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `odata_literal` fuzz target
    /// (fuzz/regressions/odata_literal/negative-year-datetime).
    #[test]
    fn a_zoneless_datetime_needs_a_four_digit_year() {
        for refused in [
            "-070-07-23T21:20:4",
            "070-07-23T21:20:04",
            "+2020-07-23T21:20:04",
            "12020-07-23T21:20:04",
        ] {
            assert!(parse_datetime(refused).is_err(), "{refused}");
        }
        let t = parse_datetime("2020-07-23T21:20:4").unwrap();
        assert_eq!(parse_datetime(&format_datetime(&t)).unwrap(), t);
    }

    #[test]
    fn display_is_the_odata_literal_of_every_type() {
        let when = parse_datetime("2009-05-01T00:00:00Z").unwrap();
        let id = Uuid::parse_str("01234567-89ab-cdef-0123-456789abcdef").unwrap();
        let cases = [
            (EdmValue::String("it's".into()), "'it''s'"),
            (EdmValue::Int32(-7), "-7"),
            (EdmValue::Int64(9_000_000_000), "9000000000L"),
            (EdmValue::Double(2.5), "2.5"),
            (EdmValue::Double(3.0), "3.0"),
            (EdmValue::Double(f64::NAN), "NaN"),
            (EdmValue::Double(f64::INFINITY), "INF"),
            (EdmValue::Double(f64::NEG_INFINITY), "-INF"),
            (EdmValue::Boolean(false), "false"),
            (
                EdmValue::DateTime(when),
                "datetime'2009-05-01T00:00:00.0000000Z'",
            ),
            (
                EdmValue::Guid(id),
                "guid'01234567-89ab-cdef-0123-456789abcdef'",
            ),
            (EdmValue::Binary(vec![0, 255]), "X'00ff'"),
        ];
        for (value, text) in cases {
            assert_eq!(value.to_string(), text, "{value:?}");
        }
    }

    #[test]
    fn a_bad_datetime_keeps_chronos_error_as_source() {
        let e = parse_datetime("2024-13-45T99:00:00Z").unwrap_err();
        let source = std::error::Error::source(&e).expect("chrono's error is kept");
        assert!(source.is::<chrono::ParseError>(), "{source:?}");
        assert!(!e.to_string().contains(&source.to_string()), "{e}");
    }

    #[test]
    fn the_fast_path_agrees_with_rfc3339() {
        for s in [
            "2020-07-23T21:20:41.6667782Z",
            "2020-07-23T21:20:41Z",
            "2020-07-23T21:20:41.1Z",
            "2020-07-23T21:20:41.123456789Z",
            "1601-01-01T00:00:00.0000000Z",
            "9999-12-31T23:59:59.9999999Z",
            "2024-02-29T12:00:00Z",
        ] {
            let fast = parse_service_datetime(s.as_bytes()).unwrap();
            let slow = DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
            assert_eq!(fast, slow, "{s}");
        }
        for s in [
            "2020-07-23T21:20:41+02:00",
            "2020-07-23 21:20:41Z",
            "2023-02-29T12:00:00Z",
            "2020-07-23T21:20:61Z",
            "2020-07-23T21:20:41.Z",
            "2020-07-23T21:20:41.1234567890Z",
            "20x0-07-23T21:20:41Z",
        ] {
            assert_eq!(parse_service_datetime(s.as_bytes()), None, "{s}");
        }
        // Offsets still parse, through the general path.
        assert!(parse_datetime("2020-07-23T21:20:41+02:00").is_ok());
    }

    #[test]
    fn datetime_has_seven_fraction_digits_and_z() {
        let dt = parse_datetime("2020-07-23T21:20:41.6667782Z").unwrap();
        assert_eq!(format_datetime(&dt), "2020-07-23T21:20:41.6667782Z");
        let whole = parse_datetime("2009-05-01T00:00:00Z").unwrap();
        assert_eq!(format_datetime(&whole), "2009-05-01T00:00:00.0000000Z");
    }

    #[test]
    fn datetime_parse_accepts_offsets_and_missing_zone() {
        let a = parse_datetime("2020-01-01T02:00:00+02:00").unwrap();
        let b = parse_datetime("2020-01-01T00:00:00").unwrap();
        assert_eq!(a, b);
        assert!(parse_datetime("yesterday").is_err());
    }

    #[test]
    fn min_datetime_is_1601() {
        assert_eq!(
            format_datetime(&min_datetime()),
            "1601-01-01T00:00:00.0000000Z"
        );
    }

    #[test]
    fn edm_type_wire_names_round_trip() {
        for t in [
            EdmType::String,
            EdmType::Binary,
            EdmType::Boolean,
            EdmType::DateTime,
            EdmType::Double,
            EdmType::Guid,
            EdmType::Int32,
            EdmType::Int64,
        ] {
            assert_eq!(EdmType::from_wire(t.as_str()), Some(t));
        }
        assert_eq!(EdmType::from_wire("Edm.Decimal"), None);
    }
}
