//! What the S3 and DynamoDB stores share: the AWS configuration, loaded once per store from the
//! standard chain.
//!
//! Credentials and region come from `aws-config`'s default chain — the `AWS_*` variables,
//! shared config and credentials files with profiles and SSO, web identity (GitHub's and
//! GitLab's OIDC login), ECS container and EC2 instance roles — so baton runs wherever the AWS
//! CLI would. `AWS_ENDPOINT_URL` (or the service-specific `AWS_ENDPOINT_URL_S3`,
//! `AWS_ENDPOINT_URL_DYNAMODB`) points a store at an S3- or DynamoDB-compatible server; the
//! chain reads them itself.
//!
//! The HTTP client is built here rather than taken from the SDK's default, which compiles
//! aws-lc from C: rustls with ring serves as well and is already in the tree.

use std::time::Duration;

use aws_config::{BehaviorVersion, SdkConfig};

/// How long connecting to the service may take before an operation fails with a clear error
/// (the conformance suite's unreachable-server check relies on a bound).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one request may take, all retries included, before it is given up. A write given
/// up this way may still have happened: the stores report it as ambiguous.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// The AWS configuration of the environment: credentials, region, endpoint overrides.
pub async fn sdk_config() -> SdkConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let timeouts = aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_timeout(OPERATION_TIMEOUT)
        .build();
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .timeout_config(timeouts)
        .load()
        .await
}
