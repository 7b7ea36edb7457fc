//! What is read back does not depend on the OData metadata level asked for
//! (`Accept: application/json;odata=nometadata|minimalmetadata|fullmetadata`).

use crate::common;

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use tablekit::{
    edm,
    entity::{PropertyWriter, RawEntity},
    options::Metadata,
    Account, DynamicEntity, ETag, EdmValue, Result, TableClient, TableEntity, TableServiceClient,
};

/// A typed entity with one field of every Edm type: it knows its schema, so it
/// can be read without the service's type annotations.
#[derive(Debug, Clone, PartialEq)]
struct AllTypes {
    pk: String,
    rk: String,
    i32_min: i32,
    i64_max: i64,
    i64_small: i64,
    double: f64,
    integral_double: f64,
    infinity: f64,
    when: DateTime<Utc>,
    id: uuid::Uuid,
    bytes: Vec<u8>,
    flag: bool,
    text: String,
    numeric_text: String,
    etag: Option<ETag>,
}

impl TableEntity for AllTypes {
    fn partition_key(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.pk)
    }
    fn row_key(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.rk)
    }
    fn write_properties<W: PropertyWriter + ?Sized>(&self, out: &mut W) -> Result<()> {
        out.int32("I32Min", self.i32_min)?;
        out.int64("I64Max", self.i64_max)?;
        out.int64("I64Small", self.i64_small)?;
        out.double("Double", self.double)?;
        out.double("IntegralDouble", self.integral_double)?;
        out.double("Infinity", self.infinity)?;
        out.datetime("When", &self.when)?;
        out.guid("Id", &self.id)?;
        out.binary("Bytes", &self.bytes)?;
        out.boolean("Flag", self.flag)?;
        out.string("Text", &self.text)?;
        out.string("NumericText", &self.numeric_text)
    }
    fn decode(e: &RawEntity<'_>) -> Result<Self> {
        Ok(AllTypes {
            pk: e.partition_key().to_owned(),
            rk: e.row_key().to_owned(),
            i32_min: e.required("I32Min")?.to_i32()?,
            i64_max: e.required("I64Max")?.to_i64()?,
            i64_small: e.required("I64Small")?.to_i64()?,
            double: e.required("Double")?.to_f64()?,
            integral_double: e.required("IntegralDouble")?.to_f64()?,
            infinity: e.required("Infinity")?.to_f64()?,
            when: e.required("When")?.to_datetime()?,
            id: e.required("Id")?.to_guid()?,
            bytes: e.required("Bytes")?.to_binary()?,
            flag: e.required("Flag")?.to_bool()?,
            text: e.required("Text")?.string()?,
            numeric_text: e.required("NumericText")?.string()?,
            etag: e.etag(),
        })
    }
    fn etag(&self) -> Option<&ETag> {
        self.etag.as_ref()
    }
    fn set_etag(&mut self, etag: ETag) {
        self.etag = Some(etag);
    }
    fn needs_type_annotations() -> bool {
        false
    }
}

fn sample(rk: &str) -> AllTypes {
    AllTypes {
        pk: "meta".into(),
        rk: rk.into(),
        i32_min: i32::MIN,
        i64_max: i64::MAX,
        i64_small: 5,
        double: 30000.37,
        integral_double: 2.0,
        infinity: f64::NEG_INFINITY,
        when: edm::parse_datetime("2020-07-23T21:20:41.6667782Z").unwrap(),
        id: uuid::Uuid::from_u128(0xdead_beef_0000_4000_8000_0123_4567_89ab),
        bytes: (0..=255).collect(),
        flag: true,
        text: "quote \" é 😀 \n".into(),
        numeric_text: "42".into(),
        etag: None,
    }
}

/// The test account with a forced metadata level (`None`: the library's choice).
fn service_with(level: Option<Metadata>) -> TableServiceClient {
    let conn = std::env::var(common::CONNECTION_STRING_VAR).unwrap();
    let mut options = common::client_options();
    options.http.metadata = level;
    TableServiceClient::with_options(Account::from_connection_string(&conn).unwrap(), options)
        .unwrap()
}

const LEVELS: [Option<Metadata>; 4] = [
    None,
    Some(Metadata::None),
    Some(Metadata::Minimal),
    Some(Metadata::Full),
];

fn without_etag(mut e: AllTypes) -> AllTypes {
    e.etag = None;
    e
}

#[tokio::test]
async fn typed_entity_reads_back_identically_at_every_metadata_level() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<AllTypes>(&svc, "Meta").await;
    let written = sample("typed");
    let w = t.insert(&written).await.unwrap();

    for level in LEVELS {
        let table: TableClient<AllTypes> = service_with(level).table(t.name()).unwrap();
        let got = table
            .get(("meta", "typed"))
            .await
            .unwrap_or_else(|e| panic!("{level:?}: {e}"))
            .unwrap();
        assert_eq!(
            got.etag.as_ref(),
            Some(w.etag()),
            "{level:?}: point reads carry the ETag"
        );
        assert_eq!(without_etag(got), written, "{level:?}");

        let all = table
            .query()
            .fetch_all()
            .await
            .unwrap_or_else(|e| panic!("{level:?}: {e}"));
        assert_eq!(all.len(), 1);
        assert_eq!(without_etag(all[0].clone()), written, "{level:?}");
    }
    common::drop_table(&t).await;
}

#[tokio::test]
async fn dynamic_entity_reads_back_identically_with_annotations() {
    let Some(svc) = common::service() else { return };
    let t = common::fresh_table::<AllTypes>(&svc, "Meta").await;
    let w = t.insert(&sample("dyn")).await.unwrap();
    let want = tablekit::codec::to_dynamic(&sample("dyn")).unwrap();

    // A property bag learns types only from annotations: the default (minimal)
    // and the two levels that carry them.
    for level in [None, Some(Metadata::Minimal), Some(Metadata::Full)] {
        let table: TableClient<DynamicEntity> = service_with(level).table(t.name()).unwrap();
        let got = table.get(("meta", "dyn")).await.unwrap().unwrap();
        let queried = table.query().fetch_optional().await.unwrap().unwrap();
        for read in [&got, &queried] {
            assert_eq!(read.properties, want.properties, "{level:?}");
            assert_eq!(read.etag.as_ref(), Some(w.etag()), "{level:?}");
            assert_eq!(read.timestamp, w.timestamp(), "{level:?}");
            assert_eq!(read.get("IntegralDouble"), Some(&EdmValue::Double(2.0)));
            assert_eq!(read.get("I64Small"), Some(&EdmValue::Int64(5)));
        }
    }
    common::drop_table(&t).await;
}
