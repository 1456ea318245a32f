//! `baton serve --trust` through real processes: a fake OpenID issuer on 127.0.0.1 standing for
//! GitHub's, a server that trusts it, and `baton` commands bearing its ID tokens from a token
//! file, as a CI job does. What each kind of bad token gets (signatures, algorithms, keys,
//! rotation, an unreachable issuer) is baton-server's tests/trust.rs.

use baton_testkit as common;

use std::time::{Duration, Instant};

use common::ci::{finish_work, gated_work, wait_work_started};
use common::fake_issuer::FakeIssuer;
use common::{with_fresh_sqlite, Ctx, Done, PROMPT};

/// The leeway the server gives `exp` (baton_server::oidc::LEEWAY_S).
const LEEWAY_S: i64 = 60;

/// A server trusting `issuer`'s tokens of `acme/*` on main for `lock:` on the test's `deploy/`
/// keys and `read:` everywhere: its store URL.
fn trusting_server(ctx: &Ctx, issuer: &FakeIssuer) -> (common::Proc, String) {
    let deploy = ctx.key("deploy/");
    let policy = issuer.policy(
        "acme main",
        "baton",
        r#"repository = "acme/*", ref = "refs/heads/main""#,
        &[&format!("lock:{deploy}"), "read:"],
    );
    let trust = ctx.path("trust.toml");
    std::fs::write(&trust, policy).expect("write the trust file");
    let (server, address) = ctx.serve(&["--trust", trust.to_str().expect("a path")]);
    (server, format!("http://{address}"))
}

/// `baton ARGS --store STORE` bearing the token in `token_file`.
fn bearing(ctx: &Ctx, store: &str, token_file: &str, args: &[&str]) -> Done {
    let mut all = args.to_vec();
    all.extend(["--store", store]);
    ctx.baton(&all).env("BATON_TOKEN_FILE", token_file).run()
}

fn assert_refused(done: &Done, why: &str) {
    done.assert_code(1);
    assert!(done.stderr.contains(why), "{}", done.describe());
}

/// A run's identity may take what its policy grants and nothing else; a fork's pull request
/// gets nothing; the turn a token began outlives the token (renewals and the release are
/// authorised by the ticket's own token), and so does a wait that began with it, while a new
/// turn needs a valid one; the history names the identity.
#[test]
fn a_ci_identity_takes_what_its_policy_grants_and_its_turn_outlives_its_token() {
    with_fresh_sqlite(|ctx| {
        let issuer = FakeIssuer::start();
        let (_server, store) = trusting_server(ctx, &issuer);
        let token_file = ctx.path("id.token");
        let token_path = token_file.to_str().expect("a path");
        // A token 45 s past its exp: accepted for the last 15 s of the server's leeway.
        let claims = issuer.github_claims("acme/app", "refs/heads/main", "42", -(LEEWAY_S - 15));
        let invalid_at = Instant::now() + Duration::from_secs(15);
        std::fs::write(&token_file, issuer.id_token(&claims)).expect("write the token");

        let key = ctx.key("deploy/prod");
        let work = gated_work("w").join("\n");
        let mut run = ctx
            .baton([
                "run", &key, "--ttl", "3s", "--store", &store, "--", "sh", "-c", &work,
            ])
            .env("BATON_TOKEN_FILE", token_path)
            .spawn();
        wait_work_started(ctx, "w");
        // A second run waits its turn behind the first, past the ID token's end.
        let mut waiter = ctx
            .baton([
                "-vv", "run", &key, "--ttl", "3s", "--store", &store, "--", "true",
            ])
            .env("BATON_TOKEN_FILE", token_path)
            .spawn();
        ctx.wait_status("the second run queued", &key, PROMPT, |view| {
            view.queue().len() == 1
        });
        let outside = ctx.key("other/thing");
        let refused = bearing(
            ctx,
            &store,
            token_path,
            &["acquire", &outside, "--timeout", "0"],
        );
        assert_refused(&refused, "trust file (baton serve --trust) can add lock:");

        let fork = issuer.github_claims("acme/app", "refs/pull/7/merge", "43", 300);
        let fork_file = ctx.path("fork.token");
        std::fs::write(&fork_file, issuer.id_token(&fork)).expect("write the token");
        let fork_path = fork_file.to_str().expect("a path");
        let refused = bearing(ctx, &store, fork_path, &["status", &key]);
        assert_refused(&refused, "no trust policy grants this identity anything");

        // The identity token expires (beyond the leeway) while the turn goes on: a lease of
        // 3 s is renewed several times after it.
        let renewed_after = invalid_at + Duration::from_secs(7);
        std::thread::sleep(renewed_after.saturating_duration_since(Instant::now()));
        let late = ctx.key("deploy/later");
        let refused = bearing(
            ctx,
            &store,
            token_path,
            &["acquire", &late, "--timeout", "0"],
        );
        assert_refused(&refused, "expired");
        assert_eq!(ctx.key_view(&key).holders().len(), 1, "still held");
        finish_work(ctx, "w", 0);
        run.wait(PROMPT).assert_code(0);
        waiter.wait(PROMPT).assert_code(0);
        assert!(ctx.key_view(&key).holders().is_empty(), "released");

        let history = ctx.history(&key);
        let context = history[0]["context"].as_str().unwrap_or_default();
        assert!(
            context.contains("acme/app@refs/heads/main run 42 (acme main)"),
            "the history names the identity and its policy: {history:?}"
        );
        assert_eq!(issuer.jwks_fetches(), 1, "the keys were fetched once");
    });
}
