//! [`Continuation`]: where a paged read resumes, as every backend reports it
//! (public as `tablekit::Continuation`).

use std::fmt;
use std::str::FromStr;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::error::{Error, Result, ValidationError};

/// Where a query resumes: the service's `NextPartitionKey` and `NextRowKey`.
///
/// It is opaque: it may name an entity that does not exist. It turns into a
/// string and back (`to_string()` / `parse()`), and is serde-serialisable, so a
/// paging position can be stored and resumed later.
///
/// ```
/// use tablekit::Continuation;
/// let c = Continuation { next_partition_key: "1!8!cDAwMQ--".into(), next_row_key: Some("1!12!MDAwMDAwMDE-".into()) };
/// let text = c.to_string();
/// assert_eq!(text.parse::<Continuation>().unwrap(), c);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Continuation {
    /// The service's `x-ms-continuation-NextPartitionKey`.
    pub next_partition_key: String,
    /// The service's `x-ms-continuation-NextRowKey`, absent in some answers.
    pub next_row_key: Option<String>,
}

const TOKEN: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'!');

impl fmt::Display for Continuation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Both parts percent-encoded (so neither holds a space), joined by a space.
        write!(
            f,
            "{}",
            utf8_percent_encode(&self.next_partition_key, TOKEN)
        )?;
        if let Some(rk) = &self.next_row_key {
            write!(f, " {}", utf8_percent_encode(rk, TOKEN))?;
        }
        Ok(())
    }
}

impl FromStr for Continuation {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = |reason| Error::invalid(ValidationError::Continuation { reason });
        let mut parts = s.split(' ');
        let decode = |p: &str| {
            percent_decode_str(p)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| bad("not UTF-8 after percent-decoding"))
        };
        let pk = parts
            .next()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| bad("empty"))?;
        let next_partition_key = decode(pk)?;
        let next_row_key = parts.next().map(decode).transpose()?;
        if parts.next().is_some() {
            return Err(bad("more than two parts"));
        }
        Ok(Continuation {
            next_partition_key,
            next_row_key,
        })
    }
}
