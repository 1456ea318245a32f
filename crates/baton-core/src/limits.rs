//! Every limit of the design, in one place, with the checks that enforce them at the edge.
//!
//! TigerBeetle's rule: put a limit on everything. Input over a limit is refused with a message
//! that says which limit and what was given; nothing is truncated silently.

/// Longest key, in bytes of UTF-8.
pub const KEY_MAX_BYTES: usize = 256;
/// Longest context, in bytes of UTF-8.
pub const CONTEXT_MAX_BYTES: usize = 1024;
/// Longest `order` value, in bytes of UTF-8.
pub const ORDER_MAX_BYTES: usize = 128;
/// Longest reason given with a release, in bytes of UTF-8.
pub const REASON_MAX_BYTES: usize = 256;
/// Longest ticket id, in bytes (ids are made by clients, `[A-Za-z0-9_-]`).
pub const ID_MAX_BYTES: usize = 64;
/// Longest token, in bytes.
pub const TOKEN_MAX_BYTES: usize = 128;
/// Largest encoded hot document. Keeps every operation cheap whatever the key's past.
pub const DOC_MAX_BYTES: usize = 256 * 1024;
/// Default bound on live (queued or held) tickets of one key.
pub const LIVE_TICKETS_DEFAULT: u32 = 1000;
/// Hard ceiling of the configurable live-ticket bound (beyond it the document limit would bite
/// first anyway).
pub const LIVE_TICKETS_MAX: u32 = 10_000;
/// Largest `limit` of a key.
pub const LIMIT_MAX: u32 = 100_000;
/// Shortest lease.
pub const TTL_MIN_MS: u64 = 1_000;
/// Longest lease: seven days.
pub const TTL_MAX_MS: u64 = 7 * 24 * 3600 * 1000;
/// Shortest claim window.
pub const CLAIM_MIN_MS: u64 = 100;
/// How many finished tickets the document remembers, so that a retried operation whose first
/// attempt did land is recognised instead of repeated (no ghost tickets, no double release).
///
/// Every write carries these marks and DynamoDB bills writes by size: eight keep an
/// acquire+release within four write units. Fewer marks never make a retry wrong, only
/// sometimes unanswerable: the document counts every finish ([`crate::Doc::finishes`]) and a
/// retry says how many it had seen ([`crate::Request::finishes_seen`]); when more tickets ended
/// in between than are remembered, an operation whose ticket is not found is refused with
/// [`crate::Refusal::Uncertain`] instead of being repeated.
pub const FINISHED_REMEMBERED: usize = 8;
/// How many tickets a key remembers that their owners queued by a write of their own while their
/// arrival's append was unanswered ([`crate::arrival::Unsettled`]): a late copy of one
/// remembered queues nothing; of one forgotten, it is refused as uncertain.
pub const UNSETTLED_REMEMBERED: usize = 8;
/// How many recent hold times the summary keeps for the wait estimate.
pub const HOLD_SAMPLES: usize = 16;

/// Input that breaks a limit or a format rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error("{0}")]
pub struct InvalidInput(pub String);

/// Checks a key: 1..=256 bytes of UTF-8 with no control characters.
pub fn check_key(key: &str) -> Result<(), InvalidInput> {
    if key.is_empty() {
        return Err(InvalidInput(
            "the key is empty; give a name such as deploy/production".into(),
        ));
    }
    if key.len() > KEY_MAX_BYTES {
        return Err(InvalidInput(format!(
            "the key is {} bytes long; keys are at most {KEY_MAX_BYTES} bytes",
            key.len()
        )));
    }
    if let Some(c) = key.chars().find(|c| c.is_control()) {
        return Err(InvalidInput(format!(
            "the key contains the control character {:?}; keys may not contain control characters",
            c
        )));
    }
    check_key_parts(key)
}

/// Every part of a key between slashes must show something: `" "`, `/`, `//x//` or `a//b`
/// name nothing a reader can tell apart. One `/` may end a key: a prefix such as `deploy/` is
/// a key name too, where a worker says which keys it serves.
fn check_key_parts(key: &str) -> Result<(), InvalidInput> {
    if key.trim().is_empty() {
        return Err(InvalidInput(format!(
            "the key {key:?} is only spaces; give a name such as deploy/production"
        )));
    }
    let parts = key.strip_suffix('/').unwrap_or(key);
    if parts.split('/').any(|part| part.trim().is_empty()) {
        return Err(InvalidInput(format!(
            "the key {key:?} has an empty part: keys may not start with `/` or have nothing \
             between two slashes; give a name such as deploy/production"
        )));
    }
    Ok(())
}

/// Whether `name` is a plain name (a notification rule's, a server token's): 1..=64 letters,
/// digits, `-`, `_` and `.`, safe in a log line, a URL and a shell word.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Checks a context: at most 1 KiB.
pub fn check_context(context: &str) -> Result<(), InvalidInput> {
    if context.len() > CONTEXT_MAX_BYTES {
        return Err(InvalidInput(format!(
            "the context is {} bytes long; contexts are at most {CONTEXT_MAX_BYTES} bytes",
            context.len()
        )));
    }
    Ok(())
}

/// Checks a release's reason: at most 256 bytes.
pub fn check_reason(reason: &str) -> Result<(), InvalidInput> {
    if reason.len() > REASON_MAX_BYTES {
        return Err(InvalidInput(format!(
            "the reason is {} bytes long; reasons are at most {REASON_MAX_BYTES} bytes",
            reason.len()
        )));
    }
    Ok(())
}

/// Checks an `order` value: 1..=128 bytes with no control characters.
pub fn check_order(order: &str) -> Result<(), InvalidInput> {
    if order.is_empty() || order.len() > ORDER_MAX_BYTES || order.chars().any(char::is_control) {
        return Err(InvalidInput(format!(
            "the order value must be 1..={ORDER_MAX_BYTES} bytes without control characters \
             (a zero-padded commit time, say)"
        )));
    }
    Ok(())
}

/// Checks a ticket id: 1..=64 bytes of `[A-Za-z0-9_-]`.
pub fn check_id(id: &str) -> Result<(), InvalidInput> {
    let ok = !id.is_empty()
        && id.len() <= ID_MAX_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok {
        return Err(InvalidInput(format!(
            "`{}` is not a ticket id (ids are 1..={ID_MAX_BYTES} letters, digits, `-` or `_`)",
            id.escape_debug()
        )));
    }
    Ok(())
}

/// Checks a token: 1..=128 bytes with no control characters.
pub fn check_token(token: &str) -> Result<(), InvalidInput> {
    if token.is_empty() || token.len() > TOKEN_MAX_BYTES || token.chars().any(char::is_control) {
        return Err(InvalidInput(
            "that is not a baton token (tokens are the 32 hex digits `baton acquire` printed)"
                .into(),
        ));
    }
    Ok(())
}

/// Checks a lease duration (`what` names it in the message).
pub fn check_ttl(what: &str, ttl_ms: u64) -> Result<(), InvalidInput> {
    if !(TTL_MIN_MS..=TTL_MAX_MS).contains(&ttl_ms) {
        return Err(InvalidInput(format!(
            "the {what} is {}; it must be between 1s and 7d",
            crate::duration::human_ms(ttl_ms)
        )));
    }
    Ok(())
}

/// Checks a key's limit: 1..=100,000.
pub fn check_limit(limit: u32) -> Result<(), InvalidInput> {
    if !(1..=LIMIT_MAX).contains(&limit) {
        return Err(InvalidInput(format!(
            "the limit is {limit}; it must be between 1 and {LIMIT_MAX}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let check = |key: &str, ok: bool| assert_eq!(check_key(key).is_ok(), ok, "{key:?}");
        check("deploy/production", true);
        check("with space/'quote\"/%/*/_/déploiement/生产", true);
        check(&"k".repeat(256), true);
        check(&"k".repeat(257), false);
        check("", false);
        check("tab\there", false);
        check("nul\0", false);
        for shapeless in [" ", "   ", "/", "//x//", "/x", "x//", "a//b", "a/ /b", " /"] {
            check(shapeless, false);
        }
        check(" padded / parts ", true);
        check("deploy/", true);
    }

    #[test]
    fn ids_and_tokens() {
        assert!(check_id("t-01H_x").is_ok());
        assert!(check_id("").is_err());
        assert!(check_id("a b").is_err());
        assert!(check_id(&"a".repeat(65)).is_err());
        assert!(check_token("0123456789abcdef0123456789abcdef").is_ok());
        assert!(check_token("").is_err());
        assert!(check_token("a\nb").is_err());
    }

    #[test]
    fn ttls_and_limits() {
        assert!(check_ttl("TTL", 999).is_err());
        assert!(check_ttl("TTL", 1000).is_ok());
        assert!(check_ttl("TTL", TTL_MAX_MS).is_ok());
        assert!(check_ttl("TTL", TTL_MAX_MS + 1).is_err());
        assert!(check_limit(0).is_err());
        assert!(check_limit(1).is_ok());
        assert!(check_context(&"c".repeat(1024)).is_ok());
        assert!(check_context(&"c".repeat(1025)).is_err());
    }
}
