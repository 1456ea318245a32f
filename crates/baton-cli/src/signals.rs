//! SIGINT and SIGTERM, for the commands that wait or watch.

use std::future::Future;

use tokio::signal::unix::{signal, SignalKind};

/// A future that resolves at SIGINT or SIGTERM with the shell's exit code for it (130, 143).
///
/// The handlers are installed when this is called, not when the future is first polled, so a
/// signal sent as soon as baton has printed something is never taken by the default action
/// (which would kill baton before it withdraws its tickets or ends a watch cleanly).
pub fn interruption() -> std::io::Result<impl Future<Output = i32>> {
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => 130,
            _ = term.recv() => 143,
        }
    })
}
