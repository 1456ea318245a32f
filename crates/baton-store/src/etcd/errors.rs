//! etcd-client's errors, as the store's errors that say what to check: endpoints that cannot
//! be reached (nothing was sent), refused credentials or permissions, a full database, and
//! writes that may have committed without an answer. Credentials, permissions and a full
//! database need someone to act ([`StoreError::Unusable`]); the rest may heal by itself.

use tonic_code::Code;

use super::url::EtcdUrl;
use crate::error::chain_text;
use crate::StoreError;

/// How an error that was never sent starts its reason (and how `request` recognises it).
pub(super) const CANNOT_REACH: &str = "cannot reach etcd at";

/// Whether a failed request may have been applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Effect {
    /// A read: failing changed nothing.
    Read,
    /// A write: an unanswered one may still commit.
    Write,
}

/// Maps a client error to the store's error, saying what to check where there is something to
/// check.
pub(super) fn classify(
    url: &EtcdUrl,
    store: &str,
    error: etcd_client::Error,
    effect: Effect,
) -> StoreError {
    let detail = chain_text(&error);
    let status = match &error {
        etcd_client::Error::GRpcStatus(status) => status,
        // etcd-client makes these only while building its channel (an endpoint, a TLS file),
        // before any request: a request's own failure comes back as a gRPC status.
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => {
            return unreachable(url, store, &detail)
        }
        _ => {
            return StoreError::Backend {
                store: store.to_owned(),
                source: Box::new(error),
            }
        }
    };
    let code = Code::from_number(i32::from(status.code()));
    if let Some(reason) = needs_someone(url, code, status.message()) {
        return StoreError::Unusable {
            store: store.to_owned(),
            reason,
        };
    }
    // Never connected: nothing was sent, whatever the request.
    if is_connect_failure(&detail) {
        return unreachable(url, store, &detail);
    }
    match code {
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::Unknown
        | Code::Internal
        | Code::Aborted => unanswered(url, store, effect, &detail),
        _ => StoreError::Backend {
            store: store.to_owned(),
            source: Box::new(error),
        },
    }
}

/// What someone must do when etcd answered `code` with `message` for a reason that will not
/// heal by itself (refused credentials or permissions, a full database); `None` otherwise.
fn needs_someone(url: &EtcdUrl, code: Code, message: &str) -> Option<String> {
    Some(match code {
        Code::Unauthenticated | Code::InvalidArgument
            if message.contains("authentication failed")
                || message.contains("invalid auth token") =>
        {
            format!("etcd refused the credentials ({message}); check the user:password in the URL")
        }
        Code::Unauthenticated => format!(
            "etcd refused the credentials (authentication failed: {message}); check the \
             user:password in the URL"
        ),
        Code::InvalidArgument if message.contains("user name is empty") => {
            "etcd requires authentication and the URL has no credentials; use \
             etcd://user:password@host:port/prefix"
                .to_owned()
        }
        Code::FailedPrecondition if message.contains("authentication is not enabled") => {
            "the URL has credentials but etcd has authentication disabled; remove \
                 user:password@ from the URL, or enable authentication on etcd"
                .to_owned()
        }
        Code::PermissionDenied => format!(
            "etcd denied access ({message}); grant the URL's user read-write on the keys under \
             `{}`",
            url.prefix
        ),
        _ if message.contains("database space exceeded") => format!(
            "etcd's database is full ({message}); compact and defragment it, then disarm the \
             alarm (`etcdctl alarm disarm`), and run etcd with auto-compaction"
        ),
        _ => return None,
    })
}

/// No connection to the URL's endpoints: nothing was sent. An untrusted certificate needs
/// someone to act; anything else may heal.
fn unreachable(url: &EtcdUrl, store: &str, detail: &str) -> StoreError {
    let hint = if url.tls.is_some() {
        "check that etcd runs there and serves TLS (the URL has tls=true), and that cacert= \
         names the CA of its certificate"
    } else {
        "check that etcd runs there and the URL (if etcd serves TLS, add ?tls=true&cacert=PATH)"
    };
    let endpoints = url.endpoints.join(", ");
    let reason = format!("{CANNOT_REACH} {endpoints}: {detail}; {hint}");
    let store = store.to_owned();
    // A certificate that is not trusted stays untrusted, however often it is tried.
    if detail.to_ascii_lowercase().contains("certificate") {
        StoreError::Unusable { store, reason }
    } else {
        StoreError::Unavailable { store, reason }
    }
}

/// A request sent that got no answer: a write may still commit; a read may be tried again.
fn unanswered(url: &EtcdUrl, store: &str, effect: Effect, detail: &str) -> StoreError {
    let endpoints = url.endpoints.join(", ");
    let store = store.to_owned();
    match effect {
        Effect::Write => StoreError::Ambiguous {
            store,
            reason: format!("etcd at {endpoints} did not confirm the write: {detail}"),
        },
        Effect::Read => StoreError::Unavailable {
            store,
            reason: format!(
                "etcd at {endpoints} did not answer: {detail}; check that etcd runs there and \
                 has a leader{}",
                if url.tls.is_some() {
                    ""
                } else {
                    ", and whether it serves TLS only (then add ?tls=true&cacert=PATH)"
                }
            ),
        },
    }
}

/// Whether a failure's text shows that no connection was ever made, so no request was sent.
fn is_connect_failure(detail: &str) -> bool {
    let detail = detail.to_ascii_lowercase();
    [
        // tonic's error for any failure while connecting (refused, reset, TLS handshake).
        "connecterror(",
        "connection refused",
        "tcp connect error",
        "error trying to connect",
        "dns error",
        "failed to lookup address",
        "invalid peer certificate",
        "invalidcontenttype",
        "corrupt message",
        "received corrupt message",
        "handshake",
    ]
    .iter()
    .any(|needle| detail.contains(needle))
}

/// The gRPC status codes `classify` tells apart (tonic is not a dependency of this crate, so
/// its `Code` is matched by number).
mod tonic_code {
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Code {
        Cancelled,
        Unknown,
        InvalidArgument,
        DeadlineExceeded,
        PermissionDenied,
        FailedPrecondition,
        Aborted,
        Internal,
        Unavailable,
        Unauthenticated,
        Other,
    }

    impl Code {
        /// The code gRPC numbers `number`.
        pub fn from_number(number: i32) -> Code {
            match number {
                1 => Code::Cancelled,
                2 => Code::Unknown,
                3 => Code::InvalidArgument,
                4 => Code::DeadlineExceeded,
                7 => Code::PermissionDenied,
                9 => Code::FailedPrecondition,
                10 => Code::Aborted,
                13 => Code::Internal,
                14 => Code::Unavailable,
                16 => Code::Unauthenticated,
                _ => Code::Other,
            }
        }
    }
}
