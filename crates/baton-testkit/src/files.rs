//! Files a test needs in a state the test itself can hardly reach.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A file made read-only for whoever runs the test: `chmod a-w` for a user, the immutable
/// attribute (`chattr +i`) for root, whom permissions do not stop; undone on drop, so that the
/// test's directory can be removed.
pub struct ReadOnlyFile(PathBuf);

impl ReadOnlyFile {
    /// Makes `path` read-only (panics, saying why, when it cannot).
    pub fn new(path: &Path) -> ReadOnlyFile {
        use std::os::unix::fs::PermissionsExt;
        if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444)) {
            panic!("cannot chmod {}: {e}", path.display());
        }
        if std::fs::OpenOptions::new().append(true).open(path).is_ok() {
            let made = Command::new("chattr").arg("+i").arg(path).status();
            assert!(
                made.is_ok_and(|status| status.success()),
                "running as root, and `chattr +i {}` failed: cannot make a read-only file",
                path.display()
            );
        }
        ReadOnlyFile(path.to_owned())
    }
}

impl Drop for ReadOnlyFile {
    fn drop(&mut self) {
        let _ = Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .stderr(Stdio::null())
            .status();
    }
}
