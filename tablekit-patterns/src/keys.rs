//! Encodings of times and numbers in string keys, so that string order is
//! the order the application wants.

use chrono::{DateTime, TimeZone, Utc};

/// .NET ticks (100 ns since 0001-01-01T00:00:00) of `DateTime.MaxValue`,
/// 9999-12-31T23:59:59.9999999.
pub const MAX_TICKS: i64 = 3_155_378_975_999_999_999;

/// Seconds from 0001-01-01 to the Unix epoch.
const EPOCH_SECONDS: i64 = 62_135_596_800;

/// .NET ticks of an instant: 100 ns units since 0001-01-01T00:00:00Z.
pub fn ticks(t: DateTime<Utc>) -> i64 {
    (t.timestamp() + EPOCH_SECONDS) * 10_000_000 + i64::from(t.timestamp_subsec_nanos() / 100)
}

/// The instant of a tick count, if it is one chrono can represent.
pub fn from_ticks(ticks: i64) -> Option<DateTime<Utc>> {
    let secs = ticks.div_euclid(10_000_000) - EPOCH_SECONDS;
    let nanos = (ticks.rem_euclid(10_000_000) * 100) as u32;
    Utc.timestamp_opt(secs, nanos).single()
}

/// `MaxTicks - ticks(t)` as 19 zero-padded digits: newer instants sort first.
/// Fixed width matters: from 6831-02-15T14:13:20Z the value has 18 digits.
pub fn inverted_ticks(t: DateTime<Utc>) -> String {
    format!("{:019}", MAX_TICKS - ticks(t))
}

/// The instant an [`inverted_ticks`] key encodes; `None` if it is not one.
pub fn from_inverted_ticks(key: &str) -> Option<DateTime<Utc>> {
    if key.len() != 19 || !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let inverted: i64 = key.parse().ok()?;
    from_ticks(MAX_TICKS.checked_sub(inverted)?)
}

/// `n` as zero-padded decimal digits of at least `width` characters, so that
/// string order is numeric order for numbers of up to `width` digits.
pub fn pad_u64(n: u64, width: usize) -> String {
    format!("{n:0width$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }

    #[test]
    fn the_seed_vectors() {
        assert_eq!(
            inverted_ticks(at(2008, 10, 1, 10, 0, 0)),
            "2521794455999999999"
        );
        assert_eq!(
            inverted_ticks(at(2008, 10, 2, 10, 0, 0)),
            "2521793591999999999"
        );
        assert_eq!(
            inverted_ticks(at(2008, 7, 3, 0, 0, 0)),
            "2521872575999999999"
        );
        assert_eq!(
            inverted_ticks(at(2008, 7, 4, 0, 0, 0)),
            "2521871711999999999"
        );
        assert_eq!(
            inverted_ticks(at(2008, 10, 3, 0, 0, 0)),
            "2521793087999999999"
        );
        assert_eq!(
            inverted_ticks(at(2008, 10, 4, 0, 0, 0)),
            "2521792223999999999"
        );
        assert_eq!(
            inverted_ticks(at(6831, 2, 15, 14, 13, 20)),
            "0999999999999999999"
        );
        assert_eq!(format!("{:019}", 0), "0000000000000000000");
        assert_eq!(format!("{MAX_TICKS:019}"), "3155378975999999999");
    }

    #[test]
    fn ticks_round_trip_with_100ns_precision() {
        let t = Utc.timestamp_opt(1_600_000_000, 123_456_700).unwrap();
        assert_eq!(from_ticks(ticks(t)), Some(t));
        assert_eq!(from_inverted_ticks(&inverted_ticks(t)), Some(t));
        assert_eq!(from_inverted_ticks("123"), None);
        assert_eq!(from_inverted_ticks("25217944559999999x9"), None);
    }

    #[test]
    fn newer_sorts_first_and_padding_keeps_numeric_order() {
        let old = at(2008, 10, 1, 10, 0, 0);
        let new = at(2009, 1, 1, 0, 0, 0);
        assert!(inverted_ticks(new) < inverted_ticks(old));
        assert!(pad_u64(92, 5) < pad_u64(10_000, 5));
        assert_eq!(pad_u64(223, 6), "000223");
    }
}
