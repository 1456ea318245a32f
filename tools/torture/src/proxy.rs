//! A TCP fault proxy: a store's clients connect to it instead of the server, and the harness
//! adds latency, cuts connections or opens a black hole between them while they run.
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
//!
//! No thread outlives its connection: a cut shuts the sockets down, which wakes a reader blocked
//! in `read` and a writer blocked in `write`, and a writer waiting for its chunk's time or for a
//! heal waits on a condvar that a cut notifies.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
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
/// Longer black holes are clamped, so the heal instant can always be computed.
const BLACK_HOLE_MAX: Duration = Duration::from_secs(3600);

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
    /// Every open connection's sockets (clones), to shut them down on a cut. A connection is
    /// open while its id is here; its threads end once it is gone.
    open: HashMap<u64, Vec<TcpStream>>,
    /// The counters (`connections_open` is `open`'s length, filled in by [`Proxy::stats`]).
    stats: ProxyStats,
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

    /// Registers a new connection, or `None` once the proxy is stopping.
    fn open_connection(&self, client: TcpStream) -> Option<u64> {
        let mut state = self.lock();
        if state.stopping {
            return None;
        }
        state.next_id += 1;
        let id = state.next_id;
        state.open.insert(id, vec![client]);
        state.stats.connections_accepted += 1;
        Some(id)
    }

    /// Adds a socket to an open connection; false (and the socket closed) if it was cut.
    fn add_socket(&self, id: u64, socket: TcpStream) -> bool {
        match self.lock().open.get_mut(&id) {
            Some(sockets) => sockets.push(socket),
            None => return false,
        }
        true
    }

    /// Closes one connection; its threads end. Closing it again does nothing.
    fn close(&self, id: u64) {
        if let Some(sockets) = self.lock().open.remove(&id) {
            shut_down(sockets);
            self.changed.notify_all();
        }
    }

    /// Cuts every open connection, and with `stop` every later one.
    fn cut_all(&self, stop: bool) {
        let mut state = self.lock();
        state.stopping |= stop;
        let cut: Vec<_> = state.open.drain().collect();
        state.stats.connections_cut += cut.len() as u64;
        cut.into_iter().for_each(|(_, sockets)| shut_down(sockets));
        self.changed.notify_all();
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
        let Ok((client, _peer)) = accepted else {
            thread::sleep(ACCEPT_RETRY);
            continue;
        };
        // Out of file descriptors: the client sees its connection closed.
        let Ok(registered) = client.try_clone() else {
            continue;
        };
        let Some(id) = shared.open_connection(registered) else {
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
/// writes each once it is due and no black hole is open.
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
    for (due, chunk) in queued {
        if !shared.wait_to_forward(id, due) {
            return;
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
