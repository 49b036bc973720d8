//! The live view's only style sheet and script, served from `/ui/` (nothing is fetched
//! from another origin, so the page works offline). Written for this project; nothing
//! vendored.

use std::fmt::Write;
use std::sync::OnceLock;

/// Puts each update's server-rendered fragment into the page and says whether the page
/// is live. EventSource reconnects by itself when the stream drops.
pub const SCRIPT: &str = r#""use strict";
(function () {
  const body = document.body;
  const url = body.dataset.events;
  const live = document.getElementById("live");
  const state = document.getElementById("state");

  // A pipe page follows its newest output: the output box stays at its end unless the
  // owner scrolled up in it, and is left where the owner put it until they scroll back.
  let follow = true;
  const tail = function () { return live.querySelector("pre.tail"); };
  const atEnd = function (box) { return box.scrollHeight - box.scrollTop - box.clientHeight < 8; };
  live.addEventListener("scroll", function (event) {
    if (event.target !== tail()) return;
    follow = atEnd(event.target);
    live.dataset.following = follow ? "yes" : "no";
  }, true);
  live.dataset.following = "yes";
  const place = function (top) {
    const box = tail();
    if (box) box.scrollTop = follow ? box.scrollHeight : top;
  };
  place(0);

  if (url) {
    const source = new EventSource(url);
    source.onopen = function () { state.textContent = "live"; state.className = "state on"; };
    source.onerror = function () { state.textContent = "reconnecting"; state.className = "state off"; };
    source.onmessage = function (event) {
      const box = tail();
      const top = box ? box.scrollTop : 0;
      live.innerHTML = event.data;
      place(top);
    };
    source.addEventListener("gone", function (event) {
      live.innerHTML = event.data;
      state.textContent = "gone";
      state.className = "state off";
      source.close();
    });
  }

  // The recording player: frames of the server's replay, as a live page gets its updates.
  const frames = body.dataset.player;
  if (frames) {
    const duration = parseFloat(body.dataset.duration);
    const frame = document.getElementById("frame");
    const play = document.getElementById("play");
    const seek = document.getElementById("seek");
    const time = document.getElementById("time");
    const speed = document.getElementById("speed");
    let source = null;
    let position = 0;
    const setState = function (text, on) { state.textContent = text; state.className = on ? "state on" : "state off"; };
    const show = function (data) {
      const f = JSON.parse(data);
      if (f.html !== null) frame.innerHTML = f.html;
      position = f.t;
      seek.value = f.t;
      time.textContent = f.t.toFixed(1);
    };
    const stop = function () {
      if (source) source.close();
      source = null;
      play.textContent = "Play";
    };
    const open = function (once) {
      stop();
      const s = new EventSource(frames + "?from=" + position + "&speed=" + speed.value + (once ? "&once=1" : ""));
      s.addEventListener("frame", function (event) { show(event.data); });
      s.addEventListener("still", function (event) { show(event.data); s.close(); });
      s.addEventListener("end", function (event) {
        show(event.data);
        s.close();
        if (source === s) { source = null; play.textContent = "Play"; setState("ended", false); }
      });
      s.onerror = function () { s.close(); if (source === s) { stop(); setState("stopped", false); } };
      if (!once) { source = s; play.textContent = "Pause"; setState("playing", true); }
    };
    play.addEventListener("click", function () {
      if (source) { stop(); setState("paused", false); return; }
      if (position >= duration) position = 0;
      open(false);
    });
    seek.addEventListener("change", function () {
      position = parseFloat(seek.value);
      open(source === null);
    });
    speed.addEventListener("change", function () { if (source) open(false); });
    setState("paused", false);
  }

  // Owner control (--web-control): each action is a POST with the page's token.
  const csrf = body.dataset.csrf;
  const session = body.dataset.session;
  if (!csrf || !session) return;
  const result = document.getElementById("control-result");
  let sent = 0;
  const post = function (action, payload) {
    // Relative to the page's base, the view's own path.
    return fetch("sessions/" + encodeURIComponent(session) + "/" + action, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(payload || {})
    }).then(function (response) { return response.json(); }).then(function (answer) {
      if (answer.ok) {
        sent += 1;
        result.textContent = "done (" + sent + ")";
      } else {
        result.textContent = answer.error.code + ": " + answer.error.message;
      }
    }).catch(function (error) { result.textContent = String(error); });
  };
  const form = document.getElementById("type");
  if (form) {
    const text = document.getElementById("text");
    const enter = document.getElementById("enter");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      post("input", { text: text.value + (enter.checked ? "\r" : "") });
      text.value = "";
    });
    document.querySelectorAll("button.key").forEach(function (button) {
      button.addEventListener("click", function () { post("input", { keys: [button.dataset.key] }); });
    });
  }
  const terminate = document.getElementById("terminate");
  terminate.addEventListener("click", function () {
    if (terminate.dataset.armed !== "yes") {
      terminate.dataset.armed = "yes";
      terminate.textContent = "Click again to terminate";
      return;
    }
    post("terminate", {});
  });
})();
"#;

/// The icon: a terminal prompt on a dark tile.
pub const FAVICON: &str = r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="6" fill="#111"/><rect x="1.5" y="1.5" width="29" height="29" rx="5" fill="none" stroke="#4ec84e" stroke-width="2"/><path d="M8 10l6 6-6 6" fill="none" stroke="#4ec84e" stroke-width="3" stroke-linecap="round" stroke-linejoin="round"/><path d="M16 23h8" stroke="#e5e5e5" stroke-width="3" stroke-linecap="round"/></svg>
"##;

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
.badge.waiting{background:#fd6;color:#111;border-radius:3px;padding:0 .4em;font-weight:bold}
.facts span{margin-right:10px}
.title{color:#aaa;margin:4px 0}
pre{font:14px/1.25 ui-monospace,'DejaVu Sans Mono',monospace;margin:0;white-space:pre}
pre.screen{display:inline-block;color:#e5e5e5;padding:4px;border:1px solid #333;min-height:2em}
pre.tail{background:#000;padding:4px;border:1px solid #333;white-space:pre-wrap;word-break:break-all;max-height:70vh;overflow:auto}
h2{font-size:15px;margin:12px 0 6px}
dl.origin{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:6px 0 10px}
dl.origin dt{color:#aaa}dl.origin dd{margin:0}
code{font-family:ui-monospace,'DejaVu Sans Mono',monospace;background:#1c1c1c;padding:0 3px;border-radius:3px}
table.history{border-collapse:collapse;margin-bottom:10px}
table.history th,table.history td{padding:2px 10px;border-bottom:1px solid #333;text-align:left;vertical-align:top}
.exit0{color:#7e9}.exit1{color:#f77}
.note{color:#fb7}
.signin{max-width:720px;margin:24px auto;padding:16px 24px;background:#1a1a1a;border:1px solid #333;border-radius:8px}
.signin li{margin:6px 0}
div.player{margin:8px 0}div.player input[type=range]{width:50%;vertical-align:middle}
div.player button,div.player select{font:inherit}
section.control{margin-top:12px;padding:8px;border:1px solid #553;background:#1a1a10}
section.control input,section.control button{font:inherit}
button.key{margin-right:4px}
.stdout{color:#e5e5e5}.stderr{color:#ff8a80;background:#2a1010}
.w1,.w2{display:inline-block;overflow:hidden;text-align:center;vertical-align:bottom}
.w1{width:1ch}.w2{width:2ch}
.bold{font-weight:bold}.dim{opacity:.6}.italic{font-style:italic}.underline{text-decoration:underline}
.fbd{color:#000}.bfd{background:#e5e5e5}
";

/// The screen's background, against which the base colours are tuned.
const SCREEN_BACKGROUND: (u8, u8, u8) = (0, 0, 0);

/// Text colours of the 16 base colours, tuned for the dark screen: each at least 4.5:1
/// against it (WCAG AA), where xterm's dark blue and black are unreadable. Backgrounds keep
/// xterm's values.
const BASE_TEXT: [(u8, u8, u8); 16] = [
    (0x76, 0x76, 0x76),
    (0xf0, 0x52, 0x4f),
    (0x4e, 0xc8, 0x4e),
    (0xd7, 0xc3, 0x3a),
    (0x6b, 0x8c, 0xff),
    (0xd6, 0x70, 0xd6),
    (0x3f, 0xc1, 0xc1),
    (0xd0, 0xd0, 0xd0),
    (0x9a, 0x9a, 0x9a),
    (0xff, 0x6e, 0x67),
    (0x5f, 0xf9, 0x67),
    (0xfe, 0xfb, 0x67),
    (0x8f, 0xa8, 0xff),
    (0xff, 0x77, 0xff),
    (0x5f, 0xfd, 0xff),
    (0xff, 0xff, 0xff),
];

/// A text colour: the tuned base colours, else the xterm palette.
fn text_colour(i: u8) -> (u8, u8, u8) {
    BASE_TEXT.get(usize::from(i)).copied().unwrap_or(palette(i))
}

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
        let (r, g, b) = SCREEN_BACKGROUND;
        let _ = writeln!(css, "pre.screen{{background:#{r:02x}{g:02x}{b:02x}}}");
        for i in 0..=255u8 {
            let (r, g, b) = text_colour(i);
            let (br, bg, bb) = palette(i);
            let _ = writeln!(
                css,
                ".f{i}{{color:#{r:02x}{g:02x}{b:02x}}}.b{i}{{background:#{br:02x}{bg:02x}{bb:02x}}}"
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
        assert!(style_sheet().contains(".b4{background:#0000ee}"));
    }

    /// WCAG 2 relative luminance of an sRGB colour.
    fn luminance((r, g, b): (u8, u8, u8)) -> f64 {
        let channel = |c: u8| {
            let c = f64::from(c) / 255.0;
            if c <= 0.04045 {
                c / 12.92
            } else {
                ((c + 0.055) / 1.055).powf(2.4)
            }
        };
        0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)
    }

    fn contrast(a: (u8, u8, u8), b: (u8, u8, u8)) -> f64 {
        let (la, lb) = (luminance(a), luminance(b));
        (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
    }

    #[test]
    fn the_base_colours_are_readable_on_the_screen() {
        assert!((contrast((0, 0, 0), (255, 255, 255)) - 21.0).abs() < 1e-9);
        assert!(
            contrast(palette(4), SCREEN_BACKGROUND) < 4.5,
            "xterm's blue was not"
        );
        for i in 0..16u8 {
            let ratio = contrast(text_colour(i), SCREEN_BACKGROUND);
            assert!(ratio >= 4.5, "colour {i}: {ratio:.2}:1");
        }
        let (r, g, b) = SCREEN_BACKGROUND;
        let rule = format!("pre.screen{{background:#{r:02x}{g:02x}{b:02x}}}");
        assert!(style_sheet().contains(&rule));
    }
}
