//! `terminal_exec`: a command's round trip in a persistent shell, on pipes and on a
//! terminal; `terminal_run`: a one-shot `/bin/sh -c LINE`; each beside its floor with no MCP
//! at all: a persistent `/bin/sh` on pipes driven with a marker protocol, and `/bin/sh -c
//! LINE` spawned directly.

use serde_json::{Value, json};

use super::calls::{call, end, start};
use super::report::{Metric, ms};
use super::workload::{Workload, timed};
use crate::client::McpServer;
use crate::floor;

pub const EXEC_ROUNDTRIP: Workload = Workload {
    name: "exec_roundtrip_ms",
    about: "terminal_exec of `true` and of `echo hi` (output checked) in a persistent shell: \
         `/bin/sh` on pipes (`pipe_*`), bash on pipes (`bash_pipe_*`) and `bash -i` on a \
         terminal (`pty_*`)",
};

pub const RUN_ROUNDTRIP: Workload = Workload {
    name: "run_roundtrip_ms",
    about: "terminal_run of `/bin/sh -c true` and of `/bin/sh -c 'echo hi'` (output checked), \
         each a profile of its own",
};

pub const SHELL_FLOORS: Workload = Workload {
    name: "shell_floors",
    about: "no MCP at all, in-process: `true` and `echo hi` (output checked) in a persistent \
         shell on pipes, each written with a marker line after it and read up to the \
         marker (`exec_*`: `/bin/sh`, the floor of terminal_exec; `bash_exec_*`: bash, the \
         floor of terminal_exec in bash on pipes), and `/bin/sh -c LINE` spawned with \
         stdout and stderr read to their end and the exit awaited (`run_*`: the floor of \
         terminal_run)",
};

/// The commands both workloads and both floors run, with the output each must give.
const COMMANDS: [(&str, &str); 2] = [("true", ""), ("echo hi", "hi\n")];

/// The shells `exec_roundtrip_ms` runs commands in: sh and bash on pipes, bash on a
/// terminal; and the one-shots `run_roundtrip_ms` runs.
pub fn exec_profiles() -> Value {
    json!({
        "bench-run-true": {"argv": ["/bin/sh", "-c", COMMANDS[0].0]},
        "bench-run-echo": {"argv": ["/bin/sh", "-c", COMMANDS[1].0]},
        "bench-sh": {"argv": ["/bin/sh"], "shell": "posix"},
        "bench-bash-pipe": {"argv": floor::BASH_FLOOR, "shell": "posix"},
        "bench-bash": {
            "argv": ["/bin/bash", "--noprofile", "--norc", "-i"],
            "mode": "pty",
            "shell": "posix",
        },
    })
}

/// terminal_exec round trips of `true` and `echo hi`, on pipes and on a terminal.
pub async fn exec_roundtrip(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
    let mut metrics = Vec::new();
    let shells = [
        ("pipe", "bench-sh"),
        ("bash_pipe", "bench-bash-pipe"),
        ("pty", "bench-bash"),
    ];
    for (mode, command_id) in shells {
        let sid = start(mcp, command_id).await?;
        let result = exec_samples(mcp, &sid, n).await;
        let ended = end(mcp, &sid).await;
        let [true_ms, echo_ms] = result?;
        ended?;
        metrics.push(Metric::distribution(
            &format!("{mode}_true"),
            "ms",
            &true_ms,
        ));
        metrics.push(Metric::distribution(
            &format!("{mode}_echo_hi"),
            "ms",
            &echo_ms,
        ));
    }
    Ok(metrics)
}

async fn exec_samples(mcp: &McpServer, sid: &str, n: usize) -> Result<[Vec<f64>; 2], String> {
    // The first call also sets the shell up; it is not a sample.
    exec_checked(mcp, sid, COMMANDS[0]).await?;
    let mut samples = [Vec::new(), Vec::new()];
    for _ in 0..n {
        for (sample, command) in samples.iter_mut().zip(COMMANDS) {
            let ((), took) = timed(exec_checked(mcp, sid, command)).await?;
            sample.push(took);
        }
    }
    Ok(samples)
}

async fn exec_checked(
    mcp: &McpServer,
    sid: &str,
    (command, want): (&str, &str),
) -> Result<(), String> {
    let r = call(
        mcp,
        "terminal_exec",
        json!({"session_id": sid, "command": command}),
    )
    .await?;
    if r["outcome"] == "completed" && r["exit_code"] == 0 && r["output"] == want {
        Ok(())
    } else {
        Err(format!("terminal_exec `{command}` answered {r}"))
    }
}

/// terminal_run round trips of `/bin/sh -c true` and `/bin/sh -c 'echo hi'`.
pub async fn run_roundtrip(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
    let mut samples = [Vec::new(), Vec::new()];
    for _ in 0..n {
        for ((sample, profile), (_, want)) in samples
            .iter_mut()
            .zip(["bench-run-true", "bench-run-echo"])
            .zip(COMMANDS)
        {
            let (r, took) =
                timed(call(mcp, "terminal_run", json!({"command_id": profile}))).await?;
            if r["exit_code"] != 0 || r["stdout"] != want {
                return Err(format!("terminal_run of `{profile}` answered {r}"));
            }
            sample.push(took);
            // Not timed: the run's session is dropped so the retained-session limit holds.
            let sid = r.pointer("/session/session_id").cloned();
            let sid = sid.ok_or_else(|| format!("terminal_run answered no session: {r}"))?;
            call(mcp, "terminal_forget", json!({"session_id": sid})).await?;
        }
    }
    let [true_ms, echo_ms] = samples;
    Ok(vec![
        Metric::distribution("run_true", "ms", &true_ms),
        Metric::distribution("run_echo_hi", "ms", &echo_ms),
    ])
}

/// The floors of both: the same commands in a persistent `/bin/sh` driven directly, and
/// as `/bin/sh -c LINE` spawned directly; the first command of the shell is not a sample.
pub async fn shell_floors(n: usize) -> Result<Vec<Metric>, String> {
    tokio::task::spawn_blocking(move || shell_floor_samples(n))
        .await
        .map_err(|e| e.to_string())?
}

fn shell_floor_samples(n: usize) -> Result<Vec<Metric>, String> {
    let check = |what: &str, (output, status): (String, i32), want: &str| {
        if status == 0 && output == want {
            Ok(())
        } else {
            Err(format!("{what} gave {output:?} and status {status}"))
        }
    };
    let mut sh = floor::ShellFloor::start(&["/bin/sh"])?;
    let mut bash = floor::ShellFloor::start(floor::BASH_FLOOR)?;
    check("the shell floor", sh.exec(COMMANDS[0].0)?, COMMANDS[0].1)?;
    check("the bash floor", bash.exec(COMMANDS[0].0)?, COMMANDS[0].1)?;
    let mut samples: [Vec<f64>; 6] = Default::default();
    for _ in 0..n {
        for (i, (command, want)) in COMMANDS.into_iter().enumerate() {
            for (j, (what, shell)) in [("the shell floor", &mut sh), ("the bash floor", &mut bash)]
                .into_iter()
                .enumerate()
            {
                let began = std::time::Instant::now();
                let exec = shell.exec(command)?;
                samples[2 * j + i].push(ms(began.elapsed()));
                check(what, exec, want)?;
            }
            let began = std::time::Instant::now();
            let run = floor::sh_c(command)?;
            samples[4 + i].push(ms(began.elapsed()));
            check("`/bin/sh -c`", run, want)?;
        }
    }
    let names = [
        "exec_true",
        "exec_echo_hi",
        "bash_exec_true",
        "bash_exec_echo_hi",
        "run_true",
        "run_echo_hi",
    ];
    Ok(names
        .into_iter()
        .zip(samples)
        .map(|(name, s)| Metric::distribution(name, "ms", &s))
        .collect())
}
