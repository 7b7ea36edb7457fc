//! One request as a service's handler sees it ([`Ctx`]).

use bytes::Bytes;
use http::request::Parts;

use super::auth::Access;
use super::state::AccountState;

/// One request, as a service's handler sees it: authenticated, its body
/// read, its path split.
pub(crate) struct Ctx<'a> {
    pub(crate) account: &'a AccountState,
    pub(crate) access: &'a Access,
    pub(crate) parts: &'a Parts,
    /// The path after `/<account>`, percent-decoded, without its leading
    /// `/` (`Tables`, `mytable(PartitionKey='a',RowKey='b')`, `queue/messages`,
    /// `container/dir/blob`).
    pub(crate) path: &'a str,
    /// The query string's parameters, percent-decoded, in order.
    pub(crate) query: &'a [(String, String)],
    pub(crate) body: Bytes,
    pub(crate) request_id: &'a str,
}

impl Ctx<'_> {
    /// The first value of the query parameter `name` (case-sensitive, as the
    /// service's are).
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The request header `name` as text, if present and visible ASCII.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.parts.headers.get(name).and_then(|v| v.to_str().ok())
    }
}
