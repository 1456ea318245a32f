//! The marks of recently finished tickets, kept in every write of the document so that a
//! retried operation is recognised: their short stored form and the older one they are read
//! from.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Outcome;

/// A recently finished ticket, remembered so a retried operation is recognised.
///
/// Every write of the document carries its marks, and DynamoDB bills a write by the item's
/// size, so a mark is kept short: it is stored as one string, `CODE:ID:TOKEN[:ATTEMPT]`, where
/// `CODE` is the outcome's letter ([`Outcome::code`], upper case when forced), `TOKEN` the first
/// [`TAG_HEX`] digits of the token hash and `ATTEMPT` a digest of that many digits of the
/// attempt that ended it ([`attempt_tag`]). Forty-eight bits tell a few dozen marks apart: a
/// different token or attempt matches a mark by chance once in 2^48 tries, and the worst it can
/// do is answer a stray release with the ticket's outcome instead of "unknown token". Format 1
/// documents stored marks as objects with the full hash and attempt; they are read and
/// shortened.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "MarkWire")]
pub struct FinishedMark {
    /// The ticket's id.
    pub id: String,
    /// The first [`TAG_HEX`] digits of the ticket's token hash.
    pub token_tag: String,
    /// How it ended.
    pub outcome: Outcome,
    /// Ended by an operator's forced release.
    pub forced: bool,
    /// The [`attempt_tag`] of the attempt that ended it, if an operation did (not expiry): its
    /// retry gets the same answer instead of a refusal.
    pub attempt_tag: Option<String>,
}

/// Hex digits kept of a token hash or an attempt digest in a [`FinishedMark`].
pub const TAG_HEX: usize = 12;

/// The short digest of an attempt id kept in a [`FinishedMark`].
pub fn attempt_tag(attempt: &str) -> String {
    hex::encode(&Sha256::digest(attempt.as_bytes())[..TAG_HEX / 2])
}

impl FinishedMark {
    /// The mark of ticket `id` with token hash `token_hash`, ended with `outcome` by `attempt`
    /// (`None`: by expiry).
    pub fn new(
        id: &str,
        token_hash: &str,
        outcome: Outcome,
        forced: bool,
        attempt: Option<&str>,
    ) -> FinishedMark {
        FinishedMark {
            id: id.to_owned(),
            token_tag: token_hash.get(..TAG_HEX).unwrap_or(token_hash).to_owned(),
            outcome,
            forced,
            attempt_tag: attempt.map(attempt_tag),
        }
    }

    /// Whether the ticket had the token with this (full) hash.
    pub fn has_token_hash(&self, token_hash: &str) -> bool {
        token_hash.get(..TAG_HEX).unwrap_or(token_hash) == self.token_tag
    }

    /// Whether `attempt` ended the ticket.
    pub fn ended_by(&self, attempt: &str) -> bool {
        self.attempt_tag.as_deref() == Some(attempt_tag(attempt).as_str())
    }
}

/// How a mark is stored: the compact string, or the object of format 1.
#[derive(Deserialize)]
#[serde(untagged)]
enum MarkWire {
    Compact(String),
    Object {
        id: String,
        token_hash: String,
        outcome: Outcome,
        #[serde(default)]
        forced: bool,
        #[serde(default)]
        attempt: Option<String>,
    },
}

impl TryFrom<MarkWire> for FinishedMark {
    type Error = String;

    fn try_from(wire: MarkWire) -> Result<FinishedMark, String> {
        match wire {
            MarkWire::Object {
                id,
                token_hash,
                outcome,
                forced,
                attempt,
            } => Ok(FinishedMark::new(
                &id,
                &token_hash,
                outcome,
                forced,
                attempt.as_deref(),
            )),
            MarkWire::Compact(text) => {
                let bad = || format!("`{}` is not a finished-ticket mark", text.escape_debug());
                let mut parts = text.split(':');
                let code = parts.next().ok_or_else(bad)?;
                let mut chars = code.chars();
                let (Some(letter), None) = (chars.next(), chars.next()) else {
                    return Err(bad());
                };
                let outcome = Outcome::from_code(letter.to_ascii_lowercase()).ok_or_else(bad)?;
                let id = parts.next().filter(|id| !id.is_empty()).ok_or_else(bad)?;
                let token_tag = parts.next().ok_or_else(bad)?;
                let attempt_tag = parts.next().map(str::to_owned);
                if parts.next().is_some() {
                    return Err(bad());
                }
                Ok(FinishedMark {
                    id: id.to_owned(),
                    token_tag: token_tag.to_owned(),
                    outcome,
                    forced: letter.is_ascii_uppercase(),
                    attempt_tag,
                })
            }
        }
    }
}

/// The stored string, `CODE:ID:TOKEN[:ATTEMPT]`.
impl std::fmt::Display for FinishedMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let code = self.outcome.code();
        let code = if self.forced {
            code.to_ascii_uppercase()
        } else {
            code
        };
        write!(f, "{code}:{}:{}", self.id, self.token_tag)?;
        match &self.attempt_tag {
            Some(attempt) => write!(f, ":{attempt}"),
            None => Ok(()),
        }
    }
}

/// Written as its stored string straight into the document's bytes: through a `String` (serde's
/// `into`), every mark of every write was cloned and formatted first.
impl Serialize for FinishedMark {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}
