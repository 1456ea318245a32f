//! An issuer's signing keys: its OpenID discovery document names its JWKS, fetched over HTTPS
//! (plain HTTP only from a loopback issuer), kept for as long as the JWKS answer's
//! `Cache-Control: max-age` says (within [`FRESH_MIN`] and [`FRESH_MAX`]), fetched again when
//! they have expired or a token names a `kid` they lack, at most once per refresh interval
//! (a minute) per issuer so that tokens with made-up `kid`s cannot make the server hammer the
//! issuer. A fetch that fails keeps the keys there are, until they expire.

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use serde::Deserialize;

use baton_client::http::error_chain;

use super::policy::is_loopback_http;

/// The shortest time keys are kept, whatever the issuer says.
const FRESH_MIN: Duration = Duration::from_secs(10 * 60);
/// The longest, likewise; and how long without a `max-age`, [`FRESH_DEFAULT`].
const FRESH_MAX: Duration = Duration::from_secs(24 * 60 * 60);
const FRESH_DEFAULT: Duration = Duration::from_secs(60 * 60);
/// The largest discovery document or JWKS read.
const BODY_MAX_BYTES: usize = 256 * 1024;
/// How long one fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why no key could be had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The issuer's keys (fetched) have no such `kid`.
    UnknownKid,
    /// No keys could be fetched, and none are kept: what went wrong.
    Unreachable(String),
}

/// The keys fetched last, until when they are kept.
struct Fetched {
    keys: JwkSet,
    until: Instant,
}

/// What the issuer's keys are and when they were last asked for.
#[derive(Default)]
struct Cached {
    fetched: Option<Fetched>,
    /// When a fetch was last tried (succeeded or not).
    last_try: Option<Instant>,
    /// Why the last fetch failed, if it did.
    last_error: Option<String>,
}

/// One issuer's keys. Requests that need a fetch wait for one fetch under the lock: never two
/// at once for one issuer.
pub struct IssuerKeys {
    issuer: String,
    http: reqwest::Client,
    refresh_min: Duration,
    cached: tokio::sync::Mutex<Cached>,
}

impl std::fmt::Debug for IssuerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuerKeys")
            .field("issuer", &self.issuer)
            .finish()
    }
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

impl IssuerKeys {
    /// Keys of `issuer`, fetched when first needed; a `kid` they lack is looked for again at
    /// most once per `refresh_min`.
    pub fn new(issuer: &str, refresh_min: Duration) -> Result<IssuerKeys, String> {
        let http = baton_client::http::http_builder()
            .timeout(FETCH_TIMEOUT)
            // A redirect could lead from HTTPS to anywhere: the URLs must be the issuer's own.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        Ok(IssuerKeys {
            issuer: issuer.to_owned(),
            http,
            refresh_min,
            cached: tokio::sync::Mutex::new(Cached::default()),
        })
    }

    /// The key named `kid`.
    pub async fn key(&self, kid: &str) -> Result<Jwk, KeyError> {
        let mut cached = self.cached.lock().await;
        let now = Instant::now();
        let fresh = cached.fetched.as_ref().filter(|f| f.until > now);
        if let Some(jwk) = fresh.and_then(|f| f.keys.find(kid)) {
            return Ok(jwk.clone());
        }
        let may_fetch = cached
            .last_try
            .is_none_or(|at| now.duration_since(at) >= self.refresh_min);
        if may_fetch {
            cached.last_try = Some(now);
            match self.fetch().await {
                Ok((keys, fresh_for)) => {
                    tracing::info!(issuer = %self.issuer, n_keys = keys.keys.len(), "fetched the issuer's keys");
                    cached.fetched = Some(Fetched {
                        keys,
                        until: Instant::now() + fresh_for,
                    });
                    cached.last_error = None;
                }
                Err(error) => {
                    tracing::warn!(issuer = %self.issuer, %error, "cannot fetch the issuer's keys");
                    cached.last_error = Some(error);
                }
            }
        }
        let now = Instant::now();
        match cached.fetched.as_ref().filter(|f| f.until > now) {
            Some(fetched) => fetched.keys.find(kid).cloned().ok_or(KeyError::UnknownKid),
            None => Err(KeyError::Unreachable(
                cached
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "no keys fetched yet".to_owned()),
            )),
        }
    }

    /// Fetches the discovery document, then the JWKS it names: the keys and how long to keep
    /// them.
    async fn fetch(&self) -> Result<(JwkSet, Duration), String> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let (body, _) = self.get(&url).await?;
        let discovery: Discovery = serde_json::from_slice(&body)
            .map_err(|e| format!("the discovery document {url} is not one: {e}"))?;
        if discovery.issuer.trim_end_matches('/') != self.issuer.trim_end_matches('/') {
            return Err(format!(
                "the discovery document {url} names the issuer {:?}, not {:?}",
                discovery.issuer, self.issuer
            ));
        }
        let jwks_uri = discovery.jwks_uri;
        let plain_allowed = is_loopback_http(&self.issuer) && is_loopback_http(&jwks_uri);
        if !jwks_uri.starts_with("https://") && !plain_allowed {
            return Err(format!(
                "the discovery document {url} names the key set {jwks_uri:?}, which is not \
                 https://"
            ));
        }
        let (body, max_age) = self.get(&jwks_uri).await?;
        let keys: JwkSet = serde_json::from_slice(&body)
            .map_err(|e| format!("the key set {jwks_uri} is not a JWKS: {e}"))?;
        let fresh_for = max_age.unwrap_or(FRESH_DEFAULT).clamp(FRESH_MIN, FRESH_MAX);
        Ok((keys, fresh_for))
    }

    /// GETs `url`: its body (at most [`BODY_MAX_BYTES`]) and its `Cache-Control: max-age`.
    async fn get(&self, url: &str) -> Result<(Vec<u8>, Option<Duration>), String> {
        let mut response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("cannot reach {url}: {}", error_chain(&e)))?;
        if !response.status().is_success() {
            return Err(format!("{url} answered {}", response.status()));
        }
        let max_age = response
            .headers()
            .get(reqwest::header::CACHE_CONTROL)
            .and_then(|value| value.to_str().ok())
            .and_then(max_age);
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("cannot read {url}: {}", error_chain(&e)))?
        {
            body.extend_from_slice(&chunk);
            if body.len() > BODY_MAX_BYTES {
                return Err(format!("{url} is longer than {BODY_MAX_BYTES} bytes"));
            }
        }
        Ok((body, max_age))
    }
}

/// `max-age` of a `Cache-Control` value (`no-store`, `no-cache`: none, kept the least time).
fn max_age(value: &str) -> Option<Duration> {
    let mut age = None;
    for directive in value.split(',').map(str::trim) {
        let lower = directive.to_ascii_lowercase();
        if lower == "no-store" || lower == "no-cache" {
            return Some(Duration::ZERO);
        }
        if let Some(seconds) = lower.strip_prefix("max-age=") {
            age = seconds
                .trim_matches('"')
                .parse()
                .ok()
                .map(Duration::from_secs);
        }
    }
    age
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_age_is_read_from_cache_control() {
        assert_eq!(
            max_age("public, max-age=3600"),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(max_age("no-store"), Some(Duration::ZERO));
        assert_eq!(max_age("public"), None);
        assert_eq!(max_age("max-age=x"), None);
    }
}
