//! How much of a key's history a store keeps: at most [`HistoryRetention::keep`] entries per
//! key, and, when set, none older than [`HistoryRetention::max_age`].
//!
//! History is trimmed by the writer that appends it — in the CAS's own transaction, statement
//! or script, or by the same writer right after it — never by a separate sweeper, so a store
//! that nobody runs a sweeper for still stays bounded. Trimming removes only the oldest entries
//! and never renumbers: `history(key, after_seq)` and `history_tail` go on answering with the
//! seqs the entries were written with. The wait estimate reads the document's summary, never
//! the history, so trimming cannot change it.
//!
//! Both limits are URL query parameters with the same names on every store:
//! `history_keep=N` (N ≥ 1, default [`KEEP_DEFAULT`]) and `history_max_age=DURATION` (a
//! humantime duration such as `30d` or `12h`; none by default). S3 and DynamoDB keep their
//! history by age only, through the service's own expiry (an S3 lifecycle rule, a DynamoDB
//! TTL attribute) because baton asks for no delete permission there: `history_keep` does not
//! apply to them and their age defaults to [`EXPIRING_MAX_AGE_DEFAULT`].

use std::time::Duration;

use crate::StoreError;

/// The URL parameter of [`HistoryRetention::keep`].
pub const KEEP_PARAMETER: &str = "history_keep";

/// The URL parameter of [`HistoryRetention::max_age`].
pub const MAX_AGE_PARAMETER: &str = "history_max_age";

/// Entries kept per key when the URL says nothing: baton's limit on history length.
pub const KEEP_DEFAULT: u64 = 10_000;

/// A `history_keep` from which a store that trims by count may keep a few more entries than
/// asked, never fewer, to trim in batches: Redis drops whole stream nodes (`MAXLEN ~`), etcd
/// deletes the excess once it reaches a batch, rather than one entry after every write. Below
/// it trimming is exact.
pub const EXACT_KEEP_BELOW: u64 = 1_000;

/// The age after which S3 and DynamoDB expire history when the URL says nothing: long enough
/// for `baton log` to show a quarter of work, short enough that a busy key's history does not
/// grow without bound (they cannot trim by count).
pub const EXPIRING_MAX_AGE_DEFAULT: Duration = Duration::from_secs(90 * 24 * 60 * 60);

/// How much history a store keeps per key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryRetention {
    /// At most this many entries per key (the newest).
    pub keep: u64,
    /// When set, entries older than this go too.
    pub max_age: Option<Duration>,
}

impl Default for HistoryRetention {
    fn default() -> Self {
        HistoryRetention {
            keep: KEEP_DEFAULT,
            max_age: None,
        }
    }
}

impl HistoryRetention {
    /// Whether a query parameter's name is one of retention's.
    pub fn is_parameter(name: &str) -> bool {
        name == KEEP_PARAMETER || name == MAX_AGE_PARAMETER
    }

    /// The age for a store that expires history by age only: the URL's, else
    /// [`EXPIRING_MAX_AGE_DEFAULT`].
    pub fn expiring_max_age(&self) -> Duration {
        self.max_age.unwrap_or(EXPIRING_MAX_AGE_DEFAULT)
    }

    /// The age in whole milliseconds, saturated (a cut computed from it never underflows).
    pub fn max_age_ms(&self) -> Option<u64> {
        self.max_age
            .map(|age| u64::try_from(age.as_millis()).unwrap_or(u64::MAX))
    }

    /// Sets one parameter from its text; `Err` says what is expected.
    fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        if name == KEEP_PARAMETER {
            self.keep = match value.parse::<u64>() {
                Ok(keep) if keep >= 1 => keep,
                _ => {
                    return Err(format!(
                        "`{KEEP_PARAMETER}={value}`: expected a whole number of history entries \
                         to keep per key, at least 1 (default {KEEP_DEFAULT})"
                    ))
                }
            };
        } else {
            let age = humantime::parse_duration(value).map_err(|error| {
                format!(
                    "`{MAX_AGE_PARAMETER}={value}`: expected a duration such as `30d`, `12h` \
                     or `90min` ({error})"
                )
            })?;
            if age.is_zero() {
                return Err(format!(
                    "`{MAX_AGE_PARAMETER}={value}`: the age must be longer than 0"
                ));
            }
            self.max_age = Some(age);
        }
        Ok(())
    }

    /// Takes the retention parameters out of `url`'s query: the URL without them (for the
    /// store's own parser, which never sees them; the `?` goes too when nothing is left) and
    /// the retention they set. A bad value is [`StoreError::BadUrl`] saying what is expected.
    pub fn take_from_url(url: &str) -> Result<(String, HistoryRetention), StoreError> {
        let (before_fragment, fragment) = match url.split_once('#') {
            Some((before, fragment)) => (before, Some(fragment)),
            None => (url, None),
        };
        let Some((base, query)) = before_fragment.split_once('?') else {
            return Ok((url.to_owned(), HistoryRetention::default()));
        };
        let mut retention = HistoryRetention::default();
        let mut others = Vec::new();
        for parameter in query.split('&') {
            let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
            if Self::is_parameter(name) {
                retention
                    .set(name, value)
                    .map_err(|reason| StoreError::BadUrl {
                        url: crate::url::redact_password(url),
                        reason,
                    })?;
            } else {
                others.push(parameter);
            }
        }
        let mut rest = base.to_owned();
        if !others.is_empty() {
            rest.push('?');
            rest.push_str(&others.join("&"));
        }
        if let Some(fragment) = fragment {
            rest.push('#');
            rest.push_str(fragment);
        }
        Ok((rest, retention))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    fn taken(url: &str) -> (String, HistoryRetention) {
        HistoryRetention::take_from_url(url).unwrap()
    }

    fn refused(url: &str) -> String {
        match HistoryRetention::take_from_url(url) {
            Err(StoreError::BadUrl { reason, .. }) => reason,
            other => panic!("{url}: expected BadUrl, got {other:?}"),
        }
    }

    #[test]
    fn parameters_are_taken_and_the_rest_kept() {
        let day = Duration::from_secs(86_400);
        assert_eq!(
            taken("redis://h/0"),
            ("redis://h/0".to_owned(), HistoryRetention::default())
        );
        assert_eq!(
            taken("redis://h/0?namespace=x&history_keep=5"),
            (
                "redis://h/0?namespace=x".to_owned(),
                HistoryRetention {
                    keep: 5,
                    max_age: None
                }
            )
        );
        assert_eq!(
            taken("etcd://h/p?history_max_age=30d&history_keep=100"),
            (
                "etcd://h/p".to_owned(),
                HistoryRetention {
                    keep: 100,
                    max_age: Some(30 * day)
                }
            )
        );
        assert_eq!(
            taken("rediss://h?history_keep=7#insecure").0,
            "rediss://h#insecure"
        );
        assert_eq!(
            taken("postgres://h/db?sslmode=require&history_max_age=12h").1,
            HistoryRetention {
                keep: KEEP_DEFAULT,
                max_age: Some(Duration::from_secs(12 * 3600))
            }
        );
    }

    #[test]
    fn bad_values_say_what_is_expected() {
        assert!(refused("redis://h?history_keep=0").contains("at least 1"));
        assert!(refused("redis://h?history_keep=-3").contains("whole number"));
        assert!(refused("redis://h?history_keep=").contains("whole number"));
        assert!(refused("redis://h?history_max_age=soon").contains("such as `30d`"));
        assert!(refused("redis://h?history_max_age=0s").contains("longer than 0"));
        assert!(!refused("redis://:secret@h?history_keep=x").is_empty());
        match HistoryRetention::take_from_url("redis://:secret@h?history_keep=x") {
            Err(StoreError::BadUrl { url, .. }) => assert!(!url.contains("secret"), "{url}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn expiring_stores_default_to_ninety_days() {
        assert_eq!(
            HistoryRetention::default().expiring_max_age(),
            EXPIRING_MAX_AGE_DEFAULT
        );
        assert_eq!(EXPIRING_MAX_AGE_DEFAULT.as_secs(), 90 * 86_400);
    }
}
