//! The CI providers' APIs, as the reaper asks them whether a run has ended. Where to ask and
//! with what token come only from the reaper's own environment, never from a ticket: a ticket
//! only names a run ([`baton_core::ci_run`] checks that it cannot name anything else), and no
//! redirect is followed, so the token goes to the configured API and nowhere else.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use baton_core::ci_run::CiRun;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::state::{self, RunState};

/// How long one question to a provider may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to leave a provider alone after a rate limit that did not say until when.
const QUIET_DEFAULT: Duration = Duration::from_secs(60);

/// What a provider said of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judged {
    /// Still going: its status word.
    Going(String),
    /// Over: its conclusion.
    Ended(String),
    /// Not known: why (no token, an error, a rate limit).
    Unjudged(String),
}

/// One provider's API: its base URL and the reaper's token for it.
struct Api {
    base: String,
    token: String,
}

/// The providers the reaper can ask, from its environment.
pub struct Providers {
    client: reqwest::Client,
    apis: HashMap<&'static str, Api>,
    /// Per provider: no question before this instant (a rate limit's end).
    quiet_until: Mutex<HashMap<&'static str, SystemTime>>,
}

/// Each provider: its name, the variables of its token and API base, the default base.
const PROVIDERS: [(&str, &str, &str, &str); 3] = [
    (
        "github",
        "BATON_GITHUB_TOKEN",
        "BATON_GITHUB_API_URL",
        "https://api.github.com",
    ),
    (
        "circleci",
        "BATON_CIRCLECI_TOKEN",
        "BATON_CIRCLECI_API_URL",
        "https://circleci.com/api/v2",
    ),
    (
        "gitlab",
        "BATON_GITLAB_TOKEN",
        "BATON_GITLAB_API_URL",
        "https://gitlab.com/api/v4",
    ),
];

/// The variable holding `provider`'s token.
pub fn token_variable(provider: &str) -> &'static str {
    PROVIDERS
        .iter()
        .find(|(name, ..)| *name == provider)
        .map_or("a token", |(_, token, ..)| token)
}

impl Providers {
    /// From this process's environment.
    pub fn from_env() -> Result<Providers, String> {
        Providers::from_lookup(&|name| std::env::var(name).ok())
    }

    /// From variables read through `lookup`: a provider is asked only when its token is set.
    /// An API base that is not an http(s) URL is an error, named by its variable.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Providers, String> {
        let var = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mut apis = HashMap::new();
        for (provider, token_var, url_var, default) in PROVIDERS {
            let Some(token) = var(token_var) else {
                continue;
            };
            let base = var(url_var).unwrap_or_else(|| default.to_owned());
            let base = api_base(&base).map_err(|why| format!("{url_var}: {why}"))?;
            apis.insert(provider, Api { base, token });
        }
        let client = crate::http::http_builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(ASK_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        Ok(Providers {
            client,
            apis,
            quiet_until: Mutex::new(HashMap::new()),
        })
    }

    /// The providers that have a token, by name.
    pub fn configured(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self.apis.keys().copied().collect();
        names.sort_unstable();
        names
    }

    /// Asks `run`'s provider whether it has ended.
    pub async fn judge(&self, run: &CiRun) -> Judged {
        let provider = run.provider();
        let Some(api) = self.apis.get(provider) else {
            let var = token_variable(provider);
            return Judged::Unjudged(format!("{var} is not set, so {provider} cannot be asked"));
        };
        if let Some(until) = self.quiet(provider) {
            return Judged::Unjudged(format!(
                "{provider} rate-limited the reaper until {}",
                crate::status::rfc3339(wall_ms(until))
            ));
        }
        let response = match self.request(api, run).send().await {
            Ok(response) => response,
            Err(error) => {
                let chain = crate::http::error_chain(&error);
                return Judged::Unjudged(format!("cannot ask {provider} at {}: {chain}", api.base));
            }
        };
        let status = response.status().as_u16();
        if let Some(until) = limited_until(status, response.headers(), SystemTime::now()) {
            self.set_quiet(provider, until);
            return Judged::Unjudged(format!(
                "{provider} rate-limited the reaper (HTTP {status}) until {}",
                crate::status::rfc3339(wall_ms(until))
            ));
        }
        if let Some(why) = refused(provider, status) {
            return Judged::Unjudged(why);
        }
        let Ok(body) = response.json::<Value>().await else {
            return Judged::Unjudged(format!("{provider} answered with no JSON"));
        };
        let state = match run {
            CiRun::Github { .. } => state::github(&body),
            CiRun::Circleci { .. } => state::circleci(&body),
            CiRun::Gitlab { .. } => state::gitlab(&body),
        };
        match state {
            Some(RunState::Going(status)) => Judged::Going(status),
            Some(RunState::Ended(conclusion)) => Judged::Ended(conclusion),
            None => Judged::Unjudged(format!("{provider}'s answer has no status")),
        }
    }

    /// The question about `run`, with the provider's token in the header its API reads.
    fn request(&self, api: &Api, run: &CiRun) -> reqwest::RequestBuilder {
        let base = &api.base;
        match run {
            CiRun::Github {
                repository,
                run_id,
                attempt,
            } => self
                .client
                .get(format!(
                    "{base}/repos/{repository}/actions/runs/{run_id}/attempts/{attempt}"
                ))
                .bearer_auth(&api.token)
                .header("Accept", "application/vnd.github+json")
                .header("X-GitHub-Api-Version", "2022-11-28"),
            CiRun::Circleci { workflow_id } => self
                .client
                .get(format!("{base}/workflow/{workflow_id}"))
                .header("Circle-Token", &api.token)
                .header("Accept", "application/json"),
            CiRun::Gitlab {
                project_id,
                pipeline_id,
            } => self
                .client
                .get(format!(
                    "{base}/projects/{project_id}/pipelines/{pipeline_id}"
                ))
                .header("PRIVATE-TOKEN", &api.token),
        }
    }

    fn quiet(&self, provider: &'static str) -> Option<SystemTime> {
        let quiet = self.quiet_until.lock().ok()?;
        quiet
            .get(provider)
            .copied()
            .filter(|until| *until > SystemTime::now())
    }

    fn set_quiet(&self, provider: &'static str, until: SystemTime) {
        if let Ok(mut quiet) = self.quiet_until.lock() {
            quiet.insert(provider, until);
        }
    }
}

/// An API base as configured: an http(s) URL without query or fragment, without its trailing
/// slash.
fn api_base(text: &str) -> Result<String, String> {
    let url =
        reqwest::Url::parse(text.trim()).map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("{text:?} is not an http(s) URL"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{text:?} has a query or a fragment"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// Why a non-200 answer judges nothing, or `None` for a 200.
fn refused(provider: &str, status: u16) -> Option<String> {
    let var = token_variable(provider);
    match status {
        200 => None,
        401 | 403 => Some(format!("{provider} refused {var} (HTTP {status})")),
        404 => Some(format!(
            "{provider} knows no such run, or {var} cannot see it (HTTP 404)"
        )),
        _ => Some(format!("{provider} answered HTTP {status}")),
    }
}

/// Until when a provider asked to be left alone, if this answer is a rate limit: a 429, or a
/// 403 that says so (GitHub: `x-ratelimit-remaining: 0`, or a `retry-after`). `retry-after`
/// (seconds) first, then the reset time (`x-ratelimit-reset`, GitLab's `ratelimit-reset`: Unix
/// seconds), else a minute.
fn limited_until(status: u16, headers: &HeaderMap, now: SystemTime) -> Option<SystemTime> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let retry_after = number("retry-after").map(|secs| now + Duration::from_secs(secs));
    let reset = number("x-ratelimit-reset")
        .or_else(|| number("ratelimit-reset"))
        .map(|secs| UNIX_EPOCH + Duration::from_secs(secs));
    let exhausted = number("x-ratelimit-remaining") == Some(0);
    let limited = status == 429 || (status == 403 && (exhausted || retry_after.is_some()));
    limited.then(|| {
        retry_after
            .or(reset)
            .unwrap_or(now + QUIET_DEFAULT)
            .max(now)
    })
}

fn wall_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn rate_limits_are_told_apart_from_refusals() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let in_30s = now + Duration::from_secs(30);
        assert_eq!(
            limited_until(429, &headers(&[("retry-after", "30")]), now),
            Some(in_30s)
        );
        let github = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1030"),
        ]);
        assert_eq!(limited_until(403, &github, now), Some(in_30s));
        let gitlab = headers(&[("ratelimit-reset", "1030")]);
        assert_eq!(limited_until(429, &gitlab, now), Some(in_30s));
        assert_eq!(
            limited_until(429, &HeaderMap::new(), now),
            Some(now + QUIET_DEFAULT)
        );
        // A 403 that is no rate limit is a refused token, judged by `refused`.
        let refused_token = headers(&[("x-ratelimit-remaining", "4999")]);
        assert_eq!(limited_until(403, &refused_token, now), None);
        assert_eq!(limited_until(200, &github, now), None);
    }

    #[test]
    fn api_bases_are_http_urls_without_query() {
        assert_eq!(
            api_base("https://api.github.com/").as_deref(),
            Ok("https://api.github.com")
        );
        assert_eq!(
            api_base("http://127.0.0.1:8080/api/v4").as_deref(),
            Ok("http://127.0.0.1:8080/api/v4")
        );
        for bad in [
            "api.github.com",
            "ftp://x",
            "https://x/?a=1",
            "https://x/#f",
            "",
        ] {
            assert!(api_base(bad).is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn a_provider_without_a_token_is_not_asked() {
        let providers = Providers::from_lookup(&|name| {
            (name == "BATON_GITLAB_TOKEN").then(|| "glpat-x".to_owned())
        })
        .unwrap();
        assert_eq!(providers.configured(), vec!["gitlab"]);
        let bad = Providers::from_lookup(&|name| match name {
            "BATON_GITHUB_TOKEN" => Some("t".into()),
            "BATON_GITHUB_API_URL" => Some("not a url".into()),
            _ => None,
        });
        let error = bad.err().unwrap_or_default();
        assert!(error.starts_with("BATON_GITHUB_API_URL: "), "{error}");
    }
}
