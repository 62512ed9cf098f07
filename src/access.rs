//! Who may use and manage a named sequence or serial, as `GRANT USAGE ON SEQUENCE` and
//! ownership do for PostgreSQL's own sequences.
//!
//! * Every sequence and serial has an owner (a role name in its catalog row). The owner
//!   and roles granted USAGE (`id_gen.usage_grants`, grantee `public` for PUBLIC) may take
//!   values; role membership counts (`has_privs_of_role`, which also lets superusers
//!   through). Everything else (alter, drop, grant, revoke, change of owner) is the
//!   owner's.
//! * Roles are recorded by name, as in a dump: a restore into a cluster that lacks a role
//!   keeps the row (its sequence must not be lost) and the missing role simply matches
//!   nobody, so only superusers can manage it until an owner is assigned.
//! * The decision is cached per backend, per (object, current user), stamped with
//!   [`stamp`]: the user id, the shared `AccessControl` epoch (bumped at commit of every
//!   grant, revoke, owner change and sequence DDL) and a local counter bumped by a
//!   syscache callback when role memberships change. `SET ROLE` and SECURITY DEFINER
//!   change the user id and so the stamp.
//! * Catalog writes of management functions run as the bootstrap superuser after the
//!   checks ([`as_catalog_owner`]) with `search_path` pinned to `pg_catalog, pg_temp`,
//!   so a caller's search_path cannot put its own operators or functions into them.
//!   Queries that decide access use `OPERATOR(pg_catalog.=)` for the same reason.

use crate::epochs::{self, Epoch};
use crate::errors::{raise, raise_detail, spi_failed, Code};
use pgrx::prelude::*;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The two kinds of objects with owners and grants.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Sequence,
    Serial,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Sequence => "sequence",
            Kind::Serial => "serial",
        }
    }

    fn table(self) -> &'static str {
        match self {
            Kind::Sequence => "id_gen.sequences",
            Kind::Serial => "id_gen.serials",
        }
    }
}

/// The grantee name that stands for PUBLIC (no role can be called "public").
pub const PUBLIC: &str = "public";

/// Bumped by the syscache callback when roles or memberships change (this backend).
static ROLE_CHANGES: AtomicU64 = AtomicU64::new(0);
static CALLBACKS_REGISTERED: AtomicBool = AtomicBool::new(false);

#[pg_guard]
unsafe extern "C-unwind" fn roles_changed(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    ROLE_CHANGES.fetch_add(1, Ordering::Relaxed);
}

fn register_callbacks() {
    if CALLBACKS_REGISTERED.swap(true, Ordering::Relaxed) {
        return;
    }
    // SAFETY: registers process-local callbacks once per backend; they only bump an
    // atomic counter.
    unsafe {
        for cache in [
            pg_sys::SysCacheIdentifier::AUTHMEMROLEMEM,
            pg_sys::SysCacheIdentifier::AUTHOID,
        ] {
            pg_sys::CacheRegisterSyscacheCallback(
                cache as i32,
                Some(roles_changed),
                pg_sys::Datum::from(0),
            );
        }
    }
}

/// What a cached access decision depends on.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Stamp {
    user: u32,
    epoch: u64,
    roles: u64,
}

/// `GetUserId` without pgrx's FFI guard. pgrx wraps every `pg_sys` call in a
/// `sigsetjmp` boundary so that an ERROR raised in C becomes a Rust panic; `GetUserId`
/// only returns a backend global and never raises, and it runs on every hot-path call,
/// where the guard would cost more than the rest of the call.
mod unguarded {
    unsafe extern "C" {
        pub fn GetUserId() -> pgrx::pg_sys::Oid;
    }
}

/// The current stamp: a cached decision is valid while the stamp is unchanged.
#[inline]
pub fn stamp() -> Stamp {
    // SAFETY: GetUserId reads a backend global (CurrentUserId) and cannot raise, so the
    // missing FFI guard is never needed; the symbol is the server's own.
    let user = unsafe { unguarded::GetUserId() }.to_u32();
    Stamp {
        user,
        epoch: epochs::current(Epoch::AccessControl),
        roles: ROLE_CHANGES.load(Ordering::Relaxed),
    }
}

fn current_user_name() -> String {
    // SAFETY: GetUserId is valid in a connected backend; GetUserNameFromId with noerr
    // returns NULL for a dropped role, which we handle.
    unsafe {
        let p = pg_sys::GetUserNameFromId(pg_sys::GetUserId(), true);
        if p.is_null() {
            "?".into()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// The name of the role running the current statement (the owner of new objects).
pub fn current_role_name() -> String {
    current_user_name()
}

/// True if the current user has the privileges of role `name` (PUBLIC matches everyone;
/// a role that does not exist matches nobody).
fn acts_as(name: &str) -> bool {
    // SAFETY: superuser() reads the current user's role attributes.
    if name == PUBLIC || unsafe { pg_sys::superuser() } {
        return true;
    }
    let Ok(c) = CString::new(name) else {
        return false;
    };
    // SAFETY: get_role_oid with missing_ok returns InvalidOid instead of raising;
    // has_privs_of_role only reads catalogs.
    unsafe {
        let role = pg_sys::get_role_oid(c.as_ptr(), true);
        role != pg_sys::InvalidOid && pg_sys::has_privs_of_role(pg_sys::GetUserId(), role)
    }
}

fn role_exists(name: &str) -> bool {
    let Ok(c) = CString::new(name) else {
        return false;
    };
    // SAFETY: as in `acts_as`.
    unsafe { pg_sys::get_role_oid(c.as_ptr(), true) != pg_sys::InvalidOid }
}

/// The owner of an object; `None` if the object does not exist.
///
/// `Some(None)`: the object exists in a catalog from before owners (version 0.1.0 whose
/// `ALTER EXTENSION id_gen UPDATE` has not run yet, while the new library is loaded). It
/// stays as open as it was: the update grants PUBLIC on every existing object, so a
/// decision cached now stays right after it. The owner is read through `to_jsonb` so
/// that the query parses against both catalogs.
fn lookup_owner(kind: Kind, name: &str) -> Option<Option<String>> {
    Spi::connect_mut(|client| {
        let t = client.update(
            &format!(
                "SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) 'owner' FROM {} o \
                 WHERE o.name OPERATOR(pg_catalog.=) $1",
                kind.table()
            ),
            Some(1),
            &[name.into()],
        )?;
        if t.is_empty() {
            return Ok(None);
        }
        Ok::<_, pgrx::spi::Error>(Some(t.first().get::<String>(1)?))
    })
    .unwrap_or_else(|e| spi_failed(e))
}

/// True if a sequence (or serial) of that name exists.
pub fn exists(kind: Kind, name: &str) -> bool {
    lookup_owner(kind, name).is_some()
}

/// The grantees of an object.
fn grantees_of(kind: Kind, name: &str) -> Vec<String> {
    Spi::connect_mut(|client| {
        let t = client.update(
            "SELECT grantee::text FROM id_gen.usage_grants \
             WHERE kind OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
            None,
            &[kind.as_str().into(), name.into()],
        )?;
        let mut out = vec![];
        for row in t {
            if let Some(g) = row.get::<String>(1)? {
                out.push(g);
            }
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
    .unwrap_or_else(|e| spi_failed(e))
}

fn missing_owner_detail(owner: &str) -> Option<String> {
    (!role_exists(owner)).then(|| {
        format!("Its owner role \"{owner}\" does not exist in this cluster (restored from another one?).")
    })
}

/// Raises 42501 unless the current user may take values of `name` (its owner, a member
/// of a grantee role, or PUBLIC was granted). Raises 42704 if it does not exist.
pub fn require_usage(kind: Kind, name: &str) {
    let Some(owner) = lookup_owner(kind, name) else {
        raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: {} \"{name}\" does not exist", kind.as_str()),
            Some(match kind {
                Kind::Sequence => "Create it with SELECT id_gen.create_sequence('name'); existing ones are listed in id_gen.sequences.",
                Kind::Serial => "Create it with SELECT id_gen.create_serial('name', 'YYYYMMDD', ...); existing ones are in id_gen.serials.",
            }),
        )
    };
    let Some(owner) = owner else {
        return; // a catalog from before owners: open, as it was
    };
    if acts_as(&owner) || grantees_of(kind, name).iter().any(|g| acts_as(g)) {
        return;
    }
    let message = format!(
        "id_gen: permission denied for {} \"{name}\": role \"{}\" may not take its values",
        kind.as_str(),
        current_user_name()
    );
    let hint = format!(
        "Its owner (\"{owner}\") or a superuser can allow it: SELECT id_gen.grant_usage('{name}', '{}');",
        current_user_name()
    );
    deny(message, hint, &owner)
}

/// Raises 42501 unless the current user owns `name` (or is a member of its owner role,
/// or a superuser); 42704 if it does not exist. `action` says what was attempted.
///
/// Returns the owner it checked (`None` for a catalog from before owners), so that the
/// write that follows can make sure it changes the same object ([`OWNED_BY`]).
pub fn require_owner(kind: Kind, name: &str, action: &str) -> Option<String> {
    let Some(owner) = lookup_owner(kind, name) else {
        raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: {} \"{name}\" does not exist", kind.as_str()),
            Some("Existing ones are listed in id_gen.sequences and id_gen.serials."),
        )
    };
    check_owner(kind, name, action, owner)
}

/// The check of [`require_owner`] on an owner already looked up.
fn check_owner(kind: Kind, name: &str, action: &str, owner: Option<String>) -> Option<String> {
    // A catalog from before owners: the EXECUTE grants of its functions decide, as then.
    let Some(owner) = owner else {
        return None;
    };
    if acts_as(&owner) {
        return Some(owner);
    }
    let message = format!(
        "id_gen: permission denied to {action} {} \"{name}\": role \"{}\" is not its owner",
        kind.as_str(),
        current_user_name()
    );
    let hint =
        format!("Only its owner (\"{owner}\"), a member of that role, or a superuser may do that.");
    deny(message, hint, &owner)
}

/// Raises 42501; the DETAIL says so when the owner role does not exist here.
fn deny(message: String, hint: String, owner: &str) -> ! {
    match missing_owner_detail(owner) {
        Some(detail) => raise_detail(
            Code::ERRCODE_INSUFFICIENT_PRIVILEGE,
            message,
            detail,
            Some(&hint),
        ),
        None => raise(Code::ERRCODE_INSUFFICIENT_PRIVILEGE, message, Some(&hint)),
    }
}

/// Deletes the grants of `name` (inside a catalog write: a dropped object, or a new one
/// whose name was used by a row deleted behind id_gen's back).
pub fn delete_grants(
    client: &mut pgrx::spi::SpiClient<'_>,
    kind: Kind,
    name: &str,
) -> pgrx::spi::SpiResult<()> {
    client.update(
        "DELETE FROM id_gen.usage_grants WHERE kind = $1 AND name = $2",
        None,
        &[kind.as_str().into(), name.into()],
    )?;
    Ok(())
}

/// A condition for writes after [`require_owner`], with the checked owner as `$2`: the
/// row still has that owner (NULL: a catalog from before owners). Read through `to_jsonb`
/// so that it parses against both catalogs. The write runs as the catalog owner, in a
/// fresh snapshot: without it, a row dropped and created again by someone else between
/// the check and the write would be changed on the strength of the old owner's check.
pub const OWNED_BY: &str =
    "(pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) 'owner') IS NOT DISTINCT FROM $2";

/// The same condition as a subquery on `kind`'s catalog, for writes to the grants table:
/// `$2` is the name and `$5` the checked owner.
pub fn still_owned_clause(kind: Kind) -> String {
    format!(
        "EXISTS (SELECT FROM {} o WHERE o.name = $2 AND \
         (pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) 'owner') IS NOT DISTINCT FROM $5)",
        kind.table()
    )
}

/// Drops the catalog row of `name` and its grants, after checking that the current user
/// owns it. Returns whether it existed (and was dropped).
pub fn drop_object(kind: Kind, name: &str) -> bool {
    let Some(owner) = lookup_owner(kind, name) else {
        return false;
    };
    let owner = check_owner(kind, name, "drop", owner);
    as_catalog_owner(|| {
        Spi::connect_mut(|client| {
            let t = client.update(
                &format!(
                    "DELETE FROM {} o WHERE o.name = $1 AND {OWNED_BY} RETURNING o.name",
                    kind.table()
                ),
                None,
                &[name.into(), owner.as_deref().into()],
            )?;
            if t.is_empty() {
                return Ok(false);
            }
            delete_grants(client, kind, name)?;
            Ok::<_, pgrx::spi::Error>(true)
        })
    })
    .unwrap_or_else(|e| spi_failed(e))
}

/// Raises 42501 unless the current user may make `role` an owner: superusers always,
/// others only for roles they are members of (as `ALTER ... OWNER TO` requires).
pub fn require_can_become(role: &str) {
    if !role_exists(role) {
        raise(
            Code::ERRCODE_UNDEFINED_OBJECT,
            format!("id_gen: role \"{role}\" does not exist"),
            None,
        );
    }
    if !acts_as(role) {
        raise(
            Code::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!(
                "id_gen: permission denied: role \"{}\" is not a member of role \"{role}\"",
                current_user_name()
            ),
            Some("Only superusers may give an object to a role they are not a member of."),
        );
    }
}

/// Runs catalog writes as the bootstrap superuser with `search_path` pinned, after the
/// caller's privileges were checked; the caller's identity and settings are restored
/// afterwards (by PostgreSQL's abort processing if `f` raises).
pub fn as_catalog_owner<R>(f: impl FnOnce() -> R) -> R {
    register_callbacks();
    let mut saved_user = pg_sys::InvalidOid;
    let mut saved_context = 0;
    // SAFETY: standard PostgreSQL pattern (see RI triggers, index builds): switch the
    // user id locally and open a GUC nest level for a pinned search_path; both are undone
    // below, or by transaction abort on ERROR (AbortTransaction resets the user id and
    // AtEOXact_GUC unwinds nest levels).
    let nest = unsafe {
        pg_sys::GetUserIdAndSecContext(&mut saved_user, &mut saved_context);
        pg_sys::SetUserIdAndSecContext(
            pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID),
            saved_context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
        let nest = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            c"pg_catalog, pg_temp".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        nest
    };
    let result = f();
    // SAFETY: undoes exactly what was done above, in reverse order.
    unsafe {
        pg_sys::AtEOXact_GUC(true, nest);
        pg_sys::SetUserIdAndSecContext(saved_user, saved_context);
    }
    result
}

/// A decision changed: every backend re-checks at its next use (at commit).
pub fn changed() {
    epochs::bump_at_commit(Epoch::AccessControl);
}

/// Makes sure the role-change callbacks are registered before a decision is cached.
pub fn prepare_cache() {
    register_callbacks();
}
