//! Index entities behind a server (or proxy) that drops every ETag from its
//! answers: each write that needs an ETag it was not given fails with a
//! decode error naming the missing ETag, and never panics. The lookups, which
//! need no ETag, still work. Azurite only: the embedded store has no wire to
//! strip ETags from.

use crate::common;

use common::etag_stripper::EtagStripper;

use tablekit::error::ErrorKind;
use tablekit::{DynamicEntity, ETag, Error, IfMatch, TableClient, TableEntity};
use tablekit_patterns::index_entity::{IndexEntities, SeparateIndexEntities};

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{employee_id:06}")]
struct Employee {
    department: String,
    employee_id: u32,
    last_name: String,
    #[tablekit(etag)]
    etag: Option<ETag>,
}

fn employee(department: &str, id: u32, last: &str) -> Employee {
    Employee {
        department: department.into(),
        employee_id: id,
        last_name: last.into(),
        etag: None,
    }
}

/// The write's outcome: a decode error that names the ETag it missed (a
/// panic inside the pattern fails the test before this).
#[track_caller]
fn assert_no_etag_error<T: std::fmt::Debug>(result: tablekit::Result<T>, what: &str) -> Error {
    let err = result.expect_err(what);
    assert!(
        matches!(err.kind(), ErrorKind::Decode(_)),
        "{what}: {err:?}"
    );
    assert!(err.to_string().contains("ETag"), "{what}: {err}");
    err
}

/// The tables of one case: a direct client, and the same table through the
/// stripping proxy. `None` without Azurite.
async fn tables() -> Option<(TableClient<Employee>, TableClient<Employee>)> {
    let direct = common::service()?;
    let conn = std::env::var(common::CONNECTION_STRING_VAR).unwrap();
    let proxy = EtagStripper::start(&conn).await;
    let table = common::fresh_table::<Employee>(&direct, "NoEtag").await;
    let stripped = proxy.service().table::<Employee>(table.name()).unwrap();
    // The proxy does strip them: a read through it has none.
    table.insert(&employee("Sales", 1, "Probe")).await.unwrap();
    let probe = stripped
        .with_type::<DynamicEntity>()
        .query()
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(probe.len(), 1);
    assert_eq!(probe[0].etag, None, "the proxy strips odata.etag");
    table
        .delete(("Sales", "000001"), IfMatch::Any)
        .await
        .unwrap();
    Some((table, stripped))
}

/// Option 2: adding to, removing from and moving between index entities
/// read without their ETags fail cleanly, and leave the index as it was.
#[tokio::test]
async fn same_partition_writes_without_etags_are_decode_errors() {
    let Some((table, stripped)) = tables().await else {
        return;
    };
    let index = |t: TableClient<Employee>| {
        IndexEntities::new(t, "lastname_", |e: &Employee| e.last_name.clone())
    };
    let (direct, broken) = (index(table.clone()), index(stripped));
    let mut jones = employee("Sales", 152, "Jones");
    direct.insert(&mut jones).await.unwrap();

    // Joining the existing Jones index entity needs its ETag.
    let mut other = employee("Sales", 153, "Jones");
    assert_no_etag_error(broken.insert(&mut other).await, "insert");
    // Leaving it too (the entity's own ETag is the caller's).
    assert_no_etag_error(
        broken.delete(&jones, jones.etag.clone().unwrap()).await,
        "delete",
    );
    // Under IfMatch::Any the stored entity is read for its value and ETag.
    let mut smith = employee("Sales", 152, "Smith");
    assert_no_etag_error(
        broken.update(&jones, &mut smith, IfMatch::Any).await,
        "update under IfMatch::Any",
    );
    assert_no_etag_error(
        broken.delete(&jones, IfMatch::Any).await,
        "delete under IfMatch::Any",
    );

    // Nothing was written, and the lookups still work through the proxy.
    assert_eq!(direct.ids("Sales", "Jones").await.unwrap(), ["000152"]);
    assert_eq!(broken.ids("Sales", "Jones").await.unwrap(), ["000152"]);
    assert_eq!(broken.find("Sales", "Jones").await.unwrap().len(), 1);
}

/// Option 3: claims added to and taken out of index entities read without
/// their ETags fail cleanly.
#[tokio::test]
async fn separate_index_writes_without_etags_are_decode_errors() {
    let Some((table, stripped)) = tables().await else {
        return;
    };
    let direct_svc = common::service().unwrap();
    let index_table = common::fresh_table::<DynamicEntity>(&direct_svc, "NoEtagIndex").await;
    let conn = std::env::var(common::CONNECTION_STRING_VAR).unwrap();
    let proxy = EtagStripper::start(&conn).await;
    let stripped_index = proxy
        .service()
        .table::<DynamicEntity>(index_table.name())
        .unwrap();
    let index = |t: TableClient<Employee>, i: TableClient<DynamicEntity>| {
        SeparateIndexEntities::new(t, i, "lastname", "", |e: &Employee| e.last_name.clone())
    };
    let direct = index(table.clone(), index_table.clone());
    let broken = index(stripped, stripped_index);
    let mut jones = employee("Sales", 152, "Jones");
    direct.insert(&mut jones).await.unwrap();

    let mut ken = employee("Marketing", 10, "Jones");
    assert_no_etag_error(broken.insert(&mut ken).await, "insert");
    assert!(table.get(("Marketing", "000010")).await.unwrap().is_none());
    let mut smith = employee("Sales", 152, "Smith");
    assert_no_etag_error(
        broken.update(&jones, &mut smith, IfMatch::Any).await,
        "update under IfMatch::Any",
    );
    // A dangling claim to prune: its entity is gone.
    table.delete(jones.key(), IfMatch::Any).await.unwrap();
    assert_no_etag_error(broken.remove_dangling("Jones").await, "remove_dangling");
    let lookup = broken.find("Jones").await.unwrap();
    assert!(lookup.entities.is_empty());
    assert_eq!(lookup.dangling.len(), 1, "the claim is still there");
}
