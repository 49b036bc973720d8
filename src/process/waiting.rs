//! Whether a program waits for its input, read from `/proc` without stopping it: the
//! processes of its process group, none of their threads runnable, at least one thread
//! blocked reading the input (a terminal, or a pipe) — in `read`, or in
//! `poll`/`select`/`epoll` with the input in the set it waits on. Every thread counts: a
//! program may read its input in any of them (a tokio program reads stdin on a blocking
//! thread while its main thread waits on a futex). What each thread is doing is
//! `/proc/PID/task/TID/syscall` (the system call it is blocked in and its arguments; for a
//! process of one thread, `/proc/PID/syscall`); a `poll`/`select` set is read from
//! `/proc/PID/mem`, an `epoll` set from `/proc/PID/fdinfo`. All of it needs ptrace-read
//! access, which the server has to its own descendants; where it is missing (a process
//! that changed user, a kernel without `/proc/PID/syscall`, a Yama policy) the answer is
//! unknown, never a wrong "no".

use std::fs;
use std::os::unix::fs::FileExt;

use std::time::Duration;

use super::procfs;
use crate::limits::BRIEF_WAIT;

/// What a session's input is, as `/proc/PID/fd/N` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputFile {
    /// A terminal: its path (`/dev/pts/N`).
    Terminal(String),
    /// A pipe, by inode (`pipe:[INODE]`).
    Pipe(u64),
}

impl InputFile {
    /// Whether a descriptor open on `link` (its `/proc/PID/fd/N` name) is this input.
    pub fn is(&self, link: &str) -> bool {
        match self {
            // `/dev/tty` opened by a program is its controlling terminal, which for the
            // session's processes is the session's terminal.
            InputFile::Terminal(path) => link == path || link == "/dev/tty",
            InputFile::Pipe(inode) => {
                link.strip_prefix("pipe:[")
                    .and_then(|rest| rest.strip_suffix(']'))
                    .and_then(|n| n.parse::<u64>().ok())
                    == Some(*inode)
            }
        }
    }
}

/// A process of a group, and its state when it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub pid: i32,
    state: char,
    /// Its threads when it was found; 0 where that could not be read.
    threads: u32,
}

/// The processes of group `pgid` among the descendants of `leader` (the leader included,
/// its files held), found through `/proc/PID/task/TID/children`, so only the session's own
/// tree is read. A leader of one thread has one `children` file, read without listing its
/// threads.
pub fn group_members(leader: &procfs::Held, pgid: i32) -> Vec<Member> {
    let mut members = Vec::new();
    let mut todo = vec![leader.pid()];
    let mut seen = 0;
    while let Some(pid) = todo.pop() {
        seen += 1;
        if seen > MAX_PROCESSES {
            break;
        }
        let is_leader = pid == leader.pid();
        let stat = if is_leader {
            leader.stat()
        } else {
            procfs::stat(pid)
        };
        if let Some(stat) = stat.filter(|s| s.pgrp == pgid) {
            members.push(Member {
                pid,
                state: stat.state,
                threads: stat.threads,
            });
        }
        let children = match stat {
            Some(stat) if is_leader && stat.threads == 1 => leader.children(),
            // The leader is gone: its ID may be another process's now.
            None if is_leader => None,
            // Bounded by the processes looked at (`MAX_PROCESSES`), not by the files read.
            _ => procfs::children(&pid.to_string(), &mut { usize::MAX }),
        };
        todo.extend(children.unwrap_or_default());
    }
    members
}

/// Processes of one session's tree looked at, at most.
const MAX_PROCESSES: usize = 4096;
/// Entries of a `poll` set (or bytes of a `select` set) read, at most.
const MAX_SET: usize = 256;

/// Threads of one process looked at, at most.
const MAX_THREADS: usize = 1024;

/// Whether the processes `members` wait for `input`: `Some(true)` when none of their
/// threads is runnable and at least one is blocked reading it; `Some(false)` once one is
/// found runnable; `None` when what one of them does cannot be read before that. The
/// session's output and input have been quiet for `quiet`: a wait on the input with a
/// timeout under `BRIEF_WAIT` counts only once that is at least as long (a program that
/// pauses a moment as it exits, as vim does for late answers to its terminal queries, is
/// not waiting for input; one that waits so again and again, in silence, is).
pub fn awaiting(
    members: &[Member],
    leader: &procfs::Held,
    input: &InputFile,
    quiet: Duration,
) -> Option<bool> {
    look(members, leader, input, true, quiet >= BRIEF_WAIT)
}

/// Whether a thread of the processes `members` is blocked reading `input`, whatever the
/// others do (one may compute while another reads); `None` when what one of them does
/// cannot be read.
pub fn reading(members: &[Member], leader: &procfs::Held, input: &InputFile) -> Option<bool> {
    look(members, leader, input, false, true)
}

/// `awaiting` when `idle` (a runnable thread means no), else `reading`; a brief wait on the
/// input counts as reading it only when `patient`.
fn look(
    members: &[Member],
    leader: &procfs::Held,
    input: &InputFile,
    idle: bool,
    patient: bool,
) -> Option<bool> {
    if members.is_empty() {
        return Some(false);
    }
    let mut reading = false;
    for &Member {
        pid,
        state,
        threads,
    } in members
    {
        // What a thread does; false when it settles the answer (runnable, looking for idle).
        let mut take = |doing: Doing| match doing {
            Doing::Gone => true,
            Doing::Busy => !idle,
            Doing::Sleeping { reading: this } => {
                if this {
                    tracing::debug!(pid, ?members, name = ?procfs::name(pid), "blocked reading the input");
                }
                reading |= this;
                true
            }
        };
        if threads > 1 {
            // Listed now: threads come and go. A process gone meanwhile reads nothing.
            let Some(tids) = procfs::task_ids(pid, MAX_THREADS) else {
                continue;
            };
            for tid in tids {
                if !take(thread_doing(pid, tid, input, patient)?) {
                    return Some(false);
                }
            }
        } else {
            let call = if pid == leader.pid() {
                leader.syscall()
            } else {
                fs::read_to_string(format!("/proc/{pid}/syscall")).ok()
            };
            let there = || procfs::stat(pid).is_some_and(|s| alive(s.state));
            let doing = doing(pid, state, call, (input, patient), there)?;
            if !take(doing) {
                return Some(false);
            }
        }
    }
    Some(reading)
}

/// What one thread is doing, as far as waiting for input goes.
enum Doing {
    /// Ended (or a zombie): it reads nothing.
    Gone,
    /// Runnable, or in a state other than an interruptible sleep.
    Busy,
    /// Blocked in a system call: reading the input or not.
    Sleeping { reading: bool },
}

/// What thread `tid` of process `pid` is doing; `None` when it cannot be read.
fn thread_doing(pid: i32, tid: i32, input: &InputFile, patient: bool) -> Option<Doing> {
    let Some(stat) = procfs::task_stat(pid, tid) else {
        return Some(Doing::Gone);
    };
    let call = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok();
    doing(pid, stat.state, call, (input, patient), || {
        procfs::task_stat(pid, tid).is_some_and(|s| alive(s.state))
    })
}

/// Whether a thread in `state` has not ended (a zombie's `/proc` files stay, unreadable).
fn alive(state: char) -> bool {
    !matches!(state, 'Z' | 'X' | 'x')
}

/// What a thread of `pid` in `state`, blocked in `call` (its `syscall` text), is doing
/// (a brief wait on `input` is reading it only when `patient`); `there`: whether it still
/// exists, asked when its call cannot be read.
fn doing(
    pid: i32,
    state: char,
    call: Option<String>,
    (input, patient): (&InputFile, bool),
    there: impl FnOnce() -> bool,
) -> Option<Doing> {
    match state {
        // A zombie reads nothing.
        _ if !alive(state) => return Some(Doing::Gone),
        // Sleeping is the only state in which a thread waits for input.
        'S' => {}
        _ => return Some(Doing::Busy),
    }
    let known = call.and_then(|call| match blocked_on(&call)? {
        Blocked::Running => Some(Doing::Busy),
        // Descriptors and memory are the process's, shared by its threads.
        Blocked::Call(call) => Some(Doing::Sleeping {
            reading: reads(pid, &call, input)? && (patient || !brief(pid, &call)),
        }),
    });
    // What it does could not be read: gone meanwhile (its call, descriptors or memory went
    // with it, or a zombie's), it reads nothing; there, it cannot be known.
    known.or_else(|| (!there()).then_some(Doing::Gone))
}

/// Whether `call` of `pid` waits with a timeout under `BRIEF_WAIT` (a timeout that cannot
/// be read is none).
fn brief(pid: i32, call: &Call) -> bool {
    let Call { nr, args } = *call;
    // A timespec (or a select's timeval) at `address`; none when the pointer is null.
    let at = |address: u64, per_second: u64| -> Option<Duration> {
        let bytes = memory(pid, (address != 0).then_some(address)?, 16)?;
        let seconds = i64::from_ne_bytes(bytes[..8].try_into().ok()?);
        let fraction = i64::from_ne_bytes(bytes[8..].try_into().ok()?);
        let nanos = u64::try_from(fraction).ok()? * (1_000_000_000 / per_second);
        Some(Duration::from_secs(u64::try_from(seconds).ok()?) + Duration::from_nanos(nanos))
    };
    // A timeout in milliseconds; negative is none.
    let millis = |arg: u64| u64::try_from(arg as i32).ok().map(Duration::from_millis);
    let timeout = match nr {
        libc::SYS_pselect6 => at(args[4], 1_000_000_000),
        libc::SYS_ppoll => at(args[2], 1_000_000_000),
        libc::SYS_epoll_pwait2 => at(args[3], 1_000_000_000),
        libc::SYS_epoll_pwait => millis(args[3]),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_select => at(args[4], 1_000_000),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_poll => millis(args[2]),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_epoll_wait => millis(args[3]),
        _ => None,
    };
    timeout.is_some_and(|t| t < BRIEF_WAIT)
}

enum Blocked {
    Running,
    Call(Call),
}

/// A system call a process is blocked in: its number and first five arguments.
struct Call {
    nr: i64,
    args: [u64; 5],
}

/// What a `/proc/PID/syscall` text says the process is blocked in.
fn blocked_on(text: &str) -> Option<Blocked> {
    let mut fields = text.split_whitespace();
    let first = fields.next()?;
    if first == "running" {
        return Some(Blocked::Running);
    }
    let nr: i64 = first.parse().ok()?;
    // `-1 SP PC` is a process blocked outside any system call (a page fault): not reading.
    if nr < 0 {
        return Some(Blocked::Call(Call { nr, args: [0; 5] }));
    }
    let mut args = [0u64; 5];
    for arg in &mut args {
        let field = fields.next()?;
        *arg = u64::from_str_radix(field.trim_start_matches("0x"), 16).ok()?;
    }
    Some(Blocked::Call(Call { nr, args }))
}

/// Whether process `pid` (of one thread) is blocked in a `read` of `input` asking for
/// more than one byte: a shell reading its own input a block at a time (dash's `read`
/// builtin asks for a byte at a time).
pub fn reads_blocks(pid: i32, input: &InputFile) -> bool {
    let Some(Blocked::Call(Call { nr, args })) = fs::read_to_string(format!("/proc/{pid}/syscall"))
        .ok()
        .and_then(|text| blocked_on(&text))
    else {
        return false;
    };
    nr == libc::SYS_read
        && args[2] > 1
        && procfs::descriptor(pid, args[0]).is_some_and(|link| input.is(&link))
}

/// Whether process `pid` (of one thread) is blocked waiting for a child to change state:
/// a shell waiting for the program it runs.
pub fn waits_for_a_child(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/syscall"))
        .ok()
        .and_then(|text| blocked_on(&text))
        .is_some_and(|blocked| {
            matches!(blocked, Blocked::Call(Call { nr, .. })
                if [libc::SYS_wait4, libc::SYS_waitid].contains(&nr))
        })
}

/// How a process blocked waiting to read its input waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputWait {
    /// As a line editor waits for a key: in a `select` or `pselect6` on it without a
    /// timeout (readline waits so; bash's `read` builtin reads, or selects with a timeout
    /// under `-t`).
    ForAKey,
    /// In a read, or a poll or select with a timeout.
    Otherwise,
}

/// How process `pid` (of one thread) waits to read `input`, if it is blocked doing so.
pub fn input_wait(pid: i32, input: &InputFile) -> Option<InputWait> {
    let text = fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    let Blocked::Call(call) = blocked_on(&text)? else {
        return None;
    };
    if reads(pid, &call, input) != Some(true) {
        return None;
    }
    // The fifth argument of `select` and `pselect6` is the timeout.
    if SELECTS.contains(&call.nr) && call.args[4] == 0 {
        Some(InputWait::ForAKey)
    } else {
        Some(InputWait::Otherwise)
    }
}

/// Whether `call` of `pid` waits to read `input`; `None` when its wait set cannot be read.
fn reads(pid: i32, call: &Call, input: &InputFile) -> Option<bool> {
    let is_input = |fd: u64| procfs::descriptor(pid, fd).is_some_and(|link| input.is(&link));
    let nr = call.nr;
    if [
        libc::SYS_read,
        libc::SYS_readv,
        libc::SYS_pread64,
        libc::SYS_preadv,
        libc::SYS_preadv2,
    ]
    .contains(&nr)
    {
        return Some(is_input(call.args[0]));
    }
    if POLLS.contains(&nr) {
        let count = (call.args[1] as usize).min(MAX_SET);
        let set = memory(pid, call.args[0], count * 8)?;
        // struct pollfd { int fd; short events; short revents; }
        let wanted = set.chunks_exact(8).any(|entry| {
            let fd = i32::from_ne_bytes(entry[..4].try_into().expect("four bytes"));
            let events = i16::from_ne_bytes(entry[4..6].try_into().expect("two bytes"));
            fd >= 0 && events & (libc::POLLIN | libc::POLLRDNORM) != 0 && is_input(fd as u64)
        });
        return Some(wanted);
    }
    if SELECTS.contains(&nr) {
        let nfds = (call.args[0] as usize).min(MAX_SET * 8);
        if call.args[1] == 0 {
            return Some(false);
        }
        let set = memory(pid, call.args[1], nfds.div_ceil(8))?;
        let wanted = (0..nfds)
            .filter(|fd| set[fd / 8] & (1 << (fd % 8)) != 0)
            .any(|fd| is_input(fd as u64));
        return Some(wanted);
    }
    if EPOLLS.contains(&nr) {
        let info = fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", call.args[0])).ok()?;
        return Some(epoll_reads(&info).any(is_input));
    }
    Some(false)
}

#[cfg(target_arch = "x86_64")]
const POLLS: [i64; 2] = [libc::SYS_poll, libc::SYS_ppoll];
#[cfg(not(target_arch = "x86_64"))]
const POLLS: [i64; 1] = [libc::SYS_ppoll];
#[cfg(target_arch = "x86_64")]
const SELECTS: [i64; 2] = [libc::SYS_select, libc::SYS_pselect6];
#[cfg(not(target_arch = "x86_64"))]
const SELECTS: [i64; 1] = [libc::SYS_pselect6];
#[cfg(target_arch = "x86_64")]
const EPOLLS: [i64; 3] = [
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
];
#[cfg(not(target_arch = "x86_64"))]
const EPOLLS: [i64; 2] = [libc::SYS_epoll_pwait, libc::SYS_epoll_pwait2];

/// The descriptors an epoll set (its `fdinfo`) waits on for input.
fn epoll_reads(info: &str) -> impl Iterator<Item = u64> + '_ {
    info.lines().filter_map(|line| {
        // `tfd:        5 events:       19 data: …`
        let mut fields = line.split_whitespace();
        (fields.next()? == "tfd:").then_some(())?;
        let fd = fields.next()?.parse().ok()?;
        (fields.next()? == "events:").then_some(())?;
        let events = u32::from_str_radix(fields.next()?, 16).ok()?;
        (events & (libc::EPOLLIN as u32) != 0).then_some(fd)
    })
}

/// `len` bytes of `pid`'s memory at `address`.
fn memory(pid: i32, address: u64, len: usize) -> Option<Vec<u8>> {
    let file = fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, address).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_running_a_program_waits_for_a_child_and_the_program_does_not() {
        let mut shell = std::process::Command::new("/bin/sh")
            .args(["-c", "/bin/sleep 5; :"])
            .spawn()
            .unwrap();
        let pid = shell.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !waits_for_a_child(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "the shell never waited"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let sleeper = procfs::Held::new(pid)
            .children()
            .and_then(|c| c.first().copied());
        assert!(sleeper.is_some_and(|child| !waits_for_a_child(child)));
        shell.kill().unwrap();
        shell.wait().unwrap();
        assert!(!waits_for_a_child(pid));
    }

    #[test]
    fn a_wait_with_a_short_timeout_is_brief_and_a_long_one_is_not() {
        for (timeout, brief_wait) in [("0.1", true), ("30", false)] {
            let script =
                format!("import select\nwhile True: select.select([0], [], [], {timeout})");
            let mut program = std::process::Command::new("/usr/bin/python3")
                .args(["-c", &script])
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let pid = program.id() as i32;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            let call = loop {
                let text = fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap();
                if let Some(Blocked::Call(call)) = blocked_on(&text)
                    && SELECTS.contains(&call.nr)
                {
                    break call;
                }
                assert!(std::time::Instant::now() < deadline, "never selected");
                std::thread::sleep(std::time::Duration::from_millis(5));
            };
            assert_eq!(brief(pid, &call), brief_wait, "timeout {timeout}");
            program.kill().unwrap();
            program.wait().unwrap();
        }
    }

    #[test]
    fn an_epoll_set_names_its_readers() {
        let info = "pos:\t0\nflags:\t02\nmnt_id:\t15\ntfd:        0 events:       19 data:                0  pos:0 ino:3 sdev:1\ntfd:        7 events:        4 data:                7  pos:0 ino:4 sdev:1\n";
        assert_eq!(epoll_reads(info).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn a_pipe_is_known_by_its_inode() {
        assert!(InputFile::Pipe(42).is("pipe:[42]"));
        assert!(!InputFile::Pipe(42).is("pipe:[421]"));
        assert!(InputFile::Terminal("/dev/pts/3".into()).is("/dev/pts/3"));
        assert!(!InputFile::Terminal("/dev/pts/3".into()).is("/dev/pts/30"));
        assert!(InputFile::Terminal("/dev/pts/3".into()).is("/dev/tty"));
    }

    /// This very process, blocked reading a pipe in another thread, waits for that pipe;
    /// sleeping, it does not.
    #[test]
    fn a_thread_blocked_reading_a_pipe_is_seen() {
        use std::os::fd::AsRawFd;
        let (read, write) = nix::unistd::pipe().unwrap();
        let inode = nix::sys::stat::fstat(&read).unwrap().st_ino;
        let raw = read.as_raw_fd();
        let reader = std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            let _ = nix::unistd::read(&read, &mut byte);
        });
        let tid = loop {
            let found = fs::read_dir("/proc/self/task")
                .unwrap()
                .flatten()
                .find_map(|t| {
                    let tid: i32 = t.file_name().to_str()?.parse().ok()?;
                    let text = fs::read_to_string(t.path().join("syscall")).ok()?;
                    text.starts_with(&format!("{} 0x{raw:x} ", libc::SYS_read))
                        .then_some(tid)
                });
            if let Some(tid) = found {
                break tid;
            }
            std::thread::yield_now();
        };
        let text = fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).unwrap();
        let call = match blocked_on(&text).unwrap() {
            Blocked::Call(call) => call,
            Blocked::Running => panic!("running"),
        };
        assert_eq!(reads(tid, &call, &InputFile::Pipe(inode)), Some(true));
        assert_eq!(reads(tid, &call, &InputFile::Pipe(inode + 1)), Some(false));
        nix::unistd::write(&write, b"x").unwrap();
        reader.join().unwrap();
    }

    /// A process that ends while it is looked at (its call read, its descriptors or memory
    /// gone by the time they are) reads nothing: that is not "cannot be known".
    #[test]
    fn a_process_gone_during_the_look_reads_nothing() {
        let mut program = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = program.id() as i32;
        program.wait().unwrap();
        let input = InputFile::Pipe(1);
        // Blocked in a poll whose set was in its memory, and in a read of descriptor 0.
        let poll = format!(
            "{} 0x7ffc0000 0x1 0xffffffff 0x0 0x0 0x0 0x7ffc 0x7ffd",
            POLLS[0]
        );
        let read = format!(
            "{} 0x0 0x7ffc0000 0x1000 0x0 0x0 0x0 0x7ffc 0x7ffd",
            libc::SYS_read
        );
        for call in [poll, read] {
            let doing = doing(pid, 'S', Some(call), (&input, true), || false);
            assert!(matches!(
                doing,
                Some(Doing::Gone | Doing::Sleeping { reading: false })
            ));
        }
        // Unreadable and still there: unknown.
        let poll = format!(
            "{} 0x7ffc0000 0x1 0xffffffff 0x0 0x0 0x0 0x7ffc 0x7ffd",
            POLLS[0]
        );
        assert!(doing(pid, 'S', Some(poll), (&input, true), || true).is_none());
    }

    #[test]
    fn a_process_blocked_outside_a_system_call_is_not_reading() {
        let call = match blocked_on("-1 0x7ffc1234 0x55aa5678").unwrap() {
            Blocked::Call(call) => call,
            Blocked::Running => panic!("running"),
        };
        assert_eq!(
            reads(std::process::id() as i32, &call, &InputFile::Pipe(1)),
            Some(false)
        );
    }
}
