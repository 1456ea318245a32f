//! How documents, history and records lie in the database, and the statements that read and
//! write them: every operation is ONE statement.
//!
//! | table | key | holds |
//! |---|---|---|
//! | `baton_docs` | `key` (collation "C") | `version`, `doc`, `history_seq` (the key's last seq), `due_ms` |
//! | `baton_history` | `key`, `seq` | `entry`, `written_ms` (the server's clock) |
//! | `baton_records` | `key`, `name` | `bytes` |
//! | `baton_meta` | `name` | the schema's version |
//!
//! `schema.rs` creates and migrates the tables; `mod.rs` sends these statements.

/// The `NOTIFY` channel of every baton store. Stores in other schemas of the same database share
/// it, which only means spurious wake-ups for equal keys.
pub(super) const CHANNEL: &str = "baton_changed";

/// The largest document a wake-up carries (in bytes, before base64 makes it a third larger):
/// `NOTIFY` takes payloads under 8,000 bytes, and a key (up to 256 bytes), a version (up to
/// 20 digits), two newlines and the `b64,` mark go with it, which leaves 7,717 characters for
/// the base64 of the document and its line breaks (one every 76): 5,700 bytes take 7,600 and
/// 99. A larger document wakes its watchers without it, and they read it. (Hex, which baton
/// sent before, carried 3,800: a key with 16 queued tickets no longer fit.)
pub const PUSHED_DOCUMENT_MAX: usize = 5_700;

/// What starts a document sent in base64. An older baton's payload carries hex, which never
/// holds a comma, and an older listener that meets this mark fails to read hex and reads the
/// key instead: either way nobody takes one encoding for the other.
pub(super) const BASE64_MARK: &str = "b64,";

/// The payload of a CAS's wake-up: `KEY \n VERSION \n b64,BASE64(DOCUMENT)`, the last part
/// left empty when the document is over [`PUSHED_DOCUMENT_MAX`]. Keys hold no control
/// characters, so the first two newlines split it; PostgreSQL's base64 breaks its lines every
/// 76 characters, and the listener skips the breaks (taking them out here, with `translate`,
/// was the server's costliest step of a CAS). `$doc` is the statement's document parameter;
/// `$1` is always the key.
macro_rules! notify_payload {
    ($doc:literal) => {
        concat!(
            "$1 || E'\\n' || written.version || E'\\n' || CASE WHEN octet_length(",
            $doc,
            ") <= 5700 THEN 'b64,' || encode(",
            $doc,
            ", 'base64') ELSE '' END"
        )
    };
}

/// The time stamp every reply carries: the server's wall clock in whole milliseconds, rounded
/// down (an estimate that is low by a fraction of a millisecond ends other leases late, never
/// early). `clock_timestamp()`, not `now()`: the time of the reply, not of the transaction's
/// start.
macro_rules! now_ms {
    () => {
        "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    };
}
pub(super) use now_ms;

/// The CTEs that append a CAS's history and trim the key's: `$entries` the entries parameter,
/// `$keep` `history_keep`, `$age` `history_max_age` in ms (null: no age). Entries are numbered
/// from the key's counter in `written` (so only a CAS that wrote appends); of them only those
/// within the newest `$keep` are inserted, and older rows of the key go in the same statement:
/// by count, a range of the primary key; by age, among the key's 64 oldest rows only (an entry
/// without a time counts as old), so a CAS never scans a long history. Seqs are never changed.
macro_rules! append_and_trim {
    ($entries:literal, $keep:literal, $age:literal) => {
        concat!(
            "appended AS (
        INSERT INTO baton_history (key, seq, entry, written_ms)
        SELECT $1, written.history_seq - cardinality(",
            $entries,
            "::bytea[]) + entries.n,
               entries.entry, ",
            now_ms!(),
            "
        FROM written, unnest(",
            $entries,
            "::bytea[]) WITH ORDINALITY AS entries (entry, n)
        WHERE entries.n > cardinality(",
            $entries,
            "::bytea[]) - ",
            $keep,
            "::bigint
    ),
    trimmed_by_count AS (
        DELETE FROM baton_history AS old USING written
        WHERE cardinality(",
            $entries,
            "::bytea[]) > 0 AND old.key = $1
          AND old.seq <= written.history_seq - ",
            $keep,
            "::bigint
    ),
    trimmed_by_age AS (
        DELETE FROM baton_history AS old USING written
        WHERE cardinality(",
            $entries,
            "::bytea[]) > 0 AND ",
            $age,
            "::bigint IS NOT NULL
          AND old.key = $1
          AND old.seq IN (SELECT seq FROM baton_history WHERE key = $1 ORDER BY seq LIMIT 64)
          AND coalesce(old.written_ms, 0) < ",
            now_ms!(),
            " - ",
            $age,
            "::bigint
    ),"
        )
    };
}

pub(super) const LOAD: &str = concat!(
    "SELECT doc.version, doc.doc, ",
    now_ms!(),
    " AS now_ms
     FROM (VALUES (1)) AS one (x) LEFT JOIN baton_docs AS doc ON doc.key = $1"
);

pub(super) const CLOCK: &str = concat!("SELECT ", now_ms!(), " AS now_ms");

/// How long the server waits for the next statement of an update's transaction before it ends
/// the session, and with it the transaction and its row lock (`update.rs`). Its statements
/// follow each other within milliseconds.
pub const IDLE_IN_TRANSACTION_MS: u64 = 2_000;

/// Opens an update's transaction (`update.rs`): one round trip, by the simple protocol, which
/// takes two statements in one message.
pub(super) const BEGIN: &str = "BEGIN; SET LOCAL idle_in_transaction_session_timeout = 2000";

/// Reads a key's row and locks it until the transaction ends ([`Store::update`]): `$1` key. No
/// row, no reply row (and nothing locked).
///
/// [`Store::update`]: crate::Store::update
pub(super) const LOCK_ROW: &str = concat!(
    "SELECT doc.version, doc.doc, ",
    now_ms!(),
    " AS now_ms
     FROM baton_docs AS doc WHERE doc.key = $1 FOR UPDATE"
);

/// The CAS of an existing document: `$1` key, `$2` expected version, `$3` document, `$4`
/// history entries, `$5` due time (the due index), `$6` `history_keep`, `$7` `history_max_age`
/// in ms (or null). The current row is read (from the statement's snapshot) only when the
/// update did not happen.
pub(super) const CAS_UPDATE: &str = concat!(
    "WITH written AS (
        UPDATE baton_docs
        SET version = version + 1,
            doc = $3,
            history_seq = history_seq + cardinality($4::bytea[]),
            due_ms = $5
        WHERE key = $1 AND version = $2
        RETURNING version, history_seq
    ),
    ",
    append_and_trim!("$4", "$6", "$7"),
    "
    notified AS (
        SELECT pg_notify('baton_changed', ",
    notify_payload!("$3"),
    ") FROM written
    )
    SELECT
        (SELECT version FROM written) AS written_version,
        (SELECT count(*) FROM notified) AS n_notified,
        current.version AS current_version,
        current.doc AS current_doc,
        ",
    now_ms!(),
    " AS now_ms
    FROM (VALUES (1)) AS one (x)
    LEFT JOIN baton_docs AS current ON current.key = $1 AND NOT EXISTS (SELECT FROM written)"
);

/// The CAS of a key without a document: `$1` key, `$2` document, `$3` history entries, `$4`
/// due time, `$5` `history_keep`, `$6` `history_max_age` in ms (or null). The
/// history counter starts after any entries already logged for the key (none, unless someone
/// deleted its row by hand), so seqs never repeat.
pub(super) const CAS_CREATE: &str = concat!(
    "WITH written AS (
        INSERT INTO baton_docs (key, version, doc, history_seq, due_ms)
        SELECT $1, 1, $2, coalesce(max(seq), 0) + cardinality($3::bytea[]), $4
        FROM baton_history WHERE key = $1
        ON CONFLICT (key) DO NOTHING
        RETURNING version, history_seq
    ),
    ",
    append_and_trim!("$3", "$5", "$6"),
    "
    notified AS (
        SELECT pg_notify('baton_changed', ",
    notify_payload!("$2"),
    ") FROM written
    )
    SELECT
        (SELECT version FROM written) AS written_version,
        (SELECT count(*) FROM notified) AS n_notified,
        current.version AS current_version,
        current.doc AS current_doc,
        ",
    now_ms!(),
    " AS now_ms
    FROM (VALUES (1)) AS one (x)
    LEFT JOIN baton_docs AS current ON current.key = $1 AND NOT EXISTS (SELECT FROM written)"
);

pub(super) const HISTORY: &str = "SELECT seq, entry FROM baton_history WHERE key = $1 AND seq > $2
     ORDER BY seq ASC LIMIT $3";

pub(super) const HISTORY_TAIL: &str =
    "SELECT seq, entry FROM baton_history WHERE key = $1 ORDER BY seq DESC LIMIT $2";

/// `^@` is "starts with": no wildcards, so `%` and `_` in a prefix are plain characters. The key
/// column's collation is "C", so the planner turns it into a range scan of the primary key —
/// when it plans with the prefix in hand, which is why this statement is sent unnamed (planned
/// at each execution) rather than prepared once with a generic plan.
pub(super) const LIST: &str = "SELECT key FROM baton_docs WHERE key ^@ $1 ORDER BY key";

/// Keys of the due index under a prefix, earliest first: `$1` prefix, `$2` limit. The partial
/// index on (due_ms, key) holds only keys with a due time. Unnamed, as `LIST`.
/// One page of the due index: the `$2` earliest due keys after `($5, $6)` (due time, key),
/// each saying whether it is under the prefix `$1`; of the first `$3` keys under it, those due
/// by `$4` come with their document ([`WithDocs`]). The others' documents stay unread (a
/// TOASTed one is never detoasted).
///
/// The page is read before the prefix is looked at, so the only plan is an ordered scan of the
/// partial due index, whose size does not grow with keys that have no due time: with the
/// prefix in the `WHERE` the planner may take a range scan of the primary key, or a scan of the
/// table, which read every key that ever had a job (measured: 11 ms a look next to 10,000
/// finished keys, against 0.1 ms). Dead index entries left by the writes that took keys out
/// are skipped after the first scan passes them (PostgreSQL marks them), so churn does not slow
/// it either. A prefix costs the due keys outside it that come first, as on Redis.
pub(super) const DUE_PAGE: &str = "SELECT key, due_ms, under,
       CASE WHEN under AND n <= $3 AND due_ms <= $4 THEN version END AS version,
       CASE WHEN under AND n <= $3 AND due_ms <= $4 THEN doc END AS doc
     FROM (SELECT key, due_ms, version, doc, under,
                  count(*) FILTER (WHERE under) OVER (ORDER BY due_ms, key) AS n
           FROM (SELECT key, due_ms, version, doc, left(key, length($1)) = $1 AS under
                 FROM baton_docs WHERE due_ms IS NOT NULL AND (due_ms, key) > ($5, $6)
                 ORDER BY due_ms, key LIMIT $2) AS page) AS due
     ORDER BY due_ms, key";

/// How many due keys a read of [`DUE_PAGE`] takes.
pub(super) const DUE_PAGE_KEYS: i64 = 256;

/// Writes a record: `$1` key, `$2` name, `$3` bytes. Replaces the record of that name.
pub(super) const PUT_RECORD: &str =
    "INSERT INTO baton_records (key, name, bytes) VALUES ($1, $2, $3)
     ON CONFLICT (key, name) DO UPDATE SET bytes = excluded.bytes";

pub(super) const GET_RECORD: &str = "SELECT bytes FROM baton_records WHERE key = $1 AND name = $2";

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn an_update_ends_a_session_idle_in_its_transaction_as_documented() {
        assert!(BEGIN.ends_with(&format!("= {IDLE_IN_TRANSACTION_MS}")));
    }

    #[test]
    fn every_cas_notifies_the_channel_the_listener_listens_on() {
        for statement in [CAS_CREATE, CAS_UPDATE] {
            assert!(statement.contains(&format!("pg_notify('{CHANNEL}', $1 ||")));
            // The statement's limit is the constant the listener and the docs name.
            assert!(statement.contains(&format!(
                ") <= {PUSHED_DOCUMENT_MAX} THEN '{BASE64_MARK}' || encode("
            )));
        }
    }
}
