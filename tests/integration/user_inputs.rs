//! Inputs from users (issue 22): every public constructor that parses text
//! refuses bad input with an error naming the rule it broke, and never panics,
//! for arbitrary strings: non-ASCII, control characters, lone surrogates (as
//! the U+FFFD a lossy conversion leaves), very long inputs. Where the rule is
//! simple enough, an independent oracle says which inputs must be accepted.

use proptest::prelude::*;
use tablekit::account::{AccountKey, SasToken};
use tablekit::error::KeyKind;
use tablekit::{
    validate, Account, BlobServiceClient, Continuation, DynamicEntity, EntityKey,
    QueueServiceClient, TableServiceClient,
};

/// Arbitrary text, biased toward what breaks parsers.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        // Control characters, C1 controls, the key-forbidden characters.
        "[\\x00-\\x1f\\x7f-\\x9f/\\\\#?a-zA-Z0-9 '=;-]{0,40}",
        // Lone surrogates through a lossy conversion.
        proptest::collection::vec(any::<u16>(), 0..40)
            .prop_map(|units| String::from_utf16_lossy(&units)),
        // Invalid UTF-8 through a lossy conversion.
        proptest::collection::vec(any::<u8>(), 0..40)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
        // Plausible names, around the length limits.
        "[a-z0-9-]{0,70}",
        "[A-Za-z0-9]{0,70}",
        // Very long.
        ("[a-zé\\x00'(-]{1,4}", 500..70_000usize).prop_map(|(s, n)| s.repeat(n / s.len())),
    ]
}

fn cfg() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn table_rule(s: &str) -> bool {
    (3..=63).contains(&s.len())
        && s.as_bytes()[0].is_ascii_alphabetic()
        && s.bytes().all(|b| b.is_ascii_alphanumeric())
        && !s.eq_ignore_ascii_case("tables")
}

fn dns_rule(s: &str) -> bool {
    (3..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

fn key_rule(s: &str) -> bool {
    s.chars().count() <= 1024
        && !s
            .chars()
            .any(|c| matches!(c, '/' | '\\' | '#' | '?' | '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}'))
}

#[derive(tablekit::TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{group}", row_key = "item_{id:04}_{kind}")]
struct Templated {
    group: String,
    id: u32,
    kind: String,
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn table_names(name in hostile()) {
        let svc = TableServiceClient::embedded();
        let checked = validate::table_name(&name);
        prop_assert_eq!(checked.is_ok(), table_rule(&name), "{:?}", name);
        match svc.table::<DynamicEntity>(&name) {
            Ok(_) => prop_assert!(table_rule(&name)),
            Err(e) => {
                let message = e.to_string();
                prop_assert!(e.is_invalid_input(), "{message}");
                prop_assert!(message.contains("table name") && message.contains("a table name"), "{message}");
            }
        }
    }

    #[test]
    fn queue_names(name in hostile()) {
        let svc = QueueServiceClient::embedded();
        prop_assert_eq!(validate::queue_name(&name).is_ok(), dns_rule(&name), "{:?}", name);
        if let Err(e) = svc.queue(&name) {
            let message = e.to_string();
            prop_assert!(e.is_invalid_input(), "{message}");
            prop_assert!(message.contains("a queue name"), "{message}");
        } else {
            prop_assert!(dns_rule(&name));
        }
    }

    #[test]
    fn container_and_blob_names(name in hostile()) {
        let svc = BlobServiceClient::embedded();
        prop_assert_eq!(validate::container_name(&name).is_ok(), dns_rule(&name), "{:?}", name);
        match svc.container(&name) {
            Err(e) => {
                let message = e.to_string();
                prop_assert!(e.is_invalid_input(), "{message}");
                prop_assert!(message.contains("a container name"), "{message}");
            }
            Ok(_) => prop_assert!(dns_rule(&name)),
        }
        let blob_rule = (1..=1024).contains(&name.chars().count()) && !name.chars().any(char::is_control);
        let container = svc.container("photos").unwrap();
        match container.blob(&name) {
            Err(e) => {
                let message = e.to_string();
                prop_assert!(e.is_invalid_input(), "{message}");
                prop_assert!(message.contains("a blob name"), "{message}");
                prop_assert!(!blob_rule, "{:?} refused: {}", name, message);
            }
            Ok(_) => prop_assert!(blob_rule, "{:?} accepted", name),
        }
    }

    #[test]
    fn entity_keys(pk in hostile(), rk in hostile()) {
        let key = EntityKey::new(pk.clone(), rk.clone());
        match key.validate() {
            Ok(()) => prop_assert!(key_rule(&pk) && key_rule(&rk)),
            Err(e) => {
                let message = e.to_string();
                prop_assert!(!(key_rule(&pk) && key_rule(&rk)), "{message}");
                prop_assert!(message.contains("PartitionKey") || message.contains("RowKey"), "{message}");
                prop_assert!(message.contains("limit") || message.contains("forbidden"), "{message}");
            }
        }
        prop_assert_eq!(validate::key(KeyKind::PartitionKey, &pk).is_ok(), key_rule(&pk));
    }

    #[test]
    fn filters(text in hostile()) {
        match tablekit::Filter::parse(&text) {
            Ok(expr) => {
                let printed = expr.to_string();
                let again = tablekit::Filter::parse(&printed);
                prop_assert!(again.is_ok(), "{:?} printed as {:?}", text, printed);
            }
            Err(e) => {
                prop_assert!(e.offset() <= text.len(), "{e:?}");
                prop_assert!(!e.message().is_empty());
                prop_assert!(e.to_string().contains(e.message()));
                let as_error: tablekit::Error = e.into();
                prop_assert!(as_error.is_invalid_input());
            }
        }
    }

    #[test]
    fn key_templates(row_key in hostile(), id in any::<u32>(), kind in hostile()) {
        let json = serde_json::json!({ "PartitionKey": "g", "RowKey": row_key }).to_string();
        match tablekit::codec::entity_from_json::<Templated>(json.as_bytes()) {
            Ok(t) => {
                let key = Templated::key(&t.group, t.id, &t.kind);
                prop_assert_eq!(key.map(|k| k.row_key).ok(), Some(row_key));
            }
            Err(e) => prop_assert!(e.to_string().contains("key template"), "{e}"),
        }
        // Building a key: a wide integer, or a kind breaking the key rules.
        match Templated::key("g", id, &kind) {
            Ok(key) => prop_assert!(id < 10_000 && key.row_key.ends_with(kind.as_str())),
            Err(e) => {
                let message = e.to_string();
                prop_assert!(
                    (id >= 10_000 && message.contains("fixed width"))
                        || (!key_rule(&kind) && (message.contains("forbidden") || message.contains("limit"))),
                    "{message}"
                );
            }
        }
    }

    #[test]
    fn connection_strings(text in hostile()) {
        if let Err(e) = Account::from_connection_string(&text) {
            let message = e.to_string();
            prop_assert!(message.contains("connection string"), "{message}");
        }
        // One segment's value (a ';' would start another segment).
        let text = text.replace(';', "");
        if let Err(e) = format!("AccountName=a;AccountKey={text}").parse::<Account>() {
            let message = e.to_string();
            prop_assert!(message.contains("AccountKey"), "{message}");
            prop_assert!(text.trim().len() < 4 || !message.contains(text.trim()), "the key is echoed: {message}");
        }
    }

    #[test]
    fn sas_and_account_keys(text in hostile()) {
        let token = SasToken::new(text.clone());
        prop_assert!(text.contains(token.as_query()));
        let debug = format!("{token:?}");
        prop_assert!(text.len() < 4 || !debug.contains(&text), "the SAS is echoed: {debug}");
        if let Err(e) = AccountKey::from_base64(&text) {
            let message = e.to_string();
            prop_assert!(message.contains("account key"), "{message}");
            prop_assert!(text.trim().len() < 4 || !message.contains(text.trim()), "the key is echoed: {message}");
        }
        let cs = format!("AccountName=a;SharedAccessSignature={text}");
        if let Err(e) = Account::from_connection_string(&cs) {
            let message = e.to_string();
            prop_assert!(message.contains("connection string"), "{message}");
        }
    }

    #[test]
    fn continuations(text in hostile()) {
        match text.parse::<Continuation>() {
            Ok(c) => {
                let back: Continuation = c.to_string().parse().unwrap();
                prop_assert_eq!(back, c);
            }
            Err(e) => {
                let message = e.to_string();
                prop_assert!(e.is_invalid_input(), "{message}");
                prop_assert!(message.contains("continuation token"), "{message}");
            }
        }
    }
}
