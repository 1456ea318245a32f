//! The default context: who is waiting, in words an operator recognises.

use std::env;

fn var(name: &str) -> Option<String> {
    env::var(name).ok().filter(|v| !v.is_empty())
}

/// From the CI's variables where present (GitHub Actions, CircleCI), else user@host pid N.
pub fn default_context() -> String {
    let context = if var("GITHUB_ACTIONS").is_some() {
        github()
    } else if var("CIRCLECI").is_some() {
        circleci()
    } else {
        local()
    };
    truncate(context, baton_core::limits::CONTEXT_MAX_BYTES)
}

fn github() -> String {
    let mut parts = Vec::new();
    if let Some(workflow) = var("GITHUB_WORKFLOW") {
        match var("GITHUB_RUN_NUMBER") {
            Some(run) => parts.push(format!("{workflow} #{run}")),
            None => parts.push(workflow),
        }
    }
    if let Some(job) = var("GITHUB_JOB") {
        parts.push(format!("job {job}"));
    }
    if let Some(sha) = var("GITHUB_SHA") {
        parts.push(format!("commit {}", short_sha(&sha)));
    }
    if let Some(actor) = var("GITHUB_ACTOR") {
        parts.push(format!("by {actor}"));
    }
    if let (Some(server), Some(repo), Some(run_id)) = (
        var("GITHUB_SERVER_URL"),
        var("GITHUB_REPOSITORY"),
        var("GITHUB_RUN_ID"),
    ) {
        parts.push(format!("{server}/{repo}/actions/runs/{run_id}"));
    }
    parts.join(", ")
}

fn circleci() -> String {
    let mut parts = Vec::new();
    if let Some(workflow) = var("CIRCLE_WORKFLOW_ID") {
        parts.push(format!("workflow {workflow}"));
    }
    if let Some(build) = var("CIRCLE_BUILD_NUM") {
        match var("CIRCLE_JOB") {
            Some(job) => parts.push(format!("{job} #{build}")),
            None => parts.push(format!("build #{build}")),
        }
    }
    if let Some(sha) = var("CIRCLE_SHA1") {
        parts.push(format!("commit {}", short_sha(&sha)));
    }
    if let Some(user) = var("CIRCLE_USERNAME") {
        parts.push(format!("by {user}"));
    }
    if let Some(url) = var("CIRCLE_BUILD_URL") {
        parts.push(url);
    }
    parts.join(", ")
}

fn local() -> String {
    let user = var("USER")
        .or_else(|| var("LOGNAME"))
        // SAFETY: getuid has no preconditions.
        .unwrap_or_else(|| format!("uid {}", unsafe { libc::getuid() }));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| var("HOSTNAME"))
        .unwrap_or_else(|| "localhost".into());
    format!("{user}@{host} pid {}", std::process::id())
}

fn short_sha(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// Cuts `text` to at most `max` bytes on a character boundary.
fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_characters_whole() {
        assert_eq!(truncate("héllo".into(), 2), "h");
        assert_eq!(truncate("abc".into(), 5), "abc");
    }

    #[test]
    fn short_shas() {
        assert_eq!(short_sha("0123456789abcdef"), "0123456789ab");
        assert_eq!(short_sha("abc"), "abc");
    }
}
