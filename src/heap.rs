//! How the allocator keeps memory between answers.
//!
//! A page of output is answered with a few buffers of a few hundred KiB, freed as soon as
//! the answer is written. glibc's defaults hand such blocks back to the system on free
//! (an `mmap` per block at first, then trimming the top of the heap once more than twice
//! the last freed block is free), so each answer faulted its pages in again: about a tenth
//! of the server's time on a run of page reads went to page faults and zeroing. Blocks up
//! to `MMAP_THRESHOLD` now come from the heap, and the heap keeps up to `TRIM_THRESHOLD`
//! free at its top: room for the largest answer's buffers several times over.

/// Blocks at least this large are mapped on their own and returned on free: a session's
/// retained output grows into these, so an ended session's memory goes back.
const MMAP_THRESHOLD: libc::c_int = 1 << 20;
/// Free memory kept at the top of the heap before it is returned.
const TRIM_THRESHOLD: libc::c_int = 8 << 20;

/// Set the thresholds above, before any thread starts. Elsewhere than glibc, nothing.
pub fn keep_answer_buffers() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes parameters the allocator reads under its own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}
