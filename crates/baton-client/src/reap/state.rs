//! What each CI provider's answer says of a run: still going, or ended with a conclusion. Pure:
//! the provider's JSON in, a [`RunState`] out. Whatever a provider says that is not a known
//! end (a new status, a missing field) counts as still going: a turn is never freed on doubt.

use serde_json::Value;

/// A CI run as its provider told it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Queued, running, waiting for approval…: the provider's status word.
    Going(String),
    /// Over: the provider's conclusion (`cancelled`, `failure`, `success`, `canceled`…).
    Ended(String),
}

/// A GitHub workflow run attempt (`GET /repos/{o}/{r}/actions/runs/{id}/attempts/{n}`): ended
/// once `status` is `completed`, with its `conclusion`.
pub fn github(body: &Value) -> Option<RunState> {
    let status = body.get("status")?.as_str()?;
    if status != "completed" {
        return Some(RunState::Going(status.to_owned()));
    }
    let conclusion = body
        .get("conclusion")
        .and_then(Value::as_str)
        .unwrap_or("completed");
    Some(RunState::Ended(conclusion.to_owned()))
}

/// A CircleCI workflow (`GET /workflow/{id}`): its `status` is its conclusion once it is one
/// of the final ones; `running`, `on_hold` (waiting for approval) and `failing` (a job failed,
/// others still run) are not.
pub fn circleci(body: &Value) -> Option<RunState> {
    let status = body.get("status")?.as_str()?;
    const ENDED: [&str; 6] = [
        "success",
        "failed",
        "error",
        "canceled",
        "unauthorized",
        "not_run",
    ];
    Some(ended_if(status, &ENDED))
}

/// A GitLab pipeline (`GET /projects/{id}/pipelines/{pipeline_id}`): ended once `status` is
/// `success`, `failed`, `canceled` or `skipped`; `manual` (waiting for someone to start a job)
/// and `scheduled` are still going.
pub fn gitlab(body: &Value) -> Option<RunState> {
    let status = body.get("status")?.as_str()?;
    const ENDED: [&str; 4] = ["success", "failed", "canceled", "skipped"];
    Some(ended_if(status, &ENDED))
}

fn ended_if(status: &str, ended: &[&str]) -> RunState {
    if ended.contains(&status) {
        RunState::Ended(status.to_owned())
    } else {
        RunState::Going(status.to_owned())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn going(word: &str) -> Option<RunState> {
        Some(RunState::Going(word.into()))
    }

    fn ended(word: &str) -> Option<RunState> {
        Some(RunState::Ended(word.into()))
    }

    #[test]
    fn github_runs_end_when_completed() {
        for status in ["queued", "in_progress", "waiting", "requested", "pending"] {
            let body = json!({"status": status, "conclusion": null});
            assert_eq!(github(&body), going(status));
        }
        let cancelled = json!({"status": "completed", "conclusion": "cancelled"});
        assert_eq!(github(&cancelled), ended("cancelled"));
        let no_conclusion = json!({"status": "completed"});
        assert_eq!(github(&no_conclusion), ended("completed"));
        assert_eq!(github(&json!({"message": "Not Found"})), None);
    }

    #[test]
    fn circleci_and_gitlab_end_on_their_final_statuses_only() {
        for status in ["running", "on_hold", "failing", "something_new"] {
            assert_eq!(circleci(&json!({ "status": status })), going(status));
        }
        for status in ["success", "failed", "error", "canceled", "not_run"] {
            assert_eq!(circleci(&json!({ "status": status })), ended(status));
        }
        for status in [
            "created",
            "pending",
            "running",
            "manual",
            "scheduled",
            "preparing",
        ] {
            assert_eq!(gitlab(&json!({ "status": status })), going(status));
        }
        for status in ["success", "failed", "canceled", "skipped"] {
            assert_eq!(gitlab(&json!({ "status": status })), ended(status));
        }
        assert_eq!(gitlab(&json!({"status": 3})), None);
    }
}
