//! PostgreSQL's `List` of pointers (plan and query trees hold them) and of integers, and its
//! arrays, read into Rust vectors. Reads only; never frees or changes a list or an array (an
//! array's elements are pointed at where deconstruct_array leaves them, in the current memory
//! context).

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

/// The integers of an integer List (NIL: none).
///
/// # Safety
/// `list` must be NIL or a valid integer List (T_IntList).
pub unsafe fn list_ints(list: *mut pg_sys::List) -> Vec<i32> {
    if list.is_null() {
        return vec![];
    }
    // SAFETY: a valid List holds `length` cells.
    unsafe {
        (0..(*list).length as usize)
            .map(|i| (*(*list).elements.add(i)).int_value)
            .collect()
    }
}

/// The non-NULL elements of an array whose elements are of type `elem` (a detoasted copy of
/// the array and the element pointers are palloc'd in the current memory context).
///
/// # Safety
/// `datum` must be a non-NULL array whose element type is `elem`.
pub unsafe fn array_elements(datum: pg_sys::Datum, elem: pg_sys::Oid) -> Vec<pg_sys::Datum> {
    // SAFETY: as the caller promises; deconstruct_array reads the array as `elem` says.
    unsafe {
        let array = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        if (*array).elemtype != elem {
            return vec![];
        }
        let (mut len, mut byval, mut align) = (0i16, false, 0 as std::ffi::c_char);
        pg_sys::get_typlenbyvalalign(elem, &mut len, &mut byval, &mut align);
        let mut values: *mut pg_sys::Datum = std::ptr::null_mut();
        let mut nulls: *mut bool = std::ptr::null_mut();
        let mut n: i32 = 0;
        pg_sys::deconstruct_array(
            array,
            elem,
            len as i32,
            byval,
            align,
            &mut values,
            &mut nulls,
            &mut n,
        );
        (0..n.max(0) as usize)
            .filter(|&i| !*nulls.add(i))
            .map(|i| *values.add(i))
            .collect()
    }
}
