//! The records beside a key that hold a job's submission ([`job_record`]: the [`Submit`] and
//! the parameters, bound to the ticket by their hash) and each run's report ([`run_record`]).

use baton_core::job::PARAMS_MAX_BYTES;
use baton_core::op::Submit;

use crate::coordinator::Coordinator;
use crate::error::ClientError;
/// The record holding a job's submission: the [`Submit`] as one line of JSON, a newline, then
/// the parameters exactly as submitted.
pub fn job_record(id: &str) -> String {
    format!("job/{id}")
}

pub(super) fn encode_job_record(submit: &Submit, params: &[u8]) -> Vec<u8> {
    // Compact JSON escapes every newline inside strings: the first newline ends it.
    let mut bytes = serde_json::to_vec(submit).unwrap_or_default();
    bytes.push(b'\n');
    bytes.extend_from_slice(params);
    bytes
}

pub(super) fn decode_job_record(bytes: &[u8]) -> Option<(Submit, Vec<u8>)> {
    let split = bytes.iter().position(|&b| b == b'\n')?;
    let submit = serde_json::from_slice(&bytes[..split]).ok()?;
    Some((submit, bytes[split + 1..].to_vec()))
}

/// A job's submission and parameters, from its record.
pub(super) async fn read_job_record(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<(Submit, Vec<u8>)>, ClientError> {
    let bytes = coord.store().get_record(key, &job_record(id)).await?;
    Ok(bytes.as_deref().and_then(decode_job_record))
}

/// Job `id`'s record, as stored.
pub(super) async fn read_record_bytes(
    coord: &Coordinator,
    key: &str,
    id: &str,
) -> Result<Option<Vec<u8>>, ClientError> {
    Ok(coord.store().get_record(key, &job_record(id)).await?)
}

/// The parameters a worker may run from job `id`'s record `bytes`, if the record is the one
/// its submit wrote: its hash is the one the ticket keeps (`expected`;
/// [`baton_core::job::record_sha256`]). `Err` says what is there instead. A job of a client
/// older than the binding has no hash: its record runs as it is (`null` if it is gone).
pub(super) fn bound_params(
    id: &str,
    expected: Option<&str>,
    bytes: Option<&[u8]>,
) -> Result<Vec<u8>, String> {
    let short = |hash: &str| format!("{}…", hash.get(..12).unwrap_or(hash));
    if let Some(expected) = expected {
        let Some(bytes) = bytes else {
            return Err(format!("its record {} is gone", job_record(id)));
        };
        let found = baton_core::job::record_sha256(bytes);
        if found != expected {
            return Err(format!(
                "its record {} has SHA-256 {}, its submit wrote {}",
                job_record(id),
                short(&found),
                short(expected)
            ));
        }
    }
    let params = bytes.and_then(decode_job_record).map(|(_, params)| params);
    Ok(params.unwrap_or_else(|| b"null".to_vec()))
}

/// The record holding the report of a job's run `run` (1 for its first claim).
pub fn run_record(id: &str, run: u32) -> String {
    format!("run/{id}/{run}")
}

/// Checks job parameters: JSON, at most [`PARAMS_MAX_BYTES`]. The message says what is wrong.
pub fn check_params(params: &[u8]) -> Result<(), String> {
    if params.len() > PARAMS_MAX_BYTES {
        return Err(format!(
            "the parameters are {} bytes; they may be at most {PARAMS_MAX_BYTES} bytes (256 KiB): \
             pass a reference (a URL, an object key) to larger data instead",
            params.len()
        ));
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(params)
        .map(|_| ())
        .map_err(|e| format!("the parameters are not valid JSON: {e}"))
}
