//! Output buffers for CPU kernels. A fresh 64 MiB output costs 16k first-touch page faults with
//! 4 KiB pages, which used to take more time than the kernel itself; large buffers therefore ask
//! the kernel for transparent huge pages (as numpy does), which cuts that to 32 faults.

use std::mem::MaybeUninit;

/// Buffers of at least this many bytes ask for huge pages (numpy's threshold, 4 MiB).
pub const HUGE_MIN_BYTES: usize = 1 << 22;
/// The x86-64 and aarch64 (4 KiB granule) transparent huge page size.
const HUGE_PAGE: usize = 1 << 21;

/// An empty `Vec` with room for `n` elements, backed by transparent huge pages where it is large.
pub fn with_capacity<T>(n: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    advise_huge(v.spare_capacity_mut());
    v
}

/// Asks Linux to back the whole 2 MiB pages inside `buf` with huge pages. Advice only: where
/// THP is off (or on other systems) nothing changes but the speed.
#[cfg(target_os = "linux")]
fn advise_huge<T>(buf: &mut [MaybeUninit<T>]) {
    let bytes = std::mem::size_of_val(buf);
    if bytes < HUGE_MIN_BYTES {
        return;
    }
    let start = buf.as_mut_ptr() as usize;
    let lo = start.next_multiple_of(HUGE_PAGE);
    let hi = (start + bytes) / HUGE_PAGE * HUGE_PAGE;
    if hi > lo {
        // SAFETY: [lo, hi) lies inside `buf`, memory that we borrow mutably, so no other code
        // uses it. MADV_HUGEPAGE changes only how the kernel backs these pages, never their
        // contents or their mapping, so no Rust-visible memory changes. A failure (THP
        // disabled, an old kernel) leaves the pages as they were, so the result is ignored.
        unsafe {
            libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge<T>(_: &mut [MaybeUninit<T>]) {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The kB of `AnonHugePages` in this process's mapping that contains `addr`.
    fn anon_huge_kb_at(addr: usize) -> usize {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let head = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = head.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = (a..b).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(kb) = line.strip_prefix("AnonHugePages:") {
                    return kb.trim().trim_end_matches("kB").trim().parse().unwrap();
                }
            }
        }
        0
    }

    #[test]
    fn a_large_buffer_is_backed_by_huge_pages() {
        // Only meaningful where THP is available on request; skip elsewhere.
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        if !mode.is_ok_and(|m| m.contains("[madvise]") || m.contains("[always]")) {
            return;
        }
        let n = 16 << 20; // 64 MiB of f32
        let mut v = with_capacity::<f32>(n);
        v.extend(std::iter::repeat_n(1.0f32, n));
        let mid = v.as_ptr() as usize + n * 2;
        assert!(
            anon_huge_kb_at(mid) >= 2048,
            "no huge pages under the buffer"
        );
    }
}
