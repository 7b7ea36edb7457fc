//! What the store accepts: an entity body parsed into its property bag and
//! checked against every limit of the data model, on the store's side too.
//!
//! The clients check the same limits before any I/O (they are the same client
//! code on both backends), so these checks answer only requests that bypass
//! them; they answer as the service does, with its status and error code.

use crate::codec::bag::CheckedBag;
use crate::codec::read::{decode_entity, duplicated_property};
use crate::codec::write::EntityChecker;
use crate::entity::{DynamicEntity, TableEntity};
use crate::error::{Error, Result, ValidationError};

use super::errors;
use crate::backend::EntityBody;
use crate::edm::EdmValue;
use chrono::DateTime;

fn as_service(err: Error) -> Error {
    match err.validation() {
        Some(v) => errors::from_validation(v),
        None => err,
    }
}

/// The entity of a single write, checked. The client sends the property bag
/// ([`Backend::stores_property_bags`](crate::backend::Backend)), built and
/// checked by the same checker as the JSON encoder, so a refusal is the same
/// on both backends; the store checks it again on its side. (A transaction's
/// bags come as [`CheckedBag`]s, whose proof stands for that second check:
/// see [`checked_stored_form`].)
///
/// Why writes skip JSON too: with the JSON body, a 12-property entity cost
/// about 4.5 µs per insert and 5.7 µs per upsert-merge in the workload bench
/// (encode, parse, re-allocate every name and value), over the 5 µs target;
/// the bag is built in one walk with one allocation per string. Transactions
/// send bags too; their 4 MiB limit is a limit on the payload, which the
/// client counts on the JSON (without writing it), so it is counted
/// identically on both backends.
pub(crate) fn entity_of(body: EntityBody) -> Result<DynamicEntity> {
    match body {
        EntityBody::Bag(entity) => stored_form(*entity),
        EntityBody::Json(json) => entity_from_body(&json),
    }
}

/// Parses a write's JSON body (a transaction's operation, or a single write
/// that came as JSON) into the entity to store, and checks it.
pub(crate) fn entity_from_body(body: &[u8]) -> Result<DynamicEntity> {
    let mut entity: DynamicEntity = decode_entity(body, None, None).map_err(|e| {
        match duplicated_property(&e) {
            // As the service answers it.
            Some(name) => errors::from_validation(&ValidationError::duplicate_property(name)),
            None => {
                errors::invalid_input(&format!("One of the request inputs is not valid. ({e})"))
            }
        }
    })?;
    // Timestamp is the service's to set; a sent one is ignored, as the service does.
    entity.timestamp = None;
    entity.etag = None;
    check(&entity)?;
    Ok(entity)
}

/// Checks keys, names, property count, value sizes, DateTime range and entity size.
pub(crate) fn check(entity: &DynamicEntity) -> Result<()> {
    let (pk, rk) = (&entity.partition_key, &entity.row_key);
    let mut checker = EntityChecker::new(pk, rk)
        .map_err(as_service)?
        .find_duplicates(true);
    entity.write_properties(&mut checker).map_err(as_service)?;
    checker.finish(pk, rk).map_err(as_service)?;
    Ok(())
}

/// A bag as the service stores it, checked: DateTimes at the service's 100 ns
/// resolution (finer digits truncated, as the JSON form would have them).
pub(crate) fn stored_form(entity: DynamicEntity) -> Result<DynamicEntity> {
    check(&entity)?;
    Ok(at_service_resolution(entity))
}

/// A bag the client checked ([`CheckedBag`]: a transaction's write) as the
/// service stores it. Its proof stands for [`check`], which is not run again.
pub(crate) fn checked_stored_form(bag: CheckedBag) -> DynamicEntity {
    at_service_resolution(bag.into_entity())
}

/// DateTimes at the service's 100 ns resolution (finer digits truncated).
fn at_service_resolution(mut entity: DynamicEntity) -> DynamicEntity {
    for v in entity.properties.values_mut() {
        if let EdmValue::DateTime(d) = v {
            let nanos = d.timestamp_subsec_nanos();
            let kept = nanos.min(999_999_999) / 100 * 100;
            if kept != nanos {
                if let Some(t) = DateTime::from_timestamp(d.timestamp(), kept) {
                    *d = t;
                }
            }
        }
    }
    entity
}
