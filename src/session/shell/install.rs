//! What is typed into a shell to integrate it, and the wrapper for shells without hooks.
//!
//! The integration, typed once when a terminal shell starts (and hidden: the session shows
//! nothing of the shell's output until the integration's first mark), makes the shell print
//! invisible marks carrying the session's nonce:
//! - bash: `PROMPT_COMMAND` prints the end of a command with its status (to `/dev/tty`, so
//!   redirecting the shell's own stdout or stderr cannot lose it; from bash 5.1 a second
//!   element prints it should a command replace the first), `PS0` the start of one;
//!   readline is put in emacs mode with bracketed paste (so a pasted command is inserted as
//!   text, tabs and newlines included, and readline's end of paste marks where its echo
//!   ends), and back in emacs mode at each prompt should a command change it (`set -o vi`
//!   in a sourced `.bashrc`), as the start mark goes back in front of `PS0` should a
//!   command replace it; `PS2` begins with the continuation mark (readline prints it only
//!   once it has run a pasted line's whole commands and asks for more: the line is
//!   unfinished), put back the same way, as is the shell's stderr, where bash prints
//!   that start mark and readline its echo, should a command send it elsewhere (`exec
//!   2>/dev/null`); history expansion is off (`!` is plain text, as on pipes),
//!   and the shell's history goes nowhere (`HISTFILE=/dev/null`: a `history -a` in a
//!   `PROMPT_COMMAND` still succeeds, which under `set -e` matters; exported, so a bash
//!   started inside the session neither reads the user's history file nor writes to it);
//!   the first element of
//!   `PROMPT_COMMAND` begins with the hook, put back there at each prompt should a command
//!   replace that element or put a command of its own before the hook;
//! - other POSIX shells (dash): `PS1` prints the end mark with `$?` (dash expands
//!   parameters in its prompt; text put before it would print before the end, into the
//!   command's output, so a virtualenv's `activate` is told not to: it prepends `(venv) `
//!   unless `VIRTUAL_ENV_DISABLE_PROMPT` is set), `PS2` a mark of its own (continuation lines of a multi-line
//!   command print no prompt into its output, each line is typed once the shell asked for
//!   it, and a command line the shell asks more of than was typed is unfinished). So does
//!   bash without readline.
//!
//! Then it prints the `I` mark saying how commands are typed: `readline` or `canonical`.

use std::fmt::Write;

use crate::limits::EXEC_LINE_BYTES;
use crate::process::{MARKS_FD, STDERR_COPY_FD, STDOUT_COPY_FD};

/// The OSC sequence that frames every mark, as printf escapes.
const OSC: &str = "\\033]6973;";
const BEL: &str = "\\007";

/// A fresh nonce: 128 random bits in hex.
pub fn new_nonce() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Where bash 5.1 and later keep a second hook in the `PROMPT_COMMAND` array, which prints
/// the end mark when the first element's did not at this prompt (`__mt_f` unset): a
/// command that sets `PROMPT_COMMAND='history -a'` (as many a `.bashrc` does) replaces the
/// first element only, and one that sets `PROMPT_COMMAND="history -a; $PROMPT_COMMAND"`
/// puts a command before the hook, which then would see that command's `$?`. Each element
/// sees the command's own `$?`. `__mt_d` called from the first element (no argument) when
/// that element does not begin with the hook (`__mt_h`) leaves the end to this one, and
/// either call puts the hook back first, the hook's text in the rest replaced by `__mt_q`
/// (which gives the status on); eight times at most (`__mt_c`): a framework that puts
/// itself first at every prompt (bash-preexec) then keeps its place, and its output shows
/// in commands' output, rather than the two growing the element without end. The hook
/// gives `$?` back to the commands after it in its element, but under `set -e`, where a
/// hook that fails ends the shell (a failed `a && b` does not).
const GUARD_INDEX: u32 = 6973;

/// What puts bash's stderr back on the terminal after a command sent it elsewhere (`exec
/// 2>/dev/null`): bash prints its start mark and readline its echo there. `__mt_d` sees
/// the shell's stderr as its fd 3 (outside the hook's own `2>/dev/null`) and sets
/// `__mt_r='eval exec 2>/dev/tty'` when it is no terminal. Otherwise `__mt_r` is empty and
/// this is a command of no words: nothing runs, and `set -x` traces nothing. It must run
/// outside a redirected group (which would undo the `exec`), after the hook: in bash 5.1
/// and later at the end of the guard's element; before, in the first element, followed
/// by `__mt_q`, which gives that element's later commands the command's `$?` again. A
/// closed stderr (`exec 2>&-`) fails the hook's `3>&2` (and `__mt_q` after it keeps that
/// failure from ending a shell under `set -e`): `__mt_d` then runs again with
/// only `2>/dev/null` (fd 3 no terminal, so the restore follows), the command's status
/// taken first in a group that closes stderr for a moment (never fails, traces nothing).
const RESTORE: &str = "$__mt_r";

/// The line that integrates a terminal shell (without its Enter).
pub fn install_line(nonce: &str) -> String {
    format!(
        "__mt_n={nonce}; if [ -n \"${{BASH_VERSION-}}\" ]; then \
         __mt_d() {{ local s=${{1-$?}} p=${{PROMPT_COMMAND[0]-}}; __mt_s=$s; \
         if [[ $p != \"$__mt_h\"* ]]; then (( ${{__mt_c:-0}} < 8 )) && {{ __mt_c=$(( ${{__mt_c:-0}} + 1 )); \
         PROMPT_COMMAND[0]=$__mt_h\\;${{p//\"$__mt_h\"/'{{ __mt_q; }} 2>/dev/null'}}; }}; \
         [[ $# -gt 0 ]] || return $s; fi; __mt_f=1; [[ -o vi ]] && set -o emacs; \
         if [[ -t 3 ]]; then __mt_r=; else __mt_r='eval exec 2>/dev/tty'; fi; \
         [[ ${{PS0-}} == *\"$__mt_n\"* ]] || PS0='\\e]6973;'\"$__mt_n\"';C\\a'\"${{PS0-}}\"; \
         [[ ${{PS2-}} == *\"$__mt_n\"* ]] || {{ [[ $__mt_k == readline ]] && PS2=$__mt_p${{PS2-}} || PS2=$__mt_p; }}; builtin printf '{OSC}%s;D;%s{BEL}' \"$__mt_n\" \"$s\" >/dev/tty; [[ $- == *e* ]] || return $s; }}; \
         __mt_q() {{ [[ $- == *e* ]] || return $__mt_s; }}; __mt_o=${{PROMPT_COMMAND-}}; \
         if [ \"${{BASH_VERSINFO[0]}}${{BASH_VERSINFO[1]}}\" -ge 51 ]; then \
         __mt_h='{{ __mt_d; }} 3>&2 2>/dev/null || {{ __mt_q; }} 2>/dev/null'; \
         PROMPT_COMMAND=\"$__mt_h${{__mt_o:+;$__mt_o}}\"; \
         PROMPT_COMMAND[{GUARD_INDEX}]='{{ __mt_e=$?; }} 2>&-;{{ [[ -n ${{__mt_f-}} ]] || __mt_d $__mt_e; __mt_f=; }} 3>&2 2>/dev/null || {{ [[ -n ${{__mt_f-}} ]] || __mt_d $__mt_e; __mt_f=; }} 2>/dev/null;{RESTORE}'; \
         else __mt_h='{{ __mt_e=$?; }} 2>&-;{{ __mt_d $__mt_e; :; }} 3>&2 2>/dev/null || {{ __mt_d $__mt_e; }} 2>/dev/null;{RESTORE};{{ __mt_q; }} 2>/dev/null'; \
         PROMPT_COMMAND=\"$__mt_h${{__mt_o:+;$__mt_o}}\"; fi; unset __mt_o; __mt_r=; \
         PS0='\\e]6973;'\"$__mt_n\"';C\\a'\"${{PS0-}}\"; set +H; export HISTFILE=/dev/null; \
         history -d -1 2>/dev/null; \
         if shopt -oq emacs || shopt -oq vi; then set -o emacs; \
         bind 'set enable-bracketed-paste on' 2>/dev/null; bind 'set enable-active-region off' 2>/dev/null; __mt_k=readline; \
         __mt_p='\\[\\e]6973;'\"$__mt_n\"';P\\a\\]'; PS2=$__mt_p${{PS2-}}; \
         else __mt_p=\"$(builtin printf '{OSC}%s;P{BEL}' \"$__mt_n\")\"; PS2=$__mt_p; __mt_k=canonical; fi; \
         else PS1=\"$(command printf '{OSC}%s;D;' \"$__mt_n\")\"'$?'\"$(command printf '{BEL}')$PS1\"; \
         export VIRTUAL_ENV_DISABLE_PROMPT=1; PS2=\"$(command printf '{OSC}%s;P{BEL}' \"$__mt_n\")\"; \
         __mt_k=canonical; fi; command printf '{OSC}%s;I;%s;%s{BEL}' \"$__mt_n\" \"$__mt_k\" \"$$\" >/dev/tty"
    )
}

/// `command printf` of the mark of `kind` (with `data` format and arguments), the nonce
/// given in two halves so that the whole nonce never appears in what is typed (a terminal
/// echoes it). Its last argument is never a half of the nonce: bash gives the next command
/// the last argument of the one before it as `$_`, and a start mark comes right before the
/// command (which then finds `$_` empty).
fn print_mark(nonce: &str, kind: &str, data_format: &str, data_args: &str) -> String {
    let (a, b) = nonce.split_at(nonce.len() / 2);
    let (tail_format, tail_args) = match data_args {
        "" => ("%s", " ''"),
        _ => ("", ""),
    };
    format!(
        "command printf '{OSC}%s%s;{kind}{data_format}{BEL}{tail_format}' {a} {b}{data_args}{tail_args}"
    )
}

/// What a command that left the wrapper's loop (`break` or `continue` outside a loop of its
/// own) is told on its stderr: the rest of its line did not run.
const STRAY_LEAVE: &str = "mcp-terminal: break or continue outside a loop ended this command \
    line there; the rest of it did not run";

/// The command as the text of a double-quoted word, for a shell reading a pipe: only
/// `$`, `` ` ``, `\` and `"` need a backslash there.
fn double_quoted(command: &str) -> String {
    let mut out = String::with_capacity(command.len() + 16);
    for c in command.chars() {
        if matches!(c, '$' | '`' | '\\' | '"') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The command as a printf format inside double quotes, for a terminal: only printable
/// ASCII other than `$ ` \ " ! %` and UTF-8 beyond ASCII are typed as they are; control
/// characters, which a terminal's line discipline or readline would act on, become octal
/// escapes. Lines are cut (backslash-newline inside double quotes) so a terminal's
/// canonical line limit never truncates them.
fn printf_format(command: &str) -> String {
    let mut out = String::with_capacity(command.len() + 16);
    let mut line = 0;
    for c in command.chars() {
        if line >= EXEC_LINE_BYTES {
            out.push_str("\\\n");
            line = 0;
        }
        let escaped = c.is_ascii() && (c.is_ascii_control() || "$`\\\"!%".contains(c));
        if escaped {
            let _ = write!(out, "\\{:03o}", c as u32);
            line += 4;
        } else {
            out.push(c);
            line += c.len_utf8();
        }
    }
    out
}

/// The line that sees whether a shell on pipes reads commands, after text written to it
/// some other way: it prints the probe mark on the marks pipe when run, through `__mt_p`,
/// which keeps the status the text's last command line ended with for the next command's
/// `$?` (`__mt_q`, see `pipe_wrapper`), or itself in a shell not set up (one the text
/// `exec`'d). It begins with a newline (ending a line the text left open) and holds no
/// quote, `$`, backquote or unescaped `;` of its own (its escapes are backslashes), so
/// inside a quote or a here-document the text left open it is text, and does nothing.
///
/// Only the first probe after text was written keeps the status (`capture`): one sent again
/// with nothing written since (a call refused while that text still ran, then called
/// again) may run right after the first, where `$?` is the first probe's own 0.
pub fn probe_line(nonce: &str, capture: bool) -> String {
    let (a, b) = nonce.split_at(nonce.len() / 2);
    let mark =
        format!("command printf \\\\033]6973\\;%s%s\\;R\\\\007 {a} {b} 2>/dev/null >&{MARKS_FD}");
    if capture {
        format!("\n__mt_p {a} {b} 2>/dev/null || {mark}\n")
    } else {
        format!("\n{mark}\n")
    }
}

/// What a shell on pipes runs before anything else (written to its stdin as it starts,
/// ahead of any input): `setup` in a compound whose stderr is /dev/null (a trace under
/// `sh -x`, and a program that is no shell, say nothing there). One command (its line
/// breaks are quoted), under `PIPE_BUF` so it is written whole at once.
pub fn pipe_prepare(nonce: &str) -> String {
    format!("case $- in *) {} ;; esac 2>/dev/null\n", setup(nonce))
}

/// The traps that let an interrupt end a command line and keep the shell alive, and what
/// the wrapper (`pipe_wrapper`) uses. Each command ends with `; `.
fn setup(nonce: &str) -> String {
    let mut text = String::new();
    // Its variables are the shell's own, never exported (`set -a` is off while they are
    // set, and on again after): a shell `exec`'d from this one lacks them as it lacks the
    // rest, and no program sees them.
    text.push_str("case $- in *a*) set +a; __mt_aa=1;; esac; ");
    // A non-interactive bash expands aliases only when asked; guarded for dash.
    text.push_str("[ -n \"${BASH_VERSION-}\" ] && shopt -s expand_aliases; ");
    // An interrupt ends the command line where it is, as Ctrl-C ends a terminal
    // shell's: SIGWINCH to the shell (ignored by default, so never fatal, where SIGINT
    // would end a shell without a trap, and a waiting bash whatever its traps) runs
    // this once the running program ended: out of every loop, the wrapper's one-pass
    // loop included, its trace hidden. Under `set -e` a program stopped there (a
    // command substitution's, which the shell reads rather than waits for) would end the
    // shell: inside a command's wrapper (`__mt_l` is 1 there; unset, under `set -u`, before
    // the first) the trap, which the shell runs before it looks at `set -e`, turns it off
    // when it was on, and the wrapper turns it on again after the command (`__mt_ee`).
    text.push_str(
        "trap '{ __mt_b=1; case ${__mt_l-}$- in 1*e*) set +e; __mt_ee=1;; esac; break 99; } \
         2>/dev/null' WINCH; ",
    );
    // Ctrl-C sent to the programs a shell waits for (a timeout's interrupt,
    // `terminal_signal` SIGINT): SIGURG (ignored by default too) runs this once the
    // program ends, which ends the line only when the program died of the SIGINT
    // (status 130), as a terminal shell does; one that survived it leaves the line
    // running. The `wait` builtin returns at once when a trapped signal comes, with
    // 128 + its number (151), and a job it waits for ignores SIGINT: that ends the line
    // too, as Ctrl-C ends a `wait` at a terminal. SIGINT itself, sent to the group the
    // shell and its programs share on pipes (`terminal_signal`'s default), runs it too:
    // a shell without a trap for it (dash, any `sh`) would die of it, where a terminal
    // never sends it to an interactive shell. Caught, it is the default again in the
    // programs the shell starts. Under `set -e`, as for SIGWINCH.
    text.push_str(
        "trap '{ case $? in 130|151) __mt_b=1; case ${__mt_l-}$- in 1*e*) set +e; \
         __mt_ee=1;; esac; break 99;; esac; } 2>/dev/null' URG INT; ",
    );
    // bash runs it after a `!` turned the 130 into 0 (`while ! curl …; do …`): there
    // `PIPESTATUS` still holds the statuses the pipeline's programs ended with. bash
    // has it for SIGINT too: a command substitution whose program died of SIGINT
    // (`x=$(slow)`) makes bash send itself SIGINT, "to break out of loops", which
    // would end a shell without a trap. And bash runs a trap that came while it waited
    // for a subshell (`(cd src && make); deploy`) only at the end of the next command,
    // unless an ERR trap runs first, as it does when the subshell fails: it runs the
    // pending trap before its own. So an ERR trap that does nothing, but keeps `$_` (the
    // last argument of the command that failed) as it was. bash, too, runs a trap that
    // came while it waited before it looks at `set -e`, where `$?` may not hold the
    // program's status yet: `PIPESTATUS` does.
    text.push_str(
        "[ -n \"${BASH_VERSION-}\" ] && trap '{ case \"$? ${PIPESTATUS[*]} \" in \
         130\\ *|151\\ *|*\\ 130\\ *) __mt_b=1; case ${__mt_l-}$- in 1*e*) set +e; \
         __mt_ee=1;; esac; break 99;; esac; } 2>/dev/null' URG INT \
         && trap '{ : \"$_\"; } 2>/dev/null' ERR; ",
    );
    // What gives a command the status the one before it ended with as its `$?`: a
    // function's return (no fork).
    text.push_str("__mt_v() { return $1; }; ");
    // The session's nonce, in two halves (the whole never typed: see `print_mark`), for
    // the marks the functions below print: no command's line repeats it.
    let (a, b) = nonce.split_at(nonce.len() / 2);
    let _ = write!(text, "__mt_i={a} __mt_j={b}; ");
    // The wrapper's own work before and after a command (see `pipe_wrapper`): defined once
    // here, so a command's line stays short (bash on a pipe reads its input a byte at a
    // time, a system call each). Each fails (status 1) in a shell that lacks the nonce,
    // which the wrapper then sets up again. Before: `set -a` off (noted in `__mt_aa`) and,
    // when it was on, the variables the wrapper sets where it may be on (in a trap, in the
    // probe, at the line's start) made the shell's own again (`__mt_m`: a copy, `unset`,
    // then set), the start mark on the session's stdout and stderr, the trace turned off,
    // under `set -e` the line that keeps the status (`__mt_t`, see `pipe_wrapper`), and the
    // line that begins the `eval` (`__mt_P`): `set -x` and `set -a` on again if they were,
    // and the status the command before ended with given back as `$?` (a function's return,
    // as the first command of an `&&` list, which neither `set -e` nor an `ERR` trap acts
    // on, whose second returns 0 when the first did; the last argument of either is empty,
    // and so is `$_`), its trace hidden; empty when there is nothing to give back. After:
    // `set -a` off again (noted), the status of a line that left the wrapper's loop,
    // `set -e` on again if an interrupt turned it off, the trace off, the end mark with the
    // status, and `set -a` on again if the command left it on, once the variables a command
    // under it may have exported are the shell's own again (`__mt_m`).
    let _ = write!(
        text,
        "__mt_a() {{ [ -n \"${{__mt_i-}}\" ] || return 1; \
         case $- in *a*) set +a; __mt_aa=1; __mt_m;; *) __mt_aa=;; esac; __mt_b= __mt_e=; \
         command printf '{OSC}%s%s;C{BEL}' \"$__mt_i\" \"$__mt_j\" >&{STDOUT_COPY_FD}; \
         command printf '{OSC}%s%s;C{BEL}' \"$__mt_i\" \"$__mt_j\" >&{STDERR_COPY_FD}; \
         case $- in *x*) __mt_x=1; set +x;; esac; \
         case $- in *e*) __mt_t=$__mt_w;; *) __mt_t=;; esac; \
         __mt_P=${{__mt_aa:+'set -a; '}}${{__mt_x:+'set -x; '}}; \
         case $__mt_P${{__mt_s:-0}} in 0) ;; *) \
         __mt_P=\"{{ ${{__mt_P}}__mt_v ${{__mt_s:-0}} '' && __mt_v 0 ''; }} 2>/dev/null\n\";; esac; }}; \
         __mt_w='

{{ __mt_e=$?; }} 2>/dev/null'; \
         __mt_p() {{ __mt_q=$?; command printf '{OSC}%s%s;R{BEL}' \"$1\" \"$2\" >&{MARKS_FD}; }}; \
         __mt_o() {{ case $- in *a*) set +a; __mt_aa=1;; *) __mt_aa=;; esac; \
         __mt_l=${{__mt_l:+2}}; case $- in *x*) __mt_x=1; set +x;; *) __mt_x=;; esac; \
         case $- in *v*) __mt_vv=1; set +v;; esac; }}; \
         __mt_z() {{ [ -n \"${{__mt_i-}}\" ] || return 1; \
         case $- in *a*) set +a; __mt_aa=1;; esac; \
         case $__mt_l,$__mt_b in 1,*|2,1) __mt_s=130;; 2,) __mt_s=1; \
         command printf '%s\\n' '{STRAY_LEAVE}' >&{STDERR_COPY_FD};; esac; \
         case ${{__mt_ee-}} in 1) __mt_ee=; set -e;; esac; \
         case ${{__mt_vv-}} in 1) __mt_vv=; set -v;; esac; \
         case $- in *x*) __mt_x=1; set +x;; esac; \
         command printf '{OSC}%s%s;D;%s{BEL}' \"$__mt_i\" \"$__mt_j\" \"$__mt_s\" >&{MARKS_FD} || \
         command printf '{OSC}%s%s;D;%s{BEL}' \"$__mt_i\" \"$__mt_j\" \"$__mt_s\" >&{STDOUT_COPY_FD}; \
         case ${{__mt_aa-}} in 1) __mt_m; set -a;; esac; }}; \
         __mt_m() {{ __mt_c=${{__mt_s-}}; unset __mt_s __mt_q __mt_b __mt_e __mt_ee __mt_l; \
         __mt_s=$__mt_c; }}; "
    );
    // Set up (what `pipe_wrapper` tests).
    text.push_str("__mt_u=1; ");
    // All of it is kept as text (`__mt_S`) and run from there: the wrapper sets the shell up
    // again with it should a command have removed the functions (`unset -f`; the command
    // would never end), and the shell reads it once (`set -a` off first, so that the
    // variable is the shell's own).
    let again = format!("{text}{ALLEXPORT_AGAIN}").replace('\'', "'\\''");
    format!("case $- in *a*) set +a; __mt_aa=1;; esac; __mt_S='{again}'; eval \"$__mt_S\"; ")
}

/// The end of the setup: `set -a` on again if it was.
const ALLEXPORT_AGAIN: &str = "case ${__mt_aa-} in 1) __mt_aa=; set -a;; esac; ";

/// The wrapper for a shell on pipes: the start mark on the session's stdout and stderr
/// pipes (through the copies made at spawn, so an earlier `exec >file` never gets a mark
/// in its file), where the command's output on each begins; the command (stdin from
/// /dev/null, so it cannot eat the shell's own input; the copies and the marks pipe closed,
/// so no program it starts holds them, and restored after it); the end mark with its status on the marks
/// pipe (`MARKS_FD`), which no output can fill or delay (on the stdout copy, should that
/// descriptor have been closed). `pipe_prepare` came first; with `set_up` (text was
/// written to the shell since its last command, or this is its first) a shell that lacks
/// what it set up (one `exec`'d since) is set up first.
///
/// The shell's trace (`set -x`) shows the command alone: the wrapper turns it off around
/// itself, in `case` bodies whose stderr is /dev/null (a shell writes the trace of a simple
/// command before its own redirections, and of a compound's body to the compound's
/// stderr), notes it in `__mt_x`, and turns it on again inside the `eval`, on a line of its
/// own (`__mt_P`, so it runs even when the command does not parse). So with `set -a`: the
/// wrapper's own variables are never exported, and a program the command starts sees none
/// of them. Each line begins with a simple command: after a syntax error in `eval` (or a
/// trailing `\` at its end), bash fails to parse a line that begins with `case` or `{`.
/// The first begins with one that expands to no word whatever the variables hold
/// (`${?:+}`, see below), unless the setup comes first.
///
/// The line names no nonce: the setup keeps it in the shell (`__mt_i`, `__mt_j`), and a
/// shell that lacks it (or the functions) is set up again from `__mt_S`.
///
/// The end mark (`__mt_z`) is on a line of its own: under `set -m`, bash drops the rest of
/// the line a program ended by SIGINT was on, traps unrun, and the mark on that line would
/// never come. Before it, `__mt_o` notes that the first line ran to its end (a `break`
/// out of the wrapper's loop left `__mt_l` at 1: 2 now), turns the trace off, and
/// `set -v` off while the second line is read (it would print it in the command's
/// stderr; `__mt_z` turns it on again); a line cut short leaves `__mt_l` at 1, which
/// `__mt_z` reads as an interrupt (130). The second line begins with a simple command
/// that expands to no word whatever the variables hold (`${?:+}`): bash traces nothing
/// of it (dash an empty `+ `, should the trace still be on there), and runs it without a
/// fork, where it runs a redirection alone (`</dev/null`) in a child of its own. It ends
/// with the command's status as `$?` (`__mt_v`, in an `&&` list, which neither `set -e`
/// nor an `ERR` trap acts on), so that a line typed after it that runs nothing (an empty
/// one, a comment) leaves that status to the probe.
///
/// `command` is quoted (`\command`), so no alias of that name (expanded in dash, and in
/// bash, where the setup turns aliases on) stands in for it. The command's text ends with
/// a newline, so a trailing `\` joins it and is dropped, as in a script.
///
/// A command's `$?` as it begins is the status the one before it ended with, as in a
/// terminal shell (`false`, then `echo $?`, prints 1): the wrapper's own commands in between
/// would leave 0, so the `eval`'s first line (`__mt_P`) gives it back (see `setup`). When
/// that status is 0 (most often) and neither the trace nor `set -a` was on, the wrapper's
/// own commands left it so already: the line is empty.
///
/// Under `set -e`, a command line whose last list fails where `set -e` lets it (`[ -f x ]
/// && make`) leaves the shell running when the shell reads it itself, but `eval` of it
/// returns that status, a failure `set -e` ends the shell for. So the `eval`'s text then
/// ends with a line of its own (after an empty one, which ends a trailing backslash's
/// line) that keeps the command's status in `__mt_e`, its trace hidden: the `eval`
/// returns 0 unless the command ended the shell itself.
pub fn pipe_wrapper(command: &str, nonce: &str, set_up: bool) -> String {
    // A shell the first one `exec`'d (`exec bash`, typed with terminal_write) was never
    // set up: after text was written to the shell, it is set up now if it lacks what the
    // setup leaves (an unexported variable, which a shell `exec`'d since has not). Only
    // then: for a shell that reads its input a byte at a time (bash on a pipe), every byte
    // of the wrapper costs a system call. The line begins with a simple command (see
    // below); the setup's own commands keep their stderr quiet. It keeps `$?` first: what
    // was written ran as command lines of the shell's own, and the command sees the last
    // one's status as `$?`, as in a terminal (`false` typed, then `echo $?`, prints 1):
    // the status the probe line found (`__mt_q`), which ran after them.
    let mut text = String::new();
    if set_up {
        let _ = write!(
            text,
            "__mt_s=${{__mt_q:-$?}}; unset __mt_q; [ -n \"${{__mt_u-}}\" ] || {{ {}}} 2>/dev/null; ",
            setup(nonce)
        );
    }
    // The wrapper's own commands before and after the command are each in one compound
    // whose stderr is /dev/null (a closed descriptor says nothing; a trace goes nowhere):
    // a shell saves and restores a descriptor for every redirection, half a dozen system
    // calls each. The last argument of the last simple command before the `eval` is empty,
    // and so is `$_`.
    if !set_up {
        text.push_str("${?:+}; ");
    }
    let _ = writeln!(
        text,
        "case $- in *) __mt_a '' || {{ eval \"${{__mt_S-}}\"; __mt_a ''; }};; esac 2>/dev/null; \
         for __mt_l in 1; do \\command eval \"${{__mt_P-}}{}\n$__mt_t\" \
         </dev/null {STDERR_COPY_FD}>&- {STDOUT_COPY_FD}>&- {MARKS_FD}>&-; \
         {{ __mt_s=${{__mt_e:-$?}} __mt_l=; }} 2>/dev/null; done; {{ __mt_o; }} 2>/dev/null
${{?:+}}; case $- in *) __mt_z || {{ eval \"${{__mt_S-}}\"; __mt_z; }}; \
         __mt_v $__mt_s&&:;; esac 2>/dev/null",
        double_quoted(command)
    );
    text
}

/// The wrapper a terminal shell without the integration runs a command in (it shows on
/// the screen): marks on the terminal around the command.
pub fn terminal_wrapper(command: &str, nonce: &str) -> String {
    format!(
        "{}; command eval \"$(command printf \"{}\")\"; {}\n",
        print_mark(nonce, "C", "", ""),
        printf_format(command),
        print_mark(nonce, "D", ";%s", " \"$?\"")
    )
}

/// What a canonical (line-discipline) shell is given for `command`: the command itself
/// when the terminal can take it as typed (no control characters but tab and newline, no
/// line over the terminal's limit), else the command inside `eval` of its printf escapes.
/// Several lines go in a `{ }` group, so the shell runs them as one command and shows its
/// prompt once, after the last.
pub fn canonical_text(command: &str) -> String {
    let plain = command
        .chars()
        .all(|c| c == '\t' || c == '\n' || !c.is_control())
        && command
            .split('\n')
            .all(|line| line.len() <= EXEC_LINE_BYTES);
    if plain && command.trim_end_matches('\n').contains('\n') {
        format!("{{\n{command}\n}}\n")
    } else if plain {
        format!("{command}\n")
    } else {
        format!(
            "command eval \"$(command printf \"{}\")\"\n",
            printf_format(command)
        )
    }
}

/// What a readline shell is given for `command`: the line being typed is killed (start of
/// line, kill to its end), then the command is pasted as it is, unless it holds control
/// characters (other than tab and newline) that the terminal would act on even inside a
/// paste (Ctrl-C, Ctrl-Z, flow control): then what is pasted is `eval` of its printf
/// escapes.
pub fn readline_text(command: &str) -> Vec<u8> {
    let pasted = if command
        .chars()
        .all(|c| c == '\t' || c == '\n' || !c.is_control())
    {
        command.to_owned()
    } else {
        format!(
            "command eval \"$(command printf \"{}\")\"",
            printf_format(command).replace("\\\n", "")
        )
    };
    format!("\u{1}\u{b}\u{1b}[200~{pasted}\u{1b}[201~\r").into_bytes()
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn the_preparation_is_written_whole_at_once() {
        let text = pipe_prepare(&new_nonce());
        assert!(text.len() < libc::PIPE_BUF, "{}", text.len());
        assert!(text.ends_with(" ;; esac 2>/dev/null\n"));
    }

    #[test]
    fn a_command_line_on_pipes_is_short() {
        // bash on a pipe reads it a byte at a time.
        let nonce = new_nonce();
        let line = pipe_wrapper("true", &nonce, false);
        assert!(line.len() < 400, "{} bytes: {line}", line.len());
        assert!(pipe_wrapper("true", &nonce, true).contains("__mt_u"));
    }

    #[test]
    fn the_whole_nonce_is_never_typed() {
        let nonce = new_nonce();
        for text in [
            pipe_prepare(&nonce),
            pipe_wrapper("echo hi", &nonce, true),
            terminal_wrapper("echo hi", &nonce),
        ] {
            assert!(!text.contains(&nonce), "{text}");
        }
    }

    #[test]
    fn printf_escapes_only_what_the_terminal_or_shell_would_act_on() {
        assert_eq!(
            printf_format("echo \"$HOME\" `x` \\ ! 100% it's\té€\n"),
            "echo \\042\\044HOME\\042 \\140x\\140 \\134 \\041 100\\045 it's\\011é€\\012"
        );
        let long = printf_format(&"a".repeat(EXEC_LINE_BYTES * 2 + 1));
        assert_eq!(long.split("\\\n").count(), 3);
        assert_eq!(double_quoted("a\"$b`c\\d€"), "a\\\"\\$b\\`c\\\\d€");
    }

    #[test]
    fn a_canonical_shell_gets_plain_lines_when_it_can() {
        assert_eq!(canonical_text("echo a"), "echo a\n");
        assert_eq!(
            canonical_text("echo a\n\techo b"),
            "{\necho a\n\techo b\n}\n"
        );
        assert!(canonical_text("printf '\u{3}'").starts_with("command eval"));
        assert!(canonical_text(&"x".repeat(EXEC_LINE_BYTES + 1)).starts_with("command eval"));
    }
}
