//! Watches the rules directory and says when something in it may have
//! changed. It only signals: reading, compiling and swapping belong to the
//! reload loop.
//!
//! The directory is watched, not its files: the kubelet updates a ConfigMap
//! volume by renaming a new `..data` symlink over the old one, which a watch
//! on a file path never sees. The parent directory is watched as well, so a
//! rules directory that is replaced whole (removed and created again) is
//! found and watched again.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode};
use notify_debouncer_mini::{Config, DebounceEventResult, new_debouncer_opt};

/// The watcher could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {path}")]
pub struct WatchError {
    /// The directory.
    pub path: PathBuf,
    /// The cause.
    #[source]
    pub source: notify::Error,
}

/// A running watcher; dropping it stops watching.
pub struct WatchHandle {
    _thread: std::thread::JoinHandle<()>,
}

/// The platform watcher, passing on only events that can change what a
/// reload reads.
///
/// inotify also reports a file or directory being opened and closed
/// unwritten (`IN_OPEN`, `IN_CLOSE_NOWRITE`), and the debouncer reports those
/// like any change. A reload opens the rules directory and its files, so each
/// reload caused the next one, one per debounce period, for as long as the
/// server ran.
struct ChangesOnly(notify::RecommendedWatcher);

/// False for accesses that leave the files as they were.
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

impl notify::Watcher for ChangesOnly {
    fn new<F: notify::EventHandler>(
        mut handler: F,
        config: notify::Config,
    ) -> notify::Result<Self> {
        notify::RecommendedWatcher::new(
            move |event: notify::Result<notify::Event>| {
                if event.as_ref().is_ok_and(|event| !is_change(&event.kind)) {
                    return;
                }
                handler.handle_event(event);
            },
            config,
        )
        .map(ChangesOnly)
    }

    fn watch(&mut self, path: &Path, recursive_mode: RecursiveMode) -> notify::Result<()> {
        self.0.watch(path, recursive_mode)
    }

    fn unwatch(&mut self, path: &Path) -> notify::Result<()> {
        self.0.unwatch(path)
    }

    fn configure(&mut self, option: notify::Config) -> notify::Result<bool> {
        self.0.configure(option)
    }

    fn kind() -> notify::WatcherKind {
        <notify::RecommendedWatcher as notify::Watcher>::kind()
    }
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(path).ok().map(|_| (0, 0))
    }
}

/// Starts watching `dir`; `on_change` runs on the watcher's thread after each
/// burst of events, `debounce` after the last one.
pub fn spawn(
    dir: PathBuf,
    debounce: Duration,
    on_change: impl Fn() + Send + 'static,
) -> Result<WatchHandle, WatchError> {
    // Events name absolute paths; compare against the absolute directory.
    let dir = std::fs::canonicalize(&dir)
        .or_else(|_| std::path::absolute(&dir))
        .unwrap_or(dir);
    let (tx, rx) = mpsc::channel::<DebounceEventResult>();
    let mut debouncer =
        new_debouncer_opt::<_, ChangesOnly>(Config::default().with_timeout(debounce), tx).map_err(
            |source| WatchError {
                path: dir.clone(),
                source,
            },
        )?;
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf);
    let parent_watched = match &parent {
        Some(parent) => match debouncer
            .watcher()
            .watch(parent, RecursiveMode::NonRecursive)
        {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, path = %parent.display(), "Cannot watch the parent of the rules directory; replacing the whole directory will need SIGHUP");
                false
            }
        },
        None => false,
    };
    if let Err(source) = debouncer.watcher().watch(&dir, RecursiveMode::NonRecursive) {
        // A directory that does not exist yet is found through its parent
        // once it is created; without the parent there is nothing to watch.
        if !parent_watched {
            return Err(WatchError {
                path: dir.clone(),
                source,
            });
        }
        tracing::warn!(error = %source, path = %dir.display(), "Cannot watch the rules directory yet; watching for it to appear");
    }
    let thread = std::thread::Builder::new()
        .name("kadmit-watch".to_owned())
        .spawn(move || {
            let mut watched = identity(&dir);
            for batch in rx {
                match batch {
                    Ok(events) => {
                        let relevant = events.iter().any(|event| {
                            event.path.starts_with(&dir) || event.path == dir
                        });
                        if !relevant {
                            continue;
                        }
                        // A directory replaced whole must be watched again.
                        // Its inode number alone does not tell: `rm -rf`
                        // then `mkdir` often gets the same number back, while
                        // the watch went with the old directory. So an event
                        // about the directory itself (from the parent's
                        // watch, or its own removal) re-watches it as well.
                        let now = identity(&dir);
                        let itself = events.iter().any(|event| event.path == dir);
                        if now != watched || itself {
                            let _ = debouncer.watcher().unwatch(&dir);
                            if now.is_some()
                                && let Err(error) =
                                    debouncer.watcher().watch(&dir, RecursiveMode::NonRecursive)
                            {
                                tracing::warn!(%error, path = %dir.display(), "Cannot watch the replaced rules directory");
                            }
                            watched = now;
                        }
                        on_change();
                    }
                    Err(error) => {
                        tracing::warn!(%error, path = %dir.display(), "File watcher error; the periodic re-read still applies changes");
                    }
                }
            }
        })
        .map_err(|source| WatchError {
            path: PathBuf::new(),
            source: notify::Error::io(source),
        })?;
    Ok(WatchHandle { _thread: thread })
}
