//! Submitting a job: its record first, then the ticket that refers to it; a submit with the
//! caller's id recognised as the same job however it ended (live, in the backlog, in the
//! history), never queued twice.

use baton_core::job::JobSpec;
use baton_core::op::{Submit, TicketView};
use baton_core::{Doc, Op, Refusal, Reply, Request};

use super::backlog::final_run;
use super::errors::{invalid, params_replaced, unexpected};
use super::records::{
    bound_params, check_params, decode_job_record, encode_job_record, job_record,
};
use super::standing::{live_or_marked, JobStanding};
use super::wait::standing;
use crate::coordinator::Coordinator;
use crate::error::ClientError;
use crate::segments::find_in_backlog;
use crate::turn::ids;
/// How to submit a job.
#[derive(Clone, Debug)]
pub struct SubmitOptions {
    /// The job's id (`--id`): a second submit with it changes nothing. `None`: a new `j-…`.
    pub id: Option<String>,
    /// The key's limit (how many of its jobs and tickets may run at once).
    pub limit: u32,
    /// Sort value: jobs and tickets with one go first, compared as strings.
    pub order: Option<String>,
    /// Cancel every queued job or ticket that sorts before this one, unless it has `keep`.
    pub supersede: bool,
    /// Immune to a later `supersede`.
    pub keep: bool,
    /// Attempts, backoff, delay, longest run.
    pub spec: JobSpec,
    /// Who submits it, and why (shown to others).
    pub context: String,
    /// Bound on the key's live tickets.
    pub max_live: u32,
    /// Ask the key's lock holders not queued with `keep` to stop (`--cancel-running`).
    pub cancel_running: bool,
    /// A job of a pool of named slots (`--slots`), and which it wants ([`baton_core::pool`]).
    /// `limit` must then be the number of slots, or the submit is refused.
    pub pool: Option<baton_core::pool::PoolAsk>,
}

impl Default for SubmitOptions {
    fn default() -> Self {
        SubmitOptions {
            id: None,
            limit: 1,
            order: None,
            supersede: false,
            keep: false,
            spec: JobSpec::default(),
            context: String::new(),
            max_live: baton_core::limits::LIVE_TICKETS_DEFAULT,
            cancel_running: false,
            pool: None,
        }
    }
}

/// What a submit did.
#[derive(Clone, Debug)]
pub struct Submitted {
    /// The job's id.
    pub id: String,
    /// Where it stands: queued, or, when it was submitted before, that job's state.
    pub view: TicketView,
    /// A job with this id had been submitted before: nothing was queued, and its parameters
    /// and options stay those of the first submit.
    pub already: bool,
}

/// Submits a job to `key` with `params` (JSON) and says where it stands: queued, or, when a
/// job with the same id was submitted before (live, or ended within what the key's history
/// keeps), that job's state, unchanged.
pub async fn submit(
    coord: &Coordinator,
    key: &str,
    params: &[u8],
    options: &SubmitOptions,
) -> Result<Submitted, ClientError> {
    submit_op(coord, key, params, options).await
}

/// Queues a dead job again under its id, with its parameters and options, attempts reset
/// (`baton retry`). Refused unless the job is dead.
pub async fn revive(coord: &Coordinator, key: &str, id: &str) -> Result<TicketView, ClientError> {
    baton_core::limits::check_id(id).map_err(|e| invalid(key, e.0))?;
    let bytes = coord.store().get_record(key, &job_record(id)).await?;
    let Some((mut submit, _)) = bytes.as_deref().and_then(decode_job_record) else {
        return Err(ClientError::Refused {
            key: key.to_owned(),
            refusal: baton_core::Refusal::UnknownId { id: id.to_owned() },
        });
    };
    let ended = final_run(coord, key, id).await?;
    // The first submit's hash, from the entry that ended the job: the record, which anyone who
    // writes the store could have replaced meanwhile, is checked against it, never trusted to
    // say it. A job ended before the binding (no hash kept) is bound to its record from now.
    let first_sha256 = ended.as_ref().and_then(|run| run.params_sha256.clone());
    let record_sha256 = bytes.as_deref().map(baton_core::job::record_sha256);
    let expected = first_sha256.as_deref().or(record_sha256.as_deref());
    if let Err(detail) = bound_params(id, expected, bytes.as_deref()) {
        return Err(params_replaced(key, id, detail));
    }
    submit.params_sha256 = expected.map(str::to_owned);
    submit.revive = true;
    submit.supersede = false;
    // Its new runs number on after the old ones, whose reports stay.
    submit.runs_before = ended.map_or(0, |run| run.run);
    let mut request = Request::new(ids::new_attempt_id(), Op::Submit(submit));
    let executed = coord.execute(key, &mut request).await?;
    match executed.reply {
        Reply::Ticket(view) => Ok(view),
        other => Err(unexpected(key, &other)),
    }
}

async fn submit_op(
    coord: &Coordinator,
    key: &str,
    params: &[u8],
    options: &SubmitOptions,
) -> Result<Submitted, ClientError> {
    check_params(params).map_err(|e| invalid(key, e))?;
    let id = options.id.clone().unwrap_or_else(ids::new_job_id);
    baton_core::limits::check_id(&id).map_err(|e| invalid(key, e.0))?;
    let submit = Submit {
        pool: options.pool.clone(),
        id: id.clone(),
        limit: options.limit,
        context: options.context.clone(),
        order: options.order.clone(),
        supersede: options.supersede,
        keep: options.keep,
        spec: options.spec.clone(),
        max_live: options.max_live,
        revive: false,
        runs_before: 0,
        cancel_running: options.cancel_running,
        params_sha256: None,
    };
    // The record first: a submit that dies before its document write leaves an orphan record,
    // never a job without parameters. The ticket keeps the record's hash, so a record replaced
    // after this (a writer racing this one, or one at the store) is never run.
    let record = encode_job_record(&submit, params);
    let submit = Submit {
        params_sha256: Some(baton_core::job::record_sha256(&record)),
        ..submit
    };
    if options.id.is_some() {
        if let Some(view) = submitted_before(coord, key, &id).await? {
            return Ok(Submitted {
                id,
                view,
                already: true,
            });
        }
    }
    if options.id.is_none() || may_write_record(coord, key, &id, &record).await? {
        coord.put_record(key, &job_record(&id), &record).await?;
    }
    let mut request = Request::new(ids::new_attempt_id(), Op::Submit(submit));
    let executed = match coord.execute(key, &mut request).await {
        Ok(executed) => executed,
        Err(error) => {
            let (id, view) = submitted_into_backlog(coord, key, &id, error).await?;
            return Ok(Submitted {
                id,
                view,
                already: false,
            });
        }
    };
    match executed.reply {
        Reply::Ticket(view) => Ok(Submitted {
            id,
            view,
            already: false,
        }),
        other => Err(unexpected(key, &other)),
    }
}

/// Job `id` of `key` as it stands, when a submit with the caller's id finds that it was
/// submitted before: live (in the document or its backlog), or ended, as its mark or its
/// history entry says. The document remembers only the last few finished tickets, so the
/// history is what makes a second submit a no-op for as long as the key keeps it.
///
/// `None`: never submitted, or only its record is there, left by a submit that died before its
/// document write, and the history, reaching back to the key's first entry, shows no end of
/// it. When the history no longer reaches back that far, whether it ran cannot be known, and
/// the submit is refused rather than run twice.
async fn submitted_before(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<TicketView>, ClientError> {
    let snapshot = coord.read(key).await?;
    let doc = snapshot.doc.as_ref();
    if let Some(status) = doc.and_then(|doc| baton_core::apply::status_of(doc, id)) {
        return Ok(Some(TicketView::Live(status)));
    }
    if let Some(view) = waiting_in_backlog(coord, key, id).await? {
        return Ok(Some(view));
    }
    let recorded = coord.store().get_record(key, &job_record(id)).await?;
    if recorded.is_none() {
        return Ok(None);
    }
    match standing(coord, key, id).await? {
        JobStanding::Ended(end) => Ok(Some(TicketView::Finished {
            id: id.to_owned(),
            outcome: end.outcome,
            forced: end.forced,
        })),
        // Queued since by another submit: the core answers with it.
        JobStanding::Live { .. } => Ok(None),
        JobStanding::Unknown if history_is_whole(coord, key, doc).await? => Ok(None),
        JobStanding::Unknown => Err(ClientError::Refused {
            key: key.to_owned(),
            refusal: Refusal::Forgotten { id: id.to_owned() },
        }),
    }
}

/// Whether `key`'s history still holds every entry ever appended to it (none trimmed by its
/// retention), so that a job whose end is not there never ended.
async fn history_is_whole(
    coord: &Coordinator,
    key: &str,
    doc: Option<&Doc>,
) -> Result<bool, ClientError> {
    let first = coord.store().history(key, 0, 1).await?;
    Ok(match first.first() {
        Some(entry) => entry.seq == 1,
        None => doc.is_none_or(|doc| doc.finishes == 0),
    })
}

/// After a submit whose write may have landed was refused as uncertain: the core cannot see
/// the key's written backlog segments, where the job may be by now. Found there, it is the
/// answer; else the refusal stands (the job may have run and been forgotten since).
async fn submitted_into_backlog(
    coord: &Coordinator,
    key: &str,
    id: &str,
    error: ClientError,
) -> Result<(String, TicketView), ClientError> {
    let ClientError::Refused {
        refusal: Refusal::Uncertain,
        ..
    } = &error
    else {
        return Err(error);
    };
    let snapshot = coord.read(key).await?;
    let Some(doc) = &snapshot.doc else {
        return Err(error);
    };
    let Some(found) = find_in_backlog(coord, key, doc, id).await? else {
        return Err(error);
    };
    match found.standing(doc) {
        Some(JobStanding::Live { position, .. }) => {
            let status = baton_core::TicketStatus {
                position,
                ..baton_core::apply::waiting_status(&found.ticket)
            };
            Ok((id.to_owned(), TicketView::Live(status)))
        }
        _ => Err(error),
    }
}

/// Job `id` of `key`, if it was submitted and waits in a written segment of the backlog.
async fn waiting_in_backlog(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<TicketView>, ClientError> {
    let snapshot = coord.read(key).await?;
    let Some(doc) = snapshot.doc.as_ref() else {
        return Ok(None);
    };
    if !doc.backlog.as_ref().is_some_and(|b| b.has_segments()) || live_or_marked(doc, id).is_some()
    {
        return Ok(None);
    }
    if coord
        .store()
        .get_record(key, &job_record(id))
        .await?
        .is_none()
    {
        return Ok(None);
    }
    let Some(found) = find_in_backlog(coord, key, doc, id).await? else {
        return Ok(None);
    };
    Ok(match found.standing(doc) {
        Some(JobStanding::Live { position, .. }) => {
            Some(TicketView::Live(baton_core::TicketStatus {
                position,
                ..baton_core::apply::waiting_status(&found.ticket)
            }))
        }
        Some(JobStanding::Ended(end)) => Some(TicketView::Finished {
            id: id.to_owned(),
            outcome: end.outcome,
            forced: false,
        }),
        _ => None,
    })
}

/// Whether a submit with an id of the caller's may write the job's record: not when a job with
/// that id exists or existed (a second submit changes nothing), only when no record is there or
/// it is left by a submit that died before its document write.
async fn may_write_record(
    coord: &Coordinator,
    key: &str,
    id: &str,
    record: &[u8],
) -> Result<bool, ClientError> {
    match coord.store().get_record(key, &job_record(id)).await? {
        None => Ok(true),
        Some(existing) if existing == record => Ok(false),
        Some(_) => Ok(matches!(
            standing(coord, key, id).await?,
            JobStanding::Unknown
        )),
    }
}
