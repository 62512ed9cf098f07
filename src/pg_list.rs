//! PostgreSQL's `List` of pointers, read into a Rust vector (plan and query trees hold
//! them). Reads only; never frees or changes a list.

use pgrx::pg_sys;

/// The pointers of a List of pointers (NIL: none).
///
/// # Safety
/// `list` must be NIL or a valid pointer List.
pub unsafe fn list_pointers(list: *mut pg_sys::List) -> Vec<*mut std::ffi::c_void> {
    if list.is_null() {
        return vec![];
    }
    // SAFETY: a valid List holds `length` cells of pointers.
    unsafe {
        (0..(*list).length as usize)
            .map(|i| (*(*list).elements.add(i)).ptr_value)
            .collect()
    }
}
