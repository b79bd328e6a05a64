//! The kubelet's atomic writer for ConfigMap (and Secret, projected, downward
//! API) volumes, step for step, so the tests change a rules directory exactly
//! the way a cluster does.
//!
//! A volume written this way looks like:
//!
//! ```text
//! rules/..2026_11_21_06_25_01.123456789/10-a.yaml   the real files
//! rules/..data -> ..2026_11_21_06_25_01.123456789   swapped atomically
//! rules/10-a.yaml -> ..data/10-a.yaml               what readers open
//! ```
//!
//! [`AtomicWriter::write`] follows the kubelet's `AtomicWriter.Write`:
//!
//! 1. read where `..data` points now (the old timestamped directory);
//! 2. list the names in it that the new payload no longer has;
//! 3. if every file is unchanged and nothing is to be removed, stop;
//! 4. write the payload into a new `..YYYY_MM_DD_HH_MM_SS.NNNNNNNNN` directory;
//! 5. create the symlink `..data_tmp` → that directory (relative);
//! 6. rename `..data_tmp` over `..data`: the one atomic step;
//! 7. create the user-visible symlinks `name` → `..data/name` that are missing;
//! 8. remove the user-visible symlinks of the names no longer in the payload;
//! 9. remove the old timestamped directory.
//!
//! Between 6 and 8 a removed name is a dangling link and a new name has no
//! link yet: a reader that lists the directory then sees the old set of names
//! through the new `..data`. That is what the kubelet does too.
//!
//! Std only (plus `humantime`, a kadmit dependency), so that
//! `examples/reload_bench.rs` can include this file with `#[path]`.

use std::collections::BTreeSet;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::SystemTime;

/// The link readers go through.
pub const DATA_LINK: &str = "..data";
/// The link made next to it and renamed over it.
pub const DATA_TMP_LINK: &str = "..data_tmp";

/// Writes payloads into one volume directory the way the kubelet does.
#[derive(Debug, Clone)]
pub struct AtomicWriter {
    target: PathBuf,
}

/// A timestamped directory name, `..YYYY_MM_DD_HH_MM_SS.NNNNNNNNN` in UTC.
/// The kubelet's suffix is random (`os.MkdirTemp`); here it is the
/// nanoseconds, made unique within the process by a counter.
fn timestamp_dir_name() -> String {
    static UNIQUE: AtomicU32 = AtomicU32::new(0);
    // "2026-11-21T06:25:01.123456789Z"
    let rfc3339 = humantime::format_rfc3339_nanos(SystemTime::now()).to_string();
    let (seconds, nanos) = rfc3339
        .trim_end_matches('Z')
        .split_once('.')
        .unwrap_or((&rfc3339, "0"));
    let nanos: u32 = nanos.parse().unwrap_or(0);
    let unique = UNIQUE.fetch_add(1, Ordering::Relaxed);
    // Keep nine digits; the counter only breaks ties within one nanosecond.
    let suffix = (u64::from(nanos) + u64::from(unique)) % 1_000_000_000;
    format!("..{}.{suffix:09}", seconds.replace(['-', 'T', ':'], "_"))
}

impl AtomicWriter {
    /// A writer for the volume at `target`, which must exist.
    pub fn new(target: impl Into<PathBuf>) -> io::Result<Self> {
        let target = target.into();
        if !target.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is not a directory", target.display()),
            ));
        }
        Ok(AtomicWriter { target })
    }

    /// The timestamped directory `..data` points to, if any.
    pub fn current_dir_name(&self) -> Option<String> {
        std::fs::read_link(self.target.join(DATA_LINK))
            .ok()
            .map(|link| link.to_string_lossy().into_owned())
    }

    /// Projects `payload` (file name, contents) into the volume atomically.
    /// Returns false when nothing had to change (step 3).
    ///
    /// Names must be plain file names, as ConfigMap keys are, and must not
    /// start with `..`.
    pub fn write(&self, payload: &[(&str, &[u8])]) -> io::Result<bool> {
        for (name, _) in payload {
            if name.is_empty() || name.contains('/') || name.starts_with("..") {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("invalid payload path {name:?}"),
                ));
            }
        }
        let new_names: BTreeSet<&str> = payload.iter().map(|(name, _)| *name).collect();

        // (1) Where `..data` points now.
        let old_dir = self.current_dir_name();

        // (2), (3) What to remove, and whether anything changed.
        let mut to_remove = Vec::new();
        if let Some(old_dir) = &old_dir {
            let old_path = self.target.join(old_dir);
            for entry in std::fs::read_dir(&old_path)? {
                let name = entry?.file_name().to_string_lossy().into_owned();
                if !new_names.contains(name.as_str()) {
                    to_remove.push(name);
                }
            }
            let mut changed = false;
            for (name, contents) in payload {
                match std::fs::read(old_path.join(name)) {
                    Ok(old) if old == *contents => {}
                    Ok(_) => changed = true,
                    Err(error) if error.kind() == io::ErrorKind::NotFound => changed = true,
                    Err(error) => return Err(error),
                }
            }
            if !changed && to_remove.is_empty() {
                return Ok(false);
            }
        }

        // (4) The payload, in a new timestamped directory.
        let new_dir = timestamp_dir_name();
        let new_path = self.target.join(&new_dir);
        std::fs::create_dir(&new_path)?;
        for (name, contents) in payload {
            std::fs::write(new_path.join(name), contents)?;
        }

        // (5) `..data_tmp` -> the new directory, relative.
        let tmp_link = self.target.join(DATA_TMP_LINK);
        if let Err(error) = symlink(&new_dir, &tmp_link) {
            let _ = std::fs::remove_dir_all(&new_path);
            return Err(error);
        }

        // (6) The atomic swap.
        if let Err(error) = std::fs::rename(&tmp_link, self.target.join(DATA_LINK)) {
            let _ = std::fs::remove_file(&tmp_link);
            let _ = std::fs::remove_dir_all(&new_path);
            return Err(error);
        }

        // (7) Missing user-visible links.
        for name in &new_names {
            let visible = self.target.join(name);
            if std::fs::symlink_metadata(&visible).is_err() {
                symlink(Path::new(DATA_LINK).join(name), &visible)?;
            }
        }

        // (8) User-visible links of removed names.
        for name in &to_remove {
            match std::fs::remove_file(self.target.join(name)) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
        }

        // (9) The old data.
        if let Some(old_dir) = old_dir {
            std::fs::remove_dir_all(self.target.join(old_dir))?;
        }
        Ok(true)
    }

    /// [`AtomicWriter::write`] with text contents.
    pub fn write_str(&self, payload: &[(&str, &str)]) -> io::Result<bool> {
        let payload: Vec<(&str, &[u8])> = payload
            .iter()
            .map(|(name, text)| (*name, text.as_bytes()))
            .collect();
        self.write(&payload)
    }
}
