//! The argument groups several commands share; each command's own arguments live beside it in
//! `cmd/`.

pub mod duration;
pub mod key;
pub mod wait;
