//! A small HTTP/1.1 client for the tests of `baton serve`: one request per connection, the
//! status and the body parsed as JSON. Written on `std::net` so that the tests see exactly the
//! bytes the server sends.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

/// An answer: its status and its body (`Value::Null` when it is not JSON; `raw` has the text).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: String,
    pub body: Value,
    pub raw: String,
}

/// Sends `method path` with an optional bearer token and body; the answer.
pub fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Answer {
    request_with(address, method, path, &[], token, body)
}

/// [`request`] with more header lines (`("Host", …)` replaces the address as the `Host`).
pub fn request_with(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Answer {
    let mut stream = TcpStream::connect(address).expect("connect to baton serve");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        head.push_str(&format!("Host: {address}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let body = body.unwrap_or_default();
    if !body.is_empty() || method == "POST" || method == "PUT" {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("send the head");
    // A server may answer (413, say) before it has read the whole body, and close.
    let _ = stream.write_all(body);
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (headers, raw) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = headers
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let raw = if headers
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(raw)
    } else {
        raw.to_owned()
    };
    Answer {
        status,
        headers: headers.to_owned(),
        body: serde_json::from_str(&raw).unwrap_or(Value::Null),
        raw,
    }
}

/// GET with an optional token.
pub fn get(address: SocketAddr, path: &str, token: Option<&str>) -> Answer {
    request(address, "GET", path, token, None)
}

fn dechunk(mut raw: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = raw.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        raw = rest[size..].trim_start_matches("\r\n");
    }
    out
}
