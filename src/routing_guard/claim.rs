//! `id_gen.route_claim(gene, version)`: the first statement of a client-routed
//! transaction (docs/routing-protocol.md §3). It refuses a stale version or a gene this
//! shard does not own (IG001) and a fenced gene (IG002); otherwise it takes ROW EXCLUSIVE
//! on the partitions holding the gene in every distributed table of the shard that the
//! caller may write (ACCESS SHARE where it may only read), so that a fence, a flip or a
//! detach of that gene waits until the transaction ends (a reader holds off only detaches).
//!
//! Invariants: locks are taken table by table in the order of schema and name (a move's
//! fence locks its partitions in that order too), each parent before its partition, and
//! only on tables the caller holds a privilege on, never stronger than LOCK TABLE would
//! grant it; the gene's partition is found after its parent is locked, in PostgreSQL's
//! partition descriptor by a binary search (no view of every partition is loaded; the
//! descriptor is the one PostgreSQL's planner builds and keeps anyway); after locking, each partition is checked in the relcache
//! (still a partition, not fenced), and the whole claim is redone from a fresh view when
//! the routing epoch moved while it waited; a refusal is always decided on a fresh view.
//! A table laid out by ownership (one table of rows, docs/design.md §11.8) has no partition
//! to lock: its table of rows is locked as a parent is, and the gene must be one it records
//! (`owned_ranges.rs`) and not fenced (a move's fence takes SHARE ROW EXCLUSIVE on the table of
//! rows, so it waits for claimed transactions, then records the genes fenced: IG002).
//! The SQL-callable symbol is an unguarded shim so that it can raise IG-class errors (see
//! `raise.rs`). A claim carried on `BEGIN` (`begin_claim.rs`) runs the same [`claim_gene`].

use super::plan_check::{guard_of, Guarded};
use super::raise::Verdict;
use super::shard_state;
use crate::errors::{raise as raise_pg, Code};
use pgrx::pg_sys;

/// SQL: `id_gen.route_claim(gene integer, version bigint) RETURNS bigint` (STRICT).
///
/// # Safety
/// Called by the function manager with two non-NULL arguments.
#[no_mangle]
pub unsafe extern "C-unwind" fn id_gen_route_claim(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let mut shard_version: i64 = 0;
    // SAFETY: fcinfo comes from the function manager; the guarded part reports its own
    // PostgreSQL errors.
    let mut verdict: Option<Verdict> = None;
    unsafe { claim_guarded(fcinfo, &mut shard_version, &mut verdict) };
    if let Some(v) = verdict {
        // SAFETY: nothing in this frame needs dropping.
        unsafe { super::raise::raise(v) }
    }
    pg_sys::Datum::from(shard_version)
}

/// Version-1 calling convention marker for [`id_gen_route_claim`].
#[no_mangle]
pub extern "C" fn pg_finfo_id_gen_route_claim() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// The claim, with PostgreSQL errors and panics reported; a refusal goes to `*verdict`.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn claim_guarded(
    fcinfo: pg_sys::FunctionCallInfo,
    shard_version: *mut i64,
    verdict: *mut Option<Verdict>,
) {
    // SAFETY: both out-pointers are the caller's locals.
    unsafe { *verdict = claim(fcinfo, &mut *shard_version) };
}

unsafe fn claim(fcinfo: pg_sys::FunctionCallInfo, shard_version: &mut i64) -> Option<Verdict> {
    // SAFETY: a STRICT function of two arguments: both are present and not NULL.
    let (gene, declared) = unsafe {
        let args = (*fcinfo).args.as_slice(2);
        (args[0].value.value() as i32, args[1].value.value() as i64)
    };
    if !(0..=65535).contains(&gene) {
        raise_pg(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: gene {gene} is out of range (allowed: 0 .. 65535)"),
            Some(
                "The gene of an owner is id_gen.shard_gene(owner); of an id, id_gen.shard_of(id).",
            ),
        );
    }
    if declared < 0 {
        raise_pg(
            Code::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("id_gen: route version {declared} is negative"),
            Some("Pass the version read with the routes (id_gen.route_map.version)."),
        );
    }
    // SAFETY: inside the claim's transaction (an SQL function call).
    unsafe { claim_gene(gene as u16, declared, shard_version) }
}

/// Claims `gene` at route version `declared` for the rest of the transaction (the locks and
/// checks of this file's header), or says why not; on success `*shard_version` is the shard's
/// route version. Shared by `id_gen.route_claim(...)` and a claim on `BEGIN`
/// (`begin_claim.rs`).
///
/// # Safety
/// Inside a transaction, with an active snapshot; PostgreSQL errors are raised as such.
pub(super) unsafe fn claim_gene(
    gene: u16,
    declared: i64,
    shard_version: &mut i64,
) -> Option<Verdict> {
    for attempt in 0..4 {
        if attempt > 0 {
            // SAFETY: processes pending invalidations, so that the relcache (partition
            // descriptors of tables this claim does not lock) is as of now.
            unsafe { pg_sys::AcceptInvalidationMessages() };
        }
        let view = shard_state::version_view(attempt > 0);
        if declared < view.version {
            if attempt == 0 {
                continue;
            }
            return Some(Verdict::stale(view.version, declared));
        }
        // Table by table in the view's order (schema, name), parent before partition, as
        // every statement on the table locks them: a re-partition (ACCESS EXCLUSIVE on the
        // parent, then its partitions) waits for this transaction instead of deadlocking
        // with it. The gene's partition is looked up after the parent is locked, in the
        // parent's partition descriptor, which that lock has brought up to date.
        // Only tables the caller may use are locked, each in the mode its rights allow (as
        // LOCK TABLE would): ROW EXCLUSIVE where it may write, which fences wait for;
        // ACCESS SHARE where it may only read, which only a detach waits for. A role
        // without rights on a table, or with SELECT only, cannot hold up that table's
        // fences; the gene must be owned in every table all the same.
        let mut locked = Vec::with_capacity(view.tables.len());
        let mut owned = true;
        for &parent in &view.tables {
            // SAFETY: a syscache lookup inside the transaction.
            let by_ownership = unsafe { pg_sys::get_rel_relkind(parent) }
                == pg_sys::RELKIND_RELATION as std::ffi::c_char;
            let mut mode = lock_mode_for(parent);
            let ownership = by_ownership.then(super::owned_ranges::current);
            if let Some(o) = &ownership {
                // (Applications are granted its view of owned rows, whose statements lock
                // the table of rows as they run: the claim takes what they would.)
                mode = mode.max(o.view_of(parent).and_then(lock_mode_for));
            }
            // SAFETY: heavyweight locks on relation oids, released at transaction end; a
            // relcache lookup inside the transaction.
            unsafe {
                if let Some(mode) = mode {
                    pg_sys::LockRelationOid(parent, mode);
                }
                // A table laid out by ownership (its table of rows, a plain table): the
                // genes it records, as of the lock (a change of them locks the table of
                // rows against writers, and moves the epoch checked below).
                // (A move's fence of the gene, which it takes under the same lock: IG002.)
                if by_ownership {
                    let o = super::owned_ranges::current();
                    if !o.of(parent).is_some_and(|g| g.contains_gene(gene)) {
                        owned = false;
                        break;
                    }
                    if o.is_fenced(parent, gene) {
                        return Some(Verdict::gene_fenced_in_table(parent, gene));
                    }
                    continue;
                }
                match shard_state::partition_holding_gene(parent, gene) {
                    Some(relid) => {
                        if let Some(mode) = mode {
                            pg_sys::LockRelationOid(relid, mode);
                            locked.push(relid);
                        }
                    }
                    None => {
                        owned = false;
                        break;
                    }
                }
            }
        }
        if !owned {
            if attempt == 0 {
                continue;
            }
            // (The view of attempts after the first is fresh.)
            return Some(Verdict::gene_not_owned(
                gene,
                view.version,
                known_owner(gene),
            ));
        }
        let epoch = view.loaded_at_epoch();
        if epoch != 0 && shard_state::epoch_now() != epoch {
            continue; // the routing changed while we waited: look again
        }
        let mut moved = false;
        for &relid in &locked {
            // SAFETY: the relation is locked by us; the relcache entry is current.
            unsafe {
                let rel = pg_sys::RelationIdGetRelation(relid);
                if rel.is_null() {
                    moved = true;
                    continue;
                }
                let still_partition = (*(*rel).rd_rel).relispartition;
                let fenced = matches!(guard_of(rel), Some(Guarded::Fenced));
                pg_sys::RelationClose(rel);
                if fenced {
                    return Some(Verdict::fenced(relid));
                }
                moved |= !still_partition;
            }
        }
        if moved {
            continue;
        }
        super::mark_checked();
        *shard_version = view.version;
        return None;
    }
    let view = shard_state::version_view(true);
    Some(Verdict::gene_not_owned(
        gene,
        view.version,
        known_owner(gene),
    ))
}

/// The lock a claim takes on a table for the current user: ROW EXCLUSIVE if it may write
/// it (INSERT, UPDATE or DELETE), ACCESS SHARE if it may only SELECT, none without rights
/// (or for a table dropped since the view was loaded).
fn lock_mode_for(table: pg_sys::Oid) -> Option<pg_sys::LOCKMODE> {
    let holds = |mode: u32| {
        let mut missing = false;
        // SAFETY: a catalog privilege check by oid that reports a missing table instead of
        // raising; any of the bits in `mode` suffices.
        let result = unsafe {
            pg_sys::pg_class_aclcheck_ext(
                table,
                pg_sys::GetUserId(),
                mode as pg_sys::AclMode,
                &mut missing,
            )
        };
        !missing && result == pg_sys::AclResult::ACLCHECK_OK
    };
    if holds(pg_sys::ACL_INSERT | pg_sys::ACL_UPDATE | pg_sys::ACL_DELETE) {
        Some(pg_sys::RowExclusiveLock as pg_sys::LOCKMODE)
    } else if holds(pg_sys::ACL_SELECT) {
        Some(pg_sys::AccessShareLock as pg_sys::LOCKMODE)
    } else {
        None
    }
}

/// The shard that owns `gene` according to the routes the coordinator last pushed here.
fn known_owner(gene: u16) -> Option<String> {
    super::quietly(|| {
        pgrx::Spi::get_one_with_args::<String>(
            "SELECT id_gen.shard_known_owner($1)",
            &[(gene as i32).into()],
        )
    })
    .ok()
    .flatten()
}
