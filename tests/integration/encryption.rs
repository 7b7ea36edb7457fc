//! Client-side encryption (feature `encryption`, `tablekit::encryption`) on
//! every backend: encryption happens in the client, so Azurite, the
//! embedded store and its file must all keep and give back the same
//! ciphertext. What the Python library makes of it is `encryption_interop`.

use std::sync::Arc;

use futures::TryStreamExt as _;
use tablekit::encryption::{
    AesKeyWrap, EncryptionPolicy, KeyEncryptionKey, KeyRing, RsaOaepKey, METADATA_PROPERTIES,
};
use tablekit::table::{Plan, TransactionOp};
use tablekit::{DynamicEntity, EdmValue, IfMatch, TableEntity, UpdateMode};

use crate::common;

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
    #[tablekit(etag)]
    etag: Option<tablekit::ETag>,
}

fn employee(id: &str, ssn: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        id: id.into(),
        name: format!("name of {id}"),
        ssn: ssn.into(),
        note: Some(format!("note {id} ✓")),
        etag: None,
    }
}

fn key(id: &str, byte: u8) -> Arc<dyn KeyEncryptionKey> {
    Arc::new(AesKeyWrap::new(id, [byte; 32]))
}

/// Equal but for the ETag, which only a read or a `&mut` write fills.
fn same(a: &Employee, b: &Employee) -> bool {
    Employee {
        etag: None,
        ..a.clone()
    } == Employee {
        etag: None,
        ..b.clone()
    }
}

tablekit::testing::conformance! {
    async fn encrypted_entities_round_trip_and_are_stored_as_ciphertext(env) {
        let svc = env.tables().clone();
        let table = common::fresh_table::<Employee>(&svc, "enc").await;
        let enc = table.encrypted(EncryptionPolicy::with_shared_key(key("k1", 1)));
        let mut e = employee("1", "123-45-6789");
        enc.insert(&mut e).await.unwrap();
        assert!(e.etag.is_some(), "a write through &mut gives the ETag back");
        let mut other = employee("2", "");
        other.note = None;
        enc.upsert(&other, UpdateMode::Replace).await.unwrap();

        let got = enc.get(("Sales", "1")).await.unwrap().unwrap();
        assert!(same(&got, &e), "{got:?}");
        assert_eq!(got.etag, e.etag);
        assert!(enc.get(("Sales", "none")).await.unwrap().is_none());

        // What the service stores: ciphertext as Edm.Binary, the rest in clear.
        let raw = enc.raw().get(("Sales", "1")).await.unwrap().unwrap();
        let Some(EdmValue::Binary(ssn)) = raw.get("Ssn") else { panic!("{raw:?}") };
        assert_eq!(ssn.len() % 16, 0, "AES-CBC blocks");
        assert!(!ssn.windows(4).any(|w| w == b"6789"));
        assert!(matches!(raw.get("Name"), Some(EdmValue::String(n)) if n == "name of 1"));
        assert!(matches!(raw.get(METADATA_PROPERTIES[0]), Some(EdmValue::String(_))));
        assert!(matches!(raw.get(METADATA_PROPERTIES[1]), Some(EdmValue::Binary(_))));
        // Each entity has its own content key and IV: equal values differ on the wire.
        enc.insert(&employee("3", "123-45-6789")).await.unwrap();
        let raw3 = enc.raw().get(("Sales", "3")).await.unwrap().unwrap();
        assert_ne!(raw3.get("Ssn"), raw.get("Ssn"));

        // A replace under the ETag, and a query that decrypts every entity.
        e.ssn = "999-99-9999".into();
        let etag = e.etag.clone().unwrap();
        enc.update(&mut e, UpdateMode::Replace, etag.clone()).await.unwrap();
        let stale = enc.update(&e, UpdateMode::Replace, etag).await.unwrap_err();
        assert!(stale.is_precondition_failed(), "{stale}");
        let mut all = enc
            .query()
            .filter(|c| c.partition_key.eq("Sales") & c.name.ne("x"))
            .fetch_all()
            .await
            .unwrap();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].ssn, "999-99-9999");
        assert_eq!(all[1], Employee { etag: all[1].etag.clone(), ..other.clone() });
        let first = enc.query().take(1).stream().try_next().await.unwrap().unwrap();
        assert_eq!(first.id, "1");
        enc.delete(("Sales", "3"), IfMatch::Any).await.unwrap();
        assert!(enc.get(("Sales", "3")).await.unwrap().is_none());
        common::drop_table(&table).await;
    }
}

tablekit::testing::conformance! {
    async fn a_missing_or_wrong_key_is_an_error_never_garbage(env) {
        let svc = env.tables().clone();
        let table = common::fresh_table::<Employee>(&svc, "enckey").await;
        let k1 = key("k1", 1);
        table
            .encrypted(EncryptionPolicy::with_shared_key(k1.clone()))
            .insert(&employee("1", "secret"))
            .await
            .unwrap();
        // A resolver that does not know the key id: the error names it.
        let unknown = table
            .encrypted(EncryptionPolicy::read_only(KeyRing::new().with(AesKeyWrap::new("k2", [2; 32]))))
            .get(("Sales", "1"))
            .await
            .unwrap_err();
        assert!(unknown.to_string().contains("\"k1\""), "{unknown}");
        // Another key under another id, with no resolver.
        let other = table
            .encrypted(EncryptionPolicy::new(AesKeyWrap::new("k2", [2; 32])))
            .get(("Sales", "1"))
            .await
            .unwrap_err();
        assert!(other.to_string().contains("k1") && other.to_string().contains("k2"), "{other}");
        // Other bytes under the same id: the unwrap fails (RFC 3394's check).
        let forged = table
            .encrypted(EncryptionPolicy::new(AesKeyWrap::new("k1", [9; 32])))
            .get(("Sales", "1"))
            .await
            .unwrap_err();
        assert!(forged.to_string().contains("could not unwrap"), "{forged}");
        // A plain client reads ciphertext where a string belongs: an error.
        let plain = table.get(("Sales", "1")).await.unwrap_err();
        assert!(plain.to_string().contains("Ssn"), "{plain}");
        // An RSA key that only wraps cannot read.
        let rsa = RsaOaepKey::from_pem("r1", include_str!("python/interop-rsa-test-key.pem")).unwrap();
        let public = RsaOaepKey::public_only("r1", rsa.public_key().clone());
        let by_rsa = table.encrypted(EncryptionPolicy::new(rsa));
        by_rsa.insert(&employee("2", "rsa secret")).await.unwrap();
        assert_eq!(by_rsa.get(("Sales", "2")).await.unwrap().unwrap().ssn, "rsa secret");
        let err = table
            .encrypted(EncryptionPolicy::new(public))
            .get(("Sales", "2"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no private key"), "{err}");
        common::drop_table(&table).await;
    }
}

tablekit::testing::conformance! {
    async fn require_encryption_refuses_entities_written_in_clear(env) {
        let svc = env.tables().clone();
        let table = common::fresh_table::<DynamicEntity>(&svc, "encreq").await;
        table
            .insert(&DynamicEntity::new("p", "clear").with("Secret", "not encrypted"))
            .await
            .unwrap();
        let lenient = table.encrypted(EncryptionPolicy::new(AesKeyWrap::new("k1", [1; 32])));
        let read = lenient.get(("p", "clear")).await.unwrap().unwrap();
        assert_eq!(read.get("Secret"), Some(&EdmValue::String("not encrypted".into())));
        let strict = table.encrypted(
            EncryptionPolicy::new(AesKeyWrap::new("k1", [1; 32])).require_encryption(true),
        );
        let err = strict.get(("p", "clear")).await.unwrap_err();
        assert!(err.to_string().contains("requires encryption"), "{err}");
        common::drop_table(&table).await;
    }
}

tablekit::testing::conformance! {
    async fn an_encryption_resolver_picks_the_properties_of_untyped_entities(env) {
        let svc = env.tables().clone();
        let table = common::fresh_table::<DynamicEntity>(&svc, "encdyn").await;
        let enc = table.encrypted(
            EncryptionPolicy::new(AesKeyWrap::new("k1", [1; 32]))
                .encryption_resolver(|pk, _, name| pk == "secret" && name.starts_with('S')),
        );
        let e = DynamicEntity::new("secret", "1").with("Ssn", "1").with("Name", "n").with("Age", 3);
        enc.insert(&e).await.unwrap();
        enc.insert(&DynamicEntity::new("open", "1").with("Ssn", "2")).await.unwrap();
        let raw = table.get(("secret", "1")).await.unwrap().unwrap();
        assert!(matches!(raw.get("Ssn"), Some(EdmValue::Binary(_))));
        assert!(matches!(raw.get("Name"), Some(EdmValue::String(_))));
        let raw = table.get(("open", "1")).await.unwrap().unwrap();
        assert!(matches!(raw.get("Ssn"), Some(EdmValue::String(_))), "not chosen: in clear");
        let back = enc.get(("secret", "1")).await.unwrap().unwrap();
        assert_eq!(back.properties, e.properties);
        // Only strings can be encrypted: refused before any request.
        let err = enc
            .insert(&DynamicEntity::new("secret", "2").with("Score", 3))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("Score") && err.to_string().contains("strings"), "{err}");
        assert!(table.get(("secret", "2")).await.unwrap().is_none());
        common::drop_table(&table).await;
    }
}

tablekit::testing::conformance! {
    async fn encrypted_writes_go_into_transactions_and_plans(env) {
        let svc = env.tables().clone();
        let table = common::fresh_table::<Employee>(&svc, "enctx").await;
        let enc = table.encrypted(EncryptionPolicy::new(AesKeyWrap::new("k1", [1; 32])));
        let mut tx = enc.raw().transaction();
        tx.push(enc.insert_op(&employee("1", "a")).await.unwrap()).unwrap();
        tx.push(enc.upsert_op(&employee("2", "b"), UpdateMode::Replace).await.unwrap()).unwrap();
        tx.send().await.unwrap();
        enc.plan_insert(&employee("3", "c")).await.unwrap().await.unwrap();
        let plan = enc
            .plan_upsert(&employee("1", "a2"), UpdateMode::Replace)
            .await
            .unwrap()
            .and(enc.plan_insert(&employee("4", "d")).await.unwrap())
            .unwrap();
        plan.await.unwrap();
        let mut all = enc.query().fetch_all().await.unwrap();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        let ssns: Vec<&str> = all.iter().map(|e| e.ssn.as_str()).collect();
        assert_eq!(ssns, ["a2", "b", "c", "d"]);
        common::drop_table(&table).await;
    }
}

tablekit::testing::conformance! {
    async fn key_rotation_rewraps_content_keys_only(env) {
        let svc = env.tables().clone();
        let table = common::fresh_table::<Employee>(&svc, "encrot").await;
        let (k1, k2) = (key("k1", 1), key("k2", 2));
        let old = table.encrypted(EncryptionPolicy::with_shared_key(k1.clone()));
        for id in ["1", "2", "3"] {
            old.insert(&employee(id, &format!("ssn {id}"))).await.unwrap();
        }
        table
            .with_type::<DynamicEntity>()
            .insert(&DynamicEntity::new("Sales", "plain").with("Name", "x"))
            .await
            .unwrap();
        let before = old.raw().get(("Sales", "1")).await.unwrap().unwrap();

        let rotate = table.encrypted(
            EncryptionPolicy::with_shared_key(k2.clone())
                .key_resolver(KeyRing::new().with(AesKeyWrap::new("k1", [1; 32]))),
        );
        let report = rotate.rotate_keys_where(k2.clone(), "RowKey ne '3'").await.unwrap();
        assert_eq!((report.rewrapped, report.not_encrypted, report.already_current), (2, 1, 0));
        let again = rotate.rotate_keys(k2.clone()).await.unwrap();
        assert_eq!((again.rewrapped, again.not_encrypted, again.already_current), (1, 1, 2));

        // The ciphertext did not change: only the wrapped key did.
        let after = old.raw().get(("Sales", "1")).await.unwrap().unwrap();
        assert_eq!(after.get("Ssn"), before.get("Ssn"));
        assert_eq!(after.get(METADATA_PROPERTIES[1]), before.get(METADATA_PROPERTIES[1]));
        assert_ne!(after.get(METADATA_PROPERTIES[0]), before.get(METADATA_PROPERTIES[0]));
        // k2 alone reads everything; k1 alone reads nothing any more.
        let new_only = table.encrypted(EncryptionPolicy::with_shared_key(k2.clone()));
        for id in ["1", "2", "3"] {
            let e = new_only.get(("Sales", id)).await.unwrap().unwrap();
            assert_eq!(e.ssn, format!("ssn {id}"));
        }
        assert!(old.get(("Sales", "1")).await.is_err());
        common::drop_table(&table).await;
    }
}

/// The new key of a rotation that, the first time it wraps a content key
/// (after the rotation read the entity, before it writes the metadata
/// back), has another writer replace that entity: a concurrent change.
struct InterferingKey {
    inner: Arc<dyn KeyEncryptionKey>,
    writer: tablekit::encryption::EncryptedTable<Employee>,
    done: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl KeyEncryptionKey for InterferingKey {
    fn key_id(&self) -> &str {
        self.inner.key_id()
    }
    fn algorithm(&self) -> &str {
        self.inner.algorithm()
    }
    async fn wrap_key(&self, content_key: &[u8]) -> tablekit::Result<Vec<u8>> {
        if !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.writer
                .upsert(&employee("1", "changed meanwhile"), UpdateMode::Replace)
                .await?;
        }
        self.inner.wrap_key(content_key).await
    }
    async fn unwrap_key(
        &self,
        wrapped: &[u8],
        algorithm: &str,
    ) -> tablekit::Result<tablekit::encryption::Zeroizing<Vec<u8>>> {
        self.inner.unwrap_key(wrapped, algorithm).await
    }
}

tablekit::testing::conformance! {
    async fn key_rotation_loses_no_concurrent_change(env) {
        let svc = env.tables().clone();
        let table = common::fresh_table::<Employee>(&svc, "encrotc").await;
        let (k1, k2) = (key("k1", 1), key("k2", 2));
        let old = table.encrypted(EncryptionPolicy::with_shared_key(k1.clone()));
        old.insert(&employee("1", "original")).await.unwrap();
        let new_key = Arc::new(InterferingKey {
            inner: k2.clone(),
            writer: old.clone(),
            done: Default::default(),
        });
        let report = table
            .encrypted(EncryptionPolicy::with_shared_key(k1.clone()))
            .rotate_keys(new_key)
            .await
            .unwrap();
        assert_eq!((report.rewrapped, report.retried), (1, 1), "{report:?}");
        // The change made in between is kept, and is under the new key.
        let e = table
            .encrypted(EncryptionPolicy::with_shared_key(k2))
            .get(("Sales", "1"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(e.ssn, "changed meanwhile");
        common::drop_table(&table).await;
    }
}

/// Merges are refused before any request: on a client whose every request
/// would fail with a transport error, the error is a validation error.
#[tokio::test]
async fn merges_of_encrypted_entities_are_refused_before_any_io() {
    let table = common::offline_table::<Employee>();
    let e = employee("1", "secret");
    let merge_errors = [
        table.upsert(&e, UpdateMode::Merge).await.unwrap_err(),
        table
            .update(&e, UpdateMode::Merge, IfMatch::Any)
            .await
            .unwrap_err(),
        table
            .transaction()
            .upsert(&e, UpdateMode::Merge)
            .map(drop)
            .unwrap_err(),
        TransactionOp::upsert(&e, UpdateMode::Merge)
            .map(drop)
            .unwrap_err(),
        TransactionOp::update(&e, UpdateMode::Merge, IfMatch::Any)
            .map(drop)
            .unwrap_err(),
        table
            .plan_upsert(&e, UpdateMode::Merge)
            .map(drop)
            .unwrap_err(),
    ];
    for err in &merge_errors {
        let msg = common::assert_invalid(err);
        assert!(msg.contains("merge") && msg.contains("Ssn"), "{msg}");
    }
    // A plain write of a type with encrypted fields would store them in clear.
    for err in [
        table.insert(&e).await.unwrap_err(),
        table.upsert(&e, UpdateMode::Replace).await.unwrap_err(),
        table.transaction().insert(&e).map(drop).unwrap_err(),
        table.plan_insert(&e).map(drop).unwrap_err(),
    ] {
        let msg = common::assert_invalid(&err);
        assert!(msg.contains("encrypted table"), "{msg}");
    }
    // Through the encrypted table, in transactions and plans too.
    let enc = table.encrypted(EncryptionPolicy::new(AesKeyWrap::new("k1", [1; 32])));
    for err in [
        enc.upsert(&e, UpdateMode::Merge).await.unwrap_err(),
        enc.update(&e, UpdateMode::Merge, IfMatch::Any)
            .await
            .unwrap_err(),
        enc.upsert_op(&e, UpdateMode::Merge)
            .await
            .map(drop)
            .unwrap_err(),
        enc.update_op(&e, UpdateMode::Merge, IfMatch::Any)
            .await
            .map(drop)
            .unwrap_err(),
        enc.plan_upsert(&e, UpdateMode::Merge)
            .await
            .map(drop)
            .unwrap_err(),
    ] {
        let msg = common::assert_invalid(&err);
        assert!(msg.contains("merge"), "{msg}");
    }
    // An untyped entity carrying the metadata (read raw, changed) cannot be
    // merged in a transaction or a plan either.
    let mut bag = DynamicEntity::new("Sales", "1").with("Name", "n");
    bag.set(METADATA_PROPERTIES[0], "{}");
    let raw = enc.raw();
    for op in [
        TransactionOp::Upsert(bag.clone(), UpdateMode::Merge),
        TransactionOp::Update(bag.clone(), UpdateMode::Merge, IfMatch::Any),
    ] {
        let msg = common::assert_invalid(&raw.transaction().push(op.clone()).unwrap_err());
        assert!(msg.contains("merge"), "{msg}");
        let msg = common::assert_invalid(&Plan::op(raw, op).map(drop).unwrap_err());
        assert!(msg.contains("merge"), "{msg}");
    }
    assert!(TransactionOp::upsert(&bag, UpdateMode::Merge).is_err());
    // And through the plain client.
    for err in [
        raw.upsert(&bag, UpdateMode::Merge).await.unwrap_err(),
        raw.update(&bag, UpdateMode::Merge, IfMatch::Any)
            .await
            .unwrap_err(),
    ] {
        let msg = common::assert_invalid(&err);
        assert!(msg.contains("merge"), "{msg}");
    }
    // Replace of the same bag is fine (it is how the encrypted table writes).
    assert!(TransactionOp::upsert(&bag, UpdateMode::Replace).is_ok());
    // A type without encrypted fields merges as before.
    let plain = DynamicEntity::new("Sales", "1").with("Name", "n");
    assert!(TransactionOp::upsert(&plain, UpdateMode::Merge).is_ok());
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "Department")]
struct Department {
    department: String,
    manager: String,
}

/// A heterogeneous table of encrypted and plain kinds.
#[derive(TableEntity, Debug, Clone, PartialEq)]
enum Row {
    Employee(Employee),
    Department(Department),
}

tablekit::testing::conformance! {
    async fn an_enum_of_kinds_encrypts_the_fields_of_its_variants(env) {
        let svc = env.tables().clone();
        assert_eq!(Row::encrypted_properties(), ["Note", "Ssn"]);
        let table = common::fresh_table::<Row>(&svc, "encenum").await;
        let e = Row::Employee(employee("1", "secret"));
        let refused = table.insert(&e).await.unwrap_err();
        assert!(common::assert_invalid(&refused).contains("encrypted table"));
        let enc = table.encrypted(EncryptionPolicy::new(AesKeyWrap::new("k1", [1; 32])));
        enc.insert(&e).await.unwrap();
        let d = Row::Department(Department { department: "Sales".into(), manager: "1".into() });
        enc.insert(&d).await.unwrap();
        let raw = enc.raw().get(("Sales", "1")).await.unwrap().unwrap();
        assert!(matches!(raw.get("Ssn"), Some(EdmValue::Binary(_))));
        let Some(Row::Employee(back)) = enc.get(("Sales", "1")).await.unwrap() else { panic!() };
        assert!(same(&back, &employee("1", "secret")));
        assert_eq!(enc.get(("Sales", "Department")).await.unwrap(), Some(d));
        common::drop_table(&table).await;
    }
}

/// The encrypted table's futures and streams can be spawned (a compile-time check).
#[test]
fn encrypted_table_futures_are_send() {
    fn send<T: Send>(_: T) {}
    let table = common::offline_table::<Employee>();
    let enc = table.encrypted(EncryptionPolicy::new(AesKeyWrap::new("k1", [1; 32])));
    let e = employee("1", "x");
    send(enc.insert(&e));
    send(enc.upsert(&e, UpdateMode::Replace));
    send(enc.update(&e, UpdateMode::Replace, IfMatch::Any));
    send(enc.get(("Sales", "1")));
    send(enc.query().stream());
    send(enc.query().fetch_all());
    send(enc.insert_op(&e));
    send(enc.plan_insert(&e));
    send(enc.rotate_keys(key("k2", 2)));
}

#[tokio::test]
async fn filters_on_encrypted_properties_are_refused_at_run_time() {
    let table = common::offline_table::<Employee>();
    let enc = table.encrypted(EncryptionPolicy::new(AesKeyWrap::new("k1", [1; 32])));
    for text in ["Ssn eq '123'", "Name eq 'a' or not (Note ne 'x')"] {
        let msg =
            common::assert_invalid(&enc.query().filter_raw(text).fetch_all().await.unwrap_err());
        assert!(msg.contains("encrypted"), "{msg}");
        let msg = common::assert_invalid(
            &table
                .query()
                .filter_raw(text)
                .fetch_all()
                .await
                .unwrap_err(),
        );
        assert!(msg.contains("encrypted"), "{msg}");
    }
    let odata = tablekit::odata!("Ssn eq {}", "x");
    assert!(enc
        .query()
        .filter_raw(odata)
        .fetch_all()
        .await
        .unwrap_err()
        .is_invalid_input());
    // Clear properties filter as usual (the request then fails: no server).
    let err = enc
        .query()
        .filter_raw("Name eq 'a'")
        .fetch_all()
        .await
        .unwrap_err();
    assert!(!err.is_invalid_input(), "{err}");
}

#[test]
fn key_material_never_shows() {
    let aes = AesKeyWrap::new("k1", [0xAB; 32]);
    let shown = format!("{aes:?}");
    assert!(
        shown.contains("k1") && !shown.to_lowercase().contains("ab, ") && !shown.contains("171"),
        "{shown}"
    );
    let err = AesKeyWrap::from_slice("k1", &[0xCD; 31])
        .unwrap_err()
        .to_string();
    assert!(
        !err.contains("205") && !err.to_lowercase().contains("cd"),
        "{err}"
    );
    let pem = include_str!("python/interop-rsa-test-key.pem");
    let rsa = RsaOaepKey::from_pem("r1", pem).unwrap();
    let shown = format!("{rsa:?}");
    let body: Vec<&str> = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    assert!(shown.contains("r1") && shown.contains("2048"), "{shown}");
    for line in &body {
        assert!(!shown.contains(&line[..16]), "{shown}");
    }
    let bad = RsaOaepKey::from_pem("r1", &pem.replace('A', "B"))
        .unwrap_err()
        .to_string();
    for line in &body {
        assert!(!bad.contains(&line[..16]), "{bad}");
    }
    let policy = EncryptionPolicy::new(aes).key_resolver(KeyRing::new().with(rsa));
    let shown = format!(
        "{policy:?} {:?}",
        KeyRing::new().with(AesKeyWrap::new("k9", [0xAB; 32]))
    );
    assert!(
        shown.contains("k1") && shown.contains("k9") && !shown.contains("171"),
        "{shown}"
    );
}
