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
    /// For a refused operation: the core's refusal (`{"kind", "detail"}`), so that a client
    /// acts on it as on a direct one.
    pub refusal: Option<serde_json::Value>,
}

impl ApiError {
    /// No token, or one the server does not know (401).
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: message.into(),
            refusal: None,
        }
    }

    /// A known token without the scope the request needs (403).
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::FORBIDDEN,
            code: "forbidden",
            message: message.into(),
            refusal: None,
        }
    }

    /// Input the server refuses, changing nothing (400).
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "bad_request",
            message: message.into(),
            refusal: None,
        }
    }

    /// The store failed or could not be reached (503: a client may try another server).
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "store_unavailable",
            message: message.into(),
            refusal: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(refusal) = self.refusal {
            error["refusal"] = refusal;
        }
        let body = json!({ "error": error });
        (self.status, Json(body)).into_response()
    }
}

impl From<baton_store::StoreError> for ApiError {
    fn from(error: baton_store::StoreError) -> ApiError {
        ApiError::unavailable(error.to_string())
    }
}
