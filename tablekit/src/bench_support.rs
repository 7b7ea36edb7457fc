//! Entry points the benchmarks (and a few tests) call to time one layer on its
//! own: the page decoder, the SharedKey signature. Not a public API: hidden
//! from the docs, and free to change in any release.

use crate::error::Result;

/// Decodes a query response body (`{"value":[...]}`) into `T`s.
pub fn decode_page<T: crate::TableEntity>(body: &[u8]) -> Result<Vec<T>> {
    let mut out = Vec::new();
    crate::codec::read::decode_page(body, &mut out)?;
    Ok(out)
}

/// The `Authorization` header value of a SharedKey-signed request.
pub fn sign_shared_key(
    account: &str,
    key: &crate::AccountKey,
    method: &str,
    content_type: &str,
    date: &str,
    path: &str,
) -> String {
    crate::backend::http::auth::shared_key(
        account,
        key,
        &crate::backend::http::auth::StringToSign {
            method,
            content_md5: "",
            content_type,
            date,
            path,
            comp: None,
        },
    )
}
