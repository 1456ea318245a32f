//! One module per subcommand (or family: `job.rs` has submit, complete, wait and retry), each
//! with its own arguments and help text; and what running CMD takes: `child.rs` spawns it,
//! `supervisor.rs` leads its process group, `supervised.rs` watches it under a turn.

pub mod acquire;
pub mod cancel;
pub mod check;
pub mod child;
pub mod docs;
pub mod init;
pub mod job;
pub mod jobs;
pub mod keep;
pub mod kv;
pub mod log;
pub mod notify;
pub mod once;
pub mod pause;
pub mod reap;
pub mod run;
pub mod serve;
pub mod status;
pub mod supervised;
pub mod supervisor;
pub mod token;
pub mod tokens;
pub mod why;
pub mod worker;
