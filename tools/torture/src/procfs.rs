//! What `/proc` says about the harness's client processes: which of them owns a TCP connection,
//! their children, and whether every thread of one is stopped.
//!
//! The fault proxy sees a connection only as the client's address (`127.0.0.1:PORT`). To stop
//! the process behind it, the harness goes from that address to the client's socket in the
//! kernel's TCP tables (`/proc/net/tcp` and `tcp6`: the line whose local address is the
//! client's and whose remote one is the proxy's gives the socket's inode), and from the inode to
//! the process that holds it (`/proc/PID/fd/N` links to `socket:[INODE]`). Only the candidates
//! it is given are searched, so nothing outside the harness's own children is ever named.
//!
//! Every reader here takes the kernel's text as outside input: an odd or truncated line is
//! skipped, never a panic, and a process that ended meanwhile is simply not found.

use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The kernel's TCP tables, IPv4 then IPv6.
const TCP_TABLES: [&str; 2] = ["/proc/net/tcp", "/proc/net/tcp6"];

/// The inode of the socket whose local address is `local` and whose peer is `remote` (the
/// client's end of a connection to the proxy: its address, and the proxy's). `None` if no table
/// lists it (the connection closed meanwhile, or it sits in TIME_WAIT, which has no inode).
pub fn socket_inode(local: SocketAddr, remote: SocketAddr) -> io::Result<Option<u64>> {
    for table in TCP_TABLES {
        let text = match fs::read_to_string(table) {
            Ok(text) => text,
            // A kernel without IPv6 has no tcp6.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("reading {table}: {e}"))),
        };
        if let Some(inode) = inode_in_table(&text, local, remote) {
            return Ok(Some(inode));
        }
    }
    Ok(None)
}

/// The inode of the socket `local` → `remote` in the text of one TCP table.
///
/// A line is `sl local rem st tx:rx tr:when retrnsmt uid timeout inode …`; the first line is
/// the header. Lines that do not parse are skipped; inode 0 (a socket no process holds) is no
/// answer.
pub fn inode_in_table(text: &str, local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(l), Some(r), Some(inode)) = (fields.get(1), fields.get(2), fields.get(9)) else {
            return None;
        };
        if parse_address(l)? != local || parse_address(r)? != remote {
            return None;
        }
        inode.parse::<u64>().ok().filter(|&inode| inode != 0)
    })
}

/// An address as the TCP tables print it: `HEX_IP:HEX_PORT`, the IP as 32-bit words each
/// printed in the machine's byte order (8 hex digits for IPv4, 32 for IPv6). An IPv4 address
/// mapped into IPv6 (`::ffff:a.b.c.d`, a dual-stack socket) comes back as IPv4, so it compares
/// equal to the address the proxy saw.
pub fn parse_address(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(ip)?.to_ne_bytes())),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                let digits = ip.get(i * 8..i * 8 + 8)?;
                chunk.copy_from_slice(&word(digits)?.to_ne_bytes());
            }
            let v6 = Ipv6Addr::from(bytes);
            v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

fn word(hex: &str) -> Option<u32> {
    u32::from_str_radix(hex, 16).ok()
}

/// Whether process `pid` has the socket `inode` open (one of its `/proc/PID/fd` links is
/// `socket:[INODE]`). False for a process that is gone or whose descriptors cannot be read.
pub fn holds_socket(pid: i32, inode: u64) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let wanted = format!("socket:[{inode}]");
    fds.flatten().any(|fd| {
        fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == wanted.as_str())
    })
}

/// The first of `candidates` that holds the client end of the connection `client` → `proxy`.
/// `Ok(None)` when none does (the socket is another process's, or already closed).
pub fn owner_of_connection(
    client: SocketAddr,
    proxy: SocketAddr,
    candidates: &[i32],
) -> io::Result<Option<i32>> {
    let Some(inode) = socket_inode(client, proxy)? else {
        return Ok(None);
    };
    Ok(candidates
        .iter()
        .copied()
        .find(|&pid| holds_socket(pid, inode)))
}

/// The children of `pid`, from every thread's `/proc/PID/task/TID/children` (a child belongs to
/// the thread that spawned it). Empty if the process is gone.
pub fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut children: Vec<i32> = tasks
        .flatten()
        .filter_map(|task| fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    children.sort_unstable();
    children.dedup();
    children
}

pub use baton_testkit::stopped::{all_threads_stopped, stat_state};

/// The processes whose environment has `name` with a value `wanted` accepts (one that cannot
/// be read, or ends meanwhile, is left out): how the harness finds a client's keeper, which is
/// in no process group of the client's.
pub fn with_env(name: &str, wanted: impl Fn(&str) -> bool) -> Vec<i32> {
    let prefix = format!("{name}=");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let found = environ.split(|&b| b == 0).any(|variable| {
            std::str::from_utf8(variable)
                .ok()
                .and_then(|v| v.strip_prefix(&prefix))
                .is_some_and(&wanted)
        });
        if found {
            pids.push(pid);
        }
    }
    pids
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::{TcpListener, TcpStream};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[test]
    fn processes_are_found_by_a_variable_of_their_environment() {
        let mark = format!("probe {}", std::process::id());
        let mut child = Command::new("sleep")
            .arg("30")
            .env("BATON_TORTURE_PROBE", &mark)
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        // The environment is the child's own only once it has exec'd `sleep`: look until then.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut found = Vec::new();
        while found.is_empty() && std::time::Instant::now() < deadline {
            found = with_env("BATON_TORTURE_PROBE", |value| value == mark);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let other = with_env("BATON_TORTURE_PROBE", |value| value == "someone else");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(found, [pid]);
        assert!(other.is_empty(), "{other:?}");
    }

    #[test]
    fn addresses_parse_as_the_kernel_prints_them() {
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let printed = format!("{:08X}:{:04X}", u32::from_ne_bytes([127, 0, 0, 1]), 8080);
        assert_eq!(parse_address(&printed), Some(local));
        // ::ffff:127.0.0.1, a dual-stack socket's view of an IPv4 peer.
        let mapped: String = [
            [0u8, 0, 0, 0],
            [0, 0, 0, 0],
            [0, 0, 0xff, 0xff],
            [127, 0, 0, 1],
        ]
        .iter()
        .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
        .collect();
        assert_eq!(parse_address(&format!("{mapped}:1F90")), Some(local));
        for odd in [
            "",
            ":",
            "0100007F",
            "0100007F:",
            "XYZ:0050",
            "0100007F:FFFFF",
            "01:0050",
        ] {
            assert_eq!(parse_address(odd), None, "{odd:?}");
        }
    }

    #[test]
    fn odd_lines_in_a_table_are_skipped_not_fatal() {
        let local: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let remote: SocketAddr = "127.0.0.1:5432".parse().unwrap();
        let a = |s: SocketAddr| {
            let SocketAddr::V4(v4) = s else { panic!() };
            format!(
                "{:08X}:{:04X}",
                u32::from_ne_bytes(v4.ip().octets()),
                v4.port()
            )
        };
        let line = |inode: &str| {
            format!(
                "   1: {} {} 01 00000000:00000000 00:00000000 00000000     0        0 {inode} 1",
                a(local),
                a(remote)
            )
        };
        let table = format!(
            "  sl  local_address rem_address   st ...\n\
             garbage\n\
             \n\
             2: {} {}\n\
             {}\n\
             {}\n",
            a(local),
            a(remote),
            line("0"),
            line("777")
        );
        assert_eq!(inode_in_table(&table, local, remote), Some(777));
        assert_eq!(inode_in_table(&table, remote, local), None);
        assert_eq!(inode_in_table("", local, remote), None);
    }

    #[test]
    fn the_owner_of_a_connection_is_found_among_the_candidates_only() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let server = listener.local_addr().unwrap();
        let client = TcpStream::connect(server).unwrap();
        let (_accepted, _) = listener.accept().unwrap();
        let me = i32::try_from(std::process::id()).unwrap();
        let mine = client.local_addr().unwrap();
        assert_eq!(
            owner_of_connection(mine, server, &[1, me]).unwrap(),
            Some(me)
        );
        assert_eq!(owner_of_connection(mine, server, &[1]).unwrap(), None);
        // The server's end of the same connection is not the client's.
        assert_eq!(owner_of_connection(server, mine, &[]).unwrap(), None);
    }

    #[test]
    fn another_process_is_found_by_its_connection_and_stops_whole() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let server = listener.local_addr().unwrap();
        // A shell holding a connection of its own, waiting for a line on it.
        let mut shell = Command::new("bash")
            .args([
                "-c",
                &format!(
                    "exec 3<>/dev/tcp/127.0.0.1/{}; echo hello >&3; read -r line <&3",
                    server.port()
                ),
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let (mut accepted, peer) = listener.accept().unwrap();
        let mut hello = String::new();
        BufReader::new(accepted.try_clone().unwrap())
            .read_line(&mut hello)
            .unwrap();
        let pid = i32::try_from(shell.id()).unwrap();
        assert_eq!(
            owner_of_connection(peer, server, &[pid]).unwrap(),
            Some(pid)
        );
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        assert!(all_threads_stopped(pid, Duration::from_secs(10)));
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
        accepted.write_all(b"bye\n").unwrap();
        assert!(shell.wait().unwrap().success());
        assert!(!all_threads_stopped(pid, Duration::ZERO));
    }

    #[test]
    fn a_shells_children_are_listed() {
        let mut shell = Command::new("bash")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .spawn()
            .unwrap();
        let pid = i32::try_from(shell.id()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while children(pid).len() < 2 {
            assert!(Instant::now() < deadline, "no children seen");
            std::thread::sleep(Duration::from_millis(10));
        }
        for child in children(pid) {
            // SAFETY: kill(2) on our own grandchildren.
            unsafe { libc::kill(child, libc::SIGKILL) };
        }
        shell.wait().unwrap();
        assert!(children(pid).is_empty());
    }
}
