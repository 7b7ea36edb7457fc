//! A table's stored access policies (`?comp=acl`) and the Table service's
//! properties and stats (`?restype=service&comp=properties|stats`), through
//! the store's `admin`, in the service's XML.

use http::Method;

use super::auth::{Need, Perm};
use super::reply::{self, Reply};
use super::{Ctx, Failure};
use crate::backend::admin::{AdminOp, AdminResponse};

fn not_allowed(method: &Method) -> Failure {
    Failure::new(
        405,
        "MethodNotAllowed",
        format!("The requested method {method} is not allowed on the specified resource."),
    )
}

fn xml(body: String) -> Reply {
    reply::with_body(200, "application/xml", body.into())
}

fn unexpected(r: &AdminResponse) -> Failure {
    Failure::new(500, "InternalError", format!("the store answered {r:?}"))
}

fn bad_xml(e: impl std::fmt::Display) -> Failure {
    Failure::new(
        400,
        "InvalidXmlDocument",
        format!("XML specified is not syntactically valid. ({e})"),
    )
}

/// `/?restype=service&comp=properties|stats`.
pub(crate) async fn service(ctx: &Ctx<'_>, method: &Method) -> Result<Reply, Failure> {
    let tables = &ctx.account.tables;
    match (method, ctx.param("comp")) {
        (&Method::GET, Some("properties")) => {
            ctx.access.check(Need::Service(Perm::Read))?;
            match tables.admin(AdminOp::GetProperties).await? {
                AdminResponse::Properties(p) => Ok(xml(crate::service_properties::encode(&p))),
                other => Err(unexpected(&other)),
            }
        }
        (&Method::PUT, Some("properties")) => {
            ctx.access.check(Need::Service(Perm::Write))?;
            let properties = crate::service_properties::decode(&ctx.body).map_err(bad_xml)?;
            crate::service_properties::check(&properties).map_err(|e| {
                Failure::new(
                    400,
                    "InvalidXmlNodeValue",
                    format!(
                        "The value for one of the XML nodes is not in the correct format. ({e})"
                    ),
                )
            })?;
            match tables
                .admin(AdminOp::SetProperties {
                    properties: &properties,
                })
                .await?
            {
                AdminResponse::Done => Ok(reply::empty(202)),
                other => Err(unexpected(&other)),
            }
        }
        (&Method::GET, Some("stats")) => {
            ctx.access.check(Need::Service(Perm::Read))?;
            match tables.admin(AdminOp::Stats).await? {
                AdminResponse::Stats(s) => Ok(xml(crate::backend::http::admin::encode_stats(&s))),
                other => Err(unexpected(&other)),
            }
        }
        _ => Err(not_allowed(method)),
    }
}

/// `/<table>?comp=acl`: its stored access policies.
pub(crate) async fn acl(ctx: &Ctx<'_>, method: &Method, path: &str) -> Result<Reply, Failure> {
    let table = path.strip_suffix("()").unwrap_or(path);
    let tables = &ctx.account.tables;
    match *method {
        Method::GET => {
            ctx.access.check(Need::Container {
                name: table,
                perm: Perm::Read,
            })?;
            match tables.admin(AdminOp::GetAcl { resource: table }).await? {
                AdminResponse::Acl(policies) => Ok(xml(crate::acl::encode(&policies))),
                other => Err(unexpected(&other)),
            }
        }
        Method::PUT => {
            ctx.access.check(Need::Container {
                name: table,
                perm: Perm::Write,
            })?;
            let policies = crate::acl::decode(&ctx.body).map_err(bad_xml)?;
            match tables
                .admin(AdminOp::SetAcl {
                    resource: table,
                    policies: &policies,
                })
                .await?
            {
                AdminResponse::Done => Ok(reply::empty(204)),
                other => Err(unexpected(&other)),
            }
        }
        _ => Err(not_allowed(method)),
    }
}
