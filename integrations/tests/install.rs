//! `scripts/dist.sh` packs the binary these tests run; an HTTP/1.1 file server written here
//! serves the archive on 127.0.0.1; `install.sh` (run by dash, Debian's /bin/sh, so a bashism
//! fails here) fetches it, checks its SHA-256 and installs it, or refuses and changes nothing.
//!
//! The archive holds this build's `baton` stripped of its symbols and debug information
//! (`strip`): the same program and the same ELF headers dist.sh reads, in 53 MB instead of
//! 375 MB (gzip takes 3 s instead of 14). It is packed once per test process ([`release`]) and
//! held in memory; each test serves it, or a corrupted copy, from a server of its own, which
//! records every request.

use baton_testkit as common;

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use common::dist::{
    dist_command, repo_root, run_checked, stripped_baton, this_target, tool, workspace_version,
};
use common::{with_fresh_sqlite, Cmd, Ctx, Done};

// ----- the repository's scripts ---------------------------------------------------------------

fn install_script() -> PathBuf {
    repo_root().join("install.sh")
}

/// Checks that dist.sh printed one line, the archive's path, and returns that path.
fn dist_archive_path(output: &Output, out: &Path) -> PathBuf {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let expected = out.join(archive_name());
    assert_eq!(
        stdout,
        format!("{}\n", expected.display()),
        "dist.sh prints one line, the archive's path; stderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    expected
}

/// `baton-VERSION-TARGET.tar.gz` for this build.
fn archive_name() -> String {
    format!("baton-{}-{}.tar.gz", workspace_version(), this_target())
}

/// `baton-VERSION-TARGET.tar.gz.sha256`.
fn sha256_name() -> String {
    format!("{}.sha256", archive_name())
}

/// The archive dist.sh made of the stripped binary, with its `.sha256` file.
struct Release {
    archive: Arc<Vec<u8>>,
    sha256_file: Arc<Vec<u8>>,
    /// The archive's SHA-256 as dist.sh wrote it (hex).
    digest: String,
}

/// Packed once per test process: the tests that install share it.
fn release() -> &'static Release {
    static RELEASE: OnceLock<Release> = OnceLock::new();
    RELEASE.get_or_init(|| {
        let scratch = tempfile::Builder::new()
            .prefix("baton-install-test-")
            .tempdir()
            .expect("create a scratch directory");
        let binary = stripped_baton(scratch.path());
        let out = scratch.path().join("out");
        let output = run_checked(&mut dist_command(&binary, &out, None), "dist.sh");
        let archive_path = dist_archive_path(&output, &out);
        let archive = fs::read(&archive_path).expect("read the archive");
        let sha256_file = fs::read(out.join(sha256_name())).expect("read the .sha256");
        let digest = String::from_utf8_lossy(&sha256_file)
            .split_whitespace()
            .next()
            .expect("a digest in the .sha256 file")
            .to_owned();
        Release {
            archive: Arc::new(archive),
            sha256_file: Arc::new(sha256_file),
            digest,
        }
    })
}

// ----- a file server on 127.0.0.1 -------------------------------------------------------------

/// One request the server answered.
#[derive(Debug, Clone)]
struct Request {
    path: String,
    status: u16,
    user_agent: String,
}

/// Serves the files put into it (by name, at `/NAME`) over HTTP/1.1, one request per
/// connection: GET a file → 200 with its bytes and Content-Length, anything else → 404.
struct FileServer {
    address: SocketAddr,
    files: Arc<Mutex<HashMap<String, Arc<Vec<u8>>>>>,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FileServer {
    fn start() -> FileServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let address = listener.local_addr().expect("the server's address");
        let files = Arc::new(Mutex::new(HashMap::new()));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (files, requests, stop) = (files.clone(), requests.clone(), stop.clone());
            move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Ok(stream) = stream {
                        // A client that fails midway fails its own test; the server goes on.
                        let _ = answer(&stream, &files, &requests);
                    }
                }
            }
        });
        FileServer {
            address,
            files,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    /// A server holding the release archive and its `.sha256` under their own names.
    fn with_release() -> FileServer {
        let server = FileServer::start();
        server.put(&archive_name(), release().archive.clone());
        server.put(&sha256_name(), release().sha256_file.clone());
        server
    }

    fn put(&self, name: &str, bytes: Arc<Vec<u8>>) {
        lock(&self.files).insert(name.to_owned(), bytes);
    }

    fn remove(&self, name: &str) {
        lock(&self.files).remove(name);
    }

    fn url(&self, name: &str) -> String {
        format!("http://{}/{name}", self.address)
    }

    /// The requests answered so far, and forgets them.
    fn take_requests(&self) -> Vec<Request> {
        std::mem::take(&mut *lock(&self.requests))
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(self.address);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn answer(
    stream: &TcpStream,
    files: &Mutex<HashMap<String, Arc<Vec<u8>>>>,
    requests: &Mutex<Vec<Request>>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut user_agent = String::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.trim().eq_ignore_ascii_case("user-agent") {
                user_agent = value.trim().to_owned();
            }
        }
    }
    let mut words = request_line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("").to_owned();
    let file = match method {
        "GET" => lock(files).get(path.trim_start_matches('/')).cloned(),
        _ => None,
    };
    let status = if file.is_some() { 200 } else { 404 };
    lock(requests).push(Request {
        path,
        status,
        user_agent,
    });
    let (status_line, content_type, body) = match &file {
        Some(bytes) => ("200 OK", "application/octet-stream", bytes.as_slice()),
        None => ("404 Not Found", "text/plain", &b"not found\n"[..]),
    };
    let mut writer = stream;
    write!(
        writer,
        "HTTP/1.1 {status_line}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    writer.write_all(body)?;
    writer.flush()
}

// ----- running install.sh ---------------------------------------------------------------------

/// `dash install.sh ARGS…`, with TMPDIR in the test's directory (so that a test sees install.sh
/// clean up) and 127.0.0.1 never sent through a proxy.
fn install_sh<'c>(ctx: &'c Ctx, args: &[&str]) -> Cmd<'c> {
    install_sh_with(ctx, &tool("dash", "dash"), args)
}

/// `SHELL install.sh ARGS…` (see [`install_sh`]).
fn install_sh_with<'c>(ctx: &'c Ctx, shell: &Path, args: &[&str]) -> Cmd<'c> {
    let tmp = ctx.path("tmp");
    fs::create_dir_all(&tmp).expect("create the test's TMPDIR");
    let mut cmd = ctx
        .sh("install.sh", r#"exec "$0" "$@""#)
        .arg(shell)
        .arg(install_script());
    for arg in args {
        cmd = cmd.arg(arg);
    }
    cmd.env("TMPDIR", tmp)
        .env("no_proxy", "127.0.0.1")
        .env("NO_PROXY", "127.0.0.1")
}

/// The path an installation printed last on stdout.
fn printed_path(done: &Done) -> PathBuf {
    PathBuf::from(
        done.stdout.lines().last().unwrap_or_else(|| {
            panic!("install.sh printed nothing on stdout:\n{}", done.describe())
        }),
    )
}

/// Checks an installation: exit 0, `dir/baton` printed last, mode 755, the only file in `dir`,
/// and it runs and says its version; and install.sh left nothing in TMPDIR.
fn assert_installed(ctx: &Ctx, done: &Done, dir: &Path) {
    done.assert_code(0);
    let installed = dir.join("baton");
    assert_eq!(printed_path(done), installed, "{}", done.describe());
    let mode = fs::metadata(&installed)
        .expect("the installed binary")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755, "the installed binary's mode");
    assert_eq!(entries(dir), ["baton"], "{}", done.describe());
    assert_version(&installed);
    assert_tmp_clean(ctx);
}

/// Checks a refusal: exit 1, `needle` in the message, nothing printed on stdout, nothing left
/// in TMPDIR.
fn assert_refused(ctx: &Ctx, done: &Done, needle: &str) {
    done.assert_refused(&[1]);
    assert!(
        done.stderr.contains(needle),
        "the refusal should mention {needle:?}:\n{}",
        done.describe()
    );
    assert_eq!(done.stdout, "", "{}", done.describe());
    assert_tmp_clean(ctx);
}

/// `BINARY --version` exits 0 and prints `baton VERSION`.
fn assert_version(binary: &Path) {
    let output = run_checked(Command::new(binary).arg("--version"), "baton --version");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.trim(), format!("baton {}", workspace_version()));
}

fn assert_tmp_clean(ctx: &Ctx) {
    assert_eq!(
        entries(&ctx.path("tmp")),
        Vec::<String>::new(),
        "install.sh leaves nothing in TMPDIR"
    );
}

/// The names in `dir`, sorted; none if it does not exist.
fn entries(dir: &Path) -> Vec<String> {
    let Ok(read) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = read
        .map(|entry| {
            entry
                .expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// What identifies a file's content and its replacement: inode, size and modification time.
fn identity(path: &Path) -> (u64, u64, i64, i64) {
    let meta = fs::metadata(path).expect("the installed binary");
    (meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec())
}

/// A directory for PATH holding `tools` (symbolic links to the real ones): install.sh run with
/// only it on PATH sees exactly those programs.
fn path_with_only(ctx: &Ctx, name: &str, tools: &[(&str, &str)]) -> PathBuf {
    let dir = ctx.path(name);
    fs::create_dir_all(&dir).expect("create a PATH directory");
    let base = [
        ("sh", "dash"),
        ("uname", "coreutils"),
        ("id", "coreutils"),
        ("mktemp", "coreutils"),
        ("tr", "coreutils"),
        ("cat", "coreutils"),
        ("cp", "coreutils"),
        ("mv", "coreutils"),
        ("rm", "coreutils"),
        ("mkdir", "coreutils"),
        ("chmod", "coreutils"),
        ("awk", "mawk"),
        ("tar", "tar"),
        ("gzip", "gzip"),
        ("getconf", "libc-bin"),
    ];
    for (name, package) in base.iter().chain(tools) {
        std::os::unix::fs::symlink(tool(name, package), dir.join(name))
            .expect("link a tool into the PATH directory");
    }
    dir
}

/// An executable script `dir/name`.
fn write_script(dir: &Path, name: &str, text: &str) {
    fs::create_dir_all(dir).expect("create the scripts' directory");
    let path = dir.join(name);
    fs::write(&path, text).expect("write a script");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("make it executable");
}

fn sha256_hex(path: &Path) -> String {
    let output = run_checked(
        Command::new(tool("sha256sum", "coreutils")).arg(path),
        "sha256sum",
    );
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .expect("sha256sum prints a digest")
        .to_owned()
}

// ----- the tests ------------------------------------------------------------------------------

#[test]
fn installs_from_a_url_and_prints_the_installed_path_last() {
    with_fresh_sqlite(|ctx| {
        let server = FileServer::with_release();
        let url = server.url(&archive_name());
        let dir = ctx.path("bin");
        let done = install_sh(ctx, &["--url", &url, "--dir", &dir.to_string_lossy()]).run();
        assert_installed(ctx, &done, &dir);
        let paths: Vec<(String, u16)> = server
            .take_requests()
            .into_iter()
            .map(|request| (request.path, request.status))
            .collect();
        assert_eq!(
            paths,
            [
                (format!("/{}", archive_name()), 200),
                (format!("/{}", sha256_name()), 200)
            ]
        );
        assert!(
            done.stderr.contains(&release().digest) && done.stderr.contains("not on PATH"),
            "says which digest matched, and that the directory is not on PATH:\n{}",
            done.describe()
        );

        // Again, over the installed binary, with the directory on PATH and relative to the
        // current directory: the path printed is absolute.
        let path = format!("{}:/usr/bin:/bin", dir.display());
        let done = install_sh(ctx, &["--url", &url, "--dir", "bin"])
            .current_dir(ctx.dir())
            .env("PATH", &path)
            .run();
        assert_installed(ctx, &done, &dir);
        assert!(!done.stderr.contains("not on PATH"), "{}", done.describe());
    });
}

#[test]
fn environment_variables_stand_for_the_options_and_options_win() {
    with_fresh_sqlite(|ctx| {
        let server = FileServer::with_release();
        let url = server.url(&archive_name());
        // `sh install.sh`, as the README says (Debian's sh is dash).
        let dir = ctx.path("from-env");
        let done = install_sh_with(ctx, &tool("sh", "dash"), &[])
            .env("BATON_DOWNLOAD_URL", &url)
            .env("BATON_INSTALL_DIR", &dir)
            .run();
        assert_installed(ctx, &done, &dir);

        // An explicit digest needs no .sha256, and is used instead of one.
        server.remove(&sha256_name());
        server.take_requests();
        let dir = ctx.path("explicit-digest");
        let done = install_sh(ctx, &["--url", &url])
            .env("BATON_SHA256", release().digest.to_uppercase())
            .env("BATON_INSTALL_DIR", &dir)
            .run();
        assert_installed(ctx, &done, &dir);
        assert_eq!(
            server.take_requests().len(),
            1,
            "only the archive is fetched"
        );

        // --url and --dir win over the environment.
        server.put(&sha256_name(), release().sha256_file.clone());
        let dir = ctx.path("from-options");
        let done = install_sh(ctx, &["--url", &url, "--dir", &dir.to_string_lossy()])
            .env("BATON_DOWNLOAD_URL", server.url("nothing-here.tar.gz"))
            .env("BATON_INSTALL_DIR", ctx.path("not-this-one"))
            .env("BATON_VERSION", "9.9.9")
            .run();
        assert_installed(ctx, &done, &dir);
        assert!(!ctx.exists("not-this-one"));
        // A version asked for that the archive at the URL is not: said, not refused.
        assert!(
            done.stderr.contains("version 9.9.9 was asked for"),
            "{}",
            done.describe()
        );
    });
}

#[test]
fn a_corrupted_archive_is_refused_and_changes_nothing() {
    with_fresh_sqlite(|ctx| {
        let server = FileServer::with_release();
        let url = server.url(&archive_name());
        let dir = ctx.path("bin");
        let dir_arg = dir.to_string_lossy().into_owned();
        let done = install_sh(ctx, &["--url", &url, "--dir", &dir_arg]).run();
        assert_installed(ctx, &done, &dir);
        let before = identity(&dir.join("baton"));

        // The same name, the original .sha256, 64 bytes flipped in the middle.
        let mut corrupted = release().archive.to_vec();
        let middle = corrupted.len() / 2;
        for byte in &mut corrupted[middle..middle + 64] {
            *byte ^= 0xff;
        }
        server.put(&archive_name(), Arc::new(corrupted));
        let done = install_sh(ctx, &["--url", &url, "--dir", &dir_arg]).run();
        assert_refused(ctx, &done, "SHA-256 mismatch");
        assert!(
            done.stderr.contains(&release().digest),
            "{}",
            done.describe()
        );
        assert!(done.stderr.contains("nothing was installed"));
        assert_eq!(entries(&dir), ["baton"], "no partial file is left");
        assert_eq!(
            identity(&dir.join("baton")),
            before,
            "the installed one is untouched"
        );
        assert_version(&dir.join("baton"));

        // Into a new directory: it is not even created.
        let fresh = ctx.path("fresh");
        let done = install_sh(ctx, &["--url", &url, "--dir", &fresh.to_string_lossy()]).run();
        assert_refused(ctx, &done, "SHA-256 mismatch");
        assert!(!fresh.exists(), "{}", done.describe());

        // The right digest given explicitly refuses the corrupted archive too.
        let done = install_sh(ctx, &["--url", &url, "--dir", &dir_arg])
            .env("BATON_SHA256", &release().digest)
            .run();
        assert_refused(ctx, &done, "SHA-256 mismatch");
        assert_eq!(identity(&dir.join("baton")), before);

        // An explicit digest is preferred to the .sha256 beside the archive: a wrong one
        // refuses the good archive, without fetching the .sha256.
        server.put(&archive_name(), release().archive.clone());
        server.take_requests();
        let wrong = "0".repeat(64);
        let done = install_sh(ctx, &["--url", &url, "--dir", &dir_arg, "--sha256", &wrong]).run();
        assert_refused(ctx, &done, "SHA-256 mismatch");
        assert!(done.stderr.contains("--sha256 says"), "{}", done.describe());
        assert_eq!(
            server.take_requests().len(),
            1,
            "only the archive is fetched"
        );
        assert_eq!(identity(&dir.join("baton")), before);
    });
}

#[test]
fn an_archive_without_a_readable_digest_is_refused() {
    with_fresh_sqlite(|ctx| {
        let server = FileServer::with_release();
        let url = server.url(&archive_name());
        let dir = ctx.path("bin");
        let dir_arg = dir.to_string_lossy().into_owned();

        server.remove(&sha256_name());
        let done = install_sh(ctx, &["--url", &url, "--dir", &dir_arg]).run();
        assert_refused(ctx, &done, &format!("could not download {url}.sha256"));
        assert!(done.stderr.contains("--sha256"), "says what to do instead");
        assert!(!dir.exists());
        let statuses: Vec<u16> = server.take_requests().iter().map(|r| r.status).collect();
        assert_eq!(statuses, [200, 404]);

        for (what, text) in [
            ("empty", String::new()),
            ("not hex", "not a digest  baton.tar.gz\n".to_owned()),
            ("too short", format!("{}  x\n", &release().digest[..63])),
        ] {
            server.put(&sha256_name(), Arc::new(text.into_bytes()));
            let done = install_sh(ctx, &["--url", &url, "--dir", &dir_arg]).run();
            assert_refused(ctx, &done, "does not hold a SHA-256");
            assert!(!dir.exists(), "{what}: {}", done.describe());
        }

        // A bare digest (no file name), with a Windows line end, is enough.
        let bare = format!("{}\r\n", release().digest);
        server.put(&sha256_name(), Arc::new(bare.into_bytes()));
        let done = install_sh(ctx, &["--url", &url, "--dir", &dir_arg]).run();
        assert_installed(ctx, &done, &dir);
    });
}

#[test]
fn a_binary_that_does_not_start_here_is_not_installed() {
    with_fresh_sqlite(|ctx| {
        let server = FileServer::with_release();
        let dir = ctx.path("bin");
        let dir_arg = dir.to_string_lossy().into_owned();
        let done = install_sh(
            ctx,
            &["--url", &server.url(&archive_name()), "--dir", &dir_arg],
        )
        .run();
        assert_installed(ctx, &done, &dir);
        let before = identity(&dir.join("baton"));

        // An archive of dist.sh's layout whose `baton` fails as a binary built against a newer
        // glibc does.
        let staging = ctx.path("staging");
        let inner = staging.join("baton-9.9.9-test");
        write_script(
            &inner,
            "baton",
            "#!/bin/sh\necho \"baton: version \\`GLIBC_2.99' not found\" >&2\nexit 1\n",
        );
        fs::write(
            inner.join("REQUIRES"),
            "baton 9.9.9 for test needs glibc 2.99 or newer (newer than any release listed here).\n",
        )
        .expect("write REQUIRES");
        let archive = ctx.path("broken.tar.gz");
        run_checked(
            Command::new(tool("tar", "tar"))
                .arg("-czf")
                .arg(&archive)
                .arg("-C")
                .arg(&staging)
                .arg("baton-9.9.9-test"),
            "tar",
        );
        let digest = sha256_hex(&archive);
        server.put(
            "broken.tar.gz",
            Arc::new(fs::read(&archive).expect("read the archive")),
        );
        server.put(
            "broken.tar.gz.sha256",
            Arc::new(format!("{digest}  broken.tar.gz\n").into_bytes()),
        );

        let done = install_sh(
            ctx,
            &["--url", &server.url("broken.tar.gz"), "--dir", &dir_arg],
        )
        .run();
        assert_refused(ctx, &done, "does not start here");
        for needle in [
            "GLIBC_2.99' not found",
            "needs glibc 2.99 or newer",
            "this system:",
        ] {
            assert!(
                done.stderr.contains(needle),
                "{needle}: {}",
                done.describe()
            );
        }
        assert_eq!(entries(&dir), ["baton"], "no partial file is left");
        assert_eq!(
            identity(&dir.join("baton")),
            before,
            "the working one stays"
        );
    });
}

#[test]
fn without_curl_it_uses_wget_and_without_sha256sum_shasum_or_openssl() {
    with_fresh_sqlite(|ctx| {
        let server = FileServer::with_release();
        let url = server.url(&archive_name());

        let path = path_with_only(
            ctx,
            "path-wget-shasum",
            &[("wget", "wget"), ("shasum", "perl")],
        );
        let dir = ctx.path("bin-wget");
        let done = install_sh(ctx, &["--url", &url, "--dir", &dir.to_string_lossy()])
            .env("PATH", &path)
            .run();
        assert_installed(ctx, &done, &dir);
        let agents: Vec<String> = server
            .take_requests()
            .into_iter()
            .map(|request| request.user_agent)
            .collect();
        assert!(
            agents.len() == 2 && agents.iter().all(|agent| agent.starts_with("Wget")),
            "wget fetched both: {agents:?}"
        );

        let path = path_with_only(
            ctx,
            "path-openssl",
            &[("curl", "curl"), ("openssl", "openssl")],
        );
        let dir = ctx.path("bin-openssl");
        let done = install_sh(ctx, &["--url", &url, "--dir", &dir.to_string_lossy()])
            .env("PATH", &path)
            .run();
        assert_installed(ctx, &done, &dir);
        assert!(server
            .take_requests()
            .iter()
            .all(|request| request.user_agent.starts_with("curl")));

        // Nothing to check a digest with: refused, nothing installed.
        let path = path_with_only(ctx, "path-no-digest-tool", &[("curl", "curl")]);
        let dir = ctx.path("bin-no-digest-tool");
        let done = install_sh(ctx, &["--url", &url, "--dir", &dir.to_string_lossy()])
            .env("PATH", &path)
            .run();
        assert_refused(ctx, &done, "none of sha256sum, shasum or openssl");
        assert!(!dir.exists());

        // Nothing to download with: refused, but a file:// URL needs neither.
        let path = path_with_only(ctx, "path-no-fetcher", &[("sha256sum", "coreutils")]);
        let dir = ctx.path("bin-file-url");
        let done = install_sh(ctx, &["--url", &url, "--dir", &dir.to_string_lossy()])
            .env("PATH", &path)
            .run();
        assert_refused(ctx, &done, "neither curl nor wget");
        let local = ctx.path("local");
        fs::create_dir_all(&local).expect("create a directory for the archive");
        fs::write(local.join(archive_name()), &*release().archive).expect("write the archive");
        fs::write(local.join(sha256_name()), &*release().sha256_file).expect("write the .sha256");
        let file_url = format!("file://{}", local.join(archive_name()).display());
        let done = install_sh(ctx, &["--url", &file_url, "--dir", &dir.to_string_lossy()])
            .env("PATH", &path)
            .run();
        assert_installed(ctx, &done, &dir);
    });
}

#[test]
fn the_default_url_is_the_release_for_this_machine() {
    with_fresh_sqlite(|ctx| {
        // A `curl` that records its arguments and fails as an unreachable host does: no test
        // reaches beyond 127.0.0.1.
        let stubs = ctx.path("stubs");
        write_script(
            &stubs,
            "curl",
            "#!/bin/sh\necho \"$@\" >> \"$TEST_DIR/curl-args\"\nexit 6\n",
        );
        // A `uname` that answers what FAKE_UNAME_S and FAKE_UNAME_M say, the real one otherwise.
        let uname = tool("uname", "coreutils");
        let uname = uname.display();
        write_script(
            &stubs,
            "uname",
            &format!(
                "#!/bin/sh\ncase $1 in\n\
                 -s) echo \"${{FAKE_UNAME_S:-$({uname} -s)}}\" ;;\n\
                 -m) echo \"${{FAKE_UNAME_M:-$({uname} -m)}}\" ;;\n\
                 *) exec {uname} \"$@\" ;;\nesac\n"
            ),
        );
        let path = format!(
            "{}:{}",
            stubs.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let dir = ctx.path("bin");
        let dir_arg = dir.to_string_lossy().into_owned();
        let version = workspace_version();
        let release_url = |version: &str| {
            format!(
                "https://github.com/baton-locks/baton/releases/download/v{version}/baton-{version}-{}.tar.gz",
                this_target()
            )
        };

        let done = install_sh(ctx, &["--dir", &dir_arg])
            .env("PATH", &path)
            .run();
        assert_refused(
            ctx,
            &done,
            &format!("could not download {}", release_url(&version)),
        );
        // A tag as workflows write it.
        let done = install_sh(ctx, &["--dir", &dir_arg, "--version", "v0.9.1"])
            .env("PATH", &path)
            .run();
        assert_refused(
            ctx,
            &done,
            &format!("could not download {}", release_url("0.9.1")),
        );
        let done = install_sh(ctx, &["--dir", &dir_arg])
            .env("PATH", &path)
            .env("BATON_VERSION", "0.9.2")
            .run();
        assert_refused(
            ctx,
            &done,
            &format!("could not download {}", release_url("0.9.2")),
        );
        let fetched = ctx.lines("curl-args");
        assert_eq!(fetched.len(), 3, "{fetched:?}");
        assert!(fetched[0].contains("-fsSL"), "{fetched:?}");

        // Other systems and machines are refused before anything is fetched.
        for (variable, value, needle) in [
            ("FAKE_UNAME_S", "Darwin", "for Linux, and this is Darwin"),
            ("FAKE_UNAME_M", "riscv64", "no release archive for riscv64"),
        ] {
            let done = install_sh(ctx, &["--dir", &dir_arg])
                .env("PATH", &path)
                .env(variable, value)
                .run();
            assert_refused(ctx, &done, needle);
        }
        assert_eq!(ctx.lines("curl-args").len(), 3, "nothing more was fetched");
        assert!(!dir.exists());
    });
}

#[test]
fn without_dir_a_user_gets_home_local_bin() {
    with_fresh_sqlite(|ctx| {
        let server = FileServer::with_release();
        // An `id` that says "not root": root's default, /usr/local/bin, is not the test's to
        // write.
        let stubs = ctx.path("stubs");
        write_script(&stubs, "id", "#!/bin/sh\necho 1000\n");
        let home = ctx.path("home");
        fs::create_dir_all(&home).expect("create HOME");
        let done = install_sh(ctx, &["--url", &server.url(&archive_name())])
            .env("HOME", &home)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    stubs.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .run();
        let dir = home.join(".local/bin");
        assert_installed(ctx, &done, &dir);
        let hint = format!("export PATH=\"{}:$PATH\"", dir.display());
        assert!(done.stderr.contains(&hint), "{hint}:\n{}", done.describe());
    });
}

#[test]
fn the_default_version_is_the_workspace_version_and_help_and_wrong_use_are_told_apart() {
    with_fresh_sqlite(|ctx| {
        let script = fs::read_to_string(install_script()).expect("read install.sh");
        let default_version = script
            .lines()
            .find_map(|line| line.strip_prefix("default_version="))
            .expect("install.sh sets default_version=");
        assert_eq!(
            default_version,
            workspace_version(),
            "install.sh's default_version must be Cargo.toml's [workspace.package] version"
        );

        let done = install_sh(ctx, &["--help"]).run();
        done.assert_code(0);
        for needle in [
            "usage: sh install.sh",
            "--version",
            "--url",
            "--sha256",
            "--dir",
            "BATON_DOWNLOAD_URL",
            "BATON_INSTALL_DIR",
            default_version,
            "Exit status",
        ] {
            assert!(
                done.stdout.contains(needle),
                "--help mentions {needle}:\n{}",
                done.describe()
            );
        }

        let a_digest = "a".repeat(64);
        for args in [
            &["--bogus"][..],
            &["--url"],
            &["--url="],
            &["--dir", ""],
            &["--url", "not-a-url"],
            &["--version", "1/2"],
            &["--sha256", "xyz"],
            &["--sha256", &a_digest[1..]],
            &["--url", "http://127.0.0.1:9/x.tar.gz", "extra"],
        ] {
            let done = install_sh(ctx, args).run();
            done.assert_refused(&[2]);
            assert!(done.stderr.contains("--help"), "{}", done.describe());
            assert_eq!(done.stdout, "", "{}", done.describe());
        }
    });
}

#[test]
fn dist_packs_the_same_binary_into_the_same_bytes() {
    let scratch = tempfile::Builder::new()
        .prefix("baton-dist-test-")
        .tempdir()
        .expect("create a scratch directory");
    let binary = stripped_baton(scratch.path());
    let epoch = "1700000000"; // 2023-11-14 22:13:20 UTC
    let outs = [scratch.path().join("one"), scratch.path().join("two")];
    // Both at once (two cores, half the wait), so within the same second: the listing below
    // checks that no time of the packing gets in (every mtime is SOURCE_DATE_EPOCH).
    let children: Vec<_> = outs
        .iter()
        .map(|out| {
            dist_command(&binary, out, Some(epoch))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start dist.sh")
        })
        .collect();
    let mut archives = Vec::new();
    for (child, out) in children.into_iter().zip(&outs) {
        let output = child.wait_with_output().expect("wait for dist.sh");
        assert!(
            output.status.success(),
            "dist.sh failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("needs glibc 2."), "{stderr}");
        archives.push(dist_archive_path(&output, out));
    }
    let [one, two] = [&archives[0], &archives[1]];
    assert!(
        fs::read(one).expect("read one") == fs::read(two).expect("read two"),
        "two packings of one binary differ"
    );
    let sha256_of = |archive: &Path| {
        fs::read_to_string(format!("{}.sha256", archive.display())).expect("read the .sha256")
    };
    assert_eq!(sha256_of(one), sha256_of(two));
    assert_eq!(
        sha256_of(one),
        format!("{}  {}\n", sha256_hex(one), archive_name()),
        "the .sha256 is in sha256sum's format"
    );
    run_checked(
        Command::new(tool("sha256sum", "coreutils"))
            .arg("--check")
            .arg(sha256_name())
            .current_dir(&outs[0]),
        "sha256sum --check",
    );

    // Exactly the expected entries, in name order, owned by 0/0, all with the epoch's time.
    let listing = run_checked(
        Command::new(tool("tar", "tar"))
            .args(["--list", "--verbose", "--numeric-owner", "--file"])
            .arg(one)
            .env("TZ", "UTC"),
        "tar --list",
    );
    let top = archive_name().trim_end_matches(".tar.gz").to_owned();
    let mut expected = vec![
        (format!("{top}/"), "drwxr-xr-x"),
        (format!("{top}/README.md"), "-rw-r--r--"),
        (format!("{top}/REQUIRES"), "-rw-r--r--"),
        (format!("{top}/baton"), "-rwxr-xr-x"),
    ];
    for name in entries(&repo_root()) {
        if name.starts_with("LICENSE") {
            expected.push((format!("{top}/{name}"), "-rw-r--r--"));
        }
    }
    expected.sort();
    let listed: Vec<(String, String)> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields.len(), 6, "a tar listing line: {line}");
            assert_eq!(fields[1], "0/0", "owner and group 0: {line}");
            assert_eq!(
                fields[3..5],
                ["2023-11-14", "22:13"],
                "SOURCE_DATE_EPOCH: {line}"
            );
            (fields[5].to_owned(), fields[0].to_owned())
        })
        .collect();
    let expected: Vec<(String, String)> = expected
        .into_iter()
        .map(|(name, mode)| (name, mode.to_owned()))
        .collect();
    assert_eq!(listed, expected);

    let requires = run_checked(
        Command::new(tool("tar", "tar"))
            .arg("--extract")
            .arg("--to-stdout")
            .arg("--file")
            .arg(one)
            .arg(format!("{top}/REQUIRES")),
        "tar --extract REQUIRES",
    );
    let requires = String::from_utf8_lossy(&requires.stdout);
    let glibc = requires
        .split_once("needs glibc ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("REQUIRES names a glibc version: {requires}"));
    assert!(
        glibc.split('.').all(|part| part.parse::<u32>().is_ok()) && glibc.starts_with("2."),
        "REQUIRES names a glibc version: {requires}"
    );
    assert!(requires.contains(&this_target()), "{requires}");
}

#[test]
fn dist_tells_help_from_wrong_use() {
    let dist = repo_root().join("scripts/dist.sh");
    let help = Command::new("bash")
        .arg(&dist)
        .arg("--help")
        .output()
        .expect("run dist.sh --help");
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("--binary PATH") && text.contains("Exit status"),
        "{text}"
    );
    for args in [&["--bogus"][..], &["--out"], &["--version", "1/2"]] {
        let output = Command::new("bash")
            .arg(&dist)
            .args(args)
            .output()
            .expect("run dist.sh");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(output.stdout.is_empty());
    }
    let output = Command::new("bash")
        .arg(&dist)
        .args(["--binary", "/nonexistent/baton"])
        .output()
        .expect("run dist.sh");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no binary at"));
}
