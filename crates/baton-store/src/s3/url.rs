//! `s3://BUCKET[/PREFIX]`: which bucket, and under which prefix baton keeps its objects.
//!
//! Everything else (credentials, region, endpoint) comes from the AWS chain, as for the AWS CLI,
//! so the URL never holds a secret. The prefix is taken literally (no percent-decoding); without
//! one, objects go under `baton/`. Leading and trailing `/` are dropped.

use crate::url::has_scheme_and_authority;
use crate::StoreError;

use super::layout::PREFIX_MAX_BYTES;

/// The schemes of an S3 store's URL.
pub const SCHEMES: &[&str] = &["s3"];

/// Whether `url` names an S3 store (`s3://…`, any case), which [`super::S3Store::open`] takes.
pub fn is_s3_url(url: &str) -> bool {
    has_scheme_and_authority(url, SCHEMES)
}

/// The prefix when the URL gives none, so that baton's objects do not litter a bucket's root.
pub const DEFAULT_PREFIX: &str = "baton";

/// A parsed `s3://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Url {
    /// The bucket's name.
    pub bucket: String,
    /// The prefix of every object name, without leading or trailing `/`.
    pub prefix: String,
}

impl S3Url {
    /// Parses `s3://BUCKET[/PREFIX]` (the scheme in any case).
    pub fn parse(url: &str) -> Result<S3Url, StoreError> {
        let bad_url = |reason: String| StoreError::BadUrl {
            url: url.to_owned(),
            reason,
        };
        let rest = match url.split_once("://") {
            Some((_, rest)) if is_s3_url(url) => rest,
            _ => return Err(bad_url("expected `s3://BUCKET/PREFIX`".to_owned())),
        };
        if rest.contains(['?', '#']) {
            return Err(bad_url(
                "an s3:// URL takes no query or fragment: the endpoint, region and credentials \
                 come from the AWS chain (AWS_ENDPOINT_URL, AWS_REGION, AWS_PROFILE, ...)"
                    .to_owned(),
            ));
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(bad_url(
                "no bucket: expected `s3://BUCKET/PREFIX`".to_owned(),
            ));
        }
        // S3's rules (3 to 63 of a-z, 0-9, `.`, `-`) are not checked here: compatible servers
        // allow more. Only what cannot be a host name or path segment is refused.
        if bucket.contains('@') {
            return Err(bad_url(
                "an s3:// URL holds no credentials: they come from the AWS chain \
                 (AWS_ACCESS_KEY_ID, AWS_PROFILE, SSO, web identity, instance roles)"
                    .to_owned(),
            ));
        }
        if !bucket.bytes().all(|byte| {
            byte.is_ascii_alphanumeric() || byte == b'.' || byte == b'-' || byte == b'_'
        }) {
            return Err(bad_url(format!(
                "`{bucket}` is not a bucket name (letters, digits, `.`, `-`)"
            )));
        }
        let prefix = prefix.trim_matches('/');
        let prefix = if prefix.is_empty() {
            DEFAULT_PREFIX
        } else {
            prefix
        };
        if prefix.len() > PREFIX_MAX_BYTES {
            return Err(bad_url(format!(
                "the prefix is {} bytes; at most {PREFIX_MAX_BYTES} leave room for keys in S3's \
                 1,024-byte object names",
                prefix.len()
            )));
        }
        for segment in prefix.split('/') {
            if segment.is_empty() || segment == "." || segment == ".." {
                return Err(bad_url(format!(
                    "the prefix `{prefix}` has an empty, `.` or `..` segment"
                )));
            }
            if segment.chars().any(char::is_control) {
                return Err(bad_url("the prefix holds a control character".to_owned()));
            }
        }
        Ok(S3Url {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// `s3://BUCKET/PREFIX`.
    pub fn describe(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    /// The IAM resource of baton's objects: `arn:aws:s3:::BUCKET/PREFIX/*`.
    pub fn objects_arn(&self) -> String {
        format!("arn:aws:s3:::{}/{}/*", self.bucket, self.prefix)
    }

    /// The IAM resource of the bucket (what `s3:ListBucket` is granted on).
    pub fn bucket_arn(&self) -> String {
        format!("arn:aws:s3:::{}", self.bucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(url: &str) -> (String, String) {
        match S3Url::parse(url) {
            Ok(parsed) => (parsed.bucket, parsed.prefix),
            Err(error) => panic!("{url}: {error}"),
        }
    }

    fn refused(url: &str) -> String {
        match S3Url::parse(url) {
            Err(StoreError::BadUrl { reason, .. }) => reason,
            other => panic!("{url}: expected BadUrl, got {other:?}"),
        }
    }

    #[test]
    fn urls() {
        let owned = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(parsed("s3://ci-locks/baton"), owned("ci-locks", "baton"));
        assert_eq!(parsed("S3://b/a/b/"), owned("b", "a/b"));
        assert_eq!(parsed("s3://b"), owned("b", DEFAULT_PREFIX));
        assert_eq!(parsed("s3://b/"), owned("b", DEFAULT_PREFIX));
        assert_eq!(
            parsed("s3://my.bucket/p q%20"),
            owned("my.bucket", "p q%20")
        );
        assert!(refused("s3:///p").contains("no bucket"));
        assert!(refused("s3://b/p?region=x").contains("AWS chain"));
        assert!(refused("s3://key:secret@b/p").contains("credentials"));
        assert!(refused("s3://b/a//c").contains("segment"));
        assert!(refused("s3://b/a/../c").contains("segment"));
        assert!(refused("s3://b c/p").contains("bucket name"));
        assert!(refused(&format!("s3://b/{}", "p".repeat(201))).contains("1,024"));
        assert!(refused("dynamodb://t").contains("s3://"));
    }

    #[test]
    fn resources() {
        let url = S3Url::parse("s3://ci/locks/prod").ok();
        assert_eq!(
            url.as_ref().map(S3Url::objects_arn).as_deref(),
            Some("arn:aws:s3:::ci/locks/prod/*")
        );
        assert_eq!(
            url.as_ref().map(S3Url::bucket_arn).as_deref(),
            Some("arn:aws:s3:::ci")
        );
        assert_eq!(
            url.as_ref().map(S3Url::describe).as_deref(),
            Some("s3://ci/locks/prod")
        );
    }
}
