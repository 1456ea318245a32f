//! Wake-ups for one key, carrying its document: a datagram from the writer to each watcher.
//!
//! SQLite cannot tell another process that a row changed. The file's inotify events
//! (`watch.rs`) say only that *something* in the file changed, so every waiter of every key
//! would read at every commit: on one hot key with 16 processes, 8 reads per grant (B3 of
//! BENCHMARKS.md). Instead, each store object that watches a key binds a datagram socket in Linux's
//! abstract namespace (a random name: it exists exactly as long as its process, nothing to
//! clean up on disk) and enters `(key, name)` in the file's `baton_watchers` table. A CAS reads
//! the key's watchers in its write transaction and, once committed, sends each a datagram with
//! the key, the new version and, up to [`PUSHED_DOCUMENT_MAX`] bytes, the document itself: a
//! waiter then learns of its turn without reading, as on PostgreSQL and Redis.
//!
//! A write's wake-up for the writing store object's own socket never goes through the kernel:
//! it is delivered in memory ([`Doorbell::deliver_own`]), the same wake-up a datagram would
//! carry, the document whatever its size. On a hot key most wake-ups are the writer's own (a
//! release to its own ended ticket, a claim to its own ticket).
//!
//! Nothing is missed that a watcher subscribed for: the entry commits before `watch` returns,
//! and a writer reads the entries under the write lock, so every write that commits after the
//! watch began reads the entry. A datagram can still be lost: the writer dies between its
//! commit and its sends, a receiver's queue is full, an older baton wrote. So the store does not
//! claim a complete watch, and waiters keep their timed reads at the longest poll interval.
//! Where a receiver finds its queue was full (it drained [`queue_limit`] datagrams or more in
//! one go: the kernel refuses or holds sends beyond that), it wakes every watcher to read.
//!
//! A pushed document can start a turn without another read (a fresh grant), so it must come
//! from a writer of the file: abstract sockets have no permissions, and any local user can list
//! their names. The receiver asks the kernel for each datagram's sender
//! (`SO_PASSCRED`) and takes only those of its own user, root and the file's owner; anything
//! else is dropped unread. (Another user who can write the file can already write any document;
//! one who cannot must not be able to push one.)
//!
//! Datagrams from different writers may arrive out of order; SQLite versions count up, so the
//! receiver drops a document older than one it already delivered for the key.
//!
//! Entries of a process that is gone are removed by the first writer whose send is refused
//! (in its next write transaction); a store object removes the entries of keys it no longer
//! watches at its next `watch`.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::tags::{plan, Entered, Entries, Target};
use crate::wakes::WakeRouter;
use crate::{Version, Versioned, Wake};

/// The largest document a datagram carries; a larger one is announced by version only, and its
/// watchers read it. Sized for a queue of ~50 tickets; a writer sends to every watcher before it
/// returns, and a socket's send buffer (~200 KiB by default) holds about ten of these at once.
pub(super) const PUSHED_DOCUMENT_MAX: usize = 16 * 1024;

/// The longest key a datagram names (longer keys are refused by the core long before).
const KEY_MAX: usize = 4096;

/// The largest datagram: a header, the key, the version and the document.
const DATAGRAM_MAX: usize = HEADER_BYTES + 1 + TAGS_MAX + KEY_MAX + PUSHED_DOCUMENT_MAX;

/// The most bytes of tags a datagram lists (with their lengths); a write that would name more
/// to one socket sends it a wake-up for all its watchers instead.
const TAGS_MAX: usize = 2048;

/// A datagram's fixed part: its format (1 byte), the key's length (2), the version (8), whether
/// the document follows (1).
const HEADER_BYTES: usize = 12;

/// The format of the datagrams this code sends; a receiver ignores others (a newer baton's).
const FORMAT: u8 = 1;

/// The format of a datagram that names tags ([`encode`]).
const FORMAT_NAMING: u8 = 2;

/// How long a send waits for room (a full receiver queue, a full send buffer) before giving that
/// watcher up. The writer's transaction has committed; only its caller waits.
const SEND_WAIT: Duration = Duration::from_millis(1);

/// The prefix of every socket name, after the abstract namespace's leading NUL.
const NAME_PREFIX: &str = "baton-wake/";

/// A store object's receiving end: its socket's name, the watchers it feeds, and the task that
/// reads the socket (aborted on drop).
pub(super) struct Doorbell {
    name: String,
    router: Arc<Mutex<WakeRouter>>,
    /// What the socket's reader and this store's own writes ([`Doorbell::deliver_own`]) have
    /// delivered, per key. Locked before the router.
    latest: Arc<Mutex<Latest>>,
    /// Keys entered in `baton_watchers` under this name, each with the tags entered for it in
    /// `baton_watch_tags` (none: woken by every write).
    registered: tokio::sync::Mutex<Entered>,
    task: JoinHandle<()>,
}

impl Doorbell {
    /// Binds a socket under a fresh random name and starts reading it, taking datagrams from
    /// the writers `store_file` may have. Needs a tokio runtime with I/O enabled.
    pub(super) fn start(store_file: &Path) -> io::Result<Doorbell> {
        let senders = Senders::of(store_file);
        let name = fresh_name()?;
        let address = SocketAddr::from_abstract_name(name.as_bytes())?;
        let socket = UnixDatagram::bind_addr(&address)?;
        socket.set_nonblocking(true)?;
        pass_credentials(&socket)?;
        let socket = tokio::net::UnixDatagram::from_std(socket)?;
        let router = Arc::new(Mutex::new(WakeRouter::default()));
        let latest = Arc::new(Mutex::new(Latest::default()));
        let task = tokio::spawn(receive(
            socket,
            (Arc::clone(&router), Arc::clone(&latest)),
            senders,
            queue_limit(),
        ));
        Ok(Doorbell {
            name,
            router,
            latest,
            registered: tokio::sync::Mutex::new(Entered::new()),
            task,
        })
    }

    /// The socket's name, as entered in `baton_watchers`.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The keys entered in `baton_watchers` under this name, locked while a watch changes
    /// them: a key found unwatched and removed must not be a key another watch of this store
    /// is subscribing to meanwhile.
    pub(super) async fn entries(&self) -> tokio::sync::MutexGuard<'_, Entered> {
        self.registered.lock().await
    }

    /// A receiver for `key`'s wake-ups (by `tag`: [`crate::Store::watch_tagged`]). Subscribe
    /// before entering the key, so nothing sent after the entry commits is missed.
    pub(super) fn subscribe(&self, key: &str, tag: Option<&str>) -> watch::Receiver<Wake> {
        let mut router = lock(&self.router);
        match tag {
            Some(tag) => router.subscribe_tagged(key, tag),
            None => router.subscribe_key(key),
        }
    }

    /// Delivers a wake-up of a write by this store to its own watchers, in memory, as the
    /// datagram to its own socket would have (naming `tags`; `None`: every watcher of the key),
    /// with the document however large.
    pub(super) fn deliver_own(
        &self,
        key: &str,
        version: i64,
        doc: &[u8],
        tags: Option<Vec<String>>,
    ) {
        let rung = Rung {
            key: key.to_owned(),
            version,
            doc: Some(doc.to_vec()),
            tags: tags.unwrap_or_default(),
        };
        deliver(&self.router, &mut lock(&self.latest), rung);
    }

    /// What the file's entries need for the watchers here of `key` ([`plan`]), given what is
    /// `entered`.
    pub(super) fn plan(&self, entered: &Entered, key: &str) -> Entries {
        let router = lock(&self.router);
        let unwatched = entered
            .keys()
            .filter(|k| k.as_str() != key && !router.watches_key(k))
            .filter(|k| router.watched_tags(k).is_empty())
            .cloned()
            .collect();
        let tags = router.watched_tags(key);
        plan(entered, key, router.watches_key(key), &tags, unwatched)
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A writer's sending end: unbound sockets made at the first send, one that waits up to
/// [`SEND_WAIT`] for room and one that does not, for the watchers that recently had none (a
/// stopped process whose queue stays full would otherwise cost every write the wait).
#[derive(Default)]
pub(super) struct Ringer {
    sockets: Mutex<Option<Sockets>>,
    /// Datagrams sent so far, for tests.
    sent: AtomicU64,
}

struct Sockets {
    waiting: UnixDatagram,
    not_waiting: UnixDatagram,
    /// Watchers whose last send found no room in time, and when.
    slow: HashMap<String, Instant>,
}

/// How long a watcher that had no room is sent to without waiting.
const SLOW_FOR: Duration = Duration::from_secs(1);

impl Ringer {
    /// How many datagrams this ringer has sent.
    pub(super) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Sends `key`'s new version (and its document, when small enough) to each target, naming
    /// its tags. Returns the names nobody holds any more (their process is gone), for the
    /// writer to remove. Blocking, by at most [`SEND_WAIT`] per watcher that has no room.
    pub(super) fn ring(
        &self,
        targets: &[Target],
        key: &str,
        version: i64,
        doc: &[u8],
    ) -> Vec<String> {
        let Some(datagram) = encode(key, version, doc, &[]) else {
            return Vec::new();
        };
        let mut sockets = lock(&self.sockets);
        if sockets.is_none() {
            match Sockets::new() {
                Ok(made) => *sockets = Some(made),
                Err(error) => {
                    tracing::debug!(%error, "cannot make a socket to send wake-ups; waiters poll");
                    return Vec::new();
                }
            }
        }
        let Some(sockets) = sockets.as_mut() else {
            return Vec::new();
        };
        let now = Instant::now();
        sockets
            .slow
            .retain(|_, since| now.duration_since(*since) < SLOW_FOR);
        let mut gone = Vec::new();
        for Target { name, tags } in targets {
            let socket = if sockets.slow.contains_key(name) {
                &sockets.not_waiting
            } else {
                &sockets.waiting
            };
            let naming = tags
                .as_deref()
                .and_then(|tags| encode(key, version, doc, tags));
            match send(socket, name, naming.as_deref().unwrap_or(&datagram)) {
                Ok(()) => {
                    self.sent.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) if is_gone(&error) => gone.push(name.clone()),
                // No room in time: the receiver's queue was full, which it notices and answers
                // by waking every watcher to read.
                Err(error) => {
                    tracing::debug!(%error, watcher = %name, "a wake-up was not sent");
                    sockets.slow.insert(name.clone(), now);
                }
            }
        }
        gone
    }
}

impl Sockets {
    fn new() -> io::Result<Sockets> {
        let waiting = UnixDatagram::unbound()?;
        waiting.set_write_timeout(Some(SEND_WAIT))?;
        let not_waiting = UnixDatagram::unbound()?;
        not_waiting.set_nonblocking(true)?;
        Ok(Sockets {
            waiting,
            not_waiting,
            slow: HashMap::new(),
        })
    }
}

fn send(socket: &UnixDatagram, name: &str, datagram: &[u8]) -> io::Result<()> {
    let address = SocketAddr::from_abstract_name(name.as_bytes())?;
    socket.send_to_addr(datagram, &address).map(|_| ())
}

/// Whether a send failed because nobody holds the name: the watcher's process is gone (or lives
/// in another network namespace, where it could never hear this writer anyway).
fn is_gone(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
    )
}

/// A name nobody else holds: 128 random bits. Binding it proves it free.
fn fresh_name() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: the pointer and length describe `rest`, a live, writable buffer.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
            continue;
        }
        filled += n.unsigned_abs();
    }
    Ok(format!("{NAME_PREFIX}{}", hex::encode(bytes)))
}

/// The users whose datagrams a receiver takes: its own, root, and the store file's owner.
#[derive(Clone, Copy, Debug)]
struct Senders {
    own: libc::uid_t,
    file_owner: libc::uid_t,
}

impl Senders {
    fn of(store_file: &Path) -> Senders {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let own = unsafe { libc::geteuid() };
        let file_owner = std::fs::metadata(store_file).map_or(own, |m| m.uid());
        Senders { own, file_owner }
    }

    fn allows(self, sender: libc::uid_t) -> bool {
        sender == self.own || sender == 0 || sender == self.file_owner
    }
}

/// Has the kernel attach each datagram's sender to it (`SO_PASSCRED`).
fn pass_credentials(socket: &UnixDatagram) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: the descriptor is the socket's, open for the call; the option value is a c_int
    // that lives across it, and its size is passed.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            std::ptr::from_ref(&on).cast(),
            socklen_of::<libc::c_int>(),
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn socklen_of<T>() -> libc::socklen_t {
    libc::socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(libc::socklen_t::MAX)
}

/// Receives one datagram without waiting: its length (`None` when it did not fit the buffer)
/// and the user who sent it, as the kernel vouches (`None` when it said nothing).
fn recv_with_sender(
    fd: std::os::fd::RawFd,
    buffer: &mut [u8],
) -> io::Result<(Option<usize>, Option<libc::uid_t>)> {
    let mut part = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // Room for one SCM_CREDENTIALS message, aligned as cmsghdr needs.
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; all-zero is a valid empty header, filled in below.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut part;
    header.msg_iovlen = 1;
    header.msg_control = control.as_mut_ptr().cast();
    header.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: the header points at `part` (which points at `buffer`) and at `control`, all
    // live and writable for the call, with their true lengths.
    let received = unsafe { libc::recvmsg(fd, &mut header, libc::MSG_DONTWAIT) };
    let Ok(length) = usize::try_from(received) else {
        return Err(io::Error::last_os_error());
    };
    let mut sender = None;
    // SAFETY: the header was filled in by recvmsg; CMSG_FIRSTHDR/CMSG_NXTHDR stay within
    // `msg_controllen` bytes of `control`, and a credentials message's data is a ucred (read
    // unaligned: CMSG_DATA need not be aligned for it).
    unsafe {
        let mut message = libc::CMSG_FIRSTHDR(&header);
        while !message.is_null() {
            let m = &*message;
            if m.cmsg_level == libc::SOL_SOCKET && m.cmsg_type == libc::SCM_CREDENTIALS {
                let credentials: libc::ucred =
                    std::ptr::read_unaligned(libc::CMSG_DATA(message).cast());
                sender = Some(credentials.uid);
            }
            message = libc::CMSG_NXTHDR(&header, message);
        }
    }
    let whole = header.msg_flags & libc::MSG_TRUNC == 0;
    Ok((whole.then_some(length), sender))
}

/// How many datagrams the kernel queues for a receiver before refusing more
/// (`net.unix.max_dgram_qlen`, 10 unless changed).
fn queue_limit() -> usize {
    std::fs::read_to_string("/proc/sys/net/unix/max_dgram_qlen")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok())
        .unwrap_or(10)
        .max(1)
}

/// A wake-up as sent, naming `tags` (none: for every watcher of the key): `None` for a key too
/// long to name, or tags too many or too long to list (the caller then sends one naming none).
///
/// Format 1 is the header, the key and the document. A wake-up that names tags is format 2,
/// sent only to sockets that entered tags, hence only to a baton that reads it: after the
/// header, the number of tags (1 byte), each tag's length (1 byte) and bytes, then the key and
/// the document.
fn encode(key: &str, version: i64, doc: &[u8], tags: &[String]) -> Option<Vec<u8>> {
    let key_len = u16::try_from(key.len())
        .ok()
        .filter(|&n| usize::from(n) <= KEY_MAX)?;
    let tag_count = u8::try_from(tags.len()).ok()?;
    let carries = doc.len() <= PUSHED_DOCUMENT_MAX;
    let tag_bytes: usize = tags.iter().map(|t| 1 + t.len()).sum();
    if tag_bytes > TAGS_MAX {
        return None;
    }
    let mut datagram = Vec::with_capacity(
        HEADER_BYTES + 1 + tag_bytes + key.len() + if carries { doc.len() } else { 0 },
    );
    datagram.push(if tags.is_empty() {
        FORMAT
    } else {
        FORMAT_NAMING
    });
    datagram.extend_from_slice(&key_len.to_be_bytes());
    datagram.extend_from_slice(&version.to_be_bytes());
    datagram.push(u8::from(carries));
    if !tags.is_empty() {
        datagram.push(tag_count);
        for tag in tags {
            datagram.push(u8::try_from(tag.len()).ok()?);
            datagram.extend_from_slice(tag.as_bytes());
        }
    }
    datagram.extend_from_slice(key.as_bytes());
    if carries {
        datagram.extend_from_slice(doc);
    }
    Some(datagram)
}

/// A wake-up as received.
#[derive(Debug, PartialEq, Eq)]
struct Rung {
    key: String,
    version: i64,
    doc: Option<Vec<u8>>,
    /// The tags it names (empty: it is for every watcher of the key).
    tags: Vec<String>,
}

/// Reads a datagram; `None` for anything this code did not send (a newer format, garbage).
fn decode(datagram: &[u8]) -> Option<Rung> {
    let (&format, rest) = datagram.split_first()?;
    if format != FORMAT && format != FORMAT_NAMING {
        return None;
    }
    let (key_len, rest) = rest.split_first_chunk::<2>()?;
    let (version, rest) = rest.split_first_chunk::<8>()?;
    let (&carries, mut rest) = rest.split_first()?;
    let mut tags = Vec::new();
    if format == FORMAT_NAMING {
        let (&count, mut after) = rest.split_first()?;
        for _ in 0..count {
            let (&len, more) = after.split_first()?;
            let (tag, more) = more.split_at_checked(usize::from(len))?;
            tags.push(std::str::from_utf8(tag).ok()?.to_owned());
            after = more;
        }
        if tags.is_empty() {
            return None;
        }
        rest = after;
    }
    let key_len = usize::from(u16::from_be_bytes(*key_len));
    let (key, doc) = (rest.get(..key_len)?, rest.get(key_len..)?);
    let key = std::str::from_utf8(key).ok()?.to_owned();
    let doc = match carries {
        0 if doc.is_empty() => None,
        1 => Some(doc.to_vec()),
        _ => return None,
    };
    Some(Rung {
        key,
        version: i64::from_be_bytes(*version),
        doc,
        tags,
    })
}

/// The newest version delivered per key, so that a datagram overtaken by a newer one is dropped.
#[derive(Default)]
struct Latest {
    versions: HashMap<String, i64>,
}

impl Latest {
    /// Forgetting is safe (an old document then costs the waiter at most a conflict); this
    /// bounds the map for a process that watches ever new keys.
    const KEEP_AT_MOST: usize = 4096;

    /// How many writes `rung` tells of, if it is newer than everything delivered for its key
    /// (and remembers it): versions count a key's writes, so the gap since the last delivered
    /// is how many went by, those whose datagrams were lost or overtaken included. `None`: it
    /// is not newer.
    fn writes_told(&mut self, rung: &Rung) -> Option<u64> {
        if self.versions.len() >= Self::KEEP_AT_MOST && !self.versions.contains_key(&rung.key) {
            self.versions.clear();
        }
        match self.versions.get_mut(&rung.key) {
            Some(seen) if *seen >= rung.version => None,
            Some(seen) => {
                let gap = rung.version.abs_diff(*seen);
                *seen = rung.version;
                Some(gap)
            }
            None => {
                self.versions.insert(rung.key.clone(), rung.version);
                Some(1)
            }
        }
    }
}

/// Reads the socket until the store object is dropped, waking each datagram's key.
async fn receive(
    socket: tokio::net::UnixDatagram,
    (router, latest): (Arc<Mutex<WakeRouter>>, Arc<Mutex<Latest>>),
    senders: Senders,
    queue_limit: usize,
) {
    let mut buffer = vec![0u8; DATAGRAM_MAX];
    loop {
        if let Err(error) = socket.readable().await {
            tracing::debug!(%error, "the wake-up socket failed; waiters poll");
            return;
        }
        let mut drained = 0usize;
        loop {
            let received = socket.try_io(tokio::io::Interest::READABLE, || {
                recv_with_sender(socket.as_raw_fd(), &mut buffer)
            });
            match received {
                Ok((length, sender)) => {
                    drained += 1;
                    if !sender.is_some_and(|uid| senders.allows(uid)) {
                        tracing::debug!(
                            ?sender,
                            "a wake-up from a user who may not write the store was dropped"
                        );
                        continue;
                    }
                    if let Some(rung) = length.and_then(|n| buffer.get(..n)).and_then(decode) {
                        deliver(&router, &mut lock(&latest), rung);
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => {
                    tracing::debug!(%error, "the wake-up socket failed; waiters poll");
                    return;
                }
            }
        }
        if drained >= queue_limit {
            // The queue may have been full: a sender may have given up, on the last write so
            // far. The waiters that write may have granted look; the later writes' versions
            // tell the others how many went by.
            lock(&router).nudge_all();
        }
    }
}

fn deliver(router: &Mutex<WakeRouter>, latest: &mut Latest, rung: Rung) {
    let Some(writes) = latest.writes_told(&rung) else {
        return;
    };
    let wake = match rung.doc {
        Some(bytes) => Wake::with(Versioned {
            version: Version(rung.version.to_string()),
            bytes,
            arrivals: Vec::new(),
        }),
        None => Wake::read_again(),
    };
    let wake = wake.of_changes(writes);
    if rung.tags.is_empty() {
        lock(router).wake(&rung.key, wake);
    } else {
        lock(router).wake_named(&rung.key, wake, &rung.tags);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn a_datagram_round_trips_with_and_without_its_document() {
        let sent = encode("deploy/prod", 42, b"{\"a\":\n1}\x00\xff", &[]).unwrap();
        assert_eq!(
            decode(&sent),
            Some(Rung {
                key: "deploy/prod".into(),
                version: 42,
                doc: Some(b"{\"a\":\n1}\x00\xff".to_vec()),
                tags: vec![],
            })
        );
        let large = vec![7u8; PUSHED_DOCUMENT_MAX + 1];
        let sent = encode("k", 7, &large, &[]).unwrap();
        assert!(
            sent.len() < 64,
            "a large document is announced by version only"
        );
        assert_eq!(
            decode(&sent),
            Some(Rung {
                key: "k".into(),
                version: 7,
                doc: None,
                tags: vec![],
            })
        );
        assert!(encode("k", 1, &vec![0u8; PUSHED_DOCUMENT_MAX], &[])
            .is_some_and(|d| d.len() <= DATAGRAM_MAX));
    }

    #[test]
    fn garbage_and_other_formats_are_ignored() {
        for bytes in [
            &b""[..],
            b"\x02\x00\x01",
            b"\x01\x00\x05\x00",
            b"\x01\x00\x09\0\0\0\0\0\0\0\x01\x00k",
        ] {
            assert_eq!(decode(bytes), None, "{bytes:?}");
        }
        let mut sent = encode("k", 1, b"doc", &[]).unwrap();
        sent[0] = 3;
        assert_eq!(decode(&sent), None);
        // A format 2 datagram that names no tag, or whose tags run past its end.
        let mut sent = encode("k", 1, b"doc", &["t1".into()]).unwrap();
        sent[HEADER_BYTES] = 0;
        assert_eq!(decode(&sent), None);
        sent[HEADER_BYTES] = 200;
        assert_eq!(decode(&sent), None);
    }

    #[test]
    fn a_document_overtaken_by_a_newer_one_is_dropped_and_gaps_count_as_writes() {
        let mut latest = Latest::default();
        let rung = |key: &str, version| Rung {
            key: key.into(),
            version,
            doc: None,
            tags: vec![],
        };
        assert_eq!(latest.writes_told(&rung("a", 5)), Some(1));
        assert_eq!(latest.writes_told(&rung("a", 4)), None);
        assert_eq!(latest.writes_told(&rung("a", 5)), None);
        assert_eq!(latest.writes_told(&rung("b", 1)), Some(1));
        assert_eq!(latest.writes_told(&rung("a", 6)), Some(1));
        // Versions 7 and 8 were lost or are still on their way: this one tells of three writes.
        assert_eq!(latest.writes_told(&rung("a", 9)), Some(3));
        assert_eq!(latest.writes_told(&rung("a", 8)), None);
    }

    #[test]
    fn a_datagram_that_names_tags_round_trips() {
        let tags = vec!["t-1".to_owned(), "ticket-ü".to_owned()];
        let sent = encode("deploy/prod", 3, b"doc", &tags).unwrap();
        assert_eq!(sent[0], FORMAT_NAMING);
        assert_eq!(
            decode(&sent),
            Some(Rung {
                key: "deploy/prod".into(),
                version: 3,
                doc: Some(b"doc".to_vec()),
                tags,
            })
        );
        // Tags too long to list: the caller sends one for every watcher instead.
        assert_eq!(encode("k", 1, b"", &["x".repeat(256)]), None);
        let many: Vec<String> = (0..300).map(|n| n.to_string()).collect();
        assert_eq!(encode("k", 1, b"", &many), None);
        let most: Vec<String> = (0..(TAGS_MAX / 9)).map(|n| format!("{n:08}")).collect();
        assert!(encode(
            "k",
            1,
            &vec![0u8; PUSHED_DOCUMENT_MAX],
            &most[..255.min(most.len())]
        )
        .is_some_and(|d| d.len() <= DATAGRAM_MAX));
    }

    #[test]
    fn a_watcher_with_a_full_queue_is_sent_to_without_waiting_for_a_while() {
        // A watcher that never reads (a stopped process): its queue fills, a send then finds no
        // room in time, and the next sends to it do not wait.
        let name = fresh_name().unwrap();
        let stuck =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        let ringer = Ringer::default();
        let watchers = [Target {
            name: name.clone(),
            tags: None,
        }];
        for version in 0..=i64::try_from(queue_limit()).unwrap() + 1 {
            assert!(ringer.ring(&watchers, "k", version, b"doc").is_empty());
        }
        let sockets = lock(&ringer.sockets);
        assert!(
            sockets.as_ref().unwrap().slow.contains_key(&name),
            "the watcher whose queue was full is marked slow"
        );
        drop(stuck);
    }

    /// Sends `datagram` to the socket `name` from a child process running as `uid`. The child
    /// makes only system calls between fork and exit.
    fn send_as(uid: libc::uid_t, name: &str, datagram: &[u8]) {
        // SAFETY: sockaddr_un is plain data; all-zero is valid, filled in below.
        let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        address.sun_family = libc::sa_family_t::try_from(libc::AF_UNIX).unwrap();
        // sun_path[0] stays 0: the abstract namespace.
        for (slot, byte) in address.sun_path[1..].iter_mut().zip(name.bytes()) {
            *slot = byte as libc::c_char;
        }
        let length = std::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + name.len();
        let length = libc::socklen_t::try_from(length).unwrap();
        // SAFETY: the child calls only setuid, socket, sendto and _exit, on memory prepared
        // before the fork; the parent waits for it.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                if libc::setuid(uid) != 0 {
                    libc::_exit(2);
                }
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0);
                if fd < 0 {
                    libc::_exit(3);
                }
                let sent = libc::sendto(
                    fd,
                    datagram.as_ptr().cast(),
                    datagram.len(),
                    0,
                    std::ptr::from_ref(&address).cast(),
                    length,
                );
                libc::_exit(if sent < 0 { 4 } else { 0 });
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the sending child failed: {status:#x}"
            );
        }
    }

    #[tokio::test]
    async fn a_wake_up_from_a_user_who_may_not_write_the_store_is_dropped() {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "this test sends as another user: run it as root, as scripts/test.sh does"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("baton.db");
        std::fs::write(&file, b"").unwrap();
        let bell = Doorbell::start(&file).unwrap();
        let mut receiver = bell.subscribe("k", None);
        // A forged grant, newer than the real write that follows: had it been taken, the real
        // one would be dropped as older.
        send_as(
            65534,
            bell.name(),
            &encode("k", 11, b"forged", &[]).unwrap(),
        );
        let gone = Ringer::default().ring(&[Target::of(bell.name(), None)], "k", 10, b"genuine");
        assert!(gone.is_empty());
        tokio::time::timeout(Duration::from_secs(2), receiver.changed())
            .await
            .unwrap()
            .unwrap();
        let woken = receiver.borrow_and_update().clone();
        let doc = woken
            .document
            .expect("the genuine write carries its document");
        assert_eq!(
            (doc.version.0.as_str(), doc.bytes.as_slice()),
            ("10", &b"genuine"[..])
        );
    }

    #[tokio::test]
    async fn a_ring_reaches_the_watcher_and_a_dead_name_is_reported_gone() {
        let bell = Doorbell::start(Path::new("/nonexistent")).unwrap();
        let mut receiver = bell.subscribe("k", None);
        let gone_name = {
            let dead = Doorbell::start(Path::new("/nonexistent")).unwrap();
            dead.name().to_owned()
        };
        // The aborted task drops its socket when the runtime next runs it.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let ringer = Ringer::default();
        let targets = [Target::of(bell.name(), None), Target::of(&gone_name, None)];
        let gone = ringer.ring(&targets, "k", 3, b"doc");
        assert_eq!(gone, [gone_name]);
        tokio::time::timeout(Duration::from_secs(2), receiver.changed())
            .await
            .unwrap()
            .unwrap();
        let woken = receiver.borrow_and_update().clone();
        let doc = woken.document.expect("a small document is carried");
        assert_eq!(
            (doc.version.0.as_str(), doc.bytes.as_slice()),
            ("3", &b"doc"[..])
        );
    }

    #[tokio::test]
    async fn a_ring_that_names_a_tag_wakes_its_watchers_and_those_of_the_whole_key_only() {
        let bell = Doorbell::start(Path::new("/nonexistent")).unwrap();
        let mut whole = bell.subscribe("k", None);
        let mut named = bell.subscribe("k", Some("t1"));
        let mut other = bell.subscribe("k", Some("t2"));
        let ringer = Ringer::default();
        let gone = ringer.ring(&[Target::of(bell.name(), Some(&["t1"]))], "k", 4, b"doc");
        assert!(gone.is_empty());
        for receiver in [&mut whole, &mut named] {
            tokio::time::timeout(Duration::from_secs(2), receiver.changed())
                .await
                .unwrap()
                .unwrap();
        }
        assert!(named.borrow_and_update().named, "t1 was named");
        assert!(!whole.borrow_and_update().named);
        assert!(!other.has_changed().unwrap(), "t2 was passed by");
        // A ring for everyone wakes t2 too, not named.
        ringer.ring(&[Target::of(bell.name(), None)], "k", 5, b"doc");
        tokio::time::timeout(Duration::from_secs(2), other.changed())
            .await
            .unwrap()
            .unwrap();
        assert!(!other.borrow_and_update().named);
    }
}
