//! Each request is a `tablekit.request` span with the operation, table, HTTP
//! method, status, request id and duration, and nothing secret or from the entity.

use crate::common;

use tablekit::{DynamicEntity, IfMatch};
use tablekit_test_support::{field, Recorder};

#[test]
fn requests_are_spans_with_status_and_request_id_but_no_secrets_or_values() {
    let Some(svc) = common::service() else { return };
    let recorder = Recorder::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(recorder.clone(), || {
        rt.block_on(async {
            let table = common::fresh_table::<DynamicEntity>(&svc, "Traced").await;
            table
                .insert(&DynamicEntity::new("p", "r").with("Secret", "entity-content-xyz"))
                .await
                .unwrap();
            let missing = table.delete(("p", "nope"), IfMatch::Any).await.unwrap_err();
            assert!(missing.is_not_found());
            common::drop_table(&table).await;
        })
    });

    let spans = recorder.spans();
    let requests: Vec<_> = spans
        .iter()
        .filter(|(name, _)| name == "tablekit.request")
        .map(|(_, f)| f)
        .collect();
    let insert = requests
        .iter()
        .find(|f| field(f, "operation") == Some("insert"))
        .expect("an insert span");
    assert_eq!(field(insert, "method"), Some("POST"));
    assert_eq!(field(insert, "status"), Some("204"));
    assert!(field(insert, "table").is_some_and(|t| t.starts_with("Traced")));
    assert!(field(insert, "request_id").is_some_and(|id| !id.is_empty()));
    assert!(field(insert, "duration_us").is_some());

    let delete = requests
        .iter()
        .find(|f| field(f, "operation") == Some("delete"))
        .expect("a delete span");
    assert_eq!(field(delete, "method"), Some("DELETE"));
    assert_eq!(field(delete, "status"), Some("404"));

    let everything = format!("{spans:?} {:?}", recorder.events());
    assert!(!everything.contains(common::KEY_FRAGMENT), "no account key");
    assert!(!everything.contains("SharedKey"), "no signature");
    assert!(
        !everything.contains("entity-content-xyz"),
        "no entity values"
    );
}
