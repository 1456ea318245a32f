//! Compatibility with the baton before jobs: its reader (format 2), frozen here as it was, run
//! against the documents this baton writes.
//!
//! - A key without jobs is still written in format 2, and the old reader reads it and writes it
//!   back *unchanged*: this baton adds no field the old one would silently drop.
//! - A key with jobs is written in format 3, which the old reader refuses at its first check
//!   (so it can never drop a job by writing back a document it half understood); this baton's
//!   own error for a document newer than it names the release it needs.

use baton_core::job::JobResult;
use baton_core::{encode, Op, Outcome};
use serde::{Deserialize, Serialize};

mod common;
use common::*;

/// The reader of the baton before jobs (`crates/baton-core/src/doc.rs` at f68e874): the first
/// check of its `decode` and its document's shape. Marks are kept as the strings they are.
mod before_jobs {
    use super::*;

    pub const FORMAT: u64 = 2;

    #[derive(Debug, PartialEq, Eq)]
    pub enum Refused {
        NewerFormat(u64),
        Corrupt(String),
    }

    pub fn decode(bytes: &[u8]) -> Result<Doc, Refused> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| Refused::Corrupt(e.to_string()))?;
        let format = value
            .get("format")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| Refused::Corrupt("no format number".into()))?;
        if format > FORMAT {
            return Err(Refused::NewerFormat(format));
        }
        serde_json::from_value(value).map_err(|e| Refused::Corrupt(e.to_string()))
    }

    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Doc {
        pub format: u32,
        pub fence: u64,
        pub limit: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub epoch: Option<String>,
        pub next_arrival: u64,
        #[serde(default)]
        pub tickets: Vec<Ticket>,
        #[serde(default)]
        pub finished: Vec<String>,
        #[serde(default, skip_serializing_if = "is_zero")]
        pub finishes: u64,
        #[serde(default)]
        pub summary: Summary,
    }

    #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Summary {
        #[serde(default)]
        pub recent_hold_ms: Vec<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub last_outcome: Option<String>,
        #[serde(default, skip_serializing_if = "is_zero")]
        pub last_finished_wall_ms: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        pub consecutive_failures: u32,
    }

    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Ticket {
        pub id: String,
        pub token_hash: String,
        pub mode: String,
        pub state: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub order: Option<String>,
        pub arrival: u64,
        #[serde(default, skip_serializing_if = "is_false")]
        pub keep: bool,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub context: String,
        pub ttl_ms: u64,
        pub waiter_ttl_ms: u64,
        pub claim_ms: u64,
        pub heartbeat: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub deadline_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "is_false")]
        pub claimed: bool,
        #[serde(default, skip_serializing_if = "is_zero")]
        pub fence: u64,
        pub enqueued_wall_ms: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        pub granted_wall_ms: u64,
    }

    fn is_false(b: &bool) -> bool {
        !*b
    }

    fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
        *n == T::default()
    }
}

fn bytes_of(w: &World) -> Vec<u8> {
    encode(w.doc.as_ref().expect("a document")).expect("small")
}

#[test]
fn the_reader_before_jobs_reads_a_lock_key_and_writes_it_back_unchanged() {
    let mut w = World::new();
    let mut docs = Vec::new();
    w.run(Op::Enqueue(enqueue(1))).expect("t1 holds");
    docs.push(bytes_of(&w));
    let mut second = enqueue(2);
    second.order = Some("0002".into());
    second.keep = true;
    w.run(Op::Enqueue(second)).expect("t2 waits");
    docs.push(bytes_of(&w));
    w.run(Op::Release {
        token: token(1),
        outcome: Outcome::Succeeded,
        reason: None,
    })
    .expect("t2 granted");
    docs.push(bytes_of(&w));
    w.run(Op::Cancel {
        reason: None,
        id: "t2".into(),
        by: String::new(),
    })
    .expect("forced");
    docs.push(bytes_of(&w));
    for bytes in docs {
        let as_written: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
        assert_eq!(as_written["format"], 2, "{as_written}");
        let old = before_jobs::decode(&bytes).expect("the old reader reads it");
        let written_back = serde_json::to_value(&old).expect("serialise");
        assert_eq!(
            written_back, as_written,
            "the old reader would drop or change something"
        );
    }
}

#[test]
fn the_reader_before_jobs_refuses_a_key_with_jobs_and_this_one_names_its_release() {
    let mut w = World::new();
    w.run(Op::Submit(submit("j1"))).expect("submit");
    let bytes = bytes_of(&w);
    assert_eq!(
        before_jobs::decode(&bytes),
        Err(before_jobs::Refused::NewerFormat(3)),
        "refused before anything is read"
    );
    // Once the job has ended the key has none left: format 2 again, readable by the old one.
    w.run(Op::Claim {
        token: token(9),
        ttl_ms: 30_000,
    })
    .expect("claim");
    w.run(Op::Complete {
        token: token(9),
        id: None,
        result: JobResult::Succeeded,
    })
    .expect("complete");
    let bytes = bytes_of(&w);
    assert!(before_jobs::decode(&bytes).is_ok());
    // A document newer than this baton: the message names the release that reads it.
    let newer = br#"{"format":3,"fence":0,"limit":1,"next_arrival":1}"#;
    let message = format!("{}", baton_core::DecodeError::NewerFormat { found: 3 });
    assert!(message.contains("0.2"), "{message}");
    assert!(
        baton_core::decode(newer).is_ok(),
        "this baton reads format 3"
    );
}
