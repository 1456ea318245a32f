//! Which CI run this process belongs to, from the CI's own variables: recorded on the tickets
//! it enqueues so that `baton reap` can free them once the run has ended.

use std::env;

use baton_core::ci_run::CiRun;

/// The CI run of this process's environment (GitHub Actions, CircleCI, GitLab CI), or `None`
/// outside CI or when the variables do not name a run.
pub fn from_env() -> Option<CiRun> {
    ci_run_from(&|name| env::var(name).ok())
}

/// [`from_env`], with variables read through `lookup` (tests pass a table).
fn ci_run_from(lookup: &dyn Fn(&str) -> Option<String>) -> Option<CiRun> {
    let var = |name: &str| {
        lookup(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let number = |name: &str| var(name).and_then(|v| v.parse::<u64>().ok());
    let run = if var("GITHUB_ACTIONS").is_some() {
        CiRun::Github {
            repository: var("GITHUB_REPOSITORY")?,
            run_id: number("GITHUB_RUN_ID")?,
            // Runners before attempts existed set no GITHUB_RUN_ATTEMPT: the first.
            attempt: match var("GITHUB_RUN_ATTEMPT") {
                Some(attempt) => attempt.parse().ok()?,
                None => 1,
            },
        }
    } else if var("CIRCLECI").is_some() {
        CiRun::Circleci {
            workflow_id: var("CIRCLE_WORKFLOW_ID")?,
        }
    } else if var("GITLAB_CI").is_some() {
        CiRun::Gitlab {
            project_id: number("CI_PROJECT_ID")?,
            pipeline_id: number("CI_PIPELINE_ID")?,
        }
    } else {
        return None;
    };
    // Variables that name no run the provider could have made are not recorded: the turn is
    // then freed only by its lease, as outside CI.
    run.check().ok().map(|()| run)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn lookup(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn each_ci_names_its_run() {
        let github = lookup(&[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_REPOSITORY", "octo/app"),
            ("GITHUB_RUN_ID", "9876543210"),
            ("GITHUB_RUN_ATTEMPT", "2"),
        ]);
        assert_eq!(
            ci_run_from(&github),
            Some(CiRun::Github {
                repository: "octo/app".into(),
                run_id: 9_876_543_210,
                attempt: 2
            })
        );
        let circle = lookup(&[
            ("CIRCLECI", "true"),
            ("CIRCLE_WORKFLOW_ID", "5034460f-c7c4-4c43-9457-de07e2029e7b"),
        ]);
        assert_eq!(
            ci_run_from(&circle),
            Some(CiRun::Circleci {
                workflow_id: "5034460f-c7c4-4c43-9457-de07e2029e7b".into()
            })
        );
        let gitlab = lookup(&[
            ("GITLAB_CI", "true"),
            ("CI_PROJECT_ID", "278964"),
            ("CI_PIPELINE_ID", "1234567"),
        ]);
        assert_eq!(
            ci_run_from(&gitlab),
            Some(CiRun::Gitlab {
                project_id: 278_964,
                pipeline_id: 1_234_567
            })
        );
    }

    #[test]
    fn outside_ci_or_with_odd_variables_nothing_is_recorded() {
        assert_eq!(ci_run_from(&lookup(&[("USER", "ada")])), None);
        let no_run = lookup(&[("GITHUB_ACTIONS", "true"), ("GITHUB_REPOSITORY", "o/r")]);
        assert_eq!(ci_run_from(&no_run), None);
        let odd = lookup(&[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_REPOSITORY", "../../elsewhere"),
            ("GITHUB_RUN_ID", "1"),
        ]);
        assert_eq!(ci_run_from(&odd), None);
        let bad_uuid = lookup(&[("CIRCLECI", "true"), ("CIRCLE_WORKFLOW_ID", "x/../y")]);
        assert_eq!(ci_run_from(&bad_uuid), None);
    }
}
