//! `terminal_exec`: a command's round trip in a persistent shell, on pipes and on a
//! terminal, beside the write→echo floor.

use serde_json::{Value, json};

use super::calls::{call, end, start};
use super::report::Metric;
use super::workload::{Workload, timed};
use crate::client::McpServer;

pub const EXEC_ROUNDTRIP: Workload = Workload {
    name: "exec_roundtrip_ms",
    about: "terminal_exec of `true` and of `echo hi` (output checked) in a persistent shell: \
         `/bin/sh` on pipes and `bash -i` on a terminal, beside the write→echo floor above",
};

/// The shells `exec_roundtrip_ms` runs commands in: sh on pipes, bash on a terminal.
pub fn exec_profiles() -> Value {
    json!({
        "bench-sh": {"argv": ["/bin/sh"], "shell": "posix"},
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
    for (mode, command_id) in [("pipe", "bench-sh"), ("pty", "bench-bash")] {
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
    let commands = [("true", ""), ("echo hi", "hi\n")];
    // The first call also sets the shell up; it is not a sample.
    exec_checked(mcp, sid, commands[0]).await?;
    let mut samples = [Vec::new(), Vec::new()];
    for _ in 0..n {
        for (sample, command) in samples.iter_mut().zip(commands) {
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
