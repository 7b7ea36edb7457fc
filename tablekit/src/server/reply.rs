//! Answers: the service's error answers ([`Failure`]) and the small builders
//! of successful ones, shared by the three services.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::{HeaderValue, Response, StatusCode};
use http_body_util::Full;

use super::Service;
use crate::error::{Error, ErrorKind, ValidationError};

/// An answer.
pub(crate) type Reply = Response<Full<Bytes>>;

/// The `x-ms-version` answered when a request names none.
pub(crate) const VERSION: &str = "2019-02-02";

/// An error answer: its status, the service's code and message, and for a
/// failed transaction the index of the failing operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) status: u16,
    pub(crate) code: String,
    pub(crate) message: String,
    /// For a failed entity group transaction: the failing operation.
    pub(crate) batch_index: Option<usize>,
    /// A reason an authentication failure adds (`AuthenticationErrorDetail`).
    pub(crate) detail: Option<String>,
}

impl Failure {
    pub(crate) fn new(status: u16, code: &str, message: impl Into<String>) -> Self {
        Failure {
            status,
            code: code.to_owned(),
            message: message.into(),
            batch_index: None,
            detail: None,
        }
    }

    /// A 403 `AuthenticationFailed` with the reason the service gives.
    pub(crate) fn auth(detail: impl Into<String>) -> Self {
        Failure {
            detail: Some(detail.into()),
            ..Failure::new(
                403,
                "AuthenticationFailed",
                "Server failed to authenticate the request. Make sure the value of the \
                 Authorization header is formed correctly including the signature.",
            )
        }
    }

    /// 403 `AuthorizationPermissionMismatch`: the credential is valid but
    /// does not allow this request.
    pub(crate) fn permission() -> Self {
        Failure::new(
            403,
            "AuthorizationPermissionMismatch",
            "This request is not authorized to perform this operation using this permission.",
        )
    }

    /// 400 `InvalidInput` with `message`.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Failure::new(400, "InvalidInput", message)
    }

    /// The answer of this failure in `service`'s format: JSON for tables,
    /// XML for queues and blobs, the code in `x-ms-error-code` for all.
    pub(crate) fn into_reply(self, service: Service, request_id: &str) -> Reply {
        let time = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
        let mut message = match self.batch_index {
            Some(i) => format!("{i}:{}", self.message),
            None => self.message.clone(),
        };
        message.push_str(&format!("\nRequestId:{request_id}\nTime:{time}"));
        let (content_type, body) = match service {
            Service::Table => (
                "application/json;odata=minimalmetadata;streaming=true;charset=utf-8",
                serde_json::json!({
                    "odata.error": {
                        "code": self.code,
                        "message": { "lang": "en-US", "value": message },
                    }
                })
                .to_string(),
            ),
            Service::Queue | Service::Blob => {
                let mut xml =
                    String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>");
                xml.push_str(&escape_xml(&self.code));
                xml.push_str("</Code><Message>");
                xml.push_str(&escape_xml(&message));
                xml.push_str("</Message>");
                if let Some(detail) = &self.detail {
                    xml.push_str("<AuthenticationErrorDetail>");
                    xml.push_str(&escape_xml(detail));
                    xml.push_str("</AuthenticationErrorDetail>");
                }
                xml.push_str("</Error>");
                ("application/xml", xml)
            }
        };
        let mut reply = with_body(self.status, content_type, body.into());
        if let Ok(code) = HeaderValue::from_str(&self.code) {
            reply.headers_mut().insert("x-ms-error-code", code);
        }
        reply
    }
}

/// What a store's error answers: a service error keeps its status, code and
/// message; a refusal of input before the store (which the client would
/// have made) is the service's 400 with the code it gives for that input.
impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        match e.kind() {
            ErrorKind::Service(s) => Failure {
                status: s.status,
                code: s
                    .code
                    .as_ref()
                    .map_or_else(|| "InternalError".to_owned(), |c| c.as_str().to_owned()),
                message: s.message.clone().unwrap_or_default(),
                batch_index: s.batch_index,
                detail: None,
            },
            ErrorKind::Invalid(v) => Failure::new(400, validation_code(v), v.to_string()),
            ErrorKind::Decode(_) => Failure::invalid(e.to_string()),
            _ => Failure::new(500, "InternalError", e.to_string()),
        }
    }
}

impl From<ValidationError> for Failure {
    fn from(v: ValidationError) -> Self {
        Failure::new(400, validation_code(&v), v.to_string())
    }
}

/// The service's code for input tablekit's checks refuse: for an entity,
/// the codes the embedded store answers (the Table service's, see
/// `backend::embedded::errors::from_validation`), so that a request refused
/// by the server and one refused by the store carry the same code.
fn validation_code(v: &ValidationError) -> &'static str {
    match v {
        ValidationError::TableName { .. }
        | ValidationError::QueueName { .. }
        | ValidationError::ContainerName { .. }
        | ValidationError::BlobName { .. } => "InvalidResourceName",
        ValidationError::KeyTooLong { .. } | ValidationError::KeyForbiddenChar { .. } => {
            "OutOfRangeInput"
        }
        ValidationError::ValueTooLarge { .. } => "PropertyValueTooLarge",
        ValidationError::EntityTooLarge { .. } => "EntityTooLarge",
        ValidationError::TooManyProperties { .. } => "TooManyProperties",
        ValidationError::PropertyName { name, .. } if name.chars().count() > 255 => {
            "PropertyNameTooLong"
        }
        ValidationError::PropertyName { .. } => "PropertyNameInvalid",
        ValidationError::DuplicateProperty { .. } => "DuplicatePropertiesSpecified",
        ValidationError::DateTimeOutOfRange { .. } | ValidationError::ValueOutOfRange { .. } => {
            "OutOfRangeInput"
        }
        _ => "InvalidInput",
    }
}

/// An answer with no body.
pub(crate) fn empty(status: u16) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::new()));
    *reply.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    reply
}

/// An answer with `body` of `content_type`.
pub(crate) fn with_body(status: u16, content_type: &'static str, body: Bytes) -> Reply {
    let mut reply = Response::new(Full::new(body));
    *reply.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    reply.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    reply
}

/// An HTTP date (RFC 1123, GMT), as `Date` and `Last-Modified` carry.
pub(crate) fn http_date(t: DateTime<Utc>) -> String {
    t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// `text` with XML's five special characters escaped.
pub(crate) fn escape_xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body(reply: Reply) -> String {
        let bytes = reply.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_table_failure_is_the_services_json_with_its_batch_index() {
        let mut f = Failure::new(
            409,
            "EntityAlreadyExists",
            "The specified entity already exists.",
        );
        f.batch_index = Some(3);
        let reply = f.into_reply(Service::Table, "rid");
        assert_eq!(reply.status(), 409);
        assert_eq!(reply.headers()["x-ms-error-code"], "EntityAlreadyExists");
        let json: serde_json::Value = serde_json::from_str(&body(reply).await).unwrap();
        assert_eq!(json["odata.error"]["code"], "EntityAlreadyExists");
        let value = json["odata.error"]["message"]["value"].as_str().unwrap();
        assert!(value.starts_with("3:The specified entity already exists.\nRequestId:rid\n"));
    }

    #[tokio::test]
    async fn a_queue_failure_is_xml_with_its_detail_escaped() {
        let mut f = Failure::auth("bad <sig>");
        f.detail = Some("bad <sig>".into());
        let reply = f.into_reply(Service::Queue, "rid");
        assert_eq!(reply.status(), 403);
        let xml = body(reply).await;
        assert!(xml.contains("<Code>AuthenticationFailed</Code>"));
        assert!(
            xml.contains("<AuthenticationErrorDetail>bad &lt;sig&gt;</AuthenticationErrorDetail>")
        );
    }

    #[test]
    fn http_dates_are_rfc_1123() {
        let t = DateTime::parse_from_rfc3339("2026-11-29T06:05:04Z")
            .unwrap()
            .to_utc();
        assert_eq!(http_date(t), "Sun, 29 Nov 2026 06:05:04 GMT");
    }

    /// Each rule of the data model gets the code the embedded store gives
    /// for it (`backend::embedded::errors::from_validation`).
    #[test]
    fn an_entitys_refusals_carry_the_services_codes() {
        use crate::entity::{DynamicEntity, EntityKey};
        let refused = |e: DynamicEntity| {
            crate::codec::to_dynamic(&e)
                .unwrap_err()
                .validation()
                .unwrap()
                .clone()
        };
        let p = || DynamicEntity::new("p", "r");
        let cases = [
            (
                EntityKey::new("p/", "r").validate().unwrap_err(),
                "OutOfRangeInput",
            ),
            (
                EntityKey::new("p", "r".repeat(1025))
                    .validate()
                    .unwrap_err(),
                "OutOfRangeInput",
            ),
            (
                ValidationError::duplicate_property("A"),
                "DuplicatePropertiesSpecified",
            ),
            (refused(p().with("a-b", 1)), "PropertyNameInvalid"),
            (refused(p().with("N".repeat(256), 1)), "PropertyNameTooLong"),
            (
                refused(p().with("S", "x".repeat(32 * 1024 + 1))),
                "PropertyValueTooLarge",
            ),
            (
                ValidationError::TableName {
                    name: "1x".into(),
                    reason: "",
                },
                "InvalidResourceName",
            ),
        ];
        for (v, code) in cases {
            let failure = Failure::from(v.clone());
            assert_eq!(
                (failure.status, failure.code.as_str()),
                (400, code),
                "{v:?}"
            );
        }
    }
}
