//! Service properties (logging, metrics, CORS) of the three services, set and
//! read back on Azurite and on the embedded store, and the table service's
//! stats, which the service answers only at the secondary endpoint.
//!
//! On Azurite the properties are the whole emulator's: each case sets every
//! part it asserts, one case per service, and puts back what it found.

use tablekit::service_properties::{
    CorsRule, GeoReplicationStatus, Logging, Metrics, ServiceProperties,
};

use crate::common;
use tablekit::testing::TestEnv;

fn settings() -> ServiceProperties {
    let mut cors = CorsRule::new(["http://www.contoso.example"], ["GET", "PUT"], 600);
    cors.allowed_headers = vec!["x-ms-meta-*".to_owned()];
    cors.exposed_headers = vec!["x-ms-request-id".to_owned()];
    let mut p = ServiceProperties::default();
    p.logging = Some(Logging::new(true, true, false, Some(7)));
    p.hour_metrics = Some(Metrics::enabled(true, Some(10)));
    p.minute_metrics = Some(Metrics::disabled());
    p.cors = Some(vec![cors]);
    p
}

/// What a set of `settings()` and then of an empty CORS list must leave.
fn assert_set_then_cors_cleared(first: &ServiceProperties, second: &ServiceProperties) {
    let expected = settings();
    assert_eq!(first.logging, expected.logging);
    assert_eq!(first.hour_metrics, expected.hour_metrics);
    assert_eq!(
        first.minute_metrics.as_ref().map(|m| m.enabled),
        Some(false)
    );
    assert_eq!(first.cors, expected.cors);
    // The second set carried only CORS: the rest is as the first left it.
    assert_eq!(second.cors, Some(Vec::new()));
    assert_eq!(second.logging, expected.logging);
    assert_eq!(second.hour_metrics, expected.hour_metrics);
}

fn only_cors_cleared() -> ServiceProperties {
    let mut p = ServiceProperties::default();
    p.cors = Some(Vec::new());
    p
}

tablekit::testing::conformance! {
    async fn table_service_properties_are_set_and_read_back(env) {
        let svc = env.tables().clone();
        let before = svc.service_properties().await.unwrap();
        svc.set_service_properties(&settings()).await.unwrap();
        let first = svc.service_properties().await.unwrap();
        svc.set_service_properties(&only_cors_cleared()).await.unwrap();
        let second = svc.service_properties().await.unwrap();
        svc.set_service_properties(&before).await.unwrap();
        assert_set_then_cors_cleared(&first, &second);
    }
}

tablekit::testing::conformance! {
    async fn table_service_stats_say_the_secondary_is_live(env) {
        let svc = env.tables().clone();
        // Azurite answers at `/{account}-secondary`; the embedded store's one
        // copy is always in sync.
        let stats = svc.service_stats().await.unwrap();
        assert_eq!(stats.status(), GeoReplicationStatus::Live);
        assert!(stats.last_sync_time().is_some());
    }
}

#[tokio::test]
async fn bad_settings_are_refused_before_any_io() {
    let svc = common::offline_service();
    let mut p = ServiceProperties::default();
    p.cors = Some(vec![CorsRule::new(["*"], ["GET"], 1); 6]);
    let err = svc.set_service_properties(&p).await.unwrap_err();
    assert!(
        common::assert_invalid(&err).contains("at most 5 CORS rules"),
        "{err}"
    );
    let mut p = ServiceProperties::default();
    p.logging = Some(Logging::new(true, false, false, Some(0)));
    let err = svc.set_service_properties(&p).await.unwrap_err();
    assert!(
        common::assert_invalid(&err).contains("1 to 365 days"),
        "{err}"
    );
}

async fn queue_service_properties_are_set_and_read_back(env: TestEnv) {
    let q = &env.queues();
    let before = q.service_properties().await.unwrap();
    q.set_service_properties(&settings()).await.unwrap();
    let first = q.service_properties().await.unwrap();
    q.set_service_properties(&only_cors_cleared())
        .await
        .unwrap();
    let second = q.service_properties().await.unwrap();
    q.set_service_properties(&before).await.unwrap();
    assert_set_then_cors_cleared(&first, &second);
}

async fn blob_service_properties_are_set_and_read_back(env: TestEnv) {
    let b = &env.blobs();
    let before = b.service_properties().await.unwrap();
    b.set_service_properties(&settings()).await.unwrap();
    let first = b.service_properties().await.unwrap();
    b.set_service_properties(&only_cors_cleared())
        .await
        .unwrap();
    let second = b.service_properties().await.unwrap();
    b.set_service_properties(&before).await.unwrap();
    assert_set_then_cors_cleared(&first, &second);
}

tablekit::testing::conformance!(
    queue_service_properties_are_set_and_read_back,
    blob_service_properties_are_set_and_read_back,
);
