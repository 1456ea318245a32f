//! Jobs: submit work for a key, claim it as a worker, complete it, wait for its end.
//!
//! A job is a ticket with parameters and no waiting process ([`baton_core::job`]). Its
//! submission (options and parameters, [`job_record`]) and the report of each run are *records*
//! beside the key ([`Store::put_record`]), outside the hot document, written before the
//! document change that refers to them: a writer that dies in between leaves only a record
//! nothing refers to, never a job without its parameters. A claimed job is a held, claimed
//! lease like any other: [`Job::heartbeat`] renews it, and [`Job::complete`] ends the run.
//!
//! One file per concern:
//! - `records`: the records a job keeps beside its key (submission, run reports);
//! - `submit`: submitting (and reviving) a job, recognised when submitted before;
//! - `claim`: a worker's claim, its lease and heartbeat, its report and completion;
//! - `schedule`: which keys a worker serves and which have work ready, claiming the next;
//! - `standing` and `wait`: where a job stands, and waiting for its end;
//! - `backlog`: jobs waiting in the written segments of a key's backlog;
//! - `liveness`: workers saying they are alive for the keys they serve;
//! - `listing`: `baton jobs`' rows, parameters and reports;
//! - `errors`: the errors the job operations share.
//!
//! [`Store::put_record`]: baton_store::Store::put_record

mod backlog;
mod claim;
mod errors;
mod listing;
mod liveness;
mod records;
mod schedule;
mod standing;
mod submit;
mod wait;

pub use crate::segments::{cancel_in_backlog, find_in_backlog, InBacklog};
pub use claim::{claim, complete, complete_job, ClaimOptions, Job, RunReport};
pub use listing::{last_report, list, params, reports, runs, JobRow};
pub use liveness::{last_worker_seen, worker_seen, WorkerSeen, EVERY_KEY, SEEN_EVERY, SEEN_RECORD};
pub use records::{check_params, job_record, run_record};
pub use schedule::{
    claim_next, look_for_job, ready_keys, KeyPatterns, Look, ReadyKey, WorkWaker, DUE_SCAN,
};
pub use standing::{JobEnd, JobStanding};
pub use submit::{revive, submit, SubmitOptions, Submitted};
pub use wait::{standing, wait};
