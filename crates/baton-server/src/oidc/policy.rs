//! The trust file (`baton serve --trust FILE`): which CI identities get which scopes.
//!
//! ```toml
//! [[trust]]
//! issuer = "https://token.actions.githubusercontent.com"
//! audience = "baton"
//! claims = { repository = "acme/*", ref = "refs/heads/main" }
//! scopes = ["lock:deploy/", "read:"]
//! name = "acme main"
//! ```
//!
//! A policy matches a token of its issuer whose `aud` holds its audience and whose claims match
//! every glob of `claims` (`*` stands for any run of characters, `/` included; everything else
//! is literal). A token gets the union of the scopes of the policies it matches. A policy must
//! pin at least one claim to something narrower than `*`: an issuer such as GitHub signs tokens
//! for every repository in the world, and any of them may ask for audience `baton`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::tokens::Grant;

/// The trust file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    trust: Vec<Entry>,
}

/// One `[[trust]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    issuer: String,
    audience: String,
    claims: BTreeMap<String, String>,
    scopes: Vec<String>,
    name: String,
}

/// One policy: an issuer, an audience, claim globs, and what a matching identity may do.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The issuer, exactly as its tokens' `iss` says.
    pub issuer: String,
    /// What its tokens' `aud` must hold.
    pub audience: String,
    /// Claim name and glob; every one must match.
    pub claims: Vec<(String, String)>,
    /// What a matching identity may do.
    pub grants: Vec<Grant>,
    /// Shown in logs and in the history beside the identity.
    pub name: String,
}

/// The policies a server trusts.
#[derive(Clone, Debug)]
pub struct Policies {
    policies: Vec<Policy>,
}

/// The longest trust file read, and the most policies: a file is the operator's, but a limit
/// keeps a mistake (a generated file gone wrong) from making every request slow.
const FILE_MAX_BYTES: u64 = 1024 * 1024;
const POLICIES_MAX: usize = 1000;

impl Policies {
    /// Reads a trust file.
    pub fn read(path: &Path) -> Result<Policies, String> {
        let size = std::fs::metadata(path)
            .map_err(|e| format!("cannot read the trust file {}: {e}", path.display()))?
            .len();
        if size > FILE_MAX_BYTES {
            return Err(format!(
                "the trust file {} is {size} bytes; at most {FILE_MAX_BYTES} are read",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the trust file {}: {e}", path.display()))?;
        Policies::parse(&text).map_err(|e| format!("the trust file {}: {e}", path.display()))
    }

    /// Parses the text of a trust file.
    pub fn parse(text: &str) -> Result<Policies, String> {
        let file: File = toml::from_str(text).map_err(|e| {
            format!(
                "{}; each policy is a [[trust]] table with issuer, audience, claims = {{ NAME = \
                 \"GLOB\" }}, scopes = [\"lock:deploy/\"] and name",
                e.to_string().trim_end()
            )
        })?;
        if file.trust.is_empty() {
            return Err("it has no [[trust]] policy".to_owned());
        }
        if file.trust.len() > POLICIES_MAX {
            return Err(format!(
                "it has {} policies; at most {POLICIES_MAX}",
                file.trust.len()
            ));
        }
        let policies = file
            .trust
            .into_iter()
            .map(policy_of)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Policies { policies })
    }

    /// The issuers named, each once.
    pub fn issuers(&self) -> Vec<&str> {
        let mut issuers: Vec<&str> = self.policies.iter().map(|p| p.issuer.as_str()).collect();
        issuers.sort_unstable();
        issuers.dedup();
        issuers
    }

    /// The audiences `issuer`'s tokens may carry.
    pub fn audiences_of(&self, issuer: &str) -> Vec<&str> {
        let mut audiences: Vec<&str> = self
            .policies
            .iter()
            .filter(|p| p.issuer == issuer)
            .map(|p| p.audience.as_str())
            .collect();
        audiences.sort_unstable();
        audiences.dedup();
        audiences
    }

    /// The policies a verified token of `issuer` for `audiences` with `claims` matches.
    pub fn matching(
        &self,
        issuer: &str,
        audiences: &[String],
        claims: &serde_json::Map<String, Value>,
    ) -> Vec<&Policy> {
        self.policies
            .iter()
            .filter(|p| p.issuer == issuer && audiences.contains(&p.audience))
            .filter(|p| {
                p.claims.iter().all(|(name, glob)| {
                    claims
                        .get(name)
                        .and_then(claim_text)
                        .is_some_and(|text| glob_matches(glob, &text))
                })
            })
            .collect()
    }
}

/// Checks one `[[trust]]` table.
fn policy_of(entry: Entry) -> Result<Policy, String> {
    let name = entry.name;
    let what = |e: String| format!("policy {name:?}: {e}");
    if name.trim().is_empty() {
        return Err("a policy has an empty name; name it (it is shown in the history)".into());
    }
    check_issuer(&entry.issuer).map_err(what)?;
    if entry.audience.is_empty() {
        return Err(what("the audience is empty".into()));
    }
    if entry
        .claims
        .values()
        .all(|glob| glob.chars().all(|c| c == '*'))
    {
        return Err(what(
            "pin at least one claim to more than `*` (as repository = \"acme/app\"): the \
             issuer signs tokens for everyone who uses it"
                .into(),
        ));
    }
    let grants = entry
        .scopes
        .iter()
        .map(|s| Grant::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(what)?;
    Ok(Policy {
        issuer: entry.issuer,
        audience: entry.audience,
        claims: entry.claims.into_iter().collect(),
        grants,
        name,
    })
}

/// An issuer is an `https://` URL; plain `http://` only on a loopback host (a test issuer),
/// since its keys decide who may do what.
pub fn check_issuer(issuer: &str) -> Result<(), String> {
    if issuer.starts_with("https://") && issuer.len() > "https://".len() {
        return Ok(());
    }
    if is_loopback_http(issuer) {
        return Ok(());
    }
    Err(format!(
        "the issuer {issuer:?} must be an https:// URL (plain http:// only on 127.0.0.1, [::1] \
         or localhost)"
    ))
}

/// Whether `url` is `http://` to a loopback host.
pub fn is_loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A claim as text to match: strings as they are, numbers and booleans as JSON writes them;
/// anything else (arrays, objects, null) matches nothing.
fn claim_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// Whether `text` matches `glob`: `*` is any run of characters (none included), everything
/// else stands for itself.
pub fn glob_matches(glob: &str, text: &str) -> bool {
    let mut parts = glob.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_written() {
        let cases = [
            ("acme/*", "acme/app", true),
            ("acme/*", "acme/", true),
            ("acme/*", "acme", false),
            ("acme/*", "acmex/app", false),
            ("refs/heads/main", "refs/heads/main", true),
            ("refs/heads/main", "refs/heads/main2", false),
            ("*/main", "refs/heads/main", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxcyyb", false),
            ("a*a", "a", false),
            ("*", "", true),
        ];
        for (glob, text, expected) in cases {
            assert_eq!(glob_matches(glob, text), expected, "{glob} on {text}");
        }
    }

    #[test]
    fn issuers_are_https_or_loopback() {
        for good in [
            "https://token.actions.githubusercontent.com",
            "http://127.0.0.1:8080",
            "http://[::1]:1/x",
            "http://localhost:9",
        ] {
            assert!(check_issuer(good).is_ok(), "{good}");
        }
        for bad in [
            "http://example.com",
            "http://127.0.0.1.example.com",
            "https://",
            "ftp://x",
            "",
        ] {
            assert!(check_issuer(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_is_checked_and_policies_match_by_issuer_audience_and_claims() {
        let text = r#"
            [[trust]]
            issuer = "https://issuer.example"
            audience = "baton"
            claims = { repository = "acme/*", ref = "refs/heads/main" }
            scopes = ["lock:deploy/", "read:"]
            name = "acme main"

            [[trust]]
            issuer = "https://issuer.example"
            audience = "baton"
            claims = { repository = "acme/app" }
            scopes = ["lock:build/"]
            name = "acme app"
        "#;
        let policies = Policies::parse(text).unwrap();
        let claims = |value: Value| value.as_object().unwrap().clone();
        let main = claims(serde_json::json!({"repository": "acme/app", "ref": "refs/heads/main"}));
        let names = |found: Vec<&Policy>| found.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        let aud = ["baton".to_owned()];
        assert_eq!(
            names(policies.matching("https://issuer.example", &aud, &main)),
            ["acme main", "acme app"]
        );
        let fork = claims(serde_json::json!({"repository": "evil/app", "ref": "refs/heads/main"}));
        assert!(policies
            .matching("https://issuer.example", &aud, &fork)
            .is_empty());
        assert!(policies
            .matching("https://issuer.example", &["other".to_owned()], &main)
            .is_empty());
        assert!(policies
            .matching("https://other.example", &aud, &main)
            .is_empty());
        let missing = claims(serde_json::json!({"repository": "acme/app"}));
        assert_eq!(
            names(policies.matching("https://issuer.example", &aud, &missing)),
            ["acme app"]
        );
    }

    #[test]
    fn a_bad_file_says_what_is_wrong() {
        let policy = |issuer: &str, claims: &str, scopes: &str| {
            format!(
                "[[trust]]\nissuer = \"{issuer}\"\naudience = \"baton\"\nclaims = {claims}\n\
                 scopes = {scopes}\nname = \"p\"\n"
            )
        };
        let bad = [
            ("[[trust]", "[[trust]] table".to_owned()),
            ("", "no [[trust]]".to_owned()),
            (
                &*policy("http://example.com", "{ a = \"b\" }", "[\"read:\"]"),
                "https://".to_owned(),
            ),
            (
                &*policy("https://i", "{}", "[\"read:\"]"),
                "pin at least one claim".to_owned(),
            ),
            (
                &*policy("https://i", "{ a = \"*\" }", "[\"read:\"]"),
                "pin at least one claim".to_owned(),
            ),
            (
                &*policy("https://i", "{ a = \"b\" }", "[\"write:\"]"),
                "unknown scope".to_owned(),
            ),
        ];
        for (text, says) in bad {
            let error = Policies::parse(text).unwrap_err();
            assert!(error.contains(&says), "{text:?}: {error}");
        }
    }
}
