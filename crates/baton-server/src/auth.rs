//! Who is calling: the `Authorization: Bearer TOKEN` header, checked against the tokens file
//! ([`crate::tokens`]), or, when it is a JWT and the server trusts CI identities, against the
//! trust file's policies and the issuer's keys ([`crate::oidc`]). A route takes a [`Caller`]
//! and asks it for the scope it needs on its key: no token or an unknown one answers 401, too
//! little scope 403, both with a JSON body. The token itself is never logged or echoed; only
//! its name is (an identity's name: its project, ref and run, and its policies).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};

use baton_client::permission::{Denial, Presented};
use serde_json::json;

use crate::error::ApiError;
use crate::oidc::{Refused, Trust};
use crate::tokens::{Grant, Principal, Scope};
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
    /// token's name), which rebuild the same sentence with what only they know. A CI
    /// identity's is [`id_token_refusal`]: clients show its message as it is.
    fn forbidden(&self, needed: Scope, key: Option<&str>) -> ApiError {
        let token = match self.0.from_trust {
            true => Presented::Identity(&self.0.name),
            false => Presented::Named(&self.0.name),
        };
        let denial = Denial {
            scope: Some(needed.as_str()),
            key,
            token,
        };
        let error = ApiError::forbidden(denial.sentence());
        let error = match self.0.from_trust {
            true => id_token_refusal(error),
            false => error,
        };
        let error = error
            .with("scope", json!(needed.as_str()))
            .with("token", json!(self.0.name));
        match key {
            Some(key) => error.with("key", json!(key)),
            None => error,
        }
    }
}

/// The header in which a request names a ticket by its secret token
/// ([`baton_client::remote::TICKET_HEADER`]).
const TICKET_HEADER: &str = baton_client::remote::TICKET_HEADER;

/// `caller`, or, when its bearer token was refused (401) on a server that trusts CI identities,
/// a caller that names a live ticket of `key` by its secret token (`Baton-Ticket`): it may read
/// `key`. An ID token lives minutes and the wait or turn it began may last longer; the
/// operations on one's own ticket are authorised by the ticket's token
/// ([`crate::routes::ops`]), and so are the reads of its key that waiting and holding make
/// (its document, its feed, the store's clock).
pub async fn caller_or_ticket(
    state: &State,
    headers: &HeaderMap,
    caller: Result<Caller, ApiError>,
    key: &str,
) -> Result<Caller, ApiError> {
    let refused = match caller {
        Ok(caller) => return Ok(caller),
        Err(refused) => refused,
    };
    if refused.status != StatusCode::UNAUTHORIZED || state.trust.is_none() {
        return Err(refused);
    }
    let Some(token) = headers.get(TICKET_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(refused);
    };
    if baton_core::limits::check_key(key).is_err() || !names_live_ticket(state, key, token).await {
        return Err(refused);
    }
    Ok(Caller(Principal {
        name: format!("the holder of a ticket of {key}"),
        // A prefix grant, but checked only against `key` itself: the route reads that key.
        grants: vec![Grant {
            scope: Scope::Read,
            prefix: key.to_owned(),
        }],
        from_trust: false,
    }))
}

/// Whether `key`'s document has a live ticket whose token is `token`.
async fn names_live_ticket(state: &State, key: &str, token: &str) -> bool {
    let Ok(Some(read)) = state.store.load(key).await else {
        return false;
    };
    baton_core::decode(&read.bytes)
        .is_ok_and(|doc| doc.by_token_hash(&baton_core::token_hash(token)).is_some())
}

/// A server with `--trust` and no tokens file, to a request without a token (`sent`: with one
/// that is not a JWT).
fn only_id_tokens(sent: bool) -> ApiError {
    let which = match sent {
        true => "the token sent is not one (a JWT)",
        false => "none was sent",
    };
    id_token_refusal(ApiError::unauthorized(format!(
        "this server takes only the ID tokens of the CIs it trusts (baton serve --trust), and \
         {which}: give the CI's ID token in BATON_TOKEN or --token-file (the GitHub Action asks \
         for one itself, given `permissions: id-token: write`)"
    )))
}

/// A refusal of an ID token (`--trust`): marked `id_token`, so that a client shows the
/// server's message, which says what the client could not know (why the token was refused,
/// which trust file to change), rather than the sentence it builds for a tokens-file token.
fn id_token_refusal(error: ApiError) -> ApiError {
    error.with("id_token", json!(true))
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
        if state.tokens.is_none() && state.trust.is_none() {
            return Ok(Caller(Principal::everyone()));
        }
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .ok_or_else(|| match state.tokens {
                Some(_) => unauthorized(Presented::Nothing),
                None => only_id_tokens(false),
            })?;
        let token = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::unauthorized("the Authorization header must be `Bearer TOKEN`")
            })?;
        if let Some(trust) = state
            .trust
            .as_ref()
            .filter(|_| Trust::looks_like_jwt(token))
        {
            return match trust.judge(token).await {
                Ok(principal) => Ok(Caller(principal)),
                Err(Refused::Invalid(why)) => Err(id_token_refusal(ApiError::unauthorized(why))),
                // Nothing about the policies: which claims would have matched is the
                // operator's to know, not a caller's.
                Err(Refused::NoPolicy) => Err(id_token_refusal(ApiError::forbidden(
                    "no trust policy grants this identity anything",
                ))),
            };
        }
        let Some(tokens) = &state.tokens else {
            return Err(only_id_tokens(true));
        };
        tokens
            .current()
            .identify(token)
            .map(Caller)
            .ok_or_else(|| unauthorized(Presented::Unknown))
    }
}
