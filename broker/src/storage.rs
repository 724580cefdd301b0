//! Where partition logs, segment indexes and producer-state snapshots live: a trait, so that the
//! same log code runs on the operating system's files ([`OsStorage`], what the broker uses) and
//! on an in-memory disk that can lose what was never synced ([`MemStorage`], what the simulator
//! and crash tests use).
//!
//! The contract is the part of POSIX the log relies on: appends land at the end; `read_at` is
//! positional; `sync_data` makes every byte written so far durable; `write_file_atomically`
//! leaves either the old file or the whole new one; creating, removing and renaming files and
//! `set_len` are durable once `sync_dir` (or, for `set_len`, a sync of the file) ran. Anything
//! else may be lost in a crash, and [`MemStorage::crash`] loses it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

/// A directory tree of files.
pub trait Storage: Send + Sync + Debug {
    /// Create `dir` and its parents.
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// The paths of the files directly in `dir`.
    fn list(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>>;
    /// Open `path` for appending and positional reads, creating it if `create`.
    fn open(&self, path: &Path, create: bool) -> std::io::Result<Arc<dyn StoredFile>>;
    /// The whole content of a (small) file.
    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>>;
    /// Replace `path` by `bytes`: a synced temporary file renamed over it.
    fn write_file_atomically(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()>;
    /// Remove a file (NotFound if it is not there).
    fn remove(&self, path: &Path) -> std::io::Result<()>;
    /// Make the entries of `dir` (files created, removed, renamed) durable.
    fn sync_dir(&self, dir: &Path);
    /// Remove an empty directory (nothing to do where directories are implicit).
    fn remove_dir(&self, _dir: &Path) -> std::io::Result<()> {
        Ok(())
    }
}

/// One open file.
pub trait StoredFile: Send + Sync + Debug {
    /// Append `pieces`, in order, at the end (one vectored write where the file allows). On
    /// an error part of them may have landed: the caller cuts the file back with
    /// [`StoredFile::set_len`].
    fn append(&self, pieces: &[&[u8]]) -> std::io::Result<()>;
    /// `len` bytes at `pos`.
    fn read_at(&self, pos: u64, len: usize) -> std::io::Result<Bytes>;
    /// Bytes in the file.
    fn len(&self) -> std::io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> std::io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Cut (or extend) the file to `len` bytes.
    fn set_len(&self, len: u64) -> std::io::Result<()>;
    /// Make every byte written so far durable (fdatasync).
    fn sync_data(&self) -> std::io::Result<()>;
    /// Reserve disk blocks for bytes `from..to` ahead of the end without changing the file's
    /// length: a hint, so that later appends skip the file system's block allocation. The
    /// default does nothing.
    fn preallocate(&self, from: u64, to: u64) -> std::io::Result<()> {
        let _ = (from, to);
        Ok(())
    }
}

/// The operating system's file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsStorage;

/// A file of the operating system.
#[derive(Debug)]
pub struct OsFile(File);

impl Storage for OsStorage {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn list(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        std::fs::read_dir(dir)?.map(|e| e.map(|e| e.path())).collect()
    }

    fn open(&self, path: &Path, create: bool) -> std::io::Result<Arc<dyn StoredFile>> {
        let file = OpenOptions::new().read(true).append(true).create(create).open(path)?;
        Ok(Arc::new(OsFile(file)))
    }

    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        File::open(path)?.read_to_end(&mut out)?;
        Ok(out)
    }

    fn write_file_atomically(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let tmp = tmp_path(path);
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    }

    fn remove(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_file(path)
    }

    fn remove_dir(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::remove_dir(dir)
    }

    fn sync_dir(&self, dir: &Path) {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

impl StoredFile for OsFile {
    fn append(&self, pieces: &[&[u8]]) -> std::io::Result<()> {
        let mut slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        let mut bufs = &mut slices[..];
        IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            let n = (&self.0).write_vectored(bufs)?;
            if n == 0 {
                return Err(std::io::Error::new(ErrorKind::WriteZero, "wrote nothing"));
            }
            IoSlice::advance_slices(&mut bufs, n);
        }
        Ok(())
    }

    fn read_at(&self, pos: u64, len: usize) -> std::io::Result<Bytes> {
        // Into uninitialised memory: zeroing what `pread` overwrites costs a pass over every
        // byte replicated (and a page fault per fresh page).
        let mut buf = Vec::with_capacity(len);
        while buf.len() < len {
            let at = pos + buf.len() as u64;
            match rustix::io::pread(&self.0, rustix::buffer::spare_capacity(&mut buf), at) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        ErrorKind::UnexpectedEof,
                        format!("{len} bytes at {pos}: file ends"),
                    ))
                }
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(len);
        Ok(Bytes::from(buf))
    }

    fn len(&self) -> std::io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }

    fn preallocate(&self, from: u64, to: u64) -> std::io::Result<()> {
        // KEEP_SIZE: the length, and so what recovery reads, stays the end of the data.
        rustix::fs::fallocate(&self.0, rustix::fs::FallocateFlags::KEEP_SIZE, from, to.saturating_sub(from))?;
        Ok(())
    }
}

/// `<name>.<ext>.tmp`: the temporary file [`Storage::write_file_atomically`] renames into place
/// (an index and a snapshot of the same offset never share one).
pub fn tmp_path(path: &Path) -> PathBuf {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
    path.with_extension(format!("{ext}.tmp"))
}

/// An in-memory disk for the simulator and crash tests. Each file keeps how much of it is
/// synced; [`MemStorage::crash`] (a power loss) keeps only that, plus whatever prefix of the
/// unsynced rest the caller decides survived (a torn last write). Directory entries (files
/// created, removed, renamed over) are durable once their directory is synced: a crash brings
/// back the entries as of each directory's last sync. `set_len` is durable at once (a
/// simplification: the log syncs the file after every cut).
#[derive(Debug, Default)]
pub struct MemStorage {
    state: Mutex<MemDirs>,
}

#[derive(Debug, Default)]
struct MemDirs {
    /// The entries as the running process sees them.
    files: BTreeMap<PathBuf, Arc<MemFile>>,
    /// The entries a crash comes back to: as of each directory's last sync.
    durable: BTreeMap<PathBuf, Arc<MemFile>>,
}

/// A file of [`MemStorage`].
#[derive(Debug, Default)]
pub struct MemFile {
    inner: Mutex<MemFileInner>,
}

#[derive(Debug, Default)]
struct MemFileInner {
    data: Vec<u8>,
    /// Bytes known durable (a prefix of `data`).
    synced: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn not_found(path: &Path) -> std::io::Error {
    std::io::Error::new(ErrorKind::NotFound, format!("{} does not exist", path.display()))
}

impl MemStorage {
    /// An empty disk.
    pub fn new() -> Self {
        MemStorage::default()
    }

    /// A power loss: every file keeps its synced bytes, plus the first `torn(path, unsynced)`
    /// bytes of its unsynced tail (`torn` returns at most `unsynced`). Open handles keep
    /// pointing at the files (a restarted process opens them again anyway).
    pub fn crash(&self, mut torn: impl FnMut(&Path, usize) -> usize) {
        let mut dirs = lock(&self.state);
        dirs.files = dirs.durable.clone();
        for (path, file) in dirs.files.iter() {
            let mut f = lock(&file.inner);
            let unsynced = f.data.len() - f.synced;
            let keep = f.synced + torn(path, unsynced).min(unsynced);
            f.data.truncate(keep);
            f.synced = keep;
        }
    }

    /// Bytes written to files but not synced, over all files.
    pub fn unsynced_bytes(&self) -> usize {
        lock(&self.state)
            .files
            .values()
            .map(|f| {
                let f = lock(&f.inner);
                f.data.len() - f.synced
            })
            .sum()
    }
}

impl Storage for MemStorage {
    fn create_dir_all(&self, _dir: &Path) -> std::io::Result<()> {
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let dirs = lock(&self.state);
        dirs.files.contains_key(path) || dirs.files.keys().any(|p| p.starts_with(path))
    }

    fn list(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        Ok(lock(&self.state).files.keys().filter(|p| p.parent() == Some(dir)).cloned().collect())
    }

    fn open(&self, path: &Path, create: bool) -> std::io::Result<Arc<dyn StoredFile>> {
        let mut dirs = lock(&self.state);
        match dirs.files.get(path) {
            Some(f) => Ok(f.clone()),
            None if create => {
                let f = Arc::new(MemFile::default());
                dirs.files.insert(path.to_path_buf(), f.clone());
                Ok(f)
            }
            None => Err(not_found(path)),
        }
    }

    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        let f = lock(&self.state).files.get(path).cloned().ok_or_else(|| not_found(path))?;
        let data = lock(&f.inner).data.clone();
        Ok(data)
    }

    fn write_file_atomically(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        // The new content is synced; the rename that puts it in place waits for `sync_dir`.
        let f = MemFile { inner: Mutex::new(MemFileInner { data: bytes.to_vec(), synced: bytes.len() }) };
        lock(&self.state).files.insert(path.to_path_buf(), Arc::new(f));
        Ok(())
    }

    fn remove(&self, path: &Path) -> std::io::Result<()> {
        lock(&self.state).files.remove(path).map(|_| ()).ok_or_else(|| not_found(path))
    }

    fn sync_dir(&self, dir: &Path) {
        let mut dirs = lock(&self.state);
        let MemDirs { files, durable } = &mut *dirs;
        durable.retain(|p, _| p.parent() != Some(dir));
        durable.extend(files.iter().filter(|(p, _)| p.parent() == Some(dir)).map(|(p, f)| (p.clone(), f.clone())));
    }
}

impl StoredFile for MemFile {
    fn append(&self, pieces: &[&[u8]]) -> std::io::Result<()> {
        let mut f = lock(&self.inner);
        for piece in pieces {
            f.data.extend_from_slice(piece);
        }
        Ok(())
    }

    fn read_at(&self, pos: u64, len: usize) -> std::io::Result<Bytes> {
        let f = lock(&self.inner);
        let start = usize::try_from(pos).map_err(|_| ErrorKind::UnexpectedEof)?;
        let end = start.checked_add(len).filter(|e| *e <= f.data.len()).ok_or(ErrorKind::UnexpectedEof)?;
        Ok(Bytes::copy_from_slice(&f.data[start..end]))
    }

    fn len(&self) -> std::io::Result<u64> {
        Ok(lock(&self.inner).data.len() as u64)
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let mut f = lock(&self.inner);
        let len = usize::try_from(len).map_err(|_| ErrorKind::InvalidInput)?;
        f.data.resize(len, 0);
        f.synced = f.synced.min(len);
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        let mut f = lock(&self.inner);
        f.synced = f.data.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_keeps_what_was_synced_and_a_torn_prefix_of_the_rest() {
        let disk = MemStorage::new();
        let a = disk.open(Path::new("/d/a"), true).unwrap();
        disk.sync_dir(Path::new("/d"));
        a.append(&[b"synced", b"-"]).unwrap();
        a.sync_data().unwrap();
        a.append(&[b"lost", b""]).unwrap();
        assert_eq!(disk.unsynced_bytes(), 4);
        disk.crash(|_, unsynced| unsynced / 2);
        assert_eq!(disk.read(Path::new("/d/a")).unwrap(), b"synced-lo");
        disk.write_file_atomically(Path::new("/d/b"), b"whole").unwrap();
        disk.sync_dir(Path::new("/d"));
        disk.crash(|_, _| 0);
        assert_eq!(disk.read(Path::new("/d/b")).unwrap(), b"whole", "written atomically means synced");
        assert_eq!(disk.list(Path::new("/d")).unwrap().len(), 2);
        // Entries changed since the directory's last sync are back as they were.
        disk.remove(Path::new("/d/a")).unwrap();
        disk.open(Path::new("/d/c"), true).unwrap();
        disk.write_file_atomically(Path::new("/d/b"), b"newer").unwrap();
        disk.crash(|_, _| 0);
        assert_eq!(disk.read(Path::new("/d/a")).unwrap(), b"synced-lo", "an unsynced removal is undone");
        assert!(!disk.exists(Path::new("/d/c")), "an unsynced creation is undone");
        assert_eq!(disk.read(Path::new("/d/b")).unwrap(), b"whole", "an unsynced rename is undone");
        assert!(a.read_at(7, 5).is_err(), "reads past the end fail");
    }

    #[test]
    fn os_files_append_both_parts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = OsStorage.open(&path, true).unwrap();
        f.append(&[b"ab", b""]).unwrap();
        f.append(&[b"", b"cd"]).unwrap();
        assert_eq!(f.read_at(1, 3).unwrap(), Bytes::from_static(b"bcd"));
        assert_eq!(f.read_at(4, 0).unwrap(), Bytes::new());
        let past = f.read_at(2, 3).unwrap_err();
        assert_eq!(past.kind(), ErrorKind::UnexpectedEof, "reads past the end fail: {past}");
        OsStorage.write_file_atomically(&dir.path().join("g.snapshot"), b"x").unwrap();
        assert!(!tmp_path(&dir.path().join("g.snapshot")).exists());
        assert_eq!(OsStorage.list(dir.path()).unwrap().len(), 2);
    }
}
