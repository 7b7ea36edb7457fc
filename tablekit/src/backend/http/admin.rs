//! Access control and service settings over HTTP, the same for the three
//! services: `comp=acl` on a table, queue or container, `restype=service`
//! with `comp=properties` or `comp=stats` at the endpoint's root. Stats are
//! answered only by the account's secondary location, reached through a
//! pipeline of its own ([`Secondary`]).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use chrono::Utc;
use http::header::HeaderValue;
use http::Method;

use super::limits::Kind;
use super::pipeline::{Outgoing, Pipeline};
use super::signer::Service;
use super::transport::Incoming;
use super::wire::{header_str, header_string, names, parse_retry_after, service_error};
use crate::account::Account;
use crate::backend::admin::{AdminOp, AdminResponse};
use crate::error::{Error, Result};
use crate::options::HttpOptions;

/// The request of `op` to `service`.
// Only a container's ACL differs by service (`restype=container`).
#[cfg_attr(not(feature = "blob"), allow(unused_variables))]
pub(crate) fn build(service: Service, op: &AdminOp<'_>) -> Outgoing {
    let service_query =
        |comp: &str| vec![("restype", "service".to_owned()), ("comp", comp.to_owned())];
    let acl_query = || {
        #[cfg(feature = "blob")]
        if matches!(service, Service::Blob) {
            return vec![
                ("restype", "container".to_owned()),
                ("comp", "acl".to_owned()),
            ];
        }
        vec![("comp", "acl".to_owned())]
    };
    let (method, resource, query, body) = match op {
        AdminOp::GetAcl { resource } => (Method::GET, resource.to_string(), acl_query(), None),
        AdminOp::SetAcl { resource, policies } => (
            Method::PUT,
            resource.to_string(),
            acl_query(),
            Some(crate::acl::encode(policies)),
        ),
        AdminOp::GetProperties => (
            Method::GET,
            String::new(),
            service_query("properties"),
            None,
        ),
        AdminOp::SetProperties { properties } => (
            Method::PUT,
            String::new(),
            service_query("properties"),
            Some(crate::service_properties::encode(properties)),
        ),
        AdminOp::Stats => (Method::GET, String::new(), service_query("stats"), None),
    };
    let mut headers = Vec::new();
    if body.is_some() {
        headers.push((
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml"),
        ));
    }
    Outgoing {
        method,
        resource,
        query,
        headers,
        body: body.map(Bytes::from).unwrap_or_default(),
    }
}

/// Reads the answer to `op`.
async fn interpret(pipeline: &Pipeline, op: &AdminOp<'_>, resp: Incoming) -> Result<AdminResponse> {
    let status = resp.status();
    if !status.is_success() {
        let request_id = header_string(resp.headers(), &names::X_MS_REQUEST_ID);
        let retry_after = header_str(resp.headers(), &names::RETRY_AFTER)
            .and_then(|v| parse_retry_after(v, Utc::now()));
        // As `super::error_answer` (not imported: `super` names this module):
        // a body cut short leaves the status standing.
        let body = pipeline
            .limits()
            .read(resp, Kind::Error)
            .await
            .unwrap_or_default();
        return Err(service_error(status, request_id, retry_after, &body));
    }
    Ok(match op {
        AdminOp::SetAcl { .. } | AdminOp::SetProperties { .. } => AdminResponse::Done,
        AdminOp::GetAcl { .. } => {
            let body = pipeline.limits().read(resp, Kind::Listing).await?;
            AdminResponse::Acl(crate::acl::decode(&body)?)
        }
        AdminOp::GetProperties => {
            let body = pipeline.limits().read(resp, Kind::Listing).await?;
            AdminResponse::Properties(crate::service_properties::decode(&body)?)
        }
        AdminOp::Stats => {
            let body = pipeline.limits().read(resp, Kind::Listing).await?;
            AdminResponse::Stats(crate::service_properties::decode_stats(&body)?)
        }
    })
}

/// Sends `op` to `service` through `pipeline` (with its retries) and reads the answer.
pub(crate) async fn call(
    pipeline: &Pipeline,
    service: Service,
    op: AdminOp<'_>,
) -> Result<AdminResponse> {
    let req = build(service, &op);
    let span = crate::observe::call_span(
        service.client(),
        op.name(),
        service.namespace(),
        op.name(),
        op.resource(),
    );
    pipeline
        .call(req, op.name(), op.repeat(), span, |resp| {
            interpret(pipeline, &op, resp)
        })
        .await
}

/// The account's secondary location of one service, for the calls only it
/// answers (stats). Its pipeline is made on first use.
pub(crate) struct Secondary {
    service: Service,
    account: Account,
    options: HttpOptions,
    pipeline: Mutex<Option<Arc<Pipeline>>>,
}

impl Secondary {
    pub(crate) fn new(service: Service, account: &Account, options: &HttpOptions) -> Self {
        Secondary {
            service,
            account: account.clone(),
            options: options.clone(),
            pipeline: Mutex::new(None),
        }
    }

    /// Sends `op` to the secondary location.
    pub(crate) async fn call(&self, primary: &str, op: AdminOp<'_>) -> Result<AdminResponse> {
        let pipeline = self.pipeline(primary)?;
        call(&pipeline, self.service, op).await
    }

    fn pipeline(&self, primary: &str) -> Result<Arc<Pipeline>> {
        let mut slot = self
            .pipeline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(p) = slot.as_ref() {
            return Ok(p.clone());
        }
        let endpoint = secondary_endpoint(primary, self.account.account_name())?;
        let p = Arc::new(Pipeline::new(
            self.service,
            &self.account,
            &endpoint,
            &self.options,
        )?);
        *slot = Some(p.clone());
        Ok(p)
    }
}

impl std::fmt::Debug for Secondary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secondary").finish_non_exhaustive()
    }
}

/// The secondary endpoint of `primary`: `{account}-secondary` in place of the
/// account in the host (`https://acc-secondary.table.core.windows.net`), or
/// in the first path segment of a path-style endpoint (Azurite's
/// `http://127.0.0.1:10002/devstoreaccount1-secondary`).
pub(crate) fn secondary_endpoint(primary: &str, account: &str) -> Result<String> {
    let uri: http::Uri = primary
        .parse()
        .map_err(|_| Error::config("the endpoint is not a valid URL"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(Error::config("the endpoint is not an absolute URL"));
    };
    let host = authority.as_str();
    let path = uri.path().trim_end_matches('/');
    let secondary = format!("{account}-secondary");
    if let Some(rest) = host.strip_prefix(&format!("{account}.")) {
        return Ok(format!("{scheme}://{secondary}.{rest}{path}"));
    }
    let mut segments = path.trim_start_matches('/').splitn(2, '/');
    if segments.next() == Some(account) {
        let rest = segments.next().map(|r| format!("/{r}")).unwrap_or_default();
        return Ok(format!("{scheme}://{host}/{secondary}{rest}"));
    }
    Err(Error::config(format!(
        "service stats are answered by the account's secondary location, and the endpoint \
         names the account {account:?} neither in its host nor in its path, so there is no \
         secondary endpoint to derive from it"
    )))
}

/// The `StorageServiceStats` answer a server gives (the other direction of
/// [`crate::service_properties::decode_stats`]).
#[cfg(feature = "server")]
pub(crate) fn encode_stats(stats: &crate::service_properties::ServiceStats) -> String {
    use crate::service_properties::GeoReplicationStatus;
    let status = match stats.status() {
        GeoReplicationStatus::Live => "live",
        GeoReplicationStatus::Bootstrap => "bootstrap",
        GeoReplicationStatus::Unavailable => "unavailable",
    };
    let sync = stats
        .last_sync_time()
        .map(|t| t.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
        .unwrap_or_default();
    format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><StorageServiceStats><GeoReplication>\
         <Status>{status}</Status><LastSyncTime>{sync}</LastSyncTime></GeoReplication>\
         </StorageServiceStats>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secondary_endpoint_renames_the_account_in_the_host_or_the_path() {
        assert_eq!(
            secondary_endpoint("https://acc.table.core.windows.net", "acc").unwrap(),
            "https://acc-secondary.table.core.windows.net"
        );
        assert_eq!(
            secondary_endpoint(
                "http://127.0.0.1:10002/devstoreaccount1",
                "devstoreaccount1"
            )
            .unwrap(),
            "http://127.0.0.1:10002/devstoreaccount1-secondary"
        );
        assert_eq!(
            secondary_endpoint(
                "http://127.0.0.1:10002/devstoreaccount1/",
                "devstoreaccount1"
            )
            .unwrap(),
            "http://127.0.0.1:10002/devstoreaccount1-secondary"
        );
        let custom = secondary_endpoint("https://tables.contoso.com", "acc").unwrap_err();
        assert!(custom.to_string().contains("secondary"), "{custom}");
    }

    #[cfg(feature = "server")]
    #[test]
    fn served_stats_read_back_by_the_client_as_written() {
        use crate::service_properties::{decode_stats, GeoReplicationStatus, ServiceStats};
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-29T06:05:04Z")
            .unwrap()
            .to_utc();
        for (status, last_sync_time) in [
            (GeoReplicationStatus::Live, Some(at)),
            (GeoReplicationStatus::Bootstrap, None),
            (GeoReplicationStatus::Unavailable, None),
        ] {
            let stats = ServiceStats {
                status,
                last_sync_time,
            };
            let back = decode_stats(encode_stats(&stats).as_bytes()).unwrap();
            assert_eq!(
                (back.status(), back.last_sync_time()),
                (status, last_sync_time)
            );
        }
    }

    #[test]
    fn acl_and_properties_requests_follow_the_rest_reference() {
        let policies = [crate::acl::RawPolicy {
            id: "p".into(),
            start: None,
            expiry: None,
            permission: Some("r".into()),
        }];
        let set = build(
            Service::Table,
            &AdminOp::SetAcl {
                resource: "orders",
                policies: &policies,
            },
        );
        assert_eq!(set.method, Method::PUT);
        assert_eq!(set.resource, "orders");
        assert_eq!(set.query, [("comp", "acl".to_owned())]);
        assert!(std::str::from_utf8(&set.body)
            .unwrap()
            .contains("<SignedIdentifier><Id>p</Id>"));
        let props = build(Service::Table, &AdminOp::GetProperties);
        assert_eq!(props.resource, "");
        assert_eq!(
            props.query,
            [
                ("restype", "service".to_owned()),
                ("comp", "properties".to_owned())
            ]
        );
        #[cfg(feature = "blob")]
        assert_eq!(
            build(Service::Blob, &AdminOp::GetAcl { resource: "photos" }).query,
            [
                ("restype", "container".to_owned()),
                ("comp", "acl".to_owned())
            ]
        );
    }
}
