//! DynamoDB's errors in baton's words: what happened, and what to do about it.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

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

/// Maps an SDK error to the store's error. Conditional-check failures are not errors and are
/// handled by the caller before this.
pub fn classify<E, R>(context: Context<'_>, error: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let store = context.store.to_owned();
    let unavailable = |reason: String| StoreError::Unavailable {
        store: store.clone(),
        reason,
    };
    let detail = error_chain(&error);
    if let SdkError::ServiceError(service) = &error {
        let service = service.err();
        let code = service.code().unwrap_or_default();
        let message = service.message().unwrap_or_default().to_owned();
        return match code {
            "AccessDeniedException" => StoreError::Denied {
                store,
                action: context.action.to_owned(),
                resource: resource_of(&message).unwrap_or_else(|| {
                    format!(
                        "the table `{}` (arn:aws:dynamodb:REGION:ACCOUNT:table/{0})",
                        context.table
                    )
                }),
                reason: message,
            },
            "ResourceNotFoundException" => unavailable(format!(
                "the table `{table}` does not exist in this account and region ({message}); \
                 create it with `baton init --store dynamodb://{table}`, or check AWS_REGION",
                table = context.table
            )),
            "UnrecognizedClientException"
            | "InvalidSignatureException"
            | "MissingAuthenticationTokenException"
            | "MissingAuthenticationToken"
            | "IncompleteSignatureException"
            | "ExpiredTokenException"
            | "InvalidClientTokenId"
            | "SignatureDoesNotMatch" => unavailable(format!(
                "AWS refused the credentials ({code}: {message}); check AWS_PROFILE or \
                 AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), and that this \
                 machine's clock is within 15 minutes of the real time"
            )),
            "ProvisionedThroughputExceededException"
            | "ThrottlingException"
            | "RequestLimitExceeded" => unavailable(format!(
                "DynamoDB throttled the request even after retries ({code}: {message}); the \
                 table `{}` needs more capacity (on-demand billing scales by itself)",
                context.table
            )),
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
                unavailable(format!("DynamoDB failed ({code}: {message}); try again"))
            }
            _ => StoreError::Backend {
                store,
                source: format!("{} failed: {detail}", context.action).into(),
            },
        };
    }
    if is_missing_credentials(&detail) {
        return unavailable(format!(
            "no AWS credentials found ({detail}); set AWS_PROFILE or AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY, log in with `aws sso login`, or run where a role provides \
             them (GitHub OIDC, ECS, EC2)"
        ));
    }
    if is_missing_region(&detail) {
        return unavailable(
            "no AWS region configured; set AWS_REGION (or a region in the profile)".to_owned(),
        );
    }
    let never_sent = match &error {
        SdkError::ConstructionFailure(_) => true,
        SdkError::DispatchFailure(failure) => failure.is_user() || is_connect_failure(&detail),
        _ => false,
    };
    if never_sent || context.effect != Effect::Write {
        return unavailable(format!(
            "cannot reach DynamoDB: {detail}; check the network, AWS_REGION and, for a local \
             server, AWS_ENDPOINT_URL"
        ));
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

/// Whether the chain found no credentials (the SDK fails before sending anything).
fn is_missing_credentials(detail: &str) -> bool {
    let detail = detail.to_ascii_lowercase();
    [
        "no credentials",
        "credentials provider",
        "failed to load credentials",
    ]
    .iter()
    .any(|needle| detail.contains(needle))
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

/// An error and its sources, as one line.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

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
