//! Sharing a decode step's products among the CPU's cores: a pool of threads that spin while
//! the work keeps coming.
//!
//! A decode step is some two hundred products of a few microseconds each, between which the
//! calling thread does a little work of its own (a norm, the attention of one token). Rayon's
//! workers fall asleep in those gaps and each product paid two futex calls to wake one and to
//! be woken back (a quarter of a two-thread step went to it, measured with perf). Here the
//! helpers spin on a generation counter for a while after each product (as llama.cpp's threads
//! do between the operations of a graph), and every thread, the calling one included, takes
//! contiguous pieces of the rows in turn (so each core streams long runs of the weight, which
//! the prefetchers follow, and a thread that starts late takes fewer). The helpers sleep on a
//! condition variable once nothing has come for `SPIN`.
//!
//! Threads: as many as rayon's pool has (`RAYON_NUM_THREADS`), the calling thread included.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a helper spins for the next job before it sleeps.
const SPIN: Duration = Duration::from_millis(2);

/// Pieces of rows per thread (see `for_each_rows`).
const PIECES_PER_THREAD: usize = 4;

/// Work (multiply-adds) below which a product runs on the calling thread alone.
const PARALLEL_WORK: usize = 1 << 16;

/// A job: the function every thread of the pool calls once, lifetime erased (the caller waits
/// until every helper is done with it).
type Job = dyn Fn() + Sync;

struct Shared {
    /// Bumped once per job; helpers run the job when they see a new value.
    generation: AtomicU64,
    /// The current job: a pointer to the caller's reference to it, on the caller's stack
    /// (`run`).
    job: AtomicPtr<&'static Job>,
    /// Helpers still working on the current job.
    pending: AtomicUsize,
    /// The first panic of a helper in the current job, resumed on the calling thread.
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    /// Where helpers sleep once idle for `SPIN`.
    sleep: Mutex<()>,
    wake: Condvar,
}

struct Pool {
    shared: Arc<Shared>,
    helpers: usize,
    /// Held by the thread whose job runs; another caller (or a nested call) computes alone.
    busy: Mutex<()>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let helpers = rayon::current_num_threads().saturating_sub(1);
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            pending: AtomicUsize::new(0),
            panic: Mutex::new(None),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut started = 0;
        for index in 1..=helpers {
            let shared = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("rb-cpu-{index}"))
                .spawn(move || helper(&shared));
            if spawned.is_err() {
                break;
            }
            started += 1;
        }
        Pool {
            shared,
            helpers: started,
            busy: Mutex::new(()),
        }
    })
}

fn helper(shared: &Shared) {
    // Not the counter's value when this thread starts: a job may be waiting already.
    let mut seen = 0;
    loop {
        let mut idle_since = Instant::now();
        let mut spins = 0u32;
        loop {
            let now = shared.generation.load(Ordering::Acquire);
            if now != seen {
                seen = now;
                break;
            }
            std::hint::spin_loop();
            spins += 1;
            // The clock is read now and then, not at every spin.
            if spins.is_multiple_of(1024) && idle_since.elapsed() > SPIN {
                let guard = shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
                // Checked under the lock the caller takes to notify: no wake-up is lost.
                if shared.generation.load(Ordering::Acquire) == seen {
                    drop(shared.wake.wait(guard).unwrap_or_else(|e| e.into_inner()));
                }
                idle_since = Instant::now();
            }
        }
        // SAFETY: the caller stored the job before bumping the generation (release/acquire)
        // and does not return, so the job outlives this call, until `pending` reaches zero.
        let job: &Job = unsafe { *shared.job.load(Ordering::Acquire) };
        if let Err(payload) = catch_unwind(AssertUnwindSafe(job)) {
            let mut first = shared.panic.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert(payload);
        }
        shared.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Calls `f` once on every thread of the pool, the calling thread included, and returns when
/// all are done. While another job holds the pool (another caller's, or this one's when `f`
/// calls in again) the calling thread calls it alone.
fn run(f: &(dyn Fn() + Sync)) {
    let pool = pool();
    // A panic resumed below poisons the lock; the pool itself is whole again by then (every
    // helper done, their panic taken).
    let _busy = match pool.busy.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            f();
            return;
        }
    };
    let shared = &pool.shared;
    // SAFETY (lifetime): helpers read the job only between the generation bump below and
    // their decrement of `pending`, and this function returns only once `pending` is zero.
    let erased: &'static Job =
        unsafe { std::mem::transmute::<&(dyn Fn() + Sync + '_), &'static Job>(f) };
    let mut slot = erased;
    shared
        .job
        .store(&mut slot as *mut &'static Job, Ordering::Release);
    shared.pending.store(pool.helpers, Ordering::Release);
    shared.generation.fetch_add(1, Ordering::AcqRel);
    // Sleeping helpers are woken under the lock they check the generation under.
    drop(shared.sleep.lock().unwrap_or_else(|e| e.into_inner()));
    shared.wake.notify_all();
    let mine = catch_unwind(AssertUnwindSafe(f));
    let mut spins = 0u32;
    while shared.pending.load(Ordering::Acquire) != 0 {
        spins = spins.wrapping_add(1);
        // On a busy machine a helper may have lost its core: let it have this one.
        if spins.is_multiple_of(1 << 14) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    // The helpers' panic is taken even when this thread's own is resumed, so that it does not
    // surface in a later job.
    let theirs = shared
        .panic
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(payload) = mine.err().or(theirs) {
        resume_unwind(payload);
    }
}

/// How `for_each_rows` shares out rows.
#[derive(Clone, Copy, Debug)]
pub struct Rows {
    /// Values in a row of the output.
    pub len: usize,
    /// A piece's rows are a multiple of this (a product's 16: whole cache lines of output, and
    /// fewer, longer streams through the weight).
    pub grain: usize,
    /// Multiply-adds of the whole job: below `PARALLEL_WORK` it runs on the calling thread.
    pub work: usize,
}

/// Calls `f(first_row, rows)` over `out` in contiguous pieces of whole rows, shared among the
/// threads when the work is worth it, else one piece on the calling thread. Each piece is
/// taken by one thread, whichever asks next; `f` must therefore not rely on which.
pub fn for_each_rows(out: &mut [f32], rows: Rows, f: impl Fn(usize, &mut [f32]) + Sync) {
    let Rows {
        len: row_len,
        grain,
        work,
    } = rows;
    let rows = out.len() / row_len.max(1);
    let threads = pool().helpers + 1;
    let grain = grain.max(1);
    if threads == 1 || work < PARALLEL_WORK || rows < 2 * grain {
        f(0, out);
        return;
    }
    // A few pieces per thread, taken in turn: a thread that started late or streams slower
    // takes fewer (equal halves left the calling thread waiting 13% of a two-thread step).
    let per_piece = rows
        .div_ceil(threads * PIECES_PER_THREAD)
        .next_multiple_of(grain);
    let next = AtomicUsize::new(0);
    let base = SendPtr(out.as_mut_ptr());
    run(&|| loop {
        let first = next.fetch_add(1, Ordering::Relaxed) * per_piece;
        if first >= rows {
            return;
        }
        let count = per_piece.min(rows - first);
        // SAFETY: each piece index is taken once, so pieces are disjoint row ranges of `out`
        // (rows `first .. first + count` of `rows`), which outlives `run`.
        let piece = unsafe {
            std::slice::from_raw_parts_mut(base.get().add(first * row_len), count * row_len)
        };
        f(first, piece);
    });
}

/// A pointer the pieces write through, each its own range.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);

impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

// SAFETY: each piece writes a disjoint range (`for_each_rows`).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(len: usize) -> Rows {
        Rows {
            len,
            grain: 16,
            work: usize::MAX,
        }
    }

    #[test]
    fn every_row_is_computed_once_with_its_index() {
        for rows in [1, 31, 32, 33, 100, 1000] {
            let mut out = vec![0f32; rows * 3];
            for_each_rows(&mut out, shape(3), |first, piece| {
                for (i, row) in piece.chunks_exact_mut(3).enumerate() {
                    row.iter_mut().for_each(|v| *v += (first + i) as f32);
                }
            });
            let want: Vec<f32> = (0..rows).flat_map(|r| [r as f32; 3]).collect();
            assert_eq!(out, want, "{rows} rows");
        }
    }

    #[test]
    fn a_panic_in_a_share_reaches_the_caller_and_the_pool_goes_on() {
        let caught = catch_unwind(|| {
            let mut out = vec![0f32; 64 * 1000];
            for_each_rows(&mut out, shape(1), |first, _| {
                assert!(first == 0, "a share past the first failed");
            });
        });
        // One thread: the only share is the first, which does not panic.
        assert_eq!(caught.is_err(), pool().helpers > 0);
        // The shares still run on every thread of the pool (tried a few times: a test beside
        // this one may hold the pool, and then the calling thread computes every share).
        let spread = (0..100).any(|_| {
            let threads = Mutex::new(std::collections::HashSet::new());
            let mut out = vec![0f32; 64 * 1000];
            for_each_rows(&mut out, shape(1), |_, piece| {
                piece.fill(1.0);
                threads.lock().unwrap().insert(std::thread::current().id());
            });
            assert!(out.iter().all(|&v| v == 1.0));
            threads.into_inner().unwrap().len() == pool().helpers + 1
        });
        assert!(spread);
    }
}
