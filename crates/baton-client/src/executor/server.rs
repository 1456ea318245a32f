//! Writes sent to `baton serve` ([`RemoteStore`]), which runs each with its own coordinator.
//! The same rules hold on this side of the wire:
//!
//! - the phases a write set are counted from before the request was sent, less how long
//!   before the server received it they may have started ([`crate::remote::Ran::started_before_ms`]);
//! - a write whose answer was lost may have run: it is sent again marked as a retry (an
//!   operation with [`Request::finishes_seen`] from before the first attempt, a value write
//!   with the version read before it), at most [`crate::retry::MAX_LOST_ANSWERS`] times in a
//!   row, and an operation's answer is then dated by the first attempt's send, with no grants
//!   of its own.

use std::sync::Arc;

use async_trait::async_trait;
use baton_core::kv::Write;
use baton_core::lease::Basis;
use baton_core::{names, Request};
use baton_store::Store;
use serde_json::{json, Value};

use super::direct::earlier;
use super::optimistic::decoded_value;
use super::{Executed, Executor};
use crate::error::ClientError;
use crate::known::{Cached, Known};
use crate::remote::{Ran, RemoteStore, RunError};
use crate::retry::LostAnswers;
use crate::settings::{change_rule, Freezes, SettingsChange, SettingsChanged};
use crate::time::LocalClock;

/// Writes through the servers of a [`RemoteStore`].
#[derive(Debug)]
pub(crate) struct Server {
    server: Arc<RemoteStore>,
    known: Arc<Known>,
    local: Arc<dyn LocalClock>,
}

impl Server {
    /// Sends writes to `server`, sharing `known` with its coordinator.
    pub(crate) fn new(
        server: Arc<RemoteStore>,
        known: Arc<Known>,
        local: Arc<dyn LocalClock>,
    ) -> Server {
        Server {
            server,
            known,
            local,
        }
    }

    /// This key's finish count as this side last saw it, read first when it never has; `None`
    /// once the request carries one already.
    async fn finishes_before(
        &self,
        key: &str,
        request: &Request,
    ) -> Result<Option<u64>, ClientError> {
        if request.finishes_seen.is_some() {
            return Ok(None);
        }
        let doc = match self.known.cached(key) {
            Some(Cached { doc, .. }) => doc,
            None => self.known.load(self.server.as_ref(), key).await?.doc,
        };
        Ok(Some(doc.map_or(0, |doc| doc.finishes)))
    }

    /// The answer of an operation the server ran, sent at `sent`: dated from the send less how
    /// long before the server received it its phases may have started; with no date and no
    /// grants when it is an earlier call's retry, or the server cannot date it (then from the
    /// earliest attempt of this call that may have landed).
    fn ran(
        &self,
        key: &str,
        ran: Ran,
        sent: Basis,
        maybe_landed: Option<Basis>,
        retried: bool,
    ) -> Executed {
        self.known
            .remember(key, None, Some(Arc::new(ran.doc.clone())));
        let (basis, granted) = match ran.started_before_ms {
            Some(behind_ms) => (Some(Basis { behind_ms, ..sent }), ran.granted),
            None if retried => (None, Vec::new()),
            None => (maybe_landed, ran.granted),
        };
        Executed {
            reply: ran.reply,
            doc: ran.doc,
            version: None,
            ended: Vec::new(),
            granted,
            basis,
        }
    }
}

#[async_trait]
impl Executor for Server {
    async fn run(&self, key: &str, request: &mut Request) -> Result<Executed, ClientError> {
        let retried_from_earlier_call = request.finishes_seen.is_some();
        let mut maybe_landed: Option<Basis> = None;
        let mut lost = LostAnswers::default();
        loop {
            let finishes = self.finishes_before(key, request).await?;
            let sent = Basis {
                basis_local_ms: self.local.now_ms(),
                behind_ms: 0,
            };
            match self.server.run(key, request).await {
                Ok(ran) => {
                    let retried = retried_from_earlier_call;
                    return Ok(self.ran(key, ran, sent, maybe_landed, retried));
                }
                Err(RunError::Ambiguous {
                    error,
                    finishes_seen,
                }) => {
                    // The server's own count was taken after this call's first attempt may
                    // have landed: this side's, from before it, comes first.
                    if request.finishes_seen.is_none() {
                        request.finishes_seen = finishes.or(finishes_seen);
                    }
                    maybe_landed = Some(earlier(maybe_landed, sent));
                    self.known.forget(key);
                    lost.lost_one(error)?;
                }
                Err(RunError::Failed(error)) => {
                    self.known.forget(key);
                    return Err(error.into());
                }
                Err(other) => return Err(other.refusal_of(key)),
            }
        }
    }

    /// Sends `write` to a server, again when its answer is lost: the server recognises the id
    /// of an attempt that ran. The value's version is read first, so that a retry can carry it
    /// ([`Write::seen_version`]): the answer to the first attempt may be lost on the way back,
    /// after which nothing this side learns dates from before that attempt.
    async fn write_value(&self, name: &str, write: &Write) -> Result<u64, ClientError> {
        baton_core::kv::check_write(name, write).map_err(|e| ClientError::refused(name, e))?;
        let read = self.server.load(&names::value_key(name)).await?;
        let seen_version = decoded_value(name, read.as_ref())?.map_or(0, |doc| doc.version);
        let mut write = write.clone();
        let mut lost = LostAnswers::default();
        loop {
            match self.server.write_value(name, &write).await {
                Ok(version) => return Ok(version),
                Err(RunError::Ambiguous { error, .. }) => {
                    write.seen_version.get_or_insert(seen_version);
                    lost.lost_one(error)?;
                }
                Err(RunError::Failed(error)) => return Err(error.into()),
                Err(other) => return Err(other.refusal_of(name)),
            }
        }
    }

    /// Sends a pause or a resume to the server (`POST /v1/freezes`), which sets it, waits for
    /// every writer's copy of the settings, and writes the keys it covers, as directly; changes
    /// a rule by CAS of the settings document through the server.
    async fn change_settings(
        &self,
        change: SettingsChange,
    ) -> Result<SettingsChanged, ClientError> {
        let (target, body) = match &change {
            SettingsChange::Pause(freeze) => (freeze.target.clone(), json!({ "pause": freeze })),
            SettingsChange::Resume { target, by } => (
                target.clone(),
                json!({ "resume": { "target": target, "by": by } }),
            ),
            SettingsChange::Rule(rule) => return change_rule(self.server.as_ref(), rule).await,
        };
        let answer = match self.server.change_freezes(&body).await {
            Ok(answer) => answer,
            Err(RunError::Ambiguous { error, .. } | RunError::Failed(error)) => {
                return Err(error.into())
            }
            Err(RunError::ValueRefused(refused)) => {
                return Err(odd_answer(format!(
                    "the server answered a freeze with a value's refusal: {refused}"
                )))
            }
            Err(other) => return Err(other.refusal_of(&target)),
        };
        let ended = match change {
            SettingsChange::Resume { .. } => parsed(&answer["ended"])?,
            _ => Vec::new(),
        };
        Ok(SettingsChanged {
            ended,
            touched: parsed(&answer["touched"])?,
            rule_was_there: false,
        })
    }

    async fn put_record(&self, key: &str, name: &str, bytes: &[u8]) -> Result<(), ClientError> {
        Ok(self.server.put_record(key, name, bytes).await?)
    }

    /// The freezes the caller may read (`GET /v1/freezes`).
    async fn freezes(&self) -> Result<Freezes, ClientError> {
        parsed(&self.server.freezes().await?)
    }
}

/// Part of a server's answer about freezes, as `T`.
fn parsed<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, ClientError> {
    serde_json::from_value(value.clone()).map_err(|e| {
        odd_answer(format!(
            "the server's answer about freezes is not one ({e}): {value}"
        ))
    })
}

fn odd_answer(message: String) -> ClientError {
    ClientError::Store(baton_store::StoreError::Backend {
        store: "baton serve".into(),
        source: message.into(),
    })
}
