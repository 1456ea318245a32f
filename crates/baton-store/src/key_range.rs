//! The end of a range scan over every key that starts with a prefix.
//!
//! Stores list keys by prefix with a range on an ordered index (SQLite's primary key, Redis's
//! `ZRANGEBYLEX`, etcd's key range) rather than a pattern, so that no character of a key is a
//! wildcard and the index is used. The range's end is the *successor* of the prefix: the least
//! string above every string that starts with it. It is written once here, in the two orders
//! stores compare in.

/// The least byte string greater than every byte string that starts with `prefix`: `prefix`
/// with trailing `0xFF` bytes dropped and its last byte incremented (etcd's
/// `GetPrefixRangeEnd`). `None` when there is none (an empty prefix, or only `0xFF` bytes): then
/// every key from `prefix` up matches.
pub fn successor_bytes(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut successor = prefix.to_vec();
    while let Some(last) = successor.pop() {
        if last < u8::MAX {
            successor.push(last + 1);
            return Some(successor);
        }
    }
    None
}

/// The least string greater than every string that starts with `prefix`, in code point order
/// (which is UTF-8 byte order), for stores whose bounds must be text: `prefix` with its last
/// character replaced by the next one, after dropping trailing `char::MAX`es. `None` when no
/// such string exists (an empty prefix, or one of only `char::MAX`).
pub fn successor_text(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        // The next code point, skipping the surrogates, which are not characters.
        let next = match last {
            '\u{D7FF}' => Some('\u{E000}'),
            _ => char::from_u32(u32::from(last) + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successor_text_covers_exactly_the_prefixed_strings() {
        let cases: &[(&str, Option<&str>)] = &[
            ("", None),
            ("a", Some("b")),
            ("ab/", Some("ab0")),
            ("100%", Some("100&")),
            ("x\u{D7FF}", Some("x\u{E000}")),
            ("x\u{10FFFF}", Some("y")),
            ("\u{10FFFF}\u{10FFFF}", None),
            ("é", Some("ê")),
        ];
        for (prefix, expected) in cases {
            assert_eq!(
                successor_text(prefix).as_deref(),
                *expected,
                "prefix {prefix:?}"
            );
        }
    }

    #[test]
    fn successor_bytes_is_byte_wise() {
        let cases: &[(&[u8], Option<&[u8]>)] = &[
            (b"", None),
            (b"a", Some(b"b")),
            (b"a\xff", Some(b"b")),
            (b"\xff\xff", None),
            ("é".as_bytes(), Some(&[0xC3, 0xAA])),
            (
                "x\u{10FFFF}".as_bytes(),
                Some(&[b'x', 0xF4, 0x8F, 0xBF, 0xC0]),
            ),
        ];
        for (prefix, expected) in cases {
            assert_eq!(
                successor_bytes(prefix).as_deref(),
                *expected,
                "prefix {prefix:?}"
            );
        }
    }
}
