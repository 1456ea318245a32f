//! The Buildkite plugin (`integrations/buildkite`) run as the agent runs it: its options as the
//! `BUILDKITE_PLUGIN_<NAME>_<OPTION>` variables the agent derives from the step's configuration
//! and where the plugin comes from; each hook sourced by a wrapper like the agent's (the
//! environment dumped before and after, what the hook exported carried to the later phases, an
//! early `exit` losing it); the command run with `bash -e -c` between `pre-command` and
//! `pre-exit`, its exit status in `BUILDKITE_COMMAND_EXIT_STATUS`, a cancelled job's in
//! `BUILDKITE_JOB_CANCELLED`. Against the `baton` this crate built (on PATH, unless a test
//! installs it) and a real store: a fresh SQLite file, and the S3 store (moto) when
//! `BATON_TEST_S3_URL` is set.

use baton_testkit as common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use common::ci::{
    assert_said, baton_bin_dir, finish_work, gated_work, hold_as, keeper_pid, on_sqlite_and_s3,
    path_with, turns, wait_held_for, wait_keeper_gone, wait_work_started,
};
use common::{send_signal, with_fresh_sqlite, Ctx, Done, Proc, PROMPT};
use serde_json::{json, Value};
use yaml_rust2::{Yaml, YamlLoader};

/// The plugin's directory, as the agent checks it out.
fn plugin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("buildkite")
}

/// Where pipelines take the plugin from: the repository this directory is mirrored to.
const MIRRORED: &str = "github.com/baton-locks/baton-buildkite-plugin";

const SHA: &str = "fedcba9876543210fedcba9876543210fedcba98";

// ----- what the agent does with a plugin -----

/// The plugin's name as the agent derives it from where the plugin comes from: the last part of
/// the path, lower case, other characters as `-`, without `-buildkite-plugin`.
fn plugin_name(location: &str) -> String {
    let last = location
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    let last = last.trim_start_matches('.').to_lowercase();
    let cleaned: String = last
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    cleaned.replace("-buildkite-plugin", "")
}

/// Upper case, `-` and spaces as `_`.
fn env_key(text: &str) -> String {
    text.to_uppercase().replace(['-', ' '], "_")
}

/// The variables the agent sets for the plugin's hooks from its configuration.
fn plugin_environment(location: &str, config: &Value) -> BTreeMap<String, String> {
    let name = env_key(&plugin_name(location));
    let mut env = BTreeMap::new();
    env.insert("BUILDKITE_PLUGIN_NAME".to_owned(), name.clone());
    env.insert(
        "BUILDKITE_PLUGIN_CONFIGURATION".to_owned(),
        config.to_string(),
    );
    let options = config
        .as_object()
        .expect("a plugin's configuration is a mapping");
    for (option, value) in options {
        let text = match value {
            Value::String(text) => text.clone(),
            Value::Bool(_) | Value::Number(_) => value.to_string(),
            other => panic!("option {option}: these tests give scalars, not {other}"),
        };
        env.insert(format!("BUILDKITE_PLUGIN_{name}_{}", env_key(option)), text);
    }
    env
}

/// A wrapper like the agent's: it sources the hook between two dumps of the environment.
fn hook_wrapper(hook: &Path, before: &Path, after: &Path) -> String {
    let text = std::fs::read_to_string(hook).expect("read the hook");
    let shebang = text.lines().next().filter(|line| line.starts_with("#!"));
    format!(
        "{}\nenv -0 >\"{}\"\n. \"{}\"\nexport BUILDKITE_HOOK_EXIT_STATUS=$?\n\
         export BUILDKITE_HOOK_WORKING_DIR=\"${{PWD}}\"\nenv -0 >\"{}\"\n\
         exit $BUILDKITE_HOOK_EXIT_STATUS\n",
        shebang.unwrap_or_default(),
        before.display(),
        hook.display(),
        after.display()
    )
}

/// An `env -0` dump.
fn read_dump(path: &Path) -> BTreeMap<String, String> {
    let bytes = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .split('\0')
        .filter_map(|entry| entry.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// Variables no hook's change of is carried: the wrapper's own and the shell's.
const NOT_CARRIED: [&str; 5] = [
    "BUILDKITE_HOOK_EXIT_STATUS",
    "BUILDKITE_HOOK_WORKING_DIR",
    "_",
    "SHLVL",
    "OLDPWD",
];

// ----- a build's jobs -----

/// One job of a step that uses the plugin: the environment the agent keeps for it.
struct Job<'c> {
    ctx: &'c Ctx,
    name: String,
    build: u64,
    env: BTreeMap<String, String>,
    plugin_env: BTreeMap<String, String>,
    /// Whether `pre-command` failed: the agent then runs no command.
    pre_command_failed: bool,
}

/// A hook or the command, started.
struct Running {
    proc: Proc,
    before: PathBuf,
    after: PathBuf,
}

impl<'c> Job<'c> {
    fn new(ctx: &'c Ctx, name: &str, config: Value) -> Job<'c> {
        Job::from(ctx, name, MIRRORED, config, true)
    }

    fn from(ctx: &'c Ctx, name: &str, location: &str, config: Value, on_path: bool) -> Job<'c> {
        static BUILDS: AtomicU64 = AtomicU64::new(300);
        let build = BUILDS.fetch_add(1, Ordering::Relaxed);
        let checkout = ctx.path(&format!("builds/{name}"));
        std::fs::create_dir_all(&checkout).expect("create the checkout");
        let bin = on_path.then(|| baton_bin_dir(ctx));
        let env: BTreeMap<String, String> = [
            ("BUILDKITE", "true".to_owned()),
            ("CI", "true".to_owned()),
            ("BUILDKITE_PIPELINE_SLUG", "app-deploy".to_owned()),
            ("BUILDKITE_BUILD_NUMBER", build.to_string()),
            ("BUILDKITE_LABEL", format!(":rocket: {name}")),
            ("BUILDKITE_STEP_KEY", name.to_owned()),
            ("BUILDKITE_COMMIT", SHA.to_owned()),
            ("BUILDKITE_BUILD_CREATOR", "Ada Lovelace".to_owned()),
            (
                "BUILDKITE_BUILD_URL",
                format!("https://buildkite.com/acme/app-deploy/builds/{build}"),
            ),
            ("BUILDKITE_JOB_ID", format!("0190-{build}")),
            (
                "BUILDKITE_BUILD_CHECKOUT_PATH",
                checkout.display().to_string(),
            ),
            ("HOME", ctx.path("home").display().to_string()),
            ("XDG_STATE_HOME", ctx.path("state").display().to_string()),
            ("PATH", path_with(bin.as_deref())),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect();
        Job {
            ctx,
            name: name.to_owned(),
            build,
            env,
            plugin_env: plugin_environment(location, &config),
            pre_command_failed: false,
        }
    }

    /// What baton's default context says of this job.
    fn context(&self) -> String {
        format!(
            "app-deploy #{}, step :rocket: {}, commit {}, by Ada Lovelace, \
             https://buildkite.com/acme/app-deploy/builds/{}",
            self.build,
            self.name,
            &SHA[..12],
            self.build
        )
    }

    /// `program ARGS` in the checkout with `env` on top of the test's (no other CI's).
    fn process(&self, step: &str, args: &[&str], env: &BTreeMap<String, String>) -> Proc {
        let unset_others = ["-u", "GITHUB_ACTIONS", "-u", "CIRCLECI", "-u", "GITLAB_CI"];
        let mut cmd = self
            .ctx
            .program(&format!("{}-{step}", self.name), "env", unset_others)
            .current_dir(Path::new(&self.env["BUILDKITE_BUILD_CHECKOUT_PATH"]));
        for arg in args {
            cmd = cmd.arg(arg);
        }
        for (name, value) in env {
            cmd = cmd.env(name, value);
        }
        cmd.spawn()
    }

    fn start_hook(&self, hook: &str) -> Running {
        let tag = format!("{}-{hook}", self.name);
        let before = self.ctx.path(&format!("{tag}.before"));
        let after = self.ctx.path(&format!("{tag}.after"));
        let wrapper = self.ctx.path(&format!("{tag}.wrapper"));
        let hook_path = plugin_dir().join("hooks").join(hook);
        std::fs::write(&after, b"").expect("create the after-dump");
        std::fs::write(&wrapper, hook_wrapper(&hook_path, &before, &after))
            .expect("write the hook wrapper");
        let mut env = self.env.clone();
        env.extend(self.plugin_env.clone());
        let wrapper = wrapper.display().to_string();
        Running {
            proc: self.process(hook, &["bash", &wrapper], &env),
            before,
            after,
        }
    }

    /// Waits for a hook; carries what it exported into the job's environment.
    fn finish_hook(&mut self, running: &mut Running) -> Done {
        let done = running.proc.wait(PROMPT);
        let (before, after) = (read_dump(&running.before), read_dump(&running.after));
        // An empty after-dump: the hook exited early, and the agent carries nothing.
        if !after.is_empty() {
            for (name, value) in &after {
                if !NOT_CARRIED.contains(&name.as_str()) && before.get(name) != Some(value) {
                    self.env.insert(name.clone(), value.clone());
                }
            }
            for name in before.keys().filter(|name| !after.contains_key(*name)) {
                self.env.remove(name);
            }
        }
        done
    }

    fn pre_command(&mut self) -> Done {
        let mut running = self.start_hook("pre-command");
        self.finish_pre_command(&mut running)
    }

    fn finish_pre_command(&mut self, running: &mut Running) -> Done {
        let done = self.finish_hook(running);
        self.pre_command_failed = done.code != Some(0);
        done
    }

    /// The step's command, started (the agent runs none after a failed pre-command).
    fn start_command(&self, lines: &[String]) -> Proc {
        assert!(
            !self.pre_command_failed,
            "the agent runs no command after a failed pre-command"
        );
        let command = lines.join("\n");
        self.process("command", &["bash", "-e", "-c", &command], &self.env)
    }

    fn finish_command(&mut self, proc: &mut Proc) -> Done {
        let done = proc.wait(PROMPT);
        let status = done.code.expect("the command exited").to_string();
        self.env
            .insert("BUILDKITE_COMMAND_EXIT_STATUS".to_owned(), status);
        done
    }

    /// The job is cancelled while its command runs: the agent stops the command and runs the
    /// later hooks with BUILDKITE_JOB_CANCELLED.
    fn cancel_command(&mut self, proc: &mut Proc) {
        proc.kill();
        self.env
            .insert("BUILDKITE_JOB_CANCELLED".to_owned(), "true".to_owned());
        self.env
            .insert("BUILDKITE_COMMAND_EXIT_STATUS".to_owned(), "-1".to_owned());
    }

    /// pre-exit, which must succeed.
    fn pre_exit(&mut self) -> Done {
        let mut running = self.start_hook("pre-exit");
        let done = self.finish_hook(&mut running);
        done.assert_code(0);
        done
    }
}

// ----- the scenarios -----

#[test]
fn a_job_holds_the_key_across_leases_and_pre_exit_gives_it_back_with_the_commands_outcome() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        // The store comes from BATON_STORE in the job's environment (the tests set it on every
        // process).
        let config = json!({ "key": key, "lease": "3s" });
        let mut a = Job::new(ctx, "deploy-a", config.clone());
        let a_pre = a.pre_command();
        a_pre.assert_code(0);
        assert_eq!(
            a.env.get("BATON_KEY"),
            Some(&key),
            "exported for the command"
        );
        let mut a_command = a.start_command(&gated_work("a"));
        let a_fence = wait_work_started(ctx, "a");
        assert_eq!(ctx.read("a.key").trim(), key);

        let mut b = Job::new(ctx, "deploy-b", config.clone());
        let mut b_pre = b.start_hook("pre-command");
        ctx.wait_queued(&key, &b.context());
        // Three leases and more: the keeper renews A's turn while its command runs.
        wait_held_for(ctx, &key, &a.context(), &b.context(), 10_000);

        finish_work(ctx, "a", 0);
        a.finish_command(&mut a_command).assert_code(0);
        assert_said(&a.pre_exit(), &format!("gave {key} back (succeeded)"));
        wait_keeper_gone(keeper_pid(&a_pre.stderr));

        b.finish_pre_command(&mut b_pre).assert_code(0);
        let mut b_command = b.start_command(&gated_work("b"));
        let b_fence = wait_work_started(ctx, "b");
        assert!(
            b_fence > a_fence,
            "B's fence {b_fence} follows A's {a_fence}"
        );
        finish_work(ctx, "b", 3);
        b.finish_command(&mut b_command).assert_code(3);
        assert_said(&b.pre_exit(), "back (failed)");

        let mut c = Job::new(ctx, "deploy-c", config);
        let c_pre = c.pre_command();
        let mut c_command = c.start_command(&gated_work("c"));
        wait_work_started(ctx, "c");
        c.cancel_command(&mut c_command);
        assert_said(&c.pre_exit(), "back (cancelled)");
        wait_keeper_gone(keeper_pid(&c_pre.stderr));

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
fn options_are_read_under_the_name_the_agent_gives_the_plugin_and_the_store_option_wins() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/staging");
        // Vendored in a repository as .buildkite/plugins/baton-lock: the agent names its options
        // BUILDKITE_PLUGIN_BATON_LOCK_*.
        let config = json!({ "key": key, "store": ctx.store, "max-hold": "10m" });
        let mut job = Job::from(
            ctx,
            "vendored",
            "./.buildkite/plugins/baton-lock",
            config,
            true,
        );
        assert!(job
            .plugin_env
            .contains_key("BUILDKITE_PLUGIN_BATON_LOCK_KEY"));
        job.env.insert(
            "BATON_STORE".to_owned(),
            "sqlite:/nonexistent/dir/x.db".to_owned(),
        );
        job.pre_command().assert_code(0);
        assert_eq!(ctx.key_view(&key).holder_contexts(), [job.context()]);
        let mut command = job.start_command(&gated_work("v"));
        wait_work_started(ctx, "v");
        finish_work(ctx, "v", 0);
        job.finish_command(&mut command).assert_code(0);
        assert_said(&job.pre_exit(), &format!("gave {key} back (succeeded)"));
    });
}

#[test]
fn with_order_and_supersede_a_later_build_supersedes_an_earlier_queued_one() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        // The pipeline's `order: $BUILDKITE_BUILD_NUMBER` is interpolated at upload.
        let config = |build: u64| json!({ "key": key, "order": build, "supersede": true });
        let mut holder = Job::new(ctx, "holder", json!({ "key": key }));
        holder.pre_command().assert_code(0);
        let mut earlier = Job::new(ctx, "earlier", json!({}));
        earlier.plugin_env = plugin_environment(MIRRORED, &config(earlier.build));
        let mut earlier_pre = earlier.start_hook("pre-command");
        ctx.wait_queued(&key, &earlier.context());
        let mut later = Job::new(ctx, "later", json!({}));
        later.plugin_env = plugin_environment(MIRRORED, &config(later.build));
        let mut later_pre = later.start_hook("pre-command");

        let done = earlier.finish_pre_command(&mut earlier_pre);
        done.assert_code(1);
        assert_said(&done, "baton plugin: error: superseded");
        assert_said(&earlier.pre_exit(), "nothing to give back");
        assert_eq!(ctx.key_view(&key).queue_contexts(), [later.context()]);

        holder
            .env
            .insert("BUILDKITE_COMMAND_EXIT_STATUS".to_owned(), "0".to_owned());
        holder.pre_exit();
        later.finish_pre_command(&mut later_pre).assert_code(0);
        later
            .env
            .insert("BUILDKITE_COMMAND_EXIT_STATUS".to_owned(), "0".to_owned());
        later.pre_exit();
        let outcomes: Vec<String> = turns(ctx, &key).into_iter().map(|(o, _)| o).collect();
        assert_eq!(
            outcomes,
            ["succeeded", "succeeded", "superseded"],
            "newest first"
        );
    });
}

#[test]
fn a_missing_key_or_store_a_bad_option_or_a_timeout_fails_the_job_saying_why() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("deploy/production");
        let refused = |config: Value, no_store: bool, message: &str| {
            let mut job = Job::new(ctx, "refused", config);
            if no_store {
                job.env.insert("BATON_STORE".to_owned(), String::new());
            }
            let done = job.pre_command();
            done.assert_code(1);
            assert!(
                done.stderr
                    .contains(&format!("baton plugin: error: {message}")),
                "pre-command should fail saying {message:?}:\n{}",
                done.describe()
            );
            assert!(!job.env.contains_key("BATON_TICKET"), "no turn exported");
            assert_said(&job.pre_exit(), "nothing to give back");
            done
        };
        refused(json!({}), false, "no key: set the plugin's key option");
        refused(
            json!({ "key": key }),
            true,
            "no store: set the plugin's store option",
        );
        refused(
            json!({ "key": key, "supersede": "yes" }),
            false,
            "supersede must be true or false",
        );
        assert!(ctx.key_status(&key).is_none(), "nothing was queued");
        let done = refused(json!({ "key": key, "lease": "soon" }), false, "no turn at");
        assert!(done.stderr.contains("soon"), "{}", done.describe());

        hold_as(ctx, &key, "someone else");
        let done = refused(
            json!({ "key": key, "timeout": "1s" }),
            false,
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
fn a_job_cancelled_while_pre_command_waits_withdraws_its_ticket() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        hold_as(ctx, &key, "holder");
        let mut job = Job::new(ctx, "waiting", json!({ "key": key }));
        let mut pre = job.start_hook("pre-command");
        ctx.wait_queued(&key, &job.context());
        // The agent's cancel signal reaches the hook's processes, baton among them.
        send_signal(-pre.proc.pid(), libc::SIGTERM);
        let done = job.finish_pre_command(&mut pre);
        assert_ne!(done.code, Some(0), "{}", done.describe());
        ctx.wait_status("the ticket to leave", &key, PROMPT, |view| {
            view.queue().is_empty()
        });
        job.env
            .insert("BUILDKITE_JOB_CANCELLED".to_owned(), "true".to_owned());
        assert_said(&job.pre_exit(), "nothing to give back");
        assert_eq!(ctx.key_view(&key).holder_contexts(), ["holder"]);
    });
}

#[test]
fn an_agent_that_dies_frees_the_key_about_a_lease_later() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let config = json!({ "key": key, "lease": "3s" });
        let mut dead = Job::new(ctx, "dead", config.clone());
        let pre = dead.pre_command();
        let mut command = dead.start_command(&gated_work("d"));
        let dead_fence = wait_work_started(ctx, "d");
        // The machine is gone: the command and the keeper with it, and no pre-exit.
        command.kill();
        send_signal(keeper_pid(&pre.stderr), libc::SIGKILL);

        let mut next = Job::new(ctx, "next", config);
        next.pre_command().assert_code(0);
        let next_fence: u64 = next.env["BATON_FENCE"].parse().expect("a numeric fence");
        assert!(next_fence > dead_fence);
        assert_eq!(
            turns(ctx, &key).first(),
            Some(&("expired".to_owned(), dead.context())),
            "the dead job's turn ended by its lease"
        );
        next.env
            .insert("BUILDKITE_COMMAND_EXIT_STATUS".to_owned(), "0".to_owned());
        next.pre_exit();
    });
}

#[test]
fn without_baton_on_path_pre_command_installs_it_with_install_sh_for_the_command_and_pre_exit() {
    use common::dist::{dist_command, repo_root, run_checked, stripped_baton, workspace_version};
    common::ci::assert_no_baton_on_path();
    with_fresh_sqlite(|ctx| {
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
        let config = json!({
            "key": key,
            "install-script-url": install_sh,
            "baton-version": workspace_version(),
        });
        let mut job = Job::from(ctx, "fresh", MIRRORED, config, false);
        // install.sh reads BATON_DOWNLOAD_URL: a mirror of the release archives.
        job.env
            .insert("BATON_DOWNLOAD_URL".to_owned(), format!("file://{archive}"));
        let pre = job.pre_command();
        pre.assert_code(0);
        assert_said(&pre, "installing baton into");
        let installed = ctx.path("home/.baton/bin");
        assert!(installed.join("baton").is_file());
        assert!(job.env["PATH"].starts_with(&installed.display().to_string()));
        let mut command = job.start_command(&["command -v baton >\"$TEST_DIR/which\"".to_owned()]);
        job.finish_command(&mut command).assert_code(0);
        assert_eq!(
            ctx.read("which").trim(),
            installed.join("baton").display().to_string()
        );
        assert_said(&job.pre_exit(), "back (succeeded)");

        // The next job on this agent finds the installed baton and downloads nothing.
        let config = json!({ "key": key, "install-script-url": install_sh });
        let mut again = Job::from(ctx, "again", MIRRORED, config, false);
        let pre = again.pre_command();
        pre.assert_code(0);
        assert!(!pre.stderr.contains("installing"), "{}", pre.describe());
        again
            .env
            .insert("BUILDKITE_COMMAND_EXIT_STATUS".to_owned(), "0".to_owned());
        again.pre_exit();
    });
}

#[test]
fn plugin_yml_declares_every_option_the_hooks_read_and_the_readme_documents_them() {
    let text = std::fs::read_to_string(plugin_dir().join("plugin.yml")).expect("read plugin.yml");
    let docs = YamlLoader::load_from_str(&text).expect("plugin.yml is YAML");
    let plugin = &docs[0];
    assert_eq!(plugin["name"].as_str(), Some("baton"));
    for field in ["description", "author"] {
        assert!(plugin[field].as_str().is_some(), "plugin.yml has a {field}");
    }
    let configuration = &plugin["configuration"];
    assert_eq!(configuration["additionalProperties"], Yaml::Boolean(false));
    assert_eq!(
        configuration["required"].as_vec().map(|v| v.len()),
        Some(1),
        "only key is required"
    );
    assert_eq!(configuration["required"][0].as_str(), Some("key"));
    let properties = configuration["properties"]
        .as_hash()
        .expect("configuration.properties is a mapping");
    let lib = std::fs::read_to_string(plugin_dir().join("lib/baton.bash")).expect("read lib");
    let readme = std::fs::read_to_string(plugin_dir().join("README.md")).expect("read README.md");
    for (name, spec) in properties {
        let name = name.as_str().expect("an option's name");
        assert!(!spec["type"].is_badvalue(), "option {name} has a type");
        assert!(
            spec["description"].as_str().is_some(),
            "option {name} says what it is"
        );
        assert!(
            lib.contains(&format!("baton_bk_option {name})")),
            "the hooks read option {name}"
        );
        assert!(
            readme.contains(&format!("| `{name}` |")),
            "the README's table lists {name}"
        );
    }
    for hook in ["pre-command", "pre-exit"] {
        let path = plugin_dir().join("hooks").join(hook);
        let mode = std::fs::metadata(&path)
            .expect("the hook exists")
            .permissions();
        use std::os::unix::fs::PermissionsExt;
        assert!(mode.mode() & 0o111 != 0, "{hook} is executable");
    }
}
