//! Which CI run holds a turn: recorded on the ticket at enqueue (from the CI's own variables),
//! so that `baton reap` can ask the CI provider whether that run has ended.
//!
//! The record only ever names a run; where to ask and with what credentials comes from the
//! reaper's own environment. Every field is checked here to be what the provider's ids look
//! like (numbers, `owner/name`, a UUID), so a ticket cannot steer the reaper's request to
//! another path of the provider's API, let alone another host.

use serde::{Deserialize, Serialize};

use crate::limits::InvalidInput;

/// The CI run a ticket was enqueued by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "provider", rename_all = "lowercase", deny_unknown_fields)]
pub enum CiRun {
    /// A GitHub Actions workflow run's attempt (`GITHUB_REPOSITORY`, `GITHUB_RUN_ID`,
    /// `GITHUB_RUN_ATTEMPT`).
    Github {
        /// `owner/name`.
        repository: String,
        /// The workflow run's id.
        run_id: u64,
        /// The attempt (1 for the first run, 2 for its first re-run, …).
        attempt: u32,
    },
    /// A CircleCI workflow (`CIRCLE_WORKFLOW_ID`).
    Circleci {
        /// The workflow's UUID.
        workflow_id: String,
    },
    /// A GitLab CI pipeline (`CI_PROJECT_ID`, `CI_PIPELINE_ID`).
    Gitlab {
        /// The project's numeric id.
        project_id: u64,
        /// The pipeline's id.
        pipeline_id: u64,
    },
}

/// The longest GitHub owner or repository name: owners are at most 39 characters, repository
/// names at most 100.
const GITHUB_NAME_MAX: usize = 100;

impl CiRun {
    /// The provider's name, as `baton reap` and `baton status` say it.
    pub fn provider(&self) -> &'static str {
        match self {
            CiRun::Github { .. } => "github",
            CiRun::Circleci { .. } => "circleci",
            CiRun::Gitlab { .. } => "gitlab",
        }
    }

    /// The run in words: `github run 123 attempt 2 of o/r`, `circleci workflow UUID`, …
    pub fn describe(&self) -> String {
        match self {
            CiRun::Github {
                repository,
                run_id,
                attempt,
            } => format!("github run {run_id} attempt {attempt} of {repository}"),
            CiRun::Circleci { workflow_id } => format!("circleci workflow {workflow_id}"),
            CiRun::Gitlab {
                project_id,
                pipeline_id,
            } => format!("gitlab pipeline {pipeline_id} of project {project_id}"),
        }
    }

    /// Checks that every field is what the provider's ids look like.
    pub fn check(&self) -> Result<(), InvalidInput> {
        let ok = match self {
            CiRun::Github {
                repository,
                run_id,
                attempt,
            } => is_github_repository(repository) && *run_id > 0 && *attempt > 0,
            CiRun::Circleci { workflow_id } => is_uuid(workflow_id),
            CiRun::Gitlab {
                project_id,
                pipeline_id,
            } => *project_id > 0 && *pipeline_id > 0,
        };
        if ok {
            Ok(())
        } else {
            Err(InvalidInput(format!(
                "the CI run `{}` is not one its provider could have made",
                self.describe().escape_debug()
            )))
        }
    }
}

/// `owner/name`, each 1..=100 letters, digits, `-`, `_` or `.`, and neither `.` nor `..`.
fn is_github_repository(repository: &str) -> bool {
    let mut parts = repository.split('/');
    let (Some(owner), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    [owner, name].iter().all(|part| {
        !part.is_empty()
            && part.len() <= GITHUB_NAME_MAX
            && *part != "."
            && *part != ".."
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    })
}

/// A UUID as CircleCI writes them: 8-4-4-4-12 hexadecimal digits.
fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(group, len)| group.len() == len && group.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn github(repository: &str) -> CiRun {
        CiRun::Github {
            repository: repository.into(),
            run_id: 1,
            attempt: 1,
        }
    }

    #[test]
    fn ids_as_the_providers_make_them_pass() {
        assert!(github("octo-org/hello.world_2").check().is_ok());
        let circle = CiRun::Circleci {
            workflow_id: "5034460f-c7c4-4c43-9457-de07e2029e7b".into(),
        };
        assert!(circle.check().is_ok());
        let gitlab = CiRun::Gitlab {
            project_id: 7,
            pipeline_id: 42,
        };
        assert!(gitlab.check().is_ok());
    }

    #[test]
    fn anything_that_could_steer_a_request_elsewhere_is_refused() {
        for bad in [
            "",
            "owner",
            "owner/",
            "/name",
            "../name",
            "owner/..",
            "owner/name/extra",
            "owner/name?x=1",
            "owner/name#x",
            "owner/na%2fme",
            "owner/na me",
            "owner/name\n",
        ] {
            assert!(github(bad).check().is_err(), "{bad:?} passed");
        }
        for bad in [
            "",
            "not-a-uuid",
            "5034460f-c7c4-4c43-9457-de07e2029e7",
            "../x",
        ] {
            let circle = CiRun::Circleci {
                workflow_id: bad.into(),
            };
            assert!(circle.check().is_err(), "{bad:?} passed");
        }
        let zero = CiRun::Gitlab {
            project_id: 0,
            pipeline_id: 1,
        };
        assert!(zero.check().is_err());
    }

    #[test]
    fn the_record_reads_back_as_written_and_refuses_unknown_fields() {
        let run = github("o/r");
        let json = serde_json::to_string(&run).unwrap();
        assert_eq!(
            json,
            r#"{"provider":"github","repository":"o/r","run_id":1,"attempt":1}"#
        );
        assert_eq!(serde_json::from_str::<CiRun>(&json).unwrap(), run);
        let extra = r#"{"provider":"gitlab","project_id":1,"pipeline_id":2,"api":"x"}"#;
        assert!(serde_json::from_str::<CiRun>(extra).is_err());
    }
}
