//! Filters whose literal has another type than the property it is compared
//! with. Azure Table Storage compares a property only with a literal of its
//! own type (`Age gt 40L` is false for an entity whose `Age` is an Int32, since
//! `40L` is an Int64) and says nothing: a query that quietly finds nothing.
//! (Azurite is laxer and may match.) The CLI knows the types of the entities
//! it has read, so it can say so.

use tablekit::filter::Filter;
use tablekit::{edm::EdmType, DynamicEntity};

/// One warning per comparison of `filter` whose property the entities of
/// `sample` hold, but never with the literal's type.
pub(crate) fn mismatches(filter: &Filter<DynamicEntity>, sample: &[DynamicEntity]) -> Vec<String> {
    let mut warnings = Vec::new();
    for c in filter.comparisons() {
        let (property, op, literal) = (c.property(), c.operator(), c.value());
        let held = held_types(sample, property);
        let want = literal.edm_type();
        if held.is_empty() || held.contains(&want) {
            continue;
        }
        let types: Vec<String> = held.iter().map(ToString::to_string).collect();
        let warning = format!(
            "{property} is {} in the entities read, and {literal} is an {want} literal: Azure Table Storage (and the embedded store) compares a property only with a literal of its type, so `{property} {op} {literal}` is false for them; write the literal as {}",
            types.join(" or "),
            types.join(" or ")
        );
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
    warnings
}

/// The types `property` has in `sample`, in the order first seen.
fn held_types(sample: &[DynamicEntity], property: &str) -> Vec<EdmType> {
    let mut held = Vec::new();
    for e in sample {
        let t = match property {
            "PartitionKey" | "RowKey" => Some(EdmType::String),
            "Timestamp" => e.timestamp.map(|_| EdmType::DateTime),
            name => e.get(name).map(|v| v.edm_type()),
        };
        if let Some(t) = t.filter(|t| !held.contains(t)) {
            held.push(t);
        }
    }
    held
}
