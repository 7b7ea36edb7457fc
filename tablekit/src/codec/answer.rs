//! The Table service's JSON answers, as the server (`tablekit::server`)
//! writes them: entities and table names in the three metadata formats
//! (`odata=nometadata`, `minimalmetadata`, `fullmetadata`). The way back of
//! [`read`](super::read), which decodes them.

use base64::Engine as _;

use super::write::{write_double, write_json_str};
use crate::backend::http::wire::entity_resource;
use crate::edm::{write_datetime, EdmType, EdmValue};
use crate::entity::{DynamicEntity, EntityKey};
use crate::options::Metadata;

/// What an answer's links say and how much metadata it carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer<'a> {
    /// The account's URL as the client reached it
    /// (`http://127.0.0.1:10002/devstoreaccount1`).
    pub(crate) base: &'a str,
    pub(crate) account: &'a str,
    pub(crate) metadata: Metadata,
}

/// The properties a `$select` names (`None`: all). The service returns only
/// those, keys and Timestamp included only if named.
pub(crate) type Select<'a> = Option<&'a [String]>;

impl Answer<'_> {
    /// The body of a single entity (a point read, an insert's 201).
    pub(crate) fn entity(&self, table: &str, e: &DynamicEntity, select: Select<'_>) -> Vec<u8> {
        let mut members = Vec::with_capacity(512);
        self.members(&mut members, table, e, select);
        let mut out = Vec::with_capacity(members.len() + 128);
        out.push(b'{');
        if self.metadata != Metadata::None {
            self.metadata_link(&mut out, table, true);
            if !members.is_empty() {
                out.push(b',');
            }
        }
        out.extend_from_slice(&members);
        out.push(b'}');
        out
    }

    /// The body of a query's page.
    pub(crate) fn page<'e>(
        &self,
        table: &str,
        entities: impl IntoIterator<Item = &'e DynamicEntity>,
        select: Select<'_>,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(4096);
        out.push(b'{');
        if self.metadata != Metadata::None {
            self.metadata_link(&mut out, table, false);
            out.push(b',');
        }
        out.extend_from_slice(b"\"value\":[");
        for (i, e) in entities.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.push(b'{');
            self.members(&mut out, table, e, select);
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
        out
    }

    /// The body of a created table.
    pub(crate) fn table(&self, name: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.push(b'{');
        if self.metadata != Metadata::None {
            self.metadata_link(&mut out, "Tables", true);
            out.push(b',');
        }
        self.table_members(&mut out, name);
        out.push(b'}');
        out
    }

    /// The body of a page of tables.
    pub(crate) fn tables(&self, names: &[String]) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + names.len() * 64);
        out.push(b'{');
        if self.metadata != Metadata::None {
            self.metadata_link(&mut out, "Tables", false);
            out.push(b',');
        }
        out.extend_from_slice(b"\"value\":[");
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.push(b'{');
            self.table_members(&mut out, name);
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
        out
    }

    /// `"odata.metadata":"<base>/$metadata#<set>[/@Element]"`.
    fn metadata_link(&self, out: &mut Vec<u8>, set: &str, element: bool) {
        let mut link = format!("{}/$metadata#{set}", self.base);
        if element {
            link.push_str("/@Element");
        }
        member(out, "odata.metadata");
        write_json_str(out, &link);
    }

    fn table_members(&self, out: &mut Vec<u8>, name: &str) {
        member(out, "TableName");
        write_json_str(out, name);
        if self.metadata == Metadata::Full {
            let resource = format!("Tables('{name}')");
            out.push(b',');
            member(out, "odata.type");
            write_json_str(out, &format!("{}.Tables", self.account));
            out.push(b',');
            member(out, "odata.id");
            write_json_str(out, &format!("{}/{resource}", self.base));
            out.push(b',');
            member(out, "odata.editLink");
            write_json_str(out, &resource);
        }
    }

    /// The members of one entity, without the braces.
    fn members(&self, out: &mut Vec<u8>, table: &str, e: &DynamicEntity, select: Select<'_>) {
        let keeps = |name: &str| select.is_none_or(|s| s.iter().any(|n| n == name));
        let full = self.metadata == Metadata::Full;
        // What the JSON form leaves ambiguous, in minimal and full metadata
        // alike (as the service and Azurite write them): String, Boolean,
        // Int32 and a finite Double read back as they are (a Double always
        // has a `.` or an `e`).
        let annotate = |value: &EdmValue| match self.metadata {
            Metadata::None => false,
            _ => match value {
                EdmValue::String(_) | EdmValue::Boolean(_) | EdmValue::Int32(_) => false,
                EdmValue::Double(d) => !d.is_finite(),
                _ => true,
            },
        };
        let mut first = true;
        let mut sep = |out: &mut Vec<u8>| {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
        };
        let resource = || entity_resource(table, &EntityKey::new(&*e.partition_key, &*e.row_key));
        if full {
            sep(out);
            member(out, "odata.type");
            write_json_str(out, &format!("{}.{table}", self.account));
            sep(out);
            member(out, "odata.id");
            write_json_str(out, &format!("{}/{}", self.base, resource()));
        }
        if self.metadata != Metadata::None {
            if let Some(etag) = &e.etag {
                sep(out);
                member(out, "odata.etag");
                write_json_str(out, etag.as_str());
            }
        }
        if full {
            sep(out);
            member(out, "odata.editLink");
            write_json_str(out, &resource());
        }
        if keeps("PartitionKey") {
            sep(out);
            member(out, "PartitionKey");
            write_json_str(out, &e.partition_key);
        }
        if keeps("RowKey") {
            sep(out);
            member(out, "RowKey");
            write_json_str(out, &e.row_key);
        }
        if let Some(t) = e.timestamp.filter(|_| keeps("Timestamp")) {
            let value = EdmValue::DateTime(t);
            if full {
                sep(out);
                annotation(out, "Timestamp", EdmType::DateTime);
            }
            sep(out);
            member(out, "Timestamp");
            write_value(out, &value);
        }
        for (name, value) in e.properties.iter() {
            if !keeps(name) {
                continue;
            }
            if annotate(value) {
                sep(out);
                annotation(out, name, value.edm_type());
            }
            sep(out);
            member(out, name);
            write_value(out, value);
        }
    }
}

/// `"name":`
fn member(out: &mut Vec<u8>, name: &str) {
    write_json_str(out, name);
    out.push(b':');
}

/// `"name@odata.type":"Edm.X"`
fn annotation(out: &mut Vec<u8>, name: &str, edm: EdmType) {
    let mut annotated = String::with_capacity(name.len() + 11);
    annotated.push_str(name);
    annotated.push_str("@odata.type");
    member(out, &annotated);
    write_json_str(out, edm.as_str());
}

/// A value in the service's JSON form: Int64 as a string, DateTime with
/// seven fractional digits, Guid hyphenated, Binary in base64, the Double's
/// NaN and infinities as strings.
fn write_value(out: &mut Vec<u8>, value: &EdmValue) {
    match value {
        EdmValue::String(s) => write_json_str(out, s),
        EdmValue::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        EdmValue::Int32(i) => out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
        EdmValue::Int64(i) => {
            out.push(b'"');
            out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes());
            out.push(b'"');
        }
        EdmValue::Double(d) => write_double(out, *d),
        EdmValue::DateTime(t) => {
            out.push(b'"');
            write_datetime(out, t);
            out.push(b'"');
        }
        EdmValue::Guid(g) => {
            out.push(b'"');
            let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
            out.extend_from_slice(g.hyphenated().encode_lower(&mut buf).as_bytes());
            out.push(b'"');
        }
        EdmValue::Binary(b) => {
            out.push(b'"');
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(b)
                    .as_bytes(),
            );
            out.push(b'"');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::read::{decode_entity, decode_page, decode_table_names};
    use crate::edm::parse_datetime;
    use crate::entity::ETag;

    fn sample() -> DynamicEntity {
        let mut e = DynamicEntity::new("p'1", "r/é")
            .with("S", "x \"y\"")
            .with("I", 7)
            .with("L", 1_i64 << 40)
            .with("D", 2.0)
            .with("N", f64::NAN)
            .with("B", true)
            .with(
                "G",
                uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
            )
            .with("T", parse_datetime("2020-07-23T21:20:41.6667782Z").unwrap())
            .with("Bin", vec![0u8, 1, 255]);
        e.timestamp = Some(parse_datetime("2026-01-02T03:04:05.1234567Z").unwrap());
        e.etag = Some(ETag::new(
            "W/\"datetime'2026-01-02T03%3A04%3A05.1234567Z'\"",
        ));
        e
    }

    fn answer(metadata: Metadata) -> Answer<'static> {
        Answer {
            base: "http://127.0.0.1:10002/devstoreaccount1",
            account: "devstoreaccount1",
            metadata,
        }
    }

    /// What the server writes in minimal and full metadata, the client's
    /// decoder reads back as the same entity, types included.
    #[test]
    fn entities_written_with_metadata_read_back_whole() {
        let e = sample();
        for m in [Metadata::Minimal, Metadata::Full] {
            let body = answer(m).entity("T1", &e, None);
            let back: DynamicEntity = decode_entity(&body, None, None).unwrap();
            assert_eq!(back.partition_key, e.partition_key);
            assert_eq!(back.row_key, e.row_key);
            assert_eq!(back.timestamp, e.timestamp);
            assert_eq!(back.etag, e.etag);
            assert_eq!(back.properties.len(), e.properties.len());
            for (name, value) in e.properties.iter() {
                match (back.get(name), value) {
                    (Some(EdmValue::Double(a)), EdmValue::Double(b)) if b.is_nan() => {
                        assert!(a.is_nan());
                    }
                    (got, want) => assert_eq!(got, Some(want), "{name} in {m:?}"),
                }
            }
            let page = answer(m).page("T1", [&e, &e], None);
            let mut out: Vec<DynamicEntity> = Vec::new();
            decode_page(&page, &mut out).unwrap();
            assert_eq!(out.len(), 2);
            assert_eq!(out[1].get("L"), Some(&EdmValue::Int64(1 << 40)));
        }
    }

    #[test]
    fn each_format_carries_the_services_members() {
        let e = sample();
        let json = |m| -> serde_json::Value {
            serde_json::from_slice(&answer(m).entity("T1", &e, None)).unwrap()
        };
        let none = json(Metadata::None);
        assert!(none
            .as_object()
            .unwrap()
            .keys()
            .all(|k| !k.contains("odata")));
        assert_eq!(none["L"], "1099511627776");
        assert_eq!(none["I"], 7);
        let minimal = json(Metadata::Minimal);
        assert_eq!(
            minimal["odata.metadata"],
            "http://127.0.0.1:10002/devstoreaccount1/$metadata#T1/@Element"
        );
        assert_eq!(minimal["L@odata.type"], "Edm.Int64");
        assert_eq!(minimal["N@odata.type"], "Edm.Double");
        assert!(minimal.get("D@odata.type").is_none());
        assert!(minimal.get("I@odata.type").is_none());
        assert!(minimal.get("Timestamp@odata.type").is_none());
        assert!(minimal.get("odata.id").is_none());
        let full = json(Metadata::Full);
        assert_eq!(full["odata.type"], "devstoreaccount1.T1");
        assert_eq!(
            full["odata.id"],
            "http://127.0.0.1:10002/devstoreaccount1/T1(PartitionKey='p%27%271',RowKey='r%2F%C3%A9')"
        );
        assert_eq!(
            full["odata.editLink"],
            "T1(PartitionKey='p%27%271',RowKey='r%2F%C3%A9')"
        );
        assert_eq!(full["Timestamp@odata.type"], "Edm.DateTime");
        assert_eq!(full["L@odata.type"], "Edm.Int64");
        assert!(full.get("I@odata.type").is_none());
        assert!(full.get("D@odata.type").is_none());
    }

    #[test]
    fn a_selection_keeps_only_the_named_properties() {
        let e = sample();
        let select = ["S".to_owned(), "RowKey".to_owned(), "Missing".to_owned()];
        let body = answer(Metadata::Minimal).page("T1", [&e], Some(&select));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let first = v["value"][0].as_object().unwrap();
        let mut keys: Vec<_> = first.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, ["RowKey", "S", "odata.etag"]);
        assert_eq!(
            v["odata.metadata"],
            "http://127.0.0.1:10002/devstoreaccount1/$metadata#T1"
        );
        // Nothing selected that exists, no metadata: an empty object.
        let body = answer(Metadata::None).entity("T1", &e, Some(&["Missing".to_owned()]));
        assert_eq!(body, b"{}");
    }

    #[test]
    fn tables_read_back_by_name() {
        let names = vec!["Alpha".to_owned(), "beta1".to_owned()];
        for m in [Metadata::None, Metadata::Minimal, Metadata::Full] {
            assert_eq!(
                decode_table_names(&answer(m).tables(&names)).unwrap(),
                names
            );
        }
        let full: serde_json::Value =
            serde_json::from_slice(&answer(Metadata::Full).table("Alpha")).unwrap();
        assert_eq!(full["odata.editLink"], "Tables('Alpha')");
        assert_eq!(full["odata.type"], "devstoreaccount1.Tables");
        assert_eq!(
            full["odata.metadata"],
            "http://127.0.0.1:10002/devstoreaccount1/$metadata#Tables/@Element"
        );
    }
}
