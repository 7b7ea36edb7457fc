//! Shared Key and Shared Key Lite: the string to sign rebuilt from the
//! request with the client's own builders, the signature compared in
//! constant time.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use http::request::Parts;

use super::super::{AccountState, Failure, Service};
use super::Access;
use crate::backend::http::signer::{table_string_to_sign, StorageRequest, StringToSign};

/// How far a request's date may be from now.
const MAX_SKEW_MINUTES: i64 = 15;

/// Checks `credentials` (`account:signature`) of a Shared Key (`lite`:
/// Shared Key Lite) `Authorization` header.
pub(super) fn verify(
    account: &AccountState,
    service: Service,
    parts: &Parts,
    query: &[(String, String)],
    lite: bool,
    credentials: &str,
    now: DateTime<Utc>,
) -> Result<Access, Failure> {
    let (name, signature) = credentials.trim().rsplit_once(':').ok_or_else(|| {
        Failure::auth("The Authorization header is not of the form `account:signature`.")
    })?;
    if name != account.name {
        return Err(Failure::auth(format!(
            "The account in the Authorization header, {}, is not the account of the request, {}.",
            name.chars().take(64).collect::<String>(),
            account.name
        )));
    }
    let text = |name: &str| -> &str {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let ms_date = text("x-ms-date");
    let date = text("date");
    let signed_date = if ms_date.is_empty() { date } else { ms_date };
    if signed_date.is_empty() {
        return Err(Failure::auth("Request date header not specified"));
    }
    check_date(signed_date, now)?;
    let string_to_sign_for = |path: &str| match service {
        Service::Table => table_string_to_sign(
            &account.name,
            &StringToSign {
                method: parts.method.as_str(),
                content_md5: text("content-md5"),
                content_type: text("content-type"),
                date: signed_date,
                path,
                comp: query
                    .iter()
                    .find(|(k, _)| k == "comp")
                    .map(|(_, v)| v.as_str()),
            },
            lite,
        ),
        Service::Blob | Service::Queue => {
            let ms_headers: Vec<(&str, &str)> = parts
                .headers
                .iter()
                .filter(|(n, _)| n.as_str().starts_with("x-ms-"))
                .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
                .collect();
            let query: Vec<(&str, &str)> = query
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let request = StorageRequest {
                method: parts.method.as_str(),
                content_encoding: text("content-encoding"),
                content_language: text("content-language"),
                content_length: text("content-length").parse().unwrap_or(0),
                content_md5: text("content-md5"),
                content_type: text("content-type"),
                if_modified_since: text("if-modified-since"),
                if_match: text("if-match"),
                if_none_match: text("if-none-match"),
                if_unmodified_since: text("if-unmodified-since"),
                range: text("range"),
                // The Date line is empty when x-ms-date is sent.
                date: if ms_date.is_empty() { date } else { "" },
                ms_headers: &ms_headers,
                path,
                query: &query,
            };
            if lite {
                request.string_to_sign_lite(&account.name)
            } else {
                request.string_to_sign(&account.name)
            }
        }
    };
    let string_to_sign = string_to_sign_for(parts.uri.path());
    let signature_bytes = BASE64.decode(signature).ok();
    let signed = |text: &str| {
        signature_bytes
            .as_ref()
            .is_some_and(|sig| account.key.verify_hmac_sha256(text, sig))
    };
    // A request to the secondary location of a path-style endpoint
    // (`/<account>-secondary/...`, where clients ask for stats) may be signed
    // over the primary's path: the Python SDKs sign the request, then put
    // `/<account>-secondary` before its path (`/<account>/`). Azure's
    // secondary is another host, whose path is the same; Azurite accepts
    // these, and so does the server.
    let primary_path = parts
        .uri
        .path()
        .strip_prefix(&format!("/{}-secondary", account.name))
        .filter(|rest| rest.starts_with('/'));
    let matches =
        signed(&string_to_sign) || primary_path.is_some_and(|p| signed(&string_to_sign_for(p)));
    if !matches {
        return Err(Failure::auth(format!(
            "The MAC signature found in the HTTP request '{}' is not the same as any computed \
             signature. Server used following string to sign: '{string_to_sign}'.",
            signature.chars().take(88).collect::<String>()
        )));
    }
    Ok(Access::Full)
}

/// The request's date must be an RFC 1123 date within 15 minutes of now.
fn check_date(value: &str, now: DateTime<Utc>) -> Result<(), Failure> {
    let date = DateTime::parse_from_rfc2822(value)
        .map_err(|_| {
            Failure::auth(format!(
                "The Date header in the request is incorrect: '{}'.",
                value.chars().take(64).collect::<String>()
            ))
        })?
        .with_timezone(&Utc);
    let skew = chrono::Duration::minutes(MAX_SKEW_MINUTES);
    if date < now - skew {
        return Err(Failure::auth(format!(
            "Request date header too old: '{value}'"
        )));
    }
    if date > now + skew {
        return Err(Failure::auth(format!(
            "Request date header too far in the future: '{value}'"
        )));
    }
    Ok(())
}
