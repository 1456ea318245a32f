//! Tokens and scopes: who may do what under which key prefix.
//!
//! The tokens file is JSON: `{"tokens": [{"name": "ci", "sha256": "<hex>", "scopes":
//! ["lock:deploy/", "read:"]}]}`. A token is kept only as the SHA-256 of its text: tokens are
//! 256 random bits ([`new_token`]), so a plain hash cannot be reversed or guessed, and the file
//! can be read by people who must not hold the tokens. A scope is `read`, `lock` or `admin`
//! and a key prefix after the colon (empty: every key); each scope includes those before it.
//! A presented token is hashed and compared with every entry in constant time, so the time an
//! answer takes says nothing about how close a guess was.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a token may do, in increasing order: each includes those before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Status, logs, history, values, the dashboard.
    Read,
    /// Acquire, renew and release one's own tickets; submit and claim jobs; set values.
    Lock,
    /// Cancel and force-release anyone's tickets, retry, delete values, notification rules.
    Admin,
}

impl Scope {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Lock => "lock",
            Scope::Admin => "admin",
        }
    }

    fn parse(name: &str) -> Option<Scope> {
        [Scope::Read, Scope::Lock, Scope::Admin]
            .into_iter()
            .find(|scope| scope.as_str() == name)
    }
}

/// One scope over the keys that start with a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// What may be done.
    pub scope: Scope,
    /// To which keys: those that start with it.
    pub prefix: String,
}

impl Grant {
    /// Parses `SCOPE:PREFIX` (the prefix may be empty: every key).
    pub fn parse(text: &str) -> Result<Grant, String> {
        let (scope, prefix) = text.split_once(':').ok_or_else(|| {
            format!("the scope {text:?} must be SCOPE:PREFIX, as lock:deploy/ or read: (every key)")
        })?;
        let scope = Scope::parse(scope).ok_or_else(|| {
            format!("unknown scope {scope:?} in {text:?}; scopes are read, lock and admin")
        })?;
        Ok(Grant {
            scope,
            prefix: prefix.to_owned(),
        })
    }

    /// As written in the tokens file.
    pub fn to_text(&self) -> String {
        format!("{}:{}", self.scope.as_str(), self.prefix)
    }

    fn allows(&self, needed: Scope, key: &str) -> bool {
        self.scope >= needed && key.starts_with(&self.prefix)
    }
}

/// Who a request comes from: the token's name and what it may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The token's name (never the token).
    pub name: String,
    /// Its grants.
    pub grants: Vec<Grant>,
    /// Whether it is a CI identity proven by an ID token ([`crate::oidc`]), whose name goes
    /// into the contexts of the tickets it makes.
    pub from_trust: bool,
}

impl Principal {
    /// Whether it may do `needed` on `key`.
    pub fn may(&self, needed: Scope, key: &str) -> bool {
        self.grants.iter().any(|grant| grant.allows(needed, key))
    }

    /// Whether it may do `needed` on some key (routes about no one key, as listing).
    pub fn may_somewhere(&self, needed: Scope) -> bool {
        self.grants.iter().any(|grant| grant.scope >= needed)
    }

    /// The one a server without a tokens file gives every request: everything.
    pub fn everyone() -> Principal {
        Principal {
            name: "anyone".into(),
            grants: vec![Grant {
                scope: Scope::Admin,
                prefix: String::new(),
            }],
            from_trust: false,
        }
    }
}

/// The tokens file as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct File {
    pub(crate) tokens: Vec<Entry>,
}

/// One token of the file.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Its name, for logs and the dashboard.
    pub name: String,
    /// The SHA-256 of the token, in hex.
    pub sha256: String,
    /// `SCOPE:PREFIX` each.
    pub scopes: Vec<String>,
}

struct Known {
    hash: [u8; 32],
    principal: Principal,
}

/// The tokens a server accepts.
pub struct Tokens {
    known: Vec<Known>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the hashes.
        let names: Vec<&str> = self
            .known
            .iter()
            .map(|k| k.principal.name.as_str())
            .collect();
        f.debug_struct("Tokens").field("names", &names).finish()
    }
}

impl Tokens {
    /// Reads a tokens file.
    pub fn read(path: &Path) -> Result<Tokens, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the tokens file {}: {e}", path.display()))?;
        Tokens::parse(&text).map_err(|e| format!("the tokens file {}: {e}", path.display()))
    }

    /// Parses the text of a tokens file.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let file: File = serde_json::from_str(text).map_err(|e| {
            format!(
                "{e}; it must be JSON: {{\"tokens\": [{{\"name\": …, \"sha256\": …, \"scopes\": \
                 [\"lock:deploy/\"]}}]}} (`baton tokens new NAME --scope SCOPE:PREFIX --file \
                 FILE` writes one)"
            )
        })?;
        let mut known = Vec::new();
        for entry in file.tokens {
            let hash = parse_hash(&entry.sha256)
                .ok_or_else(|| format!("token {:?}: sha256 must be 64 hex digits", entry.name))?;
            if known.iter().any(|k: &Known| k.principal.name == entry.name) {
                return Err(format!("the token name {:?} is there twice", entry.name));
            }
            let grants = entry
                .scopes
                .iter()
                .map(|s| Grant::parse(s))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("token {:?}: {e}", entry.name))?;
            known.push(Known {
                hash,
                principal: Principal {
                    name: entry.name,
                    grants,
                    from_trust: false,
                },
            });
        }
        Ok(Tokens { known })
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// Who holds `token`, if anyone: compared with every entry, each in constant time.
    pub fn identify(&self, token: &str) -> Option<Principal> {
        let presented = hash(token);
        let mut found = None;
        for known in &self.known {
            if bool::from(known.hash.ct_eq(&presented)) && found.is_none() {
                found = Some(known.principal.clone());
            }
        }
        found
    }
}

/// The tokens a running server accepts: read from its file at the start, and read again on
/// SIGHUP ([`crate::reload_tokens_on_sighup`]). A file that fails to read or parse changes
/// nothing: the server goes on with the tokens it had.
#[derive(Debug)]
pub struct LiveTokens {
    path: PathBuf,
    current: RwLock<Arc<Tokens>>,
}

impl LiveTokens {
    /// Reads `path`.
    pub fn read(path: &Path) -> Result<LiveTokens, String> {
        Ok(LiveTokens {
            path: path.to_owned(),
            current: RwLock::new(Arc::new(Tokens::read(path)?)),
        })
    }

    /// The tokens as last read. A request holds its copy for as long as it is judged.
    pub fn current(&self) -> Arc<Tokens> {
        // A poisoned lock still holds a whole `Arc` (it is only ever replaced whole).
        match self.current.read() {
            Ok(tokens) => tokens.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Reads the file again: how many tokens it has now, or why it was not taken (the
    /// tokens as they were stay).
    pub fn reload(&self) -> Result<usize, String> {
        let tokens = Arc::new(Tokens::read(&self.path)?);
        let n = tokens.len();
        match self.current.write() {
            Ok(mut current) => *current = tokens,
            Err(poisoned) => *poisoned.into_inner() = tokens,
        }
        Ok(n)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The SHA-256 of a token.
pub fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The SHA-256 of a token in hex, as the tokens file keeps it.
pub fn hash_hex(token: &str) -> String {
    hex::encode(hash(token))
}

fn parse_hash(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

/// A new token: `bt_` and 256 random bits in hex.
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("bt_{}", hex::encode(bytes))
}

/// The tokens-file entry for `token`.
pub fn entry_for(name: &str, token: &str, grants: &[Grant]) -> Entry {
    Entry {
        name: name.to_owned(),
        sha256: hash_hex(token),
        scopes: grants.iter().map(Grant::to_text).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(entries: &[Entry]) -> String {
        serde_json::json!({ "tokens": entries }).to_string()
    }

    #[test]
    fn a_hash_is_written_in_lower_case_hex_and_read_back() {
        let written = hash_hex("abc");
        assert_eq!(
            written,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(parse_hash(&written), Some(hash("abc")));
        assert_eq!(parse_hash(&written[..62]), None, "too short");
        assert_eq!(parse_hash(&format!("{written}00")), None, "too long");
        assert_eq!(parse_hash(&written.replace('b', "g")), None, "not hex");
        let token = new_token();
        assert!(token.starts_with("bt_") && token.len() == 3 + 64, "{token}");
    }

    #[test]
    fn a_token_is_known_by_its_hash_and_scopes_nest_under_prefixes() {
        let token = new_token();
        assert!(token.starts_with("bt_") && token.len() == 67);
        let grants = vec![
            Grant::parse("lock:deploy/").expect("grant"),
            Grant::parse("read:").expect("grant"),
        ];
        let tokens = Tokens::parse(&file(&[entry_for("ci", &token, &grants)])).expect("parse");
        let ci = tokens.identify(&token).expect("known");
        assert_eq!(ci.name, "ci");
        assert!(ci.may(Scope::Lock, "deploy/prod"));
        assert!(ci.may(Scope::Read, "deploy/prod"), "lock includes read");
        assert!(ci.may(Scope::Read, "build/x"));
        assert!(!ci.may(Scope::Lock, "build/x"));
        assert!(!ci.may(Scope::Admin, "deploy/prod"));
        assert!(tokens.identify("bt_wrong").is_none());
        assert!(tokens.identify("").is_none());
        // The file never holds the token itself.
        assert!(!file(&[entry_for("ci", &token, &grants)]).contains(&token));
    }

    #[test]
    fn a_bad_file_says_what_is_wrong() {
        let bad = [
            ("{", "JSON"),
            (
                r#"{"tokens":[{"name":"a","sha256":"xyz","scopes":[]}]}"#,
                "64 hex",
            ),
            (
                r#"{"tokens":[{"name":"a","sha256":"00000000000000000000000000000000000000000000000000000000000000000","scopes":[]}]}"#,
                "64 hex",
            ),
            (
                &file(&[entry_for("a", "x", &[]), entry_for("a", "y", &[])]),
                "twice",
            ),
            (
                r#"{"tokens":[{"name":"a","sha256":"0000000000000000000000000000000000000000000000000000000000000000","scopes":["write:x"]}]}"#,
                "unknown scope",
            ),
            (
                r#"{"tokens":[{"name":"a","sha256":"0000000000000000000000000000000000000000000000000000000000000000","scopes":["lock"]}]}"#,
                "SCOPE:PREFIX",
            ),
            (r#"{"tokens":[],"extra":1}"#, "unknown field"),
        ];
        for (text, says) in bad {
            let error = Tokens::parse(text).expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
        }
        // Non-ASCII where hex should be: refused, no panic on a char boundary.
        let odd =
            r#"{"tokens":[{"name":"a","sha256":"ééééééééééééééééééééééééééééééééé","scopes":[]}]}"#;
        assert!(Tokens::parse(odd).is_err());
    }
}
