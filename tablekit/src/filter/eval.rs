//! The evaluator of filter expressions over entities (see [`matches`], and the
//! rules in the docs of [`crate::filter`](mod@crate::filter)).

use std::cmp::Ordering;

use chrono::{DateTime, Utc};

use super::expr::{CmpOp, Expr};
use crate::edm::EdmValue;
use crate::entity::DynamicEntity;

/// Whether `entity` satisfies `expr`, with the Table service's semantics
/// (the rules are in the docs of [`crate::filter`](mod@crate::filter)): what the embedded backend
/// runs, and what the service and emulators are checked against (through
/// `Filter::matches` of `test-support`).
pub(crate) fn matches(expr: &Expr, entity: &DynamicEntity) -> bool {
    match expr {
        Expr::Cmp {
            property,
            op,
            value,
        } => {
            let outcome = match lookup(entity, property) {
                Some(v) => compare(v, value),
                None => Outcome::Incomparable,
            };
            outcome.satisfies(*op)
        }
        Expr::And(a, b) => matches(a, entity) && matches(b, entity),
        Expr::Or(a, b) => matches(a, entity) || matches(b, entity),
        Expr::Not(e) => !matches(e, entity),
    }
}

/// A property's value, without copying the keys into an [`EdmValue`].
#[derive(Clone, Copy)]
enum Value<'a> {
    Str(&'a str),
    DateTime(DateTime<Utc>),
    Other(&'a EdmValue),
}

fn lookup<'a>(entity: &'a DynamicEntity, name: &str) -> Option<Value<'a>> {
    match name {
        "PartitionKey" => Some(Value::Str(&entity.partition_key)),
        "RowKey" => Some(Value::Str(&entity.row_key)),
        "Timestamp" => entity.timestamp.map(Value::DateTime),
        _ => entity.get(name).map(|v| match v {
            EdmValue::String(s) => Value::Str(s),
            EdmValue::DateTime(d) => Value::DateTime(*d),
            other => Value::Other(other),
        }),
    }
}

/// How a property's value stands against a literal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Same type, ordered.
    Ordered(Ordering),
    /// Same type, but unordered (a NaN): only `ne` holds.
    Unordered,
    /// Missing, or of another type: nothing holds.
    Incomparable,
}

impl Outcome {
    fn satisfies(self, op: CmpOp) -> bool {
        match self {
            Outcome::Ordered(o) => op.holds(o),
            Outcome::Unordered => op == CmpOp::Ne,
            Outcome::Incomparable => false,
        }
    }
}

/// Ordinal comparison by UTF-16 code units (.NET `string.CompareOrdinal`).
fn compare_utf16(a: &str, b: &str) -> Ordering {
    // Within the BMP, UTF-16 code unit order is code point order, and so byte
    // order of UTF-8; only text with supplementary characters needs the slow path.
    if a.is_ascii() || b.is_ascii() {
        return a.as_bytes().cmp(b.as_bytes());
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

fn compare(prop: Value<'_>, literal: &EdmValue) -> Outcome {
    use EdmValue as V;
    let ordered = Outcome::Ordered;
    match (prop, literal) {
        (Value::Str(a), V::String(b)) => ordered(compare_utf16(a, b)),
        (Value::DateTime(a), V::DateTime(b)) => ordered(a.cmp(b)),
        (Value::Other(V::Int32(a)), V::Int32(b)) => ordered(a.cmp(b)),
        (Value::Other(V::Int64(a)), V::Int64(b)) => ordered(a.cmp(b)),
        (Value::Other(V::Double(a)), V::Double(b)) => {
            a.partial_cmp(b).map_or(Outcome::Unordered, ordered)
        }
        (Value::Other(V::Boolean(a)), V::Boolean(b)) => ordered(a.cmp(b)),
        (Value::Other(V::Guid(a)), V::Guid(b)) => ordered(a.as_u128().cmp(&b.as_u128())),
        (Value::Other(V::Binary(a)), V::Binary(b)) => ordered(a.as_slice().cmp(b.as_slice())),
        _ => Outcome::Incomparable,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use uuid::Uuid;

    use super::*;
    use crate::edm::parse_datetime;
    use crate::filter::parse;
    use crate::filter::strategies;

    #[track_caller]
    fn m(filter: &str, e: &DynamicEntity) -> bool {
        matches(
            &parse(filter).unwrap_or_else(|err| panic!("{filter}: {err}")),
            e,
        )
    }

    /// Which of `entities` (by RowKey) match `filter`.
    #[track_caller]
    fn which(filter: &str, entities: &[DynamicEntity]) -> Vec<String> {
        entities
            .iter()
            .filter(|e| m(filter, e))
            .map(|e| e.row_key.clone())
            .collect()
    }

    fn ent(rk: &str) -> DynamicEntity {
        DynamicEntity::new("P", rk)
    }

    #[test]
    fn rating_type_mismatch_example() {
        // Data model §11 / §15: only B.
        let entities = [ent("A").with("Rating", 2), ent("B").with("Rating", 2.5)];
        assert_eq!(which("Rating gt 1.2", &entities), ["B"]);
        assert_eq!(which("Rating gt 1", &entities), ["A"]);
        assert_eq!(which("Rating gt 1L", &entities), Vec::<String>::new());
    }

    #[test]
    fn no_numeric_promotion() {
        let i32e = ent("i32").with("N", 2);
        let i64e = ent("i64").with("N", 2i64);
        let dbl = ent("dbl").with("N", 2.0);
        let str = ent("str").with("N", "2");
        let all = [i32e, i64e, dbl, str];
        assert_eq!(which("N eq 2", &all), ["i32"]);
        assert_eq!(which("N eq 2L", &all), ["i64"]);
        assert_eq!(which("N eq 2.0", &all), ["dbl"]);
        assert_eq!(which("N eq '2'", &all), ["str"]);
        // Every operator is false across types, `ne` included.
        for op in ["eq", "ne", "gt", "ge", "lt", "le"] {
            assert_eq!(
                which(&format!("N {op} 5L"), &all[..1]),
                Vec::<String>::new()
            );
            assert_eq!(which(&format!("N {op} true"), &all), Vec::<String>::new());
        }
        assert_eq!(which("N ne 7", &all), ["i32"]);
    }

    #[test]
    fn missing_property_fails_every_comparison_and_not_inverts() {
        let e = ent("r");
        for op in ["eq", "ne", "gt", "ge", "lt", "le"] {
            assert!(!m(&format!("Missing {op} 1"), &e), "{op}");
            assert!(m(&format!("not (Missing {op} 1)"), &e), "{op}");
        }
        assert!(!m("Missing", &e));
        assert!(m("not Missing", &e));
        // `not` of a type mismatch is true as well.
        assert!(m("not (Rating eq 2)", &ent("r").with("Rating", 2.0)));
    }

    #[test]
    fn keys_are_strings_and_ranges_work() {
        let e = DynamicEntity::new("Sales", "empid_000150");
        assert!(m(
            "PartitionKey eq 'Sales' and RowKey ge 'empid_000100' and RowKey lt 'empid_000200'",
            &e
        ));
        assert!(!m("PartitionKey eq 'sales'", &e), "case-sensitive");
        assert!(!m("RowKey eq 150", &e), "keys are strings");
        // The prefix trick.
        let keys = ["PD", "PDC", "PDC1", "PDCzzz", "PDD", "PDD0", "PDc", "pdc"];
        let entities: Vec<_> = keys.iter().map(|k| DynamicEntity::new(*k, *k)).collect();
        assert_eq!(
            which("PartitionKey ge 'PDC' and PartitionKey lt 'PDD'", &entities),
            ["PDC", "PDC1", "PDCzzz"]
        );
    }

    #[test]
    fn seed_range_queries() {
        // Newest first: b2 (2008-10-02) sorts before b1 (2008-10-01).
        let blogs = [
            DynamicEntity::new("Football", "2521793591999999999"),
            DynamicEntity::new("Football", "2521794455999999999"),
            DynamicEntity::new("Football", "2521795319999999999"),
        ];
        // "Posted after 2008-10-01T10:00": RowKey lt inv(D).
        assert_eq!(
            which(
                "PartitionKey eq 'Football' and RowKey lt '2521794455999999999'",
                &blogs
            ),
            ["2521793591999999999"]
        );
        // The day 2008-07-03: RowKey gt inv(d2) and RowKey le inv(d1).
        let day = [
            ent("2521871711999999999"), // 07-04T00:00, excluded
            ent("2521871711999999998"), // 07-04T00:00 minus ... after, excluded
            ent("2521872000000000000"), // during 07-03
            ent("2521872575999999999"), // 07-03T00:00, included
            ent("2521872576000000000"), // before 07-03, excluded
        ];
        assert_eq!(
            which(
                "RowKey gt '2521871711999999999' and RowKey le '2521872575999999999'",
                &day
            ),
            ["2521872000000000000", "2521872575999999999"]
        );
        // Year buckets: the corrected query takes 2008 only; the whitepaper's takes 2009.
        let buckets: Vec<_> = [
            "Football_7990_12",
            "Football_7991",
            "Football_7991_03",
            "Football_7991_03_04",
            "Football_7991_06",
            "Football_7992_01",
        ]
        .iter()
        .map(|pk| DynamicEntity::new(*pk, *pk))
        .collect();
        assert_eq!(
            which(
                "PartitionKey ge 'Football_7991_' and PartitionKey lt 'Football_7991`'",
                &buckets
            ),
            [
                "Football_7991_03",
                "Football_7991_03_04",
                "Football_7991_06"
            ]
        );
        assert_eq!(
            which(
                "PartitionKey le 'Football_7991' and PartitionKey gt 'Football_7990'",
                &buckets
            ),
            ["Football_7990_12", "Football_7991"]
        );
        let v1 = ent("v1").with("SchemaVersion", 1);
        let v2 = ent("v2").with("SchemaVersion", 2);
        assert_eq!(which("SchemaVersion lt 2", &[v1, v2, ent("none")]), ["v1"]);
        let don = ent("don")
            .with("LastName", "Jones")
            .with("FirstName", "Don");
        let ann = ent("ann")
            .with("LastName", "Jones")
            .with("FirstName", "Ann");
        assert_eq!(
            which("LastName eq 'Jones' and FirstName eq 'Don'", &[don, ann]),
            ["don"]
        );
    }

    #[test]
    fn timestamp_is_the_system_datetime() {
        let dt = |s| parse_datetime(s).unwrap();
        let mut e = ent("r");
        let f = "Timestamp ge datetime'2009-05-01T00:00:00Z'";
        assert!(!m(f, &e), "no timestamp: false");
        assert!(m(&format!("not ({f})"), &e));
        e.timestamp = Some(dt("2009-05-01T00:00:00Z"));
        assert!(m(f, &e));
        e.timestamp = Some(dt("2009-04-30T23:59:59.9999999Z"));
        assert!(!m(f, &e));
        assert!(m("Timestamp eq datetime'2009-04-30T23:59:59.9999999Z'", &e));
        assert!(!m(
            "Timestamp eq datetime'2009-04-30T23:59:59.9999998Z'",
            &e
        ));
        assert!(!m("Timestamp eq '2009-04-30T23:59:59.9999999Z'", &e));
        // A bag entry named like a system property does not stand in for it.
        let shadow = ent("r").with("Timestamp", dt("2009-06-01T00:00:00Z"));
        assert!(!m(f, &shadow));
        let shadow = ent("r").with("PartitionKey", "Q");
        assert!(m("PartitionKey eq 'P'", &shadow));
        // A custom DateTime property compares chronologically.
        let c = ent("r").with("CreatedOn", dt("2008-10-01T10:00:00Z"));
        assert!(m("CreatedOn lt datetime'2008-10-01T12:00:00+01:00'", &c));
        assert!(!m("CreatedOn lt datetime'2008-10-01T11:00:00+01:00'", &c));
    }

    #[test]
    fn strings_compare_by_utf16_code_units() {
        let e = ent("r").with("S", "\u{1F600}"); // surrogates D83D DE00
                                                 // Code point order would say U+1F600 > U+FFFD; UTF-16 says less.
        assert!(m("S lt '\u{FFFD}'", &e));
        assert!(m("S lt '\u{E000}'", &e));
        assert!(m("S gt '\u{D7FF}'", &e));
        assert!("\u{1F600}" > "\u{FFFD}", "Rust str order differs");
        // Ordinal: uppercase before lowercase, prefix first, no culture rules.
        let s = |v: &str| ent("r").with("S", v);
        assert!(m("S lt 'a'", &s("B")));
        assert!(m("S lt 'ab'", &s("a")));
        assert!(m("S gt 'z'", &s("é")));
        assert!(m("S eq ''", &s("")));
        assert!(m("S eq 'O''Brien'", &s("O'Brien")));
        assert!(!m("S eq 'e\u{301}'", &s("é")), "no normalisation");
        assert_eq!(compare_utf16("a\u{1F600}", "a\u{FFFF}"), Ordering::Less);
        assert_eq!(compare_utf16("a", "a\u{1F600}"), Ordering::Less);
        assert_eq!(compare_utf16("\u{1F600}", "\u{1F600}"), Ordering::Equal);
    }

    #[test]
    fn doubles_follow_ieee() {
        let nan = ent("r").with("D", f64::NAN);
        for (op, want) in [
            ("eq", false),
            ("ne", true),
            ("gt", false),
            ("ge", false),
            ("lt", false),
            ("le", false),
        ] {
            assert_eq!(m(&format!("D {op} 1.0"), &nan), want, "NaN {op}");
        }
        assert!(m("not (D eq 1.0)", &nan));
        let zero = ent("r").with("D", -0.0);
        assert!(m("D eq 0.0", &zero));
        assert!(!m("D lt 0.0", &zero));
        let inf = ent("r").with("D", f64::INFINITY);
        assert!(m("D gt 1.7976931348623157e308", &inf));
        let x = ent("r").with("D", 0.1 + 0.2);
        assert!(!m("D eq 0.3", &x));
        assert!(m("D gt 0.3", &x));
    }

    #[test]
    fn binary_guid_boolean_int_orders() {
        let b = |v: &[u8]| ent("r").with("B", v);
        assert!(m("B lt X'0001'", &b(&[0])));
        assert!(m("B lt X'01'", &b(&[0, 1])));
        assert!(m("B gt X'0001'", &b(&[255])));
        assert!(m("B eq binary'00FF'", &b(&[0, 255])));
        assert!(m("B gt X''", &b(&[0])));
        // Guids: unsigned, in text order.
        let g = |v: u128| ent("r").with("G", Uuid::from_u128(v));
        assert!(m(
            "G gt guid'7fffffff-ffff-ffff-ffff-ffffffffffff'",
            &g(0x8000_0000 << 96)
        ));
        assert!(m(
            "G lt guid'00000000-0000-0000-0000-000000000100'",
            &g(0xff)
        ));
        assert!(m(
            "G eq guid'01234567-89AB-CDEF-0123-456789ABCDEF'",
            &g(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef)
        ));
        // Booleans: false < true; a Boolean property alone means `eq true`.
        let t = ent("t").with("Active", true);
        let f = ent("f").with("Active", false);
        let one = ent("one").with("Active", 1);
        let all = [t, f, one, ent("none")];
        assert_eq!(which("Active gt false", &all), ["t"]);
        assert_eq!(which("Active lt true", &all), ["f"]);
        assert_eq!(which("Active", &all), ["t"]);
        assert_eq!(which("not Active", &all), ["f", "one", "none"]);
        // Integers at their extremes.
        let i = ent("r").with("I", i64::MIN);
        assert!(m("I eq -9223372036854775808L", &i));
        assert!(m("I lt -9223372036854775807L", &i));
        let j = ent("r").with("J", i32::MIN);
        assert!(m("J lt 0 and J le -2147483648 and J ge -2147483648", &j));
    }

    #[test]
    fn and_or_not_combine() {
        let e = ent("r").with("A", 1).with("B", "x");
        assert!(m("A eq 1 and B eq 'x'", &e));
        assert!(!m("A eq 1 and B eq 'y'", &e));
        assert!(m("A eq 2 or B eq 'x'", &e));
        assert!(m("A eq 2 or (B eq 'y' or A ge 1)", &e));
        assert!(!m("not (A eq 1 or B eq 'y')", &e));
        assert!(m("not (A eq 2) and not (C eq 1)", &e));
        assert!(m("not not (A eq 1)", &e));
    }

    // ---- property tests -----------------------------------------------------

    /// A reference evaluation written independently of [`compare`]: values
    /// are compared through different representations, and doubles with Rust's
    /// IEEE operators rather than through an `Ordering`.
    fn reference(e: &Expr, ent: &DynamicEntity) -> bool {
        match e {
            Expr::Cmp {
                property,
                op,
                value,
            } => {
                let stored = match property.as_str() {
                    "PartitionKey" => Some(EdmValue::String(ent.partition_key.clone())),
                    "RowKey" => Some(EdmValue::String(ent.row_key.clone())),
                    "Timestamp" => ent.timestamp.map(EdmValue::DateTime),
                    name => ent
                        .properties
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, v)| v.clone()),
                };
                reference_cmp(stored, *op, value)
            }
            Expr::And(a, b) => reference(a, ent) && reference(b, ent),
            Expr::Or(a, b) => reference(a, ent) || reference(b, ent),
            Expr::Not(a) => !reference(a, ent),
        }
    }

    fn reference_cmp(stored: Option<EdmValue>, op: CmpOp, lit: &EdmValue) -> bool {
        use EdmValue as V;
        let Some(stored) = stored else { return false };
        if let (V::Double(a), V::Double(b)) = (&stored, lit) {
            return match op {
                CmpOp::Eq => a == b,
                CmpOp::Ne => a != b,
                CmpOp::Gt => a > b,
                CmpOp::Ge => a >= b,
                CmpOp::Lt => a < b,
                CmpOp::Le => a <= b,
            };
        }
        let ord: Option<Ordering> = match (&stored, lit) {
            (V::String(a), V::String(b)) => {
                let a: Vec<u16> = a.encode_utf16().collect();
                let b: Vec<u16> = b.encode_utf16().collect();
                Some(a.cmp(&b))
            }
            (V::Int32(a), V::Int32(b)) => Some(i64::from(*a).cmp(&i64::from(*b))),
            (V::Int64(a), V::Int64(b)) => Some(i128::from(*a).cmp(&i128::from(*b))),
            (V::Boolean(a), V::Boolean(b)) => Some(u8::from(*a).cmp(&u8::from(*b))),
            (V::DateTime(a), V::DateTime(b)) => Some(
                (a.timestamp(), a.timestamp_subsec_nanos())
                    .cmp(&(b.timestamp(), b.timestamp_subsec_nanos())),
            ),
            (V::Guid(a), V::Guid(b)) => {
                Some(a.hyphenated().to_string().cmp(&b.hyphenated().to_string()))
            }
            (V::Binary(a), V::Binary(b)) => Some(a.cmp(b)),
            _ => None,
        };
        let Some(ord) = ord else { return false };
        match op {
            CmpOp::Eq => ord.is_eq(),
            CmpOp::Ne => ord.is_ne(),
            CmpOp::Gt => ord.is_gt(),
            CmpOp::Ge => ord.is_ge(),
            CmpOp::Lt => ord.is_lt(),
            CmpOp::Le => ord.is_le(),
        }
    }

    fn entity() -> impl Strategy<Value = DynamicEntity> {
        let key = prop::sample::select(vec!["", "a", "b", "ab", "\u{FFFD}", "\u{1F600}"]);
        let when = prop::option::of(prop::sample::select(vec![0i64, 1, 1_000_000_000]));
        let props = prop::collection::vec(
            (
                prop::sample::select(vec!["A", "B", "Rating", "_x1", "Timestamp"]),
                strategies::small_value(true),
            ),
            0..5,
        );
        (key.clone(), key, when, props).prop_map(|(pk, rk, when, props)| {
            let mut e = DynamicEntity::new(pk, rk);
            e.timestamp = when.and_then(|s| DateTime::from_timestamp(s, 0));
            for (name, value) in props {
                e.set(name, value);
            }
            e
        })
    }

    proptest! {
        #[test]
        fn matches_agrees_with_the_reference(
            e in strategies::expr(strategies::small_value(false)),
            entities in prop::collection::vec(entity(), 1..8),
        ) {
            let text = e.to_string();
            let parsed = parse(&text).map_err(|err| TestCaseError::fail(format!("{text}: {err}")))?;
            prop_assert_eq!(&parsed, &e);
            for ent in &entities {
                let want = reference(&e, ent);
                prop_assert_eq!(matches(&e, ent), want, "{} over {:?}", text, ent);
                prop_assert_eq!(matches(&parsed, ent), want, "{} over {:?}", text, ent);
            }
        }

        #[test]
        fn not_is_the_complement(
            e in strategies::expr(strategies::small_value(false)),
            ent in entity(),
        ) {
            prop_assert_eq!(matches(&e.clone().negate(), &ent), !matches(&e, &ent));
        }
    }
}
