//! A fake OpenID issuer on 127.0.0.1: its discovery document, its JWKS (which keys it serves
//! can change, to rotate), a count of the JWKS fetches, and a switch that makes it answer 503
//! (down). Its keys are the test keys in `tests/keys/` (made for these tests only).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

/// A signing key of the fake issuer.
#[derive(Clone)]
pub struct Key {
    pub kid: &'static str,
    pub alg: Algorithm,
    pub encoding: EncodingKey,
}

impl Key {
    /// The RSA key `rsa-a` or `rsa-b`, or the P-256 key `ec-a`, named `kid`.
    pub fn load(file: &str, kid: &'static str) -> Key {
        baton_server::oidc::ring_provider::install();
        let path = format!("{}/tests/keys/{file}.pem", env!("CARGO_MANIFEST_DIR"));
        let pem = std::fs::read(&path).expect("a test key");
        let (alg, encoding) = if file.starts_with("ec") {
            (
                Algorithm::ES256,
                EncodingKey::from_ec_pem(&pem).expect("an EC key"),
            )
        } else {
            (
                Algorithm::RS256,
                EncodingKey::from_rsa_pem(&pem).expect("an RSA key"),
            )
        };
        Key { kid, alg, encoding }
    }

    /// Its public half as a JWK.
    pub fn jwk(&self) -> Jwk {
        let mut jwk = Jwk::from_encoding_key(&self.encoding, self.alg).expect("a JWK");
        jwk.common.key_id = Some(self.kid.to_owned());
        jwk
    }

    /// A token with `claims`, signed by this key.
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.to_owned());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("a signed token")
    }
}

/// What the fake issuer serves and counts.
pub struct Issuer {
    pub url: String,
    keys: Mutex<Vec<Jwk>>,
    jwks_fetches: AtomicUsize,
    down: AtomicBool,
}

impl Issuer {
    /// Starts an issuer serving `keys`.
    pub async fn start(keys: &[&Key]) -> Arc<Issuer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address: SocketAddr = listener.local_addr().expect("an address");
        let issuer = Arc::new(Issuer {
            url: format!("http://{address}"),
            keys: Mutex::new(keys.iter().map(|k| k.jwk()).collect()),
            jwks_fetches: AtomicUsize::new(0),
            down: AtomicBool::new(false),
        });
        let app = Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .with_state(issuer.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        issuer
    }

    /// Serves `keys` from now on.
    pub fn serve_keys(&self, keys: &[&Key]) {
        *self.keys.lock().expect("keys") = keys.iter().map(|k| k.jwk()).collect();
    }

    /// Answers 503 to everything (true) or serves again (false).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// How many times its JWKS was fetched.
    pub fn jwks_fetches(&self) -> usize {
        self.jwks_fetches.load(Ordering::SeqCst)
    }
}

async fn discovery(State(issuer): State<Arc<Issuer>>) -> Result<Json<Value>, StatusCode> {
    if issuer.down.load(Ordering::SeqCst) {
        return Err(StatusCode::SERVICE_UNAVAILABLE);
    }
    Ok(Json(json!({
        "issuer": issuer.url,
        "jwks_uri": format!("{}/jwks", issuer.url),
        "id_token_signing_alg_values_supported": ["RS256", "ES256"],
    })))
}

async fn jwks(
    State(issuer): State<Arc<Issuer>>,
) -> Result<([(&'static str, &'static str); 1], Json<JwkSet>), StatusCode> {
    if issuer.down.load(Ordering::SeqCst) {
        return Err(StatusCode::SERVICE_UNAVAILABLE);
    }
    issuer.jwks_fetches.fetch_add(1, Ordering::SeqCst);
    let keys = issuer.keys.lock().expect("keys").clone();
    Ok((
        [("cache-control", "public, max-age=3600")],
        Json(JwkSet { keys }),
    ))
}
