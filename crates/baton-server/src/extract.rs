//! Axum's extractors with their rejections turned into [`ApiError`]s, so that a malformed
//! path, query or body gets the same JSON error as every other refusal (never a plain-text
//! body a script cannot read).

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;

/// A path parameter (percent-decoded: a key's `/` arrives as `%2F`).
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| ApiPath(value))
            .map_err(|rejection| {
                ApiError::bad_request(format!("bad path: {}", rejection.body_text()))
            })
    }
}

/// The query string.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| ApiQuery(value))
            .map_err(|rejection| {
                ApiError::bad_request(format!("bad query: {}", rejection.body_text()))
            })
    }
}

/// A JSON body, with no field the type does not know, however deep.
///
/// serde's `deny_unknown_fields` cannot reach everywhere (an internally tagged enum's variant
/// without fields ignores extra ones, and the types also kept in documents must read what a
/// newer baton wrote), so the body is read as it came, parsed, written back, and every field it
/// had must be in what was parsed: a field the type dropped is refused.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned + Serialize,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let axum::Json(sent) = axum::Json::<Value>::from_request(request, state)
            .await
            .map_err(rejected)?;
        let parsed =
            T::deserialize(&sent).map_err(|e| ApiError::bad_request(format!("bad body: {e}")))?;
        let kept = serde_json::to_value(&parsed).unwrap_or(Value::Null);
        if let Some(path) = unknown_field(&sent, &kept, "") {
            return Err(ApiError::bad_request(format!(
                "bad body: unknown field `{path}`"
            )));
        }
        Ok(ApiJson(parsed))
    }
}

/// The first field of `sent` that `kept` (the same body, parsed and written back) lacks, as a
/// path (`op.spec.x`). A null that was left out counts as kept (an absent option).
fn unknown_field(sent: &Value, kept: &Value, at: &str) -> Option<String> {
    let join = |name: &str| {
        if at.is_empty() {
            name.to_owned()
        } else {
            format!("{at}.{name}")
        }
    };
    match (sent, kept) {
        (Value::Object(sent), Value::Object(kept)) => {
            sent.iter().find_map(|(name, value)| match kept.get(name) {
                Some(kept) => unknown_field(value, kept, &join(name)),
                None if value.is_null() => None,
                None => Some(join(name)),
            })
        }
        (Value::Array(sent), Value::Array(kept)) => sent
            .iter()
            .zip(kept)
            .enumerate()
            .find_map(|(i, (sent, kept))| unknown_field(sent, kept, &join(&i.to_string()))),
        _ => None,
    }
}

/// A body that is not JSON, or too large, as an error.
fn rejected(rejection: axum::extract::rejection::JsonRejection) -> ApiError {
    let status = rejection.status();
    let mut error = ApiError::bad_request(format!("bad body: {}", rejection.body_text()));
    if status == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        error.status = status;
        error.code = "too_large";
        error.message = format!("the body is over {} bytes", crate::BODY_MAX_BYTES);
    }
    error
}
