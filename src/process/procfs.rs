//! What `/proc` says of a process, read without stopping it: the one place its files are
//! parsed.

use std::fs;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// The fields of `/proc/PID/stat` the server uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R` running, `S` sleeping, `D` waiting on I/O, `T` stopped, `Z` zombie, ...
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    /// Its threads; 0 where the field cannot be read.
    pub threads: u32,
    /// When it started, in clock ticks since boot; 0 where the field cannot be read.
    pub started: u64,
}

/// `/proc/PID/cmdline` of `pid`: its arguments, NUL-separated; `None` if it cannot be read.
pub fn cmdline(pid: i32) -> Option<Vec<u8>> {
    fs::read(format!("/proc/{pid}/cmdline")).ok()
}

/// `/proc/PID/stat` of `pid`; `None` if it does not exist (or cannot be read).
pub fn stat(pid: i32) -> Option<Stat> {
    parse_stat(&read_text(&format!("/proc/{pid}/stat"))?)
}

/// A `/proc` file's text, what is not UTF-8 in it (a command name may be anything) replaced.
fn read_text(path: &str) -> Option<String> {
    let bytes = fs::read(path).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn parse_stat(text: &str) -> Option<Stat> {
    // The command name is in parentheses and may hold anything, spaces and `)` included:
    // the fields begin after its last `)`.
    let (_, fields) = text.rsplit_once(')')?;
    let mut fields = fields.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let mut int = || fields.next()?.parse::<i32>().ok();
    let (ppid, pgrp, session) = (int()?, int()?, int()?);
    // tty_nr, tpgid, flags, four fault counts, four times, priority and nice come between.
    let threads = fields.nth(13).and_then(|n| n.parse().ok()).unwrap_or(0);
    // itrealvalue comes between.
    let started = fields.nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
    Some(Stat {
        state,
        ppid,
        pgrp,
        session,
        threads,
        started,
    })
}

/// The threads of `pid` (`/proc/PID/task`), at most `limit`; `None` if they cannot be listed.
pub fn task_ids(pid: i32, limit: usize) -> Option<Vec<i32>> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let ids = tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse().ok());
    Some(ids.take(limit).collect())
}

/// `/proc/PID/task/TID/stat` of thread `tid` of `pid`; `None` if it is gone.
pub fn task_stat(pid: i32, tid: i32) -> Option<Stat> {
    parse_stat(&read_text(&format!("/proc/{pid}/task/{tid}/stat"))?)
}

/// The command name in a `stat` text: what is between its first `(` and its last `)`, as
/// the process set it (`/proc/PID/comm` shows the same name, with `\n` and `\\` escaped).
fn parse_name(text: &str) -> Option<String> {
    let (_, rest) = text.split_once('(')?;
    let (name, _) = rest.rsplit_once(')')?;
    Some(name.to_owned())
}

/// The command name of `pid`.
pub fn name(pid: i32) -> Option<String> {
    parse_name(&read_text(&format!("/proc/{pid}/stat"))?)
}

/// What one read of a held file takes in: more than a `stat` or `syscall` file ever holds.
/// A read that fills all but `WHOLE_MARGIN` of it may have been cut short (a `children`
/// file gives a page a read), and the file is read again whole by its path.
const HELD_READ: usize = 4096;
const WHOLE_MARGIN: usize = 32;

/// The `/proc` files of one process that are read again and again (its `stat`, `syscall`
/// and main thread's `children`), each opened on first use and held until `close`: a held
/// file reads in one system call, where opening a `/proc` file takes several and most of
/// the time. A held file stays its process's: once that process is gone it reads nothing,
/// whatever process takes its ID later. After `close`, nothing is read.
pub struct Held {
    pid: i32,
    files: Mutex<Option<[Option<fs::File>; 3]>>,
}

impl Held {
    /// Nothing is opened yet.
    pub fn new(pid: i32) -> Self {
        Held {
            pid,
            files: Mutex::new(Some(Default::default())),
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Let go of the files.
    pub fn close(&self) {
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(files);
    }

    pub fn stat(&self) -> Option<Stat> {
        parse_stat(&self.read(0, "stat")?)
    }

    pub fn name(&self) -> Option<String> {
        parse_name(&self.read(0, "stat")?)
    }

    /// `/proc/PID/syscall`.
    pub fn syscall(&self) -> Option<String> {
        self.read(1, "syscall")
    }

    /// The children of the process's main thread.
    pub fn children(&self) -> Option<Vec<i32>> {
        let name = format!("task/{}/children", self.pid);
        Some(ids(&self.read(2, &name)?))
    }

    /// The text of file `name` of the process, held in slot `slot`; `None` once closed.
    fn read(&self, slot: usize, name: &str) -> Option<String> {
        let path = format!("/proc/{}/{name}", self.pid);
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let file = &mut files.as_mut()?[slot];
        if file.is_none() {
            *file = Some(fs::File::open(&path).ok()?);
        }
        let mut bytes = [0u8; HELD_READ];
        let n = file.as_ref()?.read_at(&mut bytes, 0).ok()?;
        if n + WHOLE_MARGIN < HELD_READ {
            return Some(String::from_utf8_lossy(&bytes[..n]).into_owned());
        }
        // Read whole by its path, a moment after the held file found the process there.
        let text = read_text(&path);
        drop(files);
        text
    }
}

/// What descriptor `fd` of `pid` is open on, as `/proc/PID/fd/N` names it (a path,
/// `pipe:[INODE]`, `socket:[INODE]`); `None` when it is not open or cannot be read.
pub fn descriptor(pid: i32, fd: u64) -> Option<String> {
    fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .ok()
        .map(|link| link.to_string_lossy().into_owned())
}

/// The file name of the program `pid` runs (`/proc/PID/exe`): `bash`, `dash`.
pub fn program(pid: i32) -> Option<String> {
    let exe = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    Some(exe.file_name()?.to_string_lossy().into_owned())
}

/// Every process ID in `/proc` now.
pub fn pids() -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Every process that may be in the POSIX session led by `leader`, read from `children`
/// files: the leader's descendants, and those of every process this one adopted. A member
/// of a session descends from its leader; one whose parent ended was re-parented to the
/// nearest child subreaper above it, in the leader's tree or else this process, which the
/// kernel makes the parent of such orphans through its first live thread, the main one
/// (`find_alive_thread` walks a thread group from its leader). The children of the other
/// threads (the spawners': the leaders of other sessions, the guardian) are not read,
/// nor anything below them. `None` where that cannot be known (not a subreaper, or a
/// kernel without those files): scan `pids` instead; and `None` as soon as more than
/// `limit` processes are found or more than `4 × limit` `children` files would be read
/// (one per thread: a descendant may have many). A leader whose end was waited for
/// (`ended`) has no children left to read: the kernel re-parents a process's children as
/// it ends, before its end can be waited for.
pub fn session_tree(leader: i32, limit: usize, ended: bool) -> Option<Vec<i32>> {
    let mut flag: libc::c_int = 0;
    // SAFETY: PR_GET_CHILD_SUBREAPER writes one int through the pointer it is given.
    let rc = unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut flag as *mut libc::c_int) };
    if rc != 0 || flag == 0 {
        return None;
    }
    let mut reads = limit.saturating_mul(4);
    let main = std::process::id();
    let mut queue = ids(&fs::read_to_string(format!("/proc/self/task/{main}/children")).ok()?);
    queue.push(leader);
    let mut found = Vec::new();
    let mut seen = std::collections::HashSet::new();
    while let Some(pid) = queue.pop() {
        if seen.insert(pid) {
            if found.len() == limit {
                return None;
            }
            found.push(pid);
            if ended && pid == leader {
                continue;
            }
            match children(&pid.to_string(), &mut reads) {
                Some(more) => queue.extend(more),
                // Out of reads: the listing would not be whole.
                None if reads == 0 => return None,
                // A process that ended meanwhile has no children left to list.
                None => {}
            }
        }
    }
    Some(found)
}

/// The process IDs in a `children` file.
fn ids(text: &str) -> Vec<i32> {
    text.split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .collect()
}

/// The children of every thread of `pid`, one file read from `reads` each; `None` if its
/// threads cannot be listed, the kernel has no `children` files, or `reads` runs out.
pub(super) fn children(pid: &str, reads: &mut usize) -> Option<Vec<i32>> {
    let mut found = Vec::new();
    for task in fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        *reads = reads.checked_sub(1)?;
        let mut path = task.path();
        path.push("children");
        let text = match fs::read(&path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && task_exists(&task) => {
                return None;
            }
            Err(_) => continue,
        };
        found.extend(ids(&text));
    }
    Some(found)
}

/// Whether a thread listed in `/proc/PID/task` still exists (its `children` file may be
/// missing only because it ended).
fn task_exists(task: &fs::DirEntry) -> bool {
    task.path().join("stat").exists()
}

/// The last process ID the system gave out (in this PID namespace); read through a
/// descriptor held open, one `pread` a call.
pub fn last_pid() -> Option<i32> {
    static FILE: std::sync::OnceLock<Option<fs::File>> = std::sync::OnceLock::new();
    let file = FILE
        .get_or_init(|| fs::File::open("/proc/sys/kernel/ns_last_pid").ok())
        .as_ref()?;
    let mut buf = [0u8; 16];
    let n = file.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

/// The moment `ago` before now, in the clock ticks since boot that `Stat::started` counts.
pub fn ticks_since_boot(ago: std::time::Duration) -> Option<u64> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    let at = std::time::Duration::from(now).checked_sub(ago)?;
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    Some((at.as_secs_f64() * per_second as f64) as u64)
}

pub fn session_members(sid: i32) -> Vec<i32> {
    let mut members: Vec<i32> = pids()
        .into_iter()
        .filter(|pid| stat(*pid).is_some_and(|s| s.session == sid))
        .collect();
    members.sort_by_key(|pid| *pid != sid);
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_are_found_through_the_children_files() {
        // A child is listed once its spawn has returned (the exec is done by then).
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .unwrap();
        let mut reads = usize::MAX;
        let mine = children("self", &mut reads).expect("this kernel has children files");
        assert!(mine.contains(&(child.id() as i32)));
        let _ = child.kill();
        let _ = child.wait();
    }

    /// This process becomes a subreaper and takes its children's orphans, so this runs
    /// alone (see `alone`).
    #[test]
    fn a_session_tree_is_its_leader_s_and_what_this_process_adopted() {
        crate::process::alone("process::procfs::tests::session_tree_reads");
    }

    #[test]
    #[ignore = "run alone by a_session_tree_is_its_leader_s_and_what_this_process_adopted"]
    fn session_tree_reads() {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag and no pointers.
        assert_eq!(
            unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) },
            0
        );
        // Started by a thread other than the main one, which lives on, as the server's
        // spawners do (a thread's children pass to another thread when it ends): a leader
        // with a job of its own, and another session's leader beside it.
        let (started, children) = std::sync::mpsc::channel();
        let (finish, finished) = std::sync::mpsc::channel::<()>();
        let spawner = std::thread::spawn(move || {
            let leader = Command::new("/bin/sh")
                .args(["-c", "sleep 1000 & echo $!; exec sleep 1000"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let other = Command::new("sleep")
                .arg("1000")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            started.send((leader, other)).unwrap();
            let _ = finished.recv();
        });
        let (mut leader, mut other) = children.recv().unwrap();
        let mut line = String::new();
        let stdout = leader.stdout.take().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        let job: i32 = line.trim().parse().unwrap();
        let (id, other_id) = (leader.id() as i32, other.id() as i32);

        let tree = session_tree(id, 64, false).expect("a subreaper with children files");
        assert!(tree.contains(&id) && tree.contains(&job), "{tree:?}");
        assert!(!tree.contains(&other_id), "{tree:?}");

        // The leader ends: its job, adopted by this process through its main thread, is
        // still found (the kernel re-parents it before the leader's end can be waited for).
        // Its end waited for but not reaped, as the server holds a leader: the lighter
        // listing (its own children not read) finds the same.
        leader.kill().unwrap();
        let flags = nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT;
        nix::sys::wait::waitid(
            nix::sys::wait::Id::Pid(nix::unistd::Pid::from_raw(id)),
            flags,
        )
        .unwrap();
        assert_eq!(stat(id).unwrap().state, 'Z');
        assert_eq!(stat(job).unwrap().ppid, std::process::id() as i32);
        let mut trees = [false, true].map(|ended| session_tree(id, 64, ended).unwrap());
        trees.iter_mut().for_each(|tree| tree.sort_unstable());
        assert_eq!(trees[0], trees[1]);
        assert!(trees[1].contains(&job), "{trees:?}");
        assert!(!trees[1].contains(&other_id), "{trees:?}");
        // Reaped, it is found the same way.
        leader.wait().unwrap();
        for ended in [false, true] {
            let tree = session_tree(id, 64, ended).unwrap();
            assert!(tree.contains(&job), "{tree:?}");
            assert!(!tree.contains(&other_id), "{tree:?}");
        }
        // More processes than the limit: no listing.
        assert_eq!(session_tree(id, 1, true), None);

        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(job),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(job), None);
        let _ = other.kill();
        let _ = other.wait();
        finish.send(()).unwrap();
        spawner.join().unwrap();
    }

    #[test]
    fn a_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let text = "42 (a) b (c)) S 1 42 42 34816 42 4194560 1 0 0 0 3 1 0 0 20 0 3 0 9 ...";
        let stat = parse_stat(text).unwrap();
        assert_eq!(
            stat,
            Stat {
                state: 'S',
                ppid: 1,
                pgrp: 42,
                session: 42,
                threads: 3,
                started: 9,
            }
        );
        assert_eq!(parse_name(text).as_deref(), Some("a) b (c)"));
        assert_eq!(parse_stat("42 (a) S 1 42 42 ...").unwrap().threads, 0);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_found() {
        let me = std::process::id() as i32;
        let stat = stat(me).unwrap();
        assert_eq!(stat.pgrp, nix::unistd::getpgrp().as_raw());
        assert_eq!(stat.ppid, nix::unistd::getppid().as_raw());
        assert!(stat.threads >= 1);
        let comm = fs::read_to_string("/proc/self/comm").unwrap();
        assert_eq!(name(me).as_deref(), Some(comm.trim_end()));
        assert!(session_members(stat.session).contains(&me));
    }

    /// Held files read what their paths read, and nothing once their process is gone,
    /// whatever takes its ID.
    #[test]
    fn held_files_read_their_own_process() {
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 1000 & read line"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let held = Held::new(pid);
        let job = loop {
            if let Some(&job) = held.children().unwrap().first() {
                break job;
            }
            std::thread::yield_now();
        };
        let mut reads = usize::MAX;
        assert_eq!(children(&pid.to_string(), &mut reads), Some(vec![job]));
        assert_eq!(held.stat().map(|s| s.pgrp), stat(pid).map(|s| s.pgrp));
        assert_eq!(held.name().as_deref(), Some("sh"));
        assert!(held.syscall().is_some());
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(job),
            nix::sys::signal::Signal::SIGKILL,
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(held.stat(), None);
        assert_eq!(held.syscall(), None);
        held.close();
        assert_eq!(held.stat(), None);
    }
}
