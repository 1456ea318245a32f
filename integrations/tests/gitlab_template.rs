//! The GitLab CI template (`integrations/gitlab/templates/baton.yml`) run as GitLab runs it:
//! the include's `inputs:` checked against the template's `spec:` header and interpolated into
//! it (`$[[ inputs.NAME ]]`), the `.baton` job's variables expanded and set beside the variables
//! GitLab predefines, its `before_script` and the job's `script` run as one `sh` script with
//! errexit (each entry as written in the YAML, after an echo of its first line, as the runner
//! does), and its `after_script` in a shell of its own with `CI_JOB_STATUS`. Against the `baton`
//! this crate built (on PATH, unless a test installs it) and a real store: a fresh SQLite file,
//! and the S3 store (moto) when `BATON_TEST_S3_URL` is set.

use baton_testkit as common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use common::ci::{
    assert_said, baton_bin_dir, finish_work, gated_work, hold_as, keeper_pid, on_sqlite_and_s3,
    path_with, turns, wait_held_for, wait_keeper_gone, wait_work_started,
};
use common::{send_signal, with_fresh_sqlite, Ctx, Done, Proc, PROMPT};
use yaml_rust2::{Yaml, YamlLoader};

/// The template, as a project that includes it gets it.
fn template_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("gitlab/templates/baton.yml")
}

/// The commit every job of these pipelines builds.
const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

// ----- what GitLab does with an include -----

/// The template's two YAML documents: the `spec:` header and the configuration.
fn template_documents() -> (Yaml, Yaml) {
    let text = std::fs::read_to_string(template_path()).expect("read the template");
    let mut docs = YamlLoader::load_from_str(&text).expect("the template is YAML");
    assert_eq!(
        docs.len(),
        2,
        "a `spec:` header, `---`, then the configuration"
    );
    let body = docs.remove(1);
    (docs.remove(0), body)
}

fn entries(yaml: &Yaml, what: &str) -> Vec<(String, Yaml)> {
    yaml.as_hash()
        .unwrap_or_else(|| panic!("{what} is a mapping: {yaml:?}"))
        .iter()
        .map(|(key, value)| {
            let key = key
                .as_str()
                .unwrap_or_else(|| panic!("{what}: key {key:?}"));
            (key.to_owned(), value.clone())
        })
        .collect()
}

/// The header's inputs, by name.
fn declared_inputs(header: &Yaml) -> Vec<(String, Yaml)> {
    let spec = &header["spec"];
    assert!(!spec.is_badvalue(), "the header is `spec:`");
    entries(&spec["inputs"], "spec:inputs")
}

/// The value of every input for an include with `given`, or GitLab's refusal: an input the
/// header does not declare, a declared one without a default left out, a value outside the
/// input's `options`.
fn resolve_inputs(given: &[(&str, &str)]) -> Result<BTreeMap<String, String>, String> {
    let (header, _) = template_documents();
    let declared = declared_inputs(&header);
    if let Some((name, _)) = given
        .iter()
        .find(|(name, _)| !declared.iter().any(|(known, _)| known == name))
    {
        return Err(format!("unknown input name provided: `{name}`"));
    }
    let mut values = BTreeMap::new();
    for (name, spec) in declared {
        let value = match given.iter().find(|(known, _)| *known == name) {
            Some((_, value)) => (*value).to_owned(),
            None => match spec["default"].as_str() {
                Some(default) => default.to_owned(),
                None => {
                    return Err(format!(
                        "`{name}` input: required value has not been provided"
                    ))
                }
            },
        };
        if let Some(options) = spec["options"].as_vec() {
            if !options
                .iter()
                .any(|option| option.as_str() == Some(value.as_str()))
            {
                return Err(format!("`{name}` input: `{value}` cannot be used"));
            }
        }
        values.insert(name, value);
    }
    Ok(values)
}

/// `text` with each `$[[ inputs.NAME ]]` replaced by the input's value.
fn interpolate(text: &str, inputs: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("$[[") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 3..];
        let end = after
            .find("]]")
            .unwrap_or_else(|| panic!("unclosed $[[ in {text:?}"));
        let name = after[..end]
            .trim()
            .strip_prefix("inputs.")
            .unwrap_or_else(|| panic!("an interpolation that is not an input: {text:?}"));
        let value = inputs
            .get(name)
            .unwrap_or_else(|| panic!("unknown interpolation key: `{name}`"));
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The `.baton` job of the template included with `given` inputs.
#[derive(Clone)]
struct Template {
    variables: Vec<(String, String)>,
    before_script: Vec<String>,
    after_script: Vec<String>,
}

fn include(given: &[(&str, &str)]) -> Template {
    let inputs = resolve_inputs(given).unwrap_or_else(|refusal| panic!("GitLab says: {refusal}"));
    let (_, body) = template_documents();
    let job = &body[".baton"];
    let lines = |field: &str| -> Vec<String> {
        job[field]
            .as_vec()
            .unwrap_or_else(|| panic!(".baton:{field} is a list"))
            .iter()
            .map(|line| interpolate(line.as_str().expect("a script line"), &inputs))
            .collect()
    };
    let variables = entries(&job["variables"], ".baton:variables")
        .into_iter()
        .map(|(name, value)| {
            let value = value.as_str().expect("a variable's value is a string");
            (name, interpolate(value, &inputs))
        })
        .collect();
    Template {
        variables,
        before_script: lines("before_script"),
        after_script: lines("after_script"),
    }
}

/// A variable's value as the runner expands it: `$NAME` and `${NAME}` from the variables set so
/// far, `$$` for a `$`.
fn expand(value: &str, set: &[(String, String)]) -> String {
    let lookup = |name: &str| {
        set.iter()
            .rev()
            .find(|(known, _)| known == name)
            .map(|(_, value)| value.clone())
            .unwrap_or_default()
    };
    let mut out = String::new();
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let braced = chars.next_if_eq(&'{').is_some();
        let mut name = String::new();
        while let Some(next) = chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '_') {
            name.push(next);
        }
        if braced {
            assert_eq!(chars.next(), Some('}'), "unclosed ${{ in {value:?}");
        }
        match (name.is_empty(), chars.next_if_eq(&'$')) {
            (true, Some(_)) => out.push('$'),
            (true, None) => out.push('$'),
            (false, dollar) => {
                out.push_str(&lookup(&name));
                if dollar.is_some() {
                    out.push('$');
                }
            }
        }
    }
    out
}

/// A script as the runner writes it for a `sh` or `bash` executor: errexit (and pipefail where
/// the shell has it), then each entry after an echo of its first line.
fn runner_script(entries: &[String]) -> String {
    let mut script = String::from(
        "if set -o | grep pipefail > /dev/null; then set -o pipefail; fi; set -o errexit\n\
         set +o noclobber\n",
    );
    for entry in entries {
        let shown = format!("$ {}", entry.lines().next().unwrap_or_default());
        script.push_str(&format!(
            "printf '%s\\n' '{}'\n",
            shown.replace('\'', r"'\''")
        ));
        script.push_str(entry);
        script.push('\n');
    }
    script
}

// ----- a pipeline's jobs -----

/// One job that extends `.baton`: its variables, as the runner sets them, and its directory.
struct Job<'c> {
    ctx: &'c Ctx,
    template: Template,
    name: String,
    id: u64,
    pipeline_id: u64,
    project_dir: PathBuf,
    shell: &'static str,
    /// The job's own `variables:` (after the template's, so they win).
    own_variables: Vec<(String, String)>,
    /// PATH holds the built baton unless a test installs one.
    with_baton: bool,
}

impl<'c> Job<'c> {
    fn new(ctx: &'c Ctx, template: &Template, name: &str) -> Job<'c> {
        static IDS: AtomicU64 = AtomicU64::new(1000);
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        let project_dir = ctx.path(&format!("builds/acme/app-{name}"));
        std::fs::create_dir_all(&project_dir).expect("create the project directory");
        Job {
            ctx,
            template: template.clone(),
            name: name.to_owned(),
            id,
            pipeline_id: id + 4000,
            project_dir,
            shell: "sh",
            own_variables: Vec::new(),
            with_baton: true,
        }
    }

    fn variable(mut self, name: &str, value: &str) -> Self {
        self.own_variables.push((name.to_owned(), value.to_owned()));
        self
    }

    fn in_bash(mut self) -> Self {
        self.shell = "bash";
        self
    }

    fn without_baton(mut self) -> Self {
        self.with_baton = false;
        self
    }

    /// What baton's default context says of this job.
    fn context(&self) -> String {
        format!(
            "acme/app pipeline #{}, job {}, commit {}, by alice, {}",
            self.pipeline_id,
            self.name,
            &SHA[..12],
            self.job_url()
        )
    }

    fn job_url(&self) -> String {
        format!("https://gitlab.example/acme/app/-/jobs/{}", self.id)
    }

    /// The variables GitLab predefines, then the template's, then the job's own, each expanded
    /// against those before it.
    fn environment(&self) -> Vec<(String, String)> {
        let bin = self.with_baton.then(|| baton_bin_dir(self.ctx));
        let mut set: Vec<(String, String)> = [
            ("CI", "true".to_owned()),
            ("GITLAB_CI", "true".to_owned()),
            ("CI_SERVER_URL", "https://gitlab.example".to_owned()),
            ("CI_PROJECT_PATH", "acme/app".to_owned()),
            ("CI_PROJECT_DIR", self.project_dir.display().to_string()),
            (
                "CI_BUILDS_DIR",
                self.ctx.path("builds").display().to_string(),
            ),
            ("CI_PIPELINE_ID", self.pipeline_id.to_string()),
            ("CI_PIPELINE_IID", (self.pipeline_id - 5000).to_string()),
            ("CI_JOB_ID", self.id.to_string()),
            ("CI_JOB_NAME", self.name.clone()),
            ("CI_JOB_URL", self.job_url()),
            ("CI_COMMIT_SHA", SHA.to_owned()),
            ("GITLAB_USER_LOGIN", "alice".to_owned()),
            ("HOME", self.ctx.path("home").display().to_string()),
            (
                "XDG_STATE_HOME",
                self.ctx.path("state").display().to_string(),
            ),
            ("PATH", path_with(bin.as_deref())),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect();
        for (name, value) in self.template.variables.iter().chain(&self.own_variables) {
            let expanded = expand(value, &set);
            set.push((name.clone(), expanded));
        }
        set
    }

    /// Runs `entries` as one runner script in the project directory.
    fn shell_with(&self, step: &str, entries: &[String], extra: &[(&str, &str)]) -> Proc {
        let file = self.ctx.path(&format!("{}-{step}.sh", self.name));
        std::fs::write(&file, runner_script(entries)).expect("write the job's script");
        // A runner's environment has no other CI's variables (baton's context reads those first).
        let unset_others = ["-u", "GITHUB_ACTIONS", "-u", "CIRCLECI", "-u", "BUILDKITE"];
        let mut cmd = self
            .ctx
            .program(&format!("{}-{step}", self.name), "env", unset_others)
            .arg(self.shell)
            .arg(&file)
            .current_dir(&self.project_dir);
        for (name, value) in self.environment() {
            cmd = cmd.env(name, value);
        }
        for (name, value) in extra {
            cmd = cmd.env(name, value);
        }
        cmd.spawn()
    }

    /// `before_script` and the job's `script` in one shell, started.
    fn start(&self, script: &[String]) -> Proc {
        let mut entries = self.template.before_script.clone();
        entries.extend_from_slice(script);
        self.shell_with("main", &entries, &[])
    }

    /// `after_script`, in a shell of its own, with the job's status as `CI_JOB_STATUS`.
    fn after(&self, status: &str) -> Done {
        let entries = self.template.after_script.clone();
        let done = self
            .shell_with("after", &entries, &[("CI_JOB_STATUS", status)])
            .wait(PROMPT);
        done.assert_code(0);
        assert!(
            !self.project_dir.join(".baton").exists(),
            "after_script leaves nothing in the project directory"
        );
        done
    }
}

// ----- the scenarios -----

#[test]
fn a_job_holds_the_key_across_leases_and_after_script_gives_it_back_with_the_jobs_status() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        // The store comes from the BATON_STORE CI/CD variable (the tests set it on every
        // process).
        let template = include(&[("key", &key), ("lease", "3s")]);
        let a = Job::new(ctx, &template, "deploy-a");
        let mut a_main = a.start(&gated_work("a"));
        let a_fence = wait_work_started(ctx, "a");
        assert_eq!(
            ctx.read("a.key").trim(),
            key,
            "the script is handed BATON_KEY"
        );

        let b = Job::new(ctx, &template, "deploy-b");
        let mut b_main = b.start(&gated_work("b"));
        ctx.wait_queued(&key, &b.context());
        // Three leases and more: the keeper renews A's turn while its script runs.
        wait_held_for(ctx, &key, &a.context(), &b.context(), 10_000);

        finish_work(ctx, "a", 0);
        let a_done = a_main.wait(PROMPT);
        a_done.assert_code(0);
        assert_said(&a_done, &format!("this job holds {key} (fence {a_fence})"));
        let a_after = a.after("success");
        assert_said(&a_after, &format!("gave {key} back (succeeded)"));
        wait_keeper_gone(keeper_pid(&a_done.stdout));

        let b_fence = wait_work_started(ctx, "b");
        assert!(
            b_fence > a_fence,
            "B's fence {b_fence} follows A's {a_fence}"
        );
        finish_work(ctx, "b", 3);
        b_main.wait(PROMPT).assert_code(3);
        assert_said(&b.after("failed"), "back (failed)");

        // C is cancelled while its script runs: the runner stops the job's shell, then runs
        // after_script with CI_JOB_STATUS=canceled.
        let c = Job::new(ctx, &template, "deploy-c");
        let mut c_main = c.start(&gated_work("c"));
        wait_work_started(ctx, "c");
        c_main.kill();
        assert_said(&c.after("canceled"), "back (cancelled)");
        wait_keeper_gone(keeper_pid(&c_main.stdout()));

        assert_eq!(
            turns(ctx, &key),
            [
                ("cancelled".to_owned(), c.context()),
                ("failed".to_owned(), b.context()),
                ("succeeded".to_owned(), a.context()),
            ],
            "each turn with its outcome and the job it was, newest first"
        );
    });
}

#[test]
fn the_store_input_and_a_jobs_own_key_are_used_and_a_bash_job_works_alike() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let staging = ctx.key("deploy/staging");
        let template = include(&[("store", &ctx.store), ("key", &key)]);
        // No BATON_STORE CI/CD variable: the input names the store. The job holds another key
        // than the include's (BATON_KEY in its own variables).
        let job = Job::new(ctx, &template, "staging")
            .variable("BATON_KEY", &staging)
            .in_bash();
        let mut main = job.shell_with(
            "main",
            &[job.template.before_script.clone(), gated_work("s")].concat(),
            &[("BATON_STORE", "")],
        );
        wait_work_started(ctx, "s");
        assert_eq!(ctx.read("s.key").trim(), staging);
        assert_eq!(ctx.key_view(&staging).holder_contexts(), [job.context()]);
        assert!(
            ctx.key_status(&key).is_none(),
            "the include's key is untouched"
        );
        finish_work(ctx, "s", 0);
        main.wait(PROMPT).assert_code(0);
        let mut after = job.shell_with(
            "after",
            &job.template.after_script,
            &[("CI_JOB_STATUS", "success"), ("BATON_STORE", "")],
        );
        let done = after.wait(PROMPT);
        done.assert_code(0);
        assert_said(&done, &format!("gave {staging} back (succeeded)"));
    });
}

#[test]
fn with_order_and_supersede_a_later_pipeline_supersedes_an_earlier_queued_one() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let template = include(&[
            ("key", &key),
            ("order", "$CI_PIPELINE_IID"),
            ("supersede", "true"),
        ]);
        let holder = Job::new(ctx, &template, "holder");
        let mut holder_main = holder.start(&gated_work("h"));
        wait_work_started(ctx, "h");
        let earlier = Job::new(ctx, &template, "earlier");
        let mut earlier_main = earlier.start(&gated_work("e"));
        ctx.wait_queued(&key, &earlier.context());
        let later = Job::new(ctx, &template, "later");
        let mut later_main = later.start(&gated_work("l"));

        let earlier_done = earlier_main.wait(PROMPT);
        earlier_done.assert_code(1);
        assert_said(&earlier_done, "baton: error: superseded");
        assert!(
            !ctx.exists("e.started"),
            "a superseded job's script never runs"
        );
        assert_said(&earlier.after("failed"), "nothing to give back");
        assert_eq!(ctx.key_view(&key).queue_contexts(), [later.context()]);

        finish_work(ctx, "h", 0);
        holder_main.wait(PROMPT).assert_code(0);
        holder.after("success");
        wait_work_started(ctx, "l");
        finish_work(ctx, "l", 0);
        later_main.wait(PROMPT).assert_code(0);
        later.after("success");
        let outcomes: Vec<String> = turns(ctx, &key).into_iter().map(|(o, _)| o).collect();
        assert_eq!(
            outcomes,
            ["succeeded", "succeeded", "superseded"],
            "newest first"
        );
    });
}

#[test]
fn a_missing_key_or_store_a_bad_input_or_a_timeout_fails_the_job_saying_why() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("deploy/production");
        let refused = |template: &Template, extra: &[(&str, &str)], message: &str| {
            let job = Job::new(ctx, template, "refused");
            let mut entries = template.before_script.clone();
            entries.extend(gated_work("never"));
            let done = job.shell_with("main", &entries, extra).wait(PROMPT);
            done.assert_code(1);
            assert!(
                done.stderr.contains(&format!("baton: error: {message}")),
                "the job should fail saying {message:?}:\n{}",
                done.describe()
            );
            assert!(!ctx.exists("never.started"), "the script never ran");
            assert_said(&job.after("failed"), "nothing to give back");
            done
        };
        refused(&include(&[]), &[], "no key: set the key input");
        let keyed = include(&[("key", &key)]);
        refused(
            &keyed,
            &[("BATON_STORE", "")],
            "no store: set the store input",
        );
        assert!(ctx.key_status(&key).is_none(), "nothing was queued");

        // GitLab refuses an include whose supersede is not one of its options.
        match resolve_inputs(&[("key", &key), ("supersede", "yes")]) {
            Err(refusal) => assert!(refusal.contains("`supersede` input"), "{refusal}"),
            Ok(inputs) => panic!("GitLab would refuse supersede: yes, not take {inputs:?}"),
        }
        // A lease baton cannot read fails the job with baton's own words.
        let done = refused(
            &include(&[("key", &key), ("lease", "soon")]),
            &[],
            "no turn at",
        );
        assert!(done.stderr.contains("soon"), "{}", done.describe());

        // Someone else holds the key: a job with a timeout gives up and says who holds it.
        hold_as(ctx, &key, "someone else");
        let done = refused(
            &include(&[("key", &key), ("timeout", "1s")]),
            &[],
            "timed out after 1s waiting for a turn at",
        );
        assert!(done.stderr.contains("someone else"), "{}", done.describe());
        assert!(
            ctx.key_view(&key).queue().is_empty(),
            "its ticket left the queue"
        );
    });
}

#[test]
fn a_job_cancelled_while_it_waits_withdraws_its_ticket() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        hold_as(ctx, &key, "holder");
        let template = include(&[("key", &key)]);
        let job = Job::new(ctx, &template, "waiting");
        let mut main = job.start(&gated_work("w"));
        ctx.wait_queued(&key, &job.context());
        // The runner's signal reaches the job's processes, baton among them.
        send_signal(-main.pid(), libc::SIGTERM);
        let done = main.wait(PROMPT);
        assert_ne!(done.code, Some(0), "{}", done.describe());
        ctx.wait_status("the ticket to leave", &key, PROMPT, |view| {
            view.queue().is_empty()
        });
        assert_said(&job.after("canceled"), "nothing to give back");
        assert_eq!(ctx.key_view(&key).holder_contexts(), ["holder"]);
    });
}

#[test]
fn a_runner_that_dies_frees_the_key_about_a_lease_later() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let template = include(&[("key", &key), ("lease", "3s")]);
        let dead = Job::new(ctx, &template, "dead");
        let mut dead_main = dead.start(&gated_work("d"));
        let dead_fence = wait_work_started(ctx, "d");
        // The machine is gone: the job's shell and the keeper with it, and no after_script.
        let keeper = keeper_pid(&dead_main.stdout());
        dead_main.kill();
        send_signal(keeper, libc::SIGKILL);

        let next = Job::new(ctx, &template, "next");
        let mut next_main = next.start(&gated_work("n"));
        let next_fence = wait_work_started(ctx, "n");
        assert!(next_fence > dead_fence);
        let turns_now = turns(ctx, &key);
        assert_eq!(
            turns_now.first(),
            Some(&("expired".to_owned(), dead.context())),
            "the dead job's turn ended by its lease: {turns_now:?}"
        );
        finish_work(ctx, "n", 0);
        next_main.wait(PROMPT).assert_code(0);
        next.after("success");
    });
}

#[test]
fn without_baton_on_path_before_script_installs_it_with_install_sh() {
    use common::dist::{dist_command, repo_root, run_checked, stripped_baton, workspace_version};
    common::ci::assert_no_baton_on_path();
    with_fresh_sqlite(|ctx| {
        // The release archive scripts/dist.sh makes of this build, reached by a file:// URL
        // (install.sh's own downloads are tested in tests/install.rs).
        let packed = ctx.path("packed");
        std::fs::create_dir_all(&packed).expect("create a directory");
        let binary = stripped_baton(&packed);
        let made = run_checked(
            &mut dist_command(&binary, &ctx.path("release"), None),
            "dist.sh",
        );
        let archive = String::from_utf8_lossy(&made.stdout).trim().to_owned();

        let key = ctx.key("deploy/production");
        let install_sh = format!("file://{}", repo_root().join("install.sh").display());
        let version = workspace_version();
        let template = include(&[
            ("key", &key),
            ("install-script-url", &install_sh),
            ("baton-version", &version),
        ]);
        // install.sh reads BATON_DOWNLOAD_URL: a CI/CD variable naming a mirror.
        let job = Job::new(ctx, &template, "fresh")
            .without_baton()
            .variable("BATON_DOWNLOAD_URL", &format!("file://{archive}"));
        let mut main = job.start(&gated_work("f"));
        wait_work_started(ctx, "f");
        assert!(job.project_dir.join(".baton/bin/baton").is_file());
        finish_work(ctx, "f", 0);
        let done = main.wait(PROMPT);
        done.assert_code(0);
        assert_said(&done, "install.sh");
        assert_said(&job.after("success"), "back (succeeded)");
        assert_eq!(turns(ctx, &key)[0].0, "succeeded");
    });
}

#[test]
fn the_template_declares_what_it_uses_and_adds_no_job_of_its_own() {
    let (header, body) = template_documents();
    let header_keys: Vec<String> = entries(&header, "the header")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(header_keys, ["spec"]);
    let inputs = declared_inputs(&header);
    for (name, spec) in &inputs {
        for (field, _) in entries(spec, name) {
            assert!(
                ["description", "default", "options", "type", "regex"].contains(&field.as_str()),
                "input {name}: `{field}` is not an input keyword"
            );
        }
        assert!(
            spec["description"].as_str().is_some(),
            "input {name} says what it is"
        );
        assert!(
            spec["default"].as_str().is_some(),
            "input {name} has a default"
        );
    }
    // A remote include adds `.baton` and nothing that would run in the including pipeline.
    let jobs: Vec<String> = entries(&body, "the configuration")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(jobs, [".baton"]);
    let fields: Vec<String> = entries(&body[".baton"], ".baton")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        fields,
        ["variables", "id_tokens", "before_script", "after_script"]
    );

    // Every input reaches the job as a variable, and the README documents each.
    let text = std::fs::read_to_string(template_path()).expect("read the template");
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("gitlab/README.md"))
            .expect("read integrations/gitlab/README.md");
    for (name, _) in &inputs {
        assert!(
            text.contains(&format!("$[[ inputs.{name} ]]")),
            "input {name} is used"
        );
        assert!(
            readme.contains(&format!("| `{name}` |")),
            "the README's table lists {name}"
        );
    }
    assert!(
        include(&[]).before_script.len() == 1,
        "before_script is one entry"
    );
}

/// Through `baton serve` with no `BATON_TOKEN`: the job's OIDC ID token (`id_tokens:
/// BATON_ID_TOKEN`, which GitLab sets) is the bearer token, in before_script and after_script
/// alike. Here the server knows it from its tokens file; what a server started with --trust does
/// with a real one is baton-server's tests/trust.rs.
#[test]
fn through_baton_serve_the_jobs_id_token_is_the_bearer_token() {
    with_fresh_sqlite(|ctx| {
        let tokens = ctx.path("tokens.json");
        let file = tokens.to_str().expect("a path");
        let made = ctx
            .baton([
                "tokens", "new", "gitlab", "--scope", "lock:", "--file", file,
            ])
            .run();
        made.assert_code(0);
        let id_token = made.stdout.trim().to_owned();
        let (_server, address) = ctx.serve(&["--tokens", file]);
        let store = format!("http://{address}");
        let key = ctx.key("deploy/production");
        let template = include(&[("store", &store), ("key", &key)]);
        let job = Job::new(ctx, &template, "oidc").variable("BATON_ID_TOKEN", &id_token);
        let script = [job.template.before_script.clone(), gated_work("o")].concat();
        let mut main = job.shell_with("main", &script, &[]);
        wait_work_started(ctx, "o");
        assert_eq!(
            ctx.key_view(&key).holders().len(),
            1,
            "held through the server"
        );
        finish_work(ctx, "o", 0);
        main.wait(PROMPT).assert_code(0);
        let after = [("CI_JOB_STATUS", "success")];
        let done = job
            .shell_with("after", &job.template.after_script, &after)
            .wait(PROMPT);
        done.assert_code(0);
        assert_said(&done, &format!("gave {key} back (succeeded)"));
    });
}
