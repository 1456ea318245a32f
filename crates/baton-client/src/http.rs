//! The HTTP client's settings, shared by notification deliveries and the transport to
//! `baton serve` (and by the server's fetches of an OIDC issuer's keys): baton's user agent,
//! rustls with ring, and errors told with their causes.

use std::time::Duration;

/// An HTTP client whose requests time out after `timeout` (deliveries; the transport to
/// `baton serve`).
pub(crate) fn http_client(timeout: Duration) -> Result<reqwest::Client, String> {
    http_builder()
        .timeout(timeout)
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))
}

/// An HTTP client's settings before its timeouts: baton's user agent, rustls.
pub fn http_builder() -> reqwest::ClientBuilder {
    // rustls needs a crypto provider; ring is already in the tree.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    reqwest::Client::builder().user_agent(concat!("baton/", env!("CARGO_PKG_VERSION")))
}

/// An error and each of its sources, in one line (`reqwest` hides the cause of a failed
/// connection in its source chain).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    text
}
