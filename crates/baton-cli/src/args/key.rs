//! Keys and job ids as commands take them: checked against the core's limits before anything
//! is read or written, and refused as a usage error (exit 2) that names what was wrong.

use crate::exit::Failure;

/// Checks a key given on the command line.
pub fn check_key(key: &str) -> Result<(), Failure> {
    baton_core::limits::check_key(key).map_err(|e| Failure::bad("key", key, e))
}

/// Checks a job's id given on the command line.
pub fn check_job_id(id: &str) -> Result<(), Failure> {
    baton_core::limits::check_id(id).map_err(|e| Failure::usage(e.to_string()))
}
