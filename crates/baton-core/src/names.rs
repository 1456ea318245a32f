//! Where baton keeps documents of its own beside the keys' documents.
//!
//! A shared value (`baton kv`) is a document of its own, written through the same
//! compare-and-swap as a key's, but it must never meet a lock's queue: not share its document,
//! not show in `baton status`, not be read by a worker looking for jobs. Its document's name in
//! the store starts with [`INTERNAL`], a control character, which [`crate::limits::check_key`]
//! refuses in every key: so no key can ever name it, and a listing of keys drops it with
//! [`is_internal`]. Every store keeps such names as it keeps keys (they are UTF-8).

/// The first character of every name baton keeps for itself.
pub const INTERNAL: char = '\u{1}';

/// The namespace of shared values.
const VALUES: &str = "\u{1}kv/";

/// The store's name of the notification settings (every rule, one document).
pub const NOTIFY_SETTINGS: &str = "\u{1}notify";

/// The store's name for the shared value `name`.
pub fn value_key(name: &str) -> String {
    format!("{VALUES}{name}")
}

/// The store's names of the shared values whose names start with `prefix`: a prefix to list.
pub fn value_prefix(prefix: &str) -> String {
    value_key(prefix)
}

/// The shared value's name, when `store_key` is the name of one.
pub fn value_name(store_key: &str) -> Option<&str> {
    store_key.strip_prefix(VALUES)
}

/// Whether `store_key` is one of baton's own documents rather than a key's.
pub fn is_internal(store_key: &str) -> bool {
    store_key.starts_with(INTERNAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_key_is_internal_and_names_its_value() {
        let key = value_key("ci/version");
        assert!(is_internal(&key));
        assert_eq!(value_name(&key), Some("ci/version"));
        assert!(key.starts_with(&value_prefix("ci/")));
        assert!(!is_internal("ci/version"));
        assert_eq!(value_name("ci/version"), None);
    }

    #[test]
    fn no_key_can_name_an_internal_document() {
        assert!(crate::limits::check_key(&value_key("x")).is_err());
    }
}
