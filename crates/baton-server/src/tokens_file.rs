//! Editing the tokens file (`baton tokens new --file`, `ls`, `revoke`), so that nobody writes
//! its JSON by hand.
//!
//! Every change is written whole to a new file beside it, mode 0600 from its creation, synced,
//! then renamed over the old one: a server reloading it on SIGHUP, or a reader at any moment,
//! sees the old file or the new one, never half of one, and the hashes are never readable by
//! others even for an instant. What is read is checked as the server checks it
//! ([`Tokens::parse`]), so an edit never starts from, or leaves, a file the server would refuse.
//! Two edits at the same instant may lose one of them (the last rename wins): tokens are made
//! by one person at a time.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::tokens::{Entry, File, Tokens};

/// A tokens file read for editing.
#[derive(Debug)]
pub struct TokensFile {
    path: PathBuf,
    entries: Vec<Entry>,
}

/// Why an edit could not be made.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// There is no token of that name.
    #[error("{path} has no token named {name:?}{known}")]
    Unknown {
        /// The file.
        path: String,
        /// The name asked for.
        name: String,
        /// The names it has, as a clause ("; it has: a, b" or "; it has none").
        known: String,
    },
    /// A token of that name is there already.
    #[error(
        "{path} already has a token named {name:?}; choose another name, or `baton tokens \
         revoke {name} --file {path}` first"
    )]
    Duplicate {
        /// The file.
        path: String,
        /// The name.
        name: String,
    },
    /// The file could not be read, parsed or written.
    #[error("{0}")]
    Io(String),
}

impl TokensFile {
    /// Reads `path`; a file that does not exist yet is an empty one (the first `tokens new`
    /// creates it).
    pub fn open(path: &Path) -> Result<TokensFile, EditError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(TokensFile {
                    path: path.to_owned(),
                    entries: Vec::new(),
                })
            }
            Err(error) => {
                return Err(EditError::Io(format!(
                    "cannot read the tokens file {}: {error}",
                    path.display()
                )))
            }
        };
        Tokens::parse(&text)
            .map_err(|e| EditError::Io(format!("the tokens file {}: {e}", path.display())))?;
        let file: File = serde_json::from_str(&text)
            .map_err(|e| EditError::Io(format!("the tokens file {}: {e}", path.display())))?;
        Ok(TokensFile {
            path: path.to_owned(),
            entries: file.tokens,
        })
    }

    /// Its entries, in the file's order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Adds `entry`, refusing a name that is there already.
    pub fn add(&mut self, entry: Entry) -> Result<(), EditError> {
        if self.entries.iter().any(|e| e.name == entry.name) {
            return Err(EditError::Duplicate {
                path: self.path.display().to_string(),
                name: entry.name,
            });
        }
        self.entries.push(entry);
        Ok(())
    }

    /// Removes the token named `name`.
    pub fn revoke(&mut self, name: &str) -> Result<Entry, EditError> {
        match self.entries.iter().position(|e| e.name == name) {
            Some(index) => Ok(self.entries.remove(index)),
            None => Err(EditError::Unknown {
                path: self.path.display().to_string(),
                name: name.to_owned(),
                known: self.names_clause(),
            }),
        }
    }

    fn names_clause(&self) -> String {
        if self.entries.is_empty() {
            return "; it has none".to_owned();
        }
        let names: Vec<&str> = self.entries.iter().map(|e| e.name.as_str()).collect();
        format!("; it has: {}", names.join(", "))
    }

    /// Writes the file: a new file beside it (mode 0600), synced, renamed over it.
    pub fn save(&self) -> Result<(), EditError> {
        let io = |what: &str, error: std::io::Error| {
            EditError::Io(format!(
                "cannot {what} the tokens file {}: {error}",
                self.path.display()
            ))
        };
        let mut text = serde_json::to_string_pretty(&serde_json::json!({ "tokens": self.entries }))
            .map_err(|e| EditError::Io(format!("cannot encode the tokens file: {e}")))?;
        text.push('\n');
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => PathBuf::from("."),
        };
        let file_name = self
            .path
            .file_name()
            .ok_or_else(|| EditError::Io(format!("{} is not a file", self.path.display())))?;
        let temp = dir.join(format!(
            ".{}.{}.tmp",
            file_name.to_string_lossy(),
            std::process::id()
        ));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .and_then(|mut file| {
                file.write_all(text.as_bytes())?;
                file.sync_all()
            });
        if let Err(error) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(io("write", error));
        }
        if let Err(error) = std::fs::rename(&temp, &self.path) {
            let _ = std::fs::remove_file(&temp);
            return Err(io("replace", error));
        }
        // The rename itself lasts once the directory is synced.
        if let Ok(dir) = std::fs::File::open(&dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::tokens::{entry_for, new_token, Grant};
    use std::os::unix::fs::PermissionsExt;

    fn entry(name: &str) -> Entry {
        entry_for(name, &new_token(), &[Grant::parse("lock:deploy/").unwrap()])
    }

    #[test]
    fn edits_keep_the_other_entries_and_the_file_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let mut file = TokensFile::open(&path).unwrap();
        assert!(file.entries().is_empty(), "a missing file is an empty one");
        file.add(entry("ci")).unwrap();
        file.add(entry("ops")).unwrap();
        file.save().unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut file = TokensFile::open(&path).unwrap();
        assert!(matches!(
            file.add(entry("ci")),
            Err(EditError::Duplicate { .. })
        ));
        file.revoke("ci").unwrap();
        let unknown = file.revoke("nobody").unwrap_err().to_string();
        assert!(
            unknown.ends_with("has no token named \"nobody\"; it has: ops"),
            "{unknown}"
        );
        file.save().unwrap();
        let names: Vec<String> = TokensFile::open(&path)
            .unwrap()
            .entries()
            .iter()
            .map(|e| e.name.clone())
            .collect();
        assert_eq!(names, ["ops"]);
        assert_eq!(Tokens::read(&path).unwrap().len(), 1, "the server reads it");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn a_file_the_server_would_refuse_is_not_edited() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        std::fs::write(&path, "{\"tokens\": [").unwrap();
        let error = TokensFile::open(&path).unwrap_err().to_string();
        assert!(error.contains("it must be JSON"), "{error}");
    }
}
