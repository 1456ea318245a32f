//! DynamoDB's errors in baton's words: what happened, and what to do about it.
//!
//! A missing table is [`StoreError::Missing`] (`baton init` creates it); refused or missing
//! credentials and a missing region need someone to act ([`StoreError::Unusable`]); throttling,
//! a service failing and a network that cannot reach it may heal by themselves
//! ([`StoreError::Unavailable`]).

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

use crate::error::chain_text;
use crate::StoreError;

/// Whether a failed request may have been applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// A read: failing changed nothing.
    Read,
    /// A write whose outcome matters: an unanswered one may have been applied, so the caller
    /// must re-read ([`StoreError::Ambiguous`]).
    Write,
    /// A write that is safe to repeat (a history entry under its own sequence number): failing
    /// leaves nothing a reader could notice, so a failure is just a failure.
    Idempotent,
}

/// What an operation was, for the messages: the IAM action it needs, and the table.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// The store's description.
    pub store: &'a str,
    /// The table's name.
    pub table: &'a str,
    /// The IAM action, as a policy names it (`dynamodb:PutItem`).
    pub action: &'static str,
    /// Whether a failure may have been applied.
    pub effect: Effect,
}

/// What [`classify`] needs of a raw HTTP response: a refusal whose body the SDK could not
/// parse (a proxy's or a local server's page) is still recognisable by its status.
pub trait RawResponse {
    /// The HTTP status.
    fn status(&self) -> Option<u16>;
    /// The body, if it is text in memory.
    fn body_text(&self) -> Option<String>;
}

impl RawResponse for aws_sdk_dynamodb::config::http::HttpResponse {
    fn status(&self) -> Option<u16> {
        Some(self.status().as_u16())
    }

    fn body_text(&self) -> Option<String> {
        let bytes = self.body().bytes()?;
        Some(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// Maps an SDK error to the store's error. Conditional-check failures are not errors and are
/// handled by the caller before this.
pub fn classify<E, R>(context: Context<'_>, error: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: RawResponse + std::fmt::Debug + Send + Sync + 'static,
{
    let detail = error_chain(&error);
    if let SdkError::ServiceError(service) = &error {
        let (code, message) = code_and_message(service.raw(), service.err());
        return refusal(context, &code, message, &detail);
    }
    unanswered(context, &error, &detail)
}

/// The error code and message of DynamoDB's answer. AWS answers a refused permission with JSON
/// the SDK reads; some servers answer with another format, which leaves only the status and
/// the body's words.
fn code_and_message(
    raw: &impl RawResponse,
    service: &impl ProvideErrorMetadata,
) -> (String, String) {
    let code = service.code().unwrap_or_default();
    let message = service.message().unwrap_or_default();
    if code.is_empty() && raw.status() == Some(403) {
        let body = raw.body_text().unwrap_or_default();
        let message = body
            .split(['<', '>', '"'])
            .find(|part| part.contains("not authorized"))
            .unwrap_or("HTTP 403 Forbidden")
            .to_owned();
        return ("AccessDeniedException".to_owned(), message);
    }
    (code.to_owned(), message.to_owned())
}

/// What an answer with error `code` means; `detail` is the whole error's text.
fn refusal(context: Context<'_>, code: &str, message: String, detail: &str) -> StoreError {
    let store = context.store.to_owned();
    match code {
        "AccessDeniedException" => StoreError::Denied {
            store,
            action: context.action.to_owned(),
            resource: resource_of(&message)
                .unwrap_or_else(|| format!("arn:aws:dynamodb:*:*:table/{}", context.table)),
            reason: message,
        },
        "ResourceNotFoundException" => StoreError::Missing {
            store,
            reason: format!(
                "the table `{table}` does not exist in this account and region ({message}); \
                 create it with `baton init --store dynamodb://{table}`, or check AWS_REGION",
                table = context.table
            ),
        },
        code if is_refused_credentials(code) => StoreError::Unusable {
            store,
            reason: format!(
                "AWS refused the credentials ({code}: {message}); check AWS_PROFILE or \
                 AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), and that this \
                 machine's clock is within 15 minutes of the real time"
            ),
        },
        "ProvisionedThroughputExceededException"
        | "ThrottlingException"
        | "RequestLimitExceeded" => StoreError::Unavailable {
            store,
            reason: format!(
                "DynamoDB throttled the request even after retries ({code}: {message}); the \
                 table `{}` needs more capacity (on-demand billing scales by itself)",
                context.table
            ),
        },
        // The service failed while handling a write: it may have been applied.
        "InternalServerError" | "ServiceUnavailable" | "InternalFailure"
            if context.effect == Effect::Write =>
        {
            StoreError::Ambiguous {
                store,
                reason: format!("DynamoDB did not confirm the write ({code}: {message})"),
            }
        }
        "InternalServerError" | "ServiceUnavailable" | "InternalFailure" => {
            StoreError::Unavailable {
                store,
                reason: format!("DynamoDB failed ({code}: {message}); try again"),
            }
        }
        _ => StoreError::Backend {
            store,
            source: format!("{} failed: {detail}", context.action).into(),
        },
    }
}

/// Whether DynamoDB's error `code` says the credentials (or the request's signature) were
/// refused.
fn is_refused_credentials(code: &str) -> bool {
    matches!(
        code,
        "UnrecognizedClientException"
            | "InvalidSignatureException"
            | "MissingAuthenticationTokenException"
            | "MissingAuthenticationToken"
            | "IncompleteSignatureException"
            | "ExpiredTokenException"
            | "InvalidClientTokenId"
            | "SignatureDoesNotMatch"
    )
}

/// What a request that got no answer from DynamoDB means: no credentials or region to send
/// it with, a network that cannot reach the service, or (a write sent) one that may have
/// been applied.
fn unanswered<E, R>(context: Context<'_>, error: &SdkError<E, R>, detail: &str) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    let store = context.store.to_owned();
    let unusable = |reason: String| StoreError::Unusable {
        store: store.clone(),
        reason,
    };
    if let Some(problem) = credentials_problem(detail) {
        return unusable(format!(
            "{problem}; set AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, log in \
             with `aws sso login`, or run where a role provides them (GitHub OIDC, ECS, EC2)"
        ));
    }
    if is_missing_region(detail) {
        return unusable(
            "no AWS region configured; set AWS_REGION (or a region in the profile)".to_owned(),
        );
    }
    let never_sent = match error {
        SdkError::ConstructionFailure(_) => true,
        SdkError::DispatchFailure(failure) => failure.is_user() || is_connect_failure(detail),
        _ => false,
    };
    if never_sent || context.effect != Effect::Write {
        return StoreError::Unavailable {
            store,
            reason: format!(
                "cannot reach DynamoDB: {detail}; check the network, AWS_REGION and, for a \
                 local server, AWS_ENDPOINT_URL"
            ),
        };
    }
    StoreError::Ambiguous {
        store,
        reason: format!("no answer to a write: {detail}"),
    }
}

/// The resource an AccessDenied message names (`... on resource: arn:aws:dynamodb:...`).
fn resource_of(message: &str) -> Option<String> {
    let (_, rest) = message.split_once("on resource: ")?;
    let resource = rest.split_whitespace().next()?;
    Some(resource.trim_end_matches(['.', ',', ';']).to_owned())
}

/// What went wrong with the credentials, when that is why the request failed (the SDK fails
/// before sending anything).
fn credentials_problem(detail: &str) -> Option<String> {
    let lowered = detail.to_ascii_lowercase();
    if lowered.contains("no credentials") {
        // The SDK lists every provider it tried, over several lines: the names say enough.
        return Some(
            "no AWS credentials found (tried the environment, profiles, web identity, ECS and \
             EC2 instance metadata)"
                .to_owned(),
        );
    }
    if lowered.contains("loading credentials") || lowered.contains("load credentials") {
        return Some(format!("cannot load AWS credentials ({detail})"));
    }
    None
}

fn is_missing_region(detail: &str) -> bool {
    let detail = detail.to_ascii_lowercase();
    detail.contains("region") && (detail.contains("missing") || detail.contains("no region"))
}

/// Whether a dispatch failure's text shows that no connection was ever made.
fn is_connect_failure(detail: &str) -> bool {
    let detail = detail.to_ascii_lowercase();
    [
        "connection refused",
        "tcp connect error",
        "error trying to connect",
        "dns error",
        "failed to lookup address",
        "invalid peer certificate",
        "certificate",
    ]
    .iter()
    .any(|needle| detail.contains(needle))
}

/// An error and its sources, as one line, white space folded (the SDK's messages may span
/// several lines).
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    chain_text(error)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_dynamodb::operation::put_item::PutItemError;

    use super::*;

    fn context(effect: Effect) -> Context<'static> {
        Context {
            store: "dynamodb://locks",
            table: "locks",
            action: "dynamodb:PutItem",
            effect,
        }
    }

    /// A response as a test describes it: a status and a body.
    #[derive(Debug)]
    struct Raw(u16, &'static str);

    impl RawResponse for Raw {
        fn status(&self) -> Option<u16> {
            Some(self.0)
        }

        fn body_text(&self) -> Option<String> {
            Some(self.1.to_owned())
        }
    }

    fn service(code: &str, message: &str) -> SdkError<PutItemError, Raw> {
        let meta = ErrorMetadata::builder().code(code).message(message).build();
        SdkError::service_error(PutItemError::generic(meta), Raw(400, ""))
    }

    /// Each kind of failure maps to the error that says what to do, and an unanswered write is
    /// ambiguous while an unanswered read, or a request never sent, is not.
    /// `error` is of `kind` (its variant's name) and its message contains `needle`.
    fn check(error: StoreError, kind: &str, needle: &str) {
        let text = error.to_string();
        assert!(format!("{error:?}").starts_with(kind), "{error:?}");
        assert!(text.contains(needle), "{text}");
    }

    #[test]
    fn refused_permissions_name_the_action_and_the_resource() {
        check(
            classify(
                context(Effect::Write),
                service(
                    "AccessDeniedException",
                    "User: arn:aws:iam::1:user/ci is not authorized to perform: \
                     dynamodb:PutItem on resource: arn:aws:dynamodb:us-east-1:1:table/locks",
                ),
            ),
            "Denied",
            "baton needs `dynamodb:PutItem` on arn:aws:dynamodb:us-east-1:1:table/locks",
        );
        check(
            classify(
                context(Effect::Read),
                service("AccessDeniedException", "no"),
            ),
            "Denied",
            "on arn:aws:dynamodb:*:*:table/locks",
        );
        // A refusal in a body the SDK cannot read (moto answers DynamoDB calls with XML).
        let unreadable = SdkError::service_error(
            PutItemError::generic(ErrorMetadata::builder().build()),
            Raw(
                403,
                "<ErrorResponse><Errors><Error><Code>AccessDenied</Code><Message>User: \
                 arn:aws:iam::1:user/u is not authorized to perform: dynamodb:PutItem</Message>",
            ),
        );
        check(
            classify(context(Effect::Write), unreadable),
            "Denied",
            "baton needs `dynamodb:PutItem` on arn:aws:dynamodb:*:*:table/locks: User: \
             arn:aws:iam::1:user/u is not authorized",
        );
    }

    #[test]
    fn answers_say_what_happened_and_what_to_do() {
        check(
            classify(
                context(Effect::Write),
                service("ResourceNotFoundException", "Requested resource not found"),
            ),
            "Missing",
            "baton init --store dynamodb://locks",
        );
        check(
            classify(
                context(Effect::Read),
                service("UnrecognizedClientException", "bad token"),
            ),
            "Unusable",
            "AWS_PROFILE",
        );
        check(
            classify(
                context(Effect::Write),
                service("InternalServerError", "oops"),
            ),
            "Ambiguous",
            "did not confirm",
        );
        check(
            classify(
                context(Effect::Read),
                service("InternalServerError", "oops"),
            ),
            "Unavailable",
            "try again",
        );
        check(
            classify(
                context(Effect::Write),
                service("ValidationException", "bad"),
            ),
            "Backend",
            "dynamodb:PutItem failed",
        );
    }

    #[test]
    fn unanswered_requests_say_what_happened_and_what_to_do() {
        let timeout = || SdkError::<PutItemError, Raw>::timeout_error("operation timed out");
        check(
            classify(context(Effect::Write), timeout()),
            "Ambiguous",
            "no answer",
        );
        check(
            classify(context(Effect::Read), timeout()),
            "Unavailable",
            "cannot reach",
        );
        check(
            classify(context(Effect::Idempotent), timeout()),
            "Unavailable",
            "cannot reach",
        );
        let refused = SdkError::<PutItemError, Raw>::dispatch_failure(ConnectorError::io(
            "tcp connect error: Connection refused (os error 111)".into(),
        ));
        check(
            classify(context(Effect::Write), refused),
            "Unavailable",
            "AWS_ENDPOINT_URL",
        );
        let no_credentials =
            SdkError::<PutItemError, Raw>::dispatch_failure(ConnectorError::other(
                "failed to construct request: no credentials in the property bag".into(),
                None,
            ));
        check(
            classify(context(Effect::Write), no_credentials),
            "Unusable",
            "no AWS credentials found",
        );
    }

    #[test]
    fn access_denied_names_the_resource_from_the_message() {
        let message = "User: arn:aws:iam::1:user/ci is not authorized to perform: \
                       dynamodb:PutItem on resource: arn:aws:dynamodb:eu-west-1:1:table/locks \
                       because no identity-based policy allows the dynamodb:PutItem action";
        assert_eq!(
            resource_of(message).as_deref(),
            Some("arn:aws:dynamodb:eu-west-1:1:table/locks")
        );
        assert_eq!(resource_of("denied"), None);
    }
}
