//! How a store's failures must be classified: whether trying again may help, and a message that
//! says what happened.

use crate::url::OpenMode;
use crate::StoreError;

/// How a store must classify a failure: whether trying again may help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classified {
    /// It may heal by itself (a closed port, a server restarting): [`StoreError::heals`].
    Heals,
    /// Someone must fix something first (a file that is not a database, refused
    /// credentials): retrying would only delay the message.
    Permanent,
    /// No store is there ([`StoreError::Missing`]), opened with [`OpenMode::Existing`].
    Missing,
}

/// Opens `url` in `mode` through the table of stores, as the CLI does, and checks that it fails
/// classified as `expected`, with a message that contains `mentions`; returns the error. A store
/// whose open sends nothing (etcd without credentials, S3, DynamoDB) fails at its first read,
/// which this makes.
///
/// Every store's conformance file calls this with the failures it can bring about for real (a
/// closed port, a wrong password, a file that is not a database, a missing table), so that the
/// classification that decides what `--store-retry` waits for is tested where it is made.
pub async fn failure_classified(
    url: &str,
    mode: OpenMode,
    expected: Classified,
    mentions: &str,
) -> StoreError {
    let error = match crate::url::open_in(url, mode).await {
        Err(error) => error,
        Ok(store) => match store.load("conformance/classified").await {
            Err(error) => error,
            Ok(found) => panic!("{url}: expected a failure ({expected:?}), read {found:?}"),
        },
    };
    error_classified(&error, expected, mentions, &format!("{url} ({mode:?})"));
    error
}

/// Checks that `error` (from a store opened some other way: an endpoint from the environment,
/// a server stopped midway) is classified as `expected`, with a message that contains
/// `mentions`; `what` names the case in the panic.
pub fn error_classified(error: &StoreError, expected: Classified, mentions: &str, what: &str) {
    let classified = match error {
        StoreError::Missing { .. } => Classified::Missing,
        error if error.heals() => Classified::Heals,
        _ => Classified::Permanent,
    };
    assert_eq!(classified, expected, "{what}: {error:?}");
    let message = error.to_string();
    assert!(
        message.contains(mentions),
        "{what}: the message should mention `{mentions}`: {message}"
    );
}

/// A port on loopback that nothing listens on (bound, then closed), for [`Classified::Heals`].
pub fn closed_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap_or_else(|error| panic!("cannot bind a port on loopback: {error}"));
    socket
        .local_addr()
        .unwrap_or_else(|error| panic!("no local address: {error}"))
        .port()
}
