//! The error every route answers with: an HTTP status and a JSON body
//! `{"error": {"code": "...", "message": "..."}}` that says what to do.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// A request that could not be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable word for scripts (`unauthorized`, `forbidden`, `bad_request`, ...).
    pub code: &'static str,
    /// What went wrong and what to do, for people.
    pub message: String,
    /// More fields of the error object, for clients: a refused operation's `refusal` (the
    /// core's, `{"kind", "detail"}`, so that a client acts on it as on a direct one), an
    /// ambiguous write's `finishes_seen`.
    pub more: Vec<(&'static str, serde_json::Value)>,
}

impl ApiError {
    /// This error with field `name` added to its error object.
    pub fn with(mut self, name: &'static str, value: serde_json::Value) -> ApiError {
        self.more.push((name, value));
        self
    }

    /// No token, or one the server does not know (401).
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: message.into(),
            more: Vec::new(),
        }
    }

    /// A known token without the scope the request needs (403).
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::FORBIDDEN,
            code: "forbidden",
            message: message.into(),
            more: Vec::new(),
        }
    }

    /// Input the server refuses, changing nothing (400).
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "bad_request",
            message: message.into(),
            more: Vec::new(),
        }
    }

    /// The store failed or could not be reached (503: a client may try another server).
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "store_unavailable",
            message: message.into(),
            more: Vec::new(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({ "code": self.code, "message": self.message });
        for (name, value) in self.more {
            error[name] = value;
        }
        let body = json!({ "error": error });
        (self.status, Json(body)).into_response()
    }
}

impl From<baton_store::StoreError> for ApiError {
    /// 503 either way (a client may try another server); the code tells a client whether
    /// trying again may help (`store_unavailable`) or not (`store_unusable`), as the store
    /// classified the error ([`baton_store::StoreError::heals`]).
    fn from(error: baton_store::StoreError) -> ApiError {
        let heals = error.heals();
        let mut api_error = ApiError::unavailable(error.to_string());
        if !heals {
            api_error.code = "store_unusable";
        }
        api_error
    }
}
