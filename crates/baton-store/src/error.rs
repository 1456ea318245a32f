//! The one error type of every store.

/// An error from a store. Contention is not an error: a stale CAS is [`crate::CasOutcome::Conflict`].
///
/// Each store's `errors.rs` decides once whether a failure can heal by itself: a connection
/// refused, a timeout, a server restarting or a locked file is [`StoreError::Unavailable`] (or
/// [`StoreError::Ambiguous`] for a write); a file that is not a database, a read-only file, a
/// refused password or a denied permission is [`StoreError::Unusable`] (or
/// [`StoreError::Denied`], [`StoreError::Incompatible`], [`StoreError::BadUrl`],
/// [`StoreError::Missing`]). A variant rather than a flag on `Unavailable`, so that every place
/// that builds an error has to choose, and every retry loop asks the one question
/// [`StoreError::heals`] instead of guessing from a message: waiting a minute for an error that
/// cannot go away only delays the message that says what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store URL could not be understood.
    #[error("bad store URL `{url}`: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it and what is expected.
        reason: String,
    },
    /// The store could not be opened or reached.
    #[error("cannot open {store}: {reason}")]
    Unavailable {
        /// Which store (its description).
        store: String,
        /// Why, and what to do about it.
        reason: String,
    },
    /// The store cannot be used as it is, and trying again will not change that (a file that
    /// is not a SQLite database, a read-only file, a directory that cannot be created, refused
    /// credentials, a role without a permission baton needs): someone has to fix something.
    #[error("cannot use {store}: {reason}")]
    Unusable {
        /// Which store (its description).
        store: String,
        /// Why, and what to fix.
        reason: String,
    },
    /// There is no baton store where the URL points (a mistyped SQLite path, a database
    /// without baton's tables, a DynamoDB table that does not exist), and it was opened to be
    /// read ([`crate::url::OpenMode::Existing`]), so nothing was created.
    #[error("no baton store at {store}: {reason}")]
    Missing {
        /// Which store (its description: the path or the table).
        store: String,
        /// What to do: check the URL, or create the store.
        reason: String,
    },
    /// An operation may or may not have taken effect (a timeout or a dropped connection after
    /// the request was sent). The coordinator re-reads to find out.
    #[error("{store}: outcome unknown: {reason}")]
    Ambiguous {
        /// Which store.
        store: String,
        /// What happened.
        reason: String,
    },
    /// The store holds data this version of baton cannot use (a newer schema, say).
    #[error("{store}: {reason}")]
    Incompatible {
        /// Which store.
        store: String,
        /// What was found and what to do.
        reason: String,
    },
    /// The store refused an operation for want of permission (an IAM policy, a database role):
    /// the message names the action to allow, so that an operator can fix the policy. A
    /// refusal by `baton serve` has no policy action: its `reason` is the whole sentence
    /// (`baton_client::permission`), and `action` is empty.
    #[error("{store}: permission denied: {}", needs(action, resource, reason))]
    Denied {
        /// Which store.
        store: String,
        /// The action to allow, as the policy language spells it (`s3:PutObject`,
        /// `dynamodb:UpdateItem`).
        action: String,
        /// What it is needed on (a bucket prefix, a table).
        resource: String,
        /// The backend's own words.
        reason: String,
    },
    /// The store was closed while waiting on it.
    #[error("the store was closed")]
    Closed,
    /// Any other failure of the backend.
    #[error("{store}: {source}")]
    Backend {
        /// Which store.
        store: String,
        /// The backend's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// What a [`StoreError::Denied`] says after "permission denied: ".
fn needs(action: &str, resource: &str, reason: &str) -> String {
    if action.is_empty() {
        reason.to_owned()
    } else {
        format!("baton needs `{action}` on {resource}: {reason}")
    }
}

impl StoreError {
    /// Whether trying again later may succeed: the store could not be reached or did not say
    /// whether a write landed (a restart, a failover, a network cut, a locked file). Retry
    /// loops (`--store-retry`, a wait riding out an outage) retry these and nothing else.
    pub fn heals(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable { .. } | StoreError::Ambiguous { .. }
        )
    }
}

/// An error and its sources, as one line: drivers wrap the cause that says what happened
/// (connection refused, a DNS failure) a few sources deep, and each store's error mapping
/// reads the whole chain. A source already contained in the text is not repeated.
#[cfg(any(feature = "etcd", feature = "s3", feature = "dynamodb"))]
pub(crate) fn chain_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
