//! Leases on blobs and containers: [`Lease`], acquired with
//! [`BlobClient::acquire_lease`] or [`ContainerClient::acquire_lease`].
//!
//! A lease is a lock with a timeout kept by the service: while one is held on
//! a blob, writes and deletes of it need the lease's id (metadata and header
//! sets too); while one is held on a container, deleting it does. A lease of
//! fixed duration (15 to 60 seconds) ends unless renewed; an infinite one
//! lasts until released or broken. Anyone may break a lease (after a break
//! period, at most 60 seconds), which is how a stuck holder is got rid of.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::blob::{BlobBackend, BlobOp, BlobResponse, LeaseAction};
use crate::error::Result;

use super::{invalid, unexpected, BlobClient, ContainerClient};

/// How long a lease lasts unless renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseDuration {
    /// Until released or broken.
    Infinite,
    /// 15 to 60 whole seconds (checked before any I/O).
    Fixed(Duration),
}

impl LeaseDuration {
    fn seconds(self) -> Result<Option<u32>> {
        match self {
            LeaseDuration::Infinite => Ok(None),
            LeaseDuration::Fixed(d) => {
                let s = d.as_secs();
                if d.subsec_nanos() != 0 || !(15..=60).contains(&s) {
                    return Err(invalid(format!(
                        "a lease lasts 15 to 60 whole seconds, or is infinite: not {d:?}"
                    )));
                }
                Ok(Some(s as u32))
            }
        }
    }
}

/// A lease's id (a GUID), as a write under the lease names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseId(pub(crate) String);

impl LeaseId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for LeaseId {
    fn from(id: &str) -> Self {
        LeaseId(id.to_owned())
    }
}

impl From<String> for LeaseId {
    fn from(id: String) -> Self {
        LeaseId(id)
    }
}

impl From<&LeaseId> for LeaseId {
    fn from(id: &LeaseId) -> Self {
        id.clone()
    }
}

impl From<&Lease> for LeaseId {
    fn from(lease: &Lease) -> Self {
        lease.id.clone()
    }
}

fn proposed_id(id: &str) -> Result<()> {
    uuid::Uuid::parse_str(id)
        .map(drop)
        .map_err(|_| invalid(format!("a lease id is a GUID, not {id:?}")))
}

/// A lease held on a blob or a container (or believed to be: the service has
/// the last word). Its id guards writes: pass the lease to
/// [`Upload::lease`](super::Upload::lease), [`SetMetadata::lease`](super::SetMetadata::lease),
/// [`BlobClient::delete_with_lease`], and so on.
///
/// ```
/// # async fn run() -> tablekit::Result<()> {
/// use std::time::Duration;
/// use tablekit::blob::LeaseDuration;
/// let clock = tablekit::clock::ManualClock::starting_now();
/// let blobs = tablekit::BlobServiceClient::embedded_with_clock(clock.clone());
/// let jobs = blobs.container("jobs")?;
/// jobs.create_container().await?;
/// let job = jobs.blob("nightly.json")?;
/// job.upload("{}").await?;
///
/// let lease = job.acquire_lease(LeaseDuration::Fixed(Duration::from_secs(15))).await?;
/// // Without the lease's id, a write is refused...
/// assert!(job.upload("{\"by\":\"b\"}").await.unwrap_err().is_lease_held());
/// // ...with it, it goes through.
/// job.upload("{\"by\":\"a\"}").lease(&lease).await?;
///
/// // Unless renewed, it ends; then its id no longer guards anything.
/// clock.advance(Duration::from_secs(15));
/// assert!(job.upload("{}").lease(&lease).await.unwrap_err().is_lease_lost());
/// lease.renew().await?; // nobody took it meanwhile
/// lease.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Clone)]
pub struct Lease {
    backend: Arc<dyn BlobBackend>,
    container: Arc<str>,
    blob: Option<Arc<str>>,
    id: LeaseId,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("container", &self.container)
            .field("blob", &self.blob)
            .field("id", &self.id.0)
            .finish()
    }
}

async fn lease_call(
    backend: &dyn BlobBackend,
    container: &str,
    blob: Option<&str>,
    action: LeaseAction<'_>,
) -> Result<(Option<String>, Option<u32>)> {
    match backend
        .blob(BlobOp::Lease {
            container,
            blob,
            action,
        })
        .await?
    {
        BlobResponse::Lease { id, break_seconds } => Ok((id, break_seconds)),
        _ => Err(unexpected("a lease call")),
    }
}

impl Lease {
    /// A handle on a lease acquired elsewhere (by another process, say), to
    /// renew, change or release it by its id.
    fn with_id(
        backend: Arc<dyn BlobBackend>,
        container: Arc<str>,
        blob: Option<Arc<str>>,
        id: LeaseId,
    ) -> Lease {
        Lease {
            backend,
            container,
            blob,
            id,
        }
    }

    async fn acquire(
        backend: Arc<dyn BlobBackend>,
        container: Arc<str>,
        blob: Option<Arc<str>>,
        duration: LeaseDuration,
        proposed: Option<&str>,
    ) -> Result<Lease> {
        let seconds = duration.seconds()?;
        // The client always proposes the id, so that a retry of an acquire
        // whose answer was lost finds its own lease and not somebody else's.
        let id = match proposed {
            Some(id) => {
                proposed_id(id)?;
                id.to_owned()
            }
            None => uuid::Uuid::new_v4().to_string(),
        };
        let (answered, _) = lease_call(
            &*backend,
            &container,
            blob.as_deref(),
            LeaseAction::Acquire {
                seconds,
                proposed: &id,
            },
        )
        .await?;
        Ok(Lease::with_id(
            backend,
            container,
            blob,
            LeaseId(answered.unwrap_or(id)),
        ))
    }

    /// The lease's id.
    pub fn id(&self) -> &LeaseId {
        &self.id
    }

    /// Starts the lease's duration again (for an infinite lease, checks that it
    /// is still held). A lease that ran out can be renewed as long as nobody
    /// acquired it meanwhile; otherwise [`Error::is_lease_lost`](crate::Error::is_lease_lost).
    pub async fn renew(&self) -> Result<()> {
        let action = LeaseAction::Renew { id: &self.id.0 };
        lease_call(
            &*self.backend,
            &self.container,
            self.blob.as_deref(),
            action,
        )
        .await
        .map(drop)
    }

    /// Gives the lease a new id (a GUID): the old one no longer guards anything.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// use tablekit::blob::LeaseDuration;
    /// let photo = photos.blob("a.jpg")?;
    /// photo.upload("v1").await?;
    /// let mut lease = photo.acquire_lease(LeaseDuration::Infinite).await?;
    /// let old = lease.id().clone();
    /// lease.change("6f3c1d8e-9a0b-4c2d-8e1f-0a1b2c3d4e5f").await?;
    /// assert_eq!(lease.id().as_str(), "6f3c1d8e-9a0b-4c2d-8e1f-0a1b2c3d4e5f");
    /// assert!(photo.upload("v2").lease(&old).await.unwrap_err().is_lease_lost());
    /// photo.upload("v2").lease(&lease).await?;
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn change(&mut self, new_id: &str) -> Result<()> {
        proposed_id(new_id)?;
        let action = LeaseAction::Change {
            id: &self.id.0,
            proposed: new_id,
        };
        lease_call(
            &*self.backend,
            &self.container,
            self.blob.as_deref(),
            action,
        )
        .await?;
        self.id = LeaseId(new_id.to_owned());
        Ok(())
    }

    /// Gives the lease up: anyone may acquire one at once.
    pub async fn release(self) -> Result<()> {
        let action = LeaseAction::Release { id: &self.id.0 };
        lease_call(
            &*self.backend,
            &self.container,
            self.blob.as_deref(),
            action,
        )
        .await
        .map(drop)
    }
}

/// Breaks the lease on `blob` (or the container): the time left until it is
/// broken.
async fn break_lease(
    backend: &dyn BlobBackend,
    container: &str,
    blob: Option<&str>,
    period: Option<Duration>,
) -> Result<Duration> {
    let period = match period {
        None => None,
        Some(p) if p.subsec_nanos() == 0 && p.as_secs() <= 60 => Some(p.as_secs() as u32),
        Some(p) => {
            return Err(invalid(format!(
                "a break period is 0 to 60 whole seconds, not {p:?}"
            )))
        }
    };
    let (_, left) = lease_call(backend, container, blob, LeaseAction::Break { period }).await?;
    Ok(Duration::from_secs(left.unwrap_or(0).into()))
}

impl BlobClient {
    /// Acquires a lease on the blob, with an id of tablekit's choosing;
    /// fails with [`Error::is_lease_held`](crate::Error::is_lease_held) if
    /// somebody else holds one. See [`Lease`].
    pub async fn acquire_lease(&self, duration: LeaseDuration) -> Result<Lease> {
        self.acquire_lease_with_id(duration, None).await
    }

    /// Acquires a lease with this id (a GUID), or with one of tablekit's
    /// choosing. Acquiring again with the id of the lease held renews it
    /// with the new duration.
    pub async fn acquire_lease_with_id(
        &self,
        duration: LeaseDuration,
        id: Option<&str>,
    ) -> Result<Lease> {
        Lease::acquire(
            self.container.backend.clone(),
            self.container.name.clone(),
            Some(self.name.clone()),
            duration,
            id,
        )
        .await
    }

    /// A handle on the lease with this id (acquired elsewhere), to renew,
    /// change or release it. Nothing is sent.
    pub fn lease(&self, id: impl Into<LeaseId>) -> Lease {
        Lease::with_id(
            self.container.backend.clone(),
            self.container.name.clone(),
            Some(self.name.clone()),
            id.into(),
        )
    }

    /// Breaks the blob's lease, whoever holds it: at once with a period of
    /// zero, else after `period` (at most 60 seconds; `None`: when a fixed
    /// lease would have ended, at once for an infinite one). Returns the time
    /// left until it is broken; meanwhile the lease is still held, but can
    /// be neither renewed nor changed.
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// use std::time::Duration;
    /// use tablekit::blob::{LeaseDuration, LeaseState};
    /// let photo = photos.blob("a.jpg")?;
    /// photo.upload("v1").await?;
    /// let stuck = photo.acquire_lease(LeaseDuration::Infinite).await?;
    /// assert_eq!(photo.break_lease(Some(Duration::ZERO)).await?, Duration::ZERO);
    /// assert_eq!(photo.properties().await?.lease().state(), LeaseState::Broken);
    /// photo.upload("v2").await?; // no lease needed any more
    /// assert!(stuck.renew().await.unwrap_err().is_lease_lost());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn break_lease(&self, period: Option<Duration>) -> Result<Duration> {
        break_lease(
            &*self.container.backend,
            &self.container.name,
            Some(&self.name),
            period,
        )
        .await
    }
}

impl ContainerClient {
    /// Acquires a lease on the container: while it is held, deleting the
    /// container needs its id ([`ContainerClient::delete_container_with_lease`]).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// use tablekit::blob::LeaseDuration;
    /// let lease = photos.acquire_lease(LeaseDuration::Infinite).await?;
    /// assert!(photos.delete_container().await.unwrap_err().is_lease_held());
    /// photos.delete_container_with_lease(&lease).await?;
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn acquire_lease(&self, duration: LeaseDuration) -> Result<Lease> {
        self.acquire_lease_with_id(duration, None).await
    }

    /// Acquires a lease on the container with this id (a GUID), or with one
    /// of tablekit's choosing.
    pub async fn acquire_lease_with_id(
        &self,
        duration: LeaseDuration,
        id: Option<&str>,
    ) -> Result<Lease> {
        Lease::acquire(self.backend.clone(), self.name.clone(), None, duration, id).await
    }

    /// A handle on the container's lease with this id. Nothing is sent.
    pub fn lease(&self, id: impl Into<LeaseId>) -> Lease {
        Lease::with_id(self.backend.clone(), self.name.clone(), None, id.into())
    }

    /// Breaks the container's lease; see [`BlobClient::break_lease`].
    pub async fn break_lease(&self, period: Option<Duration>) -> Result<Duration> {
        break_lease(&*self.backend, &self.name, None, period).await
    }

    /// Deletes the container, which has a lease held with this id.
    pub async fn delete_container_with_lease(&self, lease: impl Into<LeaseId>) -> Result<()> {
        let id = lease.into();
        self.backend
            .blob(BlobOp::DeleteContainer {
                container: &self.name,
                lease_id: Some(&id.0),
            })
            .await
            .map(drop)
    }
}

impl BlobClient {
    /// Deletes the blob, which has a lease held with this id (and, with an
    /// ETag, only if it is still that version).
    ///
    /// ```
    /// # async fn run() -> tablekit::Result<()> {
    /// # let photos = tablekit::BlobServiceClient::embedded().container("photos")?;
    /// # photos.create_container().await?;
    /// use tablekit::{blob::LeaseDuration, IfMatch};
    /// let photo = photos.blob("a.jpg")?;
    /// photo.upload("v1").await?;
    /// let lease = photo.acquire_lease(LeaseDuration::Infinite).await?;
    /// assert!(photo.delete(IfMatch::Any).await.unwrap_err().is_lease_held());
    /// photo.delete_with_lease(&lease, IfMatch::Any).await?;
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn delete_with_lease(
        &self,
        lease: impl Into<LeaseId>,
        if_match: impl Into<crate::entity::IfMatch>,
    ) -> Result<()> {
        let conditions = crate::backend::blob::Conditions {
            if_match: if_match.into().into_etag(),
            lease_id: Some(lease.into().0),
            ..Default::default()
        };
        self.run(BlobOp::Delete {
            container: &self.container.name,
            blob: &self.name,
            conditions: &conditions,
        })
        .await
        .map(drop)
    }
}
