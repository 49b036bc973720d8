//! The recording player: `/ui/recordings/{name}/play` is a page with play/pause, a seek bar
//! and a speed; `/ui/recordings/{name}/frames?from=S&speed=X` replays the file through the
//! server's emulator (`replay`) and streams its screen as Server-Sent Events, rendered by
//! the same function as a live session's screen. `&once=1` sends the one frame at `from`
//! (seeking while paused). The page needs no script but the view's own. The replaying and
//! rendering run on blocking threads, never on the thread that serves every call.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use futures::stream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::replay::{Cast, Replay};
use super::{View, pages, recordings_busy};
use crate::limits::WEB_UPDATE_EVERY;

/// The longest the player goes without a frame while playing (its clock moves on).
const TICK: Duration = Duration::from_millis(500);

/// The parsed recording `name`, if it is one of a retained session's, and `slot` back.
async fn load(
    view: &View,
    name: &str,
    slot: OwnedSemaphorePermit,
) -> Result<(Cast, OwnedSemaphorePermit), Response> {
    let (text, slot) = match view.recording_bytes(name, slot).await {
        Ok(read) => read,
        Err(unread) => {
            return Err(
                (StatusCode::NOT_FOUND, view.recording_unread(name, unread)).into_response()
            );
        }
    };
    let parsed = off_thread(slot, move || Cast::parse(text)).await;
    let Some((parsed, slot)) = parsed else {
        return Err(unplayable());
    };
    parsed.map(|cast| (cast, slot)).map_err(|why| {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            pages::refusal(
                &view.base(),
                "Cannot play",
                &format!("The recording {name} cannot be played: {why}."),
            ),
        )
            .into_response()
    })
}

/// `work` on a blocking thread: replaying a recording through the emulator and rendering
/// its screens takes long for a large one, and the runtime's one thread serves every call.
/// The work holds `slot`, handed back with its result: a client gone meanwhile frees the
/// slot only once the work ends. `None` if it could not finish (it panicked).
async fn off_thread<T: Send + 'static>(
    slot: OwnedSemaphorePermit,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<(T, OwnedSemaphorePermit)> {
    tokio::task::spawn_blocking(move || (work(), slot))
        .await
        .ok()
}

fn unplayable() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal Server Error: the recording could not be replayed.\n",
    )
        .into_response()
}

pub async fn page(State(view): State<Arc<View>>, Path(name): Path<String>) -> Response {
    let Some(slot) = view.recording_slot() else {
        return recordings_busy();
    };
    let (cast, slot) = match load(&view, &name, slot).await {
        Ok(loaded) => loaded,
        Err(refusal) => return refusal,
    };
    let base = view.base();
    off_thread(slot, move || {
        let mut replay = Replay::new(cast);
        Html(pages::player_page(
            &base,
            &name,
            replay.duration(),
            &replay.frame(),
        ))
        .into_response()
    })
    .await
    .map_or_else(unplayable, |(page, _)| page)
}

struct Playing {
    replay: Replay,
    /// Where the stream started, in recording seconds, and when.
    from: f64,
    began: Instant,
    speed: f64,
    once: bool,
    first: bool,
    last_html: String,
    ended: bool,
    /// Held while it plays, and by the work on a blocking thread it moves to.
    _slot: OwnedSemaphorePermit,
}

impl Playing {
    /// The frame at `at`: its time, and its screen when it changed.
    fn frame(&mut self, at: f64, kind: &'static str) -> Event {
        let mut html = String::new();
        pages::screen_fragment(&self.replay.frame(), &mut html);
        let changed = html != self.last_html;
        let data = serde_json::json!({"t": at, "html": changed.then_some(html.as_str())});
        if changed {
            self.last_html = html;
        }
        Event::default().event(kind).data(data.to_string())
    }
}

pub async fn frames(
    State(view): State<Arc<View>>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let number = |key: &str| query.get(key).map(|v| v.parse::<f64>());
    let from = match number("from") {
        None => 0.0,
        Some(Ok(s)) if s.is_finite() && s >= 0.0 => s,
        Some(_) => return bad("`from` must be a number of seconds, 0 or more"),
    };
    let speed = match number("speed") {
        None => 1.0,
        Some(Ok(x)) if (0.1..=16.0).contains(&x) => x,
        Some(_) => return bad("`speed` must be a number from 0.1 to 16"),
    };
    let once = query.get("once").is_some_and(|v| v == "1");
    let Some(slot) = view.recording_slot() else {
        return recordings_busy();
    };
    let (cast, slot) = match load(&view, &name, slot).await {
        Ok(loaded) => loaded,
        Err(refusal) => return refusal,
    };
    let seeked = off_thread(slot, move || {
        let mut replay = Replay::new(cast);
        let from = from.min(replay.duration());
        replay.advance_to(from);
        (replay, from)
    })
    .await;
    let Some(((replay, from), slot)) = seeked else {
        return unplayable();
    };
    let playing = Playing {
        replay,
        from,
        began: Instant::now(),
        speed,
        once,
        first: true,
        last_html: String::new(),
        ended: false,
        _slot: slot,
    };
    let stream = stream::unfold(playing, |mut p| async move {
        if p.ended {
            return None;
        }
        if std::mem::take(&mut p.first) {
            let done = p.once || p.replay.next_at().is_none();
            let kind = if p.once {
                "still"
            } else if done {
                "end"
            } else {
                "frame"
            };
            p.ended = done;
            let at = p.from;
            return tokio::task::spawn_blocking(move || {
                let event = p.frame(at, kind);
                (Ok::<_, Infallible>(event), p)
            })
            .await
            .ok();
        }
        let now = p.from + p.began.elapsed().as_secs_f64() * p.speed;
        let next = p.replay.next_at().unwrap_or(now);
        // A recording may put an event at any time (1e20 s): past what a Duration holds,
        // the player waits its longest.
        let wait = Duration::try_from_secs_f64(((next - now) / p.speed).max(0.0)).unwrap_or(TICK);
        tokio::time::sleep(wait.clamp(WEB_UPDATE_EVERY, TICK)).await;
        let at = (p.from + p.began.elapsed().as_secs_f64() * p.speed).min(p.replay.duration());
        tokio::task::spawn_blocking(move || {
            p.replay.advance_to(at);
            let kind = if p.replay.next_at().is_none() {
                p.ended = true;
                "end"
            } else {
                "frame"
            };
            let event = p.frame(at, kind);
            (Ok(event), p)
        })
        .await
        .ok()
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn bad(why: &str) -> Response {
    (StatusCode::BAD_REQUEST, format!("Bad Request: {why}.\n")).into_response()
}
