//! A command that redraws a progress line 20,000 times, run by `terminal_exec` on a
//! terminal: the bytes the agent gets (the line as the terminal leaves it) beside the raw
//! bytes the command wrote.

use serde_json::{Value, json};

use super::calls::{call, end, start};
use super::report::Metric;
use super::workload::{Servers, Setup, Workload, timed};

pub const PROGRESS_BAR: Workload = Workload {
    name: "progress_bar",
    about: "terminal_exec on a terminal (`bash -i`) of a loop that redraws a progress line \
         20,000 times with `\\r` and ends it with a newline: the bytes of the output the \
         call returns (the text as the terminal leaves it, the default) beside the raw bytes \
         the command wrote (the same command with `raw: true`), and each call's time",
};

const REDRAWS: u32 = 20_000;

pub async fn progress_bar(servers: &Servers) -> Result<Vec<Metric>, String> {
    let setup = Setup {
        name: "progress_bar",
        limits: json!({}),
        profiles: json!({"bench-bash": {
            "argv": ["/bin/bash", "--noprofile", "--norc", "-i"],
            "mode": "pty",
            "shell": "posix",
        }}),
    };
    let command = format!(
        "for i in $(seq 1 {REDRAWS}); do printf '\\rprogress %5d/{REDRAWS}' $i; done; echo"
    );
    servers
        .with(&setup, async |mcp| {
            let sid = start(mcp, "bench-bash").await?;
            let run = async |raw: bool| {
                let args = json!({"session_id": sid, "command": command, "raw": raw,
                                  "max_bytes": 1_048_576, "timeout_ms": 60_000});
                let (result, took) = timed(call(mcp, "terminal_exec", args)).await?;
                if result["outcome"] != "completed" || result["exit_code"] != 0 {
                    return Err(format!("the progress bar answered {result}"));
                }
                let output = result["output"].as_str().unwrap_or_default().to_owned();
                Ok::<(String, f64, Value), String>((output, took, result))
            };
            let rendered = run(false).await;
            let raw = run(true).await;
            end(mcp, &sid).await?;
            let (rendered, rendered_ms, _) = rendered?;
            let (raw, raw_ms, raw_result) = raw?;
            let want = format!("progress {REDRAWS}/{REDRAWS}\n");
            if rendered != want {
                return Err(format!(
                    "the rendered output is {} bytes, not the final line {want:?}: {:?}…",
                    rendered.len(),
                    rendered.chars().take(200).collect::<String>()
                ));
            }
            if raw_result.get("omitted").is_some_and(|o| !o.is_null()) {
                return Err("the raw output was cut; raise max_bytes".into());
            }
            Ok(vec![
                Metric::value("rendered_bytes", "bytes", rendered.len() as f64),
                Metric::value("raw_bytes", "bytes", raw.len() as f64),
                Metric::value("rendered_call", "ms", rendered_ms),
                Metric::value("raw_call", "ms", raw_ms),
            ])
        })
        .await
}
