//! `baton reap`: frees the turns whose CI run has ended. A turn taken in CI records its run
//! ([`baton_core::ci_run`]); one pass reads every key under a prefix, asks each held turn's
//! provider about its run ([`providers`]), and force-releases, as `cancelled` with the reason
//! "its CI run ended (CONCLUSION)", every turn whose run is over, so the next in line gets the
//! key at once instead of when the lease runs out. A run that is still going, or that cannot
//! be judged (no token, an error, a rate limit), keeps its turn.

mod providers;
mod state;

use std::collections::HashMap;

use baton_core::ci_run::CiRun;
use baton_core::{Op, Refusal, Request};

pub use providers::{token_variable, Judged, Providers};

use crate::coordinator::Coordinator;
use crate::error::ClientError;
use crate::turn::ids::new_attempt_id;

/// One held turn with a CI run, as a pass saw it.
#[derive(Clone, Debug)]
pub struct Turn {
    /// The key.
    pub key: String,
    /// The ticket's id.
    pub id: String,
    /// Its context.
    pub context: String,
    /// Its CI run.
    pub run: CiRun,
}

/// What one pass did.
#[derive(Debug, Default)]
pub struct Pass {
    /// Turns force-released, each with its run's conclusion.
    pub reaped: Vec<(Turn, String)>,
    /// Turns whose run is still going, each with the run's status.
    pub going: Vec<(Turn, String)>,
    /// Turns left alone because their run could not be judged or the release failed: why.
    pub unjudged: Vec<(Turn, String)>,
}

/// One pass over every key under `prefix`: judges each held turn that has a CI run, and
/// force-releases those whose run has ended, recorded as cancelled by `by`. A provider is asked
/// once per run, however many keys the run holds.
pub async fn reap(
    coord: &Coordinator,
    prefix: &str,
    providers: &Providers,
    by: &str,
) -> Result<Pass, ClientError> {
    let statuses = crate::status::read_all(coord, prefix).await?;
    let mut judged: HashMap<CiRun, Judged> = HashMap::new();
    let mut pass = Pass::default();
    for status in &statuses {
        for holder in status.holders.iter().filter(|h| !h.job) {
            let Some(run) = &holder.ci_run else { continue };
            let turn = Turn {
                key: status.key.clone(),
                id: holder.id.clone(),
                context: holder.context.clone(),
                run: run.clone(),
            };
            let verdict = match judged.get(run) {
                Some(verdict) => verdict.clone(),
                None => {
                    let verdict = providers.judge(run).await;
                    judged.insert(run.clone(), verdict.clone());
                    verdict
                }
            };
            match verdict {
                Judged::Going(status) => pass.going.push((turn, status)),
                Judged::Unjudged(why) => pass.unjudged.push((turn, why)),
                Judged::Ended(conclusion) => match release(coord, &turn, by, &conclusion).await {
                    Ok(true) => pass.reaped.push((turn, conclusion)),
                    // Ended meanwhile by its holder or an operator: nothing to free.
                    Ok(false) => {}
                    Err(error) => {
                        let why = format!(
                            "its CI run ended ({conclusion}), but the release failed: {error}"
                        );
                        pass.unjudged.push((turn, why));
                    }
                },
            }
        }
    }
    Ok(pass)
}

/// The history's reason for a turn freed because its run ended with `conclusion`.
pub fn reason(conclusion: &str) -> String {
    // The provider's word, as a word: nothing it sends can make the history say more.
    let word: String = conclusion
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ' '))
        .take(40)
        .collect();
    format!("its CI run ended ({word})")
}

/// Force-releases `turn`: `false` if it had already ended.
async fn release(
    coord: &Coordinator,
    turn: &Turn,
    by: &str,
    conclusion: &str,
) -> Result<bool, ClientError> {
    let op = Op::Cancel {
        id: turn.id.clone(),
        by: by.to_owned(),
        reason: Some(reason(conclusion)),
    };
    let mut request = Request::new(new_attempt_id(), op);
    match coord.execute(&turn.key, &mut request).await {
        Ok(_) => Ok(true),
        Err(ClientError::Refused {
            refusal: Refusal::Ended { .. } | Refusal::UnknownId { .. },
            ..
        }) => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_carries_the_providers_word_and_nothing_else() {
        assert_eq!(reason("cancelled"), "its CI run ended (cancelled)");
        assert_eq!(reason("timed_out"), "its CI run ended (timed_out)");
        assert_eq!(reason("x)\n\u{1b}[31mred"), "its CI run ended (x31mred)");
        assert!(reason(&"a".repeat(1_000)).len() < 80);
    }
}
