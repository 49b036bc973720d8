//! Every fixed limit of the server in one place. Owner-tunable limits live in the config
//! (`config::Limits`); these are the bounds the SPEC fixes.

use std::time::Duration;

/// A JSON-RPC line over this many bytes (newline included) is refused unread.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;
/// The room asked for in the stdout pipe (when it is one): a page of output is about
/// 134 KB of JSON, twice the default 64 KiB, so in a default pipe every page went out in
/// two writes with a wait for the client between them. No more than that: a pipe's room
/// counts against its user's pipe quota (`/proc/sys/fs/pipe-user-pages-soft`, 64 MiB by
/// default), past which the kernel gives that user's new pipes 8 KiB.
pub const STDOUT_PIPE_BYTES: usize = 256 * 1024;
/// Error replies to malformed lines that may wait for stdout; while they do, stdin is not read.
pub const REPLY_QUEUE_MAX: usize = 16;
/// Requests the service holds unanswered before no more input is read (a client that
/// never reads its answers cannot grow the server). Over HTTP, the most in flight on the
/// server, and the most for one MCP session (half, so one cannot take every place).
pub const MAX_IN_FLIGHT: usize = 64;
pub const MCP_SESSION_MAX_IN_FLIGHT: usize = MAX_IN_FLIGHT / 2;
/// On stdio, requests read past `MAX_IN_FLIGHT` and held (input is still read, so their
/// cancellations and those of requests in flight get through), at most, and the bytes of
/// their lines (held as read, not parsed).
pub const MAX_HELD: usize = MAX_IN_FLIGHT;
pub const MAX_HELD_BYTES: usize = 4 << 20;
/// How often a termination that holds a terminal shell stopped looks whether any other
/// program of its session still runs (the shell is killed once none does).
pub const HELD_SHELL_POLL: Duration = Duration::from_millis(20);

/// Largest cursor a client may pass (2^63 - 1).
pub const MAX_CURSOR: u64 = i64::MAX as u64;
/// `terminal_read.max_bytes` range and default.
pub const READ_MIN_BYTES: u64 = 4;
pub const READ_MAX_BYTES: u64 = 65_536;
/// Entries (same-stream runs) in one read page.
pub const PAGE_MAX_ENTRIES: usize = 1024;
/// `terminal_read.wait_ms` upper bound.
pub const READ_MAX_WAIT_MS: u64 = 2_000;
/// `terminal_read.tail_lines` upper bound.
pub const TAIL_MAX_LINES: u64 = 10_000;
/// `terminal_wait.idle_ms`: 0 is off, else this range.
pub const IDLE_MIN_MS: u64 = 10;
pub const IDLE_MAX_MS: u64 = 60_000;
/// `terminal_wait`: default timeout and longest pattern.
pub const WAIT_DEFAULT_MS: u64 = 10_000;
pub const WAIT_PATTERN_MAX_CHARS: usize = 1024;
/// How often `terminal_wait`, `terminal_exec` and `terminal_run` report progress while
/// they wait, when the client asked for it.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// Keys per `terminal_keys` call, and characters per key name.
pub const MAX_KEYS: usize = 64;
pub const KEY_NAME_MAX_CHARS: usize = 16;
/// Scrollback lines `terminal_screen` returns at most.
pub const SCREEN_MAX_SCROLLBACK: u64 = 10_000;
/// `terminal_terminate.grace_ms` default and upper bound.
pub const GRACE_DEFAULT_MS: u64 = 500;
pub const GRACE_MAX_MS: u64 = 2_000;
/// How long after SIGKILL the controller waits for the leader before calling it lost.
pub const KILL_CONFIRM: Duration = Duration::from_secs(5);

/// A write that cannot be drained into the child's stdin within this time fails with
/// `INPUT_BACKPRESSURE` and closes stdin.
pub const WRITE_DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a session's end waits for a write in progress to record its input before the
/// recording is closed (a write is bounded by `WRITE_DRAIN_TIMEOUT`, a command's typing by
/// `EXEC_TYPING_TIMEOUT`; past this the recording closes without it).
pub const SINK_CLOSE_AFTER_WRITE: Duration = Duration::from_secs(2);
/// After the process ended, how long the readers may take to reach EOF before the output
/// is declared incomplete (a descendant escaped the group and holds the pipe).
pub const DRAIN_DEADLINE: Duration = Duration::from_millis(500);
/// A start whose spawn (fork, the child's setup, exec) has not returned by then fails, and
/// the child is killed: its program or cwd is on a file system that does not answer.
pub const SPAWN_DEADLINE: Duration = Duration::from_secs(10);
/// Spawner threads at most: one more starts when all are busy (some may be stuck in a
/// spawn until its deadline).
pub const SPAWNERS_MAX: usize = 4;
/// Spawner threads at most written off, each stuck for good opening a cwd on a file
/// system that does not answer, so that another takes its place.
pub const SPAWNERS_WRITTEN_OFF_MAX: usize = 64;
/// Processes at most (in a leader's tree and adopted by the server) for a leader's exit to
/// look for its session's groups on the async thread (a few small reads of `/proc`,
/// cheaper than a blocking thread and back); with more, the scan runs on a blocking thread.
pub const INLINE_SCAN_MAX: usize = 32;
/// Bytes read from a child's pipe per read call, at most.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;
/// A reader's first buffer, grown to `READ_CHUNK_BYTES` once a read fills it.
pub const READ_FIRST_BYTES: usize = 4 * 1024;

/// Secret names and values (SPEC §12).
pub const SECRET_NAME_MAX_CHARS: usize = 64;
pub const SECRET_MIN_BYTES: usize = 4;
pub const SECRET_MAX_BYTES: usize = 4096;
/// The longest line, with its end, a terminal reading lines keeps (Linux's N_TTY buffer):
/// what is typed past 4,095 bytes of a line is dropped.
pub const TERMINAL_LINE_MAX_BYTES: usize = 4096;
/// In a session whose profile allows secrets, a partial line of output is held back until
/// its newline, until no more of it came for `REDACT_HOLD_QUIET`, or for `REDACT_HOLD_MAX`
/// in all, whichever is first (a value printed in pieces each at most 50 ms apart is
/// redacted, within the total: the quiet time is twice that, so a program delayed by a
/// loaded machine is still covered); and at most `REDACT_HOLD_MAX_BYTES` of it.
pub const REDACT_HOLD_QUIET: Duration = Duration::from_millis(100);
pub const REDACT_HOLD_MAX: Duration = Duration::from_secs(1);
pub const REDACT_HOLD_MAX_BYTES: usize = 64 * 1024;

/// An asciicast recording is flushed this long after its first unflushed event, and
/// capped at this size.
pub const RECORDING_FLUSH_EVERY: Duration = Duration::from_millis(100);
pub const RECORDING_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Bytes of output queued for a session's emulator and for its recording past which a
/// reader, once its piece is queued, waits: what 16 reads of a pipe could queue. Counted in
/// bytes, not pieces, so a terminal's small reads (4 KiB at most) let its program run as far
/// ahead of the emulator.
pub const SINK_QUEUE_BYTES: usize = 16 * READ_CHUNK_BYTES;
/// How long `terminal_screen` waits for the emulator to catch up with the output.
pub const SCREEN_CATCH_UP: Duration = Duration::from_secs(2);

/// Client-supplied environment variables per start.
pub const MAX_CLIENT_ENV: usize = 32;

/// Ended sessions a `RECORD_LIMIT` error names, longest ended first.
pub const RECORD_LIMIT_ENDED_SHOWN: usize = 16;

/// Bytes of one client-supplied `NAME=value` (the kernel's per-string exec limit, 32
/// pages, less its NUL).
pub const MAX_ENV_ENTRY_BYTES: usize = 32 * 4096 - 1;
/// `command_id` length bounds.
pub const COMMAND_ID_MAX_CHARS: usize = 128;
/// Profiles per config.
pub const MAX_PROFILES: usize = 128;

/// Grace between SIGTERM and SIGKILL for sessions ended by server shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);
/// After shutdown ended every session, how long answers still in flight may take.
pub const SHUTDOWN_FLUSH: Duration = Duration::from_secs(1);

/// Global caps over all retained sessions: `max_records × buffer_records` and
/// `max_records × buffer_bytes`.
pub const CAP_TOTAL_RECORDS: u64 = 2_097_152;
pub const CAP_TOTAL_BYTES: u64 = 67_108_864;

/// Terminal rows and columns, in profiles and in `terminal_resize`.
pub const TERMINAL_MAX_SIZE: u16 = 1000;
/// Characters of a requested `cwd`.
pub const CWD_MAX_CHARS: usize = 4096;

/// Cells all retained sessions' terminal emulators may hold together: a vt100 cell is 32
/// bytes, so 256 MiB. Each session's emulator gets `1/max_records` of it for its screen, its
/// alternate screen and its scrollback, so the worst case of the whole server fits this
/// whatever the owner sets `max_records` to.
pub const CAP_TOTAL_EMULATOR_CELLS: usize = 8_388_608;

/// Cells of scrollback a PTY session's emulator may keep at most (about 6 MiB), within its
/// share of the cap above: 2,500 lines at 80 columns, 200 at 1,000; never more than the
/// lines below.
pub const SCROLLBACK_CELLS: usize = 200_000;
pub const SCROLLBACK_MAX_LINES: usize = 10_000;

/// Bytes of a terminal title kept (the emulator itself keeps at most 1 KiB of any OSC
/// string, so an unterminated one cannot grow the server).
pub const TITLE_MAX_BYTES: usize = 1024;

/// Whether a session awaits input: output in the last this long means not yet, and a wait
/// for input looks again at most this often while the output is quiet.
pub const AWAIT_QUIET: Duration = Duration::from_millis(20);
/// A wait on the input with a timeout under this long is a pause, not a wait for input,
/// until the session has been quiet this long (vim waits 100 ms as it exits).
pub const BRIEF_WAIT: Duration = Duration::from_millis(250);
pub const AWAIT_POLL: Duration = Duration::from_millis(10);

/// A one-shot run on a terminal types its input once the program reads, or once it has been
/// quiet this long and one of its threads reads while another is busy (never waiting, as
/// a whole, for input).
pub const RUN_TYPE_QUIET: Duration = Duration::from_secs(1);

/// A wait's pattern: each automaton compiled from it at most this large, each lazy DFA's
/// cache at most this large (cleared and refilled past it), its whole search at most this
/// large (else `INVALID_ARGUMENT`), and the searches of all client patterns held at once at
/// most this large together (else `INVALID_ARGUMENT` saying to wait). `\w{20}` takes about
/// 3 MiB, a plain pattern about 600 KiB (mostly cache room it may never use).
pub const PATTERN_NFA_BYTES: usize = 1 << 20;
pub const PATTERN_DFA_CACHE_BYTES: usize = 256 * 1024;
pub const PATTERN_MAX_BYTES: usize = 4 << 20;
pub const PATTERNS_TOTAL_BYTES: usize = 64 << 20;
/// Client patterns compiled at once (off the async thread); the others wait their turn.
pub const PATTERN_COMPILES_AT_ONCE: usize = 2;
/// A client's pattern of plain text (anchors, alternation and `*+?` allowed; no `.`,
/// class or counted repetition) at most this long is compiled on the worker that got it:
/// its search builds in 20 µs (a word) to 110 µs (`(a|b)` twelve times), about what a
/// hand-off to a thread and back costs the call.
pub const QUICK_PATTERN_MAX_BYTES: usize = 64;
/// Patterns whose automata are kept after their waits, for the next wait on the same one,
/// and the most they may hold together (`\$ $` holds 2 KB, `flood total: \d+` 9 KB,
/// `\w+@\w+` 149 KB).
pub const RECENT_PATTERNS: usize = 8;
pub const RECENT_PATTERNS_BYTES: usize = 512 * 1024;
/// Text a `terminal_wait` searches per step under the session lock.
pub const SEARCH_STEP_BYTES: usize = 64 * 1024;

/// `idle_timeout_ms` range of a profile, and the value `make-config --shells` writes.
pub const IDLE_TIMEOUT_MIN_MS: u64 = 100;
pub const IDLE_TIMEOUT_MAX_MS: u64 = 86_400_000;
pub const SHELL_IDLE_TIMEOUT_MS: u64 = 1_800_000;

/// `terminal_exec`: default time a command may take (bounded by `max_wait_ms`), bytes of
/// command text per line sent to the shell (far below a terminal's 4095-byte line limit),
/// and how long an interrupted shell may take to answer again before it is terminated.
pub const EXEC_DEFAULT_TIMEOUT_MS: u64 = 30_000;
pub const EXEC_LINE_BYTES: usize = 512;
pub const EXEC_INTERRUPT_SETTLE: Duration = Duration::from_secs(1);
/// How often a timeout's interrupt looks for programs the command line started since it
/// signalled (on a terminal, for a new program in the foreground), until the line ends or
/// `EXEC_INTERRUPT_SETTLE` passes.
pub const INTERRUPT_FOLLOW_EVERY: Duration = Duration::from_millis(25);
/// On a terminal, how many Ctrl-Cs a timeout's interrupt sends at most, one more each time
/// a new program of the command line took the foreground (looked at that often), within
/// `EXEC_INTERRUPT_SETTLE`.
pub const TERMINAL_INTERRUPTS: usize = 8;
/// On a terminal, how long a timeout's interrupt waits when the shell itself holds the
/// foreground (its programs done, its own builtins or prompt hook running) for the end
/// the command may be about to print: a Ctrl-C then would land at the prompt.
pub const EXEC_END_GRACE: Duration = Duration::from_millis(40);
/// How long `terminal_exec` waits for a terminal shell's next prompt to reach the reader
/// when the shell, in its own foreground, has just run a line typed some other way.
pub const EXEC_PROMPT_GRACE: Duration = Duration::from_millis(500);
/// How long a SIGINT for a shell on pipes waits for the shell to have set its trap for it
/// (it does with the first line it reads, as it starts).
pub const SHELL_START_GRACE: Duration = Duration::from_secs(2);
/// `terminal_exec.max_bytes`: bytes of a command's output returned (head and tail), range
/// and default (as `terminal_run`'s).
pub const EXEC_MIN_BYTES: u64 = 64;
/// How long typing a command into a shell may take (a shell reads what it is given at
/// once; a 1 MiB command line takes well under a second).
pub const EXEC_TYPING_TIMEOUT: Duration = Duration::from_secs(10);
/// A terminal shell's integration: how long it may take to answer, and how much of the
/// shell's output is held meanwhile (past either, the integration is given up: commands
/// are wrapped, and what the shell printed is shown).
pub const INSTALL_WITHIN: Duration = Duration::from_secs(10);
pub const INSTALL_HELD_MAX_BYTES: usize = 64 * 1024;

/// `terminal_run.max_bytes`: bytes of each stream's head and tail returned, range and
/// default. At 64 bytes and more, every piece a long line is cut into (an eighth of the
/// budget, and a character's bytes more) fits the tail.
pub const RUN_MIN_BYTES: u64 = 64;
pub const RUN_MAX_BYTES: u64 = 1_048_576;
pub const RUN_DEFAULT_BYTES: u64 = 65_536;

/// HTTP transport: the default listen address, the largest request body, the most MCP
/// sessions kept at once and how long an idle one lives.
pub const HTTP_DEFAULT_LISTEN: &str = "127.0.0.1:8765";
pub const HTTP_MAX_BODY_BYTES: usize = 1024 * 1024;
pub const MAX_MCP_SESSIONS: usize = 64;
pub const MCP_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);
/// HTTP transport: how long an answer is kept for a client that reconnects after its
/// connection dropped (rmcp's own replay of a finished stream would keep it 60 s); the most
/// answers kept at once for one MCP session, and the bytes of text they hold over all of them;
/// the most streams of one MCP session whose request is noted at once (running requests,
/// and answered ones for as long as their answer is kept).
pub const KEPT_ANSWER_FOR: Duration = Duration::from_secs(60);
pub const KEPT_ANSWERS: usize = 16;
pub const KEPT_ANSWER_BYTES: usize = 1024 * 1024;
pub const KEPT_STREAMS: usize = 1024;
/// Both HTTP listeners: connections served at once; how long a client may take to send a
/// request head (from connecting, or from the end of the previous answer); how long a
/// connection may move no byte either way; how long accepting pauses when the server is
/// out of descriptors; how long a displaced connection may take to give up its place.
pub const HTTP_MAX_CONNECTIONS: usize = 128;
pub const HTTP_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
pub const HTTP_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
pub const HTTP_ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// The most a connection's read buffer holds, and so the longest request head: room for
/// the token and a browser's cookies for `localhost` several times over; at the
/// connections' limit, 4 MiB in all.
pub const HTTP_MAX_HEAD_BYTES: usize = 32 * 1024;
/// The most often one kind of refusal an unauthenticated request causes is logged.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);
/// Log lines waiting for stderr, at most: past them a line is dropped (and counted), never
/// waited for.
pub const LOG_LINES_QUEUED: usize = 1024;
/// How long the last log lines may take to reach stderr at exit.
pub const LOG_FLUSH_AT_EXIT: Duration = Duration::from_millis(500);
pub const HTTP_EVICTION_WAIT: Duration = Duration::from_secs(1);
/// Bearer token: the fewest characters accepted, and the largest token file read.
pub const TOKEN_MIN_CHARS: usize = 32;
pub const TOKEN_MAX_BYTES: usize = 4096;

/// Live view (`--web`): the fewest milliseconds between two updates one page receives (a
/// flooding session is rendered at most this often per watcher, and new output shows within
/// it), how often the session list is looked at, and how much of a pipe session's output
/// its page shows (the newest characters, then the newest lines of those).
pub const WEB_UPDATE_EVERY: Duration = Duration::from_millis(100);
pub const WEB_LIST_EVERY: Duration = Duration::from_millis(200);
pub const WEB_TAIL_CHARS: u64 = 16_384;
pub const WEB_TAIL_LINES: usize = 200;
/// Live-update streams open at once; past it a page gets 503 and retries.
pub const WEB_MAX_WATCHERS: usize = 64;
/// A sign-in code of the live view is void this long after it was issued (and once used),
/// and at most this many unspent ones are kept (past it the oldest is void).
pub const WEB_SIGN_IN_CODE_TTL: Duration = Duration::from_secs(10 * 60);
pub const WEB_SIGN_IN_CODES_MAX: usize = 16;

/// Owner control (`--web-control`): the per-page tokens a control request must carry; past
/// this many the oldest page's token is void (that page must be reloaded to act again).
pub const WEB_PAGE_TOKENS_MAX: usize = 256;

/// `stdio --web` without an address: where the live view listens unless the config's
/// `web_listen` says otherwise, so its address stays the same from one launch to the next;
/// when the port is taken, the next free one of this many is used (with a warning).
pub const WEB_DEFAULT_LISTEN: &str = "127.0.0.1:8766";
pub const WEB_LISTEN_TRIES: u16 = 20;

/// Recordings played or downloaded in the live view at once (each holds its file, and a
/// player its parsed copy and an emulator).
pub const WEB_MAX_PLAYERS: usize = 4;

/// How much output before a page read with `strip_ansi` is parsed first, in code points,
/// so a page that begins inside an escape sequence (a title or hyperlink longer than the
/// page before it) strips the rest of it: longer than any sequence a program sends.
pub const STRIP_CONTEXT_CHARS: u64 = 1024;
