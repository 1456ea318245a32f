//! aws-config's credentials, handed to object_store.
//!
//! object_store has a credential chain of its own, but it lacks what CI users rely on (SSO
//! profiles, `credential_process`, the shared files' profiles); aws-config's chain is the one
//! the AWS CLI uses and the DynamoDB store shares. This adapter asks that chain when object_store
//! needs a credential, and keeps the answer until five minutes before it expires, so a
//! long-running holder renews through role sessions (web identity, SSO, instance roles) without
//! a request ever carrying a stale credential. Concurrent requests share one refresh.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use object_store::aws::AwsCredential;
use object_store::CredentialProvider;

/// How long before its expiry a credential is refreshed.
const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// What the chain looks at, for the error when it found nothing.
pub const CHAIN_SOURCES: &str = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile \
    (AWS_PROFILE, ~/.aws/config and ~/.aws/credentials, SSO, credential_process), web identity \
    (AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, as GitHub's OIDC login sets), a container \
    role (ECS, EKS pod identity) or an EC2 instance role";

/// Why no credential could be had: object_store carries it as the source of its error, where
/// the store's error mapping finds it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoCredentials(pub String);

/// An object_store [`CredentialProvider`] on aws-config's chain, with a cache.
#[derive(Debug)]
pub struct ChainCredentials {
    /// `None` when the configuration has no provider at all.
    provider: Option<SharedCredentialsProvider>,
    /// The last credential and when it expires (`None`: never, as for static keys). An async
    /// mutex, held across a refresh, so concurrent requests wait for one refresh.
    cached: tokio::sync::Mutex<Option<(Arc<AwsCredential>, Option<SystemTime>)>>,
}

impl ChainCredentials {
    /// An adapter over `provider` (from `SdkConfig::credentials_provider`).
    pub fn new(provider: Option<SharedCredentialsProvider>) -> ChainCredentials {
        ChainCredentials {
            provider,
            cached: tokio::sync::Mutex::new(None),
        }
    }
}

fn no_credentials(reason: String) -> object_store::Error {
    object_store::Error::Generic {
        store: "S3",
        source: Box::new(NoCredentials(reason)),
    }
}

#[async_trait]
impl CredentialProvider for ChainCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let mut cached = self.cached.lock().await;
        if let Some((credential, expiry)) = cached.as_ref() {
            let fresh = expiry.is_none_or(|expiry| {
                expiry
                    .checked_sub(REFRESH_BEFORE)
                    .is_some_and(|refresh_at| SystemTime::now() < refresh_at)
            });
            if fresh {
                return Ok(Arc::clone(credential));
            }
        }
        let Some(provider) = &self.provider else {
            return Err(no_credentials(format!(
                "no AWS credentials: the configuration has no credential chain; set {CHAIN_SOURCES}"
            )));
        };
        let credentials = provider
            .provide_credentials()
            .await
            .map_err(|error| no_credentials(describe(&error)))?;
        let credential = Arc::new(AwsCredential {
            key_id: credentials.access_key_id().to_owned(),
            secret_key: credentials.secret_access_key().to_owned(),
            token: credentials.session_token().map(str::to_owned),
        });
        *cached = Some((Arc::clone(&credential), credentials.expiry()));
        Ok(credential)
    }
}

/// The chain's error in words that say what to do: its own `Display` is one vague line ("the
/// credential provider was not enabled"), with the detail in its sources.
fn describe(error: &CredentialsError) -> String {
    let mut detail = String::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        // One line: the chain lists each provider it tried on a line of its own.
        let mut separator = ": ";
        for line in cause.to_string().lines().map(str::trim) {
            if line.is_empty() {
                continue;
            }
            detail.push_str(separator);
            detail.push_str(line);
            separator = if line.ends_with(':') { " " } else { "; " };
        }
        source = cause.source();
    }
    match error {
        CredentialsError::CredentialsNotLoaded(_) => format!(
            "no AWS credentials found{detail}; baton looks where the AWS CLI does: \
             {CHAIN_SOURCES}"
        ),
        CredentialsError::ProviderTimedOut(_) => format!(
            "loading AWS credentials timed out ({error}){detail}; check the profile, SSO login \
             or instance role"
        ),
        CredentialsError::InvalidConfiguration(_) => {
            format!("the AWS configuration is invalid{detail}; check AWS_PROFILE and ~/.aws/config")
        }
        _ => format!("cannot load AWS credentials ({error}){detail}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_credentials_is_one_line_naming_the_sources() {
        let error = CredentialsError::not_loaded(
            "no credentials found in chain. Attempted:\n  Environment: not set\n  Profile: none\n",
        );
        let message = describe(&error);
        assert!(!message.contains('\n'), "{message}");
        assert!(
            message.contains("Attempted: Environment: not set; Profile: none"),
            "{message}"
        );
        assert!(
            message.contains("AWS_ACCESS_KEY_ID")
                && message.contains("AWS_WEB_IDENTITY_TOKEN_FILE"),
            "{message}"
        );
    }
}
