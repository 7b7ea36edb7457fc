//! Text that a body split into chunks, or a batch parser's line pattern, could
//! damage: astral characters (4 UTF-8 bytes, a surrogate pair in UTF-16), long
//! CJK text, and the JavaScript line terminators U+2028/U+2029, through every
//! write mode including transactions. Bodies go out with non-ASCII escaped as
//! `\uXXXX`, so each must come back exactly as written.

use crate::common;
use tablekit::{DynamicEntity, EdmValue, IfMatch, UpdateMode};

/// 16,384 × U+1F600: 65,536 bytes in UTF-16, exactly the 64 KiB a String may hold.
fn astral() -> String {
    "\u{1F600}".repeat(16_384)
}

/// 30,000 CJK characters (60,000 bytes in UTF-16).
fn cjk() -> String {
    "\u{6771}\u{4eac}\u{4e2d}\u{6587}\u{65e5}".repeat(6_000)
}

fn separators() -> String {
    "line\u{2028}paragraph\u{2029}end \u{2028}\u{2029}".repeat(10)
}

fn entity(rk: &str) -> DynamicEntity {
    DynamicEntity::new("Unicode", rk)
        .with("Astral", astral())
        .with("Cjk", cjk())
        .with("Separators", separators())
}

async fn assert_stored(t: &tablekit::TableClient<DynamicEntity>, rk: &str) {
    let read = t
        .get(("Unicode", rk))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{rk} was not stored"));
    for (name, want) in [
        ("Astral", astral()),
        ("Cjk", cjk()),
        ("Separators", separators()),
    ] {
        let got = read.properties.get(name);
        assert!(
            got == Some(&EdmValue::String(want.clone())),
            "{rk}: property {name} came back changed ({} chars, want {})",
            match got {
                Some(EdmValue::String(s)) => s.chars().count(),
                _ => 0,
            },
            want.chars().count()
        );
    }
}

#[tokio::test]
async fn unicode_survives_every_single_write_mode() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<DynamicEntity>(&svc, "Unicode").await;

    t.insert(&entity("insert")).await.unwrap();
    assert_stored(&t, "insert").await;

    for (rk, mode) in [
        ("merge", UpdateMode::Merge),
        ("replace", UpdateMode::Replace),
    ] {
        let upsert = format!("upsert-{rk}");
        t.upsert(&entity(&upsert), mode).await.unwrap();
        assert_stored(&t, &upsert).await;

        let update = format!("update-{rk}");
        t.insert(&DynamicEntity::new("Unicode", &update).with("Astral", "x"))
            .await
            .unwrap();
        t.update(&entity(&update), mode, IfMatch::Any)
            .await
            .unwrap();
        assert_stored(&t, &update).await;
    }
}

#[tokio::test]
async fn unicode_survives_transactions() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<DynamicEntity>(&svc, "UnicodeTx").await;
    t.insert(&DynamicEntity::new("Unicode", "tx-update").with("Astral", "x"))
        .await
        .unwrap();

    // Four operations of nearly 200 KB each: well inside the 4 MiB payload.
    let mut tx = t.transaction();
    tx.insert(&entity("tx-insert")).unwrap();
    tx.upsert(&entity("tx-merge"), UpdateMode::Merge).unwrap();
    tx.upsert(&entity("tx-replace"), UpdateMode::Replace)
        .unwrap();
    tx.update(&entity("tx-update"), UpdateMode::Replace, IfMatch::Any)
        .unwrap();
    tx.send().await.unwrap();

    for rk in ["tx-insert", "tx-merge", "tx-replace", "tx-update"] {
        assert_stored(&t, rk).await;
    }
}
