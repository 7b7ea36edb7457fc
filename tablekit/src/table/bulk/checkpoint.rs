//! The bulk writer's checkpoint: a small append-only log in a file.
//!
//! Records, one JSON line each, after a header line:
//!
//! - `{"s":[[position,hash],...]}`: a transaction is about to be sent with
//!   the entities at these input positions (written before the request);
//! - `{"d":[[position,hash],...],"w":[position,"pk","rk"]}`: the outcomes of
//!   these entities are settled; the watermark (every position before it is
//!   settled) and the key of the entity just before it, when it moved.
//!
//! `hash` is a 64-bit FNV-1a hash of the entity's keys, so that a resumed run
//! fed another input than the crashed one is stopped rather than skipping or
//! resolving the wrong entities. A position sent and never settled is in
//! doubt: its transaction may or may not have been applied. The log is
//! rewritten as a snapshot (watermark, settled positions above it, positions
//! in doubt) when it grows past a few MiB, through a temporary file and a
//! rename, so it stays small for any input size.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::entity::EntityKey;
use crate::error::{Error, Result};

const HEADER: &str = "tablekit-bulk-checkpoint 1";
/// The log is rewritten as a snapshot past this many bytes.
const COMPACT_AT: u64 = 4 << 20;

/// Where a bulk write stands, kept in a file so that a run that crashed (or
/// was stopped) can be resumed; see [`BulkWriter::checkpoint`](super::BulkWriter::checkpoint).
///
/// A resumed run must be fed **the same input from [`position`](Self::position)
/// on** (the entities before it are all settled: skip them). Of the entities
/// from there on, those settled by the earlier run are skipped again (each is
/// checked to have the same keys as then: another input stops the run with an
/// error); those whose transaction was in flight when the earlier run stopped
/// are *in doubt* and sent again, and a refusal that their own earlier
/// attempt may have caused (409 on an insert, 412 on a conditional write, 404
/// on a delete) is settled by reading the entity back, as a lost answer is.
/// The outcome of an entity in doubt is thus reported twice (once by each
/// run, if the first run reported it before stopping), but nothing is
/// written twice that an upsert would not have left the same.
///
/// The log is written with plain writes (no `fsync`): it survives the
/// process's crash, not the machine's.
#[derive(Debug)]
pub struct Checkpoint {
    path: PathBuf,
    file: File,
    bytes: u64,
    /// Every position before it is settled.
    position: u64,
    /// The key of the entity at `position - 1`.
    last_key: Option<EntityKey>,
    /// Settled positions at or above `position`, with their key hashes.
    settled: HashMap<u64, u64>,
    /// Positions sent and not settled (in doubt after a load).
    sent: HashMap<u64, u64>,
}

/// What a checkpoint knows of one input position when a run reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Nothing: a new entity.
    New,
    /// Settled by an earlier run: skip it.
    Settled,
    /// Sent by an earlier run, outcome unknown.
    InDoubt,
}

impl Checkpoint {
    /// Opens the checkpoint at `path`, creating an empty one if there is no
    /// file. A damaged last line (the crash came mid-write) is ignored; any
    /// other damage is an error.
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref().to_path_buf();
        let io = |what: &str, e: std::io::Error| {
            Error::config(format!(
                "bulk checkpoint {}: cannot {what}: {e}",
                path.display()
            ))
        };
        let mut cp = Checkpoint {
            file: OpenOptions::new()
                .create(true)
                .append(true)
                .read(true)
                .open(&path)
                .map_err(|e| io("open it", e))?,
            path: path.clone(),
            bytes: 0,
            position: 0,
            last_key: None,
            settled: HashMap::new(),
            sent: HashMap::new(),
        };
        let lines: Vec<String> = BufReader::new(File::open(&path).map_err(|e| io("read it", e))?)
            .lines()
            .collect::<std::io::Result<_>>()
            .map_err(|e| io("read it", e))?;
        if lines.is_empty() {
            cp.append(HEADER).map_err(|e| io("write it", e))?;
            return Ok(cp);
        }
        if lines[0] != HEADER {
            return Err(Error::config(format!(
                "{} is not a tablekit bulk checkpoint",
                path.display()
            )));
        }
        let last = lines.len() - 1;
        for (i, line) in lines.iter().enumerate().skip(1) {
            match serde_json::from_str::<Value>(line) {
                Ok(record) => cp.replay(&record).ok_or_else(|| {
                    Error::config(format!(
                        "bulk checkpoint {}: line {} is not a record",
                        path.display(),
                        i + 1
                    ))
                })?,
                // A torn last line: the process stopped while writing it.
                Err(_) if i == last => {}
                Err(_) => {
                    return Err(Error::config(format!(
                        "bulk checkpoint {}: line {} is damaged",
                        path.display(),
                        i + 1
                    )))
                }
            }
        }
        cp.bytes = cp.file.metadata().map_err(|e| io("read it", e))?.len();
        // Rewritten at once: a torn line must not stay in the middle.
        cp.compact().map_err(|e| io("rewrite it", e))?;
        Ok(cp)
    }

    fn replay(&mut self, record: &Value) -> Option<()> {
        let pairs = |v: &Value| -> Option<Vec<(u64, u64)>> {
            v.as_array()?
                .iter()
                .map(|p| Some((p.get(0)?.as_u64()?, p.get(1)?.as_u64()?)))
                .collect()
        };
        if let Some(s) = record.get("s") {
            for (pos, hash) in pairs(s)? {
                self.sent.insert(pos, hash);
            }
        }
        if let Some(d) = record.get("d") {
            for (pos, hash) in pairs(d)? {
                self.sent.remove(&pos);
                if pos >= self.position {
                    self.settled.insert(pos, hash);
                }
            }
        }
        if let Some(w) = record.get("w") {
            let position = w.get(0)?.as_u64()?;
            let key = match (w.get(1), w.get(2)) {
                (Some(Value::String(pk)), Some(Value::String(rk))) => {
                    Some(EntityKey::new(pk.clone(), rk.clone()))
                }
                _ => None,
            };
            self.advance(position, key);
        }
        Some(())
    }

    fn advance(&mut self, position: u64, key: Option<EntityKey>) {
        if position > self.position {
            self.position = position;
            self.last_key = key;
            self.settled.retain(|p, _| *p >= position);
            self.sent.retain(|p, _| *p >= position);
        }
    }

    /// The input position to resume from: every entity before it is settled.
    /// A new checkpoint says 0.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The keys of the entity at `position() - 1` (the last of the settled
    /// prefix), if any: where a resumed copy of a table sorted by keys can
    /// start its query.
    pub fn last_key(&self) -> Option<&EntityKey> {
        self.last_key.as_ref()
    }

    /// How many entities past [`position`](Self::position) are in doubt (sent
    /// by an earlier run, outcome unknown).
    pub fn in_doubt(&self) -> usize {
        self.sent.len()
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the checkpoint knows of the entity at `position` with keys
    /// hashing to `hash`; an error if an earlier run had another entity there.
    pub(crate) fn seen(&self, position: u64, hash: u64) -> Result<Seen> {
        let (found, seen) = if let Some(h) = self.settled.get(&position) {
            (*h, Seen::Settled)
        } else if let Some(h) = self.sent.get(&position) {
            (*h, Seen::InDoubt)
        } else {
            return Ok(Seen::New);
        };
        if found != hash {
            return Err(Error::config(format!(
                "bulk checkpoint {}: the input at position {position} is another entity than the \
                 one the earlier run had there; a resumed run must be fed the same input",
                self.path.display()
            )));
        }
        Ok(seen)
    }

    /// Records that a transaction holding these positions is about to be sent.
    pub(crate) fn sending(&mut self, entities: &[(u64, u64)]) -> Result<()> {
        for (p, h) in entities {
            self.sent.insert(*p, *h);
        }
        let line = json!({ "s": pairs_json(entities) }).to_string();
        self.write(&line)
    }

    /// Records settled outcomes, and the new watermark if it moved.
    pub(crate) fn settled(
        &mut self,
        entities: &[(u64, u64)],
        watermark: Option<(u64, &EntityKey)>,
    ) -> Result<()> {
        for (p, h) in entities {
            self.sent.remove(p);
            self.settled.insert(*p, *h);
        }
        let mut record = json!({ "d": pairs_json(entities) });
        if let Some((position, key)) = watermark {
            record["w"] = json!([position, key.partition_key, key.row_key]);
            self.advance(position, Some(key.clone()));
        }
        self.write(&record.to_string())
    }

    fn write(&mut self, line: &str) -> Result<()> {
        let path = self.path.clone();
        let io = |e: std::io::Error| {
            Error::config(format!(
                "bulk checkpoint {}: cannot write it: {e}",
                path.display()
            ))
        };
        if self.bytes > COMPACT_AT {
            self.compact().map_err(io)?;
        }
        self.append(line).map_err(io)
    }

    fn append(&mut self, line: &str) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        // One write per record: a crash leaves at most the last line torn.
        self.file.write_all(&bytes)?;
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    /// Rewrites the log as a snapshot of the state.
    fn compact(&mut self) -> std::io::Result<()> {
        let mut text = String::from(HEADER);
        text.push('\n');
        let mut w = json!([self.position]);
        if let Some(k) = &self.last_key {
            w = json!([self.position, k.partition_key, k.row_key]);
        }
        let mut settled: Vec<(u64, u64)> = self.settled.iter().map(|(p, h)| (*p, *h)).collect();
        settled.sort_unstable();
        let mut sent: Vec<(u64, u64)> = self.sent.iter().map(|(p, h)| (*p, *h)).collect();
        sent.sort_unstable();
        text.push_str(&json!({ "w": w }).to_string());
        text.push('\n');
        // Settled before sent: replaying "d" would drop a position "s" adds.
        if !settled.is_empty() {
            text.push_str(&json!({ "d": pairs_json(&settled) }).to_string());
            text.push('\n');
        }
        if !sent.is_empty() {
            text.push_str(&json!({ "s": pairs_json(&sent) }).to_string());
            text.push('\n');
        }
        let tmp = self.path.with_extension("tmp");
        {
            let mut f = File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_data()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        self.bytes = text.len() as u64;
        Ok(())
    }
}

fn pairs_json(entities: &[(u64, u64)]) -> Value {
    Value::Array(entities.iter().map(|(p, h)| json!([p, h])).collect())
}

/// The FNV-1a hash of an entity's keys, as the checkpoint records it.
pub(crate) fn key_hash(key: &EntityKey) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let bytes = key
        .partition_key
        .as_bytes()
        .iter()
        .chain(&[0xff])
        .chain(key.row_key.as_bytes());
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // JSON numbers beyond 2^53 lose precision in some readers: keep 53 bits.
    h & ((1 << 53) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp() -> PathBuf {
        std::env::temp_dir().join(format!(
            "tablekit-bulk-ckpt-{}.log",
            uuid::Uuid::new_v4().simple()
        ))
    }

    #[test]
    fn a_reopened_checkpoint_knows_what_was_settled_and_what_is_in_doubt() {
        let path = temp();
        let k = |i: u64| EntityKey::new("p", format!("{i:03}"));
        let h = |i: u64| key_hash(&k(i));
        {
            let mut cp = Checkpoint::open(&path).unwrap();
            assert_eq!(cp.position(), 0);
            cp.sending(&[(0, h(0)), (1, h(1))]).unwrap();
            cp.sending(&[(3, h(3))]).unwrap();
            cp.settled(&[(0, h(0)), (1, h(1))], Some((2, &k(1))))
                .unwrap();
            cp.sending(&[(4, h(4))]).unwrap();
            cp.settled(&[(4, h(4))], None).unwrap();
        }
        // A torn last line is ignored.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"s\":[[9,")
            .unwrap();
        let cp = Checkpoint::open(&path).unwrap();
        assert_eq!(cp.position(), 2);
        assert_eq!(cp.last_key(), Some(&k(1)));
        assert_eq!(cp.in_doubt(), 1);
        assert_eq!(cp.seen(2, h(2)).unwrap(), Seen::New);
        assert_eq!(cp.seen(3, h(3)).unwrap(), Seen::InDoubt);
        assert_eq!(cp.seen(4, h(4)).unwrap(), Seen::Settled);
        assert_eq!(cp.seen(9, h(9)).unwrap(), Seen::New);
        let other = cp.seen(4, h(5)).unwrap_err().to_string();
        assert!(other.contains("same input"), "{other}");
        drop(cp);
        // The compacted snapshot reads back the same.
        let cp = Checkpoint::open(&path).unwrap();
        assert_eq!(
            (cp.position(), cp.in_doubt()),
            (2, 1),
            "{}",
            std::fs::read_to_string(&path).unwrap()
        );
        assert_eq!(cp.seen(4, h(4)).unwrap(), Seen::Settled);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_file_of_something_else_is_refused() {
        let path = temp();
        std::fs::write(&path, "hello\n").unwrap();
        let err = Checkpoint::open(&path).unwrap_err().to_string();
        assert!(err.contains("not a tablekit bulk checkpoint"), "{err}");
        let _ = std::fs::remove_file(&path);
    }
}
