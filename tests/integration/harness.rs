//! The conformance harness, `tablekit::testing`, as a user's crate sees it:
//! only public API (no `crate::common`), cases written once and run on every
//! backend. Each case also checks the harness itself: that the test named
//! `embedded_file` really got the file backend, that the runtime flavour asked
//! for is the one it runs on, that an env's services share one store.

use std::time::Duration;

use tablekit::testing::{Backend, TestEnv};
use tablekit::DynamicEntity;
use tokio::runtime::{Handle, RuntimeFlavor};

/// The backend the running test is named after (`…::embedded`,
/// `…::embedded_file` or `…::azurite`): the test thread carries the test's name.
fn backend_of_this_test() -> Backend {
    let thread = std::thread::current();
    let name = thread.name().expect("libtest names the test's thread");
    let test = name.rsplit("::").next().unwrap();
    Backend::ALL
        .into_iter()
        .find(|b| b.test_name() == test)
        .unwrap_or_else(|| panic!("{name} is no test of the harness"))
}

tablekit::testing::conformance! {
    /// A user's case: the code under test writes through one client, the
    /// check reads through another of the same account.
    async fn a_case_runs_on_the_backend_its_test_is_named_after(env) -> tablekit::Result<()> {
        assert_eq!(env.backend(), backend_of_this_test());
        assert_eq!(env.clock().is_some(), !env.backend().is_azurite());
        assert_eq!(env.connection_string().is_some(), env.backend().is_http());
        assert_eq!(env.scratch_dir().is_some(), env.backend() == Backend::File);
        assert_eq!(Handle::current().runtime_flavor(), RuntimeFlavor::CurrentThread);

        let table = env.fresh_table::<DynamicEntity>("Harness").await;
        table.insert(&DynamicEntity::new("p", "r")).await?;
        let other = env.second_tables().table::<DynamicEntity>(table.name())?;
        assert!(other.get(("p", "r")).await?.is_some());
        if let Some(dir) = env.scratch_dir() {
            assert!(dir.join("tables.redb").exists(), "the file backend keeps its tables in {dir:?}");
        }
        table.delete_table().await?;
        Ok(())
    }

    #[runtime(flavor = "multi_thread", worker_threads = 2)]
    async fn a_case_may_ask_for_a_multi_threaded_runtime(env) {
        assert_eq!(env.backend(), backend_of_this_test());
        let handle = Handle::current();
        assert_eq!(handle.runtime_flavor(), RuntimeFlavor::MultiThread);
        assert_eq!(handle.metrics().num_workers(), 2);
        let queue = env.fresh_queue("harness").await;
        let sender = tokio::spawn({
            let queue = queue.clone();
            async move { queue.send("from another task").await.map(|_| ()) }
        });
        sender.await.unwrap().unwrap();
        let got = queue.receive().visibility_timeout(env.visibility_timeout()).await.unwrap();
        assert_eq!(got[0].text().unwrap(), "from another task");
        queue.delete_queue().await.unwrap();
    }
}

/// A case as an ordinary function (the list form of the macro).
async fn time_passes_for_the_queues_when_the_case_waits(env: TestEnv) {
    assert_eq!(env.backend(), backend_of_this_test());
    let queue = env.fresh_queue("harness").await;
    queue.send("job").await.unwrap();
    let hidden = Duration::from_secs(1);
    assert_eq!(
        queue
            .receive()
            .visibility_timeout(hidden)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        queue.receive().await.unwrap().is_empty(),
        "hidden for a second"
    );
    let before = env.now();
    // Free on the embedded store (its clock moves), a real second on Azurite.
    env.wait(hidden + Duration::from_secs(1)).await;
    assert!(env.now() - before >= chrono::Duration::seconds(2));
    assert_eq!(queue.receive().await.unwrap().len(), 1, "visible again");
    queue.delete_queue().await.unwrap();
}

async fn blobs_of_the_file_backend_live_in_its_scratch_folder(env: TestEnv) {
    let container = env.fresh_container("harness").await;
    container
        .blob("a.txt")
        .unwrap()
        .upload(b"hello".to_vec())
        .await
        .unwrap();
    let back = container
        .blob("a.txt")
        .unwrap()
        .download()
        .bytes()
        .await
        .unwrap();
    assert_eq!(back.as_ref(), b"hello");
    if let Some(dir) = env.scratch_dir() {
        assert!(dir.join("blobs.redb").exists());
        assert!(
            !dir.join("queues.redb").exists(),
            "a service is opened on first use"
        );
    }
    container.delete_container().await.unwrap();
}

tablekit::testing::conformance!(
    time_passes_for_the_queues_when_the_case_waits,
    #[runtime(flavor = "multi_thread")]
    blobs_of_the_file_backend_live_in_its_scratch_folder,
);

/// Dropping the env removes the file backend's scratch folder, files and all.
#[test]
fn the_file_backends_folder_goes_with_its_env() {
    tablekit::testing::run(Backend::File, |env| async move {
        env.fresh_table::<DynamicEntity>("Harness").await;
        let dir = env.scratch_dir().unwrap().to_path_buf();
        assert!(dir.join("tables.redb").exists());
        drop(env);
        assert!(!dir.exists(), "{dir:?} is still there");
    });
}
