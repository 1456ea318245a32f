//! CI identities (`baton serve --trust FILE`): a request's bearer token may be an ID token (a
//! JWT) that GitHub Actions, GitLab CI or CircleCI issued to the run, checked against its
//! issuer's published keys and mapped to scopes by the trust file's policies. Nothing is
//! stored, rotated or leaked: the CI proves who the run is.
//!
//! - [`policy`]: the trust file, its policies and claim globs.
//! - [`keys`]: an issuer's keys, from its discovery document and JWKS, cached.
//! - [`ring_provider`]: jsonwebtoken's cryptography on ring.
//!
//! A token is refused (401) unless: its header names an asymmetric algorithm
//! ([`ALGORITHMS`]) and a `kid`, and embeds no key (`jwk`, `jku`, `x5u`, `x5c`); its `iss` is
//! an issuer of the file; the issuer's key set has the `kid`, of the algorithm's family; the
//! signature holds; `aud` holds a policy's audience; `exp` is to come and `nbf` and `iat` are
//! past, each within [`LEEWAY_S`]. A valid token that matches no policy is 403, naming none.

pub mod keys;
pub mod policy;
pub mod ring_provider;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use crate::tokens::Principal;
use keys::{IssuerKeys, KeyError};
use policy::Policies;

/// The algorithms an ID token may be signed with: the asymmetric ones GitHub (RS256), GitLab
/// (RS256) and CircleCI (RS256) use and their kin. Never `none`, never HMAC: a server holds
/// no secret shared with an issuer, and an HMAC "signed" with a public key proves nothing.
pub const ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

/// The clock skew allowed on `exp`, `nbf` and `iat`, in seconds.
pub const LEEWAY_S: u64 = 60;

/// The longest identity kept as a principal's name (it goes into contexts, at most 1 KiB).
const IDENTITY_MAX_BYTES: usize = 300;

/// Why an ID token gets nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not a valid token of a trusted issuer (401): why, for the caller.
    Invalid(String),
    /// Valid, but no policy grants this identity anything (403).
    NoPolicy,
}

/// The policies and the keys of their issuers.
#[derive(Debug)]
pub struct Trust {
    policies: Policies,
    issuers: BTreeMap<String, IssuerKeys>,
}

impl Trust {
    /// Reads the trust file; an issuer's keys are fetched when a token first needs them, and
    /// a `kid` they lack is looked for at most once per `refresh_min`.
    pub fn read(path: &Path, refresh_min: Duration) -> Result<Trust, String> {
        Trust::new(Policies::read(path)?, refresh_min)
    }

    /// Trusts `policies`.
    pub fn new(policies: Policies, refresh_min: Duration) -> Result<Trust, String> {
        ring_provider::install();
        let mut issuers = BTreeMap::new();
        for issuer in policies.issuers() {
            issuers.insert(issuer.to_owned(), IssuerKeys::new(issuer, refresh_min)?);
        }
        Ok(Trust { policies, issuers })
    }

    /// How many issuers are trusted.
    pub fn n_issuers(&self) -> usize {
        self.issuers.len()
    }

    /// Whether `token` has a JWT's shape (three base64url parts, a JSON header): judged here
    /// rather than as a tokens-file token.
    pub fn looks_like_jwt(token: &str) -> bool {
        token.starts_with("eyJ")
            && token.split('.').count() == 3
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    }

    /// The principal `token` proves, or why it proves none.
    pub async fn judge(&self, token: &str) -> Result<Principal, Refused> {
        let invalid = |why: String| Refused::Invalid(format!("the ID token is refused: {why}"));
        let (algorithm, kid) = checked_header(token).map_err(invalid)?;
        let unverified: Map<String, Value> = jsonwebtoken::dangerous::insecure_decode(token)
            .map(|data| data.claims)
            .map_err(|e| invalid(format!("its claims are not JSON: {e}")))?;
        let issuer = unverified
            .get("iss")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(keys) = self.issuers.get(issuer) else {
            return Err(invalid(format!(
                "its issuer {issuer:?} is not one of the trust file's"
            )));
        };
        let jwk = keys.key(&kid).await.map_err(|error| match error {
            KeyError::UnknownKid => {
                invalid(format!("its key {kid:?} is not one {issuer} publishes"))
            }
            KeyError::Unreachable(why) => Refused::Invalid(format!(
                "the ID token cannot be checked: the server has no keys of {issuer}: {why}; the \
                 server must reach {issuer} over HTTPS (see its log)"
            )),
        })?;
        let key = DecodingKey::from_jwk(&jwk)
            .map_err(|e| invalid(format!("its key {kid:?} cannot be used: {e}")))?;
        if key.family() != algorithm.family() || !jwk_allows(&jwk, algorithm) {
            return Err(invalid(format!(
                "its algorithm {algorithm:?} is not its key's"
            )));
        }
        let claims =
            verified_claims(token, &key, algorithm, issuer, &self.policies).map_err(invalid)?;
        self.principal(issuer, &claims)
    }

    /// The principal of verified `claims`: the union of the matching policies' grants.
    fn principal(&self, issuer: &str, claims: &Map<String, Value>) -> Result<Principal, Refused> {
        let audiences = match claims.get("aud") {
            Some(Value::String(one)) => vec![one.clone()],
            Some(Value::Array(many)) => many
                .iter()
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        let matching = self.policies.matching(issuer, &audiences, claims);
        if matching.is_empty() {
            return Err(Refused::NoPolicy);
        }
        let mut grants = Vec::new();
        for policy in &matching {
            for grant in &policy.grants {
                if !grants.contains(grant) {
                    grants.push(grant.clone());
                }
            }
        }
        let names: Vec<&str> = matching.iter().map(|p| p.name.as_str()).collect();
        let mut name = format!("{} ({})", identity(claims), names.join(", "));
        truncate(&mut name, IDENTITY_MAX_BYTES);
        Ok(Principal {
            name,
            grants,
            from_trust: true,
        })
    }
}

/// The header's algorithm and `kid`, refusing what [`Trust`] never accepts.
fn checked_header(token: &str) -> Result<(Algorithm, String), String> {
    let header = jsonwebtoken::decode_header(token).map_err(|e| match e.kind() {
        ErrorKind::Json(_) | ErrorKind::InvalidAlgorithmName => {
            "its algorithm is not an asymmetric one (`none` and HMAC are never accepted)".to_owned()
        }
        _ => format!("it is not a JWT: {e}"),
    })?;
    if header.jwk.is_some() || header.jku.is_some() || header.x5u.is_some() || header.x5c.is_some()
    {
        return Err(
            "it names its own key (jwk, jku, x5u or x5c); keys come from the issuer only".into(),
        );
    }
    if !ALGORITHMS.contains(&header.alg) {
        return Err(format!(
            "its algorithm {:?} is not an asymmetric one (`none` and HMAC are never accepted)",
            header.alg
        ));
    }
    let kid = header.kid.ok_or("its header names no key (kid)")?;
    Ok((header.alg, kid))
}

/// Whether the JWK, if it says which algorithm it is for, says `algorithm`.
fn jwk_allows(jwk: &jsonwebtoken::jwk::Jwk, algorithm: Algorithm) -> bool {
    match jwk.common.key_algorithm {
        None => true,
        Some(named) => format!("{named:?}") == format!("{algorithm:?}"),
    }
}

/// The claims, once signature, issuer, audience and times hold.
fn verified_claims(
    token: &str,
    key: &DecodingKey,
    algorithm: Algorithm,
    issuer: &str,
    policies: &Policies,
) -> Result<Map<String, Value>, String> {
    let mut validation = Validation::new(algorithm);
    validation.leeway = LEEWAY_S;
    validation.validate_exp = true;
    validation.validate_nbf = true;
    validation.set_required_spec_claims(&["exp", "iss", "aud"]);
    validation.set_issuer(&[issuer]);
    validation.set_audience(&policies.audiences_of(issuer));
    let data =
        jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation).map_err(|e| match e
            .kind()
        {
            ErrorKind::ExpiredSignature => "it has expired (exp); ask the CI for a new one".into(),
            ErrorKind::ImmatureSignature => "it is not valid yet (nbf)".into(),
            ErrorKind::InvalidAudience => {
                "its audience (aud) is none a policy of its issuer names".into()
            }
            ErrorKind::InvalidSignature => "its signature does not hold".into(),
            _ => format!("{e}"),
        })?;
    let claims = data.claims;
    match claims.get("iat") {
        None => {}
        Some(Value::Number(iat)) => {
            let now = jsonwebtoken::get_current_timestamp();
            if iat.as_f64().is_none_or(|iat| iat > (now + LEEWAY_S) as f64) {
                return Err("it was issued in the future (iat)".into());
            }
        }
        Some(_) => return Err("its iat is not a number".into()),
    }
    Ok(claims)
}

/// Who the claims say the run is, for the history: `acme/app@refs/heads/main run 42` from
/// GitHub's, GitLab's or CircleCI's claims, else the subject.
fn identity(claims: &Map<String, Value>) -> String {
    let first = |names: &[&str]| {
        names.iter().find_map(|name| match claims.get(*name) {
            Some(Value::String(text)) if !text.is_empty() => Some(text.clone()),
            Some(Value::Number(number)) => Some(number.to_string()),
            _ => None,
        })
    };
    let project = first(&["repository", "project_path", "oidc.circleci.com/vcs-origin"]);
    let git_ref = first(&["ref", "oidc.circleci.com/vcs-ref"]);
    let run = first(&["run_id", "pipeline_id", "oidc.circleci.com/pipeline-id"]);
    let Some(project) = project else {
        return first(&["sub"]).unwrap_or_else(|| "an unnamed identity".to_owned());
    };
    let mut text = project;
    if let Some(git_ref) = git_ref {
        text.push_str(&format!("@{git_ref}"));
    }
    if let Some(run) = run {
        text.push_str(&format!(" run {run}"));
    }
    text
}

/// Cuts `text` to at most `max_bytes`, on a character boundary.
fn truncate(text: &mut String, max_bytes: usize) {
    if text.len() <= max_bytes {
        return;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_names_project_ref_and_run() {
        let of = |value: Value| identity(value.as_object().expect("an object"));
        let github = serde_json::json!({"repository": "acme/app", "ref": "refs/heads/main", "run_id": "42", "sub": "repo:acme/app:ref:refs/heads/main"});
        assert_eq!(of(github), "acme/app@refs/heads/main run 42");
        let gitlab =
            serde_json::json!({"project_path": "acme/app", "ref": "main", "pipeline_id": "7"});
        assert_eq!(of(gitlab), "acme/app@main run 7");
        let circleci = serde_json::json!({"sub": "org/1/project/2/user/3", "oidc.circleci.com/vcs-origin": "github.com/acme/app", "oidc.circleci.com/vcs-ref": "refs/heads/main", "oidc.circleci.com/pipeline-id": "p"});
        assert_eq!(of(circleci), "github.com/acme/app@refs/heads/main run p");
        assert_eq!(of(serde_json::json!({"sub": "someone"})), "someone");
    }

    #[test]
    fn only_jwt_shaped_tokens_are_judged_as_id_tokens() {
        assert!(Trust::looks_like_jwt("eyJhbGciOiJSUzI1NiJ9.eyJ9.c2ln"));
        assert!(!Trust::looks_like_jwt("bt_0123"));
        assert!(!Trust::looks_like_jwt("eyJ.a.b.c"));
        assert!(!Trust::looks_like_jwt("eyJ a.b.c"));
    }
}
