//! The S3 server's clock, read from the `Date` header of its responses.
//!
//! Every S3 response carries a `Date` (HTTP requires it of a server with a clock, and S3 signs
//! requests against its own time, so every S3 implementation has one). [`DateConnector`] wraps
//! object_store's HTTP client so that each response that arrives — whatever its status: a 404
//! of a missing key or the 412 of a lost CAS tells the time as well as a 200 — records its
//! `Date` in a [`ServerClock`], paired with the local instant the response arrived. Reading the
//! clock then costs no round trip: a warm client's clock is the last response's `Date` plus the
//! local monotonic time since.
//!
//! A `Date` has whole seconds, truncated: the server's time was somewhere in the second it
//! names when it sent the response, and more has passed by its arrival. A reading is therefore
//! behind the server's time by less than a second plus the response's transit, and never ahead
//! of it. The store says so (`Capabilities::clock_uncertain_ms`), and the core ends a phase
//! only once the reading is that far past its deadline (see the module documentation of
//! `s3`).
//!
//! Each response replaces the reading before it (`ServerClock` keeps the last to arrive), so a
//! reading may step back by up to a second when a new `Date` arrives. That is harmless: every
//! reading is a lower bound of the server's time on its own. Keeping the larger of two estimates
//! instead would hold on to an old reading indefinitely, and a local clock that runs fast would
//! carry it ahead of the server's.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use async_trait::async_trait;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService,
};
use object_store::{ClientOptions, HeaderValue};

use super::errors::ObservingConnector;
use crate::boot_clock::BootInstant;
use crate::server_clock::ServerClock;

/// The epoch of the S3 store's clock. Fixed, so that every process on a bucket (whatever
/// endpoint or region name it reaches it by) computes the same, and deadlines stored by one
/// process hold for all: there is one time, the servers', which S3 keeps on UTC.
pub const EPOCH: &str = "s3-date";

/// How far behind the server's time a reading may be: a `Date` has whole seconds.
pub const UNCERTAIN_MS: u64 = 1_000;

/// object_store's HTTP client (reqwest, with failures observed by [`ObservingConnector`]),
/// recording every response's `Date` into a [`ServerClock`].
#[derive(Debug)]
pub struct DateConnector {
    clock: Arc<ServerClock>,
}

impl DateConnector {
    /// A connector whose clients record into `clock`.
    pub fn new(clock: Arc<ServerClock>) -> DateConnector {
        DateConnector { clock }
    }
}

impl HttpConnector for DateConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ObservingConnector.connect(options)?;
        Ok(HttpClient::new(DateRecording {
            inner,
            clock: Arc::clone(&self.clock),
        }))
    }
}

/// The service [`DateConnector`] builds: `inner`, with each response's `Date` recorded.
#[derive(Debug)]
struct DateRecording {
    inner: HttpClient,
    clock: Arc<ServerClock>,
}

#[async_trait]
impl HttpService for DateRecording {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let sent = BootInstant::now();
        let response = self.inner.execute(request).await?;
        // The headers are in: paired with this instant, the reading under-estimates by the
        // transit (see `ServerClock`), never over.
        let arrived = BootInstant::now();
        if let Some(server_ms) = response.headers().get("date").and_then(date_ms) {
            self.clock.observe(server_ms, sent, arrived);
        }
        Ok(response)
    }
}

/// A `Date` header's time in milliseconds since the Unix epoch; `None` for anything that is
/// not an HTTP date (a server's bug must not stop the client: the store reports a missing
/// clock when it needs one).
fn date_ms(value: &HeaderValue) -> Option<u64> {
    let text = value.to_str().ok()?;
    let time = httpdate::parse_http_date(text.trim()).ok()?;
    let since_epoch = time.duration_since(UNIX_EPOCH).ok()?;
    u64::try_from(since_epoch.as_millis()).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::StoreClock;
    use object_store::client::{HttpErrorKind, HttpRequestBody, HttpResponseBody};
    use std::time::Duration;

    /// 1994-11-06T08:49:37Z, the example of RFC 9110, in ms since the Unix epoch.
    const EXAMPLE_MS: u64 = 784_111_777_000;

    /// A server that answers every request with `status` and, when given, this `Date` header
    /// (raw bytes, so that a test can send what no well-behaved server would); or fails, like
    /// a dropped connection, when `status` is 0.
    #[derive(Debug)]
    struct FakeServer {
        status: u16,
        date: Option<&'static [u8]>,
    }

    #[async_trait]
    impl HttpService for FakeServer {
        async fn call(&self, _request: HttpRequest) -> Result<HttpResponse, HttpError> {
            if self.status == 0 {
                return Err(HttpError::new(
                    HttpErrorKind::Connect,
                    std::io::Error::other("connection reset"),
                ));
            }
            let mut response = HttpResponse::new(HttpResponseBody::from(Vec::new()));
            *response.status_mut() = self.status.try_into().unwrap();
            if let Some(date) = self.date {
                response
                    .headers_mut()
                    .insert("date", HeaderValue::from_bytes(date).unwrap());
            }
            Ok(response)
        }
    }

    /// Sends one request through [`DateRecording`] to `server`; returns the clock and whether
    /// the request succeeded.
    async fn exchange(server: FakeServer) -> (Arc<ServerClock>, bool) {
        let clock = Arc::new(ServerClock::new(EPOCH));
        let service = DateRecording {
            inner: HttpClient::new(server),
            clock: Arc::clone(&clock),
        };
        let answered = service
            .call(HttpRequest::new(HttpRequestBody::empty()))
            .await
            .is_ok();
        (clock, answered)
    }

    fn reading(clock: &ServerClock) -> Option<u64> {
        match clock.now() {
            Some(StoreClock::Time { now_ms, epoch, .. }) => {
                assert_eq!(epoch, EPOCH);
                Some(now_ms)
            }
            Some(StoreClock::None) => panic!("a ServerClock reads Time or nothing"),
            None => None,
        }
    }

    #[tokio::test]
    async fn every_status_records_its_date() {
        for status in [200, 404, 412, 503] {
            let (clock, answered) = exchange(FakeServer {
                status,
                date: Some(b"Sun, 06 Nov 1994 08:49:37 GMT"),
            })
            .await;
            assert!(answered, "{status}: the response is passed on");
            let now_ms = reading(&clock).unwrap_or_else(|| panic!("{status}: no reading"));
            // The reading, plus the few ms of local time since the response arrived.
            assert!(
                (EXAMPLE_MS..EXAMPLE_MS + 1_000).contains(&now_ms),
                "{status}: {now_ms}"
            );
        }
    }

    #[tokio::test]
    async fn the_reading_advances_with_local_time() {
        let (clock, _) = exchange(FakeServer {
            status: 404,
            date: Some(b"Sun, 06 Nov 1994 08:49:37 GMT"),
        })
        .await;
        let first = reading(&clock).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let second = reading(&clock).unwrap();
        assert!(second >= first + 30, "{first} then {second}");
    }

    #[tokio::test]
    async fn the_obsolete_http_date_formats_are_read_too() {
        for date in [
            &b"Sunday, 06-Nov-94 08:49:37 GMT"[..],
            b"Sun Nov  6 08:49:37 1994",
        ] {
            let (clock, _) = exchange(FakeServer {
                status: 200,
                date: Some(date),
            })
            .await;
            let now_ms = reading(&clock).unwrap();
            assert!(
                (EXAMPLE_MS..EXAMPLE_MS + 1_000).contains(&now_ms),
                "{}: {now_ms}",
                String::from_utf8_lossy(date)
            );
        }
    }

    #[tokio::test]
    async fn no_date_records_nothing() {
        let (clock, answered) = exchange(FakeServer {
            status: 200,
            date: None,
        })
        .await;
        assert!(answered);
        assert_eq!(reading(&clock), None);
    }

    #[tokio::test]
    async fn a_garbage_date_records_nothing() {
        for garbage in [
            &b"yesterday"[..],
            b"",
            b"Sun, 06 Nov 1994 08:49:37",
            b"Sun, 32 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 GMT\xff",
            b"\xe9t\xe9",
            b"Thu, 01 Jan 1970 00:00:00 GMTT",
        ] {
            let (clock, answered) = exchange(FakeServer {
                status: 200,
                date: Some(garbage),
            })
            .await;
            assert!(answered, "{garbage:?}: the response is passed on");
            assert_eq!(reading(&clock), None, "{garbage:?}");
        }
    }

    #[tokio::test]
    async fn a_failed_request_records_nothing_and_keeps_its_error() {
        let (clock, answered) = exchange(FakeServer {
            status: 0,
            date: None,
        })
        .await;
        assert!(!answered);
        assert_eq!(reading(&clock), None);
    }

    #[tokio::test]
    async fn a_later_response_replaces_the_reading() {
        let clock = Arc::new(ServerClock::new(EPOCH));
        for (date, at_least) in [
            (&b"Sun, 06 Nov 1994 08:49:37 GMT"[..], EXAMPLE_MS),
            (b"Sun, 06 Nov 1994 08:50:37 GMT", EXAMPLE_MS + 60_000),
        ] {
            let service = DateRecording {
                inner: HttpClient::new(FakeServer {
                    status: 200,
                    date: Some(date),
                }),
                clock: Arc::clone(&clock),
            };
            service
                .call(HttpRequest::new(HttpRequestBody::empty()))
                .await
                .unwrap();
            let now_ms = reading(&clock).unwrap();
            assert!((at_least..at_least + 1_000).contains(&now_ms), "{now_ms}");
        }
    }
}
