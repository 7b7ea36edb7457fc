//! An entity's properties in the order its type writes them, for the patterns
//! that spread one logical entity over several physical ones (wide entities)
//! or several services (large entities).

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use tablekit::{entity::PropertyWriter, error::ValidationError, EdmValue, Result, TableEntity};

use crate::error::refused;

/// `entity`'s properties in order. Fails if a name is written twice or is
/// `reserved`, the property the pattern (named `pattern` in the error, such as
/// `"wide entity"`) keeps for itself.
pub(crate) fn collect<T: TableEntity>(
    entity: &T,
    reserved: &'static str,
    pattern: &'static str,
) -> Result<Vec<(String, EdmValue)>> {
    let mut c = Collector {
        props: Vec::new(),
        seen: HashSet::new(),
        reserved,
        pattern,
    };
    entity.write_properties(&mut c)?;
    Ok(c.props)
}

struct Collector {
    props: Vec<(String, EdmValue)>,
    seen: HashSet<String>,
    reserved: &'static str,
    pattern: &'static str,
}

impl Collector {
    fn put(&mut self, name: &str, value: EdmValue) -> Result<()> {
        if name == self.reserved {
            return Err(refused(
                self.pattern,
                format!("property {name:?} is reserved by the pattern"),
            ));
        }
        if !self.seen.insert(name.to_owned()) {
            return Err(ValidationError::duplicate_property(name).into());
        }
        self.props.push((name.to_owned(), value));
        Ok(())
    }
}

impl PropertyWriter for Collector {
    fn string(&mut self, name: &str, value: &str) -> Result<()> {
        self.put(name, EdmValue::String(value.to_owned()))
    }
    fn binary(&mut self, name: &str, value: &[u8]) -> Result<()> {
        self.put(name, EdmValue::Binary(value.to_owned()))
    }
    fn boolean(&mut self, name: &str, value: bool) -> Result<()> {
        self.put(name, EdmValue::Boolean(value))
    }
    fn datetime(&mut self, name: &str, value: &DateTime<Utc>) -> Result<()> {
        self.put(name, EdmValue::DateTime(*value))
    }
    fn double(&mut self, name: &str, value: f64) -> Result<()> {
        self.put(name, EdmValue::Double(value))
    }
    fn guid(&mut self, name: &str, value: &uuid::Uuid) -> Result<()> {
        self.put(name, EdmValue::Guid(*value))
    }
    fn int32(&mut self, name: &str, value: i32) -> Result<()> {
        self.put(name, EdmValue::Int32(value))
    }
    fn int64(&mut self, name: &str, value: i64) -> Result<()> {
        self.put(name, EdmValue::Int64(value))
    }
}

#[cfg(test)]
mod tests {
    use tablekit::DynamicEntity;

    use super::*;

    #[test]
    fn properties_come_in_order_and_the_reserved_name_is_refused() {
        let e = DynamicEntity::new("Sales", "000223")
            .with("Email", "jonesj@contoso.com")
            .with("Age", 34i32);
        let props = collect(&e, "_Parts", "wide").unwrap();
        let names: Vec<&str> = props.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), 2);
        assert!(names.contains(&"Email") && names.contains(&"Age"));

        let e = e.with("_Parts", 3i32);
        let err = collect(&e, "_Parts", "wide").unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
        assert!(
            err.to_string()
                .contains("wide: property \"_Parts\" is reserved by the pattern"),
            "{err}"
        );
    }
}
