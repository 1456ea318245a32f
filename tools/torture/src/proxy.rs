//! A TCP fault proxy: a store's clients connect to it instead of the server, and the harness
//! adds latency, cuts connections, opens a black hole, loses replies or holds a reply back until
//! a hook has run, between them while they run.
//!
//! Each accepted connection gets its own upstream connection and, per direction, a reader thread
//! and a writer thread joined by a bounded queue of chunks stamped with the instant they are due.
//! Splitting reading from writing is what makes latency a delay and not a bandwidth cap: the
//! reader keeps reading while earlier chunks wait, so a chunk read at `t` is written at
//! `t + latency`, in order, however much follows it. Blocking std I/O keeps the proxy free of any
//! runtime, so it can sit in front of whatever store the harness starts.
//!
//! - **Latency** applies to every chunk read after it is set, in both directions.
//! - **A cut** shuts every open connection down in both directions at once. Its client sees end
//!   of file: a FIN, not an RST, since std cannot set `SO_LINGER` to zero on stable, but its next
//!   read returns nothing and its writes go nowhere, which is what a reset means to it.
//! - **A black hole** forwards nothing in either direction for its duration, and connects new
//!   connections upstream only once it heals. Bytes are held, not dropped, and delivered when it
//!   heals, as TCP delivers them after a short partition by retransmitting: whether a client
//!   gives up meanwhile is then its own timeout's decision, which is what the harness exercises.
//!   A partition long enough for TCP to give up is a black hole followed by a cut.
//! - **Reply faults** take the next replies to *writes* (see below), on any connection, up to a
//!   number of them and within a window ([`Proxy::lose_replies`], [`Proxy::before_replies`]).
//!   A count, not a window alone, because what matters is how many requests end ambiguous: a
//!   window alone hits nothing on a quiet store and every client at once on a busy one (which
//!   is a cut, a fault of its own); the window keeps an armed fault near the moment the schedule
//!   chose instead of lurking until some later, unrelated reply.
//!   - A **lost reply**: the server has executed the request; its answer is discarded, with
//!     whatever else the server sends on that connection for [`LOSE_LINGER`], and the
//!     connection is then cut. The client sees its request sent and its connection closed with
//!     no answer: an ambiguous write. The linger is there because the first chunk back is not
//!     always the whole answer (HTTP/2 sends flow-control frames before the response, a large
//!     reply comes in pieces), and no piece of it may get through.
//!   - A **hook before a reply**: the proxy calls the hook with the connection's addresses and
//!     forwards the reply only once the hook has returned, so the harness can stop the client
//!     process after its write landed and before it reads the answer.
//!
//! A request is a write when it contains one of the byte strings given to
//! [`Proxy::mark_writes`] (the harness gives a document's opening, which every store's write
//! carries and no read does); with none given, every request counts. A reply chunk counts as
//! the answer to a write when a write was forwarded on its connection since the connection's
//! previous reply chunk. Where requests are pipelined (Redis, HTTP/2) this may take the reply to
//! a read sent just before, or miss a write's; a missed write leaves the fault armed for the
//! next one, which is all the heuristic needs.
//!
//! No thread outlives its connection: a cut shuts the sockets down, which wakes a reader blocked
//! in `read` and a writer blocked in `write`, and a writer waiting for its chunk's time or for a
//! heal waits on a condvar that a cut notifies.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The most one read takes from a socket.
const CHUNK_BYTES_MAX: usize = 16 * 1024;
/// Chunks read but not yet written, per direction of a connection (1 MiB at most). When it is
/// full the reader stops reading and TCP's flow control pushes back on the sender, as a slow
/// link would, instead of the proxy holding unbounded memory during a long black hole.
const QUEUE_CHUNKS_MAX: usize = 64;
/// How long connecting upstream may take before the client's connection is closed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long dropping the proxy tries to connect to it to wake its accept loop.
const WAKE_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause after a failed accept (out of file descriptors, say), so the loop does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);
/// Longer latencies are clamped: a fault longer than this is a black hole or a cut.
const LATENCY_MAX: Duration = Duration::from_secs(60);
/// Longer black holes and reply-fault windows are clamped, so their end can always be computed.
const BLACK_HOLE_MAX: Duration = Duration::from_secs(3600);
/// After a lost reply, how long everything else the server sends on that connection is
/// discarded too before the connection is cut: the rest of the answer (see the module's docs).
pub const LOSE_LINGER: Duration = Duration::from_millis(250);
/// Chunks of one connection queued for forwarding, as the reader hands them to the writer.
type Chunks = Receiver<(Instant, Vec<u8>)>;

/// What the proxy has done since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Client connections accepted.
    pub connections_accepted: u64,
    /// Connections open now (accepted, not yet closed or cut).
    pub connections_open: u64,
    /// Connections cut by [`Proxy::drop_connections`].
    pub connections_cut: u64,
    /// Client connections closed because connecting upstream failed.
    pub upstream_failures: u64,
    /// Bytes written to the upstream.
    pub bytes_to_upstream: u64,
    /// Bytes written to clients.
    pub bytes_to_client: u64,
    /// Calls to [`Proxy::black_hole`].
    pub black_holes: u64,
    /// Requests forwarded upstream that the markers of [`Proxy::mark_writes`] call writes
    /// (chunks: a write sent in pieces may count more than once).
    pub writes_forwarded: u64,
    /// Replies to writes lost by [`Proxy::lose_replies`] (each cut its connection).
    pub replies_lost: u64,
    /// Replies to writes forwarded only after a hook of [`Proxy::before_replies`] took them.
    pub replies_hooked: u64,
    /// The proxy's threads still running (accept loop, connections, pumps).
    pub threads: u64,
}

/// A running proxy; dropping it stops accepting and cuts every connection.
pub struct Proxy {
    shared: Arc<Shared>,
    /// Joined on drop, so the port is closed by the time drop returns.
    accept_thread: Option<JoinHandle<()>>,
}

/// What the accept loop and every connection's threads share with the [`Proxy`].
struct Shared {
    upstream: SocketAddr,
    address: SocketAddr,
    state: Mutex<State>,
    /// Notified when connections are closed or cut, so writers waiting for a chunk's time or
    /// for a heal end at once instead of when their wait runs out.
    changed: Condvar,
}

/// Everything that changes, behind one lock: it is taken once or twice per chunk, which costs
/// nothing beside the socket calls around it, and keeps every update a single step.
#[derive(Default)]
struct State {
    /// Set by drop, under the lock, so no connection is registered after the final cut.
    stopping: bool,
    latency: Duration,
    /// Until when nothing is forwarded.
    hole_until: Option<Instant>,
    next_id: u64,
    /// Every open connection. A connection is open while its id is here; its threads end once
    /// it is gone.
    open: HashMap<u64, Connection>,
    /// What makes a request a write ([`Proxy::mark_writes`]); empty: every request.
    write_markers: Arc<Vec<Vec<u8>>>,
    /// Armed reply faults, oldest first; the first whose hook takes a reply has it.
    reply_faults: Vec<ReplyFault>,
    /// The counters (`connections_open` is `open`'s length, filled in by [`Proxy::stats`]).
    stats: ProxyStats,
}

/// One open connection.
struct Connection {
    /// Its sockets (clones), to shut them down on a cut.
    sockets: Vec<TcpStream>,
    /// The client's address: its end of the connection.
    client: SocketAddr,
    /// A write is being or was forwarded upstream, and no reply chunk has come back since.
    write_unanswered: bool,
}

/// What a reply fault does with a reply it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReplyAction {
    /// Discard it and the rest of what the server sends for [`LOSE_LINGER`], then cut.
    Lose,
    /// Forward it, after the hook.
    Forward,
}

/// The connection a reply fault found a reply to a write on, as its hook sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyTo {
    /// The client's end of the connection (its local address).
    pub client: SocketAddr,
    /// The proxy's end: the address the client connected to.
    pub proxy: SocketAddr,
}

/// Called with the connection of a reply to a write; true if the fault takes that reply.
type ReplyHook = Box<dyn FnMut(ReplyTo) -> bool + Send>;

/// An armed reply fault.
struct ReplyFault {
    action: ReplyAction,
    /// How many more replies it may take.
    left: u32,
    /// When it disarms, taken or not.
    until: Instant,
    hook: ReplyHook,
}

#[derive(Clone, Copy)]
enum Direction {
    ToUpstream,
    ToClient,
}

impl Proxy {
    /// Listens on 127.0.0.1 on a free port and forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> io::Result<Proxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| context(e, "binding the fault proxy on 127.0.0.1"))?;
        let address = listener
            .local_addr()
            .map_err(|e| context(e, "reading the fault proxy's address"))?;
        let shared = Arc::new(Shared {
            upstream,
            address,
            state: Mutex::default(),
            changed: Condvar::new(),
        });
        let accepting = {
            let shared = Arc::clone(&shared);
            move || accept_loop(&shared, listener)
        };
        let accept_thread = spawn(&shared, "baton-proxy-accept", accepting)
            .map_err(|e| context(e, "starting the fault proxy's accept thread"))?;
        Ok(Proxy {
            shared,
            accept_thread: Some(accept_thread),
        })
    }

    /// Where clients connect.
    pub fn address(&self) -> SocketAddr {
        self.shared.address
    }

    /// Delays every chunk read from now on, both directions, by `latency` (zero for none,
    /// clamped to a minute). Chunks already read keep their delay, and order is kept: a chunk
    /// never overtakes an earlier one of its connection even when the latency drops.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.lock().latency = latency.min(LATENCY_MAX);
    }

    /// Cuts every open connection now; new connections still work.
    pub fn drop_connections(&self) {
        self.shared.cut_all(false);
    }

    /// For `duration` (clamped to an hour) nothing is forwarded on any connection and new
    /// connections wait to be connected upstream; held bytes are delivered when it heals (see
    /// the module's docs for why). Returns at once; a second call extends the hole, never
    /// shortens it.
    pub fn black_hole(&self, duration: Duration) {
        let until = Instant::now() + duration.min(BLACK_HOLE_MAX);
        let mut state = self.shared.lock();
        state.hole_until = state.hole_until.max(Some(until));
        state.stats.black_holes += 1;
    }

    /// Requests containing any of `markers` are writes, for the reply faults; with none (the
    /// default), every request is. Replaces the markers given before.
    pub fn mark_writes(&self, markers: &[&[u8]]) {
        let markers = markers
            .iter()
            .filter(|m| !m.is_empty())
            .map(|m| m.to_vec())
            .collect();
        self.shared.lock().write_markers = Arc::new(markers);
    }

    /// Loses the next `replies` replies to writes, on any connections, within `within`
    /// (clamped to an hour): each is discarded with the rest of what the server sends on its
    /// connection for [`LOSE_LINGER`], and that connection is then cut (see the module's docs).
    /// `hook` sees each such reply's connection first and says whether to take it (a harness
    /// records the fault there); one it declines is forwarded. Returns at once.
    pub fn lose_replies(
        &self,
        replies: u32,
        within: Duration,
        hook: impl FnMut(ReplyTo) -> bool + Send + 'static,
    ) {
        self.arm(ReplyAction::Lose, replies, within, Box::new(hook));
    }

    /// Calls `hook` before forwarding each of the next replies to writes, within `within`
    /// (clamped to an hour), until it has taken `replies` of them (returned true). The reply
    /// is forwarded once the hook returns, taken or not: a hook that stops the client leaves
    /// the answer waiting in the stopped client's socket. Hooks run on the connection's own
    /// thread, so other connections go on meanwhile. Returns at once.
    pub fn before_replies(
        &self,
        replies: u32,
        within: Duration,
        hook: impl FnMut(ReplyTo) -> bool + Send + 'static,
    ) {
        self.arm(ReplyAction::Forward, replies, within, Box::new(hook));
    }

    fn arm(&self, action: ReplyAction, replies: u32, within: Duration, hook: ReplyHook) {
        if replies == 0 {
            return;
        }
        let fault = ReplyFault {
            action,
            left: replies,
            until: Instant::now() + within.min(BLACK_HOLE_MAX),
            hook,
        };
        let mut state = self.shared.lock();
        if !state.stopping {
            state.reply_faults.push(fault);
        }
    }

    /// What the proxy has done so far.
    pub fn stats(&self) -> ProxyStats {
        let state = self.shared.lock();
        ProxyStats {
            connections_open: state.open.len() as u64,
            ..state.stats
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.cut_all(true);
        // The accept loop is blocked in `accept`: a connection of our own wakes it to see
        // `stopping`. Should that fail, the loop ends at the next connection to reach the port;
        // joining it then could hang, so it is left to do so.
        let woken = TcpStream::connect_timeout(&self.shared.address, WAKE_TIMEOUT).is_ok();
        if let (true, Some(accept_thread)) = (woken, self.accept_thread.take()) {
            // A panic in the accept loop has nothing left to clean up.
            let _ = accept_thread.join();
        }
    }
}

impl Shared {
    /// Nothing panics while holding the lock and each field changes in one step, so the state
    /// behind a poisoned lock is still whole.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a new connection from `peer`, or `None` once the proxy is stopping.
    fn open_connection(&self, client: TcpStream, peer: SocketAddr) -> Option<u64> {
        let mut state = self.lock();
        if state.stopping {
            return None;
        }
        state.next_id += 1;
        let id = state.next_id;
        let connection = Connection {
            sockets: vec![client],
            client: peer,
            write_unanswered: false,
        };
        state.open.insert(id, connection);
        state.stats.connections_accepted += 1;
        Some(id)
    }

    /// Adds a socket to an open connection; false (and the socket closed) if it was cut.
    fn add_socket(&self, id: u64, socket: TcpStream) -> bool {
        match self.lock().open.get_mut(&id) {
            Some(connection) => connection.sockets.push(socket),
            None => return false,
        }
        true
    }

    /// Closes one connection; its threads end. Closing it again does nothing.
    fn close(&self, id: u64) {
        if let Some(connection) = self.lock().open.remove(&id) {
            shut_down(connection.sockets);
            self.changed.notify_all();
        }
    }

    /// Cuts every open connection, and with `stop` every later one (and disarms every reply
    /// fault: their hooks are dropped).
    fn cut_all(&self, stop: bool) {
        let mut state = self.lock();
        state.stopping |= stop;
        if stop {
            state.reply_faults.clear();
        }
        let cut: Vec<_> = state.open.drain().collect();
        state.stats.connections_cut += cut.len() as u64;
        cut.into_iter()
            .for_each(|(_, connection)| shut_down(connection.sockets));
        self.changed.notify_all();
    }

    /// Notes that a write is forwarded upstream on connection `id`.
    fn write_forwarded(&self, id: u64) {
        let mut state = self.lock();
        state.stats.writes_forwarded += 1;
        if let Some(connection) = state.open.get_mut(&id) {
            connection.write_unanswered = true;
        }
    }

    /// For a reply chunk about to be forwarded on connection `id`: what the armed reply fault
    /// that takes it does, if one does. Only a chunk answering a write is offered to the
    /// faults; any chunk answers the connection's pending write either way.
    ///
    /// Hooks run without the lock (one may take a while: stopping a process): the armed faults
    /// are taken out meanwhile, so a reply on another connection passes untouched, and put back
    /// ahead of any armed since.
    fn take_reply(&self, id: u64) -> Option<ReplyAction> {
        let (reply_to, mut faults) = {
            let mut state = self.lock();
            let connection = state.open.get_mut(&id)?;
            if !std::mem::take(&mut connection.write_unanswered) {
                return None;
            }
            let reply_to = ReplyTo {
                client: connection.client,
                proxy: self.address,
            };
            let now = Instant::now();
            state.reply_faults.retain(|fault| fault.until > now);
            if state.reply_faults.is_empty() {
                return None;
            }
            (reply_to, std::mem::take(&mut state.reply_faults))
        };
        let taken = faults.iter_mut().position(|fault| (fault.hook)(reply_to));
        let action = taken.map(|at| {
            let fault = &mut faults[at];
            fault.left -= 1;
            fault.action
        });
        let mut state = self.lock();
        match action {
            Some(ReplyAction::Lose) => state.stats.replies_lost += 1,
            Some(ReplyAction::Forward) => state.stats.replies_hooked += 1,
            None => {}
        }
        if !state.stopping {
            let now = Instant::now();
            faults.retain(|fault| fault.left > 0 && fault.until > now);
            faults.append(&mut state.reply_faults);
            state.reply_faults = faults;
        }
        action
    }

    /// Waits until `due` has passed and no black hole is open; false if the connection was
    /// closed meanwhile. Sleeps on the condvar, so a cut ends the wait at once.
    fn wait_to_forward(&self, id: u64, due: Instant) -> bool {
        let mut state = self.lock();
        loop {
            if !state.open.contains_key(&id) {
                return false;
            }
            let until = state.hole_until.map_or(due, |hole| hole.max(due));
            let now = Instant::now();
            if now >= until {
                return true;
            }
            state = match self.changed.wait_timeout(state, until - now) {
                Ok((state, _)) => state,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    fn forwarded(&self, direction: Direction, n_bytes: usize) {
        let stats = &mut self.lock().stats;
        match direction {
            Direction::ToUpstream => stats.bytes_to_upstream += n_bytes as u64,
            Direction::ToClient => stats.bytes_to_client += n_bytes as u64,
        }
    }
}

fn shut_down(sockets: Vec<TcpStream>) {
    for socket in sockets {
        // A socket its peer already closed cannot be shut down again; it is closed either way.
        let _ = socket.shutdown(Shutdown::Both);
    }
}

fn context(error: io::Error, doing: &str) -> io::Error {
    io::Error::new(error.kind(), format!("{doing}: {error}"))
}

/// Counts a thread while it runs, so a test (or a harness worried about leaks) can see every
/// thread end. It moves into the thread's closure, so the count drops back even if spawning
/// fails or the thread panics.
struct ThreadCount(Arc<Shared>);

impl Drop for ThreadCount {
    fn drop(&mut self) {
        self.0.lock().stats.threads -= 1;
    }
}

fn spawn(
    shared: &Arc<Shared>,
    name: &str,
    run: impl FnOnce() + Send + 'static,
) -> io::Result<JoinHandle<()>> {
    shared.lock().stats.threads += 1;
    let count = ThreadCount(Arc::clone(shared));
    thread::Builder::new().name(name.to_owned()).spawn(move || {
        let _count = count;
        run();
    })
}

fn accept_loop(shared: &Arc<Shared>, listener: TcpListener) {
    loop {
        let accepted = listener.accept();
        if shared.lock().stopping {
            return;
        }
        let Ok((client, peer)) = accepted else {
            thread::sleep(ACCEPT_RETRY);
            continue;
        };
        // Out of file descriptors: the client sees its connection closed.
        let Ok(registered) = client.try_clone() else {
            continue;
        };
        let Some(id) = shared.open_connection(registered, peer) else {
            return;
        };
        let serving = {
            let shared = Arc::clone(shared);
            move || serve(&shared, id, client)
        };
        if spawn(shared, "baton-proxy-conn", serving).is_err() {
            shared.close(id);
        }
    }
}

/// Connects one client upstream and forwards both ways until either side ends or it is cut.
fn serve(shared: &Arc<Shared>, id: u64, client: TcpStream) {
    // In a black hole the kernel completes the client's handshake anyway; the upstream one
    // waits for the heal.
    if !shared.wait_to_forward(id, Instant::now()) {
        return;
    }
    let Ok(upstream) = TcpStream::connect_timeout(&shared.upstream, CONNECT_TIMEOUT) else {
        shared.lock().stats.upstream_failures += 1;
        shared.close(id);
        return;
    };
    // Store protocols are requests and answers: Nagle's delay would be latency nobody set.
    // Without it the bytes still get through, so a failure here is not worth closing for.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (Ok(registered), Ok(upstream_reader), Ok(client_writer)) = (
        upstream.try_clone(),
        upstream.try_clone(),
        client.try_clone(),
    ) else {
        shared.close(id);
        return;
    };
    if !shared.add_socket(id, registered) {
        return;
    }
    let directions_left = Arc::new(AtomicUsize::new(2));
    let to_upstream = {
        let (shared, directions_left) = (Arc::clone(shared), Arc::clone(&directions_left));
        move || {
            pump(&shared, id, client, upstream, Direction::ToUpstream);
            finish_direction(&shared, id, &directions_left);
        }
    };
    if spawn(shared, "baton-proxy-pump", to_upstream).is_err() {
        shared.close(id);
        return;
    }
    pump(
        shared,
        id,
        upstream_reader,
        client_writer,
        Direction::ToClient,
    );
    finish_direction(shared, id, &directions_left);
}

/// The last direction to finish closes the connection, so a half-closed one stays open.
fn finish_direction(shared: &Shared, id: u64, directions_left: &AtomicUsize) {
    if directions_left.fetch_sub(1, Ordering::AcqRel) == 1 {
        shared.close(id);
    }
}

/// Forwards one direction: a reader thread queues chunks with their due instant, this thread
/// writes each once it is due and no black hole is open. Requests are scanned for writes as
/// they are forwarded; replies are offered to the reply faults just before.
fn pump(shared: &Arc<Shared>, id: u64, from: TcpStream, mut to: TcpStream, direction: Direction) {
    let (chunks, queued) = sync_channel(QUEUE_CHUNKS_MAX);
    let reading = {
        let shared = Arc::clone(shared);
        move || read_chunks(&shared, id, from, chunks)
    };
    if spawn(shared, "baton-proxy-read", reading).is_err() {
        shared.close(id);
        return;
    }
    let mut writes = WriteScan::default();
    while let Ok((due, chunk)) = queued.recv() {
        if !shared.wait_to_forward(id, due) {
            return;
        }
        let action = match direction {
            Direction::ToClient => shared.take_reply(id),
            Direction::ToUpstream => None,
        };
        if action == Some(ReplyAction::Lose) {
            lose_then_cut(shared, id, &queued);
            return;
        }
        // Marked before it is written: the server may answer before `write_all` returns.
        if let Direction::ToUpstream = direction {
            let markers = Arc::clone(&shared.lock().write_markers);
            if writes.is_write(&markers, &chunk) {
                shared.write_forwarded(id);
            }
        }
        if to.write_all(&chunk).is_err() {
            shared.close(id);
            return;
        }
        shared.forwarded(direction, chunk.len());
    }
    // The reader saw end of file: pass the half-close on, so a peer that waits for it (an HTTP
    // client that shut its writing side) still gets its answer. Fails harmlessly if cut.
    let _ = to.shutdown(Shutdown::Write);
}

/// Discards everything the server sends on connection `id` for [`LOSE_LINGER`] (the rest of a
/// lost answer), then cuts the connection.
fn lose_then_cut(shared: &Shared, id: u64, queued: &Chunks) {
    let until = Instant::now() + LOSE_LINGER;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match queued.recv_timeout(left) {
            Ok(_discarded) if !left.is_zero() => {}
            Ok(_) | Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
        }
    }
    shared.close(id);
}

/// Finds write markers in the requests of one connection, also where a marker straddles two
/// chunks (a tail of the previous chunk is kept for that).
#[derive(Default)]
struct WriteScan {
    tail: Vec<u8>,
}

impl WriteScan {
    /// Whether `chunk` (with the tail before it) holds one of `markers`; true for every chunk
    /// when there are none.
    fn is_write(&mut self, markers: &[Vec<u8>], chunk: &[u8]) -> bool {
        if markers.is_empty() {
            return true;
        }
        let keep = markers.iter().map(Vec::len).max().unwrap_or(1) - 1;
        let mut seam = std::mem::take(&mut self.tail);
        seam.extend_from_slice(&chunk[..chunk.len().min(keep)]);
        let found = markers
            .iter()
            .any(|marker| contains(chunk, marker) || contains(&seam, marker));
        if chunk.len() >= keep {
            self.tail = chunk[chunk.len() - keep..].to_vec();
        } else {
            let from = seam.len().saturating_sub(keep);
            self.tail = seam.split_off(from);
        }
        found
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

fn read_chunks(
    shared: &Shared,
    id: u64,
    mut from: TcpStream,
    chunks: SyncSender<(Instant, Vec<u8>)>,
) {
    let mut buffer = vec![0; CHUNK_BYTES_MAX];
    loop {
        match from.read(&mut buffer) {
            Ok(0) => return,
            Ok(n_read) => {
                let due = Instant::now() + shared.lock().latency;
                let chunk = buffer.get(..n_read).unwrap_or_default().to_vec();
                if chunks.send((due, chunk)).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // A reset on one side resets the whole connection, as it would without the proxy.
            Err(_) => {
                shared.close(id);
                return;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    /// Generous: the machine is loaded, so timings are only ever bounded below.
    const PATIENCE: Duration = Duration::from_secs(10);

    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let address = listener.local_addr().unwrap();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                thread::spawn(move || {
                    let mut reader = stream.try_clone().unwrap();
                    let _ = io::copy(&mut reader, &mut stream);
                    let _ = stream.shutdown(Shutdown::Write);
                });
            }
        });
        address
    }

    /// An echo server that also keeps every byte it received, to show a request got through.
    fn recording_echo_server() -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let address = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&received);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let record = Arc::clone(&record);
                thread::spawn(move || {
                    let mut buffer = [0; 4096];
                    while let Ok(n @ 1..) = stream.read(&mut buffer) {
                        record.lock().unwrap().extend_from_slice(&buffer[..n]);
                        if stream.write_all(&buffer[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (address, received)
    }

    fn connect(proxy: &Proxy) -> TcpStream {
        let stream = TcpStream::connect(proxy.address()).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        stream
    }

    fn round_trip(stream: &mut TcpStream, message: &[u8]) {
        stream.write_all(message).unwrap();
        let mut answer = vec![0; message.len()];
        stream.read_exact(&mut answer).unwrap();
        assert_eq!(answer, message);
    }

    /// True if the stream is closed: its next read ends or fails (a write may still be buffered).
    fn is_closed(stream: &mut TcpStream) -> bool {
        let _ = stream.write_all(b"anyone?");
        matches!(stream.read(&mut [0; 16]), Ok(0) | Err(_))
    }

    fn wait_for(what: &str, condition: impl Fn() -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !condition() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn bytes_round_trip_on_many_connections_and_a_large_payload_arrives_whole() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut streams: Vec<_> = (0..20).map(|_| connect(&proxy)).collect();
        for (i, stream) in streams.iter_mut().enumerate() {
            round_trip(stream, format!("hello {i}").as_bytes());
        }
        let payload: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
        let mut stream = connect(&proxy);
        let mut writer = stream.try_clone().unwrap();
        let sent = payload.clone();
        let writing = thread::spawn(move || {
            writer.write_all(&sent).unwrap();
            writer.shutdown(Shutdown::Write).unwrap();
        });
        let mut echoed = Vec::new();
        stream.read_to_end(&mut echoed).unwrap();
        writing.join().unwrap();
        assert!(echoed == payload, "the payload came back altered");
        let stats = proxy.stats();
        assert_eq!(stats.connections_accepted, 21);
        assert!(stats.bytes_to_upstream >= 1 << 20 && stats.bytes_to_client >= 1 << 20);
        drop((streams, stream));
        wait_for("every connection to close and its threads to end", || {
            let stats = proxy.stats();
            stats.connections_open == 0 && stats.threads == 1
        });
    }

    #[test]
    fn latency_delays_each_direction() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut stream = connect(&proxy);
        round_trip(&mut stream, b"warm");
        proxy.set_latency(Duration::from_millis(100));
        let started = Instant::now();
        round_trip(&mut stream, b"slow");
        assert!(
            started.elapsed() >= Duration::from_millis(195),
            "{:?}",
            started.elapsed()
        );
        proxy.set_latency(Duration::ZERO);
        round_trip(&mut stream, b"fast again");
    }

    #[test]
    fn dropped_connections_are_closed_and_new_ones_work() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut stream = connect(&proxy);
        round_trip(&mut stream, b"before");
        proxy.drop_connections();
        assert!(is_closed(&mut stream));
        round_trip(&mut connect(&proxy), b"after");
        assert_eq!(proxy.stats().connections_cut, 1);
    }

    #[test]
    fn a_black_hole_holds_bytes_and_new_connections_until_it_heals() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut open = connect(&proxy);
        round_trip(&mut open, b"before");
        let started = Instant::now();
        proxy.black_hole(Duration::from_millis(500));
        open.write_all(b"held").unwrap();
        let mut new = connect(&proxy);
        // Each answer is checked on its own: neither may come before the heal.
        round_trip(&mut new, b"not connected upstream yet");
        assert!(
            started.elapsed() >= Duration::from_millis(495),
            "{:?}",
            started.elapsed()
        );
        let mut answer = [0; 4];
        open.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"held");
        round_trip(&mut open, b"healed");
        assert_eq!(proxy.stats().black_holes, 1);
    }

    #[test]
    fn a_lost_reply_reaches_upstream_but_not_the_client_and_cuts_its_connection() {
        let (upstream, received) = recording_echo_server();
        let proxy = Proxy::start(upstream).unwrap();
        let mut stream = connect(&proxy);
        round_trip(&mut stream, b"before ");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        proxy.lose_replies(1, PATIENCE, move |reply_to| {
            record.lock().unwrap().push(reply_to);
            true
        });
        stream.write_all(b"lost answer").unwrap();
        let mut answer = Vec::new();
        // The connection ends (a FIN after the cut) with nothing of the answer in it.
        let _ = stream.read_to_end(&mut answer);
        assert_eq!(answer, b"", "part of the answer got through");
        wait_for("the request to reach upstream", || {
            received.lock().unwrap().ends_with(b"lost answer")
        });
        assert!(is_closed(&mut stream));
        let expected = ReplyTo {
            client: stream.local_addr().unwrap(),
            proxy: proxy.address(),
        };
        assert_eq!(*seen.lock().unwrap(), [expected]);
        assert_eq!(proxy.stats().replies_lost, 1);
        // One reply was asked for: the fault is spent, and new connections work.
        round_trip(&mut connect(&proxy), b"after");
        assert_eq!(proxy.stats().replies_lost, 1);
    }

    #[test]
    fn with_writes_marked_only_a_writes_reply_is_lost() {
        let (upstream, received) = recording_echo_server();
        let proxy = Proxy::start(upstream).unwrap();
        proxy.mark_writes(&[b"{\"format\":"]);
        proxy.lose_replies(1, PATIENCE, |_| true);
        let mut stream = connect(&proxy);
        round_trip(&mut stream, b"GET k");
        round_trip(&mut stream, b"GET k again");
        // The marker split across two writes still marks the second as a write.
        let first = b"PUT k {\"for";
        stream.write_all(first).unwrap();
        let mut echoed = vec![0; first.len()];
        stream.read_exact(&mut echoed).unwrap();
        assert_eq!(echoed, first);
        stream.write_all(b"mat\":2}").unwrap();
        wait_for("the write to reach upstream", || {
            received.lock().unwrap().ends_with(b"mat\":2}")
        });
        assert!(is_closed(&mut stream));
        assert_eq!(proxy.stats().replies_lost, 1);
    }

    #[test]
    fn a_declined_reply_passes_and_an_expired_fault_takes_nothing() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let offered = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&offered);
        // Declines the first reply it is offered, takes the second.
        proxy.lose_replies(1, PATIENCE, move |_| {
            count.fetch_add(1, Ordering::SeqCst) > 0
        });
        let mut stream = connect(&proxy);
        round_trip(&mut stream, b"declined");
        stream.write_all(b"taken").unwrap();
        assert!(is_closed(&mut stream));
        assert_eq!(offered.load(Ordering::SeqCst), 2);
        proxy.lose_replies(1, Duration::from_millis(50), |_| true);
        thread::sleep(Duration::from_millis(100));
        round_trip(&mut connect(&proxy), b"too late to be lost");
        assert_eq!(proxy.stats().replies_lost, 1);
    }

    #[test]
    fn a_hook_runs_before_its_reply_is_forwarded_and_the_reply_arrives_whole() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut stream = connect(&proxy);
        round_trip(&mut stream, b"warm");
        let seen = Arc::new(Mutex::new(None));
        let record = Arc::clone(&seen);
        proxy.before_replies(1, PATIENCE, move |reply_to| {
            thread::sleep(Duration::from_millis(300));
            *record.lock().unwrap() = Some(reply_to);
            true
        });
        let started = Instant::now();
        round_trip(&mut stream, b"held until the hook returned");
        assert!(
            started.elapsed() >= Duration::from_millis(295),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            *seen.lock().unwrap(),
            Some(ReplyTo {
                client: stream.local_addr().unwrap(),
                proxy: proxy.address(),
            })
        );
        let started = Instant::now();
        round_trip(&mut stream, b"spent");
        assert!(started.elapsed() < Duration::from_millis(295));
        let stats = proxy.stats();
        assert_eq!((stats.replies_hooked, stats.replies_lost), (1, 0));
    }

    #[test]
    fn a_marker_is_found_across_chunk_boundaries() {
        let markers = vec![b"abcd".to_vec(), b"xy".to_vec()];
        let mut scan = WriteScan::default();
        assert!(!scan.is_write(&markers, b"0000ab"));
        assert!(scan.is_write(&markers, b"cd"));
        assert!(!scan.is_write(&markers, b"a"));
        assert!(!scan.is_write(&markers, b"b"));
        assert!(scan.is_write(&markers, b"cd0"));
        assert!(!scan.is_write(&markers, b"x"));
        assert!(scan.is_write(&markers, b"y"));
        assert!(WriteScan::default().is_write(&[], b"anything"));
    }

    #[test]
    fn a_failed_upstream_connect_closes_the_client() {
        let refusing = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let upstream = refusing.local_addr().unwrap();
        drop(refusing);
        let proxy = Proxy::start(upstream).unwrap();
        assert!(is_closed(&mut connect(&proxy)));
        assert_eq!(proxy.stats().upstream_failures, 1);
    }

    #[test]
    fn dropping_the_proxy_closes_everything_and_ends_every_thread() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut streams: Vec<_> = (0..5).map(|_| connect(&proxy)).collect();
        streams.iter_mut().for_each(|s| round_trip(s, b"hi"));
        proxy.black_hole(Duration::from_secs(3600));
        proxy.set_latency(Duration::from_secs(60));
        let mut held = connect(&proxy);
        held.write_all(b"never forwarded").unwrap();
        let (address, shared) = (proxy.address(), Arc::clone(&proxy.shared));
        let n_threads_least = 1 + 5 * 4; // the accept loop, and four per served connection
        assert!(proxy.stats().threads >= n_threads_least);
        drop(proxy);
        streams.iter_mut().for_each(|s| assert!(is_closed(s)));
        assert!(is_closed(&mut held));
        if let Ok(mut late) = TcpStream::connect(address) {
            late.set_read_timeout(Some(PATIENCE)).unwrap();
            assert!(is_closed(&mut late));
        }
        wait_for("the proxy's threads to end", || {
            shared.lock().stats.threads == 0
        });
    }
}
