//! The seal of a cleanly closed store file: what lets the next open skip the
//! check of every page.
//!
//! redb trusts a file it closed cleanly, and reading a page damaged since
//! (by another program, a failed copy, a disk) can panic inside it; checking
//! every page's checksum at open reads the whole file (78 ms and the whole
//! file in the page cache at 100,000 entities). So when a store closes
//! cleanly, a small file beside it, `<file>.seal`, records what the file
//! system says of it then: device, inode, length, modification and change
//! times (to the nanosecond), and a hash of its first 64 KiB (redb's header).
//! The next open that finds the seal matching the file opens it as redb
//! does on its own (the header's checks; a crash-left file is recovered and
//! verified by redb), without the whole-file check; any other open (no seal,
//! a seal that does not match, a file system without nanosecond change
//! times, not Unix) checks every page as before. The seal is removed when
//! the file is opened, before anything is written to it.
//!
//! Why this is enough: every write to a file, by any program, through any
//! path (`write`, `truncate`, `mmap`, a copy over it) sets its change time
//! (`ctime`) to the current time, and no program can set it back; a file
//! replaced by another (moved over, restored from a backup) has another
//! inode. What the seal cannot see is damage below the file system (a disk
//! that returns other bytes without an I/O error); `tablekit-cli <file>
//! check` reads every page for that, and a check that passes seals the file.

use super::*;

/// The seal file of the store file at `path`.
fn seal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".seal");
    PathBuf::from(name)
}

/// How much of the file's start is hashed into its seal.
const HEADER_BYTES: u64 = 64 * 1024;

/// The file system's account of the file at `path`, as a seal records it;
/// `None` where it cannot tell every write (not Unix, or change times
/// without nanoseconds).
#[cfg(unix)]
fn fingerprint(path: &Path) -> Option<String> {
    use std::hash::Hasher as _;
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt as _;
    let file = std::fs::File::open(path).ok()?;
    let m = file.metadata().ok()?;
    if m.ctime_nsec() == 0 {
        // Most likely a file system that keeps whole seconds: two writes in
        // one second would look alike.
        return None;
    }
    let mut head = Vec::with_capacity(HEADER_BYTES as usize);
    file.take(HEADER_BYTES).read_to_end(&mut head).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(&head);
    Some(format!(
        "tablekit store seal 1\ndev {} ino {} len {} mtime {}.{:09} ctime {}.{:09} head {:016x}\n",
        m.dev(),
        m.ino(),
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        h.finish()
    ))
}

#[cfg(not(unix))]
fn fingerprint(_path: &Path) -> Option<String> {
    None
}

/// Whether the file at `path` is as it was when it was last sealed; the
/// seal is removed either way (the file is about to be opened and written).
pub(super) fn take(path: &Path) -> bool {
    let seal = seal_path(path);
    let Ok(recorded) = std::fs::read_to_string(&seal) else {
        return false;
    };
    let matches = fingerprint(path).is_some_and(|now| now == recorded);
    // Unremovable (a read-only folder): the file's change time moves on the
    // first write, and the seal no longer matches.
    let _ = std::fs::remove_file(&seal);
    matches
}

/// Seals the file at `path`, just closed cleanly or checked whole. A seal
/// that cannot be written only costs the next open its full check.
pub(super) fn write(path: &Path) {
    if let Some(f) = fingerprint(path) {
        let _ = std::fs::write(seal_path(path), f);
    }
}

/// Removes the seal of the file at `path`, if any.
pub(super) fn remove(path: &Path) {
    let _ = std::fs::remove_file(seal_path(path));
}

#[cfg(test)]
pub(super) fn exists(path: &Path) -> bool {
    seal_path(path).exists()
}
