//! Entities as property bags: any entity walked into a [`DynamicEntity`],
//! with the checks a write makes.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::write::{EntityChecker, Tee};
use crate::edm::EdmValue;
use crate::entity::{DynamicEntity, Name, Properties, PropertyWriter, TableEntity};
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
struct PushWriter<'a> {
    bag: Properties,
    /// With `Some`, names are shared: the name of a bag of the same shape
    /// (at the same place) when it is the same, else a new shared one.
    like: Option<&'a [(Name, EdmValue)]>,
}

impl PushWriter<'_> {
    fn owned(capacity: usize) -> Self {
        PushWriter {
            bag: Properties::with_capacity(capacity),
            like: None,
        }
    }

    fn push(&mut self, name: &str, value: EdmValue) {
        let name = match self.like {
            None => Name::Owned(name.to_owned()),
            Some(like) => match like.get(self.bag.len()) {
                Some((Name::Shared(n), _)) if &**n == name => Name::Shared(n.clone()),
                _ => Name::Shared(name.into()),
            },
        };
        self.bag.push_name(name, value);
    }
}

impl PropertyWriter for PushWriter<'_> {
    fn string(&mut self, name: &str, value: &str) -> Result<()> {
        self.push(name, EdmValue::String(value.to_owned()));
        Ok(())
    }
    fn binary(&mut self, name: &str, value: &[u8]) -> Result<()> {
        self.push(name, EdmValue::Binary(value.to_vec()));
        Ok(())
    }
    fn boolean(&mut self, name: &str, value: bool) -> Result<()> {
        self.push(name, EdmValue::Boolean(value));
        Ok(())
    }
    fn datetime(&mut self, name: &str, value: &DateTime<Utc>) -> Result<()> {
        self.push(name, EdmValue::DateTime(*value));
        Ok(())
    }
    fn double(&mut self, name: &str, value: f64) -> Result<()> {
        self.push(name, EdmValue::Double(value));
        Ok(())
    }
    fn guid(&mut self, name: &str, value: &Uuid) -> Result<()> {
        self.push(name, EdmValue::Guid(*value));
        Ok(())
    }
    fn int32(&mut self, name: &str, value: i32) -> Result<()> {
        self.push(name, EdmValue::Int32(value));
        Ok(())
    }
    fn int64(&mut self, name: &str, value: i64) -> Result<()> {
        self.push(name, EdmValue::Int64(value));
        Ok(())
    }
    fn value(&mut self, name: &str, value: &EdmValue) -> Result<()> {
        self.push(name, value.clone());
        Ok(())
    }
}

/// The property bag of a single write, checked exactly as the JSON encoder
/// checks it (same checker, same options), for a backend that stores bags.
pub(crate) fn to_bag<T: TableEntity>(entity: &T) -> Result<DynamicEntity> {
    let (pk, rk) = (entity.partition_key(), entity.row_key());
    let mut w = PushWriter::owned(16);
    let mut checker = EntityChecker::new(&pk, &rk)?
        .names_checked(T::property_names_checked())
        .find_duplicates(!T::unique_property_names());
    entity.write_properties(&mut Tee(&mut checker, &mut w))?;
    checker.finish(&pk, &rk)?;
    Ok(DynamicEntity {
        partition_key: pk.into_owned(),
        row_key: rk.into_owned(),
        timestamp: None,
        etag: None,
        properties: w.bag,
    })
}

/// A transaction write's property bag that passed every check of the data
/// model the JSON encoder makes (keys, property names, duplicates, count,
/// value sizes, DateTime range, entity size), with the length of the JSON
/// it stands for (what the 4 MiB payload limit counts).
///
/// The proof that the checks ran: only [`CheckedBag::of`] builds one, and
/// it cannot be changed afterwards, so a holder (the embedded store) need
/// not check the entity again.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CheckedBag {
    entity: DynamicEntity,
    json_len: usize,
}

impl CheckedBag {
    /// Checks `entity` and collects its properties, in one walk; the errors
    /// are the JSON encoder's. `like`: a bag of an entity likely of the same
    /// shape (the previous write of a transaction), whose names are shared
    /// where they are the same, and whose size is the first guess of this
    /// one's (the bag is kept as it is built, so an exact guess keeps no
    /// room unused).
    pub(crate) fn of<T: TableEntity>(entity: &T, like: Option<&CheckedBag>) -> Result<CheckedBag> {
        let like = like.map(|b| b.entity.properties.entries());
        let mut w = PushWriter {
            bag: Properties::with_capacity(like.map_or(16, <[_]>::len)),
            like: Some(like.unwrap_or_default()),
        };
        let json_len = super::write::entity_json_len_with(entity, &mut w)?;
        Ok(CheckedBag {
            entity: DynamicEntity {
                partition_key: entity.partition_key().into_owned(),
                row_key: entity.row_key().into_owned(),
                timestamp: None,
                etag: None,
                properties: w.bag,
            },
            json_len,
        })
    }

    /// The entity.
    pub(crate) fn entity(&self) -> &DynamicEntity {
        &self.entity
    }

    /// The length of the entity's JSON, as the encoder would write it.
    pub(crate) fn json_len(&self) -> usize {
        self.json_len
    }

    /// The entity, given up (the proof goes with it).
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(crate) fn into_entity(self) -> DynamicEntity {
        self.entity
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::write::{entity_to_json, Twice};
    use crate::edm::parse_datetime;

    /// Entities breaking each rule of the data model, and valid ones.
    fn samples() -> Vec<DynamicEntity> {
        let mut many = DynamicEntity::new("p", "r");
        for i in 0..253 {
            many.set(format!("P{i}"), i);
        }
        let mut most = DynamicEntity::new("p", "r");
        for i in 0..252 {
            most.set(format!("P{i}"), i);
        }
        let mut huge = DynamicEntity::new("p", "r");
        for i in 0..17 {
            huge.set(format!("B{i}"), vec![0u8; 65536]);
        }
        vec![
            DynamicEntity::new("p", "r"),
            DynamicEntity::new("p", "r")
                .with("S", "é \"q\" 😀")
                .with("D", parse_datetime("2020-07-23T21:20:41.6667782Z").unwrap())
                .with("B", vec![1u8, 2, 3])
                .with("X", 30000.37),
            most,
            many,
            huge,
            DynamicEntity::new("p/", "r"),
            DynamicEntity::new("p", "r#"),
            DynamicEntity::new("p", "r").with("a-b", 1),
            DynamicEntity::new("p", "r").with("Timestamp", 1),
            DynamicEntity::new("p", "r").with("S", "x".repeat(32 * 1024 + 1)),
            DynamicEntity::new("p", "r").with("B", vec![0u8; 65537]),
            DynamicEntity::new("p", "r").with(
                "D",
                EdmValue::DateTime(parse_datetime("1600-12-31T23:59:59Z").unwrap()),
            ),
        ]
    }

    /// The proof a `CheckedBag` carries holds: it is built for exactly the
    /// entities the JSON encoder accepts, refuses the others with the
    /// encoder's error, and counts the JSON the encoder writes.
    #[test]
    fn a_checked_bag_is_built_exactly_when_the_encoder_accepts_the_entity() {
        let mut refused = 0;
        for e in samples() {
            match (CheckedBag::of(&e, None), entity_to_json(&e)) {
                (Ok(bag), Ok(json)) => {
                    assert_eq!(bag.json_len(), json.len());
                    assert_eq!(bag.entity(), &to_bag(&e).unwrap());
                    assert_eq!(bag.clone().into_entity().properties, e.properties);
                }
                (Err(a), Err(b)) => {
                    assert_eq!(a.validation(), b.validation());
                    assert!(a.validation().is_some(), "{a:?}");
                    refused += 1;
                }
                (a, b) => panic!("bag {a:?}, JSON {b:?}"),
            }
        }
        assert_eq!(refused, 9);
        assert_eq!(
            CheckedBag::of(&Twice, None).unwrap_err().validation(),
            Some(&ValidationError::DuplicateProperty { name: "A".into() })
        );
        assert_eq!(
            CheckedBag::of(&Twice, None).unwrap_err().validation(),
            entity_to_json(&Twice).unwrap_err().validation()
        );
    }

    /// A bag built like another shares the names that are the same at the
    /// same place, and holds its own entity's names and values exactly
    /// whatever the other bag's shape.
    #[test]
    fn a_bag_shares_the_names_of_a_bag_of_the_same_shape_and_only_those() {
        let first = DynamicEntity::new("p", "1")
            .with("A", 1)
            .with("B", "b")
            .with("C", true);
        let shapes = [
            DynamicEntity::new("p", "2")
                .with("A", 2)
                .with("B", "x")
                .with("C", false),
            DynamicEntity::new("p", "3").with("B", "x").with("A", 2),
            DynamicEntity::new("p", "4").with("A", 2),
            DynamicEntity::new("p", "5")
                .with("A", 2)
                .with("B", "x")
                .with("C", false)
                .with("D", 1.5),
            DynamicEntity::new("p", "6")
                .with("a", 2)
                .with("B", vec![1u8])
                .with("C_", 3_i64),
            DynamicEntity::new("p", "7"),
        ];
        let like = CheckedBag::of(&first, None).unwrap();
        let like_names = like.entity().properties.entries();
        for e in &shapes {
            let bag = CheckedBag::of(e, Some(&like)).unwrap();
            assert_eq!(bag.entity(), &to_bag(e).unwrap());
            assert_eq!(bag.entity().properties, e.properties);
            for (i, (name, _)) in bag.entity().properties.entries().iter().enumerate() {
                let Name::Shared(name) = name else {
                    panic!("{name:?} is not shared");
                };
                let shared = match like_names.get(i) {
                    Some((Name::Shared(l), _)) => std::sync::Arc::ptr_eq(l, name),
                    _ => false,
                };
                let same = like_names
                    .get(i)
                    .is_some_and(|(l, _)| l.as_str() == &**name);
                assert_eq!(shared, same, "{name:?} at {i}");
            }
        }
    }
}
