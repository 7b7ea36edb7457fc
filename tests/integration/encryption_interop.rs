//! Client-side encryption across SDKs, on Azurite: the legacy Python table
//! library `azure-cosmosdb-table` 1.0.6 (the wire format of the .NET storage
//! library) reads entities tablekit encrypted, with `key_resolver_function`,
//! `key_encryption_key` and `require_encryption`, and writes entities (with
//! `encryption_resolver_function`) that tablekit reads; under an A256KW key
//! and an RSA-OAEP key alike.
//!
//! The Python side is `python/encryption_interop.py`, run with the
//! interpreter named by `TABLEKIT_INTEROP_PYTHON` (a venv with
//! `tools/python/encryption-interop-requirements.txt`, which
//! `scripts/test.sh` makes under `target/`). Without it the test is skipped
//! with a banner, and fails when `CI=true`, as the Azurite rule does.

use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use tablekit::encryption::{AesKeyWrap, EncryptionPolicy, KeyEncryptionKey, KeyRing, RsaOaepKey};
use tablekit::{DynamicEntity, EdmValue, TableEntity, UpdateMode};

use crate::common;

/// The interpreter of the interop venv.
const PYTHON_VAR: &str = "TABLEKIT_INTEROP_PYTHON";

/// A 2048-bit RSA key made for this test only (`openssl genpkey`).
const RSA_PEM: &str = include_str!("python/interop-rsa-test-key.pem");

/// The A256KW key of the test (not a secret: a test vector).
const AES_KEY: [u8; 32] = *b"tablekit-interop-aes-256-key-32b";

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{id}")]
struct Employee {
    department: String,
    id: String,
    name: String,
    #[tablekit(encrypt)]
    ssn: String,
    #[tablekit(encrypt)]
    note: Option<String>,
    age: i32,
}

fn python() -> Option<PathBuf> {
    match std::env::var(PYTHON_VAR) {
        Ok(p) if !p.trim().is_empty() => Some(PathBuf::from(p)),
        _ => {
            if std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
                panic!(
                    "{PYTHON_VAR} is not set but CI=true: the encryption interop test needs the \
                     legacy Python library (scripts/test.sh makes its venv)"
                );
            }
            eprintln!(
                "\n==================== encryption interop SKIPPED ====================\n\
                 {PYTHON_VAR} is not set: the interop with azure-cosmosdb-table 1.0.6 did not run.\n\
                 Make the venv: python3 -m venv target/encryption-venv && \\\n  \
                 target/encryption-venv/bin/pip install --no-deps -r tools/python/encryption-interop-requirements.txt\n\
                 and set {PYTHON_VAR}=target/encryption-venv/bin/python\n\
                 ====================================================================\n"
            );
            None
        }
    }
}

fn employee(id: &str, name: &str, ssn: &str, note: Option<&str>, age: i32) -> Employee {
    Employee {
        department: "Sales".into(),
        id: id.into(),
        name: name.into(),
        ssn: ssn.into(),
        note: note.map(str::to_owned),
        age,
    }
}

#[tokio::test]
async fn the_legacy_python_library_reads_and_writes_tablekit_encrypted_entities() {
    let Some(svc) = common::service() else { return };
    let Some(python) = python() else { return };
    let table = common::fresh_table::<Employee>(&svc, "encinterop").await;
    let aes: Arc<dyn KeyEncryptionKey> = Arc::new(AesKeyWrap::new("local:aes1", AES_KEY));
    let rsa: Arc<dyn KeyEncryptionKey> =
        Arc::new(RsaOaepKey::from_pem("local:rsa1", RSA_PEM).unwrap());

    // tablekit writes: two entities per key, one untyped entity whose
    // encrypted property an encryption resolver picks.
    let by_aes = table.encrypted(EncryptionPolicy::with_shared_key(aes.clone()));
    let by_rsa = table.encrypted(EncryptionPolicy::with_shared_key(rsa.clone()));
    let written = [
        (
            employee(
                "rust-aes-1",
                "Jones",
                "123-45-6789",
                Some("Grüße 🦀 'quoted'"),
                41,
            ),
            "local:aes1",
        ),
        (employee("rust-aes-2", "Smith", "", None, 29), "local:aes1"),
        (
            employee(
                "rust-rsa-1",
                "Ng",
                "987-65-4321",
                Some(&"x".repeat(5000)),
                35,
            ),
            "local:rsa1",
        ),
        (
            employee("rust-rsa-2", "Okafor", "000-00-0000", Some(""), 52),
            "local:rsa1",
        ),
    ];
    for (e, kid) in &written {
        let t = if *kid == "local:aes1" {
            &by_aes
        } else {
            &by_rsa
        };
        t.upsert(e, UpdateMode::Replace).await.unwrap();
    }
    let dynamic = table.with_type::<DynamicEntity>().encrypted(
        EncryptionPolicy::with_shared_key(aes.clone())
            .encryption_resolver(|_, rk, name| rk == "rust-dyn-1" && name == "Secret"),
    );
    dynamic
        .insert(
            &DynamicEntity::new("Sales", "rust-dyn-1")
                .with("Secret", "dynamic secret")
                .with("Clear", "in clear"),
        )
        .await
        .unwrap();

    let mut rust_wrote: Vec<serde_json::Value> = written
        .iter()
        .map(|(e, kid)| {
            let mut props = serde_json::json!({ "Name": e.name, "Ssn": e.ssn, "Age": e.age });
            if let Some(n) = &e.note {
                props["Note"] = n.clone().into();
            }
            serde_json::json!({ "PartitionKey": e.department, "RowKey": e.id, "kid": kid, "props": props })
        })
        .collect();
    rust_wrote.push(serde_json::json!({
        "PartitionKey": "Sales", "RowKey": "rust-dyn-1", "kid": "local:aes1",
        "props": { "Secret": "dynamic secret", "Clear": "in clear" }
    }));
    // What Python writes, for tablekit to read back.
    let python_writes = [
        (
            employee(
                "py-aes-1",
                "Müller",
                "111-22-3333",
                Some("from Python ✓"),
                44,
            ),
            "local:aes1",
        ),
        (
            employee("py-rsa-1", "Rossi", "444-55-6666", None, 38),
            "local:rsa1",
        ),
    ];
    let python_writes_json: Vec<serde_json::Value> = python_writes
        .iter()
        .map(|(e, kid)| {
            let mut props = serde_json::json!({ "Name": e.name, "Ssn": e.ssn, "Age": e.age });
            if let Some(n) = &e.note {
                props["Note"] = n.clone().into();
            }
            serde_json::json!({
                "PartitionKey": e.department, "RowKey": e.id, "kid": kid,
                "encrypt": ["Ssn", "Note"], "props": props
            })
        })
        .collect();
    let spec = serde_json::json!({
        "table": table.name(),
        "aes": { "kid": "local:aes1", "key": base64::engine::general_purpose::STANDARD.encode(AES_KEY) },
        "rsa": { "kid": "local:rsa1", "pem": RSA_PEM },
        "rust_wrote": rust_wrote,
        "python_writes": python_writes_json,
    });
    let spec_file = std::env::temp_dir().join(format!("{}.json", table.name()));
    std::fs::write(&spec_file, spec.to_string()).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/integration/python/encryption_interop.py"
    );
    // Blocking is fine: Python talks to Azurite, not to this test's runtime.
    let out = std::process::Command::new(&python)
        .arg(script)
        .arg(&spec_file)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", python.display()));
    let _ = std::fs::remove_file(&spec_file);
    assert!(
        out.status.success(),
        "the Python side failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // tablekit reads what Python wrote: by key id, encryption required.
    let reader = table.encrypted(
        EncryptionPolicy::read_only(KeyRing::new())
            .key_resolver({
                let (aes, rsa) = (aes.clone(), rsa.clone());
                move |kid: &str| match kid {
                    "local:aes1" => Some(aes.clone()),
                    "local:rsa1" => Some(rsa.clone()),
                    _ => None,
                }
            })
            .require_encryption(true),
    );
    for (e, _) in &python_writes {
        let got = reader
            .get((e.department.as_str(), e.id.as_str()))
            .await
            .unwrap();
        assert_eq!(got.as_ref(), Some(e), "tablekit reads Python's {}", e.id);
    }
    // Python stored them as the format says: Edm.Binary, and both metadata properties.
    let raw = table
        .with_type::<DynamicEntity>()
        .get(("Sales", "py-rsa-1"))
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(raw.get("Ssn"), Some(EdmValue::Binary(_))));
    assert!(matches!(raw.get("Name"), Some(EdmValue::String(n)) if n == "Rossi"));
    assert!(raw.get("_ClientEncryptionMetadata1").is_some());
    // Everything, written by either side, in one query.
    let all = reader.query().fetch_all().await;
    // The untyped entity has no Employee fields: read it untyped.
    assert!(
        all.is_err(),
        "Employee cannot decode the untyped row: {all:?}"
    );
    let mut all = reader
        .query()
        .filter_raw("RowKey ne 'rust-dyn-1'")
        .fetch_all()
        .await
        .unwrap();
    all.sort_by(|a, b| a.id.cmp(&b.id));
    let mut want: Vec<Employee> = written
        .iter()
        .chain(python_writes.iter())
        .map(|(e, _)| e.clone())
        .collect();
    want.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(all, want);
    common::drop_table(&table).await;
}
