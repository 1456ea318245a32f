//! The argument groups several commands share; each command's own arguments live beside it in
//! `cmd/`.

/// Durations are parsed as the server parses them: the one parser is the client library's.
pub use baton_client::durations as duration;
#[cfg(test)]
mod duration_tests;
pub mod key;
pub mod lazy;
pub mod slots;
pub mod wait;
