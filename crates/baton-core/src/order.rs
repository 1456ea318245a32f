//! How `--order` values compare: the one comparison every queue, supersede and listing uses.
//!
//! CI systems hand out build numbers that are not zero-padded (`GITHUB_RUN_NUMBER`,
//! `CIRCLE_BUILD_NUM`), so two values that are both numbers compare as numbers: `100` sorts
//! after `99`. A number is one or more ASCII digits and nothing else (no sign, no space, no
//! point); leading zeros do not count, so `099` and `99` are the same place, and tickets at the
//! same place go by arrival like any tie. Every other value is text and compares as a string,
//! byte by byte (a zero-padded commit time, an ISO date). A key's live tickets use one kind:
//! a number beside text would sort by a rule nobody meant, so the newcomer is refused
//! ([`crate::Refusal::OrderKindMismatch`], judged by [`mismatch`]).

use std::cmp::Ordering;

/// What kind of value an order is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One or more ASCII digits: compared as an integer of any length.
    Number,
    /// Anything else: compared as a string.
    Text,
}

impl Kind {
    /// The word for it in messages.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Number => "a number",
            Kind::Text => "text",
        }
    }

    /// The adjective for it in messages.
    pub fn adjective(self) -> &'static str {
        match self {
            Kind::Number => "numeric",
            Kind::Text => "text",
        }
    }
}

/// The kind of `order`.
pub fn kind(order: &str) -> Kind {
    if !order.is_empty() && order.bytes().all(|b| b.is_ascii_digit()) {
        Kind::Number
    } else {
        Kind::Text
    }
}

/// Compares two order values: as integers when both are numbers, else as strings.
///
/// Numbers of any length compare exactly (no parse, so no overflow): without their leading
/// zeros, the longer one is larger, and two of one length compare digit by digit.
pub fn compare(a: &str, b: &str) -> Ordering {
    match (kind(a), kind(b)) {
        (Kind::Number, Kind::Number) => {
            let (a, b) = (a.trim_start_matches('0'), b.trim_start_matches('0'));
            a.len().cmp(&b.len()).then_with(|| a.cmp(b))
        }
        _ => a.cmp(b),
    }
}

/// The first live order value whose kind differs from `new`'s, if any: a ticket with that
/// order value must not join those tickets.
pub fn mismatch<'a>(new: &str, live: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let want = kind(new);
    live.into_iter().find(|other| kind(other) != want)
}

/// An order value that compares by [`compare`]: what queue keys hold, so that a sort, a
/// supersede and a freeze's override all place tickets alike.
#[derive(Clone, Copy, Debug)]
pub struct Value<'a>(pub &'a str);

impl PartialEq for Value<'_> {
    fn eq(&self, other: &Self) -> bool {
        compare(self.0, other.0) == Ordering::Equal
    }
}

impl Eq for Value<'_> {}

impl PartialOrd for Value<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Value<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        compare(self.0, other.0)
    }
}

/// A ticket's place in its key's queue: tickets with an order value first, by [`compare`],
/// then by arrival.
pub type QueueKey<'a> = (bool, Option<Value<'a>>, u64);

/// The queue key of a ticket with `order` that arrived `arrival`-th.
pub fn queue_key(order: Option<&str>, arrival: u64) -> QueueKey<'_> {
    (order.is_none(), order.map(Value), arrival)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_as_integers_and_text_as_strings() {
        let check = |a: &str, b: &str, want: Ordering| {
            assert_eq!(compare(a, b), want, "{a:?} vs {b:?}");
            assert_eq!(compare(b, a), want.reverse(), "{b:?} vs {a:?}");
        };
        check("99", "100", Ordering::Less);
        check("9", "10", Ordering::Less);
        check("099", "99", Ordering::Equal);
        check("0", "000", Ordering::Equal);
        check("098", "99", Ordering::Less);
        check(
            "18446744073709551616",
            "18446744073709551615",
            Ordering::Greater,
        );
        check(&"9".repeat(128), &"1".repeat(127), Ordering::Greater);
        check("b", "a10", Ordering::Greater);
        check("2024-01-02", "2024-01-10", Ordering::Less);
        check("-5", "-10", Ordering::Greater);
    }

    #[test]
    fn kinds() {
        assert_eq!(kind("0042"), Kind::Number);
        assert_eq!(kind("1700000000"), Kind::Number);
        for text in ["", "-1", "+1", "1.5", " 1", "1e3", "v2", "١٢"] {
            assert_eq!(kind(text), Kind::Text, "{text:?}");
        }
        assert_eq!(mismatch("5", ["1", "a", "2"]), Some("a"));
        assert_eq!(mismatch("x", ["1", "a"]), Some("1"));
        assert_eq!(mismatch("5", ["1", "007"]), None);
    }
}
