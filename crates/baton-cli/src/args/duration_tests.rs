//! The duration flags' tests: the parsers are the client library's (shared with the server),
//! the flags that use them the CLI's.

use std::time::Duration;

use baton_client::durations::*;

#[test]
fn poll_bounds() {
    let ms = Duration::from_millis;
    let ok = |text: &str| parse_poll(text).ok().map(|b| (b.min, b.max));
    assert_eq!(ok("250ms..5s"), Some((ms(250), ms(5000))));
    assert_eq!(ok("5s"), Some((ms(250), ms(5000))));
    assert_eq!(ok("100ms"), Some((ms(100), ms(100))));
    assert_eq!(ok("1s..1s"), Some((ms(1000), ms(1000))));
    for bad in [
        "5s..1s", "1ms", "1ms..1s", "1s..2h", "..", "1s..", "fast", "0",
    ] {
        assert!(parse_poll(bad).is_err(), "{bad}");
    }
}

#[test]
fn durations() {
    let check = |text: &str, ms: Option<u64>| {
        assert_eq!(
            parse_duration(text).ok().map(|d| d.as_millis() as u64),
            ms,
            "{text}"
        );
    };
    check("500ms", Some(500));
    check("5s", Some(5_000));
    check("15m", Some(900_000));
    check("1h30m", Some(5_400_000));
    check("0", Some(0));
    check("0s", Some(0));
    check("5", None);
    check("soon", None);
    check("", None);
}

#[test]
fn durations_are_bounded() {
    let ok = |text: &str, bound: Bound| parse_duration_within(text, bound).ok();
    assert_eq!(ok("36525d", LONGEST), Some(LONGEST.max));
    assert_eq!(ok("100y", LONGEST), Some(LONGEST.max));
    assert_eq!(ok("7d", LEASE), Some(Duration::from_secs(7 * 24 * 3600)));
    for (text, bound) in [
        ("36525d 1ns", LONGEST),
        ("500000000000y", LONGEST),
        ("18446744073709551615s", LONGEST),
        ("7d 1ms", LEASE),
        ("61m", INTERVAL),
        ("3651d", RETENTION),
        ("367d", DELAY),
    ] {
        let error = parse_duration_within(text, bound).expect_err(text);
        assert!(
            error.contains("largest value allowed") && error.contains(bound.written),
            "{text}: {error}"
        );
    }
    assert!(parse_time("100y").is_ok());
    assert!(parse_time("101y").is_err());
    assert!(parse_time("500000000000y").is_err());
    assert!(parse_time("2026-12-24T16:00:00Z").is_ok());
    assert!(check_not_before("367d").is_err());
    assert!(check_not_before("2099-01-01T00:00:00Z").is_ok());
}

/// Every flag that takes a duration or a time, with its command's path.
fn duration_flags() -> Vec<(String, clap::Arg)> {
    use clap::CommandFactory;
    fn walk(path: String, cmd: &clap::Command, out: &mut Vec<(String, clap::Arg)>) {
        for arg in cmd.get_arguments() {
            let names = arg.get_value_names().unwrap_or_default();
            let timed = names.iter().any(|n| {
                let n = n.as_str();
                n.contains("DUR") || n.contains("TIME") || n == "MIN..MAX"
            });
            if timed {
                out.push((path.clone(), arg.clone()));
            }
        }
        for sub in cmd.get_subcommands() {
            walk(format!("{path} {}", sub.get_name()), sub, out);
        }
    }
    let mut out = Vec::new();
    let mut cmd = crate::cli::Cli::command();
    cmd.build();
    walk("baton".into(), &cmd, &mut out);
    out
}

/// Parses `--FLAG value` with `arg`'s own parser (alone in a command, so its command's
/// other arguments are not needed): Ok, or the error clap prints.
fn parse_flag(arg: &clap::Arg, value: &str) -> Result<(), String> {
    let long = arg.get_long().unwrap_or_default().to_owned();
    let alone = clap::Arg::new("flag")
        .long(long.clone())
        .value_name(arg.get_value_names().unwrap_or_default()[0].clone())
        .value_parser(arg.get_value_parser().clone());
    clap::Command::new("baton")
        .arg(alone)
        .try_get_matches_from(["baton".to_owned(), format!("--{long}={value}")])
        .map(drop)
        .map_err(|e| e.to_string())
}

#[test]
fn every_duration_flag_refuses_what_it_cannot_hold_by_name() {
    let flags = duration_flags();
    // The run, acquire, pause, kv set, submit, worker, once, check, status and serve flags.
    assert!(flags.len() >= 25, "found only {} flags", flags.len());
    for (path, arg) in &flags {
        let flag = format!("--{}", arg.get_long().unwrap_or_default());
        for huge in ["101y", "500000000000y", "18446744073709551615s", "1s..101y"] {
            if huge.contains("..") && arg.get_value_names().unwrap_or_default()[0] != "MIN..MAX" {
                continue;
            }
            let error =
                parse_flag(arg, huge).expect_err(&format!("{path} {flag} {huge} is refused"));
            assert!(
                error.contains(&flag)
                    && (error.contains("largest value allowed") || error.contains("between")),
                "{path} {flag} {huge}: the error names the flag and the bound: {error}"
            );
        }
        parse_flag(arg, "1s").unwrap_or_else(|e| panic!("{path} {flag} 1s: {e}"));
    }
}

proptest::proptest! {
    /// Whatever number and unit: a duration is read exactly or refused, never wrapped,
    /// and never past its bound; no flag's parser panics.
    #[test]
    fn durations_are_exact_or_refused(
        n in proptest::prop_oneof![
            proptest::prelude::any::<u64>(),
            0u64..100_000,
            proptest::prelude::Just(u64::MAX),
        ],
        unit in proptest::sample::select(vec![
            ("ns", 1u128),
            ("ms", 1_000_000),
            ("s", 1_000_000_000),
            ("m", 60_000_000_000),
            ("h", 3_600_000_000_000),
            ("d", 86_400_000_000_000),
            ("y", 31_557_600_000_000_000),
        ]),
    ) {
        let text = format!("{n}{}", unit.0);
        let exact_ns = u128::from(n) * unit.1;
        for bound in [LONGEST, LEASE, INTERVAL, RETENTION, DELAY] {
            match parse_duration_within(&text, bound) {
                Ok(got) => {
                    proptest::prop_assert_eq!(got.as_nanos(), exact_ns, "{}", text);
                    proptest::prop_assert!(got <= bound.max);
                    proptest::prop_assert!(std::time::Instant::now().checked_add(got).is_some());
                    proptest::prop_assert!(u64::try_from(got.as_millis()).is_ok());
                }
                Err(_) => proptest::prop_assert!(
                    exact_ns > bound.max.as_nanos(),
                    "{} refused though within {}", text, bound.written
                ),
            }
        }
        // No flag's parser panics on it (what each accepts is bounded as checked above).
        for (_, arg) in duration_flags() {
            let _ = parse_flag(&arg, &text);
        }
    }
}
