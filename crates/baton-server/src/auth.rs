//! Who is calling: the `Authorization: Bearer TOKEN` header, checked against the tokens file
//! ([`crate::tokens`]). A route takes a [`Caller`] and asks it for the scope it needs on its
//! key: no token or an unknown one answers 401, too little scope 403, both with a JSON body.
//! The token itself is never logged or echoed; only its name is.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

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
        Err(ApiError::forbidden(format!(
            "the token {:?} has no {} scope on the key {key:?}",
            self.0.name,
            needed.as_str()
        )))
    }

    /// Refuses (403) unless the caller may do `needed` on some key.
    pub fn require_somewhere(&self, needed: Scope) -> Result<(), ApiError> {
        if self.0.may_somewhere(needed) {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "the token {:?} has no {} scope",
            self.0.name,
            needed.as_str()
        )))
    }
}

impl FromRequestParts<Arc<State>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<State>) -> Result<Caller, ApiError> {
        let Some(tokens) = &state.tokens else {
            return Ok(Caller(Principal::everyone()));
        };
        let header = parts.headers.get(AUTHORIZATION).ok_or_else(|| {
            ApiError::unauthorized(
                "this server needs a token: send `Authorization: Bearer TOKEN` (the CLI sends \
                 $BATON_TOKEN or --token)",
            )
        })?;
        let token = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::unauthorized("the Authorization header must be `Bearer TOKEN`")
            })?;
        tokens
            .identify(token)
            .map(Caller)
            .ok_or_else(|| ApiError::unauthorized("this server does not know that token"))
    }
}
