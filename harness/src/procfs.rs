//! Process facts from /proc: is a PID alive, who is in a process group, a zombie's status,
//! how many files a process holds open, how much memory it has resident.
//! A zombie has ended: it counts as gone.

use std::fs;

/// Fields of /proc/<pid>/stat after the `(comm)` field: index 0 is field 3 (`state`).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces and parentheses; it ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

fn is_dead_state(state: &str) -> bool {
    matches!(state, "Z" | "X" | "x")
}

/// True while the process exists and has not ended (zombies are ended).
pub fn is_alive(pid: u32) -> bool {
    stat_fields(pid)
        .and_then(|f| f.first().cloned())
        .is_some_and(|state| !is_dead_state(&state))
}

/// A process as seen at one moment: its PID, and when it was seen. A PID is reused once its
/// process is gone, by any process on the machine; one that started after the sighting is
/// another process, never taken for this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub pid: u32,
    /// Clock ticks since boot (the unit of a process's start in /proc/<pid>/stat).
    at: u64,
}

impl Seen {
    /// `pid`, seen now: whatever runs at that PID now started by now.
    pub fn now(pid: u32) -> Seen {
        Seen {
            pid,
            at: ticks_since_boot(),
        }
    }

    /// True while the process seen exists and has not ended (a zombie has ended).
    pub fn is_alive(&self) -> bool {
        let Some(fields) = stat_fields(self.pid) else {
            return false;
        };
        let ended = fields.first().is_none_or(|state| is_dead_state(state));
        // Field 22, `starttime`.
        let started = fields.get(19).and_then(|t| t.parse::<u64>().ok());
        !ended && started.is_some_and(|t| t <= self.at)
    }
}

/// Clock ticks since boot, on the clock /proc/<pid>/stat gives start times on.
fn ticks_since_boot() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    use nix::unistd::{SysconfVar, sysconf};
    let now = clock_gettime(ClockId::CLOCK_BOOTTIME).expect("CLOCK_BOOTTIME is readable");
    let per_second = sysconf(SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as u64;
    now.tv_sec() as u64 * per_second + now.tv_nsec() as u64 * per_second / 1_000_000_000
}

/// Live processes whose process group is `pgid`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            stat_fields(*pid)
                .is_some_and(|f| f.len() > 2 && !is_dead_state(&f[0]) && f[2].parse() == Ok(pgid))
        })
        .collect()
}

/// The name of the tag variable mcp-terminal sets on every process of a session; its value
/// is `<server instance>-<session id>`.
pub const TAG_VAR: &str = "MCP_TERMINAL_SESSION";

fn live_pids() -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| is_alive(*pid))
        .collect()
}

/// The server instance in `pid`'s session tag, if it carries one.
pub fn server_instance(pid: u32) -> Option<String> {
    let env = fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{TAG_VAR}=");
    env.split(|b| *b == 0).find_map(|entry| {
        let value = std::str::from_utf8(entry.strip_prefix(prefix.as_bytes())?).ok()?;
        Some(value.split_once('-')?.0.to_string())
    })
}

/// Live processes tagged by the server `instance`, wherever they were reparented.
pub fn tagged_by(instance: &str) -> Vec<u32> {
    live_pids()
        .into_iter()
        .filter(|pid| server_instance(*pid).as_deref() == Some(instance))
        .collect()
}

/// Live children of `parent` with `arg` among their arguments (argv[1..]).
pub fn children_with_arg(parent: u32, arg: &str) -> Vec<u32> {
    live_pids()
        .into_iter()
        .filter(|pid| {
            stat_fields(*pid)
                .is_some_and(|f| f.get(1).map(String::as_str) == Some(&parent.to_string()))
        })
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).skip(1).any(|a| a == arg.as_bytes()))
        })
        .collect()
}

/// Start `/bin/sleep 1000` in a POSIX session of its own at exactly `pid`: write `pid - 1`
/// to /proc/sys/kernel/ns_last_pid and spawn, retrying while other processes take the PID
/// first. The child is not waited for here: the caller kills it and init reaps it.
pub fn spawn_at_pid(pid: u32) -> Result<u32, String> {
    use std::os::unix::process::CommandExt;
    const ATTEMPTS: usize = 200;
    if is_alive(pid) {
        return Err(format!("PID {pid} is in use"));
    }
    for _ in 0..ATTEMPTS {
        fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1))
            .map_err(|e| format!("cannot write /proc/sys/kernel/ns_last_pid (needs root): {e}"))?;
        let mut command = std::process::Command::new("/bin/sleep");
        command
            .arg("1000")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid()
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = command.spawn().map_err(|e| format!("cannot spawn: {e}"))?;
        if child.id() == pid {
            return Ok(pid);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    Err(format!("PID {pid} was taken by others {ATTEMPTS} times"))
}

/// For a zombie: (exit code, terminating signal) from the wait status in field 52.
pub fn zombie_status(pid: u32) -> Option<(Option<i32>, Option<i32>)> {
    let fields = stat_fields(pid)?;
    if fields.first().map(String::as_str) != Some("Z") {
        return None;
    }
    let status: i32 = fields.get(49)?.parse().ok()?;
    let signal = status & 0x7f;
    Some(if signal == 0 {
        (Some((status >> 8) & 0xff), None)
    } else {
        (None, Some(signal))
    })
}

/// The number of threads of `pid` (`Threads` of /proc/<pid>/status).
pub fn threads(pid: u32) -> Result<u64, String> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:")?.trim().parse().ok())
        .ok_or_else(|| format!("no Threads in /proc/{pid}/status"))
}

/// Children of `parent` that have ended but were not reaped (zombies).
pub fn zombie_children(parent: u32) -> u64 {
    let Ok(entries) = fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            stat_fields(*pid).is_some_and(|f| {
                f.first().map(String::as_str) == Some("Z")
                    && f.get(1).map(String::as_str) == Some(&parent.to_string())
            })
        })
        .count() as u64
}

/// The number of open file descriptors of `pid` (entries of /proc/<pid>/fd).
pub fn open_fds(pid: u32) -> Result<u64, String> {
    let entries = fs::read_dir(format!("/proc/{pid}/fd"))
        .map_err(|e| format!("cannot list /proc/{pid}/fd: {e}"))?;
    Ok(entries.filter(|e| e.is_ok()).count() as u64)
}

/// Like `open_fds`, without sockets: over HTTP the client's connections come and go with
/// its requests, and are not what a leak check is about.
pub fn open_fds_but_sockets(pid: u32) -> Result<u64, String> {
    let entries = fs::read_dir(format!("/proc/{pid}/fd"))
        .map_err(|e| format!("cannot list /proc/{pid}/fd: {e}"))?;
    Ok(entries
        .filter_map(Result::ok)
        .filter(|e| {
            fs::read_link(e.path())
                .is_ok_and(|target| !target.to_string_lossy().starts_with("socket:"))
        })
        .count() as u64)
}

/// The resident set size of `pid` in KiB (`VmRSS` of /proc/<pid>/status).
pub fn rss_kib(pid: u32) -> Result<u64, String> {
    status_kib(pid, "VmRSS")
}

/// The peak resident set size of `pid` in KiB (`VmHWM` of /proc/<pid>/status).
pub fn peak_rss_kib(pid: u32) -> Result<u64, String> {
    status_kib(pid, "VmHWM")
}

fn status_kib(pid: u32, field: &str) -> Result<u64, String> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    field_kib(&status, field).ok_or_else(|| format!("/proc/{pid}/status has no {field}"))
}

fn field_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The CPU time a process has used (user and system, all its threads), in clock ticks
/// (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // Fields after the command name (which may hold spaces, so split after its `)`):
    // utime and stime are the 12th and 13th of them.
    let after = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    match (tick(11), tick(12)) {
        (Some(user), Some(system)) => Ok(user + system),
        _ => Err(format!("{path}: no utime and stime")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_own_fds_and_sees_a_new_one() {
        let me = std::process::id();
        let before = open_fds(me).unwrap();
        assert!(before >= 3, "{before}");
        let file = fs::File::open("/proc/self/stat").unwrap();
        // Other test threads may open files too, so only the lower bound is certain.
        assert!(open_fds(me).unwrap() > before.saturating_sub(8));
        drop(file);
        assert!(open_fds(u32::MAX).is_err());
    }

    #[test]
    fn reads_own_resident_memory() {
        let kib = rss_kib(std::process::id()).unwrap();
        assert!(kib > 100, "{kib}");
        assert!(peak_rss_kib(std::process::id()).unwrap() > 100);
        // The peak is at least the resident size read with it. Read apart, it need not be:
        // the kernel sums resident pages from per-CPU counters, approximately, on each read,
        // and other test threads allocate and free meanwhile.
        let status = fs::read_to_string("/proc/self/status").unwrap();
        let (rss, peak) = (field_kib(&status, "VmRSS"), field_kib(&status, "VmHWM"));
        assert!(peak >= rss && rss.is_some(), "{rss:?} {peak:?}");
        assert!(rss_kib(u32::MAX).is_err());
    }

    #[test]
    fn own_process_is_alive_and_in_its_group() {
        let me = std::process::id();
        assert!(is_alive(me));
        let pgid = nix::unistd::getpgrp().as_raw() as u32;
        assert!(group_members(pgid).contains(&me));
        assert_eq!(zombie_status(me), None);
    }

    #[test]
    fn a_process_that_started_after_it_was_seen_is_another() {
        let me = std::process::id();
        assert!(Seen::now(me).is_alive());
        // Seen at boot: whatever runs at this PID now started later.
        assert!(!Seen { pid: me, at: 0 }.is_alive());
        assert!(!Seen::now(u32::MAX).is_alive());
    }

    #[test]
    fn reaped_child_is_gone_and_zombie_reports_status() {
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "exit 3"])
            .spawn()
            .unwrap();
        let pid = child.id();
        // Until reaped it is a zombie carrying its status.
        let mut status = None;
        for _ in 0..500 {
            status = zombie_status(pid);
            if status.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(status, Some((Some(3), None)));
        assert!(!is_alive(pid));
        child.wait().unwrap();
        assert!(!is_alive(pid));
    }
}
