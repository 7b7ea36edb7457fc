//! The one place that names the concrete backends: the clients ask here for a
//! backend behind the seam's traits and never import a backend's module.

use std::sync::Arc;

#[cfg(feature = "blob")]
use super::blob::BlobBackend;
#[cfg(all(feature = "embedded", feature = "blob"))]
use super::embedded::blobs::Blobs;
#[cfg(all(feature = "embedded", feature = "queue"))]
use super::embedded::queues::Queues;
#[cfg(feature = "embedded")]
use super::embedded::EmbeddedBackend;
#[cfg(feature = "blob")]
use super::http::blob::HttpBlobBackend;
#[cfg(feature = "queue")]
use super::http::queue::HttpQueueBackend;
use super::http::HttpBackend;
#[cfg(feature = "queue")]
use super::queue::QueueBackend;
use super::Backend;
use crate::account::Account;
#[cfg(all(feature = "embedded", any(feature = "queue", feature = "blob")))]
use crate::clock::Clock;
use crate::error::Result;
use crate::options::ClientOptions;

/// The Table service of `account`, over HTTP.
pub(crate) fn connect(account: Account, options: &ClientOptions) -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(HttpBackend::new(account, &options.http)?))
}

/// A fresh, empty, in-process table store.
#[cfg(feature = "embedded")]
pub(crate) fn embedded() -> Arc<dyn Backend> {
    Arc::new(EmbeddedBackend::new())
}

/// A fresh, empty, in-process table store behind the simulated limits of `sim`.
#[cfg(feature = "embedded")]
pub(crate) fn embedded_simulated(sim: crate::simulation::Simulation) -> Arc<dyn Backend> {
    Arc::new(super::embedded::Simulated::new(EmbeddedBackend::new(), sim))
}

/// The table store kept in the file at `path` behind the simulated limits of `sim`.
#[cfg(feature = "durable")]
pub(crate) fn embedded_at_simulated(
    path: &std::path::Path,
    sim: crate::simulation::Simulation,
) -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(super::embedded::Simulated::new(
        EmbeddedBackend::open(path)?,
        sim,
    )))
}

/// The in-process table store kept in the file at `path` (created if missing).
#[cfg(feature = "durable")]
pub(crate) fn embedded_at(path: &std::path::Path) -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(EmbeddedBackend::open(path)?))
}

/// What a connection string points at: the embedded store file of
/// `UseEmbeddedStorage=true;Path=<file>`, or an account over HTTP. The one
/// place every client's `from_connection_string` decides it.
#[derive(Debug)]
pub(crate) enum Target {
    /// The embedded store kept in this file.
    #[cfg(feature = "durable")]
    File(std::path::PathBuf),
    /// An account reached over HTTP.
    Account(Account),
}

/// Parses a connection string into its [`Target`]. Without the `durable`
/// feature an embedded connection string is refused, naming the feature.
pub(crate) fn target(s: &str) -> Result<Target> {
    match embedded_connection(s) {
        #[cfg(feature = "durable")]
        Some(path) => Ok(Target::File(path?)),
        #[cfg(not(feature = "durable"))]
        Some(path) => Err(needs_durable(path)),
        None => Ok(Target::Account(Account::from_connection_string(s)?)),
    }
}

/// Opens the store file at `path` with `options` and holds it open while the
/// handle lives, so that the services opened meanwhile share it.
#[cfg(feature = "durable")]
pub(crate) fn hold_store_file(
    path: &std::path::Path,
    options: &crate::options::FileOptions,
) -> Result<impl Sized> {
    super::embedded::hold_file(path, options)
}

/// Checks the store file at `path` (see `embedded::durable::check_file`).
#[cfg(feature = "durable")]
pub(crate) fn check_store_file(path: &std::path::Path) -> Result<Vec<(String, u64)>> {
    super::embedded::check_file(path)
}

/// Removes the store file at `path` and its seal.
#[cfg(feature = "durable")]
pub(crate) fn remove_store_file(path: &std::path::Path) -> Result<()> {
    super::embedded::remove_file(path)
}

/// Compacts the store file at `path`: its sizes before and after.
#[cfg(feature = "durable")]
pub(crate) fn compact_store_file(path: &std::path::Path) -> Result<(u64, u64)> {
    super::embedded::compact_file(path)
}

/// The store file of an embedded connection string,
/// `UseEmbeddedStorage=true;Path=<file>` (settings in any order and case,
/// surrounding blanks ignored), or `None` if the string does not ask for
/// embedded storage. Nothing of the string but `Path` is ever echoed in an
/// error, since a malformed one may hold a secret.
pub(crate) fn embedded_connection(s: &str) -> Option<Result<std::path::PathBuf>> {
    let segments: Vec<(usize, Option<(&str, &str)>)> = s
        .split(';')
        .enumerate()
        .filter(|(_, seg)| !seg.trim().is_empty())
        .map(|(i, seg)| {
            (
                i + 1,
                seg.split_once('=').map(|(k, v)| (k.trim(), v.trim())),
            )
        })
        .collect();
    let is = |k: &str, name: &str| k.eq_ignore_ascii_case(name);
    segments
        .iter()
        .any(|(_, kv)| kv.is_some_and(|(k, _)| is(k, "UseEmbeddedStorage")))
        .then(|| {
            let bad = |why: String| crate::error::Error::config(why);
            let mut path = None;
            let mut flag = false;
            for (n, kv) in &segments {
                match kv {
                    Some((k, v)) if is(k, "UseEmbeddedStorage") && !flag => {
                        if !v.eq_ignore_ascii_case("true") {
                            return Err(bad(format!(
                                "connection string segment {n}: UseEmbeddedStorage must be `true`"
                            )));
                        }
                        flag = true;
                    }
                    Some((k, v)) if is(k, "Path") && path.is_none() => {
                        if v.is_empty() {
                            return Err(bad(format!(
                                "connection string segment {n}: Path names no file"
                            )));
                        }
                        path = Some(std::path::PathBuf::from(v));
                    }
                    _ => {
                        return Err(bad(format!(
                            "connection string segment {n}: UseEmbeddedStorage=true takes only Path=<file>, once each"
                        )))
                    }
                }
            }
            path.ok_or_else(|| {
                bad("connection string: UseEmbeddedStorage=true needs Path=<file>".into())
            })
        })
}

/// Why a build without the `durable` feature refuses the embedded connection
/// string whose parse is `parsed`: the string's own fault if it has one, else
/// the missing feature.
#[cfg_attr(feature = "durable", allow(dead_code))]
pub(crate) fn needs_durable(parsed: Result<std::path::PathBuf>) -> crate::error::Error {
    match parsed {
        Err(e) => e,
        Ok(_) => crate::error::Error::config(
            "connection string: UseEmbeddedStorage=true needs tablekit's `durable` feature, \
             which this build leaves out (features = [\"durable\"] in Cargo.toml)",
        ),
    }
}

/// The Queue service of `account`, over HTTP.
#[cfg(feature = "queue")]
pub(crate) fn connect_queues(
    account: Account,
    options: &ClientOptions,
) -> Result<Arc<dyn QueueBackend>> {
    Ok(traced_queues(Arc::new(HttpQueueBackend::new(
        account,
        &options.http,
    )?)))
}

/// A fresh, empty, in-process queue store on `clock`.
#[cfg(all(feature = "embedded", feature = "queue"))]
pub(crate) fn embedded_queues(clock: Clock) -> Arc<dyn QueueBackend> {
    traced_queues(Arc::new(Queues::new(clock)))
}

/// The in-process queue store kept in the file at `path` (created if missing),
/// on `clock`; the file may hold the same account's tables and blobs.
#[cfg(all(feature = "durable", feature = "queue"))]
pub(crate) fn embedded_queues_at(
    path: &std::path::Path,
    clock: Clock,
) -> Result<Arc<dyn QueueBackend>> {
    Ok(traced_queues(Arc::new(Queues::open(path, clock)?)))
}

/// The Blob service of `account`, over HTTP.
#[cfg(feature = "blob")]
pub(crate) fn connect_blobs(
    account: Account,
    options: &ClientOptions,
) -> Result<Arc<dyn BlobBackend>> {
    Ok(traced_blobs(Arc::new(HttpBlobBackend::new(
        account,
        &options.http,
    )?)))
}

/// A fresh, empty, in-process blob store on `clock`.
#[cfg(all(feature = "embedded", feature = "blob"))]
pub(crate) fn embedded_blobs(clock: Clock) -> Arc<dyn BlobBackend> {
    traced_blobs(Arc::new(Blobs::new(clock)))
}

/// The in-process blob store kept in the file at `path` (created if missing),
/// on `clock`; the file may hold the same account's tables and queues.
#[cfg(all(feature = "durable", feature = "blob"))]
pub(crate) fn embedded_blobs_at(
    path: &std::path::Path,
    clock: Clock,
) -> Result<Arc<dyn BlobBackend>> {
    Ok(traced_blobs(Arc::new(Blobs::open(path, clock)?)))
}

/// `backend` with a public-call span per call (see `super::traced`).
#[cfg(feature = "queue")]
fn traced_queues(backend: Arc<dyn QueueBackend>) -> Arc<dyn QueueBackend> {
    Arc::new(super::traced::Traced(backend))
}

/// `backend` with a public-call span per call (see `super::traced`).
#[cfg(feature = "blob")]
fn traced_blobs(backend: Arc<dyn BlobBackend>) -> Arc<dyn BlobBackend> {
    Arc::new(super::traced::Traced(backend))
}

#[cfg(test)]
mod tests {
    use super::embedded_connection;

    #[test]
    fn a_build_without_the_durable_feature_names_it_for_an_embedded_connection_string() {
        let valid = super::embedded_connection("UseEmbeddedStorage=true;Path=./data/app.redb")
            .expect("embedded");
        let err = super::needs_durable(valid).to_string();
        assert!(err.contains("`durable` feature"), "{err}");
        assert!(err.contains("UseEmbeddedStorage=true"), "{err}");
        // A malformed string keeps its own error.
        let malformed = super::embedded_connection("UseEmbeddedStorage=true").expect("embedded");
        let err = super::needs_durable(malformed).to_string();
        assert!(err.contains("needs Path=<file>"), "{err}");
    }

    #[test]
    fn an_embedded_connection_string_names_its_file() {
        for s in [
            "UseEmbeddedStorage=true;Path=./data/app.redb",
            " path = ./data/app.redb ; useembeddedstorage = TRUE ;",
        ] {
            let path = embedded_connection(s).expect("embedded").expect("valid");
            assert_eq!(path, std::path::Path::new("./data/app.redb"), "{s}");
        }
        assert!(embedded_connection("UseDevelopmentStorage=true").is_none());
        assert!(embedded_connection("AccountName=a;AccountKey=k").is_none());
    }

    #[test]
    fn a_malformed_embedded_connection_string_is_refused_without_echoing_it() {
        for (s, says) in [
            ("UseEmbeddedStorage=true", "needs Path=<file>"),
            (
                "UseEmbeddedStorage=false;Path=x",
                "segment 1: UseEmbeddedStorage must be `true`",
            ),
            (
                "UseEmbeddedStorage=true;Path=",
                "segment 2: Path names no file",
            ),
            (
                "UseEmbeddedStorage=true;Path=a;Path=b",
                "segment 3: UseEmbeddedStorage=true takes only",
            ),
            (
                "UseEmbeddedStorage=true;Path=a;AccountKey=s3cr3t",
                "segment 3",
            ),
            ("UseEmbeddedStorage=true;s3cr3t;Path=a", "segment 2"),
        ] {
            let err = embedded_connection(s).expect("embedded").unwrap_err();
            let message = err.to_string();
            assert!(message.contains(says), "{s}: {message}");
            assert!(!message.contains("s3cr3t"), "{message}");
        }
    }
}
