//! One storage account's services together: [`Storage`].

use std::fmt;
use std::path::Path;

use crate::account::Account;
use crate::blob::{BlobServiceClient, ContainerClient};
use crate::entity::TableEntity;
use crate::error::{Error, Result};
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
///     jobs.send("order-17")?.await?;
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
/// # std::fs::remove_file(&path).unwrap();
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Storage {
    tables: Service<TableServiceClient>,
    queues: Service<QueueServiceClient>,
    blobs: Service<BlobServiceClient>,
}

/// A service client, or why the account has none (a configuration error's
/// message, which never holds a secret).
type Service<T> = std::result::Result<T, String>;

fn service<T>(client: &Service<T>) -> Result<&T> {
    client.as_ref().map_err(|why| Error::config(why.clone()))
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Storage")
            .field("tables", &self.tables)
            .field("queues", &self.queues)
            .field("blobs", &self.blobs)
            .finish()
    }
}

impl Storage {
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
        Storage {
            tables: TableServiceClient::new(account.clone()).map_err(|e| e.to_string()),
            queues: QueueServiceClient::new(account.clone()).map_err(|e| e.to_string()),
            blobs: BlobServiceClient::new(account).map_err(|e| e.to_string()),
        }
    }

    /// The account of a connection string: over HTTP as [`Storage::new`], or
    /// the embedded store file of `UseEmbeddedStorage=true;Path=<file>` as
    /// [`Storage::embedded_at`].
    ///
    /// # Errors
    ///
    /// A malformed connection string (see [`Account::from_connection_string`]),
    /// or a store file that cannot be opened.
    pub fn from_connection_string(s: &str) -> Result<Storage> {
        if let Some(path) = crate::backend::embedded_connection(s) {
            return Storage::embedded_at(path?);
        }
        Ok(Storage::new(Account::from_connection_string(s)?))
    }

    /// The account kept in the embedded store file at `path` (created if
    /// missing): its tables, queues and blobs, opened once, every
    /// acknowledged change committed to the file first (see
    /// [`TableServiceClient::embedded_at`]).
    ///
    /// # Errors
    ///
    /// A configuration error if the file cannot be opened: it is in use by
    /// another open store (in this process or another), damaged, of a newer
    /// format, not a store, a directory, or unwritable. Nothing is claimed
    /// then: a failure of a later service releases the ones opened before it.
    pub fn embedded_at(path: impl AsRef<Path>) -> Result<Storage> {
        let path = path.as_ref();
        let tables = TableServiceClient::embedded_at(path)?;
        let queues = QueueServiceClient::embedded_at(path)?;
        let blobs = BlobServiceClient::embedded_at(path)?;
        Ok(Storage {
            tables: Ok(tables),
            queues: Ok(queues),
            blobs: Ok(blobs),
        })
    }

    /// A fresh, isolated, in-memory account: each service an empty embedded
    /// store (as [`TableServiceClient::embedded`] and its queue and blob
    /// counterparts).
    pub fn embedded() -> Storage {
        Storage {
            tables: Ok(TableServiceClient::embedded()),
            queues: Ok(QueueServiceClient::embedded()),
            blobs: Ok(BlobServiceClient::embedded()),
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
    pub fn queues(&self) -> Result<&QueueServiceClient> {
        service(&self.queues)
    }

    /// The Blob service.
    ///
    /// # Errors
    ///
    /// Over HTTP, a configuration error if the account has no blob endpoint
    /// (or its endpoint or credential is not usable for blobs).
    pub fn blobs(&self) -> Result<&BlobServiceClient> {
        service(&self.blobs)
    }

    /// A client for the table `name` holding entities of type `T` (see
    /// [`TableServiceClient::table`]).
    pub fn table<T: TableEntity>(&self, name: &str) -> Result<TableClient<T>> {
        self.tables()?.table(name)
    }

    /// A client for the queue `name` (see [`QueueServiceClient::queue`]).
    pub fn queue(&self, name: &str) -> Result<QueueClient> {
        self.queues()?.queue(name)
    }

    /// A client for the blob container `name` (see
    /// [`BlobServiceClient::container`]).
    pub fn container(&self, name: &str) -> Result<ContainerClient> {
        self.blobs()?.container(name)
    }
}
