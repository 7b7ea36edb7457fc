//! Entities as property bags: any entity walked into a [`DynamicEntity`],
//! with the checks a write makes.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::write::{EntityChecker, Tee};
use crate::edm::EdmValue;
use crate::entity::{DynamicEntity, Properties, PropertyWriter, TableEntity};
use crate::error::{Error, Result, ValidationError};

/// Walks an entity's properties into a [`Properties`] bag (used by the embedded
/// backend and by tests).
#[derive(Debug, Default)]
pub(crate) struct BagWriter {
    pub(crate) bag: Properties,
}

impl PropertyWriter for BagWriter {
    fn string(&mut self, name: &str, value: &str) -> Result<()> {
        self.value(name, &EdmValue::String(value.to_owned()))
    }
    fn binary(&mut self, name: &str, value: &[u8]) -> Result<()> {
        self.value(name, &EdmValue::Binary(value.to_vec()))
    }
    fn boolean(&mut self, name: &str, value: bool) -> Result<()> {
        self.value(name, &EdmValue::Boolean(value))
    }
    fn datetime(&mut self, name: &str, value: &DateTime<Utc>) -> Result<()> {
        self.value(name, &EdmValue::DateTime(*value))
    }
    fn double(&mut self, name: &str, value: f64) -> Result<()> {
        self.value(name, &EdmValue::Double(value))
    }
    fn guid(&mut self, name: &str, value: &Uuid) -> Result<()> {
        self.value(name, &EdmValue::Guid(*value))
    }
    fn int32(&mut self, name: &str, value: i32) -> Result<()> {
        self.value(name, &EdmValue::Int32(value))
    }
    fn int64(&mut self, name: &str, value: i64) -> Result<()> {
        self.value(name, &EdmValue::Int64(value))
    }
    fn value(&mut self, name: &str, value: &EdmValue) -> Result<()> {
        if self.bag.insert(name, value.clone()).is_some() {
            return Err(Error::invalid(ValidationError::DuplicateProperty {
                name: name.to_owned(),
            }));
        }
        Ok(())
    }
}

/// Collects properties in order without looking for repeated names: the
/// [`EntityChecker`](crate::codec::write::EntityChecker) beside it does, for
/// the types that need it.
struct PushWriter(Properties);

impl PropertyWriter for PushWriter {
    fn string(&mut self, name: &str, value: &str) -> Result<()> {
        self.0
            .push_unchecked(name.to_owned(), EdmValue::String(value.to_owned()));
        Ok(())
    }
    fn binary(&mut self, name: &str, value: &[u8]) -> Result<()> {
        self.0
            .push_unchecked(name.to_owned(), EdmValue::Binary(value.to_vec()));
        Ok(())
    }
    fn boolean(&mut self, name: &str, value: bool) -> Result<()> {
        self.value(name, &EdmValue::Boolean(value))
    }
    fn datetime(&mut self, name: &str, value: &DateTime<Utc>) -> Result<()> {
        self.value(name, &EdmValue::DateTime(*value))
    }
    fn double(&mut self, name: &str, value: f64) -> Result<()> {
        self.value(name, &EdmValue::Double(value))
    }
    fn guid(&mut self, name: &str, value: &Uuid) -> Result<()> {
        self.value(name, &EdmValue::Guid(*value))
    }
    fn int32(&mut self, name: &str, value: i32) -> Result<()> {
        self.value(name, &EdmValue::Int32(value))
    }
    fn int64(&mut self, name: &str, value: i64) -> Result<()> {
        self.value(name, &EdmValue::Int64(value))
    }
    fn value(&mut self, name: &str, value: &EdmValue) -> Result<()> {
        self.0.push_unchecked(name.to_owned(), value.clone());
        Ok(())
    }
}

/// The property bag of a write, checked exactly as the JSON encoder checks it
/// (same checker, same options), for a backend that stores bags. `checked`
/// says the entity was just encoded (and so checked) as JSON.
pub(crate) fn to_bag<T: TableEntity>(entity: &T, checked: bool) -> Result<DynamicEntity> {
    let (pk, rk) = (entity.partition_key(), entity.row_key());
    let mut w = PushWriter(Properties::with_capacity(16));
    if checked {
        entity.write_properties(&mut w)?;
    } else {
        let mut checker = EntityChecker::new(&pk, &rk)?
            .names_checked(T::property_names_checked())
            .find_duplicates(!T::unique_property_names());
        entity.write_properties(&mut Tee(&mut checker, &mut w))?;
        checker.finish(&pk, &rk)?;
    }
    Ok(DynamicEntity {
        partition_key: pk.into_owned(),
        row_key: rk.into_owned(),
        timestamp: None,
        etag: None,
        properties: w.0,
    })
}

/// The property bag of any entity, validated the way a write validates it.
pub fn to_dynamic<T: TableEntity>(entity: &T) -> Result<DynamicEntity> {
    let (pk, rk) = (entity.partition_key(), entity.row_key());
    let mut checker = EntityChecker::new(&pk, &rk)?;
    let mut w = BagWriter::default();
    entity.write_properties(&mut Tee(&mut checker, &mut w))?;
    checker.finish(&pk, &rk)?;
    Ok(DynamicEntity {
        partition_key: pk.into_owned(),
        row_key: rk.into_owned(),
        timestamp: None,
        etag: entity.etag().cloned(),
        properties: w.bag,
    })
}
