//! [`SasIpRange`]: the addresses a SAS may be used from (`sip`).

use std::net::Ipv4Addr;

use crate::error::{Error, Result};

/// The IPv4 address, or inclusive range of addresses, a SAS may be used from
/// (`sip`); requests from elsewhere are refused by the service.
///
/// ```
/// use std::net::Ipv4Addr;
/// use tablekit::account::SasIpRange;
///
/// let office = SasIpRange::range(Ipv4Addr::new(168, 1, 5, 60), Ipv4Addr::new(168, 1, 5, 70));
/// let one = SasIpRange::single(Ipv4Addr::new(168, 1, 5, 65));
/// assert_ne!(office, one);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SasIpRange {
    start: Ipv4Addr,
    end: Option<Ipv4Addr>,
}

impl SasIpRange {
    /// One address (`sip=168.1.5.65`).
    pub fn single(address: Ipv4Addr) -> Self {
        SasIpRange {
            start: address,
            end: None,
        }
    }

    /// The addresses from `start` to `end`, both included
    /// (`sip=168.1.5.60-168.1.5.70`). Signing refuses a range whose start is
    /// after its end.
    pub fn range(start: Ipv4Addr, end: Ipv4Addr) -> Self {
        SasIpRange {
            start,
            end: Some(end),
        }
    }

    /// The `sip` value, or a configuration error for a backwards range.
    pub(super) fn check(self) -> Result<String> {
        match self.end {
            None => Ok(self.start.to_string()),
            Some(end) if end < self.start => Err(Error::config(format!(
                "the SAS IP range {}-{end} ends before it starts",
                self.start
            ))),
            Some(end) if end == self.start => Ok(self.start.to_string()),
            Some(end) => Ok(format!("{}-{end}", self.start)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sip_is_one_address_or_an_inclusive_range() {
        let a = Ipv4Addr::new(168, 1, 5, 60);
        let b = Ipv4Addr::new(168, 1, 5, 70);
        assert_eq!(SasIpRange::single(a).check().unwrap(), "168.1.5.60");
        assert_eq!(
            SasIpRange::range(a, b).check().unwrap(),
            "168.1.5.60-168.1.5.70"
        );
        assert_eq!(SasIpRange::range(a, a).check().unwrap(), "168.1.5.60");
        let backwards = SasIpRange::range(b, a).check().unwrap_err().to_string();
        assert!(backwards.contains("ends before it starts"), "{backwards}");
    }
}
