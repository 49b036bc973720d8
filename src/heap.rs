//! How the allocator keeps memory between answers.
//!
//! A page of output is answered with a few buffers of a few hundred KiB, freed as soon as
//! the answer is written. glibc's defaults hand such blocks back to the system on free
//! (an `mmap` per block at first, then trimming the top of the heap once more than twice
//! the last freed block is free), so each answer faulted its pages in again: about a tenth
//! of the server's time on a run of page reads went to page faults and zeroing. Blocks up
//! to `MMAP_THRESHOLD` now come from the heap, and the heap keeps up to `TRIM_THRESHOLD`
//! free at its top: room for the largest answer's buffers several times over.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// Blocks at least this large are mapped on their own and returned on free: a session's
/// retained output grows into these, so an ended session's memory goes back.
const MMAP_THRESHOLD: libc::c_int = 1 << 20;
/// Free memory kept at the top of the heap before it is returned.
const TRIM_THRESHOLD: libc::c_int = 8 << 20;
/// Freed heap counted before it is handed back (`freed`).
const RETURN_AFTER: usize = 1 << 20;
/// Arenas the allocator may use: one. glibc gives threads arenas of their own, and
/// `malloc_trim` hands back the free pages inside them but never the free top of one
/// (only a free that leaves more than `TRIM_THRESHOLD` there does): each terminal's
/// emulator, drawing on a blocking thread of its own, left an arena of several MiB behind
/// it, 6 MiB for a session that printed 3 MB, so eight such sessions kept the server at
/// 55 MiB after they were gone. Small blocks come from each thread's cache without a lock.
const ARENA_MAX: libc::c_int = 1;

/// Set the thresholds above, before any thread starts. Elsewhere than glibc, nothing.
pub fn keep_answer_buffers() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes parameters the allocator reads under its own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX);
    }
}

/// Heap freed since memory was last handed back, as counted by `freed`.
static UNRETURNED: AtomicUsize = AtomicUsize::new(0);

/// How long frees must pause before the heap is handed back, and how long they may
/// postpone it at most. A session goes in parts, on threads of their own: its record, its
/// readers' buffers, its emulator (shared by the session and the thread drawing it, freed
/// by whichever lets go last). Memory freed after a hand-back stays resident until the next
/// one, so handing back as the first part goes kept the rest (8 terminals that printed
/// 3 MB each left 9 to 55 MiB, varying with the order the parts went in).
const RETURN_QUIET: Duration = Duration::from_millis(100);
const RETURN_LATEST: Duration = Duration::from_secs(1);

/// Count `bytes` of heap just freed (an ended session's buffers), and hand the allocator's
/// free memory back to the OS once more than `RETURN_AFTER` of it was counted (`return_soon`).
/// glibc keeps what was freed below the top of its heap, so without this the server would
/// stay at its peak long after its sessions are gone; handing it back after every session
/// instead made the next one fault the same pages in again, and the unmapping interrupts
/// every other CPU to flush its TLB.
pub fn freed(bytes: usize) {
    let before = UNRETURNED.fetch_add(bytes, Ordering::Relaxed);
    if before + bytes >= RETURN_AFTER {
        UNRETURNED.store(0, Ordering::Relaxed);
        return_soon();
    }
}

/// Hand the allocator's free memory back to the OS once frees pause (`RETURN_QUIET`), on a
/// thread of its own; at once where that thread cannot be started.
pub fn return_soon() {
    static RETURNER: OnceLock<Option<Sender<()>>> = OnceLock::new();
    let returner = RETURNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("heap-return".into())
            .stack_size(RETURNER_STACK)
            .spawn(move || return_when_quiet(&rx))
            .ok()
            .map(|_| tx)
    });
    if returner.as_ref().is_none_or(|tx| tx.send(()).is_err()) {
        return_now();
    }
}

/// Stack of the thread that hands memory back: it calls only the allocator.
const RETURNER_STACK: usize = 64 << 10;

/// For each request: wait until none came for `RETURN_QUIET` (at most `RETURN_LATEST`),
/// then hand memory back.
fn return_when_quiet(requests: &Receiver<()>) {
    while requests.recv().is_ok() {
        let latest = Instant::now() + RETURN_LATEST;
        loop {
            let quiet = RETURN_QUIET.min(latest.saturating_duration_since(Instant::now()));
            match requests.recv_timeout(quiet) {
                Ok(()) if Instant::now() < latest => {}
                Ok(()) | Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        return_now();
    }
}

/// Hand the allocator's free memory back to the OS now.
fn return_now() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}
