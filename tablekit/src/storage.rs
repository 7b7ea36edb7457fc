//! One storage account's services together: [`Storage`].

use std::fmt;
#[cfg(feature = "durable")]
use std::path::Path;
use std::sync::Arc;

use crate::account::Account;
#[cfg(feature = "blob")]
use crate::blob::{BlobServiceClient, ContainerClient};
use crate::entity::TableEntity;
use crate::error::{Error, Result};
#[cfg(feature = "durable")]
use crate::options::FileOptions;
#[cfg(feature = "queue")]
use crate::queue::{QueueClient, QueueServiceClient};
use crate::table::{TableClient, TableServiceClient};

/// A storage account opened for use: its Table, Queue and Blob service
/// clients together, over HTTP or on one embedded store file.
///
/// This is the account-level form of
/// [`TableServiceClient::embedded_at`], [`QueueServiceClient::embedded_at`]
/// and [`BlobServiceClient::embedded_at`]: [`Storage::embedded_at`] opens the
/// file once and hands out the three services over it, and
/// [`Storage::from_connection_string`] takes the same strings as the service
/// clients, `UseEmbeddedStorage=true;Path=<file>` included, so moving an
/// application from its file to Azure Storage (or Azurite) changes the
/// connection string and nothing else.
///
/// # Why a type of its own, and not [`Account`]
///
/// An [`Account`] is a description: where the services live and how requests
/// are signed. It is parsed, cloned and passed around without any I/O, and it
/// holds no connection. An embedded file is not such a description: opening
/// it is I/O that can fail (a file in use, damaged, of a newer format), and
/// the open file is claimed by the services that use it until they are
/// dropped. So the account-level handle is the *opened* account, `Storage`,
/// built from an `Account` or a path, and `Account` stays what it is.
///
/// Over HTTP, a service whose endpoint the account lacks (a connection string
/// with only a `TableEndpoint`, say) is an error when it is asked for, not
/// when the account is opened. Cloning is cheap; clones share the connections
/// or the open file. The embedded file stays open (and in use to other
/// stores) while a clone of this value or of one of its clients lives.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tablekit::Result<()> {
/// use tablekit::{DynamicEntity, Storage};
///
/// let path = std::env::temp_dir().join(format!("doc-storage-{}.redb", std::process::id()));
/// # let _ = std::fs::remove_file(&path);
/// {
///     let account = Storage::embedded_at(&path)?;
///     let orders = account.table::<DynamicEntity>("Orders")?;
///     orders.create_table().await?;
///     orders.insert(&DynamicEntity::new("2024", "order-17")).await?;
///     let jobs = account.queue("invoices")?;
///     jobs.create_queue().await?;
///     jobs.send("order-17").await?;
///     let receipts = account.container("receipts")?;
///     receipts.create_container().await?;
///     receipts.blob("order-17.pdf")?.upload(b"%PDF".to_vec()).await?;
/// }
/// // The same file through the connection string: everything is there.
/// let account = Storage::from_connection_string(&format!(
///     "UseEmbeddedStorage=true;Path={}",
///     path.display()
/// ))?;
/// assert!(account.tables()?.is_embedded());
/// let order = account.table::<DynamicEntity>("Orders")?.get(("2024", "order-17")).await?;
/// assert!(order.is_some());
/// assert_eq!(account.queue("invoices")?.receive().await?[0].text()?, "order-17");
/// let pdf = account.container("receipts")?.blob("order-17.pdf")?.download().bytes().await?;
/// assert_eq!(pdf.as_ref(), b"%PDF");
/// # drop(account);
/// # tablekit::storage::remove_file(&path).unwrap();
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Storage {
    tables: Service<TableServiceClient>,
    #[cfg(feature = "queue")]
    queues: Service<QueueServiceClient>,
    #[cfg(feature = "blob")]
    blobs: Service<BlobServiceClient>,
    kind: StorageKind,
    description: Arc<str>,
}

/// What [`check_file`] found in a store file that passed.
#[cfg(feature = "durable")]
#[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileReport {
    /// Each table's name (as created) and how many entities it holds, in
    /// the order of the names' lower-cased forms.
    pub tables: Vec<(String, u64)>,
    /// The file's size in bytes.
    pub file_bytes: u64,
}

/// Checks the embedded store file at `path` without changing its data: the
/// checksum of every page (redb's integrity check, which an open runs too
/// unless the file is as its last clean close left it), and every entity of
/// every table read, decoded, and found in key order. The file must not be
/// open (in this process or another). A file that passes is sealed as a
/// clean close seals it (`<file>.seal`, see
/// [`TableServiceClient::embedded_at`](crate::TableServiceClient::embedded_at)),
/// so its next open skips the check of every page.
///
/// # Errors
///
/// A configuration error whose message names the file and what is wrong
/// with it, and where:
///
/// - missing, in use by another open store, empty, not a redb database, a
///   redb database that is not a store, or of a format this build does not
///   read;
/// - damaged, found by redb's check of the pages: the page that fails its
///   checksum, by its number and byte range (`page 12 (bytes
///   49152..53248) fails its checksum`; page 0 is the header), or a file cut
///   short (its length, fewer bytes than its header records);
/// - damaged, found reading the entities: the table and the entity, by its
///   PartitionKey and RowKey (`in table Orders, the entity ("p1", "r7") is
///   unreadable: ...`), a key that is unreadable (named by the entity
///   before it), two entities out of order (both named), or a page redb
///   cannot read (the last entity read before it).
///
/// No value of an entity is shown. Where redb reported the damage, its own
/// error is the [`source`](std::error::Error::source) of the error (and its
/// wording is quoted in the message). A file that fails is not sealed.
#[cfg(feature = "durable")]
#[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
pub fn check_file(path: impl AsRef<Path>) -> Result<FileReport> {
    let path = path.as_ref();
    let tables = crate::backend::check_store_file(path)?;
    Ok(FileReport {
        tables,
        file_bytes: std::fs::metadata(path).map_or(0, |m| m.len()),
    })
}

/// Compacts the embedded store file at `path`: the space of deleted
/// entities (and of the old versions of updated ones), which a store reuses
/// for its later writes but does not give back, is returned to the file
/// system. The file must not be open (in this process or another). The
/// file's size in bytes before and after. A store also compacts its file
/// when it closes if the entities deleted since its last compaction took at
/// least 1 MiB and a quarter of the file's size, or if its entities take at
/// most half of a file of at least 4 MiB that holds no queue or blob
/// (whatever freed the rest: updates that shrank entities, sparse pages).
/// That costs the close about what this call costs (0.7 s for a file of
/// 100,000 entities of the `durable_store` bench).
///
/// # Errors
///
/// As [`check_file`], and a configuration error if the compaction fails
/// (the file is then as it was, or compacted in part: whole either way).
#[cfg(feature = "durable")]
#[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
pub fn compact_file(path: impl AsRef<Path>) -> Result<(u64, u64)> {
    crate::backend::compact_store_file(path.as_ref())
}

/// Removes the embedded store file at `path` and the seal a clean close
/// left beside it (`<file>.seal`, see [`check_file`]): what deleting a store
/// takes, where `std::fs::remove_file` would leave the seal behind.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tablekit::Result<()> {
/// let path = std::env::temp_dir().join(format!("tablekit-remove-{}.db", std::process::id()));
/// let service = tablekit::TableServiceClient::embedded_at(&path)?;
/// service.create_table("Kept").await?;
/// drop(service); // closed: sealed
/// tablekit::storage::remove_file(&path)?;
/// assert!(!path.exists());
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// A configuration error naming the file if a store of this process has it
/// open, or if the file system refuses (no such file, no permission).
#[cfg(feature = "durable")]
#[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
pub fn remove_file(path: impl AsRef<Path>) -> Result<()> {
    crate::backend::remove_store_file(path.as_ref())
}

/// Where a [`Storage`] keeps its data: what [`Storage::kind`] answers, for a
/// program that behaves differently on each (a test that needs a real
/// service, a memory budget that counts what an in-memory store holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StorageKind {
    /// The embedded store in this process's memory ([`Storage::embedded`]):
    /// empty when it is made, gone when its last clone is dropped.
    Memory,
    /// The embedded store kept in a file ([`Storage::embedded_at`], or
    /// `UseEmbeddedStorage=true;Path=<file>`).
    File,
    /// A storage account over HTTP: Azure Storage, Azurite, or another
    /// service that speaks the protocol ([`Storage::new`]).
    Http,
}

/// A service client, or why the account has none (a configuration error's
/// message, which never holds a secret).
type Service<T> = std::result::Result<T, String>;

/// Why [`Storage::from_env_var`] fails in a build without the embedded store
/// when `variable` is not set.
#[cfg(not(feature = "embedded"))]
fn no_store_to_fall_back_to(variable: &str) -> String {
    format!(
        "{variable} is not set, and this build of tablekit has no embedded store to fall back to \
         (feature `embedded`, one of its default features): set {variable} to a connection string"
    )
}

fn service<T>(client: &Service<T>) -> Result<&T> {
    client.as_ref().map_err(|why| Error::config(why.clone()))
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Storage");
        d.field("tables", &self.tables);
        #[cfg(feature = "queue")]
        d.field("queues", &self.queues);
        #[cfg(feature = "blob")]
        d.field("blobs", &self.blobs);
        d.field("kind", &self.kind).finish()
    }
}

impl Storage {
    /// The environment variable [`Storage::from_env`] reads:
    /// `TABLEKIT_CONNECTION_STRING`.
    pub const CONNECTION_STRING_VARIABLE: &'static str = "TABLEKIT_CONNECTION_STRING";

    /// The account of the connection string in `TABLEKIT_CONNECTION_STRING`
    /// or, when that variable is not set (or blank), a fresh in-memory
    /// embedded store, so that a program runs on a machine with no server
    /// and on Azure or Azurite unchanged.
    ///
    /// It says which it chose: a `tracing` event at `INFO` level (target
    /// `tablekit::storage`, with the variable's name and the storage's
    /// [`kind`](Storage::kind) and [`description`](Storage::description) as
    /// fields; never the connection string, which may hold a key), and
    /// [`Storage::description`] for the program to print.
    ///
    /// The in-memory store holds only what this process writes and is gone
    /// when it ends. For data that must outlive the process without a
    /// server, set the variable to `UseEmbeddedStorage=true;Path=<file>`.
    ///
    /// The fallback to memory is the `embedded` feature's (a default one).
    /// A build without it (tables over HTTP only:
    /// `default-features = false, features = ["derive"]`) has this function
    /// too, so that the same program compiles there, but has no store to fall
    /// back to: the variable must name an account.
    ///
    /// ```
    /// # fn main() -> tablekit::Result<()> {
    /// let storage = tablekit::Storage::from_env()?;
    /// println!("storage: {}", storage.description());
    /// let employees = storage.table::<tablekit::DynamicEntity>("Employees")?;
    /// # let _ = employees; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A variable that is set but malformed is an error, not a silent
    /// fallback to memory: a connection string that does not parse (see
    /// [`Storage::from_connection_string`]), an embedded store file that
    /// cannot be opened, or a value that is not Unicode. Without the
    /// `embedded` feature, a configuration error if the variable is not set
    /// (or blank), naming the variable and the feature.
    pub fn from_env() -> Result<Storage> {
        Storage::from_env_var(Storage::CONNECTION_STRING_VARIABLE)
    }

    /// [`Storage::from_env`] with another variable: the connection string in
    /// the environment variable `name`, else a fresh in-memory embedded store.
    ///
    /// ```
    /// let storage = tablekit::Storage::from_env_var("MYAPP_STORAGE_CONNECTION")?;
    /// # if std::env::var_os("MYAPP_STORAGE_CONNECTION").is_none() {
    /// assert_eq!(storage.kind(), tablekit::storage::StorageKind::Memory); // the variable is not set
    /// # }
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Storage::from_env`].
    pub fn from_env_var(name: &str) -> Result<Storage> {
        let value = match std::env::var(name) {
            Ok(value) => Some(value),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(Error::config(format!(
                    "the environment variable {name} is not valid Unicode, so it is no connection string"
                )))
            }
        };
        #[cfg(feature = "embedded")]
        let storage = Storage::from_connection_string_or_embedded(value.as_deref())?;
        #[cfg(not(feature = "embedded"))]
        let storage = match value.as_deref() {
            Some(s) if !s.trim().is_empty() => Storage::from_connection_string(s)?,
            _ => return Err(Error::config(no_store_to_fall_back_to(name))),
        };
        if storage.kind == StorageKind::Memory {
            tracing::info!(
                target: "tablekit::storage",
                variable = name,
                kind = ?storage.kind,
                description = &*storage.description,
                "{name} is not set: using {}",
                storage.description
            );
        } else {
            tracing::info!(
                target: "tablekit::storage",
                variable = name,
                kind = ?storage.kind,
                description = &*storage.description,
                "using {}, from {name}",
                storage.description
            );
        }
        Ok(storage)
    }

    /// The account of `connection` ([`Storage::from_connection_string`]), or
    /// a fresh in-memory embedded store ([`Storage::embedded`]) when there is
    /// none: `None`, or a string that is empty or only blanks. This is
    /// [`Storage::from_env`] for a connection string found elsewhere (a
    /// command-line option, a configuration file); it reads no environment
    /// and emits no event.
    ///
    /// ```
    /// use tablekit::{Storage, storage::StorageKind};
    ///
    /// assert_eq!(Storage::from_connection_string_or_embedded(None)?.kind(), StorageKind::Memory);
    /// assert_eq!(Storage::from_connection_string_or_embedded(Some(" "))?.kind(), StorageKind::Memory);
    /// let azurite = Storage::from_connection_string_or_embedded(Some("UseDevelopmentStorage=true"))?;
    /// assert_eq!(azurite.kind(), StorageKind::Http);
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Storage::from_connection_string`], for a connection string that
    /// is not blank.
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn from_connection_string_or_embedded(connection: Option<&str>) -> Result<Storage> {
        match connection {
            Some(s) if !s.trim().is_empty() => Storage::from_connection_string(s),
            _ => Ok(Storage::embedded()),
        }
    }

    /// Where this account keeps its data: in memory, in a file, or in a
    /// service over HTTP.
    ///
    /// ```
    /// assert_eq!(tablekit::Storage::embedded().kind(), tablekit::storage::StorageKind::Memory);
    /// ```
    pub fn kind(&self) -> StorageKind {
        self.kind
    }

    /// A sentence for people, naming where this account keeps its data:
    /// `the embedded store in memory (this process only)`, `the embedded
    /// store file ./data/app.redb`, or `the storage account devstoreaccount1
    /// over HTTP (http://127.0.0.1:10002/devstoreaccount1)` (the account's
    /// name and its first endpoint; never a key or a SAS token). Its wording
    /// may change; branch on [`Storage::kind`], not on this text.
    ///
    /// ```
    /// let storage = tablekit::Storage::from_connection_string("UseDevelopmentStorage=true")?;
    /// assert_eq!(
    ///     storage.description(),
    ///     "the storage account devstoreaccount1 over HTTP (http://127.0.0.1:10002/devstoreaccount1)"
    /// );
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The account's services over HTTP, with default options. Nothing is
    /// sent until the first operation; a service the account has no endpoint
    /// for is an error when it is asked for.
    ///
    /// ```
    /// let account = tablekit::Account::from_connection_string(
    ///     "TableEndpoint=https://myaccount.table.core.windows.net;SharedAccessSignature=sv=2019-02-02&sig=abc",
    /// )?;
    /// let storage = tablekit::Storage::new(account);
    /// assert!(storage.tables().is_ok());
    /// let err = storage.queues().unwrap_err();
    /// assert!(err.to_string().contains("no queue endpoint"), "{err}");
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    pub fn new(account: Account) -> Storage {
        let endpoint = [
            account.table_endpoint(),
            account.queue_endpoint(),
            account.blob_endpoint(),
        ]
        .into_iter()
        .flatten()
        .next()
        // An endpoint has no query; should one carry a token anyway, it stays out.
        .map(|e| e.split('?').next().unwrap_or_default().to_owned());
        let description = match endpoint {
            Some(e) => format!(
                "the storage account {} over HTTP ({e})",
                account.account_name()
            ),
            None => format!("the storage account {} over HTTP", account.account_name()),
        };
        Storage {
            tables: TableServiceClient::new(account.clone()).map_err(|e| e.to_string()),
            #[cfg(feature = "queue")]
            queues: QueueServiceClient::new(account.clone()).map_err(|e| e.to_string()),
            #[cfg(feature = "blob")]
            blobs: BlobServiceClient::new(account).map_err(|e| e.to_string()),
            kind: StorageKind::Http,
            description: description.into(),
        }
    }

    /// The account of a connection string: over HTTP as [`Storage::new`], or
    /// the embedded store file of `UseEmbeddedStorage=true;Path=<file>` as
    /// [`Storage::embedded_at`] (so `Path=./data/app.redb` creates `./data`
    /// when it is missing; a relative path is relative to the process's
    /// working directory).
    ///
    /// # Errors
    ///
    /// A malformed connection string (see [`Account::from_connection_string`]),
    /// or a store file that cannot be opened.
    pub fn from_connection_string(s: &str) -> Result<Storage> {
        match crate::backend::target(s)? {
            #[cfg(feature = "durable")]
            crate::backend::Target::File(path) => Storage::embedded_at(path),
            crate::backend::Target::Account(account) => Ok(Storage::new(account)),
        }
    }

    /// The account kept in the embedded store file at `path` (created if
    /// missing, with any missing folders above it): its tables, queues and
    /// blobs, opened once, every acknowledged change committed to the file
    /// first (see [`TableServiceClient::embedded_at`]).
    ///
    /// # Errors
    ///
    /// A configuration error if the file cannot be opened: it is in use by
    /// another open store (in this process or another), damaged, of a newer
    /// format, not a store, a directory, or unwritable, or its folder cannot
    /// be created. Nothing is claimed then: a failure of a later service
    /// releases the ones opened before it.
    #[cfg(feature = "durable")]
    #[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
    pub fn embedded_at(path: impl AsRef<Path>) -> Result<Storage> {
        let path = path.as_ref();
        let tables = TableServiceClient::embedded_at(path)?;
        #[cfg(feature = "queue")]
        let queues = QueueServiceClient::embedded_at(path)?;
        #[cfg(feature = "blob")]
        let blobs = BlobServiceClient::embedded_at(path)?;
        Ok(Storage {
            tables: Ok(tables),
            #[cfg(feature = "queue")]
            queues: Ok(queues),
            #[cfg(feature = "blob")]
            blobs: Ok(blobs),
            kind: StorageKind::File,
            description: format!("the embedded store file {}", path.display()).into(),
        })
    }

    /// [`Storage::embedded_at`] with options for the file: how much of it
    /// is cached in memory ([`FileOptions::cache_bytes`]) and when writes
    /// are synced ([`FileOptions::durability`](crate::options::FileOptions::durability)). The options are
    /// the file's while it is open in this process: an open of a file that
    /// this process has open already is refused.
    ///
    /// ```
    /// use tablekit::{options::FileOptions, Storage};
    ///
    /// let path = std::env::temp_dir().join(format!("doc-options-{}.redb", std::process::id()));
    /// # let _ = std::fs::remove_file(&path);
    /// let account = Storage::embedded_at_with(&path, FileOptions::new().cache_bytes(8 << 20))?;
    /// # drop(account); tablekit::storage::remove_file(&path).unwrap();
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Storage::embedded_at`], and a configuration error if this
    /// process has the file open already.
    #[cfg(feature = "durable")]
    #[cfg_attr(docsrs, doc(cfg(feature = "durable")))]
    pub fn embedded_at_with(path: impl AsRef<Path>, options: FileOptions) -> Result<Storage> {
        let path = path.as_ref();
        // The file opened with the options first: the services below find
        // it open and share it.
        let _held = crate::backend::hold_store_file(path, &options)?;
        Storage::embedded_at(path)
    }

    /// A fresh, isolated, in-memory account: each service an empty embedded
    /// store (as [`TableServiceClient::embedded`] and its queue and blob
    /// counterparts).
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn embedded() -> Storage {
        Storage {
            tables: Ok(TableServiceClient::embedded()),
            #[cfg(feature = "queue")]
            queues: Ok(QueueServiceClient::embedded()),
            #[cfg(feature = "blob")]
            blobs: Ok(BlobServiceClient::embedded()),
            kind: StorageKind::Memory,
            description: "the embedded store in memory (this process only)".into(),
        }
    }

    /// A fresh, in-memory account like [`Storage::embedded`] whose Table
    /// service simulates the service's limits as `sim` describes (see
    /// [`TableServiceClient::embedded_simulated`]). The queues and blobs are
    /// plain embedded stores, on `sim`'s manual clock if it has one.
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn embedded_simulated(sim: crate::simulation::Simulation) -> Storage {
        #[cfg(any(feature = "queue", feature = "blob"))]
        let clock = sim.manual_clock().cloned();
        Storage {
            #[cfg(feature = "queue")]
            queues: Ok(match &clock {
                Some(c) => QueueServiceClient::embedded_with_clock(c.clone()),
                None => QueueServiceClient::embedded(),
            }),
            #[cfg(feature = "blob")]
            blobs: Ok(match &clock {
                Some(c) => BlobServiceClient::embedded_with_clock(c.clone()),
                None => BlobServiceClient::embedded(),
            }),
            tables: Ok(TableServiceClient::embedded_simulated(sim)),
            kind: StorageKind::Memory,
            description:
                "the embedded store in memory (this process only), simulating the service's limits"
                    .into(),
        }
    }

    /// The Table service.
    ///
    /// # Errors
    ///
    /// Over HTTP, a configuration error if the account has no table endpoint
    /// (or its endpoint is not usable).
    pub fn tables(&self) -> Result<&TableServiceClient> {
        service(&self.tables)
    }

    /// The Queue service.
    ///
    /// # Errors
    ///
    /// Over HTTP, a configuration error if the account has no queue endpoint
    /// (or its endpoint or credential is not usable for queues).
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    pub fn queues(&self) -> Result<&QueueServiceClient> {
        service(&self.queues)
    }

    /// The Blob service.
    ///
    /// # Errors
    ///
    /// Over HTTP, a configuration error if the account has no blob endpoint
    /// (or its endpoint or credential is not usable for blobs).
    #[cfg(feature = "blob")]
    #[cfg_attr(docsrs, doc(cfg(feature = "blob")))]
    pub fn blobs(&self) -> Result<&BlobServiceClient> {
        service(&self.blobs)
    }

    /// A client for the table `name` holding entities of type `T` (see
    /// [`TableServiceClient::table`]).
    pub fn table<T: TableEntity>(&self, name: &str) -> Result<TableClient<T>> {
        self.tables()?.table(name)
    }

    /// A client for the queue `name` (see [`QueueServiceClient::queue`]).
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    pub fn queue(&self, name: &str) -> Result<QueueClient> {
        self.queues()?.queue(name)
    }

    /// A client for the blob container `name` (see
    /// [`BlobServiceClient::container`]).
    #[cfg(feature = "blob")]
    #[cfg_attr(docsrs, doc(cfg(feature = "blob")))]
    pub fn container(&self, name: &str) -> Result<ContainerClient> {
        self.blobs()?.container(name)
    }
}

#[cfg(test)]
mod tests {
    use super::{Storage, StorageKind};
    use std::sync::{Arc, Mutex};

    /// Collects the text of every event (its fields, message included).
    #[derive(Clone, Default)]
    struct Events(Arc<Mutex<Vec<String>>>);

    struct Text<'a>(&'a mut String);

    impl tracing::field::Visit for Text<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            self.0.push_str(&format!("{}={value:?} ", field.name()));
        }
    }

    impl tracing::Subscriber for Events {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut text = format!(
                "{} {} ",
                event.metadata().level(),
                event.metadata().target()
            );
            event.record(&mut Text(&mut text));
            self.0.lock().unwrap().push(text);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    fn temp_path(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "tablekit-storage-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ))
    }

    #[test]
    fn from_env_var_without_the_variable_is_a_fresh_memory_store_and_says_so() {
        // A name nobody sets: the environment is read, never changed.
        let name = format!("TABLEKIT_UNSET_{}", uuid::Uuid::new_v4().simple());
        let events = Events::default();
        let storage = tracing::subscriber::with_default(events.clone(), || {
            Storage::from_env_var(&name).expect("an unset variable is the memory store")
        });
        assert_eq!(storage.kind(), StorageKind::Memory);
        assert!(storage.tables().unwrap().is_embedded());
        assert!(storage.description().contains("in memory"), "{storage:?}");
        let events = events.0.lock().unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(
            events[0].starts_with("INFO tablekit::storage ")
                && events[0].contains(&format!(
                    "{name} is not set: using the embedded store in memory"
                ))
                && events[0].contains("kind=Memory"),
            "{events:?}"
        );
    }

    #[test]
    fn a_set_variable_is_read_and_a_malformed_one_is_an_error_not_a_fallback() {
        // PATH is set wherever tests run, and is no connection string.
        if std::env::var_os("PATH").is_none() {
            return;
        }
        let err = Storage::from_env_var("PATH").expect_err("PATH is no connection string");
        assert!(
            matches!(err.kind(), crate::error::ErrorKind::Config(_)),
            "{err}"
        );
        let path = std::env::var("PATH").unwrap_or_default();
        assert!(path.len() < 4 || !err.to_string().contains(&path), "{err}");
    }

    #[test]
    fn a_connection_string_opens_its_account_and_none_or_a_blank_one_the_memory_store() {
        for blank in [None, Some(""), Some("  \t")] {
            let s = Storage::from_connection_string_or_embedded(blank).unwrap();
            assert_eq!(s.kind(), StorageKind::Memory, "{blank:?}");
        }

        let http = Storage::from_connection_string_or_embedded(Some(
            "DefaultEndpointsProtocol=https;AccountName=myaccount;AccountKey=c2VjcmV0LWtleQ==",
        ))
        .unwrap();
        assert_eq!(http.kind(), StorageKind::Http);
        assert_eq!(
            http.description(),
            "the storage account myaccount over HTTP (https://myaccount.table.core.windows.net)"
        );
        assert!(!format!("{http:?}").contains("c2VjcmV0"), "{http:?}");

        let sas = Storage::from_connection_string(
            "BlobEndpoint=https://myaccount.blob.core.windows.net;SharedAccessSignature=sv=2019-02-02&sig=s3cr3t",
        )
        .unwrap();
        assert_eq!(
            sas.description(),
            "the storage account myaccount over HTTP (https://myaccount.blob.core.windows.net)"
        );

        let path = temp_path("kind");
        let file = Storage::from_connection_string_or_embedded(Some(&format!(
            "UseEmbeddedStorage=true;Path={}",
            path.display()
        )))
        .unwrap();
        assert_eq!(file.kind(), StorageKind::File);
        assert_eq!(
            file.description(),
            format!("the embedded store file {}", path.display())
        );
        drop(file);
        std::fs::remove_file(&path).unwrap();

        let err = Storage::from_connection_string_or_embedded(Some("AccountKey=s3cr3t"))
            .expect_err("malformed");
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
    }

    #[tokio::test]
    async fn an_embedded_path_in_a_missing_folder_creates_the_folder() {
        let root = temp_path("folders");
        let path = root.join("data").join("app.redb");
        {
            let storage = Storage::from_connection_string(&format!(
                "UseEmbeddedStorage=true;Path={}",
                path.display()
            ))
            .expect("the missing folders are created");
            let notes = storage.table::<crate::DynamicEntity>("Notes").unwrap();
            notes.create_table().await.unwrap();
            notes
                .insert(&crate::DynamicEntity::new("p", "r"))
                .await
                .unwrap();
        }
        assert!(path.is_file(), "{}", path.display());
        // The path form, too, and the store reopens from the folder it made.
        let again = crate::TableServiceClient::embedded_at(&path).unwrap();
        let notes = again.table::<crate::DynamicEntity>("Notes").unwrap();
        assert!(notes.get(("p", "r")).await.unwrap().is_some());
        drop((notes, again));
        let other = root.join("x").join("y").join("other.redb");
        #[cfg(feature = "queue")]
        drop(crate::QueueServiceClient::embedded_at(&other).expect("queues make folders too"));
        #[cfg(not(feature = "queue"))]
        drop(crate::TableServiceClient::embedded_at(&other).expect("tables make folders too"));

        // A folder that cannot be made (a file is in the way) is a clear error.
        let blocked = root.join("app.redb").join("inner.redb");
        std::fs::write(root.join("app.redb"), b"").unwrap();
        let err = Storage::embedded_at(&blocked).expect_err("a file is where the folder would be");
        let message = err.to_string();
        assert!(
            message.contains(&blocked.display().to_string()) && message.contains("folder"),
            "{message}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
