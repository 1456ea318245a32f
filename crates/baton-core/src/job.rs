//! Jobs: tickets submitted with parameters and no waiting process, which a worker claims when
//! the key has room.
//!
//! A job is a [`crate::Ticket`] with a [`JobState`]: it queues in the key's one order beside the
//! lock tickets of `baton run`, but no process waits for it, so the grant step never grants it
//! (it would be an unclaimed grant nobody can claim); a worker's [`crate::Op::Claim`] takes it
//! when it is the head of the queue, ready and fits beside the holders. This module holds the
//! rules that are a job's own: when it is ready, how long a failed attempt backs off, how many
//! releases back an attempt may spend, and how its runs end. `apply` calls them.
//!
//! Job time (`ready_at_ms`, `claimed_at_ms`) is on the store's clock where it has one and on the
//! judging client's wall clock where it has not ([`crate::Clock::job_now_ms`]). No safety
//! property depends on it: a job ready early or late is only early or late.

use serde::{Deserialize, Serialize};

use crate::doc::{attempt_tag, Doc, Mode, Ticket, TAG_HEX};
use crate::limits::InvalidInput;

/// Attempts of a job unless `--max-attempts` says otherwise.
pub const ATTEMPTS_DEFAULT: u32 = 3;
/// Most attempts a job may be given.
pub const ATTEMPTS_MAX: u32 = 1000;
/// First backoff after a failed attempt unless `--backoff` says otherwise; it doubles.
pub const BACKOFF_DEFAULT_MS: u64 = 10_000;
/// Longest backoff: the doubling stops here.
pub const BACKOFF_MAX_MS: u64 = 600_000;
/// Releases back (exit 75) an attempt may spend before the next one counts as a failed
/// attempt, so a job that always asks to be released cannot loop forever.
pub const RELEASES_PER_ATTEMPT: u32 = 20;
/// Longest error text kept with a job in the hot document (longer ones are cut, marked `…`).
pub const ERROR_MAX_BYTES: usize = 512;
/// Largest job parameters (JSON), stored outside the hot document.
pub const PARAMS_MAX_BYTES: usize = 256 * 1024;
/// Longest delay before a job is first ready (`--not-before`): a year.
pub const DELAY_MAX_MS: u64 = 366 * 24 * 3600 * 1000;

/// What the hot document keeps of a job beside its ticket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobState {
    /// Failed attempts so far: the attempt running or next is `failures + 1`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// Attempts it may fail before it is dead.
    pub max_attempts: u32,
    /// Releases back since its last failed attempt.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub releases: u32,
    /// Claims so far: the number of the current (or last) run, which names its record.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub runs: u32,
    /// Backoff after the first failed attempt; it doubles after each further one.
    pub backoff_ms: u64,
    /// Not claimed before this instant of job time ([`crate::Clock::job_now_ms`]); `None`:
    /// ready since it was queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at_ms: Option<u64>,
    /// A run longer than this is stopped by its worker and counts as a failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_run_ms: Option<u64>,
    /// When the current run was claimed, in job time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_at_ms: Option<u64>,
    /// The error of its last failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// How its last run ended if the job was queued again (see [`RunMark`]): the token and
    /// attempt of that run, so a retried completion is answered as the first time and a stale
    /// worker is told its run has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<RunMark>,
    /// The SHA-256 of the job's record as it was submitted ([`record_sha256`]), kept for its
    /// whole life (and by a revive): a record that no longer has it was replaced after the
    /// submit, and its worker never runs it. `None`: submitted by an older client, unchecked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params_sha256: Option<String>,
    /// The run whose worker said, while it held the job, that its command succeeded
    /// ([`crate::Op::RunSucceeded`]): if that run's lease runs out before its end is recorded
    /// (the worker was killed, paused or cut off in between), the job ends succeeded instead
    /// of running again. Told through the key's document, so it is fenced like the run: a
    /// worker that lost its lease first is refused, and its job runs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded_run: Option<u32>,
}

impl JobState {
    /// A new job's state.
    pub fn new(spec: &JobSpec, ready_at_ms: Option<u64>) -> JobState {
        JobState {
            failures: 0,
            max_attempts: spec.max_attempts,
            releases: 0,
            runs: 0,
            backoff_ms: spec.backoff_ms,
            ready_at_ms,
            max_run_ms: spec.max_run_ms,
            claimed_at_ms: None,
            last_error: None,
            last_run: None,
            params_sha256: None,
            succeeded_run: None,
        }
    }

    /// The attempt running, or to run next (1 for the first; a release back does not count).
    pub fn attempt(&self) -> u32 {
        self.failures.saturating_add(1)
    }

    /// Whether it may be claimed at `now_ms` of job time.
    pub fn is_ready(&self, now_ms: u64) -> bool {
        self.ready_at_ms.is_none_or(|at| at <= now_ms)
    }

    /// How long to wait after the `failures`-th failed attempt (1 for the first): the backoff,
    /// doubled for each earlier failure, at most [`BACKOFF_MAX_MS`] (or the backoff itself when
    /// that was asked for longer).
    pub fn backoff_after_ms(&self, failures: u32) -> u64 {
        let doublings = failures.saturating_sub(1).min(63);
        let cap = BACKOFF_MAX_MS.max(self.backoff_ms);
        self.backoff_ms
            .checked_mul(1u64 << doublings)
            .unwrap_or(cap)
            .min(cap)
    }
}

/// How a job's run ended, when it did not end the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunEnd {
    /// The command failed (or the worker said so): a failed attempt.
    Failed,
    /// The lease ran out before the worker completed it: a failed attempt.
    LeaseRanOut,
    /// The worker gave it back (exit 75): it keeps its place and spends no attempt.
    ReleasedBack,
}

impl RunEnd {
    fn code(self) -> char {
        match self {
            RunEnd::Failed => 'f',
            RunEnd::LeaseRanOut => 'e',
            RunEnd::ReleasedBack => 'r',
        }
    }

    fn from_code(code: char) -> Option<RunEnd> {
        Some(match code {
            'f' => RunEnd::Failed,
            'e' => RunEnd::LeaseRanOut,
            'r' => RunEnd::ReleasedBack,
            _ => return None,
        })
    }

    /// The phrase for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            RunEnd::Failed => "failed",
            RunEnd::LeaseRanOut => "its lease ran out",
            RunEnd::ReleasedBack => "released back",
        }
    }
}

/// The end of a job's last run, kept while the job waits again: `CODE:TOKEN[:ATTEMPT]`, short
/// as a [`crate::doc::FinishedMark`] is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunMark {
    /// How the run ended.
    pub end: RunEnd,
    /// The first [`TAG_HEX`] digits of the run's token hash.
    pub token_tag: String,
    /// The completion that ended it, if one did (not a lease that ran out).
    pub attempt_tag: Option<String>,
}

impl RunMark {
    /// The mark of a run with token hash `token_hash` ended by `attempt` (`None`: expiry).
    pub fn new(end: RunEnd, token_hash: &str, attempt: Option<&str>) -> RunMark {
        RunMark {
            end,
            token_tag: token_hash.get(..TAG_HEX).unwrap_or(token_hash).to_owned(),
            attempt_tag: attempt.map(attempt_tag),
        }
    }

    /// Whether the run had the token with this (full) hash.
    pub fn has_token_hash(&self, token_hash: &str) -> bool {
        token_hash.get(..TAG_HEX).unwrap_or(token_hash) == self.token_tag
    }

    /// Whether `attempt` ended the run.
    pub fn ended_by(&self, attempt: &str) -> bool {
        self.attempt_tag.as_deref() == Some(attempt_tag(attempt).as_str())
    }
}

impl TryFrom<String> for RunMark {
    type Error = String;

    fn try_from(text: String) -> Result<RunMark, String> {
        let bad = || format!("`{}` is not a run mark", text.escape_debug());
        let mut parts = text.split(':');
        let mut code = parts.next().ok_or_else(bad)?.chars();
        let (Some(letter), None) = (code.next(), code.next()) else {
            return Err(bad());
        };
        let end = RunEnd::from_code(letter).ok_or_else(bad)?;
        let token_tag = parts.next().filter(|t| !t.is_empty()).ok_or_else(bad)?;
        let attempt_tag = parts.next().map(str::to_owned);
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(RunMark {
            end,
            token_tag: token_tag.to_owned(),
            attempt_tag,
        })
    }
}

impl From<RunMark> for String {
    fn from(mark: RunMark) -> String {
        match mark.attempt_tag {
            Some(attempt) => format!("{}:{}:{attempt}", mark.end.code(), mark.token_tag),
            None => format!("{}:{}", mark.end.code(), mark.token_tag),
        }
    }
}

/// The hash that binds a job's record to its ticket ([`JobState::params_sha256`]): SHA-256,
/// lowercase hex, of the record's bytes exactly as stored.
///
/// The whole record, not the parameters alone: the record holds the submit's options beside
/// the parameters, and a revive (`baton retry`) queues the job again with the options it reads
/// there (its limit, context, attempts, `--cancel-running`), so they must not be replaceable
/// either. The submit line inside the record carries no hash (it cannot hold its own), which
/// also keeps the record readable by batons older than the binding.
pub fn record_sha256(record: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(record))
}

/// Checks a [`record_sha256`] given in a submit: 64 lowercase hex digits.
pub fn check_params_sha256(hash: &str) -> Result<(), InvalidInput> {
    let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
    if hash.len() == 64 && hash.chars().all(hex) {
        return Ok(());
    }
    Err(InvalidInput(format!(
        "the parameters' hash {:?} is not a SHA-256 in lowercase hex (64 digits)",
        cut_text(hash, 80)
    )))
}

/// What a submitter chooses for a job (`baton submit`'s flags), checked at the edge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Attempts it may fail before it is dead.
    pub max_attempts: u32,
    /// Backoff after the first failed attempt; it doubles, up to 10 minutes.
    pub backoff_ms: u64,
    /// Not ready before this long after it is queued.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
    /// A run longer than this is stopped and counts as a failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_run_ms: Option<u64>,
}

impl Default for JobSpec {
    fn default() -> Self {
        JobSpec {
            max_attempts: ATTEMPTS_DEFAULT,
            backoff_ms: BACKOFF_DEFAULT_MS,
            delay_ms: 0,
            max_run_ms: None,
        }
    }
}

impl JobSpec {
    /// Checks every field against its limit.
    pub fn check(&self) -> Result<(), InvalidInput> {
        if !(1..=ATTEMPTS_MAX).contains(&self.max_attempts) {
            return Err(InvalidInput(format!(
                "--max-attempts is {}; it must be between 1 and {ATTEMPTS_MAX}",
                self.max_attempts
            )));
        }
        if self.backoff_ms > crate::limits::TTL_MAX_MS {
            return Err(InvalidInput(format!(
                "--backoff is {}; it must be at most 7d",
                crate::duration::human_ms(self.backoff_ms)
            )));
        }
        if self.delay_ms > DELAY_MAX_MS {
            return Err(InvalidInput(
                "--not-before is more than a year away; give a nearer time".into(),
            ));
        }
        if let Some(max_run) = self.max_run_ms {
            crate::limits::check_ttl("--max-run", max_run)?;
        }
        Ok(())
    }
}

/// How a worker ends a run ([`crate::Op::Complete`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum JobResult {
    /// The work is done: the job has succeeded.
    Succeeded,
    /// A failed attempt: retried after its backoff, or dead when its attempts are spent.
    Failed {
        /// Why, for `baton jobs` and `baton why` (cut to [`ERROR_MAX_BYTES`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Given back (exit 75): it keeps its place, spends no attempt, and is ready again after
    /// `delay_ms`.
    ReleasedBack {
        /// How long until it is ready again.
        delay_ms: u64,
    },
    /// Stopped because a newer ticket or job asked (`--cancel-running`): the job ends
    /// `superseded`, spending nothing and never retried. Refused for a run nobody asked.
    Superseded {
        /// Why, for the history (`asked to stop by …`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// `text` cut to at most `max` bytes on a character boundary, marked with `…` when cut.
pub fn cut_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The head of `doc`'s queue if a worker may claim it at `now_ms` of job time (`wall_ms` on
/// the wall clock, for a freeze the document records: [`Doc::frozen_for`]): a job, ready, not
/// held back by a freeze, and fitting beside the holders. Else `Err` with when the head job
/// will be ready, if that is what it waits for (its time, or the end of a freeze that ends by
/// itself; `None`: the key is full, the head is a lock ticket, or nothing waits). Only the
/// head: a later job never overtakes an earlier one.
pub fn claimable_head(doc: &Doc, now_ms: u64, wall_ms: u64) -> Result<&Ticket, Option<u64>> {
    let queued = doc.queued();
    let head = *queued.first().ok_or(None)?;
    let job = head.job.as_deref().ok_or(None)?;
    if doc.behind_backlog(head) {
        return Err(None);
    }
    if doc.frozen_for(head, wall_ms) {
        return Err(frozen_until(doc, now_ms, wall_ms));
    }
    if !job.is_ready(now_ms) {
        return Err(job.ready_at_ms);
    }
    if !has_room_for_a_job(doc, head.slots.as_ref()) {
        return Err(None);
    }
    Ok(head)
}

/// Whether a job (always normal mode) would fit beside the key's holders; on a pool, whether
/// the slots it asks for (`ask`; `None`: any one) are free ([`crate::pool::Walk`]).
pub fn has_room_for_a_job(doc: &Doc, ask: Option<&crate::pool::TicketSlots>) -> bool {
    if !doc.slots.is_empty() {
        let any = crate::pool::TicketSlots {
            only: None,
            count: 1,
            held: Vec::new(),
        };
        let taken = crate::pool::Walk::new(doc).take(&doc.slots, ask.unwrap_or(&any));
        return matches!(taken, crate::pool::Take::Slots(_));
    }
    let n_normal = doc.holders().filter(|t| t.mode == Mode::Normal).count();
    let shared_held = doc.holders().any(|t| t.mode == Mode::Shared);
    !shared_held && n_normal < doc.limit as usize
}

/// When `doc`'s key next needs a worker, in job time (`now_ms` is the writer's job clock,
/// `wall_ms` its wall clock at the same instant), or `None` when no worker ever needs to look
/// at it until someone writes it again. Stores that keep an index of these values let an idle
/// worker find work without reading every key that ever had a job (ARCHITECTURE.md, *jobs at
/// scale*).
///
/// The earliest of: the head job's turn, when it fits beside the holders — since when it could
/// run (submitted, past its time, and the key's last run ended), so keys that waited longest
/// come first; when a holder's phase may end, if the head job does not fit; when a running
/// job's lease may run out (a claim's write then ends the run of a worker that died). The
/// value only says when to look: who may hold is decided by `apply` on the look's own clock.
pub fn due_ms(doc: &Doc, now_ms: u64, wall_ms: u64) -> Option<u64> {
    // A wall-clock instant on the job clock: the same distance before now.
    let job_time = |wall: u64| now_ms.saturating_sub(wall_ms.saturating_sub(wall));
    // A holder's phase ends at its deadline on a store clock; by observation, no sooner than
    // a whole phase after someone starts watching it.
    let phase_end = |t: &Ticket| {
        t.deadline_ms
            .unwrap_or_else(|| now_ms.saturating_add(t.phase_ms()))
    };
    let running_end = doc
        .holders()
        .filter(|t| t.job.is_some())
        .map(phase_end)
        .min();
    let head = doc.queued().first().copied();
    let head_due = match head {
        // Paused: no worker is needed before the freeze ends by itself (a resume writes).
        Some(head) if !doc.behind_backlog(head) && doc.frozen_for(head, wall_ms) => {
            frozen_until(doc, now_ms, wall_ms)
        }
        // The backlog's next jobs must be taken in first: whoever looks takes them.
        Some(head) if doc.behind_backlog(head) => backlog_due(doc, now_ms, phase_end),
        None if doc.backlog.is_some() => backlog_due(doc, now_ms, phase_end),
        _ => head_job_due(doc, head, job_time, phase_end),
    };
    match (running_end, head_due) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// When the freeze the document records ends by itself, in job time (`now_ms` and `wall_ms`
/// are the same instant on the job clock and the wall clock).
fn frozen_until(doc: &Doc, now_ms: u64, wall_ms: u64) -> Option<u64> {
    let until = doc.paused.as_ref()?.until_ms?;
    Some(now_ms.saturating_add(until.saturating_sub(wall_ms)))
}

/// When a key whose backlog must be taken in next needs a worker: now if a job fits.
fn backlog_due(doc: &Doc, now_ms: u64, phase_end: impl Fn(&Ticket) -> u64) -> Option<u64> {
    if has_room_for_a_job(doc, None) {
        Some(now_ms)
    } else {
        doc.holders().map(phase_end).min()
    }
}

/// When the head job `head` may run (see [`due_ms`]).
fn head_job_due(
    doc: &Doc,
    head: Option<&Ticket>,
    job_time: impl Fn(u64) -> u64,
    phase_end: impl Fn(&Ticket) -> u64,
) -> Option<u64> {
    head.and_then(|head| {
        let job = head.job.as_deref()?;
        if !has_room_for_a_job(doc, head.slots.as_ref()) {
            return doc.holders().map(phase_end).min();
        }
        let since = job
            .ready_at_ms
            .unwrap_or(0)
            .max(job_time(head.enqueued_wall_ms))
            .max(job_time(doc.summary.last_finished_wall_ms));
        Some(since)
    })
}

/// The token hash a queued job carries: no process holds a token for it until a worker claims
/// it, and tokens of live tickets must differ. Never a real hash (those are hex digits).
pub fn queued_token_hash(id: &str) -> String {
    format!("q{id}")
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_hash_is_the_whole_sha256_in_lower_case_hex() {
        let hash = record_sha256(b"abc");
        assert_eq!(
            hash,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(check_params_sha256(&hash).is_ok());
        assert!(check_params_sha256(&hash.to_uppercase()).is_err());
    }

    fn state(backoff_ms: u64) -> JobState {
        JobState::new(
            &JobSpec {
                backoff_ms,
                ..JobSpec::default()
            },
            None,
        )
    }

    #[test]
    fn backoff_doubles_up_to_ten_minutes() {
        let job = state(10_000);
        let delays: Vec<u64> = (1..=8).map(|n| job.backoff_after_ms(n)).collect();
        assert_eq!(
            delays,
            [10_000, 20_000, 40_000, 80_000, 160_000, 320_000, 600_000, 600_000]
        );
        assert_eq!(job.backoff_after_ms(u32::MAX), 600_000);
        assert_eq!(state(0).backoff_after_ms(5), 0);
        // A backoff asked for longer than the cap is kept, not shortened.
        assert_eq!(state(3_600_000).backoff_after_ms(3), 3_600_000);
    }

    #[test]
    fn attempts_count_from_one_and_readiness_follows_ready_at() {
        let mut job = state(1);
        assert_eq!(job.attempt(), 1);
        job.failures = 2;
        assert_eq!(job.attempt(), 3);
        assert!(job.is_ready(0));
        job.ready_at_ms = Some(100);
        assert!(!job.is_ready(99));
        assert!(job.is_ready(100));
    }

    #[test]
    fn run_marks_round_trip_and_refuse_garbage() {
        let mark = RunMark::new(RunEnd::Failed, &"ab".repeat(16), Some("att"));
        let text: String = mark.clone().into();
        assert!(text.starts_with("f:abababababab:"), "{text}");
        assert_eq!(RunMark::try_from(text), Ok(mark.clone()));
        assert!(mark.ended_by("att"));
        assert!(!mark.ended_by("other"));
        assert!(mark.has_token_hash(&"ab".repeat(16)));
        let expired = RunMark::new(RunEnd::LeaseRanOut, "cd", None);
        assert_eq!(String::from(expired.clone()), "e:cd");
        for bad in ["", "x:ab", "f", "f:", "ff:ab", "f:ab:c:d"] {
            assert!(RunMark::try_from(bad.to_owned()).is_err(), "{bad}");
        }
    }

    #[test]
    fn specs_are_checked() {
        assert!(JobSpec::default().check().is_ok());
        let with = |f: fn(&mut JobSpec)| {
            let mut spec = JobSpec::default();
            f(&mut spec);
            spec.check()
        };
        assert!(with(|s| s.max_attempts = 0).is_err());
        assert!(with(|s| s.max_attempts = ATTEMPTS_MAX + 1).is_err());
        assert!(with(|s| s.delay_ms = DELAY_MAX_MS + 1).is_err());
        assert!(with(|s| s.max_run_ms = Some(10)).is_err());
        assert!(with(|s| s.max_run_ms = Some(60_000)).is_ok());
    }

    #[test]
    fn errors_are_cut_on_a_character_boundary() {
        assert_eq!(cut_text("short", 10), "short");
        let cut = cut_text(&"é".repeat(10), 8);
        assert!(cut.len() <= 8 && cut.ends_with('…'), "{cut}");
        assert!(!queued_token_hash("j-1")
            .chars()
            .all(|c| c.is_ascii_hexdigit()));
    }
}
