//! One module per subcommand.

pub mod acquire;
pub mod cancel;
pub mod check;
pub mod child;
pub mod docs;
pub mod init;
pub mod job;
pub mod jobs;
pub mod kv;
pub mod log;
pub mod notify;
pub mod once;
pub mod pause;
pub mod run;
pub mod serve;
pub mod status;
pub mod supervisor;
pub mod token;
pub mod tokens;
pub mod why;
pub mod worker;
