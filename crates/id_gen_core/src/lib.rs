//! `id_gen_core` — the pure-Rust heart of the `id_gen` PostgreSQL extension.
//!
//! Nothing in this crate knows about PostgreSQL: it holds the fixed ID layout, the
//! shard-gene hash that application code in other languages must reproduce bit for bit,
//! and the state machines the extension drives from shared memory. Keeping them here
//! means they are tested in seconds with `cargo test -p id_gen_core`, without a server.
//!
//! Invariant kept by every module: functions are deterministic given their inputs (time
//! and randomness are always passed in), and they never panic on user input — they
//! return an error value the SQL layer maps to a SQLSTATE.
#![forbid(unsafe_code)]

pub mod cipher;
pub mod gene;
pub mod genemod;
pub mod id_selection;
pub mod layout;
pub mod name;
pub mod owned_genes;
pub mod route_declaration;
pub mod route_slots;
pub mod routing;
pub mod segment;
pub mod serial;
pub mod snowflake;
#[cfg(test)]
mod test_rng;
