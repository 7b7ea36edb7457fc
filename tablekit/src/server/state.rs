//! What every connection of a server shares: the served accounts, each with
//! its key and its three embedded stores, and how bearer tokens are checked.

use std::path::Path;
use std::sync::Arc;

use super::bearer::BearerConfig;
use crate::account::AccountKey;
use crate::backend::blob::BlobBackend;
use crate::backend::queue::QueueBackend;
use crate::backend::Backend;
use crate::clock::Clock;
use crate::error::Result;

/// What every connection shares: the accounts and how tokens are checked.
pub(crate) struct State {
    pub(crate) accounts: Vec<AccountState>,
    pub(crate) bearer: Option<BearerConfig>,
}

impl State {
    /// The served account `name`; `<name>-secondary` is the same account
    /// (its secondary location, where clients ask for stats, as Azurite
    /// serves it).
    pub(crate) fn account(&self, name: &str) -> Option<&AccountState> {
        let name = name.strip_suffix("-secondary").unwrap_or(name);
        self.accounts.iter().find(|a| a.name == name)
    }
}

/// One served account: its key and its three stores.
pub(crate) struct AccountState {
    pub(crate) name: String,
    pub(crate) key: AccountKey,
    pub(crate) tables: Arc<dyn Backend>,
    pub(crate) queues: Arc<dyn QueueBackend>,
    pub(crate) blobs: Arc<dyn BlobBackend>,
    /// The store file, held open while the account is served.
    _file: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl AccountState {
    pub(crate) fn open(
        name: &str,
        key: AccountKey,
        file: Option<&Path>,
        clock: Clock,
    ) -> Result<Self> {
        Ok(match file {
            None => AccountState {
                name: name.to_owned(),
                key,
                tables: crate::backend::embedded(),
                queues: crate::backend::embedded_queues(clock.clone()),
                blobs: crate::backend::embedded_blobs(clock),
                _file: None,
            },
            Some(path) => {
                let options = crate::options::FileOptions::new();
                let held = crate::backend::embedded::hold_file(path, &options)?;
                AccountState {
                    name: name.to_owned(),
                    key,
                    tables: crate::backend::embedded_at(path)?,
                    queues: crate::backend::embedded_queues_at(path, clock.clone())?,
                    blobs: crate::backend::embedded_blobs_at(path, clock)?,
                    _file: Some(Box::new(held)),
                }
            }
        })
    }
}
