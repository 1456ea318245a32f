//! The default context: who is waiting, in words an operator recognises.

use std::env;

/// From the CI's variables where present (GitHub Actions, CircleCI, GitLab CI, Buildkite), else
/// user@host pid N.
pub fn default_context() -> String {
    context_from(&|name| env::var(name).ok())
}

/// The default context, with variables read through `lookup` (tests pass a table).
fn context_from(lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
    let context = if var("GITHUB_ACTIONS").is_some() {
        github(&var)
    } else if var("CIRCLECI").is_some() {
        circleci(&var)
    } else if var("GITLAB_CI").is_some() {
        gitlab(&var)
    } else if var("BUILDKITE").is_some() {
        buildkite(&var)
    } else {
        local(&var)
    };
    truncate(context, baton_core::limits::CONTEXT_MAX_BYTES)
}

fn github(var: &dyn Fn(&str) -> Option<String>) -> String {
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

fn circleci(var: &dyn Fn(&str) -> Option<String>) -> String {
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

/// `{project} pipeline #{id}, job {name}, commit {sha}, by {login}, {job URL}`: the pipeline's
/// global id, which its URL (`/-/pipelines/ID`) names.
fn gitlab(var: &dyn Fn(&str) -> Option<String>) -> String {
    let mut parts = Vec::new();
    match (var("CI_PROJECT_PATH"), var("CI_PIPELINE_ID")) {
        (Some(project), Some(pipeline)) => parts.push(format!("{project} pipeline #{pipeline}")),
        (Some(project), None) => parts.push(project),
        (None, Some(pipeline)) => parts.push(format!("pipeline #{pipeline}")),
        (None, None) => {}
    }
    if let Some(job) = var("CI_JOB_NAME") {
        parts.push(format!("job {job}"));
    }
    if let Some(sha) = var("CI_COMMIT_SHA") {
        parts.push(format!("commit {}", short_sha(&sha)));
    }
    if let Some(user) = var("GITLAB_USER_LOGIN") {
        parts.push(format!("by {user}"));
    }
    if let Some(url) = var("CI_JOB_URL") {
        parts.push(url);
    }
    parts.join(", ")
}

/// `{pipeline} #{build}, step {label}, commit {sha}, by {creator}, {build URL}`; the step's
/// key where it has no label.
fn buildkite(var: &dyn Fn(&str) -> Option<String>) -> String {
    let mut parts = Vec::new();
    match (
        var("BUILDKITE_PIPELINE_SLUG"),
        var("BUILDKITE_BUILD_NUMBER"),
    ) {
        (Some(pipeline), Some(build)) => parts.push(format!("{pipeline} #{build}")),
        (Some(pipeline), None) => parts.push(pipeline),
        (None, Some(build)) => parts.push(format!("build #{build}")),
        (None, None) => {}
    }
    if let Some(step) = var("BUILDKITE_LABEL").or_else(|| var("BUILDKITE_STEP_KEY")) {
        parts.push(format!("step {step}"));
    }
    if let Some(sha) = var("BUILDKITE_COMMIT") {
        parts.push(format!("commit {}", short_sha(&sha)));
    }
    if let Some(creator) = var("BUILDKITE_BUILD_CREATOR") {
        parts.push(format!("by {creator}"));
    }
    if let Some(url) = var("BUILDKITE_BUILD_URL") {
        parts.push(url);
    }
    parts.join(", ")
}

fn local(var: &dyn Fn(&str) -> Option<String>) -> String {
    let user = var("USER")
        .or_else(|| var("LOGNAME"))
        .or_else(account_name)
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

/// The name of this process's user in the password database: a container or a cron job often
/// runs without `$USER`, and `uid 0` tells an operator less than `root`.
fn account_name() -> Option<String> {
    let mut buffer = vec![0 as libc::c_char; 4096];
    // SAFETY: a zeroed passwd is a valid value for getpwuid_r to fill.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to a live local of the size given; getuid has no preconditions.
    let status = unsafe {
        libc::getpwuid_r(
            libc::getuid(),
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if status != 0 || found.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points to a NUL-terminated string inside `buffer`.
    let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
    Some(name.to_string_lossy().into_owned()).filter(|n| !n.is_empty())
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
    fn without_user_variables_the_account_is_named() {
        let context = context_from(&lookup(&[]));
        let account = account_name().expect("this test's user is in the password database");
        assert!(context.starts_with(&format!("{account}@")), "{context}");
    }

    #[test]
    fn truncation_keeps_characters_whole() {
        assert_eq!(truncate("héllo".into(), 2), "h");
        assert_eq!(truncate("abc".into(), 5), "abc");
    }

    fn lookup(table: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            table
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn github_actions() {
        let context = context_from(&lookup(&[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_WORKFLOW", "deploy"),
            ("GITHUB_RUN_NUMBER", "42"),
            ("GITHUB_JOB", "prod"),
            ("GITHUB_SHA", "0123456789abcdef0123"),
            ("GITHUB_ACTOR", "ada"),
            ("GITHUB_SERVER_URL", "https://github.com"),
            ("GITHUB_REPOSITORY", "acme/app"),
            ("GITHUB_RUN_ID", "99"),
        ]));
        assert_eq!(
            context,
            "deploy #42, job prod, commit 0123456789ab, by ada, \
             https://github.com/acme/app/actions/runs/99"
        );
    }

    #[test]
    fn circleci() {
        let context = context_from(&lookup(&[
            ("CIRCLECI", "true"),
            ("CIRCLE_WORKFLOW_ID", "wf-1"),
            ("CIRCLE_JOB", "deploy"),
            ("CIRCLE_BUILD_NUM", "7"),
            ("CIRCLE_SHA1", "fedcba9876543210"),
            ("CIRCLE_USERNAME", "grace"),
        ]));
        assert_eq!(
            context,
            "workflow wf-1, deploy #7, commit fedcba987654, by grace"
        );
    }

    #[test]
    fn gitlab_ci() {
        let context = context_from(&lookup(&[
            ("GITLAB_CI", "true"),
            ("CI_PROJECT_PATH", "acme/app"),
            ("CI_PIPELINE_ID", "5120"),
            ("CI_JOB_NAME", "deploy"),
            ("CI_COMMIT_SHA", "00112233445566778899"),
            ("GITLAB_USER_LOGIN", "hopper"),
            ("CI_JOB_URL", "https://gitlab.com/acme/app/-/jobs/88"),
        ]));
        assert_eq!(
            context,
            "acme/app pipeline #5120, job deploy, commit 001122334455, by hopper, \
             https://gitlab.com/acme/app/-/jobs/88"
        );
        let bare = context_from(&lookup(&[("GITLAB_CI", "true"), ("CI_PIPELINE_ID", "7")]));
        assert_eq!(bare, "pipeline #7");
    }

    #[test]
    fn buildkite() {
        let context = context_from(&lookup(&[
            ("BUILDKITE", "true"),
            ("BUILDKITE_PIPELINE_SLUG", "app-deploy"),
            ("BUILDKITE_BUILD_NUMBER", "314"),
            ("BUILDKITE_LABEL", ":rocket: Deploy"),
            ("BUILDKITE_STEP_KEY", "deploy"),
            ("BUILDKITE_COMMIT", "aabbccddeeff00112233"),
            ("BUILDKITE_BUILD_CREATOR", "Ada Lovelace"),
            (
                "BUILDKITE_BUILD_URL",
                "https://buildkite.com/acme/app-deploy/builds/314",
            ),
        ]));
        assert_eq!(
            context,
            "app-deploy #314, step :rocket: Deploy, commit aabbccddeeff, by Ada Lovelace, \
             https://buildkite.com/acme/app-deploy/builds/314"
        );
        // A step without a label is named by its key.
        let keyed = context_from(&lookup(&[
            ("BUILDKITE", "true"),
            ("BUILDKITE_STEP_KEY", "deploy"),
            ("BUILDKITE_COMMIT", "HEAD"),
        ]));
        assert_eq!(keyed, "step deploy, commit HEAD");
    }

    #[test]
    fn elsewhere_user_host_and_pid() {
        let context = context_from(&lookup(&[("USER", "linus")]));
        assert!(context.starts_with("linus@"), "{context}");
        assert!(
            context.ends_with(&format!("pid {}", std::process::id())),
            "{context}"
        );
    }

    #[test]
    fn short_shas() {
        assert_eq!(short_sha("0123456789abcdef"), "0123456789ab");
        assert_eq!(short_sha("abc"), "abc");
    }
}
