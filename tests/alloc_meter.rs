//! A counting global allocator, so a test can assert that reading a file never allocates more
//! than the file's size justifies. A test binary opts in with
//! `#[global_allocator] static A: rb_integration_tests::alloc_meter::Meter = Meter;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

pub struct Meter;

thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator and only updates thread-local counters, which do
// not allocate.
unsafe impl GlobalAlloc for Meter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        shrink(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrink(layout.size());
            grow(new_size);
        }
        p
    }
}

fn grow(n: usize) {
    let _ = CURRENT.try_with(|c| {
        let now = c.get() + n;
        c.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

fn shrink(n: usize) {
    let _ = CURRENT.try_with(|c| c.set(c.get().saturating_sub(n)));
}

/// Runs `f` and returns its result with the peak number of bytes this thread held at once
/// during the call, above what it held before.
pub fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let start = CURRENT.with(|c| c.get());
    PEAK.with(|p| p.set(start));
    let r = f();
    let peak = PEAK.with(|p| p.get());
    (r, peak.saturating_sub(start))
}

/// Runs `f` and returns its result with the bytes this thread still holds after the call,
/// above what it held before (what the result keeps alive).
pub fn held_after<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let start = CURRENT.with(|c| c.get());
    let r = f();
    let now = CURRENT.with(|c| c.get());
    (r, now.saturating_sub(start))
}
