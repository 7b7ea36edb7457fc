//! [`TableServiceClient`]: the account's tables, and their listing.

use std::fmt;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use futures::stream::{self, BoxStream, Stream, StreamExt, TryStreamExt};

use crate::account::Account;
use crate::backend::{self, Backend, Operation, Response};
use crate::entity::TableEntity;
use crate::error::{Error, ErrorCode, Result, ValidationError};
use crate::filter::{Column, Filter, RawFilter, MAX_COMPARISONS};
use crate::options::ClientOptions;
use crate::table::handle::AmbiguousWrites;
use crate::table::handle::TableHandle;
use crate::table::query::ScanPolicy;
use crate::table::stats::{Counted, Recorder, Stats};
use crate::validate;

use super::TableClient;

/// A client for the tables of one storage account. Cheap to clone; clones share
/// one connection pool.
///
/// ```no_run
/// # async fn run() -> tablekit::Result<()> {
/// use tablekit::{DynamicEntity, TableServiceClient};
///
/// let service = TableServiceClient::from_connection_string("UseDevelopmentStorage=true")?;
/// let blogs = service.table::<DynamicEntity>("Blogs")?;
/// blogs.create_table_if_not_exists().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TableServiceClient {
    pub(super) backend: Arc<Counted>,
    stats: Arc<Recorder>,
}

impl fmt::Debug for TableServiceClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableServiceClient")
            .field("backend", &self.backend)
            .finish()
    }
}

impl TableServiceClient {
    /// A client for this account over HTTP, with default options.
    pub fn new(account: Account) -> Result<Self> {
        Self::with_options(account, ClientOptions::default())
    }

    /// A client for this account over HTTP.
    pub fn with_options(account: Account, options: ClientOptions) -> Result<Self> {
        Ok(TableServiceClient::counted(
            backend::connect(account, &options)?,
            None,
            crate::table::stats::PARTITION_TARGET,
        ))
    }

    /// A client for a fresh, empty, in-memory account: the embedded backend.
    ///
    /// It carries out the same operations as Azure Table Storage, with the
    /// service's rules (key order, ETags and conditions, transactions, paging,
    /// limits, error codes), inside this process: for examples, and for unit
    /// tests of code written on tablekit, with no emulator to run. Each call
    /// makes a new, isolated store; clones of the client share it. Nothing is
    /// persisted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tablekit::Result<()> {
    /// use tablekit::{DynamicEntity, TableServiceClient};
    ///
    /// let service = TableServiceClient::embedded();
    /// let blogs = service.table::<DynamicEntity>("Blogs")?;
    /// blogs.create_table().await?;
    /// blogs.insert(&DynamicEntity::new("Channel9", "Oct-29").with("Rating", 3)).await?;
    /// let read = blogs.get(("Channel9", "Oct-29")).await?.expect("stored");
    /// assert_eq!(read.get("Rating"), Some(&tablekit::EdmValue::Int32(3)));
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn embedded() -> Self {
        TableServiceClient::counted(
            backend::embedded(),
            None,
            crate::table::stats::PARTITION_TARGET,
        )
    }

    /// A client for a fresh, in-memory embedded store that behaves like the
    /// service under load, as `sim` describes: per-partition and per-account
    /// throughput targets answered with 503 `ServerBusy` when exceeded (and
    /// retried by the simulation's retry policy, as over HTTP), and a latency
    /// per operation, on the system clock or a
    /// [`ManualClock`](crate::clock::ManualClock). See
    /// [`Simulation`](crate::simulation::Simulation).
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn embedded_simulated(sim: crate::simulation::Simulation) -> Self {
        let (clock, target) = (sim.manual_clock().cloned(), sim.partition_target_value());
        TableServiceClient::counted(backend::embedded_simulated(sim), clock, target)
    }

    /// A client for the embedded store kept durably in the file at `path`,
    /// which is created if it does not exist (with any missing folders above
    /// it, as `std::fs::create_dir_all` makes them) and loaded if it does.
    ///
    /// The same store as [`embedded`](TableServiceClient::embedded), with the
    /// same rules, except that every write (and every transaction, as a whole)
    /// is on disk before it is acknowledged: what an `await` returned survives
    /// a crash or a power loss. One process at a time: opening a file that is
    /// open (in this process or another) is an error, as is a file written by a
    /// newer tablekit. Clones of the client share the open file; it is closed
    /// when the last clone is dropped. The entities stay in the file and are
    /// read through a page cache of bounded size
    /// ([`FileOptions::cache_bytes`](crate::options::FileOptions::cache_bytes)).
    /// A write (or transaction) waits for the `fsync` of the commit that
    /// holds it without blocking its thread: the store's own thread commits,
    /// and concurrent writes share one commit and its `fsync`, on any tokio
    /// runtime, a current-thread one (`#[tokio::test]`) included. Writes to
    /// one partition follow one another, each after the commit of the one
    /// before. Creating or deleting a table blocks its thread for its commit.
    ///
    /// A damaged file is an error naming it, never a panic. The close of the
    /// file leaves a small `<file>.seal` beside it that records the file as
    /// the file system describes it (inode, length, modification and change
    /// times, a hash of its header); an open that finds the file unchanged
    /// since is quick, any other open checks the checksum of every page
    /// first, which reads the whole file once. The close also compacts the
    /// file when the entities deleted since its last compaction took at
    /// least 1 MiB and a quarter of its size.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tablekit::Result<()> {
    /// use tablekit::{DynamicEntity, TableServiceClient};
    ///
    /// let path = std::env::temp_dir().join(format!("tablekit-doc-{}.redb", std::process::id()));
    /// # let _ = std::fs::remove_file(&path);
    /// {
    ///     let service = TableServiceClient::embedded_at(&path)?;
    ///     let blogs = service.table::<DynamicEntity>("Blogs")?;
    ///     blogs.create_table().await?;
    ///     blogs.insert(&DynamicEntity::new("Channel9", "Oct-29").with("Rating", 3)).await?;
    /// } // the file is closed with the last clone of the client
    /// let service = TableServiceClient::embedded_at(&path)?;
    /// let read = service.table::<DynamicEntity>("Blogs")?.get(("Channel9", "Oct-29")).await?;
    /// assert_eq!(read.expect("kept").get("Rating"), Some(&tablekit::EdmValue::Int32(3)));
    /// # drop(service); tablekit::storage::remove_file(&path).unwrap();
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "durable")]
    #[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
    pub fn embedded_at(path: impl AsRef<std::path::Path>) -> Result<Self> {
        Ok(TableServiceClient::counted(
            backend::embedded_at(path.as_ref())?,
            None,
            crate::table::stats::PARTITION_TARGET,
        ))
    }

    /// The embedded store kept in the file at `path` (as
    /// [`embedded_at`](TableServiceClient::embedded_at)) behind the service's
    /// limits as `sim` simulates them (as
    /// [`embedded_simulated`](TableServiceClient::embedded_simulated)): a
    /// partition design or a load tested against data kept between runs.
    #[cfg(feature = "durable")]
    #[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
    pub fn embedded_at_simulated(
        path: impl AsRef<std::path::Path>,
        sim: crate::simulation::Simulation,
    ) -> Result<Self> {
        let (clock, target) = (sim.manual_clock().cloned(), sim.partition_target_value());
        Ok(TableServiceClient::counted(
            backend::embedded_at_simulated(path.as_ref(), sim)?,
            clock,
            target,
        ))
    }

    /// A client from a connection string (see [`Account::from_connection_string`]).
    ///
    /// `UseEmbeddedStorage=true;Path=<file>` is the embedded store kept in that
    /// file, as [`embedded_at`](TableServiceClient::embedded_at): moving an
    /// application between its local file and Azure Table Storage changes only
    /// its connection string. (The path cannot contain `;`.)
    pub fn from_connection_string(s: &str) -> Result<Self> {
        match crate::backend::target(s)? {
            #[cfg(feature = "durable")]
            crate::backend::Target::File(path) => Self::embedded_at(path),
            crate::backend::Target::Account(account) => Self::new(account),
        }
    }

    /// Counts the requests sent to `backend` (see [`Stats`]); heat is
    /// measured on `clock` against `partition_target`.
    fn counted(
        backend: Arc<dyn Backend>,
        clock: Option<crate::clock::ManualClock>,
        partition_target: u32,
    ) -> Self {
        let stats = Arc::new(Recorder::new(clock, partition_target));
        TableServiceClient {
            backend: Arc::new(Counted {
                inner: backend,
                recorder: stats.clone(),
            }),
            stats,
        }
    }

    /// What this client's requests (and those of every
    /// [`TableClient`] made from it) cost so far, all tables together:
    /// billable transactions by kind, entities, bytes, and per partition.
    pub fn stats(&self) -> Stats {
        self.stats.stats(None)
    }

    /// Whether this client works on an in-process embedded store
    /// ([`embedded`](TableServiceClient::embedded)) rather than a service over HTTP.
    ///
    /// ```
    /// assert!(tablekit::TableServiceClient::embedded().is_embedded());
    /// ```
    pub fn is_embedded(&self) -> bool {
        // Only the embedded store keeps property bags.
        self.backend.stores_property_bags()
    }

    /// The Table service endpoint this client sends its requests to, such
    /// as `http://127.0.0.1:10002/devstoreaccount1` (never a credential);
    /// `None` for the embedded store, which has none.
    ///
    /// ```
    /// assert_eq!(tablekit::TableServiceClient::embedded().endpoint(), None);
    /// let svc = tablekit::TableServiceClient::from_connection_string("UseDevelopmentStorage=true")?;
    /// assert_eq!(svc.endpoint(), Some("http://127.0.0.1:10002/devstoreaccount1"));
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    pub fn endpoint(&self) -> Option<&str> {
        self.backend.table_endpoint()
    }

    /// A client for the entities of one table, typed as `T`. The name is checked here.
    pub fn table<T: TableEntity>(&self, name: &str) -> Result<TableClient<T>> {
        validate::table_name(name)?;
        Ok(TableClient {
            handle: TableHandle {
                counters: self.backend.table(name),
                backend: self.backend.clone(),
                stats: self.stats.clone(),
                name: Arc::from(name),
                scan_policy: ScanPolicy::default(),
                ambiguous_writes: AmbiguousWrites::default(),
            },
            _t: PhantomData,
        })
    }

    /// Creates a table; fails with a conflict ([`Error::is_conflict`]) if it exists.
    pub async fn create_table(&self, name: &str) -> Result<()> {
        validate::table_name(name)?;
        self.backend
            .execute(Operation::CreateTable { table: name })
            .await?;
        Ok(())
    }

    /// Creates a table unless it exists; returns whether it was created.
    ///
    /// When an attempt's answer was lost and its retry finds the table
    /// existing, the call succeeds and returns `true`: the table is most
    /// likely the lost attempt's, and it exists either way.
    pub async fn create_table_if_not_exists(&self, name: &str) -> Result<bool> {
        match self.create_table(name).await {
            Ok(()) => Ok(true),
            // Ambiguous: the conflict met by a retry after a lost answer is
            // most likely this call's own table. Either way the table exists.
            Err(e)
                if e.status() == Some(409) && e.code() != Some(&ErrorCode::TableBeingDeleted) =>
            {
                Ok(e.is_ambiguous())
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes a table and all its entities; fails with not-found if there is none.
    pub async fn delete_table(&self, name: &str) -> Result<()> {
        validate::table_name(name)?;
        self.backend
            .execute(Operation::DeleteTable { table: name })
            .await?;
        Ok(())
    }

    /// Deletes a table if it exists; returns whether it did.
    ///
    /// When an attempt's answer was lost and its retry finds no table, the
    /// call succeeds and returns `true`: the lost attempt most likely deleted
    /// it, and it is gone either way.
    pub async fn delete_table_if_exists(&self, name: &str) -> Result<bool> {
        match self.delete_table(name).await {
            Ok(()) => Ok(true),
            // Ambiguous: a lost answer's retry finding nothing most likely
            // found this call's own deletion. Either way the table is gone.
            Err(e) if e.status() == Some(404) => Ok(e.is_ambiguous()),
            Err(e) => Err(e),
        }
    }

    /// Lists the account's tables, following continuation tokens: all of
    /// them, or those of a [`prefix`](ListTables::prefix) or an OData
    /// [`filter`](ListTables::filter) over the name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tablekit::Result<()> {
    /// use tablekit::table::TableItem;
    ///
    /// let service = tablekit::TableServiceClient::embedded();
    /// for name in ["Logs2023", "Logs2024", "Logs2025", "Orders"] {
    ///     service.create_table(name).await?;
    /// }
    /// let recent = service.list_tables().filter(TableItem::NAME.between("Logs2024", "Logs2099")).fetch_all().await?;
    /// assert_eq!(recent, ["Logs2024", "Logs2025"]);
    /// let two = service.list_tables().filter_raw("TableName eq 'Orders' or TableName eq 'Logs2023'").fetch_all().await?;
    /// assert_eq!(two, ["Logs2023", "Orders"]);
    /// # Ok(()) }
    /// ```
    pub fn list_tables(&self) -> ListTables {
        ListTables {
            backend: self.backend.clone(),
            prefix: None,
            page_size: None,
            filters: Vec::new(),
        }
    }
}

/// What a table listing holds, for the typed filters of
/// [`ListTables::filter`]: one property, the table's name (`TableName`).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct TableItem;

impl TableItem {
    /// The table's name, the listing's one property: `TableItem::NAME.ge("Logs2024")`.
    /// Names compare as the service compares strings (ordinal, case-sensitive).
    pub const NAME: Column<TableItem, String> = Column::new("TableName");
}

/// A listing's filter as given.
#[derive(Debug, Clone)]
enum ListFilter {
    Typed(Filter<TableItem>),
    Raw(RawFilter),
}

/// A listing of tables; see [`TableServiceClient::list_tables`].
#[must_use = "a listing does nothing until streamed or collected"]
pub struct ListTables {
    backend: Arc<Counted>,
    prefix: Option<String>,
    page_size: Option<usize>,
    filters: Vec<ListFilter>,
}

impl fmt::Debug for ListTables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListTables")
            .field("prefix", &self.prefix)
            .field("page_size", &self.page_size)
            .field("filters", &self.filters)
            .finish()
    }
}

/// The OData text of a listing's filters, all of them holding, checked as a
/// query's filter is (syntax, at most 15 comparisons with the prefix's range).
fn filter_text(filters: &[ListFilter], prefix: Option<&str>) -> Result<Option<String>> {
    let invalid = |reason: String| Error::invalid(ValidationError::Query { reason });
    let mut texts = Vec::with_capacity(filters.len());
    let mut comparisons = match prefix {
        Some(p) if crate::filter::prefix_successor(p).is_some() => 2,
        Some(_) => 1,
        None => 0,
    };
    for f in filters {
        let expr = match f {
            ListFilter::Typed(f) => f.expr()?.clone(),
            ListFilter::Raw(raw) => {
                let text = raw.text().map_err(|r| invalid(r.to_owned()))?;
                if text.trim().is_empty() {
                    return Err(invalid("the filter is empty".into()));
                }
                crate::filter::parse(text).map_err(Error::from)?
            }
        };
        comparisons += expr.comparisons();
        texts.push(expr.to_string());
    }
    if comparisons > MAX_COMPARISONS {
        return Err(invalid(format!(
            "the listing's filter has {comparisons} comparisons (its prefix counts too); the service allows at most {MAX_COMPARISONS}"
        )));
    }
    Ok(match texts.len() {
        0 => None,
        1 => texts.pop(),
        _ => Some(
            texts
                .iter()
                .map(|t| format!("({t})"))
                .collect::<Vec<_>>()
                .join(" and "),
        ),
    })
}

impl ListTables {
    /// Only tables whose name starts with `prefix` (case-sensitive).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// At most `n` (1 to 1000) names per request.
    pub fn page_size(mut self, n: usize) -> Self {
        self.page_size = Some(n);
        self
    }

    /// Only tables whose name this typed filter holds for (with a prefix and
    /// other filters, all must hold). Written over [`TableItem::NAME`]; values
    /// are escaped, as in every typed filter.
    ///
    /// ```
    /// use tablekit::table::TableItem;
    /// let service = tablekit::TableServiceClient::embedded();
    /// let listing = service.list_tables().filter(TableItem::NAME.ge("Logs2024") & TableItem::NAME.ne("Logs2024Old"));
    /// # drop(listing);
    /// ```
    pub fn filter(mut self, filter: impl Into<Filter<TableItem>>) -> Self {
        self.filters.push(ListFilter::Typed(filter.into()));
        self
    }

    /// Only tables whose name this OData filter holds for: the escape hatch
    /// for a filter written as text (`TableName` is the one property; string
    /// literals need their `'` doubled, or use `tablekit::odata!`). Parsed
    /// before any request, as [`Query::filter_raw`](crate::table::Query::filter_raw).
    pub fn filter_raw(mut self, odata: impl Into<RawFilter>) -> Self {
        self.filters.push(ListFilter::Raw(odata.into()));
        self
    }

    /// The names, across as many requests as needed.
    pub fn stream(self) -> TableNames {
        struct State {
            backend: Arc<Counted>,
            prefix: Option<String>,
            filter: Option<String>,
            top: Option<usize>,
            next: Option<String>,
            done: bool,
        }
        if let Some(n) = self.page_size {
            if !(1..=validate::MAX_PAGE_SIZE).contains(&n) {
                let err = Error::invalid(ValidationError::PageSize {
                    value: n,
                    max: validate::MAX_PAGE_SIZE,
                });
                return TableNames(stream::once(async move { Err(err) }).boxed());
            }
        }
        let filter = match filter_text(&self.filters, self.prefix.as_deref()) {
            Ok(f) => f,
            Err(err) => return TableNames(stream::once(async move { Err(err) }).boxed()),
        };
        let state = State {
            backend: self.backend,
            prefix: self.prefix,
            filter,
            top: self.page_size,
            next: None,
            done: false,
        };
        TableNames(
            stream::try_unfold(state, |mut s| async move {
                if s.done {
                    return Ok(None);
                }
                let resp = s
                    .backend
                    .execute(Operation::ListTables {
                        prefix: s.prefix.as_deref(),
                        filter: s.filter.as_deref(),
                        next_table_name: s.next.as_deref(),
                        top: s.top,
                    })
                    .await?;
                let Response::Tables {
                    names,
                    next_table_name,
                } = resp
                else {
                    return Err(Error::decode("unexpected answer to a table listing"));
                };
                if next_table_name.is_some() && next_table_name == s.next {
                    return Err(Error::decode(
                        "the service answered a table listing with the continuation it was sent",
                    ));
                }
                s.done = next_table_name.is_none();
                s.next = next_table_name;
                Ok(Some((stream::iter(names.into_iter().map(Ok)), s)))
            })
            .try_flatten()
            .boxed(),
        )
    }

    /// All the names.
    pub async fn fetch_all(self) -> Result<Vec<String>> {
        self.stream().try_collect().await
    }
}

/// The table names of a listing; a [`Stream`] of `Result<String>`, from
/// [`ListTables::stream`].
pub struct TableNames(BoxStream<'static, Result<String>>);

impl fmt::Debug for TableNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TableNames")
    }
}

impl Stream for TableNames {
    type Item = Result<String>;
    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}
