//! `postgres://…` and `postgresql://…`: sqlx parses the URL (with libpq's environment); this
//! file recognises it and says where it points without the password.

use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::url::has_scheme_and_authority;

/// The schemes of a PostgreSQL store's URL.
pub const SCHEMES: &[&str] = &["postgres", "postgresql"];

/// True when `url` names a PostgreSQL server (`postgres://` or `postgresql://`, any case).
pub fn is_postgres_url(url: &str) -> bool {
    has_scheme_and_authority(url, SCHEMES)
}

/// `postgres://user@host:port/database`, plus the options that say where the tables are
/// (`options`, a non-default `sslmode`). Never the password.
pub(super) fn describe(options: &PgConnectOptions) -> String {
    let mut description = format!(
        "postgres://{}@{}/{}",
        options.get_username(),
        server_address(options),
        options.get_database().unwrap_or(""),
    );
    let mut parameters = Vec::new();
    if let Some(startup_options) = options.get_options() {
        parameters.push(format!("options={startup_options}"));
    }
    let ssl_mode = match options.get_ssl_mode() {
        PgSslMode::Prefer => None,
        PgSslMode::Disable => Some("disable"),
        PgSslMode::Allow => Some("allow"),
        PgSslMode::Require => Some("require"),
        PgSslMode::VerifyCa => Some("verify-ca"),
        PgSslMode::VerifyFull => Some("verify-full"),
    };
    if let Some(ssl_mode) = ssl_mode {
        parameters.push(format!("sslmode={ssl_mode}"));
    }
    if !parameters.is_empty() {
        description.push('?');
        description.push_str(&parameters.join("&"));
    }
    description
}

/// `host:port`, or the socket directory for a Unix socket.
pub(super) fn server_address(options: &PgConnectOptions) -> String {
    match options.get_socket() {
        Some(socket) => format!("{}:{}", socket.display(), options.get_port()),
        // An IPv6 address, unless it came bracketed from the URL already.
        None if options.get_host().contains(':') && !options.get_host().starts_with('[') => {
            format!("[{}]:{}", options.get_host(), options.get_port())
        }
        None => format!("{}:{}", options.get_host(), options.get_port()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    use std::str::FromStr;

    #[test]
    fn descriptions_say_where_without_the_password() {
        let cases = [
            (
                "postgres://baton:secret@db.example:6543/jobs",
                "postgres://baton@db.example:6543/jobs",
            ),
            (
                "postgresql://baton:secret@10.0.0.1/jobs?sslmode=require&options=-csearch_path%3Dbaton",
                "postgres://baton@10.0.0.1:5432/jobs?options=-csearch_path=baton&sslmode=require",
            ),
            (
                "postgres://baton@[::1]:5433/jobs?password=secret",
                "postgres://baton@[::1]:5433/jobs",
            ),
        ];
        for (url, expected) in cases {
            let options = PgConnectOptions::from_str(url).unwrap();
            assert_eq!(describe(&options), expected, "{url}");
        }
    }

    #[test]
    fn postgres_urls_are_recognised() {
        for url in ["postgres://h/db", "POSTGRESQL://h", "PostgreS://u@h"] {
            assert!(is_postgres_url(url), "{url}");
        }
        for url in ["postgres:/h", "sqlite:/x.db", "postgresx://h", "redis://h"] {
            assert!(!is_postgres_url(url), "{url}");
        }
    }
}
