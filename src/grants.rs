//! SQL surface of ownership and USAGE grants on named sequences and serials:
//! `grant_usage`, `revoke_usage`, `alter_sequence_owner`, `alter_serial_owner`. The
//! policy and the checks are in `access.rs`.
//!
//! Invariants: only the owner (a member of the owner role, or a superuser) changes grants
//! or the owner; a new owner must be a role the caller is a member of (superusers: any
//! role); every change bumps the access epoch at commit, so every backend re-checks.

use crate::access::{self, Kind, PUBLIC};
use crate::errors::{checked_name, raise, required, spi_failed, Code};
use pgrx::prelude::*;

/// Which object `name` means: `kind` if given ('sequence' or 'serial'), else the one
/// that exists (42P08 if both do, 42704 if neither does).
fn resolve_kind(name: &str, kind: Option<&str>) -> Kind {
    match kind {
        Some("sequence") => Kind::Sequence,
        Some("serial") => Kind::Serial,
        Some(other) => raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: kind must be 'sequence' or 'serial', got '{other}'"),
            None,
        ),
        None => {
            let seq = access::exists(Kind::Sequence, name);
            let serial = access::exists(Kind::Serial, name);
            match (seq, serial) {
                (true, false) => Kind::Sequence,
                (false, true) => Kind::Serial,
                (true, true) => raise(
                    Code::ERRCODE_AMBIGUOUS_PARAMETER,
                    format!("id_gen: both a sequence and a serial are called \"{name}\""),
                    Some("Pass kind => 'sequence' or kind => 'serial'."),
                ),
                (false, false) => raise(
                    Code::ERRCODE_UNDEFINED_OBJECT,
                    format!("id_gen: no sequence or serial is called \"{name}\""),
                    Some("Existing ones are listed in id_gen.sequences and id_gen.serials."),
                ),
            }
        }
    }
}

/// The grantee name of `role`: `public` for PUBLIC (any case), else the name of an
/// existing role, parsed like a `regrole` literal (42704 if it does not exist).
fn grantee_name(role: &str) -> String {
    if role.eq_ignore_ascii_case(PUBLIC) {
        return PUBLIC.to_owned();
    }
    Spi::get_one_with_args::<String>(
        "SELECT rolname::pg_catalog.text FROM pg_catalog.pg_roles \
         WHERE oid OPERATOR(pg_catalog.=) $1::pg_catalog.regrole::pg_catalog.oid",
        &[role.into()],
    )
    .ok()
    .flatten()
    .unwrap_or_else(|| {
        raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: role \"{role}\" does not exist"),
            Some("Pass an existing role, or 'public' for everyone."),
        )
    })
}

/// The checked arguments of `grant_usage`/`revoke_usage`: the name, the grantee, which
/// object it is, and its owner as checked (the current user must own it).
fn checked_grant(
    name: Option<&str>,
    role: Option<&str>,
    kind: Option<&str>,
    action: &str,
) -> (id_gen_core::name::SeqName, String, Kind, Option<String>) {
    let name = checked_name(required(name, "name"));
    let grantee = grantee_name(required(role, "role"));
    let kind = resolve_kind(name.as_str(), kind);
    let owner = access::require_owner(kind, name.as_str(), action);
    (name, grantee, kind, owner)
}

/// Lets `role` (a role name, or 'public') take values of sequence or serial `name`.
#[pg_extern(volatile, parallel_unsafe)]
fn grant_usage(
    name: Option<&str>,
    role: Option<&str>,
    kind: default!(Option<&str>, "NULL"),
) -> bool {
    let (name, grantee, kind, owner) = checked_grant(name, role, kind, "grant usage on");
    let by = access::current_role_name();
    let added = access::as_catalog_owner(|| {
        Spi::connect_mut(|client| {
            client
                .update(
                    &format!(
                        "INSERT INTO id_gen.usage_grants (kind, name, grantee, granted_by) \
                         SELECT $1, $2, $3, $4 WHERE {} ON CONFLICT DO NOTHING RETURNING grantee",
                        access::still_owned_clause(kind)
                    ),
                    None,
                    &[
                        kind.as_str().into(),
                        name.as_str().into(),
                        grantee.as_str().into(),
                        by.as_str().into(),
                        owner.as_deref().into(),
                    ],
                )
                .map(|t| !t.is_empty())
        })
    })
    .unwrap_or_else(|e| spi_failed(e));
    access::changed();
    added
}

/// Takes back what `grant_usage` gave `role` (the owner keeps its rights).
#[pg_extern(volatile, parallel_unsafe)]
fn revoke_usage(
    name: Option<&str>,
    role: Option<&str>,
    kind: default!(Option<&str>, "NULL"),
) -> bool {
    let (name, grantee, kind, _) = checked_grant(name, role, kind, "revoke usage on");
    let removed = access::as_catalog_owner(|| {
        Spi::connect_mut(|client| {
            client
                .update(
                    "DELETE FROM id_gen.usage_grants WHERE kind = $1 AND name = $2 AND grantee = $3 \
                     RETURNING grantee",
                    None,
                    &[kind.as_str().into(), name.as_str().into(), grantee.as_str().into()],
                )
                .map(|t| !t.is_empty())
        })
    })
    .unwrap_or_else(|e| spi_failed(e));
    access::changed();
    removed
}

fn alter_owner(kind: Kind, name: Option<&str>, new_owner: Option<&str>) -> String {
    let name = checked_name(required(name, "name"));
    let new_owner = grantee_name(required(new_owner, "new_owner"));
    if new_owner == PUBLIC {
        raise(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            "id_gen: PUBLIC cannot own a sequence or serial",
            Some("Name a role."),
        );
    }
    let checked_owner = access::require_owner(kind, name.as_str(), "change the owner of");
    access::require_can_become(&new_owner);
    let table = match kind {
        Kind::Sequence => "id_gen.sequences",
        Kind::Serial => "id_gen.serials",
    };
    let changed = access::as_catalog_owner(|| {
        Spi::connect_mut(|client| {
            client
                .update(
                    &format!(
                        "UPDATE {table} o SET owner = $3 WHERE o.name = $1 AND {} RETURNING o.name",
                        access::OWNED_BY
                    ),
                    None,
                    &[
                        name.as_str().into(),
                        checked_owner.as_deref().into(),
                        new_owner.as_str().into(),
                    ],
                )
                .map(|t| !t.is_empty())
        })
    })
    .unwrap_or_else(|e| spi_failed(e));
    if !changed {
        raise(
            Code::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "id_gen: {} \"{name}\" changed while its owner was being changed",
                kind.as_str()
            ),
            Some("Try again."),
        );
    }
    access::changed();
    new_owner
}

/// Gives sequence `name` to role `new_owner` (owner or superuser only; non-superusers
/// must be members of the new owner role).
#[pg_extern(volatile, parallel_unsafe)]
fn alter_sequence_owner(name: Option<&str>, new_owner: Option<&str>) -> String {
    alter_owner(Kind::Sequence, name, new_owner)
}

/// Gives serial `name` to role `new_owner` (as `alter_sequence_owner`).
#[pg_extern(volatile, parallel_unsafe)]
fn alter_serial_owner(name: Option<&str>, new_owner: Option<&str>) -> String {
    alter_owner(Kind::Serial, name, new_owner)
}
