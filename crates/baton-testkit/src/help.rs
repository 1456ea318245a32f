//! What `baton … --help` says: the commands it lists, and their options.

use super::baton_bin;

/// The help text of `baton ARGS --help`.
pub fn help_of(args: &[&str]) -> String {
    let output = std::process::Command::new(baton_bin())
        .args(args)
        .arg("--help")
        .output()
        .expect("run baton --help");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The commands in the "Commands:" section of `baton ARGS --help`, in order, but `help`.
pub fn listed_commands(args: &[&str]) -> Vec<String> {
    let help = help_of(args);
    let Some((_, section)) = help.split_once("Commands:\n") else {
        return Vec::new();
    };
    section
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every command path `baton --help` leads to (`kv get`), with the groups that do something of
/// their own (`jobs`, beside `jobs show`).
pub fn command_paths() -> Vec<String> {
    let mut paths = Vec::new();
    for command in listed_commands(&[]) {
        let subcommands = listed_commands(&[command.as_str()]);
        let help = help_of(&[command.as_str()]);
        let usage = help.lines().find(|l| l.starts_with("Usage:")).unwrap_or("");
        if !usage.contains("<COMMAND>") {
            paths.push(command.clone());
        }
        paths.extend(subcommands.into_iter().map(|s| format!("{command} {s}")));
    }
    paths
}

/// The option lines of a help text (`  -n, --max-rows <N>  Show at most…`), trimmed.
pub fn option_lines(help: &str) -> Vec<String> {
    help.lines()
        .map(str::trim_start)
        .filter(|line| line.starts_with('-'))
        .map(str::to_owned)
        .collect()
}
