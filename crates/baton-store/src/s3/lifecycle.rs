//! `baton init` on S3: the bucket lifecycle rule that expires old history.
//!
//! baton never deletes an object on S3 (it asks for no delete permission), so a key's history
//! would grow for ever; S3 itself expires it, by a lifecycle rule on `P/history/` that `baton
//! init` sets or checks, with `history_max_age` rounded up to whole days (S3 counts days). The
//! rule covers the history prefix only: a rule on `P/hot/` would delete keys' documents and
//! their fence counters, which must never happen.
//!
//! - The bucket has no lifecycle configuration: `init` puts one holding baton's rule (needs
//!   `s3:PutLifecycleConfiguration`).
//! - It has one with a rule expiring exactly the history prefix: `init` reports it.
//! - It has one without: `init` leaves it alone (replacing a bucket's configuration would drop
//!   the owner's rules) and says which rule to add, in words and as the XML.
//!
//! object_store has no call for a bucket's configuration, so this module signs its two
//! requests itself with `aws-sigv4` (already in the tree through the AWS SDK) and sends them
//! with reqwest (already in the tree through object_store).

use std::time::{Duration, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;

/// The ID of baton's rule.
pub const RULE_ID: &str = "baton-history-expiry";

/// Where a bucket's lifecycle configuration is, and how to sign for it.
#[derive(Clone, Debug)]
pub struct Target {
    /// `https://BUCKET.s3.REGION.amazonaws.com`, or `ENDPOINT/BUCKET` (path style).
    pub bucket_url: String,
    /// The region requests are signed for.
    pub region: String,
    /// The credential chain (`None`: requests go unsigned, as to a local test server).
    pub credentials: Option<SharedCredentialsProvider>,
}

/// What `init` found or did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Baton's rule (or one like it) expires the history prefix.
    InPlace {
        /// The rule's ID.
        id: String,
        /// After how many days.
        days: u64,
    },
    /// The bucket had no lifecycle configuration: baton's rule was put.
    Set {
        /// After how many days history expires.
        days: u64,
    },
    /// The bucket has other rules and none for the history prefix: nothing changed.
    Missing {
        /// The rule to add, as XML.
        rule_xml: String,
    },
}

/// A failure: which call, the HTTP status if there was one, and what came back.
#[derive(Debug)]
pub struct Failure {
    /// `s3:GetLifecycleConfiguration` or `s3:PutLifecycleConfiguration`.
    pub action: &'static str,
    /// The HTTP status, when the server answered.
    pub status: Option<u16>,
    /// What went wrong.
    pub reason: String,
}

/// Whole days for `age`, at least 1 (S3's smallest expiration).
pub fn days(age: Duration) -> u64 {
    age.as_secs().div_ceil(24 * 3600).max(1)
}

/// Sets or checks the rule expiring `history_prefix` after `days`.
pub async fn ensure(target: &Target, history_prefix: &str, days: u64) -> Result<Outcome, Failure> {
    const GET: &str = "s3:GetLifecycleConfiguration";
    const PUT: &str = "s3:PutLifecycleConfiguration";
    let (status, body) = send(target, "GET", &[], GET).await?;
    match status {
        200 => Ok(match rule_for(&body, history_prefix) {
            Some((id, days)) => Outcome::InPlace { id, days },
            None => Outcome::Missing {
                rule_xml: rule_xml(history_prefix, days),
            },
        }),
        404 if body.contains("NoSuchLifecycleConfiguration") => {
            let configuration = format!(
                "<LifecycleConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">{}\
                 </LifecycleConfiguration>",
                rule_xml(history_prefix, days)
            );
            let (status, body) = send(target, "PUT", configuration.as_bytes(), PUT).await?;
            if (200..300).contains(&status) {
                Ok(Outcome::Set { days })
            } else {
                Err(failure(PUT, status, &body))
            }
        }
        _ => Err(failure(GET, status, &body)),
    }
}

/// Baton's rule, as the XML a lifecycle configuration holds.
pub fn rule_xml(history_prefix: &str, days: u64) -> String {
    format!(
        "<Rule><ID>{RULE_ID}</ID><Filter><Prefix>{}</Prefix></Filter><Status>Enabled</Status>\
         <Expiration><Days>{days}</Days></Expiration></Rule>",
        escape(history_prefix)
    )
}

/// The enabled rule of `configuration` that expires exactly `history_prefix`, by days: its ID
/// and days. A plain reading of S3's XML (rules, their prefix, status and days), enough to
/// recognise a rule; anything else is "not found", and `init` then says what to add.
fn rule_for(configuration: &str, history_prefix: &str) -> Option<(String, u64)> {
    let wanted = escape(history_prefix);
    configuration.split("<Rule>").skip(1).find_map(|rest| {
        let rule = rest.split("</Rule>").next()?;
        let prefix = element(rule, "Prefix").unwrap_or_default();
        let enabled = element(rule, "Status") == Some("Enabled");
        let days = element(element(rule, "Expiration")?, "Days")?
            .parse()
            .ok()?;
        (prefix == wanted && enabled).then(|| (element(rule, "ID").unwrap_or("").to_owned(), days))
    })
}

/// The text of the first `<name>…</name>` in `xml`.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let start = xml.find(&format!("<{name}>"))? + name.len() + 2;
    let end = xml[start..].find(&format!("</{name}>"))?;
    Some(&xml[start..start + end])
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn failure(action: &'static str, status: u16, body: &str) -> Failure {
    let code = element(body, "Code").unwrap_or("no error code");
    let message = element(body, "Message").unwrap_or("");
    Failure {
        action,
        status: Some(status),
        reason: format!("HTTP {status} {code} {message}").trim().to_owned(),
    }
}

/// Sends one signed request to `?lifecycle`; the status and the body.
async fn send(
    target: &Target,
    method: &str,
    body: &[u8],
    action: &'static str,
) -> Result<(u16, String), Failure> {
    let fail = |reason: String| Failure {
        action,
        status: None,
        reason,
    };
    let url = format!("{}?lifecycle", target.bucket_url);
    let host = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap_or_default()
        .to_owned();
    let md5 = content_md5(body);
    let mut headers: Vec<(&str, &str)> = vec![("host", host.as_str())];
    if method == "PUT" {
        headers.push(("content-md5", md5.as_str()));
    }
    let mut request = http_client()
        .map_err(fail)?
        .request(
            method
                .parse()
                .map_err(|_| fail(format!("bad method {method}")))?,
            &url,
        )
        .body(body.to_vec());
    for (name, value) in &headers {
        if *name != "host" {
            request = request.header(*name, *value);
        }
    }
    if let Some(provider) = &target.credentials {
        let signed = signed_headers(provider, &target.region, method, &url, &headers, body)
            .await
            .map_err(fail)?;
        for (name, value) in signed {
            request = request.header(name, value);
        }
    }
    let response = request
        .send()
        .await
        .map_err(|e| fail(crate::error::chain_text(&e)))?;
    let status = response.status().as_u16();
    let text = response
        .text()
        .await
        .map_err(|e| fail(crate::error::chain_text(&e)))?;
    Ok((status, text))
}

/// The headers that sign a request of `method` to `url` with `headers` and `body` for S3 in
/// `region` (SigV4, with the payload's SHA-256), with the credentials `provider` gives.
async fn signed_headers(
    provider: &SharedCredentialsProvider,
    region: &str,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Vec<(String, String)>, String> {
    let credentials = provider
        .provide_credentials()
        .await
        .map_err(|e| format!("no AWS credentials: {e}"))?;
    let identity = credentials.into();
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .map_err(|e| format!("cannot sign: {e}"))?
        .into();
    let signable = SignableRequest::new(
        method,
        url,
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| format!("cannot sign: {e}"))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| format!("cannot sign: {e}"))?
        .into_parts();
    Ok(instructions
        .headers()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect())
}

/// The Content-MD5 S3 requires on a lifecycle configuration: base64 of the body's MD5.
fn content_md5(body: &[u8]) -> String {
    use base64::Engine;
    use md5::Digest;
    base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(body))
}

fn http_client() -> Result<reqwest::Client, String> {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    reqwest::Client::builder()
        .connect_timeout(crate::aws::CONNECT_TIMEOUT)
        .timeout(crate::aws::OPERATION_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_is_read_for_the_rule_that_expires_the_history_prefix() {
        let ours = format!(
            "<LifecycleConfiguration>{}<Rule><ID>x</ID><Filter><Prefix>logs/</Prefix></Filter>\
             <Status>Enabled</Status><Expiration><Days>7</Days></Expiration></Rule>\
             </LifecycleConfiguration>",
            rule_xml("b/history/", 90)
        );
        assert_eq!(
            rule_for(&ours, "b/history/"),
            Some((RULE_ID.to_owned(), 90))
        );
        assert_eq!(rule_for(&ours, "other/history/"), None);
        let disabled = ours.replace("Enabled", "Disabled");
        assert_eq!(rule_for(&disabled, "b/history/"), None);
        assert_eq!(rule_for("<LifecycleConfiguration/>", "b/history/"), None);
        assert!(rule_xml("a&b/history/", 1).contains("a&amp;b/history/"));
    }

    #[test]
    fn ages_become_whole_days_of_at_least_one() {
        assert_eq!(days(Duration::from_secs(1)), 1);
        assert_eq!(days(Duration::from_secs(24 * 3600)), 1);
        assert_eq!(days(Duration::from_secs(24 * 3600 + 1)), 2);
        assert_eq!(days(Duration::from_secs(90 * 24 * 3600)), 90);
    }
}
