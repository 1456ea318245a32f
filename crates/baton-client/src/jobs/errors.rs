//! The errors the job operations share: an answer that is not what an operation expects, a
//! job's record replaced, input refused.

use baton_core::Reply;

use crate::error::ClientError;
pub(super) fn params_replaced(key: &str, id: &str, detail: String) -> ClientError {
    ClientError::ParamsReplaced {
        key: key.to_owned(),
        id: id.to_owned(),
        detail,
    }
}

pub(super) fn invalid(key: &str, message: String) -> ClientError {
    ClientError::refused(key, baton_core::limits::InvalidInput(message))
}

pub(super) fn unexpected(key: &str, reply: &Reply) -> ClientError {
    ClientError::Unexpected {
        key: key.to_owned(),
        detail: format!("{reply:?}"),
    }
}
