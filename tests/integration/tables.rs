//! Table management against Azurite: create, delete, list with prefix, filter
//! and paging, and table-name validation before any I/O.

use crate::common;

use tablekit::testing::Backend;
use tablekit::DynamicEntity;

tablekit::testing::conformance! {
    async fn create_table_then_create_again_is_a_conflict(env) {
        let svc = env.tables().clone();
        let name = common::unique_name("Tbl");

        svc.create_table(&name).await.unwrap();
        let err = svc.create_table(&name).await.unwrap_err();
        assert!(err.is_conflict(), "{err:?}");
        assert_eq!(err.code(), Some(&tablekit::error::ErrorCode::TableAlreadyExists));
        svc.delete_table(&name).await.unwrap();
    }
}

tablekit::testing::conformance! {
    async fn create_table_if_not_exists_is_true_then_false(env) {
        let svc = env.tables().clone();
        let name = common::unique_name("Tbl");

        assert!(svc.create_table_if_not_exists(&name).await.unwrap());
        assert!(!svc.create_table_if_not_exists(&name).await.unwrap());
        let table = svc.table::<DynamicEntity>(&name).unwrap();
        assert!(!table.create_table_if_not_exists().await.unwrap());
        assert!(svc.delete_table_if_exists(&name).await.unwrap());
    }
}

tablekit::testing::conformance! {
    async fn delete_table_removes_it_and_a_second_delete_is_not_found(env) {
        let svc = env.tables().clone();
        let name = common::unique_name("Tbl");

        svc.create_table(&name).await.unwrap();
        svc.delete_table(&name).await.unwrap();
        let listed = svc.list_tables().prefix(&name).fetch_all().await.unwrap();
        assert!(listed.is_empty(), "{listed:?}");
        let err = svc.delete_table(&name).await.unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
        assert_eq!(err.code(), Some(&tablekit::error::ErrorCode::ResourceNotFound));
    }
}

tablekit::testing::conformance! {
    async fn delete_table_if_exists_is_true_then_false(env) {
        let svc = env.tables().clone();
        let name = common::unique_name("Tbl");

        svc.create_table(&name).await.unwrap();
        assert!(svc.delete_table_if_exists(&name).await.unwrap());
        assert!(!svc.delete_table_if_exists(&name).await.unwrap());

        let table = svc
            .table::<DynamicEntity>(&common::unique_name("Tbl"))
            .unwrap();
        assert!(table.create_table_if_not_exists().await.unwrap());
        assert!(table.delete_table_if_exists().await.unwrap());
        assert!(!table.delete_table_if_exists().await.unwrap());
    }
}

tablekit::testing::conformance! {
    async fn operations_on_a_deleted_table_are_not_found(env) {
        let svc = env.tables().clone();
        let table = common::fresh_table::<DynamicEntity>(&svc, "Tbl").await;
        table.delete_table().await.unwrap();

        let err = table
            .insert(&DynamicEntity::new("p", "r"))
            .await
            .unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
        assert_eq!(err.code(), Some(&tablekit::error::ErrorCode::TableNotFound));
    }
}

tablekit::testing::conformance! {
    async fn list_tables_sees_created_tables(env) {
        let svc = env.tables().clone();
        let a = common::fresh_table::<DynamicEntity>(&svc, "Lst").await;
        let b = common::fresh_table::<DynamicEntity>(&svc, "Lst").await;

        let all = svc.list_tables().fetch_all().await.unwrap();
        assert!(all.iter().any(|n| n == a.name()), "{all:?}");
        assert!(all.iter().any(|n| n == b.name()), "{all:?}");
        common::drop_table(&a).await;
        common::drop_table(&b).await;
    }
}

/// Three tables under a fresh prefix, plus one whose name differs from the prefix
/// only in its last character (so it sorts right next to them).
async fn prefixed_tables(svc: &tablekit::TableServiceClient) -> (String, Vec<String>, String) {
    let prefix = common::unique_name("Pfx");
    let mut names: Vec<String> = ["A", "B", "C"]
        .iter()
        .map(|s| format!("{prefix}{s}"))
        .collect();
    let mut outsider = prefix.clone();
    let last = outsider.pop().unwrap();
    outsider.push(if last == 'z' { 'y' } else { 'z' });
    outsider.push('A');
    for n in names.iter().chain([&outsider]) {
        svc.create_table(n).await.unwrap();
    }
    names.sort();
    (prefix, names, outsider)
}

tablekit::testing::conformance! {
    async fn list_tables_with_prefix_returns_exactly_the_prefixed_tables(env) {
        let svc = env.tables().clone();
        let (prefix, names, outsider) = prefixed_tables(&svc).await;

        let mut listed = svc.list_tables().prefix(&prefix).fetch_all().await.unwrap();
        listed.sort();
        assert_eq!(listed, names);
        assert!(!listed.contains(&outsider));

        for n in names.iter().chain([&outsider]) {
            svc.delete_table(n).await.unwrap();
        }
    }
}

tablekit::testing::conformance! {
    async fn list_tables_with_page_size_one_follows_next_table_name(env) {
        let svc = env.tables().clone();
        let (prefix, names, outsider) = prefixed_tables(&svc).await;

        let listed = svc
            .list_tables()
            .prefix(&prefix)
            .page_size(1)
            .fetch_all()
            .await
            .unwrap();
        let mut sorted = listed.clone();
        sorted.sort();
        assert_eq!(sorted, names, "one name per page, all pages followed");
        assert_eq!(listed.len(), 3, "no name twice: {listed:?}");

        for n in names.iter().chain([&outsider]) {
            svc.delete_table(n).await.unwrap();
        }
    }
}

#[tokio::test]
async fn list_tables_page_size_out_of_range_is_rejected_before_io() {
    let svc = common::offline_service();
    for n in [0, 1001] {
        let err = svc
            .list_tables()
            .page_size(n)
            .fetch_all()
            .await
            .unwrap_err();
        let msg = common::assert_invalid(&err);
        assert!(
            msg.contains(&n.to_string()) && msg.contains("1000"),
            "{msg}"
        );
    }
}

#[tokio::test]
async fn offline_client_really_fails_in_transport() {
    // The control for the "before I/O" tests: a request that does go out fails
    // with a transport error, not a validation error.
    let svc = common::offline_service();
    let err = svc.create_table("ValidName").await.unwrap_err();
    assert!(err.is_transport(), "{err:?}");
    assert!(!err.is_invalid_input());
}

#[tokio::test]
async fn invalid_table_names_are_rejected_before_io_naming_the_table() {
    let svc = common::offline_service();
    let too_long = format!("a{}", "b".repeat(63));
    for name in [
        "ab", "1Blogs", "my-table", "my_table", "tables", "Tables", "", &too_long,
    ] {
        let quoted = format!("{name:?}");
        let errors = [
            svc.table::<DynamicEntity>(name).unwrap_err(),
            svc.create_table(name).await.unwrap_err(),
            svc.create_table_if_not_exists(name).await.unwrap_err(),
            svc.delete_table(name).await.unwrap_err(),
            svc.delete_table_if_exists(name).await.unwrap_err(),
        ];
        for err in errors {
            let msg = common::assert_invalid(&err);
            assert!(msg.contains(&quoted), "{name}: {msg}");
            assert!(matches!(
                err.validation(),
                Some(tablekit::error::ValidationError::TableName { .. })
            ));
        }
    }
    let msg = svc.table::<DynamicEntity>("ab").unwrap_err().to_string();
    assert_eq!(
        msg,
        "invalid input: table name \"ab\" is invalid: a table name has 3 to 63 characters"
    );
    let msg = svc.create_table("tables").await.unwrap_err().to_string();
    assert!(msg.contains("reserved"), "{msg}");
}

#[tokio::test]
async fn valid_table_names_are_accepted() {
    let svc = common::offline_service();
    let longest = format!("a{}", "B".repeat(62));
    for name in ["Blogs", "Channels", "SocialNetworkTable", "abc", &longest] {
        assert!(svc.table::<DynamicEntity>(name).is_ok(), "{name}");
    }
}

tablekit::testing::conformance! {
    async fn creating_a_table_differing_only_in_case_is_a_conflict(env) {
        let svc = env.tables().clone();
        let backend = env.backend();
        let name = common::unique_name("Case");

        svc.create_table(&name).await.unwrap();
        let upper = name.to_ascii_uppercase();
        let err = svc.create_table(&upper).await.unwrap_err();
        assert!(err.is_conflict(), "{err:?}");
        // Names are case-insensitive and case-preserving (data model §3.1): the
        // listing shows the name as created, and entity operations through another
        // case reach the same table. Azurite (3.35) is case-insensitive for create
        // but answers entity operations through another case with 404
        // TableNotFound (a listed deviation).
        let listed = svc.list_tables().prefix(&name).fetch_all().await.unwrap();
        assert_eq!(listed, vec![name.clone()]);
        let other_case = svc.table::<tablekit::DynamicEntity>(&upper).unwrap();
        let inserted = other_case
            .insert(&tablekit::DynamicEntity::new("p", "r"))
            .await;
        match backend {
            Backend::Memory | Backend::File | Backend::Served => {
                inserted.unwrap();
                let same = svc.table::<tablekit::DynamicEntity>(&name).unwrap();
                assert!(same.get(("p", "r")).await.unwrap().is_some());
            }
            Backend::Azurite => {
                let err = inserted.unwrap_err();
                assert_eq!(err.code(), Some(&tablekit::error::ErrorCode::TableNotFound), "{err:?}");
            }
        }
        svc.delete_table(&name).await.unwrap();
    }
}

tablekit::testing::conformance! {
    async fn list_tables_with_a_typed_filter_a_raw_filter_and_a_prefix_together(env) {
        let svc = env.tables().clone();
        use tablekit::table::TableItem;
        let (prefix, names, outsider) = prefixed_tables(&svc).await;
        let [a, b, c] = [&names[0], &names[1], &names[2]];

        // A range of names, typed: the outsider sorts after C, so `gt A` alone
        // would take it; with the prefix it does not.
        let mut listed = svc
            .list_tables()
            .filter(TableItem::NAME.gt(a.as_str()))
            .prefix(&prefix)
            .fetch_all()
            .await
            .unwrap();
        listed.sort();
        assert_eq!(listed, [b.clone(), c.clone()]);

        // Equalities joined with `or`, not a range: the typed `is_in`.
        let mut listed = svc
            .list_tables()
            .filter(TableItem::NAME.is_in([a.as_str(), outsider.as_str()]))
            .fetch_all()
            .await
            .unwrap();
        listed.sort();
        let mut expected = vec![a.clone(), outsider.clone()];
        expected.sort();
        assert_eq!(listed, expected);

        // The raw escape hatch, combined with a typed filter: both hold.
        let raw = format!("TableName eq '{b}' or TableName eq '{c}' or TableName eq '{outsider}'");
        let mut listed = svc
            .list_tables()
            .filter_raw(raw.as_str())
            .filter(!TableItem::NAME.eq(c.as_str()))
            .page_size(1)
            .fetch_all()
            .await
            .unwrap();
        listed.sort();
        let mut expected = vec![b.clone(), outsider.clone()];
        expected.sort();
        assert_eq!(listed, expected, "across pages of one name");

        // A filter that no name meets lists nothing.
        let none = svc
            .list_tables()
            .filter(TableItem::NAME.eq(format!("{prefix}Nothing")))
            .fetch_all()
            .await
            .unwrap();
        assert!(none.is_empty(), "{none:?}");

        for n in names.iter().chain([&outsider]) {
            svc.delete_table(n).await.unwrap();
        }
    }
}

#[tokio::test]
async fn list_tables_filters_are_checked_before_io() {
    use tablekit::table::TableItem;
    let svc = common::offline_service();
    for raw in ["", "TableName eq", "TableName eq 'a' and"] {
        let err = svc
            .list_tables()
            .filter_raw(raw)
            .fetch_all()
            .await
            .unwrap_err();
        common::assert_invalid(&err);
    }
    // 14 comparisons and the prefix's two are over the service's 15.
    let names: Vec<String> = (0..14).map(|i| format!("T{i}")).collect();
    let many = TableItem::NAME.is_in(names.iter().map(String::as_str));
    let err = svc
        .list_tables()
        .filter(many.clone())
        .fetch_all()
        .await
        .unwrap_err();
    assert!(
        !err.is_invalid_input(),
        "14 pass the checks (then offline fails): {err}"
    );
    let err = svc
        .list_tables()
        .filter(many)
        .prefix("T")
        .fetch_all()
        .await
        .unwrap_err();
    let msg = common::assert_invalid(&err);
    assert!(msg.contains("16 comparisons"), "{msg}");
}
