//! Wake-ups for the SQLite store's idle workers: inotify on the file's directory.
//!
//! Every commit writes the file's write-ahead log, and the kernel can tell us that. One watcher
//! per store follows the directory (the `-wal` file comes and goes, the directory stays) and
//! bumps a counter at each write to the database or its log; every [`WatchHandle`] of the store
//! follows that counter. Wake-ups are for any key of the file: right for a worker watching a
//! prefix (`watch_prefix`), which reads the due index when something changed. A waiter on one
//! key is woken by its key's writers instead (`doorbell.rs`), and comes here only where no
//! socket could be bound.
//!
//! [`WatchHandle`]: crate::WatchHandle

use std::ffi::OsString;
use std::io;
use std::path::Path;

use inotify::{Inotify, WatchMask};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Wake;

/// A running watcher: its counter, and the task that feeds it (aborted on drop).
pub(super) struct Watcher {
    counter: watch::Sender<Wake>,
    task: JoinHandle<()>,
}

impl Watcher {
    /// Starts watching the directory of `path` for writes to `path` and its `-wal` file.
    /// Needs a tokio runtime with I/O enabled.
    pub(super) fn start(path: &Path) -> io::Result<Watcher> {
        let dir = path
            .parent()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no directory"))?;
        let file_name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
        let mut wal_name = file_name.to_os_string();
        wal_name.push("-wal");
        let names = [file_name.to_os_string(), wal_name];
        let inotify = Inotify::init()?;
        inotify.watches().add(
            dir,
            WatchMask::MODIFY | WatchMask::CREATE | WatchMask::MOVED_TO,
        )?;
        // SAFETY: the Inotify owns its descriptor, keeps it open until dropped and always
        // returns the same one, and the AsyncFd owns the Inotify from here on.
        let fd = unsafe { AsyncFd::register_with_interest(inotify, Interest::READABLE) }
            .map_err(io::Error::from)?;
        let (counter, _) = watch::channel(Wake::read_again());
        let task = tokio::spawn(follow(fd, names, counter.clone()));
        Ok(Watcher { counter, task })
    }

    /// A receiver that changes at every write to the file.
    pub(super) fn subscribe(&self) -> watch::Receiver<Wake> {
        self.counter.subscribe()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn follow(mut fd: AsyncFd<Inotify>, names: [OsString; 2], counter: watch::Sender<Wake>) {
    let mut buffer = [0u8; 4096];
    loop {
        let Ok(mut ready) = fd.readable_mut().await else {
            return;
        };
        match ready.try_io(|inner| {
            inner.get_mut().read_events(&mut buffer).map(|events| {
                events
                    .filter(|e| e.name.is_some_and(|n| names.iter().any(|m| m == n)))
                    .count()
            })
        }) {
            Ok(Ok(0)) => {}
            // inotify says the file changed, not what it holds: waiters read.
            Ok(Ok(_)) => {
                Wake::read_again().send(&counter);
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, "inotify read failed; waiters fall back to polling");
                return;
            }
            // Not readable after all: wait again.
            Err(_would_block) => {}
        }
    }
}
