//! `demo-process`: the child program behind mcp-terminal's demo profiles.
//!
//! Each mode does exactly what its name says and prints deterministic text, so the scenario
//! harness can check what the server reports against what the child says it did.
//! Usage: `demo-process MODE [ARG]`.

use std::fmt::Write as _;
use std::io::{self, BufRead, Read, Write};
use std::os::fd::{AsFd, AsRawFd, IntoRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread::sleep;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::termios::{SetArg, Termios, cfmakeraw, tcgetattr, tcsetattr};

/// Lines `flood` writes by default; at 100 bytes a line this is about 2 MiB, twice the
/// default per-session buffer, so eviction is forced.
const FLOOD_LINES: u64 = 20_000;
const FLOOD_LINE_WIDTH: usize = 100;
/// Descendants `children` starts (two children, one of which starts a grandchild).
const CHILDREN: usize = 2;
/// Lines the `escape` daemon writes, one a second, before it exits by itself: bounded so a
/// daemon nobody can reach still goes away.
const DAEMON_TICKS: u64 = 30;
/// How often `ticker` prints: far below the idle periods waited for (1 s in `wait-idle`), so
/// a loaded machine would have to stall a process for twenty periods to make it look idle.
const TICK: Duration = Duration::from_millis(50);
/// The bottom line of the `pty-tui` frame; it sits on the last row, so a resize moves it.
const TUI_FOOTER: &str = "q: quit  +/-/Up/Down: counter";

const MODES: &str = "stream interactive long unicode flood flood-checksum exit7 empty children closed-stdin \
                     split-utf8 invalid-utf8 eof ignore-term pty-tui escape ticker";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("");
    let arg = args.get(1).map(String::as_str);
    let result = match mode {
        "stream" => stream(count(arg, 5)),
        "interactive" => interactive(),
        "long" => long(),
        "unicode" => unicode(),
        "flood" => flood(count(arg, FLOOD_LINES)).map(|_| ExitCode::SUCCESS),
        "flood-checksum" => flood_checksum(count(arg, FLOOD_LINES)),
        "exit7" => exit7(),
        "empty" => Ok(ExitCode::SUCCESS),
        "children" => children(),
        "closed-stdin" => closed_stdin(),
        "split-utf8" => split_utf8(),
        "invalid-utf8" => invalid_utf8(),
        "eof" => eof(),
        "ignore-term" => ignore_term(),
        "pty-tui" => pty_tui(),
        "escape" => escape(),
        "ticker" => ticker(count(arg, 20)),
        // Internal: the daemon `escape` leaves behind.
        "escaped-daemon" => escaped_daemon(),
        // Internal: a descendant started by `children`; `nest` starts one more level.
        "descendant" => descendant(arg == Some("nest")),
        _ => {
            eprintln!("usage: demo-process MODE [ARG]\nmodes: {MODES}");
            return ExitCode::from(2);
        }
    };
    result.unwrap_or_else(|e| {
        eprintln!("demo-process {mode}: {e}");
        ExitCode::FAILURE
    })
}

fn count(arg: Option<&str>, default: u64) -> u64 {
    arg.and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn sleep_forever() -> ! {
    loop {
        sleep(Duration::from_secs(3600));
    }
}

/// `N` numbered lines on each stream, alternating, each one write. (Formatting straight
/// into unbuffered stderr would write a line in pieces, which a reader may see split.)
fn stream(lines: u64) -> io::Result<ExitCode> {
    let (mut out, mut err) = (io::stdout().lock(), io::stderr().lock());
    for i in 1..=lines {
        out.write_all(format!("stdout line {i}\n").as_bytes())?;
        out.flush()?;
        err.write_all(format!("stderr line {i}\n").as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Announce readiness, echo each stdin line back, exit 0 on EOF.
fn interactive() -> io::Result<ExitCode> {
    let mut out = io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    for line in io::stdin().lock().lines() {
        writeln!(out, "echo: {}", line?)?;
        out.flush()?;
    }
    writeln!(out, "bye")?;
    Ok(ExitCode::SUCCESS)
}

/// `tick 0` … `tick N-1`, one every 50 ms, then `stopped`, then silence until ended: output
/// that goes quiet at a known point, without a process started per line.
fn ticker(ticks: u64) -> io::Result<ExitCode> {
    let mut out = io::stdout().lock();
    for i in 0..ticks {
        writeln!(out, "tick {i}")?;
        out.flush()?;
        sleep(TICK);
    }
    writeln!(out, "stopped")?;
    out.flush()?;
    sleep_forever()
}

fn long() -> io::Result<ExitCode> {
    println!("running");
    io::stdout().flush()?;
    sleep_forever()
}

/// CJK, emoji (outside the BMP), a ZWJ sequence and combining marks.
pub const UNICODE_TEXT: &str = "日本語テキスト 中文 한국어\n\
                                emoji: 😀🎉🚀 family: 👨\u{200d}👩\u{200d}👧\n\
                                combining: e\u{301} a\u{308} n\u{303}\n";

fn unicode() -> io::Result<ExitCode> {
    io::stdout().write_all(UNICODE_TEXT.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// `N` lines of exactly `FLOOD_LINE_WIDTH` bytes, then a summary line on stdout:
/// `flood total: <code points before this line> code points`. Returns the FNV-1a (64 bit)
/// hash of everything written.
fn flood(lines: u64) -> io::Result<u64> {
    let mut out = io::BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut write = |out: &mut io::BufWriter<_>, line: String| {
        hash = line.bytes().fold(hash, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        out.write_all(line.as_bytes())
    };
    let mut total: u64 = 0;
    for i in 1..=lines {
        let head = format!("flood {i:08} ");
        let pad = FLOOD_LINE_WIDTH - head.len() - 1;
        write(&mut out, format!("{head}{}\n", "x".repeat(pad)))?;
        total += FLOOD_LINE_WIDTH as u64;
    }
    write(&mut out, format!("flood total: {total} code points\n"))?;
    out.flush()?;
    Ok(hash)
}

/// `flood`, then on stderr the hash of what it wrote on stdout, for a reader to compare:
/// `flood checksum fnv1a64 <16 hex digits>`.
fn flood_checksum(lines: u64) -> io::Result<ExitCode> {
    let hash = flood(lines)?;
    io::stderr().write_all(format!("flood checksum fnv1a64 {hash:016x}\n").as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

fn exit7() -> io::Result<ExitCode> {
    println!("exiting with 7");
    Ok(ExitCode::from(7))
}

/// Start same-group descendants (a child, and a child that starts a grandchild), print each
/// PID as `child <pid>`, print `ready`, then wait for stdin EOF and exit 0, leaving the
/// descendants running for the controller to clean up.
fn children() -> io::Result<ExitCode> {
    let exe = std::env::current_exe()?;
    let mut out = io::stdout().lock();
    for n in 0..CHILDREN {
        let nest = if n == 0 { "nest" } else { "leaf" };
        let mut child = Command::new(&exe)
            .args(["descendant", nest])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        writeln!(out, "child {}", child.id())?;
        // A nesting descendant reports its own child's PID on its stdout; pass it on.
        if nest == "nest" {
            let mut line = String::new();
            io::BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
            write!(out, "{line}")?;
        }
    }
    writeln!(out, "ready")?;
    out.flush()?;
    io::copy(&mut io::stdin().lock(), &mut io::sink())?;
    Ok(ExitCode::SUCCESS)
}

fn descendant(nest: bool) -> io::Result<ExitCode> {
    if nest {
        let child = Command::new(std::env::current_exe()?)
            .args(["descendant", "leaf"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()?;
        println!("child {}", child.id());
        io::stdout().flush()?;
    }
    sleep_forever()
}

fn closed_stdin() -> io::Result<ExitCode> {
    nix::unistd::close(0).map_err(io::Error::from)?;
    println!("stdin closed");
    io::stdout().flush()?;
    sleep_forever()
}

/// Multi-byte characters written one byte per flushed write, with pauses so the reader
/// sees them in separate reads.
fn split_utf8() -> io::Result<ExitCode> {
    let mut out = io::stdout().lock();
    for byte in "é€😀中\n".bytes() {
        out.write_all(&[byte])?;
        out.flush()?;
        sleep(Duration::from_millis(15));
    }
    writeln!(out, "done")?;
    Ok(ExitCode::SUCCESS)
}

/// Invalid sequences mid-stream and an incomplete one at EOF.
fn invalid_utf8() -> io::Result<ExitCode> {
    let mut out = io::stdout().lock();
    out.write_all(b"bad: \xff\xfe end\n")?;
    out.write_all(b"truncated: \xc3\x28 end\n")?;
    out.write_all(b"tail: \xe2\x82")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn eof() -> io::Result<ExitCode> {
    let mut bytes = Vec::new();
    io::stdin().lock().read_to_end(&mut bytes)?;
    println!("read {} bytes", bytes.len());
    Ok(ExitCode::SUCCESS)
}

fn ignore_term() -> io::Result<ExitCode> {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: SIG_IGN installs no Rust code as a handler.
    unsafe { signal(Signal::SIGTERM, SigHandler::SigIgn) }.map_err(io::Error::from)?;
    println!("ignoring SIGTERM");
    io::stdout().flush()?;
    sleep_forever()
}

/// A full-screen UI for a PTY: raw mode, the alternate screen, a hidden cursor and the title
/// `pty-tui`. Each frame clears the screen and draws, with absolute cursor moves:
/// row 1 `pty-tui <rows>x<cols>`, row 2 `keys: <n>`, row 3 `last: <key name>` (`none` before
/// any key), row 4 `counter: <k>` (`Up`/`+` add one, `Down`/`-` take one), and the last row
/// `TUI_FOOTER`; then the cursor is parked at row 2 column 1. It redraws on every key and on
/// SIGWINCH. `q`, C-c, C-d or EOF restore the terminal and print `pty-tui: bye`, exit 0.
fn pty_tui() -> io::Result<ExitCode> {
    if !nix::unistd::isatty(io::stdin()).unwrap_or(false) {
        eprintln!("pty-tui: stdin is not a terminal");
        return Ok(ExitCode::from(2));
    }
    let resized = watch_winch()?;
    let terminal = RawTerminal::enter()?;
    let mut tui = Tui::default();
    tui.draw()?;
    let mut buf = [0u8; 1024];
    loop {
        let stdin = io::stdin();
        let mut fds = [
            PollFd::new(stdin.as_fd(), PollFlags::POLLIN),
            PollFd::new(resized.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(Errno::EINTR) => continue,
            result => result?,
        };
        // Any revents on stdin (POLLHUP included) means the read below will not block.
        let (input, resize) = (fds[0].any().unwrap_or(true), fds[1].any().unwrap_or(true));
        if resize {
            drain(&resized);
            tui.draw()?;
        }
        if !input {
            continue;
        }
        let n = match nix::unistd::read(stdin.as_fd(), &mut buf) {
            Err(Errno::EINTR | Errno::EAGAIN) => continue,
            // A PTY whose other side has gone reads as EIO on Linux: the same as EOF here.
            Err(Errno::EIO) => 0,
            result => result?,
        };
        if n == 0 || tui.feed(&buf[..n])? == Flow::Quit {
            break;
        }
    }
    drop(terminal);
    println!("pty-tui: bye");
    Ok(ExitCode::SUCCESS)
}

#[derive(PartialEq)]
enum Flow {
    Continue,
    Quit,
}

/// What the `pty-tui` frame shows.
struct Tui {
    keys: u64,
    last: String,
    counter: i64,
}

impl Default for Tui {
    fn default() -> Self {
        Tui {
            keys: 0,
            last: "none".to_string(),
            counter: 0,
        }
    }
}

impl Tui {
    /// Decode every key in one read (a read may hold several keys, escape sequences
    /// included), redrawing after each.
    fn feed(&mut self, mut bytes: &[u8]) -> io::Result<Flow> {
        while !bytes.is_empty() {
            let (name, used) = decode_key(bytes);
            bytes = &bytes[used..];
            match name.as_str() {
                "q" | "C-c" | "C-d" => return Ok(Flow::Quit),
                "Up" | "+" => self.counter += 1,
                "Down" | "-" => self.counter -= 1,
                _ => {}
            }
            self.keys += 1;
            self.last = name;
            self.draw()?;
        }
        Ok(Flow::Continue)
    }

    /// Clear and draw the whole frame at the current size in one write.
    fn draw(&self) -> io::Result<()> {
        let (rows, cols) = window_size()?;
        let lines = [
            (1, format!("pty-tui {rows}x{cols}")),
            (2, format!("keys: {}", self.keys)),
            (3, format!("last: {}", self.last)),
            (4, format!("counter: {}", self.counter)),
            (rows.max(1), TUI_FOOTER.to_string()),
        ];
        let mut frame = String::from("\x1b[2J");
        for (row, text) in lines {
            // Cut at the width so a narrow terminal does not wrap a line onto the next row.
            let text: String = text.chars().take(usize::from(cols.max(1))).collect();
            let _ = write!(frame, "\x1b[{row};1H{text}");
        }
        frame.push_str("\x1b[2;1H");
        let mut out = io::stdout().lock();
        out.write_all(frame.as_bytes())?;
        out.flush()
    }
}

/// The name of the key at the front of `bytes` and how many bytes it takes: a printable
/// character as itself, `Enter` (CR), `Tab`, `Backspace` (DEL), `Escape`, `Up` `Down` `Left`
/// `Right` (CSI or SS3 form), `C-a`…`C-z`, and `other` for anything else.
fn decode_key(bytes: &[u8]) -> (String, usize) {
    let name = |s: &str| s.to_string();
    match bytes {
        [0x1b, rest @ ..] => decode_escape(rest),
        [b'\r', ..] => (name("Enter"), 1),
        [b'\t', ..] => (name("Tab"), 1),
        [0x7f, ..] => (name("Backspace"), 1),
        [c @ 0x01..=0x1a, ..] => (format!("C-{}", char::from(b'a' + c - 1)), 1),
        [c @ 0x20..=0x7e, ..] => (char::from(*c).to_string(), 1),
        [0x80..=0xff, ..] => decode_utf8(bytes),
        _ => (name("other"), 1),
    }
}

/// The key after an ESC (`rest` excludes it). A lone ESC at the end of a read is `Escape`,
/// since a terminal sends a whole sequence in one write.
fn decode_escape(rest: &[u8]) -> (String, usize) {
    let arrow = |b: u8| match b {
        b'A' => Some("Up"),
        b'B' => Some("Down"),
        b'C' => Some("Right"),
        b'D' => Some("Left"),
        _ => None,
    };
    match rest {
        [] | [0x1b, ..] => ("Escape".to_string(), 1),
        [b'O', b, ..] => (arrow(*b).unwrap_or("other").to_string(), 3),
        [b'[', tail @ ..] => {
            // A CSI sequence runs to its final byte (0x40..=0x7e); an arrow is a bare final.
            match tail.iter().position(|b| (0x40..=0x7e).contains(b)) {
                Some(0) => (arrow(tail[0]).unwrap_or("other").to_string(), 3),
                Some(end) => ("other".to_string(), end + 3),
                None => ("other".to_string(), rest.len() + 1),
            }
        }
        // ESC and one more byte is an Alt chord.
        _ => ("other".to_string(), 2),
    }
}

/// A printable non-ASCII character as itself; anything else is one byte of `other`.
fn decode_utf8(bytes: &[u8]) -> (String, usize) {
    let head = &bytes[..bytes.len().min(4)];
    let valid = match std::str::from_utf8(head) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default(),
    };
    match valid.chars().next() {
        Some(c) if !c.is_control() => (c.to_string(), c.len_utf8()),
        _ => ("other".to_string(), 1),
    }
}

nix::ioctl_read_bad!(tiocgwinsz, libc::TIOCGWINSZ, libc::winsize);

/// Rows and columns of the terminal on stdout.
fn window_size() -> io::Result<(u16, u16)> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which is valid for the call.
    unsafe { tiocgwinsz(io::stdout().as_raw_fd(), &mut size) }?;
    Ok((size.ws_row, size.ws_col))
}

/// Write end of the SIGWINCH self-pipe; -1 until `watch_winch` installs it.
static WINCH_PIPE: AtomicI32 = AtomicI32::new(-1);

/// Does only async-signal-safe work: one byte into the self-pipe, so the poll loop wakes and
/// redraws. errno is kept, since the handler may interrupt code about to read it.
extern "C" fn on_winch(_: libc::c_int) {
    let saved = Errno::last_raw();
    let fd = WINCH_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write(2) is async-signal-safe and the byte outlives the call. A full pipe
        // (EAGAIN) is fine: a wake-up is already pending.
        unsafe { libc::write(fd, [0u8].as_ptr().cast(), 1) };
    }
    Errno::set_raw(saved);
}

/// Install the SIGWINCH handler and return the pipe end that becomes readable on a resize.
fn watch_winch() -> io::Result<OwnedFd> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let (read, write) = nix::unistd::pipe()?;
    // Non-blocking both ways: the handler must never block, and `drain` stops when empty.
    for fd in [&read, &write] {
        fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    }
    // The write end stays open for the life of the process, as the handler may run until exit.
    WINCH_PIPE.store(write.into_raw_fd(), Ordering::Relaxed);
    let action = SigAction::new(
        SigHandler::Handler(on_winch),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    // SAFETY: the handler only calls async-signal-safe functions (see `on_winch`).
    unsafe { sigaction(Signal::SIGWINCH, &action) }?;
    Ok(read)
}

/// Empty the self-pipe: several resizes before one redraw need only that one redraw.
fn drain(pipe: &OwnedFd) {
    let mut buf = [0u8; 64];
    while matches!(nix::unistd::read(pipe, &mut buf), Ok(n) if n > 0) {}
}

/// Raw mode and the alternate screen for as long as it lives; dropping it restores both,
/// on error paths too.
struct RawTerminal {
    saved: Termios,
}

impl RawTerminal {
    fn enter() -> io::Result<Self> {
        let saved = tcgetattr(io::stdin())?;
        let mut raw = saved.clone();
        // No echo, no line editing, and no ISIG, so C-c and C-d arrive as bytes 0x03 and 0x04.
        cfmakeraw(&mut raw);
        tcsetattr(io::stdin(), SetArg::TCSANOW, &raw)?;
        let terminal = RawTerminal { saved };
        let mut out = io::stdout().lock();
        out.write_all(b"\x1b[?1049h\x1b[?25l\x1b]0;pty-tui\x07")?;
        out.flush()?;
        Ok(terminal)
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        // Best effort: the terminal may already be gone.
        let mut out = io::stdout().lock();
        let _ = out.write_all(b"\x1b[?25h\x1b[?1049l");
        let _ = out.flush();
        let _ = tcsetattr(io::stdin(), SetArg::TCSADRAIN, &self.saved);
    }
}

/// The process a process-group controller cannot reach: start a daemon in a session (and so
/// a process group) of its own, print `daemon <pid>` and `leader exiting`, and exit 0 without
/// waiting. The daemon keeps the inherited stdout open and writes `daemon tick <n>` once a
/// second, `DAEMON_TICKS` times, then exits by itself.
fn escape() -> io::Result<ExitCode> {
    let mut command = Command::new(std::env::current_exe()?);
    command.arg("escaped-daemon").stdin(Stdio::piped());
    // SAFETY: setsid(2) is async-signal-safe, so it may run between fork and exec.
    unsafe {
        command.pre_exec(|| nix::unistd::setsid().map(drop).map_err(io::Error::from));
    }
    let mut daemon = command.spawn()?;
    let mut out = io::stdout().lock();
    writeln!(out, "daemon {}", daemon.id())?;
    writeln!(out, "leader exiting")?;
    out.flush()?;
    // EOF on its stdin tells the daemon the leader's lines are out, so its ticks always come
    // after them. Dropping the `Child` neither waits for nor kills it.
    drop(daemon.stdin.take());
    Ok(ExitCode::SUCCESS)
}

/// Wait for the leader to finish its lines (stdin EOF), then tick; a write error (the reader
/// gone) ends it early.
fn escaped_daemon() -> io::Result<ExitCode> {
    io::copy(&mut io::stdin().lock(), &mut io::sink())?;
    let mut out = io::stdout().lock();
    for n in 1..=DAEMON_TICKS {
        if n > 1 {
            sleep(Duration::from_secs(1));
        }
        writeln!(out, "daemon tick {n}")?;
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}
