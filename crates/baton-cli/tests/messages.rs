//! The messages a newcomer reads, as sentences: no unfilled templates, no bare `: ` before an
//! empty name, durations as they were written (or in one rounded form), and refusals by a
//! server that say which scope, on which key, which token, and how to get one.

use baton_testkit as common;

use common::{with_fresh_sqlite, Ctx};

/// Runs `args`; its stderr, after checking it failed with `code`.
fn refused(ctx: &Ctx, args: &[&str], code: i32) -> String {
    let done = ctx.baton(args).run();
    done.assert_code(code);
    done.stderr
}

#[test]
fn an_empty_name_is_named_in_a_sentence() {
    with_fresh_sqlite(|ctx| {
        let cases: &[(&[&str], &str)] = &[
            (&["run", "", "--", "true"], "the key is empty"),
            (&["acquire", ""], "the key is empty"),
            (&["log", ""], "the key is empty"),
            (&["why", ""], "the key is empty"),
            (&["jobs", "show", "", "j-1"], "the key is empty"),
            (&["release", "", "t"], "the key is empty"),
            (&["kv", "get", ""], "the name is empty"),
            (&["kv", "set", "", "v"], "the name is empty"),
            (
                &["tokens", "new", "", "--scope", "read:"],
                "the token name is empty",
            ),
        ];
        for (args, says) in cases {
            let stderr = refused(ctx, args, 2);
            assert!(stderr.contains(says), "{args:?} says {says:?}:\n{stderr}");
            assert!(
                !stderr.contains(": :") && !stderr.contains("\"\":"),
                "{args:?}: no empty name before a colon:\n{stderr}"
            );
        }
    });
}

#[test]
fn durations_read_as_written() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("ttl");
        // Too long: quoted as typed, never in milliseconds.
        for args in [
            vec!["acquire", key.as_str(), "--ttl", "1y"],
            vec!["run", key.as_str(), "--ttl", "1y", "--", "true"],
        ] {
            let stderr = refused(ctx, &args, 2);
            assert!(
                stderr.contains("`1y`") && stderr.contains("7d") && !stderr.contains(" ms"),
                "{args:?}:\n{stderr}"
            );
        }
        // What baton says back reads as the flag was written.
        let done = ctx
            .baton(["once", &ctx.key("once"), "--retain", "365d", "--", "true"])
            .run();
        done.assert_code(0);
        assert!(
            done.stderr.contains("for 365d") && !done.stderr.contains("month"),
            "{}",
            done.describe()
        );
    });
}

#[test]
fn serve_names_the_tokens_command() {
    with_fresh_sqlite(|ctx| {
        let stderr = refused(ctx, &["serve", "--listen", "0.0.0.0:0"], 2);
        assert!(
            stderr.contains("`baton tokens new NAME --scope SCOPE:PREFIX --file FILE`"),
            "{stderr}"
        );
        let bad = ctx.path("tokens.json");
        std::fs::write(&bad, "[").expect("write");
        let stderr = refused(ctx, &["serve", "--tokens", bad.to_str().expect("path")], 2);
        assert!(stderr.contains("baton tokens new"), "{stderr}");
        assert!(!stderr.contains("baton token new"), "{stderr}");
    });
}

#[test]
fn a_server_refusal_names_the_scope_the_key_the_token_and_the_command() {
    with_fresh_sqlite(|ctx| {
        let file = ctx.path("tokens.json");
        let file = file.to_str().expect("path");
        let made = ctx
            .baton([
                "tokens", "new", "reader", "--scope", "read:", "--file", file,
            ])
            .run();
        made.assert_code(0);
        let reader = made.stdout.trim().to_owned();
        let (_server, address) = ctx.serve(&["--tokens", file]);
        let url = format!("http://{address}");
        let key = ctx.key("deploy/prod");
        let through = |token: Option<&str>, args: &[&str]| {
            let mut cmd = ctx.baton(args).env("BATON_STORE", &url);
            if let Some(token) = token {
                cmd = cmd.env("BATON_TOKEN", token);
            }
            let done = cmd.run();
            done.assert_refused(&[1]);
            done.stderr
        };
        let cases: &[(Option<&str>, &[&str], &[&str])] = &[
            (
                Some(&reader),
                &["run", &key, "--timeout", "0", "--", "true"],
                &[
                    "permission denied: the token \"reader\" has no `lock` scope on the key",
                    &format!("`baton tokens new NAME --scope lock:{key}`"),
                    "BATON_TOKEN",
                ],
            ),
            (
                None,
                &["status", &key],
                &[
                    "permission denied: this server needs a token and none was sent",
                    "`baton tokens new NAME --scope SCOPE:PREFIX`",
                ],
            ),
            (
                Some("bt_0000"),
                &["status", &key],
                &["permission denied: this server does not know the token sent"],
            ),
        ];
        for (token, args, says) in cases {
            let stderr = through(*token, args);
            for said in *says {
                assert!(stderr.contains(said), "{args:?} says {said:?}:\n{stderr}");
            }
            for template in ["`a scope`", "`a token`", "this key"] {
                assert!(!stderr.contains(template), "{args:?}:\n{stderr}");
            }
        }
    });
}
