//! `baton acquire` in a GitHub Actions step masks its token: with `GITHUB_ACTIONS=true` it
//! prints `::add-mask::TOKEN` on stderr before the token reaches stdout, so the runner hides it
//! in the job's log; stdout stays the token alone (`TOKEN=$(baton acquire …)` keeps working).

use baton_testkit as common;

use common::for_each_store;

#[test]
fn acquire_under_github_actions_masks_its_token_and_prints_it_alone() {
    for_each_store(|ctx| {
        let key = ctx.key("masked");
        let done = ctx
            .baton(["acquire", &key, "--ttl", "1m"])
            .env("GITHUB_ACTIONS", "true")
            .run();
        done.assert_code(0);
        let token = done.stdout.trim_end_matches('\n');
        assert!(
            !token.is_empty() && !token.contains('\n'),
            "stdout is the token alone:\n{}",
            done.describe()
        );
        let mask = format!("::add-mask::{token}");
        assert_eq!(
            done.stderr.lines().next(),
            Some(mask.as_str()),
            "the mask comes first on stderr, before anything names the token:\n{}",
            done.describe()
        );
        ctx.baton(["release", &key, token]).run().assert_code(0);

        // The same with --json: the token inside the object is masked too.
        let done = ctx
            .baton(["acquire", &key, "--ttl", "1m", "--json"])
            .env("GITHUB_ACTIONS", "true")
            .run();
        done.assert_code(0);
        let value: serde_json::Value =
            serde_json::from_str(done.stdout.trim()).expect("stdout is one JSON object");
        let token = value["token"].as_str().expect("a token");
        assert!(
            done.stderr.contains(&format!("::add-mask::{token}\n")),
            "{}",
            done.describe()
        );
        ctx.baton(["release", &key, token]).run().assert_code(0);

        // --no-mask: for a token handed to another job as a job output (the Action masks by
        // its own `mask-ticket` input and passes it).
        let done = ctx
            .baton(["acquire", &key, "--ttl", "1m", "--no-mask"])
            .env("GITHUB_ACTIONS", "true")
            .run();
        done.assert_code(0);
        assert!(!done.stderr.contains("::add-mask::"), "{}", done.describe());
        ctx.baton(["release", &key, done.stdout.trim()])
            .run()
            .assert_code(0);

        // BATON_NO_MASK=1, as baton's own Action sets it, is --no-mask; a falsey value is not.
        for (value, masked) in [("1", false), ("0", true)] {
            let done = ctx
                .baton(["acquire", &key, "--ttl", "1m"])
                .env("GITHUB_ACTIONS", "true")
                .env("BATON_NO_MASK", value)
                .run();
            done.assert_code(0);
            assert_eq!(
                done.stderr.contains("::add-mask::"),
                masked,
                "BATON_NO_MASK={value}: {}",
                done.describe()
            );
            ctx.baton(["release", &key, done.stdout.trim()])
                .run()
                .assert_code(0);
        }

        // Outside GitHub Actions nothing is added.
        let done = ctx
            .baton(["acquire", &key, "--ttl", "1m"])
            .env("GITHUB_ACTIONS", "")
            .run();
        done.assert_code(0);
        assert!(!done.stderr.contains("::add-mask::"), "{}", done.describe());
        ctx.baton(["release", &key, done.stdout.trim()])
            .run()
            .assert_code(0);
    });
}
