//! The live view's only style sheet and script, served from `/ui/` (nothing is fetched
//! from another origin, so the page works offline). Written for this project; nothing
//! vendored.

use std::fmt::Write;
use std::sync::OnceLock;

/// Puts each update's server-rendered fragment into the page and says whether the page
/// is live. EventSource reconnects by itself when the stream drops.
pub const SCRIPT: &str = r#""use strict";
(function () {
  const url = document.body.dataset.events;
  const live = document.getElementById("live");
  const state = document.getElementById("state");
  if (!url) return;
  const source = new EventSource(url);
  source.onopen = function () { state.textContent = "live"; state.className = "state on"; };
  source.onerror = function () { state.textContent = "reconnecting"; state.className = "state off"; };
  source.onmessage = function (event) { live.innerHTML = event.data; };
  source.addEventListener("gone", function (event) {
    live.innerHTML = event.data;
    state.textContent = "gone";
    state.className = "state off";
    source.close();
  });
})();
"#;

const BASE: &str = "body{margin:0;background:#111;color:#ddd;font:14px/1.4 system-ui,sans-serif}
header{padding:6px 12px;background:#222;border-bottom:1px solid #333}
header a{color:#fff;font-weight:bold;text-decoration:none}
main{padding:8px 12px}
h1{font-size:18px;margin:4px 0 8px}
h1 .id{color:#888;font-weight:normal;font-family:monospace}
a{color:#8cf}
.state{margin-left:8px;font-size:12px;padding:1px 6px;border-radius:8px}
.state.on{background:#143;color:#7e9}
.state.off{background:#431;color:#fb7}
table.sessions{border-collapse:collapse}
table.sessions th,table.sessions td{padding:3px 10px;border-bottom:1px solid #333;text-align:left}
table.sessions td{font-family:monospace}
.none{color:#888}
.status.RUNNING{color:#7e9}.status.TERMINATING{color:#fb7}
.status.EXITED,.status.TERMINATED{color:#aaa}.status.FAILED{color:#f77}
.facts span{margin-right:10px}
.title{color:#aaa;margin:4px 0}
pre{font:14px/1.25 ui-monospace,'DejaVu Sans Mono',monospace;margin:0;white-space:pre}
pre.screen{display:inline-block;background:#000;color:#e5e5e5;padding:4px;border:1px solid #333;min-height:2em}
pre.tail{background:#000;padding:4px;border:1px solid #333;white-space:pre-wrap;word-break:break-all}
.stdout{color:#e5e5e5}.stderr{color:#ff8a80;background:#2a1010}
.bold{font-weight:bold}.dim{opacity:.6}.italic{font-style:italic}.underline{text-decoration:underline}
.fbd{color:#000}.bfd{background:#e5e5e5}
";

/// The xterm palette: 16 system colours, the 6×6×6 cube, 24 greys.
fn palette(i: u8) -> (u8, u8, u8) {
    const SYSTEM: [(u8, u8, u8); 16] = [
        (0, 0, 0),
        (205, 0, 0),
        (0, 205, 0),
        (205, 205, 0),
        (0, 0, 238),
        (205, 0, 205),
        (0, 205, 205),
        (229, 229, 229),
        (127, 127, 127),
        (255, 0, 0),
        (0, 255, 0),
        (255, 255, 0),
        (92, 92, 255),
        (255, 0, 255),
        (0, 255, 255),
        (255, 255, 255),
    ];
    const LEVELS: [u8; 6] = [0, 95, 135, 175, 215, 255];
    match i {
        0..16 => SYSTEM[usize::from(i)],
        16..232 => {
            let n = usize::from(i - 16);
            (LEVELS[n / 36], LEVELS[n / 6 % 6], LEVELS[n % 6])
        }
        _ => {
            let v = 8 + 10 * (i - 232);
            (v, v, v)
        }
    }
}

pub fn style_sheet() -> &'static str {
    static SHEET: OnceLock<String> = OnceLock::new();
    SHEET.get_or_init(|| {
        let mut css = String::from(BASE);
        for i in 0..=255u8 {
            let (r, g, b) = palette(i);
            let _ = writeln!(
                css,
                ".f{i}{{color:#{r:02x}{g:02x}{b:02x}}}.b{i}{{background:#{r:02x}{g:02x}{b:02x}}}"
            );
        }
        // Later rules win: the cursor stays visible on any colour.
        css.push_str(".cursor{outline:1px solid #fff;background:#e5e5e5;color:#000}\n");
        css
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_palette_has_the_xterm_values() {
        assert_eq!(palette(1), (205, 0, 0));
        assert_eq!(palette(16), (0, 0, 0));
        assert_eq!(palette(196), (255, 0, 0));
        assert_eq!(palette(231), (255, 255, 255));
        assert_eq!(palette(244), (128, 128, 128));
        assert!(style_sheet().contains(".f196{color:#ff0000}"));
    }
}
