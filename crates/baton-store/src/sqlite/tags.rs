//! Who a write to a key sends wake-ups to: the sockets that watch the whole key, and those
//! watching only by tag (`Store::watch_tagged`) whose tags the write names; and which tags a
//! socket enters so that this stays true while its watchers come and go.
//!
//! A socket with tags in `baton_watch_tags` is a *tagged* socket: writes that name other tags
//! only pass it by. One with none is woken by every write, as every socket was before tags.

use std::collections::{HashMap, HashSet};

/// Keys entered under a socket's name, each with its tags.
pub(super) type Entered = HashMap<String, HashSet<String>>;

/// What a watch changes in the file's entries for this socket, in one transaction.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Entries {
    /// Keys nobody here watches any more: their entries and tags go.
    pub(super) forget: Vec<String>,
    /// The key watched now, when it is not entered yet.
    pub(super) enter: Option<String>,
    /// Tags of the key watched now to enter, and to remove.
    pub(super) add_tags: Vec<String>,
    pub(super) remove_tags: Vec<String>,
}

impl Entries {
    /// Whether the file needs no change.
    pub(super) fn is_empty(&self) -> bool {
        *self == Entries::default()
    }

    /// Whether these entries only add or remove tags of a key already entered: what a watch by
    /// tag may leave to this store's next write to the key.
    pub(super) fn only_tags(&self) -> bool {
        self.forget.is_empty() && self.enter.is_none()
    }

    /// These entries, then `later`'s, as one change.
    pub(super) fn then(self, later: Entries) -> Entries {
        let mut add_tags: Vec<String> = self
            .add_tags
            .into_iter()
            .filter(|t| !later.remove_tags.contains(t))
            .collect();
        let mut remove_tags: Vec<String> = self
            .remove_tags
            .into_iter()
            .filter(|t| !later.add_tags.contains(t))
            .collect();
        add_tags.extend(later.add_tags);
        remove_tags.extend(later.remove_tags);
        Entries {
            forget: [self.forget, later.forget].concat(),
            enter: later.enter.or(self.enter),
            add_tags,
            remove_tags,
        }
    }
}

/// The entries that bring `key`'s from `entered` to what its watchers here need, and forget the
/// `unwatched` keys. A socket with tags is woken only by writes that name one of them (or name
/// none), so it has tags only while nobody here watches the whole key (`whole`), and then one for
/// each tag watched (`tags`): a watch of the whole key removes them all before it returns, and a
/// watch by tag enters every live tag, not just its own, since before it the socket may have
/// been woken by every write for tags that had none entered.
pub(super) fn plan(
    entered: &Entered,
    key: &str,
    whole: bool,
    tags: &[String],
    unwatched: Vec<String>,
) -> Entries {
    let wanted: HashSet<&str> = if whole {
        HashSet::new()
    } else {
        tags.iter().map(String::as_str).collect()
    };
    let had = entered.get(key);
    let has = |tag: &str| had.is_some_and(|tags| tags.contains(tag));
    let mut add_tags: Vec<String> = wanted
        .iter()
        .filter(|t| !has(t))
        .map(|t| (*t).to_owned())
        .collect();
    add_tags.sort();
    let mut remove_tags: Vec<String> = had
        .into_iter()
        .flatten()
        .filter(|t| !wanted.contains(t.as_str()))
        .cloned()
        .collect();
    remove_tags.sort();
    Entries {
        forget: unwatched,
        enter: had.is_none().then(|| key.to_owned()),
        add_tags,
        remove_tags,
    }
}

/// `entered` after `entries` for `key` committed.
pub(super) fn record(entered: &mut Entered, key: &str, entries: &Entries) {
    for gone in &entries.forget {
        entered.remove(gone);
    }
    let tags = entered.entry(key.to_owned()).or_default();
    for tag in &entries.remove_tags {
        tags.remove(tag);
    }
    tags.extend(entries.add_tags.iter().cloned());
}

/// A socket a write sends to, and the tags it names there (`None`: it wakes every watcher of
/// the key in that process).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) name: String,
    pub(super) tags: Option<Vec<String>>,
}

/// The sockets a write must send to, from its key's watcher rows as read under its lock
/// (a socket with each of its tags, or once with none: woken by every write), given whom the
/// write wakes (`None`: everyone; else those watching the whole key or one of these tags).
pub(super) fn targets(rows: Vec<(String, Option<String>)>, wake: Option<&[String]>) -> Vec<Target> {
    // A socket with no tags comes once, with NULL; one with tags, once per tag.
    let mut by_socket: Vec<(String, Option<Vec<String>>)> = Vec::new();
    for (name, tag) in rows {
        match by_socket.iter_mut().find(|(n, _)| *n == name) {
            Some((_, Some(tags))) => tags.extend(tag),
            Some((_, None)) => {}
            None => by_socket.push((name, tag.map(|t| vec![t]))),
        }
    }
    by_socket
        .into_iter()
        .filter_map(|(name, tags)| match (tags, wake) {
            (None, _) | (Some(_), None) => Some(Target { name, tags: None }),
            (Some(tags), Some(named)) => {
                let tags: Vec<String> = tags.into_iter().filter(|t| named.contains(t)).collect();
                (!tags.is_empty()).then_some(Target {
                    name,
                    tags: Some(tags),
                })
            }
        })
        .collect()
}

#[cfg(test)]
impl Target {
    /// A target named `name`, naming `tags`.
    pub(super) fn of(name: &str, tags: Option<&[&str]>) -> Target {
        Target {
            name: name.to_owned(),
            tags: tags.map(|t| t.iter().map(|s| (*s).to_owned()).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(rows: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        rows.iter()
            .map(|(n, t)| ((*n).to_owned(), t.map(str::to_owned)))
            .collect()
    }

    #[test]
    fn a_write_sends_to_sockets_without_tags_and_to_those_of_the_tags_it_names() {
        let watchers = rows(&[
            ("whole", None),
            ("one", Some("t1")),
            ("two", Some("t2")),
            ("two", Some("t3")),
        ]);
        let named = ["t3".to_owned(), "t9".to_owned()];
        assert_eq!(
            targets(watchers.clone(), Some(&named)),
            [Target::of("whole", None), Target::of("two", Some(&["t3"]))]
        );
        // Naming nobody: only the socket that watches the whole key.
        assert_eq!(
            targets(watchers.clone(), Some(&[])),
            [Target::of("whole", None)]
        );
        // Waking everyone: every socket, for all its watchers.
        assert_eq!(
            targets(watchers, None),
            [
                Target::of("whole", None),
                Target::of("one", None),
                Target::of("two", None)
            ]
        );
    }

    fn entered(entries: &[(&str, &[&str])]) -> Entered {
        entries
            .iter()
            .map(|(k, tags)| {
                (
                    (*k).to_owned(),
                    tags.iter().map(|t| (*t).to_owned()).collect(),
                )
            })
            .collect()
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_socket_has_tags_only_while_nobody_there_watches_the_whole_key() {
        // A first watch by tag enters the key and its tag.
        let none = Entered::new();
        let first = plan(&none, "k", false, &strings(&["t1"]), vec![]);
        assert_eq!(first.enter.as_deref(), Some("k"));
        assert_eq!(first.add_tags, ["t1"]);
        // A watch of the whole key removes every tag, before it returns.
        let tagged = entered(&[("k", &["t1", "t2"])]);
        let whole = plan(&tagged, "k", true, &strings(&["t1", "t2"]), vec![]);
        assert_eq!((whole.enter, whole.add_tags.len()), (None, 0));
        assert_eq!(whole.remove_tags, ["t1", "t2"]);
        // A watch by tag while the whole key is watched here enters no tag.
        let untagged = entered(&[("k", &[])]);
        assert!(plan(&untagged, "k", true, &strings(&["t3"]), vec![]).is_empty());
        // Once nobody watches the whole key, the next watch by tag enters every live tag: t1
        // was watched while the socket was woken by every write, and had no entry.
        let after = plan(&untagged, "k", false, &strings(&["t1", "t4"]), vec![]);
        assert_eq!(after.add_tags, ["t1", "t4"]);
        // Tags nobody watches go; keys nobody watches are forgotten.
        let stale = entered(&[("k", &["t1", "t2"]), ("old", &["x"])]);
        let tidy = plan(
            &stale,
            "k",
            false,
            &strings(&["t2", "t5"]),
            strings(&["old"]),
        );
        assert_eq!(
            (tidy.add_tags, tidy.remove_tags),
            (strings(&["t5"]), strings(&["t1"]))
        );
        let mut now = stale.clone();
        record(
            &mut now,
            "k",
            &plan(
                &stale,
                "k",
                false,
                &strings(&["t2", "t5"]),
                strings(&["old"]),
            ),
        );
        assert_eq!(now, entered(&[("k", &["t2", "t5"])]));
    }

    #[test]
    fn entries_left_for_a_write_and_those_after_them_make_one_change() {
        let deferred = Entries {
            add_tags: strings(&["t2"]),
            remove_tags: strings(&["t1"]),
            ..Entries::default()
        };
        assert!(deferred.only_tags());
        // A watch of the whole key after them takes t2 away again; t1 stays removed.
        let whole = Entries {
            remove_tags: strings(&["t2"]),
            ..Entries::default()
        };
        let both = deferred.then(whole);
        assert_eq!(
            (both.add_tags, both.remove_tags),
            (vec![], strings(&["t1", "t2"]))
        );
    }
}
