//! Concurrency: a storm of paused floods read by several client tasks at once, with the
//! latency of a status call meanwhile and the bytes delivered (none may be lost).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use super::calls::{Paging, READ_WAIT_MS, read_pages, start, status};
use super::report::{Metric, mb_per_s, ms};
use super::workload::{Servers, Setup, Workload};

/// Sessions of the storm, and the client tasks reading them.
const STORM_SESSIONS: usize = 64;
const STORM_READERS: usize = 8;
/// Lines of `flood` each storm session writes (100 bytes each, plus the summary line).
const STORM_LINES: u64 = 2_000;

pub const STORM: Workload = Workload {
    name: "storm",
    about: "64 `on_full: pause` sessions of `demo-process flood 2000` at once (buffer 32,768 \
         records each) read to the end by 8 client tasks, while one more task calls \
         `terminal_status` every 5 ms",
};

/// 64 sessions flooding at once in pause mode while 8 client tasks read them; one more task
/// times `terminal_status` meanwhile.
pub async fn storm(servers: &Servers) -> Result<Vec<Metric>, String> {
    let demo = servers.demo().display().to_string();
    let setup = Setup {
        name: "storm",
        limits: json!({"max_sessions": STORM_SESSIONS, "max_records": STORM_SESSIONS,
                       "buffer_bytes": 1_048_576, "buffer_records": 32_768}),
        profiles: json!({"storm": {"argv": [demo, "flood", STORM_LINES.to_string()],
                                   "on_full": "pause"}}),
    };
    servers
        .with(&setup, async |mcp| {
            let mut sids = Vec::new();
            let began = Instant::now();
            for _ in 0..STORM_SESSIONS {
                sids.push(start(mcp, "storm").await?);
            }
            let done = AtomicBool::new(false);
            let reader = |k: usize| {
                let mine: Vec<&String> = sids.iter().skip(k).step_by(STORM_READERS).collect();
                async move {
                    let mut total = 0u64;
                    for sid in mine {
                        total += read_pages(mcp, sid, 0, Paging::waiting(READ_WAIT_MS))
                            .await?
                            .bytes;
                    }
                    Ok::<u64, String>(total)
                }
            };
            let probe = async {
                let mut samples = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    status(mcp, &sids[0]).await?;
                    samples.push(ms(began.elapsed()));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok::<Vec<f64>, String>(samples)
            };
            let readers = async {
                let r = tokio::join!(
                    reader(0),
                    reader(1),
                    reader(2),
                    reader(3),
                    reader(4),
                    reader(5),
                    reader(6),
                    reader(7)
                );
                done.store(true, Ordering::Relaxed);
                [r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7]
            };
            let (totals, probe) = tokio::join!(readers, probe);
            let elapsed = began.elapsed();
            let mut delivered = 0;
            for total in totals {
                delivered += total?;
            }
            let written = STORM_SESSIONS as u64
                * (STORM_LINES * 100
                    + format!("flood total: {} code points\n", STORM_LINES * 100).len() as u64);
            Ok(vec![
                Metric::value("delivered_bytes", "bytes", delivered as f64),
                Metric::value(
                    "lost_bytes",
                    "bytes",
                    written.saturating_sub(delivered) as f64,
                ),
                Metric::value("delivered_rate", "MB/s", mb_per_s(delivered, elapsed)),
                Metric::distribution("status_during_storm", "ms", &probe?),
            ])
        })
        .await
}
