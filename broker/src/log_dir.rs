//! The broker's data directory: its id, and whether the logs in it are intact after a restart.
//!
//! The coordinator must not keep a restarted replica in sync (or elect it) if its log may have
//! lost records it acknowledged before the restart. Whether that can have happened is known
//! here, from `broker.meta`, which every broker process rewrites when it starts and once more
//! when it stops cleanly:
//!
//! - the previous process stopped cleanly (every log synced and checkpointed), or
//! - it ran with `--fsync always` (it acknowledged only what was on disk), or
//! - the machine has not restarted since it ran (same Linux boot id): a killed process's
//!   writes stay in the page cache, so everything it wrote, and so everything it acknowledged,
//!   is still there.
//!
//! Then the logs are *intact*. A directory without `broker.meta` (a new, replaced or wiped
//! disk) is not, and gets a new id: the coordinator sees another id than the broker had, and
//! takes the broker's replicas out of every ISR and eligible set (KIP-966's unclean shutdown,
//! KIP-858's directory id).
//!
//! The file also keeps the broker epoch the coordinator assigned the last process (KIP-903):
//! the next process registers naming it, as its predecessor's, which tells the coordinator
//! that it is the broker's next process and not a late message of an older one.
//!
//! And the highest coordinator epoch the broker has seen: markers and answers from a
//! coordinator replica with a lower one (a deposed coordinator) are refused, across restarts.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The file's name in the data directory.
pub const META_FILE: &str = "broker.meta";
const HEADER: &str = "epochfence broker data directory v1";

/// What one broker process found in its data directory.
#[derive(Debug)]
pub struct LogDir {
    /// The directory's id, made with it (never 0).
    pub id: i64,
    /// Whether the logs hold everything the previous process of this broker acknowledged.
    pub intact: bool,
    /// The broker epoch the coordinator assigned the previous process here (-1: none).
    pub previous_broker_epoch: i64,
    path: PathBuf,
    boot_id: Option<String>,
    /// Recorded as `fsync_always`: every log here is synced as far as it was acknowledged.
    fsync_always: std::sync::atomic::AtomicBool,
    /// Whether the previous process left every log here on disk (see [`LogDir::vouched`]).
    vouched: bool,
    /// The broker epoch recorded for this process (-1 until the coordinator assigns one).
    broker_epoch: std::sync::Mutex<i64>,
    /// The highest coordinator epoch seen, recorded (-1: none yet).
    coordinator_epoch: std::sync::Mutex<i32>,
    /// Rewrites of the file, one at a time.
    writes: std::sync::Mutex<()>,
    /// Held (shared) by whoever acts at the recorded coordinator epoch, and (exclusively) while
    /// a higher one is recorded: nothing is appended at an epoch a newer one is replacing.
    epoch_gate: std::sync::RwLock<()>,
}

/// What `broker.meta` records.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    id: i64,
    boot_id: Option<String>,
    fsync_always: bool,
    clean: bool,
    broker_epoch: i64,
    coordinator_epoch: i32,
}

impl Meta {
    fn parse(text: &str) -> Option<Meta> {
        let mut lines = text.lines();
        if lines.next()? != HEADER {
            return None;
        }
        let (mut id, mut boot_id, mut fsync_always, mut clean) = (None, None, None, None);
        let mut broker_epoch = -1;
        let mut coordinator_epoch = -1;
        for line in lines {
            let (key, value) = line.split_once(' ')?;
            match key {
                "log_dir_id" => id = value.parse::<i64>().ok().filter(|v| *v != 0),
                "boot_id" => boot_id = Some((value != "-").then(|| value.to_string())),
                "fsync_always" => fsync_always = value.parse::<bool>().ok(),
                "clean" => clean = value.parse::<bool>().ok(),
                "broker_epoch" => broker_epoch = value.parse::<i64>().ok()?,
                "coordinator_epoch" => coordinator_epoch = value.parse::<i32>().ok()?,
                _ => {}
            }
        }
        Some(Meta {
            id: id?,
            boot_id: boot_id?,
            fsync_always: fsync_always?,
            clean: clean?,
            broker_epoch,
            coordinator_epoch,
        })
    }

    fn render(&self) -> String {
        format!(
            "{HEADER}\nlog_dir_id {}\nboot_id {}\nfsync_always {}\nclean {}\nbroker_epoch {}\ncoordinator_epoch {}\n",
            self.id,
            self.boot_id.as_deref().unwrap_or("-"),
            self.fsync_always,
            self.clean,
            self.broker_epoch,
            self.coordinator_epoch
        )
    }
}

/// This machine's boot id (Linux), which changes at every boot; `None` where there is none.
pub fn current_boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn random_id() -> i64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the operating system's random source works");
    (i64::from_be_bytes(b) & i64::MAX).max(1)
}

impl LogDir {
    /// Read the previous process's record in `data_dir` (which exists), judge whether the logs
    /// are intact, and record this process (`fsync_always`: it acknowledges only what is
    /// synced), durably, before anything is acknowledged.
    pub fn open(data_dir: &Path, fsync_always: bool) -> std::io::Result<LogDir> {
        Self::open_on_boot(data_dir, fsync_always, current_boot_id())
    }

    /// [`LogDir::open`] as if the machine's boot id were `boot_id` (tests).
    pub fn open_on_boot(data_dir: &Path, fsync_always: bool, boot_id: Option<String>) -> std::io::Result<LogDir> {
        let path = data_dir.join(META_FILE);
        let previous = std::fs::read_to_string(&path).ok().and_then(|t| Meta::parse(&t));
        let intact = previous
            .as_ref()
            .is_some_and(|m| m.clean || m.fsync_always || (m.boot_id.is_some() && m.boot_id == boot_id));
        // Whether every log here was on disk when the previous process ended (it synced all it
        // wrote, or stopped cleanly), or there was none.
        let vouched = previous.as_ref().is_none_or(|m| m.clean || m.fsync_always);
        let id = previous.as_ref().map_or_else(random_id, |m| m.id);
        let previous_broker_epoch = previous.as_ref().map_or(-1, |m| m.broker_epoch);
        let dir = LogDir {
            id,
            intact,
            previous_broker_epoch,
            path,
            boot_id,
            // `fsync_always` in the file vouches for every log in the directory: this process
            // writes it only once what the previous one left unsynced is synced too (see
            // [`LogDir::mark_synced`]).
            fsync_always: std::sync::atomic::AtomicBool::new(fsync_always && vouched),
            vouched,
            // Until the coordinator assigns this process one, the previous one's stays recorded:
            // a process that dies before registering leaves its predecessor's for the next.
            broker_epoch: std::sync::Mutex::new(previous_broker_epoch),
            coordinator_epoch: std::sync::Mutex::new(previous.as_ref().map_or(-1, |m| m.coordinator_epoch)),
            writes: std::sync::Mutex::new(()),
            epoch_gate: std::sync::RwLock::new(()),
        };
        dir.write(false)?;
        Ok(dir)
    }

    /// The coordinator assigned this process `broker_epoch`: record it for the next process.
    pub fn record_broker_epoch(&self, broker_epoch: i64) -> std::io::Result<()> {
        *self.broker_epoch.lock().unwrap_or_else(|p| p.into_inner()) = broker_epoch;
        self.write(false)
    }

    /// The highest coordinator epoch recorded here (-1: none).
    pub fn coordinator_epoch(&self) -> i32 {
        *self.coordinator_epoch.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The highest coordinator epoch recorded, and a guard that keeps a higher one from being
    /// recorded until it is dropped (see [`LogDir::record_coordinator_epoch`]): what is done at
    /// the epoch read while it is held is done before any newer coordinator is followed.
    pub fn coordinator_epoch_held(&self) -> (i32, std::sync::RwLockReadGuard<'_, ()>) {
        let held = self.epoch_gate.read().unwrap_or_else(|p| p.into_inner());
        (self.coordinator_epoch(), held)
    }

    /// A coordinator with epoch `epoch` answered: record it (if higher) durably before acting
    /// on the answer, so no restart forgets it. The file is written with it first; only then
    /// does [`LogDir::coordinator_epoch`] return it (a failed write changes nothing).
    pub fn record_coordinator_epoch(&self, epoch: i32) -> std::io::Result<()> {
        let _exclusive = self.epoch_gate.write().unwrap_or_else(|p| p.into_inner());
        let _one = self.writes.lock().unwrap_or_else(|p| p.into_inner());
        if epoch <= self.coordinator_epoch() {
            return Ok(());
        }
        self.write_now(false, epoch)?;
        *self.coordinator_epoch.lock().unwrap_or_else(|p| p.into_inner()) = epoch;
        Ok(())
    }

    /// Whether the previous process left every log in the directory on disk (it ran with
    /// `--fsync always`, or stopped cleanly), or there was no previous process. If not, a process
    /// that acknowledges only what is synced must sync every log before it records itself as
    /// such ([`LogDir::mark_synced`]): until then the next process after a machine restart
    /// cannot trust what the earlier one left in the page cache.
    pub fn vouched(&self) -> bool {
        self.vouched
    }

    /// Every log in the directory is synced now, and this process (under `--fsync always`)
    /// keeps it so: record `fsync_always`.
    pub fn mark_synced(&self) -> std::io::Result<()> {
        self.fsync_always.store(true, std::sync::atomic::Ordering::SeqCst);
        self.write(false)
    }

    /// The process stops cleanly: every log is synced and checkpointed.
    pub fn mark_clean(&self) -> std::io::Result<()> {
        self.write(true)
    }

    fn write(&self, clean: bool) -> std::io::Result<()> {
        let _one = self.writes.lock().unwrap_or_else(|p| p.into_inner());
        self.write_now(clean, self.coordinator_epoch())
    }

    /// Rewrite the file with `coordinator_epoch` (under the write lock).
    fn write_now(&self, clean: bool, coordinator_epoch: i32) -> std::io::Result<()> {
        let broker_epoch = *self.broker_epoch.lock().unwrap_or_else(|p| p.into_inner());
        let meta = Meta {
            id: self.id,
            boot_id: self.boot_id.clone(),
            fsync_always: self.fsync_always.load(std::sync::atomic::Ordering::SeqCst),
            clean,
            broker_epoch,
            coordinator_epoch,
        };
        let tmp = self.path.with_extension("meta.tmp");
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(meta.render().as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boot(b: &str) -> Option<String> {
        Some(b.to_string())
    }

    #[test]
    fn a_new_directory_is_not_intact_and_keeps_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let first = LogDir::open_on_boot(dir.path(), false, boot("a")).unwrap();
        assert!(!first.intact, "nothing was there to be intact");
        let second = LogDir::open_on_boot(dir.path(), false, boot("a")).unwrap();
        assert_eq!(second.id, first.id);
        let wiped = tempfile::tempdir().unwrap();
        assert_ne!(LogDir::open_on_boot(wiped.path(), false, boot("a")).unwrap().id, first.id);
    }

    /// Unsynced writes survive a killed process (the page cache keeps them), not a machine
    /// restart: without fsync or a clean stop, only the same boot is intact.
    #[test]
    fn intact_after_a_sync_a_clean_stop_or_the_same_boot() {
        let dir = tempfile::tempdir().unwrap();
        let open = |fsync, b: &str| LogDir::open_on_boot(dir.path(), fsync, boot(b)).unwrap();
        open(false, "a");
        assert!(open(false, "a").intact, "killed and restarted on the same boot");
        assert!(!open(false, "b").intact, "the machine restarted: unsynced writes may be gone");
        // A process under `--fsync always` after one under `never`: what the earlier one left
        // unsynced is trusted only once this one has synced every log.
        let always = open(true, "b");
        assert!(!always.vouched());
        assert!(!open(false, "c").intact, "killed before it synced the logs it found");
        let always = open(true, "c");
        always.mark_synced().unwrap();
        assert!(open(true, "d").vouched(), "the previous process synced every log");
        assert!(open(false, "e").intact, "the previous process synced every log and what it acknowledged");
        open(false, "c").mark_clean().unwrap();
        assert!(open(false, "d").intact, "stopped cleanly before the machine restarted");
        assert!(!open(false, "e").intact, "this process did not stop cleanly and did not sync");
    }

    #[test]
    fn the_highest_coordinator_epoch_survives_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let first = LogDir::open_on_boot(dir.path(), false, boot("a")).unwrap();
        assert_eq!(first.coordinator_epoch(), -1);
        first.record_coordinator_epoch(4).unwrap();
        first.record_coordinator_epoch(2).unwrap(); // lower: kept at 4
        first.mark_clean().unwrap();
        let second = LogDir::open_on_boot(dir.path(), false, boot("b")).unwrap();
        assert_eq!(second.coordinator_epoch(), 4);
    }

    #[test]
    fn the_assigned_broker_epoch_is_the_next_process_s_predecessor() {
        let dir = tempfile::tempdir().unwrap();
        let first = LogDir::open_on_boot(dir.path(), true, boot("a")).unwrap();
        assert_eq!(first.previous_broker_epoch, -1);
        first.record_broker_epoch(7).unwrap();
        let second = LogDir::open_on_boot(dir.path(), true, boot("a")).unwrap();
        assert_eq!(second.previous_broker_epoch, 7);
        // A process that never registered passes its predecessor's on.
        drop(second);
        assert_eq!(LogDir::open_on_boot(dir.path(), true, boot("a")).unwrap().previous_broker_epoch, 7);
    }

    #[test]
    fn a_damaged_record_counts_as_a_new_directory() {
        let dir = tempfile::tempdir().unwrap();
        let first = LogDir::open_on_boot(dir.path(), true, boot("a")).unwrap();
        std::fs::write(dir.path().join(META_FILE), "garbage").unwrap();
        let after = LogDir::open_on_boot(dir.path(), true, boot("a")).unwrap();
        assert!(!after.intact);
        assert_ne!(after.id, first.id);
    }
}
