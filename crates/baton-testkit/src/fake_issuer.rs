//! A fake OpenID issuer on 127.0.0.1 for the tests that start a real `baton serve --trust`:
//! its discovery document and key set are answered by a [`FakeCi`] responder, and its ID
//! tokens are ES256 JWTs signed with a P-256 key made afresh for each issuer (no key is stored
//! anywhere). It stands for GitHub's token service: [`FakeIssuer::github_claims`] are the
//! claims GitHub puts in a run's token.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};

use crate::fake_ci::{FakeCi, Reply};

/// The `kid` of the issuer's one key.
const KID: &str = "fake-issuer-key-1";

/// An issuer serving its keys until dropped.
pub struct FakeIssuer {
    http: FakeCi,
    key: EcdsaKeyPair,
}

impl FakeIssuer {
    /// Makes a key and starts serving its discovery document and JWKS.
    pub fn start() -> FakeIssuer {
        let random = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &random)
            .expect("make a P-256 key");
        let key =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &random)
                .expect("read the P-256 key");
        let http = FakeCi::start();
        let url = http.url();
        let discovery = json!({ "issuer": url, "jwks_uri": format!("{url}/jwks") });
        http.reply_public("/.well-known/openid-configuration", Reply::json(discovery));
        // The uncompressed point: 0x04, x, y.
        let (x, y) = key.public_key().as_ref()[1..].split_at(32);
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": KID,
            "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y),
        });
        http.reply_public("/jwks", Reply::json(json!({ "keys": [jwk] })));
        FakeIssuer { http, key }
    }

    /// Its URL, the `iss` of its tokens and the `issuer` of a trust policy.
    pub fn url(&self) -> String {
        self.http.url()
    }

    /// A trust file's policy for this issuer: the audience, the `claims` globs (TOML inline
    /// table entries, `repository = "acme/*"`) and the scopes.
    pub fn policy(&self, name: &str, audience: &str, claims: &str, scopes: &[&str]) -> String {
        let scopes: Vec<String> = scopes.iter().map(|s| format!("{s:?}")).collect();
        format!(
            "[[trust]]\nissuer = {:?}\naudience = {audience:?}\nclaims = {{ {claims} }}\nscopes = [{}]\nname = {name:?}\n",
            self.url(),
            scopes.join(", ")
        )
    }

    /// The claims GitHub puts in a run's ID token, for audience `baton`, issued now and
    /// expiring `expires_in_s` from now (negative: already expired).
    pub fn github_claims(
        &self,
        repository: &str,
        git_ref: &str,
        run_id: &str,
        expires_in_s: i64,
    ) -> Value {
        let now = now_s();
        json!({
            "iss": self.url(), "aud": "baton",
            "sub": format!("repo:{repository}:ref:{git_ref}"),
            "repository": repository, "ref": git_ref, "run_id": run_id,
            "iat": now, "nbf": now, "exp": now + expires_in_s,
        })
    }

    /// An ID token with `claims`, signed by the issuer's key.
    pub fn id_token(&self, claims: &Value) -> String {
        let header = json!({ "alg": "ES256", "typ": "JWT", "kid": KID });
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .key
            .sign(&SystemRandom::new(), signed.as_bytes())
            .expect("sign the token");
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }

    /// How many times its key set was fetched.
    pub fn jwks_fetches(&self) -> usize {
        self.http
            .seen()
            .iter()
            .filter(|s| s.path == "/jwks")
            .count()
    }
}

/// Seconds since the epoch.
fn now_s() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    i64::try_from(since.as_secs()).expect("seconds fit")
}
