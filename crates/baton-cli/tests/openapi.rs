//! `baton serve`'s OpenAPI document, served and fuzzed: schemathesis generates requests from
//! it (valid and not) for every route but the event streams, and checks that no answer is a
//! 5xx, and that every answer's status, content type and body are as the document says.
//!
//! The short form runs in the test command (`BATON_FUZZ_EXAMPLES`, default 30 per route); the
//! long form is `BATON_FUZZ_EXAMPLES=1000` (TORTURE.md). It needs schemathesis
//! (`scripts/test.sh` installs it and sets `BATON_TEST_SCHEMATHESIS`); without it, the fuzz
//! run says it was skipped. That the document names exactly the server's routes is a unit test
//! of the server (`routes::tests`).

use baton_testkit as common;

use std::process::Command;

use common::http::get;
use common::with_fresh_sqlite;

#[test]
fn the_document_is_served_and_the_api_survives_a_schema_driven_fuzz_run() {
    with_fresh_sqlite(|ctx| {
        // A turn waits at most a second in its request, so that a fuzzed turn at a held key
        // answers 202 soon.
        let (_server, address) = ctx.serve(&["--turn-wait", "1s"]);
        let document = get(address, "/v1/openapi.json", None);
        assert_eq!(document.status, 200);
        assert_eq!(document.body["openapi"], "3.1.0", "{}", document.raw);
        let Some(st) = std::env::var_os("BATON_TEST_SCHEMATHESIS").filter(|s| !s.is_empty()) else {
            eprintln!(
                "fuzz run skipped: BATON_TEST_SCHEMATHESIS is not set (scripts/test.sh installs \
                 schemathesis and sets it)"
            );
            return;
        };
        let examples = std::env::var("BATON_FUZZ_EXAMPLES").unwrap_or_else(|_| "30".into());
        let output = Command::new(st)
            .args([
                "run",
                &format!("http://{address}/v1/openapi.json"),
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,\
                 response_schema_conformance,response_headers_conformance",
                "--max-examples",
                &examples,
                // Event streams never end; their routes are tested by serve.rs.
                "--exclude-path-regex",
                "/watch$",
                "--no-color",
            ])
            .current_dir(ctx.dir())
            .output()
            .expect("run schemathesis");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "schemathesis found failures ({}):\n{stdout}\n{stderr}",
            output.status
        );
        assert!(stdout.contains("passed"), "{stdout}");
        // The server is still there.
        assert_eq!(get(address, "/healthz", None).status, 200);
    });
}
