//! How the allocator keeps memory between answers.
//!
//! A page of output is answered with a few buffers of a few hundred KiB, freed as soon as
//! the answer is written. glibc's defaults hand such blocks back to the system on free
//! (an `mmap` per block at first, then trimming the top of the heap once more than twice
//! the last freed block is free), so each answer faulted its pages in again: about a tenth
//! of the server's time on a run of page reads went to page faults and zeroing. Blocks up
//! to `MMAP_THRESHOLD` now come from the heap, and the heap keeps up to `TRIM_THRESHOLD`
//! free at its top: room for the largest answer's buffers several times over.

use std::sync::atomic::{AtomicUsize, Ordering};

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

/// Count `bytes` of heap just freed (an ended session's buffers), and hand the allocator's
/// free memory back to the OS once more than `RETURN_AFTER` of it was counted. glibc keeps
/// what was freed below the top of its heap, so without this the server would stay at its
/// peak long after its sessions are gone; handing it back after every session instead made
/// the next one fault the same pages in again, and the unmapping interrupts every other CPU
/// to flush its TLB.
pub fn freed(bytes: usize) {
    let before = UNRETURNED.fetch_add(bytes, Ordering::Relaxed);
    if before + bytes >= RETURN_AFTER {
        UNRETURNED.store(0, Ordering::Relaxed);
        return_now();
    }
}

/// Hand the allocator's free memory back to the OS now.
pub fn return_now() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}
