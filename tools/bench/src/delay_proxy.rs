//! A TCP proxy on loopback that holds every byte for half a round trip each way: a store that
//! is a network hop away (`serve-overhead --store-rtt`), as a managed database is, while the
//! benchmark still runs against a server on this machine.
//!
//! Blocking threads, not tokio: its timer rounds sleeps up to whole milliseconds, and the
//! delays worth measuring are fractions of one. Each connection gets a reader and a writer
//! thread per direction; the writer sleeps until each chunk's time, so order and the delay of
//! every chunk hold whatever the chunks' sizes.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A running proxy; its threads end with the process (the benchmark's).
pub struct DelayProxy {
    /// `127.0.0.1:PORT`, to put in place of the store's address.
    pub address: String,
}

impl DelayProxy {
    /// Listens on a free loopback port and forwards each connection to `target`, adding `rtt`
    /// to every round trip.
    pub fn start(target: &str, rtt: Duration) -> Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").context("cannot listen on loopback")?;
        let address = listener.local_addr()?.to_string();
        let target = target.to_owned();
        let one_way = rtt / 2;
        thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                for stream in [&client, &server] {
                    let _ = stream.set_nodelay(true);
                }
                let (Ok(client_out), Ok(server_out)) = (client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                forward(client, server_out, one_way);
                forward(server, client_out, one_way);
            }
        });
        Ok(DelayProxy { address })
    }
}

/// `url` split around its `host:port` (after `//` and any `user@`): the part before, the
/// address, the part after.
pub fn split_address(url: &str) -> Result<(&str, &str, &str)> {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        bail!("--store-rtt needs a store URL with a host:port, not {url}");
    };
    let start = url[scheme_end..]
        .find('@')
        .map_or(scheme_end, |i| scheme_end + i + 1);
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    let address = &url[start..end];
    if !address.contains(':') {
        bail!("--store-rtt needs the store's port in its URL: {url}");
    }
    Ok((&url[..start], address, &url[end..]))
}

/// Copies `from` to `to`, each chunk written `delay` after it was read.
fn forward(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (send, receive) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if send
                        .send((Instant::now() + delay, buffer[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = from.shutdown(Shutdown::Read);
    });
    thread::spawn(move || {
        for (at, chunk) in receive {
            let now = Instant::now();
            if at > now {
                thread::sleep(at - now);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn the_address_is_found_with_or_without_a_user_and_a_path() {
        assert_eq!(
            split_address("postgres://postgres@127.0.0.1:5432/db").unwrap(),
            ("postgres://postgres@", "127.0.0.1:5432", "/db")
        );
        assert_eq!(
            split_address("redis://127.0.0.1:6379").unwrap(),
            ("redis://", "127.0.0.1:6379", "")
        );
        assert!(split_address("sqlite:/tmp/x.db").is_err());
        assert!(split_address("postgres://db.example/x").is_err());
    }

    #[test]
    fn bytes_come_back_in_order_and_late() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = echo.local_addr().unwrap().to_string();
        thread::spawn(move || {
            let (mut stream, _) = echo.accept().unwrap();
            let mut buffer = [0u8; 1024];
            while let Ok(n) = stream.read(&mut buffer) {
                if n == 0 || stream.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        });
        let proxy = DelayProxy::start(&target, Duration::from_millis(20)).unwrap();
        let mut stream = TcpStream::connect(&proxy.address).unwrap();
        let started = Instant::now();
        stream.write_all(b"hello, ").unwrap();
        stream.write_all(b"world").unwrap();
        let mut got = vec![0u8; 12];
        stream.read_exact(&mut got).unwrap();
        assert_eq!(got, b"hello, world");
        assert!(started.elapsed() >= Duration::from_millis(20));
    }
}
