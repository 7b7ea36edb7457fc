//! Heterogeneous tables (an enum of entity types, dispatched on a discriminator
//! property or a RowKey prefix) and projections (a smaller type that reads
//! some properties of another with `$select`), against Azurite.

use crate::common;

use futures::TryStreamExt;
use tablekit::{entity::RawEntity, filter::EntityColumns, DynamicEntity, EdmValue, TableEntity};

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{user}", row_key = "{posted}_Blog")]
struct BlogPost {
    user: String,
    posted: String,
    text: String,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{user}", row_key = "{posted}_Photo")]
struct Photo {
    user: String,
    posted: String,
    uri: String,
}

/// The guide's social-network table: kinds told apart by `EntityType`.
#[derive(TableEntity, Debug, Clone, PartialEq)]
enum Activity {
    Blog(BlogPost),
    #[tablekit(rename = "Picture")]
    Photo(Photo),
    #[tablekit(unknown)]
    Other(DynamicEntity),
}

/// Without an unknown variant, an unknown kind is an error.
#[derive(TableEntity, Debug)]
enum StrictActivity {
    Blog(BlogPost),
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "EMPLOYEE_{id:06}")]
struct Employee {
    department: String,
    id: u32,
    name: String,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "DEPARTMENT_{department}")]
struct Department {
    department: String,
    manager: String,
}

/// The guide's other way: the kind is a RowKey prefix.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(row_key_prefix)]
enum Org {
    #[tablekit(rename = "EMPLOYEE_")]
    Employee(Employee),
    #[tablekit(rename = "DEPARTMENT_")]
    Department(Department),
}

/// A full employee record, and a projection of it.
#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(partition_key = "{department}", row_key = "{id:06}")]
struct Staff {
    department: String,
    id: u32,
    first_name: String,
    last_name: String,
    age: i32,
    salary: f64,
    notes: Option<String>,
}

#[derive(TableEntity, Debug, Clone, PartialEq)]
#[tablekit(
    projection_of = "Staff",
    partition_key = "{department}",
    row_key = "{id:06}"
)]
struct StaffName {
    department: String,
    id: u32,
    first_name: String,
    notes: Option<String>,
}

#[tokio::test]
async fn an_enum_reads_each_kind_by_its_entity_type() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<Activity>(&svc, "Hetero").await;
    let blog = Activity::Blog(BlogPost {
        user: "joe".into(),
        posted: "0001".into(),
        text: "hello".into(),
    });
    let photo = Activity::Photo(Photo {
        user: "joe".into(),
        posted: "0002".into(),
        uri: "http://x/1.jpg".into(),
    });
    t.insert(&blog).await.unwrap();
    t.insert(&photo).await.unwrap();
    let video = DynamicEntity::new("joe", "0003_Video").with("EntityType", "Video");
    t.with_type::<DynamicEntity>().insert(&video).await.unwrap();

    let all: Vec<Activity> = t.query().stream().try_collect().await.unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0], blog);
    assert_eq!(all[1], photo);
    assert!(
        matches!(&all[2], Activity::Other(d) if d.get("EntityType") == Some(&EdmValue::from("Video")))
    );
    assert_eq!(all[1].discriminator(), Some("Picture"));

    let stored = t
        .with_type::<DynamicEntity>()
        .get(("joe", "0002_Photo"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.get("EntityType"), Some(&EdmValue::from("Picture")));

    let err = t
        .with_type::<StrictActivity>()
        .get(("joe", "0002_Photo"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("\"Picture\""), "{err}");
    common::drop_table(&t).await;
}

#[tokio::test]
async fn an_enum_reads_each_kind_by_its_row_key_prefix() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<Org>(&svc, "Hetero").await;
    let e = Org::Employee(Employee {
        department: "Sales".into(),
        id: 123,
        name: "Jones".into(),
    });
    let d = Org::Department(Department {
        department: "Sales".into(),
        manager: "Smith".into(),
    });
    t.insert(&e).await.unwrap();
    t.insert(&d).await.unwrap();
    assert_eq!(e.row_key(), "EMPLOYEE_000123");
    let all: Vec<Org> = t.query().stream().try_collect().await.unwrap();
    assert_eq!(all, vec![d.clone(), e.clone()], "DEPARTMENT_ sorts first");
    let stored = t
        .with_type::<DynamicEntity>()
        .get(("Sales", "EMPLOYEE_000123"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.get("EntityType"),
        None,
        "no discriminator property with a RowKey prefix"
    );

    let stray = DynamicEntity::new("Sales", "PROJECT_1");
    let err = Org::decode(&RawEntity::from_dynamic(&stray)).unwrap_err();
    assert!(err.to_string().contains("PROJECT_1"), "{err}");
    common::drop_table(&t).await;
}

#[tokio::test]
async fn a_projection_selects_only_its_properties() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<Staff>(&svc, "Project").await;
    let s = Staff {
        department: "Sales".into(),
        id: 7,
        first_name: "Ann".into(),
        last_name: "Lee".into(),
        age: 41,
        salary: 30000.5,
        notes: None,
    };
    t.insert(&s).await.unwrap();

    assert_eq!(StaffName::select(), Some(&["FirstName", "Notes"][..]));
    let names: Vec<StaffName> = t
        .with_type::<StaffName>()
        .query()
        .stream()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        names,
        vec![StaffName {
            department: "Sales".into(),
            id: 7,
            first_name: "Ann".into(),
            notes: None
        }]
    );
    // The projection's property names are the source's.
    assert_eq!(
        StaffName::columns().first_name.name(),
        Staff::columns().first_name.name()
    );
    common::drop_table(&t).await;
}

#[test]
fn columns_name_every_stored_property() {
    let c = Staff::columns();
    assert_eq!(c.partition_key.name(), "PartitionKey");
    assert_eq!(c.row_key.name(), "RowKey");
    assert_eq!(c.timestamp.name(), "Timestamp");
    assert_eq!(c.first_name.name(), "FirstName");
    assert_eq!(c.salary.name(), "Salary");
    // An Option<T> field's column holds T.
    let _: tablekit::filter::Column<Staff, String> = c.notes;
    assert_eq!(Activity::columns().row_key.name(), "RowKey");
}
