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

/// The `NOTIFY` channel every write is also told on, by its bare key: the channel of prefix
/// watchers (idle workers) and of batons that listened on it alone before wake-ups went by key.
/// Stores in other schemas of the same database share it, which only means spurious wake-ups.
pub(super) const CHANNEL: &str = "baton_changed";

/// What starts a key's own channel ([`key_channel`]).
const KEY_CHANNEL_MARK: &str = "baton_k_";

/// How many bytes of the key's SHA-256 name its channel: 12 (24 hex digits), far from a chance
/// collision, which would only cost spurious wake-ups; the name stays under PostgreSQL's 63.
const KEY_CHANNEL_BYTES: usize = 12;

/// The channel a write of `key` notifies with its document, and that watchers of the key listen
/// on: `baton_k_` and the first 12 bytes of the SHA-256 of the key's UTF-8, in hex. A channel
/// per key, so that a write wakes only the processes watching that key: on one shared channel
/// every listener of the database received, woke for and decoded every write (with 20 idle
/// holders beside it, an uncontended acquire + release took four times as long). A hash, as a
/// channel is a name of at most 63 bytes and a key may hold 256. Every baton must compute the
/// same name: the statements compute it in SQL ([`key_channel_sql`]), the listener here.
pub(super) fn key_channel(key: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(key.as_bytes());
    format!(
        "{KEY_CHANNEL_MARK}{}",
        hex::encode(&digest[..KEY_CHANNEL_BYTES])
    )
}

/// [`key_channel`] of the statement's key (`$1`), in SQL.
macro_rules! key_channel_sql {
    () => {
        "'baton_k_' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 24)"
    };
}

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

/// The CTEs that append a CAS's history and trim the key's by count: `$entries` the entries
/// parameter (never empty: a write without entries takes a statement without these CTEs),
/// `$keep` `history_keep`. Entries are numbered from the key's counter in `written` (so only a
/// CAS that wrote appends); of them only those within the newest `$keep` are inserted, and
/// older rows of the key go in the same statement, a range of the primary key. Seqs are never
/// changed.
///
/// The range deleted is the entries this write pushed out of the newest `$keep`, and only
/// once every 64 seqs everything older: a deleted row stays in the index until a vacuum, and a
/// range from the key's first seq walked every one of them on each write of a key past
/// `$keep`, a cost that grew with the key's writes. The sweep from the first seq still takes
/// what a writer with a larger `history_keep` left.
///
/// The rows to trim are found by the key the write returned, not by the parameter: how many
/// rows a key has is then estimated alike for a generic plan and for one made with the key in
/// hand, so the server keeps the generic plan ([`Appends`]); with the parameter, a history
/// most of which is one key's made the generic plan look dear.
macro_rules! append_and_trim {
    ($entries:literal, $keep:literal) => {
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
        WHERE old.key = written.key AND old.seq <= written.history_seq - ",
            $keep,
            "::bigint
          AND old.seq > CASE
              WHEN written.history_seq / 64 > (written.history_seq - cardinality(",
            $entries,
            "::bytea[])) / 64
              THEN 0
              ELSE written.history_seq - cardinality(",
            $entries,
            "::bytea[]) - ",
            $keep,
            "::bigint
          END
    ),"
        )
    };
}

/// The CTE that trims the key's history by age, after [`append_and_trim`]: `$age`
/// `history_max_age` in ms. Among the key's 64 oldest rows only (an entry without a time
/// counts as old), so a CAS never scans a long history.
macro_rules! trim_by_age {
    ($age:literal) => {
        concat!(
            "
    trimmed_by_age AS (
        DELETE FROM baton_history AS old USING written
        WHERE old.key = written.key
          AND old.seq IN (
              SELECT seq FROM baton_history WHERE key = written.key ORDER BY seq LIMIT 64
          )
          AND coalesce(old.written_ms, 0) < ",
            now_ms!(),
            " - ",
            $age,
            "::bigint
    ),"
        )
    };
}

/// The end of every CAS statement, after its CTEs: the wake-up of the key's watchers on the
/// key's channel (with the document `$doc`), and on the shared [`CHANNEL`] by the bare key (its
/// listeners read again); then the answer: the version written, or the current row (read from the
/// statement's snapshot) when the write did not happen, with the server's time either way.
macro_rules! notify_and_answer {
    ($doc:literal) => {
        concat!(
            "
    notified AS (
        SELECT pg_notify(",
            key_channel_sql!(),
            ", ",
            notify_payload!($doc),
            "), pg_notify('baton_changed', $1) FROM written
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

/// What a CAS writes besides the document, which decides its statement. Each statement holds
/// only the parts its writes need, so that PostgreSQL plans it once per connection: a
/// statement whose parts a parameter switches off (no entries, no age) has a generic plan
/// dearer than the plans made for each call, and once the tables have statistics the server
/// plans it again on every call, which cost more than running it (0.2 ms against 0.03).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Appends {
    /// No history entries: the document (and the due index) only.
    Nothing,
    /// Entries, the key's history trimmed to `history_keep`.
    Entries,
    /// Entries, trimmed to `history_keep` and to `history_max_age`.
    EntriesAged,
}

impl Appends {
    /// What a CAS appending `n_entries` entries needs, `aged` when the store trims by age.
    pub(super) fn of(n_entries: usize, aged: bool) -> Appends {
        match (n_entries, aged) {
            (0, _) => Appends::Nothing,
            (_, false) => Appends::Entries,
            (_, true) => Appends::EntriesAged,
        }
    }

    /// The CAS of an existing document: `$1` key, `$2` expected version, `$3` document, `$4`
    /// due time (the due index); with entries `$5` the entries and `$6` `history_keep`; aged,
    /// `$7` `history_max_age` in ms. The current row is read (from the statement's snapshot)
    /// only when the update did not happen.
    pub(super) fn update_statement(self) -> &'static str {
        match self {
            Appends::Nothing => CAS_UPDATE,
            Appends::Entries => CAS_UPDATE_ENTRIES,
            Appends::EntriesAged => CAS_UPDATE_ENTRIES_AGED,
        }
    }

    /// The CAS of a key without a document: `$1` key, `$2` document, `$3` due time; with
    /// entries `$4` the entries and `$5` `history_keep`; aged, `$6` `history_max_age` in ms.
    /// The history counter starts after any entries already logged for the key (none, unless
    /// someone deleted its row by hand), so seqs never repeat.
    pub(super) fn create_statement(self) -> &'static str {
        match self {
            Appends::Nothing => CAS_CREATE,
            Appends::Entries => CAS_CREATE_ENTRIES,
            Appends::EntriesAged => CAS_CREATE_ENTRIES_AGED,
        }
    }
}

/// The `written` CTE of an update: `$history` sets the key's history counter.
macro_rules! cas_update {
    ($history:literal) => {
        concat!(
            "WITH written AS (
        UPDATE baton_docs
        SET version = version + 1,
            doc = $3,
            history_seq = ",
            $history,
            ",
            due_ms = $4
        WHERE key = $1 AND version = $2
        RETURNING key, version, history_seq
    ),
    "
        )
    };
}

/// The `written` CTE of a create: `$history` the key's history counter from the entries
/// already logged.
macro_rules! cas_create {
    ($history:literal) => {
        concat!(
            "WITH written AS (
        INSERT INTO baton_docs (key, version, doc, history_seq, due_ms)
        SELECT $1, 1, $2, ",
            $history,
            ", $3
        FROM baton_history WHERE key = $1
        ON CONFLICT (key) DO NOTHING
        RETURNING key, version, history_seq
    ),
    "
        )
    };
}

const CAS_UPDATE: &str = concat!(cas_update!("history_seq"), notify_and_answer!("$3"));

const CAS_UPDATE_ENTRIES: &str = concat!(
    cas_update!("history_seq + cardinality($5::bytea[])"),
    append_and_trim!("$5", "$6"),
    notify_and_answer!("$3")
);

const CAS_UPDATE_ENTRIES_AGED: &str = concat!(
    cas_update!("history_seq + cardinality($5::bytea[])"),
    append_and_trim!("$5", "$6"),
    trim_by_age!("$7"),
    notify_and_answer!("$3")
);

const CAS_CREATE: &str = concat!(
    cas_create!("coalesce(max(seq), 0)"),
    notify_and_answer!("$2")
);

const CAS_CREATE_ENTRIES: &str = concat!(
    cas_create!("coalesce(max(seq), 0) + cardinality($4::bytea[])"),
    append_and_trim!("$4", "$5"),
    notify_and_answer!("$2")
);

const CAS_CREATE_ENTRIES_AGED: &str = concat!(
    cas_create!("coalesce(max(seq), 0) + cardinality($4::bytea[])"),
    append_and_trim!("$4", "$5"),
    trim_by_age!("$6"),
    notify_and_answer!("$2")
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

/// The most due keys a read of [`DUE_PAGE`] takes. The first page is as many as the caller
/// asked for (under a prefix that holds most due keys, one page is enough), each next one
/// twice the last, up to this: every row read and sent is the server's work.
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

    const ALL_APPENDS: [Appends; 3] = [Appends::Nothing, Appends::Entries, Appends::EntriesAged];

    /// Every CAS statement, updates and creates.
    fn all_cas() -> impl Iterator<Item = &'static str> {
        ALL_APPENDS
            .into_iter()
            .flat_map(|appends| [appends.update_statement(), appends.create_statement()])
    }

    /// The numbers of the parameters a statement names (`$1`, `$2`…).
    fn parameters(statement: &str) -> std::collections::BTreeSet<usize> {
        statement
            .split('$')
            .skip(1)
            .filter_map(|rest| {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .collect()
    }

    #[test]
    fn a_keys_channel_is_a_name_every_baton_computes_alike() {
        // Batons of different versions must agree on it: a change here strands their waiters.
        assert_eq!(
            key_channel("deploy/prod"),
            "baton_k_1a7b4df2e228a8eea1973c5a"
        );
        assert_eq!(key_channel("a b/ключ").len(), "baton_k_".len() + 24);
        assert!(key_channel(&"k".repeat(256)).len() <= 63);
        assert_eq!(
            key_channel_sql!(),
            format!(
                "'{KEY_CHANNEL_MARK}' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), {})",
                KEY_CHANNEL_BYTES * 2
            )
        );
    }

    #[test]
    fn each_cas_statement_names_exactly_the_parameters_its_caller_binds() {
        // `cas.rs` binds the key, the version (updates), the document and the due time, then
        // the entries and `history_keep`, then `history_max_age`: PostgreSQL refuses a bind of
        // more parameters than the statement names, and a gap leaves one without a type.
        let expected = [(4, 3), (6, 5), (7, 6)];
        for (appends, (update, create)) in ALL_APPENDS.into_iter().zip(expected) {
            let names = |n: usize| (1..=n).collect::<std::collections::BTreeSet<_>>();
            assert_eq!(
                parameters(appends.update_statement()),
                names(update),
                "{appends:?}"
            );
            assert_eq!(
                parameters(appends.create_statement()),
                names(create),
                "{appends:?}"
            );
        }
    }

    #[test]
    fn only_a_write_with_entries_appends_and_only_an_aged_store_trims_by_age() {
        for appends in ALL_APPENDS {
            for statement in [appends.update_statement(), appends.create_statement()] {
                let entries = appends != Appends::Nothing;
                assert_eq!(statement.contains("INSERT INTO baton_history"), entries);
                assert_eq!(statement.contains("trimmed_by_count"), entries);
                let aged = appends == Appends::EntriesAged;
                assert_eq!(statement.contains("trimmed_by_age"), aged);
            }
        }
        assert_eq!(Appends::of(0, true), Appends::Nothing);
        assert_eq!(Appends::of(2, false), Appends::Entries);
        assert_eq!(Appends::of(1, true), Appends::EntriesAged);
    }

    #[test]
    fn every_cas_notifies_the_keys_channel_with_its_document_and_the_shared_one_by_key() {
        for statement in all_cas() {
            let own = concat!("pg_notify(", key_channel_sql!(), ", $1 ||");
            assert!(statement.contains(own), "{statement}");
            assert!(statement.contains(&format!("pg_notify('{CHANNEL}', $1)")));
            // The statement's limit is the constant the listener and the docs name.
            assert!(statement.contains(&format!(
                ") <= {PUSHED_DOCUMENT_MAX} THEN '{BASE64_MARK}' || encode("
            )));
        }
    }
}
