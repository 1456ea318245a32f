//! Where a job stands now, read from the store (its document, its backlog, its history), and
//! waiting for its end.

use std::time::{Duration, Instant};

use super::backlog::final_entry;
use super::records::job_record;
use super::standing::{live_or_marked, JobEnd, JobStanding};
use crate::coordinator::Coordinator;
use crate::error::ClientError;
use crate::segments::{find_in_backlog, InBacklog};

/// Where job `id` of `key` stands now: live in the document, or ended (its mark, else its
/// final history entry).
pub async fn standing(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<JobStanding, ClientError> {
    standing_with(coord, key, id, &mut None).await
}

/// [`standing`], remembering in `found` where the job waits in the key's backlog, so that a
/// caller that asks again ([`wait`]) reads no segment twice.
async fn standing_with(
    coord: &Coordinator,
    key: &str,
    id: &str,
    found: &mut Option<InBacklog>,
) -> Result<JobStanding, ClientError> {
    let snapshot = coord.read(key).await?;
    if let Some(doc) = &snapshot.doc {
        if found.is_none() && doc.backlog.as_ref().is_some_and(|b| b.has_segments()) {
            let submitted = coord.store().get_record(key, &job_record(id)).await?;
            if submitted.is_some() && live_or_marked(doc, id).is_none() {
                *found = find_in_backlog(coord, key, doc, id).await?;
            }
        }
        if let Some(standing) = found.as_ref().and_then(|f| f.standing(doc)) {
            return Ok(standing);
        }
    }
    match snapshot
        .doc
        .as_ref()
        .and_then(|doc| live_or_marked(doc, id))
    {
        // The mark says how it ended; its history entry says why, and which run was last.
        Some(JobStanding::Ended(end)) => {
            let entry = final_entry(coord, key, id).await?;
            return Ok(JobStanding::Ended(entry.unwrap_or(end)));
        }
        Some(live) => return Ok(live),
        None => {}
    }
    Ok(match final_entry(coord, key, id).await? {
        Some(end) => JobStanding::Ended(end),
        None => JobStanding::Unknown,
    })
}

/// Waits until job `id` of `key` has ended, and returns how. `on_progress` is told where it
/// stands at each change. Woken by the store where it pushes, else it reads every `poll`.
pub async fn wait(
    coord: &Coordinator,
    key: &str,
    id: &str,
    poll: Duration,
    on_progress: &(dyn Fn(&JobStanding) + Send + Sync),
) -> Result<JobEnd, ClientError> {
    let mut watch = coord.store().watch(key).await?;
    let mut last: Option<JobStanding> = None;
    let mut found = None;
    let started = Instant::now();
    loop {
        let standing = standing_with(coord, key, id, &mut found).await?;
        match &standing {
            JobStanding::Ended(end) => return Ok(end.clone()),
            JobStanding::Unknown if started.elapsed() > Duration::from_secs(5) => {
                return Err(ClientError::Refused {
                    key: key.to_owned(),
                    refusal: baton_core::Refusal::UnknownId { id: id.to_owned() },
                });
            }
            _ => {}
        }
        if last.as_ref() != Some(&standing) {
            on_progress(&standing);
            last = Some(standing);
        }
        match watch.as_mut() {
            Some(handle) => {
                let _ =
                    tokio::time::timeout(poll.max(Duration::from_secs(5)), handle.changed()).await;
            }
            None => tokio::time::sleep(poll).await,
        }
    }
}
