//! A notification rule: which events of which keys are posted where.

use serde::{Deserialize, Serialize};

use super::EventKind;
use crate::limits::InvalidInput;

/// One rule: post these events of keys under this prefix to this URL.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// Its name (unique).
    pub name: String,
    /// Keys it watches: those starting with it (empty: every key).
    pub prefix: String,
    /// Where events are posted.
    pub url: String,
    /// Which events.
    pub events: Vec<EventKind>,
    /// For `waited`: how long a ticket waits before the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_ms: Option<u64>,
}

impl Rule {
    /// Whether the rule watches `key`.
    pub fn watches(&self, key: &str) -> bool {
        key.starts_with(&self.prefix)
    }

    /// Whether the rule wants `kind` events.
    pub fn wants(&self, kind: EventKind) -> bool {
        self.events.contains(&kind)
    }

    /// Whether the URL is a Slack incoming webhook (which gets a Slack-shaped body).
    pub fn is_slack(&self) -> bool {
        self.url.starts_with("https://hooks.slack.com/") || self.url.contains("slack=1")
    }

    /// Checks a rule's input.
    pub fn check(&self) -> Result<(), InvalidInput> {
        if !crate::limits::is_plain_name(&self.name) {
            return Err(InvalidInput(format!(
                "the rule name {:?} must be 1..=64 characters of letters, digits, -, _ and .",
                self.name
            )));
        }
        if !(self.url.starts_with("http://") || self.url.starts_with("https://"))
            || self.url.len() > 2048
            || self.url.chars().any(|c| c.is_control() || c == ' ')
        {
            return Err(InvalidInput(format!(
                "--url {:?} must be an http:// or https:// URL (at most 2048 bytes)",
                self.url
            )));
        }
        if self.events.is_empty() {
            return Err(InvalidInput("--on names no event".into()));
        }
        if self.wants(EventKind::Waited) != self.after_ms.is_some() {
            return Err(InvalidInput(
                "the `waited` event needs --after DUR (how long a ticket waits before it), \
                 and --after is only for `waited`"
                    .into(),
            ));
        }
        crate::limits::check_context(&self.prefix)
            .map_err(|_| InvalidInput("the prefix is over 1 KiB".into()))
    }
}
