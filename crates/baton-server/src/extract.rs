//! Axum's extractors with their rejections turned into [`ApiError`]s, so that a malformed
//! path, query or body gets the same JSON error as every other refusal (never a plain-text
//! body a script cannot read).

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

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

/// A JSON body.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        axum::Json::<T>::from_request(request, state)
            .await
            .map(|axum::Json(value)| ApiJson(value))
            .map_err(|rejection| {
                let status = rejection.status();
                let mut error =
                    ApiError::bad_request(format!("bad body: {}", rejection.body_text()));
                if status == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    error.status = status;
                    error.code = "too_large";
                    error.message = format!("the body is over {} bytes", crate::BODY_MAX_BYTES);
                }
                error
            })
    }
}
