//! The storage contract of baton, and the stores that keep it.
//!
//! A store only moves bytes. It keeps, per key, one small *hot document* (opaque bytes plus a
//! version) that changes only by compare-and-swap, an append-only *history log*, and named
//! *records* (values up to [`RECORD_MAX_BYTES`] that a plain write replaces, outside any CAS).
//! Every rule about tickets, leases, fences and jobs lives in `baton-core`; nothing here decodes
//! a document or a record.
//!
//! # Layout
//!
//! - [`Store`]: the trait every store implements: `load`, `cas` (with history appended in the
//!   same transaction), `history`, `list`, `watch`, `clock`, and `put_record`/`get_record` for
//!   small values kept beside a key, outside its hot document (a job's parameters, a run's
//!   report), checked by [`check_record`].
//! - [`StoreError`]: the one error enum of every store.
//! - [`memory`]: an in-process store for unit tests of the core and client. Never a stand-in for
//!   a store under test.
//!
//! Each store is a folder behind a cargo feature of its own; every one is on by default.
//!
//! - `sqlite` (feature `sqlite`): the embedded default, one SQLite file shared by many processes
//!   on one host; the host's boot-time clock ([`boot_clock`]).
//! - `etcd` (feature `etcd`): an etcd cluster; a CAS is one etcd transaction,
//!   wake-ups come from etcd watches, leases are judged by observation (etcd has no clock).
//! - `redis` (feature `redis`): `redis://` and `rediss://`, one script per CAS, pub/sub wake-ups,
//!   the server's `TIME` as the clock.
//! - `postgres` (feature `postgres`): `postgres://` and `postgresql://`, one statement per CAS,
//!   `LISTEN`/`NOTIFY` wake-ups, the server's `clock_timestamp()` as the clock.
//! - `dynamodb` (feature `dynamodb`): `dynamodb://TABLE`, one conditional `PutItem` per CAS,
//!   history through [`deferred`], no push and no clock (leases judged by observation);
//!   history expires by the table's TTL, which `baton init` turns on.
//! - `s3` (feature `s3`): `s3://bucket/prefix`, one object per key changed by conditional PUT
//!   (`If-Match` on its ETag), history entries as objects of their own ([`deferred`]), no push
//!   (waiters poll); the server's clock from the `Date` header of its responses, whole seconds
//!   (`clock_uncertain_ms` 1000); `baton init` sets the bucket's lifecycle rule that expires
//!   history.
//! - `conformance` (feature `conformance`): one `pub async fn` per behaviour of the contract,
//!   grouped by capability, which every store's tests call through `conformance_tests!`.
//! - [`history_retention`]: `history_keep` and `history_max_age`, taken from a store's URL.
//! - [`deferred`]: history for stores without multi-record transactions (S3, DynamoDB): entries
//!   ride in the key's hot record until a later writer has stored them on their own.
//! - [`server_clock`]: a server's clock estimated from the time its replies carry, so reading it
//!   costs no round trip.
//! - [`url`]: the one table of the stores a URL can name (schemes, feature, forms, opener),
//!   which `open` and every URL message read, and the URL helpers the stores share.
//! - [`key_range`]: the successor of a prefix, where every range scan by prefix ends.
//! - [`arrivals_seen`]: the versions of the stores that keep arrivals beside a document: the
//!   document's version and the arrivals its reader saw, in one.
//! - `aws`: the AWS configuration S3 and DynamoDB share (credentials, region, endpoint).
//!
//! Every store's folder has the same files: `mod.rs` (the store and its operations), `url.rs`
//! (its URL), `errors.rs` (its driver's errors as [`StoreError`]) and `layout.rs` (where its
//! documents, history and records lie in the backend).
#![deny(missing_docs)]

mod error;
pub mod history_retention;
pub mod key_range;
pub mod memory;
mod store;
pub mod url;

#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(feature = "etcd")]
pub mod etcd;

#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "postgres")]
pub mod postgres;

#[cfg(feature = "s3")]
pub mod s3;

#[cfg(feature = "dynamodb")]
pub mod dynamodb;

#[cfg(feature = "conformance")]
pub mod conformance;

pub mod arrivals_seen;
#[cfg(any(feature = "s3", feature = "dynamodb"))]
pub mod aws;

pub mod boot_clock;
pub mod deferred;
pub mod server_clock;
#[cfg(any(feature = "postgres", feature = "redis", feature = "sqlite"))]
mod wakes;

pub use error::StoreError;
pub use store::{
    check_record, check_record_name, Capabilities, CasOutcome, Change, Compute, DueKey,
    HistoryRecord, Replacement, Store, StoreClock, Updated, Version, Versioned, Wake, WatchHandle,
    WithDocs, RECORD_MAX_BYTES, RECORD_NAME_MAX_BYTES,
};

/// The result type of every store operation.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
