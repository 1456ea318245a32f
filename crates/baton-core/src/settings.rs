//! The store's settings document: every notification rule ([`crate::notify::Rule`]) and every
//! freeze ([`crate::freeze`]), kept apart from any key's document and read together by each
//! writer from one cached copy (for at most one poll interval, so a change takes effect within
//! it).

use serde::{Deserialize, Serialize};

use crate::freeze::{Freeze, Resumed};
use crate::limits::InvalidInput;
use crate::notify::Rule;

/// Rules a store keeps.
pub const RULES_MAX: usize = 100;

/// The format of the settings document.
pub const SETTINGS_FORMAT: u64 = 1;

/// The store's settings document: every notification rule and every freeze
/// ([`crate::freeze`]), read together by each writer from one cached copy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// [`SETTINGS_FORMAT`].
    pub format: u64,
    /// The rules, by name.
    pub rules: Vec<Rule>,
    /// The freezes (`baton pause`), in the order they were set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freezes: Vec<Freeze>,
    /// Freezes that ended by `baton resume`, newest last, at most
    /// [`crate::freeze::FREEZES_REMEMBERED`]: `baton log` shows who paused and who resumed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed: Vec<Resumed>,
}

impl Settings {
    /// The rules that watch `key`.
    pub fn watching<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules.iter().filter(move |rule| rule.watches(key))
    }

    /// Adds `rule`, or replaces the rule of the same name.
    pub fn add(&mut self, rule: Rule) -> Result<(), InvalidInput> {
        rule.check()?;
        self.format = SETTINGS_FORMAT;
        let full = self.rules.len() >= RULES_MAX;
        match self.rules.iter_mut().find(|r| r.name == rule.name) {
            Some(existing) => *existing = rule,
            None if full => {
                return Err(InvalidInput(format!(
                    "a store keeps at most {RULES_MAX} notification rules"
                )))
            }
            None => self.rules.push(rule),
        }
        self.rules.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(())
    }

    /// Adds `freeze` (one with the same target and window replaces it); forgets freezes that
    /// can never be in force again after `wall_ms`.
    pub fn pause(&mut self, freeze: Freeze, wall_ms: u64) -> Result<(), InvalidInput> {
        freeze.check()?;
        self.format = SETTINGS_FORMAT;
        self.freezes.retain(|f| !f.is_over(wall_ms));
        let same = |f: &Freeze| {
            f.target == freeze.target
                && f.from_ms == freeze.from_ms
                && f.until_ms == freeze.until_ms
                && f.weekly == freeze.weekly
        };
        self.freezes.retain(|f| !same(f));
        if self.freezes.len() >= crate::freeze::FREEZES_MAX {
            return Err(InvalidInput(format!(
                "a store keeps at most {} freezes; resume some first",
                crate::freeze::FREEZES_MAX
            )));
        }
        self.freezes.push(freeze);
        Ok(())
    }

    /// Removes every freeze whose target is `target`, remembering them as resumed `by` at
    /// `wall_ms`; returns them.
    pub fn resume(&mut self, target: &str, by: &str, wall_ms: u64) -> Vec<Freeze> {
        let (ended, kept): (Vec<Freeze>, Vec<Freeze>) = std::mem::take(&mut self.freezes)
            .into_iter()
            .partition(|f| f.target == target);
        self.freezes = kept;
        self.freezes.retain(|f| !f.is_over(wall_ms));
        for freeze in &ended {
            self.resumed.push(Resumed {
                freeze: freeze.clone(),
                by: by.to_owned(),
                at_ms: wall_ms,
            });
        }
        let excess = self
            .resumed
            .len()
            .saturating_sub(crate::freeze::FREEZES_REMEMBERED);
        self.resumed.drain(..excess);
        ended
    }

    /// Removes the rule `name`; whether there was one.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.rules.len();
        self.rules.retain(|rule| rule.name != name);
        self.rules.len() != before
    }

    /// Encodes the document.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes the document.
    pub fn decode(bytes: &[u8]) -> Result<Settings, InvalidInput> {
        let settings: Settings = serde_json::from_slice(bytes).map_err(|e| {
            InvalidInput(format!(
                "the store's settings (notification rules, freezes) are corrupt: {e}"
            ))
        })?;
        if settings.format > SETTINGS_FORMAT {
            return Err(InvalidInput(
                "the store's settings were written by a newer baton; upgrade baton".into(),
            ));
        }
        Ok(settings)
    }
}
