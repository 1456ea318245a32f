//! object_store's errors, as the store's errors that say what to do.
//!
//! object_store keeps its transport error's kind and the HTTP status inside private types. The
//! kind is recovered by [`ObservingConnector`], which wraps every transport failure in a
//! [`Transport`] of ours (object_store then carries it as the source of its error); the status
//! and S3's error code are read from the error's text, which holds the response's status line
//! and XML body.
//!
//! Refused or missing credentials, a missing bucket, a wrong region and a skewed clock need
//! someone to act ([`StoreError::Unusable`]); a server that cannot be reached, is busy or
//! fails may heal by itself ([`StoreError::Unavailable`]).

use std::error::Error as StdError;

use async_trait::async_trait;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};
use object_store::ClientOptions;

use super::credentials::NoCredentials;
use crate::error::chain_text;
use crate::StoreError;

/// A transport failure, with the kind object_store gave it (which its own error hides).
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct Transport {
    kind: HttpErrorKind,
    source: HttpError,
}

/// object_store's HTTP client (reqwest), with [`Transport`] around its failures.
#[derive(Debug, Default)]
pub struct ObservingConnector;

impl HttpConnector for ObservingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Observing(inner)))
    }
}

#[derive(Debug)]
struct Observing(HttpClient);

#[async_trait]
impl HttpService for Observing {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.0.execute(request).await.map_err(|source| {
            let kind = source.kind();
            HttpError::new(kind, Transport { kind, source })
        })
    }
}

/// What a failing call did: which S3 action it needs, and whether it may have written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// GET of an object (`s3:GetObject`).
    Get,
    /// LIST of a prefix (`s3:ListBucket`).
    List,
    /// An unconditional PUT of a history entry or a record (`s3:PutObject`): writing it twice
    /// is harmless.
    PutEntry,
    /// The conditional PUT of a hot record (`s3:PutObject`): when unanswered, it may have
    /// happened.
    PutHot,
}

impl Call {
    fn action(self) -> &'static str {
        match self {
            Call::Get => "s3:GetObject",
            Call::List => "s3:ListBucket",
            Call::PutEntry | Call::PutHot => "s3:PutObject",
        }
    }
}

/// What an error message needs to know of the store.
#[derive(Clone, Debug)]
pub struct Context {
    /// The store's description.
    pub store: String,
    /// The bucket's name.
    pub bucket: String,
    /// Where requests go (`https://s3.REGION.amazonaws.com` or the custom endpoint).
    pub endpoint: String,
    /// `arn:aws:s3:::BUCKET/PREFIX/*`.
    pub objects_arn: String,
    /// `arn:aws:s3:::BUCKET`.
    pub bucket_arn: String,
}

impl Context {
    /// The store's error for a failed `call`.
    pub fn classify(&self, call: Call, error: object_store::Error) -> StoreError {
        if let Some(missing) = find::<NoCredentials>(&error) {
            return self.unusable(missing.0.clone());
        }
        if let Some(transport) = find::<Transport>(&error) {
            return self.unanswered(call, transport);
        }
        let text = chain_text(&error);
        let message = s3_message(&text).unwrap_or_else(|| text.clone());
        if let Some(refused) = self.refused_by_code(call, s3_code(&text), &message) {
            return refused;
        }
        match error {
            object_store::Error::PermissionDenied { .. } => return self.denied(call, message),
            object_store::Error::Unauthenticated { .. } => {
                return self.unusable(format!(
                    "S3 refused the credentials ({message}); check the credentials the AWS chain \
                     found"
                ))
            }
            _ => {}
        }
        match status(&text) {
            // A server error after a conditional write was sent: it may have been applied.
            Some(status) if status >= 500 && call == Call::PutHot => StoreError::Ambiguous {
                store: self.store.clone(),
                reason: format!(
                    "{} answered a conditional write with {status}: {message}",
                    self.endpoint
                ),
            },
            Some(status) if status >= 500 || status == 429 => {
                self.unavailable(format!("{} answered {status}: {message}", self.endpoint))
            }
            _ => StoreError::Backend {
                store: self.store.clone(),
                source: Box::new(error),
            },
        }
    }

    /// A request that got no answer over `transport`: one never sent did not happen; a
    /// conditional write sent may have.
    fn unanswered(&self, call: Call, transport: &Transport) -> StoreError {
        let detail = chain_text(&transport.source);
        match transport.kind {
            // Nothing was sent: the write did not happen.
            HttpErrorKind::Connect => self.unavailable(format!(
                "cannot reach S3 at {}: {detail}; check the network, and AWS_ENDPOINT_URL \
                 for an S3-compatible server",
                self.endpoint
            )),
            _ if call == Call::PutHot => StoreError::Ambiguous {
                store: self.store.clone(),
                reason: format!(
                    "no answer from {} to a conditional write ({detail})",
                    self.endpoint
                ),
            },
            _ => self.unavailable(format!("no answer from {}: {detail}", self.endpoint)),
        }
    }

    /// What S3's error `code` says someone must fix (a missing bucket, a refused permission or
    /// credentials, a skewed clock, a wrong region); `None` for any other code.
    fn refused_by_code(&self, call: Call, code: Option<&str>, message: &str) -> Option<StoreError> {
        Some(match code? {
            "NoSuchBucket" => self.unusable(format!(
                "the bucket `{}` does not exist at {}: create it (`aws s3 mb s3://{}`) or \
                 fix the URL",
                self.bucket, self.endpoint, self.bucket
            )),
            "AccessDenied" | "AllAccessDisabled" | "AccountProblem" => {
                self.denied(call, message.to_owned())
            }
            code @ ("InvalidAccessKeyId"
            | "SignatureDoesNotMatch"
            | "ExpiredToken"
            | "InvalidToken"
            | "TokenRefreshRequired") => self.unusable(format!(
                "S3 refused the credentials ({code}: {message}); check the credentials the \
                 AWS chain found (`aws sts get-caller-identity` shows whose they are)"
            )),
            "RequestTimeTooSkewed" => self.unusable(format!(
                "S3 refused the request because this host's clock is more than 15 minutes \
                 off ({message}); fix the clock (NTP)"
            )),
            code @ ("PermanentRedirect"
            | "AuthorizationHeaderMalformed"
            | "IllegalLocationConstraintException") => self.unusable(format!(
                "the bucket `{}` is in another region than the one configured ({code}: \
                 {message}); set AWS_REGION to the bucket's region",
                self.bucket
            )),
            _ => return None,
        })
    }

    /// A failure that may heal by itself.
    fn unavailable(&self, reason: String) -> StoreError {
        StoreError::Unavailable {
            store: self.store.clone(),
            reason,
        }
    }

    /// A failure someone must fix first.
    fn unusable(&self, reason: String) -> StoreError {
        StoreError::Unusable {
            store: self.store.clone(),
            reason,
        }
    }

    fn denied(&self, call: Call, reason: String) -> StoreError {
        let (resource, reason) = match call {
            Call::List => (self.bucket_arn.clone(), reason),
            // S3 answers 403, not 404, for a missing object when ListBucket is not allowed.
            Call::Get => (
                self.objects_arn.clone(),
                format!(
                    "{reason} (S3 also answers 403 for an object that does not exist yet unless \
                     s3:ListBucket is allowed on {})",
                    self.bucket_arn
                ),
            ),
            Call::PutEntry | Call::PutHot => (self.objects_arn.clone(), reason),
        };
        StoreError::Denied {
            store: self.store.clone(),
            action: call.action().to_owned(),
            resource,
            reason,
        }
    }
}

/// Whether `error` says the object does not exist (and not that the bucket does not: S3 answers
/// 404 to both, with different codes).
pub fn is_missing_object(error: &object_store::Error) -> bool {
    matches!(error, object_store::Error::NotFound { .. })
        && s3_code(&chain_text(error)) != Some("NoSuchBucket")
}

/// The first error of type `T` in `error`'s chain of sources.
fn find<'a, T: StdError + 'static>(error: &'a (dyn StdError + 'static)) -> Option<&'a T> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(found) = error.downcast_ref::<T>() {
            return Some(found);
        }
        current = error.source();
    }
    None
}

/// The HTTP status in object_store's message ("... status code: 503 Service Unavailable ...").
fn status(text: &str) -> Option<u16> {
    let (_, after) = text.split_once("status code: ")?;
    after.get(..3)?.parse().ok()
}

/// S3's error code from the XML body in the message (`<Code>NoSuchBucket</Code>`).
fn s3_code(text: &str) -> Option<&str> {
    between(text, "<Code>", "</Code>")
}

/// S3's error message from the XML body in the message.
fn s3_message(text: &str) -> Option<String> {
    between(text, "<Message>", "</Message>").map(str::to_owned)
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let (_, after) = text.split_once(start)?;
    let (inside, _) = after.split_once(end)?;
    Some(inside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_statuses_are_read_from_messages() {
        let text = "Error performing PUT http://h/b/k in 3ms - Server returned non-2xx status \
                    code: 403 Forbidden: <?xml version=\"1.0\"?><Error><Code>AccessDenied</Code>\
                    <Message>Access Denied</Message></Error>";
        assert_eq!(status(text), Some(403));
        assert_eq!(s3_code(text), Some("AccessDenied"));
        assert_eq!(s3_message(text).as_deref(), Some("Access Denied"));
        assert_eq!(status("no status here"), None);
        assert_eq!(s3_code("<Code>unterminated"), None);
    }

    #[test]
    fn denied_names_the_action_and_resource() {
        let context = Context {
            store: "s3://b/p at http://h".to_owned(),
            bucket: "b".to_owned(),
            endpoint: "http://h".to_owned(),
            objects_arn: "arn:aws:s3:::b/p/*".to_owned(),
            bucket_arn: "arn:aws:s3:::b".to_owned(),
        };
        for (call, action, resource) in [
            (Call::Get, "s3:GetObject", "arn:aws:s3:::b/p/*"),
            (Call::List, "s3:ListBucket", "arn:aws:s3:::b"),
            (Call::PutHot, "s3:PutObject", "arn:aws:s3:::b/p/*"),
        ] {
            let error = context.denied(call, "Access Denied".to_owned());
            let message = error.to_string();
            assert!(
                message.contains(action) && message.contains(resource),
                "{message}"
            );
        }
    }
}
