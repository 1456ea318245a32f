//! Building an [`S3Store`] from its URL and the AWS configuration: what its messages call it,
//! the two S3 clients (reads retried, conditional writes never) sharing one connection pool
//! and one clock, and where `baton init` finds the bucket's lifecycle configuration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::SdkConfig;
use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store::client::{HttpClient, HttpConnector};
use object_store::{BackoffConfig, ClientOptions, RetryConfig};

use super::clock::{self, DateConnector};
use super::credentials::ChainCredentials;
use super::errors::Context;
use super::layout::Layout;
use super::{lifecycle, Inner, S3Store, S3Url};
use crate::server_clock::ServerClock;
use crate::{Result, StoreError};

/// Hands the same HTTP client to every `AmazonS3` built with it, so that reads and writes share
/// one connection pool (a warm client's write then needs no new connection) and record every
/// response's `Date` in one clock.
#[derive(Debug)]
struct SharedClient(HttpClient);

impl HttpConnector for SharedClient {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(self.0.clone())
    }
}

/// What both S3 clients of a store are built from; they differ only in their retries.
struct ClientParts<'a> {
    url: &'a S3Url,
    region: &'a str,
    /// The S3-compatible server's endpoint, without a trailing `/`; `None` for AWS.
    endpoint: Option<&'a str>,
    options: ClientOptions,
    http: HttpClient,
    credentials: Arc<ChainCredentials>,
}

impl S3Store {
    /// The store on `url` with `config`'s credentials and region, at `endpoint` (AWS itself
    /// when `None`), its history expiring after `history_max_age`.
    pub(super) fn build(
        url: S3Url,
        config: &SdkConfig,
        endpoint: Option<String>,
        history_max_age: Duration,
    ) -> Result<S3Store> {
        let region = config
            .region()
            .map(|region| region.to_string())
            .unwrap_or_else(|| "us-east-1".to_owned());
        let endpoint = endpoint.map(|endpoint| endpoint.trim_end_matches('/').to_owned());
        let context = context(&url, endpoint.as_deref(), &region);
        let unusable = |reason: String| StoreError::Unusable {
            store: context.store.clone(),
            reason,
        };
        let options = ClientOptions::new()
            .with_connect_timeout(crate::aws::CONNECT_TIMEOUT)
            .with_timeout(crate::aws::OPERATION_TIMEOUT)
            .with_allow_http(plain_http(endpoint.as_deref()).map_err(unusable)?);
        let clock = Arc::new(ServerClock::new(clock::EPOCH));
        let http = DateConnector::new(Arc::clone(&clock))
            .connect(&options)
            .map_err(|error| unusable(format!("cannot set up the HTTP client: {error}")))?;
        let parts = ClientParts {
            url: &url,
            region: &region,
            endpoint: endpoint.as_deref(),
            options,
            http,
            credentials: Arc::new(ChainCredentials::new(config.credentials_provider())),
        };
        let reads = parts.client(read_retries()).map_err(unusable)?;
        let writes = parts
            .client(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .map_err(unusable)?;
        let lifecycle = lifecycle::Target {
            bucket_url: bucket_url(&url, endpoint.as_deref(), &region),
            region,
            credentials: config.credentials_provider(),
        };
        Ok(S3Store {
            inner: Arc::new(Inner {
                reads,
                writes,
                layout: Layout::new(&url.prefix),
                context,
                cache: Mutex::new(HashMap::new()),
                clock,
                lifecycle,
                history_max_age,
            }),
        })
    }
}

impl ClientParts<'_> {
    /// An S3 client with `retry`; the message says why it could not be built.
    fn client(&self, retry: RetryConfig) -> std::result::Result<AmazonS3, String> {
        let builder = AmazonS3Builder::new()
            .with_bucket_name(&self.url.bucket)
            .with_region(self.region)
            .with_credentials(self.credentials.clone())
            .with_client_options(self.options.clone())
            .with_http_connector(SharedClient(self.http.clone()))
            .with_retry(retry)
            .with_conditional_put(S3ConditionalPut::ETagMatch);
        let builder = match self.endpoint {
            // S3-compatible servers are addressed path-style: `ENDPOINT/BUCKET/NAME`.
            Some(endpoint) => builder
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false),
            // AWS virtual-host style, except for bucket names with dots, which break TLS
            // there (the certificate covers one label).
            None => builder.with_virtual_hosted_style_request(!self.url.bucket.contains('.')),
        };
        builder
            .build()
            .map_err(|error| format!("cannot set up the S3 client: {error}"))
    }
}

/// How reads (GET, LIST, and the PUTs of history entries, which are idempotent) are retried:
/// at most 3 times, within 5 s.
fn read_retries() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: Duration::from_secs(5),
    }
}

/// What the store's messages say about it: its name, bucket, endpoint (without credentials)
/// and the ARNs a policy must allow.
fn context(url: &S3Url, endpoint: Option<&str>, region: &str) -> Context {
    let shown_endpoint = match endpoint {
        Some(endpoint) => without_userinfo(endpoint),
        None => format!("https://s3.{region}.amazonaws.com"),
    };
    Context {
        store: format!("{} at {shown_endpoint}", url.describe()),
        bucket: url.bucket.clone(),
        endpoint: shown_endpoint,
        objects_arn: url.objects_arn(),
        bucket_arn: url.bucket_arn(),
    }
}

/// Whether `endpoint` is plain HTTP (AWS never is); an endpoint of another scheme is refused
/// with the reason.
fn plain_http(endpoint: Option<&str>) -> std::result::Result<bool, String> {
    match endpoint {
        Some(endpoint) if endpoint.starts_with("http://") => Ok(true),
        Some(endpoint) if endpoint.starts_with("https://") => Ok(false),
        Some(endpoint) => Err(format!(
            "the endpoint `{}` is not an http:// or https:// URL; check AWS_ENDPOINT_URL",
            without_userinfo(endpoint)
        )),
        None => Ok(false),
    }
}

/// The bucket's URL, where its lifecycle configuration is read and written.
fn bucket_url(url: &S3Url, endpoint: Option<&str>, region: &str) -> String {
    match endpoint {
        Some(endpoint) => format!("{endpoint}/{}", url.bucket),
        None if url.bucket.contains('.') => {
            format!("https://s3.{region}.amazonaws.com/{}", url.bucket)
        }
        None => format!("https://{}.s3.{region}.amazonaws.com", url.bucket),
    }
}

/// `endpoint` without `user:password@`, for messages.
fn without_userinfo(endpoint: &str) -> String {
    let Some((scheme, rest)) = endpoint.split_once("://") else {
        return endpoint.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => endpoint.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_shown_without_credentials() {
        assert_eq!(
            without_userinfo("http://user:secret@127.0.0.1:9000"),
            "http://127.0.0.1:9000"
        );
        assert_eq!(
            without_userinfo("http://127.0.0.1:9000"),
            "http://127.0.0.1:9000"
        );
        assert_eq!(without_userinfo("https://h/path@x"), "https://h/path@x");
    }
}
