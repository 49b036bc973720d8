//! `demo-process`: the child program behind mcp-terminal's demo profiles.
//!
//! Each mode does exactly what its name says and prints deterministic text, so the scenario
//! harness can check what the server reports against what the child says it did.
//! Usage: `demo-process MODE [ARG]`.

use std::io::{self, BufRead, Read, Write};
use std::process::{Command, ExitCode, Stdio};
use std::thread::sleep;
use std::time::Duration;

/// Lines `flood` writes by default; at 100 bytes a line this is about 2 MiB, twice the
/// default per-session buffer, so eviction is forced.
const FLOOD_LINES: u64 = 20_000;
const FLOOD_LINE_WIDTH: usize = 100;
/// Descendants `children` starts (two children, one of which starts a grandchild).
const CHILDREN: usize = 2;

const MODES: &str = "stream interactive long unicode flood exit7 empty children closed-stdin \
                     split-utf8 invalid-utf8 eof ignore-term";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("");
    let arg = args.get(1).map(String::as_str);
    let result = match mode {
        "stream" => stream(count(arg, 5)),
        "interactive" => interactive(),
        "long" => long(),
        "unicode" => unicode(),
        "flood" => flood(count(arg, FLOOD_LINES)),
        "exit7" => exit7(),
        "empty" => Ok(ExitCode::SUCCESS),
        "children" => children(),
        "closed-stdin" => closed_stdin(),
        "split-utf8" => split_utf8(),
        "invalid-utf8" => invalid_utf8(),
        "eof" => eof(),
        "ignore-term" => ignore_term(),
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

/// `N` numbered lines on each stream, alternating, each flushed.
fn stream(lines: u64) -> io::Result<ExitCode> {
    let (mut out, mut err) = (io::stdout().lock(), io::stderr().lock());
    for i in 1..=lines {
        writeln!(out, "stdout line {i}")?;
        out.flush()?;
        writeln!(err, "stderr line {i}")?;
        err.flush()?;
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
/// `flood total: <code points before this line> code points`.
fn flood(lines: u64) -> io::Result<ExitCode> {
    let mut out = io::BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    let mut total: u64 = 0;
    for i in 1..=lines {
        let head = format!("flood {i:08} ");
        let pad = FLOOD_LINE_WIDTH - head.len() - 1;
        writeln!(out, "{head}{}", "x".repeat(pad))?;
        total += FLOOD_LINE_WIDTH as u64;
    }
    writeln!(out, "flood total: {total} code points")?;
    out.flush()?;
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
