//! Who is calling: the `Authorization: Bearer TOKEN` header, checked against the tokens file
//! ([`crate::tokens`]). A route takes a [`Caller`] and asks it for the scope it needs on its
//! key: no token or an unknown one answers 401, too little scope 403, both with a JSON body.
//! The token itself is never logged or echoed; only its name is.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use baton_client::permission::{Denial, Presented};
use serde_json::json;

use crate::error::ApiError;
use crate::tokens::{Principal, Scope};
use crate::State;

/// The principal a request comes from.
#[derive(Clone, Debug)]
pub struct Caller(pub Principal);

impl Caller {
    /// Refuses (403) unless the caller may do `needed` on `key`.
    pub fn require(&self, needed: Scope, key: &str) -> Result<(), ApiError> {
        if self.0.may(needed, key) {
            return Ok(());
        }
        Err(self.forbidden(needed, Some(key)))
    }

    /// Refuses (403) unless the caller may do `needed` on some key.
    pub fn require_somewhere(&self, needed: Scope) -> Result<(), ApiError> {
        if self.0.may_somewhere(needed) {
            return Ok(());
        }
        Err(self.forbidden(needed, None))
    }

    /// The 403: its message, and its parts as fields for clients (the scope, the key, the
    /// token's name), which rebuild the same sentence with what only they know.
    fn forbidden(&self, needed: Scope, key: Option<&str>) -> ApiError {
        let denial = Denial {
            scope: Some(needed.as_str()),
            key,
            token: Presented::Named(&self.0.name),
        };
        let error = ApiError::forbidden(denial.sentence())
            .with("scope", json!(needed.as_str()))
            .with("token", json!(self.0.name));
        match key {
            Some(key) => error.with("key", json!(key)),
            None => error,
        }
    }
}

/// A 401: no token, or one the server does not know.
fn unauthorized(token: Presented) -> ApiError {
    let denial = Denial {
        scope: None,
        key: None,
        token,
    };
    ApiError::unauthorized(denial.sentence())
}

impl FromRequestParts<Arc<State>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<State>) -> Result<Caller, ApiError> {
        let Some(tokens) = &state.tokens else {
            return Ok(Caller(Principal::everyone()));
        };
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .ok_or_else(|| unauthorized(Presented::Nothing))?;
        let token = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::unauthorized("the Authorization header must be `Bearer TOKEN`")
            })?;
        tokens
            .current()
            .identify(token)
            .map(Caller)
            .ok_or_else(|| unauthorized(Presented::Unknown))
    }
}
