//! `dynamodb://TABLE`: which table, and nothing more. The region, endpoint and credentials
//! come from the AWS chain ([`crate::aws`]), so the URL never holds a secret.

use crate::url::has_scheme_and_authority;
use crate::{Result, StoreError};

/// The schemes of a DynamoDB store's URL.
pub const SCHEMES: &[&str] = &["dynamodb"];

/// Whether `url` names a DynamoDB store (`dynamodb://…`, any case).
pub fn is_dynamodb_url(url: &str) -> bool {
    has_scheme_and_authority(url, SCHEMES)
}

/// The table a `dynamodb://TABLE` URL names, checked against DynamoDB's naming rules.
pub fn parse_url(url: &str) -> Result<String> {
    let bad_url = |reason: String| StoreError::BadUrl {
        url: url.to_owned(),
        reason,
    };
    let Some((_, rest)) = url.split_once("://").filter(|_| is_dynamodb_url(url)) else {
        return Err(bad_url("expected `dynamodb://TABLE`".to_owned()));
    };
    let table = rest.strip_suffix('/').unwrap_or(rest);
    if table.contains(['/', '?', '#', '@', ':']) {
        return Err(bad_url(
            "expected `dynamodb://TABLE` and nothing more; the region, endpoint and \
             credentials come from the AWS environment (AWS_REGION, AWS_PROFILE, \
             AWS_ENDPOINT_URL)"
                .to_owned(),
        ));
    }
    let valid = (3..=255).contains(&table.len())
        && table
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"_.-".contains(&byte));
    if !valid {
        return Err(bad_url(format!(
            "`{table}` is not a DynamoDB table name: 3 to 255 characters of A-Z, a-z, 0-9, \
             `_`, `-` and `.`"
        )));
    }
    Ok(table.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_table_and_nothing_else() {
        assert!(is_dynamodb_url("dynamodb://locks"));
        assert!(is_dynamodb_url("DynamoDB://locks"));
        assert!(!is_dynamodb_url("dynamodb:locks"));
        assert!(!is_dynamodb_url("s3://bucket"));
        assert_eq!(
            parse_url("dynamodb://baton-locks").ok().as_deref(),
            Some("baton-locks")
        );
        assert_eq!(
            parse_url("dynamodb://a.b_c-1/").ok().as_deref(),
            Some("a.b_c-1")
        );
        for (url, needle) in [
            ("dynamodb://", "not a DynamoDB table name"),
            ("dynamodb://ab", "not a DynamoDB table name"),
            ("dynamodb://has space", "not a DynamoDB table name"),
            ("dynamodb://t/prefix", "nothing more"),
            ("dynamodb://t?region=x", "nothing more"),
            ("dynamodb://user@t", "nothing more"),
        ] {
            let reason = match parse_url(url) {
                Err(StoreError::BadUrl { reason, .. }) => reason,
                other => panic!("{url}: expected BadUrl, got {other:?}"),
            };
            assert!(reason.contains(needle), "{url}: {reason}");
        }
    }
}
