//! The built-in operation: [`Archive`], the design guide's example.

use std::fmt;
use std::marker::PhantomData;

use serde::{Deserialize, Serialize};
use tablekit::{EntityKey, Result, TableEntity};

use super::context::{Guarded, StepContext};
use super::{OpResult, Operation, ARCHIVE_KIND, MAX_REREADS};
use crate::error::refused;

// ---------------------------------------------------------------------------
// The built-in operation.

/// The guide's archive of employee #456: move one entity of type `T` from
/// table `from` (`Current`) to table `to` (`Archive`).
///
/// | step | request | on a retry |
/// |---|---|---|
/// | 1 | read from `from`, with the ETag | nothing there: an earlier attempt finished; done |
/// | 2 | insert-or-replace into `to` | the same copy again |
/// | 3 | delete from `from` if unchanged since step 1 | 412: someone changed it, start again at step 1 (so the archived copy is never stale); 404: another attempt deleted it; done |
///
/// Then the worker deletes the message. The entity is read and written as
/// `T`: properties `T` does not declare are not carried over, and an entity
/// that does not decode as `T` fails the operation (and, after the retries,
/// goes to the poison queue). Use `Archive<DynamicEntity>` for a copy of
/// every property.
///
/// The kind is [`ARCHIVE_KIND`] whatever `T` is: one worker runs archives of
/// one entity type.
#[derive(Serialize, Deserialize)]
#[serde(bound = "")]
pub struct Archive<T> {
    from: String,
    to: String,
    partition_key: String,
    row_key: String,
    #[serde(skip)]
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Archive<T> {
    fn clone(&self) -> Self {
        Archive {
            from: self.from.clone(),
            to: self.to.clone(),
            partition_key: self.partition_key.clone(),
            row_key: self.row_key.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for Archive<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Archive")
            .field("from", &self.from)
            .field("to", &self.to)
            .field("partition_key", &self.partition_key)
            .field("row_key", &self.row_key)
            .finish()
    }
}

impl<T: TableEntity> Archive<T> {
    /// Archives the entity `key` from table `from` to table `to`. The names
    /// and the key are checked here, before any request.
    ///
    /// ```
    /// use tablekit::DynamicEntity;
    /// use tablekit_patterns::eventual::Archive;
    ///
    /// let op = Archive::<DynamicEntity>::new("Current", "Archive", ("Sales", "000456")).unwrap();
    /// assert_eq!(op.key(), tablekit::EntityKey::new("Sales", "000456"));
    /// assert!(Archive::<DynamicEntity>::new("Current", "Current", ("Sales", "1")).unwrap_err().is_invalid_input());
    /// assert!(Archive::<DynamicEntity>::new("Cur rent", "Archive", ("Sales", "1")).unwrap_err().is_invalid_input());
    /// assert!(Archive::<DynamicEntity>::new("Current", "Archive", ("Sales", "#456")).unwrap_err().is_invalid_input());
    /// ```
    pub fn new(from: &str, to: &str, key: impl Into<EntityKey>) -> Result<Self> {
        tablekit::validate::table_name(from)?;
        tablekit::validate::table_name(to)?;
        if from.eq_ignore_ascii_case(to) {
            return Err(refused(
                "eventual",
                format!("an archive from table {from} into itself would delete the entity"),
            ));
        }
        let key = key.into();
        key.validate()?;
        Ok(Archive {
            from: from.to_owned(),
            to: to.to_owned(),
            partition_key: key.partition_key,
            row_key: key.row_key,
            _t: PhantomData,
        })
    }

    /// The key of the entity it archives.
    pub fn key(&self) -> EntityKey {
        EntityKey::new(&self.partition_key, &self.row_key)
    }

    /// The table it archives from.
    pub fn from_table(&self) -> &str {
        &self.from
    }

    /// The table it archives to.
    pub fn to_table(&self) -> &str {
        &self.to
    }
}

impl<T: TableEntity + Send + Sync + 'static> Operation for Archive<T> {
    const KIND: &'static str = ARCHIVE_KIND;

    async fn run(&self, ctx: &StepContext) -> OpResult {
        // A message is input from outside: check it as `new` does.
        Archive::<T>::new(&self.from, &self.to, self.key())?;
        let current = ctx.tables().table::<T>(&self.from)?;
        let archive = ctx.tables().table::<T>(&self.to)?;
        for _ in 0..MAX_REREADS {
            let Some((entity, etag)) = ctx.read(&current, self.key()).await? else {
                return Ok(()); // already archived by an earlier attempt
            };
            ctx.insert_or_replace(&archive, &entity).await?;
            match ctx.delete_if_unchanged(&current, self.key(), &etag).await? {
                Guarded::Done(_) | Guarded::Gone => return Ok(()),
                Guarded::Changed => continue, // archive the newer version instead
            }
        }
        Err(format!(
            "{} changed {MAX_REREADS} times while being archived; will retry later",
            self.key()
        )
        .into())
    }
}
