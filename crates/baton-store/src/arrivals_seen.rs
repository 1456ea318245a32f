//! The versions of a store that keeps arrivals ([`crate::Capabilities::arrivals`]): the
//! document's own version, and what a reader saw of the key's arrivals, in one opaque
//! [`Version`]. A version without the second part (every version a store handed out before it
//! kept arrivals, a write's, and a wake-up's that carries no arrivals) saw none, so a CAS
//! naming it writes only while the key has none pending; one with it takes the arrivals it saw
//! and leaves those appended since pending, so an append never makes a write that read the key
//! lose. Redis's wake-ups name the arrivals even when there are none (`V.0`, which [`compose`]
//! never makes): the write knew that none was pending after it.

use crate::Version;

/// The version naming the document's `doc_version` and `seen`, the store's count of the
/// arrivals read with it (the number pending, or the newest one's revision): the document's
/// version alone when `seen` is 0.
pub fn compose(doc_version: &str, seen: u64) -> Version {
    if seen == 0 {
        return Version(doc_version.to_owned());
    }
    Version(format!("{doc_version}.{seen}"))
}

/// The document's version and the arrivals seen that `version` names ([`compose`]). A suffix
/// that is no number stays part of the document's version, which then matches none.
pub fn split(version: &Version) -> (&str, u64) {
    match version.0.rsplit_once('.') {
        Some((doc, seen)) => match seen.parse() {
            Ok(seen) => (doc, seen),
            Err(_) => (version.0.as_str(), 0),
        },
        None => (version.0.as_str(), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_names_the_document_and_the_arrivals_seen() {
        assert_eq!(compose("7", 0), Version("7".into()));
        assert_eq!(split(&compose("7", 0)), ("7", 0));
        assert_eq!(
            split(&compose("12-1700000000000123", 3)),
            ("12-1700000000000123", 3)
        );
        assert_eq!(split(&Version("41.x".into())), ("41.x", 0));
        assert_eq!(split(&Version(String::new())), ("", 0));
    }
}
