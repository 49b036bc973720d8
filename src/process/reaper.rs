//! The one place that waits for children, and the thread that spawns them.
//!
//! The server is a child subreaper, so descendants orphaned when a session's leader dies are
//! re-parented to it. On SIGCHLD the reaper looks at each ended child without reaping it
//! (`waitid` with `WNOWAIT`): a session leader's status goes to whoever registered for it,
//! and the leader stays a zombie — its PID, and so its process group and POSIX session IDs,
//! cannot be reused — until the `Zombie` handed over with it is dropped, after its group
//! was killed. Orphans are reaped at once so none lingers.
//!
//! Spawns run on spawner threads of their own, never on the async thread: a start opens
//! its child's cwd and waits for the child's exec, each of which, like the child's
//! `fchdir`, may block (a hung filesystem), and `PR_SET_PDEATHSIG` follows the thread that
//! started the child, so spawner threads live as long as the server. One spawner runs while
//! spawns finish promptly; another starts (up to `SPAWNERS_MAX`) when every spawner is
//! busy, so a spawn stuck in the kernel does not hold the next one up. A start that has not
//! returned after `SPAWN_DEADLINE` fails: the child it started (which reports its PID
//! before anything in it can block) is killed, which frees its spawner; a spawner stuck
//! opening the cwd, which nothing frees, is written off and another may take its place.
//! A spawn itself reaps a child whose exec failed (`Launch::start`, as `Command::spawn` and
//! `posix_spawn` do), so while any spawn runs the reaper looks only at registered leaders;
//! each spawner sweeps again afterwards.
//! No lock is held across a spawn that async code waits on.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicIsize, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak, mpsc};

use nix::errno::Errno;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;

use super::guardian::LazyGuardian;
use crate::limits::{SPAWN_DEADLINE, SPAWNERS_MAX, SPAWNERS_WRITTEN_OFF_MAX};

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(nix::sys::signal::Signal),
}

/// An ended session leader kept unreaped; dropping it reaps it.
pub struct Zombie {
    pid: i32,
    reaper: Weak<Reaper>,
}

impl Drop for Zombie {
    fn drop(&mut self) {
        if let Some(reaper) = self.reaper.upgrade() {
            reaper.release(self.pid);
        }
    }
}

/// Why a start did not return a child.
#[derive(Debug)]
pub enum Failed<E> {
    /// What its preparation or its spawn said.
    Said(E),
    /// Not done within `SPAWN_DEADLINE`: still preparing, or else waiting for a spawner or
    /// spawning.
    TimedOut { preparing: bool },
    /// The spawner threads are gone.
    Gone,
}

/// Where a start's job is: waiting for a spawner, preparing, spawning; or preparing on a
/// spawner written off (`Preparing`).
const QUEUED: u8 = 0;
const PREPARING: u8 = 1;
const SPAWNING: u8 = 2;
const WRITTEN_OFF: u8 = 3;

/// Where a leader's end is delivered.
pub type ExitReceiver = oneshot::Receiver<(Exit, Zombie)>;

/// A spawner's job. What it returns is its answer to the start, sent once the spawner
/// counts as free again.
type Job = Box<dyn FnOnce() -> Option<Answer> + Send>;
type Answer = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Table {
    /// Leaders whose end is awaited.
    waiting: HashMap<i32, oneshot::Sender<(Exit, Zombie)>>,
    /// Leaders whose end was delivered and that are not reaped yet.
    held: HashSet<i32>,
}

pub struct Reaper {
    table: Mutex<Table>,
    /// Read-held by each spawner through a spawn; the reaper only tries to write-lock it.
    spawning: RwLock<()>,
    jobs: Mutex<mpsc::Sender<Job>>,
    /// Where spawners take jobs from, one spawner waiting at a time.
    queue: Arc<Mutex<mpsc::Receiver<Job>>>,
    spawners: AtomicUsize,
    /// Spawners free for a job, less the jobs queued for them. A job is counted when it
    /// is sent, not when a spawner wakes for it: two jobs sent before a spawner wakes must
    /// not both count on that one spawner.
    free: Arc<AtomicIsize>,
    /// Where the child of each spawn still running reports its PID, by spawn.
    in_flight: Mutex<HashMap<u64, Arc<OwnedFd>>>,
    spawn_ids: AtomicU64,
    /// Spawners written off, stuck preparing a start (`Preparing`).
    written_off: AtomicUsize,
    /// Started before each spawn, when set (`guard_spawns`).
    guardian: OnceLock<Arc<LazyGuardian>>,
    me: Weak<Reaper>,
}

impl Reaper {
    /// Become a subreaper, start the spawner thread, and collect exits on SIGCHLD.
    pub fn start() -> std::io::Result<Arc<Reaper>> {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag and no pointers.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if rc != 0 {
            tracing::warn!(
                "cannot become a child subreaper; orphaned descendants are reaped by init"
            );
        }
        let mut sigchld = signal(SignalKind::child())?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let reaper = Arc::new_cyclic(|me| Reaper {
            table: Mutex::default(),
            spawning: RwLock::new(()),
            jobs: Mutex::new(jobs),
            queue: Arc::new(Mutex::new(queue)),
            spawners: AtomicUsize::new(0),
            free: Arc::new(AtomicIsize::new(0)),
            in_flight: Mutex::default(),
            spawn_ids: AtomicU64::new(0),
            written_off: AtomicUsize::new(0),
            guardian: OnceLock::new(),
            me: me.clone(),
        });
        reaper.start_spawner()?;
        let weak = Arc::downgrade(&reaper);
        tokio::spawn(async move {
            while sigchld.recv().await.is_some() {
                match weak.upgrade() {
                    Some(reaper) => reaper.reap_all(),
                    None => return,
                }
            }
        });
        Ok(reaper)
    }

    /// Have `guardian` running before every spawn from now on: nothing of a session may
    /// run unguarded.
    pub fn guard_spawns(&self, guardian: Arc<LazyGuardian>) {
        let _ = self.guardian.set(guardian);
    }

    /// One more spawner thread. It never ends while the server runs (see the module doc).
    fn start_spawner(&self) -> std::io::Result<()> {
        let (queue, free) = (self.queue.clone(), self.free.clone());
        self.spawners.fetch_add(1, Ordering::SeqCst);
        free.fetch_add(1, Ordering::SeqCst);
        let started = std::thread::Builder::new()
            .name("spawner".into())
            .spawn(move || {
                // It may stick in the kernel, opening a cwd on a file system that does not
                // answer, with the SIGCHLD of a child it started due.
                super::leave_signals_to_main();
                loop {
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok(job) = job else { return };
                    let answer = job();
                    // Free before the start hears back: the next start, sent as soon as
                    // this one returns, must find this spawner free, not start another.
                    free.fetch_add(1, Ordering::SeqCst);
                    if let Some(answer) = answer {
                        answer();
                    }
                }
            });
        if started.is_err() {
            self.spawners.fetch_sub(1, Ordering::SeqCst);
            self.free.fetch_sub(1, Ordering::SeqCst);
        }
        started.map(drop)
    }

    /// `spawn_prepared` with nothing to prepare, its failures as I/O errors.
    #[cfg(test)]
    pub async fn spawn_registered<T: Send + 'static>(
        &self,
        spawn: impl FnOnce() -> std::io::Result<(T, i32)> + Send + 'static,
        forked: OwnedFd,
    ) -> std::io::Result<(T, i32, ExitReceiver)> {
        let spawned = self.spawn_prepared(|| Ok(()), |()| spawn(), forked).await;
        spawned.map_err(|failed| match failed {
            Failed::Said(e) => e,
            Failed::TimedOut { .. } => std::io::ErrorKind::TimedOut.into(),
            Failed::Gone => std::io::Error::other("the spawner thread is gone"),
        })
    }

    /// Run `prepare` and then `spawn` on a spawner thread, and register the PID `spawn`
    /// returns, so its end reaches the returned receiver however soon it comes. `prepare`
    /// may block on a file system (opening the child's cwd): it runs before the spawn lock
    /// is taken, so the reaper goes on reaping meanwhile. `forked` is where the started
    /// child writes its PID: a start not done after `SPAWN_DEADLINE` fails with `TimedOut`,
    /// and a child it started is killed. A start given up (at its deadline, or cancelled)
    /// while its spawner is stuck in `prepare`, which nothing can free, writes that spawner
    /// off so another may start (`Preparing`).
    pub async fn spawn_prepared<P, T, E>(
        &self,
        prepare: impl FnOnce() -> Result<P, E> + Send + 'static,
        spawn: impl FnOnce(P) -> Result<(T, i32), E> + Send + 'static,
        forked: OwnedFd,
    ) -> Result<(T, i32, ExitReceiver), Failed<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
    {
        let (done, result) = oneshot::channel();
        let phase = Arc::new(AtomicU8::new(QUEUED));
        let me = self.me.clone();
        let job: Job = Box::new({
            let phase = phase.clone();
            move || -> Option<Answer> {
                let reaper = me.upgrade()?;
                if done.is_closed() {
                    // The start gave up while this waited: it starts nothing.
                    return None;
                }
                phase.store(PREPARING, Ordering::SeqCst);
                let ready = prepare();
                if phase.swap(SPAWNING, Ordering::SeqCst) == WRITTEN_OFF {
                    // Back after all: it counts again.
                    reaper.spawners.fetch_add(1, Ordering::SeqCst);
                    reaper.written_off.fetch_sub(1, Ordering::SeqCst);
                }
                let ready = match ready {
                    Ok(ready) if !done.is_closed() => ready,
                    Ok(_) => return None,
                    Err(e) => {
                        return Some(Box::new(move || {
                            let _ = done.send(Err(e));
                        }));
                    }
                };
                let spawned = {
                    let _spawning = reaper.spawning.read().unwrap_or_else(|e| e.into_inner());
                    // Under the spawn lock too: `posix_spawn` reaps a guardian whose exec
                    // failed, as `Launch::start` does a session's child.
                    if let Some(guardian) = reaper.guardian.get() {
                        guardian.ensure();
                    }
                    spawn(ready).map(|(value, pid)| {
                        let (tx, rx) = oneshot::channel();
                        reaper.table().waiting.insert(pid, tx);
                        (value, pid, rx)
                    })
                };
                if let (true, Ok((_, pid, _))) = (done.is_closed(), &spawned) {
                    // The start gave up during the spawn (its deadline, a cancelled
                    // request): what it started must not run on without a session.
                    super::signal_group(*pid, nix::sys::signal::Signal::SIGKILL);
                }
                // Exits that arrived during the spawn.
                reaper.reap_all();
                // A start that gave up drops this answer, and with it the receiver: the
                // child's end, when it comes, reaps it.
                Some(Box::new(move || {
                    let _ = done.send(spawned);
                }))
            }
        });
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(job)
            .map_err(|_| Failed::Gone)?;
        let was_free = self.free.fetch_sub(1, Ordering::SeqCst) > 0;
        if !was_free && self.spawners.load(Ordering::SeqCst) < SPAWNERS_MAX {
            // Every spawner is busy (one may be stuck): this job must not wait behind it.
            if let Err(e) = self.start_spawner() {
                tracing::warn!("cannot start another spawner thread: {e}");
            }
        }
        let forked = Arc::new(forked);
        let in_flight = InFlight::new(self, forked.clone());
        // Given up at its deadline or cancelled, a start whose spawner is still preparing
        // writes that spawner off.
        let _preparing = Preparing {
            reaper: self,
            phase: phase.clone(),
        };
        let answer = tokio::time::timeout(SPAWN_DEADLINE, result).await;
        drop(in_flight);
        match answer {
            Ok(Ok(answer)) => answer.map_err(Failed::Said),
            Ok(Err(_)) => Err(Failed::Gone),
            Err(_) => {
                let preparing = phase.load(Ordering::SeqCst) == PREPARING;
                if !preparing {
                    kill_forked(&forked);
                }
                Err(Failed::TimedOut { preparing })
            }
        }
    }

    /// At shutdown: kill the children of spawns still running (stuck on a file system that
    /// does not answer), so none outlives the server or holds its exit up.
    pub fn abandon_spawns(&self) {
        for forked in self.in_flight().values() {
            kill_forked(forked);
        }
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<OwnedFd>>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Collect every ended child: deliver and hold registered leaders, reap orphans.
    fn reap_all(&self) {
        let Ok(_no_spawn) = self.spawning.try_write() else {
            // A spawn is running (the spawner sweeps after it); leaders can be looked
            // at one by one meanwhile.
            let pids: Vec<i32> = self.table().waiting.keys().copied().collect();
            for pid in pids {
                if let Some(exit) = peek(Some(pid)) {
                    self.deliver(exit);
                }
            }
            return;
        };
        loop {
            let Some((pid, exit)) = peek(None) else {
                return;
            };
            let table = self.table();
            if table.held.contains(&pid) {
                // The first ended child is a held leader: the rest waits for its release.
                return;
            }
            if table.waiting.contains_key(&pid) {
                drop(table);
                self.deliver((pid, exit));
                continue;
            }
            drop(table);
            reap(pid);
        }
    }

    /// Hand a registered leader's end over and hold it.
    fn deliver(&self, (pid, exit): (i32, Exit)) {
        let mut table = self.table();
        let Some(tx) = table.waiting.remove(&pid) else {
            return;
        };
        table.held.insert(pid);
        drop(table);
        let zombie = Zombie {
            pid,
            reaper: self.me.clone(),
        };
        // A receiver that is gone drops the zombie, which reaps it.
        let _ = tx.send((exit, zombie));
    }

    /// Reap a held leader, then whatever waited behind it.
    fn release(&self, pid: i32) {
        if self.table().held.remove(&pid) {
            reap(pid);
        }
        self.reap_all();
    }
}

/// A start's watch on its spawner while it prepares. A spawner stuck there (in the kernel,
/// on a file system that does not answer) when the start gives up no longer counts, so
/// that another may start in its place; should it come back, it counts again. At most
/// `SPAWNERS_WRITTEN_OFF_MAX` are written off at once: past that, a stuck spawner holds its
/// place, as one stuck in an unkillable child's exec does.
struct Preparing<'a> {
    reaper: &'a Reaper,
    phase: Arc<AtomicU8>,
}

impl Drop for Preparing<'_> {
    fn drop(&mut self) {
        let reaper = self.reaper;
        if self.phase.load(Ordering::SeqCst) != PREPARING {
            return;
        }
        let room = reaper
            .written_off
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < SPAWNERS_WRITTEN_OFF_MAX).then_some(n + 1)
            });
        if room.is_err() {
            return;
        }
        let phase = &self.phase;
        if phase
            .compare_exchange(PREPARING, WRITTEN_OFF, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            reaper.spawners.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(
                "a start gave up while its spawner thread was stuck preparing it; that thread is written off"
            );
        } else {
            // Done preparing meanwhile.
            reaper.written_off.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A spawn's place in `Reaper::in_flight`, left when the start is answered or dropped.
struct InFlight<'a> {
    reaper: &'a Reaper,
    id: u64,
}

impl<'a> InFlight<'a> {
    fn new(reaper: &'a Reaper, forked: Arc<OwnedFd>) -> Self {
        let id = reaper.spawn_ids.fetch_add(1, Ordering::SeqCst);
        reaper.in_flight().insert(id, forked);
        InFlight { reaper, id }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.reaper.in_flight().remove(&self.id);
    }
}

/// Kill the child a stuck spawn started, if it reported its PID, which frees the spawner
/// blocked on it. Its spawn has not returned, so the child is not reaped and the PID is
/// still its own.
fn kill_forked(forked: &OwnedFd) {
    let mut pid: libc::pid_t = 0;
    let size = std::mem::size_of::<libc::pid_t>();
    // SAFETY: reads at most `size` bytes into `pid`, which outlives the call.
    let read = unsafe { libc::read(forked.as_raw_fd(), (&raw mut pid).cast(), size) };
    if read == size as isize && pid > 0 {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        tracing::warn!(
            pid,
            "a spawn did not return within its deadline; its child was killed"
        );
    }
}

/// An ended child (`pid`, or any), left waitable.
fn peek(pid: Option<i32>) -> Option<(i32, Exit)> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        let id = pid.map_or(Id::All, |pid| Id::Pid(Pid::from_raw(pid)));
        return match waitid(id, flags) {
            Ok(WaitStatus::Exited(pid, code)) => Some((pid.as_raw(), Exit::Code(code))),
            Ok(WaitStatus::Signaled(pid, signal, _)) => Some((pid.as_raw(), Exit::Signal(signal))),
            Ok(_) | Err(Errno::ECHILD) => None,
            Err(Errno::EINTR) => continue,
            Err(e) => {
                tracing::warn!("waitid failed: {e}");
                None
            }
        };
    }
}

fn reap(pid: i32) {
    while let Err(Errno::EINTR) = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {}
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn state(pid: i32) -> Option<String> {
        super::super::procfs::stat(pid).map(|s| s.state.to_string())
    }

    use crate::process::alone;

    #[test]
    fn a_leader_stays_a_zombie_until_released() {
        alone("process::reaper::tests::leader_zombie");
    }

    #[test]
    #[ignore = "run alone by a_leader_stays_a_zombie_until_released"]
    // The spawner's lock is held across an await on purpose: it stands for a hung spawn.
    #[allow(clippy::await_holding_lock)]
    fn leader_zombie() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let reaper = Reaper::start().unwrap();
            let spawned = reaper.spawn_registered(
                || {
                    let thread = std::thread::current();
                    assert_eq!(thread.name(), Some("spawner"), "not on the async thread");
                    let child = std::process::Command::new("/bin/sh")
                        .args(["-c", "exit 3"])
                        .spawn()?;
                    Ok(((), child.id() as i32))
                },
                nix::unistd::pipe().unwrap().0,
            );
            let ((), pid, exit) = spawned.await.unwrap();
            let ended = tokio::time::timeout(Duration::from_secs(60), exit);
            let (status, zombie) = ended.await.unwrap().unwrap();
            assert_eq!(status, Exit::Code(3));
            assert_eq!(
                state(pid).as_deref(),
                Some("Z"),
                "delivered but kept unreaped"
            );
            drop(zombie);
            assert_eq!(state(pid), None, "reaped once released");

            // While a spawn hangs (here: the lock a spawn holds is taken), a leader's end is
            // still delivered.
            let spawned = reaper.spawn_registered(
                || {
                    let child = std::process::Command::new("/bin/sh")
                        .args(["-c", "read line"])
                        .stdin(std::process::Stdio::piped())
                        .spawn()?;
                    let pid = child.id() as i32;
                    Ok((child, pid))
                },
                nix::unistd::pipe().unwrap().0,
            );
            let (mut child, _, exit) = spawned.await.unwrap();
            let hung = reaper.spawning.read().unwrap();
            drop(child.stdin.take());
            let ended = tokio::time::timeout(Duration::from_secs(60), exit);
            let (status, _zombie) = ended.await.expect("delivered during a spawn").unwrap();
            assert_eq!(status, Exit::Code(1));
            drop(hung);
        });
    }

    /// Poll `future` once: whether it is still pending.
    async fn pending<F: Future>(mut future: std::pin::Pin<&mut F>) -> bool {
        std::future::poll_fn(|cx| std::task::Poll::Ready(future.as_mut().poll(cx).is_pending()))
            .await
    }

    type Spawn = Box<dyn FnOnce() -> std::io::Result<((), i32)> + Send>;

    /// A spawn of `argv` whose child blocks in the kernel before its exec, as on a hung file
    /// system: open(2) of a FIFO for reading waits for a writer, which comes only from
    /// `unblock`. The child is in a POSIX session of its own, as every session's leader, and
    /// reports its PID to the test (as well as on `forked`) before it blocks.
    struct Blocked {
        _dir: tempfile::TempDir,
        fifo: std::path::PathBuf,
        report: tokio::net::unix::pipe::Receiver,
    }

    impl Blocked {
        /// The test's side, the spawn, and where its child reports its PID to the reaper.
        fn new(argv: &[&str]) -> (Blocked, Spawn, OwnedFd) {
            use std::os::unix::ffi::OsStrExt;

            use nix::fcntl::OFlag;
            use nix::sys::stat::Mode;

            let dir = tempfile::tempdir().unwrap();
            let fifo = dir.path().join("fifo");
            nix::unistd::mkfifo(&fifo, Mode::S_IRWXU).unwrap();
            let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
            let cwd = nix::fcntl::open("/", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty());
            let null = || {
                let flags = OFlag::O_RDWR | OFlag::O_CLOEXEC;
                nix::fcntl::open("/dev/null", flags, Mode::empty()).unwrap()
            };
            let stdio = super::super::launch::Stdio {
                std: [null(), null(), null()],
                marks: None,
                terminal: false,
            };
            let (forked, report) = super::super::launch::report_pipe().unwrap();
            let mut launch =
                super::super::launch::Launch::new(&argv, &[], cwd.unwrap(), stdio, report).unwrap();
            let (report, to_test) =
                nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).unwrap();
            let path = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
            launch.hang = Some((to_test, path));
            let spawn: Spawn = Box::new(move || Ok(((), launch.start()?)));
            let report = tokio::net::unix::pipe::Receiver::from_owned_fd(report).unwrap();
            (
                Blocked {
                    _dir: dir,
                    fifo,
                    report,
                },
                spawn,
                forked,
            )
        }

        /// The child, once it was forked: a pidfd, readable once it has ended. Opened while
        /// the child is blocked (nobody has reaped it), so it is that very process.
        async fn child(&mut self) -> tokio::io::unix::AsyncFd<OwnedFd> {
            use std::os::fd::FromRawFd;

            use tokio::io::AsyncReadExt;

            let mut pid = [0u8; std::mem::size_of::<libc::pid_t>()];
            let reported = tokio::time::timeout(HANG_GUARD, self.report.read_exact(&mut pid));
            reported.await.expect("the child was forked").unwrap();
            let pid = libc::pid_t::from_ne_bytes(pid);
            // SAFETY: pidfd_open takes a PID and flags and returns a new descriptor or -1.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
            // SAFETY: the descriptor was just returned to this thread and is owned by nothing else.
            let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            let interest = tokio::io::Interest::READABLE;
            // SAFETY: the AsyncFd owns the pidfd, which stays open for its whole lifetime.
            unsafe { tokio::io::unix::AsyncFd::register_with_interest(pidfd, interest) }.unwrap()
        }

        /// Let the child's open return: a writer comes.
        fn unblock(&self) {
            use nix::fcntl::OFlag;
            use nix::sys::stat::Mode;

            let writer = nix::fcntl::open(
                &self.fifo,
                OFlag::O_WRONLY | OFlag::O_CLOEXEC,
                Mode::empty(),
            );
            drop(writer.unwrap());
        }
    }

    /// Wait until the process of `pidfd` has ended.
    async fn ended(pidfd: &tokio::io::unix::AsyncFd<OwnedFd>) {
        let readable = tokio::time::timeout(HANG_GUARD, pidfd.readable());
        drop(readable.await.expect("the child ended").unwrap());
    }

    /// Start `/bin/sh -c "exit CODE"` while other spawns are stuck: it must be spawned
    /// within `bound` (held up behind a stuck spawner, it would fail at its deadline), and
    /// its end delivered.
    async fn served_beside(reaper: &Reaper, code: i32, bound: Duration) {
        let spawned = reaper.spawn_registered(
            move || {
                let child = std::process::Command::new("/bin/sh")
                    .args(["-c", &format!("exit {code}")])
                    .spawn()?;
                Ok(((), child.id() as i32))
            },
            nix::unistd::pipe().unwrap().0,
        );
        let ((), _, exit) = tokio::time::timeout(bound, spawned)
            .await
            .expect("not held up")
            .expect("spawned beside the stuck spawns");
        let ended_with = tokio::time::timeout(HANG_GUARD, exit);
        let (status, _zombie) = ended_with.await.expect("delivered").unwrap();
        assert_eq!(status, Exit::Code(code));
    }

    /// How long an awaited event may take before the test fails rather than hangs: far
    /// beyond anything a loaded machine takes, since only a broken reaper misses it.
    const HANG_GUARD: Duration = Duration::from_secs(60);

    #[test]
    fn starts_one_after_another_need_one_spawner() {
        alone("process::reaper::tests::one_after_another");
    }

    /// A start sent as soon as the one before it returned finds that one's spawner free:
    /// starts one after another never add spawner threads, however the spawner is
    /// scheduled after it answers.
    #[test]
    #[ignore = "run alone by starts_one_after_another_need_one_spawner"]
    fn one_after_another() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let reaper = Reaper::start().unwrap();
            for round in 0..300 {
                let spawned = reaper.spawn_registered(
                    || {
                        let child = std::process::Command::new("/bin/true").spawn()?;
                        Ok(((), child.id() as i32))
                    },
                    nix::unistd::pipe().unwrap().0,
                );
                let ((), _, exit) = spawned.await.unwrap();
                assert_eq!(
                    (
                        reaper.free.load(Ordering::SeqCst),
                        reaper.spawners.load(Ordering::SeqCst)
                    ),
                    (1, 1),
                    "after start {round}"
                );
                let ended = tokio::time::timeout(HANG_GUARD, exit).await.unwrap();
                drop(ended.unwrap());
            }
        });
    }

    #[test]
    fn a_stuck_spawn_holds_nothing_up() {
        alone("process::reaper::tests::stuck_spawn");
    }

    #[test]
    #[ignore = "run alone by a_stuck_spawn_holds_nothing_up"]
    fn stuck_spawn() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let reaper = Reaper::start().unwrap();
            let (mut blocked, spawn, forked) = Blocked::new(&["/bin/true"]);
            // Polled once and then left alone, so its deadline never acts (a timeout acts when
            // polled): its spawner stays stuck until the FIFO gets a writer, and the next
            // spawn is served by another spawner or not at all (jobs are taken in order).
            let mut stuck = Box::pin(reaper.spawn_registered(spawn, forked));
            assert!(pending(stuck.as_mut()).await);
            let child = blocked.child().await;

            // Meanwhile another spawn runs, and its leader's end is delivered.
            served_beside(&reaper, 4, HANG_GUARD).await;

            // Then the stuck start is given up and its spawn let go: its child ends too.
            drop(stuck);
            blocked.unblock();
            ended(&child).await;
        });
    }

    #[test]
    fn a_spawn_past_its_deadline_fails_and_its_child_is_killed() {
        alone("process::reaper::tests::past_deadline");
    }

    #[test]
    #[ignore = "run alone by a_spawn_past_its_deadline_fails_and_its_child_is_killed"]
    fn past_deadline() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let reaper = Reaper::start().unwrap();
            let (mut blocked, spawn, forked) = Blocked::new(&["/bin/true"]);
            let mut stuck = std::pin::pin!(reaper.spawn_registered(spawn, forked));
            assert!(pending(stuck.as_mut()).await);
            let child = blocked.child().await;
            // Nothing unblocks the child: only its deadline ends the start.
            let failed = stuck.await.map(drop).unwrap_err();
            assert_eq!(failed.kind(), std::io::ErrorKind::TimedOut);
            // Killed by the reaper: nothing else can end it while the FIFO has no writer.
            ended(&child).await;
        });
    }

    #[test]
    fn a_start_given_up_leaves_nothing_running() {
        alone("process::reaper::tests::given_up");
    }

    #[test]
    #[ignore = "run alone by a_start_given_up_leaves_nothing_running"]
    fn given_up() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let reaper = Reaper::start().unwrap();
            let (mut blocked, spawn, forked) = Blocked::new(&["/bin/sleep", "1000"]);
            // The start is given up (a cancelled request) while its spawn is blocked...
            let mut start = Box::pin(reaper.spawn_registered(spawn, forked));
            assert!(pending(start.as_mut()).await);
            let child = blocked.child().await;
            drop(start);
            // ...then the spawn goes on and the program starts. Nobody waits for it: it is
            // killed, not left running without a session.
            blocked.unblock();
            ended(&child).await;
        });
    }

    #[test]
    fn spawners_stuck_preparing_are_replaced() {
        alone("process::reaper::tests::stuck_preparing");
    }

    #[test]
    #[ignore = "run alone by spawners_stuck_preparing_are_replaced"]
    fn stuck_preparing() {
        use crate::limits::SPAWNERS_MAX;

        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let reaper = Reaper::start().unwrap();
            // A gate closed until the end: preparations stuck in the kernel for good, as an
            // open of a cwd on a file system that does not answer. Each says when it began.
            let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
            let (began, beginnings) = std::sync::mpsc::channel();
            let stuck = || {
                let (gate, began) = (gate.clone(), began.clone());
                let wait = move || {
                    let _ = began.send(());
                    let (open, opened) = &*gate;
                    let mut open = open.lock().unwrap();
                    while !*open {
                        open = opened.wait(open).unwrap();
                    }
                    Ok::<_, std::io::Error>(())
                };
                let spawn = |()| -> std::io::Result<((), i32)> {
                    unreachable!("its start gives up before it is prepared")
                };
                Box::pin(reaper.spawn_prepared(wait, spawn, nix::unistd::pipe().unwrap().0))
            };
            // Held up behind the stuck spawners, a start would wait for its deadline.
            let served = || served_beside(&reaper, 5, SPAWN_DEADLINE / 2);

            // As many stuck as there may be spawners, each start then given up (cancelled).
            let mut starts: Vec<_> = (0..SPAWNERS_MAX).map(|_| stuck()).collect();
            for start in &mut starts {
                assert!(pending(start.as_mut()).await);
            }
            let beginnings = tokio::task::spawn_blocking(move || {
                for _ in 0..SPAWNERS_MAX {
                    beginnings.recv().unwrap();
                }
                beginnings
            });
            let beginnings = tokio::time::timeout(HANG_GUARD, beginnings)
                .await
                .unwrap()
                .unwrap();
            drop(starts);
            served().await;

            // One more, awaited to its deadline: it fails as stuck preparing.
            let failed = stuck().await.map(drop).unwrap_err();
            assert!(
                matches!(failed, Failed::TimedOut { preparing: true }),
                "{failed:?}"
            );
            beginnings.recv().unwrap();
            served().await;

            let (open, opened) = &*gate;
            *open.lock().unwrap() = true;
            opened.notify_all();
        });
    }
}
