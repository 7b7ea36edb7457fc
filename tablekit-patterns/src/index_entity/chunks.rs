//! The index entities of one value: chunks of entries, read together, and
//! the one write that adds, removes or prunes an entry.

use std::collections::HashSet;

use tablekit::{
    error::DecodeError, table::Transaction, DynamicEntity, ETag, EdmValue, EntityKey, Error,
    IfMatch, Result, TableClient, UpdateMode,
};

use crate::error::refused;
use crate::range::KeyRange;

use super::{chunk_row_key, ENTITY_IDS, MAX_CHUNKS, MAX_CHUNK_UNITS};

/// What the RowKeys of every index entity of `value` start with:
/// `{prefix}{value}_`.
pub(super) fn chunks_prefix(prefix: &str, value: &str) -> String {
    format!("{prefix}{value}_")
}

/// One stored (or about to be stored) index entity of a value.
#[derive(Debug, Clone)]
pub(super) struct Chunk {
    number: usize,
    entries: Vec<String>,
    etag: Option<ETag>,
}

/// The write that changes one index entity.
#[derive(Debug)]
pub(super) enum ChunkWrite {
    Insert(DynamicEntity),
    Update(DynamicEntity, ETag),
    Delete(EntityKey, ETag),
}

impl ChunkWrite {
    pub(super) fn add_to(self, tx: &mut Transaction<DynamicEntity>) -> Result<()> {
        match self {
            ChunkWrite::Insert(e) => tx.insert(&e).map(drop),
            ChunkWrite::Update(e, etag) => tx
                .update(&e, UpdateMode::Replace, IfMatch::ETag(etag))
                .map(drop),
            ChunkWrite::Delete(key, etag) => tx.delete(key, IfMatch::ETag(etag)).map(drop),
        }
    }

    pub(super) async fn send(self, raw: &TableClient<DynamicEntity>) -> Result<()> {
        match self {
            ChunkWrite::Insert(e) => raw.insert(&e).await.map(drop),
            ChunkWrite::Update(e, etag) => raw
                .update(&e, UpdateMode::Replace, IfMatch::ETag(etag))
                .await
                .map(drop),
            ChunkWrite::Delete(key, etag) => raw.delete(key, IfMatch::ETag(etag)).await,
        }
    }
}

fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// The entries an index entity lists, in order.
pub(super) fn entries_of(row: &DynamicEntity) -> Vec<String> {
    match row.get(ENTITY_IDS) {
        Some(EdmValue::String(s)) if !s.is_empty() => s.split('\n').map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// Whether `entry` fits after `entries` in an index entity of `capacity`
/// UTF-16 code units (entries joined by `\n`).
pub(super) fn fits(capacity: usize, entries: &[String], entry: &str) -> bool {
    // One separator per stored entry: the new entry's own is the one before it.
    let used: usize = entries.iter().map(|e| utf16_len(e)).sum::<usize>() + entries.len();
    used + utf16_len(entry) <= capacity
}

/// Where an entry is added: index entity `number`, stored or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Place {
    pub(super) number: usize,
    pub(super) stored: bool,
}

/// The index entities of one value, as read by one range query.
#[derive(Debug)]
pub(super) struct Chunks {
    partition_key: String,
    prefix: String,
    value: String,
    capacity: usize,
    chunks: Vec<Chunk>,
}

impl Chunks {
    pub(super) fn entries(&self) -> impl Iterator<Item = &String> {
        self.chunks.iter().flat_map(|c| c.entries.iter())
    }

    pub(super) fn entity(&self, number: usize, entries: &[String]) -> DynamicEntity {
        DynamicEntity::new(
            self.partition_key.as_str(),
            chunk_row_key(&self.prefix, &self.value, number),
        )
        .with(ENTITY_IDS, entries.join("\n"))
    }

    /// Where `entry` goes: the first index entity with room for it, else a
    /// new one under the lowest free number.
    pub(super) fn place(&self, entry: &str) -> Result<Place> {
        let len = utf16_len(entry);
        if len > self.capacity {
            return Err(refused(
                "index_entity",
                format!(
                    "an index entry of {len} UTF-16 code units does not fit an index entity of {}",
                    self.capacity
                ),
            ));
        }
        if let Some(c) = self
            .chunks
            .iter()
            .find(|c| fits(self.capacity, &c.entries, entry))
        {
            return Ok(Place {
                number: c.number,
                stored: true,
            });
        }
        let free = (0..MAX_CHUNKS)
            .find(|n| self.chunks.iter().all(|c| c.number != *n))
            .ok_or_else(|| {
                refused(
                    "index_entity",
                    format!(
                        "the index of {:?} is full: {MAX_CHUNKS} index entities",
                        self.value
                    ),
                )
            })?;
        Ok(Place {
            number: free,
            stored: false,
        })
    }

    /// The number of the first index entity listing `entry`, if any.
    pub(super) fn listing(&self, entry: &str) -> Option<usize> {
        self.chunks
            .iter()
            .find(|c| c.entries.iter().any(|e| e == entry))
            .map(|c| c.number)
    }

    /// The write that adds `entry`: to the first index entity with room for
    /// it, else into a new one under the lowest free number.
    pub(super) fn add(&self, entry: &str) -> Result<ChunkWrite> {
        let place = self.place(entry)?;
        match self.chunks.iter().find(|c| c.number == place.number) {
            Some(c) if place.stored => {
                let mut entries = c.entries.clone();
                entries.push(entry.to_owned());
                let etag = self.etag_of(c)?;
                Ok(ChunkWrite::Update(self.entity(c.number, &entries), etag))
            }
            _ => Ok(ChunkWrite::Insert(
                self.entity(place.number, std::slice::from_ref(&entry.to_owned())),
            )),
        }
    }

    /// The write that removes one occurrence of `entry` (from the first index
    /// entity listing it), deleting that index entity if it was its last
    /// entry; `None` if no index entity lists it.
    pub(super) fn remove(&self, entry: &str) -> Result<Option<ChunkWrite>> {
        let found = self.chunks.iter().find_map(|c| {
            let at = c.entries.iter().position(|e| e == entry)?;
            let mut entries = c.entries.clone();
            entries.remove(at);
            Some((c, entries))
        });
        found
            .map(|(c, entries)| self.rewrite(c, entries))
            .transpose()
    }

    /// The write that keeps, in the first index entity where anything goes,
    /// only the entries in `live` not listed before it; `None` if nothing goes.
    pub(super) fn prune(&self, live: &HashSet<String>) -> Result<Option<ChunkWrite>> {
        let mut seen = HashSet::new();
        let found = self.chunks.iter().find_map(|c| {
            let kept: Vec<String> = c
                .entries
                .iter()
                .filter(|e| live.contains(*e) && seen.insert(e.as_str()))
                .cloned()
                .collect();
            (kept.len() != c.entries.len()).then_some((c, kept))
        });
        found.map(|(c, kept)| self.rewrite(c, kept)).transpose()
    }

    /// The write that leaves `c` holding `entries`: deleting it if none.
    fn rewrite(&self, c: &Chunk, entries: Vec<String>) -> Result<ChunkWrite> {
        let etag = self.etag_of(c)?;
        Ok(if entries.is_empty() {
            ChunkWrite::Delete(
                EntityKey::new(
                    self.partition_key.as_str(),
                    chunk_row_key(&self.prefix, &self.value, c.number),
                ),
                etag,
            )
        } else {
            ChunkWrite::Update(self.entity(c.number, &entries), etag)
        })
    }

    /// The ETag `c` was read with, which every change of it is made under.
    /// An answer without one (a server or proxy that dropped it) cannot be
    /// written back safely: a decode error naming the index entity.
    fn etag_of(&self, c: &Chunk) -> Result<ETag> {
        c.etag.clone().ok_or_else(|| {
            Error::from(DecodeError::new(format!(
                "index entity ({}, {}) was read without its ETag (odata.etag), which a write \
                 to it needs: the server or a proxy dropped it",
                self.partition_key,
                chunk_row_key(&self.prefix, &self.value, c.number)
            )))
        })
    }
}

/// Where the index entities live and how they are read: shared by both options.
#[derive(Clone)]
pub(super) struct Store {
    pub(super) raw: TableClient<DynamicEntity>,
    pub(super) prefix: String,
    pub(super) capacity: usize,
}

impl Store {
    pub(super) fn check_value(&self, partition_key: &str, value: &str) -> Result<()> {
        if value.contains(['\n', '\t']) {
            return Err(refused(
                "index_entity",
                "an indexed value holds no control characters",
            ));
        }
        EntityKey::new(partition_key, chunk_row_key(&self.prefix, value, 0))
            .validate()
            .map_err(Error::from)
    }

    /// Every index entity of `value`: one range query.
    pub(super) async fn read(&self, partition_key: &str, value: &str) -> Result<Chunks> {
        self.check_value(partition_key, value)?;
        let base = chunks_prefix(&self.prefix, value);
        let rows = self
            .raw
            .query()
            .filter_by(KeyRange::inclusive("000", "999").filter(partition_key, &base))
            .fetch_all()
            .await?;
        Ok(self.chunks(partition_key, value, rows))
    }

    /// The index entities of `value` among `rows` (rows of partition
    /// `partition_key` whose RowKeys start with `{prefix}{value}_`; others
    /// are skipped), as [`read`](Self::read) returns them.
    pub(super) fn chunks(
        &self,
        partition_key: &str,
        value: &str,
        rows: impl IntoIterator<Item = DynamicEntity>,
    ) -> Chunks {
        let base = chunks_prefix(&self.prefix, value);
        let mut chunks = Vec::new();
        for row in rows {
            // A longer value that starts with `{value}_` may fall in the range.
            let Some(number) = row
                .row_key
                .strip_prefix(&base)
                .filter(|n| n.len() == 3 && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            chunks.push(Chunk {
                number,
                entries: entries_of(&row),
                etag: row.etag,
            });
        }
        chunks.sort_by_key(|c| c.number);
        Chunks {
            partition_key: partition_key.to_owned(),
            prefix: self.prefix.clone(),
            value: value.to_owned(),
            capacity: self.capacity,
            chunks,
        }
    }
}

pub(super) fn check_capacity(units: usize) -> Result<usize> {
    if units == 0 || units > MAX_CHUNK_UNITS {
        return Err(refused(
            "index_entity",
            format!("an index entity holds 1 to {MAX_CHUNK_UNITS} UTF-16 code units, not {units}"),
        ));
    }
    Ok(units)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(capacity: usize, stored: &[(usize, &[&str])]) -> Chunks {
        Chunks {
            partition_key: "Sales".into(),
            prefix: "lastname_".into(),
            value: "Jones".into(),
            capacity,
            chunks: stored
                .iter()
                .map(|(n, e)| Chunk {
                    number: *n,
                    entries: e.iter().map(|s| s.to_string()).collect(),
                    etag: Some(ETag::new(format!("W/\"{n}\""))),
                })
                .collect(),
        }
    }

    fn row_key(w: &ChunkWrite) -> &str {
        match w {
            ChunkWrite::Insert(e) | ChunkWrite::Update(e, _) => &e.row_key,
            ChunkWrite::Delete(k, _) => &k.row_key,
        }
    }

    #[test]
    fn an_entry_goes_to_the_first_index_entity_with_room() {
        // "a\nb" is 3 units; "a\nb\nc" is 5.
        let c = chunks(5, &[(0, &["a", "b"]), (1, &["x"])]);
        let w = c.add("c").unwrap();
        assert!(matches!(&w, ChunkWrite::Update(e, _)
            if e.row_key == "lastname_Jones_000"
            && e.get(ENTITY_IDS) == Some(&EdmValue::from("a\nb\nc"))));
        // "a\nb\ncd" would be 6: on to chunk 1 ("x\ncd" is 4).
        assert_eq!(row_key(&c.add("cd").unwrap()), "lastname_Jones_001");
        // Nothing fits: the lowest free number.
        assert!(
            matches!(c.add("wxyz").unwrap(), ChunkWrite::Insert(e) if e.row_key == "lastname_Jones_002")
        );
        let holes = chunks(3, &[(1, &["abc"])]);
        assert_eq!(row_key(&holes.add("d").unwrap()), "lastname_Jones_000");
        assert!(c.add("toolong").unwrap_err().is_invalid_input());
    }

    #[test]
    fn an_entry_is_placed_where_add_puts_it_and_found_where_listed() {
        let c = chunks(5, &[(0, &["a", "b"]), (2, &["x"])]);
        let at = |number, stored| Place { number, stored };
        assert_eq!(c.place("c").unwrap(), at(0, true));
        assert_eq!(c.place("cd").unwrap(), at(2, true));
        // Nothing has room: the lowest free number, not stored.
        assert_eq!(c.place("wxyz").unwrap(), at(1, false));
        assert!(c.place("toolong").unwrap_err().is_invalid_input());
        assert_eq!(c.listing("x"), Some(2));
        assert_eq!(c.listing("zz"), None);
        assert!(fits(5, &["a".into(), "b".into()], "c"));
        assert!(!fits(5, &["a".into(), "b".into()], "cd"));
        assert!(fits(2, &[], "😀"));
        let row = c.entity(0, &["a".into(), "b".into()]);
        assert_eq!(entries_of(&row), ["a", "b"]);
        assert!(entries_of(&DynamicEntity::new("Sales", "lastname_Jones_000")).is_empty());
    }

    #[test]
    fn removing_the_last_entry_deletes_its_index_entity() {
        let c = chunks(10, &[(0, &["a", "b"]), (1, &["x"])]);
        assert!(
            matches!(c.remove("x").unwrap().unwrap(), ChunkWrite::Delete(k, _) if k.row_key == "lastname_Jones_001")
        );
        assert!(
            matches!(c.remove("a").unwrap().unwrap(), ChunkWrite::Update(e, _)
            if e.get(ENTITY_IDS) == Some(&EdmValue::from("b")))
        );
        assert!(c.remove("zz").unwrap().is_none());
    }

    #[test]
    fn a_repeated_entry_is_removed_once_and_pruned_to_one() {
        let c = chunks(20, &[(0, &["a", "b"]), (1, &["a", "x"])]);
        assert!(
            matches!(c.remove("a").unwrap().unwrap(), ChunkWrite::Update(e, _)
            if e.row_key == "lastname_Jones_000"
            && e.get(ENTITY_IDS) == Some(&EdmValue::from("b")))
        );
        let live: HashSet<String> = ["a".to_owned(), "b".to_owned()].into();
        // Chunk 0 keeps all; chunk 1 loses the repeat of "a" and the dead "x".
        assert!(
            matches!(c.prune(&live).unwrap().unwrap(), ChunkWrite::Delete(k, _) if k.row_key == "lastname_Jones_001")
        );
        let c = chunks(20, &[(0, &["a", "a", "b"])]);
        assert!(
            matches!(c.prune(&live).unwrap().unwrap(), ChunkWrite::Update(e, _)
            if e.get(ENTITY_IDS) == Some(&EdmValue::from("a\nb")))
        );
        assert!(chunks(20, &[(0, &["a", "b"])])
            .prune(&live)
            .unwrap()
            .is_none());
    }

    #[test]
    fn an_index_entity_read_without_its_etag_is_an_error_to_write() {
        let mut c = chunks(20, &[(0, &["a", "b"]), (1, &["x"])]);
        c.chunks[0].etag = None;
        let no_etag = |r: Result<Option<ChunkWrite>>| {
            let err = r.unwrap_err();
            assert!(
                matches!(err.kind(), tablekit::error::ErrorKind::Decode(_)),
                "{err:?}"
            );
            let text = err.to_string();
            assert!(
                text.contains("without its ETag") && text.contains("lastname_Jones_000"),
                "{text}"
            );
        };
        no_etag(c.add("c").map(Some)); // an update of chunk 0
        no_etag(c.remove("a")); // an update of chunk 0
                                // Chunk 0 deleted: neither of its entries is live.
        no_etag(c.prune(&HashSet::from(["x".to_owned()])));
        // What needs no ETag still works: an entry nobody lists, a new chunk,
        // and chunk 1, which has its ETag.
        assert!(c.remove("zz").unwrap().is_none());
        assert!(matches!(
            c.add(&"s".repeat(19)).unwrap(),
            ChunkWrite::Insert(_)
        ));
        assert!(matches!(
            c.remove("x").unwrap(),
            Some(ChunkWrite::Delete(..))
        ));
    }

    #[test]
    fn capacity_counts_utf16_code_units() {
        // "é" is one unit, "😀" two.
        let c = chunks(4, &[(0, &["é"])]);
        assert_eq!(row_key(&c.add("😀").unwrap()), "lastname_Jones_000"); // "é\n😀": 4
        let c = chunks(4, &[(0, &["éé"])]);
        assert_eq!(row_key(&c.add("😀").unwrap()), "lastname_Jones_001");
        assert!(check_capacity(MAX_CHUNK_UNITS + 1).is_err());
        assert!(check_capacity(0).is_err());
    }
}
