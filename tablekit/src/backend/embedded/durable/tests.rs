use super::full_disk::{entities, TempFile};
use super::*;
use crate::error::ErrorKind;

#[track_caller]
fn open_message(path: &Path) -> String {
    let err = Durable::open(path).map(|_| ()).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Config(_)), "{err:?}");
    err.to_string()
}

#[test]
fn every_edm_value_reads_back_bit_for_bit() {
    let nan = f64::from_bits(0x7ff8_0000_dead_beef);
    let when = DateTime::from_timestamp(1_700_000_000, 123_456_700).unwrap();
    let values = [
        EdmValue::String("a\u{1F600}\"\\\u{0}é".into()),
        EdmValue::String(String::new()),
        EdmValue::Binary(vec![0, 255, 1, 2]),
        EdmValue::Binary(Vec::new()),
        EdmValue::Boolean(true),
        EdmValue::DateTime(when),
        EdmValue::DateTime(DateTime::from_timestamp(-11_644_473_600, 0).unwrap()),
        EdmValue::Double(-0.0),
        EdmValue::Double(nan),
        EdmValue::Double(f64::INFINITY),
        EdmValue::Double(f64::MIN_POSITIVE / 3.0),
        EdmValue::Double(0.1 + 0.2),
        EdmValue::Guid(uuid::Uuid::from_u128(u128::MAX - 7)),
        EdmValue::Int32(i32::MIN),
        EdmValue::Int64(i64::MAX),
    ];
    let mut entity = DynamicEntity::new("p\u{1F600}", "r'1");
    for (i, v) in values.iter().enumerate() {
        entity
            .properties
            .push_unchecked(format!("P{}", 20 - i), v.clone());
    }
    let version = Version::at(17_000_000_001_234_567);
    entity.timestamp = Some(version.timestamp);
    entity.etag = Some(version.etag.clone());
    let stored = StoredEntity {
        entity,
        timestamp_text: version.text,
    };
    let mut binary = Vec::new();
    encode(&stored, &mut binary);
    let mut json = Vec::new();
    record::encode_json(&stored, &mut json);
    // Format 3's binary records, and format 2's JSON records (old files).
    for bytes in [binary, json] {
        let back = decode("p\u{1F600}".into(), "r'1".into(), &bytes).unwrap();
        same_entity(&back, &stored, &values);
    }
}

fn same_entity(back: &StoredEntity, stored: &StoredEntity, values: &[EdmValue]) {
    assert_eq!(back.entity.etag, stored.entity.etag);
    assert_eq!(back.entity.timestamp, stored.entity.timestamp);
    assert_eq!(back.timestamp_text, stored.timestamp_text);
    assert_eq!(back.entity.partition_key, "p\u{1F600}");
    let names = |e: &StoredEntity| {
        e.entity
            .properties
            .iter()
            .map(|(n, _)| n.to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(back), names(stored), "order is kept");
    for ((_, a), b) in back.entity.properties.iter().zip(values) {
        match (a, b) {
            (EdmValue::Double(x), EdmValue::Double(y)) => assert_eq!(x.to_bits(), y.to_bits()),
            _ => assert_eq!(a, b),
        }
    }
}

#[test]
fn a_file_of_a_newer_format_version_is_refused() {
    let file = TempFile::new();
    drop(Durable::open(&file.0).unwrap());
    let db = Database::create(&file.0).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(META)
        .unwrap()
        .insert("format", FORMAT_VERSION + 1)
        .unwrap();
    txn.commit().unwrap();
    drop(db);
    let message = open_message(&file.0);
    assert!(message.contains("format version is 4"), "{message}");
    assert!(message.contains("reads versions 2 and 3"), "{message}");
}

#[test]
fn a_second_open_of_a_file_in_use_is_refused_until_it_is_closed() {
    let file = TempFile::new();
    let (first, _) = Durable::open(&file.0).unwrap();
    first.create_table("t1x", "T1x").unwrap();
    let message = open_message(&file.0);
    assert!(
        message.contains("in use by another open store"),
        "{message}"
    );
    // The first open goes on working, and the file is whole once it closes.
    first.create_table("t2x", "T2x").unwrap();
    drop(first);
    let (_, loaded) = Durable::open(&file.0).unwrap();
    let names: Vec<_> = loaded.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["T1x", "T2x"]);
}

/// One entity as read back: table, PartitionKey, RowKey, string length.
type Row = (String, String, String, usize);

/// A store of two tables and 300 entities over many pages, closed: its
/// bytes, and what it holds.
fn sample_store(path: &Path) -> (Vec<u8>, Vec<Row>) {
    {
        let (d, _) = Durable::open(path).unwrap();
        for (lower, name) in [("t1x", "T1x"), ("t2x", "T2x")] {
            let id = d.create_table(lower, name).unwrap();
            for i in 0..150 {
                let (pk, rk) = (format!("p{}", i % 7), format!("r{i:04}"));
                let mut e = DynamicEntity::new(pk.as_str(), rk.as_str());
                e.properties
                    .push_unchecked("S".into(), EdmValue::String("x".repeat(200 + i * 13)));
                let v = Version::at(1 + i as i64);
                e.timestamp = Some(v.timestamp);
                e.etag = Some(v.etag);
                let stored = StoredEntity {
                    entity: e,
                    timestamp_text: v.text,
                };
                let put = Put {
                    row_key: &rk,
                    entity: Some(&stored),
                };
                d.write_now(lower, id, &pk, &[put]).unwrap();
            }
        }
    }
    let bytes = std::fs::read(path).unwrap();
    let content = read_all(path).unwrap();
    assert_eq!(content.len(), 300);
    (bytes, content)
}

/// Everything the store at `path` holds, read through an open.
fn read_all(path: &Path) -> Result<Vec<Row>> {
    let (durable, loaded) = Durable::open(path)?;
    Ok(entities(&durable, &loaded)
        .into_iter()
        .map(|(table, e)| {
            let len = match e.entity.properties.iter().next() {
                Some((_, EdmValue::String(s))) => s.len(),
                _ => 0,
            };
            (table, e.entity.partition_key, e.entity.row_key, len)
        })
        .collect())
}

#[test]
fn damaged_files_are_errors_naming_the_file_never_panics() {
    let file = TempFile::new();
    let (whole, content) = sample_store(&file.0);
    let shown = file.0.display().to_string();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut garbage = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    };
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for page in 0..whole.len().div_ceil(4096) {
        let mut bytes = whole.clone();
        let end = (page * 4096 + 4096).min(bytes.len());
        let g = garbage(end - page * 4096);
        bytes[page * 4096..end].copy_from_slice(&g);
        cases.push((format!("page {page} overwritten"), bytes));
    }
    for len in [
        1,
        9,
        100,
        512,
        4095,
        4096,
        8192,
        whole.len() / 2,
        whole.len() - 1,
    ] {
        cases.push((format!("cut to {len} bytes"), whole[..len].to_vec()));
    }
    let mut bytes = whole.clone();
    bytes[0] = b'R';
    cases.push(("wrong magic".into(), bytes));
    cases.push(("zero length".into(), Vec::new()));
    for (what, bytes) in cases {
        // Sealed whole, as a clean close leaves it, then damaged: the seal
        // no longer matches, and the open checks every page.
        std::fs::write(&file.0, &whole).unwrap();
        seal::write(&file.0);
        assert!(seal::exists(&file.0));
        std::fs::write(&file.0, &bytes).unwrap();
        // Unwinding is caught only to name the case; the store itself
        // catches nothing, so this holds with `panic = "abort"` too.
        let outcome = std::panic::catch_unwind(|| read_all(&file.0))
            .unwrap_or_else(|_| panic!("{what}: the open panicked"));
        match outcome {
            // A page that held nothing live may be overwritten harmlessly:
            // then the store reads back whole, never partly.
            Ok(c) => assert!(c == content, "{what}: read back different data"),
            Err(e) => {
                assert!(matches!(e.kind(), ErrorKind::Config(_)), "{what}: {e:?}");
                let message = e.to_string();
                assert!(message.contains(&shown), "{what}: {message}");
                // The damage is named where it was found: the page
                // overwritten, or a file cut short; redb's error is the source.
                let expected = match what.strip_suffix(" overwritten") {
                    Some(page) if page != "page 0" => format!("{page} (bytes "),
                    _ if what.starts_with("cut") && message.contains("it is damaged") => {
                        let len = bytes.len();
                        if len < 512 {
                            format!("truncated to {len} bytes")
                        } else {
                            format!("it is cut short ({len} bytes")
                        }
                    }
                    _ => String::new(),
                };
                assert!(message.contains(&expected), "{what}: {message}");
                if message.contains("it is damaged") {
                    let source = std::error::Error::source(&e)
                        .unwrap_or_else(|| panic!("{what}: no source: {message}"));
                    assert!(!source.to_string().is_empty(), "{what}");
                }
                assert!(
                    ["it is damaged", "not a tablekit store", "it is empty"]
                        .iter()
                        .any(|w| message.contains(w)),
                    "{what}: {message}"
                );
                assert!(
                    std::fs::read(&file.0).unwrap() == bytes,
                    "{what}: a refused file is left as it was"
                );
            }
        }
    }
}

#[test]
fn a_damaged_record_is_named_by_its_table_and_entity_in_reads_and_the_check() {
    let file = TempFile::new();
    sample_store(&file.0);
    // The record of ("p3", "r0010") in table T2x, cut short: its pages'
    // checksums are right (redb wrote it), its content is not.
    let key = crate::backend::embedded::key::entity_key("p3", "r0010");
    {
        let db = Database::create(&file.0).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(entities_def(&entities_name(2)))
            .unwrap()
            .insert(key.as_slice(), [rows::BINARY, 1, 2].as_slice())
            .unwrap();
        txn.commit().unwrap();
    }
    let shown = file.0.display().to_string();
    let names_it = |message: &str| {
        assert!(message.contains("table T2x"), "{message}");
        assert!(message.contains("(\"p3\", \"r0010\")"), "{message}");
        assert!(message.contains(&shown), "{message}");
    };
    {
        let (d, _) = Durable::open(&file.0).unwrap();
        // A point read.
        let e = d
            .snapshot(2, "T2x")
            .unwrap()
            .get("p3", "r0010")
            .unwrap_err();
        names_it(&e.to_string());
        // A page of a query: the record is kept as it is and decoded by the
        // reader, whose error names it too.
        let snapshot = d.snapshot(2, "T2x").unwrap();
        let mut page = rows::Rows::new(snapshot.origin());
        snapshot
            .scan(&key, None, |k, v| {
                push_row(&snapshot, &mut page, k, v)?;
                Ok(false)
            })
            .unwrap();
        let mut out: Vec<DynamicEntity> = Vec::new();
        let e = crate::backend::stored::decode_rows(&page, None, &mut out).unwrap_err();
        names_it(&e.to_string());
        let mut spare = crate::backend::stored::Spare::default();
        let e = crate::backend::stored::decode_row_at::<DynamicEntity>(&page, 0, None, &mut spare)
            .unwrap_err();
        names_it(&e.to_string());
    }
    // The offline check.
    let e = check_file(&file.0).unwrap_err();
    let message = e.to_string();
    names_it(&message);
    assert!(message.contains("it is damaged: in table T2x"), "{message}");
    assert!(
        !seal::exists(&file.0),
        "a file that fails its check is not sealed"
    );
}

#[test]
fn a_file_that_is_not_a_tablekit_store_is_refused() {
    let file = TempFile::new();
    let db = Database::create(&file.0).unwrap();
    let other: TableDefinition<&str, u64> = TableDefinition::new("something");
    let txn = db.begin_write().unwrap();
    txn.open_table(other).unwrap().insert("x", 1).unwrap();
    txn.commit().unwrap();
    drop(db);
    let message = open_message(&file.0);
    assert!(message.contains("not a tablekit store"), "{message}");

    std::fs::write(
        &file.0,
        b"not a database at all, just some text".repeat(200),
    )
    .unwrap();
    let message = open_message(&file.0);
    assert!(message.contains("left untouched"), "{message}");
    assert_eq!(
        std::fs::read(&file.0).unwrap(),
        b"not a database at all, just some text".repeat(200),
        "a file that is not a store is left as it was"
    );

    let dir = std::env::temp_dir();
    let message = open_message(&dir);
    assert!(message.contains("it is a directory"), "{message}");
}

#[test]
fn a_damaged_record_is_an_error_never_a_panic() {
    let mut e = DynamicEntity::new("p", "r");
    for (n, v) in [
        ("S", EdmValue::String("text".into())),
        ("B", EdmValue::Binary(vec![1, 2, 3])),
        ("O", EdmValue::Boolean(true)),
        (
            "D",
            EdmValue::DateTime(DateTime::from_timestamp(1, 2).unwrap()),
        ),
        ("F", EdmValue::Double(1.5)),
        ("G", EdmValue::Guid(uuid::Uuid::from_u128(7))),
        ("I", EdmValue::Int32(-1)),
        ("L", EdmValue::Int64(-2)),
    ] {
        e.properties.push_unchecked(n.into(), v);
    }
    let v = Version::at(5);
    e.timestamp = Some(v.timestamp);
    let stored = StoredEntity {
        entity: e,
        timestamp_text: v.text,
    };
    let mut bytes = Vec::new();
    encode(&stored, &mut bytes);
    let read = |b: &[u8]| decode("p".into(), "r".into(), b);
    assert!(read(&bytes).is_ok());
    for cut in 0..bytes.len() {
        let err = read(&bytes[..cut]).map(|_| ()).unwrap_err();
        assert!(err.contains("(\"p\", \"r\") is unreadable"), "{err}");
    }
    assert!(
        read(&[bytes.as_slice(), &[0]].concat()).is_err(),
        "trailing bytes"
    );
    for at in 0..bytes.len() {
        for flip in [0x01, 0x80, 0xFF] {
            let mut damaged = bytes.clone();
            damaged[at] ^= flip;
            let _ = read(&damaged);
        }
    }
    // A count or length far beyond the record reserves nothing of its size.
    let mut huge = vec![0x01];
    huge.extend_from_slice(&0i64.to_le_bytes());
    huge.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]);
    assert!(read(&huge).is_err());
}

#[test]
fn a_format_2_file_with_json_records_reads_back_and_is_marked_format_3() {
    let file = TempFile::new();
    let (bytes, content) = sample_store(&file.0);
    drop(bytes);
    // Rewrite it as a format 2 file: every record as JSON.
    {
        let db = Database::create(&file.0).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert("format", FORMAT_JSON_RECORDS)
            .unwrap();
        for id in [1, 2] {
            let name = entities_name(id);
            let mut t = txn.open_table(entities_def(&name)).unwrap();
            let rows: Vec<(Vec<u8>, Vec<u8>)> = t
                .iter()
                .unwrap()
                .map(|r| {
                    let (k, v) = r.unwrap();
                    let e = decode_row(k.value(), v.value()).unwrap();
                    let mut json = Vec::new();
                    record::encode_json(&e, &mut json);
                    (k.value().to_vec(), json)
                })
                .collect();
            for (k, v) in rows {
                assert_eq!(v[0], b'{');
                t.insert(k.as_slice(), v.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    assert_eq!(read_all(&file.0).unwrap(), content);
    let db = Database::create(&file.0).unwrap();
    let txn = db.begin_read().unwrap();
    let format = txn
        .open_table(META)
        .unwrap()
        .get("format")
        .unwrap()
        .unwrap()
        .value();
    assert_eq!(format, FORMAT_VERSION);
}

/// Whether an open of the file at `path` checked every page.
fn opens_with_whole_check(path: &Path) -> bool {
    let (d, _) = Durable::open(path).unwrap();
    d.claim.file.checked_whole
}

#[test]
fn a_cleanly_closed_untouched_file_opens_without_reading_every_page() {
    let file = TempFile::new();
    let (_, content) = sample_store(&file.0);
    assert!(seal::exists(&file.0), "a clean close seals the file");
    {
        let (d, _) = Durable::open(&file.0).unwrap();
        assert!(
            !d.claim.file.checked_whole,
            "the seal matches: no whole check"
        );
        assert!(!seal::exists(&file.0), "the seal is removed while open");
    }
    assert_eq!(read_all(&file.0).unwrap(), content);

    // The same bytes written over it: the file changed on the file system's
    // account, so the next open checks every page (and seals it again).
    let bytes = std::fs::read(&file.0).unwrap();
    std::fs::write(&file.0, &bytes).unwrap();
    assert!(opens_with_whole_check(&file.0));
    assert!(!opens_with_whole_check(&file.0));

    // A copy with a copy of the seal is another file: checked.
    let copy = TempFile::new();
    std::fs::copy(&file.0, &copy.0).unwrap();
    let seal = |p: &Path| PathBuf::from(format!("{}.seal", p.display()));
    std::fs::copy(seal(&file.0), seal(&copy.0)).unwrap();
    assert!(opens_with_whole_check(&copy.0));

    // A seal of other content is not trusted, and removed.
    std::fs::write(seal(&file.0), "tablekit store seal 1\nsomething else\n").unwrap();
    assert!(opens_with_whole_check(&file.0));

    // An offline check that passes seals the file; a damaged page found by
    // the whole check is an error, as before the seal.
    std::fs::write(&file.0, &bytes).unwrap();
    check_file(&file.0).unwrap();
    assert!(seal::exists(&file.0));
    assert!(!opens_with_whole_check(&file.0));
}

/// Writes (or with `None`, deletes) entity `r{i}` of partition `p` of table `id`.
fn put(d: &Durable, lower: &str, id: u64, i: usize, text: Option<&str>) {
    let rk = format!("r{i:04}");
    let stored = text.map(|t| {
        let mut e = DynamicEntity::new("p", rk.as_str());
        e.properties
            .push_unchecked("S".into(), EdmValue::String(t.to_owned()));
        let v = Version::at(1 + i as i64);
        e.timestamp = Some(v.timestamp);
        e.etag = Some(v.etag);
        StoredEntity {
            entity: e,
            timestamp_text: v.text,
        }
    });
    let put = Put {
        row_key: &rk,
        entity: stored.as_ref(),
    };
    d.write_now(lower, id, "p", &[put]).unwrap();
}

fn freed(path: &Path) -> u64 {
    let db = Database::create(path).unwrap();
    let txn = db.begin_read().unwrap();
    let meta = txn.open_table(META).unwrap();
    meta.get(FREED).unwrap().map_or(0, |v| v.value())
}

#[test]
fn a_file_mostly_freed_by_deletes_is_compacted_when_it_closes() {
    let file = TempFile::new();
    let len = || std::fs::metadata(&file.0).unwrap().len();
    let text = "x".repeat(30_000);
    {
        let (d, _) = Durable::open(&file.0).unwrap();
        let id = d.create_table("t1x", "T1x").unwrap();
        for i in 0..100 {
            put(&d, "t1x", id, i, Some(&text));
        }
        // One delete: far below the threshold.
        put(&d, "t1x", id, 0, None);
    }
    let full = len();
    assert!(full > 3_000_000, "{full}");
    let one = freed(&file.0);
    assert!(one > 30_000 && one < 31_000, "{one}");
    assert_eq!(len(), full, "not compacted for one delete");
    {
        let (d, _) = Durable::open(&file.0).unwrap();
        for i in 1..90 {
            put(&d, "t1x", 1, i, None);
        }
        assert_eq!(len(), full, "deletes alone do not shrink the file");
    }
    // 90 of 100 deleted: compacted at the close.
    let compacted = len();
    assert!(compacted < full / 3, "{full} -> {compacted}");
    assert_eq!(freed(&file.0), 0, "the count starts again");
    let (d, loaded) = Durable::open(&file.0).unwrap();
    let left = entities(&d, &loaded);
    assert_eq!(left.len(), 10);
    assert!(left
        .iter()
        .all(|(_, e)| e.entity.row_key.as_str() >= "r0090"));
}

/// Writes (`Some` text) or deletes (`None`) the entities `r{i}` of `rows`
/// in partition `p` of table 1 (`t1x`), in commits of 100.
fn put_many(d: &Durable, rows: &[usize], text: Option<&str>) {
    for chunk in rows.chunks(100) {
        let keys: Vec<String> = chunk.iter().map(|i| format!("r{i:05}")).collect();
        let stored: Vec<Option<StoredEntity>> = keys
            .iter()
            .map(|rk| {
                text.map(|t| {
                    let mut e = DynamicEntity::new("p", rk.as_str());
                    e.properties
                        .push_unchecked("S".into(), EdmValue::String(t.to_owned()));
                    let v = Version::at(1);
                    e.timestamp = Some(v.timestamp);
                    e.etag = Some(v.etag);
                    StoredEntity {
                        entity: e,
                        timestamp_text: v.text,
                    }
                })
            })
            .collect();
        let puts: Vec<Put<'_>> = keys
            .iter()
            .zip(&stored)
            .map(|(rk, s)| Put {
                row_key: rk,
                entity: s.as_ref(),
            })
            .collect();
        d.write_now("t1x", 1, "p", &puts).unwrap();
    }
}

#[test]
fn compaction_leaves_a_file_as_dense_as_a_fresh_one() {
    let text = "y".repeat(300);
    let all: Vec<usize> = (0..5000).collect();
    let kept: Vec<usize> = all.iter().copied().filter(|i| i % 10 == 0).collect();
    let gone: Vec<usize> = all.iter().copied().filter(|i| i % 10 != 0).collect();
    // 90% deleted from every page of the table...
    let sparse = TempFile::new();
    {
        let (d, _) = Durable::open(&sparse.0).unwrap();
        assert_eq!(d.create_table("t1x", "T1x").unwrap(), 1);
        put_many(&d, &all, Some(&text));
        put_many(&d, &gone, None);
    }
    // ...and the same 10% written to a fresh file.
    let (before, after, fresh_len) = compact_next_to_fresh(&sparse, &kept, &text);
    assert!(
        after <= fresh_len + fresh_len / 4,
        "{before} -> {after}, a fresh file {fresh_len}"
    );
}

/// Compacts `sparse` and a fresh file holding only `kept` (rows of `text`),
/// checks that `sparse` still holds exactly `kept`, and returns its length
/// before and after, and the compacted fresh file's.
fn compact_next_to_fresh(sparse: &TempFile, kept: &[usize], text: &str) -> (u64, u64, u64) {
    let fresh = TempFile::new();
    {
        let (d, _) = Durable::open(&fresh.0).unwrap();
        d.create_table("t1x", "T1x").unwrap();
        put_many(&d, kept, Some(text));
    }
    let (_, fresh_len) = compact_file(&fresh.0).unwrap();
    let (before, after) = compact_file(&sparse.0).unwrap();
    let (d, loaded) = Durable::open(&sparse.0).unwrap();
    let rows: Vec<String> = entities(&d, &loaded)
        .into_iter()
        .map(|(_, e)| e.entity.row_key)
        .collect();
    let expected: Vec<String> = kept.iter().map(|i| format!("r{i:05}")).collect();
    assert_eq!(rows, expected);
    (before, after, fresh_len)
}

#[test]
fn remove_file_takes_the_seal_with_the_file_and_refuses_an_open_file() {
    let file = TempFile::new();
    sample_store(&file.0);
    assert!(seal::exists(&file.0), "a clean close seals the file");
    {
        let (_d, _) = Durable::open(&file.0).unwrap();
        let e = remove_file(&file.0).unwrap_err();
        assert!(e.to_string().contains("open in this process"), "{e}");
        assert!(file.0.exists());
    }
    remove_file(&file.0).unwrap();
    assert!(!file.0.exists());
    assert!(!seal::exists(&file.0), "no seal left behind");
    assert!(remove_file(&file.0).is_err(), "nothing left to remove");
}

#[test]
fn a_compaction_after_single_commits_leaves_the_file_as_dense_as_a_fresh_one() {
    let text = "y".repeat(230);
    let all: Vec<usize> = (0..20_000).collect();
    let gone: Vec<usize> = all.iter().copied().filter(|i| i % 10 != 0).collect();
    let mut kept: Vec<usize> = all.iter().copied().filter(|i| i % 10 == 0).collect();
    let sparse = TempFile::new();
    {
        let (d, _) = Durable::open(&sparse.0).unwrap();
        d.create_table("t1x", "T1x").unwrap();
        put_many(&d, &all, Some(&text));
    }
    // A few commits of one entity each, in a later session: redb places
    // pages at the end of the file that its own compaction leaves there.
    {
        let (d, _) = Durable::open(&sparse.0).unwrap();
        for i in 30_000..30_010 {
            put_many(&d, &[i], Some(&text));
            kept.push(i);
        }
    }
    {
        let (d, _) = Durable::open(&sparse.0).unwrap();
        put_many(&d, &gone, None);
    }
    let (before, after, fresh_len) = compact_next_to_fresh(&sparse, &kept, &text);
    assert!(
        after <= fresh_len,
        "{before} -> {after}, a fresh file {fresh_len}"
    );
}

#[test]
fn a_compacted_file_ends_near_its_last_used_page() {
    let text = "y".repeat(230);
    let all: Vec<usize> = (0..5000).collect();
    let gone: Vec<usize> = all.iter().copied().filter(|i| i % 10 != 0).collect();
    let file = TempFile::new();
    {
        let (d, _) = Durable::open(&file.0).unwrap();
        d.create_table("t1x", "T1x").unwrap();
        put_many(&d, &all, Some(&text));
        put_many(&d, &gone, None);
    }
    let (before, after) = compact_file(&file.0).unwrap();
    let db = Database::builder().open(&file.0).unwrap();
    let txn = db.begin_write().unwrap();
    let stats = txn.stats().unwrap();
    txn.abort().unwrap();
    let used = stats.allocated_pages() * stats.page_size() as u64;
    // No page written after the moves is left alone at the end of the file.
    assert!(
        after <= used + used / 4 + 64 * 1024,
        "{before} -> {after}, {used} bytes of pages in use"
    );
}

/// The leaf pages of the entities of table 1 of `db`, and their rows.
fn leaf_pages(db: &Database) -> (u64, u64) {
    use redb::ReadableTableMetadata as _;
    let txn = db.begin_write().unwrap();
    let stats = txn.stats().unwrap();
    let rows = txn
        .open_table(entities_def(&entities_name(1)))
        .unwrap()
        .len()
        .unwrap();
    txn.abort().unwrap();
    (stats.leaf_pages(), rows)
}

#[test]
fn writes_of_partitions_in_turn_leave_leaves_as_full_as_sorted_writes() {
    // 40 partitions, 12 rounds: each round writes 10 rows at the end of
    // every partition's range, as a bulk write of interleaved input does.
    let (partitions, rounds, per) = (40usize, 12usize, 10usize);
    let record = vec![0x01u8; 150];
    let key = |p: usize, r: usize| {
        crate::backend::embedded::key::entity_key(&format!("p{p:03}"), &format!("r{r:05}"))
    };
    let job = |p: usize, round: usize| -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        // In the write's order, not the keys' (a transaction's rows may come
        // in any order).
        (0..per)
            .rev()
            .map(|k| (key(p, round * per + k), Some(record.clone())))
            .collect()
    };
    let fill = |interleaved: bool| -> (u64, u64) {
        let file = TempFile::new();
        let db = Database::create(&file.0).unwrap();
        let order: Vec<(usize, usize)> = if interleaved {
            (0..rounds)
                .flat_map(|r| (0..partitions).map(move |p| (p, r)))
                .collect()
        } else {
            (0..partitions)
                .flat_map(|p| (0..rounds).map(move |r| (p, r)))
                .collect()
        };
        for chunk in order.chunks(8) {
            let mut txn = db.begin_write().unwrap();
            txn.set_durability(redb::Durability::None).unwrap();
            {
                let mut t = txn.open_table(entities_def(&entities_name(1))).unwrap();
                for &(p, r) in chunk {
                    group::apply_rows(&mut t, &job(p, r)).unwrap();
                }
            }
            txn.commit().unwrap();
        }
        leaf_pages(&db)
    };
    let (sorted, rows) = fill(false);
    assert_eq!(rows, (partitions * rounds * per) as u64);
    let (interleaved, rows) = fill(true);
    assert_eq!(rows, (partitions * rounds * per) as u64);
    assert!(
        // Plain inserts leave 343 leaves for 288 (the halves of split leaves
        // before each partition's gap); the cursor's runs 283 for 280.
        interleaved * 100 <= sorted * 105,
        "leaf pages: interleaved {interleaved}, sorted {sorted}"
    );
}

#[test]
fn a_write_of_several_rows_replaces_and_removes_what_exists_and_adds_the_rest() {
    let file = TempFile::new();
    let db = Database::create(&file.0).unwrap();
    let key = |r: usize| crate::backend::embedded::key::entity_key("p", &format!("r{r:03}"));
    let txn = db.begin_write().unwrap();
    {
        let mut t = txn.open_table(entities_def(&entities_name(1))).unwrap();
        // Even rows exist.
        let rows: Vec<_> = (0..20)
            .step_by(2)
            .map(|r| (key(r), Some(vec![1u8, r as u8])))
            .collect();
        let added = group::apply_rows(&mut t, &rows).unwrap();
        let k = key(0).len() as i64;
        assert_eq!(added.freed, 0);
        assert_eq!(added.live, 10 * (k + 2), "ten keys and records of 2 bytes");
        // One write: rows 0..20 put (replacing the even ones), but 4 and 7
        // removed (4 exists, 7 does not); in no particular order.
        let mut rows: Vec<_> = (0..20)
            .filter(|r| *r != 4 && *r != 7)
            .map(|r| (key(r), Some(vec![2u8, r as u8, 0])))
            .collect();
        rows.reverse();
        rows.swap(0, 5);
        rows.push((key(4), None));
        rows.push((key(7), None));
        let sizes = group::apply_rows(&mut t, &rows).unwrap();
        assert_eq!(sizes.freed, (k + 2) as u64, "row 4's key and record");
        // 9 even rows grown from 2 to 3 bytes, 9 odd ones (not 7) added, row
        // 4 removed.
        assert_eq!(sizes.live, 9 + 9 * (k + 3) - (k + 2));
        let got: Vec<(Vec<u8>, Vec<u8>)> = t
            .iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                (k.value().to_vec(), v.value().to_vec())
            })
            .collect();
        let want: Vec<(Vec<u8>, Vec<u8>)> = (0..20)
            .filter(|r| *r != 4 && *r != 7)
            .map(|r| (key(r), vec![2u8, r as u8, 0]))
            .collect();
        assert_eq!(got, want);
    }
    txn.commit().unwrap();
}

#[test]
fn a_file_whose_entities_take_at_most_half_of_it_is_compacted_when_it_closes() {
    // Not by deletes: 120 entities of 60 KB replaced by entities of 10 bytes.
    let file = TempFile::new();
    let len = || std::fs::metadata(&file.0).unwrap().len();
    let live = |path: &Path| {
        let db = Database::create(path).unwrap();
        let txn = db.begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        meta.get(LIVE).unwrap().map(|v| v.value())
    };
    let big = "x".repeat(60_000);
    {
        let (d, _) = Durable::open(&file.0).unwrap();
        let id = d.create_table("t1x", "T1x").unwrap();
        for i in 0..120 {
            put(&d, "t1x", id, i, Some(&big));
        }
    }
    let full = len();
    assert!(full > 7_000_000, "{full}");
    let before = live(&file.0).expect("a new file keeps its entities' size");
    assert!(before > 7_200_000 && before < 7_300_000, "{before}");
    assert_eq!(len(), full, "not compacted: its entities fill it");
    {
        let (d, _) = Durable::open(&file.0).unwrap();
        for i in 0..120 {
            put(&d, "t1x", 1, i, Some("small"));
        }
    }
    let after = len();
    assert!(
        after < full / 10,
        "compacted at the close: {full} -> {after}"
    );
    let now = live(&file.0).unwrap();
    assert!(now < 10_000, "{now}");
    let (d, loaded) = Durable::open(&file.0).unwrap();
    assert_eq!(entities(&d, &loaded).len(), 120);
}

#[test]
fn compaction_at_close_is_decided_on_deletes_or_on_the_entities_share_of_the_file() {
    use files::worth_compacting as worth;
    let mib = 1 << 20;
    // Deletes: at least 1 MiB and a quarter of the file.
    assert!(worth(8 * mib, 2 * mib, None, true));
    assert!(!worth(8 * mib, 2 * mib - 1, None, true));
    assert!(!worth(2 * mib, mib - 1, None, true));
    // The entities' share: at most half of a file of at least 4 MiB that
    // holds no queue or blob.
    assert!(worth(8 * mib, 0, Some(4 * mib), true));
    assert!(!worth(8 * mib, 0, Some(4 * mib + 1), true));
    assert!(!worth(4 * mib - 1, 0, Some(0), true));
    assert!(
        !worth(8 * mib, 0, Some(0), false),
        "queues and blobs are not counted"
    );
    assert!(!worth(8 * mib, 0, None, true), "unknown in an older file");
}
